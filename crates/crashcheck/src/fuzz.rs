//! Fuzz targets. Each is a plain function that panics on a finding, so that
//! cargo-fuzz (`crates/crashcheck/fuzz`) and the ordinary tests
//! (`tests/fuzz_smoke.rs`: a fixed corpus plus seeded random inputs) run
//! exactly the same code.
//!
//! - [`fuzz_image`]: decoding, checking and mounting arbitrary or mutated
//!   pool images must give errors, never a panic, an out-of-bounds access
//!   (the persistence layer panics on one) or a hang; a mounted pool must
//!   survive a bounded walk, a few operations and an unmount.
//! - [`fuzz_ops`]: a sequence of calls decoded from the input runs on a
//!   start image beside the model; the persistence checker must pass, and
//!   crash images at points the input picks must recover to an allowed
//!   state and pass the checks of [`crate::verify`]. The input may make
//!   the file set's files fsync-atomic first, and its calls include mode
//!   changes, the default mode, sync, fdatasync and O_SYNC/O_DSYNC opens
//!   (the fsync-atomic oracle and checker rules then apply).

use crate::crash::{Caps, PointKind, Sim};
use crate::exec::{record, start, GEOMETRY};
use crate::harness::{allowed, describe_point, mismatch};
use crate::quiet;
use crate::verify::{verify, VerifyOpts};
use crate::workload::{atomic_prepare, Call, StartKind, Workload, SLOTS};
use ferrite::{FallocateMode, FileMode, FileType, OpenFlags, PathFs, RenameFlags, TimeSet, TimeSpec};
use ferrite_pmem::Pmem;
use std::sync::OnceLock;

/// Pool images decoded from fuzz inputs are at least this many pages.
const MIN_PAGES: usize = 64;

fn base_image() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| start(StartKind::Aged).image.to_vec())
}

/// Turn a fuzz input into a pool image. First byte even: the rest is
/// patched over a valid aged pool (records of offset, length, bytes; the
/// offsets favour the metadata pages and the first data pages); odd: the
/// rest is the image itself, padded with zeros to 64 pages.
pub fn image_from_input(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return base_image().to_vec();
    };
    if mode & 1 == 1 {
        let mut img = rest.to_vec();
        let len = (img.len().div_ceil(4096) * 4096).max(MIN_PAGES * 4096);
        img.resize(len, 0);
        return img;
    }
    let mut img = base_image().to_vec();
    let n = img.len();
    let mut i = 0;
    while i + 4 <= rest.len() {
        let sel = rest[i];
        let raw = u32::from(rest[i + 1]) << 8 | u32::from(rest[i + 2]);
        let len = (rest[i + 3] % 16) as usize + 1;
        // Mostly the first 24 pages (superblocks, journal, inode table,
        // save area, the first log pages); sometimes anywhere.
        let off = if sel & 0x80 == 0 { raw as usize * 24 * 4096 / 65536 } else { raw as usize * n / 65536 };
        i += 4;
        let bytes = &rest[i..(i + len).min(rest.len())];
        i += len;
        for (k, &b) in bytes.iter().enumerate() {
            if let Some(x) = img.get_mut(off + k) {
                *x = if sel & 0x40 != 0 { *x ^ b } else { b };
            }
        }
    }
    img
}

/// Walk a possibly corrupt tree with bounds (nodes, bytes read, each
/// directory once) through the path API, ignoring errors.
fn bounded_walk(fs: &dyn PathFs) {
    let mut stack = vec![b"/".to_vec()];
    let mut seen = std::collections::HashSet::new();
    let mut nodes = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while let Some(path) = stack.pop() {
        nodes += 1;
        if nodes > 300 {
            break;
        }
        let Ok(st) = fs.lstat(&path) else { continue };
        match st.kind {
            FileType::Directory => {
                if !seen.insert(st.ino) {
                    continue;
                }
                let Ok(fd) = fs.open(&path, OpenFlags::RDONLY.directory(), 0) else {
                    continue;
                };
                let mut cookie = 0;
                for _ in 0..50 {
                    match fs.readdir(fd, cookie, 32) {
                        Ok(b) if !b.is_empty() => {
                            let next = b.last().map(|d| d.next_cookie).unwrap_or(cookie);
                            if next <= cookie {
                                break;
                            }
                            cookie = next;
                            for d in b {
                                if stack.len() < 300 && !d.name.is_empty() && !d.name.contains(&b'/') {
                                    let mut p = path.clone();
                                    if p != b"/" {
                                        p.push(b'/');
                                    }
                                    p.extend_from_slice(&d.name);
                                    stack.push(p);
                                }
                            }
                        }
                        _ => break,
                    }
                }
                let _ = fs.close(fd);
            }
            FileType::Regular => {
                if let Ok(fd) = fs.open(&path, OpenFlags::RDWR, 0) {
                    for at in [0, st.size / 2, st.size.saturating_sub(100), st.size] {
                        let _ = fs.pread(fd, &mut buf, at);
                    }
                    let _ = fs.pwrite(fd, b"fuzz", st.size.min(1 << 20));
                    let _ = fs.fstat(fd);
                    let _ = fs.close(fd);
                }
            }
            FileType::Symlink => {
                let _ = fs.readlink(&path);
                let _ = fs.stat(&path);
            }
            FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {
                let _ = fs.open(&path, OpenFlags::RDONLY, 0);
                let _ = fs.truncate(&path, 1);
            }
        }
    }
}

/// Target (a): see the module comment. Panics on a finding.
pub fn fuzz_image(data: &[u8]) {
    let img = image_from_input(data);
    let r = quiet::catch(|| {
        let _ = ferrite::fsck::check_private(Pmem::from_image(&img));
        let clock = crate::exec::clock_at(crate::exec::T_CHECK);
        if let Ok(fs) = ferrite::Session::mount(Pmem::from_image(&img), &crate::exec::mount_options(&clock, 1)) {
            bounded_walk(&fs);
            let _ = fs.mkdir(b"/fz", 0o755);
            if let Ok(fd) = fs.open(b"/fz/f", OpenFlags::RDWR.create(), 0o644) {
                let _ = fs.pwrite(fd, &[7u8; 5000], 3000);
                let _ = fs.close(fd);
            }
            let _ = fs.rename(b"/fz/f", b"/fz/g", RenameFlags::Replace);
            let _ = fs.unlink(b"/fz/g");
            let _ = fs.rmdir(b"/fz");
            let _ = fs.unmount();
        }
    });
    if let Err(p) = r {
        panic!("fuzz_image: {p}\n  input ({} bytes): {}", data.len(), hex(&data[..data.len().min(256)]));
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decode a fuzz input into a workload over the file set's names.
pub fn workload_from_input(data: &[u8]) -> (StartKind, Workload) {
    const PATHS: [&str; 14] = [
        "/foo", "/bar", "/A", "/B", "/A/C", "/A/foo", "/A/bar", "/A/C/foo", "/A/C/bar", "/B/bar", "/baz", "/A/baz",
        "/B/foo", "/A/C/D",
    ];
    let mut it = data.iter().copied();
    let mut next = move || it.next();
    // First byte: the start image (low two bits); bit 2: the files of
    // `ATOMIC_FILES` fsync-atomic first.
    let first = next().unwrap_or(0);
    let atomic = first & 4 != 0;
    let start = match first % 4 {
        0 => StartKind::Empty,
        1 => StartKind::Aged,
        2 => StartKind::Full,
        _ => StartKind::LogEdge,
    };
    let mut calls = Vec::new();
    let path = |b: Option<u8>| PATHS[b.unwrap_or(0) as usize % PATHS.len()].as_bytes().to_vec();
    while calls.len() < 8 {
        let Some(op) = next() else { break };
        let a = next();
        let b = next();
        let n = u64::from(next().unwrap_or(0)) << 8 | u64::from(next().unwrap_or(0));
        let slot = a.unwrap_or(0) % (SLOTS as u8 / 2);
        let c = match op % 25 {
            0 => Call::Open {
                slot,
                path: path(b),
                flags: OpenFlags {
                    read: true,
                    write: n & 1 == 0,
                    create: n & 2 != 0,
                    excl: n & 4 != 0,
                    trunc: n & 8 != 0,
                    append: n & 16 != 0,
                    sync: n & 32 != 0,
                    dsync: n & 64 != 0,
                    // O_TMPFILE carries O_DIRECTORY, as in Linux.
                    tmpfile: n & 128 != 0,
                    directory: n & 128 != 0,
                    ..OpenFlags::RDONLY
                },
                perm: 0o644,
            },
            1 => Call::Close { slot },
            2..=4 => Call::Pwrite {
                slot,
                off: n % 20000,
                len: [1, 100, 4096, 5000, 9000][b.unwrap_or(0) as usize % 5],
                tag: n as u32,
            },
            5 => Call::Write { slot, len: 1 + (n % 9000) as u32, tag: n as u32 },
            6 => Call::Ftruncate { slot, size: n % 20000 },
            7 => Call::Truncate { path: path(b), size: n % 20000 },
            8 => Call::Fallocate {
                slot,
                mode: FallocateMode::ALL[n as usize % FallocateMode::ALL.len()],
                off: (n >> 1) % 16000,
                len: 1 + u64::from(b.unwrap_or(0)) * 64,
            },
            9 => Call::Mkdir { path: path(b), perm: 0o755 },
            10 => Call::Rmdir { path: path(b) },
            11 => Call::Unlink { path: path(b) },
            12 => Call::Rename {
                from: path(a),
                to: path(b),
                flags: [RenameFlags::Replace, RenameFlags::NoReplace, RenameFlags::Exchange][n as usize % 3],
            },
            13 if n & 1 != 0 => Call::LinkFd { slot, to: path(b) },
            13 => Call::Link { from: path(a), to: path(b) },
            14 => Call::Symlink { target: vec![b'x'; 1 + (n % 3000) as usize], path: path(b) },
            15 => Call::Chmod { path: path(b), perm: (n % 0o1000) as u32 },
            16 => Call::Chown { path: path(b), uid: Some(n as u32 % 2000), gid: None },
            17 => Call::Utimens {
                path: path(b),
                atime: TimeSet::At(TimeSpec { sec: n as i64, nsec: 5 }),
                mtime: TimeSet::Now,
            },
            18 => Call::Fsync { slot },
            19 => Call::Open { slot, path: path(b), flags: OpenFlags::RDWR, perm: 0o644 },
            20 => Call::SetMode { slot, mode: FileMode::FsyncAtomic },
            21 => Call::SetMode { slot, mode: FileMode::Strict },
            22 => Call::Sync,
            23 => Call::SetDefaultMode { mode: if n & 1 == 0 { FileMode::FsyncAtomic } else { FileMode::Strict } },
            _ => Call::Fdatasync { slot },
        };
        calls.push(c);
    }
    let w = Workload {
        id: format!("fuzz.{}", hex(&data[..data.len().min(32)])),
        prepare: if atomic { atomic_prepare() } else { Vec::new() },
        setup: Vec::new(),
        calls,
        buffered: None,
    };
    (start, w)
}

/// Target (b): see the module comment. Panics on a finding. The trailing
/// bytes of the input pick the crash points and images (every point gets
/// its two bounding images and one picked candidate).
pub fn fuzz_ops(data: &[u8]) {
    if let Err(m) = check_ops(data) {
        panic!("fuzz_ops: {m}\n  input ({} bytes): {}", data.len(), hex(&data[..data.len().min(256)]));
    }
}

/// Target (b) returning its finding instead of panicking.
pub fn check_ops(data: &[u8]) -> Result<(), String> {
    let (kind, w) = workload_from_input(data);
    let st = start(kind);
    let rec = quiet::catch(|| record(&st, &w)).map_err(|p| format!("running the workload: {p}"))?;
    if let Some(d) = rec.divergences.first() {
        return Err(format!("{}: engine and model disagree: {d}", w.id));
    }
    let report = rec.pcheck();
    if let Some(v) = report.violations.first() {
        return Err(format!("{}: persistence checker: {v}", w.id));
    }
    let picks = data.iter().rev().copied().collect::<Vec<u8>>();
    let opts =
        VerifyOpts { usability: true, recovery_crash: crate::verify::RecoveryCrash::Off, recovery_caps: Caps::FULL };
    let caps = Caps { subsets: 64, torn: 16, older: 4, exhaustive_lines: 6 };
    let mut sim = Sim::new(&rec.base, &rec.events);
    let mut n = 0usize;
    let mut seen = std::collections::HashSet::new();
    while let Some(kind_) = sim.next_point() {
        let at = sim.position();
        if let PointKind::Mark(l) = kind_ {
            if l % 2 == 0 {
                continue;
            }
        }
        let cands = sim.candidates(&caps, at as u64);
        let pick = picks.get(n % picks.len().max(1)).copied().unwrap_or(0) as usize;
        n += 1;
        let chosen = [0, 1, 2 + pick % cands.len().max(1)];
        let allow = allowed(&rec, at, kind_);
        for &ci in &chosen {
            let Some(c) = cands.get(ci) else { continue };
            if !seen.insert(sim.key(c)) {
                continue;
            }
            let img = sim.build(c);
            let where_ = || format!("{}: crash {} image {}", w.id, describe_point(&rec, at, kind_), c.label);
            match verify(&img, GEOMETRY, &opts) {
                Err(f) if crate::verify::ignored_failure(&f.message) => {}
                Err(f) => return Err(format!("{}: {}", where_(), f.message)),
                Ok(v) => {
                    if !allow.iter().any(|&i| rec.expected_key(i) == v.tree_key) {
                        return Err(format!("{}: {}", where_(), mismatch(&rec, &allow, &v.tree)));
                    }
                }
            }
        }
    }
    Ok(())
}

/// `fuzz-input image|ops FILE...`: run saved inputs (e.g. what cargo-fuzz
/// wrote to `fuzz/artifacts`).
pub fn run_files(args: &[String]) -> i32 {
    let Some((target, files)) = args.split_first() else {
        eprintln!("usage: fuzz-input image|ops FILE...");
        return 2;
    };
    let mut bad = 0;
    for f in files {
        let data = match std::fs::read(f) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{f}: {e}");
                return 2;
            }
        };
        let r = match target.as_str() {
            "image" => quiet::catch(|| fuzz_image(&data)).map_err(|e| e.to_string()),
            "ops" => check_ops(&data),
            _ => {
                eprintln!("unknown target {target:?} (image or ops)");
                return 2;
            }
        };
        match r {
            Ok(()) => println!("{f}: ok"),
            Err(m) => {
                bad += 1;
                println!("{f}: FAIL: {m}");
            }
        }
    }
    i32::from(bad > 0)
}
