// Physical memory layout of QEMU's virt machine, and the kernel's and a process's
// virtual layouts.
//
// Physical (qemu -machine virt):
//   0x00001000 boot ROM
//   0x02000000 CLINT (core-local interruptor)
//   0x0C000000 PLIC  (platform-level interrupt controller)
//   0x10000000 UART0 (16550)
//   0x10001000 virtio-mmio disk (the file system)
//   0x10002000 virtio-mmio disk (swap, when QEMU has a second drive)
//   0x80000000 RAM: the kernel's text and data, then free pages up to PHYSTOP
#include "kernel/param.h"

#define UART0     0x10000000L
#define UART0_IRQ 10

#define VIRTIO0     0x10001000L
#define VIRTIO0_IRQ 1

#define VIRTIO1     0x10002000L
#define VIRTIO1_IRQ 2

#define CLINT 0x2000000L

#define PLIC 0x0c000000L
#define PLIC_PRIORITY        (PLIC + 0x0)
#define PLIC_PENDING         (PLIC + 0x1000)
#define PLIC_SENABLE(hart)   (PLIC + 0x2080 + (hart)*0x100)
#define PLIC_SPRIORITY(hart) (PLIC + 0x201000 + (hart)*0x2000)
#define PLIC_SCLAIM(hart)    (PLIC + 0x201004 + (hart)*0x2000)

// The kernel maps RAM one-to-one from KERNBASE to PHYSTOP. The RAM size is not compiled
// in: one build boots with any QEMU -m from MINRAM_MB to MAXRAM_MB (param.h).
//   - The kernel reads it from the device tree at boot: hart 0 sets phystop in main()
//     before kinit(), and nothing changes it after, so reading it needs no lock.
//   - A user program (the Makefile compiles them with -DNEXOS_USER) asks the kernel:
//     ramtop() in user/ulib.c, KERNBASE + memstat's memsize_mb, asked once and remembered.
//     So a test that sizes itself from PHYSTOP - KERNBASE sees the RAM it booted with.
#define KERNBASE 0x80000000L
#define MAXPHYSTOP (KERNBASE + (uint64)MAXRAM_MB*1024*1024)  // PHYSTOP never exceeds it
#ifndef __ASSEMBLER__       // (a .S file may include this for the addresses)
#ifdef NEXOS_USER
uint64 ramtop(void);
#define PHYSTOP ramtop()
#else
extern uint64 phystop;
#define PHYSTOP phystop
#endif
#define RAM_MB ((int)((PHYSTOP - KERNBASE) >> 20))   // the RAM booted with, in MiB
#endif

// The trampoline page sits at the top of every address space, user and kernel.
#define TRAMPOLINE (MAXVA - PGSIZE)

// Kernel stacks sit below the trampoline, each above an unmapped guard page.
#define KSTACK(p) (TRAMPOLINE - ((p)+1)* 2*PGSIZE)

// A process's address space, from 0 up:
//   text and data (from the ELF file)
//   one guard page (mapped without PTE_U, so any user access faults)
//   the user stack (USERSTACK pages)
//   the heap, grown by sbrk up to p->sz
//   ...
//   TRAPFRAME (the trapframe page, kernel-only)
//   TRAMPOLINE (the trap entry/exit code)
#define TRAPFRAME (TRAMPOLINE - PGSIZE)
