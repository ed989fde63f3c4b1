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
// Every line it prints is in docs/smolserve.md.
//
// Reads top to bottom: the workload, the KV plan, the worker, the server, the CLI.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/param.h"
#include "kernel/memstat.h"
#include "user/user.h"
#include "user/llm.h"
#include "user/tokenizer.h"

#define PGSIZE 4096
#define DEFAULT_MODEL "/model.bin"
#define MAX_REQ 64            // requests in one workload
#define MAX_PROMPT 64         // prompt tokens of one request
#define ID_LEN 16             // longest request id, with its terminator
#define MAX_WORKERS 48        // live workers (NPROC is 64: init, sh, the server, slack)
#define MAX_ATTEMPTS 4        // a request killed this often is an error
#define GROW_SLOTS 32         // the watermark keeps room for this many more rows per request
#define WATERMARK_DIV 64      // ... on top of total_pages / WATERMARK_DIV
#define MAX_FILE 65536        // longest workload file

// ============================================================================ the workload

enum { QUEUED, RUNNING, REFUSED, DEAD, DONE };

// One request of the workload and what became of it.
struct request {
  char id[ID_LEN];
  int max_len;          // slots it reserves (its KV cache is for max_len positions)
  int n_prompt;
  int prompt[MAX_PROMPT];
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
};

// One report of a worker on a pipe (written with one write(): atomic, it fits the pipe).
enum { MSG_RESERVED, MSG_NORESERVE, MSG_DONE };
struct msg {
  int kind;
  int req;              // index of the request
  int pid;
  int pad;
  long mapped;          // RESERVED: mapped pages the sbrk added; DONE: since before the sbrk
  long fork_pages;      // RESERVED: pages the fork took (page tables; COW_ALLOC=0: copies)
  long generated;       // DONE: tokens generated
  long decode_us;       // DONE
};

// Copy a request id (1..ID_LEN-1 characters of [A-Za-z0-9_-]); 0 if it is not one.
static int
set_id(char *dst, const char *s, int n)
{
  if(n < 1 || n >= ID_LEN)
    return 0;
  for(int i = 0; i < n; i++){
    char c = s[i];
    if(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-'))
      return 0;
    dst[i] = c;
  }
  dst[n] = 0;
  return 1;
}

// The seed's example (the seed document, section 3.2): A reserves 2048 slots, has a
// prompt of 7 tokens and generates 3; B reserves 512, has 3 and generates 2.
static int
seed32(struct request *rq)
{
  static const int lens[2][3] = { { 2048, 7, 3 }, { 512, 3, 2 } };
  for(int i = 0; i < 2; i++){
    set_id(rq[i].id, i ? "B" : "A", 1);
    rq[i].max_len = lens[i][0];
    rq[i].n_prompt = lens[i][1];
    rq[i].gen = lens[i][2];
    for(int t = 0; t < rq[i].n_prompt; t++)
      rq[i].prompt[t] = t + 1;
  }
  return 2;
}

// xorshift64*: the generated workload's coin (state never 0).
static uint64
rnd(uint64 *st)
{
  *st ^= *st >> 12;
  *st ^= *st << 25;
  *st ^= *st >> 27;
  return *st * 2685821657736338717UL;
}

// n requests R0..R<n-1> of max_len slots: prompts of 1..4 ids in [1, 1000]; 7 in 8
// generate a short answer (1..max(1, long_len/4) tokens), 1 in 8 a long one (up to
// long_len), always within max_len. docs/smolserve.md gives the distribution.
static int
generated(struct request *rq, int n, int max_len, int long_len, uint64 seed)
{
  uint64 st = seed * 0x9E3779B97F4A7C15UL + 1;
  int short_len = long_len / 4 > 1 ? long_len / 4 : 1;
  for(int i = 0; i < n; i++){
    struct request *r = &rq[i];
    char id[ID_LEN];
    int len = snprintf(id, ID_LEN, "R%d", i);
    set_id(r->id, id, len);
    r->max_len = max_len;
    r->n_prompt = 1 + rnd(&st) % 4;
    if(r->n_prompt >= max_len)
      r->n_prompt = max_len - 1;
    for(int t = 0; t < r->n_prompt; t++)
      r->prompt[t] = 1 + rnd(&st) % 1000;
    if(rnd(&st) % 8 == 0 && long_len > short_len)
      r->gen = short_len + 1 + rnd(&st) % (long_len - short_len);
    else
      r->gen = 1 + rnd(&st) % short_len;
    if(r->gen > max_len - r->n_prompt)
      r->gen = max_len - r->n_prompt;
  }
  return n;
}

// Die with "[smolserve] error: <file>:<line>: <why>".
static void
bad_line(const char *file, int line, const char *why)
{
  fprintf(2, "[smolserve] error: %s:%d: %s\n", file, line, why);
  exit(1);
}

// A decimal number at *p (advanced past it) in [0, hi], or -1.
static long
number(const char **p, long hi)
{
  long v = 0;
  int digits = 0;
  for(; **p >= '0' && **p <= '9'; (*p)++, digits++)
    if((v = v * 10 + (**p - '0')) > hi)
      return -1;
  return digits ? v : -1;
}

// The next field of line [*p, end) (spaces and tabs between fields): sets *f and *n.
static int
field(const char **p, const char *end, const char **f, int *n)
{
  while(*p < end && (**p == ' ' || **p == '\t'))
    (*p)++;
  *f = *p;
  while(*p < end && **p != ' ' && **p != '\t')
    (*p)++;
  *n = *p - *f;
  return *n > 0;
}

// Parse one line "id max_len prompt end" (prompt: comma-separated ids; end: gen=N or eos).
static void
parse_line(const char *file, int ln, const char *s, const char *end, struct request *r)
{
  const char *f, *q;
  int n;
  char num[16];
  if(!field(&s, end, &f, &n) || !set_id(r->id, f, n))
    bad_line(file, ln, "the id must be 1-15 characters of A-Z a-z 0-9 _ -");
  if(!field(&s, end, &f, &n) || n >= (int)sizeof(num))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  memcpy(num, f, n);
  num[n] = 0;
  q = num;
  if((r->max_len = number(&q, LLM_MAX_DIM)) < 1 || *q)
    bad_line(file, ln, "max_len must be a number >= 1");
  if(!field(&s, end, &f, &n))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  for(q = f, r->n_prompt = 0; q < f + n; ){
    long t = number(&q, 1000000000L);
    if(t < 0 || r->n_prompt == MAX_PROMPT || (q < f + n && *q++ != ','))
      bad_line(file, ln, "the prompt must be 1-64 comma-separated token ids");
    r->prompt[r->n_prompt++] = t;
  }
  if(!field(&s, end, &f, &n))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  if(n == 3 && memcmp(f, "eos", 3) == 0)
    r->gen = -1;
  else if(n > 4 && n < 14 && memcmp(f, "gen=", 4) == 0){
    memcpy(num, f + 4, n - 4);
    num[n - 4] = 0;
    q = num;
    if((r->gen = number(&q, LLM_MAX_DIM)) < 0 || *q)
      bad_line(file, ln, "gen=N needs a number N >= 0");
  } else
    bad_line(file, ln, "the end must be gen=N or eos");
  if(field(&s, end, &f, &n))
    bad_line(file, ln, "extra text after the end field");
}

// Read the workload file at path into rq; returns the number of requests.
static int
load_workload(const char *path, struct request *rq)
{
  int fd = open(path, O_RDONLY), n = 0, len = 0, k, ln = 0;
  if(fd < 0){
    fprintf(2, "[smolserve] error: --workload %s: no such built-in workload or file "
            "(built-in: seed32)\n", path);
    exit(1);
  }
  char *buf = llm_malloc(MAX_FILE + 1, "the workload file");
  while(len < MAX_FILE && (k = read(fd, buf + len, MAX_FILE - len)) > 0)
    len += k;
  close(fd);
  if(len == MAX_FILE)
    llm_die("--workload: the file is longer than 64 KiB", "");
  for(const char *s = buf, *end; s < buf + len; s = end + 1){
    for(end = s; end < buf + len && *end != '\n'; end++)
      ;
    ln++;
    const char *f;
    int fl;
    const char *p = s;
    if(!field(&p, end, &f, &fl) || *f == '#')
      continue;
    if(n == MAX_REQ)
      bad_line(path, ln, "more than 64 requests");
    parse_line(path, ln, s, end, &rq[n]);
    for(int i = 0; i < n; i++)
      if(strcmp(rq[i].id, rq[n].id) == 0)
        bad_line(path, ln, "two requests with the same id");
    n++;
  }
  free(buf);
  if(n == 0)
    llm_die("--workload: no requests in ", path);
  return n;
}

// ============================================================================ the KV plan

// A request's KV cache, as smolprobe lays it out: 2 * n_layers regions (keys then values)
// of max_len rows of kv_dim float32, in one page-aligned sbrk() reservation.
static uint64
kv_bytes(const struct config *c, int max_len)
{
  return 2UL * c->n_layers * max_len * c->kv_dim * sizeof(float);
}

static long
kv_pages(const struct config *c, int max_len)
{
  return (kv_bytes(c, max_len) + PGSIZE - 1) / PGSIZE;
}

// Distinct pages that rows [0, rows) of the 2 * n_layers regions touch (regions smaller
// than a page share pages; each is counted once).
static long
kv_needed_pages(const struct config *c, int max_len, int rows)
{
  uint64 region = (uint64)max_len * c->kv_dim * sizeof(float);
  uint64 row = (uint64)c->kv_dim * sizeof(float);
  long pages = 0, last = -1;
  if(rows <= 0)
    return 0;
  for(int r = 0; r < 2 * c->n_layers; r++){
    long first = r * region / PGSIZE, end = (r * region + rows * row - 1) / PGSIZE;
    if(first <= last)
      first = last + 1;
    if(end >= first)
      pages += end - first + 1;
    if(end > last)
      last = end;
  }
  return pages;
}

// ============================================================================ the worker

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

// Whether tok is one of the model's end-of-sequence ids.
static int
is_eos(const struct server *sv, int tok)
{
  return tok == sv->eos[0] || tok == sv->eos[1];
}

// Feed the prompt, then each generated token (greedy), into positions 0, 1, ...: gen
// tokens, or until the eos (which is fed too) within max_len. Every generated token is
// fed, so P + generated K/V rows are written. Returns the tokens generated.
static int
generate(struct server *sv, const struct request *r)
{
  struct sampler sp;
  int P = r->n_prompt, limit = r->gen >= 0 ? P + r->gen : r->max_len, n = P;
  sampler_init(&sp, 0.0f, 1, sv->probs, sv->mo.c.vocab_size);
  memcpy(sv->tok, r->prompt, P * sizeof(int));
  for(int pos = 0; pos < n; pos++){
    int more = pos == n - 1 && n < limit && !(r->gen < 0 && n > P && is_eos(sv, sv->tok[n - 1]));
    forward(&sv->mo, &sv->s, sv->tok[pos], pos, more);
    if(more)
      sv->tok[n++] = sample(&sp, sv->s.logits);
  }
  return n - P;
}

// A forked worker for request i (never returns): reserve the KV cache with one sbrk,
// report on ack (then close it), generate, report on the shared pipe, exit 0. A failed
// sbrk (eager: not enough memory) is reported as MSG_NORESERVE and the worker exits.
static void
worker(struct server *sv, int i, int ack)
{
  struct request *r = &sv->rq[i];
  struct memstat m0, m1, m2;
  struct msg m;
  volatile char *own = (volatile char *)sv;
  // Store to every page of the server's struct first: under COW the worker takes the
  // copies, so the server, which writes it all the time, finds its pages its own again
  // and needs no free page for them when memory runs out.
  for(uint64 off = 0; off < sizeof(*sv); off += PGSIZE)
    own[off] = own[off];
  own[sizeof(*sv) - 1] = own[sizeof(*sv) - 1];
  for(int fd = 3; fd < NOFILE; fd++)
    if(fd != ack && fd != sv->rep[1])
      close(fd);
  memset(&m, 0, sizeof(m));
  m.req = i;
  m.pid = getpid();
  sv->s.seq_len = r->max_len;
  uint64 bytes = kv_bytes(&sv->mo.c, r->max_len);
  memstat(&m0);
  m.fork_pages = (long)m0.pt_pages + (m0.cow_alloc ? 0 : (long)m0.mapped_pages);
  char *base = sbrk((int)bytes);
  memstat(&m1);
  m.kind = base == (char *)-1 ? MSG_NORESERVE : MSG_RESERVED;
  m.mapped = (long)m1.mapped_pages - (long)m0.mapped_pages;
  if(write(ack, &m, sizeof(m)) != sizeof(m) || m.kind == MSG_NORESERVE)
    exit(0);
  close(ack);
  if(sv->kill_req == i + 1 && r->attempts == 1)
    kill(getpid());                            // test hook: die as the kernel kills
  if(sv->fill && r->attempts == 1)             // test hook: grow as a long answer would
    for(uint64 off = 0; off < bytes; off += PGSIZE)
      base[off] = 0;
  sv->s.key_cache = (float *)base;
  sv->s.value_cache = (float *)(base + bytes / 2);
  uint64 t = clock_us();
  m.generated = generate(sv, r);
  m.decode_us = clock_us() - t;
  memstat(&m2);
  m.kind = MSG_DONE;
  m.mapped = (long)m2.mapped_pages - (long)m0.mapped_pages;
  if(write(sv->rep[1], &m, sizeof(m)) != sizeof(m))
    exit(1);
  exit(0);
}

// ============================================================================ the server

// Pages in use in the whole system now (and the peak so far); *free_out gets the free ones.
static long
snapshot(struct server *sv, long *free_out)
{
  struct memstat m;
  memstat(&m);
  long used = (long)m.total_pages - (long)m.free_pages;
  if(used > sv->peak_used)
    sv->peak_used = used;
  if(free_out)
    *free_out = m.free_pages;
  return used;
}

static long
t_ms(const struct server *sv)
{
  return (clock_us() - sv->t0) / 1000;
}

// Pages admitting request r is expected to take now: the latest fork's cost (as its worker
// saw it: its page tables, and with a copying fork every page it has) plus r's
// reservation at the ratio the latest reservation was mapped at (0 under lazy sbrk).
static long
est_pages(const struct server *sv, const struct request *r)
{
  if(!sv->measured || sv->last_reserved == 0)
    return 0;
  long res = kv_pages(&sv->mo.c, r->max_len);
  return sv->last_fork + (sv->last_mapped * res + sv->last_reserved - 1) / sv->last_reserved;
}

// The low watermark with `running` requests running: total_pages / 64 plus room for each
// of them to write GROW_SLOTS more rows.
static long
watermark(const struct server *sv, int running)
{
  return sv->wm_base + running * sv->grow_pages;
}

// The queue line for request r (once per wait: until it is started again).
static void
note_queue(struct server *sv, struct request *r, long free, long est, long wm,
           const char *reason)
{
  if(r->noted)
    return;
  r->noted = 1;
  if(!r->waited){
    r->waited = 1;
    sv->waited++;
  }
  long used = snapshot(sv, 0);
  printf("[smolserve] queue id=%s t_ms=%ld running=%d queued=%d free_pages=%ld est_pages=%ld "
         "watermark_pages=%ld reason=%s used_pages=%ld\n", r->id, t_ms(sv), sv->running,
         sv->qlen, free, est, wm, reason, used);
}

static void
push_front(struct server *sv, int i)
{
  memmove(sv->queue + 1, sv->queue, sv->qlen * sizeof(int));
  sv->queue[0] = i;
  sv->qlen++;
  sv->rq[i].state = QUEUED;
  sv->rq[i].noted = 0;
}

static void
pop_front(struct server *sv)
{
  sv->qlen--;
  memmove(sv->queue, sv->queue + 1, sv->qlen * sizeof(int));
}

// Start a worker for request i (at the head of the queue, popped by the caller): fork,
// read its reservation report. Returns 0 when it holds its reservation, -1 when the fork
// failed (the request is back at the head), 1 when it will end without one (refused or
// dead: the reaper deals with it).
static int
start(struct server *sv, int i, long free, long est, long wm)
{
  struct request *r = &sv->rq[i];
  struct msg m;
  int ack[2];
  if(pipe(ack) < 0){                           // out of memory for the pipe: wait
    push_front(sv, i);
    return -1;
  }
  r->attempts++;
  r->alone = sv->running == 0 && sv->children == 0;
  int pid = fork();
  if(pid == 0){
    close(ack[0]);
    worker(sv, i, ack[1]);
  }
  close(ack[1]);
  snapshot(sv, 0);
  if(pid < 0){
    close(ack[0]);
    r->attempts--;
    push_front(sv, i);
    return -1;
  }
  r->pid = pid;
  r->done_msg = 0;
  sv->children++;
  int ok = read(ack[0], &m, sizeof(m)) == sizeof(m);
  close(ack[0]);
  if(!ok || m.kind != MSG_RESERVED){
    r->state = ok ? REFUSED : DEAD;
    return 1;
  }
  r->state = RUNNING;
  r->noted = 0;
  r->fork_pages = m.fork_pages;
  r->reserve_mapped = m.mapped;
  r->reserved_pages = kv_pages(&sv->mo.c, r->max_len);
  sv->last_fork = r->fork_pages;
  sv->last_mapped = m.mapped;
  sv->last_reserved = r->reserved_pages;
  sv->measured = 1;
  sv->running++;
  if(sv->running > sv->peak)
    sv->peak = sv->running;
  if(sv->first_admit == 0)
    sv->first_admit = clock_us();
  long used = snapshot(sv, 0);
  printf("[smolserve] admit id=%s attempt=%d t_ms=%ld running=%d queued=%d free_pages=%ld "
         "est_pages=%ld watermark_pages=%ld fork_pages=%ld reserve_mapped_pages=%ld "
         "reserved_kv_pages=%ld used_pages=%ld\n", r->id, r->attempts, t_ms(sv), sv->running,
         sv->qlen, free, est, wm, r->fork_pages, m.mapped, r->reserved_pages, used);
  return 0;
}

// Start queued requests in order while the admission rule lets the head in: always when
// nothing runs, else when free - est >= watermark(running + 1).
static void
admit(struct server *sv)
{
  while(sv->qlen > 0){
    int i = sv->queue[0];
    struct request *r = &sv->rq[i];
    long free;
    snapshot(sv, &free);
    long est = est_pages(sv, r), wm = watermark(sv, sv->running + 1);
    if(sv->children > sv->running){       // a refused or dead worker is not reaped yet
      note_queue(sv, r, free, est, wm, "reaping");
      return;
    }
    if(sv->running > 0 && free - est < wm){
      note_queue(sv, r, free, est, wm, "watermark");
      return;
    }
    if(sv->children >= MAX_WORKERS){
      note_queue(sv, r, free, est, wm, "processes");
      return;
    }
    pop_front(sv);
    int st = start(sv, i, free, est, wm);
    if(st < 0){
      if(sv->children == 0)
        llm_die("fork or pipe failed with no request running: request ", r->id);
      note_queue(sv, r, free, est, wm, "fork_failed");
      return;
    }
    if(st > 0)
      return;
  }
}

// Read DONE reports from the shared pipe until request r's has come (its worker wrote it
// before exiting with status 0, so it is in the pipe); the others are kept.
static void
drain_until(struct server *sv, struct request *r)
{
  struct msg m;
  while(!r->done_msg){
    if(read(sv->rep[0], &m, sizeof(m)) != sizeof(m) || m.req < 0 || m.req >= sv->n)
      llm_die("a worker's report was garbled", "");
    struct request *q = &sv->rq[m.req];
    if(q->pid != m.pid)
      continue;                                 // an earlier attempt's (cannot happen)
    q->done_msg = 1;
    q->generated = m.generated;
    q->mapped_pages = m.mapped;
    q->decode_us = m.decode_us;
  }
}

// Request r has finished: the finish line.
static void
finish(struct server *sv, struct request *r)
{
  r->state = DONE;
  sv->completed++;
  sv->last_finish = clock_us();
  long used = snapshot(sv, 0);
  printf("[smolserve] finish id=%s t_ms=%ld running=%d queued=%d generated=%ld used_slots=%ld "
         "mapped_kv_pages=%ld decode_ms=%ld used_pages=%ld\n", r->id, t_ms(sv), sv->running,
         sv->qlen, r->generated, r->n_prompt + r->generated, r->mapped_pages,
         r->decode_us / 1000, used);
}

// Wait for one worker and deal with its end: finished, killed (recompute: back at the
// head of the queue), or refused its reservation (back at the head).
static void
reap(struct server *sv)
{
  int st = 0, pid = wait(&st), i;
  for(i = 0; i < sv->n && !(sv->rq[i].pid == pid && sv->rq[i].state != QUEUED &&
                            sv->rq[i].state != DONE); i++)
    ;
  if(pid < 0 || i == sv->n)
    llm_die("wait returned no worker", "");
  struct request *r = &sv->rq[i];
  sv->children--;
  if(r->state == REFUSED){
    r->pid = 0;
    if(r->alone)
      llm_die("the KV cache does not fit in memory even alone: request ", r->id);
    long free;
    snapshot(sv, &free);
    push_front(sv, i);
    note_queue(sv, r, free, est_pages(sv, r), watermark(sv, sv->running + 1),
               "reserve_failed");
    return;
  }
  if(r->state == RUNNING)
    sv->running--;
  if(st == 0 && r->state == RUNNING)
    drain_until(sv, r);
  r->pid = 0;
  if(r->done_msg){
    finish(sv, r);
    return;
  }
  sv->recomputed++;
  if(r->attempts >= MAX_ATTEMPTS)
    llm_die("a worker was killed 4 times: request ", r->id);
  push_front(sv, i);
  long used = snapshot(sv, 0);
  printf("[smolserve] recompute id=%s attempt=%d t_ms=%ld running=%d queued=%d status=%d "
         "used_pages=%ld (killed before it finished; it runs again)\n", r->id, r->attempts,
         t_ms(sv), sv->running, sv->qlen, st, used);
}

// floor(a / b) for a >= 0, b > 0 (0 when b is 0).
static long
pct(long a, long b)
{
  return b > 0 ? 100 * a / b : 0;
}

// The request lines (workload order), SERVE_SUMMARY and the memory line.
static void
summary(struct server *sv)
{
  long reserved = 0, mapped = 0, needed = 0, slots = 0;
  const struct config *c = &sv->mo.c;
  for(int i = 0; i < sv->n; i++){
    struct request *r = &sv->rq[i];
    long used = r->n_prompt + r->generated;
    long need = kv_needed_pages(c, r->max_len, used);
    printf("[smolserve] request id=%s max_len=%d prompt=%d generated=%ld reserved_slots=%d "
           "used_slots=%ld internal_waste_slots=%ld reserved_kv_pages=%ld mapped_kv_pages=%ld "
           "needed_kv_pages=%ld attempts=%d\n", r->id, r->max_len, r->n_prompt, r->generated,
           r->max_len, used, r->max_len - used, r->reserved_pages, r->mapped_pages, need,
           r->attempts);
    reserved += r->reserved_pages;
    mapped += r->mapped_pages;
    needed += need;
    slots += used;
  }
  uint64 us = sv->last_finish - sv->first_admit;
  us = us > 0 ? us : 1;
  uint64 tps10 = (uint64)slots * 10000000UL / us;
  printf("[smolserve] SERVE_SUMMARY requests=%d completed=%d peak_concurrent=%d queued=%d "
         "recomputed=%d reserved_kv_pages=%ld mapped_kv_pages=%ld waste_percent=%ld%% "
         "peak_used_pages=%ld tokens_per_s=%lu.%lu\n", sv->n, sv->completed, sv->peak,
         sv->waited, sv->recomputed, reserved, mapped,
         pct(mapped - needed > 0 ? mapped - needed : 0, mapped), sv->peak_used,
         tps10 / 10, tps10 % 10);
  long free;
  snapshot(sv, &free);
  printf("[smolserve] memory baseline_free_pages=%ld final_free_pages=%ld leaked_pages=%ld\n",
         sv->baseline_free, free, sv->baseline_free - free);
}

// Check every request against the model (token ids, lengths, eos); returns the longest
// max_len.
static int
check_workload(struct server *sv)
{
  int longest = 1;
  const struct config *c = &sv->mo.c;
  for(int i = 0; i < sv->n; i++){
    struct request *r = &sv->rq[i];
    for(int t = 0; t < r->n_prompt; t++)
      if(r->prompt[t] >= c->vocab_size){
        fprintf(2, "[smolserve] error: request %s: token id %d is outside the vocabulary "
                "[0, %d)\n", r->id, r->prompt[t], c->vocab_size);
        exit(1);
      }
    if(r->max_len > c->max_seq_len || kv_bytes(c, r->max_len) > 0x7ffff000UL){
      fprintf(2, "[smolserve] error: request %s: max_len %d exceeds the model's max_seq_len "
              "%d\n", r->id, r->max_len, c->max_seq_len);
      exit(1);
    }
    if(r->n_prompt + (r->gen > 0 ? r->gen : 0) > r->max_len){
      fprintf(2, "[smolserve] error: request %s: prompt (%d) + generated (%d) exceeds "
              "max_len %d\n", r->id, r->n_prompt, r->gen, r->max_len);
      exit(1);
    }
    if(r->gen < 0 && sv->eos[0] < 0)
      llm_die("this model has no tokenizer, so no eos: request ends at eos: ", r->id);
    if(r->max_len > longest)
      longest = r->max_len;
  }
  return longest;
}

// The model's eos ids, if it has a tokenizer and the workload needs them.
static void
find_eos(struct server *sv)
{
  static struct tokenizer tok;
  sv->eos[0] = sv->eos[1] = -1;
  int need = 0;
  for(int i = 0; i < sv->n; i++)
    need |= sv->rq[i].gen < 0;
  if(!need || sv->mo.tok_blob == 0)
    return;
  const char *err = tok_load(&tok, sv->mo.tok_blob, sv->mo.tok_size);
  if(err)
    llm_die("model: tokenizer: ", err);
  sv->eos[0] = tok.eos;
  sv->eos[1] = tok.im_end;
}

// Load, check, allocate and touch everything; the baseline snapshot; then serve every
// request; then the summary.
static void
serve(struct server *sv, const char *model, const char *name)
{
  uint64 t0 = clock_us();
  load_model(model, &sv->mo);
  find_eos(sv);
  int longest = check_workload(sv);
  sv->s.seq_len = longest;
  alloc_state(&sv->mo.c, &sv->s, &sv->probs);
  sv->tok = llm_malloc((uint64)longest * sizeof(int), "tokens");
  memset(sv->tok, 0, longest * sizeof(int));
  if(pipe(sv->rep) < 0)
    llm_die("pipe failed", "");
  uint64 brk = (uint64)sbrk(0);                  // workers' reservations start on a page
  int pad = (int)((PGSIZE - brk % PGSIZE) % PGSIZE);
  if(pad && sbrk(pad) == (char *)-1)
    llm_die("out of memory aligning the KV reservations", "");
  struct memstat m;
  memstat(&m);
  sv->t0 = clock_us();
  sv->total_pages = m.total_pages;
  sv->baseline_free = m.free_pages;
  sv->wm_base = m.total_pages / WATERMARK_DIV;
  sv->grow_pages = (GROW_SLOTS * kv_bytes(&sv->mo.c, 1) + PGSIZE - 1) / PGSIZE;
  snapshot(sv, 0);
  printf("[smolserve] workload name=%s requests=%d longest_max_len=%d\n", name, sv->n, longest);
  printf("[smolserve] start lazy_alloc=%d cow_alloc=%d ncpu=%d total_pages=%ld free_pages=%ld "
         "kv_bytes_per_slot=%lu watermark_base_pages=%ld grow_pages=%ld load_ms=%lu\n",
         m.lazy_alloc, m.cow_alloc, m.ncpu, (long)m.total_pages, (long)m.free_pages,
         kv_bytes(&sv->mo.c, 1), sv->wm_base, sv->grow_pages, (sv->t0 - t0) / 1000);
  for(int i = 0; i < sv->n; i++)
    sv->queue[sv->qlen++] = i;
  while(sv->completed < sv->n){
    admit(sv);
    if(sv->children == 0)
      llm_die("nothing is running and nothing could start", "");
    reap(sv);
  }
  summary(sv);
}

// ============================================================================ the CLI

static void
usage(void)
{
  printf("usage: smolserve (--workload seed32|FILE | --requests N --max-len L [--seed S]\n"
         "                 [--long-len G]) [--model PATH] [--test-kill ID] [--help]\n"
         "Loads the model once and serves a workload of requests, each in a worker forked\n"
         "from the server that reserves its KV cache for max_len slots with one sbrk();\n"
         "admits requests while free memory stays above a low watermark, queues the rest,\n"
         "and runs again any request whose worker was killed (docs/smolserve.md).\n"
         "  --workload seed32  the seed's example: A (max 2048, prompt 7, generates 3) and\n"
         "                     B (max 512, prompt 3, generates 2)\n"
         "  --workload FILE    lines `id max_len prompt gen=N|eos` (prompt: ids a,b,c)\n"
         "  --requests N       N generated requests (1..64) of --max-len L slots: prompts of\n"
         "                     1-4 tokens, 7 in 8 generate 1..G/4 tokens, 1 in 8 up to G\n"
         "  --long-len G       the longest generated answer (default 16); --seed S its coin\n"
         "  --test-kill ID     test hook: request ID's first worker kills itself after\n"
         "                     its reservation (the server must run it again)\n"
         "  --test-fill 1      test hook: every first attempt writes its whole reservation\n"
         "                     (the kernel kills those it cannot feed; they run again)\n");
}

// A decimal flag value in [lo, hi], or die naming the flag.
static long
flag_num(const char *flag, const char *v, long lo, long hi)
{
  const char *p = v;
  long n = number(&p, hi);
  if(n < lo || *p){
    fprintf(2, "[smolserve] error: %s: '%s' is not a number in [%ld, %ld]\n", flag, v, lo, hi);
    exit(1);
  }
  return n;
}

int
main(int argc, char **argv)
{
  static struct server sv;
  const char *model = DEFAULT_MODEL, *workload = 0, *kill_id = 0;
  long requests = 0, max_len = 0, seed = 0, long_len = 16;
  llm_name = "smolserve";
  for(int i = 1; i < argc; i++){
    const char *a = argv[i];
    if(strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0){
      usage();
      exit(0);
    }
    if(i + 1 >= argc)
      llm_die(a, strcmp(a, "--workload") && strcmp(a, "--requests") && strcmp(a, "--max-len") &&
              strcmp(a, "--seed") && strcmp(a, "--long-len") && strcmp(a, "--model") &&
              strcmp(a, "--test-kill") && strcmp(a, "--test-fill") ? ": unknown flag (try --help)" : ": missing value");
    const char *v = argv[++i];
    if(strcmp(a, "--workload") == 0)
      workload = v;
    else if(strcmp(a, "--requests") == 0)
      requests = flag_num(a, v, 1, MAX_REQ);
    else if(strcmp(a, "--max-len") == 0)
      max_len = flag_num(a, v, 2, LLM_MAX_DIM);
    else if(strcmp(a, "--seed") == 0)
      seed = flag_num(a, v, 0, 0x7fffffffL);
    else if(strcmp(a, "--long-len") == 0)
      long_len = flag_num(a, v, 1, LLM_MAX_DIM);
    else if(strcmp(a, "--model") == 0)
      model = v;
    else if(strcmp(a, "--test-kill") == 0)     // test hook, see docs/smolserve.md
      kill_id = v;
    else if(strcmp(a, "--test-fill") == 0)     // test hook, see docs/smolserve.md
      sv.fill = flag_num(a, v, 0, 1);
    else
      llm_die(a, ": unknown flag (try --help)");
  }
  if(workload && (requests || max_len))
    llm_die("give --workload or --requests/--max-len, not both", "");
  if(!workload && (!requests || !max_len))
    llm_die("give --workload seed32|FILE, or --requests N --max-len L (try --help)", "");
  if(workload && strcmp(workload, "seed32") == 0)
    sv.n = seed32(sv.rq);
  else if(workload)
    sv.n = load_workload(workload, sv.rq);
  else
    sv.n = generated(sv.rq, requests, max_len, long_len, seed);
  for(int i = 0; kill_id && i < sv.n; i++)
    if(strcmp(sv.rq[i].id, kill_id) == 0)
      sv.kill_req = i + 1;
  if(kill_id && !sv.kill_req)
    llm_die("--test-kill: no request with id ", kill_id);
  printf("[smolserve] loading LLM assets...\n");
  char name[32];
  snprintf(name, sizeof(name), "%s", workload ? workload : "generated");
  serve(&sv, model, name);
  exit(0);
}
