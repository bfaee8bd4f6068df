//! Namespace calls of the model other than rename: mkdir, rmdir, unlink,
//! link, symlink, readlink, their errors (EEXIST, ENOTDIR, ENOTEMPTY,
//! EBUSY, EINVAL, EISDIR, EPERM, EMLINK, ENAMETOOLONG, ENOENT) and the
//! link counts they leave (and readdir of a removed directory: ENOENT) (files: names; directories: 2 + subdirectories;
//! symlinks: names), and the stat fields of each kind.

mod common;
use common::*;
use ferrite::limits::{LINK_MAX, SYMLINK_MAX};
use ferrite::{Errno, FileType, OpenFlags, PathFs};

#[test]
fn mkdir_rules_and_counts() {
    let (fs, _) = setup();
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 2);
    fs.mkdir(p("/a"), 0o7777).unwrap();
    let st = fs.stat(p("/a")).unwrap();
    // Set-uid and set-gid dropped, sticky kept (vfs_mkdir).
    assert_eq!(
        (st.kind, st.perm, st.nlink, st.size, st.blocks, st.blksize),
        (FileType::Directory, 0o1777, 2, 4096, 8, 4096)
    );
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 3);
    fs.mkdir(p("/a/b"), 0o700).unwrap();
    fs.mkdir(p("/a/c"), 0o700).unwrap();
    put(&fs, "/a/file", b"");
    fs.symlink(p("b"), p("/a/link")).unwrap();
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 4); // files and symlinks do not count
    assert_eq!(err(fs.mkdir(p("/a"), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.mkdir(p("/a/file"), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.mkdir(p("/a/link"), 0o755)), Errno::EEXIST);
    fs.symlink(p("nowhere"), p("/dang")).unwrap();
    assert_eq!(err(fs.mkdir(p("/dang"), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.mkdir(p("/a/file/x"), 0o755)), Errno::ENOTDIR);
    // mkdir through an intermediate symlink.
    fs.mkdir(p("/a/link/deep"), 0o755).unwrap();
    assert_eq!(fs.stat(p("/a/b")).unwrap().nlink, 3);
}

#[test]
fn rmdir_rules() {
    let (fs, _) = setup();
    fs.mkdir(p("/a"), 0o755).unwrap();
    fs.mkdir(p("/a/b"), 0o755).unwrap();
    put(&fs, "/f", b"");
    fs.symlink(p("a"), p("/la")).unwrap();
    assert_eq!(err(fs.rmdir(p("/a"))), Errno::ENOTEMPTY);
    assert_eq!(err(fs.rmdir(p("/f"))), Errno::ENOTDIR);
    assert_eq!(err(fs.rmdir(p("/la"))), Errno::ENOTDIR);
    assert_eq!(err(fs.rmdir(p("/la/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.rmdir(p("/"))), Errno::EBUSY);
    assert_eq!(err(fs.rmdir(p("/a/b/."))), Errno::EINVAL);
    assert_eq!(err(fs.rmdir(p("/a/b/.."))), Errno::ENOTEMPTY);
    assert_eq!(err(fs.rmdir(p("/missing"))), Errno::ENOENT);
    assert_eq!(err(fs.rmdir(p("/f/x"))), Errno::ENOTDIR);
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3);
    fs.rmdir(p("/a/b/")).unwrap();
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 2);
    // A removed directory that is still open: nlink 0, empty, stays until close.
    let fd = fs.open(p("/a"), OpenFlags::RDONLY, 0).unwrap();
    let free = fs.statfs().unwrap().files_free;
    fs.rmdir(p("/a")).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().nlink, 0);
    assert_eq!(err(fs.readdir(fd, 0, 10)), Errno::ENOENT); // as getdents on Linux
    assert_eq!(fs.statfs().unwrap().files_free, free);
    fs.close(fd).unwrap();
    assert_eq!(fs.statfs().unwrap().files_free, free + 1);
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 2);
}

#[test]
fn unlink_rules() {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/f", b"");
    fs.symlink(p("d"), p("/ld")).unwrap();
    assert_eq!(err(fs.unlink(p("/d"))), Errno::EISDIR);
    assert_eq!(err(fs.unlink(p("/d/"))), Errno::EISDIR);
    assert_eq!(err(fs.unlink(p("/"))), Errno::EISDIR);
    assert_eq!(err(fs.unlink(p("/d/."))), Errno::EISDIR);
    assert_eq!(err(fs.unlink(p("/f/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.unlink(p("/ld/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.unlink(p("/missing"))), Errno::ENOENT);
    assert_eq!(err(fs.unlink(p("/missing/"))), Errno::ENOENT);
    fs.unlink(p("/ld")).unwrap(); // the link, not the directory
    assert_eq!(fs.stat(p("/d")).unwrap().kind, FileType::Directory);
    fs.unlink(p("/f")).unwrap();
    assert_eq!(err(fs.stat(p("/f"))), Errno::ENOENT);
}

#[test]
fn link_rules_and_counts() {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/f", b"shared");
    fs.link(p("/f"), p("/d/g")).unwrap();
    let (f, g) = (fs.stat(p("/f")).unwrap(), fs.stat(p("/d/g")).unwrap());
    assert_eq!(f.ino, g.ino);
    assert_eq!(f.nlink, 2);
    assert_eq!(get(&fs, "/d/g"), b"shared");
    assert_eq!(err(fs.link(p("/d"), p("/d2"))), Errno::EPERM);
    assert_eq!(err(fs.link(p("/d"), p("/f"))), Errno::EEXIST); // EEXIST first
    assert_eq!(err(fs.link(p("/f"), p("/d/g"))), Errno::EEXIST);
    assert_eq!(err(fs.link(p("/missing"), p("/x"))), Errno::ENOENT);
    assert_eq!(err(fs.link(p("/f"), p("/missing/x"))), Errno::ENOENT);
    // Unlinking one name leaves the other.
    fs.unlink(p("/f")).unwrap();
    assert_eq!(fs.stat(p("/d/g")).unwrap().nlink, 1);
    assert_eq!(get(&fs, "/d/g"), b"shared");
    // A symlink can be hard-linked; its nlink counts names.
    fs.symlink(p("d/g"), p("/s")).unwrap();
    assert_eq!(fs.lstat(p("/s")).unwrap().nlink, 1);
    fs.link(p("/s"), p("/s2")).unwrap();
    assert_eq!(fs.lstat(p("/s2")).unwrap().nlink, 2);
    assert_eq!(fs.lstat(p("/s2")).unwrap().kind, FileType::Symlink);
}

#[test]
fn link_max() {
    let (fs, _) = setup_sized(16, 16);
    put(&fs, "/f", b"");
    fs.mkdir(p("/d"), 0o755).unwrap();
    // Build up to LINK_MAX names cheaply: names cost no inode.
    for i in 1..LINK_MAX {
        fs.link(p("/f"), format!("/d/{i}").as_bytes()).unwrap();
    }
    assert_eq!(fs.stat(p("/f")).unwrap().nlink, LINK_MAX);
    assert_eq!(err(fs.link(p("/f"), p("/one_more"))), Errno::EMLINK);
    fs.unlink(p("/d/1")).unwrap();
    fs.link(p("/f"), p("/one_more")).unwrap();
}

#[test]
fn symlink_and_readlink() {
    let (fs, _) = setup();
    fs.symlink(p("some/where"), p("/s")).unwrap();
    let st = fs.lstat(p("/s")).unwrap();
    assert_eq!((st.kind, st.perm, st.size, st.nlink, st.blocks), (FileType::Symlink, 0o777, 10, 1, 8));
    assert_eq!(fs.readlink(p("/s")).unwrap(), b"some/where");
    assert_eq!(err(fs.symlink(b"", p("/e"))), Errno::ENOENT);
    let max = vec![b'y'; SYMLINK_MAX];
    fs.symlink(&max, p("/max")).unwrap();
    assert_eq!(fs.readlink(p("/max")).unwrap(), max);
    let over = vec![b'y'; SYMLINK_MAX + 1];
    assert_eq!(err(fs.symlink(&over, p("/over"))), Errno::ENAMETOOLONG);
    // Target errors come before linkpath errors.
    assert_eq!(err(fs.symlink(b"", p("/s"))), Errno::ENOENT);
    assert_eq!(err(fs.symlink(p("x"), p("/s"))), Errno::EEXIST);
    assert_eq!(err(fs.symlink(p("x"), p("/missing/s"))), Errno::ENOENT);
    put(&fs, "/f", b"");
    assert_eq!(err(fs.readlink(p("/f"))), Errno::EINVAL);
    assert_eq!(err(fs.readlink(p("/"))), Errno::EINVAL);
    assert_eq!(err(fs.readlink(p("/missing"))), Errno::ENOENT);
}

#[test]
fn chmod_chown_stat_fields() {
    let (fs, _) = setup();
    put(&fs, "/f", b"abc");
    fs.chmod(p("/f"), 0o104755).unwrap();
    assert_eq!(fs.stat(p("/f")).unwrap().perm, 0o4755);
    assert_eq!(fs.stat(p("/f")).unwrap().mode(), libc::S_IFREG | 0o4755);
    fs.chown(p("/f"), Some(5), Some(6)).unwrap();
    fs.chown(p("/f"), None, Some(9)).unwrap();
    let st = fs.stat(p("/f")).unwrap();
    assert_eq!((st.uid, st.gid, st.size, st.blocks, st.nlink), (5, 9, 3, 8, 1));
    assert_eq!(err(fs.chmod(p("/missing"), 0o600)), Errno::ENOENT);
    assert_eq!(err(fs.chown(p("/missing"), None, None)), Errno::ENOENT);
    let root = fs.stat(p("/")).unwrap();
    assert_eq!((root.perm, root.uid, root.gid, root.ino.0), (0o755, 0, 0, 1));
}
