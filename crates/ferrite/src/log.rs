//! The per-inode log (NOVA's log.c): the chain of 4 KiB log pages, the
//! staging of entries after the tail, and the DRAM accounting of which
//! entries are still live, which log garbage collection (`gc.rs`) needs.
//!
//! Every entry has a count of reasons to stay in the log, every log page a
//! count of live entries, and a page whose count reaches zero can be
//! unlinked from the log (NOVA's fast GC). The reasons:
//! - an Attr entry while it is the newest Attr entry (it is a full snapshot);
//! - a Write entry for each file page it still maps; an Inline entry while
//!   its delta lies over its page;
//! - a DentryAdd (or XattrSet) while its name is live;
//! - the newest entry of the log (it carries the newest mtime and ctime), and
//!   the newest size-carrying entry (Write or Truncate);
//! - a Truncate, Punch, DentryRemove or XattrRemove for each older log page
//!   that still holds an entry it cancels (a "pin"): if the canceller were
//!   collected first, a rebuild would bring the cancelled entry back to life.
//!
//! A page that dies also records *when*: the buffered-mode operation that
//! killed its last live entry (`LogPage::died_at`). On a buffered mount DRAM
//! runs ahead of the durable log, so a page dead in DRAM may still be live
//! in the durable state; GC there collects only pages whose death is
//! durable (docs/DESIGN.md, "Buffered mode"). A strict mount stamps 0:
//! every death is durable once its commit returns.

use crate::alloc::PageAllocator;
use crate::format::{
    self, Entry, PageNo, PoolOffset, LOG_NEXT_OFFSET, LOG_PAGE_HEADER_SIZE, LOG_UNIT, LOG_UNITS_PER_PAGE, PAGE_SIZE,
};
use crate::inode::InodeData;
use crate::media::Media;
use crate::types::{Errno, InodeNo};
use crate::Map;
use smallvec::SmallVec;
use std::collections::BTreeSet;

/// Sequence numbers of entries being staged, one per entry.
pub(crate) type Seqs = SmallVec<[u64; 4]>;

/// What DRAM keeps about one log page: its place in the chain and the
/// reference counts of its entries (indexed by 64-byte unit).
pub(crate) struct LogPage {
    pub(crate) prev: PageNo,
    pub(crate) next: PageNo,
    pub(crate) live_entries: u32,
    /// Lowest file page and highest file page end mapped by a Write entry
    /// in this page (for Truncate and Punch pins).
    pub(crate) min_file_page: u64,
    pub(crate) max_file_end: u64,
    pub(crate) refs: [u32; LOG_UNITS_PER_PAGE as usize],
    /// Size in units of the entry starting at each unit.
    pub(crate) units: [u8; LOG_UNITS_PER_PAGE as usize],
    /// Entries (locations) this page pins: they stay live while it exists.
    pub(crate) pins: Vec<PoolOffset>,
    /// The buffered operation (queue sequence number) that killed the
    /// page's last live entry, `DEATH_PENDING` until that operation has its
    /// number, 0 when the death needs no operation to be durable (strict
    /// mode, recovery). Meaningful only while the page is dead.
    pub(crate) died_at: u64,
}

/// `LogPage::died_at` of a page killed by the buffered operation being
/// committed, before the queue has given it a sequence number.
pub(crate) const DEATH_PENDING: u64 = u64::MAX;

/// The `durable_seq` bound of `collect_garbage` under which every settled
/// death counts as durable (strict mode, and a buffered inode with nothing
/// queued).
pub(crate) const EVERY_DEATH: u64 = u64::MAX - 1;

pub(crate) const NO_PAGE: PageNo = PageNo(u64::MAX);

/// Log pages a log keeps in its short list before it moves them to a map.
const LOG_PAGES_FEW: usize = 4;

/// The bookkeeping of a log's pages, by page number. Most logs are one or
/// two pages long (every new inode starts with one), so up to
/// `LOG_PAGES_FEW` pages are kept in a short list searched in order: a new
/// inode then needs no hash table of its own, and a reference change in a
/// short log no hashing. A longer log moves its pages to a map for good.
pub(crate) enum LogPages {
    Few(SmallVec<[(PageNo, Box<LogPage>); LOG_PAGES_FEW]>),
    Many(Map<PageNo, Box<LogPage>>),
}

impl Default for LogPages {
    fn default() -> Self {
        LogPages::Few(SmallVec::new())
    }
}

impl LogPages {
    pub(crate) fn len(&self) -> usize {
        match self {
            LogPages::Few(v) => v.len(),
            LogPages::Many(m) => m.len(),
        }
    }

    pub(crate) fn get(&self, p: &PageNo) -> Option<&LogPage> {
        match self {
            LogPages::Few(v) => v.iter().find(|e| e.0 == *p).map(|e| &*e.1),
            LogPages::Many(m) => m.get(p).map(|b| &**b),
        }
    }

    pub(crate) fn get_mut(&mut self, p: &PageNo) -> Option<&mut LogPage> {
        match self {
            LogPages::Few(v) => v.iter_mut().find(|e| e.0 == *p).map(|e| &mut *e.1),
            LogPages::Many(m) => m.get_mut(p).map(|b| &mut **b),
        }
    }

    /// Add page `p`; false if it is already there (nothing changes then).
    fn insert(&mut self, p: PageNo, page: Box<LogPage>) -> bool {
        if self.get(&p).is_some() {
            return false;
        }
        match self {
            LogPages::Few(v) if v.len() < LOG_PAGES_FEW => v.push((p, page)),
            LogPages::Few(v) => {
                let mut m: Map<PageNo, Box<LogPage>> = v.drain(..).collect();
                m.insert(p, page);
                *self = LogPages::Many(m);
            }
            LogPages::Many(m) => {
                m.insert(p, page);
            }
        }
        true
    }

    fn remove(&mut self, p: &PageNo) -> Option<Box<LogPage>> {
        match self {
            LogPages::Few(v) => v.iter().position(|e| e.0 == *p).map(|k| v.swap_remove(k).1),
            LogPages::Many(m) => m.remove(p),
        }
    }
}

impl std::ops::Index<&PageNo> for LogPages {
    type Output = LogPage;
    fn index(&self, p: &PageNo) -> &LogPage {
        self.get(p).expect("page in this log")
    }
}

/// Liveness accounting for log GC (see the module comment), and the order
/// of the log's pages, kept as a doubly linked list so that unlinking a
/// dead page costs O(1) whatever the length of the log.
pub struct Liveness {
    pub(crate) pages: LogPages,
    pub(crate) first: PageNo,
    pub(crate) last: PageNo,
    pub(crate) live_entries: usize,
    /// Units (of 64 bytes) the live entries take: what a compaction keeps.
    pub(crate) live_units: usize,
    pub(crate) dead_pages: BTreeSet<PageNo>,
    pub(crate) last_attr: Option<PoolOffset>,
    pub(crate) last_size: Option<PoolOffset>,
    pub(crate) last_entry: Option<PoolOffset>,
    /// What a page that dies now records as `died_at`: 0 on a strict mount;
    /// on a buffered one `DEATH_PENDING` while an operation is applied
    /// (`deaths_pending`), then that operation's number (`settle_deaths`).
    death_mark: u64,
    /// Pages stamped `DEATH_PENDING`, to be settled.
    died_now: SmallVec<[PageNo; 2]>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            pages: LogPages::default(),
            first: NO_PAGE,
            last: NO_PAGE,
            live_entries: 0,
            live_units: 0,
            dead_pages: BTreeSet::new(),
            last_attr: None,
            last_size: None,
            last_entry: None,
            death_mark: 0,
            died_now: SmallVec::new(),
        }
    }
}

/// The log page holding the entry at `loc`.
pub(crate) fn page_of(loc: PoolOffset) -> PageNo {
    PageNo::containing(loc)
}

/// The unit of its log page at which the entry at `loc` starts.
pub(crate) fn unit_of(loc: PoolOffset) -> usize {
    (((loc.0 & (PAGE_SIZE - 1)) - LOG_PAGE_HEADER_SIZE) / LOG_UNIT) as usize
}

impl Liveness {
    /// Append a page to the end of the chain.
    pub(crate) fn push_page(&mut self, p: PageNo) {
        let page = Box::new(LogPage {
            prev: self.last,
            next: NO_PAGE,
            live_entries: 0,
            min_file_page: u64::MAX,
            max_file_end: 0,
            refs: [0; LOG_UNITS_PER_PAGE as usize],
            units: [0; LOG_UNITS_PER_PAGE as usize],
            pins: Vec::new(),
            died_at: 0,
        });
        assert!(self.pages.insert(p, page), "log page {} linked twice", p.0);
        if self.last == NO_PAGE {
            self.first = p;
        } else {
            self.pages.get_mut(&self.last).expect("last page").next = p;
        }
        self.last = p;
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// The pages from head to tail.
    pub fn page_list(&self) -> Vec<PageNo> {
        self.page_list_with_room(0)
    }

    /// `page_list`, with room for `more` pages after them (a freed file's
    /// data pages: growing the list to take them cost a `realloc`).
    pub fn page_list_with_room(&self, more: usize) -> Vec<PageNo> {
        let mut v = Vec::with_capacity(self.pages.len() + more);
        let mut p = self.first;
        while p != NO_PAGE {
            v.push(p);
            p = self.pages[&p].next;
        }
        v
    }

    pub(crate) fn page_mut(&mut self, loc: PoolOffset) -> &mut LogPage {
        self.pages.get_mut(&page_of(loc)).expect("entry in a page of this log")
    }

    pub(crate) fn add_ref(&mut self, loc: PoolOffset, n: u32) {
        if n > 0 {
            self.add_ref_page(loc, n);
        }
    }

    /// `add_ref` of `n` > 0 references, returning the entry's page, for a
    /// caller that updates the page too: one lookup of it, not two.
    pub(crate) fn add_ref_page(&mut self, loc: PoolOffset, n: u32) -> &mut LogPage {
        assert!(n > 0, "no references added");
        let unit = unit_of(loc);
        let page = self.pages.get_mut(&page_of(loc)).expect("entry in a page of this log");
        let was = page.refs[unit];
        page.refs[unit] += n;
        if was == 0 {
            page.live_entries += 1;
            self.live_units += page.units[unit] as usize;
            self.live_entries += 1;
            if page.live_entries == 1 {
                self.dead_pages.remove(&page_of(loc));
            }
        }
        page
    }

    pub(crate) fn unref(&mut self, loc: PoolOffset) {
        let unit = unit_of(loc);
        let death_mark = self.death_mark;
        let page = self.page_mut(loc);
        assert!(page.refs[unit] > 0, "unref of an entry with no references");
        page.refs[unit] -= 1;
        if page.refs[unit] == 0 {
            page.live_entries -= 1;
            let dead = page.live_entries == 0;
            if dead {
                page.died_at = death_mark;
            }
            self.live_units -= page.units[unit] as usize;
            self.live_entries -= 1;
            if dead {
                if death_mark == DEATH_PENDING {
                    self.died_now.push(page_of(loc));
                }
                self.dead_pages.insert(page_of(loc));
            }
        }
    }

    /// A buffered operation is about to be applied: pages it kills wait for
    /// its sequence number (`settle_deaths`).
    pub(crate) fn deaths_pending(&mut self) {
        assert!(self.died_now.is_empty(), "deaths of an earlier operation never settled");
        self.death_mark = DEATH_PENDING;
    }

    /// The buffered operation applied last is number `seq`: the pages it
    /// killed died at `seq`, and so does any page that dies before the next
    /// operation (GC releasing pins), since `seq` is the latest operation on
    /// this inode and so no earlier than whatever killed the page's entries.
    pub(crate) fn settle_deaths(&mut self, seq: u64) {
        assert!(seq != DEATH_PENDING && seq != 0, "settling deaths with no operation number");
        for p in self.died_now.drain(..) {
            // The page may have been revived (and be live, or dead again
            // with this same mark) within the operation; a dead page still
            // stamped pending gets the number.
            if let Some(page) = self.pages.get_mut(&p) {
                if page.died_at == DEATH_PENDING {
                    page.died_at = seq;
                }
            }
        }
        self.death_mark = seq;
    }

    /// Dead pages (never the tail's) whose death is durable once every
    /// buffered operation up to `durable_seq` is.
    pub(crate) fn dead_pages_durable(&self, tail_page: PageNo, durable_seq: u64) -> SmallVec<[PageNo; 8]> {
        self.dead_pages
            .iter()
            .copied()
            .filter(|&p| p != tail_page)
            .filter(|p| {
                let died_at = self.pages[p].died_at;
                assert!(died_at != DEATH_PENDING, "log page {} dead with its death unsettled", p.0);
                died_at <= durable_seq
            })
            .collect()
    }

    pub(crate) fn pin(&mut self, pinning_page: PageNo, loc: PoolOffset) {
        self.pages.get_mut(&pinning_page).expect("pinning page in the log").pins.push(loc);
        self.add_ref(loc, 1);
    }

    /// Unlink a page from the chain and release the pins it held.
    pub(crate) fn remove_page(&mut self, page: PageNo) {
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
    pub(crate) fn set_units(&mut self, loc: PoolOffset, units: u8) {
        let unit = unit_of(loc);
        let page = self.page_mut(loc);
        debug_assert_eq!(page.refs[unit], 0);
        page.units[unit] = units;
    }
}

/// The log of one inode: pages from head to tail.
pub struct Log {
    /// Where the first log page starts (PoolOffset(0): no log yet).
    pub head: PoolOffset,
    /// Where the next entry goes: the commit point.
    pub tail: PoolOffset,
    pub next_seq: u64,
    pub live: Liveness,
}

impl Log {
    pub(crate) fn tail_page(&self) -> PageNo {
        format::tail_page(self.tail)
    }
}

/// The entries of one commit to one log, in order. Inline for one: most
/// commits (a write of one run of pages, an Attr, a name) have one, and
/// each would otherwise cost an allocation and a free.
pub type Entries = SmallVec<[Entry; 1]>;

/// Entries written after the tail but not yet committed.
pub struct Staged {
    pub new_tail: PoolOffset,
    pub new_pages: SmallVec<[PageNo; 2]>,
    /// (location, sequence number) of each entry, in order.
    pub locs: SmallVec<[(PoolOffset, u64); 4]>,
    pub entries: Entries,
}

impl Staged {
    /// No entries: a new inode whose attributes are all it has.
    pub fn nothing() -> Staged {
        Staged { new_tail: format::NO_LOG, new_pages: SmallVec::new(), locs: SmallVec::new(), entries: Entries::new() }
    }
}

impl InodeData {
    /// Write `entries` after the tail, extending the log with new pages as
    /// needed (streaming stores, `Media::write_lines`). Nothing is
    /// committed: the caller fences and then stores the new tail (directly
    /// or through the journal). On ENOSPC nothing has changed, and the
    /// entries come back with the error: a commit that found no page for
    /// them may free some and try once more (`Ferrite::collect_for_space`).
    pub fn stage(
        &self,
        media: &Media,
        alloc: &PageAllocator,
        owner: InodeNo,
        generation: u32,
        entries: Entries,
    ) -> Result<Staged, (Errno, Entries)> {
        let seqs = self.next_seqs(entries.len());
        let staged = write_log_entries(media, alloc, owner, generation, self.log.tail, entries, seqs, None)?;
        self.link_first_page(media, owner, &staged);
        Ok(staged)
    }

    /// The first entries of an empty log (an inode whose attributes were
    /// all it had) start its first page: the slot's head must name that
    /// page before the tail commits. The head of an empty log is not a
    /// commit word (recovery reads no log while the tail is 0), so it is
    /// stored here (`store_commit_word`), and the commit's first fence
    /// orders it before the tail; a crash before the tail leaves an empty
    /// log whose head names a page nobody owns.
    fn link_first_page(&self, media: &Media, owner: InodeNo, staged: &Staged) {
        let Some(first) = staged.new_pages.first().filter(|_| self.log.tail == format::NO_LOG) else {
            return;
        };
        let head = media.slot_offset(owner) + format::INODE_HEAD_OFFSET;
        media.store_commit_word(head, first.offset().0);
    }

    /// The sequence numbers of the next `n` entries of this log.
    fn next_seqs(&self, n: usize) -> Seqs {
        (self.log.next_seq..self.log.next_seq + n as u64).collect()
    }

    /// `stage` of entries that need at most one new log page, which
    /// `reserve` (a page the caller set aside) provides: it cannot fail.
    /// Returns the staged entries and the reserve if it was not needed.
    pub fn stage_reserved(
        &self,
        media: &Media,
        alloc: &PageAllocator,
        owner: InodeNo,
        generation: u32,
        entries: Entries,
        reserve: PageNo,
    ) -> (Staged, Option<PageNo>) {
        let seqs = self.next_seqs(entries.len());
        let staged = write_log_entries(media, alloc, owner, generation, self.log.tail, entries, seqs, Some(reserve))
            .expect("staging into a reserved page needs no allocation");
        self.link_first_page(media, owner, &staged);
        let unused = (!staged.new_pages.contains(&reserve)).then_some(reserve);
        (staged, unused)
    }
}

thread_local! {
    /// An entry's bytes while it is encoded: one buffer per thread, with
    /// room for the largest entry, not an allocation per staged change.
    static ENCODE_BUF: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(format::ENTRY_UNITS_MAX as usize * LOG_UNIT as usize));
}

/// Does `e`, which would take the last unit of its page, go to a fresh page
/// instead? On a nearly full pool, entries of a file's contents, and Attr
/// entries written by anything but an attribute change (a compaction's
/// checkpoint ends with one), leave that unit for an attribute change (see
/// `may_take_last_log_unit`). Asked only of an entry that would take the
/// unit, once per page at most: elsewhere pages fill to their end (a unit
/// kept on every page cost 3 % of 4 KiB writes and 10 % of 128-byte ones).
/// The placement is policy, not format: replay reads a page to its end or
/// its end marker either way.
fn keeps_last_unit(e: &Entry, alloc: &PageAllocator) -> bool {
    matches!(e, Entry::Write(_) | Entry::Inline(_) | Entry::Truncate(_) | Entry::Punch(_) | Entry::Attr(_))
        && !crate::alloc::may_take_last_log_unit()
        && alloc.nearly_full()
}

/// Write `entries` (with their sequence numbers) after position `pos` (0:
/// start a new chain), extending with fresh log pages as needed, with
/// streaming stores (cached ones, their flushes deferred, inside a
/// buffered deferral). Nothing is committed. On ENOSPC nothing has
/// changed, and the entries come back with the error (a commit may free
/// pages and try once more, `Ferrite::collect_for_space`). The first new
/// page, if any, is `reserve` when given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_log_entries(
    media: &Media,
    alloc: &PageAllocator,
    owner: InodeNo,
    generation: u32,
    pos: PoolOffset,
    entries: Entries,
    seqs: Seqs,
    reserve: Option<PageNo>,
) -> Result<Staged, (Errno, Entries)> {
    let mut pos = pos;
    let mut new_pages = SmallVec::new();
    let mut locs = SmallVec::with_capacity(entries.len());
    // Plan first so that allocation failure changes nothing: which
    // entries open a fresh page.
    let mut plan: smallvec::SmallVec<[bool; 8]> = smallvec::SmallVec::new();
    let mut need_pages = 0u64;
    let mut room = if pos == format::NO_LOG { 0 } else { format::tail_page(pos).offset().0 + PAGE_SIZE - pos.0 };
    for e in &entries {
        let len = e.size_bytes() as u64;
        let fresh = len > room || (len + LOG_UNIT > room && keeps_last_unit(e, alloc));
        if fresh {
            need_pages += 1;
            room = PAGE_SIZE - LOG_PAGE_HEADER_SIZE;
        }
        plan.push(fresh);
        room -= len;
    }
    let from_reserve = if need_pages > 0 { reserve } else { None };
    let to_alloc = need_pages - from_reserve.is_some() as u64;
    let runs = if to_alloc == 0 {
        crate::alloc::Runs::new()
    } else {
        match alloc.alloc(to_alloc) {
            Ok(runs) => runs,
            Err(e) => return Err((e, entries)),
        }
    };
    let mut fresh =
        from_reserve.into_iter().chain(runs.iter().flat_map(|&(s, n)| (0..n as u64).map(move |i| s.plus(i))));
    let mut prev_page = if pos == format::NO_LOG { None } else { Some(format::tail_page(pos)) };
    for ((e, &needs_new), &seq) in entries.iter().zip(&plan).zip(&seqs) {
        let len = e.size_bytes() as u64;
        if needs_new {
            let page = fresh.next().expect("planned page count");
            // A new log page gets its header (next pointer 0); its entry
            // area is not cleared, as nothing reads past where its entries
            // end: the tail in the tail's page, and elsewhere the page end
            // or the end marker written below when the log leaves the page.
            // (Zeroing it cost a 4 KiB store per log page: for 128-byte
            // inline writes, as many bytes as the entries themselves.)
            media.write_nt(page.offset(), &format::encode_log_page_header(owner, generation));
            if let Some(prev) = prev_page {
                // The page being left may hold stale, never-committed entries
                // past this position (staged before a crash): once it is no
                // longer the tail's page, replay reads it to the first
                // all-zero unit, so write that end marker explicitly.
                let page_end = prev.offset() + PAGE_SIZE;
                if pos != format::NO_LOG && pos < page_end {
                    media.write(pos, &[0u8; LOG_UNIT as usize]);
                    media.flush(pos, LOG_UNIT);
                }
                media.store_commit_word(prev.offset() + LOG_NEXT_OFFSET, page.offset().0);
            }
            new_pages.push(page);
            prev_page = Some(page);
            pos = page.offset() + LOG_PAGE_HEADER_SIZE;
        }
        let write = |buf: &mut Vec<u8>| {
            e.encode(seq, buf);
            media.write_lines(pos, buf);
        };
        if ENCODE_BUF.try_with(|buf| write(&mut buf.borrow_mut())).is_err() {
            // The thread's locals are gone: the preload library unmounts at
            // process exit, after them, and an fsync-atomic file's pending
            // commit (or its compaction) stages entries then.
            write(&mut Vec::with_capacity(format::ENTRY_UNITS_MAX as usize * LOG_UNIT as usize));
        }
        locs.push((pos, seq));
        pos = pos + len;
    }
    assert!(format::log_tail_in_bounds(pos), "inode {}: staged tail {pos} out of bounds", owner.0);
    Ok(Staged { new_tail: pos, new_pages, locs, entries })
}
