// kill PID...: ask the kernel to kill each process.
#include "kernel/types.h"
#include "user/user.h"

int
main(int argc, char *argv[])
{
  int i, status = 0;
  char *end;
  long pid;

  if(argc < 2){
    fprintf(2, "usage: kill PID...\n");
    return 1;
  }
  for(i = 1; i < argc; i++){
    pid = strtol(argv[i], &end, 10);
    if(end == argv[i] || *end != 0){
      fprintf(2, "kill: not a process id: %s\n", argv[i]);
      status = 1;
    } else if(kill((int)pid) < 0){
      fprintf(2, "kill: no process %ld\n", pid);
      status = 1;
    }
  }
  return status;
}
