// The RISC-V platform-level interrupt controller (PLIC): routes device interrupts
// (UART, virtio disk) to the harts' supervisor mode.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

#define REG32(a) (*(volatile uint32 *)(a))

// Contract: give the devices NexOS uses a non-zero priority (zero means disabled).
// Called once, by hart 0.
void
plicinit(void)
{
  REG32(PLIC_PRIORITY + UART0_IRQ*4) = 1;
  REG32(PLIC_PRIORITY + VIRTIO0_IRQ*4) = 1;
  REG32(PLIC_PRIORITY + VIRTIO1_IRQ*4) = 1;
}

// Contract: let this hart's S-mode take the UART and both disks' interrupts
// (enable bits set, priority threshold 0).
void
plicinithart(void)
{
  int hart = cpuid();

  REG32(PLIC_SENABLE(hart)) = (1 << UART0_IRQ) | (1 << VIRTIO0_IRQ) | (1 << VIRTIO1_IRQ);
  REG32(PLIC_SPRIORITY(hart)) = 0;
}

// Contract: claim the highest-priority pending interrupt for this hart; its IRQ
// number, or 0 if none is pending. Pair with plic_complete().
int
plic_claim(void)
{
  return REG32(PLIC_SCLAIM(cpuid()));
}

// Contract: tell the PLIC this hart has finished with irq (from plic_claim).
void
plic_complete(int irq)
{
  REG32(PLIC_SCLAIM(cpuid())) = irq;
}
