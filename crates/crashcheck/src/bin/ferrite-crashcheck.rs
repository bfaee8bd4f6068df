//! `ferrite-crashcheck`: the crash-consistency harness from the command line.
//!
//! ```text
//! ferrite-crashcheck replay TOKEN          replay one failure (exit 1 if it reproduces)
//! ferrite-crashcheck exhaustive [OPTIONS]  the large run: seq-1, seq-2 and the scenarios on
//!                                          every start image, sampled seq-3, random workloads,
//!                                          full caps
//! ferrite-crashcheck run [OPTIONS]         a run of your choice
//! ferrite-crashcheck child POOL SEED FROM PROGRESS [modes|zc|buffered]
//!                                          (internal) the process-crash test's child
//! ferrite-crashcheck fuzz-input image|ops FILE...   run fuzz inputs (e.g. crashes cargo-fuzz saved)
//!
//! OPTIONS (run / exhaustive):
//!   --seq1 --seq2            catalogue workloads (every op alone / every ordered pair)
//!   --seq3 N                 N sampled ordered triples
//!   --aseq1 --aseq2          the fsync-atomic catalogue (every op alone / every ordered pair)
//!   --arandom N              N random workloads mixing the consistency modes (of --len calls)
//!   --zseq1 --zseq2          the zero-copy catalogue (peek and patch: every op alone / every pair)
//!   --zcross                 every zero-copy op before and after every op of the main catalogue
//!   --zrandom N              N random workloads with peek and patch (of --len calls)
//!   --bseq1 --bseq2          the buffered catalogue on buffered mounts (every op alone / every
//!                            pair of the buffered extras, and each extra before and after
//!                            every op of the main catalogue)
//!   --bscenarios             the scenarios on buffered mounts
//!   --brandom N              N random workloads on buffered mounts, sync points mixed in
//!   --scenarios              the scenarios (GC of files and directories, src/scenario.rs)
//!   --random N --len L       N random workloads of L calls
//!   --start LIST             start images: empty,aged,full (default: all)
//!   --only ID                only the workload with this id (e.g. s2.create+rename_file)
//!   --subsets N              line subsets per crash point (default 128)
//!   --torn N                 torn-store images per crash point (default 32)
//!   --no-recovery-crash      do not crash recovery itself
//!   --busy-recovery-crash    crash only recoveries that roll back a journal or free orphans
//!   --no-usability           skip the usability pass
//!   --threads N              worker threads (default: available cores)
//!   --seed S                 the run's seed (default 0xC0FFEE)
//!   --sample N               check every Nth workload only (sizing runs)
//!   --write-precopy          every whole-page write copies before taking the inode lock (the
//!                            path of a contended file; tests/precopy.rs); also after a token:
//!                            `replay TOKEN --write-precopy`
//! ```

use ferrite_crashcheck::crash::Caps;
use ferrite_crashcheck::harness::{run_all, Config};
use ferrite_crashcheck::verify::{RecoveryCrash, VerifyOpts};
use ferrite_crashcheck::workload::{
    atomic_seq1, atomic_seq2, buffered_seq1, buffered_seq2, parse_u64, random_workload, random_workload_buffered,
    random_workload_modes, random_workload_zc, seq1, seq2, seq3_sampled, zc_cross, zc_seq1, zc_seq2, StartKind,
    Workload,
};
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: ferrite-crashcheck replay TOKEN | exhaustive [OPTIONS] | run [OPTIONS] | fuzz-input image|ops FILE...\n(see the source or docs/TESTING.md for the options)"
    );
    std::process::exit(2)
}

struct Opts {
    seq1: bool,
    seq2: bool,
    aseq1: bool,
    aseq2: bool,
    arandom: usize,
    zseq1: bool,
    zseq2: bool,
    zcross: bool,
    zrandom: usize,
    bseq1: bool,
    bseq2: bool,
    bscenarios: bool,
    brandom: usize,
    seq3: usize,
    scenarios: bool,
    random: usize,
    len: usize,
    starts: Vec<StartKind>,
    only: Option<String>,
    cfg: Config,
    sample: usize,
}

fn parse(args: &[String], exhaustive: bool) -> Opts {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let mut o = Opts {
        seq1: exhaustive,
        seq2: exhaustive,
        aseq1: exhaustive,
        aseq2: exhaustive,
        arandom: if exhaustive { 400 } else { 0 },
        zseq1: exhaustive,
        zseq2: exhaustive,
        zcross: exhaustive,
        zrandom: if exhaustive { 200 } else { 0 },
        bseq1: exhaustive,
        bseq2: exhaustive,
        bscenarios: exhaustive,
        brandom: if exhaustive { 400 } else { 0 },
        seq3: if exhaustive { 2000 } else { 0 },
        scenarios: exhaustive,
        random: if exhaustive { 400 } else { 0 },
        len: 24,
        starts: StartKind::ALL.to_vec(),
        only: None,
        cfg: Config::new(0xC0FFEE),
        sample: 1,
    };
    o.cfg.threads = threads;
    o.cfg.progress_every = Some(Duration::from_secs(20));
    if exhaustive {
        o.cfg.caps = Caps { subsets: 256, torn: 48, older: 16, exhaustive_lines: 8 };
        o.cfg.verify = VerifyOpts {
            recovery_caps: Caps { subsets: 64, torn: 16, older: 4, exhaustive_lines: 6 },
            ..VerifyOpts::FULL
        };
    }
    let mut i = 0;
    let num = |i: &mut usize| -> u64 {
        *i += 1;
        args.get(*i).and_then(|s| parse_u64(s)).unwrap_or_else(|| usage())
    };
    while i < args.len() {
        match args[i].as_str() {
            "--seq1" => o.seq1 = true,
            "--seq2" => o.seq2 = true,
            "--aseq1" => o.aseq1 = true,
            "--aseq2" => o.aseq2 = true,
            "--arandom" => o.arandom = num(&mut i) as usize,
            "--zseq1" => o.zseq1 = true,
            "--zseq2" => o.zseq2 = true,
            "--zcross" => o.zcross = true,
            "--zrandom" => o.zrandom = num(&mut i) as usize,
            "--bseq1" => o.bseq1 = true,
            "--bseq2" => o.bseq2 = true,
            "--bscenarios" => o.bscenarios = true,
            "--brandom" => o.brandom = num(&mut i) as usize,
            "--scenarios" => o.scenarios = true,
            "--seq3" => o.seq3 = num(&mut i) as usize,
            "--random" => o.random = num(&mut i) as usize,
            "--len" => o.len = num(&mut i) as usize,
            "--subsets" => o.cfg.caps.subsets = num(&mut i) as usize,
            "--torn" => o.cfg.caps.torn = num(&mut i) as usize,
            "--threads" => o.cfg.threads = num(&mut i) as usize,
            "--seed" => o.cfg.seed = num(&mut i),
            "--sample" => o.sample = (num(&mut i) as usize).max(1),
            "--write-precopy" => ferrite::force_write_precopy(true),
            "--no-recovery-crash" => o.cfg.verify.recovery_crash = RecoveryCrash::Off,
            "--busy-recovery-crash" => o.cfg.verify.recovery_crash = RecoveryCrash::Busy,
            "--no-usability" => o.cfg.verify.usability = false,
            "--only" => {
                i += 1;
                o.only = Some(args.get(i).cloned().unwrap_or_else(|| usage()));
            }
            "--start" => {
                i += 1;
                let list = args.get(i).unwrap_or_else(|| usage());
                o.starts = list.split(',').map(|s| StartKind::parse(s).unwrap_or_else(|| usage())).collect();
            }
            _ => usage(),
        }
        i += 1;
    }
    o
}

fn run(o: Opts) -> i32 {
    let mut workloads: Vec<Workload> = Vec::new();
    if o.seq1 {
        workloads.extend(seq1());
    }
    if o.seq2 {
        workloads.extend(seq2());
    }
    if o.aseq1 {
        workloads.extend(atomic_seq1());
    }
    if o.aseq2 {
        workloads.extend(atomic_seq2());
    }
    if o.zseq1 {
        workloads.extend(zc_seq1());
    }
    if o.zseq2 {
        workloads.extend(zc_seq2());
    }
    if o.zcross {
        workloads.extend(zc_cross());
    }
    if o.bseq1 {
        workloads.extend(buffered_seq1());
    }
    if o.bseq2 {
        workloads.extend(buffered_seq2());
    }
    if o.bscenarios {
        workloads.extend(ferrite_crashcheck::scenario::buffered_scenarios());
    }
    if o.seq3 > 0 {
        workloads.extend(seq3_sampled(o.cfg.seed, o.seq3));
    }
    if o.scenarios {
        workloads.extend(ferrite_crashcheck::scenario::scenarios().iter().map(|s| s.workload.clone()));
    }
    for n in 0..o.random {
        workloads.push(random_workload(ferrite_crashcheck::hash::mix(o.cfg.seed ^ n as u64), o.len));
    }
    for n in 0..o.arandom {
        workloads.push(random_workload_modes(ferrite_crashcheck::hash::mix(o.cfg.seed ^ 0xA70 ^ n as u64), o.len));
    }
    for n in 0..o.brandom {
        workloads.push(random_workload_buffered(ferrite_crashcheck::hash::mix(o.cfg.seed ^ 0xB0F ^ n as u64), o.len));
    }
    for n in 0..o.zrandom {
        workloads.push(random_workload_zc(ferrite_crashcheck::hash::mix(o.cfg.seed ^ 0x2C0 ^ n as u64), o.len));
    }
    if let Some(id) = &o.only {
        workloads = match ferrite_crashcheck::workload::workload_by_id(id) {
            Ok(w) => vec![w],
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        };
    }
    let jobs: Vec<(StartKind, Workload)> = o
        .starts
        .iter()
        .flat_map(|&k| workloads.iter().map(move |w| (k, w.clone())))
        .enumerate()
        .filter(|(i, _)| i % o.sample == 0)
        .map(|(_, j)| j)
        .collect();
    eprintln!(
        "ferrite-crashcheck: {} jobs on {} thread(s), seed {:#x}, caps {:?}",
        jobs.len(),
        o.cfg.threads,
        o.cfg.seed,
        o.cfg.caps
    );
    let (fig, failures) = run_all("crashcheck", &jobs, &o.cfg);
    eprintln!("ferrite-crashcheck: {fig}");
    if failures.is_empty() {
        eprintln!("ferrite-crashcheck: no failures");
        0
    } else {
        eprintln!("ferrite-crashcheck: {} failures (tokens above)", failures.len());
        1
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { usage() };
    let code = match cmd.as_str() {
        "replay" => {
            let Some(t) = args.get(1) else { usage() };
            if args[2..].iter().any(|a| a == "--write-precopy") {
                ferrite::force_write_precopy(true);
            }
            match ferrite_crashcheck::token::replay(t) {
                Ok((out, failed)) => {
                    print!("{out}");
                    if failed {
                        1
                    } else {
                        0
                    }
                }
                Err(e) => {
                    eprintln!("replay: {e}");
                    2
                }
            }
        }
        "run" => run(parse(&args[1..], false)),
        "exhaustive" => run(parse(&args[1..], true)),
        "child" => ferrite_crashcheck::proc_crash::child_main(&args[1..]),
        "fuzz-input" => ferrite_crashcheck::fuzz::run_files(&args[1..]),
        _ => usage(),
    };
    std::process::exit(code);
}
