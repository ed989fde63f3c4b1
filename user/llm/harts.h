// Every hart at work: run one function on every hart, for the model library's row-split
// matvecs (docs/harts.md).
//
// A team is the calling process (hart 0) and n-1 helper processes forked from it. They
// share a small arena: a MAP_SHARED mapping of a file created, mapped and unlinked at
// once, so every process maps the same page-cache pages. The team's control block lives at
// the arena's start; harts_alloc() carves the rest. A job of n parts is posted by bumping
// a generation counter (release); every hart, hart 0 too, claims parts with a
// compare-and-swap and counts each it finished (release); hart 0 spins until the count is
// n (acquire). An idle helper spins a little, then polls with sleep(1), and exits
// when the team stops or its parent (hart 0) is gone.
//
// Why processes: NexOS has no threads. fork() gives every helper the same file pages of
// the model (read-only mapping) and of the arena (MAP_SHARED), and private copies, COW
// or not, of everything else: data written after harts_start() by one process is seen by
// the others only in the arena.
//
// Include after "kernel/types.h", "user/user.h" and "user/llm/llm.h". Errors print
// "[<llm_name>] error: harts: ..." and exit with status 1 (llm_die).

// Start the team: n harts in all (1 <= n <= NCPU), the caller being hart 0; n-1 helper
// processes are forked. shared_bytes: what the caller will take with harts_alloc(), each
// allocation counted rounded up to 64 bytes. n == 1: no helpers and no file;
// harts_alloc() returns ordinary (malloc'd, zeroed) memory. At most one team per process (a
// process forked from an owner may start its own: it first drops its view of the owner's).
// n should not exceed the harts running (memstat's ncpu): a helper without a hart of its
// own makes every job wait for a timer tick. A kernel that will not map the arena file
// (the mmap lab's starter tree) gets a team of one, as n == 1 (harts_count() says so).
// Dies on any other failure (nothing is left behind: helpers already forked are stopped).
void harts_start(int n, uint64 shared_bytes);

// Zeroed, 64-byte aligned memory in the arena (visible to every hart of the team). Every
// page of the arena was touched by every process at harts_start(), so using it maps no
// page later. Dies if the arena (shared_bytes) is used up or there is no team.
void *harts_alloc(uint64 bytes);

// Run fn(arg, k, n) for every part k of n (n: the team's harts) and return when all
// returned. The harts claim parts as they come, the caller too: one whose hart the host
// is not running takes none, and the others do its share (so fn must depend on the part,
// never on which hart runs it).
// arg, and whatever fn writes, must be in the arena (or be data identical in every
// process, such as the model's weights, for reading). In any process but the team's owner
// (a process forked from it later), before harts_start(), or nested inside a job, it
// runs fn(arg, 0, 1) alone: a forked child never disturbs the helpers. Note that such a
// child still maps the same arena as the owner: what it writes there the owner sees.
// Dies if a helper has not finished the job within the timeout (harts_timeout()): a
// killed helper must not hang hart 0.
void harts_run(void (*fn)(void *arg, int hart, int n), void *arg);

// Harts usable by the caller now: the team's n in its owner, 1 anywhere else.
int harts_count(void);

// How long hart 0 waits for a helper to finish one job before it gives up (dies); 0
// restores the default (HARTS_TIMEOUT_MS). For tests that kill a helper on purpose.
#define HARTS_TIMEOUT_MS 20000
void harts_timeout(int ms);

// Stop the team: helpers exit and are waited for, the arena is unmapped (n == 1: freed).
// Safe with no team. The owner should call it before it exits, and with no other child
// that has exited unwaited-for (wait() reaps any child; one that is not a helper is
// reaped here and its status lost). In a forked child it only drops the child's view of
// the team (unmaps the arena), leaving the owner's helpers alone.
void harts_stop(void);
