// mapwrite FILE OFFSET TEXT: store TEXT into FILE at byte OFFSET through a shared mapping
// (mmap MAP_SHARED, PROT_READ|PROT_WRITE), not write(): the kernel writes the dirty pages
// back to the file at munmap (docs/memory.md, "mmap and the page cache"). The file keeps
// its size: TEXT must end within it. Prints "mapwrite: N bytes at OFFSET of FILE".
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/riscv.h"
#include "user/user.h"

static void
die(const char *file, const char *why)
{
  fprintf(2, "mapwrite: %s: %s\n", file, why);
  exit(1);
}

int
main(int argc, char **argv)
{
  if(argc != 4){
    fprintf(2, "usage: mapwrite FILE OFFSET TEXT\n");
    exit(1);
  }
  const char *file = argv[1], *text = argv[3];
  uint64 off = 0, len = strlen(text);
  for(const char *p = argv[2]; *p; p++){
    if(*p < '0' || *p > '9' || off > (1UL << 40))
      die(argv[2], "OFFSET must be a number");
    off = off * 10 + (*p - '0');
  }
  int fd = open(file, O_RDWR);
  if(fd < 0)
    die(file, "cannot open it for writing");
  struct stat st;
  if(fstat(fd, &st) < 0 || st.type != T_FILE)
    die(file, "not a file");
  if(len == 0 || off + len > st.size)
    die(file, "TEXT must be 1 or more bytes that end within the file (it keeps its size)");
  uint64 start = off & ~(uint64)(PGSIZE - 1), span = off + len - start;
  char *m = mmap(0, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, start);
  if(m == (char *)-1)
    die(file, "mmap failed");
  memmove(m + (off - start), text, len);
  if(munmap(m, span) < 0)
    die(file, "munmap failed");
  close(fd);
  printf("mapwrite: %lu bytes at %lu of %s\n", len, off, file);
  exit(0);
}
