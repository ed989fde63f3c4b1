// Kernel printf and panic, written straight to the UART.
#include <stdarg.h>

#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/file.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

// Set by panic() once its message is out; from then on every other hart that tries
// to print spins forever in uartputc_sync(), so the panic line stays the last one.
volatile int panicked = 0;
// Set by panic() before its message: that line is written without any lock.
volatile int panicking = 0;

// pr.lock keeps lines from different harts from interleaving, and the UART's line lock
// (uartline_begin) keeps processes' output out of a line. panic() stops taking both
// (locking = 0) so a panic inside printf still gets its message out.
static struct {
  struct spinlock lock;
  int locking;
} pr;

static char digits[] = "0123456789abcdef";

// Contract: print x in base 10 or 16; signed if sign (then x is taken as a signed value).
static void
printint(uint64 x, int base, int sign)
{
  char buf[24];
  int i = 0;
  int neg = sign && (long)x < 0;

  if(neg)
    x = -x;   // also right for the most negative value, as unsigned
  do {
    buf[i++] = digits[x % base];
    x /= base;
  } while(x != 0);
  if(neg)
    buf[i++] = '-';
  while(--i >= 0)
    consputc(buf[i]);
}

// Contract: print a pointer as 0x followed by 16 hex digits.
static void
printptr(uint64 x)
{
  consputc('0');
  consputc('x');
  for(int i = 0; i < 16; i++, x <<= 4)
    consputc(digits[x >> 60]);
}

// Contract: print one conversion (the letter after '%' and any 'l's; longs counts the
// 'l's) taking its argument from ap. Unknown conversions are printed literally.
static void
printone(char c, int longs, va_list *ap)
{
  char *s;

  switch(c){
  case 'd':
    printint(longs ? va_arg(*ap, long) : va_arg(*ap, int), 10, 1);
    break;
  case 'u':
    printint(longs ? va_arg(*ap, uint64) : va_arg(*ap, uint), 10, 0);
    break;
  case 'x':
    printint(longs ? va_arg(*ap, uint64) : va_arg(*ap, uint), 16, 0);
    break;
  case 'p':
    printptr(va_arg(*ap, uint64));
    break;
  case 'c':
    consputc(va_arg(*ap, int));
    break;
  case 's':
    if((s = va_arg(*ap, char*)) == 0)
      s = "(null)";
    for(; *s; s++)
      consputc(*s);
    break;
  case '%':
    consputc('%');
    break;
  default:
    consputc('%');
    consputc(c);
    break;
  }
}

// Contract: formatted output to the console: %d %u %x %p %s %c %% and the l / ll
// variants (%ld %lu %lx %lld ...). Returns 0.
int
printf(char *fmt, ...)
{
  va_list ap;
  int locking = pr.locking;

  if(locking){
    acquire(&pr.lock);
    uartline_begin();
  }

  va_start(ap, fmt);
  for(int i = 0; fmt[i]; i++){
    if(fmt[i] != '%'){
      consputc(fmt[i]);
      continue;
    }
    int longs = 0;
    while(fmt[i+1] == 'l'){
      longs++;
      i++;
    }
    if(fmt[i+1] == 0)
      break;
    i++;
    printone(fmt[i], longs, &ap);
  }
  va_end(ap);

  if(locking){
    uartline_end();
    release(&pr.lock);
  }
  return 0;
}

// Contract: print "panic: <s>" and stop this hart for good; other harts stop at their
// next console output.
void
panic(char *s)
{
  pr.locking = 0;
  panicking = 1;
  printf("panic: %s\n", s);
  panicked = 1;
  for(;;)
    ;
}

// Contract: set up printf's lock; call once before other harts print.
void
printfinit(void)
{
  initlock(&pr.lock, "pr");
  pr.locking = 1;
}
