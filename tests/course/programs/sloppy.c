// tests/course/programs/sloppy.c: a course program written against stock xv6, with the sloppy
// printf formats stock xv6 accepts (a uint64 for %p and for %d, an argument too many) and
// the classic headers in the classic order. Under the tree's own flags these formats are
// errors; as EXTRA_UPROGS they must compile with warnings only (docs/userland.md), and the
// program must work: it exercises the classic system calls (and the names newer stock xv6
// gives some of them) and prints the verdict.
#include "kernel/param.h"
#include "kernel/types.h"
#include "kernel/stat.h"
#include "user/user.h"
#include "kernel/fs.h"
#include "kernel/fcntl.h"
#include "kernel/syscall.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"

int failures;

// Count a failed check and say which.
void
check(int ok, char *what)
{
  if (!ok) {
    printf("sloppy: FAILED %s\n", what);
    failures++;
  }
}

// pipe + dup + fork + wait(0): a child writes through a dup of the write end.
void
pipes(void)
{
  int fds[2];
  char buf[8];
  check(pipe(fds) == 0, "pipe");
  if (fork() == 0) {
    int w = dup(fds[1]);
    close(fds[0]);
    write(w, "xv6", 3);
    exit(0);
  }
  close(fds[1]);
  check(read(fds[0], buf, sizeof(buf)) == 3 && buf[0] == 'x', "read from the pipe");
  close(fds[0]);
  wait(0);
}

// kill a child that sleeps; wait reports it killed (-1).
void
killing(void)
{
  int st = 0;
  int pid = fork();
  if (pid == 0) {
    for (;;)
      sleep(1);
  }
  sleep(2);
  check(kill(pid) == 0, "kill");
  check(wait(&st) == pid && st == -1, "killed child's status");
}

// open/write/fstat/unlink a file with the classic fcntl flags.
void
files(void)
{
  struct stat st;
  int fd = open("sloppyfile", O_CREATE | O_RDWR);
  check(fd >= 0, "open O_CREATE");
  check(write(fd, "abc", 3) == 3, "write");
  check(fstat(fd, &st) == 0 && st.type == T_FILE && st.size == 3, "fstat");
  close(fd);
  check(unlink("sloppyfile") == 0, "unlink");
  check(open("sloppyfile", O_RDONLY) < 0, "file gone after unlink");
}

// The names newer stock xv6 uses: SBRK_ERROR, pause and sbrklazy.
void
newer(void)
{
  char *p = sbrklazy(PGSIZE);
  check(p != SBRK_ERROR, "sbrklazy");
  p[0] = 1;
  check(pause(1) == 0, "pause");
}

int
main(int argc, char *argv[])
{
  uint64 x = 42;
  char *p = sbrk(PGSIZE);
  int t0 = uptime();

  printf("sloppy: p=%p\n", (uint64)0x1234);          // %p given a uint64
  printf("sloppy: d=%d\n", x);                       // %d given a uint64
  printf("sloppy: extra\n", 1, 2);                   // arguments too many
  printf("sloppy: pid %d sbrk %p\n", getpid(), (uint64)p);
  check(p != (char *)-1, "sbrk");
  p[PGSIZE - 1] = 1;
  check(BSIZE > 0 && MAXPATH > 0 && SYS_fork > 0 && KERNBASE == 0x80000000L, "constants");
  pipes();
  killing();
  files();
  newer();
  check(uptime() >= t0, "uptime");
  printf(failures ? "SOME TESTS FAILED\n" : "ALL TESTS PASSED\n");
  exit(failures ? 1 : 0);
}
