// forkbench [MIB] [WRITE_PAGES]: how long fork() takes for a process with MIB MiB resident
// (default 128), and how many pages a child copies when it then writes WRITE_PAGES of them
// (default 64). Prints one line:
//
//   forkbench mib=<n> fork_us=<t> written_pages=<w> copied_pages=<c> cow_alloc=<0|1>
//
// fork_us is measured by the parent with clock_us() from just before fork() until fork()
// returns in the parent: with COW_ALLOC=0 that is the eager copy of every page, with
// COW_ALLOC=1 the sharing of the page table. The child waits on a pipe until the parent has
// read its clock, so that it cannot run during the measurement. copied_pages is the child's
// memstat cow_copies delta over its writes (0 when the kernel copies at fork).
// It prints figures; it never judges them. Exit status 1 when something fails.
#include "kernel/types.h"
#include "kernel/memstat.h"
#include "kernel/riscv.h"
#include "user/user.h"

// Print "forkbench: <msg>" on stderr and exit 1.
static void
die(const char *msg)
{
  fprintf(2, "forkbench: %s\n", msg);
  exit(1);
}

// Parse s as a number in [lo, hi], or die naming the argument.
static long
number(char *s, long lo, long hi, const char *what)
{
  char *end;
  long v = strtol(s, &end, 10);
  if(end == s || *end != 0 || v < lo || v > hi){
    fprintf(2, "forkbench: %s must be a number from %ld to %ld, not %s\n", what, lo, hi, s);
    exit(1);
  }
  return v;
}

// Grow the heap by npages page-aligned pages and write a word into each, so that every one
// is mapped and private before the fork (in every LAZY_ALLOC configuration).
static char *
touch_region(long npages)
{
  char *t = sbrk(0);
  uint64 pad = PGROUNDUP((uint64)t) - (uint64)t;
  if(pad && sbrk(pad) != t)
    die("sbrk to align the heap failed");
  char *p = sbrk(npages * PGSIZE);
  if(p == (char *)-1)
    die("sbrk failed (not enough memory for the region)");
  for(long i = 0; i < npages; i++)
    *(long *)(p + i * PGSIZE) = i + 1;
  return p;
}

// The child: wait for the parent's go, then write nwrite pages spread over the region
// (stride npages/nwrite) and send the cow_copies delta over those writes to the parent.
// The stack page becomes private (read() and the first memstat() copy out to it) before the
// baseline snapshot, so the delta counts only the region's pages.
static void
child(char *p, long npages, long nwrite, int go, int res)
{
  struct memstat a, b;
  char c;
  long copied, stride = nwrite > 0 ? npages / nwrite : 1;

  if(read(go, &c, 1) != 1)
    exit(1);
  memstat(&a);
  if(memstat(&a) < 0)
    exit(1);
  for(long i = 0; i < nwrite; i++)
    *(long *)(p + i * stride * PGSIZE) = -i;
  if(memstat(&b) < 0)
    exit(1);
  copied = (long)(b.cow_copies - a.cow_copies);
  if(write(res, &copied, sizeof(copied)) != sizeof(copied))
    exit(1);
  exit(0);
}

int
main(int argc, char *argv[])
{
  long mib = 128, nwrite = 64, npages, copied = -1;
  int go[2], res[2], pid, st = -1;
  struct memstat ms;
  uint64 t0, us;

  if(argc > 3)
    die("usage: forkbench [MIB] [WRITE_PAGES]");
  if(argc > 1)
    mib = number(argv[1], 1, 1024, "MIB");
  npages = mib * (1024 * 1024 / PGSIZE);
  if(argc > 2)
    nwrite = number(argv[2], 0, npages, "WRITE_PAGES");
  if(memstat(&ms) < 0)
    die("memstat failed");
  char *p = touch_region(npages);
  if(pipe(go) < 0 || pipe(res) < 0)
    die("pipe failed");

  t0 = clock_us();
  pid = fork();
  us = clock_us() - t0;
  if(pid < 0)
    die("fork failed (not enough memory for an eager copy?)");
  if(pid == 0)
    child(p, npages, nwrite, go[0], res[1]);

  if(write(go[1], "g", 1) != 1)
    die("write to the child failed");
  if(read(res[0], &copied, sizeof(copied)) != sizeof(copied))
    copied = -1;
  if(wait(&st) != pid || st != 0 || copied < 0)
    die("the child failed");
  printf("forkbench mib=%ld fork_us=%lu written_pages=%ld copied_pages=%ld cow_alloc=%d\n",
         mib, us, nwrite, copied, ms.cow_alloc);
  return 0;
}
