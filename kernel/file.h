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

  struct gather *gather;  // the file's last blocks, appended but not yet on disk (gather.c)
};

// Maps a device's major number to its read and write functions.
// user_addr: 1 if addr is a user virtual address, 0 if a kernel address.
struct devsw {
  int (*read)(int user_addr, uint64 addr, int n);
  int (*write)(int user_addr, uint64 addr, int n);
};

extern struct devsw devsw[];

#define CONSOLE 1

// fs.c, beyond defs.h: the direct paths and delayed allocation (gather.c).
#define BIGREAD   64   // blocks per direct read or write, and per gather (256 KiB)
#define DIRECTMIN 16   // the fewest whole blocks an append writes straight to the disk:
                       // fewer are gathered (gather.c), or logged
#define ALLOC_DIRECT   2   // allocrun's how: a data block written straight to the disk: not
                           // zeroed, and never a block freed since the last commit
#define ALLOC_GATHERED 4   // with ALLOC_DIRECT: for a gathered block, so it may take a
                           // block promised to gathers (breserve)
int  allocrun(struct inode *ip, uint64 bn, uint64 nblocks, int how, uint *first);
void writerun(struct inode *ip, char *data, int n, uint first);
int  breserve(int n);
void bunreserve(int n);

// gather.c: appends of a few whole blocks, gathered in memory.
void   gatherinit(void);
int    gather_append(struct inode *ip, int user_src, uint64 src, uint64 off, uint n);
char  *gathered(struct inode *ip, uint64 bn);
uint64 gather_disksize(struct inode *ip);
void   gather_flush(struct inode *ip);
void   gather_drop(struct inode *ip);

// log.c, beyond defs.h: blocks freed by changes not yet committed (writei's direct path
// must not reuse them before the commit).
void log_freed(uint b);
int log_freedsince(uint b);
// log.c, beyond defs.h: start an operation that may log up to LOGSIZE blocks and runs
// alone; end it with end_op(). Used by filewrite for large writes.
void begin_bigop(void);
