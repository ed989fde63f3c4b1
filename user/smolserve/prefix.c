// smolserve's shared prefixes: chat-style prompts (whose shared prefix is the chat
// template's system turn), the grouping of requests by prefix, and the prefill of each
// distinct prefix once, by the server, before any worker is forked
// (docs/smolserve.md, "Shared prefixes").
#include "user/smolserve/smolserve.h"

// The chat prompt of user message msg, encoded into ids (at most cap); returns the count,
// or -1 if it does not fit.
static int
encode_chat(struct tokenizer *tok, const char *msg, int *ids, int cap)
{
  static char text[MAX_CHAT + 512];             // static: the user stack is one page
  int len = tok_chat(tok, 0, msg, text, sizeof(text));
  if(len < 0)
    llm_die("a chat-style request needs a model whose tokenizer has a chat template", "");
  if(len >= (int)sizeof(text))
    return -1;
  int n = tok_encode(tok, text, len, 0, 0);
  if(n < 0 || n > cap)
    return -1;
  return tok_encode(tok, text, len, ids, cap);
}

// Make the prompt of every chat-style request: the chat template around its message. Its
// shared prefix is what the template puts before any message (the system turn and the
// user turn's header), found as the prompt tokens two different messages have in common.
void
make_chat_prompts(struct server *sv, struct tokenizer *tok)
{
  static int a[MAX_PROMPT], b[MAX_PROMPT];
  int head = 0;
  int na = encode_chat(tok, "a", a, MAX_PROMPT), nb = encode_chat(tok, "b", b, MAX_PROMPT);
  while(head < na && head < nb && a[head] == b[head])
    head++;
  for(int i = 0; i < sv->n; i++){
    struct request *r = &sv->rq[i];
    if(r->chat[0] == 0)
      continue;
    r->n_prompt = encode_chat(tok, r->chat, r->prompt, MAX_PROMPT);
    if(r->n_prompt < 0){
      fprintf(2, "[smolserve] error: request %s: its chat prompt is longer than %d tokens\n",
              r->id, MAX_PROMPT);
      exit(1);
    }
    // the head is a prefix of this prompt unless BPE merged across its end
    r->n_prefix = head < r->n_prompt && memcmp(r->prompt, a, head * sizeof(int)) == 0 ? head : 0;
  }
}

// Whether requests a and b begin with the same prefix.
static int
same_prefix(const struct request *a, const struct request *b)
{
  return a->n_prefix == b->n_prefix &&
         memcmp(a->prompt, b->prompt, a->n_prefix * sizeof(int)) == 0;
}

// Give every request with a prefix (when sharing is on) the shared prefix it is forked
// from, one for each distinct prefix, in the order they first appear.
void
group_prefixes(struct server *sv)
{
  for(int i = 0; i < sv->n; i++){
    struct request *r = &sv->rq[i];
    r->prefix = -1;
    if(!sv->share || r->n_prefix == 0)
      continue;
    int g = 0;
    while(g < sv->npx && !same_prefix(&sv->rq[sv->px[g].first], r))
      g++;
    if(g == sv->npx){
      if(sv->npx == MAX_PREFIX)
        llm_die("the workload has more than 8 distinct shared prefixes", "");
      sv->px[g].first = i;
      sv->px[g].n = r->n_prefix;
      sv->npx++;
    }
    struct prefix *p = &sv->px[g];
    p->users++;
    if(r->max_len > p->max_len)
      p->max_len = r->max_len;
    r->prefix = g;
  }
}

// Prefill each shared prefix: reserve its KV cache with one sbrk (page-aligned, as a
// worker's), feed its tokens at positions 0..n-1, and print its prefix line. The server
// never writes the reservation again: the workers forked from it append to it.
void
prefill_prefixes(struct server *sv)
{
  for(int g = 0; g < sv->npx; g++){
    struct prefix *p = &sv->px[g];
    struct memstat m0, m1;
    plan_kv(sv, p->max_len, &p->kl);
    if(kv_align_break() < 0)
      llm_die("out of memory aligning the KV reservations", "");
    memstat(&m0);
    uint64 t = clock_us();
    p->base = sbrk((int)p->kl.bytes);
    if(p->base == (char *)-1)
      llm_die("out of memory reserving the KV cache of a shared prefix", "");
    kv_place(&p->kl, p->base, &sv->s.key_cache, &sv->s.value_cache);
    sv->s.seq_len = p->max_len;
    forward_block(&sv->mo, &sv->s, sv->rq[p->first].prompt, 0, p->n, 0);
    p->prefill_us = clock_us() - t;
    memstat(&m1);
    p->mapped_pages = (long)m1.mapped_pages - (long)m0.mapped_pages;
    printf("[smolserve] prefix id=P%d tokens=%d requests=%d max_len=%d reserved_kv_pages=%ld "
           "mapped_kv_pages=%ld prefill_ms=%lu\n", g, p->n, p->users, p->max_len,
           p->kl.max_pages, p->mapped_pages, p->prefill_us / 1000);
  }
}
