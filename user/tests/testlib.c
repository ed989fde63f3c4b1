// testlib.c: the test runner and helpers of user/tests/testlib.h, linked into every test
// program.
#include "user/tests/testlib.h"

const char *tl_name = "?";
char tl_self[MAXPATH];
static uint64 tl_stacktop;          // top of the user stack, seen at main's entry

// Fill *m with a memstat snapshot; a failing memstat fails the test.
void 
snap(struct memstat *m)
{
  if (memstat(m) < 0)
    FAIL("memstat() returned -1");
}

// The current stack pointer.
static uint64
tl_sp(void)
{
  uint64 x;
  asm volatile("mv %0, sp" : "=r"(x));
  return x;
}

// The stack guard page: the page right under the USERSTACK stack pages (docs/memory.md,
// memlayout.h). tl_init() must have recorded the stack top.
uint64 
guard_page(void)
{
  return tl_stacktop - (USERSTACK + 1) * PGSIZE;
}

// Record what the helpers need: the program's absolute path and the stack top.
// Call first thing in main.
void 
tl_init(char *argv0)
{
  tl_stacktop = PGROUNDUP(tl_sp());
  if (argv0[0] == '/') {
    strncpy(tl_self, argv0, sizeof(tl_self) - 1);
  } else {
    tl_self[0] = '/';
    strncpy(tl_self + 1, argv0, sizeof(tl_self) - 2);
  }
}

// A deterministic pseudo-random generator (xorshift64*); seed with tl_srand.
static uint64 tl_rstate = 88172645463325252UL;

void 
tl_srand(uint64 seed)
{
  tl_rstate = seed * 2654435761UL + 0x9E3779B97F4A7C15UL;
  if (tl_rstate == 0)
    tl_rstate = 1;
}

uint64 
rnd(void)
{
  tl_rstate ^= tl_rstate >> 12;
  tl_rstate ^= tl_rstate << 25;
  tl_rstate ^= tl_rstate >> 27;
  return tl_rstate * 2685821657736338717UL;
}

// Fork a child that runs fn(arg) and then exits 0. Returns the exit status wait() reported
// (-1 when the kernel killed it), or fails the test when fork/wait misbehave.
int 
child_status(void (*fn)(uint64), uint64 arg)
{
  int pid, st = 12345;
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    fn(arg);
    exit(0);
  }
  CHECK(wait(&st) == pid, "wait returned the wrong pid");
  return st;
}

// Check that the kernel still works after something nasty: a fork/exit/wait round trip.
void 
kernel_alive(void)
{
  int pid, st = 0;
  pid = fork();
  CHECK(pid >= 0, "fork failed after the previous step");
  if (pid == 0)
    exit(42);
  CHECK(wait(&st) == pid && st == 42, "fork/wait round trip broken (status %d)", st);
}

// Create (or truncate) path and write n pattern bytes in chunks; fails the test on error.
void 
make_file(const char *path, int n, int seed)
{
  static char buf[4096];
  int fd, done = 0;
  fd = open(path, O_CREATE | O_WRONLY | O_TRUNC);
  CHECK(fd >= 0, "cannot create %s", path);
  while (done < n) {
    int k = n - done > (int)sizeof(buf) ? (int)sizeof(buf) : n - done;
    for (int i = 0; i < k; i++)
      buf[i] = pattern(seed, done + i);
    CHECK(write(fd, buf, k) == k, "write to %s failed at %d", path, done);
    done += k;
  }
  close(fd);
}

// Read path back and check it holds exactly n pattern bytes.
void 
check_file(const char *path, int n, int seed)
{
  static char buf[4096];
  int fd, r, done = 0;
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "cannot open %s", path);
  while ((r = read(fd, buf, sizeof(buf))) > 0) {
    for (int i = 0; i < r; i++)
      CHECK(buf[i] == pattern(seed, done + i), "%s: wrong byte at %d", path, done + i);
    done += r;
  }
  close(fd);
  CHECK(r == 0, "read of %s returned %d", path, r);
  CHECK(done == n, "%s: %d bytes, expected %d", path, done, n);
}

// Make the heap top page-aligned and return it.
char *
align_heap(void)
{
  char *t = sbrk(0);
  uint64 pad = PGROUNDUP((uint64)t) - (uint64)t;
  if (pad)
    CHECK(sbrk(pad) == t, "sbrk(%ld) to align the heap failed", (long)pad);
  return sbrk(0);
}

// Pages free net of swap, the page cache left out: the library's one leak balance
// (memfree_net in user/ulib.c), under the name the test programs use.
long
tl_free(const struct memstat *m)
{
  return memfree_net(m, 0);
}

// Pages a process can still get: free RAM plus free swap slots.
uint64
tl_room(const struct memstat *m)
{
  return m->free_pages + m->swap_slots - m->swap_slots_used;
}

// All the memory there is for user pages: RAM plus swap, in pages.
uint64
tl_memory(const struct memstat *m)
{
  return m->total_pages + m->swap_slots;
}

// Run one test in a child; returns 1 when it passed. With leakcheck, the free-page count
// (tl_free) after the child is reaped must equal the one before the fork.
static int
tl_run_one(const struct test *t, int leakcheck)
{
  struct memstat a, b;
  int pid, st = 0;
  if (memstat(&a) < 0)
    a.free_pages = 0;
  tl_name = t->name;
  pid = fork();
  if (pid < 0) {
    printf("test %s: FAILED fork\n", t->name);
    return 0;
  }
  if (pid == 0) {
    t->fn();
    exit(0);
  }
  if (wait(&st) != pid) {
    printf("test %s: FAILED wait returned the wrong pid\n", t->name);
    return 0;
  }
  if (st == 1)
    return 0;   // the test printed why
  if (st != 0) {
    printf("test %s: FAILED exit status %d\n", t->name, st);
    return 0;
  }
  if (leakcheck && memstat(&b) == 0 && tl_free(&b) != tl_free(&a)) {
    printf("test %s: FAILED free pages %ld before, %ld after\n", t->name,
           tl_free(&a), tl_free(&b));
    return 0;
  }
  printf("test %s: OK\n", t->name);
  return 1;
}

// Run the tests (all, the quick ones with -q, or the one named by an argument), then the
// final leak check, and print the verdict. Returns the exit status for main (0 or 1).
int 
run_tests(const struct test *tests, int argc, char **argv, int leakcheck_each)
{
  struct memstat m0, m1;
  const char *only = 0;
  int quick = 0, nfail = 0, nrun = 0;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-q") == 0)
      quick = 1;
    else
      only = argv[i];
  }
  if (memstat(&m0) < 0) {
    printf("memstat() failed\nSOME TESTS FAILED\n");
    return 1;
  }
  for (const struct test *t = tests; t->name; t++) {
    if (only && strcmp(only, t->name) != 0)
      continue;
    if (quick && t->quick != 1)
      continue;
    if (!only && t->quick == NAMED_ONLY)
      continue;
    nrun++;
    if (!tl_run_one(t, leakcheck_each))
      nfail++;
  }
  if (only && nrun == 0) {
    printf("%s: no test named %s\nSOME TESTS FAILED\n", argv[0], only);
    return 1;
  }
  if (memstat(&m1) < 0 || tl_free(&m1) != tl_free(&m0)) {
    printf("test leakcheck: FAILED free pages %ld at start, %ld at end\n",
           tl_free(&m0), tl_free(&m1));
    nfail++;
  } else {
    printf("test leakcheck: OK\n");
  }
  printf("%s\n", nfail ? "SOME TESTS FAILED" : "ALL TESTS PASSED");
  return nfail ? 1 : 0;
}
