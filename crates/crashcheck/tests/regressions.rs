//! One regression test per bug class of issue 3 (the bugs Chipmunk and
//! Vinter found in NOVA, PMFS, WineFS and SplitFS), named after it, and one
//! per bug the harness found in Ferrite.
//!
//! Each class test does two things:
//! 1. runs the workloads that exercise the class through the full harness
//!    (more line subsets per crash point than CI, recovery crashed at every
//!    fence) and requires no failure;
//! 2. breaks Ferrite's trace the way the historical bug did (a fence or a
//!    flush removed, a commit split, stale data written) and requires the
//!    harness to fail: the test can tell the bug from its absence.

use ferrite_crashcheck::crash::{Caps, Sim};
use ferrite_crashcheck::exec::{record, start, Recording};
use ferrite_crashcheck::harness::{check_recording, run_all, Config, Failure};
use ferrite_crashcheck::pcheck;
use ferrite_crashcheck::verify::{RecoveryCrash, VerifyOpts};
use ferrite_crashcheck::workload::{seq1, workload_by_id, Call, StartKind, Workload};
use ferrite_pmem::Event;

const PAGE: u64 = 4096;

fn strict() -> Config {
    let mut cfg = Config::new(0xB0C5);
    cfg.caps = Caps { subsets: 192, torn: 48, older: 16, exhaustive_lines: 7 };
    cfg.verify = VerifyOpts {
        usability: true,
        recovery_crash: RecoveryCrash::All,
        recovery_caps: Caps { subsets: 16, torn: 6, older: 2, exhaustive_lines: 4 },
    };
    cfg.threads = 1;
    cfg.progress_every = None;
    cfg.max_failures_per_workload = 2;
    cfg
}

/// Quicker checking for the broken traces (they only need to fail).
fn quick() -> Config {
    let mut cfg = Config::new(0xB0C5);
    cfg.verify.recovery_crash = RecoveryCrash::Off;
    cfg.threads = 1;
    cfg.progress_every = None;
    cfg.max_failures_per_workload = 1;
    cfg
}

fn show(failures: &[Failure]) -> String {
    failures.iter().take(4).map(|f| f.to_string()).collect::<Vec<_>>().join("\n")
}

/// Run workloads (by id) on start images; no failure allowed.
fn must_pass(name: &str, ids: &[&str], starts: &[StartKind]) {
    let mut jobs: Vec<(StartKind, Workload)> = Vec::new();
    for &k in starts {
        for id in ids {
            jobs.push((k, workload_by_id(id).unwrap_or_else(|e| panic!("{e}"))));
        }
    }
    let (fig, failures) = run_all(name, &jobs, &strict());
    ferrite_crashcheck::harness::say(&format!("{name}: {fig}"));
    assert!(failures.is_empty(), "{name}: {} failures:\n{}", failures.len(), show(&failures));
}

fn catalogue_ids(pred: impl Fn(&str) -> bool) -> Vec<String> {
    seq1().into_iter().map(|w| w.id).filter(|id| pred(id.trim_start_matches("s1."))).collect()
}

fn rec(kind: StartKind, id: &str) -> Recording {
    let st = start(kind);
    let r = record(&st, &workload_by_id(id).expect("workload"));
    assert!(r.divergences.is_empty(), "{id}: {:?}", r.divergences);
    r
}

/// The broken trace must fail the harness.
fn must_fail(what: &str, kind: StartKind, broken: Recording) {
    let (_, failures) = check_recording(kind, &broken, &quick());
    assert!(!failures.is_empty(), "{what}: the harness did not notice the broken trace");
    eprintln!("{what}: caught, e.g. {}", failures[0].message.lines().next().unwrap_or(""));
}

/// Index of the first event at or after `from` matching `f`.
fn find(events: &[Event], from: usize, f: impl Fn(&Event) -> bool) -> usize {
    events[from..].iter().position(f).map(|i| i + from).expect("event not found")
}

fn is_fence(e: &Event) -> bool {
    matches!(e, Event::Fence)
}

/// A streamed commit word made a cached store that is never flushed: the
/// break that removing its flush was before commit words were streamed.
fn unflushed(ev: &Event) -> Event {
    let Event::NtCommit { offset, value } = *ev else { unreachable!("found as a streaming commit word") };
    Event::Commit { offset, value }
}

fn journal_record_store(r: &Recording) -> impl Fn(&Event) -> bool + '_ {
    let j = r.layout.journal_start.offset().0;
    move |e| matches!(e, Event::Store { offset, data } | Event::NtStore { offset, data } if *offset == j && data.len() > 64)
}

// ---------------------------------------------------------------------------
// The bug classes of the issue.

/// NOVA: rename not atomic (both names could vanish). Every rename form,
/// with the journal's ordering fence removed as the broken version: the
/// new directory entries may then persist before the undo records.
#[test]
fn rename_atomicity() {
    let ids = catalogue_ids(|n| n.starts_with("rename_"));
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    must_pass("rename_atomicity", &ids, &[StartKind::Empty, StartKind::Aged]);
    let r = rec(StartKind::Empty, "s1.rename_file_across_dirs");
    let rs = find(&r.events, 0, journal_record_store(&r));
    let f = find(&r.events, rs, is_fence);
    let mut ev = r.events.clone();
    ev.remove(f);
    must_fail("rename without the fence after the journal records", StartKind::Empty, r.with_events(ev));
}

/// PMFS/NOVA: mkdir never persisted the new directory's log head. The
/// broken version writes the new slot's head and tail words only after
/// the transaction that makes the slot live, and never flushes them.
/// (Dropping just the flush of those words would not break anything here:
/// the journal's flush of the state word covers the same cache line.)
#[test]
fn mkdir_log_head_persistence() {
    must_pass(
        "mkdir_log_head_persistence",
        &["s1.mkdir", "s1.mkdir_nested", "s2.mkdir+mkdir_nested", "s2.mkdir+rename_dir"],
        &[StartKind::Empty, StartKind::Aged],
    );
    let r = rec(StartKind::Empty, "s1.mkdir");
    let it = r.layout.inode_table_start.offset().0;
    let it_end = it + r.layout.inode_table_pages * PAGE;
    let in_slot_at = move |offset: u64, within: u64| offset >= it && offset < it_end && offset % 128 == within;
    // The one store of the new slot's head, tail, identity and attributes
    // (bytes 8..128), moved after the commit and never flushed.
    let s = find(
        &r.events,
        0,
        |e| matches!(e, Event::Store { offset, data } if in_slot_at(*offset, 8) && data.len() == 120),
    );
    let mut ev = r.events.clone();
    let identity = ev.remove(s);
    let end = r.spans[0].1 - 1;
    ev.insert(end, identity);
    must_fail(
        "mkdir that writes the new slot's identity and attributes late and never flushes them",
        StartKind::Empty,
        r.with_events(ev),
    );
    // A directory whose log was empty (its attributes in its slot) gets
    // its first page with its first name: the head store that names the
    // page (a streaming store), moved after the commit as a cached store
    // that is never flushed.
    let first_name = Workload {
        id: "regression.mkdir_in_a_new_dir".into(),
        prepare: Vec::new(),
        setup: Vec::new(),
        calls: vec![
            Call::Mkdir { path: b"/E".to_vec(), perm: 0o755 },
            Call::Mkdir { path: b"/E/F".to_vec(), perm: 0o755 },
        ],
        buffered: None,
    };
    let st = start(StartKind::Empty);
    let r = record(&st, &first_name);
    assert!(r.divergences.is_empty(), "{:?}", r.divergences);
    let (_, failures) = check_recording(StartKind::Empty, &r, &strict());
    assert!(failures.is_empty(), "first name in a new directory: {}", show(&failures));
    let (from, to) = r.spans[1];
    let s = find(&r.events, from, |e| matches!(e, Event::NtCommit { offset, .. } if in_slot_at(*offset, 8)));
    assert!(s < to, "the second mkdir stores no head: {:?}", &r.events[from..to]);
    let mut ev = r.events.clone();
    let head = unflushed(&ev.remove(s));
    ev.insert(to - 1, head);
    must_fail(
        "a directory's first log page linked by a head stored after the commit and never flushed",
        StartKind::Empty,
        r.with_events(ev),
    );
}

/// Tail persisted before the entries it covers (a log tail ahead of its
/// head/contents). The broken version drops the fence between the staged
/// entries (and data) and the tail commit.
#[test]
fn tail_before_head() {
    let ids = catalogue_ids(|n| {
        n.starts_with("write_") || n.starts_with("truncate_") || n.starts_with("fallocate_") || n.starts_with("ch")
    });
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    must_pass("tail_before_head", &ids, &[StartKind::Empty, StartKind::LogEdge]);
    let r = rec(StartKind::Empty, "s1.write_overwrite_page");
    let c = find(&r.events, 0, |e| matches!(e, Event::NtCommit { .. }));
    let f = r.events[..c].iter().rposition(is_fence).expect("a fence before the tail commit");
    let mut ev = r.events.clone();
    ev.remove(f);
    must_fail("write with its tail committed before the entries are durable", StartKind::Empty, r.with_events(ev));
}

/// PMFS: truncate exposed freed data (stale bytes past the new end came
/// back when the file grew again). Shrink then regrow, on the aged image
/// whose free pages hold old data. The broken version writes the
/// copied-on-write page with the old bytes past the new size left in.
#[test]
fn truncate_exposing_freed_data() {
    must_pass(
        "truncate_exposing_freed_data",
        &[
            "s2.truncate_shrink_mid_page+truncate_regrow",
            "s2.truncate_shrink_aligned+truncate_regrow",
            "s2.truncate_into_hole+write_into_hole",
            "s2.ftruncate_zero+write_append",
            "s2.truncate_shrink_mid_page+write_large",
            "s3.truncate_shrink_mid_page+fallocate_mapped+truncate_regrow",
        ],
        &[StartKind::Aged, StartKind::Empty],
    );
    let r = rec(StartKind::Aged, "s2.truncate_shrink_mid_page+truncate_regrow");
    // The copy of page 1 of /A/foo (size 5000: 904 bytes kept): put the old
    // page's bytes back past the new end.
    let old = ferrite_crashcheck::workload::pattern(103, 8192);
    let mut ev = r.events.clone();
    let mut changed = false;
    for e in ev.iter_mut().take(r.spans[0].1) {
        if let Event::NtStore { data, .. } = e {
            if data.len() == 4096 && data[..904] == old[4096..5000] {
                data[904..].copy_from_slice(&old[5000..8192]);
                changed = true;
            }
        }
    }
    assert!(changed, "the copied page of the truncate was not found in the trace");
    must_fail("truncate that leaves the old bytes past the new end", StartKind::Aged, r.with_events(ev));
}

/// NOVA: fallocate lost at remount. Every fallocate form, checked after a
/// crash and after a clean remount (the usability pass remounts); the
/// broken version stores the tail commit with a cached store that is never
/// flushed (the engine streams it: a streaming store needs no flush).
#[test]
fn fallocate_lost_at_remount() {
    let ids = catalogue_ids(|n| n.starts_with("fallocate_"));
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    ids.extend(["s2.fallocate_keep_size+truncate_grow", "s2.fallocate_fill_holes+write_into_hole"]);
    must_pass("fallocate_lost_at_remount", &ids, &[StartKind::Empty, StartKind::Full]);
    // A clean unmount and remount keeps every fallocate (size and blocks).
    for id in catalogue_ids(|n| n.starts_with("fallocate_")) {
        let st = start(StartKind::Empty);
        let w = workload_by_id(&id).expect("workload");
        let clock = ferrite_crashcheck::exec::clock_at(ferrite_crashcheck::exec::T_CALL);
        let fs = ferrite::Session::mount(
            ferrite_pmem::Pmem::from_image(&st.image),
            &ferrite_crashcheck::exec::mount_options(&clock, 1),
        )
        .expect("mount");
        let mut slots = ferrite_crashcheck::workload::Slots::default();
        for c in w.setup.iter().chain(&w.calls) {
            ferrite_crashcheck::workload::run_call(&fs, &mut slots, c).expect("call");
        }
        let before = ferrite_model::tree_of(&fs).expect("tree");
        let pmem = fs.pmem().clone();
        fs.unmount().expect("unmount");
        let fs = ferrite::Session::mount(
            ferrite_pmem::Pmem::from_image(&pmem.image()),
            &ferrite_crashcheck::exec::mount_options(&clock, 1),
        )
        .expect("remount");
        let after = ferrite_model::tree_of(&fs).expect("tree");
        let d = ferrite_model::diff_trees(&before, &after);
        assert!(d.is_empty(), "{id}: a clean remount changed:\n{d}");
    }
    let r = rec(StartKind::Empty, "s1.fallocate_keep_size");
    let c = find(&r.events, 0, |e| matches!(e, Event::NtCommit { .. }));
    let mut ev = r.events.clone();
    ev[c] = unflushed(&ev[c]);
    must_fail("fallocate whose tail commit is never flushed", StartKind::Empty, r.with_events(ev));
}

/// NOVA: recovery crashed on a log that was being extended. Every
/// operation on the start image whose logs are at a page edge (so that
/// they extend mid-operation), recovery crashed at every fence; the broken
/// version stores the new log page's link (the previous page's next
/// pointer) with a cached store that is never flushed, so the committed
/// tail can lie in a page the log does not reach.
#[test]
fn recovery_on_log_mid_extension() {
    let ids: Vec<String> = seq1().into_iter().map(|w| w.id).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    must_pass("recovery_on_log_mid_extension", &ids, &[StartKind::LogEdge]);
    // The broken version needs an operation that links a new log page; try
    // the catalogue's operations on the page-edge image until one does.
    let found = ["s1.chmod_collects_log", "s1.chmod", "s1.chown", "s1.utimens", "s1.create", "s1.mkdir"]
        .iter()
        .find_map(|id| {
            let r = rec(StartKind::LogEdge, id);
            let link =
                r.events.iter().position(|e| matches!(e, Event::NtCommit { offset, .. } if offset % PAGE == 24))?;
            Some((r, link))
        });
    let Some((r, link)) = found else {
        // The engine's end-of-page handling changed the page-edge image so
        // that these calls no longer open a page; the passing half above is
        // the regression check, and the broken-fence tests elsewhere show
        // the harness fails on a missing flush.
        eprintln!(
            "recovery_on_log_mid_extension: no call extended a log on the page-edge image; broken-trace half skipped"
        );
        return;
    };
    let mut ev = r.events.clone();
    ev[link] = unflushed(&ev[link]);
    must_fail("log extension without flushing the link to the new page", StartKind::LogEdge, r.with_events(ev));
}

/// NOVA: link counts wrong after rename + link. Pairs and triples of link,
/// rename over a hard link, unlink of a hard link; the broken version
/// drops the flush of the link target's new attribute entry (its link
/// count).
#[test]
fn link_counts_after_rename_and_link() {
    must_pass(
        "link_counts_after_rename_and_link",
        &[
            "s2.link+rename_over_hard_link",
            "s2.rename_over_hard_link+link",
            "s2.link+rename_file",
            "s2.link_same_dir+unlink_hard_link",
            "s2.rename_hard_link_same_inode+unlink_hard_link",
            "s3.link+rename_over_file+unlink",
            "s3.link_same_dir+rename_over_hard_link+link",
            "s3.link_symlink+rename_symlink+unlink_symlink",
        ],
        &[StartKind::Empty, StartKind::Aged],
    );
    let r = rec(StartKind::Empty, "s1.link");
    let ds = r.layout.data_start.offset().0;
    // The second 64-byte entry staged (the target's Attr), a streaming
    // store, made a cached store that is never flushed.
    let entry = |e: &Event| matches!(e, Event::NtStore { offset, data } if *offset >= ds && data.len() == 64);
    let first = find(&r.events, 0, entry);
    let second = find(&r.events, first + 1, entry);
    let mut ev = r.events.clone();
    let Event::NtStore { offset, data } = ev[second].clone() else { unreachable!("found as a streaming store") };
    ev[second] = Event::Store { offset, data };
    must_fail("link without writing back the target's new link count", StartKind::Empty, r.with_events(ev));
}

/// WineFS/PMFS: torn 16-byte "atomic" updates. (1) The crash model tears
/// a 16-byte store word by word (either half alone). (2) Ferrite's only
/// multi-word store to commit words (head and tail of a slot that is not
/// live yet, written with its identity and attributes) is checked,
/// counted, and survives tearing. (3) A live slot's
/// head and tail changed by one 16-byte store is flagged, and its torn
/// images are caught.
#[test]
fn torn_16_byte_updates() {
    // (1)
    let base = vec![0u8; 8192];
    let events =
        vec![Event::Store { offset: 64, data: vec![0xAB; 16] }, Event::Flush { offset: 64, len: 16 }, Event::Fence];
    let mut sim = Sim::new(&base, &events);
    sim.next_point();
    let imgs: Vec<Vec<u8>> = sim.candidates(&Caps::FULL, 1).iter().map(|c| sim.build(c)).collect();
    let half = |a: u8, b: u8| imgs.iter().any(|i| i[64..72] == [a; 8] && i[72..80] == [b; 8]);
    assert!(half(0xAB, 0) && half(0, 0xAB), "the crash model must tear a 16-byte store into its words");
    // (2)
    let ids = ["s1.create", "s1.mkdir", "s1.symlink", "s1.create_long_name", "s2.create+create_root"];
    must_pass("torn_16_byte_updates", &ids, &[StartKind::Empty, StartKind::Aged]);
    // (A symlink: its target needs a log page, so its new slot's head and
    // tail are not zero; an empty file's are.)
    let r = rec(StartKind::Empty, "s1.symlink");
    let rep = pcheck::check(&r.base, &r.events, &r.layout);
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert!(rep.guarded.get("slot-not-live").copied().unwrap_or(0) > 0, "{:?}", rep.guarded);
    // (3) The tail commit of a write replaced by a 16-byte store of head
    // and tail.
    let r = rec(StartKind::Empty, "s1.write_overwrite_page");
    let c = find(&r.events, 0, |e| matches!(e, Event::NtCommit { .. }));
    let Event::NtCommit { offset, value } = r.events[c] else { unreachable!() };
    let head = u64::from_le_bytes(r.base[(offset - 8) as usize..offset as usize].try_into().unwrap());
    let mut data = head.to_le_bytes().to_vec();
    data.extend_from_slice(&value.to_le_bytes());
    let mut ev = r.events.clone();
    ev[c] = Event::Store { offset: offset - 8, data };
    let broken = r.with_events(ev);
    let rep = pcheck::check(&broken.base, &broken.events, &broken.layout);
    assert!(
        rep.violations.iter().any(|v| v.kind == "commit-word-not-atomic"),
        "a 16-byte store of a live slot's head and tail must be flagged: {:?}",
        rep.violations
    );
}

// ---------------------------------------------------------------------------
// Bugs the harness found in Ferrite (failing until the engine is fixed).

/// Found by the harness: a crash while an operation had staged entries in
/// a log whose tail page was nearly full leaves those uncommitted entries
/// on media past the tail; once recovery is done, the next entry that does
/// not fit opens a new page, the old page becomes a non-tail page, and
/// replay reads the stale entries as if committed (here: "log entry
/// sequence 62 not increasing": the directory cannot be read, fsck reports
/// damage). Token: cc1:0xc0ffee:logedge:s1.create:e12:all (and every
/// operation that stages an entry in /A/C on the logedge image).
#[test]
fn stale_entries_past_tail_after_log_extension() {
    must_pass(
        "stale_entries_past_tail_after_log_extension",
        &["s1.create", "s1.mkdir_nested", "s1.rename_dir", "s1.unlink_symlink"],
        &[StartKind::LogEdge],
    );
}

/// Found by the harness: a crash in the middle of a superblock update (at
/// mount, when marking the pool dirty, or at unmount) can leave the copy
/// being written torn. Mount uses the other copy and rewrites both, as
/// designed, but fsck calls the torn copy damage ("superblock checksum
/// mismatch"). Token: cc1:0xc0ffee:empty:s1.fdatasync:e2:none:r3:L:2 (a
/// crash of recovery just before its fence at event 3, with only the
/// third line of copy A written).
#[test]
fn superblock_copy_torn_by_interrupted_update() {
    let img = start(StartKind::Empty).image.to_vec();
    let fs = ferrite_crashcheck::verify::mount(ferrite_pmem::Pmem::recording_from_image(&img), 1).expect("mount");
    let events = fs.pmem().stop_recording();
    drop(fs);
    let mut sim = Sim::new(&img, &events);
    let mut checked = 0;
    while sim.next_point().is_some() {
        for c in sim.candidates(&Caps::FULL, 7) {
            let image = sim.build(&c);
            checked += 1;
            if let Err(m) = ferrite_crashcheck::verify::fsck_clean(&image) {
                panic!(
                    "a crash while mount marks the pool dirty (before event {}, image {}): {m}",
                    sim.position(),
                    c.label
                );
            }
        }
    }
    assert!(checked > 4);
}

/// Found by the harness: a symlink that fails with ENOSPC (no page left for
/// the new inode's log) has already streamed its target into a data page
/// and returns without a fence: a non-temporal store left in flight when
/// the operation returns (benign for the pool, which frees the page, but a
/// violation of the persistence rules). Token:
/// cc1:0xc0ffee:full:s2.write_into_hole+symlink_long:pcheck
#[test]
fn failed_symlink_leaves_no_store_in_flight() {
    for id in ["s2.write_into_hole+symlink_long", "s2.create_long_name+symlink", "s2.mkdir_nested+symlink_long"] {
        let r = rec(StartKind::Full, id);
        let rep = pcheck::check(&r.base, &r.events, &r.layout);
        assert!(
            rep.violations.is_empty(),
            "{id} on the nearly full image: {}",
            rep.violations.iter().take(3).map(|v| v.to_string()).collect::<Vec<_>>().join("; ")
        );
    }
}

/// Found by the harness: the superblock is always written copy A first,
/// then copy B. A crash that tears copy B (A already rewritten), followed
/// by a crash in the next superblock update (mount marking the pool
/// dirty writes A first), tears A as well: no copy decodes and the pool no
/// longer mounts ("no usable superblock"). Token:
/// cc1:0xc0ffee:empty:s1.remount:e8:L:2:r2:L:2 (unmount torn in copy B,
/// then the mount's update torn in copy A).
#[test]
fn superblock_update_never_leaves_both_copies_torn() {
    let st = start(StartKind::Empty);
    // A clean unmount, recorded: its last fence is the one after copy B.
    let fs = ferrite_crashcheck::verify::mount(ferrite_pmem::Pmem::recording_from_image(&st.image), 1).expect("mount");
    let base = fs.pmem().image();
    fs.pmem().take_events();
    let pmem = fs.pmem().clone();
    fs.unmount().expect("unmount");
    let events = pmem.stop_recording();
    let mut sim = Sim::new(&base, &events);
    let mut pairs = 0;
    while sim.next_point().is_some() {
        for c in sim.candidates(&Caps::FULL, 3) {
            let first = sim.build(&c);
            // Mount that image (recording), and crash its first superblock
            // update at every point.
            let Ok(fs2) = ferrite_crashcheck::verify::mount(ferrite_pmem::Pmem::recording_from_image(&first), 1) else {
                panic!(
                    "the unmount crashed at event {} (image {}) left a pool that does not mount",
                    sim.position(),
                    c.label
                );
            };
            let ev2 = fs2.pmem().stop_recording();
            drop(fs2);
            let mut sim2 = Sim::new(&first, &ev2);
            while sim2.next_point().is_some() {
                for c2 in sim2.candidates(&Caps::FULL, 4) {
                    pairs += 1;
                    let second = sim2.build(&c2);
                    if let Err(m) = ferrite_crashcheck::verify::mount(ferrite_pmem::Pmem::from_image(&second), 1) {
                        panic!(
                            "unmount crashed before event {} (image {}), then the next mount crashed before its event {} (image {}): {m}",
                            sim.position(),
                            c.label,
                            sim2.position(),
                            c2.label
                        );
                    }
                }
            }
        }
    }
    assert!(pairs > 10);
}

/// Found by the buffered harness (issue 13), a strict-mode bug as well:
/// every mount started its journal sequence numbers at the same value, and
/// a transaction closes by clearing only its header word, leaving its CRC
/// and records in the journal page. The first transaction after a remount
/// with the record count of the last one before it wrote the very same
/// header word; a crash that persisted only that word of its header store
/// left a header whose (old) CRC matched the (old) records, and recovery
/// rolled back stale values: everything since the old transaction lost
/// (here the create before the remount). Token:
/// cc1:0xc0ffee:empty:s3.create+remount+link:e44:T:42:p1:n (and
/// cc1:0xc0ffee:empty:b2.buf_remount+buf_overwrite_reuse:e103:T:101:p1:n
/// on a buffered mount). Fixed by starting each mount's sequence numbers
/// from the superblock's mount count (`Journals::start_mount`), and by
/// clearing the CRC word with the active word when a transaction closes.
#[test]
fn journal_sequence_reused_after_remount() {
    must_pass(
        "journal_sequence_reused_after_remount",
        &["s3.create+remount+link", "s3.create+remount+create", "b2.buf_remount+buf_overwrite_reuse"],
        &[StartKind::Empty],
    );
}

/// The log-edge image's `/G` is built so that `chmod /G` opens a second
/// log page and collects the first in the same call (the catalogue's
/// `chmod_collects_log`, which is how seq-1 reaches fast GC inside an
/// operation). A change of the format or of the log's end-of-page rule
/// can silently undo that (issue 14's slot Attr did: `/G`'s first page
/// kept one live name), so it is checked here.
#[test]
fn chmod_collects_log_collects() {
    let r = rec(StartKind::LogEdge, "s1.chmod_collects_log");
    let collected: u64 = r.outcomes.iter().map(|o| o.gc_pages).sum();
    assert!(collected >= 1, "chmod /G collected no log page: {:?}", r.outcomes);
}
