// Host driver for kernel/fdt.c (tests/kernel/test_fdt.py): the kernel's device-tree reader,
// compiled unchanged, run on blobs QEMU dumped and on damaged copies of them.
//
//   fdtcheck FILE           print fdt_cpus() of the blob
//   fdtcheck --memory FILE  print fdt_memory() of the blob: "BASE SIZE" in hex, or "none"
//   fdtcheck --damage FILE  run fdt_cpus() and fdt_memory() on every cut of the blob (its
//                           header made to agree with the cut) and on every single-byte
//                           change, each in a buffer of exactly its size, so that
//                           AddressSanitizer sees any read past it; print
//                           "cuts=N cut_nonzero=K cut_memory=J changes=M" (K cuts counted
//                           cpus, J found memory)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fdt_cpus(const unsigned char *blob, unsigned long room);
int fdt_memory(const unsigned char *blob, unsigned long room, unsigned long *base,
               unsigned long *size);

// kernel/string.c's strncmp, which fdt.c calls (compiled with -Dstrncmp=kernel_strncmp so
// that its declaration in kernel/defs.h does not meet libc's).
int
kernel_strncmp(const char *p, const char *q, unsigned int n)
{
  return strncmp(p, q, n);
}

static unsigned char *
slurp(const char *path, long *size)
{
  FILE *f = fopen(path, "rb");
  if(f == 0){
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  *size = ftell(f);
  rewind(f);
  unsigned char *b = malloc(*size);
  if(fread(b, 1, *size, f) != (size_t)*size){
    fprintf(stderr, "%s: short read\n", path);
    exit(2);
  }
  fclose(f);
  return b;
}

static unsigned long
get32(const unsigned char *p)
{
  return ((unsigned long)p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}

static void
put32(unsigned char *p, unsigned long v)
{
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

// fdt_cpus() of a copy of blob[0..n) in a buffer of exactly n bytes; *mem is set to 1 if
// fdt_memory() of it answers, else 0.
static int
exact(const unsigned char *blob, long n, long fix_header, int *mem)
{
  unsigned char *b = malloc(n ? n : 1);
  memcpy(b, blob, n);
  if(fix_header && n >= 40){          // totalsize and size_dt_struct agree with the cut
    unsigned long off_struct = get32(b + 8);
    put32(b + 4, n);
    put32(b + 36, off_struct < (unsigned long)n ? n - off_struct : 0);
  }
  int cpus = fdt_cpus(b, n);
  unsigned long base, size;
  *mem = fdt_memory(b, n, &base, &size) == 0;
  free(b);
  return cpus;
}

int
main(int argc, char **argv)
{
  long size;
  if(argc == 2){
    unsigned char *blob = slurp(argv[1], &size);
    printf("%d\n", fdt_cpus(blob, size));
    free(blob);
    return 0;
  }
  if(argc == 3 && strcmp(argv[1], "--memory") == 0){
    unsigned char *blob = slurp(argv[2], &size);
    unsigned long base, len;
    if(fdt_memory(blob, size, &base, &len) == 0)
      printf("%#lx %#lx\n", base, len);
    else
      printf("none\n");
    free(blob);
    return 0;
  }
  if(argc != 3 || strcmp(argv[1], "--damage") != 0){
    fprintf(stderr, "usage: fdtcheck [--memory | --damage] FILE\n");
    return 2;
  }
  unsigned char *blob = slurp(argv[2], &size);
  if(size >= 8 && get32(blob + 4) < (unsigned long)size)
    size = get32(blob + 4);           // QEMU pads its dump; damage only the blob itself
  unsigned long end_struct = get32(blob + 8) + get32(blob + 36);
  long cuts = 0, cut_nonzero = 0, cut_memory = 0, changes = 0;
  int mem;
  for(long n = 0; n < (long)end_struct; n++, cuts++){
    if(exact(blob, n, 1, &mem) != 0)
      cut_nonzero++;
    cut_memory += mem;
  }
  unsigned char *copy = malloc(size);
  static const unsigned char values[] = { 0x00, 0xff, 0x01, 0x09 };
  for(long i = 0; i < size; i++){
    for(int v = 0; v < (int)sizeof(values); v++){
      memcpy(copy, blob, size);
      copy[i] = values[v];
      exact(copy, size, 0, &mem);
      changes++;
    }
  }
  printf("cuts=%ld cut_nonzero=%ld cut_memory=%ld changes=%ld\n", cuts, cut_nonzero,
         cut_memory, changes);
  free(copy);
  free(blob);
  return 0;
}
