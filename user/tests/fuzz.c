// fuzz: a system-call fuzzer (docs/fuzz.md). Several worker processes make random system
// calls from the whole table of kernel/syscall.h with random and hostile arguments: bad,
// kernel and wrapping addresses, the stack guard page, the trapframe and trampoline, heap
// above its top, huge and negative lengths, closed, wrong and out-of-range descriptors,
// stray flag bits; sbrk, mmap and munmap interleaved; fork, kill, wait and exit racing;
// pipes, files and directories under a private folder. Every result that a process can
// predict from what it knows of itself (its descriptors, heap, mmap regions and children)
// is checked. Afterwards the parent removes what the workers left in the file system and
// checks that free pages (net of swap), swap slots and the page cache are back.
//
//   fuzz [--seed N] [--procs P] [--ops N | --seconds S] [--hog] [--verbose]
//
// P workers (default 4, at most MAXPROCS) each make N operations (default 1000) or stop
// after S seconds. An operation is one system call, or a few when one prepares another.
// Each worker has its own xorshift stream, derived from the seed and its number, and each
// child it forks one from a value it drew; every operation seeds its own generator from one
// number of its process's stream. So the same options give every process the same
// operations with the same random arguments; what timing decides (which child exits
// first, a full process table) may change a call, not the next operation. A process that
// sees an impossible result prints
//   fuzz: FAIL <who> op <i> <call>: <what>; repro: fuzz --seed S --procs P --ops N
// (one line, N the worker's operation to run up to) and exits FAILCODE, which its parent
// passes on. --verbose prints a line `fz w<k>.<depth> op <i> <call>` before every call.
// --hog (with a swap disk) adds one process that holds more memory than is free and keeps
// storing into it, so that reclaim pages the workers' memory out while they run.
// Output: `fuzz: start ...`, the FAIL lines if any, `test workers: OK|FAILED`,
// `test leakcheck: OK|FAILED`, the summary `fuzz: done ...`, and ALL TESTS PASSED or
// SOME TESTS FAILED as the last line (docs/testing.md).
//
// What keeps the fuzzer itself safe (it must not hang, nor damage itself or anything
// outside its folder):
//   - The kernel stores only into scratch memory (a static buffer, the heap, mmap regions)
//     or into memory where the store must fail (text, unmapped, kernel addresses): never
//     into the program's data, bss or stack, whatever the length.
//   - No read on an empty pipe whose write end this process holds, no write larger than
//     the room in a pipe, no read from the console (it would wait for input); the console
//     is written only from addresses where nothing can be copied. Children close the pipe
//     ends they inherit first thing. wait() only when some child will exit by itself.
//   - Paths stay below the worker's folder: ".." only as deep as the process went down.
//     Device nodes never get the console's major number.
//   - Memory stays modest: heap and eagerly mapped region pages are capped per process
//     from memstat (the OOM killer must never be needed); a huge lazy sbrk is given back
//     at once; files stop growing at FILECAP.
//   - A mapping is never the buffer of a file read()/write() while a child could do the
//     same the other way round (docs/memory.md's known lock-order limit); only a worker
//     without children uses one.

#include "user/tests/testlib.h"
#include "kernel/syscall.h"
#include "kernel/fs.h"

#define MAXPROCS  8        // workers at most
#define MAXKIDS   3        // children a process has at once
#define NREG      16       // mmap regions a process may have (the kernel's NVMA, kernel/proc.h)
#define PIPEBUF   (4 * PGSIZE)  // bytes a pipe holds (kernel/pipe.c's PIPESIZE)
#define PIPECHUNK 512      // a pipe copies to and from user memory this many bytes at a time
#define FAILCODE  77       // exit status of a process that printed a FAIL line
#define KILLCODE  78       // ... that printed one because the kernel killed a child
#define XCODE     33       // exit status of `fuzz -x`, what exec'd children run
#define EXECFAIL  35       // a child whose exec() returned -1 exits with this
#define NAP       100      // ticks a sleeper child sleeps at a time, until its parent kills it
#define SCRATCH   (2 * PGSIZE)
#define WCAP      (64 * 1024)   // bytes one write() may add to a file
#define FILECAP   (256 * 1024)  // a file this long gets no more valid writes
#define NGONE     8        // reaped pids remembered (kill() of them must fail)
#define MAXCD     3        // how deep below its folder a process chdirs
#define MAXFILES  5        // files a process keeps open (see op_open)
#define MAXRMDEPTH 24      // levels of directories cleanup goes down (its stack is one page)
#define REC_TAG   0xa5UL   // top byte of a report record
#define HOGTOUCH  256      // pages the hog stores into every other tick

// ---------------------------------------------------------------- state of one process

enum { K_FREE, K_CONS, K_RESV, K_FILE, K_DIR, K_DEV, K_PIPER, K_PIPEW };
enum { F_EXIT, F_SUICIDE, F_SLEEP, F_EXECOK, F_EXECBAD, F_PIPEW };

struct fdi {             // what this process knows of one descriptor
  char kind;             // K_*
  char rd, wr;           // opened for reading, writing
  char pipe;             // pipes[] index of a pipe end
};

struct fpipe {           // a pipe with an end in this process
  int live;
  int rfds, wfds;        // this process's descriptors of each end
  uint64 queued;         // bytes in it (nobody else reads or writes it)
  uint64 wpos, rpos;     // stream positions of the next byte written, read
  int known;             // every queued byte is pattern(stream position)
};

struct region { uint64 start, len; int prot, flags; };

struct kid { int pid, fate, code, killed; };

static struct {
  int id, depth;         // worker number; 0 worker, 1 its child, 2 grandchild
  long op;               // this process's operation number
  long forkop;           // the worker's operation that forked this line (repro)
  int pid, ppid;
  uint64 calls;
  int forks, kills;
  const char *call;      // the system call being made
} me;

static uint64 o_seed = 1;
static int o_procs = 4, o_verbose, o_hog;
static long o_ops = 1000, o_secs;
static uint64 deadline;                // clock_us() at which workers stop (0: --ops)
static char topdir[24], base[40];      // /fuzz.<pid> and this worker's /fuzz.<pid>/w<k>
static int lazy, cow;                  // the kernel's policies (memstat)
static uint64 sbrkcap_pages;           // the most pages plain sbrk allows (memstat)
static uint64 stream;                  // this process's random stream: one number an operation
static uint64 rs;                      // the operation's own generator, seeded from stream

static uint64 guard, datastart, heapbase, sz;   // the layout; the heap is [heapbase, sz)
static uint64 heapcap, mapcap;         // pages of heap, of eagerly mapped regions, at most
static struct region regs[NREG];
static struct fdi fds[NOFILE];
static struct fpipe pipes[NOFILE];
static int gone[NGONE], ngone;
static int depthcd;                    // directories below base (see op_chdir)
static uint sumtext;                   // checksum of the text, checked at the end
static uint lastup;                    // the last uptime() seen
static char scratch[SCRATCH] __attribute__((aligned(PGSIZE)));
static char why[200], pdesc[48];
static char pbuf[2 * MAXPATH + 8];      // paths built for a call

static const char *fnames[] = { "f0", "f1", "f2", "f3", "l0123456789abcdefg", "n0" };
static const char *dnames[] = { "d0", "d1", "d2" };
#define NF (sizeof(fnames) / sizeof(fnames[0]))
#define ND (sizeof(dnames) / sizeof(dnames[0]))

// ---------------------------------------------------------------- random numbers

// splitmix64's finalizer: seeds the xorshift streams from small numbers.
static uint64 mix(uint64 x)
{
  x += 0x9E3779B97F4A7C15UL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9UL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBUL;
  return x ^ (x >> 31);
}

// xorshift64*: the next number of generator *x.
static uint64 xorshift(uint64 *x)
{
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717UL;
}

// The operation's next random number. Each operation seeds rs from one number of the
// process's stream, so the n-th operation makes the same choices however many numbers
// the ones before it drew (that depends on results, which depend on timing).
static uint64 r64(void) { return xorshift(&rs); }

static uint64 rn(uint64 n) { return n ? r64() % n : 0; }
static int one_in(int n) { return rn(n) == 0; }
static uint64 min(uint64 a, uint64 b) { return a < b ? a : b; }

// ---------------------------------------------------------------- failures

static struct kid kids[MAXKIDS];
static int resv = -1;       // the write end of the report pipe (see report())

// Report this process's counts to the parent: one record of 8 bytes into the report pipe,
// which every process of the run holds. Whoever reaps this process, the parent learns of
// its failure (code FAILCODE or KILLCODE) here. Bits: 63..56 REC_TAG, 55 failed, 54 a
// child was killed by the kernel, 53..44 kill() calls that hit a child, 43..32 forks,
// 31..0 system calls.
static void report(int code)
{
  uint64 rec = (REC_TAG << 56) | ((uint64)(code != 0) << 55) |
               ((uint64)(code == KILLCODE) << 54) | ((uint64)min(me.kills, 0x3ff) << 44) |
               ((uint64)min(me.forks, 0xfff) << 32) | min(me.calls + 1, 0xffffffffUL);
  me.call = "write";
  me.calls++;
  if (write(resv, &rec, sizeof(rec)) != sizeof(rec) && code == 0) {
    printf("fuzz: FAIL worker %d pid %d: write of the report record failed\n", me.id, me.pid);
    exit(FAILCODE);
  }
}

// Print the one FAIL line (why[] says what) and exit FAILCODE (or code). The children are
// killed first: a sleeper would otherwise outlive this process by a nap.
static void failwith(int code)
{
  long upto = (me.depth ? me.forkop : me.op) + 1;
  for (int k = 0; k < MAXKIDS; k++)
    if (kids[k].pid)
      kill(kids[k].pid);
  const char *who = me.depth == 0 ? "" : me.depth == 1 ? " child" : " grandchild";
  printf("fuzz: FAIL worker %d%s pid %d op %ld %s: %s; repro: fuzz --seed %ld --procs %d "
         "--ops %ld%s\n", me.id, who, me.pid, me.op, me.call ? me.call : "-", why, (long)o_seed,
         o_procs, upto, o_hog ? " --hog" : "");
  report(code);
  exit(code);
}

#define FCHECK(c, ...) do { \
    if (!(c)) { snprintf(why, sizeof(why), __VA_ARGS__); failwith(FAILCODE); } \
  } while (0)

// Count one system call and name it for a FAIL line (and --verbose).
static void at(const char *call)
{
  me.call = call;
  me.calls++;
  if (o_verbose)
    printf("fz w%d.%d op %ld %s\n", me.id, me.depth, me.op, call);
}

// ---------------------------------------------------------------- the address space

static uint64 heaptop(void) { return PGROUNDUP(sz); }

// The region holding address a, or 0.
static struct region *region_at(uint64 a)
{
  for (struct region *r = regs; r < regs + NREG; r++)
    if (r->len && a >= r->start && a - r->start < r->len)
      return r;
  return 0;
}

// The region that starts exactly at a, or 0.
static struct region *region_from(uint64 a)
{
  for (struct region *r = regs; r < regs + NREG; r++)
    if (r->len && r->start == a)
      return r;
  return 0;
}

static int nregions(void)
{
  int n = 0;
  for (struct region *r = regs; r < regs + NREG; r++)
    n += r->len != 0;
  return n;
}

// 1 if [a, a+len) meets no region.
static int isfree(uint64 a, uint64 len)
{
  for (struct region *r = regs; r < regs + NREG; r++)
    if (r->len && a < r->start + r->len && r->start < a + len)
      return 0;
  return 1;
}

// Where sbrk must stop: the lowest region, or TRAPFRAME.
static uint64 sbrk_floor(void)
{
  uint64 f = TRAPFRAME;
  for (struct region *r = regs; r < regs + NREG; r++)
    if (r->len && r->start < f)
      f = r->start;
  return f;
}

// Bytes the kernel can copy from address a on (into it when store) before it meets memory
// that is not (writable) user memory. Text and data run up to the guard page; the stack
// and the heap up to the heap's last page (the kernel maps that page whole), then any
// regions that follow without a gap. Text takes no store.
static uint64 extent(uint64 a, int store)
{
  uint64 end;
  struct region *r;
  if (a < guard)
    return store && a < datastart ? 0 : guard - a;
  if (a < guard + PGSIZE)
    return 0;
  if (a < heaptop()) {
    end = heaptop();
  } else {
    if ((r = region_at(a)) == 0 || (store && !(r->prot & PROT_WRITE)))
      return 0;
    end = r->start + r->len;
  }
  while ((r = region_from(end)) != 0 && (!store || (r->prot & PROT_WRITE)))
    end += r->len;
  return end - a;
}

// An address where the kernel can copy nothing at all: unmapped, the guard page, kernel
// memory, the trapframe and trampoline, above MAXVA, ranges that wrap around.
static uint64 bad_addr(void)
{
  for (;;) {
    uint64 a;
    switch (rn(11)) {
    case 0: a = guard + rn(PGSIZE); break;
    case 1: a = heaptop() + rn(64) * PGSIZE + rn(PGSIZE); break;
    case 2: a = KERNBASE + rn(PHYSTOP - KERNBASE); break;
    case 3: a = TRAPFRAME + rn(PGSIZE); break;
    case 4: a = TRAMPOLINE + rn(PGSIZE); break;
    case 5: a = MAXVA - 1 - rn(16); break;
    case 6: a = MAXVA + rn(1UL << 20); break;
    case 7: a = ~0UL - rn(64); break;
    case 8: a = (1UL << 63) + rn(1UL << 20); break;
    case 9: a = r64() | MAXVA; break;
    default: a = r64() & (MAXVA - 1); break;
    }
    if (extent(a, 0) == 0)
      return a;
  }
}

// An address where a store by the kernel must fail at once (bad, text, a read-only region).
static uint64 bad_store(void)
{
  struct region *r = &regs[rn(NREG)];
  switch (rn(5)) {
  case 0: return rn(datastart);                          // text and read-only data
  case 1: return 0;
  case 2:
    if (r->len && !(r->prot & PROT_WRITE))
      return r->start + rn(r->len);
    return bad_addr();
  default: return bad_addr();
  }
}

// 1 if this process may use a mapping as a file read()/write() buffer (see the top).
static int maps_for_fileio(void)
{
  for (int k = 0; k < MAXKIDS; k++)
    if (kids[k].pid)
      return 0;
  return me.depth == 0;
}

// 1 if a copy of file data from or to heap address a could run on into a mapping that
// this process may not use for that (see maps_for_fileio): a region right above the heap.
static int spills(uint64 a)
{
  return a >= heapbase && a < heaptop() && region_from(heaptop()) && !maps_for_fileio();
}

// A destination for the kernel's stores of up to *n bytes. A static scratch slot cuts *n
// to fit it (fixed: *n stays and the slot fits it); the heap and regions take any length
// (what runs past them fails). Never the program's data, bss or stack.
static uint64 pick_dst(uint64 *n, int fixed, int fileio)
{
  struct region *r = &regs[rn(NREG)];
  uint64 off;
  switch (rn(10)) {
  case 0: case 1: case 2:
    break;
  case 3: case 4:
    if (sz > heapbase) {
      uint64 a = one_in(3) ? sz - 1 - rn(min(sz - heapbase, 64)) : heapbase + rn(sz - heapbase);
      if (fileio && spills(a))
        *n = min(*n, heaptop() - a);
      return a;
    }
    break;
  case 5:
    if (r->len && (!fileio || maps_for_fileio()))
      return r->start + rn(r->len);
    break;
  case 6: case 7:
    return bad_store();
  }
  if (fixed) {
    off = rn(SCRATCH - min(*n, SCRATCH) + 1);
  } else {
    off = rn(SCRATCH);
    if (*n > SCRATCH - off)
      *n = rn(SCRATCH - off + 1);
  }
  return (uint64)scratch + off;
}

// A source for the kernel's loads: anything readable (text, data, stack, heap, scratch,
// regions) or bad.
static uint64 pick_src(int fileio)
{
  struct region *r = &regs[rn(NREG)];
  switch (rn(10)) {
  case 0: return rn(datastart);
  case 1: return datastart + rn(guard - datastart);
  case 2: return heapbase - 1 - rn(PGSIZE / 2);              // the stack
  case 3: case 4:
    if (sz > heapbase)
      return heapbase + rn(sz - heapbase);
    break;
  case 5:
    if (r->len && (!fileio || maps_for_fileio()))
      return r->start + rn(r->len);
    break;
  case 6: case 7:
    return bad_addr();
  }
  return (uint64)scratch + rn(SCRATCH);
}

// A count for read()/write(): small, zero, negative, a page or so, huge, anything.
static int pick_len(void)
{
  switch (rn(12)) {
  case 0: return 0;
  case 1: return 1;
  case 2: return -1 - (int)rn(5);
  case 3: return (int)0x80000000;
  case 4: return 0x7fffffff;
  case 5: return PGSIZE - 1 + (int)rn(3);
  case 6: return (int)rn(1 << 20);
  case 7: return (int)r64();
  default: return 1 + (int)rn(700);
  }
}

// ---------------------------------------------------------------- descriptors

static int kind(int fd) { return fd >= 0 && fd < NOFILE ? fds[fd].kind : K_FREE; }

// The lowest free descriptor above `after`, or -1.
static int low_free(int after)
{
  for (int fd = after + 1; fd < NOFILE; fd++)
    if (fds[fd].kind == K_FREE)
      return fd;
  return -1;
}

// A descriptor to use: mostly an open one (never the report pipe; the console ones only
// when cons), else a closed one or a number no descriptor can have.
static int pick_fd(int cons)
{
  if (rn(4)) {
    int fd = rn(NOFILE);
    for (int i = 0; i < NOFILE; i++, fd = (fd + 1) % NOFILE) {
      int k = fds[fd].kind;
      if (k != K_FREE && k != K_RESV && (cons || k != K_CONS))
        return fd;
    }
  }
  switch (rn(7)) {
  case 0: return -1;
  case 1: return -1 - (int)rn(1000);
  case 2: return NOFILE + (int)rn(100);
  case 3: return 0x7fffffff;
  case 4: return (int)0x80000000;
  default: {
    int fd = low_free(2);
    return fd >= 0 ? fd : -1;
  }
  }
}

// Record a new descriptor fd of kind k.
static void note_fd(int fd, int k, int rd, int wr, int pipe)
{
  fds[fd].kind = k;
  fds[fd].rd = rd;
  fds[fd].wr = wr;
  fds[fd].pipe = pipe;
  if (k == K_PIPER)
    pipes[pipe].rfds++;
  if (k == K_PIPEW)
    pipes[pipe].wfds++;
}

// Forget descriptor fd (closed); a pipe with no end left here is forgotten too.
static void forget_fd(int fd)
{
  struct fdi *f = &fds[fd];
  if (f->kind == K_PIPER || f->kind == K_PIPEW) {
    struct fpipe *p = &pipes[(int)f->pipe];
    if (f->kind == K_PIPER)
      p->rfds--;
    else
      p->wfds--;
    if (p->rfds == 0 && p->wfds == 0)
      p->live = 0;
  }
  f->kind = K_FREE;
}

// close(fd), which must succeed.
static void must_close(int fd)
{
  at("close");
  FCHECK(close(fd) == 0, "close of open fd %d failed", fd);
  forget_fd(fd);
}

// A child's first step: close every pipe end it inherited but keep (-1: none).
static void close_pipes(int keep)
{
  for (int fd = 0; fd < NOFILE; fd++)
    if ((fds[fd].kind == K_PIPER || fds[fd].kind == K_PIPEW) && fd != keep)
      must_close(fd);
}

// ---------------------------------------------------------------- paths

// A path below the current directory or base, built in pbuf or on the heap; *bad says
// whether the kernel must refuse it whatever the file system holds (a bad pointer, too
// long, not terminated). dir: prefer directory names.
static uint64 pick_path(int *bad, int dir)
{
  const char *name = dir && rn(4) ? dnames[rn(ND)] : fnames[rn(NF)];
  *bad = 0;
  switch (rn(16)) {
  case 0: snprintf(pbuf, MAXPATH, "%s/%s", dnames[rn(ND)], name); break;
  case 1: snprintf(pbuf, MAXPATH, "%s/%s/%s", dnames[rn(ND)], dnames[rn(ND)], name); break;
  case 2: snprintf(pbuf, MAXPATH, "%s/%s", base, name); break;
  case 3: snprintf(pbuf, MAXPATH, "%s/../%s", dnames[rn(ND)], name); break;
  case 4: snprintf(pbuf, MAXPATH, "./%s/", name); break;
  case 5: snprintf(pbuf, MAXPATH, "%s//%s", dnames[rn(ND)], name); break;
  case 6: snprintf(pbuf, MAXPATH, "%s", one_in(2) ? "." : ""); break;
  case 7:
    if (depthcd > 0) {
      snprintf(pbuf, MAXPATH, "../%s", name);
      break;
    }
    snprintf(pbuf, MAXPATH, "%s", name);
    break;
  case 8: {                    // the longest path there may be: ./././.../name
    int n = MAXPATH - 1 - strlen(name), i = 0;
    for (; i + 2 <= n; i += 2)
      memmove(pbuf + i, "./", 2);
    memset(pbuf + i, '/', n - i);
    strcpy(pbuf + n, name);
    break;
  }
  case 9:                      // one byte too long: no terminator in MAXPATH bytes
    memset(pbuf, 'a', MAXPATH);
    pbuf[MAXPATH] = 0;
    *bad = 1;
    break;
  case 10: {
    uint64 a = bad_addr();
    snprintf(pdesc, sizeof(pdesc), "<bad %p>", (void *)a);
    *bad = 1;
    return a;
  }
  case 11:                     // runs into the end of the heap with no terminator
    if (sz > heapbase + MAXPATH && sz % PGSIZE == 0 && !region_from(sz)) {
      int n = 1 + rn(MAXPATH - 1);
      memset((char *)(sz - n), 'b', n);
      snprintf(pdesc, sizeof(pdesc), "<%d bytes at the heap top>", n);
      *bad = 1;
      return sz - n;
    }
    snprintf(pbuf, MAXPATH, "%s", name);
    break;
  default:
    snprintf(pbuf, MAXPATH, "%s", name);
    break;
  }
  if (!*bad)
    snprintf(pdesc, sizeof(pdesc), "%s", pbuf);
  else
    snprintf(pdesc, sizeof(pdesc), "<%d x a>", MAXPATH);
  // Sometimes the string lives on the heap, perhaps across a page boundary.
  uint64 len = strlen(pbuf) + 1;
  if (!*bad && sz - heapbase > len && one_in(3)) {
    uint64 a = heapbase + rn(sz - heapbase - len);
    memmove((char *)a, pbuf, len);
    return a;
  }
  return (uint64)pbuf;
}

// ---------------------------------------------------------------- files and directories

static int pick_oflags(void)
{
  static const int modes[] = { O_RDONLY, O_WRONLY, O_RDWR, O_WRONLY | O_RDWR };
  int f = modes[rn(4)];
  if (rn(2))
    f |= O_CREATE;
  if (one_in(4))
    f |= O_TRUNC;
  if (one_in(16))
    f |= (int)r64();
  return f;
}

// Descriptors of files, directories and devices this process has open: kept few, so that
// eight workers with their children do not fill the kernel's table of inodes (NINODE).
static int nfiles(void)
{
  int n = 0;
  for (int fd = 0; fd < NOFILE; fd++)
    n += fds[fd].kind == K_FILE || fds[fd].kind == K_DIR || fds[fd].kind == K_DEV;
  return n;
}

static void op_open(void)
{
  int bad, want = low_free(-1), flags = pick_oflags();
  if (nfiles() >= MAXFILES) {
    for (int fd = 3; fd < NOFILE; fd++)
      if (fds[fd].kind == K_FILE || fds[fd].kind == K_DIR || fds[fd].kind == K_DEV) {
        must_close(fd);
        return;
      }
  }
  uint64 p = pick_path(&bad, 0);
  struct stat st;
  at("open");
  int fd = open((char *)p, flags);
  FCHECK(fd == -1 || (!bad && fd == want), "open(%s, 0x%x) returned %d; the lowest free fd is %d%s",
         pdesc, flags, fd, want, bad ? " and the path is bad" : "");
  if (fd < 0)
    return;
  at("fstat");
  FCHECK(fstat(fd, &st) == 0, "fstat of the new fd %d failed", fd);
  FCHECK(st.type == T_DIR || st.type == T_FILE || st.type == T_DEVICE, "fstat type %d", st.type);
  FCHECK(st.type != T_DIR || flags == O_RDONLY, "open(%s, 0x%x) opened a directory", pdesc, flags);
  int k = st.type == T_DIR ? K_DIR : st.type == T_DEVICE ? K_DEV : K_FILE;
  note_fd(fd, k, !(flags & O_WRONLY), (flags & O_WRONLY) || (flags & O_RDWR), -1);
}

static void op_close(void)
{
  int fd = pick_fd(1), open_ = kind(fd) != K_FREE;
  if (fd >= 0 && fd <= 2)
    return;   // the console stays
  at("close");
  int r = close(fd);
  FCHECK(r == (open_ ? 0 : -1), "close(%d) of a%s fd returned %d", fd, open_ ? "n open" : " closed",
         r);
  if (open_)
    forget_fd(fd);
}

static void op_dup(void)
{
  int fd = pick_fd(1), want = low_free(-1), k = kind(fd);
  int expect = k != K_FREE && want >= 0 ? want : -1;
  at("dup");
  int r = dup(fd);
  FCHECK(r == expect, "dup(%d) returned %d, expected %d", fd, r, expect);
  if (r >= 0)
    note_fd(r, k, fds[fd].rd, fds[fd].wr, fds[fd].pipe);
}

// The byte at position i of a pipe's stream (what pattern writes put there).
static char pipebyte(uint64 i) { return (char)(i * 131 + (i >> 9) + 7); }

// Read from a pipe end: the result is exactly predictable, since nobody else touches it.
static void read_pipe(int fd, int n)
{
  struct fpipe *p = &pipes[(int)fds[fd].pipe];
  if (n > 0 && p->queued == 0 && p->wfds > 0)
    n = one_in(2) ? 0 : -n;   // a read would wait for ever
  uint64 nn = n > 0 ? n : 0;
  uint64 dst = pick_dst(&nn, 0, 0);
  if (n > 0)
    n = nn;
  uint64 want = n > 0 ? min(n, p->queued) : 0, e = extent(dst, 1);
  long expect = n < 0 ? -1 : want <= e ? (long)want : (long)(e / PIPECHUNK * PIPECHUNK);
  if (want > e && expect == 0)
    expect = -1;
  at("read");
  int r = read(fd, (void *)dst, n);
  FCHECK(r == expect, "read(pipe fd %d, %p, %d) with %ld queued returned %d, expected %ld", fd,
         (void *)dst, n, (long)p->queued, r, expect);
  if (r <= 0)
    return;
  if (p->known)
    for (int i = 0; i < r; i++)
      FCHECK(((char *)dst)[i] == pipebyte(p->rpos + i), "pipe byte %ld is wrong",
             (long)p->rpos + i);
  p->queued -= r;
  p->rpos += r;
  if (p->queued == 0)
    p->known = 1;
}

// Write into a pipe end: pattern bytes from scratch, or whatever a hostile source holds.
static void write_pipe(int fd, int n)
{
  struct fpipe *p = &pipes[(int)fds[fd].pipe];
  int pattern = !one_in(3), kidsnow = 0;
  uint64 src;
  for (int k = 0; k < MAXKIDS; k++)
    kidsnow |= kids[k].pid != 0;
  uint64 space = PIPEBUF - p->queued;
  if (pattern) {
    if (n > 0)
      n = rn(min(space, SCRATCH) + 1);
    for (int i = 0; i < n; i++)
      scratch[i] = pipebyte(p->wpos + i);
    src = (uint64)scratch;
  } else {
    src = pick_src(0);
  }
  uint64 e = extent(src, 0);
  uint64 want = n <= 0 ? 0 : e >= (uint64)n ? (uint64)n : e / PIPECHUNK * PIPECHUNK;
  if (want > space) {
    n = 0;                     // it would wait for a reader
    want = 0;
  }
  long expect = n < 0 ? -1 : n == 0 ? 0 : want == 0 ? -1 : (long)want;
  if (n > 0 && p->rfds == 0 && !kidsnow)
    expect = -1;               // nobody can read it
  at("write");
  int r = write(fd, (void *)src, n);
  if (n > 0 && p->rfds == 0 && kidsnow)
    FCHECK(r >= -1 && r <= (long)want, "write(pipe fd %d, %d) with no reader here returned %d",
           fd, n, r);
  else
    FCHECK(r == expect, "write(pipe fd %d, %p, %d) with %ld queued returned %d, expected %ld",
           fd, (void *)src, n, (long)p->queued, r, expect);
  if (r <= 0)
    return;
  if (!pattern)
    p->known = 0;
  p->queued += r;
  p->wpos += r;
}

static void op_read(void)
{
  int fd = pick_fd(1), k = kind(fd), n = pick_len();
  if (k == K_PIPER) {
    read_pipe(fd, n);
    return;
  }
  if (k == K_CONS && n > 0)
    n = one_in(2) ? 0 : -n;    // the console would wait for a line
  uint64 nn = n > 0 ? n : 0;
  uint64 dst = pick_dst(&nn, 0, 1);
  if (n > 0)
    n = nn;
  int refuse = k == K_FREE || k == K_PIPEW || k == K_DEV || !fds[fd].rd || n < 0;
  at("read");
  int r = read(fd, (void *)dst, n);
  if (refuse)
    FCHECK(r == -1, "read(%d, %p, %d) of a closed, unreadable or device fd returned %d", fd,
           (void *)dst, n, r);
  else if (n == 0)
    FCHECK(r == 0, "read(%d, %p, 0) returned %d", fd, (void *)dst, r);
  else if (extent(dst, 1) == 0)
    FCHECK(r == -1 || r == 0, "read(%d, %p, %d) into memory that takes no store returned %d", fd,
           (void *)dst, n, r);
  else
    FCHECK(r >= -1 && r <= n, "read(%d, %p, %d) returned %d", fd, (void *)dst, n, r);
}

// The size of the file open as fd, or -1.
static long fsize(int fd)
{
  struct stat st;
  at("fstat");
  if (fstat(fd, &st) < 0)
    return -1;
  return (long)st.size;
}

static void op_write(void)
{
  int fd = pick_fd(1), k = kind(fd), n = pick_len();
  if (k == K_PIPEW) {
    write_pipe(fd, n);
    return;
  }
  uint64 src = pick_src(1);
  if (k == K_CONS && n > 0 && extent(src, 0) > 0)
    src = bad_addr();          // nothing may reach the console
  if (n > 0 && spills(src) && (uint64)n > heaptop() - src)
    n = heaptop() - src;
  uint64 e = extent(src, 0);
  if (k == K_FILE && fds[fd].wr && n > 0 && min(n, e) > WCAP)
    n = rn(min(e, WCAP) + 1);
  if (k == K_FILE && fds[fd].wr && n > 0 && e > 0 && fsize(fd) > FILECAP)
    n = -n;                    // long enough
  long expect;
  if (k == K_FREE || k == K_PIPER || k == K_DEV || !fds[fd].wr || n < 0)
    expect = -1;
  else if (n == 0 || k == K_CONS)
    expect = 0;
  else
    expect = e >= (uint64)n ? n : -1;
  at("write");
  int r = write(fd, (void *)src, n);
  // A file write is all or nothing; it is refused (-1) too when the shared offset lies
  // past the end of the file (another descriptor truncated it).
  FCHECK(r == expect || (k == K_FILE && r == -1), "write(%d, %p, %d) (kind %d, %ld bytes "
         "readable there) returned %d, expected %ld", fd, (void *)src, n, k,
         (long)min(e, 1UL << 40), r, expect);
}

static void op_fstat(void)
{
  int fd = pick_fd(1), k = kind(fd);
  uint64 n = sizeof(struct stat);
  uint64 dst = pick_dst(&n, 1, 0);
  int ok = k == K_FILE || k == K_DIR || k == K_DEV || k == K_CONS;
  int expect = ok && extent(dst, 1) >= sizeof(struct stat) ? 0 : -1;
  at("fstat");
  int r = fstat(fd, (struct stat *)dst);
  FCHECK(r == expect, "fstat(%d, %p) of kind %d returned %d, expected %d", fd, (void *)dst, k, r,
         expect);
  if (r < 0 || k == K_CONS)
    return;
  struct stat st;
  memmove(&st, (void *)dst, sizeof(st));
  int type = k == K_DIR ? T_DIR : k == K_DEV ? T_DEVICE : T_FILE;
  FCHECK(st.type == type && st.nlink >= 0 && st.size < (1UL << 32),
         "fstat(%d) says type %d nlink %d size %ld for a kind %d fd", fd, st.type, st.nlink,
         (long)st.size, k);
}

static void op_pipe(void)
{
  uint64 n = 2 * sizeof(int);
  uint64 dst = pick_dst(&n, 1, 0);
  int a = low_free(-1), b = a >= 0 ? low_free(a) : -1;
  int ok = b >= 0 && extent(dst, 1) >= 2 * sizeof(int);
  at("pipe");
  int r = pipe((int *)dst);
  FCHECK(r == -1 || (ok && r == 0), "pipe(%p) returned %d (free fds %d %d)", (void *)dst, r, a, b);
  if (r < 0)
    return;
  int got[2];
  memmove(got, (void *)dst, sizeof(got));
  FCHECK(got[0] == a && got[1] == b, "pipe gave fds %d %d, expected %d %d", got[0], got[1], a, b);
  int i = 0;
  while (pipes[i].live)
    i++;
  memset(&pipes[i], 0, sizeof(pipes[i]));
  pipes[i].live = 1;
  pipes[i].known = 1;
  note_fd(a, K_PIPER, 1, 0, i);
  note_fd(b, K_PIPEW, 0, 1, i);
}

static void op_mkdir(void)
{
  int bad;
  uint64 p = pick_path(&bad, 1);
  at("mkdir");
  int r = mkdir((char *)p);
  FCHECK(r == -1 || (!bad && r == 0), "mkdir(%s) returned %d", pdesc, r);
}

static void op_unlink(void)
{
  int bad;
  uint64 p = pick_path(&bad, one_in(3));
  at("unlink");
  int r = unlink((char *)p);
  FCHECK(r == -1 || (!bad && r == 0), "unlink(%s) returned %d", pdesc, r);
}

static void op_link(void)
{
  int bad1, bad2;
  char old[MAXPATH + 1];
  uint64 p1 = pick_path(&bad1, 0);
  char d1[sizeof(pdesc)];
  if (p1 == (uint64)pbuf) {    // pbuf is reused for the second path
    memmove(old, pbuf, sizeof(old));
    p1 = (uint64)old;
  }
  memmove(d1, pdesc, sizeof(d1));
  uint64 p2 = (uint64)"f1";  // a bad first path may lie on the heap: keep the heap as it is
  bad2 = 0;
  if (!bad1)
    p2 = pick_path(&bad2, 0);
  else
    strcpy(pdesc, "f1");
  at("link");
  int r = link((char *)p1, (char *)p2);
  FCHECK(r == -1 || (!bad1 && !bad2 && r == 0), "link(%s, %s) returned %d", d1, pdesc, r);
}

// mknod with a valid device number now and then: never the console's (1), whose reads
// wait for input.
static void op_mknod(void)
{
  static const short majors[] = { 0, 2, 3, 9, -1, 10, 32767, -32768 };
  static const short minors[] = { 0, 5, 0x7fff, -1, -32768 };
  int bad, major = majors[rn(8)], minor = minors[rn(5)];
  uint64 p = pick_path(&bad, 0);
  bad |= major < 0 || major >= NDEV || minor < 0;
  at("mknod");
  int r = mknod((char *)p, major, minor);
  FCHECK(r == -1 || (!bad && r == 0), "mknod(%s, %d, %d) returned %d", pdesc, major, minor, r);
}

// The depth below base that path s leads to (from the current directory, depthcd deep,
// or from base when s starts with it), or -1 if it climbs out of base on the way.
static int path_depth(const char *s)
{
  int d = depthcd, n = strlen(base);
  if (strncmp(s, base, n) == 0 && (s[n] == '/' || s[n] == 0)) {
    d = 0;
    s += n;
  } else if (s[0] == '/') {
    return -1;
  }
  while (*s && d >= 0) {
    while (*s == '/')
      s++;
    int len = 0;
    while (s[len] && s[len] != '/')
      len++;
    if (len == 2 && s[0] == '.' && s[1] == '.')
      d--;
    else if (len > 0 && !(len == 1 && s[0] == '.'))
      d++;
    s += len;
  }
  return d;
}

// chdir down, up, to base, along a path, or somewhere bad. depthcd is the depth below base
// (a chdir that fails moves nothing), never more than MAXCD: a move that would go deeper,
// or out of base, is not made. A ".." that fails (the directory was removed under us) goes
// back to base.
static void op_chdir(void)
{
  int bad = 0, c = rn(8), to;
  uint64 p;
  if (c < 3 && depthcd > 0)
    p = (uint64)"..";
  else if (c < 5)
    p = (uint64)dnames[rn(ND)];
  else if (c < 6)
    p = (uint64)base;
  else
    p = pick_path(&bad, 1);
  if (!bad)
    snprintf(pdesc, sizeof(pdesc), "%s", (char *)p);
  to = bad ? depthcd : path_depth((char *)p);
  if (to < 0 || to > MAXCD)
    return;
  at("chdir");
  int r = chdir((char *)p);
  FCHECK(r == -1 || (!bad && r == 0), "chdir(%s) returned %d", pdesc, r);
  if (r == 0) {
    depthcd = to;
  } else if (p == (uint64)"..") {
    at("chdir");
    if (chdir(base) == 0)
      depthcd = 0;
  }
}

// ---------------------------------------------------------------- memory

// Check that fresh heap pages [PGROUNDUP(old), new) read zero (a few bytes of them).
static void check_zero(uint64 old, uint64 new)
{
  uint64 lo = PGROUNDUP(old);
  for (int i = 0; i < 3 && lo < new; i++) {
    volatile char *a = (char *)(lo + rn(new - lo));
    FCHECK(*a == 0, "fresh heap byte at %p is %d", a, *a);
  }
}

static void op_sbrk(void)
{
  long n, h = sz - heapbase;
  switch (rn(9)) {
  case 0: n = 0; break;
  case 1: n = (long)(1 + rn(16)) * PGSIZE; break;
  case 2: n = 1 + rn(3 * PGSIZE); break;
  case 3: n = -(long)rn(h + 1); break;
  case 4: n = -h - 1 - (long)rn(PGSIZE); break;
  case 5: n = -h; break;
  case 6: n = (int)0x80000000; break;
  default: n = -(long)rn(2 * PGSIZE); break;
  }
  if (n > 0 && (h + n) / PGSIZE > heapcap)
    n = -n;
  // A grow must stay below the lowest region and within sbrk's bound; a shrink always
  // succeeds, stopping at the heap's base however far it asks (kernel/vm.c growproc).
  // The bound counts what plain sbrk added to the heap, which this process knows only
  // within limits (malloc grew it before): at least n, at most the whole size.
  int ok = n <= 0 || (sz + n <= sbrk_floor() && PGROUNDUP(sz + n) / PGSIZE <= sbrkcap_pages);
  int refused = n > 0 && (sz + n > sbrk_floor() || PGROUNDUP(n) / PGSIZE > sbrkcap_pages);
  at("sbrk");
  uint64 r = (uint64)sbrk((int)n);
  if (refused)
    FCHECK(r == ~0UL, "sbrk(%ld) with the heap [%p, %p) returned %p", n, (void *)heapbase,
           (void *)sz, (void *)r);
  else if (ok && (lazy || n <= 0))
    FCHECK(r == sz, "sbrk(%ld) returned %p, expected the old top %p", n, (void *)r, (void *)sz);
  else
    FCHECK(r == sz || r == ~0UL, "sbrk(%ld) returned %p, top %p", n, (void *)r, (void *)sz);
  if (r == ~0UL)
    return;
  uint64 old = sz;
  sz = (long)sz + n >= (long)heapbase ? sz + n : heapbase;
  if (n > 0)
    check_zero(old, sz);
}

// The largest sbrk there is. Plain sbrk must refuse it where it passes its bound
// (OVERCOMMIT_PCT of RAM and swap), in both policies, and map nothing. sbrklazy only moves the top, in every configuration: one
// store into its last page through the kernel, and it is given back at once.
static void op_bigsbrk(void)
{
  int n = 0x7fffffff - (int)rn(PGSIZE);
  uint64 r;
  if (rn(2)) {
    if (PGROUNDUP(n) / PGSIZE <= sbrkcap_pages)
      return;   // it could fit (and eager, it would map it all)
    at("sbrk");
    r = (uint64)sbrk(n);
    FCHECK(r == ~0UL, "sbrk(%d) past its bound returned %p, top %p", n, (void *)r,
           (void *)sz);
    return;
  }
  at("sbrklazy");
  r = (uint64)sbrklazy(n);
  FCHECK(r == (sz + n <= sbrk_floor() ? sz : ~0UL), "sbrklazy(%d) returned %p, top %p", n,
         (void *)r, (void *)sz);
  if (r == ~0UL)
    return;
  uint64 old = sz, dst = sz + n - sizeof(struct stat) - rn(2 * PGSIZE);
  sz += n;
  at("fstat");
  FCHECK(fstat(1, (struct stat *)dst) == 0, "fstat into the huge heap at %p failed", (void *)dst);
  at("sbrk");
  r = (uint64)sbrk(-n);
  FCHECK(r == sz, "sbrk(-%d) returned %p, expected %p", n, (void *)r, (void *)sz);
  sz = old;
}

// Loads and stores of the process's own: heap pages and regions (stores only where the
// region allows them). Lazy, COW, swapped and file pages come in.
static void op_touch(void)
{
  for (int i = 0; i < 4; i++) {
    struct region *r = &regs[rn(NREG)];
    if (rn(2) && sz > heapbase) {
      char *a = (char *)(heapbase + rn(sz - heapbase));
      if (rn(2))
        *a = (char)r64();
      else
        (void)*(volatile char *)a;
    } else if (r->len) {
      char *a = (char *)(r->start + rn(r->len));
      (void)*(volatile char *)a;
      if (r->prot & PROT_WRITE)
        *a = (char)r64();
    }
  }
}

// ---------------------------------------------------------------- mmap and munmap

// 1 if the documented contract (docs/memory.md, "mmap and the page cache") says this
// mmap must fail whatever memory holds; 2 if nobody can know (the console's fds).
static int mmap_refused(uint64 addr, uint64 len, int prot, int flags, int fd, uint64 off)
{
  int k = kind(fd), share = flags & ~MAP_POPULATE;
  if (k == K_CONS)
    return 2;
  if (k != K_FILE || !fds[fd].rd)
    return 1;
  if ((prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC)) || !(prot & PROT_READ))
    return 1;
  if (share != MAP_SHARED && share != MAP_PRIVATE)
    return 1;
  if (share == MAP_SHARED && (prot & PROT_WRITE) && !fds[fd].wr)
    return 1;
  if (off % PGSIZE || len == 0 || len > TRAPFRAME || off + PGROUNDUP(len) < off)
    return 1;
  uint64 plen = PGROUNDUP(len);
  if (addr && (addr % PGSIZE || addr < heaptop() || addr > TRAPFRAME - plen || !isfree(addr, plen)))
    return 1;
  return nregions() == NREG;
}

static uint64 pick_maplen(void)
{
  switch (rn(12)) {
  case 0: return 0;
  case 1: return 1 + rn(4 * PGSIZE);
  case 2: return 1UL << (30 + rn(8));
  case 3: return TRAPFRAME + rn(2);
  case 4: return ~0UL - rn(PGSIZE);
  case 5: return 1UL << 63;
  default: return (1 + rn(16)) * PGSIZE - (one_in(4) ? rn(PGSIZE) : 0);
  }
}

static uint64 pick_off(void)
{
  switch (rn(10)) {
  case 0: return rn(16) * PGSIZE;
  case 1: return 1 + rn(PGSIZE - 1);
  case 2: return 1UL << 40;
  case 3: return ~0UL & ~(uint64)(PGSIZE - 1);
  case 4: return (1UL << 63);
  default: return 0;
  }
}

static int pick_prot(void)
{
  if (one_in(8))
    return (int)rn(16);
  if (one_in(16))
    return (int)r64();
  return PROT_READ | (rn(2) ? PROT_WRITE : 0) | (one_in(4) ? PROT_EXEC : 0);
}

static int pick_mflags(void)
{
  static const int odd[] = { 0, MAP_SHARED | MAP_PRIVATE, 0x10, MAP_POPULATE, -1 };
  if (one_in(8))
    return one_in(2) ? odd[rn(5)] : (int)r64();
  return (rn(2) ? MAP_SHARED : MAP_PRIVATE) | (one_in(6) ? MAP_POPULATE : 0);
}

// A fixed address for mmap: right above the heap, under a region, at the top, inside a
// region, unaligned, below the heap, in kernel space.
static uint64 pick_fixed(uint64 len)
{
  struct region *r = &regs[rn(NREG)];
  uint64 plen = PGROUNDUP(len);
  switch (rn(8)) {
  case 0: return heaptop();
  case 1: return heaptop() + rn(64) * PGSIZE;
  case 2: return r->len && r->start >= plen ? r->start - plen : TRAPFRAME - plen;
  case 3: return TRAPFRAME - plen;
  case 4: return r->len ? r->start + rn(r->len) : heaptop() + 1;
  case 5: return heapbase;
  case 6: return KERNBASE;
  default: return (1UL << 37) + rn(16) * PGSIZE;
  }
}

// Pages of regions that are mapped at once (eager, or MAP_POPULATE).
static uint64 eager_pages(void)
{
  uint64 n = 0;
  for (struct region *r = regs; r < regs + NREG; r++)
    if (r->len && (!lazy || (r->flags & MAP_POPULATE)))
      n += r->len / PGSIZE;
  return n;
}

static void op_mmap(void)
{
  int fd = pick_fd(1), prot = pick_prot(), flags = pick_mflags();
  uint64 len = pick_maplen(), off = pick_off();
  uint64 addr = one_in(3) ? pick_fixed(len) : 0;
  int refused = mmap_refused(addr, len, prot, flags, fd, off);
  if (refused == 0) {
    // Keep memory modest: what is mapped at once, and shared regions (their write-back
    // walks every page), stay small.
    int now = !lazy || (flags & MAP_POPULATE), shared = (flags & ~MAP_POPULATE) == MAP_SHARED;
    uint64 pages = PGROUNDUP(len) / PGSIZE;
    if ((now && pages + eager_pages() > mapcap) || (shared && len > (1UL << 30)))
      return;
  }
  at("mmap");
  uint64 r = (uint64)mmap((void *)addr, len, prot, flags, fd, off);
  if (refused == 1)
    FCHECK(r == ~0UL, "mmap(%p, 0x%lx, %d, 0x%x, fd %d, 0x%lx) must fail, returned %p",
           (void *)addr, (long)len, prot, flags, fd, (long)off, (void *)r);
  if (r == ~0UL)
    return;
  uint64 plen = PGROUNDUP(len);
  FCHECK(r % PGSIZE == 0 && r >= heaptop() && r <= TRAPFRAME - plen && isfree(r, plen) &&
         (addr == 0 || r == addr), "mmap(%p, 0x%lx) returned %p (heap top %p)", (void *)addr,
         (long)len, (void *)r, (void *)heaptop());
  struct region *g = regs;
  while (g < regs + NREG && g->len)
    g++;
  FCHECK(g < regs + NREG, "mmap made a region beyond the %d a process may have", NREG);
  g->start = r;
  g->len = plen;
  g->prot = prot;
  g->flags = flags;
}

// What the contract says munmap(addr, len) returns: 0 for all of one region, a prefix or
// a suffix of it; -1 for anything else (unaligned, empty, a hole, a middle, past its end).
static int munmap_expect(uint64 addr, uint64 len)
{
  if (addr % PGSIZE || len == 0 || len > TRAPFRAME)
    return -1;
  uint64 plen = PGROUNDUP(len);
  struct region *r = region_at(addr);
  if (r == 0 || plen > r->start + r->len - addr)
    return -1;
  return addr == r->start || addr + plen == r->start + r->len ? 0 : -1;
}

static void op_munmap(void)
{
  struct region *r = &regs[rn(NREG)];
  uint64 addr, len, k = r->len ? 1 + rn(r->len / PGSIZE) : 1;
  switch (r->len ? rn(9) : 8) {
  case 0: addr = r->start; len = r->len - rn(PGSIZE); break;
  case 1: addr = r->start; len = k * PGSIZE; break;
  case 2: addr = r->start + r->len - k * PGSIZE; len = k * PGSIZE - rn(PGSIZE); break;
  case 3: addr = r->start + PGSIZE; len = PGSIZE; break;
  case 4: addr = r->start; len = r->len + PGSIZE; break;
  case 5: addr = r->start + 1 + rn(PGSIZE - 1); len = PGSIZE; break;
  case 6: addr = r->start; len = one_in(2) ? 0 : ~0UL; break;
  case 7: addr = r->start - PGSIZE; len = 2 * PGSIZE; break;
  default: addr = one_in(2) ? bad_addr() : heaptop(); len = (1 + rn(4)) * PGSIZE; break;
  }
  int expect = munmap_expect(addr, len);
  at("munmap");
  int got = munmap((void *)addr, len);
  FCHECK(got == expect, "munmap(%p, 0x%lx) returned %d, expected %d", (void *)addr, (long)len,
         got, expect);
  if (got < 0)
    return;
  r = region_at(addr);
  uint64 plen = PGROUNDUP(len);
  if (addr == r->start) {
    r->start += plen;
  }
  r->len -= plen;
}

// ---------------------------------------------------------------- processes

static int nkids(void)
{
  int n = 0;
  for (int k = 0; k < MAXKIDS; k++)
    n += kids[k].pid != 0;
  return n;
}

static int kid_of(int pid)
{
  for (int k = 0; k < MAXKIDS; k++)
    if (kids[k].pid && kids[k].pid == pid)
      return k;
  return -1;
}

// 1 if some child will exit by itself (not a sleeper nobody has killed yet): then wait()
// returns.
static int waitable(void)
{
  for (int k = 0; k < MAXKIDS; k++)
    if (kids[k].pid && (kids[k].fate != F_SLEEP || kids[k].killed))
      return 1;
  return 0;
}

// The status a child must exit with (once killed, -1 will do too; see reaped()).
static int expected(struct kid *c)
{
  static const int st[] = { [F_EXIT] 0, [F_SUICIDE] -1, [F_SLEEP] -1, [F_EXECOK] XCODE,
                            [F_EXECBAD] EXECFAIL, [F_PIPEW] 0 };
  return c->fate == F_EXIT ? c->code : st[c->fate];
}

static const char *fatename(int fate)
{
  static const char *names[] = { "exit", "suicide", "sleeper", "exec", "bad exec", "pipe writer" };
  return names[fate];
}

// Child pid was reaped with status st (checked when check): it must be what it was told
// to do, or -1 once killed. A child that failed makes this process fail too, quietly
// (the child printed the line).
static void reaped(int pid, int st, int check)
{
  int k = kid_of(pid);
  FCHECK(k >= 0, "wait returned %d, not a child", pid);
  struct kid *c = &kids[k];
  if (check && (st == FAILCODE || st == KILLCODE))
    exit(st);
  int want = expected(c);
  // A killed child may have exited before the kill landed; an exec may find no free inode
  // or memory for the new image.
  int ok = st == want || (c->killed && st == -1) || (c->fate == F_EXECOK && st == EXECFAIL);
  if (check && !ok) {
    snprintf(why, sizeof(why), "child %d (%s, %skilled by fuzz) exit status %d, expected %d%s",
             pid, fatename(c->fate), c->killed ? "" : "not ", st, want,
             st == -1 ? ": killed, and not by fuzz" : "");
    failwith(st == -1 ? KILLCODE : FAILCODE);
  }
  gone[ngone++ % NGONE] = pid;
  c->pid = 0;
}

// Kill one sleeper that nobody has killed yet, so that a wait() can return.
static void kill_sleeper(void)
{
  for (int k = 0; k < MAXKIDS; k++) {
    if (kids[k].pid && kids[k].fate == F_SLEEP && !kids[k].killed) {
      at("kill");
      FCHECK(kill(kids[k].pid) == 0, "kill of sleeping child %d failed", kids[k].pid);
      kids[k].killed = 1;
      me.kills++;
      return;
    }
  }
}

// Wait for child pid, reaping (and checking) the others that exit first.
static int wait_for(int pid)
{
  int st = 0, got;
  for (;;) {
    at("wait");
    got = wait(&st);
    FCHECK(got > 0, "wait returned %d while child %d runs", got, pid);
    if (got == pid)
      return st;
    reaped(got, st, 1);
  }
}

// Kill the sleepers and reap every child.
static void end_kids(void)
{
  int st;
  while (nkids()) {
    kill_sleeper();
    at("wait");
    int pid = wait(&st);
    FCHECK(pid > 0, "wait returned %d with %d children", pid, nkids());
    reaped(pid, st, 1);
  }
  at("wait");
  FCHECK(wait(0) == -1, "wait found a child nobody forked");
}

static void op_wait(void)
{
  if (nkids() && !waitable()) {
    kill_sleeper();
    return;
  }
  uint64 n = sizeof(int);
  uint64 dst = one_in(4) ? 0 : pick_dst(&n, 1, 0);
  int storable = dst == 0 || extent(dst, 1) >= sizeof(int), have = nkids();
  at("wait");
  int pid = wait((int *)dst);
  if (!have || !storable) {
    FCHECK(pid == -1, "wait(%p) returned %d with %d children", (void *)dst, pid, have);
    return;
  }
  FCHECK(pid > 0, "wait(%p) returned %d with %d children", (void *)dst, pid, have);
  int st = 0;
  if (dst)
    memmove(&st, (void *)dst, sizeof(st));
  reaped(pid, st, dst != 0);
}

static void op_kill(void)
{
  int k = rn(MAXKIDS), pid, expect = -1;
  switch (rn(5)) {
  case 0: case 1: case 2:
    if (kids[k].pid == 0)
      return;
    pid = kids[k].pid;
    expect = 0;
    break;
  case 3:
    if (ngone == 0)
      return;
    pid = gone[rn(min(ngone, NGONE))];
    break;
  default: {
    static const int bogus[] = { 0, -1, -2, 0x7fffffff, (int)0x80000000, 1 << 30 };
    pid = bogus[rn(6)];
    break;
  }
  }
  at("kill");
  int r = kill(pid);
  FCHECK(r == expect, "kill(%d) returned %d, expected %d", pid, r, expect);
  if (expect == 0) {
    kids[k].killed = 1;
    me.kills++;
  }
}

static void run_ops(long n);

// The exec a child is told to make: fuzz -x, its argv in a static array or on a heap page
// of its own. Exits.
static void exec_ok(void)
{
  static char *argv[3];
  char **av = argv;
  argv[0] = tl_self;
  argv[1] = "-x";
  argv[2] = 0;
  if (one_in(2) && (sz - heapbase) / PGSIZE + 1 <= heapcap) {
    at("sbrk");
    char *page = sbrk(PGSIZE);   // may fail (a region right above the heap, memory)
    if (page != (char *)-1) {
      sz += PGSIZE;
      av = (char **)(PGROUNDUP((uint64)page) + (one_in(2) ? 0 : PGSIZE - 3 * sizeof(char *)));
      if ((uint64)(av + 3) > sz)
        av = (char **)page;
      memmove(av, argv, sizeof(argv));
    }
  }
  at("exec");
  exec(tl_self, av);
  exit(EXECFAIL);   // no inode or memory for it: allowed
}

// A hostile exec: it must return -1. Exits.
static void exec_bad(void)
{
  static char *argv[MAXARG + 2];
  char *path = tl_self;
  for (int i = 0; i <= MAXARG; i++)
    argv[i] = "-x";
  argv[MAXARG] = 0;
  argv[0] = tl_self;
  argv[2] = 0;
  char **av = argv;
  int c = rn(10);
  switch (c) {
  case 0: path = (char *)bad_addr(); break;
  case 1: path = "nofile"; break;
  case 2: path = one_in(2) ? "." : base; break;
  case 3: path = (char *)fnames[rn(NF)]; break;
  case 4: av = (char **)bad_addr(); break;
  case 5: argv[1] = (char *)bad_addr(); break;
  case 6:                                  // MAXARG arguments and no room for the 0
    for (int i = 1; i <= MAXARG; i++)
      argv[i] = "-x";
    break;
  case 7:                                  // argv runs off the top of the heap
    if (sz - heapbase >= sizeof(char *)) {
      av = (char **)(sz - sizeof(char *));
      av[0] = tl_self;
      break;
    }
    path = "nofile";
    break;
  case 8:                                  // a path with no terminator in MAXPATH
    memset(pbuf, 'a', MAXPATH);
    pbuf[MAXPATH] = 0;
    path = pbuf;
    break;
  default:                                 // an argument with no terminator in a page
    memset(scratch, 'a', PGSIZE);
    scratch[PGSIZE] = 0;
    argv[1] = scratch;
    break;
  }
  at("exec");
  int r = exec(path, av);
  FCHECK(r == -1, "exec(variant %d) returned %d", c, r);
  exit(EXECFAIL);
}

// The end of a child or worker: its children reaped, its counts reported, exit status code.
static void finish(int code)
{
  end_kids();
  report(0);
  exit(code);
}

// A new child: it forgets its parent's children, closes the pipe ends it inherited (but
// keep), draws from its own stream, and does what fate says. Never returns.
static void child(int fate, int code, uint64 seed, int keep)
{
  me.depth++;
  if (me.depth == 1)
    me.forkop = me.op;
  me.op = 0;
  me.calls = me.forks = me.kills = 0;
  memset(kids, 0, sizeof(kids));
  ngone = 0;
  stream = mix(seed) | 1;
  me.ppid = me.pid;
  me.pid = getpid();
  me.calls++;
  close_pipes(keep);
  switch (fate) {
  case F_SLEEP:                // until killed; or, orphaned, it goes quietly
    for (;;) {
      at("sleep");
      FCHECK(sleep(NAP) == 0, "sleep(%d) failed", NAP);
      at("getppid");
      if (getppid() != me.ppid)
        exit(0);
    }
  case F_EXECOK:
    run_ops(rn(3));
    exec_ok();
    break;
  case F_EXECBAD:
    run_ops(rn(3));
    exec_bad();
    break;
  case F_SUICIDE:
    run_ops(rn(me.depth == 1 ? 10 : 4));
    at("kill");
    kill(me.pid);
    FCHECK(0, "alive after kill(getpid())");
    break;
  }
  run_ops(1 + rn(me.depth == 1 ? 12 : 4));
  finish(code);
}

// A child's exit status: anything but -1 (killed), FAILCODE and KILLCODE.
static int pick_code(void)
{
  static const int odd[] = { -2, 255, 256, 100000, (int)0x80000000, 0x7fffffff };
  int c = one_in(8) ? odd[rn(6)] : (int)rn(200);
  return c == FAILCODE || c == KILLCODE ? 0 : c;
}

static void op_fork(void)
{
  int k = 0;
  if (me.depth >= 2)
    return;
  while (k < MAXKIDS && kids[k].pid)
    k++;
  if (k == MAXKIDS) {
    if (!waitable())
      kill_sleeper();
    return;
  }
  static const int fates0[] = { F_EXIT, F_EXIT, F_EXIT, F_EXIT, F_SUICIDE, F_SLEEP, F_SLEEP,
                                F_EXECOK, F_EXECOK, F_EXECBAD };
  int fate = fates0[rn(10)], code = pick_code();
  if (me.depth == 1 && fate == F_SLEEP)
    fate = F_EXIT;             // a grandchild may outlive its parent: none sleeps for ever
  uint64 seed = r64();
  at("fork");
  int pid = fork();
  if (pid == 0)
    child(fate, code, seed, -1);
  FCHECK(pid == -1 || pid > 0, "fork returned %d", pid);
  if (pid < 0)
    return;
  kids[k].pid = pid;
  kids[k].fate = fate;
  kids[k].code = code;
  kids[k].killed = 0;
  me.forks++;
}

// 1 if this process's parent has exited, or does within ORPHAN_TICKS: an exiting process
// closes its files (a pipe's read end) before it hands its children to init, and between
// the two it puts its cwd through the log, which under swap traffic and the hog took more
// than 20 ticks once (a false FAIL: seed 9, --hog, swap 512). The wait ends at once when
// the parent is gone; only a write failing while the reader lives waits it out and fails.
#define ORPHAN_TICKS 300
static int orphaned(void)
{
  for (int i = 0; i < ORPHAN_TICKS; i++) {
    at("getppid");
    if (getppid() != me.ppid)
      return 1;
    at("sleep");
    sleep(1);
  }
  return 0;
}

// A pipe with a writer child: it sends n pattern bytes and exits; this process reads them
// all (until end of file), checks them and reaps the writer.
static void op_pipechild(void)
{
  int k = 0, p[2], n = rn(20000), got = 0, r;
  if (me.depth >= 2)
    return;
  while (k < MAXKIDS && kids[k].pid)
    k++;
  int a = low_free(-1), b = a >= 0 ? low_free(a) : -1;
  if (k == MAXKIDS || b < 0)
    return;
  at("pipe");
  if (pipe(p) < 0)
    return;
  FCHECK(p[0] == a && p[1] == b, "pipe gave fds %d %d, expected %d %d", p[0], p[1], a, b);
  int i = 0;
  while (pipes[i].live)
    i++;
  memset(&pipes[i], 0, sizeof(pipes[i]));
  pipes[i].live = 1;
  note_fd(p[0], K_PIPER, 1, 0, i);
  note_fd(p[1], K_PIPEW, 0, 1, i);
  at("fork");
  int pid = fork();
  if (pid == 0) {
    me.depth++;
    if (me.depth == 1)
      me.forkop = me.op;
    memset(kids, 0, sizeof(kids));
    me.calls = me.forks = me.kills = 0;
    me.ppid = me.pid;
    at("getpid");
    me.pid = getpid();
    close_pipes(p[1]);
    for (int sent = 0; sent < n; sent += r) {
      r = min(n - sent, SCRATCH);
      for (int j = 0; j < r; j++)
        scratch[j] = pipebyte(sent + j);
      at("write");
      int w = write(p[1], scratch, r);
      if (w != r && orphaned())
        exit(0);             // the reader was killed: nobody is left to tell
      FCHECK(w == r, "pipe writer: write of %d bytes failed", r);
    }
    finish(0);
  }
  must_close(p[1]);
  if (pid < 0) {
    must_close(p[0]);
    return;
  }
  kids[k].pid = pid;
  kids[k].fate = F_PIPEW;
  kids[k].killed = 0;
  me.forks++;
  for (;;) {
    at("read");
    r = read(p[0], scratch, SCRATCH);
    if (r <= 0)
      break;
    for (int j = 0; j < r; j++)
      FCHECK(scratch[j] == pipebyte(got + j), "pipe from a writer child: byte %d wrong", got + j);
    got += r;
  }
  must_close(p[0]);
  reaped(pid, wait_for(pid), 1);   // a writer that failed has said so: this one exits quietly
  FCHECK(r == 0 && got == n, "pipe from a writer child: %d of %d bytes, then %d", got, n, r);
}

// ---------------------------------------------------------------- the rest of the table

static void op_sleep(void)
{
  static const int ns[] = { 0, 1, 2, -1, (int)0x80000000 };
  int n = ns[rn(5)];
  at("uptime");
  uint t0 = uptime();
  at("sleep");
  int r = sleep(n);
  at("uptime");
  uint t1 = uptime();
  FCHECK(r == 0 && t1 - t0 >= (uint)(n > 0 ? n : 0), "sleep(%d) returned %d after %d ticks", n,
         r, (int)(t1 - t0));
}

static void op_ids(void)
{
  at("getpid");
  int pid = getpid();
  FCHECK(pid == me.pid, "getpid() returned %d, not %d", pid, me.pid);
  at("getppid");
  int pp = getppid();
  FCHECK(pp == me.ppid || (me.depth > 0 && pp == 1), "getppid() returned %d, not %d", pp, me.ppid);
  at("uptime");
  uint t = uptime();
  FCHECK(t >= lastup, "uptime() went back from %d to %d", (int)lastup, (int)t);
  lastup = t;
}

static void op_memstat(void)
{
  static struct memstat m;
  uint64 n = sizeof(m);
  uint64 dst = pick_dst(&n, 1, 0);
  int expect = extent(dst, 1) >= sizeof(m) ? 0 : -1;
  at("memstat");
  int r = memstat((struct memstat *)dst);
  FCHECK(r == expect, "memstat(%p) returned %d, expected %d", (void *)dst, r, expect);
  if (r < 0)
    return;
  memmove(&m, (void *)dst, sizeof(m));
  FCHECK(m.lazy_alloc == lazy && m.cow_alloc == cow && m.free_pages <= m.total_pages &&
         m.vpages == heaptop() / PGSIZE && m.ncpu >= 1 && m.swap_slots_used <= m.swap_slots,
         "memstat: lazy %d cow %d free %ld of %ld vpages %ld (expected %ld) ncpu %d",
         m.lazy_alloc, m.cow_alloc, (long)m.free_pages, (long)m.total_pages, (long)m.vpages,
         (long)(heaptop() / PGSIZE), m.ncpu);
}

// A system call made by hand: an unknown number (must give -1), or getpid/uptime with
// junk in every argument register (ignored).
static uint64 raw(uint64 num, uint64 a0, uint64 a1, uint64 a2)
{
  register uint64 x0 asm("a0") = a0;
  register uint64 x1 asm("a1") = a1;
  register uint64 x2 asm("a2") = a2;
  register uint64 x7 asm("a7") = num;
  asm volatile("ecall" : "+r"(x0) : "r"(x1), "r"(x2), "r"(x7) : "memory");
  return x0;
}

static void op_raw(void)
{
  static const uint64 nums[] = { 0, 26, 64, 1000, ~0UL, (1UL << 32) | 11 };
  if (one_in(4)) {
    uint64 num = nums[rn(6)];
    at("unknown");
    uint64 r = raw(num, r64(), r64(), r64());
    FCHECK(r == ~0UL, "system call %p returned %p", (void *)num, (void *)r);
    return;
  }
  at("getpid");
  uint64 r = raw(SYS_getpid, r64(), r64(), r64());
  FCHECK(r == (uint64)me.pid, "getpid with junk arguments returned %ld", (long)r);
}

// ---------------------------------------------------------------- the operations

struct op { void (*fn)(void); int weight; };
static const struct op ops[] = {
  { op_open, 8 }, { op_close, 6 }, { op_dup, 3 }, { op_read, 8 }, { op_write, 8 },
  { op_fstat, 3 }, { op_pipe, 3 }, { op_pipechild, 1 }, { op_sbrk, 5 }, { op_bigsbrk, 1 },
  { op_touch, 2 }, { op_mmap, 6 }, { op_munmap, 4 }, { op_fork, 4 }, { op_wait, 3 },
  { op_kill, 3 }, { op_chdir, 4 }, { op_mkdir, 3 }, { op_unlink, 4 }, { op_link, 3 },
  { op_mknod, 1 }, { op_sleep, 1 }, { op_ids, 2 }, { op_memstat, 2 }, { op_raw, 1 },
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

static void run_op(void)
{
  static int total;
  if (total == 0)
    for (uint i = 0; i < NOPS; i++)
      total += ops[i].weight;
  rs = mix(xorshift(&stream)) | 1;
  int w = rn(total);
  uint i = 0;
  while (w >= ops[i].weight)
    w -= ops[i++].weight;
  ops[i].fn();
}

// Operations of a child: n of them (a worker's loop is in worker()).
static void run_ops(long n)
{
  for (; me.op < n; me.op++)
    run_op();
}

// A checksum of the text and read-only data: read()s into them must change nothing.
static volatile uint64 textstart;   // 0, where the text begins (an opaque pointer for the compiler)
static uint textsum(void)
{
  uint s = 0;
  for (uint *p = (uint *)textstart; (uint64)p < datastart; p++)
    s = s * 31 + *(volatile uint *)p;
  return s;
}

static int worker_done(void)
{
  return deadline ? clock_us() >= deadline : me.op >= o_ops;
}

// Worker id: its folder, its stream, its operations, then its children reaped and its
// counts reported. Exits 0, or FAILCODE/KILLCODE after a FAIL line.
static void worker(int id, int parent)
{
  me.id = id;
  me.pid = getpid();
  me.ppid = parent;
  stream = mix(o_seed * 1000003 + id + 1) | 1;
  snprintf(base, sizeof(base), "%s/w%d", topdir, id);
  at("mkdir");
  FCHECK(mkdir(base) == 0, "mkdir %s failed", base);
  at("chdir");
  FCHECK(chdir(base) == 0, "chdir %s failed", base);
  at("sbrk");
  heapbase = sz = (uint64)sbrk(0);
  sumtext = textsum();
  for (me.op = 0; !worker_done(); me.op++)
    run_op();
  me.call = "end";
  FCHECK(textsum() == sumtext, "the text changed");
  finish(0);
}

// ---------------------------------------------------------------- the parent

static char rmpath[MAXPATH];            // what cleanup could not remove (for the FAIL line)

// 1 if directory entry name n is "." or "..".
static int dots(const char *n)
{
  return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0));
}

// Remove everything in the current directory, depth levels below the run's folder; 0, or
// -1 (rmpath then names what is left). Names are relative and one descriptor is open at a
// time, so that neither MAXPATH nor NOFILE limits the depth; each removal rescans the
// directory from its start.
static int rmhere(int depth)
{
  struct dirent de;
  char name[DIRSIZ + 1];
  for (;;) {
    int fd = open(".", O_RDONLY), found = 0;
    if (fd < 0)
      return -1;
    while (!found && read(fd, &de, sizeof(de)) == sizeof(de)) {
      memmove(name, de.name, DIRSIZ);
      name[DIRSIZ] = 0;
      found = de.inum != 0 && !dots(name);
    }
    close(fd);
    if (!found)
      return 0;
    if (unlink(name) == 0)
      continue;
    int n = strlen(rmpath), bad = depth >= MAXRMDEPTH || chdir(name) < 0;
    snprintf(rmpath + n, sizeof(rmpath) - n, "/%s", name);
    bad = bad || rmhere(depth + 1) < 0;
    if (bad || chdir("..") < 0 || unlink(name) < 0)
      return -1;
    rmpath[n] = 0;
  }
}

// Remove the run's folder and everything in it; 0, or -1.
static int rmtree(void)
{
  strcpy(rmpath, topdir);
  int r = chdir(topdir) < 0 || rmhere(0) < 0;
  chdir("/");
  return r || unlink(topdir) < 0 ? -1 : 0;
}

// What moving pages between RAM, swap and the page cache leaves alone: free pages less
// the swap slots in use (testlib's tl_free; docs/testing.md, "swaptest").
static int balanced(struct memstat *a, struct memstat *b)
{
  return memstat(b) == 0 && tl_free(b) == tl_free(a) && b->pagecache_pages == a->pagecache_pages;
}

static void usage(void)
{
  printf("usage: fuzz [--seed N] [--procs 1..%d] [--ops N | --seconds S] [--hog] [--verbose]\n"
         "SOME TESTS FAILED\n", MAXPROCS);
  exit(1);
}

// The value of option argv[i] (a non-negative number), or the usage line.
static long numopt(int argc, char **argv, int i)
{
  char *end;
  if (i >= argc)
    usage();
  long v = strtol(argv[i], &end, 10);
  if (end == argv[i] || *end != 0 || v < 0)
    usage();
  return v;
}

static void options(int argc, char **argv)
{
  int ops = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seed") == 0) {
      o_seed = numopt(argc, argv, ++i);
    } else if (strcmp(argv[i], "--procs") == 0) {
      o_procs = numopt(argc, argv, ++i);
    } else if (strcmp(argv[i], "--ops") == 0) {
      o_ops = numopt(argc, argv, ++i);
      ops = 1;
    } else if (strcmp(argv[i], "--seconds") == 0) {
      o_secs = numopt(argc, argv, ++i);
      if (o_secs == 0)
        usage();
    } else if (strcmp(argv[i], "--verbose") == 0) {
      o_verbose = 1;
    } else if (strcmp(argv[i], "--hog") == 0) {
      o_hog = 1;
    } else {
      usage();
    }
  }
  if (o_procs < 1 || o_procs > MAXPROCS || (ops && o_secs) || o_ops < 1)
    usage();
}

// What the reports of a run add up to.
struct totals {
  uint64 calls, forks, kills;
  int failed;     // processes that printed a FAIL line, or workers that died
  int killed;     // ... of them, how many because the kernel killed a process
};

// The repro line's options for a failure nobody could pin to an operation.
static void repro_all(void)
{
  printf("; repro: fuzz --seed %ld --procs %d --%s %ld%s\n", (long)o_seed, o_procs,
         o_secs ? "seconds" : "ops", o_secs ? o_secs : o_ops, o_hog ? " --hog" : "");
}

// Add the report records in buf[0..n) to t; returns how many bytes were whole records.
static int add_records(char *buf, int n, struct totals *t)
{
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64 rec;
    memmove(&rec, buf + i, 8);
    if (rec >> 56 != REC_TAG)
      continue;     // a record torn by a full pipe: its counts are lost
    t->failed += (rec >> 55) & 1;
    t->killed += (rec >> 54) & 1;
    t->kills += (rec >> 44) & 0x3ff;
    t->forks += (rec >> 32) & 0xfff;
    t->calls += rec & 0xffffffffUL;
  }
  return i;
}

// The hog (--hog, when the kernel has swap): a process that takes a sixteenth of RAM more
// than is free, so that reclaim pages out what is coldest, then every other tick stores
// into HOGTOUCH pages of it picked at random, until it is killed: the pages it brings back
// in push others out (the workers' too), a steady pressure under which the workers' system
// calls meet buffers in swap. The workers start only once it holds all its pages, so the
// pressure lasts the whole run however slow the host (the fill is 130 000 page faults in a
// 512 MiB guest). Only with at least a quarter of RAM in free swap slots (its excess and
// the workers' share). Returns its pid, or 0.
static int start_hog(struct memstat *m, int rfd)
{
  uint64 pages = m->free_pages + m->total_pages / 16, have = 0, x = 1;
  int full[2];
  char c;
  if (!o_hog || m->swap_slots - m->swap_slots_used < m->total_pages / 4 || pipe(full) < 0)
    return 0;
  int pid = fork();
  if (pid != 0) {
    close(full[1]);
    read(full[0], &c, 1);       // its byte, or end of file if it died filling
    close(full[0]);
    return pid > 0 ? pid : 0;
  }
  close(rfd);                   // not a holder of the report pipe: the parent waits for those
  close(resv);
  close(full[0]);
  char *base = sbrk(0);
  while (have < pages) {
    int n = min(pages - have, 4096);
    if (sbrk(n * PGSIZE) == (char *)-1)
      break;
    for (int i = 0; i < n; i++)
      base[(have + i) * PGSIZE] = 1;
    have += n;
  }
  write(full[1], "f", 1);
  close(full[1]);
  while (have && getppid() == me.pid) {
    for (int i = 0; i < HOGTOUCH; i++)
      base[xorshift(&x) % have * PGSIZE]++;
    sleep(2);
  }
  exit(0);
}

// Fork the workers, read the reports until every process of the run has gone (the end of
// the report pipe: they all hold its write end, orphans too), then reap the workers.
static void run_workers(int rfd, int hog, struct totals *t)
{
  static char buf[512];
  int n = 0, st, pid;
  for (int i = 0; i < o_procs; i++) {
    pid = fork();
    if (pid == 0) {
      close(rfd);
      worker(i, me.pid);
    }
    if (pid < 0) {
      printf("fuzz: FAIL fork of worker %d failed", i);
      repro_all();
      t->failed++;
    }
  }
  close(resv);
  for (int r; (r = read(rfd, buf + n, sizeof(buf) - n)) > 0; ) {
    int used = add_records(buf, n + r, t);
    n = n + r - used;
    memmove(buf, buf + used, n);
  }
  close(rfd);
  if (hog)
    kill(hog);
  while ((pid = wait(&st)) > 0) {
    if (st == 0 || st == FAILCODE || st == KILLCODE || (pid == hog && st == -1))
      continue;     // a FAIL line and a record said so
    t->failed++;
    t->killed += st == -1;
    printf("fuzz: FAIL worker pid %d exit status %d%s", pid, st,
           st == -1 ? ": killed, and not by fuzz" : "");
    repro_all();
  }
}

int main(int argc, char **argv)
{
  static struct memstat m0, m1;
  struct totals t;
  int rp[2], nfail;

  tl_init(argv[0]);
  if (argc == 2 && strcmp(argv[1], "-x") == 0)
    exit(XCODE);                  // what exec'd children run
  options(argc, argv);
  guard = guard_page();
  datastart = PGROUNDDOWN((uint64)&o_seed);   // .sdata opens the data segment (user.ld)
  memstat(&m0);                   // this one may fault (COW, swap); the next is the baseline
  if (memstat(&m0) < 0) {
    printf("fuzz: memstat failed\nSOME TESTS FAILED\n");
    exit(1);
  }
  lazy = m0.lazy_alloc;
  cow = m0.cow_alloc;
  sbrkcap_pages = m0.sbrk_cap_pages;
  heapcap = m0.total_pages / (32 * o_procs);
  heapcap = heapcap < 64 ? 64 : heapcap > 512 ? 512 : heapcap;
  mapcap = heapcap;
  me.pid = getpid();
  printf("fuzz: start seed=%ld procs=%d ops=%ld seconds=%ld lazy=%d cow=%d harts=%d "
         "total_pages=%ld swap_slots=%ld\n", (long)o_seed, o_procs, o_secs ? 0 : o_ops, o_secs,
         lazy, cow, m0.ncpu, (long)m0.total_pages, (long)m0.swap_slots);
  snprintf(topdir, sizeof(topdir), "/fuzz.%d", me.pid);
  if (mkdir(topdir) < 0 || pipe(rp) < 0) {
    printf("fuzz: FAIL cannot make %s or a pipe", topdir);
    repro_all();
    printf("SOME TESTS FAILED\n");
    exit(1);
  }
  for (int fd = 0; fd <= 2; fd++) {   // init opens the console for reading and writing
    fds[fd].kind = K_CONS;
    fds[fd].rd = fds[fd].wr = 1;
  }
  resv = rp[1];
  fds[resv].kind = K_RESV;
  memset(&t, 0, sizeof(t));
  int hog = start_hog(&m0, rp[0]);
  uint64 t0 = clock_us();
  if (o_secs)
    deadline = t0 + (uint64)o_secs * 1000000;
  run_workers(rp[0], hog, &t);
  nfail = t.failed;
  printf("test workers: %s\n", nfail ? "FAILED (the FAIL lines say why)" : "OK");
  if (rmtree() < 0) {
    printf("fuzz: FAIL cannot remove %s", rmpath);
    repro_all();
    nfail++;
  }
  // Orphans that init reaps may hold their last pages a moment longer.
  for (int i = 0; i < 200 && !balanced(&m0, &m1); i++)
    sleep(2);
  long leaked = tl_free(&m0) - tl_free(&m1);
  long cache = (long)m1.pagecache_pages - (long)m0.pagecache_pages;
  if (leaked || cache) {
    printf("test leakcheck: FAILED free pages %ld at start, %ld at end; page cache %ld -> %ld\n",
           tl_free(&m0), tl_free(&m1), (long)m0.pagecache_pages, (long)m1.pagecache_pages);
    nfail++;
  } else {
    printf("test leakcheck: OK\n");
  }
  printf("fuzz: done seed=%ld procs=%d calls=%ld forks=%ld kills=%ld failures=%d "
         "faults_killed=%d leaked_pages=%ld leaked_cache=%ld swap_slots_used=%ld->%ld "
         "swap_outs=%ld swap_ins=%ld seconds=%ld\n", (long)o_seed, o_procs, (long)t.calls,
         (long)t.forks, (long)t.kills, t.failed, t.killed, leaked, cache,
         (long)m0.swap_slots_used, (long)m1.swap_slots_used,
         (long)(m1.swap_outs - m0.swap_outs), (long)(m1.swap_ins - m0.swap_ins),
         (long)((clock_us() - t0) / 1000000));
  printf("%s\n", nfail ? "SOME TESTS FAILED" : "ALL TESTS PASSED");
  exit(nfail ? 1 : 0);
}
