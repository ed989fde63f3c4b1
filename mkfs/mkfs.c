// mkfs: build a NexOS file-system image on the host.
//
//   mkfs <image> <size-MiB> <file>...
//
// Each <file> is either a host path, stored in / under its base name with one leading '_'
// removed (xv6 style: user/_cat becomes /cat), or name=path, stored as /name.
// The image is created sparse (ftruncate) and only blocks in use are written; file data
// is laid out consecutively so that the kernel can read it in long runs.
// Layout (see docs/filesystem.md):
//   [ boot | super | log header + LOGSIZE | inodes | bitmap | data ... ]

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/types.h"
#include "kernel/fs.h"
#define stat nexos_stat   // the kernel's struct stat would clash with the host's
#include "kernel/stat.h"
#undef stat
#include "kernel/param.h"

// Everything about the image being built.
static int imgfd = -1;
static const char *imgpath;
static struct superblock sb;
static uint nmeta;            // blocks before the first data block
static uint nextblock;        // next free data block (allocation is strictly increasing)
static uint nextinum = ROOTINO;
static struct dinode *inodes; // the whole inode table, written at the end
static uchar *rootdir;        // the root directory's contents
static uint64 rootsize;
static uint64 rootcap;

// Print "mkfs: <message>", remove the half-built image and exit with status 1.
static void
die(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "mkfs: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  if(imgfd >= 0){
    close(imgfd);
    unlink(imgpath);
  }
  exit(1);
}

// Write n bytes at byte offset off of the image, or die.
static void
wimg(const void *buf, uint64 n, uint64 off)
{
  const char *p = buf;
  while(n > 0){
    ssize_t w = pwrite(imgfd, p, n, off);
    if(w <= 0)
      die("writing %s: %s", imgpath, w < 0 ? strerror(errno) : "short write");
    p += w;
    off += w;
    n -= w;
  }
}

// Take the next free block, or die if the image is full.
static uint
balloc(void)
{
  if(nextblock >= sb.size)
    die("image too small: %u blocks of %d bytes are not enough for these files "
        "(give a larger size in MiB)", sb.size, BSIZE);
  return nextblock++;
}

// Take the next free inode of the given type, or die.
static uint
ialloc(short type)
{
  if(nextinum >= sb.ninodes)
    die("too many files: the image has %u inodes", sb.ninodes - 1);
  uint inum = nextinum++;
  inodes[inum].type = type;
  inodes[inum].nlink = 1;
  return inum;
}

// Set the block map of inode inum for a file of nb data blocks, allocating its data and
// indirect blocks in order: the data comes out consecutive except for an indirect block
// every NINDIRECT blocks. Fills map[0..nb-1] with the data blocks and writes the indirect
// blocks.
static void
mapfile(uint inum, uint64 nb, uint *map)
{
  struct dinode *dip = &inodes[inum];
  uint *ind = calloc(NINDIRECT, sizeof(uint));      // single-indirect block
  uint *dtop = calloc(NINDIRECT, sizeof(uint));     // double-indirect block
  uint *second = calloc(NINDIRECT, sizeof(uint));   // current second-level block
  uint secondaddr = 0;
  if(ind == 0 || dtop == 0 || second == 0)
    die("out of memory");

  for(uint64 bn = 0; bn < nb; bn++){
    if(bn < NDIRECT){
      map[bn] = dip->addrs[bn] = balloc();
      continue;
    }
    if(bn < NDIRECT + NINDIRECT){
      if(bn == NDIRECT)
        dip->addrs[NDIRECT] = balloc();
      map[bn] = ind[bn - NDIRECT] = balloc();
      continue;
    }
    uint64 d = bn - NDIRECT - NINDIRECT;
    if(d == 0)
      dip->addrs[NDIRECT + 1] = balloc();
    if(d % NINDIRECT == 0){
      if(secondaddr)
        wimg(second, BSIZE, (uint64)secondaddr * BSIZE);
      memset(second, 0, BSIZE);
      secondaddr = dtop[d / NINDIRECT] = balloc();
    }
    map[bn] = second[d % NINDIRECT] = balloc();
  }
  if(dip->addrs[NDIRECT])
    wimg(ind, BSIZE, (uint64)dip->addrs[NDIRECT] * BSIZE);
  if(secondaddr)
    wimg(second, BSIZE, (uint64)secondaddr * BSIZE);
  if(dip->addrs[NDIRECT + 1])
    wimg(dtop, BSIZE, (uint64)dip->addrs[NDIRECT + 1] * BSIZE);
  free(ind);
  free(dtop);
  free(second);
}

// Copy the host file at path (size bytes) into a new T_FILE inode; returns its number.
// Runs of consecutive blocks are copied with large writes.
static uint
addfile(const char *path, uint64 size)
{
  uint64 nb = (size + BSIZE - 1) / BSIZE;
  if(nb > MAXFILE)
    die("%s: too big (%llu bytes; a file holds at most %llu)", path,
        (unsigned long long)size, (unsigned long long)(MAXFILE * BSIZE));
  uint inum = ialloc(T_FILE);
  uint *map = malloc((nb + 1) * sizeof(uint));
  if(map == 0)
    die("out of memory");
  mapfile(inum, nb, map);
  inodes[inum].size = size;

  int fd = open(path, O_RDONLY);
  if(fd < 0)
    die("%s: %s", path, strerror(errno));
  enum { RUNMAX = 256 };   // blocks per copy (1 MiB)
  char *buf = malloc((size_t)RUNMAX * BSIZE);
  if(buf == 0)
    die("out of memory");
  for(uint64 bn = 0; bn < nb; ){
    uint64 k = 1;
    while(bn + k < nb && k < RUNMAX && map[bn + k] == map[bn] + k)
      k++;
    uint64 want = k * BSIZE;
    if(bn * BSIZE + want > size)
      want = size - bn * BSIZE;
    uint64 got = 0;
    while(got < want){
      ssize_t r = read(fd, buf + got, want - got);
      if(r < 0)
        die("%s: %s", path, strerror(errno));
      if(r == 0)
        die("%s: file shrank while being copied", path);
      got += r;
    }
    memset(buf + got, 0, k * BSIZE - got);
    wimg(buf, k * BSIZE, (uint64)map[bn] * BSIZE);
    bn += k;
  }
  close(fd);
  free(buf);
  free(map);
  return inum;
}

// Append the entry (name, inum) to the root directory's contents.
static void
rootlink(const char *name, uint inum)
{
  struct dirent de;

  for(uint64 off = 0; off < rootsize; off += sizeof(de)){
    memcpy(&de, rootdir + off, sizeof(de));
    if(strncmp(de.name, name, DIRSIZ) == 0)
      die("two files named '%s'", name);
  }
  if(rootsize + sizeof(de) > rootcap){
    rootcap = rootcap ? 2 * rootcap : BSIZE;
    if((rootdir = realloc(rootdir, rootcap)) == 0)
      die("out of memory");
  }
  memset(&de, 0, sizeof(de));
  de.inum = inum;
  memcpy(de.name, name, strlen(name));   // parsearg checked: at most DIRSIZ, no NUL needed
  memcpy(rootdir + rootsize, &de, sizeof(de));
  rootsize += sizeof(de);
}

// Split a command-line file argument into the name to store and the host path.
static void
parsearg(char *arg, const char **name, const char **path)
{
  char *eq = strchr(arg, '=');
  if(eq){
    *eq = 0;
    *name = arg;
    *path = eq + 1;
  } else {
    const char *slash = strrchr(arg, '/');
    *name = slash ? slash + 1 : arg;
    if(**name == '_')
      (*name)++;
    *path = arg;
  }
  if(**name == 0)
    die("'%s': empty file name", *path);
  if(strchr(*name, '/'))
    die("'%s': a name may not contain '/'", *name);
  if(strlen(*name) > DIRSIZ)
    die("'%s': name too long (at most %d characters)", *name, DIRSIZ);
  if(strcmp(*name, ".") == 0 || strcmp(*name, "..") == 0)
    die("'%s': reserved name", *name);
}

// Choose the layout for an image of size blocks with ninodes inodes.
static void
layout(uint size)
{
  uint ninodes = size / 8;
  if(ninodes < 256)
    ninodes = 256;
  if(ninodes > MAXINODES)
    ninodes = MAXINODES;
  uint ninodeblocks = ninodes / IPB + 1;
  uint nbitmap = size / BPB + 1;
  uint nlog = LOGSIZE + 1;

  sb.magic = FSMAGIC;
  sb.size = size;
  sb.ninodes = ninodes;
  sb.nlog = nlog;
  sb.logstart = 2;
  sb.inodestart = 2 + nlog;
  sb.bmapstart = 2 + nlog + ninodeblocks;
  nmeta = 2 + nlog + ninodeblocks + nbitmap;
  if(nmeta + 1 >= size)
    die("image too small: %u blocks hold no data", size);
  sb.nblocks = size - nmeta;
  nextblock = nmeta;
}

// Write the super block, the inode blocks in use and the bitmap (blocks below nextblock
// are in use).
static void
finish(void)
{
  char block[BSIZE];

  memset(block, 0, BSIZE);
  memcpy(block, &sb, sizeof(sb));
  wimg(block, BSIZE, 1 * BSIZE);

  uint usedblocks = nextinum / IPB + 1;
  wimg(inodes, (uint64)usedblocks * BSIZE, (uint64)sb.inodestart * BSIZE);

  uint nbitmap = sb.size / BPB + 1;
  for(uint i = 0; i < nbitmap; i++){
    memset(block, 0, BSIZE);
    for(uint bi = 0; bi < BPB; bi++){
      uint b = i * BPB + bi;
      if(b < nextblock)
        block[bi / 8] |= 1 << (bi % 8);
    }
    wimg(block, BSIZE, (uint64)(sb.bmapstart + i) * BSIZE);
  }
}

int
main(int argc, char *argv[])
{
  if(argc < 3){
    fprintf(stderr, "usage: mkfs <image> <size-MiB> [path | name=path]...\n");
    return 2;
  }
  imgpath = argv[1];
  char *end;
  long mib = strtol(argv[2], &end, 10);
  if(*end != 0 || mib < 1 || mib > FSMAXBLOCKS / (1024 * 1024 / BSIZE)){
    fprintf(stderr, "mkfs: size '%s' must be a whole number of MiB from 1 to %d\n",
            argv[2], FSMAXBLOCKS / (1024 * 1024 / BSIZE));
    return 1;
  }

  // Check every argument before touching the image.
  const char **names = calloc(argc, sizeof(char *));
  const char **paths = calloc(argc, sizeof(char *));
  uint64 *sizes = calloc(argc, sizeof(uint64));
  if(names == 0 || paths == 0 || sizes == 0)
    die("out of memory");
  for(int i = 3; i < argc; i++){
    struct stat st;
    parsearg(argv[i], &names[i], &paths[i]);
    if(stat(paths[i], &st) < 0)
      die("%s: %s", paths[i], strerror(errno));
    if(!S_ISREG(st.st_mode))
      die("%s: not a regular file", paths[i]);
    sizes[i] = st.st_size;
  }

  layout((uint)mib * (1024 * 1024 / BSIZE));
  inodes = calloc((size_t)(sb.ninodes / IPB + 1) * IPB, sizeof(struct dinode));
  if(inodes == 0)
    die("out of memory");

  imgfd = open(imgpath, O_RDWR | O_CREAT | O_TRUNC, 0666);
  if(imgfd < 0){
    fprintf(stderr, "mkfs: %s: %s\n", imgpath, strerror(errno));
    return 1;
  }
  if(ftruncate(imgfd, (off_t)sb.size * BSIZE) < 0)
    die("%s: %s", imgpath, strerror(errno));

  uint rootino = ialloc(T_DIR);
  if(rootino != ROOTINO)
    die("internal error: root inode is %u", rootino);
  rootlink(".", rootino);
  rootlink("..", rootino);
  for(int i = 3; i < argc; i++)
    rootlink(names[i], addfile(paths[i], sizes[i]));

  // The root directory is written like a file, from memory.
  uint64 nb = (rootsize + BSIZE - 1) / BSIZE;
  uint *map = malloc(nb * sizeof(uint));
  if(map == 0)
    die("out of memory");
  mapfile(rootino, nb, map);
  inodes[rootino].size = rootsize;
  for(uint64 bn = 0; bn < nb; bn++){
    char block[BSIZE];
    memset(block, 0, BSIZE);
    uint64 n = rootsize - bn * BSIZE < BSIZE ? rootsize - bn * BSIZE : BSIZE;
    memcpy(block, rootdir + bn * BSIZE, n);
    wimg(block, BSIZE, (uint64)map[bn] * BSIZE);
  }
  free(map);

  finish();
  if(close(imgfd) < 0){
    imgfd = -1;
    fprintf(stderr, "mkfs: %s: %s\n", imgpath, strerror(errno));
    return 1;
  }
  printf("mkfs: %s: %u blocks (%u data), %u inodes, %u files, %u blocks used\n",
         imgpath, sb.size, sb.nblocks, sb.ninodes, nextinum - 2, nextblock);
  return 0;
}
