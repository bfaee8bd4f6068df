//! Shared support for the whole-system tests.
//!
//! - [`seed_from_env`]: the seed of a randomized test, from an environment
//!   variable (replay) or fresh, always printed.
//! - [`walk`]: a bounded, cycle-proof walk of a possibly corrupted tree.
//! - [`isolate`]: runs numbered trials in a child process, so that an abort
//!   or a hang of one trial is reported with its number instead of killing
//!   the whole test binary.
//! - small file helpers over [`PathFs`], and [`add_ballast`], which fills
//!   a nearly full pool's engine and model alike.

use ferrite::{Errno, Fd, ManualClock, OpenFlags, PathFs, TimeSpec};
use std::sync::Arc;

pub use ferrite_model::{diff_trees, tree_of, Tree};

/// The seed of a randomized test: the value of the environment variable
/// `var` if it is set (decimal or 0x-hex; `random` for a fresh one),
/// otherwise `default`, so that a plain `cargo test` is reproducible.
/// Printed either way, with the line that replays it.
pub fn seed_from_env(var: &str, test: &str, default: u64) -> u64 {
    let seed = match std::env::var(var) {
        Ok(s) if s.trim() == "random" => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            splitmix64(t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32))
        }
        Ok(s) => parse_u64(&s).unwrap_or_else(|| panic!("{var}={s:?} is not a number")),
        Err(_) => default,
    };
    eprintln!("{test}: seed {seed:#x} (replay: {var}={seed:#x}; {var}=random for a fresh one)");
    seed
}

/// Parse a decimal or `0x` hexadecimal u64.
pub fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A good 64-bit mixer: derive independent sub-seeds from one seed.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A manual clock starting at `sec` seconds.
pub fn manual_clock(sec: i64) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(TimeSpec { sec, nsec: 0 }))
}

pub fn ts(sec: i64, nsec: u32) -> TimeSpec {
    TimeSpec { sec, nsec }
}

/// Create (or truncate) `path` and write `data` into it.
pub fn put(fs: &dyn PathFs, path: &[u8], data: &[u8]) -> Result<(), Errno> {
    let fd = fs.open(path, OpenFlags::WRONLY.create().trunc(), 0o644)?;
    let r = if data.is_empty() { Ok(0) } else { fs.pwrite(fd, data, 0) };
    let c = fs.close(fd);
    let n = r?;
    c?;
    assert_eq!(n, data.len(), "short write to {}", path.escape_ascii());
    Ok(())
}

/// The whole content of an open file.
pub fn read_fd(fs: &dyn PathFs, fd: Fd) -> Result<Vec<u8>, Errno> {
    let size = fs.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size + 1];
    let mut got = 0;
    loop {
        let n = fs.pread(fd, &mut buf[got..], got as u64)?;
        got += n;
        if n == 0 || got == buf.len() {
            break;
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// The whole content of `path` (following symlinks).
pub fn get(fs: &dyn PathFs, path: &[u8]) -> Result<Vec<u8>, Errno> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
    let r = read_fd(fs, fd);
    let c = fs.close(fd);
    let v = r?;
    c?;
    Ok(v)
}

/// Unmount `fs` cleanly (`crash` false) or drop it as a crash (`crash`
/// true), check the pool with fsck (it must be clean), and mount a copy of
/// its image: what a restart after either would find.
pub fn remount(fs: ferrite::Session, crash: bool) -> ferrite::Session {
    remount_checked(fs, crash).0
}

/// `remount`, also returning the fsck report of the image it mounted.
pub fn remount_checked(fs: ferrite::Session, crash: bool) -> (ferrite::Session, ferrite::fsck::FsckReport) {
    remount_as(fs, crash, &ferrite::MountOptions::default())
}

/// `remount_checked` with mount options of the caller's (a buffered mount).
pub fn remount_as(
    fs: ferrite::Session,
    crash: bool,
    opts: &ferrite::MountOptions,
) -> (ferrite::Session, ferrite::fsck::FsckReport) {
    let pmem = fs.pmem().clone();
    if crash {
        drop(fs);
    } else {
        fs.unmount().unwrap();
    }
    let image = pmem.image();
    let report = ferrite::fsck::check(&ferrite_pmem::Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    let fs = ferrite::Session::mount(ferrite_pmem::Pmem::from_image(&image), opts).unwrap();
    (fs, report)
}

/// Fill a nearly full pool's test pair: a file `/ballast` (a name the
/// random sequences never make), written on the engine `engine` and on
/// the model `model` alike, in chunks of `chunk_len` bytes then in pages,
/// until the engine has at most `free` pages available (statfs's
/// `blocks_avail`: beyond its removal reserve), then synced and closed on
/// both sides. The model must have room for all of it.
pub fn add_ballast(engine: &ferrite::Session, model: &dyn PathFs, free: u64, chunk_len: usize) {
    const PAGE: usize = 4096;
    let chunk = vec![0xb5u8; chunk_len.max(PAGE)];
    let (x, y) = (
        engine.open(b"/ballast", OpenFlags::WRONLY.create(), 0o600).expect("ballast"),
        model.open(b"/ballast", OpenFlags::WRONLY.create(), 0o600).expect("ballast"),
    );
    let available = || engine.statfs().expect("statfs").blocks_avail;
    let chunk_pages = (chunk.len() / PAGE) as u64;
    let mut at = 0;
    while available() > free + chunk_pages + 3 {
        engine.pwrite(x, &chunk, at).expect("ballast write");
        model.pwrite(y, &chunk, at).expect("ballast write");
        at += chunk.len() as u64;
    }
    while available() > free {
        engine.pwrite(x, &chunk[..PAGE], at).expect("ballast page");
        model.pwrite(y, &chunk[..PAGE], at).expect("ballast page");
        at += PAGE as u64;
    }
    engine.fsync(x).expect("ballast fsync");
    model.fsync(y).expect("ballast fsync");
    engine.close(x).expect("ballast close");
    model.close(y).expect("ballast close");
}

/// Deterministic pseudo-random bytes (for file contents that differ by
/// position and by `tag`).
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = splitmix64(tag);
    while out.len() < len {
        x = splitmix64(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A bounded walk of a tree that may be corrupt: every directory visited
/// once (by inode number, so a cycle of names cannot loop), at most
/// `max_nodes` paths, files read up to `max_read` bytes plus a few probes
/// near their end. Every error is counted, never fatal: the point is that
/// nothing panics, aborts or loops.
pub mod walk {
    use ferrite::{FileType, OpenFlags, PathFs, Whence};
    use std::collections::HashSet;

    #[derive(Clone, Debug, Default)]
    pub struct WalkStats {
        pub dirs: u64,
        pub files: u64,
        pub symlinks: u64,
        pub errors: u64,
        pub bytes_read: u64,
        /// Every path seen, with its kind (bounded like the walk).
        pub paths: Vec<(Vec<u8>, FileType)>,
        /// What failed, one line per error (the first few).
        pub error_lines: Vec<String>,
    }

    impl WalkStats {
        fn error(&mut self, what: &str, path: &[u8], e: ferrite::Errno) {
            self.errors += 1;
            if self.error_lines.len() < 8 {
                self.error_lines.push(format!("{what} {}: {e:?}", path.escape_ascii()));
            }
        }
    }

    fn child(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut p = dir.to_vec();
        if p != b"/" {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    pub fn explore(fs: &dyn PathFs, max_nodes: usize, max_read: u64) -> WalkStats {
        let mut st = WalkStats::default();
        let mut seen_dirs = HashSet::new();
        let mut stack = vec![b"/".to_vec()];
        let mut nodes = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        while let Some(path) = stack.pop() {
            nodes += 1;
            if nodes > max_nodes {
                break;
            }
            let s = match fs.lstat(&path) {
                Ok(s) => s,
                Err(e) => {
                    st.error("lstat", &path, e);
                    continue;
                }
            };
            st.paths.push((path.clone(), s.kind));
            match s.kind {
                FileType::Directory => {
                    st.dirs += 1;
                    if !seen_dirs.insert(s.ino) {
                        continue;
                    }
                    let fd = match fs.open(&path, OpenFlags::RDONLY.directory(), 0) {
                        Ok(fd) => fd,
                        Err(e) => {
                            st.error("open dir", &path, e);
                            continue;
                        }
                    };
                    let mut cookie = 0;
                    for _ in 0..max_nodes {
                        match fs.readdir(fd, cookie, 64) {
                            Ok(batch) => {
                                let Some(last) = batch.last() else { break };
                                if last.next_cookie <= cookie {
                                    st.error("readdir cookie", &path, ferrite::Errno::ECORRUPT);
                                    break;
                                }
                                cookie = last.next_cookie;
                                for e in batch {
                                    if stack.len() < max_nodes && !e.name.is_empty() && !e.name.contains(&b'/') {
                                        stack.push(child(&path, &e.name));
                                    }
                                }
                            }
                            Err(e) => {
                                st.error("readdir", &path, e);
                                break;
                            }
                        }
                    }
                    // The directory's own attributes through other calls.
                    let _ = fs.fstat(fd);
                    let _ = fs.stat(&child(&path, b"."));
                    let _ = fs.stat(&child(&path, b".."));
                    if let Err(e) = fs.close(fd) {
                        st.error("close dir", &path, e);
                    }
                }
                FileType::Regular => {
                    st.files += 1;
                    let fd = match fs.open(&path, OpenFlags::RDONLY, 0) {
                        Ok(fd) => fd,
                        Err(e) => {
                            st.error("open", &path, e);
                            continue;
                        }
                    };
                    let mut off = 0u64;
                    while off < s.size.min(max_read) {
                        match fs.pread(fd, &mut buf, off) {
                            Ok(0) => break,
                            Ok(n) => {
                                st.bytes_read += n as u64;
                                off += n as u64;
                            }
                            Err(e) => {
                                st.error("pread", &path, e);
                                break;
                            }
                        }
                    }
                    // Probes near the end and in the middle of a large file.
                    for at in [s.size.saturating_sub(100), s.size / 2, s.size] {
                        if let Err(e) = fs.pread(fd, &mut buf[..256], at) {
                            st.error("pread probe", &path, e);
                        }
                    }
                    let _ = fs.lseek(fd, 0, Whence::Data);
                    let _ = fs.lseek(fd, 0, Whence::Hole);
                    let _ = fs.fstat(fd);
                    if let Err(e) = fs.close(fd) {
                        st.error("close", &path, e);
                    }
                }
                FileType::Symlink => {
                    st.symlinks += 1;
                    if let Err(e) = fs.readlink(&path) {
                        st.error("readlink", &path, e);
                    }
                    let _ = fs.stat(&path);
                }
                // FIFOs, sockets and device nodes: lstat was all there is.
                FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {}
            }
        }
        let _ = fs.statfs();
        st
    }
}

/// Run numbered trials in a child process (this same test binary, running
/// only the calling test), so that a trial that aborts the process (e.g. an
/// allocation failure) or never ends is reported with its number and the
/// remaining trials still run in a fresh child.
///
/// Protocol: the child prints `@@begin N` before trial N, `@@fail N msg`
/// for a failed or panicking trial, and `@@done` at the end; the parent
/// restarts a child after the last begun trial when one dies or stalls.
pub mod isolate {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    const CHILD_ENV: &str = "FERRITE_ISOLATE_CHILD";
    const FROM_ENV: &str = "FERRITE_ISOLATE_FROM";
    const UNTIL_ENV: &str = "FERRITE_ISOLATE_UNTIL";

    static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// What the trials gave.
    #[derive(Debug, Default)]
    pub struct Outcomes {
        /// One line per failed trial: its number, then what happened.
        pub failures: Vec<String>,
        /// The summary each successful trial returned, by trial number.
        pub passed: Vec<(u64, String)>,
        /// True in the child process: it ran the trials and reported them
        /// to the parent; the caller has nothing to check.
        pub in_child: bool,
    }

    /// Run `trial(i)` for i in 0..trials. In the parent, returns what every
    /// trial gave; in the child, runs the trials and reports them.
    /// `stall` bounds how long one trial may run before it counts as hung
    /// (a deadlock detector, not a performance check). `env` is passed to
    /// the child (e.g. the seed, so that parent and child agree on it).
    pub fn run_isolated(
        test_name: &str,
        trials: u64,
        stall: Duration,
        env: &[(&str, String)],
        trial: impl Fn(u64) -> Result<String, String>,
    ) -> Outcomes {
        if std::env::var(CHILD_ENV).as_deref() == Ok(test_name) {
            let from = std::env::var(FROM_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(0u64);
            let until = std::env::var(UNTIL_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(trials).min(trials);
            child(from, until, &trial);
            return Outcomes { in_child: true, ..Outcomes::default() };
        }
        let mut passed = Vec::new();
        let mut failures = Vec::new();
        let mut from = 0u64;
        while from < trials {
            let exe = std::env::current_exe().expect("current test binary");
            let mut c = Command::new(exe)
                .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, test_name)
                .env(FROM_ENV, from.to_string())
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .env("RUST_BACKTRACE", "0")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the child test process");
            let out = c.stdout.take().expect("piped stdout");
            let mut err = c.stderr.take().expect("piped stderr");
            let (tx, rx) = mpsc::channel::<String>();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            let err_reader = std::thread::spawn(move || {
                let mut s = Vec::new();
                let _ = err.read_to_end(&mut s);
                let s = String::from_utf8_lossy(&s).to_string();
                // Keep the tail only.
                let lines: Vec<&str> = s.lines().collect();
                lines[lines.len().saturating_sub(12)..].join("\n")
            });
            let mut current: Option<u64> = None;
            let mut done = false;
            let mut hung = false;
            loop {
                match rx.recv_timeout(stall) {
                    Ok(line) => {
                        // The harness may print "test name ... " on the
                        // same line before the first report.
                        let Some(at) = line.find("@@") else { continue };
                        let line = &line[at..];
                        if let Some(n) = line.strip_prefix("@@begin ") {
                            current = n.trim().parse().ok();
                        } else if let Some(rest) = line.strip_prefix("@@fail ") {
                            failures.push(rest.to_string());
                        } else if let Some(rest) = line.strip_prefix("@@ok ") {
                            let (n, msg) = rest.split_once(' ').unwrap_or((rest, ""));
                            if let Ok(n) = n.parse() {
                                passed.push((n, msg.to_string()));
                            }
                        } else if line.starts_with("@@done") {
                            done = true;
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        hung = true;
                        let _ = c.kill();
                        break;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let status = c.wait().expect("wait for the child");
            let _ = reader.join();
            let tail = err_reader.join().unwrap_or_default();
            if done {
                break;
            }
            let Some(cur) = current else {
                failures.push(format!("child process failed before its first trial ({status}): {tail}"));
                break;
            };
            failures.push(if hung {
                format!("{cur} HANG: no progress for {:?}; killed. stderr tail:\n{tail}", stall)
            } else {
                format!("{cur} ABORT: the child process died ({status}). stderr tail:\n{tail}")
            });
            from = cur + 1;
        }
        Outcomes { failures, passed, in_child: false }
    }

    fn child(from: u64, trials: u64, trial: &dyn Fn(u64) -> Result<String, String>) {
        std::panic::set_hook(Box::new(|info| {
            let msg = info.to_string().replace('\n', " | ");
            PANICS.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
        }));
        let stdout = std::io::stdout();
        for i in from..trials {
            {
                let mut o = stdout.lock();
                let _ = writeln!(o, "@@begin {i}");
                let _ = o.flush();
            }
            PANICS.lock().unwrap_or_else(|e| e.into_inner()).clear();
            let r = catch_unwind(AssertUnwindSafe(|| trial(i)));
            let line = match r {
                Ok(Ok(m)) => format!("@@ok {i} {}", m.replace('\n', " | ")),
                Ok(Err(m)) => format!("@@fail {i} {}", m.replace('\n', " | ")),
                Err(_) => {
                    let p = PANICS.lock().unwrap_or_else(|e| e.into_inner()).join(" ;; ");
                    format!("@@fail {i} PANIC: {p}")
                }
            };
            let mut o = stdout.lock();
            let _ = writeln!(o, "{line}");
            let _ = o.flush();
        }
        let _ = std::panic::take_hook();
        let mut o = stdout.lock();
        let _ = writeln!(o, "@@done");
        let _ = o.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::isolate::run_isolated;
    use std::time::Duration;

    /// The isolation layer reports a panic, an abort and a hang by trial
    /// number and still runs every other trial.
    #[test]
    fn isolation_reports_panics_aborts_and_hangs() {
        let out = run_isolated(
            "tests::isolation_reports_panics_aborts_and_hangs",
            7,
            Duration::from_secs(3),
            &[],
            |i| match i {
                0 => std::process::abort(),
                1 => panic!("boom {i}"),
                2 => std::process::abort(),
                3 => Err("plain failure".into()),
                4 => loop {
                    std::thread::sleep(Duration::from_secs(1));
                },
                _ => Ok(format!("fine {i}")),
            },
        );
        if out.in_child {
            return;
        }
        let nums: Vec<&str> = out.failures.iter().map(|f| f.split_whitespace().next().unwrap()).collect();
        assert_eq!(nums, ["0", "1", "2", "3", "4"], "{:#?}", out.failures);
        assert!(out.failures[0].contains("ABORT"));
        assert!(out.failures[1].contains("PANIC") && out.failures[1].contains("boom 1"));
        assert!(out.failures[2].contains("ABORT"));
        assert!(out.failures[4].contains("HANG"));
        let ok: Vec<u64> = out.passed.iter().map(|p| p.0).collect();
        assert_eq!(ok, [5, 6]);
    }
}
