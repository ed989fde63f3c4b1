// Virtio over memory-mapped I/O, version 2 ("modern"), as QEMU's virt machine offers it
// with -global virtio-mmio.force-legacy=false. Only what the block driver needs.
// Reference: the OASIS "Virtual I/O Device (VIRTIO)" specification, sections 2 and 4.2.

// Register offsets from the device's base address (VIRTIO0).
#define VIRTIO_MMIO_MAGIC_VALUE        0x000 // reads 0x74726976 ("virt")
#define VIRTIO_MMIO_VERSION            0x004 // 2 for a modern device
#define VIRTIO_MMIO_DEVICE_ID          0x008 // 2 = block device, 0 = nothing attached
#define VIRTIO_MMIO_VENDOR_ID          0x00c
#define VIRTIO_MMIO_DEVICE_FEATURES    0x010 // 32 feature bits, page chosen by ..._SEL
#define VIRTIO_MMIO_DEVICE_FEATURES_SEL 0x014
#define VIRTIO_MMIO_DRIVER_FEATURES    0x020 // the bits the driver accepts
#define VIRTIO_MMIO_DRIVER_FEATURES_SEL 0x024
#define VIRTIO_MMIO_QUEUE_SEL          0x030 // which virtqueue the QUEUE_* registers mean
#define VIRTIO_MMIO_QUEUE_NUM_MAX      0x034 // largest ring the device supports
#define VIRTIO_MMIO_QUEUE_NUM          0x038 // ring size the driver chose
#define VIRTIO_MMIO_QUEUE_READY        0x044 // 1 once the ring addresses are set
#define VIRTIO_MMIO_QUEUE_NOTIFY       0x050 // write a queue number: "new buffers available"
#define VIRTIO_MMIO_INTERRUPT_STATUS   0x060 // bit 0: used ring updated; bit 1: config changed
#define VIRTIO_MMIO_INTERRUPT_ACK      0x064 // write back the bits handled
#define VIRTIO_MMIO_STATUS             0x070 // device status bits, below
#define VIRTIO_MMIO_QUEUE_DESC_LOW     0x080 // physical address of the descriptor table
#define VIRTIO_MMIO_QUEUE_DESC_HIGH    0x084
#define VIRTIO_MMIO_QUEUE_DRIVER_LOW   0x090 // physical address of the available ring
#define VIRTIO_MMIO_QUEUE_DRIVER_HIGH  0x094
#define VIRTIO_MMIO_QUEUE_DEVICE_LOW   0x0a0 // physical address of the used ring
#define VIRTIO_MMIO_QUEUE_DEVICE_HIGH  0x0a4
#define VIRTIO_MMIO_CONFIG             0x100 // device-specific configuration space

// Device status bits, set by the driver in this order during initialisation.
#define VIRTIO_STATUS_ACKNOWLEDGE 1   // the driver has seen the device
#define VIRTIO_STATUS_DRIVER      2   // and knows how to drive it
#define VIRTIO_STATUS_DRIVER_OK   4   // ready: the device may start using the queues
#define VIRTIO_STATUS_FEATURES_OK 8   // feature negotiation done (device may refuse: bit reads 0)
#define VIRTIO_STATUS_FAILED      128

// Feature bits. Page 0 holds bits 0-31, page 1 bits 32-63.
#define VIRTIO_BLK_F_RO           5   // read-only device
#define VIRTIO_BLK_F_SCSI         7
#define VIRTIO_BLK_F_CONFIG_WCE  11
#define VIRTIO_BLK_F_MQ          12   // several request queues
#define VIRTIO_F_ANY_LAYOUT      27
#define VIRTIO_RING_F_INDIRECT_DESC 28
#define VIRTIO_RING_F_EVENT_IDX  29
#define VIRTIO_F_VERSION_1       32   // page 1, bit 0: the device follows the modern spec

// Descriptors in the ring; a power of two no larger than QUEUE_NUM_MAX.
#define NUM 64

// One descriptor: a physically contiguous piece of a request.
struct virtq_desc {
  uint64 addr;   // physical address
  uint32 len;    // bytes
  uint16 flags;  // VIRTQ_DESC_F_*
  uint16 next;   // index of the following descriptor when F_NEXT is set
};
#define VIRTQ_DESC_F_NEXT  1  // the chain goes on at .next
#define VIRTQ_DESC_F_WRITE 2  // the device writes this buffer (otherwise it reads it)

// The available ring: the driver publishes heads of descriptor chains here.
struct virtq_avail {
  uint16 flags;
  uint16 idx;        // where the driver will put the next entry (mod NUM); only grows
  uint16 ring[NUM];  // descriptor chain heads
  uint16 unused;
};

// One entry of the used ring: a finished chain.
struct virtq_used_elem {
  uint32 id;   // head descriptor of the chain
  uint32 len;  // bytes the device wrote
};

// The used ring: the device reports finished chains here.
struct virtq_used {
  uint16 flags;
  uint16 idx;  // where the device will put the next entry (mod NUM); only grows
  struct virtq_used_elem ring[NUM];
};

// The header that starts every block request (the device reads it).
#define VIRTIO_BLK_T_IN  0  // read from the disk
#define VIRTIO_BLK_T_OUT 1  // write to the disk
struct virtio_blk_req {
  uint32 type;     // VIRTIO_BLK_T_IN or _OUT
  uint32 reserved;
  uint64 sector;   // first 512-byte sector
};

// Largest number of block buffers one request may carry.
#define VIRTIO_MAXBUFS 32

// The disk index (virtio_disk.c's disks[]) of the file system's disk, for
// virtio_disk_pages(); swap's is SWAPDEV (swap.h). Not a file-system device number.
#define FSDISK 0

// virtio_disk.c, beyond defs.h: read or write n buffers whose data is consecutive on the
// disk starting at block `blockno` (the buffers' own blockno fields are not consulted,
// so the log can write cached blocks into its own region). 1 <= n <= VIRTIO_MAXBUFS.
// The caller holds each buffer's sleeplock.
struct buf;
void virtio_disk_rwv(struct buf **bufs, int n, uint blockno, int write);
// Read n consecutive blocks from blockno into n*BSIZE bytes of contiguous kernel memory,
// or write them from there (writedirect's fresh file blocks).
void virtio_disk_read(void *dst, int n, uint blockno);
void virtio_disk_write(void *src, int n, uint blockno);
