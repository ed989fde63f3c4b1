// A mutual-exclusion lock that spins; held with interrupts off on this hart.
struct spinlock {
  uint locked;      // 0 free, 1 held; changed only by amoswap
  char *name;       // for debugging
  struct cpu *cpu;  // hart holding the lock (for holding())
};
