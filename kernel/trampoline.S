# The trampoline: trap entry from user mode and the return to it. The linker puts this
# code on its own page (kernel.ld, symbol "trampoline"), and vm.c/proc.c map that page at
# TRAMPOLINE in the kernel's and in every user page table, so these instructions keep
# running while satp switches between the two.
#
# Register save area: the process's trapframe, mapped at TRAPFRAME in the user page
# table only. Offsets are those of struct trapframe in proc.h.

#define TRAPFRAME_VA 0x3fffffe000   /* TRAPFRAME = MAXVA - 2*PGSIZE; trap.c checks it */

        .section trampsec
        .globl uservec
        .globl userret
        .align 4

# uservec: stvec while in user mode. Runs in S-mode with the user page table.
# Contract: save all 31 user registers in the trapframe, switch to the kernel page
# table, this process's kernel stack and hart id, and jump to usertrap() (which never
# returns here). sepc, scause, stval still describe the trap.
uservec:
        csrw sscratch, a0          # free a0 to address the trapframe
        li a0, TRAPFRAME_VA
        sd ra, 40(a0)
        sd sp, 48(a0)
        sd gp, 56(a0)
        sd tp, 64(a0)
        sd t0, 72(a0)
        sd t1, 80(a0)
        sd t2, 88(a0)
        sd s0, 96(a0)
        sd s1, 104(a0)
        sd a1, 120(a0)
        sd a2, 128(a0)
        sd a3, 136(a0)
        sd a4, 144(a0)
        sd a5, 152(a0)
        sd a6, 160(a0)
        sd a7, 168(a0)
        sd s2, 176(a0)
        sd s3, 184(a0)
        sd s4, 192(a0)
        sd s5, 200(a0)
        sd s6, 208(a0)
        sd s7, 216(a0)
        sd s8, 224(a0)
        sd s9, 232(a0)
        sd s10, 240(a0)
        sd s11, 248(a0)
        sd t3, 256(a0)
        sd t4, 264(a0)
        sd t5, 272(a0)
        sd t6, 280(a0)
        csrr t0, sscratch
        sd t0, 112(a0)             # the user's a0

        ld sp, 8(a0)               # kernel_sp
        ld tp, 32(a0)              # kernel_hartid
        ld t0, 16(a0)              # kernel_trap: usertrap()
        ld t1, 0(a0)               # kernel_satp

        csrw satp, t1
        sfence.vma zero, zero      # drop the user translations (see userret)
        jr t0

# userret(uint64 satp): called by usertrapret() through its TRAMPOLINE address.
# Contract: switch to the user page table in a0, restore the user registers from the
# trapframe and sret to sepc in user mode (sstatus already prepared by usertrapret).
# One fence, after the satp write, as Linux switches address spaces: it orders the
# kernel's earlier stores to page-table memory before the walks that follow, and drops the
# translations of the table left. A fence before the write as well would order nothing
# more, and costs: QEMU flushes its whole TLB and jump cache at every sfence.vma (and at
# every satp write), a fifth of the time of a test that faults in page after page.
userret:
        csrw satp, a0
        sfence.vma zero, zero

        li a0, TRAPFRAME_VA
        ld ra, 40(a0)
        ld sp, 48(a0)
        ld gp, 56(a0)
        ld tp, 64(a0)
        ld t0, 72(a0)
        ld t1, 80(a0)
        ld t2, 88(a0)
        ld s0, 96(a0)
        ld s1, 104(a0)
        ld a1, 120(a0)
        ld a2, 128(a0)
        ld a3, 136(a0)
        ld a4, 144(a0)
        ld a5, 152(a0)
        ld a6, 160(a0)
        ld a7, 168(a0)
        ld s2, 176(a0)
        ld s3, 184(a0)
        ld s4, 192(a0)
        ld s5, 200(a0)
        ld s6, 208(a0)
        ld s7, 216(a0)
        ld s8, 224(a0)
        ld s9, 232(a0)
        ld s10, 240(a0)
        ld s11, 248(a0)
        ld t3, 256(a0)
        ld t4, 264(a0)
        ld t5, 272(a0)
        ld t6, 280(a0)
        ld a0, 112(a0)             # the user's a0, last
        sret
