//! ferrite-bench: Ferrite measured side by side with what a user would use
//! instead, in one process, targets interleaved round by round.
//!
//! Structure: `target` (what is measured: Ferrite library, kernel
//! directories, the hardware limit), `workload` (what is done, written once
//! against the `Target` trait), `report` (table and CSV). See
//! docs/BENCHMARKS.md for how to run it and what the figures mean.

mod fuse;
mod report;
mod scratch;
mod stats;
mod target;
mod workload;

use std::io;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use clap::Parser;

use report::WorkloadResult;
use target::{FerriteLib, HwLimit, PosixDir, Target};
use workload::{CreateUnlink, Prepared, RandIo, Workload};

#[derive(Parser, Debug)]
#[command(name = "ferrite-bench", about = "Benchmark Ferrite against tmpfs and the hardware limit, side by side")]
struct Args {
    /// Short run (CI): fewer ops and rounds, well under a minute.
    #[arg(long)]
    quick: bool,
    /// Also write every per-round figure as CSV rows to this file.
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
    /// Measured rounds per workload and target (default 5, quick 2).
    #[arg(long)]
    rounds: Option<usize>,
    /// Where pools and scratch directories go (must be tmpfs for the
    /// "tmpfs" target to mean what it says).
    #[arg(long, default_value = "/dev/shm", value_name = "DIR")]
    dir: PathBuf,
    /// Targets to run, comma-separated (ferrite,tmpfs,hw-limit; also fuse and
    /// fuse-direct: Ferrite through its FUSE mount, with the kernel page
    /// cache or with direct_io; they need root and /dev/fuse).
    #[arg(long, value_delimiter = ',', default_value = "ferrite,tmpfs,hw-limit")]
    targets: Vec<String>,
    /// Workloads to run, comma-separated (randwrite-4k,randread-4k,create-unlink).
    #[arg(long, value_delimiter = ',', default_value = "randwrite-4k,randread-4k,create-unlink")]
    workloads: Vec<String>,
    /// Seed of every random choice (offsets).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Ferrite pool size in MiB.
    #[arg(long, default_value_t = 1024)]
    pool_mib: u64,
    /// Pin the process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

const FILE_SIZE: u64 = 64 << 20;
const BLOCK: usize = 4096;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("ferrite-bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> io::Result<()> {
    let mode = if args.quick { "quick" } else { "full" };
    let rounds = args.rounds.unwrap_or(if args.quick { 2 } else { 5 }).max(1);
    let (io_ops, files) = if args.quick { (50_000, 2_000) } else { (200_000, 10_000) };
    if let Some(cpu) = args.cpu {
        pin_to_cpu(cpu)?;
    }

    let all: Vec<Box<dyn Workload>> = vec![
        Box::new(RandIo { write: true, file_size: FILE_SIZE, block: BLOCK, ops: io_ops }),
        Box::new(RandIo { write: false, file_size: FILE_SIZE, block: BLOCK, ops: io_ops }),
        Box::new(CreateUnlink { n: files }),
    ];
    for w in &args.workloads {
        if !all.iter().any(|x| x.name() == w) {
            return Err(io::Error::other(format!("unknown workload {w:?}")));
        }
    }
    let workloads: Vec<&dyn Workload> =
        all.iter().map(|w| w.as_ref()).filter(|w| args.workloads.iter().any(|n| n == w.name())).collect();

    for stale in scratch::remove_stale(&args.dir) {
        eprintln!("ferrite-bench: removed {} (left by a killed run)", stale.display());
    }
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    for name in &args.targets {
        targets.push(match name.as_str() {
            "ferrite" => Box::new(FerriteLib::new(&args.dir, args.pool_mib << 20)?),
            "tmpfs" => Box::new(PosixDir::new("tmpfs", &args.dir)?),
            "fuse" => Box::new(fuse::FuseMount::new(&args.dir, args.pool_mib << 20, false)?),
            "fuse-direct" => Box::new(fuse::FuseMount::new(&args.dir, args.pool_mib << 20, true)?),
            "hw-limit" => Box::new(HwLimit::new(&args.dir, FILE_SIZE, 2)?),
            other => return Err(io::Error::other(format!("unknown target {other:?}"))),
        });
    }

    println!("# ferrite-bench ({mode} mode)\n");
    println!("- command: `{}`", command_line());
    println!("- date: {}", utc_now());
    println!("- machine: {}", machine());
    println!("- load average at start: {}", loadavg());
    println!(
        "- rounds: {rounds} measured per workload and target, after 1 untimed warm-up pass; \
         targets interleaved (round r starts at target r mod {}); seed {}",
        targets.len(),
        args.seed
    );
    println!(
        "- timer: one `Instant::now()` costs {:.1} ns here (included in every per-op latency)",
        stats::instant_overhead_ns()
    );
    println!("- targets:");
    for t in &targets {
        println!("  - `{}`: {}", t.name(), t.describe());
    }
    println!("- workloads:");
    for w in &workloads {
        println!("  - `{}`: {}", w.name(), w.params());
    }
    println!();

    let started = Instant::now();
    let mut results = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        results.push(run_workload(*w, &targets, rounds, args.seed, wi as u64)?);
    }
    for t in targets {
        t.finish()?;
    }

    println!("{}", report::markdown_table(&results));
    println!(
        "Medians over {rounds} rounds in bold, min–max across rounds in parentheses. \
         Ratio columns: > 1 means Ferrite is better — for ops/s it is ferrite/other, \
         for latencies it is the speedup other_time/ferrite_time (computed per round, \
         then median and range)."
    );
    println!(
        "\ntotal wall time {:.1} s; load average at end: {} (other processes on the \
         machine show up as load above ~1 and as wide min–max ranges)",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    if let Some(path) = &args.csv {
        report::write_csv(path, mode, &results)?;
        println!("CSV written to {}", path.display());
    }
    Ok(())
}

/// Prepare `w` on every target, warm up each once, then `rounds` measured
/// rounds with the targets interleaved, then clean up.
fn run_workload(
    w: &dyn Workload,
    targets: &[Box<dyn Target>],
    rounds: usize,
    seed: u64,
    wi: u64,
) -> io::Result<WorkloadResult> {
    let ctx = |t: &dyn Target, what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{} on {} ({what}): {e}", w.name(), t.name()))
    };
    let mut prepared: Vec<Box<dyn Prepared + '_>> = Vec::new();
    for t in targets {
        prepared.push(w.prepare(t.as_ref()).map_err(|e| ctx(t.as_ref(), "setup", e))?);
    }
    // Seeds: the same offsets on every target in a round, others per round.
    let seed_of = |round: u64| seed ^ (wi << 32) ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for (t, p) in targets.iter().zip(prepared.iter_mut()) {
        p.run(seed_of(u64::MAX)).map_err(|e| ctx(t.as_ref(), "warm-up", e))?;
    }
    let n = targets.len();
    let mut values = vec![Vec::with_capacity(rounds); n];
    for r in 0..rounds {
        for k in 0..n {
            let i = (r + k) % n;
            let v = prepared[i].run(seed_of(r as u64)).map_err(|e| ctx(targets[i].as_ref(), "measure", e))?;
            values[i].push(v);
        }
        eprintln!("  {}: round {}/{} done", w.name(), r + 1, rounds);
    }
    for (t, p) in targets.iter().zip(prepared) {
        p.cleanup().map_err(|e| ctx(t.as_ref(), "cleanup", e))?;
    }
    Ok(WorkloadResult {
        name: w.name(),
        params: w.params(),
        metrics: w.metrics(),
        targets: targets.iter().map(|t| t.name().to_string()).collect(),
        values,
    })
}

fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET bounds-checks nothing,
    // so `cpu` is checked against the set size first.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::other(format!("cpu {cpu} out of range")));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// "N CPUs, MODEL, Linux RELEASE".
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{cpus} CPUs, {model}, Linux {release}")
}

/// The current time as "YYYY-MM-DD HH:MM UTC".
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}
