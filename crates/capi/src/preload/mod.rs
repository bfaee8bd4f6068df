//! The preload library: with `LD_PRELOAD=libferrite.so`, `FERRITE_POOL`
//! and `FERRITE_ROOT`, calls on paths under the root and on the
//! descriptors they opened are served by the engine in this process.
//!
//! The design (docs/PRELOAD.md says it for users):
//! - **One owner.** The first process that loads the library and can take
//!   the pool's lock mounts the engine (recovering it after a crash) and
//!   becomes the owner. Any other process finds the pool held and turns
//!   the library off: its calls go to the kernel, which reaches the owner's
//!   engine through the owner's FUSE mount at the root.
//! - **The owner also serves a FUSE mount at the root**, from threads of
//!   its own, over the same engine (unless `FERRITE_MOUNT=0`). So every
//!   call that escapes interception (a glibc-internal open, an exec of a
//!   binary in the pool, a child process) still reaches the same file
//!   system, through the kernel.
//! - **Descriptor numbers are the kernel's.** Every Ferrite descriptor is a
//!   real kernel descriptor (an `O_PATH` open of `/dev/null`) whose number
//!   the engine session uses, so numbers never collide, close-on-exec is
//!   kept by the kernel per number, and a call that escapes interception
//!   gets `EBADF` instead of touching another file.
//! - **At fork** the child turns the library off and replaces each Ferrite
//!   descriptor by a real descriptor of the same file through the mount,
//!   at the same number and offset, so children inherit working
//!   descriptors.
//! - **At exit** stdio is flushed, the mount is unmounted, and the engine is
//!   unmounted cleanly. A killed owner leaves a pool that the next owner
//!   recovers, and a dead mount that it removes.

mod dirs;
mod hooks;
mod mmap;
mod modes;
mod paths;
mod stdio;
mod views;

pub use views::{free_buffer, patch, patch_buffer, peek, unpeek};

use crate::conv::{errno, set_errno};
use crate::real;
use engine::{Credentials, Errno, Fd, FsResult, OpenFlags, PathFs, Session};
use libc::{c_char, c_int};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// The library's state in this process.
pub struct Preload {
    pub session: Session,
    /// The root's absolute path, without a trailing slash (never "/").
    pub root: Vec<u8>,
    /// The FUSE mount at the root served by this process, if any.
    mount: Mutex<Option<ferrite_fuse::daemon::Background>>,
    /// Whether the current directory is inside the pool (the session's
    /// current directory is then the process's).
    cwd_in_pool: AtomicBool,
    /// Components of the current directory's pool path (how far a relative
    /// path may climb with ".." and stay in the pool).
    cwd_depth: AtomicUsize,
    /// The kernel's current directory when it is outside the pool, for
    /// relative paths that lead into it.
    kernel_cwd: Mutex<Vec<u8>>,
    /// Per Ferrite descriptor, the pool path it was opened by: what a
    /// forked child reopens through the mount.
    files: Mutex<HashMap<c_int, FdInfo>>,
    /// Kernel descriptors of files through the mount on which locks are
    /// really taken, so that the kernel arbitrates between this process's
    /// descriptions and the processes using the mount (docs/PRELOAD.md,
    /// "Locks"): one per open file description for flock and OFD locks
    /// (keyed by the description), one per inode for POSIX record locks
    /// (keyed by the inode number, with the high bit set). POSIX locks
    /// belong to the process, and closing any descriptor of the file drops
    /// them: one descriptor per inode, opened before the first POSIX lock on
    /// it and closed with the file's last Ferrite descriptor, is never
    /// closed under a lock.
    lock_fds: Mutex<HashMap<u64, c_int>>,
    /// The owner's process id: a child made by vfork or clone shares this
    /// memory, and must never shut the owner's engine down.
    pid: libc::pid_t,
    /// Descriptors the library itself opened (the pool file, /dev/fuse),
    /// each with the file it was open on: a forked child closes them, so
    /// that it neither keeps the pool's lock nor keeps the FUSE connection
    /// alive after the owner dies.
    own_fds: Vec<OwnFd>,
    /// The pool file's inode number: a forked child unmaps the pool (a
    /// mapping keeps the open file, and so its lock, alive).
    pool_ino: u64,
    /// An O_PATH descriptor of /dev/null that every Ferrite descriptor
    /// number duplicates.
    placeholder: c_int,
    /// `FERRITE_ATOMIC`: files made fsync-atomic when this process creates
    /// them or opens them for writing.
    atomic: modes::AtomicPatterns,
    /// The process's real user and group ids (`uid << 32 | gid`), which
    /// Linux's `access` checks against: read at load and after each
    /// identity change (hooks.rs), so that `access` costs no system call.
    pub real_ids: std::sync::atomic::AtomicU64,
}

/// A descriptor the library opened at load, and the file it was open on.
#[derive(Clone, Copy)]
struct OwnFd {
    fd: c_int,
    dev: u64,
    ino: u64,
}

impl OwnFd {
    /// `fd` and the file it is open on now (None when it is not open).
    fn of(fd: c_int) -> Option<OwnFd> {
        // SAFETY: fstat into a local buffer; a raw system call, which a
        // forked child of a multi-threaded parent may make.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::syscall(libc::SYS_fstat, fd, &mut st) != 0 {
                return None;
            }
            Some(OwnFd { fd, dev: st.st_dev, ino: st.st_ino })
        }
    }

    /// Whether the descriptor is still open on the same file: the list is
    /// taken while the mount's threads may still open and close
    /// descriptors of their own, and a number closed since may now be one
    /// of the program's.
    fn still_open(&self) -> bool {
        OwnFd::of(self.fd).is_some_and(|now| now.dev == self.dev && now.ino == self.ino)
    }
}

/// The descriptor numbers open in this process (without the one that
/// lists them).
fn open_fds() -> Vec<c_int> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    let listing = |n: &c_int| {
        std::fs::read_link(format!("/proc/self/fd/{n}"))
            .map(|t| t.as_os_str().as_encoded_bytes().ends_with(b"/fd"))
            .unwrap_or(true)
    };
    dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).filter(|n| !listing(n)).collect()
}

/// How long a process must have lived before its pool is prefaulted.
const PREFAULT_DELAY_MS: u64 = 50;
/// Prefault granularity: between chunks the thread checks that the pool is
/// still served.
const PREFAULT_CHUNK_BYTES: usize = 64 << 20;

/// The prefault thread: shutdown waits for it (it holds the pool mapped,
/// and so its lock) before the pool can be handed to the next program.
static PREFAULT: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

/// What the library keeps per Ferrite descriptor: the pool path it was
/// opened by, and its open file description, which a forked child reads
/// without taking any of the engine's locks (another thread of the parent
/// may have held one at the fork).
#[derive(Clone)]
pub struct FdInfo {
    path: Arc<Vec<u8>>,
    file: Option<Arc<engine::OpenFile>>,
}

/// Marks an inode number as a key of `lock_fds` (description keys are
/// addresses, which never have the top bit set in user space).
const POSIX_LOCK_KEY: u64 = 1 << 63;

/// Library states, in `STATE`.
const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static PRELOAD: AtomicPtr<Preload> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// Set while this thread runs the library's own code: a C library
    /// call made from inside (an allocation that opens a file, a message
    /// printed, the mount's threads) goes straight to the C library.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The library's state if it serves the pool and this thread is not
/// already inside it.
#[inline]
pub fn active() -> Option<&'static Preload> {
    if STATE.load(Ordering::Acquire) != ON || INSIDE.with(|i| i.get()) {
        return None;
    }
    let p = PRELOAD.load(Ordering::Acquire);
    // SAFETY: PRELOAD is set once, before STATE becomes ON, to a leaked
    // Box that is never freed.
    unsafe { p.as_ref() }
}

/// Run `f` as the library's own code: nested C library calls pass
/// through, and `errno` is left as the caller had it (an operation that
/// succeeds never changes it).
pub fn inside<T>(f: impl FnOnce() -> T) -> T {
    let saved = errno();
    IN_FLIGHT.fetch_add(1, Ordering::Acquire);
    let was = INSIDE.with(|i| i.replace(true));
    let r = f();
    INSIDE.with(|i| i.set(was));
    IN_FLIGHT.fetch_sub(1, Ordering::Release);
    set_errno(saved);
    r
}

/// Set while this process serves a FUSE mount: its threads (named
/// `fuser-*` by fuser, `fuser-uring-*` by the io_uring transport) open
/// descriptors of their own.
static MOUNT_ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether this thread is one of the mount's serving threads. The kernel's
/// thread name is asked for (no Rust thread-local, which may already be
/// gone when a C program's exit handlers open a file).
pub fn in_mount_thread() -> bool {
    if !MOUNT_ACTIVE.load(Ordering::Relaxed) {
        return false;
    }
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer.
    let r = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    r == 0 && name.starts_with(b"fuser")
}

/// Whether this thread runs the library's own code.
pub fn is_inside() -> bool {
    INSIDE.with(|i| i.get())
}

/// The library's own descriptors (the pool file, /dev/fuse, the
/// placeholder, shadow memfds), kept at high numbers: a program that asks
/// for a low number by itself (a shell's `exec 3< file` is dup2(x, 3))
/// must never land on one of them.
static OWN_FDS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

/// Move a descriptor the library just opened to a high number (close-on-
/// exec) and remember it as the library's own.
pub fn park(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    let base = own_fd_base();
    let moved = if fd >= base {
        fd
    } else {
        // SAFETY: duplicating and closing a descriptor the library owns.
        unsafe {
            let hi = real::fcntl(fd, libc::F_DUPFD_CLOEXEC, base as usize);
            if hi >= 0 {
                real::close(fd);
                hi
            } else {
                fd
            }
        }
    };
    OWN_FDS.lock().push(moved);
    moved
}

/// The library's own descriptors in [first, last].
pub fn own_in(first: libc::c_uint, last: libc::c_uint) -> Vec<c_int> {
    OWN_FDS.lock().iter().copied().filter(|&n| n as libc::c_uint >= first && n as libc::c_uint <= last).collect()
}

/// Whether `fd` is one of the library's own descriptors.
pub fn is_own(fd: c_int) -> bool {
    fd >= own_fd_base() && OWN_FDS.lock().contains(&fd)
}

/// The library's own descriptor is being closed by the library.
pub fn unpark(fd: c_int) {
    OWN_FDS.lock().retain(|&n| n != fd);
}

/// The lowest number for the library's own descriptors: 256 below the
/// soft descriptor limit (at least 64), far above what programs use.
fn own_fd_base() -> c_int {
    static BASE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    let b = BASE.load(Ordering::Relaxed);
    if b > 0 {
        return b;
    }
    // SAFETY: getrlimit into a local structure.
    let soft = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur.min(FD_LIMIT as u64) as c_int
        } else {
            1024
        }
    };
    let b = (soft - 256).max(64);
    BASE.store(b, Ordering::Relaxed);
    b
}

/// Calls running inside the library, so that exit can wait for them
/// before it unmounts the engine.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

// ---- which descriptors are Ferrite's ---------------------------------------

/// Descriptor numbers below this are tracked in a bitmap; a Ferrite
/// descriptor is never given a higher number (the kernel would need a
/// larger RLIMIT_NOFILE than Linux's default hard limit of 2^20).
pub const FD_LIMIT: usize = 1 << 20;
static FDS: [AtomicU64; FD_LIMIT / 64] = [const { AtomicU64::new(0) }; FD_LIMIT / 64];

/// Is `fd` a Ferrite descriptor of this process?
#[inline]
pub fn is_ferrite(fd: c_int) -> bool {
    fd >= 0 && (fd as usize) < FD_LIMIT && FDS[fd as usize / 64].load(Ordering::Relaxed) & (1 << (fd % 64)) != 0
}

fn mark(fd: c_int, on: bool) {
    let bit = 1u64 << (fd % 64);
    let w = &FDS[fd as usize / 64];
    if on {
        w.fetch_or(bit, Ordering::Relaxed);
    } else {
        w.fetch_and(!bit, Ordering::Relaxed);
    }
}

impl Preload {
    /// A new kernel descriptor number to hold a Ferrite descriptor: an
    /// O_PATH open of /dev/null (EBADF for any call that escapes).
    pub fn reserve_number(&self, cloexec: bool) -> Result<c_int, Errno> {
        // Duplicating one O_PATH descriptor of /dev/null costs no path
        // lookup; the duplicate gets the lowest free number, as open would.
        let cmd = if cloexec { libc::F_DUPFD_CLOEXEC } else { libc::F_DUPFD };
        // SAFETY: F_DUPFD on the library's own descriptor.
        let fd = unsafe { real::fcntl(self.placeholder, cmd, 0) };
        if fd < 0 {
            return Err(Errno(errno()));
        }
        if fd as usize >= FD_LIMIT {
            // SAFETY: closing the descriptor just opened.
            unsafe { real::close(fd) };
            return Err(Errno::EMFILE);
        }
        Ok(fd)
    }

    /// Make kernel number `fd` (already reserved) a Ferrite descriptor
    /// opened by `path`.
    pub fn adopt(&self, fd: c_int, path: Arc<Vec<u8>>) {
        let file = self.session.open_file(Fd(fd as u64)).ok();
        self.files.lock().insert(fd, FdInfo { path, file });
        mark(fd, true);
        stdio::standard_adopted(fd);
    }

    /// Forget Ferrite descriptor `fd` (the engine's side is closed already).
    /// The last descriptor of a description closes its flock/OFD lock
    /// descriptor, and the last of an inode its POSIX lock descriptor (each
    /// close drops the kernel's locks on it, as a close does).
    pub fn forget(&self, fd: c_int) {
        mark(fd, false);
        stdio::standard_forgotten(fd);
        let mut files = self.files.lock();
        let gone = files.remove(&fd);
        let mut locks = self.lock_fds.lock();
        if locks.is_empty() {
            return;
        }
        let Some(file) = gone.and_then(|i| i.file) else { return };
        let description = Arc::as_ptr(&file) as usize as u64;
        let inode = file.inode.ino.0 | POSIX_LOCK_KEY;
        let mut still = (false, false);
        for f in files.values().filter_map(|i| i.file.as_ref()) {
            still.0 |= Arc::as_ptr(f) as usize as u64 == description;
            still.1 |= f.inode.ino.0 | POSIX_LOCK_KEY == inode;
        }
        for (key, open) in [(description, still.0), (inode, still.1)] {
            if !open {
                if let Some(k) = locks.remove(&key) {
                    unpark(k);
                    // SAFETY: the library's own lock descriptor.
                    unsafe { real::close(k) };
                }
            }
        }
    }

    /// The lock descriptor for Ferrite descriptor `fd`: its description's
    /// (flock, OFD locks) or its inode's (`posix`: record locks), opened
    /// through the mount at the first lock. None without a mount, or when
    /// the file cannot be reopened (renamed or unlinked since it was opened).
    pub fn lock_fd(&self, fd: c_int, posix: bool) -> Option<c_int> {
        let info = self.files.lock().get(&fd).cloned()?;
        let file = info.file?;
        let key = if posix { file.inode.ino.0 | POSIX_LOCK_KEY } else { Arc::as_ptr(&file) as usize as u64 };
        if let Some(&k) = self.lock_fds.lock().get(&key) {
            return Some(k);
        }
        if self.mount.lock().is_none() || info.path.is_empty() {
            return None;
        }
        let acc = crate::conv::status_flags(&file.status()) & libc::O_ACCMODE;
        // Record locks need read access for F_RDLCK and write for F_WRLCK:
        // the inode's descriptor asks for both, falling back to the
        // description's own mode.
        let mut host = self.host_path(&info.path);
        host.push(0);
        let open = |flags: c_int| {
            // SAFETY: a NUL-terminated path; the descriptor is the library's.
            park(unsafe { real::open(host.as_ptr() as *const c_char, flags | libc::O_CLOEXEC | libc::O_NOFOLLOW, 0) })
        };
        let mut k = if posix { open(libc::O_RDWR) } else { -1 };
        if k < 0 {
            k = open(acc);
        }
        if k < 0 {
            return None;
        }
        // Another thread may have opened one meanwhile: keep the first.
        let mut locks = self.lock_fds.lock();
        if let Some(&other) = locks.get(&key) {
            unpark(k);
            // SAFETY: closing the duplicate just opened.
            unsafe { real::close(k) };
            return Some(other);
        }
        locks.insert(key, k);
        Some(k)
    }

    /// The pool path `fd` was opened by.
    pub fn path_of(&self, fd: c_int) -> Option<Arc<Vec<u8>>> {
        self.files.lock().get(&fd).map(|i| i.path.clone())
    }

    /// open(2) of a pool path: a reserved kernel number holding the engine's
    /// descriptor.
    pub fn open(&self, dirfd: Fd, path: &[u8], flags: c_int, mode: u32) -> Result<c_int, Errno> {
        let of = OpenFlags::from_libc(flags);
        let fd = self.reserve_number(of.cloexec)?;
        match inside(|| self.session.openat_fd(dirfd, path, of, mode & 0o7777, Fd(fd as u64))) {
            Ok(_) if of.tmpfile && !of.path => {
                // O_TMPFILE: the path names the directory, and the file has
                // no name to reopen it by (until a link gives it one).
                self.adopt(fd, Arc::new(Vec::new()));
                Ok(fd)
            }
            Ok(_) => {
                let full = self.pool_path(dirfd, path);
                if (of.write || of.create) && !of.path && !self.atomic.is_empty() {
                    self.apply_atomic_patterns(fd, path, full.as_deref());
                }
                self.adopt(fd, Arc::new(full.unwrap_or_default()));
                Ok(fd)
            }
            Err(e) => {
                // SAFETY: closing the number reserved above.
                unsafe { real::close(fd) };
                Err(e)
            }
        }
    }

    /// Open a FIFO, socket or device node of the pool (which the engine
    /// refuses with ENXIO: it has no pipe or driver behind it) as the
    /// kernel does, through this process's mount at the root: a kernel
    /// descriptor, with Linux's semantics (a FIFO's open waits for the
    /// other end, or fails with ENXIO for a non-blocking writer). None when
    /// there is no mount or the name is not such a node (the engine's
    /// answer stands).
    pub fn open_special(&self, dirfd: Fd, path: &[u8], flags: c_int, mode: u32) -> Option<c_int> {
        if self.mount.lock().is_none() {
            return None;
        }
        let follow = if flags & libc::O_NOFOLLOW != 0 { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
        let st = inside(|| self.session.fstatat(dirfd, path, follow)).ok()?;
        if !st.kind.is_special() {
            return None;
        }
        let mut host = self.host_path(&paths::normalize(&self.pool_path(dirfd, path)?));
        host.push(0);
        // SAFETY: a NUL-terminated path; flags and mode are the caller's.
        Some(unsafe { real::open(host.as_ptr() as *const c_char, flags, mode) })
    }

    /// Make the regular file just opened at `fd` fsync-atomic if its name
    /// (or, for a pattern with a `/`, its pool path) matches
    /// `FERRITE_ATOMIC`. A file that already is keeps its pending state (a
    /// mode change is a commit point). Failure changes nothing: the open
    /// stands and the file keeps its mode.
    fn apply_atomic_patterns(&self, fd: c_int, path: &[u8], full: Option<&[u8]>) {
        let target = match full {
            Some(f) => paths::normalize(f),
            // The file's directory is unknown: its name still matches.
            None => [&b"/"[..], path.rsplit(|&b| b == b'/').find(|c| !c.is_empty()).unwrap_or(b"")].concat(),
        };
        if !self.atomic.matches(&target) {
            return;
        }
        inside(|| {
            let Ok(ino) = self.session.fd_inode(Fd(fd as u64)) else { return };
            if self.session.getattr(ino).map(|st| st.kind) != Ok(engine::FileType::Regular) {
                return;
            }
            if self.session.file_mode_ino(ino) != Ok(engine::FileMode::FsyncAtomic) {
                let _ = self.session.set_file_mode_ino(ino, engine::FileMode::FsyncAtomic);
            }
        });
    }

    /// The absolute pool path of `path` relative to `dirfd`, where known.
    pub fn pool_path(&self, dirfd: Fd, path: &[u8]) -> Option<Vec<u8>> {
        if path.first() == Some(&b'/') {
            return Some(path.to_vec());
        }
        let base = if dirfd == engine::AT_FDCWD {
            inside(|| self.session.getcwd()).ok()?
        } else {
            self.path_of(dirfd.0 as c_int).map(|p| p.to_vec())?
        };
        let mut full = base;
        if full.last() != Some(&b'/') {
            full.push(b'/');
        }
        full.extend_from_slice(path);
        Some(full)
    }

    /// Close Ferrite descriptor `fd`, engine side and kernel number.
    pub fn close(&self, fd: c_int) -> FsResult<()> {
        stdio::standard_closing(fd);
        mmap::release_fd(self, fd);
        let r = inside(|| self.session.close(Fd(fd as u64)));
        self.forget(fd);
        // SAFETY: closing the kernel number that held the descriptor.
        unsafe { real::close(fd) };
        r
    }

    /// The host path of a pool path (the root prefixed).
    pub fn host_path(&self, pool: &[u8]) -> Vec<u8> {
        let mut p = self.root.clone();
        if pool != b"/" {
            p.extend_from_slice(pool);
        }
        p
    }
}

// ---- start and stop ----------------------------------------------------------

/// Run at load (an ELF constructor): start serving the pool if this process
/// is asked to and can own it.
extern "C" fn on_load() {
    if STATE.compare_exchange(UNINIT, STARTING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let started = inside(start);
    match started {
        Some(p) => {
            PRELOAD.store(Box::into_raw(Box::new(p)), Ordering::Release);
            STATE.store(ON, Ordering::Release);
            // SAFETY: registering functions with the C library; they are
            // `extern "C"` and live as long as the process.
            unsafe {
                libc::pthread_atfork(Some(before_fork), None, Some(after_fork_child));
                libc::atexit(on_exit);
            }
        }
        None => STATE.store(OFF, Ordering::Release),
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

fn env(name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStringExt;
    std::env::var_os(name).map(|v| v.into_vec()).filter(|v| !v.is_empty())
}

pub(crate) fn warn(msg: &str) {
    if env("FERRITE_QUIET").is_none() {
        let line = format!("libferrite: {msg}\n");
        // SAFETY: writing a buffer we own to standard error.
        unsafe { real::write(2, line.as_ptr().cast(), line.len()) };
    }
}

/// Mount the pool, or say why not (None: the library stays off).
fn start() -> Option<Preload> {
    use std::os::unix::ffi::OsStrExt;
    let root_env = env("FERRITE_ROOT")?;
    let pool_env = env("FERRITE_POOL").unwrap_or_else(|| b"/dev/shm/ferrite.pool".to_vec());
    let pool = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&pool_env));
    let root_path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&root_env));
    if !root_path.is_absolute() {
        warn("FERRITE_ROOT must be an absolute path; the library is off");
        return None;
    }
    // A dead mount left by a killed owner answers ENOTCONN: remove it.
    if let Err(e) = std::fs::metadata(&root_path) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            let _ = ferrite_fuse::daemon::unmount_path(&root_path, true);
        }
    }
    let _ = std::fs::create_dir_all(&root_path);
    let root = paths::normalize(&root_env);
    if root == b"/" {
        warn("FERRITE_ROOT may not be /; the library is off");
        return None;
    }
    let pool_abs = paths::normalize(&pool_env);
    if paths::under(&pool_abs, &root).is_some() {
        warn("the pool may not lie under FERRITE_ROOT; the library is off");
        return None;
    }
    // FERRITE_MODE: the mode of regular files created from now on, or a
    // buffered mount (tuned by FERRITE_BUFFERED_LAG_MS and
    // FERRITE_BUFFERED_OPS_MAX); FERRITE_ATOMIC: name patterns of files
    // made fsync-atomic.
    let mut cfg = ferrite_fuse::options::MountConfig::default();
    let default_mode = match env("FERRITE_MODE") {
        None => None,
        Some(v) if v == b"buffered" => {
            cfg.buffered = true;
            None
        }
        Some(v) => match modes::parse_mode(&v) {
            Some(m) => Some(m),
            None => {
                warn(&format!(
                    "FERRITE_MODE={}: not a mode (strict, fsync-atomic or buffered); the library is off",
                    String::from_utf8_lossy(&v)
                ));
                return None;
            }
        },
    };
    for (var, opt) in [("FERRITE_BUFFERED_LAG_MS", "buffered_lag_ms"), ("FERRITE_BUFFERED_OPS_MAX", "buffered_ops_max")]
    {
        if let Some(v) = env(var) {
            let word = format!("{opt}={}", String::from_utf8_lossy(&v));
            if let Err(e) = cfg.apply(&word).and_then(|()| cfg.check()) {
                warn(&format!("{var}: {e} (FERRITE_MODE=buffered); the library is off"));
                return None;
            }
        }
    }
    let atomic = modes::AtomicPatterns::parse(&env("FERRITE_ATOMIC").unwrap_or_default());
    let before = open_fds();
    // FERRITE_SIZE: the size of a pool this process creates (default 1 GiB).
    if let Some(size) = env("FERRITE_SIZE") {
        match ferrite_fuse::options::parse_size(&String::from_utf8_lossy(&size)) {
            Ok(n) => cfg.size = Some(n),
            Err(e) => {
                warn(&format!("FERRITE_SIZE: {e}; the library is off"));
                return None;
            }
        }
    }
    let fs = match ferrite_fuse::daemon::open_or_create_pool(&pool, &cfg) {
        Ok((fs, _)) => Arc::new(fs),
        Err(e) if e.contains("already open") => {
            // Held by another process. With a mount at the root (a `ferrite
            // mount` daemon, or an owner's own mount) calls go to the kernel,
            // which reaches that process's engine. Without one, a child of
            // the owner (FERRITE_OWNER names it) knows what it asked for
            // (FERRITE_MOUNT=0); anyone else is told.
            let owner_alive = env("FERRITE_OWNER")
                .and_then(|v| String::from_utf8_lossy(&v).parse::<libc::pid_t>().ok())
                // SAFETY: signal 0 only asks whether the process exists.
                .is_some_and(|pid| unsafe { libc::kill(pid, 0) } == 0);
            if !is_fuse_mount(&root_path) && !owner_alive {
                warn(&format!(
                    "{} is held by another process and {} is not mounted: calls under it go to the directory \
                     underneath, not to the pool",
                    pool.display(),
                    root_path.display()
                ));
            }
            return None;
        }
        Err(e) => {
            warn(&format!("{e}; the library is off"));
            return None;
        }
    };
    if let Some(m) = default_mode {
        fs.set_default_mode(m);
    }
    // Map the pool's pages in the background: each would otherwise fault at
    // its first touch on the program's own path.
    let pmem = fs.pmem().clone();
    // Opt-in (FERRITE_PREFAULT=1), and only for a process that lives a
    // while: measured here, it removes the first-touch faults of long runs
    // but slows a burst that overlaps it (SQLite's first 10,000 WAL inserts
    // ran 0.62x tmpfs with it, 0.79x without), and a short program (ls,
    // cat) would pay tens of milliseconds of system time per GiB.
    if env("FERRITE_PREFAULT").as_deref() == Some(b"1") {
        let spawned = std::thread::Builder::new().name("ferrite-prefault".into()).spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(PREFAULT_DELAY_MS));
            pmem.prefault(PREFAULT_CHUNK_BYTES, &mut || STATE.load(Ordering::Relaxed) == ON);
        });
        *PREFAULT.lock() = spawned.ok();
    }
    // SAFETY: a static NUL-terminated path.
    let placeholder = park(unsafe { real::open(c"/dev/null".as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) });
    if placeholder < 0 {
        warn("cannot open /dev/null; the library is off");
        return None;
    }
    // Children learn who owns the pool.
    // SAFETY: at load, before the program's threads run.
    unsafe { std::env::set_var("FERRITE_OWNER", std::process::id().to_string()) };
    let session = Session::new(fs.clone());
    session.set_credentials(process_credentials());
    let mount = if env("FERRITE_MOUNT").as_deref() == Some(b"0") {
        None
    } else {
        MOUNT_ACTIVE.store(true, Ordering::Relaxed);
        let m = start_mount(&fs, &root_path, &pool);
        MOUNT_ACTIVE.store(m.is_some(), Ordering::Relaxed);
        if let Some(m) = &m {
            mmap::serve_through(m.kernel_files());
        }
        m
    };
    let kernel_cwd =
        std::env::current_dir().map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_else(|_| b"/".to_vec());
    let p = Preload {
        session,
        root,
        mount: Mutex::new(mount),
        cwd_in_pool: AtomicBool::new(false),
        cwd_depth: AtomicUsize::new(0),
        kernel_cwd: Mutex::new(paths::normalize(&kernel_cwd)),
        files: Mutex::new(HashMap::new()),
        lock_fds: Mutex::new(HashMap::new()),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        own_fds: open_fds()
            .into_iter()
            .filter(|n| !before.contains(n))
            .chain(OWN_FDS.lock().iter().copied())
            .filter_map(OwnFd::of)
            .collect(),
        pool_ino: std::fs::metadata(&pool).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0),
        placeholder,
        atomic,
        real_ids: std::sync::atomic::AtomicU64::new(real_ids()),
    };
    restore_inherited(&p);
    // A process started inside the root has its current directory in the
    // pool. The kernel's current directory is then the directory the mount
    // now covers: it moves into the mount (`entered`), so that what the
    // kernel resolves relative to it (a Unix socket's bind, calls the
    // library does not intercept) reaches the pool, as after a chdir.
    let cwd = p.kernel_cwd.lock().clone();
    if let Some(rest) = paths::under(&cwd, &p.root) {
        if p.session.chdir(&rest).is_ok() {
            p.entered();
        }
    }
    Some(p)
}

/// Is `dir` the root of a FUSE mount?
fn is_fuse_mount(dir: &std::path::Path) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: a NUL-terminated path and a zeroed out-structure.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        real::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == FUSE_SUPER_MAGIC
    }
}

/// The FUSE mount at the root, served by threads of this process, so that
/// children and escaped calls reach the same engine. The kernel may cache
/// nothing: this process also changes the pool without telling it.
///
/// Over FUSE over io_uring when the kernel offers it (a request of this
/// process's own, through a description it shares with a child, is then
/// served on its own CPU), else /dev/fuse (and with
/// `FERRITE_FUSE_TRANSPORT=dev`). The rings' descriptors come from
/// `io_uring_setup` in the mount's threads, which the `syscall` hook moves
/// out of the program's way (`kernel_fd`, `park`) like every descriptor
/// the library opens: until stop 61 they took the lowest free numbers, a
/// shell's `exec 3> file` (`dup2` onto 3) replaced one, its queue stopped
/// ("io_uring queue 0: Bad file descriptor") and every later request of a
/// child through the mount waited forever, so stops 59 and 60 served this
/// mount over /dev/fuse only.
fn start_mount(
    fs: &Arc<engine::Ferrite>,
    root: &std::path::Path,
    pool: &std::path::Path,
) -> Option<ferrite_fuse::daemon::Background> {
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_err() {
        return None;
    }
    let cfg = ferrite_fuse::options::MountConfig {
        attr_timeout: std::time::Duration::ZERO,
        entry_timeout: std::time::Duration::ZERO,
        negative_timeout: std::time::Duration::ZERO,
        keep_cache: false,
        threads: 2,
        // FERRITE_FUSE_TRANSPORT=dev keeps it on /dev/fuse, as for `ferrite mount`.
        transport: ferrite_fuse::options::Transport::from_env(),
        ..Default::default()
    };
    match ferrite_fuse::daemon::spawn_shared(fs.clone(), root, &cfg, pool, Arc::new(mmap::OwnerMappings)) {
        Ok(b) => Some(b),
        Err(e) => {
            warn(&format!("no FUSE mount at {} ({e}): child processes will not see the pool", root.display()));
            None
        }
    }
}

/// The caller's identity: effective ids, groups and umask.
fn process_credentials() -> Credentials {
    // SAFETY: these calls have no preconditions; umask is read by setting
    // it and putting it back at once.
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        Credentials { umask: mask as u32, ..process_ids() }
    }
}

/// The process's real user and group ids as `uid << 32 | gid`.
pub(crate) fn real_ids() -> u64 {
    // SAFETY: getuid and getgid have no preconditions.
    unsafe { (libc::getuid() as u64) << 32 | libc::getgid() as u64 }
}

/// The ids Linux checks file permissions against (the file-system ids,
/// which follow the effective ids unless `setfsuid`/`setfsgid` set them
/// apart) and the supplementary groups; umask 0.
fn process_ids() -> Credentials {
    // SAFETY: these calls have no preconditions and only the groups buffer
    // as memory, sized by the first call (a group list changed between the
    // two calls is cut to the buffer, and the second call's count is kept).
    // setfsuid/setfsgid with an invalid id (-1) change nothing and return
    // the current id.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0; n.max(0) as usize];
        let n = libc::getgroups(groups.len() as c_int, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        let uid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as libc::uid_t;
        let gid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as libc::gid_t;
        Credentials { uid, gid, groups, umask: 0 }
    }
}

/// atexit: flush stdio (cookie streams write into the engine), then shut
/// down (the next mount skips the log scan).
extern "C" fn on_exit() {
    if active().is_none() {
        return;
    }
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    shutdown();
}

/// `_exit` by the owner: shut down without flushing stdio.
pub fn shutdown_for_exit() {
    shutdown();
}

/// Stop serving: stop the mount, wait for calls still running in other
/// threads, then unmount the engine cleanly. From here on the library
/// passes every call through.
fn shutdown() {
    let Some(p) = active() else { return };
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != p.pid {
        return;
    }
    STATE.store(OFF, Ordering::Release);
    // A current directory inside the mount would keep it busy: leave it
    // (the process is exiting, or its next image gets it back by
    // FERRITE_FDS).
    if p.cwd_in_pool.load(Ordering::Relaxed) {
        // SAFETY: a static path.
        unsafe { real::chdir(c"/".as_ptr()) };
    }
    // The numbers shared with children through the mount (`before_fork`)
    // are files of the mount too: the process keeps the numbers, as
    // placeholders (an exec described them to the next image first).
    for n in program_fds_on_mount() {
        // SAFETY: F_GETFD, then dup3 of the library's placeholder onto a
        // number of this process, keeping its close-on-exec flag.
        unsafe {
            let cloexec = real::fcntl(n, libc::F_GETFD, 0) & libc::FD_CLOEXEC != 0;
            real::dup3(p.placeholder, n, if cloexec { libc::O_CLOEXEC } else { 0 });
        }
    }
    // The lock descriptors are files of the mount: close them too (the
    // process is leaving, its locks with it).
    for (_, k) in p.lock_fds.lock().drain() {
        unpark(k);
        // SAFETY: the library's own lock descriptor.
        unsafe { real::close(k) };
    }
    let served_alone = inside(|| match p.mount.lock().take() {
        None => true,
        Some(m) => match (m.mountpoint().to_path_buf(), m.unmount_or_detach()) {
            (m_dir, Ok(joined)) => {
                if !joined {
                    warn(&format!(
                        "{} is still in use by another process: this process serves it until that one lets go \
                         or this one ends, and the next mount recovers the pool",
                        m_dir.display()
                    ));
                }
                joined
            }
            (_, Err(e)) => {
                warn(&format!("unmount of the root failed: {e}"));
                false
            }
        },
    });
    if !served_alone {
        // Another process still works in the mount, served by our threads
        // until this process ends: the engine stays as it is, durable, and
        // the next owner recovers it. A buffered engine is made durable up
        // to here (what the other process does from now on is durable
        // within the lag while this process lives, and a prefix of it
        // after).
        if p.session.is_buffered() {
            if let Err(e) = inside(|| p.session.persist_now()) {
                warn(&format!("cannot make the buffered operations durable ({e}): the next mount recovers the pool"));
            }
        }
        return;
    }
    // Calls that entered before STATE went OFF may still be running in
    // other threads; give them a moment, and if one is stuck, leave the
    // pool to be recovered by the next mount rather than unmount under it.
    for _ in 0..1000 {
        if IN_FLIGHT.load(Ordering::Acquire) == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    if IN_FLIGHT.load(Ordering::Acquire) != 0 {
        warn("calls still running at exit: the pool is left to be recovered by the next mount");
        return;
    }
    let saved = errno();
    let _ = inside(|| mmap::write_back_all(p));
    // It sees STATE OFF after its current chunk.
    if let Some(t) = PREFAULT.lock().take() {
        let _ = inside(|| t.join());
    }
    // SAFETY: STATE is OFF and no call is in flight, so nothing reads the
    // session again (`active` returns None from now on, and the fork
    // handler checks STATE): it can be moved out of the leaked state.
    let session: Session = unsafe { std::ptr::read(&p.session) };
    if let Err(e) = session.unmount() {
        warn(&format!("clean unmount failed ({e}): the next mount recovers the pool"));
    }
    set_errno(saved);
}

/// The environment variable that carries inherited Ferrite descriptors
/// across exec: `fd,flags,offset,hexpath` entries separated by `;`.
const INHERIT_ENV: &str = "FERRITE_FDS";

/// Before an exec by the owner: describe every Ferrite descriptor the new
/// program inherits (not close-on-exec), then shut down cleanly (the new
/// program, preloaded too, becomes the owner and reopens them at the same
/// numbers). Returns the `FERRITE_FDS=` entry for the new environment.
pub fn prepare_exec() -> Option<Vec<u8>> {
    let p = active()?;
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != p.pid {
        // A child sharing our memory (clone with CLONE_VM) is about to
        // exec: the owner stays the owner.
        return None;
    }
    let mut list = Vec::new();
    if p.cwd_in_pool.load(Ordering::Relaxed) {
        if let Ok(c) = inside(|| PathFs::getcwd(&p.session)) {
            list.push(format!("cwd,{}", hex(&c)));
        }
    }
    for (n, info) in p.files.lock().iter() {
        let path = &info.path;
        // SAFETY: F_GETFD on our own number.
        let inherited = unsafe { real::fcntl(*n, libc::F_GETFD, 0) } & libc::FD_CLOEXEC == 0;
        if !inherited || path.is_empty() {
            continue;
        }
        let Ok(f) = p.session.open_file(Fd(*n as u64)) else { continue };
        let flags = crate::conv::status_flags(&f.status().reopen());
        let pos = *f.pos.lock();
        list.push(format!("{n},{flags},{pos},{}", hex(path)));
    }
    // Numbers shared with children through the mount: the next image
    // reopens them in-process like the others (the sharing with children
    // that outlive the exec ends there), at the file's present name.
    for n in program_fds_on_mount() {
        // SAFETY: F_GETFD, F_GETFL and lseek on a number of this process.
        let (fd_flags, flags, pos) = unsafe {
            (real::fcntl(n, libc::F_GETFD, 0), real::fcntl(n, libc::F_GETFL, 0), real::lseek64(n, 0, libc::SEEK_CUR))
        };
        if fd_flags < 0 || fd_flags & libc::FD_CLOEXEC != 0 || flags < 0 {
            continue;
        }
        let Ok(host) = std::fs::read_link(format!("/proc/self/fd/{n}")) else { continue };
        use std::os::unix::ffi::OsStrExt;
        let Some(path) = host.as_os_str().as_bytes().strip_prefix(p.root.as_slice()) else { continue };
        let path: &[u8] = if path.is_empty() { b"/" } else { path };
        if path[0] != b'/' {
            continue;
        }
        list.push(format!("{n},{flags},{},{}", pos.max(0), hex(path)));
    }
    let copies = inside(|| views::copy_before_exec(p));
    shutdown();
    views::place_copies(copies);
    let mut entry = format!("{INHERIT_ENV}=").into_bytes();
    entry.extend_from_slice(list.join(";").as_bytes());
    Some(entry)
}

/// After a failed exec: serve the pool again, with the descriptors the
/// exec would have handed over.
pub fn resume_after_exec(entry: &[u8]) {
    let value = entry.strip_prefix(format!("{INHERIT_ENV}=").as_bytes()).unwrap_or(entry).to_vec();
    STATE.store(UNINIT, Ordering::Release);
    INHERITED.lock().replace(value);
    on_load();
}

/// What `resume_after_exec` hands to `start` (instead of the environment).
static INHERITED: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// A path as `FERRITE_FDS` carries it: two hex digits a byte.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    hex.chunks(2).map(|c| std::str::from_utf8(c).ok().and_then(|s| u8::from_str_radix(s, 16).ok())).collect()
}

/// Reopen the descriptors the previous program image handed over, at the
/// numbers it held (their placeholders were inherited, so the numbers are
/// still ours).
fn restore_inherited(p: &Preload) {
    use std::os::unix::ffi::OsStrExt;
    let value = match INHERITED.lock().take() {
        Some(v) => v,
        None => match std::env::var_os(INHERIT_ENV) {
            Some(v) => v.as_bytes().to_vec(),
            None => return,
        },
    };
    // SAFETY: at load, before any thread of the program runs.
    unsafe { std::env::remove_var(INHERIT_ENV) };
    for item in value.split(|&b| b == b';').filter(|i| !i.is_empty()) {
        let parts: Vec<&[u8]> = item.splitn(4, |&b| b == b',').collect();
        if let [b"cwd", hex] = parts[..] {
            if let Some(path) = unhex(hex) {
                if inside(|| p.session.chdir(&path)).is_ok() {
                    p.entered();
                }
            }
            continue;
        }
        let [n, flags, pos, hex] = parts[..] else { continue };
        let num = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok());
        let (Some(n), Some(flags), Some(pos)) = (num(n), num(flags), num(pos)) else { continue };
        let Some(path) = unhex(hex) else { continue };
        let n = n as c_int;
        // SAFETY: F_GETFD on an inherited number (is it still open?).
        if n < 0 || n as usize >= FD_LIMIT || unsafe { real::fcntl(n, libc::F_GETFD, 0) } < 0 {
            continue;
        }
        let of = OpenFlags::from_libc(flags as c_int);
        if inside(|| p.session.openat_fd(engine::AT_FDCWD, &path, of, 0, Fd(n as u64))).is_ok() {
            if let Ok(f) = p.session.open_file(Fd(n as u64)) {
                *f.pos.lock() = pos.max(0) as u64;
            }
            p.adopt(n, Arc::new(path));
        }
    }
}

/// pthread_atfork prepare handler (the owner, before it forks): every
/// Ferrite description the child may use (see [`Child::Forked`]) becomes
/// one kernel description of the same file through the owner's mount, at
/// the same numbers and offset. The child then shares it with the owner,
/// offset included, as Linux shares a description across fork: a shell's
/// `{ echo a; cat f; echo b; } > out` (or `exec > log` and commands after
/// it) writes `a`, `cat`'s bytes and `b` one after the other only if the
/// shell and `cat` move one offset; with a copy of the offset, the shell's
/// `b` overwrote the start of what `cat` wrote. The engine's description
/// cannot be shared with another process, so the owner's own calls on
/// those numbers go through the kernel and its mount from then on (FUSE
/// speed, for those files only). Left as they were (the child gets a copy
/// of the offset): close-on-exec descriptions of directories and of files
/// used only at explicit offsets, files with no path to reopen (unlinked,
/// or O_TMPFILE not named yet), descriptions or files holding locks
/// (closing the engine's description would drop them), and everything
/// when there is no mount.
extern "C" fn before_fork() {
    if let Some(p) = active() {
        share_with_children(p, Child::Forked);
    }
}

/// Which child `share_with_children` prepares for.
pub(crate) enum Child<'a> {
    /// A forked child: it has every number until it execs or closes them,
    /// and a program's child often moves a close-on-exec one onto its
    /// standard output before its exec (Python's `subprocess.run(...,
    /// stdout=f)`), so a close-on-exec description of a regular file is
    /// shared too, unless every call through it so far gave an explicit
    /// offset (pread, pwrite: a database's file, whose offset no call
    /// looks at).
    Forked,
    /// A child that glibc spawns and that execs at once (posix_spawn,
    /// system, popen): it keeps the numbers without close-on-exec, and the
    /// numbers a spawn's dup2 actions hand to it (listed).
    Spawned(&'a [c_int]),
}

/// `before_fork`'s work, also done before `posix_spawn`, `system` and
/// `popen`, whose children glibc starts without the fork handlers.
pub(crate) fn share_with_children(p: &Preload, child: Child) {
    if p.mount.lock().is_none() {
        return;
    }
    let files: Vec<(c_int, FdInfo)> = p.files.lock().iter().map(|(k, v)| (*k, v.clone())).collect();
    // Numbers by description: dup'ed numbers share one kernel description
    // afterwards as they shared the engine's.
    let mut descriptions: HashMap<usize, SharedDescription> = HashMap::new();
    for (fd, info) in files {
        let Some(file) = info.file else { continue };
        if info.path.is_empty() {
            continue;
        }
        // SAFETY: F_GETFD on a number of this process.
        let cloexec = unsafe { real::fcntl(fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0;
        let key = Arc::as_ptr(&file) as usize;
        descriptions.entry(key).or_insert_with(|| (file, info.path, Vec::new())).2.push((fd, cloexec));
    }
    let locked: Vec<u64> = p.lock_fds.lock().keys().copied().collect();
    for (key, (file, path, numbers)) in descriptions {
        let inherited =
            numbers.iter().any(|&(n, cloexec)| !cloexec || matches!(child, Child::Spawned(h) if h.contains(&n)))
                || (matches!(child, Child::Forked)
                    && file.inode.kind == engine::FileType::Regular
                    && !file.offset_only_explicit());
        let locks = locked.contains(&(key as u64)) || locked.contains(&(file.inode.ino.0 | POSIX_LOCK_KEY));
        if inherited && !locks {
            share_through_mount(p, &file, &path, &numbers);
        }
    }
}

/// One Ferrite description as `before_fork` finds it: the open file, the
/// pool path it was opened by, and its numbers with their close-on-exec.
type SharedDescription = (Arc<engine::OpenFile>, Arc<Vec<u8>>, Vec<(c_int, bool)>);

/// Make the numbers of one Ferrite description one kernel description of
/// the same file through the mount, at its offset (`before_fork`).
fn share_through_mount(p: &Preload, file: &engine::OpenFile, path: &[u8], numbers: &[(c_int, bool)]) {
    // What a standard stream's stand-in holds goes to the file first, and
    // the offset is read after it.
    for &(n, _) in numbers {
        stdio::standard_closing(n);
    }
    let Some(k) = open_through_mount(p, path, file, *file.pos.lock()) else { return };
    if let Some((dev, _)) = kernel_identity(k) {
        MOUNT_DEV.store(dev, Ordering::Relaxed);
    }
    for &(n, cloexec) in numbers {
        // SAFETY: replacing the placeholder at our own Ferrite number.
        if unsafe { real::dup3(k, n, if cloexec { libc::O_CLOEXEC } else { 0 }) } < 0 {
            continue;
        }
        mmap::release_fd(p, n);
        let _ = inside(|| p.session.close(Fd(n as u64)));
        p.forget(n);
    }
    // SAFETY: closing the descriptor opened above (its numbers keep it).
    unsafe { real::close(k) };
}

/// The device number of the owner's mount, once `before_fork` has made a
/// description a kernel one through it (0 before).
static MOUNT_DEV: AtomicU64 = AtomicU64::new(0);

/// The (device, inode) of kernel descriptor `n`.
fn kernel_identity(n: c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat into a local structure.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { real::fstat(n, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The program's kernel descriptors of files of the owner's mount: those
/// `before_fork` made, and their duplicates (a shell's `exec cat <&4`
/// moves one onto 0). At shutdown each is described to the next image (an
/// exec) and replaced by a placeholder, so that the owner's own
/// descriptors do not keep its mount busy.
fn program_fds_on_mount() -> Vec<c_int> {
    let dev = MOUNT_DEV.load(Ordering::Relaxed);
    if dev == 0 {
        return Vec::new();
    }
    open_fds()
        .into_iter()
        .filter(|&n| !is_ferrite(n) && !is_own(n) && kernel_identity(n).is_some_and(|(d, _)| d == dev))
        .collect()
}

/// pthread_atfork child handler: this process is no longer the owner. Its
/// Ferrite descriptors become real descriptors of the same files through
/// the mount (same number, same offset), or stay placeholders (EBADF) when
/// there is no mount.
extern "C" fn after_fork_child() {
    let Some(p) = (if STATE.load(Ordering::Acquire) == ON {
        // SAFETY: as in `active`.
        unsafe { PRELOAD.load(Ordering::Acquire).as_ref() }
    } else {
        None
    }) else {
        return;
    };
    STATE.store(OFF, Ordering::Release);
    let parked: Vec<c_int> = OWN_FDS.try_lock().map(|v| v.clone()).unwrap_or_default();
    let opened_at_load = p.own_fds.iter().filter(|o| o.still_open()).map(|o| o.fd);
    for n in opened_at_load.chain(parked.iter().copied()) {
        // SAFETY: closing this child's copies of the library's descriptors.
        unsafe { libc::syscall(libc::SYS_close, n) };
    }
    mmap::close_shadows_in_child();
    views::copy_in_child();
    unmap_pool(p.pool_ino);
    let mounted = p.mount.try_lock().map(|m| m.is_some()).unwrap_or(false);
    let files: Vec<(c_int, FdInfo)> = match p.files.try_lock() {
        Some(f) => f.iter().map(|(k, v)| (*k, v.clone())).collect(),
        None => return,
    };
    for (fd, info) in files {
        mark(fd, false);
        if !mounted || info.path.is_empty() {
            continue;
        }
        if let Some(file) = &info.file {
            reopen_through_mount(p, fd, &info.path, file);
        }
    }
}

/// Unmap every mapping of the file with inode `ino` (the pool, in a forked
/// child). Reads /proc/self/maps with raw system calls only: the child of
/// a multi-threaded parent may only call async-signal-safe functions.
fn unmap_pool(ino: u64) {
    if ino == 0 {
        return;
    }
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: raw open/read/close of /proc/self/maps into our buffer.
    let n = unsafe {
        let fd = libc::syscall(libc::SYS_open, c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) as c_int;
        if fd < 0 {
            return;
        }
        let mut used = 0usize;
        loop {
            let k = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr().add(used), buf.len() - used);
            if k <= 0 {
                break;
            }
            used += k as usize;
            if used == buf.len() {
                break;
            }
        }
        libc::syscall(libc::SYS_close, fd);
        used
    };
    for line in buf[..n].split(|&b| b == b'\n') {
        // "start-end perms offset dev inode path"
        let mut f = line.split(|&b| b == b' ').filter(|x| !x.is_empty());
        let (Some(range), _, _, _, Some(inode)) = (f.next(), f.next(), f.next(), f.next(), f.next()) else { continue };
        if std::str::from_utf8(inode).ok().and_then(|s| s.parse::<u64>().ok()) != Some(ino) {
            continue;
        }
        let Some(dash) = range.iter().position(|&b| b == b'-') else { continue };
        let hex = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| usize::from_str_radix(s, 16).ok());
        if let (Some(start), Some(end)) = (hex(&range[..dash]), hex(&range[dash + 1..])) {
            // SAFETY: unmapping the pool in a child that never touches it.
            unsafe { libc::syscall(libc::SYS_munmap, start, end - start) };
        }
    }
}

fn reopen_through_mount(p: &Preload, fd: c_int, path: &[u8], file: &engine::OpenFile) {
    // SAFETY: F_GETFD on our own number.
    let cloexec = unsafe { real::fcntl(fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0;
    // The offset's lock may be held by a thread the child does not have.
    let pos = file.pos.try_lock().map(|p| *p).unwrap_or(0);
    let Some(k) = open_through_mount(p, path, file, pos) else { return };
    // SAFETY: the calls act on descriptors this child owns.
    unsafe {
        real::dup3(k, fd, if cloexec { libc::O_CLOEXEC } else { 0 });
        real::close(k);
    }
}

/// A kernel descriptor (close-on-exec) of the file at pool path `path`
/// through the owner's mount, with the status flags of the description
/// `file`, at offset `pos`; None if it cannot be opened there.
fn open_through_mount(p: &Preload, path: &[u8], file: &engine::OpenFile, pos: u64) -> Option<c_int> {
    let flags = crate::conv::status_flags(&file.status().reopen());
    let mut host = p.host_path(path);
    host.push(0);
    // SAFETY: a NUL-terminated path; the descriptor opened is the caller's
    // or closed here.
    let k = unsafe { real::open(host.as_ptr() as *const c_char, flags | libc::O_CLOEXEC, 0) };
    if k < 0 {
        return None;
    }
    // SAFETY: seeking the descriptor just opened, or closing it.
    if pos > 0 && unsafe { real::lseek64(k, pos as i64, libc::SEEK_SET) } < 0 {
        unsafe { real::close(k) };
        return None;
    }
    Some(k)
}

/// Deliver a result as C does: the value, or -1 with errno.
pub fn c_ret<T: crate::conv::FailValue>(r: FsResult<T>) -> T {
    crate::conv::ret(r)
}

pub fn ok0(r: FsResult<()>) -> c_int {
    crate::conv::ret0(r)
}

/// A session descriptor from a kernel number.
#[inline]
pub fn fd(n: c_int) -> Fd {
    Fd(n as u64)
}

/// The errno to answer for a buffer the kernel would refuse: NULL or an
/// address no user mapping can have.
#[inline]
pub fn bad_buffer(p: *const u8, len: usize) -> bool {
    len > 0 && ((p as usize) < 4096 || (p as usize).checked_add(len).is_none_or(|end| end > 0x7fff_ffff_f000))
}

#[cfg(test)]
mod tests {
    use super::OwnFd;
    use std::os::fd::AsRawFd;

    /// A descriptor number the library listed, closed since and reused for
    /// another file, is no longer the library's: a forked child must not
    /// close it.
    #[test]
    fn a_listed_number_reused_for_another_file_is_not_own() {
        let dir = std::env::temp_dir().join(format!("ferrite-ownfd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = std::fs::File::create(dir.join("first")).unwrap();
        let n = first.as_raw_fd();
        let listed = OwnFd::of(n).expect("open");
        assert!(listed.still_open());
        // The number now stands for another file (dup2 replaces it in one
        // step, so no other test's descriptor can take it in between).
        let second = std::fs::File::create(dir.join("second")).unwrap();
        // SAFETY: both descriptors are this test's own.
        assert_eq!(unsafe { libc::dup2(second.as_raw_fd(), n) }, n);
        assert!(!listed.still_open(), "the number is another file's now");
        drop(first);
        assert!(!listed.still_open(), "closed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
