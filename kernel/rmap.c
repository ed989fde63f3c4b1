// The reverse map: from a page several processes map to its PTEs, for swap (swap.c).
//
// A user page with more than one reference that no file backs was shared by COW fork:
// a writable page made PTE_COW (vm.c share_pte), or text shared read-only. Fork keeps
// addresses and nothing moves a page to another address (there is no mremap), so every
// PTE that maps such a page is at the same virtual address va, each in its own process:
// its mappers are found by looking va up in the other processes' page tables. NPROC is
// small, so that search is the whole map: no per-page record to keep (Linux's anon_vma
// narrows the same search to the processes of one fork tree).
//
//   before:  parent's PTE at va --+                   after:  parent's PTE at va --+
//                                 +--> page pa (2)                                 +--> slot s (2)
//            child's PTE at va ---+                           child's PTE at va ---+
//
// Page-out (rmap_pageout, for reclaim's clock): a PTE found at va counts only in a process
// that is locked (lockset, below), and the page goes only when those PTEs hold every
// reference it has (krefcount): a mapper that was busy or running, or any other
// reference, keeps it in, and so does a page that looks shared but is not the same page
// at every va. The clock judges the page by all its PTEs' accessed bits, once a turn, at
// the visit to the first of its mappers in proc[]: if any PTE has PTE_A, every one loses
// it (a second chance); if none has, the page goes out once for all of them: one slot,
// its count the number of PTEs, each PTE paged out naming it (riscv.h), one write.
//
// Page-in (rmap_share, for the fault path): the first PTE to fault reads the page back
// (swapfault); with COW_ALLOC=1 the page is then mapped in every other locked process
// whose PTE at va names the same slot, read-only and PTE_COW where it was writable, each
// taking a page reference and giving its slot reference back. So a page that was shared
// when it went out (or whose paged-out PTE fork copied) is shared again, read once, until
// a store copies it (cowfault). A PTE of a process that could not be locked keeps its
// slot reference and reads its own copy when it faults, as every PTE does with
// COW_ALLOC=0 (fork copies there, so it shares nothing). Slot and page counts stay
// exact either way: one reference per PTE.
//
// Locking (kernel/locks.h, "The vmlock" and p->lock): changing another process's PTEs is
// safe for the reasons swap.c gives for reclaim: its vmlock is held (tried, never waited
// for: the caller holds one already) and so is its p->lock, with the process not running,
// so no hart caches its translations and it starts none of its own page-table changes.
// A PTE paged out to a slot not yet written keeps its process's vmlock held until the
// write is done (rmap_release after writeout), so a fault on it reads the slot after.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/swap.h"
#include "kernel/defs.h"

// A set of processes is a mask of proc[] indexes.
#if NPROC > 64
#error "struct lockset holds NPROC bits in a uint64"
#endif
#define BIT(p) (1UL << ((p) - proc))

extern struct proc proc[NPROC];

// The processes whose PTEs rmap_pageout or rmap_share may change, locked by lockset.
struct lockset {
  struct proc *me;    // the caller, running this code
  uint64 vm;          // those whose vmlock lockset took (unlockset lets them go)
  uint64 held;        // those whose p->lock lockset holds
  uint64 in;          // held, and me if it holds its own vmlock: the PTEs that may change
  uint64 paged;       // those whose PTEs now name a slot not written yet (sharedpage)
};

// Contract: lock in ls the processes whose PTEs rmap_pageout or rmap_share may change: q,
// whose vmlock the caller holds already (reclaim's victim, or the caller itself), and
// every other process whose vmlock is free. The vmlocks are tried, never waited for
// (kernel/locks.h, "The vmlock"); then the p->locks of q and of those, in proc[] order
// (kernel/locks.h, p->lock), and a process stays in the set only if it is SLEEPING or
// RUNNABLE with a user page table: it cannot run, nor its page table go, until
// unlockset. The caller me is in the set, without its p->lock, if it holds its own
// vmlock: it runs this code, and flushes its own TLB afterwards. Panics unless the
// caller holds q's vmlock and no spinlock (tryacquiresleep takes a sleeplock's own
// spinlock, which comes before p->lock).
static void
lockset(struct lockset *ls, struct proc *me, struct proc *q)
{
  if(holding_spinlocks())
    panic("lockset: spinlock");
  if(!holdingsleep(&q->vmlock))
    panic("lockset: vmlock");
  ls->me = me;
  ls->vm = ls->held = ls->in = ls->paged = 0;
  if(holdingsleep(&me->vmlock))
    ls->in |= BIT(me);
  for(struct proc *r = proc; r < &proc[NPROC]; r++)
    if(r != me && r != q && tryacquiresleep(&r->vmlock))
      ls->vm |= BIT(r);
  uint64 want = ls->vm | (q != me ? BIT(q) : 0);
  for(struct proc *r = proc; r < &proc[NPROC]; r++){
    if((want & BIT(r)) == 0)
      continue;
    acquire(&r->lock);
    if((r->state == SLEEPING || r->state == RUNNABLE) && r->pagetable){
      ls->held |= BIT(r);
      ls->in |= BIT(r);
    } else {
      release(&r->lock);
    }
  }
}

// Contract: let go of the vmlocks of the processes in mask (a set rmap_pageout kept).
void
rmap_release(uint64 mask)
{
  for(struct proc *r = proc; r < &proc[NPROC]; r++)
    if(mask & BIT(r))
      releasesleep(&r->vmlock);
}

// Contract: let go of what lockset took: the p->locks, then the vmlocks, except those of
// the processes with PTEs paged out to slots not written yet (ls->paged), which it
// returns, for the caller to let go of once they are written (rmap_release).
static uint64
unlockset(struct lockset *ls)
{
  for(struct proc *r = proc; r < &proc[NPROC]; r++)
    if(ls->held & BIT(r))
      release(&r->lock);
  rmap_release(ls->vm & ~ls->paged);
  return ls->vm & ls->paged;
}

// Contract: r's leaf PTE for va if r is in ls and has one, else 0. Panics if r is in ls
// without its p->lock held, unless it is the caller (the rule lockset keeps).
static pte_t *
lockedpte(struct lockset *ls, struct proc *r, uint64 va)
{
  if((ls->in & BIT(r)) == 0)
    return 0;
  if(r != ls->me && !holding(&r->lock))
    panic("lockedpte: p->lock");
  return walk(r->pagetable, va, 0);
}

// Contract: r's PTE for va if r is in ls and that PTE maps the page pa, else 0.
static pte_t *
mapper(struct lockset *ls, struct proc *r, uint64 va, uint64 pa)
{
  pte_t *pte = lockedpte(ls, r, va);
  return pte && (*pte & PTE_V) && PTE2PA(*pte) == pa ? pte : 0;
}

// Contract: judge the page that q's PTE for va maps, anonymous with more than one
// reference, by all the PTEs that map it (va in the processes of ls). It stays (0) if it
// is no longer shared, if those PTEs do not hold every reference it has (a mapper outside
// ls, or another owner), or if a mapper before q in proc[] judges it (once a turn). Else,
// if a PTE has PTE_A, every one loses it (0); if none has, the page goes (1): one slot,
// with one reference per PTE, each PTE paged out naming it, and the page's references
// dropped but one, which *out carries to writeout with the slot and va. -1: no slot is
// free (nothing changed).
static int
sharedpage(struct lockset *ls, struct proc *q, uint64 va, struct pageout *out)
{
  pte_t *pte = lockedpte(ls, q, va);
  if(pte == 0 || (*pte & (PTE_V | PTE_U | PTE_FILE)) != (PTE_V | PTE_U))
    return 0;
  uint64 pa = PTE2PA(*pte);
  int n = 0, young = 0;

  for(struct proc *r = proc; r < &proc[NPROC]; r++){
    if((pte = mapper(ls, r, va, pa)) == 0)
      continue;
    if(r < q)
      return 0;
    n++;
    young |= (*pte & PTE_A) != 0;
  }
  // Those PTEs' owners are locked, so no reference can be added (fork is theirs) or
  // dropped meanwhile: the count is exact.
  if(n < 2 || n != krefcount((void *)pa))
    return 0;
  long slot = -1;   // stays -1 for a young page
  if(!young && (slot = swap_alloc()) < 0)
    return -1;
  for(struct proc *r = proc; r < &proc[NPROC]; r++){
    if((pte = mapper(ls, r, va, pa)) == 0)
      continue;
    if(slot < 0){
      *pte &= ~PTE_A;          // a second chance, for every PTE at once
      continue;
    }
    *pte = SLOT2PTE(slot) | (PTE_FLAGS(*pte) & ~(PTE_V | PTE_A | PTE_D)) | PTE_SWAPPED;
    ls->paged |= BIT(r);
    if(--n > 0){
      swap_dup(slot);          // this PTE's reference to the slot
      kfree((void *)pa);       // and the page reference it owned (not the last)
    }
  }
  if(slot < 0)
    return 0;
  out->pa = (char *)pa;
  out->slot = slot;
  out->va = va;
  return 1;
}

// Contract: for reclaim's visit to q (swap.c): judge the pages of q at vas[0..nva), which
// several PTEs map (uvmpageout found them), with all their PTEs (sharedpage), and page
// out up to room of them into out[]. Returns how many; *kept gets the other processes
// whose vmlocks it still holds because their PTEs now name those slots. Caller holds q's
// vmlock and no spinlock; it writes out[] (writeout), then lets go of *kept
// (rmap_release).
int
rmap_pageout(struct proc *q, struct proc *me, uint64 *vas, int nva, struct pageout *out,
             int room, uint64 *kept)
{
  struct lockset ls;
  int n = 0, r = 0;

  lockset(&ls, me, q);
  for(int i = 0; i < nva && n < room && r >= 0 && (ls.in & BIT(q)); i++)
    if((r = sharedpage(&ls, q, vas[i], out + n)) > 0)
      n++;
  int mine = (ls.in & BIT(me)) != 0;
  *kept = unlockset(&ls);
  if(mine)
    sfence_vma();   // our own PTEs lost PTE_A or were paged out
  return n;
}

// Contract: the flags a PTE that named a slot gets when it maps a page others map too:
// its own (riscv.h), read-only and PTE_COW if it was writable, PTE_A and PTE_D clear.
static uint64
sharedflags(pte_t pte)
{
  uint64 flags = PTE_FLAGS(pte) & ~(PTE_V | PTE_A | PTE_D);
  return (flags & PTE_W) ? (flags & ~PTE_W) | PTE_COW | PTE_V : flags | PTE_V;
}

// Contract: map the page that *own (the caller's PTE for va) has just been given from slot
// in every PTE for va in ls that names slot: one more page reference and one slot
// reference fewer each, read-only (sharedflags); then *own too, if it shared. Returns
// whether it shared.
static int
sharepage(struct lockset *ls, uint64 va, uint64 slot, pte_t *own)
{
  uint64 pa = PTE2PA(*own);
  int shared = 0;

  for(struct proc *r = proc; r < &proc[NPROC]; r++){
    pte_t *pte = r == ls->me ? 0 : lockedpte(ls, r, va);
    if(pte == 0 || (*pte & PTE_SWAPPED) == 0 || PTE2SLOT(*pte) != slot)
      continue;
    krefinc((void *)pa);
    *pte = PA2PTE(pa) | sharedflags(*pte);
    swap_put(slot);
    shared = 1;
  }
  if(shared)
    *own = PA2PTE(pa) | sharedflags(*own);
  return shared;
}

// Contract: p's fault has just read pages back from swap (swapfault) into its PTEs
// pte[0..), for va, va+PGSIZE, ...; before, the first max of them were paged out naming
// slots slot, slot+1, ..., and those now valid were read (swapfault reads a prefix).
// With COW_ALLOC=1, each such page whose slot other PTEs still name is mapped there too,
// in the processes lockset gets (sharepage). Caller: p itself (the fault path), holding
// p->vmlock and no spinlock.
void
rmap_share(struct proc *p, uint64 va, pte_t *pte, uint64 slot, int max)
{
  struct lockset ls;
  int n = 0, shared = 0;

  if(!holdingsleep(&p->vmlock))
    panic("rmap_share: vmlock");
  while(n < max && (pte[n] & PTE_V))
    n++;
  if(!COW_ALLOC || !swap_held(slot, n))
    return;
  lockset(&ls, p, p);
  for(int i = 0; i < n; i++)
    shared |= sharepage(&ls, va + (uint64)i * PGSIZE, slot + i, &pte[i]);
  unlockset(&ls);   // sharepage pages nothing out: it keeps no vmlock
  if(shared)
    sfence_vma();   // our own PTEs lost PTE_W
}
