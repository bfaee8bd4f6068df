//! Shared harness of the preload tests: where libferrite.so is, a fresh
//! pool and root per test, running programs under the preload library (and
//! the same steps on tmpfs, to diff), and checking the pool afterwards.
//!
//! A missing external tool skips the test with a message, or fails it when
//! CI=true (CI must install it).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP: {msg}");
}

/// The target directory of this test binary (target/<profile>).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// libferrite.so as cargo built it for these tests (in deps/ when only
/// the tests were built, beside it too after `cargo build -p ferrite-c`).
pub fn library() -> PathBuf {
    let dir = target_dir();
    for lib in [dir.join("deps/libferrite.so"), dir.join("libferrite.so")] {
        if lib.is_file() {
            return lib;
        }
    }
    panic!("libferrite.so is missing from {}: cargo builds it with the crate's tests", dir.display());
}

/// Is `tool` installed? Missing: skip (false), or panic under CI=true.
pub fn tool(tool: &str) -> bool {
    let found =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file())).unwrap_or(false);
    if found {
        return true;
    }
    if ci() {
        panic!("`{tool}` is required by this test in CI but is not installed (.ci/run installs it)");
    }
    skip(&format!("`{tool}` is not installed"));
    false
}

/// The Python interpreter with the lmdb module (Debian's python3-lmdb is
/// for the system's interpreter), or None after saying why (a failure
/// under CI=true: .ci/run installs it).
pub fn python_with_lmdb() -> Option<&'static str> {
    let python = if Path::new("/usr/bin/python3").is_file() { "/usr/bin/python3" } else { "python3" };
    if Command::new(python).args(["-c", "import lmdb"]).status().is_ok_and(|s| s.success()) {
        return Some(python);
    }
    if ci() {
        panic!("Python's lmdb module is required by this test in CI (.ci/run installs python3-lmdb)");
    }
    skip("Python's lmdb module is not installed (apt-get install python3-lmdb)");
    None
}

/// Can this process mount FUSE file systems (the owner's mount)?
pub fn fuse_usable() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("the preload library's mount needs root here");
        return false;
    }
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_err() {
        skip("/dev/fuse cannot be opened");
        return false;
    }
    true
}

/// One test's pool and root, and a tmpfs directory for the same steps
/// without Ferrite. Everything is removed on drop.
pub struct Env {
    pub pool: PathBuf,
    pub root: PathBuf,
    pub tmpfs: PathBuf,
    pub mount: bool,
    /// Extra environment of every preloaded command (e.g. FERRITE_MODE).
    pub vars: Vec<(String, String)>,
}

impl Env {
    /// A fresh pool (created by the library on first use) and root.
    /// `mount`: whether the owner serves the FUSE mount at the root.
    pub fn new(name: &str, mount: bool) -> Env {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{name}-{}-{n}", std::process::id());
        let pool = PathBuf::from(format!("/dev/shm/ferrite-preload-{id}.pool"));
        let root = PathBuf::from(format!("/tmp/ferrite-preload-{id}/root"));
        let tmpfs = PathBuf::from(format!("/dev/shm/ferrite-preload-{id}-tmpfs"));
        let _ = std::fs::remove_file(&pool);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&tmpfs).unwrap();
        Env { pool, root, tmpfs, mount, vars: Vec::new() }
    }

    /// As `new`, with every preloaded program on a buffered mount
    /// (FERRITE_MODE=buffered).
    pub fn buffered(name: &str, mount: bool) -> Env {
        let mut e = Env::new(name, mount);
        e.vars.push(("FERRITE_MODE".into(), "buffered".into()));
        e
    }

    /// A command run under the preload library with this pool and root.
    pub fn preloaded(&self, prog: &str) -> Command {
        self.preloaded_with(prog, self.mount)
    }

    /// As `preloaded`, choosing whether the owner serves the mount.
    pub fn preloaded_with(&self, prog: &str, mount: bool) -> Command {
        let mut c = Command::new(prog);
        c.env("LD_PRELOAD", library())
            .env("FERRITE_POOL", &self.pool)
            .env("FERRITE_ROOT", &self.root)
            .env("FERRITE_MOUNT", if mount { "1" } else { "0" })
            .env("FERRITE_SIZE", "64M")
            .env_remove("FERRITE_FDS");
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    /// The same command without the library (for the tmpfs side).
    pub fn plain(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env_remove("LD_PRELOAD");
        c
    }

    /// Check the pool as `ferrite fsck` does (on a private view, recovering
    /// first if it was not unmounted cleanly); panics with the report if it
    /// is not clean. Returns whether it had been unmounted cleanly.
    pub fn fsck(&self) -> bool {
        self.fsck_if_made().expect("the pool was never created")
    }

    /// As `fsck`; None if there is no pool (a program killed before it
    /// finished creating one leaves none: creation publishes it whole).
    pub fn fsck_if_made(&self) -> Option<bool> {
        if !self.pool.exists() {
            return None;
        }
        // A killed owner's forked children hold its descriptors for the
        // moment between fork and the library's fork handler (which closes
        // them): wait for them a little.
        let mut tries = 0;
        let pmem = loop {
            match ferrite_pmem::Pmem::open_file_private(&self.pool, 1 << 20, true) {
                Ok(p) => break p,
                Err(ferrite_pmem::PmemError::AlreadyOpen) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!(
                    "open the pool: {e:?}; processes holding it: {:?}; /proc/locks:\n{}",
                    holders(&self.pool),
                    std::fs::read_to_string("/proc/locks").unwrap_or_default()
                ),
            }
        };
        let sb = engine::read_superblock(&pmem).expect("a Ferrite pool");
        let clean = sb.state == engine::format::MountState::Clean;
        let report = engine::fsck::check_private(pmem).expect("check the pool");
        assert!(report.is_clean(), "fsck found problems:\n{report}");
        Some(clean)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(dir) = self.root.parent() {
            // A mount left by a killed owner: detach it before removing.
            // SAFETY: a NUL-terminated path; umount2 touches nothing else.
            let c = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes()).unwrap();
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            let _ = std::fs::remove_dir_all(dir);
        }
        let _ = std::fs::remove_dir_all(&self.tmpfs);
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// Run, require success, and return stdout (stderr is shown on failure).
pub fn run(c: &mut Command) -> String {
    let out = c.stdin(Stdio::null()).output().expect("start the program");
    check(c, &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// As `run`, failing (after killing the program) when it has not ended
/// within `limit`: for a program whose bug is to wait forever. Its output
/// is read once it ends, so it must fit the pipes (64 KiB each).
pub fn run_within(c: &mut Command, limit: std::time::Duration) -> String {
    let mut child =
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the program");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait for the program").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the killed program");
            panic!(
                "{c:?} did not end within {limit:?}:\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect the program's output");
    check(c, &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// As `run`, with the program's standard error too: (stdout, stderr).
pub fn run_with_stderr(c: &mut Command) -> (String, String) {
    let out = c.stdin(Stdio::null()).output().expect("start the program");
    check(c, &out);
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

pub fn check(c: &Command, out: &Output) {
    assert!(
        out.status.success(),
        "{:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        c,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compare two transcripts line by line, with a readable first difference.
pub fn same(what: &str, tmpfs: &str, ferrite: &str) {
    if tmpfs == ferrite {
        return;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (tmpfs.lines().collect(), ferrite.lines().collect());
    for i in 0..a.len().max(b.len()) {
        if a.get(i) != b.get(i) {
            panic!(
                "{what}: the preload run differs from tmpfs at line {}:\n  tmpfs:   {:?}\n  ferrite: {:?}\n\nfull tmpfs output:\n{tmpfs}\n\nfull ferrite output:\n{ferrite}",
                i + 1,
                a.get(i),
                b.get(i)
            );
        }
    }
}

/// Replace `dir` in `text` with `DIR`, so two runs in different places compare.
pub fn relative(text: &str, dir: &Path) -> String {
    text.replace(&*dir.to_string_lossy(), "DIR")
}

/// The processes (pid and command line) that have `path` open.
pub fn holders(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for f in fds.flatten() {
            if std::fs::read_link(f.path()).map(|t| t == path).unwrap_or(false) {
                let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                out.push(format!(
                    "{} {}",
                    p.file_name().to_string_lossy(),
                    String::from_utf8_lossy(&cmd).replace('\0', " ")
                ));
            }
        }
    }
    out
}
