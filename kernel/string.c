// The few C string and memory routines the kernel needs (there is no libc here).
#include "kernel/types.h"

// Contract: fill n bytes at dst with the byte c; returns dst.
// Whole 8-byte words are stored when dst is aligned (zeroing pages is hot).
void*
memset(void *dst, int c, uint n)
{
  uchar *d = (uchar *)dst;
  uint i = 0;

  if(((uint64)d & 7) == 0){
    uint64 w = (uchar)c;
    w |= w << 8;
    w |= w << 16;
    w |= w << 32;
    for(; i + 8 <= n; i += 8)
      *(uint64 *)(d + i) = w;
  }
  for(; i < n; i++)
    d[i] = (uchar)c;
  return dst;
}

// Contract: compare n bytes; <0, 0 or >0 as the first differing byte of a is below,
// equal to or above b's.
int
memcmp(const void *a, const void *b, uint n)
{
  const uchar *x = a, *y = b;

  for(uint i = 0; i < n; i++){
    if(x[i] != y[i])
      return x[i] - y[i];
  }
  return 0;
}

// Contract: copy n bytes from src to dst; the regions may overlap. Returns dst.
// Copies 8-byte words when both ends are aligned and the copy runs forwards.
void*
memmove(void *dst, const void *src, uint n)
{
  const uchar *s = src;
  uchar *d = dst;
  uint i = 0;

  if(n == 0 || s == d)
    return dst;
  if(s < d && s + n > d){
    // dst overlaps the tail of src: copy backwards.
    while(n-- > 0)
      d[n] = s[n];
    return dst;
  }
  if((((uint64)s | (uint64)d) & 7) == 0){
    for(; i + 8 <= n; i += 8)
      *(uint64 *)(d + i) = *(const uint64 *)(s + i);
  }
  for(; i < n; i++)
    d[i] = s[i];
  return dst;
}

// Contract: like memmove (gcc may emit calls to memcpy for struct copies).
void*
memcpy(void *dst, const void *src, uint n)
{
  return memmove(dst, src, n);
}

// Contract: compare at most n characters of two NUL-terminated strings.
int
strncmp(const char *p, const char *q, uint n)
{
  while(n > 0 && *p && *p == *q){
    n--;
    p++;
    q++;
  }
  if(n == 0)
    return 0;
  return (uchar)*p - (uchar)*q;
}

// Contract: copy at most n characters of t into s and pad with NULs up to n
// (the result is not terminated when t is n or more long). Returns s.
char*
strncpy(char *s, const char *t, int n)
{
  int i = 0;

  for(; i < n && t[i]; i++)
    s[i] = t[i];
  for(; i < n; i++)
    s[i] = 0;
  return s;
}

// Contract: like strncpy but the result is always NUL-terminated (for n > 0).
char*
safestrcpy(char *s, const char *t, int n)
{
  int i = 0;

  if(n <= 0)
    return s;
  for(; i < n - 1 && t[i]; i++)
    s[i] = t[i];
  s[i] = 0;
  return s;
}

// Contract: length of the NUL-terminated string s.
int
strlen(const char *s)
{
  int n = 0;

  while(s[n])
    n++;
  return n;
}
