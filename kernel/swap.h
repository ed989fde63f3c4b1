// Swap (swap.c): the page reclaim takes away, and the sizes reclaim and the fault path
// (fault.c) share.

// One page reclaim is taking away: its physical page (the reference that the PTE owned,
// now the reclaimer's), and either the swap slot its PTE now names (an anonymous page,
// to be written there) or NOSLOT (a clean file page, dropped: its PTE is a hole again,
// and the page comes back from the page cache or the file; va says which page).
struct pageout {
  char *pa;
  uint64 slot;
  uint64 va;
};

#define NOSLOT (~0UL)

#define SWAPDEV 1         // the virtio disk that holds swap (virtio_disk.c)
#define RECLAIM_BATCH 32  // pages one reclaim() call tries to free; also its write batch
#define SWAP_CLUSTER 32   // most pages one page-in reads (fault.c's swapfault read-ahead)
