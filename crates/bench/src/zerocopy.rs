//! The zero-copy workloads of issue 12 (group `zerocopy`, not in `all`):
//! reading through a view against reading into a buffer, patching against
//! writing, and serving files to a socket. Each workload measures several
//! methods on the same target within one round, alternating in chunks (as
//! `lookup` does with its two directories), so a round's "view / pread"
//! ratio compares methods that saw the same phases of the machine.
//!
//! What a view, a patch and sendfile are on each target is the target's
//! business ([`Target::view`], [`Target::patch`], [`Target::sendfile`]):
//! Ferrite's peek/unpeek and patch_buffer/patch, the kernel's mmap/munmap
//! per view and sendfile(2), the hardware limit's bare pointer and in-place
//! stores made durable.
//!
//! "Use" is the same everywhere: every byte is read once, summed as
//! little-endian u64 words ([`word_sum`]), and every sum is checked against
//! the pattern the file holds, so a view that showed wrong bytes fails the
//! run. Patched and written bytes are read back after every chunk (untimed)
//! and checked the same way.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::target::{FileId, TPath, Target, View};
use crate::workload::{fill, pattern, Accounting, Better, Metric, Prepared, RunOut, Workload};

/// The group name (`--workloads zerocopy`).
pub const GROUP: &str = "zerocopy";

/// How many chunks a round is split into at most; the methods take turns
/// chunk by chunk.
const CHUNKS: usize = 8;

/// Counts of one mode.
struct ZcScale {
    /// The file the read and write workloads work on.
    file_size: u64,
    /// Bytes each method reads or writes per round.
    budget: u64,
    /// At most this many operations per method and round.
    max_ops: usize,
    /// Files of the serving workload.
    serve_files: usize,
}

impl ZcScale {
    fn new(quick: bool) -> ZcScale {
        if quick {
            ZcScale { file_size: 64 << 20, budget: 32 << 20, max_ops: 4_000, serve_files: 64 }
        } else {
            ZcScale { file_size: 512 << 20, budget: 512 << 20, max_ops: 100_000, serve_files: 256 }
        }
    }

    fn ops(&self, size: usize) -> usize {
        ((self.budget / size as u64) as usize).clamp(4, self.max_ops)
    }
}

/// Every zero-copy workload, for the `quick` or full scale.
pub fn workloads(quick: bool) -> Vec<Box<dyn Workload>> {
    let s = ZcScale::new(quick);
    let mut v: Vec<Box<dyn Workload>> = Vec::new();
    for (name, size) in [("4k", 4usize << 10), ("64k", 64 << 10), ("1m", 1 << 20), ("16m", 16 << 20)] {
        v.push(Box::new(ZcRead {
            name: format!("zc-read-{name}"),
            size,
            file_size: s.file_size,
            ops: s.ops(size),
            random: false,
            sparse: false,
        }));
    }
    v.push(Box::new(ZcRead {
        name: "zc-randread-4k".into(),
        size: 4096,
        file_size: s.file_size,
        ops: s.ops(4096),
        random: true,
        sparse: false,
    }));
    // The same reads with a light use (one word per page): what the view
    // saves when the reader does not need every byte.
    for (name, size) in [("64k", 64usize << 10), ("1m", 1 << 20), ("16m", 16 << 20)] {
        v.push(Box::new(ZcRead {
            name: format!("zc-read-{name}-touch"),
            size,
            file_size: s.file_size,
            ops: s.ops(size),
            random: false,
            sparse: true,
        }));
    }
    for (name, size) in [("4k", 4usize << 10), ("64k", 64 << 10), ("1m", 1 << 20), ("16m", 16 << 20)] {
        v.push(Box::new(ZcWrite { name: format!("zc-write-{name}"), size, file_size: s.file_size, ops: s.ops(size) }));
    }
    v.push(Box::new(ZcServe { files: s.serve_files, mean: 64 << 10, requests: s.ops(64 << 10) }));
    v
}

/// The sum of `bytes` as little-endian u64 words (wrapping), with a tail
/// shorter than a word added byte by byte: the "use" of every read. Eight
/// independent lanes, so the compiler vectorises it and it runs at memory
/// speed.
#[inline]
pub fn word_sum(bytes: &[u8]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut blocks = bytes.chunks_exact(64);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = lane.wrapping_add(u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()));
        }
    }
    let mut sum = lanes.iter().fold(0u64, |a, &l| a.wrapping_add(l));
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        sum = sum.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
    }
    for &b in words.remainder() {
        sum = sum.wrapping_add(b as u64);
    }
    sum
}

/// The light use: the sum of the first u64 word of every 4 KiB page.
#[inline]
pub fn page_sum(bytes: &[u8]) -> u64 {
    bytes.chunks(4096).fold(0u64, |s, p| s.wrapping_add(u64::from_le_bytes(p[..8].try_into().unwrap())))
}

/// The bytes of a view.
///
/// # Safety
/// `v` must be live (not released) for the slice's lifetime.
#[inline]
unsafe fn view_bytes(v: &View) -> &[u8] {
    std::slice::from_raw_parts(v.ptr, v.len)
}

/// What a producer writes into a buffer: the 4 KiB pattern block repeated,
/// with `stamp` over its first 8 bytes, so a write that did not land (or an
/// old page shown instead) is caught when the range is read back.
///
/// # Safety
/// `dst` must be valid for writes of `len` ≥ 8 bytes.
#[inline]
unsafe fn produce(dst: *mut u8, len: usize, block: &[u8], stamp: u64) {
    let mut at = 0;
    while at < len {
        let n = block.len().min(len - at);
        std::ptr::copy_nonoverlapping(block.as_ptr(), dst.add(at), n);
        at += n;
    }
    std::ptr::write_unaligned(dst.cast::<u64>(), stamp.to_le());
}

fn size_name(n: usize) -> String {
    match n {
        n if n >= 1 << 20 => format!("{} MiB", n >> 20),
        n => format!("{} KiB", n >> 10),
    }
}

fn wrong(t: &dyn Target, what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", t.name()))
}

/// Offsets for one method and round: `ops` positions of `size` bytes in a
/// file of `file_size`, uniform random or sequential from a random start
/// (wrapping), from the method's own random stream.
fn plan(seed: u64, method: u64, ops: usize, size: usize, file_size: u64, random: bool) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ method.wrapping_mul(0xA076_1D64_78BD_642F));
    let positions = file_size / size as u64;
    let start = rng.gen_range(0..positions);
    (0..ops as u64)
        .map(|i| if random { rng.gen_range(0..positions) } else { (start + i) % positions } * size as u64)
        .collect()
}

/// The chunk bounds of `ops` operations: the methods take turns chunk by
/// chunk, so slow and fast phases of the machine fall on all of them.
fn chunks(ops: usize) -> Vec<(usize, usize)> {
    let n = ops.clamp(1, CHUNKS);
    (0..n).map(|c| (c * ops / n, (c + 1) * ops / n)).collect()
}

fn rate(units: f64, d: Duration) -> f64 {
    units / d.as_secs_f64()
}

/// Opens (creating) `path` on `t` and fills `len` bytes of the pattern.
fn make_file(t: &dyn Target, path: &TPath, len: u64) -> io::Result<FileId> {
    let f = t.open(path, true)?;
    fill(t, f, len, &pattern(4096))?;
    Ok(f)
}

// ---------------------------------------------------------------- reads

/// Reads of `size` bytes, sequential or random, size-aligned, in a
/// preallocated file, three ways each round: a view per read, `pread` into
/// one reused buffer, and one view of the whole file reused over a chunk
/// of reads; each followed by the same use: every byte ([`word_sum`]), or
/// with `sparse` one word per page ([`page_sum`]).
pub struct ZcRead {
    pub name: String,
    pub size: usize,
    pub file_size: u64,
    /// Reads per method and round.
    pub ops: usize,
    pub random: bool,
    /// Use one word per 4 KiB page instead of every byte.
    pub sparse: bool,
}

static READ_METRICS: [Metric; 4] = [
    Metric { key: "view_mb_s", label: "view per read + use + release", unit: "MB/s", better: Better::Higher },
    Metric { key: "pread_mb_s", label: "pread into a reused buffer + use", unit: "MB/s", better: Better::Higher },
    Metric { key: "mapped_mb_s", label: "one whole-file view, reused + use", unit: "MB/s", better: Better::Higher },
    Metric { key: "view_over_pread", label: "view per read / pread, same round", unit: "x", better: Better::Higher },
];

impl Workload for ZcRead {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "reads of {} at {} {}-aligned offsets of a preallocated {} MiB file, {} per method and round, \
             three methods taking turns in {} chunks: (1) a view per read (Ferrite: peek + unpeek; kernel \
             targets: mmap + munmap of the range, pages faulted in by the use; hw-limit: a pointer), (2) \
             pread into one reused buffer, (3) reads of one view of the whole file (kernel: one mmap of the \
             file; Ferrite: one peek of the whole file), made with its pages mapped in \
             (MADV_POPULATE_READ) before each of this method's turns and released after it, untimed (it \
             is not held while the other methods run: \
             a Ferrite view pins every page it shows, and a pin table of the whole file would slow the \
             other methods' peeks); each \
             read followed by the same use: {}, checked against the pattern; the methods draw their \
             offsets separately; 1 thread",
            size_name(self.size),
            if self.random { "uniform random" } else { "sequential (wrapping, from a random start)" },
            size_name(self.size),
            self.file_size >> 20,
            self.ops,
            chunks(self.ops).len(),
            if self.sparse {
                "the sum of one u64 word per 4 KiB page (a reader that needs a little of each page)"
            } else {
                "a sum of every u64 word"
            }
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &READ_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::None
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let path = t.prepare(&format!("/{}.dat", self.name));
        let f = make_file(t, &path, self.file_size)?;
        let block = pattern(4096);
        let block_sum = if self.sparse { page_sum(&block) } else { word_sum(&block) };
        let mut run = ZcReadRun {
            t,
            path,
            f,
            whole: true,
            buf: vec![0u8; self.size],
            expect: block_sum.wrapping_mul((self.size / 4096) as u64),
            w: ZcRead { name: self.name.clone(), ..*self },
        };
        // A target that cannot make a view that long (EFBIG: the hardware
        // limit, whose files wrap around its ring) has no figure for the
        // whole-file method; its view per read is a bare pointer anyway.
        match run.whole_view() {
            Ok(v) => t.release(v)?,
            Err(e) if e.raw_os_error() == Some(libc::EFBIG) => run.whole = false,
            Err(e) => return Err(e),
        }
        Ok(Some(Box::new(run)))
    }
}

struct ZcReadRun<'t> {
    t: &'t dyn Target,
    w: ZcRead,
    path: TPath,
    f: FileId,
    /// Whether the target makes whole-file views.
    whole: bool,
    buf: Vec<u8>,
    /// The word sum of every read (the pattern repeats every 4 KiB).
    expect: u64,
}

impl ZcReadRun<'_> {
    /// A view of the whole file with its pages mapped in up front
    /// (`MADV_POPULATE_READ` on its address range: page tables filled,
    /// no byte read, so the cache is not warmed for the timed reads).
    fn whole_view(&self) -> io::Result<View> {
        let t = self.t;
        let v = t.view(self.f, 0, self.w.file_size as usize)?;
        let start = v.ptr as usize & !4095;
        let len = v.ptr as usize + v.len - start;
        // SAFETY: advice on the view's own pages, which stay mapped until
        // it is released; populating them changes no byte.
        if unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_READ) } != 0 {
            let e = io::Error::last_os_error();
            let _ = t.release(v);
            return Err(io::Error::other(format!("{}: MADV_POPULATE_READ of a whole-file view: {e}", t.name())));
        }
        Ok(v)
    }
}

impl Prepared for ZcReadRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let (t, f, size, expect) = (self.t, self.f, self.w.size, self.expect);
        let use_bytes = if self.w.sparse { page_sum } else { word_sum };
        let plans: Vec<Vec<u64>> =
            (0..3).map(|m| plan(seed, m, self.w.ops, size, self.w.file_size, self.w.random)).collect();
        let mut time = [Duration::ZERO; 3];
        let check = |sum: u64, off: u64, how: &str| {
            if sum == expect {
                Ok(())
            } else {
                Err(wrong(t, format!("{how} of {size} B at {off}: sum {sum:#x}, not {expect:#x}")))
            }
        };
        for (a, b) in chunks(self.w.ops) {
            let t0 = Instant::now();
            for &off in &plans[0][a..b] {
                let v = t.view(f, off, size)?;
                // SAFETY: `v` is live until the release just below.
                let sum = use_bytes(unsafe { view_bytes(&v) });
                t.release(v)?;
                check(sum, off, "view")?;
            }
            let t1 = Instant::now();
            for &off in &plans[1][a..b] {
                t.pread(f, &mut self.buf, off)?;
                check(use_bytes(&self.buf), off, "pread")?;
            }
            time[0] += t1 - t0;
            time[1] += Instant::now() - t1;
            if self.whole {
                let v = self.whole_view()?;
                // SAFETY: `v` is live until the release below.
                let whole = unsafe { view_bytes(&v) };
                let t2 = Instant::now();
                for &off in &plans[2][a..b] {
                    check(use_bytes(&whole[off as usize..][..size]), off, "whole-file view")?;
                }
                time[2] += t2.elapsed();
                t.release(v)?;
            }
        }
        let mb = (self.w.ops * size) as f64 / 1e6;
        let (view, pread) = (rate(mb, time[0]), rate(mb, time[1]));
        let mapped = if self.whole { rate(mb, time[2]) } else { f64::NAN };
        Ok(RunOut { values: vec![view, pread, mapped, view / pread], bytes_written: 0, ops: 3 * self.w.ops as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.close(self.f)?;
        self.t.unlink(&self.path)
    }
}

// ---------------------------------------------------------------- writes

/// Overwrites of `size` bytes at random size-aligned offsets of a
/// preallocated file, two ways each round: a patch buffer filled in place
/// and patched in, and a reused buffer filled the same way and written
/// with `pwrite`.
pub struct ZcWrite {
    pub name: String,
    pub size: usize,
    pub file_size: u64,
    /// Writes per method and round.
    pub ops: usize,
}

static WRITE_METRICS: [Metric; 3] = [
    Metric { key: "patch_mb_s", label: "patch_buffer + fill + patch", unit: "MB/s", better: Better::Higher },
    Metric { key: "pwrite_mb_s", label: "fill a reused buffer + pwrite", unit: "MB/s", better: Better::Higher },
    Metric { key: "patch_over_pwrite", label: "patch / pwrite, same round", unit: "x", better: Better::Higher },
];

impl Workload for ZcWrite {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "overwrites of {} at uniform random {}-aligned offsets of a preallocated {} MiB file, {} per \
             method and round, two methods taking turns in {} chunks: (1) patch_buffer({}), fill it, patch \
             it in (Ferrite; hw-limit: stores in place + write-back + fence; n/a on kernel targets), (2) \
             fill one reused buffer, pwrite it; fill = the 4 KiB pattern block copied in, a per-write stamp \
             over the first 8 bytes; after each chunk the last write of each method is read back (untimed) \
             and checked (not hw-limit's patches: the floor keeps no index); no accounting pass (stores into a patch buffer bypass the recording backend); \
             1 thread",
            size_name(self.size),
            size_name(self.size),
            self.file_size >> 20,
            self.ops,
            chunks(self.ops).len(),
            size_name(self.size),
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &WRITE_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::None
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let path = t.prepare(&format!("/{}.dat", self.name));
        let f = make_file(t, &path, self.file_size)?;
        let can_patch = match t.patch_buffer(4096) {
            Ok(b) => {
                t.free_buffer(b)?;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Unsupported => false,
            Err(e) => return Err(e),
        };
        Ok(Some(Box::new(ZcWriteRun {
            t,
            path,
            f,
            can_patch,
            block: pattern(4096),
            buf: vec![0u8; self.size],
            check: vec![0u8; self.size],
            want: pattern(self.size),
            stamp: 0,
            w: ZcWrite { name: self.name.clone(), ..*self },
        })))
    }
}

struct ZcWriteRun<'t> {
    t: &'t dyn Target,
    w: ZcWrite,
    path: TPath,
    f: FileId,
    can_patch: bool,
    block: Vec<u8>,
    buf: Vec<u8>,
    check: Vec<u8>,
    /// What `produce` writes, before the stamp.
    want: Vec<u8>,
    /// The stamp of the last write (every write gets a new one).
    stamp: u64,
}

impl ZcWriteRun<'_> {
    /// Reads `[off, off + size)` back and checks it holds what `produce`
    /// wrote with `stamp`.
    fn read_back(&mut self, off: u64, stamp: u64, how: &str) -> io::Result<()> {
        let (t, size) = (self.t, self.w.size);
        t.pread(self.f, &mut self.check, off)?;
        let head = u64::from_le_bytes(self.check[..8].try_into().unwrap());
        if head != stamp || self.check[8..] != self.want[8..] {
            return Err(wrong(
                t,
                format!("{how} of {size} B at {off}: read back wrong bytes (stamp {head:#x}, want {stamp:#x})"),
            ));
        }
        Ok(())
    }
}

impl Prepared for ZcWriteRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let (t, f, size) = (self.t, self.f, self.w.size);
        let plans: Vec<Vec<u64>> = (0..2).map(|m| plan(seed, m, self.w.ops, size, self.w.file_size, true)).collect();
        let mut time = [Duration::ZERO; 2];
        for (a, b) in chunks(self.w.ops) {
            if self.can_patch {
                let t0 = Instant::now();
                for &off in &plans[0][a..b] {
                    self.stamp += 1;
                    let buf = t.patch_buffer(size)?;
                    // SAFETY: the buffer is `size` bytes, writable, ours
                    // until patched.
                    unsafe { produce(buf.ptr, size, &self.block, self.stamp) };
                    t.patch(f, off, buf, size)?;
                }
                time[0] += t0.elapsed();
                if t.patch_readable() {
                    self.read_back(plans[0][b - 1], self.stamp, "patch")?;
                }
            }
            let t0 = Instant::now();
            for &off in &plans[1][a..b] {
                self.stamp += 1;
                // SAFETY: `buf` is `size` bytes.
                unsafe { produce(self.buf.as_mut_ptr(), size, &self.block, self.stamp) };
                t.pwrite(f, &self.buf, off)?;
            }
            time[1] += t0.elapsed();
            self.read_back(plans[1][b - 1], self.stamp, "pwrite")?;
        }
        let mb = (self.w.ops * size) as f64 / 1e6;
        let patch = if self.can_patch { rate(mb, time[0]) } else { f64::NAN };
        let pwrite = rate(mb, time[1]);
        let methods = if self.can_patch { 2 } else { 1 };
        Ok(RunOut {
            values: vec![patch, pwrite, patch / pwrite],
            bytes_written: (methods * self.w.ops * size) as u64,
            ops: (methods * self.w.ops) as u64,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.close(self.f)?;
        self.t.unlink(&self.path)
    }
}

// ---------------------------------------------------------------- serving

/// An application-shaped workload: a file server's send path. `files`
/// files of uniform random sizes in [½, 1½] × `mean`, kept open; each
/// request sends one whole file, picked uniformly at random, to a Unix
/// stream socket whose other end a thread drains (reading into a 1 MiB
/// buffer and summing every byte, checked against what was sent). Three
/// ways each round: a view of the file + write(socket, view) + release;
/// pread into a reused buffer + write(socket, buffer); sendfile(socket,
/// file) where the target has it. A method's time runs until the drain
/// has received all it sent.
pub struct ZcServe {
    pub files: usize,
    pub mean: usize,
    /// Requests per method and round.
    pub requests: usize,
}

static SERVE_METRICS: [Metric; 4] = [
    Metric { key: "view_req_s", label: "view + write(socket) + release", unit: "ops/s", better: Better::Higher },
    Metric { key: "pread_req_s", label: "pread + write(socket)", unit: "ops/s", better: Better::Higher },
    Metric { key: "sendfile_req_s", label: "sendfile(socket)", unit: "ops/s", better: Better::Higher },
    Metric { key: "view_over_pread", label: "view / pread, same round", unit: "x", better: Better::Higher },
];

impl Workload for ZcServe {
    fn name(&self) -> &str {
        "zc-serve"
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "a file server's send path: {} files of uniform random sizes in {}–{} KiB (any byte count), kept \
             open; each request sends one whole file picked uniformly at random to a Unix stream socket \
             (default buffer sizes) drained by a second thread that sums every byte (checked); {} requests \
             per method and round, three methods taking turns in {} chunks: (1) view of the file + \
             write(socket, view) + release, (2) pread into a reused buffer + write(socket, buffer), (3) \
             sendfile(socket, file) (kernel targets only); a method's time runs until the drain has \
             received everything it sent",
            self.files,
            (self.mean / 2) >> 10,
            (self.mean * 3 / 2) >> 10,
            self.requests,
            chunks(self.requests).len()
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &SERVE_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5e7e_f11e);
        let block = pattern(4096);
        let mut files = Vec::new();
        for k in 0..self.files {
            let len = rng.gen_range(self.mean / 2..=self.mean * 3 / 2);
            let path = t.prepare(&format!("/zc-serve-{k:04}.dat"));
            let f = make_file(t, &path, len as u64)?;
            let sum = block.iter().cycle().take(len).map(|&b| b as u64).sum::<u64>();
            files.push(ServedFile { path, f, len, sum });
        }
        let (sock, drain_end) = UnixStream::pair()?;
        let drained = Arc::new(Drained::default());
        let d = Arc::clone(&drained);
        let drain = std::thread::Builder::new().name("zc-serve-drain".into()).spawn(move || d.run(drain_end))?;
        let sendfile_ok = match t.sendfile(sock.as_raw_fd(), files[0].f, 0, files[0].len) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => false,
            Err(e) => return Err(e),
        };
        let mut run = ZcServeRun {
            t,
            files,
            sock: Some(sock),
            drained,
            drain: Some(drain),
            sent: 0,
            sent_sum: 0,
            sendfile_ok,
            buf: vec![0u8; self.mean * 3 / 2],
            requests: self.requests,
        };
        if sendfile_ok {
            run.sent += run.files[0].len as u64;
            run.sent_sum = run.sent_sum.wrapping_add(run.files[0].sum);
        }
        run.wait_drained()?;
        Ok(Some(Box::new(run)))
    }
}

struct ServedFile {
    path: TPath,
    f: FileId,
    len: usize,
    /// The sum of its bytes.
    sum: u64,
}

/// What the draining thread has received so far.
#[derive(Default)]
struct Drained {
    bytes: AtomicU64,
    sum: AtomicU64,
}

impl Drained {
    /// Reads until end of stream, counting and summing every byte.
    fn run(&self, mut s: UnixStream) -> io::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let sum = buf[..n].iter().map(|&b| b as u64).sum::<u64>();
            // The sum first: the sender reads `bytes` and then `sum`.
            self.sum.store(self.sum.load(Ordering::Relaxed).wrapping_add(sum), Ordering::Relaxed);
            self.bytes.fetch_add(n as u64, Ordering::Release);
        }
    }
}

struct ZcServeRun<'t> {
    t: &'t dyn Target,
    files: Vec<ServedFile>,
    sock: Option<UnixStream>,
    drained: Arc<Drained>,
    drain: Option<JoinHandle<io::Result<()>>>,
    /// Bytes and byte sum sent so far (over the whole workload).
    sent: u64,
    sent_sum: u64,
    sendfile_ok: bool,
    buf: Vec<u8>,
    requests: usize,
}

impl ZcServeRun<'_> {
    /// Waits until the drain has received everything sent, then checks the
    /// sum of what it received.
    fn wait_drained(&self) -> io::Result<()> {
        let started = Instant::now();
        while self.drained.bytes.load(Ordering::Acquire) < self.sent {
            if self.drain.as_ref().is_some_and(|h| h.is_finished()) {
                return Err(io::Error::other("the socket's draining thread stopped"));
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(io::Error::other("the socket's draining thread stalled for 60 s"));
            }
            std::thread::yield_now();
        }
        let got = self.drained.sum.load(Ordering::Relaxed);
        if got != self.sent_sum {
            return Err(wrong(self.t, format!("the socket received bytes summing to {got}, not {}", self.sent_sum)));
        }
        Ok(())
    }
}

impl Prepared for ZcServeRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let picks: Vec<Vec<usize>> = (0..3u64)
            .map(|m| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ m.wrapping_mul(0xA076_1D64_78BD_642F));
                (0..self.requests).map(|_| rng.gen_range(0..self.files.len())).collect()
            })
            .collect();
        let methods = if self.sendfile_ok { 3 } else { 2 };
        let mut time = [Duration::ZERO; 3];
        for (a, b) in chunks(self.requests) {
            for (m, picks) in picks.iter().enumerate().take(methods) {
                let t0 = Instant::now();
                for &k in &picks[a..b] {
                    let file = &self.files[k];
                    let mut sock = self.sock.as_ref().expect("socket");
                    match m {
                        0 => {
                            let v = t.view(file.f, 0, file.len)?;
                            // SAFETY: `v` is live until the release below.
                            let r = sock.write_all(unsafe { view_bytes(&v) });
                            t.release(v)?;
                            r?;
                        }
                        1 => {
                            t.pread(file.f, &mut self.buf[..file.len], 0)?;
                            sock.write_all(&self.buf[..file.len])?;
                        }
                        _ => t.sendfile(sock.as_raw_fd(), file.f, 0, file.len)?,
                    }
                    self.sent += file.len as u64;
                    self.sent_sum = self.sent_sum.wrapping_add(file.sum);
                }
                self.wait_drained()?;
                time[m] += t0.elapsed();
            }
        }
        let n = self.requests as f64;
        let (view, pread) = (rate(n, time[0]), rate(n, time[1]));
        let sendfile = if self.sendfile_ok { rate(n, time[2]) } else { f64::NAN };
        Ok(RunOut {
            values: vec![view, pread, sendfile, view / pread],
            bytes_written: 0,
            ops: (methods * self.requests) as u64,
        })
    }
    fn cleanup(mut self: Box<Self>) -> io::Result<()> {
        drop(self.sock.take()); // end of stream for the drain
        if let Some(h) = self.drain.take() {
            h.join().map_err(|_| io::Error::other("the draining thread panicked"))??;
        }
        for file in &self.files {
            self.t.close(file.f)?;
            self.t.unlink(&file.path)?;
        }
        Ok(())
    }
}

impl Drop for ZcServeRun<'_> {
    fn drop(&mut self) {
        // On an error path the socket closes here, so the drain ends.
        drop(self.sock.take());
        if let Some(h) = self.drain.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_sum_adds_words_and_tail_bytes() {
        let mut b = Vec::new();
        for w in [1u64, 2, 3, 4, 5, 6, 7, 8, 9, u64::MAX] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&[7, 9]);
        // 1 + ... + 9 = 45, + u64::MAX wraps to 44, + 7 + 9.
        assert_eq!(word_sum(&b), 44 + 16);
        assert_eq!(word_sum(&b[..64]), 36);
        let mut pages = vec![0u8; 3 * 4096];
        for (k, p) in pages.chunks_mut(4096).enumerate() {
            p[..8].copy_from_slice(&(k as u64 + 1).to_le_bytes());
            p[8] = 99; // not part of the light use
        }
        assert_eq!(page_sum(&pages), 6);
    }

    #[test]
    fn sequential_plans_wrap_and_random_plans_stay_aligned() {
        let p = plan(1, 0, 10, 4096, 4 * 4096, false);
        for w in p.windows(2) {
            assert_eq!(w[1], (w[0] + 4096) % (4 * 4096));
        }
        let r = plan(1, 1, 1000, 65536, 64 << 20, true);
        assert!(r.iter().all(|&o| o % 65536 == 0 && o + 65536 <= 64 << 20));
        assert_ne!(plan(1, 0, 10, 4096, 1 << 20, true), plan(1, 1, 10, 4096, 1 << 20, true));
    }

    #[test]
    fn chunks_cover_every_op_once() {
        for ops in [1, 4, 7, 8, 100] {
            let c = chunks(ops);
            assert_eq!(c.first().unwrap().0, 0);
            assert_eq!(c.last().unwrap().1, ops);
            assert!(c.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
        }
    }
}
