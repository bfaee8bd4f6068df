//! The file system object: format, mount, unmount, the inode cache, and the
//! commit paths every operation shares.

use crate::alloc::{InodeAllocator, PageAllocator};
use crate::format::{
    self, Layout, MountState, PageNo, Superblock, SuperblockError, INODE_STATE_OFFSET, INODE_TAIL_OFFSET, PAGE_SIZE,
};
use crate::inode::{Attrs, Inode, InodeData, Staged};
use crate::journal::{Journals, Transaction};
use crate::media::Media;
use crate::types::{Clock, Errno, FileType, FsResult, InodeNo, SystemClock};
use crate::Map;
use ferrite_pmem::{Pmem, PmemError, PoolOffset};
use parking_lot::{Mutex, RwLockWriteGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Why a pool could not be formatted or mounted. Nothing in the pool was
/// changed when one of these is returned.
#[derive(Debug)]
pub enum PoolError {
    /// Neither superblock copy carries the Ferrite magic.
    NotFerrite,
    /// The pool was made by another format version.
    Version { found: u32, supported: u32 },
    /// A structure failed its checks.
    Corrupt(String),
    /// The pool cannot be opened or mapped (includes "already open").
    Pmem(PmemError),
    /// Bad parameters (size, lanes, inode count).
    Invalid(String),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::NotFerrite => write!(f, "not a Ferrite pool (no superblock magic)"),
            PoolError::Version { found, supported } => {
                write!(f, "pool has format version {found}; this build reads version {supported}")
            }
            PoolError::Corrupt(m) => write!(f, "corrupt pool: {m}"),
            PoolError::Pmem(e) => write!(f, "{e}"),
            PoolError::Invalid(m) => write!(f, "invalid parameters: {m}"),
        }
    }
}

impl std::error::Error for PoolError {}

impl From<PmemError> for PoolError {
    fn from(e: PmemError) -> Self {
        PoolError::Pmem(e)
    }
}

impl From<format::Corrupt> for PoolError {
    fn from(c: format::Corrupt) -> Self {
        PoolError::Corrupt(c.0)
    }
}

/// Parameters of `Ferrite::format`.
#[derive(Clone)]
pub struct FormatOptions {
    /// Lanes: journals and allocator partitions (1..=64).
    pub lanes: u32,
    /// Inode slots; by default one per 16 KiB of pool.
    pub inodes: Option<u64>,
    pub clock: Arc<dyn Clock>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions { lanes: 8, inodes: None, clock: Arc::new(SystemClock) }
    }
}

/// Parameters of `Ferrite::mount`.
#[derive(Clone)]
pub struct MountOptions {
    pub clock: Arc<dyn Clock>,
    /// Threads that scan logs in parallel during crash recovery.
    pub recovery_threads: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            clock: Arc::new(SystemClock),
            recovery_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).min(8),
        }
    }
}

/// What mount found and did, for `ferrite info` and tests.
#[derive(Clone, Debug, Default)]
pub struct MountReport {
    /// The pool was not cleanly unmounted, so logs were scanned.
    pub recovered: bool,
    pub journals_rolled_back: usize,
    pub inodes_scanned: u64,
    pub orphans_freed: u64,
    pub recovery_ns: u64,
}

const INODE_SHARDS: usize = 64;

/// A mounted Ferrite file system. Send + Sync: share it with `Arc`.
pub struct Ferrite {
    pub(crate) media: Media,
    pub(crate) sb: Mutex<Superblock>,
    pub(crate) pages: PageAllocator,
    pub(crate) inodes_free: InodeAllocator,
    pub(crate) journals: Journals,
    inodes: Vec<Mutex<Map<InodeNo, Arc<Inode>>>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Serializes renames across directories, so that the check "not into
    /// its own subtree" sees a stable tree (Linux's s_vfs_rename_mutex).
    pub(crate) rename_lock: Mutex<()>,
    pub(crate) report: MountReport,
    unmounted: AtomicBool,
    pub(crate) gc_pages: AtomicU64,
}

impl Ferrite {
    /// Format `pmem` as an empty file system and mount it.
    pub fn format(pmem: Pmem, opts: &FormatOptions) -> Result<Ferrite, PoolError> {
        let total_pages = pmem.len() / PAGE_SIZE;
        let inodes = opts.inodes.unwrap_or((total_pages / 4).max(64));
        let layout = Layout::compute(total_pages, opts.lanes, inodes).map_err(PoolError::Invalid)?;
        let media = Media { pmem: Arc::new(pmem), layout };
        // Metadata regions start zeroed: no superblock until the end, idle
        // journals, free inode slots.
        media.fill_nt(0, layout.data_start.0 * PAGE_SIZE, 0);
        media.fence();
        let now = opts.clock.now().as_ns();
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&now.to_le_bytes());
        uuid[8..].copy_from_slice(&(std::process::id() as u64 ^ total_pages.rotate_left(17)).to_le_bytes());
        let sb = Superblock {
            total_pages,
            lane_count: layout.lane_count,
            journal_start: layout.journal_start,
            inode_table_start: layout.inode_table_start,
            inode_table_pages: layout.inode_table_pages,
            inode_count: layout.inode_count,
            save_start: layout.save_start,
            save_pages: layout.save_pages,
            data_start: layout.data_start,
            uuid,
            created_ns: now,
            generation: 0,
            state: MountState::Dirty,
            features: format::FEATURES_KNOWN,
            saved_alloc_crc: 0,
            saved_free_pages: 0,
            saved_free_inodes: 0,
            mount_count: 1,
        };
        let fs = Ferrite::new_mounted(media, sb, opts.clock.clone(), MountReport::default());
        fs.pages.init_free(layout.data_start, total_pages - layout.data_start.0);
        fs.inodes_free.fill(2..layout.inode_count);
        // The root directory: its own parent, created outside any journal
        // because nothing refers to it until its state word is set.
        let attrs = Attrs {
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink: 1,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            size: 0,
            parent: InodeNo::ROOT,
        };
        let (inode, staged) = fs
            .stage_new_inode(InodeNo::ROOT, FileType::Directory, 0, attrs, vec![])
            .map_err(|e| PoolError::Invalid(format!("pool too small for the root directory: {e:?}")))?;
        let mut tx = Transaction::default();
        tx.set(fs.media.slot_offset(InodeNo::ROOT) + INODE_STATE_OFFSET, format::inode_live_word(inode.generation));
        fs.journals.run(&fs.media, &tx);
        {
            let mut d = inode.data.write();
            let mut freed = Vec::new();
            d.commit_staged(FileType::Directory, staged, &mut freed);
        }
        fs.cache_insert(inode);
        // The superblock goes last: a crash before this point leaves a pool
        // that no mount accepts, never a half-made file system.
        fs.write_superblock(|_| {});
        Ok(fs)
    }

    /// Mount a formatted pool, recovering it first if it was not cleanly
    /// unmounted. Refuses (with the pool unchanged) anything that is not a
    /// valid Ferrite pool of this version.
    pub fn mount(pmem: Pmem, opts: &MountOptions) -> Result<Ferrite, PoolError> {
        let pmem = Arc::new(pmem);
        let sb = read_superblock(&pmem)?;
        let layout = Layout {
            total_pages: sb.total_pages,
            lane_count: sb.lane_count,
            journal_start: sb.journal_start,
            inode_table_start: sb.inode_table_start,
            inode_table_pages: sb.inode_table_pages,
            inode_count: sb.inode_count,
            save_start: sb.save_start,
            save_pages: sb.save_pages,
            data_start: sb.data_start,
        };
        let media = Media { pmem, layout };
        let fs = Ferrite::new_mounted(media, sb, opts.clock.clone(), MountReport::default());
        let fs = crate::recovery::mount_existing(fs, opts.recovery_threads.max(1))?;
        Ok(fs)
    }

    pub(crate) fn new_mounted(media: Media, sb: Superblock, clock: Arc<dyn Clock>, report: MountReport) -> Ferrite {
        let lanes = media.layout.lane_count as usize;
        Ferrite {
            pages: PageAllocator::new(lanes, media.layout.data_start, media.layout.total_pages),
            inodes_free: InodeAllocator::new(lanes),
            journals: Journals::new(lanes),
            media,
            sb: Mutex::new(sb),
            inodes: (0..INODE_SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            clock,
            rename_lock: Mutex::new(()),
            report,
            unmounted: AtomicBool::new(false),
            gc_pages: AtomicU64::new(0),
        }
    }

    /// Unmount cleanly: save the allocator and mark the pool clean, so the
    /// next mount skips the log scan. Front ends release their handles
    /// first, so that unlinked files are freed (`Session::unmount` closes
    /// its descriptors; the kernel forgets every inode before a FUSE
    /// unmount). Dropping a `Ferrite` without this is a crash as far as the
    /// pool is concerned: the next mount recovers.
    pub fn unmount(self) -> FsResult<()> {
        crate::recovery::save_and_mark_clean(&self);
        self.unmounted.store(true, Ordering::SeqCst);
        Ok(())
    }

    pub fn pmem(&self) -> &Arc<Pmem> {
        &self.media.pmem
    }

    pub fn layout(&self) -> Layout {
        self.media.layout
    }

    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    pub fn superblock(&self) -> Superblock {
        *self.sb.lock()
    }

    /// Log pages reclaimed by garbage collection since mount.
    pub fn gc_pages_collected(&self) -> u64 {
        self.gc_pages.load(Ordering::Relaxed)
    }

    pub fn free_pages(&self) -> u64 {
        self.pages.free_pages()
    }

    pub fn free_inodes(&self) -> u64 {
        self.inodes_free.free_count()
    }

    pub(crate) fn now_ns(&self) -> i64 {
        self.clock.now().as_ns()
    }

    /// Write both superblock copies, one after the other, each made
    /// durable before the next is touched, so one valid copy always exists.
    pub(crate) fn write_superblock(&self, change: impl FnOnce(&mut Superblock)) {
        let mut sb = self.sb.lock();
        change(&mut sb);
        sb.generation = sb.generation.wrapping_add(1);
        let bytes = sb.encode();
        // Overwrite first the copy a mount would not use (torn by an
        // earlier interrupted update, or older), so that the copy it would
        // use stays intact until the other one is complete: a crash at any
        // instant leaves one valid copy.
        let copy_ok = |c: format::PageNo| {
            let mut b = [0u8; format::SUPERBLOCK_SIZE];
            self.media.read(c.offset(), &mut b);
            Superblock::decode(&b, self.media.pmem.len()).ok().map(|s| s.generation)
        };
        let [a, b] = format::SUPERBLOCK_COPIES;
        let order = match (copy_ok(a), copy_ok(b)) {
            (Some(ga), Some(gb)) if ga >= gb => [b, a],
            (Some(_), None) => [b, a],
            _ => [a, b],
        };
        for copy in order {
            self.media.write(copy.offset(), &bytes);
            self.media.flush(copy.offset(), bytes.len() as u64);
            self.media.fence();
        }
    }

    // ---- inode cache -----------------------------------------------------

    fn shard(&self, ino: InodeNo) -> &Mutex<Map<InodeNo, Arc<Inode>>> {
        &self.inodes[(ino.0 as usize) % INODE_SHARDS]
    }

    pub(crate) fn cache_insert(&self, inode: Arc<Inode>) {
        self.shard(inode.ino).lock().insert(inode.ino, inode);
    }

    pub(crate) fn cache_remove(&self, ino: InodeNo) {
        self.shard(ino).lock().remove(&ino);
    }

    /// The inode, rebuilt from its log at the first access (lazy rebuild).
    pub(crate) fn inode(&self, ino: InodeNo) -> FsResult<Arc<Inode>> {
        let mut shard = self.shard(ino).lock();
        if let Some(i) = shard.get(&ino) {
            return Ok(i.clone());
        }
        if ino.0 == 0 || ino.0 >= self.media.layout.inode_count {
            return Err(Errno::ENOENT);
        }
        let slot = self.media.read_slot(ino).map_err(|c| self.corrupt(c))?;
        let format::InodeSlot::Live { header, head, tail } = slot else {
            return Err(Errno::ENOENT);
        };
        let data = InodeData::load(&self.media, ino, header.kind, header.generation, head, tail)
            .map_err(|c| self.corrupt(c))?;
        self.pages
            .claim(&data.owned_pages())
            .map_err(|c| self.corrupt(format::corrupt!("inode {}: {}", ino.0, c.0)))?;
        let inode = Arc::new(Inode {
            ino,
            kind: header.kind,
            generation: header.generation,
            rdev: header.rdev,
            data: data.into(),
        });
        shard.insert(ino, inode.clone());
        Ok(inode)
    }

    /// Report a corrupt structure met while serving an operation.
    pub(crate) fn corrupt(&self, c: format::Corrupt) -> Errno {
        eprintln!("ferrite: {}", c);
        Errno::ECORRUPT
    }

    // ---- commit paths ----------------------------------------------------

    /// Commit entries staged in one inode's log: fence, store the new tail,
    /// flush, fence (NOVA's two ordering points). Then bring DRAM forward,
    /// free what the entries replaced, and collect dead log pages.
    pub(crate) fn commit_single(&self, inode: &Inode, d: &mut InodeData, staged: Staged) {
        let slot = self.media.slot_offset(inode.ino);
        self.media.fence();
        self.media.store_u64(slot + INODE_TAIL_OFFSET, staged.new_tail);
        self.media.flush(slot + INODE_TAIL_OFFSET, 8);
        // The DRAM update overlaps the write-back of the tail; it is private
        // to this locked inode. Pages it releases are freed only after the
        // fence: until the new tail is durable, a crash brings back the old
        // log, which still points at them.
        let extended = !staged.new_pages.is_empty();
        let mut freed = Vec::new();
        d.commit_staged(inode.kind, staged, &mut freed);
        self.media.fence();
        self.after_commit(inode, d, extended, freed);
    }

    /// DRAM side of a commit (after the tail is durable).
    pub(crate) fn finish_commit(&self, inode: &Inode, d: &mut InodeData, staged: Staged) {
        let extended = !staged.new_pages.is_empty();
        let mut freed = Vec::new();
        d.commit_staged(inode.kind, staged, &mut freed);
        self.after_commit(inode, d, extended, freed);
    }

    /// Free what a durable commit released, then collect dead log pages.
    fn after_commit(&self, inode: &Inode, d: &mut InodeData, extended: bool, freed: Vec<PageNo>) {
        for p in freed {
            self.pages.free(p, 1);
        }
        if extended && d.dead_log_pages() > 0 {
            let n = d.collect_garbage(&self.media, &self.pages, self.media.slot_offset(inode.ino));
            self.gc_pages.fetch_add(n as u64, Ordering::Relaxed);
        }
        if extended && d.compaction_due() {
            self.compact_log(inode, d);
        }
    }

    /// Thorough GC: rewrite the log with only the entries that must
    /// survive, switch head and tail together in one journal transaction,
    /// free the old pages and rebuild the DRAM state from the new log. Skipped
    /// (harmlessly) when there is no space for the new copy.
    fn compact_log(&self, inode: &Inode, d: &mut InodeData) {
        let Ok(staged) = d.stage_compaction(&self.media, &self.pages, inode.ino, inode.generation) else {
            return;
        };
        let slot = self.media.slot_offset(inode.ino);
        let head = staged.new_pages[0].offset();
        let mut tx = Transaction::default();
        tx.set(slot + format::INODE_HEAD_OFFSET, head);
        tx.set(slot + INODE_TAIL_OFFSET, staged.new_tail);
        self.journals.run(&self.media, &tx);
        let old = d.log.live.page_list();
        let old_pages = old.len() as u64;
        for &p in &old {
            self.pages.free(p, 1);
        }
        // Rebuild the DRAM state by applying the checkpoint's entries at
        // their new locations, as a first commit of a fresh inode would:
        // the same `apply` that replay uses, without reading the pool back.
        let mut fresh = InodeData::new_empty(inode.kind, Attrs::UNSET);
        let mut released = Vec::new();
        fresh.commit_staged(inode.kind, staged, &mut released);
        assert!(released.is_empty(), "a checkpoint of inode {} released pages", inode.ino.0);
        assert!(fresh.log.head == head, "checkpoint of inode {} starts elsewhere", inode.ino.0);
        fresh.open_count = d.open_count;
        *d = fresh;
        self.gc_pages.fetch_add(old_pages.saturating_sub(d.log.live.page_count() as u64), Ordering::Relaxed);
    }

    /// Free the pages an aborted stage allocated.
    pub(crate) fn unstage(&self, staged: Staged) {
        for p in staged.new_pages {
            self.pages.free(p, 1);
        }
    }

    /// Prepare a new inode: allocate its number and first log page, write
    /// its slot (identity, head, tail) and its first entries, all flushed but
    /// not live: the caller's transaction sets the state word.
    pub(crate) fn stage_new_inode(
        &self,
        ino: InodeNo,
        kind: FileType,
        rdev: u64,
        attrs: Attrs,
        mut extra: Vec<format::Entry>,
    ) -> FsResult<(Arc<Inode>, Staged)> {
        assert!(rdev == 0 || kind.has_rdev(), "a device number on a {kind:?}");
        let generation = self.media.slot_generation(ino).wrapping_add(1).max(1);
        let data = InodeData::new_empty(kind, attrs);
        let mut entries = vec![format::Entry::Attr(attrs.to_entry())];
        entries.append(&mut extra);
        let staged = data.stage(&self.media, &self.pages, ino, generation, entries)?;
        let slot = self.media.slot_offset(ino);
        let header = format::InodeHeader { ino, generation, kind, rdev }.encode();
        self.media.write(slot + 24, &header);
        let mut words = [0u8; 16];
        words[..8].copy_from_slice(&staged.new_pages[0].offset().to_le_bytes());
        words[8..].copy_from_slice(&staged.new_tail.to_le_bytes());
        self.media.write(slot + format::INODE_HEAD_OFFSET, &words);
        self.media.flush(slot, 64);
        let inode = Arc::new(Inode { ino, kind, generation, rdev, data: data.into() });
        Ok((inode, staged))
    }

    /// Lock several inodes for writing, in inode-number order (the global
    /// lock order that keeps multi-inode operations free of deadlock).
    /// Duplicates are locked once; the guards come back in the order asked.
    pub(crate) fn lock_all<'a>(&self, inodes: &[&'a Arc<Inode>]) -> Vec<Option<RwLockWriteGuard<'a, InodeData>>> {
        let mut order: Vec<usize> = (0..inodes.len()).collect();
        order.sort_by_key(|&i| inodes[i].ino);
        let mut guards: Vec<Option<RwLockWriteGuard<'a, InodeData>>> = (0..inodes.len()).map(|_| None).collect();
        let mut last: Option<InodeNo> = None;
        for i in order {
            if last == Some(inodes[i].ino) {
                continue;
            }
            last = Some(inodes[i].ino);
            guards[i] = Some(inodes[i].data.write());
        }
        guards
    }

    /// Mark an inode's slot free (durably) and release everything it owns.
    /// The caller holds the inode's lock and has made it unreachable.
    pub(crate) fn free_inode_now(&self, inode: &Inode, d: &mut InodeData) {
        let slot = self.media.slot_offset(inode.ino);
        self.media.commit_u64(slot + INODE_STATE_OFFSET, 0);
        self.release_inode(inode, d);
    }

    /// DRAM side of freeing an inode whose state word is already zero.
    pub(crate) fn release_inode(&self, inode: &Inode, d: &mut InodeData) {
        for p in d.owned_pages() {
            self.pages.free(p, 1);
        }
        d.alive = false;
        d.body = match inode.kind {
            FileType::Directory => crate::inode::Body::Dir(Default::default()),
            _ => crate::inode::Body::Pages(Default::default()),
        };
        d.log.live = Default::default();
        self.cache_remove(inode.ino);
        self.inodes_free.free(inode.ino);
    }

    pub(crate) fn read_pool(&self, page: PageNo, within: usize, buf: &mut [u8]) {
        self.media.pmem.read(PoolOffset(page.offset() + within as u64), buf)
    }
}

impl Drop for Ferrite {
    fn drop(&mut self) {
        // Without `unmount` the pool stays marked dirty: the next mount
        // recovers it exactly as after a crash.
        let _ = self.unmounted.load(Ordering::SeqCst);
    }
}

/// Read and check the superblock of a pool without mounting it: the valid
/// copy with the higher generation.
pub fn read_superblock(pmem: &Pmem) -> Result<Superblock, PoolError> {
    let mut best: Option<Superblock> = None;
    let mut errors = Vec::new();
    for copy in format::SUPERBLOCK_COPIES {
        let mut b = [0u8; format::SUPERBLOCK_SIZE];
        if pmem.read_checked(PoolOffset(copy.offset()), &mut b).is_none() {
            errors.push(SuperblockError::NotFerrite);
            continue;
        }
        match Superblock::decode(&b, pmem.len()) {
            Ok(sb) => {
                if best.is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if let Some(sb) = best {
        return Ok(sb);
    }
    if let Some(SuperblockError::Version(v)) = errors.iter().find(|e| matches!(e, SuperblockError::Version(_))) {
        return Err(PoolError::Version { found: *v, supported: format::FORMAT_VERSION });
    }
    if let Some(SuperblockError::Corrupt(c)) = errors.iter().find(|e| matches!(e, SuperblockError::Corrupt(_))) {
        return Err(PoolError::Corrupt(c.0.clone()));
    }
    Err(PoolError::NotFerrite)
}
