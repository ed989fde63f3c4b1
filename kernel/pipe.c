// Pipes: a byte queue between a write end and a read end, each a struct file.
// The struct pipe and its buffer pages come from kalloc and go back when both ends close.

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

// Free p and its buffer pages.
static void
pipefree(struct pipe *p)
{
  for(int i = 0; i < PIPEPAGES; i++)
    if(p->page[i])
      kfree(p->page[i]);
  kfree((char *)p);
}

// Create a pipe: *f0 becomes its read end, *f1 its write end. Returns 0, or -1 (and
// allocates nothing) if memory or file slots ran out.
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

// Close one end of p (the write end if writable); the second close frees the pipe.
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

// Bytes from position pos (a running count) to the end of its buffer page, at most n.
static uint64
pagerun(uint64 pos, uint64 n)
{
  uint64 left = PGSIZE - pos % PGSIZE;
  return n < left ? n : left;
}

// Write n bytes from user address addr into p, sleeping while it is full. Returns n,
// or the bytes written before the copy failed, or -1 if the read end closed or the
// caller was killed before anything was written.
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

// Read up to n bytes from p into user address addr, sleeping while it is empty and the
// write end is open. Returns the bytes read (0: write end closed and nothing queued),
// or -1 if the caller was killed or nothing could be copied out.
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
