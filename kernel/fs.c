// The file system: blocks, inodes, directories, path names.
//
// Layers, bottom up (see docs/filesystem.md for the on-disk format):
//   blocks:      balloc, and freeset_add (itrunc), over the free-block bitmap; the
//                free-block count and the reservations of gathered appends (gather.c)
//   inodes:      the in-memory inode table; ialloc, iget, ilock, iput, bmap, readi, writei
//   directories: an inode of type T_DIR holding struct dirent entries
//   path names:  namei, nameiparent
// Every function that changes the disk runs inside a log transaction (begin_op/end_op).
//
// Contract:
//   - Lock order: kernel/locks.h. A directory's inode lock before those of the inodes it
//     names; namex holds one at a time. No code takes an inode lock while holding a
//     buffer lock: a copy to or from user memory made under one never faults (copyheld).
//   - ip->ref (itable.lock) counts in-memory pointers: open files, cwds, and functions
//     in progress. ip->nlink (ip->lock, on disk) counts the directory entries naming the
//     inode, except a directory's own "."; so a directory's nlink includes one for each
//     subdirectory's "..". The disk inode and its blocks are freed only when both reach
//     0, by the iput() that drops the last ref of an inode with nlink 0; an unlinked
//     file stays usable while it is open.
//   - Functions that take or return an inode say whether it is locked and whether the
//     caller gets (or gives up) a reference. Every reference is given back with iput().
//   - Any iput() may be the last and write the disk, so every iput() runs inside a
//     transaction, with ip unlocked.
//   - A block number 0 means "none": block 0 is the boot block and is never allocated.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/stat.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/buf.h"
#include "kernel/file.h"
#include "kernel/virtio.h"

#define min(a, b) ((a) < (b) ? (a) : (b))

// The super block of the one file system (ROOTDEV); read once by fsinit, then constant.
struct superblock sb;

// Where balloc starts looking, and where ialloc does: hints only, protected by hintlock.
static struct spinlock hintlock;
static uint balloc_hint;
static uint ialloc_hint = 1;

// Free blocks, for delayed allocation (gather.c), also under hintlock: nfree counts the
// blocks that the bitmap, as the log has changed it, marks free; nreserved how many of
// them are promised to gathered appends, which have no block yet. Only the allocation of
// a gathered block (ALLOC_GATHERED) may take a promised one, so nfree >= nreserved holds
// whenever no gathered block is being written, and a gathered write cannot find the disk
// full. Counted at mount (countfree), then kept by balloc, balloc_at and freeset_flush.
static int nfree, nreserved;

// Zeros, copied out for a block a file does not have (a hole).
static char zeroblock[BSIZE];

// The landing area of readi's direct path (readdirect) and of writei's (writedirect).
static struct {
  struct sleeplock lock;            // held while data is in use
  uchar data[BIGREAD * BSIZE] __attribute__((aligned(PGSIZE)));
} bigread;

// Contract: read the super block of dev into *sbp (sleeps on the disk).
static void
readsb(int dev, struct superblock *sbp)
{
  struct buf *bp = bread(dev, 1);
  memmove(sbp, bp->data, sizeof(*sbp));
  brelse(bp);
}

// Contract: the blocks of dev that the bitmap marks free (one read per bitmap block).
// Called by fsinit after the log's recovery, before anything allocates.
static int
countfree(int dev)
{
  int n = 0;
  for(uint b = 0; b < sb.size; b += BPB){
    struct buf *bp = bread(dev, BBLOCK(b, sb));
    for(uint bi = 0; bi < BPB && b + bi < sb.size; bi += 8){
      uchar bits = bp->data[bi / 8];
      if(bits == 0 && b + bi + 8 <= sb.size)
        n += 8;                           // the common cases a byte at a time
      else if(bits != 0xff)
        for(uint k = 0; k < 8 && b + bi + k < sb.size; k++)
          n += (bits & (1 << k)) == 0;
    }
    brelse(bp);
  }
  return n;
}

// Contract: mount the file system on dev: read the super block, replay the log.
// Called once, from the first process (disk reads sleep), before any other fs call.
// Panics if dev does not hold a NexOS file system.
void
fsinit(int dev)
{
  readsb(dev, &sb);
  if(sb.magic != FSMAGIC)
    panic("fsinit: not a NexOS file system");
  initlock(&hintlock, "fshint");
  initsleeplock(&bigread.lock, "bigread");
  balloc_hint = 0;
  initlog(dev, &sb);
  nfree = countfree(dev);
}

// ---------------------------------------------------------------- blocks

// How bmap() allocates a missing block (its alloc argument; ALLOC_* in file.h).
#define ALLOC_NONE   0   // it does not: a missing block is 0
#define ALLOC_ZERO   1   // zeroed through the log, as every metadata block
#define ALLOC_HOW    (ALLOC_ZERO | ALLOC_DIRECT)

// Contract: take up to n blocks from the free count for an allocation about to mark them:
// any free block for a gathered one, else only blocks not promised to a gather. Returns
// how many; the caller gives back with bgive() those it then does not find.
static int
btake(int n, int gathered)
{
  acquire(&hintlock);
  int room = gathered ? nfree : nfree - nreserved;
  n = min(n, room > 0 ? room : 0);
  nfree -= n;
  release(&hintlock);
  return n;
}

// Contract: n blocks back into the free count (freed, or taken by btake() and not used).
static void
bgive(int n)
{
  acquire(&hintlock);
  nfree += n;
  release(&hintlock);
}

// Contract: promise n free blocks to a gather (gather.c): 1, or 0 if fewer than n blocks
// are free and not promised already. The gather gives them back with bunreserve() as its
// blocks are written (or dropped).
int
breserve(int n)
{
  int ok = 0;
  acquire(&hintlock);
  if(nfree - nreserved >= n){
    nreserved += n;
    ok = 1;
  }
  release(&hintlock);
  return ok;
}

// Contract: give back n blocks that breserve() promised.
void
bunreserve(int n)
{
  acquire(&hintlock);
  nreserved -= n;
  if(nreserved < 0)
    panic("bunreserve");
  release(&hintlock);
}

// Contract: allocate a data block on dev; with ALLOC_ZERO, zero it through the log; with
// ALLOC_DIRECT, leave it as it is and skip blocks a change not yet committed freed
// (log_freedsince); with ALLOC_GATHERED also, it may take a block promised to gathers.
// Returns its number, or 0 when no block qualifies. Caller is inside a transaction; it
// logs at most two blocks here (one bitmap block, the new block). Holds one buffer at a
// time.
static uint
balloc(uint dev, int mode)
{
  if(btake(1, mode & ALLOC_GATHERED) == 0){
    if((mode & ALLOC_HOW) == ALLOC_ZERO)
      printf("balloc: out of blocks\n");
    return 0;
  }
  acquire(&hintlock);
  uint start = balloc_hint;
  release(&hintlock);

  // Scan the bitmap from the hint to the end, then from the start to the hint.
  for(int pass = 0; pass < 2; pass++){
    uint lo = pass == 0 ? start - start % BPB : 0;
    uint hi = pass == 0 ? sb.size : start;
    for(uint b = lo; b < hi; b += BPB){
      struct buf *bp = bread(dev, BBLOCK(b, sb));
      uint first = (pass == 0 && b == lo) ? (start % BPB) & ~7 : 0;
      for(uint bi = first; bi < BPB && b + bi < hi; bi++){
        if(bi % 8 == 0 && bp->data[bi / 8] == 0xff){
          bi += 7;   // eight blocks in use
          continue;
        }
        uchar mask = 1 << (bi % 8);
        if((bp->data[bi / 8] & mask) == 0 &&
           !((mode & ALLOC_DIRECT) && log_freedsince(b + bi))){
          bp->data[bi / 8] |= mask;
          log_write(bp);
          brelse(bp);
          acquire(&hintlock);
          balloc_hint = b + bi + 1 < sb.size ? b + bi + 1 : 0;
          release(&hintlock);
          if((mode & ALLOC_HOW) == ALLOC_ZERO){
            struct buf *zp = bzeroed(dev, b + bi);
            log_write(zp);
            brelse(zp);
          }
          return b + bi;
        }
      }
      brelse(bp);
    }
  }
  bgive(1);
  if((mode & ALLOC_HOW) == ALLOC_ZERO)
    printf("balloc: out of blocks\n");
  return 0;
}

// Contract: allocate blocks addr, addr+1, ... on dev as long as each is free, was not
// freed by a change not yet committed (log_freedsince, as ALLOC_DIRECT) and lies in the
// same bitmap block as addr: at most n of them, none zeroed (blocks promised to gathers
// only when gathered). Returns how many (0 if addr itself is taken). One bitmap read and
// one log_write for the run: writedirect's blocks after its first. Caller is inside a
// transaction.
static uint
balloc_at(uint dev, uint addr, uint n, int gathered)
{
  uint c = 0, took = btake(n, gathered);
  n = took;
  struct buf *bp = bread(dev, BBLOCK(addr, sb));
  for(; c < n && addr + c < sb.size && (addr + c) / BPB == addr / BPB; c++){
    uint bi = (addr + c) % BPB;
    uchar mask = 1 << (bi % 8);
    if((bp->data[bi / 8] & mask) || log_freedsince(addr + c))
      break;
    bp->data[bi / 8] |= mask;
  }
  if(c > 0){
    log_write(bp);
    acquire(&hintlock);
    balloc_hint = addr + c < sb.size ? addr + c : 0;
    release(&hintlock);
  }
  brelse(bp);
  bgive(took - c);
  return c;
}

// ---------------------------------------------------------------- inodes
//
// The inode table holds the inodes in use in memory. An entry with ref > 0 belongs to
// (dev, inum) and cannot be reused; ref counts the C pointers to it (open files, cwds,
// functions in progress). itable.lock protects dev, inum and ref of every entry.
//
// The other fields are a copy of the disk inode, valid once ilock() has read it
// (ip->valid), and protected by the inode's sleeplock: ilock() before reading or
// changing them, iunlock() after. A changed copy goes to disk with iupdate().
// iput() drops a reference; the last reference to an inode with no links frees the
// inode and its blocks on disk.

struct {
  struct spinlock lock;
  struct inode inode[NINODE];
} itable;

// Initialise the inode table. Called once at boot.
void
iinit(void)
{
  initlock(&itable.lock, "itable");
  for(int i = 0; i < NINODE; i++)
    initsleeplock(&itable.inode[i].lock, "inode");
  gatherinit();
}

// Contract: the in-memory inode for (dev, inum), unlocked, with one new reference for
// the caller; 0 (and a message) if the table is full. Does not read the disk: ilock()
// does, the first time. Never fails for an inode that already has an entry.
static struct inode *
iget(uint dev, uint inum)
{
  struct inode *empty = 0;

  acquire(&itable.lock);
  for(struct inode *ip = itable.inode; ip < itable.inode + NINODE; ip++){
    if(ip->ref > 0 && ip->dev == dev && ip->inum == inum){
      ip->ref++;
      release(&itable.lock);
      return ip;
    }
    if(empty == 0 && ip->ref == 0)
      empty = ip;
  }
  if(empty){
    empty->dev = dev;
    empty->inum = inum;
    empty->ref = 1;
    empty->valid = 0;
  } else {
    printf("iget: inode table full\n");
  }
  release(&itable.lock);
  return empty;
}

// Contract: allocate a free disk inode of the given type on dev, with nlink 0, and
// return it unlocked with one reference for the caller; 0 if the disk has none free or
// the inode table is full (then the disk inode is given back). Caller is inside a
// transaction and must ilock() it, then either give it a name and an nlink, or iput()
// it with nlink still 0, which frees it (iput frees only an inode that was locked once).
struct inode *
ialloc(uint dev, short type)
{
  uint ninodes = min(sb.ninodes, MAXINODES + 1);
  acquire(&hintlock);
  uint start = ialloc_hint;
  release(&hintlock);

  for(uint k = 0; k < ninodes - 1; k++){
    uint inum = 1 + (start - 1 + k) % (ninodes - 1);
    struct buf *bp = bread(dev, IBLOCK(inum, sb));
    struct dinode *dip = (struct dinode *)bp->data + inum % IPB;
    if(dip->type == 0){
      memset(dip, 0, sizeof(*dip));
      dip->type = type;
      log_write(bp);   // the inode is taken on disk
      brelse(bp);
      acquire(&hintlock);
      ialloc_hint = inum;
      release(&hintlock);
      struct inode *ip = iget(dev, inum);
      if(ip == 0){
        // No room in the inode table: give the disk inode back.
        bp = bread(dev, IBLOCK(inum, sb));
        dip = (struct dinode *)bp->data + inum % IPB;
        dip->type = 0;
        log_write(bp);
        brelse(bp);
      }
      return ip;
    }
    brelse(bp);
  }
  printf("ialloc: no inodes\n");
  return 0;
}

// Contract: copy ip's in-memory fields to its disk inode (through the log); the size on
// disk leaves out a gathered tail (gather.c). Caller holds ip->lock and is inside a
// transaction; call it after every change to a field that lives on disk.
void
iupdate(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("iupdate: ip->lock");
  struct buf *bp = bread(ip->dev, IBLOCK(ip->inum, sb));
  struct dinode *dip = (struct dinode *)bp->data + ip->inum % IPB;
  dip->type = ip->type;
  dip->major = ip->major;
  dip->minor = ip->minor;
  dip->nlink = ip->nlink;
  dip->size = gather_disksize(ip);   // without gathered blocks, which have none yet
  memmove(dip->addrs, ip->addrs, sizeof(ip->addrs));
  log_write(bp);
  brelse(bp);
}

// Contract: add a reference to ip and return it (ip2 = idup(ip)). The caller already
// holds one, so ip cannot be recycled meanwhile; the new one is given back with iput().
struct inode *
idup(struct inode *ip)
{
  acquire(&itable.lock);
  ip->ref++;
  release(&itable.lock);
  return ip;
}

// Contract: take ip's sleeplock, reading the disk inode the first time (valid == 0).
// Caller holds a reference and no spinlock (it sleeps), and has not locked ip already.
// Panics if the disk inode is free.
void
ilock(struct inode *ip)
{
  if(ip == 0 || ip->ref < 1)
    panic("ilock");
  acquiresleep(&ip->lock);
  if(ip->valid == 0){
    struct buf *bp = bread(ip->dev, IBLOCK(ip->inum, sb));
    struct dinode *dip = (struct dinode *)bp->data + ip->inum % IPB;
    ip->type = dip->type;
    ip->major = dip->major;
    ip->minor = dip->minor;
    ip->nlink = dip->nlink;
    ip->size = dip->size;
    memmove(ip->addrs, dip->addrs, sizeof(ip->addrs));
    brelse(bp);
    ip->mapn = 0;
    ip->valid = 1;
    if(ip->type == 0)
      panic("ilock: inode is free on disk");
  }
}

// Contract: release ip's sleeplock. Caller holds it (and so a reference); panics
// otherwise.
void
iunlock(struct inode *ip)
{
  if(ip == 0 || !holdingsleep(&ip->lock) || ip->ref < 1)
    panic("iunlock");
  releasesleep(&ip->lock);
}

// Contract: give back one of the caller's references to ip; ip may be gone afterwards.
// The last reference to a valid inode with nlink 0 frees it on disk (blocks and inode),
// which is why the caller must be inside a transaction. The caller must not hold
// ip->lock (iput may take it); other inodes' locks it may hold.
void
iput(struct inode *ip)
{
  acquire(&itable.lock);
  if(ip->ref == 1 && ip->gather)
    panic("iput: gathered blocks");   // the last fileclose() of a writer flushes them
  if(ip->ref == 1 && ip->valid && ip->nlink == 0){
    // Ours is the only reference and no directory names ip, so nobody else can reach
    // it: taking its lock cannot block, and itable.lock may be released meanwhile.
    acquiresleep(&ip->lock);
    release(&itable.lock);

    itrunc(ip);
    ip->type = 0;
    iupdate(ip);
    ip->valid = 0;
    releasesleep(&ip->lock);

    acquire(&itable.lock);
  }
  ip->ref--;
  release(&itable.lock);
}

// Contract: iunlock(ip), then iput(ip): give back the lock and one reference.
void
iunlockput(struct inode *ip)
{
  iunlock(ip);
  iput(ip);
}

// ---------------------------------------------------------------- block maps
//
// A file's data block bn is found through ip->addrs (struct dinode, fs.h):
//   bn < NDIRECT                    addrs[bn]
//   next NINDIRECT blocks           entry of the single-indirect block addrs[NDIRECT]
//   next NINDIRECT*NINDIRECT blocks entry of a second-level block, itself an entry of the
//                                   double-indirect block addrs[NDIRECT+1]
// An address 0 means "not allocated".

// Contract: entry i of ip's indirect block ind; when it is 0 and alloc is not ALLOC_NONE,
// allocate a block that way (balloc) and store it there. Returns the entry (0: none, or
// no block could be had). Holds no buffer across balloc, so at most one buffer lock at a
// time. Caller holds ip->lock
// (which is what keeps two allocations from racing for one entry) and, to allocate, is
// in a transaction.
static uint
indirect_entry(struct inode *ip, uint ind, uint i, int alloc)
{
  if(!holdingsleep(&ip->lock))
    panic("indirect_entry: ip->lock");
  struct buf *bp = bread(ip->dev, ind);
  uint addr = ((uint *)bp->data)[i];
  brelse(bp);
  if(addr == 0 && alloc != ALLOC_NONE){
    addr = balloc(ip->dev, alloc);
    if(addr){
      bp = bread(ip->dev, ind);
      ((uint *)bp->data)[i] = addr;
      log_write(bp);
      brelse(bp);
    }
  }
  return addr;
}

// Contract: ip->addrs[i]; when it is 0 and alloc is not ALLOC_NONE, allocate a block for
// it that way (balloc). Caller holds ip->lock, and after allocating is in a transaction
// and writes the inode with iupdate().
static uint
inode_entry(struct inode *ip, int i, int alloc)
{
  if(ip->addrs[i] == 0 && alloc != ALLOC_NONE)
    ip->addrs[i] = balloc(ip->dev, alloc);
  return ip->addrs[i];
}

// Contract: disk address of block bn of ip; unless alloc is ALLOC_NONE, allocate it if
// missing (the leaf that way, any missing indirect block on the way with ALLOC_ZERO).
// Returns 0 if it is missing (ALLOC_NONE), beyond MAXFILE, or no block can be had.
// Caller holds ip->lock; to allocate, it is in a transaction and calls iupdate()
// afterwards (addrs[] may have changed).
static uint
bmap(struct inode *ip, uint64 bn, int alloc)
{
  if(!holdingsleep(&ip->lock))
    panic("bmap: ip->lock");
  uint ind;
  // indirect blocks: zeroed, from the gathers' promised blocks for a gathered leaf
  int meta = alloc == ALLOC_NONE ? ALLOC_NONE : ALLOC_ZERO | (alloc & ALLOC_GATHERED);

  if(bn >= MAXFILE)
    return 0;
  if(bn < NDIRECT)
    return inode_entry(ip, bn, alloc);
  bn -= NDIRECT;
  if(bn < NINDIRECT){
    if((ind = inode_entry(ip, NDIRECT, meta)) == 0)
      return 0;
    return indirect_entry(ip, ind, bn, alloc);
  }
  bn -= NINDIRECT;
  if(bn < NDINDIRECT){
    if((ind = inode_entry(ip, NDIRECT + 1, meta)) == 0)
      return 0;
    if((ind = indirect_entry(ip, ind, bn / NINDIRECT, meta)) == 0)
      return 0;
    return indirect_entry(ip, ind, bn % NINDIRECT, alloc);
  }
  return 0;
}

// A series of frees (itrunc) keeps the bitmap block it is changing locked until the next
// free falls in another bitmap block: one bread and one log_write per bitmap block.
struct freeset {
  uint dev;
  struct buf *bp;   // locked bitmap block, or 0
  int freed;        // blocks marked free in bp, not yet in the free count
};

// Contract: log and release the bitmap block fs holds, if any. Inside a transaction.
static void
freeset_flush(struct freeset *fs)
{
  if(fs->bp){
    log_write(fs->bp);
    brelse(fs->bp);
    fs->bp = 0;
    bgive(fs->freed);
    fs->freed = 0;
  }
}

// Contract: mark block b free in its bitmap block, which fs then holds locked until the
// next flush. Caller is inside a transaction and owns b (it belongs to the inode being
// truncated). Panics if b is already free (a corrupt or doubly freed block).
static void
freeset_add(struct freeset *fs, uint b)
{
  if(fs->bp && fs->bp->blockno != BBLOCK(b, sb))
    freeset_flush(fs);
  if(fs->bp == 0)
    fs->bp = bread(fs->dev, BBLOCK(b, sb));
  uint bi = b % BPB;
  uchar mask = 1 << (bi % 8);
  if((fs->bp->data[bi / 8] & mask) == 0)
    panic("freeset_add: block already free");
  fs->bp->data[bi / 8] &= ~mask;
  fs->freed++;
  log_freed(b);
}

// Contract: free indirect block b and everything below it: depth 1 points at data
// blocks, depth 2 at depth-1 blocks. Lock order: tree blocks top-down, then the bitmap
// block, which is flushed before each tree block is read, so no holder of a bitmap
// block ever waits for a tree block. Tree blocks are read, never logged.
static void
free_tree(struct freeset *fs, uint b, int depth)
{
  freeset_flush(fs);
  struct buf *bp = bread(fs->dev, b);
  uint *a = (uint *)bp->data;
  for(int i = 0; i < NINDIRECT; i++){
    if(a[i] == 0)
      continue;
    if(depth > 1)
      free_tree(fs, a[i], depth - 1);
    else
      freeset_add(fs, a[i]);
  }
  brelse(bp);
  freeset_add(fs, b);
}

// Contract: free all of ip's blocks and set its size to 0, gathered blocks dropped. Only
// bitmap blocks and the inode are written, so this logs at most (bitmap blocks + 1) blocks. Caller holds
// ip->lock and is inside a transaction. Also forgets the read path's address cache.
void
itrunc(struct inode *ip)
{
  if(!holdingsleep(&ip->lock))
    panic("itrunc: ip->lock");
  struct freeset fs = { ip->dev, 0, 0 };

  gather_drop(ip);

  for(int i = 0; i < NDIRECT; i++){
    if(ip->addrs[i]){
      freeset_add(&fs, ip->addrs[i]);
      ip->addrs[i] = 0;
    }
  }
  if(ip->addrs[NDIRECT]){
    free_tree(&fs, ip->addrs[NDIRECT], 1);
    ip->addrs[NDIRECT] = 0;
  }
  if(ip->addrs[NDIRECT + 1]){
    free_tree(&fs, ip->addrs[NDIRECT + 1], 2);
    ip->addrs[NDIRECT + 1] = 0;
  }
  freeset_flush(&fs);
  ip->mapn = 0;
  ip->size = 0;
  iupdate(ip);
}

// Contract: copy ip's metadata into *st. Caller holds ip->lock.
void
stati(struct inode *ip, struct stat *st)
{
  if(!holdingsleep(&ip->lock))
    panic("stati: ip->lock");
  st->dev = ip->dev;
  st->ino = ip->inum;
  st->type = ip->type;
  st->nlink = ip->nlink;
  st->size = ip->size;
}

// ---------------------------------------------------------------- reading
//
// Two ways to read a file, both for speed (see docs/filesystem.md, "The read path"):
//  - a read of whole blocks (>= 2) whose blocks lie consecutively on the disk and are not
//    in the buffer cache goes straight from the disk into bigread.data with one request,
//    and from there to dst: no buffer-cache locking per block;
//  - any other block is read through the cache, and when it misses, the blocks of the
//    file that follow it on the disk come along in the same request (read-ahead), so
//    small sequential reads also cost one request per READAHEAD blocks.
// Both rely on the caller holding ip->lock: the file's blocks cannot change meanwhile,
// and a block of the file that is not in the cache is current on disk, because the log
// keeps every block it has not yet installed pinned in the cache.

// Contract: copy into addrs[] the disk addresses of blocks bn, bn+1, ... of ip that are
// listed in one map block (the inode, or one indirect block): at most max of them.
// Returns how many (0 beyond MAXFILE); a 0 address is a hole. Allocates nothing.
// Caller holds ip->lock.
static int
bmap_run(struct inode *ip, uint64 bn, uint *addrs, int max)
{
  if(!holdingsleep(&ip->lock))
    panic("bmap_run: ip->lock");
  uint ind, first;
  int n;

  if(bn >= MAXFILE)
    return 0;
  max = min(max, MAXFILE - bn);
  if(bn < NDIRECT){
    n = min(max, NDIRECT - bn);
    memmove(addrs, &ip->addrs[bn], n * sizeof(uint));
    return n;
  }
  bn -= NDIRECT;
  if(bn < NINDIRECT){
    ind = ip->addrs[NDIRECT];
    first = bn;
  } else {
    bn -= NINDIRECT;
    if(bn >= NDINDIRECT)
      return 0;
    ind = ip->addrs[NDIRECT + 1];
    if(ind)
      ind = indirect_entry(ip, ind, bn / NINDIRECT, 0);
    first = bn % NINDIRECT;
  }
  n = min(max, NINDIRECT - first);
  if(ind == 0){
    memset(addrs, 0, n * sizeof(uint));
    return n;
  }
  struct buf *bp = bread(ip->dev, ind);
  memmove(addrs, (uint *)bp->data + first, n * sizeof(uint));
  brelse(bp);
  return n;
}

// Contract: extend a run of ip's blocks on the disk: give blocks bn, bn+1, ... of ip
// (none allocated yet, all listed in the map block that lists bn: the inode or one
// existing indirect block) the disk blocks addr, addr+1, ... (balloc_at), at most max of
// them. Returns how many (0 when the first cannot be had so, or bn's indirect block does
// not exist yet: bmap() then allocates it). For allocrun: one map read and one
// log_write per run instead of a bmap() per block. Caller holds ip->lock and is inside a
// transaction; it calls iupdate() afterwards.
static int
bmap_extend(struct inode *ip, uint64 bn, uint addr, int max, int gathered)
{
  uint cur[BIGREAD], ind = 0;
  int n = bmap_run(ip, bn, cur, min(max, BIGREAD));
  int free = 0;
  while(free < n && cur[free] == 0)
    free++;
  if(free == 0)
    return 0;
  uint64 rel = bn - NDIRECT;   // bn's index past the direct blocks (when it has one)
  if(bn >= NDIRECT){
    ind = rel < NINDIRECT ? ip->addrs[NDIRECT] :
          indirect_entry(ip, ip->addrs[NDIRECT + 1], (rel - NINDIRECT) / NINDIRECT, ALLOC_NONE);
    if(ind == 0)
      return 0;
  }
  uint c = balloc_at(ip->dev, addr, free, gathered);
  if(c == 0)
    return 0;
  if(bn < NDIRECT){
    for(uint i = 0; i < c; i++)
      ip->addrs[bn + i] = addr + i;
  } else {
    struct buf *bp = bread(ip->dev, ind);
    uint first = rel < NINDIRECT ? rel : (rel - NINDIRECT) % NINDIRECT;
    for(uint i = 0; i < c; i++)
      ((uint *)bp->data)[first + i] = addr + i;
    log_write(bp);
    brelse(bp);
  }
  return c;
}

// Contract: copy len bytes between kernel address kva and dst, a user address of the
// calling process if user, else a kernel one: to dst when to_dst, else from it. Returns 0,
// or -1 if dst is not (writable) user memory. Called holding a lock that a fault may need
// (a block's buffer, bigread.lock), it never faults: the caller first faulted the user
// pages in with uprefault(), holding no such lock, and copypresent() refuses (-2 here)
// if a page left meanwhile (reclaim, while the caller slept on the disk): then the
// caller lets go of its lock and faults them in again. Why: a user buffer mapped from
// the very block being copied (read() of a file into its own untouched mapping) would
// fault, fill the page cache from that block, and wait for the buffer the copy holds.
static int
copyheld(int user, uint64 dst, char *kva, uint64 len, int to_dst)
{
  if(!user){
    memmove(to_dst ? (char *)dst : kva, to_dst ? kva : (char *)dst, len);
    return 0;
  }
  return copypresent(dst, kva, len, to_dst) == 0 ? 0 : -2;
}

// Contract: how many of the len bytes at user address uva, from uva on, lie on pages the
// calling process may read (faulting them in): up to the first page it may not.
static uint64
ureadable(uint64 uva, uint64 len)
{
  uint64 n = 0;
  while(n < len){
    uint64 chunk = min(len - n, PGSIZE - (uva + n) % PGSIZE);
    if(uprefault(uva + n, chunk, 0) < 0)
      break;
    n += chunk;
  }
  return n;
}

// Contract: block addr of ip read through the buffer cache and len bytes copied between
// byte boff of it and user (or kernel, !user) address uva: into the block when
// into_block, else out of it. Returns the buffer, locked, or 0 if uva is not (writable)
// user memory (nothing copied). See copyheld() for why the user pages are faulted in
// before the buffer is taken.
static struct buf *
bcopy(struct inode *ip, uint addr, uint boff, int user, uint64 uva, uint64 len,
      int into_block)
{
  for(;;){
    if(user && uprefault(uva, len, !into_block) < 0)
      return 0;
    struct buf *bp = bread(ip->dev, addr);
    if(copyheld(user, uva, (char *)bp->data + boff, len, !into_block) == 0)
      return bp;
    brelse(bp);
  }
}

// Contract: try the direct path for up to nblocks whole blocks of ip from block bn into
// dst. Returns the bytes copied (a multiple of BSIZE), 0 if the direct path does not
// apply here (fewer than 2 consecutive uncached blocks), or -1 if copying to dst failed.
// Caller holds ip->lock: that is what makes buncached()'s answer good enough, since only
// a holder of ip->lock changes these blocks, and an unlogged, uncached block is current
// on disk. Takes bigread.lock (after ip->lock) for the landing area.
static int
readdirect(struct inode *ip, int user_dst, uint64 dst, uint64 bn, uint64 nblocks)
{
  if(!holdingsleep(&ip->lock))
    panic("readdirect: ip->lock");
  uint addrs[BIGREAD];

  int n = bmap_run(ip, bn, addrs, min(nblocks, BIGREAD));
  if(n < 2 || addrs[0] == 0)
    return 0;
  int k = 1;
  while(k < n && addrs[k] == addrs[0] + k)
    k++;
  k = buncached(ip->dev, addrs[0], k);
  if(k < 2)
    return 0;

  uint64 len = (uint64)k * BSIZE;
  for(;;){
    if(user_dst && uprefault(dst, len, 1) < 0)
      return -1;
    acquiresleep(&bigread.lock);
    virtio_disk_read(bigread.data, k, addrs[0]);
    int r = copyheld(user_dst, dst, (char *)bigread.data, len, 1);
    releasesleep(&bigread.lock);
    if(r == 0)
      return len;
  }
}

// Contract: before block bn (disk address addr) is read through the cache: if it is
// missing, fetch it together with the following blocks of the file that lie right after
// it on the disk, up to READAHEAD blocks and not past the end of the file, in one
// request. Remembers the addresses in ip->mapaddr. Caller holds ip->lock and bn is
// below the file's end.
static void
readahead(struct inode *ip, uint64 bn, uint addr)
{
  if(!holdingsleep(&ip->lock))
    panic("readahead: ip->lock");
  uint addrs[READAHEAD];

  if(bcached(ip->dev, addr))
    return;
  uint64 left = (ip->size + BSIZE - 1) / BSIZE - bn;   // blocks from bn to the end
  int n = bmap_run(ip, bn, addrs, min(left, min(READAHEAD, MAPCACHE)));
  memmove(ip->mapaddr, addrs, n * sizeof(uint));        // remember them for readi
  ip->mapbn = bn;
  ip->mapn = n;
  int k = 1;
  while(k < n && addrs[k] == addr + k)
    k++;
  breadahead(ip->dev, addr, k);
}

// Contract: read n bytes of ip starting at byte off into dst (a user virtual address of
// the current process if user_dst, else a kernel address). Returns the bytes read
// (fewer at the end of the file, 0 at or past it), or -1 if copying to dst failed.
// Holes read as zeros, gathered blocks from their gather. Caller holds ip->lock; no
// transaction is needed (nothing is written). The count is returned as an int, so callers keep n below 2^31 (fileread's n
// is a non-negative int).
int
readi(struct inode *ip, int user_dst, uint64 dst, uint64 off, uint n)
{
  if(!holdingsleep(&ip->lock))
    panic("readi: ip->lock");
  uint64 tot, m;

  if(off > ip->size || off + n < off)
    return 0;
  if(off + n > ip->size)
    n = ip->size - off;

  for(tot = 0; tot < n; tot += m, off += m, dst += m){
    uint64 bn = off / BSIZE;
    char *g = gathered(ip, bn);
    if(g){
      m = min(n - tot, BSIZE - off % BSIZE);
      if(either_copyout(user_dst, dst, g + off % BSIZE, m) == -1)
        return -1;
      continue;
    }
    if(off % BSIZE == 0 && n - tot >= 2 * BSIZE){
      int r = readdirect(ip, user_dst, dst, bn, (n - tot) / BSIZE);
      if(r < 0)
        return -1;
      if((m = r) > 0)
        continue;
    }
    m = min(n - tot, BSIZE - off % BSIZE);
    uint addr = 0;
    if(bn >= ip->mapbn && bn < ip->mapbn + ip->mapn)
      addr = ip->mapaddr[bn - ip->mapbn];
    if(addr == 0)
      addr = bmap(ip, bn, ALLOC_NONE);
    if(addr == 0){
      if(either_copyout(user_dst, dst, zeroblock, m) == -1)
        return -1;
      continue;
    }
    readahead(ip, bn, addr);
    struct buf *bp = bcopy(ip, addr, off % BSIZE, user_dst, dst, m, 0);
    if(bp == 0)
      return -1;
    brelse(bp);
  }
  return tot;
}

// Contract: fill the n pages pages[0..n) with blocks bn, bn+1, ... of ip, for the page
// cache (pagecache.c): the file's bytes (a gathered block's from its gather), zeroes in
// holes and past the end of the file.
// A run of blocks that lie consecutively on the disk and that the buffer cache does not
// hold comes in one disk request (up to VIRTIO_MAXBUFS pages) straight into the pages, as
// readdirect() reads, but with no landing area and no copy; a block the buffer cache
// holds is copied from there, since it may be newer than the disk. Caller holds ip->lock,
// which makes buncached()'s answer good enough (see readdirect). Panics unless it holds
// it: the pages would be filled from blocks that may change meanwhile.
void
readpages(struct inode *ip, uint64 bn, char **pages, int n)
{
  uint addrs[VIRTIO_MAXBUFS];
  uint64 end = (ip->size + BSIZE - 1) / BSIZE;   // blocks that hold file bytes

  if(!holdingsleep(&ip->lock))
    panic("readpages: ip->lock");
  for(int i = 0; i < n; ){
    uint64 b = bn + i;
    char *g = gathered(ip, b);
    if(g){                                       // no disk block yet
      memmove(pages[i], g, BSIZE);
      i++;
      continue;
    }
    int m = 0;
    if(b < end)
      m = bmap_run(ip, b, addrs, min(n - i, min(end - b, VIRTIO_MAXBUFS)));
    if(m == 0 || addrs[0] == 0){                 // past the end, or a hole
      memset(pages[i], 0, BSIZE);
      i++;
      continue;
    }
    int k = 1;
    while(k < m && addrs[k] == addrs[0] + k)
      k++;
    k = buncached(ip->dev, addrs[0], k);
    if(k == 0){                                  // the cache's copy is the current one
      struct buf *bp = bread(ip->dev, addrs[0]);
      memmove(pages[i], bp->data, BSIZE);
      brelse(bp);
      k = 1;
    } else {
      virtio_disk_pages(FSDISK, addrs[0], (void **)(pages + i), k, 0);
    }
    // The last block's bytes past the end of the file are not the file's: zero them.
    if(b + k == end && ip->size % BSIZE)
      memset(pages[i + k - 1] + ip->size % BSIZE, 0, BSIZE - ip->size % BSIZE);
    i += k;
  }
}

// Contract: allocate blocks bn, bn+1, ... of ip (none allocated yet: past the end of the
// file, or gathered) as one run of blocks consecutive on the disk: at most min(nblocks,
// BIGREAD) of them, with ALLOC_DIRECT (| ALLOC_GATHERED: how), so not zeroed and never a
// block a change not yet committed freed. Sets *first to the run's first disk block and
// returns its length; 0 if no block could be had so. Logs the bitmap and map blocks it
// changes: one bitmap block for the run, plus what bmap() logs for the first block (a
// missing indirect block or two). Caller holds ip->lock and is inside a transaction; it
// calls iupdate() afterwards.
int
allocrun(struct inode *ip, uint64 bn, uint64 nblocks, int how, uint *first)
{
  if(!holdingsleep(&ip->lock))
    panic("allocrun: ip->lock");
  // The first block the usual way (bmap also makes a missing indirect block); the rest
  // extend its run on the disk while the blocks after it are free.
  *first = bmap(ip, bn, how);
  if(*first == 0)
    return 0;
  int k = 1, c, max = min(nblocks, BIGREAD);
  while(k < max &&
        (c = bmap_extend(ip, bn + k, *first + k, max - k, how & ALLOC_GATHERED)) > 0)
    k += c;
  return k;
}

// Contract: write the n blocks at data to blocks first, first+1, ... of ip's device with
// one request, blocks newly allocated to ip (allocrun). A cached copy of any of them, left
// from the block's former life, gets the same bytes. Caller holds ip->lock.
void
writerun(struct inode *ip, char *data, int n, uint first)
{
  if(!holdingsleep(&ip->lock))
    panic("writerun: ip->lock");
  virtio_disk_write(data, n, first);
  for(int i = 0; i < n; i++){
    if(bcached(ip->dev, first + i)){
      struct buf *bp = bread(ip->dev, first + i);
      memmove(bp->data, data + i * BSIZE, BSIZE);
      brelse(bp);
    }
  }
}

// Contract: the direct path of writei for whole blocks appended at the end of ip (block
// bn on, off = bn*BSIZE >= ip->size): allocate up to nblocks of them (at most BIGREAD)
// with ALLOC_DIRECT, as long as they are consecutive on the disk, copy the bytes from src
// into the landing area and write the run home with one request, then bring a cached
// copy of any of them (from the block's former life) and the page cache up to date.
// Returns the bytes written (a multiple of BSIZE), 0 if no block could be had this way,
// or -1 if copying from src failed (the blocks stay allocated past the file's end, as
// when writei's copy fails).
//
// Why this is crash-safe without the log: a block past the end of the file belongs to
// no committed state of it, and ALLOC_DIRECT never returns a block that a change not
// yet committed freed, so no committed file owns it either. The data is on the disk
// before writei returns, hence before the commit that makes the block part of the file
// (the bitmap and the map entries go through the log as usual). Caller holds ip->lock
// and is inside a transaction; takes bigread.lock (after ip->lock) for the landing area.
static int
writedirect(struct inode *ip, int user_src, uint64 src, uint64 bn, uint64 nblocks)
{
  if(!holdingsleep(&ip->lock))
    panic("writedirect: ip->lock");
  uint first;
  int k = allocrun(ip, bn, nblocks, ALLOC_DIRECT, &first);
  if(k == 0)
    return 0;

  uint64 len = (uint64)k * BSIZE;
  for(;;){
    if(user_src && uprefault(src, len, 0) < 0)
      return -1;
    acquiresleep(&bigread.lock);
    if(copyheld(user_src, src, (char *)bigread.data, len, 0) == 0)
      break;
    releasesleep(&bigread.lock);
  }
  writerun(ip, (char *)bigread.data, k, first);
  for(int i = 0; i < k; i++)
    pagecache_write(ip, bn + i, 0, (char *)bigread.data + i * BSIZE, BSIZE);
  releasesleep(&bigread.lock);
  return len;
}

// Contract: write n bytes from src (user virtual address if user_src) into ip at byte
// off, growing the file if needed; off may not lie beyond the end. Returns the bytes
// written, which is less than n if the disk filled up or copying from src failed (the
// bytes before the first page of src the process may not read are written, as xv6's
// writei copies them before it meets the bad page: MIT's usertests partial_write), or -1
// for a bad offset or a write past MAXFILE. A cached page of ip (pagecache.c) gets the
// same bytes, so mappings see write()s; bytes of gathered blocks go to their gather. Caller
// holds ip->lock and is inside a transaction, and keeps n small enough for the log (see
// filewrite); it grows a file only if the file has no gathered blocks (filewrite flushes
// them first). Writes the inode (iupdate) before returning.
int
writei(struct inode *ip, int user_src, uint64 src, uint64 off, uint n)
{
  if(!holdingsleep(&ip->lock))
    panic("writei: ip->lock");
  uint64 tot, m;

  if(off > ip->size || off + n < off)
    return -1;
  if(off + n > MAXFILE * BSIZE)
    return -1;
  if(ip->gather && off + n > ip->size)
    panic("writei: past a gathered tail");   // filewrite flushes before such a write

  for(tot = 0; tot < n; tot += m, off += m, src += m){
    char *g = gathered(ip, off / BSIZE);
    if(g){   // a mapped page written back (mmap.c) over a block still gathered
      m = min(n - tot, BSIZE - off % BSIZE);
      if(either_copyin(g + off % BSIZE, user_src, src, m) == -1)
        break;
      pagecache_write(ip, off / BSIZE, off % BSIZE, g + off % BSIZE, m);
      continue;
    }
    // A run of whole blocks appended at the end goes straight to the disk when it can.
    // Fewer blocks are cheaper through the log, whose deferred commits gather them.
    if(off % BSIZE == 0 && off >= ip->size && n - tot >= DIRECTMIN * BSIZE){
      int r = writedirect(ip, user_src, src, off / BSIZE, (n - tot) / BSIZE);
      if(r < 0)
        break;
      if(r > 0){
        m = r;
        continue;
      }
    }
    uint addr = bmap(ip, off / BSIZE, ALLOC_ZERO);
    if(addr == 0)
      break;
    m = min(n - tot, BSIZE - off % BSIZE);
    struct buf *bp = bcopy(ip, addr, off % BSIZE, user_src, src, m, 1);
    if(bp == 0 && user_src && (m = ureadable(src, m)) > 0)
      bp = bcopy(ip, addr, off % BSIZE, user_src, src, m, 1);   // the bytes before it
    if(bp == 0)
      break;
    log_write(bp);
    pagecache_write(ip, off / BSIZE, off % BSIZE, (char *)bp->data + off % BSIZE, m);
    brelse(bp);
  }

  if(off > ip->size)
    ip->size = off;
  // Written even when the size did not change: bmap may have filled in ip->addrs.
  iupdate(ip);
  return tot;
}

// Contract: filewrite's large appends: write up to n bytes (whole blocks, at most BIGREAD
// of them) from src at off == ip->size, a block boundary, by writedirect alone, so that
// the transaction logs only the metadata (a few bitmap and indirect blocks and the inode,
// well under MAXOPBLOCKS) however many blocks it writes. Returns the bytes written; 0 when the file is
// not so (another writer got there first), n is under DIRECTMIN blocks, or no block could
// be had this way: the caller writes through writei instead; -1 if copying from src
// failed. Caller holds ip->lock and is inside a transaction.
int
writeappend(struct inode *ip, int user_src, uint64 src, uint64 off, uint n)
{
  if(!holdingsleep(&ip->lock))
    panic("writeappend: ip->lock");
  if(off != ip->size || off % BSIZE != 0 || n % BSIZE != 0 || n < DIRECTMIN * BSIZE ||
     off + n > MAXFILE * BSIZE)
    return 0;
  int r = writedirect(ip, user_src, src, off / BSIZE, n / BSIZE);
  if(r > 0){
    ip->size = off + r;
    iupdate(ip);
  }
  return r;
}

// ---------------------------------------------------------------- directories

// Contract: strcmp for directory names: compares at most DIRSIZ characters, since a
// name that fills its dirent has no terminating NUL.
int
namecmp(const char *s, const char *t)
{
  return strncmp(s, t, DIRSIZ);
}

// Contract: look for name in directory dp. Returns its inode, unlocked, with a new
// reference for the caller, and sets *poff to the entry's byte offset if poff != 0.
// Returns 0 if name is absent, and also if it is present but the inode table is full
// (iget fails). Caller holds dp->lock; panics if dp is not a directory.
struct inode *
dirlookup(struct inode *dp, char *name, uint *poff)
{
  if(!holdingsleep(&dp->lock))
    panic("dirlookup: dp->lock");
  struct dirent de;

  if(dp->type != T_DIR)
    panic("dirlookup: not a directory");
  for(uint64 off = 0; off < dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      panic("dirlookup: read");
    if(de.inum == 0)
      continue;
    if(namecmp(name, de.name) == 0){
      if(poff)
        *poff = off;
      return iget(dp->dev, de.inum);
    }
  }
  return 0;
}

// Contract: add the entry (name, inum) to directory dp, reusing a free slot if there is
// one. Returns 0, or -1 if dirlookup() finds name already there or the directory cannot
// grow. Does not touch the inode inum: the caller adjusts its nlink. Caller holds
// dp->lock and is inside a transaction.
int
dirlink(struct inode *dp, char *name, uint inum)
{
  if(!holdingsleep(&dp->lock))
    panic("dirlink: dp->lock");
  struct dirent de;
  struct inode *ip;
  uint64 off;

  if((ip = dirlookup(dp, name, 0)) != 0){
    iput(ip);
    return -1;
  }
  for(off = 0; off < dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      panic("dirlink: read");
    if(de.inum == 0)
      break;
  }
  memset(&de, 0, sizeof(de));
  strncpy(de.name, name, DIRSIZ);
  de.inum = inum;
  if(writei(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
    return -1;
  return 0;
}

// ---------------------------------------------------------------- path names

// Contract: copy the first element of path into name (truncated to DIRSIZ, and then not
// NUL-terminated) and return the rest, with leading slashes removed; return 0 if path
// has no element. name has room for DIRSIZ bytes.
//   skipelem("a/bb/c", name) = "bb/c", name "a";  skipelem("///", name) = 0
static char *
skipelem(char *path, char *name)
{
  while(*path == '/')
    path++;
  if(*path == 0)
    return 0;
  char *s = path;
  while(*path != '/' && *path != 0)
    path++;
  int len = path - s;
  if(len >= DIRSIZ)
    memmove(name, s, DIRSIZ);
  else {
    memmove(name, s, len);
    name[len] = 0;
  }
  while(*path == '/')
    path++;
  return path;
}

// Contract: walk path from the root (leading '/') or the current directory. Returns the
// inode of the path (or, if parent is set, of its parent directory, with the last
// element copied to name), unlocked, with one reference for the caller; 0 if it does not
// exist, an element before the last is not a live directory, or the inode table is full.
// Holds one inode lock at a time, so it cannot deadlock with another walk. Caller is
// inside a transaction (the iput()s) and holds no inode lock.
static struct inode *
namex(char *path, int parent, char *name)
{
  struct inode *ip, *next;

  if(*path == '/')
    ip = iget(ROOTDEV, ROOTINO);
  else
    ip = idup(myproc()->cwd);
  if(ip == 0)
    return 0;

  while((path = skipelem(path, name)) != 0){
    ilock(ip);
    // A directory with no names left (unlinked while it was some process's cwd) is
    // dead: nothing may be looked up or created in it, and its ".." may name an inode
    // that has been freed since (ilock would panic on it).
    if(ip->type != T_DIR || ip->nlink < 1){
      iunlockput(ip);
      return 0;
    }
    if(parent && *path == 0){
      iunlock(ip);   // stop one level early
      return ip;
    }
    next = dirlookup(ip, name, 0);
    iunlockput(ip);
    if(next == 0)
      return 0;
    ip = next;
  }
  if(parent){
    iput(ip);
    return 0;
  }
  return ip;
}

// Contract: the inode named by path, unlocked and referenced, or 0. As namex().
struct inode *
namei(char *path)
{
  char name[DIRSIZ];
  return namex(path, 0, name);
}

// Contract: the directory holding path's last element, unlocked and referenced, with
// that element copied into name (DIRSIZ bytes); 0 if there is none (path "/" included).
// As namex().
struct inode *
nameiparent(char *path, char *name)
{
  return namex(path, 1, name);
}
