// main(): where every hart arrives in supervisor mode (from start.c).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

// Set by hart 0 when the shared kernel state is ready; the other harts wait for it.
static volatile int started = 0;

// The end of RAM, PHYSTOP (memlayout.h): set by hart 0 in raminit(), before kinit(), from
// the device tree; never changed after, so every reader may read it without a lock.
uint64 phystop;

// Contract: set phystop from the RAM the device tree lists. Hart 0, paging off, before
// kinit() (after which the tree's pages may be handed out) and any use of PHYSTOP. The
// tree is QEMU's, not user input, so RAM this kernel cannot run in is a boot error:
// panics unless RAM starts at KERNBASE and is a whole number of MiB in
// [MINRAM_MB, MAXRAM_MB].
static void
raminit(void)
{
  uint64 base, size, mib = 1024*1024;

  if(fdt_ram(&base, &size) < 0)
    panic("raminit: the device tree lists no RAM");
  if(base != KERNBASE || size % mib != 0 ||
     size < MINRAM_MB * mib || size > MAXRAM_MB * mib){
    printf("raminit: the device tree lists RAM at %p of %ld bytes; this kernel needs RAM "
           "at %p of a whole number of MiB from %d to %d\n",
           (void *)base, size, (void *)KERNBASE, MINRAM_MB, MAXRAM_MB);
    panic("raminit: RAM this kernel cannot use");
  }
  phystop = base + size;
}

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
    raminit();
    kinit();
    pagecacheinit();  // sizes its table by RAM: before the first kalloc()
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
    virtio_disk_init();
    swapinit();
    oominit();
    userinit();
    printf("nexos: LAZY_ALLOC=%d COW_ALLOC=%d cpus=%d mem=%dM swap=%dM\n",
           LAZY_ALLOC, COW_ALLOC, nharts(), RAM_MB, swap_mb());
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
