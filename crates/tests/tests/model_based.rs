//! Model-based randomized test: long seeded sequences of every operation of
//! the path API run on the engine and on the in-memory reference model
//! (`ferrite-model`) side by side. After every step the results (values and
//! errno) must agree and the whole trees must be equal; every so often the
//! engine is remounted — cleanly, or by dropping it as a crash would — and
//! fsck must find the pool clean.
//!
//! The steps include the `*at` calls from the current directory, from
//! directory descriptors, from file and bad descriptors, with AT_EMPTY_PATH
//! and the symlink flags; chdir/fchdir/getcwd; descriptor calls (fchmod,
//! fchown, futimens, f*xattr, dup/dup2/dup3 with shared offsets, O_PATH,
//! FD_CLOEXEC, F_GETFL/F_SETFL O_APPEND, O_SYNC, O_TMPFILE files linked by
//! AT_EMPTY_PATH or closed nameless); and switches of the
//! credentials between root and two users with a shared group, so that
//! every call also runs through the permission checks of both sides.
//!
//! Consistency modes: each seed runs with a default mode (odd seeds
//! fsync-atomic, even seeds strict, switched now and then), files change
//! mode through the `user.ferrite.mode` extended attribute, and the steps
//! include fsync, fdatasync, sync and O_SYNC/O_DSYNC descriptors. A crash
//! remount (the engine dropped without unmounting, its pool image copied
//! and mounted: a process crash) must recover exactly the model's crash
//! state (every fsync-atomic file at its last commit point); after every
//! step the engine's count of files with pending changes must equal the
//! model's, so a missing or extra commit point shows at once.
//!
//! The second test, `model_based_small_writes`, is the same comparison on
//! a few files with a data-heavy mix: small unaligned writes (1..600 bytes
//! mostly, some up to 2100) concentrated on the first pages of each file,
//! so that the engine's inline (delta) writes, folds (more deltas than the
//! limit on one page), reads of pages with deltas, truncate, punch and
//! fallocate over such pages, long fsync-atomic epochs and log compaction
//! with Inline entries all run, with frequent crash and clean remounts.
//!
//! The `*_on_a_nearly_full_pool` tests run both kinds of sequences on a
//! 1 MiB pool that a ballast file has filled to a few pages, beside a
//! model with room for everything: a step the engine refuses with ENOSPC
//! where the model succeeded must leave no trace on the engine (the model
//! is put back to before the step and everything is compared again), so
//! every operation is all or nothing when space runs out, at any of its
//! allocations (data, log, inode, an epoch's page), crash recovery and
//! remounts included. The one trace Linux leaves too is allowed: a write
//! refused with ENOSPC has dropped the file's set-ID bits already.
//! `FERRITE_FULL_FREE_PAGES` sets the pages left (default 12).
//!
//! A failure prints the seed and step; replay one seed with
//! `FERRITE_SEED=<seed> cargo test -p ferrite-tests --test model_based <test name>`.
//! `FERRITE_STEPS` sets the number of steps per seed (default 5000 for the
//! first test, 2000 for the second) and `FERRITE_SEEDS=<n>` runs seeds 1..=n
//! (default 8 and 6): the longer runs of docs/TESTING.md.

use ferrite::{
    Credentials, Errno, FallocateMode, Fd, FileMode, FormatOptions, FsResult, ManualClock, MountOptions, OpenFlags,
    PathFs, RenameFlags, Session, Stat, TimeSet, TimeSpec, Whence, XattrSetMode, AT_FDCWD,
};
use ferrite_model::{diff_trees, tree_of, ModelFs, Tree};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const POOL_PAGES: u64 = 2048;
const INODES: u64 = 256;

struct Pair {
    engine: Option<Session>,
    model: ModelFs,
    clock: Arc<ManualClock>,
    /// Open descriptors: (engine, model).
    fds: Vec<(Fd, Fd)>,
    /// Open directory descriptors with the cookie each side reached.
    dirs: Vec<(Fd, Fd)>,
    /// Engine counters summed over the mounts of the run.
    counters: Counters,
}

/// What the engine did over a run (its counters restart at each mount).
#[derive(Clone, Copy, Default, Debug)]
struct Counters {
    epoch_commits: u64,
    compactions: u64,
    gc_pages: u64,
    crash_remounts: u64,
    clean_remounts: u64,
    /// Inline entries found in the logs of the run's files at remounts.
    inline_entries_seen: u64,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.epoch_commits += o.epoch_commits;
        self.compactions += o.compactions;
        self.gc_pages += o.gc_pages;
        self.crash_remounts += o.crash_remounts;
        self.clean_remounts += o.clean_remounts;
        self.inline_entries_seen += o.inline_entries_seen;
    }
}

impl Pair {
    fn engine(&self) -> &Session {
        self.engine.as_ref().expect("mounted")
    }
}

fn mount_opts(clock: &Arc<ManualClock>, default_mode: FileMode) -> MountOptions {
    MountOptions { clock: clock.clone(), recovery_threads: 2, default_mode, buffered: None }
}

/// Inline entries in the log of every regular file of `tree`, from the
/// engine's annotated dump of the pool (its `INLINE` lines).
fn inline_entries(fs: &Session, tree: &Tree) -> u64 {
    let mut total = 0;
    for (path, node) in tree {
        if node.kind != ferrite::FileType::Regular {
            continue;
        }
        let Ok(st) = fs.lstat(path) else { continue };
        let copy = Pmem::from_image(&fs.pmem().image());
        let text = ferrite::dump::dump(copy, Some(st.ino)).expect("dump");
        total += text.lines().filter(|l| l.contains("INLINE ")).count() as u64;
    }
    total
}

/// Unmount cleanly or drop the engine (a crash), check the pool image with
/// fsck, mount a copy of it, and bring the model to the same point (clean:
/// everything committed; crash: every fsync-atomic file back at its last
/// commit point). Returns what went wrong, if anything.
fn remount(p: &mut Pair, crash: bool, count_inline: bool) -> Result<(), String> {
    let fs = p.engine.take().expect("mounted");
    p.counters.epoch_commits += fs.epoch_commits();
    p.counters.compactions += fs.log_compactions();
    p.counters.gc_pages += fs.gc_pages_collected();
    let default_mode = fs.default_mode();
    let pmem = fs.pmem().clone();
    if crash {
        drop(fs);
        p.counters.crash_remounts += 1;
        p.model.remount_after_crash();
    } else {
        fs.unmount().expect("unmount");
        p.counters.clean_remounts += 1;
        p.model.remount_clean();
    }
    let image = pmem.image();
    drop(pmem);
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).expect("fsck runs");
    let how = if crash { "crash" } else { "clean" };
    if !report.is_clean() {
        return Err(format!("fsck after {how} remount:\n{report}"));
    }
    let fs = Session::mount(Pmem::from_image(&image), &mount_opts(&p.clock, default_mode))
        .map_err(|e| format!("{how} remount failed: {e:?}"))?;
    p.engine = Some(fs);
    p.fds.clear();
    p.dirs.clear();
    let tm = p.model.tree();
    let te = tree_of(p.engine()).map_err(|e| format!("engine tree walk after {how} remount failed: {e:?}"))?;
    if te != tm {
        return Err(format!("after {how} remount, trees differ (expected = model):\n{}", diff_trees(&tm, &te)));
    }
    compare_modes(p, &tm).map_err(|e| format!("after {how} remount: {e}"))?;
    if count_inline {
        p.counters.inline_entries_seen += inline_entries(p.engine(), &tm);
    }
    Ok(())
}

/// The `user.ferrite.mode` of every regular file of `tree` (read as root)
/// must be the same on both sides.
fn compare_modes(p: &Pair, tree: &Tree) -> Result<(), String> {
    let mode_of = |fs: &dyn PathFs, path: &[u8]| -> FsResult<Vec<u8>> {
        let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
        let r = fs.fgetxattr(fd, FileMode::XATTR);
        fs.close(fd)?;
        r
    };
    let creds = p.engine().credentials();
    p.engine().set_credentials(Credentials::root());
    let mcreds = p.model.credentials();
    p.model.set_credentials(Credentials::root());
    let mut out = Ok(());
    for (path, node) in tree {
        if node.kind != ferrite::FileType::Regular {
            continue;
        }
        let (e, m) = (mode_of(p.engine(), path), mode_of(&p.model, path));
        if e != m {
            out = Err(format!("mode of {}: engine {e:?}, model {m:?}", path.escape_ascii()));
            break;
        }
    }
    p.engine().set_credentials(creds);
    p.model.set_credentials(mcreds);
    out
}

/// The engine's and the model's counts of files with uncommitted changes.
fn compare_pending(p: &Pair) -> Result<(), String> {
    let (e, m) = (p.engine().pending_file_count(), p.model.pending_file_count());
    if e != m {
        return Err(format!("files with pending changes: engine {e}, model {m}"));
    }
    Ok(())
}

/// A value for `user.ferrite.mode`: mostly valid, sometimes not.
fn mode_value(rng: &mut ChaCha8Rng) -> &'static [u8] {
    const VALUES: [&[u8]; 6] = [b"strict", b"fsync-atomic", b"fsync-atomic", b"strict\n", b"fsync-atomic\0", b"atomic"];
    VALUES[rng.gen_range(0..VALUES.len())]
}

const DIRS: &[&str] = &["", "/a", "/b", "/a/c", "/a/c/d"];
const NAMES: &[&str] = &["f", "g", "h", "a", "b", "c", "d", "l", "m"];

fn path(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let r: u32 = rng.gen_range(0..100);
    let dir = DIRS[rng.gen_range(0..DIRS.len())];
    let name = NAMES[rng.gen_range(0..NAMES.len())];
    let p = match r {
        0..=79 => format!("{dir}/{name}"),
        80..=84 => format!("{dir}/../{name}"),
        85..=87 => format!("{dir}/./{name}/"),
        88..=89 => format!("{dir}/{name}/{}", NAMES[rng.gen_range(0..NAMES.len())]),
        90 => format!("{dir}/{}", "n".repeat(256)),
        91 => String::new(),
        92 => format!("{dir}/."),
        93 => format!("{dir}/.."),
        94 => "/".to_string(),
        _ => format!("{dir}/{name}"),
    };
    p.into_bytes()
}

fn open_flags(rng: &mut ChaCha8Rng) -> OpenFlags {
    let mut f = match rng.gen_range(0..3) {
        0 => OpenFlags::RDONLY,
        1 => OpenFlags::WRONLY,
        _ => OpenFlags::RDWR,
    };
    f.create = rng.gen_bool(0.6);
    f.excl = rng.gen_bool(0.15);
    f.trunc = rng.gen_bool(0.1);
    f.append = rng.gen_bool(0.1);
    f.directory = rng.gen_bool(0.05);
    f.nofollow = rng.gen_bool(0.05);
    if rng.gen_bool(0.1) {
        // O_TMPFILE, mostly as programs ask for it (no O_CREAT, an access
        // mode that writes); the rest meets its refusals.
        f = f.tmpfile();
        if rng.gen_bool(0.85) {
            f.create = false;
            f.write = true;
        }
    }
    f
}

fn time_set(rng: &mut ChaCha8Rng) -> TimeSet {
    match rng.gen_range(0..3) {
        0 => TimeSet::Omit,
        1 => TimeSet::Now,
        _ => TimeSet::At(TimeSpec { sec: rng.gen_range(-100..2_000_000_000), nsec: rng.gen_range(0..1_000_000_000) }),
    }
}

/// The stat fields both sides define the same way: perm, kind, nlink, uid,
/// gid, size, blocks (not for directories), atime, mtime, ctime.
type Comparable = (u32, ferrite::FileType, u32, u32, u32, u64, Option<u64>, TimeSpec, TimeSpec, TimeSpec);

/// Stat fields that both sides define the same way.
fn comparable(s: FsResult<Stat>) -> FsResult<Comparable> {
    s.map(|s| {
        let blocks = if s.kind == ferrite::FileType::Directory { None } else { Some(s.blocks) };
        (s.perm, s.kind, s.nlink, s.uid, s.gid, s.size, blocks, s.atime, s.mtime, s.ctime)
    })
}

fn data(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0 => 0,
        1..=5 => rng.gen_range(1..600),
        6..=8 => rng.gen_range(200..9000),
        _ => 4096 * rng.gen_range(1..4),
    };
    let b: u8 = rng.gen();
    (0..len).map(|i| b.wrapping_add((i % 251) as u8)).collect()
}

fn offset(rng: &mut ChaCha8Rng) -> u64 {
    match rng.gen_range(0..6) {
        0 => 0,
        1 => 4096 * rng.gen_range(0..8),
        2 => rng.gen_range(0..40_000),
        3 => 4096 * rng.gen_range(1..8) - rng.gen_range(0..2),
        _ => rng.gen_range(0..20_000),
    }
}

/// The credentials the sequences switch between: root and two users that
/// share a group (one with a umask).
fn users() -> Vec<Credentials> {
    vec![
        Credentials::root(),
        Credentials::user(1000, 1000, &[100]),
        Credentials { umask: 0o022, ..Credentials::user(1001, 1001, &[1000, 100]) },
    ]
}

/// A path relative to the current directory (or a dirfd) most of the time.
fn rel_path(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let p = path(rng);
    if rng.gen_bool(0.6) && p.first() == Some(&b'/') && p.len() > 1 {
        p[1..].to_vec()
    } else {
        p
    }
}

/// A `dirfd` on both sides: AT_FDCWD, an open directory, an open file
/// (ENOTDIR for a relative path) or a number nothing is open at.
fn dirfd(p: &Pair, rng: &mut ChaCha8Rng) -> (Fd, Fd) {
    match rng.gen_range(0..10) {
        0..=4 => (AT_FDCWD, AT_FDCWD),
        5 => (Fd(999_999), Fd(999_999)),
        6 if !p.fds.is_empty() => p.fds[rng.gen_range(0..p.fds.len())],
        _ if !p.dirs.is_empty() => p.dirs[rng.gen_range(0..p.dirs.len())],
        _ => (AT_FDCWD, AT_FDCWD),
    }
}

/// Any open descriptor pair (files and directories).
fn any_fd(p: &Pair, rng: &mut ChaCha8Rng) -> Option<(Fd, Fd)> {
    let n = p.fds.len() + p.dirs.len();
    if n == 0 {
        return None;
    }
    let i = rng.gen_range(0..n);
    Some(if i < p.fds.len() { p.fds[i] } else { p.dirs[i - p.fds.len()] })
}

/// Room on the engine for the log pages a link may take: a link made
/// with this much available is not refused for space.
fn roomy(p: &Pair) -> bool {
    p.engine().statfs().is_ok_and(|s| s.blocks_avail >= 64)
}

/// Keep a new descriptor pair, in the list its kind belongs to; a number
/// that replaced an open one (dup3) is kept once.
fn keep(p: &mut Pair, x: Fd, y: Fd) {
    p.fds.retain(|&(a, _)| a != x);
    p.dirs.retain(|&(a, _)| a != x);
    if p.engine().fstat(x).map(|s| s.kind) == Ok(ferrite::FileType::Directory) {
        p.dirs.push((x, y));
    } else {
        p.fds.push((x, y));
    }
}

/// One of the `*at`, descriptor, current-directory and credential calls.
fn step_new(p: &mut Pair, rng: &mut ChaCha8Rng) -> (String, Result<(), String>) {
    macro_rules! same {
        ($desc:expr, $a:expr, $b:expr) => {{
            let (a, b) = ($a, $b);
            let d = $desc;
            if a == b {
                (d, Ok(()))
            } else {
                (d, Err(format!("engine {:?}\n model  {:?}", a, b)))
            }
        }};
    }
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let time = |rng: &mut ChaCha8Rng| time_set(rng);
    let flag = |rng: &mut ChaCha8Rng, f: i32, prob: f64| if rng.gen_bool(prob) { f } else { 0 };
    match rng.gen_range(0..100) {
        0..=9 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let mut flags = open_flags(rng);
            flags.path = rng.gen_bool(0.15);
            flags.cloexec = rng.gen_bool(0.4);
            flags.sync = rng.gen_bool(0.1);
            flags.dsync = !flags.sync && rng.gen_bool(0.1);
            let perm = rng.gen_range(0..0o1000);
            let d = format!("openat {x:?} {:?} {flags:?} {perm:o}", show(&path));
            let (e, m) = (p.engine(), &p.model);
            match (e.openat(x, &path, flags, perm), m.openat(y, &path, flags, perm)) {
                (Ok(a), Ok(b)) if flags.tmpfile && roomy(p) && rng.gen_bool(0.5) => {
                    // Most files O_TMPFILE makes are named at once, as
                    // programs do (linkat needs root for AT_EMPTY_PATH).
                    // The name goes in the directory the file was made in.
                    // (Not on a nearly full pool: a link refused there for
                    // space would leave the model put back to before the
                    // open, `settle_enospc`; the linkat step below links
                    // such files on their own.)
                    keep(p, a, b);
                    let mut name = path.clone();
                    name.extend_from_slice(format!("/t{}", rng.gen_range(0..4)).as_bytes());
                    let f = libc::AT_EMPTY_PATH;
                    same!(
                        format!("{d}, then linkat {a:?} \"\" {x:?} {:?} {f:#x}", show(&name)),
                        p.engine().linkat(a, b"", x, &name, f),
                        p.model.linkat(b, b"", y, &name, f)
                    )
                }
                (Ok(a), Ok(b)) => {
                    keep(p, a, b);
                    (d, Ok(()))
                }
                (a, b) => same!(d, a.map(|_| ()), b.map(|_| ())),
            }
        }
        10..=15 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let perm = rng.gen_range(0..0o2000);
            same!(
                format!("mkdirat {x:?} {:?} {perm:o}", show(&path)),
                p.engine().mkdirat(x, &path, perm),
                p.model.mkdirat(y, &path, perm)
            )
        }
        16..=21 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let f = flag(rng, libc::AT_REMOVEDIR, 0.4);
            same!(
                format!("unlinkat {x:?} {:?} {f:#x}", show(&path)),
                p.engine().unlinkat(x, &path, f),
                p.model.unlinkat(y, &path, f)
            )
        }
        22..=27 => {
            let (x1, y1) = dirfd(p, rng);
            let (x2, y2) = dirfd(p, rng);
            let (a, b) = (rel_path(rng), rel_path(rng));
            let flags = [RenameFlags::Replace, RenameFlags::NoReplace, RenameFlags::Exchange][rng.gen_range(0..3)];
            same!(
                format!("renameat2 {x1:?} {:?} {x2:?} {:?} {flags:?}", show(&a), show(&b)),
                p.engine().renameat2(x1, &a, x2, &b, flags),
                p.model.renameat2(y1, &a, y2, &b, flags)
            )
        }
        28..=31 => {
            let (mut x1, mut y1) = dirfd(p, rng);
            let (mut x2, mut y2) = dirfd(p, rng);
            let mut f = flag(rng, libc::AT_SYMLINK_FOLLOW, 0.4);
            let a = if rng.gen_bool(0.25) {
                // A file's descriptor, mostly one with no name: how a file
                // made by O_TMPFILE gets its name (or, after O_EXCL or an
                // unlink, does not).
                let nameless: Vec<(Fd, Fd)> =
                    p.fds.iter().copied().filter(|&(x, _)| p.engine().fstat(x).is_ok_and(|s| s.nlink == 0)).collect();
                if !nameless.is_empty() && rng.gen_bool(0.9) {
                    (x1, y1) = nameless[rng.gen_range(0..nameless.len())];
                    (x2, y2) = (AT_FDCWD, AT_FDCWD);
                } else if !p.fds.is_empty() && rng.gen_bool(0.5) {
                    (x1, y1) = p.fds[rng.gen_range(0..p.fds.len())];
                }
                f |= libc::AT_EMPTY_PATH;
                Vec::new()
            } else {
                rel_path(rng)
            };
            let b = rel_path(rng);
            same!(
                format!("linkat {x1:?} {:?} {x2:?} {:?} {f:#x}", show(&a), show(&b)),
                p.engine().linkat(x1, &a, x2, &b, f),
                p.model.linkat(y1, &a, y2, &b, f)
            )
        }
        32..=34 => {
            let (x, y) = dirfd(p, rng);
            let target =
                if rng.gen_bool(0.5) { NAMES[rng.gen_range(0..NAMES.len())].as_bytes().to_vec() } else { path(rng) };
            let link = rel_path(rng);
            same!(
                format!("symlinkat {:?} {x:?} {:?}", show(&target), show(&link)),
                p.engine().symlinkat(&target, x, &link),
                p.model.symlinkat(&target, y, &link)
            )
        }
        35..=36 => {
            let (x, y) = dirfd(p, rng);
            let path = if rng.gen_bool(0.2) { Vec::new() } else { rel_path(rng) };
            same!(
                format!("readlinkat {x:?} {:?}", show(&path)),
                p.engine().readlinkat(x, &path),
                p.model.readlinkat(y, &path)
            )
        }
        37..=42 => {
            let (x, y) = dirfd(p, rng);
            let mut f = flag(rng, libc::AT_SYMLINK_NOFOLLOW, 0.4);
            let path = if rng.gen_bool(0.15) {
                f |= libc::AT_EMPTY_PATH;
                Vec::new()
            } else {
                rel_path(rng)
            };
            same!(
                format!("fstatat {x:?} {:?} {f:#x}", show(&path)),
                comparable(p.engine().fstatat(x, &path, f)),
                comparable(p.model.fstatat(y, &path, f))
            )
        }
        43..=45 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let perm = rng.gen_range(0..0o10000);
            let f = flag(rng, libc::AT_SYMLINK_NOFOLLOW, 0.2);
            same!(
                format!("fchmodat {x:?} {:?} {perm:o} {f:#x}", show(&path)),
                p.engine().fchmodat(x, &path, perm, f),
                p.model.fchmodat(y, &path, perm, f)
            )
        }
        46..=48 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let ids = [0, 1, 100, 1000, 1001];
            let uid = rng.gen_bool(0.5).then(|| ids[rng.gen_range(0..ids.len())]);
            let gid = rng.gen_bool(0.5).then(|| ids[rng.gen_range(0..ids.len())]);
            let f = flag(rng, libc::AT_SYMLINK_NOFOLLOW, 0.3);
            same!(
                format!("fchownat {x:?} {:?} {uid:?} {gid:?} {f:#x}", show(&path)),
                p.engine().fchownat(x, &path, uid, gid, f),
                p.model.fchownat(y, &path, uid, gid, f)
            )
        }
        49..=50 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let (a, b) = (time(rng), time(rng));
            let f = flag(rng, libc::AT_SYMLINK_NOFOLLOW, 0.3);
            same!(
                format!("utimensat {x:?} {:?} {a:?} {b:?} {f:#x}", show(&path)),
                p.engine().utimensat(x, &path, a, b, f),
                p.model.utimensat(y, &path, a, b, f)
            )
        }
        51..=54 => {
            let (x, y) = dirfd(p, rng);
            let path = rel_path(rng);
            let mode = rng.gen_range(0..8);
            let f = flag(rng, libc::AT_SYMLINK_NOFOLLOW, 0.3) | flag(rng, libc::AT_EACCESS, 0.2);
            same!(
                format!("faccessat {x:?} {:?} {mode} {f:#x}", show(&path)),
                p.engine().faccessat(x, &path, mode, f),
                p.model.faccessat(y, &path, mode, f)
            )
        }
        55..=58 => {
            let path = path(rng);
            same!(format!("chdir {:?}", show(&path)), p.engine().chdir(&path), p.model.chdir(&path))
        }
        59..=60 => {
            let Some((x, y)) = any_fd(p, rng) else {
                return ("fchdir (none)".into(), Ok(()));
            };
            same!(format!("fchdir {x:?}"), p.engine().fchdir(x), p.model.fchdir(y))
        }
        61..=63 => same!("getcwd".to_string(), p.engine().getcwd(), p.model.getcwd()),
        64..=68 => {
            let c = users()[rng.gen_range(0..3)].clone();
            let d = format!("credentials {c:?}");
            p.engine().set_credentials(c.clone());
            p.model.set_credentials(c);
            (d, Ok(()))
        }
        69..=86 => {
            let Some((x, y)) = any_fd(p, rng) else {
                return ("descriptor call (none)".into(), Ok(()));
            };
            let (e, m) = (p.engine(), &p.model);
            let names: [&[u8]; 7] = [
                b"user.a",
                b"user.b",
                b"trusted.t",
                b"security.s",
                b"security.capability",
                FileMode::XATTR,
                FileMode::XATTR,
            ];
            let name = names[rng.gen_range(0..names.len())];
            match rng.gen_range(0..13) {
                0 => {
                    let perm = rng.gen_range(0..0o10000);
                    same!(format!("fchmod {x:?} {perm:o}"), e.fchmod(x, perm), m.fchmod(y, perm))
                }
                1 => {
                    let uid = rng.gen_bool(0.5).then(|| [0, 1000, 1001][rng.gen_range(0..3)]);
                    let gid = rng.gen_bool(0.5).then(|| [0, 100, 1000, 1001][rng.gen_range(0..4)]);
                    same!(format!("fchown {x:?} {uid:?} {gid:?}"), e.fchown(x, uid, gid), m.fchown(y, uid, gid))
                }
                2 => {
                    let (a, b) = (time(rng), time(rng));
                    same!(format!("futimens {x:?} {a:?} {b:?}"), e.futimens(x, a, b), m.futimens(y, a, b))
                }
                3 => {
                    let mode = [XattrSetMode::Any, XattrSetMode::Create, XattrSetMode::Replace][rng.gen_range(0..3)];
                    let value = if name == FileMode::XATTR { mode_value(rng).to_vec() } else { data(rng) };
                    let value = &value[..value.len().min(100)];
                    same!(
                        format!("fsetxattr {x:?} {:?} len {} {mode:?}", show(name), value.len()),
                        e.fsetxattr(x, name, value, mode),
                        m.fsetxattr(y, name, value, mode)
                    )
                }
                4 => same!(format!("fgetxattr {x:?} {:?}", show(name)), e.fgetxattr(x, name), m.fgetxattr(y, name)),
                5 => same!(format!("flistxattr {x:?}"), e.flistxattr(x), m.flistxattr(y)),
                6 => same!(
                    format!("fremovexattr {x:?} {:?}", show(name)),
                    e.fremovexattr(x, name),
                    m.fremovexattr(y, name)
                ),
                7 => match (e.dup(x), m.dup(y)) {
                    (Ok(a), Ok(b)) => {
                        keep(p, a, b);
                        (format!("dup {x:?}"), Ok(()))
                    }
                    (a, b) => same!(format!("dup {x:?}"), a.map(|_| ()), b.map(|_| ())),
                },
                8 => {
                    let n = Fd(5000 + rng.gen_range(0..4));
                    let cloexec = rng.gen_bool(0.5);
                    let two = rng.gen_bool(0.3);
                    let (a, b) =
                        if two { (e.dup2(x, n), m.dup2(y, n)) } else { (e.dup3(x, n, cloexec), m.dup3(y, n, cloexec)) };
                    let d = format!("{} {x:?} {n:?} {cloexec}", if two { "dup2" } else { "dup3" });
                    if let (Ok(a), Ok(b)) = (a, b) {
                        keep(p, a, b);
                    }
                    same!(d, a, b)
                }
                9 => same!(format!("get_cloexec {x:?}"), e.get_cloexec(x), m.get_cloexec(y)),
                10 => {
                    let on = rng.gen_bool(0.5);
                    same!(format!("set_cloexec {x:?} {on}"), e.set_cloexec(x, on), m.set_cloexec(y, on))
                }
                11 => same!(format!("getfl {x:?}"), e.getfl(x), m.getfl(y)),
                _ => {
                    let on = rng.gen_bool(0.5);
                    same!(format!("setfl_append {x:?} {on}"), e.setfl_append(x, on), m.setfl_append(y, on))
                }
            }
        }
        _ => {
            // Reads and writes through dup'd descriptors share the offset.
            let Some((x, y)) = any_fd(p, rng) else {
                return ("write+read (none)".into(), Ok(()));
            };
            let buf = data(rng);
            let (e, m) = (p.engine(), &p.model);
            let w = same!(format!("write {x:?} len {}", buf.len()), e.write(x, &buf), m.write(y, &buf));
            if w.1.is_err() {
                return w;
            }
            let off = rng.gen_range(-3000i64..3000);
            same!(format!("lseek {x:?} {off} Cur"), e.lseek(x, off, Whence::Cur), m.lseek(y, off, Whence::Cur))
        }
    }
}

/// Run one random step on both sides; returns a description and whether
/// the two results agreed (with both results rendered).
fn step(p: &mut Pair, rng: &mut ChaCha8Rng) -> (String, Result<(), String>) {
    if rng.gen_bool(0.35) {
        return step_new(p, rng);
    }
    let e = p.engine.as_ref().expect("mounted");
    let m = &p.model;
    macro_rules! same {
        ($desc:expr, $a:expr, $b:expr) => {{
            let (a, b) = ($a, $b);
            let d = $desc;
            if a == b {
                (d, Ok(()))
            } else {
                (d, Err(format!("engine {:?}\n model  {:?}", a, b)))
            }
        }};
    }
    let pick_fd = |rng: &mut ChaCha8Rng, fds: &Vec<(Fd, Fd)>| -> Option<(Fd, Fd)> {
        if fds.is_empty() {
            None
        } else {
            Some(fds[rng.gen_range(0..fds.len())])
        }
    };
    match rng.gen_range(0..100) {
        0..=11 => {
            let path = path(rng);
            let flags = open_flags(rng);
            let perm = rng.gen_range(0..0o1000);
            let (a, b) = (e.open(&path, flags, perm), m.open(&path, flags, perm));
            let d = format!("open {:?} {flags:?} {perm:o}", String::from_utf8_lossy(&path));
            match (a, b) {
                (Ok(x), Ok(y)) => {
                    if (flags.directory && !flags.tmpfile)
                        || e.fstat(x).map(|s| s.kind) == Ok(ferrite::FileType::Directory)
                    {
                        p.dirs.push((x, y));
                    } else {
                        p.fds.push((x, y));
                    }
                    (d, Ok(()))
                }
                (a, b) => same!(d, a.map(|_| ()), b.map(|_| ())),
            }
        }
        12..=16 => {
            let all_len = p.fds.len() + p.dirs.len();
            if all_len == 0 {
                return ("close (none open)".into(), Ok(()));
            }
            let i = rng.gen_range(0..all_len);
            let (x, y) = if i < p.fds.len() { p.fds.remove(i) } else { p.dirs.remove(i - p.fds.len()) };
            same!(format!("close {x:?}"), e.close(x), m.close(y))
        }
        17..=26 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("pwrite (none)".into(), Ok(()));
            };
            let buf = data(rng);
            let off = offset(rng);
            same!(format!("pwrite {x:?} len {} at {off}", buf.len()), e.pwrite(x, &buf, off), m.pwrite(y, &buf, off))
        }
        27..=31 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("write (none)".into(), Ok(()));
            };
            let buf = data(rng);
            same!(format!("write {x:?} len {}", buf.len()), e.write(x, &buf), m.write(y, &buf))
        }
        32..=36 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("pread (none)".into(), Ok(()));
            };
            let len = rng.gen_range(0..12_000);
            let off = offset(rng);
            let (mut ba, mut bb) = (vec![0u8; len], vec![0u8; len]);
            let (ra, rb) = (e.pread(x, &mut ba, off), m.pread(y, &mut bb, off));
            same!(format!("pread {x:?} len {len} at {off}"), ra.map(|n| ba[..n].to_vec()), rb.map(|n| bb[..n].to_vec()))
        }
        37..=38 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("read (none)".into(), Ok(()));
            };
            let len = rng.gen_range(0..6000);
            let (mut ba, mut bb) = (vec![0u8; len], vec![0u8; len]);
            let (ra, rb) = (e.read(x, &mut ba), m.read(y, &mut bb));
            same!(format!("read {x:?} len {len}"), ra.map(|n| ba[..n].to_vec()), rb.map(|n| bb[..n].to_vec()))
        }
        39..=41 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("lseek (none)".into(), Ok(()));
            };
            let whence = [Whence::Set, Whence::Cur, Whence::End, Whence::Data, Whence::Hole][rng.gen_range(0..5)];
            let off: i64 = rng.gen_range(-5000..40_000);
            same!(format!("lseek {x:?} {off} {whence:?}"), e.lseek(x, off, whence), m.lseek(y, off, whence))
        }
        42..=45 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("ftruncate (none)".into(), Ok(()));
            };
            let size = offset(rng);
            same!(format!("ftruncate {x:?} {size}"), e.ftruncate(x, size), m.ftruncate(y, size))
        }
        46..=47 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("fallocate (none)".into(), Ok(()));
            };
            let mode = FallocateMode::ALL[rng.gen_range(0..FallocateMode::ALL.len())];
            let (off, len) = (offset(rng), rng.gen_range(0..20_000));
            same!(
                format!("fallocate {x:?} {mode:?} {off}+{len}"),
                e.fallocate(x, mode, off, len),
                m.fallocate(y, mode, off, len)
            )
        }
        48 => {
            if rng.gen_bool(0.15) {
                e.sync_all().expect("sync_all");
                m.sync_all();
                return ("sync_all".into(), Ok(()));
            }
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("fsync (none)".into(), Ok(()));
            };
            if rng.gen_bool(0.5) {
                same!(format!("fsync {x:?}"), e.fsync(x), m.fsync(y))
            } else {
                same!(format!("fdatasync {x:?}"), e.fdatasync(x), m.fdatasync(y))
            }
        }
        49..=50 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("fstat (none)".into(), Ok(()));
            };
            same!(format!("fstat {x:?}"), comparable(e.fstat(x)), comparable(m.fstat(y)))
        }
        51..=53 => {
            let path = path(rng);
            let follow = rng.gen_bool(0.5);
            let d = format!("{} {:?}", if follow { "stat" } else { "lstat" }, String::from_utf8_lossy(&path));
            if follow {
                same!(d, comparable(e.stat(&path)), comparable(m.stat(&path)))
            } else {
                same!(d, comparable(e.lstat(&path)), comparable(m.lstat(&path)))
            }
        }
        54..=55 => {
            let path = path(rng);
            let size = offset(rng);
            same!(
                format!("truncate {:?} {size}", String::from_utf8_lossy(&path)),
                e.truncate(&path, size),
                m.truncate(&path, size)
            )
        }
        56 => {
            let path = path(rng);
            let perm = rng.gen_range(0..0o10000);
            same!(
                format!("chmod {:?} {perm:o}", String::from_utf8_lossy(&path)),
                e.chmod(&path, perm),
                m.chmod(&path, perm)
            )
        }
        57 => {
            let path = path(rng);
            let uid = if rng.gen_bool(0.5) { Some(rng.gen_range(0..5)) } else { None };
            let gid = if rng.gen_bool(0.5) { Some(rng.gen_range(0..5)) } else { None };
            same!(
                format!("chown {:?} {uid:?} {gid:?}", String::from_utf8_lossy(&path)),
                e.chown(&path, uid, gid),
                m.chown(&path, uid, gid)
            )
        }
        58 => {
            let path = path(rng);
            let (a, b) = (time_set(rng), time_set(rng));
            same!(
                format!("utimens {:?} {a:?} {b:?}", String::from_utf8_lossy(&path)),
                e.utimens(&path, a, b),
                m.utimens(&path, a, b)
            )
        }
        59..=65 => {
            let path = path(rng);
            let perm = rng.gen_range(0..0o2000);
            same!(
                format!("mkdir {:?} {perm:o}", String::from_utf8_lossy(&path)),
                e.mkdir(&path, perm),
                m.mkdir(&path, perm)
            )
        }
        66..=69 => {
            let path = path(rng);
            same!(format!("rmdir {:?}", String::from_utf8_lossy(&path)), e.rmdir(&path), m.rmdir(&path))
        }
        70..=75 => {
            let path = path(rng);
            same!(format!("unlink {:?}", String::from_utf8_lossy(&path)), e.unlink(&path), m.unlink(&path))
        }
        76..=82 => {
            let (from, to) = (path(rng), path(rng));
            let flags = [RenameFlags::Replace, RenameFlags::Replace, RenameFlags::NoReplace, RenameFlags::Exchange]
                [rng.gen_range(0..4)];
            same!(
                format!("rename {:?} {:?} {flags:?}", String::from_utf8_lossy(&from), String::from_utf8_lossy(&to)),
                e.rename(&from, &to, flags),
                m.rename(&from, &to, flags)
            )
        }
        83..=85 => {
            let (from, to) = (path(rng), path(rng));
            same!(
                format!("link {:?} {:?}", String::from_utf8_lossy(&from), String::from_utf8_lossy(&to)),
                e.link(&from, &to),
                m.link(&from, &to)
            )
        }
        86 if rng.gen_bool(0.4) => {
            // mknod of every type, the refused ones included.
            let kind = [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK, 0, libc::S_IFDIR, libc::S_IFLNK]
                [rng.gen_range(0..7)];
            let (path, mode, rdev) = (path(rng), kind | rng.gen_range(0..0o1000), rng.gen_range(0..0x10_0000));
            same!(
                format!("mknod {:?} {mode:o} {rdev:#x}", String::from_utf8_lossy(&path)),
                e.mknod(&path, mode, rdev),
                m.mknod(&path, mode, rdev)
            )
        }
        86..=88 => {
            let target = match rng.gen_range(0..4) {
                0 => NAMES[rng.gen_range(0..NAMES.len())].as_bytes().to_vec(),
                1 => b"../a".to_vec(),
                2 => b"".to_vec(),
                _ => path(rng),
            };
            let link = path(rng);
            same!(
                format!("symlink {:?} {:?}", String::from_utf8_lossy(&target), String::from_utf8_lossy(&link)),
                e.symlink(&target, &link),
                m.symlink(&target, &link)
            )
        }
        89 => {
            let path = path(rng);
            same!(format!("readlink {:?}", String::from_utf8_lossy(&path)), e.readlink(&path), m.readlink(&path))
        }
        90..=93 => {
            // List a whole directory in small batches on both sides.
            let path = path(rng);
            let d = format!("readdir {:?}", String::from_utf8_lossy(&path));
            let (x, y) = match (
                e.open(&path, OpenFlags::RDONLY.directory(), 0),
                m.open(&path, OpenFlags::RDONLY.directory(), 0),
            ) {
                (Ok(x), Ok(y)) => (x, y),
                (a, b) => return same!(d, a.map(|_| ()), b.map(|_| ())),
            };
            let batch = rng.gen_range(1..5);
            let list = |fs: &dyn PathFs, fd: Fd| -> FsResult<Vec<(Vec<u8>, ferrite::FileType)>> {
                let mut out = Vec::new();
                let mut cookie = 0;
                loop {
                    let got = fs.readdir(fd, cookie, batch)?;
                    if got.is_empty() {
                        break;
                    }
                    cookie = got.last().expect("non-empty").next_cookie;
                    out.extend(got.into_iter().map(|d| (d.name, d.kind)));
                    assert!(out.len() < 10_000, "readdir does not end");
                }
                out.sort();
                Ok(out)
            };
            let r = same!(d, list(e, x), list(m, y));
            e.close(x).expect("close dir");
            m.close(y).expect("close dir");
            r
        }
        94 => same!(
            "statfs".to_string(),
            e.statfs().map(|s| (s.files, s.files_free)),
            m.statfs().map(|s| (s.files, s.files_free))
        ),
        _ => {
            // readdir continuation on a kept directory descriptor, so that
            // cookies are exercised across other operations.
            let Some((x, y)) = pick_fd(rng, &p.dirs) else {
                return ("readdir-fd (none)".into(), Ok(()));
            };
            let ra = e.readdir(x, 0, 1000).map(|v| {
                let mut n: Vec<_> = v.into_iter().map(|d| d.name).collect();
                n.sort();
                n
            });
            let rb = m.readdir(y, 0, 1000).map(|v| {
                let mut n: Vec<_> = v.into_iter().map(|d| d.name).collect();
                n.sort();
                n
            });
            same!(format!("readdir fd {x:?}"), ra, rb)
        }
    }
}

/// The default mode of a seed's run: fsync-atomic for odd seeds.
fn seed_mode(seed: u64) -> FileMode {
    if seed % 2 == 1 {
        FileMode::FsyncAtomic
    } else {
        FileMode::Strict
    }
}

/// A freshly formatted engine of `pool_pages` pages beside an empty model,
/// both with default mode `mode`.
fn new_pair(pool_pages: u64, mode: FileMode) -> Pair {
    new_pair_sized(pool_pages, pool_pages, mode)
}

/// As `new_pair`, with a model of `model_pages` pages.
fn new_pair_sized(pool_pages: u64, model_pages: u64, mode: FileMode) -> Pair {
    let clock = Arc::new(ManualClock::new(TimeSpec { sec: 1_700_000_000, nsec: 0 }));
    let engine = Session::format(
        Pmem::heap(pool_pages * 4096),
        &FormatOptions { lanes: 2, inodes: Some(INODES), clock: clock.clone() },
    )
    .expect("format");
    engine.set_default_mode(mode);
    let files = engine.statfs().expect("statfs").files;
    let model = ModelFs::new(clock.clone(), model_pages, files);
    model.set_default_mode(mode);
    Pair { engine: Some(engine), model, clock, fds: Vec::new(), dirs: Vec::new(), counters: Counters::default() }
}

/// Compare the whole trees (walked as root) and the counts of pending
/// files.
fn compare_all(p: &Pair) -> Result<(), String> {
    let creds = p.engine().credentials();
    p.engine().set_credentials(Credentials::root());
    let walked = tree_of(p.engine());
    p.engine().set_credentials(creds);
    let te = walked.map_err(|e: Errno| format!("engine tree walk failed: {e:?}"))?;
    let tm = p.model.tree();
    if te != tm {
        return Err(format!("trees differ (expected = model):\n{}", diff_trees(&tm, &te)));
    }
    compare_pending(p)
}

fn fail(test: &str, seed: u64, i: usize, desc: &str, why: &str, history: &[String]) -> ! {
    let tail: Vec<&String> = history.iter().rev().take(15).collect();
    panic!(
        "seed {seed} step {i}: {desc}\n{why}\nlast steps (newest first):\n  {}\nreplay: FERRITE_SEED={seed} FERRITE_STEPS={} cargo test -p ferrite-tests --test model_based {test}",
        tail.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
        i + 1
    )
}

fn run_seed(seed: u64, steps: usize) -> Counters {
    run_seed_in(seed, steps, None).0
}

/// A run of `run_seed`; with `free_pages`, on an engine filled by a
/// ballast file until about that many pages are free, beside a model with
/// room for everything (and the same ballast), where an ENOSPC of the
/// engine's that the model did not get puts the model back to its state
/// before the step (the test below). Returns the engine's counters and
/// how many steps the engine refused with ENOSPC alone.
fn run_seed_in(seed: u64, steps: usize, free_pages: Option<u64>) -> (Counters, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut p = match free_pages {
        None => new_pair(POOL_PAGES, seed_mode(seed)),
        Some(_) => new_pair_sized(FULL_POOL_PAGES, 1 << 30, seed_mode(seed)),
    };
    if let Some(free) = free_pages {
        add_ballast(&p, free);
    }
    // A world-writable sticky root, so that the other users can work.
    p.engine().chmod(b"/", 0o1777).expect("chmod /");
    p.model.chmod(b"/", 0o1777).expect("chmod /");
    let full_pool_pages = free_pages;
    let test = if full_pool_pages.is_some() { FULL_TEST } else { "model_based_random_sequences" };
    let mut enospc = 0;
    let mut history: Vec<String> = Vec::new();
    for i in 0..steps {
        p.clock.advance_ns(1_000 + rng.gen_range(0..1000));
        if rng.gen_range(0..400) == 0 {
            let crash = rng.gen_bool(0.5);
            let desc = format!("remount crash={crash}");
            history.push(desc.clone());
            if let Err(why) = remount(&mut p, crash, false) {
                fail(test, seed, i, &desc, &why, &history);
            }
        }
        if rng.gen_range(0..500) == 0 {
            // The default mode of new files changes now and then.
            let mode =
                if p.model.default_mode() == FileMode::Strict { FileMode::FsyncAtomic } else { FileMode::Strict };
            p.engine().set_default_mode(mode);
            p.model.set_default_mode(mode);
            history.push(format!("default mode {mode:?}"));
        }
        let before = full_pool_pages.map(|_| Before::take(&p));
        let (desc, outcome) = step(&mut p, &mut rng);
        let outcome = settle_enospc(&mut p, before, &desc, outcome, &mut enospc);
        history.push(desc.clone());
        if let Err(why) = outcome.and_then(|_| compare_all(&p)) {
            fail(test, seed, i, &desc, &why, &history);
        }
    }
    if let Err(why) = remount(&mut p, false, false) {
        fail(test, seed, steps, "final clean remount", &why, &history);
    }
    (p.counters, enospc)
}

/// The seeds a test runs: `FERRITE_SEED` alone, or 1..=`FERRITE_SEEDS`
/// (default `default_seeds`); and the steps per seed (`FERRITE_STEPS`).
fn seeds_and_steps(default_seeds: u64, default_steps: usize) -> (Vec<u64>, usize) {
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let steps = env("FERRITE_STEPS").map_or(default_steps, |n| n as usize);
    let seeds = match env("FERRITE_SEED") {
        Some(seed) => vec![seed],
        None => (1..=env("FERRITE_SEEDS").unwrap_or(default_seeds)).collect(),
    };
    (seeds, steps)
}

#[test]
fn model_based_random_sequences() {
    let (seeds, steps) = seeds_and_steps(8, 5000);
    let mut total = Counters::default();
    for seed in seeds {
        let c = run_seed(seed, steps);
        eprintln!("model_based_random_sequences: seed {seed} ({:?} by default): {c:?}", seed_mode(seed));
        total.add(&c);
    }
    eprintln!("model_based_random_sequences: total {total:?}");
}

// ----- a nearly full pool ------------------------------------------------

const FULL_TEST: &str = "model_based_on_a_nearly_full_pool";
const FULL_SMALL_TEST: &str = "model_based_small_writes_on_a_nearly_full_pool";
/// Its pool (1 MiB: the ballast is compared after every step, so small).
const FULL_POOL_PAGES: u64 = 256;

/// A file `/ballast` (a name the sequences never make), written and
/// synced on both sides until the engine has about `free` pages available
/// (beyond its removal reserve).
fn add_ballast(p: &Pair, free: u64) {
    ferrite_tests::add_ballast(p.engine(), &p.model, free + 1, 64 * 1024);
}

/// The model's state and the descriptor pairs before a step.
struct Before(ferrite_model::ModelState, Vec<(Fd, Fd)>, Vec<(Fd, Fd)>);

impl Before {
    fn take(p: &Pair) -> Before {
        Before(p.model.snapshot(), p.fds.clone(), p.dirs.clone())
    }
}

/// A step's outcome on a nearly full pool: where the engine ran out of
/// space and the model had room, the step must have changed nothing on
/// the engine, so the model goes back to `before` (counted in `enospc`),
/// and the comparison that follows checks that. Anything else stands.
fn settle_enospc(
    p: &mut Pair,
    before: Option<Before>,
    desc: &str,
    outcome: Result<(), String>,
    enospc: &mut u64,
) -> Result<(), String> {
    match (before, outcome) {
        (Some(Before(model, fds, dirs)), Err(why)) if why.starts_with("engine Err(ENOSPC)") => {
            p.model.restore(model);
            (p.fds, p.dirs) = (fds, dirs);
            *enospc += 1;
            // Whether or not the trees show it: the file may have no name
            // left, and only its descriptors see its mode (seed 51 of
            // `model_based_on_a_nearly_full_pool` wrote through a second
            // descriptor of an unlinked set-group-ID file).
            drop_privileges_as_the_engine(p, desc);
            Ok(())
        }
        (_, outcome) => outcome,
    }
}

/// A write through a descriptor refused with ENOSPC has taken the file's
/// set-ID bits and capabilities away already, as Linux's does
/// (`file_modified` comes before the data, so a write to a full ext4
/// leaves the same): the model, put back to before the step, takes them
/// away the same way, as root, at the same instant (the clock moves only
/// between steps). The comparison that follows must then pass.
fn drop_privileges_as_the_engine(p: &Pair, desc: &str) {
    let Some(n) = desc.split("Fd(").nth(1).and_then(|r| r.split(')').next()).and_then(|n| n.parse().ok()) else {
        return;
    };
    let Some(&(x, y)) = p.fds.iter().find(|(x, _)| *x == Fd(n)) else { return };
    let (Ok(e), Ok(m)) = (p.engine().fstat(x), p.model.fstat(y)) else { return };
    let creds = p.model.credentials();
    p.model.set_credentials(Credentials::root());
    // Only set-ID bits the model still has may be gone.
    let set_id = 0o6000;
    if e.perm != m.perm && e.perm & !set_id == m.perm & !set_id && e.perm & set_id & !m.perm == 0 {
        p.model.fchmod(y, e.perm).expect("model fchmod");
    }
    let cap = b"security.capability";
    if p.engine().fgetxattr(x, cap) == Err(Errno::ENODATA) && p.model.fgetxattr(y, cap).is_ok() {
        p.model.fremovexattr(y, cap).expect("model fremovexattr");
    }
    p.model.set_credentials(creds);
}

/// The first test's sequences on an engine whose pages run out all the
/// time (a 1 MiB pool, where a ballast file leaves
/// `FERRITE_FULL_FREE_PAGES` available, default 12), beside a model with room for everything. Whenever the engine
/// fails a step with ENOSPC where the model succeeded, the model is put
/// back to its state before the step: the engine's refusal must have left
/// no trace (every operation all or nothing: data, names, attributes,
/// descriptors, an fsync-atomic file's pending changes), and every later
/// step, remount and crash recovery must agree with the model as before.
/// Any other disagreement fails, an ENOSPC where the model reports
/// another error (EEXIST, ENOENT, ...) among them: the engine must check
/// what the call asks before it allocates.
#[test]
fn model_based_on_a_nearly_full_pool() {
    on_a_nearly_full_pool(FULL_TEST, run_seed_in);
}

/// Run `run` (a seed, its steps, the pages left free) over the seeds of
/// `test`, 4 of 2,000 steps by default, and require refusals.
fn on_a_nearly_full_pool(test: &str, run: fn(u64, usize, Option<u64>) -> (Counters, u64)) {
    let (seeds, steps) = seeds_and_steps(4, 2000);
    let pages = std::env::var("FERRITE_FULL_FREE_PAGES").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    let (mut total, mut refused) = (Counters::default(), 0);
    for seed in seeds {
        let (c, enospc) = run(seed, steps, Some(pages));
        eprintln!("{test}: seed {seed} ({:?} by default): {enospc} steps refused with ENOSPC; {c:?}", seed_mode(seed));
        total.add(&c);
        refused += enospc;
    }
    eprintln!("{test}: total {refused} refused; {total:?}");
    assert!(refused > 0, "the pool never ran out of space: the test tested nothing");
}

// ----- small writes, modes and crashes -----------------------------------

/// The files of the small-writes test; `/d/l` is where hard links go.
const SW_FILES: &[&str] = &["/s0", "/s1", "/s2", "/d/s3"];
const SW_LINK: &str = "/d/l";
/// Descriptors the small-writes test keeps open at most.
const SW_FDS_MAX: usize = 8;
/// The small-writes test's pool (4 MiB: its files stay under 40 KiB).
const SW_POOL_PAGES: u64 = 1024;

/// Both results, equal or rendered.
macro_rules! agree {
    ($desc:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        let d: String = $desc;
        if a == b {
            (d, Ok(()))
        } else {
            (d, Err(format!("engine {:?}\n model  {:?}", a, b)))
        }
    }};
}

/// The length of a small write: mostly 1..128 and 128..600 bytes, some up
/// to past the engine's 1024-byte inline limit.
fn small_len(rng: &mut ChaCha8Rng) -> usize {
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(1..128),
        6..=8 => rng.gen_range(128..600),
        _ => rng.gen_range(600..2100),
    }
}

/// Where a small write of `len` bytes lands: in the first six pages,
/// unaligned, often at a page edge (crossing it or ending at it) or over a
/// recent write (overlapping or covering it).
fn small_offset(rng: &mut ChaCha8Rng, len: usize, recent: &[(u64, usize)]) -> u64 {
    let page = 4096 * rng.gen_range(0..6u64);
    let len = len as u64;
    match rng.gen_range(0..10) {
        0..=3 => page + rng.gen_range(0..4096),
        4 => page + 4096 - rng.gen_range(1..=len.min(4095) + 1).min(4096),
        5 => page + 4096 - len.min(4096),
        6 => page,
        _ if !recent.is_empty() => {
            let (off, l) = recent[rng.gen_range(0..recent.len())];
            // Over a recent write: the same start, inside it, or around it.
            match rng.gen_range(0..3) {
                0 => off,
                1 => off + rng.gen_range(0..l as u64),
                _ => off.saturating_sub(rng.gen_range(0..64)),
            }
        }
        _ => page + 64 * rng.gen_range(0..64),
    }
}

/// A size for truncate: near the current size (unaligned), a page
/// boundary, or anything within eight pages.
fn small_size(rng: &mut ChaCha8Rng, current: u64) -> u64 {
    match rng.gen_range(0..4) {
        0 | 1 => (current as i64 + rng.gen_range(-5000i64..5000)).max(0) as u64,
        2 => 4096 * rng.gen_range(0..8),
        _ => rng.gen_range(0..32_768),
    }
}

fn sw_bytes(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let b: u8 = rng.gen();
    (0..len).map(|i| b.wrapping_add((i % 253) as u8)).collect()
}

/// One step of the small-writes test on both sides.
fn step_small(p: &mut Pair, rng: &mut ChaCha8Rng, recent: &mut Vec<(u64, usize)>) -> (String, Result<(), String>) {
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let r: u32 = rng.gen_range(0..1000);
    // Steps that need no descriptor first.
    match r {
        850..=889 => {
            // Open (O_SYNC and O_DSYNC descriptors included) or close.
            if p.fds.len() >= SW_FDS_MAX || (!p.fds.is_empty() && rng.gen_bool(0.4)) {
                let (x, y) = p.fds.remove(rng.gen_range(0..p.fds.len()));
                return agree!(format!("close {x:?}"), p.engine().close(x), p.model.close(y));
            }
            let path = SW_FILES[rng.gen_range(0..SW_FILES.len())].as_bytes();
            let mut flags = match rng.gen_range(0..20) {
                0 => OpenFlags::RDONLY,
                1 => OpenFlags::WRONLY,
                _ => OpenFlags::RDWR,
            };
            flags.create = true;
            flags.sync = rng.gen_bool(0.12);
            flags.dsync = !flags.sync && rng.gen_bool(0.12);
            flags.append = rng.gen_bool(0.05);
            flags.trunc = rng.gen_bool(0.03);
            let d = format!("open {:?} {flags:?}", show(path));
            return match (p.engine().open(path, flags, 0o644), p.model.open(path, flags, 0o644)) {
                (Ok(x), Ok(y)) => {
                    p.fds.push((x, y));
                    (d, Ok(()))
                }
                (a, b) => agree!(d, a.map(|_| ()), b.map(|_| ())),
            };
        }
        890..=909 => {
            // Namespace operations: commit points of the files they touch.
            let pick = |rng: &mut ChaCha8Rng| SW_FILES[rng.gen_range(0..SW_FILES.len())].as_bytes();
            let (e, m) = (p.engine(), &p.model);
            return match rng.gen_range(0..4) {
                0 => {
                    let (a, b) = (pick(rng), pick(rng));
                    let flags = if rng.gen_bool(0.3) { RenameFlags::Exchange } else { RenameFlags::Replace };
                    agree!(
                        format!("rename {:?} {:?} {flags:?}", show(a), show(b)),
                        e.rename(a, b, flags),
                        m.rename(a, b, flags)
                    )
                }
                1 => {
                    let a = pick(rng);
                    agree!(
                        format!("link {:?} {SW_LINK}", show(a)),
                        e.link(a, SW_LINK.as_bytes()),
                        m.link(a, SW_LINK.as_bytes())
                    )
                }
                2 => {
                    let a = if rng.gen_bool(0.5) { SW_LINK.as_bytes() } else { pick(rng) };
                    agree!(format!("unlink {:?}", show(a)), e.unlink(a), m.unlink(a))
                }
                _ => {
                    let (a, b) = (SW_LINK.as_bytes(), pick(rng));
                    agree!(
                        format!("rename {SW_LINK} {:?}", show(b)),
                        e.rename(a, b, RenameFlags::Replace),
                        m.rename(a, b, RenameFlags::Replace)
                    )
                }
            };
        }
        790..=799 => {
            p.engine().sync_all().expect("sync_all");
            p.model.sync_all();
            return ("sync_all".into(), Ok(()));
        }
        680..=699 => {
            let path = SW_FILES[rng.gen_range(0..SW_FILES.len())].as_bytes();
            let current = p.model.stat(path).map_or(0, |s| s.size);
            let size = small_size(rng, current);
            return agree!(
                format!("truncate {:?} {size}", show(path)),
                p.engine().truncate(path, size),
                p.model.truncate(path, size)
            );
        }
        _ => {}
    }
    if p.fds.is_empty() {
        return ("(no descriptor)".into(), Ok(()));
    }
    let (x, y) = p.fds[rng.gen_range(0..p.fds.len())];
    let (e, m) = (p.engine(), &p.model);
    match r {
        0..=449 | 940..=999 => {
            let len = small_len(rng);
            let off = small_offset(rng, len, recent);
            let buf = sw_bytes(rng, len);
            recent.push((off, len));
            if recent.len() > 8 {
                recent.remove(0);
            }
            agree!(format!("pwrite {x:?} len {len} at {off}"), e.pwrite(x, &buf, off), m.pwrite(y, &buf, off))
        }
        450..=499 => {
            // Sequential small writes through the descriptor's position.
            let len = small_len(rng);
            let buf = sw_bytes(rng, len);
            agree!(format!("write {x:?} len {len}"), e.write(x, &buf), m.write(y, &buf))
        }
        500..=529 => {
            let (len, off) = if rng.gen_bool(0.5) {
                (4096 * rng.gen_range(1..3), 4096 * rng.gen_range(0..6))
            } else {
                (rng.gen_range(600..9000), rng.gen_range(0..24_000))
            };
            let buf = sw_bytes(rng, len);
            agree!(format!("pwrite {x:?} len {len} at {off} (large)"), e.pwrite(x, &buf, off), m.pwrite(y, &buf, off))
        }
        530..=619 => {
            let (len, off) = (rng.gen_range(1..9000), rng.gen_range(0..28_000));
            let (mut ba, mut bb) = (vec![0u8; len], vec![0u8; len]);
            let (ra, rb) = (e.pread(x, &mut ba, off), m.pread(y, &mut bb, off));
            agree!(
                format!("pread {x:?} len {len} at {off}"),
                ra.map(|n| ba[..n].to_vec()),
                rb.map(|n| bb[..n].to_vec())
            )
        }
        620..=649 => {
            // A burst of reads: the file becomes read-mostly, and the
            // engine folds its deltas earlier.
            for k in 0..16 {
                let (len, off) = (rng.gen_range(1..5000), rng.gen_range(0..24_000));
                let (mut ba, mut bb) = (vec![0u8; len], vec![0u8; len]);
                let (ra, rb) = (e.pread(x, &mut ba, off), m.pread(y, &mut bb, off));
                let r = agree!(
                    format!("pread {x:?} len {len} at {off} (burst {k})"),
                    ra.map(|n| ba[..n].to_vec()),
                    rb.map(|n| bb[..n].to_vec())
                );
                if r.1.is_err() {
                    return r;
                }
            }
            ("16 preads".into(), Ok(()))
        }
        650..=679 => {
            let current = m.fstat(y).map_or(0, |s| s.size);
            let size = small_size(rng, current);
            agree!(format!("ftruncate {x:?} {size}"), e.ftruncate(x, size), m.ftruncate(y, size))
        }
        700..=729 => {
            let mode = [
                FallocateMode::PunchHole,
                FallocateMode::PunchHole,
                FallocateMode::KeepSize,
                FallocateMode::Default,
                FallocateMode::ZeroRange,
                FallocateMode::ZeroRangeKeepSize,
            ][rng.gen_range(0..6)];
            let (off, len) = (rng.gen_range(0..24_000), rng.gen_range(1..9000));
            agree!(
                format!("fallocate {x:?} {mode:?} {off}+{len}"),
                e.fallocate(x, mode, off, len),
                m.fallocate(y, mode, off, len)
            )
        }
        730..=789 => {
            if rng.gen_bool(0.5) {
                agree!(format!("fsync {x:?}"), e.fsync(x), m.fsync(y))
            } else {
                agree!(format!("fdatasync {x:?}"), e.fdatasync(x), m.fdatasync(y))
            }
        }
        800..=829 => {
            if rng.gen_bool(0.3) {
                agree!(format!("get mode {x:?}"), e.fgetxattr(x, FileMode::XATTR), m.fgetxattr(y, FileMode::XATTR))
            } else {
                let v = mode_value(rng);
                agree!(
                    format!("set mode {x:?} {:?}", show(v)),
                    e.fsetxattr(x, FileMode::XATTR, v, XattrSetMode::Any),
                    m.fsetxattr(y, FileMode::XATTR, v, XattrSetMode::Any)
                )
            }
        }
        830..=849 => match rng.gen_range(0..4) {
            0 => {
                let perm = 0o600 | rng.gen_range(0..0o100);
                agree!(format!("fchmod {x:?} {perm:o}"), e.fchmod(x, perm), m.fchmod(y, perm))
            }
            1 => {
                let t = time_set(rng);
                agree!(
                    format!("futimens {x:?} Omit {t:?}"),
                    e.futimens(x, TimeSet::Omit, t),
                    m.futimens(y, TimeSet::Omit, t)
                )
            }
            2 => {
                let len = rng.gen_range(0..40);
                let v = sw_bytes(rng, len);
                agree!(
                    format!("fsetxattr {x:?} user.x len {}", v.len()),
                    e.fsetxattr(x, b"user.x", &v, XattrSetMode::Any),
                    m.fsetxattr(y, b"user.x", &v, XattrSetMode::Any)
                )
            }
            _ => {
                agree!(format!("fremovexattr {x:?} user.x"), e.fremovexattr(x, b"user.x"), m.fremovexattr(y, b"user.x"))
            }
        },
        _ => agree!(format!("fstat {x:?}"), comparable(e.fstat(x)), comparable(m.fstat(y))),
    }
}

/// One seed of the small-writes test.
fn run_small_seed(seed: u64, steps: usize) -> Counters {
    run_small_seed_in(seed, steps, None).0
}

/// `run_small_seed`; with `free_pages`, on a nearly full pool as
/// `run_seed_in` (the ballast added after the files are made).
fn run_small_seed_in(seed: u64, steps: usize, free_pages: Option<u64>) -> (Counters, u64) {
    let test = if free_pages.is_some() { FULL_SMALL_TEST } else { "model_based_small_writes" };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut p = match free_pages {
        None => new_pair(SW_POOL_PAGES, seed_mode(seed)),
        Some(_) => new_pair_sized(FULL_POOL_PAGES, 1 << 30, seed_mode(seed)),
    };
    let mut enospc = 0;
    let mut history: Vec<String> = Vec::new();
    // Every file starts with three and a half pages, committed, so that
    // small writes find mapped pages.
    p.engine().mkdir(b"/d", 0o755).expect("mkdir");
    p.model.mkdir(b"/d", 0o755).expect("mkdir");
    for (k, path) in SW_FILES.iter().enumerate() {
        let data = sw_bytes(&mut rng, 3 * 4096 + 1000 + k);
        for fs in [p.engine() as &dyn PathFs, &p.model] {
            let fd = fs.open(path.as_bytes(), OpenFlags::RDWR.create(), 0o644).expect("create");
            fs.pwrite(fd, &data, 0).expect("write");
            fs.close(fd).expect("close");
        }
    }
    p.engine().sync_all().expect("sync_all");
    p.model.sync_all();
    if let Some(free) = free_pages {
        add_ballast(&p, free);
    }
    let mut recent = Vec::new();
    for i in 0..steps {
        p.clock.advance_ns(1_000 + rng.gen_range(0..1000));
        let r = rng.gen_range(0..1000);
        if r < 16 {
            // A crash remount (12 in 1000 steps) or a clean one (4).
            let crash = r < 12;
            let desc = format!("remount crash={crash}");
            history.push(desc.clone());
            // (Counting Inline entries dumps every file: every 8th remount.)
            let count_inline = (p.counters.crash_remounts + p.counters.clean_remounts).is_multiple_of(8);
            if let Err(why) = remount(&mut p, crash, count_inline) {
                fail(test, seed, i, &desc, &why, &history);
            }
            continue;
        }
        let before = free_pages.map(|_| Before::take(&p));
        let (desc, outcome) = step_small(&mut p, &mut rng, &mut recent);
        let outcome = settle_enospc(&mut p, before, &desc, outcome, &mut enospc);
        history.push(desc.clone());
        if let Err(why) = outcome.and_then(|_| compare_all(&p)) {
            fail(test, seed, i, &desc, &why, &history);
        }
    }
    for crash in [true, false] {
        if let Err(why) = remount(&mut p, crash, true) {
            fail(test, seed, steps, &format!("final remount crash={crash}"), &why, &history);
        }
    }
    (p.counters, enospc)
}

#[test]
fn model_based_small_writes() {
    let (seeds, steps) = seeds_and_steps(6, 2000);
    let mut total = Counters::default();
    for &seed in &seeds {
        let c = run_small_seed(seed, steps);
        eprintln!("model_based_small_writes: seed {seed} ({:?} by default): {c:?}", seed_mode(seed));
        total.add(&c);
    }
    eprintln!("model_based_small_writes: total {total:?}");
    // The run must have reached the paths it is about (a change of the
    // engine's policies that bypassed them would make this test vacuous).
    if seeds.len() > 1 {
        assert!(total.epoch_commits > 0, "no fsync-atomic epoch committed: {total:?}");
        assert!(total.inline_entries_seen > 0, "no Inline entry in any log: {total:?}");
        assert!(total.compactions > 0, "no log compacted: {total:?}");
    }
}

/// The small-writes sequences on a nearly full pool, as
/// `model_based_on_a_nearly_full_pool` runs the first test's: inline
/// (delta) writes, folds, fsync-atomic epochs and compaction when the
/// pages run out, each refusal leaving no trace.
#[test]
fn model_based_small_writes_on_a_nearly_full_pool() {
    on_a_nearly_full_pool(FULL_SMALL_TEST, run_small_seed_in);
}
