// The model library: a SmolLM/Llama-architecture transformer in one C file (user/llm/llm.c),
// for the NexOS programs that run one (smolprobe, smolserve) and the tokenizer it carries
// (user/llm/tokenizer.h). docs/checkpoint.md defines the file and every rounding of the maths.
//
// In reading order, as in a one-file inference program: the model (config, weights, the
// checkpoint loader), the neural-net blocks (rmsnorm, softmax, the matvecs, embedding,
// RoPE), forward(), the sampler. A program loads a model, allocates a struct state, gives
// it a KV cache (the program decides where: smolprobe reserves it with one sbrk()), and
// calls forward() and sample() per position.
//
// Include after "kernel/types.h" and "user/user.h". Errors (a bad file, out of memory)
// print "[<llm_name>] error: <why>" on fd 2 and exit with status 1; nothing here crashes
// on any input.

#define LLM_HEADER_SIZE 256
#define WEIGHT_F32 0          // weight types (docs/checkpoint.md): float32
#define WEIGHT_INT8 1         // int8 with one float32 scale per group
#define WEIGHT_Q8_0 2         // GGUF's Q8_0 blocks (version 2 files)
#define WEIGHT_Q4_1 3         // GGUF's Q4_1 blocks (version 2 files)
#define WEIGHT_PER_TENSOR 255 // version 2 header: the types are in the type table
#define QK 32                 // values per Q8_0/Q4_1 block
#define LLM_MODEL "/model.bin" // the checkpoint on the LLM image (the Makefile puts it there)
#define LLM_MAX_DIM (1 << 24)     // bound on every header size (keeps products in range)
#define LLM_MAX_BLOCK 64          // bound on struct state's block (forward_block)
#define LLM_PREFILL_BLOCK 16      // the programs' default block (--prefill-block)

// A hot loop of the decode (a matvec kernel, the bench's peak loops) starts a page of its
// own. Under QEMU's TCG a translation block never crosses a guest page, so a loop that
// straddles a page boundary runs as two chained blocks per iteration: the Q4_1 matvec
// measured 49% of the packed peak where it straddled one and 73% where it starts a page
// (docs/smolprobe.md). Each such function is shorter than a page.
#define LLM_HOT __attribute__((noinline, aligned(4096)))

// The program's name in error lines; set it before anything else ("smolprobe").
extern const char *llm_name;

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
  int version;      // format version, 1, 2 or 3 (prepared: docs/checkpoint.md)
  int weight_type;  // version 1: WEIGHT_F32 or WEIGHT_INT8; version 2: WEIGHT_PER_TENSOR
  int group_size;   // int8 blocks: values per scale (64); 0 without int8 blocks
  int n_blocks;     // weight blocks in the file: 1 + 7 * n_layers (+ 1 untied)
  uint tokenizer_size; // bytes of the tokenizer blob (version 2), 0 = none
  char has[4];      // has[t]: some weight block is of type t
  int tied;         // 1: the classifier is the token embedding
  float rope_theta; // 10000
  float norm_eps;   // 1e-5
  int head_dim;     // dim / n_heads (64)
  int kv_dim;       // n_kv_heads * head_dim (192)
};

// A weight matrix [rows][cols] (y = W x) of one weight type, a view into the loaded file.
// float32: f holds the values. int8: q holds the quantized values *biased by +128* (the
// loader flips bit 7 of every byte, so q = w + 128 in 1..255; see matvec_int8 for why) and
// s one float32 scale per group of group_size values along a row. Q8_0/Q4_1: the loader
// rearranges GGUF's blocks in place (docs/smolprobe.md "Q8_0/Q4_1 in memory"): q holds
// the quants row after row (Q8_0: 32 biased bytes a block; Q4_1: 16 bytes of nibbles, low
// nibbles values 0..15 of the block, high nibbles 16..31), dm the fixed-point scales
// (docs/checkpoint.md "Quantized matvec in integers": Q8_0 D per block, Q4_1 D, M pairs)
// and ew each row's exponent; d16 keeps the f16 d (and m) of the token embedding.
struct matrix {
  int rows, cols;
  int type;          // WEIGHT_*
  float *f;
  uchar *q;
  float *s;
  short *dm;         // [rows][cols/32] D, or [rows][cols/32][2] D, M
  signed char *ew;   // [rows]
  ushort *d16;       // embedding only: [rows][cols/32] d, or d, m pairs (f16 bits)
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

struct model {
  struct config c;
  struct weights w;
  uchar *file;       // the whole checkpoint
  uint64 file_bytes; // its size
  int mapped;        // 1: file is a read-only mapping of the checkpoint (its pages are the
                     // page cache's, shared), 0: a heap copy prepared in place
  int no_mmap;       // set by the program before load_model(): 1 reads even a version 3
                     // file into the heap (smolprobe --no-mmap), 0 maps it when it can
  int *types;        // [n_blocks] the weight type of each block, in file order
  const uchar *tok_blob; // the tokenizer blob in the file (user/llm/tokenizer.h), or 0
  uint tok_size;
};

// The prepared input of the integer matvecs (prepare_input) for one position.
struct prepared {
  const float *xf;   // the input itself: float32 path
  // int8 path
  signed char *xq;   // [max(dim, hidden)] quantized input
  float *xs;         // [groups] their scales
  int *xsum;         // [groups] sum of xq over each group
  uint64 *xp;        // [max/2] xq in packed pairs (see matvec_q8)
  // Q8_0/Q4_1 path (blocks of 32; docs/checkpoint.md "Quantized matvec in integers")
  uint64 *qxp;       // [max/2] the int8 blocks in packed pairs, natural order (Q8_0)
  uint64 *qxp4;      // [max/4] the same in fours, in the nibble order of Q4_1 (pack_quad)
  int *qsum;         // [max/32] sum of each block's int8 values
  int *qX;           // [max/32] each block's scale in fixed point, exponent qex
  int qex;
};

// Two positions' Q4_1 inputs interleaved, so that one pointer reaches both (matmul2_q4_1).
struct pairin {
  uint64 *x2;              // [max/32][8][2] the packed quads
  int *s2, *X2;            // [max/32][2] the block sums and fixed-point scales
  int ex[2];               // the two exponents (struct prepared's qex)
};

// The prefill's activations for a block of positions (forward_block): one allocation,
// base[0..bytes), written only by forward_block() (not in struct state's scratch: a
// program that forks decoders, as smolprobe --samples, leaves it shared).
struct block {
  void *base;
  uint64 bytes;
  float *x, *xb, *xb2, *q; // [block][dim] each: as struct state's, one row a position
  float *hb, *hb2;         // [block][hidden]
  struct prepared *in;     // [block] each position's prepared input
  struct pairin pair;      // two positions' input as matmul2_q4_1 reads it
};

// Activations and the KV cache. alloc_state() allocates and touches everything but the
// KV cache, whose two arrays the program provides (key_cache, value_cache).
struct state {
  float *x;          // [dim] the residual stream
  float *xb;         // [dim] normalised input / attention output
  float *xb2;        // [dim] a sub-layer's output before the residual add
  float *hb;         // [hidden] gate, then silu(gate) * up
  float *hb2;        // [hidden] up
  float *q;          // [dim] the query
  float *att;        // [n_heads][seq_len] attention weights
  float *logits;     // [vocab]
  struct prepared in; // the input of the next matvec (prepare_input)
  float *rope_cos;   // [seq_len][head_dim/2] cos(pos * freq_i)
  float *rope_sin;   // [seq_len][head_dim/2]
  float *key_cache;  // [n_layers][seq_len][kv_dim], provided by the program
  float *value_cache;// [n_layers][seq_len][kv_dim]
  int seq_len;       // KV cache rows; set before alloc_state()
  int block;         // positions a prefill block feeds at once (forward_block); set before
                     // alloc_state(): 0 or 1 feeds one position at a time, as forward()
  struct block blk;  // forward_block's buffers (block > 1)
  // What forward() and the sampler write besides the KV cache (every buffer above but the
  // RoPE tables), recorded by alloc_state(): e.g. what a forked process will write.
  struct range { const void *p; uint64 len; } scratch[24];
  int nscratch;
};

// Print "[<llm_name>] error: <a><b>" (or <a><n><b>) on fd 2 and exit with status 1.
void llm_die(const char *a, const char *b) __attribute__((noreturn));
void llm_die_num(const char *a, long n, const char *b) __attribute__((noreturn));

// malloc(n) or die naming what: out of memory is a message, never a fault.
void *llm_malloc(uint64 n, const char *what);

// FNV-1a (32-bit) of n bytes at p, continuing h (start with LLM_FNV_BASIS): the programs'
// one-line fingerprints of raw bits (logits, K/V rows, an answer, the model file), so that
// two runs are compared bit for bit without printing what they hash.
#define LLM_FNV_BASIS 2166136261U
uint llm_fnv1a(uint h, const void *p, uint64 n);

// Load the checkpoint at path and point mo->w into it: a version 3 (prepared) file is
// mapped (mo->mapped = 1) unless mo->no_mmap is set or the kernel will not map it; any
// other is read into one heap buffer and prepared there. Dies with a clear message for a
// missing, truncated or corrupt file.
void load_model(const char *path, struct model *mo);
// Map the checkpoint at path (PROT_READ, MAP_PRIVATE) for its config, block types and
// tokenizer only: the weights stay unread (mo->w is not set), so a lazy kernel reads just
// the header's and the tokenizer's pages. A kernel that will not map it gets load_model()
// instead. Dies on a file load_model would refuse by its header or size.
void map_model_tokenizer(const char *path, struct model *mo);

// Allocate and touch (memset) everything forward() and the sampler use for s->seq_len
// positions, except the KV cache; *probs is the sampler's scratch [vocab].
void alloc_state(const struct config *c, struct state *s, float **probs);

// Run the matvecs of this process on n harts from now on (user/llm/harts.h, docs/harts.md):
// forks n-1 helpers, each computing its share of every matvec's rows. n == 1: no helpers.
// Call once, after load_model(); the program calls harts_stop() before it exits.
void llm_harts(const struct config *c, int n);

// ============================================================================ neural-net blocks

// o = w * (x / sqrt(mean(x^2) + eps)), elementwise over n values (o may be x).
void rmsnorm(float *o, const float *x, const float *w, int n, float eps);

// In place: x = exp(x - max) / sum, the sum taken left to right.
void softmax(float *x, int n);

// Make x[0..n) the input of the following matvec() calls (quantized for int8 models);
// x must stay alive while they run.
void prepare_input(struct state *s, const struct config *c, const float *x, int n);

// out = W x for the input of the last prepare_input().
void matvec(const struct model *mo, const struct matrix *m, const struct state *s, float *out);

// x = row `token` of the embedding, dequantized.
void embed(const struct model *mo, int token, float *x);

// The int8 packing trick (docs/smolprobe.md "Numerics"), shared with --bench's kernels.
// Eight biased weights u0..u7 load as one 64-bit word; masking with LANES keeps bytes k
// and k+4 as two 32-bit lanes: P = u_k + u_{k+4} 2^32. The input pair was packed as
// X = x_{k+4} + x_k 2^32, so modulo 2^64
//   P * X = u_k x_{k+4}  +  (u_k x_k + u_{k+4} x_{k+4}) 2^32,
// the wanted dot product in the high lane. Summing over a group keeps the low lane below
// 2^31 in magnitude (at most 2048 terms of 255*127 for groups up to 4096 values), so the
// low 32 bits, sign-extended, are exactly the low sum and the high 32 bits after removing
// them are the dot product of the biased weights; subtracting 128 * sum(x) un-biases it.
// This is why the loader biases the weights: masked bytes are unsigned.
#define LANES 0x000000FF000000FFUL

// The high lane of accumulated lanes t: the low lane's borrow removed (see above).
static inline int
high_lane(uint64 t)
{
  int low = (int)(uint32)t;
  return (int)(uint32)((t - (uint64)(long)low) >> 32);
}

// The dot product of one group from its accumulated lanes t, un-biased by 128 * sum(x).
static inline int
unpack_lanes(uint64 t, int xsum)
{
  return high_lane(t) - 128 * xsum;
}

// The lanes of 8 biased weights a (one 64-bit word) times the 4 packed input pairs p.
static inline __attribute__((always_inline)) uint64
word_lanes(uint64 a, const uint64 *p)
{
  return (a & LANES) * p[0] + ((a >> 8) & LANES) * p[1] +
         ((a >> 16) & LANES) * p[2] + ((a >> 24) & LANES) * p[3];
}

// ============================================================================ forward

// Feed token at position pos: writes K/V cache row pos of every layer; when want_logits,
// leaves the next-token logits [vocab] in s->logits.
void forward(const struct model *mo, struct state *s, int token, int pos, int want_logits);

// Feed tokens[0..n) at positions pos..pos+n-1, s->block positions at a time: every weight
// matrix is applied to the block's positions together, a Q4_1 weight word read once for
// two of them (docs/smolprobe.md, "Prefill in blocks, every hart at work"). Writes the same
// K/V rows, and with want_logits leaves the same logits of the last position, bit for bit,
// as forward() position by position.
void forward_block(const struct model *mo, struct state *s, const int *tokens, int pos, int n,
                   int want_logits);
// The logits of position k of the last block forward_block() fed with s->block > 1 (k below
// that block's size), into s->logits: forward()'s classifier step for that position.
void block_logits(const struct model *mo, struct state *s, int k);

// ============================================================================ the sampler

// Greedy decoding, or temperature sampling with a seeded xorshift64* coin
// (docs/checkpoint.md "Sampling"); identical to nexos.model.sampler.
struct sampler {
  float temperature;   // 0: arg-max
  uint64 state;        // xorshift64* state, never 0
  float *probs;        // [vocab] scratch, allocated and touched before the snapshots
  int vocab;
};

void sampler_init(struct sampler *sp, float temperature, uint64 seed, float *probs, int vocab);

// The next token from logits (which are left unchanged).
int sample(struct sampler *sp, const float *logits);
