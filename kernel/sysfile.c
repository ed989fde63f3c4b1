// File-system system calls: argument checking, then the work in file.c and fs.c.
// Every user pointer goes through argaddr/argstr/fetchstr/copyin/copyout; a bad argument
// gives -1, never a panic.
//
// Contract (how user arguments are checked):
//   - A descriptor goes through argfd(): 0 <= fd < NOFILE and ofile[fd] open, else -1.
//   - A path goes through argstr() into a MAXPATH kernel buffer: an unreadable or
//     unterminated string gives -1. The file system only ever sees kernel strings.
//   - A buffer address is not checked here: it is used only through copyin()/copyout()
//     (via fileread/filewrite/filestat or directly), which give -1 for memory that is not
//     the caller's user memory. A count n < 0 gives -1.
//   - A device number is checked when it is made (mknod), when it is opened (an inode's
//     major comes from disk) and on every read and write (file.c).
//   - Open modes: a directory opens only with O_RDONLY; O_CREATE cannot replace a
//     directory. So a user cannot write a directory's entries directly.
//   - Ownership: ofile[fd] owns one file reference; a system call that fails after
//     filealloc()/pipealloc() gives back everything it took. Every inode reference a
//     call takes is put before it returns, except the one handed to a new file or cwd.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/stat.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/fs.h"
#include "kernel/sleeplock.h"
#include "kernel/file.h"
#include "kernel/fcntl.h"

// Contract: fetch argument n as a file descriptor of the current process. Returns 0 and
// sets *pfd and *pf (each if non-zero), or -1 if it is out of range or not open. Takes no
// reference: the ofile[] slot's reference keeps *pf alive for the rest of the call, as
// only this process can close it.
static int
argfd(int n, int *pfd, struct file **pf)
{
  int fd;
  struct file *f;

  argint(n, &fd);
  if(fd < 0 || fd >= NOFILE || (f = myproc()->ofile[fd]) == 0)
    return -1;
  if(pfd)
    *pfd = fd;
  if(pf)
    *pf = f;
  return 0;
}

// Contract: give f the lowest free descriptor of the current process; the caller's
// reference to f moves into ofile[fd] (no new one is taken). Returns fd, or -1 if none
// is free; then the caller still owns its reference.
static int
fdalloc(struct file *f)
{
  struct proc *p = myproc();
  for(int fd = 0; fd < NOFILE; fd++){
    if(p->ofile[fd] == 0){
      p->ofile[fd] = f;
      return fd;
    }
  }
  return -1;
}

uint64
sys_dup(void)
{
  struct file *f;
  int fd;

  if(argfd(0, 0, &f) < 0)
    return -1;
  if((fd = fdalloc(f)) < 0)
    return -1;
  filedup(f);
  return fd;
}

uint64
sys_read(void)
{
  struct file *f;
  int n;
  uint64 p;

  argaddr(1, &p);
  argint(2, &n);
  if(argfd(0, 0, &f) < 0 || n < 0)
    return -1;
  return fileread(f, p, n);
}

uint64
sys_write(void)
{
  struct file *f;
  int n;
  uint64 p;

  argaddr(1, &p);
  argint(2, &n);
  if(argfd(0, 0, &f) < 0 || n < 0)
    return -1;
  return filewrite(f, p, n);
}

uint64
sys_close(void)
{
  int fd;
  struct file *f;

  if(argfd(0, &fd, &f) < 0)
    return -1;
  myproc()->ofile[fd] = 0;
  fileclose(f);
  return 0;
}

uint64
sys_fstat(void)
{
  struct file *f;
  uint64 st;

  argaddr(1, &st);
  if(argfd(0, 0, &f) < 0)
    return -1;
  return filestat(f, st);
}

// Contract: link(old, new): give the file old a second name new (not for directories,
// not across devices). nlink goes up before the entry is made and back down if that
// fails, all in one transaction, so a crash never leaves an entry the count misses.
// nlink is a short: a file with MAXNLINK names gets no more (-1), so it never wraps.
uint64
sys_link(void)
{
  char name[DIRSIZ], new[MAXPATH], old[MAXPATH];
  struct inode *dp, *ip;

  if(argstr(0, old, MAXPATH) < 0 || argstr(1, new, MAXPATH) < 0)
    return -1;

  begin_op();
  if((ip = namei(old)) == 0){
    end_op();
    return -1;
  }
  ilock(ip);
  if(ip->type == T_DIR || ip->nlink >= MAXNLINK){
    iunlockput(ip);
    end_op();
    return -1;
  }
  ip->nlink++;
  iupdate(ip);
  iunlock(ip);

  if((dp = nameiparent(new, name)) == 0)
    goto bad;
  ilock(dp);
  if(dp->dev != ip->dev || dirlink(dp, name, ip->inum) < 0){
    iunlockput(dp);
    goto bad;
  }
  iunlockput(dp);
  iput(ip);
  end_op();
  return 0;

bad:
  ilock(ip);
  ip->nlink--;
  iupdate(ip);
  iunlockput(ip);
  end_op();
  return -1;
}

// Contract: 1 if directory dp has no entries apart from "." and ".." (its first two
// slots, as create() makes them). Caller holds dp->lock.
static int
isdirempty(struct inode *dp)
{
  if(!holdingsleep(&dp->lock))
    panic("isdirempty: dp->lock");
  struct dirent de;

  for(uint64 off = 2 * sizeof(de); off < dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      panic("isdirempty: read");
    if(de.inum != 0)
      return 0;
  }
  return 1;
}

// Contract: unlink(path): remove a name; the file goes when its last name and last open
// file do. Refuses "." and "..", and a directory that is not empty. Locks the parent,
// then the child (the fs.c order), in one transaction with the final iput().
uint64
sys_unlink(void)
{
  struct inode *ip, *dp;
  struct dirent de;
  char name[DIRSIZ], path[MAXPATH];
  uint off;

  if(argstr(0, path, MAXPATH) < 0)
    return -1;

  begin_op();
  if((dp = nameiparent(path, name)) == 0){
    end_op();
    return -1;
  }
  ilock(dp);
  if(namecmp(name, ".") == 0 || namecmp(name, "..") == 0)
    goto bad;
  if((ip = dirlookup(dp, name, &off)) == 0)
    goto bad;
  ilock(ip);
  if(ip->nlink < 1)
    panic("unlink: nlink < 1");
  if(ip->type == T_DIR && !isdirempty(ip)){
    iunlockput(ip);
    goto bad;
  }

  memset(&de, 0, sizeof(de));
  if(writei(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
    panic("unlink: writei");
  if(ip->type == T_DIR){
    dp->nlink--;   // ip's ".." no longer names dp
    iupdate(dp);
  }
  iunlockput(dp);

  ip->nlink--;
  iupdate(ip);
  iunlockput(ip);   // frees the file if this was its last reference
  end_op();
  return 0;

bad:
  iunlockput(dp);
  end_op();
  return -1;
}

// Contract: create path as a new inode of the given type, or, for T_FILE, return an
// existing file or device there. Returns it locked, with one reference for the caller,
// or 0 (the name exists as another type, the parent is missing or has MAXNLINK links
// already, or the disk or inode table is full; then nothing is left changed). Caller is inside a transaction and
// holds no inode lock. A new directory gets "." and "..", and its parent's nlink grows.
static struct inode *
create(char *path, short type, short major, short minor)
{
  struct inode *ip, *dp;
  char name[DIRSIZ];

  if((dp = nameiparent(path, name)) == 0)
    return 0;
  ilock(dp);

  if((ip = dirlookup(dp, name, 0)) != 0){
    iunlockput(dp);
    ilock(ip);
    if(type == T_FILE && (ip->type == T_FILE || ip->type == T_DEVICE))
      return ip;
    iunlockput(ip);
    return 0;
  }
  if(type == T_DIR && dp->nlink >= MAXNLINK){   // the new ".." would wrap dp's nlink
    iunlockput(dp);
    return 0;
  }

  if((ip = ialloc(dp->dev, type)) == 0){
    iunlockput(dp);
    return 0;
  }
  ilock(ip);
  ip->major = major;
  ip->minor = minor;
  ip->nlink = 1;
  iupdate(ip);

  if(type == T_DIR){
    // "." and ".." do not count in nlink: that would make a cycle of references.
    if(dirlink(ip, ".", ip->inum) < 0 || dirlink(ip, "..", dp->inum) < 0)
      goto fail;
  }
  if(dirlink(dp, name, ip->inum) < 0)
    goto fail;
  if(type == T_DIR){
    dp->nlink++;   // for the new directory's ".."
    iupdate(dp);
  }
  iunlockput(dp);
  return ip;

fail:
  // Nothing names ip: dropping the last reference frees it.
  ip->nlink = 0;
  iupdate(ip);
  iunlockput(ip);
  iunlockput(dp);
  return 0;
}

// Contract: open(path, omode): a new descriptor for path, created if O_CREATE, truncated
// if O_TRUNC and a plain file. The file gets the inode reference namei()/create() took;
// on any failure that reference, the file slot and the descriptor are given back.
uint64
sys_open(void)
{
  char path[MAXPATH];
  int fd, omode;
  struct file *f;
  struct inode *ip;

  argint(1, &omode);
  if(argstr(0, path, MAXPATH) < 0)
    return -1;

  begin_op();
  if(omode & O_CREATE){
    if((ip = create(path, T_FILE, 0, 0)) == 0){
      end_op();
      return -1;
    }
  } else {
    if((ip = namei(path)) == 0){
      end_op();
      return -1;
    }
    ilock(ip);
    if(ip->type == T_DIR && omode != O_RDONLY){
      iunlockput(ip);
      end_op();
      return -1;
    }
  }

  if(ip->type == T_DEVICE && (ip->major < 0 || ip->major >= NDEV)){
    iunlockput(ip);
    end_op();
    return -1;
  }

  if((f = filealloc()) == 0 || (fd = fdalloc(f)) < 0){
    if(f)
      fileclose(f);
    iunlockput(ip);
    end_op();
    return -1;
  }

  if(ip->type == T_DEVICE){
    f->type = FD_DEVICE;
    f->major = ip->major;
  } else {
    f->type = FD_INODE;
    f->off = 0;
  }
  f->ip = ip;
  f->readable = !(omode & O_WRONLY);
  f->writable = (omode & O_WRONLY) || (omode & O_RDWR);

  if((omode & O_TRUNC) && ip->type == T_FILE)
    itrunc(ip);

  iunlock(ip);
  end_op();
  return fd;
}

uint64
sys_mkdir(void)
{
  char path[MAXPATH];
  struct inode *ip;

  begin_op();
  if(argstr(0, path, MAXPATH) < 0 || (ip = create(path, T_DIR, 0, 0)) == 0){
    end_op();
    return -1;
  }
  iunlockput(ip);
  end_op();
  return 0;
}

uint64
sys_mknod(void)
{
  struct inode *ip;
  char path[MAXPATH];
  int major, minor;

  argint(1, &major);
  argint(2, &minor);
  if(major < 0 || major >= NDEV || minor < 0 || minor > 0x7fff)
    return -1;
  begin_op();
  if(argstr(0, path, MAXPATH) < 0 || (ip = create(path, T_DEVICE, major, minor)) == 0){
    end_op();
    return -1;
  }
  iunlockput(ip);
  end_op();
  return 0;
}

// Contract: chdir(path): make the directory path the cwd. p->cwd owns one inode reference:
// the new one replaces it, and the old one is put inside the transaction.
uint64
sys_chdir(void)
{
  char path[MAXPATH];
  struct inode *ip;
  struct proc *p = myproc();

  begin_op();
  if(argstr(0, path, MAXPATH) < 0 || (ip = namei(path)) == 0){
    end_op();
    return -1;
  }
  ilock(ip);
  if(ip->type != T_DIR){
    iunlockput(ip);
    end_op();
    return -1;
  }
  iunlock(ip);
  iput(p->cwd);
  end_op();
  p->cwd = ip;
  return 0;
}

// Contract: exec(path, argv): argv is a user array of user string pointers ending with 0,
// fewer than MAXARG of them, each string shorter than a page. Each is copied into a
// kalloc'd page that this call owns and frees afterwards, whether exec() succeeds or not.
uint64
sys_exec(void)
{
  char path[MAXPATH], *argv[MAXARG];
  uint64 uargv, uarg;
  int i, ret = -1;

  argaddr(1, &uargv);
  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  memset(argv, 0, sizeof(argv));
  for(i = 0; ; i++){
    if(i >= NELEM(argv))
      goto out;
    if(fetchaddr(uargv + sizeof(uint64) * i, &uarg) < 0)
      goto out;
    if(uarg == 0)
      break;
    if((argv[i] = kalloc()) == 0)
      goto out;
    if(fetchstr(uarg, argv[i], PGSIZE) < 0)
      goto out;
  }
  ret = exec(path, argv);

out:
  for(i = 0; i < NELEM(argv) && argv[i] != 0; i++)
    kfree(argv[i]);
  return ret;
}

// Contract: pipe(fdarray): fdarray[0] gets the read end, fdarray[1] the write end. If a
// descriptor or the copy to fdarray fails, the descriptors it got are cleared and both
// files closed, which frees the pipe: the caller is left with nothing.
uint64
sys_pipe(void)
{
  uint64 fdarray;
  struct file *rf, *wf;
  int fd0, fd1;
  struct proc *p = myproc();

  argaddr(0, &fdarray);
  if(pipealloc(&rf, &wf) < 0)
    return -1;
  fd0 = -1;
  if((fd0 = fdalloc(rf)) < 0 || (fd1 = fdalloc(wf)) < 0){
    if(fd0 >= 0)
      p->ofile[fd0] = 0;
    fileclose(rf);
    fileclose(wf);
    return -1;
  }
  if(copyout(p->pagetable, fdarray, (char *)&fd0, sizeof(fd0)) < 0 ||
     copyout(p->pagetable, fdarray + sizeof(fd0), (char *)&fd1, sizeof(fd1)) < 0){
    p->ofile[fd0] = 0;
    p->ofile[fd1] = 0;
    fileclose(rf);
    fileclose(wf);
    return -1;
  }
  return 0;
}
