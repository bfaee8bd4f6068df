//! Proves the buffered mode's crash guarantee (issue 13) with the CI-sized
//! harness: on a buffered mount, after a crash at any fence or call
//! boundary (inside the calls that run the persister's batches: journal
//! transactions of several operations, by back-pressure or at a sync
//! point), with any subset of the pending lines persisted, the recovered
//! file system is the model's state after a prefix of the operations in
//! the order they returned, and that prefix contains every operation that
//! returned before the last completed sync point (the prefix oracle:
//! `src/prefix.rs`); fsck is clean, recovery can itself be crashed, and the
//! usability pass finds no leaked or doubly used page or inode (pages and
//! inodes released by operations not yet durable are freed only once they
//! are). The persistence checker demands that a sync point returns with
//! every earlier operation's stores flushed and fenced.
//!
//! Workloads are recorded on mounts without a persister thread and without
//! a lag bound, with at most 3 or 4 operations pending
//! (`workload::buffered_options`), so that the batches land at the same
//! place in every run:
//! - seq-1 of the buffered catalogue (`workload::buffered_catalogue`: every
//!   operation of the main catalogue and the buffered extras, each between
//!   two operations queued on `/q` before it and a chmod and fsync of `/q`
//!   after it) on the empty and log-edge images with seq-1's sizing of
//!   `ci.rs` (128 line subsets per crash point, busy recoveries crashed),
//!   and on the nearly full one (pages released by pending operations:
//!   ENOSPC waits for their batch) with 32;
//! - every other ordered pair of the buffered extras on the empty image
//!   (32 subsets);
//! - the scenarios (log GC and compaction, folds) on a buffered mount on
//!   the empty image, and `bsc.gc_deferred` (log GC of a directory with
//!   operations queued: the call collects the page whose death is durable,
//!   keeps the one it killed itself, persists nothing), and
//!   `bsc.partial_persist` (a persist that stops with operations taken,
//!   newer ones queued behind them, then a sync) (32 subsets, busy
//!   recoveries crashed);
//! - random workloads with sync points mixed in
//!   (`workload::random_workload_buffered`), 8 of 24 calls on the empty and
//!   log-edge images, with files opened without a name and published (a
//!   write, the link that names the file, and half of the time a sync
//!   that persists the link inside the workload);
//! - a check that the catalogue does what it is for: batches persisted
//!   inside operations that are not sync points (back-pressure), nothing
//!   pending after a sync point, operations pending at crash points, and
//!   recovered states that lost operations (a prefix shorter than the
//!   calls returned) as the oracle allows, and a `persist_all_but` that
//!   leaves operations taken for the next persist.
//!
//! Knobs: `CRASHCHECK_SEED`; `CRASHCHECK_SCALE` multiplies the share of
//! pairs (2 runs every pair) and the number of random workloads. Longer runs:
//! `ferrite-crashcheck run --bseq1 --bseq2 --bscenarios --brandom N`
//! (docs/TESTING.md).

mod common;

use common::{config, run, scale, seed};
use ferrite_crashcheck::exec::{record, start};
use ferrite_crashcheck::harness::{check_recording, Figures};
use ferrite_crashcheck::verify::RecoveryCrash;
use ferrite_crashcheck::workload::{
    buffered_extras, buffered_seq1, buffered_sequence, random_workload_buffered, workload_by_id, Call, StartKind,
};

fn seq1_on(kind: StartKind, subsets: usize) {
    let jobs = buffered_seq1().into_iter().map(|w| (kind, w)).collect();
    run(&format!("buffered seq1 {}", kind.name()), jobs, &config(subsets, RecoveryCrash::Busy));
}

#[test]
fn buffered_seq1_empty() {
    seq1_on(StartKind::Empty, 128);
}

#[test]
fn buffered_seq1_logedge() {
    seq1_on(StartKind::LogEdge, 128);
}

#[test]
fn buffered_seq1_full() {
    seq1_on(StartKind::Full, 32);
}

#[test]
fn buffered_seq2_extras_empty() {
    let extras = buffered_extras();
    let keep = (0.5 * scale()).clamp(0.0, 1.0);
    let mut jobs = Vec::new();
    let mut n = 0usize;
    for a in &extras {
        for b in &extras {
            n += 1;
            if keep < 1.0 && (n as f64 * keep).floor() == ((n - 1) as f64 * keep).floor() {
                continue;
            }
            jobs.push((StartKind::Empty, buffered_sequence(&[a, b])));
        }
    }
    run("buffered seq2 extras empty", jobs, &config(32, RecoveryCrash::Off));
}

#[test]
fn buffered_scenarios_empty() {
    let jobs = ferrite_crashcheck::scenario::buffered_scenarios().into_iter().map(|w| (StartKind::Empty, w)).collect();
    run("buffered scenarios empty", jobs, &config(32, RecoveryCrash::Busy));
}

fn random_on(kind: StartKind, count: usize, len: usize) {
    let count = ((count as f64) * scale()).round() as usize;
    let jobs = (0..count)
        .map(|i| {
            let s = ferrite_crashcheck::hash::mix(seed() ^ 0xB0F ^ (i as u64) << 8 ^ kind as u64);
            (kind, random_workload_buffered(s, len))
        })
        .collect();
    run(&format!("buffered random {}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

#[test]
fn buffered_random_empty() {
    random_on(StartKind::Empty, 8, 24);
}

#[test]
fn buffered_random_logedge() {
    random_on(StartKind::LogEdge, 8, 24);
}

/// The catalogue reaches what it is for (from the engine's counters per
/// call, `exec::CallOutcome::batches` and `pending`, and the prefix
/// oracle's classification of each call).
#[test]
fn buffered_catalogue_reaches_its_paths() {
    let st = start(StartKind::Empty);
    let mut backpressure = 0;
    let mut pending_points = 0;
    for w in buffered_seq1() {
        let rec = record(&st, &w);
        assert!(rec.divergences.is_empty(), "{}: {:?}", w.id, rec.divergences);
        let p = rec.prefix.clone().unwrap_or_else(|| panic!("{}: a buffered workload has the prefix oracle", w.id));
        assert!(rec.oracle.is_none(), "{}: no fsync-atomic oracle on a buffered mount", w.id);
        let n = rec.outcomes.len();
        // The closing fsync of /q: a sync point, nothing pending after it
        // (but after a remount, which closed its descriptor: EBADF).
        if !w.calls.contains(&Call::Remount) {
            assert!(p.sync[n - 1], "{}: the closing fsync is a sync point", w.id);
            assert_eq!(rec.outcomes[n - 1].pending, 0, "{}: operations pending after fsync returned", w.id);
        }
        for (i, o) in rec.outcomes.iter().enumerate() {
            if o.batches > 0 && !p.sync[i] {
                backpressure += 1;
            }
            if o.pending > 0 {
                pending_points += 1;
            }
            if p.sync[i] {
                assert_eq!(
                    o.pending, 0,
                    "{}: call {i} `{}` is a sync point but left operations pending",
                    w.id, w.calls[i]
                );
            }
        }
    }
    assert!(backpressure > 0, "no batch was persisted by back-pressure inside an operation");
    assert!(pending_points > 0, "no operation was ever left pending");
    // Crashes lose operations that returned after the last sync point, as
    // the oracle allows (not a vacuous oracle).
    let mut cfg = common::config(32, RecoveryCrash::Off);
    cfg.progress_every = None;
    let mut fig = Figures::default();
    for id in ["b1.rename_file", "b1.buf_small_writes", "b1.buf_unlink_written_then_reuse"] {
        let w = workload_by_id(id).expect("workload");
        let (f, failures) = check_recording(StartKind::Empty, &record(&st, &w), &cfg);
        assert!(failures.is_empty(), "{}", failures.iter().map(|f| f.to_string()).collect::<String>());
        fig.add(&f);
    }
    assert!(fig.behind > 0, "no crash image lost an operation that had returned: {fig}");
    // A remount in the middle: the unmount is a sync point and the mount
    // after it is buffered again.
    let rec = record(&st, &workload_by_id("b1.buf_remount").expect("workload"));
    let p = rec.prefix.clone().expect("prefix oracle");
    let at = rec.workload.calls.iter().position(|c| *c == Call::Remount).expect("remount");
    assert!(p.sync[at], "a clean unmount is a sync point");
    assert!(rec.outcomes[at + 1..].iter().any(|o| o.pending > 0), "the mount after the remount is buffered");
    // Log GC of an inode with queued operations: the chmod that opens
    // /gcbd's third log page collects the first (durably dead), keeps the
    // second (killed by the chmod itself, not durable) and persists
    // nothing.
    let rec = record(&st, &workload_by_id("bsc.gc_deferred").expect("workload"));
    assert!(rec.divergences.is_empty(), "{:?}", rec.divergences);
    let o = &rec.outcomes[2];
    assert!(
        o.batches == 0 && o.gc_pages == 1 && o.pending == 3,
        "bsc.gc_deferred: the chmod persisted {} batches, collected {} pages, left {} pending",
        o.batches,
        o.gc_pages,
        o.pending
    );
    assert!(rec.outcomes[..2].iter().all(|o| o.pending > 0 && o.gc_pages == 0));
    // A persist that stops with operations taken: `persist_all_but(2)`
    // persists one batch and leaves two mkdirs pending, a fifth joins them,
    // and the sync persists them in two batches (the two taken first).
    let rec = record(&st, &workload_by_id("bsc.partial_persist").expect("workload"));
    assert!(rec.divergences.is_empty(), "{:?}", rec.divergences);
    let (pab, sync) = (&rec.outcomes[4], &rec.outcomes[6]);
    assert!(
        pab.batches == 1 && pab.pending == 2 && sync.batches == 2 && sync.pending == 0,
        "bsc.partial_persist: persist_all_but made {} batches and left {} pending; the sync made {} and left {}",
        pab.batches,
        pab.pending,
        sync.batches,
        sync.pending
    );
}
