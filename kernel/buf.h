// A block-cache buffer. (Owned by the storage work.)
struct buf {
  int valid;   // has data been read from disk?
  int disk;    // does the disk driver own it (request in flight)?
  uint dev;
  uint blockno;
  struct sleeplock lock; // held by the one user of the buffer's data
  uint refcnt;           // protected by the buffer cache's lock
  struct buf *prev;      // LRU list
  struct buf *next;
  uchar data[BSIZE];
};
