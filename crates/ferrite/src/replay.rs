//! Replay (NOVA's rebuild.c): an inode is rebuilt from its log by applying
//! each entry in order, at first access after a clean mount, in the full
//! scan after a crash, and (the same `apply`) after every commit.
//! Everything read from media is checked: a failed check is `Corrupt`.

use crate::format::{
    self, corrupt, AttrEntry, Corrupt, DentryEntry, Entry, InlineEntry, PageNo, PoolOffset, PunchEntry, TruncateEntry,
    WriteEntry, XattrEntry, LOG_PAGE_HEADER_SIZE, LOG_UNIT, PAGE_SIZE,
};
use crate::inode::{Attrs, Body, Dentry, DirName, InodeData, NameSlot, PageRef};
use crate::log::{page_of, Liveness, NO_PAGE};
use crate::media::Media;
use crate::pagemap::Delta;
use crate::types::{FileType, InodeNo};

/// What a log is replayed for (`InodeData::load_as`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Replay {
    /// The whole DRAM state: every index.
    Full,
    /// What crash recovery needs: owned pages and attributes.
    Ownership,
}

thread_local! {
    /// A log page's bytes while it is replayed: one buffer per thread, not
    /// a 4 KiB allocation (or clearing) per inode rebuilt.
    static LOAD_BUF: std::cell::RefCell<Box<[u8; PAGE_SIZE as usize]>> =
        std::cell::RefCell::new(Box::new([0u8; PAGE_SIZE as usize]));
}

impl InodeData {
    /// Apply one committed entry at `loc`. Pool pages that the entry makes
    /// unreferenced are pushed to `freed`. The same code serves replay at
    /// mount and the DRAM update after a commit.
    pub fn apply(
        &mut self,
        kind: FileType,
        e: &Entry,
        loc: PoolOffset,
        seq: u64,
        freed: &mut crate::PageList,
    ) -> Result<(), Corrupt> {
        if seq < self.log.next_seq {
            return Err(corrupt!("log entry sequence {seq} not increasing"));
        }
        if matches!(e, Entry::DentryAdd(_) | Entry::DentryRemove(_)) && kind != FileType::Directory {
            return Err(corrupt!("dentry in a non-directory log"));
        }
        self.log.next_seq =
            seq.checked_add(1).ok_or_else(|| corrupt!("log entry sequence number {seq} out of range"))?;
        // Every entry is live while it is the newest of the log (it carries
        // the newest times).
        let live = &mut self.log.live;
        live.set_units(loc, e.units());
        live.add_ref(loc, 1);
        if let Some(prev) = live.last_entry.replace(loc) {
            live.unref(prev);
        }
        match e {
            Entry::Attr(a) => self.apply_attr(a, loc),
            Entry::Write(w) => self.apply_write(w, loc, freed),
            Entry::Truncate(t) => self.apply_truncate(t, loc, freed),
            Entry::Punch(h) => self.apply_punch(h, loc, freed),
            Entry::Inline(i) => self.apply_inline(i, loc),
            Entry::DentryAdd(d) => self.apply_dentry_add(d, loc, seq),
            Entry::DentryRemove(d) => self.apply_dentry_remove(d, loc),
            Entry::Xattr(x) => {
                self.apply_xattr(x, loc);
                Ok(())
            }
        }
    }

    /// An Attr entry is a full snapshot of every attribute but the size;
    /// it is live while it is the newest one.
    fn apply_attr(&mut self, a: &AttrEntry, loc: PoolOffset) -> Result<(), Corrupt> {
        self.set_attr_fields(a);
        let live = &mut self.log.live;
        live.add_ref(loc, 1);
        if let Some(prev) = live.last_attr.replace(loc) {
            live.unref(prev);
        }
        Ok(())
    }

    /// Every attribute an Attr entry holds (all but the size).
    fn set_attr_fields(&mut self, a: &AttrEntry) {
        self.attrs.perm = a.perm;
        self.attrs.uid = a.uid;
        self.attrs.gid = a.gid;
        self.attrs.nlink = a.nlink;
        self.attrs.atime_ns = a.atime_ns;
        self.attrs.mtime_ns = a.mtime_ns;
        self.attrs.ctime_ns = a.ctime_ns;
        self.attrs.parent = a.parent;
        self.attrs.mode = a.mode;
    }

    /// The newest size-carrying entry (Write or Truncate) stays live: it
    /// holds the size.
    fn set_size(&mut self, size: u64, mtime_ns: i64, ctime_ns: i64, loc: PoolOffset) {
        self.log.live.add_ref(loc, 1);
        self.set_size_referenced(size, mtime_ns, ctime_ns, loc);
    }

    /// `set_size` for an entry whose size reference the caller has added.
    fn set_size_referenced(&mut self, size: u64, mtime_ns: i64, ctime_ns: i64, loc: PoolOffset) {
        self.attrs.size = size;
        self.attrs.mtime_ns = mtime_ns;
        self.attrs.ctime_ns = ctime_ns;
        let live = &mut self.log.live;
        if let Some(prev) = live.last_size.replace(loc) {
            live.unref(prev);
        }
    }

    /// A Write entry maps file pages to pool pages; it is live for each
    /// file page it still maps. The pages it replaces are released.
    fn apply_write(&mut self, w: &WriteEntry, loc: PoolOffset, freed: &mut crate::PageList) -> Result<(), Corrupt> {
        let Body::Pages(map) = &mut self.body else {
            return Err(corrupt!("write entry in a directory log"));
        };
        let live = &mut self.log.live;
        // One lookup of the entry's page: a reference per file page, one
        // more for being the newest size (`set_size`'s), and its range.
        // (Compaction writes at most u32::MAX - 1 pages to an entry.)
        let refs = w.num_pages.checked_add(1).ok_or_else(|| corrupt!("write entry of {} pages", w.num_pages))?;
        let page = live.add_ref_page(loc, refs);
        page.max_file_end = page.max_file_end.max(w.file_page + w.num_pages as u64);
        page.min_file_page = page.min_file_page.min(w.file_page);
        for i in 0..w.num_pages as u64 {
            let r = PageRef { pool: PageNo(w.pool_page.0 + i), entry: loc };
            if let Some(old) = map.insert(w.file_page + i, r) {
                live.unref(old.entry);
                freed.push(old.pool);
                for d in map.take_deltas(w.file_page + i) {
                    live.unref(d.entry);
                }
            }
        }
        self.set_size_referenced(w.size_after, w.mtime_ns, w.ctime_ns, loc);
        Ok(())
    }

    /// An Inline entry lays its bytes over a mapped page (a delta, live
    /// while no later entry covers or replaces it) and sets the size and
    /// times. One over an unmapped page can only be what replay finds when
    /// GC collected the page's mapping after the entry that replaced it
    /// (pinned as Write entries are): it is dead, and only its size and
    /// times apply.
    fn apply_inline(&mut self, i: &InlineEntry, loc: PoolOffset) -> Result<(), Corrupt> {
        let Body::Pages(map) = &mut self.body else {
            return Err(corrupt!("inline entry in a directory log"));
        };
        let live = &mut self.log.live;
        let fp = i.file_page();
        if map.get(&fp).is_some() {
            let delta = Delta { at: i.page_offset() as u16, len: i.data.len() as u16, entry: loc };
            live.add_ref(loc, 1);
            for old in map.push_delta(fp, delta) {
                live.unref(old.entry);
            }
        }
        let page = live.page_mut(loc);
        page.max_file_end = page.max_file_end.max(fp + 1);
        page.min_file_page = page.min_file_page.min(fp);
        self.set_size(i.size_after, i.time_ns, i.time_ns, loc);
        Ok(())
    }

    /// A Truncate sets the size and (unless size-only) unmaps the pages
    /// past it, pinned to the older log pages that may map them.
    fn apply_truncate(
        &mut self,
        t: &TruncateEntry,
        loc: PoolOffset,
        freed: &mut crate::PageList,
    ) -> Result<(), Corrupt> {
        let Body::Pages(map) = &mut self.body else {
            return Err(corrupt!("truncate entry in a directory log"));
        };
        // A size-only entry unmaps nothing. The engine never writes one
        // below the size of its time, but older entries that set a larger
        // size may have outlived the truncate between them (pinned pages)
        // on replay, so no order is checked here.
        if !t.size_only {
            let keep_pages = t.size.div_ceil(PAGE_SIZE);
            unmap_and_pin(map, &mut self.log.live, loc, keep_pages, format::FILE_PAGES_MAX, freed);
        }
        self.set_size(t.size, t.mtime_ns, t.ctime_ns, loc);
        Ok(())
    }

    /// A Punch unmaps whole pages inside the file; the size stays.
    fn apply_punch(&mut self, h: &PunchEntry, loc: PoolOffset, freed: &mut crate::PageList) -> Result<(), Corrupt> {
        let Body::Pages(map) = &mut self.body else {
            return Err(corrupt!("punch entry in a directory log"));
        };
        unmap_and_pin(map, &mut self.log.live, loc, h.file_page, h.file_page + h.num_pages, freed);
        self.attrs.mtime_ns = h.mtime_ns;
        self.attrs.ctime_ns = h.ctime_ns;
        Ok(())
    }

    /// A DentryAdd is live while its name exists; its sequence number is
    /// the name's readdir cookie.
    fn apply_dentry_add(&mut self, d: &DentryEntry, loc: PoolOffset, seq: u64) -> Result<(), Corrupt> {
        let Body::Dir(dir) = &mut self.body else {
            return Err(corrupt!("dentry in a file log"));
        };
        if dir.names.contains_key(d.name.as_slice()) {
            return Err(corrupt!("directory adds name {:?} twice", String::from_utf8_lossy(&d.name)));
        }
        let name = DirName::new(&d.name);
        dir.names.insert(name.clone(), NameSlot::new(Dentry { ino: d.ino, kind: d.kind, seq, entry: loc }));
        dir.by_seq.push(seq, name);
        if d.kind == FileType::Directory {
            dir.subdirs += 1;
        }
        self.log.live.add_ref(loc, 1);
        self.attrs.mtime_ns = d.time_ns;
        self.attrs.ctime_ns = d.time_ns;
        Ok(())
    }

    /// A DentryRemove kills its DentryAdd and is pinned to that entry's
    /// page while it exists.
    fn apply_dentry_remove(&mut self, d: &DentryEntry, loc: PoolOffset) -> Result<(), Corrupt> {
        let Body::Dir(dir) = &mut self.body else {
            return Err(corrupt!("dentry in a file log"));
        };
        self.attrs.mtime_ns = d.time_ns;
        self.attrs.ctime_ns = d.time_ns;
        // A removal whose addition GC already collected (its page went
        // first, and this entry's page stayed for other live entries) finds
        // nothing to remove: it is dead, and only its times apply.
        let Some(old) = dir.names.remove(d.name.as_slice()) else {
            return Ok(());
        };
        if old.ino != d.ino {
            return Err(corrupt!("directory removes name {:?} of another inode", String::from_utf8_lossy(&d.name)));
        }
        dir.by_seq.remove(old.seq);
        if old.kind == FileType::Directory {
            dir.subdirs -= 1;
        }
        let live = &mut self.log.live;
        live.unref(old.entry);
        if page_of(old.entry) != page_of(loc) {
            live.pin(page_of(old.entry), loc);
        }
        Ok(())
    }

    /// Extended attributes follow the rules of directory entries: a set is
    /// live while it is the value of its name; a removal is pinned by the
    /// page of the set it cancels, and one whose set was collected first
    /// finds nothing to remove.
    fn apply_xattr(&mut self, x: &XattrEntry, loc: PoolOffset) {
        let live = &mut self.log.live;
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

    /// Rebuild an inode from its log on media (lazy rebuild at first
    /// access, and the full scan after a crash).
    pub fn load(
        media: &Media,
        ino: InodeNo,
        kind: FileType,
        generation: u32,
        head: PoolOffset,
        tail: PoolOffset,
        attr: Option<AttrEntry>,
    ) -> Result<InodeData, Corrupt> {
        Self::load_as(media, ino, kind, generation, head, tail, attr, Replay::Full)
    }

    /// `load`, for a purpose: `Replay::Ownership` (crash recovery's scan)
    /// wants only what the allocator needs, so a directory's name entries
    /// are decoded and checked (CRC, sequence) but not indexed: a
    /// directory owns nothing but its log pages, and its names are indexed
    /// when it is rebuilt at first use.
    #[allow(clippy::too_many_arguments)]
    pub fn load_as(
        media: &Media,
        ino: InodeNo,
        kind: FileType,
        generation: u32,
        head: PoolOffset,
        tail: PoolOffset,
        attr: Option<AttrEntry>,
        replay: Replay,
    ) -> Result<InodeData, Corrupt> {
        let load = |buf: &mut [u8; PAGE_SIZE as usize]| {
            Self::load_into(media, ino, kind, generation, head, tail, attr, replay, buf)
        };
        match LOAD_BUF.try_with(|buf| load(&mut buf.borrow_mut())) {
            Ok(r) => r,
            // The thread's locals are gone (an unmount at process exit, from
            // the preload library): a buffer of its own.
            Err(_) => load(&mut Box::new([0u8; PAGE_SIZE as usize])),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn load_into(
        media: &Media,
        ino: InodeNo,
        kind: FileType,
        generation: u32,
        head: PoolOffset,
        tail: PoolOffset,
        attr: Option<AttrEntry>,
        replay: Replay,
        buf: &mut [u8; PAGE_SIZE as usize],
    ) -> Result<InodeData, Corrupt> {
        let mut data = InodeData::new_empty(kind, Attrs::UNSET);
        // The slot's Attr entry comes first (sequence number 0, below every
        // log entry's). It lies in no log page, so it holds no reference:
        // it is superseded by the log's first Attr, if any.
        if let Some(a) = &attr {
            data.set_attr_fields(a);
        }
        if tail == format::NO_LOG {
            // An empty log: the slot's attributes are the whole inode (the
            // slot decoder refuses an empty log without them); the head
            // may name a page staged before a crash, which nobody owns.
            if attr.is_none() {
                return Err(corrupt!("inode {}: empty log and no attributes in its slot", ino.0));
            }
            if kind == FileType::Directory && data.attrs.parent.0 == 0 {
                return Err(corrupt!("directory {} has no parent", ino.0));
            }
            return Ok(data);
        }
        let head_page = media.check_log_pointer(head, "log head")?;
        if !format::log_tail_in_bounds(tail) {
            return Err(corrupt!("inode {}: log tail {tail} invalid", ino.0));
        }
        let tail_page = format::tail_page(tail);
        media.check_data_page(tail_page, "log tail")?;
        let tail_in_page = tail.0 - tail_page.offset().0;
        let mut page = head_page;
        let mut freed = crate::PageList::new();
        let max_pages = media.layout.total_pages;
        // Pages seen so far, to refuse a cycle: a short list for the
        // common short log (no allocation), a set once it grows.
        let mut seen_few: smallvec::SmallVec<[u64; 8]> = smallvec::SmallVec::new();
        let mut seen = crate::Set::default();
        loop {
            let repeated = if seen_few.len() < seen_few.inline_size() {
                let r = seen_few.contains(&page.0);
                seen_few.push(page.0);
                r
            } else {
                if seen.is_empty() {
                    seen.extend(seen_few.iter().copied());
                }
                !seen.insert(page.0)
            };
            if repeated || (seen_few.len() + seen.len()) as u64 > max_pages {
                return Err(corrupt!("inode {}: log pages form a cycle", ino.0));
            }
            // Only what replay reads: up to the tail in the tail's page (a
            // new inode's log is one page holding an entry or two, and
            // copying the whole 4 KiB was most of a rebuild's time).
            let end = if page == tail_page { tail_in_page } else { PAGE_SIZE };
            media.read_checked(page.offset(), &mut buf[..end as usize])?;
            let next = format::decode_log_page_header(&buf[..], ino, generation)?;
            data.log.live.push_page(page);
            let mut at = LOG_PAGE_HEADER_SIZE;
            while at < end {
                let rest = &buf[at as usize..end as usize];
                if page != tail_page && rest[..LOG_UNIT as usize].iter().all(|&b| b == 0) {
                    break; // the rest of a full page is unused
                }
                let (entry, seq, len) = Entry::decode(rest).map_err(|c| corrupt!("inode {}: {}", ino.0, c.0))?;
                if replay == Replay::Ownership && matches!(entry, Entry::DentryAdd(_) | Entry::DentryRemove(_)) {
                    if kind != FileType::Directory || seq < data.log.next_seq {
                        return Err(corrupt!("inode {}: dentry out of place or out of sequence", ino.0));
                    }
                    data.log.next_seq = seq
                        .checked_add(1)
                        .ok_or_else(|| corrupt!("inode {}: log entry sequence number {seq} out of range", ino.0))?;
                    at += len as u64;
                    continue;
                }
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
        if data.log.live.last_attr.is_none() && attr.is_none() {
            return Err(corrupt!("inode {}: neither its slot nor its log holds attributes", ino.0));
        }
        if kind == FileType::Directory && data.attrs.parent.0 == 0 {
            return Err(corrupt!("directory {} has no parent", ino.0));
        }
        Ok(data)
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
    loc: PoolOffset,
    first: u64,
    end: u64,
    freed: &mut crate::PageList,
) {
    let cut: Vec<u64> = map.range(first..end).map(|(k, _)| k).collect();
    for k in cut {
        let old = map.remove(&k).expect("key just listed");
        live.unref(old.entry);
        freed.push(old.pool);
        for d in map.take_deltas(k) {
            live.unref(d.entry);
        }
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
