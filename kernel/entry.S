# _entry: the first instructions every hart runs, in machine mode, at 0x80000000
# (QEMU's -kernel loads us there and jumps with a0 = hartid, a1 = the device tree).
# Contract: give each hart its own 8 KiB boot stack inside stack0 (start.c),
# sp = stack0 + (hartid + 1) * 8192, then call start(a0, a1), which never returns;
# only t0 and t1 are used, so a0 and a1 reach start() as QEMU set them.
        .section .entry, "ax"
        .global _entry
_entry:
        la      sp, stack0
        li      t0, 8192
        csrr    t1, mhartid
        addi    t1, t1, 1
        mul     t0, t0, t1
        add     sp, sp, t0
        call    start
hang:
        wfi
        j       hang
