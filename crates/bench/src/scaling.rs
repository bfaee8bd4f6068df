//! Two threads against one (issue 14): does the engine let two threads on
//! private files, or on disjoint parts of one file, run side by side?
//!
//! Each round runs the same per-thread work first on one thread, then on
//! two threads at once (started by a barrier), and reports throughput with
//! two threads over throughput with one: 2.0 is perfect scaling, 1.0 is
//! none. Both halves run in the same round on the same target, so the ratio
//! is free of the run-to-run drift that comparing two workloads would carry.
//! Phases: random 4 KiB overwrites of a private file each; random 4 KiB
//! overwrites of one shared file, each thread in its own half (writes that
//! never overlap); creates of empty files in a private directory each; and
//! unlinks of them.

use std::io;
use std::sync::Barrier;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::target::{FileId, TPath, Target};
use crate::workload::{fill, pattern, pattern_at, Better, Metric, Prepared, RunOut, Workload};

/// The group `--workloads threads` selects (with the fio thread workloads).
pub const GROUP: &str = "threads";

pub struct Scaling {
    /// 4 KiB writes per thread per phase.
    pub writes: usize,
    /// Files each thread creates (and then unlinks) per phase.
    pub files: usize,
    /// Size of each private file, and of each half of the shared one.
    pub file_size: u64,
}

static SCALING_METRICS: [Metric; 4] = [
    Metric {
        key: "private_write_x",
        label: "random 4 KiB writes, private files: 2 threads / 1",
        unit: "x",
        better: Better::Higher,
    },
    Metric {
        key: "shared_write_x",
        label: "random 4 KiB writes, one file (disjoint halves): 2 threads / 1",
        unit: "x",
        better: Better::Higher,
    },
    Metric { key: "create_x", label: "create, private directories: 2 threads / 1", unit: "x", better: Better::Higher },
    Metric { key: "unlink_x", label: "unlink, private directories: 2 threads / 1", unit: "x", better: Better::Higher },
];

const IO: usize = 4096;

impl Workload for Scaling {
    fn name(&self) -> &str {
        "scaling-2t"
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "per round, each phase on 1 thread then on 2 (barrier start, same work per thread), throughput \
             ratio 2 threads / 1: {w} random 4 KiB pwrites per thread on a private preallocated {m} MiB file \
             each; {w} per thread on one shared {m2} MiB file, thread k in half k; {f} creates (open \
             O_CREAT|O_EXCL + close) per thread in a private directory each; then {f} unlinks",
            w = self.writes,
            m = self.file_size >> 20,
            m2 = (2 * self.file_size) >> 20,
            f = self.files
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &SCALING_METRICS
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let block = pattern(IO);
        let mut paths = Vec::new();
        for (k, len) in [(0, self.file_size), (1, self.file_size), (2, 2 * self.file_size)] {
            let p = t.prepare(&format!("/scaling-{k}.dat"));
            let f = t.open(&p, true)?;
            fill(t, f, len, &block)?;
            t.close(f)?;
            paths.push(p);
        }
        let mut files = Vec::new();
        for p in &paths {
            files.push(t.open(p, false)?);
        }
        let dirs: Vec<TPath> = (0..2).map(|k| t.prepare(&format!("/scaling-d{k}"))).collect();
        for d in &dirs {
            t.mkdir(d)?;
        }
        let names =
            (0..2).map(|k| (0..self.files).map(|i| t.prepare(&format!("/scaling-d{k}/f{i:06}"))).collect()).collect();
        Ok(Some(Box::new(ScalingRun {
            t,
            writes: self.writes,
            file_size: self.file_size,
            paths,
            files,
            dirs,
            names,
            block,
        })))
    }
}

struct ScalingRun<'t> {
    t: &'t dyn Target,
    writes: usize,
    file_size: u64,
    /// Private file 0, private file 1, the shared file.
    paths: Vec<TPath>,
    files: Vec<FileId>,
    dirs: Vec<TPath>,
    /// Per thread, the names it creates and unlinks.
    names: Vec<Vec<TPath>>,
    block: Vec<u8>,
}

/// What one thread does in one phase.
#[derive(Clone, Copy)]
enum Phase {
    /// Random 4 KiB writes into `[base, base + len)` of file `f`.
    Write {
        f: FileId,
        base: u64,
        len: u64,
    },
    Create,
    Unlink,
}

impl ScalingRun<'_> {
    fn one(&self, phase: Phase, k: usize, seed: u64) -> io::Result<usize> {
        let t = self.t;
        match phase {
            Phase::Write { f, base, len } => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let slots = len / IO as u64;
                for _ in 0..self.writes {
                    let off = base + rng.gen_range(0..slots) * IO as u64;
                    t.pwrite(f, pattern_at(&self.block, off, IO), off)?;
                }
                Ok(self.writes)
            }
            Phase::Create => {
                for p in &self.names[k] {
                    t.create_empty(p)?;
                }
                Ok(self.names[k].len())
            }
            Phase::Unlink => {
                for p in &self.names[k] {
                    t.unlink(p)?;
                }
                Ok(self.names[k].len())
            }
        }
    }

    /// Ops per second of `phases` run at once, one thread each (one phase:
    /// on the calling thread).
    fn rate(&self, phases: &[Phase], seed: u64) -> io::Result<f64> {
        if let [p] = phases {
            let t0 = Instant::now();
            let n = self.one(*p, 0, seed)?;
            return Ok(n as f64 / t0.elapsed().as_secs_f64());
        }
        let barrier = Barrier::new(phases.len());
        let results: Vec<io::Result<(usize, Instant, Instant)>> = std::thread::scope(|s| {
            let hs: Vec<_> = phases
                .iter()
                .enumerate()
                .map(|(k, &p)| {
                    let b = &barrier;
                    s.spawn(move || {
                        b.wait();
                        let t0 = Instant::now();
                        let n = self.one(p, k, seed)?;
                        Ok((n, t0, Instant::now()))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("thread panicked")))).collect()
        });
        let done = results.into_iter().collect::<io::Result<Vec<_>>>()?;
        let begin = done.iter().map(|d| d.1).min().expect("two threads");
        let end = done.iter().map(|d| d.2).max().expect("two threads");
        Ok(done.iter().map(|d| d.0).sum::<usize>() as f64 / (end - begin).as_secs_f64())
    }
}

impl Prepared for ScalingRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let len = self.file_size;
        let private = |k: usize| Phase::Write { f: self.files[k], base: 0, len };
        let half = |k: usize| Phase::Write { f: self.files[2], base: k as u64 * len, len };
        let private_x = self.rate(&[private(0), private(1)], seed)? / self.rate(&[private(0)], seed)?;
        let shared_x = self.rate(&[half(0), half(1)], seed)? / self.rate(&[half(0)], seed)?;
        // One thread creates and unlinks directory 0's names; then two
        // threads each do their own directory's.
        let create_1 = self.rate(&[Phase::Create], seed)?;
        let unlink_1 = self.rate(&[Phase::Unlink], seed)?;
        let create_2 = self.rate(&[Phase::Create, Phase::Create], seed)?;
        let unlink_2 = self.rate(&[Phase::Unlink, Phase::Unlink], seed)?;
        let writes = 6 * self.writes;
        let files = 6 * self.names[0].len();
        Ok(RunOut {
            values: vec![private_x, shared_x, create_2 / create_1, unlink_2 / unlink_1],
            bytes_written: (writes * IO) as u64,
            ops: (writes + files) as u64,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        for &f in &self.files {
            self.t.close(f)?;
        }
        for p in &self.paths {
            self.t.unlink(p)?;
        }
        for d in &self.dirs {
            self.t.rmdir(d)?;
        }
        Ok(())
    }
}
