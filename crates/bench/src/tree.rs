//! The tree workloads of issue 11: `cp -a` of a real directory tree into
//! the target, `tar x` of a tar of the same tree, and `rm -rf` of a copy;
//! and `cp-file`, a `cp` of one large file inside the target (what
//! copy_file_range costs there). Each is the real program (`cp`, `tar`,
//! `rm`) run as a child process with
//! a directory of the target as destination, so the file system receives
//! what the kernel sends for a user's command, not what this harness would
//! call. The time measured is the program's run plus a `syncfs` of the
//! target's file system, which writes ext4's dirty data and journal back
//! (without it ext4 would be timed at page-cache speed and nothing would
//! be on its disk), is a no-op on tmpfs, and changes nothing on the FUSE
//! mount in strict mode, where every request is durable when it returns.
//!
//! On a FUSE mount the requests the kernel sends are counted by kind with
//! the kernel tracepoint `fuse:fuse_request_send`, in a tracefs instance of
//! our own filtered to our mount's connection, so other FUSE mounts and
//! other tracing users are not disturbed. The tracepoint fires when a
//! request is queued, whatever carries it to the daemon (`/dev/fuse` or
//! FUSE over io_uring), which is why it is used rather than a counter in
//! the daemon.
//!
//! The workloads need a directory the kernel can see. The library targets
//! (`ferrite`, `ferrite-atomic`), `hw-limit` and `preload` (whose workloads
//! run in a child process) skip them with a note.

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::scratch::{unique_path, Scratch};
use crate::target::{cvt, fs_type, Target};
use crate::workload::{Better, Metric, Prepared, RunOut, Workload};

/// The tree copied when `FERRITE_BENCH_TREE` is not set.
pub const DEFAULT_TREE: &str = "/usr/share";

/// Which program a tree workload times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeOp {
    /// `cp -a SRC WORK/`.
    Cp,
    /// `tar -xf TAR -C WORK` of a tar of SRC made before the rounds.
    Tar,
    /// `rm -rf WORK/NAME` of a copy made by `cp -a` (untimed) just before.
    Rm,
    /// `cp WORK/big WORK/big.copy` of one large file inside the target:
    /// what copy_file_range does for the program (`cp` uses it), served by
    /// the daemon on the mount.
    CpFile,
}

/// Counts of the entries of the source tree. "Per entry" figures divide by
/// `entries`: every file, directory (the top one included), symbolic link
/// and special file, which is what `cp -a` creates and `rm -rf` removes.
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeStats {
    pub entries: u64,
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub other: u64,
    /// Bytes in regular files (hard links counted each time).
    pub bytes: u64,
}

/// The source tree, shared by the three workloads: walked once for its
/// counts, and put into a tar file (in the scratch directory, normally
/// tmpfs) once, before the first `tar x`, outside any timing.
pub struct TreeSource {
    path: PathBuf,
    base: PathBuf,
    stats: Mutex<Option<Result<TreeStats, String>>>,
    tar: Mutex<Option<Scratch>>,
}

impl TreeSource {
    /// The tree named by `FERRITE_BENCH_TREE`, or `/usr/share`; its tar
    /// file will go into `base`.
    pub fn from_env(base: &Path) -> TreeSource {
        let path = std::env::var_os("FERRITE_BENCH_TREE").map_or_else(|| PathBuf::from(DEFAULT_TREE), PathBuf::from);
        TreeSource { path, base: base.to_path_buf(), stats: Mutex::new(None), tar: Mutex::new(None) }
    }

    /// The tree's canonical path, its parent and its last component (the
    /// name the copy gets inside the work directory).
    fn parts(&self) -> io::Result<(PathBuf, PathBuf, PathBuf)> {
        let p = fs::canonicalize(&self.path)
            .map_err(|e| io::Error::new(e.kind(), format!("tree {}: {e}", self.path.display())))?;
        match (p.parent(), p.file_name()) {
            (Some(parent), Some(name)) => Ok((p.clone(), parent.to_path_buf(), PathBuf::from(name))),
            _ => Err(io::Error::other(format!("tree {}: need a directory below /", p.display()))),
        }
    }

    /// The counts, walked on first use.
    pub fn stats(&self) -> io::Result<TreeStats> {
        let mut cached = self.stats.lock().unwrap();
        if cached.is_none() {
            *cached = Some(self.parts().and_then(|(p, _, _)| walk(&p)).map_err(|e| e.to_string()));
        }
        cached.clone().unwrap().map_err(io::Error::other)
    }

    /// The tar of the tree, made on first use.
    fn tar(&self) -> io::Result<PathBuf> {
        let mut tar = self.tar.lock().unwrap();
        if let Some(t) = tar.as_ref() {
            return Ok(t.path().to_path_buf());
        }
        let (_, parent, name) = self.parts()?;
        let file = Scratch::new(unique_path(&self.base, "tree.tar"));
        let t0 = Instant::now();
        run_prog(Command::new("tar").arg("-cf").arg(file.path()).arg("-C").arg(&parent).arg(&name))?;
        let len = fs::metadata(file.path())?.len();
        eprintln!(
            "ferrite-bench: made {} ({} MB) from {} in {:.1} s (untimed, once)",
            file.path().display(),
            len / 1_000_000,
            self.path.display(),
            t0.elapsed().as_secs_f64()
        );
        let p = file.path().to_path_buf();
        *tar = Some(file);
        Ok(p)
    }
}

/// Counts the entries under `root` (itself included) without following
/// symbolic links.
fn walk(root: &Path) -> io::Result<TreeStats> {
    let mut s = TreeStats::default();
    let mut stack = vec![root.to_path_buf()];
    let top = fs::symlink_metadata(root)?;
    if !top.is_dir() {
        return Err(io::Error::other(format!("tree {}: not a directory", root.display())));
    }
    s.entries = 1;
    s.dirs = 1;
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))? {
            let e = e?;
            let ft = e.file_type()?;
            s.entries += 1;
            if ft.is_dir() {
                s.dirs += 1;
                stack.push(e.path());
            } else if ft.is_file() {
                s.files += 1;
                s.bytes += e.metadata()?.len();
            } else if ft.is_symlink() {
                s.symlinks += 1;
            } else if ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device() {
                s.other += 1;
            }
        }
    }
    Ok(s)
}

/// Runs a program to its end; its standard error goes into the error when
/// it fails (its first lines: `cp` names every file it could not copy).
fn run_prog(cmd: &mut Command) -> io::Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().take(5).collect();
        let more = err.lines().count().saturating_sub(lines.len());
        let more = if more > 0 { format!(" (+{more} more lines)") } else { String::new() };
        return Err(io::Error::other(format!("{cmd:?} failed ({}): {}{more}", out.status, lines.join(" | "))));
    }
    Ok(())
}

/// `syncfs` of the file system holding `dir`.
fn syncfs(dir: &Path) -> io::Result<()> {
    let f = fs::File::open(dir)?;
    // SAFETY: a descriptor we own, open for the duration of the call.
    cvt(unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) }).map(drop)
}

// ---------------------------------------------------------------- metrics

/// The unit of the request-count metrics. The Markdown table leaves out a
/// kind's row when it is zero or n/a on every target (the total stays).
pub const REQ_UNIT: &str = "req/entry";

macro_rules! tree_metrics {
    ($(($op:literal, $name:literal, $key:literal)),* $(,)?) => {
        /// The request kinds reported, by FUSE opcode
        /// (`include/uapi/linux/fuse.h`), in the order of their metrics.
        const KINDS: &[(u32, &str)] = &[$(($op, $name)),*];

        /// Time, time per entry, the requests of all kinds, one row per
        /// kind, then the kinds not in [`KINDS`].
        static TREE_METRICS: &[Metric] = &[
            Metric { key: "time_s", label: "time (program + syncfs)", unit: "s", better: Better::Lower },
            Metric { key: "us_per_entry", label: "time per entry", unit: "us", better: Better::Lower },
            Metric { key: "req_all", label: "FUSE requests per entry, all kinds", unit: REQ_UNIT, better: Better::Lower },
            $(Metric {
                key: $key,
                label: concat!("FUSE ", $name, " per entry"),
                unit: REQ_UNIT,
                better: Better::Lower,
            },)*
            Metric { key: "req_other", label: "FUSE requests of other kinds per entry", unit: REQ_UNIT, better: Better::Lower },
        ];
    };
}

tree_metrics![
    (1, "LOOKUP", "req_lookup"),
    (2, "FORGET", "req_forget"),
    (3, "GETATTR", "req_getattr"),
    (4, "SETATTR", "req_setattr"),
    (5, "READLINK", "req_readlink"),
    (6, "SYMLINK", "req_symlink"),
    (8, "MKNOD", "req_mknod"),
    (9, "MKDIR", "req_mkdir"),
    (10, "UNLINK", "req_unlink"),
    (11, "RMDIR", "req_rmdir"),
    (12, "RENAME", "req_rename"),
    (13, "LINK", "req_link"),
    (14, "OPEN", "req_open"),
    (15, "READ", "req_read"),
    (16, "WRITE", "req_write"),
    (17, "STATFS", "req_statfs"),
    (18, "RELEASE", "req_release"),
    (20, "FSYNC", "req_fsync"),
    (21, "SETXATTR", "req_setxattr"),
    (22, "GETXATTR", "req_getxattr"),
    (23, "LISTXATTR", "req_listxattr"),
    (24, "REMOVEXATTR", "req_removexattr"),
    (25, "FLUSH", "req_flush"),
    (27, "OPENDIR", "req_opendir"),
    (28, "READDIR", "req_readdir"),
    (29, "RELEASEDIR", "req_releasedir"),
    (30, "FSYNCDIR", "req_fsyncdir"),
    (34, "ACCESS", "req_access"),
    (35, "CREATE", "req_create"),
    (39, "IOCTL", "req_ioctl"),
    (42, "BATCH_FORGET", "req_batch_forget"),
    (43, "FALLOCATE", "req_fallocate"),
    (44, "READDIRPLUS", "req_readdirplus"),
    (45, "RENAME2", "req_rename2"),
    (46, "LSEEK", "req_lseek"),
    (47, "COPY_FILE_RANGE", "req_copy_file_range"),
    (50, "SYNCFS", "req_syncfs"),
    (51, "TMPFILE", "req_tmpfile"),
    (52, "STATX", "req_statx"),
];

/// The index of the first request metric (all kinds); the kinds follow.
const REQ_ALL: usize = 2;

// ---------------------------------------------------------------- workload

/// One of the tree workloads (group `tree`, left out of `all`).
pub struct TreeWorkload {
    pub op: TreeOp,
    pub src: Arc<TreeSource>,
    /// The size of `cp-file`'s file.
    pub file_bytes: u64,
}

impl TreeWorkload {
    /// The four, the three of the tree sharing one source (one walk, one
    /// tar file); `cp-file` copies a file of `file_bytes` of its own.
    pub fn all(base: &Path, file_bytes: u64) -> Vec<TreeWorkload> {
        let src = Arc::new(TreeSource::from_env(base));
        [TreeOp::Cp, TreeOp::Tar, TreeOp::Rm, TreeOp::CpFile]
            .into_iter()
            .map(|op| TreeWorkload { op, src: src.clone(), file_bytes })
            .collect()
    }
}

impl Workload for TreeWorkload {
    fn name(&self) -> &str {
        match self.op {
            TreeOp::Cp => "cp-a",
            TreeOp::Tar => "tar-x",
            TreeOp::Rm => "rm-rf",
            TreeOp::CpFile => "cp-file",
        }
    }
    fn group(&self) -> &'static str {
        "tree"
    }
    fn params(&self) -> String {
        if self.op == TreeOp::CpFile {
            return format!(
                "`cp WORK/big WORK/big.copy` of one {} MiB file of the suite's data pattern written into the \
                 target before the rounds (untimed), timed with a syncfs after it; then `rm` of the copy \
                 and syncfs, untimed; `cp` copies with copy_file_range, which the kernel hands to the \
                 daemon on a FUSE mount (COPY_FILE_RANGE) when the daemon serves it and otherwise \
                 carries out as reads and writes; FUSE requests counted by kind (\"per entry\": for the \
                 one file); 1 run per round",
                self.file_bytes >> 20
            );
        }
        let tree = match self.src.stats() {
            Ok(s) => format!(
                "{} ({} entries: {} directories, {} files, {} symbolic links{}; {} MB in files)",
                self.src.path.display(),
                s.entries,
                s.dirs,
                s.files,
                s.symlinks,
                if s.other > 0 { format!(", {} others", s.other) } else { String::new() },
                s.bytes / 1_000_000
            ),
            Err(e) => format!("{} (unreadable: {e})", self.src.path.display()),
        };
        let what = match self.op {
            TreeOp::Cp => format!("`cp -a SRC WORK/` of {tree}; then `rm -rf` of the copy and syncfs, untimed"),
            TreeOp::Tar => format!(
                "`tar -xf TAR -C WORK` of a tar of {tree} (made once in the scratch directory before \
                 the rounds, untimed); then `rm -rf` of the tree and syncfs, untimed"
            ),
            TreeOp::Rm => {
                format!("`rm -rf WORK/NAME` of a copy of {tree} made by `cp -a` and synced just before (untimed)")
            }
            TreeOp::CpFile => unreachable!("described above"),
        };
        format!(
            "{what}; WORK is a directory of the target; the real program runs as a child process, timed \
             with a syncfs of the target's file system after it (ext4 writes back; a no-op on tmpfs); \
             FUSE requests counted by kind on FUSE mounts (tracepoint fuse:fuse_request_send, divided by \
             the entries of the tree); 1 run per round"
        )
    }
    fn metrics(&self) -> &'static [Metric] {
        TREE_METRICS
    }
    fn applies_to(&self, t: &dyn Target) -> Result<(), String> {
        if t.remote().is_some() {
            return Err("its workloads run inside the preload child process, which real programs \
                        (cp, tar, rm) do not go through here"
                .into());
        }
        if t.kernel_dir().is_none() {
            return Err("no directory the kernel can see (no mount) for cp, tar and rm to write into".into());
        }
        Ok(())
    }
    fn prepare<'t>(&self, t: &'t dyn Target) -> io::Result<Option<Box<dyn Prepared + 't>>> {
        let Some(dir) = t.kernel_dir() else { return Ok(None) };
        let work = dir.join(format!("tree-{}", self.name()));
        let mut run = if self.op == TreeOp::CpFile {
            fs::create_dir(&work)?;
            let src = work.join("big");
            write_big_file(&src, self.file_bytes)?;
            syncfs(&work)?;
            let stats = TreeStats { entries: 1, files: 1, bytes: self.file_bytes, ..TreeStats::default() };
            TreeRun { op: self.op, src, tar: None, copy: work.join("big.copy"), work, stats, trace: None, note: None }
        } else {
            let stats = self.src.stats()?;
            let (src, _, name) = self.src.parts()?;
            let tar = if self.op == TreeOp::Tar { Some(self.src.tar()?) } else { None };
            fs::create_dir(&work)?;
            TreeRun { op: self.op, src, tar, copy: work.join(&name), work, stats, trace: None, note: None }
        };
        let stats = run.stats;
        if fs_type(dir) == "fuse" {
            if std::env::var("FERRITE_BENCH_FUSE_TRACE").is_ok_and(|v| v == "0") {
                run.note = Some("FUSE requests not counted (FERRITE_BENCH_FUSE_TRACE=0)".into());
            } else {
                // Room for 16 requests per entry (9 to 14 are sent today)
                // plus a WRITE and a GETXATTR per 4 KiB of data, for trees
                // of large files that tar writes 10 KiB at a time.
                match FuseTrace::new(dir, stats.entries * 16 + stats.bytes / 2048) {
                    Ok(tr) => {
                        run.note = Some(tr.describe());
                        run.trace = Some(tr);
                    }
                    Err(why) => {
                        eprintln!("ferrite-bench: {} on {}: FUSE requests not counted: {why}", self.name(), t.name());
                        run.note = Some(format!("FUSE requests not counted: {why}"));
                    }
                }
            }
        }
        Ok(Some(Box::new(run)))
    }
}

/// A tree workload set up on one target.
struct TreeRun {
    op: TreeOp,
    /// The source tree (canonical).
    src: PathBuf,
    tar: Option<PathBuf>,
    /// The directory of the target the programs write into.
    work: PathBuf,
    /// Where the copy lands: `work/NAME`.
    copy: PathBuf,
    stats: TreeStats,
    trace: Option<FuseTrace>,
    note: Option<String>,
}

impl TreeRun {
    fn cp(&self) -> io::Result<()> {
        run_prog(Command::new("cp").arg("-a").arg(&self.src).arg(format!("{}/", self.work.display())))
    }

    fn rm(&self) -> io::Result<()> {
        run_prog(Command::new("rm").arg("-rf").arg(&self.copy))
    }

    /// The timed part: the program, then syncfs.
    fn timed(&self) -> io::Result<f64> {
        let t0 = Instant::now();
        match self.op {
            TreeOp::Cp => self.cp()?,
            TreeOp::CpFile => run_prog(Command::new("cp").arg(&self.src).arg(&self.copy))?,
            TreeOp::Tar => {
                let tar = self.tar.as_ref().expect("tar made at prepare");
                run_prog(Command::new("tar").arg("-xf").arg(tar).arg("-C").arg(&self.work))?
            }
            TreeOp::Rm => self.rm()?,
        }
        syncfs(&self.work)?;
        Ok(t0.elapsed().as_secs_f64())
    }
}

impl Prepared for TreeRun {
    fn run(&mut self, _seed: u64) -> io::Result<RunOut> {
        if self.op == TreeOp::Rm {
            // The tree to remove, written back first so the timed syncfs
            // carries only what rm changed.
            self.cp()?;
            syncfs(&self.work)?;
        }
        if let Some(tr) = &self.trace {
            tr.start()?;
        }
        let timed = self.timed();
        // The tracepoint goes off whatever happened, before any error
        // returns.
        let counts = self.trace.as_ref().map(|tr| tr.stop());
        let secs = timed?;
        let counts = counts.transpose()?;
        if self.op != TreeOp::Rm {
            self.rm()?;
            syncfs(&self.work)?;
        }
        let n = self.stats.entries.max(1) as f64;
        let mut values = vec![secs, secs * 1e6 / n];
        debug_assert_eq!(values.len(), REQ_ALL);
        match counts {
            Some(c) => {
                if c.total == 0 {
                    return Err(io::Error::other(format!(
                        "no FUSE request traced for connection {} although the program wrote into the mount",
                        self.trace.as_ref().map_or(0, |t| t.connection)
                    )));
                }
                values.push(c.total as f64 / n);
                values.extend(c.by_kind.iter().map(|&k| k as f64 / n));
            }
            None => values.extend(std::iter::repeat_n(f64::NAN, TREE_METRICS.len() - REQ_ALL)),
        }
        debug_assert_eq!(values.len(), TREE_METRICS.len());
        let bytes_written = if self.op == TreeOp::Rm { 0 } else { self.stats.bytes };
        Ok(RunOut { values, bytes_written, ops: self.stats.entries })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        if fs::symlink_metadata(&self.copy).is_ok() {
            self.rm()?;
        }
        if self.op == TreeOp::CpFile {
            fs::remove_file(&self.src)?;
        }
        fs::remove_dir(&self.work)?;
        Ok(())
    }
    fn describe(&self) -> Option<String> {
        self.note.clone()
    }
}

/// `cp-file`'s source: `bytes` of the suite's data pattern (a pseudo-random
/// 4 KiB block, repeated: nothing along the way can shortcut zeros),
/// written 1 MiB at a time.
fn write_big_file(path: &Path, bytes: u64) -> io::Result<()> {
    use std::io::Write;
    let mut f = fs::File::create(path)?;
    let chunk = crate::workload::pattern(1 << 20);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

// ---------------------------------------------------------------- tracing

const TRACEFS: &str = "/sys/kernel/tracing";
const EVENT: &str = "events/fuse/fuse_request_send";

/// Requests counted in one pass.
pub struct Counts {
    pub total: u64,
    /// One per [`KINDS`] entry, then the other kinds.
    pub by_kind: Vec<u64>,
}

/// A tracefs instance of our own (its own ring buffer, its own event
/// switches) with `fuse:fuse_request_send` filtered to one connection.
/// Removed when dropped.
pub struct FuseTrace {
    inst: PathBuf,
    connection: u32,
    kb_per_cpu: u64,
}

/// The connection number the tracepoint reports for the mount holding
/// `dir`: the kernel's `dev_t` of its superblock, `major << 20 | minor`
/// (an anonymous device, major 0, for FUSE).
fn connection_of(dir: &Path) -> io::Result<u32> {
    let dev = fs::metadata(dir)?.dev();
    Ok((libc::major(dev) << 20) | libc::minor(dev))
}

/// Where tracefs is, mounting it first if it is not (as root).
fn tracefs() -> Result<PathBuf, String> {
    let root = PathBuf::from(TRACEFS);
    if root.join("instances").is_dir() {
        return Ok(root);
    }
    let (src, dst) = (c"nodev", std::ffi::CString::new(TRACEFS).unwrap());
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = cvt(unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) });
    match r {
        Ok(_) if root.join("instances").is_dir() => Ok(root),
        Ok(_) => Err(format!("tracefs mounted at {TRACEFS} but it has no instances directory")),
        Err(e) => Err(format!("tracefs is not mounted at {TRACEFS} and `mount -t tracefs` failed: {e}")),
    }
}

fn write_file(p: &Path, s: &str) -> io::Result<()> {
    fs::write(p, s).map_err(|e| io::Error::new(e.kind(), format!("write {s:?} to {}: {e}", p.display())))
}

impl FuseTrace {
    /// An instance for the FUSE mount holding `dir`, with room for
    /// `max_events` events in each CPU's buffer (a process may send all
    /// of them from one CPU).
    pub fn new(dir: &Path, max_events: u64) -> Result<FuseTrace, String> {
        let connection = connection_of(dir).map_err(|e| format!("stat {}: {e}", dir.display()))?;
        let root = tracefs()?;
        let name = unique_path(Path::new(""), "fuse-trace");
        let inst = root.join("instances").join(name.file_name().unwrap());
        fs::create_dir(&inst).map_err(|e| format!("cannot create the tracefs instance {}: {e}", inst.display()))?;
        // An event takes about 40 bytes of ring buffer (header, time delta
        // and the four fields); 64 leaves room for page headers.
        let kb_per_cpu = (max_events * 64 / 1024).clamp(1024, 512 << 10);
        let me = FuseTrace { inst, connection, kb_per_cpu };
        let ev = me.inst.join(EVENT);
        if !ev.is_dir() {
            return Err("this kernel has no fuse:fuse_request_send tracepoint".into());
        }
        // Filtered in the kernel so other mounts take no buffer space; the
        // parser checks the connection again in case the filter is refused.
        let _ = write_file(&ev.join("filter"), &format!("connection == {connection}"));
        write_file(&me.inst.join("buffer_size_kb"), &kb_per_cpu.to_string()).map_err(|e| e.to_string())?;
        Ok(me)
    }

    pub fn describe(&self) -> String {
        format!(
            "FUSE requests counted with the tracepoint fuse:fuse_request_send in tracefs instance {} \
             (connection {}, {} KiB of buffer per CPU), on during the timed part only",
            self.inst.display(),
            self.connection,
            self.kb_per_cpu
        )
    }

    /// Empties the buffer and switches the event on.
    pub fn start(&self) -> io::Result<()> {
        write_file(&self.inst.join("trace"), "")?;
        write_file(&self.inst.join(EVENT).join("enable"), "1")
    }

    /// Switches the event off and counts what the buffer holds; an error if
    /// the buffer lost events.
    pub fn stop(&self) -> io::Result<Counts> {
        write_file(&self.inst.join(EVENT).join("enable"), "0")?;
        let f = fs::File::open(self.inst.join("trace"))?;
        let mut c = Counts { total: 0, by_kind: vec![0; KINDS.len() + 1] };
        let conn = format!("connection {} ", self.connection);
        for line in BufReader::with_capacity(1 << 20, f).split(b'\n') {
            let line = line?;
            if line.first() == Some(&b'#') {
                if let Some((held, written)) = entries_header(&line) {
                    if written > held {
                        return Err(io::Error::other(format!(
                            "the trace buffer lost {} of {written} FUSE request events ({} KiB per CPU): \
                             counts would be short",
                            written - held,
                            self.kb_per_cpu
                        )));
                    }
                }
                continue;
            }
            let Some(op) = parse_event(&line, conn.as_bytes()) else { continue };
            c.total += 1;
            let k = KINDS.iter().position(|&(o, _)| o == op).unwrap_or(KINDS.len());
            c.by_kind[k] += 1;
        }
        Ok(c)
    }
}

impl Drop for FuseTrace {
    fn drop(&mut self) {
        let _ = fs::write(self.inst.join(EVENT).join("enable"), "0");
        if let Err(e) = fs::remove_dir(&self.inst) {
            eprintln!("ferrite-bench: cannot remove the tracefs instance {}: {e}", self.inst.display());
        }
    }
}

/// `(held, written)` from the trace header line
/// `# entries-in-buffer/entries-written: 1234/1234   #P:2`.
fn entries_header(line: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(line).ok()?;
    let rest = s.strip_prefix("# entries-in-buffer/entries-written:")?.trim_start();
    let nums = rest.split_whitespace().next()?;
    let (a, b) = nums.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The opcode of a `fuse_request_send` line of our connection:
/// `... fuse_request_send: connection 52 req 8 opcode 1 (FUSE_LOOKUP) len 53`.
fn parse_event(line: &[u8], conn: &[u8]) -> Option<u32> {
    let at = find(line, b"fuse_request_send: ")?;
    let rest = &line[at + b"fuse_request_send: ".len()..];
    if !rest.starts_with(conn) {
        return None;
    }
    let o = find(rest, b" opcode ")? + b" opcode ".len();
    let digits: &[u8] = &rest[o..];
    let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Removes the tracefs instances of killed runs (`ferrite-bench-PID-…` of a
/// process that no longer exists): their event would stay on and their
/// buffers allocated. Never mounts tracefs for it.
pub fn remove_stale(mine: u32) -> Vec<String> {
    let mut done = Vec::new();
    let Ok(dir) = fs::read_dir(Path::new(TRACEFS).join("instances")) else { return done };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(rest) = name.as_bytes().strip_prefix(b"ferrite-bench-") else { continue };
        let pid = rest.split(|&b| b == b'-').next().and_then(|p| std::str::from_utf8(p).ok()?.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if pid == mine || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = fs::write(e.path().join(EVENT).join("enable"), "0");
        match fs::remove_dir(e.path()) {
            Ok(()) => done.push(format!("removed the tracefs instance {}", e.path().display())),
            Err(err) => done.push(format!("cannot remove the tracefs instance {}: {err}", e.path().display())),
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_keys_follow_the_kinds() {
        assert_eq!(TREE_METRICS[REQ_ALL].key, "req_all");
        assert_eq!(TREE_METRICS.len(), REQ_ALL + 1 + KINDS.len() + 1);
        for (i, (_, name)) in KINDS.iter().enumerate() {
            let m = &TREE_METRICS[REQ_ALL + 1 + i];
            assert_eq!(m.key, format!("req_{}", name.to_lowercase()));
            assert!(m.label.contains(name));
        }
    }

    #[test]
    fn parses_trace_lines() {
        let line = b"              cp-4242    [001] ..... 12345.678901: fuse_request_send: connection 52 req 8 opcode 1 (FUSE_LOOKUP) len 53 ";
        assert_eq!(parse_event(line, b"connection 52 "), Some(1));
        assert_eq!(parse_event(line, b"connection 5 "), None);
        let hdr = b"# entries-in-buffer/entries-written: 1234/1300   #P:2";
        assert_eq!(entries_header(hdr), Some((1234, 1300)));
        assert_eq!(entries_header(b"# tracer: nop"), None);
    }
}
