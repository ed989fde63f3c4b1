// mkbig PATH MIB [SEED]: write a file of MIB MiB whose 64-bit little-endian word i is
// (i * 0x9E3779B97F4A7C15) ^ SEED (SEED defaults to 1), then print
// "mkbig wrote <bytes> bytes to <path>". Any short write (a full disk) is an error.
// Together with cksum it tests big files: the harness knows what the hash must be.
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

#define CHUNK   (64 * 1024)
#define GOLDEN  0x9E3779B97F4A7C15UL

int
main(int argc, char *argv[])
{
  uint64 *buf, i = 0, seed = 1, written = 0, total;
  long mib;
  char *end;
  int fd, n, k;

  if(argc < 3 || argc > 4){
    fprintf(2, "usage: mkbig PATH MIB [SEED]\n");
    return 1;
  }
  mib = strtol(argv[2], &end, 10);
  if(end == argv[2] || *end != 0 || mib < 0 || mib > 4096){
    fprintf(2, "mkbig: MIB must be a number from 0 to 4096, not %s\n", argv[2]);
    return 1;
  }
  if(argc == 4){
    seed = (uint64)strtol(argv[3], &end, 0);
    if(end == argv[3] || *end != 0){
      fprintf(2, "mkbig: SEED must be a number, not %s\n", argv[3]);
      return 1;
    }
  }
  if((buf = malloc(CHUNK)) == 0){
    fprintf(2, "mkbig: out of memory\n");
    return 1;
  }
  if((fd = open(argv[1], O_CREATE | O_TRUNC | O_WRONLY)) < 0){
    fprintf(2, "mkbig: cannot create %s\n", argv[1]);
    return 1;
  }
  total = (uint64)mib << 20;
  while(written < total){
    for(k = 0; k < CHUNK / 8; k++, i++)
      buf[k] = (i * GOLDEN) ^ seed;
    n = write(fd, buf, CHUNK);
    if(n != CHUNK){
      if(n > 0)
        written += n;
      fprintf(2, "mkbig: write failed after %lu bytes (disk full?)\n", written);
      close(fd);
      return 1;
    }
    written += n;
  }
  close(fd);
  printf("mkbig wrote %lu bytes to %s\n", written, argv[1]);
  return 0;
}
