// freecheck: print the physical allocator's counters and the kernel configuration as
// "freecheck free_pages=<n> total_pages=<n> lazy_alloc=<0|1> cow_alloc=<0|1> ncpu=<n>
// mem=<MiB>". The harness runs it before and after other programs: once they have exited,
// free_pages must be back where it was.
#include "kernel/types.h"
#include "kernel/memstat.h"
#include "user/user.h"

int
main(void)
{
  struct memstat ms;

  if(memstat(&ms) < 0){
    fprintf(2, "freecheck: memstat failed\n");
    return 1;
  }
  printf("freecheck free_pages=%lu total_pages=%lu lazy_alloc=%d cow_alloc=%d ncpu=%d mem=%d\n",
         ms.free_pages, ms.total_pages, ms.lazy_alloc, ms.cow_alloc, ms.ncpu, ms.memsize_mb);
  return 0;
}
