// Kernel-internal interfaces, one section per file.
struct buf;
struct context;
struct file;
struct inode;
struct pipe;
struct proc;
struct spinlock;
struct sleeplock;
struct stat;
struct superblock;
struct memstat;

// bio.c
void            binit(void);
struct buf*     bread(uint, uint);
void            brelse(struct buf*);
void            bwrite(struct buf*);
void            bpin(struct buf*);
void            bunpin(struct buf*);

// console.c
void            consoleinit(void);
void            consoleintr(int);
void            consputc(int);
int             consoleroom(void);

// exec.c
int             exec(char*, char**);

// file.c
struct file*    filealloc(void);
void            fileclose(struct file*);
struct file*    filedup(struct file*);
void            fileinit(void);
int             fileread(struct file*, uint64, int n);
int             filestat(struct file*, uint64 addr);
int             filewrite(struct file*, uint64, int n);

// fdt.c -- the device tree QEMU passes at reset
extern uint64    boot_fdt;           // its physical address, set by start() on hart 0
int             fdt_cpu_count(void);  // cpu@ nodes under /cpus; 0: no usable tree
int             fdt_cpus(const uchar*, uint64);  // the same, of a blob in memory
int             fdt_ram(uint64 *base, uint64 *size);  // RAM's range: 0, or -1: no usable tree
int             fdt_memory(const uchar*, uint64, uint64*, uint64*);  // the same, of a blob

// fs.c
void            fsinit(int);
int             dirlink(struct inode*, char*, uint);
struct inode*   dirlookup(struct inode*, char*, uint*);
struct inode*   ialloc(uint, short);
struct inode*   idup(struct inode*);
void            iinit(void);
void            ilock(struct inode*);
void            iput(struct inode*);
void            iunlock(struct inode*);
void            iunlockput(struct inode*);
void            iupdate(struct inode*);
int             namecmp(const char*, const char*);
struct inode*   namei(char*);
struct inode*   nameiparent(char*, char*);
// readi/writei: user_addr 1 means dst/src is a user virtual address of the current process.
int             readi(struct inode*, int user_addr, uint64 dst, uint64 off, uint n);
void            readpages(struct inode*, uint64 bn, char **pages, int n); // page cache fill, ip locked
void            stati(struct inode*, struct stat*);
int             writei(struct inode*, int user_addr, uint64 src, uint64 off, uint n);
int             writeappend(struct inode*, int user_addr, uint64 src, uint64 off, uint n);
void            itrunc(struct inode*);

// kalloc.c -- physical pages, each with a reference count (see kalloc.c)
void            kinit(void);
void*           kcarve(uint64 n);      // boot only, before any kalloc: n zeroed bytes, kept for good
void*           kalloc(void);          // a page with refcount 1, or 0 when memory is exhausted
void            kfree(void *);         // drop one reference; the page is freed when none remain
void            krefinc_ptes(pte_t *, int n); // one more reference per valid PTE's page (COW fork)
int             kshared_ptes(pte_t *, int n); // leaves of a table mapping shared pages
int             krefcount(void *);     // current references to an allocated page
int             ksoleref(void *);      // exactly one reference? (lockless; see kalloc.c)
int             krefpeek(void *);      // references, read without the lock (a hint)
void            krefinc(void *);       // one more reference to an allocated page
void            krefinc_pages(char **pas, int n); // one more reference to each, one lock hold
uint64          kfreepages(void);      // pages on the free list
uint64          ktotalpages(void);     // pages the allocator manages

// log.c
void            initlog(int, struct superblock*);
void            log_write(struct buf*);
void            begin_op(void);
void            end_op(void);
void            log_sync(void);  // exit: make everything logged durable

// pipe.c
int             pipealloc(struct file**, struct file**);
void            pipeclose(struct pipe*, int);
int             piperead(struct pipe*, uint64, int);
int             pipewrite(struct pipe*, uint64, int);

// printf.c
int             printf(char*, ...) __attribute__ ((format (printf, 1, 2)));
void            panic(char*) __attribute__((noreturn));
void            printfinit(void);

// proc.c
int             cpuid(void);
void            exit(int);
int             fork(void);
int             getppid(void);
pagetable_t     proc_pagetable(struct proc *);
void            proc_freepagetable(pagetable_t, uint64);
int             kill(int);
int             killed(struct proc*);
void            nomem(void);       // the caller's kalloc found no page (for vmfault)
void            setkilled(struct proc*);
struct cpu*     mycpu(void);
struct proc*    myproc();
void            procinit(void);
void            scheduler(void) __attribute__((noreturn));
void            sched(void);
void            sleep(void*, struct spinlock*);
void            userinit(void);
int             wait(uint64);
void            wakeup(void*);
void            yield(void);
int             either_copyout(int user_dst, uint64 dst, void *src, uint64 len);
int             either_copyin(void *dst, int user_src, uint64 src, uint64 len);
void            procdump(void);
int             nharts(void);          // harts that have booted
void            proc_mapstacks(pagetable_t); // kvminit calls it: map each proc's kernel stack at KSTACK(i)

// fpu.S -- user floating-point state (the kernel itself never uses FP)
void            fpsave(uint64 *fregs);    // f0..f31 -> fregs[0..31], fcsr -> fregs[32]
void            fprestore(uint64 *fregs); // the reverse; sstatus.FS must not be Off

// swtch.S
void            swtch(struct context*, struct context*);

// spinlock.c
void            acquire(struct spinlock*);
int             holding(struct spinlock*);
void            initlock(struct spinlock*, char*);
void            release(struct spinlock*);
void            push_off(void);
void            pop_off(void);
int             holding_spinlocks(void);  // 1: this hart must not sleep now

// sleeplock.c
void            acquiresleep(struct sleeplock*);
void            releasesleep(struct sleeplock*);
int             holdingsleep(struct sleeplock*);
int             tryacquiresleep(struct sleeplock*);  // 1 if taken; never sleeps
void            initsleeplock(struct sleeplock*, char*);

// string.c
int             memcmp(const void*, const void*, uint);
void*           memmove(void*, const void*, uint);
void*           memset(void*, int, uint);
void*           memcpy(void*, const void*, uint);
char*           safestrcpy(char*, const char*, int);
int             strlen(const char*);
int             strncmp(const char*, const char*, uint);
char*           strncpy(char*, const char*, int);

// syscall.c
void            argint(int, int*);
int             argstr(int, char*, int);
void            argaddr(int, uint64 *);
int             fetchstr(uint64, char*, int);
int             fetchaddr(uint64, uint64*);
void            syscall();

// trap.c
extern uint     ticks;
void            trapinit(void);
void            trapinithart(void);
extern struct spinlock tickslock;
void            usertrapret(void);

// uart.c
void            uartinit(void);
void            uartintr(void);
void            uartwrite(const char *, int);
void            uartputc_sync(int);
void            uartline_begin(void);
void            uartline_end(void);
int             uartgetc(void);
void            uartrxpause(int);

// vm.c -- page tables and user address spaces (see vm.c)
void            kvminit(void);
void            kvminithart(void);
void            kvmmap(pagetable_t, uint64, uint64, uint64, int);
int             mappages(pagetable_t, uint64, uint64, uint64, int);
int             mappagelist(pagetable_t, uint64 va, char **pas, int n, int perm); // pages mapped
pte_t *         walk(pagetable_t, uint64, int);
uint64          walkaddr(pagetable_t, uint64);
uint64          nextregion(pagetable_t, uint64 va);  // past va's hole or level-0 table
pagetable_t     uvmcreate(void);
uint64          uvmalloc(pagetable_t, uint64 oldsz, uint64 newsz, int xperm); // always eager
uint64          uvmdealloc(pagetable_t, uint64 oldsz, uint64 newsz);         // skips unmapped holes
int             uvmcopy(pagetable_t old, pagetable_t new, uint64 lo, uint64 hi); // fork: copy or share
void            uvmfree(pagetable_t, uint64 sz);
void            uvmunmap(pagetable_t, uint64 va, uint64 npages, int do_free); // skips holes
void            uvmclear(pagetable_t, uint64 va);
int             growproc(struct proc *, int n, int how);  // sbrk, caller holds p->vmlock: eager or lazy growth by policy; -1 on failure
uint64          sbrkcap(void);         // the largest size in pages plain sbrk allows
void            vmstat(struct proc *p, struct memstat *ms);  // fill the memstat snapshot
uint64          uvmforkpages(struct proc *p);  // pages a fork of p will allocate
uint64          uvmanonpages(pagetable_t);     // resident anonymous user pages
int             copyout(pagetable_t, uint64 dstva, char *src, uint64 len);
int             copyin(pagetable_t, char *dst, uint64 srcva, uint64 len);
int             copyinstr(pagetable_t, char *dst, uint64 srcva, uint64 max);
int             uprefault(uint64 va, uint64 len, int is_store);
int             copypresent(uint64 uva, char *kva, uint64 len, int to_user);

// fault.c -- page faults, where LAZY_ALLOC and COW_ALLOC pick their policy (see fault.c)
// vmfault: resolve a user page fault (lazy heap page or COW store) of process p at va.
// Returns 0 when the access can be retried, -1 when p must be killed. access is what
// faulted: a copy passes its is_store (0 or 1), a trap one of these.
#define FAULT_LOAD  0
#define FAULT_STORE 1
#define FAULT_FETCH 2
int             vmfault(struct proc *p, uint64 va, int access);
int             resolve(struct proc *p, uint64 va, int access, int can_sleep); // one try

// oom.c -- the OOM killer, and the fault path's tries around it and reclaim
void            oominit(void);
int             oomretry(struct proc *p, uint64 va, int access); // vmfault's tries, vmlock held
void            oomcopyfail(struct proc *p, uint64 va); // a copy found no page: p dies

// pagecache.c -- file pages that are mapped, one copy each (see pagecache.c)
void            pagecacheinit(void);
int             pagecache_get(struct inode *, uint64 pgno, int n, char **pas); // a run, a reference each for PTEs
void            pagecache_trim(struct inode *, uint64 lo, uint64 hi); // drop unmapped pages
void            pagecache_write(struct inode *, uint64 pgno, uint off, char *src, uint n);
int             pagecache_pages(void);

// mmap.c -- file mappings: regions of a process (see mmap.c)
int             mmapfault(struct proc *p, uint64 va, pte_t *pte);
int             mmap_fork(struct proc *p, struct proc *np);
void            mmap_unmapall(struct proc *p);
void            mmap_trim(struct proc *p, uint64 va);  // reclaim dropped a file page
uint64          mmap_floor(struct proc *p);

// swap.c -- the swap disk's slots, and reclaim (see swap.c)

void            swapinit(void);
int             swap_mb(void);           // swap size, for the boot line
long            swap_alloc(void);        // a free slot with one reference, or -1
void            swap_dup(uint64 slot);   // one more reference (fork)
void            swap_put(uint64 slot);   // one reference fewer; the last frees the slot
void            swap_read(uint64 slot, char **pa, int n);  // n slots from slot; sleeps
int             swap_held(uint64 slot, int n);  // whether a PTE names one of n slots
int             reclaim(int want);       // page out up to want pages; sleeps
int             vmreserve(uint64 npages);  // reclaim until npages are free above the low mark
uint64          swap_low(void);          // the free-page low watermark
uint64          swap_total_slots(void);  // slots on the swap disk (0: none)
uint64          swap_free_slots(void);
void            swapstat(struct memstat *);
void            swap_evict(struct proc *p, uint64 va);  // KDEBUG=pageout: page va out now

// rmap.c -- the reverse map: the PTEs of a page several processes map (see rmap.c)
struct pageout;
int             rmap_pageout(struct proc*, struct proc*, uint64*, int, struct pageout*, int,
                             uint64*);   // reclaim's shared pages: judge, page out
void            rmap_release(uint64 mask);  // the vmlocks rmap_pageout kept, after the write
void            rmap_share(struct proc*, uint64, pte_t*, uint64, int);  // a page-in to the others

// plic.c
void            plicinit(void);
void            plicinithart(void);
int             plic_claim(void);
void            plic_complete(int);

// virtio_disk.c
void            virtio_disk_init(void);
void            virtio_disk_rw(struct buf *, int write);
void            virtio_disk_intr(int dev);
uint64          virtio_disk_blocks(int dev);   // capacity in blocks; 0: no such disk
void            virtio_disk_pages(int dev, uint64 blockno, void **pa, int n, int write); // swap, page cache

// number of elements in fixed-size array
#define NELEM(x) (sizeof(x)/sizeof((x)[0]))
