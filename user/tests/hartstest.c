// hartstest: the harts library (user/llm/harts.h) at work, checked against one hart.
//
//   hartstest [N [KB]]   a team of N harts (default: every hart running, memstat's ncpu),
//                        with an arena of KB KiB (default 8; the stop_us figure grows with it)
//
// A float matvec split by rows and an integer sum split by ranges must give exactly the
// one-hart result (each row's dot product runs the same code in the same order on any
// hart; integer sums are exact). Then: a process forked from the team's owner runs jobs
// alone and correctly; a helper killed during a job ends hart 0 with an error line after
// the timeout rather than hanging it; helpers whose hart 0 exits without harts_stop()
// exit by themselves; and harts_stop() leaves the free pages where they were. The last
// line is "hartstest: OK harts=N ..." with the timings, or "hartstest: FAILED <why>".
#include "user/tests/testlib.h"
#include "user/llm/llm.h"
#include "user/llm/harts.h"

#define ROWS 384
#define COLS 1024
#define NSUM (1 << 20)        // uint32 values summed
#define REPS 10               // timed repetitions of each job
#define EMPTY_RUNS 200        // jobs that do nothing: the cost of one harts_run
#define ARENA 8192            // bytes of arena the test takes, by default
#define KILL_TIMEOUT_MS 300   // hart 0's patience in the killed-helper check
#define SETTLE_MS 3000        // how long pages may take to come back after an orphan exits

#define FAILED(...) do { \
    printf("hartstest: FAILED "); printf(__VA_ARGS__); printf("\n"); exit(1); \
  } while (0)

// The job's description, in the arena. Pointers to w, x, v point to private memory that is
// identical in every process (filled before harts_start(), never written after).
struct job {
  const float *w;          // [ROWS][COLS]
  const float *x;          // [COLS]
  const uint *v;           // [NSUM]
  float *y;                // [ROWS], in the arena
  struct { uint64 sum; int calls; int maxn; } __attribute__((aligned(64))) hart[NCPU];
};

static float *w, *x;
static uint *v;
static float yref[ROWS];
static uint64 sumref;
static uint64 arena_bytes = ARENA;
static int suicide_owner;     // hart 0 of check_killed_helper's team

// Contract: rows [hart*ROWS/n, (hart+1)*ROWS/n) of y = W x; each row summed left to right.
static void
matvec_job(void *arg, int hart, int n)
{
  struct job *j = arg;
  for(int r = hart * ROWS / n; r < (hart + 1) * ROWS / n; r++){
    const float *row = j->w + (uint64)r * COLS;
    float s = 0;
    for(int c = 0; c < COLS; c++)
      s += row[c] * j->x[c];
    j->y[r] = s;
  }
  j->hart[hart].calls++;
  if(n > j->hart[hart].maxn)
    j->hart[hart].maxn = n;
}

// Contract: hart's share of the sum of v, into j->hart[hart].sum.
static void
sum_job(void *arg, int hart, int n)
{
  struct job *j = arg;
  uint64 s = 0;
  for(int i = hart * (NSUM / n); i < (hart == n - 1 ? NSUM : (hart + 1) * (NSUM / n)); i++)
    s += j->v[i];
  j->hart[hart].sum = s;
}

// Contract: does nothing (measures the barrier alone).
static void
empty_job(void *arg, int hart, int n)
{
}

// Contract: a helper that runs a part kills itself inside it; hart 0, in its part, waits
// until a helper has entered one (arg: a flag in the arena), so that the job cannot end
// without the dead helper's part.
static void
suicide_job(void *arg, int part, int n)
{
  volatile int *entered = arg;
  if(getpid() != suicide_owner){
    *entered = 1;
    kill(getpid());
    for(;;)
      ;   // not reached: a killed process exits on its way back to user mode
  }
  while(*entered == 0)
    ;
}

// Contract: fill w, x, v with pseudo-random values and compute the one-hart references.
static void
make_data(void)
{
  w = llm_malloc((uint64)ROWS * COLS * sizeof(float), "w");
  x = llm_malloc(COLS * sizeof(float), "x");
  v = llm_malloc((uint64)NSUM * sizeof(uint), "v");
  tl_srand(42);
  for(uint64 i = 0; i < (uint64)ROWS * COLS; i++)
    w[i] = (float)((long)(rnd() % 2001) - 1000) / 997.0f;
  for(int i = 0; i < COLS; i++)
    x[i] = (float)((long)(rnd() % 2001) - 1000) / 1009.0f;
  sumref = 0;
  for(int i = 0; i < NSUM; i++){
    v[i] = (uint)rnd();
    sumref += v[i];
  }
  for(int r = 0; r < ROWS; r++){
    float s = 0;
    for(int c = 0; c < COLS; c++)
      s += w[(uint64)r * COLS + c] * x[c];
    yref[r] = s;
  }
}

// Contract: a new job in the arena over the test's data, its y zeroed.
static struct job *
new_job(void)
{
  struct job *j = harts_alloc(sizeof(*j));
  j->w = w;
  j->x = x;
  j->v = v;
  j->y = harts_alloc(ROWS * sizeof(float));
  return j;
}

// Contract: run the matvec and the sum on the team and check both against the reference
// and that each of the n harts ran each job once (calls grew by one).
static void
check_team(struct job *j, int n)
{
  int calls[NCPU];
  for(int h = 0; h < n; h++)
    calls[h] = j->hart[h].calls;
  memset(j->y, 0, ROWS * sizeof(float));
  harts_run(matvec_job, j);
  if(memcmp(j->y, yref, sizeof(yref)) != 0)
    FAILED("matvec on %d harts differs from one hart", n);
  for(int h = 0; h < n; h++)
    if(j->hart[h].calls != calls[h] + 1 || j->hart[h].maxn != n)
      FAILED("part %d ran %d times in jobs of n=%d, want once in n=%d", h,
             j->hart[h].calls - calls[h], j->hart[h].maxn, n);
  harts_run(sum_job, j);
  uint64 s = 0;
  for(int h = 0; h < n; h++)
    s += j->hart[h].sum;
  if(s != sumref)
    FAILED("sum on %d harts is %lu, want %lu", n, s, sumref);
}

// Contract: microseconds that reps runs of fn take, on the team (team=1) or alone.
static uint64
time_job(void (*fn)(void *, int, int), struct job *j, int reps, int team)
{
  uint64 t0 = clock_us();
  for(int i = 0; i < reps; i++){
    if(team)
      harts_run(fn, j);
    else
      fn(j, 0, 1);
  }
  return clock_us() - t0;
}

// Contract: a child forked from the owner sees one hart and runs a job alone, correctly;
// the team still works after it exited.
static void
check_forked_child(struct job *j, int n)
{
  int pid = fork();
  if(pid < 0)
    FAILED("fork");
  if(pid == 0){
    for(int h = 0; h < NCPU; h++)
      j->hart[h].maxn = 0;
    memset(j->y, 0, ROWS * sizeof(float));
    if(harts_count() != 1)
      exit(2);
    harts_run(matvec_job, j);
    if(memcmp(j->y, yref, sizeof(yref)) != 0 || j->hart[0].maxn != 1)
      exit(3);
    exit(0);
  }
  int st;
  if(wait(&st) != pid || st != 0)
    FAILED("a forked child's harts_run: status %d (2: harts_count, 3: wrong result)", st);
  for(int h = 0; h < NCPU; h++)
    j->hart[h].maxn = 0;
  check_team(j, n);
}

// Contract: the free pages, once they are back at want or SETTLE_MS has passed.
static long
settle(long want)
{
  struct memstat m;
  uint64 t0 = clock_us();
  for(;;){
    snap(&m);
    if(tl_free(&m) == want || clock_us() - t0 > SETTLE_MS * 1000UL)
      return tl_free(&m);
    sleep(1);
  }
}

// Contract: a team of 2 in a child whose helper dies during a job: the child (hart 0)
// must end with status 1 after its timeout (its error line printed), not hang; then
// every page comes back.
static void
check_killed_helper(long base)
{
  printf("hartstest: killing a helper during a job; one error line follows\n");
  uint64 t0 = clock_us();   // before the fork: the child posts its job after this
  int pid = fork();
  if(pid < 0)
    FAILED("fork");
  if(pid == 0){
    harts_timeout(KILL_TIMEOUT_MS);
    suicide_owner = getpid();
    harts_start(2, 64);
    harts_run(suicide_job, harts_alloc(sizeof(int)));
    exit(0);   // hart 0 came back though its helper died
  }
  int st;
  if(wait(&st) != pid || st != 1)
    FAILED("hart 0 of a killed helper: status %d, want 1", st);
  uint64 ms = (clock_us() - t0) / 1000;
  if(ms < KILL_TIMEOUT_MS)
    FAILED("hart 0 gave up after %lu ms, before its timeout", ms);
  long got = settle(base);
  if(got != base)
    FAILED("free pages %ld after a killed helper's team, want %ld", got, base);
}

// Contract: hart 0 exits without harts_stop(): its helpers notice they are orphans and
// exit, and every page comes back.
static void
check_orphans(long base)
{
  int pid = fork();
  if(pid < 0)
    FAILED("fork");
  if(pid == 0){
    harts_start(2, 64);
    harts_run(empty_job, 0);
    exit(0);
  }
  int st;
  if(wait(&st) != pid || st != 0)
    FAILED("hart 0 of the orphan check: status %d", st);
  long got = settle(base);
  if(got != base)
    FAILED("free pages %ld after hart 0 exited without harts_stop, want %ld", got, base);
}

// Contract: the whole check on a team of n; prints the OK line.
static void
run(int n)
{
  struct memstat m;

  // One cycle first: the n == 1 arena comes from malloc, which keeps the heap it grew.
  harts_start(n, arena_bytes);
  harts_stop();
  snap(&m);
  long base = tl_free(&m);

  harts_start(n, arena_bytes);
  if(harts_count() != n)
    FAILED("harts_count() = %d, want %d", harts_count(), n);
  struct job *j = new_job();
  check_team(j, n);
  uint64 mv1 = time_job(matvec_job, j, REPS, 0);
  uint64 mvn = time_job(matvec_job, j, REPS, 1);
  uint64 s1 = time_job(sum_job, j, REPS, 0);
  uint64 sn = time_job(sum_job, j, REPS, 1);
  uint64 empty = time_job(empty_job, j, EMPTY_RUNS, 1);
  check_team(j, n);   // timing ran the jobs: still right
  check_forked_child(j, n);
  uint64 t0 = clock_us();
  harts_stop();   // every process writes the arena's dirty pages back as it unmaps it
  uint64 stop = clock_us() - t0;
  if(harts_count() != 1)
    FAILED("harts_count() = %d after harts_stop", harts_count());
  snap(&m);
  if(tl_free(&m) != base)
    FAILED("free pages %ld after harts_stop, want %ld", tl_free(&m), base);

  check_killed_helper(base);
  check_orphans(base);
  printf("hartstest: OK harts=%d matvec_1=%luus matvec_%d=%luus speedup=%.2f "
         "sum_speedup=%.2f run_us=%lu stop_us=%lu arena_kb=%lu\n", n, mv1 / REPS, n,
         mvn / REPS, (double)mv1 / (double)mvn, (double)s1 / (double)sn, empty / EMPTY_RUNS,
         stop, arena_bytes / 1024);
}

int
main(int argc, char *argv[])
{
  struct memstat m;

  llm_name = "hartstest";
  tl_init(argv[0]);
  snap(&m);
  int n = argc > 1 ? atoi(argv[1]) : m.ncpu;
  if(n < 1 || n > NCPU)
    FAILED("harts %d: want 1..%d", n, NCPU);
  if(argc > 2)
    arena_bytes = (uint64)atoi(argv[2]) * 1024;
  if(arena_bytes < 2048 || arena_bytes > (64UL << 20))
    FAILED("arena of %lu KiB: want 2..65536", arena_bytes / 1024);
  make_data();
  run(n);
  exit(0);
}
