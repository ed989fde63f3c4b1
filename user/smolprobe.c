// smolprobe: a SmolLM-135M-architecture transformer whose KV cache lives in one sbrk()
// reservation, run to show what lazy allocation does for an LLM server's KV memory.
//
// It loads a NexOS checkpoint (docs/checkpoint.md), allocates and touches everything the
// model needs except the KV cache, snapshots memstat(), reserves the whole KV cache for
// seq_len positions with one sbrk() (never memset), snapshots again, feeds the prompt and
// generates, snapshots a third time, and prints how many KV pages the kernel mapped in each
// phase against the reservation (docs/smolprobe.md, "Output"). --perplexity feeds a text
// and scores each next token instead of generating (docs/smolprobe.md, "Perplexity").
//
// The model itself (loader, forward(), sampler, tokenizer) is the model library,
// user/llm.h. This file reads top to bottom: the KV reservation and page accounting, the
// generation loop, parallel sampling, --bench, the command line.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/memstat.h"
#include "user/user.h"
#include "user/llm.h"
#include "user/tokenizer.h"

#define PGSIZE 4096
#define DEFAULT_SEQ_LEN 256
#define DEFAULT_MODEL "/model.bin"
#define DEFAULT_TEXT_GEN 64       // --gen-len of --prompt/--chat when not given
#define MAX_DIM LLM_MAX_DIM

// ============================================================================ KV reservation

// The KV cache of one request: one page-aligned sbrk reservation of
// 2 * n_layers regions ("key" layers then "value" layers), each seq_len rows of kv_dim
// float32. Nothing writes it until forward() stores row pos, so under lazy allocation a
// page is mapped when the first row that lies on it is written.
struct kv_plan {
  uint64 region_bytes;  // seq_len * kv_dim * 4
  uint64 bytes;         // 2 * n_layers * region_bytes
  long max_pages;       // pages of the reservation
};

static void
kv_plan(const struct config *c, int seq_len, struct kv_plan *kp)
{
  kp->region_bytes = (uint64)seq_len * c->kv_dim * sizeof(float);
  kp->bytes = 2UL * c->n_layers * kp->region_bytes;
  kp->max_pages = (kp->bytes + PGSIZE - 1) / PGSIZE;
}

// Pages that rows [0, rows) touch, summed over the 2 * n_layers regions (region r starts
// at byte r * region_bytes of the page-aligned reservation).
static long
kv_active_pages(const struct config *c, const struct kv_plan *kp, int rows)
{
  long pages = 0;
  uint64 row_bytes = (uint64)c->kv_dim * sizeof(float);
  if(rows <= 0)
    return 0;
  for(int r = 0; r < 2 * c->n_layers; r++){
    uint64 start = r * kp->region_bytes, end = start + rows * row_bytes;   // [start, end)
    pages += (end - 1) / PGSIZE - start / PGSIZE + 1;
  }
  return pages;
}

// Move the break to a page boundary (so the reservation starts on one). Called before
// the first snapshot; the pad lies on an already-counted page.
static void
kv_align_break(void)
{
  uint64 brk = (uint64)sbrk(0);
  int pad = (int)((PGSIZE - brk % PGSIZE) % PGSIZE);
  if(pad && sbrk(pad) == (char *)-1)
    llm_die("out of memory aligning the KV reservation", "");
}

// The one sbrk() that reserves the whole KV cache (never written here: no memset).
static void
kv_reserve(struct state *s, const struct config *c, const struct kv_plan *kp)
{
  if(kp->bytes > 0x7ffff000UL)
    llm_die_num("KV cache too large for one sbrk: ", (long)kp->bytes, " bytes (lower --seq-len)");
  char *base = sbrk((int)kp->bytes);
  if(base == (char *)-1)
    llm_die_num("out of memory: sbrk of the KV cache (", (long)kp->bytes, " bytes) failed");
  s->key_cache = (float *)base;
  s->value_cache = (float *)(base + c->n_layers * kp->region_bytes);
}

// Difference of two snapshots: mapped PTEs of this process, and physical pages in use.
static long
mapped_delta(const struct memstat *a, const struct memstat *b)
{
  return (long)b->mapped_pages - (long)a->mapped_pages;
}

static long
used_delta(const struct memstat *a, const struct memstat *b)
{
  return ((long)b->total_pages - (long)b->free_pages) -
         ((long)a->total_pages - (long)a->free_pages);
}

// floor(a / b) for b > 0.
static long
floor_div(long a, long b)
{
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The SUMMARY, phase and verdict lines from the three snapshots.
static void
report(const struct kv_plan *kp, long active, const struct memstat *before,
       const struct memstat *reserved, const struct memstat *done)
{
  long max = kp->max_pages;
  long rmap = mapped_delta(before, reserved), dmap = mapped_delta(reserved, done);
  long actual = rmap + dmap, saved = max - actual;
  printf("[smolprobe] SUMMARY max_kv_pages=%ld actual_mapped_pages=%ld saved_pages=%ld "
         "saved_percent=%ld%%\n", max, actual, saved, floor_div(100 * saved, max));
  printf("[smolprobe] reserve_phase virtual_pages=%ld mapped_pages=%ld used_pages=%ld\n",
         (long)reserved->vpages - (long)before->vpages, rmap, used_delta(before, reserved));
  printf("[smolprobe] decode_phase mapped_pages=%ld used_pages=%ld active_pages_est=%ld\n",
         dmap, used_delta(reserved, done), active);
  if(100 * rmap <= max)
    printf("[smolprobe] verdict=LAZY_STYLE reserve kept KV pages unmapped; "
           "decode allocated on demand\n");
  else if(10 * rmap >= 9 * max)
    printf("[smolprobe] verdict=EAGER_STYLE reserve mapped most KV pages immediately\n");
  else
    printf("[smolprobe] verdict=MIXED reserve mapped %ld of %ld KV pages\n", rmap, max);
}

// ============================================================================ generation

// A request and the command-line switches.
struct options {
  const char *model;
  int *tokens;          // prompt ids, then room for the generated ones
  int n_prompt;         // P
  int gen_len;          // G
  int seq_len;          // 0: min(256, max_seq_len)
  float temperature;    // < 0: not given (0, or 0.8 with --samples)
  const char *temp_text;// --temperature as given, for the parallel_request line
  uint64 seed;
  int samples;          // --samples N (0: not given, the single-request run)
  int print_tokens, print_logits, trace;
  int bench;            // --bench: the int8 micro-benchmark (alone, or after the request)
  int kill_branch;      // --test-kill-branch K (host test build only): branch K kills
                        // itself (K+1; 0: none)
  const char *text;     // --prompt, --chat or --perplexity TEXT (the model's tokenizer)
  int score;            // 1: --perplexity (score the text, generate nothing)
  int chat;             // 1: --chat (the text is a user message, ChatML)
  int stop_eos;         // --stop-at-eos (default with --chat): end at <|im_end|>
  int eos[2];           // the ids that end the request with stop_eos
  int generated;        // tokens really generated (G unless it stopped at an eos)
  int fed;              // positions really fed (K/V rows written)
};

// Feed positions [from, to): prompt tokens as given, then each sampled token at the next
// position. The logits of position pos >= P-1 pick token pos+1 (while pos+1 < P+G); the
// logits of the last position fed are left in s->logits. With trace, one line per
// position. With stop_eos a sampled eos ends the request unfed (a server would not feed
// it): o->generated and o->fed say how far it went.
static void
run(const struct model *mo, struct state *s, struct sampler *sp, struct options *o,
    int from, int to, const struct memstat *before)
{
  int P = o->n_prompt, total = o->n_prompt + o->gen_len;
  o->generated = o->gen_len;
  o->fed = to;
  for(int pos = from; pos < to; pos++){
    int stop = 0;
    forward(mo, s, o->tokens[pos], pos, pos >= P - 1);
    if(pos >= P - 1 && pos + 1 < total){
      int tok = sample(sp, s->logits);
      o->tokens[pos + 1] = tok;
      stop = o->stop_eos && (tok == o->eos[0] || tok == o->eos[1]);
    }
    if(o->trace){
      struct memstat now;
      memstat(&now);
      printf("[smolprobe] trace step=%d pos=%d kv_mapped_pages=%ld\n", pos - from, pos,
             mapped_delta(before, &now));
    }
    if(stop){
      o->generated = pos + 2 - P;
      o->fed = pos + 1;
      return;
    }
  }
}

// -log softmax(logits)[next] in float: m = max, s = sum of expf(l - m) left to right,
// then (m + logf(s)) - l[next], each step rounded to float (docs/smolprobe.md,
// "Perplexity").
static float
token_nll(const float *logits, int n, int next)
{
  float m = logits[0], s = 0.0f;
  for(int i = 1; i < n; i++)
    if(logits[i] > m)
      m = logits[i];
  for(int i = 0; i < n; i++)
    s += expf(logits[i] - m);
  float lse = m + logf(s);
  return lse - logits[next];
}

// --perplexity: feed the N prompt tokens at positions 0..N-1; the logits of position pos
// score token pos+1. Returns the sum of the N-1 token NLLs, added in double.
static double
score_run(const struct model *mo, struct state *s, struct options *o)
{
  int n = o->n_prompt;
  double nll = 0.0;
  for(int pos = 0; pos < n; pos++){
    forward(mo, s, o->tokens[pos], pos, pos < n - 1);
    if(pos < n - 1)
      nll += token_nll(s->logits, mo->c.vocab_size, o->tokens[pos + 1]);
  }
  o->generated = 0;
  o->fed = n;
  return nll;
}

// v >= 0 as "<int>.<6 digits>" into buf (v * 1e6 + 0.5 truncated, as print_list does).
static char *
fmt_micro(char *buf, int size, double v)
{
  if(!(v >= 0.0))
    v = 0.0;                                   // never: an NLL sum and an exp are >= 0
  if(v > 1e12)
    v = 1e12;
  uint64 micro = (uint64)(v * 1e6 + 0.5), frac = micro % 1000000;
  int k = snprintf(buf, size, "%lu.", micro / 1000000);  // size > 28: room for all
  for(int j = 5; j >= 0; j--, frac /= 10)
    buf[k + j] = '0' + frac % 10;
  buf[k + 6] = 0;
  return buf;
}

// "[smolprobe] perplexity tokens=N nll=<sum> ppl=<expf(sum / (N-1))>".
static void
print_perplexity(int n, double nll)
{
  char a[40], b[40];
  float ppl = expf((float)(nll / (n - 1)));
  printf("[smolprobe] perplexity tokens=%d nll=%s ppl=%s\n", n, fmt_micro(a, sizeof(a), nll),
         fmt_micro(b, sizeof(b), ppl));
}

// Write a line "<prefix>v,v,...\n" of n ints or floats (%.6f; nan, inf, -inf as such) in
// 4 KiB writes (one printf per value would be one write per value).
static void
print_list(const char *prefix, const int *iv, const float *fv, int n)
{
  char *buf = llm_malloc(4096 + 64, "output buffer");
  int len = strlen(prefix);
  memcpy(buf, prefix, len);
  for(int i = 0; i < n; i++){
    char tmp[48];
    int k = 0, neg;
    uint64 ip, frac = 0;
    int fdigits = 0;
    const char *word = 0;                        // a non-finite float, spelt out
    if(iv){
      neg = iv[i] < 0;
      ip = neg ? -(long)iv[i] : iv[i];
    } else {
      double v = fv[i];
      if(v != v)
        word = "nan";
      else if(v > 3.5e38 || v < -3.5e38)         // beyond FLT_MAX: an infinity
        word = v > 0 ? "inf" : "-inf";
      neg = v < 0;
      if(neg)
        v = -v;
      if(word || v > 1e12)
        v = word ? 0.0 : 1e12;
      uint64 micro = (uint64)(v * 1e6 + 0.5);
      ip = micro / 1000000;
      frac = micro % 1000000;
      fdigits = 6;
      neg = neg && micro != 0;
    }
    if(i > 0)
      tmp[k++] = ',';
    if(word){
      for(; *word; word++)
        tmp[k++] = *word;
      fdigits = 0;
    } else {
      if(neg)
        tmp[k++] = '-';
      char digits[24];
      int nd = 0;
      do {
        digits[nd++] = '0' + ip % 10;
        ip /= 10;
      } while(ip);
      while(nd)
        tmp[k++] = digits[--nd];
    }
    if(fdigits){
      tmp[k++] = '.';
      for(int j = 5; j >= 0; j--){
        tmp[k + j] = '0' + frac % 10;
        frac /= 10;
      }
      k += 6;
    }
    memcpy(buf + len, tmp, k);
    len += k;
    if(len >= 4096){
      write(1, buf, len);
      len = 0;
    }
  }
  buf[len++] = '\n';
  write(1, buf, len);
  free(buf);
}

// ============================================================================ parallel sampling

// smolprobe --samples N (docs/smolprobe.md, "Parallel sampling"): the parent prefills the
// prompt once (K/V rows 0..P-1 and the logits of position P-1), then fork()s N branches
// that inherit that KV cache. The branches run one at a time, in the order the parent
// releases them (branch i reads byte i from the "go" pipe), which makes every counter
// reproducible:
// branch i pre-touches the non-KV pages it will write (so that their copies happen first
// and are counted apart), samples its first token from the inherited logits with its own
// sampler (seed + i), feeds positions P..P+G-1 (rows written into the inherited
// reservation), sends its counters and tokens through the "report" pipe, and then waits
// until the parent closes the "exit" pipe, so that all branches are alive when the parent
// counts the pages they hold together. Right after the forks the parent gives its own KV
// reservation back (it writes no more rows): the branches are then the only owners of the
// prompt's KV pages, so, as docs/smolprobe.md describes, every branch but the last copies the
// half-filled prompt page it writes into, and the last one, its only owner, reuses it.

// Each branch reports on a pipe of its own, so that the parent sees end-of-file when a
// branch dies before reporting (killed by the kernel, e.g. out of memory in a fault)
// instead of waiting forever. NOFILE is 16: while forking the k-th process the parent
// holds 0, 1, 2, both ends of "go", "ack" and "exit", the read ends of the k-1 earlier
// report pipes and the new pipe, 11 + k - 1 descriptors: at most 6 branches.
#define MAX_SAMPLES 6
#define PARALLEL_TEMPERATURE 0.8f  // --samples without --temperature

// What a branch sends the parent, followed by its gen_len token ids. A forked child's
// memstat counters start at 0, so they count from the fork; "state" is everything up to
// the end of the pre-touch, "kv" the decode after it (KV pages only).
struct branch_report {
  long index;
  long state_pages;    // distinct non-KV pages the branch writes (all pre-touched)
  long state_copies;   // COW copies up to the end of the pre-touch
  long state_reuses;   // COW reuses up to then (pages the parent and the earlier
                       // branches no longer share: e.g. the stack, which the parent
                       // copied for itself when it wrote it after the fork)
  long cow_copies;     // COW copies over the whole branch
  long cow_reuses;     // COW faults where the branch was the only owner
  long kv_copies;      // COW copies while decoding
  long kv_reuses;      // COW reuses while decoding
  long new_kv_pages;   // pages newly mapped while decoding (lazy KV pages)
  long fork_pages;     // mapped pages the branch started with (what fork gave it)
  long decode_us;
};

// Whether page number pg lies in one of r[0..n).
static int
page_in(const struct range *r, int n, uint64 pg)
{
  for(int i = 0; i < n; i++){
    uint64 a = (uint64)r[i].p;
    if(r[i].len && pg >= a / PGSIZE && pg <= (a + r[i].len - 1) / PGSIZE)
      return 1;
  }
  return 0;
}

// Store to every page of the n ranges once (each byte rewritten with its own value), so
// that any copy-on-write of them happens now. Returns the number of distinct pages.
static long
pretouch(const struct range *r, int n)
{
  long pages = 0;
  for(int i = 0; i < n; i++){
    if(r[i].len == 0)
      continue;
    uint64 a = (uint64)r[i].p, last = (a + r[i].len - 1) / PGSIZE;
    for(uint64 pg = a / PGSIZE; pg <= last; pg++){
      volatile char *c = (volatile char *)(pg == a / PGSIZE ? a : pg * PGSIZE);
      *c = *c;
      pages += !page_in(r, i, pg);
    }
  }
  return pages;
}

// Move exactly n bytes through a pipe; 0, or -1 if the other side went away.
static int
read_all(int fd, void *buf, int n)
{
  for(int got = 0, k; got < n; got += k)
    if((k = read(fd, (char *)buf + got, n - got)) <= 0)
      return -1;
  return 0;
}

static int
write_all(int fd, const void *buf, int n)
{
  for(int put = 0, k; put < n; put += k)
    if((k = write(fd, (const char *)buf + put, n - put)) <= 0)
      return -1;
  return 0;
}

// The pipes between the parent and its branches ([0] read end, [1] write end), and the
// branches' process ids.
// Process k is the k-th forked; any waiting process may take the go byte of branch i, so
// it first tells the parent its k on "ack" (before anything that can fail), and the
// parent then reads branch i's report from process k's pipe.
struct channels {
  int go[2];    // parent -> branches: byte i releases one waiting process as branch i
  int ack[2];   // branches -> parent: byte k, "process k took the last go byte"
  int ex[2];    // closed by the parent when every branch has reported: branches exit
  int rep[MAX_SAMPLES];  // the parent's read end of process k's report pipe (-1: closed);
                         // only process k holds the write end: a dead one means EOF
  int pid[MAX_SAMPLES];  // process k's pid, 0 once reaped
  int reaped;            // how many processes wait() has returned
};

// A forked branch (never returns): wait for an index, generate, report, wait, exit.
// The stack is one page (USERSTACK), so the page of a local is the whole stack.
static void
branch(const struct model *mo, struct state *s, struct options *o, float *probs,
       struct channels *ch, uchar k, int out)
{
  uchar idx;
  struct memstat m0, m1;
  struct sampler sp;
  struct branch_report r;
  struct range rs[20];
  int P = o->n_prompt, total = o->n_prompt + o->gen_len, n = 0;

  close(ch->go[1]);
  close(ch->ex[1]);
  close(ch->ack[0]);
  if(read(ch->go[0], &idx, 1) != 1)
    exit(0);                                   // the parent stopped before our turn
  if(write(ch->ack[1], &k, 1) != 1)
    exit(1);
  close(ch->ack[1]);
  for(; n < s->nscratch; n++)
    rs[n] = s->scratch[n];
  rs[n++] = (struct range){ s, sizeof(*s) };   // forward() stores s->xf
  rs[n++] = (struct range){ o->tokens, total * sizeof(int) };
  rs[n++] = (struct range){ &idx, 1 };         // the stack
  memset(&r, 0, sizeof(r));
  r.index = idx;
  r.state_pages = pretouch(rs, n);
  if(o->kill_branch == idx + 1)
    kill(getpid());                            // test hook: die as the kernel kills
  memstat(&m0);
  uint64 t0 = clock_us();
  sampler_init(&sp, o->temperature, o->seed + idx, probs, mo->c.vocab_size);
  o->tokens[P] = sample(&sp, s->logits);       // from the parent's prefill logits
  run(mo, s, &sp, o, P, total, &m0);
  r.decode_us = clock_us() - t0;
  memstat(&m1);
  r.state_copies = m0.cow_copies;
  r.state_reuses = m0.cow_reuses;
  r.cow_copies = m1.cow_copies;
  r.cow_reuses = m1.cow_reuses;
  r.kv_copies = m1.cow_copies - m0.cow_copies;
  r.kv_reuses = m1.cow_reuses - m0.cow_reuses;
  r.new_kv_pages = (long)m1.mapped_pages - (long)m0.mapped_pages;
  r.fork_pages = m0.mapped_pages - m0.lazy_faults;
  if(write_all(out, &r, sizeof(r)) < 0 ||
     write_all(out, o->tokens + P, o->gen_len * sizeof(int)) < 0)
    exit(1);
  read(ch->ex[0], &idx, 1);                    // returns 0 when the parent closes ex[1]
  exit(0);
}

// Storage of the parent for the reports, allocated and touched before the snapshots.
struct parallel {
  struct branch_report *rep;  // [samples]
  int *tokens;                // [samples][gen_len]
  int ok[MAX_SAMPLES];        // 1: branch i reported
  int killed[MAX_SAMPLES];    // 1: branch i died before reporting, with exit status status[i]
  int status[MAX_SAMPLES];
  int unstarted;              // the branch that could not be started (not expected), or -1
  const char *fork_failed;    // why the fork after the last forked branch failed, or 0
};

static void
parallel_alloc(const struct options *o, struct parallel *pa)
{
  uint64 rb = o->samples * sizeof(struct branch_report);
  uint64 tb = (uint64)o->samples * o->gen_len * sizeof(int);
  pa->rep = llm_malloc(rb, "branch reports");
  pa->tokens = llm_malloc(tb, "branch tokens");
  memset(pa->rep, 0, rb);
  memset(pa->tokens, 0, tb);
  pa->unstarted = -1;
}

// Fork up to o->samples branches, all waiting on ch->go, each with its report pipe;
// returns how many forked. A failed fork (or pipe) ends the forking (the kernel leaked
// nothing); its reason goes to pa->fork_failed, printed after the fork_phase line.
static int
fork_branches(const struct model *mo, struct state *s, struct options *o, float *probs,
              struct channels *ch, int cow, struct parallel *pa)
{
  int n = 0, up[2];
  for(; n < o->samples; n++){
    if(pipe(up) < 0){
      pa->fork_failed = "no file descriptor for its pipe";
      break;
    }
    int pid = fork();
    if(pid == 0){
      for(int k = 0; k < n; k++)               // the earlier branches' read ends
        close(ch->rep[k]);
      close(up[0]);
      branch(mo, s, o, probs, ch, n, up[1]);
    }
    close(up[1]);
    if(pid < 0){
      close(up[0]);
      pa->fork_failed = cow ? "out of memory or processes"
                            : "out of memory (COW_ALLOC=0 copies every page)";
      break;
    }
    ch->rep[n] = up[0];
    ch->pid[n] = pid;
  }
  return n;
}

// Give the KV reservation back if it is still the top of the heap; 1 if it was.
static int
kv_release(struct state *s, const struct kv_plan *kp)
{
  char *base = (char *)s->key_cache;
  if(sbrk(0) != base + kp->bytes || sbrk(-(int)kp->bytes) == (char *)-1)
    return 0;
  s->key_cache = s->value_cache = 0;
  return 1;
}

// wait() until branch i has been reaped (a branch reaped meanwhile is marked too);
// returns its exit status (-1: killed by the kernel).
static int
reap(struct channels *ch, int forked, int i)
{
  int st = 0;
  while(ch->pid[i]){
    int pid = wait(&st);
    if(pid < 0)
      return -1;                               // cannot happen: branch i is our child
    for(int k = 0; k < forked; k++)
      if(ch->pid[k] == pid){
        ch->pid[k] = 0;
        ch->reaped++;
      }
  }
  return st;
}

// Release the forked branches one by one and collect their reports; returns how many
// reported. A branch that dies first (end of file on its pipe) is reaped and marked
// killed (parallel_report prints it in its place), and the next branch goes on.
static int
collect(struct parallel *pa, int forked, int gen_len, struct channels *ch)
{
  int done = 0;
  for(int i = 0; i < forked; i++){
    uchar b = i, k;
    if(write(ch->go[1], &b, 1) != 1 || read(ch->ack[0], &k, 1) != 1 || k >= forked){
      pa->unstarted = i;                       // not expected
      break;
    }
    if(read_all(ch->rep[k], &pa->rep[i], sizeof(pa->rep[i])) == 0 &&
       read_all(ch->rep[k], pa->tokens + i * gen_len, gen_len * sizeof(int)) == 0){
      pa->ok[i] = 1;
      done++;
    } else {
      pa->status[i] = reap(ch, forked, k);
      pa->killed[i] = 1;
    }
    close(ch->rep[k]);
    ch->rep[k] = -1;
  }
  return done;
}


// "[smolprobe] branch i tokens=a,b,c cow_copies=... ..." for report r and its tokens.
static void
print_branch(const struct branch_report *r, const int *tokens, int n)
{
  char *list = llm_malloc(12UL * n + 16, "output buffer");
  int len = 0;
  for(int j = 0; j < n; j++)
    len += snprintf(list + len, 12, "%s%d", j ? "," : "", tokens[j]);
  list[len] = 0;
  printf("[smolprobe] branch %ld tokens=%s cow_copies=%ld cow_reuses=%ld new_kv_pages=%ld "
         "state_pages=%ld state_copies=%ld state_reuses=%ld kv_copies=%ld kv_reuses=%ld "
         "fork_pages=%ld decode_ms=%ld\n", r->index, list, r->cow_copies, r->cow_reuses,
         r->new_kv_pages, r->state_pages, r->state_copies, r->state_reuses, r->kv_copies,
         r->kv_reuses, r->fork_pages,
         r->decode_us / 1000);
  free(list);
}

// Physical pages in use (the whole system) in snapshot m.
static long
in_use(const struct memstat *m)
{
  return (long)m->total_pages - (long)m->free_pages;
}

// The snapshots of a --samples run, in time order.
struct par_snaps {
  struct memstat before;    // before the reservation
  struct memstat reserved;  // after it
  struct memstat prefilled; // after the prefill (rows 0..P-1)
  struct memstat pre;       // pipes made, just before the first fork
  struct memstat atfork;    // right after the last fork
  struct memstat all;       // every branch has reported and is still alive
};

// The reserve_phase, prefill_phase, fork_phase, branch (reported, killed or not started),
// fork failure, PARALLEL_SUMMARY, branches_phase and verdict lines, in this order
// (docs/smolprobe.md, "Output").
static void
parallel_report(const struct config *c, const struct options *o, const struct kv_plan *kp,
                const struct parallel *pa, int forked, int done, const struct par_snaps *ps,
                int released)
{
  long copies = 0, fresh = 0, fork_copied = 0;
  long parent = (long)ps->all.cow_copies - (long)ps->pre.cow_copies;
  int eager = ps->pre.cow_alloc == 0;
  printf("[smolprobe] reserve_phase virtual_pages=%ld mapped_pages=%ld used_pages=%ld\n",
         (long)ps->reserved.vpages - (long)ps->before.vpages,
         mapped_delta(&ps->before, &ps->reserved), used_delta(&ps->before, &ps->reserved));
  printf("[smolprobe] prefill_phase positions=%d mapped_pages=%ld used_pages=%ld\n",
         o->n_prompt, mapped_delta(&ps->reserved, &ps->prefilled),
         used_delta(&ps->reserved, &ps->prefilled));
  printf("[smolprobe] fork_phase branches=%d shared_pages_at_fork=%ld prefix_kv_pages=%ld "
         "requested=%d parent_mapped_pages=%ld parent_released_kv=%d\n", forked,
         (long)ps->atfork.shared_pages, kv_active_pages(c, kp, o->n_prompt), o->samples,
         (long)ps->pre.mapped_pages, released);
  for(int i = 0; i < forked; i++){
    const struct branch_report *r = &pa->rep[i];
    if(pa->killed[i])
      printf("[smolprobe] branch %d killed before reporting (exit status %d); "
             "its pages went back to the kernel\n", i, pa->status[i]);
    else if(i == pa->unstarted)
      printf("[smolprobe] branch %d could not be started\n", i);
    if(!pa->ok[i])
      continue;
    print_branch(r, pa->tokens + i * o->gen_len, o->gen_len);
    copies += r->cow_copies;
    fresh += r->new_kv_pages;
    fork_copied += eager ? r->fork_pages : 0;
  }
  if(pa->fork_failed)
    printf("[smolprobe] fork of branch %d failed: %s\n", forked, pa->fork_failed);
  long eager_pages = (long)ps->pre.mapped_pages * done;
  long actual = copies + parent + fork_copied, saved = eager_pages - actual;
  printf("[smolprobe] PARALLEL_SUMMARY branches=%d eager_copy_pages=%ld actual_copied_pages=%ld "
         "saved_pages=%ld saved_percent=%ld%%\n", done, eager_pages, actual, saved,
         eager_pages > 0 ? floor_div(100 * saved, eager_pages) : 0);
  printf("[smolprobe] branches_phase used_pages=%ld private_pages=%ld parent_copies=%ld\n",
         in_use(&ps->all) - in_use(&ps->pre), actual + fresh, parent);
  if(eager)
    printf("[smolprobe] verdict=EAGER_FORK_STYLE fork copied every mapped page "
           "for each branch\n");
  else
    printf("[smolprobe] verdict=COW_STYLE branches share the prompt KV until they write\n");
}

// The parent's side of --samples, after the reservation (ps->before and ps->reserved are
// taken): prefill, fork, collect, report. Returns the number of branches that reported.
static int
parallel_run(const struct model *mo, struct state *s, struct options *o, float *probs,
             const struct kv_plan *kp, struct parallel *pa, struct par_snaps *ps)
{
  struct channels ch;
  int P = o->n_prompt;

  for(int pos = 0; pos < P; pos++)                   // prefill: rows 0..P-1, logits of P-1
    forward(mo, s, o->tokens[pos], pos, pos == P - 1);
  memstat(&ps->prefilled);
  memset(&ch, 0, sizeof(ch));
  if(pipe(ch.go) < 0 || pipe(ch.ack) < 0 || pipe(ch.ex) < 0)
    llm_die("pipe failed (too many open files?)", "");
  memstat(&ps->pre);
  int forked = fork_branches(mo, s, o, probs, &ch, ps->pre.cow_alloc, pa);
  memstat(&ps->atfork);
  close(ch.go[0]);
  close(ch.ack[1]);
  close(ch.ex[0]);
  int released = kv_release(s, kp);
  int done = collect(pa, forked, o->gen_len, &ch);
  memstat(&ps->all);                                 // every branch alive, all reported
  close(ch.ex[1]);
  close(ch.go[1]);
  close(ch.ack[0]);
  for(; ch.reaped < forked; ch.reaped++)             // the branches still alive
    wait(0);
  parallel_report(&mo->c, o, kp, pa, forked, done, ps, released);
  return done;
}

// ============================================================================ --bench

// smolprobe --bench (docs/smolprobe.md, "--bench"; the target: the int8 matvec reaches
// >= 70% of the guest's peak int8 multiply-add rate). Two figures from the same run,
// measured in alternation, best of BENCH_ROUNDS each, so that a busy host slows both alike:
//  - peak: the faster of two tight hand-unrolled int8 x int8 -> int32 loops over a hot
//    2 KiB buffer (4 rows of 512 weights, one input), with no scales, no float work and
//    no row bookkeeping: the plain one (two byte loads, a multiply and an add per MAC,
//    unrolled 8x) and the packed one (the int8 matvec's inner step: two MACs per 64-bit
//    multiply, 2 rows sharing each input load);
//  - matvec: the model's matvec() itself over its real weights (w_gate of layer 0, 20
//    times, and the classifier once), input prepared once (prepare_input not timed);
//  - with Q4_1 blocks (bench_q4_1): the Q4_1 matvec over layer 0's Q4_1 matrices that
//    take a dim-sized input (all but w_down), BENCH_Q_REPS times.
// A MAC is one weight times one int8 input added to an integer sum.

#define BENCH_ROUNDS 3
#define BENCH_COLS 512              // peak kernels: 4 rows x 512 columns, L1-resident
#define BENCH_PEAK_REPS 12000       // 4 * 512 * 12000 = 24.6 M MACs per measurement
#define BENCH_GATE_REPS 20
#define BENCH_Q_REPS 4              // bench_q4_1: layer 0's Q4_1 matrices, 4 times a round

// The plain peak kernel: reps x sum over 4 rows of w[r][i] * x[i] (n a multiple of 8).
static LLM_HOT int
peak_plain(const signed char *w, const signed char *x, int n, int reps)
{
  int sum = 0;
  for(int rep = 0; rep < reps; rep++){
    asm volatile("" : "+r"(w));     // the compiler may not reuse the previous round's sums
    for(const signed char *row = w; row < w + 4 * n; row += n)
      for(int i = 0; i < n; i += 8)
        sum += row[i] * x[i] + row[i + 1] * x[i + 1] + row[i + 2] * x[i + 2] +
               row[i + 3] * x[i + 3] + row[i + 4] * x[i + 4] + row[i + 5] * x[i + 5] +
               row[i + 6] * x[i + 6] + row[i + 7] * x[i + 7];
  }
  return sum;
}

// The packed peak kernel: reps x the 4 rows' dot products of biased weights w (cw words a
// row) with the packed input xp, the int8 matvec's inner step (two rows sharing each input
// load) without groups or scales.
static LLM_HOT int
peak_packed(const uint64 *w, const uint64 *xp, int cw, int xsum, int reps)
{
  int sum = 0;
  for(int rep = 0; rep < reps; rep++){
    asm volatile("" : "+r"(w));
    for(const uint64 *row = w; row < w + 4 * cw; row += 2 * cw){
      uint64 t0 = 0, t1 = 0;
      const uint64 *p = xp;
      for(int j = 0; j < cw; j++, p += 4){
        t0 += word_lanes(row[j], p);
        t1 += word_lanes(row[cw + j], p);
      }
      sum += unpack_lanes(t0, xsum) + unpack_lanes(t1, xsum);
    }
  }
  return sum;
}

// Microseconds since t, at least 1.
static uint64
since(uint64 t)
{
  uint64 d = clock_us() - t;
  return d ? d : 1;
}

// MACs per second of `macs` done in `us` microseconds.
static uint64
rate(uint64 macs, uint64 us)
{
  return macs * 1000000UL / us;
}

// The bench inputs: deterministic int8 weights and inputs for the peak kernels, checked
// against each other (both kernels must give the plain loop's sum) and the model's
// normalised embedding of token 1 as the input of the real matvecs.
struct bench {
  signed char *w, *x;   // [4][BENCH_COLS], [BENCH_COLS]
  uint64 *wb, *xp;      // biased copy of w, packed x
  int xsum;
  uint64 best[5];       // microseconds: plain, packed, w_gate x reps, classifier, Q4_1
  const struct matrix *q41[7];  // layer 0's Q4_1 matrices over dim inputs (bench_q4_1)
  int nq41;
  uint64 q41_macs;      // their MACs, times BENCH_Q_REPS
};

static void
bench_inputs(struct bench *b)
{
  uint64 st = 0x2545F4914F6CDD1DUL;
  b->w = llm_malloc(4 * BENCH_COLS, "bench");
  b->x = llm_malloc(BENCH_COLS, "bench");
  b->wb = llm_malloc(4 * BENCH_COLS + 8, "bench");
  b->xp = llm_malloc(BENCH_COLS / 2 * sizeof(uint64), "bench");
  b->wb = (uint64 *)(((uint64)b->wb + 7) & ~7UL);
  for(int i = 0; i < 5 * BENCH_COLS; i++){
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    int v = (int)(st % 255) - 127;
    if(i < 4 * BENCH_COLS){
      b->w[i] = v;
      ((uchar *)b->wb)[i] = (uchar)(v + 128);
    } else {
      b->x[i - 4 * BENCH_COLS] = v;
    }
  }
  b->xsum = 0;
  for(int i = 0; i < BENCH_COLS; i++)
    b->xsum += b->x[i];
  for(int j = 0; j < BENCH_COLS / 8; j++)
    for(int k = 0; k < 4; k++)
      b->xp[4 * j + k] = (uint64)(long)b->x[8 * j + k + 4] + ((uint64)(long)b->x[8 * j + k] << 32);
  if(peak_plain(b->w, b->x, BENCH_COLS, 1) !=
     peak_packed(b->wb, b->xp, BENCH_COLS / 8, b->xsum, 1))
    llm_die("bench: the packed kernel disagrees with the plain one", "");
}

// One round: time each of the four measurements once, keep the best of each.
static void
bench_round(const struct model *mo, struct state *s, struct bench *b, int round)
{
  const struct matrix *gate = &mo->w.w_gate[0], *cls = &mo->w.classifier;
  uint64 t[5];
  volatile int sink;
  uint64 t0 = clock_us();
  sink = peak_plain(b->w, b->x, BENCH_COLS, BENCH_PEAK_REPS);
  t[0] = since(t0);
  t0 = clock_us();
  sink = peak_packed(b->wb, b->xp, BENCH_COLS / 8, b->xsum, BENCH_PEAK_REPS);
  t[1] = since(t0);
  (void)sink;
  t0 = clock_us();
  for(int i = 0; i < BENCH_GATE_REPS; i++)
    matvec(mo, gate, s, s->hb);
  t[2] = since(t0);
  t0 = clock_us();
  matvec(mo, cls, s, s->logits);
  t[3] = since(t0);
  t0 = clock_us();
  for(int i = 0; i < BENCH_Q_REPS; i++)
    for(int k = 0; k < b->nq41; k++)
      matvec(mo, b->q41[k], s, s->hb);
  t[4] = since(t0);
  for(int i = 0; i < 5; i++)
    if(round == 0 || t[i] < b->best[i])
      b->best[i] = t[i];
}

// smolprobe --bench: the lines described above (models with integer blocks only).
static void
run_bench(const struct model *mo, struct state *s)
{
  static struct bench b;
  const struct config *c = &mo->c;
  if(!c->has[WEIGHT_INT8] && !c->has[WEIGHT_Q8_0] && !c->has[WEIGHT_Q4_1])
    llm_die("--bench measures the integer matvecs: the model is float32", "");
  const struct matrix *l0[7] = { &mo->w.wq[0], &mo->w.wk[0], &mo->w.wv[0], &mo->w.wo[0],
                                 &mo->w.w_gate[0], &mo->w.w_up[0], &mo->w.w_down[0] };
  for(int k = 0; k < 7; k++)
    if(l0[k]->type == WEIGHT_Q4_1 && l0[k]->cols == c->dim){
      b.q41[b.nq41++] = l0[k];
      b.q41_macs += (uint64)BENCH_Q_REPS * l0[k]->rows * l0[k]->cols;
    }
  bench_inputs(&b);
  embed(mo, 1, s->x);
  rmsnorm(s->xb, s->x, mo->w.rms_ffn, c->dim, c->norm_eps);
  prepare_input(s, c, s->xb, c->dim);
  for(int r = 0; r < BENCH_ROUNDS; r++)
    bench_round(mo, s, &b, r);
  uint64 peak_macs = 4UL * BENCH_COLS * BENCH_PEAK_REPS;
  uint64 gate_macs = (uint64)BENCH_GATE_REPS * c->hidden_dim * c->dim;
  uint64 cls_macs = (uint64)c->vocab_size * c->dim;
  uint64 plain = rate(peak_macs, b.best[0]), packed = rate(peak_macs, b.best[1]);
  uint64 peak = plain > packed ? plain : packed;
  uint64 mv = rate(gate_macs + cls_macs, b.best[2] + b.best[3]);
  printf("[smolprobe] bench peak_int8_macs_per_s=%lu matvec_int8_macs_per_s=%lu ratio=%lu%%\n",
         peak, mv, mv * 100 / peak);
  printf("[smolprobe] bench_detail peak_plain=%lu peak_packed=%lu w_gate=%lu classifier=%lu "
         "rounds=%d\n", plain, packed, rate(gate_macs, b.best[2]), rate(cls_macs, b.best[3]),
         BENCH_ROUNDS);
  if(b.nq41){
    uint64 q = rate(b.q41_macs, b.best[4]);
    printf("[smolprobe] bench_q4_1 matvec_q4_1_macs_per_s=%lu peak_int8_macs_per_s=%lu "
           "ratio=%lu%%\n", q, peak, q * 100 / peak);
  }
}

// ============================================================================ text in, text out

// The model's tokenizer (docs/tokenizer.md), used in place from the checkpoint's blob;
// dies when the checkpoint has none (what is the flag that needs it).
static void
load_tokenizer(const struct model *mo, struct tokenizer *tok, const char *what)
{
  if(mo->tok_blob == 0){
    fprintf(2, "[smolprobe] error: %s needs the model's tokenizer, and this checkpoint has "
            "none (import one with: nexos model import --gguf FILE)\n", what);
    exit(1);
  }
  const char *err = tok_load(tok, mo->tok_blob, mo->tok_size);
  if(err)
    llm_die("model: tokenizer: ", err);
}

// --prompt/--chat: the text (with --chat the ChatML prompt of one user message, with the
// template's default system turn) encoded into o->tokens; prints the prompt line.
static void
encode_prompt(struct tokenizer *tok, struct options *o)
{
  const char *s = o->text, *flag = o->chat ? "--chat" : o->score ? "--perplexity" : "--prompt";
  char *chat = 0;
  int len = strlen(s);
  if(o->chat){
    len = tok_chat(tok, 0, o->text, 0, 0);
    if(len < 0)
      llm_die("--chat: the model's tokenizer has no chat template", "");
    chat = llm_malloc(len + 1UL, "the chat prompt");
    tok_chat(tok, 0, o->text, chat, len + 1);
    s = chat;
  }
  int n = tok_encode(tok, s, len, 0, 0);
  if(n < 0)
    llm_die("out of memory encoding the prompt", "");
  if(n == 0)
    llm_die(flag, ": the text is empty (it encodes to no tokens)");
  o->tokens = llm_malloc((uint64)n * sizeof(int), "prompt");
  tok_encode(tok, s, len, o->tokens, n);
  o->n_prompt = n;
  if(o->score && n < 2){
    fprintf(2, "[smolprobe] error: --perplexity: the text encodes to %d token; scoring needs "
            "at least 2\n", n);
    exit(1);
  }
  if(chat)
    free(chat);
  print_list("[smolprobe] prompt tokens=", o->tokens, 0, n);
}

// "[smolprobe] text: <the bytes of ids[0..n)>" on one line, control tokens left out;
// backslash, newline, carriage return and tab are written \\ \n \r \t, any other byte
// below 0x20 (and 0x7f) and the spaces that end the text \xHH, so that the text stays on
// its line whole (docs/smolprobe.md).
static void
print_text(const struct tokenizer *tok, const int *ids, int n)
{
  static const char hex[] = "0123456789abcdef";
  int len = tok_decode(tok, ids, n, 0, 0, TOK_SKIP_SPECIAL);
  if(len < 0)
    llm_die("the generated text is too long to print", "");
  uchar *raw = llm_malloc(len + 1UL, "output buffer");
  tok_decode(tok, ids, n, (char *)raw, len + 1, TOK_SKIP_SPECIAL);
  char *out = llm_malloc(4UL * len + 32, "output buffer");
  int k = strlen("[smolprobe] text: "), end = len;
  memcpy(out, "[smolprobe] text: ", k);
  while(end > 0 && raw[end - 1] == ' ')
    end--;                                   // trailing spaces as \x20: the line keeps them
  for(int i = 0; i < len; i++){
    uchar c = raw[i];
    const char *esc = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" :
                      c == '\t' ? "\\t" : 0;
    if(esc){
      out[k++] = esc[0];
      out[k++] = esc[1];
    } else if(c < 0x20 || c == 0x7f || i >= end){
      out[k++] = '\\';
      out[k++] = 'x';
      out[k++] = hex[c >> 4];
      out[k++] = hex[c & 15];
    } else {
      out[k++] = c;
    }
  }
  out[k++] = '\n';
  write(1, out, k);
  free(out);
  free(raw);
}

// "[smolprobe] model weights=q8_0+q4_1 version=2 layers=30 dim=576 vocab=49152
// tokenizer=1": which model the image carries (the weight types in file order of first
// use, as `nexos model info` names them).
static void
print_model(const struct model *mo)
{
  static const char *names[] = { "f32", "int8", "q8_0", "q4_1" };
  char w[32];
  int len = 0, seen = 0;
  for(int i = 0; i < mo->c.n_blocks; i++){
    int t = mo->types[i];
    if(seen & (1 << t))
      continue;
    seen |= 1 << t;
    len += snprintf(w + len, sizeof(w) - len, "%s%s", len ? "+" : "", names[t]);
  }
  printf("[smolprobe] model weights=%s version=%d layers=%d dim=%d vocab=%d tokenizer=%d\n",
         w, mo->c.version, mo->c.n_layers, mo->c.dim, mo->c.vocab_size, mo->tok_blob != 0);
}

// ============================================================================ the CLI

static void
usage(void)
{
  printf("usage: smolprobe (--prompt-tokens a,b,c | --prompt TEXT | --chat TEXT |\n"
         "                  --perplexity TEXT) [--gen-len N]\n"
         "                 [--seq-len N] [--model PATH] [--temperature T] [--seed S]\n"
         "                 [--stop-at-eos] [--print-tokens] [--print-logits] [--trace]\n"
         "                 [--samples N] [--bench] [--help]\n"
         "Runs a SmolLM-135M-architecture transformer (default model %s) over a KV cache\n"
         "reserved with one sbrk() for --seq-len positions (default 256), and reports how\n"
         "many KV pages the kernel mapped while reserving and while decoding.\n"
         "The default model is the real SmolLM2-135M-Instruct (imported from its GGUF with\n"
         "its tokenizer, for --prompt/--chat); an image made with `make MODEL=synth` has\n"
         "SYNTHETIC weights instead (seeded random numbers, `nexos model synth`: meaningless\n"
         "tokens, exactly SmolLM-135M's memory behaviour). The `model` line says which.\n"
         "  --prompt-tokens  comma-separated token ids fed first (at least one)\n"
         "  --prompt TEXT    the prompt as text, encoded with the model's tokenizer; the\n"
         "                   generated text is printed on a `text:` line\n"
         "  --chat TEXT      TEXT as a user message in the model's chat template (ChatML);\n"
         "                   implies --stop-at-eos\n"
         "  --gen-len        tokens to generate (>= 0; default 64 with --prompt/--chat);\n"
         "                   every prompt and generated token is fed, so the run writes\n"
         "                   prompt+gen K/V rows\n"
         "  --perplexity TEXT  score TEXT (its tokens as encoded, no bos): feed every token\n"
         "                   and print the perplexity of each next token (generates none)\n"
         "  --stop-at-eos    end the request when the model emits <|im_end|>\n"
         "  --temperature    0 (default) = greedy; > 0 samples with --seed (default 0)\n"
         "  --print-tokens   print the generated ids; --print-logits the final logits\n"
         "  --trace          one line per fed position with the KV pages mapped so far\n"
         "  --samples N      prefill once, fork N branches (1..6) that each sample their\n"
         "                   own gen-len tokens (seed+i, temperature 0.8 unless given)\n"
         "                   over the shared prompt KV, and report the copy-on-write pages\n"
         "  --bench          integer micro-benchmark: the guest's peak int8 multiply-add\n"
         "                   rate and the model's matvecs (alone, or after the request)\n",
         DEFAULT_MODEL);
}

// Parse a decimal integer in [lo, hi] (optional leading '-'), or die naming the flag.
static long
parse_long(const char *flag, const char *s, long lo, long hi)
{
  const char *p = s;
  int neg = 0;
  long v = 0;
  if(*p == '-'){
    neg = 1;
    p++;
  }
  if(*p == 0)
    llm_die(flag, ": expected a number");
  for(; *p; p++){
    if(*p < '0' || *p > '9'){
      fprintf(2, "[smolprobe] error: %s: '%s' is not a decimal number\n", flag, s);
      exit(1);
    }
    v = v * 10 + (*p - '0');
    if(v > 4000000000L)
      break;
  }
  if(neg)
    v = -v;
  if(v < lo || v > hi){
    fprintf(2, "[smolprobe] error: %s: %s is out of range [%ld, %ld]\n", flag, s, lo, hi);
    exit(1);
  }
  return v;
}

// Parse "a,b,c" into a fresh array of ids (>= 0, checked against the vocabulary later).
static int *
parse_tokens(const char *s, int *count)
{
  int n = 1;
  if(*s == 0)
    llm_die("--prompt-tokens: empty prompt (give at least one token id)", "");
  for(const char *p = s; *p; p++)
    n += *p == ',';
  if(n > MAX_DIM)
    llm_die("--prompt-tokens: too many tokens", "");
  int *ids = llm_malloc((uint64)n * sizeof(int), "prompt");
  const char *p = s;
  for(int i = 0; i < n; i++){
    long v = 0;
    int digits = 0;
    if(*p == '-')
      llm_die("--prompt-tokens: token ids cannot be negative: ", s);
    for(; *p >= '0' && *p <= '9'; p++, digits++)
      if(v < 1000000000L)
        v = v * 10 + (*p - '0');
    if(digits == 0 || (*p != ',' && *p != 0))
      llm_die("--prompt-tokens: expected comma-separated token ids, got ", s);
    ids[i] = v > 1000000000L ? 1000000000 : (int)v;
    if(*p == ',')
      p++;
  }
  *count = n;
  return ids;
}

// The value after flag argv[*i], or die.
static const char *
flag_value(int argc, char **argv, int *i)
{
  if(*i + 1 >= argc)
    llm_die(argv[*i], ": missing value");
  return argv[++*i];
}

// The --samples rules: branches generate (gen-len >= 1) and differ (temperature > 0 when
// N > 1; 0.8 when not given); --trace is off in branches (it would print from them).
static void
check_samples(struct options *o)
{
  if(o->gen_len < 1)
    llm_die("--samples needs --gen-len >= 1 (each branch generates its own tokens)", "");
  if(o->temperature < 0.0f){
    o->temperature = PARALLEL_TEMPERATURE;
    o->temp_text = "0.8";
  }
  if(o->samples > 1 && o->temperature == 0.0f)
    llm_die("--samples N > 1 needs --temperature > 0 (greedy branches would all be the same)", "");
  o->trace = 0;
}

static void
parse_args(int argc, char **argv, struct options *o)
{
  memset(o, 0, sizeof(*o));
  o->model = DEFAULT_MODEL;
  o->gen_len = -1;
  o->temperature = -1.0f;
  for(int i = 1; i < argc; i++){
    const char *a = argv[i];
    if(strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0){
      usage();
      exit(0);
    } else if(strcmp(a, "--prompt-tokens") == 0){
      o->tokens = parse_tokens(flag_value(argc, argv, &i), &o->n_prompt);
    } else if(strcmp(a, "--gen-len") == 0){
      o->gen_len = parse_long(a, flag_value(argc, argv, &i), 0, MAX_DIM);
    } else if(strcmp(a, "--seq-len") == 0){
      o->seq_len = parse_long(a, flag_value(argc, argv, &i), 1, MAX_DIM);
    } else if(strcmp(a, "--model") == 0){
      o->model = flag_value(argc, argv, &i);
    } else if(strcmp(a, "--temperature") == 0){
      const char *v = flag_value(argc, argv, &i);
      char *end;
      double t = strtod(v, &end);
      if(end == v || *end != 0 || !(t >= 0.0 && t <= 1e6))
        llm_die("--temperature: want a number >= 0, got ", v);
      o->temperature = (float)t;
      o->temp_text = v;
    } else if(strcmp(a, "--seed") == 0){
      o->seed = parse_long(a, flag_value(argc, argv, &i), 0, 0x7fffffffL);
    } else if(strcmp(a, "--samples") == 0){
      o->samples = parse_long(a, flag_value(argc, argv, &i), 1, MAX_SAMPLES);
    } else if(strcmp(a, "--print-tokens") == 0){
      o->print_tokens = 1;
    } else if(strcmp(a, "--print-logits") == 0){
      o->print_logits = 1;
    } else if(strcmp(a, "--trace") == 0){
      o->trace = 1;
    } else if(strcmp(a, "--bench") == 0){
      o->bench = 1;
    } else if(strcmp(a, "--prompt") == 0 || strcmp(a, "--chat") == 0){
      if(o->text)
        llm_die("give one --prompt, --chat or --perplexity, not two: ", a);
      o->text = flag_value(argc, argv, &i);
      o->chat = a[2] == 'c';
    } else if(strcmp(a, "--perplexity") == 0){
      if(o->text)
        llm_die("give one --prompt, --chat or --perplexity, not two: ", a);
      o->text = flag_value(argc, argv, &i);
      o->score = 1;
    } else if(strcmp(a, "--stop-at-eos") == 0){
      o->stop_eos = 1;
#ifdef NEXOS_TEST_HOOKS
    // A test hook, compiled only into the host test build (tests/host/Makefile): the
    // guest's smolprobe has no flag that exists only for tests. See docs/smolprobe.md.
    } else if(strcmp(a, "--test-kill-branch") == 0){
      o->kill_branch = 1 + parse_long(a, flag_value(argc, argv, &i), 0, MAX_SAMPLES - 1);
#endif
    } else {
      llm_die("unknown flag (try --help): ", a);
    }
  }
  if(o->bench && o->tokens == 0 && o->text == 0 && o->gen_len < 0 && !o->samples &&
     !o->stop_eos)
    return;                                        // --bench alone: no request
  if(o->tokens && o->text)
    llm_die(o->chat ? "--chat" : "--prompt", " and --prompt-tokens: give one of them");
  if(o->tokens == 0 && o->text == 0)
    llm_die("--prompt-tokens, --prompt or --chat is required (try --help)", "");
  if(o->chat)
    o->stop_eos = 1;
  if(o->score && (o->gen_len >= 0 || o->samples || o->stop_eos || o->bench || o->trace ||
                  o->print_tokens || o->print_logits))
    llm_die("--perplexity scores its text alone (no --gen-len, --samples, --stop-at-eos, "
            "--bench, --trace, --print-tokens or --print-logits)", "");
  if(o->score)
    o->gen_len = 0;
  if(o->gen_len < 0 && o->text)
    o->gen_len = DEFAULT_TEXT_GEN;
  if(o->gen_len < 0)
    llm_die("--gen-len is required (try --help)", "");
  if(o->samples && (o->text || o->stop_eos))
    llm_die("--samples takes --prompt-tokens (no --prompt, --chat or --stop-at-eos)", "");
  if(o->samples)
    check_samples(o);
  else if(o->temperature < 0.0f)
    o->temperature = 0.0f;
}

// Check the request against the model; on success o->tokens has room for P+G ids.
static void
check_request(const struct config *c, struct options *o)
{
  for(int i = 0; i < o->n_prompt; i++)
    if(o->tokens[i] >= c->vocab_size){
      fprintf(2, "[smolprobe] error: token id %d is outside the vocabulary [0, %d)\n",
              o->tokens[i], c->vocab_size);
      exit(1);
    }
  if(o->seq_len == 0)
    o->seq_len = c->max_seq_len < DEFAULT_SEQ_LEN ? c->max_seq_len : DEFAULT_SEQ_LEN;
  if(o->seq_len > c->max_seq_len){
    fprintf(2, "[smolprobe] error: --seq-len %d exceeds the model's max_seq_len %d\n",
            o->seq_len, c->max_seq_len);
    exit(1);
  }
  if(o->n_prompt + o->gen_len > o->seq_len){
    fprintf(2, "[smolprobe] error: prompt (%d) + gen-len (%d) exceeds seq-len %d\n",
            o->n_prompt, o->gen_len, o->seq_len);
    exit(1);
  }
  int *all = llm_malloc((uint64)(o->n_prompt + o->gen_len) * sizeof(int), "tokens");
  memset(all, 0, (o->n_prompt + o->gen_len) * sizeof(int));
  memcpy(all, o->tokens, o->n_prompt * sizeof(int));
  o->tokens = all;
}

// main() for --samples: the reservation as in a single request, then parallel_run();
// the timing line counts the prompt once and every branch's tokens. Exits.
static void
parallel_main(const struct model *mo, struct state *s, struct options *o, float *probs,
              const struct kv_plan *kp, uint64 t0)
{
  static struct par_snaps ps;
  static struct parallel pa;
  parallel_alloc(o, &pa);
  printf("[smolprobe] parallel_request samples=%d temperature=%s seed=%lu "
         "(branch i samples with seed+i)\n", o->samples, o->temp_text, o->seed);
  kv_align_break();
  uint64 t1 = clock_us();
  if(memstat(&ps.before) < 0)
    llm_die("memstat failed", "");
  kv_reserve(s, &mo->c, kp);
  memstat(&ps.reserved);
  printf("[smolprobe] running decode...\n");
  int done = parallel_run(mo, s, o, probs, kp, &pa, &ps);
  uint64 dus = clock_us() - t1;
  dus = dus > 0 ? dus : 1;
  uint64 fed = o->n_prompt + (uint64)done * o->gen_len;
  uint64 tps10 = fed * 10000000UL / dus;
  printf("[smolprobe] timing load_ms=%lu decode_ms=%lu tokens_per_s=%lu.%lu\n",
         (t1 - t0) / 1000, dus / 1000, tps10 / 10, tps10 % 10);
  if(done == 0)
    llm_die("no branch could run (see the branch and fork lines above)", "");
  if(o->bench)
    run_bench(mo, s);
  exit(0);
}

int
main(int argc, char **argv)
{
  llm_name = "smolprobe";
  static struct model mo;
  static struct state s;
  static struct options o;
  static struct tokenizer tok;
  struct sampler sp;
  struct kv_plan kp;
  struct memstat before, reserved, done;
  float *probs;

  parse_args(argc, argv, &o);
  printf("[smolprobe] loading LLM assets...\n");
  uint64 t0 = clock_us();
  load_model(o.model, &mo);
  print_model(&mo);
  if(o.text || o.stop_eos){
    load_tokenizer(&mo, &tok, o.text ? (o.chat ? "--chat" : o.score ? "--perplexity" :
                   "--prompt") : "--stop-at-eos");
    o.eos[0] = tok.eos;
    o.eos[1] = tok.im_end;
  }
  if(o.text)
    encode_prompt(&tok, &o);
  if(o.tokens == 0){                               // --bench alone
    s.seq_len = 1;
    alloc_state(&mo.c, &s, &probs);
    run_bench(&mo, &s);
    exit(0);
  }
  check_request(&mo.c, &o);
  int total = o.n_prompt + o.gen_len;
  printf("[smolprobe] request prompt_tokens=%d gen_tokens=%d\n", o.n_prompt, o.gen_len);

  s.seq_len = o.seq_len;
  alloc_state(&mo.c, &s, &probs);
  sampler_init(&sp, o.temperature, o.seed, probs, mo.c.vocab_size);
  kv_plan(&mo.c, o.seq_len, &kp);
  long active = kv_active_pages(&mo.c, &kp, total);
  printf("[smolprobe] kv_capacity max_pages=%ld active_pages_est=%ld\n", kp.max_pages, active);
  if(o.samples)
    parallel_main(&mo, &s, &o, probs, &kp, t0);
  kv_align_break();
  uint64 t1 = clock_us();

  // From here to the last snapshot nothing is allocated or first touched but the KV rows.
  if(memstat(&before) < 0)
    llm_die("memstat failed", "");
  kv_reserve(&s, &mo.c, &kp);
  memstat(&reserved);
  printf("[smolprobe] running decode...\n");
  double nll = 0.0;
  if(o.score)
    nll = score_run(&mo, &s, &o);
  else
    run(&mo, &s, &sp, &o, 0, total, &before);
  memstat(&done);
  uint64 t2 = clock_us();

  if((o.text && !o.score) || o.stop_eos)
    printf("[smolprobe] generated tokens=%d stopped_at_eos=%d\n", o.generated,
           o.fed < total);
  report(&kp, kv_active_pages(&mo.c, &kp, o.fed), &before, &reserved, &done);
  uint64 dus = t2 - t1 > 0 ? t2 - t1 : 1;
  uint64 tps10 = (uint64)o.fed * 10000000UL / dus;   // positions per second, times 10
  printf("[smolprobe] timing load_ms=%lu decode_ms=%lu tokens_per_s=%lu.%lu\n",
         (t1 - t0) / 1000, dus / 1000, tps10 / 10, tps10 % 10);
  if(o.score)
    print_perplexity(o.n_prompt, nll);
  if(o.text && !o.score)
    print_text(&tok, o.tokens + o.n_prompt, o.generated);
  if(o.print_tokens)
    print_list("[smolprobe] tokens=", o.tokens + o.n_prompt, 0, o.generated);
  if(o.print_logits)
    print_list("[smolprobe] logits=", 0, s.logits, mo.c.vocab_size);
  if(o.bench)
    run_bench(&mo, &s);
  exit(0);
}
