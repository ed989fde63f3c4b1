// Process-related system calls. Arguments come from the trapframe via argint/argaddr;
// results go back in a0 (syscall.c).
//
// Contract (how user arguments are checked): argint/argaddr only read registers, so
// every value is checked where it is used. An address goes only to copyout() (wait's
// status, memstat), which gives -1 for memory that is not the caller's; an sbrk size is
// checked by growproc() for overflow, the top of user space and the heap's base; a
// negative sleep counts as 0; a pid that matches no process gives -1. None of these
// calls takes a lock or a reference that it still holds when it returns. kill()
// refuses init, whose exit would panic the kernel.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/memstat.h"
#include "kernel/syscall.h"
#include "kernel/defs.h"

// Contract: exit(status): never returns. status is any int, kept for the parent's wait.
uint64
sys_exit(void)
{
  int status;

  argint(0, &status);
  exit(status);
  return 0;   // not reached
}

// getpid(): the caller's pid.
uint64
sys_getpid(void)
{
  return myproc()->pid;
}

// getppid(): the parent's pid; 1 (init) once the parent has exited.
uint64
sys_getppid(void)
{
  return getppid();
}

// fork(): child's pid in the parent, 0 in the child, -1 on failure.
uint64
sys_fork(void)
{
  return fork();
}

// Contract: wait(int *status): pid of an exited child, or -1 (no children, killed, or
// status not writable). status may be 0; it is checked only by copyout().
uint64
sys_wait(void)
{
  uint64 addr;

  argaddr(0, &addr);
  return wait(addr);
}

// Contract: sbrk(n, how): grow (or shrink, n < 0) the heap by n bytes; returns the old end
// of the heap, or (char*)-1 on failure, with nothing changed. how: SBRK_POLICY (eager or
// lazy by LAZY_ALLOC) or SBRK_LAZY (kernel/syscall.h); growproc says what each promises.
// Any n and how are safe: growproc() refuses what does not fit, an unknown how is -1.
uint64
sys_sbrk(void)
{
  int n, how;

  struct proc *p = myproc();

  argint(0, &n);
  argint(1, &how);
  if(how != SBRK_POLICY && how != SBRK_LAZY)
    return -1;
  uint64 old = p->sz;
  acquiresleep(&p->vmlock);   // reclaim keeps off p's page table meanwhile (vm.c)
  int r = growproc(p, n, how);
  releasesleep(&p->vmlock);
  if(r < 0)
    return -1;
  return old;
}

// Contract: sleep(n): wait n clock ticks (1/100 s); 0, or -1 if the caller is killed
// meanwhile. Holds tickslock only while checking; sleep() gives it up while waiting.
uint64
sys_sleep(void)
{
  int n;

  argint(0, &n);
  if(n < 0)
    n = 0;
  acquire(&tickslock);
  uint start = ticks;
  while(ticks - start < (uint)n){
    if(killed(myproc())){
      release(&tickslock);
      return -1;
    }
    sleep(&ticks, &tickslock);
  }
  release(&tickslock);
  return 0;
}

// Contract: kill(pid): 0, or -1 if there is no such process or it is init (which must
// never exit). The target is marked killed and woken if asleep; it exits before it next
// returns to user mode.
uint64
sys_kill(void)
{
  int pid;

  argint(0, &pid);
  return kill(pid);
}

// uptime(): clock ticks since boot.
uint64
sys_uptime(void)
{
  acquire(&tickslock);
  uint t = ticks;
  release(&tickslock);
  return t;
}

// Contract: memstat(struct memstat *ms): fill *ms with one snapshot (kernel/memstat.h);
// 0, or -1 if ms is not writable user memory. vmstat() fills a kernel copy; ms is used
// only by the final copyout().
uint64
sys_memstat(void)
{
  uint64 addr;
  struct memstat ms;
  struct proc *p = myproc();

  argaddr(0, &addr);
  memset(&ms, 0, sizeof(ms));
  acquiresleep(&p->vmlock);   // reclaim leaves p's PTEs alone while they are counted
  vmstat(p, &ms);
  releasesleep(&p->vmlock);
  if(copyout(p->pagetable, addr, (char *)&ms, sizeof(ms)) < 0)
    return -1;
  return 0;
}
