//! The persistence checker, in the manner of pmemcheck: over the trace of
//! each operation (between its begin and end markers) it reports
//!
//! - `store-never-flushed`: a cached store whose line no flush covered by
//!   the end of the operation (strict mode: everything is durable when an
//!   operation returns);
//! - `flush-never-fenced`: a flush, or a non-temporal store, with no fence
//!   after it by the end of the operation;
//! - `dirty-again-at-fence`: a line flushed since the last fence was stored
//!   to again after its flush and not flushed again before the fence: the
//!   fence does not cover that store, though the code flushed the line as if
//!   it had finished with it;
//! - `commit-word-not-atomic`: a commit word (FORMAT.md: journal active
//!   word, inode state/head/tail, log page next pointer) changed by anything
//!   but one aligned 8-byte store.
//!
//! Three multi-word writes of commit words are safe by construction, and
//! the checker verifies that the condition holds each time instead of
//! trusting a list (each is counted in [`Report::guarded`]):
//! - `journal-header-under-crc`: the journal's active word is written with
//!   its CRC in one store; a torn header fails its CRC and recovery treats
//!   the transaction as never opened (FORMAT.md, "Journal page");
//! - `slot-not-live`: the head and tail of an inode slot whose state word is
//!   zero (free), written before the journal makes the slot live;
//! - `log-page-init`: the next pointer of a log page written as part of the
//!   whole header of a page that is not yet linked into any log.
//!
//! Redundant flushes (of lines with nothing unflushed) are counted as a
//! performance note, not a failure.
//!
//! With fsync-atomic files ([`check_modes`]) durability is demanded where
//! the mode promises it, not at the end of every operation. The oracle
//! says of each call which file's pending epoch it extends and which files
//! it commits ([`CallMode`]). The lines a call that extends file F leaves
//! unflushed or unfenced are *carried* (owned by F) instead of reported;
//! every other call is strict as above. When a call that commits F
//! returns, every line F's epoch left must be flushed and fenced
//! (`store-never-flushed` and `flush-never-fenced` at the commit point).
//! And one more kind:
//! - `epoch-line-reused`: a line F's epoch left unfenced (a streaming
//!   store, or a flushed store) stored to by a call that neither extends nor
//!   commits F: F's page was freed and handed to another operation (another
//!   thread, in a real run) while F's stores to it were still in flight.

use crate::exec::{begin_mark, end_mark};
use crate::oracle::{owner_name, CallMode, FileId};
use ferrite::format::{self, InodeSlot, Layout, PageNo, INODE_SLOT_SIZE, LOG_NEXT_OFFSET, LOG_PAGE_MAGIC, PAGE_SIZE};
use ferrite::InodeNo;
use ferrite_pmem::Event;
use std::collections::{BTreeMap, BTreeSet};

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the call in the workload.
    pub call: usize,
    pub kind: &'static str,
    /// Event index (in the whole workload trace) of the store or flush.
    pub event: usize,
    pub offset: u64,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in call {} at event {} (pool offset {:#x}): {}",
            self.kind, self.call, self.event, self.offset, self.detail
        )
    }
}

/// What the checker found over a whole workload.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Guarded multi-word writes of commit words, by kind.
    pub guarded: BTreeMap<&'static str, u64>,
    pub redundant_flushes: u64,
    pub stores: u64,
    pub flushes: u64,
    pub fences: u64,
}

#[derive(Clone, Copy, Default)]
struct LineState {
    /// First cached store to the line not yet covered by a flush.
    unflushed: Option<usize>,
    /// A flush (or non-temporal store) not yet followed by a fence.
    awaiting_fence: Option<usize>,
    /// A store after the line's flush, before the fence.
    redirtied: Option<usize>,
    /// The last call that stored to the line.
    call: usize,
    /// The fsync-atomic file whose pending epoch left the line not durable
    /// at the end of an earlier call (fsync-atomic rules only).
    owner: Option<FileId>,
}

/// What kind of commit word lies at an offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Word {
    JournalActive,
    SlotState(u64),
    SlotHeadTail(u64),
    LogNext(u64),
}

fn u64_at(img: &[u8], off: u64) -> u64 {
    let o = off as usize;
    u64::from_le_bytes(img[o..o + 8].try_into().expect("8 bytes"))
}

/// Pages of every live inode's log in `img` (a walk bounded by the pool
/// size; a broken log just stops the walk: this is not fsck).
pub fn live_log_pages(img: &[u8], layout: &Layout) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for ino in 1..layout.inode_count {
        let off = layout.inode_slot(InodeNo(ino)).0 as usize;
        let Ok(InodeSlot::Live { header, head, tail, .. }) =
            format::decode_inode_slot(&img[off..off + INODE_SLOT_SIZE as usize], InodeNo(ino))
        else {
            continue;
        };
        let (head, tail) = (head.0, tail.0);
        if tail == 0 {
            continue;
        }
        let tail_page = (tail - 1) / PAGE_SIZE;
        let mut page = head / PAGE_SIZE;
        for _ in 0..layout.total_pages {
            if !head.is_multiple_of(PAGE_SIZE) || !layout.is_data_page(PageNo(page)) {
                break;
            }
            let p = (page * PAGE_SIZE) as usize;
            let Ok(next) = format::decode_log_page_header(&img[p..p + 64], header.ino, header.generation) else {
                break;
            };
            if !out.insert(page) || page == tail_page {
                break;
            }
            if !next.0.is_multiple_of(PAGE_SIZE) {
                break;
            }
            page = next.0 / PAGE_SIZE;
        }
    }
    out
}

struct Checker<'a> {
    layout: &'a Layout,
    img: Vec<u8>,
    lines: BTreeMap<u64, LineState>,
    log_pages: BTreeSet<u64>,
    /// Log pages initialized since the call began (kept when the live set
    /// is computed again).
    init_pages: BTreeSet<u64>,
    /// A word of the inode table changed since the live log pages were
    /// last computed: compute them again at the next fence (a call that
    /// frees an inode and then reuses its log pages: a buffered mount's
    /// batch made durable inside a call, to reclaim space).
    slots_changed: bool,
    call: usize,
    report: Report,
    /// The fsync-atomic rules: what each call does to the pending epochs.
    modes: Option<&'a [CallMode]>,
}

impl Checker<'_> {
    fn violation(&mut self, kind: &'static str, event: usize, offset: u64, detail: String) {
        // One report per kind and line per call is enough.
        if self.report.violations.iter().any(|v| v.call == self.call && v.kind == kind && v.offset / 64 == offset / 64)
        {
            return;
        }
        self.report.violations.push(Violation { call: self.call, kind, event, offset, detail });
    }

    /// The commit word at 8-aligned offset `w`, if any.
    fn word_at(&self, w: u64) -> Option<Word> {
        let l = self.layout;
        let page = w / PAGE_SIZE;
        let within = w % PAGE_SIZE;
        if page >= l.journal_start.0 && page < l.journal_start.0 + l.lane_count as u64 {
            return (within == 0).then_some(Word::JournalActive);
        }
        let it = l.inode_table_start.offset().0;
        let it_end = it + l.inode_table_pages * PAGE_SIZE;
        if w >= it && w < it_end {
            let slot = (w - it) / INODE_SLOT_SIZE;
            if slot == 0 {
                return None;
            }
            let sw = (w - it) % INODE_SLOT_SIZE;
            return match sw {
                0 => Some(Word::SlotState(slot)),
                8 | 16 => Some(Word::SlotHeadTail(slot)),
                _ => None,
            };
        }
        if within == LOG_NEXT_OFFSET && self.log_pages.contains(&page) {
            return Some(Word::LogNext(page));
        }
        None
    }

    fn check_commit_words(&mut self, ev: usize, offset: u64, data: &[u8], atomic: bool) {
        let end = offset + data.len() as u64;
        let mut w = offset & !7;
        while w < end {
            if let Some(kind) = self.word_at(w) {
                let new_lo = w.max(offset);
                let new_hi = (w + 8).min(end);
                let changes = (new_lo..new_hi).any(|b| self.img[b as usize] != data[(b - offset) as usize]);
                let exact = atomic && offset == w && data.len() == 8;
                if changes && !exact {
                    self.classify(ev, offset, end, w, kind);
                }
            }
            w += 8;
        }
    }

    fn classify(&mut self, ev: usize, start: u64, end: u64, w: u64, kind: Word) {
        let guard = match kind {
            Word::JournalActive => (start <= w && end >= w + 12).then_some("journal-header-under-crc"),
            Word::SlotHeadTail(slot) => {
                let state = self.layout.inode_slot(InodeNo(slot)).0;
                (u64_at(&self.img, state) == 0).then_some("slot-not-live")
            }
            Word::LogNext(_) => None,
            Word::SlotState(_) => None,
        };
        match guard {
            Some(g) => *self.report.guarded.entry(g).or_insert(0) += 1,
            None => {
                let what = match kind {
                    Word::JournalActive => "journal active word".to_string(),
                    Word::SlotState(s) => format!("state word of inode slot {s}"),
                    Word::SlotHeadTail(s) => format!("head/tail word of live inode slot {s}"),
                    Word::LogNext(p) => format!("next pointer of live log page {p}"),
                };
                self.violation(
                    "commit-word-not-atomic",
                    ev,
                    w,
                    format!(
                        "{what} changed by a store of {} bytes at {start:#x} (not one aligned 8-byte store)",
                        end - start
                    ),
                );
            }
        }
    }

    fn mode(&self) -> Option<&CallMode> {
        self.modes.and_then(|m| m.get(self.call))
    }

    fn store(&mut self, ev: usize, offset: u64, data: &[u8], nt: bool, atomic: bool) {
        self.report.stores += 1;
        if let Some(m) = self.mode().cloned() {
            let end = offset + data.len() as u64;
            let mut reused = Vec::new();
            for (&line, st) in self.lines.range(offset / 64..end.div_ceil(64)) {
                if let Some(f) = st.owner {
                    if let Some(at) = st.awaiting_fence.or(st.unflushed) {
                        if st.call != self.call && m.extends != Some(f) && !m.commits_file(f) {
                            reused.push((line, f, at));
                        }
                    }
                }
            }
            for (line, f, at) in reused {
                self.violation(
                    "epoch-line-reused",
                    ev,
                    line * 64,
                    format!(
                        "a line that {} stored to at event {at} and never fenced is stored to by another operation (its page freed and reused before a fence)",
                        owner_name(f)
                    ),
                );
            }
        }
        // A page that starts with a log page magic written by this store
        // becomes a log page (its own next pointer is part of the
        // initialization and not yet a commit word).
        let end = offset + data.len() as u64;
        let mut init_pages = Vec::new();
        let mut p = offset.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        while p + 64 <= end {
            let i = (p - offset) as usize;
            if u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes")) == LOG_PAGE_MAGIC {
                init_pages.push(p / PAGE_SIZE);
            }
            p += PAGE_SIZE;
        }
        let guarded_init: Vec<u64> = init_pages.iter().copied().filter(|pg| !self.log_pages.contains(pg)).collect();
        for pg in &guarded_init {
            // Count the guard when the next pointer actually changes.
            let w = pg * PAGE_SIZE + LOG_NEXT_OFFSET;
            if self.img[w as usize..w as usize + 8] != data[(w - offset) as usize..(w - offset) as usize + 8] {
                *self.report.guarded.entry("log-page-init").or_insert(0) += 1;
            }
        }
        self.check_commit_words(ev, offset, data, atomic);
        for pg in init_pages {
            self.log_pages.insert(pg);
            self.init_pages.insert(pg);
        }
        let it = self.layout.inode_table_start.offset().0;
        if offset < it + self.layout.inode_table_pages * PAGE_SIZE && end > it {
            self.slots_changed = true;
        }
        self.img[offset as usize..end as usize].copy_from_slice(data);
        let mut line = offset / 64;
        while line * 64 < end {
            let st = self.lines.entry(line).or_default();
            st.call = self.call;
            if nt {
                st.awaiting_fence.get_or_insert(ev);
            } else {
                if st.awaiting_fence.is_some() && st.unflushed.is_none() {
                    st.redirtied.get_or_insert(ev);
                }
                st.unflushed.get_or_insert(ev);
            }
            line += 1;
        }
    }

    fn flush(&mut self, ev: usize, offset: u64, len: u64) {
        self.report.flushes += 1;
        if len == 0 {
            return;
        }
        let first = offset / 64;
        let last = (offset + len - 1) / 64;
        let mut any = false;
        for (_, st) in self.lines.range_mut(first..=last) {
            if st.unflushed.take().is_some() {
                any = true;
                st.awaiting_fence = Some(ev);
                st.redirtied = None;
            }
        }
        if !any {
            self.report.redundant_flushes += 1;
        }
    }

    fn fence(&mut self) {
        self.report.fences += 1;
        if self.slots_changed {
            self.slots_changed = false;
            self.log_pages = live_log_pages(&self.img, self.layout);
            self.log_pages.extend(self.init_pages.iter().copied());
        }
        let mut found = Vec::new();
        for (&line, st) in self.lines.iter_mut() {
            if let Some(ev) = st.redirtied.take() {
                found.push((line, ev));
            }
            st.awaiting_fence = None;
        }
        self.lines.retain(|_, st| st.unflushed.is_some());
        for (line, ev) in found {
            self.violation(
                "dirty-again-at-fence",
                ev,
                line * 64,
                "stored to after its flush and not flushed again before the fence".into(),
            );
        }
    }

    fn end_of_call(&mut self) {
        if let Some(m) = self.mode().cloned() {
            return self.end_of_call_modes(&m);
        }
        let lines = std::mem::take(&mut self.lines);
        for (line, st) in lines {
            if let Some(ev) = st.unflushed {
                self.violation(
                    "store-never-flushed",
                    ev,
                    line * 64,
                    "a store to this line is not flushed when the operation returns".into(),
                );
            }
            if let Some(ev) = st.awaiting_fence {
                self.violation(
                    "flush-never-fenced",
                    ev,
                    line * 64,
                    "a flush (or non-temporal store) of this line has no fence before the operation returns".into(),
                );
            }
        }
    }
}

impl Checker<'_> {
    /// The end of a call under the fsync-atomic rules (module comment).
    fn end_of_call_modes(&mut self, m: &CallMode) {
        let lines = std::mem::take(&mut self.lines);
        for (line, mut st) in lines {
            let touched = st.call == self.call;
            let owner = if touched { m.extends } else { st.owner };
            let carry = match owner {
                // This call's own stores to a file whose epoch it extends.
                Some(_) if touched => true,
                // An earlier epoch's stores: due when the call commits it.
                Some(f) => !m.commits_file(f),
                None => false,
            };
            if carry {
                st.owner = owner;
                self.lines.insert(line, st);
                continue;
            }
            let at_commit = match owner {
                Some(f) if !touched => {
                    format!(" (a store of {}, at its commit point)", owner_name(f))
                }
                _ => String::new(),
            };
            if let Some(ev) = st.unflushed {
                self.violation(
                    "store-never-flushed",
                    ev,
                    line * 64,
                    format!("a store to this line is not flushed when the operation returns{at_commit}"),
                );
            }
            if let Some(ev) = st.awaiting_fence {
                self.violation(
                    "flush-never-fenced",
                    ev,
                    line * 64,
                    format!(
                        "a flush (or non-temporal store) of this line has no fence before the operation returns{at_commit}"
                    ),
                );
            }
        }
    }
}

/// Check every call of a recorded workload. `base` is the pool image when
/// recording started.
pub fn check(base: &[u8], events: &[Event], layout: &Layout) -> Report {
    check_inner(base, events, layout, None)
}

/// `check` under the fsync-atomic rules (module comment): `modes` says what
/// each call does to the pending epochs (the oracle's classification).
pub fn check_modes(base: &[u8], events: &[Event], layout: &Layout, modes: &[CallMode]) -> Report {
    check_inner(base, events, layout, Some(modes))
}

fn check_inner(base: &[u8], events: &[Event], layout: &Layout, modes: Option<&[CallMode]>) -> Report {
    let mut c = Checker {
        layout,
        img: base.to_vec(),
        lines: BTreeMap::new(),
        log_pages: BTreeSet::new(),
        init_pages: BTreeSet::new(),
        slots_changed: false,
        call: 0,
        report: Report::default(),
        modes,
    };
    for (i, ev) in events.iter().enumerate() {
        match ev {
            Event::Mark { label } => {
                let call = (*label / 2) as usize;
                if *label == begin_mark(call) {
                    c.call = call;
                    if modes.is_none() {
                        c.lines.clear();
                    }
                    c.log_pages = live_log_pages(&c.img, layout);
                    c.init_pages.clear();
                    c.slots_changed = false;
                } else if *label == end_mark(call) {
                    c.end_of_call();
                }
            }
            Event::Store { offset, data } => c.store(i, *offset, data, false, false),
            Event::NtStore { offset, data } => c.store(i, *offset, data, true, false),
            Event::Commit { offset, value } => c.store(i, *offset, &value.to_le_bytes(), false, true),
            Event::NtCommit { offset, value } => c.store(i, *offset, &value.to_le_bytes(), true, true),
            Event::Flush { offset, len } => c.flush(i, *offset, *len),
            Event::Fence => c.fence(),
        }
    }
    c.report
}
