// The write-ahead log: makes each file-system operation atomic across crashes.
//
// A system call brackets its changes with begin_op()/end_op(), and writes each changed
// buffer with log_write() instead of bwrite(). log_write() only records the block number
// and pins the buffer in the cache. A commit gathers every operation that ended since the
// last one (group commit); commit():
//   1. writes the changed blocks into the log region (one disk request per run),
//   2. writes the header naming them: this single-block write is the commit point,
//   3. copies ("installs") the blocks to their home locations,
//   4. writes a header with n = 0, erasing the log.
// After a crash, recover_from_log() re-installs a committed log, or ignores an
// uncommitted one. begin_op() admits a new operation only while the log surely has room
// for MAXOPBLOCKS more blocks from each outstanding one. begin_bigop() admits an operation
// of up to LOGSIZE blocks that runs alone (large file writes).
//
// Commits are deferred, so that a run of small operations (a program writing a file one
// block per call) shares one: the last operation out commits only when the log has no
// room for another operation, when its oldest change is COMMIT_TICKS old, or when a
// process is waiting in log_sync() (every exit). Otherwise the changes wait, pinned in the
// cache where every reader finds them, and the next begin_op() that finds no room, or
// begin_bigop(), commits them before it starts. What a crash can lose is the last
// COMMIT_TICKS of operations of processes still running; what it keeps is whole.
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
//   - log.lock protects outstanding, committing, big, syncers, since and lh. outstanding
//     counts the
//     operations admitted by begin_op()/begin_bigop() and not yet ended. begin_op()
//     admits one only while lh.n + (outstanding + 1) * MAXOPBLOCKS <= LOGSIZE, so lh
//     cannot overflow as long as every operation logs at most MAXOPBLOCKS distinct
//     blocks (filewrite splits large writes to keep to it). A big operation is admitted
//     only into an empty log, runs with outstanding == 1, and may log LOGSIZE blocks.
//   - committing is set by whoever commits (commit_now(): an end_op() that takes
//     outstanding to 0, a begin_op()/begin_bigop() that needs the room, log_sync()), always
//     with outstanding == 0, and cleared when its commit is done. Meanwhile nobody is
//     admitted, so commit() reads lh without log.lock and no log_write() can run.
//   - syncers counts processes in log_sync(); while it is not 0 nobody is admitted, so
//     the outstanding operations drain and the last one out commits.
//   - Every block in lh is pinned in the buffer cache and its cached copy is the newest;
//     the home block on disk is stale until install_committed() writes it.
//   - A commit covers every operation that ended since the last one, all or nothing:
//     after the header write (the commit point) they survive a crash, before it none
//     does. An operation's changes become durable with the commit that covers them;
//     log_sync() returns after everything logged before it is durable.

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
  int syncers;           // processes in log_sync(), waiting for everything to commit
  uint since;            // ticks when lh.n went from 0 to 1 (the oldest uncommitted change)
  int dev;
  struct logheader lh;
};
static struct log log;

// Blocks freed by changes not yet committed, one bit a block, set in [freedlo, freedhi]
// (log.lock). balloc() does not hand them out for file data that goes straight to the
// disk (writei's direct path): a crash before the commit would leave such a block its
// old owner's, holding the new data. A commit point makes the frees durable and clears
// them; commit() runs alone, so it needs no lock for that.
static uchar freed[FSMAXBLOCKS / 8];
static uint freedlo = FSMAXBLOCKS, freedhi;

// An uncommitted change older than this (in ticks) is committed by the next end_op()
// that leaves no operation outstanding.
#define COMMIT_TICKS 10

static void recover_from_log(void);
static void commit(void);
static void commit_now(void);
static uint now(void);

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
// blocks: sleep until no commit, big operation or log_sync() runs and the log can
// reserve that many for it on top of the other outstanding operations; when only deferred
// changes stand in the way, commit them first. Caller holds no lock (it sleeps) and must
// call end_op() exactly once.
void
begin_op(void)
{
  acquire(&log.lock);
  for(;;){
    if(log.committing || log.big || log.syncers > 0){
      sleep(&log, &log.lock);
    } else if(log.lh.n + (log.outstanding + 1) * MAXOPBLOCKS <= LOGSIZE){
      break;
    } else if(log.outstanding == 0){
      commit_now();   // deferred changes hold the room
    } else {
      sleep(&log, &log.lock);   // the outstanding ones end, and the last out may commit
    }
  }
  log.outstanding++;
  release(&log.lock);
}

// Contract: start an operation that may log up to LOGSIZE blocks (filewrite's large
// chunks): sleep until no operation is outstanding and no commit runs, committing
// deferred changes itself, so that the log is empty; then it runs alone until its
// end_op(). Same rules as begin_op() otherwise.
void
begin_bigop(void)
{
  acquire(&log.lock);
  while(log.committing || log.big || log.syncers > 0 || log.outstanding > 0 ||
        log.lh.n > 0){
    if(!log.committing && !log.big && log.syncers == 0 && log.outstanding == 0)
      commit_now();   // deferred changes: the big operation needs an empty log
    else
      sleep(&log, &log.lock);
  }
  log.big = 1;
  log.outstanding = 1;
  release(&log.lock);
}

// Contract: end the caller's operation (one begin_op() or begin_bigop()). The last one
// out commits everybody's changes before returning if the log has no room for another
// operation, the oldest change is COMMIT_TICKS old or someone waits in log_sync();
// otherwise the changes wait for a later commit. Either way it wakes the waiters in
// begin_op(). The caller holds no inode or buffer locks: the commit takes the logged
// buffers' sleeplocks. Panics if called during a commit (an unmatched end_op()).
void
end_op(void)
{
  acquire(&log.lock);
  if(log.committing)
    panic("end_op: committing");
  log.outstanding--;
  log.big = 0;   // a big operation runs alone, so if one was running, it is this one
  if(log.outstanding == 0 && log.lh.n > 0 &&
     (log.lh.n + MAXOPBLOCKS > LOGSIZE || log.syncers > 0 || now() - log.since >= COMMIT_TICKS))
    commit_now();
  else
    wakeup(&log);   // our reservation is returned: a waiter in begin_op may fit now
  release(&log.lock);
}

// Contract: note that the caller's operation freed block b (itrunc); the note lasts
// until the commit point that makes the free durable. Caller is inside an operation.
void
log_freed(uint b)
{
  if(b >= FSMAXBLOCKS)
    panic("log_freed: block");
  acquire(&log.lock);
  freed[b / 8] |= 1 << (b % 8);
  freedlo = b < freedlo ? b : freedlo;
  freedhi = b > freedhi ? b : freedhi;
  release(&log.lock);
}

// Contract: 1 if block b was freed by a change not yet committed (log_freed), else 0.
int
log_freedsince(uint b)
{
  acquire(&log.lock);
  int r = b < FSMAXBLOCKS && (freed[b / 8] & (1 << (b % 8)));
  release(&log.lock);
  return r;
}

// Contract: make everything logged so far durable: keep new operations out, wait for the
// outstanding ones to end (the last one out commits) or commit what is deferred. Returns
// when the log is empty. Caller holds no inode or buffer lock, as for begin_op().
void
log_sync(void)
{
  acquire(&log.lock);
  log.syncers++;
  while(log.lh.n > 0){
    if(log.committing || log.outstanding > 0)
      sleep(&log, &log.lock);
    else
      commit_now();
  }
  log.syncers--;
  wakeup(&log);
  release(&log.lock);
}

// Contract: the tick count, read without tickslock: it only decides when to commit.
static uint
now(void)
{
  return __atomic_load_n(&ticks, __ATOMIC_RELAXED);
}

// Contract: commit what is logged. Caller holds log.lock, and no operation is outstanding
// and no commit runs; it is released while the commit sleeps on the disk (committing
// keeps everyone out meanwhile) and held again on return. Wakes the waiters.
static void
commit_now(void)
{
  if(!holding(&log.lock) || log.outstanding != 0 || log.committing)
    panic("commit_now");
  log.committing = 1;
  release(&log.lock);
  commit();
  acquire(&log.lock);
  log.committing = 0;
  wakeup(&log);
}

// Contract: make the logged blocks durable: log them, commit, install, erase. Called only
// by commit_now() with committing set and outstanding 0, without log.lock (it sleeps).
static void
commit(void)
{
  if(log.lh.n == 0)
    return;
  write_log();
  write_head();          // the commit point
  if(freedlo <= freedhi)
    memset(freed + freedlo / 8, 0, freedhi / 8 - freedlo / 8 + 1);
  freedlo = FSMAXBLOCKS;
  freedhi = 0;
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
    if(i == 0)
      log.since = now();
    log.lh.block[i] = b->blockno;
    log.lh.n++;
    bpin(b);
  }
  release(&log.lock);
}
