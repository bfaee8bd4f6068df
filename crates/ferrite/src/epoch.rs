//! fsync-atomic mode (Libnvmmio's failure-atomic fsync, on Ferrite's log):
//! the data changes of an fsync-atomic file between two commit points form
//! an *epoch*. Their entries are staged after the tail and applied to DRAM
//! at once (every reader sees them), but the tail in the inode slot stays
//! where the last commit put it, so a crash brings back exactly the state
//! of that commit. A commit point stores the tail (fence, streaming
//! store, fence), making the whole epoch durable at one 8-byte store.
//!
//! What an epoch must keep straight (docs/DESIGN.md, "fsync-atomic mode"):
//! - pages its entries release are still referenced by the committed log,
//!   so they are freed only after the commit (`Pending::deferred`), except
//!   pages allocated in the epoch itself, which no durable state knows;
//! - those epoch pages are written in place: a write to them logs nothing,
//!   and the commit appends one size-only Truncate with the size and times
//!   such writes changed, into a page set aside in advance, so that a
//!   commit point never fails for lack of space;
//! - log garbage collection is judged on DRAM liveness, which runs ahead of
//!   the durable log, so it waits for the commit (`commit.rs`).

use crate::commit::{Change, Fresh};
use crate::format::{Entry, TruncateEntry, INODE_TAIL_OFFSET};
use crate::fs::Ferrite;
use crate::inode::{Inode, InodeData, Pending, Staged};
use crate::types::{Errno, FileMode, FileType, FsResult, InodeNo};
use std::sync::atomic::Ordering;

impl Ferrite {
    /// Apply staged entries of a data change to an fsync-atomic file
    /// without committing them: the epoch grows.
    pub(crate) fn apply_pending(&self, inode: &Inode, d: &mut InodeData, staged: Staged, fresh: Fresh) {
        if d.pending.is_none() {
            d.pending = Some(Box::new(Pending {
                dirty_attrs: false,
                deferred: Vec::new(),
                epoch_pages: crate::Set::default(),
                reserve: None,
            }));
            self.pending_files.lock().insert(inode.ino);
            inode.epoch_pending.store(true, Ordering::Release);
        }
        let mut released = crate::PageList::new();
        d.commit_staged(inode.kind, staged, &mut released);
        let p = d.pending.as_mut().expect("pending epoch");
        p.epoch_pages.extend(fresh.pages());
        let mut free_now = Vec::new();
        for page in released {
            if p.epoch_pages.remove(&page) {
                free_now.push(page);
            } else {
                p.deferred.push(page);
            }
        }
        if !free_now.is_empty() {
            // Streaming stores into those pages must land before another
            // thread may be handed them.
            self.media.fence();
            for page in free_now {
                self.pages.free(page, 1);
            }
        }
    }

    /// Log the size and times that in-place writes of the epoch changed
    /// (a size-only Truncate, pending like the rest of the epoch), into the
    /// page set aside for it if the log needs one: it cannot fail. After it
    /// every change of the epoch is in the log, so storing the tail commits
    /// the whole epoch.
    pub(crate) fn seal_pending(&self, inode: &Inode, d: &mut InodeData) {
        let Some(p) = d.pending.as_mut() else {
            return;
        };
        if !p.dirty_attrs {
            return;
        }
        let reserve = p.reserve.take().expect("an epoch with unlogged attributes keeps a page in reserve");
        let a = d.attrs;
        let entry = Entry::Truncate(TruncateEntry {
            size: a.size,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            size_only: true,
        });
        let (staged, unused) = d.stage_reserved(
            &self.media,
            &self.pages,
            inode.ino,
            inode.generation,
            smallvec::smallvec![entry],
            reserve,
        );
        let mut released = crate::PageList::new();
        d.commit_staged(inode.kind, staged, &mut released);
        assert!(released.is_empty(), "a size-only truncate of inode {} released pages", inode.ino.0);
        let p = d.pending.as_mut().expect("pending epoch");
        p.reserve = unused;
        p.dirty_attrs = false;
    }

    /// The commit point of an fsync-atomic file: seal the epoch, then the
    /// strict commit's fence, tail store (streamed), fence.
    pub(crate) fn commit_pending(&self, inode: &Inode, d: &mut InodeData) {
        if d.pending.is_none() {
            return;
        }
        self.seal_pending(inode, d);
        let slot = self.media.slot_offset(inode.ino);
        self.media.fence();
        self.media.store_commit_word(slot + INODE_TAIL_OFFSET, d.log.tail.0);
        self.media.fence();
        self.finish_epoch(inode, d);
        self.after_commit(inode, d, true, crate::PageList::new());
        self.epoch_commits.fetch_add(1, Ordering::Relaxed);
    }

    /// After a durable commit of an inode that had an epoch: free what the
    /// epoch released and its reserve. Returns whether there was an epoch
    /// (its log may have grown: the caller collects garbage).
    pub(crate) fn finish_epoch(&self, inode: &Inode, d: &mut InodeData) -> bool {
        let Some(p) = d.pending.take() else {
            return false;
        };
        assert!(!p.dirty_attrs, "inode {}: epoch committed with unlogged attributes", inode.ino.0);
        self.end_epoch(inode, *p);
        true
    }

    /// An epoch that ended, committed or dropped with its inode (taken out
    /// of `InodeData::pending` under the write lock): the pages it set aside
    /// go back, and it leaves the registry and the inode's flag.
    pub(crate) fn end_epoch(&self, inode: &Inode, p: Pending) {
        for page in p.deferred.into_iter().chain(p.reserve) {
            self.pages.free(page, 1);
        }
        self.pending_files.lock().remove(&inode.ino);
        inode.epoch_pending.store(false, Ordering::Release);
    }

    /// Commit every pending epoch (sync, syncfs, unmount).
    pub(crate) fn commit_all_pending(&self) {
        let inos: Vec<InodeNo> = self.pending_files.lock().iter().copied().collect();
        for ino in inos {
            let Some(inode) = self.cached(ino) else {
                continue;
            };
            let mut d = inode.lock_write();
            if d.alive {
                self.commit_pending(&inode, &mut d);
            }
        }
    }

    /// fsync-atomic epochs committed since mount.
    pub fn epoch_commits(&self) -> u64 {
        self.epoch_commits.load(Ordering::Relaxed)
    }

    /// Files with an uncommitted epoch right now.
    pub fn pending_file_count(&self) -> usize {
        self.pending_files.lock().len()
    }

    /// The mode of regular files created from now on.
    pub fn default_mode(&self) -> FileMode {
        FileMode::from_u8(self.default_mode.load(Ordering::Relaxed)).expect("a mode this engine stored")
    }

    pub fn set_default_mode(&self, mode: FileMode) {
        self.default_mode.store(mode as u8, Ordering::Relaxed);
    }

    /// A file's consistency mode (strict for anything but a regular file).
    pub fn file_mode_ino(&self, ino: InodeNo) -> FsResult<FileMode> {
        let inode = self.inode(ino)?;
        let d = inode.lock_read();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        Ok(d.attrs.mode)
    }

    /// Set a regular file's consistency mode (EINVAL for anything else).
    /// A commit point: what was pending commits with the new mode, even
    /// when the mode does not change.
    pub fn set_file_mode_ino(&self, ino: InodeNo, mode: FileMode) -> FsResult<()> {
        let inode = self.inode(ino)?;
        if inode.kind != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        if d.attrs.mode == mode {
            self.commit_pending(&inode, &mut d);
            return Ok(());
        }
        let mut a = d.attrs;
        a.mode = mode;
        a.ctime_ns = self.now_ns();
        self.commit(&inode, &mut d, smallvec::smallvec![Entry::Attr(a.to_entry())], Fresh::none(), Change::Meta)
    }
}
