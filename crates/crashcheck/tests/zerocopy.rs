//! Proves the crash guarantee of peek and patch (issue 12) with the
//! CI-sized harness: a patch is one atomic operation exactly as a write
//! (after a crash at any fence or call boundary, with any subset of the
//! pending lines persisted, the state is the model's before or after it in
//! a strict file, and in an fsync-atomic file what the fsync-atomic oracle
//! allows), zero-copy at page-aligned offsets and copied at unaligned ones;
//! and crash images taken while patch buffers (filled, never patched) and
//! views are live recover with fsck clean, the model's contents and
//! nothing leaked (the usability pass deletes everything and requires the
//! free pages and inodes of a fresh pool). While each workload runs, every
//! live view must keep showing the bytes of its moment.
//!
//! - seq-1 of the zero-copy catalogue (`workload::zc_catalogue`) on each
//!   start image, with seq-1's sizing of `ci.rs` (128 line subsets per
//!   crash point, busy recoveries crashed);
//! - seq-2 of it: every ordered pair on the empty image (split in two
//!   tests), every fourth on
//!   the nearly full one (ENOSPC with buffers holding pages), with seq-2's
//!   sizing of `ci.rs` (32 line subsets);
//! - random workloads with peek and patch (`workload::random_workload_zc`),
//!   8 of 24 calls on the empty and log-edge images;
//! - seq-1 and 8 random workloads recorded on a pool file in /dev/shm
//!   (`exec::Backing::File`; everything else runs on heap pools, whose
//!   views and buffers are anonymous copies): views map the pool's pages
//!   and buffers are pool pages, so the write-back of a mapped buffer is in
//!   the trace (checked and crashed) and a page changed under a view fails
//!   the live view check;
//! - a check that the catalogue reaches what it is named for (buffers and
//!   views live at its crash points, released by unmount, a failed patch
//!   keeping its buffer, patches pending in an fsync-atomic file).
//!
//! Knobs: `CRASHCHECK_SEED`; `CRASHCHECK_SCALE` multiplies the share of
//! seq-2 pairs run on the full image and the number of random workloads.
//! Longer runs: `ferrite-crashcheck run --zseq2 --zcross --zrandom N`
//! (docs/TESTING.md).

mod common;

use common::{config, run, scale, seed};
use ferrite_crashcheck::exec::{record_on, start, Backing};
use ferrite_crashcheck::harness::{check_recording, Config, Figures};
use ferrite_crashcheck::verify::RecoveryCrash;
use ferrite_crashcheck::workload::{random_workload_zc, zc_catalogue, zc_seq1, zc_sequence, StartKind};

fn seq1_on(kind: StartKind) {
    let jobs = zc_seq1().into_iter().map(|w| (kind, w)).collect();
    run(&format!("zc seq1 {}", kind.name()), jobs, &config(128, RecoveryCrash::Busy));
}

/// The ordered pairs whose first operation's index is `part` modulo
/// `parts`, a share `share` × CRASHCHECK_SCALE of them (at most all).
fn seq2_on(kind: StartKind, part: usize, parts: usize, share: f64) {
    let cat = zc_catalogue();
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
            jobs.push((kind, zc_sequence(&[a, b])));
        }
    }
    run(&format!("zc seq2 {} part {part}/{parts}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

fn random_on(kind: StartKind, count: usize, len: usize) {
    let count = ((count as f64) * scale()).round() as usize;
    let jobs = (0..count)
        .map(|i| {
            let s = ferrite_crashcheck::hash::mix(seed() ^ 0x2C0 ^ (i as u64) << 8 ^ kind as u64);
            (kind, random_workload_zc(s, len))
        })
        .collect();
    run(&format!("zc random {}", kind.name()), jobs, &config(32, RecoveryCrash::Off));
}

/// Workloads recorded on a pool file (`exec::Backing::File`): views map
/// the pool's pages and patch buffers are pool pages mapped writable, so
/// the write-back of a mapped buffer is in the trace and a page changed
/// under a view shows in the live view check. Checked one after the other
/// (as `run`, without its worker threads).
fn on_file(kind: StartKind, name: &str, workloads: Vec<ferrite_crashcheck::workload::Workload>, cfg: &Config) {
    ferrite_crashcheck::tune_allocator();
    let st = start(kind);
    let t0 = std::time::Instant::now();
    let mut total = Figures::default();
    let mut failures = Vec::new();
    let n = workloads.len();
    for mut w in workloads {
        // Its tokens replay on a pool file too (`token::replay`).
        w.id = format!("file.{}", w.id);
        let rec = record_on(&st, &w, Backing::File);
        let (f, fl) = check_recording(kind, &rec, cfg);
        total.add(&f);
        failures.extend(fl);
    }
    total.elapsed = t0.elapsed();
    common::report(name, n, &total, &failures);
}

#[test]
fn zc_seq1_empty_file() {
    on_file(StartKind::Empty, "zc seq1 empty (pool file)", zc_seq1(), &config(128, RecoveryCrash::Busy));
}

#[test]
fn zc_random_empty_file() {
    let count = ((8.0 * scale()).round() as usize).max(1);
    let ws = (0..count)
        .map(|i| random_workload_zc(ferrite_crashcheck::hash::mix(seed() ^ 0xF11E ^ (i as u64) << 8), 24))
        .collect();
    on_file(StartKind::Empty, "zc random empty (pool file)", ws, &config(32, RecoveryCrash::Off));
}

#[test]
fn zc_seq1_empty() {
    seq1_on(StartKind::Empty);
}

#[test]
fn zc_seq1_aged() {
    seq1_on(StartKind::Aged);
}

#[test]
fn zc_seq1_full() {
    seq1_on(StartKind::Full);
}

#[test]
fn zc_seq1_logedge() {
    seq1_on(StartKind::LogEdge);
}

#[test]
fn zc_seq2_empty_0() {
    seq2_on(StartKind::Empty, 0, 2, 1.0);
}

#[test]
fn zc_seq2_empty_1() {
    seq2_on(StartKind::Empty, 1, 2, 1.0);
}

#[test]
fn zc_seq2_full() {
    seq2_on(StartKind::Full, 0, 1, 0.25);
}

#[test]
fn zc_random_empty() {
    random_on(StartKind::Empty, 8, 24);
}

#[test]
fn zc_random_logedge() {
    random_on(StartKind::LogEdge, 8, 24);
}

/// The catalogue does what it is named for (from the engine's counters of
/// live views and buffers after each call, its results, and the entries
/// each call staged, decoded from its trace), so that a change of the
/// engine cannot silently drop the coverage: the crash points of the
/// `*_live` operations have buffers or views live, a patch consumes its
/// buffer and stages a Write entry (an aligned one no Inline entry), a
/// failed patch keeps its buffer for a later patch, a clean unmount
/// releases what is live, and a patch of an fsync-atomic file stays
/// pending until its fsync commits it.
#[test]
fn zc_catalogue_reaches_its_paths() {
    use ferrite::format::Entry;
    use ferrite::Errno;
    use ferrite_crashcheck::exec::{record, Recording};
    use ferrite_crashcheck::workload::workload_by_id;
    let st = start(StartKind::Empty);
    let kinds = |rec: &Recording, i: usize| -> Vec<&'static str> {
        rec.staged_entries(i)
            .iter()
            .map(|(_, e)| match e {
                Entry::Inline(_) => "inline",
                Entry::Write(_) => "write",
                _ => "other",
            })
            .collect()
    };
    let live = |r: &Recording, i: usize| (r.outcomes[i].live_views, r.outcomes[i].live_buffers);
    let mut problems = Vec::new();
    let mut check = |id: &str, f: &dyn Fn(&Recording) -> bool, what: &str| {
        let rec = record(&st, &workload_by_id(id).expect("workload"));
        let seen: Vec<String> = (0..rec.outcomes.len())
            .map(|i| {
                let o = &rec.outcomes[i];
                format!(
                    "call {i}: {:?} {:?} views {} buffers {} epochs {} pending {}",
                    o.engine,
                    kinds(&rec, i),
                    o.live_views,
                    o.live_buffers,
                    o.epoch_commits,
                    o.pending_files
                )
            })
            .collect();
        if !rec.divergences.is_empty() || !f(&rec) {
            problems.push(format!("{id}: {what}; {} {:?}", seen.join("; "), rec.divergences));
        }
    };
    for name in [
        "patch_page",
        "patch_partial_last_past_eof",
        "patch_into_holes",
        "patch_partial_page_over_data",
        "patch_past_eof_hole",
        "patch_empty_file",
        "patch_short_of_buffer",
    ] {
        check(
            &format!("z1.{name}"),
            &|r| {
                live(r, 0) == (0, 1)
                    && live(r, 1) == (0, 0)
                    && r.outcomes[1].engine.is_ok()
                    && kinds(r, 1).contains(&"write")
                    && !kinds(r, 1).contains(&"inline")
            },
            "a filled buffer live, then a zero-copy patch (Write entries) that consumes it",
        );
    }
    for name in ["patch_unaligned_small", "patch_unaligned_crossing", "patch_unaligned_past_eof"] {
        check(
            &format!("z1.{name}"),
            &|r| {
                live(r, 0) == (0, 1) && live(r, 1) == (0, 0) && r.outcomes[1].engine.is_ok() && !kinds(r, 1).is_empty()
            },
            "a filled buffer live, then a copying patch that logs its data and consumes the buffer",
        );
    }
    check(
        "z1.patch_over_inline",
        &|r| {
            kinds(r, 0) == ["inline"]
                && live(r, 2) == (0, 0)
                && kinds(r, 2).contains(&"write")
                && !kinds(r, 2).contains(&"inline")
        },
        "an inline delta, then a zero-copy patch over it",
    );
    check("z1.buffer_live", &|r| live(r, 0) == (0, 1), "a buffer live at the end (the crash)");
    check(
        "z1.buffer_live_write",
        &|r| live(r, 1) == (0, 1) && r.outcomes[1].engine == Ok(8192),
        "a buffer live while a write allocates pages",
    );
    check("z1.buffer_freed", &|r| live(r, 1) == (0, 0), "the buffer freed");
    check(
        "z1.patch_failed_then_reused",
        &|r| {
            r.outcomes[1].engine == Err(Errno::EFBIG)
                && live(r, 1) == (0, 1)
                && r.outcomes[3].engine.is_ok()
                && live(r, 3) == (0, 0)
        },
        "EFBIG keeps the buffer, which a later patch takes",
    );
    check(
        "z1.map_after_shrink",
        &|r| r.outcomes[1].engine.is_ok() && live(r, 1) == (1, 0),
        "a mapping of a page past the end of a shrunk file",
    );
    for name in ["peek_live_overwrite", "peek_live_truncate", "peek_live_unlink"] {
        check(
            &format!("z1.{name}"),
            &|r| r.outcomes.iter().all(|o| o.engine.is_ok() && o.live_views == 1),
            "a view live from its peek to the end (the crash)",
        );
    }
    check(
        "z1.peek_unlinked_open",
        &|r| r.outcomes.iter().all(|o| o.engine.is_ok()) && live(r, 2) == (1, 0),
        "a view of an unlinked open file, live past its last close",
    );
    check(
        "z1.peek_unpeek_after_write",
        &|r| live(r, 1) == (1, 0) && live(r, 2) == (0, 0),
        "a view live over a write, then released",
    );
    check("z1.map_private_store", &|r| live(r, 0) == (1, 0), "a private mapping live at the end");
    check(
        "z1.remount_with_live",
        &|r| live(r, 2) == (1, 1) && live(r, 3) == (0, 0),
        "a view and a buffer live until the clean unmount releases them",
    );
    check(
        "z1.fa_patch_pending",
        &|r| r.outcomes[2].engine.is_ok() && r.outcomes[2].pending_files == 1,
        "a patch of an fsync-atomic file stays pending",
    );
    for name in ["fa_patch_fsync", "fa_patch_unaligned_fsync"] {
        check(
            &format!("z1.{name}"),
            &|r| {
                r.outcomes[2].pending_files == 1 && r.outcomes[3].epoch_commits == 1 && r.outcomes[3].pending_files == 0
            },
            "a patch pending in an fsync-atomic file, committed by fsync",
        );
    }
    check(
        "z1.fa_peek_epoch_page",
        &|r| live(r, 3) == (1, 0) && r.outcomes[3].engine == Ok(100) && r.outcomes[4].epoch_commits == 1,
        "a view of a page of the epoch, a write over it, then the fsync",
    );
    // On the nearly full image a patch fails for lack of space and keeps
    // its buffer (and the buffer its pages: the write that follows finds
    // no room either), and the buffer is then patched.
    let full = start(StartKind::Full);
    let rec = record(&full, &workload_by_id("z1.patch_enospc_then_reused").expect("workload"));
    let o = &rec.outcomes;
    if !(rec.divergences.is_empty()
        && o[1].engine == Err(Errno::ENOSPC)
        && o[1].live_buffers == 1
        && o[2].engine == Err(Errno::ENOSPC)
        && o[3].engine.is_ok()
        && o[3].live_buffers == 0)
    {
        problems.push(format!(
            "z1.patch_enospc_then_reused on the full image: ENOSPC keeps the buffer and its pages, then a patch takes it; got {:?} {:?}",
            o.iter().map(|o| (o.engine, o.live_buffers)).collect::<Vec<_>>(),
            rec.divergences
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
