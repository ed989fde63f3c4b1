// smolprobe.h: what the files of smolprobe share. smolprobe is a SmolLM-135M-architecture
// transformer whose KV cache lives in one sbrk() reservation, run to show what lazy
// allocation does for an LLM server's KV memory (docs/smolprobe.md).
//
// It loads a NexOS checkpoint (docs/checkpoint.md), allocates and touches everything the
// model needs except the KV cache, snapshots memstat(), reserves the whole KV cache for
// seq_len positions with one sbrk() (never memset), snapshots again, feeds the prompt and
// generates, snapshots a third time, and prints how many KV pages the kernel mapped in each
// phase against the reservation (docs/smolprobe.md, "Output"). --perplexity feeds a text
// and scores each next token instead of generating (docs/smolprobe.md, "Perplexity").
//
// The model itself (loader, forward(), sampler, tokenizer) and the KV layout are the model
// library, user/llm/. The program, one file a job: main.c the command line, generate.c
// one request and its page accounting, samples.c --samples, bench.c --bench, text.c the
// tokenizer's text in and out.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/memstat.h"
#include "user/user.h"
#include "user/llm/llm.h"
#include "user/llm/tokenizer.h"
#include "user/llm/kv.h"
#include "user/llm/harts.h"
#include "kernel/riscv.h"      // PGSIZE

#define DEFAULT_SEQ_LEN 256       // --seq-len when not given (at most the model's max_seq_len)
#define DEFAULT_TEXT_GEN 64       // --gen-len of --prompt/--chat when not given
#define MAX_SAMPLES 6             // most --samples branches (file descriptors: samples.c)
#define PARALLEL_TEMPERATURE 0.8f  // --samples without --temperature
#define MAX_DIM LLM_MAX_DIM
// --chat's --prompt-cache: every chat begins with the template's system turn. The host test
// build (tests/host) has none by default: it would write into the host's root folder.
#ifdef NEXOS_TEST_HOOKS
#define CHAT_CACHE 0
#else
#define CHAT_CACHE "/chat.kv"
#endif

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
  int print_logits_hash; // --print-logits-hash: the final logits' FNV-1a, not the numbers
  int bench;            // --bench: the int8 micro-benchmark (alone, or after the request)
  int tokenize;         // --tokenize: encode the text, print its tokens, run no model
  int no_mmap;          // --no-mmap: read the model into the heap, never map it
  int harts;            // --harts N: harts the matvecs run on (0: all the kernel runs)
  const char *cache;    // --prompt-cache FILE (0: none; --chat's default CHAT_CACHE)
  int cache_reused;     // prompt positions whose K/V rows came from the cache file
  int cache_saved;      // prompt positions this run saved in it
  int cache_given;      // --prompt-cache was given (none included)
  int block;            // --prefill-block N: prompt positions fed at once (forward_block)
  int kill_branch;      // --test-kill-branch K (host test build only): branch K kills
                        // itself (K+1; 0: none)
  int kv_hash;          // --test-kv-hash (host test build only): print the K/V rows' hash
  const char *text;     // --prompt, --chat or --perplexity TEXT (the model's tokenizer)
  int score;            // 1: --perplexity (score the text, generate nothing)
  int chat;             // 1: --chat (the text is a user message, ChatML)
  int stop_eos;         // --stop-at-eos (default with --chat): end at <|im_end|>
  int eos[2];           // the ids that end the request with stop_eos
  int generated;        // tokens really generated (G unless it stopped at an eos)
  int fed;              // positions really fed (K/V rows written)
  uint64 first_us;      // clock_us() when the first token's logits were ready (0: not yet)
};

// generate.c
void align_break(void);
void reserve_cache(struct state *s, const struct kv_layout *kl);
long mapped_delta(const struct memstat *a, const struct memstat *b);
long used_delta(const struct memstat *a, const struct memstat *b);
long anon_pages(const struct memstat *m);
void note_first_token(struct options *o);
void print_weights(const struct model *mo);
long floor_div(long a, long b);
void print_summary(const struct kv_layout *kl, long active, const struct memstat *before,
                   const struct memstat *reserved, const struct memstat *done);
void feed(const struct model *mo, struct state *s, struct sampler *sp, struct options *o,
          int from, int to, const struct memstat *before);
double score_run(const struct model *mo, struct state *s, struct options *o);
void print_perplexity(int n, double nll);
void print_list(const char *prefix, const int *iv, const float *fv, int n);
void print_timing(const struct options *o, uint64 t0, uint64 t1, uint64 t2);

// cache.c
int cache_load(const struct model *mo, struct state *s, struct options *o);
int cache_save(const struct model *mo, const struct state *s, const struct options *o);
// samples.c
void parallel_main(const struct model *mo, struct state *s, struct options *o, float *probs,
                   const struct kv_layout *kl, uint64 t0);

// bench.c
void run_bench(const struct model *mo, struct state *s);

// text.c
void load_tokenizer(const struct model *mo, struct tokenizer *tok, const char *what);
void tokenize_main(struct options *o);
void encode_prompt(struct tokenizer *tok, struct options *o);
void print_text(const struct tokenizer *tok, const int *ids, int n);
void print_model(const struct model *mo);
