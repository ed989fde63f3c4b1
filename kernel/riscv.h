// RISC-V privileged-architecture helpers: CSR access, interrupt control, Sv39 page tables.
#ifndef __ASSEMBLER__

// Define r_<csr>() and w_<csr>(x) for a control/status register.
#define CSR_RW(csr)                                                        \
  static inline uint64 r_##csr(void) {                                     \
    uint64 x; asm volatile("csrr %0, " #csr : "=r"(x)); return x; }        \
  static inline void w_##csr(uint64 x) {                                   \
    asm volatile("csrw " #csr ", %0" : : "r"(x)); }

CSR_RW(mhartid)
CSR_RW(mstatus)
CSR_RW(mepc)
CSR_RW(medeleg)
CSR_RW(mideleg)
CSR_RW(mie)
CSR_RW(mcounteren)
CSR_RW(menvcfg)
CSR_RW(pmpcfg0)
CSR_RW(pmpaddr0)
CSR_RW(sstatus)
CSR_RW(sip)
CSR_RW(sie)
CSR_RW(sepc)
CSR_RW(stvec)
CSR_RW(scause)
CSR_RW(stval)
CSR_RW(satp)
CSR_RW(scounteren)
CSR_RW(stimecmp)   // Sstc extension: supervisor timer compare
CSR_RW(time)

// mstatus fields
#define MSTATUS_MPP_MASK (3L << 11)  // previous privilege mode
#define MSTATUS_MPP_S    (1L << 11)
#define MSTATUS_MIE      (1L << 3)   // machine-mode interrupt enable

// sstatus fields
#define SSTATUS_SPP  (1L << 8)   // previous mode: 1 = supervisor, 0 = user
#define SSTATUS_SPIE (1L << 5)   // supervisor interrupts enabled before the trap
#define SSTATUS_SIE  (1L << 1)   // supervisor interrupt enable
#define SSTATUS_SUM  (1L << 18)  // supervisor may access user pages (NexOS leaves it 0)
#define SSTATUS_FS_MASK    (3L << 13)  // floating-point unit state:
#define SSTATUS_FS_OFF     (0L << 13)  //   FP instructions trap
#define SSTATUS_FS_INITIAL (1L << 13)
#define SSTATUS_FS_CLEAN   (2L << 13)  //   registers match the saved copy
#define SSTATUS_FS_DIRTY   (3L << 13)  //   registers changed since last save

// sie / mie bits
#define SIE_SEIE (1L << 9)  // supervisor external (PLIC)
#define SIE_STIE (1L << 5)  // supervisor timer
#define SIE_SSIE (1L << 1)  // supervisor software
#define MIE_STIE (1L << 5)

// scause values NexOS handles (interrupt bit is bit 63)
#define SCAUSE_INTR        (1L << 63)
#define SCAUSE_ECALL_U     8
#define SCAUSE_INST_PAGE   12  // instruction page fault
#define SCAUSE_LOAD_PAGE   13  // load page fault
#define SCAUSE_STORE_PAGE  15  // store/AMO page fault
#define SCAUSE_S_TIMER     (SCAUSE_INTR | 5)
#define SCAUSE_S_EXTERNAL  (SCAUSE_INTR | 9)

static inline uint64 r_tp(void) { uint64 x; asm volatile("mv %0, tp" : "=r"(x)); return x; }
static inline void w_tp(uint64 x) { asm volatile("mv tp, %0" : : "r"(x)); }
static inline uint64 r_sp(void) { uint64 x; asm volatile("mv %0, sp" : "=r"(x)); return x; }
static inline uint64 r_ra(void) { uint64 x; asm volatile("mv %0, ra" : "=r"(x)); return x; }

// Enable, disable and query supervisor interrupts on this hart.
static inline void intr_on(void)  { w_sstatus(r_sstatus() | SSTATUS_SIE); }
static inline void intr_off(void) { w_sstatus(r_sstatus() & ~SSTATUS_SIE); }
static inline int  intr_get(void) { return (r_sstatus() & SSTATUS_SIE) != 0; }

// Flush the whole TLB of this hart.
static inline void sfence_vma(void) { asm volatile("sfence.vma zero, zero"); }

typedef uint64 pte_t;
typedef uint64 *pagetable_t; // 512 PTEs

#endif // __ASSEMBLER__

#define PGSIZE  4096  // bytes per page
#define PGSHIFT 12    // bits of offset within a page

#define PGROUNDUP(sz)  (((sz)+PGSIZE-1) & ~(PGSIZE-1))
#define PGROUNDDOWN(a) (((a)) & ~(PGSIZE-1))

// Page-table entry bits. Hardware bits 0-7; bits 8-9 (RSW) are the kernel's own.
#define PTE_V (1L << 0) // valid
#define PTE_R (1L << 1) // readable
#define PTE_W (1L << 2) // writable
#define PTE_X (1L << 3) // executable
#define PTE_U (1L << 4) // user mode may access
#define PTE_A (1L << 6) // accessed
#define PTE_D (1L << 7) // dirty
#define PTE_COW (1L << 8) // RSW: copy-on-write page; writable in spirit, read-only in the PTE
#define PTE_FILE (1L << 9) // RSW: maps a page-cache page (mmap); shared by fork in every configuration

// A PTE with PTE_V clear is ignored by the MMU, every other bit included. NexOS's invalid
// user leaves are either 0 (nothing there: a hole) or paged out (swap.c): PTE_SWAPPED set,
// the swap slot where the PPN would be, and bits 1-9 the flags the page had (R W X U COW),
// which it gets back when it is read in.
#define PTE_SWAPPED (1L << 63)
#define SLOT2PTE(slot) (((uint64)(slot)) << 10)
#define PTE2SLOT(pte) (((pte) >> 10) & ((1L << 44) - 1))

// Physical address <-> PTE: the PPN sits at bit 10 of a PTE.
#define PA2PTE(pa) ((((uint64)pa) >> 12) << 10)
#define PTE2PA(pte) (((pte) >> 10) << 12)
#define PTE_FLAGS(pte) ((pte) & 0x3FF)

// satp value selecting Sv39 with the given root page table.
#define SATP_SV39 (8L << 60)
#define MAKE_SATP(pagetable) (SATP_SV39 | (((uint64)pagetable) >> 12))

// Sv39 splits a 39-bit virtual address into three 9-bit page-table indexes and a 12-bit offset:
//   38..30 level-2 index | 29..21 level-1 index | 20..12 level-0 index | 11..0 offset
#define PXMASK          0x1FF
#define PXSHIFT(level)  (PGSHIFT+(9*(level)))
#define PX(level, va) ((((uint64) (va)) >> PXSHIFT(level)) & PXMASK)

// One past the highest virtual address; one bit less than Sv39 allows, so that
// no address needs sign extension.
#define MAXVA (1L << (9 + 9 + 9 + 12 - 1))
