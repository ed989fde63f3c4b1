// tests/course/programs/cowbig.c: a course's copy-on-write test written against stock xv6, in the
// classic lab style: it sizes its memory from PHYSTOP - KERNBASE (kernel/memlayout.h), so
// it is only right when user programs see the configured RAM (docs/userland.md). The first
// test forks a process holding two thirds of RAM: that fits only with COW_ALLOC=1; without
// COW the fork must fail cleanly (-1), never panic.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "user/user.h"

// Put the page's number (its address / PGSIZE) plus salt into the first word of each page
// of the n bytes at base.
void
fill(char *base, uint64 n, uint64 salt)
{
  for (char *p = base; p < base + n; p += PGSIZE)
    *(uint64 *)p = (uint64)p / PGSIZE + salt;
}

// 1 if every page of the n bytes at base holds what fill(base, n, salt) put there.
int
filled(char *base, uint64 n, uint64 salt)
{
  for (char *p = base; p < base + n; p += PGSIZE)
    if (*(uint64 *)p != (uint64)p / PGSIZE + salt)
      return 0;
  return 1;
}

// Take two thirds of RAM, write every page, fork a child that reads it all and exits.
// Done twice, so that a kernel leaking the shared pages runs out the second time.
// Exits 0 on success, 1 with a reason otherwise.
void
simple(void)
{
  uint64 sz = (PHYSTOP - KERNBASE) / 3 * 2;
  for (int round = 0; round < 2; round++) {
    char *base = sbrk(sz);
    int st = 0;
    if (base == (char *)-1) {
      printf("simple: sbrk(%d) failed\n", (int)sz);
      exit(1);
    }
    fill(base, sz, round);
    int pid = fork();
    if (pid < 0) {
      printf("simple: fork failed (round %d)\n", round);
      exit(1);
    }
    if (pid == 0)
      exit(filled(base, sz, round) ? 0 : 2);
    wait(&st);
    if (st != 0) {
      printf("simple: child saw wrong memory (status %d)\n", st);
      exit(1);
    }
    sbrk(-sz);
  }
  exit(0);
}

// A quarter of RAM shared by three generations; the child and the grandchild each overwrite
// half of it with their own values, and everybody checks that they see only their own.
// Exits 0 on success.
void
three(void)
{
  uint64 sz = (PHYSTOP - KERNBASE) / 4, half = sz / 2;
  char *base = sbrk(sz);
  int st = 0;
  if (base == (char *)-1)
    exit(1);
  fill(base, sz, 100);
  int pid = fork();
  if (pid < 0)
    exit(1);
  if (pid == 0) {
    int pid2 = fork();
    if (pid2 < 0)
      exit(3);
    fill(base, half, pid2 == 0 ? 300 : 200);
    if (!filled(base, half, pid2 == 0 ? 300 : 200) || !filled(base + half, sz - half, 100))
      exit(4);
    if (pid2 == 0)
      exit(0);
    wait(&st);
    exit(st);
  }
  wait(&st);
  if (st != 0) {
    printf("three: a descendant failed (status %d)\n", st);
    exit(1);
  }
  exit(filled(base, sz, 100) ? 0 : 1);
}

// The kernel writes into a shared page (read() from a pipe into it): the child must get the
// data and the parent's copy must stay as it was. Exits 0 on success.
void
kernelwrite(void)
{
  char *buf = sbrk(4 * PGSIZE);
  int fds[2], st = 0;
  memset(buf, 'p', 4 * PGSIZE);
  if (pipe(fds) < 0)
    exit(1);
  int pid = fork();
  if (pid == 0) {
    close(fds[1]);
    int n = read(fds[0], buf + PGSIZE, 100);
    exit(n == 100 && buf[PGSIZE] == 'c' && buf[PGSIZE + 99] == 'c' && buf[PGSIZE + 100] == 'p'
         ? 0 : 2);
  }
  close(fds[0]);
  char msg[100];
  memset(msg, 'c', sizeof(msg));
  write(fds[1], msg, sizeof(msg));
  close(fds[1]);
  wait(&st);
  for (int i = 0; i < 4 * PGSIZE; i++)
    if (buf[i] != 'p')
      exit(3);
  exit(st);
}

struct onetest {
  char *name;
  void (*fn)(void);
};

// Print the memory size this program was compiled for, run each test in a child (OK when it
// exits 0), then the verdict line.
int
main(int argc, char *argv[])
{
  struct onetest tests[] = {
    { "simple", simple }, { "three", three }, { "kernelwrite", kernelwrite }, { 0, 0 },
  };
  int failed = 0;
  printf("cowbig: PHYSTOP - KERNBASE = %d MiB\n", (int)((PHYSTOP - KERNBASE) >> 20));
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
