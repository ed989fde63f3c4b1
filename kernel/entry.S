# _entry: the first instructions every hart runs, in machine mode, at 0x80000000
# (QEMU's -kernel loads us there and jumps with a0 = hartid).
# Contract: give each hart its own 8 KiB boot stack inside stack0 (start.c),
# sp = stack0 + (hartid + 1) * 8192, then call start(), which never returns.
        .section .entry, "ax"
        .global _entry
_entry:
        la      sp, stack0
        li      a0, 8192
        csrr    a1, mhartid
        addi    a1, a1, 1
        mul     a0, a0, a1
        add     sp, sp, a0
        call    start
hang:
        wfi
        j       hang
