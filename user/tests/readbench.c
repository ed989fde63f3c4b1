// readbench FILE [BUFKIB]: read FILE from start to end with a BUFKIB KiB buffer (default
// 256) and print "readbench bytes=<n> us=<t> mibps=<x.y>", timed with clock_us().
// It prints a figure; it never judges it.
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

int
main(int argc, char *argv[])
{
  long kib = 256;
  uint64 bytes = 0, t0, us;
  char *buf, *end;
  int fd, n, size;

  if(argc < 2 || argc > 3){
    fprintf(2, "usage: readbench FILE [BUFKIB]\n");
    return 1;
  }
  if(argc == 3){
    kib = strtol(argv[2], &end, 10);
    if(end == argv[2] || *end != 0 || kib < 1 || kib > 65536){
      fprintf(2, "readbench: BUFKIB must be a number from 1 to 65536, not %s\n", argv[2]);
      return 1;
    }
  }
  size = (int)kib * 1024;
  if((buf = malloc(size)) == 0){
    fprintf(2, "readbench: cannot allocate a %ld KiB buffer\n", kib);
    return 1;
  }
  memset(buf, 0, size);            // map the buffer now (lazy kernels) so it is not timed
  if((fd = open(argv[1], O_RDONLY)) < 0){
    fprintf(2, "readbench: cannot open %s\n", argv[1]);
    return 1;
  }
  t0 = clock_us();
  while((n = read(fd, buf, size)) > 0)
    bytes += n;
  us = clock_us() - t0;
  close(fd);
  if(n < 0){
    fprintf(2, "readbench: read error on %s\n", argv[1]);
    return 1;
  }
  if(us == 0)
    us = 1;
  printf("readbench bytes=%lu us=%lu mibps=%.1f\n", bytes, us,
         ((double)bytes / (1024.0 * 1024.0)) / ((double)us / 1e6));
  return 0;
}
