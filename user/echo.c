// echo [ARG...]: print the arguments separated by single spaces, then a newline, with one
// write() so that the line is never interleaved with other output.
#include "kernel/types.h"
#include "user/user.h"

int
main(int argc, char *argv[])
{
  uint len = 1, off = 0, n;
  char *out;
  int i;

  for(i = 1; i < argc; i++)
    len += strlen(argv[i]) + 1;
  if((out = malloc(len)) == 0){
    fprintf(2, "echo: out of memory\n");
    return 1;
  }
  for(i = 1; i < argc; i++){
    n = strlen(argv[i]);
    memmove(out + off, argv[i], n);
    off += n;
    if(i + 1 < argc)
      out[off++] = ' ';
  }
  out[off++] = '\n';
  if(write(1, out, off) != off){
    fprintf(2, "echo: write error\n");
    return 1;
  }
  return 0;
}
