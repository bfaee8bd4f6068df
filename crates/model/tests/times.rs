//! Timestamps in the model, on a manual clock: creation (new inode and
//! parent), write, truncate/ftruncate/O_TRUNC, fallocate, chmod/chown,
//! utimens (Now, Omit, At, both Omit, bad nanoseconds), link, unlink,
//! mkdir/rmdir, symlink; reads never touch atime; failed calls touch nothing.

mod common;
use common::*;
use ferrite::{Errno, FallocateMode, OpenFlags, PathFs, Stat, TimeSet, TimeSpec};

fn amc(st: &Stat) -> (i64, i64, i64) {
    (st.atime.sec, st.mtime.sec, st.ctime.sec)
}

#[test]
fn create_sets_times_and_parent() {
    let (fs, clock) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    clock.set(ts(2000));
    let fd = fs.open(p("/d/f"), OpenFlags::WRONLY.create(), 0o644).unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (2000, 2000, 2000));
    assert_eq!(amc(&fs.stat(p("/d")).unwrap()), (T0, 2000, 2000));
    assert_eq!(amc(&fs.stat(p("/")).unwrap()), (T0, T0, T0));
    clock.set(ts(2100));
    fs.mkdir(p("/d/sub"), 0o755).unwrap();
    assert_eq!(amc(&fs.stat(p("/d/sub")).unwrap()), (2100, 2100, 2100));
    assert_eq!(amc(&fs.stat(p("/d")).unwrap()), (T0, 2100, 2100));
    clock.set(ts(2200));
    fs.symlink(p("x"), p("/d/s")).unwrap();
    assert_eq!(amc(&fs.lstat(p("/d/s")).unwrap()), (2200, 2200, 2200));
    assert_eq!(amc(&fs.stat(p("/d")).unwrap()), (T0, 2200, 2200));
    // Opening an existing file with O_CREAT changes nothing.
    clock.set(ts(2300));
    fs.open(p("/d/f"), OpenFlags::RDONLY.create(), 0).unwrap();
    assert_eq!(amc(&fs.stat(p("/d")).unwrap()), (T0, 2200, 2200));
    // Nanoseconds are kept.
    clock.set(TimeSpec { sec: 2400, nsec: 123 });
    fs.mkdir(p("/ns"), 0o755).unwrap();
    assert_eq!(fs.stat(p("/ns")).unwrap().mtime, TimeSpec { sec: 2400, nsec: 123 });
}

#[test]
fn data_changes() {
    let (fs, clock) = setup();
    let fd = fs.open(p("/f"), rw_create(), 0o644).unwrap();
    clock.set(ts(2000));
    fs.write(fd, b"abc").unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2000, 2000));
    clock.set(ts(2100));
    fs.write(fd, b"").unwrap(); // zero-length: nothing
    let mut buf = [0u8; 8];
    fs.pread(fd, &mut buf, 0).unwrap(); // noatime
    fs.lseek(fd, 0, ferrite::Whence::Set).unwrap();
    fs.read(fd, &mut buf).unwrap();
    fs.fsync(fd).unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2000, 2000));
    fs.ftruncate(fd, 3).unwrap(); // same size: still updates
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2100, 2100));
    clock.set(ts(2200));
    fs.truncate(p("/f"), 100).unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2200, 2200));
    clock.set(ts(2300));
    fs.fallocate(fd, FallocateMode::KeepSize, 0, 10).unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2300, 2300));
    clock.set(ts(2400));
    fs.open(p("/f"), OpenFlags::WRONLY.trunc(), 0).unwrap();
    assert_eq!(amc(&fs.fstat(fd).unwrap()), (T0, 2400, 2400));
    // The parent is not touched by data changes.
    assert_eq!(amc(&fs.stat(p("/")).unwrap()), (T0, T0, T0));
}

#[test]
fn attribute_changes() {
    let (fs, clock) = setup();
    put(&fs, "/f", b"");
    clock.set(ts(2000));
    fs.chmod(p("/f"), 0o600).unwrap();
    assert_eq!(amc(&fs.stat(p("/f")).unwrap()), (T0, T0, 2000));
    clock.set(ts(2100));
    fs.chown(p("/f"), None, None).unwrap();
    assert_eq!(amc(&fs.stat(p("/f")).unwrap()), (T0, T0, 2100));
}

#[test]
fn utimens() {
    let (fs, clock) = setup();
    put(&fs, "/f", b"");
    clock.set(ts(2000));
    fs.utimens(p("/f"), TimeSet::At(ts(5)), TimeSet::Omit).unwrap();
    assert_eq!(amc(&fs.stat(p("/f")).unwrap()), (5, T0, 2000));
    clock.set(ts(2100));
    fs.utimens(p("/f"), TimeSet::Omit, TimeSet::Now).unwrap();
    assert_eq!(amc(&fs.stat(p("/f")).unwrap()), (5, 2100, 2100));
    clock.set(ts(2200));
    let at = TimeSpec { sec: -7, nsec: 999_999_999 };
    fs.utimens(p("/f"), TimeSet::Now, TimeSet::At(at)).unwrap();
    let st = fs.stat(p("/f")).unwrap();
    assert_eq!((st.atime, st.mtime, st.ctime), (ts(2200), at, ts(2200)));
    // Both Omit: nothing changes, and the path is not even resolved.
    clock.set(ts(2300));
    let before = fs.snapshot();
    fs.utimens(p("/f"), TimeSet::Omit, TimeSet::Omit).unwrap();
    fs.utimens(p("/missing"), TimeSet::Omit, TimeSet::Omit).unwrap();
    assert_eq!(fs.snapshot(), before);
    // Bad nanoseconds: EINVAL, after the path.
    let bad = TimeSet::At(TimeSpec { sec: 0, nsec: 1_000_000_000 });
    assert_eq!(err(fs.utimens(p("/f"), bad, TimeSet::Omit)), Errno::EINVAL);
    assert_eq!(err(fs.utimens(p("/missing"), bad, TimeSet::Omit)), Errno::ENOENT);
    // Follows symlinks.
    fs.symlink(p("f"), p("/l")).unwrap();
    fs.utimens(p("/l"), TimeSet::At(ts(1)), TimeSet::At(ts(2))).unwrap();
    assert_eq!(amc(&fs.stat(p("/f")).unwrap()), (1, 2, 2300));
    assert_eq!(amc(&fs.lstat(p("/l")).unwrap()), (2300, 2300, 2300));
}

#[test]
fn names() {
    let (fs, clock) = setup();
    fs.mkdir(p("/a"), 0o755).unwrap();
    fs.mkdir(p("/b"), 0o755).unwrap();
    put(&fs, "/a/f", b"");
    clock.set(ts(2000));
    fs.link(p("/a/f"), p("/b/g")).unwrap();
    assert_eq!(amc(&fs.stat(p("/b/g")).unwrap()), (T0, T0, 2000));
    assert_eq!(amc(&fs.stat(p("/b")).unwrap()), (T0, 2000, 2000));
    assert_eq!(amc(&fs.stat(p("/a")).unwrap()), (T0, T0, T0));
    clock.set(ts(2100));
    fs.unlink(p("/a/f")).unwrap();
    assert_eq!(amc(&fs.stat(p("/b/g")).unwrap()), (T0, T0, 2100));
    assert_eq!(amc(&fs.stat(p("/a")).unwrap()), (T0, 2100, 2100));
    clock.set(ts(2200));
    fs.mkdir(p("/a/sub"), 0o755).unwrap();
    clock.set(ts(2300));
    fs.rmdir(p("/a/sub")).unwrap();
    assert_eq!(amc(&fs.stat(p("/a")).unwrap()), (T0, 2300, 2300));
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 2);
}

#[test]
fn failures_change_nothing() {
    let (fs, clock) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/d/f", b"x");
    clock.set(ts(9000));
    let before = fs.snapshot();
    let _ = fs.mkdir(p("/d/f"), 0o755);
    let _ = fs.rmdir(p("/d"));
    let _ = fs.unlink(p("/d"));
    let _ = fs.link(p("/d"), p("/e"));
    let _ = fs.symlink(p("x"), p("/d/f"));
    let _ = fs.open(p("/d/f"), OpenFlags::RDWR.create().excl(), 0);
    let _ = fs.truncate(p("/d"), 0);
    assert_eq!(fs.snapshot(), before);
}
