// smolserve's worker: a process forked for one request that reserves its KV cache with
// one sbrk(), reports it, generates and reports again (docs/smolserve.md).
#include "user/smolserve/smolserve.h"

// The layout of a KV reservation for max_len positions of the server's model
// (user/llm/kv.h: what smolprobe reserves too).
void
plan_kv(const struct server *sv, int max_len, struct kv_layout *kl)
{
  kv_layout(kl, sv->mo.c.n_layers, sv->mo.c.kv_dim, max_len);
}

// Whether tok is one of the model's end-of-sequence ids.
static int
is_eos(const struct server *sv, int tok)
{
  return tok == sv->eos[0] || tok == sv->eos[1];
}

// This process's anonymous pages, resident or in swap.
static long
anon_pages(const struct memstat *m)
{
  return (long)(m->mapped_pages + m->swapped_pages) - (long)m->file_pages;
}

// Store to every page of [p, p + len): under COW the process takes its copies now.
static void
own_pages(void *p, uint64 len)
{
  volatile char *c = p;
  for(uint64 off = 0; off < len; off += PGSIZE)
    c[off] = c[off];
  if(len)
    c[len - 1] = c[len - 1];
}

// Feed the prompt from position from (the shared prefix's rows before it are there),
// then each generated token (greedy): gen tokens, or until the eos (which is fed too)
// within max_len. Every generated token is fed, so P + generated K/V rows are written.
// fill (the --test-fill hook), if not 0, is the reservation's fill_len bytes, written
// whole once the prompt is fed, as a long answer would grow into it: a worker the kernel
// kills then has the prompt to feed again. Returns the tokens generated; *fnv gets the
// FNV-1a hash of their ids.
static int
generate(struct server *sv, const struct request *r, int from, char *fill, uint64 fill_len,
         uint64 *fnv)
{
  struct sampler sp;
  int P = r->n_prompt, limit = r->gen >= 0 ? P + r->gen : r->max_len, n = P;
  sampler_init(&sp, 0.0f, 1, sv->probs, sv->mo.c.vocab_size);
  memcpy(sv->tok, r->prompt, P * sizeof(int));
  int start = from;
  if(P - 1 > from){                            // the prompt but its last token, in blocks
    forward_block(&sv->mo, &sv->s, sv->tok + from, from, P - 1 - from, 0);
    if(sv->progress)
      sv->progress[r - sv->rq] = P - 1 - from;
    start = P - 1;
  }
  for(int pos = start; pos < n; pos++){
    int more = pos == n - 1 && n < limit && !(r->gen < 0 && n > P && is_eos(sv, sv->tok[n - 1]));
    forward(&sv->mo, &sv->s, sv->tok[pos], pos, more);
    if(sv->progress)                          // lost if this worker is killed: recomputed
      sv->progress[r - sv->rq] = pos + 1 - from;
    if(fill && pos == P - 1)
      own_pages(fill, fill_len);
    if(more)
      sv->tok[n++] = sample(&sp, sv->s.logits);
  }
  *fnv = llm_fnv1a(LLM_FNV_BASIS, sv->tok + P, (uint64)(n - P) * sizeof(sv->tok[0]));
  return n - P;
}

// A forked worker for request i (never returns): reserve the KV cache with one sbrk (or,
// for a request that shares a prefix, take the prefix's reservation as inherited), report
// on ack (then close it), generate, report on the shared pipe, exit 0. A failed sbrk
// (eager: not enough memory) is reported as MSG_NORESERVE and the worker exits.
void
worker(struct server *sv, int i, int ack)
{
  struct request *r = &sv->rq[i];
  struct prefix *px = r->prefix >= 0 ? &sv->px[r->prefix] : 0;
  struct memstat m0, m1, m2;
  struct msg m;
  // Store to every page of the server's struct first: under COW the worker takes the
  // copies, so the server, which writes it all the time, finds its pages its own again
  // and needs no free page for them when memory runs out.
  own_pages(sv, sizeof(*sv));
  for(int fd = 3; fd < NOFILE; fd++)
    if(fd != ack && fd != sv->rep[1])
      close(fd);
  memset(&m, 0, sizeof(m));
  m.req = i;
  m.pid = getpid();
  struct kv_layout kl;
  if(px)
    kl = px->kl;
  else
    plan_kv(sv, r->max_len, &kl);
  sv->s.seq_len = kl.seq_len;
  memstat(&m0);
  // an eager fork copies the anonymous pages; the mapped model's pages it shares
  m.fork_pages = (long)m0.pt_pages +
                 (m0.cow_alloc ? 0 : (long)m0.mapped_pages - (long)m0.file_pages);
  char *base = px ? px->base : sbrk((int)kl.bytes);
  memstat(&m1);
  m.kind = base == (char *)-1 ? MSG_NORESERVE : MSG_RESERVED;
  m.mapped = (long)m1.mapped_pages - (long)m0.mapped_pages;
  if(write(ack, &m, sizeof(m)) != sizeof(m) || m.kind == MSG_NORESERVE)
    exit(0);
  close(ack);
  if(sv->kill_req == i + 1 && r->attempts == 1)
    kill(getpid());                            // test hook: die as the kernel kills
  kv_place(&kl, base, &sv->s.key_cache, &sv->s.value_cache);
  // What generating writes besides the KV cache, copied now: the COW copies counted
  // below are then the prefix's KV pages this request writes into.
  for(int k = 0; k < sv->s.nscratch; k++)
    own_pages((void *)sv->s.scratch[k].p, sv->s.scratch[k].len);
  own_pages(sv->s.blk.base, sv->s.blk.bytes);  // the prompt's blocks (forward_block)
  own_pages(sv->tok, (uint64)kl.seq_len * sizeof(int));
  memstat(&m1);
  uint64 t = clock_us();
  char *fill = sv->fill && r->attempts == 1 ? base : 0;   // test hook, see generate()
  m.generated = generate(sv, r, px ? px->n : 0, fill, kl.bytes, &m.answer_fnv);
  m.decode_us = clock_us() - t;
  memstat(&m2);
  m.kind = MSG_DONE;
  // Its pages in swap are its own too (memstat counts them apart from the mapped ones);
  // the model's file pages are not (reclaim may have dropped some before either count).
  m.mapped = anon_pages(&m2) - anon_pages(&m0);
  m.paged_out = m2.paged_out;
  m.paged_in = m2.paged_in;
  if(px){       // its own KV pages: those it mapped, and the prefix's it copied
    long copies = (long)m2.cow_copies - (long)m1.cow_copies;
    m.copied_kv = m0.cow_alloc ? copies : px->mapped_pages;
    m.shared_kv = m0.cow_alloc ? px->mapped_pages - copies : 0;
    m.mapped += m.copied_kv;
  }
  if(write(sv->rep[1], &m, sizeof(m)) != sizeof(m))
    exit(1);
  exit(0);
}
