//! ferrite-bench: Ferrite measured side by side with what a user would use
//! instead, in one process, targets interleaved round by round.
//!
//! Structure: `target` (what is measured: Ferrite library, kernel
//! directories, the hardware limit), `ext4` and `fuse` (mounted targets),
//! `workload` and `filebench` (what is done, written once against the
//! `Target` trait), `tree` (real programs copying a real tree into the
//! kernel-visible targets, with FUSE requests counted by kind), `zerocopy`
//! (issue 12: peek and patch against pread and pwrite, and a file server's
//! send path), `buffered` (issue 13: each operation kind in bursts and
//! sustained, with the buffered persister's figures), `report` (tables,
//! CSV, JSON, summary against the goals) and `plot` (SVG). See docs/BENCHMARKS.md for how to run it and what the
//! figures mean.

mod aging;
mod buffered;
mod ext4;
mod filebench;
mod fuse;
mod plot;
mod preload;
mod report;
mod scaling;
mod scratch;
mod stats;
mod target;
mod threads;
mod tree;
mod workload;
mod zerocopy;

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use clap::Parser;

use report::{AcctOut, WorkloadResult};
use target::{FerriteLib, HwLimit, PosixDir, Target};
use workload::{Accounting, DirOps, Fio, Lookup, NovaMicro, Prepared, Publish, ReadOffset, Remount, Workload};

#[derive(Parser, Debug)]
#[command(
    name = "ferrite-bench",
    about = "Benchmark Ferrite against tmpfs, ext4 and the hardware limit, side by side",
    after_help = "Workload groups: fio, sizes, fsync, atomic, mix, threads, meta, filebench, remount (or `all`);\n\
                  tree (cp -a, tar x, rm -rf of FERRITE_BENCH_TREE, default /usr/share; not in `all`);\n\
                  zerocopy (issue 12: peek/patch against pread/pwrite by size, random 4 KiB peeks, serving files to a socket; not in `all`);\n\
                  buffered (issue 13: dirops, random 4 KiB writes and appends, in bursts and sustained, with the persister's lag; not in `all`).\n\
                  Targets: ferrite, ferrite-atomic, ferrite-buffered, tmpfs, ext4, ext4-journal, hw-limit, fuse, fuse-dev, fuse-direct, preload."
)]
struct Args {
    /// Short run (CI smoke test): scaled-down counts, 2 rounds, under 2 minutes.
    #[arg(long)]
    quick: bool,
    /// Write results.md, results.csv, results.json and the SVG plots to this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Also write every per-round figure as CSV rows to this file.
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Also write the SVG plots to this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Measured rounds per workload and target (default 5, quick 2).
    #[arg(long)]
    rounds: Option<usize>,
    /// Where pools, images and scratch directories go (must be tmpfs for
    /// the "tmpfs" target to mean what it says).
    #[arg(long, default_value = "/dev/shm", value_name = "DIR")]
    dir: PathBuf,
    /// Where the pools of the Ferrite targets (library, buffered, FUSE,
    /// preload), of the remount and aging workloads, and the hw-limit area
    /// go; the rest stays in `--dir` (default: `--dir`). For a pool on a
    /// tmpfs mounted `huge=always`, mapped with 2 MiB pages as a DAX pool
    /// is (docs/BENCHMARKS.md, "Idle memory and the pool's page size").
    #[arg(long, value_name = "DIR")]
    pool_dir: Option<PathBuf>,
    /// Targets, comma-separated. ext4 and ext4-journal need root (skipped
    /// with a message otherwise); fuse, fuse-dev and fuse-direct need root and /dev/fuse;
    /// preload needs libferrite.so (`cargo build --release -p ferrite-c`).
    #[arg(long, value_delimiter = ',', default_value = "ferrite,tmpfs,ext4,ext4-journal,hw-limit")]
    targets: Vec<String>,
    /// Workloads or groups of workloads, comma-separated (`--list` shows them).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    workloads: Vec<String>,
    /// List the workloads with their parameters and exit.
    #[arg(long)]
    list: bool,
    /// Seed of every random choice (offsets, names, sizes).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Ferrite pool size in MiB (default 2048, quick 512).
    #[arg(long)]
    pool_mib: Option<u64>,
    /// Size of each ext4 image in MiB (sparse in /dev/shm).
    #[arg(long, default_value_t = 4096)]
    ext4_mib: u64,
    /// Skip the untimed accounting pass (write amplification, fences per op):
    /// for profiling, where its recording would swamp the profile.
    #[arg(long)]
    no_accounting: bool,
    /// Pin the process to this CPU (threads of 2-thread workloads too).
    #[arg(long)]
    cpu: Option<usize>,
    /// Internal: run as the preload target's child process (see preload.rs).
    #[arg(long, hide = true)]
    preload_child: bool,
}

/// Counts of one mode.
struct Scale {
    io_ops: usize,
    file_size: u64,
    /// Bytes per round for large write sizes (ops = min(io_ops, this / size)).
    size_budget: u64,
    fsync1_ops: usize,
    fsync10_ops: usize,
    dir_n: usize,
    nova_files: usize,
    lookup_big: usize,
    lookups: usize,
    remount_files: usize,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                io_ops: 20_000,
                file_size: 16 << 20,
                size_budget: 32 << 20,
                fsync1_ops: 1_000,
                fsync10_ops: 5_000,
                dir_n: 2_000,
                nova_files: 500,
                lookup_big: 10_000,
                lookups: 20_000,
                remount_files: 10_000,
            }
        } else {
            Scale {
                io_ops: 200_000,
                file_size: 64 << 20,
                size_budget: 512 << 20,
                fsync1_ops: 10_000,
                fsync10_ops: 50_000,
                dir_n: 10_000,
                nova_files: 10_000,
                lookup_big: 100_000,
                lookups: 200_000,
                remount_files: 100_000,
            }
        }
    }
}

/// The groups left out of `all`: the tree workloads copy a whole real tree
/// (680 MB for /usr/share) a few times per round and target; the zero-copy
/// workloads (issue 12) move 512 MiB per method, round and target, and
/// have their own goals; the buffered workloads (issue 13) time bursts and
/// sustained runs of the operations `all` already has, for buffered mounts.
/// The aging workload (issue 14) fills a pool of its own and writes for
/// ten minutes in full mode.
const NOT_IN_ALL: [&str; 4] = ["tree", zerocopy::GROUP, buffered::GROUP, aging::GROUP];

fn all_workloads(s: &Scale, quick: bool, base: &Path, pool_dir: &Path, pool_len: u64) -> Vec<Box<dyn Workload>> {
    let fio = |name: &str,
               group,
               io_size: usize,
               random,
               read_pct,
               fsync_every,
               threads,
               shared,
               ops: usize|
     -> Box<dyn Workload> {
        Box::new(Fio {
            name: name.to_string(),
            group,
            io_size,
            file_size: s.file_size,
            ops: ops.max(threads),
            random,
            read_pct,
            fsync_every,
            threads,
            shared,
        })
    };
    let by_size = |size: usize| s.io_ops.min((s.size_budget / size as u64) as usize);
    let n = s.io_ops;
    let mut v: Vec<Box<dyn Workload>> = vec![
        fio("seqread-4k", "fio", 4096, false, 100, 0, 1, true, n),
        fio("seqwrite-4k", "fio", 4096, false, 0, 0, 1, true, n),
        fio("randread-4k", "fio", 4096, true, 100, 0, 1, true, n),
        fio("randwrite-4k", "fio", 4096, true, 0, 0, 1, true, n),
        Box::new(ReadOffset { file_size: s.file_size, reads: n }),
    ];
    for (name, size) in
        [("randwrite-128", 128), ("randwrite-1k", 1024), ("randwrite-64k", 64 << 10), ("randwrite-2m", 2 << 20)]
    {
        v.push(fio(name, "sizes", size, true, 0, 0, 1, true, by_size(size)));
    }
    for (k, ops) in [(1, s.fsync1_ops), (10, s.fsync10_ops), (100, n), (1000, n)] {
        v.push(fio(&format!("randwrite-4k-fsync{k}"), "fsync", 4096, true, 0, k, 1, true, ops));
    }
    // Issue 10: small random writes with fsync every k writes, for
    // fsync-atomic against strict against the kernel's data=journal.
    for (size_name, size) in [("128", 128usize), ("1k", 1024), ("4k", 4096)] {
        for (k, ops) in [(1, s.fsync1_ops), (10, s.fsync10_ops), (100, n)] {
            let ops = ops.min(by_size(size));
            v.push(fio(&format!("atomic-{size_name}-fsync{k}"), "atomic", size, true, 0, k, 1, true, ops));
        }
    }
    for r in [100, 80, 60, 40, 0] {
        v.push(fio(&format!("mix-{r}-{}", 100 - r), "mix", 4096, true, r, 0, 1, true, n));
    }
    for (name, read, shared) in [
        ("2t-shared-randwrite", 0, true),
        ("2t-private-randwrite", 0, false),
        ("2t-shared-randread", 100, true),
        ("2t-private-randread", 100, false),
    ] {
        v.push(fio(name, "threads", 4096, true, read, 0, 2, shared, n));
    }
    // Issue 14: two threads against one, in the same round.
    v.push(Box::new(scaling::Scaling { writes: n / 2, files: s.dir_n, file_size: s.file_size }));
    v.push(Box::new(DirOps { n: s.dir_n }));
    v.push(Box::new(NovaMicro { files: s.nova_files, appends: 16 }));
    v.push(Box::new(Publish { files: s.dir_n }));
    v.push(Box::new(Lookup { big: s.lookup_big, small: 10, lookups: s.lookups }));
    for p in filebench::Personality::all(quick) {
        v.push(Box::new(p));
    }
    v.push(Box::new(Remount { files: s.remount_files }));
    // Issue 11: real programs on a real tree (selected by name or `tree`).
    // cp-file's file: at most an eighth of the pool, so that it and its
    // copy fit beside what the other workloads leave (--pool-mib may be small).
    let cp_file_bytes = (if quick { 32u64 << 20 } else { 256 << 20 }).min((pool_len / 8) & !((1 << 20) - 1));
    for w in tree::TreeWorkload::all(base, cp_file_bytes) {
        v.push(Box::new(w));
    }
    // Issue 12: zero-copy peek and patch (selected by name or `zerocopy`).
    v.extend(zerocopy::workloads(quick));
    // Issue 13: bursts and sustained runs (selected by name or `buffered`).
    v.extend(buffered::workloads(quick));
    // Issue 14: a pool aged to 95 % full (selected by name or `aging`).
    v.push(Box::new(aging::Aging::new(quick, pool_dir)));
    v
}

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
    let scale = Scale::new(args.quick);
    let pool_len = args.pool_mib.unwrap_or(if args.quick { 512 } else { 2048 }) << 20;
    let pool_dir: &Path = args.pool_dir.as_deref().unwrap_or(&args.dir);
    let all = all_workloads(&scale, args.quick, &args.dir, pool_dir, pool_len);
    let selected = |w: &dyn Workload| {
        args.workloads.iter().any(|n| {
            (n == "all" && !NOT_IN_ALL.contains(&w.group()))
                || n == w.name()
                || n == w.group()
                || (n == "create-unlink" && w.name() == "dirops")
        })
    };
    for n in &args.workloads {
        if n != "all" && n != "create-unlink" && !all.iter().any(|w| w.name() == n || w.group() == n) {
            return Err(io::Error::other(format!("unknown workload or group {n:?} (see --list)")));
        }
    }
    if args.preload_child {
        return preload::serve(&all);
    }
    let workloads: Vec<&dyn Workload> = all.iter().map(|w| w.as_ref()).filter(|w| selected(*w)).collect();
    if args.list {
        for w in &all {
            println!("{} [{}]: {}", w.name(), w.group(), w.params());
        }
        return Ok(());
    }
    if let Some(cpu) = args.cpu {
        pin_to_cpu(cpu)?;
    }

    for msg in ext4::remove_stale(&args.dir) {
        eprintln!("ferrite-bench: {msg} (left by a killed run)");
    }
    for msg in tree::remove_stale(std::process::id()) {
        eprintln!("ferrite-bench: {msg} (left by a killed run)");
    }
    // When both are one directory, the second pass finds nothing left.
    for stale in [args.dir.as_path(), pool_dir].into_iter().flat_map(scratch::remove_stale) {
        eprintln!("ferrite-bench: removed {} (left by a killed run)", stale.display());
    }
    let ring = if args.quick { 128 << 20 } else { 512 << 20 };
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for name in &args.targets {
        let t: Box<dyn Target> = match name.as_str() {
            "ferrite" => Box::new(FerriteLib::new(pool_dir, pool_len, ferrite::FileMode::Strict)?),
            "ferrite-atomic" => Box::new(FerriteLib::new(pool_dir, pool_len, ferrite::FileMode::FsyncAtomic)?),
            "ferrite-buffered" => {
                Box::new(FerriteLib::buffered(pool_dir, pool_len, ferrite::BufferedOptions::default())?)
            }
            "tmpfs" => Box::new(PosixDir::new("tmpfs", &args.dir)?),
            "ext4" | "ext4-journal" => {
                if let Some(why) = ext4::unavailable() {
                    let msg = format!("{name}: skipped: {why}");
                    eprintln!("ferrite-bench: {msg}");
                    skipped.push(msg);
                    continue;
                }
                Box::new(ext4::Ext4::new(&args.dir, args.ext4_mib << 20, name == "ext4-journal")?)
            }
            "fuse" => Box::new(fuse::FuseMount::new(pool_dir, pool_len, false, false)?),
            "fuse-direct" => Box::new(fuse::FuseMount::new(pool_dir, pool_len, true, false)?),
            "fuse-dev" => Box::new(fuse::FuseMount::new(pool_dir, pool_len, false, true)?),
            "hw-limit" => Box::new(HwLimit::new(pool_dir, ring)?),
            "preload" => Box::new(preload::PreloadTarget::new(&args.dir, pool_dir, pool_len, args.quick)?),
            other => return Err(io::Error::other(format!("unknown target {other:?}"))),
        };
        targets.push(t);
    }

    let date = utc_now();
    let command = command_line();
    let machine = machine();
    let load_start = loadavg();
    let mut head = String::new();
    let _ = writeln!(head, "# ferrite-bench ({mode} mode)\n");
    let _ = writeln!(head, "- command: `{command}`");
    let _ = writeln!(head, "- date: {date}");
    let _ = writeln!(head, "- machine: {machine}");
    let _ = writeln!(head, "- load average at start: {load_start}");
    let _ = writeln!(
        head,
        "- rounds: {rounds} measured per workload and target, after 1 untimed warm-up pass (none for `aging`), then 1 untimed \
         accounting pass for workloads that write; targets interleaved (round r starts at target r mod {}); seed {}",
        targets.len(),
        args.seed
    );
    let _ = writeln!(
        head,
        "- timer: one `Instant::now()` costs {:.1} ns here (included in every per-op latency)",
        stats::instant_overhead_ns()
    );
    let _ = writeln!(head, "- targets:");
    for t in &targets {
        let _ = writeln!(
            head,
            "  - `{}` (durable on return: {}; media accounting: {}): {}",
            t.name(),
            t.durable(),
            t.accounting_note(),
            t.describe()
        );
    }
    for s in &skipped {
        let _ = writeln!(head, "  - {s}");
    }
    if workloads.iter().any(|w| w.group() == zerocopy::GROUP) {
        let _ = writeln!(head, "- zero-copy calls (issue 12 workloads):");
        for t in &targets {
            let _ = writeln!(head, "  - `{}`: {}", t.name(), t.zero_copy_note());
        }
    }
    let _ = writeln!(head, "- workloads:");
    for w in &workloads {
        let _ = writeln!(head, "  - `{}`: {}", w.name(), w.params());
    }
    print!("{head}");
    println!();

    let started = Instant::now();
    let mut results = Vec::new();
    let mut errors = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        let t0 = Instant::now();
        results.push(run_workload(*w, &targets, rounds, args.seed, wi as u64, !args.no_accounting, &mut errors));
        eprintln!("  {}: {:.1} s", w.name(), t0.elapsed().as_secs_f64());
    }
    let target_info: Vec<(String, String)> = targets.iter().map(|t| (t.name().to_string(), t.describe())).collect();
    for t in targets {
        let name = t.name().to_string();
        if let Err(e) = t.finish() {
            errors.push(format!("{name}: finish: {e}"));
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let load_end = loadavg();

    let mut goals = report::evaluate(&results, args.quick);
    let with_preload = target_info.iter().any(|(t, _)| t == "preload");
    let preload_goals = if with_preload { report::evaluate_preload(&results, args.quick) } else { Vec::new() };
    let with_fuse = target_info.iter().any(|(t, _)| t == "fuse");
    let fuse_goals = if with_fuse { report::evaluate_fuse(&results, args.quick) } else { Vec::new() };
    let with_zerocopy = results.iter().any(|w| w.group == zerocopy::GROUP);
    let zc_goals = if with_zerocopy { report::evaluate_zerocopy(&results, args.quick) } else { Vec::new() };
    let with_buffered = target_info.iter().any(|(t, _)| t == "ferrite-buffered");
    let buffered_goals = if with_buffered { report::evaluate_buffered(&results, args.quick) } else { Vec::new() };
    let with_strict = target_info.iter().any(|(t, _)| t == "ferrite");
    let issue14_goals = if with_strict { report::evaluate_issue14(&results, args.quick) } else { Vec::new() };
    let mut body = String::new();
    let _ = writeln!(body, "## Results\n");
    let _ = writeln!(
        body,
        "Medians over {rounds} rounds in bold, min–max across rounds in parentheses. Ratio columns: \
         > 1 means Ferrite is better — for ops/s and MB/s it is ferrite/other, for times it is the \
         speedup other_time/ferrite_time (computed per round, then median and range). Accounting \
         rows come from one untimed pass with media writes counted; n/a where the target cannot tell."
    );
    body.push_str(&report::markdown_tables(&results));
    // A goal section is left out when none of its workloads ran (a run of
    // the tree workloads alone has nothing to say about issue 4).
    let ran = |gs: &[report::GoalResult]| gs.iter().any(|g| results.iter().any(|w| w.name == g.workload));
    if ran(&goals) {
        let _ = writeln!(body, "\n## Summary against the goals of issue 4\n");
        body.push_str(&report::summary_markdown(&goals));
    }
    if with_preload && ran(&preload_goals) {
        let _ = writeln!(body, "\n## Summary against the goals of issue 9 (preload library)\n");
        body.push_str(&report::summary_markdown(&preload_goals));
    }
    if with_fuse && ran(&fuse_goals) {
        let _ = writeln!(body, "\n## Summary against the goals of issue 11 (FUSE mount)\n");
        body.push_str(&report::summary_markdown(&fuse_goals));
    }
    if with_zerocopy {
        let _ = writeln!(
            body,
            "\n## Zero-copy comparisons (issue 12)\n\nMedians of the per-round ratios (min–max over rounds); > 1 \
             means the first named is faster. Same-target ratios compare methods that took turns within \
             each round."
        );
        body.push_str(&report::zerocopy_markdown(&results));
        if ran(&zc_goals) {
            let _ = writeln!(body, "\n## Summary against the goals of issue 12 (zero-copy peek and patch)\n");
            body.push_str(&report::summary_markdown(&zc_goals));
        }
    }
    if with_buffered && ran(&buffered_goals) {
        let _ = writeln!(body, "\n## Summary against the goals of issue 13 (buffered mode)\n");
        body.push_str(&report::summary_markdown(&buffered_goals));
    }
    if with_strict && ran(&issue14_goals) {
        let _ = writeln!(body, "\n## Summary against the goals of issue 14 (strict mode near the hardware limit)\n");
        body.push_str(&report::summary_markdown(&issue14_goals));
    }
    goals.extend(preload_goals);
    goals.extend(fuse_goals);
    goals.extend(zc_goals);
    goals.extend(buffered_goals);
    goals.extend(issue14_goals);
    if !errors.is_empty() {
        let _ = writeln!(body, "\n## Errors\n");
        for e in &errors {
            let _ = writeln!(body, "- {e}");
        }
    }
    let _ = writeln!(
        body,
        "\ntotal wall time {wall:.1} s; load average at start {load_start}, at end {load_end} (other \
         processes on the machine show up as load above ~1 and as wide min–max ranges)"
    );
    print!("{body}");

    let info = report::RunInfo {
        mode,
        command: &command,
        date: &date,
        machine: &machine,
        load_start: &load_start,
        load_end: &load_end,
        rounds,
        seed: args.seed,
        targets: &target_info,
        skipped: &skipped,
        errors: &errors,
        wall_s: wall,
    };
    let (mut csv, mut json, mut plots) = (args.csv.clone(), args.json.clone(), args.plots.clone());
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("results.md"), format!("{head}\n{body}"))?;
        csv.get_or_insert(out.join("results.csv"));
        json.get_or_insert(out.join("results.json"));
        plots.get_or_insert(out.clone());
    }
    if let Some(p) = &csv {
        report::write_csv(p, mode, &results)?;
        println!("CSV written to {}", p.display());
    }
    if let Some(p) = &json {
        report::write_json(p, &info, &results, &goals)?;
        println!("JSON written to {}", p.display());
    }
    if let Some(d) = &plots {
        let made = plot::write_all(d, &results, &goals)?;
        println!("{} plots written to {}", made.len(), d.display());
    }
    if !errors.is_empty() {
        return Err(io::Error::other(format!("{} workload(s) failed on some target (see Errors)", errors.len())));
    }
    Ok(())
}

/// Prepare `w` on every target, warm up each once, then `rounds` measured
/// rounds with the targets interleaved, then an accounting pass, then
/// clean up. A target that fails is reported and left out of this
/// workload; the run goes on.
fn run_workload(
    w: &dyn Workload,
    targets: &[Box<dyn Target>],
    rounds: usize,
    seed: u64,
    wi: u64,
    accounting: bool,
    errors: &mut Vec<String>,
) -> WorkloadResult {
    let n = targets.len();
    let mut notes = Vec::new();
    let mut fail = |t: &dyn Target, what: &str, e: io::Error, notes: &mut Vec<String>| {
        let msg = format!("{} on {} ({what}): {e}", w.name(), t.name());
        eprintln!("ferrite-bench: {msg}");
        errors.push(msg.clone());
        notes.push(format!("{}: failed ({what}): {e}", t.name()));
    };
    let mut prepared: Vec<Option<Box<dyn Prepared + '_>>> = Vec::new();
    for t in targets {
        if let Err(why) = w.applies_to(t.as_ref()) {
            eprintln!("ferrite-bench: {} on {}: skipped: {why}", w.name(), t.name());
            notes.push(format!("{}: skipped: {why}", t.name()));
            prepared.push(None);
            continue;
        }
        let p = match t.remote() {
            Some(r) => r.prepare_remote(w.name()),
            None => w.prepare(t.as_ref()),
        };
        prepared.push(match p {
            Ok(Some(p)) => {
                if let Some(d) = p.describe() {
                    notes.push(format!("{}: {d}", t.name()));
                }
                Some(p)
            }
            Ok(None) => {
                notes.push(format!("{}: n/a (nothing to remount / not applicable to this target)", t.name()));
                None
            }
            Err(e) => {
                fail(t.as_ref(), "setup", e, &mut notes);
                None
            }
        });
    }
    // Seeds: the same choices on every target in a round, others per round.
    let seed_of = |round: u64| seed ^ (wi << 32) ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut failed = vec![false; n];
    // What a buffered mount's persister did over the warm-up and the
    // measured rounds (issue 13: the lag is reported with every workload).
    let persister_before: Vec<_> = targets
        .iter()
        .map(|t| {
            t.reset_buffered_lag();
            t.buffered().map(|(_, s)| s)
        })
        .collect();
    for i in 0..n {
        if !w.warm_up() {
            break;
        }
        if let Some(p) = prepared[i].as_mut() {
            if let Err(e) = p.run(seed_of(u64::MAX)).and_then(|_| settle(targets[i].as_ref())) {
                fail(targets[i].as_ref(), "warm-up", e, &mut notes);
                failed[i] = true;
            }
        }
    }
    let mut values: Vec<Vec<Vec<f64>>> = vec![Vec::with_capacity(rounds); n];
    for r in 0..rounds {
        for k in 0..n {
            let i = (r + k) % n;
            if failed[i] {
                continue;
            }
            if let Some(p) = prepared[i].as_mut() {
                match p.run(seed_of(r as u64)).and_then(|out| settle(targets[i].as_ref()).map(|()| out)) {
                    Ok(out) => values[i].push(out.values),
                    Err(e) => {
                        fail(targets[i].as_ref(), "measure", e, &mut notes);
                        failed[i] = true;
                    }
                }
            }
        }
        eprintln!("  {}: round {}/{} done", w.name(), r + 1, rounds);
    }
    for (i, t) in targets.iter().enumerate() {
        if let (Some(a), Some((opts, b)), Some(_)) = (&persister_before[i], t.buffered(), &prepared[i]) {
            notes.push(format!("{}: {}", t.name(), persister_note(a, &b, &opts, rounds)));
        }
    }
    let mut media = vec![None; n];
    if accounting && w.accounting() != Accounting::None {
        for i in 0..n {
            let t = targets[i].as_ref();
            if t.remote().is_some() {
                continue; // nothing to count from here
            }
            let Some(p) = prepared[i].as_mut().filter(|_| !failed[i]) else { continue };
            let res = t.accounting_begin().and_then(|()| {
                // Settled before counting stops: a buffered mount's
                // persister stores are part of what its calls cost.
                let out = p.run(seed_of(u64::MAX - 1)).and_then(|out| settle(t).map(|()| out));
                let m = t.accounting_end();
                Ok((out?, m?))
            });
            match res {
                Ok((out, Some(m))) => {
                    media[i] = Some(AcctOut { media: m, bytes_written: out.bytes_written, ops: out.ops })
                }
                Ok((_, None)) => {}
                Err(e) => {
                    fail(t, "accounting pass", e, &mut notes);
                    failed[i] = true;
                }
            }
        }
    }
    for (i, p) in prepared.into_iter().enumerate() {
        if let Some(p) = p {
            if let Err(e) = p.cleanup() {
                fail(targets[i].as_ref(), "cleanup", e, &mut notes);
            }
        }
    }
    WorkloadResult {
        name: w.name().to_string(),
        group: w.group(),
        params: w.params(),
        metrics: w.metrics(),
        targets: targets.iter().map(|t| t.name().to_string()).collect(),
        values: values.into_iter().enumerate().map(|(i, v)| (!failed[i] && !v.is_empty()).then_some(v)).collect(),
        accounting: w.accounting(),
        media,
        notes,
    }
}

/// After a pass on a buffered mount, untimed: the calls still pending are
/// made durable now, not by its persister during the next target's timed
/// round. Nothing for every other target.
fn settle(t: &dyn Target) -> io::Result<()> {
    match t.buffered() {
        Some(_) => t.sync_all(),
        None => Ok(()),
    }
}

/// What a buffered mount's persister did between two snapshots, in words.
fn persister_note(
    a: &ferrite::BufferedStats,
    b: &ferrite::BufferedStats,
    opts: &ferrite::BufferedOptions,
    rounds: usize,
) -> String {
    let queued = b.ops_queued - a.ops_queued;
    let persisted = b.ops_persisted - a.ops_persisted;
    let batches = b.batches - a.batches;
    let inline = b.batches_inline - a.batches_inline;
    let waits = b.backpressure_waits - a.backpressure_waits;
    let per_batch = if batches > 0 { format!("{:.1}", persisted as f64 / batches as f64) } else { "–".into() };
    format!(
        "buffered persister over the warm-up and {rounds} rounds: {queued} ops queued, {persisted} made durable \
         in {batches} batches ({per_batch} ops per batch; {inline} batches run by callers at sync points or \
         back-pressure), {waits} back-pressure waits, {} pending at the end; longest lag {} \
         (bound {}, ops_max {})",
        b.pending_now,
        target::fmt_ns(b.lag_ns_max_seen),
        target::fmt_ns(opts.lag_ns_max),
        opts.ops_max
    )
}

fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    pin_to_cpus(&[cpu])
}

/// Let the calling thread run only on `cpus`.
pub(crate) fn pin_to_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET bounds-checks nothing,
    // so every CPU is checked against the set size first.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
                return Err(io::Error::other(format!("cpu {cpu} out of range")));
            }
            libc::CPU_SET(cpu, &mut set);
        }
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
