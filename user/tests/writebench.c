// writebench FILE MIB [BUFKIB]: create FILE (truncating it) and write MIB MiB to it with a
// BUFKIB KiB buffer (default 256; 4 is one block per call, the pattern of MIT's usertests),
// then print "writebench bytes=<n> us=<t> mibps=<x.y>", timed with clock_us() from the
// first write to the close. The log's last commit may come after (at exit, kernel/log.c):
// at most one commit of a few hundred KiB, against the many the file took.
// It prints a figure; it never judges it.
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

// Parse argv[i] as a number from 1 to max, or exit with a one-line message.
static long
number(char *what, char *arg, long max)
{
  char *end;
  long v = strtol(arg, &end, 10);
  if(end == arg || *end != 0 || v < 1 || v > max){
    fprintf(2, "writebench: %s must be a number from 1 to %ld, not %s\n", what, max, arg);
    exit(1);
  }
  return v;
}

int
main(int argc, char *argv[])
{
  uint64 bytes = 0, total, t0, us;
  char *buf;
  int fd, size;

  if(argc < 3 || argc > 4){
    fprintf(2, "usage: writebench FILE MIB [BUFKIB]\n");
    return 1;
  }
  total = (uint64)number("MIB", argv[2], 4096) << 20;
  size = (int)(argc == 4 ? number("BUFKIB", argv[3], 65536) : 256) * 1024;
  if((buf = malloc(size)) == 0){
    fprintf(2, "writebench: cannot allocate a %d KiB buffer\n", size / 1024);
    return 1;
  }
  for(int i = 0; i < size; i++)   // map the buffer now (lazy kernels) so it is not timed
    buf[i] = i * 131 + 7;
  if((fd = open(argv[1], O_CREATE | O_TRUNC | O_WRONLY)) < 0){
    fprintf(2, "writebench: cannot create %s\n", argv[1]);
    return 1;
  }
  t0 = clock_us();
  while(bytes < total){
    int n = total - bytes < size ? total - bytes : size;
    if(write(fd, buf, n) != n){
      fprintf(2, "writebench: write failed after %lu bytes (disk full?)\n", bytes);
      return 1;
    }
    bytes += n;
  }
  close(fd);
  us = clock_us() - t0;
  if(us == 0)
    us = 1;
  printf("writebench bytes=%lu us=%lu mibps=%.1f\n", bytes, us,
         ((double)bytes / (1024.0 * 1024.0)) / ((double)us / 1e6));
  return 0;
}
