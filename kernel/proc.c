// Processes: the process table, creation (fork), exit and wait, sleeping and waking,
// and the per-hart scheduler.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

struct cpu cpus[NCPU];

struct proc proc[NPROC];

struct proc *initproc;   // the first process; orphans are given to it

// nextpid: the pid the next allocproc() hands out; pid_lock protects it.
static int nextpid = 1;
static struct spinlock pid_lock;

// wait_lock protects every p->parent, and orders a parent's wait() against its
// children's exit() so that no wakeup is lost (order: kernel/locks.h).
static struct spinlock wait_lock;

extern volatile int booted_harts;  // start.c
extern char trampoline[];          // trampoline.S, placed by kernel.ld

static void forkret(void);
static void freeproc(struct proc *p);

// Contract: allocate one page per process slot for its kernel stack and map it at
// KSTACK(i) in the kernel page table kpgtbl (the unmapped page below is a guard).
// Called by kvminit() before paging is on; panics if memory runs out.
void
proc_mapstacks(pagetable_t kpgtbl)
{
  for(int i = 0; i < NPROC; i++){
    char *pa = kalloc();
    if(pa == 0)
      panic("proc_mapstacks: out of memory");
    kvmmap(kpgtbl, KSTACK(i), (uint64)pa, PGSIZE, PTE_R | PTE_W);
  }
}

// Contract: initialise the process table (all UNUSED) and its locks. Hart 0, once.
void
procinit(void)
{
  initlock(&pid_lock, "nextpid");
  initlock(&wait_lock, "wait_lock");
  for(int i = 0; i < NPROC; i++){
    initlock(&proc[i].lock, "proc");
    initsleeplock(&proc[i].vmlock, "vmlock");
    proc[i].state = UNUSED;
    proc[i].kstack = KSTACK(i);
  }
}

// Contract: number of harts that have started (each counted itself in start()).
int
nharts(void)
{
  return booted_harts;
}

// Contract: this hart's id. Interrupts must be off, or the caller may move to another hart.
int
cpuid(void)
{
  return r_tp();
}

// Contract: this hart's struct cpu. Interrupts must be off.
struct cpu*
mycpu(void)
{
  return &cpus[cpuid()];
}

// Contract: the process running on this hart, or 0 (in the scheduler).
struct proc*
myproc(void)
{
  push_off();
  struct proc *p = mycpu()->proc;
  pop_off();
  return p;
}

// Contract: a fresh pid, never handed out before.
static int
allocpid(void)
{
  acquire(&pid_lock);
  int pid = nextpid++;
  release(&pid_lock);
  return pid;
}

// Contract: find an UNUSED slot and make it a USED process with a pid, a zeroed
// trapframe page, a user page table holding only the trampoline and trapframe, and a
// kernel context that starts in forkret(). Returns it with p->lock held, or 0 (nothing
// left allocated) when the table is full or memory runs out.
static struct proc*
allocproc(void)
{
  struct proc *p;

  for(p = proc; p < &proc[NPROC]; p++){
    acquire(&p->lock);
    if(p->state == UNUSED)
      break;
    release(&p->lock);
  }
  if(p == &proc[NPROC])
    return 0;

  p->pid = allocpid();
  p->state = USED;
  p->sz = 0;
  p->heapbase = p->sbrkbytes = 0;
  p->lazy_faults = p->cow_faults = p->cow_copies = p->cow_reuses = 0;
  p->paged_in = p->paged_out = 0;
  memset(p->vmas, 0, sizeof(p->vmas));

  if((p->trapframe = (struct trapframe *)kalloc()) == 0 ||
     (p->pagetable = proc_pagetable(p)) == 0){
    freeproc(p);
    release(&p->lock);
    return 0;
  }
  memset(p->trapframe, 0, PGSIZE);

  memset(&p->context, 0, sizeof(p->context));
  p->context.ra = (uint64)forkret;
  p->context.sp = p->kstack + PGSIZE;
  return p;
}

// Contract: release everything p owns in memory (trapframe, user pages, page table)
// and mark the slot UNUSED. p->lock must be held. Open files and cwd are not touched
// (exit() closes them).
static void
freeproc(struct proc *p)
{
  if(p->trapframe)
    kfree((void *)p->trapframe);
  p->trapframe = 0;
  if(p->pagetable)
    proc_freepagetable(p->pagetable, p->sz);
  p->pagetable = 0;
  p->sz = 0;
  p->heapbase = p->sbrkbytes = 0;
  p->pid = 0;
  p->parent = 0;
  p->name[0] = 0;
  p->chan = 0;
  p->killed = 0;
  p->xstate = 0;
  p->state = UNUSED;
}

// Contract: a new user page table for p with no user pages, only the trampoline (R|X,
// kernel-only) at TRAMPOLINE and p's trapframe (R|W, kernel-only) at TRAPFRAME.
// Returns 0 (nothing leaked) if memory runs out.
pagetable_t
proc_pagetable(struct proc *p)
{
  pagetable_t pagetable = uvmcreate();

  if(pagetable == 0)
    return 0;
  if(mappages(pagetable, TRAMPOLINE, PGSIZE, (uint64)trampoline, PTE_R | PTE_X) < 0){
    uvmfree(pagetable, 0);
    return 0;
  }
  if(mappages(pagetable, TRAPFRAME, PGSIZE, (uint64)p->trapframe, PTE_R | PTE_W) < 0){
    uvmunmap(pagetable, TRAMPOLINE, 1, 0);
    uvmfree(pagetable, 0);
    return 0;
  }
  return pagetable;
}

// Contract: free a user page table made by proc_pagetable() and the user pages below sz
// (unmapped holes are skipped); the trampoline and trapframe pages themselves stay.
void
proc_freepagetable(pagetable_t pagetable, uint64 sz)
{
  uvmunmap(pagetable, TRAMPOLINE, 1, 0);
  uvmunmap(pagetable, TRAPFRAME, 1, 0);
  uvmfree(pagetable, sz);
}

// Contract: create the first process, empty and RUNNABLE. When it first runs, forkret()
// mounts the file system and execs /init in it.
void
userinit(void)
{
  struct proc *p = allocproc();

  if(p == 0)
    panic("userinit");
  initproc = p;
  safestrcpy(p->name, "init", sizeof(p->name));
  p->state = RUNNABLE;
  release(&p->lock);
}

// Contract: where a new process's kernel thread starts (allocproc set context.ra), on
// its first switch from the scheduler, holding p->lock. Releases it and returns to user
// space. For the first process only, it first mounts the root file system (that needs a
// process context, since it sleeps on the disk) and execs /init.
static void
forkret(void)
{
  static int first = 1;
  struct proc *p = myproc();

  release(&p->lock);

  if(first){
    first = 0;
    fsinit(ROOTDEV);
    p->cwd = namei("/");
    if(p->cwd == 0)
      panic("init: no root directory");
    char *argv[] = { "init", 0 };
    int argc = exec("/init", argv);
    if(argc < 0)
      panic("init exec");
    p->trapframe->a0 = argc;   // what main(argc, argv) receives; exec set a1
  }

  usertrapret();
}

// Contract: copy the calling process: memory (copied or COW-shared by uvmcopy), its
// mmap regions (mmap_fork: the same file pages, a new reference to each file), the
// registers including the FP state, open files and cwd. The child starts with its own
// memstat counters at 0 and returns 0 from fork. Returns the child's pid to the parent,
// or -1 with nothing leaked.
int
fork(void)
{
  struct proc *p = myproc();
  struct proc *np = allocproc();

  if(np == 0)
    return -1;
  // np is USED: no scheduler runs it and nobody else frees it, so its lock can go while
  // the copy below sleeps (vmreserve may page out).
  release(&np->lock);

  // Set sz first so that freeproc() frees whatever uvmcopy managed to map
  // (freeing skips unmapped holes).
  np->sz = p->sz;
  np->heapbase = p->heapbase;
  np->sbrkbytes = p->sbrkbytes;
  // Under p's vmlock, reclaim leaves p's PTEs alone while they are copied; first make
  // room for the child's pages if swap can (a copying fork needs one per page).
  acquiresleep(&p->vmlock);
  vmreserve(uvmforkpages(p));
  int err = uvmcopy(p->pagetable, np->pagetable, 0, p->sz) < 0 || mmap_fork(p, np) < 0;
  releasesleep(&p->vmlock);
  if(err){
    acquire(&np->lock);
    freeproc(np);
    release(&np->lock);
    return -1;
  }

  *np->trapframe = *p->trapframe;   // includes fregs/fcsr, saved on trap entry
  np->trapframe->a0 = 0;            // fork returns 0 in the child

  for(int i = 0; i < NOFILE; i++)
    if(p->ofile[i])
      np->ofile[i] = filedup(p->ofile[i]);
  np->cwd = idup(p->cwd);
  safestrcpy(np->name, p->name, sizeof(p->name));
  int pid = np->pid;

  acquire(&wait_lock);
  np->parent = p;
  release(&wait_lock);

  acquire(&np->lock);
  np->state = RUNNABLE;
  release(&np->lock);
  return pid;
}

// Contract: the pid of the calling process's parent. A process whose parent exited
// was given to init (reparent), so a child that sees 1 here knows it is an orphan.
// Takes wait_lock, which protects p->parent.
int
getppid(void)
{
  struct proc *p = myproc();

  acquire(&wait_lock);
  int pid = p->parent ? p->parent->pid : 0;
  release(&wait_lock);
  return pid;
}

// Contract: give p's children to initproc. Caller holds wait_lock.
static void
reparent(struct proc *p)
{
  if(!holding(&wait_lock))
    panic("reparent: wait_lock");
  for(struct proc *pp = proc; pp < &proc[NPROC]; pp++){
    if(pp->parent == p){
      pp->parent = initproc;
      wakeup(initproc);
    }
  }
}

// Contract: end the calling process with exit status status. Removes its mmap regions
// (writing shared pages back), closes its files, frees its
// user memory, hands its children to init, and stays a ZOMBIE (holding only its page-table
// pages and trapframe) until its parent's wait() frees it.
// Never returns.
void
exit(int status)
{
  struct proc *p = myproc();

  if(p == initproc)
    panic("init exiting");

  acquiresleep(&p->vmlock);   // reclaim keeps off while the memory goes
  mmap_unmapall(p);   // write back shared pages, drop the file pages and the files

  for(int fd = 0; fd < NOFILE; fd++){
    if(p->ofile[fd]){
      fileclose(p->ofile[fd]);
      p->ofile[fd] = 0;
    }
  }

  begin_op();
  iput(p->cwd);
  end_op();
  p->cwd = 0;
  log_sync();   // what the process wrote is on disk once it has exited (log.c)

  // Give the user pages back now rather than in the parent's wait(): a process killed
  // for exhausting memory should not hold it while it waits to be reaped. We run on the
  // kernel page table, and this one is never loaded again; freeproc() frees the rest.
  p->sz = uvmdealloc(p->pagetable, p->sz, 0);
  releasesleep(&p->vmlock);

  acquire(&wait_lock);
  reparent(p);
  wakeup(p->parent);   // the parent may be sleeping in wait()

  acquire(&p->lock);
  p->xstate = status;
  p->state = ZOMBIE;
  release(&wait_lock);

  sched();   // with p->lock held; the parent's wait() finishes us off
  panic("zombie exit");
}

// Contract: wait for a child to exit, free it, and return its pid; its exit status is
// copied out to user address addr unless addr is 0. Returns -1 if the caller has no
// children, is killed while waiting, or addr cannot be written.
int
wait(uint64 addr)
{
  struct proc *p = myproc();

  acquire(&wait_lock);
  for(;;){
    int havekids = 0;
    for(struct proc *pp = proc; pp < &proc[NPROC]; pp++){
      if(pp->parent != p)
        continue;
      acquire(&pp->lock);
      havekids = 1;
      if(pp->state == ZOMBIE){
        int pid = pp->pid;
        int xstate = pp->xstate;
        // Copy out with no lock held: addr may be paged out, and reading it back sleeps.
        // pp stays a zombie meanwhile: only its parent, this thread, reaps it.
        release(&pp->lock);
        release(&wait_lock);
        if(addr != 0 && copyout(p->pagetable, addr, (char *)&xstate, sizeof(xstate)) < 0)
          return -1;
        acquire(&wait_lock);
        acquire(&pp->lock);
        freeproc(pp);
        release(&pp->lock);
        release(&wait_lock);
        return pid;
      }
      release(&pp->lock);
    }

    if(!havekids || killed(p)){
      release(&wait_lock);
      return -1;
    }
    sleep(p, &wait_lock);   // a child's exit() wakes us
  }
}

// Contract: run forever on this hart, picking RUNNABLE processes round robin and
// switching to them; a process comes back here through sched(). When nothing is
// runnable the hart waits for an interrupt (wfi).
void
scheduler(void)
{
  struct cpu *c = mycpu();

  c->proc = 0;
  for(;;){
    // Take any pending interrupt now, then scan with interrupts off so that an
    // interrupt arriving after the scan still ends the wfi below.
    intr_on();
    intr_off();

    int found = 0;
    for(struct proc *p = proc; p < &proc[NPROC]; p++){
      acquire(&p->lock);
      if(p->state == RUNNABLE){
        p->state = RUNNING;
        c->proc = p;
        swtch(&c->context, &p->context);
        // The process gave the hart back (yield, sleep, exit) with p->lock held.
        c->proc = 0;
        found = 1;
      }
      release(&p->lock);
    }
    if(!found)
      asm volatile("wfi");
  }
}

// Contract: switch from the current process to this hart's scheduler. The caller holds
// p->lock and no other lock, and has already changed p->state from RUNNING.
// Saves and restores intena, which belongs to this kernel thread, not to the hart.
void
sched(void)
{
  struct proc *p = myproc();

  if(!holding(&p->lock))
    panic("sched: p->lock not held");
  if(mycpu()->noff != 1)
    panic("sched: other locks held");
  if(p->state == RUNNING)
    panic("sched: still RUNNING");
  if(intr_get())
    panic("sched: interrupts on");

  int intena = mycpu()->intena;
  swtch(&p->context, &mycpu()->context);
  mycpu()->intena = intena;
}

// Contract: give up the hart for one scheduling round (timer interrupt).
void
yield(void)
{
  struct proc *p = myproc();

  acquire(&p->lock);
  p->state = RUNNABLE;
  sched();
  release(&p->lock);
}

// Contract: atomically release lk and sleep on chan; reacquire lk when woken.
// Wakeups cannot be lost: the wakeup() caller must hold lk (or p->lock) to change the
// condition, and we hold p->lock from before releasing lk until we are asleep.
void
sleep(void *chan, struct spinlock *lk)
{
  struct proc *p = myproc();

  acquire(&p->lock);
  release(lk);

  p->chan = chan;
  p->state = SLEEPING;
  sched();
  p->chan = 0;

  release(&p->lock);
  acquire(lk);
}

// Contract: make every process sleeping on chan RUNNABLE. Must not be called with any
// p->lock held.
void
wakeup(void *chan)
{
  for(struct proc *p = proc; p < &proc[NPROC]; p++){
    if(p == myproc())
      continue;
    acquire(&p->lock);
    if(p->state == SLEEPING && p->chan == chan)
      p->state = RUNNABLE;
    release(&p->lock);
  }
}

// Contract: mark the process with this pid killed (it exits the next time it crosses
// the user/kernel boundary) and wake it if asleep. Returns 0, or -1 if there is no
// such process or it is init.
int
kill(int pid)
{
  for(struct proc *p = proc; p < &proc[NPROC]; p++){
    acquire(&p->lock);
    if(p->pid == pid && p->state != UNUSED){
      if(p == initproc){   // init's exit() panics: nobody may kill it
        release(&p->lock);
        return -1;
      }
      p->killed = 1;
      if(p->state == SLEEPING)
        p->state = RUNNABLE;
      release(&p->lock);
      return 0;
    }
    release(&p->lock);
  }
  return -1;
}

// Contract: note that an allocation made by the calling process (if any) found no free
// page: vmfault() reads p->nomem to tell a fault that failed for memory from a bad address.
// Safe from any context: interrupts stay as they were, no lock is taken.
void
nomem(void)
{
  struct proc *p = myproc();
  if(p)
    p->nomem = 1;
}

// Contract: mark p killed.
void
setkilled(struct proc *p)
{
  acquire(&p->lock);
  p->killed = 1;
  release(&p->lock);
}

// Contract: 1 if p has been killed.
int
killed(struct proc *p)
{
  acquire(&p->lock);
  int k = p->killed;
  release(&p->lock);
  return k;
}

// Contract: copy len bytes from kernel src to dst, a user address of the current
// process if user_dst, else a kernel address. 0 on success, -1 on a bad user address.
int
either_copyout(int user_dst, uint64 dst, void *src, uint64 len)
{
  if(user_dst)
    return copyout(myproc()->pagetable, dst, src, len);
  memmove((char *)dst, src, len);
  return 0;
}

// Contract: copy len bytes to kernel dst from src, a user address of the current
// process if user_src, else a kernel address. 0 on success, -1 on a bad user address.
int
either_copyin(void *dst, int user_src, uint64 src, uint64 len)
{
  if(user_src)
    return copyin(myproc()->pagetable, dst, src, len);
  memmove(dst, (char *)src, len);
  return 0;
}

// Contract: print one line per process (pid, state, name, size) on the console, for ^P.
// Takes no locks, so that it works even when the system is wedged.
void
procdump(void)
{
  static char *names[] = {
    [UNUSED] "unused", [USED] "used", [SLEEPING] "sleep ",
    [RUNNABLE] "runble", [RUNNING] "run   ", [ZOMBIE] "zombie",
  };

  printf("\n");
  for(struct proc *p = proc; p < &proc[NPROC]; p++){
    if(p->state == UNUSED)
      continue;
    char *state = "???";
    if(p->state >= 0 && p->state < NELEM(names) && names[p->state])
      state = names[p->state];
    printf("%d %s %s sz=%lu\n", p->pid, state, p->name, p->sz);
  }
}
