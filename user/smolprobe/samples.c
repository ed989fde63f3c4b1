// smolprobe --samples N: parallel sampling with fork(), the branches sharing the prompt's
// KV pages copy-on-write (docs/smolprobe.md, "Parallel sampling").
#include "user/smolprobe/smolprobe.h"

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
// report pipes and the new pipe, 11 + k - 1 descriptors: at most 6 branches (MAX_SAMPLES).

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
  feed(mo, s, &sp, o, P, total, &m0);
  r.decode_us = clock_us() - t0;
  memstat(&m1);
  r.state_copies = m0.cow_copies;
  r.state_reuses = m0.cow_reuses;
  r.cow_copies = m1.cow_copies;
  r.cow_reuses = m1.cow_reuses;
  r.kv_copies = m1.cow_copies - m0.cow_copies;
  r.kv_reuses = m1.cow_reuses - m0.cow_reuses;
  r.new_kv_pages = (long)m1.mapped_pages - (long)m0.mapped_pages;
  // what an eager fork copied for this branch: its anonymous pages (the model's file
  // pages are shared by reference in every configuration), less those it faulted itself
  r.fork_pages = anon_pages(&m0) - m0.lazy_faults;
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
release_cache(struct state *s, const struct kv_layout *kl)
{
  char *base = (char *)s->key_cache;
  if(sbrk(0) != base + kl->bytes || sbrk(-(int)kl->bytes) == (char *)-1)
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
parallel_report(const struct config *c, const struct options *o, const struct kv_layout *kl,
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
         (long)ps->atfork.shared_pages - (long)ps->atfork.file_pages,
         kv_region_pages(kl, o->n_prompt), o->samples, anon_pages(&ps->pre), released);
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
  long eager_pages = anon_pages(&ps->pre) * done;
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
             const struct kv_layout *kl, struct parallel *pa, struct par_snaps *ps)
{
  struct channels ch;
  int P = o->n_prompt;

  forward_block(mo, s, o->tokens, 0, P, 1);          // prefill: rows 0..P-1, logits of P-1
  note_first_token(o);
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
  int released = release_cache(s, kl);
  int done = collect(pa, forked, o->gen_len, &ch);
  memstat(&ps->all);                                 // every branch alive, all reported
  close(ch.ex[1]);
  close(ch.go[1]);
  close(ch.ack[0]);
  for(; ch.reaped < forked; ch.reaped++)             // the branches still alive
    wait(0);
  parallel_report(&mo->c, o, kl, pa, forked, done, ps, released);
  return done;
}

// main() for --samples: the reservation as in a single request, then parallel_run();
// the timing line counts the prompt once and every branch's tokens. Exits.
void
parallel_main(const struct model *mo, struct state *s, struct options *o, float *probs,
              const struct kv_layout *kl, uint64 t0)
{
  static struct par_snaps ps;
  static struct parallel pa;
  parallel_alloc(o, &pa);
  printf("[smolprobe] parallel_request samples=%d temperature=%s seed=%lu "
         "(branch i samples with seed+i)\n", o->samples, o->temp_text, o->seed);
  align_break();
  uint64 t1 = clock_us();
  if(memstat(&ps.before) < 0)
    llm_die("memstat failed", "");
  reserve_cache(s, kl);
  memstat(&ps.reserved);
  printf("[smolprobe] running decode...\n");
  int done = parallel_run(mo, s, o, probs, kl, &pa, &ps);
  o->fed = o->n_prompt + done * o->gen_len;
  print_timing(o, t0, t1, clock_us());
  if(done == 0)
    llm_die("no branch could run (see the branch and fork lines above)", "");
  if(o->bench)
    run_bench(mo, s);
  exit(0);
}
