// tests/course/programs/lazytests.c: a course's lazy-allocation test written against stock xv6
// (the classic lab style: its own little runner, sbrk/fork/wait only, no NexOS headers
// beyond the classic ones). Given as EXTRA_UPROGS it replaces the built-in lazytests on the
// image (docs/userland.md). Meant for LAZY_ALLOC=1 kernels.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "user/user.h"

#define BIG (512 * 1024 * 1024)   // more than the 384 MiB guest: fits only lazily
#define STRIDE (64 * PGSIZE)

// Reserve BIG bytes, touch one page in every STRIDE, read them back, give the memory back.
// Exits 0 when every touched page kept its value.
void
sparse(void)
{
  char *base = sbrk(BIG);
  if (base == (char *)-1) {
    printf("sparse: sbrk(%d) failed\n", BIG);
    exit(1);
  }
  for (char *p = base; p < base + BIG; p += STRIDE)
    *p = (char)((p - base) / STRIDE);
  for (char *p = base; p < base + BIG; p += STRIDE) {
    if (*p != (char)((p - base) / STRIDE)) {
      printf("sparse: wrong value at %p\n", p);
      exit(1);
    }
  }
  if (sbrk(-BIG) != base + BIG) {
    printf("sparse: sbrk(-%d) did not return the old end\n", BIG);
    exit(1);
  }
  exit(0);
}

// Grow by 16 pages, touch them, shrink back; a child touching the released range must be
// killed by the kernel. Exits 0 when it was.
void
unmapped(void)
{
  char *base = sbrk(16 * PGSIZE);
  int st = 0;
  for (int i = 0; i < 16; i++)
    base[i * PGSIZE] = 1;
  sbrk(-16 * PGSIZE);
  int pid = fork();
  if (pid == 0) {
    base[8 * PGSIZE] = 2;   // no longer part of the heap
    exit(0);
  }
  wait(&st);
  if (st != -1) {
    printf("unmapped: child storing into a released page exited %d, not killed\n", st);
    exit(1);
  }
  exit(0);
}

// A child that touches far more memory than the machine has must be killed (out of
// memory), and the parent must still work afterwards. Exits 0 when that is so.
void
oom(void)
{
  int st = 0;
  int pid = fork();
  if (pid == 0) {
    char *base = sbrk(BIG);
    if (base == (char *)-1)
      exit(3);
    for (char *p = base; p < base + BIG; p += PGSIZE)
      *p = 1;
    exit(4);   // 512 MiB fitted into 384 MiB: impossible
  }
  wait(&st);
  if (st != -1) {
    printf("oom: greedy child exited %d, expected to be killed\n", st);
    exit(1);
  }
  char *q = sbrk(PGSIZE);
  q[0] = 7;
  exit(q[0] == 7 ? 0 : 1);
}

struct onetest {
  char *name;
  void (*fn)(void);
};

// Run each test in a child: "test <name>: OK" when it exits 0, else FAILED; then the
// verdict line.
int
main(int argc, char *argv[])
{
  struct onetest tests[] = {
    { "sparse", sparse }, { "unmapped", unmapped }, { "oom", oom }, { 0, 0 },
  };
  int failed = 0;
  printf("course lazytests: starting\n");
  for (struct onetest *t = tests; t->name; t++) {
    int st = 0;
    if (fork() == 0)
      t->fn();
    wait(&st);
    printf("test %s: %s\n", t->name, st == 0 ? "OK" : "FAILED");
    failed += st != 0;
  }
  printf(failed ? "SOME TESTS FAILED\n" : "ALL TESTS PASSED\n");
  exit(failed ? 1 : 0);
}
