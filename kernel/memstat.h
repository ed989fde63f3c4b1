// struct memstat: one snapshot of memory accounting, filled by the memstat() system call.
// Shared by the kernel and user programs (smolprobe, lazytests, cowtests, the harness).
// Counters marked "this process" count since the process was created by fork (a child
// starts at 0) and are not reset by exec.
struct memstat {
  uint64 vpages;       // this process's size (sz) in pages, rounded up
  uint64 mapped_pages; // valid leaf PTEs with PTE_U in this process's page table: text, data,
                       // the stack and the heap pages mapped so far (the stack guard page has
                       // no PTE_U and is not counted; nor are the trampoline and trapframe)
  uint64 pt_pages;     // page-table pages of this process (root included)
  uint64 shared_pages; // this process's mapped pages whose physical page has refcount > 1
  uint64 free_pages;   // pages kalloc() can still hand out (whole system): its free list plus
                       // the pages it has never handed out yet
  uint64 total_pages;  // pages the physical allocator manages (whole system)
  uint64 lazy_faults;  // this process: faults that mapped a zeroed heap page (lazy growth)
  uint64 cow_faults;   // this process: writes (store fault or copyout) that hit a COW page
  uint64 cow_copies;   // this process: COW faults resolved by copying the page
  uint64 cow_reuses;   // this process: COW faults where it was the sole owner: made writable, no copy
  int lazy_alloc;      // kernel configuration: LAZY_ALLOC (0 or 1)
  int cow_alloc;       // kernel configuration: COW_ALLOC (0 or 1)
  int ncpu;            // harts running
  int memsize_mb;      // guest RAM in MiB, as booted (QEMU -m: make MEMSIZE)
  uint64 file_pages;   // this process's mapped leaves that map a page-cache page (PTE_FILE:
                       // mmap'd file pages not yet copied by a private store)
  uint64 pagecache_pages; // pages the page cache holds (whole system; kernel/pagecache.c)
  uint64 swapped_pages;      // this process's pages now in swap (paged-out PTEs; kernel/swap.c)
  uint64 swap_slots_used;    // swap slots in use (whole system)
  uint64 swap_slots;         // swap slots there are (whole system; 0: no swap disk)
  uint64 swap_ins;           // pages read back from swap since boot (whole system)
  uint64 swap_outs;          // pages written to swap since boot (whole system)
  uint64 dropped_file_pages; // clean file pages reclaim unmapped since boot (whole system)
  uint64 paged_in;           // this process: pages read back from swap by its faults
  uint64 paged_out;          // this process: its pages reclaim wrote to swap
  uint64 swap_outs_shared;   // of swap_outs, pages more than one PTE mapped (COW-shared after
                             // fork), each written once for all of them (whole system)
  uint64 sbrk_cap_pages;     // the largest size in pages plain sbrk lets a process have:
                             // OVERCOMMIT_PCT of RAM and swap (kernel/vm.c sbrkcap)
};
