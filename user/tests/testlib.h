// testlib.h: the small test harness shared by NexOS's test programs (usertests, stress,
// lazytests, cowtests, fptest); the code is in testlib.c, a library the Makefile links into
// every program of user/tests/.
//
// A test is a function run in a child process of the runner. It passes by returning (the
// runner then prints "test <name>: OK"); it fails with FAIL()/CHECK(), which print
// "test <name>: FAILED <why>" and exit the child with status 1. Any other exit status (-1 when
// the kernel killed the test process) is reported by the runner. After all tests, the runner
// compares the allocator's free-page count with the one it saw at the start ("leakcheck") and
// prints the verdict line ALL TESTS PASSED or SOME TESTS FAILED as the very last line.

#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/memstat.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "user/user.h"

// One named test; quick tests make up the -q subset, and a NAMED_ONLY one runs only when
// named (too slow for every run: each grade runs the whole program).
#define NAMED_ONLY (-1)
struct test {
  const char *name;
  void (*fn)(void);
  int quick;   // 1: in -q; 0: in full runs; NAMED_ONLY
};

extern const char *tl_name;   // the test running in this process (for FAIL)
extern char tl_self[MAXPATH]; // absolute path of this program, for exec tests

#define FAIL(...) do { \
    printf("test %s: FAILED ", tl_name); printf(__VA_ARGS__); printf("\n"); exit(1); \
  } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

void snap(struct memstat *m);
char *align_heap(void);
long tl_free(const struct memstat *m);
uint64 tl_room(const struct memstat *m);
uint64 tl_memory(const struct memstat *m);
uint64 guard_page(void);
void tl_init(char *argv0);
void tl_srand(uint64 seed);
uint64 rnd(void);
int child_status(void (*fn)(uint64), uint64 arg);
void kernel_alive(void);
void make_file(const char *path, int n, int seed);
void check_file(const char *path, int n, int seed);
int run_tests(const struct test *tests, int argc, char **argv, int leakcheck_each);

// The byte a test file holds at offset i (content depends on a per-file seed).
static inline char pattern(int seed, uint64 i)
{
  return (char)((i * 7 + (uint64)seed * 131 + (i >> 10)) & 0xff);
}
