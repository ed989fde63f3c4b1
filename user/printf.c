// Formatted output: printf, fprintf and snprintf.
//
// Conversions: %d %i %u %x %X %p %s %c %% and %f %e %g (double). Flags '-' '0' '+' ' ',
// a field width and a precision (digits or '*'), length modifiers h l ll z (hh too).
// Output is collected in a buffer and handed to write() once per call (or when the buffer
// fills), so a line costs one system call, not one per character.
#include <stdarg.h>
#include "kernel/types.h"
#include "user/user.h"

// ---------------------------------------------------------------- output sink

// Where formatted characters go: a file descriptor (through buf) or a caller's string.
struct sink {
  int fd;        // >= 0: write to this fd; -1: store into str
  char *str;     // snprintf's destination
  int cap;       // snprintf: bytes available in str (terminator included)
  int total;     // characters produced so far (snprintf's return value)
  int n;         // bytes waiting in buf (fd mode)
  char *buf;     // fd mode: OUTBUF bytes
};

#define OUTBUF 512

// One buffer per process is enough: user processes are single-threaded and printf does
// not call itself. Static, because the user stack is a single page.
static char outbuf[OUTBUF];
static struct sink outsink = { .buf = outbuf };

// Hand the buffered bytes to write().
static void
flush(struct sink *o)
{
  if(o->fd >= 0 && o->n > 0)
    write(o->fd, o->buf, o->n);
  o->n = 0;
}

// Emit one character.
static void
put(struct sink *o, char c)
{
  if(o->fd < 0){
    if(o->total < o->cap - 1)
      o->str[o->total] = c;
  } else {
    if(o->n == OUTBUF)
      flush(o);
    o->buf[o->n++] = c;
  }
  o->total++;
}

// Emit c n times (n <= 0: nothing).
static void
putn(struct sink *o, char c, int n)
{
  while(n-- > 0)
    put(o, c);
}

// ---------------------------------------------------------------- one conversion spec

struct spec {
  int left;      // '-': pad on the right
  int zero;      // '0': pad numbers with zeros
  int plus;      // '+': sign always
  int space;     // ' ': space in place of '+'
  int alt;       // '#': %g keeps trailing zeros
  int width;     // minimum field width (0 = none)
  int prec;      // precision, -1 = not given
  int size;      // 0 = int, 1 = long, 2 = long long (both 64-bit here), -1 short, -2 char
};

// Write the sign (if any), zero or space padding, and the body of a number, honouring
// the width and the flags. body has blen characters; sign is 0 or '-', '+', ' '.
static void
putfield(struct sink *o, struct spec *sp, char sign, const char *prefix, const char *body,
         int blen)
{
  int plen = strlen(prefix) + (sign != 0);
  int pad = sp->width - plen - blen;

  if(!sp->left && !sp->zero)
    putn(o, ' ', pad);
  if(sign)
    put(o, sign);
  while(*prefix)
    put(o, *prefix++);
  if(!sp->left && sp->zero)
    putn(o, '0', pad);
  while(blen-- > 0)
    put(o, *body++);
  if(sp->left)
    putn(o, ' ', pad);
}

// Format an unsigned 64-bit value in the given base, with the precision as minimum digits.
static void
putuint(struct sink *o, struct spec *sp, uint64 v, int base, int upper, char sign,
        const char *prefix)
{
  const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  char tmp[24];
  int i = sizeof(tmp);

  do {
    tmp[--i] = digits[v % base];
    v /= base;
  } while(v != 0 && i > 0);
  if(sp->prec == 0 && tmp[i] == '0' && i == (int)sizeof(tmp) - 1)
    i++;                                 // "%.0d" of 0 prints nothing
  while(sp->prec > (int)sizeof(tmp) - i && i > 0)
    tmp[--i] = '0';
  if(sp->prec >= 0)
    sp->zero = 0;                        // C: a precision overrides the '0' flag
  putfield(o, sp, sign, prefix, tmp + i, sizeof(tmp) - i);
}

// Sign character for a number whose negativity is neg.
static char
signchar(struct spec *sp, int neg)
{
  if(neg)
    return '-';
  if(sp->plus)
    return '+';
  if(sp->space)
    return ' ';
  return 0;
}

// ---------------------------------------------------------------- floating point
//
// A finite x > 0 is turned into an integer D of at most 19 decimal digits and a power of
// ten L such that x ~= D * 10^L, rounded at the last digit the conversion shows; digits
// below 10^L (beyond what a double holds) print as zeros. Each digit of the result is
// then read with digit_at(position), position 0 being the units.

#define MAXSIG 18   // significant digits kept (a double needs 17 to round-trip; +1 free)

struct decimal {
  uint64 d;      // the digits
  int k;         // number of digits in d (0 when d == 0)
  int low;       // L: power of ten of d's last digit
};

// Scaling by powers of ten is done in double-double arithmetic: a value is hi + lo, two
// doubles with |lo| <= ulp(hi)/2, about 106 bits in all. That keeps the 17 digits printed
// exact (a plain double product would already be off in the 16th digit for 1e300), and
// lets a value that is just below a rounding tie (0.045 * 100) round the way C does.
struct dd {
  double hi, lo;
};

// a * b in double-double. fma gives the rounding error of hi*hi exactly.
static struct dd
dd_mul(struct dd a, struct dd b)
{
  struct dd r;
  double p = a.hi * b.hi;
  double e = __builtin_fma(a.hi, b.hi, -p) + (a.hi * b.lo + a.lo * b.hi);

  r.hi = p + e;
  r.lo = e - (r.hi - p);
  return r;
}

// a / b in double-double: one correction step after the plain quotient.
static struct dd
dd_div(struct dd a, struct dd b)
{
  struct dd q, t, r;
  double rem;

  q.hi = a.hi / b.hi;
  q.lo = 0;
  t = dd_mul(q, b);
  rem = ((a.hi - t.hi) - t.lo) + a.lo;
  r.hi = q.hi + rem / b.hi;
  r.lo = rem / b.hi - (r.hi - q.hi);
  return r;
}

// 10^n for 0 <= n <= 300, by repeated squaring (exact up to 10^45).
static struct dd
dd_pow10(int n)
{
  struct dd r = { 1.0, 0.0 }, b = { 10.0, 0.0 };

  while(n > 0){
    if(n & 1)
      r = dd_mul(r, b);
    b = dd_mul(b, b);
    n >>= 1;
  }
  return r;
}

// x * 10^n for any n the printer needs (|n| <= 660), as a double-double.
static struct dd
scale(double x, int n)
{
  struct dd r = { x, 0.0 };

  while(n > 300){
    r = dd_mul(r, dd_pow10(300));
    n -= 300;
  }
  while(n < -300){
    r = dd_div(r, dd_pow10(300));
    n += 300;
  }
  return n >= 0 ? dd_mul(r, dd_pow10(n)) : dd_div(r, dd_pow10(-n));
}

// Estimate floor(log10(x)) for finite x >= 0: the result is the true value or one less
// (callers correct it); 0 for x == 0.
static int
decexp(double x)
{
  union { double d; uint64 u; } b = { x };
  int e2, e, sub = 0;

  if(x == 0)
    return 0;
  if(((b.u >> 52) & 0x7ff) == 0){
    b.d = x * 18446744073709551616.0;    // subnormal: scale by 2^64 to read the exponent
    sub = 64;
  }
  e2 = (int)((b.u >> 52) & 0x7ff) - 1023 - sub;
  e = (e2 * 30103) / 100000;

  if(e2 < 0 && (e2 * 30103) % 100000 != 0)
    e--;                                 // floor, not truncation toward zero
  if(e < -330)
    e = -330;
  return e;
}

// Number of decimal digits of v (0 for v == 0).
static int
ndigits(uint64 v)
{
  int k = 0;

  while(v){
    k++;
    v /= 10;
  }
  return k;
}

// Round finite x > 0 (or 0) to the last shown place 10^low, where e is the estimated
// exponent of its leading digit. Fills *r.
static void
todecimal(double x, int e, int low, struct decimal *r)
{
  struct dd y;
  double f;
  long li;

  if(e - low + 1 > MAXSIG)
    low = e - MAXSIG + 1;                // digits beyond MAXSIG print as zeros
  r->low = low;
  if(x == 0 || e + 1 < low - 1){
    // The true exponent is e or e+1, so x < 10^(low-1): it rounds to zero.
    r->d = 0;
    r->k = 0;
    return;
  }
  y = scale(x, -low);                    // at most MAXSIG+1 digits: y.hi < 2^64
  r->d = (uint64)y.hi;
  // Above 2^53, y.lo may hold whole units too: add its integer part to d, keep the rest.
  li = (long)y.lo;
  r->d += li;
  f = (y.hi - (double)(uint64)y.hi) + (y.lo - (double)li);   // the fraction, in (-1, 2)
  if(f < 0){
    r->d--;
    f += 1;
  } else if(f >= 1){
    r->d++;
    f -= 1;
  }
  if(f > 0.5 || (f == 0.5 && (r->d & 1)))
    r->d++;                              // round half to even, as C's printf does
  r->k = ndigits(r->d);
}

// The decimal digit at power-of-ten position pos.
static char
digit_at(struct decimal *r, int pos)
{
  uint64 v = r->d;
  int i = pos - r->low;

  if(i < 0 || i >= r->k)
    return '0';
  while(i-- > 0)
    v /= 10;
  return '0' + v % 10;
}

// Power of ten of the leading digit (0 for zero).
static int
topdigit(struct decimal *r)
{
  return r->k == 0 ? 0 : r->low + r->k - 1;
}

// Put %f digits: the integer part, then '.' and prec fraction digits ('.' also when dot
// is set). With count_only, emit nothing; either way return the length.
static int
fixed_body(struct sink *o, struct decimal *r, int prec, int dot, int count_only)
{
  int top = topdigit(r), n = 0, pos;

  if(top < 0)
    top = 0;
  for(pos = top; pos >= -prec; pos--){
    if(pos == -1){
      if(!count_only)
        put(o, '.');
      n++;
    }
    if(!count_only)
      put(o, digit_at(r, pos));
    n++;
  }
  if(prec == 0 && dot){
    if(!count_only)
      put(o, '.');
    n++;
  }
  return n;
}

// Put %e digits: d.ddd then e+XX (at least two exponent digits). Return the length; with
// count_only, only the length.
static int
exp_body(struct sink *o, struct decimal *r, int prec, int dot, char echar, int count_only)
{
  int top = topdigit(r), n = 0, i, ex, ediv;

  if(!count_only)
    put(o, digit_at(r, top));
  n++;
  if(prec > 0 || dot){
    if(!count_only)
      put(o, '.');
    n++;
  }
  for(i = 1; i <= prec; i++){
    if(!count_only)
      put(o, digit_at(r, top - i));
    n++;
  }
  ex = top < 0 ? -top : top;
  if(!count_only){
    put(o, echar);
    put(o, top < 0 ? '-' : '+');
  }
  n += 2;
  ediv = 1;
  while(ediv * 10 <= ex)
    ediv *= 10;
  if(ediv == 1){
    if(!count_only)
      put(o, '0');
    n++;
  }
  for(; ediv > 0; ediv /= 10){
    if(!count_only)
      put(o, '0' + (ex / ediv) % 10);
    n++;
  }
  return n;
}

// Round x > 0 for %e with prec digits after the point: the exponent estimate is fixed up
// when it was one off (either way) or the rounding carried into a new digit.
static void
round_exp(double x, int prec, struct decimal *r)
{
  int e = decexp(x), tries;

  if(x == 0){
    todecimal(0, 0, -prec, r);
    r->low = -prec;
    return;
  }
  for(tries = 0; tries < 4; tries++){
    todecimal(x, e, e - prec, r);
    if(r->k == 0 || topdigit(r) == e)
      break;
    e = topdigit(r);
  }
}

// Count the zeros that %g may strip: digits from position lowpos up, below position point
// (the place just right of the decimal point is point-1).
static int
stripzeros(struct decimal *r, int lowpos, int point)
{
  int n = 0;

  while(lowpos + n < point && digit_at(r, lowpos + n) == '0')
    n++;
  return n;
}

// %f %e %g of a double, with width, flags and precision.
static void
putdouble(struct sink *o, struct spec *sp, double x, char conv)
{
  struct decimal r;
  char sign;
  int prec = sp->prec < 0 ? 6 : sp->prec;
  int upper = (conv == 'F' || conv == 'E' || conv == 'G');
  int isexp, len, pad;

  if(prec > 100)
    prec = 100;
  sign = signchar(sp, x < 0 || (x == 0 && 1 / x < 0));
  if(x != x || x - x != 0){              // NaN, or +-inf (inf - inf is NaN)
    const char *s = (x != x) ? (upper ? "NAN" : "nan") : (upper ? "INF" : "inf");
    if(x != x)
      sign = signchar(sp, 0);
    sp->zero = 0;
    putfield(o, sp, sign, "", s, 3);
    return;
  }
  if(x < 0)
    x = -x;

  conv |= 0x20;                          // lower case: f, e or g
  isexp = (conv == 'e');
  if(conv == 'g'){
    // %g: P significant digits; exponent form when X < -4 or X >= P.
    int P = prec == 0 ? 1 : prec, X;
    round_exp(x, P - 1, &r);
    X = (r.k == 0) ? 0 : topdigit(&r);
    if(X < -4 || X >= P){
      isexp = 1;
      prec = P - 1;
    } else {
      prec = P - 1 - X;
    }
  }
  if(isexp)
    round_exp(x, prec, &r);
  else
    todecimal(x, decexp(x), -prec, &r);

  if(conv == 'g' && !sp->alt){
    int low = isexp ? topdigit(&r) - prec : -prec;
    int z = stripzeros(&r, low, isexp ? topdigit(&r) : 0);
    prec -= z;
  }

  len = isexp ? exp_body(o, &r, prec, sp->alt, upper ? 'E' : 'e', 1)
              : fixed_body(o, &r, prec, sp->alt, 1);
  pad = sp->width - len - (sign != 0);
  if(!sp->left && !sp->zero)
    putn(o, ' ', pad);
  if(sign)
    put(o, sign);
  if(!sp->left && sp->zero)
    putn(o, '0', pad);
  if(isexp)
    exp_body(o, &r, prec, sp->alt, upper ? 'E' : 'e', 0);
  else
    fixed_body(o, &r, prec, sp->alt, 0);
  if(sp->left)
    putn(o, ' ', pad);
}

// ---------------------------------------------------------------- the format loop

// Read a decimal number at *fmt, advancing it.
static int
readnum(const char **fmt)
{
  int n = 0;

  while(**fmt >= '0' && **fmt <= '9'){
    if(n < 100000)
      n = n * 10 + (**fmt - '0');
    (*fmt)++;
  }
  return n;
}

// Format fmt with the arguments ap into o.
static void
format(struct sink *o, const char *fmt, va_list ap)
{
  struct spec sp;
  char c;

  for(; *fmt; fmt++){
    if(*fmt != '%'){
      put(o, *fmt);
      continue;
    }
    fmt++;
    memset(&sp, 0, sizeof(sp));
    sp.prec = -1;
    for(;; fmt++){                       // flags
      if(*fmt == '-') sp.left = 1;
      else if(*fmt == '0') sp.zero = 1;
      else if(*fmt == '+') sp.plus = 1;
      else if(*fmt == ' ') sp.space = 1;
      else if(*fmt == '#') sp.alt = 1;
      else break;
    }
    if(*fmt == '*'){
      sp.width = va_arg(ap, int);
      if(sp.width < 0){
        sp.left = 1;
        sp.width = -sp.width;
      }
      fmt++;
    } else {
      sp.width = readnum(&fmt);
    }
    if(*fmt == '.'){
      fmt++;
      if(*fmt == '*'){
        sp.prec = va_arg(ap, int);
        fmt++;
      } else {
        sp.prec = readnum(&fmt);
      }
    }
    if(sp.left)
      sp.zero = 0;
    for(;; fmt++){                       // length modifiers
      if(*fmt == 'l' || *fmt == 'z' || *fmt == 'j' || *fmt == 't') sp.size = 1;
      else if(*fmt == 'h') sp.size = (sp.size == -1) ? -2 : -1;
      else break;
    }
    c = *fmt;
    if(c == 0)
      break;
    switch(c){
    case 'd':
    case 'i': {
      long v = sp.size > 0 ? va_arg(ap, long) : va_arg(ap, int);
      if(sp.size == -1) v = (short)v;
      if(sp.size == -2) v = (signed char)v;
      putuint(o, &sp, v < 0 ? -(uint64)v : (uint64)v, 10, 0, signchar(&sp, v < 0), "");
      break;
    }
    case 'u':
    case 'x':
    case 'X': {
      uint64 v = sp.size > 0 ? va_arg(ap, uint64) : va_arg(ap, uint);
      if(sp.size == -1) v = (ushort)v;
      if(sp.size == -2) v = (uchar)v;
      if(c == 'u')
        putuint(o, &sp, v, 10, 0, 0, "");
      else
        putuint(o, &sp, v, 16, c == 'X', 0, (sp.alt && v) ? (c == 'X' ? "0X" : "0x") : "");
      break;
    }
    case 'p':
      putuint(o, &sp, (uint64)va_arg(ap, void*), 16, 0, 0, "0x");
      break;
    case 'c': {
      char ch = va_arg(ap, int);
      sp.zero = 0;
      putfield(o, &sp, 0, "", &ch, 1);
      break;
    }
    case 's': {
      const char *s = va_arg(ap, const char*);
      int n = 0;
      if(s == 0)
        s = "(null)";
      while(s[n] && (sp.prec < 0 || n < sp.prec))
        n++;
      sp.zero = 0;
      putfield(o, &sp, 0, "", s, n);
      break;
    }
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
      putdouble(o, &sp, va_arg(ap, double), c);
      break;
    case '%':
      put(o, '%');
      break;
    default:
      // Unknown conversion: show it as written so the mistake is visible.
      put(o, '%');
      put(o, c);
      break;
    }
  }
}

// ---------------------------------------------------------------- entry points

// Format to fd: one write() for the whole result unless it exceeds the buffer.
static void
vfprintf(int fd, const char *fmt, va_list ap)
{
  outsink.fd = fd;
  outsink.n = 0;
  outsink.total = 0;
  format(&outsink, fmt, ap);
  flush(&outsink);
}

// Print to fd.
void
fprintf(int fd, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vfprintf(fd, fmt, ap);
  va_end(ap);
}

// Print to the standard output (fd 1).
void
printf(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vfprintf(1, fmt, ap);
  va_end(ap);
}

// Format into str (at most size bytes, always terminated when size > 0). Returns the
// length the full result would have, like C's snprintf.
int
snprintf(char *str, int size, const char *fmt, ...)
{
  struct sink s;
  va_list ap;

  s.buf = 0;
  s.fd = -1;
  s.str = str;
  s.cap = size;
  s.total = 0;
  s.n = 0;
  va_start(ap, fmt);
  format(&s, fmt, ap);
  va_end(ap);
  if(size > 0)
    str[s.total < size ? s.total : size - 1] = 0;
  return s.total;
}
