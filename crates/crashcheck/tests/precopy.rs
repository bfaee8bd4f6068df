//! The copy-before-lock write path under the crash harness (issue 14).
//!
//! A whole-page write to a file that another thread is writing copies its
//! data into fresh pages before it takes the inode's lock
//! (`Ferrite::write_inode_at`, docs/DESIGN.md "Data: copy-on-write"). The
//! harness runs one thread, so that path would never be taken here; this
//! binary forces it for every whole-page write (`force_write_precopy`, a
//! process-wide test switch, hence a test binary of its own) and runs
//! seq-1 on the empty and log-edge images and random workloads on the
//! empty one, with the same checks as `ci.rs`: persistence checker, model
//! after every call, crash images at every fence, recovery crashed where
//! it does work, usability; and random workloads mixing strict and
//! fsync-atomic files, where a forced write also skips the look for an
//! epoch made before the copy (as when another writer holds the lock), so
//! that the check under the lock meets epochs and gives the fresh pages
//! back; and a write by inode number whose file is unlinked after the
//! write took its pages and before it takes the lock (the scenario
//! `sc.write_racing_unlink`), which must
//! fail with ENOENT and give its copied pages back, fenced first. Each
//! test first shows that the path was reached. Tokens replay with `replay
//! TOKEN --write-precopy`.

mod common;

use common::{config, run, scale, seed};
use ferrite_crashcheck::verify::RecoveryCrash;
use ferrite_crashcheck::workload::{random_workload, random_workload_modes, seq1, StartKind};

fn forced() {
    ferrite::force_write_precopy(true);
}

/// Run `jobs` and show that some of their writes took the path.
fn run_reaching(name: &str, jobs: Vec<(StartKind, ferrite_crashcheck::workload::Workload)>, subsets: usize) {
    forced();
    let before = ferrite::write_precopies();
    run(
        &format!("{name} (copy before lock; replay with --write-precopy)"),
        jobs,
        &config(subsets, if subsets >= 64 { RecoveryCrash::Busy } else { RecoveryCrash::Off }),
    );
    let reached = ferrite::write_precopies() - before;
    assert!(reached > 0, "{name}: no write took the copy-before-lock path");
    eprintln!("{name}: {reached} writes took the copy-before-lock path");
}

#[test]
fn seq1_empty_precopy() {
    run_reaching("precopy seq1 empty", seq1().into_iter().map(|w| (StartKind::Empty, w)).collect(), 128);
}

#[test]
fn seq1_logedge_precopy() {
    run_reaching("precopy seq1 logedge", seq1().into_iter().map(|w| (StartKind::LogEdge, w)).collect(), 128);
}

/// `base` random workloads of 24 calls (scaled) on the empty image, drawn
/// by `draw` from seeds salted with `salt`.
fn random_jobs(
    base: f64,
    salt: u64,
    draw: fn(u64, usize) -> ferrite_crashcheck::workload::Workload,
) -> Vec<(StartKind, ferrite_crashcheck::workload::Workload)> {
    let count = (base * scale()).round().max(1.0) as u64;
    (0..count).map(|i| (StartKind::Empty, draw(ferrite_crashcheck::hash::mix(seed() ^ (i << 8) ^ salt), 24))).collect()
}

#[test]
fn random_empty_precopy() {
    run_reaching("precopy random empty", random_jobs(16.0, 0x9c0, random_workload), 32);
}

/// fsync-atomic files: a copied write over pages that its file's open
/// epoch owns must give its fresh pages back and take the ordinary path.
/// Shows that writes were copied first and that some met an epoch.
#[test]
fn random_modes_precopy() {
    let before = ferrite::write_precopy_fallbacks();
    run_reaching("precopy random modes", random_jobs(24.0, 0x9c1, random_workload_modes), 32);
    let fallbacks = ferrite::write_precopy_fallbacks() - before;
    assert!(fallbacks > 0, "no copied write met an epoch over its pages");
    eprintln!("precopy random modes: {fallbacks} copied writes met an epoch and wrote in place");
}

/// The inode freed under a copied write before it takes its lock: the write
/// fails with ENOENT and its fresh pages go back to the allocator, their
/// stores fenced first (the persistence checker holds a freed page's
/// unfenced stores against the call), and the next write takes pages
/// again. On the empty and log-edge images, every crash point checked.
#[test]
fn write_racing_unlink_precopy() {
    let scenario = ferrite_crashcheck::scenario::by_name("write_racing_unlink").expect("the scenario exists");
    let before = ferrite::write_precopy_fallbacks();
    let jobs = [StartKind::Empty, StartKind::LogEdge].into_iter().map(|k| (k, scenario.workload.clone())).collect();
    run_reaching("precopy write racing unlink", jobs, 128);
    let fallbacks = ferrite::write_precopy_fallbacks() - before;
    assert!(fallbacks > 0, "no copied write found its inode freed under the lock");
    eprintln!("precopy write racing unlink: {fallbacks} copied writes found their inode freed");
}
