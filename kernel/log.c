// The write-ahead log: makes each file-system operation atomic across crashes.
//
// A system call brackets its changes with begin_op()/end_op(), and writes each changed
// buffer with log_write() instead of bwrite(). log_write() only records the block number
// and pins the buffer in the cache. When the last outstanding operation ends, commit():
//   1. writes the changed blocks into the log region (one disk request per run),
//   2. writes the header naming them: this single-block write is the commit point,
//   3. copies ("installs") the blocks to their home locations,
//   4. writes a header with n = 0, erasing the log.
// After a crash, recover_from_log() re-installs a committed log, or ignores an
// uncommitted one. Several operations may share one commit (group commit); begin_op()
// admits a new operation only while the log surely has room for MAXOPBLOCKS more blocks
// from each outstanding one. begin_bigop() admits an operation of up to LOGSIZE blocks
// that runs alone (large file writes).
//
// On disk: [ header block | LOGSIZE logged blocks ] from sb.logstart.

#include "kernel/types.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"
#include "kernel/param.h"
#include "kernel/spinlock.h"
#include "kernel/sleeplock.h"
#include "kernel/fs.h"
#include "kernel/buf.h"
#include "kernel/virtio.h"

// The header block, in memory and on disk.
struct logheader {
  int n;                // blocks in the log; 0 = nothing committed
  int block[LOGSIZE];   // home block number of log block i
};

struct log {
  struct spinlock lock;  // protects outstanding, committing, big, lh
  int start;             // block number of the header
  int size;              // blocks in the log region, header included
  int outstanding;       // operations between begin_op and end_op
  int committing;        // a commit is in progress: wait
  int big;               // the one outstanding operation is a big one (begin_bigop)
  int dev;
  struct logheader lh;
};
static struct log log;

static void recover_from_log(void);
static void commit(void);

// Read the log's place from the super block and redo a committed log. Called by fsinit.
void
initlog(int dev, struct superblock *sb)
{
  if(sizeof(struct logheader) >= BSIZE)
    panic("initlog: header too big");
  if(sb->nlog < LOGSIZE + 1)
    panic("initlog: log region smaller than LOGSIZE");
  initlock(&log.lock, "log");
  log.start = sb->logstart;
  log.size = sb->nlog;
  log.dev = dev;
  recover_from_log();
}

// Copy the header block into log.lh.
static void
read_head(void)
{
  struct buf *b = bread(log.dev, log.start);
  struct logheader *h = (struct logheader *)b->data;
  log.lh.n = h->n;
  if(log.lh.n < 0 || log.lh.n > LOGSIZE)
    panic("log: corrupt header");
  for(int i = 0; i < log.lh.n; i++)
    log.lh.block[i] = h->block[i];
  brelse(b);
}

// Write log.lh to the header block. With n > 0 this is the commit point.
static void
write_head(void)
{
  struct buf *b = bread(log.dev, log.start);
  struct logheader *h = (struct logheader *)b->data;
  h->n = log.lh.n;
  for(int i = 0; i < log.lh.n; i++)
    h->block[i] = log.lh.block[i];
  bwrite(b);
  brelse(b);
}

// Write the logged blocks, still pinned in the cache, into the log region: the region is
// contiguous, so each run of up to VIRTIO_MAXBUFS blocks is one disk request.
static void
write_log(void)
{
  struct buf *run[VIRTIO_MAXBUFS];

  for(int i = 0; i < log.lh.n; ){
    int k = log.lh.n - i;
    if(k > VIRTIO_MAXBUFS)
      k = VIRTIO_MAXBUFS;
    for(int j = 0; j < k; j++)
      run[j] = bread(log.dev, log.lh.block[i + j]);   // cached (pinned): no disk read
    virtio_disk_rwv(run, k, log.start + 1 + i, 1);
    for(int j = 0; j < k; j++)
      brelse(run[j]);
    i += k;
  }
}

// Copy the committed blocks to their home locations, then drop the log's pins.
// Runs of consecutive home blocks go out in one disk request.
static void
install_committed(void)
{
  struct buf *run[VIRTIO_MAXBUFS];

  for(int i = 0; i < log.lh.n; ){
    int k = 1;
    while(i + k < log.lh.n && k < VIRTIO_MAXBUFS && log.lh.block[i + k] == log.lh.block[i] + k)
      k++;
    for(int j = 0; j < k; j++)
      run[j] = bread(log.dev, log.lh.block[i + j]);   // cached (pinned)
    virtio_disk_rwv(run, k, log.lh.block[i], 1);
    for(int j = 0; j < k; j++){
      bunpin(run[j]);
      brelse(run[j]);
    }
    i += k;
  }
}

// At boot: copy each block of a committed log from the log region home, then erase the log.
static void
recover_from_log(void)
{
  read_head();
  for(int i = 0; i < log.lh.n; i++){
    struct buf *from = bread(log.dev, log.start + 1 + i);
    struct buf *to = bread(log.dev, log.lh.block[i]);
    memmove(to->data, from->data, BSIZE);
    bwrite(to);
    brelse(from);
    brelse(to);
  }
  log.lh.n = 0;
  write_head();
}

// Start a file-system operation: wait until no commit or big operation is running and
// the log has room for this operation's worst case, MAXOPBLOCKS blocks.
void
begin_op(void)
{
  acquire(&log.lock);
  while(log.committing || log.big ||
        log.lh.n + (log.outstanding + 1) * MAXOPBLOCKS > LOGSIZE)
    sleep(&log, &log.lock);
  log.outstanding++;
  release(&log.lock);
}

// Start a big operation, which may log up to LOGSIZE blocks (filewrite's large chunks):
// it waits until no other operation is outstanding and runs alone.
void
begin_bigop(void)
{
  acquire(&log.lock);
  while(log.committing || log.big || log.outstanding > 0)
    sleep(&log, &log.lock);
  log.big = 1;
  log.outstanding = 1;
  release(&log.lock);
}

// End a file-system operation; the last one out commits everybody's changes.
// The caller holds no inode or buffer locks.
void
end_op(void)
{
  int docommit = 0;

  acquire(&log.lock);
  if(log.committing)
    panic("end_op: committing");
  log.outstanding--;
  log.big = 0;   // a big operation runs alone, so if one was running, it is this one
  if(log.outstanding == 0){
    docommit = 1;
    log.committing = 1;
  } else {
    wakeup(&log);   // our reservation is returned: a waiter in begin_op may fit now
  }
  release(&log.lock);

  if(docommit){
    // log.committing keeps everyone out, so commit runs without log.lock (it sleeps).
    commit();
    acquire(&log.lock);
    log.committing = 0;
    wakeup(&log);
    release(&log.lock);
  }
}

// Make the logged blocks durable: log them, commit, install, erase.
static void
commit(void)
{
  if(log.lh.n == 0)
    return;
  write_log();
  write_head();          // the commit point
  install_committed();
  log.lh.n = 0;
  write_head();          // the log is empty again
}

// Record that b (locked, modified) belongs to the current operation: pin it in the cache
// until commit installs it. A block logged twice in one commit takes one slot (absorption).
void
log_write(struct buf *b)
{
  acquire(&log.lock);
  if(log.lh.n >= LOGSIZE || log.lh.n >= log.size - 1)
    panic("log_write: transaction too big");
  if(log.outstanding < 1)
    panic("log_write: outside of a transaction");
  int i;
  for(i = 0; i < log.lh.n; i++)
    if(log.lh.block[i] == b->blockno)
      break;
  if(i == log.lh.n){
    log.lh.block[i] = b->blockno;
    log.lh.n++;
    bpin(b);
  }
  release(&log.lock);
}
