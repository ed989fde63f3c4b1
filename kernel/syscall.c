// System-call dispatch and argument fetching. A user pointer is never trusted: every
// fetch goes through copyin/copyinstr, which fail (return -1) on a bad address.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/syscall.h"
#include "kernel/defs.h"

// Contract: read the 8-byte word at user address addr into *ip. 0, or -1 if the word
// does not lie wholly inside the process's memory or cannot be read.
int
fetchaddr(uint64 addr, uint64 *ip)
{
  struct proc *p = myproc();

  if(addr >= p->sz || addr + sizeof(uint64) > p->sz || addr + sizeof(uint64) < addr)
    return -1;
  if(copyin(p->pagetable, (char *)ip, addr, sizeof(*ip)) != 0)
    return -1;
  return 0;
}

// Contract: copy the NUL-terminated string at user address addr into buf (at most max
// bytes, terminator included). Returns its length, or -1 if it is unreadable or longer.
int
fetchstr(uint64 addr, char *buf, int max)
{
  struct proc *p = myproc();

  if(copyinstr(p->pagetable, buf, addr, max) < 0)
    return -1;
  return strlen(buf);
}

// Contract: the raw value of system-call argument n (0..5), from a0..a5.
static uint64
argraw(int n)
{
  struct trapframe *tf = myproc()->trapframe;

  switch(n){
  case 0: return tf->a0;
  case 1: return tf->a1;
  case 2: return tf->a2;
  case 3: return tf->a3;
  case 4: return tf->a4;
  case 5: return tf->a5;
  }
  panic("argraw");
}

// Contract: argument n as an int. Cannot fail; the value is the caller's to check.
void
argint(int n, int *ip)
{
  *ip = argraw(n);
}

// Contract: argument n as a user address. Not checked here: copyin/copyout check it
// when it is used.
void
argaddr(int n, uint64 *ip)
{
  *ip = argraw(n);
}

// Contract: argument n as a user string copied into buf (at most max bytes).
// Returns its length, or -1 on a bad pointer or a string too long.
int
argstr(int n, char *buf, int max)
{
  uint64 addr;

  argaddr(n, &addr);
  return fetchstr(addr, buf, max);
}

// The implementations (sysproc.c, sysfile.c).
extern uint64 sys_fork(void);
extern uint64 sys_exit(void);
extern uint64 sys_wait(void);
extern uint64 sys_pipe(void);
extern uint64 sys_read(void);
extern uint64 sys_kill(void);
extern uint64 sys_exec(void);
extern uint64 sys_fstat(void);
extern uint64 sys_chdir(void);
extern uint64 sys_dup(void);
extern uint64 sys_getpid(void);
extern uint64 sys_sbrk(void);
extern uint64 sys_sleep(void);
extern uint64 sys_uptime(void);
extern uint64 sys_open(void);
extern uint64 sys_write(void);
extern uint64 sys_mknod(void);
extern uint64 sys_unlink(void);
extern uint64 sys_link(void);
extern uint64 sys_mkdir(void);
extern uint64 sys_close(void);
extern uint64 sys_memstat(void);
extern uint64 sys_mmap(void);
extern uint64 sys_munmap(void);
extern uint64 sys_getppid(void);

// System-call number (kernel/syscall.h) -> implementation.
static uint64 (*syscalls[])(void) = {
  [SYS_fork]    sys_fork,
  [SYS_exit]    sys_exit,
  [SYS_wait]    sys_wait,
  [SYS_pipe]    sys_pipe,
  [SYS_read]    sys_read,
  [SYS_kill]    sys_kill,
  [SYS_exec]    sys_exec,
  [SYS_fstat]   sys_fstat,
  [SYS_chdir]   sys_chdir,
  [SYS_dup]     sys_dup,
  [SYS_getpid]  sys_getpid,
  [SYS_sbrk]    sys_sbrk,
  [SYS_sleep]   sys_sleep,
  [SYS_uptime]  sys_uptime,
  [SYS_open]    sys_open,
  [SYS_write]   sys_write,
  [SYS_mknod]   sys_mknod,
  [SYS_unlink]  sys_unlink,
  [SYS_link]    sys_link,
  [SYS_mkdir]   sys_mkdir,
  [SYS_close]   sys_close,
  [SYS_memstat] sys_memstat,
  [SYS_mmap]    sys_mmap,
  [SYS_munmap]  sys_munmap,
  [SYS_getppid] sys_getppid,
};

// Contract: run the system call whose number is in a7 and put its result in a0.
// An unknown number prints one line and returns -1 to the process.
void
syscall(void)
{
  struct proc *p = myproc();
  uint64 num = p->trapframe->a7;

  if(num > 0 && num < NELEM(syscalls) && syscalls[num]){
    p->trapframe->a0 = syscalls[num]();
  } else {
    printf("%d %s: unknown sys call %ld\n", p->pid, p->name, (long)num);
    p->trapframe->a0 = -1;
  }
}
