// Forced-included (gcc -include) before every NexOS user source compiled on the host:
// renames each function of the user ABI (user/user.h) to host_<name>, so that the NexOS
// declarations (void printf, malloc(uint), struct stat ...) never meet glibc's and the
// program calls the shim (shim.c) instead of libc. The program's text is unchanged.
// printf-like names are function-like macros so that format(printf, ...) attributes
// keep naming the printf archetype.
#define fork host_fork
#define exit host_exit
#define wait host_wait
#define pipe host_pipe
#define write host_write
#define read host_read
#define close host_close
#define kill host_kill
#define exec host_exec
#define open host_open
#define mknod host_mknod
#define unlink host_unlink
#define fstat host_fstat
#define link host_link
#define mkdir host_mkdir
#define chdir host_chdir
#define dup host_dup
#define getpid host_getpid
#define getppid host_getppid
#define sbrk host_sbrk
#define mmap host_mmap
#define munmap host_munmap
#define sleep host_sleep
#define uptime host_uptime
#define memstat host_memstat
#define stat host_stat
#define strcpy host_strcpy
#define strncpy host_strncpy
#define memmove host_memmove
#define strchr host_strchr
#define strcmp host_strcmp
#define strncmp host_strncmp
#define gets host_gets
#define strlen host_strlen
#define memset host_memset
#define atoi host_atoi
#define memcmp host_memcmp
#define memcpy host_memcpy
#define strtol host_strtol
#define strtod host_strtod
#define clock_us host_clock_us
#define clock_cycles host_clock_cycles
#define fprintf(...) host_fprintf(__VA_ARGS__)
#define printf(...) host_printf(__VA_ARGS__)
#define snprintf(...) host_snprintf(__VA_ARGS__)
#define malloc host_malloc
#define free host_free
#define expf host_expf
#define logf host_logf
#define sqrtf host_sqrtf
#define sinf host_sinf
#define cosf host_cosf
#define powf host_powf
// user.h's static inline aliases (newer xv6 names); renamed so they never meet unistd.h's.
#define pause host_pause
#define sbrklazy host_sbrklazy
