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
// oomretry() is where the fault path (vmfault, fault.c) comes when a fault finds no page:
// it reclaims and tries the fault again while reclaim frees something (or, while swap has
// room, could a tick later), and only then kills (oomkill) and tries again. A fault in a
// system call's copy that still finds no page kills its process too (oomcopyfail).
//
// Locks: oomlock (a sleeplock: its holder sleeps while its victim exits) lets one faulter
// at a time choose and kill, so that two faulters never kill for the same shortage; the
// next one first looks whether that victim's pages are enough. It is taken with
// tryacquiresleep between ticks, so that a faulter killed while it waits (perhaps the
// very victim) gives up at once. A faulter waits for it without its own vmlock, so that
// the chooser can size every waiter. A candidate is sized with its vmlock taken without
// waiting (kernel/locks.h; one busy in its own page table is sized again a tick later)
// and its state read under its p->lock.

#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/swap.h"
#include "kernel/defs.h"

#define OOM_WAIT_TICKS 100   // how long a faulter waits for busy processes (reclaim, sizing)
// How long a faulter waits for its victim's exit to give pages back: a process of hundreds
// of MiB, paged partly to swap, takes more than a second of a loaded host to exit.
#define OOM_EXIT_TICKS 1000
#define OOM_ENOUGH 64        // free pages that let a fault try again without a kill

extern struct proc proc[NPROC];
static struct sleeplock oomlock;

void
oominit(void)
{
  initsleeplock(&oomlock, "oom");
}

// Contract: whether q is a live user process other than init, not yet killed.
static int
candidate(struct proc *q)
{
  acquire(&q->lock);
  int alive = (q->state == SLEEPING || q->state == RUNNABLE || q->state == RUNNING) &&
              !q->killed && q->pid > 1 && q->pagetable != 0;
  release(&q->lock);
  return alive;
}

// Contract: the pages killing q would free: its resident anonymous user pages, or 0 if q
// is not a live user process other than init, or is already killed (its pages are on the
// way back), or its vmlock is busy (then *busy is counted up). Caller holds no spinlock.
static uint64
victim_pages(struct proc *q, int *busy)
{
  uint64 n = 0;

  if(!candidate(q))
    return 0;
  if(!tryacquiresleep(&q->vmlock)){
    (*busy)++;
    return 0;
  }
  if(candidate(q))   // again: it may have been killed or exited meanwhile
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

// Contract: the live process other than p holding the most anonymous pages in RAM, if it
// holds more than p (a tie spares the others), else 0. *busy counts the others passed
// over because their vmlock was taken (each in the middle of its own fault, fork or
// exit: sized again a tick later). Caller is p, holding no spinlock and not its own
// vmlock (panics otherwise: it takes it to size p).
static struct proc *
largest(struct proc *p, int *busy)
{
  struct proc *victim = 0;

  if(holdingsleep(&p->vmlock))
    panic("largest: vmlock held");   // oomretry lets go of it around oomkill
  acquiresleep(&p->vmlock);
  uint64 most = uvmanonpages(p->pagetable);
  releasesleep(&p->vmlock);
  *busy = 0;
  for(struct proc *q = proc; q < &proc[NPROC]; q++){
    if(q == p)
      continue;
    uint64 n = victim_pages(q, busy);
    if(n > most){
      most = n;
      victim = q;
    }
  }
  return victim;
}

// Contract: kill victim for p's fault, print its line, and wait (at most OOM_EXIT_TICKS)
// until it has exited, or its exit has given OOM_ENOUGH pages back. Returns 1 then, 0 if
// p was killed or the victim did not exit in time. Caller holds oomlock.
static int
killfor(struct proc *p, struct proc *victim)
{
  if(!holdingsleep(&oomlock))
    panic("killfor: oomlock");
  int pid = victim->pid;

  if(kill(pid) < 0)
    return 0;
  printf("usertrap: pid %d (%s) killed: out of memory, the largest (pid %d faulted)\n",
         pid, victim->name, p->pid);
  for(int t = 0; t < OOM_EXIT_TICKS && !killed(p); t++){
    if(exited(victim, pid) || kfreepages() >= OOM_ENOUGH)
      return 1;
    sleep_tick();
  }
  return 0;
}

// Contract: p's page fault found no page. If another faulter's victim has meanwhile given
// OOM_ENOUGH pages back, return 1 at once. Else, if another process holds more anonymous
// pages in RAM than p, kill the one holding the most and wait until it has exited: 1 (p
// may try the fault again). 0 if p is the largest, or p was killed, or the victim did not
// exit in time: p dies for memory. A candidate busy in its own page table is sized again
// a tick later (for at most OOM_WAIT_TICKS) before p is judged the largest. Caller is p,
// holding no spinlock and not its own vmlock (oomretry lets go of it).
static int
oomkill(struct proc *p)
{
  if(holding_spinlocks())
    panic("oomkill: spinlock");
  while(!tryacquiresleep(&oomlock)){
    if(killed(p))
      return 0;
    sleep_tick();
  }
  int ok = 0;
  for(int t = 0; t < OOM_WAIT_TICKS && !killed(p); t++){
    if(kfreepages() >= OOM_ENOUGH){
      ok = 1;
      break;
    }
    int busy;
    struct proc *victim = largest(p, &busy);
    if(victim){
      ok = killfor(p, victim);
      break;
    }
    if(busy == 0)
      break;
    sleep_tick();
  }
  releasesleep(&oomlock);
  return ok;
}

// Contract: vmfault's tries at the fault of p (the caller) at page-aligned va: resolve()
// (fault.c) it, and while it fails for want of a page (p->nomem), reclaim (swap.c) and try
// again. When reclaim frees nothing although swap has free slots, the pages it could take
// belong to processes busy in their own page tables (visit() passes over them), so p tries
// again a tick later, without its vmlock (so that others' reclaim may take p's pages), at
// most OOM_WAIT_TICKS times. Without swap, or with swap full, it calls the OOM killer and
// tries again after each victim has exited. Returns resolve()'s last answer: 0, or -1 (a
// bad address, or p dies for memory: p->nomem is then still set). Caller holds p->vmlock
// (panics otherwise) and no spinlock; p's vmlock is let go of around each wait, so p's
// page table may have changed when resolve() runs again.
int
oomretry(struct proc *p, uint64 va, int access)
{
  if(!holdingsleep(&p->vmlock))
    panic("oomretry: vmlock");
  p->nomem = 0;
  int r = resolve(p, va, access, 1);
  for(int idle = 0; r != 0 && p->nomem && idle < OOM_WAIT_TICKS; ){
    if(reclaim(RECLAIM_BATCH) == 0){
      if(swap_free_slots() == 0)
        break;
      idle++;
      releasesleep(&p->vmlock);
      sleep_tick();
      acquiresleep(&p->vmlock);
    }
    p->nomem = 0;
    r = resolve(p, va, access, 1);
  }
  // Out of memory, swap included: the largest process dies instead of p if p is not it
  // (each round frees pages or kills one more process: NPROC rounds at most). p lets go
  // of its vmlock while it waits there, so that the killer can size p (largest), and so
  // that many faulters waiting at once stay candidates for each other.
  for(int round = 0; r != 0 && p->nomem && round < NPROC; round++){
    releasesleep(&p->vmlock);
    int retry = oomkill(p);
    acquiresleep(&p->vmlock);
    if(!retry)
      break;
    p->nomem = 0;
    r = resolve(p, va, access, 1);
  }
  return r;
}

// Contract: p's copy to or from its own user memory at va (copyin/copyout, vm.c) failed
// because vmfault found no page even after reclaim and the OOM killer (p->nomem): p is
// the process to die for memory, as it would be for the same fault in user code. It gets
// its line and is marked killed, so it exits before returning to user mode and never sees
// the system call fail. Caller is p, holding no spinlock.
void
oomcopyfail(struct proc *p, uint64 va)
{
  if(killed(p))
    return;   // the OOM killer chose p meanwhile: it has its line
  printf("usertrap: pid %d (%s) killed: out of memory in a system call (va %p)\n",
         p->pid, p->name, (void *)va);
  setkilled(p);
}
