// Pipes: a byte queue between a write end and a read end, each a struct file.
// The struct pipe and its buffer pages come from kalloc and go back when both ends close.
//
// Contract:
//   - p->lock (a spinlock) protects nread, nwrite, readopen, writeopen and the bytes in
//     the buffer. Always nread <= nwrite <= nread + PIPESIZE; the queued bytes are
//     positions [nread, nwrite), each at position % PIPESIZE in the buffer. The counts
//     only grow (64 bits: they never wrap in practice).
//   - Readers sleep on &p->nread, writers on &p->nwrite; whoever makes room or data, or
//     closes an end, wakes the other side. Sleepers recheck everything after waking.
//   - Exactly two struct files point at p: the read end (readable) and the write end
//     (writable). readopen/writeopen say whether that file still has references; its
//     last fileclose() calls pipeclose() once. The second pipeclose() frees p. A process
//     inside piperead()/pipewrite() holds a reference to its end (its ofile[] slot),
//     so p is never freed under it.
//   - copyin()/copyout() run with p->lock held. That is allowed because they never
//     sleep: a lazy or COW fault they resolve (vm.c) only allocates a page.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/fs.h"
#include "kernel/sleeplock.h"
#include "kernel/file.h"

#define PIPEPAGES 4                      // buffer pages per pipe
#define PIPESIZE  (PIPEPAGES * PGSIZE)   // 16 KiB

struct pipe {
  struct spinlock lock;   // protects everything below
  char *page[PIPEPAGES];  // the buffer: byte i lives at page[i / PGSIZE][i % PGSIZE]
  uint64 nread;           // bytes read so far (only grows)
  uint64 nwrite;          // bytes written so far; nwrite - nread bytes are queued
  int readopen;           // is the read end still open?
  int writeopen;          // is the write end still open?
};

// Contract: give p and each buffer page it has back to kalloc. Nobody may use p after:
// both ends are closed, or (pipealloc) no file points at it yet.
static void
pipefree(struct pipe *p)
{
  for(int i = 0; i < PIPEPAGES; i++)
    if(p->page[i])
      kfree(p->page[i]);
  kfree((char *)p);
}

// Contract: create a pipe: *f0 becomes its read end, *f1 its write end, each a file with
// ref 1 owned by the caller (who installs them in ofile[] or fileclose()s them).
// Returns 0, or -1 with *f0 = *f1 = 0 and nothing kept if memory or file slots ran out.
int
pipealloc(struct file **f0, struct file **f1)
{
  struct pipe *p = (struct pipe *)kalloc();

  *f0 = *f1 = 0;
  if(p == 0)
    return -1;
  memset(p, 0, sizeof(*p));
  for(int i = 0; i < PIPEPAGES; i++)
    if((p->page[i] = kalloc()) == 0)
      goto bad;
  if((*f0 = filealloc()) == 0 || (*f1 = filealloc()) == 0)
    goto bad;
  initlock(&p->lock, "pipe");
  p->readopen = 1;
  p->writeopen = 1;
  (*f0)->type = FD_PIPE;
  (*f0)->readable = 1;
  (*f0)->writable = 0;
  (*f0)->pipe = p;
  (*f1)->type = FD_PIPE;
  (*f1)->readable = 0;
  (*f1)->writable = 1;
  (*f1)->pipe = p;
  return 0;

bad:
  pipefree(p);
  if(*f0)
    fileclose(*f0);
  if(*f1)
    fileclose(*f1);
  *f0 = *f1 = 0;
  return -1;
}

// Contract: close one end of p (the write end if writable), waking the other side's
// sleepers. Called once per end, by the last fileclose() of that end's file; the
// second call frees p, so the caller must not touch p after it returns.
void
pipeclose(struct pipe *p, int writable)
{
  acquire(&p->lock);
  if(writable){
    p->writeopen = 0;
    wakeup(&p->nread);
  } else {
    p->readopen = 0;
    wakeup(&p->nwrite);
  }
  if(p->readopen == 0 && p->writeopen == 0){
    release(&p->lock);
    pipefree(p);
  } else {
    release(&p->lock);
  }
}

// Contract: bytes from position pos (a running count) to the end of its buffer page, at
// most n. Copies are split there because the buffer pages are not contiguous.
static uint64
pagerun(uint64 pos, uint64 n)
{
  uint64 left = PGSIZE - pos % PGSIZE;
  return n < left ? n : left;
}

// Contract: write n bytes from user address addr of the current process into p,
// sleeping while it is full. Returns n; or, if the read end closes, the caller is
// killed or addr goes bad partway, the bytes written before that, or -1 if that is none
// (0 for n == 0). Caller holds a reference to the write end.
int
pipewrite(struct pipe *p, uint64 addr, int n)
{
  struct proc *pr = myproc();
  int i = 0;

  acquire(&p->lock);
  while(i < n){
    if(p->readopen == 0 || killed(pr)){
      release(&p->lock);
      return i > 0 ? i : -1;
    }
    uint64 space = PIPESIZE - (p->nwrite - p->nread);
    if(space == 0){
      wakeup(&p->nread);
      sleep(&p->nwrite, &p->lock);
      continue;
    }
    uint64 m = pagerun(p->nwrite, space < (uint64)(n - i) ? space : (uint64)(n - i));
    char *dst = p->page[(p->nwrite % PIPESIZE) / PGSIZE] + p->nwrite % PGSIZE;
    if(copyin(pr->pagetable, dst, addr + i, m) == -1)
      break;
    p->nwrite += m;
    i += m;
  }
  wakeup(&p->nread);
  release(&p->lock);
  return i > 0 || n == 0 ? i : -1;
}

// Contract: read up to n bytes from p into user address addr of the current process,
// sleeping while it is empty and the write end is open; it returns as soon as some bytes
// are there. Returns the bytes read (0: write end closed and nothing queued), or -1 if
// the caller was killed while waiting or nothing could be copied out. Bytes that were
// not copied stay queued. Caller holds a reference to the read end.
int
piperead(struct pipe *p, uint64 addr, int n)
{
  struct proc *pr = myproc();
  int i = 0;

  acquire(&p->lock);
  while(p->nread == p->nwrite && p->writeopen){
    if(killed(pr)){
      release(&p->lock);
      return -1;
    }
    sleep(&p->nread, &p->lock);
  }
  while(i < n && p->nread != p->nwrite){
    uint64 queued = p->nwrite - p->nread;
    uint64 m = pagerun(p->nread, queued < (uint64)(n - i) ? queued : (uint64)(n - i));
    char *src = p->page[(p->nread % PIPESIZE) / PGSIZE] + p->nread % PGSIZE;
    if(copyout(pr->pagetable, addr + i, src, m) == -1){
      if(i == 0)
        i = -1;
      break;
    }
    p->nread += m;
    i += m;
  }
  wakeup(&p->nwrite);
  release(&p->lock);
  return i;
}
