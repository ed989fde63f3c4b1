// Swap: the second virtio disk (SWAPDEV) as an array of page-sized slots, and reclaim,
// which pages user memory out to it when free pages run low. With no second disk there
// are no slots, reclaim() does nothing, and memory runs out exactly as it did before.
//
// Slots. Slot s is block s of the swap disk (BSIZE == PGSIZE). refs[s] counts the
// paged-out PTEs (riscv.h) that name s; 0 means free. A slot is written once, when
// reclaim pages a page out into it, and is only read after that: fork copies a paged-out
// PTE and takes one more reference (swap_dup), a page-in or an unmap gives one back
// (swap_put), and the last one frees the slot. With COW_ALLOC=0 a parent and a child that
// share a slot each read their own private copy back; with COW_ALLOC=1 the first to fault
// shares the page it read with the others (rmap_share, kernel/rmap.c).
//
// Reclaim is a clock (second chance) over the resident user pages of every process. The
// hand is (process slot, user address). A page the hand passes with PTE_A set (the MMU
// sets it on every access) loses the bit; one still clear when the hand comes round again
// was not touched for a whole turn and goes: a clean file page that p's PTE alone maps is
// dropped (it comes back from the page cache or the file, at no write; one that other
// PTEs map too stays, sharedfile says why), an anonymous page that p's PTE alone
// maps is paged out (see uvmpageout below for the pages it leaves alone, and why), and an
// anonymous page that several PTEs map (COW fork shared it) goes out once for all of
// them, judged by all their accessed bits: the reverse map, kernel/rmap.c, finds and
// changes those PTEs (rmap_pageout).
//
// Why paging out another process's page is safe (vm.c's "only the owner changes its
// page table" gains this exception, and rmap.c's page-in its twin):
//   - Reclaim holds the victim's vmlock, as every operation of a process on its own page
//     table that may sleep does, and never waits for it (kernel/locks.h, "The vmlock").
//   - Another process is paged out only while it is not RUNNING, checked under p->lock,
//     which is held while its PTEs change: no hart holds a TLB entry for its pages, since
//     the trampoline flushes the TLB on every entry to user mode. Kernel code that uses a
//     user page by its physical address does it with interrupts off (copyuser in vm.c),
//     so it cannot be preempted and paged out in between.
//   - A PTE becomes paged out before its page is written to the slot; a fault on it
//     waits for the vmlock, so it reads the slot only after the write has finished. The
//     reclaimer owns the page from the PTE change on, and frees it after the write.
//
//   - A shared page's other mappers are changed under the same rules (kernel/rmap.c):
//     their vmlocks are tried and their p->locks taken, so they cannot run meanwhile,
//     and the vmlock of each one whose PTE now names the slot is held until the slot is
//     written.
//
// Locking: swap.lock (a spinlock) protects the slot table and the counters. hand.lock (a
// sleeplock: reclaim sleeps on the disk while it holds it) serialises reclaimers and
// protects the hand and its list of shared pages. Their order with the other locks:
// kernel/locks.h.
//
// The `// LAB swap:` comments mark what the swap lab's students write (the slot table
// and the page-out choice here, the page-in in fault.c, fork's share of a slot in vm.c);
// their starter tree has the stub instead (docs/lab.md).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/fs.h"
#include "kernel/virtio.h"
#include "kernel/memstat.h"
#include "kernel/swap.h"
#include "kernel/defs.h"

#if BSIZE != PGSIZE
#error "a swap slot is one disk block"
#endif

// The slot table is one byte per slot, in pages from kalloc; MAXSLOTS bounds the part of
// a swap disk NexOS uses (4 GiB), and the table of page pointers with it.
#define MAXSLOTS (1L << 20)
#define SLOTS_PER_PAGE PGSIZE
#define MAXREFS 255

// PTEs reclaim looks at per visit to a process (one level-0 table), so that p->lock is
// never held for long.
#define SCAN_STEP 512

extern struct proc proc[NPROC];

static struct {
  struct spinlock lock;                       // protects every field below
  uint8 *refs[MAXSLOTS / SLOTS_PER_PAGE];     // refs[s / SLOTS_PER_PAGE][s % SLOTS_PER_PAGE]
  uint64 nslots;      // slots on the disk (0: no swap)
  uint64 nused;       // slots with a reference
  uint64 hint;        // where the search for a free slot starts
  uint64 ins;         // pages read back since boot
  uint64 outs;        // pages written out since boot
  uint64 dropped;     // clean file pages unmapped since boot
  uint64 sharedouts;  // of outs, pages several PTEs mapped (rmap_pageout)
} swap;

static struct {
  struct sleeplock lock;
  int proc;           // index in proc[] of the process the hand is in
  uint64 va;          // where in that process it looks next
  uint64 shared[SCAN_STEP];   // this visit's pages several PTEs map, for rmap_pageout
  int nshared;
} hand;

// Contract: the reference count of slot s. Caller holds swap.lock.
static uint8 *
ref(uint64 s)
{
  if(!holding(&swap.lock))
    panic("swap ref: swap.lock");
  return &swap.refs[s / SLOTS_PER_PAGE][s % SLOTS_PER_PAGE];
}

// Contract: set up swap on SWAPDEV if QEMU has that disk (at most MAXSLOTS of it), with
// every slot free. Hart 0, once, after virtio_disk_init(); panics if memory runs out.
void
swapinit(void)
{
  initlock(&swap.lock, "swap");
  initsleeplock(&hand.lock, "reclaim");
  uint64 n = virtio_disk_blocks(SWAPDEV);
  swap.nslots = n < MAXSLOTS ? n : MAXSLOTS;
  for(uint64 s = 0; s < swap.nslots; s += SLOTS_PER_PAGE){
    uint8 *page = kalloc();
    if(page == 0)
      panic("swapinit: out of memory");
    memset(page, 0, PGSIZE);
    swap.refs[s / SLOTS_PER_PAGE] = page;
  }
}

// Contract: swap size in MiB (the boot line's swap=).
int
swap_mb(void)
{
  return swap.nslots * PGSIZE / (1024 * 1024);
}

// Contract: a free slot, now with one reference (the caller's PTE), or -1 if every slot
// is taken. Takes swap.lock (callers may hold p->lock).
long
swap_alloc(void)
{
  // LAB swap: begin find a free slot and give it its first reference
  long got = -1;

  acquire(&swap.lock);
  for(uint64 k = 0; k < swap.nslots && swap.nused < swap.nslots; k++){
    uint64 s = (swap.hint + k) % swap.nslots;
    if(*ref(s) == 0){
      *ref(s) = 1;
      swap.nused++;
      swap.hint = s + 1;
      got = s;
      break;
    }
  }
  release(&swap.lock);
  return got;
  // LAB swap: stub
  // (void)ref;   // the slot table's accessor, for the slot functions you write
  // return -1;   // every slot taken: nothing can be paged out
  // LAB swap: end
}

// Contract: one more reference to slot s, for a child PTE that fork copies. Panics if s
// is free or has MAXREFS references (NPROC < MAXREFS: a kernel bug).
void
swap_dup(uint64 s)
{
  // LAB swap: begin one more reference to slot s
  acquire(&swap.lock);
  if(s >= swap.nslots || *ref(s) == 0 || *ref(s) == MAXREFS)
    panic("swap_dup");
  (*ref(s))++;
  release(&swap.lock);
  // LAB swap: end
}

// Contract: give back one reference to slot s (a PTE naming it was read in or unmapped);
// the last one frees it. Panics if s is free (a kernel bug).
void
swap_put(uint64 s)
{
  // LAB swap: begin give back one reference to slot s; the last one frees it
  acquire(&swap.lock);
  if(s >= swap.nslots || *ref(s) == 0)
    panic("swap_put");
  if(--(*ref(s)) == 0)
    swap.nused--;
  release(&swap.lock);
  // LAB swap: end
}

// Contract: whether any of slots s .. s+n-1 has a reference (a PTE still names it).
int
swap_held(uint64 s, int n)
{
  int held = 0;

  acquire(&swap.lock);
  for(int i = 0; i < n && !held; i++)
    held = s + i < swap.nslots && *ref(s + i) > 0;
  release(&swap.lock);
  return held;
}

// Contract: read slots s .. s+n-1 into pages pa[0..n), in one request (n <= VIRTIO_MAXBUFS).
// Sleeps (process context, no spinlock held); the caller holds the vmlock of the process
// whose PTEs name the slots, so they were written.
void
swap_read(uint64 s, char **pa, int n)
{
  if(holding_spinlocks())
    panic("swap_read: spinlock");
  virtio_disk_pages(SWAPDEV, s, (void **)pa, n, 0);
  acquire(&swap.lock);
  swap.ins += n;
  release(&swap.lock);
}

// Contract: whether pte maps a page no file backs that has more than one reference: a
// page COW fork shared, which rmap_pageout judges with all its PTEs. Read without
// kmem.lock (ksoleref): a count that falls meanwhile only sends the page to rmap_pageout,
// which counts again under the locks of its mappers.
static int
sharedanon(pte_t pte)
{
  return (pte & (PTE_V | PTE_U | PTE_FILE)) == (PTE_V | PTE_U) &&
         !ksoleref((void *)PTE2PA(pte));
}

// Contract: whether pte maps a file page that another PTE maps too: more references than
// the page cache's and this PTE's (fork shared the mapping: the model that smolserve's
// server and every worker map). Reclaim leaves it: dropping one of its PTEs frees nothing,
// and dropping them one by one, each judged by its own accessed bit alone, frees a page
// the other mappers are still reading, which they then read back from the disk for every
// token. It can go once one mapping is left. Read without kmem.lock (krefpeek): a count
// that changes meanwhile only keeps a page one turn more or drops one PTE of a page that
// the page cache then keeps for its other mappers.
static int
sharedfile(pte_t pte)
{
  return (pte & (PTE_V | PTE_U | PTE_FILE)) == (PTE_V | PTE_U | PTE_FILE) &&
         krefpeek((void *)PTE2PA(pte)) > 2;
}

// Contract: one step of reclaim's clock (below) over the user leaves of pagetable, from
// page-aligned va up to TRAPFRAME, one level-0 table at a time. It looks at up to
// maxscan PTEs (holes and paged-out ones included) or until nout pages are chosen. A
// resident user page (PTE_V|PTE_U) with PTE_A set loses it (its second chance). One with
// PTE_A clear goes if it is
//   - a clean file page (PTE_FILE without PTE_W: not stored to through MAP_SHARED):
//     dropped, its PTE a hole again, which vmfault maps again from the page cache; or
//   - anonymous, with this PTE its only reference, and a swap slot is free: paged out,
//     its PTE naming the slot.
// An anonymous page with more than one reference (sharedanon) is not judged here: its va
// goes to shared[] (*nshared of them, at most maxscan), for rmap_pageout to judge with
// all its PTEs; one whose PTE_A is clear here counts against nout, as it may go.
// A file page another PTE maps too (sharedfile) stays, its PTE_A untouched.
// out[] gets the page (the PTE's reference, now the caller's), the slot (NOSLOT for a
// dropped file page) and va. *n = pages chosen, *nscan = PTEs seen (a region without a
// table counts as one). Returns where to go on, or 0 once past the end.
// Caller: visit(), holding the owner's vmlock and p->lock, the owner not running
// elsewhere; it flushes the TLB.
static uint64
uvmpageout(pagetable_t pagetable, uint64 va, int maxscan, struct pageout *out, int nout,
           int *n, int *nscan, uint64 *shared, int *nshared)
{
  int cold = 0;   // entries of shared[] with PTE_A clear

  *n = 0;
  *nscan = 0;
  *nshared = 0;
  while(va < TRAPFRAME){
    uint64 end = nextregion(pagetable, va);
    pte_t *pte = walk(pagetable, va, 0);
    if(pte == 0){
      (*nscan)++;
      va = end;
      continue;
    }
    for(; va < end && va < TRAPFRAME; va += PGSIZE, pte++){
      if(*nscan >= maxscan || *n + cold >= nout)
        return va;
      (*nscan)++;
      if(sharedanon(*pte)){
        cold += (*pte & PTE_A) == 0;
        shared[(*nshared)++] = va;
        continue;
      }
      if(sharedfile(*pte))
        continue;
      // LAB swap: begin the clock's choice for this PTE: second chance, drop or page out
      if((*pte & (PTE_V | PTE_U)) != (PTE_V | PTE_U))
        continue;
      uint64 pa = PTE2PA(*pte);
      if(*pte & PTE_A){
        *pte &= ~PTE_A;
      } else if((*pte & (PTE_FILE | PTE_W)) == PTE_FILE){
        out[*n].pa = (char *)pa;
        out[*n].slot = NOSLOT;
        out[*n].va = va;
        (*n)++;
        *pte = 0;
      } else if((*pte & PTE_FILE) == 0 && ksoleref((void *)pa)){
        long slot = swap_alloc();
        if(slot < 0)
          return va;
        out[*n].pa = (char *)pa;
        out[*n].slot = slot;
        out[*n].va = va;
        (*n)++;
        *pte = SLOT2PTE(slot) | (PTE_FLAGS(*pte) & ~(PTE_V | PTE_A | PTE_D)) | PTE_SWAPPED;
      }
      // LAB swap: end
    }
  }
  return 0;
}

// Contract: write each anonymous out[i].pa to its slot; then give back every page's
// reference (the one its PTE owned; of a shared page, the last of its PTEs'), and for a
// dropped file page of q let the page cache free the page if no other PTE maps it. Pages
// bound for consecutive slots go in one request. Sleeps; the caller holds q's vmlock, so
// q's regions stay as they are (and q->paged_out is the caller's to add to), and that of
// every other process whose PTE names one of the slots (rmap_pageout), so that none
// reads a slot before it is written. The last nshared of out[] are pages several PTEs
// mapped (counted in swap_outs_shared).
static void
writeout(struct proc *q, struct pageout *out, int n, int nshared)
{
  if(!holdingsleep(&q->vmlock))
    panic("writeout: vmlock");
  void *pas[VIRTIO_MAXBUFS];
  int nout = 0;

  for(int i = 0; i < n; ){
    int k = 0;
    while(i + k < n && k < VIRTIO_MAXBUFS && out[i].slot != NOSLOT &&
          out[i + k].slot == out[i].slot + k){
      pas[k] = out[i + k].pa;
      k++;
    }
    if(k > 0)
      virtio_disk_pages(SWAPDEV, out[i].slot, pas, k, 1);
    nout += k;
    i += k > 0 ? k : 1;
  }
  for(int i = 0; i < n; i++){
    kfree(out[i].pa);
    if(out[i].slot == NOSLOT)
      mmap_trim(q, out[i].va);
  }
  q->paged_out += nout;
  acquire(&swap.lock);
  swap.outs += nout;
  swap.dropped += n - nout;
  swap.sharedouts += nshared;
  release(&swap.lock);
}

// KDEBUG=pageout only (docs/memory.md, "Checking a race"). Contract: page p's page at va
// out now, as reclaim on another hart may do whenever p is preempted (visit() takes
// RUNNABLE processes): the clock's hand passes that one PTE twice (the first pass may
// only take PTE_A). Nothing happens to a page that is not p's alone, a file's, or when no
// slot is free. Caller is p, holding no lock.
void
swap_evict(struct proc *p, uint64 va)
{
  struct pageout out;
  uint64 shared;
  int n = 0, nscan, nshared;

  acquiresleep(&p->vmlock);
  acquire(&p->lock);   // as visit() holds it around uvmpageout()
  for(int pass = 0; pass < 2 && n == 0; pass++)
    uvmpageout(p->pagetable, va, 1, &out, 1, &n, &nscan, &shared, &nshared);
  release(&p->lock);
  sfence_vma();
  writeout(p, &out, n, 0);
  releasesleep(&p->vmlock);
}

// Contract: one visit of the hand to process q: page out up to want of its pages from
// hand.va on (uvmpageout chooses them, rmap_pageout those q shares with others), write
// them and free them. Returns the pages freed; *scanned is the PTEs looked at (1 for a
// process it could not visit). Caller holds hand.lock (panics otherwise) and is process me.
static int
visit(struct proc *q, struct proc *me, int want, int *scanned)
{
  struct pageout out[RECLAIM_BATCH];
  int n = 0;

  if(!holdingsleep(&hand.lock))
    panic("visit: hand.lock");
  *scanned = 1;
  int locked = q == me ? holdingsleep(&q->vmlock) : tryacquiresleep(&q->vmlock);
  if(!locked){
    hand.va = 0;
    return 0;
  }
  uint64 kept = 0;   // other processes whose vmlocks rmap_pageout still holds
  int shared = 0;
  hand.nshared = 0;
  acquire(&q->lock);
  if((q == me || q->state == SLEEPING || q->state == RUNNABLE) && q->pagetable)
    hand.va = uvmpageout(q->pagetable, hand.va, SCAN_STEP, out, want, &n, scanned,
                         hand.shared, &hand.nshared);
  else
    hand.va = 0;
  release(&q->lock);
  if(hand.nshared > 0)
    shared = rmap_pageout(q, me, hand.shared, hand.nshared, out + n, want - n, &kept);
  n += shared;
  if(q == me)
    sfence_vma();   // our own PTEs lost PTE_A or were paged out
  writeout(q, out, n, shared);
  rmap_release(kept);   // the other sharers' vmlocks, now that their slots are written
  if(q != me)
    releasesleep(&q->vmlock);
  return n;
}

// Contract: try to free up to want pages (at most RECLAIM_BATCH) by paging user pages
// out, turning the clock's hand at most twice round all the memory there is (the first
// turn may only clear accessed bits). Returns the pages freed: 0 when there is no swap,
// swap is full, or nothing can be paged out. Sleeps: the caller holds no spinlock
// (panics otherwise), and no pointer into its own user memory if it holds its own vmlock
// (its pages may go too).
int
reclaim(int want)
{
  struct proc *me = myproc();
  // Two turns over every PTE user memory can have (RAM and swap), and every process slot.
  long budget = 2 * (ktotalpages() + swap.nslots) + 2 * NPROC * SCAN_STEP;
  int got = 0;

  if(holding_spinlocks())
    panic("reclaim: spinlock held");
  if(swap.nslots == 0 || me == 0)
    return 0;
  if(want > RECLAIM_BATCH)
    want = RECLAIM_BATCH;
  acquiresleep(&hand.lock);
  while(got < want && budget > 0 && swap_free_slots() > 0){
    int scanned;
    got += visit(&proc[hand.proc], me, want - got, &scanned);
    budget -= scanned;
    if(hand.va == 0)
      hand.proc = (hand.proc + 1) % NPROC;
  }
  releasesleep(&hand.lock);
  return got;
}

// Contract: make sure npages pages are free and the low watermark's worth more, paging
// out (reclaim) as needed; once below, it frees a batch more than that, so that the next
// callers find pages without reclaiming each time. Returns 0, or -1 if fewer than npages
// are free even after reclaim gave all it could. Without swap it only looks. May sleep:
// the caller holds no spinlock and no pointer into user memory that reclaim could take
// (if it holds its own vmlock, its own pages may go).
int
vmreserve(uint64 npages)
{
  if(kfreepages() >= npages + swap_low())
    return 0;
  while(kfreepages() < npages + swap_low() + RECLAIM_BATCH)
    if(reclaim(RECLAIM_BATCH) == 0)
      return kfreepages() >= npages ? 0 : -1;
  return 0;
}

// Contract: the low watermark: vmfault and the other places that are about to use pages
// reclaim while free pages are below it (vmreserve, above).
uint64
swap_low(void)
{
  uint64 low = ktotalpages() / 64;
  return low > 2 * RECLAIM_BATCH ? low : 2 * RECLAIM_BATCH;
}

// Contract: slots on the swap disk (0 without swap): part of what sbrk may promise (sbrkcap, vm.c).
uint64
swap_total_slots(void)
{
  return swap.nslots;
}

// Contract: slots free now (0 without swap). A statistic, and eager sbrk's upper bound.
uint64
swap_free_slots(void)
{
  // LAB swap: begin the slots nobody references
  acquire(&swap.lock);
  uint64 n = swap.nslots - swap.nused;
  release(&swap.lock);
  return n;
  // LAB swap: stub
  // return 0;   // no slot free: reclaim and eager sbrk behave as without swap
  // LAB swap: end
}

// Contract: add the whole-system swap figures to ms (memstat; kernel/memstat.h).
void
swapstat(struct memstat *ms)
{
  acquire(&swap.lock);
  ms->swap_slots = swap.nslots;
  ms->swap_slots_used = swap.nused;
  ms->swap_ins = swap.ins;
  ms->swap_outs = swap.outs;
  ms->dropped_file_pages = swap.dropped;
  ms->swap_outs_shared = swap.sharedouts;
  release(&swap.lock);
}
