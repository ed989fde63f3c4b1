// start(): machine-mode setup on every hart, then a drop to supervisor mode in main().
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

#define STACK_PER_HART 8192   // entry.S uses the same figure

void main(void);

// Boot stacks for entry.S: hart h uses [stack0 + h*STACK_PER_HART, stack0 + (h+1)*STACK_PER_HART).
__attribute__ ((aligned (16))) char stack0[STACK_PER_HART * NCPU];

// Number of harts that have reached start(); each adds itself once with an atomic add.
// Read by nharts() in proc.c.
volatile int booted_harts;

// menvcfg.STCE (bit 63): let supervisor mode use the Sstc stimecmp register.
#define MENVCFG_STCE (1L << 63)
// counter-enable bits shared by mcounteren and scounteren
#define COUNTEREN_CY (1L << 0)   // cycle
#define COUNTEREN_TM (1L << 1)   // time

// Contract: called by entry.S on each hart in M-mode with the hart's boot stack, the
// hart id and the device tree's physical address (fdt.c). Leaves M-mode forever: mret
// lands in main() in S-mode with paging off, all traps and interrupts delegated to
// S-mode, the supervisor timer armed.
void
start(uint64 hartid, uint64 fdt)
{
  if(hartid == 0)
    boot_fdt = fdt;   // read by hart 0 in main(), before any other use of the memory

  // mret goes to supervisor mode, at main().
  uint64 x = r_mstatus();
  x = (x & ~MSTATUS_MPP_MASK) | MSTATUS_MPP_S;
  w_mstatus(x);
  w_mepc((uint64)main);

  w_satp(0);  // paging stays off until kvminithart()

  // Every exception and interrupt is handled in S-mode.
  w_medeleg(0xffff);
  w_mideleg(0xffff);
  w_sie(r_sie() | SIE_SEIE | SIE_STIE);

  // One PMP region covering all of memory, read/write/execute for S and U.
  w_pmpaddr0(0x3fffffffffffffull);
  w_pmpcfg0(0xf);

  // The timer: S-mode programs stimecmp itself (Sstc); S and U may read time and cycle.
  w_mie(r_mie() | MIE_STIE);
  w_menvcfg(r_menvcfg() | MENVCFG_STCE);
  w_mcounteren(r_mcounteren() | COUNTEREN_TM | COUNTEREN_CY);   // S may read them
  w_scounteren(r_scounteren() | COUNTEREN_TM | COUNTEREN_CY);   // and so may U (rdtime, rdcycle)
  w_stimecmp(r_time() + TICK_CYCLES);

  // cpuid() reads the hart id from tp.
  w_tp(r_mhartid());

  __sync_fetch_and_add(&booted_harts, 1);

  asm volatile("mret");
}
