// The console: line-buffered keyboard input and output, both through the UART.
// Input editing: backspace/DEL erases a character, ^U the line, ^D ends input
// (end of file when the line is empty), ^P lists processes.
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

#define BACKSPACE 0x100       // consputc(): erase the last character on the screen
#define C(x) ((x) - '@')      // control-x

#define INPUT_BUF_SIZE 128

// The input ring. lock protects all of it.
//   buf[r..w)  complete lines (or a ^D) that consoleread() may hand out;
//   buf[w..e)  the line being edited, not yet visible to readers.
// Indices only grow; r <= w <= e <= r + INPUT_BUF_SIZE.
static struct {
  struct spinlock lock;
  char buf[INPUT_BUF_SIZE];
  uint r;
  uint w;
  uint e;
} cons;

// Contract: write one character to the screen synchronously (kernel printf, echo).
// c == BACKSPACE erases the last character. Caller holds the UART's line lock
// (uartline_begin; uartputc_sync checks), except in a panic.
void
consputc(int c)
{
  if(c == BACKSPACE){
    uartputc_sync('\b');
    uartputc_sync(' ');
    uartputc_sync('\b');
  } else {
    uartputc_sync(c);
  }
}

// Contract: echo one typed character (or erase one, c == BACKSPACE) as a line of its own
// on the UART: no process output splits a backspace's three bytes.
static void
echo(int c)
{
  uartline_begin();
  consputc(c);
  uartline_end();
}

// Contract: devsw write: send n bytes from src (user address if user_src) to the UART.
// Returns the number of bytes written (fewer than n if src becomes unreadable).
static int
consolewrite(int user_src, uint64 src, int n)
{
  char chunk[256];   // one uartwrite (one transmit interrupt) per chunk
  int done = 0;

  while(done < n){
    int m = n - done;
    if(m > sizeof(chunk))
      m = sizeof(chunk);
    if(either_copyin(chunk, user_src, src + done, m) == -1)
      break;
    uartwrite(chunk, m);
    done += m;
  }
  return done;
}

// Contract: devsw read: copy at most one line (at most n bytes) to dst, sleeping until a
// line is complete. Returns the bytes copied; 0 at end of file (^D on an empty line);
// -1 if the process is killed while waiting. The bytes go through a buffer on the kernel
// stack and are copied out with cons.lock released: dst may be paged out (swap.c), and
// reading it back sleeps.
static int
consoleread(int user_dst, uint64 dst, int n)
{
  char chunk[INPUT_BUF_SIZE];
  int got = 0, done = 0;

  while(!done && got < n){
    int k = 0;
    acquire(&cons.lock);
    while(!done && k < sizeof(chunk) && got + k < n){
      if(cons.r == cons.w){
        if(k > 0)
          break;          // copy out what we have before sleeping for more
        if(killed(myproc())){
          release(&cons.lock);
          return -1;
        }
        sleep(&cons.r, &cons.lock);
        continue;
      }
      int c = cons.buf[cons.r % INPUT_BUF_SIZE];
      cons.r++;
      uartrxpause(0);   // there is room again for input held back in the UART
      if(c == C('D')){
        // End of file. If some bytes were already read, leave the ^D for the next
        // read so that it returns 0.
        if(got + k > 0)
          cons.r--;
        done = 1;
      } else {
        chunk[k++] = c;
        done = c == '\n';
      }
    }
    release(&cons.lock);
    if(k > 0 && either_copyout(user_dst, dst + got, chunk, k) == -1)
      break;
    got += k;
  }
  return got;
}

// Contract: erase the last unfinished character, on screen and in the buffer; 0 if none.
// Caller holds cons.lock.
static int
erase_one(void)
{
  if(!holding(&cons.lock))
    panic("erase_one: cons.lock");
  if(cons.e == cons.w)
    return 0;
  cons.e--;
  echo(BACKSPACE);
  return 1;
}

// Contract: 1 if the input buffer can take another character (uartintr() leaves input in
// the UART otherwise). Reads without cons.lock: only readers change r, and only upward.
int
consoleroom(void)
{
  return cons.e - cons.r < INPUT_BUF_SIZE;
}

// Contract: take one input character from the UART interrupt: edit the current line,
// echo it, and wake readers when a line (or ^D) is complete.
void
consoleintr(int c)
{
  acquire(&cons.lock);

  switch(c){
  case C('P'):
    procdump();
    break;
  case C('U'):
    while(cons.buf[(cons.e - 1) % INPUT_BUF_SIZE] != '\n' && erase_one())
      ;
    break;
  case C('H'):
  case '\x7f':
    erase_one();
    break;
  default:
    if(c != 0 && cons.e - cons.r < INPUT_BUF_SIZE){
      if(c == '\r')
        c = '\n';
      echo(c);
      cons.buf[cons.e % INPUT_BUF_SIZE] = c;
      cons.e++;
      if(c == '\n' || c == C('D') || cons.e - cons.r == INPUT_BUF_SIZE){
        cons.w = cons.e;   // the line is complete: readers may have it
        wakeup(&cons.r);
      }
    }
    break;
  }

  release(&cons.lock);
}

// Contract: set up the console and the UART, and install the console as devsw[CONSOLE].
void
consoleinit(void)
{
  initlock(&cons.lock, "cons");
  uartinit();
  devsw[CONSOLE].read = consoleread;
  devsw[CONSOLE].write = consolewrite;
}
