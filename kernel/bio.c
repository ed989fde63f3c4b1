// The buffer cache: NBUFCACHE in-memory copies of disk blocks.
//
// It gives two guarantees: a block has at most one copy in memory, so every user sees
// every change; and only one process at a time uses a copy (the buffer's sleeplock).
// A buffer with refcnt 0 is unlocked and may be recycled for another block, least
// recently released first.
//
// Interface: bread() returns a locked buffer holding the block; change it, then
// bwrite() (or log_write()) it; brelse() when done. breadahead() fills the cache with a
// run of consecutive blocks in one disk request (the fast read path of readi).
//
// Contract:
//   - bcache.lock (a spinlock) protects the LRU list and each buffer's dev, blockno and
//     refcnt. lookup() and recycle() run in one hold of it, so two copies of one block
//     can never appear.
//   - refcnt counts the holders of a pointer to the buffer: each bread()/bzeroed() until
//     its brelse(), plus one per log pin (bpin/bunpin). While refcnt > 0 the buffer keeps
//     its (dev, blockno); only a buffer with refcnt 0 is recycled.
//   - b->lock (a sleeplock) protects valid, disk and data: whoever got b from bread()
//     or bzeroed() (or breadahead(), for its own run) holds it and must call brelse()
//     exactly once, from the same process. brelse() unlocks before it drops refcnt, so a buffer with refcnt 0
//     is never locked; that is why recycle() may clear valid under bcache.lock alone.
//   - A pinned buffer may still be locked and used by others; the pin only keeps it in
//     the cache, so the log's copy of a block is the cached one until it is installed.
//   - bget() panics when every buffer is referenced. NBUFCACHE (buf.h) is sized for the
//     log's pins plus one read-ahead run plus a margin; nothing else bounds it.

#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/fs.h"
#include "kernel/buf.h"
#include "kernel/virtio.h"

struct {
  struct spinlock lock;     // protects head's list and every buffer's dev, blockno, refcnt
  struct buf buf[NBUFCACHE];
  struct buf head;          // head.next: most recently released; head.prev: least
} bcache;

// Contract: link every buffer into the LRU list, all with refcnt 0. Hart 0, once,
// before any bread().
void
binit(void)
{
  initlock(&bcache.lock, "bcache");
  bcache.head.prev = &bcache.head;
  bcache.head.next = &bcache.head;
  for(struct buf *b = bcache.buf; b < bcache.buf + NBUFCACHE; b++){
    initsleeplock(&b->lock, "buffer");
    b->next = bcache.head.next;
    b->prev = &bcache.head;
    bcache.head.next->prev = b;
    bcache.head.next = b;
  }
}

// Contract: the cached buffer of (dev, blockno), or 0. Caller holds bcache.lock, and
// must take its reference before releasing it, or the answer may be recycled.
static struct buf *
lookup(uint dev, uint blockno)
{
  if(!holding(&bcache.lock))
    panic("bio lookup: bcache.lock");
  for(struct buf *b = bcache.head.next; b != &bcache.head; b = b->next)
    if(b->dev == dev && b->blockno == blockno)
      return b;
  return 0;
}

// Contract: give the least recently released buffer with refcnt 0 to (dev, blockno),
// invalid, with refcnt 1 (the caller's reference); 0 if every buffer is referenced.
// Caller holds bcache.lock and has just seen lookup() miss in the same hold.
static struct buf *
recycle(uint dev, uint blockno)
{
  if(!holding(&bcache.lock))
    panic("recycle: bcache.lock");
  for(struct buf *b = bcache.head.prev; b != &bcache.head; b = b->prev){
    if(b->refcnt == 0){
      b->dev = dev;
      b->blockno = blockno;
      b->valid = 0;
      b->refcnt = 1;
      return b;
    }
  }
  return 0;
}

// Contract: the buffer for (dev, blockno), with one new reference and its sleeplock
// held by the caller; invalid if it was just recycled. May sleep on the sleeplock, so
// the caller holds no spinlock. Panics if no buffer is free.
static struct buf *
bget(uint dev, uint blockno)
{
  acquire(&bcache.lock);
  struct buf *b = lookup(dev, blockno);
  if(b)
    b->refcnt++;
  else if((b = recycle(dev, blockno)) == 0)
    panic("bget: no buffers");
  release(&bcache.lock);
  acquiresleep(&b->lock);
  return b;
}

// Contract: a locked, referenced buffer holding block blockno of dev, read from the
// disk only if it was not cached. The caller owns the lock and the reference and gives
// both back with brelse(). Sleeps (process context only).
struct buf *
bread(uint dev, uint blockno)
{
  struct buf *b = bget(dev, blockno);
  if(!b->valid){
    virtio_disk_rw(b, 0);
    b->valid = 1;
  }
  return b;
}

// Contract: like bread(), but the contents are set to zeros instead of read (balloc's
// freshly allocated block). Only the cached copy is zeroed: the caller must log_write()
// it, or the disk keeps the old contents.
struct buf *
bzeroed(uint dev, uint blockno)
{
  struct buf *b = bget(dev, blockno);
  memset(b->data, 0, BSIZE);
  b->valid = 1;
  return b;
}

// Contract: write b's data to its home block now, bypassing the log (the log itself
// and recovery use it). Caller holds b's sleeplock; panics otherwise.
void
bwrite(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("bwrite");
  virtio_disk_rw(b, 1);
}

// Contract: give back the lock and the reference that bread()/bzeroed()/bget() gave the
// caller. Panics unless the caller holds b's sleeplock. When the last reference goes,
// b moves to the front of the LRU list (recycled last).
void
brelse(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("brelse");
  releasesleep(&b->lock);

  acquire(&bcache.lock);
  b->refcnt--;
  if(b->refcnt == 0){
    b->next->prev = b->prev;
    b->prev->next = b->next;
    b->next = bcache.head.next;
    b->prev = &bcache.head;
    bcache.head.next->prev = b;
    bcache.head.next = b;
  }
  release(&bcache.lock);
}

// Contract: add the log's reference to b, so it is not recycled before commit installs
// it. The caller (log_write) holds b's sleeplock, so b is referenced already.
void
bpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt++;
  release(&bcache.lock);
}

// Contract: drop the reference bpin() added. Called once per pin, after the block is
// installed at home (install_committed).
void
bunpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt--;
  release(&bcache.lock);
}

// Contract: 1 if (dev, blockno) is cached now. Takes no reference, so it is only a hint:
// the buffer may be recycled, or the block read in, right after.
int
bcached(uint dev, uint blockno)
{
  acquire(&bcache.lock);
  int found = lookup(dev, blockno) != 0;
  release(&bcache.lock);
  return found;
}

// Contract: how many of blocks blockno, blockno+1, ... (at most n) are not cached,
// counting up to the first cached one. A hint, like bcached(); readdirect() relies on
// it only for blocks of a file whose inode lock it holds (see fs.c).
int
buncached(uint dev, uint blockno, int n)
{
  int k = 0;
  acquire(&bcache.lock);
  while(k < n && lookup(dev, blockno + k) == 0)
    k++;
  release(&bcache.lock);
  return k;
}

// Contract: read blocks blockno, blockno+1, ... (at most n, at most READAHEAD) into the
// cache with one disk request, stopping before the first block already cached or when
// no buffer is free. Returns how many were read; they are left cached, unlocked and
// unreferenced. The run's buffers stay locked until the request is done, so a bread()
// of one of them meanwhile waits and then finds it valid. Only readi's readahead()
// calls it, holding the file's inode lock. Each concurrent reader may hold a whole run.
int
breadahead(uint dev, uint blockno, int n)
{
  struct buf *run[READAHEAD];
  int k = 0;

  if(n > READAHEAD)
    n = READAHEAD;
  acquire(&bcache.lock);
  for(; k < n; k++){
    if(lookup(dev, blockno + k))
      break;
    struct buf *b = recycle(dev, blockno + k);
    if(b == 0)
      break;
    // refcnt was 0, so nobody holds b's sleeplock: this cannot sleep.
    acquiresleep(&b->lock);
    run[k] = b;
  }
  release(&bcache.lock);

  if(k == 0)
    return 0;
  virtio_disk_rwv(run, k, blockno, 0);
  for(int i = 0; i < k; i++){
    run[i]->valid = 1;
    brelse(run[i]);
  }
  return k;
}
