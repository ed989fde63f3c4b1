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
//
// Contract:
//   - Code that may change the disk (any log_write(), or an iput() that may free an
//     inode) runs as begin_op(); ...; end_op(), taking inode and buffer locks only inside
//     that bracket and releasing them all before end_op(). begin_op() may wait for all
//     outstanding operations to end, and they may be waiting for any inode or buffer
//     lock; the commit in end_op() takes every logged buffer's sleeplock. So an inode
//     lock held across begin_op(), or a buffer lock held across either call, can
//     deadlock. (Readers that change nothing, like fileread, need no bracket.)
//   - log.lock protects outstanding, committing, big and lh. outstanding counts the
//     operations admitted by begin_op()/begin_bigop() and not yet ended. begin_op()
//     admits one only while lh.n + (outstanding + 1) * MAXOPBLOCKS <= LOGSIZE, so lh
//     cannot overflow as long as every operation logs at most MAXOPBLOCKS distinct
//     blocks (filewrite splits large writes to keep to it). A big operation is admitted
//     only into an empty log, runs with outstanding == 1, and may log LOGSIZE blocks.
//   - committing is set by the end_op() that takes outstanding to 0, and cleared when its
//     commit is done. Meanwhile nobody is admitted, so commit() reads lh without log.lock
//     and no log_write() can run.
//   - Every block in lh is pinned in the buffer cache and its cached copy is the newest;
//     the home block on disk is stale until install_committed() writes it.
//   - A commit covers every operation that ended since the last one, all or nothing:
//     after the header write (the commit point) they survive a crash, before it none
//     does. Only the end_op() that commits returns after its changes are durable; the
//     others return earlier, and their changes become durable with that commit.

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

// Contract: read the log's place from the super block and redo a committed log. Called
// once by fsinit(), from the first process, before any begin_op(). Panics if the image's
// log region cannot hold LOGSIZE blocks.
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

// Contract: copy the on-disk header into log.lh. Boot only (recovery); panics on a
// header whose n is out of range.
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

// Contract: write log.lh to the header block and wait for the disk. With n > 0 this is
// the commit point; with n == 0 it erases the log. Called by the committer (or at boot).
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

// Contract: copy the logged blocks, pinned in the cache, into the log region in lh order:
// the region is contiguous, so each run of up to VIRTIO_MAXBUFS blocks is one request.
// Committer only. The bread()s find the pinned copies and never read the disk.
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

// Contract: write the committed blocks from the cache to their home locations, then drop
// the log's pin on each (after its write is done, so it cannot be recycled with the
// disk stale). Runs of consecutive home blocks go out in one request. Committer only.
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

// Contract: at boot, copy each block of a committed log from the log region to its home,
// then erase the log. Running it again after a crash halfway redoes the same copies.
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

// Contract: start a file-system operation that will log at most MAXOPBLOCKS distinct
// blocks: sleep until no commit or big operation runs and the log can reserve that
// many for it on top of the other outstanding operations. Caller holds no lock (it
// sleeps) and must call end_op() exactly once.
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

// Contract: start an operation that may log up to LOGSIZE blocks (filewrite's large
// chunks): sleep until no operation is outstanding and no commit runs, so the log is
// empty; then it runs alone until its end_op(). Same rules as begin_op() otherwise.
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

// Contract: end the caller's operation (one begin_op() or begin_bigop()). The last one
// out commits everybody's changes before returning; the others wake a waiter in
// begin_op(). The caller holds no inode or buffer locks: the commit takes the logged
// buffers' sleeplocks. Panics if called during a commit (an unmatched end_op()).
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

// Contract: make the logged blocks durable: log them, commit, install, erase. Called only
// by end_op() with committing set and outstanding 0, without log.lock (it sleeps).
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

// Contract: record that b, modified by the caller, must go out with the next commit;
// this replaces bwrite(). Caller holds b's sleeplock and is inside an operation, and
// still calls brelse(b). The first log_write() of a block pins it (one slot in lh);
// later ones in the same commit take no slot (absorption). Panics outside an operation,
// or when lh is full, checked before absorption: even a block already logged panics then.
void
log_write(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("log_write: b->lock");
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
