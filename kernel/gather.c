// Delayed allocation: appends of a few whole blocks gathered in memory, then allocated
// and written as runs (docs/filesystem.md, "Gathered appends").
//
// A program that appends one block per write() (MIT's usertests) paid, per call, a block
// allocation, the bitmap, map and inode blocks through the log and a share of a commit.
// Here such an append is only copied into a gather, a BIGREAD-block area that belongs to
// one inode at a time. Its blocks get disk addresses when the gather is written out
// (gather_flush): when it is full, when another kind of write comes, when the last
// writable file of the inode is closed (so at exit). Then they are allocated as runs of
// blocks consecutive on the disk and written with one request per run, as writei's direct
// path writes a large append, and the metadata of all of them is logged once.
//
// Contract:
//   - A gather holds blocks g->bn .. g->bn + g->n - 1 of its inode, which are the file's
//     last blocks: ip->size == (g->bn + g->n) * BSIZE. The first g->done of them are on
//     the disk already (a flush that stopped part way); the others have no disk block,
//     and the inode's size on disk (iupdate, gather_disksize) ends before them, so a
//     crash leaves the file as it was before them, never with another file's block.
//   - g->ip, the owner, is set and cleared under gtable.lock; everything else in the
//     gather is protected by the owner's ip->lock, as the inode's own fields. The owner's
//     ip->gather points at it.
//   - Every block not yet on the disk is promised by the free-block count (breserve,
//     fs.c), and GATHERSLACK more for the map blocks its allocation may need, so a write()
//     that returned cannot lose its data to a full disk. The promise is given back as
//     blocks are written, and the rest when the gather ends.
//   - A gather lives only while a writable struct file of its inode is open: the last
//     fileclose() of a writable file flushes it, and itrunc() drops it. So it ends before
//     the inode's last reference (iput checks).

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/stat.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/file.h"

#define NGATHER 4   // inodes with gathered blocks at once; another appender logs its blocks

// New map blocks that allocating BIGREAD consecutive file blocks can need: a single-
// indirect block, or the double-indirect block and a second-level one, or two
// second-level ones. One more for safety's sake is cheap.
#define GATHERSLACK 3

// Runs allocated and written in one transaction. A run logs at most one bitmap block for
// its blocks, the map block that lists them, and for a missing map block on the way two
// each (itself zeroed, its bitmap block) plus its parent's entry: 2 * 3 + 2 = 8; two runs
// and the inode stay under MAXOPBLOCKS.
#define RUNSPEROP 2

struct gather {
  struct inode *ip;   // owner, 0 if free (gtable.lock)
  uint64 bn;          // the file block of data[0]
  int n;              // blocks in data[]
  int done;           // blocks of data[] already on the disk
  char data[BIGREAD * BSIZE] __attribute__((aligned(PGSIZE)));
};

static struct {
  struct spinlock lock;
  struct gather gather[NGATHER];
} gtable;

// Initialise the gathers (all free). Called once at boot, from iinit.
void
gatherinit(void)
{
  initlock(&gtable.lock, "gtable");
}

// Contract: a free gather for ip, or 0 if all are taken. Caller holds ip->lock.
static struct gather *
gclaim(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("gclaim: ip->lock");
  acquire(&gtable.lock);
  for(struct gather *g = gtable.gather; g < gtable.gather + NGATHER; g++){
    if(g->ip == 0){
      g->ip = ip;
      release(&gtable.lock);
      return g;
    }
  }
  release(&gtable.lock);
  return 0;
}

// Contract: end ip's gather: give back what it still has promised (its blocks not on the
// disk, and the slack) and free it. Caller holds ip->lock.
static void
gend(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("gend: ip->lock");
  struct gather *g = ip->gather;
  bunreserve(g->n - g->done + GATHERSLACK);
  ip->gather = 0;
  acquire(&gtable.lock);
  g->ip = 0;
  release(&gtable.lock);
}

// Contract: append n bytes from src (a user address if user_src) at byte off of ip by
// gathering them, if this write is one to gather: a regular file, off at its end and on a
// block boundary, at least one and fewer than DIRECTMIN whole blocks (the whole blocks of
// n are taken), room in ip's gather or a free one, and blocks for them on the disk.
// Returns the bytes gathered and grows ip->size; 0 if the write is not gathered (the
// caller flushes ip's gather, if any, and writes it the usual way), -1 if copying from
// src failed. Needs no transaction: nothing is logged. Caller holds ip->lock.
int
gather_append(struct inode *ip, int user_src, uint64 src, uint64 off, uint n)
{
  if(!holdingsleep(&ip->lock))
    panic("gather_append: ip->lock");
  uint nb = n / BSIZE;
  if(ip->type != T_FILE || off != ip->size || off % BSIZE != 0 ||
     nb == 0 || nb >= DIRECTMIN || off / BSIZE + nb > MAXFILE)
    return 0;
  struct gather *g = ip->gather;
  if(g && g->n + nb > BIGREAD)
    return 0;                            // full: the caller flushes it
  if(g == 0){
    if((g = gclaim(ip)) == 0)
      return 0;
    if(!breserve(nb + GATHERSLACK)){
      acquire(&gtable.lock);
      g->ip = 0;
      release(&gtable.lock);
      return 0;
    }
    g->bn = off / BSIZE;
    g->n = g->done = 0;
    ip->gather = g;
  } else if(!breserve(nb)){
    return 0;
  }

  char *dst = g->data + g->n * BSIZE;
  if(either_copyin(dst, user_src, src, nb * BSIZE) == -1){
    bunreserve(nb);
    if(g->n == 0)
      gend(ip);
    return -1;
  }
  for(uint i = 0; i < nb; i++)
    pagecache_write(ip, g->bn + g->n + i, 0, dst + i * BSIZE, BSIZE);
  g->n += nb;
  ip->size = off + nb * BSIZE;
  return nb * BSIZE;
}

// Contract: the bytes of block bn of ip if it is gathered, else 0. Caller holds ip->lock.
char *
gathered(struct inode *ip, uint64 bn)
{
  if(!holdingsleep(&ip->lock))
    panic("gathered: ip->lock");
  struct gather *g = ip->gather;
  if(g == 0 || bn < g->bn || bn >= g->bn + g->n)
    return 0;
  return g->data + (bn - g->bn) * BSIZE;
}

// Contract: ip's size as the disk has it: without the gathered blocks not yet written.
// Caller holds ip->lock.
uint64
gather_disksize(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("gather_disksize: ip->lock");
  struct gather *g = ip->gather;
  return g ? (g->bn + g->done) * BSIZE : ip->size;
}

// Contract: allocate and write up to RUNSPEROP runs of ip's gathered blocks, and ip's
// inode with its new size on disk; when all are written, end the gather. Returns 1 when
// ip has no gather left, 0 after progress, -1 if no block could be had (every free one
// was freed by a change not yet committed: the caller commits and tries again). Caller
// holds ip->lock and is inside a transaction.
static int
gwrite(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("gwrite: ip->lock");
  struct gather *g = ip->gather;
  if(g == 0)
    return 1;
  int runs = 0;
  uint first;
  while(g->done < g->n && runs < RUNSPEROP){
    int k = allocrun(ip, g->bn + g->done, g->n - g->done, ALLOC_DIRECT | ALLOC_GATHERED,
                     &first);
    if(k == 0)
      break;
    writerun(ip, g->data + g->done * BSIZE, k, first);
    bunreserve(k);
    g->done += k;
    runs++;
  }
  iupdate(ip);    // the new size on disk; allocrun may also have changed ip->addrs
  if(g->done < g->n)
    return runs > 0 ? 0 : -1;
  gend(ip);
  return 1;
}

// Contract: write ip's gathered blocks to the disk, if it has any. Runs its own
// transactions: the caller holds no inode or buffer lock and is not inside one. If the
// only free blocks were freed by changes not yet committed, it waits for a commit
// (log_sync) and goes on; blocks still not found after that are dropped with a message,
// which the reservation makes impossible unless its count is wrong. ip->gather is first
// read without the lock, so that closing a file that gathered nothing costs no
// transaction: a gather that the caller's own writes made is seen, and one that another
// open file's writes make is that file's close's to write.
void
gather_flush(struct inode *ip)
{
  if(ip->gather == 0)
    return;
  int waited = 0;
  for(;;){
    begin_op();
    ilock(ip);
    int r = gwrite(ip);
    if(r < 0 && waited){
      printf("gather: no block for %d gathered blocks of inode %d\n",
             ip->gather->n - ip->gather->done, ip->inum);
      ip->size = gather_disksize(ip);
      gend(ip);
      r = 1;
    }
    iunlock(ip);
    end_op();
    if(r > 0)
      return;
    if(r < 0){
      log_sync();
      waited = 1;
    } else {
      waited = 0;
    }
  }
}

// Contract: forget ip's gathered blocks (the file is being truncated). Caller holds
// ip->lock.
void
gather_drop(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("gather_drop: ip->lock");
  if(ip->gather)
    gend(ip);
}
