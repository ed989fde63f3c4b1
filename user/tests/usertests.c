// usertests: NexOS's general system-call tests (processes, pipes, files, directories, sbrk,
// bad arguments, faults that must kill, out of memory, the process table).
//
//   usertests          run every test (a minute or two under QEMU)
//   usertests -q       the quick subset (a few seconds)
//   usertests NAME     run only the test NAME
//
// Each test prints "test NAME: OK" or "test NAME: FAILED why"; after them comes the leak check
// and the last line is ALL TESTS PASSED or SOME TESTS FAILED (exit status 0 or 1).
// Test files are created in the current directory with names starting "ut" (deadcwd's, which
// needs absolute paths, in /).

#include "user/tests/testlib.h"
#include "kernel/fs.h"

#define WILD 0xffffffffffffUL   // far above MAXVA

// Addresses no user pointer may reach (computed, as some depend on the current heap top).
static uint64 bad_addr(int i)
{
  uint64 top = PGROUNDUP((uint64)sbrk(0));
  switch (i) {
  case 0: return WILD;
  case 1: return KERNBASE;
  case 2: return MAXVA;
  case 3: return MAXVA + PGSIZE;
  case 4: return TRAPFRAME;
  case 5: return TRAMPOLINE;
  case 6: return top + 16 * PGSIZE;     // above the heap top
  case 7: return guard_page();          // mapped, but not for user access
  case 8: return 0xffffffffffffffffUL - 7;
  }
  return 0;
}
#define NBAD 9

// ---------------------------------------------------------------- processes

// Children exit with distinct statuses; wait() returns each pid with its status once, then -1.
static void forkwait(void)
{
  enum { N = 12 };
  int pids[N], seen[N];
  for (int i = 0; i < N; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0, "fork %d failed", i);
    if (pids[i] == 0)
      exit(i * 5 + 3);
    seen[i] = 0;
  }
  for (int n = 0; n < N; n++) {
    int st = -99, pid = wait(&st), k = -1;
    for (int i = 0; i < N; i++)
      if (pids[i] == pid)
        k = i;
    CHECK(k >= 0, "wait returned unknown pid %d", pid);
    CHECK(!seen[k], "pid %d reaped twice", pid);
    CHECK(st == k * 5 + 3, "child %d exit status %d, expected %d", k, st, k * 5 + 3);
    seen[k] = 1;
  }
  CHECK(wait(0) == -1, "wait with no children did not return -1");
}

// Exit statuses come back unchanged, including 0, negative values and large ones;
// wait(0) (no status wanted) works.
static void exitstatus(void)
{
  int vals[] = { 0, 1, 2, 127, 255, 256, -7, 100000 };
  for (int i = 0; i < (int)(sizeof(vals) / sizeof(vals[0])); i++) {
    int pid = fork(), st = 12345;
    CHECK(pid >= 0, "fork failed");
    if (pid == 0)
      exit(vals[i]);
    CHECK(wait(&st) == pid, "wait: wrong pid");
    CHECK(st == vals[i], "exit(%d) seen as %d", vals[i], st);
  }
  int pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0)
    exit(3);
  CHECK(wait(0) == pid, "wait(0) did not return the child");
}

// getpid differs between parent and child; the child sees the parent's memory as it was.
static void forkmem(void)
{
  static volatile int shared_var = 5;
  int me = getpid(), pid, st;
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    if (getpid() == me || shared_var != 5)
      exit(2);
    shared_var = 99;
    exit(0);
  }
  CHECK(pid != me, "child pid equals the parent's");
  CHECK(wait(&st) == pid && st == 0, "child saw wrong pid or memory (status %d)", st);
  CHECK(shared_var == 5, "the child's write reached the parent");
}

// exec passes argv through (empty strings and spaces included); the exec'd image checks them
// and exits with argc (see main's "--exec-check").
static void exectest(void)
{
  char *args[] = { tl_self, "--exec-check", "alpha", "beta gamma", "", 0 };
  int pid = fork(), st = -99;
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    exec(tl_self, args);
    printf("exec %s failed\n", tl_self);
    exit(77);
  }
  CHECK(wait(&st) == pid, "wait: wrong pid");
  CHECK(st == 5, "exec'd program saw wrong arguments (status %d)", st);
}

// Exec of things that are not programs fails with -1 and the caller goes on unharmed.
static void execbad(void)
{
  char *args[] = { "x", 0 };
  char many[MAXARG + 2][4];
  char *margs[MAXARG + 3];
  int fd;

  CHECK(exec("ut_nosuchfile", args) == -1, "exec of a missing file did not fail");
  fd = open("ut_notelf", O_CREATE | O_WRONLY | O_TRUNC);
  CHECK(fd >= 0, "create ut_notelf");
  CHECK(write(fd, "#!/bin/sh\necho this is not an ELF file\n", 39) == 39, "write ut_notelf");
  close(fd);
  CHECK(exec("ut_notelf", args) == -1, "exec of a text file did not fail");
  // A file with the ELF magic and a garbage header.
  fd = open("ut_badelf", O_CREATE | O_WRONLY | O_TRUNC);
  CHECK(fd >= 0, "create ut_badelf");
  char hdr[128];
  for (int i = 0; i < (int)sizeof(hdr); i++)
    hdr[i] = (char)(0xa5 ^ i);
  hdr[0] = 0x7f; hdr[1] = 'E'; hdr[2] = 'L'; hdr[3] = 'F';
  CHECK(write(fd, hdr, sizeof(hdr)) == sizeof(hdr), "write ut_badelf");
  close(fd);
  CHECK(exec("ut_badelf", args) == -1, "exec of a corrupt ELF file did not fail");
  CHECK(exec("/", args) == -1, "exec of a directory did not fail");
  CHECK(exec(tl_self, (char **)WILD) == -1, "exec with a wild argv did not fail");
  char *wargs[] = { "x", (char *)KERNBASE, 0 };
  CHECK(exec(tl_self, wargs) == -1, "exec with a wild argv[1] did not fail");
  for (int i = 0; i < MAXARG + 2; i++) {
    strcpy(many[i], "a");
    margs[i] = many[i];
  }
  margs[MAXARG + 2] = 0;
  CHECK(exec(tl_self, margs) == -1, "exec with %d arguments did not fail", MAXARG + 2);
  unlink("ut_notelf");
  unlink("ut_badelf");
  kernel_alive();
}

// A child that spins is killed by kill(); its status is -1. kill of no such pid fails.
static void killtest(void)
{
  int pfd[2], pid, st = 0;
  char c;
  CHECK(pipe(pfd) == 0, "pipe failed");
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    write(pfd[1], "r", 1);
    for (volatile uint64 i = 0;; i++)
      ;
  }
  CHECK(read(pfd[0], &c, 1) == 1, "child did not start");
  CHECK(kill(pid) == 0, "kill returned an error");
  CHECK(wait(&st) == pid, "wait: wrong pid");
  CHECK(st == -1, "killed child exit status %d, expected -1", st);
  // A child blocked in read() is killed too.
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    close(pfd[1]);
    read(pfd[0], &c, 1);   // blocks: the parent still holds the write end
    exit(0);
  }
  sleep(2);
  CHECK(kill(pid) == 0, "kill of a sleeping child returned an error");
  CHECK(wait(&st) == pid && st == -1, "sleeping child not killed (status %d)", st);
  CHECK(kill(99999) == -1, "kill of a missing pid did not fail");
  close(pfd[0]);
  close(pfd[1]);
}

// kill(1) is refused (-1): init must never exit (its exit panics the kernel). Init is still
// there afterwards: a second kill(1) is refused too, and a fork/exit/wait round trip works.
static void killinit(void)
{
  CHECK(kill(1) == -1, "kill(1) (init) did not return -1");
  CHECK(kill(1) == -1, "a second kill(1) did not return -1");
  kernel_alive();
}

// Several children run at once, each writing, reading and growing memory on its own.
static void concurrent(void)
{
  enum { N = 6 };
  for (int i = 0; i < N; i++) {
    int pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
      char name[8] = "utcN";
      name[3] = 'a' + i;
      for (int round = 0; round < 4; round++) {
        make_file(name, 3000 + 1000 * i + round, i + round);
        check_file(name, 3000 + 1000 * i + round, i + round);
        char *p = sbrk(8 * PGSIZE);
        if (p == (char *)-1)
          exit(3);
        for (int k = 0; k < 8 * PGSIZE; k += 512)
          p[k] = (char)(i + k);
        for (int k = 0; k < 8 * PGSIZE; k += 512)
          if (p[k] != (char)(i + k))
            exit(4);
      }
      unlink(name);
      exit(0);
    }
  }
  for (int i = 0; i < N; i++) {
    int st = -99;
    CHECK(wait(&st) > 0, "wait failed");
    CHECK(st == 0, "a concurrent child failed with status %d", st);
  }
}

// Fork until the process table is full; every child is then released and reaped.
static void forkfill(void)
{
  int pfd[2], n = 0, st;
  char c;
  CHECK(pipe(pfd) == 0, "pipe failed");
  for (;;) {
    int pid = fork();
    if (pid < 0)
      break;
    if (pid == 0) {
      close(pfd[1]);
      exit(read(pfd[0], &c, 1) == 0 ? 0 : 5);   // wait until the parent closes the pipe
    }
    n++;
    CHECK(n <= NPROC, "fork succeeded %d times with NPROC=%d", n, NPROC);
  }
  close(pfd[1]);
  CHECK(n >= NPROC / 2, "only %d forks succeeded", n);
  for (int i = 0; i < n; i++) {
    st = -99;
    CHECK(wait(&st) > 0, "wait failed after %d of %d", i, n);
    CHECK(st == 0, "child exit status %d", st);
  }
  CHECK(wait(0) == -1, "more children than forks");
  close(pfd[0]);
  kernel_alive();
}

// ---------------------------------------------------------------- pipes

// Closed ends: read returns 0 (end of file) once no writer is left; write to a pipe with no
// reader returns -1.
static void pipeends(void)
{
  int pfd[2];
  char buf[16];
  CHECK(pipe(pfd) == 0, "pipe failed");
  CHECK(write(pfd[1], "hello", 5) == 5, "write failed");
  close(pfd[1]);
  CHECK(read(pfd[0], buf, sizeof(buf)) == 5 && memcmp(buf, "hello", 5) == 0, "read back");
  CHECK(read(pfd[0], buf, sizeof(buf)) == 0, "read after the write end closed did not return 0");
  close(pfd[0]);
  CHECK(pipe(pfd) == 0, "pipe failed");
  close(pfd[0]);
  CHECK(write(pfd[1], "x", 1) == -1, "write with no reader did not fail");
  close(pfd[1]);
}

// Move n bytes from a child to the parent in odd-sized pieces and check every byte.
static void pipe_transfer(int n)
{
  static char buf[1531];
  int pfd[2], pid, st = -99, got = 0, r;
  CHECK(pipe(pfd) == 0, "pipe failed");
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    int sent = 0;
    close(pfd[0]);
    while (sent < n) {
      int k = 1 + (int)(rnd() % 1200);
      if (k > n - sent)
        k = n - sent;
      for (int i = 0; i < k; i++)
        buf[i] = pattern(9, sent + i);
      if (write(pfd[1], buf, k) != k)
        exit(6);
      sent += k;
    }
    exit(0);
  }
  close(pfd[1]);
  while ((r = read(pfd[0], buf, 1 + (int)(rnd() % sizeof(buf)))) > 0) {
    for (int i = 0; i < r; i++)
      CHECK(buf[i] == pattern(9, got + i), "wrong byte at %d", got + i);
    got += r;
  }
  close(pfd[0]);
  CHECK(r == 0, "read returned %d", r);
  CHECK(got == n, "received %d bytes of %d", got, n);
  CHECK(wait(&st) == pid && st == 0, "writer status %d", st);
}

static void pipesmall(void) { pipe_transfer(100000); }

// Several readers on one pipe, as smolprobe's branches wait on their "go" pipe: the
// parent hands out one byte at a time and each taker acks it. A read that returns 0
// while the write end is open (a reader that lost the race for a byte to another one
// and called it end of file) leaves a reader gone and a stop byte nobody takes. Each
// read goes to a fresh heap page, so that with LAZY_ALLOC its copyout faults and the
// race window is wide.
#define READERS 4
#define STOP 0xff
static void pipereaders(void)
{
  int go[2], ack[2], st;
  unsigned char b, got;
  CHECK(pipe(go) == 0 && pipe(ack) == 0, "pipe failed");
  for (int k = 0; k < READERS; k++) {
    int pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
      close(go[1]);
      close(ack[0]);
      for (;;) {
        unsigned char *page = (unsigned char *)sbrk(PGSIZE);
        int r = read(go[0], page, 1);
        b = *page;
        sbrk(-PGSIZE);
        if (r != 1)
          exit(2);                     // no byte while the parent still writes
        if (write(ack[1], &b, 1) != 1)
          exit(3);
        if (b == STOP)
          exit(0);
      }
    }
  }
  close(go[0]);
  close(ack[1]);
  for (int i = 0; i < 2000 + READERS; i++) {
    b = i < 2000 ? i % 200 : STOP;
    CHECK(write(go[1], &b, 1) == 1, "write of byte %d failed: every reader is gone", i);
    CHECK(read(ack[0], &got, 1) == 1, "byte %d: no reader left to take it (one read 0 "
          "from an open pipe)", i);
    CHECK(got == b, "byte %d: acked %d for %d", i, got, b);
  }
  close(go[1]);
  close(ack[0]);
  for (int k = 0; k < READERS; k++) {
    CHECK(wait(&st) > 0, "wait failed");
    CHECK(st == 0, "a reader exited with status %d (2: read gave no byte)", st);
  }
}
static void pipebig(void) { pipe_transfer(4 << 20); }

// ---------------------------------------------------------------- files

// Create, write, read back, fstat, unlink; the name is gone afterwards.
static void filebasic(void)
{
  struct stat st;
  int fd;
  make_file("utfile", 5000, 1);
  check_file("utfile", 5000, 1);
  fd = open("utfile", O_RDONLY);
  CHECK(fd >= 0 && fstat(fd, &st) == 0, "fstat failed");
  CHECK(st.type == T_FILE && st.size == 5000 && st.nlink == 1,
        "fstat type %d size %ld nlink %d", st.type, (long)st.size, st.nlink);
  CHECK(write(fd, "x", 1) == -1, "write to a read-only fd did not fail");
  close(fd);
  fd = open("utfile", O_WRONLY);
  char c;
  CHECK(fd >= 0 && read(fd, &c, 1) == -1, "read from a write-only fd did not fail");
  close(fd);
  CHECK(unlink("utfile") == 0, "unlink failed");
  CHECK(open("utfile", O_RDONLY) == -1, "open after unlink succeeded");
  CHECK(unlink("utfile") == -1, "second unlink succeeded");
}

// O_TRUNC empties a file; writing without it overwrites in place from offset 0.
static void truncate(void)
{
  struct stat st;
  int fd;
  char buf[8];
  make_file("uttrunc", 3000, 2);
  fd = open("uttrunc", O_WRONLY | O_TRUNC);
  CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.size == 0, "O_TRUNC left size %ld", (long)st.size);
  CHECK(write(fd, "abcd", 4) == 4, "write after truncate");
  close(fd);
  fd = open("uttrunc", O_WRONLY);
  CHECK(write(fd, "XY", 2) == 2, "overwrite");
  close(fd);
  fd = open("uttrunc", O_RDONLY);
  CHECK(read(fd, buf, sizeof(buf)) == 4 && memcmp(buf, "XYcd", 4) == 0, "content after overwrite");
  close(fd);
  CHECK(unlink("uttrunc") == 0, "unlink");
}

// A file larger than 1 MiB (beyond the direct and single-indirect blocks) reads back intact,
// and its blocks return when it is unlinked and recreated.
static void bigfile(void)
{
  int n = (1 << 20) + 300 * 1024 + 17;
  for (int round = 0; round < 2; round++) {
    make_file("utbig", n, 3 + round);
    check_file("utbig", n, 3 + round);
    CHECK(unlink("utbig") == 0, "unlink");
  }
}

// A file of MAXFILE blocks, written one block per call as MIT's usertests writes it, each
// block stamped with its number: the disk is big enough for it (the default image is sized
// for it, kernel/fs.h), a write past MAXFILE fails, every block reads back, and unlinking it
// returns every block it took.
static void maxfile(void)
{
  static char blk[BSIZE];
  uint64 t0 = clock_us();
  int fd = open("utmax", O_CREATE | O_RDWR);
  CHECK(fd >= 0, "create utmax");
  for (uint64 i = 0; i < MAXFILE; i++) {
    ((uint64 *)blk)[0] = i;
    ((uint64 *)blk)[BSIZE / 8 - 1] = ~i;
    CHECK(write(fd, blk, BSIZE) == BSIZE, "write of block %ld of %ld failed", (long)i,
          (long)MAXFILE);
  }
  CHECK(write(fd, blk, 1) == -1, "a write past MAXFILE (%ld blocks) did not fail", (long)MAXFILE);
  close(fd);
  uint64 t1 = clock_us();
  fd = open("utmax", O_RDONLY);
  CHECK(fd >= 0, "open utmax");
  for (uint64 i = 0; i < MAXFILE; i++) {
    CHECK(read(fd, blk, BSIZE) == BSIZE, "read of block %ld failed", (long)i);
    CHECK(((uint64 *)blk)[0] == i && ((uint64 *)blk)[BSIZE / 8 - 1] == ~i,
          "block %ld reads back as block %ld", (long)i, (long)((uint64 *)blk)[0]);
  }
  CHECK(read(fd, blk, 1) == 0, "read past the end");
  close(fd);
  uint64 t2 = clock_us();
  CHECK(unlink("utmax") == 0, "unlink utmax");
  printf("maxfile: %ld blocks written in %ld ms, read in %ld ms\n", (long)MAXFILE,
         (long)((t1 - t0) / 1000), (long)((t2 - t1) / 1000));
}

// Check that fd reads, from its current offset, nb blocks, block i filled with 'a' + i.
static void check_blocks(int fd, int nb, const char *when)
{
  static char blk[BSIZE];
  for (int i = 0; i < nb; i++) {
    CHECK(read(fd, blk, BSIZE) == BSIZE, "%s: read of block %d", when, i);
    CHECK(blk[0] == 'a' + i && blk[BSIZE - 1] == 'a' + i, "%s: block %d reads '%c'", when,
          i, blk[0]);
  }
}

// Appends of a few whole blocks are gathered in memory before they get disk blocks
// (docs/filesystem.md, "Gathered appends"). Meanwhile the file stats and reads as written,
// through another descriptor too (mmaptests gathered maps it); a write of another kind
// goes after them; after the close everything reads back from the disk. Truncating
// through another descriptor drops gathered blocks, and a gathered file unlinked while
// open leaves nothing behind.
static void gathered(void)
{
  static char blk[BSIZE];
  struct stat st;
  int w = open("utgather", O_CREATE | O_TRUNC | O_RDWR);
  CHECK(w >= 0, "create utgather");
  for (int i = 0; i < 20; i++) {
    memset(blk, 'a' + i, BSIZE);
    CHECK(write(w, blk, BSIZE) == BSIZE, "append of block %d", i);
  }
  int r = open("utgather", O_RDONLY);
  CHECK(r >= 0 && fstat(r, &st) == 0 && st.size == 20 * BSIZE, "size %ld before the close",
        (long)st.size);
  check_blocks(r, 20, "before the close");
  CHECK(write(w, "xyz", 3) == 3, "a partial block after the gathered ones");
  CHECK(fstat(w, &st) == 0 && st.size == 20 * BSIZE + 3, "size %ld after it", (long)st.size);
  close(r);
  close(w);
  r = open("utgather", O_RDONLY);
  check_blocks(r, 20, "after the close");
  CHECK(read(r, blk, 10) == 3 && memcmp(blk, "xyz", 3) == 0, "the partial block");
  close(r);

  w = open("utgather", O_CREATE | O_TRUNC | O_RDWR);
  for (int i = 0; i < 5; i++)
    CHECK(write(w, blk, BSIZE) == BSIZE, "append of block %d", i);
  int t = open("utgather", O_WRONLY | O_TRUNC);
  CHECK(t >= 0 && fstat(w, &st) == 0 && st.size == 0, "size %ld after O_TRUNC", (long)st.size);
  CHECK(write(w, blk, BSIZE) == -1, "an append past the truncated end did not fail");
  close(t);
  close(w);
  CHECK(unlink("utgather") == 0, "unlink");

  w = open("utgather", O_CREATE | O_RDWR);
  for (int i = 0; i < 12; i++)
    CHECK(write(w, blk, BSIZE) == BSIZE, "append of block %d", i);
  CHECK(unlink("utgather") == 0, "unlink while open");
  close(w);
  CHECK(open("utgather", O_RDONLY) == -1, "utgather still there");
}

// A write whose buffer runs from the heap's last page into the unmapped page above it
// fails (-1), and the bytes before the bad page are in the file, as xv6 writes them
// (MIT's usertests partial_write): the read after it and after the buffer cache was
// refilled by other writes both show them.
static void partialwrite(void)
{
  char c = 0;
  make_file("utpart", 1, 9);
  char *top = sbrk(0);
  CHECK(sbrk(PGSIZE - (uint64)top % PGSIZE) != SBRK_ERROR, "sbrk to a page boundary");
  top = sbrk(0);
  top[-1] = 'X';
  int fd = open("utpart", O_RDWR);
  CHECK(fd >= 0 && write(fd, top - 1, 2) == -1, "a write running into an unmapped page "
        "did not fail");
  close(fd);
  fd = open("utpart", O_RDONLY);
  CHECK(read(fd, &c, 1) == 1 && c == 'X', "the byte before the bad page reads '%c'", c);
  close(fd);
  make_file("utpart2", 300 * 1024, 10);   // other blocks through the buffer cache
  CHECK(unlink("utpart2") == 0, "unlink utpart2");
  fd = open("utpart", O_RDONLY);
  CHECK(read(fd, &c, 1) == 1 && c == 'X', "after other writes, the byte reads '%c'", c);
  close(fd);
  CHECK(unlink("utpart") == 0, "unlink utpart");
}

// Many files at once in one directory.
static void manyfiles(void)
{
  enum { N = 60 };
  char name[8] = "utmXX";
  for (int i = 0; i < N; i++) {
    name[3] = 'a' + i / 26; name[4] = 'a' + i % 26;
    make_file(name, 100 + i * 37, i);
  }
  for (int i = 0; i < N; i++) {
    name[3] = 'a' + i / 26; name[4] = 'a' + i % 26;
    check_file(name, 100 + i * 37, i);
    CHECK(unlink(name) == 0, "unlink %s", name);
  }
}

// ---------------------------------------------------------------- directories

// mkdir, chdir, relative paths, "..", link counts, and the unlink rules for directories.
static void dirs(void)
{
  struct stat a, b;
  int fd;
  CHECK(mkdir("utd") == 0, "mkdir");
  CHECK(mkdir("utd") == -1, "mkdir of an existing name succeeded");
  CHECK(chdir("utd") == 0, "chdir");
  make_file("f", 700, 4);
  CHECK(mkdir("sub") == 0, "mkdir sub");
  CHECK(chdir("sub/..") == 0 && chdir("..") == 0, "chdir via ..");
  check_file("utd/f", 700, 4);
  CHECK(stat("utd/sub/../f", &a) == 0 && a.type == T_FILE, "path through ..");
  CHECK(unlink("utd") == -1, "unlink of a non-empty directory succeeded");
  CHECK(unlink("utd/sub/.") == -1 && unlink("utd/sub/..") == -1, "unlink of . or .. succeeded");
  CHECK(link("utd/f", "utd/g") == 0, "link");
  CHECK(stat("utd/g", &a) == 0 && a.nlink == 2, "nlink after link is %d", a.nlink);
  CHECK(link("utd/f", "utd/g") == -1, "link onto an existing name succeeded");
  CHECK(link("utd", "utd2") == -1, "link of a directory succeeded");
  CHECK(link("utd/nothing", "utd/h") == -1, "link of a missing file succeeded");
  CHECK(unlink("utd/f") == 0, "unlink f");
  check_file("utd/g", 700, 4);
  CHECK(stat("utd/g", &a) == 0 && a.nlink == 1, "nlink after unlink is %d", a.nlink);
  CHECK(open("utd", O_WRONLY) == -1 && open("utd", O_RDWR) == -1, "a directory opened for writing");
  fd = open("utd", O_RDONLY);
  CHECK(fd >= 0 && fstat(fd, &a) == 0 && a.type == T_DIR, "fstat of a directory");
  close(fd);
  CHECK(mkdir("utd/g/x") == -1 && open("utd/g/x", O_CREATE | O_RDWR) == -1, "a file used as a directory");
  CHECK(chdir("utd/g") == -1, "chdir into a file succeeded");
  CHECK(unlink("utd/sub") == 0 && unlink("utd/g") == 0 && unlink("utd") == 0, "removing the tree");
  CHECK(chdir("utd") == -1 && stat("utd", &a) == -1, "removed directory still there");
  CHECK(stat("/", &a) == 0 && stat("/..", &b) == 0 && a.ino == b.ino, "/.. is not /");
}

// The child of deadcwd: make /utdd/sub its cwd, unlink it and then /utdd (whose inode is
// freed, so the cwd's ".." names a free inode), and check that nothing can be looked up or
// created in the dead cwd; an absolute path still works.
static void deadcwd_child(uint64 unused)
{
  CHECK(mkdir("/utdd") == 0 && mkdir("/utdd/sub") == 0, "mkdir /utdd/sub");
  CHECK(chdir("/utdd/sub") == 0, "chdir /utdd/sub");
  CHECK(unlink("/utdd/sub") == 0, "unlink of the cwd failed");
  CHECK(unlink("/utdd") == 0, "unlink of the cwd's parent failed");
  CHECK(open("..", O_RDONLY) == -1, "open(\"..\") in a dead cwd did not fail");
  CHECK(chdir("..") == -1, "chdir(\"..\") in a dead cwd did not fail");
  CHECK(open(".", O_RDONLY) == -1, "open(\".\") in a dead cwd did not fail");
  CHECK(open("x", O_CREATE | O_RDWR) == -1, "a file was created in a dead cwd");
  CHECK(mkdir("y") == -1, "a directory was created in a dead cwd");
  CHECK(chdir("/") == 0, "chdir(\"/\") from a dead cwd failed");
}

// A directory unlinked while it is the cwd is dead: lookups and creates in it fail (they
// used to follow its stale ".." to a freed inode and panic). Run in a child so that a
// failure cannot leave this process in the dead directory.
static void deadcwd(void)
{
  struct stat st;
  unlink("/utdd/sub");   // left over by an interrupted run
  unlink("/utdd");
  int s = child_status(deadcwd_child, 0);
  if (s == 1)
    exit(1);             // the child printed why
  CHECK(s == 0, "child exit status %d", s);
  CHECK(stat("/utdd", &st) == -1, "/utdd still exists");
}

// ---------------------------------------------------------------- sbrk

// Grow, fill, read back, shrink, regrow: regrown memory is zero; sbrk(0) reports the top.
static void sbrkbasic(void)
{
  char *p, *q;
  p = sbrk(0);
  CHECK(sbrk(1) == p && sbrk(0) == p + 1, "sbrk(1)");
  CHECK(sbrk(-1) == p + 1 && sbrk(0) == p, "sbrk(-1)");
  q = sbrk(10 * PGSIZE + 123);
  CHECK(q == p, "sbrk returned %p, expected %p", q, p);
  CHECK(sbrk(0) == p + 10 * PGSIZE + 123, "sbrk(0) after growth");
  for (int i = 0; i < 10 * PGSIZE + 123; i++)
    CHECK(q[i] == 0, "new memory not zero at %d", i);
  for (int i = 0; i < 10 * PGSIZE + 123; i++)
    q[i] = (char)(i * 13);
  for (int i = 0; i < 10 * PGSIZE + 123; i++)
    CHECK(q[i] == (char)(i * 13), "memory changed at %d", i);
  CHECK(sbrk(-(6 * PGSIZE + 123)) == p + 10 * PGSIZE + 123, "shrink return value");
  CHECK(sbrk(0) == p + 4 * PGSIZE, "sbrk(0) after shrink");
  for (int i = 0; i < 4 * PGSIZE; i++)
    CHECK(q[i] == (char)(i * 13), "kept memory changed at %d", i);
  CHECK(sbrk(6 * PGSIZE) == p + 4 * PGSIZE, "regrow");
  for (int i = 4 * PGSIZE; i < 10 * PGSIZE; i++)
    CHECK(q[i] == 0, "regrown memory not zero at offset %d", i);
}

// Shrinking gives the pages back: free pages after grow+touch+shrink equal those before,
// apart from page-table pages the kernel kept.
static void sbrkfree(void)
{
  struct memstat a, b, c;
  char *p;
  snap(&a);
  snap(&a);
  p = sbrk(64 * PGSIZE);
  CHECK(p != (char *)-1, "sbrk failed");
  for (int i = 0; i < 64; i++)
    p[i * PGSIZE] = 1;
  snap(&b);
  CHECK(b.mapped_pages - a.mapped_pages == 64, "mapped %ld pages for 64", (long)(b.mapped_pages - a.mapped_pages));
  sbrk(-64 * PGSIZE);
  snap(&c);
  CHECK(c.mapped_pages == a.mapped_pages, "mapped pages %ld after shrink, %ld before",
        (long)c.mapped_pages, (long)a.mapped_pages);
  CHECK(tl_free(&c) + (long)(c.pt_pages - a.pt_pages) == tl_free(&a),
        "free pages %ld before, %ld after shrink (pt pages %ld -> %ld)",
        (long)a.free_pages, (long)c.free_pages, (long)a.pt_pages, (long)c.pt_pages);
}

// Grow 64 KiB at a time until sbrk fails, as a course's usertests counts free memory
// (MIT's countfree), and shrink back; returns the steps that succeeded.
static long sbrkcount(void)
{
  char *base = sbrk(0);
  long n = 0;
  while (sbrk(16 * PGSIZE) != SBRK_ERROR)
    n++;
  // sbrk takes an int: shrink in steps of at most 1 GiB (the heap grows past 2 GiB when
  // RAM and swap allow it, and one -(top - base) would wrap to a grow)
  for (long left = sbrk(0) - base; left > 0;) {
    int step = left > (1L << 30) ? (1 << 30) : (int)left;
    CHECK(sbrk(-step) != SBRK_ERROR, "shrink back failed");
    left -= step;
  }
  CHECK(sbrk(0) == base, "shrink back failed");
  return n;
}

// sbrk's bounds: growth until failure ends in both policies (lazy growth is held to
// OVERCOMMIT_PCT of RAM and swap), neither early nor past that, and every page comes back
// (but the page-table pages an eager grow made, which stay until exit); a shrink past the
// heap's base stops there and returns the old top, however far it asks (even below 0).
static void sbrkbound(void)
{
  struct memstat a, b;
  int st = -99;
  snap(&a);
  long pages = sbrkcount() * 16;
  snap(&b);
  CHECK(pages <= (long)a.sbrk_cap_pages, "sbrk grew %ld pages, past its bound (%ld)", pages,
        (long)a.sbrk_cap_pages);
  CHECK(pages >= (long)tl_room(&a) / 2, "sbrk failed after %ld pages, with %ld free", pages,
        (long)tl_room(&a));
  CHECK(tl_free(&b) + (long)(b.pt_pages - a.pt_pages) == tl_free(&a),
        "free pages %ld before, %ld after (page-table pages %ld -> %ld, kept until exit)",
        tl_free(&a), tl_free(&b), (long)a.pt_pages, (long)b.pt_pages);
  int pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    if (sbrk(2 * PGSIZE) == SBRK_ERROR)
      exit(4);
    char *top = sbrk(0);
    if (sbrk(-(int)((uint64)top + 1)) != top)
      exit(2);
    exit(sbrk(0) <= top - 2 * PGSIZE ? 0 : 3);   // now at the heap's base
  }
  CHECK(wait(&st) == pid && st == 0, "sbrk(-(top + 1)) in a child: status %d", st);
}

// sbrklazy reserves lazily in every configuration, past plain sbrk's bound (MIT's lazy_alloc
// asks an eager kernel for 1 GiB): pages are mapped on first touch, by the program or by the
// kernel's copyout, a forked child sees them, and the shrink gives every page back. Named
// only: with LAZY_ALLOC=0 it needs the lazy lab's fault path, and the lazy lab's starter
// tree must pass a plain `usertests` there (docs/lab.md).
#define LAZY_TOUCHES 64
static void sbrklazytest(void)
{
  struct memstat a, b, c;
  int st = -99;
  snap(&a);
  snap(&a);   // the second, with the stack page the first may have faulted in
  long n = (long)(a.sbrk_cap_pages + 16) * PGSIZE;   // past what plain sbrk allows
  if (n < (1L << 30))
    n = 1L << 30;
  if (n > 0x7fff0000L)
    n = 0x7fff0000L;
  long step = (n / LAZY_TOUCHES) & ~(long)(PGSIZE - 1);
  char *p = sbrklazy((int)n);
  CHECK(p != SBRK_ERROR, "sbrklazy(%ld) failed", n);
  snap(&b);
  CHECK(b.mapped_pages == a.mapped_pages, "sbrklazy mapped %ld pages",
        (long)(b.mapped_pages - a.mapped_pages));
  for (int i = 0; i < LAZY_TOUCHES; i++)
    p[i * step] = (char)(i + 1);
  CHECK(fstat(1, (struct stat *)(p + n - PGSIZE)) == 0, "fstat into an untouched page failed");
  snap(&c);
  CHECK(c.mapped_pages - b.mapped_pages == LAZY_TOUCHES + 1, "%d touches mapped %ld pages",
        LAZY_TOUCHES + 1, (long)(c.mapped_pages - b.mapped_pages));
  int pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    for (int i = 0; i < LAZY_TOUCHES; i++)
      if (p[i * step] != (char)(i + 1))
        exit(2);
    exit(p[PGSIZE] == 0 ? 0 : 3);   // an untouched page reads as zero
  }
  CHECK(wait(&st) == pid && st == 0, "the child saw the lazy heap wrong: status %d", st);
  // The reservation does not count against plain sbrk's bound (what plain sbrk added):
  // a page more is mapped, zeroed, at the top, as MIT's usertests lazy_sbrk asks.
  char *q = sbrk(PGSIZE);
  CHECK(q == p + n, "sbrk(PGSIZE) after sbrklazy returned %p, not %p", q, p + n);
  CHECK(q[0] == 0 && q[PGSIZE - 1] == 0, "the page sbrk added is not zero");
  q[7] = 7;
  CHECK(sbrk(-PGSIZE) == q + PGSIZE, "shrink of that page");
  CHECK(sbrk(-(int)n) == p + n, "shrink after sbrklazy");
  snap(&c);
  CHECK(c.mapped_pages == a.mapped_pages, "%ld pages still mapped after the shrink",
        (long)(c.mapped_pages - a.mapped_pages));
  CHECK(tl_free(&c) + (long)(c.pt_pages - a.pt_pages) == tl_free(&a),
        "free pages %ld before, %ld after", tl_free(&a), tl_free(&c));
}

// A big heap is seen intact by a forked child; the child's writes do not reach the parent.
static void sbrkfork(void)
{
  int n = 2 << 20, pid, st = -99;
  char *p = sbrk(n);
  CHECK(p != (char *)-1, "sbrk failed");
  for (int i = 0; i < n; i += 997)
    p[i] = (char)(i >> 3);
  pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    for (int i = 0; i < n; i += 997)
      if (p[i] != (char)(i >> 3))
        exit(2);
    for (int i = 0; i < n; i += 997)
      p[i] = 0x55;
    exit(0);
  }
  CHECK(wait(&st) == pid && st == 0, "child saw wrong heap (status %d)", st);
  for (int i = 0; i < n; i += 997)
    CHECK(p[i] == (char)(i >> 3), "child's write reached the parent at %d", i);
}

// Out of memory: with LAZY_ALLOC=0 sbrk fails with -1 once memory is gone and the failure
// maps nothing; with LAZY_ALLOC=1 a child touching more than memory holds is killed. It
// stores into all but the last OOM_BY_COPY pages of the room there is, and has fstat()
// write into the rest: the page that cannot be had is then faulted in by the kernel's
// copyout, and the child must die as for its own store, never see the call fail.
// Afterwards the kernel works and every page is back.
#define OOM_BY_COPY 2048
static void oom_child(uint64 lazy)
{
  struct memstat a, b;
  int chunk = 1 << 20;
  uint64 got = 0;
  if (!lazy) {
    for (;;) {
      snap(&a);
      char *p = sbrk(chunk);
      if (p == (char *)-1)
        break;
      p[0] = 1;
      p[chunk - 1] = 2;
      got += chunk;
    }
    snap(&b);
    if (b.mapped_pages != a.mapped_pages || b.vpages != a.vpages)
      exit(2);   // the failing sbrk mapped or reserved something
    if (got < (a.total_pages / 2) * PGSIZE)
      exit(3);   // gave up far too early
    exit(0);
  }
  snap(&a);
  uint64 want = (tl_room(&a) + 8192) * PGSIZE;
  while (got < want) {
    if (sbrklazy(1 << 26) == (char *)-1)   // maybe past what plain sbrk allows
      exit(4);
    got += 1 << 26;
  }
  char *base = sbrk(0) - got;
  uint64 off = 0;
  for (; off < want - (8192 + OOM_BY_COPY) * PGSIZE; off += PGSIZE)
    base[off] = 1;
  for (; off < got; off += PGSIZE)
    if (fstat(1, (struct stat *)(base + off)) < 0)
      exit(6);   // the copy failed for memory and the child lives on
  exit(5);   // must not get here: memory was exhausted
}

static void oom(void)
{
  struct memstat a, b, m;
  int st;
  snap(&m);
  snap(&a);
  st = child_status(oom_child, m.lazy_alloc);
  if (m.lazy_alloc)
    CHECK(st == -1, "child touching too much memory: status %d, expected -1 (killed)%s", st,
          st == 6 ? "; an fstat into its heap failed instead" : "");
  else
    CHECK(st == 0, "sbrk-until-failure child: status %d", st);
  kernel_alive();
  snap(&b);
  // With the page cache: with a swap disk, filling RAM may drop other programs' clean file
  // pages, which come back into the cache later (user/memfree.c).
  CHECK(memfree_net(&a, 1) == memfree_net(&b, 1), "free pages %ld before, %ld after",
        memfree_net(&a, 1), memfree_net(&b, 1));
}

// ---------------------------------------------------------------- bad arguments

// Every system call given a pointer no user may use returns -1 (and nothing panics).
static void badptr(void)
{
  char *args[] = { "x", 0 };
  int fd, pfd[2];
  make_file("utbad", 512, 5);
  for (int i = 0; i < NBAD; i++) {
    char *w = (char *)bad_addr(i);
    fd = open("utbad", O_RDWR);
    CHECK(fd >= 0, "open utbad");
    CHECK(read(fd, w, 10) == -1, "read into %p did not fail", w);
    CHECK(write(fd, w, 10) == -1, "write from %p did not fail", w);
    CHECK(fstat(fd, (struct stat *)w) == -1, "fstat into %p did not fail", w);
    close(fd);
    CHECK(open(w, O_RDONLY) == -1 && open(w, O_CREATE | O_RDWR) == -1, "open(%p) did not fail", w);
    CHECK(mkdir(w) == -1 && chdir(w) == -1 && unlink(w) == -1, "path %p accepted", w);
    CHECK(link(w, "utx") == -1 && link("utbad", w) == -1, "link with %p did not fail", w);
    CHECK(exec(w, args) == -1, "exec(%p) did not fail", w);
    CHECK(pipe((int *)w) == -1, "pipe(%p) did not fail", w);
    CHECK(memstat((struct memstat *)w) == -1, "memstat(%p) did not fail", w);
    int pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0)
      exit(0);
    CHECK(wait((int *)w) == -1, "wait(%p) did not fail", w);
    while (wait(0) > 0)
      ;
  }
  // The failed pipe() calls left no descriptors behind: the lowest free fd is unchanged.
  fd = open("utbad", O_RDONLY);
  CHECK(pipe(pfd) == 0 && pfd[0] == fd + 1 && pfd[1] == fd + 2, "pipe() leaked descriptors");
  close(pfd[0]);
  close(pfd[1]);
  // read() into the program's text must fail and leave the text alone.
  uint64 text = (uint64)badptr & ~3UL;
  uint32 before = *(uint32 *)text;
  CHECK(read(fd, (char *)text, 4) == -1, "read into the text segment did not fail");
  CHECK(*(uint32 *)text == before, "read() changed the text segment");
  close(fd);
  unlink("utbad");
  // A path that runs off the end of the heap without a terminating zero.
  char *top = sbrk(0);
  sbrk(PGROUNDUP((uint64)top) - (uint64)top + PGSIZE);
  char *last = sbrk(0) - PGSIZE;
  memset(last, 'a', PGSIZE);
  CHECK(open(last, O_RDONLY) == -1, "unterminated path at the heap top accepted");
  CHECK(mkdir(last + PGSIZE - 5) == -1, "unterminated short path accepted");
  kernel_alive();
}

// Negative lengths, closed and out-of-range descriptors, running out of descriptors,
// and too-long paths.
static void badfd(void)
{
  char buf[16], longpath[MAXPATH + 40];
  int fd, fds[NOFILE + 1], n = 0;
  struct stat st;
  int bad[] = { -1, -100, NOFILE, NOFILE + 5, 1 << 30 };
  for (int i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
    CHECK(read(bad[i], buf, 1) == -1 && write(bad[i], buf, 1) == -1, "fd %d accepted", bad[i]);
    CHECK(close(bad[i]) == -1 && dup(bad[i]) == -1 && fstat(bad[i], &st) == -1, "fd %d accepted", bad[i]);
  }
  make_file("utfd", 100, 6);
  fd = open("utfd", O_RDWR);
  CHECK(fd >= 0, "open");
  CHECK(read(fd, buf, -1) == -1, "read with length -1 did not fail");
  CHECK(write(fd, buf, -5) == -1, "write with length -5 did not fail");
  CHECK(read(fd, buf, 0) == 0, "read of 0 bytes");
  CHECK(close(fd) == 0 && close(fd) == -1, "double close");
  CHECK(read(fd, buf, 1) == -1 && write(fd, buf, 1) == -1, "closed fd accepted");
  for (;;) {
    fd = open("utfd", O_RDONLY);
    if (fd < 0)
      break;
    CHECK(n <= NOFILE, "more than NOFILE descriptors");
    fds[n++] = fd;
  }
  CHECK(n >= NOFILE - 3, "only %d descriptors could be opened", n);
  CHECK(dup(0) == -1, "dup succeeded with a full table");
  for (int i = 0; i < n; i++)
    close(fds[i]);
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe after releasing descriptors");
  CHECK(read(pfd[1], buf, 1) == -1 && write(pfd[0], buf, 1) == -1, "pipe used the wrong way round");
  close(pfd[0]);
  close(pfd[1]);
  memset(longpath, 'p', sizeof(longpath) - 1);
  longpath[sizeof(longpath) - 1] = 0;
  CHECK(open(longpath, O_CREATE | O_RDWR) == -1, "path longer than MAXPATH accepted");
  unlink("utfd");
}

// ---------------------------------------------------------------- faults that kill

static void store_at(uint64 va) { *(volatile char *)va = 1; }
static void load_at(uint64 va) { if (*(volatile char *)va == 123) exit(9); }

// Expect that a child doing f(va) is killed (status -1), and the kernel goes on.
static void expect_killed(void (*f)(uint64), uint64 va, const char *what)
{
  int st = child_status(f, va);
  CHECK(st == -1, "%s at %p: status %d, expected -1 (killed)", what, (void *)va, st);
}

// Writing to the program's text kills the process (it is mapped read-only, also under COW).
static void textwrite(void)
{
  expect_killed(store_at, (uint64)textwrite, "store into text");
  expect_killed(store_at, (uint64)&tl_init, "store into text");
  kernel_alive();
}

// The guard page under the stack kills on load and store.
static void guardpage(void)
{
  expect_killed(load_at, guard_page(), "load from the guard page");
  expect_killed(store_at, guard_page() + PGSIZE - 8, "store to the guard page");
  kernel_alive();
}

// Kernel addresses and addresses above the heap kill on access.
static void badaccess(void)
{
  uint64 top = PGROUNDUP((uint64)sbrk(0));
  expect_killed(load_at, KERNBASE, "load from KERNBASE");
  expect_killed(store_at, KERNBASE + 0x1000, "store to kernel memory");
  expect_killed(load_at, TRAPFRAME, "load from the trapframe");
  expect_killed(load_at, TRAMPOLINE, "load from the trampoline");
  expect_killed(store_at, top + 5 * PGSIZE, "store above the heap");
  expect_killed(load_at, MAXVA + PGSIZE, "load above MAXVA");
  kernel_alive();
}

// One process writes numbered lines to the console while its siblings fault, so that the
// kernel prints its usertrap lines while the writer's bytes go out from another hart. The
// verdict here is the children's exits; that no line was split, kernel's or writer's, is
// read from the transcript (tests/kernel/test_console.py). Named only: it floods the
// console.
#define MIX_LINES 400
#define MIX_FAULTERS 24
static void consolemix(void)
{
  int writer = fork();
  CHECK(writer >= 0, "fork failed");
  if (writer == 0) {
    for (int i = 0; i < MIX_LINES; i++)
      printf("consolemix line %d of %d: the quick brown fox jumps over the lazy dog\n",
             i, MIX_LINES);
    exit(0);
  }
  // One faulter at a time, each reaped before the next; the writer may end meanwhile, and
  // wait() then reaps it first.
  int writer_st = -2, writer_reaped = 0;
  for (int i = 0; i < MIX_FAULTERS; i++) {
    uint64 va = KERNBASE + (uint64)i * PGSIZE;
    int pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
      load_at(va);
      exit(0);
    }
    for (;;) {
      int st = 12345, got = wait(&st);
      if (got == writer) {
        writer_st = st;
        writer_reaped = 1;
        continue;
      }
      CHECK(got == pid, "wait returned %d, expected %d", got, pid);
      CHECK(st == -1, "load from kernel memory at %p: status %d, expected -1 (killed)",
            (void *)va, st);
      break;
    }
  }
  if (!writer_reaped)
    CHECK(wait(&writer_st) == writer, "wait did not return the writer");
  CHECK(writer_st == 0, "the writer exited with %d", writer_st);
}

// ---------------------------------------------------------------- main

static const struct test tests[] = {
  { "forkwait", forkwait, 1 },
  { "exitstatus", exitstatus, 1 },
  { "forkmem", forkmem, 1 },
  { "exec", exectest, 1 },
  { "execbad", execbad, 1 },
  { "kill", killtest, 1 },
  { "killinit", killinit, 1 },
  { "concurrent", concurrent, 1 },
  { "pipeends", pipeends, 1 },
  { "pipesmall", pipesmall, 1 },
  { "pipereaders", pipereaders, 1 },
  { "filebasic", filebasic, 1 },
  { "truncate", truncate, 1 },
  { "gathered", gathered, 1 },
  { "partialwrite", partialwrite, 1 },
  { "dirs", dirs, 1 },
  { "deadcwd", deadcwd, 1 },
  { "sbrkbasic", sbrkbasic, 1 },
  { "sbrkfree", sbrkfree, 1 },
  { "sbrkbound", sbrkbound, 1 },
  { "badptr", badptr, 1 },
  { "badfd", badfd, 1 },
  { "textwrite", textwrite, 1 },
  { "guardpage", guardpage, 1 },
  { "badaccess", badaccess, 1 },
  { "pipebig", pipebig, 0 },
  { "bigfile", bigfile, 0 },
  { "manyfiles", manyfiles, 0 },
  { "sbrkfork", sbrkfork, 0 },
  { "forkfill", forkfill, 0 },
  { "oom", oom, 0 },
  { "consolemix", consolemix, NAMED_ONLY },
  { "maxfile", maxfile, NAMED_ONLY },
  { "sbrklazy", sbrklazytest, NAMED_ONLY },
  { 0, 0, 0 },
};

// The image exectest runs: exit with argc when the arguments are the expected ones.
static void exec_check(int argc, char **argv)
{
  if (argc != 5 || strcmp(argv[2], "alpha") != 0 || strcmp(argv[3], "beta gamma") != 0 ||
      argv[4][0] != 0 || argv[5] != 0)
    exit(100 + argc);
  exit(argc);
}

int main(int argc, char **argv)
{
  tl_init(argv[0]);
  if (argc >= 2 && strcmp(argv[1], "--exec-check") == 0)
    exec_check(argc, argv);
  exit(run_tests(tests, argc, argv, 0));
}
