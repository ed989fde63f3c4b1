// Driver for the virtio block device (modern virtio-mmio, version 2) that QEMU's virt
// machine places at VIRTIO0.
//
// One virtqueue of NUM descriptors. A request is a descriptor chain:
//   header (device reads) -> data pieces (up to VIRTIO_MAXBUFS) -> status byte (device writes)
// covering whole BSIZE blocks that are consecutive on the disk: several cache buffers, or
// one contiguous kernel area (readi's fast path).
// The requester sleeps until the interrupt handler sees the chain in the used ring.
//
// Contract:
//   - disk.lock (a spinlock) protects free[], nfree, used_idx, req[], hdr[] and the
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

// The 32-bit device register at offset r.
#define REG(r) ((volatile uint32 *)(VIRTIO0 + (r)))

// One request in flight, kept at the index of its chain's head descriptor.
struct request {
  int busy;              // 1 from submission until the interrupt handler retires it
  volatile uint8 status; // the device writes 0 here on success
};

static struct disk {
  struct spinlock lock;   // protects everything below
  struct virtq_desc *desc;   // NUM descriptors, one page from kalloc
  struct virtq_avail *avail; // one page
  struct virtq_used *used;   // one page
  char free[NUM];         // is descriptor i free?
  int nfree;              // number of free descriptors
  uint16 used_idx;        // entries of the used ring this driver has consumed
  struct request req[NUM];
  struct virtio_blk_req hdr[NUM];  // request headers, by head descriptor
} disk;

// Contract: put the 64-bit physical address pa into the LOW/HIGH register pair at low.
static void
setaddr(int low, void *pa)
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

// Contract: find the device, negotiate features (only VIRTIO_F_VERSION_1) and set up
// queue 0 with all NUM descriptors free. Hart 0, once, at boot, before any disk request;
// panics if the device is missing or refuses.
void
virtio_disk_init(void)
{
  uint32 status = 0;

  initlock(&disk.lock, "virtio_disk");
  if(*REG(VIRTIO_MMIO_MAGIC_VALUE) != 0x74726976 || *REG(VIRTIO_MMIO_VERSION) != 2 ||
     *REG(VIRTIO_MMIO_DEVICE_ID) != 2)
    panic("virtio_disk_init: no modern virtio block device (force-legacy=false?)");

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

  *REG(VIRTIO_MMIO_QUEUE_SEL) = 0;
  if(*REG(VIRTIO_MMIO_QUEUE_READY))
    panic("virtio_disk_init: queue 0 already in use");
  if(*REG(VIRTIO_MMIO_QUEUE_NUM_MAX) < NUM)
    panic("virtio_disk_init: queue too short");

  disk.desc = ringpage();
  disk.avail = ringpage();
  disk.used = ringpage();
  *REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  setaddr(VIRTIO_MMIO_QUEUE_DESC_LOW, disk.desc);
  setaddr(VIRTIO_MMIO_QUEUE_DRIVER_LOW, disk.avail);
  setaddr(VIRTIO_MMIO_QUEUE_DEVICE_LOW, disk.used);
  *REG(VIRTIO_MMIO_QUEUE_READY) = 1;

  for(int i = 0; i < NUM; i++)
    disk.free[i] = 1;
  disk.nfree = NUM;

  status |= VIRTIO_STATUS_DRIVER_OK;
  *REG(VIRTIO_MMIO_STATUS) = status;
}

// Contract: take n free descriptors into idx[] for the caller's request. Returns 0, or
// -1 (taking none) if fewer than n are free. Caller holds disk.lock.
static int
alloc_descs(int *idx, int n)
{
  if(disk.nfree < n)
    return -1;
  for(int i = 0, k = 0; k < n; i++){
    if(disk.free[i]){
      disk.free[i] = 0;
      idx[k++] = i;
    }
  }
  disk.nfree -= n;
  return 0;
}

// Contract: return the chain starting at descriptor i to the free pool and wake
// requesters waiting for descriptors. Caller holds disk.lock and owns the chain, which
// the device has finished with. Panics if a descriptor in it is already free.
static void
free_chain(int i)
{
  for(;;){
    int flags = disk.desc[i].flags;
    int next = disk.desc[i].next;
    if(disk.free[i])
      panic("virtio_disk: freeing a free descriptor");
    disk.desc[i].addr = 0;
    disk.desc[i].len = 0;
    disk.desc[i].flags = 0;
    disk.desc[i].next = 0;
    disk.free[i] = 1;
    disk.nfree++;
    if((flags & VIRTQ_DESC_F_NEXT) == 0)
      break;
    i = next;
  }
  wakeup(&disk.free[0]);
}

// Contract: fill descriptor i. Caller holds disk.lock and owns i, not yet published.
static void
setdesc(int i, void *addr, uint32 len, uint16 flags, uint16 next)
{
  disk.desc[i].addr = (uint64)addr;
  disk.desc[i].len = len;
  disk.desc[i].flags = flags;
  disk.desc[i].next = next;
}

// Contract: move the nseg memory pieces seg[i] (len[i] bytes each, a multiple of 512,
// physically contiguous) to or from the disk, starting at block blockno: the pieces
// follow each other on the disk. 1 <= nseg <= VIRTIO_MAXBUFS. Returns when the device is
// done and the chain is back in the pool. Sleeps: process context, no spinlock held.
// Panics if the device reports an error.
static void
disk_io(void **seg, uint32 *len, int nseg, uint blockno, int write)
{
  int idx[VIRTIO_MAXBUFS + 2];

  if(nseg < 1 || nseg > VIRTIO_MAXBUFS)
    panic("virtio_disk: bad segment count");

  acquire(&disk.lock);
  while(alloc_descs(idx, nseg + 2) < 0)
    sleep(&disk.free[0], &disk.lock);

  int head = idx[0];
  struct virtio_blk_req *h = &disk.hdr[head];
  struct request *r = &disk.req[head];
  h->type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
  h->reserved = 0;
  h->sector = (uint64)blockno * (BSIZE / 512);
  setdesc(head, h, sizeof(*h), VIRTQ_DESC_F_NEXT, idx[1]);
  for(int i = 0; i < nseg; i++){
    uint16 flags = VIRTQ_DESC_F_NEXT | (write ? 0 : VIRTQ_DESC_F_WRITE);
    setdesc(idx[i + 1], seg[i], len[i], flags, idx[i + 2]);
  }
  r->status = 0xff;
  r->busy = 1;
  setdesc(idx[nseg + 1], (void *)&r->status, 1, VIRTQ_DESC_F_WRITE, 0);

  // Publish the chain: ring entry first, then the index the device polls.
  disk.avail->ring[disk.avail->idx % NUM] = head;
  __sync_synchronize();
  disk.avail->idx += 1;
  __sync_synchronize();
  *REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;

  while(r->busy)
    sleep(r, &disk.lock);
  if(r->status != 0)
    panic("virtio_disk: request failed");
  free_chain(head);
  release(&disk.lock);
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
  disk_io(seg, len, n, blockno, write);
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
  disk_io(&dst, &len, 1, blockno, 0);
}

// Contract: interrupt from the device: for every chain the device has put in the used
// ring since the last call, clear its request's busy and wake its requester (which frees
// the chain). Panics on a used entry that names no request in flight.
void
virtio_disk_intr(void)
{
  acquire(&disk.lock);
  // Acknowledge first, so that a completion arriving while we scan raises a new interrupt.
  *REG(VIRTIO_MMIO_INTERRUPT_ACK) = *REG(VIRTIO_MMIO_INTERRUPT_STATUS) & 0x3;
  __sync_synchronize();
  while(disk.used_idx != *(volatile uint16 *)&disk.used->idx){
    __sync_synchronize();
    int id = disk.used->ring[disk.used_idx % NUM].id;
    struct request *r = &disk.req[id];
    if(id < 0 || id >= NUM || !r->busy)
      panic("virtio_disk_intr: unknown request");
    r->busy = 0;
    wakeup(r);
    disk.used_idx++;
  }
  release(&disk.lock);
}
