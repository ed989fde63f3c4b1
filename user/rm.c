// rm FILE...: remove each name (a directory only when it is empty).
#include "kernel/types.h"
#include "user/user.h"

int
main(int argc, char *argv[])
{
  int i, status = 0;

  if(argc < 2){
    fprintf(2, "usage: rm FILE...\n");
    return 1;
  }
  for(i = 1; i < argc; i++){
    if(unlink(argv[i]) < 0){
      fprintf(2, "rm: cannot remove %s\n", argv[i]);
      status = 1;
    }
  }
  return status;
}
