// fptest: user-mode floating point survives traps, context switches and fork.
//
//   fptest            run every test
//   fptest NAME       run only the test NAME
//
// Several processes at once iterate recurrences in double and float whose every value is an
// integer small enough to be exact, so each step has one right answer; an integer shadow of the
// same recurrence gives it, and the FP values are compared bit for bit. Each process also runs
// with its own dynamic rounding mode (fcsr.frm) and checks that 1/10 keeps rounding its way.
// They run for over a second each, long enough to be preempted many times; if the kernel
// mixed up or lost FP registers or fcsr between processes, a value would differ.

#include "user/tests/testlib.h"

#define FRM_RNE 0   // round to nearest, ties to even
#define FRM_RTZ 1   // round towards zero

static void set_frm(uint64 mode) { asm volatile("fsrm %0" : : "r"(mode)); }
static uint64 get_frm(void) { uint64 x; asm volatile("frrm %0" : "=r"(x)); return x; }
static uint64 get_fflags(void) { uint64 x; asm volatile("frflags %0" : "=r"(x)); return x; }
static void clear_fflags(void) { asm volatile("fsflags zero"); }

static uint64 dbits(double d) { union { double d; uint64 u; } x; x.d = d; return x.u; }
static uint32 fbits(float f) { union { float f; uint32 u; } x; x.f = f; return x.u; }

// 1/10 in the current rounding mode (binary 1.10011001...: the part beyond the 52 fraction
// bits is 0.6 ulp, so it rounds up to nearest but down towards zero: the modes differ). The division is an asm
// volatile so that the compiler neither folds it nor moves it across the rounding-mode
// changes (also asm volatile).
static double tenth(void)
{
  double one = 1.0, ten = 10.0, r;
  asm volatile("fdiv.d %0, %1, %2" : "=f"(r) : "f"(one), "f"(ten));
  return r;
}

#define ND 8           // double recurrences
#define NF 4           // float recurrences
#define DMOD 16777216.0  // 2^24: doubles stay below 2^24 * 1103 + C < 2^53 (exact)
#define FMOD 4096.0f     // 2^12: floats stay below 2^12 * 13 + C < 2^24 (exact)

// One worker: iterate for at least `us` microseconds; exit 0 when every value matched,
// 10+j on a double mismatch, 20+j on a float mismatch, 30 when the rounding modes agree,
// 31 on a wrong running sum, 32 when frm changed, 33 when 1/10 rounds differently.
static void worker(uint64 id)
{
  double x[ND], h = 0;
  float y[NF];
  uint64 sx[ND], sy[NF], iters = 0;
  uint64 mode = (id & 1) ? FRM_RTZ : FRM_RNE;
  double mine;

  set_frm(FRM_RTZ);
  double t_rtz = tenth();
  set_frm(FRM_RNE);
  double t_rne = tenth();
  if (dbits(t_rtz) == dbits(t_rne))
    exit(30);   // the rounding mode has no effect at all
  set_frm(mode);
  mine = mode == FRM_RTZ ? t_rtz : t_rne;

  for (int j = 0; j < ND; j++) {
    sx[j] = (id * 977 + j * 131) % 16777216;
    x[j] = (double)sx[j];
  }
  for (int j = 0; j < NF; j++) {
    sy[j] = (id * 31 + j * 7) % 4096;
    y[j] = (float)sy[j];
  }
  uint64 start = clock_us();
  while (iters < 200000000) {
    for (int k = 0; k < 256; k++) {
      for (int j = 0; j < ND; j++) {
        double v = x[j] * 1103.0 + (double)(12345 + id * 7 + j);
        x[j] = v - (double)(long)(v / DMOD) * DMOD;
      }
      for (int j = 0; j < NF; j++) {
        float v = y[j] * 13.0f + (float)(id + j + 1);
        y[j] = v - (float)(int)(v / FMOD) * FMOD;
      }
      h += 0.25;
    }
    for (int k = 0; k < 256; k++) {
      for (int j = 0; j < ND; j++)
        sx[j] = (sx[j] * 1103 + 12345 + id * 7 + j) % 16777216;
      for (int j = 0; j < NF; j++)
        sy[j] = (sy[j] * 13 + id + j + 1) % 4096;
    }
    iters += 256;
    for (int j = 0; j < ND; j++)
      if (dbits(x[j]) != dbits((double)sx[j]))
        exit(10 + j);
    for (int j = 0; j < NF; j++)
      if (fbits(y[j]) != fbits((float)sy[j]))
        exit(20 + j);
    if (dbits(h) != dbits((double)iters / 4.0))
      exit(31);
    if (get_frm() != mode)
      exit(32);
    if (dbits(tenth()) != dbits(mine))
      exit(33);
    if (clock_us() - start > 1500000 && iters >= 20000)
      break;
  }
  exit(0);
}

// What a worker's exit status means.
static const char *why(int st)
{
  switch (st) {
  case 30: return "RTZ and RNE give the same 1/10";
  case 31: return "running sum wrong";
  case 32: return "rounding mode changed under the process";
  case 33: return "1/10 rounded differently than at the start";
  }
  if (st >= 20 && st < 30)
    return "float value mismatch";
  if (st >= 10 && st < 20)
    return "double value mismatch";
  return "killed or crashed";
}

// Four processes (more than the harts) compute at once; each must get its exact values.
static void concurrent(void)
{
  enum { N = 4 };
  int pids[N], st;
  for (int i = 0; i < N; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0, "fork failed");
    if (pids[i] == 0)
      worker(i + 1);
  }
  for (int i = 0; i < N; i++) {
    int pid = wait(&st), who = -1;
    for (int k = 0; k < N; k++)
      if (pids[k] == pid)
        who = k;
    CHECK(who >= 0, "wait returned %d", pid);
    CHECK(st == 0, "worker %d: exit status %d (%s)", who + 1, st, why(st));
  }
}

// FP registers live across fork, sleep and other system calls keep their values in parent
// and child, and fcsr (rounding mode and accrued flags) is per process.
static void fork_regs(void)
{
  volatile double seed = 1.0;
  double a = seed * 3.5, b = seed / 8.0, c = a * b + 0.125;   // exact: 3.5, 0.125, 0.5625
  float f = (float)seed * 2.75f;
  int pid, st = -99;
  set_frm(FRM_RTZ);
  clear_fflags();
  (void)tenth();                 // inexact: sets NX (bit 0)
  CHECK((get_fflags() & 1) == 1, "1/10 did not set the inexact flag");
  pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    set_frm(FRM_RNE);
    clear_fflags();
    sleep(1);
    if (a != 3.5 || b != 0.125 || c != 0.5625 || f != 2.75f)
      exit(2);
    if (get_frm() != FRM_RNE || get_fflags() != 0)
      exit(3);
    exit(0);
  }
  sleep(2);
  CHECK(a == 3.5 && b == 0.125 && c == 0.5625 && f == 2.75f, "parent's FP values changed");
  CHECK(get_frm() == FRM_RTZ, "parent's rounding mode changed to %ld", (long)get_frm());
  CHECK((get_fflags() & 1) == 1, "parent's inexact flag was lost");
  CHECK(wait(&st) == pid, "wait");
  CHECK(st == 0, "child: %s", st == 2 ? "FP registers wrong after fork" :
        st == 3 ? "fcsr not its own" : "crashed");
}

static const struct test tests[] = {
  { "concurrent", concurrent, 1 },
  { "forkregs", fork_regs, 1 },
  { 0, 0, 0 },
};

int main(int argc, char **argv)
{
  tl_init(argv[0]);
  exit(run_tests(tests, argc, argv, 1));
}
