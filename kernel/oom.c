// The out-of-memory killer: what happens when a page fault finds no free page even after
// reclaim (no swap, or swap full too; docs/memory.md, "Out of memory").
//
// The process that faulted is not always the one to die. Under overcommit it is often a
// small one, a server breaking the copy-on-write share of its own data or stack after a
// fork, while its workers hold the memory; killing it would lose every request at once
// and free almost nothing. So, as Linux's OOM killer does, the kernel kills the process
// that holds the most anonymous pages in RAM (its resident user pages that no file backs)
// and lets the faulter wait for that victim's exit, which gives the pages back
// (kernel/proc.c exit()), and try again. When the faulter is itself the largest, it dies
// as before, with usertrap's line. The victim's line has the same `usertrap: pid N (name)
// killed:` start, so whoever counts the processes killed for memory counts it too.
//
// Locks: a candidate is sized with its vmlock taken by tryacquiresleep (one busy in its
// own page table is passed over, never waited for) and its state read under its p->lock.

#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

#define OOM_WAIT_TICKS 100   // how long a faulter waits for its victim to have exited

extern struct proc proc[NPROC];

// Contract: the pages killing q would free: its resident anonymous user pages, or 0 if q
// is not a live user process other than init, or is already killed (its pages are on the
// way back), or its vmlock is busy. Caller holds no spinlock.
static uint64
victim_pages(struct proc *q)
{
  uint64 n = 0;

  if(!tryacquiresleep(&q->vmlock))
    return 0;
  acquire(&q->lock);
  int alive = (q->state == SLEEPING || q->state == RUNNABLE || q->state == RUNNING) &&
              !q->killed && q->pid > 1 && q->pagetable != 0;
  release(&q->lock);
  if(alive)
    n = uvmanonpages(q->pagetable);
  releasesleep(&q->vmlock);
  return n;
}

// Contract: sleep one clock tick. Caller holds no spinlock.
static void
sleep_tick(void)
{
  acquire(&tickslock);
  uint t0 = ticks;
  while(ticks == t0)
    sleep(&ticks, &tickslock);
  release(&tickslock);
}

// Contract: whether the process that had pid in slot v has exited (or is gone).
static int
exited(struct proc *v, int pid)
{
  acquire(&v->lock);
  int gone = v->pid != pid || v->state == ZOMBIE || v->state == UNUSED;
  release(&v->lock);
  return gone;
}

// Contract: p's page fault found no page. If another process holds more anonymous pages
// in RAM than p, kill the one holding the most, print its line, and wait (at most
// OOM_WAIT_TICKS) until it has exited. Returns 1 then (p may try the fault again), 0 if p
// is the largest, or p was killed, or the victim did not exit in time: p dies for memory.
// Caller is p, holding p->vmlock and no spinlock.
int
oomkill(struct proc *p)
{
  struct proc *victim = 0;
  uint64 most = uvmanonpages(p->pagetable);   // a tie spares the others: p goes

  for(struct proc *q = proc; q < &proc[NPROC]; q++){
    if(q == p)
      continue;
    uint64 n = victim_pages(q);
    if(n > most){
      most = n;
      victim = q;
    }
  }
  if(victim == 0)
    return 0;
  int pid = victim->pid;
  if(kill(pid) < 0)
    return 0;
  printf("usertrap: pid %d (%s) killed: out of memory, the largest (pid %d faulted)\n",
         pid, victim->name, p->pid);
  for(int t = 0; t < OOM_WAIT_TICKS && !killed(p); t++){
    if(exited(victim, pid))
      return 1;
    sleep_tick();
  }
  return 0;
}
