//! Shared harness of the FUSE tests: a fresh pool mounted in a temporary
//! directory by the real daemon (`ferrite-fuse ... -o foreground`, the same
//! code path as `ferrite mount`), helpers to run programs on it, to stop it
//! in every way (unmount, signals, SIGKILL), and to check the pool.
//!
//! Tests skip with a message when FUSE cannot be used here (not root, or
//! /dev/fuse cannot be opened). A missing external tool (fio, stress-ng,
//! fsx, ...) skips with a message, or fails when CI=true: CI must install it.

#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ferrite-fuse");

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

/// Say that a test is skipped, past the test harness's output capture
/// (so it shows in a normal `cargo test` run).
fn skip(msg: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP: {msg}");
}

/// Can this process mount FUSE file systems? If not, say why (the test
/// then skips).
pub fn fuse_usable() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("FUSE tests need root (the pure-Rust mount calls mount(2))".into());
        return false;
    }
    if let Err(e) = File::options().read(true).write(true).open("/dev/fuse") {
        skip(format!("/dev/fuse cannot be opened ({e}): no FUSE here"));
        return false;
    }
    true
}

/// Is `tool` installed? Missing: skip (false) with a message, or panic
/// under CI=true with the install command.
pub fn tool(tool: &str, install: &str) -> bool {
    if which(tool).is_some() {
        return true;
    }
    if ci() {
        panic!("`{tool}` is required by this test in CI but is not installed; install it with: {install}");
    }
    skip(format!("`{tool}` is not installed (install: {install})"));
    false
}

/// Where `tool` is: in PATH, or in cargo's bin directory (for tools
/// installed with `cargo install`).
pub fn which(tool: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(c) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(c).join("bin"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(tool)).find(|p| p.is_file())
}

/// An env var as a number, or a default (for the long parts of the tests).
pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Where test pools go: tmpfs, as in real use.
fn pool_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A pool file removed when dropped.
pub struct Pool {
    pub path: PathBuf,
}

impl Pool {
    pub fn new(label: &str) -> Pool {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = pool_dir().join(format!("ferrite-fuse-test-{}-{n}-{label}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Pool { path }
    }

    /// fsck of the pool (it must not be mounted); panics on any problem.
    pub fn fsck_clean(&self) {
        let pmem = ferrite_pmem::Pmem::open_file(&self.path, 64 * 4096).expect("open pool for fsck");
        let report = ferrite::fsck::check(&pmem).expect("fsck runs");
        assert!(report.is_clean(), "fsck found problems in {}:\n{report}", self.path.display());
    }

    /// Was the pool left marked clean (cleanly unmounted)?
    pub fn marked_clean(&self) -> bool {
        let pmem = ferrite_pmem::Pmem::open_file(&self.path, 64 * 4096).expect("open pool");
        let sb = ferrite::read_superblock(&pmem).expect("superblock");
        sb.state == ferrite::format::MountState::Clean
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A pool mounted by a foreground daemon in a temporary directory.
pub struct Mount {
    pub dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

pub fn new_dir(label: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ferrite-fuse-test-{}-{n}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create mount point");
    dir
}

fn mounted_at(dir: &Path) -> bool {
    ferrite_fuse::daemon::fuse_mount_at(dir).is_some()
}

impl Mount {
    /// Mount `pool` at a fresh directory with extra `-o` options.
    pub fn new(pool: &Pool, opts: &str) -> Mount {
        Self::with_env(pool, opts, &[])
    }

    pub fn with_env(pool: &Pool, opts: &str, env: &[(&str, &str)]) -> Mount {
        let dir = new_dir("mnt");
        Self::at(pool, &dir, opts, env)
    }

    /// Mount `pool` at `dir`.
    pub fn at(pool: &Pool, dir: &Path, opts: &str, env: &[(&str, &str)]) -> Mount {
        let log = dir.with_extension("log");
        let logf = File::create(&log).expect("log file");
        let mut all = String::from("foreground,size=512M");
        if !opts.is_empty() {
            all.push(',');
            all.push_str(opts);
        }
        let mut cmd = Command::new(BIN);
        cmd.arg(&pool.path)
            .arg(dir)
            .arg("-o")
            .arg(&all)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn ferrite-fuse");
        let start = Instant::now();
        loop {
            // The daemon logs "mounted" once the kernel completed the FUSE
            // handshake (a dead mount at `dir` does not count).
            if mounted_at(dir) && std::fs::read_to_string(&log).unwrap_or_default().contains("mounted ") {
                break;
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "ferrite-fuse exited ({st}) before mounting:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(start.elapsed() < Duration::from_secs(60), "mount did not appear within 60 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        Mount { dir: dir.to_path_buf(), log, child: Some(child) }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("daemon did not exit within {limit:?}; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `ferrite umount` (the library call behind it), then the daemon must
    /// exit 0 and the pool be left clean.
    pub fn unmount(self) -> String {
        self.unmount_saying("is clean")
    }

    /// `ferrite umount`, the daemon exiting 0, and the umount message
    /// containing `expect` (e.g. "is NOT clean" after a read-only mount of
    /// a crashed pool, which never writes the pool).
    pub fn unmount_saying(mut self, expect: &str) -> String {
        let msg =
            umount_when_not_busy(&self.dir).unwrap_or_else(|e| panic!("umount failed: {e}\nlog:\n{}", self.log_text()));
        let st = self.wait(Duration::from_secs(60));
        assert!(st.success(), "daemon exit status {st}; log:\n{}", self.log_text());
        assert!(msg.contains(expect), "unexpected umount message: {msg}");
        msg
    }

    /// Send a signal and wait for the daemon to exit.
    pub fn signal(mut self, sig: i32) -> ExitStatus {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.pid() as i32, sig) };
        let st = self.wait(Duration::from_secs(60));
        assert!(!mounted_at(&self.dir), "still mounted after the daemon exited");
        st
    }

    /// Reap a daemon that was killed from outside, leaving its mount as it
    /// is (dead, or removed by fusermount3).
    pub fn reap(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// SIGKILL the daemon (a crash), then remove the dead mount.
    pub fn kill(mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.pid() as i32, libc::SIGKILL) };
        let _ = self.wait(Duration::from_secs(30));
        let start = Instant::now();
        // auto_unmount (fusermount3) removes it; otherwise do it here.
        while mounted_at(&self.dir) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if mounted_at(&self.dir) {
            ferrite_fuse::daemon::unmount_path(&self.dir, true).expect("remove dead mount");
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = ferrite_fuse::daemon::unmount_path(&self.dir, true);
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir(&self.dir);
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// Run a shell command in `cwd`; panics with its output if it fails.
pub fn sh(cwd: &Path, script: &str) -> String {
    let out = Command::new("bash")
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .output()
        .expect("run bash");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "command failed ({}) in {}:\n{script}\n--- output ---\n{text}",
        out.status,
        cwd.display()
    );
    text
}

/// A checksum manifest of a tree: "sha256  path" lines for files, and
/// type/mode/size/link-target lines for everything, sorted.
pub fn manifest(root: &Path) -> String {
    sh(
        root,
        "find . -printf '%y %m %s %n %p -> %l\\n' | sort; \
         find . -type f -print0 | sort -z | xargs -0 -r sha256sum",
    )
}

/// A temporary directory on the ordinary file system, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        TempDir(new_dir(label))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ferrite umount` (not lazy), tried again for up to 10 s while it answers
/// "busy". A test that has closed all of its files can still find its mount
/// busy for a moment: a sibling test thread that spawns a program forks the
/// whole descriptor table, and the child holds this test's open files until
/// its `exec` closes them (seen under load: `copy_file_range_inside_the_pool`
/// failed so once in 12 runs of the suite beside two busy loops).
pub fn umount_when_not_busy(dir: &Path) -> Result<String, String> {
    let start = Instant::now();
    loop {
        match ferrite_fuse::umount(dir, false, Duration::from_secs(60)) {
            Err(e) if e.contains(": busy:") && start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            r => return r,
        }
    }
}
