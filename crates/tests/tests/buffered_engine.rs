//! Proves the buffered mount's engine mechanics one at a time (the
//! model-based test in `buffered.rs` and the crash harness cover them in
//! combination): without a persister thread nothing is durable before a sync
//! point, so a crash brings back the state of the last sync exactly; a sync
//! makes every earlier operation durable, not only its file's; back-pressure
//! persists at `ops_max`; an unlinked open file is freed in order with its
//! unlink; inode numbers and pages a queued operation released are reused
//! only after it is durable (and running out of either persists the queue
//! rather than failing); log GC of a hot file still runs, collects only
//! the log pages whose death is durable and never persists the queue for
//! them, and compaction of a big log persists it once per compaction;
//! unmount drains;
//! the persister thread persists on its own, both while it polls and after
//! it has gone to sleep (an operation must wake it then), and keeps the
//! order of returns when it takes the queue from callers that keep adding
//! to it (a crash then leaves each thread's creates a prefix).

use ferrite::{BufferedOptions, FormatOptions, MountOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, pattern, put, remount_as};

fn manual(ops_max: u64) -> BufferedOptions {
    BufferedOptions { lag_ns_max: u64::MAX, ops_max, persister_thread: false, ..Default::default() }
}

fn mount_buffered(pages: u64, opts: BufferedOptions) -> Session {
    let fs = Session::format(Pmem::heap(pages * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    remount_as(fs, false, &MountOptions { buffered: Some(opts), ..Default::default() }).0
}

/// Drop as a crash, fsck the image, mount it strict.
fn crash(fs: Session) -> Session {
    let pmem = fs.pmem().clone();
    drop(fs);
    let image = pmem.image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap()
}

#[test]
fn nothing_durable_before_a_sync_point() {
    let fs = mount_buffered(2048, manual(1 << 20));
    fs.mkdir(b"/d", 0o755).unwrap();
    put(&fs, b"/d/a", &pattern(1, 10_000)).unwrap();
    fs.sync_all().unwrap();
    put(&fs, b"/d/b", &pattern(2, 5_000)).unwrap();
    fs.unlink(b"/d/a").unwrap();
    assert_eq!(get(&fs, b"/d/b").unwrap(), pattern(2, 5_000), "reads see the latest state");
    let st = fs.engine().buffered_stats();
    assert!(st.pending_now > 0 && st.ops_persisted > 0, "{st:?}");
    let fs = crash(fs);
    assert_eq!(get(&fs, b"/d/a").unwrap(), pattern(1, 10_000));
    assert_eq!(fs.stat(b"/d/b").err(), Some(ferrite::Errno::ENOENT));
}

#[test]
fn fsync_of_one_file_makes_everything_before_it_durable() {
    let fs = mount_buffered(2048, manual(1 << 20));
    put(&fs, b"/x", b"x").unwrap();
    fs.mkdir(b"/dir", 0o700).unwrap();
    fs.rename(b"/x", b"/dir/x", ferrite::RenameFlags::Replace).unwrap();
    let fd = fs.open(b"/y", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, b"yy", 0).unwrap();
    fs.fsync(fd).unwrap();
    fs.pwrite(fd, b"zz", 2).unwrap();
    let fs = crash(fs);
    assert_eq!(get(&fs, b"/dir/x").unwrap(), b"x");
    assert_eq!(get(&fs, b"/y").unwrap(), b"yy");
}

#[test]
fn back_pressure_persists_in_order() {
    let fs = mount_buffered(4096, manual(5));
    for i in 0..23u64 {
        put(&fs, format!("/f{i}").as_bytes(), &pattern(i, 100)).unwrap();
    }
    let st = fs.engine().buffered_stats();
    assert!(st.backpressure_waits > 0 && st.pending_now < 5 * 3, "{st:?}");
    let fs = crash(fs);
    // A prefix: every file up to some point, none after it.
    let present: Vec<bool> = (0..23u64).map(|i| fs.stat(format!("/f{i}").as_bytes()).is_ok()).collect();
    let n = present.iter().take_while(|&&p| p).count();
    assert!(present[n..].iter().all(|&p| !p), "not a prefix: {present:?}");
    assert!(n >= 15, "back-pressure should have persisted most files, found {n}");
    for i in 0..n as u64 {
        // A file whose create is durable may still miss its later write:
        // put is create, write, close; check only whole files.
        let got = get(&fs, format!("/f{i}").as_bytes()).unwrap();
        assert!(got.is_empty() || got == pattern(i, 100), "file {i} torn");
    }
}

#[test]
fn unlinked_open_file_freed_after_its_unlink() {
    let fs = mount_buffered(2048, manual(1 << 20));
    put(&fs, b"/keep", b"k").unwrap();
    put(&fs, b"/o", &pattern(7, 50_000)).unwrap();
    fs.sync_all().unwrap();
    let fd = fs.open(b"/o", OpenFlags::RDONLY, 0).unwrap();
    fs.unlink(b"/o").unwrap();
    fs.close(fd).unwrap(); // frees the inode: queued after the unlink
    let free_before = fs.engine().free_inodes();
    put(&fs, b"/new", b"n").unwrap(); // must not reuse /o's number yet
    assert_eq!(fs.engine().free_inodes(), free_before - 1);
    let fs = crash(fs);
    assert_eq!(get(&fs, b"/o").unwrap(), pattern(7, 50_000), "the unlink was never durable");
    assert!(fs.stat(b"/new").is_err());
}

#[test]
fn running_out_persists_the_queue_instead_of_failing() {
    // A small pool, overwritten many times over without a sync: the pages
    // each overwrite releases come back only through the queue.
    let fs = mount_buffered(600, manual(1 << 20));
    let data = pattern(3, 256 * 1024);
    let fd = fs.open(b"/big", OpenFlags::RDWR.create(), 0o644).unwrap();
    for round in 0..40u64 {
        let mut d = data.clone();
        d[0] = round as u8;
        fs.pwrite(fd, &d, 0).unwrap();
    }
    fs.close(fd).unwrap();
    for i in 0..200u64 {
        put(&fs, format!("/s{i}").as_bytes(), b"s").unwrap();
        fs.unlink(format!("/s{i}").as_bytes()).unwrap();
    }
    assert!(fs.engine().buffered_stats().batches_inline > 0);
    let fs = crash(fs);
    let got = get(&fs, b"/big").unwrap();
    assert_eq!(&got[1..], &data[1..]);
}

#[test]
fn hot_file_log_is_collected() {
    let fs = mount_buffered(4096, BufferedOptions::default());
    let fd = fs.open(b"/hot", OpenFlags::RDWR.create(), 0o644).unwrap();
    for i in 0..20_000u64 {
        fs.pwrite(fd, &pattern(i, 4096), (i % 8) * 4096).unwrap();
    }
    fs.close(fd).unwrap();
    assert!(fs.engine().gc_pages_collected() > 0, "no log GC in a buffered mount");
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let image = pmem.image();
    assert!(ferrite::fsck::check(&Pmem::from_image(&image)).unwrap().is_clean());
    let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
    let got = get(&fs, b"/hot").unwrap();
    for i in 19_992..20_000u64 {
        let slot = ((i % 8) * 4096) as usize;
        assert_eq!(&got[slot..slot + 4096], &pattern(i, 4096)[..]);
    }
}

#[test]
fn unmount_drains_the_queue() {
    let fs = mount_buffered(2048, BufferedOptions { lag_ns_max: 10_000_000_000, ..Default::default() });
    for i in 0..50u64 {
        put(&fs, format!("/u{i}").as_bytes(), &pattern(i, 3000)).unwrap();
    }
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let fs = Session::mount(Pmem::from_image(&pmem.image()), &MountOptions::default()).unwrap();
    assert!(!fs.mount_report().recovered);
    for i in 0..50u64 {
        assert_eq!(get(&fs, format!("/u{i}").as_bytes()).unwrap(), pattern(i, 3000));
    }
}

#[test]
fn a_failed_batch_makes_the_mount_read_only() {
    let fs = mount_buffered(2048, manual(1 << 20));
    put(&fs, b"/synced", b"s").unwrap();
    fs.sync_all().unwrap();
    put(&fs, b"/lost", b"l").unwrap();
    fs.engine().inject_persist_failure();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.sync_all()));
    assert!(failed.is_err(), "the injected failure did not fire");
    assert_eq!(fs.sync_all(), Err(ferrite::Errno::EIO), "a sync after the failure must not succeed");
    assert_eq!(fs.mkdir(b"/new", 0o755), Err(ferrite::Errno::EROFS));
    assert_eq!(get(&fs, b"/synced").unwrap(), b"s", "reads still work");
    let fs = crash(fs);
    assert_eq!(get(&fs, b"/synced").unwrap(), b"s");
    assert!(fs.stat(b"/lost").is_err(), "the failed batch must not be half applied");
}

/// Wait (polling, for liveness only: the bound is far beyond any lag) until
/// `done` holds of the mount's buffered counters.
fn wait_for_stats(fs: &Session, what: &str, done: impl Fn(&ferrite::BufferedStats) -> bool) -> ferrite::BufferedStats {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let st = fs.engine().buffered_stats();
        if done(&st) {
            return st;
        }
        assert!(std::time::Instant::now() < deadline, "never happened: {what}; {st:?}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn the_persister_thread_persists_alone_while_polling_and_after_sleeping() {
    // A 1 ms lag bound: the persister polls every 0.5 ms while idle and
    // goes to sleep after a few hundred empty polls.
    let opts =
        BufferedOptions { lag_ns_max: 1_000_000, ops_max: 1 << 20, persister_thread: true, ..Default::default() };
    let fs = mount_buffered(2048, opts);
    // While it polls, an operation does not wake it, and still becomes
    // durable without any sync point: the persister thread ran the batch.
    fs.mkdir(b"/polled", 0o755).unwrap();
    let st = wait_for_stats(&fs, "the first operation persisted", |s| s.pending_now == 0);
    assert_eq!(st.batches_inline, 0, "no caller ran a batch: {st:?}");
    // Idle long enough, it sleeps; the next operation must wake it.
    wait_for_stats(&fs, "the persister asleep", |s| s.persister_asleep);
    fs.mkdir(b"/woken", 0o755).unwrap();
    let st = wait_for_stats(&fs, "the operation after the sleep persisted", |s| s.pending_now == 0);
    assert_eq!(st.batches_inline, 0, "no caller ran a batch: {st:?}");
    let fs = crash(fs);
    assert!(fs.stat(b"/polled").is_ok() && fs.stat(b"/woken").is_ok());
}

#[test]
fn log_gc_collects_pages_whose_death_is_durable_and_never_persists_for_them() {
    // A file of 4,200 pages has a log of about 67 pages of live Write
    // entries; overwriting it in order kills one whole log page every 63
    // writes. No persister thread: only sync points, GC and back-pressure
    // (far away here) persist the queue.
    const PAGES: u64 = 4_200;
    let fs = mount_buffered(16_384, manual(1 << 20));
    let fd = fs.open(b"/big", OpenFlags::RDWR.create(), 0o644).unwrap();
    let write_pass = |version: u64, pages: std::ops::Range<u64>| {
        for i in pages {
            fs.pwrite(fd, &pattern(version * PAGES + i, 4096), i * 4096).unwrap();
        }
    };
    write_pass(0, 0..PAGES);
    fs.sync_all().unwrap();
    let stats = |fs: &Session| (fs.engine().buffered_stats().batches_inline, fs.engine().gc_pages_collected());
    // Half the file overwritten: about 33 log pages die, none of them
    // durably, and the log is not yet due for compaction. GC collects none
    // of them, and no call persists the queue for them.
    let (inline0, gc0) = stats(&fs);
    write_pass(1, 0..PAGES / 2);
    let (inline1, gc1) = stats(&fs);
    assert_eq!(inline1, inline0, "GC persisted the queue for pages whose death is not durable");
    assert_eq!(gc1, gc0, "GC collected pages whose death is not durable");
    // Once those deaths are durable, the next change that extends the log
    // collects the pages, still without a batch of its own.
    fs.sync_all().unwrap();
    let (inline2, gc2) = stats(&fs);
    write_pass(1, PAGES / 2..PAGES / 2 + 100);
    let (inline3, gc3) = stats(&fs);
    assert_eq!(inline3, inline2, "GC persisted the queue although the dead pages' deaths were durable");
    assert!(gc3 - gc2 >= 30, "GC collected {} pages once ~33 were durably dead", gc3 - gc2);
    // Two more passes without a sync: the log grows until it is due for
    // compaction with operations queued; past `BUFFERED_COMPACT_PAGES`
    // (64) pages that persists the queue first, once per compaction, not
    // per dead page (an earlier version persisted at every new log page).
    write_pass(2, 0..PAGES);
    write_pass(3, 0..PAGES);
    let (inline4, _) = stats(&fs);
    let forced = inline4 - inline3;
    assert!((1..=4).contains(&forced), "compaction persisted the queue {forced} times");
    fs.close(fd).unwrap();
    let fs = crash(fs);
    // What the forced batches made durable is a prefix of the writes after
    // the last sync, and it includes pass 2 at least in part.
    let got = get(&fs, b"/big").unwrap();
    let got_version: Vec<u64> = (0..PAGES)
        .map(|i| {
            let page = &got[(i * 4096) as usize..((i + 1) * 4096) as usize];
            (0..4u64)
                .find(|&v| page == &pattern(v * PAGES + i, 4096)[..])
                .unwrap_or_else(|| panic!("page {i} holds no version written to it"))
        })
        .collect();
    let mut state: Vec<u64> = (0..PAGES).map(|i| if i < PAGES / 2 + 100 { 1 } else { 0 }).collect();
    let mut mismatches = state.iter().zip(&got_version).filter(|(a, b)| a != b).count();
    let mut matched = Vec::new();
    for (version, page) in (2..4u64).flat_map(|v| (0..PAGES).map(move |i| (v, i))) {
        let i = page as usize;
        mismatches -= (state[i] != got_version[i]) as usize;
        state[i] = version;
        mismatches += (state[i] != got_version[i]) as usize;
        if mismatches == 0 {
            matched.push((version, page));
        }
    }
    assert!(!matched.is_empty(), "the crash image is the state after no prefix of the writes of passes 2 and 3");
}

#[test]
fn the_persister_keeps_the_order_while_callers_keep_queueing() {
    // Two threads create files as fast as they can while the persister
    // thread, woken every 0.1 ms, takes the queue from them. Every create
    // sets a word of its own (the new inode's state), so the persister cuts
    // what it took into several journal transactions, and now and then
    // reaches its target with operations still taken; the next persist must
    // start from those. A crash must leave each thread's creates a prefix of
    // the order it made them in, and the persister's own assertions (batches
    // in order, none skipping an operation) must hold, or the mount turns
    // read-only and a create fails. The state with operations left taken is
    // made deterministically by the engine's unit test
    // `a_partial_persist_leaves_the_rest_first_in_line`; this one races it.
    // The persister thread has to get a core while the two callers run:
    // on a loaded machine it may not (the callers then reach the lag bound
    // and persist inline). The order is checked after every attempt; the
    // race is tried again, up to `ATTEMPTS` times, until the thread ran
    // enough batches to have raced them.
    const FILES: usize = 2_000;
    const ATTEMPTS: usize = 5;
    let mut stats = Vec::new();
    for _ in 0..ATTEMPTS {
        let opts =
            BufferedOptions { lag_ns_max: 200_000, ops_max: 1 << 20, persister_thread: true, ..Default::default() };
        // 96 MiB: 6,144 inode slots.
        let fs = mount_buffered(24_576, opts);
        fs.mkdir(b"/t0", 0o755).unwrap();
        fs.mkdir(b"/t1", 0o755).unwrap();
        std::thread::scope(|s| {
            for t in 0..2 {
                let fs = &fs;
                s.spawn(move || {
                    for i in 0..FILES {
                        let name = format!("/t{t}/f{i:05}");
                        let fd = fs.open(name.as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644).unwrap();
                        fs.close(fd).unwrap();
                    }
                });
            }
        });
        let st = fs.engine().buffered_stats();
        // Whatever the persister had made durable when the mount "crashed",
        // each thread's creates are a prefix of the order it made them in.
        let fs = crash(fs);
        for t in 0..2 {
            let durable = |i: usize| fs.stat(format!("/t{t}/f{i:05}").as_bytes()).is_ok();
            let first_missing = (0..FILES).find(|&i| !durable(i)).unwrap_or(FILES);
            if let Some(later) = (first_missing..FILES).find(|&i| durable(i)) {
                panic!("thread {t}: create {later} is durable but create {first_missing} is not");
            }
        }
        let raced = st.batches > st.batches_inline + 8;
        stats.push(st);
        if raced {
            return;
        }
    }
    panic!("the persister thread ran few batches in each of {ATTEMPTS} attempts: {stats:?}");
}
