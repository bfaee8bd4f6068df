//! What this proves: fsx (the File System eXerciser, `cargo install fsx`)
//! finds no mismatch on a Ferrite FUSE mount over several seeds of 50,000
//! operations each — pread/pwrite, mmap reads and writes with msync,
//! truncate, fallocate, fsync/fdatasync, sendfile, copy_file_range, fadvise,
//! close/reopen — and the pool is fsck-clean afterwards; and that killing
//! the daemon with SIGKILL in the middle of an fsx run leaves a pool that the
//! next mount recovers and that fsck finds clean.
//!
//! FERRITE_FUSE_FSX_SEEDS (default 3) and FERRITE_FUSE_FSX_OPS (default
//! 50000) size the run.

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
