// The user library's one leak balance (user/user.h), in a file of its own that uses
// nothing of the user ABI, so that the host build of smolserve (user/host) links it as is.
#include "kernel/types.h"
#include "kernel/memstat.h"
#include "user/user.h"

// Pages free net of swap: free RAM less the pages held in swap slots, and, with_cache,
// plus the pages the page cache holds. Paging a page out (a page freed, a slot taken) or
// in leaves it as it is, so "nothing leaked" compares this, not free_pages: with a swap
// disk other processes' pages may go out or come back meanwhile. The page cache counts
// for a program that maps a file it does not control (smolserve's model; swaptest, whose
// reclaim may drop other processes' file pages); a test of mmap itself leaves it out,
// since its pages must be gone when the last mapping goes (docs/memory.md).
long
memfree_net(const struct memstat *m, int with_cache)
{
  long n = (long)m->free_pages - (long)m->swap_slots_used;
  return with_cache ? n + (long)m->pagecache_pages : n;
}
