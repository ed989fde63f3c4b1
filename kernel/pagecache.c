// The page cache: file pages that some process maps with mmap (mmap.c), one physical
// page per (device, inode number, page index), shared by every mapping of that page.
//
// A block is a page here (BSIZE == PGSIZE), so page index i of a file holds file bytes
// [i*PGSIZE, (i+1)*PGSIZE); the part past the end of the file reads as zeroes.
//
// Ownership rule (who holds which reference, kalloc.c's counts):
//   - The cache holds one reference of its own to every page it lists.
//   - Every PTE that maps a cached page holds one more (pagecache_get() takes it for the
//     PTE; fork adds one per child PTE; uvmunmap/cowfault give it back with kfree()).
//   - So a listed page with refcount 1 is mapped by nobody. pagecache_trim() drops such
//     pages; mmap.c calls it for a region's file range each time a region (or part of
//     one) goes away, after its PTEs are gone. Every PTE reference that is dropped
//     belongs to a process that still has the region over that page (munmap, exit,
//     exec, or a private store that copied the page), and that region's removal trims
//     the page; reclaim, which drops a clean page's PTE, trims it at once (mmap_trim). So a page lives in the cache exactly while some mapping may use it,
//     and free pages return to their baseline when the last mapping goes.
//
// Locking:
//   - pcache.lock (a spinlock) protects every entry, and orders lookups that take a
//     reference (krefinc under the lock) against trims that read refcount 1 and drop
//     the page (also under the lock): a page cannot be taken from the cache while it
//     is being dropped. fork's references need no cache lock: they copy a PTE's, so the
//     count is >= 2 while fork runs and no trim can see 1.
//   - Filling entries (fs.c readpages, a run of pages per disk request) and writing into
//     a cached page (pagecache_write, from writei) happen under the inode's sleeplock, so
//     a page is never inserted with data older than the last write(), and only one
//     process fills a given file at a time. Lock order: kernel/locks.h.
//   - Page contents are not locked: mapped stores race with write() as they do on any
//     shared memory.
//
// Coherence with read()/write(): writei() copies what it writes into the cached page
// (pagecache_write), so a cached page is never older than the file. readi() reads the
// disk, so a store through a MAP_SHARED mapping is seen by read() once it is written
// back (munmap, exit, exec: mmap.c).
//
// `// LAB mmap:` comments mark what the mmap lab's students write (docs/lab.md); the
// starter keeps the chain helpers lookup(), insert(), drop() and gethit() for them.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/file.h"
#include "kernel/defs.h"

#if BSIZE != PGSIZE
#error "the page cache maps one file block per page"
#endif

// The cache may list half of RAM: enough to map the default model (98 MB) or the
// synthetic one (143 MB) in the default 512 MiB; past that, mmap fails (eager, or
// MAP_POPULATE) or the faulting process is killed (lazy). RAM is known at boot only, so
// the entries are carved then (pagecacheinit); NPCACHE is their number, fixed after.
#define NPCACHE (pcache.nentries)
#define NPHASH 4096    // hash chains; an entry is on the chain of hash(dev, inum, pgno)
#define NONE (-1)      // the end of a chain or of the free list

struct cpage {
  uint dev;      // the inode's device
  uint inum;     // the inode's number
  uint64 pgno;   // page index in the file
  char *pa;      // the physical page (the cache owns one reference); 0: the entry is free
  int next;      // the next entry on this entry's hash chain, or on the free list
};

static struct {
  struct cpage *pages;           // the NPCACHE entries, carved at boot; fixed after
  int nentries;                  // NPCACHE: half of RAM's pages; fixed after boot
  struct spinlock lock;          // protects the entries and every field below
  int chain[NPHASH];             // first entry of each hash chain, or NONE
  int free;                      // first free entry, or NONE
  int npages;                    // entries in use (memstat's pagecache_pages)
} pcache;

static int
hash(uint dev, uint inum, uint64 pgno)
{
  return (int)((pgno + 7919UL * inum + 104729UL * dev) % NPHASH);
}

// Contract: initialise the page cache: carve its entries, one per two pages of RAM, then
// every chain empty, every entry free. Hart 0, once, before the first kalloc() (kcarve).
void
pagecacheinit(void)
{
  initlock(&pcache.lock, "pcache");
  pcache.nentries = (PHYSTOP - KERNBASE) / PGSIZE / 2;
  pcache.pages = kcarve(pcache.nentries * sizeof(struct cpage));
  for(int h = 0; h < NPHASH; h++)
    pcache.chain[h] = NONE;
  for(int i = 0; i < NPCACHE; i++)
    pcache.pages[i].next = i + 1 < NPCACHE ? i + 1 : NONE;
  pcache.free = 0;
}

// Contract: the link that points at the entry for (dev, inum, pgno) (a chain head or an
// entry's next), or 0 if the page is not cached. Caller holds pcache.lock.
static int *
lookup(uint dev, uint inum, uint64 pgno)
{
  if(!holding(&pcache.lock))
    panic("pagecache lookup: pcache.lock");
  int *link = &pcache.chain[hash(dev, inum, pgno)];
  for(; *link != NONE; link = &pcache.pages[*link].next){
    struct cpage *c = &pcache.pages[*link];
    if(c->dev == dev && c->inum == inum && c->pgno == pgno)
      return link;
  }
  return 0;
}

// Contract: list pa as page pgno of (dev, inum), which is not cached; 0 if every entry
// is taken. The cache's reference is the caller's, handed over. Caller holds pcache.lock.
static int
insert(uint dev, uint inum, uint64 pgno, char *pa)
{
  if(!holding(&pcache.lock))
    panic("pagecache insert: pcache.lock");
  if(pcache.free == NONE)
    return 0;
  int i = pcache.free;
  struct cpage *c = &pcache.pages[i];
  pcache.free = c->next;
  c->dev = dev;
  c->inum = inum;
  c->pgno = pgno;
  c->pa = pa;
  int h = hash(dev, inum, pgno);
  c->next = pcache.chain[h];
  pcache.chain[h] = i;
  pcache.npages++;
  return 1;
}

// Contract: take the entry *link points at off its chain, free its page (the cache's
// reference) and the entry. Caller holds pcache.lock.
static void
drop(int *link)
{
  if(!holding(&pcache.lock))
    panic("pagecache drop: pcache.lock");
  int i = *link;
  struct cpage *c = &pcache.pages[i];
  *link = c->next;
  kfree(c->pa);
  c->pa = 0;
  c->next = pcache.free;
  pcache.free = i;
  pcache.npages--;
}

// Contract: the run of cached pages pgno, pgno+1, ... of ip, at most n of them, up to
// the first page that is not cached: each gets a reference for the caller, into pas[].
// Returns how many (0: page pgno is not cached). One hold of pcache.lock and one of
// kmem.lock for the whole run, not one each per page: mapping a file another process
// maps already costs a hash lookup per page and little more. Takes pcache.lock.
static int
gethit(struct inode *ip, uint64 pgno, int n, char **pas)
{
  int k = 0;

  acquire(&pcache.lock);
  for(int *link; k < n && (link = lookup(ip->dev, ip->inum, pgno + k)) != 0; k++)
    pas[k] = pcache.pages[*link].pa;
  // Under pcache.lock no trim can drop them (the cache's reference pins them).
  krefinc_pages(pas, k);
  release(&pcache.lock);
  return k;
}

// Contract: the cached pages pgno, pgno+1, ... of ip, at most n (n >= 1), into pas[],
// each with one new reference that the caller hands to a PTE (it gives it back with
// kfree). Returns how many: a run of pages that were cached, or else a run that was
// missing and has just been read from the file, with one disk request per run of
// blocks (fs.c readpages), not one per page; 0 if memory runs out or the cache is full
// before page pgno could be had (nothing taken). The caller holds a reference to ip and
// no spinlock; ip->lock may be held by the caller itself (a read()/write() whose user
// buffer is a mapping of the same file), else it is taken (kernel/locks.h).
int
pagecache_get(struct inode *ip, uint64 pgno, int n, char **pas)
{
  if(holding_spinlocks())
    panic("pagecache_get: spinlock");
  int k = gethit(ip, pgno, n, pas);
  if(k > 0)
    return k;

  // LAB mmap: begin a miss: read the missing run under ip->lock, then list it
  int mine = holdingsleep(&ip->lock);
  if(!mine)
    ilock(ip);
  // Under ip->lock nobody else fills or writes ip's pages: look once more (another
  // process may have filled page pgno meanwhile), then size the run that is missing.
  k = gethit(ip, pgno, n, pas);
  if(k == 0){
    acquire(&pcache.lock);
    int m = 0;
    while(m < n && lookup(ip->dev, ip->inum, pgno + m) == 0)
      m++;
    release(&pcache.lock);
    while(k < m && (pas[k] = kalloc()) != 0)
      k++;
    if(k > 0)
      readpages(ip, pgno, pas, k);
    acquire(&pcache.lock);
    // The cache's reference is the one kalloc() gave us; krefinc_pages adds the caller's.
    int listed = 0;
    while(listed < k && insert(ip->dev, ip->inum, pgno + listed, pas[listed]))
      listed++;
    krefinc_pages(pas, listed);
    release(&pcache.lock);
    for(int i = listed; i < k; i++)        // the cache filled up: not listed, not kept
      kfree(pas[i]);
    k = listed;
  }
  if(!mine)
    iunlock(ip);
  return k;
  // LAB mmap: stub
  // (void)insert;   // yours to call: it lists a page
  // return 0;       // a miss fails, as if the cache were full
  // LAB mmap: end
}

// Contract: drop from the cache every page of ip with index in [lo, hi) that nobody
// maps any more (refcount 1: only the cache's reference), freeing it. Pages still
// mapped stay. The caller has already unmapped its own PTEs for that range.
void
pagecache_trim(struct inode *ip, uint64 lo, uint64 hi)
{
  // LAB mmap: begin drop the pages only the cache holds
  acquire(&pcache.lock);
  if(hi - lo <= NPCACHE){          // look each page up
    for(uint64 pgno = lo; pgno < hi; pgno++){
      int *link = lookup(ip->dev, ip->inum, pgno);
      if(link && krefcount(pcache.pages[*link].pa) == 1)
        drop(link);
    }
  } else {                         // a range wider than the cache: walk every chain
    for(int h = 0; h < NPHASH; h++){
      for(int *link = &pcache.chain[h]; *link != NONE; ){
        struct cpage *c = &pcache.pages[*link];
        if(c->dev == ip->dev && c->inum == ip->inum && c->pgno >= lo && c->pgno < hi &&
           krefcount(c->pa) == 1)
          drop(link);             // *link is now the next entry
        else
          link = &c->next;
      }
    }
  }
  release(&pcache.lock);
  // LAB mmap: stub
  // (void)drop;      // yours to call: it frees a listed page
  // LAB mmap: end
}

// Contract: writei() wrote the n bytes at src (kernel memory) at byte off of page pgno
// of ip; copy them into the cached page, if there is one, so it is not stale. Caller
// holds ip->lock. off + n <= PGSIZE.
void
pagecache_write(struct inode *ip, uint64 pgno, uint off, char *src, uint n)
{
  // Unlocked peek: pages of ip are inserted only under ip->lock, which we hold, so an
  // empty cache cannot gain one of ip's pages meanwhile.
  if(pcache.npages == 0)
    return;
  acquire(&pcache.lock);
  int *link = lookup(ip->dev, ip->inum, pgno);
  if(link)
    memmove(pcache.pages[*link].pa + off, src, n);
  release(&pcache.lock);
}

// Contract: the number of pages the cache holds now (whole system; a statistic).
int
pagecache_pages(void)
{
  acquire(&pcache.lock);
  int n = pcache.npages;
  release(&pcache.lock);
  return n;
}
