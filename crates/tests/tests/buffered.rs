//! Model-based test of buffered mounts (issue 13): seeded random sequences
//! of operations (creates, opens with O_TRUNC / O_APPEND / O_SYNC, writes,
//! truncates, fallocate and punch hole, mkdir, rmdir, unlink, rename with
//! every flag, hard links, symlinks, chmod, utimens, extended attributes,
//! closes of unlinked files) run on a buffered engine and on the in-memory
//! reference model (`ferrite-model`) side by side, with sync points among
//! them (fsync, fdatasync, O_SYNC writes, `sync_all`, `persist_now`), and
//! prove:
//!
//! - reads always see the latest state: every call returns what the
//!   model's returns, reads included, and every few steps the whole tree
//!   (names, kinds, attributes, times, bytes, link groups, extended
//!   attributes) equals the model's;
//! - a crash (the engine dropped without unmounting, as a killed process
//!   leaves it: on a heap pool its image, on a pool file in /dev/shm the
//!   file itself) leaves a pool that fsck finds clean, with no page leaked,
//!   which mounts, and whose tree equals the model after SOME prefix of the
//!   operations in the order they returned that contains every operation
//!   before the last completed sync point: the test keeps the model's state
//!   after every change since the last sync point and finds the recovered
//!   pool among them (then carries on from that state);
//! - a clean unmount drains: the next mount equals the model's latest
//!   state, and fsck is clean;
//! - `user.ferrite.mode` reads `buffered` on every regular file of a
//!   buffered mount, setting it to `buffered` is EINVAL, and setting a
//!   stored mode is accepted;
//! - the engine's counters agree with the bounds: never more than
//!   `ops_max` operations pending after a call returns, and no more
//!   persisted than queued.
//!
//! Four configurations: the persister thread with the default bounds on a
//! heap pool, and with a small `ops_max` and lag on a /dev/shm pool file;
//! no persister thread (`persister_thread: false`: operations become
//! durable only at sync points and by back-pressure, so a crash loses
//! exactly what the test did since) with a small `ops_max` on both kinds of
//! pool. Now and then a crash is followed by a mount that is not buffered
//! (strict: every operation durable at once), and the next remount goes
//! back to buffered. Two more run on a nearly full pool, without and with
//! the persister thread: a ballast file leaves `FERRITE_FULL_FREE_PAGES`
//! pages available (default 12) beside a model with room for everything,
//! and a change the engine refuses with ENOSPC where the model makes it
//! puts the model back to before the step, so the refused change must
//! leave no trace: in the latest state, in what a crash recovers, in the
//! pool (fsck, nothing leaked).
//!
//! Every run prints its seed; replay one with
//! `FERRITE_SEED=<seed> cargo test -p ferrite-tests --test buffered <test name>`.
//! `FERRITE_STEPS` sets the steps per seed (default 1500) and
//! `FERRITE_SEEDS=<n>` the number of seeds per configuration (default 3).

use ferrite::{
    BufferedOptions, Errno, FallocateMode, Fd, FileMode, FileType, FormatOptions, FsResult, ManualClock, MountOptions,
    OpenFlags, PathFs, RenameFlags, Session, TimeSet, TimeSpec, XattrSetMode,
};
use ferrite_model::{diff_trees, tree_of, ModelFs, ModelState, Tree};
use ferrite_pmem::Pmem;
use ferrite_tests::{pattern, seed_from_env, splitmix64};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const PAGE: u64 = 4096;
const POOL_PAGES: u64 = 4096;
/// The pool of the nearly full configuration (2 MiB: every comparison
/// reads the ballast too).
const FULL_POOL_PAGES: u64 = 512;
const INODES: u64 = 256;
/// Most descriptors the sequence keeps open at once.
const FDS_MAX: usize = 6;

const DIRS: &[&str] = &["", "/a", "/b", "/a/c"];
const NAMES: &[&str] = &["f", "g", "h", "c", "d"];
const XATTRS: &[&[u8]] = &[b"user.one", b"user.two", b"trusted.t"];

#[derive(Clone, Copy, Debug)]
enum PoolKind {
    Heap,
    Shm,
}

#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    pool: PoolKind,
    persister_thread: bool,
    ops_max: u64,
    lag_ns_max: u64,
    /// A pool of `FULL_POOL_PAGES` that a ballast file fills until this
    /// many pages are available, beside a model with room for everything
    /// (see `step`); None: a pool of `POOL_PAGES`, and a model of its size.
    full_free_pages: Option<u64>,
}

impl Config {
    fn buffered(&self) -> BufferedOptions {
        BufferedOptions {
            lag_ns_max: self.lag_ns_max,
            ops_max: self.ops_max,
            persister_thread: self.persister_thread,
            ..Default::default()
        }
    }
}

/// The extended attributes of one inode: (name, value), in name order.
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// What a comparison looks at: the tree and the extended attributes of
/// every regular file and directory (by path).
#[derive(PartialEq, Eq, Debug)]
struct Snap {
    tree: Tree,
    xattrs: BTreeMap<Vec<u8>, Xattrs>,
}

fn snap(fs: &dyn PathFs) -> FsResult<Snap> {
    let tree = tree_of(fs)?;
    let mut xattrs = BTreeMap::new();
    for (path, node) in &tree {
        let flags = match node.kind {
            FileType::Regular => OpenFlags::RDONLY,
            FileType::Directory => OpenFlags::RDONLY.directory(),
            _ => continue,
        };
        let fd = fs.open(path, flags, 0)?;
        let mut list = Vec::new();
        for name in fs.flistxattr(fd)? {
            let v = fs.fgetxattr(fd, &name)?;
            list.push((name, v));
        }
        fs.close(fd)?;
        if !list.is_empty() {
            xattrs.insert(path.clone(), list);
        }
    }
    Ok(Snap { tree, xattrs })
}

fn describe_diff(want: &Snap, got: &Snap) -> String {
    let mut s = String::new();
    if want.tree != got.tree {
        s.push_str(&diff_trees(&want.tree, &got.tree));
    }
    if want.xattrs != got.xattrs {
        s.push_str(&format!("xattrs: model {:?}\n        engine {:?}\n", want.xattrs, got.xattrs));
    }
    s
}

/// A pool file in /dev/shm, removed when dropped.
struct ShmPool(std::path::PathBuf);

impl Drop for ShmPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What one run saw, printed at its end.
#[derive(Default, Debug)]
struct Stats {
    steps: usize,
    changes: u64,
    sync_points: u64,
    crashes: u64,
    /// Crashes after which the pool held operations past the last sync point.
    crashes_past_sync: u64,
    /// Crashes that lost operations (the pool was not at the latest state).
    crashes_lost: u64,
    /// Operations lost by crashes, in total.
    ops_lost: u64,
    clean_remounts: u64,
    strict_mounts: u64,
    most_pending: u64,
    /// Steps the engine refused with ENOSPC where the model had room.
    enospc: u64,
}

struct Run {
    seed: u64,
    cfg: Config,
    clock: Arc<ManualClock>,
    engine: Option<Session>,
    model: ModelFs,
    shm: Option<ShmPool>,
    /// Open descriptors: (engine, model, opened with O_SYNC or O_DSYNC).
    fds: Vec<(Fd, Fd, bool)>,
    /// The model's state at the last completed sync point, then after each
    /// change since (oldest first): the states a crash may leave.
    since_sync: Vec<ModelState>,
    stats: Stats,
}

fn format_opts(clock: &Arc<ManualClock>) -> FormatOptions {
    FormatOptions { lanes: 2, inodes: Some(INODES), clock: clock.clone() }
}

impl Run {
    fn new(seed: u64, cfg: Config) -> Run {
        let clock = ferrite_tests::manual_clock(1_000_000);
        let pool_pages = if cfg.full_free_pages.is_some() { FULL_POOL_PAGES } else { POOL_PAGES };
        let (pmem, shm) = match cfg.pool {
            PoolKind::Heap => (Pmem::heap(pool_pages * PAGE), None),
            PoolKind::Shm => {
                let path = std::path::PathBuf::from(format!(
                    "/dev/shm/ferrite-buffered-test-{}-{}-{seed:x}.pool",
                    std::process::id(),
                    cfg.name
                ));
                let _ = std::fs::remove_file(&path);
                (Pmem::create_file(&path, pool_pages * PAGE, 0).expect("create the pool file"), Some(ShmPool(path)))
            }
        };
        let fs = Session::format(pmem, &format_opts(&clock)).expect("format");
        let model_pages = if cfg.full_free_pages.is_some() { 1 << 30 } else { POOL_PAGES };
        let model = ModelFs::new(clock.clone(), model_pages, INODES);
        let mut run = Run {
            seed,
            cfg,
            clock,
            engine: Some(fs),
            model,
            shm,
            fds: Vec::new(),
            since_sync: Vec::new(),
            stats: Stats::default(),
        };
        // Formatting mounts strict: mount the pool again, buffered.
        let pmem = run.take_down(false);
        run.mount(pmem, true);
        if let Some(free) = cfg.full_free_pages {
            // A file `/ballast` (a name the sequences never make).
            ferrite_tests::add_ballast(run.engine(), &run.model, free, 16 * 1024);
        }
        run.since_sync = vec![run.model.snapshot()];
        run
    }

    fn engine(&self) -> &Session {
        self.engine.as_ref().expect("mounted")
    }

    fn ctx(&self, step: usize, what: &str) -> String {
        format!("{}: seed {:#x}, step {step} ({what})", self.cfg.name, self.seed)
    }

    /// Unmount cleanly or drop the engine (a crash), check the pool with
    /// fsck (clean, nothing leaked), and return it, ready to mount.
    fn take_down(&mut self, crash: bool) -> Pmem {
        let fs = self.engine.take().expect("mounted");
        self.fds.clear();
        let pmem = match self.cfg.pool {
            PoolKind::Heap => {
                let pmem = fs.pmem().clone();
                if crash {
                    drop(fs);
                } else {
                    fs.unmount().expect("clean unmount");
                }
                let image = pmem.image();
                drop(pmem);
                Pmem::from_image(&image)
            }
            PoolKind::Shm => {
                if crash {
                    drop(fs);
                } else {
                    fs.unmount().expect("clean unmount");
                }
                let path = &self.shm.as_ref().expect("a pool file").0;
                Pmem::open_file(path, 0).expect("reopen the pool file")
            }
        };
        let report = ferrite::fsck::check(&pmem).expect("fsck runs");
        assert!(
            report.is_clean(),
            "{}: seed {:#x}: fsck after a {} unmount:\n{report}",
            self.cfg.name,
            self.seed,
            if crash { "crash" } else { "clean" }
        );
        pmem
    }

    fn mount(&mut self, pmem: Pmem, buffered: bool) {
        let opts = MountOptions {
            clock: self.clock.clone(),
            recovery_threads: 2,
            buffered: buffered.then(|| self.cfg.buffered()),
            ..MountOptions::default()
        };
        let fs = Session::mount(pmem, &opts).expect("mount");
        assert_eq!(fs.is_buffered(), buffered, "{}: seed {:#x}", self.cfg.name, self.seed);
        if !buffered {
            self.stats.strict_mounts += 1;
        }
        self.engine = Some(fs);
    }

    /// A completed sync point: everything so far is durable.
    fn synced(&mut self) {
        self.stats.sync_points += 1;
        self.since_sync = vec![self.model.snapshot()];
    }

    /// A change returned: a crash may now leave the state after it.
    fn changed(&mut self) {
        self.stats.changes += 1;
        if self.engine().is_buffered() {
            self.since_sync.push(self.model.snapshot());
        } else {
            // Strict: durable at return.
            self.since_sync = vec![self.model.snapshot()];
        }
    }

    /// The whole tree and the xattrs must equal the model's latest state.
    fn compare_all(&self, step: usize, what: &str) {
        let e = snap(self.engine()).unwrap_or_else(|e| panic!("{}: engine walk: {e:?}", self.ctx(step, what)));
        let m = snap(&self.model).expect("model walk");
        if e != m {
            panic!(
                "{}: the engine differs from the model (expected = model):\n{}",
                self.ctx(step, what),
                describe_diff(&m, &e)
            );
        }
    }

    /// Crash, recover, and find the recovered pool among the states since
    /// the last sync point; the model carries on from the one it matches.
    fn crash(&mut self, step: usize, rng: &mut ChaCha8Rng) {
        let pmem = self.take_down(true);
        self.stats.crashes += 1;
        let buffered = rng.gen_range(0..4) != 0;
        self.mount(pmem, buffered);
        let got =
            snap(self.engine()).unwrap_or_else(|e| panic!("{}: walk after recovery: {e:?}", self.ctx(step, "crash")));
        let mut found = None;
        for (i, state) in self.since_sync.iter().enumerate().rev() {
            let m = ModelFs::from_state(state.crashed(), self.clock.clone());
            if snap(&m).expect("model walk") == got {
                found = Some(i);
                break;
            }
        }
        let Some(i) = found else {
            let first = ModelFs::from_state(self.since_sync[0].crashed(), self.clock.clone());
            let last = ModelFs::from_state(self.since_sync.last().expect("a state").crashed(), self.clock.clone());
            panic!(
                "{}: the recovered pool is not the state after any prefix of the operations since the last \
                 sync point ({} states).\nAgainst the state at the sync point:\n{}\nAgainst the latest state:\n{}",
                self.ctx(step, "crash"),
                self.since_sync.len(),
                describe_diff(&snap(&first).unwrap(), &got),
                describe_diff(&snap(&last).unwrap(), &got)
            );
        };
        let last = self.since_sync.len() - 1;
        if i > 0 {
            self.stats.crashes_past_sync += 1;
        }
        if i < last {
            self.stats.crashes_lost += 1;
            self.stats.ops_lost += (last - i) as u64;
        }
        let state = self.since_sync[i].crashed();
        self.model.restore(state);
        self.since_sync = vec![self.model.snapshot()];
    }

    fn clean_remount(&mut self, step: usize) {
        let pmem = self.take_down(false);
        self.stats.clean_remounts += 1;
        self.mount(pmem, true);
        self.model.remount_clean();
        self.since_sync = vec![self.model.snapshot()];
        self.compare_all(step, "after a clean remount");
    }
}

fn path(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let dir = DIRS[rng.gen_range(0..DIRS.len())];
    let name = NAMES[rng.gen_range(0..NAMES.len())];
    format!("{dir}/{name}").into_bytes()
}

fn offset(rng: &mut ChaCha8Rng) -> u64 {
    match rng.gen_range(0..4) {
        0 => 0,
        1 => PAGE * rng.gen_range(0..8),
        _ => rng.gen_range(0..40_000),
    }
}

fn length(rng: &mut ChaCha8Rng) -> usize {
    match rng.gen_range(0..4) {
        0 => rng.gen_range(1..200),
        1 => rng.gen_range(200..5000),
        2 => PAGE as usize * rng.gen_range(1..3),
        _ => rng.gen_range(1..12_000),
    }
}

fn time(rng: &mut ChaCha8Rng) -> TimeSet {
    if rng.gen_bool(0.5) {
        TimeSet::Now
    } else {
        TimeSet::At(TimeSpec { sec: rng.gen_range(0..2_000_000_000), nsec: rng.gen_range(0..1_000_000_000) })
    }
}

/// One step: a random operation on both sides, results compared.
fn step(run: &mut Run, rng: &mut ChaCha8Rng, step: usize) {
    run.clock.advance_ns(rng.gen_range(1..2_000_000));
    let e = run.engine.take().expect("mounted");
    let m = &run.model;
    let pick_fd = |rng: &mut ChaCha8Rng, fds: &[(Fd, Fd, bool)]| -> Option<(Fd, Fd, bool)> {
        (!fds.is_empty()).then(|| fds[rng.gen_range(0..fds.len())])
    };
    let choice = rng.gen_range(0..100);
    let what: &str;
    // (changed the pool, was a sync point)
    let mut change = false;
    let mut sync = false;
    // On a nearly full pool the engine may refuse a change with ENOSPC
    // where the model, with room for everything, makes it: the refused
    // change must have left no trace, so the model goes back to its state
    // before the step (taken here, or in `open` after the close that makes
    // room for a descriptor), and the comparisons that follow check that.
    let full = run.cfg.full_free_pages.is_some();
    let mut before = full.then(|| (m.snapshot(), run.fds.clone(), false));
    let mut refused = false;
    // Both sides' results must be equal; true when they succeeded.
    macro_rules! same {
        ($a:expr, $b:expr) => {{
            let (x, y) = ($a, $b);
            if full && matches!(&x, Err(e) if *e == Errno::ENOSPC) && y.is_ok() {
                refused = true;
                false
            } else {
                assert_eq!(x, y, "{}: engine (left) and model (right) differ", run.ctx(step, what));
                let ok: bool = x.is_ok();
                ok
            }
        }};
    }
    match choice {
        0..=11 => {
            what = "open";
            if run.fds.len() >= FDS_MAX {
                let (x, y, _) = run.fds.remove(0);
                // The last close of an unlinked file frees it: a change.
                change = same!(e.close(x), m.close(y));
                if full {
                    before = Some((m.snapshot(), run.fds.clone(), change));
                }
            }
            let p = path(rng);
            let mut f = if rng.gen_bool(0.2) { OpenFlags::RDONLY } else { OpenFlags::RDWR };
            f.create = rng.gen_bool(0.7);
            f.excl = rng.gen_bool(0.1);
            f.trunc = f.write && rng.gen_bool(0.12);
            f.append = f.write && rng.gen_bool(0.1);
            let osync = f.write && rng.gen_bool(0.12);
            if osync {
                if rng.gen_bool(0.5) {
                    f.sync = true;
                } else {
                    f.dsync = true;
                }
            }
            let (x, y) = (e.open(&p, f, 0o644), m.open(&p, f, 0o644));
            if full && x == Err(Errno::ENOSPC) && y.is_ok() {
                refused = true;
            } else {
                assert_eq!(x.is_ok(), y.is_ok(), "{}: engine {x:?}, model {y:?}", run.ctx(step, what));
            }
            if let (Ok(x), Ok(y)) = (x, y) {
                run.fds.push((x, y, osync));
                // A create or a truncation is a change (an open of an
                // existing file without O_TRUNC changes nothing that the
                // comparison sees).
                change |= f.create || f.trunc;
            } else if !refused {
                assert_eq!(x.err(), y.err(), "{}", run.ctx(step, what));
            }
        }
        12..=17 => {
            what = "close";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                run.fds.retain(|&(a, _, _)| a != x);
                // The last close of an unlinked file frees it.
                change = same!(e.close(x), m.close(y));
            }
        }
        18..=37 => {
            what = "pwrite";
            if let Some((x, y, osync)) = pick_fd(rng, &run.fds) {
                let off = offset(rng);
                let data = pattern(splitmix64(run.seed ^ step as u64), length(rng));
                change = same!(e.pwrite(x, &data, off), m.pwrite(y, &data, off));
                sync = change && osync;
            }
        }
        38..=40 => {
            what = "write";
            if let Some((x, y, osync)) = pick_fd(rng, &run.fds) {
                let data = pattern(splitmix64(run.seed ^ step as u64 ^ 0x77), length(rng));
                change = same!(e.write(x, &data), m.write(y, &data));
                sync = change && osync;
            }
        }
        41..=44 => {
            what = "ftruncate";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let size = if rng.gen_bool(0.3) { 0 } else { offset(rng) };
                change = same!(e.ftruncate(x, size), m.ftruncate(y, size));
            }
        }
        45..=46 => {
            what = "truncate";
            let p = path(rng);
            let size = offset(rng);
            change = same!(e.truncate(&p, size), m.truncate(&p, size));
        }
        47..=49 => {
            what = "fallocate";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let mode = [
                    FallocateMode::PunchHole,
                    FallocateMode::PunchHole,
                    FallocateMode::PunchHole,
                    FallocateMode::Default,
                    FallocateMode::ZeroRange,
                    FallocateMode::ZeroRangeKeepSize,
                ][rng.gen_range(0..6)];
                let (off, len) = (offset(rng), rng.gen_range(1..20_000));
                change = same!(e.fallocate(x, mode, off, len), m.fallocate(y, mode, off, len));
            }
        }
        50..=53 => {
            what = "mkdir";
            let p = if rng.gen_bool(0.5) { DIRS[rng.gen_range(1..DIRS.len())].as_bytes().to_vec() } else { path(rng) };
            change = same!(e.mkdir(&p, 0o755), m.mkdir(&p, 0o755));
        }
        54..=55 => {
            what = "rmdir";
            let p = if rng.gen_bool(0.5) { DIRS[rng.gen_range(1..DIRS.len())].as_bytes().to_vec() } else { path(rng) };
            change = same!(e.rmdir(&p), m.rmdir(&p));
        }
        56..=60 => {
            what = "unlink";
            let p = path(rng);
            change = same!(e.unlink(&p), m.unlink(&p));
        }
        61..=66 => {
            what = "rename";
            let (a, b) = (path(rng), path(rng));
            let flags = match rng.gen_range(0..5) {
                0 => RenameFlags::NoReplace,
                1 => RenameFlags::Exchange,
                _ => RenameFlags::Replace,
            };
            change = same!(e.rename(&a, &b, flags), m.rename(&a, &b, flags));
        }
        67..=68 => {
            what = "link";
            let (a, b) = (path(rng), path(rng));
            change = same!(e.link(&a, &b), m.link(&a, &b));
        }
        69..=70 => {
            what = "symlink";
            let target = path(rng);
            let p = path(rng);
            change = same!(e.symlink(&target, &p), m.symlink(&target, &p));
        }
        71..=73 => {
            what = "fsetxattr";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let name = XATTRS[rng.gen_range(0..XATTRS.len())];
                let value = pattern(step as u64, rng.gen_range(0..60));
                let mode = match rng.gen_range(0..4) {
                    0 => XattrSetMode::Create,
                    1 => XattrSetMode::Replace,
                    _ => XattrSetMode::Any,
                };
                change = same!(e.fsetxattr(x, name, &value, mode), m.fsetxattr(y, name, &value, mode));
            }
        }
        74 => {
            what = "fremovexattr";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let name = XATTRS[rng.gen_range(0..XATTRS.len())];
                change = same!(e.fremovexattr(x, name), m.fremovexattr(y, name));
            }
        }
        75..=76 => {
            what = "chmod";
            let p = path(rng);
            let perm = [0o644, 0o600, 0o755, 0o640][rng.gen_range(0..4)];
            change = same!(e.chmod(&p, perm), m.chmod(&p, perm));
        }
        77 => {
            what = "utimens";
            let p = path(rng);
            let (a, t) = (time(rng), time(rng));
            change = same!(e.utimens(&p, a, t), m.utimens(&p, a, t));
        }
        78..=80 => {
            what = "fsync";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                sync = same!(e.fsync(x), m.fsync(y));
            }
        }
        81..=82 => {
            what = "fdatasync";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                sync = same!(e.fdatasync(x), m.fdatasync(y));
            }
        }
        83 => {
            what = "sync_all";
            e.sync_all().unwrap_or_else(|err| panic!("{}: {err:?}", run.ctx(step, what)));
            m.sync_all();
            sync = true;
        }
        84 => {
            what = "persist_now";
            e.persist_now().unwrap_or_else(|err| panic!("{}: {err:?}", run.ctx(step, what)));
            sync = true;
        }
        85..=86 => {
            // The mode xattr of a buffered mount: "buffered", whatever is
            // stored; "buffered" cannot be set; "strict" (every file's
            // stored mode here) can.
            what = "user.ferrite.mode";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let buffered = e.is_buffered();
                let (ge, gm) = (e.fgetxattr(x, FileMode::XATTR), m.fgetxattr(y, FileMode::XATTR));
                if buffered && gm.is_ok() {
                    same!(ge, Ok(b"buffered".to_vec()));
                } else {
                    same!(ge, gm);
                }
                same!(
                    e.fsetxattr(x, FileMode::XATTR, b"buffered", XattrSetMode::Any),
                    m.fsetxattr(y, FileMode::XATTR, b"buffered", XattrSetMode::Any)
                );
                if rng.gen_bool(0.5) {
                    change = same!(
                        e.fsetxattr(x, FileMode::XATTR, b"strict", XattrSetMode::Any),
                        m.fsetxattr(y, FileMode::XATTR, b"strict", XattrSetMode::Any)
                    );
                }
            }
        }
        87..=93 => {
            what = "pread";
            if let Some((x, y, _)) = pick_fd(rng, &run.fds) {
                let off = offset(rng);
                let len = length(rng);
                let (mut be, mut bm) = (vec![0u8; len], vec![0u8; len]);
                let (re, rm) = (e.pread(x, &mut be, off), m.pread(y, &mut bm, off));
                same!(re, rm);
                if let Ok(n) = re {
                    assert!(be[..n] == bm[..n], "{}: pread bytes differ", run.ctx(step, what));
                }
                same!(e.fstat(x).map(|s| (s.size, s.nlink, s.perm)), m.fstat(y).map(|s| (s.size, s.nlink, s.perm)));
            }
        }
        _ => {
            what = "stat";
            let p = path(rng);
            let f = |s: ferrite::Stat| (s.kind, s.size, s.nlink, s.perm, s.mtime, s.ctime);
            same!(e.lstat(&p).map(f), m.lstat(&p).map(f));
        }
    }
    let pending = e.buffered_stats();
    run.engine = Some(e);
    if refused {
        let (state, fds, change_before) = before.expect("a state before the step");
        run.model.restore(state);
        run.fds = fds;
        change = change_before;
        sync = false;
        run.stats.enospc += 1;
        run.compare_all(step, &format!("{what} refused with ENOSPC"));
    }
    if change {
        run.changed();
    }
    if sync {
        run.synced();
    }
    if run.engine().is_buffered() {
        assert!(
            pending.pending_now <= run.cfg.ops_max,
            "{}: {} operations pending, more than ops_max {}",
            run.ctx(step, what),
            pending.pending_now,
            run.cfg.ops_max
        );
        assert!(pending.ops_persisted <= pending.ops_queued, "{}: {pending:?}", run.ctx(step, what));
        run.stats.most_pending = run.stats.most_pending.max(pending.pending_now);
    }
}

fn run_one(seed: u64, cfg: Config, steps: usize) -> Stats {
    let mut run = Run::new(seed, cfg);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in 0..steps {
        step(&mut run, &mut rng, i);
        run.stats.steps += 1;
        if i % 25 == 24 {
            run.compare_all(i, "every 25 steps");
        }
        let r = rng.gen_range(0..1000);
        if r < 10 {
            run.crash(i, &mut rng);
        } else if r < 16 {
            // Back to buffered (after a strict mount), or a clean cycle.
            run.clean_remount(i);
        } else if !run.engine().is_buffered() && r < 60 {
            run.clean_remount(i);
        }
    }
    run.compare_all(steps, "at the end");
    run.crash(steps, &mut rng);
    run.clean_remount(steps);
    let fs = run.engine.take().expect("mounted");
    fs.unmount().expect("final unmount");
    run.stats
}

fn steps() -> usize {
    std::env::var("FERRITE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500)
}

fn seeds(test: &str, default: u64) -> Vec<u64> {
    if std::env::var("FERRITE_SEED").is_ok() {
        return vec![seed_from_env("FERRITE_SEED", test, default)];
    }
    let n: u64 = std::env::var("FERRITE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    (0..n)
        .map(|i| {
            let s = default + i;
            eprintln!("{test}: seed {s:#x} (replay: FERRITE_SEED={s:#x})");
            s
        })
        .collect()
}

fn run_config(test: &str, cfg: Config, default_seed: u64) -> Vec<Stats> {
    seeds(test, default_seed)
        .into_iter()
        .map(|seed| {
            let st = run_one(seed, cfg, steps());
            eprintln!("{test}: seed {seed:#x}: {st:?}");
            assert!(st.crashes > 0 && st.sync_points > 0, "{test}: seed {seed:#x}: too few events: {st:?}");
            st
        })
        .collect()
}

#[test]
fn buffered_persister_thread_heap() {
    let cfg = Config {
        name: "thread-heap",
        pool: PoolKind::Heap,
        persister_thread: true,
        ops_max: BufferedOptions::default().ops_max,
        lag_ns_max: BufferedOptions::default().lag_ns_max,
        full_free_pages: None,
    };
    run_config("buffered_persister_thread_heap", cfg, 0xb100);
}

/// A persister thread with small bounds, on a pool file in /dev/shm.
const THREAD_SHM_SMALL_BOUNDS: Config = Config {
    name: "thread-shm",
    pool: PoolKind::Shm,
    persister_thread: true,
    ops_max: 16,
    lag_ns_max: 1_000_000,
    full_free_pages: None,
};

/// No persister thread, a heap pool, back-pressure at 8 operations.
const NO_THREAD_HEAP: Config = Config {
    name: "no-thread-heap",
    pool: PoolKind::Heap,
    persister_thread: false,
    ops_max: 8,
    lag_ns_max: u64::MAX,
    full_free_pages: None,
};

#[test]
fn buffered_persister_thread_shm_small_bounds() {
    run_config("buffered_persister_thread_shm_small_bounds", THREAD_SHM_SMALL_BOUNDS, 0xb200);
}

/// Without a persister thread, operations become durable only at sync
/// points and by back-pressure: crashes lose what came after, so this
/// configuration must see crashes that lose operations and crashes that
/// keep some past the last sync point (the prefix oracle is exercised, not
/// only its ends).
#[test]
fn buffered_no_thread_heap() {
    let all = run_config("buffered_no_thread_heap", NO_THREAD_HEAP, 0xb300);
    let lost: u64 = all.iter().map(|s| s.crashes_lost).sum();
    assert!(lost > 0, "no crash lost an operation: is the mount buffered at all? {all:?}");
}

#[test]
fn buffered_no_thread_shm() {
    let cfg = Config {
        name: "no-thread-shm",
        pool: PoolKind::Shm,
        persister_thread: false,
        ops_max: 3,
        lag_ns_max: u64::MAX,
        full_free_pages: None,
    };
    let all = run_config("buffered_no_thread_shm", cfg, 0xb400);
    let lost: u64 = all.iter().map(|s| s.crashes_lost).sum();
    assert!(lost > 0, "no crash lost an operation: is the mount buffered at all? {all:?}");
}

/// `cfg` on a nearly full pool: a ballast file leaves
/// `FERRITE_FULL_FREE_PAGES` pages available (default 12); some steps must
/// have been refused with ENOSPC.
fn run_nearly_full(test: &str, cfg: Config, default_seed: u64) {
    let free = std::env::var("FERRITE_FULL_FREE_PAGES").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    let all = run_config(test, Config { full_free_pages: Some(free), ..cfg }, default_seed);
    let refused: u64 = all.iter().map(|s| s.enospc).sum();
    assert!(refused > 0, "{test}: nothing was refused with ENOSPC: is the pool nearly full at all? {all:?}");
}

/// The sequences on a nearly full pool (2 MiB) without a persister
/// thread: a refused change must leave no trace in the latest state
/// (every call and every comparison after it), in what the queue makes
/// durable (the crash oracle's prefixes), and in the pool (fsck at every
/// unmount and crash). The pages a refused or a removing change needs may
/// be held by the queue until it is persisted (the allocator's reclaim)
/// and by dead log pages (`collect_for_space`).
#[test]
fn buffered_no_thread_nearly_full() {
    let cfg = Config { name: "no-thread-full", ..NO_THREAD_HEAP };
    run_nearly_full("buffered_no_thread_nearly_full", cfg, 0xb500);
}

/// The same with the persister thread and small bounds, on a pool file in
/// /dev/shm.
#[test]
fn buffered_persister_thread_nearly_full() {
    let cfg = Config { name: "thread-full", ..THREAD_SHM_SMALL_BOUNDS };
    run_nearly_full("buffered_persister_thread_nearly_full", cfg, 0xb600);
}
