#ifndef KERNEL_SLEEPLOCK_H
#define KERNEL_SLEEPLOCK_H
// A lock for long waits (disk I/O): a waiter sleeps instead of spinning.
struct sleeplock {
  uint locked;        // is the lock held?
  struct spinlock lk; // protects this structure
  char *name;
  int pid;            // process holding the lock
  int waiters;        // processes asleep in acquiresleep (release skips wakeup when 0)
};
#endif
