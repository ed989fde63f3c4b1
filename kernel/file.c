// Open files: the system-wide file table, and read/write/stat on a file of any type
// (pipe, inode, device).
//
// Contract:
//   - ftable.lock protects every struct file's ref; a slot with ref 0 is free. It also
//     covers type while ref is 0, so a freed slot reads FD_NONE until its next opener
//     fills it in.
//   - Each reference is owned by one holder: an ofile[] slot of some process (fork
//     copies them with filedup()), or the system call that is setting the file up. The
//     holder gives it back with fileclose() exactly once.
//   - type, readable, writable, pipe, ip and major are written only by the opener, after
//     filealloc() and before the file is used, and do not change until the last close.
//     Readers need no lock: their own reference keeps the file from being freed.
//   - An FD_INODE or FD_DEVICE file owns one reference to ip; an FD_PIPE file is one end
//     of its pipe. The last fileclose() gives that up.
//   - off (FD_INODE) is shared by everyone holding the file, and is read and advanced
//     only under ip->lock, so each read, and each chunk of a write, through one file gets
//     its own range of bytes.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/fs.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/file.h"
#include "kernel/stat.h"
#include "kernel/proc.h"

// Device switch: read/write functions by major number; console.c fills devsw[CONSOLE].
struct devsw devsw[NDEV];

struct {
  struct spinlock lock;   // protects every file's ref (and type while ref is 0)
  struct file file[NFILE];
} ftable;

// Contract: initialise the file table's lock. Hart 0, once; every slot starts free.
void
fileinit(void)
{
  initlock(&ftable.lock, "ftable");
}

// Contract: a free file slot with ref 1, owned by the caller, or 0 if the table is full.
// Its type is FD_NONE and its other fields are stale: the caller fills them in before
// anyone else can see the file. fileclose() of it as it is releases nothing else.
struct file *
filealloc(void)
{
  acquire(&ftable.lock);
  for(struct file *f = ftable.file; f < ftable.file + NFILE; f++){
    if(f->ref == 0){
      f->ref = 1;
      release(&ftable.lock);
      return f;
    }
  }
  release(&ftable.lock);
  return 0;
}

// Contract: add a reference to f and return it; the caller already holds one (panics
// if f is free). The new reference is given back with fileclose().
struct file *
filedup(struct file *f)
{
  acquire(&ftable.lock);
  if(f->ref < 1)
    panic("filedup");
  f->ref++;
  release(&ftable.lock);
  return f;
}

// Contract: give back one of the caller's references to f. The last one frees the slot
// and then closes the pipe end or puts the inode. For an inode or device it runs its
// own transaction, so the caller must not be inside one, nor hold an inode or buffer
// lock; a file still FD_NONE (sys_open's and pipealloc's error paths) releases nothing
// and may be closed anywhere. Panics if f is already free.
void
fileclose(struct file *f)
{
  struct file ff;

  acquire(&ftable.lock);
  if(f->ref < 1)
    panic("fileclose");
  if(--f->ref > 0){
    release(&ftable.lock);
    return;
  }
  ff = *f;   // work on a copy: the slot may be reused as soon as the lock goes
  f->ref = 0;
  f->type = FD_NONE;
  release(&ftable.lock);

  if(ff.type == FD_PIPE){
    pipeclose(ff.pipe, ff.writable);
  } else if(ff.type == FD_INODE || ff.type == FD_DEVICE){
    if(ff.type == FD_INODE && ff.writable)
      gather_flush(ff.ip);   // a gather lives only while a writer is open (gather.c)
    begin_op();
    iput(ff.ip);
    end_op();
  }
}

// Contract: copy f's metadata to the user address addr of the current process. Returns
// 0, or -1 if f has no inode or addr is not writable user memory. Caller holds a
// reference to f.
int
filestat(struct file *f, uint64 addr)
{
  struct proc *p = myproc();
  struct stat st;

  if(f->type != FD_INODE && f->type != FD_DEVICE)
    return -1;
  ilock(f->ip);
  stati(f->ip, &st);
  iunlock(f->ip);
  if(copyout(p->pagetable, addr, (char *)&st, sizeof(st)) < 0)
    return -1;
  return 0;
}

// Contract: read up to n bytes from f into the user address addr of the current
// process. Returns the bytes read (0 at end of file), or -1 if f is not readable, n < 0,
// the device is unknown, or the copy failed. Caller holds a reference to f. An inode
// read takes ip->lock and no transaction.
int
fileread(struct file *f, uint64 addr, int n)
{
  int r = -1;

  if(f->readable == 0 || n < 0)
    return -1;
  if(f->type == FD_PIPE){
    r = piperead(f->pipe, addr, n);
  } else if(f->type == FD_DEVICE){
    if(f->major < 0 || f->major >= NDEV || devsw[f->major].read == 0)
      return -1;
    r = devsw[f->major].read(1, addr, n);
  } else if(f->type == FD_INODE){
    ilock(f->ip);
    if((r = readi(f->ip, 1, addr, f->off, n)) > 0)
      f->off += r;
    iunlock(f->ip);
  } else {
    panic("fileread");
  }
  return r;
}

// Bytes of file data one transaction may write. Worst case, a chunk touches its data
// blocks plus one (unaligned start), up to 3 indirect blocks (single, or double-indirect
// plus two second-level blocks), 2 bitmap blocks and the inode: 7 more than its data
// blocks. A big operation (begin_bigop) may log LOGSIZE blocks, a normal one MAXOPBLOCKS.
#define WRITECHUNK    ((MAXOPBLOCKS - 7) * BSIZE)
#define BIGWRITECHUNK ((LOGSIZE - 7) * BSIZE)

// Contract: write n bytes from the user address addr of the current process to f.
// Returns n, or -1 if not all of it could be written (for a pipe or device, what they
// return). Caller holds a reference to f and is not inside a transaction: a write to
// an inode runs one transaction per chunk, so a failed write may leave its first chunks
// written. An append of fewer than DIRECTMIN whole blocks is gathered in memory and
// needs no transaction (gather.c); any other write first flushes the file's gathered
// blocks. Whole blocks appended at the end of the file go straight to the disk
// (writeappend, fs.c) in normal transactions that log only the metadata, so their commits
// are deferred and shared like any others'; other long writes log their data in big
// operations, which commit fewer times.
int
filewrite(struct file *f, uint64 addr, int n)
{
  if(f->writable == 0 || n < 0)
    return -1;
  if(f->type == FD_PIPE)
    return pipewrite(f->pipe, addr, n);
  if(f->type == FD_DEVICE){
    if(f->major < 0 || f->major >= NDEV || devsw[f->major].write == 0)
      return -1;
    return devsw[f->major].write(1, addr, n);
  }
  if(f->type != FD_INODE)
    panic("filewrite");

  struct inode *ip = f->ip;
  int i = 0;
  while(i < n){
    int n1 = n - i;
    ilock(ip);
    int r = gather_append(ip, 1, addr + i, f->off, n1);
    int flush = r == 0 && ip->gather;
    if(r > 0)
      f->off += r;
    iunlock(ip);
    if(r < 0)
      break;     // bad address
    if(r > 0){
      i += r;
      continue;
    }
    if(flush)
      gather_flush(ip);
    // Read without ip->lock (which comes after the transaction's start), so only a hint:
    // writeappend looks again under the lock and writes nothing if the file has changed.
    int append = n1 >= BSIZE && f->off % BSIZE == 0 && f->off == ip->size;
    int big = !append && n1 > WRITECHUNK;
    if(big)
      begin_bigop();
    else
      begin_op();
    ilock(ip);
    if(ip->gather){   // another writer gathered blocks meanwhile: flush them first
      iunlock(ip);
      end_op();
      continue;
    }
    r = append ? writeappend(ip, 1, addr + i, f->off, n1 - n1 % BSIZE) : 0;
    int want = r;
    if(r == 0){
      int chunk = big ? BIGWRITECHUNK : WRITECHUNK;
      want = n1 < chunk ? n1 : chunk;
      r = writei(ip, 1, addr + i, f->off, want);
    }
    if(r > 0)
      f->off += r;
    iunlock(ip);
    end_op();
    if(r < 0 || r != want)
      break;   // disk full, bad address, or file too big
    i += r;
  }
  return i == n ? n : -1;
}
