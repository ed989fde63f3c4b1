// smolserve's queue, finish, request, SERVE_SUMMARY, PREFIX_SUMMARY and memory lines
// (docs/smolserve.md, "Output").
#include "user/smolserve/smolserve.h"

// The queue line for request r (once per wait: until it is started again).
void
note_queue(struct server *sv, struct request *r, long free, long est, long wm,
           const char *reason)
{
  if(r->noted)
    return;
  r->noted = 1;
  if(!r->waited){
    r->waited = 1;
    sv->waited++;
  }
  long used = snapshot(sv, 0);
  printf("[smolserve] queue id=%s t_ms=%ld running=%d queued=%d free_pages=%ld est_pages=%ld "
         "watermark_pages=%ld reason=%s used_pages=%ld\n", r->id, t_ms(sv), sv->running,
         sv->qlen, free, est, wm, reason, used);
}

// Request r has finished: the finish line.
void
finish_request(struct server *sv, struct request *r)
{
  r->state = DONE;
  sv->completed++;
  sv->last_finish = clock_us();
  long used = snapshot(sv, 0);
  printf("[smolserve] finish id=%s t_ms=%ld running=%d queued=%d generated=%ld used_slots=%ld "
         "mapped_kv_pages=%ld decode_ms=%ld used_pages=%ld\n", r->id, t_ms(sv), sv->running,
         sv->qlen, r->generated, r->n_prompt + r->generated, r->mapped_pages,
         r->decode_us / 1000, used);
}

// floor(a / b) for a >= 0, b > 0 (0 when b is 0).
static long
pct(long a, long b)
{
  return b > 0 ? 100 * a / b : 0;
}

// PREFIX_SUMMARY: what the shared prefixes saved against prefilling each request alone.
// Prefill tokens: the prefixes' once, then each request's own. KV pages: a worker uses
// the prefix pages it still shares without holding them; the prefixes' own pages are the
// price (so without COW the saving is negative: every worker copied its prefix).
static void
print_prefix_summary(const struct server *sv)
{
  long prefill = 0, saved = 0, shared = 0, copied = 0, held = 0;
  int sharing = 0;
  for(int g = 0; g < sv->npx; g++){
    prefill += sv->px[g].n;
    saved -= sv->px[g].n;
    held += sv->px[g].mapped_pages;
  }
  for(int i = 0; i < sv->n; i++){
    const struct request *r = &sv->rq[i];
    int reused = r->prefix >= 0 ? sv->px[r->prefix].n : 0;
    prefill += r->n_prompt - reused;
    saved += reused;
    sharing += r->prefix >= 0;
    shared += r->shared_kv;
    copied += r->copied_kv;
  }
  printf("[smolserve] PREFIX_SUMMARY prefixes=%d sharing_requests=%d prefill_tokens=%ld "
         "prefill_tokens_saved=%ld prefix_kv_pages=%ld shared_kv_pages=%ld copied_kv_pages=%ld "
         "kv_pages_saved=%ld\n", sv->npx, sharing, prefill, saved, held, shared, copied,
         shared - held);
}

// --overcommit: a pressure line per request (workload order) and PRESSURE_SUMMARY: what
// memory pressure cost, as recompute (positions fed again after a kill) and as swap (the
// whole system's page-outs, page-ins and dropped file pages since the start line).
static void
print_pressure(const struct server *sv)
{
  long tokens = 0;
  struct memstat m;
  for(int i = 0; i < sv->n; i++){
    const struct request *r = &sv->rq[i];
    printf("[smolserve] pressure id=%s attempts=%d recomputed_tokens=%ld paged_out=%ld "
           "paged_in=%ld\n", r->id, r->attempts, r->recomputed_tokens, r->paged_out,
           r->paged_in);
    tokens += r->recomputed_tokens;
  }
  memstat(&m);
  printf("[smolserve] PRESSURE_SUMMARY completed=%d recomputed=%d recomputed_tokens=%ld "
         "swap_slots=%lu swap_outs=%lu swap_ins=%lu dropped_file_pages=%lu wall_ms=%lu\n",
         sv->completed, sv->recomputed, tokens, m.swap_slots, m.swap_outs - sv->ms0.swap_outs,
         m.swap_ins - sv->ms0.swap_ins, m.dropped_file_pages - sv->ms0.dropped_file_pages,
         (sv->last_finish - sv->t0) / 1000);
}

// The request lines (workload order), SERVE_SUMMARY, PREFIX_SUMMARY, with --overcommit the
// pressure lines, and the memory line.
void
print_summary(struct server *sv)
{
  long reserved = 0, mapped = 0, needed = 0, slots = 0;
  for(int i = 0; i < sv->n; i++){
    struct request *r = &sv->rq[i];
    long used = r->n_prompt + r->generated;
    struct kv_layout kl;
    plan_kv(sv, r->max_len, &kl);
    long need = kv_distinct_pages(&kl, (int)used);
    printf("[smolserve] request id=%s max_len=%d prompt=%d generated=%ld reserved_slots=%d "
           "used_slots=%ld internal_waste_slots=%ld reserved_kv_pages=%ld mapped_kv_pages=%ld "
           "needed_kv_pages=%ld attempts=%d prefix_tokens=%d shared_kv_pages=%ld "
           "copied_kv_pages=%ld answer_fnv=%u\n", r->id, r->max_len, r->n_prompt,
           r->generated, r->max_len, used, r->max_len - used, r->reserved_pages,
           r->mapped_pages, need, r->attempts, r->prefix >= 0 ? sv->px[r->prefix].n : 0,
           r->shared_kv, r->copied_kv, r->answer_fnv);
    reserved += r->reserved_pages;
    mapped += r->mapped_pages;
    needed += need;
    slots += used;
  }
  uint64 us = sv->last_finish - sv->first_admit;
  us = us > 0 ? us : 1;
  uint64 tps10 = (uint64)slots * 10000000UL / us;
  printf("[smolserve] SERVE_SUMMARY requests=%d completed=%d peak_concurrent=%d queued=%d "
         "recomputed=%d reserved_kv_pages=%ld mapped_kv_pages=%ld waste_percent=%ld%% "
         "peak_used_pages=%ld tokens_per_s=%lu.%lu\n", sv->n, sv->completed, sv->peak,
         sv->waited, sv->recomputed, reserved, mapped,
         pct(mapped - needed > 0 ? mapped - needed : 0, mapped), sv->peak_used,
         tps10 / 10, tps10 % 10);
  print_prefix_summary(sv);
  if(sv->overcommit)
    print_pressure(sv);
  long free;
  snapshot(sv, &free);
  // Net of swap and of the page cache: a page paged out meanwhile frees a page and takes
  // a slot, a model page reclaim dropped frees a page the cache held; neither is a leak
  // (docs/memory.md).
  struct memstat m;
  memstat(&m);
  long leaked = memfree_net(&sv->ms0, 1) - memfree_net(&m, 1);
  printf("[smolserve] memory baseline_free_pages=%ld final_free_pages=%ld leaked_pages=%ld\n",
         sv->baseline_free, free, leaked);
}
