// One request of smolprobe: its KV reservation (one sbrk(), layout in user/llm/kv.h),
// the generation and --perplexity loops, and the page-accounting and output lines they
// end with (docs/smolprobe.md, "Output").
#include "user/smolprobe/smolprobe.h"

// Move the break to a page boundary, so that the reservation starts on one (its layout:
// user/llm/kv.h). Called before the first snapshot; the pad lies on an already-counted page.
void
align_break(void)
{
  if(kv_align_break() < 0)
    llm_die("out of memory aligning the KV reservation", "");
}

// The one sbrk() that reserves the whole KV cache (never written here: no memset).
void
reserve_cache(struct state *s, const struct kv_layout *kl)
{
  if(kl->bytes > 0x7ffff000UL)
    llm_die_num("KV cache too large for one sbrk: ", (long)kl->bytes, " bytes (lower --seq-len)");
  char *base = sbrk((int)kl->bytes);
  if(base == (char *)-1)
    llm_die_num("out of memory: sbrk of the KV cache (", (long)kl->bytes, " bytes) failed");
  kv_place(kl, base, &s->key_cache, &s->value_cache);
}

// Difference of two snapshots: mapped PTEs of this process, and physical pages in use.
long
mapped_delta(const struct memstat *a, const struct memstat *b)
{
  return (long)b->mapped_pages - (long)a->mapped_pages;
}

// Remember when the first token's logits were ready (timing first_token_ms): the first
// call counts.
void
note_first_token(struct options *o)
{
  if(o->first_us == 0)
    o->first_us = clock_us();
}

// This process's mapped pages that are not the page cache's (memstat's file_pages):
// anonymous memory, which an eager fork copies; the mapped model is shared in every
// configuration.
long
anon_pages(const struct memstat *m)
{
  return (long)m->mapped_pages - (long)m->file_pages;
}

long
used_delta(const struct memstat *a, const struct memstat *b)
{
  return ((long)b->total_pages - (long)b->free_pages) -
         ((long)a->total_pages - (long)a->free_pages);
}

// floor(a / b) for b > 0.
long
floor_div(long a, long b)
{
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The SUMMARY, phase and verdict lines from the three snapshots.
void
print_summary(const struct kv_layout *kl, long active, const struct memstat *before,
       const struct memstat *reserved, const struct memstat *done)
{
  long max = kl->max_pages;
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

// Feed positions [from, to): prompt tokens as given, then each sampled token at the next
// position. The logits of position pos >= P-1 pick token pos+1 (while pos+1 < P+G); the
// logits of the last position fed are left in s->logits. With trace, one line per
// position. With stop_eos a sampled eos ends the request unfed (a server would not feed
// it): o->generated and o->fed say how far it went.
void
feed(const struct model *mo, struct state *s, struct sampler *sp, struct options *o,
    int from, int to, const struct memstat *before)
{
  int P = o->n_prompt, total = o->n_prompt + o->gen_len;
  o->generated = o->gen_len;
  o->fed = to;
  for(int pos = from; pos < to; pos++){
    int stop = 0;
    if(pos < P - 1 && !o->trace){               // prompt positions: in blocks
      int n = (to < P ? to : P) - pos;
      forward_block(mo, s, o->tokens + pos, pos, n, n == P - pos);
      pos += n - 1;
    } else
      forward(mo, s, o->tokens[pos], pos, pos >= P - 1);
    if(pos == P - 1)
      note_first_token(o);
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
double
score_run(const struct model *mo, struct state *s, struct options *o)
{
  int n = o->n_prompt, b = s->block > 1 ? s->block : 1;
  double nll = 0.0;
  for(int pos = 0; pos < n; pos += b){
    int m = n - pos < b ? n - pos : b;
    if(b == 1)
      forward(mo, s, o->tokens[pos], pos, pos < n - 1);
    else
      forward_block(mo, s, o->tokens + pos, pos, m, 0);
    note_first_token(o);
    for(int k = 0; k < m && pos + k < n - 1; k++){
      if(b > 1)
        block_logits(mo, s, k);
      nll += token_nll(s->logits, mo->c.vocab_size, o->tokens[pos + k + 1]);
    }
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
void
print_perplexity(int n, double nll)
{
  char a[40], b[40];
  float ppl = expf((float)(nll / (n - 1)));
  printf("[smolprobe] perplexity tokens=%d nll=%s ppl=%s\n", n, fmt_micro(a, sizeof(a), nll),
         fmt_micro(b, sizeof(b), ppl));
}

// Write a line "<prefix>v,v,...\n" of n ints or floats (%.6f; nan, inf, -inf as such) in
// 4 KiB writes (one printf per value would be one write per value).
void
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

// n positions in us microseconds as "<per second>.<tenth>" (0.0 for none).
static void
print_rate(const char *key, uint64 n, uint64 us)
{
  uint64 r10 = n * 10000000UL / (us > 0 ? us : 1);
  printf(" %s=%lu.%lu", key, r10 / 10, r10 % 10);
}

// The timing line (docs/smolprobe.md, "Output"): load (t0..t1), the whole feed (t1..t2)
// and its two parts, the prompt's prefill up to the first token's logits (o->first_us)
// and the decode of the generated positions after it, and the harts that ran them.
void
print_timing(const struct options *o, uint64 t0, uint64 t1, uint64 t2)
{
  uint64 first = o->first_us ? o->first_us : t2;
  printf("[smolprobe] timing load_ms=%lu decode_ms=%lu", (t1 - t0) / 1000, (t2 - t1) / 1000);
  print_rate("tokens_per_s", o->fed, t2 - t1);
  printf(" first_token_ms=%lu prefill_ms=%lu", o->first_us ? (o->first_us - t0) / 1000 : 0,
         (first - t1) / 1000);
  print_rate("prefill_tokens_per_s", o->n_prompt, first - t1);
  print_rate("decode_tokens_per_s", o->fed - (o->fed < o->n_prompt ? o->fed : o->n_prompt),
             t2 - first);
  printf(" harts=%d\n", o->harts);
}
