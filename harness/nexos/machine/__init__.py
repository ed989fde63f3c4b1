"""The machine: build configurations, the C side's values, the toolchain, make, QEMU
sessions, ELF sizes and `nexos doctor` (docs/harness.md)."""
