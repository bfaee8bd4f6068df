//! Model-based randomized test: long seeded sequences of every operation of
//! the path API run on the engine and on the in-memory reference model
//! (`ferrite-model`) side by side. After every step the results (values and
//! errno) must agree and the whole trees must be equal; every so often the
//! engine is remounted — cleanly, or by dropping it as a crash would — and
//! fsck must find the pool clean.
//!
//! A failure prints the seed and step; replay one seed with
//! `FERRITE_SEED=<seed> cargo test -p ferrite-tests --test model_based`.
//! `FERRITE_STEPS` sets the number of steps per seed.

use ferrite::{
    Errno, FallocateMode, Fd, Ferrite, FormatOptions, FsResult, ManualClock, MountOptions, OpenFlags, PathFs,
    RenameFlags, Stat, TimeSet, TimeSpec, Whence,
};
use ferrite_model::{diff_trees, tree_of, ModelFs};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const POOL_PAGES: u64 = 2048;
const INODES: u64 = 256;

struct Pair {
    engine: Option<Ferrite>,
    model: ModelFs,
    clock: Arc<ManualClock>,
    /// Open descriptors: (engine, model).
    fds: Vec<(Fd, Fd)>,
    /// Open directory descriptors with the cookie each side reached.
    dirs: Vec<(Fd, Fd)>,
}

impl Pair {
    fn engine(&self) -> &Ferrite {
        self.engine.as_ref().expect("mounted")
    }
}

fn mount_opts(clock: &Arc<ManualClock>) -> MountOptions {
    MountOptions { clock: clock.clone(), recovery_threads: 2 }
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
    p.engine = Some(Ferrite::mount(Pmem::from_image(&image), &mount_opts(&p.clock)).expect("remount"));
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

/// Run one random step on both sides; returns a description and whether
/// the two results agreed (with both results rendered).
fn step(p: &mut Pair, rng: &mut ChaCha8Rng) -> (String, Result<(), String>) {
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
    let engine = Ferrite::format(
        Pmem::heap(POOL_PAGES * 4096),
        &FormatOptions { lanes: 2, inodes: Some(INODES), clock: clock.clone() },
    )
    .expect("format");
    let files = engine.statfs().expect("statfs").files;
    let model = ModelFs::new(clock.clone(), POOL_PAGES, files);
    let mut p = Pair { engine: Some(engine), model, clock, fds: Vec::new(), dirs: Vec::new() };
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
        // Compare the whole trees every step while they are small.
        let te =
            tree_of(p.engine()).unwrap_or_else(|e: Errno| fail(format!("engine tree walk failed: {e:?}"), &history));
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
