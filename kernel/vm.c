// Page tables: the kernel's, and each process's user address space.
//
// The two memory policies, LAZY_ALLOC and COW_ALLOC, are described with the fault path
// (the table at the top of fault.c). Three of their choke points are here, because they
// are operations on an address space: growproc() (sbrk grows eagerly or lazily),
// uvmcopy() (fork copies or shares: copy_pte or share_pte) and userpte() (copyin, copyout
// and copyinstr fault pages in through vmfault(), as user code would).
//
// Everything else (walk, mappages, uvmunmap, uvmfree, ...) is the same mechanism for all
// four configurations: it skips unmapped holes (a lazy heap has them, and fork copies
// only what is mapped) and gives up one page reference per unmapped PTE with kfree(),
// which frees the page when its last reference goes (kalloc.c).
//
// The `// LAB lazy:`, `// LAB cow:` and `// LAB swap:` comments mark what a lab's students
// write; their starter tree has the stub instead (docs/lab.md).
//
// Invariants of a user page table:
//   - Every valid user leaf PTE owns one reference to its physical page.
//   - PTE_COW (an RSW bit) is set only on leaf PTEs with PTE_W clear. It means
//     "writable in spirit": the page may be shared with other page tables, and the
//     first store must go through cowfault() (fault.c), which gives this PTE a private
//     writable page. A read-only page (text) never gets PTE_COW and stays read-only
//     forever. Besides COW fork, MAP_PRIVATE file pages carry it (mmap.c), in every
//     configuration.
//   - PTE_FILE (the other RSW bit) means "this PTE maps a page-cache page" (pagecache.c):
//     the page belongs to the file, and fork shares it whatever COW_ALLOC says. Without
//     PTE_W it is either private (and PTE_COW if the region is writable) or a MAP_SHARED
//     page not stored to yet; PTE_W|PTE_FILE is a MAP_SHARED page that may be dirty,
//     which munmap/exit write back. A private copy (cowfault) loses PTE_FILE.
//   - File mappings (p->vmas, mmap.c) lie in [PGROUNDUP(sz), TRAPFRAME): above the heap,
//     so loops over [0, sz) never meet them; mmap.c unmaps them itself.
//   - A user leaf with PTE_V clear is 0 (a hole) or paged out (PTE_SWAPPED, riscv.h): it
//     owns one reference to its swap slot instead of a page (swap.c).
//   - Only the process that owns a page table changes it while the process lives
//     (its own system calls and faults, on one hart at a time); exec and exit change
//     tables nobody else can see. The exceptions are reclaim, which pages out the pages
//     of a process only while it is not running (swap.c), and a page-in that maps the
//     page it read in the other processes whose PTEs name the same slot, also only while
//     they are not running (rmap.c); a fault that such a page-in has made stale is tried
//     again (fault.c resolve). So every operation here or in the fault path (fault.c) that
//     may sleep or be preempted between reading a PTE and using it runs under the owner's
//     vmlock (kernel/locks.h), and copyuser() uses a user page with interrupts off.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/memstat.h"
#include "kernel/syscall.h"
#include "kernel/defs.h"

pagetable_t kernel_pagetable;  // the kernel's page table; every hart runs on it in the kernel

extern char etext[];       // end of kernel text (kernel.ld)
extern char trampoline[];  // trampoline.S: trap entry and exit, mapped at TRAMPOLINE

// ---------------------------------------------------------------- the kernel's page table

// Contract: build the kernel page table: the devices, kernel text (read+execute),
// kernel data and all RAM up to PHYSTOP (read+write), the trampoline, and one kernel
// stack per process slot (proc_mapstacks). Every mapping is one-to-one except the
// trampoline and the stacks. Panics if memory runs out (at boot that is fatal).
static pagetable_t
kvmmake(void)
{
  pagetable_t kpt = (pagetable_t)kalloc();
  if(kpt == 0)
    panic("kvmmake: out of memory");
  memset(kpt, 0, PGSIZE);

  kvmmap(kpt, UART0, UART0, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpt, VIRTIO0, VIRTIO0, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpt, VIRTIO1, VIRTIO1, PGSIZE, PTE_R | PTE_W);   // the swap disk, if any
  // The PLIC's registers up to the claim register of hart NCPU-1 fit in 4 MiB.
  kvmmap(kpt, PLIC, PLIC, 0x400000, PTE_R | PTE_W);
  kvmmap(kpt, KERNBASE, KERNBASE, (uint64)etext - KERNBASE, PTE_R | PTE_X);
  kvmmap(kpt, (uint64)etext, (uint64)etext, PHYSTOP - (uint64)etext, PTE_R | PTE_W);
  kvmmap(kpt, TRAMPOLINE, (uint64)trampoline, PGSIZE, PTE_R | PTE_X);
  proc_mapstacks(kpt);
  return kpt;
}

// Contract: create the kernel page table (once, on hart 0, after kinit()).
void
kvminit(void)
{
  kernel_pagetable = kvmmake();
}

// Contract: switch this hart to the kernel page table and turn paging on.
void
kvminithart(void)
{
  sfence_vma();  // earlier stores to page-table memory are done before we use it
  w_satp(MAKE_SATP(kernel_pagetable));
  sfence_vma();  // drop any translation cached before the switch
}

// Contract: map [va, va+sz) to [pa, pa+sz) in the kernel page table kpt. Boot only:
// panics if the mapping cannot be made.
void
kvmmap(pagetable_t kpt, uint64 va, uint64 pa, uint64 sz, int perm)
{
  if(mappages(kpt, va, sz, pa, perm) != 0)
    panic("kvmmap");
}

// ---------------------------------------------------------------- the page-table walk

// Sv39 (RISC-V's 39-bit virtual memory) translates a virtual address in three steps:
//
//    63      39 38        30 29        21 20        12 11          0
//   +----------+------------+------------+------------+-------------+
//   |  unused  |  L2 index  |  L1 index  |  L0 index  | page offset |
//   +----------+------------+------------+------------+-------------+
//                 9 bits       9 bits       9 bits        12 bits
//
// satp points at the level-2 page (512 PTEs). Its PTE number "L2 index" points at a
// level-1 page, whose PTE "L1 index" points at a level-0 page, whose PTE "L0 index" is
// the leaf: physical page number (bits 53..10) and flags (bits 9..0: V R W X U G A D,
// and the two RSW bits where NexOS keeps PTE_COW). A PTE with V set but none of R W X
// points at the next level; NexOS uses only 4 KiB leaves at level 0.
//
// Contract: return the address of the level-0 PTE for va in pagetable. If a level-1
// or level-0 page is missing, allocate a zeroed one when alloc != 0 (return 0 if
// memory runs out), else return 0. va must be below MAXVA (callers check user input).
pte_t *
walk(pagetable_t pagetable, uint64 va, int alloc)
{
  if(va >= MAXVA)
    panic("walk: va >= MAXVA");

  for(int level = 2; level > 0; level--){
    pte_t *pte = &pagetable[PX(level, va)];
    if(*pte & PTE_V){
      pagetable = (pagetable_t)PTE2PA(*pte);
    } else {
      if(!alloc)
        return 0;
      pagetable = (pagetable_t)kalloc();
      if(pagetable == 0)
        return 0;
      memset(pagetable, 0, PGSIZE);
      *pte = PA2PTE(pagetable) | PTE_V;
    }
  }
  return &pagetable[PX(0, va)];
}

// Contract: the physical address that user virtual address va maps to, or 0 if va is
// not mapped with PTE_V|PTE_U (or is >= MAXVA). Never faults a page in.
uint64
walkaddr(pagetable_t pagetable, uint64 va)
{
  if(va >= MAXVA)
    return 0;
  pte_t *pte = walk(pagetable, va, 0);
  if(pte == 0 || (*pte & PTE_V) == 0 || (*pte & PTE_U) == 0)
    return 0;
  return PTE2PA(*pte);
}

// Contract: map the pages covering [va, va+size) to physical pages starting at pa,
// with flags perm|PTE_V. va and pa need not be aligned (the pages containing them are
// used). Returns 0, or -1 if a page-table page could not be allocated; then the pages
// mapped so far stay mapped and the caller undoes them. Panics on a remap or size 0
// (kernel bugs). Takes no page reference: the caller hands its own to the new PTE.
int
mappages(pagetable_t pagetable, uint64 va, uint64 size, uint64 pa, int perm)
{
  if(size == 0)
    panic("mappages: size 0");

  uint64 a = PGROUNDDOWN(va);
  uint64 last = PGROUNDDOWN(va + size - 1);
  pa = PGROUNDDOWN(pa);
  for(;;){
    pte_t *pte = walk(pagetable, a, 1);
    if(pte == 0)
      return -1;
    if(*pte & PTE_V)
      panic("mappages: remap");
    *pte = PA2PTE(pa) | perm | PTE_V;
    if(a == last)
      return 0;
    a += PGSIZE;
    pa += PGSIZE;
  }
}

// Contract: map the n pages pas[0..n) at va, va+PGSIZE, ... (va page-aligned, none of
// them mapped yet) in pagetable with perm|PTE_V. The PTEs of one level-0 table lie side
// by side, so it walks from the root once per table (512 pages), not once per page: the
// page cache maps a whole run this way (mmap.c). Returns how many were mapped: n, or
// fewer if a page-table page could not be had (pages from pas[that] on stay unmapped,
// and their references the caller's). Panics on a PTE that is valid already.
int
mappagelist(pagetable_t pagetable, uint64 va, char **pas, int n, int perm)
{
  int i = 0;

  while(i < n){
    pte_t *pte = walk(pagetable, va + (uint64)i * PGSIZE, 1);
    if(pte == 0)
      return i;
    do {
      if(*pte & PTE_V)
        panic("mappagelist: remap");
      *pte++ = PA2PTE(pas[i]) | perm | PTE_V;
      i++;
    } while(i < n && PX(0, va + (uint64)i * PGSIZE) != 0);
  }
  return n;
}

// ---------------------------------------------------------------- user address spaces

// Contract: a new, empty user page table (one zeroed page), or 0 if out of memory.
pagetable_t
uvmcreate(void)
{
  pagetable_t pagetable = (pagetable_t)kalloc();
  if(pagetable == 0)
    return 0;
  memset(pagetable, 0, PGSIZE);
  return pagetable;
}

// Contract: where a loop over the user memory of pagetable should look next, given
// that walk(pagetable, va, 0) has found no leaf PTE for va (or that the loop is done
// with va's level-0 table): the end of va's 1 GiB region if that has no level-1
// table, else the end of va's 2 MiB region (one level-0 table's reach). Everything
// skipped is unmapped (or already visited), so holes cost one step per table.
uint64
nextregion(pagetable_t pagetable, uint64 va)
{
  int level = (pagetable[PX(2, va)] & PTE_V) ? 1 : 2;
  return (va | ((1L << PXSHIFT(level)) - 1)) + 1;
}

// Contract: remove the mappings of the npages pages from page-aligned va. Holes (no
// valid PTE) are skipped. If do_free, drop each mapped page's reference with kfree()
// (the page is freed if that was the last one), and each paged-out PTE's slot reference. Panics if va is not aligned or a
// non-leaf PTE is found where a page should be (kernel bugs). Does not flush the TLB.
void
uvmunmap(pagetable_t pagetable, uint64 va, uint64 npages, int do_free)
{
  if(va % PGSIZE != 0)
    panic("uvmunmap: not aligned");

  uint64 end = va + npages * PGSIZE;
  uint64 a = va;
  while(a < end){
    pte_t *pte = walk(pagetable, a, 0);
    if(pte == 0){
      a = nextregion(pagetable, a);  // no level-0 (or level-1) table: all holes
      continue;
    }
    if(*pte & PTE_V){
      if(PTE_FLAGS(*pte) == PTE_V)
        panic("uvmunmap: not a leaf");
      if(do_free)
        kfree((void *)PTE2PA(*pte));
      *pte = 0;
    } else if(*pte & PTE_SWAPPED){
      if(do_free)
        swap_put(PTE2SLOT(*pte));
      *pte = 0;
    }
    a += PGSIZE;
  }
}

// Contract: grow a process's memory from oldsz to newsz by mapping zeroed pages with
// PTE_R|PTE_U|xperm, all of them now (exec and eager sbrk use it; the lazy policy
// lives in growproc, not here). It reclaims (swap.c) while free pages are below the low
// watermark, so it may sleep. Returns newsz (oldsz if newsz < oldsz), or 0 if memory and swap run out, in
// which case every page it mapped has been unmapped and freed again.
uint64
uvmalloc(pagetable_t pagetable, uint64 oldsz, uint64 newsz, int xperm)
{
  if(newsz < oldsz)
    return oldsz;

  for(uint64 a = PGROUNDUP(oldsz); a < newsz; a += PGSIZE){
    // With swap, keep the low watermark free (no pointer into user memory is held here):
    // this page, and the page-table pages mappages() may need, find a page.
    vmreserve(1);
    char *mem = kalloc();
    if(mem == 0){
      uvmdealloc(pagetable, a, oldsz);
      return 0;
    }
    memset(mem, 0, PGSIZE);
    if(mappages(pagetable, a, PGSIZE, (uint64)mem, PTE_R | PTE_U | xperm) != 0){
      kfree(mem);
      uvmdealloc(pagetable, a, oldsz);
      return 0;
    }
  }
  return newsz;
}

// Contract: shrink a process's memory from oldsz to newsz, unmapping (and dropping the
// references of) the mapped pages above PGROUNDUP(newsz); holes are skipped. Returns
// the new size (oldsz if newsz >= oldsz). Does not flush the TLB.
uint64
uvmdealloc(pagetable_t pagetable, uint64 oldsz, uint64 newsz)
{
  if(newsz >= oldsz)
    return oldsz;

  uint64 lo = PGROUNDUP(newsz), hi = PGROUNDUP(oldsz);
  if(lo < hi)
    uvmunmap(pagetable, lo, (hi - lo) / PGSIZE, 1);
  return newsz;
}

// Contract: free a page-table tree whose leaves have all been unmapped already.
// Panics if a leaf is left (a caller forgot to unmap something: a kernel bug).
static void
freewalk(pagetable_t pagetable)
{
  for(int i = 0; i < 512; i++){
    pte_t pte = pagetable[i];
    if(pte & PTE_SWAPPED)
      panic("freewalk: paged-out leaf");
    if((pte & PTE_V) == 0)
      continue;
    if(PTE_FLAGS(pte) != PTE_V)
      panic("freewalk: leaf");
    freewalk((pagetable_t)PTE2PA(pte));
    pagetable[i] = 0;
  }
  kfree(pagetable);
}

// Contract: drop the references of all mapped pages in [0, sz), then free the page-table
// pages. Anything mapped above sz (trampoline, trapframe) must already be unmapped.
void
uvmfree(pagetable_t pagetable, uint64 sz)
{
  if(sz > 0)
    uvmunmap(pagetable, 0, PGROUNDUP(sz) / PGSIZE, 1);
  freewalk(pagetable);
}

// Contract: make the page at va inaccessible to user mode (clear PTE_U); exec uses it
// for the stack guard page. The page must be mapped (panics otherwise: kernel bug).
void
uvmclear(pagetable_t pagetable, uint64 va)
{
  pte_t *pte = walk(pagetable, va, 0);
  if(pte == 0 || (*pte & PTE_V) == 0)
    panic("uvmclear: not mapped");
  *pte &= ~PTE_U;
}

// ---------------------------------------------------------------- fork: copy or share

// Both policies below answer one question for forkleaves(): "the parent's leaf PTE is
// *pte; what is the child's?" Everything around them (the table walk, the undo on
// failure) is the same mechanism for COW_ALLOC=0 and COW_ALLOC=1.

// COW_ALLOC=0. Contract: the child's PTE for the page that parent PTE *pte maps: a
// private copy of the page, same flags. Returns 0 if out of memory (nothing allocated).
static pte_t
copy_pte(pte_t *pte)
{
  char *mem = kalloc();
  if(mem == 0)
    return 0;
  memmove(mem, (char *)PTE2PA(*pte), PGSIZE);
  return PA2PTE(mem) | PTE_FLAGS(*pte);
}

// COW_ALLOC=1. Contract: the child's PTE for the page that parent PTE *pte maps: the
// same page. A writable page first becomes read-only + PTE_COW in the parent, so both
// PTEs carry the same flags; a read-only page (text) is shared as it is, without
// PTE_COW. Never fails. Takes no reference: forkleaves() takes the child's references
// for a whole level-0 table at once. The caller flushes the parent's TLB.
static pte_t
share_pte(pte_t *pte)
{
  // LAB cow: begin
  if(*pte & PTE_W)
    *pte = (*pte & ~PTE_W) | PTE_COW;
  return *pte;
  // LAB cow: stub
  // return copy_pte(pte);  // a copying fork until this shares the page
  // LAB cow: end
}

// Contract: fork the first n PTEs of one level-0 table: from is the parent's, to the
// child's (same virtual addresses). Each valid PTE of from gets its child PTE in to by
// policy (copy_pte or share_pte); a paged-out PTE is copied and its slot shared; holes
// stay holes. The child's entries must be empty.
// Returns 0, or -1 if out of memory: the child entries filled so far stay, each owning
// its page reference, for the caller to unmap.
static int
forkleaves(pte_t *from, pte_t *to, int n)
{
  int nfile = 0;

  for(int i = 0; i < n; i++){
    // LAB swap: begin a paged-out PTE: the child's share of its slot
    if(from[i] & PTE_SWAPPED){
      swap_dup(PTE2SLOT(from[i]));   // both read their own copy back (swap.c)
      to[i] = from[i];
      continue;
    }
    // LAB swap: end
    if((from[i] & PTE_V) == 0)
      continue;
    if(from[i] & PTE_FILE){
      nfile++;        // a page-cache page: below
      continue;
    }
    pte_t pte = COW_ALLOC ? share_pte(&from[i]) : copy_pte(&from[i]);
    if(pte == 0)
      return -1;
    to[i] = pte;
  }
  // COW: each new child PTE owns one more reference to its page, taken here under one
  // lock acquire for the whole table. Until then the parent's PTEs pin the pages, and
  // nobody but this thread can see the child's table.
  if(COW_ALLOC)
    krefinc_ptes(to, n);
  // File pages (only in mmap regions): the child maps the same page with the same
  // flags in every configuration, and its PTE owns a reference of its own.
  for(int i = 0; nfile > 0 && i < n; i++){
    if((from[i] & PTE_V) && (from[i] & PTE_FILE)){
      krefinc((void *)PTE2PA(from[i]));
      to[i] = from[i];
      nfile--;
    }
  }
  return 0;
}

// Contract: for fork, give child table new the parent's (old's) user memory [lo, hi)
// (page-aligned; fork passes [0, sz) and then each mmap region): copies of each mapped
// anonymous page (COW_ALLOC=0) or the same pages shared copy-on-write (COW_ALLOC=1), and
// the same page for a file page (PTE_FILE) in both. Holes are skipped: the child gets
// only what the parent has mapped. Returns 0, or -1 if memory runs out; then everything
// the child got in [lo, hi) has been unmapped and its references dropped (its page-table
// pages stay for the caller's uvmfree/proc_freepagetable to free).
//
// It visits the parent's level-0 tables, not its pages: one walk() per 2 MiB region
// finds a table of 512 leaf PTEs (or none: then the whole 2 MiB, or 1 GiB when even
// the level-1 table is missing, is a hole and is skipped), one walk() in the child
// finds or makes the matching table, and forkleaves() runs down both tables side by
// side. A COW fork thus costs a few instructions per page, not a walk per page.
int
uvmcopy(pagetable_t old, pagetable_t new, uint64 lo, uint64 hi)
{
  uint64 top = PGROUNDUP(hi);
  int err = 0;

  for(uint64 va = lo; va < top && !err; va = nextregion(old, va)){
    pte_t *from = walk(old, va, 0);  // va is 2 MiB aligned (but maybe the first): a table's entry
    if(from == 0)
      continue;                      // no table: 2 MiB (or 1 GiB) of holes
    uint64 end = nextregion(old, va) < top ? nextregion(old, va) : top;
    pte_t *to = walk(new, va, 1);
    if(to == 0 || forkleaves(from, to, (end - va) / PGSIZE) != 0)
      err = 1;
  }
  if(COW_ALLOC)
    sfence_vma();  // parent PTEs may have lost PTE_W
  if(err){
    uvmunmap(new, lo, (top - lo) / PGSIZE, 1);
    return -1;
  }
  return 0;
}

// ---------------------------------------------------------------- sbrk

// Contract: sbrk's policy. Grow (n > 0) or shrink (n < 0) the memory of p, the calling process,
// by n bytes; returns 0, or -1 with nothing changed. how is SBRK_POLICY (sbrk: the kernel's
// LAZY_ALLOC decides) or SBRK_LAZY (sbrklazy: lazy in every configuration).
//   grow:   the new size must not pass the lowest mmap region (mmap_floor: TRAPFRAME,
//           the top of user space, when there is none).
//           lazy (LAZY_ALLOC=1, or SBRK_LAZY): only p->sz rises; vmfault() maps each
//           page on first touch. Plain sbrk still refuses an obvious overcommit, as
//           Linux's heuristic does: a heap whose part grown by plain sbrk (p->sbrkbytes)
//           would pass OVERCOMMIT_PCT (param.h) of RAM and swap together (sbrkcap). Room
//           to reserve more than RAM (the point of lazy growth: a KV cache, the classic
//           lazy lab's tests), yet finite, so that a program that grows until sbrk fails
//           (MIT's usertests counts free memory so) stops, and a request for twice the
//           memory fails as on an eager kernel. SBRK_LAZY promises nothing and is held
//           only to mmap_floor; what it added does not count against plain sbrk (MIT's
//           lazy_sbrk reserves up to the trapframe with sbrklazy, then sbrk's a page).
//           eager (LAZY_ALLOC=0, SBRK_POLICY): every new page is mapped now, or none is
//           (out of memory: -1).
//   shrink: releases down to sz + n, but never below p->heapbase (sbrk cannot release the
//           program, its stack or its guard page): a larger shrink, even one past
//           address 0, stops at heapbase and succeeds, as xv6's leaves the size alone.
//           The mapped pages of the released range are unmapped and their references
//           dropped, holes skipped.
// The caller (sys_sbrk) holds p->vmlock, so that another process's reclaim leaves p's
// page table alone while an eager grow sleeps in reclaim or is preempted midway.
int
growproc(struct proc *p, int n, int how)
{
  if(!holdingsleep(&p->vmlock))
    panic("growproc: vmlock");
  uint64 oldsz = p->sz;
  uint64 newsz = oldsz + (long)n;  // n < 0 wraps below oldsz

  if(n > 0){
    if(newsz < oldsz || newsz > mmap_floor(p))
      return -1;
    if(how == SBRK_POLICY && PGROUNDUP(p->sbrkbytes + n) / PGSIZE > sbrkcap())
      return -1;
    // LAB lazy: begin
    int eager = !LAZY_ALLOC && how == SBRK_POLICY;
    // LAB lazy: stub
    // int eager = 1;  // in both configurations until lazy growth only raises p->sz
    // LAB lazy: end
    if(eager){
      // Refuse at once what cannot fit, so that a failed sbrk does not even leave
      // the page-table pages of a half-built mapping behind (they would stay until exit).
      // With swap, what fits is free pages plus free slots (uvmalloc reclaims).
      if((PGROUNDUP(newsz) - PGROUNDUP(oldsz)) / PGSIZE > kfreepages() + swap_free_slots())
        return -1;
      if(uvmalloc(p->pagetable, oldsz, newsz, PTE_W) == 0)
        return -1;
    }
    if(how == SBRK_POLICY)
      p->sbrkbytes += n;
  } else if(n < 0){
    if(newsz > oldsz || newsz < p->heapbase)
      newsz = p->heapbase;
    uvmdealloc(p->pagetable, oldsz, newsz);
    sfence_vma();
    if(p->sbrkbytes > newsz - p->heapbase)   // a shrink releases the top first
      p->sbrkbytes = newsz - p->heapbase;
  }
  p->sz = newsz;
  return 0;
}

// Contract: the most pages plain sbrk lets one process have: OVERCOMMIT_PCT of all the
// pages kalloc manages and every swap slot (growproc says why).
uint64
sbrkcap(void)
{
  return (ktotalpages() + swap_total_slots()) * OVERCOMMIT_PCT / 100;
}

// ---------------------------------------------------------------- memstat

// Contract: add to ms the page-table pages of the tree at pagetable (level = 2 for the
// root) and its user leaves: mapped_pages (PTE_U leaves), shared_pages (those whose
// physical page has more than one reference, counted a whole leaf table at a time) and
// swapped_pages (paged-out leaves).
static void
countwalk(pagetable_t pagetable, int level, struct memstat *ms)
{
  ms->pt_pages++;
  if(level == 0)
    ms->shared_pages += kshared_ptes(pagetable, 512);
  for(int i = 0; i < 512; i++){
    pte_t pte = pagetable[i];
    if((pte & PTE_V) == 0)
      continue;
    if(level > 0 && PTE_FLAGS(pte) == PTE_V)
      countwalk((pagetable_t)PTE2PA(pte), level - 1, ms);
    else if(pte & PTE_U){
      ms->mapped_pages++;
      if(pte & PTE_FILE)
        ms->file_pages++;
    }
  }
  if(level == 0)
    for(int i = 0; i < 512; i++)
      if(pagetable[i] & PTE_SWAPPED)
        ms->swapped_pages++;
}

// Contract: fill *ms with a snapshot of p's memory (p must be the caller, holding its
// vmlock, or not running) and of the physical allocator and swap. See kernel/memstat.h and docs/memory.md.
void
vmstat(struct proc *p, struct memstat *ms)
{
  memset(ms, 0, sizeof(*ms));
  ms->vpages = PGROUNDUP(p->sz) / PGSIZE;
  countwalk(p->pagetable, 2, ms);
  ms->free_pages = kfreepages();
  ms->total_pages = ktotalpages();
  ms->lazy_faults = p->lazy_faults;
  ms->cow_faults = p->cow_faults;
  ms->cow_copies = p->cow_copies;
  ms->cow_reuses = p->cow_reuses;
  ms->paged_in = p->paged_in;
  ms->paged_out = p->paged_out;
  ms->lazy_alloc = LAZY_ALLOC;
  ms->cow_alloc = COW_ALLOC;
  ms->ncpu = nharts();
  ms->memsize_mb = RAM_MB;
  ms->pagecache_pages = pagecache_pages();
  ms->sbrk_cap_pages = sbrkcap();
  swapstat(ms);
}

// Contract: the resident anonymous user pages of pagetable (PTE_U leaves no file backs,
// shared or not): what killing its process would give back at most (oom.c). Caller holds
// the process's vmlock, or the process is not running.
uint64
uvmanonpages(pagetable_t pagetable)
{
  struct memstat ms;

  memset(&ms, 0, sizeof(ms));
  countwalk(pagetable, 2, &ms);
  return ms.mapped_pages - ms.file_pages;
}

// Contract: how many pages fork will allocate for a child of p: one per page-table page
// p has, and with COW_ALLOC=0 one per resident anonymous page it copies. Caller holds
// p->vmlock (fork reserves this much first: vmreserve).
uint64
uvmforkpages(struct proc *p)
{
  struct memstat ms;

  memset(&ms, 0, sizeof(ms));
  countwalk(p->pagetable, 2, &ms);
  return ms.pt_pages + (COW_ALLOC ? 0 : ms.mapped_pages - ms.file_pages);
}

// ---------------------------------------------------------------- copying to/from user

// Contract: the leaf PTE of user address va in pagetable, usable for a store (is_store)
// or a load, or 0 if there is none. When pagetable is the calling process's own, an
// unmapped lazy heap or mmap page or (for a store) a COW page or a read-only file page
// is first resolved by vmfault(),
// exactly as if user code had touched it, and again if the page has gone by the time
// userpte looks (a preemption after the fault let reclaim take it). Other tables (exec's
// new one) are used as they are.
static pte_t *
userpte(pagetable_t pagetable, uint64 va, int is_store)
{
  if(va >= MAXVA)
    return 0;
  for(int refault = 0; ; refault++){
    pte_t *pte = walk(pagetable, va, 0);
    int missing = pte == 0 || (*pte & PTE_V) == 0;
    int readonly = !missing && (*pte & (PTE_COW | PTE_FILE)) && (*pte & PTE_W) == 0;
    // LAB lazy: begin
    int fault_first = missing || (is_store && readonly);
    // LAB lazy: stub
    // int fault_first = is_store && readonly;   // a missing page makes the copy fail
    // LAB lazy: end
    if(!fault_first){
      if(pte == 0 || (*pte & (PTE_V | PTE_U)) != (PTE_V | PTE_U))
        return 0;
      if(is_store && (*pte & PTE_W) == 0)
        return 0;
      return pte;
    }
    struct proc *p = myproc();
    if(p == 0 || p->pagetable != pagetable)
      return 0;
    if(vmfault(p, va, is_store) != 0){
      if(p->nomem && !holding_spinlocks())
        oomcopyfail(p, va);   // p dies for memory, as for the same fault in user code
      return 0;
    }
    // Look again: if p was preempted since vmfault() let go of p->vmlock, reclaim on
    // another hart may have paged the page out again (swap.c), and then it faults again.
    if(KDEBUG_PAGEOUT && refault == 0 && !holding_spinlocks())
      swap_evict(p, va);   // that race, every time (docs/memory.md)
  }
}

// Contract: 1 if *pte still maps a page (after userpte() found it, a process that was
// preempted may have been paged out meanwhile: swap.c). From here until pop_off() the
// page stays: interrupts are off, so this process keeps running, and reclaim pages out
// only processes that are not. Calls push_off(); on 1 the caller calls pop_off() after
// its copy, on 0 it has been called already.
static int
pinned(pte_t *pte)
{
  push_off();
  if(*pte & PTE_V)
    return 1;
  pop_off();
  return 0;
}

// Contract: copy len bytes between kernel address kva and user address uva of pagetable:
// to user memory when to_user, else from it. Returns 0, or -1 if some user page is not
// (writable, when to_user) user memory. Lazy, COW and paged-out pages are resolved by
// userpte().
static int
copyuser(pagetable_t pagetable, uint64 uva, char *kva, uint64 len, int to_user)
{
  while(len > 0){
    uint64 va0 = PGROUNDDOWN(uva);
    pte_t *pte = userpte(pagetable, va0, to_user);
    if(pte == 0)
      return -1;
    if(!pinned(pte))
      continue;       // paged out since userpte(): fault it in again
    uint64 n = PGSIZE - (uva - va0);
    if(n > len)
      n = len;
    char *pa = (char *)(PTE2PA(*pte) + (uva - va0));
    if(to_user)
      memmove(pa, kva, n);
    else
      memmove(kva, pa, n);
    pop_off();
    len -= n;
    kva += n;
    uva += n;
  }
  return 0;
}

// Contract: fault in the calling process's pages [va, va+len) as its own loads (or, when
// is_store, stores) would: lazy, COW, file and paged-out pages are resolved. Returns 0, or
// -1 if some page is not (writable) user memory. For a caller that must then copy without
// faulting (copypresent): the fault path may need a lock the copy is made under.
int
uprefault(uint64 va, uint64 len, int is_store)
{
  pagetable_t pagetable = myproc()->pagetable;
  if(va + len < va)
    return -1;
  for(uint64 a = PGROUNDDOWN(va); a < va + len; a += PGSIZE)
    if(userpte(pagetable, a, is_store) == 0)
      return -1;
  return 0;
}

// Contract: 1 if user address va of pagetable is present now, and writable if is_store.
static int
present(pagetable_t pagetable, uint64 va, int is_store)
{
  pte_t *pte = va < MAXVA ? walk(pagetable, va, 0) : 0;
  if(pte == 0 || (*pte & (PTE_V | PTE_U)) != (PTE_V | PTE_U))
    return 0;
  return !is_store || (*pte & PTE_W);
}

// Contract: copy len bytes between kernel address kva and user address uva of the calling
// process (to user memory when to_user, else from it), but only if every page of the
// range is present (and writable, to_user) right now: 0, or -1 with nothing copied.
// Never enters the fault path, so a caller may hold locks that the fault path takes (fs.c
// copies a block to or from user memory holding the block's buffer). Interrupts stay off
// from the check to the end of the copy, so no page leaves in between: reclaim pages out
// only processes that are not running (swap.c).
int
copypresent(uint64 uva, char *kva, uint64 len, int to_user)
{
  pagetable_t pagetable = myproc()->pagetable;
  if(uva + len < uva)
    return -1;
  push_off();
  for(uint64 a = PGROUNDDOWN(uva); a < uva + len; a += PGSIZE){
    if(!present(pagetable, a, to_user)){
      pop_off();
      return -1;
    }
  }
  while(len > 0){
    uint64 va0 = PGROUNDDOWN(uva);
    uint64 n = PGSIZE - (uva - va0);
    if(n > len)
      n = len;
    char *pa = (char *)(PTE2PA(*walk(pagetable, va0, 0)) + (uva - va0));
    if(to_user)
      memmove(pa, kva, n);
    else
      memmove(kva, pa, n);
    len -= n;
    kva += n;
    uva += n;
  }
  pop_off();
  return 0;
}

// Contract: copy len bytes from kernel address src to user address dstva of pagetable.
// Returns 0, or -1 if some destination page is not writable user memory.
int
copyout(pagetable_t pagetable, uint64 dstva, char *src, uint64 len)
{
  return copyuser(pagetable, dstva, src, len, 1);
}

// Contract: copy len bytes from user address srcva of pagetable to kernel address dst.
// Returns 0, or -1 if some source page is not readable user memory.
int
copyin(pagetable_t pagetable, char *dst, uint64 srcva, uint64 len)
{
  return copyuser(pagetable, srcva, dst, len, 0);
}

// Contract: copy a NUL-terminated string from user address srcva of pagetable to dst,
// at most max bytes including the NUL. Returns 0, or -1 if the string has no NUL
// within max bytes or runs into memory that is not readable user memory.
int
copyinstr(pagetable_t pagetable, char *dst, uint64 srcva, uint64 max)
{
  while(max > 0){
    uint64 va0 = PGROUNDDOWN(srcva);
    pte_t *pte = userpte(pagetable, va0, 0);
    if(pte == 0)
      return -1;
    if(!pinned(pte))
      continue;       // paged out since userpte(): fault it in again
    char *p = (char *)(PTE2PA(*pte) + (srcva - va0));
    uint64 n = PGSIZE - (srcva - va0);
    if(n > max)
      n = max;
    for(uint64 i = 0; i < n; i++){
      dst[i] = p[i];
      if(p[i] == 0){
        pop_off();
        return 0;
      }
    }
    pop_off();
    max -= n;
    dst += n;
    srcva += n;
  }
  return -1;
}
