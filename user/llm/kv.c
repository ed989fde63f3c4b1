// kv.c: the KV reservation's layout and its page counts (user/llm/kv.h, docs/kvcache.md).
#include "kernel/types.h"
#include "user/user.h"
#include "user/llm/kv.h"

// Fill *kl for a model of n_layers layers of kv_dim key (and value) floats per position,
// reserved for seq_len positions.
void
kv_layout(struct kv_layout *kl, int n_layers, int kv_dim, int seq_len)
{
  kl->regions = 2 * n_layers;
  kl->row_bytes = (uint64)kv_dim * sizeof(float);
  kl->region_bytes = (uint64)seq_len * kl->row_bytes;
  kl->bytes = (uint64)kl->regions * kl->region_bytes;
  kl->max_pages = (kl->bytes + KV_PAGE - 1) / KV_PAGE;
  kl->seq_len = seq_len;
}

// Rows [0, rows) of every region lie in bytes [start, start + rows * row_bytes) of the
// reservation, start = r * region_bytes. rows is clamped to [0, seq_len].
static int
kv_rows(const struct kv_layout *kl, int rows)
{
  if(rows < 0)
    return 0;
  return rows < kl->seq_len ? rows : kl->seq_len;
}

// Pages that rows [0, rows) span, region by region, summed: a page two regions share
// counts twice (smolprobe's active_pages_est).
long
kv_region_pages(const struct kv_layout *kl, int rows)
{
  long pages = 0;
  rows = kv_rows(kl, rows);
  if(rows == 0)
    return 0;
  for(int r = 0; r < kl->regions; r++){
    uint64 start = r * kl->region_bytes, end = start + rows * kl->row_bytes;   // [start, end)
    pages += (end - 1) / KV_PAGE - start / KV_PAGE + 1;
  }
  return pages;
}

// Distinct pages that rows [0, rows) touch, each page once: what the page table maps for
// them under lazy allocation. Regions are in address order, so a page shared with the
// previous region is the only one that can repeat.
long
kv_distinct_pages(const struct kv_layout *kl, int rows)
{
  long pages = 0, last = -1;
  rows = kv_rows(kl, rows);
  if(rows == 0)
    return 0;
  for(int r = 0; r < kl->regions; r++){
    uint64 start = r * kl->region_bytes;
    long first = start / KV_PAGE, end = (start + rows * kl->row_bytes - 1) / KV_PAGE;
    if(first <= last)
      first = last + 1;
    if(end >= first)
      pages += end - first + 1;
    if(end > last)
      last = end;
  }
  return pages;
}

// Move the break to a page boundary, so that the next sbrk() (the reservation) starts on
// one. Returns 0, or -1 when the pad cannot be had.
int
kv_align_break(void)
{
  uint64 brk = (uint64)sbrk(0);
  int pad = (int)((KV_PAGE - brk % KV_PAGE) % KV_PAGE);
  if(pad && sbrk(pad) == (char *)-1)
    return -1;
  return 0;
}

// Point the key and value caches into the reservation at base.
void
kv_place(const struct kv_layout *kl, char *base, float **keys, float **values)
{
  *keys = (float *)base;
  *values = (float *)(base + kl->regions / 2 * kl->region_bytes);
}
