// tests/data/hidden/bigsbrk.c: a hidden test program for tests/course/test_gradescope.py (docs/lab.md,
// "Grading a course"). It reserves more than the guest's memory and touches a few pages of
// it: only a lazy sbrk (LAZY_ALLOC=1 with the lazy lab done) can give that.
#include "kernel/types.h"
#include "user/user.h"

#define BIG (512 * 1024 * 1024)
#define PAGE 4096

int
main(void)
{
  char *base = sbrk(BIG);
  if (base == (char *)-1) {
    printf("bigsbrk: FAILED sbrk(%d) refused\n", BIG);
    printf("SOME TESTS FAILED\n");
    exit(1);
  }
  base[0] = 1;
  base[BIG / 2] = 2;
  base[BIG - PAGE] = 3;
  if (base[0] != 1 || base[BIG / 2] != 2 || base[BIG - PAGE] != 3) {
    printf("bigsbrk: FAILED the touched pages lost their values\n");
    printf("SOME TESTS FAILED\n");
    exit(1);
  }
  printf("ALL TESTS PASSED\n");
  exit(0);
}
