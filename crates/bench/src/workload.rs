//! Workloads, written once against [`Target`]. A workload is prepared on a
//! target (files made, data written, untimed), run any number of times (one
//! run = one round, giving one value per metric), then cleaned up.

use std::io;
use std::time::Instant;

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
    /// Machine name (CSV).
    pub key: &'static str,
    /// Human name (table).
    pub label: &'static str,
    pub unit: &'static str,
    pub better: Better,
}

pub trait Workload {
    /// Short name, also what `--workloads` selects.
    fn name(&self) -> &'static str;
    /// The parameters, printed with the results.
    fn params(&self) -> String;
    fn metrics(&self) -> &'static [Metric];
    /// Untimed setup on `t`.
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Box<dyn Prepared + 't>>;
}

/// A workload set up on one target.
pub trait Prepared {
    /// One measured pass; values in the order of [`Workload::metrics`].
    /// `seed` fixes every random choice of the pass.
    fn run(&mut self, seed: u64) -> io::Result<Vec<f64>>;
    /// Remove what `prepare` and the runs made.
    fn cleanup(self: Box<Self>) -> io::Result<()>;
}

/// The data every write carries (and every read must return): a fixed
/// pseudo-random block, so no target sees zeros it could shortcut.
fn pattern(len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_da7a);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

// ---------------------------------------------------------------- random IO

/// 4 KiB (`block`) random writes or reads at block-aligned offsets of a
/// preallocated file of `file_size` bytes, one call per op, timed one by
/// one for the latency percentiles.
pub struct RandIo {
    pub write: bool,
    pub file_size: u64,
    pub block: usize,
    pub ops: usize,
}

static RANDIO_METRICS: [Metric; 4] = [
    Metric { key: "ops_per_s", label: "throughput", unit: "ops/s", better: Better::Higher },
    Metric { key: "p50_us", label: "p50 latency", unit: "us", better: Better::Lower },
    Metric { key: "p99_us", label: "p99 latency", unit: "us", better: Better::Lower },
    Metric { key: "p999_us", label: "p99.9 latency", unit: "us", better: Better::Lower },
];

impl Workload for RandIo {
    fn name(&self) -> &'static str {
        if self.write {
            "randwrite-4k"
        } else {
            "randread-4k"
        }
    }
    fn params(&self) -> String {
        format!(
            "{} {} B at uniform random {} B-aligned offsets (ChaCha8, fixed seed) of one \
             preallocated {} MiB file, {} ops per round, 1 thread, one Instant per op",
            if self.write { "pwrite" } else { "pread" },
            self.block,
            self.block,
            self.file_size >> 20,
            self.ops
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &RANDIO_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Box<dyn Prepared + 't>> {
        let path = t.prepare(if self.write { "/randwrite.dat" } else { "/randread.dat" });
        let f = t.open(&path, true)?;
        let run = RandIoRun {
            t,
            f: Some(f),
            path,
            write: self.write,
            blocks: self.file_size / self.block as u64,
            block: self.block,
            data: pattern(self.block),
            buf: vec![0u8; self.block],
            offsets: Vec::with_capacity(self.ops),
            lat_ns: Vec::with_capacity(self.ops),
            ops: self.ops,
        };
        // Preallocate: write the whole file with the pattern, 1 MiB a call.
        let chunk_len = (1 << 20).max(self.block) / self.block * self.block;
        let chunk: Vec<u8> = run.data.iter().copied().cycle().take(chunk_len).collect();
        let mut off = 0u64;
        while off < self.file_size {
            let n = chunk_len.min((self.file_size - off) as usize);
            t.pwrite(f, &chunk[..n], off)?;
            off += n as u64;
        }
        Ok(Box::new(run))
    }
}

struct RandIoRun<'t> {
    t: &'t dyn Target,
    f: Option<FileId>,
    path: TPath,
    write: bool,
    blocks: u64,
    block: usize,
    data: Vec<u8>,
    buf: Vec<u8>,
    offsets: Vec<u64>,
    lat_ns: Vec<u64>,
    ops: usize,
}

impl Prepared for RandIoRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<Vec<f64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        self.offsets.clear();
        self.offsets.extend((0..self.ops).map(|_| rng.gen_range(0..self.blocks) * self.block as u64));
        self.lat_ns.clear();
        let t = self.t;
        let f = self.f.expect("file open");
        let start = Instant::now();
        let mut prev = start;
        if self.write {
            for &off in &self.offsets {
                t.pwrite(f, &self.data, off)?;
                let now = Instant::now();
                self.lat_ns.push((now - prev).as_nanos() as u64);
                prev = now;
            }
        } else {
            for &off in &self.offsets {
                t.pread(f, &mut self.buf, off)?;
                let now = Instant::now();
                self.lat_ns.push((now - prev).as_nanos() as u64);
                prev = now;
            }
        }
        let total = (prev - start).as_secs_f64();
        // Every block holds the pattern: check what was read last.
        if !self.write && self.buf != self.data {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: pread returned wrong data", t.name())));
        }
        self.lat_ns.sort_unstable();
        let us = |q: f64| percentile_sorted(&self.lat_ns, q) as f64 / 1000.0;
        Ok(vec![self.ops as f64 / total, us(0.50), us(0.99), us(0.999)])
    }
    fn cleanup(mut self: Box<Self>) -> io::Result<()> {
        if let Some(f) = self.f.take() {
            self.t.close(f)?;
        }
        self.t.unlink(&self.path)
    }
}

// ---------------------------------------------------------------- create

/// Create `n` empty files in one fresh directory (open O_CREAT|O_EXCL +
/// close each), then unlink them in the same order; mean time per op.
pub struct CreateUnlink {
    pub n: usize,
}

static CREATE_METRICS: [Metric; 2] = [
    Metric { key: "create_us", label: "create (open excl + close), mean", unit: "us", better: Better::Lower },
    Metric { key: "unlink_us", label: "unlink, mean", unit: "us", better: Better::Lower },
];

impl Workload for CreateUnlink {
    fn name(&self) -> &'static str {
        "create-unlink"
    }
    fn params(&self) -> String {
        format!(
            "{} empty files created in one new directory per round (names f000000.., \
             open O_CREAT|O_EXCL + close), then unlinked in creation order; \
             each phase timed as a whole and divided by {}, 1 thread",
            self.n, self.n
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &CREATE_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Box<dyn Prepared + 't>> {
        Ok(Box::new(CreateUnlinkRun { t, n: self.n, round: 0, names: Vec::with_capacity(self.n) }))
    }
}

struct CreateUnlinkRun<'t> {
    t: &'t dyn Target,
    n: usize,
    round: u64,
    names: Vec<TPath>,
}

impl Prepared for CreateUnlinkRun<'_> {
    fn run(&mut self, _seed: u64) -> io::Result<Vec<f64>> {
        let t = self.t;
        let dir = format!("/cu{}", self.round);
        self.round += 1;
        let dir_path = t.prepare(&dir);
        t.mkdir(&dir_path)?;
        self.names.clear();
        self.names.extend((0..self.n).map(|i| t.prepare(&format!("{dir}/f{i:06}"))));

        let start = Instant::now();
        for p in &self.names {
            t.create_empty(p)?;
        }
        let created = Instant::now();
        for p in &self.names {
            t.unlink(p)?;
        }
        let unlinked = Instant::now();

        t.rmdir(&dir_path)?;
        let per_op_us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / self.n as f64;
        Ok(vec![per_op_us(created - start), per_op_us(unlinked - created)])
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}
