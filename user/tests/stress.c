// stress: random system calls from several processes at once, checking every result that
// can be predicted (file contents, pipe data, exit statuses, heap contents after sbrk and
// fork), then a leak check on the free-page count.
//
//   stress [-n COUNT] [-t SECONDS] [-s SEED]
//
// NWORK workers each do COUNT random operations (default 1000), or stop after SECONDS
// (default 60), whichever comes first. Each works in its own directory stw<k> under the
// current directory and removes it at the end. Operations: fork/exit/wait (children with
// known exit statuses), kill of its own children, exec, open/write/read/unlink/link, mkdir,
// chdir (down and back up), pipes with a writer child, sbrk grow/shrink, touching heap pages
// and checking them, fork of a heap that a child then modifies, dup/close, memstat.
// The same SEED gives the same sequence of choices per worker.
// Output: "test workerK: OK|FAILED ...", "test leakcheck: ...", then the verdict line.

#include "user/tests/testlib.h"

#define NWORK 3
#define NFILES 8       // file names f0..f7
#define NDIRS 4        // directory names d0..d3
#define MAXDEPTH 3     // how deep a worker chdirs
#define MAXKIDS 8      // children outstanding at once
#define HEAPMAX 1024   // pages of heap a worker plays with

static int w_id;                 // this worker's number
static long w_op;                // the operation being done (for messages)
static int depth;                // directories below the worker's own
static int kids[MAXKIDS];        // outstanding children (0 = free slot)
static int kidcode[MAXKIDS];     // the status each will exit with
static int kidkilled[MAXKIDS];   // kill() was sent
static char *heap;               // base of the worker's sbrk region
static int heappages;            // pages of it now in use
static uchar touched[HEAPMAX];   // page was written (holds its stamp)
static uchar stamp[HEAPMAX];     // the byte written at the page's first offsets

#define SFAIL(...) do { \
    printf("test worker%d: FAILED op %ld: ", w_id, w_op); printf(__VA_ARGS__); printf("\n"); \
    exit(1); } while (0)
#define SCHECK(c, ...) do { if (!(c)) SFAIL(__VA_ARGS__); } while (0)

static void fname(char *buf, char kind, int k)
{
  buf[0] = kind;
  buf[1] = '0' + k;
  buf[2] = 0;
}

// ---------------------------------------------------------------- files

// Files hold pattern bytes seeded by their length, so any reader can check them.
static void op_write(void)
{
  char name[4];
  static char buf[3000];
  int len = rnd() % sizeof(buf), fd;
  fname(name, 'f', rnd() % NFILES);
  fd = open(name, O_CREATE | O_WRONLY | O_TRUNC);
  if (fd < 0)
    return;   // the name may be a directory link target; nothing to check
  for (int i = 0; i < len; i++)
    buf[i] = pattern(len & 0xff, i);
  SCHECK(write(fd, buf, len) == len, "write %d bytes to %s", len, name);
  close(fd);
}

static void op_read(void)
{
  char name[4];
  static char buf[3100];
  struct stat st;
  int fd, n, total = 0;
  fname(name, 'f', rnd() % NFILES);
  fd = open(name, O_RDONLY);
  if (fd < 0)
    return;
  SCHECK(fstat(fd, &st) == 0, "fstat %s", name);
  while ((n = read(fd, buf + total, sizeof(buf) - total)) > 0)
    total += n;
  close(fd);
  SCHECK(n == 0 && total == (int)st.size, "read %d of %ld bytes of %s", total, (long)st.size, name);
  for (int i = 0; i < total; i++)
    SCHECK(buf[i] == pattern(total & 0xff, i), "%s: wrong byte at %d", name, i);
}

static void op_unlink(void)
{
  char name[4];
  fname(name, 'f', rnd() % NFILES);
  unlink(name);
}

static void op_link(void)
{
  char a[4], b[4];
  fname(a, 'f', rnd() % NFILES);
  fname(b, 'f', rnd() % NFILES);
  int r = link(a, b);
  SCHECK(r == -1 || strcmp(a, b) != 0, "link of %s onto itself succeeded", a);
}

static void op_mkdir(void)
{
  char name[4];
  fname(name, 'd', rnd() % NDIRS);
  mkdir(name);
}

static void op_chdir(void)
{
  char name[4];
  if (depth > 0 && (depth >= MAXDEPTH || rnd() % 2)) {
    SCHECK(chdir("..") == 0, "chdir ..");
    depth--;
    return;
  }
  fname(name, 'd', rnd() % NDIRS);
  if (chdir(name) == 0)
    depth++;
}

// Remove everything this worker may have created below the current directory.
static void cleanup(void)
{
  char name[4];
  for (int k = 0; k < NFILES; k++) {
    fname(name, 'f', k);
    unlink(name);
  }
  for (int k = 0; k < NDIRS; k++) {
    fname(name, 'd', k);
    if (chdir(name) == 0) {
      cleanup();
      SCHECK(chdir("..") == 0, "chdir .. in cleanup");
      SCHECK(unlink(name) == 0, "unlink directory %s in cleanup", name);
    }
  }
}

// ---------------------------------------------------------------- processes

static int free_slot(void)
{
  for (int i = 0; i < MAXKIDS; i++)
    if (kids[i] == 0)
      return i;
  return -1;
}

// Reap one child (any) and check its status.
static void op_wait(void)
{
  int st = -99, pid, k = -1, any = 0;
  for (int i = 0; i < MAXKIDS; i++)
    any |= kids[i] != 0;
  if (!any)
    return;
  pid = wait(&st);
  if (pid < 0) {
    for (int i = 0; i < MAXKIDS; i++)
      SCHECK(kids[i] == 0, "wait returned -1 with child %d outstanding", kids[i]);
    return;
  }
  for (int i = 0; i < MAXKIDS; i++)
    if (kids[i] == pid)
      k = i;
  SCHECK(k >= 0, "wait returned unknown pid %d", pid);
  SCHECK(st == kidcode[k] || (kidkilled[k] && st == -1), "child %d exit status %d, expected %d%s",
         pid, st, kidcode[k], kidkilled[k] ? " or -1" : "");
  kids[k] = 0;
}

// Fork a child that does a small job and exits with a known status; some sleep a while so
// that kill() finds them alive.
static void op_fork(void)
{
  int k = free_slot(), code = rnd() % 100, sleeper = rnd() % 3 == 0, pages = 1 + rnd() % 8;
  if (k < 0) {
    op_wait();
    return;
  }
  int pid = fork();
  if (pid < 0)
    return;   // the process table may be full: not an error
  if (pid == 0) {
    char *p = sbrk(pages * PGSIZE);
    if (p != (char *)-1)
      for (int i = 0; i < pages; i++)
        p[i * PGSIZE] = (char)i;
    for (int i = 0; sleeper && i < 30; i++)
      sleep(1);
    exit(code);
  }
  kids[k] = pid;
  kidcode[k] = code;
  kidkilled[k] = 0;
}

static void op_kill(void)
{
  int k = rnd() % MAXKIDS;
  if (kids[k] == 0)
    return;
  SCHECK(kill(kids[k]) == 0, "kill of own child %d failed", kids[k]);
  kidkilled[k] = 1;
}

// Wait for one specific child before anything else (reaping the tracked ones met on the way).
static int wait_for(int pid)
{
  int st, got;
  while ((got = wait(&st)) != pid) {
    SCHECK(got > 0, "wait lost child %d", pid);
    for (int i = 0; i < MAXKIDS; i++)
      if (kids[i] == got) {
        SCHECK(st == kidcode[i] || (kidkilled[i] && st == -1), "child %d exit status %d", got, st);
        kids[i] = 0;
      }
  }
  return st;
}

static void op_exec(void)
{
  char *args[] = { tl_self, "-x", 0 };
  int pid = fork();
  if (pid < 0)
    return;
  if (pid == 0) {
    exec(tl_self, args);
    exit(77);
  }
  SCHECK(wait_for(pid) == 33, "exec'd stress -x did not exit 33");
}

// A child writes n pattern bytes into a pipe; the worker reads and checks them.
static void op_pipe(void)
{
  int pfd[2], n = rnd() % 20000, got = 0, r, seed = rnd() % 200;
  static char buf[700];
  if (pipe(pfd) < 0)
    return;
  int pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return;
  }
  if (pid == 0) {
    close(pfd[0]);
    for (int sent = 0; sent < n; sent += r) {
      r = n - sent < (int)sizeof(buf) ? n - sent : (int)sizeof(buf);
      for (int i = 0; i < r; i++)
        buf[i] = pattern(seed, sent + i);
      if (write(pfd[1], buf, r) != r)
        exit(2);
    }
    exit(0);
  }
  close(pfd[1]);
  while ((r = read(pfd[0], buf, sizeof(buf))) > 0) {
    for (int i = 0; i < r; i++)
      SCHECK(buf[i] == pattern(seed, got + i), "pipe byte %d wrong", got + i);
    got += r;
  }
  close(pfd[0]);
  SCHECK(got == n, "pipe delivered %d of %d bytes", got, n);
  SCHECK(wait_for(pid) == 0, "pipe writer failed");
}

// ---------------------------------------------------------------- memory

static void op_grow(void)
{
  int n = 1 + rnd() % 64;
  if (heappages + n > HEAPMAX)
    return;
  SCHECK(sbrk(n * PGSIZE) == heap + (long)heappages * PGSIZE, "sbrk(%d pages) returned the wrong address", n);
  for (int i = heappages; i < heappages + n; i++)
    touched[i] = 0;
  heappages += n;
}

static void op_shrink(void)
{
  if (heappages == 0)
    return;
  int n = 1 + rnd() % heappages;
  SCHECK(sbrk(-n * PGSIZE) == heap + (long)heappages * PGSIZE, "sbrk(-%d pages) returned the wrong top", n);
  heappages -= n;
  SCHECK(sbrk(0) == heap + (long)heappages * PGSIZE, "sbrk(0) after shrink");
}

// Write a stamp into some pages, check some others (untouched pages read zero).
static void op_touch(void)
{
  if (heappages == 0)
    return;
  for (int t = 0; t < 8; t++) {
    int pg = rnd() % heappages;
    char *a = heap + (long)pg * PGSIZE;
    if (rnd() % 2) {
      stamp[pg] = (uchar)(rnd() | 1);
      touched[pg] = 1;
      a[0] = stamp[pg];
      a[PGSIZE - 1] = stamp[pg];
    } else {
      uchar want = touched[pg] ? stamp[pg] : 0;
      SCHECK((uchar)a[0] == want && (uchar)a[PGSIZE - 1] == want, "heap page %d holds %d, expected %d",
             pg, (uchar)a[0], want);
    }
  }
}

// A child checks the heap it inherited and scribbles on it; the worker's copy is unchanged.
static void op_forkmem(void)
{
  int pid = fork();
  if (pid < 0)
    return;
  if (pid == 0) {
    for (int pg = 0; pg < heappages; pg++) {
      uchar want = touched[pg] ? stamp[pg] : 0;
      if ((uchar)heap[(long)pg * PGSIZE] != want)
        exit(2);
      heap[(long)pg * PGSIZE] = (char)0xEE;
    }
    exit(0);
  }
  SCHECK(wait_for(pid) == 0, "child saw a wrong inherited heap");
  for (int pg = 0; pg < heappages; pg++) {
    uchar want = touched[pg] ? stamp[pg] : 0;
    SCHECK((uchar)heap[(long)pg * PGSIZE] == want, "child's write reached the worker's page %d", pg);
  }
}

static void op_misc(void)
{
  struct memstat m;
  int fd = dup(1);
  if (fd >= 0)
    SCHECK(close(fd) == 0, "close of a dup'ed fd");
  SCHECK(memstat(&m) == 0 && m.free_pages <= m.total_pages, "memstat");
  SCHECK(getpid() > 0, "getpid");
}

// ---------------------------------------------------------------- worker and main

static void (*const ops[])(void) = {
  op_write, op_write, op_read, op_read, op_unlink, op_link, op_mkdir, op_chdir, op_chdir,
  op_fork, op_fork, op_wait, op_kill, op_exec, op_pipe, op_grow, op_shrink, op_touch,
  op_touch, op_forkmem, op_misc,
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

static void worker(int id, uint64 seed, long count, uint64 deadline)
{
  char dir[8] = "stwN";
  dir[3] = '0' + id;
  w_id = id;
  tl_srand(seed * 1000 + id);
  mkdir(dir);
  SCHECK(chdir(dir) == 0, "chdir %s", dir);
  heap = sbrk(0);
  for (w_op = 0; w_op < count && clock_us() < deadline; w_op++)
    ops[rnd() % NOPS]();
  while (depth > 0) {
    SCHECK(chdir("..") == 0, "chdir .. at the end");
    depth--;
  }
  for (int i = 0; i < MAXKIDS; i++)
    if (kids[i])
      kill(kids[i]);   // the rest need not finish their sleeps
  while (wait(0) > 0)
    ;
  cleanup();
  SCHECK(chdir("..") == 0 && unlink(dir) == 0, "removing %s", dir);
  printf("test worker%d: OK (%ld operations)\n", id, w_op);
  exit(0);
}

// Parse a number argument; exits with a usage line when it is not one.
static long numarg(char *s)
{
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end != 0 || v < 0) {
    printf("usage: stress [-n COUNT] [-t SECONDS] [-s SEED]\nSOME TESTS FAILED\n");
    exit(1);
  }
  return v;
}

int main(int argc, char **argv)
{
  long count = 1000, secs = 60, seed = 1;
  struct memstat m0, m1;
  int nfail = 0, st;

  tl_init(argv[0]);
  if (argc == 2 && strcmp(argv[1], "-x") == 0)
    exit(33);   // the image op_exec runs
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      numarg("");
    if (strcmp(argv[i], "-n") == 0)
      count = numarg(argv[++i]);
    else if (strcmp(argv[i], "-t") == 0)
      secs = numarg(argv[++i]);
    else if (strcmp(argv[i], "-s") == 0)
      seed = numarg(argv[++i]);
    else
      numarg("");
  }
  printf("stress: %d workers, %ld operations each, at most %ld s, seed %ld\n", NWORK, count, secs, seed);
  if (memstat(&m0) < 0) {
    printf("memstat failed\nSOME TESTS FAILED\n");
    exit(1);
  }
  uint64 deadline = clock_us() + (uint64)secs * 1000000;
  for (int i = 0; i < NWORK; i++) {
    int pid = fork();
    if (pid == 0)
      worker(i, seed, count, deadline);
    if (pid < 0) {
      printf("test worker%d: FAILED fork\n", i);
      nfail++;
    }
  }
  while (wait(&st) > 0) {
    if (st == 1)
      nfail++;
    else if (st != 0) {
      printf("test worker: FAILED exit status %d\n", st);
      nfail++;
    }
  }
  if (memstat(&m1) < 0 || tl_free(&m1) != tl_free(&m0)) {
    printf("test leakcheck: FAILED free pages %ld at start, %ld at end\n", tl_free(&m0),
           tl_free(&m1));
    nfail++;
  } else {
    printf("test leakcheck: OK\n");
  }
  printf("%s\n", nfail ? "SOME TESTS FAILED" : "ALL TESTS PASSED");
  exit(nfail ? 1 : 0);
}
