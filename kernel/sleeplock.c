// Sleep locks: held across long waits (disk I/O); a waiter sleeps instead of spinning.
#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/sleeplock.h"

// Contract: make lk a free sleep lock called name.
void
initsleeplock(struct sleeplock *lk, char *name)
{
  initlock(&lk->lk, "sleep lock");
  lk->name = name;
  lk->locked = 0;
  lk->pid = 0;
  lk->waiters = 0;
}

// Contract: wait (sleeping, interrupts allowed) until lk is free, then take it for the
// calling process. Must be called from a process, with no spin lock held.
void
acquiresleep(struct sleeplock *lk)
{
  acquire(&lk->lk);
  while(lk->locked){
    lk->waiters++;
    sleep(lk, &lk->lk);
    lk->waiters--;
  }
  lk->locked = 1;
  lk->pid = myproc()->pid;
  release(&lk->lk);
}

// Contract: take lk for the calling process if it is free and return 1; else return 0 at
// once. Never sleeps, so a caller that holds other sleeplocks cannot deadlock on it
// (reclaim and the OOM killer take other processes' vmlocks this way: kernel/locks.h).
int
tryacquiresleep(struct sleeplock *lk)
{
  int got = 0;

  acquire(&lk->lk);
  if(!lk->locked){
    lk->locked = 1;
    lk->pid = myproc()->pid;
    got = 1;
  }
  release(&lk->lk);
  return got;
}

// Contract: give lk up and wake anyone waiting for it. wakeup() scans the whole process
// table, so it is skipped when nobody waits: the buffer cache releases a lock per block.
void
releasesleep(struct sleeplock *lk)
{
  acquire(&lk->lk);
  lk->locked = 0;
  lk->pid = 0;
  if(lk->waiters > 0)
    wakeup(lk);
  release(&lk->lk);
}

// Contract: 1 if the calling process holds lk.
int
holdingsleep(struct sleeplock *lk)
{
  int mine;

  acquire(&lk->lk);
  mine = lk->locked && (lk->pid == myproc()->pid);
  release(&lk->lk);
  return mine;
}
