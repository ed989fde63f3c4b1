// main(): where every hart arrives in supervisor mode (from start.c).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

// Set by hart 0 when the shared kernel state is ready; the other harts wait for it.
static volatile int started = 0;

// Contract: wait until the harts the device tree lists (at most NCPU) have counted
// themselves, so that nharts() is final before the configuration line. QEMU starts them
// all at once, but on a busy host a hart's thread may first run many ms later. The wait
// is bounded (a hart that never comes must not stop the boot); without a device tree it
// is the old guess: up to 100 ms for NCPU harts.
static void
wait_for_harts(int listed)
{
  uint64 t0 = r_time();
  uint64 bound = listed > 0 ? 2 * TIMEBASE_HZ : TIMEBASE_HZ / 10;
  int want = listed > 0 && listed < NCPU ? listed : NCPU;

  while(nharts() < want && r_time() - t0 < bound)
    ;
}

// Contract: hart 0 builds the kernel (devices, memory, process table, file system
// caches, the first process), prints the configuration line and lets the others go;
// every hart then turns on paging and traps and runs the scheduler. Never returns.
void
main(void)
{
  if(cpuid() == 0){
    int listed = fdt_cpu_count();   // before kinit() reuses the blob's memory
    consoleinit();
    printfinit();
    kinit();
    wait_for_harts(listed);
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
    pagecacheinit();
    virtio_disk_init();
    swapinit();
    oominit();
    userinit();
    printf("nexos: LAZY_ALLOC=%d COW_ALLOC=%d cpus=%d mem=%dM swap=%dM\n",
           LAZY_ALLOC, COW_ALLOC, nharts(), MEMSIZE_MB, swap_mb());
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
