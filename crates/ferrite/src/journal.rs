//! Lightweight journaling for operations that change several inodes
//! (NOVA section 3): an undo log of 8-byte words, one journal page per lane.
//!
//! A transaction changes only 8-byte words: log tails of the inodes whose
//! logs received entries, inode state words (allocate or free a slot), and
//! log heads (a compacted log replaces head and tail together).
//! Its protocol, three fences in all:
//! 1. the new log entries are already written (streaming stores, or cached
//!    stores and flushes; `InodeData::stage`);
//!    write the journal records (offset, old value) and header with its
//!    CRC, fence — the transaction is now open;
//! 2. store every new value, fence — the change is complete;
//! 3. zero the header line (active word and CRC word), fence — the
//!    transaction is closed. `run_to_close` leaves this fence to its
//!    caller, which brings DRAM forward first (the close's write-back
//!    overlaps that work) and must fence before releasing anything.
//!
//! Every store of the three rounds is a streaming store (whole lines for
//! the journal page, one 8-byte store per new value), which needs no flush:
//! the lines a transaction writes were written back by the last one that
//! wrote them, and on the machines measured a cached store to such a line
//! first reads it back from memory for ownership, a round trip that the
//! line's write-back, and so the fence, then waited behind.
//!
//! Recovery rolls back every open transaction whose CRC checks by storing
//! the old values. A header whose CRC does not check was never fenced, so no
//! word it covers was changed (step 2 only starts after step 1's fence).

use crate::format::{self, corrupt, Corrupt, JournalRecord, JournalState, PoolOffset, PAGE_SIZE};
use crate::media::Media;
use parking_lot::Mutex;

pub struct Journals {
    lanes: Vec<crate::alloc::Padded<Mutex<u64>>>,
}

/// The words one transaction sets: (offset, new value). Inline up to the
/// four words of a rename: no allocation per namespace operation.
#[derive(Default)]
pub struct Transaction {
    pub words: smallvec::SmallVec<[(PoolOffset, u64); 4]>,
    /// Old values the caller read from media itself (`set_with_old`), so
    /// the transaction need not read them again.
    olds_read: smallvec::SmallVec<[(PoolOffset, u64); 1]>,
}

impl Transaction {
    pub fn set(&mut self, offset: PoolOffset, value: u64) {
        assert!(offset.0.is_multiple_of(8), "journaled word at {offset} is not aligned");
        assert!(!self.words.iter().any(|w| w.0 == offset), "word journaled twice");
        self.words.push((offset, value));
    }

    /// A transaction setting `words`, which the caller has already merged
    /// so that no offset appears twice (a buffered batch: the last value
    /// of each word wins). The check that no word is journaled twice stays
    /// on, as one sort of the offsets: `set`'s scan per word made a batch
    /// of 250 words cost about 31,000 comparisons, with the merge map's
    /// rehashing about 30 % of the persister thread's CPU in
    /// `sustained-dirops` (docs/BENCHMARKS.md, "Probes on the Zen 3 host").
    pub fn from_distinct(words: Vec<(PoolOffset, u64)>) -> Transaction {
        let mut offsets: smallvec::SmallVec<[u64; 8]> = words.iter().map(|w| w.0 .0).collect();
        offsets.sort_unstable();
        assert!(offsets.iter().all(|o| o.is_multiple_of(8)), "a journaled word is not aligned");
        assert!(offsets.windows(2).all(|pair| pair[0] != pair[1]), "word journaled twice");
        Transaction { words: smallvec::SmallVec::from_vec(words), olds_read: smallvec::SmallVec::new() }
    }

    /// `set`, with the word's value on media, which the caller read while
    /// holding what keeps anyone else from changing it (a new inode's
    /// state word, read before its slot's other words were written and
    /// flushed). The record's old value is then not read back from a line
    /// that the flush has just evicted, a wait for memory on the commit
    /// path (BENCHMARKS.md, "The journal's old values").
    pub fn set_with_old(&mut self, offset: PoolOffset, value: u64, old: u64) {
        self.set(offset, value);
        self.olds_read.push((offset, old));
    }

    /// The value on media of word `offset` before this transaction.
    fn old_value(&self, media: &Media, offset: PoolOffset) -> u64 {
        match self.olds_read.iter().find(|w| w.0 == offset) {
            Some(&(_, old)) => old,
            None => media.read_u64(offset),
        }
    }
}

impl Journals {
    pub fn new(lanes: usize) -> Journals {
        Journals { lanes: (0..lanes).map(|_| crate::alloc::Padded(Mutex::new(1))).collect() }
    }

    /// Start the sequence numbers of this mount's transactions past every
    /// earlier mount's: `mount_count` (from the superblock this mount has
    /// just made durable, bumped at every mount) in the upper 24 of the
    /// header's 48 sequence bits. A transaction's records stay in the page
    /// after its close (and pools closed by earlier builds kept the CRC
    /// too, clearing only the active word); were the next mount to reuse
    /// that sequence number and record count, a crash
    /// that tore the new header store after its first word (the active
    /// word, identical to the old one) would leave the old CRC matching the
    /// old records, and recovery would roll back stale values (found by the
    /// crash harness: `cc1:0xc0ffee:empty:s3.create+remount+link:e44:T:42:p1:n`).
    pub fn start_mount(&self, mount_count: u64) {
        for lane in &self.lanes {
            *lane.lock() = (mount_count & 0xFF_FFFF) << 24;
        }
    }

    /// Run a transaction atomically and durably.
    pub fn run(&self, media: &Media, tx: &Transaction) {
        self.run_to_close(media, tx).fence(media);
    }

    /// Run a transaction up to its close's flush: the last fence is the
    /// caller's, through `CloseFence::fence`, once it has done the DRAM
    /// work that needs no lock in between. That work then overlaps the
    /// close's write-back, which the fence would otherwise wait for with
    /// nothing to do. The lane stays locked until the fence, so no other
    /// transaction can write this lane's page before the close is durable.
    pub fn run_to_close<'a>(&'a self, media: &Media, tx: &Transaction) -> CloseFence<'a> {
        self.run_in_lane(self.lane(), media, tx)
    }

    /// This thread's lane, locked. A caller about to stage entries takes it
    /// first: taking a lock is a locked instruction, which on these
    /// machines waits for every flush in flight as a fence does, so taken
    /// after the staging's flushes it would pay their write-back once and
    /// the transaction's first fence again.
    pub fn lane(&self) -> Lane<'_> {
        let lane = crate::alloc::thread_lane(self.lanes.len());
        Lane { lane, seq: self.lanes[lane].lock() }
    }

    /// `run_to_close` in a lane the caller has locked.
    pub fn run_in_lane<'a>(&'a self, lane: Lane<'a>, media: &Media, tx: &Transaction) -> CloseFence<'a> {
        assert!(!tx.words.is_empty() && tx.words.len() <= format::JOURNAL_RECORDS_MAX);
        let Lane { lane, mut seq } = lane;
        *seq += 1;
        let page = media.layout.journal_page(lane as u32).offset();
        let records: smallvec::SmallVec<[JournalRecord; 4]> =
            tx.words.iter().map(|&(offset, _)| JournalRecord { offset, old: tx.old_value(media, offset) }).collect();
        let mut bytes = format::journal_encode(*seq & ((1 << 48) - 1), &records);
        // Whole lines, streamed: the rest of the last record's line is zero.
        bytes.resize(bytes.len().next_multiple_of(ferrite_pmem::CACHE_LINE as usize), 0);
        media.write_lines(page, &bytes);
        media.fence();
        for &(offset, value) in &tx.words {
            media.store_commit_word(offset, value);
        }
        media.fence();
        close_unfenced(media, page);
        CloseFence { _lane: seq, fenced: false }
    }
}

/// A journal lane, locked: its sequence number and its page are this
/// holder's until the transaction run in it is fenced.
pub struct Lane<'a> {
    lane: usize,
    seq: parking_lot::MutexGuard<'a, u64>,
}

/// A transaction whose close is flushed but not fenced: it is durable,
/// and the operation may return, only after `fence`. Dropping it unfenced
/// is a bug, caught by an assertion that stays on.
#[must_use = "a journal transaction is durable only after CloseFence::fence"]
pub struct CloseFence<'a> {
    _lane: parking_lot::MutexGuard<'a, u64>,
    fenced: bool,
}

impl CloseFence<'_> {
    pub fn fence(mut self, media: &Media) {
        media.fence();
        self.fenced = true;
    }
}

impl Drop for CloseFence<'_> {
    fn drop(&mut self) {
        assert!(self.fenced || std::thread::panicking(), "a journal transaction's close was never fenced");
    }
}

/// Close a lane's transaction: zero the header line (the active word, the
/// CRC word and the reserved bytes) with one streaming store, fence. The
/// CRC goes too, so that a later transaction whose header store is torn
/// after its active word never meets a CRC that still matches the old
/// records, whatever its sequence number (`start_mount` keeps those apart
/// as well). The two words may persist in either order: with the active
/// word zero the page is idle, and with only the CRC zero the header fails
/// its check and recovery takes the transaction as never opened, which is
/// right for one whose new values are all durable.
fn close(media: &Media, page: PoolOffset) {
    close_unfenced(media, page);
    media.fence();
}

fn close_unfenced(media: &Media, page: PoolOffset) {
    media.write_lines(page, &[0u8; format::JOURNAL_HEADER_SIZE as usize]);
}

/// A journal record may only name a word the engine journals: an inode
/// state word, log head or log tail inside the inode table.
fn check_record(media: &Media, r: &JournalRecord) -> Result<(), Corrupt> {
    let l = &media.layout;
    let start = l.inode_table_start.offset().0;
    let end = start + l.inode_table_pages * PAGE_SIZE;
    let within = r.offset.0.wrapping_sub(start) % format::INODE_SLOT_SIZE;
    if r.offset.0 < start + format::INODE_SLOT_SIZE
        || r.offset.0 >= end
        || !(within == format::INODE_STATE_OFFSET
            || within == format::INODE_HEAD_OFFSET
            || within == format::INODE_TAIL_OFFSET)
    {
        return Err(corrupt!("journal record names offset {:#x}, not an inode word", r.offset.0));
    }
    Ok(())
}

/// Roll back every open transaction. Idempotent: a crash during recovery
/// leaves the journal open, and the next recovery rolls it back again.
/// Returns how many transactions were rolled back.
pub fn recover(media: &Media) -> Result<usize, Corrupt> {
    let mut rolled = 0;
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for lane in 0..media.layout.lane_count {
        let off = media.layout.journal_page(lane).offset();
        media.read(off, &mut page);
        match format::journal_decode(&page) {
            JournalState::Idle => {}
            JournalState::Torn => close(media, off),
            JournalState::Open(records) => {
                for r in &records {
                    check_record(media, r)?;
                }
                // Undo in reverse order, though no word appears twice.
                for r in records.iter().rev() {
                    media.store_u64(r.offset, r.old);
                    media.flush(r.offset, 8);
                }
                media.fence();
                close(media, off);
                rolled += 1;
            }
        }
    }
    Ok(rolled)
}

/// Journal states for fsck and dump, without changing anything.
pub fn inspect(media: &Media) -> Vec<(u32, JournalState)> {
    let mut page = vec![0u8; PAGE_SIZE as usize];
    (0..media.layout.lane_count)
        .map(|lane| {
            media.read(media.layout.journal_page(lane).offset(), &mut page);
            (lane, format::journal_decode(&page))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! A transaction built from merged words keeps `set`'s rule that no
    //! word is journaled twice (a merged batch holds each word once, so a
    //! repeat means the merge went wrong), and keeps the words' order.
    use super::Transaction;
    use ferrite_pmem::PoolOffset;

    #[test]
    fn distinct_words_keep_their_order() {
        let words = [(PoolOffset(4096), 1), (PoolOffset(64), 2), (PoolOffset(8192), 3)];
        assert_eq!(&Transaction::from_distinct(words.to_vec()).words[..], &words[..]);
    }

    #[test]
    #[should_panic(expected = "word journaled twice")]
    fn a_word_given_twice_is_refused() {
        let _ = Transaction::from_distinct(vec![(PoolOffset(4096), 1), (PoolOffset(64), 2), (PoolOffset(4096), 3)]);
    }

    #[test]
    #[should_panic(expected = "word journaled twice")]
    fn a_word_given_twice_among_many_is_refused() {
        let mut words: Vec<(PoolOffset, u64)> = (0..250u64).map(|i| (PoolOffset(8 * (1000 - i)), i)).collect();
        words[200].0 = words[17].0;
        let _ = Transaction::from_distinct(words);
    }

    #[test]
    #[should_panic(expected = "not aligned")]
    fn an_unaligned_word_is_refused() {
        let _ = Transaction::from_distinct(vec![(PoolOffset(4100), 1), (PoolOffset(64), 2)]);
    }
}
