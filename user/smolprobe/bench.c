// smolprobe --bench: the guest's peak int8 multiply-add rate against the model's own
// matvecs (docs/smolprobe.md, "--bench").
#include "user/smolprobe/smolprobe.h"

// smolprobe --bench (docs/smolprobe.md, "--bench"; the target: the int8 matvec reaches
// >= 70% of the guest's peak int8 multiply-add rate). Two figures from the same run,
// measured in alternation, best of BENCH_ROUNDS each, so that a busy host slows both alike:
//  - peak: the faster of two tight hand-unrolled int8 x int8 -> int32 loops over a hot
//    2 KiB buffer (4 rows of 512 weights, one input), with no scales, no float work and
//    no row bookkeeping: the plain one (two byte loads, a multiply and an add per MAC,
//    unrolled 8x) and the packed one (the int8 matvec's inner step: two MACs per 64-bit
//    multiply, 2 rows sharing each input load);
//  - matvec: the model's matvec() itself over its real weights (w_gate of layer 0, 20
//    times, and the classifier once), input prepared once (prepare_input not timed);
//  - with Q4_1 blocks (bench_q4_1): the Q4_1 matvec over layer 0's Q4_1 matrices that
//    take a dim-sized input (all but w_down), BENCH_Q_REPS times.
// A MAC is one weight times one int8 input added to an integer sum.

#define BENCH_ROUNDS 3
#define BENCH_COLS 512              // peak kernels: 4 rows x 512 columns, L1-resident
#define BENCH_PEAK_REPS 12000       // 4 * 512 * 12000 = 24.6 M MACs per measurement
#define BENCH_GATE_REPS 20
#define BENCH_Q_REPS 4              // bench_q4_1: layer 0's Q4_1 matrices, 4 times a round

// The plain peak kernel: reps x sum over 4 rows of w[r][i] * x[i] (n a multiple of 8).
static LLM_HOT int
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
// row) with the packed input xp, the int8 matvec's inner step (two rows sharing each input
// load) without groups or scales.
static LLM_HOT int
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
  uint64 best[5];       // microseconds: plain, packed, w_gate x reps, classifier, Q4_1
  const struct matrix *q41[7];  // layer 0's Q4_1 matrices over dim inputs (bench_q4_1)
  int nq41;
  uint64 q41_macs;      // their MACs, times BENCH_Q_REPS
};

static void
bench_inputs(struct bench *b)
{
  uint64 st = 0x2545F4914F6CDD1DUL;
  b->w = llm_malloc(4 * BENCH_COLS, "bench");
  b->x = llm_malloc(BENCH_COLS, "bench");
  b->wb = llm_malloc(4 * BENCH_COLS + 8, "bench");
  b->xp = llm_malloc(BENCH_COLS / 2 * sizeof(uint64), "bench");
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
    llm_die("bench: the packed kernel disagrees with the plain one", "");
}

// One round: time each of the four measurements once, keep the best of each.
static void
bench_round(const struct model *mo, struct state *s, struct bench *b, int round)
{
  const struct matrix *gate = &mo->w.w_gate[0], *cls = &mo->w.classifier;
  uint64 t[5];
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
  t0 = clock_us();
  for(int i = 0; i < BENCH_Q_REPS; i++)
    for(int k = 0; k < b->nq41; k++)
      matvec(mo, b->q41[k], s, s->hb);
  t[4] = since(t0);
  for(int i = 0; i < 5; i++)
    if(round == 0 || t[i] < b->best[i])
      b->best[i] = t[i];
}

// smolprobe --bench: the lines described above (models with integer blocks only).
void
run_bench(const struct model *mo, struct state *s)
{
  static struct bench b;
  const struct config *c = &mo->c;
  if(!c->has[WEIGHT_INT8] && !c->has[WEIGHT_Q8_0] && !c->has[WEIGHT_Q4_1])
    llm_die("--bench measures the integer matvecs: the model is float32", "");
  const struct matrix *l0[7] = { &mo->w.wq[0], &mo->w.wk[0], &mo->w.wv[0], &mo->w.wo[0],
                                 &mo->w.w_gate[0], &mo->w.w_up[0], &mo->w.w_down[0] };
  for(int k = 0; k < 7; k++)
    if(l0[k]->type == WEIGHT_Q4_1 && l0[k]->cols == c->dim){
      b.q41[b.nq41++] = l0[k];
      b.q41_macs += (uint64)BENCH_Q_REPS * l0[k]->rows * l0[k]->cols;
    }
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
  if(b.nq41){
    uint64 q = rate(b.q41_macs, b.best[4]);
    printf("[smolprobe] bench_q4_1 matvec_q4_1_macs_per_s=%lu peak_int8_macs_per_s=%lu "
           "ratio=%lu%%\n", q, peak, q * 100 / peak);
  }
}

