// fsck: check a NexOS file-system image on the host, as the kernel would find it after boot.
//
//   fsck <image>
//
// The image is opened read-only. A committed log (header n > 0) is replayed in memory only:
// every read of a logged block returns its log copy, as recover_from_log() would leave it.
// Prints one "fsck: " line per problem, then a summary; exits 0 if clean, 1 if not, 2 if the
// image cannot be read at all. Every number read from the image is range-checked before use,
// and nothing is walked by following names, so no cycle can make it loop.

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

static int imgfd;
static const char *imgpath;
static struct superblock sb;
static uint datastart;       // first data block: sb.size - sb.nblocks
static int nproblems;

// The log as recovery would replay it: block logblock[i] reads as log block i.
static int logn;             // valid entries (0 if the header is corrupt)
static uint logblock[LOGSIZE];

static struct dinode *itab;  // the inode table, ninodes entries
static uchar *bitmap;        // the free-block bitmap, one bit per block of the image
static uint *owner;          // owner[b]: the inode referencing block b, 0 if none
static uint *where;          // where[b]: its place in owner's map, bn * 4 + depth
static uint64 nused;         // blocks some inode references

// Per-inode facts (indexed by inode number).
static int *named;           // entries of live directories naming it, "." and ".." excluded
static int *subdirs;         // live subdirectories whose ".." names it
static uint *dotdot;         // a live directory's parent, as its ".." says (0 if bad)
static uchar *listed;        // a live directory's parent lists it

#define MAXSHOWN 1000        // problems printed; a garbage image may have millions

// Print "fsck: <message>" on f.
static void
say(FILE *f, const char *fmt, va_list ap)
{
  fprintf(f, "fsck: ");
  vfprintf(f, fmt, ap);
  fprintf(f, "\n");
}

// Count a problem and print it (only the first MAXSHOWN).
static void
problem(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  if(++nproblems <= MAXSHOWN)
    say(stdout, fmt, ap);
  va_end(ap);
}

// The image cannot be checked at all: one line on stderr and exit 2.
static void
fatal(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  say(stderr, fmt, ap);
  va_end(ap);
  exit(2);
}

static void *
zalloc(uint64 n)
{
  void *p = calloc(n, 1);
  if(p == 0)
    fatal("out of memory");
  return p;
}

// Read block b as it is on disk. Past block 1, callers have checked b < sb.size <= the
// file's length.
static void
rawread(uint b, void *buf)
{
  ssize_t r = pread(imgfd, buf, BSIZE, (off_t)b * BSIZE);
  if(r != BSIZE)
    fatal("%s: cannot read block %u: %s", imgpath, b, r < 0 ? strerror(errno) : "short file");
}

// Read block b as recovery would leave it: the last log copy of b if b is logged.
static void
rblock(uint b, void *buf)
{
  uint src = b;
  for(int i = 0; i < logn; i++)
    if(logblock[i] == b)
      src = sb.logstart + 1 + i;
  rawread(src, buf);
}

// The regions must lie in order inside the image and the file: boot, super, log
// (nlog >= LOGSIZE + 1, or initlog() panics), inodes, bitmap (a bit for every block),
// data. Returns 0 (after reporting) if the image cannot be walked.
static int
checksb(uint64 filelen)
{
  static char buf[BSIZE];
  rawread(1, buf);
  memcpy(&sb, buf, sizeof(sb));
  if(sb.magic != FSMAGIC){
    problem("bad magic 0x%x in the super block (want 0x%x): not a NexOS file system",
            sb.magic, FSMAGIC);
    return 0;
  }
  int before = nproblems;
  uint64 inodeblocks = ((uint64)sb.ninodes + IPB - 1) / IPB;
  uint64 bitmapblocks = ((uint64)sb.size + BPB - 1) / BPB;
  datastart = sb.size - sb.nblocks;
  if(sb.size > FSMAXBLOCKS || (uint64)sb.size * BSIZE > filelen)
    problem("super block: size %u blocks, but the file holds %llu (and at most %d are allowed)",
            sb.size, (unsigned long long)(filelen / BSIZE), FSMAXBLOCKS);
  if(sb.ninodes < 2 || sb.ninodes > MAXINODES + 1)
    problem("super block: ninodes %u outside 2..%d", sb.ninodes, MAXINODES + 1);
  if(sb.nlog < LOGSIZE + 1)
    problem("super block: nlog %u < LOGSIZE + 1 = %d", sb.nlog, LOGSIZE + 1);
  if(sb.nblocks >= sb.size || sb.logstart < 2 ||
     (uint64)sb.logstart + sb.nlog > sb.inodestart || sb.inodestart + inodeblocks > sb.bmapstart ||
     sb.bmapstart + bitmapblocks > datastart)
    problem("super block: regions out of order or overlapping: log %u+%u, inodes %u+%llu, "
            "bitmap %u+%llu, data %u+%u of %u blocks", sb.logstart, sb.nlog, sb.inodestart,
            (unsigned long long)inodeblocks, sb.bmapstart, (unsigned long long)bitmapblocks,
            datastart, sb.nblocks, sb.size);
  return nproblems == before;
}

// Load the log header. Recovery copies log block i to block[i] for i < n. A header it
// would panic on, or an entry outside the blocks the kernel logs (inodes..size-1: never
// the boot block, super block or log), is a problem and is not replayed.
static void
readlog(void)
{
  static int h[BSIZE / sizeof(int)];
  rawread(sb.logstart, h);
  int n = h[0];
  if(n < 0 || n > LOGSIZE){
    problem("log header n = %d outside 0..%d (the kernel panics at boot)", n, LOGSIZE);
    return;
  }
  for(int i = 0; i < n; i++){
    if(h[1 + i] < 0 || (uint)h[1 + i] < sb.inodestart || (uint)h[1 + i] >= sb.size)
      problem("log entry %d names block %d, outside the loggable blocks %u..%u", i, h[1 + i],
              sb.inodestart, sb.size - 1);
    else
      logblock[logn++] = h[1 + i];
  }
}

// Read the inode table and the bitmap (through the log); make the per-block and
// per-inode tables.
static void
loadtables(void)
{
  uint64 nib = ((uint64)sb.ninodes + IPB - 1) / IPB;
  uint64 nbm = ((uint64)sb.size + BPB - 1) / BPB;
  itab = zalloc(nib * BSIZE);
  for(uint64 i = 0; i < nib; i++)
    rblock(sb.inodestart + i, (char *)itab + i * BSIZE);
  bitmap = zalloc(nbm * BSIZE);
  for(uint64 i = 0; i < nbm; i++)
    rblock(sb.bmapstart + i, bitmap + i * BSIZE);
  owner = zalloc((uint64)sb.size * sizeof(uint));
  where = zalloc((uint64)sb.size * sizeof(uint));
  named = zalloc((uint64)sb.ninodes * sizeof(int));
  subdirs = zalloc((uint64)sb.ninodes * sizeof(int));
  dotdot = zalloc((uint64)sb.ninodes * sizeof(uint));
  listed = zalloc(sb.ninodes);
}

// What the walk of one inode found that would be one line a block: counted, and reported
// once for the inode.
static uint64 nbad, npast;   // addresses outside the data region; data blocks past the size
static uint firstbad, firstpast;
static uint64 cursize;       // the size, in blocks, of the inode being walked

// Inode inum references block b at place (bn, depth) of its map: b must lie in the data
// region, and nothing else may reference it. Returns 1 if b is now inum's (so its
// contents may be walked).
static int
claim(uint inum, uint b, uint64 bn, int depth)
{
  if(b < datastart || b >= sb.size){
    if(nbad++ == 0)
      firstbad = b;
    return 0;
  }
  if(owner[b]){
    problem("block %u referenced twice: by inode %u and by inode %u", b, owner[b], inum);
    return 0;
  }
  owner[b] = inum;
  where[b] = bn * 4 + depth;   // bn < 2^21: fits
  nused++;
  return 1;
}

// Walk the tree under block b of inode inum in index order: depth 0 is the data block at
// index bn, depth 1 an indirect block over data blocks bn.., depth 2 the double-indirect
// block over NINDIRECT indirect blocks. Claiming, each block is claimed on the way (one
// referenced twice is not walked again); otherwise only the places where inum claimed a
// block are walked, so no walk reads more blocks than the image has. fn gets each data
// block. The depth is at most 2, so the walk ends.
static void
walk(uint inum, uint b, int depth, uint64 bn, int claiming, void (*fn)(uint, uint64, uint))
{
  if(b == 0)
    return;
  if(claiming ? !claim(inum, b, bn, depth) : b < datastart || b >= sb.size ||
     owner[b] != inum || where[b] != bn * 4 + depth)
    return;
  if(depth == 0){
    fn(inum, bn, b);
    return;
  }
  uint a[NINDIRECT];
  rblock(b, a);
  for(uint i = 0; i < NINDIRECT; i++)
    walk(inum, a[i], depth - 1, bn + i * (depth == 2 ? NINDIRECT : 1), claiming, fn);
}

static void
walkinode(uint inum, int claiming, void (*fn)(uint, uint64, uint))
{
  struct dinode *dip = &itab[inum];
  for(int i = 0; i < NDIRECT; i++)
    walk(inum, dip->addrs[i], 0, i, claiming, fn);
  walk(inum, dip->addrs[NDIRECT], 1, NDIRECT, claiming, fn);
  walk(inum, dip->addrs[NDIRECT + 1], 2, NDIRECT + NINDIRECT, claiming, fn);
}

// A data block must sit below index ceil(size / BSIZE).
static void
sizecheck(uint inum, uint64 bn, uint b)
{
  if(bn >= cursize && npast++ == 0)
    firstpast = b;
}

static int
knowntype(uint inum)
{
  short t = itab[inum].type;
  return t == T_DIR || t == T_FILE || t == T_DEVICE;
}

// Check every allocated inode's type, size and block map. Returns the inodes in use.
static uint
checkinodes(void)
{
  uint n = 0;
  for(uint inum = 1; inum < sb.ninodes; inum++){
    struct dinode *dip = &itab[inum];
    if(dip->type == 0)
      continue;
    n++;
    if(!knowntype(inum)){
      problem("inode %u: unknown type %d", inum, dip->type);
      continue;
    }
    if(dip->size > MAXFILE * BSIZE)
      problem("inode %u: size %llu exceeds MAXFILE*BSIZE = %llu", inum,
              (unsigned long long)dip->size, (unsigned long long)(MAXFILE * BSIZE));
    cursize = dip->size > MAXFILE * BSIZE ? MAXFILE : (dip->size + BSIZE - 1) / BSIZE;
    nbad = npast = 0;
    walkinode(inum, 1, sizecheck);
    if(nbad)
      problem("inode %u: %llu block addresses outside the data region %u..%u (first: %u)",
              inum, (unsigned long long)nbad, datastart, sb.size - 1, firstbad);
    if(npast)
      problem("inode %u: %llu data blocks past its size of %llu bytes (first: block %u)",
              inum, (unsigned long long)npast, (unsigned long long)dip->size, firstpast);
  }
  return n;
}

// A run of consecutive blocks with the same bitmap finding is one problem, not thousands.
static struct { const char *what; uint owner, first, last; int open; } run;

static void
runflush(void)
{
  char who[32] = "";
  if(!run.open)
    return;
  if(run.owner)
    snprintf(who, sizeof(who), " (inode %u)", run.owner);
  if(run.first == run.last)
    problem("block %u%s: %s", run.first, who, run.what);
  else
    problem("blocks %u-%u%s: %s", run.first, run.last, who, run.what);
  run.open = 0;
}

static void
runadd(const char *what, uint own, uint b)
{
  if(run.open && run.what == what && run.owner == own && run.last + 1 == b){
    run.last = b;
    return;
  }
  runflush();
  run.what = what;
  run.owner = own;
  run.first = run.last = b;
  run.open = 1;
}

// The bitmap marks every metadata block and every referenced block, and nothing else: a
// marked data block no inode references is a leak. (An inode awaiting free still owns
// its blocks, so they are not leaks.)
static void
checkbitmap(void)
{
  for(uint b = 0; b < sb.size; b++){
    int inuse = (bitmap[b / 8] >> (b % 8)) & 1;
    if(b < datastart && !inuse)
      runadd("metadata not marked in use in the bitmap", 0, b);
    else if(b >= datastart && owner[b] && !inuse)
      runadd("referenced but marked free in the bitmap", owner[b], b);
    else if(b >= datastart && !owner[b] && inuse)
      runadd("marked in use but referenced by no inode (leak)", 0, b);
  }
  runflush();
}

// A live directory: an allocated T_DIR with nlink > 0. One with nlink 0 was unlinked
// (while open) and awaits free: it is empty, and its ".." may name a freed inode (namex).
static int
livedir(uint inum)
{
  return inum > 0 && inum < sb.ninodes && itab[inum].type == T_DIR && itab[inum].nlink > 0;
}

// A directory entry's name, printable (a corrupt one may hold any bytes).
static const char *
showname(struct dirent *de)
{
  static char s[DIRSIZ + 1];
  int i;
  for(i = 0; i < DIRSIZ && de->name[i]; i++)
    s[i] = de->name[i] > ' ' && de->name[i] < 127 ? de->name[i] : '?';
  s[i] = 0;
  return s;
}

#define DPB (BSIZE / sizeof(struct dirent))   // directory entries per block

// The current directory pass: called on each slot of a live directory, in order.
static void (*entryfn)(uint, uint64, struct dirent *);
static int dots;             // slots 0 and 1 that pass 1 saw in the current directory

// A data block of directory d: hand its slots below the size to entryfn. Only blocks d
// owns are read, so a huge size costs nothing.
static void
dirblock(uint d, uint64 bn, uint b)
{
  static struct dirent de[DPB];
  rblock(b, de);
  for(uint k = 0; k < DPB && (bn * DPB + k + 1) * sizeof(struct dirent) <= itab[d].size; k++)
    entryfn(d, bn * DPB + k, &de[k]);
}

// Pass 1: slot 0 is "." naming d and slot 1 is ".." naming its parent (create() makes
// them so and isdirempty() relies on it). The root's ".." is the root; any other
// directory's ".." is one link to its parent: mkdir adds one to the parent's nlink.
static void
dotentries(uint d, uint64 slot, struct dirent *de)
{
  uint p = de->inum;
  if(slot < 2)
    dots++;
  if(slot == 0 && (p != d || strncmp(de->name, ".", DIRSIZ) != 0))
    problem("directory %u: slot 0 is '%s' -> %u, not '.' -> %u", d, showname(de), p, d);
  if(slot != 1)
    return;
  if(strncmp(de->name, "..", DIRSIZ) != 0)
    problem("directory %u: slot 1 is '%s', not '..'", d, showname(de));
  else if(d == ROOTINO && p != ROOTINO)
    problem("root directory: '..' names %u, not itself", p);
  else if(!livedir(p))
    problem("directory %u: '..' names %u, not a live directory", d, p);
  else if(d != ROOTINO){
    dotdot[d] = p;
    subdirs[p]++;
  }
}

// Pass 2: every other entry in use names an allocated inode in range: one link to it.
static void
nameentries(uint d, uint64 slot, struct dirent *de)
{
  uint i = de->inum;
  if(slot < 2 || i == 0)
    return;
  if(strncmp(de->name, ".", DIRSIZ) == 0 || strncmp(de->name, "..", DIRSIZ) == 0)
    problem("directory %u: '%s' in slot %llu", d, showname(de), (unsigned long long)slot);
  else if(i >= sb.ninodes)
    problem("directory %u: entry '%s' names inode %u, beyond ninodes %u", d, showname(de),
            i, sb.ninodes);
  else if(itab[i].type == 0)
    problem("directory %u: entry '%s' names free inode %u", d, showname(de), i);
  else {
    named[i]++;
    if(dotdot[i] == d)
      listed[i] = 1;
  }
}

// Run one pass over every live directory.
static void
fordirs(void (*fn)(uint, uint64, struct dirent *))
{
  entryfn = fn;
  for(uint d = 1; d < sb.ninodes; d++){
    if(!livedir(d))
      continue;
    dots = 0;
    walkinode(d, 0, dirblock);
    if(fn == dotentries && dots < 2)
      problem("directory %u: no '.' and '..' in slots 0 and 1", d);
  }
}

// Directories and link counts. As sysfile.c keeps it, nlink counts the entries naming an
// inode plus, for a directory, one for each live subdirectory's "..", plus one for the
// root itself (mkfs gives it nlink 1; no entry but its own "." and ".." names it).
// Returns the inodes with nlink 0 that nothing names: unlinked while open and left so by
// a crash (iput frees one only when its last reference goes). Not a problem; they keep
// their blocks.
static uint
checkdirs(void)
{
  if(!livedir(ROOTINO)){
    problem("root inode %u is not a directory with nlink > 0 (type %d, nlink %d)", ROOTINO,
            itab[ROOTINO].type, itab[ROOTINO].nlink);
    return 0;
  }
  for(uint d = 1; d < sb.ninodes; d++)
    if(livedir(d) && itab[d].size % sizeof(struct dirent) != 0)
      problem("directory %u: size %llu is not a whole number of entries", d,
              (unsigned long long)itab[d].size);
  fordirs(dotentries);
  fordirs(nameentries);

  uint awaiting = 0;
  for(uint i = 1; i < sb.ninodes; i++){
    if(!knowntype(i))
      continue;   // free, or reported
    int nlink = itab[i].nlink;
    int links = named[i] + subdirs[i] + (i == ROOTINO);
    if(i != ROOTINO && named[i] == 0 && nlink > 0)
      problem("inode %u: nlink %d but no directory names it (orphan)", i, nlink);
    else if(nlink != links)
      problem("inode %u: nlink %d, but %d links found (%d entries, %d subdirectories)",
              i, nlink, links, named[i], subdirs[i]);
    else if(nlink == 0)
      awaiting++;
    if(dotdot[i] && named[i] > 0 && !listed[i])
      problem("directory %u: '..' names %u, which does not list it", i, dotdot[i]);
  }
  return awaiting;
}

int
main(int argc, char *argv[])
{
  struct stat st;
  uint inodes = 0, awaiting = 0;

  if(argc != 2){
    fprintf(stderr, "usage: fsck <image>\n");
    return 2;
  }
  imgpath = argv[1];
  if((imgfd = open(imgpath, O_RDONLY)) < 0 || fstat(imgfd, &st) < 0)
    fatal("%s: %s", imgpath, strerror(errno));
  if(!S_ISREG(st.st_mode))
    fatal("%s: not a regular file", imgpath);

  if(checksb((uint64)st.st_size)){
    readlog();
    loadtables();
    inodes = checkinodes();
    checkbitmap();
    awaiting = checkdirs();
  }
  if(awaiting)
    printf("fsck: %s: %u unreferenced inodes awaiting free (nlink 0; not a problem)\n",
           imgpath, awaiting);
  if(nproblems > MAXSHOWN)
    printf("fsck: %s: only the first %d problems are shown\n", imgpath, MAXSHOWN);
  if(nproblems){
    printf("fsck: %s: %d problems\n", imgpath, nproblems);
    return 1;
  }
  printf("fsck: %s clean: %u inodes in use, %llu data blocks in use, %d logged blocks "
         "replayed\n", imgpath, inodes, (unsigned long long)nused, logn);
  return 0;
}
