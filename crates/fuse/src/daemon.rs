//! Running a mount: open (or create) the pool, mount the engine, mount FUSE,
//! serve until unmounted, unmount the engine cleanly. Also `umount` and the
//! `mount.fuse.ferrite` helper.
//!
//! Life of a mount:
//! 1. SIGINT, SIGTERM and SIGHUP are blocked before any thread exists, so
//!    that only the signal thread sees them.
//! 2. With `daemon`, the process forks *now* (no thread yet) and the parent
//!    waits on a pipe for the child's word: "ready" and what was mounted
//!    (which the parent prints: pool, threads, the mode of new files) once
//!    the kernel has completed the FUSE handshake (the mount is usable), or
//!    an error.
//! 3. The pool is opened (created with the default size if missing) and
//!    mounted; a pool not cleanly unmounted is recovered by that mount.
//! 4. The FUSE session is created (mount + INIT handshake), then served by
//!    `threads` threads, each with its own cloned /dev/fuse descriptor.
//! 5. The first signal unmounts the mount point (lazily if busy: the daemon
//!    then exits once the last open file is closed); a second one aborts the
//!    FUSE connection. Either way the serving threads end, the adapter
//!    releases every pin, and the engine unmounts cleanly: the pool is
//!    marked clean. A SIGKILL leaves a dirty pool that the next mount
//!    recovers (and, with auto_unmount, fusermount3 removes the dead mount).

use crate::adapter::{log, Core, FerriteFuse, KernelFiles, Neighbour};
use crate::options::{MountConfig, Transport};
use crate::uring::{self, UringServer};
use ferrite::{Ferrite, FormatOptions, InodeNo, MountOptions, PoolError, SetAttr};
use ferrite_pmem::{Pmem, PmemError};
use fuser::{Config, MountOption, SessionACL};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of a pool created because POOL did not exist.
pub const DEFAULT_POOL_SIZE: u64 = 1 << 30;
/// Smallest pool file the engine accepts.
const MIN_POOL_BYTES: u64 = 64 * 4096;

/// What `ferrite mount` was asked.
#[derive(Clone, Debug)]
pub struct MountRequest {
    pub pool: PathBuf,
    pub mountpoint: PathBuf,
    pub config: MountConfig,
    /// Detach: return once the mount is usable, serving from a child process.
    pub daemon: bool,
}

fn io_msg(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn pmem_msg(e: &PmemError) -> String {
    match e {
        PmemError::AlreadyOpen => "already open by another process (mounted already?); nothing was changed".into(),
        PmemError::TooSmall { len, min } => {
            format!("not a Ferrite pool (the file is {len} bytes; a pool is at least {min})")
        }
        PmemError::Io(e) => io_msg(e),
    }
}

fn pool_msg(e: &PoolError) -> String {
    match e {
        PoolError::Pmem(p) => pmem_msg(p),
        PoolError::NotFerrite => {
            "not a Ferrite pool (no superblock); refusing to mount it (use `ferrite mkfs --force` to format it)".into()
        }
        other => other.to_string(),
    }
}

fn uid_gid() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Open the pool, or create and format it (with `size`) if it does not
/// exist or is an empty file.
///
/// A new pool is made under a temporary name beside it and published with
/// one rename once it is formatted, so a crash (or a kill) during creation
/// never leaves a file at `pool` that is not a Ferrite pool; of two
/// processes creating the same pool at once, one publishes and the other
/// opens what it published.
pub fn open_or_create_pool(pool: &Path, cfg: &MountConfig) -> Result<(Ferrite, bool), String> {
    let p = pool.display();
    let empty = match std::fs::metadata(pool) {
        Ok(m) if m.is_dir() => return Err(format!("{p}: is a directory, not a pool file")),
        Ok(m) => m.is_file() && m.len() == 0,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(e) => return Err(format!("{p}: {}", io_msg(&e))),
    };
    if empty && cfg.read_only {
        return Err(format!("{p}: no pool to mount read-only (a read-write mount or `ferrite mkfs` creates one)"));
    }
    if empty {
        if let Some(created) = create_pool(pool, cfg)? {
            return Ok((created, true));
        }
    }
    // Read-only: a private copy-on-write view under a shared lock. The pool
    // file is opened read-only and never written, not even by the recovery
    // of a crashed pool (which happens in the private view and is redone
    // by the next read-write mount); a read-write mount of the same pool
    // is refused meanwhile (and other read-only mounts are allowed).
    let pmem = if cfg.read_only {
        Pmem::open_file_private(pool, MIN_POOL_BYTES, true)
    } else {
        Pmem::open_file(pool, MIN_POOL_BYTES)
    }
    .map_err(|e| format!("{p}: {}", pmem_msg(&e)))?;
    let fs = Ferrite::mount(pmem, &mount_options(cfg)).map_err(|e| format!("{p}: cannot mount: {}", pool_msg(&e)))?;
    Ok((fs, false))
}

/// The engine's mount options from the `-o` options: the mode of new files
/// and, with `mode=buffered`, the buffered mount's options.
pub fn mount_options(cfg: &MountConfig) -> MountOptions {
    MountOptions {
        default_mode: cfg.default_file_mode.unwrap_or_default(),
        buffered: cfg.buffered_options(),
        ..MountOptions::default()
    }
}

/// Unmount `fs` cleanly and mount its pool again with `opts`, keeping the
/// pool file open (and locked) in between: how a pool just formatted (which
/// `Ferrite::format` mounts strict) becomes a buffered mount. The second
/// mount reads no log (the pool was left clean).
pub fn remount_with(fs: Ferrite, opts: &MountOptions) -> Result<Ferrite, String> {
    let pmem = fs.pmem().clone();
    fs.unmount().map_err(|e| format!("cannot unmount the new pool: {e}"))?;
    let pmem = Arc::try_unwrap(pmem).map_err(|_| "the pool is still in use".to_string())?;
    Ferrite::mount(pmem, opts).map_err(|e| format!("cannot mount the new pool: {}", pool_msg(&e)))
}

/// What a mount line says about the mode: "new files are strict" (or
/// fsync-atomic), or that the mount is buffered and with which bounds.
pub fn describe_mode(fs: &Ferrite, cfg: &MountConfig) -> String {
    match cfg.buffered_options().filter(|_| fs.is_buffered()) {
        Some(b) => format!("mode {}", MountConfig::describe_buffered(&b)),
        None => format!("new files are {}", fs.default_mode().as_str()),
    }
}

/// Create and format a pool at a temporary name beside `pool`, then publish
/// it there. None: another process published one first (open that).
fn create_pool(pool: &Path, cfg: &MountConfig) -> Result<Option<Ferrite>, String> {
    let p = pool.display();
    let size = cfg.size.unwrap_or(DEFAULT_POOL_SIZE);
    if size < MIN_POOL_BYTES {
        return Err(format!("{p}: size {size} is too small (at least {MIN_POOL_BYTES} bytes)"));
    }
    let name = pool.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = pool.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    remove_abandoned_creations(dir, &name);
    let tmp = dir.join(format!(".{name}.creating-{}", std::process::id()));
    let pmem =
        Pmem::create_file(&tmp, size, MIN_POOL_BYTES).map_err(|e| format!("{p}: cannot create: {}", pmem_msg(&e)))?;
    let fs = Ferrite::format(pmem, &FormatOptions::default()).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{p}: cannot format: {}", pool_msg(&e))
    });
    let fs = fs?;
    if let Some(mode) = cfg.default_file_mode {
        fs.set_default_mode(mode);
    }
    let (uid, gid) = uid_gid();
    let owner = (cfg.uid.unwrap_or(uid), cfg.gid.unwrap_or(gid));
    if owner != (0, 0) {
        let set = SetAttr { uid: Some(owner.0), gid: Some(owner.1), ..SetAttr::default() };
        if let Err(e) = fs.setattr(InodeNo::ROOT, &set) {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{p}: cannot set the owner of the root: {e}"));
        }
    }
    match publish(&tmp, pool) {
        Ok(()) if cfg.buffered_options().is_some() => {
            // Formatting mounted it strict: the same pool file, buffered.
            remount_with(fs, &mount_options(cfg)).map(Some).map_err(|e| format!("{p}: {e}"))
        }
        Ok(()) => Ok(Some(fs)),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            // Another process published its pool first: use that one.
            drop(fs);
            let _ = std::fs::remove_file(&tmp);
            Ok(None)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(format!("{p}: cannot create: {}", io_msg(&e)))
        }
    }
}

/// Rename `tmp` to `pool` unless a non-empty file is there (EEXIST); an
/// empty file at `pool` (made by `touch`, say) is replaced.
fn publish(tmp: &Path, pool: &Path) -> io::Result<()> {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let (from, to) = (c(tmp)?, c(pool)?);
    // SAFETY: two NUL-terminated paths.
    let r =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EEXIST) && std::fs::metadata(pool).map(|m| m.len() == 0).unwrap_or(false) {
        return std::fs::rename(tmp, pool);
    }
    Err(e)
}

/// Remove temporary pools of `name` whose creating process is gone (it
/// was killed while formatting).
fn remove_abandoned_creations(dir: &Path, name: &str) {
    let prefix = format!(".{name}.creating-");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)).and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// One line of /proc/self/mountinfo.
#[derive(Clone, Debug)]
pub struct MountInfo {
    pub major: u32,
    pub minor: u32,
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
}

fn unescape(s: &str) -> Vec<u8> {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("x"), 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Every mount of this process's namespace.
pub fn mounts() -> Vec<MountInfo> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let (maj, min) = f.get(2)?.split_once(':')?;
            Some(MountInfo {
                major: maj.parse().ok()?,
                minor: min.parse().ok()?,
                mountpoint: PathBuf::from(OsString::from_vec(unescape(f.get(4)?))),
                fstype: r.first()?.to_string(),
                source: String::from_utf8_lossy(&unescape(r.get(1).unwrap_or(&""))).into_owned(),
            })
        })
        .collect()
}

/// The topmost FUSE mount at `dir` (an absolute path).
pub fn fuse_mount_at(dir: &Path) -> Option<MountInfo> {
    mounts().into_iter().rev().find(|m| m.mountpoint == dir && (m.fstype == "fuse" || m.fstype.starts_with("fuse.")))
}

/// An absolute, normalized path that does not touch the file system at
/// the last component (a dead FUSE mount cannot be stat'ed).
fn absolute(p: &Path) -> Result<PathBuf, String> {
    let a = std::path::absolute(p).map_err(|e| format!("{}: {}", p.display(), io_msg(&e)))?;
    let mut out = PathBuf::new();
    for c in a.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    // Resolve symlinks in the parent directory, which is alive.
    if let (Some(parent), Some(name)) = (out.parent(), out.file_name()) {
        if let Ok(c) = parent.canonicalize() {
            return Ok(c.join(name));
        }
    }
    Ok(out)
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn umount2(dir: &Path, flags: i32) -> io::Result<()> {
    let c = cstr(dir);
    // SAFETY: a valid NUL-terminated path; umount2 touches no other memory.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fusermount_unmount(dir: &Path, lazy: bool) -> io::Result<()> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "neither fusermount3 nor fusermount is installed");
    for bin in ["fusermount3", "fusermount"] {
        let mut c = std::process::Command::new(bin);
        c.arg("-u");
        if lazy {
            c.arg("-z");
        }
        match c.arg("--").arg(dir).output() {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stderr).trim().to_string();
                return Err(io::Error::other(text));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Unmount a mount point: umount2 as root, fusermount3 -u otherwise.
pub fn unmount_path(dir: &Path, lazy: bool) -> io::Result<()> {
    match umount2(dir, if lazy { libc::MNT_DETACH } else { 0 }) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => fusermount_unmount(dir, lazy),
        r => r,
    }
}

/// Unmount `dir`, trying again for a moment while the kernel answers
/// EBUSY: a process that only passes through the mount (a `statfs` by a
/// monitoring agent, a path lookup) holds it for a moment, one that works
/// in it holds it longer. Returns the last answer.
fn unmount_busy_retried(dir: &Path) -> io::Result<()> {
    let mut wait_us = 500;
    let mut waited_us = 0;
    loop {
        match unmount_path(dir, false) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && waited_us < UNMOUNT_BUSY_WAIT_US_MAX => {
                std::thread::sleep(Duration::from_micros(wait_us));
                waited_us += wait_us;
                wait_us = (wait_us * 2).min(UNMOUNT_BUSY_WAIT_US_MAX - waited_us).max(1);
            }
            r => return r,
        }
    }
}

/// How long [`unmount_busy_retried`] waits for a busy mount in all.
const UNMOUNT_BUSY_WAIT_US_MAX: u64 = 100_000;

/// Is fusermount3 installed (for auto_unmount)?
pub fn have_fusermount3() -> bool {
    let in_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    // mount(8) runs helpers with a minimal environment.
    in_path || ["/usr/bin/fusermount3", "/bin/fusermount3"].iter().any(|p| Path::new(p).is_file())
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the
    // calling thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// The thread that turns SIGINT/SIGTERM/SIGHUP into an unmount.
fn spawn_signal_thread(set: libc::sigset_t, dir: PathBuf, conn: Option<u32>) {
    let set = SigSet(set);
    let spawned = std::thread::Builder::new()
        .name("ferrite-signals".into())
        .spawn(move || {
            let set = set;
            let mut count = 0;
            loop {
                let mut sig = 0;
                // SAFETY: waits on a valid, initialized signal set.
                if unsafe { libc::sigwait(&set.0, &mut sig) } != 0 {
                    continue;
                }
                count += 1;
                match count {
                    1 => {
                        log(format!("{}: unmounting {}", signal_name(sig), dir.display()));
                        match unmount_path(&dir, false) {
                            Ok(()) => {}
                            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                                log("the mount is busy (open files or a working directory in it): detached; \
                                     the daemon exits when the last one is gone (signal again to abort now)");
                                let _ = unmount_path(&dir, true);
                            }
                            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                                // Not mounted (any more): the session ends by itself.
                            }
                            Err(e) => log(format!("unmount failed: {e}")),
                        }
                    }
                    2 => match conn {
                        Some(c) => {
                            log(format!("{}: aborting the FUSE connection", signal_name(sig)));
                            let p = format!("/sys/fs/fuse/connections/{c}/abort");
                            if let Err(e) = std::fs::write(&p, b"1") {
                                log(format!("cannot abort through {p}: {e}; a third signal exits at once (the next mount recovers the pool)"));
                            }
                        }
                        None => log("no FUSE connection id known; a third signal exits at once (the next mount recovers the pool)"),
                    },
                    _ => {
                        log("exiting without a clean unmount: the next mount recovers the pool");
                        std::process::exit(3);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log(format!("cannot start the signal thread: {e}"));
    }
}

struct SigSet(libc::sigset_t);
// SAFETY: a sigset_t is plain data.
unsafe impl Send for SigSet {}

fn fuser_config(cfg: &MountConfig, pool: &Path) -> Config {
    let mut o = vec![MountOption::Subtype(cfg.subtype.clone())];
    let name = cfg.fsname.clone().unwrap_or_else(|| pool.display().to_string());
    if !name.contains(',') {
        o.push(MountOption::FSName(name));
    }
    if default_permissions_in_effect(cfg) {
        o.push(MountOption::DefaultPermissions);
    }
    if cfg.read_only {
        o.push(MountOption::RO);
    }
    o.push(if cfg.nosuid { MountOption::NoSuid } else { MountOption::Suid });
    o.push(if cfg.nodev { MountOption::NoDev } else { MountOption::Dev });
    if cfg.noexec {
        o.push(MountOption::NoExec);
    }
    if cfg.noatime {
        o.push(MountOption::NoAtime);
    }
    if cfg.sync {
        o.push(MountOption::Sync);
    }
    if cfg.dirsync {
        o.push(MountOption::DirSync);
    }
    // fusermount3's auto_unmount needs allow_other at the kernel, and then
    // only fuser keeps other users out (after the kernel's caches: they can
    // still stat cached entries). So it is the default only where other
    // users are let in anyway.
    let auto_unmount = auto_unmount_in_effect(cfg);
    let acl = if cfg.allow_other {
        SessionACL::All
    } else if cfg.allow_root || auto_unmount {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    if auto_unmount {
        o.push(MountOption::AutoUnmount);
    }
    let mut c = Config::default();
    c.mount_options = o;
    c.acl = acl;
    c.n_threads = Some(cfg.threads);
    c.clone_fd = cfg.threads > 1;
    c
}

/// Where the daemon tells its parent how the start went.
struct Report(Option<File>);

impl Report {
    fn send(&mut self, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}

fn fork_daemon() -> Result<Option<File>, String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", io::Error::last_os_error()));
    }
    // SAFETY: the descriptors were just created and are owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: called while the process has a single thread (nothing was
    // spawned yet), so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid > 0 {
        drop(w);
        let mut msg = String::new();
        let _ = File::from(r).read_to_string(&mut msg);
        if let Some(what) = msg.strip_prefix("ready ") {
            // The detached daemon's first log line, for the caller to see
            // (its own output goes to the log file or nowhere).
            println!("mounted {what}");
            std::process::exit(0);
        }
        if msg.is_empty() {
            msg = "the daemon died while starting".into();
        }
        return Err(msg);
    }
    drop(r);
    // SAFETY: setsid in the child; it is not a group leader after fork.
    unsafe { libc::setsid() };
    Ok(Some(File::from(w)))
}

fn redirect_stdio(log_path: Option<&Path>) {
    let null = File::options().read(true).write(true).open("/dev/null");
    let out = match log_path {
        Some(p) => File::options().create(true).append(true).open(p),
        None => File::options().write(true).open("/dev/null"),
    };
    // SAFETY: dup2 onto the standard descriptors of this process.
    unsafe {
        if let Ok(n) = &null {
            libc::dup2(n.as_raw_fd(), 0);
        }
        if let Ok(o) = &out {
            libc::dup2(o.as_raw_fd(), 1);
            libc::dup2(o.as_raw_fd(), 2);
        }
    }
}

/// Mount and serve until unmounted. In daemon mode the calling process
/// exits with status 0 as soon as the mount is usable (this function does
/// not return there); the daemon child returns when it is unmounted.
pub fn mount(req: &MountRequest) -> Result<(), String> {
    let cfg = &req.config;
    let pool = absolute(&req.pool)?;
    let dir = absolute(&req.mountpoint)?;
    let d = dir.display();
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{d}: not a directory")),
        // ENOTCONN, or ECONNABORTED when the daemon died with requests
        // in its io_uring queues: a mount whose daemon died. Remove it and
        // mount again.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
            if fuse_mount_at(&dir).is_some() && unmount_path(&dir, true).is_ok() {
                eprintln!("ferrite: {d}: removed a FUSE mount whose daemon had died");
            } else {
                return Err(format!(
                    "{d}: a FUSE mount whose daemon died is still there; `ferrite umount {d}` removes it"
                ));
            }
        }
        Err(e) => return Err(format!("{d}: {}", io_msg(&e))),
    }
    let set = block_signals();
    let mut report = Report(None);
    if req.daemon && !cfg.foreground {
        report.0 = fork_daemon()?;
    }
    let fail = |report: &mut Report, msg: String| -> Result<(), String> {
        if report.0.is_some() {
            // The detached child: the parent prints the error and exits 2.
            report.send(&msg);
            std::process::exit(2);
        }
        Err(msg)
    };
    let (fs, created) = match open_or_create_pool(&pool, cfg) {
        Ok(v) => v,
        Err(m) => return fail(&mut report, m),
    };
    let lat = cfg.latency;
    if lat.flush_line_ns != 0 || lat.fence_ns != 0 {
        fs.pmem().set_emulated_latency(lat);
    }
    let recovered = fs.mount_report().recovered;
    let fs = Arc::new(fs);
    let MountedSession { session, uring, transport, .. } = match mount_session(fs.clone(), &dir, cfg, &pool, None) {
        Ok(t) => t,
        Err(msg) => {
            finish(fs, cfg.read_only);
            return fail(&mut report, format!("{d}: {msg}"));
        }
    };
    let info = fuse_mount_at(&dir);
    let conn = info.as_ref().filter(|m| m.major == 0).map(|m| m.minor);
    let what = format!(
        "{} on {d}{}{}; {transport}, {}; {}{}",
        pool.display(),
        if created { " (new pool)" } else { "" },
        if recovered { " (recovered after an unclean shutdown)" } else { "" },
        fs.pmem().domain().describe(),
        describe_mode(&fs, cfg),
        if default_permissions_in_effect(cfg) { "" } else { "; private to root, without default_permissions" }
    );
    if report.0.is_some() {
        // SAFETY: chdir to "/" so the daemon keeps no directory busy.
        unsafe { libc::chdir(c"/".as_ptr()) };
        redirect_stdio(cfg.log.as_deref());
        log(format!("mounted {what}"));
        report.send(&format!("ready {what}"));
    } else {
        log(format!("mounted {what}; Ctrl-C or `ferrite umount {d}` unmounts"));
    }
    spawn_signal_thread(set, dir.clone(), conn);
    let served = session.run();
    if let Err(e) = &served {
        log(format!("session ended with an error: {e}"));
    }
    if let Some(u) = uring {
        u.join();
    }
    finish(fs, cfg.read_only);
    Ok(())
}

/// What [`mount_session`] made: the session (to be served), the io_uring
/// threads when granted, how the mount line describes the transport, and
/// the record of the files the kernel holds open.
struct MountedSession {
    session: fuser::Session<FerriteFuse>,
    uring: Option<UringServer>,
    transport: String,
    kernel_files: Arc<KernelFiles>,
}

/// Mount FUSE at `dir` for `fs` and start its transport: the session (to
/// be served by the caller), the io_uring threads when granted, and how the
/// mount line describes the transport. `label` names the mount's source.
/// On an error nothing is left mounted and every reference to `fs` taken
/// here is dropped.
fn mount_session(
    fs: Arc<Ferrite>,
    dir: &Path,
    cfg: &MountConfig,
    label: &Path,
    neighbour: Option<Arc<dyn Neighbour>>,
) -> Result<MountedSession, String> {
    let (cfg, settled) = settle_transport(cfg);
    let adapter = FerriteFuse::new(fs, &cfg);
    let core = adapter.core();
    if let Some(n) = neighbour {
        let _ = core.neighbour.set(n);
    }
    let kernel_files = adapter.kernel_files();
    let fcfg = fuser_config(&cfg, label);
    let mut session = fuser::Session::new(adapter, dir, &fcfg).map_err(|e| format!("cannot mount: {}", io_msg(&e)))?;
    match start_transport(core, &session, &cfg, fcfg.acl, settled) {
        Ok((uring, transport)) => Ok(MountedSession { session, uring, transport, kernel_files }),
        Err(msg) => {
            let _ = session.unmount();
            Err(msg)
        }
    }
}

/// After the handshake: serve the connection's requests over io_uring if
/// the kernel granted it (one queue and thread per CPU), else over
/// /dev/fuse only. Returns the io_uring threads and how the mount line
/// describes the transport; an error only when `transport=uring` was asked
/// and cannot be had.
fn start_transport<FS: fuser::Filesystem>(
    core: Arc<Core>,
    session: &fuser::Session<FS>,
    cfg: &MountConfig,
    acl: SessionACL,
    settled: Option<&str>,
) -> Result<(Option<UringServer>, String), String> {
    core.set_notifier(session.notifier());
    let dev = format!("transport /dev/fuse ({} thread(s))", cfg.threads);
    let why = if let Some(why) = settled {
        why.to_string()
    } else if cfg.transport == Transport::Dev {
        return Ok((None, dev));
    } else if !core.uring_granted.load(std::sync::atomic::Ordering::Acquire) {
        let setting = std::fs::read_to_string(URING_PARAM).map(|t| t.trim().to_string());
        match setting.as_deref() {
            Ok("Y") => "the kernel did not offer FUSE over io_uring".to_string(),
            Ok(_) => format!("{URING_PARAM} is off (as root: echo Y > {URING_PARAM})"),
            Err(_) => "this kernel has no FUSE over io_uring (Linux 6.14 or later with CONFIG_FUSE_IO_URING)".into(),
        }
    } else {
        let fd = session.as_fd().try_clone_to_owned().map_err(|e| format!("cannot duplicate /dev/fuse: {e}"))?;
        // SAFETY: geteuid cannot fail and touches no memory.
        let owner = unsafe { libc::geteuid() };
        match uring::start(core, fd, uring::Access { acl, owner }, MAX_WRITE) {
            Ok(u) => {
                let queues = u.queues();
                return Ok((Some(u), format!("transport io_uring ({queues} per-CPU queue(s))")));
            }
            Err(e) => format!("FUSE over io_uring failed to start: {e}"),
        }
    };
    if cfg.transport == Transport::Uring {
        return Err(format!("transport=uring: {why}"));
    }
    log(format!("serving through /dev/fuse: {why}"));
    Ok((None, dev))
}

/// Whether fusermount3 unmounts the mount when the daemon dies.
fn auto_unmount_in_effect(cfg: &MountConfig) -> bool {
    cfg.auto_unmount.unwrap_or_else(|| (cfg.allow_other || cfg.allow_root) && have_fusermount3())
}

/// Whether the kernel checks the mode bits (`default_permissions`).
pub(crate) fn default_permissions_in_effect(cfg: &MountConfig) -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    kernel_checks_permissions(cfg, euid, auto_unmount_in_effect(cfg))
}

/// `default_permissions` unless the option says otherwise or the mount is
/// private to root. A mount is private to root when root mounted it and
/// neither `allow_other` nor `allow_root` nor `auto_unmount` (which needs
/// allow_other at the kernel) is in effect: the kernel then lets in only
/// processes whose user ids are all 0 and whose group ids are all the
/// mounter's (`fuse_allow_current_process`), and for those the mode-bit checks can
/// only conclude that root may. Keeping them would cost a GETATTR of the
/// parent after every change in a directory, since each change drops the
/// parent's cached attributes and the check wants them fresh (0.96 requests
/// per entry in `cp -a`, one in three of `rm -rf`'s). What root is still
/// refused without them the kernel checks by itself: execute needs an
/// execute bit (`fuse_permission`), `access` is answered by the adapter,
/// and a read-only mount refuses writes in the VFS.
fn kernel_checks_permissions(cfg: &MountConfig, euid: u32, auto_unmount: bool) -> bool {
    let private_to_root = euid == 0 && !cfg.allow_other && !cfg.allow_root && !auto_unmount;
    cfg.default_permissions.unwrap_or(!private_to_root)
}

/// The transport to ask the kernel for at INIT, and why `auto` settles for
/// /dev/fuse before asking. fusermount3's `auto_unmount` removes a dead
/// daemon's mount only if opening it fails with ENOTCONN; when the daemon
/// served over io_uring, the kernel ends the requests caught in the rings'
/// teardown with ECONNABORTED instead, so fusermount3 leaves the dead
/// mount in place (tests/basic.rs, killed_daemon_leaves_a_recoverable_pool).
/// With `auto_unmount` in effect, `auto` therefore means /dev/fuse;
/// `transport=uring` still gets io_uring, with a warning.
fn settle_transport(cfg: &MountConfig) -> (MountConfig, Option<&'static str>) {
    let mut cfg = cfg.clone();
    let mut why = None;
    if auto_unmount_in_effect(&cfg) {
        match cfg.transport {
            Transport::Auto => {
                cfg.transport = Transport::Dev;
                why = Some(
                    "auto_unmount is on, and fusermount3 would not remove the mount of a daemon that died \
                     serving over io_uring (noauto_unmount or transport=uring to have io_uring)",
                );
            }
            Transport::Uring => {
                log("transport=uring with auto_unmount: if this daemon dies, fusermount3 may leave its mount in \
                 place (`ferrite umount` or the next mount removes it)")
            }
            Transport::Dev => {}
        }
    }
    (cfg, why)
}

/// The module setting that allows FUSE over io_uring.
pub const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// The largest write the kernel sends in one request (negotiated at INIT).
pub(crate) const MAX_WRITE: usize = 1 << 20;

/// Unmount the engine cleanly (marks the pool clean). A read-only mount
/// served a private view: there is nothing to write back.
fn finish(fs: Arc<Ferrite>, read_only: bool) {
    if read_only {
        drop(fs);
        log("unmounted (read-only: the pool file was never written)");
        return;
    }
    let pmem = fs.pmem().clone();
    match Arc::try_unwrap(fs) {
        Ok(fs) => match fs.unmount() {
            Ok(()) => {
                if pmem.domain() == ferrite_pmem::PersistenceDomain::PageCache {
                    if let Err(e) = pmem.sync_to_backing_file() {
                        log(format!("msync of the pool failed: {e}"));
                    }
                }
                log("unmounted; pool marked clean");
            }
            Err(e) => log(format!("engine unmount failed: {e}; the next mount recovers the pool")),
        },
        Err(_) => log("the file system is still referenced; not marked clean (the next mount recovers it)"),
    }
}

/// `ferrite umount DIR`: unmount, then wait (up to `wait`) until the daemon
/// has released the pool, and say whether it was left clean.
pub fn umount(dir: &Path, lazy: bool, wait: Duration) -> Result<String, String> {
    let dir = absolute(dir)?;
    let d = dir.display();
    let Some(info) = fuse_mount_at(&dir) else {
        return Err(match mounts().into_iter().rev().find(|m| m.mountpoint == dir) {
            Some(m) => format!("{d}: not a FUSE mount (type {})", m.fstype),
            None => format!("{d}: not mounted"),
        });
    };
    if let Err(e) = unmount_path(&dir, lazy) {
        return Err(if e.raw_os_error() == Some(libc::EBUSY) {
            format!(
                "{d}: busy: a process has a file open or its working directory there \
                 (`fuser -vm {d}` lists them); `ferrite umount --lazy {d}` detaches it now \
                 and the daemon exits once they are gone"
            )
        } else {
            format!("{d}: cannot unmount: {}", io_msg(&e))
        });
    }
    let pool = PathBuf::from(&info.source);
    if !pool.is_file() {
        return Ok(format!("unmounted {d}"));
    }
    if lazy {
        return Ok(format!("detached {d}; the daemon unmounts {} once its last user is gone", pool.display()));
    }
    // The daemon holds the pool's lock until the engine has unmounted.
    let start = Instant::now();
    loop {
        match Pmem::open_file(&pool, MIN_POOL_BYTES) {
            Ok(p) => {
                let state = match ferrite::read_superblock(&p) {
                    Ok(sb) if sb.state == ferrite::format::MountState::Clean => "clean",
                    Ok(_) => {
                        "NOT clean (the daemon did not finish, or a read-only mount served a crashed pool; \
                         the next read-write mount recovers it)"
                    }
                    Err(_) => "unreadable",
                };
                return Ok(format!("unmounted {d}; pool {} is {state}", pool.display()));
            }
            Err(PmemError::AlreadyOpen) if start.elapsed() < wait => std::thread::sleep(Duration::from_millis(20)),
            Err(PmemError::AlreadyOpen) => {
                return Ok(format!("unmounted {d}; the daemon still holds {} after {:?}", pool.display(), wait))
            }
            Err(e) => return Ok(format!("unmounted {d} ({}: {})", pool.display(), pmem_msg(&e))),
        }
    }
}

/// The `mount.fuse.ferrite` helper, as mount(8) runs it for
/// `mount -t fuse.ferrite POOL DIR -o OPTS` and for fstab lines:
/// `mount.fuse.ferrite POOL DIR [-sfnv] [-o OPTS]`. It detaches (mount(8)
/// expects the helper to return) unless `-o foreground` is given. Returns
/// the exit status.
pub fn helper_main(args: Vec<OsString>) -> i32 {
    let mut pos: Vec<OsString> = Vec::new();
    let mut opts: Vec<String> = Vec::new();
    let mut fake = false;
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        if s == "-o" {
            match it.next() {
                Some(v) => opts.push(v.to_string_lossy().into_owned()),
                None => {
                    eprintln!("mount.fuse.ferrite: -o needs a value");
                    return 1;
                }
            }
        } else if let Some(v) = s.strip_prefix("-o") {
            opts.push(v.to_string());
        } else if s == "-t" {
            it.next(); // the type, e.g. fuse.ferrite
        } else if s == "-h" || s == "--help" {
            println!(
                "usage: mount.fuse.ferrite POOL DIR [-o OPTIONS]\n\
                 Mounts a Ferrite pool (created with the default size if missing) and detaches.\n\
                 As mount(8) helper: `mount -t fuse.ferrite POOL DIR -o OPTIONS` or an fstab line\n\
                 `POOL DIR fuse.ferrite defaults,allow_other 0 0`.\n\n{}",
                crate::options::OPTIONS_HELP
            );
            return 0;
        } else if s.starts_with('-') && s.len() > 1 && s[1..].chars().all(|c| "sfnv".contains(c)) {
            fake |= s.contains('f'); // -f: mount(8)'s "fake", do nothing
        } else if s == "-N" {
            eprintln!("mount.fuse.ferrite: -N (mount namespaces) is not supported");
            return 1;
        } else {
            pos.push(a);
        }
    }
    if pos.len() != 2 {
        eprintln!("usage: mount.fuse.ferrite POOL DIR [-o OPTIONS]");
        return 1;
    }
    let config = match MountConfig::parse(opts.iter().map(String::as_str)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mount.fuse.ferrite: {e}");
            return 1;
        }
    };
    if fake {
        return 0;
    }
    let req = MountRequest {
        pool: PathBuf::from(&pos[0]),
        mountpoint: PathBuf::from(&pos[1]),
        daemon: !config.foreground,
        config,
    };
    match mount(&req) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("mount.fuse.ferrite: {e}");
            1
        }
    }
}

/// True when this program was started under the helper's name.
pub fn invoked_as_helper(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .map(|n| n.as_bytes().starts_with(b"mount.fuse.ferrite") || n == "mount.ferrite")
        .unwrap_or(false)
}

/// A mount served by threads of this process (benchmarks, embedding).
/// Unmounting it unmounts the engine cleanly.
pub struct Background {
    session: Option<fuser::BackgroundSession>,
    uring: Option<UringServer>,
    transport: String,
    fs: Option<Arc<Ferrite>>,
    dir: PathBuf,
    kernel_files: Arc<KernelFiles>,
}

/// Mount `fs` at `dir` and serve it from background threads of this
/// process. `label` names the mount's source in /proc/mounts.
/// With `mode=buffered` a strict `fs` is mounted again, buffered.
pub fn spawn(fs: Ferrite, dir: &Path, cfg: &MountConfig, label: &Path) -> io::Result<Background> {
    let dir = absolute(dir).map_err(io::Error::other)?;
    let fs = if cfg.buffered_options().is_some() && !fs.is_buffered() {
        remount_with(fs, &mount_options(cfg)).map_err(io::Error::other)?
    } else {
        fs
    };
    if let Some(mode) = cfg.default_file_mode {
        fs.set_default_mode(mode);
    }
    let fs = Arc::new(fs);
    let (session, uring, transport, kernel_files) = spawn_adapter(fs.clone(), &dir, cfg, label, None)?;
    Ok(Background { session: Some(session), uring, transport, fs: Some(fs), dir, kernel_files })
}

/// Mount an engine that this process also uses itself (the preload
/// library's owner process) and serve it from background threads.
/// Unmounting stops the serving threads and leaves the engine mounted.
/// `neighbour`: that front end, told around the kernel's reads and writes.
pub fn spawn_shared(
    fs: Arc<Ferrite>,
    dir: &Path,
    cfg: &MountConfig,
    label: &Path,
    neighbour: Arc<dyn Neighbour>,
) -> io::Result<Background> {
    let dir = absolute(dir).map_err(io::Error::other)?;
    if let Some(mode) = cfg.default_file_mode {
        fs.set_default_mode(mode);
    }
    let (session, uring, transport, kernel_files) = spawn_adapter(fs, &dir, cfg, label, Some(neighbour))?;
    Ok(Background { session: Some(session), uring, transport, fs: None, dir, kernel_files })
}

/// Mount and serve from background threads: the /dev/fuse session and,
/// when granted, the io_uring queues.
fn spawn_adapter(
    fs: Arc<Ferrite>,
    dir: &Path,
    cfg: &MountConfig,
    label: &Path,
    neighbour: Option<Arc<dyn Neighbour>>,
) -> io::Result<(fuser::BackgroundSession, Option<UringServer>, String, Arc<KernelFiles>)> {
    let mut cfg = cfg.clone();
    if cfg.auto_unmount.is_none() {
        cfg.auto_unmount = Some(false);
    }
    let MountedSession { session, uring, transport, kernel_files } =
        mount_session(fs, dir, &cfg, label, neighbour).map_err(io::Error::other)?;
    let last_worker = format!("fuser-{}", cfg.threads.max(1) - 1);
    let before = threads_named(&last_worker);
    let background = session.spawn()?;
    // The session's thread opens a /dev/fuse clone per worker, then starts
    // the workers: wait for the last one, so that no descriptor of the
    // mount's is still being opened when this returns (the preload
    // library lists the descriptors a mount opened, and moves each out of
    // the program's way as it is opened).
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads_named(&last_worker) <= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((background, uring, transport, kernel_files))
}

/// How many threads of this process bear the name `name`.
fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .count()
}

impl Background {
    pub fn mountpoint(&self) -> &Path {
        &self.dir
    }

    /// Which regular files the kernel holds open through the mount, and
    /// how to have it drop its cached pages of one.
    pub fn kernel_files(&self) -> Arc<KernelFiles> {
        self.kernel_files.clone()
    }

    /// Which transport serves the mount, as `ferrite mount` says it.
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// Unmount (waiting for the serving threads), then unmount the engine
    /// cleanly.
    pub fn unmount(mut self) -> io::Result<()> {
        self.stop()
    }

    /// Unmount and wait for the serving threads (true); or, when the mount
    /// stays busy (another process still uses it after a moment's wait:
    /// [`unmount_busy_retried`]), detach it lazily and leave
    /// the threads serving until that process lets go or this one exits
    /// (false). The engine is not touched in either case.
    pub fn unmount_or_detach(mut self) -> io::Result<bool> {
        let Some(s) = self.session.take() else { return Ok(true) };
        let uring = self.uring.take();
        match unmount_busy_retried(&self.dir) {
            Ok(()) => {
                // Every serving thread is joined before the answer, even
                // when the session's thread reports an error: the caller
                // may then unmount the engine, which no thread uses.
                let served = s.join();
                if let Some(u) = uring {
                    u.join();
                }
                if let Err(e) = served {
                    log(format!("the FUSE session of {} ended with an error: {e}", self.dir.display()));
                }
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                unmount_path(&self.dir, true)?;
                std::mem::forget(s);
                std::mem::forget(uring);
                Ok(false)
            }
            Err(e) => {
                std::mem::forget(s);
                std::mem::forget(uring);
                Err(e)
            }
        }
    }

    fn stop(&mut self) -> io::Result<()> {
        if let Some(s) = self.session.take() {
            unmount_busy_retried(&self.dir)?;
            let served = s.join();
            if let Some(u) = self.uring.take() {
                u.join();
            }
            served?;
        }
        if let Some(fs) = self.fs.take() {
            match Arc::try_unwrap(fs) {
                Ok(fs) => fs.unmount()?,
                Err(_) => return Err(io::Error::other("file system still referenced after unmount")),
            }
        }
        Ok(())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.session.is_some() {
            if let Err(e) = self.stop() {
                log(format!("unmount of {} failed: {e}", self.dir.display()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a mount that the kernel keeps to root's processes goes without
    /// the kernel's mode-bit checks, unless the options say otherwise.
    #[test]
    fn default_permissions_unless_private_to_root() {
        let parse = |o: &str| MountConfig::parse([o]).unwrap();
        assert!(!kernel_checks_permissions(&MountConfig::default(), 0, false));
        assert!(kernel_checks_permissions(&MountConfig::default(), 1000, false));
        assert!(kernel_checks_permissions(&MountConfig::default(), 0, true), "auto_unmount lets others in");
        assert!(kernel_checks_permissions(&parse("allow_other"), 0, false));
        assert!(kernel_checks_permissions(&parse("allow_root"), 0, false));
        assert!(kernel_checks_permissions(&parse("default_permissions"), 0, false));
        assert!(!kernel_checks_permissions(&parse("allow_other,no_default_permissions"), 0, false));
        assert!(!kernel_checks_permissions(&parse("no_default_permissions"), 1000, false));
    }
}
