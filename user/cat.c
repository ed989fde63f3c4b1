// cat [FILE...]: copy each file (or standard input when none is named) to standard output.
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

static char buf[8192];

// Copy fd to fd 1 until end of file. Returns 0, or -1 after printing an error.
static int
copy(int fd, const char *name)
{
  int n;

  while((n = read(fd, buf, sizeof(buf))) > 0){
    if(write(1, buf, n) != n){
      fprintf(2, "cat: write error\n");
      return -1;
    }
  }
  if(n < 0){
    fprintf(2, "cat: read error on %s\n", name);
    return -1;
  }
  return 0;
}

int
main(int argc, char *argv[])
{
  int i, fd, status = 0;

  if(argc <= 1)
    return copy(0, "standard input") < 0;
  for(i = 1; i < argc; i++){
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "cat: cannot open %s\n", argv[i]);
      status = 1;
      continue;
    }
    if(copy(fd, argv[i]) < 0)
      status = 1;
    close(fd);
  }
  return status;
}
