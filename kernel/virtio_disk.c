// Driver for the virtio block devices (modern virtio-mmio, version 2) of QEMU's virt
// machine: the file system's disk at VIRTIO0 (device 0, required) and, when QEMU is given
// a second drive, the swap disk at VIRTIO1 (device 1, optional; swap.c).
//
// Each device has its own struct disk with everything below; the code is the same for both.
//
// One virtqueue of NUM descriptors. A request is a descriptor chain:
//   header (device reads) -> data pieces (up to VIRTIO_MAXBUFS) -> status byte (device writes)
// covering whole BSIZE blocks that are consecutive on the disk: several cache buffers, or
// one contiguous kernel area (readi's fast path).
// The requester sleeps until the interrupt handler sees the chain in the used ring.
//
// Contract:
//   - d->lock (a spinlock) protects free[], nfree, used_idx, req[], hdr[] and the
//     driver's writes to the descriptors and the avail ring. Requesters and the
//     interrupt handler both take it, so a completion cannot be missed between a
//     requester's check of busy and its sleep.
//   - A descriptor is either free (free[i], in the pool) or owned by one request from
//     alloc_descs() until free_chain(). Between the avail->idx store that publishes a
//     chain and its appearance in the used ring, the device owns the chain and the
//     memory it names (header, data, status): the driver changes none of it.
//   - The requester frees its own chain after it wakes; the interrupt handler only
//     clears busy. hdr[] and req[] belong to the request whose head descriptor has that
//     index.
//   - The data memory must stay put and unused by others until disk_io() returns: the
//     caller holds the buffers' sleeplocks (or bigread.lock). Kernel memory is mapped
//     one-to-one, so its addresses go to the device as they are.
//   - A request sleeps, so it comes from a process holding no spinlock. A chain takes at
//     most VIRTIO_MAXBUFS + 2 <= NUM descriptors, so any request fits in the ring once the
//     chains in flight are done. Any error status from the device panics.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/buf.h"
#include "kernel/virtio.h"

// The 32-bit register at offset r of the device whose registers start at base.
#define REG(r) ((volatile uint32 *)(d->base + (r)))

// One request in flight, kept at the index of its chain's head descriptor.
struct request {
  int busy;              // 1 from submission until the interrupt handler retires it
  volatile uint8 status; // the device writes 0 here on success
};

struct disk {
  uint64 base;            // the device's registers (VIRTIO0 or VIRTIO1); 0: no device
  uint64 blocks;          // its capacity in BSIZE blocks
  struct spinlock lock;   // protects everything below
  struct virtq_desc *desc;   // NUM descriptors, one page from kalloc
  struct virtq_avail *avail; // one page
  struct virtq_used *used;   // one page
  char free[NUM];         // is descriptor i free?
  int nfree;              // number of free descriptors
  uint16 used_idx;        // entries of the used ring this driver has consumed
  struct request req[NUM];
  struct virtio_blk_req hdr[NUM];  // request headers, by head descriptor
};

static struct disk disks[NDISK];

// Contract: put the 64-bit physical address pa into the LOW/HIGH register pair at low.
static void
setaddr(struct disk *d, int low, void *pa)
{
  *REG(low) = (uint64)pa;
  *REG(low + 4) = (uint64)pa >> 32;
}

// Contract: one zeroed page for a ring, owned by the device queue for good; panics if
// memory is gone this early.
static void *
ringpage(void)
{
  void *p = kalloc();
  if(p == 0)
    panic("virtio_disk_init: kalloc");
  memset(p, 0, PGSIZE);
  return p;
}

// Contract: 1 if a modern virtio block device answers at d->base, else 0.
static int
present(struct disk *d)
{
  return *REG(VIRTIO_MMIO_MAGIC_VALUE) == 0x74726976 && *REG(VIRTIO_MMIO_VERSION) == 2 &&
         *REG(VIRTIO_MMIO_DEVICE_ID) == 2;
}

// Contract: set up device d at base: negotiate features (only VIRTIO_F_VERSION_1), read
// its capacity and set up queue 0 with all NUM descriptors free. Hart 0, once, at boot,
// before any request to it; panics if the device refuses.
static void
setup(struct disk *d, uint64 base)
{
  uint32 status = 0;

  d->base = base;
  initlock(&d->lock, "virtio_disk");

  *REG(VIRTIO_MMIO_STATUS) = status;                       // reset
  status |= VIRTIO_STATUS_ACKNOWLEDGE;
  *REG(VIRTIO_MMIO_STATUS) = status;
  status |= VIRTIO_STATUS_DRIVER;
  *REG(VIRTIO_MMIO_STATUS) = status;

  // Features: none of the block-specific ones; the modern interface (bit 32) is required.
  *REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 0;
  *REG(VIRTIO_MMIO_DRIVER_FEATURES) = 0;
  *REG(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 1;
  if((*REG(VIRTIO_MMIO_DEVICE_FEATURES) & (1 << (VIRTIO_F_VERSION_1 - 32))) == 0)
    panic("virtio_disk_init: device lacks VIRTIO_F_VERSION_1");
  *REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 1;
  *REG(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << (VIRTIO_F_VERSION_1 - 32);
  status |= VIRTIO_STATUS_FEATURES_OK;
  *REG(VIRTIO_MMIO_STATUS) = status;
  if((*REG(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK) == 0)
    panic("virtio_disk_init: features refused");
  // The block device's configuration starts with its capacity in 512-byte sectors.
  uint64 sectors = *REG(VIRTIO_MMIO_CONFIG) | (uint64)*REG(VIRTIO_MMIO_CONFIG + 4) << 32;
  d->blocks = sectors / (BSIZE / 512);

  *REG(VIRTIO_MMIO_QUEUE_SEL) = 0;
  if(*REG(VIRTIO_MMIO_QUEUE_READY))
    panic("virtio_disk_init: queue 0 already in use");
  if(*REG(VIRTIO_MMIO_QUEUE_NUM_MAX) < NUM)
    panic("virtio_disk_init: queue too short");

  d->desc = ringpage();
  d->avail = ringpage();
  d->used = ringpage();
  *REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  setaddr(d, VIRTIO_MMIO_QUEUE_DESC_LOW, d->desc);
  setaddr(d, VIRTIO_MMIO_QUEUE_DRIVER_LOW, d->avail);
  setaddr(d, VIRTIO_MMIO_QUEUE_DEVICE_LOW, d->used);
  *REG(VIRTIO_MMIO_QUEUE_READY) = 1;

  for(int i = 0; i < NUM; i++)
    d->free[i] = 1;
  d->nfree = NUM;

  status |= VIRTIO_STATUS_DRIVER_OK;
  *REG(VIRTIO_MMIO_STATUS) = status;
}

// Contract: set up the file system's disk (device 0, required: panics if it is missing)
// and the swap disk (device 1) if QEMU has one. Hart 0, once, at boot.
void
virtio_disk_init(void)
{
  struct disk *d = &disks[0];

  d->base = VIRTIO0;
  if(!present(d))
    panic("virtio_disk_init: no modern virtio block device (force-legacy=false?)");
  setup(d, VIRTIO0);
  d = &disks[1];
  d->base = VIRTIO1;
  if(present(d))
    setup(d, VIRTIO1);
  else
    d->base = 0;
}

// Contract: the capacity of device dev in BSIZE blocks; 0 if there is no such device.
uint64
virtio_disk_blocks(int dev)
{
  return dev >= 0 && dev < NDISK && disks[dev].base ? disks[dev].blocks : 0;
}

// Contract: take n free descriptors into idx[] for the caller's request. Returns 0, or
// -1 (taking none) if fewer than n are free. Caller holds d->lock.
static int
alloc_descs(struct disk *d, int *idx, int n)
{
  if(!holding(&d->lock))
    panic("alloc_descs: d->lock");
  if(d->nfree < n)
    return -1;
  for(int i = 0, k = 0; k < n; i++){
    if(d->free[i]){
      d->free[i] = 0;
      idx[k++] = i;
    }
  }
  d->nfree -= n;
  return 0;
}

// Contract: return the chain starting at descriptor i to the free pool and wake
// requesters waiting for descriptors. Caller holds d->lock and owns the chain, which
// the device has finished with. Panics if a descriptor in it is already free.
static void
free_chain(struct disk *d, int i)
{
  if(!holding(&d->lock))
    panic("free_chain: d->lock");
  for(;;){
    int flags = d->desc[i].flags;
    int next = d->desc[i].next;
    if(d->free[i])
      panic("virtio_disk: freeing a free descriptor");
    d->desc[i].addr = 0;
    d->desc[i].len = 0;
    d->desc[i].flags = 0;
    d->desc[i].next = 0;
    d->free[i] = 1;
    d->nfree++;
    if((flags & VIRTQ_DESC_F_NEXT) == 0)
      break;
    i = next;
  }
  wakeup(&d->free[0]);
}

// Contract: fill descriptor i. Caller holds d->lock and owns i, not yet published.
static void
setdesc(struct disk *d, int i, void *addr, uint32 len, uint16 flags, uint16 next)
{
  if(!holding(&d->lock))
    panic("setdesc: d->lock");
  d->desc[i].addr = (uint64)addr;
  d->desc[i].len = len;
  d->desc[i].flags = flags;
  d->desc[i].next = next;
}

// Contract: move the nseg memory pieces seg[i] (len[i] bytes each, a multiple of 512,
// physically contiguous) to or from the disk, starting at block blockno: the pieces
// follow each other on the disk. 1 <= nseg <= VIRTIO_MAXBUFS. Returns when the device is
// done and the chain is back in the pool. Sleeps: process context, no spinlock held.
// Panics if the device reports an error.
static void
disk_io(struct disk *d, void **seg, uint32 *len, int nseg, uint64 blockno, int write)
{
  int idx[VIRTIO_MAXBUFS + 2];

  if(nseg < 1 || nseg > VIRTIO_MAXBUFS)
    panic("virtio_disk: bad segment count");

  acquire(&d->lock);
  while(alloc_descs(d, idx, nseg + 2) < 0)
    sleep(&d->free[0], &d->lock);

  int head = idx[0];
  struct virtio_blk_req *h = &d->hdr[head];
  struct request *r = &d->req[head];
  h->type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
  h->reserved = 0;
  h->sector = (uint64)blockno * (BSIZE / 512);
  setdesc(d, head, h, sizeof(*h), VIRTQ_DESC_F_NEXT, idx[1]);
  for(int i = 0; i < nseg; i++){
    uint16 flags = VIRTQ_DESC_F_NEXT | (write ? 0 : VIRTQ_DESC_F_WRITE);
    setdesc(d, idx[i + 1], seg[i], len[i], flags, idx[i + 2]);
  }
  r->status = 0xff;
  r->busy = 1;
  setdesc(d, idx[nseg + 1], (void *)&r->status, 1, VIRTQ_DESC_F_WRITE, 0);

  // Publish the chain: ring entry first, then the index the device polls.
  d->avail->ring[d->avail->idx % NUM] = head;
  __sync_synchronize();
  d->avail->idx += 1;
  __sync_synchronize();
  *REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;

  while(r->busy)
    sleep(r, &d->lock);
  if(r->status != 0)
    panic("virtio_disk: request failed");
  free_chain(d, head);
  release(&d->lock);
}

// Contract: read (write == 0) or write the n buffers in bufs, which hold the consecutive
// disk blocks blockno, blockno+1, ... (their own blockno fields are not consulted). The
// caller holds every buffer's sleeplock, which is what protects b->disk and b->data
// while the request is in flight. Does not set valid: the caller does.
void
virtio_disk_rwv(struct buf **bufs, int n, uint blockno, int write)
{
  void *seg[VIRTIO_MAXBUFS];
  uint32 len[VIRTIO_MAXBUFS];

  if(n < 1 || n > VIRTIO_MAXBUFS)
    panic("virtio_disk_rwv: bad count");
  for(int i = 0; i < n; i++){
    seg[i] = bufs[i]->data;
    len[i] = BSIZE;
    bufs[i]->disk = 1;
  }
  disk_io(&disks[0], seg, len, n, blockno, write);
  for(int i = 0; i < n; i++)
    bufs[i]->disk = 0;
}

// Contract: read one buffer's block (b->blockno) or write it. Caller holds b's sleeplock.
void
virtio_disk_rw(struct buf *b, int write)
{
  virtio_disk_rwv(&b, 1, b->blockno, write);
}

// Contract: read n consecutive blocks from blockno into dst, n*BSIZE bytes of contiguous
// kernel memory, in one request (readi's fast path; no buffer cache involved). The caller
// owns dst until this returns (readdirect holds bigread.lock).
void
virtio_disk_read(void *dst, int n, uint blockno)
{
  uint32 len = n * BSIZE;
  disk_io(&disks[0], &dst, &len, 1, blockno, 0);
}

// Contract: write n consecutive blocks at blockno from src, n*BSIZE bytes of contiguous
// kernel memory, in one request (writei's direct path). The caller owns src until this
// returns (writedirect holds bigread.lock).
void
virtio_disk_write(void *src, int n, uint blockno)
{
  uint32 len = n * BSIZE;
  disk_io(&disks[0], &src, &len, 1, blockno, 1);
}

// Contract: move the n pages pa[0..n) to or from blocks blockno.. blockno+n-1 of device
// dev (SWAPDEV: swap.c; FSDISK: the page cache's fill, fs.c readpages), in one request;
// 1 <= n <= VIRTIO_MAXBUFS. The caller owns
// the pages until this returns. Sleeps: process context, no spinlock held. Panics if dev
// has no device or the blocks are past its end.
void
virtio_disk_pages(int dev, uint64 blockno, void **pa, int n, int write)
{
  uint32 len[VIRTIO_MAXBUFS];

  if(n < 1 || n > VIRTIO_MAXBUFS || blockno + n > virtio_disk_blocks(dev))
    panic("virtio_disk_pages: no such blocks");
  for(int i = 0; i < n; i++)
    len[i] = PGSIZE;
  disk_io(&disks[dev], pa, len, n, blockno, write);
}

// Contract: interrupt from device dev: for every chain the device has put in the used
// ring since the last call, clear its request's busy and wake its requester (which frees
// the chain). Panics on a used entry that names no request in flight.
void
virtio_disk_intr(int dev)
{
  struct disk *d = &disks[dev];

  acquire(&d->lock);
  // Acknowledge first, so that a completion arriving while we scan raises a new interrupt.
  *REG(VIRTIO_MMIO_INTERRUPT_ACK) = *REG(VIRTIO_MMIO_INTERRUPT_STATUS) & 0x3;
  __sync_synchronize();
  while(d->used_idx != *(volatile uint16 *)&d->used->idx){
    __sync_synchronize();
    int id = d->used->ring[d->used_idx % NUM].id;
    struct request *r = &d->req[id];
    if(id < 0 || id >= NUM || !r->busy)
      panic("virtio_disk_intr: unknown request");
    r->busy = 0;
    wakeup(r);
    d->used_idx++;
  }
  release(&d->lock);
}
