// smolserve.h: what the files of smolserve share.
//
// smolserve: a KV-cache server inside NexOS. It loads the model once, reads a workload
// of requests, and runs each admitted request in a worker process forked from the server
// (so with COW_ALLOC=1 every worker shares the loaded weights, with COW_ALLOC=0 each
// copies them). A worker reserves its whole KV cache for the request's maximum length
// with one sbrk(), as smolprobe does, reports over a pipe, and generates.
//
// Admission is the server's, from what the kernel really did (memstat before and after
// each fork and reservation): it keeps admitting while the free pages, less what the next
// request is expected to take, stay above a low watermark that leaves room for the
// running requests to grow; beyond it requests wait in a queue. A worker killed before it
// finished (out of memory, or the --test-kill hook) is run again later (recompute).
// With --overcommit 1 it admits past what fits, so that memory pressure really happens:
// without swap the kernel kills workers and they are recomputed, with swap the kernel
// pages their cold KV pages out and in (docs/smolserve.md, "Overcommit").
// Every line it prints is in docs/smolserve.md.
//
// One file a job: workload.c reads the workload, prefix.c finds and prefills the shared
// prefixes, worker.c is the worker process, server.c admits and reaps, report.c prints the summary lines, main.c is the command line. The
// KV layout (and its page counts) is the model library's, user/llm/kv.h.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/param.h"
#include "kernel/memstat.h"
#include "user/user.h"
#include "user/llm/llm.h"
#include "user/llm/tokenizer.h"
#include "user/llm/kv.h"
#include "kernel/riscv.h"      // PGSIZE

#define MAX_REQ 64            // requests in one workload
#define MAX_PROMPT 128        // prompt tokens of one request, its shared prefix included
#define MAX_PREFIX 8          // distinct shared prefixes in one workload
#define MAX_CHAT 256          // longest user message of a chat-style request
#define ID_LEN 16             // longest request id, with its terminator
#define MAX_WORKERS 48        // live workers (NPROC is 64: init, sh, the server, slack)
#define MAX_ATTEMPTS 4        // a request killed this often is an error ...
#define MAX_ATTEMPTS_OVERCOMMIT 16   // ... or this often with --overcommit 1
#define PROGRESS_FILE "/smolserve.progress"   // --overcommit: the workers' progress (unlinked)
#define GROW_SLOTS 32         // the watermark keeps room for this many more rows per request
#define WATERMARK_DIV 64      // ... on top of total_pages / WATERMARK_DIV
#define MAX_FILE 65536        // longest workload file

enum { QUEUED, RUNNING, REFUSED, DEAD, DONE };

// One request of the workload and what became of it.
struct request {
  char id[ID_LEN];
  int max_len;          // slots it reserves (its KV cache is for max_len positions)
  int n_prompt;
  int prompt[MAX_PROMPT];
  int n_prefix;         // its first n_prefix prompt tokens are a prefix others may share
  int prefix;           // the shared prefix (server.px) it is forked from, or -1
  char chat[MAX_CHAT];  // a chat-style request's user message (prompt made at load), or ""
  int gen;              // tokens to generate, or -1: until the model's eos (within max_len)
  int state;            // QUEUED ... DONE
  int attempts;         // workers started for it
  int alone;            // the current attempt was started with nothing else running
  int waited;           // it waited in the queue at least once
  int noted;            // a queue line was printed since it was last queued
  int pid;              // its worker
  int done_msg;         // the worker's DONE report arrived
  long fork_pages, reserve_mapped, reserved_pages;
  long generated, mapped_pages, decode_us;
  long shared_kv, copied_kv;   // prefix KV pages it used without a copy, and copied
  uint answer_fnv;      // FNV-1a of the generated token ids: equal answers, equal hashes
  long recomputed_tokens;      // positions its killed attempts had fed (fed again later)
  long paged_out, paged_in;    // its finishing worker's pages written to / read from swap
};

// A prefix that requests share: the server feeds its tokens once, at positions 0..n-1,
// into a KV reservation of its own for the longest max_len of those requests, and never
// writes it again. Each of their workers is forked from the server and appends to it, in
// that layout (docs/smolserve.md, "Shared prefixes").
struct prefix {
  int first;            // the request whose prompt begins with the prefix's tokens
  int n;                // its tokens
  int users;            // the requests that share it
  int max_len;          // the longest max_len among them: the reservation's rows
  struct kv_layout kl;
  char *base;           // the reservation (the server's, until it exits)
  long mapped_pages;    // pages of it mapped after the prefill
  uint64 prefill_us;
};

// One report of a worker on a pipe (written with one write(): atomic, it fits the pipe).
enum { MSG_RESERVED, MSG_NORESERVE, MSG_DONE };
struct msg {
  int kind;
  int req;              // index of the request
  int pid;
  int pad;
  long mapped;          // RESERVED: mapped pages the sbrk added; DONE: KV pages of its own
  long fork_pages;      // RESERVED: pages the fork took (page tables; COW_ALLOC=0: copies)
  long generated;       // DONE: tokens generated
  long decode_us;       // DONE
  long shared_kv;       // DONE: the prefix's KV pages it still shares (COW_ALLOC=1)
  long copied_kv;       // DONE: the prefix's KV pages copied for it
  uint64 answer_fnv;    // DONE
  long paged_out;       // DONE: its pages reclaim wrote to swap (memstat)
  long paged_in;        // DONE: its pages read back from swap
};

// What the server owns; the workers inherit it with fork.
struct server {
  struct model mo;
  struct state s;
  float *probs;
  int *tok;             // [max_seq] a worker's tokens (allocated and touched by the server)
  struct request rq[MAX_REQ];
  int n;
  int eos[2];           // the model's end-of-sequence ids (-1: none)
  int kill_req;         // --test-kill: index + 1 of the request whose first worker dies
  int fill;             // --test-fill: first attempts write their whole reservation
  int share;            // --share-prefix: requests with the same prefix share it (default 1)
  int overcommit;       // --overcommit: admit without the watermark
  volatile int *progress;  // --overcommit: [MAX_REQ] positions the current attempt has fed,
                        // a MAP_SHARED page of PROGRESS_FILE that every worker shares
  struct memstat ms0;   // at the start line (the PRESSURE_SUMMARY's deltas)
  struct prefix px[MAX_PREFIX];
  int npx;
  int rep[2];           // every worker's DONE report (read end kept by the server)
  int queue[MAX_REQ];   // request indices waiting, in order
  int qlen;
  int running;          // workers holding a reservation
  int children;         // live or unreaped workers
  int peak, completed, recomputed, waited;
  long total_pages, baseline_free, peak_used, wm_base, grow_pages;
  long last_fork, last_mapped, last_reserved;   // the latest admitted worker's figures
  int measured;
  uint64 t0, first_admit, last_finish;
};


// workload.c
int seed32_workload(struct request *rq);
int generate_workload(struct request *rq, int n, int max_len, int long_len, int prefix_len,
                      uint64 seed);
int load_workload(const char *path, struct request *rq);
void print_request(const struct request *r);
long read_number(const char **p, long hi);

// worker.c
void plan_kv(const struct server *sv, int max_len, struct kv_layout *kl);
void worker(struct server *sv, int i, int ack);

// prefix.c
void make_chat_prompts(struct server *sv, struct tokenizer *tok);
void group_prefixes(struct server *sv);
void prefill_prefixes(struct server *sv);

// server.c
long snapshot(struct server *sv, long *free_out);
long t_ms(const struct server *sv);
void serve(struct server *sv, const char *model, const char *name);

// report.c
void note_queue(struct server *sv, struct request *r, long free, long est, long wm,
                const char *reason);
void finish_request(struct server *sv, struct request *r);
void print_summary(struct server *sv);
