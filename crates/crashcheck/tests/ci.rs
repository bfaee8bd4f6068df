//! The CI-sized crash-consistency harness (what `cargo test --workspace`
//! runs). See docs/TESTING.md for the exhaustive mode and for replaying a
//! token.
//!
//! - seq-1: every catalogue operation alone on each start image (empty,
//!   aged, nearly full, logs at a page edge), up to 128 line subsets per
//!   crash point, torn stores, older values; recovery itself is crashed
//!   whenever it rolls back a journal or frees orphans;
//! - seq-2: every ordered pair on each start image, up to 32 line subsets
//!   per crash point (the first operation's crash images are the seq-1
//!   images and are recovered once: identical images are deduplicated by
//!   content across the whole process);
//! - random: 80 seeded random workloads of 24 calls with several
//!   descriptors per file.
//!
//! Every workload also goes through the persistence checker, and the
//! engine is compared with the model after every call. Each test prints
//! its figures (states checked per second, projected time).
//!
//! Knobs: `CRASHCHECK_SEED` (the run's seed), `CRASHCHECK_SCALE` (a float:
//! scales the number of seq-2 pairs and random workloads; 1 by default).

mod common;

use common::{config, run, scale, seed};
use ferrite_crashcheck::verify::RecoveryCrash;
use ferrite_crashcheck::workload::{catalogue, random_workload, seq1, sequence, StartKind};

fn seq1_on(kind: StartKind) {
    let jobs = seq1().into_iter().map(|w| (kind, w)).collect();
    run(&format!("seq1 {}", kind.name()), jobs, &config(128, RecoveryCrash::Busy));
}

/// The ordered pairs whose first operation's index is `part` modulo
/// `parts`, thinned by CRASHCHECK_SCALE below 1.
fn seq2_on(kind: StartKind, part: usize, parts: usize) {
    let cat = catalogue();
    let keep = scale().clamp(0.0, 1.0);
    let mut jobs = Vec::new();
    let mut n = 0usize;
    for (i, a) in cat.iter().enumerate() {
        if i % parts != part {
            continue;
        }
        for b in &cat {
            n += 1;
            if keep < 1.0 && (n as f64 * keep).floor() == ((n - 1) as f64 * keep).floor() {
                continue;
            }
            jobs.push((kind, sequence(&[a, b])));
        }
    }
    run(&format!("seq2 {} part {part}/{parts}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

fn random_on(kind: StartKind, count: usize, len: usize) {
    let count = ((count as f64) * scale()).round() as usize;
    let jobs = (0..count)
        .map(|i| (kind, random_workload(ferrite_crashcheck::hash::mix(seed() ^ (i as u64) << 8 ^ kind as u64), len)))
        .collect();
    run(&format!("random {}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

#[test]
fn seq1_empty() {
    seq1_on(StartKind::Empty);
}

#[test]
fn seq1_aged() {
    seq1_on(StartKind::Aged);
}

#[test]
fn seq1_full() {
    seq1_on(StartKind::Full);
}

#[test]
fn seq1_logedge() {
    seq1_on(StartKind::LogEdge);
}

macro_rules! seq2_tests {
    ($($name:ident: $kind:expr, $part:expr;)*) => {
        $(
            #[test]
            fn $name() {
                seq2_on($kind, $part, 3);
            }
        )*
    };
}

seq2_tests! {
    seq2_empty_0: StartKind::Empty, 0;
    seq2_empty_1: StartKind::Empty, 1;
    seq2_empty_2: StartKind::Empty, 2;
    seq2_aged_0: StartKind::Aged, 0;
    seq2_aged_1: StartKind::Aged, 1;
    seq2_aged_2: StartKind::Aged, 2;
    seq2_full_0: StartKind::Full, 0;
    seq2_full_1: StartKind::Full, 1;
    seq2_full_2: StartKind::Full, 2;
    seq2_logedge_0: StartKind::LogEdge, 0;
    seq2_logedge_1: StartKind::LogEdge, 1;
    seq2_logedge_2: StartKind::LogEdge, 2;
}

#[test]
fn random_empty() {
    random_on(StartKind::Empty, 24, 24);
}

#[test]
fn random_aged() {
    random_on(StartKind::Aged, 24, 24);
}

#[test]
fn random_full() {
    random_on(StartKind::Full, 16, 24);
}

#[test]
fn random_logedge() {
    random_on(StartKind::LogEdge, 16, 24);
}
