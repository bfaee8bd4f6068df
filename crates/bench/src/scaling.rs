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
//!
//! Every phase, the one-thread phase too, runs on threads spawned for it,
//! each pinned to a CPU of its own, started together by a barrier that
//! spins before it yields (`threads.rs`, which the other two-thread
//! workloads use too). Before (2026-11-27), the one-thread phase ran
//! on the calling thread, whose heap arena was warm from earlier rounds
//! while the two new threads faulted fresh memory in; the scheduler of
//! these 2-vCPU VMs often put both new threads on one vCPU and left the
//! second waiting for up to a time slice (1–4 ms measured with per-thread
//! start times, a third of a 14 ms create phase); and a sleeping barrier
//! cost a wake-up of an idle vCPU of the same order. That measured the
//! scheduler and the heap, not the file system, and moved the create
//! ratio between 0.9× and 1.7× for one engine. Pinning and spawning apply
//! to every target alike. Beside throughput, each phase reports its CPU
//! time per operation with two threads over one (CLOCK_THREAD_CPUTIME_ID):
//! 1.0 means the second thread added no work to the first (no contended
//! lines, no spinning on a lock), whatever the scheduler did.

use std::io;
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

static SCALING_METRICS: [Metric; 8] = [
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
    Metric {
        key: "private_write_cpu_x",
        label: "CPU time per write, private files: 2 threads / 1",
        unit: "x",
        better: Better::Lower,
    },
    Metric {
        key: "shared_write_cpu_x",
        label: "CPU time per write, one file (disjoint halves): 2 threads / 1",
        unit: "x",
        better: Better::Lower,
    },
    Metric {
        key: "create_cpu_x",
        label: "CPU time per create, private directories: 2 threads / 1",
        unit: "x",
        better: Better::Lower,
    },
    Metric {
        key: "unlink_cpu_x",
        label: "CPU time per unlink, private directories: 2 threads / 1",
        unit: "x",
        better: Better::Lower,
    },
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
            "per round, each phase on 1 new thread then on 2 (each pinned to a CPU of its own, started \
             by a spinning barrier, same work per thread), throughput and CPU time per op, 2 threads / 1: \
             {w} random 4 KiB pwrites per thread on a private preallocated {m} MiB file each; {w} per \
             thread on one shared {m2} MiB file, thread k in half k; {f} creates (open O_CREAT|O_EXCL + \
             close) per thread in a private directory each; then {f} unlinks",
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

    /// Ops per second of `phases` run at once, on a new thread each, each
    /// thread pinned to a CPU of its own when there are enough (`--cpu`
    /// leaves one); and the threads' CPU time per op.
    fn rate(&self, phases: &[Phase], seed: u64) -> io::Result<Rate> {
        let jobs: Vec<_> = phases
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                move || {
                    let c0 = thread_cpu_ns();
                    let t0 = Instant::now();
                    let n = self.one(p, k, seed)?;
                    let t1 = Instant::now();
                    Ok((n, t0, t1, thread_cpu_ns() - c0))
                }
            })
            .collect();
        let done = crate::threads::run_together(jobs)?;
        let begin = done.iter().map(|d| d.1).min().expect("at least one thread");
        let end = done.iter().map(|d| d.2).max().expect("at least one thread");
        let ops = done.iter().map(|d| d.0).sum::<usize>() as f64;
        let cpu_ns = done.iter().map(|d| d.3).sum::<u64>() as f64;
        Ok(Rate { ops_per_s: ops / (end - begin).as_secs_f64(), cpu_ns_per_op: cpu_ns / ops })
    }
}

/// Throughput of one phase, and what each op cost in CPU time.
struct Rate {
    ops_per_s: f64,
    cpu_ns_per_op: f64,
}

impl Rate {
    /// (throughput, CPU time per op) of `two` over `self`.
    fn ratios(&self, two: &Rate) -> (f64, f64) {
        (two.ops_per_s / self.ops_per_s, two.cpu_ns_per_op / self.cpu_ns_per_op)
    }
}

impl Prepared for ScalingRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let len = self.file_size;
        let private = |k: usize| Phase::Write { f: self.files[k], base: 0, len };
        let half = |k: usize| Phase::Write { f: self.files[2], base: k as u64 * len, len };
        // Two threads first, then one, for the writes, as before.
        let private_2 = self.rate(&[private(0), private(1)], seed)?;
        let (private_x, private_cpu_x) = self.rate(&[private(0)], seed)?.ratios(&private_2);
        let shared_2 = self.rate(&[half(0), half(1)], seed)?;
        let (shared_x, shared_cpu_x) = self.rate(&[half(0)], seed)?.ratios(&shared_2);
        // One thread creates and unlinks directory 0's names; then two
        // threads each do their own directory's.
        let create_1 = self.rate(&[Phase::Create], seed)?;
        let unlink_1 = self.rate(&[Phase::Unlink], seed)?;
        let (create_x, create_cpu_x) = create_1.ratios(&self.rate(&[Phase::Create, Phase::Create], seed)?);
        let (unlink_x, unlink_cpu_x) = unlink_1.ratios(&self.rate(&[Phase::Unlink, Phase::Unlink], seed)?);
        let writes = 6 * self.writes;
        let files = 6 * self.names[0].len();
        Ok(RunOut {
            values: vec![
                private_x,
                shared_x,
                create_x,
                unlink_x,
                private_cpu_x,
                shared_cpu_x,
                create_cpu_x,
                unlink_cpu_x,
            ],
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

/// CPU time the calling thread has used, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `ts`, which we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is always available on Linux");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
