//! Multi-threaded stress on one shared file system, then a clean remount and
//! a crash remount.
//!
//! What this proves: four threads sharing one `Arc<Session>`, each running
//! a seeded random mix of operations for a bounded count, never see a
//! wrong byte or a wrong name, and leave a pool that fsck finds clean and
//! that comes back identical after a clean unmount and after a crash:
//! - private trees `/tN`: create, write random ranges, append, read back and
//!   compare with the thread's own shadow copy, truncate, fallocate, rename
//!   (within a directory, across its own directories, over an existing
//!   name, exchange), link, unlink, mkdir, rmdir, directory rename, stat;
//! - shared objects: every thread writes (aligned and unaligned) its own
//!   4 KiB slots of one shared file and checks them; all threads create,
//!   unlink, link, rename (plain, no-replace, exchange) and list the same
//!   names in one shared directory (EEXIST/ENOENT tolerated, listings must
//!   never repeat a name); threads move their own files and directories in
//!   and out of shared directories (cross-directory renames racing with
//!   everything else) and check nothing was lost on the way;
//! - after the threads join: every shadow matches, fsck is clean, the whole
//!   tree is recorded; then either a clean unmount + remount (no recovery
//!   needed) or a crash (the `Ferrite` dropped without unmount, with
//!   unlinked files still open) + recovering mount gives the same tree, the
//!   same contents, a clean fsck, and orphans freed.
//!
//! - the same on a buffered mount, its persister thread running: the pool
//!   as it stands when the threads join is a clean file system, a clean
//!   unmount drains everything, and a sync followed by a crash keeps
//!   everything (orphans freed at recovery).
//!
//! Replay: `FERRITE_SEED=<seed>` (printed), `FERRITE_STRESS_OPS=<n>` to
//! change the number of operations per thread.

use ferrite::{
    BufferedOptions, Errno, FallocateMode, FileType, FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags,
    Session,
};
use ferrite_pmem::Pmem;
use ferrite_tests::{diff_trees, get, remount_as, seed_from_env, splitmix64, tree_of, Tree};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

const THREADS: usize = 4;
const SLOTS: u64 = 8;
const SLOT: u64 = 4096;
const SHARED_NAMES: u32 = 16;
const MAX_FILE: u64 = 64 * 1024;
/// Names per thread at most (so that the pool never fills up: a long run
/// then also shows that log pages are collected and nothing leaks).
const MAX_FILES: usize = 48;
const POOL_PAGES: u64 = 16384;
/// Only a deadlock detector: the run takes seconds.
const STALL: Duration = Duration::from_secs(240);

fn ops_per_thread() -> usize {
    std::env::var("FERRITE_STRESS_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000)
}

/// What one thread believes its private tree holds.
#[derive(Default, Clone)]
struct Shadow {
    /// Path of every name -> file id (hard links share an id).
    names: BTreeMap<String, u64>,
    contents: HashMap<u64, Vec<u8>>,
    /// Private subdirectories (full paths), one level below `/tN`.
    dirs: BTreeSet<String>,
    /// Contents of this thread's slots of the shared file.
    slots: Vec<Vec<u8>>,
    next: u64,
}

impl Shadow {
    fn names_of(&self, id: u64) -> usize {
        self.names.values().filter(|&&i| i == id).count()
    }

    fn remove_name(&mut self, path: &str) {
        if let Some(id) = self.names.remove(path) {
            if self.names_of(id) == 0 {
                self.contents.remove(&id);
            }
        }
    }

    fn files_under(&self, dir: &str) -> usize {
        let prefix = format!("{dir}/");
        self.names.keys().filter(|p| p.starts_with(&prefix)).count()
    }
}

struct Worker {
    fs: Arc<Session>,
    t: usize,
    root: String,
    rng: ChaCha8Rng,
    sh: Shadow,
    op: usize,
    seed: u64,
    counts: BTreeMap<&'static str, u64>,
}

fn fill(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

impl Worker {
    fn fail(&self, what: String) -> ! {
        panic!("thread {} op {} (seed {:#x}): {what}", self.t, self.op, self.seed)
    }

    fn ok<T>(&self, r: Result<T, Errno>, what: impl FnOnce() -> String) -> T {
        match r {
            Ok(v) => v,
            Err(e) => self.fail(format!("{}: unexpected {e:?}", what())),
        }
    }

    fn pick_file(&mut self) -> Option<String> {
        if self.sh.names.is_empty() {
            return None;
        }
        let i = self.rng.gen_range(0..self.sh.names.len());
        self.sh.names.keys().nth(i).cloned()
    }

    fn pick_dir(&mut self) -> String {
        let n = self.sh.dirs.len();
        if n == 0 || self.rng.gen_bool(0.4) {
            return self.root.clone();
        }
        let i = self.rng.gen_range(0..n);
        self.sh.dirs.iter().nth(i).cloned().expect("index in range")
    }

    fn new_name(&mut self, dir: &str, prefix: &str) -> String {
        self.sh.next += 1;
        format!("{dir}/{prefix}{}", self.sh.next)
    }

    fn verify_file(&self, path: &str) {
        let id = self.sh.names[path];
        let want = &self.sh.contents[&id];
        let got = self.ok(get(&*self.fs, path.as_bytes()), || format!("read {path}"));
        if &got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b);
            self.fail(format!(
                "{path}: content differs from the shadow (length {} vs {}, first difference at {at:?})",
                got.len(),
                want.len()
            ));
        }
        let st = self.ok(self.fs.stat(path.as_bytes()), || format!("stat {path}"));
        if st.size != want.len() as u64 || st.nlink as usize != self.sh.names_of(id) {
            self.fail(format!(
                "{path}: stat says size {} nlink {}, shadow says {} and {}",
                st.size,
                st.nlink,
                want.len(),
                self.sh.names_of(id)
            ));
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    fn step(&mut self) {
        let fs = self.fs.clone();
        let r = self.rng.gen_range(0..100);
        match r {
            0..=9 => {
                if self.sh.names.len() >= MAX_FILES {
                    // Keep the pool from filling up: remove one instead.
                    let Some(path) = self.pick_file() else { return };
                    self.count("unlink");
                    self.ok(fs.unlink(path.as_bytes()), || format!("unlink {path}"));
                    self.sh.remove_name(&path);
                    return;
                }
                self.count("create");
                let dir = self.pick_dir();
                let path = self.new_name(&dir, "f");
                let fd = self
                    .ok(fs.open(path.as_bytes(), OpenFlags::RDWR.create().excl(), 0o644), || format!("create {path}"));
                let len = self.rng.gen_range(0..9000);
                let data = fill(&mut self.rng, len);
                if len > 0 {
                    self.ok(fs.pwrite(fd, &data, 0), || format!("write {path}"));
                }
                self.ok(fs.close(fd), || "close".into());
                let id = self.sh.next;
                self.sh.names.insert(path, id);
                self.sh.contents.insert(id, data);
            }
            10..=27 => {
                self.count("write");
                let Some(path) = self.pick_file() else { return };
                let fd = self.ok(fs.open(path.as_bytes(), OpenFlags::RDWR, 0), || format!("open {path}"));
                for _ in 0..self.rng.gen_range(1..4) {
                    let at = self.rng.gen_range(0..MAX_FILE - 16 * 1024);
                    let len = self.rng.gen_range(1..12 * 1024) as usize;
                    let data = fill(&mut self.rng, len);
                    let n = self.ok(fs.pwrite(fd, &data, at), || format!("pwrite {path}"));
                    assert_eq!(n, len);
                    let c = self.sh.contents.get_mut(&self.sh.names[&path]).expect("shadow content");
                    let end = at as usize + len;
                    if c.len() < end {
                        c.resize(end, 0);
                    }
                    c[at as usize..end].copy_from_slice(&data);
                }
                if self.rng.gen_bool(0.2) {
                    self.ok(fs.fsync(fd), || "fsync".into());
                }
                self.ok(fs.close(fd), || "close".into());
            }
            28..=31 => {
                self.count("append");
                let Some(path) = self.pick_file() else { return };
                let id = self.sh.names[&path];
                if self.sh.contents[&id].len() as u64 > MAX_FILE {
                    return;
                }
                let fd = self.ok(fs.open(path.as_bytes(), OpenFlags::WRONLY.append(), 0), || format!("open {path}"));
                let len = self.rng.gen_range(1..5000);
                let data = fill(&mut self.rng, len);
                self.ok(fs.write(fd, &data), || format!("append {path}"));
                self.ok(fs.close(fd), || "close".into());
                self.sh.contents.get_mut(&id).expect("shadow").extend_from_slice(&data);
            }
            32..=43 => {
                self.count("read+verify");
                let Some(path) = self.pick_file() else { return };
                self.verify_file(&path);
                // And a random range through pread.
                let id = self.sh.names[&path];
                let want = self.sh.contents[&id].clone();
                let fd = self.ok(fs.open(path.as_bytes(), OpenFlags::RDONLY, 0), || format!("open {path}"));
                let at = self.rng.gen_range(0..want.len() as u64 + 100);
                let mut buf = vec![0u8; self.rng.gen_range(1..10_000)];
                let n = self.ok(fs.pread(fd, &mut buf, at), || format!("pread {path}"));
                let lo = (at as usize).min(want.len());
                let hi = (lo + buf.len()).min(want.len());
                if buf[..n] != want[lo..hi] {
                    self.fail(format!("{path}: pread of {} at {at} differs", buf.len()));
                }
                self.ok(fs.close(fd), || "close".into());
            }
            44..=49 => {
                self.count("truncate");
                let Some(path) = self.pick_file() else { return };
                let size = self.rng.gen_range(0..MAX_FILE);
                if self.rng.gen_bool(0.5) {
                    self.ok(fs.truncate(path.as_bytes(), size), || format!("truncate {path}"));
                } else {
                    let fd = self.ok(fs.open(path.as_bytes(), OpenFlags::WRONLY, 0), || format!("open {path}"));
                    self.ok(fs.ftruncate(fd, size), || format!("ftruncate {path}"));
                    self.ok(fs.close(fd), || "close".into());
                }
                let id = self.sh.names[&path];
                self.sh.contents.get_mut(&id).expect("shadow").resize(size as usize, 0);
            }
            50..=52 => {
                self.count("fallocate");
                let Some(path) = self.pick_file() else { return };
                let fd = self.ok(fs.open(path.as_bytes(), OpenFlags::RDWR, 0), || format!("open {path}"));
                let at = self.rng.gen_range(0..MAX_FILE);
                let len = self.rng.gen_range(1..16_384);
                let mode = FallocateMode::ALL[self.rng.gen_range(0..FallocateMode::ALL.len())];
                self.ok(fs.fallocate(fd, mode, at, len), || format!("fallocate {path}"));
                self.ok(fs.close(fd), || "close".into());
                let c = self.sh.contents.get_mut(&self.sh.names[&path]).expect("shadow");
                match mode {
                    FallocateMode::Default if c.len() < (at + len) as usize => c.resize((at + len) as usize, 0),
                    FallocateMode::PunchHole | FallocateMode::ZeroRangeKeepSize if (at as usize) < c.len() => {
                        let end = ((at + len) as usize).min(c.len());
                        c[at as usize..end].fill(0);
                    }
                    FallocateMode::ZeroRange => {
                        let end = (at + len) as usize;
                        if c.len() < end {
                            c.resize(end, 0);
                        }
                        c[at as usize..end].fill(0);
                    }
                    _ => {}
                }
            }
            53..=58 => {
                self.count("rename");
                let Some(from) = self.pick_file() else { return };
                let exchange = self.rng.gen_bool(0.15);
                let to = if exchange || self.rng.gen_bool(0.3) {
                    match self.pick_file() {
                        Some(t) => t,
                        None => return,
                    }
                } else {
                    let d = self.pick_dir();
                    self.new_name(&d, "r")
                };
                let flags = if exchange { RenameFlags::Exchange } else { RenameFlags::Replace };
                self.ok(fs.rename(from.as_bytes(), to.as_bytes(), flags), || format!("rename {from} {to} {flags:?}"));
                let id = self.sh.names[&from];
                match (flags, self.sh.names.get(&to).copied()) {
                    (_, Some(t)) if t == id => {} // two names of one file: nothing changes
                    (RenameFlags::Exchange, Some(t)) => {
                        self.sh.names.insert(from.clone(), t);
                        self.sh.names.insert(to.clone(), id);
                    }
                    _ => {
                        self.sh.remove_name(&to);
                        self.sh.names.remove(&from);
                        self.sh.names.insert(to.clone(), id);
                    }
                }
                if self.rng.gen_bool(0.3) {
                    self.verify_file(&to);
                }
            }
            59..=62 => {
                self.count("unlink");
                let Some(path) = self.pick_file() else { return };
                self.ok(fs.unlink(path.as_bytes()), || format!("unlink {path}"));
                self.sh.remove_name(&path);
                if fs.lstat(path.as_bytes()) != Err(Errno::ENOENT) {
                    self.fail(format!("{path} still there after unlink"));
                }
            }
            63..=65 => {
                self.count("link");
                if self.sh.names.len() >= MAX_FILES {
                    return;
                }
                let Some(path) = self.pick_file() else { return };
                let d = self.pick_dir();
                let to = self.new_name(&d, "l");
                self.ok(fs.link(path.as_bytes(), to.as_bytes()), || format!("link {path} {to}"));
                let id = self.sh.names[&path];
                self.sh.names.insert(to.clone(), id);
                self.verify_file(&to);
            }
            66..=68 => {
                self.count("mkdir");
                if self.sh.dirs.len() >= 6 {
                    return;
                }
                let root = self.root.clone();
                let d = self.new_name(&root, "d");
                self.ok(fs.mkdir(d.as_bytes(), 0o755), || format!("mkdir {d}"));
                self.sh.dirs.insert(d);
            }
            69..=70 => {
                self.count("rmdir");
                let d = self.pick_dir();
                if d == self.root {
                    return;
                }
                let r = fs.rmdir(d.as_bytes());
                if self.sh.files_under(&d) > 0 {
                    if r != Err(Errno::ENOTEMPTY) {
                        self.fail(format!("rmdir of non-empty {d}: {r:?}"));
                    }
                } else {
                    self.ok(r, || format!("rmdir {d}"));
                    self.sh.dirs.remove(&d);
                }
            }
            71 => {
                self.count("rename dir");
                let d = self.pick_dir();
                if d == self.root {
                    return;
                }
                let root = self.root.clone();
                let to = self.new_name(&root, "d");
                self.ok(fs.rename(d.as_bytes(), to.as_bytes(), RenameFlags::Replace), || {
                    format!("rename dir {d} {to}")
                });
                self.move_dir_in_shadow(&d, &to);
            }
            72..=79 => {
                self.count("shared slot");
                let k = self.rng.gen_range(0..SLOTS);
                let slot = self.t as u64 * SLOTS + k;
                let fd = self.ok(fs.open(b"/shared/big", OpenFlags::RDWR, 0), || "open /shared/big".into());
                if k < SLOTS / 2 {
                    // Whole-slot, self-describing writes, that every other
                    // thread may check at any time.
                    self.sh.next += 1;
                    let data = slot_image(self.t as u64, slot, self.sh.next);
                    self.ok(fs.pwrite(fd, &data, slot * SLOT), || "pwrite slot".into());
                    self.sh.slots[k as usize] = data;
                } else {
                    // Unaligned writes inside the slot (the page is copied
                    // around them), checked by this thread only.
                    let a = self.rng.gen_range(0..SLOT as usize - 1);
                    let b = self.rng.gen_range(a + 1..=SLOT as usize);
                    let data = fill(&mut self.rng, b - a);
                    self.ok(fs.pwrite(fd, &data, slot * SLOT + a as u64), || "pwrite in slot".into());
                    self.sh.slots[k as usize][a..b].copy_from_slice(&data);
                }
                if self.rng.gen_bool(0.3) {
                    self.verify_slots(fd);
                }
                // Another thread's self-describing slots: each is a whole
                // version (zeros or one complete write), never a mixture.
                let other = (self.t + self.rng.gen_range(1..THREADS)) % THREADS;
                let slot = other as u64 * SLOTS + self.rng.gen_range(0..SLOTS / 2);
                let mut buf = vec![0u8; SLOT as usize];
                self.ok(fs.pread(fd, &mut buf, slot * SLOT), || "pread slot".into());
                if !slot_is_whole(&buf, other as u64, slot) {
                    self.fail(format!("slot {slot} of thread {other} read torn"));
                }
                self.ok(fs.close(fd), || "close".into());
            }
            80..=89 => {
                self.count("shared names");
                self.shared_names_op();
            }
            90..=93 => {
                self.count("cross-dir file move");
                let Some(path) = self.pick_file() else { return };
                let away = format!("/shared/names/t{}_{}", self.t, self.sh.next);
                self.sh.next += 1;
                self.ok(fs.rename(path.as_bytes(), away.as_bytes(), RenameFlags::NoReplace), || {
                    format!("move {path} out")
                });
                let id = self.sh.names[&path];
                let got = self.ok(get(&*fs, away.as_bytes()), || format!("read {away}"));
                if got != self.sh.contents[&id] {
                    self.fail(format!("{path} moved to {away} lost its content"));
                }
                self.ok(fs.rename(away.as_bytes(), path.as_bytes(), RenameFlags::NoReplace), || {
                    format!("move {away} back")
                });
                self.verify_file(&path);
            }
            94..=95 => {
                self.count("cross-dir dir move");
                let d = self.pick_dir();
                if d == self.root {
                    return;
                }
                let away = format!("/shared/dirs/t{}_{}", self.t, self.sh.next);
                self.sh.next += 1;
                self.ok(fs.rename(d.as_bytes(), away.as_bytes(), RenameFlags::Replace), || format!("move dir {d} out"));
                // Its files travel with it.
                let inside: Vec<String> =
                    self.sh.names.keys().filter(|p| p.starts_with(&format!("{d}/"))).cloned().collect();
                for p in inside.iter().take(3) {
                    let there = format!("{away}{}", &p[d.len()..]);
                    let got = self.ok(get(&*fs, there.as_bytes()), || format!("read {there}"));
                    if got != self.sh.contents[&self.sh.names[p]] {
                        self.fail(format!("{there} differs after its directory moved"));
                    }
                }
                let back = {
                    let root = self.root.clone();
                    self.new_name(&root, "d")
                };
                self.ok(fs.rename(away.as_bytes(), back.as_bytes(), RenameFlags::NoReplace), || {
                    format!("move dir {away} back")
                });
                self.move_dir_in_shadow(&d, &back);
            }
            _ => {
                self.count("stat+readdir own");
                let d = self.pick_dir();
                let names = self.ok(list(&*fs, &d), || format!("list {d}"));
                let want: BTreeSet<String> = self
                    .sh
                    .names
                    .keys()
                    .chain(self.sh.dirs.iter())
                    .filter(|p| parent(p) == d)
                    .map(|p| p[d.len() + 1..].to_string())
                    .collect();
                if names != want {
                    self.fail(format!("listing of {d}: {names:?}, shadow {want:?}"));
                }
            }
        }
    }

    fn move_dir_in_shadow(&mut self, from: &str, to: &str) {
        let moved: Vec<(String, u64)> = self
            .sh
            .names
            .iter()
            .filter(|(p, _)| p.starts_with(&format!("{from}/")))
            .map(|(p, &id)| (p.clone(), id))
            .collect();
        for (p, id) in moved {
            self.sh.names.remove(&p);
            self.sh.names.insert(format!("{to}{}", &p[from.len()..]), id);
        }
        self.sh.dirs.remove(from);
        self.sh.dirs.insert(to.to_string());
    }

    fn verify_slots(&self, fd: ferrite::Fd) {
        for k in 0..SLOTS {
            let slot = self.t as u64 * SLOTS + k;
            let mut buf = vec![0u8; SLOT as usize];
            let n = self.ok(self.fs.pread(fd, &mut buf, slot * SLOT), || "pread slot".into());
            if n != SLOT as usize || buf != self.sh.slots[k as usize] {
                self.fail(format!("shared slot {slot} differs from what thread wrote"));
            }
        }
    }

    /// One racing operation on the shared directory's names n0..n15.
    fn shared_names_op(&mut self) {
        let fs = self.fs.clone();
        let name = |i: u32| format!("/shared/names/n{i}");
        let a = name(self.rng.gen_range(0..SHARED_NAMES));
        let b = name(self.rng.gen_range(0..SHARED_NAMES));
        let which = self.rng.gen_range(0..9);
        let tolerate = |r: Result<(), Errno>, allowed: &[Errno], what: &str| {
            if let Err(e) = r {
                if !allowed.contains(&e) {
                    self.fail(format!("{what}: unexpected {e:?}"));
                }
            }
        };
        use Errno as E;
        match which {
            0 => {
                let r = fs.open(a.as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644).and_then(|fd| {
                    let w = fs.pwrite(fd, a.as_bytes(), 0).map(|_| ());
                    fs.close(fd).and(w)
                });
                // A racing unlink may remove it between open and write: the
                // descriptor still works, so no error is expected there.
                tolerate(r, &[E::EEXIST], &format!("create {a}"));
            }
            1 => tolerate(fs.unlink(a.as_bytes()), &[E::ENOENT], &format!("unlink {a}")),
            2 => tolerate(
                fs.rename(a.as_bytes(), b.as_bytes(), RenameFlags::Replace),
                &[E::ENOENT],
                &format!("rename {a} {b}"),
            ),
            3 => tolerate(
                fs.rename(a.as_bytes(), b.as_bytes(), RenameFlags::NoReplace),
                &[E::ENOENT, E::EEXIST],
                &format!("rename noreplace {a} {b}"),
            ),
            4 => tolerate(
                fs.rename(a.as_bytes(), b.as_bytes(), RenameFlags::Exchange),
                &[E::ENOENT],
                &format!("exchange {a} {b}"),
            ),
            5 => tolerate(fs.link(a.as_bytes(), b.as_bytes()), &[E::ENOENT, E::EEXIST], &format!("link {a} {b}")),
            6 => {
                let r = fs.open(a.as_bytes(), OpenFlags::RDWR, 0).and_then(|fd| {
                    let w = fs.pwrite(fd, &[self.t as u8; 100], 50).map(|_| ());
                    fs.close(fd).and(w)
                });
                tolerate(r, &[E::ENOENT], &format!("write {a}"));
            }
            7 => match fs.stat(a.as_bytes()) {
                Ok(st) if st.kind != FileType::Regular => self.fail(format!("{a} is a {:?}", st.kind)),
                Ok(_) | Err(E::ENOENT) => {}
                Err(e) => self.fail(format!("stat {a}: {e:?}")),
            },
            _ => {
                if let Err(e) = list_with(&*fs, "/shared/names", false) {
                    self.fail(format!("listing /shared/names: {e:?}"));
                }
            }
        }
    }
}

/// A slot's content for one write: (thread, slot, version), then bytes
/// derived from them.
fn slot_image(t: u64, slot: u64, version: u64) -> Vec<u8> {
    let mut v = ferrite_tests::pattern(splitmix64(t << 40 ^ slot << 20 ^ version), SLOT as usize);
    v[..8].copy_from_slice(&t.to_le_bytes());
    v[8..16].copy_from_slice(&slot.to_le_bytes());
    v[16..24].copy_from_slice(&version.to_le_bytes());
    v
}

/// Is `buf` all zeros, or exactly one version that thread `t` wrote?
fn slot_is_whole(buf: &[u8], t: u64, slot: u64) -> bool {
    if buf.iter().all(|&b| b == 0) {
        return true;
    }
    let version = u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes"));
    buf == slot_image(t, slot, version).as_slice()
}

fn parent(p: &str) -> &str {
    &p[..p.rfind('/').expect("absolute path")]
}

/// The names in a directory; a repeated name is an error (ECORRUPT).
fn list(fs: &dyn PathFs, dir: &str) -> Result<BTreeSet<String>, Errno> {
    list_with(fs, dir, true)
}

/// The names in a directory. With `strict`, a name returned twice is an
/// error (ECORRUPT); without (a directory others change meanwhile), a name
/// removed and added again during the listing may legitimately come back
/// with a new cookie, so only termination and well-formed names count.
fn list_with(fs: &dyn PathFs, dir: &str, strict: bool) -> Result<BTreeSet<String>, Errno> {
    let fd = fs.open(dir.as_bytes(), OpenFlags::RDONLY.directory(), 0)?;
    let mut out = BTreeSet::new();
    let mut cookie = 0;
    let r = loop {
        let batch = match fs.readdir(fd, cookie, 7) {
            Ok(b) => b,
            Err(e) => break Err(e),
        };
        let Some(last) = batch.last() else {
            break Ok(());
        };
        if last.next_cookie <= cookie {
            break Err(Errno::ECORRUPT); // no progress
        }
        cookie = last.next_cookie;
        let mut bad = false;
        for e in batch {
            bad |= e.name.is_empty() || e.name.contains(&b'/');
            bad |= !out.insert(String::from_utf8_lossy(&e.name).to_string()) && strict;
        }
        if bad {
            break Err(Errno::ECORRUPT);
        }
    };
    fs.close(fd)?;
    r.map(|_| out)
}

fn setup(fs: &Session) {
    for t in 0..THREADS {
        fs.mkdir(format!("/t{t}").as_bytes(), 0o755).unwrap();
    }
    fs.mkdir(b"/shared", 0o755).unwrap();
    fs.mkdir(b"/shared/names", 0o777).unwrap();
    fs.mkdir(b"/shared/dirs", 0o777).unwrap();
    let fd = fs.open(b"/shared/big", OpenFlags::RDWR.create(), 0o666).unwrap();
    fs.ftruncate(fd, THREADS as u64 * SLOTS * SLOT).unwrap();
    fs.close(fd).unwrap();
}

/// Check every thread's private tree and slots against its shadow, and the
/// shared directories for sanity.
fn verify_all(fs: &Session, shadows: &[Shadow], when: &str) {
    for (t, sh) in shadows.iter().enumerate() {
        let root = format!("/t{t}");
        // Exactly the names of the shadow, nothing more.
        let mut seen_files = BTreeSet::new();
        let mut seen_dirs = BTreeSet::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for n in list(fs, &d).unwrap_or_else(|e| panic!("{when}: list {d}: {e:?}")) {
                let p = format!("{d}/{n}");
                let st = fs.lstat(p.as_bytes()).unwrap();
                if st.kind == FileType::Directory {
                    seen_dirs.insert(p.clone());
                    stack.push(p);
                } else {
                    seen_files.insert(p);
                }
            }
        }
        let want_files: BTreeSet<String> = sh.names.keys().cloned().collect();
        assert_eq!(seen_files, want_files, "{when}: files of thread {t}");
        assert_eq!(seen_dirs, sh.dirs, "{when}: directories of thread {t}");
        let mut ino_of_id: HashMap<u64, ferrite::InodeNo> = HashMap::new();
        for (p, id) in &sh.names {
            let got = get(fs, p.as_bytes()).unwrap_or_else(|e| panic!("{when}: read {p}: {e:?}"));
            assert!(
                got == sh.contents[id],
                "{when}: {p}: content differs from the shadow (length {} vs {})",
                got.len(),
                sh.contents[id].len()
            );
            let st = fs.stat(p.as_bytes()).unwrap();
            assert_eq!(st.nlink as usize, sh.names_of(*id), "{when}: nlink of {p}");
            let ino = *ino_of_id.entry(*id).or_insert(st.ino);
            assert_eq!(ino, st.ino, "{when}: {p} is not the same file as its other names");
        }
        let fd = fs.open(b"/shared/big", OpenFlags::RDONLY, 0).unwrap();
        for k in 0..SLOTS {
            let slot = t as u64 * SLOTS + k;
            let mut buf = vec![0u8; SLOT as usize];
            fs.pread(fd, &mut buf, slot * SLOT).unwrap();
            assert!(buf == sh.slots[k as usize], "{when}: shared slot {slot} of thread {t} differs");
        }
        fs.close(fd).unwrap();
    }
    let names = list(fs, "/shared/names").unwrap_or_else(|e| panic!("{when}: {e:?}"));
    for n in &names {
        let st = fs.lstat(format!("/shared/names/{n}").as_bytes()).unwrap();
        assert_eq!(st.kind, FileType::Regular, "{when}: /shared/names/{n}");
    }
    let dirs = list(fs, "/shared/dirs").unwrap_or_else(|e| panic!("{when}: {e:?}"));
    assert!(dirs.is_empty(), "{when}: /shared/dirs still holds {dirs:?}");
}

fn fsck_clean(image: &[u8], when: &str) {
    let r =
        ferrite::fsck::check(&Pmem::from_image(image)).unwrap_or_else(|e| panic!("{when}: fsck refused the pool: {e}"));
    assert!(r.is_clean(), "{when}: fsck:\n{r}");
}

fn mount(image: &[u8]) -> Session {
    Session::mount(Pmem::from_image(image), &MountOptions::default()).expect("mount")
}

fn expect_same_tree(before: &Tree, fs: &Session, when: &str) {
    let after = tree_of(fs).unwrap_or_else(|e| panic!("{when}: tree walk: {e:?}"));
    let d = diff_trees(before, &after);
    assert!(d.is_empty(), "{when}: the tree changed:\n{d}");
}

/// Run the workload, on a strict mount or on a buffered one (its persister
/// thread running with the default bounds); returns the file system and
/// every thread's shadow.
fn workload(seed: u64, buffered: bool) -> (Arc<Session>, Vec<Shadow>) {
    let fs = Session::format(Pmem::heap(POOL_PAGES * 4096), &FormatOptions { lanes: 4, ..Default::default() })
        .expect("format");
    let fs = if buffered {
        remount_as(fs, false, &MountOptions { buffered: Some(BufferedOptions::default()), ..Default::default() }).0
    } else {
        fs
    };
    setup(&fs);
    let fs = Arc::new(fs);
    let n = ops_per_thread();
    let started = Instant::now();
    let barrier = Arc::new(Barrier::new(THREADS));
    let (tx, rx) = mpsc::channel();
    for t in 0..THREADS {
        let fs = fs.clone();
        let barrier = barrier.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut w = Worker {
                    fs,
                    t,
                    root: format!("/t{t}"),
                    rng: ChaCha8Rng::seed_from_u64(splitmix64(seed ^ (t as u64 + 1))),
                    sh: Shadow { slots: vec![vec![0u8; SLOT as usize]; SLOTS as usize], ..Shadow::default() },
                    op: 0,
                    seed,
                    counts: BTreeMap::new(),
                };
                barrier.wait();
                for i in 0..n {
                    w.op = i;
                    w.step();
                }
                (w.sh, w.counts)
            }));
            let _ = tx.send((t, r));
        });
    }
    drop(tx);
    let mut shadows = vec![Shadow::default(); THREADS];
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for _ in 0..THREADS {
        match rx.recv_timeout(STALL) {
            Ok((t, Ok((sh, c)))) => {
                shadows[t] = sh;
                for (k, v) in c {
                    *counts.entry(k).or_default() += v;
                }
            }
            Ok((t, Err(p))) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("thread {t}: {msg}"));
            }
            Err(_) => {
                panic!("stress (seed {seed:#x}): threads made no progress for {STALL:?}: deadlock?")
            }
        }
    }
    assert!(failures.is_empty(), "stress (seed {seed:#x}, replay: FERRITE_SEED={seed:#x}):\n{}", failures.join("\n"));
    eprintln!("stress: {THREADS} threads x {n} ops in {:.1?}: {counts:?}", started.elapsed());
    (fs, shadows)
}

#[test]
fn stress_then_clean_remount() {
    let seed = seed_from_env("FERRITE_SEED", "stress_then_clean_remount", 0x5EED_0001);
    then_clean_remount(seed, false);
}

#[test]
fn stress_then_crash_and_recover() {
    let seed = seed_from_env("FERRITE_SEED", "stress_then_crash_and_recover", 0x5EED_0002);
    then_crash_and_recover(seed, false);
}

/// The same four threads on a buffered mount, with its persister thread
/// taking the queue from them all along. The pool as it stands when they
/// join is a crash image, and must be a clean file system (a prefix of
/// the operations); a clean unmount drains the queue, and the remounted
/// pool (strict) holds exactly what the threads left.
#[test]
fn buffered_stress_then_clean_remount() {
    let seed = seed_from_env("FERRITE_SEED", "buffered_stress_then_clean_remount", 0x5EED_0004);
    then_clean_remount(seed, true);
}

/// Buffered, then a sync and a crash: everything that returned before the
/// sync is in the recovered pool, unlinked files still open at the crash
/// included (freed at recovery).
#[test]
fn buffered_stress_then_sync_and_crash() {
    let seed = seed_from_env("FERRITE_SEED", "buffered_stress_then_sync_and_crash", 0x5EED_0005);
    then_crash_and_recover(seed, true);
}

fn mode_name(buffered: bool) -> &'static str {
    if buffered {
        "buffered, "
    } else {
        ""
    }
}

/// The workload, then a clean unmount and a mount that needs no recovery.
fn then_clean_remount(seed: u64, buffered: bool) {
    let mode = mode_name(buffered);
    let (fs, shadows) = workload(seed, buffered);
    let when = format!("{mode}after the threads joined (seed {seed:#x})");
    verify_all(&fs, &shadows, &when);
    // On a buffered mount the pool as it stands is some prefix of the
    // operations, and that too is a clean file system. It is copied with
    // the persister held: a batch running during the copy would put parts
    // of two states into one image.
    fsck_clean(&fs.with_persister_held(|| fs.pmem().image()), &when);
    let tree = tree_of(&*fs).expect("tree");
    let fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("threads still hold the fs"));
    let pmem = fs.pmem().clone();
    fs.unmount().expect("unmount");
    let image = pmem.image();
    let when = format!("{mode}after a clean unmount (seed {seed:#x})");
    fsck_clean(&image, &when);
    let fs = mount(&image);
    assert!(!fs.mount_report().recovered, "{when}: the mount recovered");
    expect_same_tree(&tree, &fs, &when);
    verify_all(&fs, &shadows, &when);
}

/// The workload, then unlinked files left open (orphans) and other files
/// open, a sync on a buffered mount, and a crash: the recovered pool holds
/// the same tree, with the orphans freed.
fn then_crash_and_recover(seed: u64, buffered: bool) {
    let mode = mode_name(buffered);
    let (fs, shadows) = workload(seed, buffered);
    let when = format!("{mode}after the threads joined (seed {seed:#x})");
    verify_all(&fs, &shadows, &when);
    let mut open = Vec::new();
    for (t, sh) in shadows.iter().enumerate() {
        let p = format!("/t{t}/orphan");
        let fd = fs.open(p.as_bytes(), OpenFlags::RDWR.create().excl(), 0o644).unwrap();
        fs.pwrite(fd, &vec![t as u8; 20_000], 0).unwrap();
        fs.unlink(p.as_bytes()).unwrap();
        fs.pwrite(fd, &[1; 10], 30_000).unwrap();
        open.push(fd);
        if let Some(p) = sh.names.keys().next() {
            open.push(fs.open(p.as_bytes(), OpenFlags::RDWR, 0).unwrap());
        }
    }
    if buffered {
        fs.sync_all().expect("sync");
    }
    let free_with_orphans = fs.free_pages();
    let tree = tree_of(&*fs).expect("tree");
    let fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("threads still hold the fs"));
    let pmem = fs.pmem().clone();
    drop(fs); // the crash: no unmount
    let image = pmem.image();
    let when = format!("{mode}after the crash (seed {seed:#x})");
    fsck_clean(&image, &when);
    let fs = mount(&image);
    let rep = fs.mount_report().clone();
    assert!(rep.recovered, "{when}: the mount did not recover");
    assert_eq!(rep.orphans_freed, THREADS as u64, "{when}: orphans freed at recovery");
    assert!(fs.free_pages() > free_with_orphans, "{when}: the orphans' pages were not freed");
    expect_same_tree(&tree, &fs, &when);
    verify_all(&fs, &shadows, &when);
    // And the recovered pool unmounts cleanly and comes back again.
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let image = pmem.image();
    let when = format!("{mode}after recovery and a clean unmount (seed {seed:#x})");
    fsck_clean(&image, &when);
    let fs = mount(&image);
    expect_same_tree(&tree, &fs, &when);
}

// ---------------------------------------------------------------------------
// Single-threaded log churn: garbage collection under every kind of entry.

/// What this adds: one thread hammers a few files and one directory with
/// small overwrites, truncates, fallocates, attribute changes, creates,
/// unlinks, links and renames, so that logs extend and garbage collection
/// runs again and again with every kind of entry (and pin) in play. Every
/// 40 operations the pool as it stands is recovered as a crash image (fsck
/// clean, same tree as the live file system); every 400 it is unmounted
/// cleanly and the run goes on on the remounted pool (logs rebuilt lazily).
/// Replay: `FERRITE_SEED=<seed>`; `FERRITE_CHURN_OPS=<n>` (default 6000).
#[test]
fn log_gc_churn_survives_remounts() {
    let seed = seed_from_env("FERRITE_SEED", "log_gc_churn_survives_remounts", 0x5EED_0003);
    let n: usize = std::env::var("FERRITE_CHURN_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(6000);
    let clock = ferrite_tests::manual_clock(1_000_000);
    let opts = MountOptions { clock: clock.clone(), recovery_threads: 2, ..Default::default() };
    let mut fs =
        Session::format(Pmem::heap(1024 * 4096), &FormatOptions { lanes: 1, inodes: Some(256), clock: clock.clone() })
            .expect("format");
    fs.mkdir(b"/d", 0o755).unwrap();
    for f in ["/f0", "/f1", "/f2"] {
        ferrite_tests::put(&fs, f.as_bytes(), b"").unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let started = Instant::now();
    let (mut crash_checks, mut remounts, mut collected) = (0, 0, 0);
    for i in 0..n {
        clock.advance_ns(1_000_003);
        churn_step(&fs, &mut rng);
        let when = || {
            format!("after churn op {i} (seed {seed:#x}, replay: FERRITE_SEED={seed:#x} FERRITE_CHURN_OPS={})", i + 1)
        };
        if i % 40 == 39 {
            crash_checks += 1;
            let tree = tree_of(&fs).unwrap_or_else(|e| panic!("{}: live tree: {e:?}", when()));
            let image = fs.pmem().image();
            fsck_clean(&image, &when());
            let fs2 = Session::mount(Pmem::from_image(&image), &opts)
                .unwrap_or_else(|e| panic!("{}: crash recovery: {e}", when()));
            expect_same_tree(&tree, &fs2, &format!("{}: crash recovery", when()));
        }
        if i % 400 == 399 {
            remounts += 1;
            collected += fs.gc_pages_collected();
            let tree = tree_of(&fs).unwrap_or_else(|e| panic!("{}: live tree: {e:?}", when()));
            let pmem = fs.pmem().clone();
            fs.unmount().unwrap();
            let image = pmem.image();
            fsck_clean(&image, &format!("{}: clean unmount", when()));
            fs = Session::mount(Pmem::from_image(&image), &opts)
                .unwrap_or_else(|e| panic!("{}: clean remount: {e}", when()));
            expect_same_tree(&tree, &fs, &format!("{}: clean remount", when()));
        }
    }
    eprintln!(
        "log churn: {n} ops, {crash_checks} crash recoveries, {remounts} clean remounts, {} log pages collected, {:.1?}",
        collected + fs.gc_pages_collected(),
        started.elapsed()
    );
}

/// One operation of the churn; errors (EEXIST, ENOENT, ENOTEMPTY...) are
/// part of the mix and change nothing.
fn churn_step(fs: &Session, rng: &mut ChaCha8Rng) {
    let f = format!("/f{}", rng.gen_range(0..3));
    let name = |rng: &mut ChaCha8Rng| {
        if rng.gen_bool(0.2) {
            format!("/d/s{}/n{}", rng.gen_range(0..3), rng.gen_range(0..6))
        } else {
            format!("/d/n{}", rng.gen_range(0..24))
        }
    };
    match rng.gen_range(0..100) {
        0..=24 => {
            let fd = fs.open(f.as_bytes(), OpenFlags::RDWR, 0).unwrap();
            let page = rng.gen_range(0..10u64);
            let at = page * 4096 + rng.gen_range(0..4096);
            let len = rng.gen_range(1..6000);
            let data = fill(rng, len);
            fs.pwrite(fd, &data, at).unwrap();
            fs.close(fd).unwrap();
        }
        25..=34 => {
            let size = rng.gen_range(0..45_000);
            fs.truncate(f.as_bytes(), size).unwrap();
        }
        35..=41 => {
            let fd = fs.open(f.as_bytes(), OpenFlags::RDWR, 0).unwrap();
            let mode = FallocateMode::ALL[rng.gen_range(0..FallocateMode::ALL.len())];
            let at = rng.gen_range(0..40_000);
            fs.fallocate(fd, mode, at, rng.gen_range(1..9000)).unwrap();
            fs.close(fd).unwrap();
        }
        42..=53 => {
            let target = if rng.gen_bool(0.7) { f.clone() } else { "/d".into() };
            fs.chmod(target.as_bytes(), rng.gen_range(0..0o777)).unwrap();
        }
        54..=57 => {
            let t = ferrite::TimeSpec { sec: rng.gen_range(0..1_000_000), nsec: 0 };
            fs.utimens(f.as_bytes(), ferrite::TimeSet::At(t), ferrite::TimeSet::Now).unwrap();
        }
        58..=69 => {
            let p = name(rng);
            if let Ok(fd) = fs.open(p.as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644) {
                if rng.gen_bool(0.3) {
                    let _ = fs.pwrite(fd, b"data", 0);
                }
                fs.close(fd).unwrap();
            }
        }
        70..=79 => {
            let _ = fs.unlink(name(rng).as_bytes());
        }
        80..=87 => {
            let flags = match rng.gen_range(0..3) {
                0 => RenameFlags::Replace,
                1 => RenameFlags::NoReplace,
                _ => RenameFlags::Exchange,
            };
            let (a, b) = (name(rng), name(rng));
            let _ = fs.rename(a.as_bytes(), b.as_bytes(), flags);
        }
        88..=91 => {
            let _ = fs.link(f.as_bytes(), name(rng).as_bytes());
        }
        92..=95 => {
            let _ = fs.mkdir(format!("/d/s{}", rng.gen_range(0..3)).as_bytes(), 0o755);
        }
        _ => {
            let _ = fs.rmdir(format!("/d/s{}", rng.gen_range(0..3)).as_bytes());
        }
    }
}
