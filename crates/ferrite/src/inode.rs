//! One inode in DRAM: its attributes, its log, and its index (file page map
//! or directory name index), rebuilt from the log on first access.
//!
//! The log is the only persistent record of an inode's state. Every change
//! appends entries after the tail and commits them with one atomic 8-byte
//! store of the new tail (or, for operations on several inodes, through the
//! journal). After the commit, the same `apply` function that rebuilds an
//! inode from its log at mount brings the DRAM state forward, so the state
//! after an operation and the state a remount rebuilds cannot drift apart.
//!
//! `apply` also keeps the liveness accounting that log garbage collection
//! needs: every entry has a count of reasons to stay in the log, every log
//! page a count of live entries, and a page whose count reaches zero can be
//! unlinked from the log (NOVA's fast GC). The reasons:
//! - an Attr entry while it is the newest Attr entry (it is a full snapshot);
//! - a Write entry for each file page it still maps;
//! - a DentryAdd while its name is live;
//! - the newest entry of the log (it carries the newest mtime and ctime), and
//!   the newest size-carrying entry (Write or Truncate);
//! - a Truncate or DentryRemove for each older log page that still holds an
//!   entry it cancels (a "pin"): if the canceller were collected first, a
//!   rebuild would bring the cancelled entry back to life.

use crate::alloc::PageAllocator;
use crate::format::{
    self, corrupt, AttrEntry, Corrupt, DentryEntry, Entry, PageNo, TruncateEntry, WriteEntry, XattrEntry,
    LOG_NEXT_OFFSET, LOG_PAGE_HEADER_SIZE, LOG_UNIT, LOG_UNITS_PER_PAGE, PAGE_SHIFT, PAGE_SIZE,
};
use crate::media::Media;
use crate::types::{FileType, FsResult, InodeNo, Stat, TimeSpec};
use crate::Map;
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};

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
}

impl Attrs {
    /// Before the first Attr entry is applied (replay, checkpoint rebuild).
    pub const UNSET: Attrs =
        Attrs { perm: 0, uid: 0, gid: 0, nlink: 0, atime_ns: 0, mtime_ns: 0, ctime_ns: 0, size: 0, parent: InodeNo(0) };

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
        }
    }
}

/// Where one file page lives, and which entry maps it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageRef {
    pub pool: PageNo,
    pub entry: u64,
}

/// A live name in a directory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Dentry {
    pub ino: InodeNo,
    pub kind: FileType,
    /// Sequence number of the DentryAdd entry: the readdir cookie.
    pub seq: u64,
    pub entry: u64,
}

#[derive(Default)]
pub struct DirIndex {
    pub names: Map<Box<[u8]>, Dentry>,
    /// Names in cookie order, for readdir.
    pub by_seq: BTreeMap<u64, Box<[u8]>>,
    pub subdirs: u32,
}

pub enum Body {
    /// Regular files and symlinks: file page -> pool page.
    Pages(crate::pagemap::PageMap),
    Dir(DirIndex),
}

/// What DRAM keeps about one log page: its place in the chain and the
/// reference counts of its entries (indexed by 64-byte unit).
struct LogPage {
    prev: u64,
    next: u64,
    live_entries: u32,
    /// Lowest file page and highest file page end mapped by a Write entry
    /// in this page (for Truncate and Punch pins).
    min_file_page: u64,
    max_file_end: u64,
    refs: [u32; LOG_UNITS_PER_PAGE as usize],
    /// Size in units of the entry starting at each unit.
    units: [u8; LOG_UNITS_PER_PAGE as usize],
    /// Entries (locations) this page pins: they stay live while it exists.
    pins: Vec<u64>,
}

const NO_PAGE: u64 = u64::MAX;

/// Liveness accounting for log GC (see the module comment), and the order
/// of the log's pages, kept as a doubly linked list so that unlinking a
/// dead page costs O(1) whatever the length of the log.
pub struct Liveness {
    pages: Map<u64, Box<LogPage>>,
    first: u64,
    last: u64,
    live_entries: usize,
    /// Units (of 64 bytes) the live entries take: what a compaction keeps.
    live_units: usize,
    dead_pages: BTreeSet<u64>,
    last_attr: Option<u64>,
    last_size: Option<u64>,
    last_entry: Option<u64>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            pages: Map::default(),
            first: NO_PAGE,
            last: NO_PAGE,
            live_entries: 0,
            live_units: 0,
            dead_pages: BTreeSet::new(),
            last_attr: None,
            last_size: None,
            last_entry: None,
        }
    }
}

fn page_of(loc: u64) -> u64 {
    loc >> PAGE_SHIFT
}

fn unit_of(loc: u64) -> usize {
    (((loc & (PAGE_SIZE - 1)) - LOG_PAGE_HEADER_SIZE) / LOG_UNIT) as usize
}

impl Liveness {
    /// Append a page to the end of the chain.
    fn push_page(&mut self, p: PageNo) {
        let page = Box::new(LogPage {
            prev: self.last,
            next: NO_PAGE,
            live_entries: 0,
            min_file_page: u64::MAX,
            max_file_end: 0,
            refs: [0; LOG_UNITS_PER_PAGE as usize],
            units: [0; LOG_UNITS_PER_PAGE as usize],
            pins: Vec::new(),
        });
        assert!(self.pages.insert(p.0, page).is_none(), "log page {} linked twice", p.0);
        if self.last == NO_PAGE {
            self.first = p.0;
        } else {
            self.pages.get_mut(&self.last).expect("last page").next = p.0;
        }
        self.last = p.0;
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// The pages from head to tail.
    pub fn page_list(&self) -> Vec<PageNo> {
        let mut v = Vec::with_capacity(self.pages.len());
        let mut p = self.first;
        while p != NO_PAGE {
            v.push(PageNo(p));
            p = self.pages[&p].next;
        }
        v
    }

    fn page_mut(&mut self, loc: u64) -> &mut LogPage {
        self.pages.get_mut(&page_of(loc)).expect("entry in a page of this log")
    }

    fn add_ref(&mut self, loc: u64, n: u32) {
        if n == 0 {
            return;
        }
        let unit = unit_of(loc);
        let page = self.page_mut(loc);
        let was = page.refs[unit];
        page.refs[unit] += n;
        if was == 0 {
            page.live_entries += 1;
            let revived = page.live_entries == 1;
            self.live_units += page.units[unit] as usize;
            self.live_entries += 1;
            if revived {
                self.dead_pages.remove(&page_of(loc));
            }
        }
    }

    fn unref(&mut self, loc: u64) {
        let unit = unit_of(loc);
        let page = self.page_mut(loc);
        assert!(page.refs[unit] > 0, "unref of an entry with no references");
        page.refs[unit] -= 1;
        if page.refs[unit] == 0 {
            page.live_entries -= 1;
            let dead = page.live_entries == 0;
            self.live_units -= page.units[unit] as usize;
            self.live_entries -= 1;
            if dead {
                self.dead_pages.insert(page_of(loc));
            }
        }
    }

    fn pin(&mut self, pinning_page: u64, loc: u64) {
        self.pages.get_mut(&pinning_page).expect("pinning page in the log").pins.push(loc);
        self.add_ref(loc, 1);
    }

    /// Unlink a page from the chain and release the pins it held.
    fn remove_page(&mut self, page: u64) {
        let info = self.pages.remove(&page).expect("removed page is in the log");
        self.dead_pages.remove(&page);
        self.live_entries -= info.live_entries as usize;
        if info.prev == NO_PAGE {
            self.first = info.next;
        } else {
            self.pages.get_mut(&info.prev).expect("prev page").next = info.next;
        }
        if info.next == NO_PAGE {
            self.last = info.prev;
        } else {
            self.pages.get_mut(&info.next).expect("next page").prev = info.prev;
        }
        for loc in info.pins {
            self.unref(loc);
        }
    }

    pub fn live_entries(&self) -> usize {
        self.live_entries
    }

    /// Record the size of a new entry before its first reference.
    fn set_units(&mut self, loc: u64, units: u8) {
        let unit = unit_of(loc);
        let page = self.page_mut(loc);
        debug_assert_eq!(page.refs[unit], 0);
        page.units[unit] = units;
    }
}

/// The log of one inode: pages from head to tail.
pub struct Log {
    pub head: u64,
    pub tail: u64,
    pub next_seq: u64,
    pub live: Liveness,
}

impl Log {
    fn tail_page(&self) -> PageNo {
        PageNo((self.tail - 1) >> PAGE_SHIFT)
    }
}

/// Entries written after the tail but not yet committed.
pub struct Staged {
    pub new_tail: u64,
    pub new_pages: Vec<PageNo>,
    /// (location, sequence number) of each entry, in order.
    pub locs: Vec<(u64, u64)>,
    pub entries: Vec<Entry>,
}

/// An extended attribute's value and the location of its XattrSet entry.
pub type Xattr = (Box<[u8]>, u64);

/// The DRAM state of an inode, behind its lock.
pub struct InodeData {
    /// False once the inode has been freed; every operation that finds a
    /// dead inode treats it as gone (ENOENT) or retries its lookup.
    pub alive: bool,
    pub attrs: Attrs,
    pub log: Log,
    pub body: Body,
    /// Extended attributes: name -> (value, location of the XattrSet entry).
    pub xattrs: BTreeMap<Box<[u8]>, Xattr>,
    /// Open descriptors and handles; an unlinked inode is freed at the last close.
    pub open_count: u32,
}

pub struct Inode {
    pub ino: InodeNo,
    pub kind: FileType,
    pub generation: u32,
    /// Device number of a device node (fixed at creation), else 0.
    pub rdev: u64,
    pub data: RwLock<InodeData>,
}

impl Inode {
    /// stat of this inode, whose data the caller has locked.
    pub fn stat(&self, d: &InodeData) -> Stat {
        Stat { rdev: self.rdev, ..d.stat(self.ino, self.kind) }
    }
}

impl InodeData {
    pub fn new_empty(kind: FileType, attrs: Attrs) -> InodeData {
        InodeData {
            alive: true,
            attrs,
            log: Log { head: 0, tail: 0, next_seq: 1, live: Liveness::default() },
            body: match kind {
                FileType::Directory => Body::Dir(DirIndex::default()),
                _ => Body::Pages(Default::default()),
            },
            xattrs: BTreeMap::new(),
            open_count: 0,
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

    /// Apply one committed entry at `loc`. Pool pages that the entry makes
    /// unreferenced are pushed to `freed`. The same code serves replay at
    /// mount and the DRAM update after a commit.
    pub fn apply(
        &mut self,
        kind: FileType,
        e: &Entry,
        loc: u64,
        seq: u64,
        freed: &mut Vec<PageNo>,
    ) -> Result<(), Corrupt> {
        if seq < self.log.next_seq {
            return Err(corrupt!("log entry sequence {seq} not increasing"));
        }
        self.log.next_seq =
            seq.checked_add(1).ok_or_else(|| corrupt!("log entry sequence number {seq} out of range"))?;
        let live = &mut self.log.live;
        live.set_units(loc, e.units());
        live.add_ref(loc, 1);
        if let Some(prev) = live.last_entry.replace(loc) {
            live.unref(prev);
        }
        match e {
            Entry::Attr(a) => {
                self.attrs.perm = a.perm;
                self.attrs.uid = a.uid;
                self.attrs.gid = a.gid;
                self.attrs.nlink = a.nlink;
                self.attrs.atime_ns = a.atime_ns;
                self.attrs.mtime_ns = a.mtime_ns;
                self.attrs.ctime_ns = a.ctime_ns;
                self.attrs.parent = a.parent;
                live.add_ref(loc, 1);
                if let Some(prev) = live.last_attr.replace(loc) {
                    live.unref(prev);
                }
            }
            Entry::Write(w) => {
                let Body::Pages(map) = &mut self.body else {
                    return Err(corrupt!("write entry in a directory log"));
                };
                live.add_ref(loc, w.num_pages);
                for i in 0..w.num_pages as u64 {
                    let r = PageRef { pool: PageNo(w.pool_page.0 + i), entry: loc };
                    if let Some(old) = map.insert(w.file_page + i, r) {
                        live.unref(old.entry);
                        freed.push(old.pool);
                    }
                }
                let page = live.page_mut(loc);
                page.max_file_end = page.max_file_end.max(w.file_page + w.num_pages as u64);
                page.min_file_page = page.min_file_page.min(w.file_page);
                self.attrs.size = w.size_after;
                self.attrs.mtime_ns = w.mtime_ns;
                self.attrs.ctime_ns = w.ctime_ns;
                live.add_ref(loc, 1);
                if let Some(prev) = live.last_size.replace(loc) {
                    live.unref(prev);
                }
            }
            Entry::Truncate(t) => {
                let Body::Pages(map) = &mut self.body else {
                    return Err(corrupt!("truncate entry in a directory log"));
                };
                if t.size_only {
                    // The engine never writes a size-only entry below the
                    // size of its time, but older entries that set a larger
                    // size may have outlived the truncate between them
                    // (pinned pages) on replay, so no order is checked here.
                    self.attrs.size = t.size;
                    self.attrs.mtime_ns = t.mtime_ns;
                    self.attrs.ctime_ns = t.ctime_ns;
                    live.add_ref(loc, 1);
                    if let Some(prev) = live.last_size.replace(loc) {
                        live.unref(prev);
                    }
                    return Ok(());
                }
                let keep_pages = t.size.div_ceil(PAGE_SIZE);
                unmap_and_pin(map, live, loc, keep_pages, format::FILE_PAGES_MAX, freed);
                self.attrs.size = t.size;
                self.attrs.mtime_ns = t.mtime_ns;
                self.attrs.ctime_ns = t.ctime_ns;
                live.add_ref(loc, 1);
                if let Some(prev) = live.last_size.replace(loc) {
                    live.unref(prev);
                }
            }
            Entry::Punch(h) => {
                let Body::Pages(map) = &mut self.body else {
                    return Err(corrupt!("punch entry in a directory log"));
                };
                unmap_and_pin(map, live, loc, h.file_page, h.file_page + h.num_pages, freed);
                self.attrs.mtime_ns = h.mtime_ns;
                self.attrs.ctime_ns = h.ctime_ns;
            }
            Entry::DentryAdd(d) => {
                let Body::Dir(dir) = &mut self.body else {
                    return Err(corrupt!("dentry in a file log"));
                };
                if dir.names.contains_key(d.name.as_slice()) {
                    return Err(corrupt!("directory adds name {:?} twice", String::from_utf8_lossy(&d.name)));
                }
                let name: Box<[u8]> = d.name.clone().into_boxed_slice();
                dir.names.insert(name.clone(), Dentry { ino: d.ino, kind: d.kind, seq, entry: loc });
                dir.by_seq.insert(seq, name);
                if d.kind == FileType::Directory {
                    dir.subdirs += 1;
                }
                live.add_ref(loc, 1);
                self.attrs.mtime_ns = d.time_ns;
                self.attrs.ctime_ns = d.time_ns;
            }
            Entry::Xattr(x) => {
                // Like directory entries: a set is live while it is the
                // value of its name; a removal is pinned by the page of the
                // set it cancels, and one whose set was collected first
                // finds nothing to remove.
                let old = self.xattrs.remove(x.name.as_slice());
                if let Some((_, old_loc)) = old {
                    live.unref(old_loc);
                }
                match &x.value {
                    Some(v) => {
                        self.xattrs.insert(x.name.clone().into_boxed_slice(), (v.clone().into_boxed_slice(), loc));
                        live.add_ref(loc, 1);
                    }
                    None => {
                        if let Some((_, old_loc)) = old {
                            if page_of(old_loc) != page_of(loc) {
                                live.pin(page_of(old_loc), loc);
                            }
                        }
                    }
                }
                self.attrs.ctime_ns = x.ctime_ns;
            }
            Entry::DentryRemove(d) => {
                let Body::Dir(dir) = &mut self.body else {
                    return Err(corrupt!("dentry in a file log"));
                };
                // A removal whose addition GC already collected (its page
                // went first, and this entry's page stayed for other live
                // entries) finds nothing to remove: it is dead, and only its
                // times apply.
                let Some(old) = dir.names.remove(d.name.as_slice()) else {
                    self.attrs.mtime_ns = d.time_ns;
                    self.attrs.ctime_ns = d.time_ns;
                    if kind != FileType::Directory {
                        return Err(corrupt!("dentry in a non-directory log"));
                    }
                    return Ok(());
                };
                if old.ino != d.ino {
                    return Err(corrupt!(
                        "directory removes name {:?} of another inode",
                        String::from_utf8_lossy(&d.name)
                    ));
                }
                dir.by_seq.remove(&old.seq);
                if old.kind == FileType::Directory {
                    dir.subdirs -= 1;
                }
                live.unref(old.entry);
                if page_of(old.entry) != page_of(loc) {
                    live.pin(page_of(old.entry), loc);
                }
                self.attrs.mtime_ns = d.time_ns;
                self.attrs.ctime_ns = d.time_ns;
            }
        }
        if let Entry::DentryAdd(_) | Entry::DentryRemove(_) = e {
            if kind != FileType::Directory {
                return Err(corrupt!("dentry in a non-directory log"));
            }
        }
        Ok(())
    }

    /// Rebuild an inode from its log on media (lazy rebuild at first
    /// access, and the full scan after a crash).
    pub fn load(
        media: &Media,
        ino: InodeNo,
        kind: FileType,
        generation: u32,
        head: u64,
        tail: u64,
    ) -> Result<InodeData, Corrupt> {
        let mut data = InodeData::new_empty(kind, Attrs::UNSET);
        let head_page = media.check_log_pointer(head, "log head")?;
        if tail < LOG_PAGE_HEADER_SIZE + LOG_UNIT {
            return Err(corrupt!("inode {}: log tail {tail:#x} invalid", ino.0));
        }
        let tail_page = PageNo((tail - 1) >> PAGE_SHIFT);
        media.check_data_page(tail_page, "log tail")?;
        let tail_in_page = tail - tail_page.offset();
        if !(LOG_PAGE_HEADER_SIZE + LOG_UNIT..=PAGE_SIZE).contains(&tail_in_page)
            || !tail_in_page.is_multiple_of(LOG_UNIT)
        {
            return Err(corrupt!("inode {}: log tail {tail:#x} misplaced in its page", ino.0));
        }
        let mut page = head_page;
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        let mut freed = Vec::new();
        let max_pages = media.layout.total_pages;
        let mut seen = crate::Set::default();
        loop {
            if !seen.insert(page.0) || seen.len() as u64 > max_pages {
                return Err(corrupt!("inode {}: log pages form a cycle", ino.0));
            }
            media.read_checked(page.offset(), &mut buf)?;
            let next = format::decode_log_page_header(&buf, ino, generation)?;
            data.log.live.push_page(page);
            let end = if page == tail_page { tail_in_page } else { PAGE_SIZE };
            let mut at = LOG_PAGE_HEADER_SIZE;
            while at < end {
                let rest = &buf[at as usize..end as usize];
                if page != tail_page && rest[..LOG_UNIT as usize].iter().all(|&b| b == 0) {
                    break; // the rest of a full page is unused
                }
                let (entry, seq, len) = Entry::decode(rest).map_err(|c| corrupt!("inode {}: {}", ino.0, c.0))?;
                if let Entry::Write(w) = &entry {
                    media.check_data_page(w.pool_page, "write entry")?;
                    media.check_data_page(PageNo(w.pool_page.0 + w.num_pages as u64 - 1), "write entry")?;
                }
                data.apply(kind, &entry, page.offset() + at, seq, &mut freed)
                    .map_err(|c| corrupt!("inode {}: {}", ino.0, c.0))?;
                at += len as u64;
            }
            if page == tail_page {
                break;
            }
            page = media.check_log_pointer(next, "log next pointer")?;
        }
        data.log.head = head;
        data.log.tail = tail;
        if data.log.live.last_attr.is_none() {
            return Err(corrupt!("inode {}: log holds no attribute entry", ino.0));
        }
        if kind == FileType::Directory && data.attrs.parent.0 == 0 {
            return Err(corrupt!("directory {} has no parent", ino.0));
        }
        Ok(data)
    }

    /// Write `entries` after the tail, extending the log with new pages as
    /// needed, and flush them. Nothing is committed: the caller fences and
    /// then stores the new tail (directly or through the journal). On ENOSPC
    /// nothing has changed.
    pub fn stage(
        &self,
        media: &Media,
        alloc: &PageAllocator,
        owner: InodeNo,
        generation: u32,
        entries: Vec<Entry>,
    ) -> FsResult<Staged> {
        let seqs = (self.log.next_seq..self.log.next_seq + entries.len() as u64).collect();
        write_log_entries(media, alloc, owner, generation, self.log.tail, entries, seqs)
    }

    /// Is the log worth compacting (thorough GC)? Its live entries would
    /// fill at most half of its pages even if each were of the largest size.
    pub fn compaction_due(&self) -> bool {
        let pages = self.log.live.page_count() as u64;
        let live_units = self.log.live.live_units as u64;
        // A checkpoint takes about the live units (plus an Attr entry).
        pages >= 4 && (live_units + 2) * 2 <= (pages - 1) * format::LOG_UNITS_PER_PAGE
    }

    /// Thorough GC, first half: write a checkpoint of the inode as a fresh
    /// chain of log pages. A file's checkpoint is one Write entry per run of
    /// its current page map (consecutive file pages in consecutive pool
    /// pages) carrying the current size, then a size-only Truncate (so an
    /// empty file keeps its size), then an Attr snapshot. A directory's is
    /// its live DentryAdd entries, copied with their sequence numbers (the
    /// readdir cookies), then an Attr snapshot. Nothing superseded, cancelled
    /// or partly dead is copied, so the replay of the checkpoint is exactly
    /// the current state. Returns the new chain; the caller commits head and
    /// tail together through the journal, frees the old pages and reloads.
    pub fn stage_compaction(
        &self,
        media: &Media,
        alloc: &PageAllocator,
        owner: InodeNo,
        generation: u32,
    ) -> FsResult<Staged> {
        let a = &self.attrs;
        let mut entries = Vec::new();
        let mut seqs = Vec::new();
        match &self.body {
            Body::Pages(map) => {
                let mut run: Option<WriteEntry> = None;
                for (fp, r) in map.iter() {
                    if let Some(w) = &mut run {
                        if w.file_page + w.num_pages as u64 == fp
                            && w.pool_page.0 + w.num_pages as u64 == r.pool.0
                            && w.num_pages < u32::MAX
                        {
                            w.num_pages += 1;
                            continue;
                        }
                        entries.push(Entry::Write(*w));
                    }
                    run = Some(WriteEntry {
                        file_page: fp,
                        pool_page: r.pool,
                        num_pages: 1,
                        size_after: a.size,
                        mtime_ns: a.mtime_ns,
                        ctime_ns: a.ctime_ns,
                    });
                }
                entries.extend(run.map(Entry::Write));
                entries.push(Entry::Truncate(TruncateEntry {
                    size: a.size,
                    mtime_ns: a.mtime_ns,
                    ctime_ns: a.ctime_ns,
                    size_only: true,
                }));
                seqs.extend(1..=entries.len() as u64);
            }
            Body::Dir(dir) => {
                for (&seq, name) in &dir.by_seq {
                    let de = dir.names[name];
                    entries.push(Entry::DentryAdd(DentryEntry {
                        ino: de.ino,
                        kind: de.kind,
                        time_ns: a.mtime_ns,
                        name: name.to_vec(),
                    }));
                    seqs.push(seq);
                }
            }
        }
        let mut last_seq = seqs.last().copied().unwrap_or(0).max(self.log.next_seq - 1);
        for (name, (value, _)) in &self.xattrs {
            last_seq += 1;
            seqs.push(last_seq);
            entries.push(Entry::Xattr(XattrEntry {
                name: name.to_vec(),
                value: Some(value.to_vec()),
                ctime_ns: a.ctime_ns,
            }));
        }
        seqs.push(last_seq + 1);
        entries.push(Entry::Attr(a.to_entry()));
        write_log_entries(media, alloc, owner, generation, 0, entries, seqs)
    }
}

/// For a Truncate or Punch entry at `loc`: unmap the file pages in
/// `[first, end)` (their pool pages go to `freed`), and pin the entry to
/// every older log page whose Write entries may map a page of that range,
/// so that it stays in the log as long as an entry it cancels does (else a
/// rebuild would map the cancelled pages again). Judged by each page's
/// range of mapped file pages: conservative, never too few pins.
fn unmap_and_pin(
    map: &mut crate::pagemap::PageMap,
    live: &mut Liveness,
    loc: u64,
    first: u64,
    end: u64,
    freed: &mut Vec<PageNo>,
) {
    let cut: Vec<u64> = map.range(first..end).map(|(k, _)| k).collect();
    for k in cut {
        let old = map.remove(&k).expect("key just listed");
        live.unref(old.entry);
        freed.push(old.pool);
    }
    let own = page_of(loc);
    let mut p = live.first;
    while p != NO_PAGE && p != own {
        let info = &live.pages[&p];
        let next = info.next;
        if info.min_file_page < end && info.max_file_end > first {
            live.pin(p, loc);
        }
        p = next;
    }
}

/// Write `entries` (with their sequence numbers) after position `pos` (0:
/// start a new chain), extending with fresh log pages as needed, and flush
/// them. Nothing is committed. On ENOSPC nothing has changed.
fn write_log_entries(
    media: &Media,
    alloc: &PageAllocator,
    owner: InodeNo,
    generation: u32,
    pos: u64,
    entries: Vec<Entry>,
    seqs: Vec<u64>,
) -> FsResult<Staged> {
    let mut pos = pos;
    let mut new_pages = Vec::new();
    let mut locs = Vec::with_capacity(entries.len());
    let mut buf = Vec::with_capacity(LOG_UNIT as usize);
    // Plan first so that allocation failure changes nothing: which
    // entries open a fresh page.
    let mut plan: smallvec::SmallVec<[bool; 8]> = smallvec::SmallVec::new();
    let mut need_pages = 0u64;
    let mut room = if pos == 0 { 0 } else { (((pos - 1) | (PAGE_SIZE - 1)) + 1) - pos };
    for e in &entries {
        let len = e.size_bytes() as u64;
        let fresh = len > room;
        if fresh {
            need_pages += 1;
            room = PAGE_SIZE - LOG_PAGE_HEADER_SIZE;
        }
        plan.push(fresh);
        room -= len;
    }
    let runs = if need_pages > 0 { alloc.alloc(need_pages)? } else { crate::alloc::Runs::new() };
    let mut fresh = runs.iter().flat_map(|&(s, n)| (0..n as u64).map(move |i| PageNo(s.0 + i)));
    let mut prev_page = if pos == 0 { None } else { Some(PageNo((pos - 1) >> PAGE_SHIFT)) };
    for ((e, &needs_new), &seq) in entries.iter().zip(&plan).zip(&seqs) {
        let len = e.size_bytes() as u64;
        if needs_new {
            let page = fresh.next().expect("planned page count");
            // A new log page is written whole: its header and zeros (so the
            // unused rest of a full page reads as the end of its entries).
            media.write_nt(page.offset(), &format::encode_log_page_header(owner, generation));
            media.fill_nt(page.offset() + LOG_PAGE_HEADER_SIZE, PAGE_SIZE - LOG_PAGE_HEADER_SIZE, 0);
            if let Some(prev) = prev_page {
                // The page being left may hold stale, never-committed entries
                // past this position (staged before a crash): once it is no
                // longer the tail's page, replay reads it to the first
                // all-zero unit, so write that end marker explicitly.
                let page_end = prev.offset() + PAGE_SIZE;
                if pos != 0 && pos < page_end {
                    media.write(pos, &[0u8; LOG_UNIT as usize]);
                    media.flush(pos, LOG_UNIT);
                }
                media.store_u64(prev.offset() + LOG_NEXT_OFFSET, page.offset());
                media.flush(prev.offset() + LOG_NEXT_OFFSET, 8);
            }
            new_pages.push(page);
            prev_page = Some(page);
            pos = page.offset() + LOG_PAGE_HEADER_SIZE;
        }
        e.encode(seq, &mut buf);
        media.write(pos, &buf);
        media.flush(pos, len);
        locs.push((pos, seq));
        pos += len;
    }
    Ok(Staged { new_tail: pos, new_pages, locs, entries })
}

impl InodeData {
    /// Bring the DRAM state forward after `staged` committed. Returns the
    /// data pages no longer referenced (to free once the caller is done).
    pub fn commit_staged(&mut self, kind: FileType, staged: Staged, freed: &mut Vec<PageNo>) {
        if self.log.head == 0 {
            self.log.head = staged.new_pages[0].offset();
        }
        for &p in &staged.new_pages {
            self.log.live.push_page(p);
        }
        self.log.tail = staged.new_tail;
        for (e, &(loc, seq)) in staged.entries.iter().zip(&staged.locs) {
            self.apply(kind, e, loc, seq, freed).expect("an entry built by the engine applies cleanly");
        }
    }

    /// Fast log GC: unlink log pages whose entries are all dead (never the
    /// tail page), then free them. Returns how many pages were collected.
    pub fn collect_garbage(&mut self, media: &Media, alloc: &PageAllocator, slot_offset: u64) -> usize {
        let tail_page = self.log.tail_page().0;
        let dead: Vec<u64> = self.log.live.dead_pages.iter().copied().filter(|&p| p != tail_page).collect();
        if dead.is_empty() {
            return 0;
        }
        let dead_set: crate::Set<u64> = dead.iter().copied().collect();
        // Relink around each dead page with one 8-byte store: the previous
        // live page's next pointer (or the head) skips to the next live page.
        let live = &self.log.live;
        for &p in &dead {
            let info = &live.pages[&p];
            let mut next = info.next;
            while dead_set.contains(&next) {
                next = live.pages[&next].next;
            }
            // The tail page is never dead, so a live successor exists.
            assert!(next != NO_PAGE, "dead page {p} has no live successor");
            if info.prev != NO_PAGE && dead_set.contains(&info.prev) {
                continue; // an earlier dead page of this run does the relink
            }
            if info.prev == NO_PAGE {
                media.store_u64(slot_offset + format::INODE_HEAD_OFFSET, PageNo(next).offset());
                media.flush(slot_offset + format::INODE_HEAD_OFFSET, 8);
                self.log.head = PageNo(next).offset();
            } else {
                media.store_u64(PageNo(info.prev).offset() + LOG_NEXT_OFFSET, PageNo(next).offset());
                media.flush(PageNo(info.prev).offset() + LOG_NEXT_OFFSET, 8);
            }
        }
        // The unlinks must be durable before the pages can be reused.
        media.fence();
        for &p in &dead {
            self.log.live.remove_page(p);
            alloc.free(PageNo(p), 1);
        }
        dead.len()
    }

    /// Every pool page this inode owns: its log pages and its data pages.
    pub fn owned_pages(&self) -> Vec<PageNo> {
        let mut v = self.log.live.page_list();
        if let Body::Pages(map) = &self.body {
            v.extend(map.values().map(|r| r.pool));
        }
        v
    }

    pub fn dead_log_pages(&self) -> usize {
        self.log.live.dead_pages.len()
    }
}
