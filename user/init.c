// init: the first user process. It makes sure the console device exists, opens it as
// standard input, output and error, and keeps a shell running: when the shell exits, a new
// one starts. Being the parent of orphaned processes, it also reaps them.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "user/user.h"

#define CONSOLE 1   // the console's major device number (kernel/file.h)

static char *shargv[] = { "sh", 0 };

// Open /console read-write as fd 0 and duplicate it as 1 and 2, creating the device node
// first when the image does not have one.
static void
openconsole(void)
{
  if(open("/console", O_RDWR) < 0){
    mknod("/console", CONSOLE, 0);
    if(open("/console", O_RDWR) < 0)
      exit(1);                     // nowhere to complain; the kernel will report it
  }
  dup(0);
  dup(0);
}

// Start a shell and wait until it exits, reaping any orphan that exits meanwhile.
static void
runshell(void)
{
  int pid, w;

  pid = fork();
  if(pid < 0){
    printf("init: fork failed\n");
    sleep(10);
    return;
  }
  if(pid == 0){
    exec("/sh", shargv);
    printf("init: exec sh failed\n");
    exit(1);
  }
  for(;;){
    w = wait(0);
    if(w == pid)
      return;                      // the shell exited: start another one
    if(w < 0){
      printf("init: wait returned an error\n");
      exit(1);
    }
    // otherwise an orphan was reaped; keep waiting for the shell
  }
}

int
main(void)
{
  openconsole();
  for(;;){
    printf("init: starting sh\n");
    runshell();
  }
}
