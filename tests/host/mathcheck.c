// Compares user/umath.c (as host_expf ...) with glibc's libm over many float inputs and
// prints the worst error in ulps per function; exit 1 if any exceeds 1 ulp.
// Build: gcc -O2 -I../.. mathcheck.c umath-host.o -lm (see Makefile).
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

float host_expf(float), host_logf(float), host_sqrtf(float);
float host_sinf(float), host_cosf(float), host_powf(float, float);

// Distance in ulps between a and the exact value x (double), measured at a's scale.
static double
ulps(float a, double x)
{
  if(isnan(a) && isnan(x))
    return 0;
  if(isinf(a) || isinf(x))
    return (float)x == a ? 0 : 1e9;
  double u = nextafterf(fabsf((float)x), INFINITY) - fabsf((float)x);
  if(u == 0 || isinf(u))
    u = 1e-45;
  return fabs((double)a - x) / u;
}

static uint64_t st = 88172645463325252ULL;
static float
rnd(float lo, float hi)
{
  st ^= st << 13; st ^= st >> 7; st ^= st << 17;
  return lo + (hi - lo) * (float)((st >> 11) * 0x1p-53);
}

int
main(void)
{
  double w[6] = {0};
  for(int i = 0; i < 2000000; i++){
    float e = rnd(-103.f, 88.f), l = expf(rnd(-100.f, 88.f)), t = rnd(-3000.f, 3000.f);
    float s = rnd(-50.f, 50.f), b = rnd(0.f, 20000.f), y = rnd(-1.f, 1.f);
    double v[6] = { ulps(host_expf(e), exp((double)e)), ulps(host_logf(l), log((double)l)),
                    ulps(host_sqrtf(b), sqrt((double)b)), ulps(host_sinf(t), sin((double)t)),
                    ulps(host_cosf(s), cos((double)s)), ulps(host_powf(b, y), pow(b, y)) };
    for(int k = 0; k < 6; k++)
      if(v[k] > w[k])
        w[k] = v[k];
  }
  const char *names[6] = {"expf", "logf", "sqrtf", "sinf", "cosf", "powf"};
  int bad = 0;
  for(int k = 0; k < 6; k++){
    printf("%-6s max_err=%.3f ulp\n", names[k], w[k]);
    bad |= w[k] > 1.0;
  }
  printf("special: expf(-inf)=%g logf(0)=%g logf(-1)=%g powf(-2,3)=%g powf(0,-1)=%g sinf(-0)=%g\n",
         host_expf(-INFINITY), host_logf(0), host_logf(-1), host_powf(-2, 3), host_powf(0, -1),
         host_sinf(-0.0f));
  return bad;
}
