// cowtests: copy-on-write fork (COW_ALLOC=1) checked with exact counts from memstat(), and the
// copying fallback (COW_ALLOC=0) where a test's COW behaviour does not apply.
//
//   cowtests          run every test
//   cowtests NAME     run only the test NAME
//
// Every test runs in its own child; the free-page count must be back at its value from before
// the test once the child is reaped. Last line: ALL TESTS PASSED or SOME TESTS FAILED.
//
// Counting notes: memstat() copies its snapshot out to the caller's stack, and after a fork
// the stack page is itself COW, so the first snapshot may cause one COW fault of its own.
// snap2() takes two snapshots and keeps the second, a baseline with the stack page private.

#include "user/tests/testlib.h"

static void snap2(struct memstat *m)
{
  snap(m);
  snap(m);
}

// Grow the heap by n pages, starting on a page boundary, and write a word into each
// (mapping them in every configuration).
static char *grab(int n)
{
  char *t = sbrk(0);
  uint64 pad = PGROUNDUP((uint64)t) - (uint64)t;
  if (pad)
    CHECK(sbrk(pad) == t, "sbrk to align the heap failed");
  char *p = sbrk(n * PGSIZE);
  CHECK(p != (char *)-1, "sbrk of %d pages failed", n);
  for (int i = 0; i < n; i++)
    *(int *)(p + (long)i * PGSIZE) = i * 3 + 1;
  return p;
}

static long delta(uint64 before, uint64 after) { return (long)after - (long)before; }

// A child of a process that uses more than half of memory: with COW the fork succeeds,
// the child sees the data and pays only for what it writes; a child that writes everything
// runs out of memory and is killed, not the kernel. Without COW the fork fails with -1 and
// leaks nothing. With swap (swap_slots > 0) the memory is there: the fork succeeds in both
// configurations and the child that writes everything pages out and finishes (running
// out of swap too is swaptest's subject).
static void bigfork(void)
{
  struct memstat m0, m1;
  int n, pid, st = -99;
  char *p;
  snap2(&m0);
  n = (int)(m0.total_pages * 6 / 10);
  p = grab(n);
  snap2(&m0);
  int swap = m0.swap_slots > 0;
  pid = fork();
  if (!m0.cow_alloc && !swap) {
    if (pid == 0)
      exit(0);
    CHECK(pid == -1, "fork of a %d-page process succeeded without COW", n);
    snap(&m1);
    CHECK(tl_free(&m1) == tl_free(&m0), "failed fork leaked %ld pages",
          tl_free(&m0) - tl_free(&m1));
    CHECK(m1.cow_faults == 0 && m1.shared_pages == 0, "COW counters moved without COW");
  } else {
    CHECK(pid >= 0, "fork of a %d-page process failed (COW_ALLOC=%d, swap %s)", n,
          m0.cow_alloc, swap ? "on" : "off");
    if (pid == 0) {
      struct memstat a, b;
      snap2(&a);
      if (a.cow_alloc && a.shared_pages + a.swapped_pages < (uint64)n)
        exit(2);   // with swap, some of the parent's pages were paged out before the fork
      for (int i = 0; i < n; i += 97)
        if (*(int *)(p + (long)i * PGSIZE) != i * 3 + 1)
          exit(3);
      for (int i = 0; i < 10; i++)   // ten pages spread over the region, at any RAM size
        p[(long)i * (n / 10) * PGSIZE + 8] = 1;
      snap(&b);
      // A page the fork found paged out comes back private (swap.c): no COW copy then.
      uint64 copies = b.cow_copies - a.cow_copies;
      exit(!a.cow_alloc || copies == 10 || (a.swapped_pages > 0 && copies < 10) ? 0 : 4);
    }
    CHECK(wait(&st) == pid, "wait");
    CHECK(st == 0, "child of a big process failed (status %d)", st);
    // This child writes every page: without swap, memory runs out during a COW fault and
    // it is killed; with swap it finishes.
    pid = fork();
    CHECK(pid >= 0, "second fork failed");
    if (pid == 0) {
      for (int i = 0; i < n; i++)
        *(int *)(p + (long)i * PGSIZE) = -1;
      exit(5);
    }
    if (wait(&st) != pid) {
      // Reap without a status (no copyout) so that memory comes back before printing.
      int got = wait(0);
      FAIL("wait(&status) failed after a child died of out-of-memory in a COW fault (wait(0) "
           "then returned %d): the status copyout into this process's still-shared stack page "
           "needs a page the unreaped zombie holds", got);
    }
    CHECK(st == (swap ? 5 : -1), "child writing %d shared pages: status %d, expected %d", n, st,
          swap ? 5 : -1);
    snap(&m1);
    CHECK(tl_free(&m1) == tl_free(&m0), "free pages %ld before the forks, %ld after",
          tl_free(&m0), tl_free(&m1));
  }
  for (int i = 0; i < n; i++)
    CHECK(*(int *)(p + (long)i * PGSIZE) == i * 3 + 1, "parent's page %d changed", i);
  sbrk(-n * PGSIZE);
  kernel_alive();
}

// Three processes write the same (shared) pages; each sees only its own values.
static void threeway(void)
{
  enum { N = 8 };
  int ready[2], go[2], pids[2], st;
  char c, *p = grab(N);
  CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
  for (int k = 0; k < 3; k++) {
    int me = k;
    if (k < 2) {
      pids[k] = fork();
      CHECK(pids[k] >= 0, "fork");
      if (pids[k] != 0)
        continue;
    }
    // Process `me` (2 = the parent): write, sync, then check its own values.
    for (int i = 0; i < N * PGSIZE; i += 256)
      p[i] = (char)(me * 50 + i / 256);
    if (me < 2) {
      write(ready[1], "r", 1);
      read(go[0], &c, 1);
    } else {
      CHECK(read(ready[0], &c, 1) == 1 && read(ready[0], &c, 1) == 1, "children not ready");
      write(go[1], "gg", 2);
    }
    for (int i = 0; i < N * PGSIZE; i += 256)
      if (p[i] != (char)(me * 50 + i / 256)) {
        if (me < 2)
          exit(2);
        FAIL("parent sees another process's value at %d", i);
      }
    if (me < 2)
      exit(0);
  }
  for (int k = 0; k < 2; k++) {
    CHECK(wait(&st) > 0, "wait");
    CHECK(st == 0, "a child saw another process's value (status %d)", st);
  }
}

// read() from a file into a COW buffer copies the pages for the reader only.
static void readcow(void)
{
  enum { N = 4 };
  int pid, fd, st = -99;
  char *p = grab(N);
  memset(p, 'p', N * PGSIZE);
  make_file("ctfile", N * PGSIZE, 11);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    struct memstat a, b;
    fd = open("ctfile", O_RDONLY);
    CHECK(fd >= 0, "open");
    snap2(&a);
    CHECK(read(fd, p, N * PGSIZE) == N * PGSIZE, "read into a COW buffer failed");
    snap(&b);
    for (int i = 0; i < N * PGSIZE; i++)
      CHECK(p[i] == pattern(11, i), "read data wrong at %d", i);
    long w = a.cow_alloc ? N : 0;
    CHECK(delta(a.cow_faults, b.cow_faults) == w && delta(a.cow_copies, b.cow_copies) == w,
          "read into %d COW pages: %ld faults, %ld copies", N, delta(a.cow_faults, b.cow_faults),
          delta(a.cow_copies, b.cow_copies));
    exit(0);
  }
  CHECK(wait(&st) == pid && st == 0, "child status %d", st);
  for (int i = 0; i < N * PGSIZE; i++)
    CHECK(p[i] == 'p', "the child's read() changed the parent's buffer at %d", i);
  unlink("ctfile");
}

// Pipes between parent and child whose buffers are COW pages: writing from a COW page needs
// no copy; reading into one copies; each side keeps its own data.
static void pipecow(void)
{
  enum { N = 3 };
  int c2p[2], p2c[2], pid, st = -99, got, r;
  char *a = grab(N), *b = grab(N);
  for (int i = 0; i < N * PGSIZE; i++) {
    a[i] = pattern(21, i);
    b[i] = 'b';
  }
  CHECK(pipe(c2p) == 0 && pipe(p2c) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    struct memstat m0, m1;
    close(c2p[0]);
    close(p2c[1]);
    snap2(&m0);
    CHECK(write(c2p[1], a, N * PGSIZE) == N * PGSIZE, "child write");
    snap(&m1);
    CHECK(m1.cow_faults == m0.cow_faults, "write() from a COW buffer caused %ld COW faults",
          delta(m0.cow_faults, m1.cow_faults));
    for (got = 0; got < N * PGSIZE; got += r)
      CHECK((r = read(p2c[0], b + got, N * PGSIZE - got)) > 0, "child read");
    for (int i = 0; i < N * PGSIZE; i++)
      CHECK(b[i] == pattern(22, i) && a[i] == pattern(21, i), "child data wrong at %d", i);
    exit(0);
  }
  close(c2p[1]);
  close(p2c[0]);
  for (got = 0; got < N * PGSIZE; got += r)
    CHECK((r = read(c2p[0], b + got, N * PGSIZE - got)) > 0, "parent read");
  for (int i = 0; i < N * PGSIZE; i++)
    CHECK(b[i] == pattern(21, i), "parent received wrong data at %d", i);
  for (int i = 0; i < N * PGSIZE; i++)
    b[i] = pattern(22, i);
  CHECK(write(p2c[1], b, N * PGSIZE) == N * PGSIZE, "parent write");
  CHECK(wait(&st) == pid && st == 0, "child status %d", st);
  for (int i = 0; i < N * PGSIZE; i++)
    CHECK(a[i] == pattern(21, i), "parent's a[] changed at %d", i);
  close(c2p[0]);
  close(p2c[1]);
}

// Exact counts. Right after fork the child's mapped pages are all shared but its stack page;
// a child writing w distinct pages makes exactly w copies (shared_pages falls by w, w pages
// used); the parent writing a page the child already copied takes it back (one reuse, no
// copy); writing a page still shared copies it.
static void counts(void)
{
  enum { N = 16, W = 5 };
  int c2p[2], p2c[2], pid, st = -99;
  char c, *p = grab(N);
  CHECK(pipe(c2p) == 0 && pipe(p2c) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    // Each side keeps only its own ends, so that either one dying ends the other's read.
    close(c2p[0]);
    close(p2c[1]);
    struct memstat a, b, d;
    snap2(&a);
    if (a.cow_alloc)
      CHECK(a.shared_pages == a.mapped_pages - 1,
            "child right after fork: %ld shared of %ld mapped, expected all but the stack page",
            (long)a.shared_pages, (long)a.mapped_pages);
    else
      CHECK(a.shared_pages == 0, "%ld shared pages without COW", (long)a.shared_pages);
    for (int i = 0; i < W; i++)
      p[i * PGSIZE + 100] = 7;
    snap(&b);
    long w = a.cow_alloc ? W : 0;
    CHECK(delta(a.cow_copies, b.cow_copies) == w, "child wrote %d pages: %ld copies", W,
          delta(a.cow_copies, b.cow_copies));
    CHECK(delta(a.cow_faults, b.cow_faults) == w && b.cow_reuses == a.cow_reuses,
          "child: %ld COW faults, %ld reuses", delta(a.cow_faults, b.cow_faults),
          delta(a.cow_reuses, b.cow_reuses));
    CHECK(delta(b.shared_pages, a.shared_pages) == w, "shared pages fell by %ld",
          delta(b.shared_pages, a.shared_pages));
    CHECK(tl_free(&a) - tl_free(&b) == w && b.mapped_pages == a.mapped_pages,
          "child's writes used %ld pages", tl_free(&a) - tl_free(&b));
    for (int i = 0; i < W; i++)
      p[i * PGSIZE + 200] = 8;
    snap(&d);
    CHECK(d.cow_faults == b.cow_faults, "writing copied pages again faulted");
    write(c2p[1], "w", 1);
    read(p2c[0], &c, 1);   // stay alive (sharing the other pages) until the parent is done
    exit(0);
  }
  close(c2p[1]);
  close(p2c[0]);
  struct memstat a, b, d;
  CHECK(read(c2p[0], &c, 1) == 1, "child did not report");
  snap2(&a);
  p[0 * PGSIZE + 300] = 9;     // the child copied page 0: the parent is its sole owner
  snap(&b);
  p[10 * PGSIZE + 300] = 9;    // page 10 is still shared with the child
  snap(&d);
  write(p2c[1], "d", 1);
  CHECK(wait(&st) == pid, "wait");
  CHECK(st == 0, "child failed (status %d)", st);
  long cow = a.cow_alloc;
  CHECK(delta(a.cow_reuses, b.cow_reuses) == cow && b.cow_copies == a.cow_copies,
        "parent writing a page the child copied: %ld reuses, %ld copies",
        delta(a.cow_reuses, b.cow_reuses), delta(a.cow_copies, b.cow_copies));
  CHECK(tl_free(&b) == tl_free(&a), "a reuse used %ld pages", tl_free(&a) - tl_free(&b));
  CHECK(delta(b.cow_copies, d.cow_copies) == cow && d.cow_reuses == b.cow_reuses,
        "parent writing a shared page: %ld copies, %ld reuses", delta(b.cow_copies, d.cow_copies),
        delta(b.cow_reuses, d.cow_reuses));
  CHECK(tl_free(&b) - tl_free(&d) == cow, "a copy used %ld pages", tl_free(&b) - tl_free(&d));
  CHECK(p[300] == 9 && p[100] == 0 && p[10 * PGSIZE + 100] == 0, "parent sees the child's writes");
}

// Once the child is gone, the parent owns every page alone: writing them reuses each page
// with no copy and no new memory.
static void reuse(void)
{
  enum { N = 16 };
  struct memstat a, b;
  int pid, st = -99;
  char *p = grab(N);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0)
    exit(0);
  CHECK(wait(&st) == pid && st == 0, "child status %d", st);
  snap2(&a);
  for (int i = 0; i < N; i++)
    p[i * PGSIZE + 64] = 1;
  snap(&b);
  CHECK(delta(a.cow_reuses, b.cow_reuses) == (a.cow_alloc ? N : 0) && b.cow_copies == a.cow_copies,
        "writing %d sole-owner pages: %ld reuses, %ld copies", N, delta(a.cow_reuses, b.cow_reuses),
        delta(a.cow_copies, b.cow_copies));
  CHECK(tl_free(&b) == tl_free(&a), "reuses used %ld pages", tl_free(&a) - tl_free(&b));
  CHECK(b.shared_pages == 0 || a.cow_alloc, "shared pages without COW");
}

// Three generations share pages; each writes its own values and finds them, and the older
// generations keep theirs.
static void chain(void)
{
  enum { N = 6 };
  char *p = grab(N);
  int gen, st;
  for (gen = 0; gen < 3; gen++) {
    for (int i = 0; i < N; i++)
      CHECK(*(int *)(p + i * PGSIZE) == (gen == 0 ? i * 3 + 1 : (gen - 1) * 1000 + i),
            "generation %d sees a wrong value in page %d", gen, i);
    for (int i = 0; i < N; i++)
      *(int *)(p + i * PGSIZE) = gen * 1000 + i;
    if (gen == 2)
      break;
    int pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid != 0) {
      CHECK(wait(&st) == pid && st == 0, "generation %d's child failed (status %d)", gen, st);
      for (int i = 0; i < N; i++)
        CHECK(*(int *)(p + i * PGSIZE) == gen * 1000 + i, "generation %d lost page %d", gen, i);
      if (gen > 0)
        exit(0);
      return;
    }
  }
  exit(0);
}

// A child shrinking its heap drops its references only; the parent's pages stay intact.
// Text stays read-only after a COW fork: a child storing into it is killed.
static void cowshrink(void)
{
  enum { N = 32 };
  int pid, st = -99;
  char *p = grab(N);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    sbrk(-N * PGSIZE);
    char *q = sbrk(N * PGSIZE);
    if (q != p)
      exit(2);
    for (int i = 0; i < N; i++)
      if (*(int *)(q + i * PGSIZE) != 0)
        exit(3);
    exit(0);
  }
  CHECK(wait(&st) == pid && st == 0, "child status %d", st);
  for (int i = 0; i < N; i++)
    CHECK(*(int *)(p + i * PGSIZE) == i * 3 + 1, "parent page %d changed", i);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    *(volatile int *)(uint64)cowshrink = 0;
    exit(4);
  }
  CHECK(wait(&st) == pid && st == -1, "store into shared text: status %d, expected -1", st);
  kernel_alive();
}

static const struct test tests[] = {
  { "counts", counts, 1 },
  { "reuse", reuse, 1 },
  { "readcow", readcow, 1 },
  { "pipecow", pipecow, 1 },
  { "threeway", threeway, 1 },
  { "chain", chain, 1 },
  { "cowshrink", cowshrink, 1 },
  { "bigfork", bigfork, 1 },
  { 0, 0, 0 },
};

int main(int argc, char **argv)
{
  tl_init(argv[0]);
  exit(run_tests(tests, argc, argv, 1));
}
