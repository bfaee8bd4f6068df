//! What this proves: buffered mounts (`-o mode=buffered`, issue 13)
//! through FUSE.
//!
//! - The option and its tuning (`buffered_lag_ms=`, `buffered_ops_max=`)
//!   are accepted, the mount line says `mode buffered` with its bounds, a
//!   tuning option without `mode=buffered` (or out of range) is refused
//!   before anything is mounted; `user.ferrite.mode` reads `buffered` on
//!   every regular file, setting `buffered` is EINVAL, setting a stored
//!   mode is accepted and shows again on a mount that is not buffered.
//! - Unmount drains: a tree copied in (`cp -a`) and unmounted at once is
//!   all there, byte for byte, on the next mount, and the pool is clean.
//! - fsync reaches the engine and makes everything before it durable, not
//!   only its file: after writes to several files and fsync, fdatasync, an
//!   O_SYNC write or msync(MS_SYNC) of one of them, the daemon is killed
//!   (SIGKILL) and the next mount finds every write made before each of
//!   them. What sync(2) did is printed, not asserted (the kernel does not
//!   send it to a /dev/fuse daemon: docs/FUSE.md).
//! - The prefix guarantee across a killed daemon: a writer creates and
//!   fills files one after another, fsyncs one of them, and the daemon is
//!   killed a while after that fsync returned, while the writer goes on,
//!   with a long lag (what follows the fsync is still queued) and with a
//!   1 ms lag (the persister is in the middle of it); the recovered pool
//!   holds every file up to the fsynced one, whole, and of the later ones
//!   a prefix in creation order (never a file without all the earlier
//!   ones), fsck-clean.

mod common;

use common::*;
use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn getxattr(p: &Path, name: &str) -> Result<String, i32> {
    let (path, name) = (c(p), CString::new(name).unwrap());
    let mut buf = [0u8; 64];
    // SAFETY: NUL-terminated path and name, and a buffer of 64 bytes.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

fn setxattr(p: &Path, name: &str, v: &str) -> Result<(), i32> {
    let (path, name) = (c(p), CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name; the value is `v.len()` bytes.
    let r = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if r != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(())
}

#[test]
fn buffered_option_line_and_xattr() {
    if !fuse_usable() {
        return;
    }
    // Refused before anything is mounted.
    for bad in ["buffered_lag_ms=5", "mode=strict,buffered_ops_max=10", "mode=buffered,buffered_ops_max=0"] {
        let pool = Pool::new("buffered-bad");
        let dir = new_dir("buffered-bad");
        let out = Command::new(BIN)
            .arg(&pool.path)
            .arg(&dir)
            .arg("-o")
            .arg(format!("foreground,{bad}"))
            .stdin(Stdio::null())
            .output()
            .expect("run ferrite-fuse");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "-o {bad} was accepted");
        assert!(text.contains("buffered"), "-o {bad}: {text}");
        assert!(!pool.path.exists(), "-o {bad}: a pool was created");
        let _ = fs::remove_dir(&dir);
    }

    let pool = Pool::new("buffered-opt");
    let m = Mount::new(&pool, "mode=buffered,buffered_lag_ms=2.5,buffered_ops_max=100");
    let log = m.log_text();
    assert!(log.contains("mode buffered") && log.contains("2.5 ms") && log.contains("100 pending"), "log:\n{log}");
    fs::write(m.path("file"), b"x").unwrap();
    fs::create_dir(m.path("dir")).unwrap();
    assert_eq!(getxattr(&m.path("file"), "user.ferrite.mode"), Ok("buffered".into()));
    assert_eq!(getxattr(&m.path("dir"), "user.ferrite.mode"), Err(libc::ENODATA));
    assert_eq!(setxattr(&m.path("file"), "user.ferrite.mode", "buffered"), Err(libc::EINVAL));
    // A stored mode: kept, not applied here.
    setxattr(&m.path("file"), "user.ferrite.mode", "fsync-atomic").unwrap();
    assert_eq!(getxattr(&m.path("file"), "user.ferrite.mode"), Ok("buffered".into()));
    m.unmount();
    let m = Mount::new(&pool, "");
    assert!(m.log_text().contains("new files are strict"), "log:\n{}", m.log_text());
    assert_eq!(getxattr(&m.path("file"), "user.ferrite.mode"), Ok("fsync-atomic".into()));
    m.unmount();
    pool.fsck_clean();
}

/// A deterministic tree: `files` files of various sizes in nested
/// directories, with a symlink and a hard link.
fn make_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:02}", i % 17));
        fs::create_dir_all(&dir).unwrap();
        let size = match i % 40 {
            0 => 0,
            1 => 1 << 20,
            _ => (i * 7919) % 20_000,
        };
        let data: Vec<u8> = (0..size).map(|j| (i as u8).wrapping_add((j % 253) as u8)).collect();
        fs::write(dir.join(format!("f{i:04}")), data).unwrap();
    }
    std::os::unix::fs::symlink("d00/f0000", root.join("link")).unwrap();
    fs::hard_link(root.join("d01/f0001"), root.join("hard")).unwrap();
}

#[test]
fn unmount_drains_everything() {
    if !fuse_usable() {
        return;
    }
    let src = TempDir::new("buffered-tree");
    make_tree(&src.0, 400);
    let pool = Pool::new("buffered-drain");
    // A long lag and a large bound: much is pending when the unmount comes.
    let m = Mount::new(&pool, "mode=buffered,buffered_lag_ms=10000,buffered_ops_max=1000000");
    sh(&m.dir, &format!("cp -a {} {}/copy", src.0.display(), m.dir.display()));
    m.unmount(); // at once; says "is clean"
    assert!(pool.marked_clean());
    pool.fsck_clean();
    let m = Mount::new(&pool, "");
    assert!(!m.log_text().contains("recovered"), "log:\n{}", m.log_text());
    assert_eq!(manifest(&src.0), manifest(&m.path("copy")));
    m.unmount();
}

fn write_file(p: &Path, data: &[u8], flags: i32) -> fs::File {
    let mut f =
        fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).custom_flags(flags).open(p).unwrap();
    f.write_all(data).unwrap();
    f
}

#[test]
fn fsync_makes_everything_before_it_durable() {
    if !fuse_usable() {
        return;
    }
    let pool = Pool::new("buffered-fsync");
    let m = Mount::new(&pool, "mode=buffered,buffered_lag_ms=10000,buffered_ops_max=1000000");
    let mut must = Vec::new();
    // Each group: files written without a sync, then one sync point of
    // another file; everything written before it must survive.
    let point = |m: &Mount, must: &mut Vec<String>, kind: &str| {
        for i in 0..5 {
            let n = format!("{kind}-before-{i}");
            drop(write_file(&m.path(&n), n.as_bytes(), 0));
            must.push(n);
        }
        let n = format!("{kind}-point");
        match kind {
            "fsync" => write_file(&m.path(&n), n.as_bytes(), 0).sync_all().unwrap(),
            "fdatasync" => write_file(&m.path(&n), n.as_bytes(), 0).sync_data().unwrap(),
            "osync" => drop(write_file(&m.path(&n), n.as_bytes(), libc::O_SYNC)),
            "odsync" => drop(write_file(&m.path(&n), n.as_bytes(), libc::O_DSYNC)),
            "msync" => {
                let f = write_file(&m.path(&n), &vec![0u8; n.len()], 0);
                // SAFETY: a fresh shared mapping of the file's one page,
                // written within its size, synced and unmapped here.
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
                    std::ptr::copy_nonoverlapping(n.as_ptr(), p as *mut u8, n.len());
                    assert_eq!(libc::msync(p, 4096, libc::MS_SYNC), 0);
                    libc::munmap(p, 4096);
                }
            }
            _ => unreachable!(),
        }
        must.push(n);
    };
    for kind in ["fsync", "fdatasync", "osync", "odsync", "msync"] {
        point(&m, &mut must, kind);
    }
    // Then sync(2) (which the kernel does not forward) after one more file.
    drop(write_file(&m.path("sync-before"), b"sync-before", 0));
    // SAFETY: sync has no arguments and cannot fail.
    unsafe { libc::sync() };
    m.kill();
    pool.fsck_clean();
    let m = Mount::new(&pool, "mode=buffered");
    assert!(m.log_text().contains("recovered"), "log:\n{}", m.log_text());
    for n in &must {
        assert_eq!(fs::read(m.path(n)).ok().as_deref(), Some(n.as_bytes()), "{n}: written before a sync point, lost");
    }
    eprintln!(
        "sync(2) through the FUSE mount of a buffered pool: the file written before it {}",
        match fs::read(m.path("sync-before")) {
            Ok(b) if b == b"sync-before" => "survived (made durable by the persister, or forwarded)",
            _ => "did not survive (the kernel did not forward sync)",
        }
    );
    m.unmount();
    pool.fsck_clean();
}

/// The writer of `prefix_after_a_killed_daemon`: files f0000.. created and
/// filled one after another; after file SYNC_AT it fsyncs it and says so,
/// and it says when it has written file REACH (no fsync there).
const WRITER: &str = r#"
import os, sys
d, n, sync_at, reach = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    fd = os.open(os.path.join(d, "f%04d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, bytes([i % 251]) * (100 + i))
    if i == sync_at:
        os.fsync(fd)
        print("synced", flush=True)
    os.close(fd)
    if i == reach:
        print("reached", flush=True)
print("done", flush=True)
"#;

#[test]
fn prefix_after_a_killed_daemon() {
    if !fuse_usable() || !tool("python3", "apt-get install -y python3") {
        return;
    }
    // A long lag: what follows the fsync is still queued at the kill. A
    // short one: the persister keeps up, and the kill lands somewhere in
    // the middle of what it persists.
    for lag in ["10000", "1"] {
        prefix_after_a_killed_daemon_with(&format!("mode=buffered,buffered_lag_ms={lag},buffered_ops_max=1000000"));
    }
}

fn prefix_after_a_killed_daemon_with(opts: &str) {
    const N: usize = 4000;
    const SYNC_AT: usize = 300;
    const REACH: usize = 2000;
    let pool = Pool::new("buffered-prefix");
    let m = Mount::new(&pool, opts);
    fs::create_dir(m.path("w")).unwrap();
    let mut writer = Command::new("python3")
        .arg("-c")
        .arg(WRITER)
        .arg(m.path("w"))
        .arg(N.to_string())
        .arg(SYNC_AT.to_string())
        .arg(REACH.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python3");
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().map(|l| l.unwrap()).as_deref(), Some("synced"), "the writer did not reach its fsync");
    assert_eq!(lines.next().map(|l| l.unwrap()).as_deref(), Some("reached"), "the writer did not reach f{REACH:04}");
    m.kill(); // while the writer goes on
    let _ = writer.kill();
    let _ = writer.wait();
    pool.fsck_clean();
    let m = Mount::new(&pool, "");
    let mut present = 0;
    while present < N && m.path(&format!("w/f{present:04}")).exists() {
        present += 1;
    }
    for i in 0..N {
        let got = fs::read(m.path(&format!("w/f{i:04}"))).ok();
        let whole = vec![(i % 251) as u8; 100 + i];
        match got {
            Some(b) if b == whole => assert!(i < present, "f{i:04} is there but an earlier file is not"),
            // The last file of the prefix may have been created and not yet written.
            Some(b) if b.is_empty() && i + 1 == present && i > SYNC_AT => {}
            Some(b) => panic!("f{i:04}: {} bytes, neither empty nor whole (present: {present})", b.len()),
            None => assert!(i >= present, "f{i:04} is missing"),
        }
    }
    assert!(present > SYNC_AT, "only {present} files: the fsync of f{SYNC_AT:04} did not make them durable");
    eprintln!("-o {opts}: after the kill, {present} of the files (f{SYNC_AT:04} was fsynced), a prefix");
    m.unmount();
    pool.fsck_clean();
}
