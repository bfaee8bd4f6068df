//! The `preload` target: the workloads through the C library's calls in a
//! process that runs under `LD_PRELOAD=libferrite.so`.
//!
//! The preload library acts on a whole process, so the benchmark cannot
//! load it for one target only. Instead this target re-executes the
//! benchmark binary as a child (`ferrite-bench --preload-child`) with
//! `LD_PRELOAD` set to the library, `FERRITE_ROOT` a scratch directory,
//! `FERRITE_POOL` a scratch pool (formatted here first, exactly as the
//! `ferrite` target's: same size and inode slots, strict mode) and
//! `FERRITE_MOUNT=0` (no FUSE mount: nothing else uses the pool). The
//! child runs the workloads on a [`PosixDir`] inside the root: the same
//! libc calls as the tmpfs target, answered by the engine in the child.
//!
//! The child keeps every workload prepared while the parent runs the other
//! targets, so rounds stay interleaved exactly as for in-process targets:
//! the parent sends one line per step on the child's stdin (`prepare
//! NAME`, `run SEED`, `cleanup`, `quit`) and the child answers one line
//! on its stdout (`ok ...`, `none` or `err MESSAGE`). Only the child's
//! own timings are reported; the pipe round trip is outside them. The
//! child is idle (blocked on its stdin) while other targets run.

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use ferrite::{FormatOptions, Session};
use ferrite_pmem::Pmem;

use crate::scratch::{unique_path, Scratch};
use crate::target::{inodes_for, FileId, PosixDir, Remote, TPath, Target};
use crate::workload::{Prepared, RunOut, Workload};

/// The hidden flag that makes the binary a preload child.
pub const CHILD_FLAG: &str = "--preload-child";

/// Where libferrite.so is: `FERRITE_PRELOAD_LIB`, or next to this
/// executable, or in its parent directory (for binaries in `deps/`).
pub fn find_library() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_PRELOAD_LIB").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("FERRITE_PRELOAD_LIB={}: no such file", p.display()),
        ));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut tried = Vec::new();
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        let p = d.join("libferrite.so");
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p.display().to_string());
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "libferrite.so not found (looked at {}; set FERRITE_PRELOAD_LIB, or build it with \
             `cargo build --release -p ferrite-c`)",
            tried.join(", ")
        ),
    ))
}

struct Chan {
    child: Child,
    tx: ChildStdin,
    rx: BufReader<ChildStdout>,
}

impl Chan {
    /// Send one command line, read one answer line; `err ...` becomes an
    /// error, anything else is returned without its `ok`.
    fn ask(&mut self, cmd: &str) -> io::Result<Answer> {
        writeln!(self.tx, "{cmd}")?;
        self.tx.flush()?;
        let mut line = String::new();
        if self.rx.read_line(&mut line)? == 0 {
            let status = self.child.try_wait().ok().flatten();
            return Err(io::Error::other(format!(
                "preload child ended without answering {cmd:?} (status {})",
                status.map_or("unknown".into(), |s| s.to_string())
            )));
        }
        let line = line.trim_end();
        if let Some(msg) = line.strip_prefix("err ") {
            return Err(io::Error::other(format!("preload child: {msg}")));
        }
        if line == "none" {
            return Ok(Answer::None);
        }
        match line.strip_prefix("ok") {
            Some(rest) => Ok(Answer::Ok(rest.trim().to_string())),
            None => Err(io::Error::other(format!("preload child: unexpected answer {line:?} to {cmd:?}"))),
        }
    }
}

enum Answer {
    Ok(String),
    None,
}

/// The parent's side of the preload target.
pub struct PreloadTarget {
    chan: Mutex<Option<Chan>>,
    lib: PathBuf,
    child_desc: String,
    pool_len: u64,
    inodes: u64,
    // Removed after the child has ended (field order is drop order, and
    // `Drop` ends the child first).
    root: Scratch,
    pool: Scratch,
}

impl PreloadTarget {
    /// The pool goes in `pool_dir`, the directory the child works in
    /// outside the pool in `base`.
    pub fn new(base: &Path, pool_dir: &Path, pool_len: u64, quick: bool) -> io::Result<PreloadTarget> {
        let lib = find_library()?;
        let pool = Scratch::new(unique_path(pool_dir, "preload.pool"));
        let root = Scratch::new(unique_path(base, "preload.root"));
        std::fs::create_dir(root.path())?;
        // The pool formatted as the ferrite target's, then closed cleanly:
        // the child's library opens it (no recovery, no default format).
        let inodes = inodes_for(pool_len);
        {
            let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
                .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
            // Pages are faulted in on a thread of their own; measurements start
            // once it is done, as they did when creating the pool did it.
            pmem.wait_populated();
            let opts = FormatOptions { inodes: Some(inodes), ..FormatOptions::default() };
            let fs = Session::format(pmem, &opts)
                .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
            fs.unmount()?;
        }
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg(CHILD_FLAG);
        if quick {
            cmd.arg("--quick");
        }
        cmd.env("LD_PRELOAD", &lib)
            .env("FERRITE_ROOT", root.path())
            .env("FERRITE_POOL", pool.path())
            .env("FERRITE_MOUNT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn()?;
        let tx = child.stdin.take().expect("piped stdin");
        let rx = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut chan = Chan { child, tx, rx };
        let child_desc = match chan.ask("hello") {
            Ok(Answer::Ok(d)) => d,
            Ok(Answer::None) => String::new(),
            Err(e) => {
                let _ = chan.child.kill();
                let _ = chan.child.wait();
                return Err(io::Error::other(format!("preload target with {}: {e}", lib.display())));
            }
        };
        Ok(PreloadTarget { chan: Mutex::new(Some(chan)), lib, child_desc, pool_len, inodes, root, pool })
    }

    fn ask(&self, cmd: &str) -> io::Result<Answer> {
        let mut g = self.chan.lock().unwrap();
        let chan = g.as_mut().ok_or_else(|| io::Error::other("preload target used after finish"))?;
        chan.ask(cmd)
    }
}

impl Drop for PreloadTarget {
    fn drop(&mut self) {
        if let Some(mut chan) = self.chan.get_mut().unwrap().take() {
            let _ = chan.child.kill();
            let _ = chan.child.wait();
        }
    }
}

fn remote_only() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "the preload target runs its workloads in its child process")
}

impl Target for PreloadTarget {
    fn name(&self) -> &str {
        "preload"
    }
    fn describe(&self) -> String {
        format!(
            "Ferrite through libc calls under LD_PRELOAD={} (strict mode, no FUSE mount) in a child \
             process of this benchmark; pool {} of {} MiB with {} inode slots, FERRITE_ROOT {}; {}",
            self.lib.display(),
            self.pool.path().display(),
            self.pool_len >> 20,
            self.inodes,
            self.root.path().display(),
            self.child_desc
        )
    }
    fn durable(&self) -> &'static str {
        "yes (strict mode)"
    }
    fn accounting_note(&self) -> &'static str {
        "n/a (the pool is mapped in the child process; see the ferrite target)"
    }
    fn remote(&self) -> Option<&dyn Remote> {
        Some(self)
    }
    fn prepare(&self, path: &str) -> TPath {
        TPath::from_bytes(path.as_bytes())
    }
    fn mkdir(&self, _: &TPath) -> io::Result<()> {
        Err(remote_only())
    }
    fn rmdir(&self, _: &TPath) -> io::Result<()> {
        Err(remote_only())
    }
    fn open(&self, _: &TPath, _: bool) -> io::Result<FileId> {
        Err(remote_only())
    }
    fn close(&self, _: FileId) -> io::Result<()> {
        Err(remote_only())
    }
    fn pwrite(&self, _: FileId, _: &[u8], _: u64) -> io::Result<()> {
        Err(remote_only())
    }
    fn pread(&self, _: FileId, _: &mut [u8], _: u64) -> io::Result<()> {
        Err(remote_only())
    }
    fn create_empty(&self, _: &TPath) -> io::Result<()> {
        Err(remote_only())
    }
    fn unlink(&self, _: &TPath) -> io::Result<()> {
        Err(remote_only())
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        let Some(mut chan) = self.chan.lock().unwrap().take() else { return Ok(()) };
        let bye = chan.ask("quit");
        drop(chan.tx);
        let status = chan.child.wait()?;
        bye?;
        if !status.success() {
            return Err(io::Error::other(format!("preload child exited with {status}")));
        }
        Ok(())
    }
}

impl Remote for PreloadTarget {
    fn prepare_remote(&self, workload: &str) -> io::Result<Option<Box<dyn Prepared + '_>>> {
        match self.ask(&format!("prepare {workload}"))? {
            Answer::None => Ok(None),
            Answer::Ok(_) => Ok(Some(Box::new(RemotePrepared { t: self }))),
        }
    }
}

/// A workload prepared in the child (one at a time).
struct RemotePrepared<'t> {
    t: &'t PreloadTarget,
}

impl Prepared for RemotePrepared<'_> {
    fn run(&mut self, seed: u64) -> io::Result<RunOut> {
        let Answer::Ok(line) = self.t.ask(&format!("run {seed}"))? else {
            return Err(io::Error::other("preload child: no figures"));
        };
        let bad = || io::Error::other(format!("preload child: bad figures {line:?}"));
        let mut it = line.split_whitespace();
        let bytes_written = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let ops = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let values = it.map(|s| s.parse::<f64>()).collect::<Result<Vec<_>, _>>().map_err(|_| bad())?;
        Ok(RunOut { values, bytes_written, ops })
    }
    fn cleanup(self: Box<Self>) -> io::Result<()> {
        self.t.ask("cleanup").map(drop)
    }
}

// ---------------------------------------------------------------- child

/// Is the library serving `path` (a path under FERRITE_ROOT that exists
/// for the C library)? The kernel itself must not see it.
fn served_by_library(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: NUL-terminated path; stat fills a plain C struct. The raw
    // system call bypasses the interposed C library function.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let via_libc = libc::stat(c.as_ptr(), &mut st) == 0;
        let via_kernel = libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c.as_ptr(), &mut st, 0) == 0;
        via_libc && !via_kernel
    }
}

fn one_line(e: &io::Error) -> String {
    e.to_string().replace('\n', " ")
}

/// The child: serve the parent's commands until `quit` or end of input.
pub fn serve(workloads: &[Box<dyn Workload>]) -> io::Result<()> {
    let root = std::env::var_os("FERRITE_ROOT")
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::other("--preload-child without FERRITE_ROOT"))?;
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    let dir = match PosixDir::new("preload", &root) {
        Ok(d) => Some(d),
        Err(e) => {
            writeln!(out, "err cannot create the scratch directory in {}: {}", root.display(), one_line(&e))?;
            None
        }
    };
    let Some(dir) = dir else {
        out.flush()?;
        return Ok(());
    };
    let mut prepared: Option<Box<dyn Prepared + '_>> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let answer = match cmd {
            "hello" => {
                if served_by_library(dir.root()) {
                    format!("ok child pid {}; {}", std::process::id(), dir.describe())
                } else {
                    format!(
                        "err libferrite.so does not serve FERRITE_ROOT {} in the child (LD_PRELOAD not \
                         applied, or the library turned itself off: see its message above)",
                        root.display()
                    )
                }
            }
            "prepare" => match workloads.iter().find(|w| w.name() == arg) {
                None => format!("err unknown workload {arg:?}"),
                Some(w) => {
                    if let Some(p) = prepared.take() {
                        let _ = p.cleanup();
                    }
                    match w.prepare(&dir) {
                        Ok(Some(p)) => {
                            prepared = Some(p);
                            "ok".into()
                        }
                        Ok(None) => "none".into(),
                        Err(e) => format!("err {}", one_line(&e)),
                    }
                }
            },
            "run" => match (prepared.as_mut(), arg.parse::<u64>()) {
                (Some(p), Ok(seed)) => match p.run(seed) {
                    Ok(r) => {
                        let vals: Vec<String> = r.values.iter().map(|v| v.to_string()).collect();
                        format!("ok {} {} {}", r.bytes_written, r.ops, vals.join(" "))
                    }
                    Err(e) => format!("err {}", one_line(&e)),
                },
                (None, _) => "err run without prepare".into(),
                (_, Err(_)) => format!("err bad seed {arg:?}"),
            },
            "cleanup" => match prepared.take().map(|p| p.cleanup()) {
                Some(Err(e)) => format!("err {}", one_line(&e)),
                _ => "ok".into(),
            },
            "quit" => {
                if let Some(p) = prepared.take() {
                    let _ = p.cleanup();
                }
                writeln!(out, "ok")?;
                out.flush()?;
                break;
            }
            other => format!("err unknown command {other:?}"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    drop(prepared);
    drop(dir);
    Ok(())
}
