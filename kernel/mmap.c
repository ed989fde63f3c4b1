// mmap and munmap: file mappings, kept as regions (struct vma, proc.h) of a process and
// backed by the page cache (pagecache.c).
//
// A region is [start, start+len) of user memory showing file f from offset off. Its pages
// are page-cache pages (PTE_FILE, vm.c) until a MAP_PRIVATE store copies one:
//   MAP_SHARED   the cached page. Mapped without PTE_W at first; the first store faults
//                (vmfault -> mmapfault) and sets PTE_W, which from then on means "may be
//                dirty": removing the page writes it back to the file (writeback()).
//   MAP_PRIVATE  the cached page, read-only, with PTE_COW if PROT_WRITE: the first store
//                copies it through fault.c's cowfault(), as for a COW fork page.
// Policy, as in fault.c: LAZY_ALLOC=1 maps each page on its first touch (vmfault calls
// mmapfault); LAZY_ALLOC=0 maps the whole region in sys_mmap. In both, a clean page that
// reclaim dropped (swap.c) is mapped again on its next touch.
//
// Invariants:
//   - Regions lie in [PGROUNDUP(sz), TRAPFRAME), do not overlap, and are page-aligned;
//     sbrk stops at the lowest one (mmap_floor). A free slot has len 0.
//   - Each region owns one reference to its file (filedup), given back when its last
//     page goes (munmap of all of it, exit, exec). The file's reference keeps the inode,
//     so the page cache's key (dev, inum) cannot be reused while a region exists.
//   - Each PTE in a region owns one reference to its page (as every user PTE does).
//     Removing pages: write back, unmap (drop the PTEs' references), then trim the page
//     cache over that file range (pagecache.c's ownership rule), then close the file.
//     The write-back is skipped when nobody could ever read it (unreadable()).
//   - p->vmas is private to p (see proc.h): no lock.
//
// `// LAB mmap:` comments mark what the mmap lab's students write (docs/lab.md).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/fs.h"
#include "kernel/file.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/virtio.h"
#include "kernel/defs.h"

// Pages one write-back transaction may write: each is one data block inside the file
// (its blocks exist already), and the transaction also logs the inode and, in the worst
// case, indirect blocks; keep the same 7 blocks of slack as filewrite.
#define WBPAGES (MAXOPBLOCKS - 7)

// Contract: p's region that contains va, or 0.
static struct vma *
findvma(struct proc *p, uint64 va)
{
  for(struct vma *v = p->vmas; v < p->vmas + NVMA; v++)
    if(v->len && va >= v->start && va < v->start + v->len)
      return v;
  return 0;
}

// Contract: 1 if [a, a+len) overlaps none of p's regions.
static int
isfree(struct proc *p, uint64 a, uint64 len)
{
  for(struct vma *v = p->vmas; v < p->vmas + NVMA; v++)
    if(v->len && a < v->start + v->len && v->start < a + len)
      return 0;
  return 1;
}

// Contract: the lowest address sbrk may not grow past: the lowest region's start, or
// TRAPFRAME when p has no regions.
uint64
mmap_floor(struct proc *p)
{
  uint64 floor = TRAPFRAME;
  for(struct vma *v = p->vmas; v < p->vmas + NVMA; v++)
    if(v->len && v->start < floor)
      floor = v->start;
  return floor;
}

// Contract: where a new region of len bytes (page multiple) goes when the caller lets the
// kernel choose: the highest free place just below TRAPFRAME or just below some region,
// and not below the heap. 0 if there is none.
static uint64
chooseaddr(struct proc *p, uint64 len)
{
  uint64 best = 0, low = PGROUNDUP(p->sz);

  for(int i = -1; i < NVMA; i++){
    uint64 top = i < 0 ? TRAPFRAME : p->vmas[i].start;
    if(i >= 0 && p->vmas[i].len == 0)
      continue;
    if(top < len || top - len < low)
      continue;
    uint64 a = top - len;
    if(a > best && isfree(p, a, len))
      best = a;
  }
  return best;
}

// Pages mappage() maps at most in one call: one page-cache run (pagecache_get), with its
// page pointers on the kernel stack (one page; a fault inside readi's copyout may get
// here, so keep it small). A run this long fills one whole disk request (VIRTIO_MAXBUFS
// pages) and takes the locks once per 32 pages, not per page.
#define MAPRUN VIRTIO_MAXBUFS

// Contract: map up to n pages (1 <= n <= MAPRUN) of region v from page-aligned va on,
// none of them mapped yet, in p: the page cache's pages for them, with the region's
// permissions (see the top of this file). Returns how many it mapped (>= 1; fewer than
// n when the cache hands out a shorter run: call again for the rest), or -1 if memory
// runs out or the page cache is full before the first (nothing mapped). Caller holds
// p->vmlock (reclaim keeps off p's PTEs meanwhile) and no spinlock; panics otherwise.
// Sleeps on the disk on a miss. Lock order: kernel/locks.h.
static int
mappage(struct proc *p, struct vma *v, uint64 va, int n)
{
  if(!holdingsleep(&p->vmlock))
    panic("mappage: vmlock");
  if(holding_spinlocks())
    panic("mappage: spinlock");
  if(n < 1 || n > MAPRUN)
    panic("mappage: run");
  // LAB mmap: begin map the page cache's pages with the region's permissions
  char *pas[MAPRUN];
  uint64 pgno = (v->off + (va - v->start)) / PGSIZE;
  int k = pagecache_get(v->f->ip, pgno, n, pas);
  if(k == 0)
    return -1;
  int perm = PTE_U | PTE_R | PTE_FILE;
  if(v->prot & PROT_EXEC)
    perm |= PTE_X;
  if((v->flags & MAP_PRIVATE) && (v->prot & PROT_WRITE))
    perm |= PTE_COW;
  int m = mappagelist(p->pagetable, va, pas, k, perm);
  for(int i = m; i < k; i++)       // no page-table page for these: give them back
    kfree(pas[i]);
  return m > 0 ? m : -1;
  // LAB mmap: stub
  // return -1;   // no file page can be mapped yet
  // LAB mmap: end
}

// Contract: resolve a fault of p at page-aligned va for vmfault(): pte is 0 when va has no
// valid PTE (LAZY_ALLOC=1: map the file page if va is in a region), else the PTE of a
// file page that a store hit (a MAP_SHARED PROT_WRITE region: make it writable, which
// marks it dirty). Returns 0, or -1 (p is killed): not in a region, a store to a
// read-only region, or out of memory.
int
mmapfault(struct proc *p, uint64 va, pte_t *pte)
{
  va = PGROUNDDOWN(va);
  struct vma *v = findvma(p, va);
  if(v == 0)
    return -1;
  if(pte == 0)
    return mappage(p, v, va, 1) < 0 ? -1 : 0;
  // LAB mmap: begin the first store to a MAP_SHARED page
  if((v->flags & MAP_SHARED) == 0 || (v->prot & PROT_WRITE) == 0)
    return -1;
  *pte |= PTE_W | PTE_D;
  sfence_vma();
  return 0;
  // LAB mmap: stub
  // return -1;
  // LAB mmap: end
}

// Contract: write p's possibly dirty pages (PTE_FILE|PTE_W) of region v in [lo, hi)
// back to the file, at most up to the file's current size (mapped pages never grow
// the file). Runs its own transactions, WBPAGES pages each; the caller holds no lock.
// A failed write is dropped (the process is unmapping; there is nobody to tell).
static void
writeback(struct proc *p, struct vma *v, uint64 lo, uint64 hi)
{
  // LAB mmap: begin write the dirty pages back, WBPAGES per transaction
  struct inode *ip = v->f->ip;
  int n = 0;   // pages in the open transaction

  for(uint64 va = lo; va < hi; va += PGSIZE){
    pte_t *pte = walk(p->pagetable, va, 0);
    if(pte == 0 || (*pte & (PTE_V | PTE_FILE | PTE_W)) != (PTE_V | PTE_FILE | PTE_W))
      continue;
    if(n == 0){
      begin_op();
      ilock(ip);
    }
    uint64 off = v->off + (va - v->start);
    if(off < ip->size){
      uint m = ip->size - off < PGSIZE ? ip->size - off : PGSIZE;
      writei(ip, 0, PTE2PA(*pte), off, m);
    }
    if(++n == WBPAGES){
      iunlock(ip);
      end_op();
      n = 0;
    }
  }
  if(n > 0){
    iunlock(ip);
    end_op();
  }
  // LAB mmap: end
}

// Contract: 1 if nobody can ever read region v's file again, so writing its pages back
// would be wasted: v holds the only reference to its struct file (no fd, no other region
// or process has it), that file is the inode's only reference, and no directory names
// the inode (nlink 0: created and unlinked, as user/llm/harts.c does). Then only v's own
// pages could show the data, and closing v's file frees the inode and its blocks (iput).
// Each count read here, once it reads 1 (or nlink 0), cannot change meanwhile: a new
// reference needs an old one (ours) or a name; a stale larger value only means a write
// that was not needed. Reading the data from disk (read(), or a page the cache dropped
// mapped again) needs another reference or a region, so those keep the write-back.
static int
unreadable(struct vma *v)
{
  struct inode *ip = v->f->ip;
  return v->f->ref == 1 && ip->ref == 1 && ip->nlink == 0;
}

// Contract: remove [lo, hi) (page-aligned, inside region v, a prefix or a suffix of it or
// all of it) from p: write back, unmap, trim the page cache, shrink v, and close the
// file when nothing is left. The caller holds p->vmlock (so reclaim leaves p's PTEs
// alone meanwhile) and no spinlock.
static void
unmaprange(struct proc *p, struct vma *v, uint64 lo, uint64 hi)
{
  if(!holdingsleep(&p->vmlock))
    panic("unmaprange: vmlock");
  if(holding_spinlocks())
    panic("unmaprange: spinlock");
  if((v->flags & MAP_SHARED) && !unreadable(v))
    writeback(p, v, lo, hi);
  // LAB mmap: begin unmap, trim the page cache, shrink the region, close the file
  uvmunmap(p->pagetable, lo, (hi - lo) / PGSIZE, 1);
  sfence_vma();
  uint64 pglo = (v->off + (lo - v->start)) / PGSIZE;
  pagecache_trim(v->f->ip, pglo, pglo + (hi - lo) / PGSIZE);
  if(lo == v->start){
    v->off += hi - lo;
    v->start = hi;
  }
  v->len -= hi - lo;
  if(v->len == 0){
    struct file *f = v->f;
    memset(v, 0, sizeof(*v));
    fileclose(f);
  }
  // LAB mmap: end
}

// Contract: reclaim (swap.c) dropped p's PTE for the file page at va, in one of p's
// regions, and gave back its reference: let the page cache free that page if nobody else
// maps it now. Caller holds p->vmlock (p's regions stay) and no spinlock.
void
mmap_trim(struct proc *p, uint64 va)
{
  if(!holdingsleep(&p->vmlock))
    panic("mmap_trim: vmlock");
  if(holding_spinlocks())
    panic("mmap_trim: spinlock");
  struct vma *v = findvma(p, va);
  if(v == 0)
    return;
  uint64 pgno = (v->off + (PGROUNDDOWN(va) - v->start)) / PGSIZE;
  pagecache_trim(v->f->ip, pgno, pgno + 1);
}

// Contract: remove every region of p (exit, and exec for the old image), writing back
// shared pages. p->pagetable is the table the regions are mapped in. No lock held.
void
mmap_unmapall(struct proc *p)
{
  for(struct vma *v = p->vmas; v < p->vmas + NVMA; v++)
    if(v->len)
      unmaprange(p, v, v->start, v->start + v->len);
}

// Contract: for fork, give child np the regions of p: the same file pages (and p's
// private copies, copied or shared by COW_ALLOC's policy) through uvmcopy(), and one new
// reference to each region's file. Returns 0, or -1 if memory runs out; then np has no
// region and no page of one (np's page-table pages stay for freeproc). Takes only
// spinlocks.
int
mmap_fork(struct proc *p, struct proc *np)
{
  for(int i = 0; i < NVMA; i++){
    struct vma *v = &p->vmas[i];
    if(v->len == 0)
      continue;
    if(uvmcopy(p->pagetable, np->pagetable, v->start, v->start + v->len) < 0){
      for(int j = 0; j < i; j++)
        if(p->vmas[j].len)
          uvmunmap(np->pagetable, p->vmas[j].start, p->vmas[j].len / PGSIZE, 1);
      return -1;
    }
  }
  for(int i = 0; i < NVMA; i++){
    np->vmas[i] = p->vmas[i];
    if(np->vmas[i].len)
      filedup(np->vmas[i].f);
  }
  return 0;
}

// Contract: the checks of mmap's arguments that need no address: 0 if a region of
// file f with prot and flags at offset off may exist, else -1 (see sys_mmap).
static int
mmapok(struct file *f, int prot, int flags, uint64 off)
{
  if(f == 0 || f->type != FD_INODE || f->ip->type != T_FILE || !f->readable)
    return -1;
  if((prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC)) || (prot & PROT_READ) == 0)
    return -1;
  int share = flags & ~MAP_POPULATE;
  if(share != MAP_SHARED && share != MAP_PRIVATE)
    return -1;
  if(share == MAP_SHARED && (prot & PROT_WRITE) && !f->writable)
    return -1;
  if(off % PGSIZE != 0)
    return -1;
  return 0;
}

// Contract: mmap(addr, len, prot, flags, fd, off): map len bytes (rounded up to pages)
// of the regular file open as fd, from page-aligned offset off, and return the address;
// -1 ((char *)-1 in user space) on any bad argument or when out of regions or memory,
// with nothing changed. addr 0 lets the kernel choose (below TRAPFRAME, under earlier
// regions); a nonzero addr is used exactly: it must be page-aligned and the range free,
// above the heap and below TRAPFRAME, else -1. prot must include PROT_READ (RISC-V has
// no write-only pages); PROT_WRITE with MAP_SHARED needs fd open for writing; fd must
// be readable. LAZY_ALLOC=0, or MAP_POPULATE in flags, maps every page now (out of memory
// or a full page cache: -1, nothing mapped).
uint64
sys_mmap(void)
{
  uint64 addr, len, off;
  int prot, flags, fd;
  struct proc *p = myproc();

  argaddr(0, &addr);
  argaddr(1, &len);
  argint(2, &prot);
  argint(3, &flags);
  argint(4, &fd);
  argaddr(5, &off);
  if(fd < 0 || fd >= NOFILE || mmapok(p->ofile[fd], prot, flags, off) < 0)
    return -1;
  if(len == 0 || len > TRAPFRAME || off + PGROUNDUP(len) < off)
    return -1;
  len = PGROUNDUP(len);
  if(addr == 0)
    addr = chooseaddr(p, len);
  else if(addr % PGSIZE || addr < PGROUNDUP(p->sz) || addr > TRAPFRAME - len ||
          !isfree(p, addr, len))
    addr = 0;
  // LAB mmap: begin take a free slot, fill it, and (LAZY_ALLOC=0) map every page
  struct vma *v = p->vmas;
  while(v < p->vmas + NVMA && v->len)
    v++;
  if(addr == 0 || v == p->vmas + NVMA)
    return -1;

  v->start = addr;
  v->len = len;
  v->prot = prot;
  v->flags = flags;
  v->off = off;
  v->f = filedup(p->ofile[fd]);
  if(!LAZY_ALLOC || (flags & MAP_POPULATE)){
    // mappage's rule: under p->vmlock, so reclaim (swap.c) keeps off p's PTEs while
    // they are filled in. A system call enters without it; unmaprange sees it held.
    acquiresleep(&p->vmlock);
    for(uint64 a = addr; a < addr + len; ){
      uint64 left = (addr + len - a) / PGSIZE;
      int m = mappage(p, v, a, left < MAPRUN ? left : MAPRUN);
      if(m < 0){
        unmaprange(p, v, addr, addr + len);   // frees the slot and the file reference
        releasesleep(&p->vmlock);
        return -1;
      }
      a += (uint64)m * PGSIZE;
    }
    releasesleep(&p->vmlock);
  }
  return addr;
  // LAB mmap: stub
  // return -1;   // no region can be made yet
  // LAB mmap: end
}

// Contract: munmap(addr, len): remove [addr, addr+len) (len rounded up to pages) from the
// calling process: all of one region, or a prefix or a suffix of it; stores to MAP_SHARED
// pages are written back to the file first. 0, or -1 with nothing changed if addr is not
// page-aligned, len is 0, or the range is not exactly such a part of one region (a hole,
// two regions, or the middle of one).
uint64
sys_munmap(void)
{
  // LAB mmap: begin
  uint64 addr, len;
  struct proc *p = myproc();

  argaddr(0, &addr);
  argaddr(1, &len);
  if(addr % PGSIZE || len == 0 || len > TRAPFRAME)
    return -1;
  len = PGROUNDUP(len);
  struct vma *v = findvma(p, addr);
  if(v == 0 || addr + len > v->start + v->len)
    return -1;
  if(addr != v->start && addr + len != v->start + v->len)
    return -1;
  acquiresleep(&p->vmlock);
  unmaprange(p, v, addr, addr + len);
  releasesleep(&p->vmlock);
  return 0;
  // LAB mmap: stub
  // return -1;
  // LAB mmap: end
}
