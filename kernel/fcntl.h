// Flags for open().
#define O_RDONLY  0x000
#define O_WRONLY  0x001
#define O_RDWR    0x002
#define O_CREATE  0x200
#define O_TRUNC   0x400

// mmap(): prot (what the pages allow) and flags (who sees stores).
#define PROT_READ   0x1
#define PROT_WRITE  0x2
#define PROT_EXEC   0x4
#define MAP_SHARED  0x01   // stores reach the file (written back at munmap/exit)
#define MAP_PRIVATE 0x02   // the first store copies the page; the file never changes
#define MAP_POPULATE 0x08  // map every page now, as LAZY_ALLOC=0 does (a NexOS flag, Linux's
                           // idea: a program that will touch it all pays the reads up front)
