// The small C library every user program links with: program entry, strings and memory,
// number parsing, line input, stat(), the user-visible clocks, and ramtop().
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/memstat.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/syscall.h"
#include "user/user.h"

extern int main(int argc, char *argv[]);

// The compiler may turn a byte loop into a call to memset/memcpy/strlen; in the functions that
// implement those calls that would recurse forever, so the transformation is switched off.
#define NO_LIBCALL __attribute__((optimize("no-tree-loop-distribute-patterns")))

// Program entry (user/user.ld says ENTRY(_main)). exec() starts here with argc in a0 and
// argv in a1; a program may return from main, and its return value becomes its exit status.
void
_main(int argc, char *argv[])
{
  exit(main(argc, argv));
}

// ---------------------------------------------------------------- strings

// Copy the string s, terminator included, into d; return d. d must have room.
char*
strcpy(char *d, const char *s)
{
  char *r = d;

  while((*d++ = *s++) != 0)
    ;
  return r;
}

// Copy at most n bytes of s into d and pad with zeros up to n bytes, like the C library:
// when s is n bytes or longer, d is NOT terminated. Returns d.
char*
strncpy(char *d, const char *s, int n)
{
  int i = 0;

  for(; i < n && s[i]; i++)
    d[i] = s[i];
  for(; i < n; i++)
    d[i] = 0;
  return d;
}

// Compare two strings as unsigned bytes: <0, 0 or >0.
int
strcmp(const char *a, const char *b)
{
  while(*a && *a == *b){
    a++;
    b++;
  }
  return (uchar)*a - (uchar)*b;
}

// Like strcmp, but look at no more than n bytes.
int
strncmp(const char *a, const char *b, uint n)
{
  for(; n > 0; n--, a++, b++){
    if(*a != *b || *a == 0)
      return (uchar)*a - (uchar)*b;
  }
  return 0;
}

// Number of bytes before the terminating zero.
NO_LIBCALL uint
strlen(const char *s)
{
  const char *p = s;

  while(*p)
    p++;
  return p - s;
}

// First occurrence of c in s (the terminator does not count), or 0.
char*
strchr(const char *s, char c)
{
  for(; *s; s++){
    if(*s == c)
      return (char*)s;
  }
  return 0;
}

// ---------------------------------------------------------------- memory

// Fill n bytes at dst with the byte c; return dst.
NO_LIBCALL void*
memset(void *dst, int c, uint n)
{
  uchar *d = dst;
  uint64 w;

  // Byte stores until aligned, then 8 bytes per store, then the tail.
  while(n > 0 && ((uint64)d & 7)){
    *d++ = c;
    n--;
  }
  w = (uchar)c;
  w |= w << 8;
  w |= w << 16;
  w |= w << 32;
  for(; n >= 8; n -= 8, d += 8)
    *(uint64*)d = w;
  while(n-- > 0)
    *d++ = c;
  return dst;
}

// Copy n bytes from src to dst; the two may overlap. Returns dst.
NO_LIBCALL void*
memmove(void *dst, const void *src, int n)
{
  uchar *d = dst;
  const uchar *s = src;

  if(n <= 0 || d == s)
    return dst;
  if(d < s || d >= s + n){
    // Forward copy is safe: d is below s or beyond the end of the source.
    if((((uint64)d | (uint64)s) & 7) == 0){
      for(; n >= 8; n -= 8, d += 8, s += 8)
        *(uint64*)d = *(const uint64*)s;
    }
    while(n-- > 0)
      *d++ = *s++;
  } else {
    // d lies inside the source: copy from the end backwards.
    d += n;
    s += n;
    while(n-- > 0)
      *--d = *--s;
  }
  return dst;
}

// Copy n bytes; the C standard says no overlap, but memmove handles both cases.
void*
memcpy(void *dst, const void *src, uint n)
{
  return memmove(dst, src, n);
}

// Compare n bytes as unsigned: <0, 0 or >0.
int
memcmp(const void *a, const void *b, uint n)
{
  const uchar *x = a, *y = b;

  for(; n > 0; n--, x++, y++){
    if(*x != *y)
      return *x - *y;
  }
  return 0;
}

// ---------------------------------------------------------------- input, files

// Read one line from fd 0 into buf, newline kept, always terminated; at most max-1 bytes.
// Stops early at end of input (then buf may be empty) or on a read error.
char*
gets(char *buf, int max)
{
  int i = 0;
  char c;

  while(i + 1 < max){
    if(read(0, &c, 1) != 1)
      break;
    buf[i++] = c;
    if(c == '\n' || c == '\r')
      break;
  }
  buf[i] = 0;
  return buf;
}

// Fill *st with the metadata of the file at path. 0 on success, -1 if it cannot be opened.
int
stat(const char *path, struct stat *st)
{
  int fd, r;

  fd = open(path, O_RDONLY);
  if(fd < 0)
    return -1;
  r = fstat(fd, st);
  close(fd);
  return r;
}

// ---------------------------------------------------------------- numbers

static int
isspace_(char c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Value of c as a digit in base 16 (0..15), or 99 when it is not a hex digit.
static int
digitval(char c)
{
  if(c >= '0' && c <= '9')
    return c - '0';
  if(c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if(c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return 99;
}

// Decimal integer at the start of s (optional spaces and sign); 0 when there is none.
int
atoi(const char *s)
{
  return (int)strtol(s, 0, 10);
}

// Parse an integer: leading spaces, optional sign, then digits of base 10 or 16. In base 16
// an optional 0x/0X prefix is skipped; base 0 picks 16 when the prefix is present, else 10.
// *end (if non-null) gets the first character not used; when there are no digits the result
// is 0 and *end == s. Overflow wraps (no errno here).
long
strtol(const char *s, char **end, int base)
{
  const char *p = s;
  int neg = 0, any = 0, d;
  uint64 v = 0;

  if(base != 0 && base != 10 && base != 16)
    base = 10;
  while(isspace_(*p))
    p++;
  if(*p == '+' || *p == '-')
    neg = (*p++ == '-');
  if((base == 0 || base == 16) && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')
     && digitval(p[2]) < 16){
    p += 2;
    base = 16;
  }
  if(base == 0)
    base = 10;
  for(; (d = digitval(*p)) < base; p++){
    v = v * base + d;
    any = 1;
  }
  if(end)
    *end = (char*)(any ? p : s);
  if(!any)
    return 0;
  return neg ? -(long)v : (long)v;
}

// 10^n for n >= 0, by repeated squaring (exact up to 10^22).
static double
pow10_(int n)
{
  double r = 1.0, b = 10.0;

  while(n > 0){
    if(n & 1)
      r *= b;
    b *= b;
    n >>= 1;
  }
  return r;
}

// Scale m by 10^e without overflowing intermediate powers for very small e.
static double
scale10(double m, int e)
{
  if(e >= 0)
    return m * pow10_(e);
  if(e < -300){
    m /= pow10_(300);
    e += 300;
  }
  return m / pow10_(-e);
}

// Parse a decimal floating-point number: spaces, sign, digits, optional fraction and
// exponent ("2.5", "-.5", "1e-3", "6.02E23"), also "inf" and "nan". *end as for strtol.
// Keeps up to 19 significant digits, which is more than a double holds.
double
strtod(const char *s, char **end)
{
  const char *p = s;
  int neg = 0, any = 0, exp = 0, nsig = 0;
  uint64 m = 0;
  double v;

  while(isspace_(*p))
    p++;
  if(*p == '+' || *p == '-')
    neg = (*p++ == '-');
  if(strncmp(p, "inf", 3) == 0 || strncmp(p, "nan", 3) == 0){
    v = (p[0] == 'i') ? __builtin_inf() : __builtin_nan("");
    if(end)
      *end = (char*)p + 3;
    return neg ? -v : v;
  }
  for(; *p >= '0' && *p <= '9'; p++, any = 1){
    if(nsig < 19){
      m = m * 10 + (*p - '0');
      if(m)
        nsig++;
    } else {
      exp++;               // digit beyond what we keep: only its place counts
    }
  }
  if(*p == '.'){
    for(p++; *p >= '0' && *p <= '9'; p++, any = 1){
      if(nsig < 19){
        m = m * 10 + (*p - '0');
        if(m)
          nsig++;
        exp--;
      }
    }
  }
  if(!any){
    if(end)
      *end = (char*)s;
    return 0;
  }
  if(*p == 'e' || *p == 'E'){
    char *q;
    long e = strtol(p + 1, &q, 10);
    if(q != p + 1 && p[1] != ' ' && p[1] != '\t'){
      if(e > 9999)
        e = 9999;
      if(e < -9999)
        e = -9999;
      exp += e;
      p = q;
    }
  }
  if(end)
    *end = (char*)p;
  if(m == 0)
    v = 0.0;
  else if(exp > 330)
    v = __builtin_inf();
  else if(exp < -360)
    v = 0.0;
  else
    v = scale10((double)m, exp);
  return neg ? -v : v;
}

// ---------------------------------------------------------------- clocks
// Both counters are read directly (no system call); the kernel lets user mode read them
// through the counter-enable CSRs (mcounteren/scounteren bits CY and TM).

// TIMEBASE_HZ (kernel/param.h): QEMU virt's time CSR ticks at 10 MHz.

// Microseconds since the machine started.
uint64
clock_us(void)
{
  uint64 t;

  asm volatile("rdtime %0" : "=r"(t));
  return t / (TIMEBASE_HZ / 1000000);
}

// The hart's cycle counter (under QEMU it advances with executed instructions).
uint64
clock_cycles(void)
{
  uint64 c;

  asm volatile("rdcycle %0" : "=r"(c));
  return c;
}

char *
sbrk(int n)
{
  return sys_sbrk(n, SBRK_POLICY);
}

char *
sbrklazy(int n)
{
  return sys_sbrk(n, SBRK_LAZY);
}

// ---------------------------------------------------------------- RAM

// Contract: the physical address just past RAM: KERNBASE + the RAM size the kernel booted
// with (memstat's memsize_mb). It is what PHYSTOP means in a user program (the Makefile
// compiles them with -DNEXOS_USER; kernel/memlayout.h). The kernel is asked once: RAM
// cannot change while the machine runs. 0 only if memstat() fails, which it cannot here.
uint64
ramtop(void)
{
  static uint64 top;
  struct memstat ms;

  if(top == 0 && memstat(&ms) == 0)
    top = KERNBASE + (uint64)ms.memsize_mb * 1024 * 1024;
  return top;
}
