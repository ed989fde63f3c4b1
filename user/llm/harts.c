// Every hart at work: a team of processes sharing one MAP_SHARED file mapping, and a
// generation-counter barrier over it (user/llm/harts.h, docs/harts.md).
//
// The arena, as the file lays it out and every process maps it:
//   [struct team: the barrier, one 64-byte line per field written by one hart][allocations]
// Memory ordering: hart 0 writes job (fn, arg, stop) and then stores gen with release; a
// helper loads gen with acquire, so it sees that job. A helper's stores made by fn happen
// before its release store of done[h]; hart 0's acquire load of done[h] == gen makes them
// visible to hart 0 (and, through hart 0's next release of gen, to every helper).
//
// A dead helper: hart 0 cannot ask whether a child is alive without waiting for it (no
// WNOHANG in NexOS), and a killed helper leaves nothing in the arena. So hart 0 bounds its
// wait: a job that a helper has not finished after the timeout ends the program with an
// error line. A helper never waits on hart 0 forever either: while idle it checks
// getppid(), which becomes 1 (init) when hart 0 is gone.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/fcntl.h"
#include "kernel/riscv.h"
#include "user/user.h"
#include "user/llm/llm.h"
#include "user/llm/harts.h"

#define LINE 64                // bytes of a cache line: one hart's written fields each
#define SPIN_US 20000          // an idle helper spins this long before it sleeps (2 ticks)
#define CHECK_EVERY 256        // spin iterations between two looks at the clock

// The control block at the arena's start. Each line is written by one hart only.
struct team {
  // written by hart 0
  uint64 gen __attribute__((aligned(LINE)));   // the job being posted; 0 = none yet
  void (*fn)(void *, int, int);                // the job (same text in every process)
  void *arg;
  int stop;                                    // 1: the next generation means "exit"
  int n;                                       // harts in the team, and parts of a job
  // written by every hart
  uint64 next __attribute__((aligned(LINE)));  // gen << 32 | the next part to claim
  uint64 finished __attribute__((aligned(LINE)));  // parts of the job finished
};

// This process's view of the team. A forked child gets a copy and finds itself no owner.
static struct team *team;     // the arena's control block, 0 with no shared arena
static char *arena;           // start of the mapping (or of the malloc'd block, n == 1)
static char *heap;            // n == 1: what malloc returned (arena is heap aligned up)
static uint64 arena_len;      // bytes mapped (a page multiple) or usable (n == 1)
static uint64 arena_used;     // bytes harts_alloc() has handed out, counting the team
static int owner;             // pid of the process that started the team, 0 = none
static int nharts = 1;        // the team's n (in the owner)
static int pids[NCPU];        // helpers' pids, [1..nharts)
static int running;           // 1 while the owner is inside harts_run
static int timeout_ms = HARTS_TIMEOUT_MS;

// ---------------------------------------------------------------------------- helpers

// Contract: store to and read back every page of [a, a+len) (page multiple): a
// MAP_SHARED page becomes writable (PTE_W) in this process now, so no later store
// faults and reclaim never drops it (a dirty page stays mapped).
static void
touch(char *a, uint64 len)
{
  for(uint64 off = 0; off < len; off += PGSIZE){
    volatile char *p = a + off;
    *p = *p;
  }
}

// Contract: wait for a generation other than seen and return it: spin SPIN_US, then poll
// with sleep(1) so an idle helper costs almost nothing. Exits (status 0) if the parent
// is gone: an orphan has nobody to work for.
static uint64
await_job(uint64 seen)
{
  uint64 start = clock_us();
  for(uint64 i = 1; ; i++){
    uint64 g = __atomic_load_n(&team->gen, __ATOMIC_ACQUIRE);
    if(g != seen)
      return g;
    if(i % CHECK_EVERY == 0 && clock_us() - start > SPIN_US){
      if(getppid() != owner)
        exit(0);
      sleep(1);
    }
  }
}

// Contract: claim the next part of job gen: its number, or -1 when every part is taken
// or gen is over. A compare-and-swap of gen and part together, so that a helper that
// wakes late, still thinking of an older job, never takes a part of a newer one.
static int
claim(uint64 gen)
{
  uint64 w = __atomic_load_n(&team->next, __ATOMIC_ACQUIRE);
  for(;;){
    if(w >> 32 != gen || (uint32)w >= team->n)
      return -1;
    if(__atomic_compare_exchange_n(&team->next, &w, w + 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
      return (uint32)w;
  }
}

// Contract: run parts of job gen as long as there are unclaimed ones, counting each in
// team->finished (release: its results are visible to whoever sees the count). fn and
// arg are read only after a claim succeeded, when they are gen's (hart 0 posts no other
// job before every part of gen has finished).
static void
run_parts(uint64 gen)
{
  int k;
  while((k = claim(gen)) >= 0){
    team->fn(team->arg, k, team->n);
    __atomic_add_fetch(&team->finished, 1, __ATOMIC_RELEASE);
  }
}

// Contract: the life of helper h (in a child forked by harts_start): run each posted
// job as hart h and publish its generation; exit at a stop or when hart 0 is gone.
// Never returns.
static void
helper(int h)
{
  uint64 seen = 0;

  touch(arena, arena_len);
  for(;;){
    seen = await_job(seen);
    if(team->stop)
      exit(0);
    run_parts(seen);
  }
}

// Contract: make the arena: a new file of len bytes (page multiple) of zeros, mapped
// MAP_SHARED read/write, its fd closed and its name unlinked before this returns, so a
// crash leaves nothing on disk. Sets arena, arena_len and returns 0; -1 (no file left) if
// the kernel maps no shared file (the mmap lab's starter tree); dies on other failures.
static int
make_arena(uint64 len)
{
  static char zeros[4096];     // one write per page: each write() is a log transaction
  char name[32];

  snprintf(name, sizeof(name), "/harts.%d", getpid());
  int fd = open(name, O_CREATE | O_TRUNC | O_RDWR);
  if(fd < 0)
    llm_die("harts: cannot create ", name);
  for(uint64 off = 0; off < len; off += sizeof(zeros)){
    if(write(fd, zeros, sizeof(zeros)) != sizeof(zeros)){
      close(fd);
      unlink(name);
      llm_die("harts: cannot write the arena file ", name);
    }
  }
  char *a = mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  unlink(name);
  if(a == (char *)-1)
    return -1;
  arena = a;
  arena_len = len;
  return 0;
}

// Contract: forget this process's team state (the arena must already be gone).
static void
reset(void)
{
  team = 0;
  arena = heap = 0;
  arena_len = arena_used = 0;
  owner = 0;
  nharts = 1;
  running = 0;
}

// Contract: in the owner: post a stop to helpers [1, n), wait for each, unmap the arena.
// A wait() that returns -1 (no children left) ends the waiting: whatever helpers are
// not reaped here were reaped elsewhere (or init reaps them).
static void
stop_helpers(int n)
{
  team->stop = 1;
  __atomic_store_n(&team->gen, team->gen + 1, __ATOMIC_RELEASE);
  int left = n - 1;
  while(left > 0){
    int pid = wait(0);
    if(pid < 0)
      break;
    for(int h = 1; h < n; h++){
      if(pids[h] == pid){
        pids[h] = 0;
        left--;
      }
    }
  }
  munmap(arena, arena_len);
}

// ---------------------------------------------------------------------------- the API

// Contract: harts.h. Forks the helpers after the arena is mapped and touched, so each
// child inherits the same writable PTEs (fork copies PTE_FILE leaves as they are).
void
harts_start(int n, uint64 shared_bytes)
{
  if(owner && getpid() != owner)
    harts_stop();   // the team of the process this one was forked from: drop its view
  if(owner || heap)
    llm_die("harts: harts_start called twice", "");
  if(n < 1 || n > NCPU)
    llm_die_num("harts: team of ", n, " harts (1..NCPU)");
  if(shared_bytes > (1UL << 30))
    llm_die("harts: shared arena too large", "");
  if(n == 1 || make_arena(PGROUNDUP(sizeof(struct team) + shared_bytes)) < 0){
    // one hart: no helpers, the arena is ordinary memory
    heap = llm_malloc(shared_bytes + LINE, "the harts arena");
    memset(heap, 0, shared_bytes + LINE);
    arena = (char *)(((uint64)heap + LINE - 1) & ~(uint64)(LINE - 1));
    arena_len = shared_bytes;
    return;
  }
  touch(arena, arena_len);
  team = (struct team *)arena;
  team->n = n;
  arena_used = sizeof(struct team);
  owner = getpid();
  for(int h = 1; h < n; h++){
    int pid = fork();
    if(pid == 0)
      helper(h);
    if(pid < 0){
      stop_helpers(h);
      reset();
      llm_die("harts: fork of a helper failed", "");
    }
    pids[h] = pid;
  }
  nharts = n;
}

// Contract: harts.h. A bump allocator: nothing is ever given back before harts_stop().
void *
harts_alloc(uint64 bytes)
{
  uint64 len = (bytes + LINE - 1) & ~(uint64)(LINE - 1);
  if(arena == 0)
    llm_die("harts: harts_alloc before harts_start", "");
  if(len < bytes || len > arena_len - arena_used)
    llm_die("harts: shared arena used up (harts_start's shared_bytes)", "");
  void *p = arena + arena_used;
  arena_used += len;
  return p;   // zero: the file was written with zeros, the malloc'd block memset
}

// Contract: in the owner, with the job posted as gen and no part left to claim: spin
// until the helpers' parts have finished; die if that takes longer than timeout_ms (a
// helper was killed inside its part, or is stuck).
static void
await_parts(uint64 start)
{
  for(uint64 i = 1; __atomic_load_n(&team->finished, __ATOMIC_ACQUIRE) != team->n; i++){
    if(i % CHECK_EVERY == 0 && clock_us() - start > (uint64)timeout_ms * 1000){
      fprintf(2, "[%s] error: harts: a helper did not finish its part of a job in %d ms "
              "(killed?)\n", llm_name, timeout_ms);
      exit(1);
    }
  }
}

// Contract: harts.h. Posts the job (release of next and gen), then claims parts like
// every helper, then waits for the parts helpers took. A helper whose hart the host is
// not running (two guest harts on one busy host core) takes no part, and hart 0 does
// the work itself instead of waiting for it.
void
harts_run(void (*fn)(void *arg, int hart, int n), void *arg)
{
  if(team == 0 || running || getpid() != owner){
    fn(arg, 0, 1);
    return;
  }
  running = 1;
  team->fn = fn;
  team->arg = arg;
  team->finished = 0;
  uint64 gen = team->gen + 1;
  __atomic_store_n(&team->next, gen << 32, __ATOMIC_RELEASE);
  __atomic_store_n(&team->gen, gen, __ATOMIC_RELEASE);
  uint64 start = clock_us();
  run_parts(gen);
  await_parts(start);
  running = 0;
}

// Contract: harts.h.
int
harts_count(void)
{
  if(team == 0 || getpid() != owner)
    return 1;
  return nharts;
}

// Contract: harts.h.
void
harts_timeout(int ms)
{
  timeout_ms = ms > 0 ? ms : HARTS_TIMEOUT_MS;
}

// Contract: harts.h.
void
harts_stop(void)
{
  if(heap){
    free(heap);
  } else if(team && getpid() == owner){
    stop_helpers(nharts);
  } else if(arena){
    munmap(arena, arena_len);
  }
  reset();
}
