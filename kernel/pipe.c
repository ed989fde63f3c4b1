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
//   - copyin()/copyout() never run with p->lock held: the user's buffer may be paged out
//     (swap.c), and reading it back sleeps. Bytes go through a PIPECHUNK-byte buffer on
//     the kernel stack instead: copied in before the lock is taken, or copied out of the
//     queue under the lock and to the user after it is released.

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
#define PIPECHUNK 512                    // bytes copied to or from user memory at a time

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

// Contract: move the n bytes at src into the queue at position nwrite. Caller holds
// p->lock and made sure there is room (n <= PIPESIZE - queued).
static void
enqueue(struct pipe *p, char *src, uint64 n)
{
  if(!holding(&p->lock))
    panic("pipe enqueue: p->lock");
  while(n > 0){
    uint64 m = pagerun(p->nwrite, n);
    memmove(p->page[(p->nwrite % PIPESIZE) / PGSIZE] + p->nwrite % PGSIZE, src, m);
    p->nwrite += m;
    src += m;
    n -= m;
  }
}

// Contract: copy the n queued bytes from position pos to dst, leaving them queued.
// Caller holds p->lock; n <= nwrite - pos.
static void
peek(struct pipe *p, uint64 pos, char *dst, uint64 n)
{
  if(!holding(&p->lock))
    panic("pipe peek: p->lock");
  while(n > 0){
    uint64 m = pagerun(pos, n);
    memmove(dst, p->page[(pos % PIPESIZE) / PGSIZE] + pos % PGSIZE, m);
    pos += m;
    dst += m;
    n -= m;
  }
}

// Contract: write n bytes from user address addr of the current process into p,
// sleeping while it is full. Returns n; or, if the read end closes, the caller is
// killed or addr goes bad partway, the bytes written before that, or -1 if that is none
// (0 for n == 0). Caller holds a reference to the write end.
int
pipewrite(struct pipe *p, uint64 addr, int n)
{
  struct proc *pr = myproc();
  char chunk[PIPECHUNK];
  int i = 0;

  while(i < n){
    int m = n - i < PIPECHUNK ? n - i : PIPECHUNK;
    if(copyin(pr->pagetable, chunk, addr + i, m) == -1)
      break;
    acquire(&p->lock);
    for(int k = 0; k < m; ){
      if(p->readopen == 0 || killed(pr)){
        wakeup(&p->nread);
        release(&p->lock);
        i += k;
        return i > 0 ? i : -1;
      }
      uint64 space = PIPESIZE - (p->nwrite - p->nread);
      if(space == 0){
        wakeup(&p->nread);
        sleep(&p->nwrite, &p->lock);
        continue;
      }
      uint64 c = space < (uint64)(m - k) ? space : (uint64)(m - k);
      enqueue(p, chunk + k, c);
      k += c;
    }
    wakeup(&p->nread);
    release(&p->lock);
    i += m;
  }
  return i > 0 || n == 0 ? i : -1;
}

// Contract: read up to n bytes from p into user address addr of the current process,
// sleeping while it is empty and the write end is open; it returns as soon as some bytes
// are there. Returns the bytes read (0: write end closed and nothing queued), or -1 if
// the caller was killed while waiting or nothing could be copied out. Bytes that were
// not copied stay queued: a chunk is consumed only after its copyout succeeded, and
// only if no other reader consumed it meanwhile (else it is copied again from the new
// nread, or, if that reader took everything, waited for again).
int
piperead(struct pipe *p, uint64 addr, int n)
{
  struct proc *pr = myproc();
  char chunk[PIPECHUNK];
  int i = 0;

  acquire(&p->lock);
  while(i < n){
    if(p->nread == p->nwrite){
      // Empty. Having read something, or at end of file, we return; else we wait. A
      // reader whose chunk another reader took (below) comes back here with i == 0 and
      // waits again: 0 means end of file, never "somebody else was faster".
      if(i > 0 || !p->writeopen)
        break;
      if(killed(pr)){
        release(&p->lock);
        return -1;
      }
      sleep(&p->nread, &p->lock);
      continue;
    }
    uint64 queued = p->nwrite - p->nread;
    uint64 want = (uint64)(n - i) < PIPECHUNK ? (uint64)(n - i) : PIPECHUNK;
    uint64 m = queued < want ? queued : want;
    uint64 start = p->nread;
    peek(p, start, chunk, m);
    release(&p->lock);
    int bad = copyout(pr->pagetable, addr + i, chunk, m) == -1;
    acquire(&p->lock);
    if(bad){
      if(i == 0)
        i = -1;
      break;
    }
    if(p->nread != start)
      continue;                          // another reader took them: copy from nread
    p->nread += m;
    i += m;
  }
  wakeup(&p->nwrite);
  release(&p->lock);
  return i;
}
