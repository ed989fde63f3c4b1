// Open files, in-memory inodes, device switch (docs/filesystem.md).
struct file {
  enum { FD_NONE, FD_PIPE, FD_INODE, FD_DEVICE } type;
  int ref;           // reference count; protected by the file table's lock
  char readable;
  char writable;
  struct pipe *pipe; // FD_PIPE
  struct inode *ip;  // FD_INODE and FD_DEVICE
  uint64 off;        // FD_INODE; read and advanced only under ip->lock
  short major;       // FD_DEVICE
};

#define major(dev)  ((dev) >> 16 & 0xFFFF)
#define minor(dev)  ((dev) & 0xFFFF)
#define	mkdev(m,n)  ((uint)((m)<<16| (n)))

#define MAPCACHE 32   // block addresses an in-memory inode remembers for reading

// In-memory copy of an inode.
struct inode {
  uint dev;           // device number
  uint inum;          // inode number
  int ref;            // reference count; protected by the inode table's lock
  struct sleeplock lock; // protects everything below here
  int valid;          // has the inode been read from disk?

  short type;         // copy of the disk inode
  short major;
  short minor;
  short nlink;
  uint64 size;
  uint addrs[NDIRECT+2];

  // Read-path cache of block addresses (fs.c): blocks mapbn .. mapbn+mapn-1 of the file
  // are at disk blocks mapaddr[0 .. mapn-1]; 0 means "unknown". Only ever refers to
  // blocks the file still has: itrunc and ilock's first read clear it (mapn = 0).
  uint64 mapbn;
  int mapn;
  uint mapaddr[MAPCACHE];
};

// Maps a device's major number to its read and write functions.
// user_addr: 1 if addr is a user virtual address, 0 if a kernel address.
struct devsw {
  int (*read)(int user_addr, uint64 addr, int n);
  int (*write)(int user_addr, uint64 addr, int n);
};

extern struct devsw devsw[];

#define CONSOLE 1

// log.c, beyond defs.h: blocks freed by changes not yet committed (writei's direct path
// must not reuse them before the commit).
void log_freed(uint b);
int log_freedsince(uint b);
// log.c, beyond defs.h: start an operation that may log up to LOGSIZE blocks and runs
// alone; end it with end_op(). Used by filewrite for large writes.
void begin_bigop(void);
