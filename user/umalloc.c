// malloc and free: a first-fit allocator over a circular free list, in the manner of
// Kernighan & Ritchie's C book. Memory comes from sbrk() and is never given back.
//
// Every block starts with a header; sizes count 16-byte units, header included, so that
// every pointer handed out is 16-byte aligned (enough for any C type, doubles included).
// The free list is kept in address order, which lets free() merge a block with free
// neighbours on either side.
#include "kernel/types.h"
#include "user/user.h"

union header {
  struct {
    union header *next;  // next free block (free blocks only), in address order
    uint64 units;        // size of this block in units, header included
  } h;
  char align[16];        // forces the unit size and alignment to 16 bytes
};
typedef union header Header;

#define MINGROW   4096UL           // smallest heap growth, in units (64 KiB)
#define SBRKSTEP  (1UL << 30)      // sbrk takes an int: grow at most 1 GiB per call

static Header base;      // a zero-size block that anchors the circular list
static Header *freep;    // where the last search ended (0: list not set up yet)

// Put block ap (a pointer just past a header) on the free list, merging it with the
// blocks right before and after it when they touch.
void
free(void *ap)
{
  Header *bp, *p;

  if(ap == 0)
    return;
  bp = (Header*)ap - 1;
  // Find p such that bp lies between p and p->next (or past the end of the ring).
  for(p = freep; !(bp > p && bp < p->h.next); p = p->h.next){
    if(p >= p->h.next && (bp > p || bp < p->h.next))
      break;                       // bp is at one end of the arena
  }
  if(bp + bp->h.units == p->h.next){
    bp->h.units += p->h.next->h.units;
    bp->h.next = p->h.next->h.next;
  } else {
    bp->h.next = p->h.next;
  }
  if(p + p->h.units == bp){
    p->h.units += bp->h.units;
    p->h.next = bp->h.next;
  } else {
    p->h.next = bp;
  }
  freep = p;
}

// Grow the heap by nbytes through sbrk, in steps sbrk's int argument can express.
// Returns the start of the new memory, or 0 (with the heap unchanged) when it fails.
static char*
growheap(uint64 nbytes)
{
  char *start = 0, *p;
  uint64 done = 0, step, cur;

  // Someone may have called sbrk() directly with an odd size: realign the break first.
  cur = (uint64)sbrk(0);
  if(cur & (sizeof(Header) - 1)){
    if(sbrk(sizeof(Header) - (cur & (sizeof(Header) - 1))) == (char*)-1)
      return 0;
  }
  while(done < nbytes){
    step = nbytes - done;
    if(step > SBRKSTEP)
      step = SBRKSTEP;
    p = sbrk((int)step);
    if(p == (char*)-1){
      // Give back what the earlier steps took, so a failure leaves no trace.
      while(done > 0){
        step = done > SBRKSTEP ? SBRKSTEP : done;
        sbrk(-(int)step);
        done -= step;
      }
      return 0;
    }
    if(start == 0)
      start = p;
    done += step;
  }
  return start;
}

// Ask the kernel for at least nu more units and put them on the free list.
// Returns the free list pointer, or 0 when the kernel has no more memory.
static Header*
morecore(uint64 nu)
{
  Header *hp;
  char *p;

  if(nu < MINGROW)
    nu = MINGROW;
  p = growheap(nu * sizeof(Header));
  if(p == 0)
    return 0;
  hp = (Header*)p;
  hp->h.units = nu;
  free((void*)(hp + 1));
  return freep;
}

// Allocate nbytes (uninitialised, 16-byte aligned). Returns 0 when memory runs out.
void*
malloc(uint nbytes)
{
  Header *p, *prevp;
  uint64 nunits;

  // Round up to whole units, plus one for the header (64-bit: no overflow for any uint).
  nunits = ((uint64)nbytes + sizeof(Header) - 1) / sizeof(Header) + 1;
  if((prevp = freep) == 0){
    base.h.next = freep = prevp = &base;
    base.h.units = 0;
  }
  for(p = prevp->h.next; ; prevp = p, p = p->h.next){
    if(p->h.units >= nunits){
      if(p->h.units == nunits){
        prevp->h.next = p->h.next;   // exact fit: unlink the whole block
      } else {
        p->h.units -= nunits;        // carve the tail end off the block
        p += p->h.units;
        p->h.units = nunits;
      }
      freep = prevp;
      return (void*)(p + 1);
    }
    if(p == freep){                  // wrapped around: nothing large enough
      if((p = morecore(nunits)) == 0)
        return 0;
    }
  }
}
