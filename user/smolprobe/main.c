// smolprobe's command line: parse the flags, load the model, run one request (or hand
// --samples to samples.c, --bench to bench.c) and print its lines (docs/smolprobe.md).
#include "user/smolprobe/smolprobe.h"
#include "kernel/param.h"

static void
usage(void)
{
  printf("usage: smolprobe (--prompt-tokens a,b,c | --prompt TEXT | --chat TEXT |\n"
         "                  --perplexity TEXT) [--gen-len N]\n"
         "                 [--seq-len N] [--model PATH] [--temperature T] [--seed S]\n"
         "                 [--stop-at-eos] [--print-tokens] [--print-logits]\n"
         "                 [--print-logits-hash] [--trace] [--samples N] [--bench]\n"
         "                 [--no-mmap] [--prefill-block N] [--harts N]\n"
         "                 [--prompt-cache FILE|none] [--help]\n"
         "       smolprobe --tokenize (--prompt TEXT | --chat TEXT) [--model PATH]\n"
         "Runs a SmolLM-135M-architecture transformer (default model %s) over a KV cache\n"
         "reserved with one sbrk() for --seq-len positions (default 256), and reports how\n"
         "many KV pages the kernel mapped while reserving and while decoding.\n"
         "The default model is the real SmolLM2-135M-Instruct (imported from its GGUF with\n"
         "its tokenizer, for --prompt/--chat); an image made with `make MODEL=synth` has\n"
         "SYNTHETIC weights instead (seeded random numbers, `nexos model synth`: meaningless\n"
         "tokens, exactly SmolLM-135M's memory behaviour). The `model` line says which.\n"
         "  --prompt-tokens  comma-separated token ids fed first (at least one)\n"
         "  --prompt TEXT    the prompt as text, encoded with the model's tokenizer; the\n"
         "                   generated text is printed on a `text:` line\n"
         "  --chat TEXT      TEXT as a user message in the model's chat template (ChatML);\n"
         "                   implies --stop-at-eos\n"
         "  --gen-len        tokens to generate (>= 0; default 64 with --prompt/--chat);\n"
         "                   every prompt and generated token is fed, so the run writes\n"
         "                   prompt+gen K/V rows\n"
         "  --perplexity TEXT  score TEXT (its tokens as encoded, no bos): feed every token\n"
         "                   and print the perplexity of each next token (generates none)\n"
         "  --stop-at-eos    end the request when the model emits <|im_end|>\n"
         "  --temperature    0 (default) = greedy; > 0 samples with --seed (default 0)\n"
         "  --print-tokens   print the generated ids; --print-logits the final logits\n"
         "  --print-logits-hash  print the FNV-1a hash of the final logits' bytes: two runs\n"
         "                   compared bit for bit in one line instead of vocab-size numbers\n"
         "  --trace          one line per fed position with the KV pages mapped so far\n"
         "  --samples N      prefill once, fork N branches (1..6) that each sample their\n"
         "                   own gen-len tokens (seed+i, temperature 0.8 unless given)\n"
         "                   over the shared prompt KV, and report the copy-on-write pages\n"
         "  --tokenize       print the prompt's tokens and stop: the model file is mapped\n"
         "                   and only its header and tokenizer are read, never the weights\n"
         "  --bench          integer micro-benchmark: the guest's peak int8 multiply-add\n"
         "                   rate and the model's matvecs (alone, or after the request)\n"
         "  --no-mmap        read the model into the heap with read() instead of mapping\n"
         "                   it (weights source=read): a private copy, as a version 1 or\n"
         "                   2 file always is, instead of the page cache's shared pages\n"
         "  --prefill-block N  prompt positions fed at once, each weight read once for\n"
         "                   them (1..64, default 16; 1: one at a time; the same numbers)\n"
         "  --harts N        split every matvec's rows across N harts (default: every hart\n"
         "                   the kernel runs; 1 with --samples, whose branches are the\n"
         "                   parallelism); the same numbers on any N (docs/harts.md)\n"
         "  --prompt-cache FILE  reuse the K/V rows of the longest prefix this prompt shares\n"
         "                   with the one saved in FILE, and save this prompt's rows there\n"
         "                   when FILE holds none usable (--chat: %s by default; none: off)\n",
         LLM_MODEL, CHAT_CACHE ? CHAT_CACHE : "none");
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
    llm_die(flag, ": expected a number");
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
    llm_die("--prompt-tokens: empty prompt (give at least one token id)", "");
  for(const char *p = s; *p; p++)
    n += *p == ',';
  if(n > MAX_DIM)
    llm_die("--prompt-tokens: too many tokens", "");
  int *ids = llm_malloc((uint64)n * sizeof(int), "prompt");
  const char *p = s;
  for(int i = 0; i < n; i++){
    long v = 0;
    int digits = 0;
    if(*p == '-')
      llm_die("--prompt-tokens: token ids cannot be negative: ", s);
    for(; *p >= '0' && *p <= '9'; p++, digits++)
      if(v < 1000000000L)
        v = v * 10 + (*p - '0');
    if(digits == 0 || (*p != ',' && *p != 0))
      llm_die("--prompt-tokens: expected comma-separated token ids, got ", s);
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
    llm_die(argv[*i], ": missing value");
  return argv[++*i];
}

// The --samples rules: branches generate (gen-len >= 1) and differ (temperature > 0 when
// N > 1; 0.8 when not given); --trace is off in branches (it would print from them).
static void
check_samples(struct options *o)
{
  if(o->gen_len < 1)
    llm_die("--samples needs --gen-len >= 1 (each branch generates its own tokens)", "");
  if(o->temperature < 0.0f){
    o->temperature = PARALLEL_TEMPERATURE;
    o->temp_text = "0.8";
  }
  if(o->samples > 1 && o->temperature == 0.0f)
    llm_die("--samples N > 1 needs --temperature > 0 (greedy branches would all be the same)", "");
  o->trace = 0;
}

static void
parse_args(int argc, char **argv, struct options *o)
{
  memset(o, 0, sizeof(*o));
  o->model = LLM_MODEL;
  o->gen_len = -1;
  o->temperature = -1.0f;
  o->block = LLM_PREFILL_BLOCK;
  o->harts = 0;
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
        llm_die("--temperature: want a number >= 0, got ", v);
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
    } else if(strcmp(a, "--print-logits-hash") == 0){
      o->print_logits_hash = 1;
    } else if(strcmp(a, "--trace") == 0){
      o->trace = 1;
    } else if(strcmp(a, "--bench") == 0){
      o->bench = 1;
    } else if(strcmp(a, "--tokenize") == 0){
      o->tokenize = 1;
    } else if(strcmp(a, "--no-mmap") == 0){
      o->no_mmap = 1;
    } else if(strcmp(a, "--prompt-cache") == 0){
      const char *v = flag_value(argc, argv, &i);
      o->cache = strcmp(v, "none") == 0 ? 0 : v;
      o->cache_given = 1;
    } else if(strcmp(a, "--harts") == 0){
      o->harts = parse_long(a, flag_value(argc, argv, &i), 1, NCPU);
    } else if(strcmp(a, "--prefill-block") == 0){
      o->block = parse_long(a, flag_value(argc, argv, &i), 1, LLM_MAX_BLOCK);
    } else if(strcmp(a, "--prompt") == 0 || strcmp(a, "--chat") == 0){
      if(o->text)
        llm_die("give one --prompt, --chat or --perplexity, not two: ", a);
      o->text = flag_value(argc, argv, &i);
      o->chat = a[2] == 'c';
    } else if(strcmp(a, "--perplexity") == 0){
      if(o->text)
        llm_die("give one --prompt, --chat or --perplexity, not two: ", a);
      o->text = flag_value(argc, argv, &i);
      o->score = 1;
    } else if(strcmp(a, "--stop-at-eos") == 0){
      o->stop_eos = 1;
#ifdef NEXOS_TEST_HOOKS
    // A test hook, compiled only into the host test build (tests/host/Makefile): the
    // guest's smolprobe has no flag that exists only for tests. See docs/smolprobe.md.
    } else if(strcmp(a, "--test-kill-branch") == 0){
      o->kill_branch = 1 + parse_long(a, flag_value(argc, argv, &i), 0, MAX_SAMPLES - 1);
    } else if(strcmp(a, "--test-kv-hash") == 0){
      o->kv_hash = 1;
#endif
    } else {
      llm_die("unknown flag (try --help): ", a);
    }
  }
  if(o->bench && o->tokens == 0 && o->text == 0 && o->gen_len < 0 && !o->samples &&
     !o->stop_eos)
    return;                                        // --bench alone: no request
  if(o->tokens && o->text)
    llm_die(o->chat ? "--chat" : "--prompt", " and --prompt-tokens: give one of them");
  if(o->tokens == 0 && o->text == 0)
    llm_die("--prompt-tokens, --prompt or --chat is required (try --help)", "");
  if(o->tokenize && (!o->text || o->score || o->tokens || o->gen_len >= 0 || o->seq_len ||
                     o->samples || o->stop_eos || o->bench || o->trace || o->print_tokens ||
                     o->print_logits || o->print_logits_hash || o->temperature >= 0.0f ||
                     o->seed || o->no_mmap))
    llm_die("--tokenize takes --prompt or --chat TEXT (and --model) alone: it runs no model",
            "");
  if(o->tokenize)
    return;
  if(o->chat)
    o->stop_eos = 1;
  if(o->chat && !o->cache_given && !o->bench)
    o->cache = CHAT_CACHE;
  if(o->cache && (o->samples || o->score || o->bench))
    llm_die("--prompt-cache goes with one request that generates (not --samples, "
            "--perplexity, --tokenize or --bench)", "");
  if(o->score && (o->gen_len >= 0 || o->samples || o->stop_eos || o->bench || o->trace ||
                  o->print_tokens || o->print_logits || o->print_logits_hash))
    llm_die("--perplexity scores its text alone (no --gen-len, --samples, --stop-at-eos, "
            "--bench, --trace, --print-tokens, --print-logits or --print-logits-hash)", "");
  if(o->score)
    o->gen_len = 0;
  if(o->gen_len < 0 && o->text)
    o->gen_len = DEFAULT_TEXT_GEN;
  if(o->gen_len < 0)
    llm_die("--gen-len is required (try --help)", "");
  if(o->samples && (o->text || o->stop_eos))
    llm_die("--samples takes --prompt-tokens (no --prompt, --chat or --stop-at-eos)", "");
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
  int *all = llm_malloc((uint64)(o->n_prompt + o->gen_len) * sizeof(int), "tokens");
  memset(all, 0, (o->n_prompt + o->gen_len) * sizeof(int));
  memcpy(all, o->tokens, o->n_prompt * sizeof(int));
  o->tokens = all;
}

// --test-kv-hash (host test build): the FNV-1a hash of the K/V rows 0..rows-1 of every
// layer, so that a test can hold two ways of feeding (--prefill-block) to the same rows.
static void
print_kv_hash(const struct config *c, const struct state *s, int rows)
{
  uint h = LLM_FNV_BASIS;
  uint64 bytes = (uint64)rows * c->kv_dim * sizeof(float);
  for(int l = 0; l < c->n_layers; l++){
    uint64 at = (uint64)l * s->seq_len * c->kv_dim;
    h = llm_fnv1a(h, s->key_cache + at, bytes);
    h = llm_fnv1a(h, s->value_cache + at, bytes);
  }
  printf("[smolprobe] test_kv_hash rows=%d fnv=%x\n", rows, h);
}

// --print-logits-hash: the FNV-1a hash of the final logits' bytes instead of the numbers
// (49152 of them for SmolLM2, seconds over the guest's UART), so that two runs (an eager
// and a lazy kernel, one hart and two) can be held bit for bit equal cheaply.
static void
print_logits_hash(const float *logits, int n)
{
  printf("[smolprobe] logits_hash n=%d fnv=%u\n", n,
         llm_fnv1a(LLM_FNV_BASIS, logits, (uint64)n * sizeof(float)));
}

// The harts the matvecs run on: --harts N, or every hart the kernel runs (memstat's ncpu);
// one with --samples. Starts the team (llm_harts: forks the helpers).
static void
start_harts(const struct config *c, struct options *o)
{
  struct memstat m;
  if(memstat(&m) < 0)
    llm_die("memstat failed", "");
  int ncpu = m.ncpu > 0 ? m.ncpu : 1;
  if(o->harts > ncpu){
    fprintf(2, "[smolprobe] error: --harts %d: the kernel runs %d hart%s (make CPUS=n)\n",
            o->harts, ncpu, ncpu == 1 ? "" : "s");
    exit(1);
  }
  if(o->samples){
    if(o->harts > 1)
      llm_die("--harts N > 1 does not go with --samples (its branches are the harts' work)",
              "");
    o->harts = 1;
  }
  if(o->harts == 0)
    o->harts = ncpu;
  llm_harts(c, o->harts);
  o->harts = harts_count();   // 1 where the kernel maps no shared file (docs/harts.md)
}

int
main(int argc, char **argv)
{
  llm_name = "smolprobe";
  static struct model mo;
  static struct state s;
  static struct options o;
  static struct tokenizer tok;
  struct sampler sp;
  struct kv_layout kl;
  struct memstat before, reserved, done;
  float *probs;

  parse_args(argc, argv, &o);
  printf("[smolprobe] loading LLM assets...\n");
  if(o.tokenize)
    tokenize_main(&o);
  uint64 t0 = clock_us();
  mo.no_mmap = o.no_mmap;
  load_model(o.model, &mo);
  print_model(&mo);
  print_weights(&mo);
  if(o.text || o.stop_eos){
    load_tokenizer(&mo, &tok, o.text ? (o.chat ? "--chat" : o.score ? "--perplexity" :
                   "--prompt") : "--stop-at-eos");
    o.eos[0] = tok.eos;
    o.eos[1] = tok.im_end;
  }
  if(o.text)
    encode_prompt(&tok, &o);
  if(o.tokens == 0){                               // --bench alone
    s.seq_len = 1;
    alloc_state(&mo.c, &s, &probs);
    run_bench(&mo, &s);
    exit(0);
  }
  check_request(&mo.c, &o);
  start_harts(&mo.c, &o);
  int total = o.n_prompt + o.gen_len;
  printf("[smolprobe] request prompt_tokens=%d gen_tokens=%d\n", o.n_prompt, o.gen_len);

  s.seq_len = o.seq_len;
  s.block = o.block;
  alloc_state(&mo.c, &s, &probs);
  sampler_init(&sp, o.temperature, o.seed, probs, mo.c.vocab_size);
  kv_layout(&kl, mo.c.n_layers, mo.c.kv_dim, o.seq_len);
  long active = kv_region_pages(&kl, total);
  printf("[smolprobe] kv_capacity max_pages=%ld active_pages_est=%ld\n", kl.max_pages, active);
  if(o.samples)
    parallel_main(&mo, &s, &o, probs, &kl, t0);
  align_break();
  uint64 t1 = clock_us();

  // From here to the last snapshot nothing is allocated or first touched but the KV rows.
  if(memstat(&before) < 0)
    llm_die("memstat failed", "");
  reserve_cache(&s, &kl);
  memstat(&reserved);
  printf("[smolprobe] running decode...\n");
  double nll = 0.0;
  if(o.cache)
    o.cache_reused = cache_load(&mo, &s, &o);
  if(o.score)
    nll = score_run(&mo, &s, &o);
  else
    feed(&mo, &s, &sp, &o, o.cache_reused, total, &before);
  memstat(&done);
  uint64 t2 = clock_us();
  if(o.cache && o.cache_reused == 0)
    o.cache_saved = cache_save(&mo, &s, &o);

  if((o.text && !o.score) || o.stop_eos)
    printf("[smolprobe] generated tokens=%d stopped_at_eos=%d\n", o.generated,
           o.fed < total);
  print_summary(&kl, kv_region_pages(&kl, o.fed), &before, &reserved, &done);
  if(o.cache)
    printf("[smolprobe] prompt_cache reused_tokens=%d saved_tokens=%d\n", o.cache_reused,
           o.cache_saved);
  print_timing(&o, t0, t1, t2);
  if(o.kv_hash)
    print_kv_hash(&mo.c, &s, o.fed);
  if(o.score)
    print_perplexity(o.n_prompt, nll);
  if(o.text && !o.score)
    print_text(&tok, o.tokens + o.n_prompt, o.generated);
  if(o.print_tokens)
    print_list("[smolprobe] tokens=", o.tokens + o.n_prompt, 0, o.generated);
  if(o.print_logits)
    print_list("[smolprobe] logits=", 0, s.logits, mo.c.vocab_size);
  if(o.print_logits_hash)
    print_logits_hash(s.logits, mo.c.vocab_size);
  if(o.bench)
    run_bench(&mo, &s);
  harts_stop();
  exit(0);
}

