// System-call stubs: one per call in kernel/syscall.h. Each loads the call number into a7
// and traps with ecall; the kernel leaves the result in a0 and returns here. Arguments stay
// where the C calling convention put them (a0..a5).
#include "kernel/syscall.h"

.global fork
fork:
  li a7, SYS_fork
  ecall
  ret

.global exit
exit:
  li a7, SYS_exit
  ecall
  ret

.global wait
wait:
  li a7, SYS_wait
  ecall
  ret

.global pipe
pipe:
  li a7, SYS_pipe
  ecall
  ret

.global read
read:
  li a7, SYS_read
  ecall
  ret

.global kill
kill:
  li a7, SYS_kill
  ecall
  ret

.global exec
exec:
  li a7, SYS_exec
  ecall
  ret

.global fstat
fstat:
  li a7, SYS_fstat
  ecall
  ret

.global chdir
chdir:
  li a7, SYS_chdir
  ecall
  ret

.global dup
dup:
  li a7, SYS_dup
  ecall
  ret

.global getpid
getpid:
  li a7, SYS_getpid
  ecall
  ret

.global sys_sbrk
sys_sbrk:
  li a7, SYS_sbrk
  ecall
  ret

.global sleep
sleep:
  li a7, SYS_sleep
  ecall
  ret

.global uptime
uptime:
  li a7, SYS_uptime
  ecall
  ret

.global open
open:
  li a7, SYS_open
  ecall
  ret

.global write
write:
  li a7, SYS_write
  ecall
  ret

.global mknod
mknod:
  li a7, SYS_mknod
  ecall
  ret

.global unlink
unlink:
  li a7, SYS_unlink
  ecall
  ret

.global link
link:
  li a7, SYS_link
  ecall
  ret

.global mkdir
mkdir:
  li a7, SYS_mkdir
  ecall
  ret

.global close
close:
  li a7, SYS_close
  ecall
  ret

.global memstat
memstat:
  li a7, SYS_memstat
  ecall
  ret


.global mmap
mmap:
  li a7, SYS_mmap
  ecall
  ret

.global munmap
munmap:
  li a7, SYS_munmap
  ecall
  ret

.global getppid
getppid:
  li a7, SYS_getppid
  ecall
  ret
