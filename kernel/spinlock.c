// Spin locks: mutual exclusion between harts, with interrupts off while held.
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/spinlock.h"
#include "kernel/riscv.h"
#include "kernel/proc.h"
#include "kernel/defs.h"

// Contract: make lk a free lock called name (the name is kept for panics and debugging).
void
initlock(struct spinlock *lk, char *name)
{
  lk->name = name;
  lk->locked = 0;
  lk->cpu = 0;
}

// Contract: spin until lk is ours. Interrupts stay off on this hart until the matching
// release(), so an interrupt handler can never deadlock on a lock its hart holds.
// Panics if this hart already holds lk (locks are not recursive).
void
acquire(struct spinlock *lk)
{
  push_off();
  if(holding(lk))
    panic("acquire: already held");

  // amoswap.w.aq: atomically set locked to 1 and look at the old value.
  while(__sync_lock_test_and_set(&lk->locked, 1) != 0)
    ;

  // Keep the critical section's loads and stores after the lock is taken.
  __sync_synchronize();
  lk->cpu = mycpu();
}

// Contract: give lk up; it must be held by this hart. Restores the interrupt state
// that the matching acquire() saw.
void
release(struct spinlock *lk)
{
  if(!holding(lk))
    panic("release: not held");
  lk->cpu = 0;

  // Make the critical section's stores visible before the lock reads free.
  __sync_synchronize();
  __sync_lock_release(&lk->locked);
  pop_off();
}

// Contract: 1 if this hart holds lk. Interrupts must be off (so the hart cannot change).
int
holding(struct spinlock *lk)
{
  return lk->locked && lk->cpu == mycpu();
}

// Contract: 1 if this hart holds a spinlock (or is inside a push_off()): then the caller
// must not sleep. vmfault asks before it waits for a page from the swap disk.
int
holding_spinlocks(void)
{
  push_off();
  int held = mycpu()->noff > 1;
  pop_off();
  return held;
}

// push_off/pop_off are intr_off/intr_on that nest: after two push_off()s it takes two
// pop_off()s to turn interrupts back on, and only if they were on at the first push_off().
void
push_off(void)
{
  int old = intr_get();

  intr_off();
  if(mycpu()->noff == 0)
    mycpu()->intena = old;
  mycpu()->noff += 1;
}

// Contract: undo one push_off(); interrupts must be off and noff > 0.
void
pop_off(void)
{
  struct cpu *c = mycpu();

  if(intr_get())
    panic("pop_off: interrupts on");
  if(c->noff < 1)
    panic("pop_off: unbalanced");
  c->noff -= 1;
  if(c->noff == 0 && c->intena)
    intr_on();
}
