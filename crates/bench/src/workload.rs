//! Workloads, written once against [`Target`]. A workload is prepared on a
//! target (files made, data written, untimed), run any number of times (one
//! run = one round, giving one value per metric), then cleaned up.
//!
//! Here: the fio-style I/O workloads ([`Fio`]), directory operations
//! ([`DirOps`]), NOVA's create/append/fsync/unlink microbenchmark
//! ([`NovaMicro`]), publishing a file by rename and by O_TMPFILE
//! ([`Publish`]), lookups in a large and a small directory ([`Lookup`])
//! and remount time ([`Remount`]). `filebench.rs` has the Filebench-like
//! personalities.

use std::io;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::stats::percentile_sorted;
use crate::target::{FileId, TPath, Target};

/// Which direction of a metric is good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Throughput-like: the ratio is ferrite / other.
    Higher,
    /// Time-like: the ratio is other / ferrite (a speedup).
    Lower,
}

impl Better {
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

/// One figure a workload reports per round.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Machine name (CSV, JSON).
    pub key: &'static str,
    /// Human name (table).
    pub label: &'static str,
    /// "ops/s", "MB/s", "us", "ms" or "x".
    pub unit: &'static str,
    pub better: Better,
}

/// What an untimed accounting pass reports for a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accounting {
    /// Nothing (reads only, or nothing to count).
    None,
    /// Media bytes per byte the program wrote (write amplification).
    PerByte,
    /// Media bytes per operation (metadata workloads).
    PerOp,
}

/// What one pass of a workload gives.
pub struct RunOut {
    /// In the order of [`Workload::metrics`].
    pub values: Vec<f64>,
    /// Bytes the program asked to write (write amplification divides by it).
    pub bytes_written: u64,
    /// Operations made (for per-op accounting).
    pub ops: u64,
}

pub trait Workload: Sync {
    /// Short name, also what `--workloads` selects.
    fn name(&self) -> &str;
    /// The family it belongs to ("fio", "meta", "filebench", ...): also
    /// selectable with `--workloads`, and how plots are grouped.
    fn group(&self) -> &'static str;
    /// The parameters, printed with the results.
    fn params(&self) -> String;
    fn metrics(&self) -> &'static [Metric];
    fn accounting(&self) -> Accounting {
        Accounting::None
    }
    /// Whether the workload can run on `t` at all; `Err(why)` makes the
    /// run skip it there with that note, before anything is prepared
    /// (and before a remote target is asked).
    fn applies_to(&self, _t: &dyn Target) -> Result<(), String> {
        Ok(())
    }
    /// Whether an untimed warm-up pass comes before the measured rounds
    /// (not for a workload that starts from a fresh file system each run
    /// and takes minutes: the aging workload).
    fn warm_up(&self) -> bool {
        true
    }
    /// Untimed setup on `t`; `None` if the workload does not apply to it.
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>>;
}

/// A workload set up on one target.
pub trait Prepared {
    /// One measured pass. `seed` fixes every random choice of the pass.
    fn run(&mut self, seed: u64) -> io::Result<RunOut>;
    /// Remove what `prepare` and the runs made.
    fn cleanup(self: Box<Self>) -> io::Result<()>;
    /// What was set up, when worth printing (the remount probe says where
    /// its file system lives).
    fn describe(&self) -> Option<String> {
        None
    }
}

/// The data every write carries (and every read must return): a fixed
/// pseudo-random 4 KiB block, repeated. A write of fewer than 4096 bytes at
/// offset o carries bytes o % 4096.. of the block, so every file always
/// holds the block at every 4 KiB boundary and any read can be checked.
pub fn pattern(len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_da7a);
    let mut block = vec![0u8; 4096];
    rng.fill(&mut block[..]);
    block.iter().copied().cycle().take(len.max(4096)).collect()
}

/// The bytes of the pattern that belong at `offset` for `len` bytes.
#[inline]
pub fn pattern_at(block: &[u8], offset: u64, len: usize) -> &[u8] {
    if len < 4096 {
        &block[(offset % 4096) as usize..][..len]
    } else {
        &block[..len]
    }
}

/// Nanoseconds → microseconds / milliseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mean_us(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// Writes `len` bytes of the pattern to `f` from 0, 1 MiB a call.
pub fn fill(t: &dyn Target, f: FileId, len: u64, block: &[u8]) -> io::Result<()> {
    let chunk: Vec<u8> = block.iter().copied().cycle().take(1 << 20).collect();
    let mut off = 0u64;
    while off < len {
        let n = (1u64 << 20).min(len - off) as usize;
        t.pwrite(f, &chunk[..n], off)?;
        off += n as u64;
    }
    Ok(())
}

// ---------------------------------------------------------------- fio

/// fio-style I/O on preallocated files: `io_size` B per call, sequential or
/// uniform random at `io_size`-aligned offsets, a read fraction, an
/// optional fsync every k writes, and 1 or more threads on one shared file
/// or on a file each. One `Instant` per op: op i's latency runs from the
/// end of op i−1 to the end of op i (so a write's latency includes the
/// fsync that follows it, when one does).
pub struct Fio {
    pub name: String,
    pub group: &'static str,
    pub io_size: usize,
    pub file_size: u64,
    /// Ops per round, all threads together.
    pub ops: usize,
    pub random: bool,
    /// Percentage of ops that are reads.
    pub read_pct: u32,
    /// fsync after every this many writes (0: never).
    pub fsync_every: usize,
    pub threads: usize,
    /// Threads share one file (otherwise a file each).
    pub shared: bool,
}

static FIO_METRICS: [Metric; 5] = [
    Metric { key: "ops_per_s", label: "throughput", unit: "ops/s", better: Better::Higher },
    Metric { key: "mb_per_s", label: "bandwidth", unit: "MB/s", better: Better::Higher },
    Metric { key: "p50_us", label: "p50 latency", unit: "us", better: Better::Lower },
    Metric { key: "p99_us", label: "p99 latency", unit: "us", better: Better::Lower },
    Metric { key: "p999_us", label: "p99.9 latency", unit: "us", better: Better::Lower },
];

fn size_name(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1024 && n % 1024 == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

impl Workload for Fio {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &'static str {
        self.group
    }
    fn params(&self) -> String {
        let what = match self.read_pct {
            100 => "pread".to_string(),
            0 => "pwrite".to_string(),
            r => format!("{r}% pread / {}% pwrite (chosen per op)", 100 - r),
        };
        let fsync = match self.fsync_every {
            0 => String::new(),
            1 => ", fsync after every write".into(),
            k => format!(", fsync after every {k} writes"),
        };
        let threads = match (self.threads, self.shared) {
            (1, _) => "1 thread".to_string(),
            (n, true) => format!("{n} threads on one shared file"),
            (n, false) => format!("{n} threads, a private file each"),
        };
        format!(
            "{what} of {} at {} {}-aligned offsets of a preallocated {} MiB file{fsync}; {} ops per round; {threads}",
            size_name(self.io_size),
            if self.random { "uniform random (ChaCha8)" } else { "sequential (wrapping)" },
            size_name(self.io_size),
            self.file_size >> 20,
            self.ops
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &FIO_METRICS
    }
    fn accounting(&self) -> Accounting {
        if self.read_pct < 100 {
            Accounting::PerByte
        } else {
            Accounting::None
        }
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let nfiles = if self.shared { 1 } else { self.threads };
        let block = pattern(self.io_size);
        let mut paths = Vec::new();
        for k in 0..nfiles {
            let p = t.prepare(&format!("/{}-{k}.dat", self.name));
            let f = t.open(&p, true)?;
            fill(t, f, self.file_size, &block)?;
            t.close(f)?;
            paths.push(p);
        }
        let per_thread = self.ops / self.threads;
        let mut threads = Vec::new();
        for k in 0..self.threads {
            let f = t.open(&paths[if self.shared { 0 } else { k }], false)?;
            threads.push(FioThread {
                f,
                plan: Vec::with_capacity(per_thread),
                lat_ns: Vec::with_capacity(per_thread),
                buf: vec![0u8; self.io_size],
                span: (Instant::now(), Instant::now()),
                written: 0,
            });
        }
        Ok(Some(Box::new(FioRun { t, w: self.clone_params(), paths, threads, block })))
    }
}

impl Fio {
    fn clone_params(&self) -> Fio {
        Fio { name: self.name.clone(), group: self.group, ..*self }
    }
}

struct FioThread {
    f: FileId,
    plan: Vec<(u64, bool)>,
    lat_ns: Vec<u64>,
    buf: Vec<u8>,
    span: (Instant, Instant),
    written: u64,
}

struct FioRun<'t> {
    t: &'t dyn Target,
    w: Fio,
    paths: Vec<TPath>,
    threads: Vec<FioThread>,
    block: Vec<u8>,
}

fn fio_thread(t: &dyn Target, st: &mut FioThread, block: &[u8], io: usize, fsync_every: usize) -> io::Result<()> {
    st.lat_ns.clear();
    st.written = 0;
    let f = st.f;
    let mut writes = 0usize;
    let mut last_read = None;
    let start = Instant::now();
    let mut prev = start;
    for &(off, read) in &st.plan {
        if read {
            t.pread(f, &mut st.buf, off)?;
            last_read = Some(off);
        } else {
            t.pwrite(f, pattern_at(block, off, io), off)?;
            writes += 1;
            if fsync_every > 0 && writes.is_multiple_of(fsync_every) {
                t.fsync(f)?;
            }
        }
        let now = Instant::now();
        st.lat_ns.push((now - prev).as_nanos() as u64);
        prev = now;
    }
    st.span = (start, prev);
    st.written = (writes * io) as u64;
    if let Some(off) = last_read {
        if st.buf[..] != *pattern_at(block, off, io) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: pread at {off} returned wrong data", t.name()),
            ));
        }
    }
    Ok(())
}

impl Prepared for FioRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let w = &self.w;
        let positions = w.file_size / w.io_size as u64;
        for (k, st) in self.threads.iter_mut().enumerate() {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (k as u64).wrapping_mul(0xA076_1D64_78BD_642F));
            let n = w.ops / w.threads;
            st.plan.clear();
            let start = if w.random { 0 } else { rng.gen_range(0..positions) };
            for i in 0..n as u64 {
                let pos = if w.random { rng.gen_range(0..positions) } else { (start + i) % positions };
                let read = match w.read_pct {
                    100 => true,
                    0 => false,
                    r => rng.gen_range(0..100) < r,
                };
                st.plan.push((pos * w.io_size as u64, read));
            }
        }
        let t = self.t;
        let block = &self.block[..];
        let (io, fsync_every) = (w.io_size, w.fsync_every);
        if self.threads.len() == 1 {
            fio_thread(t, &mut self.threads[0], block, io, fsync_every)?;
        } else {
            // Pinned new threads, released together (`threads.rs`).
            let jobs: Vec<_> =
                self.threads.iter_mut().map(|st| move || fio_thread(t, st, block, io, fsync_every)).collect();
            crate::threads::run_together(jobs)?;
        }
        let begin = self.threads.iter().map(|s| s.span.0).min().unwrap();
        let end = self.threads.iter().map(|s| s.span.1).max().unwrap();
        let secs = (end - begin).as_secs_f64();
        let mut lat: Vec<u64> = self.threads.iter().flat_map(|s| s.lat_ns.iter().copied()).collect();
        lat.sort_unstable();
        let ops = lat.len();
        let p = |q: f64| us(percentile_sorted(&lat, q));
        Ok(RunOut {
            values: vec![ops as f64 / secs, (ops * io) as f64 / secs / 1e6, p(0.50), p(0.99), p(0.999)],
            bytes_written: self.threads.iter().map(|s| s.written).sum(),
            ops: ops as u64,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        for st in &self.threads {
            self.t.close(st.f)?;
        }
        for p in &self.paths {
            self.t.unlink(p)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- dirops

/// SoupFS's directory operations: in one directory, create `n` empty files
/// (open O_CREAT|O_EXCL + close), unlink them, mkdir `n` directories, rmdir
/// them; each phase timed as a whole and divided by `n`.
pub struct DirOps {
    pub n: usize,
}

static DIROPS_METRICS: [Metric; 4] = [
    Metric { key: "create_us", label: "create (open excl + close), mean", unit: "us", better: Better::Lower },
    Metric { key: "unlink_us", label: "unlink, mean", unit: "us", better: Better::Lower },
    Metric { key: "mkdir_us", label: "mkdir, mean", unit: "us", better: Better::Lower },
    Metric { key: "rmdir_us", label: "rmdir, mean", unit: "us", better: Better::Lower },
];

impl Workload for DirOps {
    fn name(&self) -> &str {
        "dirops"
    }
    fn group(&self) -> &'static str {
        "meta"
    }
    fn params(&self) -> String {
        format!(
            "in one directory (made fresh each round): create {n} empty files (f000000.., open \
             O_CREAT|O_EXCL + close), unlink them in creation order, mkdir {n} directories, rmdir \
             them; each phase timed as a whole and divided by {n}; 1 thread",
            n = self.n
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &DIROPS_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerOp
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let dir = t.prepare("/dirops");
        let names = (0..self.n).map(|i| t.prepare(&format!("/dirops/f{i:06}"))).collect();
        Ok(Some(Box::new(DirOpsRun { t, dir, names })))
    }
}

struct DirOpsRun<'t> {
    t: &'t dyn Target,
    dir: TPath,
    names: Vec<TPath>,
}

impl Prepared for DirOpsRun<'_> {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        t.mkdir(&self.dir)?;
        let t0 = Instant::now();
        for p in &self.names {
            t.create_empty(p)?;
        }
        let t1 = Instant::now();
        for p in &self.names {
            t.unlink(p)?;
        }
        let t2 = Instant::now();
        for p in &self.names {
            t.mkdir(p)?;
        }
        let t3 = Instant::now();
        for p in &self.names {
            t.rmdir(p)?;
        }
        let t4 = Instant::now();
        t.rmdir(&self.dir)?;
        let n = self.names.len();
        Ok(RunOut {
            values: vec![mean_us(t1 - t0, n), mean_us(t2 - t1, n), mean_us(t3 - t2, n), mean_us(t4 - t3, n)],
            bytes_written: 0,
            ops: 4 * n as u64,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------- NOVA

/// NOVA's microbenchmark (FAST'16, section 5.2): `files` files, each
/// created, appended to with sixteen 4 KiB writes and fsynced, then all
/// deleted. Mean latency per create, append, fsync and unlink (one
/// `Instant` per op; close is untimed).
pub struct NovaMicro {
    pub files: usize,
    pub appends: usize,
}

static NOVA_METRICS: [Metric; 4] = [
    Metric { key: "create_us", label: "create, mean", unit: "us", better: Better::Lower },
    Metric { key: "append_us", label: "append 4 KiB, mean", unit: "us", better: Better::Lower },
    Metric { key: "fsync_us", label: "fsync, mean", unit: "us", better: Better::Lower },
    Metric { key: "unlink_us", label: "unlink, mean", unit: "us", better: Better::Lower },
];

impl Workload for NovaMicro {
    fn name(&self) -> &str {
        "nova-micro"
    }
    fn group(&self) -> &'static str {
        "meta"
    }
    fn params(&self) -> String {
        format!(
            "{} files in one directory: each created (open O_CREAT|O_EXCL), appended to with {} \
             writes of 4 KiB, fsynced and closed; then all unlinked; mean per op, 1 thread",
            self.files, self.appends
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &NOVA_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerByte
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        t.mkdir(&t.prepare("/nova"))?;
        let names = (0..self.files).map(|i| t.prepare(&format!("/nova/f{i:06}"))).collect();
        Ok(Some(Box::new(NovaRun { t, names, appends: self.appends, block: pattern(4096) })))
    }
}

struct NovaRun<'t> {
    t: &'t dyn Target,
    names: Vec<TPath>,
    appends: usize,
    block: Vec<u8>,
}

impl Prepared for NovaRun<'_> {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let (mut create, mut append, mut fsync) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for p in &self.names {
            let t0 = Instant::now();
            let f = t.create(p)?;
            let t1 = Instant::now();
            create += t1 - t0;
            for k in 0..self.appends {
                t.pwrite(f, &self.block, (k * 4096) as u64)?;
            }
            let t2 = Instant::now();
            append += t2 - t1;
            t.fsync(f)?;
            fsync += t2.elapsed();
            t.close(f)?;
        }
        let t0 = Instant::now();
        for p in &self.names {
            t.unlink(p)?;
        }
        let unlink = t0.elapsed();
        let n = self.names.len();
        Ok(RunOut {
            values: vec![mean_us(create, n), mean_us(append, n * self.appends), mean_us(fsync, n), mean_us(unlink, n)],
            bytes_written: (n * self.appends * 4096) as u64,
            ops: (n * (self.appends + 3)) as u64,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.rmdir(&self.t.prepare("/nova"))
    }
}

// ---------------------------------------------------------------- publish

/// Publishing a file: its name appears with the whole of its contents or
/// not at all, durable at the end. The portable way: write a temporary
/// name, fsync, close, rename it to the final name, fsync the directory.
/// The Linux way with O_TMPFILE: a file without a name, written and
/// fsynced, then named by `linkat` of `/proc/self/fd/N`, the directory
/// fsynced (nothing to clean up after a crash: a nameless file is gone
/// with the process). Each phase publishes `files`
/// new 4 KiB files into an empty directory; the names are removed after
/// each phase, untimed. Targets without O_TMPFILE (a FUSE mount, the
/// hardware limit) skip the workload.
pub struct Publish {
    pub files: usize,
}

static PUBLISH_METRICS: [Metric; 3] = [
    Metric { key: "rename_us", label: "temporary name, rename: per file", unit: "us", better: Better::Lower },
    Metric { key: "tmpfile_us", label: "O_TMPFILE, linkat: per file", unit: "us", better: Better::Lower },
    Metric { key: "tmpfile_over_rename", label: "O_TMPFILE / rename time", unit: "x", better: Better::Lower },
];

impl Workload for Publish {
    fn name(&self) -> &str {
        "publish"
    }
    fn group(&self) -> &'static str {
        "meta"
    }
    fn params(&self) -> String {
        format!(
            "{n} new 4 KiB files published into one directory per phase, two ways: (a) open a temporary \
             name O_CREAT|O_EXCL, write 4 KiB, fsync, close, rename to the final name, fsync the directory; (b) open \
             the directory O_TMPFILE, write 4 KiB, fsync, linkat /proc/self/fd/N to the final name \
             (AT_SYMLINK_FOLLOW), close, fsync the directory; each phase timed as a whole and divided by {n}, every file's \
             size checked and the names removed after it, untimed; 1 thread",
            n = self.files
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &PUBLISH_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerByte
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let dir = t.prepare("/publish");
        t.mkdir(&dir)?;
        // A target without O_TMPFILE answers the first one (EOPNOTSUPP from
        // the kernel for a FUSE mount, Unsupported from the hardware limit).
        match t.tmpfile(&dir) {
            Ok(f) => t.close(f)?,
            Err(e) if e.kind() == io::ErrorKind::Unsupported || e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                t.rmdir(&dir)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let temps = (0..self.files).map(|i| t.prepare(&format!("/publish/.tmp{i:06}"))).collect();
        let names = (0..self.files).map(|i| t.prepare(&format!("/publish/f{i:06}"))).collect();
        Ok(Some(Box::new(PublishRun { t, dir, temps, names, block: pattern(4096) })))
    }
}

struct PublishRun<'t> {
    t: &'t dyn Target,
    dir: TPath,
    temps: Vec<TPath>,
    names: Vec<TPath>,
    block: Vec<u8>,
}

impl PublishRun<'_> {
    /// Every final name holds the 4 KiB written; then the names go.
    fn check_and_remove(&self) -> io::Result<()> {
        for p in &self.names {
            let size = self.t.stat(p)?;
            if size != 4096 {
                return Err(io::Error::other(format!("publish: a published file has {size} bytes, not 4096")));
            }
            self.t.unlink(p)?;
        }
        Ok(())
    }
}

impl Prepared for PublishRun<'_> {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let t0 = Instant::now();
        for (tmp, name) in self.temps.iter().zip(&self.names) {
            let f = t.create(tmp)?;
            t.pwrite(f, &self.block, 0)?;
            t.fsync(f)?;
            t.close(f)?;
            t.rename(tmp, name)?;
            t.fsync_dir(&self.dir)?;
        }
        let renamed = t0.elapsed();
        self.check_and_remove()?;
        let t1 = Instant::now();
        for name in &self.names {
            let f = t.tmpfile(&self.dir)?;
            t.pwrite(f, &self.block, 0)?;
            t.fsync(f)?;
            t.link_file(f, name)?;
            t.close(f)?;
            t.fsync_dir(&self.dir)?;
        }
        let linked = t1.elapsed();
        self.check_and_remove()?;
        let n = self.names.len();
        let (a, b) = (mean_us(renamed, n), mean_us(linked, n));
        Ok(RunOut { values: vec![a, b, b / a], bytes_written: (2 * n * 4096) as u64, ops: (2 * n) as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.rmdir(&self.dir)
    }
}

// ---------------------------------------------------------------- lookup

/// `stat` of random names in a directory of `big` entries and in one of
/// `small` entries, alternating in chunks of 10,000 so both see the same
/// phases of the machine. Mean time per stat in each, and their ratio.
pub struct Lookup {
    pub big: usize,
    pub small: usize,
    pub lookups: usize,
}

static LOOKUP_METRICS: [Metric; 3] = [
    Metric { key: "big_us", label: "stat in the big directory, mean", unit: "us", better: Better::Lower },
    Metric { key: "small_us", label: "stat in the small directory, mean", unit: "us", better: Better::Lower },
    Metric { key: "big_over_small", label: "big / small time", unit: "x", better: Better::Lower },
];

impl Workload for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn group(&self) -> &'static str {
        "meta"
    }
    fn params(&self) -> String {
        format!(
            "stat of uniformly random names in a directory of {} empty files and in one of {}; \
             {} stats in each per round, alternating in chunks of 10,000; the names come from \
             {} separately allocated paths in both cases, so the harness's cache misses match; 1 thread",
            self.big, self.small, self.lookups, self.big
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &LOOKUP_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let mut dirs = Vec::new();
        let mut probes = Vec::new();
        for (d, n) in [("big", self.big), ("small", self.small)] {
            let dir = t.prepare(&format!("/lk-{d}"));
            t.mkdir(&dir)?;
            let names: Vec<TPath> = (0..n).map(|i| t.prepare(&format!("/lk-{d}/entry-{i:07}"))).collect();
            for p in &names {
                t.create_empty(p)?;
            }
            // The names looked up: as many separately allocated paths for
            // the small directory as for the big one, so the harness's own
            // cache misses on them are the same in both.
            probes.push((0..self.big.max(self.small)).map(|i| names[i % n].clone()).collect::<Vec<_>>());
            dirs.push((dir, names));
        }
        Ok(Some(Box::new(LookupRun { t, dirs, probes, lookups: self.lookups, picks: Vec::new() })))
    }
}

struct LookupRun<'t> {
    t: &'t dyn Target,
    dirs: Vec<(TPath, Vec<TPath>)>,
    probes: Vec<Vec<TPath>>,
    lookups: usize,
    picks: Vec<u32>,
}

impl Prepared for LookupRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut total = [Duration::ZERO; 2];
        let mut done = 0;
        while done < self.lookups {
            let chunk = 10_000.min(self.lookups - done);
            for (d, names) in self.probes.iter().enumerate() {
                self.picks.clear();
                self.picks.extend((0..chunk).map(|_| rng.gen_range(0..names.len() as u32)));
                let t0 = Instant::now();
                for &i in &self.picks {
                    t.stat(&names[i as usize])?;
                }
                total[d] += t0.elapsed();
            }
            done += chunk;
        }
        let (big, small) = (mean_us(total[0], self.lookups), mean_us(total[1], self.lookups));
        Ok(RunOut { values: vec![big, small, big / small], bytes_written: 0, ops: 2 * self.lookups as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        for (dir, names) in &self.dirs {
            for p in names {
                self.t.unlink(p)?;
            }
            self.t.rmdir(dir)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- read-offset

/// Random 4 KiB reads from a preallocated file into a page-aligned buffer
/// and into one 16 bytes past a page boundary (where glibc's `malloc`
/// places a block of 128 KiB or more, which it maps for itself), alternating
/// in chunks of 10,000 so both see the same phases of the machine. File
/// pages start at page boundaries, so the second buffer puts the copy's
/// destination 16 bytes past its source modulo 4 KiB: the short distance
/// at which `rep movsb` (glibc's `memcpy` and the kernel's copy to user
/// space for copies of a few KiB) has run an order of magnitude slower on
/// an AMD Zen 3 host (docs/BENCHMARKS.md). Every other read workload reads
/// into a buffer from `malloc`, wherever the allocator put it.
pub struct ReadOffset {
    pub file_size: u64,
    pub reads: usize,
}

/// Where the second buffer starts past a page boundary.
const READ_OFFSET_BYTES: usize = 16;

static READ_OFFSET_METRICS: [Metric; 3] = [
    Metric {
        key: "aligned_us",
        label: "4 KiB pread into a page-aligned buffer, mean",
        unit: "us",
        better: Better::Lower,
    },
    Metric {
        key: "offset16_us",
        label: "4 KiB pread into a buffer 16 bytes past a page boundary, mean",
        unit: "us",
        better: Better::Lower,
    },
    Metric { key: "offset16_over_aligned", label: "offset 16 / aligned time", unit: "x", better: Better::Lower },
];

impl Workload for ReadOffset {
    fn name(&self) -> &str {
        "read-offset"
    }
    fn group(&self) -> &'static str {
        "fio"
    }
    fn params(&self) -> String {
        format!(
            "pread of 4 KiB at uniform random 4 KiB-aligned offsets of a preallocated {} MiB file, into a \
             page-aligned buffer and into one starting {READ_OFFSET_BYTES} bytes past a page boundary (what \
             malloc returns for 128 KiB and more); {} reads into each per round, alternating in chunks of \
             10,000; 1 thread",
            self.file_size >> 20,
            self.reads
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &READ_OFFSET_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let block = pattern(4096);
        let path = t.prepare("/read-offset.dat");
        let f = t.open(&path, true)?;
        fill(t, f, self.file_size, &block)?;
        t.close(f)?;
        let f = t.open(&path, false)?;
        Ok(Some(Box::new(ReadOffsetRun {
            t,
            path,
            f,
            pages: self.file_size / 4096,
            reads: self.reads,
            buf: vec![0u8; 3 * 4096],
            block,
            picks: Vec::new(),
        })))
    }
}

struct ReadOffsetRun<'t> {
    t: &'t dyn Target,
    path: TPath,
    f: FileId,
    pages: u64,
    reads: usize,
    /// Room for a page-aligned page and one 16 bytes further on.
    buf: Vec<u8>,
    block: Vec<u8>,
    picks: Vec<u64>,
}

impl Prepared for ReadOffsetRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let aligned = (4096 - self.buf.as_ptr() as usize % 4096) % 4096;
        let mut total = [Duration::ZERO; 2];
        let mut done = 0;
        while done < self.reads {
            let chunk = 10_000.min(self.reads - done);
            for (k, start) in [aligned, aligned + READ_OFFSET_BYTES].into_iter().enumerate() {
                self.picks.clear();
                self.picks.extend((0..chunk).map(|_| rng.gen_range(0..self.pages) * 4096));
                let buf = &mut self.buf[start..start + 4096];
                let t0 = Instant::now();
                for &off in &self.picks {
                    t.pread(self.f, buf, off)?;
                }
                total[k] += t0.elapsed();
                if buf[..] != self.block[..] {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: pread returned wrong data", t.name()),
                    ));
                }
            }
            done += chunk;
        }
        let (a, o) = (mean_us(total[0], self.reads), mean_us(total[1], self.reads));
        Ok(RunOut { values: vec![a, o, o / a], bytes_written: 0, ops: 2 * self.reads as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.close(self.f)?;
        self.t.unlink(&self.path)
    }
}

// ---------------------------------------------------------------- remount

/// Remount time of a second file system of the target's kind holding
/// `files` files: after a clean unmount, and after a simulated crash.
pub struct Remount {
    pub files: usize,
}

static REMOUNT_METRICS: [Metric; 5] = [
    Metric { key: "clean_mount_ms", label: "mount after clean unmount", unit: "ms", better: Better::Lower },
    Metric {
        key: "clean_first_ms",
        label: "mount after clean unmount + first stat",
        unit: "ms",
        better: Better::Lower,
    },
    Metric { key: "crash_mount_ms", label: "mount after crash (recovery)", unit: "ms", better: Better::Lower },
    Metric { key: "crash_first_ms", label: "mount after crash + first stat", unit: "ms", better: Better::Lower },
    Metric { key: "recovery_ms", label: "recovery, as the engine reports it", unit: "ms", better: Better::Lower },
];

impl Workload for Remount {
    fn name(&self) -> &str {
        "remount"
    }
    fn group(&self) -> &'static str {
        "remount"
    }
    fn params(&self) -> String {
        format!(
            "a separate file system of the target's kind holding {} empty files in directories of \
             1,000: each round a clean unmount (untimed) and a timed mount, then a crash (a file \
             created and written, the file system dropped without unmounting; untimed) and a \
             timed mount that recovers; each mount is followed by one timed stat of a file in \
             the middle of the tree",
            self.files
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &REMOUNT_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        Ok(t.remount_probe(self.files)?.map(|probe| Box::new(RemountRun { probe }) as Box<dyn Prepared>))
    }
}

struct RemountRun {
    probe: Box<dyn crate::target::RemountProbe>,
}

impl Prepared for RemountRun {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        let c = self.probe.clean()?;
        let crash = self.probe.crash()?;
        let nan = f64::NAN;
        Ok(RunOut {
            values: vec![
                ms(c.mount),
                ms(c.mount + c.first_lookup),
                crash.map_or(nan, |x| ms(x.mount)),
                crash.map_or(nan, |x| ms(x.mount + x.first_lookup)),
                crash.and_then(|x| x.recovery).map_or(nan, ms),
            ],
            bytes_written: 0,
            ops: 2,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> Option<String> {
        Some(self.probe.describe())
    }
}
