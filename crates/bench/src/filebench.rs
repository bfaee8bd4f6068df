//! Filebench-like personalities (fileserver, varmail, webserver, webproxy),
//! implemented in the suite with the flowops of Filebench's `.f` files and
//! their file counts, sizes and thread counts scaled to this machine (the
//! originals are printed next to the scaled values).
//!
//! Differences from Filebench, on purpose: each thread owns a fixed part of
//! the file set (file i belongs to thread i mod threads), so no two threads
//! race on one file and every target executes the same operations for a
//! seed; file sizes are uniform in [mean/2, 3·mean/2) rather than gamma
//! distributed; a round is a fixed number of loop iterations per thread,
//! not a fixed time, so all targets do the same work.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::target::{FileId, TPath, Target};
use crate::workload::{pattern, Accounting, Better, Metric, Prepared, RunOut, Workload};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    FileServer,
    VarMail,
    WebServer,
    WebProxy,
}

/// One personality with its scaled parameters.
pub struct Personality {
    pub kind: Kind,
    pub files: usize,
    pub mean_size: u64,
    pub dir_width: usize,
    pub threads: usize,
    /// Loop iterations per thread per round.
    pub iterations: usize,
    /// Percentage of the file set that exists at the start.
    pub prealloc_pct: u32,
}

const IO_SIZE: usize = 1 << 20;
const APPEND: u64 = 16 << 10;

impl Personality {
    /// The personalities scaled for `quick` or full runs on a 2-core machine.
    pub fn all(quick: bool) -> Vec<Personality> {
        let q = |full: usize, quick_v: usize| if quick { quick_v } else { full };
        vec![
            Personality {
                kind: Kind::FileServer,
                files: q(2_000, 200),
                mean_size: 128 << 10,
                dir_width: 20,
                threads: 2,
                iterations: q(1_000, 100),
                prealloc_pct: 80,
            },
            Personality {
                kind: Kind::VarMail,
                files: q(1_000, 200),
                mean_size: 16 << 10,
                dir_width: 1_000_000,
                threads: 2,
                iterations: q(2_000, 200),
                prealloc_pct: 80,
            },
            Personality {
                kind: Kind::WebServer,
                files: q(1_000, 200),
                mean_size: 16 << 10,
                dir_width: 20,
                threads: 2,
                iterations: q(1_000, 100),
                prealloc_pct: 100,
            },
            Personality {
                kind: Kind::WebProxy,
                files: q(10_000, 1_000),
                mean_size: 16 << 10,
                dir_width: 1_000_000,
                threads: 2,
                iterations: q(2_000, 200),
                prealloc_pct: 80,
            },
        ]
    }

    fn original(&self) -> &'static str {
        match self.kind {
            Kind::FileServer => "10,000 files of 128 KiB mean, dir width 20, 50 threads, 80 % preallocated",
            Kind::VarMail => "1,000 files of 16 KiB mean, one directory, 16 threads, 80 % preallocated",
            Kind::WebServer => "1,000 files of 16 KiB mean, dir width 20, 100 threads, 100 % preallocated, a log file",
            Kind::WebProxy => "10,000 files of 16 KiB mean, one directory, 100 threads, 80 % preallocated",
        }
    }

    fn flow(&self) -> &'static str {
        match self.kind {
            Kind::FileServer => {
                "create + write whole file + close; open + append 1–16 KiB + close; open + read whole \
                 file + close; delete; stat"
            }
            Kind::VarMail => {
                "delete; create + append 1–16 KiB + fsync + close; open + read whole file + append \
                 1–16 KiB + fsync + close; open + read whole file + close"
            }
            Kind::WebServer => "10 × (open + read whole file + close); append 16 KiB to the shared log",
            Kind::WebProxy => "delete; create + append 1–16 KiB + close; 5 × (open + read whole file + close)",
        }
    }
}

static FB_METRICS: [Metric; 3] = [
    Metric { key: "ops_per_s", label: "flowops", unit: "ops/s", better: Better::Higher },
    Metric { key: "mb_per_s", label: "bandwidth (read + write)", unit: "MB/s", better: Better::Higher },
    Metric { key: "us_per_op", label: "mean latency per flowop", unit: "us", better: Better::Lower },
];

impl Workload for Personality {
    fn name(&self) -> &str {
        match self.kind {
            Kind::FileServer => "fileserver",
            Kind::VarMail => "varmail",
            Kind::WebServer => "webserver",
            Kind::WebProxy => "webproxy",
        }
    }
    fn group(&self) -> &'static str {
        "filebench"
    }
    fn params(&self) -> String {
        format!(
            "{} files of {} KiB mean (uniform in [½, 1½]×mean), {}, {} threads, {} % preallocated, \
             I/O in 1 MiB calls; per thread and round {} iterations of: {} (Filebench's original: {})",
            self.files,
            self.mean_size >> 10,
            if self.dir_width >= self.files {
                "one directory".to_string()
            } else {
                format!("dir width {}", self.dir_width)
            },
            self.threads,
            self.prealloc_pct,
            self.iterations,
            self.flow(),
            self.original()
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &FB_METRICS
    }
    fn accounting(&self) -> Accounting {
        Accounting::PerByte
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let root = format!("/fb-{}", self.name());
        let mut dirs = vec![t.prepare(&root)];
        t.mkdir(&dirs[0])?;
        let ndirs = self.files.div_ceil(self.dir_width);
        if ndirs > 1 {
            for d in 0..ndirs {
                let p = t.prepare(&format!("{root}/d{d:05}"));
                t.mkdir(&p)?;
                dirs.push(p);
            }
        }
        let block = pattern(IO_SIZE);
        let mut rng = ChaCha8Rng::seed_from_u64(0xF11E_BE4C);
        let mut threads: Vec<FbThread> = (0..self.threads)
            .map(|_| FbThread {
                files: Vec::new(),
                present: Vec::new(),
                absent: Vec::new(),
                buf: vec![0u8; IO_SIZE],
                log: None,
                span: (Instant::now(), Instant::now()),
                ops: 0,
                read: 0,
                written: 0,
            })
            .collect();
        for i in 0..self.files {
            let path = if ndirs > 1 {
                t.prepare(&format!("{root}/d{:05}/f{i:06}", i / self.dir_width))
            } else {
                t.prepare(&format!("{root}/f{i:06}"))
            };
            let size = draw_size(&mut rng, self.mean_size);
            let exists = rng.gen_range(0..100) < self.prealloc_pct;
            let th = &mut threads[i % self.threads];
            if exists {
                let f = t.create(&path)?;
                write_whole(t, f, size, &block)?;
                t.close(f)?;
                th.present.push(th.files.len());
            } else {
                th.absent.push(th.files.len());
            }
            th.files.push((path, if exists { size } else { 0 }));
        }
        let log_path = t.prepare(&format!("{root}/log"));
        if self.kind == Kind::WebServer {
            let f = t.open(&log_path, true)?;
            t.close(f)?;
            for th in &mut threads {
                th.log = Some(t.open(&log_path, false)?);
            }
        }
        Ok(Some(Box::new(FbRun {
            t,
            kind: self.kind,
            mean_size: self.mean_size,
            iterations: self.iterations,
            threads,
            dirs,
            log_path,
            log_end: AtomicU64::new(0),
            block,
        })))
    }
}

fn draw_size(rng: &mut ChaCha8Rng, mean: u64) -> u64 {
    rng.gen_range(mean / 2..mean * 3 / 2)
}

fn write_whole(t: &dyn Target, f: FileId, size: u64, block: &[u8]) -> io::Result<u64> {
    let mut off = 0;
    while off < size {
        let n = (IO_SIZE as u64).min(size - off) as usize;
        t.pwrite(f, &block[..n], off)?;
        off += n as u64;
    }
    Ok(size)
}

struct FbThread {
    /// This thread's files: path and current size (0 when absent).
    files: Vec<(TPath, u64)>,
    present: Vec<usize>,
    absent: Vec<usize>,
    buf: Vec<u8>,
    log: Option<FileId>,
    span: (Instant, Instant),
    ops: u64,
    read: u64,
    written: u64,
}

struct FbRun<'t> {
    t: &'t dyn Target,
    kind: Kind,
    mean_size: u64,
    iterations: usize,
    threads: Vec<FbThread>,
    dirs: Vec<TPath>,
    log_path: TPath,
    log_end: AtomicU64,
    block: Vec<u8>,
}

/// What one thread shares with the others during a round.
struct Shared<'a> {
    t: &'a dyn Target,
    kind: Kind,
    mean_size: u64,
    iterations: usize,
    block: &'a [u8],
    log_end: &'a AtomicU64,
}

impl FbThread {
    fn pick(rng: &mut ChaCha8Rng, from: &mut Vec<usize>) -> usize {
        let k = rng.gen_range(0..from.len());
        from.swap_remove(k)
    }

    /// readwholefile on an open file: one flowop.
    fn read_fd(&mut self, t: &dyn Target, f: FileId, i: usize) -> io::Result<()> {
        let size = self.files[i].1;
        let mut off = 0;
        while off < size {
            let n = (IO_SIZE as u64).min(size - off) as usize;
            t.pread(f, &mut self.buf[..n], off)?;
            off += n as u64;
        }
        self.read += size;
        self.ops += 1;
        Ok(())
    }

    /// openfile + readwholefile + closefile: three flowops.
    fn read_whole(&mut self, t: &dyn Target, i: usize) -> io::Result<()> {
        let f = t.open(&self.files[i].0, false)?;
        self.read_fd(t, f, i)?;
        t.close(f)?;
        self.ops += 2;
        Ok(())
    }

    fn append_rand(&mut self, s: &Shared, rng: &mut ChaCha8Rng, f: FileId, i: usize) -> io::Result<()> {
        let n = rng.gen_range(1..=APPEND) as usize;
        s.t.pwrite(f, &s.block[..n], self.files[i].1)?;
        self.files[i].1 += n as u64;
        self.written += n as u64;
        self.ops += 1;
        Ok(())
    }

    /// Delete a random present file.
    fn delete(&mut self, s: &Shared, rng: &mut ChaCha8Rng) -> io::Result<()> {
        let i = Self::pick(rng, &mut self.present);
        s.t.unlink(&self.files[i].0)?;
        self.files[i].1 = 0;
        self.absent.push(i);
        self.ops += 1;
        Ok(())
    }

    /// Create a random absent file; returns it open.
    fn create(&mut self, s: &Shared, rng: &mut ChaCha8Rng) -> io::Result<(usize, FileId)> {
        let i = Self::pick(rng, &mut self.absent);
        let f = s.t.create(&self.files[i].0)?;
        self.present.push(i);
        self.ops += 1;
        Ok((i, f))
    }

    fn random_present(&self, rng: &mut ChaCha8Rng) -> usize {
        self.present[rng.gen_range(0..self.present.len())]
    }

    fn run(&mut self, s: &Shared, seed: u64) -> io::Result<()> {
        let t = s.t;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (self.ops, self.read, self.written) = (0, 0, 0);
        let start = Instant::now();
        for _ in 0..s.iterations {
            match s.kind {
                Kind::FileServer => {
                    let (i, f) = self.create(s, &mut rng)?;
                    let size = draw_size(&mut rng, s.mean_size);
                    self.written += write_whole(t, f, size, s.block)?;
                    self.files[i].1 = size;
                    t.close(f)?;
                    let j = self.random_present(&mut rng);
                    let f = t.open(&self.files[j].0, false)?;
                    self.append_rand(s, &mut rng, f, j)?;
                    t.close(f)?;
                    let k = self.random_present(&mut rng);
                    self.read_whole(t, k)?;
                    self.delete(s, &mut rng)?;
                    let m = self.random_present(&mut rng);
                    t.stat(&self.files[m].0)?;
                    self.ops += 5; // writewholefile, close, open, close, stat
                }
                Kind::VarMail => {
                    self.delete(s, &mut rng)?;
                    let (i, f) = self.create(s, &mut rng)?;
                    self.append_rand(s, &mut rng, f, i)?;
                    t.fsync(f)?;
                    t.close(f)?;
                    let j = self.random_present(&mut rng);
                    let f = t.open(&self.files[j].0, false)?;
                    self.read_fd(t, f, j)?;
                    self.append_rand(s, &mut rng, f, j)?;
                    t.fsync(f)?;
                    t.close(f)?;
                    let k = self.random_present(&mut rng);
                    self.read_whole(t, k)?;
                    self.ops += 5; // fsync, close, open, fsync, close
                }
                Kind::WebServer => {
                    for _ in 0..10 {
                        let i = self.random_present(&mut rng);
                        self.read_whole(t, i)?;
                    }
                    let off = s.log_end.fetch_add(APPEND, Ordering::Relaxed);
                    t.pwrite(self.log.expect("log open"), &s.block[..APPEND as usize], off)?;
                    self.written += APPEND;
                    self.ops += 1;
                }
                Kind::WebProxy => {
                    self.delete(s, &mut rng)?;
                    let (i, f) = self.create(s, &mut rng)?;
                    self.append_rand(s, &mut rng, f, i)?;
                    t.close(f)?;
                    self.ops += 1;
                    for _ in 0..5 {
                        let j = self.random_present(&mut rng);
                        self.read_whole(t, j)?;
                    }
                }
            }
        }
        self.span = (start, Instant::now());
        Ok(())
    }
}

impl Prepared for FbRun<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let shared = Shared {
            t: self.t,
            kind: self.kind,
            mean_size: self.mean_size,
            iterations: self.iterations,
            block: &self.block,
            log_end: &self.log_end,
        };
        // Pinned new threads, released together (`threads.rs`).
        let s = &shared;
        let jobs: Vec<_> = self
            .threads
            .iter_mut()
            .enumerate()
            .map(|(k, th)| move || th.run(s, seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9)))
            .collect();
        crate::threads::run_together(jobs)?;
        let begin = self.threads.iter().map(|s| s.span.0).min().unwrap();
        let end = self.threads.iter().map(|s| s.span.1).max().unwrap();
        let secs = (end - begin).as_secs_f64();
        let ops: u64 = self.threads.iter().map(|s| s.ops).sum();
        let bytes: u64 = self.threads.iter().map(|s| s.read + s.written).sum();
        let busy: f64 = self.threads.iter().map(|s| (s.span.1 - s.span.0).as_secs_f64()).sum();
        Ok(RunOut {
            values: vec![ops as f64 / secs, bytes as f64 / secs / 1e6, busy * 1e6 / ops as f64],
            bytes_written: self.threads.iter().map(|s| s.written).sum(),
            ops,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        let t = self.t;
        for th in &self.threads {
            if let Some(f) = th.log {
                t.close(f)?;
            }
            for &i in &th.present {
                t.unlink(&th.files[i].0)?;
            }
        }
        if self.kind == Kind::WebServer {
            t.unlink(&self.log_path)?;
        }
        for d in self.dirs.iter().rev() {
            t.rmdir(d)?;
        }
        Ok(())
    }
}
