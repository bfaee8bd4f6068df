//! What this proves: consistency modes through a FUSE mount.
//!
//! - `-o mode=fsync-atomic` makes the regular files created through the
//!   mount fsync-atomic, and the daemon's first line says which mode new
//!   files get; a mount without the option creates strict files, and every
//!   file keeps its mode across remounts.
//! - `getfattr`/`setfattr` (package `attr`) read and set a file's mode as
//!   the extended attribute `user.ferrite.mode`: directories have none,
//!   a bad value and removal are refused, and `getfattr -d` does not list
//!   it.
//! - Each commit point the kernel offers reaches the engine: after writes
//!   to fsync-atomic files followed by fsync, fdatasync, a write through an
//!   O_SYNC or O_DSYNC descriptor, msync(MS_SYNC) of a shared mapping,
//!   chmod, setxattr or rename, the daemon is killed (SIGKILL: no clean
//!   unmount) and the next mount finds each file as it was after the write;
//!   writes followed only by close, or by nothing, and a truncate (by
//!   descriptor or by path) without a sync, are gone (the file is as at its previous fsync), while a strict
//!   file keeps every write. Before the kill, every reader saw the new
//!   contents at once. What sync(2) and syncfs(2) did is printed, not
//!   asserted: the kernel does not send them to a /dev/fuse daemon (only
//!   virtiofs gets FUSE_SYNCFS), see docs/FUSE.md.

mod common;

use common::*;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

const ATTR_INSTALL: &str = "apt-get install attr";

/// The committed contents every file starts with, and what is written after.
const FIRST: &[u8] = b"committed-v1";
const SECOND: &[u8] = b"second version, longer";

fn getfattr(file: &Path) -> Result<String, String> {
    let out = Command::new("getfattr")
        .args(["--absolute-names", "--only-values", "-n", "user.ferrite.mode"])
        .arg(file)
        .output()
        .expect("run getfattr");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn setfattr(args: &[&str], file: &Path) -> Result<(), String> {
    let out = Command::new("setfattr").args(args).arg(file).output().expect("run setfattr");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn mode_option_and_xattr() {
    if !fuse_usable() || !tool("getfattr", ATTR_INSTALL) || !tool("setfattr", ATTR_INSTALL) {
        return;
    }
    let pool = Pool::new("modes-opt");
    let m = Mount::new(&pool, "mode=fsync-atomic");
    assert!(m.log_text().contains("new files are fsync-atomic"), "log:\n{}", m.log_text());
    fs::write(m.path("atomic"), b"x").unwrap();
    fs::create_dir(m.path("dir")).unwrap();
    assert_eq!(getfattr(&m.path("atomic")).unwrap(), "fsync-atomic");
    let e = getfattr(&m.path("dir")).unwrap_err();
    assert!(e.contains("No such attribute"), "getfattr of a directory: {e}");

    fs::write(m.path("switched"), b"y").unwrap();
    setfattr(&["-n", "user.ferrite.mode", "-v", "strict"], &m.path("switched")).unwrap();
    assert_eq!(getfattr(&m.path("switched")).unwrap(), "strict");
    let e = setfattr(&["-n", "user.ferrite.mode", "-v", "atomic"], &m.path("switched")).unwrap_err();
    assert!(e.contains("Invalid argument"), "a bad mode: {e}");
    let e = setfattr(&["-x", "user.ferrite.mode"], &m.path("switched")).unwrap_err();
    assert!(e.contains("Invalid argument"), "removal: {e}");
    let e = setfattr(&["-n", "user.ferrite.mode", "-v", "strict"], &m.path("dir")).unwrap_err();
    assert!(e.contains("Invalid argument"), "a directory's mode: {e}");
    setfattr(&["-n", "user.other", "-v", "kept"], &m.path("switched")).unwrap();
    let dump = sh(&m.dir, "getfattr -d switched");
    assert!(dump.contains("user.other") && !dump.contains("ferrite.mode"), "getfattr -d lists: {dump}");
    m.unmount();

    // Without the option new files are strict; old files keep their modes.
    let m = Mount::new(&pool, "");
    assert!(m.log_text().contains("new files are strict"), "log:\n{}", m.log_text());
    fs::write(m.path("plain"), b"z").unwrap();
    assert_eq!(getfattr(&m.path("plain")).unwrap(), "strict");
    assert_eq!(getfattr(&m.path("atomic")).unwrap(), "fsync-atomic");
    assert_eq!(getfattr(&m.path("switched")).unwrap(), "strict");
    setfattr(&["-n", "user.ferrite.mode", "-v", "fsync-atomic"], &m.path("plain")).unwrap();
    m.unmount();
    let m = Mount::new(&pool, "mode=strict");
    assert_eq!(getfattr(&m.path("plain")).unwrap(), "fsync-atomic");
    m.unmount();
    pool.fsck_clean();
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Open for writing with extra open flags.
fn open_with(p: &Path, flags: i32) -> fs::File {
    fs::OpenOptions::new().write(true).read(true).custom_flags(flags).open(p).unwrap()
}

fn pwrite(f: &fs::File, data: &[u8], at: u64) {
    use std::os::unix::fs::FileExt;
    f.write_all_at(data, at).unwrap();
}

/// Write SECOND into a mapping of `f` (grown to hold it first) and msync it.
fn write_mapped_and_msync(f: &fs::File) {
    f.set_len(SECOND.len() as u64).unwrap();
    // SAFETY: a fresh shared mapping of one page of an open file, written
    // within the file's size, synced and unmapped here.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        std::ptr::copy_nonoverlapping(SECOND.as_ptr(), p as *mut u8, SECOND.len());
        assert_eq!(libc::msync(p, 4096, libc::MS_SYNC), 0, "msync: {}", std::io::Error::last_os_error());
        libc::munmap(p, 4096);
    }
}

#[test]
fn commit_points_through_the_kernel_survive_a_killed_daemon() {
    if !fuse_usable() {
        return;
    }
    let pool = Pool::new("modes-kill");
    let m = Mount::new(&pool, "mode=fsync-atomic");
    // Every file starts committed with FIRST (fsync is a commit point).
    let names = [
        "sync",
        "syncfs",
        "fsync",
        "fdatasync",
        "osync",
        "odsync",
        "msync",
        "chmod",
        "setxattr",
        "rename",
        "close",
        "none",
        "truncate",
        "truncate-path",
        "strict",
    ];
    for n in names {
        let mut f = fs::File::create(m.path(n)).unwrap();
        f.write_all(FIRST).unwrap();
        f.sync_all().unwrap();
    }
    let strict = m.path("strict");
    setxattr(&strict, "user.ferrite.mode", "strict");

    // sync(2) and syncfs(2) first: were they commit points of every file,
    // they would commit only their own file here.
    let f = open_with(&m.path("sync"), 0);
    pwrite(&f, SECOND, 0);
    // SAFETY: sync has no arguments and cannot fail.
    unsafe { libc::sync() };
    drop(f);
    let f = open_with(&m.path("syncfs"), 0);
    pwrite(&f, SECOND, 0);
    // SAFETY: syncfs on an open descriptor.
    assert_eq!(unsafe { libc::syncfs(f.as_raw_fd()) }, 0);
    drop(f);

    let f = open_with(&m.path("fsync"), 0);
    pwrite(&f, SECOND, 0);
    f.sync_all().unwrap();
    let f = open_with(&m.path("fdatasync"), 0);
    pwrite(&f, SECOND, 0);
    f.sync_data().unwrap();
    pwrite(&open_with(&m.path("osync"), libc::O_SYNC), SECOND, 0);
    pwrite(&open_with(&m.path("odsync"), libc::O_DSYNC), SECOND, 0);
    write_mapped_and_msync(&open_with(&m.path("msync"), 0));
    let f = open_with(&m.path("chmod"), 0);
    pwrite(&f, SECOND, 0);
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    let f = open_with(&m.path("setxattr"), 0);
    pwrite(&f, SECOND, 0);
    drop(f);
    setxattr(&m.path("setxattr"), "user.note", "x");
    let f = open_with(&m.path("rename"), 0);
    pwrite(&f, SECOND, 0);
    fs::rename(m.path("rename"), m.path("renamed")).unwrap();
    drop(f);
    pwrite(&open_with(&m.path("close"), 0), SECOND, 0);
    pwrite(&open_with(&strict, 0), SECOND, 0);
    open_with(&m.path("truncate"), 0).set_len(3).unwrap();
    // truncate(2) by path reaches the daemon as a setattr of the size
    // alone (no times), a data change as ftruncate is.
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::truncate(c(&m.path("truncate-path")).as_ptr(), 3) }, 0);
    // Left open, never synced: the daemon dies under it.
    let pending = open_with(&m.path("none"), 0);
    pwrite(&pending, SECOND, 0);

    // Every reader sees the new state at once.
    for n in ["sync", "syncfs", "fsync", "fdatasync", "osync", "odsync", "msync", "chmod", "setxattr", "close", "none"]
    {
        assert_eq!(fs::read(m.path(n)).unwrap(), SECOND, "{n} before the kill");
    }
    assert_eq!(fs::read(m.path("renamed")).unwrap(), SECOND);
    assert_eq!(fs::read(m.path("truncate")).unwrap(), &FIRST[..3]);
    assert_eq!(fs::read(m.path("truncate-path")).unwrap(), &FIRST[..3]);

    m.kill();
    drop(pending);
    pool.fsck_clean();
    let m = Mount::new(&pool, "");
    let read = |n: &str| fs::read(m.path(n)).unwrap();
    for n in ["fsync", "fdatasync", "osync", "odsync", "msync", "chmod", "setxattr", "renamed", "strict"] {
        assert_eq!(read(n), SECOND, "{n}: a commit point through the mount did not reach the engine");
    }
    for n in ["close", "none", "truncate", "truncate-path"] {
        assert_eq!(read(n), FIRST, "{n}: not a commit point, yet the write survived the crash");
    }
    for n in ["sync", "syncfs"] {
        let got = read(n);
        assert!(got == FIRST || got == SECOND, "{n}: neither state: {got:?}");
        eprintln!(
            "{n}(2) through the FUSE mount: {}",
            if got == SECOND { "a commit point" } else { "not a commit point (the kernel did not forward it)" }
        );
    }
    m.unmount();
    pool.fsck_clean();
}

fn setxattr(p: &Path, name: &str, v: &str) {
    let (path, name) = (c(p), CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name; the value is `v.len()` bytes.
    let r = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(r, 0, "setxattr {}: {}", p.display(), std::io::Error::last_os_error());
}
