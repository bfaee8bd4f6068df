//! A pool aged to 95 % full (issue 14): does random-write throughput hold
//! up once the pool is nearly full and has been churned by creates,
//! deletes and overwrites, with log GC and compaction running?
//!
//! Ferrite only: the workload formats a pool of its own (so that it knows
//! and controls how full it is) with the library, next to the target's.
//! Each round:
//!
//! 1. **Empty.** A fresh pool holds only the working set (files of 1 MiB,
//!    `working_mib` in all); random 4 KiB overwrites of the working set run
//!    for `empty_secs`. The same is measured again on a fresh pool after
//!    step 3, and the baseline is the mean of the two, so that a steady
//!    drift of the machine's speed over the minutes between cancels.
//! 2. **Aging** (untimed; reported). Files of 16 KiB–4 MiB are created and
//!    written in 64 KiB calls until the pool is 95 % full, then the pool is
//!    churned at that level for `churn_factor` × its capacity in bytes
//!    written: random overwrites (4 KiB–256 KiB) of random aged files, and
//!    deletes of random aged files followed by new ones, so free space ends
//!    up scattered and the logs long.
//! 3. **Aged.** The same random 4 KiB overwrites of the same working set
//!    run for `aged_secs`, timed in intervals of `interval_secs`. Fullness
//!    stays at 95 %: an overwrite frees the page it replaces.
//!
//! Reported: both throughputs, their ratio (the goal: the aged one at
//! least 0.95 of the empty one), the slowest interval and the last tenth
//! of the aged phase against the empty throughput, the empty throughput
//! after over before (the drift), log pages collected and compactions per
//! 1,000 writes in the aged phase, and how full the pool was. The measurement is ten
//! minutes of aged writes: `--workloads aging` runs that (full mode); the
//! quick mode runs seconds, for the smoke test.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrite::{FormatOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scratch::{unique_path, Scratch};
use crate::target::Target;
use crate::workload::{pattern, pattern_at, Better, Metric, Prepared, RunOut, Workload};

/// The group `--workloads aging` selects; not part of `all`.
pub const GROUP: &str = "aging";

/// Fullness the aging phase reaches and keeps (percent of the data pages).
const FULL_PCT: u64 = 95;
/// Working-set file size.
const WORKING_FILE_BYTES: u64 = 1 << 20;
const IO: usize = 4096;
/// Aged files are written in calls of this size.
const FILL_CALL_BYTES: usize = 64 << 10;

pub struct Aging {
    pub pool_mib: u64,
    pub working_mib: u64,
    pub empty_secs: f64,
    pub aged_secs: f64,
    pub interval_secs: f64,
    /// Bytes written while churning at 95 %, as a multiple of the pool.
    pub churn_factor: f64,
    /// Where the aging pool lives (the run's `--pool-dir`, by default `--dir`).
    pub dir: PathBuf,
}

impl Aging {
    pub fn new(quick: bool, dir: &Path) -> Aging {
        if quick {
            Aging {
                pool_mib: 64,
                working_mib: 8,
                empty_secs: 0.5,
                aged_secs: 1.0,
                interval_secs: 0.25,
                churn_factor: 0.5,
                dir: dir.to_path_buf(),
            }
        } else {
            Aging {
                pool_mib: 1024,
                working_mib: 64,
                empty_secs: 30.0,
                aged_secs: 600.0,
                interval_secs: 10.0,
                churn_factor: 2.0,
                dir: dir.to_path_buf(),
            }
        }
    }
}

static AGING_METRICS: [Metric; 9] = [
    Metric { key: "empty_ops_per_s", label: "random 4 KiB writes, empty pool", unit: "ops/s", better: Better::Higher },
    Metric {
        key: "aged_ops_per_s",
        label: "random 4 KiB writes, pool aged to 95 % full",
        unit: "ops/s",
        better: Better::Higher,
    },
    Metric { key: "aged_over_empty", label: "aged / empty throughput", unit: "x", better: Better::Higher },
    Metric {
        key: "worst_interval_over_empty",
        label: "slowest aged interval / empty throughput",
        unit: "x",
        better: Better::Higher,
    },
    Metric {
        key: "last_tenth_over_empty",
        label: "last tenth of the aged phase / empty throughput",
        unit: "x",
        better: Better::Higher,
    },
    Metric {
        key: "empty_drift",
        label: "empty pool after / before the aged phase (machine drift)",
        unit: "x",
        better: Better::Higher,
    },
    Metric {
        key: "gc_pages_per_kop",
        label: "log pages collected per 1,000 aged writes",
        unit: "pages",
        better: Better::Lower,
    },
    Metric {
        key: "compactions_per_kop",
        label: "log compactions per 1,000 aged writes",
        unit: "",
        better: Better::Lower,
    },
    Metric { key: "full_pct", label: "pool fullness during the aged writes", unit: "%", better: Better::Higher },
];

impl Workload for Aging {
    fn name(&self) -> &str {
        "aging"
    }
    fn group(&self) -> &'static str {
        GROUP
    }
    fn params(&self) -> String {
        format!(
            "a Ferrite pool of {pool} MiB of its own: a {ws} MiB working set (files of 1 MiB) written with random \
             4 KiB overwrites for {e} s on the empty pool (and again on a fresh pool after the aged phase; the \
             baseline is the mean of the two); then aged (untimed): files of 16 KiB–4 MiB created \
             (64 KiB calls) to {full} % full, then churned at that level for {churn}× the pool in bytes (random \
             4 KiB–256 KiB overwrites of aged files, deletes and new files); then the same working-set writes \
             for {a} s, timed in {i} s intervals; 1 thread",
            pool = self.pool_mib,
            ws = self.working_mib,
            e = self.empty_secs,
            full = FULL_PCT,
            churn = self.churn_factor,
            a = self.aged_secs,
            i = self.interval_secs,
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        &AGING_METRICS
    }
    fn warm_up(&self) -> bool {
        // Every run formats a fresh pool: there is nothing to warm, and a
        // warm-up pass would take as long as the measured one.
        false
    }
    fn applies_to(&self, t: &dyn Target) -> Result<(), String> {
        if t.name() == "ferrite" {
            Ok(())
        } else {
            Err("the aging workload formats and fills a Ferrite pool of its own (strict mode)".into())
        }
    }
    fn prepare<'t>(&self, _t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        Ok(Some(Box::new(AgingRun {
            w: self.clone_params(),
            pool: Scratch::new(unique_path(&self.dir, "aging.pool")),
        })))
    }
}

impl Aging {
    fn clone_params(&self) -> Aging {
        Aging { dir: self.dir.clone(), ..*self }
    }
}

struct AgingRun {
    w: Aging,
    pool: Scratch,
}

/// The pool's data pages in use, in percent.
fn full_pct(fs: &Session) -> io::Result<f64> {
    let s = fs.statfs()?;
    Ok(100.0 * (s.blocks - s.blocks_free) as f64 / s.blocks as f64)
}

/// Bytes a new aged file may take without bringing the pool above
/// `FULL_PCT`. A file of up to 4 MiB started just below the mark would
/// otherwise end far above it: in the quick mode's 64 MiB pool one such
/// file took the pool from 95 % to 99.98 % full, and the aged phase's
/// overwrites then ran out of room (a copy-on-write overwrite needs its
/// new page, and its log room and compaction, before the old page is
/// freed), which is ENOSPC and no measurement.
fn room_below_full(fs: &Session) -> io::Result<u64> {
    let s = fs.statfs()?;
    let cap = s.blocks * FULL_PCT / 100;
    Ok(cap.saturating_sub(s.blocks - s.blocks_free) * s.block_size as u64)
}

/// Random 4 KiB overwrites of the working set for `secs`, in intervals of
/// `interval` seconds: (writes, seconds) of each interval.
fn write_for(
    fs: &Session,
    fds: &[ferrite::Fd],
    block: &[u8],
    rng: &mut ChaCha8Rng,
    secs: f64,
    interval: f64,
) -> io::Result<Vec<(u64, f64)>> {
    let slots = WORKING_FILE_BYTES / IO as u64;
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t0 = Instant::now();
        let stop = t0 + Duration::from_secs_f64(interval);
        let mut n = 0u64;
        // Check the clock every 256 writes, not on every one.
        while Instant::now() < stop {
            for _ in 0..256 {
                let fd = fds[rng.gen_range(0..fds.len())];
                let off = rng.gen_range(0..slots) * IO as u64;
                fs.pwrite(fd, pattern_at(block, off, IO), off)?;
                n += 1;
            }
        }
        out.push((n, t0.elapsed().as_secs_f64()));
    }
    Ok(out)
}

/// Writes per second over all intervals, and of the slowest one.
fn rates(intervals: &[(u64, f64)]) -> (f64, f64, u64) {
    let n: u64 = intervals.iter().map(|i| i.0).sum();
    let secs: f64 = intervals.iter().map(|i| i.1).sum();
    let worst = intervals.iter().map(|i| i.0 as f64 / i.1).fold(f64::INFINITY, f64::min);
    (n as f64 / secs, worst, n)
}

/// Write a new aged file of `len` bytes in 64 KiB calls.
fn write_file(fs: &Session, path: &[u8], len: u64, block: &[u8]) -> io::Result<()> {
    let fd = fs.open(path, OpenFlags::RDWR.create().excl(), 0o644)?;
    let mut at = 0;
    while at < len {
        let n = (len - at).min(FILL_CALL_BYTES as u64) as usize;
        fs.pwrite(fd, pattern_at(block, at, n), at)?;
        at += n as u64;
    }
    fs.close(fd)?;
    Ok(())
}

impl AgingRun {
    /// A freshly formatted pool (faulted in whole first, as for the other
    /// Ferrite targets) holding only the working set, opened.
    fn fresh_pool(&self, block: &[u8]) -> io::Result<(Session, Vec<ferrite::Fd>)> {
        let pmem = Pmem::create_file(self.pool.path(), self.w.pool_mib << 20, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", self.pool.path().display())))?;
        pmem.wait_populated();
        let fs = Session::format(pmem, &FormatOptions::default()).map_err(io::Error::other)?;
        fs.mkdir(b"/w", 0o755)?;
        let files = (self.w.working_mib << 20) / WORKING_FILE_BYTES;
        let mut fds = Vec::new();
        for i in 0..files {
            let p = format!("/w/f{i:04}");
            write_file(&fs, p.as_bytes(), WORKING_FILE_BYTES, block)?;
            fds.push(fs.open(p.as_bytes(), OpenFlags::RDWR, 0)?);
        }
        Ok((fs, fds))
    }
}

impl Prepared for AgingRun {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let w = &self.w;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa9e);
        let block = pattern(4 << 20);
        let pool_len = w.pool_mib << 20;
        // The empty-pool throughput is measured before the aging and again
        // after the aged phase, on a fresh pool each time, and the two are
        // averaged: the aged phase lasts minutes on a machine whose speed
        // drifts, and bracketing it cancels a steady drift.
        let (fs, fds) = self.fresh_pool(&block)?;
        let (empty_before, _, empty_n) = rates(&write_for(&fs, &fds, &block, &mut rng, w.empty_secs, w.empty_secs)?);
        let fs_engine = fs.engine().clone();
        fs.mkdir(b"/a", 0o755)?;

        // Aging: fill to 95 %, then churn at that level.
        let mut aged: Vec<(u64, u64)> = Vec::new(); // (id, len)
        let mut next_id = 0u64;
        // 16 KiB to 4 MiB, and never past the fullness mark (None: no room
        // for the smallest).
        let size = |rng: &mut ChaCha8Rng, room: u64| -> Option<u64> {
            let len = (rng.gen_range(4..=1024u64) * 4096).min(room / 4096 * 4096);
            (len >= 4 * 4096).then_some(len)
        };
        let path = |id: u64| format!("/a/f{id:08}");
        while full_pct(&fs)? < FULL_PCT as f64 {
            let Some(len) = size(&mut rng, room_below_full(&fs)?) else { break };
            match write_file(&fs, path(next_id).as_bytes(), len, &block) {
                Ok(()) => aged.push((next_id, len)),
                // The last file may not fit: what it got so far is freed.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    let _ = fs.unlink(path(next_id).as_bytes());
                    break;
                }
                Err(e) => return Err(e),
            }
            next_id += 1;
        }
        let churn_bytes = (w.churn_factor * pool_len as f64) as u64;
        let mut churned = 0u64;
        while churned < churn_bytes && !aged.is_empty() {
            if rng.gen_bool(0.75) {
                // A random overwrite of 4 KiB–256 KiB inside an aged file.
                let (id, len) = aged[rng.gen_range(0..aged.len())];
                let n = (rng.gen_range(1..=64u64) * 4096).min(len);
                let off = rng.gen_range(0..=(len - n) / 4096) * 4096;
                let fd = fs.open(path(id).as_bytes(), OpenFlags::RDWR, 0)?;
                let r = fs.pwrite(fd, pattern_at(&block, off, n as usize), off);
                fs.close(fd)?;
                match r {
                    Ok(_) => churned += n,
                    Err(e) if e == ferrite::Errno::ENOSPC => {}
                    Err(e) => return Err(e.into()),
                }
            } else {
                // Delete a random aged file, then make new ones while room lasts.
                let k = rng.gen_range(0..aged.len());
                let (id, _) = aged.swap_remove(k);
                fs.unlink(path(id).as_bytes())?;
                while full_pct(&fs)? < FULL_PCT as f64 {
                    let Some(len) = size(&mut rng, room_below_full(&fs)?) else { break };
                    match write_file(&fs, path(next_id).as_bytes(), len, &block) {
                        Ok(()) => {
                            aged.push((next_id, len));
                            churned += len;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                            let _ = fs.unlink(path(next_id).as_bytes());
                            next_id += 1;
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                    next_id += 1;
                }
            }
        }
        let full = full_pct(&fs)?;

        // Aged: the same writes, timed in intervals.
        let gc0 = fs_engine.gc_pages_collected();
        let compact0 = fs_engine.log_compactions();
        let intervals = write_for(&fs, &fds, &block, &mut rng, w.aged_secs, w.interval_secs)?;
        let (aged_rate, worst, aged_n) = rates(&intervals);
        // The last tenth of the aged phase (the last minute of ten): has the
        // throughput drifted down as GC kept up with a full pool?
        let tail = (intervals.len() / 10).max(1);
        let (last_rate, _, _) = rates(&intervals[intervals.len() - tail..]);
        let gc = fs_engine.gc_pages_collected() - gc0;
        let compactions = fs_engine.log_compactions() - compact0;
        for fd in fds {
            fs.close(fd)?;
        }
        drop(fs_engine);
        fs.unmount().map_err(io::Error::from)?;
        let (fs, fds) = self.fresh_pool(&block)?;
        let (empty_after, _, empty_after_n) =
            rates(&write_for(&fs, &fds, &block, &mut rng, w.empty_secs, w.empty_secs)?);
        for fd in fds {
            fs.close(fd)?;
        }
        fs.unmount().map_err(io::Error::from)?;
        let empty = (empty_before + empty_after) / 2.0;
        let kops = (aged_n as f64 / 1000.0).max(1e-9);
        Ok(RunOut {
            values: vec![
                empty,
                aged_rate,
                aged_rate / empty,
                worst / empty,
                last_rate / empty,
                empty_after / empty_before,
                gc as f64 / kops,
                compactions as f64 / kops,
                full,
            ],
            bytes_written: (empty_n + aged_n + empty_after_n) * IO as u64,
            ops: empty_n + aged_n + empty_after_n,
        })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> Option<String> {
        Some(format!("aging pool {}", self.pool.path().display()))
    }
}
