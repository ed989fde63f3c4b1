// smolserve's command line: which workload, which model, the test hooks; then serve().
#include "user/smolserve/smolserve.h"

static void
usage(void)
{
  printf("usage: smolserve (--workload seed32|FILE | --requests N --max-len L [--seed S]\n"
         "                 [--long-len G] [--prefix-len K]) [--share-prefix 0|1]\n"
         "                 [--overcommit 0|1] [--prefill-block N] [--model PATH]\n"
         "                 [--test-kill ID] [--help]\n"
         "       smolserve --check-workload FILE\n"
         "Loads the model once and serves a workload of requests, each in a worker forked\n"
         "from the server that reserves its KV cache for max_len slots with one sbrk();\n"
         "admits requests while free memory stays above a low watermark, queues the rest,\n"
         "and runs again any request whose worker was killed (docs/smolserve.md).\n"
         "  --workload seed32  the seed's example: A (max 2048, prompt 7, generates 3) and\n"
         "                     B (max 512, prompt 3, generates 2)\n"
         "  --workload FILE    lines `id max_len prompt gen=N|eos`; prompt: ids a,b,c, or\n"
         "                     a,b:c (a,b a prefix requests share), or \"a chat message\"\n"
         "                     (its shared prefix: the chat template's system turn)\n"
         "  --check-workload FILE  read FILE as --workload does and print its requests,\n"
         "                     a line each in the file's syntax; loads no model\n"
         "  --requests N       N generated requests (1..64) of --max-len L slots: prompts of\n"
         "                     1-4 tokens, 7 in 8 generate 1..G/4 tokens, 1 in 8 up to G\n"
         "  --long-len G       the longest generated answer (default 16); --seed S its coin\n"
         "  --prefix-len K     every generated prompt begins with the same K tokens\n"
         "  --share-prefix 0   prefill every request alone, shared prefix or not (default 1:\n"
         "                     the server prefills each prefix once and forks its workers)\n"
         "  --overcommit 1     admit past what fits (no watermark): without swap the kernel\n"
         "                     kills workers and they are recomputed, with swap it pages\n"
         "                     their KV out and in; pressure lines say what it cost\n"
         "  --prefill-block N  prompt positions fed at once (1..64, default 16; 1: one at a\n"
         "                     time, the same numbers; docs/smolprobe.md)\n"
         "  --test-kill ID     test hook: request ID's first worker kills itself after\n"
         "                     its reservation (the server must run it again)\n"
         "  --test-fill 1      test hook: every first attempt writes its whole reservation\n"
         "                     (the kernel kills those it cannot feed; they run again)\n");
}

// A decimal flag value in [lo, hi], or die naming the flag.
static long
flag_num(const char *flag, const char *v, long lo, long hi)
{
  const char *p = v;
  long n = read_number(&p, hi);
  if(n < lo || *p){
    fprintf(2, "[smolserve] error: %s: '%s' is not a number in [%ld, %ld]\n", flag, v, lo, hi);
    exit(1);
  }
  return n;
}

int
main(int argc, char **argv)
{
  static struct server sv;
  const char *model = LLM_MODEL, *workload = 0, *kill_id = 0, *check = 0;
  long requests = 0, max_len = 0, seed = 0, long_len = 16, prefix_len = 0;
  llm_name = "smolserve";
  sv.share = 1;
  sv.s.block = LLM_PREFILL_BLOCK;
  for(int i = 1; i < argc; i++){
    const char *a = argv[i];
    if(strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0){
      usage();
      exit(0);
    }
    if(i + 1 >= argc)
      llm_die(a, strcmp(a, "--workload") && strcmp(a, "--requests") && strcmp(a, "--max-len") &&
              strcmp(a, "--seed") && strcmp(a, "--long-len") && strcmp(a, "--model") &&
              strcmp(a, "--test-kill") && strcmp(a, "--test-fill") &&
              strcmp(a, "--prefix-len") && strcmp(a, "--share-prefix") &&
              strcmp(a, "--overcommit") && strcmp(a, "--prefill-block") &&
              strcmp(a, "--check-workload") ? ": unknown flag (try --help)" : ": missing value");
    const char *v = argv[++i];
    if(strcmp(a, "--workload") == 0)
      workload = v;
    else if(strcmp(a, "--check-workload") == 0)
      check = v;
    else if(strcmp(a, "--requests") == 0)
      requests = flag_num(a, v, 1, MAX_REQ);
    else if(strcmp(a, "--max-len") == 0)
      max_len = flag_num(a, v, 2, LLM_MAX_DIM);
    else if(strcmp(a, "--seed") == 0)
      seed = flag_num(a, v, 0, 0x7fffffffL);
    else if(strcmp(a, "--long-len") == 0)
      long_len = flag_num(a, v, 1, LLM_MAX_DIM);
    else if(strcmp(a, "--prefix-len") == 0)
      prefix_len = flag_num(a, v, 0, MAX_PROMPT - 4);
    else if(strcmp(a, "--share-prefix") == 0)
      sv.share = flag_num(a, v, 0, 1);
    else if(strcmp(a, "--overcommit") == 0)
      sv.overcommit = flag_num(a, v, 0, 1);
    else if(strcmp(a, "--prefill-block") == 0)
      sv.s.block = flag_num(a, v, 1, LLM_MAX_BLOCK);
    else if(strcmp(a, "--model") == 0)
      model = v;
    else if(strcmp(a, "--test-kill") == 0)     // test hook, see docs/smolserve.md
      kill_id = v;
    else if(strcmp(a, "--test-fill") == 0)     // test hook, see docs/smolserve.md
      sv.fill = flag_num(a, v, 0, 1);
    else
      llm_die(a, ": unknown flag (try --help)");
  }
  if(check){   // the harness checks a file on the host this way (docs/smolserve.md)
    if(argc != 3)
      llm_die("--check-workload FILE goes alone", "");
    sv.n = load_workload(check, sv.rq);
    for(int i = 0; i < sv.n; i++)
      print_request(&sv.rq[i]);
    exit(0);
  }
  if(workload && (requests || max_len))
    llm_die("give --workload or --requests/--max-len, not both", "");
  if(!workload && (!requests || !max_len))
    llm_die("give --workload seed32|FILE, or --requests N --max-len L (try --help)", "");
  if(workload && prefix_len)
    llm_die("--prefix-len shapes a generated workload: give it with --requests", "");
  if(prefix_len && prefix_len >= max_len - 1)
    llm_die("--prefix-len must leave room in --max-len for a token of each request's own and "
            "one generated", "");
  if(workload && strcmp(workload, "seed32") == 0)
    sv.n = seed32_workload(sv.rq);
  else if(workload)
    sv.n = load_workload(workload, sv.rq);
  else
    sv.n = generate_workload(sv.rq, requests, max_len, long_len, prefix_len, seed);
  for(int i = 0; kill_id && i < sv.n; i++)
    if(strcmp(sv.rq[i].id, kill_id) == 0)
      sv.kill_req = i + 1;
  if(kill_id && !sv.kill_req)
    llm_die("--test-kill: no request with id ", kill_id);
  printf("[smolserve] loading LLM assets...\n");
  char name[32];
  snprintf(name, sizeof(name), "%s", workload ? workload : "generated");
  serve(&sv, model, name);
  exit(0);
}
