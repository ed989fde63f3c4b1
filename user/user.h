// The user-space ABI: system calls (user/usys.S) and the user library (ulib.c, printf.c,
// umalloc.c, umath.c). Classic xv6 programs include "kernel/types.h", "kernel/stat.h" and
// "user/user.h" and compile unchanged.
struct stat;
struct memstat;

// system calls
int fork(void);
void exit(int) __attribute__((noreturn));
int wait(int*);
int pipe(int*);
int write(int, const void*, int);
int read(int, void*, int);
int close(int);
int kill(int);
int exec(const char*, char**);
int open(const char*, int);
int mknod(const char*, short, short);
int unlink(const char*);
int fstat(int fd, struct stat*);
int link(const char*, const char*);
int mkdir(const char*);
int chdir(const char*);
int dup(int);
int getpid(void);
int getppid(void);   // the parent's pid; 1 (init) once the parent has exited
char* sys_sbrk(int n, int how);   // how: SBRK_POLICY or SBRK_LAZY (kernel/syscall.h)
int sleep(int);
int uptime(void);
int memstat(struct memstat*);   // fill a snapshot (kernel/memstat.h); 0 or -1
// The one leak balance (ulib.c): free pages net of swap, and with_cache of the page cache.
long memfree_net(const struct memstat*, int with_cache);
// mmap: map len bytes of fd from offset off (page-aligned); prot/flags from kernel/fcntl.h.
// addr 0: the kernel chooses; else exactly addr or failure. (char *)-1 on failure.
void *mmap(void *addr, uint64 len, int prot, int flags, int fd, uint64 off);
int munmap(void *addr, uint64 len);   // a whole region, a prefix or a suffix; 0 or -1

// Names that newer stock xv6-riscv uses for the calls above, so that a
// course's programs written against it compile as EXTRA_UPROGS too (docs/userland.md).
#define SBRK_ERROR ((char *)-1)   // what sbrk returns when it fails
// pause(n): sleep(n) under its newer name; 0, or -1 if the caller is killed meanwhile.
static inline int pause(int n) { return sleep(n); }

// ulib.c
// sbrk(n): grow the heap by n bytes (shrink, n < 0); the old end, or SBRK_ERROR. Whether the
// new pages are mapped now is the kernel's LAZY_ALLOC; lazily it still refuses more than
// 150% of RAM and swap (docs/memory.md). sbrklazy(n): the same, but lazy in every
// configuration and held to no such bound.
char* sbrk(int n);
char* sbrklazy(int n);
int stat(const char*, struct stat*);
char* strcpy(char*, const char*);
char* strncpy(char*, const char*, int);
void *memmove(void*, const void*, int);
char* strchr(const char*, char c);
int strcmp(const char*, const char*);
int strncmp(const char*, const char*, uint);
char* gets(char*, int max);
uint strlen(const char*);
void* memset(void*, int, uint);
int atoi(const char*);
int memcmp(const void *, const void *, uint);
void *memcpy(void *, const void *, uint);
// Parse an integer in base 10 (or 16 with 0x) from s; *end (if non-null) gets the first
// unparsed character. Returns 0 with *end == s when s holds no number.
long strtol(const char *s, char **end, int base);
double strtod(const char *s, char **end);   // decimal number, optional sign/fraction/exponent
uint64 clock_us(void);      // microseconds since boot, read from the time CSR (no system call)
uint64 clock_cycles(void);  // the cycle counter (rdcycle)

// printf.c: %d %i %u %x %X %p %s %c %% %f %e %g; flags - 0 + space #, width and precision
// (digits or *), length modifiers h hh l ll z. One write() per call (docs/userland.md).
void fprintf(int, const char*, ...) __attribute__ ((format (printf, 2, 3)));
void printf(const char*, ...) __attribute__ ((format (printf, 1, 2)));
// Format into buf (size bytes, always terminated); returns the length the whole result needs.
int snprintf(char*, int, const char*, ...) __attribute__ ((format (printf, 3, 4)));

// umalloc.c
void* malloc(uint);
void free(void*);

// umath.c: single-precision maths without libm (user code has the F and D extensions)
float expf(float);
float logf(float);
float sqrtf(float);
float sinf(float);
float cosf(float);
float powf(float, float);
