//! `ferrite demo`: exercise a pool end to end through the path API and
//! check everything against a small model kept here, in DRAM.
//!
//! The model only records what the demo did (names, sizes, which bytes were
//! written with which pattern, link counts): it is the expected answer, not
//! a file system. Everything else goes through the engine's public API.

use crate::util::{
    self, human_bytes, human_duration, outln, pool_message, throughput, CliError, CliResult, Existing, EXIT_DAMAGED,
    EXIT_OK,
};
use ferrite::{Errno, Fd, FileType, FormatOptions, MountOptions, OpenFlags, PathFs, Session};
use ferrite::{FsResult, RenameFlags};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

/// Seed of every size and choice the demo makes, so that two runs do the
/// same thing.
const SEED: u64 = 0xF3_8817_E5EE_D001;
/// Round 1 spreads its files over this many top-level directories.
const DIRS: usize = 8;
/// Largest file written in round 1.
const MAX_FILE: u64 = 256 * 1024;
/// Size of one pwrite in round 1.
const WRITE_CHUNK: usize = 64 * 1024;
/// At most this many problems are printed.
const SHOW_PROBLEMS: usize = 20;

// ---------------------------------------------------------------------------
// Deterministic content and choices.

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix(self.0 ^ SEED)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// FNV-1a of a path: the content key of a file, fixed at its creation.
fn key_of(path: &str) -> u64 {
    path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Fill `buf` with the bytes at `[offset, offset + len)` of pattern
/// (`key`, `gen`): byte `o` is byte `o % 8` of a hash of (key, gen, o / 8).
fn pattern(key: u64, gen: u32, offset: u64, buf: &mut [u8]) {
    let mut done = 0usize;
    while done < buf.len() {
        let o = offset + done as u64;
        let word = splitmix(key ^ ((gen as u64) << 56) ^ (o / 8).wrapping_mul(0x2545_F491_4F6C_DD1D));
        let bytes = word.to_le_bytes();
        let from = (o % 8) as usize;
        let n = (8 - from).min(buf.len() - done);
        buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
        done += n;
    }
}

// ---------------------------------------------------------------------------
// The expected state.

#[derive(Clone, Copy, Debug)]
enum Fill {
    Pattern(u32),
    Zero,
}

struct FileModel {
    key: u64,
    size: u64,
    /// Ranges written after creation, in order; later ones win. The base is
    /// pattern 0 over the whole file.
    overlays: Vec<(u64, u64, Fill)>,
    nlink: u32,
}

impl FileModel {
    fn expected(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.size as usize];
        pattern(self.key, 0, 0, &mut buf);
        for &(start, end, fill) in &self.overlays {
            let s = start.min(self.size) as usize;
            let e = end.min(self.size) as usize;
            if s >= e {
                continue;
            }
            match fill {
                Fill::Pattern(g) => pattern(self.key, g, s as u64, &mut buf[s..e]),
                Fill::Zero => buf[s..e].fill(0),
            }
        }
        buf
    }
}

#[derive(Clone, Debug)]
enum Node {
    Dir,
    File(usize),
    Symlink(String),
}

#[derive(Default)]
struct Model {
    /// Every name, by absolute path; "/" is the root.
    nodes: BTreeMap<String, Node>,
    files: Vec<FileModel>,
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.nodes.insert("/".into(), Node::Dir);
        m
    }

    fn children(&self, dir: &str) -> Vec<(String, Node)> {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| k.len() > prefix.len() && !k[prefix.len()..].contains('/'))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Move `from` and everything under it to `to`.
    fn rename_tree(&mut self, from: &str, to: &str) {
        let sub = format!("{from}/");
        let moved: Vec<String> = self.nodes.keys().filter(|k| *k == from || k.starts_with(&sub)).cloned().collect();
        for k in moved {
            let v = self.nodes.remove(&k).expect("listed");
            self.nodes.insert(format!("{to}{}", &k[from.len()..]), v);
        }
    }

    /// The path a name resolves to, following every symlink, or the error
    /// a resolution must give (ENOENT: dangles, ELOOP, ENOTDIR).
    fn resolve(&self, path: &str) -> Result<String, Errno> {
        let mut todo: VecDeque<String> = path.split('/').filter(|c| !c.is_empty()).map(String::from).collect();
        let mut cur: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "." => continue,
                ".." => {
                    cur.pop();
                    continue;
                }
                _ => {}
            }
            cur.push(c);
            let p = format!("/{}", cur.join("/"));
            match self.nodes.get(&p).ok_or(Errno::ENOENT)? {
                Node::Dir => {}
                Node::File(_) => {
                    if !todo.is_empty() {
                        return Err(Errno::ENOTDIR);
                    }
                }
                Node::Symlink(t) => {
                    hops += 1;
                    if hops > ferrite::limits::SYMLOOP_MAX {
                        return Err(Errno::ELOOP);
                    }
                    cur.pop();
                    if t.starts_with('/') {
                        cur.clear();
                    }
                    for comp in t.split('/').filter(|c| !c.is_empty()).rev() {
                        todo.push_front(comp.to_string());
                    }
                }
            }
        }
        Ok(format!("/{}", cur.join("/")))
    }

    fn file_paths(&self) -> Vec<(String, usize)> {
        self.nodes
            .iter()
            .filter_map(|(k, v)| match v {
                Node::File(id) => Some((k.clone(), *id)),
                _ => None,
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Driving the engine.

/// A failed engine call: which call on which path.
fn op_err(what: &str, path: &str, e: Errno) -> CliError {
    let mut msg = format!("demo: {what} {path}: {e}");
    if e == Errno::ENOSPC {
        msg.push_str(" (the pool is too small for this many files: try a larger --size)");
    }
    CliError::new(EXIT_DAMAGED, msg)
}

/// Time spent inside engine calls, and bytes moved by them.
#[derive(Default)]
struct Meter {
    time: Duration,
    bytes: u64,
    calls: u64,
}

impl Meter {
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.time += t.elapsed();
        self.calls += 1;
        r
    }
}

struct Demo {
    fs: Session,
    model: Model,
    rng: Rng,
    meter: Meter,
}

impl Demo {
    fn mkdir(&mut self, path: &str) -> CliResult<()> {
        let fs = &self.fs;
        self.meter.time(|| fs.mkdir(path.as_bytes(), 0o755)).map_err(|e| op_err("mkdir", path, e))?;
        self.model.nodes.insert(path.into(), Node::Dir);
        Ok(())
    }

    fn random_size(&mut self) -> u64 {
        match self.rng.below(100) {
            0..=4 => 0,
            5..=49 => self.rng.below(4097),
            50..=84 => 4097 + self.rng.below(65536 - 4097),
            _ => 65536 + self.rng.below(MAX_FILE - 65536 + 1),
        }
    }

    /// Create `path` with `size` bytes of pattern 0.
    fn create_file(&mut self, path: &str, size: u64) -> CliResult<()> {
        let key = key_of(path);
        let mut data = vec![0u8; size as usize];
        pattern(key, 0, 0, &mut data);
        let fs = &self.fs;
        let fd = self
            .meter
            .time(|| fs.open(path.as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644))
            .map_err(|e| op_err("create", path, e))?;
        for (i, chunk) in data.chunks(WRITE_CHUNK).enumerate() {
            let off = (i * WRITE_CHUNK) as u64;
            let n = self.meter.time(|| fs.pwrite(fd, chunk, off)).map_err(|e| op_err("write", path, e))?;
            if n != chunk.len() {
                return Err(CliError::new(
                    EXIT_DAMAGED,
                    format!("demo: write {path}: short write ({n} of {})", chunk.len()),
                ));
            }
            self.meter.bytes += n as u64;
        }
        self.meter.time(|| fs.close(fd)).map_err(|e| op_err("close", path, e))?;
        self.model.files.push(FileModel { key, size, overlays: Vec::new(), nlink: 1 });
        self.model.nodes.insert(path.into(), Node::File(self.model.files.len() - 1));
        Ok(())
    }

    fn symlink(&mut self, target: &str, path: &str) -> CliResult<()> {
        let fs = &self.fs;
        self.meter.time(|| fs.symlink(target.as_bytes(), path.as_bytes())).map_err(|e| op_err("symlink", path, e))?;
        self.model.nodes.insert(path.into(), Node::Symlink(target.into()));
        Ok(())
    }

    fn link(&mut self, existing: &str, path: &str) -> CliResult<()> {
        let fs = &self.fs;
        self.meter.time(|| fs.link(existing.as_bytes(), path.as_bytes())).map_err(|e| op_err("link", path, e))?;
        let node = self.model.nodes[existing].clone();
        if let Node::File(id) = node {
            self.model.files[id].nlink += 1;
        }
        self.model.nodes.insert(path.into(), node);
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> CliResult<()> {
        let fs = &self.fs;
        self.meter
            .time(|| fs.rename(from.as_bytes(), to.as_bytes(), RenameFlags::NoReplace))
            .map_err(|e| op_err("rename", from, e))?;
        self.model.rename_tree(from, to);
        Ok(())
    }

    fn unlink(&mut self, path: &str) -> CliResult<()> {
        let fs = &self.fs;
        self.meter.time(|| fs.unlink(path.as_bytes())).map_err(|e| op_err("unlink", path, e))?;
        if let Some(Node::File(id)) = self.model.nodes.remove(path) {
            self.model.files[id].nlink -= 1;
        }
        Ok(())
    }

    fn open(&mut self, path: &str, flags: OpenFlags) -> CliResult<Fd> {
        let fs = &self.fs;
        self.meter.time(|| fs.open(path.as_bytes(), flags, 0o644)).map_err(|e| op_err("open", path, e))
    }

    fn close(&mut self, path: &str, fd: Fd) -> CliResult<()> {
        let fs = &self.fs;
        self.meter.time(|| fs.close(fd)).map_err(|e| op_err("close", path, e))
    }

    /// Write pattern `gen` of file `id` at `offset` (through `pwrite`, or
    /// the O_APPEND `write` when `append`).
    fn write_pattern(&mut self, path: &str, id: usize, gen: u32, offset: u64, len: u64, append: bool) -> CliResult<()> {
        let key = self.model.files[id].key;
        let mut data = vec![0u8; len as usize];
        pattern(key, gen, offset, &mut data);
        let flags = if append { OpenFlags::WRONLY.append() } else { OpenFlags::RDWR };
        let fd = self.open(path, flags)?;
        let fs = &self.fs;
        let n = self
            .meter
            .time(|| if append { fs.write(fd, &data) } else { fs.pwrite(fd, &data, offset) })
            .map_err(|e| op_err("write", path, e))?;
        self.meter.bytes += n as u64;
        self.close(path, fd)?;
        if n != data.len() {
            return Err(CliError::new(EXIT_DAMAGED, format!("demo: write {path}: short write ({n} of {len})")));
        }
        let f = &mut self.model.files[id];
        f.overlays.push((offset, offset + len, Fill::Pattern(gen)));
        f.size = f.size.max(offset + len);
        Ok(())
    }

    fn truncate(&mut self, path: &str, id: usize, size: u64, by_fd: bool) -> CliResult<()> {
        if by_fd {
            let fd = self.open(path, OpenFlags::WRONLY)?;
            let fs = &self.fs;
            self.meter.time(|| fs.ftruncate(fd, size)).map_err(|e| op_err("ftruncate", path, e))?;
            self.close(path, fd)?;
        } else {
            let fs = &self.fs;
            self.meter.time(|| fs.truncate(path.as_bytes(), size)).map_err(|e| op_err("truncate", path, e))?;
        }
        let f = &mut self.model.files[id];
        // Whatever lies past the new size reads as zeros if the file grows
        // again (and must never show the old bytes).
        f.overlays.push((size.min(f.size), u64::MAX, Fill::Zero));
        f.size = size;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Verification.

#[derive(Default)]
struct Verified {
    files: u64,
    bytes: u64,
    names: u64,
    read_time: Duration,
}

fn lstat_kind(kind: FileType) -> &'static str {
    match kind {
        FileType::Regular => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharDevice => "character device",
        FileType::BlockDevice => "block device",
    }
}

/// Every name the engine lists, by walking from the root with readdir.
fn walk(fs: &Session, problems: &mut Vec<String>) -> BTreeMap<String, (u64, FileType)> {
    let mut found = BTreeMap::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let fd = match fs.open(dir.as_bytes(), OpenFlags::RDONLY.directory(), 0) {
            Ok(fd) => fd,
            Err(e) => {
                problems.push(format!("{dir}: cannot open directory: {e}"));
                continue;
            }
        };
        let mut cookie = 0;
        loop {
            let batch = match fs.readdir(fd, cookie, 256) {
                Ok(b) => b,
                Err(e) => {
                    problems.push(format!("{dir}: readdir failed: {e}"));
                    break;
                }
            };
            let Some(last) = batch.last() else { break };
            cookie = last.next_cookie;
            for ent in batch {
                let name = String::from_utf8_lossy(&ent.name).into_owned();
                let path = join(&dir, &name);
                if ent.kind == FileType::Directory {
                    dirs.push(path.clone());
                }
                if found.insert(path.clone(), (ent.ino.0, ent.kind)).is_some() {
                    problems.push(format!("{path}: listed twice by readdir"));
                }
            }
        }
        let _ = fs.close(fd);
    }
    found
}

fn read_whole(fs: &Session, path: &str, expect_len: usize) -> FsResult<Vec<u8>> {
    let fd = fs.open(path.as_bytes(), OpenFlags::RDONLY.nofollow(), 0)?;
    // One byte more than expected, to see a file that is longer than its size.
    let mut buf = vec![0u8; expect_len + 1];
    let mut got = 0;
    let r = loop {
        match fs.pread(fd, &mut buf[got..], got as u64) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                got += n;
                if got == buf.len() {
                    break Ok(());
                }
            }
            Err(e) => break Err(e),
        }
    };
    let c = fs.close(fd);
    r?;
    c?;
    buf.truncate(got);
    Ok(buf)
}

fn verify(fs: &Session, model: &Model) -> (Vec<String>, Verified) {
    let mut problems = Vec::new();
    let mut v = Verified::default();
    let listed = walk(fs, &mut problems);
    for path in model.nodes.keys().filter(|k| *k != "/") {
        if !listed.contains_key(path) {
            problems.push(format!("{path}: missing (not listed by readdir)"));
        }
    }
    for path in listed.keys() {
        if !model.nodes.contains_key(path) {
            problems.push(format!("{path}: listed by readdir but never created"));
        }
    }
    let mut inos: HashMap<usize, (String, u64)> = HashMap::new();
    for (path, node) in &model.nodes {
        v.names += 1;
        let st = match fs.lstat(path.as_bytes()) {
            Ok(st) => st,
            Err(e) => {
                problems.push(format!("{path}: lstat failed: {e}"));
                continue;
            }
        };
        if let Some((ino, kind)) = listed.get(path) {
            if *ino != st.ino.0 || *kind != st.kind {
                problems.push(format!(
                    "{path}: readdir says inode {ino} ({}), lstat says inode {} ({})",
                    lstat_kind(*kind),
                    st.ino.0,
                    lstat_kind(st.kind)
                ));
            }
        }
        match node {
            Node::Dir => {
                if st.kind != FileType::Directory {
                    problems.push(format!("{path}: is a {}, not a directory", lstat_kind(st.kind)));
                    continue;
                }
                let subdirs = model.children(path).iter().filter(|(_, n)| matches!(n, Node::Dir)).count() as u32;
                if st.nlink != 2 + subdirs {
                    problems.push(format!(
                        "{path}: directory link count {}, expected {} (2 + {subdirs} subdirectories)",
                        st.nlink,
                        2 + subdirs
                    ));
                }
            }
            Node::File(id) => {
                let f = &model.files[*id];
                if st.kind != FileType::Regular {
                    problems.push(format!("{path}: is a {}, not a file", lstat_kind(st.kind)));
                    continue;
                }
                if let Some((first, ino)) = inos.get(id) {
                    if *ino != st.ino.0 {
                        problems.push(format!("{path}: hard link of {first} but has inode {} (not {ino})", st.ino.0));
                    }
                } else {
                    inos.insert(*id, (path.clone(), st.ino.0));
                }
                if st.nlink != f.nlink {
                    problems.push(format!("{path}: link count {}, expected {}", st.nlink, f.nlink));
                }
                if st.size != f.size {
                    problems.push(format!("{path}: size {}, expected {}", st.size, f.size));
                }
                let expect = f.expected();
                let t = Instant::now();
                let got = read_whole(fs, path, expect.len());
                v.read_time += t.elapsed();
                match got {
                    Err(e) => problems.push(format!("{path}: read failed: {e}")),
                    Ok(got) => {
                        v.files += 1;
                        v.bytes += got.len() as u64;
                        if got != expect {
                            problems.push(describe_mismatch(path, &got, &expect));
                        }
                    }
                }
            }
            Node::Symlink(target) => {
                if st.kind != FileType::Symlink {
                    problems.push(format!("{path}: is a {}, not a symlink", lstat_kind(st.kind)));
                    continue;
                }
                match fs.readlink(path.as_bytes()) {
                    Ok(t) if t == target.as_bytes() => {}
                    Ok(t) => problems
                        .push(format!("{path}: symlink target {:?}, expected {target:?}", String::from_utf8_lossy(&t))),
                    Err(e) => problems.push(format!("{path}: readlink failed: {e}")),
                }
                if st.size != target.len() as u64 {
                    problems.push(format!("{path}: symlink size {}, expected {}", st.size, target.len()));
                }
                // Following the link must land where the model says.
                let followed = fs.stat(path.as_bytes());
                match (model.resolve(path), followed) {
                    (Err(want), Err(e)) if want == e => {}
                    (Err(want), Ok(s)) => problems.push(format!(
                        "{path}: symlink to {target:?} should give {want:?} but leads to inode {}",
                        s.ino.0
                    )),
                    (Err(want), Err(e)) => {
                        problems.push(format!("{path}: symlink to {target:?}: stat gives {e:?}, expected {want:?}"))
                    }
                    (Ok(p), Err(e)) => problems.push(format!("{path}: stat through symlink to {p} failed: {e}")),
                    (Ok(p), Ok(s)) => match fs.lstat(p.as_bytes()) {
                        Ok(t) if t.ino == s.ino => {}
                        Ok(t) => problems
                            .push(format!("{path}: symlink leads to inode {}, but {p} is inode {}", s.ino.0, t.ino.0)),
                        Err(e) => problems.push(format!("{path}: lstat of target {p}: {e}")),
                    },
                }
            }
        }
    }
    (problems, v)
}

fn describe_mismatch(path: &str, got: &[u8], expect: &[u8]) -> String {
    let first = got.iter().zip(expect).position(|(a, b)| a != b).unwrap_or(got.len().min(expect.len()));
    let differ = got.iter().zip(expect).filter(|(a, b)| a != b).count();
    if first >= got.len() || first >= expect.len() {
        format!("{path}: read {} bytes, expected {} (the common prefix matches)", got.len(), expect.len())
    } else {
        format!(
            "{path}: content differs: first at byte {first} ({:#04x}, expected {:#04x}); {differ} bytes differ",
            got[first], expect[first]
        )
    }
}

/// Print the outcome of a verification; true when everything matched.
fn report_verify(label: &str, problems: &[String], v: &Verified, elapsed: Duration) -> bool {
    outln!(
        "{label:<22} {} names ({} file names), {} read in {} ({} in reads)",
        v.names,
        v.files,
        human_bytes(v.bytes),
        human_duration(elapsed),
        throughput(v.bytes, v.read_time)
    );
    if problems.is_empty() {
        outln!("{:<22} every name, size, link count, symlink and byte matches", "");
        return true;
    }
    outln!("{:<22} {} MISMATCH(ES):", "", problems.len());
    for p in problems.iter().take(SHOW_PROBLEMS) {
        outln!("{:<24} {p}", "");
    }
    if problems.len() > SHOW_PROBLEMS {
        outln!("{:<24} ... and {} more", "", problems.len() - SHOW_PROBLEMS);
    }
    false
}

// ---------------------------------------------------------------------------
// The demo itself.

fn mount(path: &Path) -> CliResult<(Session, Duration)> {
    let pmem = util::open_pool(path)?;
    let t = Instant::now();
    let fs = Session::mount(pmem, &MountOptions::default())
        .map_err(|e| CliError::new(EXIT_DAMAGED, format!("{}: mount failed: {}", path.display(), pool_message(&e))))?;
    Ok((fs, t.elapsed()))
}

fn unmount(fs: Session, path: &Path) -> CliResult<Duration> {
    let t = Instant::now();
    fs.unmount().map_err(|e| CliError::new(EXIT_DAMAGED, format!("{}: unmount failed: {e}", path.display())))?;
    Ok(t.elapsed())
}

fn space(fs: &Session) -> String {
    let st = fs.fs_stats();
    let used = st.blocks - st.blocks_free;
    format!(
        "{} pages used ({}), {} free; {} inodes used",
        used,
        human_bytes(used * st.block_size as u64),
        st.blocks_free,
        st.files - st.files_free
    )
}

pub fn run(path: &Path, files: usize, size: u64) -> CliResult<u8> {
    match util::probe(path)? {
        Existing::Nothing | Existing::Ferrite(_) => {}
        Existing::Other(what) => {
            return Err(CliError::pool(
                path,
                format!("{what}; the demo only replaces a Ferrite pool or makes a new file (pick another path)"),
            ))
        }
    }
    let started = Instant::now();
    let mut ok = true;

    // ---- format ----------------------------------------------------------
    let t = Instant::now();
    let fs = crate::create_and_format(path, size, FormatOptions::default().lanes, None)?;
    let sb = fs.superblock();
    outln!(
        "ferrite demo on {} ({}, {} lanes, {} inode slots, {:?})",
        path.display(),
        human_bytes(size),
        sb.lane_count,
        sb.inode_count,
        fs.pmem().domain()
    );
    outln!("{:<22} {}", "format", human_duration(t.elapsed()));

    // ---- round 1: build the tree -----------------------------------------
    let mut d = Demo {
        fs: ferrite::Session::new(std::sync::Arc::new(fs)),
        model: Model::new(),
        rng: Rng(0),
        meter: Meter::default(),
    };
    let t = Instant::now();
    for k in 0..DIRS {
        d.mkdir(&format!("/d{k}"))?;
        d.mkdir(&format!("/d{k}/sub"))?;
    }
    d.mkdir("/links")?;
    let mut names = Vec::with_capacity(files);
    for i in 0..files {
        let dir = i % DIRS;
        let p = if (i / DIRS) % 4 == 3 { format!("/d{dir}/sub/f{i:05}") } else { format!("/d{dir}/f{i:05}") };
        let size = d.random_size();
        d.create_file(&p, size)?;
        names.push(p);
    }
    let mut symlinks = 0;
    let mut hardlinks = 0;
    for k in 0..DIRS.min(files) {
        // Absolute, and relative through "..".
        let target = names[k].clone();
        d.symlink(&target, &format!("/links/s{k}"))?;
        let name = &target[target.rfind('/').map_or(0, |i| i + 1)..];
        let rel = if target.contains("/sub/") { name.to_string() } else { format!("../{name}") };
        d.symlink(&rel, &format!("/d{k}/sub/up-{name}"))?;
        symlinks += 2;
        if k + DIRS < files {
            d.link(&names[k + DIRS], &format!("/links/h{k}"))?;
            hardlinks += 1;
        }
    }
    d.symlink("/nowhere/at/all", "/links/dangling")?;
    d.symlink("loop-b", "/links/loop-a")?;
    d.symlink("loop-a", "/links/loop-b")?;
    symlinks += 3;
    // Renaming a directory moves its subtree; /links/s7 now dangles.
    let last = DIRS - 1;
    d.rename(&format!("/d{last}"), &format!("/d{last}-renamed"))?;
    let round1 = t.elapsed();
    let written = d.meter.bytes;
    outln!(
        "{:<22} {} files ({} in {} directories), {} symlinks, {} hard links, 1 directory renamed",
        "round 1: create",
        files,
        human_bytes(written),
        2 * DIRS + 1,
        symlinks,
        hardlinks
    );
    outln!(
        "{:<22} {} in {} engine calls: {}, {:.1} µs per call; write throughput {}",
        "",
        human_duration(round1),
        d.meter.calls,
        human_duration(d.meter.time),
        d.meter.time.as_secs_f64() * 1e6 / d.meter.calls.max(1) as f64,
        throughput(written, d.meter.time)
    );
    outln!("{:<22} {}", "", space(&d.fs));

    // ---- clean unmount, remount, verify ----------------------------------
    let Demo { fs, model, rng, .. } = d;
    let took = unmount(fs, path)?;
    outln!("{:<22} {}", "unmount (clean)", human_duration(took));
    let (fs, took) = mount(path)?;
    let recovered = fs.mount_report().recovered;
    outln!(
        "{:<22} {}; recovery ran: {}",
        "remount",
        human_duration(took),
        if recovered { "YES (WRONG: the pool was unmounted cleanly)" } else { "no (right: clean unmount)" }
    );
    ok &= !recovered;
    let t = Instant::now();
    let (problems, v) = verify(&fs, &model);
    ok &= report_verify("verify", &problems, &v, t.elapsed());

    // ---- round 2: change things, then crash -------------------------------
    let mut d = Demo { fs, model, rng, meter: Meter::default() };
    let t = Instant::now();
    let mut counts = BTreeMap::<&str, u64>::new();
    let mut changed = HashSet::new();
    for (p, id) in d.model.file_paths() {
        // A file with two names is changed through one of them only.
        if !changed.insert(id) {
            continue;
        }
        let size = d.model.files[id].size;
        let mut path = p.clone();
        if id % 4 == 0 && size > 0 {
            let len = (size / 2).clamp(1, 100_000);
            d.write_pattern(&path, id, 1, size / 3, len, false)?;
            *counts.entry("overwritten").or_default() += 1;
        }
        if id % 7 == 1 {
            let len = 1000 + (id as u64 * 7919) % 30_000;
            let size = d.model.files[id].size;
            d.write_pattern(&path, id, 2, size, len, true)?;
            *counts.entry("appended").or_default() += 1;
        }
        if id % 9 == 2 {
            let size = d.model.files[id].size;
            d.truncate(&path, id, size / 2, false)?;
            *counts.entry("truncated").or_default() += 1;
        }
        if id % 13 == 3 {
            // Grow with a hole, then write past the hole: the hole and the
            // old tail must read as zeros.
            let size = d.model.files[id].size;
            d.truncate(&path, id, size + 12_345, true)?;
            d.write_pattern(&path, id, 4, size + 12_345 + 5000, 100, false)?;
            *counts.entry("extended with a hole").or_default() += 1;
        }
        if id % 17 == 6 {
            let dir = parent_of(&path).to_string();
            let name = &path[path.rfind('/').map_or(0, |i| i + 1)..];
            let to = join(&dir, &format!("moved-{name}"));
            d.rename(&path, &to)?;
            path = to;
            *counts.entry("renamed").or_default() += 1;
        }
        if id % 11 == 5 {
            d.unlink(&path)?;
            *counts.entry("unlinked").or_default() += 1;
        }
    }
    // A directory moves to another parent; another is made and removed.
    if d.model.nodes.contains_key("/d3/sub") {
        d.rename("/d3/sub", "/d2/sub-from-d3")?;
    }
    d.mkdir("/empty")?;
    d.mkdir("/gone")?;
    {
        let fs = &d.fs;
        d.meter.time(|| fs.rmdir(b"/gone")).map_err(|e| op_err("rmdir", "/gone", e))?;
        d.model.nodes.remove("/gone");
    }
    d.mkdir("/new")?;
    let new_files = (files / 10).max(1);
    for j in 0..new_files {
        let size = d.random_size();
        d.create_file(&format!("/new/g{j:05}"), size)?;
    }
    *counts.entry("created").or_default() += new_files as u64;
    // An open file whose last name is removed: after the crash, recovery
    // must free it (an orphan).
    d.create_file("/orphan", 200 * 1024)?;
    let orphan_fd = d.open("/orphan", OpenFlags::RDWR)?;
    d.unlink("/orphan")?;
    let round2 = t.elapsed();
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    outln!("{:<22} files: {}", "round 2: change", summary.join(", "));
    outln!("{:<22} 1 directory moved to another parent, 1 made and removed, 1 open file unlinked", "");
    outln!(
        "{:<22} {} in {} engine calls ({} written)",
        "",
        human_duration(round2),
        d.meter.calls,
        human_bytes(d.meter.bytes)
    );
    outln!("{:<22} {}", "", space(&d.fs));

    // ---- crash, recover, verify -------------------------------------------
    let Demo { fs, model, .. } = d;
    let _still_open = orphan_fd;
    drop(fs);
    outln!("{:<22} dropped the mounted file system without unmount (1 file still open)", "crash (simulated)");
    let (fs, took) = mount(path)?;
    let r = fs.mount_report().clone();
    outln!(
        "{:<22} {}; recovery ran: {}",
        "remount",
        human_duration(took),
        if r.recovered { "yes (right: the pool was not unmounted)" } else { "NO (WRONG: the pool was not unmounted)" }
    );
    outln!(
        "{:<22} {} journals rolled back, {} inodes scanned, {} orphans freed, recovery took {}",
        "",
        r.journals_rolled_back,
        r.inodes_scanned,
        r.orphans_freed,
        human_duration(Duration::from_nanos(r.recovery_ns))
    );
    ok &= r.recovered;
    if r.orphans_freed == 0 {
        outln!("{:<22} WRONG: the file unlinked while open was not freed", "");
        ok = false;
    }
    outln!("{:<22} {}", "", space(&fs));
    let t = Instant::now();
    let (problems, v) = verify(&fs, &model);
    ok &= report_verify("verify", &problems, &v, t.elapsed());
    let took = unmount(fs, path)?;
    outln!("{:<22} {}", "unmount (clean)", human_duration(took));

    // ---- fsck ----------------------------------------------------------
    let pmem = util::open_pool_private(path, true)?;
    let t = Instant::now();
    match ferrite::fsck::check_private(pmem) {
        Ok(report) => {
            let took = t.elapsed();
            if report.is_clean() {
                outln!("{:<22} clean ({})", "fsck", human_duration(took));
            } else {
                outln!("{:<22} DAMAGED: {} problem(s) ({})", "fsck", report.problems.len(), human_duration(took));
                for p in report.problems.iter().take(SHOW_PROBLEMS) {
                    outln!("{:<24} {p}", "");
                }
                ok = false;
            }
        }
        Err(e) => {
            outln!("{:<22} cannot check: {}", "fsck", pool_message(&e));
            ok = false;
        }
    }

    outln!(
        "{} in {}. The pool is left at {} (try `ferrite fsck {}`)",
        if ok { "demo passed" } else { "DEMO FAILED" },
        human_duration(started.elapsed()),
        path.display(),
        path.display()
    );
    Ok(if ok { EXIT_OK } else { EXIT_DAMAGED })
}
