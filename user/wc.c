// wc [FILE...]: count lines, words and bytes of each file (or of standard input) and print
// "<lines> <words> <bytes> <name>".
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

static char buf[8192];

// Count fd's contents and print one line. Returns 0, or -1 on a read error.
static int
wc(int fd, const char *name)
{
  uint64 lines = 0, words = 0, bytes = 0;
  int n, i, inword = 0;
  char c;

  while((n = read(fd, buf, sizeof(buf))) > 0){
    bytes += n;
    for(i = 0; i < n; i++){
      c = buf[i];
      if(c == '\n')
        lines++;
      if(c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'){
        inword = 0;
      } else if(!inword){
        words++;
        inword = 1;
      }
    }
  }
  if(n < 0){
    fprintf(2, "wc: read error on %s\n", name);
    return -1;
  }
  printf("%lu %lu %lu %s\n", lines, words, bytes, name);
  return 0;
}

int
main(int argc, char *argv[])
{
  int i, fd, status = 0;

  if(argc <= 1)
    return wc(0, "") < 0;
  for(i = 1; i < argc; i++){
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "wc: cannot open %s\n", argv[i]);
      status = 1;
      continue;
    }
    if(wc(fd, argv[i]) < 0)
      status = 1;
    close(fd);
  }
  return status;
}
