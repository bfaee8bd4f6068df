//! The comparable tree view: ModelFs::tree and tree_of (through the PathFs
//! trait only) agree; link_group numbers hard links by first appearance and
//! ignores inode numbers; diff_trees names the path, field, expected and
//! got values (content: first differing offset and lengths) and stops after
//! 20 differences; tree_of rejects broken listings; snapshots, from_state
//! and restore round-trip the full state.

mod common;
use std::sync::Arc;

use common::*;
use ferrite::{
    DirEntry, FallocateMode, Fd, FileType, FsResult, OpenFlags, PathFs, RenameFlags, Stat, StatFs, TimeSet, TimeSpec,
    Whence,
};
use ferrite_model::{diff_trees, tree_of, ModelFs, ModelState, NodeView, Tree};

fn sample() -> ModelFs {
    let (fs, clock) = setup();
    fs.mkdir(p("/d"), 0o750).unwrap();
    clock.advance_ns(1_000_000_001);
    put(&fs, "/d/f", b"hello");
    fs.link(p("/d/f"), p("/z")).unwrap();
    fs.link(p("/d/f"), p("/a")).unwrap();
    put(&fs, "/solo", b"");
    put(&fs, "/b", b"bb");
    fs.link(p("/b"), p("/d/b2")).unwrap();
    fs.symlink(p("d/f"), p("/s")).unwrap();
    let fd = fs.open(p("/sparse"), rw_create(), 0o600).unwrap();
    fs.pwrite(fd, b"tail", 20_000).unwrap();
    fs.close(fd).unwrap();
    fs.chown(p("/b"), Some(3), Some(4)).unwrap();
    fs
}

#[test]
fn model_tree_contents() {
    let fs = sample();
    let t = fs.tree();
    let keys: Vec<String> = t.keys().map(|k| String::from_utf8(k.clone()).unwrap()).collect();
    assert_eq!(keys, ["/", "/a", "/b", "/d", "/d/b2", "/d/f", "/s", "/solo", "/sparse", "/z"]);
    let root = &t[&b"/".to_vec()];
    assert_eq!((root.kind, root.nlink, root.size, root.blocks), (FileType::Directory, 3, 4096, None));
    let f = &t[&b"/d/f".to_vec()];
    assert_eq!((f.content.as_slice(), f.nlink, f.blocks, f.size), (&b"hello"[..], 3, Some(8), 5));
    let s = &t[&b"/s".to_vec()];
    assert_eq!((s.kind, s.target.as_slice(), s.size, s.blocks), (FileType::Symlink, &b"d/f"[..], 3, Some(8)));
    let sp = &t[&b"/sparse".to_vec()];
    assert_eq!((sp.size, sp.blocks, sp.content.len()), (20_004, Some(8), 20_004));
    assert_eq!(&sp.content[20_000..], b"tail");
    let b = &t[&b"/b".to_vec()];
    assert_eq!((b.uid, b.gid), (3, 4));
}

#[test]
fn link_groups() {
    let fs = sample();
    let t = fs.tree();
    let g = |path: &str| t[&path.as_bytes().to_vec()].link_group;
    // First multi-path inode in path order: "/a" (the /d/f inode), then "/b".
    assert_eq!((g("/a"), g("/d/f"), g("/z")), (1, 1, 1));
    assert_eq!((g("/b"), g("/d/b2")), (2, 2));
    assert_eq!((g("/"), g("/d"), g("/solo"), g("/s"), g("/sparse")), (0, 0, 0, 0, 0));
    // Same tree built in another order (different inode numbers): equal.
    let (other, clock) = setup();
    put(&other, "/b", b"bb");
    other.chown(p("/b"), Some(3), Some(4)).unwrap();
    other.mkdir(p("/d"), 0o750).unwrap();
    other.symlink(p("d/f"), p("/s")).unwrap();
    put(&other, "/a", b"hello");
    put(&other, "/solo", b"");
    other.link(p("/a"), p("/d/f")).unwrap();
    other.link(p("/a"), p("/z")).unwrap();
    other.link(p("/b"), p("/d/b2")).unwrap();
    let fd = other.open(p("/sparse"), rw_create(), 0o600).unwrap();
    other.pwrite(fd, b"tail", 20_000).unwrap();
    let _ = clock;
    let mut t2 = other.tree();
    // Times differ (different clock history): align them to compare the rest.
    for (k, v) in t2.iter_mut() {
        let e = &t[k];
        (v.atime, v.mtime, v.ctime) = (e.atime, e.mtime, e.ctime);
    }
    assert_eq!(diff_trees(&t, &t2), "");
    assert_eq!(t, t2);
    assert_ne!(fs.stat(p("/a")).unwrap().ino, other.stat(p("/a")).unwrap().ino);
}

#[test]
fn tree_of_matches_model_tree() {
    let fs = sample();
    let fds_before = fs.snapshot().open_fds();
    let via_trait = tree_of(&fs).unwrap();
    assert_eq!(diff_trees(&fs.tree(), &via_trait), "");
    assert_eq!(via_trait, fs.tree());
    assert_eq!(fs.snapshot().open_fds(), fds_before, "tree_of closes what it opens");
    // Also on an empty fs and with an unlinked-but-open file (not in the tree).
    let (empty, _) = setup();
    assert_eq!(tree_of(&empty).unwrap(), empty.tree());
    assert_eq!(empty.tree().len(), 1);
    let fd = fs.open(p("/solo"), OpenFlags::RDONLY, 0).unwrap();
    fs.unlink(p("/solo")).unwrap();
    assert_eq!(tree_of(&fs).unwrap(), fs.tree());
    fs.close(fd).unwrap();
}

fn view(path: &str, t: &Tree) -> NodeView {
    t[&path.as_bytes().to_vec()].clone()
}

#[test]
fn diff_output() {
    let fs = sample();
    let expected = fs.tree();
    let mut got = expected.clone();
    got.get_mut(b"/b".as_slice()).unwrap().perm = 0o600;
    got.get_mut(b"/d/f".as_slice()).unwrap().content = b"helLo!".to_vec();
    got.get_mut(b"/s".as_slice()).unwrap().target = b"elsewhere".to_vec();
    got.get_mut(b"/z".as_slice()).unwrap().mtime = TimeSpec { sec: 5, nsec: 7 };
    got.remove(b"/solo".as_slice());
    got.insert(b"/extra\xff".to_vec(), view("/b", &expected));
    let d = diff_trees(&expected, &got);
    let lines: Vec<&str> = d.lines().collect();
    assert_eq!(lines.len(), 6, "{d}");
    assert!(lines.contains(&"/b: perm: expected 644, got 600"), "{d}");
    assert!(lines.contains(&"/extra\\xff: unexpected Regular"), "{d}");
    assert!(lines.contains(&"/solo: missing (expected a Regular)"), "{d}");
    assert!(lines.contains(&"/s: target: expected \"d/f\", got \"elsewhere\""), "{d}");
    assert!(lines.contains(&"/z: mtime: expected 1001.000000001, got 5.000000007"), "{d}");
    let content = lines.iter().find(|l| l.starts_with("/d/f: content")).unwrap();
    assert!(content.contains("offset 3"), "{content}");
    assert!(content.contains("expected length 5, got length 6"), "{content}");
    // Bounded: 20 lines and a count of the rest.
    let mut many = expected.clone();
    for i in 0..30 {
        many.insert(format!("/n{i:02}").into_bytes(), view("/b", &expected));
    }
    let d = diff_trees(&expected, &many);
    assert_eq!(d.lines().count(), 21, "{d}");
    assert!(d.ends_with("... and 10 more differences\n"), "{d}");
    assert_eq!(diff_trees(&expected, &expected), "");
}

#[test]
fn snapshot_and_restore() {
    let fs = sample();
    let clock = fs.clock().clone();
    let s1: ModelState = fs.snapshot();
    let fd = fs.open(p("/d/f"), OpenFlags::RDWR, 0).unwrap();
    fs.pwrite(fd, b"J", 0).unwrap();
    let s2 = fs.snapshot();
    assert_ne!(s1, s2);
    assert_eq!(get(&fs, "/d/f"), b"Jello");
    // A restored copy is independent: writing to it does not change s2.
    let copy = ModelFs::from_state(s2.clone(), clock);
    copy.pwrite(fd, b"M", 0).unwrap();
    assert_eq!(get(&copy, "/d/f"), b"Mello");
    assert_eq!(get(&fs, "/d/f"), b"Jello");
    assert_eq!(s2.tree()[&b"/d/f".to_vec()].content, b"Jello");
    fs.restore(s1.clone());
    assert_eq!(fs.snapshot(), s1);
    assert_eq!(get(&fs, "/d/f"), b"hello");
    // Debug output stays short (pages are fingerprinted).
    let dbg = format!("{:?}", fs.snapshot());
    assert!(dbg.contains("Page(nonzero="), "{dbg}");
    assert!(dbg.len() < 20_000);
    // without_open_files closes everything.
    let s3 = s2.without_open_files();
    assert!(s3.open_fds().is_empty());
    assert_eq!(s3.tree(), s2.tree());
}

#[test]
fn model_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ModelFs>();
    check::<ModelState>();
    let fs = Arc::new(sample());
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for j in 0..50 {
                    put(&fs, &format!("/t{i}_{j}"), b"x");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(fs.tree().len(), 10 + 200);
}

/// A PathFs that forwards to a model but lists one directory entry twice.
struct DupListing(ModelFs);

impl PathFs for DupListing {
    fn openat(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        self.0.openat(dirfd, path, flags, perm)
    }
    fn mkdirat(&self, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()> {
        self.0.mkdirat(dirfd, path, perm)
    }
    fn mknodat(&self, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        self.0.mknodat(dirfd, path, mode, rdev)
    }
    fn unlinkat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()> {
        self.0.unlinkat(dirfd, path, flags)
    }
    fn renameat2(&self, od: Fd, old: &[u8], nd: Fd, new: &[u8], flags: RenameFlags) -> FsResult<()> {
        self.0.renameat2(od, old, nd, new, flags)
    }
    fn linkat(&self, od: Fd, old: &[u8], nd: Fd, new: &[u8], flags: i32) -> FsResult<()> {
        self.0.linkat(od, old, nd, new, flags)
    }
    fn symlinkat(&self, target: &[u8], nd: Fd, linkpath: &[u8]) -> FsResult<()> {
        self.0.symlinkat(target, nd, linkpath)
    }
    fn readlinkat(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>> {
        self.0.readlinkat(dirfd, path)
    }
    fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
        self.0.fstatat(dirfd, path, flags)
    }
    fn fchmodat(&self, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()> {
        self.0.fchmodat(dirfd, path, perm, flags)
    }
    fn fchownat(&self, dirfd: Fd, path: &[u8], uid: Option<u32>, gid: Option<u32>, flags: i32) -> FsResult<()> {
        self.0.fchownat(dirfd, path, uid, gid, flags)
    }
    fn utimensat(&self, dirfd: Fd, path: &[u8], a: TimeSet, m: TimeSet, flags: i32) -> FsResult<()> {
        self.0.utimensat(dirfd, path, a, m, flags)
    }
    fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()> {
        self.0.faccessat(dirfd, path, mode, flags)
    }
    fn fchmod(&self, fd: Fd, perm: u32) -> FsResult<()> {
        self.0.fchmod(fd, perm)
    }
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        self.0.fchown(fd, uid, gid)
    }
    fn futimens(&self, fd: Fd, a: TimeSet, m: TimeSet) -> FsResult<()> {
        self.0.futimens(fd, a, m)
    }
    fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>> {
        self.0.fgetxattr(fd, name)
    }
    fn fsetxattr(&self, fd: Fd, name: &[u8], value: &[u8], mode: ferrite::XattrSetMode) -> FsResult<()> {
        self.0.fsetxattr(fd, name, value, mode)
    }
    fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>> {
        self.0.flistxattr(fd)
    }
    fn fremovexattr(&self, fd: Fd, name: &[u8]) -> FsResult<()> {
        self.0.fremovexattr(fd, name)
    }
    fn dup(&self, fd: Fd) -> FsResult<Fd> {
        self.0.dup(fd)
    }
    fn dup3(&self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd> {
        self.0.dup3(fd, newfd, cloexec)
    }
    fn get_cloexec(&self, fd: Fd) -> FsResult<bool> {
        self.0.get_cloexec(fd)
    }
    fn set_cloexec(&self, fd: Fd, on: bool) -> FsResult<()> {
        self.0.set_cloexec(fd, on)
    }
    fn getfl(&self, fd: Fd) -> FsResult<OpenFlags> {
        self.0.getfl(fd)
    }
    fn setfl_append(&self, fd: Fd, on: bool) -> FsResult<()> {
        self.0.setfl_append(fd, on)
    }
    fn chdir(&self, path: &[u8]) -> FsResult<()> {
        self.0.chdir(path)
    }
    fn fchdir(&self, fd: Fd) -> FsResult<()> {
        self.0.fchdir(fd)
    }
    fn getcwd(&self) -> FsResult<Vec<u8>> {
        self.0.getcwd()
    }
    fn credentials(&self) -> ferrite::Credentials {
        self.0.credentials()
    }
    fn set_credentials(&self, c: ferrite::Credentials) {
        self.0.set_credentials(c)
    }
    fn open(&self, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        self.0.open(path, flags, perm)
    }
    fn close(&self, fd: Fd) -> FsResult<()> {
        self.0.close(fd)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        self.0.pread(fd, buf, offset)
    }
    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        self.0.pwrite(fd, data, offset)
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        self.0.read(fd, buf)
    }
    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        self.0.write(fd, data)
    }
    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        self.0.lseek(fd, offset, whence)
    }
    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        self.0.ftruncate(fd, size)
    }
    fn fsync(&self, fd: Fd) -> FsResult<()> {
        self.0.fsync(fd)
    }
    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        self.0.fdatasync(fd)
    }
    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        self.0.fallocate(fd, mode, offset, len)
    }
    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        self.0.fstat(fd)
    }
    fn stat(&self, path: &[u8]) -> FsResult<Stat> {
        self.0.stat(path)
    }
    fn lstat(&self, path: &[u8]) -> FsResult<Stat> {
        self.0.lstat(path)
    }
    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        self.0.truncate(path, size)
    }
    fn chmod(&self, path: &[u8], perm: u32) -> FsResult<()> {
        self.0.chmod(path, perm)
    }
    fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        self.0.chown(path, uid, gid)
    }
    fn utimens(&self, path: &[u8], atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        self.0.utimens(path, atime, mtime)
    }
    fn mkdir(&self, path: &[u8], perm: u32) -> FsResult<()> {
        self.0.mkdir(path, perm)
    }
    fn rmdir(&self, path: &[u8]) -> FsResult<()> {
        self.0.rmdir(path)
    }
    fn unlink(&self, path: &[u8]) -> FsResult<()> {
        self.0.unlink(path)
    }
    fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> FsResult<()> {
        self.0.rename(from, to, flags)
    }
    fn link(&self, existing: &[u8], new: &[u8]) -> FsResult<()> {
        self.0.link(existing, new)
    }
    fn symlink(&self, target: &[u8], linkpath: &[u8]) -> FsResult<()> {
        self.0.symlink(target, linkpath)
    }
    fn mknod(&self, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        self.0.mknod(path, mode, rdev)
    }
    fn readlink(&self, path: &[u8]) -> FsResult<Vec<u8>> {
        self.0.readlink(path)
    }
    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let mut es = self.0.readdir(fd, cookie, max)?;
        if let Some(first) = es.first().cloned() {
            es.push(DirEntry { next_cookie: u64::MAX - 1, ..first });
        }
        Ok(es)
    }
    fn statfs(&self) -> FsResult<StatFs> {
        self.0.statfs()
    }
}

#[test]
fn tree_of_rejects_duplicate_entries() {
    let broken = DupListing(sample());
    assert_eq!(tree_of(&broken).unwrap_err(), ferrite::Errno::ECORRUPT);
    assert!(broken.0.snapshot().open_fds().is_empty(), "closed on error too");
}
