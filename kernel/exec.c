// exec(): replace the calling process's memory with a program loaded from an ELF file.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/proc.h"
#include "kernel/defs.h"
#include "kernel/fs.h"
#include "kernel/file.h"
#include "kernel/elf.h"

// Highest address a program segment may reach: the guard page and the stack still
// have to fit below the trapframe.
#define SEG_LIMIT (TRAPFRAME - (USERSTACK + 1) * PGSIZE)

// Contract: page permissions for an ELF segment's flags, on top of PTE_R|PTE_U
// (uvmalloc adds those): text is executable and not writable, data writable.
static int
flags2perm(int flags)
{
  int perm = 0;

  if(flags & ELF_PROG_FLAG_EXEC)
    perm |= PTE_X;
  if(flags & ELF_PROG_FLAG_WRITE)
    perm |= PTE_W;
  return perm;
}

// Contract: copy n bytes at file offset off of ip into the pages mapped at va
// (page aligned) in pagetable. 0, or -1 if a page is missing or the file is short.
// ip is locked.
static int
loadseg(pagetable_t pagetable, uint64 va, struct inode *ip, uint64 off, uint64 n)
{
  for(uint64 i = 0; i < n; i += PGSIZE){
    uint64 pa = walkaddr(pagetable, va + i);
    if(pa == 0)
      return -1;
    uint m = (n - i < PGSIZE) ? n - i : PGSIZE;
    if(readi(ip, 0, pa, off + i, m) != m)
      return -1;
  }
  return 0;
}

// Contract: 1 if program header ph describes a segment exec can load: memsz covers
// filesz, nothing wraps around, the start is page aligned, and it ends below SEG_LIMIT.
static int
segment_ok(struct proghdr *ph)
{
  if(ph->memsz < ph->filesz)
    return 0;
  if(ph->vaddr + ph->memsz < ph->vaddr || ph->off + ph->filesz < ph->off)
    return 0;
  if(ph->vaddr % PGSIZE != 0)
    return 0;
  return ph->vaddr + ph->memsz <= SEG_LIMIT;
}

// Contract: map and fill every loadable segment of ip's ELF file (header elf) into
// pagetable, eagerly, growing *szp. 0, or -1 on a bad header or out of memory (what was
// mapped stays counted in *szp for the caller to free). ip is locked.
static int
loadsegs(pagetable_t pagetable, struct inode *ip, struct elfhdr *elf, uint64 *szp)
{
  struct proghdr ph;

  for(int i = 0; i < elf->phnum; i++){
    uint64 off = elf->phoff + (uint64)i * sizeof(ph);
    if(off < elf->phoff || off >= ip->size)
      return -1;
    if(readi(ip, 0, (uint64)&ph, off, sizeof(ph)) != sizeof(ph))
      return -1;
    if(ph.type != ELF_PROG_LOAD)
      continue;
    if(!segment_ok(&ph))
      return -1;
    uint64 sz = uvmalloc(pagetable, *szp, ph.vaddr + ph.memsz, flags2perm(ph.flags));
    if(sz == 0)
      return -1;
    *szp = sz;
    if(loadseg(pagetable, ph.vaddr, ip, ph.off, ph.filesz) < 0)
      return -1;
  }
  return 0;
}

// Contract: copy the argument strings argv[] (kernel pointers, 0-terminated) onto the user
// stack that ends at *spp and starts at stackbase, then the argv pointer array itself
// (16-byte aligned, as the RISC-V calling convention wants). Updates *spp to the array.
// Returns argc, or -1 if there are too many arguments or they do not fit.
static int
pushargs(pagetable_t pagetable, char **argv, uint64 *spp, uint64 stackbase)
{
  uint64 ustack[MAXARG + 1];
  uint64 sp = *spp;
  int argc;

  for(argc = 0; argv[argc]; argc++){
    if(argc >= MAXARG)
      return -1;
    uint64 len = strlen(argv[argc]) + 1;
    if(sp - stackbase < len)
      return -1;
    sp -= len;
    sp -= sp % 16;
    if(sp < stackbase || copyout(pagetable, sp, argv[argc], len) < 0)
      return -1;
    ustack[argc] = sp;
  }
  ustack[argc] = 0;

  uint64 bytes = (argc + 1) * sizeof(uint64);
  if(sp - stackbase < bytes)
    return -1;
  sp -= bytes;
  sp -= sp % 16;
  if(sp < stackbase || copyout(pagetable, sp, (char *)ustack, bytes) < 0)
    return -1;
  *spp = sp;
  return argc;
}

// Contract: the last element of path (for p->name).
static char*
lastelem(char *path)
{
  char *last = path;

  for(char *s = path; *s; s++)
    if(*s == '/')
      last = s + 1;
  return last;
}

// Contract: run the program at path with arguments argv (kernel strings) in the calling
// process. The new image: the ELF's segments (mapped now, permissions from the ELF
// flags), one guard page without PTE_U, USERSTACK stack pages, an empty heap
// (heapbase = sz = end of the stack), and no mmap regions (the old ones are removed). FP state starts zeroed. Returns argc (main's first
// argument; syscall() puts it in a0, and a1 points to argv), or -1 with the old image
// intact and nothing leaked.
int
exec(char *path, char **argv)
{
  struct proc *p = myproc();
  struct elfhdr elf;
  struct inode *ip;
  pagetable_t pagetable = 0;
  uint64 sz = 0;

  begin_op();
  if((ip = namei(path)) == 0){
    end_op();
    return -1;
  }
  ilock(ip);

  if(readi(ip, 0, (uint64)&elf, 0, sizeof(elf)) != sizeof(elf) || elf.magic != ELF_MAGIC)
    goto bad;
  if((pagetable = proc_pagetable(p)) == 0)
    goto bad;
  if(loadsegs(pagetable, ip, &elf, &sz) < 0)
    goto bad;
  iunlockput(ip);
  end_op();
  ip = 0;

  // The guard page, then the stack.
  sz = PGROUNDUP(sz);
  uint64 top = uvmalloc(pagetable, sz, sz + (USERSTACK + 1) * PGSIZE, PTE_W);
  if(top == 0)
    goto bad;
  uvmclear(pagetable, sz);   // guard: no PTE_U, so a stack overflow faults
  sz = top;

  uint64 sp = sz;
  int argc = pushargs(pagetable, argv, &sp, sz - USERSTACK * PGSIZE);
  if(argc < 0)
    goto bad;

  // Commit: nothing can fail from here on.
  safestrcpy(p->name, lastelem(path), sizeof(p->name));
  acquiresleep(&p->vmlock);   // reclaim keeps off while the old image goes
  mmap_unmapall(p);           // the old image's mappings go (shared pages written back)
  pagetable_t oldpagetable = p->pagetable;
  uint64 oldsz = p->sz;
  p->pagetable = pagetable;
  p->sz = sz;
  p->heapbase = sz;
  p->sbrkbytes = 0;
  p->trapframe->epc = elf.entry;
  p->trapframe->sp = sp;
  p->trapframe->a1 = sp;      // argv
  memset(p->trapframe->fregs, 0, sizeof(p->trapframe->fregs));
  p->trapframe->fcsr = 0;     // FP state of a fresh program: all zero
  proc_freepagetable(oldpagetable, oldsz);
  releasesleep(&p->vmlock);
  return argc;

 bad:
  if(pagetable)
    proc_freepagetable(pagetable, sz);
  if(ip){
    iunlockput(ip);
    end_op();
  }
  return -1;
}
