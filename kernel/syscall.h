// System-call numbers: the value user/usys.S puts in a7 before ecall.
#define SYS_fork     1
#define SYS_exit     2
#define SYS_wait     3
#define SYS_pipe     4
#define SYS_read     5
#define SYS_kill     6
#define SYS_exec     7
#define SYS_fstat    8
#define SYS_chdir    9
#define SYS_dup     10
#define SYS_getpid  11
#define SYS_sbrk    12
#define SYS_sleep   13
#define SYS_uptime  14
#define SYS_open    15
#define SYS_write   16
#define SYS_mknod   17
#define SYS_unlink  18
#define SYS_link    19
#define SYS_mkdir   20
#define SYS_close   21
#define SYS_memstat 22
#define SYS_mmap    23
#define SYS_munmap  24
#define SYS_getppid 25

// sys_sbrk(n, how)'s second argument (user/ulib.c: sbrk and sbrklazy; kernel/vm.c growproc).
#define SBRK_POLICY 0   // sbrk: eager or lazy as the kernel's LAZY_ALLOC says
#define SBRK_LAZY   1   // sbrklazy: only the size grows, in every configuration
