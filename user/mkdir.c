// mkdir DIR...: create each directory.
#include "kernel/types.h"
#include "user/user.h"

int
main(int argc, char *argv[])
{
  int i, status = 0;

  if(argc < 2){
    fprintf(2, "usage: mkdir DIR...\n");
    return 1;
  }
  for(i = 1; i < argc; i++){
    if(mkdir(argv[i]) < 0){
      fprintf(2, "mkdir: cannot create %s\n", argv[i]);
      status = 1;
    }
  }
  return status;
}
