// pagein MIB: sequential page-in from swap. Writes one word into every page of an MIB MiB
// heap (with more than RAM, the first pages go out to swap as the last come in), gives
// back all but the first half of RAM's worth of pages (so that reading them back needs no
// page-out), then reads those again from the start, timed with clock_us(), and prints
// "pagein pages=<n> us=<t> mibps=<x.y> swap_ins=<k> swap_outs=<k>": how fast pages come
// back from swap in order. Every word is checked; a wrong one is an error (exit 1).
// It prints a figure; it never judges it (bench/swap_pagein.py compares it with readbench).
#include "kernel/types.h"
#include "kernel/memstat.h"
#include "user/user.h"

#define PG 4096

int
main(int argc, char *argv[])
{
  struct memstat a, b;
  char *end;

  if(argc != 2){
    fprintf(2, "usage: pagein MIB\n");
    return 1;
  }
  long mib = strtol(argv[1], &end, 10);
  if(end == argv[1] || *end != 0 || mib < 1 || mib > 4096){
    fprintf(2, "pagein: MIB must be a number from 1 to 4096, not %s\n", argv[1]);
    return 1;
  }
  long pages = mib * 256;
  char *heap = sbrk(0);
  for(long i = 0; i < pages; i += 256)      // 1 MiB at a time: sbrk takes an int
    if(sbrk(256 * PG) == (char *)-1){
      fprintf(2, "pagein: sbrk failed after %ld MiB: not enough memory and swap\n", i / 256);
      return 1;
    }
  for(long i = 0; i < pages; i++)
    *(long *)(heap + i * PG) = i * 7 + 1;
  memstat(&a);
  long keep = (long)a.total_pages / 2 < pages ? (long)a.total_pages / 2 : pages;
  for(long i = pages; i > keep; i -= 256)   // give back the rest, 1 MiB at a time
    sbrk(-(int)(i - keep < 256 ? i - keep : 256) * PG);
  pages = keep;
  memstat(&a);
  uint64 t0 = clock_us();
  for(long i = 0; i < pages; i++)
    if(*(long *)(heap + i * PG) != i * 7 + 1){
      fprintf(2, "pagein: page %ld reads back wrong\n", i);
      return 1;
    }
  uint64 us = clock_us() - t0;
  memstat(&b);
  uint64 tenths = us ? (uint64)pages * 10000000UL / 256 / us : 0;   // MiB/s, times 10
  printf("pagein pages=%ld us=%lu mibps=%lu.%lu swap_ins=%lu swap_outs=%lu\n", pages, us,
         tenths / 10, tenths % 10, b.swap_ins - a.swap_ins, b.swap_outs - a.swap_outs);
  return 0;
}
