//! Workloads of issue 13 (buffered mode): each operation kind in bursts
//! and sustained, so that a buffered mount's figures show both what its
//! callers see while the queue absorbs the work and what it costs once
//! the persister must keep up.
//!
//! - Burst: bursts of [`BURST`] operations (below the default `ops_max`
//!   of 4,096, so a burst fits the queue; only the lag bound can make a
//!   slow burst wait or wake the persister), each timed without a sync; after each burst an untimed `sync_all` empties
//!   the queue (its time is reported on its own row).
//! - Sustained: many more operations than the queue holds, timed together
//!   with a final `sync_all`: the figure includes everything the persister
//!   did to make them durable.
//!
//! Operation kinds: directory operations (create empty files, unlink,
//! mkdir, rmdir, as `dirops` does, each phase on its own), random 4 KiB
//! overwrites of a preallocated file and 4 KiB appends to a fresh file.
//! On every target the same calls are made (`Target::sync_all` is
//! `syncfs(2)` on the kernel's file systems, `Session::sync_all` on
//! Ferrite and a fence on the hardware limit), and every workload reports
//! what a buffered mount's persister did in the round (ops per batch,
//! batches run by callers, back-pressure waits, the longest lag); the
//! other targets show n/a there.
//!
//! Not part of `all`: `--workloads buffered` (or a workload's name).

use std::io;
use std::time::{Duration, Instant};

use ferrite::BufferedStats;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::stats::percentile_sorted;
use crate::target::{FileId, TPath, Target};
use crate::workload::{fill, pattern, pattern_at, Accounting, Better, Metric, Prepared, RunOut, Workload};

pub const GROUP: &str = "buffered";

/// Operations per burst.
pub const BURST: usize = 1_000;

/// Counts of one mode.
struct Scale {
    /// Bursts per phase and round.
    bursts: usize,
    /// Operations per phase and round of a sustained workload.
    sustained: usize,
    /// The file random writes go to.
    file_size: u64,
    /// Sustained appends per round, at most (the file grows by 4 KiB each).
    appends_max: usize,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale { bursts: 2, sustained: 10_000, file_size: 16 << 20, appends_max: 10_000 }
        } else {
            Scale { bursts: 20, sustained: 100_000, file_size: 64 << 20, appends_max: 50_000 }
        }
    }
}

/// How a workload's operations are timed.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `bursts` bursts of `ops` operations, each timed alone, an untimed
    /// `sync_all` after each.
    Burst { ops: usize, bursts: usize },
    /// `ops` operations and a final `sync_all`, timed together.
    Sustained { ops: usize },
}

impl Shape {
    /// Operations per phase and round.
    fn total(self) -> usize {
        match self {
            Shape::Burst { ops, bursts } => ops * bursts,
            Shape::Sustained { ops } => ops,
        }
    }

    /// Operations timed between two syncs.
    fn chunk(self) -> usize {
        match self {
            Shape::Burst { ops, .. } => ops,
            Shape::Sustained { ops } => ops,
        }
    }

    fn sync_timed(self) -> bool {
        matches!(self, Shape::Sustained { .. })
    }

    fn describe(self) -> String {
        match self {
            Shape::Burst { ops, bursts } => format!(
                "{bursts} bursts of {ops} ops per phase and round, each burst timed without a sync, an untimed \
                 sync_all after each (its mean time on its own row)"
            ),
            Shape::Sustained { ops } => {
                format!("{ops} ops per phase and round, timed together with a final sync_all")
            }
        }
    }
}

pub fn workloads(quick: bool) -> Vec<Box<dyn Workload>> {
    let s = Scale::new(quick);
    let burst = Shape::Burst { ops: BURST, bursts: s.bursts };
    let sustained = Shape::Sustained { ops: s.sustained };
    let appends = Shape::Sustained { ops: s.sustained.min(s.appends_max) };
    let write = |name: &str, shape, append| -> Box<dyn Workload> {
        Box::new(BufWrite { name: name.to_string(), shape, append, file_size: s.file_size })
    };
    vec![
        Box::new(BufDirOps { name: "burst-dirops".into(), shape: burst }),
        Box::new(BufDirOps { name: "sustained-dirops".into(), shape: sustained }),
        write("burst-randwrite-4k", burst, false),
        write("sustained-randwrite-4k", sustained, false),
        write("burst-append-4k", burst, true),
        write("sustained-append-4k", appends, true),
    ]
}

// ---------------------------------------------------------------- persister

/// The persister's figures every workload of the group reports last.
const P_OPS_PER_BATCH: Metric = Metric {
    key: "ops_per_batch",
    label: "buffered persister: ops per batch (this round, syncs included)",
    unit: "ops",
    better: Better::Higher,
};
const P_INLINE_PCT: Metric = Metric {
    key: "inline_pct",
    label: "buffered persister: batches run by callers (sync, back-pressure)",
    unit: "%",
    better: Better::Lower,
};
const P_BACKPRESSURE: Metric = Metric {
    key: "backpressure_per_kop",
    label: "buffered: back-pressure waits per 1,000 ops",
    unit: "/kop",
    better: Better::Lower,
};
const P_LAG_MAX: Metric = Metric {
    key: "lag_max_ms",
    label: "buffered: longest return → durable lag in the round",
    unit: "ms",
    better: Better::Lower,
};

/// What a buffered target's persister did between two snapshots: ops per
/// batch, % of batches run by callers, back-pressure waits per 1,000 ops,
/// the longest lag in the round (ms). NaN for every other target.
fn persister_values(before: Option<&BufferedStats>, t: &dyn Target) -> [f64; 4] {
    let (Some(a), Some((_, b))) = (before, t.buffered()) else {
        return [f64::NAN; 4];
    };
    let batches = b.batches.saturating_sub(a.batches) as f64;
    let ops = b.ops_persisted.saturating_sub(a.ops_persisted) as f64;
    let queued = b.ops_queued.saturating_sub(a.ops_queued) as f64;
    let inline = b.batches_inline.saturating_sub(a.batches_inline) as f64;
    let waits = b.backpressure_waits.saturating_sub(a.backpressure_waits) as f64;
    [
        if batches > 0.0 { ops / batches } else { f64::NAN },
        if batches > 0.0 { 100.0 * inline / batches } else { f64::NAN },
        if queued > 0.0 { 1000.0 * waits / queued } else { f64::NAN },
        b.lag_ns_max_seen as f64 / 1e6,
    ]
}

/// The persister's counts before a round; the longest-lag figure starts
/// afresh, so that the round reports its own.
fn snapshot(t: &dyn Target) -> Option<BufferedStats> {
    t.reset_buffered_lag();
    t.buffered().map(|(_, s)| s)
}

fn mean_us(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n.max(1) as f64
}

fn mean_ms(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e3 / n.max(1) as f64
}

// ---------------------------------------------------------------- dirops

/// Directory operations in one directory (made fresh each round), phase
/// by phase as `dirops`: create empty files, unlink them, mkdir, rmdir;
/// each phase in bursts or sustained.
pub struct BufDirOps {
    pub name: String,
    pub shape: Shape,
}

static BURST_DIR_METRICS: [Metric; 9] = [
    Metric {
        key: "create_us",
        label: "create (open excl + close), mean over bursts",
        unit: "us",
        better: Better::Lower,
    },
    Metric { key: "unlink_us", label: "unlink, mean over bursts", unit: "us", better: Better::Lower },
    Metric { key: "mkdir_us", label: "mkdir, mean over bursts", unit: "us", better: Better::Lower },
    Metric { key: "rmdir_us", label: "rmdir, mean over bursts", unit: "us", better: Better::Lower },
    Metric { key: "sync_ms", label: "sync_all after a burst (untimed above), mean", unit: "ms", better: Better::Lower },
    P_OPS_PER_BATCH,
    P_INLINE_PCT,
    P_BACKPRESSURE,
    P_LAG_MAX,
];

static SUSTAINED_DIR_METRICS: [Metric; 9] = [
    Metric {
        key: "create_us",
        label: "create (open excl + close), mean, final sync included",
        unit: "us",
        better: Better::Lower,
    },
    Metric { key: "unlink_us", label: "unlink, mean, final sync included", unit: "us", better: Better::Lower },
    Metric { key: "mkdir_us", label: "mkdir, mean, final sync included", unit: "us", better: Better::Lower },
    Metric { key: "rmdir_us", label: "rmdir, mean, final sync included", unit: "us", better: Better::Lower },
    Metric { key: "sync_ms", label: "final sync_all of a phase, mean", unit: "ms", better: Better::Lower },
    P_OPS_PER_BATCH,
    P_INLINE_PCT,
    P_BACKPRESSURE,
    P_LAG_MAX,
];

impl Workload for BufDirOps {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "in one directory (made fresh each round): create {n} empty files (open O_CREAT|O_EXCL + close), \
             unlink them, mkdir {n} directories, rmdir them; each phase: {}; mean per op; 1 thread",
            self.shape.describe(),
            n = self.shape.total()
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        match self.shape {
            Shape::Burst { .. } => &BURST_DIR_METRICS,
            Shape::Sustained { .. } => &SUSTAINED_DIR_METRICS,
        }
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerOp
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let dir = t.prepare(&format!("/{}", self.name));
        let names = (0..self.shape.total()).map(|i| t.prepare(&format!("/{}/f{i:06}", self.name))).collect();
        Ok(Some(Box::new(BufDirOpsRun { t, shape: self.shape, dir, names })))
    }
}

struct BufDirOpsRun<'t> {
    t: &'t dyn Target,
    shape: Shape,
    dir: TPath,
    names: Vec<TPath>,
}

/// Runs `op` on every name, a chunk at a time, with a `sync_all` after
/// each chunk; returns (time counted for the ops, time of the syncs).
fn phase(
    t: &dyn Target,
    shape: Shape,
    names: &[TPath],
    op: impl Fn(&TPath) -> io::Result<()>,
) -> io::Result<(Duration, Duration)> {
    let (mut timed, mut syncs) = (Duration::ZERO, Duration::ZERO);
    for chunk in names.chunks(shape.chunk()) {
        let t0 = Instant::now();
        for p in chunk {
            op(p)?;
        }
        let t1 = Instant::now();
        t.sync_all()?;
        let sync = t1.elapsed();
        timed += if shape.sync_timed() { t1 - t0 + sync } else { t1 - t0 };
        syncs += sync;
    }
    Ok((timed, syncs))
}

impl Prepared for BufDirOpsRun<'_> {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        t.mkdir(&self.dir)?;
        t.sync_all()?;
        let before = snapshot(t);
        let names = &self.names[..];
        let (create, s1) = phase(t, self.shape, names, |p| t.create_empty(p))?;
        let (unlink, s2) = phase(t, self.shape, names, |p| t.unlink(p))?;
        let (mkdir, s3) = phase(t, self.shape, names, |p| t.mkdir(p))?;
        let (rmdir, s4) = phase(t, self.shape, names, |p| t.rmdir(p))?;
        let persister = persister_values(before.as_ref(), t);
        t.rmdir(&self.dir)?;
        t.sync_all()?;
        let n = names.len();
        let syncs = 4 * n.div_ceil(self.shape.chunk());
        let mut values = vec![
            mean_us(create, n),
            mean_us(unlink, n),
            mean_us(mkdir, n),
            mean_us(rmdir, n),
            mean_ms(s1 + s2 + s3 + s4, syncs),
        ];
        values.extend(persister);
        Ok(RunOut { values, bytes_written: 0, ops: 4 * n as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------- writes

/// 4 KiB writes, bursts or sustained: uniform random 4 KiB-aligned
/// overwrites of a preallocated file, or appends to a file created empty
/// each round (and removed after it, untimed).
pub struct BufWrite {
    pub name: String,
    pub shape: Shape,
    pub append: bool,
    pub file_size: u64,
}

const IO: usize = 4096;

static BURST_WRITE_METRICS: [Metric; 10] = [
    Metric { key: "ops_per_s", label: "throughput over the bursts", unit: "ops/s", better: Better::Higher },
    Metric { key: "mb_per_s", label: "bandwidth over the bursts", unit: "MB/s", better: Better::Higher },
    Metric { key: "p50_us", label: "p50 latency", unit: "us", better: Better::Lower },
    Metric { key: "p99_us", label: "p99 latency", unit: "us", better: Better::Lower },
    Metric { key: "p999_us", label: "p99.9 latency", unit: "us", better: Better::Lower },
    Metric { key: "sync_ms", label: "sync_all after a burst (untimed above), mean", unit: "ms", better: Better::Lower },
    P_OPS_PER_BATCH,
    P_INLINE_PCT,
    P_BACKPRESSURE,
    P_LAG_MAX,
];

static SUSTAINED_WRITE_METRICS: [Metric; 10] = [
    Metric { key: "ops_per_s", label: "throughput, final sync included", unit: "ops/s", better: Better::Higher },
    Metric { key: "mb_per_s", label: "bandwidth, final sync included", unit: "MB/s", better: Better::Higher },
    Metric { key: "p50_us", label: "p50 latency (writes)", unit: "us", better: Better::Lower },
    Metric { key: "p99_us", label: "p99 latency (writes)", unit: "us", better: Better::Lower },
    Metric { key: "p999_us", label: "p99.9 latency (writes)", unit: "us", better: Better::Lower },
    Metric { key: "sync_ms", label: "final sync_all", unit: "ms", better: Better::Lower },
    P_OPS_PER_BATCH,
    P_INLINE_PCT,
    P_BACKPRESSURE,
    P_LAG_MAX,
];

impl Workload for BufWrite {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        let what = if self.append {
            "pwrite of 4 KiB at the end of a file created empty each round (appends; the file is removed \
             after the round, untimed)"
                .to_string()
        } else {
            format!(
                "pwrite of 4 KiB at uniform random (ChaCha8) 4 KiB-aligned offsets of a preallocated {} MiB file",
                self.file_size >> 20
            )
        };
        format!("{what}; {}; one Instant per op (latency percentiles over the writes); 1 thread", self.shape.describe())
    }
    fn metrics(&self) -> &'static [Metric] {
        match self.shape {
            Shape::Burst { .. } => &BURST_WRITE_METRICS,
            Shape::Sustained { .. } => &SUSTAINED_WRITE_METRICS,
        }
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerByte
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let block = pattern(IO);
        let path = t.prepare(&format!("/{}.dat", self.name));
        let f = if self.append {
            None
        } else {
            let f = t.open(&path, true)?;
            fill(t, f, self.file_size, &block)?;
            t.sync_all()?;
            Some(f)
        };
        let n = self.shape.total();
        Ok(Some(Box::new(BufWriteRun {
            t,
            shape: self.shape,
            file_size: self.file_size,
            path,
            f,
            block,
            plan: Vec::with_capacity(n),
            lat_ns: Vec::with_capacity(n),
            buf: vec![0u8; IO],
        })))
    }
}

struct BufWriteRun<'t> {
    t: &'t dyn Target,
    shape: Shape,
    file_size: u64,
    path: TPath,
    /// The preallocated file (random writes); appends make theirs each round.
    f: Option<FileId>,
    block: Vec<u8>,
    plan: Vec<u64>,
    lat_ns: Vec<u64>,
    buf: Vec<u8>,
}

impl Prepared for BufWriteRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let t = self.t;
        let n = self.shape.total();
        self.plan.clear();
        match self.f {
            Some(_) => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let positions = self.file_size / IO as u64;
                self.plan.extend((0..n).map(|_| rng.gen_range(0..positions) * IO as u64));
            }
            None => self.plan.extend((0..n as u64).map(|k| k * IO as u64)),
        }
        let f = match self.f {
            Some(f) => f,
            None => t.create(&self.path)?,
        };
        t.sync_all()?;
        let before = snapshot(t);
        self.lat_ns.clear();
        let data = pattern_at(&self.block, 0, IO);
        let (mut timed, mut syncs) = (Duration::ZERO, Duration::ZERO);
        for chunk in self.plan.chunks(self.shape.chunk()) {
            let start = Instant::now();
            let mut prev = start;
            for &off in chunk {
                t.pwrite(f, data, off)?;
                let now = Instant::now();
                self.lat_ns.push((now - prev).as_nanos() as u64);
                prev = now;
            }
            t.sync_all()?;
            let sync = prev.elapsed();
            timed += if self.shape.sync_timed() { prev - start + sync } else { prev - start };
            syncs += sync;
        }
        let persister = persister_values(before.as_ref(), t);
        // The last write reads back right (untimed).
        let last = *self.plan.last().expect("a round writes");
        t.pread(f, &mut self.buf, last)?;
        if self.buf[..] != *data {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: pread at {last} returned wrong data", t.name()),
            ));
        }
        if self.f.is_none() {
            t.close(f)?;
            t.unlink(&self.path)?;
            t.sync_all()?;
        }
        self.lat_ns.sort_unstable();
        let secs = timed.as_secs_f64();
        let p = |q: f64| percentile_sorted(&self.lat_ns, q) as f64 / 1000.0;
        let mut values = vec![
            n as f64 / secs,
            (n * IO) as f64 / secs / 1e6,
            p(0.50),
            p(0.99),
            p(0.999),
            mean_ms(syncs, n.div_ceil(self.shape.chunk())),
        ];
        values.extend(persister);
        Ok(RunOut { values, bytes_written: (n * IO) as u64, ops: n as u64 })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        if let Some(f) = self.f {
            self.t.close(f)?;
            self.t.unlink(&self.path)?;
            self.t.sync_all()?;
        }
        Ok(())
    }
}
