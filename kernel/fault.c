// Page faults: what a fault on a user address does, whether user code took it (usertrap,
// trap.c) or a copy to or from user memory did (userpte, vm.c).
//
// LAZY_ALLOC and COW_ALLOC are one mechanism with two policies, not two copies: the same
// functions run in all four configurations, and the flags pick the policy at these choke
// points (growproc, uvmcopy and userpte are vm.c's; the fault functions are here):
//
//   LAZY_ALLOC  growproc()  1: sbrk(n>0) only raises p->sz     0: maps every page now
//                           (sbrklazy only raises p->sz in both: the lazy policy asked for)
//               vmfault()   maps a zeroed heap page on first touch (lazyfault): with
//                           LAZY_ALLOC=0 only sbrklazy leaves such pages
//   COW_ALLOC   uvmcopy()   1: fork shares pages (share_pte)   0: copies them (copy_pte)
//               vmfault()   1: a store to a PTE_COW page copies or takes it (cowfault)
//   both        userpte()   copyin/copyout/copyinstr fault pages in through vmfault()
//   LAZY_ALLOC  mmap (mmap.c) 1: a file page is mapped on first touch (mmapfault)
//                             0: sys_mmap maps every page of the region at once
//   neither     file pages  fork gives the child the same page-cache pages (PTE_FILE) in
//                           every configuration; a MAP_PRIVATE page is PTE_COW and its
//                           first store copies it through cowfault(), also with COW_ALLOC=0
//   neither     swap        with a swap disk, reclaim (swap.c) pages out anonymous pages
//                           and drops clean file pages when free pages run low
//                           (uvmpageout; a page several PTEs map: rmap.c); vmfault reads
//                           the first back (swapfault) and maps the second again
//                           (mmapfault), in both policies; fork shares the slot of a
//                           paged-out page, and with COW_ALLOC=1 the first sharer to read
//                           it back shares the page (rmap_share)
//
// vmfault() decides with resolve() which of lazyfault, cowfault, swapfault and mmapfault
// handles a fault; when no page can be had, oomretry() (oom.c) reclaims or has the OOM
// killer make room and calls resolve() again. Every one of them keeps the invariants of
// a user page table (the top of vm.c), and takes its locks in kernel/locks.h's order.
//
// The `// LAB lazy:`, `// LAB cow:` and `// LAB swap:` comments mark what a lab's students
// write; their starter tree has the stub instead (docs/lab.md).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/swap.h"
#include "kernel/defs.h"

// Forget this hart's cached translation for va (after a PTE for va changed).
// Other harts need no flush: a process runs on one hart at a time, and the
// trampoline flushes the TLB whenever it switches to a user page table.
static inline void
flushva(uint64 va)
{
  asm volatile("sfence.vma %0, zero" : : "r"(va) : "memory");
}

// Lazy growth (sbrk with LAZY_ALLOC=1, or sbrklazy). Contract: map a zeroed, writable user
// page at page-aligned va, which is in p's heap and unmapped. Returns 0, or -1 if out of
// memory.
static int
lazyfault(struct proc *p, uint64 va)
{
  // LAB lazy: begin
  char *mem = kalloc();
  if(mem == 0)
    return -1;
  memset(mem, 0, PGSIZE);
  if(mappages(p->pagetable, va, PGSIZE, (uint64)mem, PTE_R | PTE_W | PTE_U) != 0){
    kfree(mem);
    return -1;
  }
  flushva(va);
  p->lazy_faults++;
  return 0;
  // LAB lazy: stub
  // return -1;
  // LAB lazy: end
}

// COW_ALLOC=1. Contract: a store hit the COW page that *pte (p's PTE for va) maps; give
// that PTE a private writable page. Returns 0, or -1 if out of memory (PTE unchanged).
// Also the store path of a MAP_PRIVATE file page (PTE_COW|PTE_FILE, any COW_ALLOC): the
// page cache holds a reference of its own, so such a page always has refcount >= 2 and
// is copied; the copy is anonymous memory and loses PTE_FILE.
//
// Why "refcount == 1 -> reuse" is safe without holding kmem.lock across the decision:
// our PTE owns one of the references, so a count of 1 means no other PTE maps the page.
// A new reference could only come from fork() copying a table that maps the page, and
// the only such table is p's own, changed only by p's thread, which is here. So the
// count stays 1 until we are done. In the copy branch the count may fall meanwhile
// (others exit or copy); then our copy was merely unnecessary, and our kfree() frees
// the page if we were the last. Other owners never write the page (their PTEs are
// read-only), and a krefcount() that reads 1 runs after the kfree() that made it 1,
// which ran after that owner's copy had read the page.
static int
cowfault(struct proc *p, uint64 va, pte_t *pte)
{
  // LAB cow: begin
  uint64 pa = PTE2PA(*pte);
  int flags = (PTE_FLAGS(*pte) | PTE_W) & ~(PTE_COW | PTE_FILE);

  p->cow_faults++;
  if(krefcount((void *)pa) == 1){
    *pte = PA2PTE(pa) | flags;
    p->cow_reuses++;
  } else {
    char *mem = kalloc();
    if(mem == 0)
      return -1;
    memmove(mem, (char *)pa, PGSIZE);
    *pte = PA2PTE(mem) | flags;
    kfree((void *)pa);
    p->cow_copies++;
  }
  flushva(va);
  return 0;
  // LAB cow: stub
  // return -1;
  // LAB cow: end
}

// Any configuration, with a swap disk. Contract: *pte (p's PTE for va) is paged out:
// read its slot into a new page and map it again with the flags it had; the PTE's slot
// reference is given back. Read-ahead: while pages are plentiful, the paged-out PTEs that
// follow in the same level-0 table and name the slots that follow on the disk (a region
// paged out in order) come back in the same request, up to SWAP_CLUSTER pages; they are
// mapped with PTE_A clear, so reclaim takes them first if they are not used. Returns 0,
// or -1 if out of memory (PTE unchanged). Sleeps on the disk: the caller holds p->vmlock
// and no spinlock.
static int
swapfault(struct proc *p, uint64 va, pte_t *pte)
{
  if(!holdingsleep(&p->vmlock))
    panic("swapfault: vmlock");
  // LAB swap: begin read the page (and the ones after it) back from swap
  char *pages[SWAP_CLUSTER];
  uint64 slot = PTE2SLOT(*pte);
  int max = kfreepages() > swap_low() + SWAP_CLUSTER ? SWAP_CLUSTER : 1;
  uint64 left = ((va | (512 * PGSIZE - 1)) + 1 - va) / PGSIZE;   // PTEs to this table's end
  int n = 0;

  for(; n < max && n < left && (pte[n] & PTE_SWAPPED) && PTE2SLOT(pte[n]) == slot + n; n++)
    if((pages[n] = kalloc()) == 0)
      break;
  if(n == 0)
    return -1;
  swap_read(slot, pages, n);
  p->paged_in += n;
  for(int i = 0; i < n; i++){
    pte[i] = PA2PTE(pages[i]) | (PTE_FLAGS(pte[i]) & ~PTE_V) | PTE_V;
    swap_put(slot + i);
  }
  sfence_vma();
  return 0;
  // LAB swap: stub
  // return -1;   // never reached until reclaim pages something out
  // LAB swap: end
}

// Contract: how many PTEs from pte (the paged-out PTE for va) on, in its level-0 table and
// at most SWAP_CLUSTER, are paged out naming the slots that follow its own in order: the
// most swapfault's read-ahead reads, for rmap_share to look at after it.
static int
slotrun(pte_t *pte, uint64 va)
{
  int n = 0;

  while(n < SWAP_CLUSTER && PX(0, va) + n < 512 && (pte[n] & PTE_SWAPPED) &&
        PTE2SLOT(pte[n]) == PTE2SLOT(pte[0]) + n)
    n++;
  return n;
}

// Contract: whether a valid PTE pte lets user code make the access (FAULT_LOAD, _STORE or
// _FETCH, defs.h): then a fault for it is stale, and trying the access again succeeds.
static int
allows(pte_t pte, int access)
{
  int need = access == FAULT_STORE ? PTE_W : access == FAULT_FETCH ? PTE_X : PTE_R;
  return (pte & PTE_U) && (pte & need);
}

// Contract: one attempt at vmfault's job (below), for page-aligned va. can_sleep is 0
// when the caller holds a spinlock (and then not p->vmlock): then a paged-out page cannot
// be read back, nor a file page mapped (-1). With can_sleep, the caller holds p->vmlock
// (vmfault, and oomretry in oom.c, which tries again after reclaim or the OOM killer);
// panics otherwise.
int
resolve(struct proc *p, uint64 va, int access, int can_sleep)
{
  if(can_sleep && !holdingsleep(&p->vmlock))
    panic("resolve: vmlock");
  int is_store = access == FAULT_STORE;
  pte_t *pte = walk(p->pagetable, va, 0);
  if(pte && (*pte & PTE_V)){
    if(is_store && (*pte & PTE_U) && (*pte & PTE_COW))
      return cowfault(p, va, pte);
    if(is_store && (*pte & PTE_U) && (*pte & PTE_FILE))
      return mmapfault(p, va, pte);
    // Mapped since the access faulted: another process's page-in gave it the page while
    // it waited for its vmlock or was preempted (rmap_share, kernel/rmap.c).
    return allows(*pte, access) ? 0 : -1;
  }
  // Back from swap, and to the others whose PTEs name the same slots (rmap_share,
  // kernel/rmap.c); a store then takes one more step if the page is COW.
  if(pte && (*pte & PTE_SWAPPED)){
    uint64 slot = PTE2SLOT(*pte);
    int run = slotrun(pte, va);
    if(!can_sleep || swapfault(p, va, pte) != 0)
      return -1;
    rmap_share(p, va, pte, slot, run);
    return is_store && (*pte & PTE_W) == 0 ? resolve(p, va, FAULT_STORE, can_sleep) : 0;
  }
  // An unmapped heap page: sbrk left it to first touch (LAZY_ALLOC=1), or sbrklazy did
  // (any configuration).
  if(va >= p->heapbase && va < p->sz)
    return lazyfault(p, va);
  // A file page on first touch (-1 unless va is in a region), or, in either policy,
  // again after reclaim dropped it. It is mapped read-only, so a store then takes one
  // more step: cowfault or the MAP_SHARED upgrade above.
  // Mapping it may read the file, and mappage() runs under p->vmlock, which vmfault
  // holds only when it can sleep: under a spinlock the access fails instead.
  if(can_sleep && mmapfault(p, va, 0) == 0)
    return is_store ? resolve(p, va, FAULT_STORE, can_sleep) : 0;
  return -1;
}

// Contract: resolve a page fault of process p (running on this hart, in its own trap or
// system call) at user address va; access is FAULT_STORE for a store/AMO (or copyout),
// FAULT_LOAD for a load (or copyin), FAULT_FETCH for an instruction fetch (defs.h; a
// copy's is_store is FAULT_STORE or FAULT_LOAD). Returns 0 if the access can be retried,
// -1 if it cannot (the caller kills p). Never panics on a bad address.
//   valid user PTE with PTE_COW, a store                -> cowfault(): copy or reuse
//                          (COW fork pages, and MAP_PRIVATE file pages in every config)
//   valid user PTE with PTE_FILE, no PTE_W, a store     -> mmapfault(): a MAP_SHARED
//                          writable page becomes writable (and dirty); else -1
//   valid user PTE that allows the access               -> 0: mapped meanwhile by
//                          another process's page-in (rmap_share)
//   paged-out PTE (any configuration, with swap)        -> swapfault(): read back
//   no valid PTE, heapbase <= va < sz (lazy growth)     -> lazyfault(): zeroed page
//   no valid PTE, va in an mmap region (LAZY_ALLOC=1, or a page reclaim dropped)
//                                                       -> mmapfault(): the file page,
//                          then for a store one of the two cases above
//   anything else: above sz, the guard page (no PTE_U), read-only text, trapframe,
//   trampoline, va >= MAXVA                               -> -1
// Unless the caller holds a spinlock, it takes p->vmlock (the caller must not hold it:
// panics), first reclaims while free pages are below the low watermark, and when a page
// cannot be had, reclaims and tries again while reclaim frees something; when nothing
// more can be reclaimed (no swap, or swap full too), the OOM killer (oom.c) kills the
// largest process if that is not p, and p, which waits for that without its vmlock,
// tries again once it has exited (those retries: oomretry, oom.c). So p dies for memory
// only as the largest.
int
vmfault(struct proc *p, uint64 va, int access)
{
  if(va >= MAXVA)
    return -1;
  va = PGROUNDDOWN(va);

  if(holding_spinlocks())
    return resolve(p, va, access, 0);
  // Nothing that copies to or from user memory holds its own vmlock (kernel/locks.h).
  if(holdingsleep(&p->vmlock))
    panic("vmfault: vmlock held");
  acquiresleep(&p->vmlock);
  vmreserve(SWAP_CLUSTER);   // room for a page-in's read-ahead
  int r = oomretry(p, va, access);
  releasesleep(&p->vmlock);
  return r;
}
