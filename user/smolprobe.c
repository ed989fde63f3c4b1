// smolprobe: a SmolLM-135M-architecture transformer whose KV cache lives in one sbrk()
// reservation, run to show what lazy allocation does for an LLM server's KV memory.
//
// It loads a NexOS checkpoint (docs/checkpoint.md), allocates and touches everything the
// model needs except the KV cache, snapshots memstat(), reserves the whole KV cache for
// seq_len positions with one sbrk() (never memset), snapshots again, feeds the prompt and
// generates, snapshots a third time, and prints how many KV pages the kernel mapped in each
// phase against the reservation (docs/smolprobe.md, "Output").
//
// The file reads top to bottom: the model (config, weights, loader), the neural-net
// blocks, forward(), the sampler, the KV reservation and page accounting, the generation
// loop, the command line.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/memstat.h"
#include "user/user.h"

// The numerics must round exactly like the numpy reference (nexos.model.reference):
// a*b+c is a multiply rounded to float then an add, never a fused multiply-add.
#pragma GCC optimize("fp-contract=off")

#define PGSIZE 4096
#define HEADER_SIZE 256
#define FORMAT_VERSION 1
#define WEIGHT_F32 0
#define WEIGHT_INT8 1
#define DEFAULT_SEQ_LEN 256
#define DEFAULT_MODEL "/model.bin"
#define MAX_DIM (1 << 24)         // bound on every header size (keeps products in range)
#define READ_CHUNK (1 << 20)      // bytes per read() while loading the checkpoint

// ============================================================================ the model

// The checkpoint header (docs/checkpoint.md), plus derived sizes.
struct config {
  int dim;          // model width (576)
  int hidden_dim;   // SwiGLU inner width (1536)
  int n_layers;     // 30
  int n_heads;      // query heads (9)
  int n_kv_heads;   // key/value heads (3): query head h uses kv head h / (n_heads/n_kv_heads)
  int vocab_size;   // 49152
  int max_seq_len;  // longest context the model supports (2048)
  int weight_type;  // WEIGHT_F32 or WEIGHT_INT8
  int group_size;   // int8: values per scale (64)
  int tied;         // 1: the classifier is the token embedding
  float rope_theta; // 10000
  float norm_eps;   // 1e-5
  int head_dim;     // dim / n_heads (64)
  int kv_dim;       // n_kv_heads * head_dim (192)
};

// A weight matrix [rows][cols] (y = W x), a view into the loaded file.
// float32 checkpoints: f holds the values. int8 checkpoints: q holds the quantized values
// *biased by +128* (the loader flips bit 7 of every byte, so q = w + 128 in 1..255; see
// matvec_q8 for why) and s one float32 scale per group of group_size values along a row.
struct matrix {
  int rows, cols;
  float *f;
  uchar *q;
  float *s;
};

// All weights; every pointer points into the one buffer holding the checkpoint file.
struct weights {
  float *rms_att;            // [n_layers][dim]
  float *rms_ffn;            // [n_layers][dim]
  float *rms_final;          // [dim]
  struct matrix embedding;   // [vocab][dim]
  struct matrix *wq;         // [n_layers] of [n_heads*head_dim][dim]
  struct matrix *wk;         // [n_layers] of [kv_dim][dim]
  struct matrix *wv;         // [n_layers] of [kv_dim][dim]
  struct matrix *wo;         // [n_layers] of [dim][n_heads*head_dim]
  struct matrix *w_gate;     // [n_layers] of [hidden][dim]
  struct matrix *w_down;     // [n_layers] of [dim][hidden]
  struct matrix *w_up;       // [n_layers] of [hidden][dim]
  struct matrix classifier;  // [vocab][dim]; the embedding when tied
};

// Activations and the KV cache. Everything but the KV cache is allocated and touched by
// alloc_state() before the first memstat snapshot; the KV cache is the sbrk reservation.
struct state {
  float *x;          // [dim] the residual stream
  float *xb;         // [dim] normalised input / attention output
  float *xb2;        // [dim] a sub-layer's output before the residual add
  float *hb;         // [hidden] gate, then silu(gate) * up
  float *hb2;        // [hidden] up
  float *q;          // [dim] the query
  float *att;        // [n_heads][seq_len] attention weights
  float *logits;     // [vocab]
  // the prepared input of matvec (prepare_input): int8 path
  signed char *xq;   // [max(dim, hidden)] quantized input
  float *xs;         // [groups] their scales
  int *xsum;         // [groups] sum of xq over each group
  uint64 *xp;        // [max/2] xq in packed pairs (see matvec_q8)
  const float *xf;   // the input itself: float32 path
  float *rope_cos;   // [seq_len][head_dim/2] cos(pos * freq_i)
  float *rope_sin;   // [seq_len][head_dim/2]
  float *key_cache;  // [n_layers][seq_len][kv_dim], in the sbrk reservation
  float *value_cache;// [n_layers][seq_len][kv_dim], right after the keys
  int seq_len;
  // What forward() and the sampler write besides the KV cache (every buffer above but the
  // RoPE tables), recorded by alloc_state(): a --samples branch pre-touches these pages.
  struct range { const void *p; uint64 len; } scratch[16];
  int nscratch;
};

struct model {
  struct config c;
  struct weights w;
  uchar *file;       // the whole checkpoint
};

// Print "[smolprobe] error: <a><b>" and exit with status 1.
static void
die(const char *a, const char *b)
{
  fprintf(2, "[smolprobe] error: %s%s\n", a, b);
  exit(1);
}

// Print "[smolprobe] error: <a><n><b>" and exit with status 1.
static void
die_num(const char *a, long n, const char *b)
{
  fprintf(2, "[smolprobe] error: %s%ld%s\n", a, n, b);
  exit(1);
}

// malloc(n) or die: the out-of-memory error is a message, never a fault.
static void *
xmalloc(uint64 n, const char *what)
{
  void *p = n < 0x7fff0000UL ? malloc((uint)n) : 0;
  if(p == 0){
    fprintf(2, "[smolprobe] error: out of memory allocating %s (%lu bytes)\n", what, n);
    exit(1);
  }
  return p;
}

// Little-endian fields of the header.
static uint32
get_u32(const uchar *p)
{
  return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32)p[3] << 24);
}

static float
get_f32(const uchar *p)
{
  union { uint32 u; float f; } v;
  v.u = get_u32(p);
  return v.f;
}

// Bytes of one weight block of rows x cols values.
static uint64
block_bytes(const struct config *c, int rows, int cols)
{
  uint64 n = (uint64)rows * cols;
  if(c->weight_type == WEIGHT_F32)
    return 4 * n;
  return n + 4 * (n / c->group_size);
}

// Bytes of the whole file that the header c implies: header, norms, blocks in file order.
static uint64
checkpoint_bytes(const struct config *c)
{
  uint64 d = c->dim, h = c->hidden_dim, qd = (uint64)c->n_heads * c->head_dim;
  uint64 n = HEADER_SIZE + 4 * (2 * c->n_layers * d + d);
  n += block_bytes(c, c->vocab_size, c->dim);
  n += c->n_layers * (block_bytes(c, qd, d) + 2 * block_bytes(c, c->kv_dim, d) +
                      block_bytes(c, d, qd) + 2 * block_bytes(c, h, d) +
                      block_bytes(c, d, h));
  if(!c->tied)
    n += block_bytes(c, c->vocab_size, c->dim);
  return n;
}

// Fill c from the 256-byte header h; dies with the reason unless it is a checkpoint this
// program can run (the checks of docs/checkpoint.md).
static void
parse_header(const uchar *h, struct config *c)
{
  if(memcmp(h, "NEXOSLM\0", 8) != 0)
    die("model: bad magic (not a NexOS checkpoint)", "");
  uint32 version = get_u32(h + 8);
  if(version != FORMAT_VERSION)
    die_num("model: unsupported format version ", version, " (this smolprobe reads 1)");
  int *fields[] = { &c->dim, &c->hidden_dim, &c->n_layers, &c->n_heads, &c->n_kv_heads,
                    &c->vocab_size, &c->max_seq_len };
  const char *names[] = { "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                          "vocab_size", "max_seq_len" };
  for(int i = 0; i < 7; i++){
    uint32 v = get_u32(h + 12 + 4 * i);
    if(v == 0 || v >= MAX_DIM){
      fprintf(2, "[smolprobe] error: model: config %s = %u is out of range\n", names[i], v);
      exit(1);
    }
    *fields[i] = (int)v;
  }
  uint32 wtype = get_u32(h + 40), group = get_u32(h + 44), tied = get_u32(h + 48);
  c->rope_theta = get_f32(h + 52);
  c->norm_eps = get_f32(h + 56);
  if(c->dim % c->n_heads)
    die("model: corrupt config: dim is not a multiple of n_heads", "");
  if(c->n_heads % c->n_kv_heads)
    die("model: corrupt config: n_heads is not a multiple of n_kv_heads", "");
  c->head_dim = c->dim / c->n_heads;
  c->kv_dim = c->n_kv_heads * c->head_dim;
  if(c->head_dim % 2)
    die("model: corrupt config: head_dim is odd (RoPE rotates pairs)", "");
  if(wtype != WEIGHT_F32 && wtype != WEIGHT_INT8)
    die_num("model: unknown weight_type ", wtype, " (0 = float32, 1 = int8)");
  if(tied > 1)
    die_num("model: corrupt config: tied_embeddings = ", tied, " (must be 0 or 1)");
  c->weight_type = wtype;
  c->tied = tied;
  c->group_size = wtype == WEIGHT_INT8 ? (int)group : 0;
  if(wtype == WEIGHT_INT8 &&
     (group == 0 || group >= MAX_DIM || c->dim % group || c->hidden_dim % group))
    die_num("model: int8 group_size ", group, " does not divide dim and hidden_dim");
  if(!(c->rope_theta > 0.0f && c->rope_theta < 1e30f))
    die("model: corrupt config: rope_theta must be a positive number", "");
  if(!(c->norm_eps >= 0.0f && c->norm_eps < 1.0f))
    die("model: corrupt config: norm_eps must be in [0, 1)", "");
}

// Flip bit 7 of n int8 weights in place: w (-127..127) becomes w + 128 (1..255).
static void
bias_int8(uchar *q, uint64 n)
{
  uint64 i = 0;
  if(((uint64)q & 7) == 0)
    for(; i + 8 <= n; i += 8)
      *(uint64 *)(q + i) ^= 0x8080808080808080UL;
  for(; i < n; i++)
    q[i] ^= 0x80;
}

// Make *m a view of the weight block of rows x cols at *p, and advance *p past it.
static void
take_block(struct model *mo, uchar **p, struct matrix *m, int rows, int cols)
{
  uint64 n = (uint64)rows * cols;
  m->rows = rows;
  m->cols = cols;
  m->f = 0;
  m->q = 0;
  m->s = 0;
  if(mo->c.weight_type == WEIGHT_F32){
    m->f = (float *)*p;
  } else {
    m->q = *p;
    m->s = (float *)(*p + n);
    bias_int8(m->q, n);
  }
  *p += block_bytes(&mo->c, rows, cols);
}

// Point every weight of mo into mo->file, in the file order of docs/checkpoint.md.
static void
map_weights(struct model *mo)
{
  struct config *c = &mo->c;
  struct weights *w = &mo->w;
  int L = c->n_layers, d = c->dim, h = c->hidden_dim, qd = c->n_heads * c->head_dim;
  uchar *p = mo->file + HEADER_SIZE;

  w->rms_att = (float *)p;
  p += 4UL * L * d;
  w->rms_ffn = (float *)p;
  p += 4UL * L * d;
  w->rms_final = (float *)p;
  p += 4UL * d;
  take_block(mo, &p, &w->embedding, c->vocab_size, d);

  struct matrix *all = xmalloc(7UL * L * sizeof(struct matrix), "weight table");
  struct matrix **lists[7] = { &w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_down,
                               &w->w_up };
  int rows[7] = { qd, c->kv_dim, c->kv_dim, d, h, d, h };
  int cols[7] = { d, d, d, qd, d, h, d };
  for(int k = 0; k < 7; k++){
    *lists[k] = all + k * L;
    for(int l = 0; l < L; l++)
      take_block(mo, &p, &(*lists[k])[l], rows[k], cols[k]);
  }
  if(c->tied)
    w->classifier = w->embedding;
  else
    take_block(mo, &p, &w->classifier, c->vocab_size, d);
}

// Load the checkpoint at path into one buffer (read, so every page is written) and map
// the weights; dies with a clear message for a missing, truncated or corrupt file.
static void
load_model(const char *path, struct model *mo)
{
  uchar header[HEADER_SIZE];
  struct stat st;
  int fd = open(path, O_RDONLY);
  if(fd < 0)
    die("cannot open model ", path);
  if(fstat(fd, &st) < 0 || st.type != T_FILE)
    die("model is not a regular file: ", path);
  if(st.size < HEADER_SIZE)
    die_num("model: file too short for the header (", (long)st.size, " bytes, need 256)");
  if(read(fd, header, HEADER_SIZE) != HEADER_SIZE)
    die("model: cannot read the header of ", path);
  parse_header(header, &mo->c);
  uint64 want = checkpoint_bytes(&mo->c);
  if(st.size != want){
    fprintf(2, "[smolprobe] error: model: file is %lu bytes but its header implies %lu (%s)\n",
            st.size, want, st.size < want ? "truncated" : "has extra bytes");
    exit(1);
  }
  mo->file = xmalloc(want, "the model");
  memcpy(mo->file, header, HEADER_SIZE);
  for(uint64 off = HEADER_SIZE; off < want; ){
    int n = want - off < READ_CHUNK ? (int)(want - off) : READ_CHUNK;
    int got = read(fd, mo->file + off, n);
    if(got <= 0)
      die("model: read failed before the end of ", path);
    off += got;
  }
  close(fd);
  map_weights(mo);
}

// ============================================================================ neural-net blocks

// o = w * (x / sqrt(mean(x^2) + eps)), elementwise over n values (o may be x).
static void
rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
  float ss = 0.0f;
  for(int i = 0; i < n; i++)
    ss += x[i] * x[i];
  ss = ss / (float)n + eps;
  float inv = 1.0f / sqrtf(ss);
  for(int i = 0; i < n; i++)
    o[i] = w[i] * (x[i] * inv);
}

// In place: x = exp(x - max) / sum, the sum taken left to right.
static void
softmax(float *x, int n)
{
  float max = x[0];
  for(int i = 1; i < n; i++)
    if(x[i] > max)
      max = x[i];
  float sum = 0.0f;
  for(int i = 0; i < n; i++){
    x[i] = expf(x[i] - max);
    sum += x[i];
  }
  for(int i = 0; i < n; i++)
    x[i] = x[i] / sum;
}

// round(x) with halves away from zero, for |x| < 2^31 (C's roundf, exact). On RISC-V one
// fcvt.w.s with the RMM rounding mode ("round to nearest, ties to max magnitude") is
// exactly that; elsewhere (the host build) the same result in portable C.
static inline int
round_half_away(float x)
{
#ifdef __riscv
  int t;
  asm("fcvt.w.s %0, %1, rmm" : "=r"(t) : "f"(x));
  return t;
#else
  int t = (int)x;               // truncates toward zero
  float frac = x - (float)t;    // exact
  if(frac >= 0.5f)
    t++;
  else if(frac <= -0.5f)
    t--;
  return t;
#endif
}

// max |x[i]| over n floats, ignoring NaNs, by integer compares: for non-NaN floats the
// order of |x| is the order of the bit patterns with the sign bit cleared.
static float
abs_max(const float *x, int n)
{
  const uint32 *b = (const uint32 *)x;
  uint32 m = 0;
  for(int i = 0; i < n; i++){
    uint32 a = b[i] & 0x7fffffffU;
    if(a > m && a <= 0x7f800000U)
      m = a;
  }
  union { uint32 u; float f; } v;
  v.u = m;
  return v.f;
}

// Make x[0..n) the input of the following matvec() calls. For int8 models quantize it
// group by group with the weights' rule (scale max|x|/127, q = round(x/scale) clamped to
// +-127), sum each group's q and pack the q's in pairs for matvec_q8. x must stay alive.
static void
prepare_input(struct state *s, const struct config *c, const float *x, int n)
{
  s->xf = x;
  if(c->weight_type != WEIGHT_INT8)
    return;
  int gs = c->group_size;
  for(int g = 0; g < n / gs; g++){
    const float *xg = x + g * gs;
    signed char *qg = s->xq + g * gs;
    float scale = abs_max(xg, gs) / 127.0f;
    int sum = 0;
    for(int i = 0; i < gs; i++){
      int q = 0;
      if(scale != 0.0f){
        q = round_half_away(xg[i] / scale);
        q = q > 127 ? 127 : q < -127 ? -127 : q;
      }
      qg[i] = (signed char)q;
      sum += q;
    }
    s->xs[g] = scale;
    s->xsum[g] = sum;
  }
  // Pair k of each 8 values (k = 0..3) packs x[k+4] in the low half, x[k] in the high.
  for(int j = 0; j < n / 8; j++){
    const signed char *x8 = s->xq + 8 * j;
    for(int k = 0; k < 4; k++)
      s->xp[4 * j + k] = (uint64)(long)x8[k + 4] + ((uint64)(long)x8[k] << 32);
  }
}

// out[r] = W[r] . x for a float32 matrix (4 partial sums; order differs from numpy's BLAS
// by rounding only).
static void
matvec_f32(const struct matrix *m, const float *x, float *out)
{
  for(int r = 0; r < m->rows; r++){
    const float *w = m->f + (uint64)r * m->cols;
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int i = 0;
    for(; i + 4 <= m->cols; i += 4){
      a0 += w[i] * x[i];
      a1 += w[i + 1] * x[i + 1];
      a2 += w[i + 2] * x[i + 2];
      a3 += w[i + 3] * x[i + 3];
    }
    for(; i < m->cols; i++)
      a0 += w[i] * x[i];
    out[r] = (a0 + a1) + (a2 + a3);
  }
}

// The int8 product of one group, the plain way: sum of (q - 128) * x.
static int
group_dot_plain(const uchar *q, const signed char *x, int n)
{
  int sum = 0;
  for(int i = 0; i < n; i++)
    sum += ((int)q[i] - 128) * x[i];
  return sum;
}

// Two int8 products per multiply. Eight biased weights u0..u7 load as one 64-bit word;
// masking with M keeps bytes k and k+4 as two 32-bit lanes: P = u_k + u_{k+4} 2^32.
// The input pair was packed as X = x_{k+4} + x_k 2^32, so modulo 2^64
//   P * X = u_k x_{k+4}  +  (u_k x_k + u_{k+4} x_{k+4}) 2^32,
// the wanted dot product in the high lane. Summing over a group keeps the low lane below
// 2^31 in magnitude (at most 2048 terms of 255*127 for groups up to 4096 values), so the
// low 32 bits, sign-extended, are exactly the low sum and the high 32 bits after removing
// them are the dot product of the biased weights; subtracting 128 * sum(x) un-biases it.
// This is why the loader biases the weights: masked bytes are unsigned.
#define LANES 0x000000FF000000FFUL

// The dot product of one group from its accumulated lanes t (see above): the high lane
// minus the low lane's borrow, un-biased by 128 * sum(x).
static inline int
unpack_lanes(uint64 t, int xsum)
{
  int low = (int)(uint32)t;
  int high = (int)(uint32)((t - (uint64)(long)low) >> 32);
  return high - 128 * xsum;
}

// The lanes of 8 biased weights a (one 64-bit word) times the 4 packed input pairs p.
static inline __attribute__((always_inline)) uint64
word_lanes(uint64 a, const uint64 *p)
{
  return (a & LANES) * p[0] + ((a >> 8) & LANES) * p[1] +
         ((a >> 16) & LANES) * p[2] + ((a >> 24) & LANES) * p[3];
}

// out[r] = W[r] . x for an int8 matrix with the input prepared by prepare_input.
// Per group g: isum exact in int32, then acc += (float)isum * (sw * sx), groups in order.
// Two rows at a time share the loads of the packed input (four rows measured slower
// under TCG); the odd last row, or every row when the weights are not 8-aligned, takes
// the plain loop: the same integers.
static void
matvec_q8(const struct matrix *m, const struct state *s, int gs, float *out)
{
  int cols = m->cols, ng = cols / gs, words = gs / 8;
  int fast = gs % 8 == 0 && gs <= 4096 && ((uint64)m->q & 7) == 0 && cols % 8 == 0;
  int r = 0;
  if(fast){
    for(; r + 2 <= m->rows; r += 2){
      const uint64 *w0 = (const uint64 *)(m->q + (uint64)r * cols), *w1 = w0 + cols / 8;
      const float *s0 = m->s + (uint64)r * ng, *s1 = s0 + ng;
      const uint64 *xp = s->xp;
      float acc0 = 0.0f, acc1 = 0.0f;
      for(int g = 0; g < ng; g++){
        uint64 t0 = 0, t1 = 0;
        for(int j = 0; j < words; j++, xp += 4){
          t0 += word_lanes(w0[j], xp);
          t1 += word_lanes(w1[j], xp);
        }
        w0 += words;
        w1 += words;
        float sx = s->xs[g];
        acc0 += (float)unpack_lanes(t0, s->xsum[g]) * (s0[g] * sx);
        acc1 += (float)unpack_lanes(t1, s->xsum[g]) * (s1[g] * sx);
      }
      out[r] = acc0;
      out[r + 1] = acc1;
    }
  }
  for(; r < m->rows; r++){
    const uchar *q = m->q + (uint64)r * cols;
    const float *sr = m->s + (uint64)r * ng;
    float acc = 0.0f;
    for(int g = 0; g < ng; g++){
      int isum = group_dot_plain(q + g * gs, s->xq + g * gs, gs);
      acc += (float)isum * (sr[g] * s->xs[g]);
    }
    out[r] = acc;
  }
}

// out = W x for the input of the last prepare_input().
static void
matvec(const struct model *mo, const struct matrix *m, const struct state *s, float *out)
{
  if(mo->c.weight_type == WEIGHT_INT8)
    matvec_q8(m, s, mo->c.group_size, out);
  else
    matvec_f32(m, s->xf, out);
}

// x = row `token` of the embedding (dequantized: q * s rounded to float).
static void
embed(const struct model *mo, int token, float *x)
{
  const struct matrix *e = &mo->w.embedding;
  int d = e->cols;
  if(e->f){
    memcpy(x, e->f + (uint64)token * d, d * sizeof(float));
    return;
  }
  int gs = mo->c.group_size;
  const uchar *q = e->q + (uint64)token * d;
  const float *sc = e->s + (uint64)token * (d / gs);
  for(int i = 0; i < d; i++)
    x[i] = (float)((int)q[i] - 128) * sc[i / gs];
}

// Rotate each head of v (n_heads heads of head_dim) by position pos, Hugging Face's
// half rotation: (a, b) = (h[i], h[i+half]) -> (a cos - b sin, b cos + a sin).
static void
rope(const struct state *s, int head_dim, float *v, int n_heads, int pos)
{
  int half = head_dim / 2;
  const float *cs = s->rope_cos + pos * half, *sn = s->rope_sin + pos * half;
  for(int h = 0; h < n_heads; h++){
    float *hv = v + h * head_dim;
    for(int i = 0; i < half; i++){
      float a = hv[i], b = hv[i + half];
      hv[i] = a * cs[i] - b * sn[i];
      hv[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

// The cos/sin tables for positions 0..seq_len-1: freq_i = theta^(-2i/head_dim) and angle
// pos * freq_i, all in float32 as the reference computes them.
static void
rope_tables(const struct config *c, struct state *s)
{
  int half = c->head_dim / 2;
  for(int i = 0; i < half; i++){
    float freq = powf(c->rope_theta, -((float)i * 2.0f) / (float)c->head_dim);
    for(int pos = 0; pos < s->seq_len; pos++){
      float angle = (float)pos * freq;
      s->rope_cos[pos * half + i] = cosf(angle);
      s->rope_sin[pos * half + i] = sinf(angle);
    }
  }
}

// ============================================================================ forward

// Grouped-query attention of layer l at position pos: s->q (roped queries) against cache
// rows 0..pos; the result [n_heads*head_dim] goes to s->xb.
static void
attention(const struct config *c, struct state *s, int l, int pos)
{
  int hd = c->head_dim, per_kv = c->n_heads / c->n_kv_heads;
  float scale = sqrtf((float)hd);
  uint64 layer = (uint64)l * s->seq_len * c->kv_dim;
  for(int h = 0; h < c->n_heads; h++){
    const float *q = s->q + h * hd;
    float *att = s->att + h * s->seq_len;
    int kvo = (h / per_kv) * hd;              // this head's slice of a cache row
    for(int t = 0; t <= pos; t++){
      const float *k = s->key_cache + layer + (uint64)t * c->kv_dim + kvo;
      float dot = 0.0f;
      for(int i = 0; i < hd; i++)
        dot += q[i] * k[i];
      att[t] = dot / scale;
    }
    softmax(att, pos + 1);
    float *o = s->xb + h * hd;
    for(int i = 0; i < hd; i++)
      o[i] = 0.0f;
    for(int t = 0; t <= pos; t++){
      const float *v = s->value_cache + layer + (uint64)t * c->kv_dim + kvo;
      float a = att[t];
      for(int i = 0; i < hd; i++)
        o[i] += a * v[i];
    }
  }
}

// Feed token at position pos: writes K/V cache row pos of every layer; when want_logits,
// leaves the next-token logits [vocab] in s->logits.
static void
forward(const struct model *mo, struct state *s, int token, int pos, int want_logits)
{
  const struct config *c = &mo->c;
  const struct weights *w = &mo->w;
  int d = c->dim, kvd = c->kv_dim;

  embed(mo, token, s->x);                                 // x [dim]
  for(int l = 0; l < c->n_layers; l++){
    uint64 row = ((uint64)l * s->seq_len + pos) * kvd;
    float *k = s->key_cache + row, *v = s->value_cache + row;

    // attention: xb = rmsnorm(x); q,k,v = W xb; rope(q,k); x += wo . attend(q, K, V)
    rmsnorm(s->xb, s->x, w->rms_att + l * d, d, c->norm_eps);
    prepare_input(s, c, s->xb, d);
    matvec(mo, &w->wq[l], s, s->q);                        // q [n_heads*head_dim]
    matvec(mo, &w->wk[l], s, k);                           // k [kv_dim] -> cache row pos
    matvec(mo, &w->wv[l], s, v);                           // v [kv_dim] -> cache row pos
    rope(s, c->head_dim, s->q, c->n_heads, pos);
    rope(s, c->head_dim, k, c->n_kv_heads, pos);
    attention(c, s, l, pos);                               // xb [n_heads*head_dim]
    prepare_input(s, c, s->xb, d);
    matvec(mo, &w->wo[l], s, s->xb2);                      // xb2 [dim]
    for(int i = 0; i < d; i++)
      s->x[i] += s->xb2[i];

    // feed-forward: x += w_down . (silu(w_gate . xb) * (w_up . xb)), xb = rmsnorm(x)
    rmsnorm(s->xb, s->x, w->rms_ffn + l * d, d, c->norm_eps);
    prepare_input(s, c, s->xb, d);
    matvec(mo, &w->w_gate[l], s, s->hb);                   // hb [hidden]
    matvec(mo, &w->w_up[l], s, s->hb2);                    // hb2 [hidden]
    for(int i = 0; i < c->hidden_dim; i++){
      float g = s->hb[i];
      s->hb[i] = (g / (1.0f + expf(-g))) * s->hb2[i];
    }
    prepare_input(s, c, s->hb, c->hidden_dim);
    matvec(mo, &w->w_down[l], s, s->xb2);                  // xb2 [dim]
    for(int i = 0; i < d; i++)
      s->x[i] += s->xb2[i];
  }
  if(!want_logits)
    return;
  rmsnorm(s->xb, s->x, w->rms_final, d, c->norm_eps);
  prepare_input(s, c, s->xb, d);
  matvec(mo, &w->classifier, s, s->logits);               // logits [vocab]
}

// ============================================================================ the sampler

// Greedy decoding, or temperature sampling with a seeded xorshift64* coin
// (docs/checkpoint.md "Sampling"); identical to nexos.model.sampler.
struct sampler {
  float temperature;   // 0: arg-max
  uint64 state;        // xorshift64* state, never 0
  float *probs;        // [vocab] scratch, allocated and touched before the snapshots
  int vocab;
};

static void
sampler_init(struct sampler *sp, float temperature, uint64 seed, float *probs, int vocab)
{
  sp->temperature = temperature;
  sp->state = seed ? seed : 0x9E3779B97F4A7C15UL;
  sp->probs = probs;
  sp->vocab = vocab;
}

// A coin in [0, 1) with 24 random bits.
static float
sampler_coin(struct sampler *sp)
{
  uint64 x = sp->state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  sp->state = x;
  uint32 u = (uint32)((x * 0x2545F4914F6CDD1DUL) >> 32);
  return (float)(u >> 8) / 16777216.0f;
}

// The index of the largest value (the lowest index on a tie).
static int
argmax(const float *v, int n)
{
  int best = 0;
  for(int i = 1; i < n; i++)
    if(v[i] > v[best])
      best = i;
  return best;
}

// The next token from logits (which are left unchanged).
static int
sample(struct sampler *sp, const float *logits)
{
  int n = sp->vocab;
  if(sp->temperature <= 0.0f)
    return argmax(logits, n);
  float *p = sp->probs;
  for(int i = 0; i < n; i++)
    p[i] = logits[i] / sp->temperature;
  softmax(p, n);
  float coin = sampler_coin(sp), cdf = 0.0f;
  for(int i = 0; i < n; i++){
    cdf += p[i];
    if(cdf > coin)
      return i;
  }
  return n - 1;
}

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
    die("out of memory aligning the KV reservation", "");
}

// The one sbrk() that reserves the whole KV cache (never written here: no memset).
static void
kv_reserve(struct state *s, const struct config *c, const struct kv_plan *kp)
{
  if(kp->bytes > 0x7ffff000UL)
    die_num("KV cache too large for one sbrk: ", (long)kp->bytes, " bytes (lower --seq-len)");
  char *base = sbrk((int)kp->bytes);
  if(base == (char *)-1)
    die_num("out of memory: sbrk of the KV cache (", (long)kp->bytes, " bytes) failed");
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
  int kill_branch;      // --test-kill-branch K: branch K kills itself (K+1; 0: none)
};

// Allocate and touch everything forward() and the sampler use, except the KV cache.
static void
alloc_state(const struct config *c, struct state *s, float **probs)
{
  int big = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
  int half = c->head_dim / 2, gs = c->group_size ? c->group_size : 1;
  uint64 fl = sizeof(float);
  uint64 bytes[] = { c->dim * fl, c->dim * fl, c->dim * fl, c->hidden_dim * fl,
                     c->hidden_dim * fl, c->dim * fl, (uint64)c->n_heads * s->seq_len * fl,
                     c->vocab_size * fl, c->vocab_size * fl, (uint64)big, big / gs * fl,
                     big / gs * sizeof(int), big / 2 * sizeof(uint64) + 8,
                     (uint64)s->seq_len * half * fl, (uint64)s->seq_len * half * fl };
  void **ptrs[] = { (void **)&s->x, (void **)&s->xb, (void **)&s->xb2, (void **)&s->hb,
                    (void **)&s->hb2, (void **)&s->q, (void **)&s->att, (void **)&s->logits,
                    (void **)probs, (void **)&s->xq, (void **)&s->xs, (void **)&s->xsum,
                    (void **)&s->xp, (void **)&s->rope_cos, (void **)&s->rope_sin };
  for(int i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++){
    *ptrs[i] = xmalloc(bytes[i], "activations");
    memset(*ptrs[i], 0, bytes[i]);             // touch: map the pages now
    if(ptrs[i] != (void **)&s->rope_cos && ptrs[i] != (void **)&s->rope_sin){
      s->scratch[s->nscratch].p = *ptrs[i];    // written again at every step
      s->scratch[s->nscratch++].len = bytes[i];
    }
  }
  rope_tables(c, s);
}

// Feed positions [from, to): prompt tokens as given, then each sampled token at the next
// position. The logits of position pos >= P-1 pick token pos+1 (while pos+1 < P+G); the
// logits of the last position are left in s->logits. With trace, one line per position.
static void
run(const struct model *mo, struct state *s, struct sampler *sp, struct options *o,
    int from, int to, const struct memstat *before)
{
  int P = o->n_prompt, total = o->n_prompt + o->gen_len;
  for(int pos = from; pos < to; pos++){
    forward(mo, s, o->tokens[pos], pos, pos >= P - 1);
    if(pos >= P - 1 && pos + 1 < total)
      o->tokens[pos + 1] = sample(sp, s->logits);
    if(o->trace){
      struct memstat now;
      memstat(&now);
      printf("[smolprobe] trace step=%d pos=%d kv_mapped_pages=%ld\n", pos - from, pos,
             mapped_delta(before, &now));
    }
  }
}

// Write a line "<prefix>v,v,...\n" of n ints or floats (%.6f; nan, inf, -inf as such) in
// 4 KiB writes (one printf per value would be one write per value).
static void
print_list(const char *prefix, const int *iv, const float *fv, int n)
{
  char *buf = xmalloc(4096 + 64, "output buffer");
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
  pa->rep = xmalloc(rb, "branch reports");
  pa->tokens = xmalloc(tb, "branch tokens");
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
  char *list = xmalloc(12UL * n + 16, "output buffer");
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
    die("pipe failed (too many open files?)", "");
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
//    unrolled 8x) and the packed one (matvec_q8's inner step: two MACs per 64-bit
//    multiply, 2 rows sharing each input load);
//  - matvec: matvec_q8 itself over real weights of the model (w_gate of layer 0, 20
//    times, and the classifier once), input prepared once (prepare_input not timed).
// A MAC is one int8 weight times one int8 input added to an int32 sum.

#define BENCH_ROUNDS 3
#define BENCH_COLS 512              // peak kernels: 4 rows x 512 columns, L1-resident
#define BENCH_PEAK_REPS 12000       // 4 * 512 * 12000 = 24.6 M MACs per measurement
#define BENCH_GATE_REPS 20

// The plain peak kernel: reps x sum over 4 rows of w[r][i] * x[i] (n a multiple of 8).
static __attribute__((noinline)) int
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
// row) with the packed input xp, matvec_q8's inner step (two rows sharing each input
// load) without groups or scales.
static __attribute__((noinline)) int
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
  uint64 best[4];       // microseconds: plain, packed, w_gate x reps, classifier
};

static void
bench_inputs(struct bench *b)
{
  uint64 st = 0x2545F4914F6CDD1DUL;
  b->w = xmalloc(4 * BENCH_COLS, "bench");
  b->x = xmalloc(BENCH_COLS, "bench");
  b->wb = xmalloc(4 * BENCH_COLS + 8, "bench");
  b->xp = xmalloc(BENCH_COLS / 2 * sizeof(uint64), "bench");
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
    die("bench: the packed kernel disagrees with the plain one", "");
}

// One round: time each of the four measurements once, keep the best of each.
static void
bench_round(const struct model *mo, struct state *s, struct bench *b, int round)
{
  const struct matrix *gate = &mo->w.w_gate[0], *cls = &mo->w.classifier;
  uint64 t[4];
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
  for(int i = 0; i < 4; i++)
    if(round == 0 || t[i] < b->best[i])
      b->best[i] = t[i];
}

// smolprobe --bench: the two lines described above (int8 models only).
static void
run_bench(const struct model *mo, struct state *s)
{
  static struct bench b;
  const struct config *c = &mo->c;
  if(c->weight_type != WEIGHT_INT8)
    die("--bench measures the int8 matvec: the model is float32", "");
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
}

// ============================================================================ the CLI

static void
usage(void)
{
  printf("usage: smolprobe --prompt-tokens a,b,c --gen-len N [--seq-len N] [--model PATH]\n"
         "                 [--temperature T] [--seed S] [--print-tokens] [--print-logits]\n"
         "                 [--trace] [--samples N] [--bench] [--help]\n"
         "Runs a SmolLM-135M-architecture transformer (default model %s) over a KV cache\n"
         "reserved with one sbrk() for --seq-len positions (default 256), and reports how\n"
         "many KV pages the kernel mapped while reserving and while decoding.\n"
         "The default weights are SYNTHETIC (seeded random numbers, `nexos model synth`):\n"
         "the tokens are meaningless, but the memory behaviour is exactly SmolLM-135M's.\n"
         "Real weights: `nexos model import` a Hugging Face SmolLM model, then --model.\n"
         "  --prompt-tokens  comma-separated token ids fed first (at least one)\n"
         "  --gen-len        tokens to generate (>= 0); every prompt and generated token is\n"
         "                   fed, so the run writes prompt+gen K/V rows\n"
         "  --temperature    0 (default) = greedy; > 0 samples with --seed (default 0)\n"
         "  --print-tokens   print the generated ids; --print-logits the final logits\n"
         "  --trace          one line per fed position with the KV pages mapped so far\n"
         "  --samples N      prefill once, fork N branches (1..6) that each sample their\n"
         "                   own gen-len tokens (seed+i, temperature 0.8 unless given)\n"
         "                   over the shared prompt KV, and report the copy-on-write pages\n"
         "  --bench          int8 micro-benchmark: the guest's peak int8 multiply-add rate\n"
         "                   and the int8 matvec's rate on the model's weights (alone, or\n"
         "                   after the request's lines)\n",
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
    die(flag, ": expected a number");
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
    die("--prompt-tokens: empty prompt (give at least one token id)", "");
  for(const char *p = s; *p; p++)
    n += *p == ',';
  if(n > MAX_DIM)
    die("--prompt-tokens: too many tokens", "");
  int *ids = xmalloc((uint64)n * sizeof(int), "prompt");
  const char *p = s;
  for(int i = 0; i < n; i++){
    long v = 0;
    int digits = 0;
    if(*p == '-')
      die("--prompt-tokens: token ids cannot be negative: ", s);
    for(; *p >= '0' && *p <= '9'; p++, digits++)
      if(v < 1000000000L)
        v = v * 10 + (*p - '0');
    if(digits == 0 || (*p != ',' && *p != 0))
      die("--prompt-tokens: expected comma-separated token ids, got ", s);
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
    die(argv[*i], ": missing value");
  return argv[++*i];
}

// The --samples rules: branches generate (gen-len >= 1) and differ (temperature > 0 when
// N > 1; 0.8 when not given); --trace is off in branches (it would print from them).
static void
check_samples(struct options *o)
{
  if(o->gen_len < 1)
    die("--samples needs --gen-len >= 1 (each branch generates its own tokens)", "");
  if(o->temperature < 0.0f){
    o->temperature = PARALLEL_TEMPERATURE;
    o->temp_text = "0.8";
  }
  if(o->samples > 1 && o->temperature == 0.0f)
    die("--samples N > 1 needs --temperature > 0 (greedy branches would all be the same)", "");
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
        die("--temperature: want a number >= 0, got ", v);
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
    } else if(strcmp(a, "--test-kill-branch") == 0){   // test hook, see docs/smolprobe.md
      o->kill_branch = 1 + parse_long(a, flag_value(argc, argv, &i), 0, MAX_SAMPLES - 1);
    } else {
      die("unknown flag (try --help): ", a);
    }
  }
  if(o->bench && o->tokens == 0 && o->gen_len < 0 && !o->samples)
    return;                                        // --bench alone: no request
  if(o->tokens == 0)
    die("--prompt-tokens is required (try --help)", "");
  if(o->gen_len < 0)
    die("--gen-len is required (try --help)", "");
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
  int *all = xmalloc((uint64)(o->n_prompt + o->gen_len) * sizeof(int), "tokens");
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
    die("memstat failed", "");
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
    die("no branch could run (see the branch and fork lines above)", "");
  if(o->bench)
    run_bench(mo, s);
  exit(0);
}

int
main(int argc, char **argv)
{
  static struct model mo;
  static struct state s;
  static struct options o;
  struct sampler sp;
  struct kv_plan kp;
  struct memstat before, reserved, done;
  float *probs;

  parse_args(argc, argv, &o);
  printf("[smolprobe] loading LLM assets...\n");
  uint64 t0 = clock_us();
  load_model(o.model, &mo);
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
    die("memstat failed", "");
  kv_reserve(&s, &mo.c, &kp);
  memstat(&reserved);
  printf("[smolprobe] running decode...\n");
  run(&mo, &s, &sp, &o, 0, total, &before);
  memstat(&done);
  uint64 t2 = clock_us();

  report(&kp, active, &before, &reserved, &done);
  uint64 dus = t2 - t1 > 0 ? t2 - t1 : 1;
  uint64 tps10 = (uint64)total * 10000000UL / dus;   // tokens per second, times 10
  printf("[smolprobe] timing load_ms=%lu decode_ms=%lu tokens_per_s=%lu.%lu\n",
         (t1 - t0) / 1000, dus / 1000, tps10 / 10, tps10 % 10);
  if(o.print_tokens)
    print_list("[smolprobe] tokens=", o.tokens + o.n_prompt, 0, o.gen_len);
  if(o.print_logits)
    print_list("[smolprobe] logits=", 0, s.logits, mo.c.vocab_size);
  if(o.bench)
    run_bench(&mo, &s);
  exit(0);
}
