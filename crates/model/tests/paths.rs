//! Path resolution of the model: empty and over-long paths and names,
//! ".", "..", repeated and trailing slashes, symlinks in intermediate and
//! final components (relative and absolute targets, trailing slash in a
//! target), the 40-symlink limit, and which calls follow a final symlink.
//! The expected errors were checked against Linux (tmpfs, kernel 6.18).

mod common;
use common::*;
use ferrite::{Errno, FileType, OpenFlags, PathFs, RenameFlags};

fn tree_fixture() -> ferrite_model::ModelFs {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    fs.mkdir(p("/d/e"), 0o755).unwrap();
    put(&fs, "/f", b"file");
    put(&fs, "/d/e/g", b"deep");
    fs.symlink(p("d"), p("/ld")).unwrap(); // relative
    fs.symlink(p("/d/e"), p("/abs")).unwrap(); // absolute
    fs.symlink(p("../f"), p("/d/up")).unwrap(); // relative to its own dir
    fs.symlink(p("f"), p("/lf")).unwrap();
    fs.symlink(p("nowhere"), p("/dang")).unwrap();
    fs.symlink(p("f/"), p("/lfs")).unwrap();
    fs
}

#[test]
fn empty_and_too_long() {
    let fs = tree_fixture();
    assert_eq!(err(fs.stat(b"")), Errno::ENOENT);
    assert_eq!(err(fs.open(b"", OpenFlags::RDONLY, 0)), Errno::ENOENT);
    assert_eq!(err(fs.mkdir(b"", 0o755)), Errno::ENOENT);
    // 4096 bytes: too long; 4095: resolved (and missing).
    let mut long = b"/".to_vec();
    long.extend(vec![b'a'; 4095]);
    assert_eq!(long.len(), 4096);
    assert_eq!(err(fs.stat(&long)), Errno::ENAMETOOLONG);
    let mut ok = b"/".to_vec();
    for _ in 0..2046 {
        ok.extend_from_slice(b"a/");
    }
    ok.extend_from_slice(b"aa");
    assert_eq!(ok.len(), 4095);
    assert_eq!(err(fs.stat(&ok)), Errno::ENOENT);
}

#[test]
fn name_max() {
    let fs = tree_fixture();
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    fs.mkdir(format!("/{n255}").as_bytes(), 0o755).unwrap();
    assert_eq!(err(fs.mkdir(format!("/{n256}").as_bytes(), 0o755)), Errno::ENAMETOOLONG);
    assert_eq!(err(fs.stat(format!("/d/{n256}/x").as_bytes())), Errno::ENAMETOOLONG);
    assert_eq!(err(fs.stat(format!("/{n256}").as_bytes())), Errno::ENAMETOOLONG);
    // A missing or non-directory component before the long name wins.
    assert_eq!(err(fs.stat(format!("/missing/{n256}/x").as_bytes())), Errno::ENOENT);
    assert_eq!(err(fs.stat(format!("/f/{n256}").as_bytes())), Errno::ENOTDIR);
    assert_eq!(err(fs.mkdir(format!("/f/{n256}").as_bytes(), 0o755)), Errno::ENOTDIR);
    let fd = fs.open(format!("/{n256}").as_bytes(), OpenFlags::WRONLY.create(), 0o644);
    assert_eq!(err(fd), Errno::ENAMETOOLONG);
}

#[test]
fn dots_and_slashes() {
    let fs = tree_fixture();
    let d = fs.stat(p("/d")).unwrap().ino;
    let root = fs.stat(p("/")).unwrap().ino;
    assert_eq!(root.0, 1);
    for path in ["d", "/d", "//d//", "/d/.", "/d/e/..", "/./d/./e/../", "/../d", "/../../d/."] {
        assert_eq!(fs.stat(p(path)).unwrap().ino, d, "{path}");
    }
    for path in ["/", "//", "/.", "/..", ".", "..", "d/..", "/d/e/../../.."] {
        assert_eq!(fs.stat(p(path)).unwrap().ino, root, "{path}");
    }
    assert_eq!(err(fs.stat(p("/missing/x"))), Errno::ENOENT);
    assert_eq!(err(fs.stat(p("/f/x"))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/f/."))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/f/.."))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/f/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/missing/"))), Errno::ENOENT);
}

#[test]
fn symlinks_in_the_middle() {
    let fs = tree_fixture();
    let e = fs.stat(p("/d/e")).unwrap().ino;
    assert_eq!(fs.stat(p("/ld/e")).unwrap().ino, e);
    assert_eq!(fs.stat(p("/abs")).unwrap().ino, e);
    assert_eq!(get(&fs, "/abs/g"), b"deep");
    assert_eq!(get(&fs, "/ld/e/g"), b"deep");
    assert_eq!(get(&fs, "/d/up"), b"file");
    assert_eq!(get(&fs, "/ld/up"), b"file"); // resolved from the link's own dir
    assert_eq!(err(fs.stat(p("/lf/x"))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/dang/x"))), Errno::ENOENT);
    // ".." after a symlink goes to the parent of the target.
    assert_eq!(fs.stat(p("/abs/..")).unwrap().ino, fs.stat(p("/d")).unwrap().ino);
}

#[test]
fn final_symlink_follow_rules() {
    let fs = tree_fixture();
    let f = fs.stat(p("/f")).unwrap();
    assert_eq!(fs.stat(p("/lf")).unwrap().ino, f.ino);
    let l = fs.lstat(p("/lf")).unwrap();
    assert_eq!(l.kind, FileType::Symlink);
    assert_ne!(l.ino, f.ino);
    // A trailing slash follows even for lstat/readlink, and needs a directory.
    assert_eq!(fs.lstat(p("/ld/")).unwrap().kind, FileType::Directory);
    assert_eq!(err(fs.readlink(p("/ld/"))), Errno::EINVAL);
    assert_eq!(err(fs.readlink(p("/lf/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.lstat(p("/lf/"))), Errno::ENOTDIR);
    assert_eq!(err(fs.stat(p("/dang"))), Errno::ENOENT);
    assert_eq!(fs.lstat(p("/dang")).unwrap().kind, FileType::Symlink);
    // A trailing slash inside the target counts too.
    assert_eq!(err(fs.stat(p("/lfs"))), Errno::ENOTDIR);
    assert_eq!(err(fs.open(p("/lfs"), OpenFlags::RDONLY, 0)), Errno::ENOTDIR);
    // truncate/chmod/chown/utimens follow.
    fs.chmod(p("/lf"), 0o600).unwrap();
    assert_eq!(fs.stat(p("/f")).unwrap().perm, 0o600);
    assert_eq!(fs.lstat(p("/lf")).unwrap().perm, 0o777);
    fs.chown(p("/lf"), Some(7), None).unwrap();
    assert_eq!(fs.stat(p("/f")).unwrap().uid, 7);
    fs.truncate(p("/lf"), 2).unwrap();
    assert_eq!(get(&fs, "/f"), b"fi");
    // unlink/rename/link/readlink/mkdir do not follow.
    fs.link(p("/lf"), p("/lf2")).unwrap();
    assert_eq!(fs.lstat(p("/lf2")).unwrap().kind, FileType::Symlink);
    assert_eq!(fs.lstat(p("/lf")).unwrap().nlink, 2);
    assert_eq!(fs.readlink(p("/lf")).unwrap(), b"f");
    assert_eq!(err(fs.mkdir(p("/dang"), 0o755)), Errno::EEXIST);
    fs.rename(p("/lf2"), p("/lf3"), RenameFlags::Replace).unwrap();
    assert_eq!(fs.readlink(p("/lf3")).unwrap(), b"f");
    fs.unlink(p("/lf3")).unwrap();
    fs.unlink(p("/ld")).unwrap();
    assert_eq!(fs.stat(p("/d")).unwrap().kind, FileType::Directory);
    // Link's source with a trailing slash is followed.
    fs.symlink(p("d"), p("/ld")).unwrap();
    assert_eq!(err(fs.link(p("/ld/"), p("/x"))), Errno::EPERM);
    assert_eq!(err(fs.link(p("/f/"), p("/x"))), Errno::ENOTDIR);
}

#[test]
fn symlink_loop_limit() {
    let (fs, _) = setup();
    put(&fs, "/f", b"x");
    // c0 -> c1 -> ... -> c44 -> f
    for i in 0..45 {
        let target = if i < 44 { format!("c{}", i + 1) } else { "f".to_string() };
        fs.symlink(target.as_bytes(), format!("/c{i}").as_bytes()).unwrap();
    }
    assert_eq!(fs.stat(p("/c5")).unwrap().size, 1); // 40 links followed
    assert_eq!(err(fs.stat(p("/c4"))), Errno::ELOOP); // 41
    assert_eq!(err(fs.open(p("/c4"), OpenFlags::RDONLY, 0)), Errno::ELOOP);
    assert_eq!(fs.lstat(p("/c4")).unwrap().kind, FileType::Symlink);
    // A true loop, in the middle and at the end.
    fs.symlink(p("loop2"), p("/loop1")).unwrap();
    fs.symlink(p("loop1"), p("/loop2")).unwrap();
    assert_eq!(err(fs.stat(p("/loop1"))), Errno::ELOOP);
    assert_eq!(err(fs.stat(p("/loop1/x"))), Errno::ELOOP);
    assert_eq!(err(fs.mkdir(p("/loop1/x"), 0o755)), Errno::ELOOP);
    // Self loop through a directory component.
    fs.mkdir(p("/d"), 0o755).unwrap();
    fs.symlink(p("../d/s"), p("/d/s")).unwrap();
    assert_eq!(err(fs.stat(p("/d/s"))), Errno::ELOOP);
}

#[test]
fn create_with_trailing_slash() {
    let fs = tree_fixture();
    // mkdir accepts a trailing slash, other creations do not.
    fs.mkdir(p("/new/"), 0o755).unwrap();
    assert_eq!(err(fs.mkdir(p("/new/"), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.symlink(p("t"), p("/nl/"))), Errno::ENOENT);
    assert_eq!(err(fs.symlink(p("t"), p("/f/"))), Errno::EEXIST);
    assert_eq!(err(fs.link(p("/f"), p("/nl/"))), Errno::ENOENT);
    let c = OpenFlags::WRONLY.create();
    assert_eq!(err(fs.open(p("/nf/"), c, 0o644)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/f/"), c, 0o644)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/d/"), OpenFlags::RDONLY.create(), 0o644)), Errno::EISDIR);
    assert_eq!(err(fs.stat(p("/nf"))), Errno::ENOENT);
    // Creating "." / ".." / "/" names.
    assert_eq!(err(fs.mkdir(p("/"), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.mkdir(p("/d/.."), 0o755)), Errno::EEXIST);
    assert_eq!(err(fs.symlink(p("t"), p("/d/."))), Errno::EEXIST);
    assert_eq!(err(fs.link(p("/f"), p("/"))), Errno::EEXIST);
    assert_eq!(err(fs.open(p("/d/."), OpenFlags::RDONLY.create(), 0)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/d/."), OpenFlags::RDONLY.create().excl(), 0)), Errno::EEXIST);
    // Missing parents.
    assert_eq!(err(fs.mkdir(p("/a/b"), 0o755)), Errno::ENOENT);
    assert_eq!(err(fs.open(p("/a/b"), c, 0o644)), Errno::ENOENT);
    assert_eq!(err(fs.mkdir(p("/f/b"), 0o755)), Errno::ENOTDIR);
}
