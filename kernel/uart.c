// Driver for the 16550a UART that QEMU's virt machine puts at UART0.
// Output from processes goes through a small ring buffer drained by the transmit
// interrupt; kernel printf and panic write synchronously with uartputc_sync().
// Both kinds of writer take thr_lock while they write, so a kernel line is never split
// by a process's bytes sent from another hart, nor a process's write by a kernel line
// (the harness counts the kernel's `usertrap:` lines and parses the programs' own).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/spinlock.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

// UART registers, as byte offsets from UART0.
#define RHR 0                 // receive holding register (read)
#define THR 0                 // transmit holding register (write)
#define IER 1                 // interrupt enable
#define IER_RX_ENABLE (1<<0)
#define IER_TX_ENABLE (1<<1)
#define FCR 2                 // FIFO control
#define FCR_FIFO_ENABLE (1<<0)
#define FCR_FIFO_CLEAR  (3<<1) // clear both FIFOs
#define ISR 2                 // interrupt status
#define LCR 3                 // line control
#define LCR_EIGHT_BITS (3<<0)
#define LCR_BAUD_LATCH (1<<7) // while set, offsets 0 and 1 are the baud-rate divisor
#define LSR 5                 // line status
#define LSR_RX_READY (1<<0)   // a received byte waits in RHR
#define LSR_TX_IDLE  (1<<5)   // THR can take another byte

#define Reg(r) ((volatile uchar *)(UART0 + (r)))
#define ReadReg(r) (*(Reg(r)))
#define WriteReg(r, v) (*(Reg(r)) = (v))

// The transmit ring. tx_lock protects tx_buf, tx_w and tx_r.
// Bytes tx_buf[tx_r % TX_SIZE] .. tx_buf[(tx_w-1) % TX_SIZE] wait to be sent;
// tx_w - tx_r is never more than TX_SIZE. Both only grow.
#define TX_SIZE 1024
static struct spinlock tx_lock;
static char tx_buf[TX_SIZE];
static uint64 tx_w;
static uint64 tx_r;

// thr_lock: who writes THR now. Held by a kernel line from its first byte to its last
// (uartline_begin/end) and by uartstart() while it moves bytes from the ring. A leaf lock:
// nothing else is taken while it is held (uartstart wakes writers after letting go).
static struct spinlock thr_lock;

extern volatile int panicked;   // printf.c: set once a panic has printed its message
extern volatile int panicking;  // printf.c: set before a panic prints its message

static void uartstart(void);

// Contract: program the UART for 38.4K baud, 8 data bits, FIFOs on, and receive and
// transmit interrupts enabled. Called once, by hart 0, before any output.
void
uartinit(void)
{
  WriteReg(IER, 0x00);
  WriteReg(LCR, LCR_BAUD_LATCH);
  WriteReg(0, 0x03);            // divisor low byte: 38.4K baud
  WriteReg(1, 0x00);            // divisor high byte
  WriteReg(LCR, LCR_EIGHT_BITS); // leaves baud-latch mode
  WriteReg(FCR, FCR_FIFO_ENABLE | FCR_FIFO_CLEAR);
  WriteReg(IER, IER_TX_ENABLE | IER_RX_ENABLE);
  initlock(&tx_lock, "uart");
  initlock(&thr_lock, "uart_thr");
}

// Contract: claim the transmitter for a run of uartputc_sync() calls (one kernel line,
// one echo) until uartline_end(): no byte from the ring goes out in between. Not while
// panicking (printf stops locking then).
void
uartline_begin(void)
{
  acquire(&thr_lock);
}

void
uartline_end(void)
{
  release(&thr_lock);
}

// Contract: queue the n bytes at buf for output, sleeping while the ring is full. For
// process context only (it may sleep); not for interrupt handlers. The whole run is
// queued and started under one hold of tx_lock: each byte sent raises the transmit
// interrupt, and a run taken with interrupts off answers it once, not once per byte.
void
uartwrite(const char *buf, int n)
{
  acquire(&tx_lock);
  if(panicked){
    for(;;)
      ;
  }
  for(int i = 0; i < n; i++){
    while(tx_w == tx_r + TX_SIZE){
      uartstart();
      if(tx_w == tx_r + TX_SIZE)
        sleep(&tx_r, &tx_lock);   // uartstart() wakes us when it drains a byte
    }
    tx_buf[tx_w % TX_SIZE] = buf[i];
    tx_w += 1;
  }
  uartstart();
  release(&tx_lock);
}

// Contract: write c at once, spinning until the UART takes it; usable with interrupts
// off and from any context (kernel printf, echo). The caller holds thr_lock
// (uartline_begin), except a panic's line. After a panic other harts freeze here.
void
uartputc_sync(int c)
{
  push_off();
  if(panicked){
    for(;;)
      ;
  }
  if(!panicking && !holding(&thr_lock))
    panic("uartputc_sync: thr_lock");
  while((ReadReg(LSR) & LSR_TX_IDLE) == 0)
    ;
  WriteReg(THR, c);
  pop_off();
}

// Contract: move bytes from the ring to the UART while it can take them, waking any
// writer waiting for room. Caller holds tx_lock. LSR says "THR empty" again as soon as the
// UART has room (at once under QEMU), so one call sends as much as the UART will take;
// when it is busy, its transmit interrupt brings us back.
static void
uartstart(void)
{
  if(!holding(&tx_lock))
    panic("uartstart: tx_lock");
  int sent = 0;

  acquire(&thr_lock);
  while(tx_w != tx_r && (ReadReg(LSR) & LSR_TX_IDLE)){
    WriteReg(THR, tx_buf[tx_r % TX_SIZE]);
    tx_r += 1;
    sent = 1;
  }
  release(&thr_lock);
  if(sent)
    wakeup(&tx_r);
}

// Contract: pause (1) or resume (0) the receive interrupt. The console pauses it while its
// input buffer is full, so that bytes wait in the UART instead of being dropped.
void
uartrxpause(int pause)
{
  WriteReg(IER, IER_TX_ENABLE | (pause ? 0 : IER_RX_ENABLE));
}

// Contract: one received byte, or -1 when none is waiting.
int
uartgetc(void)
{
  if(ReadReg(LSR) & LSR_RX_READY)
    return ReadReg(RHR);
  return -1;
}

// Contract: handle a UART interrupt (from devintr): pass every received byte to the
// console, then keep the transmitter busy.
void
uartintr(void)
{
  int c;

  // Take input only while the console has room for it: the rest waits in the UART (and
  // in QEMU behind it), and the receive interrupt is paused until a reader makes room.
  while(consoleroom() && (c = uartgetc()) != -1)
    consoleintr(c);
  if(!consoleroom())
    uartrxpause(1);

  acquire(&tx_lock);
  uartstart();
  release(&tx_lock);
}
