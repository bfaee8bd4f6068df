//! One inode in DRAM: its attributes, its log position and GC accounting,
//! and its index (file page map or directory name index), rebuilt from the
//! log on first access (NOVA's inode.c).
//!
//! The log is the only persistent record of an inode's state (`log.rs`).
//! Every change appends entries after the tail and commits them
//! (`commit.rs`); after the commit, the same `apply` function that rebuilds
//! an inode from its log at mount (`replay.rs`) brings the DRAM state
//! forward, so the state after an operation and the state a remount
//! rebuilds cannot drift apart. Garbage collection is in `gc.rs`.

use crate::format::{AttrEntry, PageNo, PoolOffset, NO_LOG, PAGE_SIZE};
pub use crate::log::{Liveness, Log, Staged};
use crate::types::{FileMode, FileType, InodeNo, Stat, TimeSpec};
use crate::Map;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32};

/// Attributes of an inode, as the log gives them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Attrs {
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    /// Stored link count. For directories it is 1 while linked and 0 once
    /// removed; `stat` reports 2 + subdirectories for a linked directory.
    pub nlink: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub size: u64,
    pub parent: InodeNo,
    /// Consistency mode (regular files; strict for everything else).
    pub mode: FileMode,
}

impl Attrs {
    /// Before the first Attr entry is applied (replay, checkpoint rebuild).
    pub const UNSET: Attrs = Attrs {
        perm: 0,
        uid: 0,
        gid: 0,
        nlink: 0,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        size: 0,
        parent: InodeNo(0),
        mode: FileMode::Strict,
    };

    pub fn to_entry(self) -> AttrEntry {
        AttrEntry {
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            atime_ns: self.atime_ns,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            parent: self.parent,
            mode: self.mode,
        }
    }
}

/// Where one file page lives, and which entry maps it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageRef {
    pub pool: PageNo,
    /// Where the Write entry mapping it lies in the log.
    pub entry: PoolOffset,
}

/// A live name in a directory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Dentry {
    pub ino: InodeNo,
    pub kind: FileType,
    /// Sequence number of the DentryAdd entry: the readdir cookie.
    pub seq: u64,
    /// Where the DentryAdd entry lies in the log.
    pub entry: PoolOffset,
}

/// The longest name kept inline in a `DirName`.
const DIR_NAME_INLINE_MAX: usize = 22;

/// A name in a directory's index. Names of up to 22 bytes (most names)
/// sit inline in the hash table's bucket, so that a lookup compares the
/// name without following a pointer: in a directory too big for the cache,
/// that pointer was a dependent miss on every lookup. Longer names go to
/// the heap. Hashes and compares as its bytes, so the index is searched
/// with a plain `&[u8]`.
#[derive(Clone)]
pub enum DirName {
    Inline { len: u8, bytes: [u8; DIR_NAME_INLINE_MAX] },
    Heap(Box<[u8]>),
}

impl DirName {
    pub fn new(name: &[u8]) -> DirName {
        if name.len() <= DIR_NAME_INLINE_MAX {
            let mut bytes = [0u8; DIR_NAME_INLINE_MAX];
            bytes[..name.len()].copy_from_slice(name);
            DirName::Inline { len: name.len() as u8, bytes }
        } else {
            DirName::Heap(name.into())
        }
    }
}

impl std::ops::Deref for DirName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            DirName::Inline { len, bytes } => &bytes[..*len as usize],
            DirName::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for DirName {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl PartialEq for DirName {
    fn eq(&self, other: &DirName) -> bool {
        **self == **other
    }
}

impl Eq for DirName {}

impl std::hash::Hash for DirName {
    /// As the bytes hash, which `Borrow<[u8]>` requires.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (**self).hash(h)
    }
}

impl std::fmt::Debug for DirName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

const _: () = assert!(std::mem::size_of::<DirName>() == 24);

/// A name's value in a directory's index: its dentry, and the inode it
/// names once a lookup has held it. A lookup then finds the inode in the
/// same bucket as the name instead of in the inode cache: in a directory
/// too big for the processor's cache, one dependent miss less. The Arc is
/// the inode cache's own (the cache replaces an inode only when its number
/// is freed and reused, and a name keeps its inode from being freed), and
/// it cannot form a cycle: a directory is named by one parent only.
pub struct NameSlot {
    pub de: Dentry,
    pub inode: std::sync::OnceLock<std::sync::Arc<Inode>>,
}

impl NameSlot {
    pub fn new(de: Dentry) -> NameSlot {
        NameSlot { de, inode: std::sync::OnceLock::new() }
    }
}

impl std::ops::Deref for NameSlot {
    type Target = Dentry;
    fn deref(&self) -> &Dentry {
        &self.de
    }
}

#[derive(Default)]
pub struct DirIndex {
    pub names: Map<DirName, NameSlot>,
    /// Names in cookie order, for readdir.
    pub by_seq: DirOrder,
    pub subdirs: u32,
}

/// Holes a directory's order keeps before it squeezes them out (and then
/// only once they outnumber the names).
const DIR_ORDER_HOLES_MIN: usize = 16;

/// A directory's names in cookie order (their DentryAdd's sequence
/// number), for readdir. A name is only ever added with a sequence number
/// above every earlier one (replay refuses a log whose numbers do not
/// increase, and new entries take the log's next number), so the order is
/// an append-only list: adding is a push, removing leaves a hole found by
/// binary search, and holes are squeezed out once they outnumber the names
/// (each name is moved at most once per squeeze, so amortised O(1)). A
/// B-tree here paid a node allocation every few names and a rebalance on
/// removal, about 8 % of a create.
///
/// Names are most often removed in cookie order: `rm -rf` and `find
/// -delete` remove what readdir lists, in its order. So the first slot that
/// may hold a name is kept (`front`), and a removal that finds its cookie
/// there skips the search (about 5 % of an unlink or rmdir in a directory
/// of 10,000 names, whose search was 14 dependent, unpredictable steps).
#[derive(Default)]
pub struct DirOrder {
    slots: Vec<(u64, Option<DirName>)>,
    holes: usize,
    /// Every slot before this index is a hole.
    front: usize,
}

impl DirOrder {
    /// Add `name` at cookie `seq`, above every cookie before it.
    pub fn push(&mut self, seq: u64, name: DirName) {
        assert!(self.slots.last().is_none_or(|last| last.0 < seq), "directory cookie {seq} added after a higher one");
        self.slots.push((seq, Some(name)));
    }

    /// Remove the name at cookie `seq`, if there is one.
    pub fn remove(&mut self, seq: u64) -> Option<DirName> {
        let k = match self.slots.get(self.front) {
            Some(s) if s.0 == seq => self.front,
            _ => self.slots.binary_search_by_key(&seq, |s| s.0).ok()?,
        };
        let name = self.slots[k].1.take()?;
        self.holes += 1;
        if self.holes == self.slots.len() {
            self.slots.clear();
            self.holes = 0;
            self.front = 0;
        } else if self.holes > DIR_ORDER_HOLES_MIN && self.holes * 2 > self.slots.len() {
            self.slots.retain(|s| s.1.is_some());
            self.holes = 0;
            self.front = 0;
            if self.slots.capacity() > 4 * self.slots.len() {
                self.slots.shrink_to(2 * self.slots.len());
            }
        } else if k == self.front {
            // Each hole is stepped over once between squeezes: amortised
            // O(1). A name remains past the front (the list is not all
            // holes), so this stops inside the list.
            while self.slots[self.front].1.is_none() {
                self.front += 1;
            }
        }
        Some(name)
    }

    /// The names with a cookie above `cookie`, in cookie order.
    pub fn after(&self, cookie: u64) -> impl Iterator<Item = (u64, &DirName)> {
        let start = self.slots.partition_point(|s| s.0 <= cookie);
        self.slots[start..].iter().filter_map(|(seq, name)| name.as_ref().map(|n| (*seq, n)))
    }

    /// Every name, in cookie order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &DirName)> {
        self.after(0)
    }

    pub fn len(&self) -> usize {
        self.slots.len() - self.holes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub enum Body {
    /// Regular files and symlinks: file page -> pool page.
    Pages(crate::pagemap::PageMap),
    Dir(DirIndex),
}

/// An extended attribute's value and the location of its XattrSet entry.
pub type Xattr = (Box<[u8]>, PoolOffset);

/// What an fsync-atomic file has done since its last commit point: its
/// log runs past the tail stored in its slot (what a crash brings back),
/// and DRAM already shows the result (docs/DESIGN.md, "fsync-atomic mode").
pub struct Pending {
    /// Size or times changed by writes into this epoch's pages, which log
    /// no entry: the commit first appends a size-only Truncate with them.
    pub dirty_attrs: bool,
    /// Pool pages the pending entries released that the committed log
    /// still references: freed once the commit is durable.
    pub deferred: Vec<PageNo>,
    /// Pool pages allocated in this epoch, referenced by pending entries
    /// only: written in place (no durable view holds them) and freed at
    /// once when released.
    pub epoch_pages: crate::Set<PageNo>,
    /// One page set aside whenever `dirty_attrs` is set, so that the
    /// commit can always append its closing entry: a commit point never
    /// fails for lack of space.
    pub reserve: Option<PageNo>,
}

/// The DRAM state of an inode, behind its lock. In declared order
/// (`repr(C)`): what `stat` reads comes first, so that with the fields of
/// `Inode` before it, a `stat` of an inode not in the cache touches two
/// adjacent cache lines rather than lines spread over the whole struct.
#[repr(C)]
pub struct InodeData {
    /// False once the inode has been freed; every operation that finds a
    /// dead inode treats it as gone (ENOENT) or retries its lookup.
    pub alive: bool,
    /// A file made by O_TMPFILE without O_EXCL that no name has reached yet:
    /// `link_in` may give it its first name although its link count is 0
    /// (Linux's I_LINKABLE). DRAM only: a crash frees such a file, as every
    /// inode without a name.
    pub linkable: bool,
    /// Open descriptors and handles; an unlinked inode is freed at the last close.
    pub open_count: u32,
    pub attrs: Attrs,
    pub body: Body,
    pub log: Log,
    /// Extended attributes: name -> (value, location of the XattrSet entry).
    pub xattrs: BTreeMap<Box<[u8]>, Xattr>,
    /// The uncommitted epoch of an fsync-atomic file, if any.
    pub pending: Option<Box<Pending>>,
}

/// An inode in DRAM. In declared order (`repr(C)`), what a lookup and a
/// `stat` read first (see `InodeData`).
#[repr(C)]
pub struct Inode {
    pub ino: InodeNo,
    /// Device number of a device node (fixed at creation), else 0.
    pub rdev: u64,
    pub generation: u32,
    pub kind: FileType,
    /// Known to hold nothing a write, truncate or chown would take away:
    /// no set-user-ID or set-group-ID bit and no `security.capability`
    /// (Linux's S_NOSEC). Set when the inode is made or loaded with neither,
    /// or when a check under the lock finds neither; made false by every
    /// change that could add one (a chmod, a setxattr of the capability),
    /// so a write pays one load to skip the check.
    pub nosec: AtomicBool,
    /// An fsync-atomic epoch is open (`InodeData::pending` is `Some`): set
    /// and cleared under the write lock, with `pending`, by the write that
    /// opens the epoch (before it returns) and by the commit or free that
    /// ends it. So an fsync ordered after that write sees it without
    /// taking the lock, and a strict file's fsync takes no lock at all.
    pub epoch_pending: AtomicBool,
    pub data: RwLock<InodeData>,
    /// Recent reads and writes of the file, for the fold policy of small
    /// writes (Libnvmmio's read/write mix; halved as they grow).
    pub reads: AtomicU32,
    /// Calls in `write_inode_at` on this file right now: a write that finds
    /// another one in progress copies its data before taking the lock.
    pub writers_in_flight: AtomicU32,
    pub writes: AtomicU32,
    /// Buffered mode: the sequence number of the last queued operation that
    /// changed this inode (0: none since mount). Its log may be collected
    /// only once that operation is durable. Set under the write lock.
    pub last_seq: std::sync::atomic::AtomicU64,
}

impl Inode {
    pub fn new(ino: InodeNo, kind: FileType, generation: u32, rdev: u64, data: InodeData) -> Inode {
        // `data` is whole (a new inode's, or one replayed from its log), so
        // what it holds is known here.
        let nosec = data.attrs.perm & 0o6000 == 0 && !data.xattrs.contains_key(crate::perm::CAPABILITY_XATTR);
        Inode {
            ino,
            kind,
            generation,
            rdev,
            nosec: AtomicBool::new(nosec),
            epoch_pending: AtomicBool::new(data.pending.is_some()),
            data: data.into(),
            reads: AtomicU32::new(0),
            writers_in_flight: AtomicU32::new(0),
            writes: AtomicU32::new(0),
            last_seq: Default::default(),
        }
    }

    /// stat of this inode, whose data the caller has locked.
    pub fn stat(&self, d: &InodeData) -> Stat {
        Stat { rdev: self.rdev, ..d.stat(self.ino, self.kind) }
    }

    /// The read lock. Every wait for an inode's lock goes through
    /// `lock_read` or `lock_write` (two callers only `try_read` or
    /// `try_write` and go on without it): they wait on plain loads while another
    /// thread holds the lock, take it as soon as it looks free, and block
    /// only after `CONTENDED_SPIN_ROUNDS`. The lock's critical sections
    /// are a few microseconds (a commit's stores and fences, a DRAM
    /// update), and a thread that blocks pays a cross-core wake-up, tens
    /// of microseconds in these VMs. parking_lot's own wait spins a few
    /// times, then calls `sched_yield`, and parks at once when another
    /// waiter is already parked, so one slow hand-over became a convoy:
    /// two threads working in one directory (`varmail`) made 750–1,600
    /// context switches in a five-round strict run and 1,150–1,700 in a
    /// buffered one, most of them at lookups (BENCHMARKS.md, "Two threads
    /// in one directory"). Two threads writing one file made
    /// 279,000 `sched_yield` calls in a one-round `scaling-2t` run of about
    /// a second before the write lock waited this way (issue 14).
    #[inline]
    pub fn lock_read(&self) -> RwLockReadGuard<'_, InodeData> {
        match self.data.try_read() {
            Some(d) => d,
            None => self.lock_read_contended(),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_read_contended(&self) -> RwLockReadGuard<'_, InodeData> {
        let free = || if self.data.is_locked_exclusive() { None } else { self.data.try_read() };
        crate::spin_until(CONTENDED_SPIN_ROUNDS, free).unwrap_or_else(|| self.data.read())
    }

    /// The write lock, waiting as `lock_read` does.
    #[inline]
    pub fn lock_write(&self) -> RwLockWriteGuard<'_, InodeData> {
        match self.data.try_write() {
            Some(d) => d,
            None => self.lock_write_contended(),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_write_contended(&self) -> RwLockWriteGuard<'_, InodeData> {
        let free = || if self.data.is_locked() { None } else { self.data.try_write() };
        crate::spin_until(CONTENDED_SPIN_ROUNDS, free).unwrap_or_else(|| self.data.write())
    }
}

/// How long `Inode::lock_read` and `lock_write` wait before they block:
/// rounds of `crate::spin_until`, about 50 µs on the AMD VM (a pause
/// takes 25 ns there). A critical section is a few microseconds; a holder
/// that takes longer has been preempted or is doing a long operation (a
/// large write, a truncate), and then blocking is the better wait.
const CONTENDED_SPIN_ROUNDS: u32 = 512;

impl InodeData {
    pub fn new_empty(kind: FileType, attrs: Attrs) -> InodeData {
        InodeData {
            alive: true,
            attrs,
            log: Log { head: NO_LOG, tail: NO_LOG, next_seq: 1, live: Liveness::default() },
            body: match kind {
                FileType::Directory => Body::Dir(DirIndex::default()),
                _ => Body::Pages(Default::default()),
            },
            xattrs: BTreeMap::new(),
            linkable: false,
            open_count: 0,
            pending: None,
        }
    }

    pub fn pages(&self) -> &crate::pagemap::PageMap {
        match &self.body {
            Body::Pages(p) => p,
            Body::Dir(_) => panic!("page map of a directory"),
        }
    }

    pub fn dir(&self) -> &DirIndex {
        match &self.body {
            Body::Dir(d) => d,
            Body::Pages(_) => panic!("directory index of a file"),
        }
    }

    /// stat without the device number (see `Inode::stat`).
    fn stat(&self, ino: InodeNo, kind: FileType) -> Stat {
        let a = &self.attrs;
        let (nlink, size, blocks) = match &self.body {
            Body::Dir(d) => (if a.nlink == 0 { 0 } else { 2 + d.subdirs }, 4096, self.log.live.page_count() as u64 * 8),
            Body::Pages(p) => (a.nlink, a.size, p.len() as u64 * 8),
        };
        Stat {
            ino,
            kind,
            perm: a.perm & 0o7777,
            nlink,
            uid: a.uid,
            gid: a.gid,
            size,
            blocks,
            atime: TimeSpec::from_ns(a.atime_ns),
            mtime: TimeSpec::from_ns(a.mtime_ns),
            ctime: TimeSpec::from_ns(a.ctime_ns),
            blksize: PAGE_SIZE as u32,
            rdev: 0,
        }
    }

    /// Bring the DRAM state forward after `staged` committed. Pool pages no
    /// longer referenced go to `freed` (to free once the commit is durable).
    pub fn commit_staged(&mut self, kind: FileType, staged: Staged, freed: &mut crate::PageList) {
        if self.log.tail == NO_LOG {
            if let Some(first) = staged.new_pages.first() {
                self.log.head = first.offset();
            }
        }
        for &p in &staged.new_pages {
            self.log.live.push_page(p);
        }
        self.log.tail = staged.new_tail;
        for (e, &(loc, seq)) in staged.entries.iter().zip(&staged.locs) {
            self.apply(kind, e, loc, seq, freed).expect("an entry built by the engine applies cleanly");
        }
    }

    /// Every pool page this inode owns: its log pages and its data pages.
    pub fn owned_pages(&self) -> Vec<PageNo> {
        match &self.body {
            Body::Pages(map) => {
                let mut v = self.log.live.page_list_with_room(map.len());
                v.extend(map.values().map(|r| r.pool));
                v
            }
            Body::Dir(_) => self.log.live.page_list(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! `DirOrder` against a B-tree holding the same names: after every add
    //! and removal (in creation order, at random, in reverse, all of them,
    //! and across the squeezes that drop holes), both list the same names in the same
    //! order after every cookie probed. The choices come from a fixed
    //! linear congruential sequence, so a failure reproduces as is.
    use super::{DirName, DirOrder};
    use std::collections::BTreeMap;

    fn check(order: &DirOrder, model: &BTreeMap<u64, Vec<u8>>, probes: &[u64]) {
        assert_eq!(order.len(), model.len());
        assert!(order.slots[..order.front].iter().all(|s| s.1.is_none()), "a name before the front");
        assert!(order.slots.is_empty() || order.slots[order.front].1.is_some(), "the front is a hole");
        let all: Vec<(u64, Vec<u8>)> = order.iter().map(|(s, n)| (s, n.to_vec())).collect();
        let want: Vec<(u64, Vec<u8>)> = model.iter().map(|(&s, n)| (s, n.clone())).collect();
        assert_eq!(all, want);
        for &c in probes {
            let got: Vec<u64> = order.after(c).map(|(s, _)| s).collect();
            let want: Vec<u64> = model.range(c + 1..).map(|(&s, _)| s).collect();
            assert_eq!(got, want, "names after cookie {c}");
        }
    }

    #[test]
    fn dir_order_matches_a_btree() {
        let mut order = DirOrder::default();
        let mut model = BTreeMap::new();
        let mut next_seq = 1u64;
        let mut x = 12345u64;
        let mut rand = move |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for round in 0..8 {
            let adds = 50 + rand(300);
            for _ in 0..adds {
                next_seq += 1 + rand(3);
                let name = format!("n{next_seq}").into_bytes();
                order.push(next_seq, DirName::new(&name));
                model.insert(next_seq, name);
            }
            let keys: Vec<u64> = model.keys().copied().collect();
            let removals: Vec<u64> = match round % 4 {
                0 => keys.iter().copied().take(keys.len() * 3 / 4).collect(),
                1 => keys.iter().copied().filter(|_| rand(2) == 0).collect(),
                2 => keys.iter().rev().copied().filter(|_| rand(3) != 0).collect(),
                _ => keys.clone(),
            };
            for (k, seq) in removals.into_iter().enumerate() {
                assert!(order.remove(seq).is_some());
                assert!(order.remove(seq).is_none(), "cookie {seq} removed twice");
                model.remove(&seq);
                if k % 17 == 0 {
                    check(&order, &model, &[0, seq, seq.saturating_sub(1), next_seq, rand(next_seq + 2)]);
                }
            }
            assert!(order.remove(next_seq + 1).is_none());
            check(&order, &model, &[0, 1, next_seq / 2, next_seq]);
        }
    }
}
