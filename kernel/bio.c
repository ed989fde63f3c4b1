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

// Link every buffer into the LRU list. Called once at boot.
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

// The cached copy of (dev, blockno), or 0. Caller holds bcache.lock.
static struct buf *
lookup(uint dev, uint blockno)
{
  for(struct buf *b = bcache.head.next; b != &bcache.head; b = b->next)
    if(b->dev == dev && b->blockno == blockno)
      return b;
  return 0;
}

// Take the least recently used unreferenced buffer for (dev, blockno), marked invalid,
// with refcnt 1; 0 if every buffer is in use. Caller holds bcache.lock.
static struct buf *
recycle(uint dev, uint blockno)
{
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

// Return the locked buffer for (dev, blockno), cached or newly recycled (then invalid).
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

// Return a locked buffer holding the contents of block blockno of dev.
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

// Return a locked buffer for block blockno whose contents are zeros, without reading the
// disk (for a block just allocated). The caller writes it out (through the log).
struct buf *
bzeroed(uint dev, uint blockno)
{
  struct buf *b = bget(dev, blockno);
  memset(b->data, 0, BSIZE);
  b->valid = 1;
  return b;
}

// Write b's contents to its disk block. Caller holds b's lock.
void
bwrite(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("bwrite");
  virtio_disk_rw(b, 1);
}

// Release a locked buffer; it becomes the most recently used.
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

// Keep b in the cache (the log holds it until its block is installed).
void
bpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt++;
  release(&bcache.lock);
}

// Drop the log's hold on b.
void
bunpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt--;
  release(&bcache.lock);
}

// Is (dev, blockno) in the cache? Only a hint: it may be recycled right after.
int
bcached(uint dev, uint blockno)
{
  acquire(&bcache.lock);
  int found = lookup(dev, blockno) != 0;
  release(&bcache.lock);
  return found;
}

// How many of the blocks blockno, blockno+1, ... (at most n) are not in the cache,
// counting up to the first cached one. Only a hint, like bcached().
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

// Read blocks blockno, blockno+1, ... (at most n, at most READAHEAD) into the cache with
// one disk request, stopping before the first block already cached or when no buffer is
// free. Returns how many blocks were read; they are left in the cache, unlocked.
// Only a file's reader calls this, holding its inode lock; see readi().
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
