//! The file system object: format, mount, unmount, the inode cache, and the
//! commit paths every operation shares.

use crate::alloc::{InodeAllocator, PageAllocator};
use crate::format::{self, Layout, MountState, PageNo, Superblock, SuperblockError, PAGE_SIZE};
use crate::inode::{Attrs, Inode, InodeData};
use crate::journal::Journals;
use crate::media::Media;
use crate::types::{limits, Clock, Errno, FileMode, FileType, FsResult, InodeNo, StatFs, SystemClock};
use ferrite_pmem::{Pmem, PmemError, PoolOffset};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
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
    /// The consistency mode of regular files created from now on
    /// (`Ferrite::set_default_mode` changes it later).
    pub default_mode: FileMode,
    /// Mount in buffered mode (docs/DESIGN.md, "Buffered mode"): every
    /// operation atomic, durable in the background in the order operations
    /// returned, within the given lag; `None` mounts strict.
    pub buffered: Option<crate::buffered::BufferedOptions>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            clock: Arc::new(SystemClock),
            recovery_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).min(8),
            default_mode: FileMode::Strict,
            buffered: None,
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

/// A mounted Ferrite file system. Send + Sync: share it with `Arc`.
pub struct Ferrite {
    pub(crate) media: Media,
    pub(crate) sb: Mutex<Superblock>,
    pub(crate) pages: Arc<PageAllocator>,
    pub(crate) inodes_free: Arc<InodeAllocator>,
    pub(crate) journals: Arc<Journals>,
    pub(crate) inodes: crate::inode_cache::InodeCache,
    /// The root directory, held once looked up: every absolute path starts
    /// there, and taking it from the inode cache (a slot lock and a
    /// reference count, both writes) on every path made two threads fight
    /// over the root's cache lines. The root is never freed.
    root: std::sync::OnceLock<Arc<Inode>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Serializes renames across directories, so that the check "not into
    /// its own subtree" sees a stable tree (Linux's s_vfs_rename_mutex).
    pub(crate) rename_lock: Mutex<()>,
    pub(crate) report: MountReport,
    unmounted: AtomicBool,
    pub(crate) gc_pages: AtomicU64,
    /// Of those, pages of other inodes' logs collected for a change that
    /// found no page (`collect_other_logs`).
    pub(crate) gc_pages_for_others: AtomicU64,
    /// Some cached inode may hold dead log pages (beyond its tail page)
    /// that no visit of other logs has seen: set by every change that ends
    /// with such pages in its log (`note_dead_log_pages`), cleared when a
    /// visit starts, set again for what the visit could not take. With it
    /// clear, a change refused for space skips the visit of the whole inode
    /// cache, which costs milliseconds with 100,000 cached inodes and would
    /// find nothing (`collect_other_logs`). Per engine, never per process,
    /// so that the crash harness's runs do not depend on each other.
    pub(crate) dead_pages_unvisited: AtomicBool,
    /// Inodes whose logs crash recovery found holding dead pages (for a
    /// directory, whose names recovery does not index: a log of more than
    /// one page), not rebuilt yet. Recovery reads every log but collects
    /// nothing, and a visit sees only cached inodes: a visit rebuilds these
    /// first (`rebuild_logs_recovery_found`), so that a full pool right
    /// after a crash does not refuse changes while logs of files nobody
    /// has touched since hold pages nothing needs. Empty after a clean
    /// mount (a clean unmount leaves no dead log page) and once visited.
    pub(crate) logs_recovery_found: Mutex<Vec<InodeNo>>,
    /// Visits of the cached inodes' logs made since mount.
    pub(crate) other_log_visits: AtomicU64,
    /// Logs compacted (thorough GC) since mount.
    pub(crate) compactions: AtomicU64,
    /// Mode of new regular files (`FileMode as u8`).
    pub(crate) default_mode: AtomicU8,
    /// fsync-atomic files with an uncommitted epoch: what `sync_all` and
    /// unmount commit.
    pub(crate) pending_files: Mutex<crate::Set<InodeNo>>,
    pub(crate) epoch_commits: AtomicU64,
    /// Live zero-copy views and patch buffers (`zerocopy.rs`).
    pub(crate) zero_copy: crate::zerocopy::ZeroCopy,
    /// The queue and persister of a buffered mount (`buffered.rs`); `None`
    /// in a strict mount.
    pub(crate) buffered: Option<Arc<crate::buffered::Buffered>>,
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
        media.fill_nt(PoolOffset(0), layout.data_start.0 * PAGE_SIZE, 0);
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
            mode: FileMode::Strict,
        };
        let root = crate::commit::NewInode {
            ino: InodeNo::ROOT,
            kind: FileType::Directory,
            rdev: 0,
            attrs,
            entries: crate::log::Entries::new(),
        };
        fs.commit_journaled(crate::commit::Parts::new(), &mut [], Some(root), crate::commit::Fresh::none())
            .map_err(|e| PoolError::Invalid(format!("pool too small for the root directory: {e:?}")))?;
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
        if let Some(b) = &opts.buffered {
            b.validate().map_err(PoolError::Invalid)?;
        }
        let fs = Ferrite::new_mounted(media, sb, opts.clock.clone(), MountReport::default());
        let mut fs = crate::recovery::mount_existing(fs, opts.recovery_threads.max(1))?;
        fs.set_default_mode(opts.default_mode);
        if let Some(b) = &opts.buffered {
            let buffered = crate::buffered::Buffered::start(
                b.clone(),
                &fs.media,
                fs.pages.clone(),
                fs.inodes_free.clone(),
                fs.journals.clone(),
            );
            // Running out of pages or inode numbers with frees waiting for
            // their batch: persist the queue and try once more.
            let weak = Arc::downgrade(&buffered);
            fs.pages.set_reclaim(Box::new(move || weak.upgrade().is_some_and(|b| b.reclaim())));
            let weak = Arc::downgrade(&buffered);
            fs.inodes_free.set_reclaim(Box::new(move || weak.upgrade().is_some_and(|b| b.reclaim())));
            fs.buffered = Some(buffered);
        }
        Ok(fs)
    }

    pub(crate) fn new_mounted(media: Media, sb: Superblock, clock: Arc<dyn Clock>, report: MountReport) -> Ferrite {
        let lanes = media.layout.lane_count as usize;
        let inode_count = media.layout.inode_count;
        Ferrite {
            pages: Arc::new(PageAllocator::new(lanes, media.layout.data_start, media.layout.total_pages)),
            inodes_free: Arc::new(InodeAllocator::new(lanes)),
            journals: Arc::new(Journals::new(lanes)),
            media,
            sb: Mutex::new(sb),
            inodes: crate::inode_cache::InodeCache::new(inode_count),
            root: std::sync::OnceLock::new(),
            clock,
            rename_lock: Mutex::new(()),
            report,
            unmounted: AtomicBool::new(false),
            gc_pages: AtomicU64::new(0),
            gc_pages_for_others: AtomicU64::new(0),
            // Nothing is cached yet: each lazy rebuild notes the dead pages
            // its log kept from before the mount (`inode`).
            dead_pages_unvisited: AtomicBool::new(false),
            logs_recovery_found: Mutex::new(Vec::new()),
            other_log_visits: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            default_mode: AtomicU8::new(FileMode::Strict as u8),
            pending_files: Mutex::new(crate::Set::default()),
            epoch_commits: AtomicU64::new(0),
            zero_copy: Default::default(),
            buffered: None,
        }
    }

    /// Unmount cleanly: save the allocator and mark the pool clean, so the
    /// next mount skips the log scan. Front ends release their handles
    /// first, so that unlinked files are freed (`Session::unmount` closes
    /// its descriptors; the kernel forgets every inode before a FUSE
    /// unmount). Dropping a `Ferrite` without this is a crash as far as the
    /// pool is concerned: the next mount recovers.
    pub fn unmount(self) -> FsResult<()> {
        // A buffered mount drains its queue first, so that what follows
        // (and the saved allocator) sees every operation durable.
        if let Some(b) = &self.buffered {
            let drained = b.persist_all();
            b.stop(true);
            drained?;
        }
        // Views and buffers first: their pins and pages go back to the
        // allocator before it is saved (a crash needs no such step).
        self.release_zero_copy();
        // A clean unmount is a commit point of every fsync-atomic file.
        self.commit_all_pending();
        // Dead log pages go back before the allocator is saved.
        self.collect_every_log(usize::MAX);
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

    /// Of `gc_pages_collected`, the pages collected from other inodes' logs
    /// for a change that found no page (docs/DESIGN.md, "Garbage
    /// collection").
    pub fn gc_pages_collected_for_others(&self) -> u64 {
        self.gc_pages_for_others.load(Ordering::Relaxed)
    }

    /// Visits of the cached inodes' logs for dead pages (each tries every
    /// cached inode): by a change or a patch buffer that found no page,
    /// and by a clean unmount. None is made while no log holds a dead page
    /// that an earlier visit has not seen.
    pub fn other_log_visits(&self) -> u64 {
        self.other_log_visits.load(Ordering::Relaxed)
    }

    /// Logs compacted by thorough GC since mount (the crash harness checks
    /// with it that its compaction scenarios really compact).
    pub fn log_compactions(&self) -> u64 {
        self.compactions.load(Ordering::Relaxed)
    }

    pub fn free_pages(&self) -> u64 {
        self.pages.free_pages()
    }

    /// Pages kept back for operations that release space (docs/DESIGN.md,
    /// "Space for removals").
    pub fn removal_reserve_pages(&self) -> u64 {
        self.pages.removal_reserve()
    }

    /// Free pages beyond the removal reserve: what ordinary changes may
    /// take (statfs's available blocks).
    pub fn available_pages(&self) -> u64 {
        self.pages.free_and_available().1
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

    /// The cached inode, if it has been rebuilt since mount.
    pub(crate) fn cached(&self, ino: InodeNo) -> Option<Arc<Inode>> {
        self.inodes.get(ino)
    }

    pub(crate) fn cache_insert(&self, inode: Arc<Inode>) {
        self.inodes.insert(inode);
    }

    pub(crate) fn cache_remove(&self, ino: InodeNo) {
        self.inodes.remove(ino);
    }

    /// The root directory, borrowed: no lock and no reference count taken.
    pub(crate) fn root(&self) -> FsResult<&Arc<Inode>> {
        if let Some(r) = self.root.get() {
            return Ok(r);
        }
        let r = self.inode(InodeNo::ROOT)?;
        Ok(self.root.get_or_init(|| r))
    }

    /// The inode, rebuilt from its log at the first access (lazy rebuild).
    pub(crate) fn inode(&self, ino: InodeNo) -> FsResult<Arc<Inode>> {
        // The slot stays locked while the inode is rebuilt, so that two
        // threads never rebuild it twice.
        let Some(mut cached) = self.inodes.slot(ino) else {
            return Err(Errno::ENOENT);
        };
        self.cached_or_rebuilt(ino, &mut cached)
    }

    /// The inode in `cached`, its locked cache slot, rebuilt from its log
    /// and stored there if it was not cached yet.
    fn cached_or_rebuilt(&self, ino: InodeNo, cached: &mut Option<Arc<Inode>>) -> FsResult<Arc<Inode>> {
        if let Some(i) = cached.as_ref() {
            return Ok(i.clone());
        }
        if ino.0 == 0 {
            return Err(Errno::ENOENT);
        }
        // Freed in DRAM, its slot still live on media until the free's batch
        // is durable: gone, as far as lookups go.
        if self.buffered.as_ref().is_some_and(|b| b.is_dying(ino)) {
            return Err(Errno::ENOENT);
        }
        let slot = self.media.read_slot(ino).map_err(|c| self.corrupt(c))?;
        let format::InodeSlot::Live { header, head, tail, attr } = slot else {
            return Err(Errno::ENOENT);
        };
        let data = InodeData::load(&self.media, ino, header.kind, header.generation, head, tail, attr)
            .map_err(|c| self.corrupt(c))?;
        self.pages
            .claim(&data.owned_pages())
            .map_err(|c| self.corrupt(format::corrupt!("inode {}: {}", ino.0, c.0)))?;
        // Its log may keep pages that died before the last unmount or crash.
        self.note_dead_log_pages(&data);
        let inode = Arc::new(Inode::new(ino, header.kind, header.generation, header.rdev, data));
        *cached = Some(inode.clone());
        Ok(inode)
    }

    /// Rebuild up to `rebuilds_max` of the inodes whose logs crash
    /// recovery found holding dead pages (`logs_recovery_found`), for a
    /// visit of the cached logs that is about to start: each rebuild notes
    /// what its log keeps (`note_dead_log_pages`), and the visit then takes
    /// it. Never waits, as the visit's caller may hold inode locks: an
    /// inode whose cache slot another thread holds (it is rebuilding it)
    /// stays on the list, and so does the whole list while another visit
    /// rebuilds from it. An inode cached since, freed since, or whose log
    /// is corrupt (reported here and at its next use) leaves the list.
    /// Returns whether any was left.
    pub(crate) fn rebuild_logs_recovery_found(&self, rebuilds_max: usize) -> bool {
        let Some(mut found) = self.logs_recovery_found.try_lock() else {
            return true;
        };
        let mut held_elsewhere = Vec::new();
        let mut rebuilds = 0;
        while rebuilds < rebuilds_max {
            let Some(ino) = found.pop() else { break };
            match self.inodes.try_slot(ino) {
                None => held_elsewhere.push(ino),
                Some(mut cached) => {
                    if cached.is_none() {
                        rebuilds += 1;
                    }
                    let _ = self.cached_or_rebuilt(ino, &mut cached);
                }
            }
        }
        found.extend(held_elsewhere);
        !found.is_empty()
    }

    /// Report a corrupt structure met while serving an operation.
    pub(crate) fn corrupt(&self, c: format::Corrupt) -> Errno {
        eprintln!("ferrite: {}", c);
        Errno::ECORRUPT
    }

    pub(crate) fn read_pool(&self, page: PageNo, within: usize, buf: &mut [u8]) {
        self.media.read(page.offset() + within as u64, buf)
    }
}

// ---- open handles and statistics -------------------------------------

impl Ferrite {
    /// Count an open handle, so that the inode outlives its last name.
    pub fn open_ino(&self, ino: InodeNo) -> FsResult<Arc<Inode>> {
        let inode = self.inode(ino)?;
        self.open_inode(&inode)?;
        Ok(inode)
    }

    /// Count one more open handle on an inode already held (ENOENT once it
    /// has been freed).
    pub(crate) fn open_inode(&self, inode: &Arc<Inode>) -> FsResult<()> {
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        d.open_count += 1;
        Ok(())
    }

    /// Drop an open handle; the last one frees an unlinked inode.
    pub fn release_ino(&self, inode: &Inode) {
        let mut d = inode.lock_write();
        assert!(d.open_count > 0, "release without open");
        d.open_count -= 1;
        if d.open_count == 0 && d.alive && d.attrs.nlink == 0 {
            self.free_inode_now(inode, &mut d);
        }
    }

    pub fn fs_stats(&self) -> StatFs {
        let l = self.media.layout;
        let (free, available) = self.pages.free_and_available();
        StatFs {
            block_size: PAGE_SIZE as u32,
            blocks: l.total_pages,
            blocks_free: free,
            blocks_avail: available,
            files: l.inode_count - 1,
            files_free: self.inodes_free.free_count(),
            name_max: limits::NAME_MAX as u32,
        }
    }
}

impl Drop for Ferrite {
    fn drop(&mut self) {
        // Without `unmount` the pool stays marked dirty: the next mount
        // recovers it exactly as after a crash.
        let _ = self.unmounted.load(Ordering::SeqCst);
        // A buffered mount dropped without unmount persists nothing more:
        // its persister stops where it is, as in a crash (after a clean
        // unmount the queue is already empty and the thread gone).
        if let Some(b) = &self.buffered {
            b.stop(false);
        }
    }
}

/// Read and check the superblock of a pool without mounting it: the valid
/// copy with the higher generation.
pub fn read_superblock(pmem: &Pmem) -> Result<Superblock, PoolError> {
    let mut best: Option<Superblock> = None;
    let mut errors = Vec::new();
    for copy in format::SUPERBLOCK_COPIES {
        let mut b = [0u8; format::SUPERBLOCK_SIZE];
        if pmem.read_checked(copy.offset(), &mut b).is_none() {
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
