// The model library (user/llm/llm.h): checkpoint loader, neural-net blocks, forward(), sampler.
// Read top to bottom; the header says what each public function does, the comments here
// how. The numerics are docs/checkpoint.md's, bit for bit with nexos.model.reference.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "user/user.h"
#include "user/llm/llm.h"
#include "user/llm/harts.h"

// The numerics must round exactly like the numpy reference (nexos.model.reference):
// a*b+c is a multiply rounded to float then an add, never a fused multiply-add.
#pragma GCC optimize("fp-contract=off")

#define HEADER_SIZE LLM_HEADER_SIZE
#define MAX_DIM LLM_MAX_DIM
#define MAX_LAYERS 4096           // bound on n_layers (the layout tables are per block)
#define READ_CHUNK (1 << 20)      // bytes per read() while loading the checkpoint
#define ALIGN 32                  // version 2: every section starts at a multiple of this
#define Q8_0_BYTES 34             // GGUF's blocks of QK values: f16 d, 32 x int8
#define Q4_1_BYTES 20             // f16 d, f16 m, 16 bytes of nibbles
#define MAX_Q_COLS (1 << 18)      // Q8_0/Q4_1 rows: the int64 accumulator's bound
#define FIX_TOP 14                // fixed point: the largest scale lands in [2^14, 2^15)
#define MAX_X_SHIFT 64            // cap on the activation exponent
#define NO_SCALE (-100000)        // floor(log2 |v|) of a set of zeros

const char *llm_name = "llm";

// ============================================================================ the model

void
llm_die(const char *a, const char *b)
{
  fprintf(2, "[%s] error: %s%s\n", llm_name, a, b);
  exit(1);
}

void
llm_die_num(const char *a, long n, const char *b)
{
  fprintf(2, "[%s] error: %s%ld%s\n", llm_name, a, n, b);
  exit(1);
}

uint
llm_fnv1a(uint h, const void *p, uint64 n)
{
  const uchar *b = p;
  for(uint64 i = 0; i < n; i++)
    h = (h ^ b[i]) * 16777619U;
  return h;
}

void *
llm_malloc(uint64 n, const char *what)
{
  void *p = n < 0x7fff0000UL ? malloc((uint)n) : 0;
  if(p == 0){
    fprintf(2, "[%s] error: out of memory allocating %s (%lu bytes)\n", llm_name, what, n);
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

// Round n up to a multiple of a (a power of two).
static uint64
align_up(uint64 n, uint64 a)
{
  return (n + a - 1) & ~(a - 1);
}

// Bytes of one weight block of rows x cols values of weight type t.
static uint64
block_bytes(const struct config *c, int t, int rows, int cols)
{
  uint64 n = (uint64)rows * cols;
  if(t == WEIGHT_F32)
    return 4 * n;
  if(t == WEIGHT_Q8_0)
    return n / QK * Q8_0_BYTES;
  if(t == WEIGHT_Q4_1)
    return n / QK * Q4_1_BYTES;
  return n + 4 * (n / c->group_size);
}

// The shape of weight block i in file order (docs/checkpoint.md "Tensors, in file
// order"): the embedding, then 7 kinds x n_layers, then the untied classifier.
static void
block_shape(const struct config *c, int i, int *rows, int *cols)
{
  int d = c->dim, h = c->hidden_dim, qd = c->n_heads * c->head_dim;
  int kr[7] = { qd, c->kv_dim, c->kv_dim, d, h, d, h };
  int kc[7] = { d, d, d, qd, d, h, d };
  if(i == 0 || i > 7 * c->n_layers){
    *rows = c->vocab_size;
    *cols = d;
  } else {
    *rows = kr[(i - 1) / c->n_layers];
    *cols = kc[(i - 1) / c->n_layers];
  }
}

// The file offsets of the tensors: off[0..2] the norms, off[3 + i] weight block i, and
// the end of the last one, returned. Version 2 starts every section at a multiple of 32
// after the type table.
static uint64
layout(const struct config *c, const int *types, uint64 *off)
{
  uint64 a = c->version >= 2 ? ALIGN : 1, d = c->dim;
  uint64 p = HEADER_SIZE + (c->version >= 2 ? align_up(4UL * c->n_blocks, ALIGN) : 0);
  uint64 norms[3] = { 4 * c->n_layers * d, 4 * c->n_layers * d, 4 * d };
  for(int i = 0; i < 3 + c->n_blocks; i++){
    p = align_up(p, a);
    off[i] = p;
    if(i < 3){
      p += norms[i];
    } else {
      int rows, cols;
      block_shape(c, i - 3, &rows, &cols);
      p += block_bytes(c, types[i - 3], rows, cols);
    }
  }
  return p;
}

// Bytes of version 3's derived section (docs/checkpoint.md "Version 3: prepared"): the
// embedding's f16 scales if it is Q8_0/Q4_1, then each Q8_0/Q4_1 block's row exponents,
// each piece padded to ALIGN. 0 for versions 1 and 2.
static uint64
derived_bytes(const struct config *c, const int *types)
{
  if(c->version != 3)
    return 0;
  uint64 n = 0;
  for(int i = 0; i < c->n_blocks; i++){
    int rows, cols;
    block_shape(c, i, &rows, &cols);
    if(types[i] != WEIGHT_Q8_0 && types[i] != WEIGHT_Q4_1)
      continue;
    if(i == 0)
      n += align_up((uint64)rows * (cols / QK) * (types[i] == WEIGHT_Q4_1 ? 2 : 1) * 2, ALIGN);
    n += align_up(rows, ALIGN);
  }
  return n;
}

// Bytes of the whole file that the header implies (tensors, version 3's derived section,
// then the tokenizer).
static uint64
checkpoint_bytes(const struct config *c, const int *types, uint64 *off)
{
  uint64 end = layout(c, types, off);
  if(c->version == 3)
    end = align_up(end, ALIGN) + derived_bytes(c, types);
  if(c->tokenizer_size)
    return align_up(end, ALIGN) + c->tokenizer_size;
  return end;
}

// The config fields shared by both versions (offsets 12..59); dies unless they describe
// a model this program can run.
static void
parse_sizes(const uchar *h, struct config *c)
{
  int *fields[] = { &c->dim, &c->hidden_dim, &c->n_layers, &c->n_heads, &c->n_kv_heads,
                    &c->vocab_size, &c->max_seq_len };
  const char *names[] = { "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                          "vocab_size", "max_seq_len" };
  for(int i = 0; i < 7; i++){
    uint32 v = get_u32(h + 12 + 4 * i);
    if(v == 0 || v >= MAX_DIM){
      fprintf(2, "[%s] error: model: config %s = %u is out of range\n",
              llm_name, names[i], v);
      exit(1);
    }
    *fields[i] = (int)v;
  }
  if(c->n_layers > MAX_LAYERS)
    llm_die_num("model: config n_layers = ", c->n_layers, " is out of range");
  c->rope_theta = get_f32(h + 52);
  c->norm_eps = get_f32(h + 56);
  if(c->dim % c->n_heads)
    llm_die("model: corrupt config: dim is not a multiple of n_heads", "");
  if(c->n_heads % c->n_kv_heads)
    llm_die("model: corrupt config: n_heads is not a multiple of n_kv_heads", "");
  c->head_dim = c->dim / c->n_heads;
  c->kv_dim = c->n_kv_heads * c->head_dim;
  if(c->head_dim % 2)
    llm_die("model: corrupt config: head_dim is odd (RoPE rotates pairs)", "");
  if(!(c->rope_theta > 0.0f && c->rope_theta < 1e30f))
    llm_die("model: corrupt config: rope_theta must be a positive number", "");
  if(!(c->norm_eps >= 0.0f && c->norm_eps < 1.0f))
    llm_die("model: corrupt config: norm_eps must be in [0, 1)", "");
}

// Fill c from the 256-byte header h; dies with the reason unless it is a checkpoint this
// program can run (the checks of docs/checkpoint.md). The version 2 type table is read
// by read_types().
static void
parse_header(const uchar *h, struct config *c)
{
  if(memcmp(h, "NEXOSLM\0", 8) != 0)
    llm_die("model: bad magic (not a NexOS checkpoint)", "");
  uint32 version = get_u32(h + 8);
  if(version < 1 || version > 3)
    llm_die_num("model: unsupported format version ", version,
                " (this program reads 1, 2 and 3)");
  c->version = version;
  parse_sizes(h, c);
  uint32 wtype = get_u32(h + 40), group = get_u32(h + 44), tied = get_u32(h + 48);
  if(tied > 1)
    llm_die_num("model: corrupt config: tied_embeddings = ", tied, " (must be 0 or 1)");
  c->tied = tied;
  c->n_blocks = 1 + 7 * c->n_layers + !tied;
  if(version == 1){
    if(wtype != WEIGHT_F32 && wtype != WEIGHT_INT8)
      llm_die_num("model: unknown weight_type ", wtype, " (0 = float32, 1 = int8)");
  } else {
    if(wtype != WEIGHT_PER_TENSOR)
      llm_die_num("model: versions 2 and 3 need weight_type 255 (per tensor), not ", wtype, "");
    if(get_u32(h + 64) != ALIGN)
      llm_die_num("model: section alignment ", get_u32(h + 64), ", expected 32");
    if(get_u32(h + 60) != c->n_blocks)
      llm_die_num("model: type table has ", get_u32(h + 60), " entries, not the model's");
    c->tokenizer_size = get_u32(h + 68);
    if(c->tokenizer_size >= (1U << 30))
      llm_die_num("model: tokenizer_size ", c->tokenizer_size, " is out of range");
  }
  c->weight_type = wtype;
  c->group_size = group;
}

// The weight type of every block: version 1 the header's, version 2 the type table
// (raw: its n_blocks u32). Checks each type against its block: an int8 block needs a
// group_size dividing dim and hidden_dim, a Q8_0/Q4_1 block a row length that is a
// multiple of 32. Sets the has[] flags.
static int *
block_types(struct config *c, const uchar *raw)
{
  int *t = llm_malloc(4UL * c->n_blocks, "the type table");
  for(int i = 0; i < c->n_blocks; i++){
    uint32 v = raw ? get_u32(raw + 4 * i) : (uint32)c->weight_type;
    if(v > WEIGHT_Q4_1)
      llm_die_num("model: unknown weight type ", v, " in the type table");
    t[i] = v;
    int rows, cols;
    block_shape(c, i, &rows, &cols);
    c->has[v] = 1;
    if((v == WEIGHT_Q8_0 || v == WEIGHT_Q4_1) && (cols % QK || cols > MAX_Q_COLS))
      llm_die_num("model: a Q8_0/Q4_1 block has rows of ", cols,
                  " values (need a multiple of 32)");
  }
  long g = c->group_size;
  if(!c->has[WEIGHT_INT8])
    c->group_size = 0;
  else if(g == 0 || g >= MAX_DIM || c->dim % g || c->hidden_dim % g)
    llm_die_num("model: int8 group_size ", g, " does not divide dim and hidden_dim");
  return t;
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

// ---------------------------------------------------------------- Q8_0/Q4_1 fixed point
// docs/checkpoint.md "Quantized matvec in integers": a finite f16 or f32 is
// sign * mant * 2^p exactly; fix(v, e) = sign * round_half_away(mant * 2^(p+e)).

// floor(log2(mant)) for mant > 0, by halving (no count-leading-zeros instruction).
static int
log2_floor(uint64 mant)
{
  int n = 0;
  for(int s = 32; s > 0; s >>= 1)
    if(mant >> s){
      mant >>= s;
      n += s;
    }
  return n;
}

// mant * 2^s rounded half away from zero (0 once the shift passes 62).
static long
shift_round(uint64 mant, int s)
{
  if(s >= 0)
    return (long)(mant << s);
  int n = -s;
  if(n > 62)
    return 0;
  return (long)((mant + (1UL << (n - 1))) >> n);
}

// The parts of an f16 bit pattern: |v| = *mant * 2^*p; returns -1 for inf/NaN, else the
// sign (0 or 1).
static int
f16_parts(uint32 h, uint64 *mant, int *p)
{
  int e = (h >> 10) & 31, f = h & 1023;
  *mant = 0;
  *p = 0;
  if(e == 31)
    return -1;
  *mant = e ? (uint64)(f | 1024) : (uint64)f;
  *p = e ? e - 25 : -24;
  return h >> 15;
}

// The parts of a float32 bit pattern (finite): |v| = *mant * 2^*p.
static void
f32_parts(uint32 b, uint64 *mant, int *p)
{
  int e = (b >> 23) & 255;
  uint32 f = b & 0x7fffff;
  *mant = e ? (uint64)(f | 0x800000) : (uint64)f;
  *p = e ? e - 150 : -149;
}

// An f16 bit pattern widened to float32, exactly.
static float
f16_to_f32(uint32 h)
{
  union { uint32 u; float f; } v;
  int e = (h >> 10) & 31, f = h & 1023;
  if(e == 0){
    float m = (float)f * 5.9604644775390625e-8f;      // f * 2^-24, exact
    return h >> 15 ? -m : m;
  }
  v.u = ((h >> 15) << 31) | ((uint32)(e - 15 + 127) << 23) | ((uint32)f << 13);
  return v.f;
}

// The largest floor(log2|v|) over the non-zero f16 values h[0], h[step], ... (n of them);
// NO_SCALE if all are zero. Dies on an infinite or NaN scale.
static int
f16_kmax(const uchar *h, int n, int stride)
{
  int k = NO_SCALE;
  for(int i = 0; i < n; i++){
    uint64 mant;
    int p;
    if(f16_parts(h[i * stride] | (h[i * stride + 1] << 8), &mant, &p) < 0)
      llm_die("model: a Q8_0/Q4_1 block scale is infinite or NaN", "");
    if(mant && log2_floor(mant) + p > k)
      k = log2_floor(mant) + p;
  }
  return k;
}

// fix(h, e) of an f16 bit pattern h (finite), an int16 for the row's exponent.
static short
f16_fix(uint32 h, int e)
{
  uint64 mant;
  int p;
  int neg = f16_parts(h, &mant, &p);
  long v = shift_round(mant, p + e);
  return (short)(neg ? -v : v);
}

// Prepare a Q8_0/Q4_1 block of rows x cols at q (GGUF's blocks) for the integer matvec,
// in place (docs/smolprobe.md "Q8_0/Q4_1 in memory"): per row the exponent ew[r] and the
// fixed-point scales (Q8_0: D per block; Q4_1: D, M pairs) from the f16 d (and m); then the
// quants are packed to the front of the block, row after row (Q8_0: 32 bytes a block,
// biased by +128; Q4_1: the 16 nibble bytes), and the scales stored after them. With
// keep_f16 (the token embedding) the f16 d (and m) are also kept, in m->d16, for embed().
// tmp has room for 2 int16 per block of the largest block.
static void
prepare_qblock(struct matrix *m, uchar *q, short *tmp, int keep_f16)
{
  int q4 = m->type == WEIGHT_Q4_1, nb = m->cols / QK, per = q4 ? 2 : 1;
  int bsz = q4 ? Q4_1_BYTES : Q8_0_BYTES, qb = q4 ? 16 : 32;
  uint64 nblk = (uint64)m->rows * nb;
  m->ew = llm_malloc(m->rows, "the weight exponents");
  if(keep_f16)
    m->d16 = llm_malloc(nblk * per * sizeof(ushort), "the embedding scales");
  for(int r = 0; r < m->rows; r++){
    const uchar *row = q + (uint64)r * nb * bsz;
    int k = f16_kmax(row, nb, bsz);
    if(q4 && f16_kmax(row + 2, nb, bsz) > k)
      k = f16_kmax(row + 2, nb, bsz);
    int ew = k == NO_SCALE ? 0 : FIX_TOP - k;
    m->ew[r] = ew;
    for(int b = 0; b < nb; b++){
      uint64 i = (uint64)r * nb + b;
      for(int j = 0; j < per; j++){
        uint32 h = row[b * bsz + 2 * j] | (row[b * bsz + 2 * j + 1] << 8);
        tmp[i * per + j] = f16_fix(h, ew);
        if(keep_f16)
          m->d16[i * per + j] = h;
      }
    }
  }
  for(uint64 i = 0; i < nblk; i++)              // quants to the front; dest <= source
    memmove(q + i * qb, q + i * bsz + (bsz - qb), qb);
  if(!q4)
    bias_int8(q, nblk * qb);
  m->q = q;
  m->dm = (short *)(q + nblk * qb);
  memmove(m->dm, tmp, nblk * per * sizeof(short));
}

// A version 3 Q8_0/Q4_1 block at p, prepared already (docs/checkpoint.md "Version 3:
// prepared"): the packed quants, then the fixed-point scales; its row exponents (and, for
// the embedding, its f16 scales first) at *derived, which moves past them. Nothing is
// written: the pages stay the file's.
static void
view_qblock(struct matrix *m, uchar *p, int keep_f16, uchar **derived)
{
  int q4 = m->type == WEIGHT_Q4_1, per = q4 ? 2 : 1, qb = q4 ? 16 : 32;
  uint64 nblk = (uint64)m->rows * (m->cols / QK);
  m->q = p;
  m->dm = (short *)(p + nblk * qb);
  if(keep_f16){
    m->d16 = (ushort *)*derived;
    *derived += align_up(nblk * per * sizeof(ushort), ALIGN);
  }
  m->ew = (signed char *)*derived;
  *derived += align_up(m->rows, ALIGN);
}

// Make *m a view of weight block i (type t) at p. A version 1 or 2 file holds the blocks
// as stored (int8 unbiased, GGUF's Q8_0/Q4_1), prepared here in place; version 3 holds
// them prepared (view_qblock, with derived as there).
static void
take_block(struct model *mo, uchar *p, int i, int t, struct matrix *m, short *tmp,
           uchar **derived)
{
  memset(m, 0, sizeof(*m));
  block_shape(&mo->c, i, &m->rows, &m->cols);
  m->type = t;
  int prepared = mo->c.version == 3;
  uint64 n = (uint64)m->rows * m->cols;
  if(t == WEIGHT_F32){
    m->f = (float *)p;
  } else if(t == WEIGHT_INT8){
    m->q = p;
    m->s = (float *)(p + n);
    if(!prepared)
      bias_int8(m->q, n);
  } else if(prepared){
    view_qblock(m, p, i == 0, derived);
  } else {
    prepare_qblock(m, p, tmp, i == 0);
  }
}

// Point every weight of mo into mo->file at the offsets off (layout()), in the file order
// of docs/checkpoint.md.
static void
map_weights(struct model *mo, const int *types, const uint64 *off)
{
  struct config *c = &mo->c;
  struct weights *w = &mo->w;
  int L = c->n_layers, last = c->n_blocks - 1;
  short *tmp = 0;
  uint64 most = 0;
  for(int i = 0; i < c->n_blocks && c->version != 3; i++){
    int rows, cols;
    block_shape(c, i, &rows, &cols);
    if((types[i] == WEIGHT_Q8_0 || types[i] == WEIGHT_Q4_1) && (uint64)rows * cols > most)
      most = (uint64)rows * cols;
  }
  if(most)
    tmp = llm_malloc(most / QK * 2 * sizeof(short), "load scratch");
  int rows, cols;
  block_shape(c, last, &rows, &cols);
  uchar *derived = mo->file + align_up(off[3 + last] + block_bytes(c, types[last], rows, cols),
                                       ALIGN);

  w->rms_att = (float *)(mo->file + off[0]);
  w->rms_ffn = (float *)(mo->file + off[1]);
  w->rms_final = (float *)(mo->file + off[2]);
  take_block(mo, mo->file + off[3], 0, types[0], &w->embedding, tmp, &derived);
  struct matrix *all = llm_malloc(7UL * L * sizeof(struct matrix), "weight table");
  struct matrix **lists[7] = { &w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_down,
                               &w->w_up };
  for(int k = 0; k < 7; k++){
    *lists[k] = all + k * L;
    for(int l = 0; l < L; l++){
      int i = 1 + k * L + l;
      take_block(mo, mo->file + off[3 + i], i, types[i], &(*lists[k])[l], tmp, &derived);
    }
  }
  if(c->tied)
    w->classifier = w->embedding;
  else
    take_block(mo, mo->file + off[3 + last], last, types[last], &w->classifier, tmp,
               &derived);
  if(tmp)
    free(tmp);
}

// Open the checkpoint at path and check it is a regular file of at least a header;
// dies otherwise. Returns the descriptor; *size is the file's size.
static int
open_checkpoint(const char *path, uint64 *size)
{
  struct stat st;
  int fd = open(path, O_RDONLY);
  if(fd < 0)
    llm_die("cannot open model ", path);
  if(fstat(fd, &st) < 0 || st.type != T_FILE)
    llm_die("model is not a regular file: ", path);
  if(st.size < HEADER_SIZE)
    llm_die_num("model: file too short for the header (", (long)st.size, " bytes, need 256)");
  *size = st.size;
  return fd;
}

// The layout of a checkpoint of `size` bytes whose config is mo->c and whose type table
// (version 2; 0 for version 1) is raw: sets mo->types, returns the section offsets
// (layout()) and the size they imply; dies unless that is the file's size.
static uint64 *
checked_layout(struct model *mo, const uchar *raw, uint64 size, uint64 *want)
{
  struct config *c = &mo->c;
  mo->types = block_types(c, raw);
  uint64 *off = llm_malloc((3UL + c->n_blocks) * sizeof(uint64), "the layout");
  *want = checkpoint_bytes(c, mo->types, off);
  if(size != *want){
    fprintf(2, "[%s] error: model: file is %lu bytes but its header implies %lu (%s)\n",
            llm_name, size, *want, size < *want ? "truncated" : "has extra bytes");
    exit(1);
  }
  return off;
}

// Bytes of the version 2 type table that follows the header (0 for version 1).
static uint64
table_bytes(const struct config *c)
{
  return c->version >= 2 ? 4UL * c->n_blocks : 0;
}

// Map the whole checkpoint at path (PROT_READ, MAP_PRIVATE; with populate every page now,
// MAP_POPULATE) into mo->file and check its header, type table and size; sets mo->c,
// mo->types, the tokenizer blob. Returns the section offsets (layout()), or 0 if the
// kernel would not map it (out of memory, a full page cache, or no mmap at all: the mmap
// lab's starter), with nothing changed.
static uint64 *
map_checkpoint(const char *path, struct model *mo, int populate)
{
  uint64 size, want;
  int fd = open_checkpoint(path, &size);
  uchar *file = mmap(0, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  close(fd);                       // the mapping keeps the file open
  if(file == (uchar *)-1)
    return 0;
  parse_header(file, &mo->c);
  uint64 table = table_bytes(&mo->c);
  if(size < HEADER_SIZE + table)
    llm_die("model: file too short for its type table", "");
  uint64 *off = checked_layout(mo, table ? file + HEADER_SIZE : 0, size, &want);
  mo->file = file;
  mo->file_bytes = size;
  mo->mapped = 1;
  if(mo->c.tokenizer_size){
    mo->tok_blob = file + want - mo->c.tokenizer_size;
    mo->tok_size = mo->c.tokenizer_size;
  }
  return off;
}

// Read the whole checkpoint (fd, at its header; size bytes) into the heap and prepare its
// weights there (version 3: prepared already); mo->c is parsed from header already.
static void
read_checkpoint(int fd, const char *path, uint64 size, const uchar *header, struct model *mo)
{
  struct config *c = &mo->c;
  uint64 table = table_bytes(c);
  uchar *raw = 0;
  if(table){
    raw = llm_malloc(table, "the type table");
    if(size < HEADER_SIZE + table || read(fd, raw, table) != table)
      llm_die("model: file too short for its type table", "");
  }
  uint64 want;
  uint64 *off = checked_layout(mo, raw, size, &want);
  // Version 2 sections are 32-aligned in the file; keep them so in memory.
  uint64 pad = c->version >= 2 ? ALIGN : 0;
  uchar *buf = llm_malloc(want + pad, "the model");
  mo->file = (uchar *)align_up((uint64)buf, pad ? pad : 1);
  mo->file_bytes = size;
  memcpy(mo->file, header, HEADER_SIZE);
  if(raw){
    memcpy(mo->file + HEADER_SIZE, raw, table);
    free(raw);
  }
  for(uint64 at = HEADER_SIZE + table; at < want; ){
    int n = want - at < READ_CHUNK ? (int)(want - at) : READ_CHUNK;
    int got = read(fd, mo->file + at, n);
    if(got <= 0)
      llm_die("model: read failed before the end of ", path);
    at += got;
  }
  map_weights(mo, mo->types, off);
  if(c->tokenizer_size){
    mo->tok_blob = mo->file + want - c->tokenizer_size;
    mo->tok_size = c->tokenizer_size;
  }
  free(off);
}

void
load_model(const char *path, struct model *mo)
{
  uchar header[HEADER_SIZE];
  uint64 size;
  int fd = open_checkpoint(path, &size);
  if(read(fd, header, HEADER_SIZE) != HEADER_SIZE)
    llm_die("model: cannot read the header of ", path);
  parse_header(header, &mo->c);
  // Prepared (docs/checkpoint.md): map it and write nothing, so every process that maps
  // the model shares its pages. MAP_POPULATE brings them all in now, as a read would: a
  // run touches every weight before its first token, and the KV figures then count KV
  // pages only (docs/smolprobe.md "The weights: mapped or read").
  // A kernel that will not map it, or a program that asked for no mapping (no_mmap),
  // gets the file read instead (weights source=read).
  uint64 *off = mo->c.version == 3 && !mo->no_mmap ? map_checkpoint(path, mo, 1) : 0;
  if(off){
    close(fd);
    map_weights(mo, mo->types, off);
    free(off);
    return;
  }
  read_checkpoint(fd, path, size, header, mo);
  close(fd);
}

void
map_model_tokenizer(const char *path, struct model *mo)
{
  uint64 *off = map_checkpoint(path, mo, 0);
  if(off == 0){                    // not mapped: read it all, weights prepared as usual
    load_model(path, mo);
    return;
  }
  free(off);
}

// ============================================================================ neural-net blocks

// o = w * (x / sqrt(mean(x^2) + eps)), elementwise over n values (o may be x).
void
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
void
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

// The int8 input of matvec_int8: x quantized group by group with the weights' rule
// (scale max|x|/127, q = round(x/scale) clamped to +-127), each group's q summed, the q's
// packed in pairs for word_lanes.
static void
prepare_int8(struct prepared *in, int gs, const float *x, int n)
{
  for(int g = 0; g < n / gs; g++){
    const float *xg = x + g * gs;
    signed char *qg = in->xq + g * gs;
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
    in->xs[g] = scale;
    in->xsum[g] = sum;
  }
  // Pair k of each 8 values (k = 0..3) packs x[k+4] in the low half, x[k] in the high.
  for(int j = 0; j < n / 8; j++){
    const signed char *x8 = in->xq + 8 * j;
    for(int k = 0; k < 4; k++)
      in->xp[4 * j + k] = (uint64)(long)x8[k + 4] + ((uint64)(long)x8[k] << 32);
  }
}

// Two int8 values as one packed input pair of word_lanes/q4_1_block2: hi * 2^32 + lo.
static inline uint64
pack_pair(int lo, int hi)
{
  return (uint64)(long)lo + ((uint64)(long)hi << 32);
}

// The input of q4_1_block2 for shift sh of word w of a block whose int8 values are q[0..32):
// lane l (bits 16l..16l+15) holds the value of the word's nibble sh + 4(3 - l), so that
// the lanes meet their weights in reverse order (see matvec_q4_1). Nibble i of word w is
// value 8w + i/2 (i even: a low nibble) or 8w + 16 + i/2 (i odd).
static inline uint64
pack_quad(const signed char *q, int w, int sh)
{
  uint64 y = 0;
  for(int l = 0; l < 4; l++){
    int i = sh + 4 * (3 - l);
    y += (uint64)(long)q[8 * w + (i & 1 ? 16 + i / 2 : i / 2)] << (16 * l);
  }
  return y;
}

// The input of the Q8_0/Q4_1 matvecs (docs/checkpoint.md "Quantized matvec in integers",
// "Per matvec"): x quantized per block of 32 by the int8 rule, each block's sum, the
// blocks packed in pairs for word_lanes (natural order: Q8_0) and in fours for
// q4_1_block2 (pack_quad), and the block scales s_b as fixed-point integers X[b] with one
// exponent ex = min(14 - max floor(log2 s_b), 64).
static void
prepare_q(struct prepared *in, const float *x, int n)
{
  int k = NO_SCALE;
  for(int b = 0; b < n / QK; b++){
    const float *xb = x + b * QK;
    signed char q[QK];
    union { float f; uint32 u; } v;
    v.f = abs_max(xb, QK) / 127.0f;
    int sum = 0;
    for(int i = 0; i < QK; i++){
      int t = 0;
      if(v.f != 0.0f){
        t = round_half_away(xb[i] / v.f);
        t = t > 127 ? 127 : t < -127 ? -127 : t;
      }
      q[i] = (signed char)t;
      sum += t;
    }
    in->qsum[b] = sum;
    in->qX[b] = (int)v.u;                       // the scale's bits, for the loop below
    uint64 mant;
    int p;
    f32_parts(v.u, &mant, &p);
    if(mant && log2_floor(mant) + p > k)
      k = log2_floor(mant) + p;
    uint64 *p8 = in->qxp + b * 16, *p4 = in->qxp4 + b * 8;
    for(int j = 0; j < 4; j++)
      for(int i = 0; i < 4; i++)
        p8[4 * j + i] = pack_pair(q[8 * j + i + 4], q[8 * j + i]);
    for(int w = 0; w < 2; w++)
      for(int sh = 0; sh < 4; sh++)
        p4[4 * w + sh] = pack_quad(q, w, sh);
  }
  int ex = k == NO_SCALE ? 0 : FIX_TOP - k;
  in->qex = ex < MAX_X_SHIFT ? ex : MAX_X_SHIFT;
  for(int b = 0; b < n / QK; b++){
    uint64 mant;
    int p;
    f32_parts((uint32)in->qX[b], &mant, &p);
    in->qX[b] = (int)shift_round(mant, p + in->qex);
  }
}

// The input x[0..n) prepared into in for what the model's weight types need.
static void
prepare(struct prepared *in, const struct config *c, const float *x, int n)
{
  in->xf = x;
  if(c->has[WEIGHT_INT8])
    prepare_int8(in, c->group_size, x, n);
  if(c->has[WEIGHT_Q8_0] || c->has[WEIGHT_Q4_1])
    prepare_q(in, x, n);
}

// The bytes of each buffer of one position's prepared input (struct prepared): xq, xs,
// xsum, xp (int8 path), then qxp, qxp4, qsum, qX (Q8_0/Q4_1 path).
static void
prepared_bytes(const struct config *c, uint64 *bytes)
{
  int big = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
  int gs = c->group_size ? c->group_size : 1;
  bytes[0] = big;
  bytes[1] = big / gs * sizeof(float);
  bytes[2] = big / gs * sizeof(int);
  bytes[3] = big / 2 * sizeof(uint64) + 8;
  bytes[4] = big / 2 * sizeof(uint64);
  bytes[5] = big / 4 * sizeof(uint64);
  bytes[6] = bytes[7] = big / QK * sizeof(int) + 4;
}

void
prepare_input(struct state *s, const struct config *c, const float *x, int n)
{
  prepare(&s->in, c, x, n);
}

// out[r] = W[r] . x for a float32 matrix (4 partial sums; order differs from numpy's BLAS
// by rounding only).
static void
matvec_f32(const struct matrix *m, const float *x, float *out, int r0, int r1)
{
  for(int r = r0; r < r1; r++){
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

// The packed int8 step (word_lanes, unpack_lanes: user/llm/llm.h) gives two products per
// multiply; this is why the loader biases the weights: masked bytes are unsigned.

// out[r] = W[r] . x for an int8 matrix with the input prepared by prepare_input.
// Per group g: isum exact in int32, then acc += (float)isum * (sw * sx), groups in order.
// Two rows at a time share the loads of the packed input (four rows measured slower
// under TCG); the odd last row, or every row when the weights are not 8-aligned, takes
// the plain loop: the same integers.
static void LLM_HOT
matvec_int8(const struct matrix *m, const struct prepared *in, int gs, float *out, int r0,
            int r1)
{
  int cols = m->cols, ng = cols / gs, words = gs / 8;
  int fast = gs % 8 == 0 && gs <= 4096 && ((uint64)m->q & 7) == 0 && cols % 8 == 0;
  int r = r0;
  if(fast){
    for(; r + 2 <= r1; r += 2){
      const uint64 *w0 = (const uint64 *)(m->q + (uint64)r * cols), *w1 = w0 + cols / 8;
      const float *s0 = m->s + (uint64)r * ng, *s1 = s0 + ng;
      const uint64 *xp = in->xp;
      float acc0 = 0.0f, acc1 = 0.0f;
      for(int g = 0; g < ng; g++){
        uint64 t0 = 0, t1 = 0;
        for(int j = 0; j < words; j++, xp += 4){
          t0 += word_lanes(w0[j], xp);
          t1 += word_lanes(w1[j], xp);
        }
        w0 += words;
        w1 += words;
        float sx = in->xs[g];
        acc0 += (float)unpack_lanes(t0, in->xsum[g]) * (s0[g] * sx);
        acc1 += (float)unpack_lanes(t1, in->xsum[g]) * (s1[g] * sx);
      }
      out[r] = acc0;
      out[r + 1] = acc1;
    }
  }
  for(; r < r1; r++){
    const uchar *q = m->q + (uint64)r * cols;
    const float *sr = m->s + (uint64)r * ng;
    float acc = 0.0f;
    for(int g = 0; g < ng; g++){
      int isum = group_dot_plain(q + g * gs, in->xq + g * gs, gs);
      acc += (float)isum * (sr[g] * in->xs[g]);
    }
    out[r] = acc;
  }
}

// acc * 2^-T as a float32: one int64 -> float conversion (round to nearest, ties to
// even), one multiply by the power of two built from its bits (T in [-108, 102] for
// finite inputs: a normal float).
static inline float
fixed_to_float(long acc, int T)
{
  union { uint32 u; float f; } v;
  v.u = (uint32)(127 - T) << 23;
  return (float)acc * v.f;
}

// The Q8_0 dot products of one block of two rows (4 words of 8 biased weights each)
// with the block's 16 packed input pairs, un-biased by 128 * sum(x) (exact: |isum| <
// 2^19): word_lanes' terms in order, each input pair loaded once for both rows.
static inline __attribute__((always_inline)) void
q8_0_block2(const uint64 *w0, const uint64 *w1, const uint64 *xp, int xsum, int *isum0,
            int *isum1)
{
  uint64 t0 = 0, t1 = 0;
#pragma GCC unroll 4
  for(int j = 0; j < 4; j++){
    uint64 a0 = w0[j], a1 = w1[j];
#pragma GCC unroll 4
    for(int k = 0; k < 4; k++, a0 >>= 8, a1 >>= 8){
      uint64 x = xp[4 * j + k];
      t0 += (a0 & LANES) * x;
      t1 += (a1 & LANES) * x;
    }
  }
  *isum0 = unpack_lanes(t0, xsum);
  *isum1 = unpack_lanes(t1, xsum);
}

// out = W x for a Q8_0 matrix, integers only up to one float conversion per row
// (docs/checkpoint.md "Per row"): acc += X[b] * (D[r][b] * isum), then
// y = (float)acc * 2^-(ex + ew[r]). Two rows share the input loads. No instruction
// scheduling before register allocation: it hoists every load of a block and spills
// (under TCG a spilled register is a memory access; measured 2x slower).
static void LLM_HOT __attribute__((optimize("no-schedule-insns")))
matvec_q8_0(const struct matrix *m, const struct prepared *in, float *out, int from, int to)
{
  int nb = m->cols / QK;
  const int *X = in->qX, *sx = in->qsum;
  for(int r = from; r < to; r += 2){
    int r1 = r + 1 < to ? r + 1 : r;            // an odd last row pairs with itself
    const uint64 *w0 = (const uint64 *)(m->q + (uint64)r * m->cols);
    const uint64 *w1 = (const uint64 *)(m->q + (uint64)r1 * m->cols);
    const short *d0 = m->dm + (uint64)r * nb, *d1 = m->dm + (uint64)r1 * nb;
    const uint64 *xp = in->qxp;
    long acc0 = 0, acc1 = 0;
    for(int b = 0; b < nb; b++, w0 += 4, w1 += 4, xp += 16){
      int i0, i1;
      q8_0_block2(w0, w1, xp, sx[b], &i0, &i1);
      acc0 += X[b] * ((long)d0[b] * i0);
      acc1 += X[b] * ((long)d1[b] * i1);
    }
    out[r] = fixed_to_float(acc0, in->qex + m->ew[r]);
    out[r1] = fixed_to_float(acc1, in->qex + m->ew[r1]);
  }
}

// Q4_1's packing: a 64-bit word of 16 nibbles shifted by 4 sh and masked with NIBBLES4
// keeps nibbles sh, sh+4, sh+8, sh+12 as four 16-bit lanes U_0..U_3 (the weights are
// 0..15: no bias). The input for that shift was packed in reverse, Y = sum y_{3-l} 2^16l
// (pack_quad), so modulo 2^64 the product U * Y holds in its top lane (bits 48..63) the
// dot product sum U_k y_k: four products per multiply, and the lanes below only partial
// sums. Over the four shifts of one word the top lane sums 16 products of |15 * 127|
// (|sum| <= 30480 < 2^15) and the lane below it 12 (<= 22860 < 2^15), so everything
// below the top lane lies in [-2^47, 2^47) and top_lane() is exact.
#define NIBBLES4 0x000F000F000F000FUL

// The top 16-bit lane of accumulated lanes t, the borrows of the lanes below removed.
static inline __attribute__((always_inline)) int
top_lane(uint64 t)
{
  return (int)((long)(t + (1UL << 47)) >> 48);
}

// The dot products of one block of two rows (words w0[0..1], w1[0..1]) with the block's
// packed input xp[0..8): each input quad is loaded once and used for both rows, each
// weight word shifted 4 bits a step (in order, so that few registers are live: under
// TCG a spilled register is a memory access), its lanes read once per word.
static inline __attribute__((always_inline)) void
q4_1_block2(const uint64 *w0, const uint64 *w1, const uint64 *xp, int *isum0, int *isum1)
{
  int i0 = 0, i1 = 0;
#pragma GCC unroll 2
  for(int w = 0; w < 2; w++){
    uint64 a0 = w0[w], a1 = w1[w], t0 = 0, t1 = 0;
#pragma GCC unroll 4
    for(int sh = 0; sh < 4; sh++, a0 >>= 4, a1 >>= 4){
      uint64 y = xp[4 * w + sh];
      t0 += (a0 & NIBBLES4) * y;
      t1 += (a1 & NIBBLES4) * y;
      asm("" : "+r"(a0), "+r"(a1));   // the shifts in order (see q4_1_block2x2)
    }
    i0 += top_lane(t0);
    i1 += top_lane(t1);
    asm("" : "+r"(w0), "+r"(w1) : "r"(i0), "r"(i1));   // one word at a time (ditto)
  }
  *isum0 = i0;
  *isum1 = i1;
}

// out = W x for a Q4_1 matrix (docs/checkpoint.md "Per row"):
// acc += X[b] * (D[r][b] * isum + M[r][b] * sx[b]), one float conversion per row.
// Two rows share the input loads; no early instruction scheduling (see matvec_q8_0).
static void LLM_HOT __attribute__((optimize("no-schedule-insns")))
matvec_q4_1(const struct matrix *m, const struct prepared *in, float *out, int from, int to)
{
  int nb = m->cols / QK;
  const int *X = in->qX, *sx = in->qsum;
  for(int r = from; r < to; r += 2){
    int r1 = r + 1 < to ? r + 1 : r;            // an odd last row pairs with itself
    const uint64 *w0 = (const uint64 *)(m->q + (uint64)r * m->cols / 2);
    const uint64 *w1 = (const uint64 *)(m->q + (uint64)r1 * m->cols / 2);
    const short *dm0 = m->dm + 2UL * r * nb, *dm1 = m->dm + 2UL * r1 * nb;
    const uint64 *xp = in->qxp4;
    long acc0 = 0, acc1 = 0;
    for(int b = 0; b < nb; b++, w0 += 2, w1 += 2, xp += 8, dm0 += 2, dm1 += 2){
      int i0, i1;
      q4_1_block2(w0, w1, xp, &i0, &i1);
      acc0 += X[b] * ((long)dm0[0] * i0 + (long)dm0[1] * sx[b]);
      acc1 += X[b] * ((long)dm1[0] * i1 + (long)dm1[1] * sx[b]);
    }
    out[r] = fixed_to_float(acc0, in->qex + m->ew[r]);
    out[r1] = fixed_to_float(acc1, in->qex + m->ew[r1]);
  }
}

// Rows [r0, r1) of out = W x for the input prepared in in.
static void
matvec_rows(const struct model *mo, const struct matrix *m, const struct prepared *in,
            float *out, int r0, int r1)
{
  if(m->type == WEIGHT_INT8)
    matvec_int8(m, in, mo->c.group_size, out, r0, r1);
  else if(m->type == WEIGHT_Q8_0)
    matvec_q8_0(m, in, out, r0, r1);
  else if(m->type == WEIGHT_Q4_1)
    matvec_q4_1(m, in, out, r0, r1);
  else
    matvec_f32(m, in->xf, out, r0, r1);
}

static void matvec_in(const struct model *mo, const struct matrix *m,
                      const struct prepared *in, float *out);

static void begin_pass(void);

void
matvec(const struct model *mo, const struct matrix *m, const struct state *s, float *out)
{
  begin_pass();
  matvec_in(mo, m, &s->in, out);
}

// ---------------------------------------------------------------- blocks of positions

// Two positions' Q4_1 inputs interleaved for matmul2_q4_1, so that one pointer reaches
// both: packed quad j of block b of position k at x2[(8b + j) * 2 + k], its block sum and
// fixed-point scale at s2[2b + k] and X2[2b + k].
static void
interleave2(struct pairin *pi, const struct prepared *in, int nb)
{
  for(int b = 0; b < nb; b++)
    for(int k = 0; k < 2; k++){
      for(int j = 0; j < 8; j++)
        pi->x2[(8 * b + j) * 2 + k] = in[k].qxp4[8 * b + j];
      pi->s2[2 * b + k] = in[k].qsum[b];
      pi->X2[2 * b + k] = in[k].qX[b];
    }
  pi->ex[0] = in[0].qex;
  pi->ex[1] = in[1].qex;
}

// q4_1_block2 for two positions: each weight word is loaded and each nibble quad masked
// once for both positions (x2, interleaved). i[2r + k]: row r against position k, the
// same integers as q4_1_block2's.
static inline __attribute__((always_inline)) void
q4_1_block2x2(const uint64 *w0, const uint64 *w1, const uint64 *x2, int *i)
{
  int i00 = 0, i01 = 0, i10 = 0, i11 = 0;
#pragma GCC unroll 2
  for(int w = 0; w < 2; w++){
    uint64 a0 = w0[w], a1 = w1[w], t00 = 0, t01 = 0, t10 = 0, t11 = 0;
#pragma GCC unroll 4
    for(int sh = 0; sh < 4; sh++, a0 >>= 4, a1 >>= 4){
      uint64 ya = x2[2 * (4 * w + sh)], yb = x2[2 * (4 * w + sh) + 1];
      uint64 u0 = a0 & NIBBLES4, u1 = a1 & NIBBLES4;
      t00 += u0 * ya;
      t10 += u1 * ya;
      t01 += u0 * yb;
      t11 += u1 * yb;
      // Keep the shifts in order: otherwise GCC derives every nibble quad from the
      // loaded words up front and spills them (a memory access each under TCG).
      asm("" : "+r"(a0), "+r"(a1));
    }
    i00 += top_lane(t00);
    i01 += top_lane(t01);
    i10 += top_lane(t10);
    i11 += top_lane(t11);
    // Finish this word before the next one is loaded: interleaved, the two words'
    // lanes need more registers than there are.
    asm("" : "+r"(w0), "+r"(w1) : "r"(i00), "r"(i01), "r"(i10), "r"(i11));
  }
  i[0] = i00;
  i[1] = i01;
  i[2] = i10;
  i[3] = i11;
}

// Rows [from, to) of matvec_q4_1 for the two positions interleaved in pi (interleave2):
// row r of position k to out[k * stride + r]. Integer sums are exact, so the result is
// matvec_q4_1's per position, bit for bit.
static void LLM_HOT __attribute__((optimize("no-schedule-insns")))
matmul2_q4_1(const struct matrix *m, const struct pairin *pi, float *out, int stride, int from,
             int to)
{
  int nb = m->cols / QK;
  const int *ex = pi->ex;
  for(int r = from; r < to; r += 2){
    int r1 = r + 1 < to ? r + 1 : r;            // an odd last row pairs with itself
    const uint64 *w0 = (const uint64 *)(m->q + (uint64)r * m->cols / 2);
    const uint64 *w1 = (const uint64 *)(m->q + (uint64)r1 * m->cols / 2);
    const short *dm0 = m->dm + 2UL * r * nb, *dm1 = m->dm + 2UL * r1 * nb;
    const uint64 *x2 = pi->x2;
    const int *X = pi->X2, *sx = pi->s2;
    long a00 = 0, a01 = 0, a10 = 0, a11 = 0;
    for(int b = 0; b < nb; b++, w0 += 2, w1 += 2, x2 += 16, dm0 += 2, dm1 += 2, X += 2,
        sx += 2){
      int i[4];
      q4_1_block2x2(w0, w1, x2, i);
      a00 += X[0] * ((long)dm0[0] * i[0] + (long)dm0[1] * sx[0]);
      a01 += X[1] * ((long)dm0[0] * i[1] + (long)dm0[1] * sx[1]);
      a10 += X[0] * ((long)dm1[0] * i[2] + (long)dm1[1] * sx[0]);
      a11 += X[1] * ((long)dm1[0] * i[3] + (long)dm1[1] * sx[1]);
    }
    out[r] = fixed_to_float(a00, ex[0] + m->ew[r]);
    out[stride + r] = fixed_to_float(a01, ex[1] + m->ew[r]);
    out[r1] = fixed_to_float(a10, ex[0] + m->ew[r1]);
    out[stride + r1] = fixed_to_float(a11, ex[1] + m->ew[r1]);
  }
}

// SwiGLU's product in place: g[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u, i < n.
static void
silu_mul(float *g, const float *u, int n)
{
  for(int i = 0; i < n; i++)
    g[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}

// ---------------------------------------------------------------- every hart at work

// A matvec split by rows across the team's harts (user/llm/harts.h, docs/harts.md): the
// job, its input and its output live in the team's shared arena; each hart computes its
// rows straight from the weights (mapped, the same in every process). Everything else of
// struct state stays private, so a process forked from the owner (smolprobe --samples'
// branches) feeds alone with its own buffers (harts_count() is 1 there).
#define MAX_JOB_MATRICES 3    // q, k and v
struct rowjob {
  const struct model *mo;
  const struct matrix *m[MAX_JOB_MATRICES]; // matrices applied to the same input
  int nm;                 // how many; JOB_SWIGLU: 2 (gate, up)
  int kind;               // JOB_ONE: one position, in in; JOB_PAIR: two positions
                          // interleaved in p (matmul2_q4_1); JOB_SWIGLU: see swiglu()
  struct prepared in;     // the arena's copy of the caller's prepared input
  struct pairin p;
  int r0, r1;             // nm == 1: the rows of this job (a long matrix takes several jobs)
  float *out;             // [MAX_JOB_MATRICES][TEAM_ROWS] in the arena: matrix i's rows (or
                          // JOB_PAIR's position i) at out + i * TEAM_ROWS
};
#define JOB_ONE 0
#define JOB_PAIR 1
#define JOB_SWIGLU 2
static struct rowjob *team;   // in the arena; 0 without a team
// Whether this process owns a team of more than one hart. Asked once per forward pass
// (begin_pass): harts_count() is a system call, and a decode step posts ~150 jobs.
static int split;
#define TEAM_ROWS 2048        // rows of one job: a long matrix (the classifier) takes several,
                              // so that the arena, written back at exit, stays small

// One hart's part of the job arg (harts_run's fn): of each matrix, rows [r0, r1) split at
// even boundaries (the kernels take rows in pairs) into n shares as equal as that allows.
// The kernels index out by row, so they get out moved back by r0.
static void
rows_job(void *arg, int hart, int n)
{
  struct rowjob *j = arg;
  for(int i = 0; i < j->nm; i++){
    int r0 = j->nm == 1 ? j->r0 : 0, r1 = j->nm == 1 ? j->r1 : j->m[i]->rows;
    int rows = r1 - r0, share = (rows + 2 * n - 1) / (2 * n) * 2;
    int from = r0 + (hart * share < rows ? hart * share : rows);
    int to = from + share < r1 ? from + share : r1;
    float *out = j->out + i * TEAM_ROWS - r0;
    if(j->kind == JOB_PAIR)
      matmul2_q4_1(j->m[i], &j->p, out, TEAM_ROWS, from, to);
    else
      matvec_rows(j->mo, j->m[i], &j->in, out, from, to);
    if(j->kind == JOB_SWIGLU && i == 1)
      silu_mul(j->out + from, out + from, to - from);
  }
}

// Copy the parts of in that a matrix of type t over n columns reads into the job's arena
// buffers.
static void
copy_prepared(struct prepared *to, const struct prepared *in, const struct config *c, int t,
              int n)
{
  if(t == WEIGHT_F32){
    memcpy((float *)to->xf, in->xf, n * sizeof(float));
  } else if(t == WEIGHT_INT8){
    int gs = c->group_size;
    memcpy(to->xq, in->xq, n);
    memcpy(to->xs, in->xs, n / gs * sizeof(float));
    memcpy(to->xsum, in->xsum, n / gs * sizeof(int));
    memcpy(to->xp, in->xp, n / 2 * sizeof(uint64));
  } else {
    if(t == WEIGHT_Q8_0)
      memcpy(to->qxp, in->qxp, n / 2 * sizeof(uint64));
    else
      memcpy(to->qxp4, in->qxp4, n / 4 * sizeof(uint64));
    memcpy(to->qsum, in->qsum, n / QK * sizeof(int));
    memcpy(to->qX, in->qX, n / QK * sizeof(int));
    to->qex = in->qex;
  }
}

// out = W x for the input prepared in in: on every hart of the team when there is one.
static void
matvec_in(const struct model *mo, const struct matrix *m, const struct prepared *in, float *out)
{
  if(!split){
    matvec_rows(mo, m, in, out, 0, m->rows);
    return;
  }
  team->mo = mo;
  team->m[0] = m;
  team->nm = 1;
  team->kind = JOB_ONE;
  copy_prepared(&team->in, in, &mo->c, m->type, m->cols);
  for(int r = 0; r < m->rows; r += TEAM_ROWS){
    team->r0 = r;
    team->r1 = r + TEAM_ROWS < m->rows ? r + TEAM_ROWS : m->rows;
    harts_run(rows_job, team);
    memcpy(out + r, team->out, (team->r1 - r) * sizeof(float));
  }
}

// outs[i] = ms[i] x for nm (<= MAX_JOB_MATRICES) matrices of one input, each at most
// TEAM_ROWS rows: with a team one job for all of them (attention's q, k and v), so the
// harts meet once instead of nm times.
static void
matvecs_in(const struct model *mo, const struct matrix **ms, int nm, const struct prepared *in,
           float **outs)
{
  int fits = 1;
  for(int i = 0; i < nm; i++)
    fits &= ms[i]->rows <= TEAM_ROWS;
  if(!split || !fits){
    for(int i = 0; i < nm; i++)
      matvec_in(mo, ms[i], in, outs[i]);
    return;
  }
  team->mo = mo;
  team->nm = nm;
  team->kind = JOB_ONE;
  for(int i = 0; i < nm; i++){
    team->m[i] = ms[i];
    copy_prepared(&team->in, in, &mo->c, ms[i]->type, ms[i]->cols);
  }
  harts_run(rows_job, team);
  for(int i = 0; i < nm; i++)
    memcpy(outs[i], team->out + i * TEAM_ROWS, ms[i]->rows * sizeof(float));
}

// matmul2_q4_1 for the positions in[0..1] into out and out + stride: on every hart of the
// team when there is one.
static void
matmul2_in(const struct matrix *m, struct block *bk, const struct prepared *in, float *out,
           int stride)
{
  if(!split){
    interleave2(&bk->pair, in, m->cols / QK);
    matmul2_q4_1(m, &bk->pair, out, stride, 0, m->rows);
    return;
  }
  interleave2(&team->p, in, m->cols / QK);
  team->m[0] = m;
  team->nm = 1;
  team->kind = JOB_PAIR;
  for(int r = 0; r < m->rows; r += TEAM_ROWS){
    team->r0 = r;
    team->r1 = r + TEAM_ROWS < m->rows ? r + TEAM_ROWS : m->rows;
    harts_run(rows_job, team);
    memcpy(out + r, team->out, (team->r1 - r) * sizeof(float));
    memcpy(out + stride + r, team->out + TEAM_ROWS, (team->r1 - r) * sizeof(float));
  }
}

// The feed-forward's first half for the input prepared in s->in: s->hb = silu(gate . x) *
// (up . x). With a team one job does it all: each hart computes its rows of both matvecs
// and their product, so the SwiGLU is split too.
static void
swiglu(const struct model *mo, struct state *s, const struct matrix *gate,
       const struct matrix *up)
{
  int n = gate->rows;
  if(!split || n > TEAM_ROWS){
    matvec_in(mo, gate, &s->in, s->hb);
    matvec_in(mo, up, &s->in, s->hb2);
    silu_mul(s->hb, s->hb2, n);
    return;
  }
  team->mo = mo;
  team->m[0] = gate;
  team->m[1] = up;
  team->nm = 2;
  team->kind = JOB_SWIGLU;
  copy_prepared(&team->in, &s->in, &mo->c, gate->type, gate->cols);
  if(up->type != gate->type)
    copy_prepared(&team->in, &s->in, &mo->c, up->type, up->cols);
  harts_run(rows_job, team);
  memcpy(s->hb, team->out, n * sizeof(float));
}

// Called on entry to each public function that runs matvecs: whether they go to the team.
// Stored only when it changes: a process forked to decode alone (smolprobe --samples'
// branches, split 0 already) must not dirty a page of this file's globals, which would be
// a copy-on-write copy outside the state it accounts for (struct state's scratch).
static void
begin_pass(void)
{
  int want = team != 0 && harts_count() > 1;
  if(split != want)
    split = want;
}

void
llm_harts(const struct config *c, int n)
{
  int big = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
  uint64 pb[8], bytes = sizeof(struct rowjob) + 64;
  prepared_bytes(c, pb);
  uint64 more[] = { big * sizeof(float), pb[0], pb[1], pb[2], pb[3], pb[4], pb[5], pb[6],
                    pb[7], big / QK * 16 * sizeof(uint64), big / QK * 2 * sizeof(int),
                    big / QK * 2 * sizeof(int), MAX_JOB_MATRICES * TEAM_ROWS * sizeof(float) };
  for(int i = 0; i < sizeof(more) / sizeof(more[0]); i++)
    bytes += (more[i] + 63) & ~63UL;
  if(n == 1)
    return;                  // no team: every matvec runs here, as without llm_harts()
  harts_start(n, bytes);
  if(harts_count() == 1){    // the kernel maps no shared file: one hart after all
    harts_stop();
    return;
  }
  team = harts_alloc(sizeof(struct rowjob));
  struct prepared *in = &team->in;
  in->xf = harts_alloc(more[0]);
  void **ptrs[] = { (void **)&in->xq, (void **)&in->xs, (void **)&in->xsum, (void **)&in->xp,
                    (void **)&in->qxp, (void **)&in->qxp4, (void **)&in->qsum,
                    (void **)&in->qX, (void **)&team->p.x2, (void **)&team->p.s2,
                    (void **)&team->p.X2, (void **)&team->out };
  for(int i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
    *ptrs[i] = harts_alloc(more[i + 1]);
}

// ---------------------------------------------------------------- blocks of positions

// out[k * stride ...] = W x_k for the n positions prepared in bk->in[0..n): a Q4_1 matrix
// two positions at a time (matmul2_q4_1), any other (and an odd last position) one at a
// time with matvec's kernels. The numbers are matvec's per position.
static void
matmul(const struct model *mo, const struct matrix *m, struct block *bk, int n, float *out,
       int stride)
{
  int k = 0;
  if(m->type == WEIGHT_Q4_1)
    for(; k + 2 <= n; k += 2)
      matmul2_in(m, bk, bk->in + k, out + (uint64)k * stride, stride);
  for(; k < n; k++)
    matvec_in(mo, m, &bk->in[k], out + (uint64)k * stride);
}

// Row `token` of a Q8_0/Q4_1 embedding, dequantized from the f16 scales
// (docs/checkpoint.md): Q8_0 w = (float)d * (float)q, Q4_1 w = (float)d * (float)q + (float)m.
static void
embed_q(const struct matrix *e, int token, float *x)
{
  int nb = e->cols / QK;
  if(e->type == WEIGHT_Q8_0){
    const uchar *q = e->q + (uint64)token * e->cols;
    const ushort *h = e->d16 + (uint64)token * nb;
    for(int b = 0; b < nb; b++){
      float d = f16_to_f32(h[b]);
      for(int j = 0; j < QK; j++)
        x[b * QK + j] = d * (float)((int)q[b * QK + j] - 128);
    }
    return;
  }
  const uchar *q = e->q + (uint64)token * e->cols / 2;
  const ushort *h = e->d16 + 2UL * token * nb;
  for(int b = 0; b < nb; b++){
    float d = f16_to_f32(h[2 * b]), mn = f16_to_f32(h[2 * b + 1]);
    for(int j = 0; j < 16; j++){
      x[b * QK + j] = d * (float)(q[b * 16 + j] & 15) + mn;
      x[b * QK + j + 16] = d * (float)(q[b * 16 + j] >> 4) + mn;
    }
  }
}

// x = row `token` of the embedding (dequantized: q * s rounded to float).
void
embed(const struct model *mo, int token, float *x)
{
  const struct matrix *e = &mo->w.embedding;
  int d = e->cols;
  if(e->type == WEIGHT_Q8_0 || e->type == WEIGHT_Q4_1){
    embed_q(e, token, x);
    return;
  }
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

// ============================================================================ the run state

// The next 64-byte aligned piece of *next of the given bytes.
static void *
take(char **next, uint64 bytes)
{
  void *p = *next;
  *next += (bytes + 63) & ~63UL;
  return p;
}

// Lay out forward_block's buffers for s->block positions from base, or with base 0 only
// count them; returns their bytes. Each position's prepared input is sized as s->in's.
static uint64
block_layout(const struct config *c, struct state *s, char *base)
{
  struct block *bk = &s->blk;
  struct prepared scratch_in;
  uint64 n = s->block, fl = sizeof(float), pb[8];
  int big = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
  char *next = base;

  prepared_bytes(c, pb);
  bk->x = take(&next, n * c->dim * fl);
  bk->xb = take(&next, n * c->dim * fl);
  bk->xb2 = take(&next, n * c->dim * fl);
  bk->q = take(&next, n * c->dim * fl);
  bk->hb = take(&next, n * c->hidden_dim * fl);
  bk->hb2 = take(&next, n * c->hidden_dim * fl);
  bk->in = take(&next, n * sizeof(struct prepared));
  for(int k = 0; k < n; k++){
    struct prepared *in = base ? &bk->in[k] : &scratch_in;
    if(c->has[WEIGHT_INT8]){
      in->xq = take(&next, pb[0]);
      in->xs = take(&next, pb[1]);
      in->xsum = take(&next, pb[2]);
      in->xp = take(&next, pb[3]);
    }
    if(c->has[WEIGHT_Q8_0] || c->has[WEIGHT_Q4_1]){
      in->qxp = take(&next, pb[4]);
      in->qxp4 = take(&next, pb[5]);
      in->qsum = take(&next, pb[6]);
      in->qX = take(&next, pb[7]);
    }
  }
  bk->pair.x2 = take(&next, big / QK * 16 * sizeof(uint64));
  bk->pair.s2 = take(&next, big / QK * 2 * sizeof(int));
  bk->pair.X2 = take(&next, big / QK * 2 * sizeof(int));
  return next - base;
}

// Every buffer in the order of the list below (the page layout smolprobe counts), then
// forward_block's when s->block > 1.
void
alloc_state(const struct config *c, struct state *s, float **probs)
{
  int half = c->head_dim / 2;
  uint64 fl = sizeof(float), pb[8];
  prepared_bytes(c, pb);
  uint64 bytes[] = { c->dim * fl, c->dim * fl, c->dim * fl, c->hidden_dim * fl,
                     c->hidden_dim * fl, c->dim * fl, (uint64)c->n_heads * s->seq_len * fl,
                     c->vocab_size * fl, c->vocab_size * fl, pb[0], pb[1], pb[2], pb[3],
                     (uint64)s->seq_len * half * fl, (uint64)s->seq_len * half * fl };
  void **ptrs[] = { (void **)&s->x, (void **)&s->xb, (void **)&s->xb2, (void **)&s->hb,
                    (void **)&s->hb2, (void **)&s->q, (void **)&s->att, (void **)&s->logits,
                    (void **)probs, (void **)&s->in.xq, (void **)&s->in.xs,
                    (void **)&s->in.xsum, (void **)&s->in.xp, (void **)&s->rope_cos,
                    (void **)&s->rope_sin };
  for(int i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++){
    *ptrs[i] = llm_malloc(bytes[i], "activations");
    memset(*ptrs[i], 0, bytes[i]);             // touch: map the pages now
    if(ptrs[i] != (void **)&s->rope_cos && ptrs[i] != (void **)&s->rope_sin){
      s->scratch[s->nscratch].p = *ptrs[i];    // written again at every step
      s->scratch[s->nscratch++].len = bytes[i];
    }
  }
  if(c->has[WEIGHT_Q8_0] || c->has[WEIGHT_Q4_1]){   // the Q8_0/Q4_1 input (prepare_q)
    void **qptrs[] = { (void **)&s->in.qxp, (void **)&s->in.qxp4, (void **)&s->in.qsum,
                       (void **)&s->in.qX };
    for(int i = 0; i < 4; i++){
      *qptrs[i] = llm_malloc(pb[4 + i], "activations");
      memset(*qptrs[i], 0, pb[4 + i]);
      s->scratch[s->nscratch].p = *qptrs[i];
      s->scratch[s->nscratch++].len = pb[4 + i];
    }
  }
  if(s->block > 1){
    uint64 n = block_layout(c, s, 0);
    char *base = llm_malloc(n, "the prefill block's activations");
    memset(base, 0, n);
    block_layout(c, s, base);
    s->blk.base = base;
    s->blk.bytes = n;
  }
  rope_tables(c, s);
}

// ============================================================================ forward

// Grouped-query attention of layer l at position pos: q (roped queries) against cache
// rows 0..pos; the result [n_heads*head_dim] goes to out.
static void
attention(const struct config *c, struct state *s, int l, int pos, const float *qv, float *out)
{
  int hd = c->head_dim, per_kv = c->n_heads / c->n_kv_heads;
  float scale = sqrtf((float)hd);
  uint64 layer = (uint64)l * s->seq_len * c->kv_dim;
  for(int h = 0; h < c->n_heads; h++){
    const float *q = qv + h * hd;
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
    float *o = out + h * hd;
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
void
forward(const struct model *mo, struct state *s, int token, int pos, int want_logits)
{
  const struct config *c = &mo->c;
  const struct weights *w = &mo->w;
  int d = c->dim, kvd = c->kv_dim;

  begin_pass();
  embed(mo, token, s->x);                                 // x [dim]
  for(int l = 0; l < c->n_layers; l++){
    uint64 row = ((uint64)l * s->seq_len + pos) * kvd;
    float *k = s->key_cache + row, *v = s->value_cache + row;

    // attention: xb = rmsnorm(x); q,k,v = W xb; rope(q,k); x += wo . attend(q, K, V)
    rmsnorm(s->xb, s->x, w->rms_att + l * d, d, c->norm_eps);
    prepare_input(s, c, s->xb, d);
    const struct matrix *qkv[3] = { &w->wq[l], &w->wk[l], &w->wv[l] };
    float *outs[3] = { s->q, k, v };    // q [n_heads*head_dim], k and v [kv_dim] -> row pos
    matvecs_in(mo, qkv, 3, &s->in, outs);
    rope(s, c->head_dim, s->q, c->n_heads, pos);
    rope(s, c->head_dim, k, c->n_kv_heads, pos);
    attention(c, s, l, pos, s->q, s->xb);                  // xb [n_heads*head_dim]
    prepare_input(s, c, s->xb, d);
    matvec_in(mo, &w->wo[l], &s->in, s->xb2);             // xb2 [dim]
    for(int i = 0; i < d; i++)
      s->x[i] += s->xb2[i];

    // feed-forward: x += w_down . (silu(w_gate . xb) * (w_up . xb)), xb = rmsnorm(x)
    rmsnorm(s->xb, s->x, w->rms_ffn + l * d, d, c->norm_eps);
    prepare_input(s, c, s->xb, d);
    swiglu(mo, s, &w->w_gate[l], &w->w_up[l]);             // hb [hidden]
    prepare_input(s, c, s->hb, c->hidden_dim);
    matvec_in(mo, &w->w_down[l], &s->in, s->xb2);         // xb2 [dim]
    for(int i = 0; i < d; i++)
      s->x[i] += s->xb2[i];
  }
  if(!want_logits)
    return;
  rmsnorm(s->xb, s->x, w->rms_final, d, c->norm_eps);
  prepare_input(s, c, s->xb, d);
  matvec_in(mo, &w->classifier, &s->in, s->logits);      // logits [vocab]
}

// Each of the n positions of bk: xb = rmsnorm(x, w) and its prepared input of n values.
static void
norm_block(const struct config *c, struct block *bk, int n, const float *w)
{
  for(int k = 0; k < n; k++){
    float *xb = bk->xb + k * c->dim;
    rmsnorm(xb, bk->x + k * c->dim, w, c->dim, c->norm_eps);
    prepare(&bk->in[k], c, xb, c->dim);
  }
}

// x += y over the n positions of bk (rows of dim).
static void
add_block(const struct config *c, struct block *bk, int n, const float *y)
{
  for(uint64 i = 0; i < (uint64)n * c->dim; i++)
    bk->x[i] += y[i];
}

// One layer l for the n (<= s->block) positions pos.. of bk: forward()'s layer, each
// matrix applied to all n positions at once (matmul). Attention per position, in order:
// position pos+k reads cache rows 0..pos+k, all written before (causal).
static void
layer_block(const struct model *mo, struct state *s, int l, int pos, int n)
{
  const struct config *c = &mo->c;
  const struct weights *w = &mo->w;
  struct block *bk = &s->blk;
  int d = c->dim, kvd = c->kv_dim, hd = c->hidden_dim;
  uint64 row = ((uint64)l * s->seq_len + pos) * kvd;
  float *k = s->key_cache + row, *v = s->value_cache + row;

  norm_block(c, bk, n, w->rms_att + l * d);
  matmul(mo, &w->wq[l], bk, n, bk->q, d);
  matmul(mo, &w->wk[l], bk, n, k, kvd);                   // cache rows pos..pos+n-1
  matmul(mo, &w->wv[l], bk, n, v, kvd);
  for(int t = 0; t < n; t++){
    rope(s, c->head_dim, bk->q + t * d, c->n_heads, pos + t);
    rope(s, c->head_dim, k + t * kvd, c->n_kv_heads, pos + t);
  }
  for(int t = 0; t < n; t++){
    attention(c, s, l, pos + t, bk->q + t * d, bk->xb + t * d);
    prepare(&bk->in[t], c, bk->xb + t * d, d);
  }
  matmul(mo, &w->wo[l], bk, n, bk->xb2, d);
  add_block(c, bk, n, bk->xb2);

  norm_block(c, bk, n, w->rms_ffn + l * d);
  matmul(mo, &w->w_gate[l], bk, n, bk->hb, hd);
  matmul(mo, &w->w_up[l], bk, n, bk->hb2, hd);
  for(int t = 0; t < n; t++){
    silu_mul(bk->hb + t * hd, bk->hb2 + t * hd, hd);
    prepare(&bk->in[t], c, bk->hb + t * hd, hd);
  }
  matmul(mo, &w->w_down[l], bk, n, bk->xb2, d);
  add_block(c, bk, n, bk->xb2);
}

void
forward_block(const struct model *mo, struct state *s, const int *tokens, int pos, int n,
              int want_logits)
{
  const struct config *c = &mo->c;
  begin_pass();
  if(s->block <= 1){
    for(int t = 0; t < n; t++)
      forward(mo, s, tokens[t], pos + t, want_logits && t == n - 1);
    return;
  }
  for(int done = 0; done < n; ){
    int m = n - done < s->block ? n - done : s->block;
    for(int t = 0; t < m; t++)
      embed(mo, tokens[done + t], s->blk.x + t * c->dim);
    for(int l = 0; l < c->n_layers; l++)
      layer_block(mo, s, l, pos + done, m);
    done += m;
    if(done == n && want_logits)
      block_logits(mo, s, m - 1);
  }
}

void
block_logits(const struct model *mo, struct state *s, int k)
{
  const struct config *c = &mo->c;
  begin_pass();
  memcpy(s->x, s->blk.x + k * c->dim, c->dim * sizeof(float));
  rmsnorm(s->xb, s->x, mo->w.rms_final, c->dim, c->norm_eps);
  prepare_input(s, c, s->xb, c->dim);
  matvec(mo, &mo->w.classifier, s, s->logits);
}

// ============================================================================ the sampler

void
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
int
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
