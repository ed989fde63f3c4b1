// Traps: system calls, device interrupts and exceptions, from user and kernel mode.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

// tickslock protects ticks: timer interrupts on hart 0 since boot, TICK_CYCLES apart.
struct spinlock tickslock;
uint ticks;

extern char trampoline[], uservec[], userret[];  // trampoline.S
void kernelvec(void);                            // kernelvec.S

// trampoline.S hard-codes the trapframe's address.
_Static_assert(TRAPFRAME == 0x3fffffe000L, "trampoline.S TRAPFRAME_VA is stale");
// fpu.S stores fcsr right after f31.
_Static_assert(__builtin_offsetof(struct trapframe, fcsr) ==
               __builtin_offsetof(struct trapframe, fregs) + 32*8, "fcsr must follow fregs");

static int devintr(void);

// Contract: set up the tick counter's lock. Hart 0, once.
void
trapinit(void)
{
  initlock(&tickslock, "time");
}

// Contract: make this hart's kernel-mode traps go to kernelvec.
void
trapinithart(void)
{
  w_stvec((uint64)kernelvec);
}

// Contract: save the user's f registers in p's trapframe if they changed since they
// were last restored (sstatus.FS Dirty), and mark them Clean. The kernel never uses the
// FP unit, so after this the trapframe holds the process's FP state.
static void
fpu_save(struct proc *p)
{
  uint64 s = r_sstatus();

  if((s & SSTATUS_FS_MASK) == SSTATUS_FS_DIRTY){
    fpsave(p->trapframe->fregs);
    w_sstatus((s & ~SSTATUS_FS_MASK) | SSTATUS_FS_CLEAN);
  }
}

// Contract: load p's FP state into the f registers before returning to user mode (the
// hart may have run other processes meanwhile). Leaves sstatus.FS Clean.
static void
fpu_restore(struct proc *p)
{
  w_sstatus((r_sstatus() & ~SSTATUS_FS_MASK) | SSTATUS_FS_CLEAN);  // FS must not be Off
  fprestore(p->trapframe->fregs);
  w_sstatus((r_sstatus() & ~SSTATUS_FS_MASK) | SSTATUS_FS_CLEAN);
}

// Contract: print the one-line report for a user fault the kernel will not fix, and
// mark p killed (it exits before returning to user mode). scause and stval are the
// trap's, read on entry: vmfault may have slept since, and other traps have set the CSRs.
static void
user_fault(struct proc *p, uint64 scause, uint64 stval)
{
  printf("usertrap: pid %d (%s) killed: scause %p sepc %p stval %p\n",
         p->pid, p->name, (void *)scause, (void *)p->trapframe->epc, (void *)stval);
  setkilled(p);
}

// Contract: handle a trap from user mode (uservec jumps here on the kernel stack with
// the kernel page table): a system call, a device interrupt, a page fault resolved by
// vmfault(), or any other exception, which kills the process. Returns to user mode
// through usertrapret(), unless the process exits.
void
usertrap(void)
{
  if((r_sstatus() & SSTATUS_SPP) != 0)
    panic("usertrap: not from user mode");

  w_stvec((uint64)kernelvec);   // we are in the kernel now

  struct proc *p = myproc();
  p->trapframe->epc = r_sepc();
  fpu_save(p);

  uint64 scause = r_scause();
  uint64 stval = r_stval();
  int which = 0;
  if(scause == SCAUSE_ECALL_U){
    if(killed(p))
      exit(-1);
    p->trapframe->epc += 4;   // return after the ecall
    intr_on();                // sepc/scause/sstatus are saved; interrupts are fine now
    syscall();
  } else if((which = devintr()) != 0){
    // handled
  } else if(scause == SCAUSE_INST_PAGE || scause == SCAUSE_LOAD_PAGE ||
            scause == SCAUSE_STORE_PAGE){
    int access = scause == SCAUSE_STORE_PAGE ? FAULT_STORE :
                 scause == SCAUSE_INST_PAGE ? FAULT_FETCH : FAULT_LOAD;
    if(vmfault(p, stval, access) < 0 && !killed(p))
      user_fault(p, scause, stval);   // (a p the OOM killer chose meanwhile has its line)
  } else {
    user_fault(p, scause, stval);
  }

  if(killed(p))
    exit(-1);
  if(which == 2)
    yield();   // timer: give the hart to the next process
  usertrapret();
}

// Contract: return to user mode for the current process: prepare the trapframe's
// kernel fields for the next trap, restore the FP state, set sstatus for user mode
// with interrupts enabled, and jump to userret on the trampoline page. No return.
void
usertrapret(void)
{
  struct proc *p = myproc();

  // From here until sret, a trap would go to uservec with the kernel's registers.
  intr_off();
  w_stvec(TRAMPOLINE + (uservec - trampoline));

  p->trapframe->kernel_satp = r_satp();
  p->trapframe->kernel_sp = p->kstack + PGSIZE;
  p->trapframe->kernel_trap = (uint64)usertrap;
  p->trapframe->kernel_hartid = r_tp();

  fpu_restore(p);

  uint64 x = r_sstatus();
  x &= ~SSTATUS_SPP;   // sret goes to user mode
  x |= SSTATUS_SPIE;   // with interrupts enabled
  w_sstatus(x);
  w_sepc(p->trapframe->epc);

  uint64 satp = MAKE_SATP(p->pagetable);
  void (*ret)(uint64) = (void (*)(uint64))(TRAMPOLINE + (userret - trampoline));
  ret(satp);
}

// Contract: handle a trap taken in supervisor mode (via kernelvec): device interrupts
// only; a timer interrupt in a process's kernel thread yields. Any exception here is a
// kernel bug: panic with scause/sepc/stval.
void
kerneltrap(void)
{
  uint64 sepc = r_sepc();
  uint64 sstatus = r_sstatus();
  uint64 scause = r_scause();

  if((sstatus & SSTATUS_SPP) == 0)
    panic("kerneltrap: not from supervisor mode");
  if(intr_get())
    panic("kerneltrap: interrupts enabled");

  int which = devintr();
  if(which == 0){
    printf("kerneltrap: scause %p sepc %p stval %p\n",
           (void *)scause, (void *)sepc, (void *)r_stval());
    panic("kerneltrap");
  }
  if(which == 2 && myproc() != 0)
    yield();

  // yield() may have run other code that trapped: restore what sret needs.
  w_sepc(sepc);
  w_sstatus(sstatus);
}

// Contract: a timer interrupt: hart 0 counts a tick and wakes sleepers; every hart
// re-arms its stimecmp for the next tick.
static void
clockintr(void)
{
  if(cpuid() == 0){
    acquire(&tickslock);
    ticks++;
    wakeup(&ticks);
    release(&tickslock);
  }
  w_stimecmp(r_time() + TICK_CYCLES);
}

// Contract: if scause is a device interrupt, handle it. Returns 2 for a timer
// interrupt, 1 for another device, 0 if scause is not an interrupt we know.
static int
devintr(void)
{
  uint64 scause = r_scause();

  if(scause == SCAUSE_S_EXTERNAL){
    int irq = plic_claim();
    if(irq == UART0_IRQ)
      uartintr();
    else if(irq == VIRTIO0_IRQ)
      virtio_disk_intr(0);
    else if(irq == VIRTIO1_IRQ)
      virtio_disk_intr(1);
    else if(irq)
      printf("devintr: unexpected irq %d\n", irq);
    if(irq)
      plic_complete(irq);   // the PLIC may raise this source again
    return 1;
  }
  if(scause == SCAUSE_S_TIMER){
    clockintr();
    return 2;
  }
  return 0;
}
