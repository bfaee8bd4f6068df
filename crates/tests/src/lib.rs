//! Shared support for the whole-system tests.
//!
//! - [`seed_from_env`]: the seed of a randomized test, from an environment
//!   variable (replay) or fresh, always printed.
//! - [`crash`]: builds the crash images a recorded trace allows (the
//!   persistence model of the crash tests).
//! - [`walk`]: a bounded, cycle-proof walk of a possibly corrupted tree.
//! - [`isolate`]: runs numbered trials in a child process, so that an abort
//!   or a hang of one trial is reported with its number instead of killing
//!   the whole test binary.
//! - small file helpers over [`PathFs`].

use ferrite::{Errno, Fd, ManualClock, OpenFlags, PathFs, TimeSpec};
use std::sync::Arc;

pub use ferrite_model::{diff_trees, tree_of, NodeView, Tree};

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
    let pmem = fs.pmem().clone();
    if crash {
        drop(fs);
    } else {
        fs.unmount().unwrap();
    }
    let image = pmem.image();
    let report = ferrite::fsck::check(&ferrite_pmem::Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    let fs =
        ferrite::Session::mount(ferrite_pmem::Pmem::from_image(&image), &ferrite::MountOptions::default()).unwrap();
    (fs, report)
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

/// Crash images: what a pool may hold after a crash at a point of a
/// recorded trace (see `ferrite_pmem::Event`).
///
/// The persistence model, per 64-byte cache line:
/// - a cached store (`Store`, `Commit`) to line L is guaranteed durable once
///   a `Flush` covering L follows it and a `Fence` follows that flush;
/// - a non-temporal store (`NtStore`) is guaranteed durable at the next
///   `Fence`; it also writes back whatever cached stores to its lines came
///   before it (x86 evicts the line), so those count as flushed;
/// - anything else may or may not have reached the media.
///
/// At every crash point two images bound what the hardware allows:
/// `all` (every store so far persisted: the contents of memory) and
/// `persisted` (only the guaranteed stores). Crash points are placed just
/// before every `Fence` (the moment where the most is in flight), at every
/// `Mark`, and at the end of the trace.
pub mod crash {
    use ferrite_pmem::{Event, CACHE_LINE};
    use std::collections::{BTreeSet, HashMap};
    use std::hash::{Hash, Hasher};

    const PAGE: usize = 4096;

    /// Where in the trace a crash point lies.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum PointKind {
        /// Just before the fence at this event index.
        BeforeFence,
        /// At a marker (the events before it have all executed).
        Mark(u64),
        /// After the last event.
        End,
    }

    /// Which of the two bounding images.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Image {
        /// Every store so far reached the media.
        All,
        /// Only the stores the model guarantees reached the media.
        Persisted,
    }

    impl Image {
        pub fn name(self) -> &'static str {
            match self {
                Image::All => "all-pending-persisted",
                Image::Persisted => "nothing-pending-persisted",
            }
        }
    }

    /// A piece of a store confined to one cache line.
    #[derive(Clone, Copy)]
    struct Piece {
        event: usize,
        /// Pool offset of the piece.
        offset: u64,
        /// Byte range inside the event's stored bytes.
        from: usize,
        len: usize,
    }

    /// Replays a trace event by event, keeping both bounding images.
    pub struct Simulator<'a> {
        base: &'a [u8],
        events: &'a [Event],
        next: usize,
        all: Vec<u8>,
        persisted: Vec<u8>,
        /// Cached stores per line not yet flushed.
        dirty: HashMap<u64, Vec<Piece>>,
        /// Pieces flushed (or non-temporal) awaiting a fence.
        ready: Vec<Piece>,
        touched: BTreeSet<usize>,
        versions: [u64; 2],
        keys: [Option<(u64, u64)>; 2],
        reported_fence: Option<usize>,
        ended: bool,
    }

    impl<'a> Simulator<'a> {
        pub fn new(base: &'a [u8], events: &'a [Event]) -> Simulator<'a> {
            Simulator {
                base,
                events,
                next: 0,
                all: base.to_vec(),
                persisted: base.to_vec(),
                dirty: HashMap::new(),
                ready: Vec::new(),
                touched: BTreeSet::new(),
                versions: [0, 0],
                keys: [None, None],
                reported_fence: None,
                ended: false,
            }
        }

        /// Index of the next event to execute.
        pub fn position(&self) -> usize {
            self.next
        }

        pub fn done(&self) -> bool {
            self.next >= self.events.len()
        }

        /// The next event, not yet executed.
        pub fn peek(&self) -> Option<&'a Event> {
            self.events.get(self.next)
        }

        /// Cache lines holding stores that may or may not have persisted.
        pub fn pending_lines(&self) -> usize {
            let mut lines: BTreeSet<u64> = self.dirty.keys().copied().collect();
            lines.extend(self.ready.iter().map(|p| p.offset / CACHE_LINE));
            lines.len()
        }

        pub fn image(&self, which: Image) -> &[u8] {
            match which {
                Image::All => &self.all,
                Image::Persisted => &self.persisted,
            }
        }

        /// A key that identifies the image's content (a hash of the pages
        /// where it differs from the base), for deduplication.
        pub fn key(&mut self, which: Image) -> u64 {
            let i = which as usize;
            if let Some((v, k)) = self.keys[i] {
                if v == self.versions[i] {
                    return k;
                }
            }
            let k = self.key_of(self.image(which));
            self.keys[i] = Some((self.versions[i], k));
            k
        }

        /// The key of any image built from this trace (see [`key`](Self::key)).
        pub fn key_of(&self, img: &[u8]) -> u64 {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for &p in &self.touched {
                let r = p * PAGE..((p + 1) * PAGE).min(img.len());
                if img[r.clone()] != self.base[r.clone()] {
                    p.hash(&mut h);
                    img[r].hash(&mut h);
                }
            }
            h.finish()
        }

        /// The cache lines (line numbers, offset / 64) holding stores that
        /// may or may not have persisted, in order.
        pub fn pending_line_list(&self) -> Vec<u64> {
            let mut lines: BTreeSet<u64> = self.dirty.keys().copied().collect();
            lines.extend(self.ready.iter().map(|p| p.offset / CACHE_LINE));
            lines.into_iter().collect()
        }

        /// The guaranteed image plus every in-flight store to the lines in
        /// `lines` (each such line persisted as it is in the cache now,
        /// the others not at all): one of the images between the two
        /// bounds that the hardware also allows.
        pub fn image_with_lines(&self, lines: &BTreeSet<u64>) -> Vec<u8> {
            let mut img = self.persisted.clone();
            let mut pieces: Vec<Piece> = self
                .dirty
                .iter()
                .filter(|(l, _)| lines.contains(l))
                .flat_map(|(_, v)| v.iter().copied())
                .chain(self.ready.iter().filter(|p| lines.contains(&(p.offset / CACHE_LINE))).copied())
                .collect();
            pieces.sort_by_key(|p| p.event);
            for p in &pieces {
                let b = self.bytes(p);
                Self::apply(&mut img, p.offset, &b);
            }
            img
        }

        fn bytes(&self, p: &Piece) -> Vec<u8> {
            let (_, b) = self.events[p.event].stored_bytes().expect("a piece comes from a store");
            b[p.from..p.from + p.len].to_vec()
        }

        fn apply(img: &mut [u8], offset: u64, data: &[u8]) {
            let o = offset as usize;
            img[o..o + data.len()].copy_from_slice(data);
        }

        fn pieces(&mut self, event: usize, offset: u64, len: usize) -> Vec<Piece> {
            let mut out = Vec::new();
            let mut at = 0usize;
            while at < len {
                let off = offset + at as u64;
                let line_end = (off / CACHE_LINE + 1) * CACHE_LINE;
                let n = ((line_end - off) as usize).min(len - at);
                out.push(Piece { event, offset: off, from: at, len: n });
                self.touched.insert(off as usize / PAGE);
                at += n;
            }
            out
        }

        /// Execute the next event. Returns it, or None at the end.
        pub fn step(&mut self) -> Option<&'a Event> {
            let ev = self.events.get(self.next)?;
            let idx = self.next;
            self.next += 1;
            match ev {
                Event::Store { .. } | Event::Commit { .. } => {
                    let (off, data) = ev.stored_bytes().expect("a store");
                    Self::apply(&mut self.all, off, &data);
                    self.versions[0] += 1;
                    for p in self.pieces(idx, off, data.len()) {
                        self.dirty.entry(p.offset / CACHE_LINE).or_default().push(p);
                    }
                }
                Event::NtStore { offset, data } => {
                    Self::apply(&mut self.all, *offset, data);
                    self.versions[0] += 1;
                    for p in self.pieces(idx, *offset, data.len()) {
                        // Streaming to a line writes back its cached stores.
                        if let Some(d) = self.dirty.remove(&(p.offset / CACHE_LINE)) {
                            self.ready.extend(d);
                        }
                        self.ready.push(p);
                    }
                }
                Event::Flush { offset, len } => {
                    if *len > 0 {
                        let first = offset / CACHE_LINE;
                        let last = (offset + len - 1) / CACHE_LINE;
                        if last - first < self.dirty.len() as u64 {
                            for l in first..=last {
                                if let Some(d) = self.dirty.remove(&l) {
                                    self.ready.extend(d);
                                }
                            }
                        } else {
                            let lines: Vec<u64> =
                                self.dirty.keys().copied().filter(|l| (first..=last).contains(l)).collect();
                            for l in lines {
                                let d = self.dirty.remove(&l).expect("listed");
                                self.ready.extend(d);
                            }
                        }
                    }
                }
                Event::Fence => {
                    let mut ready = std::mem::take(&mut self.ready);
                    ready.sort_by_key(|p| p.event);
                    for p in &ready {
                        let b = self.bytes(p);
                        Self::apply(&mut self.persisted, p.offset, &b);
                    }
                    if !ready.is_empty() {
                        self.versions[1] += 1;
                    }
                }
                Event::Mark { .. } => {}
            }
            Some(ev)
        }

        /// Run to the next crash point and report it: the point lies before
        /// the event at `position()` (or at the end). None once the end was
        /// reported.
        pub fn next_point(&mut self) -> Option<PointKind> {
            loop {
                match self.peek() {
                    None => {
                        if self.ended {
                            return None;
                        }
                        self.ended = true;
                        return Some(PointKind::End);
                    }
                    Some(Event::Fence) => {
                        let at = self.next;
                        // Report once, then execute the fence on the next call.
                        if self.reported_fence == Some(at) {
                            self.step();
                            continue;
                        }
                        self.reported_fence = Some(at);
                        return Some(PointKind::BeforeFence);
                    }
                    Some(Event::Mark { label }) => {
                        let l = *label;
                        self.step();
                        return Some(PointKind::Mark(l));
                    }
                    Some(_) => {
                        self.step();
                    }
                }
            }
        }
    }
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
    use super::crash::{Image, PointKind, Simulator};
    use super::isolate::run_isolated;
    use ferrite_pmem::Event;
    use std::time::Duration;

    fn store(offset: u64, byte: u8, len: usize) -> Event {
        Event::Store { offset, data: vec![byte; len] }
    }

    /// The persistence model on a hand-made trace.
    #[test]
    fn simulator_follows_the_persistence_rules() {
        let base = vec![0u8; 8192];
        let events = vec![
            store(0, 1, 8),                                    // 0: line 0, flushed and fenced below
            Event::Flush { offset: 0, len: 8 },                // 1
            store(64, 2, 8),                                   // 2: line 1, never flushed
            store(4, 3, 2),                                    // 3: line 0 again, after its flush
            Event::Fence,                                      // 4
            Event::NtStore { offset: 128, data: vec![4; 64] }, // 5: streamed: durable at the next fence
            Event::Commit { offset: 192, value: u64::MAX },    // 6: a commit needs a flush too
            Event::Flush { offset: 192, len: 8 },              // 7
            store(60, 5, 8),                                   // 8: straddles lines 0 and 1
            Event::Fence,                                      // 9
            Event::Mark { label: 7 },
        ];
        let mut sim = Simulator::new(&base, &events);
        assert_eq!(sim.next_point(), Some(PointKind::BeforeFence));
        assert_eq!(sim.position(), 4);
        let p = sim.image(Image::Persisted);
        assert!(p.iter().all(|&b| b == 0), "nothing is durable before the first fence");
        let a = sim.image(Image::All);
        assert_eq!(&a[0..8], &[1, 1, 1, 1, 3, 3, 1, 1]);
        assert_eq!(a[64], 2);
        assert_eq!(sim.pending_line_list(), vec![0, 1]);
        // Only line 1 persisted: its unflushed store, nothing of line 0.
        let only1 = sim.image_with_lines(&[1].into());
        assert_eq!((only1[0], only1[64]), (0, 2));
        assert_eq!(sim.next_point(), Some(PointKind::BeforeFence));
        assert_eq!(sim.position(), 9);
        let p = sim.image(Image::Persisted).to_vec();
        // The flushed store of line 0 persisted; the one after the flush
        // and the unflushed line 1 did not.
        assert_eq!(&p[0..8], &[1; 8]);
        assert_eq!(p[64], 0);
        assert_eq!(p[128], 0, "a streamed store is not durable before its fence");
        assert_eq!(sim.key(Image::Persisted), sim.key_of(&p));
        assert_eq!(sim.next_point(), Some(PointKind::Mark(7)));
        let p = sim.image(Image::Persisted);
        assert_eq!(&p[128..192], &[4; 64]);
        assert_eq!(&p[192..200], &[0xff; 8]);
        assert_eq!(&p[60..68], &[0; 8], "the straddling store was never flushed");
        assert_eq!(&sim.image(Image::All)[60..68], &[5; 8]);
        assert_eq!(sim.next_point(), Some(PointKind::End));
        assert_eq!(sim.next_point(), None);
    }

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
