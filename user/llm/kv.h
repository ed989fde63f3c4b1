// kv.h: the layout of one request's KV cache and the pages a run of it touches
// (docs/kvcache.md). smolprobe and smolserve both reserve it this way; the harness mirrors
// it in harness/nexos/programs/kvcache.py.
//
// One page-aligned sbrk() reservation of 2 * n_layers regions, the key layers then the
// value layers; region r starts at byte r * region_bytes and holds seq_len rows of kv_dim
// float32, row pos being position pos of that layer. Nothing is written until forward()
// stores row pos, so under lazy allocation a page is mapped when the first row on it is.

#define KV_PAGE 4096

struct kv_layout {
  int regions;          // 2 * n_layers
  uint64 row_bytes;     // kv_dim * 4: one position of one region
  uint64 region_bytes;  // seq_len * row_bytes
  uint64 bytes;         // regions * region_bytes: the whole reservation
  long max_pages;       // ceil(bytes / KV_PAGE)
  int seq_len;
};

void kv_layout(struct kv_layout *kl, int n_layers, int kv_dim, int seq_len);
long kv_region_pages(const struct kv_layout *kl, int rows);
long kv_distinct_pages(const struct kv_layout *kl, int rows);
int kv_align_break(void);
void kv_place(const struct kv_layout *kl, char *base, float **keys, float **values);
