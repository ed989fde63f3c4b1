// Physical page allocator: 4096-byte pages of RAM between the end of the kernel image
// and PHYSTOP, each with a reference count.
//
// Where free pages come from:
//   - a free list of pages that were allocated once and freed since (linked through
//     the first word of each free page), and
//   - the "untouched" range [fresh, PHYSTOP): pages never handed out since boot.
//     kinit() therefore writes no page it will hand out (only the ones it carves for
//     refs[], below); a page is first written when somebody allocates it.
//
// Tables sized by RAM (refs[] below, the page cache's entries) are carved at boot, by
// kcarve(), from the bottom of the free pages, before the first kalloc(): RAM's size is
// known only then (the device tree, main.c), and one build boots at every size.
//
// Reference counts: refs[i] counts the references to the page at KERNBASE + i*PGSIZE.
// A reference is owned by whoever will call kfree() for it: normally one user PTE
// (vm.c), or the kernel structure that called kalloc() (a page-table page, a pipe,
// a kernel stack, a trapframe), or the page cache for each page it lists (pagecache.c).
// COW fork adds one reference per sharing PTE with
// krefinc_ptes(); the page returns to the free list when the last owner calls kfree().
// A page with refs 0 is free (on the list or untouched); allocated pages have refs >= 1.
// `// LAB cow:` comments mark what the COW lab's students write (docs/lab.md).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/spinlock.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

// Build with -DKALLOC_DEBUG=1 to fill pages with junk on kalloc() and kfree(), which
// makes reads of uninitialised or freed memory show up quickly. Off by default: it
// costs a page write per allocation.
#ifndef KALLOC_DEBUG
#define KALLOC_DEBUG 0
#endif

#define NPHYSPAGES ((PHYSTOP - KERNBASE) / PGSIZE)  // RAM's pages, kernel image included

extern char end[];  // first address after the kernel image; see kernel.ld

struct freepage {
  struct freepage *next;
};

// kmem.lock protects every field of kmem, and every element of refs[].
// One lock for both keeps "count reaches 0" and "page goes on the free list" atomic,
// and makes a krefcount() that reads 1 happen after the kfree() that dropped the
// count to 1 (fault.c's COW fault relies on that ordering; see cowfault()).
static struct {
  struct spinlock lock;
  struct freepage *freelist; // freed pages
  uint64 fresh;              // lowest never-allocated page; [fresh, PHYSTOP) is free
  uint64 first;              // lowest page the allocator manages: above the kernel image
                             // and the tables kcarve() took; fixed after boot
  uint64 nfree;              // pages on the free list + pages in [fresh, PHYSTOP)
} kmem;

// refs[i] for the page at KERNBASE + i*PGSIZE, NPHYSPAGES of them: carved by kinit().
static uint16 *refs;

// Contract: the index of pa in refs[]. Panics unless pa is a page-aligned address
// of a page this allocator manages: passing anything else is a kernel bug.
static uint64
pageindex(void *pa, char *who)
{
  uint64 a = (uint64)pa;
  if(a % PGSIZE != 0 || a < kmem.first || a >= PHYSTOP)
    panic(who);
  return (a - KERNBASE) / PGSIZE;
}

// Contract: set up the allocator over [PGROUNDUP(end), PHYSTOP), less the reference
// counts it carves for itself. Called once, by hart 0, after main() has set PHYSTOP and
// before any kalloc(). Touches no free page (see the top of this file).
void
kinit(void)
{
  initlock(&kmem.lock, "kmem");
  kmem.first = PGROUNDUP((uint64)end);
  if(kmem.first >= PHYSTOP)
    panic("kinit: no free memory");
  kmem.fresh = kmem.first;
  kmem.freelist = 0;
  kmem.nfree = (PHYSTOP - kmem.first) / PGSIZE;
  refs = kcarve(NPHYSPAGES * sizeof(refs[0]));
}

// Contract: n bytes of zeroed, page-aligned memory that the caller keeps forever, for a
// table sized by RAM. They are the lowest free pages, which the allocator then no longer
// manages (ktotalpages() shrinks by as many). Valid only at boot, on hart 0, after kinit()
// and before the first kalloc(), while every free page is still in one untouched run;
// panics if called later, or if RAM cannot hold n bytes and leave a page to allocate.
void *
kcarve(uint64 n)
{
  uint64 pages = PGROUNDUP(n) / PGSIZE;
  char *p = (char *)kmem.first;

  if(kmem.first == 0 || kmem.fresh != kmem.first || kmem.freelist != 0)
    panic("kcarve: not between kinit() and the first kalloc()");
  if(pages >= kmem.nfree)
    panic("kcarve: RAM too small");
  memset(p, 0, pages * PGSIZE);
  kmem.first += pages * PGSIZE;
  kmem.fresh = kmem.first;
  kmem.nfree -= pages;
  return p;
}

// Contract: return one page of physical memory with reference count 1, or 0 when no
// page is free. The contents are undefined (callers that need zeroes memset it).
void *
kalloc(void)
{
  void *pa = 0;

  acquire(&kmem.lock);
  if(kmem.freelist){
    pa = kmem.freelist;
    kmem.freelist = kmem.freelist->next;
  } else if(kmem.fresh < PHYSTOP){
    pa = (void *)kmem.fresh;
    kmem.fresh += PGSIZE;
  }
  if(pa){
    refs[pageindex(pa, "kalloc: bad page")] = 1;
    kmem.nfree--;
  }
  release(&kmem.lock);

  if(pa == 0)
    nomem();   // tells vmfault a fault failed for want of a page (the OOM killer: oom.c)
  else if(KALLOC_DEBUG)
    memset(pa, 0x05, PGSIZE);
  return pa;
}

// Contract: drop one reference to the allocated page pa; when it was the last one,
// put the page on the free list. The caller must own the reference it drops.
// Panics (kernel bug) if pa is not a managed page or is already free.
void
kfree(void *pa)
{
  uint64 i = pageindex(pa, "kfree: bad page");

  acquire(&kmem.lock);
  if(refs[i] == 0)
    panic("kfree: page is already free");
  refs[i]--;
  if(refs[i] == 0){
    if(KALLOC_DEBUG)
      memset(pa, 0x01, PGSIZE);  // still under the lock: nobody can have it yet
    struct freepage *f = pa;
    f->next = kmem.freelist;
    kmem.freelist = f;
    kmem.nfree++;
  }
  release(&kmem.lock);
}

// Contract: add one reference to the page that each valid PTE of ptes[0..n) maps: fork
// (vm.c, COW_ALLOC=1) calls it once per filled level-0 table of the child, whose new
// PTEs each become an owner (each will kfree() its reference). One acquire for up to
// 512 pages instead of one per page: this loop is about half the cost of a COW fork.
// The pages must be allocated (another owner, the parent's PTE, pins them while we
// count). Panics if a PTE maps a free page or one the allocator does not manage.
void
krefinc_ptes(pte_t *ptes, int n)
{
  // LAB cow: begin
  acquire(&kmem.lock);
  for(int k = 0; k < n; k++){
    if((ptes[k] & PTE_V) == 0)
      continue;
    uint64 i = pageindex((void *)PTE2PA(ptes[k]), "krefinc_ptes: bad page");
    if(refs[i] == 0)
      panic("krefinc_ptes: page is free");
    if(refs[i] == 0xFFFF)
      panic("krefinc_ptes: too many references");
    refs[i]++;
  }
  release(&kmem.lock);
  // LAB cow: end
}

// Contract: add one reference to the allocated page pa for a new owner: a PTE that maps
// a page-cache page (pagecache.c), or a child PTE that fork gives the same file page.
// Another owner must pin the page meanwhile. Panics if pa is free or not managed.
void
krefinc(void *pa)
{
  uint64 i = pageindex(pa, "krefinc: bad page");

  acquire(&kmem.lock);
  if(refs[i] == 0)
    panic("krefinc: page is free");
  if(refs[i] == 0xFFFF)
    panic("krefinc: too many references");
  refs[i]++;
  release(&kmem.lock);
}

// Contract: add one reference to each of the n allocated pages pas[0..n), as krefinc()
// does for one, under one hold of kmem.lock: the page cache hands out a run of pages at
// once (pagecache.c), and a lock round trip per page was most of a mapping's cost.
// Another owner pins each page meanwhile (the page cache, under pcache.lock). Panics
// if a page is free or not managed.
void
krefinc_pages(char **pas, int n)
{
  acquire(&kmem.lock);
  for(int k = 0; k < n; k++){
    uint64 i = pageindex(pas[k], "krefinc_pages: bad page");
    if(refs[i] == 0)
      panic("krefinc_pages: page is free");
    if(refs[i] == 0xFFFF)
      panic("krefinc_pages: too many references");
    refs[i]++;
  }
  release(&kmem.lock);
}

// Contract: the number of references to page pa now (0 if it is free). The answer
// can change as soon as the lock is dropped, except where the caller's own
// reference pins it: see fault.c's cowfault() for the one decision made on it.
int
krefcount(void *pa)
{
  uint64 i = pageindex(pa, "krefcount: bad page");
  int n;

  acquire(&kmem.lock);
  n = refs[i];
  release(&kmem.lock);
  return n;
}

// Contract: 1 if the allocated page pa has exactly one reference, read without kmem.lock:
// reclaim's test (swap.c's uvmpageout) on every page it passes, where a lock per page
// would cost more than the rest of the scan. Sound only where the caller's own reference
// pins the page and no new reference can appear meanwhile: reclaim holds the owner's
// vmlock (no fork of that table) and skips file pages (the page cache's), so a count
// read as 1 stays 1; a count that falls meanwhile only makes it skip a page.
int
ksoleref(void *pa)
{
  return krefpeek(pa) == 1;
}

// Contract: the references to the allocated page pa, read without kmem.lock, for
// reclaim's scan (swap.c's sharedfile): a hint it may act on only where a count that
// changes meanwhile does no harm.
int
krefpeek(void *pa)
{
  return __atomic_load_n(&refs[pageindex(pa, "krefpeek: bad page")], __ATOMIC_RELAXED);
}

// Contract: how many valid user (PTE_U) leaves of ptes[0..n) map a page with more than
// one reference: memstat's shared_pages, one acquire per level-0 table. A statistic:
// the counts may change as soon as the lock is dropped.
int
kshared_ptes(pte_t *ptes, int n)
{
  // LAB cow: begin
  int shared = 0;

  acquire(&kmem.lock);
  for(int k = 0; k < n; k++){
    if((ptes[k] & (PTE_V | PTE_U)) != (PTE_V | PTE_U))
      continue;
    if(refs[pageindex((void *)PTE2PA(ptes[k]), "kshared_ptes: bad page")] > 1)
      shared++;
  }
  release(&kmem.lock);
  return shared;
  // LAB cow: stub
  // return 0;
  // LAB cow: end
}

// Contract: how many pages are free right now (free list + never allocated).
uint64
kfreepages(void)
{
  uint64 n;

  acquire(&kmem.lock);
  n = kmem.nfree;
  release(&kmem.lock);
  return n;
}

// Contract: how many pages the allocator manages, free or not; fixed after kinit().
uint64
ktotalpages(void)
{
  return (PHYSTOP - kmem.first) / PGSIZE;
}
