// On-disk file-system format, shared by the kernel and mkfs (docs/filesystem.md).

#define BSIZE 4096   // block size in bytes
#define ROOTINO 1    // root i-number
#define FSMAGIC 0x4e58f5f5  // "NX" file system

// Disk layout:
// [ boot block | super block | log | inode blocks | free bit map | data blocks ]
// mkfs computes the super block, which describes where each region starts.
struct superblock {
  uint magic;        // FSMAGIC
  uint size;         // size of the file-system image (blocks)
  uint nblocks;      // number of data blocks
  uint ninodes;      // number of inodes
  uint nlog;         // number of log blocks
  uint logstart;     // block number of the first log block
  uint inodestart;   // block number of the first inode block
  uint bmapstart;    // block number of the first free-map block
};

#define NDIRECT 10
#define NINDIRECT (BSIZE / sizeof(uint))
#define NDINDIRECT (NINDIRECT * NINDIRECT)
// addrs[NDIRECT] is the single-indirect block, addrs[NDIRECT+1] the double-indirect block.
// The map could address NDIRECT + NINDIRECT + NDINDIRECT blocks (4 GiB), more than any image
// holds. MAXFILE is the file system's own cap, which bmap() and writei() enforce: 160 MiB,
// room for the LLM image's model (one file of 100-150 MB) and small enough that the default
// image (the Makefile's FS_MB) holds a file of MAXFILE blocks beside everything else, so a
// program that writes MAXFILE blocks (MIT's usertests) finds the disk big enough.
#define MAXFILE ((uint64)40960)  // in blocks

// Limits mkfs enforces: the image is at most 2 GiB (so one file-system operation never touches
// more than 16 bitmap blocks, see docs/filesystem.md) and i-numbers fit a dirent's ushort.
#define FSMAXBLOCKS (2048 * 256)  // 2 GiB of 4 KiB blocks
#define MAXINODES   65535
#define MAXNLINK    32767        // nlink is a short: link() and mkdir() refuse to pass this

// On-disk inode.
struct dinode {
  short type;                // file type (T_DIR, T_FILE, T_DEVICE; 0 = free)
  short major;               // major device number (T_DEVICE only)
  short minor;               // minor device number (T_DEVICE only)
  short nlink;               // number of directory entries that refer to this inode
  uint64 size;               // size of the file in bytes
  uint addrs[NDIRECT+2];     // data block addresses
};

// Inodes per block.
#define IPB           (BSIZE / sizeof(struct dinode))
// Block holding inode i.
#define IBLOCK(i, sb)     ((i) / IPB + sb.inodestart)
// Bitmap bits per block.
#define BPB           (BSIZE*8)
// Bitmap block holding the bit for block b.
#define BBLOCK(b, sb) ((b)/BPB + sb.bmapstart)

// A directory is a file holding a sequence of dirent structures.
#define DIRSIZ 14
struct dirent {
  ushort inum;
  char name[DIRSIZ];
};
