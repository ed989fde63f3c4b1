// mmaptests: mmap/munmap and the page cache (kernel/mmap.c, kernel/pagecache.c), in every
// configuration: LAZY_ALLOC picks when file pages are mapped (first touch or at mmap),
// nothing else may differ.
//
//   mmaptests          run every test
//   mmaptests NAME     run only the test NAME
//
// Every test runs in its own child; the free-page count must be back at its value from
// before the test once the child is reaped (so the page cache must have let go of every
// page). Last line: ALL TESTS PASSED or SOME TESTS FAILED.

#include "user/tests/testlib.h"

#define MAPFAIL ((char *)-1)

// Open path with mode, or fail the test.
static int xopen(const char *path, int mode)
{
  int fd = open(path, mode);
  CHECK(fd >= 0, "cannot open %s", path);
  return fd;
}

// mmap that must succeed.
static char *xmap(uint64 len, int prot, int flags, int fd, uint64 off)
{
  char *p = mmap(0, len, prot, flags, fd, off);
  CHECK(p != MAPFAIL, "mmap of %d bytes (prot %d flags %d off %d) failed",
        (int)len, prot, flags, (int)off);
  CHECK((uint64)p % PGSIZE == 0, "mmap returned an unaligned address %p", p);
  return p;
}

// The n bytes at p must be the pattern of seed from file offset off.
static void check_bytes(const char *p, int n, int seed, uint64 off, const char *what)
{
  for (int i = 0; i < n; i++)
    CHECK(p[i] == pattern(seed, off + i), "%s: wrong byte at %d", what, (int)off + i);
}

static uint64 file_size(int fd)
{
  struct stat st;
  CHECK(fstat(fd, &st) == 0, "fstat failed");
  return st.size;
}

// Basic: a private read-only mapping shows what read() returns, and the end of the last
// page past the end of the file reads as zeroes.
static void basic(void)
{
  static char buf[PGSIZE];
  int n = 3 * PGSIZE + 100;
  make_file("mm_basic", n, 1);
  int fd = xopen("mm_basic", O_RDONLY);
  char *p = xmap(n, PROT_READ, MAP_PRIVATE, fd, 0);
  for (int off = 0, r; (r = read(fd, buf, sizeof(buf))) > 0; off += r)
    CHECK(memcmp(p + off, buf, r) == 0, "mapping differs from read() near %d", off);
  for (int i = n; i < 4 * PGSIZE; i++)
    CHECK(p[i] == 0, "byte %d past the end of the file is %d, not 0", i, p[i]);
  struct memstat m;
  snap(&m);
  CHECK(m.file_pages == 4, "file_pages %d after touching 4 pages", (int)m.file_pages);
  CHECK(m.pagecache_pages == 4, "pagecache_pages %d, expected 4", (int)m.pagecache_pages);
  // An offset: the second page of the file.
  char *q = xmap(PGSIZE, PROT_READ, MAP_SHARED, fd, PGSIZE);
  check_bytes(q, PGSIZE, 1, PGSIZE, "offset mapping");
  CHECK(munmap(q, PGSIZE) == 0, "munmap of the offset mapping");
  CHECK(munmap(p, n) == 0, "munmap failed");
  snap(&m);
  CHECK(m.file_pages == 0 && m.pagecache_pages == 0, "after munmap: file_pages %d cache %d",
        (int)m.file_pages, (int)m.pagecache_pages);
  close(fd);
  unlink("mm_basic");
}

// Private write: the process sees its stores, the file does not change, and a private
// copy is anonymous memory (no longer a file page).
static void private(void)
{
  int n = 2 * PGSIZE;
  make_file("mm_priv", n, 2);
  int fd = xopen("mm_priv", O_RDONLY);   // a private writable mapping needs no O_WRONLY
  char *p = xmap(n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  check_bytes(p, n, 2, 0, "private mapping");
  struct memstat a, b;
  snap(&a);
  for (int i = 0; i < PGSIZE; i++)
    p[i] = 'P';
  snap(&b);
  CHECK(b.file_pages == a.file_pages - 1, "a private store left file_pages %d -> %d",
        (int)a.file_pages, (int)b.file_pages);
  for (int i = 0; i < PGSIZE; i++)
    CHECK(p[i] == 'P', "the private store did not stick at %d", i);
  check_bytes(p + PGSIZE, PGSIZE, 2, PGSIZE, "untouched private page");
  CHECK(munmap(p, n) == 0, "munmap failed");
  close(fd);
  check_file("mm_priv", n, 2);
  unlink("mm_priv");
}

// Shared write-back: after munmap, read() and a fresh mapping see the stores; the size
// does not change (the partial last page is written back only up to the end of file).
static void shared(void)
{
  static char buf[PGSIZE];
  int n = 2 * PGSIZE + 500;
  make_file("mm_shared", n, 3);
  int fd = xopen("mm_shared", O_RDWR);
  char *p = xmap(n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  for (int i = 0; i < n; i += 7)
    p[i] = 'S';
  p[n + 10] = 'X';   // past the end of the file, inside the last page: never written back
  CHECK(munmap(p, n) == 0, "munmap failed");
  CHECK(file_size(fd) == (uint64)n, "file size changed to %d", (int)file_size(fd));
  int done = 0, r;
  while ((r = read(fd, buf, sizeof(buf))) > 0) {
    for (int i = 0; i < r; i++) {
      int o = done + i;
      char want = o % 7 == 0 ? 'S' : pattern(3, o);
      CHECK(buf[i] == want, "read() after munmap: byte %d is %d, expected %d", o, buf[i], want);
    }
    done += r;
  }
  CHECK(done == n, "read %d bytes, expected %d", done, n);
  char *q = xmap(n, PROT_READ, MAP_SHARED, fd, 0);
  for (int i = 0; i < n; i++)
    CHECK(q[i] == (i % 7 == 0 ? 'S' : pattern(3, i)), "fresh mapping: byte %d wrong", i);
  CHECK(q[n + 10] == 0, "a store past the end of the file came back");
  // write() to a file whose page is cached updates the mapping.
  CHECK(write(fd, "abc", 0) == 0, "empty write");
  int fd2 = xopen("mm_shared", O_RDWR);
  CHECK(write(fd2, "WXYZ", 4) == 4, "write() over a mapped page");
  CHECK(memcmp(q, "WXYZ", 4) == 0, "the mapping is stale after write()");
  close(fd2);
  CHECK(munmap(q, n) == 0, "munmap of the fresh mapping");
  close(fd);
  unlink("mm_shared");
}

// Store into a read-only mapping: the store kills the (child) process, not the kernel.
static void store_ro(uint64 addr)
{
  *(volatile char *)addr = 1;
}

static void touch(uint64 addr)
{
  volatile char c = *(volatile char *)addr;
  (void)c;
}

static void readonly(void)
{
  make_file("mm_ro", PGSIZE, 4);
  int fd = xopen("mm_ro", O_RDWR);
  char *p = xmap(PGSIZE, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(child_status(store_ro, (uint64)p) == -1, "store to PROT_READ MAP_SHARED survived");
  char *q = xmap(PGSIZE, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK(child_status(store_ro, (uint64)q) == -1, "store to PROT_READ MAP_PRIVATE survived");
  CHECK(munmap(p, PGSIZE) == 0 && munmap(q, PGSIZE) == 0, "munmap failed");
  close(fd);
  check_file("mm_ro", PGSIZE, 4);
  unlink("mm_ro");
  kernel_alive();
}

// Fork: the child sees the parent's mappings on the same physical pages; its private
// stores stay its own; its shared stores reach the parent.
static void forktest(void)
{
  int n = 2 * PGSIZE;
  make_file("mm_fork", n, 5);
  int fd = xopen("mm_fork", O_RDWR);
  char *pr = xmap(n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  char *sh = xmap(n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  pr[0] = 'p';            // one private page of the parent's own (anonymous now)
  touch((uint64)pr + PGSIZE);
  touch((uint64)sh);
  touch((uint64)sh + PGSIZE);
  struct memstat pm;
  snap(&pm);
  int pid = fork(), st = -99;
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    struct memstat cm;
    snap(&cm);
    if (cm.file_pages != pm.file_pages || cm.pagecache_pages != pm.pagecache_pages)
      exit(2);   // the child must map the same file pages, and the cache gain none
    if (pr[0] != 'p' || pr[1] != pattern(5, 1) || sh[0] != pattern(5, 0))
      exit(3);
    pr[PGSIZE] = 'c';     // private: must not reach the parent
    pr[0] = 'c';
    sh[1] = 'C';          // shared: must
    exit(0);
  }
  CHECK(wait(&st) == pid && st == 0, "child failed with status %d", st);
  CHECK(pr[0] == 'p' && pr[PGSIZE] == pattern(5, PGSIZE), "a child's private store reached the parent");
  CHECK(sh[1] == 'C', "a child's shared store did not reach the parent");
  CHECK(munmap(pr, n) == 0 && munmap(sh, n) == 0, "munmap failed");
  close(fd);
  fd = xopen("mm_fork", O_RDONLY);
  char c[2];
  CHECK(read(fd, c, 2) == 2 && c[0] == pattern(5, 0) && c[1] == 'C', "file after the child's store");
  close(fd);
  unlink("mm_fork");
}

// Partial munmap: a prefix and a suffix go, the middle stays; touching what went kills
// a child; the middle of a region and a hole cannot be unmapped.
static void partial(void)
{
  int n = 5 * PGSIZE;
  make_file("mm_part", n, 6);
  int fd = xopen("mm_part", O_RDONLY);
  char *p = xmap(n, PROT_READ, MAP_SHARED, fd, 0);
  check_bytes(p, n, 6, 0, "whole mapping");
  CHECK(munmap(p, PGSIZE) == 0, "munmap of a prefix");
  CHECK(munmap(p + 4 * PGSIZE, PGSIZE) == 0, "munmap of a suffix");
  CHECK(child_status(touch, (uint64)p) == -1, "touching the unmapped prefix survived");
  CHECK(child_status(touch, (uint64)p + 4 * PGSIZE) == -1, "touching the unmapped suffix survived");
  check_bytes(p + PGSIZE, 3 * PGSIZE, 6, PGSIZE, "what is left");
  CHECK(munmap(p, PGSIZE) == -1, "munmap of the hole left by the prefix succeeded");
  CHECK(munmap(p + 2 * PGSIZE, PGSIZE) == -1, "munmap of a region's middle succeeded");
  CHECK(munmap(p + PGSIZE, 4 * PGSIZE) == -1, "munmap past the region's end succeeded");
  struct memstat m;
  snap(&m);
  CHECK(m.pagecache_pages == 3, "pagecache_pages %d with 3 pages mapped", (int)m.pagecache_pages);
  CHECK(munmap(p + PGSIZE, 2 * PGSIZE) == 0, "munmap of a two-page prefix");
  CHECK(munmap(p + 3 * PGSIZE, 100) == 0, "munmap of the last page (length rounded up)");
  snap(&m);
  CHECK(m.pagecache_pages == 0, "pagecache_pages %d with nothing mapped", (int)m.pagecache_pages);
  close(fd);
  unlink("mm_part");
}

// Two files mapped at once, each with its own content; closing the fds does not end them.
static void twofiles(void)
{
  int n1 = 3 * PGSIZE, n2 = PGSIZE + 1;
  make_file("mm_one", n1, 7);
  make_file("mm_two", n2, 8);
  int fd1 = xopen("mm_one", O_RDONLY), fd2 = xopen("mm_two", O_RDONLY);
  char *a = xmap(n1, PROT_READ, MAP_PRIVATE, fd1, 0);
  char *b = xmap(n2, PROT_READ, MAP_SHARED, fd2, 0);
  close(fd1);
  close(fd2);
  CHECK(a + n1 <= b || b + 2 * PGSIZE <= a, "the mappings overlap");
  check_bytes(a, n1, 7, 0, "first file");
  check_bytes(b, n2, 8, 0, "second file");
  CHECK(munmap(a, n1) == 0 && munmap(b, n2) == 0, "munmap failed");
  unlink("mm_one");
  unlink("mm_two");
}

// copyin/copyout through a mapping: write() from one, read() into a shared one (also
// of the same file), and the heap cannot grow into a mapping.
static void syscalls(void)
{
  int n = 2 * PGSIZE;
  make_file("mm_src", n, 9);
  make_file("mm_dst", n, 10);
  int src = xopen("mm_src", O_RDONLY), dst = xopen("mm_dst", O_RDWR);
  char *s = xmap(n, PROT_READ, MAP_PRIVATE, src, 0);
  char *d = xmap(n, PROT_READ | PROT_WRITE, MAP_SHARED, dst, 0);
  // read() into the shared mapping of mm_dst: copyout stores into file pages.
  CHECK(read(src, d, n) == n, "read() into a mapping failed");
  check_bytes(d, n, 9, 0, "read() into a mapping");
  CHECK(munmap(d, n) == 0, "munmap failed");
  check_file("mm_src", n, 9);
  check_file("mm_dst", n, 9);
  // write() from an untouched mapping of the very file being written: with LAZY_ALLOC=1
  // copyin faults the page in while write() holds the file's inode lock.
  char *e = xmap(n, PROT_READ, MAP_PRIVATE, dst, 0);
  int dst2 = xopen("mm_dst", O_RDWR);
  CHECK(write(dst2, e + PGSIZE, PGSIZE) == PGSIZE, "write() from a mapping of the same file");
  close(dst2);
  // mm_dst now holds mm_src's page 1 twice.
  check_bytes(e, PGSIZE, 9, PGSIZE, "mm_dst page 0");
  check_bytes(e + PGSIZE, PGSIZE, 9, PGSIZE, "mm_dst page 1");
  CHECK(munmap(e, n) == 0 && munmap(s, n) == 0, "munmap failed");

  // sbrk stops at a mapping placed just above the heap.
  char *top = sbrk(0);
  uint64 at = PGROUNDUP((uint64)top) + 4 * PGSIZE;
  char *m = mmap((void *)at, PGSIZE, PROT_READ, MAP_PRIVATE, src, 0);
  CHECK(m == (char *)at, "mmap at a free page-aligned address %p returned %p", (void *)at, m);
  CHECK(sbrk(8 * PGSIZE) == SBRK_ERROR, "sbrk grew into a mapping");
  CHECK(sbrk(0) == top, "a failed sbrk moved the heap");
  check_bytes(m, 16, 9, 0, "mapping at a chosen address");
  CHECK(munmap(m, PGSIZE) == 0, "munmap failed");
  close(src);
  close(dst);
  unlink("mm_src");
  unlink("mm_dst");
}

// read() and write() with the buffer in an untouched MAP_SHARED mapping of the very block
// they copy: the copy is made holding that block's buffer, and the fault that maps the
// page fills it from that same block (fs.c, copyheld). Hung the kernel once.
static void sameblock(void)
{
  int n = PGSIZE;
  make_file("mm_same", n, 11);
  int fd = xopen("mm_same", O_RDWR);
  char *p = xmap(n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(read(fd, p + 100, 10) == 10, "read() into a mapping of the block it reads");
  check_bytes(p + 100, 10, 11, 0, "read() into its own block");
  check_bytes(p, 100, 11, 0, "the rest of the block");
  CHECK(munmap(p, n) == 0, "munmap failed");
  close(fd);
  fd = xopen("mm_same", O_RDWR);
  char *q = xmap(n, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(write(fd, q + 200, 10) == 10, "write() from a mapping of the block it writes");
  check_bytes(q, 10, 11, 200, "write() from its own block");
  check_bytes(q + 200, 10, 11, 200, "the source bytes");
  CHECK(munmap(q, n) == 0, "munmap failed");
  close(fd);
  unlink("mm_same");
}

// Every bad argument gives -1 (and the kernel lives).
static void errors(void)
{
  make_file("mm_err", 2 * PGSIZE, 11);
  int ro = xopen("mm_err", O_RDONLY), rw = xopen("mm_err", O_RDWR);
  int wo = xopen("mm_err", O_WRONLY);
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe");
  int dir = xopen("/", O_RDONLY);
  int R = PROT_READ, RW = PROT_READ | PROT_WRITE;

  CHECK(mmap(0, 0, R, MAP_SHARED, ro, 0) == MAPFAIL, "length 0");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, ro, 1) == MAPFAIL, "unaligned offset");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, ro, PGSIZE / 2) == MAPFAIL, "half-page offset");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, -1, 0) == MAPFAIL, "fd -1");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, NOFILE, 0) == MAPFAIL, "fd NOFILE");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, 15, 0) == MAPFAIL, "fd not open");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, pfd[0], 0) == MAPFAIL, "a pipe");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, 1, 0) == MAPFAIL, "the console (a device)");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, dir, 0) == MAPFAIL, "a directory");
  CHECK(mmap(0, PGSIZE, RW, MAP_SHARED, ro, 0) == MAPFAIL, "PROT_WRITE|MAP_SHARED, O_RDONLY");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, wo, 0) == MAPFAIL, "a file not open for reading");
  CHECK(mmap(0, PGSIZE, PROT_WRITE, MAP_SHARED, rw, 0) == MAPFAIL, "PROT_READ missing");
  CHECK(mmap(0, PGSIZE, 0, MAP_PRIVATE, rw, 0) == MAPFAIL, "prot 0");
  CHECK(mmap(0, PGSIZE, R | 0x100, MAP_PRIVATE, rw, 0) == MAPFAIL, "unknown prot bit");
  CHECK(mmap(0, PGSIZE, R, 0, rw, 0) == MAPFAIL, "neither shared nor private");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED | MAP_PRIVATE, rw, 0) == MAPFAIL, "both");
  CHECK(mmap(0, (uint64)1 << 40, R, MAP_SHARED, rw, 0) == MAPFAIL, "past the address space");
  CHECK(mmap(0, ~(uint64)0, R, MAP_SHARED, rw, 0) == MAPFAIL, "length ~0");
  CHECK(mmap(0, PGSIZE, R, MAP_SHARED, rw, ~(uint64)0 - 10) == MAPFAIL, "offset wraps");
  CHECK(mmap((void *)(TRAPFRAME - PGSIZE + 8), PGSIZE, R, MAP_SHARED, rw, 0) == MAPFAIL,
        "unaligned addr");
  CHECK(mmap((void *)TRAPFRAME, PGSIZE, R, MAP_SHARED, rw, 0) == MAPFAIL, "addr TRAPFRAME");
  CHECK(mmap((void *)PGSIZE, PGSIZE, R, MAP_SHARED, rw, 0) == MAPFAIL, "addr in the program");
  char *p = xmap(2 * PGSIZE, R, MAP_SHARED, rw, 0);
  CHECK(mmap(p + PGSIZE, PGSIZE, R, MAP_SHARED, rw, 0) == MAPFAIL, "overlapping addr");
  CHECK(munmap(p + 1, PGSIZE) == -1, "munmap of an unaligned address");
  CHECK(munmap(p, 0) == -1, "munmap of length 0");
  CHECK(munmap(p - 4 * PGSIZE, PGSIZE) == -1, "munmap of a hole");
  CHECK(munmap(p, 3 * PGSIZE) == -1, "munmap past the region");
  CHECK(munmap((void *)TRAPFRAME, PGSIZE) == -1, "munmap of the trapframe");
  CHECK(munmap((void *)0, PGSIZE) == -1, "munmap of the program");
  CHECK(munmap(p, 2 * PGSIZE) == 0, "munmap of the region");
  CHECK(munmap(p, 2 * PGSIZE) == -1, "a second munmap");
  // Out of regions: at most a fixed number; the one past it fails cleanly.
  char *maps[64];
  int k = 0;
  while (k < 64 && (maps[k] = mmap(0, PGSIZE, R, MAP_PRIVATE, ro, 0)) != MAPFAIL)
    k++;
  CHECK(k > 0 && k < 64, "%d regions: expected a fixed limit", k);
  for (int i = 0; i < k; i++)
    CHECK(munmap(maps[i], PGSIZE) == 0, "munmap of region %d", i);
  close(ro); close(rw); close(wo); close(dir); close(pfd[0]); close(pfd[1]);
  unlink("mm_err");
  kernel_alive();
}

// N processes map the same file: one copy of its pages in memory, not N. Each process
// keeps only the pipe ends it uses, and a child closes its ack end once it has acked, so
// a child that dies (or an mmap that fails) gives the parent end-of-file, never a hang.
#define NSHARE 4
#define SHPAGES 16
static void shareone(void)
{
  make_file("mm_four", SHPAGES * PGSIZE, 12);
  int go[2], ack[2], rel[2], pids[NSHARE];
  CHECK(pipe(go) == 0 && pipe(ack) == 0 && pipe(rel) == 0, "pipe");
  for (int i = 0; i < NSHARE; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0, "fork failed");
    if (pids[i] == 0) {
      char c;
      struct memstat m;
      close(go[1]);
      close(ack[0]);
      close(rel[1]);
      snap(&m);                    // stack pages private before the parent counts
      if (read(go[0], &c, 1) != 1)
        exit(2);
      int fd = open("mm_four", O_RDONLY);
      char *p = mmap(0, SHPAGES * PGSIZE, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAPFAIL)
        exit(3);
      for (int j = 0; j < SHPAGES; j++)
        if (p[(long)j * PGSIZE + 5] != pattern(12, (uint64)j * PGSIZE + 5))
          exit(4);
      snap(&m);
      c = m.file_pages == SHPAGES ? 'y' : 'n';
      if (write(ack[1], &c, 1) != 1)
        exit(5);
      close(ack[1]);
      if (read(rel[0], &c, 1) != 1)  // hold the mapping until the parent has counted
        exit(6);
      exit(0);
    }
  }
  close(go[0]);
  close(ack[1]);
  close(rel[0]);
  struct memstat a, b;
  snap(&a);
  snap(&a);
  CHECK(a.pagecache_pages == 0, "pagecache_pages %d before mapping", (int)a.pagecache_pages);
  CHECK(write(go[1], "gggg", NSHARE) == NSHARE, "go");
  for (int i = 0; i < NSHARE; i++) {
    char c = 0;
    CHECK(read(ack[0], &c, 1) == 1, "a child exited without its ack (its mmap failed?)");
    CHECK(c == 'y', "a child's file_pages was not %d", SHPAGES);
  }
  snap(&b);
  long drop = (long)a.free_pages - (long)b.free_pages;
  CHECK(b.pagecache_pages == SHPAGES, "pagecache_pages %d, expected %d", (int)b.pagecache_pages,
        SHPAGES);
  CHECK(drop >= SHPAGES && drop < 2 * SHPAGES,
        "%d processes mapping a %d-page file took %ld pages", NSHARE, SHPAGES, drop);
  CHECK(write(rel[1], "xxxx", NSHARE) == NSHARE, "release");
  for (int i = 0; i < NSHARE; i++) {
    int st = -99;
    CHECK(wait(&st) >= 0 && st == 0, "child failed with status %d", st);
  }
  snap(&b);
  CHECK(b.pagecache_pages == 0, "pagecache_pages %d after the children exited",
        (int)b.pagecache_pages);
  close(go[1]); close(ack[0]); close(rel[1]);
  unlink("mm_four");
}

// exit and exec remove mappings: a child that exits holding a dirty shared mapping has it
// written back; the cache is empty afterwards.
static void dirtyexit(uint64 arg)
{
  int fd = open("mm_exit", O_RDWR);
  char *p = mmap(0, PGSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAPFAIL)
    exit(2);
  p[3] = 'E';
  exit(0);   // no munmap, no close
}

static void exitwb(void)
{
  make_file("mm_exit", PGSIZE, 13);
  CHECK(child_status(dirtyexit, 0) == 0, "child failed");
  int fd = xopen("mm_exit", O_RDONLY);
  char c[4];
  CHECK(read(fd, c, 4) == 4 && c[3] == 'E' && c[2] == pattern(13, 2), "exit did not write back");
  close(fd);
  struct memstat m;
  snap(&m);
  CHECK(m.pagecache_pages == 0, "pagecache_pages %d after exit", (int)m.pagecache_pages);
  unlink("mm_exit");
}

// A file unlinked while mapped (user/llm/harts.c's arena): a MAP_SHARED page stays one
// page for a parent and its forked child; munmap writes back while an fd can still read the
// file; once the mapping holds the last reference, munmap may skip the write (nobody can
// read it), and the cache lets go of every page either way.
static void unlinked(void)
{
  char c[8];
  make_file("mm_unl", PGSIZE, 17);
  int fd = xopen("mm_unl", O_RDWR);
  char *p = xmap(PGSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(unlink("mm_unl") == 0, "unlink of a mapped file");
  p[5] = 'U';
  CHECK(munmap(p, PGSIZE) == 0, "munmap failed");
  CHECK(read(fd, c, 8) == 8 && c[5] == 'U' && c[4] == pattern(17, 4),
        "munmap did not write back a page an open fd can read");
  p = xmap(PGSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);   // the mapping holds the file's last reference from here on
  p[6] = 'P';
  int pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    p[7] = 'C';   // the same page as the parent's: no copy, in every configuration
    exit(p[6] == 'P' ? 0 : 1);
  }
  int st;
  CHECK(wait(&st) == pid && st == 0, "the child did not see the parent's store");
  CHECK(p[7] == 'C' && p[5] == 'U', "the parent did not see the child's store");
  CHECK(munmap(p, PGSIZE) == 0, "munmap of the last mapping");
  struct memstat m;
  snap(&m);
  CHECK(m.pagecache_pages == 0, "pagecache_pages %d after the last munmap",
        (int)m.pagecache_pages);
}

// A file whose last blocks are gathered in memory, not yet on the disk (appends of one
// block per call: docs/filesystem.md, "Gathered appends"): a mapping of it reads them, a
// store into a shared mapping reaches them (munmap writes it back into the gather), and
// after the close the disk has it all.
static void gathered(void)
{
  static char blk[PGSIZE];
  int n = 12;
  int fd = xopen("mm_gather", O_CREATE | O_TRUNC | O_RDWR);
  for (int i = 0; i < n; i++) {
    memset(blk, 'a' + i, PGSIZE);
    CHECK(write(fd, blk, PGSIZE) == PGSIZE, "append of block %d", i);
  }
  char *p = xmap(n * PGSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  for (int i = 0; i < n; i++)
    CHECK(p[i * PGSIZE] == 'a' + i && p[i * PGSIZE + PGSIZE - 1] == 'a' + i,
          "mapped block %d reads '%c'", i, p[i * PGSIZE]);
  p[3 * PGSIZE + 5] = 'Z';
  CHECK(munmap(p, n * PGSIZE) == 0, "munmap failed");
  close(fd);
  fd = xopen("mm_gather", O_RDONLY);
  for (int i = 0; i < n; i++) {
    CHECK(read(fd, blk, PGSIZE) == PGSIZE, "read of block %d", i);
    CHECK(blk[0] == 'a' + i && blk[5] == (i == 3 ? 'Z' : 'a' + i),
          "block %d after the close reads '%c'", i, blk[5]);
  }
  close(fd);
  unlink("mm_gather");
}

// Last: nothing is left in the page cache.
static void empty(void)
{
  struct memstat m;
  snap(&m);
  CHECK(m.pagecache_pages == 0, "pagecache_pages %d at the end", (int)m.pagecache_pages);
  CHECK(m.file_pages == 0, "file_pages %d at the end", (int)m.file_pages);
}

static const struct test tests[] = {
  { "basic", basic, 1 },
  { "private", private, 1 },
  { "shared", shared, 1 },
  { "readonly", readonly, 1 },
  { "fork", forktest, 1 },
  { "partial", partial, 1 },
  { "twofiles", twofiles, 1 },
  { "syscalls", syscalls, 1 },
  { "sameblock", sameblock, 1 },
  { "errors", errors, 1 },
  { "shareone", shareone, 1 },
  { "exitwb", exitwb, 1 },
  { "unlinked", unlinked, 1 },
  { "gathered", gathered, 1 },
  { "empty", empty, 1 },
  { 0, 0, 0 },
};

int main(int argc, char **argv)
{
  tl_init(argv[0]);
  exit(run_tests(tests, argc, argv, 1));
}
