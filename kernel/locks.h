// The kernel's lock order. This is the one place that states it; other files cite it and
// say only what their own locks protect. (A header of comments: nothing includes it.)
#ifndef KERNEL_LOCKS_H
#define KERNEL_LOCKS_H

// Outermost first: holding a lock, take only locks listed below it. Brackets name the
// functions where a lock is taken under one above it. Waiting for a lock against this
// order can deadlock; the exceptions below say why each one cannot.
//
// Sleeplocks may be held across sleep() (a disk request, reclaim, a clock tick). A
// waiter sleeps, and acquiresleep() ignores p->killed, so a wait is never cut short.
// Spinlocks turn interrupts off, so nothing may sleep while one is held: sched() allows
// p->lock alone, and sleep() gives up the lock it is passed.
//
// Sleeplocks, and the log:
//
//   p->vmlock of the calling process (proc.h)
//       its page table, sz and vmas, against reclaim and the OOM killer. exit, exec,
//       fork, sbrk, mmap, munmap and memstat take it holding nothing else; a fault
//       takes it wherever a copy faults ("The vmlock" below says why that is safe).
//     log admission: begin_op()/end_op() (log.c)
//         room in the log for one fs operation [under the vmlock: exit; unmaprange ->
//         writeback, fileclose]. Never begin_op() holding ip->lock or b->lock (log.c).
//       ip->lock (fs.c)
//           the inode's disk fields, and the filling of its cached pages [writeback;
//           mappage -> pagecache_get]. A directory before the inodes it names
//           [create, sys_unlink]; namex holds one at a time.
//         bigread.lock (fs.c)
//             the landing area of the direct paths [readdirect, writedirect]
//           b->lock (bio.c)
//               one buffer's data [under ip->lock: ilock, bmap, readi, writei,
//               iupdate]. Several at once: tree blocks top-down, then a bitmap block
//               [free_tree]; runs of logged blocks, no operation open [commit].
//             hand.lock (swap.c)
//                 the clock hand: one reclaimer at a time, held across swap-disk
//                 writes [fork, growproc, vmfault -> oomretry -> reclaim; under the log
//                 and ip->lock: exec -> loadsegs -> uvmalloc]. Reclaim takes no inode,
//                 buffer or log lock, so that is safe.
//               oomlock (oom.c)
//                   one OOM killer at a time. Polled, never waited for ("oomlock");
//                   its holder takes its own vmlock again [largest].
//                 p->vmlock of another process
//                     by tryacquiresleep only, never waited for [visit, under
//                     hand.lock; victim_pages, under oomlock; lockset (rmap.c), for a
//                     shared page: under hand.lock and the visited one's
//                     (rmap_pageout), or under the faulter's own (rmap_share)]. Several
//                     at once only so.
//
// Spinlocks, all below every sleeplock, outermost first. Several p->locks at once cannot
// deadlock: each is taken only by a holder of that process's vmlock, which is exclusive,
// and in proc[] order; the others who take a p->lock hold no other p->lock meanwhile.
//
//   wait_lock (proc.c)         every p->parent; orders wait() against exit()
//   tickslock (trap.c)         ticks
//   cons.lock (console.c)      the console's input ring
//   tx_lock (uart.c)           the UART's transmit ring
//   a pipe's lock (pipe.c)     one pipe's counts, bytes and open ends
//   d->lock (virtio_disk.c)    one disk's descriptors, rings and requests
//   log.lock (log.c)           outstanding, committing, big, the header lh
//   itable.lock (fs.c)         each in-memory inode's dev, inum and ref
//   bcache.lock (bio.c)        the LRU list; each buffer's dev, blockno and refcnt
//                              [under log.lock: log_write -> bpin]
//   lk->lk (sleeplock.c)       one sleeplock's own fields [under itable.lock: iput;
//                              under bcache.lock: breadahead]
//   p->lock (proc.h)           state, chan, killed, xstate, pid. sleep() and wakeup()
//                              take it under the lock their caller holds: wait_lock,
//                              tickslock, cons.lock, tx_lock, a pipe's, d->lock,
//                              log.lock or lk->lk. Several at once only in proc[]
//                              order, each with its process's vmlock held [lockset,
//                              rmap.c]; everyone else holds one at a time.
//   pid_lock (proc.c)          nextpid [under p->lock: allocproc]
//   swap.lock (swap.c)         the swap slots and counters [under p->lock: visit,
//                              freeproc]
//   pcache.lock (pagecache.c)  the page cache's entries
//   kmem.lock (kalloc.c)       the free list and every page's refcount [under
//                              pcache.lock: gethit, drop, pagecache_trim; under
//                              p->lock: allocproc, freeproc]
//   hintlock (fs.c)            balloc's and ialloc's hints; the free-block count and
//                              the blocks promised to gathers
//   gtable.lock (gather.c)     which inode owns each gather (its data: the owner's
//                              ip->lock)
//   ftable.lock (file.c)       every struct file's ref
//   pr.lock (printf.c)         whole printf lines [under itable.lock: iget; under
//                              cons.lock: consoleintr -> procdump]
//
// Two spinlock holders take a sleeplock that nobody else can hold, so neither sleeps:
// iput (an unlinked inode's last reference, under itable.lock) and breadahead (buffers
// with refcnt 0, under bcache.lock).
//
// The vmlock. Only its owner ever waits for a p->vmlock, and nobody waits for a second
// vmlock while holding one: reclaim [visit; rmap_pageout -> lockset] and the OOM killer
// [victim_pages] take another process's with tryacquiresleep and pass it by when it is
// busy, and so does a page-in that shares its page with the slot's other PTEs
// [rmap_share -> lockset], which holds its own. lockset panics if it is called holding a
// spinlock or without the vmlock it builds on, and lockedpte if it is asked for a PTE of
// a process in the set whose p->lock is not held.
// While they hold another's vmlock they take only spinlocks (q->lock, several p->locks
// in proc[] order, swap.lock, pcache.lock, kmem.lock) and write to the swap disk, never
// an inode, buffer, log, hand or OOM lock. So a process may wait for its own vmlock
// under whatever a copy holds when it faults (the log or ip->lock: readi, writei, and
// argstr inside begin_op), the reverse of exit's order, and still no cycle forms: the
// only others who hold it wait for none of those. A faulter lets go of its own around
// oomkill() (oomretry, oom.c), so that the killer can size it.
//
// Faults in copyin/copyout. A copy to or from user memory may fault (userpte ->
// vmfault), and the fault may sleep and take the caller's vmlock, hand.lock, oomlock
// and, to map a file page (mappage -> pagecache_get), the mapped file's ip->lock and
// buffer locks. Pipes, the console and wait() copy with their spinlocks released; under
// a spinlock vmfault does not sleep, and the copy fails instead. readi and writei never
// fault holding a buffer or bigread.lock: they fault the user pages in first and copy
// only pages still present (fs.c copyheld). They do fault holding ip->lock, so there
// the order above does not hold: read() or write() of file A with a buffer in an
// untouched mapping of file B takes B's ip->lock under A's, and a process doing the
// reverse deadlocks with it (docs/memory.md, "Known limits"); the same file is handled
// (pagecache_get sees its caller's own ip->lock).
//
// oomlock. oomkill polls it with tryacquiresleep once a tick and gives up if its caller
// is killed. Its holder sleeps up to OOM_WAIT_TICKS for a victim to exit, and may hold
// what that exit needs (a fault in a copy holds ip->lock or the log), so the wait is
// bounded instead of ordered.

#endif // KERNEL_LOCKS_H
