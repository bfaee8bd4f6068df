//! Proves crash consistency of garbage collection and of the operations
//! the catalogue lacks (see `src/scenario.rs`), on every start image
//! (empty, aged, full, logedge), with the seq-1 sizing of `ci.rs`: 128 line
//! subsets per crash point, torn stores, older values, and recovery
//! crashed whenever it rolls back a journal or frees orphans.
//!
//! It also proves that the GC scenarios exercise what they are named for:
//! on every start image, the first recorded call of a fast-GC scenario
//! collects at least one log page (`Ferrite::gc_pages_collected`) without
//! compacting, and that of a compaction scenario compacts a log
//! (`Ferrite::log_compactions`); a compaction scenario must also have had
//! recovery crashed (a compaction's journal transaction rolled back, then
//! the rollback interrupted). A change of the engine's GC thresholds or
//! entry sizes that made a scenario miss its target fails here instead of
//! silently losing the coverage.

use ferrite_crashcheck::crash::Caps;
use ferrite_crashcheck::exec::{record, start};
use ferrite_crashcheck::harness::{check_recording, say, Config, Figures};
use ferrite_crashcheck::scenario::{scenarios, Expect};
use ferrite_crashcheck::verify::{RecoveryCrash, VerifyOpts};
use ferrite_crashcheck::workload::StartKind;
use std::time::{Duration, Instant};

fn seed() -> u64 {
    std::env::var("CRASHCHECK_SEED").ok().and_then(|s| ferrite_crashcheck::workload::parse_u64(&s)).unwrap_or(0xC0FFEE)
}

/// The seq-1 configuration of `ci.rs`.
fn config() -> Config {
    let mut cfg = Config::new(seed());
    cfg.caps = Caps { subsets: 128, torn: 32, older: 4, exhaustive_lines: 6 };
    cfg.verify = VerifyOpts {
        usability: true,
        recovery_crash: RecoveryCrash::Busy,
        recovery_caps: Caps { subsets: 8, torn: 4, older: 2, exhaustive_lines: 3 },
    };
    cfg.threads = 1;
    cfg.progress_every = Some(Duration::from_secs(30));
    cfg.max_failures_per_workload = 2;
    cfg
}

fn run_on(kind: StartKind) {
    ferrite_crashcheck::tune_allocator();
    let name = format!("scenarios {}", kind.name());
    let cfg = config();
    let st = start(kind);
    let t0 = Instant::now();
    let mut total = Figures::default();
    let mut problems = Vec::new();
    let mut gc_lines = Vec::new();
    for s in scenarios() {
        let rec = record(&st, &s.workload);
        let o = &rec.outcomes[0];
        let what = format!("{} on {}: first call {}", s.workload.id, kind.name(), rec.workload.calls[0]);
        if let Err(m) = s.expect.check(&rec) {
            problems.push(format!("{what}: {m}"));
        }
        let (fig, failures) = check_recording(kind, &rec, &cfg);
        if s.expect != Expect::Nothing {
            gc_lines.push(format!(
                "{name}: {}: {} log pages collected, {} compactions, {} epochs committed, {} crash points, {} states, {} crash images of recovery",
                s.workload.id, o.gc_pages, o.compactions, o.epoch_commits, fig.points, fig.states, fig.recovery_images
            ));
        }
        if s.expect == Expect::Compaction && fig.recovery_images == 0 {
            problems.push(format!("{what}: no crash image of a recovery (no compaction rollback was crashed)"));
        }
        total.add(&fig);
        for f in failures {
            problems.push(f.to_string());
        }
    }
    total.elapsed = t0.elapsed();
    for l in &gc_lines {
        say(l);
    }
    say(&format!("{name}: {total}"));
    if !problems.is_empty() {
        let shown: Vec<&String> = problems.iter().take(8).collect();
        panic!(
            "{name}: {} problems (first {} shown; tokens replay with `cargo run -p ferrite-crashcheck -- replay TOKEN`):\n\n{}",
            problems.len(),
            shown.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}

#[test]
fn scenarios_empty() {
    run_on(StartKind::Empty);
}

#[test]
fn scenarios_aged() {
    run_on(StartKind::Aged);
}

#[test]
fn scenarios_full() {
    run_on(StartKind::Full);
}

#[test]
fn scenarios_logedge() {
    run_on(StartKind::LogEdge);
}
