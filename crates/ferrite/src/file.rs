//! File data: copy-on-write writes, reads, truncate, fallocate, holes.
//!
//! A write never touches a page a committed entry points at. It copies the
//! new bytes (and, for a partial page, the rest of the old page) into fresh
//! pages with non-temporal stores, appends Write entries, and commits them
//! with the tail store; only then do the replaced pages go back to the
//! allocator. A crash at any instant therefore shows the whole write or
//! none of it.

use crate::commit::{Change, Fresh};
use crate::format::{
    Entry, InlineEntry, PageNo, PunchEntry, TruncateEntry, WriteEntry, INLINE_DATA_MAX, PAGE_SHIFT, PAGE_SIZE,
};
use crate::fs::Ferrite;
use crate::inode::{Inode, InodeData};
use crate::log::Entries;
use crate::perm::PrivilegeDrop;
use crate::types::{limits, Credentials, Errno, FallocateMode, FileType, FsResult, InodeNo, SetAttr};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const PAGE: usize = PAGE_SIZE as usize;

/// Tests only: every whole-page write copies its data before taking the
/// inode's lock, as it does when another writer is about, so that the
/// single-threaded crash harness checks that path too
/// (`crates/crashcheck/tests/precopy.rs`). Process-wide.
static FORCE_WRITE_PRECOPY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes that took the copy-before-lock path since the process started.
static WRITE_PRECOPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Copy-before-lock writes that found, under the lock, an epoch over their
/// pages (or the inode gone) and went the ordinary way instead.
static PRECOPY_FALLBACKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Tests only (the crash harness): make every whole-page write take the
/// copy-before-lock path of a contended file (`FORCE_WRITE_PRECOPY`).
#[doc(hidden)]
pub fn force_write_precopy(on: bool) {
    FORCE_WRITE_PRECOPY.store(on, Ordering::Relaxed);
}

/// Tests only: whether `force_write_precopy` is on.
#[doc(hidden)]
pub fn write_precopy_forced() -> bool {
    FORCE_WRITE_PRECOPY.load(Ordering::Relaxed)
}

/// Tests only: how many writes took the copy-before-lock path, so that a
/// test can show the path it means to check was reached.
#[doc(hidden)]
pub fn write_precopies() -> u64 {
    WRITE_PRECOPIES.load(Ordering::Relaxed)
}

/// Tests only: how many copy-before-lock writes gave their pages back
/// under the lock and took the ordinary path (an epoch over their pages).
#[doc(hidden)]
pub fn write_precopy_fallbacks() -> u64 {
    PRECOPY_FALLBACKS.load(Ordering::Relaxed)
}

/// Tests only: a name to remove (its directory, the name) once the next
/// forced copy-before-lock write has its fresh pages and before it copies
/// into them, as another thread's unlink can do anywhere before the write
/// takes the inode's lock. The crash harness has one thread, and this is
/// how it reaches the branch that finds the inode freed under the lock
/// (`Call::WriteRacingUnlink`). Before the copy and not after it: the
/// unlink's own fences, on this one thread, would otherwise fence the
/// copy too and hide a missing fence of that branch, which another
/// thread's unlink would not.
static REMOVE_AFTER_PRECOPY: parking_lot::Mutex<Option<(InodeNo, Vec<u8>)>> = parking_lot::const_mutex(None);

/// Tests only: remove `name` from directory `parent` in the next forced
/// copy-before-lock write, after its pages are allocated and before its
/// data is copied (`REMOVE_AFTER_PRECOPY`); None takes back a removal not
/// yet done.
#[doc(hidden)]
pub fn remove_after_next_precopy(removal: Option<(InodeNo, &[u8])>) {
    *REMOVE_AFTER_PRECOPY.lock() = removal.map(|(parent, name)| (parent, name.to_vec()));
}

/// Consecutive runs of pool pages handed out by the allocator, walked one
/// page at a time.
pub(crate) fn flatten(runs: &[(PageNo, u32)]) -> SmallVec<[PageNo; 4]> {
    runs.iter().flat_map(|&(s, n)| (0..n as u64).map(move |i| PageNo(s.0 + i))).collect()
}

/// Write entries for file pages `first..` mapped to `pool` pages, one entry
/// per stretch where both sides are consecutive.
pub(crate) fn write_entries(first: u64, pool: &[(u64, PageNo)], size_after: u64, now: i64) -> Entries {
    let mut out = Entries::new();
    let mut i = 0;
    let _ = first;
    while i < pool.len() {
        let mut j = i + 1;
        while j < pool.len()
            && pool[j].0 == pool[j - 1].0 + 1
            && pool[j].1 .0 == pool[j - 1].1 .0 + 1
            && j - i < u32::MAX as usize
        {
            j += 1;
        }
        out.push(Entry::Write(WriteEntry {
            file_page: pool[i].0,
            pool_page: pool[i].1,
            num_pages: (j - i) as u32,
            size_after,
            mtime_ns: now,
            ctime_ns: now,
        }));
        i = j;
    }
    out
}

/// The most bytes of one page a write puts in the log (Inline entries of at
/// most `INLINE_DATA_MAX` bytes each) instead of copying the page.
const INLINE_PIECE_MAX: usize = 1024;

/// Pieces up to this size may fill a page's fold limit with deltas; larger
/// ones fold at half of it.
const INLINE_SMALL_MAX: usize = 256;

/// How a write treats one file page it touches.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PieceAction {
    /// Copy on write: a fresh page with the new bytes (and the old ones
    /// around them), mapped by a Write entry.
    Cow,
    /// The bytes go into the log (Inline entries) as deltas over the page.
    Inline,
    /// The page was allocated in this fsync-atomic epoch: no durable state
    /// references it, so it is written in place, with no entry.
    InPlace(PageNo),
}

impl Ferrite {
    /// Bytes `[lo, lo + dst.len())` of file page `p`, mapped at `r`: the
    /// page's bytes with its deltas laid over them in order.
    fn read_mapped(&self, d: &InodeData, p: u64, pool: PageNo, lo: usize, dst: &mut [u8]) {
        self.read_pool(pool, lo, dst);
        let hi = lo + dst.len();
        for delta in d.pages().deltas(p) {
            let (s, e) = (lo.max(delta.at as usize), hi.min(delta.end()));
            if s < e {
                self.media.read(delta.data() + (s - delta.at as usize) as u64, &mut dst[s - lo..e - lo]);
            }
        }
    }

    /// The whole of file page `p` as a read shows it (zeros for a hole).
    pub(crate) fn read_page(&self, d: &InodeData, p: u64, buf: &mut [u8; PAGE]) {
        match d.pages().get(&p) {
            Some(r) => self.read_mapped(d, p, r.pool, 0, buf),
            None => buf.fill(0),
        }
    }

    /// A read of a file's data by a front end: counted for the fold policy.
    pub(crate) fn read_file(&self, inode: &Inode, d: &InodeData, offset: u64, buf: &mut [u8]) -> usize {
        Self::count_access(inode, false);
        self.read_locked(d, offset, buf)
    }

    pub(crate) fn read_locked(&self, d: &InodeData, offset: u64, buf: &mut [u8]) -> usize {
        let size = d.attrs.size;
        if offset >= size || buf.is_empty() {
            return 0;
        }
        let n = (buf.len() as u64).min(size - offset) as usize;
        let buf = &mut buf[..n];
        let map = d.pages();
        let first = offset >> PAGE_SHIFT;
        let last = (offset + n as u64 - 1) >> PAGE_SHIFT;
        let mut done = 0usize;
        let mut mapped = map.range(first..=last).peekable();
        let any_deltas = map.delta_bytes() > 0;
        for p in first..=last {
            let page_start = p << PAGE_SHIFT;
            let lo = offset.max(page_start) - page_start;
            let hi = (offset + n as u64).min(page_start + PAGE_SIZE) - page_start;
            let len = (hi - lo) as usize;
            let dst = &mut buf[done..done + len];
            match mapped.peek() {
                Some((fp, r)) if *fp == p => {
                    if any_deltas {
                        self.read_mapped(d, p, r.pool, lo as usize, dst);
                    } else {
                        self.read_pool(r.pool, lo as usize, dst);
                    }
                    mapped.next();
                }
                _ => dst.fill(0),
            }
            done += len;
        }
        n
    }

    /// How much a page's deltas may hold before a small write folds them
    /// into a fresh page instead of adding one more (Libnvmmio's read/write
    /// mix policy, for copy-on-write): a file read at least 60 % of the time
    /// folds early, as every read of the page pays for its deltas; a
    /// write-mostly file keeps up to a page's worth.
    fn fold_limits(inode: &Inode) -> (usize, usize) {
        let reads = inode.reads.load(Ordering::Relaxed) as u64;
        let writes = inode.writes.load(Ordering::Relaxed) as u64;
        if reads * 2 >= writes * 3 {
            (512, 4)
        } else {
            (PAGE, 32)
        }
    }

    /// Count an operation for the fold policy, halving both counts now and
    /// then so that the mix follows the file's recent use.
    fn count_access(inode: &Inode, write: bool) {
        let c = if write { &inode.writes } else { &inode.reads };
        if c.fetch_add(1, Ordering::Relaxed) >= 1 << 12 {
            inode.reads.store(inode.reads.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
            inode.writes.store(inode.writes.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }

    /// Write `data` at `offset` of a regular file, taking its write lock.
    ///
    /// When another writer holds the lock, a write of whole pages at a
    /// page-aligned offset (the common 4 KiB random write) copies its bytes
    /// into fresh pages *before* taking the lock: those pages are private
    /// to this call until its commit, so the copy needs no lock, and two
    /// threads writing different parts of one file overlap their copies
    /// instead of queueing behind each other for them. Under the lock, if every page is still to be copied on write
    /// (no page of an fsync-atomic epoch, which is written in place), the
    /// write commits the pages it filled; otherwise it gives them back and
    /// runs the ordinary path.
    pub(crate) fn write_inode_at(&self, inode: &Inode, offset: u64, data: &[u8]) -> FsResult<usize> {
        // Alone (no other write to this file in progress, and the lock
        // free: a plain load, not a locked instruction): the ordinary
        // path, under the lock from the start. Copying first pays only when
        // another writer is about: taking a lock is a locked instruction,
        // which waits for this thread's streaming stores to drain, so a
        // copy made just before it would add a round trip to the media to
        // every write. The count is taken before anything is streamed.
        struct InFlight<'a>(&'a AtomicU32);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let others = inode.writers_in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&inode.writers_in_flight);
        if others == 0 && !inode.data.is_locked() && !FORCE_WRITE_PRECOPY.load(Ordering::Relaxed) {
            let mut d = inode.lock_write();
            return self.write_locked(inode, &mut d, offset, data);
        }
        let whole_pages = !data.is_empty() && offset.is_multiple_of(PAGE_SIZE) && data.len().is_multiple_of(PAGE);
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        // An fsync-atomic file in the middle of an epoch writes its epoch's
        // pages in place: the ordinary path. The look is only a guess
        // (another writer holds the lock, most likely, and waiting for it
        // here would serialise the copy too); the check under the lock below
        // is what decides. Forced (tests), the guess is skipped as when the
        // lock is held, so that the check below is reached with an epoch.
        let forced = FORCE_WRITE_PRECOPY.load(Ordering::Relaxed);
        let pending_seen = !forced && inode.data.try_read().is_some_and(|d| d.pending.is_some());
        if !whole_pages || end > limits::FILE_SIZE_MAX || pending_seen {
            // Another writer is about: wait for it on plain loads, as the
            // copied path below does, not in the lock's yielding loop.
            let mut d = inode.lock_write();
            return self.write_locked(inode, &mut d, offset, data);
        }
        let runs = match self.pages.alloc(data.len() as u64 / PAGE_SIZE) {
            Ok(runs) => runs,
            // Whether the write may borrow the removal reserve (it only
            // replaces pages) is known under the lock only.
            Err(Errno::ENOSPC) => {
                let mut d = inode.lock_write();
                return self.write_locked(inode, &mut d, offset, data);
            }
            Err(e) => return Err(e),
        };
        WRITE_PRECOPIES.fetch_add(1, Ordering::Relaxed);
        let fresh = flatten(&runs);
        if forced {
            let removal = REMOVE_AFTER_PRECOPY.lock().take();
            if let Some((parent, name)) = removal {
                // A failure here leaves the inode alive, and the write then
                // succeeds: the test that asked for the removal sees that.
                let _ = self.remove(parent, &name, false);
            }
        }
        for (k, page) in fresh.iter().enumerate() {
            self.media.write_nt(page.offset(), &data[k * PAGE..(k + 1) * PAGE]);
        }
        let mut d = inode.lock_write();
        let first = offset >> PAGE_SHIFT;
        let in_epoch = d.pending.as_ref().is_some_and(|e| {
            (first..first + fresh.len() as u64)
                .any(|p| d.pages().get(&p).is_some_and(|r| e.epoch_pages.contains(&r.pool)))
        });
        if in_epoch || !d.alive {
            PRECOPY_FALLBACKS.fetch_add(1, Ordering::Relaxed);
            // An epoch covers these pages (it began since the look above,
            // or the look was skipped because the lock was held), or the
            // inode is gone. The pages filled go back, and
            // their stores are fenced first, so that none of them can land
            // after the next owner's (the crash harness's persistence
            // checker holds every unfenced store to a freed page to this).
            self.media.fence();
            for &(s, n) in &runs {
                self.pages.free(s, n as u64);
            }
            if !d.alive {
                return Err(Errno::ENOENT);
            }
            return self.write_locked(inode, &mut d, offset, data);
        }
        Self::count_access(inode, true);
        let pairs: SmallVec<[(u64, PageNo); 4]> = (first..).zip(fresh.iter().copied()).collect();
        let now = self.now_ns();
        let entries = write_entries(first, &pairs, d.attrs.size.max(end), now);
        self.commit(inode, &mut d, entries, Fresh::runs(runs), Change::Data)?;
        Ok(data.len())
    }

    /// Write `data` at `offset`; the caller holds the inode's write lock.
    /// Each page it touches is copied on write, or gets the bytes as a
    /// delta in the log (a small piece of a page that is mapped and whose
    /// deltas are within the fold limits), or, in an fsync-atomic file, is
    /// written in place when this epoch allocated it. All or nothing: the
    /// entries commit together, and nothing is written in place unless they
    /// did.
    pub(crate) fn write_locked(&self, inode: &Inode, d: &mut InodeData, offset: u64, data: &[u8]) -> FsResult<usize> {
        let attempt = |d: &mut InodeData| match self.write_planned(inode, d, offset, data, true) {
            // On a full pool a small overwrite copies its page instead: a
            // delta grows the log and gives nothing back until collection,
            // so it may not borrow the removal reserve, while a write that
            // only copies pages the file has may (below). Overwrites in
            // place then work on a full pool, as on a kernel file system.
            // A failed attempt leaves no trace (all or nothing).
            Err(Errno::ENOSPC) => self.write_planned(inode, d, offset, data, false),
            r => r,
        };
        match attempt(d) {
            // The file's own log, or other files' logs, may hold dead pages
            // that wait for their log's next extension (on a buffered
            // mount, for their deaths to become durable too): its data
            // pages may come from them.
            Err(Errno::ENOSPC) if self.collect_for_space(inode, d) => attempt(d),
            r => r,
        }
    }

    /// `write_locked`, with small pieces logged as deltas over their pages
    /// when `deltas` allows it.
    fn write_planned(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        offset: u64,
        data: &[u8],
        deltas: bool,
    ) -> FsResult<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > limits::FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        Self::count_access(inode, true);
        let first = offset >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        let (fold_bytes, fold_count) = Self::fold_limits(inode);
        // Plan each page.
        let mut plan: SmallVec<[(u64, usize, usize, PieceAction); 4]> = SmallVec::new();
        // Does every piece copy a page the file has (see below)?
        let mut copies_mapped_only = true;
        for p in first..=last {
            let page_start = p << PAGE_SHIFT;
            let lo = (offset.max(page_start) - page_start) as usize;
            let hi = (end.min(page_start + PAGE_SIZE) - page_start) as usize;
            let mapped = d.pages().get(&p);
            let action = match mapped {
                // A page a view holds is never changed in place: the view
                // must keep showing the bytes of its moment.
                Some(r)
                    if d.pending.as_ref().is_some_and(|e| e.epoch_pages.contains(&r.pool))
                        && !self.pages.is_pinned(r.pool) =>
                {
                    PieceAction::InPlace(r.pool)
                }
                Some(_) if deltas && hi - lo <= INLINE_PIECE_MAX => {
                    let deltas = d.pages().deltas(p);
                    let bytes: usize = deltas.iter().map(|x| x.len as usize).sum();
                    // Larger pieces fold sooner: their deltas would fill the
                    // log (and every compaction's copy) with a page's worth.
                    let fold_bytes = if hi - lo > INLINE_SMALL_MAX { fold_bytes / 2 } else { fold_bytes };
                    if deltas.len() < fold_count && bytes + (hi - lo) <= fold_bytes {
                        PieceAction::Inline
                    } else {
                        PieceAction::Cow
                    }
                }
                _ => PieceAction::Cow,
            };
            copies_mapped_only &= mapped.is_some() && action == PieceAction::Cow;
            plan.push((p, lo, hi, action));
        }
        let cow_count = plan.iter().filter(|x| x.3 == PieceAction::Cow).count() as u64;
        let in_place = plan.iter().any(|x| matches!(x.3, PieceAction::InPlace(_)));
        // A strict or buffered write that only copies pages the file has
        // gives as many pages back as it takes once it commits, so it may
        // borrow the removal reserve: a program can then still roll back
        // on a full pool (SQLite writes its journal's pages back over the
        // database), as it can where writes overwrite in place. An
        // fsync-atomic file keeps its epoch's pages until its next commit
        // point, so it may not (docs/DESIGN.md, "Space for removals").
        let replaces_only = copies_mapped_only
            && d.pending.is_none()
            && (d.attrs.mode != crate::types::FileMode::FsyncAtomic || self.buffered.is_some());
        let _removal = replaces_only.then(crate::alloc::removal_scope);
        let runs = if cow_count > 0 { self.pages.alloc(cow_count)? } else { crate::alloc::Runs::new() };
        if in_place {
            // Writes in place log nothing, so the commit point will append
            // the size and times: keep a page for it (docs/DESIGN.md).
            let epoch = d.pending.as_mut().expect("in-place pages belong to an epoch");
            if epoch.reserve.is_none() {
                match self.pages.alloc_one() {
                    Ok(page) => epoch.reserve = Some(page),
                    Err(e) => {
                        for &(s, n) in &runs {
                            self.pages.free(s, n as u64);
                        }
                        return Err(e);
                    }
                }
            }
        }
        let fresh = flatten(&runs);
        let now = self.now_ns();
        let size_after = d.attrs.size.max(end);
        let mut pairs: SmallVec<[(u64, PageNo); 4]> = SmallVec::new();
        let mut inline = Entries::new();
        for &(p, lo, hi, action) in &plan {
            let page_start = p << PAGE_SHIFT;
            let src = &data[(page_start + lo as u64 - offset) as usize..(page_start + hi as u64 - offset) as usize];
            match action {
                PieceAction::Cow => {
                    let dest = fresh[pairs.len()];
                    if lo == 0 && hi == PAGE {
                        self.media.write_nt(dest.offset(), src);
                    } else {
                        // Partial page: the new page gets the bytes a read
                        // shows around the written range (zeros in a hole).
                        // (The staging buffer lives in this branch only, so
                        // that a full-page write does not pay for zeroing
                        // 4 KiB of stack.)
                        let mut buf = [0u8; PAGE];
                        self.read_page(d, p, &mut buf);
                        buf[lo..hi].copy_from_slice(src);
                        self.media.write_nt(dest.offset(), &buf);
                    }
                    pairs.push((p, dest));
                }
                PieceAction::Inline => {
                    for (k, chunk) in src.chunks(INLINE_DATA_MAX).enumerate() {
                        inline.push(Entry::Inline(InlineEntry {
                            offset: page_start + (lo + k * INLINE_DATA_MAX) as u64,
                            size_after,
                            time_ns: now,
                            data: chunk.to_vec(),
                        }));
                    }
                }
                PieceAction::InPlace(_) => {}
            }
        }
        let mut entries = write_entries(first, &pairs, size_after, now);
        if entries.is_empty() {
            entries = inline;
        } else {
            entries.extend(inline);
        }
        let logged = !entries.is_empty();
        if logged {
            self.commit(inode, d, entries, Fresh::runs(runs), Change::Data)?;
        }
        if in_place {
            for &(p, lo, hi, action) in &plan {
                if let PieceAction::InPlace(pool) = action {
                    let page_start = p << PAGE_SHIFT;
                    let src =
                        &data[(page_start + lo as u64 - offset) as usize..(page_start + hi as u64 - offset) as usize];
                    self.media.write_nt(pool.offset() + lo as u64, src);
                }
            }
            if !logged {
                d.attrs.size = size_after;
                d.attrs.mtime_ns = now;
                d.attrs.ctime_ns = now;
                d.pending.as_mut().expect("in-place pages belong to an epoch").dirty_attrs = true;
            }
        }
        Ok(data.len())
    }

    /// Entries that set the size to `size` (and unmap pages past it). A
    /// shrink to the middle of a page copies that page with its tail zeroed,
    /// so that bytes past the end are always zero on media. Returns the
    /// entries and the page allocated for that copy, if any. That page may
    /// come from dead log pages (`alloc_pages_for`): a shrinking truncate
    /// takes the removal reserve, and when removals that free nothing have
    /// used it up, collection is what gives it back.
    pub(crate) fn truncate_entries(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        size: u64,
        now: i64,
    ) -> FsResult<(Entries, Fresh)> {
        if size > limits::FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        let mut entries = smallvec::smallvec![Entry::Truncate(TruncateEntry {
            size,
            mtime_ns: now,
            ctime_ns: now,
            size_only: false
        })];
        let mut cow = Fresh::none();
        let within = (size % PAGE_SIZE) as usize;
        if size < d.attrs.size && within != 0 {
            let p = size >> PAGE_SHIFT;
            if let Some(pool) = d.pages().get(&p).map(|r| r.pool) {
                let new = flatten(&self.alloc_pages_for(inode, d, 1)?)[0];
                let mut buf = [0u8; PAGE];
                self.read_mapped(d, p, pool, 0, &mut buf[..within]);
                self.media.write_nt(new.offset(), &buf);
                entries.push(Entry::Write(WriteEntry {
                    file_page: p,
                    pool_page: new,
                    num_pages: 1,
                    size_after: size,
                    mtime_ns: now,
                    ctime_ns: now,
                }));
                cow.push(new);
            }
        }
        Ok((entries, cow))
    }

    /// fallocate of a locked inode. `by`: the caller, when the call is to
    /// take the file's privileges away first (`Ferrite::setattr_as_locked`)
    /// once its arguments have passed their checks, as Linux's
    /// `file_modified`.
    pub(crate) fn fallocate_locked(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        mode: FallocateMode,
        offset: u64,
        len: u64,
        by: Option<&Credentials>,
    ) -> FsResult<()> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > limits::FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        if inode.kind != FileType::Regular {
            return Err(Errno::EISDIR);
        }
        // Every call that passes its checks takes them, a hole punched
        // past the end of file included (as tmpfs, whose fallocate calls
        // `file_modified` before it looks at the size).
        if let Some(c) = by {
            self.setattr_as_locked(inode, d, &SetAttr::default(), c, PrivilegeDrop::Modify)?;
        }
        match mode {
            FallocateMode::PunchHole => return self.punch_hole_locked(inode, d, offset, end),
            FallocateMode::ZeroRange => return self.zero_range_locked(inode, d, offset, end, false),
            FallocateMode::ZeroRangeKeepSize => return self.zero_range_locked(inode, d, offset, end, true),
            FallocateMode::Default | FallocateMode::KeepSize => {}
        }
        let first = offset >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        let holes: Vec<u64> = {
            let map = d.pages();
            let mut v = Vec::new();
            let mut mapped = map.range(first..=last).map(|(k, _)| k).peekable();
            for p in first..=last {
                if mapped.peek() == Some(&p) {
                    mapped.next();
                } else {
                    v.push(p);
                }
            }
            v
        };
        let new_size = match mode {
            FallocateMode::Default => d.attrs.size.max(end),
            FallocateMode::KeepSize => d.attrs.size,
            FallocateMode::PunchHole | FallocateMode::ZeroRange | FallocateMode::ZeroRangeKeepSize => {
                unreachable!("handled above")
            }
        };
        let now = self.now_ns();
        let (entries, runs) = if holes.is_empty() {
            let t = TruncateEntry { size: new_size, mtime_ns: now, ctime_ns: now, size_only: true };
            (smallvec::smallvec![Entry::Truncate(t)], crate::alloc::Runs::new())
        } else {
            let runs = self.alloc_pages_for(inode, d, holes.len() as u64)?;
            for &(s, n) in &runs {
                self.media.fill_nt(s.offset(), n as u64 * PAGE_SIZE, 0);
            }
            let pairs: Vec<(u64, PageNo)> = holes.iter().copied().zip(flatten(&runs)).collect();
            (write_entries(first, &pairs, new_size, now), runs)
        };
        self.commit(inode, d, entries, Fresh::runs(runs), Change::Data)
    }

    /// fallocate PUNCH_HOLE (with KEEP_SIZE, as Linux requires): the bytes
    /// of [offset, end) below the size read as zeros afterwards, the whole
    /// pages among them are unmapped (one Punch entry) and the partly
    /// covered pages at either edge are copied with the range zeroed (Write
    /// entries), all in one commit. The size never changes; a range at or
    /// past the end of file changes nothing (as ext4).
    fn punch_hole_locked(&self, inode: &Inode, d: &mut InodeData, offset: u64, end: u64) -> FsResult<()> {
        let size = d.attrs.size;
        if offset >= size {
            return Ok(());
        }
        // Punching releases pages: it may take the removal reserve for its
        // edge pages and its log entries (docs/DESIGN.md, "Space for
        // removals").
        let _removal = crate::alloc::removal_scope();
        let end = end.min(size);
        let now = self.now_ns();
        // Whole pages: [full_first, full_end). Edge pages are partly inside.
        let full_first = offset.div_ceil(PAGE_SIZE);
        let full_end = end >> PAGE_SHIFT;
        let mut edges: SmallVec<[(u64, u64, u64); 2]> = SmallVec::new(); // (page, lo, hi)
        let first = offset >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        for p in [first, last] {
            if (full_first..full_end).contains(&p) || edges.iter().any(|e| e.0 == p) {
                continue;
            }
            let start = p << PAGE_SHIFT;
            let lo = offset.max(start) - start;
            let hi = end.min(start + PAGE_SIZE) - start;
            // Only a mapped page has bytes to zero; a hole reads zeros.
            if d.pages().get(&p).is_some() {
                edges.push((p, lo, hi));
            }
        }
        let mut pairs: SmallVec<[(u64, PageNo); 2]> = SmallVec::new();
        let mut entries = Entries::new();
        let mut fresh = Fresh::none();
        if !edges.is_empty() {
            let runs = self.alloc_pages_for(inode, d, edges.len() as u64)?;
            for (&(p, lo, hi), dest) in edges.iter().zip(flatten(&runs)) {
                self.stream_page_zeroed(d, p, lo, hi, dest);
                pairs.push((p, dest));
            }
            entries = write_entries(first, &pairs, size, now);
            fresh = Fresh::runs(runs);
        }
        let mapped_inside = full_first < full_end && d.pages().range(full_first..full_end).next().is_some();
        if mapped_inside {
            entries.push(Entry::Punch(PunchEntry {
                file_page: full_first,
                num_pages: full_end - full_first,
                mtime_ns: now,
                ctime_ns: now,
            }));
        }
        if entries.is_empty() {
            // Nothing mapped in the range: only the times change (a
            // size-only Truncate to the same size carries them).
            entries.push(Entry::Truncate(TruncateEntry { size, mtime_ns: now, ctime_ns: now, size_only: true }));
        }
        self.commit(inode, d, entries, fresh, Change::Data)
    }

    /// Stream file page `p` as a read shows it, with bytes [lo, hi) zeroed,
    /// into the fresh page `dest`: the edge page of a punched or zeroed
    /// range.
    fn stream_page_zeroed(&self, d: &InodeData, p: u64, lo: u64, hi: u64, dest: PageNo) {
        let mut buf = [0u8; PAGE];
        self.read_page(d, p, &mut buf);
        buf[lo as usize..hi as usize].fill(0);
        self.media.write_nt(dest.offset(), &buf);
    }

    /// fallocate ZERO_RANGE (with KEEP_SIZE when `keep_size`): the bytes of
    /// [offset, end) read as zeros afterwards and every page they touch is
    /// allocated, all in one commit. Each page of the range gets a fresh
    /// page, mapped by Write entries: a mapped page at either edge that the
    /// range covers only in part is copied with the range zeroed, every
    /// other page is zero-filled. Zeroing the old pages in place would not
    /// be atomic (a crash halfway would leave some of them zeroed), and the
    /// format has no unwritten extents, so the range needs as many free
    /// pages as it spans until the commit frees the pages it replaced. The
    /// size grows to `end` unless `keep_size`; the times change always (as
    /// ext4).
    fn zero_range_locked(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        offset: u64,
        end: u64,
        keep_size: bool,
    ) -> FsResult<()> {
        let size = if keep_size { d.attrs.size } else { d.attrs.size.max(end) };
        let first = offset >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        let count = last - first + 1;
        let runs = self.alloc_pages_for(inode, d, count)?;
        let mut pairs: Vec<(u64, PageNo)> = Vec::with_capacity(count as usize);
        for (p, dest) in (first..=last).zip(flatten(&runs)) {
            let start = p << PAGE_SHIFT;
            let lo = offset.max(start) - start;
            let hi = end.min(start + PAGE_SIZE) - start;
            let whole = lo == 0 && hi == PAGE_SIZE;
            if !whole && d.pages().get(&p).is_some() {
                self.stream_page_zeroed(d, p, lo, hi, dest);
            } else {
                self.media.fill_nt(dest.offset(), PAGE_SIZE, 0);
            }
            pairs.push((p, dest));
        }
        let entries = write_entries(first, &pairs, size, self.now_ns());
        self.commit(inode, d, entries, Fresh::runs(runs), Change::Data)
    }

    /// SEEK_DATA and SEEK_HOLE at page granularity.
    pub(crate) fn seek_data_hole(&self, d: &InodeData, offset: u64, data: bool) -> FsResult<u64> {
        let size = d.attrs.size;
        if offset >= size {
            return Err(Errno::ENXIO);
        }
        let map = d.pages();
        let p = offset >> PAGE_SHIFT;
        if data {
            match map.range(p..).next() {
                Some((fp, _)) if (fp << PAGE_SHIFT) < size => Ok(offset.max(fp << PAGE_SHIFT)),
                _ => Err(Errno::ENXIO),
            }
        } else {
            let mut q = p;
            for (fp, _) in map.range(p..) {
                if fp != q {
                    break;
                }
                q += 1;
            }
            if q == p {
                Ok(offset)
            } else {
                Ok((q << PAGE_SHIFT).min(size))
            }
        }
    }
}

/// The most one `copy_range_ino` copies: what FUSE's reply (a 32-bit
/// byte count) can report, in whole pages; a caller asking for more gets
/// a short count and asks again, as with any short copy.
pub const COPY_BYTES_MAX: u64 = u32::MAX as u64 & !(PAGE_SIZE - 1);

/// The piece of a copy read and written at a time: one commit per piece,
/// and a buffer that stays in the processor's cache between its read and
/// its write.
const COPY_CHUNK_BYTES: usize = 1 << 20;

impl Ferrite {
    pub fn read_ino(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let inode = self.inode(ino)?;
        if inode.kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        let d = inode.lock_read();
        Ok(self.read_file(&inode, &d, offset, buf))
    }

    pub fn write_ino(&self, ino: InodeNo, offset: u64, data: &[u8]) -> FsResult<usize> {
        let inode = self.inode(ino)?;
        if inode.kind != FileType::Regular {
            return Err(Errno::EISDIR);
        }
        if !inode.lock_read().alive {
            return Err(Errno::ENOENT);
        }
        self.write_inode_at(&inode, offset, data)
    }

    /// copy_file_range inside the pool: up to `len` bytes of file `src` from
    /// `src_offset` into file `dst` at `dst_offset`, as reads and writes of
    /// at most `COPY_CHUNK_BYTES`, each write one commit (as a `write` of
    /// that size: atomic and, in strict mode, durable at return; the copy
    /// as a whole is neither, as with Linux's own). Returns the bytes
    /// copied: fewer than `len` at the end of `src`, or when a write is
    /// short or fails after some bytes were copied (the error then comes
    /// from the next call, as with `write`). Overlapping ranges of one file
    /// are EINVAL, as Linux checks before calling a file system.
    pub fn copy_range_ino(
        &self,
        src: InodeNo,
        src_offset: u64,
        dst: InodeNo,
        dst_offset: u64,
        len: u64,
    ) -> FsResult<usize> {
        let len = len.min(COPY_BYTES_MAX);
        if len == 0 {
            return Ok(0);
        }
        let src_end = src_offset.checked_add(len).ok_or(Errno::EINVAL)?;
        let dst_end = dst_offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if src == dst && src_offset < dst_end && dst_offset < src_end {
            return Err(Errno::EINVAL);
        }
        let mut buf = vec![0u8; (len as usize).min(COPY_CHUNK_BYTES)];
        let mut done = 0u64;
        while done < len {
            let want = ((len - done) as usize).min(buf.len());
            let step = self.read_ino(src, src_offset + done, &mut buf[..want]).and_then(|got| {
                if got == 0 {
                    return Ok((0, 0));
                }
                Ok((got, self.write_ino(dst, dst_offset + done, &buf[..got])?))
            });
            let (got, put) = match step {
                Ok(s) => s,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            };
            done += put as u64;
            if got == 0 || put < got {
                break;
            }
        }
        Ok(done as usize)
    }

    /// SEEK_DATA (`data`) or SEEK_HOLE from `offset`, at page granularity:
    /// ENXIO at or past the end of file.
    pub fn seek_data_hole_ino(&self, ino: InodeNo, offset: u64, data: bool) -> FsResult<u64> {
        let inode = self.inode(ino)?;
        if inode.kind != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let d = inode.lock_read();
        self.seek_data_hole(&d, offset, data)
    }

    pub fn fallocate_ino(&self, ino: InodeNo, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.fallocate_locked(&inode, &mut d, mode, offset, len, None)
    }

    /// fallocate by `c`, which first takes away the privileges a change by
    /// `c` takes (the set-ID bits and capabilities, see
    /// `Ferrite::setattr_as_locked`) once its arguments have passed their
    /// checks: for a front end whose kernel leaves that to the file system.
    pub fn fallocate_ino_as(
        &self,
        ino: InodeNo,
        mode: FallocateMode,
        offset: u64,
        len: u64,
        c: &Credentials,
    ) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.fallocate_locked(&inode, &mut d, mode, offset, len, Some(c))
    }

    pub fn readlink_ino(&self, ino: InodeNo) -> FsResult<Vec<u8>> {
        self.readlink_inode(&self.inode(ino)?)
    }

    /// readlink of an inode already held.
    pub(crate) fn readlink_inode(&self, inode: &Arc<Inode>) -> FsResult<Vec<u8>> {
        let ino = inode.ino;
        if inode.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let d = inode.lock_read();
        if d.attrs.size == 0 || d.attrs.size > limits::SYMLINK_MAX as u64 {
            return Err(self.corrupt(crate::format::corrupt!(
                "symlink {} has a target of {} bytes",
                ino.0,
                d.attrs.size
            )));
        }
        let mut buf = vec![0u8; d.attrs.size as usize];
        let n = self.read_locked(&d, 0, &mut buf);
        buf.truncate(n);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    //! A shrinking truncate on a full pool whose removal reserve is used up
    //! (removals that free nothing and small replacing writes can do that,
    //! docs/DESIGN.md, "Space for removals") still gets the page for the
    //! copy of its cut page, from another file's dead log pages: without
    //! collection it was refused with ENOSPC, though it frees space. The
    //! reserve is taken here by holding every free page directly, which no
    //! public call can do in so few steps.
    use super::*;
    use crate::buffered::BufferedOptions;
    use crate::dir::NodeSpec;
    use crate::fs::{FormatOptions, MountOptions};
    use ferrite_pmem::Pmem;

    fn file() -> NodeSpec<'static> {
        NodeSpec { kind: FileType::Regular, perm: 0o644, uid: 0, gid: 0, symlink_target: None, rdev: 0 }
    }

    fn chmod(fs: &Ferrite, ino: InodeNo, perm: u32) {
        fs.setattr(ino, &SetAttr { perm: Some(perm), ..Default::default() }).unwrap();
    }

    fn truncate_with_the_reserve_used_up(buffered: bool) {
        let format = FormatOptions { lanes: 2, inodes: Some(1024), ..Default::default() };
        let mut fs = Ferrite::format(Pmem::heap(2048 * 4096), &format).unwrap();
        if buffered {
            let pmem = fs.pmem().clone();
            fs.unmount().unwrap();
            let options = BufferedOptions { persister_thread: false, ..Default::default() };
            let opts = MountOptions { buffered: Some(options), ..Default::default() };
            fs = Ferrite::mount(Pmem::from_image(&pmem.image()), &opts).unwrap();
        }
        // Dead pages in the log of a file that nothing changes afterwards:
        // chmods, then an overwrite that supersedes a log page's last live
        // entry (a buffered mount's deaths wait for durability: more).
        let churned = fs.create_node(InodeNo::ROOT, b"churned", &file()).unwrap().ino;
        fs.write_ino(churned, 0, &[7; 4096]).unwrap();
        for round in 0..if buffered { 300 } else { 100 } {
            chmod(&fs, churned, 0o600 | (round & 0o77));
        }
        fs.write_ino(churned, 0, &[8; 4096]).unwrap();
        chmod(&fs, churned, 0o640);
        let cut = fs.create_node(InodeNo::ROOT, b"cut", &file()).unwrap().ino;
        fs.write_ino(cut, 0, &[9; 8192]).unwrap();
        fs.sync_all().unwrap();
        // Every free page taken, the removal reserve's too.
        let mut held = Vec::new();
        {
            let _removal = crate::alloc::removal_scope();
            while let Ok(page) = fs.pages.alloc_one() {
                held.push(page);
            }
        }
        assert_eq!(fs.free_pages(), 0);
        let collected = fs.gc_pages_collected();
        let st = fs
            .setattr(cut, &SetAttr { size: Some(100), ..Default::default() })
            .unwrap_or_else(|e| panic!("a shrinking truncate refused while a log held dead pages: {e:?}"));
        assert_eq!(st.size, 100);
        assert!(fs.gc_pages_collected() > collected, "the truncate took no dead log page");
        let mut back = [0u8; 200];
        assert_eq!(fs.read_ino(cut, 0, &mut back).unwrap(), 100);
        assert!(back[..100].iter().all(|&b| b == 9));
        for page in held {
            fs.pages.free(page, 1);
        }
        assert_eq!(fs.read_ino(churned, 0, &mut back).unwrap(), 200);
        assert!(back.iter().all(|&b| b == 8));
        assert_eq!(fs.getattr(churned).unwrap().perm, 0o640);
        let pmem = fs.pmem().clone();
        fs.unmount().unwrap();
        let report = crate::fsck::check(&Pmem::from_image(&pmem.image())).unwrap();
        assert!(report.is_clean(), "{report}");
    }

    #[test]
    fn a_shrinking_truncate_with_the_reserve_used_up_takes_dead_log_pages() {
        truncate_with_the_reserve_used_up(false);
    }

    #[test]
    fn a_shrinking_truncate_with_the_reserve_used_up_takes_dead_log_pages_buffered() {
        truncate_with_the_reserve_used_up(true);
    }
}
