//! Buffered mode (HiNFS + SoupFS, on Ferrite's logs): operations run at
//! DRAM speed and become durable in the background, in the order they
//! returned.
//!
//! The calling thread does everything strict mode does except the commit
//! point and the flushes of its staging: it stages the entries after the
//! tails (data streamed into fresh pages and fenced; entries and slots
//! stored with their flushes deferred, `Media::defer_flushes`), applies the
//! entries to the DRAM state (every reader sees the change at once), and
//! appends the words the commit point would set (log tails, inode state
//! words) and the ranges it left unflushed to one global queue, in the
//! order operations return. A batch flushes those ranges before its first
//! fence. A persister sets those words in
//! queue order, a batch at a time, each batch in one journal transaction,
//! so that a crash leaves the durable state equal to the state after a
//! *prefix* of the operations: never a later one without an earlier one.
//! What an operation releases (pages, its inode number) is freed only once
//! its batch is durable, since until then a crash brings back the log that
//! refers to it. docs/DESIGN.md, "Buffered mode", tells the whole story.
//!
//! Who persists: a background thread (`persister_thread`), woken when the
//! queue fills or its oldest operation has waited half the lag bound; and
//! any caller that must not wait for it: a sync point (fsync, sync) or
//! back-pressure persists inline, on its own core, which saves the
//! cross-core wake-up. One persister at a time (`persist_lock`) keeps the
//! order.

use crate::alloc::{InodeAllocator, PageAllocator};
use crate::format::{PageNo, JOURNAL_RECORDS_MAX};
use crate::journal::{Journals, Transaction};
use crate::media::{FlushRanges, Media};
use crate::types::{Errno, FsResult, InodeNo};
use crate::Map;
use ferrite_pmem::PoolOffset;
use parking_lot::{Condvar, Mutex, MutexGuard};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parameters of a buffered mount (`MountOptions::buffered`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferedOptions {
    /// An operation is durable at most this long after it returns: the
    /// persister starts a batch when the oldest operation not yet durable
    /// has waited half of it, and an operation that finds that one older
    /// than all of it persists the queue itself before it returns.
    pub lag_ns_max: u64,
    /// Operations returned but not yet durable, at most: the operation that
    /// reaches it persists the queue before it returns (back-pressure).
    pub ops_max: u64,
    /// Run a background persister thread. Without it operations become
    /// durable only at sync points, at back-pressure and in
    /// `Ferrite::persist_now`: deterministic, for the crash harness.
    pub persister_thread: bool,
    /// Words (tails and state words, merged) one batch sets at most: a
    /// batch is one journal transaction, so at most `JOURNAL_RECORDS_MAX`.
    /// Smaller only for tests: the crash harness uses a few words, so that
    /// its short workloads persist in several batches and leave some
    /// taken and not yet durable (`Ferrite::persist_all_but`).
    pub batch_words_max: usize,
}

/// Limits of the buffered options (TIGER_STYLE: a limit on everything).
pub const BUFFERED_LAG_NS_MAX: u64 = 10_000_000_000;
pub const BUFFERED_OPS_MAX: u64 = 1 << 20;
/// The fewest words a batch may be limited to: as many as a rename sets
/// (two directories' tails, the moved inode's tail, a replaced inode's
/// state word). An operation with more goes in a batch of its own.
pub const BATCH_WORDS_MIN: usize = 4;

impl Default for BufferedOptions {
    fn default() -> Self {
        BufferedOptions {
            lag_ns_max: 5_000_000,
            ops_max: 4096,
            persister_thread: true,
            batch_words_max: JOURNAL_RECORDS_MAX,
        }
    }
}

impl BufferedOptions {
    /// Check the options against their limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.lag_ns_max == 0 || self.lag_ns_max > BUFFERED_LAG_NS_MAX && self.lag_ns_max != u64::MAX {
            return Err(format!(
                "buffered lag {} ns outside 1..={BUFFERED_LAG_NS_MAX} (or unbounded)",
                self.lag_ns_max
            ));
        }
        if self.ops_max == 0 || self.ops_max > BUFFERED_OPS_MAX {
            return Err(format!("buffered ops_max {} outside 1..={BUFFERED_OPS_MAX}", self.ops_max));
        }
        if self.batch_words_max < BATCH_WORDS_MIN || self.batch_words_max > JOURNAL_RECORDS_MAX {
            return Err(format!(
                "buffered batch_words_max {} outside {BATCH_WORDS_MIN}..={JOURNAL_RECORDS_MAX}",
                self.batch_words_max
            ));
        }
        Ok(())
    }
}

/// Compaction of an inode's log rewrites all of it, so it waits until the
/// inode's queued operations are durable; a log due for compaction that has
/// this many pages makes them durable on the calling thread first (one
/// batch), a smaller one waits for the persister. (Fast GC never waits:
/// it collects the dead pages whose death is durable, `LogPage::died_at`.)
pub(crate) const BUFFERED_COMPACT_PAGES: usize = 64;

/// What the persister has done since mount (`Ferrite::buffered_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferedStats {
    /// Operations queued since mount.
    pub ops_queued: u64,
    /// Operations made durable since mount.
    pub ops_persisted: u64,
    /// Batches (journal transactions or single tail stores) since mount.
    pub batches: u64,
    /// Batches run by a caller (sync point, back-pressure, GC, ENOSPC)
    /// rather than by the persister thread.
    pub batches_inline: u64,
    /// Operations returned but not yet durable, now.
    pub pending_now: u64,
    /// The longest an operation has waited between its return and the end
    /// of its batch, since mount or the last `Ferrite::reset_buffered_lag`.
    pub lag_ns_max_seen: u64,
    /// Operations that persisted the queue before returning because it
    /// was full or its oldest operation was at the lag bound.
    pub backpressure_waits: u64,
    /// The persister thread is asleep until an operation wakes it (it
    /// found the queue empty for a while; see `PERSISTER_IDLE_WAITS`).
    pub persister_asleep: bool,
}

/// One operation in the queue: the commit-point words it sets, and what it
/// released, to be freed once it is durable.
struct Queued {
    seq: u64,
    words: SmallVec<[(PoolOffset, u64); 4]>,
    /// What the operation stored without flushing (its staged entries, a
    /// new inode's slot): flushed by the batch before its first fence.
    flushes: FlushRanges,
    free_pages: crate::PageList,
    free_inodes: SmallVec<[InodeNo; 1]>,
    queued_at: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    Running,
    /// Unmount: the queue has been drained; exit.
    Drain,
    /// The file system was dropped without unmount (a crash, as far as the
    /// pool is concerned): persist nothing more.
    Abandon,
}

struct QueueState {
    /// Operations queued and not yet taken by a persister. Those taken and
    /// not yet durable are in `Buffered::persist_lock`'s deque, and all of
    /// them come before these.
    ops: VecDeque<Queued>,
    /// When the oldest operation not yet durable (taken or queued)
    /// returned; `None` when every operation is durable. The lag bound is
    /// judged on it.
    oldest_at: Option<Instant>,
    /// The sequence number the next operation gets (the first is 1).
    next_seq: u64,
    /// Every operation with a sequence number up to this one is durable.
    durable_seq: u64,
    stop: Stop,
    /// Set when persisting failed: nothing more is made durable, changes
    /// fail with EROFS and sync points with EIO.
    failed: bool,
    /// The persister thread sleeps until woken (it found the queue empty
    /// `PERSISTER_IDLE_WAITS` times in a row): the next operation queued
    /// must wake it. While it is not asleep it wakes on its own every half
    /// lag bound, so operations need not wake it.
    persister_asleep: bool,
}

/// Timed waits (half the lag bound each) that find the queue empty before
/// the persister sleeps until an operation wakes it: about a second with
/// the default 5 ms bound. Waking it on every operation that found the
/// queue empty cost a sleeping thread's wake-up each time the queue had
/// just been emptied by a sync point: in varmail (an fsync every few
/// operations, two threads) a fifth of the time went to those wake-ups
/// and the context switches they caused.
const PERSISTER_IDLE_WAITS: u32 = 400;

/// How long a sync point waits on plain loads for another thread's batch
/// before it blocks (`Buffered::persist_lock_or_durable`): rounds of
/// `crate::spin_until`, about 100 µs on the AMD VM (a pause takes 25 ns
/// there). A batch a caller runs holds a few operations and takes a few
/// microseconds, the persister thread's about 250 and 33–86 µs; a holder
/// that takes longer has been preempted, and then blocking is the better
/// wait.
const PERSIST_WAIT_SPIN_ROUNDS: u32 = 1024;

/// The buffered-mode state of a mount, shared with the persister thread.
pub(crate) struct Buffered {
    pub opts: BufferedOptions,
    media: Media,
    pages: Arc<PageAllocator>,
    inodes_free: Arc<InodeAllocator>,
    journals: Arc<Journals>,
    state: Mutex<QueueState>,
    /// The persister thread waits on it for work.
    work: Condvar,
    /// One persister at a time: batches are made durable in queue order.
    /// It holds the operations a persister has taken from the queue and not
    /// yet made durable: the queue's lock is held only to swap the whole
    /// queue out (constant time), and batches are cut from it under this
    /// lock alone, so that an operation queued meanwhile never waits for
    /// that work (a caller that finds a lock held long enough to park pays
    /// a cross-core wake-up, tens of microseconds on these VMs).
    persist_lock: Mutex<VecDeque<Queued>>,
    /// Inodes freed in DRAM whose free is not durable yet: their numbers
    /// are not reusable and a lookup by number must not load them again
    /// from their (still live) slots.
    dying: Mutex<crate::Set<InodeNo>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Fault injection (`Ferrite::inject_persist_failure`): the next batch
    /// panics before it sets a word.
    fail_next: std::sync::atomic::AtomicBool,
    ops_queued: AtomicU64,
    ops_persisted: AtomicU64,
    batches: AtomicU64,
    batches_inline: AtomicU64,
    lag_ns_max_seen: AtomicU64,
    backpressure_waits: AtomicU64,
    /// `QueueState::durable_seq` and `QueueState::failed`, readable without
    /// the queue's lock: every operation asks (GC, `check_writable`), and a
    /// locked instruction right after the operation's streaming stores
    /// waits for them as a fence does. Written under the lock, after the
    /// fields they mirror.
    durable_seq_now: AtomicU64,
    failed_now: std::sync::atomic::AtomicBool,
}

impl Buffered {
    pub fn start(
        opts: BufferedOptions,
        media: &Media,
        pages: Arc<PageAllocator>,
        inodes_free: Arc<InodeAllocator>,
        journals: Arc<Journals>,
    ) -> Arc<Buffered> {
        let b = Arc::new(Buffered {
            opts,
            media: Media { pmem: media.pmem.clone(), layout: media.layout },
            pages,
            inodes_free,
            journals,
            state: Mutex::new(QueueState {
                ops: VecDeque::new(),
                oldest_at: None,
                next_seq: 1,
                durable_seq: 0,
                stop: Stop::Running,
                failed: false,
                persister_asleep: false,
            }),
            work: Condvar::new(),
            persist_lock: Mutex::new(VecDeque::new()),
            dying: Mutex::new(Default::default()),
            thread: Mutex::new(None),
            fail_next: Default::default(),
            ops_queued: AtomicU64::new(0),
            ops_persisted: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batches_inline: AtomicU64::new(0),
            lag_ns_max_seen: AtomicU64::new(0),
            backpressure_waits: AtomicU64::new(0),
            durable_seq_now: AtomicU64::new(0),
            failed_now: Default::default(),
        });
        if b.opts.persister_thread {
            let me = b.clone();
            let handle = std::thread::Builder::new()
                .name("ferrite-persister".into())
                .spawn(move || me.thread_main())
                .expect("spawn the persister thread");
            *b.thread.lock() = Some(handle);
        }
        b
    }

    /// EROFS once persisting has failed: no change may be acknowledged that
    /// could never become durable.
    pub fn check_writable(&self) -> FsResult<()> {
        if self.failed_now.load(Ordering::Acquire) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    /// Queue an operation's commit-point words, the ranges it stored to
    /// without flushing (`Media::defer_flushes`) and what it released; the
    /// caller has fenced its own flushes and streaming stores (file data)
    /// and holds
    /// the locks of every inode the operation changed, so operations that
    /// depend on each other are queued in the order they happen. Returns
    /// the operation's sequence number. Persists the queue first if the
    /// operation finds it at the back-pressure or lag bound.
    pub fn push(
        &self,
        words: SmallVec<[(PoolOffset, u64); 4]>,
        flushes: FlushRanges,
        free_pages: crate::PageList,
        free_inodes: SmallVec<[InodeNo; 1]>,
    ) -> u64 {
        for &ino in &free_inodes {
            assert!(self.is_dying(ino), "inode {} freed without being marked dying first", ino.0);
        }
        let now = Instant::now();
        let (seq, over) = {
            let mut st = self.state.lock();
            let seq = st.next_seq;
            st.next_seq += 1;
            let pending = seq - st.durable_seq;
            let was_empty = pending == 1;
            st.ops.push_back(Queued { seq, words, flushes, free_pages, free_inodes, queued_at: now });
            let oldest_at = *st.oldest_at.get_or_insert(now);
            let oldest_ns = now.duration_since(oldest_at).as_nanos() as u64;
            let over = pending >= self.opts.ops_max || oldest_ns >= self.opts.lag_ns_max;
            if (was_empty && st.persister_asleep) || over {
                self.work.notify_one();
            }
            (seq, over)
        };
        self.ops_queued.fetch_add(1, Ordering::Relaxed);
        if over {
            // Back-pressure: the bound holds because this operation does
            // not return until the queue is durable (inline, on this core).
            self.backpressure_waits.fetch_add(1, Ordering::Relaxed);
            let _ = self.persist_upto(seq, true);
        }
        seq
    }

    /// Is every operation up to `seq` durable?
    pub fn is_durable(&self, seq: u64) -> bool {
        self.durable_seq() >= seq
    }

    /// Every operation up to this number is durable (their batches' fences
    /// have completed).
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq_now.load(Ordering::Acquire)
    }

    /// Persisting failed: refuse changes (EROFS) and sync points (EIO).
    fn fail(&self) {
        let mut st = self.state.lock();
        st.failed = true;
        self.failed_now.store(true, Ordering::Release);
    }

    /// The sequence number of the last operation queued.
    pub fn last_seq(&self) -> u64 {
        self.state.lock().next_seq - 1
    }

    /// Before an inode leaves the DRAM cache: until its free is durable a
    /// lookup by number must find nothing, not load its live slot again.
    pub fn mark_dying(&self, ino: InodeNo) {
        self.dying.lock().insert(ino);
    }

    pub fn is_dying(&self, ino: InodeNo) -> bool {
        self.dying.lock().contains(&ino)
    }

    /// Make every operation up to `seq` durable, on this thread unless the
    /// persister is already doing it. EIO if persisting failed.
    pub fn persist_upto(&self, seq: u64, inline: bool) -> FsResult<()> {
        loop {
            {
                let st = self.state.lock();
                if st.failed {
                    return Err(Errno::EIO);
                }
                if st.durable_seq >= seq || st.stop == Stop::Abandon {
                    return Ok(());
                }
            }
            // Without the lock, the checks above decide again (and return).
            let Some(mut taken) = self.persist_lock_or_durable(seq) else { continue };
            // Take a batch from the front: the persist lock keeps batches in
            // order. When this persister holds nothing taken before, it
            // swaps the whole queue out under the queue's lock (constant
            // time, so callers queueing meanwhile do not wait) and cuts the
            // batch outside it.
            {
                let mut st = self.state.lock();
                if st.failed {
                    return Err(Errno::EIO);
                }
                if st.durable_seq >= seq || st.stop == Stop::Abandon {
                    return Ok(());
                }
                if taken.is_empty() {
                    std::mem::swap(&mut *taken, &mut st.ops);
                }
            }
            let batch = take_batch(&mut taken, self.opts.batch_words_max);
            assert!(!batch.ops.is_empty(), "operations up to {seq} are not durable but none is queued");
            // A batch taken from the queue and not made durable is lost:
            // nothing after it may be persisted, or the durable state would
            // skip operations. A panic on the way (an assertion, on any
            // thread) therefore fails the mount before it unwinds further.
            let failing = FailOnUnwind(self);
            // A caller may be inside its own staging (out of pages, it
            // persists the queue to free what the queue released): the
            // batch's flushes are not that operation's to defer.
            let suspended = self.media.suspend_deferral();
            self.persist_batch(batch, &taken, inline);
            self.media.resume_deferral(suspended);
            std::mem::forget(failing);
        }
    }

    /// The persist lock, or `None` once every operation up to `seq` is
    /// durable or persisting has failed, whichever comes first (the caller
    /// then finds out which under the queue's lock). While
    /// another thread persists, the wait is on plain loads of
    /// `durable_seq_now` and the lock's word for up to
    /// `PERSIST_WAIT_SPIN_ROUNDS`, and blocks on the lock only after that:
    /// the holder's batch usually covers the caller's operations (two
    /// threads that each fsync, as in `varmail`, find each other's batch
    /// running), and a thread that parked would learn so only after a
    /// cross-core wake-up, tens of microseconds in these VMs, where the
    /// batch took a few.
    fn persist_lock_or_durable(&self, seq: u64) -> Option<MutexGuard<'_, VecDeque<Queued>>> {
        let waited = crate::spin_until(PERSIST_WAIT_SPIN_ROUNDS, || {
            if !self.persist_lock.is_locked() {
                if let Some(taken) = self.persist_lock.try_lock() {
                    return Some(Some(taken));
                }
            }
            let decided = self.durable_seq() >= seq || self.failed_now.load(Ordering::Acquire);
            decided.then_some(None)
        });
        waited.unwrap_or_else(|| Some(self.persist_lock.lock()))
    }

    /// Out of pages or inode numbers: make the queue durable, so that what
    /// its operations released is free. Whether there was anything queued
    /// (worth trying the allocation again).
    pub fn reclaim(&self) -> bool {
        let seq = {
            let st = self.state.lock();
            if st.durable_seq == st.next_seq - 1 {
                return false;
            }
            st.next_seq - 1
        };
        self.persist_upto(seq, true).is_ok()
    }

    /// Run `f` while no batch can run (`persist_lock` held), so that the
    /// persister changes nothing in the pool meanwhile.
    pub fn with_batches_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let _held = self.persist_lock.lock();
        f()
    }

    /// Make every queued operation durable.
    pub fn persist_all(&self) -> FsResult<()> {
        let seq = self.last_seq();
        self.persist_upto(seq, true)
    }

    /// Set a batch's words atomically and durably, then free what its
    /// operations released. The caller holds `persist_lock`.
    fn persist_batch(&self, batch: Batch, taken: &VecDeque<Queued>, inline: bool) {
        assert!(!self.fail_next.swap(false, Ordering::Relaxed), "injected persister failure");
        let Batch { ops: batch, mut words } = batch;
        words.retain(|&(off, value)| self.media.read_u64(off) != value);
        // What the operations staged, written back first: the journal's
        // first fence (or the fence below) orders it before any word.
        let mut flushed = false;
        for op in &batch {
            self.media.flush_ranges(&op.flushes);
            flushed |= !op.flushes.is_empty();
        }
        match words.len() {
            0 => {
                if flushed {
                    self.media.fence();
                }
            }
            // One word needs no journal: the strict commit's 8-byte store.
            1 => {
                let (off, value) = words[0];
                if flushed {
                    self.media.fence();
                }
                self.media.store_commit_word(off, value);
                self.media.fence();
            }
            _ => self.journals.run(&self.media, &Transaction::from_distinct(words)),
        }
        // Durable: free what the batch released, then say so.
        let first = batch[0].seq;
        let last = batch.last().expect("a batch has an operation").seq;
        let now = Instant::now();
        let oldest_ns = now.duration_since(batch[0].queued_at).as_nanos() as u64;
        let count = batch.len() as u64;
        // Inline up to a few dozen: the batches of sync points are a few
        // operations each, and a heap vector cost them a `malloc` and a
        // `free` apiece.
        let mut freed_inodes: SmallVec<[InodeNo; 8]> = SmallVec::new();
        let mut freed_pages: SmallVec<[PageNo; 32]> = SmallVec::new();
        for op in batch {
            freed_pages.extend(op.free_pages.iter().copied());
            freed_inodes.extend(op.free_inodes);
        }
        // A batch frees pages by the thousand: as runs, sorted, they cost
        // the allocator one insertion per run instead of one per page.
        self.pages.free_many(&mut freed_pages);
        // A few at a time: a caller marking an inode dying must not find
        // the lock held long enough to park.
        for chunk in freed_inodes.chunks(16) {
            let mut dying = self.dying.lock();
            for ino in chunk {
                dying.remove(ino);
            }
        }
        for ino in freed_inodes {
            self.inodes_free.free(ino);
        }
        {
            let mut st = self.state.lock();
            assert!(last > st.durable_seq, "batches made durable out of order");
            assert_eq!(first, st.durable_seq + 1, "a batch skips the operations before it");
            st.durable_seq = last;
            // The oldest operation still pending is the first one taken
            // after this batch, or else the queue's first.
            st.oldest_at = match taken.front() {
                Some(op) => Some(op.queued_at),
                None => st.ops.front().map(|op| op.queued_at),
            };
            self.durable_seq_now.store(last, Ordering::Release);
        }
        self.ops_persisted.fetch_add(count, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        if inline {
            self.batches_inline.fetch_add(1, Ordering::Relaxed);
        }
        self.lag_ns_max_seen.fetch_max(oldest_ns, Ordering::Relaxed);
    }

    /// The persister thread: wait until the oldest operation has waited
    /// half the lag bound or half of `ops_max` are queued, then persist
    /// everything queued.
    fn thread_main(self: Arc<Self>) {
        let half_lag = Duration::from_nanos((self.opts.lag_ns_max / 2).max(1));
        let mut idle_waits = 0u32;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
            let target = {
                let mut st = self.state.lock();
                loop {
                    let pending = st.next_seq - 1 - st.durable_seq;
                    if st.stop != Stop::Running && (st.stop == Stop::Abandon || pending == 0) {
                        return;
                    }
                    if st.failed {
                        return;
                    }
                    let Some(oldest_at) = st.oldest_at else {
                        // Idle: poll at the lag bound's pace for a while (an
                        // operation queued meanwhile is seen within half the
                        // bound, as if it had woken this thread), then sleep
                        // until the next operation wakes it.
                        if idle_waits < PERSISTER_IDLE_WAITS {
                            idle_waits += 1;
                            let _ = self.work.wait_for(&mut st, half_lag);
                        } else {
                            st.persister_asleep = true;
                            self.work.wait(&mut st);
                            st.persister_asleep = false;
                            idle_waits = 0;
                        }
                        continue;
                    };
                    idle_waits = 0;
                    let waited = oldest_at.elapsed();
                    if waited >= half_lag || pending >= self.opts.ops_max.div_ceil(2) || st.stop != Stop::Running {
                        break st.next_seq - 1;
                    }
                    let _ = self.work.wait_for(&mut st, half_lag - waited);
                }
            };
            let _ = self.persist_upto(target, false);
        }));
        if run.is_err() {
            eprintln!("ferrite: the persister failed; the file system is read-only from now on");
            self.fail();
        }
    }

    /// Stop the persister thread and wait for it: after a drain (unmount)
    /// or abandoning the queue (drop without unmount).
    pub fn stop(&self, drain: bool) {
        {
            let mut st = self.state.lock();
            st.stop = if drain { Stop::Drain } else { Stop::Abandon };
            self.work.notify_all();
        }
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }

    /// Make the next batch fail (a panic before it sets any word), to test
    /// that the mount then refuses changes and sync points.
    pub fn inject_failure(&self) {
        self.fail_next.store(true, Ordering::Relaxed);
    }

    pub fn reset_lag(&self) {
        self.lag_ns_max_seen.store(0, Ordering::Relaxed);
    }

    pub fn stats(&self) -> BufferedStats {
        let (pending_now, persister_asleep) = {
            let st = self.state.lock();
            (st.next_seq - 1 - st.durable_seq, st.persister_asleep)
        };
        BufferedStats {
            ops_queued: self.ops_queued.load(Ordering::Relaxed),
            ops_persisted: self.ops_persisted.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            batches_inline: self.batches_inline.load(Ordering::Relaxed),
            pending_now,
            lag_ns_max_seen: self.lag_ns_max_seen.load(Ordering::Relaxed),
            backpressure_waits: self.backpressure_waits.load(Ordering::Relaxed),
            persister_asleep,
        }
    }
}

/// Marks the mount failed if dropped, which happens only when a batch
/// unwinds (it is forgotten once the batch is durable).
struct FailOnUnwind<'a>(&'a Buffered);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        eprintln!("ferrite: persisting a batch failed; the file system is read-only from now on");
        self.0.fail();
    }
}

/// Operations persisted together, and the words they set, merged: each
/// word once, with the last value an operation gave it, in the order the
/// words were first set (the journal records each word's old value once).
struct Batch {
    ops: Vec<Queued>,
    words: Vec<(PoolOffset, u64)>,
}

/// Merged words a batch holds before it indexes them in a map: below this
/// a scan of the words is cheaper than a map's allocation, and the batches
/// a sync point cuts are mostly this small (`varmail`: two operations and
/// three words per batch, where the map sized for a whole batch and its
/// allocation were a quarter of cutting it).
const BATCH_WORDS_SCANNED_MAX: usize = 16;

/// A batch's words, merged as they are added: the last value of each word
/// wins, and each word appears once, in the order it was first set.
struct MergedWords {
    words: Vec<(PoolOffset, u64)>,
    /// Word offset -> its index in `words`, once there are more than
    /// `BATCH_WORDS_SCANNED_MAX` of them; sized then for a whole batch, so
    /// that it never rehashes (grown from empty, it rehashed its way up to a
    /// batch's 250 words every time).
    index: Option<Map<u64, usize>>,
    words_max: usize,
}

impl MergedWords {
    fn new(words_max: usize) -> MergedWords {
        MergedWords { words: Vec::with_capacity(BATCH_WORDS_SCANNED_MAX), index: None, words_max }
    }

    fn contains(&self, off: PoolOffset) -> bool {
        match &self.index {
            Some(index) => index.contains_key(&off.0),
            None => self.words.iter().any(|w| w.0 == off),
        }
    }

    fn set(&mut self, off: PoolOffset, value: u64) {
        if self.index.is_none() {
            if let Some(w) = self.words.iter_mut().find(|w| w.0 == off) {
                w.1 = value;
                return;
            }
            if self.words.len() < BATCH_WORDS_SCANNED_MAX {
                self.words.push((off, value));
                return;
            }
            // A test's smaller limit still lets one operation's many words in.
            let capacity = (self.words_max + 4).max(2 * BATCH_WORDS_SCANNED_MAX);
            let mut index: Map<u64, usize> = Map::with_capacity_and_hasher(capacity, Default::default());
            index.extend(self.words.iter().enumerate().map(|(i, w)| (w.0 .0, i)));
            self.words.reserve(capacity.saturating_sub(self.words.len()));
            self.index = Some(index);
        }
        let index = self.index.as_mut().expect("indexed above");
        // One hash per word: a new word's probe is also its insert.
        match index.entry(off.0) {
            std::collections::hash_map::Entry::Occupied(e) => self.words[*e.get()].1 = value,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.words.len());
                self.words.push((off, value));
            }
        }
    }
}

/// The longest prefix of the queue whose merged words fit one batch of at
/// most `words_max` words (at least one operation: one never has more
/// words than a transaction holds), merged as it is cut.
fn take_batch(ops: &mut VecDeque<Queued>, words_max: usize) -> Batch {
    let mut merged = MergedWords::new(words_max);
    let mut n = 0;
    for op in ops.iter() {
        let new = op.words.iter().filter(|w| !merged.contains(w.0)).count();
        if n > 0 && merged.words.len() + new > words_max {
            break;
        }
        // One operation always fits a transaction, and goes alone when it
        // sets more than a (test's) smaller limit allows.
        assert!(new <= JOURNAL_RECORDS_MAX, "operation {} sets {new} words", op.seq);
        for &(off, value) in &op.words {
            merged.set(off, value);
        }
        n += 1;
    }
    Batch { ops: ops.drain(..n).collect(), words: merged.words }
}

#[cfg(test)]
mod tests {
    //! A persist that stops part-way through what it took from the queue
    //! (its target reached with operations still taken) leaves them to the
    //! next persist, which must make them durable before anything queued
    //! since: after a crash the creates are a prefix of the order they
    //! returned in. Callers reach that state only by racing the persister
    //! thread or a sync point of another thread; here it is made directly.
    //! Also: the limits of a batch's words are checked at mount.
    use crate::{BufferedOptions, FormatOptions, MountOptions, OpenFlags, PathFs, Session};
    use ferrite_pmem::Pmem;

    /// A freshly formatted pool of `pages` pages, two lanes, unmounted.
    fn formatted_image(pages: u64) -> Vec<u8> {
        let fs = Session::format(Pmem::heap(pages * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
        let pmem = fs.pmem().clone();
        fs.unmount().unwrap();
        pmem.image()
    }

    /// A buffered mount of a fresh 64 MiB pool (4,096 inode slots) on which
    /// nothing persists unless the test asks: no persister thread, no lag
    /// bound, no back-pressure.
    fn quiet_buffered_mount() -> Session {
        let image = formatted_image(16_384);
        let opts =
            BufferedOptions { lag_ns_max: u64::MAX, ops_max: 1 << 20, persister_thread: false, ..Default::default() };
        Session::mount(Pmem::from_image(&image), &MountOptions { buffered: Some(opts), ..Default::default() }).unwrap()
    }

    fn create_file(fs: &Session, i: u64) {
        let fd = fs.open(format!("/f{i:04}").as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644).unwrap();
        fs.close(fd).unwrap();
    }

    /// `take_batch` against a plain reference: every batch it cuts from a
    /// queue of operations setting random words (few distinct offsets, so
    /// that words repeat, and batches past `BATCH_WORDS_SCANNED_MAX` words,
    /// where the scan gives way to a map) is the longest prefix whose
    /// distinct words fit, with each word once, in the order first set,
    /// holding its last value; and the batches together take the queue
    /// in order.
    #[test]
    fn batches_merge_their_words_as_a_plain_scan_does() {
        use super::{take_batch, Queued, BATCH_WORDS_SCANNED_MAX};
        use ferrite_pmem::PoolOffset;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let mut scanned_past = 0;
        for round in 0..400 {
            let words_max = [4, 8, 20, 64, 250][round % 5];
            let offsets = [6, 40, 400][round % 3];
            let mut queue = std::collections::VecDeque::new();
            for seq in 1..=1 + next(120) {
                // An operation sets each of its words once.
                let mut words: smallvec::SmallVec<[(PoolOffset, u64); 4]> = smallvec::SmallVec::new();
                for _ in 0..1 + next(6) {
                    let off = PoolOffset(8 * next(offsets));
                    if !words.iter().any(|w| w.0 == off) {
                        words.push((off, next(1 << 40)));
                    }
                }
                queue.push_back(Queued {
                    seq,
                    words,
                    flushes: Default::default(),
                    free_pages: Default::default(),
                    free_inodes: Default::default(),
                    queued_at: std::time::Instant::now(),
                });
            }
            let mut expect_seq = 1;
            while !queue.is_empty() {
                // The reference: merge operation by operation with a scan.
                let mut merged: Vec<(PoolOffset, u64)> = Vec::new();
                let mut n = 0;
                for op in &queue {
                    let mut next_merged = merged.clone();
                    for &(off, value) in &op.words {
                        match next_merged.iter_mut().find(|w| w.0 == off) {
                            Some(w) => w.1 = value,
                            None => next_merged.push((off, value)),
                        }
                    }
                    if n > 0 && next_merged.len() > words_max {
                        break;
                    }
                    merged = next_merged;
                    n += 1;
                }
                let batch = take_batch(&mut queue, words_max);
                let seqs: Vec<u64> = batch.ops.iter().map(|op| op.seq).collect();
                let want: Vec<u64> = (expect_seq..expect_seq + n as u64).collect();
                assert_eq!(seqs, want, "round {round}: the operations of the batch");
                assert_eq!(batch.words, merged, "round {round}: the merged words of operations {want:?}");
                scanned_past += usize::from(batch.words.len() > BATCH_WORDS_SCANNED_MAX);
                expect_seq += n as u64;
            }
        }
        assert!(scanned_past > 50, "only {scanned_past} batches went past the scan");
    }

    #[test]
    fn batch_words_outside_their_limits_are_refused() {
        let image = formatted_image(4096);
        let mount = |batch_words_max: usize| {
            let opts = BufferedOptions { persister_thread: false, batch_words_max, ..Default::default() };
            Session::mount(Pmem::from_image(&image), &MountOptions { buffered: Some(opts), ..Default::default() })
        };
        for words in [0, super::BATCH_WORDS_MIN - 1, crate::format::JOURNAL_RECORDS_MAX + 1] {
            match mount(words) {
                Err(crate::PoolError::Invalid(m)) => assert!(m.contains("batch_words_max"), "{m}"),
                Err(e) => panic!("batch_words_max {words}: {e}"),
                Ok(_) => panic!("batch_words_max {words} accepted"),
            }
        }
        for words in [super::BATCH_WORDS_MIN, crate::format::JOURNAL_RECORDS_MAX] {
            mount(words).unwrap_or_else(|e| panic!("batch_words_max {words}: {e}")).unmount().unwrap();
        }
    }

    #[test]
    fn a_partial_persist_leaves_the_rest_first_in_line() {
        let fs = quiet_buffered_mount();
        let create = |i: u64| create_file(&fs, i);
        // Each create sets a word of its own (the new inode's state), so 600
        // of them take three journal transactions.
        (0..600).for_each(create);
        let b = fs.engine().buffered.clone().expect("a buffered mount");
        b.persist_upto(100, true).unwrap();
        assert!(b.durable_seq() >= 100 && b.durable_seq() < 600, "durable up to {}", b.durable_seq());
        (600..610).for_each(create);
        b.persist_all().unwrap();
        assert_eq!(b.durable_seq(), b.last_seq());
        let image = fs.pmem().image();
        drop(fs);
        let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
        let missing: Vec<u64> = (0..610).filter(|i| fs.stat(format!("/f{i:04}").as_bytes()).is_err()).collect();
        assert!(missing.is_empty(), "creates lost although everything was persisted: {missing:?}");
    }

    /// A sync point that finds another thread persisting waits for it
    /// (`persist_lock_or_durable`): it must return Ok only once its
    /// operations are durable, and EIO when that thread's persist failed.
    /// Whether the waiter learns so while it spins or after it has blocked
    /// on the lock depends on the threads' timing; both outcomes are
    /// decided by the same check under the queue's lock.
    #[test]
    fn a_sync_point_waiting_on_another_persist_gets_its_outcome() {
        let fs = quiet_buffered_mount();
        let create = |i: u64| create_file(&fs, i);
        (0..20).for_each(create);
        let b = fs.engine().buffered.clone().expect("a buffered mount");
        let seq = b.last_seq();
        std::thread::scope(|scope| {
            // This thread persists as `persist_upto` does, holding the lock
            // while the waiter starts.
            let mut taken = b.persist_lock.lock();
            let waiter = scope.spawn(|| b.persist_upto(seq, true));
            std::mem::swap(&mut *taken, &mut b.state.lock().ops);
            while !taken.is_empty() {
                let batch = super::take_batch(&mut taken, b.opts.batch_words_max);
                b.persist_batch(batch, &taken, true);
            }
            assert!(b.durable_seq() >= seq);
            drop(taken);
            assert_eq!(waiter.join().unwrap(), Ok(()));
        });
        (20..40).for_each(create);
        let seq = b.last_seq();
        std::thread::scope(|scope| {
            let taken = b.persist_lock.lock();
            let waiter = scope.spawn(|| b.persist_upto(seq, true));
            b.fail();
            drop(taken);
            assert_eq!(waiter.join().unwrap(), Err(crate::types::Errno::EIO));
        });
        assert!(b.durable_seq() < seq, "a failed mount persisted anyway");
    }
}
