//! What a workload runs against. Every target takes the same calls with the
//! same paths; workloads are written once against [`Target`].
//!
//! Implemented here: [`FerriteLib`] (the engine linked in, through
//! `PathFs`), [`PosixDir`] (real system calls on a directory: tmpfs in
//! `/dev/shm`, and the directory inside an ext4 or FUSE mount) and
//! [`HwLimit`] (the bytes of each operation made durable with nothing else
//! around them: the physical floor). `ext4.rs` and `fuse.rs` add the
//! mounted targets.
//!
//! Every method added after the first version has a default that makes the
//! POSIX call on the descriptor or the NUL-terminated path, which is right
//! for every target built on [`PosixDir`]: later kernel-path targets (FUSE,
//! LD_PRELOAD) plug in without implementing them.
//!
//! The zero-copy calls of issue 12 ([`Target::view`], [`Target::patch`],
//! [`Target::sendfile`]) follow the same rule: the defaults are the kernel's
//! nearest equivalents (a `mmap` per view, `sendfile(2)`, no patch at all),
//! and the Ferrite library and the hardware limit override them.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferrite::{
    BufferId, BufferedOptions, BufferedStats, Fd, FileMode, FormatOptions, MountOptions, OpenFlags, PathFs, Session,
    ViewId,
};
use ferrite_pmem::{Event, Pmem, PoolOffset};

use crate::scratch::{unique_path, Scratch};

/// An open file of a target (its descriptor, or what stands for one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId(pub u64);

/// A path made ready for a target's calls by [`Target::prepare`], outside
/// the timed loops (so no formatting or allocation is measured).
#[derive(Clone, Debug)]
pub struct TPath(Vec<u8>);

impl TPath {
    /// A path kept as given (targets that take it verbatim).
    pub fn from_bytes(b: &[u8]) -> TPath {
        TPath(b.to_vec())
    }

    /// The path as a C string pointer (kernel targets keep a trailing NUL).
    fn c(&self) -> *const libc::c_char {
        debug_assert_eq!(self.0.last(), Some(&0), "not a kernel path");
        self.0.as_ptr().cast()
    }
}

/// What reached the media during an accounting pass (see
/// [`Target::accounting_begin`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MediaBytes {
    /// Bytes stored to the media: for a `ferrite_pmem` pool every byte of
    /// every store, non-temporal store and 8-byte commit; for a block
    /// device the sectors written.
    pub stored: u64,
    /// 64-byte lines written back (flushed or streamed), if known.
    pub lines: Option<u64>,
    /// Store fences, if known.
    pub fences: Option<u64>,
}

/// A read-only view of file bytes in this process's address space, from
/// [`Target::view`]: `len` bytes at `ptr`, valid until
/// [`Target::release`].
#[derive(Debug)]
pub struct View {
    pub ptr: *const u8,
    pub len: usize,
    /// What the target needs to release it: a Ferrite view id, or the start
    /// of the mapping (kernel targets).
    pub(crate) handle: usize,
    /// Bytes mapped from `handle` (kernel targets), 0 otherwise.
    pub(crate) mapped: usize,
}

/// A writable buffer from [`Target::patch_buffer`]: `len` bytes at `ptr`,
/// filled by the caller with ordinary stores, then handed to
/// [`Target::patch`] (or [`Target::free_buffer`]).
#[derive(Debug)]
pub struct PatchBuf {
    pub ptr: *mut u8,
    pub len: usize,
    /// A Ferrite buffer id, or a pool offset (hw-limit).
    pub(crate) handle: usize,
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("{what}: not available on this target"))
}

/// Times of one mount of a [`RemountProbe`].
#[derive(Clone, Copy, Debug)]
pub struct MountTimes {
    /// Opening the pool or device and mounting it.
    pub mount: Duration,
    /// One `stat` of a file deep in the tree right after the mount (lazy
    /// indexes are built here).
    pub first_lookup: Duration,
    /// Time the engine itself reports for recovery, if it does.
    pub recovery: Option<Duration>,
}

/// A second file system of the target's kind, holding many files, that can
/// be unmounted and mounted again (see [`Target::remount_probe`]).
pub trait RemountProbe: Send {
    fn describe(&self) -> String;
    /// Clean unmount (untimed), then a timed mount.
    fn clean(&mut self) -> io::Result<MountTimes>;
    /// A simulated crash (some work, then the file system dropped without
    /// unmounting; untimed), then a timed mount that recovers. `None` if the
    /// target cannot simulate a crash.
    fn crash(&mut self) -> io::Result<Option<MountTimes>>;
}

/// A file system (or stand-in for one) under test. Paths given to
/// [`prepare`](Target::prepare) are absolute inside the target ("/d/f1");
/// each target maps them to its own root. Methods take `&self` and targets
/// are `Sync`, so multi-threaded workloads share one target.
pub trait Target: Sync {
    /// Short name used in tables and CSV ("ferrite", "tmpfs", "hw-limit").
    fn name(&self) -> &str;
    /// One line on what it is and where it lives.
    fn describe(&self) -> String;
    /// Turn a target-absolute path into the form the calls below take.
    fn prepare(&self, path: &str) -> TPath;
    fn mkdir(&self, path: &TPath) -> io::Result<()>;
    fn rmdir(&self, path: &TPath) -> io::Result<()>;
    /// Open read-write, creating the file if `create` (not exclusive).
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId>;
    fn close(&self, f: FileId) -> io::Result<()>;
    /// Write all of `data` at `offset` (a short write is an error).
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()>;
    /// Fill all of `buf` from `offset` (a short read is an error).
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Create an empty file: open(O_CREAT|O_EXCL) then close.
    fn create_empty(&self, path: &TPath) -> io::Result<()>;
    fn unlink(&self, path: &TPath) -> io::Result<()>;
    /// Clean shutdown (unmount), then remove what the target created.
    fn finish(self: Box<Self>) -> io::Result<()>;

    /// Create a new file (`O_CREAT|O_EXCL`, read-write) and keep it open.
    fn create(&self, path: &TPath) -> io::Result<FileId> {
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path.
        let fd = cvt(unsafe { libc::open(path.c(), flags, 0o644 as libc::c_uint) })?;
        Ok(FileId(fd as u64))
    }
    /// Make the file's data and metadata durable (`fsync`).
    fn fsync(&self, f: FileId) -> io::Result<()> {
        // SAFETY: a descriptor this target opened.
        cvt(unsafe { libc::fsync(f.0 as libc::c_int) }).map(drop)
    }
    /// Look a path up (`stat`); returns the file size.
    fn stat(&self, path: &TPath) -> io::Result<u64> {
        // SAFETY: NUL-terminated path; stat fills a plain C struct.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            cvt(libc::stat(path.c(), &mut st))?;
            Ok(st.st_size as u64)
        }
    }
    /// Rename `from` to `to` (rename(2): `to` is replaced if it exists).
    fn rename(&self, from: &TPath, to: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated paths.
        cvt(unsafe { libc::rename(from.c(), to.c()) }).map(drop)
    }
    /// A new regular file without a name in the directory `dir`, open
    /// read-write (open(2) with O_TMPFILE). The kernel answers EOPNOTSUPP
    /// where the file system has none (a FUSE mount).
    fn tmpfile(&self, dir: &TPath) -> io::Result<FileId> {
        let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path.
        let fd = cvt(unsafe { libc::open(dir.c(), flags, 0o644 as libc::c_uint) })?;
        Ok(FileId(fd as u64))
    }
    /// Give the open file `f` the name `to`, the way programs name an
    /// O_TMPFILE file without privilege: linkat(2) of `/proc/self/fd/N`
    /// with AT_SYMLINK_FOLLOW.
    fn link_file(&self, f: FileId, to: &TPath) -> io::Result<()> {
        let proc_path = CString::new(format!("/proc/self/fd/{}", f.0)).map_err(io::Error::other)?;
        // SAFETY: NUL-terminated paths.
        cvt(unsafe {
            libc::linkat(libc::AT_FDCWD, proc_path.as_ptr(), libc::AT_FDCWD, to.c(), libc::AT_SYMLINK_FOLLOW)
        })
        .map(drop)
    }
    /// fsync(2) of the directory `dir`, opened O_RDONLY|O_DIRECTORY: what
    /// a program does after rename or linkat so that the new name is
    /// durable too.
    fn fsync_dir(&self, dir: &TPath) -> io::Result<()> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path.
        let fd = cvt(unsafe { libc::open(dir.c(), flags) })?;
        // SAFETY: fd was opened above and is closed once, below.
        let synced = cvt(unsafe { libc::fsync(fd) });
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        synced.map(drop)
    }
    /// Whether every call is durable when it returns (for the printout).
    fn durable(&self) -> &'static str {
        "no"
    }
    /// Make everything done so far durable, whatever file it touched (the
    /// end of a phase that must count the persister catching up: issue 13's
    /// sustained workloads). The default is `syncfs(2)` on the target's
    /// directory ([`kernel_dir`](Target::kernel_dir)), which the preload
    /// library answers with `Session::sync_all`; `Unsupported` where there
    /// is none. The library calls `Session::sync_all`, the hardware limit
    /// fences.
    fn sync_all(&self) -> io::Result<()> {
        let Some(dir) = self.kernel_dir() else {
            return Err(unsupported("sync_all (no directory to syncfs)"));
        };
        let c = CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // SAFETY: NUL-terminated path; the descriptor is closed below.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
        // SAFETY: the descriptor just opened, closed once.
        let r = cvt(unsafe { libc::syncfs(fd) });
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        r.map(drop)
    }
    /// A buffered Ferrite mount's options and what its persister has done
    /// since mount (issue 13); `None` for every other target.
    fn buffered(&self) -> Option<(BufferedOptions, BufferedStats)> {
        None
    }
    /// Start the buffered mount's longest-lag figure afresh (nothing for
    /// other targets).
    fn reset_buffered_lag(&self) {}
    /// Start counting what reaches the media (untimed passes only).
    fn accounting_begin(&self) -> io::Result<()> {
        Ok(())
    }
    /// Stop counting; `None` when the target cannot tell.
    fn accounting_end(&self) -> io::Result<Option<MediaBytes>> {
        Ok(None)
    }
    /// Why [`accounting_end`](Target::accounting_end) gives `None`.
    fn accounting_note(&self) -> &'static str {
        "no media to count"
    }
    /// A separate file system of this kind holding `files` files, for the
    /// remount workload; `None` if the target has nothing to remount.
    fn remount_probe(&self, _files: usize) -> io::Result<Option<Box<dyn RemountProbe>>> {
        Ok(None)
    }
    /// The directory, as the kernel sees it, where this target's files
    /// live: real programs (`cp`, `tar`, `rm`) can write into it. `None`
    /// for targets the kernel does not serve (the library, hw-limit).
    fn kernel_dir(&self) -> Option<&Path> {
        None
    }
    /// Zero-copy read: the file's bytes `[offset, offset + len)` readable
    /// at [`View::ptr`] until [`release`](Target::release). The default is
    /// the kernel's way: `mmap(PROT_READ, MAP_SHARED)` of the page-aligned
    /// range on the descriptor, one mapping per call, pages faulted in on
    /// first touch.
    fn view(&self, f: FileId, offset: u64, len: usize) -> io::Result<View> {
        let start = offset & !4095;
        let delta = (offset - start) as usize;
        let mapped = delta + len;
        // SAFETY: a fresh read-only mapping chosen by the kernel; nothing
        // else refers to that range until it is unmapped by `release`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.0 as libc::c_int,
                start as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `delta` < 4096 ≤ the mapping's length.
        Ok(View { ptr: unsafe { p.cast::<u8>().add(delta) }, len, handle: p as usize, mapped })
    }
    /// Gives a view back (the default unmaps it).
    fn release(&self, v: View) -> io::Result<()> {
        // SAFETY: the mapping `view` made; nothing refers to it afterwards.
        cvt(unsafe { libc::munmap(v.handle as *mut libc::c_void, v.mapped) }).map(drop)
    }
    /// A buffer of `len` bytes to fill and hand to [`patch`](Target::patch).
    /// `Unsupported` by default: the kernel's file systems have nothing
    /// like it.
    fn patch_buffer(&self, _len: usize) -> io::Result<PatchBuf> {
        Err(unsupported("patch_buffer"))
    }
    /// Makes the first `len` bytes of `b` the file's bytes at `offset`;
    /// the buffer is gone afterwards.
    fn patch(&self, _f: FileId, _offset: u64, _b: PatchBuf, _len: usize) -> io::Result<()> {
        Err(unsupported("patch"))
    }
    /// Gives back a buffer that was never patched.
    fn free_buffer(&self, _b: PatchBuf) -> io::Result<()> {
        Err(unsupported("free_buffer"))
    }
    /// Whether patched bytes can be read back from the file afterwards
    /// (false for the hardware limit, which keeps them where they were
    /// stored and has no index to find them by).
    fn patch_readable(&self) -> bool {
        true
    }
    /// `len` bytes of the file from `offset` written to the descriptor
    /// `out` (a socket) by `sendfile(2)`, looping until all are sent.
    /// `Unsupported` where files are not kernel descriptors.
    fn sendfile(&self, out: RawFd, f: FileId, offset: u64, len: usize) -> io::Result<()> {
        let mut off = offset as libc::off_t;
        let mut left = len;
        while left > 0 {
            // SAFETY: `off` is a valid off_t the call advances.
            let n = unsafe { libc::sendfile(out, f.0 as libc::c_int, &mut off, left) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(short("sendfile", len - left, len));
            }
            left -= n as usize;
        }
        Ok(())
    }
    /// What [`view`](Target::view), [`patch`](Target::patch) and
    /// [`sendfile`](Target::sendfile) are on this target (the zero-copy
    /// workloads print it).
    fn zero_copy_note(&self) -> String {
        "view = mmap(PROT_READ, MAP_SHARED) of the range + munmap, one mapping per view, pages faulted in on \
         first touch; no patch; sendfile(2)"
            .into()
    }
    /// Targets whose workloads run in another process (the preload
    /// target): `run_workload` prepares each workload through this instead
    /// of calling [`Workload::prepare`](crate::workload::Workload::prepare)
    /// on the target, and skips the accounting pass.
    fn remote(&self) -> Option<&dyn Remote> {
        None
    }
}

/// A target that prepares and runs workloads elsewhere, by name.
pub trait Remote: Sync {
    /// Prepare workload `name` there; `None` if it does not apply.
    fn prepare_remote(&self, name: &str) -> io::Result<Option<Box<dyn crate::workload::Prepared + '_>>>;
}

fn short(what: &str, done: usize, want: usize) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("short {what}: {done} of {want} bytes"))
}

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

// ---------------------------------------------------------------- accounting

/// Counts the stores, line write-backs and fences of a `ferrite_pmem` pool
/// through its recording backend. While on, the events are drained after
/// every call of the target, so memory stays bounded.
#[derive(Default)]
pub(crate) struct PmemAccounting {
    on: AtomicBool,
    sum: Mutex<MediaBytes>,
}

impl PmemAccounting {
    pub(crate) fn begin(&self, pmem: &Pmem) {
        *self.sum.lock().unwrap() = MediaBytes { stored: 0, lines: Some(0), fences: Some(0) };
        pmem.start_recording();
        self.on.store(true, Ordering::SeqCst);
    }

    pub(crate) fn end(&self, pmem: &Pmem) -> MediaBytes {
        self.on.store(false, Ordering::SeqCst);
        let rest = pmem.stop_recording();
        let mut sum = self.sum.lock().unwrap();
        add_events(&mut sum, &rest);
        *sum
    }

    /// Called after every target call: one relaxed load when off.
    #[inline]
    pub(crate) fn after(&self, pmem: &Pmem) {
        if self.on.load(Ordering::Relaxed) {
            self.drain(pmem);
        }
    }

    #[cold]
    fn drain(&self, pmem: &Pmem) {
        let events = pmem.take_events();
        add_events(&mut self.sum.lock().unwrap(), &events);
    }
}

fn add_events(sum: &mut MediaBytes, events: &[Event]) {
    let (mut lines, mut fences) = (0, 0);
    for ev in events {
        match ev {
            Event::Store { data, .. } => sum.stored += data.len() as u64,
            Event::NtStore { data, .. } => {
                sum.stored += data.len() as u64;
                lines += (data.len() as u64).div_ceil(64);
            }
            Event::Commit { .. } => sum.stored += 8,
            Event::NtCommit { .. } => {
                sum.stored += 8;
                lines += 1;
            }
            Event::Flush { offset, len } => {
                if *len > 0 {
                    lines += (offset + len).div_ceil(64) - offset / 64;
                }
            }
            Event::Fence => fences += 1,
            Event::Mark { .. } => {}
        }
    }
    *sum.lines.get_or_insert(0) += lines;
    *sum.fences.get_or_insert(0) += fences;
}

// ---------------------------------------------------------------- Ferrite

/// The Ferrite engine linked into this process, on a pool file in the base
/// directory: strict mode (every call durable when it returns), with every
/// file fsync-atomic (durable, all at once, at fsync), or on a buffered
/// mount (issue 13: every call durable in the background, in the order
/// calls returned, within the mount's lag bound; everything at a sync).
pub struct FerriteLib {
    fs: Option<Session>,
    mode: FileMode,
    /// The options of a buffered mount (`ferrite-buffered`).
    buffered: Option<BufferedOptions>,
    pool_len: u64,
    inodes: u64,
    base: PathBuf,
    acct: PmemAccounting,
    // Declared after `fs`: the pool file goes only after the mapping.
    pool: Scratch,
}

/// Inode slots for a pool of `pool_len` bytes: enough for the 100,000-file
/// workloads with room to spare, never more than one per 4 KiB page.
pub fn inodes_for(pool_len: u64) -> u64 {
    (pool_len / 4096).clamp(64, 262_144)
}

impl FerriteLib {
    pub fn new(base: &Path, pool_len: u64, mode: FileMode) -> io::Result<FerriteLib> {
        FerriteLib::build(base, pool_len, mode, None)
    }

    /// The library on a buffered mount: the pool formatted, unmounted and
    /// mounted again with `MountOptions::buffered` (buffering is a property
    /// of the mount, not of the pool).
    pub fn buffered(base: &Path, pool_len: u64, opts: BufferedOptions) -> io::Result<FerriteLib> {
        FerriteLib::build(base, pool_len, FileMode::Strict, Some(opts))
    }

    fn build(base: &Path, pool_len: u64, mode: FileMode, buffered: Option<BufferedOptions>) -> io::Result<FerriteLib> {
        let pool = Scratch::new(unique_path(base, "ferrite.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        // Pages are faulted in on a thread of their own; measurements start
        // once it is done, as they did when creating the pool did it.
        pmem.wait_populated();
        let inodes = inodes_for(pool_len);
        let opts = FormatOptions { inodes: Some(inodes), ..FormatOptions::default() };
        let mut fs = Session::format(pmem, &opts)
            .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
        if let Some(b) = &buffered {
            fs = remount(fs, pool.path(), b)?;
        }
        fs.engine().set_default_mode(mode);
        Ok(FerriteLib {
            fs: Some(fs),
            mode,
            buffered,
            pool_len,
            inodes,
            base: base.to_path_buf(),
            acct: PmemAccounting::default(),
            pool,
        })
    }

    #[inline]
    fn fs(&self) -> &Session {
        self.fs.as_ref().expect("ferrite target used after finish")
    }

    #[inline]
    fn done<T>(&self, r: ferrite::FsResult<T>) -> io::Result<T> {
        self.acct.after(self.fs().pmem());
        Ok(r?)
    }
}

/// Unmount `fs` cleanly and mount its pool again, buffered with `opts`.
fn remount(fs: Session, pool: &Path, opts: &BufferedOptions) -> io::Result<Session> {
    fs.unmount().map_err(|e| io::Error::other(format!("unmount {} after format: {e}", pool.display())))?;
    let pmem = Pmem::open_file(pool, 64 * 4096).map_err(|e| io::Error::other(format!("{}: {e}", pool.display())))?;
    let mount = MountOptions { buffered: Some(opts.clone()), ..MountOptions::default() };
    let fs = Session::mount(pmem, &mount)
        .map_err(|e| io::Error::other(format!("buffered mount {}: {e}", pool.display())))?;
    // Format fills the page tables of the pool it creates; a mount does
    // not. Without this, every first touch of a page would fault on the
    // buffered target only.
    fs.pmem().prefault(64 << 20, &mut || true);
    Ok(fs)
}

/// "lag ≤ 5 ms or 4096 ops pending, persister thread": a buffered mount's
/// bounds, for the printout.
pub fn describe_buffered(b: &BufferedOptions) -> String {
    format!(
        "every operation durable at most {} after it returns (lag_ns_max = {}) and at most {} operations \
         returned but not durable (ops_max, back-pressure beyond), in return order; {}",
        fmt_ns(b.lag_ns_max),
        b.lag_ns_max,
        b.ops_max,
        if b.persister_thread { "a persister thread" } else { "no persister thread (sync points only)" }
    )
}

/// How much of this process's mappings of the file at `path` there is, and
/// how much of it the kernel maps with 2 MiB pages, both in KiB, from
/// `/proc/self/smaps` (`Size`, and `FilePmdMapped` plus `ShmemPmdMapped`,
/// summed over every mapping whose pathname is `path`). `None` when no
/// mapping of it is found or smaps cannot be read.
///
/// Why a benchmark says it: a pool on a real DAX device is mapped with
/// 2 MiB pages, a pool in `/dev/shm` usually with 4 KiB ones, and on some
/// guests memory mapped with 4 KiB pages that has been idle for seconds is
/// slower on its next touch (docs/BENCHMARKS.md, "Idle memory and the
/// pool's page size").
pub fn pmd_mapped_kib(path: &Path) -> Option<(u64, u64)> {
    let want = std::fs::canonicalize(path).ok()?;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    parse_pmd_mapped_kib(&smaps, &want)
}

/// The parsing half of [`pmd_mapped_kib`]: `smaps` is the text of a
/// `/proc/PID/smaps`.
fn parse_pmd_mapped_kib(smaps: &str, want: &Path) -> Option<(u64, u64)> {
    let mut found = false;
    let mut inside = false;
    let (mut size_kib, mut pmd_kib) = (0u64, 0u64);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if !first.ends_with(':') {
            // A mapping's header: "start-end perms offset dev inode [pathname]",
            // padded with spaces before the pathname (which may hold spaces).
            let mut rest = line;
            for _ in 0..5 {
                rest = rest.trim_start().split_once(char::is_whitespace).map_or("", |(_, r)| r);
            }
            let pathname = rest.trim_start();
            inside = Path::new(pathname) == want;
            found |= inside;
            continue;
        }
        if !inside {
            continue;
        }
        let kib = || fields.clone().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        match first {
            "Size:" => size_kib += kib(),
            "FilePmdMapped:" | "ShmemPmdMapped:" => pmd_kib += kib(),
            _ => {}
        }
    }
    found.then_some((size_kib, pmd_kib))
}

/// "mapped with 2 MiB pages (512 of 512 MiB)" or "mapped with 4 KiB pages
/// (0 of 512 MiB in 2 MiB pages)": the page size of this process's mapping
/// of `path`, for a target's description.
pub fn describe_page_size(path: &Path) -> String {
    match pmd_mapped_kib(path) {
        None => "page size of the mapping unknown (not found in /proc/self/smaps)".to_string(),
        Some((size_kib, pmd_kib)) if pmd_kib * 2 >= size_kib && pmd_kib > 0 => {
            format!("mapped with 2 MiB pages ({} of {} MiB)", pmd_kib >> 10, size_kib >> 10)
        }
        Some((size_kib, pmd_kib)) => {
            format!("mapped with 4 KiB pages ({} of {} MiB in 2 MiB pages)", pmd_kib >> 10, size_kib >> 10)
        }
    }
}

/// Nanoseconds as "5 ms", "250 µs", "1.5 s", "12.91 ms" (at most two
/// decimals, trailing zeros dropped).
pub fn fmt_ns(ns: u64) -> String {
    let (v, unit) = match ns {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "s"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "ms"),
        n if n >= 1_000 => (n as f64 / 1e3, "µs"),
        n => (n as f64, "ns"),
    };
    let s = format!("{v:.2}");
    format!("{} {unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

impl Target for FerriteLib {
    fn name(&self) -> &str {
        match (self.mode, &self.buffered) {
            (_, Some(_)) => "ferrite-buffered",
            (FileMode::Strict, None) => "ferrite",
            (FileMode::FsyncAtomic, None) => "ferrite-atomic",
        }
    }
    fn describe(&self) -> String {
        let pmem = self.fs().pmem();
        let mode = match &self.buffered {
            Some(b) => format!("buffered mount: {}", describe_buffered(b)),
            None => format!("{} mode", self.mode.as_str()),
        };
        format!(
            "Ferrite library (PathFs, {mode}), pool {} of {} MiB with {} inode slots, {}, {}; flush {:?}, copy {:?}",
            self.pool.path().display(),
            self.pool_len >> 20,
            self.inodes,
            pmem.domain().describe(),
            describe_page_size(self.pool.path()),
            pmem.flush_kind(),
            pmem.nt_kind(),
        )
    }
    fn durable(&self) -> &'static str {
        match (self.mode, &self.buffered) {
            (_, Some(_)) => {
                "within the lag bound, in the background, in the order calls returned (a crash keeps a prefix \
                 of them); everything returned before an fsync, sync or syncfs at that call (buffered mount)"
            }
            (FileMode::Strict, None) => "yes (strict mode)",
            (FileMode::FsyncAtomic, None) => {
                "at fsync, all of a file's writes since the last one at once (fsync-atomic mode)"
            }
        }
    }
    #[inline]
    fn sync_all(&self) -> io::Result<()> {
        self.done(self.fs().sync_all())
    }
    fn buffered(&self) -> Option<(BufferedOptions, BufferedStats)> {
        Some((self.buffered.clone()?, self.fs().buffered_stats()))
    }
    fn reset_buffered_lag(&self) {
        self.fs().engine().reset_buffered_lag();
    }
    fn prepare(&self, path: &str) -> TPath {
        TPath(path.as_bytes().to_vec())
    }
    fn mkdir(&self, path: &TPath) -> io::Result<()> {
        self.done(self.fs().mkdir(&path.0, 0o755))
    }
    fn rmdir(&self, path: &TPath) -> io::Result<()> {
        self.done(self.fs().rmdir(&path.0))
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        let mut flags = OpenFlags::RDWR;
        if create {
            flags = flags.create();
        }
        Ok(FileId(self.done(self.fs().open(&path.0, flags, 0o644))?.0))
    }
    fn close(&self, f: FileId) -> io::Result<()> {
        self.done(self.fs().close(Fd(f.0)))
    }
    #[inline]
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()> {
        let n = self.done(self.fs().pwrite(Fd(f.0), data, offset))?;
        if n != data.len() {
            return Err(short("pwrite", n, data.len()));
        }
        Ok(())
    }
    #[inline]
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.done(self.fs().pread(Fd(f.0), buf, offset))?;
        if n != buf.len() {
            return Err(short("pread", n, buf.len()));
        }
        Ok(())
    }
    #[inline]
    fn create_empty(&self, path: &TPath) -> io::Result<()> {
        let fs = self.fs();
        let fd = self.done(fs.open(&path.0, OpenFlags::RDWR.create().excl(), 0o644))?;
        self.done(fs.close(fd))
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        self.done(self.fs().unlink(&path.0))
    }
    #[inline]
    fn create(&self, path: &TPath) -> io::Result<FileId> {
        Ok(FileId(self.done(self.fs().open(&path.0, OpenFlags::RDWR.create().excl(), 0o644))?.0))
    }
    #[inline]
    fn fsync(&self, f: FileId) -> io::Result<()> {
        self.done(self.fs().fsync(Fd(f.0)))
    }
    #[inline]
    fn stat(&self, path: &TPath) -> io::Result<u64> {
        Ok(self.done(self.fs().stat(&path.0))?.size)
    }
    fn rename(&self, from: &TPath, to: &TPath) -> io::Result<()> {
        self.done(self.fs().rename(&from.0, &to.0, ferrite::RenameFlags::default()))
    }
    fn tmpfile(&self, dir: &TPath) -> io::Result<FileId> {
        Ok(FileId(self.done(self.fs().open(&dir.0, OpenFlags::RDWR.tmpfile(), 0o644))?.0))
    }
    fn link_file(&self, f: FileId, to: &TPath) -> io::Result<()> {
        self.done(self.fs().link_fd(Fd(f.0), ferrite::AT_FDCWD, &to.0))
    }
    fn fsync_dir(&self, dir: &TPath) -> io::Result<()> {
        let fs = self.fs();
        let fd = self.done(fs.open(&dir.0, OpenFlags::RDONLY.directory(), 0))?;
        let synced = self.done(fs.fsync(fd));
        self.done(fs.close(fd))?;
        synced
    }
    #[inline]
    fn view(&self, f: FileId, offset: u64, len: usize) -> io::Result<View> {
        let p = self.done(self.fs().peek(Fd(f.0), offset, len as u64))?;
        Ok(View { ptr: p.ptr, len: p.len, handle: p.id.0, mapped: 0 })
    }
    #[inline]
    fn release(&self, v: View) -> io::Result<()> {
        self.done(self.fs().unpeek(ViewId(v.handle)))
    }
    #[inline]
    fn patch_buffer(&self, len: usize) -> io::Result<PatchBuf> {
        let b = self.done(self.fs().patch_buffer(len as u64))?;
        Ok(PatchBuf { ptr: b.ptr, len: b.len, handle: b.id.0 })
    }
    #[inline]
    fn patch(&self, f: FileId, offset: u64, b: PatchBuf, len: usize) -> io::Result<()> {
        self.done(self.fs().patch(Fd(f.0), offset, BufferId(b.handle), len as u64))
    }
    fn free_buffer(&self, b: PatchBuf) -> io::Result<()> {
        self.done(self.fs().free_buffer(BufferId(b.handle)))
    }
    fn sendfile(&self, _out: RawFd, _f: FileId, _offset: u64, _len: usize) -> io::Result<()> {
        Err(unsupported("sendfile (the library's descriptors are not the kernel's)"))
    }
    fn zero_copy_note(&self) -> String {
        "view = Session::peek + unpeek; patch = Session::patch_buffer, stores into it, Session::patch; \
         no sendfile"
            .into()
    }
    fn accounting_note(&self) -> &'static str {
        "ferrite_pmem recording backend on this pool (stores, NT stores, commits, flushed lines, fences)"
    }
    fn accounting_begin(&self) -> io::Result<()> {
        self.acct.begin(self.fs().pmem());
        Ok(())
    }
    fn accounting_end(&self) -> io::Result<Option<MediaBytes>> {
        Ok(Some(self.acct.end(self.fs().pmem())))
    }
    fn remount_probe(&self, files: usize) -> io::Result<Option<Box<dyn RemountProbe>>> {
        Ok(Some(Box::new(FerriteRemount::new(&self.base, files, self.buffered.clone())?)))
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if let Some(fs) = self.fs.take() {
            fs.unmount()?;
        }
        Ok(())
    }
}

/// A second Ferrite pool holding `files` empty files in directories of
/// 1,000, unmounted and mounted again by the remount workload (buffered
/// when the target is: the files are made on the strict mount that formats
/// the pool, every timed mount is buffered).
pub struct FerriteRemount {
    fs: Option<Session>,
    buffered: Option<BufferedOptions>,
    files: usize,
    pool_len: u64,
    probe: Vec<u8>,
    crashes: u64,
    pool: Scratch,
}

impl FerriteRemount {
    fn new(base: &Path, files: usize, buffered: Option<BufferedOptions>) -> io::Result<FerriteRemount> {
        let pool = Scratch::new(unique_path(base, "remount.pool"));
        // A log page per file plus the directories' logs, with room.
        let pool_len = ((files as u64 * 4096 * 5 / 4) + (64 << 20)).next_multiple_of(1 << 20);
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        // Pages are faulted in on a thread of their own; measurements start
        // once it is done, as they did when creating the pool did it.
        pmem.wait_populated();
        let opts = FormatOptions { inodes: Some(files as u64 + 4096), ..FormatOptions::default() };
        let fs = Session::format(pmem, &opts)
            .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
        fs.mkdir(b"/r", 0o755)?;
        for d in 0..files.div_ceil(1000) {
            fs.mkdir(format!("/r/d{d:04}").as_bytes(), 0o755)?;
        }
        for i in 0..files {
            let fd =
                fs.open(format!("/r/d{:04}/f{i:07}", i / 1000).as_bytes(), OpenFlags::RDWR.create().excl(), 0o644)?;
            fs.close(fd)?;
        }
        let mid = files / 2;
        let probe = format!("/r/d{:04}/f{mid:07}", mid / 1000).into_bytes();
        Ok(FerriteRemount { fs: Some(fs), buffered, files, pool_len, probe, crashes: 0, pool })
    }

    fn mount_timed(&mut self) -> io::Result<MountTimes> {
        let t0 = std::time::Instant::now();
        let pmem = Pmem::open_file(self.pool.path(), 64 * 4096).map_err(io::Error::other)?;
        let opts = MountOptions { buffered: self.buffered.clone(), ..MountOptions::default() };
        let fs = Session::mount(pmem, &opts).map_err(io::Error::other)?;
        let t1 = std::time::Instant::now();
        fs.stat(&self.probe)?;
        let t2 = std::time::Instant::now();
        let r = fs.mount_report();
        let recovery = r.recovered.then(|| Duration::from_nanos(r.recovery_ns));
        self.fs = Some(fs);
        Ok(MountTimes { mount: t1 - t0, first_lookup: t2 - t1, recovery })
    }
}

impl RemountProbe for FerriteRemount {
    fn describe(&self) -> String {
        format!(
            "Ferrite pool {} of {} MiB holding {} empty files in directories of 1,000; \
             mount = Pmem::open_file + Ferrite::mount{}",
            self.pool.path().display(),
            self.pool_len >> 20,
            self.files,
            if self.buffered.is_some() { " (buffered: the persister thread started too)" } else { "" }
        )
    }
    fn clean(&mut self) -> io::Result<MountTimes> {
        if let Some(fs) = self.fs.take() {
            fs.unmount()?;
        }
        let t = self.mount_timed()?;
        if t.recovery.is_some() {
            return Err(io::Error::other("mount after a clean unmount ran recovery"));
        }
        Ok(t)
    }
    fn crash(&mut self) -> io::Result<Option<MountTimes>> {
        let fs = self.fs.take().expect("mounted");
        // Some work in flight: a file created and written, never unmounted.
        self.crashes += 1;
        let fd = fs.open(format!("/r/crash{}", self.crashes).as_bytes(), OpenFlags::RDWR.create(), 0o644)?;
        fs.pwrite(fd, &[7u8; 4096], 0)?;
        drop(fs); // a crash as far as the pool is concerned
        let t = self.mount_timed()?;
        if t.recovery.is_none() {
            return Err(io::Error::other("mount after a crash did not recover"));
        }
        Ok(Some(t))
    }
}

impl Drop for FerriteRemount {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            let _ = fs.unmount();
        }
    }
}

// ---------------------------------------------------------------- POSIX

/// Real system calls on a directory of the kernel's file system: tmpfs when
/// the directory is in `/dev/shm`, ext4 or FUSE inside a mount. Nothing is
/// synced unless the workload calls `fsync`.
pub struct PosixDir {
    name: String,
    root: Scratch,
}

impl PosixDir {
    /// Creates a fresh directory in `base` and works inside it.
    pub fn new(name: &str, base: &Path) -> io::Result<PosixDir> {
        let root = Scratch::new(unique_path(base, &format!("{name}.d")));
        std::fs::create_dir(root.path())?;
        Ok(PosixDir { name: name.to_string(), root })
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }
}

pub(crate) fn fs_type(path: &Path) -> String {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return "?".into();
    };
    // SAFETY: statfs fills a plain C struct; `c` is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut s) != 0 {
            return "?".into();
        }
        match s.f_type as i64 {
            0x0102_1994 => "tmpfs".into(),
            0xEF53 => "ext2/3/4".into(),
            0x6573_5546 => "fuse".into(),
            t => format!("f_type {t:#x}"),
        }
    }
}

impl Target for PosixDir {
    fn name(&self) -> &str {
        &self.name
    }
    fn describe(&self) -> String {
        format!(
            "system calls (libc open/pwrite/pread/fsync/stat/close/unlink/mkdir/rmdir) in {} ({}), \
             fsync only where the workload calls it",
            self.root.path().display(),
            fs_type(self.root.path())
        )
    }
    fn prepare(&self, path: &str) -> TPath {
        let mut full: PathBuf = self.root.path().to_path_buf();
        full.push(path.trim_start_matches('/'));
        let mut b = full.into_os_string().into_vec();
        b.push(0);
        TPath(b)
    }
    fn mkdir(&self, path: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::mkdir(path.c(), 0o755) }).map(drop)
    }
    fn rmdir(&self, path: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::rmdir(path.c()) }).map(drop)
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC;
        if create {
            flags |= libc::O_CREAT;
        }
        // SAFETY: NUL-terminated path.
        let fd = cvt(unsafe { libc::open(path.c(), flags, 0o644 as libc::c_uint) })?;
        Ok(FileId(fd as u64))
    }
    fn close(&self, f: FileId) -> io::Result<()> {
        // SAFETY: closing a descriptor this target opened.
        cvt(unsafe { libc::close(f.0 as libc::c_int) }).map(drop)
    }
    #[inline]
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()> {
        // SAFETY: `data` is valid for its length.
        let n = unsafe { libc::pwrite(f.0 as libc::c_int, data.as_ptr().cast(), data.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != data.len() {
            return Err(short("pwrite", n as usize, data.len()));
        }
        Ok(())
    }
    #[inline]
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::pread(f.0 as libc::c_int, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(short("pread", n as usize, buf.len()));
        }
        Ok(())
    }
    #[inline]
    fn create_empty(&self, path: &TPath) -> io::Result<()> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path; the descriptor is closed at once.
        unsafe {
            let fd = cvt(libc::open(path.c(), flags, 0o644 as libc::c_uint))?;
            cvt(libc::close(fd)).map(drop)
        }
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::unlink(path.c()) }).map(drop)
    }
    fn kernel_dir(&self) -> Option<&Path> {
        Some(self.root.path())
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        Ok(()) // the Scratch removes the tree
    }
}

// ---------------------------------------------------------------- limit

/// The physical floor: each operation's payload made durable with the same
/// primitives Ferrite uses and nothing else. A write is one `ferrite_pmem`
/// non-temporal copy of the bytes plus one fence; a read is one copy out of
/// the mapping; a create, unlink, mkdir or rmdir is one 64-byte line
/// stored, flushed and fenced (the least any durable metadata change can
/// cost); a stat reads one line; fsync is a fence. No index, no name lookup
/// and no allocation on the timed path, except the name → file map that
/// `create`/`open`/`unlink` of data files consult (a hash lookup under an
/// uncontended mutex).
///
/// Files live in one data ring: file k starts at k × 64 MiB modulo the ring
/// and wraps, so any number of files fit (the floor models no allocation).
///
/// Zero-copy floor (issue 12): a view is a pointer into the ring (no call,
/// no mapping: what is left is the use of the bytes); a patch buffer is the
/// next free stretch of the ring, filled in place by the caller, and patch
/// writes its lines back and fences (`Pmem::persist`), so the bytes are
/// durable where they were stored. Both go through a second mapping of the
/// pool file ([`RawMap`]).
pub struct HwLimit {
    pmem: Option<Pmem>,
    raw: RawMap,
    /// Where the next patch buffer starts, counted in ring bytes.
    patch_next: AtomicU64,
    pool_len: u64,
    /// Bytes of the data ring, after the metadata lines.
    ring: u64,
    /// Data files by name, in shards chosen by the name's hash, so that
    /// two threads making and removing files of their own seldom share a
    /// lock (one table behind one lock kept the limit's two-thread unlinks
    /// at about 0.97× one thread).
    files: Vec<FileShard>,
    acct: PmemAccounting,
    pool: Scratch,
}

#[derive(Default)]
struct Files {
    by_name: HashMap<Vec<u8>, u64>,
    next: u64,
}

/// One shard of the hardware limit's file table, with its count of files
/// read without the lock: an unlink of an empty file (`create_empty`'s,
/// never in the table) takes no lock while the shard holds none. Aligned
/// to two cache lines, so that neighbouring shards share none.
#[derive(Default)]
#[repr(align(128))]
struct FileShard {
    files: Mutex<Files>,
    count: AtomicU64,
}

/// Shards of the hardware limit's file table.
const FILE_SHARDS: u64 = 16;

/// Lines of the metadata area that metadata operations cycle through.
const META_LINES: u64 = 1024;
const META_BYTES: u64 = META_LINES * 64;
/// Lines of the metadata area each thread cycles through (its stripe): the
/// threads of a two-thread workload persist lines of their own, as two
/// threads on private directories of a file system would, rather than
/// taking turns on one counter and on each other's lines (with a shared
/// counter the limit's two-thread unlinks ran at 0.73–0.93× one thread).
const META_STRIPE_LINES: u64 = 256;

/// Stripes handed out to threads, in turn.
static META_STRIPES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's metadata stripe and the number of lines it has
    /// persisted.
    static META_CURSOR: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}
/// The largest single I/O: ring offsets stay this far from its end.
const MAX_IO: u64 = 16 << 20;

/// A second read-write mapping of the hardware limit's pool file: the same
/// pages as the pool's own mapping, so stores made through it are written
/// back by `Pmem::flush`/`persist` on the pool's offsets.
struct RawMap {
    addr: usize,
    len: usize,
}

impl RawMap {
    fn new(path: &Path, len: u64) -> io::Result<RawMap> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        let len = len as usize;
        // SAFETY: a fresh shared mapping of a file of at least `len` bytes,
        // chosen by the kernel; it is unmapped only by `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RawMap { addr: p as usize, len })
    }

    /// The address of pool offset `off` in this mapping.
    #[inline]
    fn at(&self, off: PoolOffset) -> *mut u8 {
        debug_assert!((off.0 as usize) < self.len);
        (self.addr + off.0 as usize) as *mut u8
    }
}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

impl HwLimit {
    /// A pool with a data ring of `ring` bytes.
    pub fn new(base: &Path, ring: u64) -> io::Result<HwLimit> {
        let ring = ring.next_multiple_of(4096).max(2 * MAX_IO);
        let pool_len = META_BYTES + ring;
        let pool = Scratch::new(unique_path(base, "limit.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        // Pages are faulted in on a thread of their own; measurements start
        // once it is done, as they did when creating the pool did it.
        pmem.wait_populated();
        let raw = RawMap::new(pool.path(), pool_len)?;
        Ok(HwLimit {
            pmem: Some(pmem),
            raw,
            patch_next: AtomicU64::new(0),
            pool_len,
            ring,
            files: (0..FILE_SHARDS).map(|_| FileShard::default()).collect(),
            acct: PmemAccounting::default(),
            pool,
        })
    }

    #[inline]
    fn pmem(&self) -> &Pmem {
        self.pmem.as_ref().expect("limit target used after finish")
    }

    #[inline]
    fn range(&self, f: FileId, offset: u64, len: usize) -> io::Result<PoolOffset> {
        if len as u64 > MAX_IO {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(PoolOffset(META_BYTES + (f.0 + offset) % (self.ring - MAX_IO)))
    }

    #[inline]
    fn persist_line(&self) {
        let (stripe, n) = META_CURSOR.with(|c| {
            let (stripe, n) = c.get().unwrap_or_else(|| {
                let stripes = META_LINES / META_STRIPE_LINES;
                (META_STRIPES.fetch_add(1, Ordering::Relaxed) % stripes, 0)
            });
            c.set(Some((stripe, n + 1)));
            (stripe, n)
        });
        let off = PoolOffset((stripe * META_STRIPE_LINES + n % META_STRIPE_LINES) * 64);
        let line = [n as u8 | 1; 64];
        let pmem = self.pmem();
        pmem.write(off, &line);
        pmem.persist(off, 64);
        self.acct.after(pmem);
    }

    /// The shard that holds `name` and its index.
    fn file_shard(&self, name: &[u8]) -> (u64, &FileShard) {
        use std::hash::BuildHasher;
        // A fixed seed: a name's shard is the same wherever it is looked up.
        // A fast hash, as the limit's unlink of an empty file hashes its
        // name every time.
        let k = foldhash::fast::FixedState::default().hash_one(name) % FILE_SHARDS;
        (k, &self.files[k as usize])
    }

    fn file(&self, path: &TPath, create: bool, excl: bool) -> io::Result<FileId> {
        let (k, shard) = self.file_shard(&path.0);
        let mut files = shard.files.lock().unwrap();
        if let Some(&base) = files.by_name.get(&path.0) {
            if excl {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            return Ok(FileId(base));
        }
        if !create {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // Each shard's files take every FILE_SHARDS-th 64 MiB stretch of
        // the ring, as one table's did in turn.
        let base = ((files.next * FILE_SHARDS + k) * (64 << 20)) % (self.ring - MAX_IO);
        files.next += 1;
        files.by_name.insert(path.0.clone(), base);
        shard.count.fetch_add(1, Ordering::Relaxed);
        drop(files);
        self.persist_line();
        Ok(FileId(base))
    }
}

impl Target for HwLimit {
    fn name(&self) -> &str {
        "hw-limit"
    }
    fn describe(&self) -> String {
        let pmem = self.pmem();
        format!(
            "hardware limit: ferrite_pmem primitives on a mapping of {} ({} MiB, {}; both mappings {}); \
             write = NT copy ({:?}) + 1 fence, read = copy out, fsync = fence, \
             create/unlink/mkdir/rmdir = 64 B store + flush ({:?}) + fence, stat = 64 B read",
            self.pool.path().display(),
            self.pool_len >> 20,
            pmem.domain().describe(),
            describe_page_size(self.pool.path()),
            pmem.nt_kind(),
            pmem.flush_kind(),
        )
    }
    fn durable(&self) -> &'static str {
        "yes (bytes only)"
    }
    fn prepare(&self, path: &str) -> TPath {
        TPath(path.as_bytes().to_vec())
    }
    fn mkdir(&self, _path: &TPath) -> io::Result<()> {
        self.persist_line();
        Ok(())
    }
    fn rmdir(&self, _path: &TPath) -> io::Result<()> {
        self.persist_line();
        Ok(())
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        self.file(path, create, false)
    }
    fn close(&self, _f: FileId) -> io::Result<()> {
        Ok(())
    }
    #[inline]
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()> {
        let off = self.range(f, offset, data.len())?;
        let pmem = self.pmem();
        pmem.write_nt(off, data);
        pmem.fence();
        self.acct.after(pmem);
        Ok(())
    }
    #[inline]
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let off = self.range(f, offset, buf.len())?;
        self.pmem().read(off, buf);
        Ok(())
    }
    #[inline]
    fn create_empty(&self, _path: &TPath) -> io::Result<()> {
        self.persist_line();
        Ok(())
    }
    #[inline]
    fn create(&self, path: &TPath) -> io::Result<FileId> {
        self.file(path, true, true)
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        // Data files (made by `open`/`create`) are forgotten; empty files
        // made by `create_empty` are not in the map.
        let (_, shard) = self.file_shard(&path.0);
        if shard.count.load(Ordering::Relaxed) > 0 {
            let mut files = shard.files.lock().unwrap();
            if files.by_name.remove(&path.0).is_some() {
                shard.count.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.persist_line();
        Ok(())
    }
    #[inline]
    fn fsync(&self, _f: FileId) -> io::Result<()> {
        self.pmem().fence();
        Ok(())
    }
    #[inline]
    fn sync_all(&self) -> io::Result<()> {
        // Every operation already fenced its own bytes: a fence is all a
        // sync can cost here.
        self.pmem().fence();
        Ok(())
    }
    #[inline]
    fn stat(&self, path: &TPath) -> io::Result<u64> {
        let mut line = [0u8; 64];
        let h = path.0.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64));
        self.pmem().read(PoolOffset((h % META_LINES) * 64), &mut line);
        Ok(line[0] as u64)
    }
    /// The floor models no names beyond one line per operation, and no
    /// file without one: the workloads that need these skip this target.
    fn rename(&self, _from: &TPath, _to: &TPath) -> io::Result<()> {
        Err(unsupported("rename"))
    }
    fn tmpfile(&self, _dir: &TPath) -> io::Result<FileId> {
        Err(unsupported("O_TMPFILE"))
    }
    fn link_file(&self, _f: FileId, _to: &TPath) -> io::Result<()> {
        Err(unsupported("linkat"))
    }
    fn fsync_dir(&self, _dir: &TPath) -> io::Result<()> {
        Err(unsupported("directory fsync"))
    }
    #[inline]
    fn view(&self, f: FileId, offset: u64, len: usize) -> io::Result<View> {
        let off = self.range(f, offset, len)?;
        Ok(View { ptr: self.raw.at(off), len, handle: 0, mapped: 0 })
    }
    #[inline]
    fn release(&self, _v: View) -> io::Result<()> {
        Ok(())
    }
    #[inline]
    fn patch_buffer(&self, len: usize) -> io::Result<PatchBuf> {
        if len as u64 > MAX_IO {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let at = self.patch_next.fetch_add((len as u64).next_multiple_of(4096), Ordering::Relaxed);
        let off = PoolOffset(META_BYTES + at % (self.ring - MAX_IO));
        Ok(PatchBuf { ptr: self.raw.at(off), len, handle: off.0 as usize })
    }
    #[inline]
    fn patch(&self, _f: FileId, _offset: u64, b: PatchBuf, len: usize) -> io::Result<()> {
        let pmem = self.pmem();
        pmem.persist(PoolOffset(b.handle as u64), len.min(b.len) as u64);
        self.acct.after(pmem);
        Ok(())
    }
    fn free_buffer(&self, _b: PatchBuf) -> io::Result<()> {
        Ok(())
    }
    fn patch_readable(&self) -> bool {
        false
    }
    fn sendfile(&self, _out: RawFd, _f: FileId, _offset: u64, _len: usize) -> io::Result<()> {
        Err(unsupported("sendfile (the floor has no kernel descriptors)"))
    }
    fn zero_copy_note(&self) -> String {
        "view = a pointer into the ring (no call); patch buffer = the next stretch of the ring, filled in \
         place, patch = write back its lines + 1 fence (Pmem::persist); no sendfile"
            .into()
    }
    fn accounting_note(&self) -> &'static str {
        "ferrite_pmem recording backend on this pool (stores, NT stores, commits, flushed lines, fences)"
    }
    fn accounting_begin(&self) -> io::Result<()> {
        self.acct.begin(self.pmem());
        Ok(())
    }
    fn accounting_end(&self) -> io::Result<Option<MediaBytes>> {
        Ok(Some(self.acct.end(self.pmem())))
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.pmem.take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Proves that the smaps reader finds a mapped pool with its size and
    //! its 2 MiB part, sums every mapping of one file, and finds nothing
    //! for a file that is not mapped.
    use super::*;

    const SMAPS: &str = "\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
FilePmdMapped:         0 kB
7f0000000000-7f0020000000 rw-s 00000000 00:2a 17                         /dev/shm/a pool
Size:             524288 kB
Rss:              524288 kB
ShmemPmdMapped:   520192 kB
FilePmdMapped:         0 kB
7f0020000000-7f0020200000 rw-s 00000000 00:2a 17                         /dev/shm/a pool
Size:               2048 kB
ShmemPmdMapped:     2048 kB
7f0030000000-7f0030001000 r--p 00000000 00:2a 18                         /dev/shm/other
Size:                  4 kB
ShmemPmdMapped:        0 kB
";

    #[test]
    fn every_mapping_of_the_file_is_summed_and_others_are_not() {
        assert_eq!(parse_pmd_mapped_kib(SMAPS, Path::new("/dev/shm/a pool")), Some((526_336, 522_240)));
        assert_eq!(parse_pmd_mapped_kib(SMAPS, Path::new("/dev/shm/other")), Some((4, 0)));
        assert_eq!(parse_pmd_mapped_kib(SMAPS, Path::new("/dev/shm/a")), None);
        assert_eq!(parse_pmd_mapped_kib(SMAPS, Path::new("[heap]")), Some((132, 0)));
    }

    #[test]
    fn a_mapped_pool_is_found_with_its_size_and_an_unmapped_file_is_not() {
        let pool = Scratch::new(unique_path(&std::env::temp_dir(), "smaps-test.pool"));
        let pmem = Pmem::create_file(pool.path(), 8 << 20, 4096).expect("create a pool");
        pmem.wait_populated();
        let (size_kib, pmd_kib) = pmd_mapped_kib(pool.path()).expect("the pool's mapping is in smaps");
        assert_eq!(size_kib, 8 << 10, "the mapping's size");
        assert!(pmd_kib <= size_kib);
        let text = describe_page_size(pool.path());
        assert!(text.starts_with("mapped with "), "{text}");
        drop(pmem);
        assert_eq!(pmd_mapped_kib(pool.path()), None, "unmapped");
    }
}
