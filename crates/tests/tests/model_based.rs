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
//! FD_CLOEXEC, F_GETFL/F_SETFL O_APPEND, O_SYNC); and switches of the
//! credentials between root and two users with a shared group, so that
//! every call also runs through the permission checks of both sides.
//!
//! A failure prints the seed and step; replay one seed with
//! `FERRITE_SEED=<seed> cargo test -p ferrite-tests --test model_based`.
//! `FERRITE_STEPS` sets the number of steps per seed.

use ferrite::{
    Credentials, Errno, FallocateMode, Fd, FormatOptions, FsResult, ManualClock, MountOptions, OpenFlags, PathFs,
    RenameFlags, Session, Stat, TimeSet, TimeSpec, Whence, XattrSetMode, AT_FDCWD,
};
use ferrite_model::{diff_trees, tree_of, ModelFs};
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
}

impl Pair {
    fn engine(&self) -> &Session {
        self.engine.as_ref().expect("mounted")
    }
}

fn mount_opts(clock: &Arc<ManualClock>) -> MountOptions {
    MountOptions { clock: clock.clone(), recovery_threads: 2, ..Default::default() }
}

fn remount(p: &mut Pair, crash: bool) {
    let fs = p.engine.take().expect("mounted");
    let pmem = fs.pmem().clone();
    if crash {
        drop(fs);
    } else {
        fs.unmount().expect("unmount");
    }
    let image = pmem.image();
    drop(pmem);
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).expect("fsck runs");
    assert!(report.is_clean(), "fsck after {} remount:\n{report}", if crash { "crash" } else { "clean" });
    p.engine = Some(Session::mount(Pmem::from_image(&image), &mount_opts(&p.clock)).expect("remount"));
    p.model.close_all();
    p.fds.clear();
    p.dirs.clear();
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
        1..=5 => rng.gen_range(1..200),
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
            let (x1, y1) = dirfd(p, rng);
            let (x2, y2) = dirfd(p, rng);
            let mut f = flag(rng, libc::AT_SYMLINK_FOLLOW, 0.4);
            let a = if rng.gen_bool(0.1) {
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
            let names: [&[u8]; 4] = [b"user.a", b"user.b", b"trusted.t", b"security.s"];
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
                    let value = data(rng);
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
                    if flags.directory || e.fstat(x).map(|s| s.kind) == Ok(ferrite::FileType::Directory) {
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
            let mode = [FallocateMode::Default, FallocateMode::KeepSize, FallocateMode::PunchHole][rng.gen_range(0..3)];
            let (off, len) = (offset(rng), rng.gen_range(0..20_000));
            same!(
                format!("fallocate {x:?} {mode:?} {off}+{len}"),
                e.fallocate(x, mode, off, len),
                m.fallocate(y, mode, off, len)
            )
        }
        48 => {
            let Some((x, y)) = pick_fd(rng, &p.fds) else {
                return ("fsync (none)".into(), Ok(()));
            };
            same!(format!("fsync {x:?}"), e.fsync(x), m.fsync(y))
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

fn run_seed(seed: u64, steps: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let clock = Arc::new(ManualClock::new(TimeSpec { sec: 1_700_000_000, nsec: 0 }));
    let engine = Session::format(
        Pmem::heap(POOL_PAGES * 4096),
        &FormatOptions { lanes: 2, inodes: Some(INODES), clock: clock.clone() },
    )
    .expect("format");
    let files = engine.statfs().expect("statfs").files;
    let model = ModelFs::new(clock.clone(), POOL_PAGES, files);
    let mut p = Pair { engine: Some(engine), model, clock, fds: Vec::new(), dirs: Vec::new() };
    // A world-writable sticky root, so that the other users can work.
    p.engine().chmod(b"/", 0o1777).expect("chmod /");
    p.model.chmod(b"/", 0o1777).expect("chmod /");
    let mut history: Vec<String> = Vec::new();
    for i in 0..steps {
        p.clock.advance_ns(1_000 + rng.gen_range(0..1000));
        if rng.gen_range(0..400) == 0 {
            let crash = rng.gen_bool(0.5);
            remount(&mut p, crash);
            history.push(format!("remount crash={crash}"));
        }
        let (desc, outcome) = step(&mut p, &mut rng);
        history.push(desc.clone());
        let fail = |why: String, history: &[String]| -> ! {
            let tail: Vec<&String> = history.iter().rev().take(15).collect();
            panic!(
                "seed {seed} step {i}: {desc}\n{why}\nlast steps (newest first):\n  {}\nreplay: FERRITE_SEED={seed} FERRITE_STEPS={} cargo test -p ferrite-tests --test model_based",
                tail.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
                i + 1
            )
        };
        if let Err(why) = outcome {
            fail(why, &history);
        }
        // Compare the whole trees every step while they are small (walked
        // as root).
        let creds = p.engine().credentials();
        p.engine().set_credentials(Credentials::root());
        let walked = tree_of(p.engine());
        p.engine().set_credentials(creds);
        let te = walked.unwrap_or_else(|e: Errno| fail(format!("engine tree walk failed: {e:?}"), &history));
        let tm = p.model.tree();
        if te != tm {
            fail(format!("trees differ (expected = model):\n{}", diff_trees(&tm, &te)), &history);
        }
    }
    remount(&mut p, false);
}

#[test]
fn model_based_random_sequences() {
    let steps: usize = std::env::var("FERRITE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5000);
    if let Some(seed) = std::env::var("FERRITE_SEED").ok().and_then(|s| s.parse().ok()) {
        run_seed(seed, steps);
        return;
    }
    for seed in 1..=8u64 {
        run_seed(seed, steps);
    }
}
