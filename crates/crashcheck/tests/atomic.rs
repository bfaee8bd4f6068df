//! Proves the fsync-atomic mode's crash guarantee (and that of strict
//! small writes) with the CI-sized harness: after a crash at any fence or
//! call boundary, with any subset of the pending lines persisted, each
//! fsync-atomic file is exactly its state at its last completed commit
//! point or at the one in flight, strict files and names are as the strict
//! rule says, fsck is clean, recovery can itself be crashed, and the
//! usability pass finds no leaked or doubly used page (the oracle:
//! `src/oracle.rs`; the persistence checker's fsync-atomic rules:
//! `src/pcheck.rs`).
//!
//! - seq-1 of the fsync-atomic catalogue (`workload::atomic_catalogue`:
//!   data changes of fsync-atomic files, commit points, strict inline
//!   writes) on each start image, with seq-1's sizing of `ci.rs` (128 line
//!   subsets per crash point, busy recoveries crashed);
//! - seq-2 of it: every ordered pair on the empty image (split in two
//!   tests), every fourth pair on the nearly full one (ENOSPC inside
//!   epochs), every eighth on the aged and log-edge images, with seq-2's
//!   sizing of `ci.rs` (32 line subsets);
//! - random workloads mixing the modes (`workload::random_workload_modes`),
//!   8 of 24 calls on each of three images;
//! - a check that the catalogue reaches the paths it is named for.
//!
//! Knobs: `CRASHCHECK_SEED`; `CRASHCHECK_SCALE` multiplies the share of
//! seq-2 pairs run on each image (8 runs every pair everywhere) and the
//! number of random workloads.

mod common;

use common::{config, run, scale, seed};
use ferrite_crashcheck::verify::RecoveryCrash;
use ferrite_crashcheck::workload::{atomic_catalogue, atomic_seq1, atomic_sequence, random_workload_modes, StartKind};

fn seq1_on(kind: StartKind) {
    let jobs = atomic_seq1().into_iter().map(|w| (kind, w)).collect();
    run(&format!("atomic seq1 {}", kind.name()), jobs, &config(128, RecoveryCrash::Busy));
}

/// The ordered pairs whose first operation's index is `part` modulo
/// `parts`, a share `share` × CRASHCHECK_SCALE of them (at most all).
fn seq2_on(kind: StartKind, part: usize, parts: usize, share: f64) {
    let cat = atomic_catalogue();
    let keep = (share * scale()).clamp(0.0, 1.0);
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
            jobs.push((kind, atomic_sequence(&[a, b])));
        }
    }
    run(&format!("atomic seq2 {} part {part}/{parts}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

fn random_on(kind: StartKind, count: usize, len: usize) {
    let count = ((count as f64) * scale()).round() as usize;
    let jobs = (0..count)
        .map(|i| {
            let s = ferrite_crashcheck::hash::mix(seed() ^ 0xA70 ^ (i as u64) << 8 ^ kind as u64);
            (kind, random_workload_modes(s, len))
        })
        .collect();
    run(&format!("atomic random {}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

#[test]
fn atomic_seq1_empty() {
    seq1_on(StartKind::Empty);
}

#[test]
fn atomic_seq1_aged() {
    seq1_on(StartKind::Aged);
}

#[test]
fn atomic_seq1_full() {
    seq1_on(StartKind::Full);
}

#[test]
fn atomic_seq1_logedge() {
    seq1_on(StartKind::LogEdge);
}

#[test]
fn atomic_seq2_empty_0() {
    seq2_on(StartKind::Empty, 0, 2, 1.0);
}

#[test]
fn atomic_seq2_empty_1() {
    seq2_on(StartKind::Empty, 1, 2, 1.0);
}

#[test]
fn atomic_seq2_full() {
    seq2_on(StartKind::Full, 0, 1, 0.25);
}

#[test]
fn atomic_seq2_aged() {
    seq2_on(StartKind::Aged, 0, 1, 0.125);
}

#[test]
fn atomic_seq2_logedge() {
    seq2_on(StartKind::LogEdge, 0, 1, 0.125);
}

#[test]
fn atomic_random_empty() {
    random_on(StartKind::Empty, 8, 24);
}

#[test]
fn atomic_random_full() {
    random_on(StartKind::Full, 8, 24);
}

#[test]
fn atomic_random_logedge() {
    random_on(StartKind::LogEdge, 8, 24);
}

/// The catalogue reaches the paths it is named for (from the engine's
/// counters and the entries each call staged, decoded from its trace), so
/// that a change of the engine's choices cannot silently drop coverage:
/// small writes of fsync-atomic and strict files go inline, writes into a
/// page of the epoch log nothing, a commit point commits the epoch (and
/// seals it with a size-only Truncate after writes in place), and each
/// kind of commit point leaves no file pending.
#[test]
fn atomic_catalogue_reaches_its_paths() {
    use ferrite::format::Entry;
    use ferrite_crashcheck::exec::{record, start};
    use ferrite_crashcheck::workload::workload_by_id;
    let st = start(StartKind::Empty);
    let kinds = |rec: &ferrite_crashcheck::exec::Recording, i: usize| -> Vec<&'static str> {
        rec.staged_entries(i)
            .iter()
            .map(|(_, e)| match e {
                Entry::Inline(_) => "inline",
                Entry::Write(_) => "write",
                Entry::Truncate(t) if t.size_only => "size",
                Entry::Truncate(_) => "truncate",
                _ => "other",
            })
            .collect()
    };
    let mut problems = Vec::new();
    let mut check = |id: &str, f: &dyn Fn(&ferrite_crashcheck::exec::Recording) -> bool, what: &str| {
        let rec = record(&st, &workload_by_id(id).expect("workload"));
        let seen: Vec<String> = (0..rec.outcomes.len())
            .map(|i| {
                let o = &rec.outcomes[i];
                format!("call {i}: {:?} epochs {} pending {}", kinds(&rec, i), o.epoch_commits, o.pending_files)
            })
            .collect();
        if !rec.divergences.is_empty() || !f(&rec) {
            problems.push(format!("{id}: {what}; {} {:?}", seen.join("; "), rec.divergences));
        }
    };
    check(
        "a1.fa_write_inline",
        &|r| kinds(r, 0) == ["inline"] && r.outcomes[0].pending_files == 1,
        "an inline entry, pending",
    );
    check(
        "a2.fa_write_inline+fa_fsync",
        &|r| r.outcomes[1].epoch_commits == 1 && r.outcomes[1].pending_files == 0,
        "fsync commits the epoch",
    );
    check(
        "a1.fa_write_in_place",
        &|r| kinds(r, 0) == ["write"] && kinds(r, 1).is_empty() && r.outcomes[1].pending_files == 1,
        "a copy on write, then a write in place that logs nothing",
    );
    check(
        "a2.fa_write_in_place_extend+fa_fsync",
        &|r| kinds(r, 1).is_empty() && kinds(r, 2) == ["size"] && r.outcomes[2].epoch_commits == 1,
        "the commit seals the in-place writes with a size-only Truncate",
    );
    check(
        "a1.write_inline",
        &|r| kinds(r, 0) == ["inline"] && r.outcomes[0].pending_files == 0,
        "a strict inline entry, committed",
    );
    check(
        "a1.write_inline_largest",
        &|r| kinds(r, 0) == ["inline"; 2],
        "1024 bytes (the largest inline piece) as two inline entries",
    );
    check(
        "a1.write_inline_and_page",
        &|r| kinds(r, 0) == ["write", "inline"],
        "a copy on write beside an inline piece",
    );
    check(
        "a1.fa_osync_write",
        &|r| kinds(r, 0) == ["inline"] && r.outcomes[0].epoch_commits == 1 && r.outcomes[0].pending_files == 0,
        "an O_SYNC write commits",
    );
    // Each commit point after a data change of the file it commits.
    for (data, commit) in [
        ("fa_write_page", "sync"),
        ("fa_write_inline", "fa_set_mode_same"),
        ("fa_write_page", "fa_set_mode_strict"),
        ("fa_write_inline", "fa_chmod"),
        ("fa_write_into_hole", "fa_chown"),
        ("fa_write_page", "fa_utimens"),
        ("fa_write_page", "fa_fdatasync"),
        ("fa_write_inline", "fa_rename"),
        ("fa_write_inline", "fa_rename_over_atomic"),
        ("fa_write_into_hole", "fa_rename_over_atomic"),
        ("fa_write_into_hole", "rename_over_atomic"),
        ("fa_write_inline", "fa_rename_exchange"),
        ("fa_write_inline", "fa_unlink"),
        ("fa_write_page", "fa_unlink_hard_link"),
        ("fa_write_into_hole", "fa_link"),
        ("fa_write_page", "remount"),
    ] {
        let id = format!("a2.{data}+{commit}");
        check(&id, &|r| r.outcomes[0].pending_files == 1 && r.outcomes[1].pending_files == 0, "a commit point");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
