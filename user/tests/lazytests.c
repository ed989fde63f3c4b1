// lazytests: lazy sbrk (LAZY_ALLOC=1) checked with exact page counts from memstat(), and the
// eager fallback (LAZY_ALLOC=0) where a test's lazy behaviour does not apply.
//
//   lazytests          run every test
//   lazytests NAME     run only the test NAME (oomcrowd runs only so)
//
// Every test runs in its own child; the free-page count must be back at its value from before
// the test once the child is reaped. Last line: ALL TESTS PASSED or SOME TESTS FAILED.

#include "user/tests/testlib.h"

// Two snapshots in a row: the first may itself cause a fault on the stack page (COW),
// the second is a clean baseline.
static void snap2(struct memstat *m)
{
  snap(m);
  snap(m);
}

static long dmapped(struct memstat *a, struct memstat *b) { return (long)b->mapped_pages - (long)a->mapped_pages; }
static long dpt(struct memstat *a, struct memstat *b) { return (long)b->pt_pages - (long)a->pt_pages; }
static long dused(struct memstat *a, struct memstat *b) { return tl_free(a) - tl_free(b); }

// The physical pages a step used must be the mapped pages plus the page-table pages it added.
static void check_used(struct memstat *a, struct memstat *b, const char *step)
{
  CHECK(dused(a, b) == dmapped(a, b) + dpt(a, b),
        "%s: %ld pages used but %ld mapped + %ld page-table pages", step, dused(a, b),
        dmapped(a, b), dpt(a, b));
}

// Plain sbrk past its bound (OVERCOMMIT_PCT of RAM and swap) fails and maps nothing, in both
// policies. With LAZY_ALLOC=1, sparse touches in a 1 GiB region that sbrklazy reserved map
// exactly the touched pages, one lazy fault each; shrinking frees them.
static void sparse(void)
{
  struct memstat m0, m1, m2, m3;
  const long npages = (1L << 30) / PGSIZE;
  char *p;
  int touched = 0;

  align_heap();
  snap2(&m0);
  // Plain sbrk refuses more than its bound (OVERCOMMIT_PCT of RAM and swap) in both
  // policies, and maps nothing.
  long big = (long)(m0.sbrk_cap_pages + 1024) * PGSIZE;
  CHECK(big > 0x7fffffffL || sbrk((int)big) == (char *)-1, "sbrk past its bound succeeded");
  snap(&m1);
  CHECK(m1.vpages == m0.vpages && dmapped(&m0, &m1) == 0 && dused(&m0, &m1) == 0,
        "failed sbrk changed vpages %ld->%ld mapped %ld used %ld", (long)m0.vpages,
        (long)m1.vpages, dmapped(&m0, &m1), dused(&m0, &m1));
  CHECK(m1.lazy_faults == m0.lazy_faults, "a failed sbrk counted lazy faults");
  // Lazy growth of 1 GiB, more than RAM: sbrklazy's (with LAZY_ALLOC=0 too, but there it
  // needs the lazy lab's fault path, and this check is the lazy lab's starter's to pass:
  // `usertests sbrklazy` proves that case, docs/testing.md).
  if (!m0.lazy_alloc)
    return;
  p = sbrklazy(1 << 30);
  CHECK(p != (char *)-1, "sbrklazy(1 GiB) failed");
  snap(&m1);
  CHECK((long)(m1.vpages - m0.vpages) == npages, "vpages grew by %ld", (long)(m1.vpages - m0.vpages));
  CHECK(dmapped(&m0, &m1) == 0, "sbrk mapped %ld pages", dmapped(&m0, &m1));
  CHECK(m1.lazy_faults == m0.lazy_faults, "sbrk itself counted lazy faults");
  // Store into 48 pages spread over the region, load from 16 more (they read as zero).
  for (long i = 0; i < 48; i++) {
    long pg = (i * 5471 + 3) % npages;
    p[pg * PGSIZE + (i * 8) % PGSIZE] = (char)(i + 1);
    touched++;
  }
  for (long i = 0; i < 16; i++) {
    long pg = (i * 7919 + 100001) % npages;
    CHECK(p[pg * PGSIZE + 77] == 0, "fresh lazy page not zero");
    touched++;
  }
  p[npages * PGSIZE - 1] = 9;   // the region's very last byte
  touched++;
  snap(&m2);
  CHECK(dmapped(&m1, &m2) == touched, "touched %d pages, %ld mapped", touched, dmapped(&m1, &m2));
  CHECK((long)(m2.lazy_faults - m1.lazy_faults) == touched, "touched %d pages, %ld lazy faults",
        touched, (long)(m2.lazy_faults - m1.lazy_faults));
  check_used(&m1, &m2, "touching");
  for (long i = 0; i < 48; i++) {
    long pg = (i * 5471 + 3) % npages;
    CHECK(p[pg * PGSIZE + (i * 8) % PGSIZE] == (char)(i + 1), "value lost in page %ld", pg);
  }
  snap(&m3);
  CHECK(dmapped(&m2, &m3) == 0 && m3.lazy_faults == m2.lazy_faults, "re-reading mapped more pages");
  CHECK(sbrk(-(1 << 30)) == p + (1L << 30), "shrink");
  snap(&m3);
  CHECK(dmapped(&m0, &m3) == 0, "after shrink %ld pages still mapped", dmapped(&m0, &m3));
  CHECK(dused(&m0, &m3) == dpt(&m0, &m3), "after shrink %ld pages used, %ld of them page tables",
        dused(&m0, &m3), dpt(&m0, &m3));
}

// Touching k pages of a fresh region (a quarter of RAM, at most 64 MiB, so that an eager
// sbrk fits in the smallest machine) maps exactly k; touching them again maps none.
// LAZY_ALLOC=0: sbrk maps the whole region at once and touches map nothing more.
static void touchk(void)
{
  struct memstat m0, m1, m2, m3;
  const int k = 37;
  int pages[k];
  char *p;

  align_heap();
  snap2(&m0);
  const int most = (64 << 20) / PGSIZE;
  int npages = m0.total_pages / 4 < most ? m0.total_pages / 4 : most;
  p = sbrk((long)npages * PGSIZE);
  CHECK(p != (char *)-1, "sbrk(%d pages) failed", npages);
  snap(&m1);
  CHECK(dmapped(&m0, &m1) == (m0.lazy_alloc ? 0 : npages), "sbrk(%d pages) mapped %ld pages",
        npages, dmapped(&m0, &m1));
  check_used(&m0, &m1, "sbrk");
  tl_srand(1234);
  for (int i = 0; i < k; i++) {
    int again;
    do {
      pages[i] = rnd() % npages;
      again = 0;
      for (int j = 0; j < i; j++)
        if (pages[j] == pages[i])
          again = 1;
    } while (again);
  }
  snap(&m1);
  for (int i = 0; i < k; i++) {
    char *a = p + (long)pages[i] * PGSIZE + (i * 64) % PGSIZE;
    if (i % 3 == 0)
      CHECK(*a == 0, "fresh page %d not zero", pages[i]);
    else
      *a = (char)i;
  }
  snap(&m2);
  CHECK(dmapped(&m1, &m2) == (m0.lazy_alloc ? k : 0), "touching %d pages mapped %ld", k,
        dmapped(&m1, &m2));
  CHECK((long)(m2.lazy_faults - m1.lazy_faults) == (m0.lazy_alloc ? k : 0),
        "lazy_faults grew by %ld for %d touches", (long)(m2.lazy_faults - m1.lazy_faults), k);
  check_used(&m1, &m2, "touching");
  for (int i = 0; i < k; i++)
    p[(long)pages[i] * PGSIZE + 5] = 1;
  snap(&m3);
  CHECK(dmapped(&m2, &m3) == 0, "touching the same pages again mapped %ld", dmapped(&m2, &m3));
}

// Pages spanned by [a, a+n).
static long span(char *a, long n)
{
  return (PGROUNDUP((uint64)a + n) - PGROUNDDOWN((uint64)a)) / PGSIZE;
}

// System calls read from and write into heap pages nobody has touched yet: read() from a file,
// write(), pipe(), pipe read/write, fstat(), wait(). Copies into unmapped pages map exactly
// the pages they cover (LAZY_ALLOC=1).
static void sysbuf(void)
{
  struct memstat m0, m1;
  int lazy, fd, n = 3 * PGSIZE;
  char *h;

  make_file("ltfile", n, 7);
  align_heap();
  h = sbrk(64 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  snap2(&m0);
  lazy = m0.lazy_alloc;

  // read() from a file into 4 untouched pages.
  char *rb = h + 100;
  fd = open("ltfile", O_RDONLY);
  CHECK(fd >= 0, "open ltfile");
  snap(&m0);
  CHECK(read(fd, rb, n) == n, "read into an untouched heap buffer failed");
  snap(&m1);
  close(fd);
  if (lazy)
    CHECK(dmapped(&m0, &m1) == span(rb, n), "read mapped %ld pages, buffer spans %ld",
          dmapped(&m0, &m1), span(rb, n));
  for (int i = 0; i < n; i++)
    CHECK(rb[i] == pattern(7, i), "read() data wrong at %d", i);

  // write() from untouched pages writes zeros.
  char *wb = h + 8 * PGSIZE + 1000;
  fd = open("ltzero", O_CREATE | O_WRONLY | O_TRUNC);
  CHECK(fd >= 0, "create ltzero");
  snap(&m0);
  CHECK(write(fd, wb, 2 * PGSIZE) == 2 * PGSIZE, "write from an untouched heap buffer failed");
  snap(&m1);
  close(fd);
  CHECK(dmapped(&m0, &m1) <= (lazy ? span(wb, 2 * PGSIZE) : 0), "write mapped %ld pages", dmapped(&m0, &m1));
  fd = open("ltzero", O_RDONLY);
  char small[512];
  int r, total = 0;
  while ((r = read(fd, small, sizeof(small))) > 0) {
    for (int i = 0; i < r; i++)
      CHECK(small[i] == 0, "untouched heap memory written as nonzero");
    total += r;
  }
  close(fd);
  CHECK(total == 2 * PGSIZE, "ltzero holds %d bytes", total);

  // pipe() into an untouched page, then a transfer between two untouched buffers.
  int *fds = (int *)(h + 12 * PGSIZE + 40);
  snap(&m0);
  CHECK(pipe(fds) == 0, "pipe() into an untouched heap page failed");
  snap(&m1);
  if (lazy)
    CHECK(dmapped(&m0, &m1) == 1, "pipe() mapped %ld pages", dmapped(&m0, &m1));
  char *src = h + 13 * PGSIZE, *dst = h + 20 * PGSIZE + 3;
  int pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(fds[0]);
    for (int i = 0; i < 3 * PGSIZE; i += 1111)
      src[i] = (char)i;
    exit(write(fds[1], src, 3 * PGSIZE) == 3 * PGSIZE ? 0 : 2);
  }
  close(fds[1]);
  snap(&m0);
  total = 0;
  while (total < 3 * PGSIZE && (r = read(fds[0], dst + total, 3 * PGSIZE - total)) > 0)
    total += r;
  snap(&m1);
  close(fds[0]);
  CHECK(total == 3 * PGSIZE, "pipe delivered %d bytes", total);
  for (int i = 0; i < 3 * PGSIZE; i++)
    CHECK(dst[i] == (i % 1111 == 0 ? (char)i : 0), "pipe data wrong at %d", i);
  if (lazy)
    CHECK(dmapped(&m0, &m1) == span(dst, 3 * PGSIZE), "pipe read mapped %ld pages, spans %ld",
          dmapped(&m0, &m1), span(dst, 3 * PGSIZE));

  // wait() status into an untouched page (the pipe child above is still to be reaped).
  int *stp = (int *)(h + 30 * PGSIZE + 8);
  snap(&m0);
  CHECK(wait(stp) == pid, "wait into an untouched heap page failed");
  snap(&m1);
  CHECK(*stp == 0, "pipe child status %d", *stp);
  if (lazy)
    CHECK(dmapped(&m0, &m1) == 1, "wait mapped %ld pages", dmapped(&m0, &m1));

  // fstat() into a struct straddling two untouched pages.
  struct stat *sp = (struct stat *)(h + 33 * PGSIZE - 8);
  fd = open("ltfile", O_RDONLY);
  snap(&m0);
  CHECK(fstat(fd, sp) == 0, "fstat into untouched heap pages failed");
  snap(&m1);
  close(fd);
  CHECK(sp->type == T_FILE && sp->size == (uint64)n, "fstat data wrong (type %d size %ld)",
        sp->type, (long)sp->size);
  if (lazy)
    CHECK(dmapped(&m0, &m1) == 2, "fstat mapped %ld pages, struct spans 2", dmapped(&m0, &m1));
  unlink("ltfile");
  unlink("ltzero");
}

// exec() reads its arguments from heap pages that are not mapped: argv's terminating null
// pointer and an argument's terminating zero byte lie on untouched pages.
static void execargs(void)
{
  int pid, st = -99;
  char *h;
  align_heap();
  h = sbrk(4 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    // page 0: the program path and argv[0..1] at the page's end; page 1: argv[2] (null,
    // untouched); page 2: "--lazyarg" ending at the page end; page 3: its zero (untouched).
    char **argv = (char **)(h + PGSIZE - 16);
    char *path = h + 64;
    char *arg = h + 3 * PGSIZE - 9;
    strcpy(path, tl_self);
    memmove(arg, "--lazyarg", 9);
    argv[0] = path;
    argv[1] = arg;
    exec(path, argv);
    exit(3);
  }
  CHECK(wait(&st) == pid, "wait");
  CHECK(st == 61, "exec with arguments on lazy pages: status %d, expected 61", st);
}

// sbrk(n<0) frees exactly the mapped pages of the released range.
static void shrink(void)
{
  struct memstat m0, m1, m2;
  char *p;
  int inrange = 0;
  align_heap();
  p = sbrk(256 * PGSIZE);
  CHECK(p != (char *)-1, "sbrk failed");
  for (int i = 0; i < 256; i += 6) {
    p[i * PGSIZE] = 1;
    if (i >= 128)
      inrange++;
  }
  snap2(&m0);
  long expect = m0.lazy_alloc ? inrange : 128;
  CHECK(sbrk(-128 * PGSIZE) == p + 256 * PGSIZE, "shrink return value");
  snap(&m1);
  CHECK(-dmapped(&m0, &m1) == expect, "shrink unmapped %ld pages, expected %ld", -dmapped(&m0, &m1), expect);
  CHECK(-dused(&m0, &m1) == expect - dpt(&m0, &m1), "shrink freed %ld pages, expected %ld (+%ld page tables)",
        -dused(&m0, &m1), expect, -dpt(&m0, &m1));
  for (int i = 0; i < 128; i += 6)
    CHECK(p[i * PGSIZE] == 1, "kept page %d lost its data", i);
  // Regrow: the pages come back unmapped (lazy) and zero.
  CHECK(sbrk(128 * PGSIZE) == p + 128 * PGSIZE, "regrow");
  snap(&m2);
  CHECK(dmapped(&m1, &m2) == (m0.lazy_alloc ? 0 : 128), "regrow mapped %ld", dmapped(&m1, &m2));
  for (int i = 128; i < 256; i += 6)
    CHECK(p[i * PGSIZE] == 0, "regrown page %d not zero", i);
}

// The pages of a fresh region around [a, a+n) must read zero outside [a, a+n): a copy into
// user memory wrote nothing past its ends.
static void check_zero_around(char *a, long n, const char *what)
{
  char *lo = (char *)PGROUNDDOWN((uint64)a), *hi = (char *)PGROUNDUP((uint64)a + n);
  for (char *q = lo; q < a; q++)
    CHECK(*q == 0, "%s wrote %ld bytes before its buffer", what, (long)(a - q));
  for (char *q = a + n; q < hi; q++)
    CHECK(*q == 0, "%s wrote past its buffer at +%ld", what, (long)(q - a - n));
}

// copyout/copyin over several never-touched heap pages: read() from a file into a buffer
// spanning 3 untouched pages, write() from another such span (it writes zeroes), and
// read() of the written file into a third span. LAZY_ALLOC=1: each copy maps the pages
// it covers, one lazy fault each, and nothing else; LAZY_ALLOC=0: it maps nothing.
static void spanrw(void)
{
  struct memstat m0, m1;
  const int n = 2 * PGSIZE + 1000;   // from +1000 in a page: exactly 3 pages
  int fd, lazy;
  char *h;

  make_file("ltspan", n, 11);
  align_heap();
  h = sbrk(16 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  char *rb = h + PGSIZE + 1000, *wb = h + 5 * PGSIZE + 1000, *back = h + 9 * PGSIZE + 1000;
  CHECK(span(rb, n) == 3 && span(wb, n) == 3 && span(back, n) == 3, "spans miscounted");

  fd = open("ltspan", O_RDONLY);
  CHECK(fd >= 0, "open ltspan");
  snap2(&m0);
  lazy = m0.lazy_alloc;
  CHECK(read(fd, rb, n) == n, "read() into 3 untouched pages failed");
  snap(&m1);
  close(fd);
  CHECK(dmapped(&m0, &m1) == (lazy ? 3 : 0), "read() into 3 untouched pages mapped %ld",
        dmapped(&m0, &m1));
  CHECK((long)(m1.lazy_faults - m0.lazy_faults) == dmapped(&m0, &m1),
        "read(): %ld lazy faults for %ld pages mapped", (long)(m1.lazy_faults - m0.lazy_faults),
        dmapped(&m0, &m1));
  for (int i = 0; i < n; i++)
    CHECK(rb[i] == pattern(11, i), "read() data wrong at %d", i);
  check_zero_around(rb, n, "read()");

  fd = open("ltspan0", O_CREATE | O_WRONLY | O_TRUNC);
  CHECK(fd >= 0, "create ltspan0");
  snap2(&m0);
  CHECK(write(fd, wb, n) == n, "write() from 3 untouched pages failed");
  snap(&m1);
  close(fd);
  CHECK(dmapped(&m0, &m1) <= (lazy ? 3 : 0), "write() from 3 untouched pages mapped %ld",
        dmapped(&m0, &m1));
  CHECK((long)(m1.lazy_faults - m0.lazy_faults) == dmapped(&m0, &m1),
        "write(): %ld lazy faults for %ld pages mapped", (long)(m1.lazy_faults - m0.lazy_faults),
        dmapped(&m0, &m1));

  fd = open("ltspan0", O_RDONLY);
  CHECK(fd >= 0, "open ltspan0");
  snap2(&m0);
  CHECK(read(fd, back, n + 1) == n, "ltspan0 does not hold %d bytes", n);
  snap(&m1);
  close(fd);
  CHECK(dmapped(&m0, &m1) == (lazy ? 3 : 0), "read() back mapped %ld", dmapped(&m0, &m1));
  for (int i = 0; i < n; i++)
    CHECK(back[i] == 0, "untouched heap memory written as %d at %d", back[i], i);
  unlink("ltspan");
  unlink("ltspan0");
}

// copyinstr from untouched heap: a path whose name fills the end of one page and whose
// terminating zero is the first byte of the next, never-touched page, for open(O_CREATE),
// open() and unlink(). LAZY_ALLOC=1: the first call maps that one page.
static void pathstr(void)
{
  struct memstat m0, m1;
  static const char name[] = "ltpathname";
  const int len = sizeof(name) - 1;
  int fd;
  char *h;

  align_heap();
  h = sbrk(4 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  char *path = h + 2 * PGSIZE - len;   // its zero: h + 2 * PGSIZE, untouched
  memmove(path, name, len);
  snap2(&m0);
  fd = open(path, O_CREATE | O_WRONLY);
  snap(&m1);
  CHECK(fd >= 0, "open(O_CREATE) of a path ending on an untouched page failed");
  CHECK(write(fd, "x", 1) == 1, "write");
  close(fd);
  CHECK(dmapped(&m0, &m1) == (m0.lazy_alloc ? 1 : 0), "open() mapped %ld pages",
        dmapped(&m0, &m1));
  CHECK(path[len] == 0, "the page after the name is not zero");
  // The kernel read exactly the name: the file is there under it, and nowhere else.
  fd = open(name, O_RDONLY);
  CHECK(fd >= 0, "%s not created under its name", name);
  close(fd);
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "open() through the heap path failed");
  close(fd);
  CHECK(unlink(path) == 0, "unlink() through the heap path failed");
  CHECK(open(name, O_RDONLY) < 0, "%s still there after unlink", name);
}

// Pipes to and from untouched heap: a child writes a pattern that the parent reads into 3
// untouched pages (LAZY_ALLOC=1: exactly those mapped); the parent writes 3 untouched
// pages that the child reads into a buffer it filled with 0xff: all zeroes arrive.
static void pipeheap(void)
{
  struct memstat m0, m1;
  const int n = 2 * PGSIZE + 1000;
  int to_parent[2], to_child[2], pid, st = -99, total = 0, r;
  char *h;

  align_heap();
  h = sbrk(12 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    static char buf[2 * PGSIZE + 1000];
    close(to_parent[0]);
    close(to_child[1]);
    for (int i = 0; i < n; i++)
      buf[i] = pattern(3, i);
    if (write(to_parent[1], buf, n) != n)
      exit(2);
    close(to_parent[1]);
    memset(buf, 0xff, n);
    while (total < n && (r = read(to_child[0], buf + total, n - total)) > 0)
      total += r;
    if (total != n)
      exit(3);
    for (int i = 0; i < n; i++)
      if (buf[i] != 0)
        exit(4);
    exit(0);
  }
  close(to_parent[1]);
  close(to_child[0]);
  // Both transfers and the wait come first: a failed check must not leave the child
  // running (its pages would still be in use when the runner checks for leaks).
  char *dst = h + PGSIZE + 1000, *src = h + 6 * PGSIZE + 1000;
  struct memstat w0, w1;
  snap2(&m0);
  while (total < n && (r = read(to_parent[0], dst + total, n - total)) > 0)
    total += r;
  snap(&m1);
  close(to_parent[0]);
  snap2(&w0);
  int wrote = write(to_child[1], src, n);
  snap(&w1);
  close(to_child[1]);
  int waited = wait(&st);
  CHECK(waited == pid, "wait");
  CHECK(total == n, "pipe delivered %d of %d bytes", total, n);
  CHECK(dmapped(&m0, &m1) == (m0.lazy_alloc ? 3 : 0), "pipe read into 3 untouched pages mapped %ld",
        dmapped(&m0, &m1));
  for (int i = 0; i < n; i++)
    CHECK(dst[i] == pattern(3, i), "pipe data wrong at %d", i);
  check_zero_around(dst, n, "pipe read");
  CHECK(wrote == n, "pipe write from 3 untouched pages wrote %d of %d", wrote, n);
  CHECK(dmapped(&w0, &w1) <= (m0.lazy_alloc ? 3 : 0), "pipe write mapped %ld", dmapped(&w0, &w1));
  CHECK(st == 0, "child status %d (2: its write, 3: short read, 4: nonzero byte)", st);
}

// exec() with arguments that are empty strings on three never-touched heap pages (each
// pointer points at a page nobody wrote) and argv's null on a fourth.
static void execempty(void)
{
  int pid, st = -99;
  char *h;
  align_heap();
  h = sbrk(8 * PGSIZE);
  CHECK(h != (char *)-1, "sbrk failed");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    char **argv = (char **)(h + 2 * PGSIZE - 5 * sizeof(char *));   // argv[5]: page 2
    char *flag = h + 64;
    strcpy(flag, "--lazyempty");
    argv[0] = tl_self;
    argv[1] = flag;
    argv[2] = h + 3 * PGSIZE;
    argv[3] = h + 4 * PGSIZE + 100;
    argv[4] = h + 6 * PGSIZE - 1;
    exec(tl_self, argv);
    exit(3);
  }
  CHECK(wait(&st) == pid, "wait");
  CHECK(st == 62, "exec with empty arguments on untouched pages: status %d, expected 62", st);
}

// The program side of execempty: exactly argv[0], "--lazyempty" and three empty strings.
static int lazyempty_ok(int argc, char **argv)
{
  if (argc != 5 || strcmp(argv[1], "--lazyempty") != 0)
    return 0;
  for (int i = 2; i < 5; i++)
    if (argv[i][0] != 0)
      return 0;
  return argv[5] == 0;
}

static void store_at(uint64 va) { *(volatile char *)va = 1; }

// sbrk(n<0) to a break in the middle of a page below mapped pages: every page wholly above
// the new break is unmapped and freed (the break's own page stays), a store into the first
// of them kills, and growing again gives pages that read zero.
static void shrinkbelow(void)
{
  struct memstat m0, m1, m2;
  char *p;
  align_heap();
  p = sbrk(8 * PGSIZE);
  CHECK(p != (char *)-1, "sbrk failed");
  for (int i = 0; i < 8; i++)
    memset(p + i * PGSIZE, i + 1, PGSIZE);
  snap2(&m0);
  char *brk = p + 2 * PGSIZE + 100;   // pages 3..7 go, page 2 stays
  CHECK(sbrk(-(6 * PGSIZE - 100)) == p + 8 * PGSIZE, "shrink return value");
  CHECK(sbrk(0) == brk, "break at %p, expected %p", sbrk(0), brk);
  snap(&m1);
  CHECK(-dmapped(&m0, &m1) == 5, "shrink below 5 mapped pages unmapped %ld", -dmapped(&m0, &m1));
  CHECK(-dused(&m0, &m1) == 5 - dpt(&m0, &m1), "shrink freed %ld pages, expected 5 (+%ld page tables)",
        -dused(&m0, &m1), -dpt(&m0, &m1));
  CHECK(m1.vpages == m0.vpages - 5, "vpages %ld -> %ld", (long)m0.vpages, (long)m1.vpages);
  for (int i = 0; i < 2 * PGSIZE + 100; i += 512)
    CHECK(p[i] == (char)(i / PGSIZE + 1), "kept byte %d lost", i);
  int st = child_status(store_at, (uint64)p + 3 * PGSIZE);
  CHECK(st == -1, "store above the new break: status %d, expected -1 (killed)", st);
  st = child_status(store_at, (uint64)p + 7 * PGSIZE + 5);
  CHECK(st == -1, "store into the old last page: status %d, expected -1 (killed)", st);
  snap(&m2);
  CHECK(dmapped(&m1, &m2) == 0, "the killed children changed the mapping by %ld", dmapped(&m1, &m2));
  CHECK(sbrk(5 * PGSIZE) == brk, "regrow");
  for (int i = 3 * PGSIZE; i < 8 * PGSIZE; i++)
    CHECK(p[i] == 0, "regrown byte %d is %d, not zero", i, p[i]);
}

static void load_at(uint64 va) { if (*(volatile char *)va == 123) exit(9); }

static void expect_killed(void (*f)(uint64), uint64 va, const char *what)
{
  int st = child_status(f, va);
  CHECK(st == -1, "%s at %p: status %d, expected -1 (killed)", what, (void *)va, st);
}

// Faults above the heap top (after a lazy sbrk), on the stack guard page and on kernel
// addresses kill the process; the kernel goes on.
static void badfault(void)
{
  char *p;
  align_heap();
  p = sbrk(16 * PGSIZE + 100);
  CHECK(p != (char *)-1, "sbrk failed");
  uint64 top = PGROUNDUP((uint64)sbrk(0));
  expect_killed(load_at, top, "load just above the heap");
  expect_killed(store_at, top + 40 * PGSIZE, "store above the heap");
  expect_killed(load_at, guard_page() + 16, "load from the guard page");
  expect_killed(store_at, guard_page() + 16, "store to the guard page");
  expect_killed(store_at, KERNBASE, "store to KERNBASE");
  expect_killed(load_at, TRAPFRAME + 8, "load from the trapframe");
  expect_killed(load_at, MAXVA + 8 * PGSIZE, "load above MAXVA");
  // Inside the heap, the last partial page is fine.
  CHECK(child_status(store_at, (uint64)p + 16 * PGSIZE + 99) == 0, "store to the heap's last byte");
  // A region released by sbrk(n<0) faults again.
  sbrk(-8 * PGSIZE);
  expect_killed(store_at, (uint64)p + 12 * PGSIZE, "store into a released region");
  kernel_alive();
}

// Out of memory on a lazy fault kills the culprit only: a sibling holding memory keeps its
// data, and every page comes back. LAZY_ALLOC=0: the too-big sbrk fails and maps nothing.
static void lazyoom(void)
{
  struct memstat m0, m1;
  int ready[2], go[2], sib, culprit, st;
  char c;
  snap2(&m0);
  CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
  sib = fork();
  CHECK(sib >= 0, "fork");
  if (sib == 0) {
    // Without its own write end of go, the sibling's read ends (0) when the parent dies of a
    // failed check instead of blocking with its 4 MiB for ever.
    close(go[1]);
    close(ready[0]);
    char *q = sbrk(4 << 20);
    if (q == (char *)-1)
      exit(2);
    for (int i = 0; i < (4 << 20); i += 512)
      q[i] = (char)(i >> 9);
    write(ready[1], "r", 1);
    read(go[0], &c, 1);
    for (int i = 0; i < (4 << 20); i += 512)
      if (q[i] != (char)(i >> 9))
        exit(3);
    exit(0);
  }
  CHECK(read(ready[0], &c, 1) == 1, "sibling did not start");
  culprit = fork();
  CHECK(culprit >= 0, "fork");
  if (culprit == 0) {
    struct memstat a, b;
    snap2(&a);
    uint64 want = (tl_room(&a) + 8192) * PGSIZE, got = 0;
    if (!a.lazy_alloc) {
      if (want < 0x7fffffffUL && sbrk((int)want) != (char *)-1)
        exit(4);   // sbrk larger than free memory succeeded without LAZY_ALLOC
      snap(&b);
      exit(b.mapped_pages == a.mapped_pages && b.vpages == a.vpages ? 0 : 5);
    }
    while (got < want) {
      if (sbrklazy(1 << 26) == (char *)-1)   // maybe past what plain sbrk allows
        exit(6);
      got += 1 << 26;
    }
    char *base = sbrk(0) - got;
    for (uint64 off = 0; off < got; off += PGSIZE)
      base[off] = 1;
    exit(7);
  }
  st = -99;
  CHECK(wait(&st) == culprit, "wait culprit");
  CHECK(st == (m0.lazy_alloc ? -1 : 0), "culprit exit status %d", st);
  write(go[1], "g", 1);
  CHECK(wait(&st) == sib && st == 0, "sibling lost its memory (status %d)", st);
  close(ready[0]); close(ready[1]); close(go[0]); close(go[1]);
  kernel_alive();
  snap(&m1);
  CHECK(tl_free(&m1) == tl_free(&m0), "free pages %ld before, %ld after", tl_free(&m0),
        tl_free(&m1));
}

// One hog of oomcrowd: touch n fresh heap pages (each one stamped), say so on done and
// close it, wait until go is closed, then check the stamps: exit 0, or 3 for a stamp lost. Killed for
// memory on the way, it exits -1. LAZY_ALLOC=0: an sbrk that does not fit fails; exit 0.
static void hog(uint64 n, int done, int go)
{
  char c;
  char *q = sbrk((int)(n * PGSIZE));
  if (q == (char *)-1)
    exit(0);
  for (uint64 i = 0; i < n; i++)
    q[i * PGSIZE] = (char)(i + 1);
  write(done, "d", 1);
  close(done);   // oomcrowd reads done to its end
  read(go, &c, 1);
  for (uint64 i = 0; i < n; i++)
    if (q[i * PGSIZE] != (char)(i + 1))
      exit(3);
  exit(0);
}

#define CROWD 6          // hogs faulting at once
#define SMALL_PAGES 256  // the heap pages the small process grows by under that pressure
#define LOW_PAGES 16     // "memory is gone": fewer free pages than this

// Out of memory with a crowd: CROWD processes each touch a third of the free RAM, at once,
// so that several fault with no page left at the same moment, while this small process
// grows its own heap by SMALL_PAGES pages as soon as memory is gone. The OOM killer
// (docs/memory.md, "Out of memory") must take hogs, the largest, and never this process,
// however many hogs are waiting in it; a hog either keeps every stamp or is killed, and
// every page comes back. With a swap disk (4x RAM in the tests) the twice-RAM crowd fits:
// pages go out and come back, and nobody is killed. LAZY_ALLOC=0 without swap: sbrk
// refuses what does not fit; nobody is killed either.
static void oomcrowd(void)
{
  struct memstat m0, m;
  int pids[CROWD], done[2], go[2], st, killed = 0, finished = 0;
  char c;
  snap2(&m0);
  uint64 each = m0.free_pages / 3;
  CHECK(pipe(done) == 0 && pipe(go) == 0, "pipe");
  for (int k = 0; k < CROWD; k++) {
    pids[k] = fork();
    CHECK(pids[k] >= 0, "fork");
    if (pids[k] == 0) {
      // Without a write end of go, a hog's read ends (0) if this process dies first.
      close(go[1]);
      close(done[0]);
      hog(each, done[1], go[0]);
    }
  }
  close(done[1]);
  close(go[0]);
  // Touch each page when the hogs have used up memory, so that its fault finds none: wait
  // for that a tick at a time, up to 10 s the first time, then up to 0.2 s a page; a wait
  // in vain means the killing is over (memory stays free), and the rest go at once.
  char *p = sbrk(SMALL_PAGES * PGSIZE);
  CHECK(p != (char *)-1, "sbrk of %d pages", SMALL_PAGES);
  int patience = m0.lazy_alloc && m0.swap_slots == 0 ? 1000 : 0;
  for (int i = 0; i < SMALL_PAGES; i++) {
    int t = 0;
    for (; t < patience; t++) {
      snap(&m);
      if (m.free_pages < LOW_PAGES)
        break;
      pause(1);
    }
    patience = t == patience ? 0 : 20;
    p[i * PGSIZE] = (char)(i + 1);
  }
  for (int i = 0; i < SMALL_PAGES; i++)
    CHECK(p[i * PGSIZE] == (char)(i + 1), "the small process's page %d lost its stamp", i);
  // Every hog still alive has touched all its pages (a killed one closed its end of done).
  while (read(done[0], &c, 1) == 1)
    ;
  close(go[1]);
  for (int k = 0; k < CROWD; k++) {
    st = -99;
    CHECK(wait(&st) > 0, "wait");
    CHECK(st == 0 || st == -1, "a hog exited with %d (3: its memory changed)", st);
    if (st == -1)
      killed++;
    else
      finished++;
  }
  close(done[0]);
  // Lazy, every hog's sbrk fits, and together they ask for twice the RAM: without swap
  // some must die, and some fit once they have; swap has room for them all.
  if (m0.swap_slots > 2 * m0.free_pages)
    CHECK(killed == 0, "%d hogs killed with room in swap", killed);
  else if (m0.lazy_alloc)
    CHECK(killed > 0 && finished > 0, "%d hogs killed, %d finished", killed, finished);
  sbrk(-SMALL_PAGES * PGSIZE);
  kernel_alive();
}

// fork copies (or shares) only what is mapped: the child has the parent's mapped-page count,
// sees the parent's data, and finds untouched pages zero.
static void forkholes(void)
{
  struct memstat m0;
  char *p;
  int pid, st = -99;
  align_heap();
  p = sbrk(512 * PGSIZE);
  CHECK(p != (char *)-1, "sbrk failed");
  for (int i = 0; i < 512; i += 50)
    p[i * PGSIZE + 1] = (char)(i + 1);
  snap2(&m0);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    struct memstat c;
    if (memstat(&c) < 0 || memstat(&c) < 0)
      exit(2);
    if (c.mapped_pages != m0.mapped_pages)
      exit(3);
    for (int i = 0; i < 512; i++)
      if (p[i * PGSIZE + 1] != (i % 50 == 0 ? (char)(i + 1) : 0))
        exit(4);
    exit(0);
  }
  CHECK(wait(&st) == pid, "wait");
  CHECK(st != 3, "child's mapped pages differ from the parent's");
  CHECK(st == 0, "child status %d", st);
}

static const struct test tests[] = {
  { "sparse", sparse, 1 },
  { "touchk", touchk, 1 },
  { "sysbuf", sysbuf, 1 },
  { "execargs", execargs, 1 },
  { "shrink", shrink, 1 },
  { "badfault", badfault, 1 },
  { "forkholes", forkholes, 1 },
  { "spanrw", spanrw, 1 },
  { "pathstr", pathstr, 1 },
  { "pipeheap", pipeheap, 1 },
  { "execempty", execempty, 1 },
  { "shrinkbelow", shrinkbelow, 1 },
  { "lazyoom", lazyoom, 1 },
  { "oomcrowd", oomcrowd, NAMED_ONLY },   // fills all of RAM twice: tests/kernel/test_lazytests.py
  { 0, 0, 0 },
};

int main(int argc, char **argv)
{
  tl_init(argv[0]);
  if (argc == 2 && strcmp(argv[1], "--lazyarg") == 0)
    exit(61);
  if (argc >= 2 && strcmp(argv[1], "--lazyempty") == 0)
    exit(lazyempty_ok(argc, argv) ? 62 : 63);
  exit(run_tests(tests, argc, argv, 1));
}
