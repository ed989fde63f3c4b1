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
void
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
  struct kv_layout kl;
  plan_kv(sv, r->max_len, &kl);
  uint64 bytes = kl.bytes;
  memstat(&m0);
  // an eager fork copies the anonymous pages; the mapped model's pages it shares
  m.fork_pages = (long)m0.pt_pages +
                 (m0.cow_alloc ? 0 : (long)m0.mapped_pages - (long)m0.file_pages);
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
  kv_place(&kl, base, &sv->s.key_cache, &sv->s.value_cache);
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
