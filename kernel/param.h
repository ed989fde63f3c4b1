// Compile-time limits of the kernel.
#define NPROC        64   // maximum number of processes
#define NCPU          8   // maximum number of harts (CPUS= may ask for fewer)
#define NOFILE       16   // open files per process
#define NFILE       100   // open files in the whole system
#define NINODE       50   // in-memory inodes
#define NDEV         10   // device major numbers
#define ROOTDEV       1   // device number of the root file system
#define NDISK         2   // virtio disks: 0 the file system's, 1 swap (optional)
#define MAXARG       32   // exec arguments
#define MAXOPBLOCKS  24   // most blocks one file-system operation writes (deleting a file on a 2 GiB image needs 16 bitmap blocks + 4)
#define LOGSIZE      (MAXOPBLOCKS*3)  // blocks in the on-disk log
#define NBUF         (MAXOPBLOCKS*3)  // blocks in the buffer cache
#define FSSIZE       32768 // default file-system size in blocks (mkfs may be told otherwise)
#define MAXPATH      128  // longest path name
#define USERSTACK    1    // user stack pages (below them: one guard page)
#define OVERCOMMIT_PCT 150 // lazy sbrk: a process may reserve up to this % of RAM + swap (vm.c)

// RAM the kernel boots with: a whole number of MiB in [MINRAM_MB, MAXRAM_MB], read from
// the device tree at boot (kernel/memlayout.h), so it is no build option. This is the
// range's one home: the Makefile (MIN_MEMSIZE, MAX_MEMSIZE: what QEMU's -m may be) and the
// harness (harness/nexos/machine/limits.py) read it here.
#define MINRAM_MB    32
#define MAXRAM_MB    2048

// Build-time configuration. The Makefile always passes both as -D flags (its defaults
// are LAZY_ALLOC=1 COW_ALLOC=1); the policies below only serve a compiler run outside the
// Makefile, and are the eager ones: 0 maps every sbrk page at once, 0 copies every page
// at fork.
#ifndef LAZY_ALLOC
#define LAZY_ALLOC 0      // 1: sbrk grows sz only; pages are mapped on first touch
#endif
#ifndef COW_ALLOC
#define COW_ALLOC 0       // 1: fork shares pages read-only; a store copies on demand
#endif
// A debug kernel (make KDEBUG=pageout, docs/memory.md "Checking a race"): 1 pages out
// each page a copy to or from user memory has just faulted in, so that every such copy
// meets the race it must survive. 0 in every other build.
#ifndef KDEBUG_PAGEOUT
#define KDEBUG_PAGEOUT 0
#endif

// The clock: QEMU's time CSR counts at 10 MHz; the timer interrupts every TICK_CYCLES,
// i.e. 100 times a second, and each hart-0 interrupt adds one to ticks (sleep/uptime unit).
#define TIMEBASE_HZ  10000000
#define TICK_CYCLES  (TIMEBASE_HZ / 100)
