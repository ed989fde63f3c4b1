// smolserve's server: load and check, then admit requests from memstat() against a low
// watermark, queue the rest, reap the workers and run a killed one again
// (docs/smolserve.md, "Admission").
#include "user/smolserve/smolserve.h"

// Pages in use in the whole system now (and the peak so far); *free_out gets the free ones.
long
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

long
t_ms(const struct server *sv)
{
  return (clock_us() - sv->t0) / 1000;
}

// Pages admitting request r is expected to take now: the latest fork's cost (as its worker
// saw it: its page tables, and with a copying fork every page it has) plus, unless r
// appends to a shared prefix's reservation, its own reservation at the ratio the latest
// one was mapped at (0 under lazy sbrk).
static long
est_pages(const struct server *sv, const struct request *r)
{
  if(!sv->measured)
    return 0;
  if(r->prefix >= 0 || sv->last_reserved == 0)
    return sv->last_fork;
  struct kv_layout kl;
  plan_kv(sv, r->max_len, &kl);
  return sv->last_fork + (sv->last_mapped * kl.max_pages + sv->last_reserved - 1) / sv->last_reserved;
}

// The low watermark with `running` requests running: total_pages / 64 plus room for each
// of them to write GROW_SLOTS more rows.
static long
watermark(const struct server *sv, int running)
{
  return sv->wm_base + running * sv->grow_pages;
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
  if(sv->progress)
    sv->progress[i] = 0;
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
  struct kv_layout kl;
  plan_kv(sv, r->max_len, &kl);
  r->reserved_pages = r->prefix >= 0 ? sv->px[r->prefix].kl.max_pages : kl.max_pages;
  sv->last_fork = r->fork_pages;
  if(r->prefix < 0){                           // a reservation of its own: its ratio
    sv->last_mapped = m.mapped;
    sv->last_reserved = r->reserved_pages;
  }
  sv->measured = 1;
  sv->running++;
  if(sv->running > sv->peak)
    sv->peak = sv->running;
  if(sv->first_admit == 0)
    sv->first_admit = clock_us();
  long used = snapshot(sv, 0);
  struct memstat ms;
  memstat(&ms);
  printf("[smolserve] admit id=%s attempt=%d t_ms=%ld running=%d queued=%d free_pages=%ld "
         "est_pages=%ld watermark_pages=%ld fork_pages=%ld reserve_mapped_pages=%ld "
         "reserved_kv_pages=%ld used_pages=%ld pagecache_pages=%lu\n", r->id, r->attempts,
         t_ms(sv), sv->running, sv->qlen, free, est, wm, r->fork_pages, m.mapped,
         r->reserved_pages, used, ms.pagecache_pages);
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
    if(sv->running > 0 && free - est < wm && !sv->overcommit){
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
    q->shared_kv = m.shared_kv;
    q->copied_kv = m.copied_kv;
    q->answer_fnv = (uint)m.answer_fnv;
    q->paged_out = m.paged_out;
    q->paged_in = m.paged_in;
  }
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
    finish_request(sv, r);
    return;
  }
  sv->recomputed++;
  if(sv->progress)
    r->recomputed_tokens += sv->progress[i];
  if(r->attempts >= (sv->overcommit ? MAX_ATTEMPTS_OVERCOMMIT : MAX_ATTEMPTS))
    llm_die(sv->overcommit ? "a worker was killed 16 times: request "
                           : "a worker was killed 4 times: request ", r->id);
  push_front(sv, i);
  long used = snapshot(sv, 0);
  printf("[smolserve] recompute id=%s attempt=%d t_ms=%ld running=%d queued=%d status=%d "
         "used_pages=%ld (killed before it finished; it runs again)\n", r->id, r->attempts,
         t_ms(sv), sv->running, sv->qlen, st, used);
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
    struct kv_layout kl;
    plan_kv(sv, r->max_len, &kl);
    if(r->max_len > c->max_seq_len || kl.bytes > 0x7ffff000UL){
      fprintf(2, "[smolserve] error: request %s: max_len %d exceeds the model's max_seq_len "
              "%d\n", r->id, r->max_len, c->max_seq_len);
      exit(1);
    }
    if(r->n_prompt + (r->gen > 0 ? r->gen : 0) > r->max_len){
      fprintf(2, "[smolserve] error: request %s: prompt (%d) + generated (%d) exceeds "
              "max_len %d\n", r->id, r->n_prompt, r->gen, r->max_len);
      exit(1);
    }
    if(r->max_len > longest)
      longest = r->max_len;
  }
  return longest;
}

// The model's eos ids, if the workload needs them, and the prompts of chat-style requests:
// both from the model's tokenizer.
static void
use_tokenizer(struct server *sv)
{
  static struct tokenizer tok;
  sv->eos[0] = sv->eos[1] = -1;
  int eos = 0, chat = 0;
  for(int i = 0; i < sv->n; i++){
    eos |= sv->rq[i].gen < 0;
    chat |= sv->rq[i].chat[0] != 0;
  }
  if(!eos && !chat)
    return;
  if(sv->mo.tok_blob == 0)
    llm_die(chat ? "this model has no tokenizer, so no chat template: a request is chat-style"
                 : "this model has no tokenizer, so no eos: a request ends at eos", "");
  const char *err = tok_load(&tok, sv->mo.tok_blob, sv->mo.tok_size);
  if(err)
    llm_die("model: tokenizer: ", err);
  sv->eos[0] = tok.eos;
  sv->eos[1] = tok.im_end;
  if(chat)
    make_chat_prompts(sv, &tok);
}

// --overcommit: a page every worker shares with the server whatever COW_ALLOC is (a
// MAP_SHARED file page; fork shares file pages in every configuration), where each
// worker counts the positions it has fed. A killed worker's count is what its request
// feeds again. The file is unlinked at once: the mapping keeps it until exit.
static void
map_progress(struct server *sv)
{
  static char zero[MAX_REQ * sizeof(int)];
  int fd = open(PROGRESS_FILE, O_CREATE | O_RDWR);
  if(fd < 0 || write(fd, zero, sizeof(zero)) != sizeof(zero))
    llm_die("cannot create ", PROGRESS_FILE);
  void *p = mmap(0, sizeof(zero), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(PROGRESS_FILE);
  if(p == (void *)-1)
    llm_die("cannot map ", PROGRESS_FILE);
  sv->progress = p;
}

// Load, check, allocate and touch everything; the baseline snapshot; then serve every
// request; then the summary.
void
serve(struct server *sv, const char *model, const char *name)
{
  uint64 t0 = clock_us();
  load_model(model, &sv->mo);
  use_tokenizer(sv);
  int longest = check_workload(sv);
  group_prefixes(sv);
  sv->s.seq_len = longest;
  alloc_state(&sv->mo.c, &sv->s, &sv->probs);
  sv->tok = llm_malloc((uint64)longest * sizeof(int), "tokens");
  memset(sv->tok, 0, longest * sizeof(int));
  if(pipe(sv->rep) < 0)
    llm_die("pipe failed", "");
  if(sv->overcommit)
    map_progress(sv);
  printf("[smolserve] workload name=%s requests=%d longest_max_len=%d\n", name, sv->n, longest);
  prefill_prefixes(sv);                          // before the baseline: held to the end
  if(kv_align_break() < 0)                       // workers' reservations start on a page
    llm_die("out of memory aligning the KV reservations", "");
  struct memstat m;
  struct kv_layout slot;                         // one position of every region
  plan_kv(sv, 1, &slot);
  memstat(&m);
  sv->ms0 = m;
  sv->t0 = clock_us();
  sv->total_pages = m.total_pages;
  sv->baseline_free = m.free_pages;
  sv->wm_base = m.total_pages / WATERMARK_DIV;
  sv->grow_pages = (GROW_SLOTS * slot.bytes + PGSIZE - 1) / PGSIZE;
  snapshot(sv, 0);
  printf("[smolserve] start lazy_alloc=%d cow_alloc=%d ncpu=%d total_pages=%ld free_pages=%ld "
         "kv_bytes_per_slot=%lu watermark_base_pages=%ld grow_pages=%ld load_ms=%lu\n",
         m.lazy_alloc, m.cow_alloc, m.ncpu, (long)m.total_pages, (long)m.free_pages,
         slot.bytes, sv->wm_base, sv->grow_pages, (sv->t0 - t0) / 1000);
  for(int i = 0; i < sv->n; i++)
    sv->queue[sv->qlen++] = i;
  while(sv->completed < sv->n){
    admit(sv);
    if(sv->children == 0)
      llm_die("nothing is running and nothing could start", "");
    reap(sv);
  }
  print_summary(sv);
}
