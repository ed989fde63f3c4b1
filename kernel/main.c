// main(): where every hart arrives in supervisor mode (from start.c).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

// Set by hart 0 when the shared kernel state is ready; the other harts wait for it.
static volatile int started = 0;

// Contract: give harts still coming out of reset a moment (at most 100 ms) to count
// themselves, so that nharts() is final. QEMU starts them all at once, but on a busy host
// a hart's thread may first run several ms later (5 ms was seen to be too short).
static void
wait_for_harts(void)
{
  uint64 t0 = r_time();

  while(nharts() < NCPU && r_time() - t0 < TIMEBASE_HZ / 10)
    ;
}

// Contract: hart 0 builds the kernel (devices, memory, process table, file system
// caches, the first process), prints the configuration line and lets the others go;
// every hart then turns on paging and traps and runs the scheduler. Never returns.
void
main(void)
{
  if(cpuid() == 0){
    consoleinit();
    printfinit();
    kinit();
    wait_for_harts();
    kvminit();
    kvminithart();
    procinit();
    trapinit();
    trapinithart();
    plicinit();
    plicinithart();
    binit();
    iinit();
    fileinit();
    virtio_disk_init();
    userinit();
    printf("nexos: LAZY_ALLOC=%d COW_ALLOC=%d cpus=%d mem=%dM\n",
           LAZY_ALLOC, COW_ALLOC, nharts(), MEMSIZE_MB);
    __sync_synchronize();
    started = 1;
  } else {
    while(started == 0)
      ;
    __sync_synchronize();
    kvminithart();
    trapinithart();
    plicinithart();
  }
  scheduler();
}
