//! Consistency modes in the model: the default mode of new files, the
//! `user.ferrite.mode` extended attribute (values, EINVAL and ENODATA
//! cases, not listed), what a crash undoes in an fsync-atomic file (content,
//! size and times of its data changes since the last commit point, nothing
//! in a strict file, nothing but data) and every commit point that makes
//! such changes survive it.

mod common;
use common::*;
use ferrite::{Errno, FallocateMode, Fd, FileMode, OpenFlags, PathFs, RenameFlags, TimeSet, XattrSetMode};
use ferrite_model::ModelFs;

const MODE: &[u8] = FileMode::XATTR;

/// A file of `path` holding "committed" in fsync-atomic mode, open
/// read-write; its content is committed (a fsync ran).
fn atomic_file(fs: &ModelFs, path: &str) -> Fd {
    let fd = fs.open(p(path), rw_create(), 0o644).unwrap();
    fs.fsetxattr(fd, MODE, b"fsync-atomic", XattrSetMode::Any).unwrap();
    fs.pwrite(fd, b"committed", 0).unwrap();
    fs.fsync(fd).unwrap();
    fd
}

#[test]
fn mode_attribute_rules() {
    let (fs, _) = setup();
    assert_eq!(fs.default_mode(), FileMode::Strict);
    let fd = fs.open(p("/s"), rw_create(), 0o644).unwrap();
    assert_eq!(fs.fgetxattr(fd, MODE).unwrap(), b"strict");
    fs.set_default_mode(FileMode::FsyncAtomic);
    let fa = fs.open(p("/a"), rw_create(), 0o644).unwrap();
    assert_eq!(fs.fgetxattr(fa, MODE).unwrap(), b"fsync-atomic");
    assert_eq!(fs.file_mode(p("/a")).unwrap(), FileMode::FsyncAtomic);
    // Files created before the default changed keep their mode.
    assert_eq!(fs.file_mode(p("/s")).unwrap(), FileMode::Strict);
    // mknod of a regular file takes the default too.
    fs.mknod(p("/n"), libc::S_IFREG | 0o644, 0).unwrap();
    assert_eq!(fs.file_mode(p("/n")).unwrap(), FileMode::FsyncAtomic);
    // Values: the two names, with a trailing NUL or newline; anything else
    // is EINVAL and changes nothing.
    fs.fsetxattr(fd, MODE, b"fsync-atomic\n", XattrSetMode::Create).unwrap();
    assert_eq!(fs.fgetxattr(fd, MODE).unwrap(), b"fsync-atomic");
    fs.fsetxattr(fd, MODE, b"strict\0", XattrSetMode::Replace).unwrap();
    assert_eq!(fs.fgetxattr(fd, MODE).unwrap(), b"strict");
    assert_eq!(err(fs.fsetxattr(fd, MODE, b"buffered", XattrSetMode::Any)), Errno::EINVAL);
    assert_eq!(err(fs.fsetxattr(fd, MODE, b"", XattrSetMode::Any)), Errno::EINVAL);
    assert_eq!(fs.fgetxattr(fd, MODE).unwrap(), b"strict");
    // Not removable, not listed.
    assert_eq!(err(fs.fremovexattr(fd, MODE)), Errno::EINVAL);
    fs.fsetxattr(fd, b"user.x", b"1", XattrSetMode::Any).unwrap();
    assert_eq!(fs.flistxattr(fd).unwrap(), vec![b"user.x".to_vec()]);
    // Directories have no mode.
    fs.mkdir(p("/d"), 0o755).unwrap();
    let dfd = fs.open(p("/d"), OpenFlags::RDONLY.directory(), 0).unwrap();
    assert_eq!(err(fs.fgetxattr(dfd, MODE)), Errno::ENODATA);
    assert_eq!(err(fs.fsetxattr(dfd, MODE, b"strict", XattrSetMode::Any)), Errno::EINVAL);
    assert_eq!(err(fs.fremovexattr(dfd, MODE)), Errno::EINVAL);
    assert_eq!(fs.file_mode(p("/d")).unwrap(), FileMode::Strict);
}

#[test]
fn mode_change_sets_ctime_only_when_the_mode_changes() {
    let (fs, clock) = setup();
    let fd = fs.open(p("/f"), rw_create(), 0o644).unwrap();
    clock.advance_ns(1_000_000_000);
    fs.fsetxattr(fd, MODE, b"strict", XattrSetMode::Any).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().ctime, ts(T0));
    fs.fsetxattr(fd, MODE, b"fsync-atomic", XattrSetMode::Any).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().ctime, ts(T0 + 1));
}

#[test]
fn crash_undoes_pending_data_changes_only() {
    let (fs, clock) = setup();
    let fd = atomic_file(&fs, "/a");
    let strict = fs.open(p("/s"), rw_create(), 0o644).unwrap();
    let before = fs.fstat(fd).unwrap();
    clock.advance_ns(5_000_000_000);
    fs.pwrite(fd, b"CHANGED and longer", 0).unwrap();
    fs.pwrite(strict, b"strict data", 0).unwrap();
    fs.mkdir(p("/d"), 0o700).unwrap();
    assert_eq!(fs.pending_file_count(), 1);
    assert_eq!(get(&fs, "/a"), b"CHANGED and longer");
    fs.remount_after_crash();
    assert_eq!(get(&fs, "/a"), b"committed");
    let after = fs.stat(p("/a")).unwrap();
    assert_eq!((after.size, after.mtime, after.ctime), (before.size, before.mtime, before.ctime));
    assert_eq!(get(&fs, "/s"), b"strict data");
    assert!(fs.stat(p("/d")).is_ok());
    assert_eq!(fs.pending_file_count(), 0);
}

#[test]
fn every_data_change_is_undone() {
    let (fs, _) = setup();
    let fd = atomic_file(&fs, "/a");
    fs.pwrite(fd, &[7u8; 10_000], 100).unwrap();
    fs.fsync(fd).unwrap();
    let committed = get(&fs, "/a");
    fs.ftruncate(fd, 50).unwrap();
    fs.truncate(p("/a"), 9000).unwrap();
    fs.fallocate(fd, FallocateMode::Default, 0, 40_000).unwrap();
    fs.fallocate(fd, FallocateMode::PunchHole, 4096, 8192).unwrap();
    fs.fallocate(fd, FallocateMode::KeepSize, 0, 80_000).unwrap();
    let t = fs.open(p("/a"), OpenFlags::WRONLY.trunc(), 0).unwrap();
    fs.close(t).unwrap();
    let blocks = fs.fstat(fd).unwrap().blocks;
    fs.remount_after_crash();
    assert_eq!(get(&fs, "/a"), committed);
    assert_ne!(fs.stat(p("/a")).unwrap().blocks, blocks);
}

/// Each commit point, applied to a fresh file with a pending write, keeps
/// the write through a crash.
#[test]
fn every_commit_point_commits() {
    type Commit = fn(&ModelFs, Fd);
    let points: Vec<(&str, Commit)> = vec![
        ("fsync", |fs, fd| fs.fsync(fd).unwrap()),
        ("fdatasync", |fs, fd| fs.fdatasync(fd).unwrap()),
        ("sync_all", |fs, _| fs.sync_all()),
        ("fchmod", |fs, fd| fs.fchmod(fd, 0o600).unwrap()),
        ("chown", |fs, _| fs.chown(p("/a"), Some(5), None).unwrap()),
        ("chown -1 -1", |fs, _| fs.chown(p("/a"), None, None).unwrap()),
        ("futimens", |fs, fd| fs.futimens(fd, TimeSet::Omit, TimeSet::Now).unwrap()),
        ("fsetxattr", |fs, fd| fs.fsetxattr(fd, b"user.k", b"v", XattrSetMode::Any).unwrap()),
        ("fremovexattr", |fs, fd| {
            fs.fremovexattr(fd, b"user.old").unwrap();
        }),
        ("same mode", |fs, fd| fs.fsetxattr(fd, MODE, b"fsync-atomic", XattrSetMode::Any).unwrap()),
        ("to strict", |fs, fd| fs.fsetxattr(fd, MODE, b"strict", XattrSetMode::Any).unwrap()),
        ("link", |fs, _| fs.link(p("/a"), p("/a2")).unwrap()),
        ("unlink of another name", |fs, _| {
            fs.link(p("/a"), p("/a2")).unwrap();
            // (link already committed: write again, then unlink the other name)
            let fd = fs.open(p("/a"), OpenFlags::WRONLY, 0).unwrap();
            fs.pwrite(fd, b"PENDING", 0).unwrap();
            fs.close(fd).unwrap();
            fs.unlink(p("/a2")).unwrap();
        }),
        ("rename", |fs, _| fs.rename(p("/a"), p("/b"), RenameFlags::Replace).unwrap()),
        ("rename over", |fs, _| {
            fs.link(p("/a"), p("/a2")).unwrap();
            let fd = fs.open(p("/a"), OpenFlags::WRONLY, 0).unwrap();
            fs.pwrite(fd, b"PENDING", 0).unwrap();
            fs.close(fd).unwrap();
            put(fs, "/x", b"x");
            fs.rename(p("/x"), p("/a2"), RenameFlags::Replace).unwrap();
        }),
        ("exchange", |fs, _| {
            put(fs, "/x", b"x");
            fs.rename(p("/x"), p("/a"), RenameFlags::Exchange).unwrap();
        }),
        ("O_SYNC write", |fs, _| {
            let fd = fs.open(p("/a"), OpenFlags::WRONLY.sync(), 0).unwrap();
            fs.pwrite(fd, b"PENDING", 0).unwrap();
            fs.close(fd).unwrap();
        }),
        ("O_DSYNC write of one byte", |fs, _| {
            let mut f = OpenFlags::WRONLY;
            f.dsync = true;
            let fd = fs.open(p("/a"), f, 0).unwrap();
            fs.pwrite(fd, b"P", 0).unwrap();
            fs.close(fd).unwrap();
        }),
    ];
    for (name, commit) in points {
        let (fs, _) = setup();
        let fd = atomic_file(&fs, "/a");
        fs.fsetxattr(fd, b"user.old", b"1", XattrSetMode::Any).unwrap();
        fs.pwrite(fd, b"PENDING", 0).unwrap();
        assert_eq!(fs.pending_file_count(), 1, "{name}");
        commit(&fs, fd);
        assert_eq!(fs.pending_file_count(), 0, "{name}: still pending");
        let tree = fs.snapshot().crashed().tree();
        let committed = tree.values().filter(|v| v.content.starts_with(b"PENDING")).count();
        let undone = tree.values().filter(|v| v.content == b"committed").count();
        assert!(committed > 0 && undone == 0, "{name}: the committed write is not in the crash state");
    }
}

/// What is not a commit point: reads, stat, a failed chmod, a change of
/// another file, utimens with both times omitted, a rename onto itself.
#[test]
fn non_commit_points_leave_changes_pending() {
    let (fs, _) = setup();
    let fd = atomic_file(&fs, "/a");
    fs.link(p("/a"), p("/same")).unwrap();
    fs.pwrite(fd, b"PENDING", 0).unwrap();
    let mut buf = [0u8; 4];
    fs.pread(fd, &mut buf, 0).unwrap();
    fs.stat(p("/a")).unwrap();
    fs.set_credentials(ferrite::Credentials::user(1000, 1000, &[]));
    assert_eq!(err(fs.chmod(p("/a"), 0o600)), Errno::EPERM);
    fs.set_credentials(ferrite::Credentials::root());
    put(&fs, "/other", b"o");
    fs.chmod(p("/other"), 0o600).unwrap();
    fs.utimens(p("/a"), TimeSet::Omit, TimeSet::Omit).unwrap();
    fs.rename(p("/a"), p("/same"), RenameFlags::Replace).unwrap();
    assert_eq!(err(fs.fsetxattr(fd, MODE, b"bogus", XattrSetMode::Any)), Errno::EINVAL);
    // A write of nothing through an O_DSYNC descriptor syncs nothing (Linux).
    let mut f = OpenFlags::WRONLY;
    f.dsync = true;
    let sync_fd = fs.open(p("/a"), f, 0).unwrap();
    fs.pwrite(sync_fd, b"", 0).unwrap();
    fs.close(sync_fd).unwrap();
    assert_eq!(fs.pending_file_count(), 1);
    fs.remount_after_crash();
    assert_eq!(get(&fs, "/a"), b"committed");
}

#[test]
fn strict_files_and_clean_unmount() {
    let (fs, _) = setup();
    let fd = atomic_file(&fs, "/a");
    fs.pwrite(fd, b"PENDING", 0).unwrap();
    fs.remount_clean();
    assert_eq!(get(&fs, "/a"), b"PENDINGed");
    // A strict file never has anything pending.
    let s = fs.open(p("/s"), rw_create(), 0o644).unwrap();
    fs.pwrite(s, b"x", 0).unwrap();
    assert_eq!(fs.pending_file_count(), 0);
}

#[test]
fn crash_during_a_multi_file_commit() {
    let (fs, _) = setup();
    let a = atomic_file(&fs, "/a");
    let b = atomic_file(&fs, "/b");
    fs.pwrite(a, b"A", 0).unwrap();
    fs.pwrite(b, b"B", 0).unwrap();
    let state = fs.snapshot();
    let pending = state.pending_inodes();
    assert_eq!(pending.len(), 2);
    let ino_a = fs.fstat(a).unwrap().ino.0;
    let tree = state.crashed_committing(&[ino_a]).tree();
    assert_eq!(tree[&b"/a".to_vec()].content, b"Aommitted");
    assert_eq!(tree[&b"/b".to_vec()].content, b"committed");
    assert_eq!(state.crashed_committing(&pending).tree(), state.unmounted().tree());
}

#[test]
fn unlinked_open_file_is_gone_after_a_crash() {
    let (fs, _) = setup();
    let fd = atomic_file(&fs, "/a");
    fs.unlink(p("/a")).unwrap();
    fs.pwrite(fd, b"PENDING", 0).unwrap();
    assert_eq!(fs.pending_file_count(), 1);
    fs.remount_after_crash();
    assert_eq!(err(fs.stat(p("/a"))), Errno::ENOENT);
    assert_eq!(fs.snapshot().live_inodes(), 1);
}
