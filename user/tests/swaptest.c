// swaptest: swap (a second virtio disk: make qemu SWAPSIZE=MiB, nexos run --swap MiB) checked
// from user space with memstat(): a process fills more memory than the machine has, every
// word it wrote comes back, and every frame and swap slot is returned at the end.
//
//   swaptest           run every test
//   swaptest -q        the quick ones (all but full)
//   swaptest NAME...   only those: pattern, bigsbrk, fork, exit, sharedcold, sharedfile, full
//
// The first line says what the kernel has (swaptest: total_pages=.. swap_slots=.. ...). Then
// one line per test, "test NAME: OK key=value ..." with the numbers it saw, or "test NAME:
// FAILED why", then "test leakcheck: OK|FAILED" and, as the last line, ALL TESTS PASSED or
// SOME TESTS FAILED. Without a swap disk (swap_slots 0) there is nothing to test: it says so
// in one line and exits 0 with no verdict.
//
// Returned means balanced, not equal: while a test fills memory, reclaim may page out
// anyone's pages (the shell's, this program's), and those stay in swap until touched. Each
// such page frees a frame and takes a slot, so free_pages - swap_slots_used does not change;
// dropping a clean file page frees a frame the page cache held, so + pagecache_pages does not
// either. A frame or a slot that a test failed to give back changes that sum.

#include "user/tests/testlib.h"

// The heaps grow by this much per sbrk() (16 MiB, far below RAM), so that only bigsbrk
// depends on one eager sbrk being able to exceed RAM.
#define STEP_PAGES 4096UL
#define MAX_SBRK_PAGES (0x7fffffffUL / PGSIZE)  // the most one sbrk()'s int can ask for
#define WORDS (PGSIZE / sizeof(uint64))
#define SEED_A 1
#define SEED_B 2

// ---------------------------------------------------------------- memory accounting

// A snapshot with the swap fields zero when the kernel predates them (it copies out only
// the struct it knows).
static void msnap(struct memstat *m)
{
  memset(m, 0, sizeof(*m));
  snap(m);
}

// Two snapshots in a row: the first may fault on the stack page (COW, or a page in swap),
// the second is a clean baseline.
static void msnap2(struct memstat *m)
{
  msnap(m);
  msnap(m);
}

// Free frames less slots in use plus page-cache frames: what moving pages between RAM, swap
// and the page cache leaves unchanged (see the top of the file; memfree_net, user/ulib.c).
static long balance(struct memstat *m)
{
  return memfree_net(m, 1);
}

// This process's pages wherever they are: mapped (resident) or paged out.
static long held(struct memstat *m)
{
  return (long)(m->mapped_pages + m->swapped_pages);
}

static long delta(uint64 a, uint64 b) { return (long)b - (long)a; }

// FAIL unless the memory accounting of b is back at a's, both taken in this process. A shrunk
// heap keeps its page-table pages until exit (as in xv6), so those count as returned.
static void check_returned(struct memstat *a, struct memstat *b, const char *when)
{
  CHECK(balance(a) + (long)a->pt_pages == balance(b) + (long)b->pt_pages,
        "%s: not returned: free_pages %ld->%ld swap_slots_used %ld->%ld pagecache %ld->%ld "
        "pt_pages %ld->%ld", when, (long)a->free_pages, (long)b->free_pages,
        (long)a->swap_slots_used, (long)b->swap_slots_used, (long)a->pagecache_pages,
        (long)b->pagecache_pages, (long)a->pt_pages, (long)b->pt_pages);
}

// How many pages a test may use, up to want: at peak it holds eighths/8 times that in RAM
// and swap together, with room to spare for page tables and the kernel. Fails the test when
// that is not clearly more than RAM (too little swap to test anything).
static uint64 fit(struct memstat *m, uint64 want, uint64 eighths)
{
  uint64 avail = m->free_pages + (m->swap_slots - m->swap_slots_used);
  uint64 margin = m->total_pages / 16 + 256;
  uint64 most = avail > margin ? (avail - margin) * 8 / eighths : 0;
  uint64 n = want < most ? want : most;
  CHECK(n >= m->total_pages + m->total_pages / 4,
        "too little swap: %ld free pages and %ld free slots hold %ld pages, not %ld (RAM %ld)",
        (long)m->free_pages, (long)(m->swap_slots - m->swap_slots_used), (long)n, (long)want,
        (long)m->total_pages);
  return n;
}

// ---------------------------------------------------------------- the heap and its pattern

// Grow the heap by n pages in steps sbrk's int can take, with sbrk or (lazy) sbrklazy;
// returns the first new page, or 0 when a step fails (*done then says how many pages it
// got). For the children of a test, which report by exit status.
static char *try_grow(uint64 n, uint64 *done, int lazy)
{
  char *base = align_heap();
  for (*done = 0; *done < n; ) {
    uint64 k = n - *done > STEP_PAGES ? STEP_PAGES : n - *done;
    if ((lazy ? sbrklazy : sbrk)((int)(k * PGSIZE)) == (char *)-1)
      return 0;
    *done += k;
  }
  return base;
}

// try_grow, failing the test when an sbrk fails.
static char *grow(uint64 n)
{
  uint64 done;
  char *base = try_grow(n, &done, 0);
  CHECK(base != 0, "sbrk failed after %ld of %ld pages (%ld at a time)", (long)done, (long)n,
        (long)STEP_PAGES);
  return base;
}

// Give the last n pages of the heap back.
static void shrink(uint64 n)
{
  for (uint64 done = 0; done < n; ) {
    uint64 k = n - done > STEP_PAGES ? STEP_PAGES : n - done;
    CHECK(sbrk(-(int)(k * PGSIZE)) != (char *)-1, "sbrk(-%ld pages) failed", (long)k);
    done += k;
  }
}

// The word a page holds at index w: a hash of the seed, the page and the word, so that a
// page read back from the wrong slot, a stale copy or a zero page all show.
static inline uint64 word_at(uint64 seed, uint64 page, uint64 w)
{
  uint64 x = ((page << 9) | w) ^ (seed * 0x9E3779B97F4A7C15UL);
  x *= 0xBF58476D1CE4E5B9UL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBUL;
  return x ^ (x >> 29);
}

// Write the pattern of seed over every byte of pages first, first+step, ... below n.
static void fill(char *p, uint64 first, uint64 n, uint64 step, uint64 seed)
{
  for (uint64 pg = first; pg < n; pg += step) {
    uint64 *q = (uint64 *)(p + pg * PGSIZE);
    for (uint64 w = 0; w < WORDS; w++)
      q[w] = word_at(seed, pg, w);
  }
}

static uint64 bad_page, bad_word, bad_got;  // the first wrong word verify() saw

// Check every word of the pages fill() wrote; returns how many are wrong.
static uint64 verify(char *p, uint64 first, uint64 n, uint64 step, uint64 seed)
{
  uint64 bad = 0;
  for (uint64 pg = first; pg < n; pg += step) {
    uint64 *q = (uint64 *)(p + pg * PGSIZE);
    for (uint64 w = 0; w < WORDS; w++) {
      if (q[w] != word_at(seed, pg, w)) {
        if (bad++ == 0) {
          bad_page = pg;
          bad_word = w;
          bad_got = q[w];
        }
      }
    }
  }
  return bad;
}

// The words verify() checks over those pages.
static uint64 nwords(uint64 first, uint64 n, uint64 step)
{
  return n > first ? ((n - first + step - 1) / step) * WORDS : 0;
}

// ---------------------------------------------------------------- tests

static int stats_fd = -1;  // where a test writes its "key=value ..." line for the runner

// 2x RAM in one heap (half of it can only live in swap): every word written, every word read
// back; the swap counters moved; the shrink gives every frame and slot back.
static void patterntest(void)
{
  struct memstat m0, m1, m2, m3;
  uint64 n, bad;
  char *p;

  msnap2(&m0);
  n = fit(&m0, 2 * m0.total_pages, 8);
  p = grow(n);
  fill(p, 0, n, 1, SEED_A);
  msnap(&m1);
  bad = verify(p, 0, n, 1, SEED_A);
  msnap(&m2);
  shrink(n);
  msnap(&m3);
  CHECK(bad == 0, "%ld of %ld words wrong; first: page %ld word %ld holds %lx, not %lx",
        (long)bad, (long)nwords(0, n, 1), (long)bad_page, (long)bad_word, bad_got,
        word_at(SEED_A, bad_page, bad_word));
  CHECK(delta(m0.swap_outs, m1.swap_outs) > 0, "%ld pages written (RAM %ld) but no swap_outs",
        (long)n, (long)m0.total_pages);
  CHECK(delta(m1.swap_ins, m2.swap_ins) > 0, "read back %ld pages but no swap_ins", (long)n);
  CHECK(m1.swapped_pages > 0, "%ld pages written (RAM %ld) but swapped_pages 0", (long)n,
        (long)m0.total_pages);
  CHECK(held(&m1) - held(&m0) == (long)n,
        "heap of %ld pages: mapped+swapped grew by %ld (mapped %ld, swapped %ld)", (long)n,
        held(&m1) - held(&m0), (long)m1.mapped_pages, (long)m1.swapped_pages);
  CHECK(held(&m3) == held(&m0), "after the shrink mapped+swapped %ld, before %ld",
        held(&m3), held(&m0));
  check_returned(&m0, &m3, "after the shrink");
  fprintf(stats_fd, "pages=%ld ram_pages=%ld words=%ld bad_words=0 swapped=%ld swap_outs=%ld "
          "swap_ins=%ld", (long)n, (long)m0.total_pages, (long)nwords(0, n, 1),
          (long)m1.swapped_pages, delta(m0.swap_outs, m2.swap_outs),
          delta(m0.swap_ins, m2.swap_ins));
}

// One sbrk of 1.5x RAM: with LAZY_ALLOC=0 it maps every page at once, so the kernel must
// page out pages of the very call that maps them; with LAZY_ALLOC=1 it maps nothing. Then
// every word written and read back.
static void bigsbrk(void)
{
  struct memstat m0, m1, m2;
  uint64 n, bad;
  char *p;

  msnap2(&m0);
  n = fit(&m0, m0.total_pages * 3 / 2, 8);
  if (n > MAX_SBRK_PAGES)
    n = MAX_SBRK_PAGES;
  align_heap();
  p = sbrk((int)(n * PGSIZE));
  CHECK(p != (char *)-1, "one sbrk of %ld pages failed (RAM %ld pages, %ld free, %ld of %ld "
        "swap slots free)", (long)n, (long)m0.total_pages, (long)m0.free_pages,
        (long)(m0.swap_slots - m0.swap_slots_used), (long)m0.swap_slots);
  msnap(&m1);
  CHECK(held(&m1) - held(&m0) == (m0.lazy_alloc ? 0 : (long)n),
        "sbrk of %ld pages: mapped+swapped grew by %ld (LAZY_ALLOC=%d)", (long)n,
        held(&m1) - held(&m0), m0.lazy_alloc);
  fill(p, 0, n, 1, SEED_B);
  bad = verify(p, 0, n, 1, SEED_B);
  msnap(&m2);
  shrink(n);
  CHECK(bad == 0, "%ld of %ld words wrong; first: page %ld word %ld", (long)bad,
        (long)nwords(0, n, 1), (long)bad_page, (long)bad_word);
  CHECK(delta(m0.swap_outs, m2.swap_outs) > 0, "no swap_outs with 1.5x RAM in use");
  msnap(&m1);
  check_returned(&m0, &m1, "after the shrink");
  fprintf(stats_fd, "pages=%ld ram_pages=%ld words=%ld bad_words=0 swap_outs=%ld swap_ins=%ld",
          (long)n, (long)m0.total_pages, (long)nwords(0, n, 1), delta(m0.swap_outs, m2.swap_outs),
          delta(m0.swap_ins, m2.swap_ins));
}

// A 1.5x RAM heap forked: the child sees every word, overwrites every 8th page and reads its
// own writes; the parent's pattern is untouched. With COW_ALLOC=0 the fork copies it all.
static void forktest(void)
{
  struct memstat m0, m2;
  uint64 n, bad;
  int pid, st = -99;
  char *p;

  msnap2(&m0);
  n = fit(&m0, m0.total_pages * 3 / 2, m0.cow_alloc ? 9 : 16);
  p = grow(n);
  fill(p, 0, n, 1, SEED_A);
  pid = fork();
  CHECK(pid >= 0, "fork of a %ld-page process failed (RAM %ld)", (long)n, (long)m0.total_pages);
  if (pid == 0) {
    if (verify(p, 0, n, 1, SEED_A))
      exit(10);
    fill(p, 0, n, 8, SEED_B);
    if (verify(p, 0, n, 8, SEED_B))
      exit(11);
    if (verify(p, 1, n, 8, SEED_A))
      exit(12);
    exit(0);
  }
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  CHECK(st == 0, "child status %d (10: it saw the parent's pages wrong, 11: its writes were "
        "lost, 12: pages it did not write changed)", st);
  bad = verify(p, 0, n, 1, SEED_A);
  msnap(&m2);
  CHECK(bad == 0, "parent: %ld words wrong after the child's writes; first: page %ld word %ld",
        (long)bad, (long)bad_page, (long)bad_word);
  CHECK(delta(m0.swap_outs, m2.swap_outs) > 0, "no swap_outs with more than RAM in use");
  shrink(n);
  msnap(&m2);
  check_returned(&m0, &m2, "after the child was reaped and the heap freed");
  fprintf(stats_fd, "pages=%ld ram_pages=%ld words=%ld bad_words=0 swap_outs=%ld swap_ins=%ld",
          (long)n, (long)m0.total_pages, (long)nwords(0, n, 1), delta(m0.swap_outs, m2.swap_outs),
          delta(m0.swap_ins, m2.swap_ins));
}

// A child fills 2x RAM and exits without freeing anything: exit gives every frame and
// slot back.
static void exittest(void)
{
  struct memstat m0, m1;
  uint64 n;
  int pid, st = -99;

  msnap2(&m0);
  n = fit(&m0, 2 * m0.total_pages, 8);
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    struct memstat m;
    uint64 done;
    char *p = try_grow(n, &done, 0);
    if (p == 0)
      exit(4);
    fill(p, 0, n, 1, SEED_A);
    msnap(&m);
    exit(m.swapped_pages > 0 ? 0 : 3);
  }
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  CHECK(st == 0, "child status %d (3: it had no pages in swap; 4: an sbrk of %ld pages at a "
        "time failed before %ld)", st, (long)STEP_PAGES, (long)n);
  msnap(&m1);
  CHECK(delta(m0.swap_outs, m1.swap_outs) > 0, "no swap_outs with 2x RAM in use");
  check_returned(&m0, &m1, "after the child exited");
  fprintf(stats_fd, "pages=%ld ram_pages=%ld swap_outs=%ld swap_ins=%ld", (long)n,
          (long)m0.total_pages, delta(m0.swap_outs, m1.swap_outs),
          delta(m0.swap_ins, m1.swap_ins));
}

// The scene of docs/memory.md's "Pages several processes map", scaled to RAM (MEMSIZE=128: a
// 90 MiB region, a 40 MiB working set): the parent writes the region and forks; the child
// reads every word of it and blocks in read(); the parent walks a working set of its own
// SHARED_WALKS times, one word a page, each walk timed. With COW_ALLOC=1 the region is one
// copy that both map, cold, so reclaim must page it out (swap_outs_shared) rather than the
// working set, and the last walk reads next to nothing back (with COW_ALLOC=0 the region is
// two private copies, cold as well). Then the child checks every word of the region again
// and exits, and the parent checks every word of the region and of the working set.
#define SHARED_WALKS 6

// The child's side: every word of the region, a byte on ready, wait for a byte on go, every
// word again. Exit status 0, or 10 + which read saw a wrong word.
static void sharedchild(char *p, uint64 n, int ready, int go)
{
  char c = 0;
  int bad = verify(p, 0, n, 1, SEED_A) ? 10 : 0;
  if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
    exit(12);
  if (!bad && verify(p, 0, n, 1, SEED_A))
    bad = 11;
  exit(bad);
}

// Walk one word of each of the n pages at ws: the microseconds it took; *bad counts wrong words.
static uint64 walk(char *ws, uint64 n, uint64 *bad)
{
  uint64 t0 = clock_us();
  for (uint64 pg = 0; pg < n; pg++)
    if (*(uint64 *)(ws + pg * PGSIZE) != word_at(SEED_B, pg, 0))
      (*bad)++;
  return clock_us() - t0;
}

static void sharedcold(void)
{
  struct memstat m0, m1, m2, m3;
  uint64 n, nws, us[SHARED_WALKS], walkbad = 0, bad;
  long last_ins, shared_outs, outs;
  int ready[2], go[2], pid, st = -99;
  char c, *p, *ws, times[8 * SHARED_WALKS];

  msnap2(&m0);
  n = (uint64)m0.memsize_mb * 256 * 90 / 128;
  nws = (uint64)m0.memsize_mb * 256 * 40 / 128;
  uint64 need = (m0.cow_alloc ? n : 2 * n) + nws + m0.total_pages / 16 + 256;
  CHECK(m0.free_pages + m0.swap_slots - m0.swap_slots_used > need,
        "too little swap: %ld free pages and %ld free slots, %ld wanted", (long)m0.free_pages,
        (long)(m0.swap_slots - m0.swap_slots_used), (long)need);
  p = grow(n);
  fill(p, 0, n, 1, SEED_A);
  CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork of a %ld-page process failed", (long)n);
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    sharedchild(p, n, ready[1], go[0]);
  }
  close(ready[1]);
  close(go[0]);
  CHECK(read(ready[0], &c, 1) == 1, "the child died before it had read the region");
  msnap(&m1);
  ws = grow(nws);
  fill(ws, 0, nws, 1, SEED_B);
  for (int i = 0; i < SHARED_WALKS; i++) {
    if (i == SHARED_WALKS - 1)
      msnap(&m2);
    us[i] = walk(ws, nws, &walkbad);
  }
  msnap(&m3);
  last_ins = delta(m2.paged_in, m3.paged_in);
  shared_outs = delta(m1.swap_outs_shared, m3.swap_outs_shared);
  outs = delta(m1.swap_outs, m3.swap_outs);
  times[0] = 0;
  for (int i = 0; i < SHARED_WALKS; i++)
    snprintf(times + strlen(times), sizeof(times) - strlen(times), "%s%ld", i ? "," : "",
             (long)(us[i] / 1000));
  CHECK(write(go[1], "g", 1) == 1, "write to the child");
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  CHECK(st == 0, "child status %d (10: it read the region wrong before the walks, 11: after "
        "them, 12: its pipes failed)", st);
  bad = verify(p, 0, n, 1, SEED_A);
  CHECK(bad == 0 && walkbad == 0, "parent: %ld words of the region wrong (first: page %ld "
        "word %ld), %ld of the working set's walks", (long)bad, (long)bad_page,
        (long)bad_word, (long)walkbad);
  bad = verify(ws, 0, nws, 1, SEED_B);
  CHECK(bad == 0, "parent: %ld words of the working set wrong", (long)bad);
  CHECK(!m0.cow_alloc || shared_outs > 0,
        "COW: %ld shared pages the child sleeps on, %ld working-set pages walked (walk_ms=%s), "
        "RAM %ld: no shared page was paged out", (long)n, (long)nws, times,
        (long)m0.total_pages);
  CHECK(last_ins <= (long)nws / 8, "the last walk read %ld of the working set's %ld pages "
        "back (walk_ms=%s): reclaim took the working set, not the cold region", last_ins,
        (long)nws, times);
  close(ready[0]);
  close(go[1]);
  shrink(nws);
  shrink(n);
  msnap(&m3);
  check_returned(&m0, &m3, "after the child was reaped and both heaps freed");
  fprintf(stats_fd, "pages=%ld ws_pages=%ld walk_ms=%s last_walk_us=%ld last_walk_ins=%ld "
          "shared_outs=%ld swap_outs=%ld bad_words=0", (long)n, (long)nws, times,
          (long)us[SHARED_WALKS - 1], last_ins, shared_outs, outs);
}

// A file both a parent and its child map. The parent maps a file of FILE_PAGES pages
// (MAP_PRIVATE, read only: clean file pages) and forks a child, which reads every page and
// sleeps on a pipe, its PTEs going cold; the parent, not touching the file either, fills
// and reads a heap of 1.5x RAM, so that reclaim's clock turns over everything. The pages
// both map stay in both: dropping one of two PTEs frees nothing, and dropping both, each
// judged by its own accessed bit, would make every mapper read the page back from the disk
// (kernel/swap.c, sharedfile). Once the child has exited, the parent's mapping is the only
// one, and the same pressure drops its cold file pages. Every byte read through the
// mapping afterwards is the file's. The child exits 0, or 20 when it no longer maps every
// page of the file after the pressure, 21 when it read a wrong byte, 22 when its pipes
// failed.
#define FILE_PAGES 512
#define FILE_SEED 7
#define FILE_PATH "swaptest.map"

// The bytes of the mapped file at f that differ from make_file's pattern; with every
// == 0 only the first byte of each page is read (to map the page, or keep it warm).
static uint64 verify_file(char *f, int every)
{
  uint64 bad = 0;
  for (uint64 i = 0; i < FILE_PAGES * PGSIZE; i += every ? 1 : PGSIZE)
    bad += f[i] != pattern(FILE_SEED, i);
  return bad;
}

static void fileholder(char *f, int ready, int go)
{
  struct memstat m;
  char c = 0;
  if (verify_file(f, 0) != 0)
    exit(21);
  if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
    exit(22);
  msnap2(&m);
  if (m.file_pages < FILE_PAGES)
    exit(20);
  exit(verify_file(f, 1) ? 21 : 0);
}

static void sharedfile(void)
{
  struct memstat m0, m1, m2, m3;
  int ready[2], go[2], pid, fd, st = -99;
  uint64 n, bad;
  char c, *f, *p;

  make_file(FILE_PATH, FILE_PAGES * PGSIZE, FILE_SEED);
  fd = open(FILE_PATH, O_RDONLY);
  CHECK(fd >= 0, "cannot open %s", FILE_PATH);
  f = mmap(0, FILE_PAGES * PGSIZE, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK(f != (char *)-1, "mmap of %d pages of %s failed", FILE_PAGES, FILE_PATH);
  CHECK(verify_file(f, 0) == 0, "the mapping does not hold the file");
  msnap2(&m0);
  n = fit(&m0, m0.total_pages * 3 / 2, 8);
  CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    fileholder(f, ready[1], go[0]);
  }
  close(ready[1]);
  close(go[0]);
  CHECK(read(ready[0], &c, 1) == 1, "the child died before it had read the file");
  p = grow(n);
  fill(p, 0, n, 1, SEED_A);
  bad = verify(p, 0, n, 1, SEED_A);
  msnap(&m1);
  CHECK(write(go[1], "g", 1) == 1, "write to the child");
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  CHECK(st == 0, "child status %d (20: reclaim dropped pages of the file the parent maps too, "
        "21: it read a wrong byte, 22: its pipes failed)", st);
  close(ready[0]);
  close(go[1]);
  msnap2(&m2);
  bad += verify(p, 0, n, 1, SEED_A);
  msnap(&m3);
  CHECK(bad == 0, "%ld words of the heap wrong", (long)bad);
  CHECK(m3.file_pages < FILE_PAGES && delta(m2.dropped_file_pages, m3.dropped_file_pages) > 0,
        "the mapping of the file is the parent's alone and cold, yet reclaim dropped none of "
        "its pages (%ld of %d mapped)", (long)m3.file_pages, FILE_PAGES);
  bad = verify_file(f, 1);
  CHECK(bad == 0, "%ld bytes of the file read wrong through the mapping", (long)bad);
  CHECK(munmap(f, FILE_PAGES * PGSIZE) == 0, "munmap");
  close(fd);
  CHECK(unlink(FILE_PATH) == 0, "unlink %s", FILE_PATH);
  shrink(n);
  fprintf(stats_fd, "file_pages=%d heap_pages=%ld dropped_shared=%ld dropped_alone=%ld "
          "bad_bytes=0", FILE_PAGES, (long)n, delta(m0.dropped_file_pages, m1.dropped_file_pages),
          delta(m2.dropped_file_pages, m3.dropped_file_pages));
}

// A child wants more than RAM and swap together. LAZY_ALLOC=1: it reserves that with
// sbrklazy (plain sbrk refuses it at once) and the fault that finds both full kills it
// (status -1). LAZY_ALLOC=0: an sbrk fails once both are full, changing nothing, and it
// exits 8 (9: never refused; 10: the failed sbrk changed its size; 11: refused before it
// had more than RAM; 6: LAZY_ALLOC=1 refused the sbrklazy itself).
// Everything comes back; the kernel lives.
static void full(void)
{
  struct memstat m0, m1;
  uint64 want;
  int pid, st = -99;

  msnap2(&m0);
  want = m0.total_pages + m0.swap_slots + m0.total_pages / 2;
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    struct memstat a, b;
    char *base = align_heap();
    if (m0.lazy_alloc) {
      uint64 done;
      if (try_grow(want, &done, 1) == 0)   // sbrk refuses more than RAM and swap
        exit(6);
      for (uint64 pg = 0; pg < want; pg++)
        *(uint64 *)(base + pg * PGSIZE) = pg;
      exit(7);
    }
    for (uint64 got = 0; got < want; got += 256) {
      msnap(&a);
      if (sbrk(256 * PGSIZE) == (char *)-1) {
        msnap(&b);
        if (b.vpages != a.vpages || b.mapped_pages + b.swapped_pages !=
            a.mapped_pages + a.swapped_pages)
          exit(10);
        exit(got > m0.total_pages ? 8 : 11);
      }
    }
    exit(9);
  }
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  CHECK(st == (m0.lazy_alloc ? -1 : 8), "child wanting %ld pages (RAM %ld, swap slots %ld): "
        "status %d, expected %d", (long)want, (long)m0.total_pages, (long)m0.swap_slots, st,
        m0.lazy_alloc ? -1 : 8);
  kernel_alive();
  msnap(&m1);
  check_returned(&m0, &m1, "after the child died");
  {
    // memory works again: a small heap filled and read back
    char *p = grow(256);
    fill(p, 0, 256, 1, SEED_B);
    CHECK(verify(p, 0, 256, 1, SEED_B) == 0, "a 256-page heap after the full test is wrong");
    shrink(256);
  }
  fprintf(stats_fd, "wanted=%ld ram_pages=%ld swap_slots=%ld status=%d swap_outs=%ld",
          (long)want, (long)m0.total_pages, (long)m0.swap_slots, st,
          delta(m0.swap_outs, m1.swap_outs));
}

// ---------------------------------------------------------------- the runner

struct swtest {
  const char *name;
  void (*fn)(void);
  int quick;  // in the -q subset
};

static const struct swtest tests[] = {
  { "pattern", patterntest, 1 },
  { "bigsbrk", bigsbrk, 1 },
  { "fork", forktest, 1 },
  { "exit", exittest, 1 },
  { "sharedcold", sharedcold, 1 },
  { "sharedfile", sharedfile, 1 },
  { "full", full, 0 },
  { 0, 0, 0 },
};

// Run one test in a child; returns 1 when it passed. The child sends its numbers through a
// pipe, so that the runner prints one line once it has also checked that everything the
// child held came back after it was reaped.
static int run_one(const struct swtest *t)
{
  struct memstat a, b;
  char line[256];
  int fds[2], pid, st = -99, len = 0, r;

  tl_name = t->name;
  msnap2(&a);
  CHECK(pipe(fds) == 0, "pipe");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(fds[0]);
    stats_fd = fds[1];
    t->fn();
    exit(0);
  }
  close(fds[1]);
  while (len < (int)sizeof(line) - 1 && (r = read(fds[0], line + len, sizeof(line) - 1 - len)) > 0)
    len += r;
  line[len] = 0;
  close(fds[0]);
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  if (st == 1)
    return 0;  // the test printed why
  if (st != 0) {
    printf("test %s: FAILED exit status %d\n", t->name, st);
    return 0;
  }
  msnap(&b);
  if (balance(&a) != balance(&b)) {
    printf("test %s: FAILED not returned after it was reaped: free_pages %ld->%ld "
           "swap_slots_used %ld->%ld pagecache %ld->%ld\n", t->name, (long)a.free_pages,
           (long)b.free_pages, (long)a.swap_slots_used, (long)b.swap_slots_used,
           (long)a.pagecache_pages, (long)b.pagecache_pages);
    return 0;
  }
  printf("test %s: OK %s free_pages=%ld->%ld swap_slots_used=%ld->%ld\n", t->name, line,
         (long)a.free_pages, (long)b.free_pages, (long)a.swap_slots_used,
         (long)b.swap_slots_used);
  return 1;
}

int main(int argc, char **argv)
{
  struct memstat m0, m1;
  int quick = 0, nfail = 0, nrun = 0;

  tl_init(argv[0]);
  tl_name = "setup";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-q") == 0) {
      quick = 1;
      continue;
    }
    int known = 0;
    for (const struct swtest *t = tests; t->name; t++)
      known |= strcmp(argv[i], t->name) == 0;
    if (!known) {
      printf("swaptest: no test named %s (pattern, bigsbrk, fork, exit, sharedcold, "
             "sharedfile, full)\nSOME TESTS FAILED\n", argv[i]);
      exit(1);
    }
  }
  msnap2(&m0);
  if (m0.swap_slots == 0) {
    printf("swaptest: no swap (swap_slots=0): nothing to test; boot with a swap disk "
           "(make qemu SWAPSIZE=MiB, nexos run --swap MiB)\n");
    exit(0);
  }
  printf("swaptest: total_pages=%ld swap_slots=%ld swap_slots_used=%ld lazy_alloc=%d "
         "cow_alloc=%d\n", (long)m0.total_pages, (long)m0.swap_slots, (long)m0.swap_slots_used,
         m0.lazy_alloc, m0.cow_alloc);
  for (const struct swtest *t = tests; t->name; t++) {
    int named = 0, any = 0;
    for (int i = 1; i < argc; i++) {
      if (strcmp(argv[i], "-q") != 0) {
        any = 1;
        named |= strcmp(argv[i], t->name) == 0;
      }
    }
    if ((any && !named) || (quick && !t->quick))
      continue;
    nrun++;
    if (!run_one(t))
      nfail++;
  }
  msnap(&m1);
  if (balance(&m0) != balance(&m1)) {
    printf("test leakcheck: FAILED free_pages %ld->%ld swap_slots_used %ld->%ld\n",
           (long)m0.free_pages, (long)m1.free_pages, (long)m0.swap_slots_used,
           (long)m1.swap_slots_used);
    nfail++;
  } else {
    printf("test leakcheck: OK\n");
  }
  printf("%s\n", nfail || nrun == 0 ? "SOME TESTS FAILED" : "ALL TESTS PASSED");
  exit(nfail ? 1 : 0);
}
