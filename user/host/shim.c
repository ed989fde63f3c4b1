// A Linux stand-in for the NexOS user ABI (user/user.h), so that user programs such as
// smolprobe compile and run on the host with gcc for fast numerics iteration.
//
// Every ABI function is defined here as host_<name> (user/host/rename.h renames the
// program's calls). What matters most is memory: sbrk() hands out a private, lazily
// populated arena (an anonymous mmap with huge pages disabled), malloc() is carved from
// sbrk(), and memstat() counts the arena pages that are resident (mincore), so the page
// accounting of a program behaves like NexOS's LAZY_ALLOC=1 build: a page is "mapped" from
// its first touch. There are no page-table pages here, so used_pages == mapped_pages.
//
// Built by the top Makefile (build/host/smolserve, which the harness runs to check a
// workload file) and by tests/host/Makefile (the test tools and smolprobe).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------- host side helpers
// (defined before rename.h, so these names are glibc's)

#define ARENA_BYTES (3UL << 30)   // virtual size of the sbrk arena
#define HOST_PAGE 4096UL

static char *arena;               // base of the arena (page aligned)
static unsigned long brk_off;     // current break, as an offset into the arena

// Map the arena on first use; exits if the host refuses.
static void
arena_init(void)
{
  if(arena)
    return;
  void *p = mmap(0, ARENA_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if(p == MAP_FAILED){
    perror("shim: mmap arena");
    _exit(2);
  }
  madvise(p, ARENA_BYTES, MADV_NOHUGEPAGE);   // page-granular residency, like NexOS
  arena = p;
}

// Pages of [arena, arena+brk_off) that are resident.
static unsigned long
resident_pages(void)
{
  unsigned long n = (brk_off + HOST_PAGE - 1) / HOST_PAGE, count = 0;
  static unsigned char vec[1 << 16];
  for(unsigned long i = 0; i < n; i += sizeof(vec)){
    unsigned long m = n - i < sizeof(vec) ? n - i : sizeof(vec);
    if(mincore(arena + i * HOST_PAGE, m * HOST_PAGE, vec) < 0){
      perror("shim: mincore");
      _exit(2);
    }
    for(unsigned long j = 0; j < m; j++)
      count += vec[j] & 1;
  }
  return count;
}

static int
host_open_file(const char *path, int omode)
{
  int flags = (omode & 3) == 1 ? O_WRONLY : (omode & 3) == 2 ? O_RDWR : O_RDONLY;
  if(omode & 0x200)
    flags |= O_CREAT;
  if(omode & 0x400)
    flags |= O_TRUNC;
  return open(path, flags, 0644);
}

static int
host_fstat_file(int fd, unsigned long *size, int *isdir, unsigned long *ino)
{
  struct stat st;
  if(fstat(fd, &st) < 0)
    return -1;
  *size = st.st_size;
  *isdir = S_ISDIR(st.st_mode);
  *ino = st.st_ino;
  return 0;
}

static int
host_vdprintf(int fd, const char *fmt, va_list ap)
{
  return vdprintf(fd, fmt, ap);
}

// glibc's versions, under names that rename.h leaves alone.
static long g_write(int fd, const void *b, long n) { return write(fd, b, n); }
static long g_read(int fd, void *b, long n) { return read(fd, b, n); }
static int g_close(int fd) { return close(fd); }
static void *g_memset(void *d, int c, unsigned long n) { return memset(d, c, n); }
static void *g_memcpy(void *d, const void *s, unsigned long n) { return memcpy(d, s, n); }
static void *g_memmove(void *d, const void *s, unsigned long n) { return memmove(d, s, n); }
static int g_memcmp(const void *a, const void *b, unsigned long n) { return memcmp(a, b, n); }
// NexOS's mmap ABI (kernel/fcntl.h) names the same bits as Linux's for prot (1 read,
// 2 write, 4 exec), MAP_SHARED (1) and MAP_PRIVATE (2); its MAP_POPULATE is 0x08.
static void *g_mmap(unsigned long len, int prot, int flags, int fd, unsigned long off)
{
  return mmap(0, len, prot & 7, (flags & 3) | (flags & 0x08 ? MAP_POPULATE : 0), fd, (off_t)off);
}
static int g_munmap(void *a, unsigned long len) { return munmap(a, len); }
static long g_strtol(const char *s, char **e, int b) { return strtol(s, e, b); }
static double g_strtod(const char *s, char **e) { return strtod(s, e); }
static int g_fork(void) { return fork(); }
static int g_pipe(int *fds) { return pipe(fds); }
static int g_kill(int pid) { return kill(pid, SIGKILL); }  // NexOS kill: the process dies
static int g_getpid(void) { return getpid(); }
static int g_getppid(void) { return getppid(); }
static int g_unlink(const char *path) { return unlink(path); }
static void g_sleep_ms(long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
  nanosleep(&ts, 0);
}
static int g_vsnprintf(char *b, int n, const char *f, va_list ap) { return vsnprintf(b, n, f, ap); }

// wait() with an int* status in NexOS's sense: the child's exit status.
static int
g_wait(int *status)
{
  int st, pid = wait(&st);
  if(pid >= 0 && status)
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return pid;
}

// ---------------------------------------------------------------- the NexOS ABI

#include "user/host/rename.h"
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/memstat.h"
#include "user/user.h"

void
exit(int status)
{
  _exit(status);
}

// Processes: the host's own (the sbrk arena is a private mapping, so a child gets a
// copy-on-write image of it, like NexOS with COW_ALLOC=1; memstat counts no COW faults).
int
fork(void)
{
  return g_fork();
}

int
pipe(int *fds)
{
  return g_pipe(fds);
}

int
wait(int *status)
{
  return g_wait(status);
}

// kill(pid): NexOS ends the process as if it had faulted (exit status -1); SIGKILL here,
// which the shim's wait() reports as -1 too.
int
kill(int pid)
{
  return g_kill(pid);
}

int
getpid(void)
{
  return g_getpid();
}

// getppid(): the parent's pid; once the parent has exited, init's (NexOS) or a
// subreaper's (Linux): user/llm/harts.c only asks whether it changed.
int
getppid(void)
{
  return g_getppid();
}

int
write(int fd, const void *buf, int n)
{
  return (int)g_write(fd, buf, n);
}

int
read(int fd, void *buf, int n)
{
  return (int)g_read(fd, buf, n);
}

int
close(int fd)
{
  return g_close(fd);
}

int
open(const char *path, int omode)
{
  return host_open_file(path, omode);
}

int
fstat(int fd, struct stat *st)
{
  unsigned long size, ino;
  int isdir;
  if(host_fstat_file(fd, &size, &isdir, &ino) < 0)
    return -1;
  st->dev = 1;
  st->ino = (uint)ino;
  st->type = isdir ? T_DIR : T_FILE;
  st->nlink = 1;
  st->size = size;
  return 0;
}

// File mappings: the host's own (memstat's file_pages stays 0 here).
void *
mmap(void *addr, uint64 len, int prot, int flags, int fd, uint64 off)
{
  return addr ? (void *)-1 : g_mmap(len, prot, flags, fd, off);
}

int
munmap(void *addr, uint64 len)
{
  return g_munmap(addr, len);
}

int
unlink(const char *path)
{
  return g_unlink(path);
}

// sleep(n): n NexOS clock ticks of 10 ms (user/llm/harts.c's idle helpers poll with it).
int
sleep(int n)
{
  g_sleep_ms(n > 0 ? 10L * n : 0);
  return 0;
}

// Grow (or shrink) the arena's break by n bytes; the old break, or (char*)-1.
char *
sbrk(int n)
{
  arena_init();
  long nb = (long)brk_off + n;
  if(nb < 0 || (unsigned long)nb > ARENA_BYTES)
    return (char *)-1;
  char *old = arena + brk_off;
  brk_off = nb;
  return old;
}

// A bump allocator over sbrk (16-byte aligned); free() keeps nothing.
void *
malloc(uint n)
{
  arena_init();
  unsigned long pad = (16 - (brk_off & 15)) & 15;
  if(sbrk((int)pad) == (char *)-1)
    return 0;
  if(n > 0x7fffffffU)
    return 0;
  char *p = sbrk((int)n);
  return p == (char *)-1 ? 0 : p;
}

void
free(void *p)
{
  (void)p;
}

int
memstat(struct memstat *m)
{
  arena_init();
  unsigned long mapped = resident_pages();
  g_memset(m, 0, sizeof(*m));
  m->vpages = (brk_off + HOST_PAGE - 1) / HOST_PAGE;
  m->mapped_pages = mapped;
  m->total_pages = ARENA_BYTES / HOST_PAGE;
  m->free_pages = m->total_pages - mapped;
  m->lazy_alloc = 1;
  m->ncpu = 1;
  m->memsize_mb = (int)(ARENA_BYTES >> 20);
  return 0;
}

uint64
clock_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64)ts.tv_sec * 1000000 + (uint64)ts.tv_nsec / 1000;
}

void
printf(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  host_vdprintf(1, fmt, ap);
  va_end(ap);
}

int
snprintf(char *buf, int size, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = g_vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}

void
fprintf(int fd, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  host_vdprintf(fd, fmt, ap);
  va_end(ap);
}

uint
strlen(const char *s)
{
  uint n = 0;
  while(s[n])
    n++;
  return n;
}

int
strcmp(const char *a, const char *b)
{
  while(*a && *a == *b)
    a++, b++;
  return (uchar)*a - (uchar)*b;
}

int
strncmp(const char *a, const char *b, uint n)
{
  for(; n > 0; n--, a++, b++)
    if(*a != *b || *a == 0)
      return (uchar)*a - (uchar)*b;
  return 0;
}

char *
strchr(const char *s, char c)
{
  for(; *s; s++)
    if(*s == c)
      return (char *)s;
  return 0;
}

void *
memset(void *dst, int c, uint n)
{
  return g_memset(dst, c, n);
}

void *
memcpy(void *dst, const void *src, uint n)
{
  return g_memcpy(dst, src, n);
}

void *
memmove(void *dst, const void *src, int n)
{
  return g_memmove(dst, src, n);
}

int
memcmp(const void *a, const void *b, uint n)
{
  return g_memcmp(a, b, n);
}

long
strtol(const char *s, char **end, int base)
{
  return g_strtol(s, end, base);
}

double
strtod(const char *s, char **end)
{
  return g_strtod(s, end);
}

int
atoi(const char *s)
{
  return (int)g_strtol(s, 0, 10);
}
