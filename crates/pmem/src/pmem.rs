//! [`Pmem`]: the pool handle through which every load and store goes.
//!
//! This module has no `unsafe`: it decides what to store and in which order,
//! checks bounds with messages that name the operation, records events and
//! adds emulated latency; `mapping::Region` does the raw memory work.

use crate::latency::{EmulatedLatency, Latency};
use crate::mapping::{self, Region};
use crate::record::{Event, Recorder};
use crate::{arch, FlushKind, NtKind, PersistenceDomain, PmemError, PoolOffset, CACHE_LINE};
use parking_lot::{Mutex, MutexGuard};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// A persistent-memory pool.
///
/// Every store to the pool goes through this type. It is `Send + Sync` and
/// not `Clone`: share it with `Arc`. It does no locking of pool bytes: two
/// threads storing to the same bytes at once, or loading bytes another
/// thread is storing with a plain (non-atomic) copy, is a race the caller
/// must prevent (the file-system engine does, with its own locks). The
/// 8-byte [`store_u64`](Pmem::store_u64) / [`read_u64`](Pmem::read_u64) pair
/// is atomic and may race freely.
///
/// Zero-length reads, writes and flushes are accepted at any offset up to
/// and including the pool length; they touch nothing and record nothing.
pub struct Pmem {
    pub(crate) region: Region,
    domain: PersistenceDomain,
    pub(crate) map_sync: bool,
    flush_kind: FlushKind,
    nt_kind: NtKind,
    path: Option<PathBuf>,
    /// Fast check for the hot path; the authoritative state is `recorder.on`.
    recording: AtomicBool,
    recorder: Mutex<Recorder>,
    latency: Latency,
    /// The read-only alias of the whole pool (`read_only_alias`), made on
    /// first use; `None` inside when the pool has no file to alias.
    pub(crate) alias: std::sync::OnceLock<Option<crate::mapping::WindowMap>>,
}

/// Compile-time proof of the thread-safety promise above.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pmem>();
};

impl std::fmt::Debug for Pmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmem")
            .field("len", &self.len())
            .field("domain", &self.domain)
            .field("map_sync", &self.map_sync)
            .field("flush_kind", &self.flush_kind)
            .field("nt_kind", &self.nt_kind)
            .field("path", &self.path)
            .field("recording", &self.is_recording())
            .finish_non_exhaustive()
    }
}

/// Where a non-temporal write splits: a partial head line, whole lines
/// streamed, and a partial tail line. All offsets are pool offsets.
struct NtSplit {
    /// `[start, body_start)`: cached stores + flush (may be empty).
    body_start: u64,
    /// `[body_start, body_end)`: streaming stores (whole lines, may be empty).
    body_end: u64,
}

impl NtSplit {
    fn new(start: u64, end: u64) -> NtSplit {
        let up = start.next_multiple_of(CACHE_LINE);
        let down = end - end % CACHE_LINE;
        if up >= down {
            // No whole line inside: the whole range takes the cached path.
            NtSplit { body_start: end, body_end: end }
        } else {
            NtSplit { body_start: up, body_end: down }
        }
    }
}

impl Pmem {
    fn with_region(region: Region, domain: PersistenceDomain, map_sync: bool, path: Option<PathBuf>) -> Pmem {
        Pmem {
            region,
            domain,
            map_sync,
            flush_kind: arch::detected_flush_kind(),
            nt_kind: arch::detected_nt_kind(),
            path,
            recording: AtomicBool::new(false),
            recorder: Mutex::new(Recorder::default()),
            latency: Latency::default(),
            alias: std::sync::OnceLock::new(),
        }
    }

    /// Creates (or truncates) the file at `path` to `len` zero bytes and maps
    /// it. `len` must be a multiple of 4096 and at least `min_len`
    /// (`TooSmall` otherwise, before anything is touched). The exclusive
    /// advisory lock is taken before the file is truncated, so a pool that is
    /// open elsewhere gives `AlreadyOpen` and is left unchanged.
    pub fn create_file(path: &Path, len: u64, min_len: u64) -> Result<Pmem, PmemError> {
        let m = mapping::create_file(path, len, min_len)?;
        Ok(Pmem::with_region(m.region, m.domain, m.map_sync, Some(path.to_path_buf())))
    }

    /// Opens an existing pool file read-write: locks it (`AlreadyOpen` if
    /// another open holds the lock; nothing is changed), checks its length is
    /// at least `min_len` (`TooSmall`) and a multiple of 4096 (`Io` with
    /// `InvalidData`), and maps it.
    pub fn open_file(path: &Path, min_len: u64) -> Result<Pmem, PmemError> {
        let m = mapping::open_file(path, min_len)?;
        Ok(Pmem::with_region(m.region, m.domain, m.map_sync, Some(path.to_path_buf())))
    }

    /// Opens a pool file as a private copy-on-write view: reads see the
    /// file, stores stay private to this `Pmem` and never reach the file
    /// (fsck and dump recover and inspect such a view without changing the
    /// pool). With `shared_lock`, fails with `AlreadyOpen` while another
    /// process has the pool open for writing.
    pub fn open_file_private(path: &Path, min_len: u64, shared_lock: bool) -> Result<Pmem, PmemError> {
        let m = mapping::open_file_private(path, min_len, shared_lock)?;
        Ok(Pmem::with_region(m.region, m.domain, m.map_sync, Some(path.to_path_buf())))
    }

    /// A zeroed heap pool of `len` bytes, 4096-aligned, using the detected
    /// flush and copy instructions so tests run the real code path.
    pub fn heap(len: u64) -> Pmem {
        let len = usize::try_from(len).expect("ferrite-pmem: heap pool length overflows usize");
        Pmem::with_region(Region::heap(len), PersistenceDomain::Heap, false, None)
    }

    /// A heap pool like [`heap`](Pmem::heap) that uses the given instructions
    /// instead of the detected ones, to test or measure each of them in one
    /// process. Panics if this CPU cannot execute `flush` or `nt` (see
    /// [`FlushKind::is_supported`]).
    pub fn heap_with_kinds(len: u64, flush: FlushKind, nt: NtKind) -> Pmem {
        assert!(flush.is_supported(), "ferrite-pmem: this CPU cannot execute {flush:?}");
        assert!(nt.is_supported(), "ferrite-pmem: this CPU cannot run {nt:?}");
        let mut p = Pmem::heap(len);
        p.flush_kind = flush;
        p.nt_kind = nt;
        p
    }

    /// A heap pool holding a copy of `image` (normally a multiple of 4096
    /// bytes long, as every pool image is).
    pub fn from_image(image: &[u8]) -> Pmem {
        let p = Pmem::heap(image.len() as u64);
        p.region.copy_in(0, image);
        p
    }

    /// A pool to change without changing this one (fsck's recovery of a
    /// pool it was lent): a private copy-on-write view of a pool file,
    /// which costs memory only for the pages changed, or else a heap copy
    /// made without an intermediate image. Nobody may change this pool
    /// while the copy is in use (a private view sees such changes).
    pub fn private_copy(&self) -> Pmem {
        match mapping::private_view(&self.region) {
            Some(Ok(region)) => Pmem::with_region(region, PersistenceDomain::Heap, false, self.path.clone()),
            // A heap pool, or /proc not mounted: copy.
            _ => {
                let p = Pmem::heap(self.len());
                let mut chunk = vec![0u8; (1usize << 20).min(self.region.len())];
                let mut at = 0;
                while at < self.region.len() {
                    let n = chunk.len().min(self.region.len() - at);
                    self.region.copy_out(at, &mut chunk[..n]);
                    p.region.copy_in(at, &chunk[..n]);
                    at += n;
                }
                p
            }
        }
    }

    /// A heap pool like [`from_image`](Pmem::from_image) that records every
    /// event from the start.
    pub fn recording_from_image(image: &[u8]) -> Pmem {
        let p = Pmem::from_image(image);
        p.start_recording();
        p
    }

    /// The pool length in bytes.
    #[inline]
    pub fn len(&self) -> u64 {
        self.region.len() as u64
    }

    /// True for a zero-length pool (only a heap pool can be one).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.region.len() == 0
    }

    pub fn domain(&self) -> PersistenceDomain {
        self.domain
    }

    /// Whether the file is mapped with MAP_SYNC (a DAX file system).
    pub fn map_sync(&self) -> bool {
        self.map_sync
    }

    pub fn flush_kind(&self) -> FlushKind {
        self.flush_kind
    }

    pub fn nt_kind(&self) -> NtKind {
        self.nt_kind
    }

    /// Sets the emulated media latency; takes effect for later calls from any
    /// thread. All zero turns it off.
    pub fn set_emulated_latency(&self, lat: EmulatedLatency) {
        self.latency.set(lat);
    }

    pub fn emulated_latency(&self) -> EmulatedLatency {
        self.latency.get()
    }

    /// The pool file, for a file pool.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    // ---- bounds ----

    /// `[offset, offset + len)` as a `usize` offset, if it is inside the pool.
    /// Never overflows.
    #[inline]
    fn range(&self, offset: PoolOffset, len: u64) -> Option<usize> {
        let end = offset.0.checked_add(len)?;
        if end <= self.len() {
            // In bounds, so it fits in usize (the pool is in memory).
            Some(offset.0 as usize)
        } else {
            None
        }
    }

    /// Like `range`, but a range outside the pool is a bug of the caller:
    /// panic, naming the operation.
    #[inline]
    #[track_caller]
    pub(crate) fn range_or_panic(&self, op: &str, offset: PoolOffset, len: u64) -> usize {
        match self.range(offset, len) {
            Some(off) => off,
            None => out_of_bounds(op, offset, len, self.len()),
        }
    }

    // ---- reads ----

    /// Copies `buf.len()` bytes at `offset` out of the pool. Panics if the
    /// range is not inside the pool (a bug in the caller); use
    /// [`read_checked`](Pmem::read_checked) for offsets read from media.
    #[inline]
    #[track_caller]
    pub fn read(&self, offset: PoolOffset, buf: &mut [u8]) {
        let off = self.range_or_panic("read", offset, buf.len() as u64);
        self.region.copy_out(off, buf);
    }

    /// Like [`read`](Pmem::read), but returns `None` instead of panicking
    /// when `[offset, offset + buf.len())` is not inside the pool.
    #[inline]
    pub fn read_checked(&self, offset: PoolOffset, buf: &mut [u8]) -> Option<()> {
        let off = self.range(offset, buf.len() as u64)?;
        self.region.copy_out(off, buf);
        Some(())
    }

    /// Starts bringing the line holding `offset` into the cache, so that a
    /// read of it a little later does not wait for memory. Panics if
    /// `offset` is outside the pool.
    #[inline]
    pub fn prefetch(&self, offset: PoolOffset) {
        let off = self.range_or_panic("prefetch", offset, 1);
        self.region.prefetch(off);
    }

    /// Atomic 8-byte load (Acquire). Panics if `offset` is not 8-aligned or
    /// out of bounds.
    #[inline]
    #[track_caller]
    pub fn read_u64(&self, offset: PoolOffset) -> u64 {
        let off = self.range_or_panic("read_u64", offset, 8);
        check_aligned("read_u64", offset);
        self.region.load_u64(off)
    }

    /// Like [`read_u64`](Pmem::read_u64), but `None` if out of bounds or
    /// misaligned.
    #[inline]
    pub fn read_u64_checked(&self, offset: PoolOffset) -> Option<u64> {
        if !offset.0.is_multiple_of(8) {
            return None;
        }
        let off = self.range(offset, 8)?;
        Some(self.region.load_u64(off))
    }

    // ---- writes ----

    /// The recorder, locked, if recording is on. When it is off this costs
    /// one relaxed load. Callers hold the guard across the store and the
    /// push, so the trace order is the store order.
    #[inline]
    pub(crate) fn recorder(&self) -> Option<MutexGuard<'_, Recorder>> {
        if self.recording.load(Ordering::Relaxed) {
            Some(self.recorder.lock())
        } else {
            None
        }
    }

    /// Cached stores (a plain copy). Not durable until flushed and fenced.
    #[inline]
    #[track_caller]
    pub fn write(&self, offset: PoolOffset, data: &[u8]) {
        let off = self.range_or_panic("write", offset, data.len() as u64);
        if data.is_empty() {
            return;
        }
        let mut rec = self.recorder();
        self.region.copy_in(off, data);
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Store { offset: offset.0, data: data.to_vec() });
        }
    }

    /// Non-temporal copy for data. Whole aligned cache lines are written with
    /// streaming stores; a partial head or tail line is written with cached
    /// stores and then flushed, so after the next [`fence`](Pmem::fence) all
    /// of `[offset, offset + data.len())` is durable. No fence inside.
    ///
    /// Recorded as: `Store` + `Flush` for the head (if any), `NtStore` for the
    /// streamed lines (if any), `Store` + `Flush` for the tail (if any). A
    /// range holding no whole line is one `Store` + `Flush`.
    #[track_caller]
    pub fn write_nt(&self, offset: PoolOffset, data: &[u8]) {
        let off = self.range_or_panic("write_nt", offset, data.len() as u64);
        if data.is_empty() {
            return;
        }
        let start = offset.0;
        let end = start + data.len() as u64;
        let split = NtSplit::new(start, end);
        // Index into `data` of a pool offset inside [start, end).
        let ix = |pool_off: u64| (pool_off - start) as usize;
        let mut rec = self.recorder();
        let mut lines = 0;

        if split.body_start > start {
            let head = &data[..ix(split.body_start)];
            lines += self.cached_and_flush(&mut rec, off, head);
        }
        if split.body_end > split.body_start {
            let body = &data[ix(split.body_start)..ix(split.body_end)];
            self.region.nt_copy(self.nt_kind, split.body_start as usize, body);
            lines += body.len() as u64 / CACHE_LINE;
            if let Some(r) = rec.as_mut() {
                r.push(|| Event::NtStore { offset: split.body_start, data: body.to_vec() });
            }
        }
        if split.body_end < end && split.body_end > split.body_start {
            let tail = &data[ix(split.body_end)..];
            lines += self.cached_and_flush(&mut rec, split.body_end as usize, tail);
        }
        drop(rec);
        self.latency.after_lines(lines);
    }

    /// Fills `[offset, offset + len)` with `byte` through the same
    /// non-temporal path and with the same recording as
    /// [`write_nt`](Pmem::write_nt) (used to zero pages).
    #[track_caller]
    pub fn fill_nt(&self, offset: PoolOffset, len: u64, byte: u8) {
        let off = self.range_or_panic("fill_nt", offset, len);
        if len == 0 {
            return;
        }
        let start = offset.0;
        let end = start + len;
        let split = NtSplit::new(start, end);
        let mut rec = self.recorder();
        let mut lines = 0;

        if split.body_start > start {
            let n = (split.body_start - start) as usize;
            lines += self.cached_fill_and_flush(&mut rec, off, n, byte);
        }
        if split.body_end > split.body_start {
            let n = (split.body_end - split.body_start) as usize;
            self.region.nt_fill(self.nt_kind, split.body_start as usize, n, byte);
            lines += n as u64 / CACHE_LINE;
            if let Some(r) = rec.as_mut() {
                r.push(|| Event::NtStore { offset: split.body_start, data: vec![byte; n] });
            }
        }
        if split.body_end < end && split.body_end > split.body_start {
            let n = (end - split.body_end) as usize;
            lines += self.cached_fill_and_flush(&mut rec, split.body_end as usize, n, byte);
        }
        drop(rec);
        self.latency.after_lines(lines);
    }

    /// The cached half of the nt path: store `data` at `off`, flush its
    /// lines, record both. Returns the lines flushed.
    fn cached_and_flush(&self, rec: &mut Option<MutexGuard<'_, Recorder>>, off: usize, data: &[u8]) -> u64 {
        self.region.copy_in(off, data);
        let lines = self.region.flush(self.flush_kind, off, data.len());
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Store { offset: off as u64, data: data.to_vec() });
            r.push(|| Event::Flush { offset: off as u64, len: data.len() as u64 });
        }
        lines
    }

    fn cached_fill_and_flush(
        &self,
        rec: &mut Option<MutexGuard<'_, Recorder>>,
        off: usize,
        len: usize,
        byte: u8,
    ) -> u64 {
        self.region.fill(off, len, byte);
        let lines = self.region.flush(self.flush_kind, off, len);
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Store { offset: off as u64, data: vec![byte; len] });
            r.push(|| Event::Flush { offset: off as u64, len: len as u64 });
        }
        lines
    }

    /// Writes back the cache lines covering `[offset, offset + len)` with
    /// the pool's flush instruction (`NoFlush` writes nothing back but still
    /// records). No fence inside.
    #[inline]
    #[track_caller]
    pub fn flush(&self, offset: PoolOffset, len: u64) {
        let off = self.range_or_panic("flush", offset, len);
        if len == 0 {
            return;
        }
        let mut rec = self.recorder();
        let lines = self.region.flush(self.flush_kind, off, len as usize);
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Flush { offset: offset.0, len });
        }
        drop(rec);
        self.latency.after_lines(lines);
    }

    /// Store fence (sfence): orders and completes every earlier flush and
    /// non-temporal store of this thread.
    #[inline]
    pub fn fence(&self) {
        let mut rec = self.recorder();
        arch::sfence();
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Fence);
        }
        drop(rec);
        self.latency.after_fence();
    }

    /// [`flush`](Pmem::flush) then [`fence`](Pmem::fence).
    #[inline]
    #[track_caller]
    pub fn persist(&self, offset: PoolOffset, len: u64) {
        self.flush(offset, len);
        self.fence();
    }

    /// The commit primitive: one aligned 8-byte atomic store (Release).
    /// Panics if `offset` is not 8-aligned or out of bounds. Does not flush:
    /// callers flush and fence after it.
    #[inline]
    #[track_caller]
    pub fn store_u64(&self, offset: PoolOffset, value: u64) {
        let off = self.range_or_panic("store_u64", offset, 8);
        check_aligned("store_u64", offset);
        let mut rec = self.recorder();
        self.region.store_u64(off, value);
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::Commit { offset: offset.0, value });
        }
    }

    /// The commit primitive by a streaming store (movnti): one aligned
    /// 8-byte store, atomic like [`store_u64`](Pmem::store_u64), that needs
    /// no flush: like a [`write_nt`](Pmem::write_nt) line it is durable at
    /// the next [`fence`](Pmem::fence) and may persist earlier. It does not
    /// read the line for ownership first, which a cached store to a line
    /// written back since (clwb invalidates it on some CPUs) must, and the
    /// line leaves the cache: a load of it soon after misses. Recorded as
    /// `NtCommit`.
    #[inline]
    #[track_caller]
    pub fn store_u64_nt(&self, offset: PoolOffset, value: u64) {
        let off = self.range_or_panic("store_u64_nt", offset, 8);
        check_aligned("store_u64_nt", offset);
        let mut rec = self.recorder();
        self.region.store_u64_nt(off, value);
        if let Some(r) = rec.as_mut() {
            r.push(|| Event::NtCommit { offset: offset.0, value });
        }
        drop(rec);
        self.latency.after_lines(1);
    }

    /// Fill the page tables of an opened pool, so that its pages do not
    /// fault one by one at first touch (about a microsecond each in a VM).
    /// It takes tens of milliseconds per GiB: callers that must not wait run
    /// it on a thread of its own. It works `chunk_bytes` at a time and asks
    /// `more` before each chunk whether to go on. A private view or a heap
    /// pool is left alone.
    pub fn prefault(&self, chunk_bytes: usize, more: &mut dyn FnMut() -> bool) {
        self.region.prefault(chunk_bytes, more);
    }

    /// A pool made by [`create_file`](Pmem::create_file) has its pages
    /// faulted in by a background thread, so that creating a large pool
    /// does not wait for it; this waits until that thread is done (at once
    /// for any other pool). Benchmarks call it so that no measurement
    /// shares the machine with it.
    pub fn wait_populated(&self) {
        self.region.wait_populated();
    }

    /// msync of the whole mapping, so a `PageCache` pool survives power loss
    /// (at clean unmount or fsync). Harmless for the other file domains; a
    /// no-op for heap pools.
    pub fn sync_to_backing_file(&self) -> std::io::Result<()> {
        self.region.msync()
    }

    // ---- recording ----

    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// Starts recording. Events before this call are not kept. On a pool
    /// that is already recording this changes nothing (no event is lost).
    pub fn start_recording(&self) {
        let mut r = self.recorder.lock();
        if !r.on {
            r.on = true;
            r.events.clear();
        }
        // Set under the lock, so any call that then sees the flag and takes
        // the lock finds `on` already true.
        self.recording.store(true, Ordering::Relaxed);
    }

    /// Takes the events recorded so far; recording continues.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut self.recorder.lock().events)
    }

    /// Stops recording and returns the events not yet taken.
    pub fn stop_recording(&self) -> Vec<Event> {
        let mut r = self.recorder.lock();
        r.on = false;
        self.recording.store(false, Ordering::Relaxed);
        std::mem::take(&mut r.events)
    }

    /// Records a marker (no effect on the pool). No-op when not recording.
    pub fn mark(&self, label: u64) {
        if let Some(mut r) = self.recorder() {
            r.push(|| Event::Mark { label });
        }
    }

    /// A copy of the whole pool as it is now (what a crash with everything
    /// persisted would leave).
    pub fn image(&self) -> Vec<u8> {
        self.region.snapshot()
    }
}

#[cold]
#[track_caller]
fn out_of_bounds(op: &str, offset: PoolOffset, len: u64, pool_len: u64) -> ! {
    panic!("ferrite-pmem: {op} of {len} bytes at offset {} is outside the pool of {pool_len} bytes", offset.0)
}

#[inline]
#[track_caller]
fn check_aligned(op: &str, offset: PoolOffset) {
    if !offset.0.is_multiple_of(8) {
        misaligned(op, offset)
    }
}

#[cold]
#[track_caller]
fn misaligned(op: &str, offset: PoolOffset) -> ! {
    panic!("ferrite-pmem: {op} at offset {} is not 8-byte aligned", offset.0)
}
