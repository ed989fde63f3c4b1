// Processes and harts.
#include "kernel/sleeplock.h"   // struct proc holds one (vmlock)

// Callee-saved registers that swtch() saves and restores for a kernel context switch.
struct context {
  uint64 ra;
  uint64 sp;
  uint64 s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11;
};

// Per-hart state.
struct cpu {
  struct proc *proc;       // process running on this hart, or 0
  struct context context;  // swtch() here to enter the scheduler
  int noff;                // depth of push_off() nesting
  int intena;              // were interrupts enabled before the outermost push_off()?
};

extern struct cpu cpus[NCPU];

// The trapframe: one page per process, mapped at TRAPFRAME in the user page table just under
// the trampoline. uservec in trampoline.S saves the user registers here, and userret restores
// them. The byte offsets are what trampoline.S uses; keep them in step.
struct trapframe {
  /*   0 */ uint64 kernel_satp;   // kernel page table
  /*   8 */ uint64 kernel_sp;     // top of this process's kernel stack
  /*  16 */ uint64 kernel_trap;   // usertrap()
  /*  24 */ uint64 epc;           // saved user pc
  /*  32 */ uint64 kernel_hartid; // tp of the hart that last entered the kernel
  /*  40 */ uint64 ra;
  /*  48 */ uint64 sp;
  /*  56 */ uint64 gp;
  /*  64 */ uint64 tp;
  /*  72 */ uint64 t0;
  /*  80 */ uint64 t1;
  /*  88 */ uint64 t2;
  /*  96 */ uint64 s0;
  /* 104 */ uint64 s1;
  /* 112 */ uint64 a0;
  /* 120 */ uint64 a1;
  /* 128 */ uint64 a2;
  /* 136 */ uint64 a3;
  /* 144 */ uint64 a4;
  /* 152 */ uint64 a5;
  /* 160 */ uint64 a6;
  /* 168 */ uint64 a7;
  /* 176 */ uint64 s2;
  /* 184 */ uint64 s3;
  /* 192 */ uint64 s4;
  /* 200 */ uint64 s5;
  /* 208 */ uint64 s6;
  /* 216 */ uint64 s7;
  /* 224 */ uint64 s8;
  /* 232 */ uint64 s9;
  /* 240 */ uint64 s10;
  /* 248 */ uint64 s11;
  /* 256 */ uint64 t3;
  /* 264 */ uint64 t4;
  /* 272 */ uint64 t5;
  /* 280 */ uint64 t6;
  /* 288 */ uint64 fregs[32];     // user f0..f31, saved while the process is in the kernel
  /* 544 */ uint64 fcsr;          // user floating-point control and status
};

// A file mapping made by mmap (mmap.c). A slot with len 0 is free. Private to the
// process (like sz), so no lock: only its own system calls and faults touch it, and fork
// copies it while the parent is in fork.
#define NVMA 16
struct vma {
  uint64 start;      // page-aligned user address of the first page
  uint64 len;        // bytes, a multiple of PGSIZE; 0 = free slot
  int prot;          // PROT_READ | PROT_WRITE | PROT_EXEC (kernel/fcntl.h)
  int flags;         // MAP_SHARED or MAP_PRIVATE
  struct file *f;    // the mapped file; the region owns one reference (filedup)
  uint64 off;        // file offset of start, page-aligned
};

enum procstate { UNUSED, USED, SLEEPING, RUNNABLE, RUNNING, ZOMBIE };

// Per-process state.
struct proc {
  struct spinlock lock;

  // p->lock must be held when using these:
  enum procstate state;
  void *chan;                  // sleeping on chan, if non-zero
  int killed;                  // non-zero if the process has been killed
  int xstate;                  // exit status, for the parent's wait()
  int pid;

  // wait_lock must be held when using this:
  struct proc *parent;

  // The page table, sz and vmas, against reclaim and the OOM killer while an operation
  // that may sleep or be preempted midway changes them. Who takes it, and in which
  // order with the other locks: kernel/locks.h.
  struct sleeplock vmlock;

  // Private to the process, so p->lock need not be held:
  uint64 kstack;               // virtual address of the kernel stack
  uint64 sz;                   // size of user memory in bytes (heap top)
  uint64 heapbase;             // lowest heap address (end of the stack, set by exec)
  uint64 sbrkbytes;            // of the heap, the bytes plain sbrk added (growproc's cap)
  pagetable_t pagetable;       // user page table
  struct trapframe *trapframe; // data page for trampoline.S
  struct context context;      // swtch() here to run the process
  struct file *ofile[NOFILE];  // open files
  struct inode *cwd;           // current directory
  char name[16];               // for debugging
  struct vma vmas[NVMA];       // file mappings (mmap.c), all above sz and below TRAPFRAME

  // Memory-event counters reported by memstat(); only this process's own
  // trap/system-call path writes them, so no lock is needed.
  uint64 lazy_faults;          // zeroed heap pages mapped on a fault
  uint64 cow_faults;           // writes that hit a COW page
  uint64 cow_copies;           // ... resolved by copying
  uint64 cow_reuses;           // ... resolved by taking the page over (sole owner)
  uint64 paged_in;             // pages read back from swap by its faults
  uint64 paged_out;            // pages reclaim wrote to swap; reclaim writes it, holding
                               // p->vmlock, which memstat holds when it reads it
  int nomem;                   // a kalloc() of its own failed since vmfault cleared it
};
