//! Helpers shared by the CI-sized harness tests (`ci.rs`, `atomic.rs`):
//! the run's seed and scale from the environment, the configuration of a
//! part, and the report that fails the test with replayable tokens.

use ferrite_crashcheck::crash::Caps;
use ferrite_crashcheck::harness::{run_all, say, Config, Failure, Figures};
use ferrite_crashcheck::verify::{RecoveryCrash, VerifyOpts};
use ferrite_crashcheck::workload::{StartKind, Workload};
use std::time::Duration;

pub fn seed() -> u64 {
    std::env::var("CRASHCHECK_SEED").ok().and_then(|s| ferrite_crashcheck::workload::parse_u64(&s)).unwrap_or(0xC0FFEE)
}

pub fn scale() -> f64 {
    std::env::var("CRASHCHECK_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

pub fn config(subsets: usize, recovery: RecoveryCrash) -> Config {
    let mut cfg = Config::new(seed());
    cfg.caps = Caps { subsets, torn: if subsets >= 64 { 32 } else { 12 }, older: 4, exhaustive_lines: 6 };
    cfg.verify = VerifyOpts {
        usability: true,
        recovery_crash: recovery,
        recovery_caps: Caps { subsets: 8, torn: 4, older: 2, exhaustive_lines: 3 },
    };
    cfg.threads = 1; // libtest runs two of these tests at a time
    cfg.progress_every = Some(Duration::from_secs(30));
    cfg.max_failures_per_workload = 2;
    cfg
}

pub fn report(name: &str, jobs: usize, fig: &Figures, failures: &[Failure]) {
    say(&format!("{name}: {fig}"));
    say(&format!(
        "{name}: {:.0} states checked per second; {jobs} workloads took {:.1}s ({:.2}s per workload, {} failures)",
        fig.rate(),
        fig.elapsed.as_secs_f64(),
        fig.elapsed.as_secs_f64() / jobs.max(1) as f64,
        failures.len()
    ));
    if !failures.is_empty() {
        let shown: Vec<String> = failures.iter().take(8).map(|f| f.to_string()).collect();
        panic!(
            "{name}: {} failures (first {} shown; each token replays with `cargo run -p ferrite-crashcheck -- replay TOKEN`):\n\n{}",
            failures.len(),
            shown.len(),
            shown.join("\n")
        );
    }
}

pub fn run(name: &str, jobs: Vec<(StartKind, Workload)>, cfg: &Config) {
    let (fig, failures) = run_all(name, &jobs, cfg);
    report(name, jobs.len(), &fig, &failures);
}
