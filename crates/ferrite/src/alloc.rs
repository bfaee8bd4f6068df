//! Page and inode allocators: per-lane free lists in DRAM.
//!
//! The data region is split into one contiguous partition per lane; a
//! thread allocates from its own lane and steals from the fullest other lane
//! when its own is empty (refilling its own from it), so threads rarely
//! contend on one lock. Each free list is a map of free extents sorted by
//! address (keyed by their end, so an allocation from the front of one
//! updates it in place), so freeing merges with neighbours in O(log n)
//! (NOVA uses a red-black tree for the same reason), and a list of
//! recently freed single pages reused first.
//! Nothing here is persistent: the lists are saved to the pool at a clean
//! unmount and rebuilt by scanning the logs after a crash.

use crate::format::PageNo;
use crate::types::{Errno, FsResult, InodeNo};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Runs of consecutive pages (start, length) handed out by one allocation;
/// most allocations are one or two runs, kept off the heap.
pub type Runs = SmallVec<[(PageNo, u32); 2]>;

/// A value alone in its own 128 bytes (two cache lines: the adjacent-line
/// prefetcher moves lines in pairs). Per-lane state is kept this way, so
/// that two threads on neighbouring lanes never write to one line: the
/// lanes exist so that threads do not share, and a lock word shared by
/// false sharing serialised them all the same.
#[repr(align(128))]
#[derive(Default)]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

const _: () = assert!(std::mem::align_of::<Padded<u8>>() == 128);

thread_local! {
    static LANE: Cell<Option<usize>> = const { Cell::new(None) };
}
static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How much of the removal reserve the calling thread's allocations may
    /// take: all of it inside a `removal_scope`, half inside an
    /// `attribute_scope`, none otherwise.
    static RESERVE_ACCESS: Cell<ReserveAccess> = const { Cell::new(ReserveAccess::None) };
    /// Whether the calling thread is inside an `attribute_scope`: its log
    /// entries may take the last unit of a log page, which entries of file
    /// contents and other Attr entries leave free (`may_take_last_log_unit`).
    static ATTRIBUTE_CHANGE: Cell<bool> = const { Cell::new(false) };
}

/// May the calling thread's log entries take the last unit of a log page
/// of a nearly full pool (`PageAllocator::nearly_full`)? Only inside an
/// `attribute_scope`. There, entries of a file's contents (Write, Inline,
/// Truncate, Punch) and other Attr entries (a compaction's checkpoint ends
/// with one) leave that unit free, so that the log a data change has just
/// filled (on a full pool: the write that failed with ENOSPC because the
/// log needed a page) still has room for one Attr entry: the `chown`,
/// `chmod` or `touch` that follows costs no page, as on a kernel file
/// system, where such a change is made in place. SQLite run by root
/// changes the owner of its WAL at every open: without the unit, the open
/// after a write that filled the pool took a reserve page for it, the
/// `-shm` truncate's pages went to repay it, and the `-shm`'s regrowth then
/// failed by one page (docs/DESIGN.md, "Space for removals").
pub fn may_take_last_log_unit() -> bool {
    ATTRIBUTE_CHANGE.with(Cell::get)
}

/// How much of the removal reserve an allocation may take, in order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum ReserveAccess {
    None,
    Half,
    Whole,
}

/// Pages each lane keeps back from ordinary allocations, at most (its share
/// of the pool-wide removal reserve, `PageAllocator::short_lanes`): a full
/// pool must still give an unlink, rmdir or shrinking truncate the log page
/// its entry may need, or nothing could ever be deleted from it (each such
/// operation needs one page at most, and gives back at least as many as it
/// took once it has freed what it removed, except the removal of a name
/// whose inode stays: another link, or an open descriptor).
const REMOVAL_RESERVE_PER_LANE_MAX: u64 = 16;

/// The removal reserve of one lane for a data region of `data_pages` pages
/// in `lanes` lanes: 1/64 of the lane's pages, at least one page and at
/// most `REMOVAL_RESERVE_PER_LANE_MAX` (a 2 GiB pool with 8 lanes keeps
/// 512 KiB back in all; a test pool of 512 pages in 2 lanes, 6 pages).
pub fn removal_reserve_per_lane(data_pages: u64, lanes: usize) -> u64 {
    (data_pages / (64 * lanes as u64)).clamp(1, REMOVAL_RESERVE_PER_LANE_MAX)
}

/// While alive, the calling thread's page allocations may take the removal
/// reserve (see `REMOVAL_RESERVE_PER_LANE_MAX`), or half of it. Held by the
/// operations that release space, for their whole commit: the allocation
/// happens deep in log staging, where which operation asked is not known.
/// Scopes nest (the wider access wins); dropping one restores what it
/// found.
pub struct RemovalScope {
    outer: ReserveAccess,
    outer_attribute_change: bool,
}

/// Let the calling thread's allocations take the removal reserve until the
/// returned scope is dropped.
pub fn removal_scope() -> RemovalScope {
    reserve_scope(ReserveAccess::Whole, false)
}

/// Let the calling thread's allocations take half of the removal reserve
/// until the returned scope is dropped: for a change of attributes (chmod,
/// chown, utimens, a truncate that grows), which frees nothing but needs a
/// log page at most, and which kernel file systems make on a full disk
/// (`touch` of a file there works). The other half stays for removals, so
/// that no run of attribute changes can leave a pool nothing can be
/// deleted from.
pub fn attribute_scope() -> RemovalScope {
    reserve_scope(ReserveAccess::Half, true)
}

fn reserve_scope(access: ReserveAccess, attribute_change: bool) -> RemovalScope {
    let outer = RESERVE_ACCESS.with(|m| {
        let outer = m.get();
        m.set(outer.max(access));
        outer
    });
    let outer_attribute_change = ATTRIBUTE_CHANGE.with(|a| a.replace(a.get() || attribute_change));
    RemovalScope { outer, outer_attribute_change }
}

impl Drop for RemovalScope {
    fn drop(&mut self) {
        RESERVE_ACCESS.with(|m| m.set(self.outer));
        ATTRIBUTE_CHANGE.with(|a| a.set(self.outer_attribute_change));
    }
}

/// A mask with one bit for each of `lanes` lanes (at most 64).
fn lane_bits(lanes: usize) -> u64 {
    assert!((1..=64).contains(&lanes), "{lanes} lanes");
    u64::MAX >> (64 - lanes)
}

/// The lane of the calling thread, assigned round-robin at its first use.
pub fn thread_lane(lanes: usize) -> usize {
    LANE.with(|l| match l.get() {
        Some(v) => v % lanes,
        None => {
            let v = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
            l.set(Some(v));
            v % lanes
        }
    })
}

#[derive(Default)]
struct FreeList {
    /// end page (exclusive) -> start page. Keyed by the end so that taking
    /// pages from the front of an extent, the usual allocation, changes the
    /// value in place instead of removing and inserting a node.
    extents: BTreeMap<u64, u64>,
    /// Single pages freed recently, reused first: a copy-on-write overwrite
    /// frees one page and allocates one, and this keeps that pair off the
    /// extent map (and the page just freed is likely still in cache).
    singles: Vec<u64>,
    free_pages: u64,
}

/// Most single pages a lane keeps outside its extent map: as many as a
/// buffered batch releases at once with the default `ops_max` (4,096
/// overwrites). The persister frees a batch's pages together; with room
/// for 256 only, the rest became one-page extents, and each allocation
/// after them removed a node of the extent map (burst writes on a buffered
/// mount 7-14 % faster with the larger list, docs/BENCHMARKS.md). 32 KiB a
/// lane at most.
const SINGLES_MAX: usize = 4096;

/// Most pages an allocation that found its home lane empty moves there
/// from the fullest other lane (4 MiB): enough that the all-lanes path is
/// taken once per thousand page allocations, not once per allocation,
/// and never more than half of what the donor has, so two threads whose
/// lanes ran dry do not empty each other's.
const REFILL_PAGES_MAX: u64 = 1024;

impl FreeList {
    fn insert(&mut self, start: u64, len: u64) {
        assert!(len > 0);
        if len == 1 && self.singles.len() < SINGLES_MAX {
            self.singles.push(start);
            self.free_pages += 1;
            return;
        }
        let mut start = start;
        let mut end = start + len;
        // The first extent ending past `start` must begin at or past `end`.
        if let Some((&ne, &ns)) = self.extents.range(start + 1..).next() {
            assert!(end <= ns, "double free of pages {start}+{len} (extent {ns}+{})", ne - ns);
            if end == ns {
                self.extents.remove(&ne);
                end = ne;
            }
        }
        // The extent ending exactly at `start`, if any, joins it.
        if let Some(ps) = self.extents.remove(&start) {
            start = ps;
        }
        self.extents.insert(end, start);
        self.free_pages += len;
    }

    /// Take up to `want` pages as runs, lowest addresses first.
    fn take(&mut self, want: u64, out: &mut Runs) -> u64 {
        if want == 1 {
            if let Some(p) = self.singles.pop() {
                self.free_pages -= 1;
                out.push((PageNo(p), 1));
                return 1;
            }
        }
        let mut got = 0;
        while got < want {
            let Some(mut first) = self.extents.first_entry() else {
                break;
            };
            let (e, s) = (*first.key(), *first.get());
            let take = (want - got).min(e - s).min(u32::MAX as u64);
            if take < e - s {
                *first.get_mut() = s + take;
            } else {
                first.remove();
            }
            out.push((PageNo(s), take as u32));
            got += take;
        }
        while got < want {
            let Some(p) = self.singles.pop() else { break };
            out.push((PageNo(p), 1));
            got += 1;
        }
        self.free_pages -= got;
        got
    }
}

/// What each data page is, two bits a page. Besides catching engine bugs
/// (a double free), it stops a corrupt pool from making the engine free a
/// page twice: after a clean mount the pages of inodes not yet rebuilt are
/// `USED`, and an inode rebuilt lazily must claim each of its pages from
/// `USED` to `CLAIMED`; a page that is free, or claimed by another inode,
/// makes the rebuild fail as corruption.
const PAGE_FREE: u64 = 0;
const PAGE_USED: u64 = 1;
const PAGE_CLAIMED: u64 = 2;

struct PageStates {
    words: Vec<AtomicU64>,
    base: u64,
}

impl PageStates {
    fn new(base: u64, pages: u64) -> PageStates {
        PageStates { words: (0..pages.div_ceil(32)).map(|_| AtomicU64::new(0)).collect(), base }
    }

    fn slot(&self, page: u64) -> (&AtomicU64, u32) {
        let i = page - self.base;
        (&self.words[(i / 32) as usize], ((i % 32) * 2) as u32)
    }

    fn get(&self, page: u64) -> u64 {
        let (w, shift) = self.slot(page);
        (w.load(Ordering::Acquire) >> shift) & 3
    }

    /// Change one page from `from` to `to`; false (and no change) if it
    /// was not in `from`.
    fn swap(&self, page: u64, from: u64, to: u64) -> bool {
        let (w, shift) = self.slot(page);
        let mut cur = w.load(Ordering::Acquire);
        loop {
            if (cur >> shift) & 3 != from {
                return false;
            }
            let new = (cur & !(3 << shift)) | (to << shift);
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    fn set(&self, page: u64, to: u64) {
        let (w, shift) = self.slot(page);
        let mut cur = w.load(Ordering::Acquire);
        loop {
            let new = (cur & !(3 << shift)) | (to << shift);
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(v) => cur = v,
            }
        }
    }
}

/// The page allocator of the data region.
pub struct PageAllocator {
    states: PageStates,
    lanes: Vec<Padded<Mutex<FreeList>>>,
    data_start: u64,
    total_pages: u64,
    span: u64,
    /// Pages held by zero-copy views (`zerocopy.rs`): a page freed while
    /// held stays allocated until its last view lets go.
    pins: PinTable,
    /// Called once when an allocation finds too few free pages: a
    /// buffered mount's queue holds pages that become free when it is
    /// persisted. Returns whether trying again may succeed.
    reclaim: std::sync::OnceLock<Reclaim>,
    /// Pages of each lane that only a thread inside a `removal_scope` may
    /// take (`removal_reserve_per_lane`).
    reserve_per_lane: u64,
    /// Lanes holding fewer free pages than their reserve (bit i: lane i):
    /// a removal borrowed from them, or the mount found them so. While any
    /// is, ordinary allocations take the all-lanes path, which first tops
    /// them up from lanes above their reserve (`repay_reserves`), so that
    /// the reserve is one pool-wide amount. Kept per lane, a borrowed
    /// reserve page was repaid by the freed page only when both were of
    /// one lane: an overwrite borrowing from its thread's lane freed the
    /// old page into the lane owning its address, where the next append
    /// took it, and appends of a SQLite WAL over FUSE drained 13 of a
    /// 16 MiB pool's 56 reserve pages that way. Set only under the lane's
    /// lock by the allocation that leaves it short, cleared by the free or
    /// the repayment that fills it; read without a lock by the fast path,
    /// so one allocation racing with the borrow that opens a deficit may
    /// still take its lane's pages.
    short_lanes: AtomicU64,
}

/// The pin word of one page: how many views hold it (low 31 bits), and
/// whether its file freed it meanwhile (`PIN_FREED`).
const PIN_FREED: u32 = 1 << 31;

/// Pages per chunk of pin words: a chunk (16 KiB) is allocated the first
/// time a page in its 16 MiB of pool is pinned, so a pool never viewed
/// pays nothing, and a 1 TiB pool at most 1 GiB / 4096 chunks.
const PIN_CHUNK_PAGES: usize = 4096;

/// One atomic word per data page, in lazily allocated chunks, and a count
/// of pinned pages so that the free path of a pool without views reads one
/// counter and nothing else. Pins are taken under the owning inode's read
/// lock and every free of a file's page happens under its write lock, so a
/// pin never races with the free of the same page; an unpin may, and the
/// compare-and-swap loops below settle who frees it.
struct PinTable {
    chunks: Box<[std::sync::OnceLock<Box<[AtomicU32]>>]>,
    pinned_pages: AtomicU64,
}

impl PinTable {
    fn new(pages: u64) -> PinTable {
        let n = (pages as usize).div_ceil(PIN_CHUNK_PAGES);
        PinTable { chunks: (0..n).map(|_| std::sync::OnceLock::new()).collect(), pinned_pages: AtomicU64::new(0) }
    }

    /// The pin word of data page `i` (counted from the data start), if its
    /// chunk exists (or `create`).
    fn word(&self, i: u64, create: bool) -> Option<&AtomicU32> {
        let chunk = &self.chunks[i as usize / PIN_CHUNK_PAGES];
        let words = if create {
            chunk.get_or_init(|| (0..PIN_CHUNK_PAGES).map(|_| AtomicU32::new(0)).collect())
        } else {
            chunk.get()?
        };
        Some(&words[i as usize % PIN_CHUNK_PAGES])
    }
}

impl PageAllocator {
    pub fn new(lane_count: usize, data_start: PageNo, total_pages: u64) -> PageAllocator {
        let data = total_pages - data_start.0;
        let span = data.div_ceil(lane_count as u64).max(1);
        PageAllocator {
            states: PageStates::new(data_start.0, data),
            lanes: (0..lane_count).map(|_| Padded(Mutex::new(FreeList::default()))).collect(),
            data_start: data_start.0,
            total_pages,
            span,
            pins: PinTable::new(data),
            reclaim: std::sync::OnceLock::new(),
            reserve_per_lane: removal_reserve_per_lane(data, lane_count),
            // Every lane is empty until format or mount seeds the free
            // lists: the first ordinary allocation then repays and finds
            // out which lanes are really short.
            short_lanes: AtomicU64::new(lane_bits(lane_count)),
        }
    }

    /// Pages kept back for removals in all lanes together.
    pub fn removal_reserve(&self) -> u64 {
        self.reserve_per_lane * self.lanes.len() as u64
    }

    /// Is the pool nearly full: fewer pages available to ordinary
    /// allocations than 1/64 of its data pages (at least one)? Log entries
    /// then leave the last unit of a page to attribute changes
    /// (`may_take_last_log_unit`). Reads every lane's count under its lock:
    /// asked only when an entry would take a page's last unit.
    pub fn nearly_full(&self) -> bool {
        let data_pages = self.total_pages - self.data_start;
        self.free_and_available().1 < (data_pages / 64).max(1)
    }

    /// Free pages, and those of them an ordinary allocation may take
    /// (statfs's free and available blocks: the free pages beyond the
    /// pool-wide removal reserve; the second never exceeds the first).
    pub fn free_and_available(&self) -> (u64, u64) {
        let free = self.free_pages();
        (free, free.saturating_sub(self.removal_reserve()))
    }

    fn lane_of(&self, page: u64) -> usize {
        (((page - self.data_start) / self.span) as usize).min(self.lanes.len() - 1)
    }

    /// Free pages in all lanes (statfs): each lane's count, read under
    /// its lock. There is no shared counter: one written by every
    /// allocation made two threads on their own lanes share a cache line.
    pub fn free_pages(&self) -> u64 {
        self.lanes.iter().map(|l| l.lock().free_pages).sum()
    }

    /// Return `len` pages from `start` to the free lists. Freeing a page
    /// that no rebuilt inode owns (a double free) is a bug and panics.
    /// A page a view holds is not freed yet: it is marked freed, and
    /// `unpin` frees it when its last view lets go (docs/DESIGN.md,
    /// "Zero-copy views and patch buffers").
    pub fn free(&self, start: PageNo, len: u64) {
        self.check_range(start, len);
        if self.pins.pinned_pages.load(Ordering::Acquire) == 0 {
            self.free_unpinned(start.0, len);
            return;
        }
        let mut run_start = start.0;
        for p in start.0..start.0 + len {
            if self.mark_freed_if_pinned(p) {
                if p > run_start {
                    self.free_unpinned(run_start, p - run_start);
                }
                run_start = p + 1;
            }
        }
        if start.0 + len > run_start {
            self.free_unpinned(run_start, start.0 + len - run_start);
        }
    }

    /// If views hold page `p`, mark it freed (their last unpin frees it)
    /// and say so.
    fn mark_freed_if_pinned(&self, p: u64) -> bool {
        let Some(word) = self.pins.word(p - self.data_start, false) else { return false };
        let mut cur = word.load(Ordering::Acquire);
        loop {
            if cur & !PIN_FREED == 0 {
                assert_eq!(cur, 0, "page {p} freed twice while held by views");
                return false;
            }
            assert_eq!(cur & PIN_FREED, 0, "double free of page {p} (held by a view)");
            match word.compare_exchange_weak(cur, cur | PIN_FREED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    /// Free many pages, in any order: sorted into runs of consecutive
    /// pages, they cost the free lists one insertion per run instead of
    /// one per page (a file's pages, when it is deleted, are mostly one
    /// run; a buffered batch frees pages by the thousand).
    /// Sorts `pages` in place.
    pub fn free_many(&self, pages: &mut [PageNo]) {
        pages.sort_unstable();
        let mut i = 0;
        while i < pages.len() {
            let start = pages[i];
            let mut n = 1;
            while i + n < pages.len() && pages[i + n].0 == start.0 + n as u64 {
                n += 1;
            }
            self.free(start, n as u64);
            i += n;
        }
    }

    fn free_unpinned(&self, start: u64, len: u64) {
        for p in start..start + len {
            assert!(self.states.swap(p, PAGE_CLAIMED, PAGE_FREE), "double free of page {p}");
        }
        self.insert_free(PageNo(start), len);
    }

    /// A view holds `pages` (each in use by a file, whose lock the caller
    /// holds, so none is being freed meanwhile): they stay allocated and
    /// unchanged until `unpin`.
    pub fn pin(&self, pages: impl IntoIterator<Item = PageNo>) {
        for p in pages {
            self.check_range(p, 1);
            assert_eq!(self.states.get(p.0), PAGE_CLAIMED, "a view of page {} that no file owns", p.0);
            let word = self.pins.word(p.0 - self.data_start, true).expect("created");
            let prev = word.fetch_add(1, Ordering::AcqRel);
            assert_eq!(prev & PIN_FREED, 0, "a view of page {}, freed while held", p.0);
            assert!(prev + 1 < PIN_FREED, "views of page {} overflow", p.0);
            if prev == 0 {
                self.pins.pinned_pages.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// A view lets go of `pages`: each that was freed while held, and is
    /// held by no other view now, is freed.
    pub fn unpin(&self, pages: impl IntoIterator<Item = PageNo>) {
        for p in pages {
            let word = self
                .pins
                .word(p.0 - self.data_start, false)
                .unwrap_or_else(|| panic!("unpin of page {} that no view holds", p.0));
            let prev = word.fetch_sub(1, Ordering::AcqRel);
            assert!(prev & !PIN_FREED != 0, "unpin of page {} that no view holds", p.0);
            if prev & !PIN_FREED == 1 {
                if prev & PIN_FREED != 0 {
                    // The last view of a page its file freed: free it now.
                    word.store(0, Ordering::Release);
                    self.free_unpinned(p.0, 1);
                }
                self.pins.pinned_pages.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether a view holds `page` (an fsync-atomic write must then copy
    /// the page instead of writing it in place).
    pub fn is_pinned(&self, page: PageNo) -> bool {
        self.pins.pinned_pages.load(Ordering::Acquire) != 0
            && self
                .pins
                .word(page.0 - self.data_start, false)
                .is_some_and(|w| w.load(Ordering::Acquire) & !PIN_FREED != 0)
    }

    /// Pages views hold, and how many of them were freed meanwhile (held
    /// only by views): for statistics and tests.
    pub fn pinned(&self) -> (u64, u64) {
        let (mut held, mut freed) = (0, 0);
        for chunk in self.pins.chunks.iter().filter_map(|c| c.get()) {
            for w in chunk.iter() {
                let v = w.load(Ordering::Acquire);
                if v & !PIN_FREED != 0 {
                    held += 1;
                    if v & PIN_FREED != 0 {
                        freed += 1;
                    }
                }
            }
        }
        (held, freed)
    }

    /// Seed the free lists (format, mount): pages that were not handed out.
    pub fn init_free(&self, start: PageNo, len: u64) {
        self.check_range(start, len);
        for p in start.0..start.0 + len {
            self.states.set(p, PAGE_FREE);
        }
        self.insert_free(start, len);
    }

    /// Mark pages in use by inodes not rebuilt yet (clean mount).
    pub fn init_used(&self, start: PageNo, len: u64) {
        self.check_range(start, len);
        for p in start.0..start.0 + len {
            self.states.set(p, PAGE_USED);
        }
    }

    /// Mark a page owned by an inode already rebuilt (crash recovery).
    pub fn init_claimed(&self, page: PageNo) {
        self.check_range(page, 1);
        self.states.set(page.0, PAGE_CLAIMED);
    }

    /// An inode rebuilt lazily claims its pages: each must be in use and
    /// not claimed by another inode. All or nothing.
    pub fn claim(&self, pages: &[PageNo]) -> Result<(), crate::format::Corrupt> {
        for (i, p) in pages.iter().enumerate() {
            let inside = p.0 >= self.data_start && p.0 < self.total_pages;
            if !inside || !self.states.swap(p.0, PAGE_USED, PAGE_CLAIMED) {
                for q in &pages[..i] {
                    self.states.swap(q.0, PAGE_CLAIMED, PAGE_USED);
                }
                let what = if !inside {
                    "outside the data region"
                } else if self.states.get(p.0) == PAGE_FREE {
                    "free in the allocator"
                } else {
                    "owned twice"
                };
                return Err(crate::format::corrupt!("page {} is {what}", p.0));
            }
        }
        Ok(())
    }

    fn check_range(&self, start: PageNo, len: u64) {
        assert!(
            start.0 >= self.data_start && start.0.checked_add(len).is_some_and(|e| e <= self.total_pages),
            "pages {}+{len} outside the data region",
            start.0
        );
    }

    fn insert_free(&self, start: PageNo, len: u64) {
        let mut s = start.0;
        let end = start.0 + len;
        // An extent may straddle lane partitions; split it at the borders.
        while s < end {
            let lane = self.lane_of(s);
            let lane_end = if lane == self.lanes.len() - 1 {
                self.total_pages
            } else {
                self.data_start + (lane as u64 + 1) * self.span
            };
            let e = end.min(lane_end);
            let mut list = self.lanes[lane].lock();
            list.insert(s, e - s);
            if list.free_pages >= self.reserve_per_lane && self.short_lanes.load(Ordering::Relaxed) & (1 << lane) != 0 {
                self.short_lanes.fetch_and(!(1 << lane), Ordering::Relaxed);
            }
            drop(list);
            s = e;
        }
    }

    /// Allocate `count` pages, as few contiguous runs as the free lists
    /// allow. All or nothing: ENOSPC leaves the lists unchanged.
    pub fn set_reclaim(&self, reclaim: Reclaim) {
        assert!(self.reclaim.set(reclaim).is_ok(), "page allocator reclaim set twice");
    }

    pub fn alloc(&self, count: u64) -> FsResult<Runs> {
        match self.alloc_once(count) {
            Err(Errno::ENOSPC) if self.reclaim.get().is_some_and(|r| r()) => self.alloc_once(count),
            r => r,
        }
    }

    fn alloc_once(&self, count: u64) -> FsResult<Runs> {
        assert!(count > 0);
        let mut out = Runs::new();
        let home = thread_lane(self.lanes.len());
        // What each lane keeps back from this allocation: its share of the
        // removal reserve, none of it for a removal, half of it for an
        // attribute change.
        let keep = match RESERVE_ACCESS.with(Cell::get) {
            ReserveAccess::None => self.reserve_per_lane,
            ReserveAccess::Half => self.reserve_per_lane.div_ceil(2),
            ReserveAccess::Whole => 0,
        };
        {
            // The common case: the calling thread's own lane has room.
            // Only its lock is taken, nothing shared with other lanes.
            // An ordinary one while some lane is short of its reserve
            // takes the all-lanes path, which repays it first.
            let mut lane = self.lanes[home].lock();
            if lane.free_pages >= count + keep && (keep == 0 || self.short_lanes.load(Ordering::Relaxed) == 0) {
                let got = lane.take(count, &mut out);
                assert_eq!(got, count, "lane {home} lost pages");
                if lane.free_pages < self.reserve_per_lane {
                    self.short_lanes.fetch_or(1 << home, Ordering::Relaxed);
                }
            }
        }
        if out.is_empty() {
            // Not enough in the home lane: hold every lane (in lane order,
            // so two such allocations cannot deadlock), check that all of
            // them together have room, and take from the fullest first.
            // All or nothing: ENOSPC leaves every list unchanged.
            let mut lanes: SmallVec<[parking_lot::MutexGuard<'_, FreeList>; 8]> =
                self.lanes.iter().map(|l| l.lock()).collect();
            if keep > 0 {
                self.repay_reserves(&mut lanes);
            }
            let available = |l: &FreeList| l.free_pages.saturating_sub(keep);
            if lanes.iter().map(|l| available(l)).sum::<u64>() < count {
                return Err(Errno::ENOSPC);
            }
            let home_available = available(&lanes[home]);
            let mut got = lanes[home].take(count.min(home_available), &mut out);
            while got < count {
                let fullest = (0..lanes.len()).max_by_key(|&i| available(&lanes[i])).expect("at least one lane");
                let fullest_available = available(&lanes[fullest]);
                let took = lanes[fullest].take((count - got).min(fullest_available), &mut out);
                assert!(took > 0, "allocator accounting lost pages");
                got += took;
            }
            // Refill the home lane from the fullest other lane, so that
            // the calling thread's next allocations take one lock again
            // instead of every lane's. A thread that writes more than its
            // lane's share of the pool otherwise paid this path on every
            // allocation: 8 locks, 15 % of a 4 KiB append (BENCHMARKS.md,
            // issue 14, "Seventh pass"). Pages keep their partition: the
            // free path returns each to the lane that owns its address.
            // The donor keeps its removal reserve whoever allocates.
            let spare_of = |l: &FreeList| l.free_pages.saturating_sub(self.reserve_per_lane) / 2;
            let donor = (0..lanes.len()).filter(|&i| i != home).max_by_key(|&i| spare_of(&lanes[i]));
            if let Some(donor) = donor {
                let spare = spare_of(&lanes[donor]).min(REFILL_PAGES_MAX);
                if spare > 0 {
                    move_free_pages(&mut lanes, donor, home, spare);
                }
            }
            self.short_lanes.store(self.short_of(&lanes), Ordering::Relaxed);
        }
        for &(s, n) in &out {
            for p in s.0..s.0 + n as u64 {
                assert!(self.states.swap(p, PAGE_FREE, PAGE_CLAIMED), "allocated page {p} was not free");
            }
        }
        Ok(out)
    }

    /// Top up every lane short of its reserve with pages of lanes above
    /// theirs (all lanes locked, in lane order), so that afterwards either
    /// no lane is short or none has pages beyond its reserve: what ordinary
    /// allocations may take is then exactly the free pages beyond the
    /// pool-wide reserve. The pages move between free lists only; each
    /// returns to the lane owning its address when it is next freed.
    fn repay_reserves(&self, lanes: &mut [parking_lot::MutexGuard<'_, FreeList>]) {
        if self.short_lanes.load(Ordering::Relaxed) == 0 {
            return;
        }
        let reserve = self.reserve_per_lane;
        for short in 0..lanes.len() {
            while lanes[short].free_pages < reserve {
                let spare = |l: &FreeList| l.free_pages.saturating_sub(reserve);
                let donor = (0..lanes.len()).max_by_key(|&i| spare(&lanes[i])).expect("at least one lane");
                let n = spare(&lanes[donor]).min(reserve - lanes[short].free_pages);
                if n == 0 {
                    break;
                }
                move_free_pages(lanes, donor, short, n);
            }
        }
        self.short_lanes.store(self.short_of(lanes), Ordering::Relaxed);
    }

    /// The lanes short of their reserve, as bits (all lanes locked).
    fn short_of(&self, lanes: &[parking_lot::MutexGuard<'_, FreeList>]) -> u64 {
        (0..lanes.len()).filter(|&i| lanes[i].free_pages < self.reserve_per_lane).fold(0, |m, i| m | 1 << i)
    }

    /// Allocate exactly one page.
    pub fn alloc_one(&self) -> FsResult<PageNo> {
        Ok(self.alloc(1)?[0].0)
    }

    /// Every free extent, sorted (for saving, fsck and tests).
    pub fn free_extents(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for lane in &self.lanes {
            let lane = lane.lock();
            v.extend(lane.extents.iter().map(|(&e, &s)| (s, e - s)));
            v.extend(lane.singles.iter().map(|&s| (s, 1)));
        }
        v.sort_unstable();
        v
    }
}

/// Move `n` free pages from lane `from`'s list to lane `to`'s (both locked).
/// Pages keep their partition: the free path returns each to the lane
/// that owns its address.
fn move_free_pages(lanes: &mut [parking_lot::MutexGuard<'_, FreeList>], from: usize, to: usize, n: u64) {
    let mut moved = Runs::new();
    let took = lanes[from].take(n, &mut moved);
    assert_eq!(took, n, "lane {from} lost pages");
    for (s, len) in moved {
        lanes[to].insert(s.0, len as u64);
    }
}

/// Consecutive inode numbers that belong to one lane (`InodeAllocator::lane_of`).
const INODE_LANE_RUN: u64 = 64;

/// What an allocator calls when it runs out (see `PageAllocator::reclaim`).
pub type Reclaim = Box<dyn Fn() -> bool + Send + Sync>;

/// The inode number allocator: per-lane stacks of free slots.
pub struct InodeAllocator {
    lanes: Vec<Padded<Mutex<Vec<u64>>>>,
    /// As `PageAllocator::reclaim`, for inode numbers.
    reclaim: std::sync::OnceLock<Reclaim>,
}

impl InodeAllocator {
    pub fn new(lane_count: usize) -> InodeAllocator {
        InodeAllocator {
            lanes: (0..lane_count).map(|_| Padded(Mutex::new(Vec::new()))).collect(),
            reclaim: std::sync::OnceLock::new(),
        }
    }

    /// Fill from an ascending iterator of free inode numbers; the lowest
    /// numbers are handed out first.
    pub fn fill(&self, free: impl Iterator<Item = u64>) {
        for ino in free {
            self.lanes[self.lane_of(ino)].lock().push(ino);
        }
        for lane in &self.lanes {
            lane.lock().reverse();
        }
    }

    /// The lane an inode number belongs to: runs of `INODE_LANE_RUN`
    /// numbers per lane, so that the inodes two threads create in turn
    /// are not neighbours in the inode cache's slot array (neighbours
    /// share a cache line there, and every create writes its slot).
    fn lane_of(&self, ino: u64) -> usize {
        ((ino / INODE_LANE_RUN) % self.lanes.len() as u64) as usize
    }

    /// Free inode numbers in all lanes (statfs); no shared counter, as
    /// for pages.
    pub fn free_count(&self) -> u64 {
        self.lanes.iter().map(|l| l.lock().len() as u64).sum()
    }

    pub fn set_reclaim(&self, reclaim: Reclaim) {
        assert!(self.reclaim.set(reclaim).is_ok(), "inode allocator reclaim set twice");
    }

    pub fn alloc(&self) -> FsResult<InodeNo> {
        match self.alloc_once() {
            Err(Errno::ENOSPC) if self.reclaim.get().is_some_and(|r| r()) => self.alloc_once(),
            r => r,
        }
    }

    fn alloc_once(&self) -> FsResult<InodeNo> {
        let home = thread_lane(self.lanes.len());
        for i in 0..self.lanes.len() {
            let lane = (home + i) % self.lanes.len();
            if let Some(ino) = self.lanes[lane].lock().pop() {
                return Ok(InodeNo(ino));
            }
        }
        Err(Errno::ENOSPC)
    }

    pub fn free(&self, ino: InodeNo) {
        self.lanes[self.lane_of(ino.0)].lock().push(ino.0);
    }

    /// Every free inode number, sorted.
    pub fn free_list(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.lanes.iter().flat_map(|l| l.lock().clone()).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_merge_and_enospc() {
        let a = PageAllocator::new(3, PageNo(10), 110);
        a.init_free(PageNo(10), 100);
        assert_eq!(a.free_pages(), 100);
        let _removal = removal_scope();
        let runs = a.alloc(100).unwrap();
        assert_eq!(runs.iter().map(|r| r.1 as u64).sum::<u64>(), 100);
        assert_eq!(a.alloc(1), Err(Errno::ENOSPC));
        for (p, n) in runs {
            a.free(p, n as u64);
        }
        assert_eq!(a.free_extents().iter().map(|e| e.1).sum::<u64>(), 100);
        assert!(a.free_extents().len() <= 3, "extents merge within each lane");
    }

    /// Ordinary allocations leave each lane's removal reserve alone, in
    /// the one-lane path and in the all-lanes path alike; a thread inside a
    /// removal scope takes it, from any lane; scopes nest; and a lane
    /// refilled from another never takes the donor's reserve.
    #[test]
    fn the_removal_reserve_is_for_removals_only() {
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        a.init_free(PageNo(8), total);
        let keep = a.reserve_per_lane;
        assert_eq!(keep, 16);
        assert_eq!(a.removal_reserve(), 64);
        let mut held: Vec<(PageNo, u32)> = Vec::new();
        // Page by page, crossing lanes through the refill path.
        while let Ok(runs) = a.alloc(1) {
            held.extend(runs);
        }
        assert_eq!(a.free_pages(), a.removal_reserve(), "ordinary allocations stop at the reserve");
        assert_eq!(a.free_and_available().1, 0);
        for lane in &a.lanes {
            assert_eq!(lane.lock().free_pages, keep, "every lane keeps its own reserve");
        }
        assert_eq!(a.alloc(1), Err(Errno::ENOSPC));
        {
            let _outer = removal_scope();
            {
                let _inner = removal_scope();
                held.extend(a.alloc(keep + 1).unwrap());
            }
            // The inner scope's end left the outer one in force.
            held.extend(a.alloc(2 * keep).unwrap());
        }
        assert_eq!(a.alloc(1), Err(Errno::ENOSPC), "the scope's end ends the permission");
        assert_eq!(a.free_pages(), keep - 1);
        {
            let _removal = removal_scope();
            held.extend(a.alloc(keep - 1).unwrap());
            assert_eq!(a.alloc(1), Err(Errno::ENOSPC), "a removal still fails on an empty pool");
        }
        assert_eq!(held.iter().map(|r| r.1 as u64).sum::<u64>(), total);
        for (p, n) in held {
            a.free(p, n as u64);
        }
        assert_eq!(a.free_pages(), total);
    }

    /// An attribute scope takes half of the reserve, never more, and a
    /// removal scope inside it the rest: scopes nest, the wider one wins.
    #[test]
    fn attribute_changes_take_half_the_reserve() {
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        a.init_free(PageNo(8), total);
        let mut held: Vec<(PageNo, u32)> = Vec::new();
        while let Ok(runs) = a.alloc(1) {
            held.extend(runs);
        }
        let half = a.removal_reserve() / 2;
        {
            let _attributes = attribute_scope();
            for _ in 0..half {
                held.extend(a.alloc(1).expect("half the reserve"));
            }
            assert_eq!(a.alloc(1), Err(Errno::ENOSPC), "an attribute change took more than half");
            {
                let _removal = removal_scope();
                held.extend(a.alloc(1).expect("a removal inside an attribute change"));
            }
            assert_eq!(a.alloc(1), Err(Errno::ENOSPC), "the removal scope's end restored half");
        }
        assert_eq!(a.alloc(1), Err(Errno::ENOSPC));
        assert_eq!(a.free_pages(), half - 1);
        for (p, n) in held {
            a.free(p, n as u64);
        }
        assert_eq!(a.free_and_available(), (total, total - a.removal_reserve()));
    }

    /// The reserve is one pool-wide amount, though each lane keeps its
    /// share: a removal that borrows from one lane and frees a page of
    /// another (an overwrite: the new page from its thread's lane, the old
    /// one back to the lane owning its address) leaves ordinary allocations
    /// nothing more to take, where per lane the other lane's extra page
    /// was theirs and the borrowed one never came back.
    #[test]
    fn a_reserve_borrowed_in_one_lane_is_repaid_by_a_free_in_another() {
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        a.init_free(PageNo(8), total);
        assert_eq!(a.short_lanes.load(Ordering::Relaxed), 0, "seeded lanes hold their reserves");
        let mut held: Vec<PageNo> = Vec::new();
        while let Ok(runs) = a.alloc(1) {
            held.extend(runs.iter().map(|r| r.0));
        }
        assert_eq!(a.free_and_available(), (a.removal_reserve(), 0));
        for round in 0..3 * a.removal_reserve() {
            // Borrow a page, and free one of another lane.
            let borrowed = {
                let _removal = removal_scope();
                a.alloc_one().unwrap()
            };
            let lane = a.lanes.iter().position(|l| l.lock().free_pages < a.reserve_per_lane).expect("a short lane");
            let k = held.iter().position(|p| a.lane_of(p.0) != lane).expect("a page of another lane");
            a.free(held.swap_remove(k), 1);
            held.push(borrowed);
            assert_eq!(a.alloc(1), Err(Errno::ENOSPC), "round {round}: an ordinary allocation took a repaid page");
            assert_eq!(a.free_and_available(), (a.removal_reserve(), 0));
        }
        // A page freed beyond the reserve is anybody's again.
        a.free(held.pop().unwrap(), 1);
        assert_eq!(a.free_and_available().1, 1);
        held.extend(a.alloc(1).unwrap().iter().map(|r| r.0));
        assert_eq!(a.alloc(1), Err(Errno::ENOSPC));
        for p in held {
            a.free(p, 1);
        }
        assert_eq!(a.free_and_available(), (total, total - a.removal_reserve()));
    }

    /// A pool mounted with its free pages in few lanes keeps the whole
    /// reserve back from ordinary allocations, not only the shares of the
    /// lanes that have pages.
    #[test]
    fn a_reserve_is_kept_whole_when_some_lanes_start_empty() {
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        // Only the last lane's pages are free (the others are in use).
        a.init_free(PageNo(8 + 3 * 1024), 1024);
        assert_eq!(a.short_lanes.load(Ordering::Relaxed), 0b0111);
        let mut got = 0;
        while a.alloc(1).is_ok() {
            got += 1;
        }
        assert_eq!(got, 1024 - a.removal_reserve());
        assert_eq!(a.free_and_available(), (a.removal_reserve(), 0));
    }

    /// Threads on their own lanes (and, once those run dry, stealing from
    /// each other's) never get a page twice, never lose one, and an
    /// allocation larger than what is left fails whole: with no shared
    /// counter, the lane locks alone keep the accounting.
    #[test]
    fn concurrent_allocations_across_lanes_keep_every_page_once() {
        use std::collections::HashSet;
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        a.init_free(PageNo(8), total);
        let held: Vec<Vec<(PageNo, u32)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let a = &a;
                    s.spawn(move || {
                        let mut mine: Vec<(PageNo, u32)> = Vec::new();
                        let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                        for _ in 0..4000 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let n = 1 + x % 48;
                            match a.alloc(n) {
                                Ok(runs) => mine.extend(runs),
                                Err(e) => assert_eq!(e, Errno::ENOSPC),
                            }
                            if x % 3 == 0 {
                                if let Some((p, n)) = mine.pop() {
                                    a.free(p, n as u64);
                                }
                            }
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        let mut held_pages = 0u64;
        for (p, n) in held.iter().flatten() {
            for k in 0..*n as u64 {
                assert!(seen.insert(p.0 + k), "page {} handed out twice", p.0 + k);
            }
            held_pages += *n as u64;
        }
        assert_eq!(a.free_pages() + held_pages, total, "pages lost or invented");
        let before = a.free_extents();
        assert_eq!(a.alloc(a.free_pages() + 1), Err(Errno::ENOSPC));
        assert_eq!(a.free_extents(), before, "a failed allocation changed the lists");
        for (p, n) in held.into_iter().flatten() {
            a.free(p, n as u64);
        }
        assert_eq!(a.free_pages(), total);
    }

    /// A thread whose own lane has run dry takes every lane's lock once,
    /// and leaves its lane refilled from the fullest other one, so its
    /// next allocations are served by its own lane again. Pages moved keep
    /// their partition: freed, each goes back to the lane of its address.
    #[test]
    fn a_dry_home_lane_is_refilled_from_the_fullest() {
        let total = 4096u64;
        let a = PageAllocator::new(4, PageNo(8), 8 + total);
        a.init_free(PageNo(8), total);
        let home = thread_lane(4);
        let own = a.lanes[home].lock().free_pages;
        assert_eq!(own, 1024);
        // Inside a removal scope, so that the home lane can be emptied.
        let _removal = removal_scope();
        let mut held: Vec<(PageNo, u32)> = a.alloc(own).unwrap().into_vec();
        assert_eq!(a.lanes[home].lock().free_pages, 0);
        held.extend(a.alloc(1).unwrap());
        let refilled = a.lanes[home].lock().free_pages;
        // The page asked for came from one full lane; half of another
        // full lane (now the fullest) moved home, less its reserve.
        assert_eq!(refilled, (1024 - a.reserve_per_lane) / 2, "half the fullest lane moved");
        held.extend(a.alloc(refilled).unwrap());
        assert_eq!(a.lanes[home].lock().free_pages, 0, "served by the refilled home lane");
        assert_eq!(a.free_pages() + held.iter().map(|r| r.1 as u64).sum::<u64>(), total);
        for (p, n) in held {
            a.free(p, n as u64);
        }
        assert_eq!(a.free_pages(), total);
        for (i, lane) in a.lanes.iter().enumerate() {
            let lane = lane.lock();
            let pages = lane.extents.iter().map(|(&e, &s)| (s, e)).chain(lane.singles.iter().map(|&s| (s, s + 1)));
            for (s, e) in pages {
                assert!(a.lane_of(s) == i && a.lane_of(e - 1) == i, "pages {s}..{e} freed into lane {i}");
            }
        }
    }

    /// Pages freed together in any order come back as the runs they form,
    /// with every page counted once.
    #[test]
    fn free_many_frees_runs() {
        let a = PageAllocator::new(1, PageNo(10), 1010);
        a.init_free(PageNo(10), 1000);
        let _removal = removal_scope();
        let got: Vec<u64> = a.alloc(1000).unwrap().iter().flat_map(|&(s, n)| s.0..s.0 + n as u64).collect();
        assert_eq!(got.len(), 1000);
        // Two runs, 100..=199 and 500..=509, given back shuffled.
        let mut back: Vec<PageNo> = (100..200).chain(500..510).map(PageNo).collect();
        back.reverse();
        back.swap(3, 77);
        a.free_many(&mut back);
        assert_eq!(a.free_pages(), 110);
        assert_eq!(a.free_extents(), vec![(100, 100), (500, 10)]);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let a = PageAllocator::new(1, PageNo(10), 110);
        a.init_free(PageNo(10), 5);
        a.free(PageNo(12), 1);
    }
}
