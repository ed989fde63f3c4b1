// A block-cache buffer (kernel/bio.c).
struct buf {
  int valid;   // does data hold the block's contents?
  int disk;    // 1 while a disk request for this buffer is in flight
  uint dev;    // dev, blockno, refcnt, prev, next: protected by the buffer cache's lock
  uint blockno;
  struct sleeplock lock; // held by the one user of the buffer's data
  uint refcnt;           // users holding a pointer (plus one per log pin)
  struct buf *prev;      // LRU list: most recently released first
  struct buf *next;
  uchar data[BSIZE];
};

// Largest read-ahead run, in blocks (one disk request).
#define READAHEAD 32

// Buffers in the cache: param.h's NBUF, but at least enough that the log's pinned blocks
// (up to LOGSIZE) and a read-ahead run leave room for everybody else.
#define NBUFMIN (LOGSIZE + READAHEAD + 32)
#define NBUFCACHE (NBUF > NBUFMIN ? NBUF : NBUFMIN)

// bio.c, beyond defs.h (used inside the storage stack only).
int             bcached(uint dev, uint blockno);
int             breadahead(uint dev, uint blockno, int n);
int             buncached(uint dev, uint blockno, int n);
struct buf*     bzeroed(uint dev, uint blockno);
