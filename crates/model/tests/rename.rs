//! rename in the model: plain moves and replacements of files and
//! directories, the error cases (ENOENT, EBUSY for root/"."/"..", EINVAL for
//! a directory into its own subtree, ENOTEMPTY for a target that is an
//! ancestor of the source, ENOTDIR/EISDIR/ENOTEMPTY for replacements,
//! trailing slashes), same-inode renames, NoReplace and Exchange, and the
//! link counts and times they leave.

mod common;
use common::*;
use ferrite::{Errno, FileType, OpenFlags, PathFs, RenameFlags};
use ferrite_model::ModelFs;

const R: RenameFlags = RenameFlags::Replace;
const NR: RenameFlags = RenameFlags::NoReplace;
const X: RenameFlags = RenameFlags::Exchange;

/// /d/ (empty dir), /f (file "f"), /a/ with a/f (file) and a/b/ (dir),
/// /ld -> d, /lf -> f.
fn fixture() -> (ModelFs, std::sync::Arc<ferrite::ManualClock>) {
    let (fs, clock) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/f", b"f");
    fs.mkdir(p("/a"), 0o755).unwrap();
    put(&fs, "/a/f", b"af");
    fs.mkdir(p("/a/b"), 0o755).unwrap();
    fs.symlink(p("d"), p("/ld")).unwrap();
    fs.symlink(p("f"), p("/lf")).unwrap();
    (fs, clock)
}

#[test]
fn simple_moves() {
    let (fs, _) = fixture();
    let ino = fs.stat(p("/f")).unwrap().ino;
    fs.rename(p("/f"), p("/d/g"), R).unwrap();
    assert_eq!(err(fs.stat(p("/f"))), Errno::ENOENT);
    assert_eq!(fs.stat(p("/d/g")).unwrap().ino, ino);
    // Replace a file: the old target inode loses its name.
    let old = fs.stat(p("/a/f")).unwrap().ino;
    let fd = fs.open(p("/a/f"), OpenFlags::RDONLY, 0).unwrap();
    fs.rename(p("/d/g"), p("/a/f"), R).unwrap();
    assert_eq!(get(&fs, "/a/f"), b"f");
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.ino, st.nlink), (old, 0));
    assert_eq!(read_fd(&fs, fd), b"af");
    // Renaming a symlink moves the link itself.
    fs.rename(p("/ld"), p("/a/ld2"), R).unwrap();
    assert_eq!(fs.lstat(p("/a/ld2")).unwrap().kind, FileType::Symlink);
    assert_eq!(fs.readlink(p("/a/ld2")).unwrap(), b"d");
    // Trailing slash on a directory source and a new target name is fine.
    fs.rename(p("/d/"), p("/e/"), R).unwrap();
    assert_eq!(fs.stat(p("/e")).unwrap().kind, FileType::Directory);
}

#[test]
fn directory_moves_and_link_counts() {
    let (fs, _) = fixture();
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 4); // d, a
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3); // b
    fs.rename(p("/a/b"), p("/b"), R).unwrap();
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 5);
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 2);
    assert_eq!(fs.stat(p("/b/..")).unwrap().ino, fs.stat(p("/")).unwrap().ino);
    // Replace an empty directory elsewhere: net nlink change 0 at the target.
    fs.mkdir(p("/a/empty"), 0o755).unwrap();
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3);
    fs.rename(p("/b"), p("/a/empty"), R).unwrap();
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3);
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 4);
    assert_eq!(fs.stat(p("/a/empty/..")).unwrap().ino, fs.stat(p("/a")).unwrap().ino);
    // Replace a directory in the same parent.
    fs.mkdir(p("/a/z"), 0o755).unwrap();
    let free = fs.statfs().unwrap().files_free;
    fs.rename(p("/a/empty"), p("/a/z"), R).unwrap();
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3);
    assert_eq!(fs.statfs().unwrap().files_free, free + 1); // replaced dir is gone
}

#[test]
fn error_cases() {
    let (fs, _) = fixture();
    let before = fs.snapshot();
    assert_eq!(err(fs.rename(p("/missing"), p("/x"), R)), Errno::ENOENT);
    assert_eq!(err(fs.rename(p("/missing/x"), p("/x"), R)), Errno::ENOENT);
    assert_eq!(err(fs.rename(p("/f"), p("/missing/x"), R)), Errno::ENOENT);
    assert_eq!(err(fs.rename(p("/f/x"), p("/x"), R)), Errno::ENOTDIR);
    // Root, "." and "..": EBUSY (source checked for existence first).
    assert_eq!(err(fs.rename(p("/"), p("/x"), R)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/f"), p("/"), R)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/d/."), p("/x"), R)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/a/b/.."), p("/x"), R)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/f"), p("/d/."), R)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/f"), p("/d/.."), NR)), Errno::EBUSY);
    assert_eq!(err(fs.rename(p("/missing"), p("/."), R)), Errno::ENOENT);
    // Into its own subtree.
    assert_eq!(err(fs.rename(p("/a"), p("/a/x"), R)), Errno::EINVAL);
    assert_eq!(err(fs.rename(p("/a"), p("/a/b/c"), R)), Errno::EINVAL);
    assert_eq!(err(fs.rename(p("/a"), p("/a/b"), R)), Errno::EINVAL);
    // Target an ancestor of the source: ENOTEMPTY, even for a file source.
    assert_eq!(err(fs.rename(p("/a/b"), p("/a"), R)), Errno::ENOTEMPTY);
    assert_eq!(err(fs.rename(p("/a/f"), p("/a"), R)), Errno::ENOTEMPTY);
    // Replacement kinds.
    assert_eq!(err(fs.rename(p("/d"), p("/f"), R)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/d"), p("/lf"), R)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/f"), p("/d"), R)), Errno::EISDIR);
    assert_eq!(err(fs.rename(p("/ld"), p("/d"), R)), Errno::EISDIR);
    assert_eq!(err(fs.rename(p("/d"), p("/a"), R)), Errno::ENOTEMPTY);
    // Trailing slashes on non-directories.
    assert_eq!(err(fs.rename(p("/f/"), p("/x"), R)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/f"), p("/x/"), R)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/ld/"), p("/x"), R)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/d"), p("/lf/"), R)), Errno::ENOTDIR);
    // Over-long names.
    let long = format!("/{}", "n".repeat(256));
    assert_eq!(err(fs.rename(long.as_bytes(), p("/x"), R)), Errno::ENAMETOOLONG);
    assert_eq!(err(fs.rename(p("/f"), long.as_bytes(), R)), Errno::ENAMETOOLONG);
    assert_eq!(err(fs.rename(b"", p("/x"), R)), Errno::ENOENT);
    assert_eq!(fs.snapshot(), before, "failed renames change nothing");
}

#[test]
fn same_inode() {
    let (fs, clock) = fixture();
    fs.link(p("/f"), p("/a/hard")).unwrap();
    clock.set(ts(5000));
    let before = fs.snapshot();
    fs.rename(p("/f"), p("/f"), R).unwrap();
    fs.rename(p("/f"), p("/a/hard"), R).unwrap();
    fs.rename(p("/a"), p("/a"), R).unwrap();
    fs.rename(p("/f"), p("/a/hard"), X).unwrap();
    assert_eq!(fs.snapshot(), before, "same-inode renames change nothing, not even times");
    assert_eq!(err(fs.rename(p("/f"), p("/f"), NR)), Errno::EEXIST);
    assert_eq!(err(fs.rename(p("/f"), p("/a/hard"), NR)), Errno::EEXIST);
}

#[test]
fn noreplace() {
    let (fs, _) = fixture();
    assert_eq!(err(fs.rename(p("/f"), p("/a/f"), NR)), Errno::EEXIST);
    assert_eq!(err(fs.rename(p("/d"), p("/a"), NR)), Errno::EEXIST);
    fs.symlink(p("nowhere"), p("/dang")).unwrap();
    assert_eq!(err(fs.rename(p("/f"), p("/dang"), NR)), Errno::EEXIST);
    // EEXIST before the subtree check.
    assert_eq!(err(fs.rename(p("/a"), p("/a/b"), NR)), Errno::EEXIST);
    fs.rename(p("/f"), p("/new"), NR).unwrap();
    assert_eq!(get(&fs, "/new"), b"f");
}

#[test]
fn exchange() {
    let (fs, clock) = fixture();
    let (f, d) = (fs.stat(p("/f")).unwrap().ino, fs.stat(p("/d")).unwrap().ino);
    assert_eq!(err(fs.rename(p("/f"), p("/missing"), X)), Errno::ENOENT);
    assert_eq!(err(fs.rename(p("/a"), p("/a/b"), X)), Errno::EINVAL);
    assert_eq!(err(fs.rename(p("/a/b"), p("/a"), X)), Errno::EINVAL);
    assert_eq!(err(fs.rename(p("/a/f"), p("/a"), X)), Errno::EINVAL);
    assert_eq!(err(fs.rename(p("/d"), p("/f/"), X)), Errno::ENOTDIR);
    assert_eq!(err(fs.rename(p("/f/"), p("/d"), X)), Errno::ENOTDIR);
    // File and directory swap within one parent.
    clock.set(ts(2000));
    fs.rename(p("/f"), p("/d/"), X).unwrap();
    assert_eq!(fs.stat(p("/f")).unwrap().ino, d);
    assert_eq!(fs.stat(p("/d")).unwrap().ino, f);
    for path in ["/f", "/d", "/"] {
        assert_eq!(fs.stat(p(path)).unwrap().ctime, ts(2000), "{path}");
    }
    // A directory and a file swap parents: nlink follows the directory.
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 4);
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 3);
    fs.rename(p("/f"), p("/a/f"), X).unwrap(); // /f is the directory now
    assert_eq!(fs.stat(p("/")).unwrap().nlink, 3);
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 4);
    assert_eq!(fs.stat(p("/a/f/..")).unwrap().ino, fs.stat(p("/a")).unwrap().ino);
    assert_eq!(get(&fs, "/f"), b"af");
    // Two directories.
    fs.mkdir(p("/a/f/inner"), 0o755).unwrap();
    fs.rename(p("/a/f"), p("/a/b"), X).unwrap();
    assert_eq!(fs.stat(p("/a/b/inner")).unwrap().kind, FileType::Directory);
    assert_eq!(fs.stat(p("/a")).unwrap().nlink, 4);
}

#[test]
fn times() {
    let (fs, clock) = fixture();
    clock.set(ts(3000));
    fs.rename(p("/f"), p("/a/g"), R).unwrap();
    let root = fs.stat(p("/")).unwrap();
    let a = fs.stat(p("/a")).unwrap();
    let g = fs.stat(p("/a/g")).unwrap();
    assert_eq!((root.mtime, root.ctime), (ts(3000), ts(3000)));
    assert_eq!((a.mtime, a.ctime), (ts(3000), ts(3000)));
    assert_eq!((g.mtime, g.ctime, g.atime), (ts(T0), ts(3000), ts(T0)));
    // A replaced file that lives on through a hard link gets ctime.
    fs.link(p("/a/f"), p("/keep")).unwrap();
    clock.set(ts(4000));
    fs.rename(p("/a/g"), p("/a/f"), R).unwrap();
    let keep = fs.stat(p("/keep")).unwrap();
    assert_eq!((keep.nlink, keep.ctime, keep.mtime), (1, ts(4000), ts(T0)));
    assert_eq!(fs.stat(p("/")).unwrap().mtime, ts(3000), "untouched parent");
    // Same parent: one update.
    clock.set(ts(5000));
    fs.rename(p("/a/f"), p("/a/h"), R).unwrap();
    let a = fs.stat(p("/a")).unwrap();
    assert_eq!((a.mtime, a.ctime), (ts(5000), ts(5000)));
}
