//! Self-tests of the harness: the persistence model, the persistence
//! checker on hand-made traces (strict and fsync-atomic rules), tokens,
//! determinism (a token replays only if recording a workload twice gives
//! the same trace), the fsync-atomic oracle (it tells a committed
//! write from a pending one, both ways), and the prefix oracle of buffered
//! mounts (its ranges, and a sync point that persists nothing fails).

use ferrite::format::Layout;
use ferrite_crashcheck::crash::{Caps, PointKind, Sim};
use ferrite_crashcheck::exec::{begin_mark, end_mark, record, start};
use ferrite_crashcheck::pcheck;
use ferrite_crashcheck::token::{replay, Token};
use ferrite_crashcheck::workload::{random_workload, workload_by_id, StartKind};
use ferrite_pmem::Event;

fn store(offset: u64, byte: u8, len: usize) -> Event {
    Event::Store { offset, data: vec![byte; len] }
}

/// Vinter's model on a hand-made trace: what is durable, what is pending,
/// per-word prefixes, non-temporal stores and streamed commit words.
#[test]
fn persistence_model() {
    let base = vec![0u8; 8192];
    let events = vec![
        store(0, 1, 8),                                    // 0: line 0, flushed + fenced below
        Event::Flush { offset: 0, len: 8 },                // 1
        store(64, 2, 8),                                   // 2: line 1, never flushed
        store(0, 3, 8),                                    // 3: line 0 again, after its flush
        Event::Fence,                                      // 4
        Event::NtStore { offset: 128, data: vec![4; 64] }, // 5
        Event::Commit { offset: 192, value: u64::MAX },    // 6
        Event::Flush { offset: 192, len: 8 },              // 7
        Event::NtCommit { offset: 256, value: 5 },         // 8: streamed word, no flush
        Event::Fence,                                      // 9
        Event::Mark { label: 1 },                          // 10
    ];
    let mut sim = Sim::new(&base, &events);
    assert_eq!(sim.next_point(), Some(PointKind::Fence));
    assert_eq!(sim.position(), 4);
    assert!(sim.persisted().iter().all(|&b| b == 0), "nothing is durable before the first fence");
    // Word 0 has two pending writes: the older value alone is a candidate.
    let c = sim.candidates(&Caps::FULL, 1);
    let imgs: Vec<Vec<u8>> = c.iter().map(|c| sim.build(c)).collect();
    assert!(imgs.iter().any(|i| i[0] == 1), "an in-order prefix (first write only) of word 0");
    assert!(imgs.iter().any(|i| i[0] == 3 && i[64] == 0), "line 0 without line 1");
    assert!(imgs.iter().any(|i| i[0] == 0 && i[64] == 2), "line 1 without line 0");
    assert!(!imgs.iter().any(|i| i[0] == 3 && i[1] == 1), "never a later write without the bytes it overwrote");
    assert_eq!(sim.next_point(), Some(PointKind::Fence));
    assert_eq!(sim.position(), 9);
    assert_eq!(&sim.persisted()[0..8], &[1; 8], "the flushed write is durable, the one after the flush is not");
    assert_eq!(sim.persisted()[128], 0, "a streamed store is not durable before its fence");
    let c = sim.candidates(&Caps::FULL, 1);
    assert!(c.iter().map(|c| sim.build(c)).any(|i| i[128] == 4 && i[192] == 0), "a streamed store may persist early");
    assert_eq!(sim.persisted()[256], 0, "a streamed commit word is not durable before its fence");
    let imgs: Vec<Vec<u8>> = c.iter().map(|c| sim.build(c)).collect();
    assert!(imgs.iter().any(|i| i[256] == 5 && i[192] == 0), "a streamed commit word may persist early");
    assert!(imgs.iter().any(|i| i[256] == 0), "or not at all before its fence");
    assert!(imgs.iter().all(|i| i[256..264] == [5, 0, 0, 0, 0, 0, 0, 0] || i[256..264] == [0; 8]), "and never torn");
    assert_eq!(sim.next_point(), Some(PointKind::Mark(1)));
    assert_eq!(&sim.persisted()[128..192], &[4; 64]);
    assert_eq!(&sim.persisted()[192..200], &[0xFF; 8]);
    assert_eq!(&sim.persisted()[256..264], &5u64.to_le_bytes(), "durable at the fence without a flush");
    assert_eq!(sim.persisted()[64], 0, "never flushed: still pending");
    assert_eq!(sim.next_point(), Some(PointKind::End));
    assert_eq!(sim.next_point(), None);
}

/// Every subset of up to six pending lines; caps beyond.
#[test]
fn line_subsets_and_caps() {
    let base = vec![0u8; 4096 * 4];
    let mut events: Vec<Event> = (0..6).map(|i| store(i * 64, 1, 8)).collect();
    events.push(Event::Fence);
    let mut sim = Sim::new(&base, &events);
    sim.next_point();
    let c = sim.candidates(&Caps { subsets: 1000, torn: 0, older: 0, exhaustive_lines: 6 }, 1);
    // none, all, and the 62 proper non-empty subsets.
    assert_eq!(c.len(), 64);
    let mut events: Vec<Event> = (0..40).map(|i| store(i * 64, 1, 8)).collect();
    events.push(Event::Fence);
    let mut sim = Sim::new(&base, &events);
    sim.next_point();
    let c = sim.candidates(&Caps { subsets: 128, torn: 0, older: 0, exhaustive_lines: 6 }, 1);
    assert_eq!(c.len(), 130);
    for l in ["L1:0", "B:0", "L2:0.1", "R:0"] {
        assert!(c.iter().any(|c| c.label == l), "{l} missing");
    }
    // Keys are content keys: equal images, equal keys.
    let a = sim.candidates(&Caps::FULL, 1);
    let all = a.iter().find(|c| c.label == "all").expect("all");
    let mut img = base.clone();
    for i in 0..40 {
        img[i * 64..i * 64 + 8].fill(1);
    }
    assert_eq!(sim.build(all), img);
    let none = a.iter().find(|c| c.label == "none").expect("none");
    assert_ne!(sim.key(all), sim.key(none));
}

fn layout() -> Layout {
    start(StartKind::Empty).layout
}

fn wrap(mut inner: Vec<Event>) -> Vec<Event> {
    let mut v = vec![Event::Mark { label: begin_mark(0) }];
    v.append(&mut inner);
    v.push(Event::Mark { label: end_mark(0) });
    v
}

fn kinds(r: &pcheck::Report) -> Vec<&'static str> {
    r.violations.iter().map(|v| v.kind).collect()
}

/// The persistence checker on hand-made traces: each kind of violation,
/// and the guarded commit-word writes it accepts.
#[test]
fn persistence_checker_kinds() {
    let l = layout();
    let base = start(StartKind::Empty).image.to_vec();
    let d = (l.data_start.offset() + 60 * 4096).0;
    // A clean operation.
    let ok = wrap(vec![store(d, 1, 64), Event::Flush { offset: d, len: 64 }, Event::Fence]);
    assert!(pcheck::check(&base, &ok, &l).violations.is_empty());
    // Never flushed.
    let r = pcheck::check(&base, &wrap(vec![store(d, 1, 8), Event::Fence]), &l);
    assert_eq!(kinds(&r), ["store-never-flushed"]);
    // Never fenced (a flush, and a streamed store).
    let r = pcheck::check(&base, &wrap(vec![store(d, 1, 8), Event::Flush { offset: d, len: 8 }]), &l);
    assert_eq!(kinds(&r), ["flush-never-fenced"]);
    let r = pcheck::check(&base, &wrap(vec![Event::NtStore { offset: d, data: vec![1; 64] }]), &l);
    assert_eq!(kinds(&r), ["flush-never-fenced"]);
    // Dirty again at the fence (and still flushed + fenced later).
    let r = pcheck::check(
        &base,
        &wrap(vec![
            store(d, 1, 8),
            Event::Flush { offset: d, len: 8 },
            store(d + 8, 2, 8),
            Event::Fence,
            Event::Flush { offset: d, len: 64 },
            Event::Fence,
        ]),
        &l,
    );
    assert_eq!(kinds(&r), ["dirty-again-at-fence"]);
    // A live slot's tail written by a 16-byte store: not atomic.
    let root_slot = l.inode_slot(ferrite::InodeNo(1)).0;
    let r = pcheck::check(
        &base,
        &wrap(vec![store(root_slot + 8, 9, 16), Event::Flush { offset: root_slot, len: 64 }, Event::Fence]),
        &l,
    );
    assert_eq!(kinds(&r), ["commit-word-not-atomic"]);
    // The same store into a free slot is a guarded write.
    let free_slot = l.inode_slot(ferrite::InodeNo(l.inode_count - 1)).0;
    let r = pcheck::check(
        &base,
        &wrap(vec![store(free_slot + 8, 9, 16), Event::Flush { offset: free_slot, len: 64 }, Event::Fence]),
        &l,
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.guarded.get("slot-not-live"), Some(&2));
    // A journal header written with its CRC: guarded.
    let j = l.journal_start.offset().0;
    let r = pcheck::check(&base, &wrap(vec![store(j, 5, 96), Event::Flush { offset: j, len: 96 }, Event::Fence]), &l);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.guarded.get("journal-header-under-crc"), Some(&1));
    // The active word alone, without its CRC, by a 4-byte store: flagged.
    let r = pcheck::check(&base, &wrap(vec![store(j, 5, 4), Event::Flush { offset: j, len: 8 }, Event::Fence]), &l);
    assert_eq!(kinds(&r), ["commit-word-not-atomic"]);
}

#[test]
fn tokens_round_trip_and_replay() {
    let t = Token {
        seed: 0xC0FFEE,
        start: StartKind::LogEdge,
        workload: "s2.create+rename_file".into(),
        point: "e12:T:5:p1:a:r3:L:2".into(),
    };
    let s = t.to_string();
    assert_eq!(s, "cc1:0xc0ffee:logedge:s2.create+rename_file:e12:T:5:p1:a:r3:L:2");
    assert_eq!(s.parse::<Token>().expect("parse"), t);
    assert!("cc2:1:empty:s1.create:e1:all".parse::<Token>().is_err());
    // A replay rebuilds the workload, the point and the image (whether it
    // passes is the engine's business); a point that does not exist, or an
    // unknown operation, is an error.
    let (out, _) = replay("cc1:0xc0ffee:empty:s1.chmod:e2:none").expect("replay");
    assert!(out.contains("chmod(/foo, 600)") && out.contains("just before the fence at event 2"), "{out}");
    assert!(replay("cc1:0xc0ffee:empty:s1.chmod:e9999:none").is_err());
    assert!(replay("cc1:0xc0ffee:empty:s1.no_such_op:e1:none").is_err());
}

/// Tokens replay exactly only if a workload always produces the same trace.
#[test]
fn recording_is_deterministic() {
    for (k, id) in [
        (StartKind::Empty, "s2.create+rename_dir".to_string()),
        (StartKind::Aged, "s2.write_large+truncate_shrink_mid_page".to_string()),
        (StartKind::Full, "s1.symlink_long".to_string()),
        (StartKind::LogEdge, random_workload(42, 12).id),
    ] {
        let st = start(k);
        let w = workload_by_id(&id).expect("workload");
        let a = record(&st, &w);
        let b = std::thread::spawn(move || record(&start(k), &w)).join().expect("thread");
        assert_eq!(a.events, b.events, "{id} on {}: two recordings differ", k.name());
        assert_eq!(a.state_keys, b.state_keys);
    }
}

/// Recovery's own trace goes through the persistence checker: an orphan
/// freed without flushing its state word is caught (it could come back
/// after a later crash, once its pages were reused).
#[test]
fn recovery_trace_is_checked() {
    use ferrite::{OpenFlags, PathFs};
    let st = start(StartKind::Empty);
    let clock = ferrite_crashcheck::exec::clock_at(ferrite_crashcheck::exec::T_CALL);
    let fs = ferrite::Session::mount(
        ferrite_pmem::Pmem::from_image(&st.image),
        &ferrite_crashcheck::exec::mount_options(&clock, 1),
    )
    .expect("mount");
    let fd = fs.open(b"/foo", OpenFlags::RDONLY, 0).expect("open");
    fs.unlink(b"/foo").expect("unlink");
    let crashed = fs.pmem().image(); // a crash with /foo unlinked but open
    let _ = fd;
    drop(fs);
    let fs = ferrite_crashcheck::verify::mount(ferrite_pmem::Pmem::recording_from_image(&crashed), 1).expect("recover");
    assert_eq!(fs.mount_report().orphans_freed, 1);
    let layout = fs.layout();
    let events = fs.pmem().stop_recording();
    drop(fs);
    ferrite_crashcheck::verify::check_recovery_trace(&crashed, &events, &layout).expect("the real recovery is clean");
    let it = layout.inode_table_start.offset().0;
    let c = events
        .iter()
        .position(
            |e| matches!(e, Event::Commit { offset, value: 0 } if *offset >= it && (offset - it).is_multiple_of(128)),
        )
        .expect("the orphan's state word cleared");
    let mut broken = events.clone();
    assert!(matches!(broken[c + 1], Event::Flush { .. }));
    broken.remove(c + 1);
    let e = ferrite_crashcheck::verify::check_recovery_trace(&crashed, &broken, &layout)
        .expect_err("an unflushed recovery store must be caught");
    assert!(e.contains("store-never-flushed"), "{e}");
}

/// The checker's fsync-atomic rules on hand-made traces: a call that
/// extends a file's epoch may leave its stores unfenced (or unflushed);
/// the file's commit point must find them durable; another operation
/// storing to such a line is a page reused too early.
#[test]
fn persistence_checker_atomic_rules() {
    use ferrite_crashcheck::oracle::CallMode;
    let l = layout();
    let base = start(StartKind::Empty).image.to_vec();
    let d = (l.data_start.offset() + 60 * 4096).0;
    let extends = CallMode { extends: Some(7), ..CallMode::default() };
    let commits = CallMode { commits: vec![7], ..CallMode::default() };
    let other = CallMode::default();
    let call = |i: usize, inner: Vec<Event>| -> Vec<Event> {
        let mut v = vec![Event::Mark { label: begin_mark(i) }];
        v.extend(inner);
        v.push(Event::Mark { label: end_mark(i) });
        v
    };
    let nt = |off: u64| Event::NtStore { offset: off, data: vec![1; 64] };
    // An epoch's streaming store, fenced by its commit point: clean.
    let mut ev = call(0, vec![nt(d)]);
    ev.extend(call(1, vec![Event::Fence]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), commits.clone()]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // The same under the strict rules: never fenced when the call returns.
    assert_eq!(kinds(&pcheck::check(&base, &ev, &l)), ["flush-never-fenced"]);
    // The commit point without a fence.
    let mut ev = call(0, vec![nt(d)]);
    ev.extend(call(1, vec![]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), commits.clone()]);
    assert_eq!(kinds(&r), ["flush-never-fenced"]);
    assert!(r.violations[0].detail.contains("commit point"), "{}", r.violations[0].detail);
    // An epoch's store never flushed: its commit point's fence does not
    // make it durable.
    let mut ev = call(0, vec![store(d, 1, 64)]);
    ev.extend(call(1, vec![Event::Fence]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), commits.clone()]);
    assert_eq!(kinds(&r), ["store-never-flushed"]);
    // A call that does not commit the file leaves its lines alone...
    let mut ev = call(0, vec![nt(d)]);
    ev.extend(call(1, vec![store(d + 4096, 2, 8), Event::Flush { offset: d + 4096, len: 8 }, Event::Fence]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), other.clone()]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // ... but must not store to one still in flight.
    let mut ev = call(0, vec![nt(d)]);
    ev.extend(call(1, vec![nt(d), Event::Fence]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), other]);
    assert_eq!(kinds(&r), ["epoch-line-reused"]);
    // The file's own next data change may (a page of its epoch, in place).
    let mut ev = call(0, vec![nt(d)]);
    ev.extend(call(1, vec![nt(d)]));
    ev.extend(call(2, vec![Event::Fence]));
    let r = pcheck::check_modes(&base, &ev, &l, &[extends.clone(), extends, commits]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

/// Event index of the tail store (a streaming `NtCommit` into an inode
/// slot's tail word) inside call `i` of a recording.
fn tail_store_in(rec: &ferrite_crashcheck::exec::Recording, i: usize) -> usize {
    let l = &rec.layout;
    let it = l.inode_table_start.offset().0;
    let (b, e) = rec.spans[i];
    (b..e)
        .find(|&k| {
            matches!(rec.events[k], Event::NtCommit { offset, .. }
                if offset >= it && (offset - it) % ferrite::format::INODE_SLOT_SIZE == ferrite::format::INODE_TAIL_OFFSET)
        })
        .unwrap_or_else(|| panic!("no tail store in call {i} of {}", rec.workload.id))
}

/// The fsync-atomic oracle is not vacuous: after a pending write the
/// durable state keeps the old bytes and after its fsync it has the new
/// ones; a trace whose fsync lost its tail store fails (the write is not
/// durable after fsync returned), and so does one whose pending write
/// stored the tail (the write became durable before its commit point).
#[test]
fn atomic_oracle_tells_pending_from_committed() {
    use ferrite_crashcheck::harness::check_recording;
    let st = start(StartKind::Empty);
    let w = workload_by_id("a2.fa_write_inline+fa_fsync").expect("workload");
    let rec = record(&st, &w);
    assert!(rec.divergences.is_empty(), "{:?}", rec.divergences);
    let o = rec.oracle.clone().expect("an fsync-atomic workload has an oracle");
    assert!(o.modes[0].extends.is_some(), "the write extends /foo's epoch");
    assert_eq!(o.modes[1].commits.len(), 1, "fsync commits /foo");
    let foo = |i: usize| o.trees[i].tree.get(b"/foo".as_slice()).expect("/foo").content.clone();
    assert_eq!(foo(o.after[0]), foo(o.initial), "a pending write is not durable");
    assert_ne!(foo(o.after[1]), foo(o.initial), "the write is durable after fsync");
    assert_eq!(foo(o.after[1]), rec.states[2].get(b"/foo".as_slice()).expect("/foo").content);
    let mut cfg = ferrite_crashcheck::harness::Config::new(1);
    cfg.verify.recovery_crash = ferrite_crashcheck::verify::RecoveryCrash::Off;
    cfg.progress_every = None;
    let (_, f) = check_recording(StartKind::Empty, &rec, &cfg);
    assert!(f.is_empty(), "{}", f.iter().map(|f| f.to_string()).collect::<String>());
    // fsync without its tail store.
    let t = tail_store_in(&rec, 1);
    let mut broken = rec.events.clone();
    broken.remove(t);
    let (_, f) = check_recording(StartKind::Empty, &rec.with_events(broken), &cfg);
    assert!(!f.is_empty(), "an fsync that stores no tail must fail");
    // The tail stored (and fenced) by the pending write already.
    let mut broken = rec.events.clone();
    let tail = broken[t].clone();
    let end0 = rec.spans[0].1;
    assert!(matches!(tail, Event::NtCommit { .. }), "a tail store is a streaming commit word");
    broken.splice(end0..end0, [Event::Fence, tail, Event::Fence]);
    let (_, f) = check_recording(StartKind::Empty, &rec.with_events(broken), &cfg);
    assert!(
        f.iter().any(|f| f.token.contains(":e") && f.message.contains("none of the states allowed")),
        "a write made durable before its commit point must fail: {}",
        f.iter().map(|f| f.to_string()).collect::<String>()
    );
}

/// The oracle's rule for commit points that change names: after a pending
/// write to /A/bar, `rename(/A/bar, /foo)` may leave the old names (with
/// or without the data committed first) or the new names with the new
/// data, never the new names over the data of the last commit point (the
/// zero-length-file bug of rename-over, which ext4's auto_da_alloc avoids).
#[test]
fn atomic_oracle_rename_never_shows_new_names_over_old_data() {
    let st = start(StartKind::Empty);
    let w = workload_by_id("a2.fa_write_into_hole+fa_rename_over_atomic").expect("workload");
    let rec = record(&st, &w);
    assert!(rec.divergences.is_empty(), "{:?}", rec.divergences);
    let o = rec.oracle.clone().expect("oracle");
    let key = |t: &ferrite_model::Tree| ferrite_crashcheck::hash::tree_key(t);
    let inside: Vec<u64> = o.inside[1].iter().map(|&i| o.trees[i].key).collect();
    let old_bar = o.trees[o.initial].tree.get(b"/A/bar".as_slice()).expect("/A/bar").clone();
    let new_bar = rec.states[1].get(b"/A/bar".as_slice()).expect("/A/bar").clone();
    assert_ne!(old_bar.content, new_bar.content);
    // New names, new data: allowed (it is the state after the call).
    let after = o.trees[o.after[1]].tree.as_ref().clone();
    assert_eq!(after.get(b"/foo".as_slice()).expect("/foo").content, new_bar.content);
    assert!(inside.contains(&key(&after)));
    // New names over the old data: never.
    let mut bad = after.clone();
    let foo = bad.get_mut(b"/foo".as_slice()).expect("/foo");
    *foo = ferrite_model::NodeView { link_group: foo.link_group, ..old_bar.clone() };
    assert!(!inside.contains(&key(&bad)), "the new name over the old data must not be allowed");
    // Old names with the pending data committed first: allowed.
    let mut first = o.trees[o.after[0]].tree.as_ref().clone();
    let bar = first.get_mut(b"/A/bar".as_slice()).expect("/A/bar");
    *bar = ferrite_model::NodeView { link_group: bar.link_group, ..new_bar };
    assert!(inside.contains(&key(&first)), "the data may commit before the rename");
}

/// The prefix oracle's ranges: inside call i, from the calls synced before
/// it to i + 1; once a sync point returned, nothing before it may be lost.
#[test]
fn prefix_oracle_ranges() {
    use ferrite_crashcheck::prefix::{is_sync_point, Prefix};
    use ferrite_crashcheck::workload::{Call, Slots};
    let mut p = Prefix::default();
    for sync in [false, false, true, false] {
        p.push(sync);
    }
    assert_eq!(p.range(0, false), (0, 1));
    assert_eq!(p.range(1, true), (0, 2));
    assert_eq!(p.range(2, false), (0, 3), "inside the sync point: anything from the last one");
    assert_eq!(p.range(2, true), (3, 3), "once it returned: everything up to it");
    assert_eq!(p.range(3, false), (3, 4));
    assert_eq!(p.range(3, true), (3, 4));
    let mut slots = Slots::default();
    assert!(is_sync_point(&Call::Sync, &slots, &Ok(0)));
    assert!(!is_sync_point(&Call::Fsync { slot: 0 }, &slots, &Err(ferrite::Errno::EBADF)));
    let w = Call::Pwrite { slot: 3, off: 0, len: 10, tag: 1 };
    assert!(!is_sync_point(&w, &slots, &Ok(10)));
    slots.sync[3] = true;
    assert!(is_sync_point(&w, &slots, &Ok(10)), "a write through an O_SYNC descriptor is a sync point");
    let modes = p.modes();
    assert!(modes[2].commits_all && modes[2].extends.is_none());
    assert_eq!(modes[0].extends, Some(ferrite_crashcheck::oracle::QUEUE));
}

/// The prefix oracle is not vacuous: a buffered workload passes, and the
/// same trace with its closing fsync emptied (the fsync persists nothing:
/// no journal transaction, no tail store) fails, with a crash image after
/// the fsync returned that lost synced operations.
#[test]
fn prefix_oracle_catches_a_sync_that_persists_nothing() {
    use ferrite_crashcheck::harness::check_recording;
    let st = start(StartKind::Empty);
    let w = workload_by_id("b1.rename_file").expect("workload");
    let rec = record(&st, &w);
    assert!(rec.divergences.is_empty(), "{:?}", rec.divergences);
    let p = rec.prefix.clone().expect("a buffered workload has the prefix oracle");
    let last = rec.spans.len() - 1;
    assert!(p.sync[last], "the workload ends with an fsync");
    let mut cfg = ferrite_crashcheck::harness::Config::new(1);
    cfg.verify.recovery_crash = ferrite_crashcheck::verify::RecoveryCrash::Off;
    cfg.progress_every = None;
    let (_, f) = check_recording(StartKind::Empty, &rec, &cfg);
    assert!(f.is_empty(), "{}", f.iter().map(|f| f.to_string()).collect::<String>());
    let (b, e) = rec.spans[last];
    assert!(
        rec.events[b..e].iter().any(|ev| !matches!(ev, Event::Mark { .. })),
        "the closing fsync persisted something (operations were pending)"
    );
    let broken: Vec<Event> = rec
        .events
        .iter()
        .enumerate()
        .filter(|(k, ev)| !(*k > b && *k < e) || matches!(ev, Event::Mark { .. }))
        .map(|(_, ev)| ev.clone())
        .collect();
    cfg.max_failures_per_workload = 20;
    let (_, f) = check_recording(StartKind::Empty, &rec.with_events(broken), &cfg);
    assert!(
        f.iter().any(|f| f.token.contains(":e") && f.message.contains("none of the states allowed")),
        "an fsync that persists nothing must fail: {}",
        f.iter().map(|f| f.to_string()).collect::<String>()
    );
}
