//! Scenarios: workloads whose interesting call needs state that takes many
//! calls to build (a log two or three pages long, a page of dead entries),
//! so that the one recorded call crosses a threshold: fast log GC
//! (`collect_garbage` after a log extension) and thorough GC (compaction,
//! `compact_log`) of files and directories. Plus the operations of the
//! retired `crash_smoke` test that the catalogue did not have (an `rmdir`
//! that succeeds, a rename over an empty directory, short sequences).
//!
//! A scenario's preparing calls (`Workload::prepare`) run on both sides
//! before recording starts; they are computed once, on a scratch pool of
//! the harness's geometry, by filling a log until its tail page has no room
//! left (`exec::log_room_units`), so they stay right if entry sizes change.
//! They create their own files and directories, so a log's layout does not
//! depend on the start image; the GC scenarios first delete `/F/f0` (ten
//! data pages of the nearly full image; ENOENT on both sides elsewhere) so
//! that the full image has room for a compaction's copy.
//!
//! And the paths of sub-page (inline) writes and of the fsync-atomic mode
//! that need state built by many calls: a small write that folds a page's
//! inline deltas into a copy of the page (strict, and fsync-atomic with the
//! deltas pending or committed), a commit whose closing entry goes into the
//! page the epoch set aside, log GC at an fsync-atomic file's commit point,
//! and the compaction of a log that holds live inline deltas.
//!
//! A scenario's setup may crash and mount the pool
//! ([`Call::CrashRemount`]: every returned operation durable, then a mount
//! that recovers), so that its recorded calls meet the engine crash
//! recovery left (`gc_after_crash`: the logs recovery found holding dead
//! pages, collected for a change that finds no page).
//!
//! Each scenario says what its first recorded call must do ([`Expect`]);
//! the CI test (`tests/scenarios.rs`) checks it on every start image from
//! the engine's counters, so the coverage cannot silently disappear.

use crate::exec::{clock_at, format_options, log_room_units, GEOMETRY, T_BUILD};
use crate::workload::{run_call, Call, Slots, Workload};
use ferrite::format::{Entry, LOG_PAGE_HEADER_SIZE, PAGE_SIZE};
use ferrite::{FallocateMode, FileMode, OpenFlags, PathFs, RenameFlags, Session};
use ferrite_pmem::Pmem;
use std::sync::OnceLock;

/// What the first recorded call of a scenario must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing in particular (a ported operation).
    Nothing,
    /// Fast GC: at least one log page collected, no compaction.
    FastGc,
    /// Fast GC by a first call that succeeded, where it could run: on the
    /// images without its file it fails with EBADF (its descriptor's open
    /// failed) and nothing is checked.
    FastGcWhereRun,
    /// Thorough GC: a log compacted.
    Compaction,
    /// A small write that folds: it stages a Write entry (a copy of the
    /// merged page) and no Inline entry.
    Fold,
    /// A commit point of an fsync-atomic file whose closing size-only
    /// Truncate entry opens a log page (the page the epoch set aside).
    SealInReserve,
}

impl Expect {
    /// Whether the first recorded call of `rec` did what `self` says;
    /// Err with what it did instead.
    pub fn check(self, rec: &crate::exec::Recording) -> Result<(), String> {
        let o = &rec.outcomes[0];
        let entries = rec.staged_entries(0);
        let count = |f: fn(&Entry) -> bool| entries.iter().filter(|(_, e)| f(e)).count();
        let writes = count(|e| matches!(e, Entry::Write(_)));
        let inline = count(|e| matches!(e, Entry::Inline(_)));
        let ok = match self {
            Expect::Nothing => true,
            Expect::FastGc => o.gc_pages > 0 && o.compactions == 0,
            Expect::FastGcWhereRun => {
                o.engine == Err(ferrite::Errno::EBADF) || (o.engine.is_ok() && o.gc_pages > 0 && o.compactions == 0)
            }
            Expect::Compaction => o.compactions > 0,
            Expect::Fold => writes > 0 && inline == 0 && o.engine.is_ok(),
            Expect::SealInReserve => {
                o.epoch_commits > 0
                    && entries.iter().any(|(off, e)| {
                        matches!(e, Entry::Truncate(t) if t.size_only) && off % PAGE_SIZE == LOG_PAGE_HEADER_SIZE
                    })
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "must {self:?}; it collected {} log pages, compacted {} logs, committed {} epochs, staged {writes} Write and {inline} Inline entries of {} (engine {:?})",
                o.gc_pages,
                o.compactions,
                o.epoch_commits,
                entries.len(),
                o.engine
            ))
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub expect: Expect,
    pub workload: Workload,
}

fn p(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn open(slot: u8, path: &str, flags: OpenFlags) -> Call {
    Call::Open { slot, path: p(path), flags, perm: 0o644 }
}

fn pw(slot: u8, off: u64, len: u32, tag: u32) -> Call {
    Call::Pwrite { slot, off, len, tag }
}

fn chmod(path: &str, perm: u32) -> Call {
    Call::Chmod { path: p(path), perm }
}

/// Builds preparing calls on a scratch pool, running each as it is added.
struct Prep {
    fs: Session,
    slots: Slots,
    calls: Vec<Call>,
    n: u32,
}

impl Prep {
    fn new() -> Prep {
        let clock = clock_at(T_BUILD);
        let fs = Session::format(Pmem::heap(GEOMETRY.pages * 4096), &format_options(GEOMETRY, &clock))
            .expect("format a scratch pool");
        Prep { fs, slots: Slots::default(), calls: Vec::new(), n: 0 }
    }

    fn run(&mut self, c: Call) {
        let r = run_call(&self.fs, &mut self.slots, &c);
        assert!(r.is_ok(), "scenario preparation: {c} failed on the scratch pool: {r:?}");
        self.calls.push(c);
    }

    fn room(&self, path: &str) -> u64 {
        log_room_units(&self.fs, path.as_bytes()).expect("the prepared path exists")
    }

    /// Run `make(i)` (i = 0, 1, ...) while `path`'s tail page has more than
    /// `keep` units of room.
    fn fill_while(&mut self, path: &str, keep: u64, mut make: impl FnMut(u32) -> Vec<Call>) {
        let mut guard = 0;
        while self.room(path) > keep {
            self.n += 1;
            for c in make(self.n) {
                self.run(c);
            }
            guard += 1;
            assert!(guard < 200, "scenario preparation: {path}'s log never filled");
        }
    }

    /// chmod `path` (one Attr entry each) until its tail page is full.
    fn chmod_to_full(&mut self, path: &str, base: u32) {
        let path_s = path.to_string();
        self.fill_while(path, 0, |i| vec![chmod(&path_s, base | (i % 0o100))]);
    }

    /// Create and delete names in directory `dir` (a DentryAdd and a
    /// DentryRemove per round) while more than `keep` units are left.
    fn churn(&mut self, dir: &str, keep: u64, prefix: char) {
        let d = dir.to_string();
        self.fill_while(dir, keep, |i| {
            let name = format!("{d}/{prefix}{}", i % 100);
            vec![open(15, &name, OpenFlags::WRONLY.create()), Call::Close { slot: 15 }, Call::Unlink { path: p(&name) }]
        });
    }

    fn full(&self, path: &str) {
        assert_eq!(self.room(path), 0, "scenario preparation: {path}'s tail page is not exactly full");
    }

    fn done(self) -> Vec<Call> {
        self.calls
    }
}

/// Units a 100-byte write at most takes in a log (an Inline entry; a
/// Write when it folds): fills of small writes stop at this much room, so
/// that none crosses a page, and chmods fill the rest (on a nearly full
/// pool entries of file contents leave a page's last unit to attribute
/// changes, so the fill must not rest on them reaching the page's end).
const SMALL_WRITE_UNITS: u64 = 3;

/// Make room on the nearly full image (ENOENT elsewhere, on both sides).
fn make_room() -> Call {
    Call::Unlink { path: p("/F/f0") }
}

/// `/gcf`: page 1 of its log full of Write entries of file page 0, then a
/// chmod opening page 2, then a Write of the whole page and page 2 full of
/// small Writes: page 1 is all dead (its Attr and its Writes superseded),
/// collected by the next extension.
/// (Chmods fill each page's end: on a nearly full pool entries of file
/// contents leave a page's last unit to attribute changes, docs/DESIGN.md
/// "Space for removals".)
fn fast_file() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(open(0, "/gcf", OpenFlags::RDWR.create()));
    pr.fill_while("/gcf", SMALL_WRITE_UNITS, |i| vec![pw(0, 0, 100, 1000 + i)]);
    pr.chmod_to_full("/gcf", 0o600);
    pr.run(chmod("/gcf", 0o640));
    // A whole-page write first, so that page 1's entries are dead whichever
    // of its small writes folded its deltas into a copy of the page.
    pr.run(pw(0, 0, 4096, 1999));
    pr.fill_while("/gcf", SMALL_WRITE_UNITS, |i| vec![pw(0, 0, 100, 2000 + i)]);
    pr.chmod_to_full("/gcf", 0o600);
    pr.full("/gcf");
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/gcc`: three full log pages, each kept alive by the Write of one file
/// page (0, 1, 2) among dead Attr entries: the next extension (a fourth
/// page) makes the log due for compaction.
fn compact_file() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(open(0, "/gcc", OpenFlags::RDWR.create()));
    for k in 0..3u64 {
        pr.run(pw(0, k * 4096, 100, 3000 + k as u32));
        pr.chmod_to_full("/gcc", 0o600);
    }
    pr.full("/gcc");
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/gcd` (the directory of crash_smoke's `create_collects_dir_log`): page
/// 1 holds its first Attr, the add of x, names added and removed, and the
/// add of y; page 2 the removes of x and y (pinned while page 1 holds the
/// adds they cancel), a chmod (superseding page 1's Attr) and more
/// transient names. Page 1 is then all dead; the next extension collects
/// it and unpins the removes.
fn fast_dir() -> Vec<Call> {
    let mut v = vec![make_room()];
    v.extend(dir_with_a_dead_page("/gcd"));
    v
}

/// The state of `/gcd` ([`fast_dir`]) in the directory `dir`.
fn dir_with_a_dead_page(dir: &str) -> Vec<Call> {
    let name = |n: &str| format!("{dir}/{n}");
    let mut pr = Prep::new();
    pr.run(Call::Mkdir { path: p(dir), perm: 0o755 });
    pr.run(open(0, &name("x"), OpenFlags::WRONLY.create()));
    pr.run(Call::Close { slot: 0 });
    pr.churn(dir, 2, 'p');
    pr.chmod_to_full_keep(dir, 1);
    pr.run(open(0, &name("y"), OpenFlags::WRONLY.create()));
    pr.run(Call::Close { slot: 0 });
    pr.full(dir);
    pr.run(Call::Unlink { path: p(&name("x")) });
    pr.run(Call::Unlink { path: p(&name("y")) });
    pr.run(chmod(dir, 0o700));
    pr.churn(dir, 1, 'q');
    pr.chmod_to_full(dir, 0o700);
    pr.full(dir);
    pr.done()
}

/// The state of `/gcd` ([`fast_dir`]) in the directory `dir` (page 1 of
/// its log all dead but still linked, page 2 full), and then, on the
/// nearly full image, a file `/F/fill` whose one write takes every page
/// left to ordinary changes ([`fill_full_image`]; ENOENT on both sides
/// elsewhere).
///
/// In `/gcs` (`gc_fast_dir_create_no_space`): the next extension of the
/// directory's log finds no page there, so the commit collects the log's
/// dead page and stages into it (`Ferrite::collect_for_space`), where it
/// got ENOSPC until stop 44; on the other images the extension collects
/// the page after its commit, as `gc_fast_dir_create` does.
///
/// In `/gco` (`gc_fast_other_write_no_space`): an append of a page to
/// `/F/fill`, whose own log has no dead page, finds no data page on the
/// nearly full image and collects another inode's dead log page, `/gco`'s
/// (`Ferrite::collect_other_logs`; ENOSPC until stop 45), and writes its
/// data into it. The chmod of `/gco` after it would extend that log: on
/// the nearly full image no page is left for it (ENOSPC, which the
/// harness accepts of the engine). On the other images there is no
/// `/F/fill`: the write fails with EBADF on both sides, and the chmod
/// collects the dead page after its commit.
fn dir_with_a_dead_page_no_space(dir: &str) -> Vec<Call> {
    let mut v = vec![make_room()];
    v.extend(dir_with_a_dead_page(dir));
    let fill = fill_full_image(&v);
    v.extend(fill);
    v
}

/// `/gcu`: a directory whose log keeps a dead page (as `/gcd`), with
/// room made on the nearly full image for the create after the remount.
fn unmount_collects() -> Vec<Call> {
    let mut v = vec![make_room()];
    v.extend(dir_with_a_dead_page("/gcu"));
    v
}

/// The calls that, after `prepare`, leave no page of the nearly full
/// image to ordinary changes: a file `/F/fill` written once with as many
/// pages as fit (its data pages and its first log page). Computed on
/// copies of that image, largest first, so that it stays exact if entry
/// sizes or the image change.
fn fill_full_image(prepare: &[Call]) -> Vec<Call> {
    let filler = |pages: u64| {
        vec![
            open(14, "/F/fill", OpenFlags::RDWR.create()),
            pw(14, 0, (pages * 4096) as u32, 5000),
            Call::Close { slot: 14 },
        ]
    };
    let full = crate::exec::start(crate::workload::StartKind::Full);
    let mount_prepared = || {
        let clock = clock_at(T_BUILD);
        let opts = crate::exec::workload_mount_options(&clock, None);
        let fs = Session::mount(Pmem::from_image(&full.image), &opts).expect("mount the nearly full image");
        let mut slots = Slots::default();
        for c in prepare {
            let r = run_call(&fs, &mut slots, c);
            assert!(r.is_ok(), "scenario preparation: {c} failed on the nearly full image: {r:?}");
        }
        (fs, slots)
    };
    let available = mount_prepared().0.available_pages();
    for pages in (1..available).rev() {
        let (fs, mut slots) = mount_prepared();
        if filler(pages).iter().all(|c| run_call(&fs, &mut slots, c).is_ok()) {
            assert_eq!(fs.available_pages(), 0, "scenario preparation: /F/fill of {pages} pages left pages available");
            return filler(pages);
        }
    }
    panic!("scenario preparation: no write fills the nearly full image ({available} pages available)");
}

/// `/gcdc`: three full log pages, each holding two names that stay (k0,
/// and hard links to it: j0 on page 1, kN and jN on page N + 1) among
/// transient names: the next extension makes the directory due for
/// compaction (even when it removes one of the names: the page keeps the
/// other).
fn compact_dir() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(Call::Mkdir { path: p("/gcdc"), perm: 0o755 });
    pr.run(open(0, "/gcdc/k0", OpenFlags::WRONLY.create()));
    pr.run(Call::Close { slot: 0 });
    pr.run(Call::Link { from: p("/gcdc/k0"), to: p("/gcdc/j0") });
    for k in 0..3 {
        if k > 0 {
            pr.run(Call::Link { from: p("/gcdc/k0"), to: p(&format!("/gcdc/k{k}")) });
            pr.run(Call::Link { from: p("/gcdc/k0"), to: p(&format!("/gcdc/j{k}")) });
        }
        pr.churn("/gcdc", 1, 'r');
        pr.chmod_to_full("/gcdc", 0o700);
    }
    pr.full("/gcdc");
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/gct` (crash_smoke's `chmod_collects_file_log_truncate`): page 1 holds
/// a Write of file page 7 (size 30000), page 2 a Write of page 0 that stays
/// live (its size_after says 30000), page 3 a truncate to 5000 (which
/// cancels the Write on page 1, so it is pinned while page 1 lives), page 4
/// a size-only fallocate (size 5000); each page filled up with Attr
/// entries. Opening page 4 collected page 1 and unpinned the truncate; the
/// next entry opens page 5 and collects page 3, truncate and all: replay
/// must then accept an older Write whose size_after is larger than the
/// later size-only entry.
fn truncate_pin() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(open(0, "/gct", OpenFlags::RDWR.create()));
    pr.run(pw(0, 29_900, 100, 60));
    pr.chmod_to_full("/gct", 0o600);
    pr.run(pw(0, 0, 100, 61));
    pr.chmod_to_full("/gct", 0o600);
    pr.run(Call::Ftruncate { slot: 0, size: 5000 });
    pr.chmod_to_full("/gct", 0o600);
    pr.run(Call::Fallocate { slot: 0, mode: FallocateMode::Default, off: 0, len: 4096 });
    pr.chmod_to_full("/gct", 0o600);
    pr.run(Call::Close { slot: 0 });
    pr.full("/gct");
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// Small writes at distinct offsets of file page 0 of the file in slot 0:
/// with no reads counted the fold limit is 32 deltas (docs/DESIGN.md), so
/// 32 of them leave the page's deltas full and the next small write folds.
fn deltas_to_the_limit(pr: &mut Prep, fsync_each: bool) {
    for k in 0..32u32 {
        pr.run(pw(0, u64::from(k) * 120, 100, 4000 + k));
        if fsync_each {
            pr.run(Call::Fsync { slot: 0 });
        }
    }
}

/// `/fold`: a strict file whose page 0 holds 32 inline deltas.
fn fold_strict() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(open(0, "/fold", OpenFlags::RDWR.create()));
    pr.run(pw(0, 0, 4096, 3999));
    deltas_to_the_limit(&mut pr, false);
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/folda`: an fsync-atomic file whose page 0 is committed and holds 32
/// inline deltas, pending (`committed` false) or committed.
fn fold_atomic(committed: bool) -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(Call::SetDefaultMode { mode: FileMode::FsyncAtomic });
    pr.run(open(0, "/folda", OpenFlags::RDWR.create()));
    pr.run(pw(0, 0, 4096, 3999));
    pr.run(Call::Fsync { slot: 0 });
    deltas_to_the_limit(&mut pr, false);
    if committed {
        pr.run(Call::Fsync { slot: 0 });
    }
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/fr`: an fsync-atomic file whose log's tail page has room for one
/// unit, then (pending) a page written by copy on write (its Write entry
/// takes that unit: no start image is nearly full, where it would be left
/// to attribute changes) and a write in place into that page of the epoch
/// (no entry: the epoch sets a page aside for its closing entry).
fn seal_reserve() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(Call::SetDefaultMode { mode: FileMode::FsyncAtomic });
    pr.run(open(0, "/fr", OpenFlags::RDWR.create()));
    pr.fill_while("/fr", 1, |i| vec![chmod("/fr", 0o600 | (i % 0o100))]);
    assert_eq!(pr.room("/fr"), 1, "scenario preparation: /fr's log has not exactly one unit of room");
    pr.run(pw(0, 0, 4096, 70));
    pr.run(pw(0, 100, 50, 71));
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/gcfa`: an fsync-atomic file whose first log page holds the Write of
/// its file page 0 (kept alive by it) among entries that die (inline
/// deltas over that page covered by later ones, an Attr superseded by a
/// chmod), and whose later pages are full of committed small writes; then
/// (pending) a write of the whole page 0, whose Write kills the first log
/// page in DRAM. Log GC waits for the commit point: the epoch's commit
/// collects the page.
fn gc_atomic_commit() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(Call::SetDefaultMode { mode: FileMode::FsyncAtomic });
    pr.run(open(0, "/gcfa", OpenFlags::RDWR.create()));
    pr.run(pw(0, 0, 4096, 80));
    pr.run(Call::Fsync { slot: 0 });
    pr.fill_while("/gcfa", SMALL_WRITE_UNITS, |i| vec![pw(0, 200, 100, 1000 + i), Call::Fsync { slot: 0 }]);
    pr.chmod_to_full("/gcfa", 0o600);
    pr.run(chmod("/gcfa", 0o640));
    pr.fill_while("/gcfa", SMALL_WRITE_UNITS, |i| vec![pw(0, 200, 100, 2000 + i), Call::Fsync { slot: 0 }]);
    pr.chmod_to_full("/gcfa", 0o600);
    pr.full("/gcfa");
    pr.run(pw(0, 0, 4096, 81));
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

/// `/gcci`: as `/gcc` (three full log pages, each kept alive by one file
/// page's Write), each page also holding a live inline delta over its file
/// page: the compaction copies the deltas too.
fn compact_file_inline() -> Vec<Call> {
    let mut pr = Prep::new();
    pr.run(open(0, "/gcci", OpenFlags::RDWR.create()));
    for k in 0..3u64 {
        pr.run(pw(0, k * 4096, 4096, 3100 + k as u32));
        pr.run(pw(0, k * 4096 + 10, 100, 3200 + k as u32));
        pr.chmod_to_full("/gcci", 0o600);
    }
    pr.full("/gcci");
    let mut v = vec![make_room()];
    v.extend(pr.done());
    v
}

impl Prep {
    /// chmod `path` until at most `keep` units are left.
    fn chmod_to_full_keep(&mut self, path: &str, keep: u64) {
        let path_s = path.to_string();
        self.fill_while(path, keep, |i| vec![chmod(&path_s, 0o700 | (i % 0o100))]);
    }
}

fn sc(name: &'static str, expect: Expect, prepare: Vec<Call>, setup: Vec<Call>, calls: Vec<Call>) -> Scenario {
    Scenario { name, expect, workload: Workload { id: format!("sc.{name}"), prepare, setup, calls, buffered: None } }
}

fn build() -> Vec<Scenario> {
    use Expect::*;
    let rdwr = OpenFlags::RDWR;
    let (fast_file, compact_file, fast_dir, compact_dir, truncate_pin) =
        (fast_file(), compact_file(), fast_dir(), compact_dir(), truncate_pin());
    vec![
        // ---- garbage collection ----
        // A data write that extends the log and collects its dead page
        // (the replaced data page is freed in the same call).
        sc("gc_fast_file_write", FastGc, fast_file.clone(), vec![], vec![pw(0, 0, 100, 7)]),
        // The same with a truncate (a Write of the cut page and a Truncate).
        sc("gc_fast_file_truncate", FastGc, fast_file, vec![], vec![Call::Ftruncate { slot: 0, size: 50 }]),
        // A create (journaled: the directory's tail and the new inode)
        // whose directory log extension collects a page holding removed
        // names' adds; then a clean unmount and a mount (the lazy rebuild
        // of the directory from its collected log, compared with the model).
        sc(
            "gc_fast_dir_create",
            FastGc,
            fast_dir,
            vec![],
            vec![open(0, "/gcd/w", OpenFlags::WRONLY.create()), Call::Remount],
        ),
        // The same create with no page available to it (on the nearly
        // full image): its commit collects the directory's dead page and
        // stages the name there.
        sc(
            "gc_fast_dir_create_no_space",
            FastGc,
            dir_with_a_dead_page_no_space("/gcs"),
            vec![],
            vec![open(0, "/gcs/w", OpenFlags::WRONLY.create()), Call::Remount],
        ),
        // A write that finds no page (on the nearly full image) while its
        // own log has no dead page: it collects another directory's.
        sc(
            "gc_fast_other_write_no_space",
            FastGcWhereRun,
            dir_with_a_dead_page_no_space("/gco"),
            vec![open(1, "/F/fill", OpenFlags::WRONLY.append())],
            vec![Call::Write { slot: 1, len: 4096, tag: 45 }, chmod("/gco", 0o750), Call::Remount],
        ),
        // A clean unmount collects every cached log's dead pages before it
        // saves the allocator (stop 46): `/gcu`'s, which no extension of
        // that directory would take; then a create in it on the new mount.
        sc(
            "gc_unmount",
            FastGc,
            unmount_collects(),
            vec![],
            vec![Call::Remount, open(0, "/gcu/w", OpenFlags::WRONLY.create())],
        ),
        // After a crash, recovery lists the logs it finds holding dead
        // pages (stop 47): on the nearly full image an append to
        // `/F/fill` finds no page, and the visit of the cached logs
        // rebuilds `/gcr`, which nothing has touched since the mount, and
        // collects its dead page for the write; then a chmod of `/gcr`,
        // and a clean unmount and a mount.
        sc(
            "gc_after_crash",
            FastGcWhereRun,
            dir_with_a_dead_page_no_space("/gcr"),
            vec![Call::CrashRemount, open(1, "/F/fill", OpenFlags::WRONLY.append())],
            vec![Call::Write { slot: 1, len: 4096, tag: 47 }, chmod("/gcr", 0o750), Call::Remount],
        ),
        // A chmod that collects a file's truncate page; then a clean
        // unmount and a mount.
        sc("gc_fast_file_truncate_pin", FastGc, truncate_pin, vec![], vec![chmod("/gct", 0o644), Call::Remount]),
        // A write that makes a file's log due: compaction (its own journal
        // transaction) inside the write.
        sc("gc_compact_file_write", Compaction, compact_file.clone(), vec![], vec![pw(0, 3 * 4096, 100, 8)]),
        // The same from a chmod (no data page allocated by the call).
        sc("gc_compact_file_chmod", Compaction, compact_file, vec![], vec![chmod("/gcc", 0o644)]),
        // A create whose directory log extension makes it due: the
        // create's journal transaction, then the compaction's.
        sc("gc_compact_dir_create", Compaction, compact_dir.clone(), vec![], vec![open(0, "/gcdc/new", rdwr.create())]),
        // An unlink of one of the kept names (a hard link: the inode keeps
        // its other names and gets an Attr with the lower link count) that
        // makes the directory due: compaction inside the unlink.
        sc("gc_compact_dir_unlink", Compaction, compact_dir, vec![], vec![Call::Unlink { path: p("/gcdc/j2") }]),
        // ---- sub-page writes and the fsync-atomic mode ----
        // A small write past the fold limit of a strict file: the merged
        // page copied on write; then a small write into the new page.
        sc("fold_strict", Fold, fold_strict(), vec![], vec![pw(0, 3900, 100, 90), pw(0, 10, 100, 91)]),
        // The same in an fsync-atomic file with the deltas pending, then
        // its fsync (a crash inside the commit of a fold).
        sc(
            "fold_atomic_pending",
            Fold,
            fold_atomic(false),
            vec![],
            vec![pw(0, 3900, 100, 92), Call::Fsync { slot: 0 }],
        ),
        // With the deltas committed.
        sc(
            "fold_atomic_committed",
            Fold,
            fold_atomic(true),
            vec![],
            vec![pw(0, 3900, 100, 93), pw(0, 3950, 10, 94), Call::Fsync { slot: 0 }],
        ),
        // A commit whose closing entry opens the page the epoch set aside.
        sc("seal_into_reserve", SealInReserve, seal_reserve(), vec![], vec![Call::Fsync { slot: 0 }, Call::Remount]),
        // Log GC of an fsync-atomic file at its commit point.
        sc("gc_fast_atomic_commit", FastGc, gc_atomic_commit(), vec![], vec![Call::Fsync { slot: 0 }]),
        // A compaction that copies live inline deltas; then a clean
        // unmount and mount.
        sc(
            "gc_compact_file_inline",
            Compaction,
            compact_file_inline(),
            vec![],
            vec![chmod("/gcci", 0o644), Call::Remount],
        ),
        // ---- crash_smoke's operations that the catalogue lacks ----
        // rmdir of an empty directory (the catalogue's /B and /A are not
        // empty: ENOTEMPTY).
        sc(
            "rmdir_empty",
            Nothing,
            vec![Call::Mkdir { path: p("/B/E"), perm: 0o755 }],
            vec![],
            vec![Call::Rmdir { path: p("/B/E") }],
        ),
        // A directory moved over an empty directory (which is freed).
        sc(
            "rename_dir_over_empty_dir",
            Nothing,
            vec![Call::Mkdir { path: p("/B/E"), perm: 0o755 }],
            vec![],
            vec![Call::Rename { from: p("/A/C"), to: p("/B/E"), flags: RenameFlags::Replace }],
        ),
        // RENAME_EXCHANGE within one directory (one log append).
        sc(
            "rename_exchange_same_dir",
            Nothing,
            vec![],
            vec![],
            vec![Call::Rename { from: p("/foo"), to: p("/bar"), flags: RenameFlags::Exchange }],
        ),
        // Unlink an open file, write to it, close it (the orphan, with the
        // pages written after the unlink, freed by the close).
        sc(
            "unlink_write_close",
            Nothing,
            vec![],
            vec![open(0, "/A/bar", rdwr)],
            vec![Call::Unlink { path: p("/A/bar") }, pw(0, 100, 9000, 50), Call::Close { slot: 0 }],
        ),
        // fallocate growing the size over pages preallocated past EOF
        // (a size-only change).
        sc(
            "fallocate_grow_over_preallocated",
            Nothing,
            vec![
                open(0, "/foo", rdwr),
                Call::Fallocate { slot: 0, mode: FallocateMode::KeepSize, off: 8192, len: 8192 },
            ],
            vec![],
            vec![Call::Fallocate { slot: 0, mode: FallocateMode::Default, off: 0, len: 12_000 }],
        ),
        // A write starting past EOF inside the last page and extending
        // over two more pages.
        sc("write_extending_crossing", Nothing, vec![], vec![open(0, "/foo", rdwr)], vec![pw(0, 6000, 10_000, 14)]),
        // 64 KiB in one write (16 fresh pages; ENOSPC on the full image).
        sc("write_large_64k", Nothing, vec![], vec![open(0, "/bar", rdwr)], vec![pw(0, 0, 65_536, 17)]),
        // A whole-page write by inode number whose file is unlinked
        // between the write's page allocation and its lock (forced in
        // `tests/precopy.rs`; elsewhere the unlink comes first): ENOENT,
        // the copied pages given back fenced; then another file's write
        // takes pages again. Room made first on the full image.
        sc(
            "write_racing_unlink",
            Nothing,
            vec![
                make_room(),
                open(0, "/A/wru", rdwr.create()),
                pw(0, 0, 8192, 40),
                Call::Close { slot: 0 },
                open(0, "/A/wru2", rdwr.create()),
                Call::Close { slot: 0 },
            ],
            vec![open(1, "/A/wru2", rdwr)],
            vec![Call::WriteRacingUnlink { path: p("/A/wru"), page: 1 }, pw(1, 0, 8192, 41)],
        ),
        // Short sequences (each call one step for the oracle).
        sc(
            "atomic_replace",
            Nothing,
            vec![],
            vec![],
            vec![
                open(0, "/A/tmp", rdwr.create().excl()),
                pw(0, 0, 6000, 30),
                Call::Fsync { slot: 0 },
                Call::Close { slot: 0 },
                Call::Rename { from: p("/A/tmp"), to: p("/foo"), flags: RenameFlags::Replace },
            ],
        ),
        sc(
            "mkdir_populate_rmdir",
            Nothing,
            vec![],
            vec![],
            vec![
                Call::Mkdir { path: p("/X"), perm: 0o755 },
                open(0, "/X/f", rdwr.create()),
                pw(0, 0, 700, 31),
                Call::Close { slot: 0 },
                Call::Unlink { path: p("/X/f") },
                Call::Rmdir { path: p("/X") },
            ],
        ),
        sc(
            "rename_chain",
            Nothing,
            vec![],
            vec![],
            vec![
                Call::Rename { from: p("/A/bar"), to: p("/B/x"), flags: RenameFlags::Replace },
                Call::Rename { from: p("/B/x"), to: p("/A/C/y"), flags: RenameFlags::Replace },
                Call::Rename { from: p("/A/C"), to: p("/B/C"), flags: RenameFlags::Replace },
            ],
        ),
    ]
}

/// Every scenario (built once per process).
pub fn scenarios() -> &'static [Scenario] {
    static S: OnceLock<Vec<Scenario>> = OnceLock::new();
    S.get_or_init(build)
}

/// The scenario named `name`.
pub fn by_name(name: &str) -> Option<Scenario> {
    scenarios().iter().find(|s| s.name == name).cloned()
}

/// `ops_max` of [`buffered_gc_deferred`]: no back-pressure while its
/// preparing calls grow the log (a batch made durable inside an extending
/// call would let GC run early and collect the garbage it needs).
const GC_DEFERRED_OPS_MAX: u64 = 4096;

/// `bsc.gc_deferred`, a buffered workload (issue 13): log GC of an inode
/// with operations queued. On a buffered mount fast GC collects only the
/// dead log pages whose death is durable (`LogPage::died_at`) and never
/// persists the queue for them. The preparing calls (computed on a scratch
/// buffered mount, as the scenarios' are, each made durable) grow the log
/// of the directory `/gcbd` by chmods until it has two pages and the
/// second is full: the first page died when the second opened, and that
/// death is durable, but no change has extended the log since, so it is
/// still linked. Recording then queues two operations on `/q`, and a chmod
/// of `/gcbd` opens its third page and kills the second, whose death is
/// not durable: GC must collect the first page and keep the second, which
/// holds the durable tail and the Attr a crash needs; a mkdir in `/gcbd`
/// and a sync follow. (Named when GC waited for 16 dead pages and then
/// persisted the queue inline: it was written to reach that path.)
pub fn buffered_gc_deferred() -> Workload {
    static PREP: OnceLock<Vec<Call>> = OnceLock::new();
    let prep = PREP.get_or_init(|| {
        let clock = clock_at(T_BUILD);
        let fresh = Session::format(Pmem::heap(GEOMETRY.pages * 4096), &format_options(GEOMETRY, &clock))
            .expect("format a scratch pool");
        let pmem = fresh.pmem().clone();
        fresh.unmount().expect("unmount the scratch pool");
        let opts =
            crate::exec::workload_mount_options(&clock, Some(crate::workload::Buffering::ops(GC_DEFERRED_OPS_MAX)));
        let fs = Session::mount(Pmem::from_image(&pmem.image()), &opts).expect("mount the scratch pool buffered");
        let mut slots = Slots::default();
        let mut calls = Vec::new();
        let mut run = |c: Call, calls: &mut Vec<Call>| {
            let r = run_call(&fs, &mut slots, &c);
            assert!(r.is_ok(), "bsc.gc_deferred preparation: {c} failed: {r:?}");
            // The durable tail is what `log_room_units` reads.
            fs.engine().persist_now().expect("persist the scratch pool");
            calls.push(c);
        };
        run(Call::Mkdir { path: p("/gcbd"), perm: 0o755 }, &mut calls);
        // Until the second log page is full. Counted by pages filled, not
        // by pages linked, so that an engine that collects the first page
        // too early still gets a full tail page here, and the recorded
        // chmod still tests it.
        let mut filled = 0;
        let mut room_was = 1;
        for i in 0u32.. {
            let pages = fs.stat(b"/gcbd").expect("stat /gcbd").blocks / 8;
            let room = log_room_units(&fs, b"/gcbd").expect("/gcbd exists");
            if room == 0 && room_was != 0 {
                filled += 1;
            }
            room_was = room;
            if filled == 2 {
                break;
            }
            assert!(pages <= 2 && i < 4000, "bsc.gc_deferred preparation: /gcbd's log has {pages} pages");
            run(chmod("/gcbd", 0o700 | (i % 0o100)), &mut calls);
        }
        calls
    });
    // Room for the log on the nearly full image (ENOENT elsewhere).
    let mut prepare = vec![make_room(), Call::Unlink { path: p("/F/f1") }];
    prepare.extend(prep.iter().cloned());
    Workload {
        id: "bsc.gc_deferred".into(),
        prepare,
        setup: Vec::new(),
        calls: vec![
            open(12, "/q", OpenFlags::RDWR.create()),
            pw(12, 0, 100, 71),
            chmod("/gcbd", 0o751),
            Call::Mkdir { path: p("/gcbd/x"), perm: 0o755 },
            Call::Sync,
        ],
        buffered: Some(crate::workload::Buffering::ops(GC_DEFERRED_OPS_MAX)),
    }
}

/// `bsc.partial_persist`, a buffered workload (issue 13): a persist that
/// stops with operations it took from the queue still pending, newer
/// operations queued behind them, then a sync. Batches of at most four
/// words: four mkdirs in four directories set eight words (each a parent's
/// tail and the new inode's state), two batches; `persist_all_but(2)`
/// persists the first (the first two mkdirs) and leaves the other two
/// taken; a fifth mkdir is queued; the sync must persist the two taken
/// first. Row B10 of docs/TESTING.md: swapping the queue in while they wait
/// persists the fifth before them, a state no prefix of the calls gives.
/// This is the state a persister thread leaves when callers keep queueing,
/// which the single-threaded harness otherwise never reaches.
pub fn buffered_partial_persist() -> Workload {
    Workload {
        id: "bsc.partial_persist".into(),
        // Room on the nearly full image (ENOENT elsewhere).
        prepare: vec![make_room(), Call::Unlink { path: p("/F/f1") }],
        setup: Vec::new(),
        calls: vec![
            Call::Mkdir { path: p("/A/pp1"), perm: 0o755 },
            Call::Mkdir { path: p("/B/pp2"), perm: 0o755 },
            Call::Mkdir { path: p("/A/C/pp3"), perm: 0o755 },
            Call::Mkdir { path: p("/pp4"), perm: 0o755 },
            Call::PersistAllBut { newest: 2 },
            Call::Mkdir { path: p("/B/pp5"), perm: 0o755 },
            Call::Sync,
        ],
        buffered: Some(crate::workload::Buffering { ops_max: 64, batch_words_max: ferrite::BATCH_WORDS_MIN }),
    }
}

/// The scenarios on a buffered mount ([`crate::workload::buffered_scenario`]),
/// [`buffered_gc_deferred`] and [`buffered_partial_persist`].
pub fn buffered_scenarios() -> Vec<Workload> {
    let mut v: Vec<Workload> = scenarios().iter().map(crate::workload::buffered_scenario).collect();
    v.push(buffered_gc_deferred());
    v.push(buffered_partial_persist());
    v
}
