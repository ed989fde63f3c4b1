// --prompt-cache FILE (docs/smolprobe.md, "Prompt cache"): the K/V rows of a prompt saved
// in a file, so that a later prompt that begins the same way (every --chat begins with the
// chat template's system turn) feeds only what follows. As llama.cpp's --prompt-cache.
//
// The file: a header, the prompt's n token ids, then per layer the K rows 0..n-1 and the V
// rows 0..n-1 (n * kv_dim floats each), exactly as the KV cache holds them. Row p depends
// only on the model and tokens 0..p, so the rows of the longest common prefix of two
// prompts are the same bits whichever prompt computed them. A file of another model or
// geometry, or a short or corrupt one, is not used (and is replaced by this run's rows).
#include "user/smolprobe/smolprobe.h"

#define CACHE_MAGIC 0x31564b4e      // "NKV1"
#define ID_BYTES 65536              // bytes of the model file's start and end in its id
#define CACHE_MAX_TOKENS 4096       // the longest prompt a cache file holds

struct cache_header {
  uint magic;
  int n_layers, kv_dim;
  int n;                  // prompt tokens (rows per layer and K/V) in the file
  uint64 model_bytes;     // the model file's size
  uint model_hash;        // FNV-1a of its first and last ID_BYTES
};

// The model's identity in a cache file: its geometry, its size and a hash of the start of
// the file (the header, the type table, the tokenizer) and of its end (the last weights).
static void
model_id(const struct model *mo, struct cache_header *h)
{
  uint64 n = mo->file_bytes < ID_BYTES ? mo->file_bytes : ID_BYTES;
  memset(h, 0, sizeof(*h));
  h->magic = CACHE_MAGIC;
  h->n_layers = mo->c.n_layers;
  h->kv_dim = mo->c.kv_dim;
  h->model_bytes = mo->file_bytes;
  uint first = llm_fnv1a(LLM_FNV_BASIS, mo->file, n);
  h->model_hash = llm_fnv1a(first, mo->file + mo->file_bytes - n, n);
}

// Read exactly n bytes, or -1.
static int
read_all(int fd, void *p, uint64 n)
{
  for(uint64 done = 0; done < n; ){
    int chunk = n - done > (1 << 20) ? (1 << 20) : (int)(n - done);
    int k = read(fd, (char *)p + done, chunk);
    if(k <= 0)
      return -1;
    done += k;
  }
  return 0;
}

// Read and drop n bytes, or -1.
static int
skip(int fd, uint64 n)
{
  static char junk[4096];
  while(n > 0){
    int k = n > sizeof(junk) ? sizeof(junk) : (int)n;
    if(read_all(fd, junk, k) < 0)
      return -1;
    n -= k;
  }
  return 0;
}

// Fill K/V rows 0..L-1 of s from the cache file o->cache, L the longest prefix of the
// prompt's tokens it holds, at most P-1 (the last prompt position is fed: its logits pick
// the first token). Returns L; 0 when the file is missing or not this model's.
int
cache_load(const struct model *mo, struct state *s, struct options *o)
{
  struct cache_header want, h;
  static int ids[CACHE_MAX_TOKENS];
  int fd = open(o->cache, O_RDONLY);
  if(fd < 0)
    return 0;
  model_id(mo, &want);
  int n = 0;
  if(read_all(fd, &h, sizeof(h)) < 0 || h.n < 1 || h.n > CACHE_MAX_TOKENS){
    close(fd);
    return 0;
  }
  want.n = h.n;
  if(memcmp(&h, &want, sizeof(h)) != 0 || read_all(fd, ids, h.n * sizeof(int)) < 0){
    close(fd);
    return 0;
  }
  while(n < h.n && n < o->n_prompt - 1 && ids[n] == o->tokens[n])
    n++;
  uint64 row = (uint64)mo->c.kv_dim * sizeof(float);
  for(int l = 0; l < mo->c.n_layers && n > 0; l++)
    for(int kv = 0; kv < 2; kv++){
      float *base = (kv ? s->value_cache : s->key_cache) +
                    (uint64)l * s->seq_len * mo->c.kv_dim;
      if(read_all(fd, base, n * row) < 0 || skip(fd, (h.n - n) * row) < 0)
        n = 0;   // a short file: feed everything (the rows read are fed again)
    }
  close(fd);
  return n;
}

// Save the prompt's K/V rows (0..P-1) in the cache file o->cache. Returns the rows saved,
// 0 if the file could not be written (then it is removed: no half file is ever used).
int
cache_save(const struct model *mo, const struct state *s, const struct options *o)
{
  struct cache_header h;
  int n = o->n_prompt;
  if(n > CACHE_MAX_TOKENS || o->fed < n)
    return 0;
  model_id(mo, &h);
  h.n = n;
  unlink(o->cache);
  int fd = open(o->cache, O_CREATE | O_WRONLY);
  if(fd < 0)
    return 0;
  int ok = write(fd, &h, sizeof(h)) == sizeof(h) &&
           write(fd, o->tokens, n * sizeof(int)) == n * sizeof(int);
  uint64 bytes = (uint64)n * mo->c.kv_dim * sizeof(float);
  for(int l = 0; l < mo->c.n_layers && ok; l++)
    for(int kv = 0; kv < 2 && ok; kv++){
      const float *base = (kv ? s->value_cache : s->key_cache) +
                          (uint64)l * s->seq_len * mo->c.kv_dim;
      ok = write(fd, base, bytes) == bytes;
    }
  close(fd);
  if(!ok){
    unlink(o->cache);
    return 0;
  }
  return n;
}
