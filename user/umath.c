// Single-precision maths for user programs, without libm: expf logf sqrtf sinf cosf powf.
//
// Each function widens its float argument to double, evaluates a short polynomial there
// and rounds once back to float. Double carries 29 more bits than float, so the results
// are correctly rounded except in rare near-halfway cases (within 1 ulp always), which is
// what smolprobe needs to agree with numpy's float32 maths.
//
// Accuracy limits, stated once: sinf/cosf reduce the argument with pi/2 split into four
// parts (Cody-Waite), exact for |x| < 2^22; beyond that (where float's own spacing is
// already > 0.5) the reduction loses bits gradually.
#include "kernel/types.h"
#include "user/user.h"

// Same roundings on every target (the host test build has no fused multiply-add).
#pragma GCC optimize("fp-contract=off")

#define LN2      0x1.62e42fefa39efp-1   // ln 2
#define INV_LN2  0x1.71547652b82fep+0   // 1 / ln 2
#define TWO_OVER_PI 0x1.45f306dc9c883p-1

// pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_4; the first three have 30 significant bits, so
// k * PIO2_i is exact in double for |k| < 2^23.
#define PIO2_1 0x1.921fb54p+0
#define PIO2_2 0x1.10b4611p-30
#define PIO2_3 0x1.313198ap-61
#define PIO2_4 0x1.701b839a25205p-92

// The bits of a float or double, for classifying and for building powers of two.
union fbits { float f; uint32 u; };
union dbits { double d; uint64 u; };

// 2^k as a double, for -1022 <= k <= 1023.
static double
pow2i(int k)
{
  union dbits b;
  b.u = (uint64)(k + 1023) << 52;
  return b.d;
}

// Nearest integer to x (halves away from zero), for |x| < 2^31.
static long
nearest(double x)
{
  return x >= 0 ? (long)(x + 0.5) : -(long)(0.5 - x);
}

// e^x in double for |x| <= ~745. Reduction x = k ln2 + r with |r| <= ln2/2, then the
// Taylor series of e^r to degree 13 (truncation error < 2e-17 relative).
static double
exp_d(double x)
{
  long k = nearest(x * INV_LN2);
  double r = x - (double)k * LN2;
  double p = 1.0 / 6227020800.0;          // 1/13!
  static const double inv_fact[13] = {
    1.0, 1.0, 1.0/2, 1.0/6, 1.0/24, 1.0/120, 1.0/720, 1.0/5040, 1.0/40320,
    1.0/362880, 1.0/3628800, 1.0/39916800, 1.0/479001600,
  };
  for(int i = 12; i >= 0; i--)
    p = p * r + inv_fact[i];
  // Split 2^k in two factors so that both stay normal doubles for k in [-1074, 1023].
  long k1 = k / 2;
  return p * pow2i((int)k1) * pow2i((int)(k - k1));
}

// ln x in double for finite x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172, series to s^23 (error < 1e-18).
static double
log_d(double x)
{
  union dbits b = { .d = x };
  int e = (int)((b.u >> 52) & 0x7ff);
  if(e == 0){                       // subnormal: scale into the normal range first
    b.d = x * 0x1p54;
    e = (int)((b.u >> 52) & 0x7ff) - 54;
  }
  e -= 1023;
  b.u = (b.u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;   // m in [1, 2)
  double m = b.d;
  if(m > 0x1.6a09e667f3bcdp+0){     // > sqrt(2): use m/2 and e+1
    m *= 0.5;
    e += 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  double p = 0.0;
  for(int n = 23; n >= 3; n -= 2)
    p = (p + 1.0 / n) * s2;
  return 2.0 * s * (1.0 + p) + (double)e * LN2;
}

// Is f a NaN?
static int
isnan_f(float f)
{
  return f != f;
}

// e^x; +inf above ~88.72, +0 below ~-103.97, NaN for NaN.
float
expf(float x)
{
  if(isnan_f(x))
    return x;
  if(x > 89.0f)
    return (float)pow2i(1000);      // rounds to +inf
  if(x < -104.0f)
    return 0.0f;
  return (float)exp_d(x);
}

// ln x; -inf for 0, NaN for x < 0 or NaN, +inf for +inf.
float
logf(float x)
{
  union fbits b = { .f = x };
  if(isnan_f(x) || x < 0.0f)
    return 0.0f / 0.0f;
  if(x == 0.0f)
    return -1.0f / 0.0f;
  if(b.u == 0x7f800000u)
    return x;
  return (float)log_d(x);
}

// The square root, correctly rounded (IEEE): the hardware instruction where there is one.
float
sqrtf(float x)
{
#if defined(__riscv)
  float r;
  asm("fsqrt.s %0, %1" : "=f"(r) : "f"(x));
  return r;
#elif defined(__x86_64__)
  float r;
  asm("sqrtss %1, %0" : "=x"(r) : "x"(x));
  return r;
#else
  // Newton's method in double from a rough start, then one rounding to float.
  if(isnan_f(x) || x < 0.0f)
    return 0.0f / 0.0f;
  if(x == 0.0f || x > 3.4e38f)
    return x;
  double d = x, r = d > 1.0 ? d : 1.0;
  for(int i = 0; i < 80; i++)
    r = 0.5 * (r + d / r);
  return (float)r;
#endif
}

// sin r and cos r for |r| <= pi/4 (plus a bit), Taylor series in double (error < 1e-16).
static double
sin_poly(double r)
{
  double r2 = r * r;
  double p = 0.0;
  // sin r = r (1 - r^2/3! + r^4/5! - ... ) up to r^15/15!
  for(int n = 15; n >= 3; n -= 2)
    p = -(p + 1.0) * r2 / ((double)n * (double)(n - 1));
  return r + r * p;
}

static double
cos_poly(double r)
{
  double r2 = r * r;
  double p = 0.0;
  // cos r = 1 - r^2/2! + r^4/4! - ... up to r^16/16!
  for(int n = 16; n >= 2; n -= 2)
    p = -(p + 1.0) * r2 / ((double)n * (double)(n - 1));
  return 1.0 + p;
}

// Reduce x to r in [-pi/4, pi/4] with x = k pi/2 + r; returns k mod 4.
static int
reduce(double x, double *r)
{
  long k = nearest(x * TWO_OVER_PI);
  double kd = (double)k;
  *r = ((x - kd * PIO2_1) - kd * PIO2_2) - kd * PIO2_3 - kd * PIO2_4;
  return (int)(k & 3);
}

// sin x; NaN for NaN or infinity.
float
sinf(float x)
{
  if(isnan_f(x) || x - x != 0.0f)
    return 0.0f / 0.0f;
  if(x > -0x1p-12f && x < 0x1p-12f)
    return x;                         // sin x = x to float precision (keeps -0)
  double r;
  switch(reduce(x, &r)){
  case 0: return (float)sin_poly(r);
  case 1: return (float)cos_poly(r);
  case 2: return (float)-sin_poly(r);
  default: return (float)-cos_poly(r);
  }
}

// cos x; NaN for NaN or infinity.
float
cosf(float x)
{
  if(isnan_f(x) || x - x != 0.0f)
    return 0.0f / 0.0f;
  double r;
  switch(reduce(x, &r)){
  case 0: return (float)cos_poly(r);
  case 1: return (float)-sin_poly(r);
  case 2: return (float)-cos_poly(r);
  default: return (float)sin_poly(r);
  }
}

// Is y (finite) an integer, and if so is it odd? Returns 0 not integer, 1 even, 2 odd.
static int
intkind(float y)
{
  float a = y < 0 ? -y : y;
  if(a >= 0x1p24f)
    return 1;                         // every float this large is an even integer
  long n = (long)a;
  if((float)n != a)
    return 0;
  return (n & 1) ? 2 : 1;
}

// x^y as e^(y ln|x|) in double, with C99's special cases for zeros, negative bases,
// infinities and NaN (pow(x, 0) = 1 and pow(1, y) = 1 even for NaN).
float
powf(float x, float y)
{
  if(y == 0.0f || x == 1.0f)
    return 1.0f;
  if(isnan_f(x) || isnan_f(y))
    return x + y;
  int kind = (y - y == 0.0f) ? intkind(y) : 1;   // an infinite y counts as even
  float inf = 1.0f / 0.0f;
  if(x == 0.0f){
    if(y > 0.0f)
      return kind == 2 ? x : 0.0f;
    return kind == 2 ? 1.0f / x : inf;
  }
  double ax = x < 0.0f ? -(double)x : (double)x;
  int neg = 0;
  if(x < 0.0f){
    if(kind == 0)
      return 0.0f / 0.0f;             // negative base, non-integer power
    neg = (kind == 2);
  }
  if(y - y != 0.0f){                  // y = +-inf
    if(ax == 1.0)
      return 1.0f;
    return ((ax > 1.0) == (y > 0.0f)) ? inf : 0.0f;
  }
  if(ax == (double)inf)
    return neg ? (y > 0 ? -inf : -0.0f) : (y > 0 ? inf : 0.0f);
  double t = (double)y * log_d(ax);
  double r;
  if(t > 710.0)
    r = pow2i(1000) * 16.0;           // far above float's range: +inf after rounding
  else if(t < -760.0)
    r = 0.0;
  else
    r = exp_d(t);
  return neg ? (float)-r : (float)r;
}
