//! What this proves: fsx (the File System eXerciser, `cargo install fsx`)
//! finds no mismatch on a Ferrite FUSE mount over several seeds of 50,000
//! operations each — pread/pwrite, mmap reads and writes with msync,
//! truncate, fallocate, fsync/fdatasync, sendfile, copy_file_range, fadvise,
//! close/reopen — and the pool is fsck-clean afterwards; and that killing
//! the daemon with SIGKILL in the middle of an fsx run leaves a pool that the
//! next mount recovers and that fsck finds clean.
//!
//! And that fsx with small random writes (1 B..1 KiB, heavy on writes and
//! reads, with truncates, fsyncs, mapped writes and hole punches: the
//! engine's sub-page writes) finds no mismatch on a strict mount, on a
//! `-o mode=fsync-atomic` mount (where its file is fsync-atomic, so every
//! write is pending until fsx's next fsync, fdatasync or msync) and on a
//! `-o mode=buffered` mount (every operation returns before it is durable;
//! the persister catches up in the background), all fsck-clean
//! afterwards; and that a daemon killed in the middle of the fsync-atomic
//! run, and of the buffered run, leaves a pool that is fsck-clean and
//! mounts again.
//!
//! FERRITE_FUSE_FSX_SEEDS (default 3) and FERRITE_FUSE_FSX_OPS (default
//! 50000) size the first run; FERRITE_FUSE_FSX_SMALL_SEEDS (default 1 per
//! mode) and FERRITE_FUSE_FSX_SMALL_OPS (default 20000) the small-write one.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const INSTALL: &str = "cargo install fsx --version 0.3.2 --locked";

/// The fsx configuration: every operation fsx has (hole punching
/// included), files up to 1 MiB, operations of 1 B..128 KiB (not
/// 0: fsx 0.3.2 takes the EINVAL of a zero-length posix_fallocate, which
/// every Linux file system answers, for "not supported" and stops).
fn config(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("fsx.toml");
    std::fs::write(
        &p,
        "flen = 1048576\n\
         [opsize]\nmin = 1\nmax = 131072\n\
         [weights]\nclose_open = 1\nread = 10\nwrite = 10\nmapread = 10\nmapwrite = 10\n\
         invalidate = 1\ntruncate = 3\nfsync = 1\nfdatasync = 1\nposix_fallocate = 2\n\
         punch_hole = 2\nsendfile = 1\nposix_fadvise = 1\ncopy_file_range = 2\n",
    )
    .unwrap();
    p
}

/// The small-write configuration: operations of 1 B..1 KiB on a file of
/// at most 256 KiB, mostly writes and reads, with truncates, fsyncs, mapped
/// I/O, hole punches and fallocates now and then.
fn small_config(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("fsx-small.toml");
    std::fs::write(
        &p,
        "flen = 262144
         [opsize]
min = 1
max = 1024
         [weights]
close_open = 1
read = 10
write = 20
mapread = 2
mapwrite = 2
         truncate = 2
fsync = 2
fdatasync = 1
posix_fallocate = 1
punch_hole = 1
copy_file_range = 1
",
    )
    .unwrap();
    p
}

/// The consistency mode of a file, through the mount (`user.ferrite.mode`).
fn file_mode(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 32];
    // SAFETY: a NUL-terminated path and name, and a buffer of 32 bytes.
    let n = unsafe { libc::getxattr(p.as_ptr(), c"user.ferrite.mode".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0, "getxattr user.ferrite.mode of {}: {}", path.display(), std::io::Error::last_os_error());
    String::from_utf8_lossy(&buf[..n as usize]).into_owned()
}

fn run_fsx(conf: &Path, artifacts: &Path, file: &Path, seed: u64, ops: u64) -> std::process::Output {
    Command::new(which("fsx").expect("fsx"))
        .arg("-f")
        .arg(conf)
        .arg("-N")
        .arg(ops.to_string())
        .arg("-S")
        .arg(seed.to_string())
        .arg("-P")
        .arg(artifacts)
        .arg(file)
        .output()
        .expect("run fsx")
}

#[test]
fn fsx_seeds() {
    if !fuse_usable() || !tool("fsx", INSTALL) {
        return;
    }
    let seeds = env_num("FERRITE_FUSE_FSX_SEEDS", 3);
    let ops = env_num("FERRITE_FUSE_FSX_OPS", 50_000);
    let art = TempDir::new("fsx-art");
    let conf = config(&art.0);
    let pool = Pool::new("fsx");
    let m = Mount::new(&pool, "");
    for seed in 1..=seeds {
        let out = run_fsx(&conf, &art.0, &m.path(&format!("fsx-{seed}")), seed, ops);
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "fsx seed {seed} failed:\n{}",
            text.lines().take(60).collect::<Vec<_>>().join("\n")
        );
        eprintln!("fsx seed {seed}: {ops} operations, no mismatch");
    }
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn sigkill_mid_fsx_then_recover() {
    if !fuse_usable() || !tool("fsx", INSTALL) {
        return;
    }
    let art = TempDir::new("fsx-kill");
    let conf = config(&art.0);
    let pool = Pool::new("fsx-kill");
    let m = Mount::new(&pool, "");
    std::fs::create_dir(m.path("keep")).unwrap();
    std::fs::write(m.path("keep/before"), b"written before the crash").unwrap();
    let mut fsx = Command::new(which("fsx").expect("fsx"))
        .arg("-f")
        .arg(&conf)
        .arg("-S")
        .arg("77")
        .arg("-P")
        .arg(&art.0)
        .arg(m.path("victim"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fsx");
    std::thread::sleep(Duration::from_millis(env_num("FERRITE_FUSE_KILL_AFTER_MS", 3000)));
    assert!(fsx.try_wait().unwrap().is_none(), "fsx ended before the kill");
    m.kill();
    let _ = fsx.kill();
    let _ = fsx.wait();
    assert!(!pool.marked_clean(), "a killed daemon cannot have marked the pool clean");
    pool.fsck_clean(); // fsck works on a copy: the crash image itself is consistent

    let m = Mount::new(&pool, "");
    assert!(m.log_text().contains("recovered"), "no recovery reported:\n{}", m.log_text());
    assert_eq!(std::fs::read(m.path("keep/before")).unwrap(), b"written before the crash");
    let victim = std::fs::metadata(m.path("victim")).unwrap();
    assert!(victim.len() <= 1 << 20);
    // The recovered file system is fully usable.
    let out = run_fsx(&conf, &art.0, &m.path("after"), 78, 2000);
    assert!(out.status.success(), "fsx after recovery failed: {}", String::from_utf8_lossy(&out.stderr));
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn fsx_small_writes_strict_fsync_atomic_and_buffered() {
    if !fuse_usable() || !tool("fsx", INSTALL) {
        return;
    }
    let seeds = env_num("FERRITE_FUSE_FSX_SMALL_SEEDS", 1);
    let ops = env_num("FERRITE_FUSE_FSX_SMALL_OPS", 20_000);
    let art = TempDir::new("fsx-small-art");
    let conf = small_config(&art.0);
    for (opts, mode) in [("", "strict"), ("mode=fsync-atomic", "fsync-atomic"), ("mode=buffered", "buffered")] {
        let pool = Pool::new("fsx-small");
        let m = Mount::new(&pool, opts);
        for seed in 1..=seeds {
            let file = m.path(&format!("small-{seed}"));
            let out = run_fsx(&conf, &art.0, &file, 100 + seed, ops);
            let text = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "fsx small writes, {mode} mount, seed {}, failed:\n{}",
                100 + seed,
                text.lines().take(60).collect::<Vec<_>>().join("\n")
            );
            assert_eq!(file_mode(&file), mode, "fsx's file on a {mode} mount");
            eprintln!("fsx small writes, {mode} mount, seed {}: {ops} operations, no mismatch", 100 + seed);
        }
        if mode != "strict" {
            // A crash in the middle of small writes with epochs (or, on
            // the buffered mount, operations) pending.
            let mut fsx = Command::new(which("fsx").expect("fsx"))
                .arg("-f")
                .arg(&conf)
                .arg("-S")
                .arg("177")
                .arg("-P")
                .arg(&art.0)
                .arg(m.path("victim"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn fsx");
            std::thread::sleep(Duration::from_millis(env_num("FERRITE_FUSE_KILL_AFTER_MS", 3000) / 2));
            assert!(fsx.try_wait().unwrap().is_none(), "fsx ended before the kill");
            m.kill();
            let _ = fsx.kill();
            let _ = fsx.wait();
            pool.fsck_clean();
            let m = Mount::new(&pool, opts);
            let victim = std::fs::metadata(m.path("victim")).unwrap();
            assert!(victim.len() <= 256 << 10, "victim of {} bytes", victim.len());
            assert_eq!(file_mode(&m.path("victim")), mode);
            m.unmount();
        } else {
            m.unmount();
        }
        pool.fsck_clean();
    }
}
