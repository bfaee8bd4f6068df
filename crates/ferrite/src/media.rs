//! The engine's view of the pool: the persistence layer plus the layout,
//! with the few composite accesses every module needs. All stores still go
//! through `ferrite_pmem::Pmem`; this module only names offsets.

use crate::format::{self, corrupt, Corrupt, InodeSlot, Layout, PageNo, PoolOffset, INODE_SLOT_SIZE, PAGE_SIZE};
use crate::types::InodeNo;
use ferrite_pmem::Pmem;
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Ranges (offset, bytes) a buffered operation stored to without flushing
/// them: its persister flushes them before the batch's first fence
/// (docs/DESIGN.md, "Buffered mode", "Flushes left to the persister").
pub type FlushRanges = SmallVec<[(PoolOffset, u32); 4]>;

/// A streaming store this short, inside a deferral, is made a cached store
/// whose flush is deferred like the others (a new log page's header): the
/// thread then has nothing in flight to fence. Longer ones (file data)
/// stay streaming, and the operation fences them itself.
const DEFERRED_NT_BYTES_MAX: usize = 512;

thread_local! {
    /// The flushes this thread has deferred (`Media::defer_flushes`), while
    /// a deferral is open.
    static DEFERRED: RefCell<Option<FlushRanges>> = const { RefCell::new(None) };
    /// This thread has issued a flush or a streaming store that no fence of
    /// its own has ordered yet (fences order only their own thread's).
    static UNFENCED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` on this thread's deferral state. `None` once the thread's
/// locals are destroyed: the preload library unmounts at process exit,
/// from a destructor that may run after them; no deferral is open then.
fn with_deferred<R>(f: impl FnOnce(&mut Option<FlushRanges>) -> R) -> Option<R> {
    DEFERRED.try_with(|d| f(&mut d.borrow_mut())).ok()
}

fn no_deferral_open() -> bool {
    with_deferred(|d| d.is_none()).unwrap_or(true)
}

fn set_unfenced(unfenced: bool) {
    let _ = UNFENCED.try_with(|u| u.set(unfenced));
}

/// Whether this thread may have a flush or streaming store in flight
/// (unknown, so yes, once its locals are destroyed).
fn unfenced() -> bool {
    UNFENCED.try_with(|u| u.get()).unwrap_or(true)
}

/// An open deferral of this thread's flushes (`Media::defer_flushes`).
/// `finish` hands the ranges over; dropped unfinished (an error or a
/// panic on the way), it flushes them itself, so nothing is left unflushed.
#[must_use = "the deferred flushes must go to the persister (finish) or be flushed"]
pub struct DeferredFlushes<'a> {
    media: &'a Media,
    open: bool,
}

impl DeferredFlushes<'_> {
    /// Close the deferral: the ranges stored to and not flushed since it
    /// opened, for the persister to flush.
    pub fn finish(mut self) -> FlushRanges {
        if !self.open {
            // Never opened (this thread's locals were gone): every flush
            // was real.
            return FlushRanges::new();
        }
        self.open = false;
        with_deferred(|d| d.take()).flatten().expect("a deferral is open")
    }
}

impl Drop for DeferredFlushes<'_> {
    fn drop(&mut self) {
        if self.open {
            self.media.flush_deferred_now();
        }
    }
}

pub struct Media {
    pub pmem: Arc<Pmem>,
    pub layout: Layout,
}

impl Media {
    pub fn read(&self, offset: PoolOffset, buf: &mut [u8]) {
        self.pmem.read(offset, buf)
    }

    /// Read bytes whose offset came from media: out of range is corruption.
    pub fn read_checked(&self, offset: PoolOffset, buf: &mut [u8]) -> Result<(), Corrupt> {
        self.pmem
            .read_checked(offset, buf)
            .ok_or_else(|| corrupt!("read of {} bytes at {offset} outside the pool", buf.len()))
    }

    pub fn prefetch(&self, offset: PoolOffset) {
        self.pmem.prefetch(offset)
    }

    pub fn read_u64(&self, offset: PoolOffset) -> u64 {
        self.pmem.read_u64(offset)
    }

    pub fn write(&self, offset: PoolOffset, data: &[u8]) {
        self.pmem.write(offset, data)
    }

    pub fn write_nt(&self, offset: PoolOffset, data: &[u8]) {
        if data.len() <= DEFERRED_NT_BYTES_MAX && self.defer(offset, data.len() as u64) {
            self.pmem.write(offset, data);
            return;
        }
        self.pmem.write_nt(offset, data);
        set_unfenced(true);
    }

    /// Write whole 64-byte lines that nothing reads before the commit:
    /// log entries, and a journal's header and records and its close.
    /// Outside a deferral they are streaming stores: a cached store to such
    /// a line (cold: the log's tail moves on through the page, and a
    /// journal's lines were written back by its last transaction) first
    /// reads the line from memory for ownership, and its flush's write-back
    /// then waits behind that read; a streaming store writes the whole line
    /// without reading it, and the next fence covers it like a flush.
    /// Inside a deferral (buffered mode's staging) they are cached stores
    /// whose flush is deferred, as before.
    pub fn write_lines(&self, offset: PoolOffset, data: &[u8]) {
        assert!(
            offset.0.is_multiple_of(ferrite_pmem::CACHE_LINE)
                && (data.len() as u64).is_multiple_of(ferrite_pmem::CACHE_LINE),
            "streamed lines at {offset} ({} bytes) are not whole lines",
            data.len()
        );
        if self.defer(offset, data.len() as u64) {
            self.pmem.write(offset, data);
            return;
        }
        self.pmem.write_nt(offset, data);
        set_unfenced(true);
    }

    pub fn fill_nt(&self, offset: PoolOffset, len: u64, byte: u8) {
        self.pmem.fill_nt(offset, len, byte);
        set_unfenced(true);
    }

    /// Write back the lines of a range; inside a deferral, only note it.
    pub fn flush(&self, offset: PoolOffset, len: u64) {
        if self.defer(offset, len) {
            return;
        }
        self.pmem.flush(offset, len);
        set_unfenced(true);
    }

    /// Order this thread's flushes and streaming stores before what
    /// follows. Never inside a deferral: a fence there would be taken to
    /// make durable what the deferral only noted.
    pub fn fence(&self) {
        assert!(no_deferral_open(), "a fence inside a deferral of flushes");
        self.pmem.fence();
        set_unfenced(false);
    }

    /// Fence only if this thread has a flush or streaming store in flight.
    pub fn fence_if_unfenced(&self) {
        if unfenced() {
            self.fence();
        }
    }

    /// Open a deferral of this thread's flushes: until it is finished,
    /// `flush` (and a short `write_nt`, made a cached store) only notes the
    /// range. For a buffered operation's staging, whose lines the
    /// persister flushes before the fence that precedes its commit words:
    /// the calling thread then has no write-back in flight, so neither its
    /// own fence nor the locked instructions after it (which wait for
    /// write-backs as a fence does) stall. Nothing inside may need a store
    /// durable before the deferral ends (`commit_u64` never defers).
    pub fn defer_flushes(&self) -> DeferredFlushes<'_> {
        let opened = with_deferred(|d| {
            assert!(d.is_none(), "flushes deferred twice on one thread");
            *d = Some(FlushRanges::new());
        });
        DeferredFlushes { media: self, open: opened.is_some() }
    }

    /// Note a range in the open deferral, if there is one.
    fn defer(&self, offset: PoolOffset, len: u64) -> bool {
        with_deferred(|d| match d {
            None => false,
            Some(ranges) => {
                let len = u32::try_from(len).expect("a deferred flush under 4 GiB");
                match ranges.last_mut() {
                    Some(last) if last.0 .0 + last.1 as u64 == offset.0 => last.1 += len,
                    _ => ranges.push((offset, len)),
                }
                true
            }
        })
        .unwrap_or(false)
    }

    /// Close this thread's deferral, if one is open, by flushing what it
    /// noted (an operation that gives up: its stores must not stay
    /// unflushed for the next sync point to find).
    pub fn flush_deferred_now(&self) {
        if let Some(ranges) = with_deferred(|d| d.take()).flatten() {
            self.flush_ranges(&ranges);
        }
    }

    /// Set this thread's open deferral aside (a batch persisted inline by
    /// an operation that is staging: its allocation found no free page),
    /// so that the batch's flushes and fences are real; `resume_deferral`
    /// puts it back.
    pub fn suspend_deferral(&self) -> Option<FlushRanges> {
        with_deferred(|d| d.take()).flatten()
    }

    pub fn resume_deferral(&self, suspended: Option<FlushRanges>) {
        if suspended.is_none() {
            return;
        }
        with_deferred(|d| {
            assert!(d.is_none(), "a deferral opened while another was set aside");
            *d = suspended;
        })
        .expect("this thread's deferral state outlives its deferral");
    }

    /// Flush ranges a buffered operation deferred (the persister).
    pub fn flush_ranges(&self, ranges: &FlushRanges) {
        assert!(no_deferral_open(), "a persister flushing inside a deferral");
        for &(off, len) in ranges {
            self.flush(off, len as u64);
        }
    }

    pub fn store_u64(&self, offset: PoolOffset, value: u64) {
        self.pmem.store_u64(offset, value)
    }

    /// Store a commit word (an inode's state, log head or log tail, a log
    /// page's next pointer) for this thread's next fence: one aligned
    /// 8-byte streaming store, atomic like a cached one and durable at the
    /// fence with no flush. A cached store would first read the word's line
    /// for ownership, and that line was written back by the last commit
    /// that changed it (clwb evicts it on the AMD machines measured), so
    /// every commit paid a memory round trip before its write-back could
    /// start (docs/DESIGN.md, "Logs and the commit protocol"). Inside a
    /// deferral (a buffered operation's staging links its new log pages)
    /// it is a cached store whose flush is deferred, as `write_lines`'s.
    pub fn store_commit_word(&self, offset: PoolOffset, value: u64) {
        if self.defer(offset, 8) {
            self.pmem.store_u64(offset, value);
            return;
        }
        self.pmem.store_u64_nt(offset, value);
        set_unfenced(true);
    }

    /// The commit primitive: one atomic 8-byte store, made durable.
    pub fn commit_u64(&self, offset: PoolOffset, value: u64) {
        self.store_commit_word(offset, value);
        self.fence();
    }

    pub fn slot_offset(&self, ino: InodeNo) -> PoolOffset {
        self.layout.inode_slot(ino)
    }

    pub fn read_slot(&self, ino: InodeNo) -> Result<InodeSlot, Corrupt> {
        if ino.0 == 0 || ino.0 >= self.layout.inode_count {
            return Err(corrupt!("inode number {} out of range", ino.0));
        }
        let mut b = [0u8; INODE_SLOT_SIZE as usize];
        self.read(self.slot_offset(ino), &mut b);
        format::decode_inode_slot(&b, ino)
    }

    /// The generation stored in a slot's header, whatever its state (used
    /// to pick the next generation when a slot is reused).
    pub fn slot_generation(&self, ino: InodeNo) -> u32 {
        let mut b = [0u8; 4];
        self.read(self.slot_offset(ino) + format::INODE_GENERATION_OFFSET, &mut b);
        u32::from_le_bytes(b)
    }

    /// Write a new inode's slot, all but its state word: its identity and
    /// the head and tail of its staged first log page; then flush. The slot
    /// is not live until a journal transaction sets the state word.
    pub fn write_slot_identity(
        &self,
        ino: InodeNo,
        header: &format::InodeHeader,
        attr: &format::AttrEntry,
        staged: &crate::inode::Staged,
    ) {
        assert_eq!(header.ino, ino, "slot identity of another inode");
        let slot = self.slot_offset(ino);
        // Head, tail, identity and the first Attr entry: bytes 8..128, the
        // whole slot but its state word, in one write. A new inode with no
        // entry beyond its attributes has no log yet (head and tail 0).
        let mut b = [0u8; (format::INODE_SLOT_SIZE - 8) as usize];
        let head = staged.new_pages.first().map_or(format::NO_LOG, |p| p.offset());
        b[..8].copy_from_slice(&head.0.to_le_bytes());
        b[8..16].copy_from_slice(&staged.new_tail.0.to_le_bytes());
        let at = (format::INODE_HEADER_OFFSET - 8) as usize;
        b[at..at + format::InodeHeader::ENCODED_SIZE].copy_from_slice(&header.encode());
        b[(format::INODE_ATTR_OFFSET - 8) as usize..].copy_from_slice(&format::encode_slot_attr(attr));
        self.write(slot + format::INODE_HEAD_OFFSET, &b);
        self.flush(slot, format::INODE_SLOT_SIZE);
    }

    /// A page number read from media must lie in the data region.
    pub fn check_data_page(&self, p: PageNo, what: &str) -> Result<(), Corrupt> {
        if self.layout.is_data_page(p) {
            Ok(())
        } else {
            Err(corrupt!("{what} points at page {} outside the data region", p.0))
        }
    }

    /// A log page pointer read from media must be page-aligned and in the data region.
    pub fn check_log_pointer(&self, off: PoolOffset, what: &str) -> Result<PageNo, Corrupt> {
        let off = off.0;
        if !off.is_multiple_of(PAGE_SIZE) {
            return Err(corrupt!("{what} {off:#x} is not page aligned"));
        }
        let p = PageNo(off / PAGE_SIZE);
        self.check_data_page(p, what)?;
        Ok(p)
    }
}
