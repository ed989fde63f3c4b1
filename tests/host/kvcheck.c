// kvcheck: the KV layout's page counts (user/llm/kv.c, compiled unchanged) for the
// geometries on the command line, so that tests/llm/test_kvcache.py can hold them equal to
// harness/nexos/programs/kvcache.py.
//
//   kvcheck N_LAYERS,KV_DIM,SEQ_LEN,ROWS ...
//
// prints one line per geometry:
//   kv n_layers=<n> kv_dim=<d> seq_len=<s> rows=<r> max_pages=<m> region_pages=<p> distinct_pages=<q>
#include "kernel/types.h"
#include "user/user.h"
#include "user/llm/kv.h"

// The next comma-separated decimal of *s (advanced past it and its comma), or -1.
static long
next_number(char **s)
{
  char *end;
  long v = strtol(*s, &end, 10);
  if(end == *s || v < 0 || (*end != ',' && *end != 0))
    return -1;
  *s = *end == ',' ? end + 1 : end;
  return v;
}

int
main(int argc, char **argv)
{
  if(argc < 2){
    fprintf(2, "usage: kvcheck N_LAYERS,KV_DIM,SEQ_LEN,ROWS ...\n");
    exit(2);
  }
  for(int i = 1; i < argc; i++){
    char *s = argv[i];
    long n[4];
    for(int k = 0; k < 4; k++)
      n[k] = next_number(&s);
    if(n[0] < 0 || n[1] < 0 || n[2] < 0 || n[3] < 0 || *s){
      fprintf(2, "kvcheck: bad geometry %s (want N_LAYERS,KV_DIM,SEQ_LEN,ROWS)\n", argv[i]);
      exit(2);
    }
    struct kv_layout kl;
    kv_layout(&kl, (int)n[0], (int)n[1], (int)n[2]);
    printf("kv n_layers=%ld kv_dim=%ld seq_len=%ld rows=%ld max_pages=%ld region_pages=%ld "
           "distinct_pages=%ld\n", n[0], n[1], n[2], n[3], kl.max_pages,
           kv_region_pages(&kl, (int)n[3]), kv_distinct_pages(&kl, (int)n[3]));
  }
  exit(0);
}
