//! The one commit path. Every change the engine makes to the file system
//! goes through one of two functions here:
//!
//! - [`Ferrite::commit`]: a change to one inode (write, truncate,
//!   fallocate, setattr, an extended attribute);
//! - [`Ferrite::commit_journaled`]: a change to several inodes (create,
//!   link, unlink, rmdir, rename), whose log tails and state words move
//!   together in one undo-journal transaction.
//!
//! Both take the new log entries and the fresh pool pages those entries
//! point at (data already copied into them with non-temporal stores), and
//! do the same five steps: stage the entries after the tail (abandoning the
//! fresh pages, fenced, if staging fails), make the commit durable, apply
//! the entries to the DRAM state with the same `apply` that replay uses,
//! free what the commit released (only once it is durable), and collect
//! garbage in the logs that grew. Strict mode commits at once; the coming
//! consistency modes branch at the marked commit point and nowhere else
//! (see docs/DESIGN.md, "The commit path").

use crate::alloc::Runs;
use crate::format::{self, Entry, PageNo, INODE_STATE_OFFSET, INODE_TAIL_OFFSET};
use crate::fs::Ferrite;
use crate::inode::{Attrs, Inode, InodeData, Staged};
use crate::journal::Transaction;
use crate::log::{write_log_entries, Entries, EVERY_DEATH};
use crate::types::{Errno, FileMode, FileType, FsResult, InodeNo};
use crate::PageList;
use parking_lot::RwLockWriteGuard;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Pool pages a change has just filled (file data, zeroed fallocate pages,
/// a symlink's target) that only the change's own entries reference. If the
/// change does not commit they go back to the allocator, fenced first.
#[derive(Default)]
pub(crate) struct Fresh(Runs);

impl Fresh {
    pub fn none() -> Fresh {
        Fresh(Runs::new())
    }

    pub fn runs(runs: Runs) -> Fresh {
        Fresh(runs)
    }

    pub fn push(&mut self, page: PageNo) {
        self.0.push((page, 1));
    }

    /// Every page, one at a time.
    pub fn pages(&self) -> impl Iterator<Item = PageNo> + '_ {
        self.0.iter().flat_map(|&(s, n)| (0..n as u64).map(move |i| PageNo(s.0 + i)))
    }
}

/// What a single-inode change is, for the consistency mode: in an
/// fsync-atomic file a data change (write, truncate, fallocate, punch)
/// stays pending until the next commit point; every other change is a
/// commit point itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Change {
    Data,
    Meta,
}

/// The inodes one change touches, inline: the two of a create or unlink,
/// up to four for a rename; no allocation per namespace operation.
pub(crate) type Parts<'a> = SmallVec<[Part<'a>; 4]>;

/// One inode's part of a multi-inode change.
pub(crate) struct Part<'a> {
    pub inode: &'a Arc<Inode>,
    pub entries: Entries,
    /// Free the inode in the same transaction (state word to zero).
    pub free: bool,
}

/// An inode that a multi-inode change brings to life: its number (already
/// taken from the inode allocator; given back if the change fails), what it
/// is, its attributes, and its first entries after the Attr snapshot.
/// Most inodes one visit of the cached logs for a change (or a patch
/// buffer) that found no page rebuilds from crash recovery's list of logs
/// holding dead pages (`Ferrite::rebuild_logs_recovery_found`): about
/// 14 ms of rebuilds and collection on the AMD Zen 3 VM (stop 47, about
/// 14 µs an inode), so that the first refusal after a crash of a pool
/// with 10,000 such files does not take 140 ms; the rest wait for the
/// next refusal, or the clean unmount, which rebuilds every one.
pub const RECOVERY_REBUILDS_PER_VISIT_MAX: usize = 1024;

pub(crate) struct NewInode {
    pub ino: InodeNo,
    pub kind: FileType,
    pub rdev: u64,
    pub attrs: Attrs,
    pub entries: Entries,
}

impl Ferrite {
    /// Commit a change to one inode, whose write lock the caller holds.
    /// On error (ENOSPC while extending the log) nothing changed, and the
    /// fresh pages are free again. A data change to an fsync-atomic file is
    /// staged and applied but not committed (`epoch.rs`); any other change
    /// commits the file's pending epoch with it.
    pub(crate) fn commit(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        entries: Entries,
        fresh: Fresh,
        change: Change,
    ) -> FsResult<()> {
        // A buffered mount applies no per-file mode: every file is buffered.
        let pending = change == Change::Data
            && inode.kind == FileType::Regular
            && d.attrs.mode == FileMode::FsyncAtomic
            && self.buffered.is_none();
        if let Some(b) = &self.buffered {
            if let Err(e) = b.check_writable() {
                self.abandon(fresh, Vec::new());
                return Err(e);
            }
        }
        // A buffered change leaves the flushes of its staging to the
        // persister (its data, streamed before this call, it fences below).
        let deferral = self.buffered.as_ref().map(|_| self.media.defer_flushes());
        if !pending {
            self.seal_pending(inode, d);
        }
        let staged = match self.stage_collecting(inode, d, entries, !pending) {
            Ok(s) => s,
            Err((e, _)) => {
                self.abandon(fresh, Vec::new());
                return Err(e);
            }
        };
        if pending {
            self.apply_pending(inode, d, staged, fresh);
            return Ok(());
        }
        let slot = self.media.slot_offset(inode.ino);
        if let Some(b) = &self.buffered {
            // Buffered commit point: this thread's streaming stores (data)
            // complete, the change applied to DRAM, the tail word queued
            // with the ranges whose flushes the persister owes.
            let new_tail = staged.new_tail.0;
            let extended = !staged.new_pages.is_empty();
            let flushes = deferral.expect("a buffered change defers its flushes").finish();
            self.media.fence_if_unfenced();
            let mut released = PageList::new();
            d.log.live.deaths_pending();
            d.commit_staged(inode.kind, staged, &mut released);
            let words = SmallVec::from_slice(&[(slot + INODE_TAIL_OFFSET, new_tail)]);
            let seq = b.push(words, flushes, released, SmallVec::new());
            inode.last_seq.store(seq, Ordering::Relaxed);
            self.collect_buffered(b, inode, d, extended, seq);
            return Ok(());
        }
        // The commit point. Strict mode: fence (entries and data durable),
        // store the new tail (a streaming store), fence (NOVA's two
        // ordering points).
        let slot = self.media.slot_offset(inode.ino);
        self.media.fence();
        self.media.store_commit_word(slot + INODE_TAIL_OFFSET, staged.new_tail.0);
        // The DRAM update overlaps the write-back of the tail; it is private
        // to this locked inode. Pages it releases are freed only after the
        // fence: until the new tail is durable, a crash brings back the old
        // log, which still points at them.
        let extended = !staged.new_pages.is_empty();
        let mut released = PageList::new();
        d.commit_staged(inode.kind, staged, &mut released);
        self.media.fence();
        let epoch_ended = self.finish_epoch(inode, d);
        self.after_commit(inode, d, extended || epoch_ended, released);
        Ok(())
    }

    /// Commit a change to several inodes in one journal transaction: every
    /// part's entries are staged in its log, then the transaction sets every
    /// tail, the state word of each inode freed, and the state word of the
    /// new inode (which becomes live). `guards[i]` is `parts[i]`'s locked
    /// data. All or nothing: on error nothing changed, the fresh pages are
    /// free and the new inode's number is given back. Returns the new inode.
    pub(crate) fn commit_journaled(
        &self,
        parts: Parts<'_>,
        guards: &mut [&mut InodeData],
        new: Option<NewInode>,
        fresh: Fresh,
    ) -> FsResult<Option<Arc<Inode>>> {
        assert_eq!(parts.len(), guards.len(), "one lock guard per part");
        // What fsck checks, asserted where it is produced: an inode is freed
        // only when nothing names it and nobody has it open, and a new name
        // carries the type of the inode it names.
        for (i, part) in parts.iter().enumerate() {
            assert!(
                !part.free || (guards[i].open_count == 0 && part.entries.is_empty()),
                "inode {} freed while open or while appended to",
                part.inode.ino.0
            );
            for e in &part.entries {
                if let (Entry::DentryAdd(d), Some(n)) = (e, &new) {
                    assert!(d.ino != n.ino || d.kind == n.kind, "name of new inode {} with another type", n.ino.0);
                }
            }
        }
        if let Some(b) = &self.buffered {
            if let Err(e) = b.check_writable() {
                if let Some(n) = new {
                    self.inodes_free.free(n.ino);
                }
                self.abandon(fresh, Vec::new());
                return Err(e);
            }
        }
        // The words the transaction will journal: their old values are read
        // for its records after the staging, and their lines were written
        // back (and, on AMD machines, evicted) by the last change to them,
        // so each read would wait for memory (about 0.1-0.2 µs on these
        // VMs). Asked for now, they arrive while the entries are staged. (A
        // new inode's state word is read at once, below.)
        if self.buffered.is_none() {
            for part in parts.iter() {
                let slot = self.media.slot_offset(part.inode.ino);
                self.media.prefetch(slot + if part.free { INODE_STATE_OFFSET } else { INODE_TAIL_OFFSET });
            }
        }
        // A buffered change leaves the flushes of its staging to the
        // persister.
        let deferral = self.buffered.as_ref().map(|_| self.media.defer_flushes());
        // A strict change takes its journal lane before it stages anything:
        // a lock taken after the staging's flushes would wait for their
        // write-back (a locked instruction does, on these machines), and
        // the transaction's first fence would wait again for its records.
        let lane = self.buffered.is_none().then(|| self.journals.lane());
        // A new inode's state word, read before its slot's other words are
        // written and flushed (which evicts the line again on AMD): the
        // transaction's record takes this value instead of reading it back.
        // Nobody else writes the slot of a number this operation was given.
        let new_state_old = match (&lane, &new) {
            (Some(_), Some(n)) => Some(self.media.read_u64(self.media.slot_offset(n.ino) + INODE_STATE_OFFSET)),
            _ => None,
        };
        // The new inode first: its slot (not live) and its first log page.
        let new_inode = match new {
            None => None,
            Some(mut n) => {
                let ino = n.ino;
                // Its first log page (a symlink's, say) may come from dead
                // log pages, as the parts' entries may: collected for the
                // first part kept alive (the parent directory), whose lock
                // is held.
                let collect_for = parts.iter().position(|p| !p.free);
                let staged = match self.stage_new_inode(&mut n) {
                    Err(Errno::ENOSPC)
                        if collect_for.is_some_and(|i| self.collect_for_space(parts[i].inode, guards[i])) =>
                    {
                        self.stage_new_inode(&mut n)
                    }
                    other => other,
                };
                match staged {
                    Ok(v) => Some(v),
                    Err(e) => {
                        self.inodes_free.free(ino);
                        self.abandon(fresh, Vec::new());
                        return Err(e);
                    }
                }
            }
        };
        // A namespace operation is a commit point of every fsync-atomic
        // file it touches: their pending epochs commit in its transaction.
        for (i, part) in parts.iter().enumerate() {
            if !part.free {
                self.seal_pending(part.inode, guards[i]);
            }
        }
        let mut parts = parts;
        let mut staged: SmallVec<[Option<Staged>; 4]> = SmallVec::with_capacity(parts.len());
        for (i, part) in parts.iter_mut().enumerate() {
            if part.entries.is_empty() {
                staged.push(None);
                continue;
            }
            let entries = std::mem::take(&mut part.entries);
            match self.stage_collecting(part.inode, guards[i], entries, !part.free) {
                Ok(s) => staged.push(Some(s)),
                Err((e, _)) => {
                    let mut abandoned: Vec<Staged> = staged.into_iter().flatten().collect();
                    if let Some((new, s)) = new_inode {
                        self.inodes_free.free(new.ino);
                        abandoned.push(s);
                    }
                    self.abandon(fresh, abandoned);
                    return Err(e);
                }
            }
        }
        if let Some(b) = &self.buffered {
            let flushes = deferral.expect("a buffered change defers its flushes").finish();
            return Ok(self.commit_journaled_buffered(b, flushes, &parts, guards, &mut staged, new_inode));
        }
        // The commit point: one journal transaction.
        let mut tx = Transaction::default();
        for (i, part) in parts.iter().enumerate() {
            let slot = self.media.slot_offset(part.inode.ino);
            if part.free {
                tx.set(slot + INODE_STATE_OFFSET, 0);
            } else if let Some(s) = &staged[i] {
                tx.set(slot + INODE_TAIL_OFFSET, s.new_tail.0);
            } else if guards[i].pending.is_some() {
                tx.set(slot + INODE_TAIL_OFFSET, guards[i].log.tail.0);
            }
        }
        if let Some((new, _)) = &new_inode {
            let state = self.media.slot_offset(new.ino) + INODE_STATE_OFFSET;
            let old = new_state_old.expect("a new inode's state word was read before its slot was written");
            tx.set_with_old(state, format::inode_live_word(new.generation), old);
        }
        let close = self.journals.run_in_lane(lane.expect("a strict change has its lane"), &self.media, &tx);
        // The change is complete (its new values are durable) and its close
        // is on its way to the media. Bring DRAM forward meanwhile: the
        // inodes' locks are held, so nobody sees it before the fence below,
        // and this work takes no lock (a locked instruction would wait for
        // the close's write-back like the fence does).
        // Per part: (its log grew, the pages its entries released).
        type Committed = Option<(bool, PageList)>;
        let mut committed: SmallVec<[Committed; 4]> = SmallVec::new();
        for (i, part) in parts.iter().enumerate() {
            committed.push(match staged[i].take() {
                Some(s) if !part.free => {
                    let extended = !s.new_pages.is_empty();
                    let mut released = PageList::new();
                    guards[i].commit_staged(part.inode.kind, s, &mut released);
                    Some((extended, released))
                }
                _ => None,
            });
        }
        let new_inode = new_inode.map(|(mut new, s)| {
            // An empty file or directory has no entries to apply, and
            // `Arc::get_mut` is a locked instruction, which would wait for
            // the close's write-back here.
            if s.entries.is_empty() && s.new_pages.is_empty() {
                return new;
            }
            let (ino, kind) = (new.ino, new.kind);
            let mut released = PageList::new();
            let only = Arc::get_mut(&mut new).expect("a new inode has one owner until it is cached");
            only.data.get_mut().commit_staged(kind, s, &mut released);
            assert!(released.is_empty(), "a new inode {} released pages", ino.0);
            new
        });
        close.fence(&self.media);
        // Durable: free what was released, collect.
        for (i, part) in parts.iter().enumerate() {
            if part.free {
                self.release_inode(part.inode, guards[i]);
            } else if let Some((extended, released)) = committed[i].take() {
                let epoch_ended = self.finish_epoch(part.inode, guards[i]);
                self.after_commit(part.inode, guards[i], extended || epoch_ended, released);
            } else if self.finish_epoch(part.inode, guards[i]) {
                self.after_commit(part.inode, guards[i], true, PageList::new());
            }
        }
        Ok(new_inode.inspect(|new| self.cache_insert(new.clone())))
    }

    /// The buffered commit point of a multi-inode change, whose entries are
    /// staged with their flushes deferred (`flushes`): fence this thread's
    /// streaming stores if it made any, apply every part to DRAM (an inode
    /// freed leaves the cache at once, its number and pages wait for the
    /// batch), and queue the words the journal transaction would set.
    fn commit_journaled_buffered(
        &self,
        b: &crate::buffered::Buffered,
        flushes: crate::media::FlushRanges,
        parts: &[Part<'_>],
        guards: &mut [&mut InodeData],
        staged: &mut SmallVec<[Option<Staged>; 4]>,
        new_inode: Option<(Arc<Inode>, Staged)>,
    ) -> Option<Arc<Inode>> {
        let mut words: SmallVec<[(format::PoolOffset, u64); 4]> = SmallVec::new();
        for (i, part) in parts.iter().enumerate() {
            let slot = self.media.slot_offset(part.inode.ino);
            assert!(guards[i].pending.is_none(), "inode {}: an epoch in a buffered mount", part.inode.ino.0);
            if part.free {
                words.push((slot + INODE_STATE_OFFSET, 0));
            } else if let Some(s) = &staged[i] {
                words.push((slot + INODE_TAIL_OFFSET, s.new_tail.0));
            }
        }
        if let Some((new, _)) = &new_inode {
            words.push((self.media.slot_offset(new.ino) + INODE_STATE_OFFSET, format::inode_live_word(new.generation)));
        }
        self.media.fence_if_unfenced();
        let mut released = PageList::new();
        let mut freed: SmallVec<[InodeNo; 1]> = SmallVec::new();
        let mut extended: SmallVec<[bool; 4]> = smallvec::smallvec![false; parts.len()];
        for (i, part) in parts.iter().enumerate() {
            if part.free {
                b.mark_dying(part.inode.ino);
                released.extend(self.release_inode_dram(part.inode, guards[i]));
                freed.push(part.inode.ino);
            } else if let Some(s) = staged[i].take() {
                extended[i] = !s.new_pages.is_empty();
                guards[i].log.live.deaths_pending();
                guards[i].commit_staged(part.inode.kind, s, &mut released);
            }
        }
        let new = new_inode.map(|(new, s)| {
            let mut none = PageList::new();
            new.lock_write().commit_staged(new.kind, s, &mut none);
            assert!(none.is_empty(), "a new inode {} released pages", new.ino.0);
            self.cache_insert(new.clone());
            new
        });
        let seq = b.push(words, flushes, released, freed);
        for part in parts {
            part.inode.last_seq.store(seq, Ordering::Relaxed);
        }
        if let Some(n) = &new {
            n.last_seq.store(seq, Ordering::Relaxed);
        }
        for (i, part) in parts.iter().enumerate() {
            if !part.free {
                self.collect_buffered(b, part.inode, guards[i], extended[i], seq);
            }
        }
        new
    }

    /// Log GC after a buffered change to `inode` (operation `seq`, the
    /// latest on this inode). GC judges liveness in DRAM, which runs ahead
    /// of the durable log, so fast GC collects only the dead pages whose
    /// death is durable (killed by operations up to the durable sequence
    /// number; `LogPage::died_at`): the others wait for a later change,
    /// and the calling thread never persists the queue for them.
    /// Compaction rewrites the whole log and so needs every operation on
    /// the inode durable: a log due for it that has reached
    /// `BUFFERED_COMPACT_PAGES` persists the queue up to `seq` first, on this
    /// thread; a smaller one waits.
    fn collect_buffered(
        &self,
        b: &crate::buffered::Buffered,
        inode: &Inode,
        d: &mut InodeData,
        extended: bool,
        seq: u64,
    ) {
        d.log.live.settle_deaths(seq);
        if extended {
            self.collect_buffered_extended(b, inode, d, seq);
        }
        self.note_dead_log_pages(d);
    }

    /// `collect_buffered` of a log that grew.
    fn collect_buffered_extended(&self, b: &crate::buffered::Buffered, inode: &Inode, d: &mut InodeData, seq: u64) {
        let due = d.compaction_due();
        let persist_first =
            due && !b.is_durable(seq) && d.log.live.page_count() >= crate::buffered::BUFFERED_COMPACT_PAGES;
        if persist_first && b.persist_upto(seq, true).is_err() {
            // Persisting failed: the file system is read-only; no GC.
            return;
        }
        let durable_seq = b.durable_seq();
        if d.dead_log_pages() > 0 {
            let n = d.collect_garbage(&self.media, &self.pages, self.media.slot_offset(inode.ino), durable_seq);
            self.gc_pages.fetch_add(n as u64, Ordering::Relaxed);
        }
        if due && durable_seq >= seq {
            self.compact_log(inode, d);
        }
    }

    /// A change to an inode is complete (the caller still holds its lock):
    /// if its log keeps a dead page that GC may take, the next change
    /// refused for space must visit other logs (`dead_pages_unvisited`).
    /// Every page dies in a change (its entries applied in DRAM, or pins
    /// released by GC), and every change ends in `after_commit` or
    /// `collect_buffered`, or leaves an fsync-atomic epoch pending, whose
    /// end is a commit; and an inode rebuilt after mount notes the pages
    /// its log kept (`Ferrite::inode`).
    pub(crate) fn note_dead_log_pages(&self, d: &InodeData) {
        if d.holds_collectable_dead_pages() && !self.dead_pages_unvisited.load(Ordering::Acquire) {
            self.dead_pages_unvisited.store(true, Ordering::Release);
        }
    }

    /// A change to `inode` found no page for its log entries: collect dead
    /// log pages now, so that its entries may fit after all. Fast GC runs
    /// after a change that extended a log; pages that die later wait for
    /// that log's next extension, and on a buffered mount those whose death
    /// is not yet durable wait longer (`collect_buffered`), so a full pool
    /// could refuse a change while logs held pages nothing needs (a buffered
    /// file's chmod after a few hundred attribute changes did, with a dozen
    /// dead pages in its log). The inode's own log first; when that gives
    /// nothing, every other cached inode's (`collect_other_logs`). A
    /// buffered mount first makes its queue durable (the allocator's reclaim
    /// has most often done so already), with this thread's deferral set
    /// aside: the relinks of fast GC must be durable before its pages are
    /// reused, and the retried staging reuses them at once. Returns whether
    /// any page was collected (worth staging once more). The inode's own
    /// log is never collected while it has an fsync-atomic epoch pending:
    /// DRAM then runs ahead of its durable log (`after_commit` asserts the
    /// same of every collection).
    pub(crate) fn collect_for_space(&self, inode: &Inode, d: &mut InodeData) -> bool {
        let suspended = self.media.suspend_deferral();
        let mut collected = 0;
        if let Some(seq) = self.deaths_durable_through() {
            if d.pending.is_none() && d.dead_log_pages() > 0 {
                collected = d.collect_garbage(&self.media, &self.pages, self.media.slot_offset(inode.ino), seq);
            }
            if collected == 0 {
                collected = self.collect_other_logs(Some(inode.ino), RECOVERY_REBUILDS_PER_VISIT_MAX);
                self.gc_pages_for_others.fetch_add(collected as u64, Ordering::Relaxed);
            }
        }
        self.media.resume_deferral(suspended);
        self.gc_pages.fetch_add(collected as u64, Ordering::Relaxed);
        collected > 0
    }

    /// Stage `entries` in `inode`'s log; when no page is left for them and
    /// `may_collect` (no fsync-atomic epoch stays pending, the inode is not
    /// being freed), collect dead log pages and stage once more.
    fn stage_collecting(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        entries: Entries,
        may_collect: bool,
    ) -> Result<Staged, (Errno, Entries)> {
        let (media, pages, ino, generation) = (&self.media, &self.pages, inode.ino, inode.generation);
        match d.stage(media, pages, ino, generation, entries) {
            Err((Errno::ENOSPC, entries)) if may_collect && self.collect_for_space(inode, d) => {
                d.stage(media, pages, ino, generation, entries)
            }
            other => other,
        }
    }

    /// Make every queued operation of a buffered mount durable and return
    /// the operation number through which page deaths are durable, for
    /// fast GC (`EVERY_DEATH` on a strict mount; None when persisting
    /// failed: the file system is read-only, and nothing is collected).
    fn deaths_durable_through(&self) -> Option<u64> {
        match &self.buffered {
            None => Some(EVERY_DEATH),
            Some(b) => b.persist_all().ok().map(|()| b.durable_seq()),
        }
    }

    /// Fast GC of every cached inode but `except` whose lock is free right
    /// now, for a change that found no page (`collect_for_space`), or of
    /// every one (`collect_every_log`: a patch buffer that found no page, a
    /// clean unmount): another
    /// file's dead log pages otherwise wait for its own next extension,
    /// which may never come (about one page per changed file in a test of
    /// buffered mounts). The caller may hold inode locks, so no lock is
    /// waited for: an inode another thread holds, locked or being rebuilt, is
    /// skipped, and so are freed inodes and those with an fsync-atomic
    /// epoch pending. On a buffered mount the queue is made durable again
    /// under each inode's lock: an operation queued on it since the
    /// caller's persist may have linked a page whose link is not durable
    /// yet, and a relink around a dead page must never point the durable
    /// log at it. It visits every slot of the inode cache's chunks in use,
    /// so it runs only when a log may hold a dead page that no visit has
    /// seen (`dead_pages_unvisited`). Returns the pages collected.
    fn collect_other_logs(&self, except: Option<InodeNo>, rebuilds_max: usize) -> usize {
        // No log has gained a dead page since the last visit, which took
        // or noted all it found: this one would find nothing.
        if !self.dead_pages_unvisited.load(Ordering::Acquire) {
            return 0;
        }
        // Logs crash recovery found holding dead pages are cached first
        // (each rebuild notes its pages), so that the visit sees them: at
        // most `rebuilds_max` of them, the rest at the next visit.
        let recovery_found_left = self.rebuild_logs_recovery_found(rebuilds_max);
        if !self.dead_pages_unvisited.swap(false, Ordering::AcqRel) {
            return 0;
        }
        self.other_log_visits.fetch_add(1, Ordering::Relaxed);
        let mut collected = 0;
        let mut missed = false;
        let slots_locked = self.inodes.each_cached_unlocked(|other| {
            if Some(other.ino) == except {
                // The caller's own inode, collected first; its change notes
                // what it keeps when it completes.
                return;
            }
            let Some(mut od) = other.data.try_write() else {
                missed = true;
                return;
            };
            // A freed inode's pages go back whole; an epoch's end is a
            // commit, which notes what its log keeps.
            if !od.alive || od.pending.is_some() || od.dead_log_pages() == 0 {
                return;
            }
            let Some(durable_seq) = self.deaths_durable_through() else { return };
            let slot = self.media.slot_offset(other.ino);
            collected += od.collect_garbage(&self.media, &self.pages, slot, durable_seq);
            // Deaths queued since the persist above are not durable yet.
            missed |= od.holds_collectable_dead_pages();
        });
        if missed || slots_locked > 0 || recovery_found_left {
            self.dead_pages_unvisited.store(true, Ordering::Release);
        }
        collected
    }

    /// Fast GC of every cached inode's log whose lock is free, for a
    /// caller that holds no inode lock: a patch buffer that found no page
    /// (`alloc_pages_anywhere`), and a clean unmount (after the buffered
    /// queue is drained and every fsync-atomic epoch committed), where a
    /// log's dead pages would otherwise stay linked through the next mount,
    /// which rebuilds an inode only at its first use, so that a full pool
    /// would refuse changes while logs of files nobody has touched since
    /// the mount held pages nothing needs. At an unmount nothing else runs,
    /// so every lock is free and the visit takes every dead page, having
    /// rebuilt every inode whose log crash recovery found holding dead
    /// pages (`rebuilds_max` unbounded); a patch buffer rebuilds at most
    /// `RECOVERY_REBUILDS_PER_VISIT_MAX`, as a change does. As in
    /// `collect_for_space`, this thread's deferral of flushes is set
    /// aside. Returns the pages collected.
    pub(crate) fn collect_every_log(&self, rebuilds_max: usize) -> usize {
        let suspended = self.media.suspend_deferral();
        let collected = self.collect_other_logs(None, rebuilds_max);
        self.media.resume_deferral(suspended);
        self.gc_pages.fetch_add(collected as u64, Ordering::Relaxed);
        collected
    }

    /// `count` data pages for a change to `inode`, whose write lock the
    /// caller holds: out of pages, dead log pages are collected (the
    /// inode's own, else other inodes': `collect_for_space`) and the
    /// allocation tried once more.
    pub(crate) fn alloc_pages_for(&self, inode: &Inode, d: &mut InodeData, count: u64) -> FsResult<Runs> {
        match self.pages.alloc(count) {
            Err(Errno::ENOSPC) if self.collect_for_space(inode, d) => self.pages.alloc(count),
            r => r,
        }
    }

    /// `count` pages for a caller that holds no inode lock (a patch
    /// buffer): out of pages, dead log pages of every cached inode are
    /// collected (`collect_every_log`) and the allocation tried once more.
    pub(crate) fn alloc_pages_anywhere(&self, count: u64) -> FsResult<Runs> {
        match self.pages.alloc(count) {
            Err(Errno::ENOSPC) if self.collect_every_log(RECOVERY_REBUILDS_PER_VISIT_MAX) > 0 => {
                self.pages.alloc(count)
            }
            r => r,
        }
    }

    /// Give back what a change that will not commit had allocated: its
    /// fresh data pages and the log pages its staging linked past the tail.
    /// Everything it wrote is fenced first, always: the streaming stores
    /// into its pages, so that no write-combining buffer of this thread can
    /// still land in a page once another thread has been handed it, and the
    /// flushes of entries staged past a tail, so that the operation ends
    /// with nothing in flight (found by the crash harness's persistence
    /// checker: a mkdir failing with ENOSPC on a full pool after staging
    /// its parent's entry).
    fn abandon(&self, fresh: Fresh, staged: Vec<Staged>) {
        self.media.flush_deferred_now();
        self.media.fence();
        for (start, n) in fresh.0 {
            self.pages.free(start, n as u64);
        }
        for s in staged {
            for p in s.new_pages {
                self.pages.free(p, 1);
            }
        }
    }

    /// Free what a durable commit released, then collect garbage in a log
    /// that grew: fast GC of dead log pages, then compaction when due.
    pub(crate) fn after_commit(&self, inode: &Inode, d: &mut InodeData, extended: bool, mut released: PageList) {
        // GC judges liveness in DRAM; with an epoch pending, DRAM runs ahead
        // of the durable log, so collecting now could drop what a crash needs.
        assert!(d.pending.is_none(), "inode {}: log GC with an epoch pending", inode.ino.0);
        // An overwrite's old page, or a truncate's or punch's pages as runs.
        self.pages.free_many(&mut released);
        if extended && d.dead_log_pages() > 0 {
            let n = d.collect_garbage(&self.media, &self.pages, self.media.slot_offset(inode.ino), EVERY_DEATH);
            self.gc_pages.fetch_add(n as u64, Ordering::Relaxed);
        }
        if extended && d.compaction_due() {
            self.compact_log(inode, d);
        }
        self.note_dead_log_pages(d);
    }

    /// Prepare a new inode: write its slot (identity, head, tail) and its
    /// first entries (an Attr snapshot, then `new.entries`), all flushed but
    /// not live: the caller's transaction sets the state word.
    /// On error nothing is written, and `new` is as it was (a caller may
    /// collect dead log pages and try again).
    fn stage_new_inode(&self, new: &mut NewInode) -> FsResult<(Arc<Inode>, Staged)> {
        let NewInode { ino, kind, rdev, attrs, .. } = *new;
        let extra = std::mem::take(&mut new.entries);
        assert!(rdev == 0 || kind.has_rdev(), "a device number on a {kind:?}");
        let generation = self.media.slot_generation(ino).wrapping_add(1).max(1);
        // The DRAM object before the slot: making it may take a lock (the
        // allocator's), and a locked instruction after the slot's flush
        // below would wait for that line's write-back as a fence does.
        let inode = Arc::new(Inode::new(ino, kind, generation, rdev, InodeData::new_empty(kind, attrs)));
        // The attributes go in the slot (FORMAT.md, "Inode slot"); a log
        // page is allocated only for entries beyond them, so an empty file
        // or directory has none until its first change.
        let staged = if extra.is_empty() {
            Staged::nothing()
        } else {
            let seqs = (1..=extra.len() as u64).collect();
            match write_log_entries(&self.media, &self.pages, ino, generation, format::NO_LOG, extra, seqs, None) {
                Ok(staged) => staged,
                Err((e, entries)) => {
                    new.entries = entries;
                    return Err(e);
                }
            }
        };
        self.media.write_slot_identity(
            ino,
            &format::InodeHeader { ino, generation, kind, rdev },
            &attrs.to_entry(),
            &staged,
        );
        Ok((inode, staged))
    }

    /// Lock several inodes for writing, in inode-number order (the global
    /// lock order that keeps multi-inode operations free of deadlock).
    /// Duplicates are locked once; the guards come back in the order asked.
    /// Inline up to a rename's four inodes: no allocation per operation.
    pub(crate) fn lock_all<'a>(
        &self,
        inodes: &[&'a Arc<Inode>],
    ) -> SmallVec<[Option<RwLockWriteGuard<'a, InodeData>>; 4]> {
        let mut order: SmallVec<[usize; 4]> = (0..inodes.len()).collect();
        order.sort_by_key(|&i| inodes[i].ino);
        let mut guards: SmallVec<[Option<RwLockWriteGuard<'a, InodeData>>; 4]> =
            (0..inodes.len()).map(|_| None).collect();
        let mut last: Option<InodeNo> = None;
        for i in order {
            if last == Some(inodes[i].ino) {
                continue;
            }
            last = Some(inodes[i].ino);
            guards[i] = Some(inodes[i].lock_write());
        }
        guards
    }

    /// Mark an inode's slot free (durably) and release everything it owns.
    /// The caller holds the inode's lock and has made it unreachable (its
    /// last name is gone and its last handle closed).
    pub(crate) fn free_inode_now(&self, inode: &Inode, d: &mut InodeData) {
        let slot = self.media.slot_offset(inode.ino);
        if let Some(b) = &self.buffered {
            // Queued like any change: the unlink that made it an orphan may
            // not be durable yet, and its free must not overtake it.
            b.mark_dying(inode.ino);
            let pages = self.release_inode_dram(inode, d);
            let seq = b.push(
                SmallVec::from_slice(&[(slot + INODE_STATE_OFFSET, 0)]),
                crate::media::FlushRanges::new(),
                PageList::from_vec(pages),
                SmallVec::from_slice(&[inode.ino]),
            );
            inode.last_seq.store(seq, Ordering::Relaxed);
            return;
        }
        self.media.commit_u64(slot + INODE_STATE_OFFSET, 0);
        self.release_inode(inode, d);
    }

    /// Freeing an inode whose state word is already zero: its DRAM state,
    /// its pages and its number.
    pub(crate) fn release_inode(&self, inode: &Inode, d: &mut InodeData) {
        let mut pages = self.release_inode_dram(inode, d);
        self.pages.free_many(&mut pages);
        self.inodes_free.free(inode.ino);
    }

    /// The DRAM side of freeing an inode: it leaves the cache and its state
    /// is emptied. Returns the pages it owned, for the caller to free once
    /// the free is durable. (A buffered mount marks it dying first.)
    pub(crate) fn release_inode_dram(&self, inode: &Inode, d: &mut InodeData) -> Vec<PageNo> {
        // Its pending epoch dies with it: the pages it set aside or could not
        // free yet go back with the rest (the slot is free, so no log holds them).
        if let Some(p) = d.pending.take() {
            self.media.fence();
            self.end_epoch(inode, *p);
        }
        let owned = d.owned_pages();
        d.alive = false;
        d.body = match inode.kind {
            FileType::Directory => crate::inode::Body::Dir(Default::default()),
            _ => crate::inode::Body::Pages(Default::default()),
        };
        d.log.live = Default::default();
        self.cache_remove(inode.ino);
        owned
    }

    /// Make everything `ino` has done durable: the engine's one durability
    /// entry point, used by every front end for fsync, fdatasync, msync and
    /// O_SYNC/O_DSYNC writes. In strict mode every operation was durable
    /// when it returned, so only a pool in the page cache of a block-backed
    /// file needs its pages written back (msync). The coming fsync-atomic
    /// and buffered modes make this their commit point.
    pub fn fsync_ino(&self, ino: InodeNo, data_only: bool) -> FsResult<()> {
        let inode = self.inode(ino)?;
        if !inode.lock_read().alive {
            return Err(Errno::ENOENT);
        }
        self.fsync_inode(&inode, data_only)
    }

    /// Whether an fsync of `inode` has nothing to do: a strict mount (no
    /// queue to persist) on media that needs no system call to be durable,
    /// and no fsync-atomic epoch pending on the file. Read without a lock,
    /// as `fsync_inode` reads it; a stale answer is as safe as there: an
    /// epoch committed meanwhile leaves nothing to do, and one opened
    /// meanwhile belongs to a write that has not returned before this call.
    pub(crate) fn fsync_is_noop(&self, inode: &Inode) -> bool {
        self.buffered.is_none()
            && self.media.pmem.domain() != ferrite_pmem::PersistenceDomain::PageCache
            && !(inode.kind == FileType::Regular && inode.epoch_pending.load(Ordering::Acquire))
    }

    /// `fsync_ino` of an inode the caller holds open (a descriptor's), so
    /// that it is alive: no lookup. The commit point of an fsync-atomic
    /// file (fsync and fdatasync alike: its data and metadata commit as one).
    pub(crate) fn fsync_inode(&self, inode: &Inode, data_only: bool) -> FsResult<()> {
        let _ = data_only;
        // A strict file (or one with nothing pending) has nothing to
        // commit, which `epoch_pending` tells without a lock: a read lock
        // here was two locked instructions, a sixth of a strict fsync. A
        // stale `true` (an epoch committed meanwhile) costs the lock, and
        // `commit_pending` then finds nothing.
        if inode.kind == FileType::Regular && inode.epoch_pending.load(Ordering::Acquire) {
            let mut d = inode.lock_write();
            self.commit_pending(inode, &mut d);
        }
        // Buffered: everything queued before this call becomes durable, not
        // only this file's operations (the prefix guarantee).
        if let Some(b) = &self.buffered {
            b.persist_all()?;
        }
        self.sync_domain()
    }

    /// Make everything durable (sync, syncfs): commit every pending epoch,
    /// persist a buffered mount's queue.
    pub fn sync_all(&self) -> FsResult<()> {
        self.commit_all_pending();
        if let Some(b) = &self.buffered {
            b.persist_all()?;
        }
        self.sync_domain()
    }

    /// Whether this mount is buffered.
    pub fn is_buffered(&self) -> bool {
        self.buffered.is_some()
    }

    /// Make every operation that has returned durable: a buffered mount's
    /// queue persisted (the same as `sync_all`; nothing to do in a strict
    /// mount but what `sync_all` does).
    pub fn persist_now(&self) -> FsResult<()> {
        self.sync_all()
    }

    /// Run `f` with the pool left alone by the persister: on a buffered
    /// mount no batch runs until it returns (a copy of a pool that a batch
    /// writes meanwhile would mix two states, which no crash can leave);
    /// on a strict one, `f` runs as is. Operations of other threads still
    /// change the pool: the caller keeps them away.
    pub fn with_persister_held<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.buffered {
            Some(b) => b.with_batches_held(f),
            None => f(),
        }
    }

    /// Make durable every operation that has returned but the newest
    /// `newest_left` of them, as a persister thread that wakes while
    /// callers keep queueing does: it persists up to an operation and
    /// leaves the rest, some of them perhaps already taken from the queue
    /// for a batch not yet run. For the crash harness, which runs no
    /// persister thread. Nothing in a strict mount.
    #[doc(hidden)]
    pub fn persist_all_but(&self, newest_left: u64) -> FsResult<()> {
        match &self.buffered {
            Some(b) => {
                let upto = b.last_seq().saturating_sub(newest_left);
                if upto == 0 {
                    return Ok(());
                }
                b.persist_upto(upto, false)
            }
            None => Ok(()),
        }
    }

    /// Fault injection for tests: the next batch the persister of a
    /// buffered mount starts fails (panics, on whichever thread runs it),
    /// which makes the mount read-only. Nothing in a strict mount.
    #[doc(hidden)]
    pub fn inject_persist_failure(&self) {
        if let Some(b) = &self.buffered {
            b.inject_failure();
        }
    }

    /// Start measuring `BufferedStats::lag_ns_max_seen` afresh (for one
    /// benchmark round, say).
    pub fn reset_buffered_lag(&self) {
        if let Some(b) = &self.buffered {
            b.reset_lag();
        }
    }

    /// What the persister of a buffered mount has done (all zero in a
    /// strict mount).
    pub fn buffered_stats(&self) -> crate::buffered::BufferedStats {
        self.buffered.as_ref().map(|b| b.stats()).unwrap_or_default()
    }

    /// Write back the pool's pages where the persistence domain needs it.
    fn sync_domain(&self) -> FsResult<()> {
        if self.media.pmem.domain() == ferrite_pmem::PersistenceDomain::PageCache {
            self.media.pmem.sync_to_backing_file().map_err(|_| Errno::EIO)?;
        }
        Ok(())
    }
}
