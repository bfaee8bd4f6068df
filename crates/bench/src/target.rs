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

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferrite::{Fd, FileMode, FormatOptions, OpenFlags, PathFs, Session};
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
    /// Whether every call is durable when it returns (for the printout).
    fn durable(&self) -> &'static str {
        "no"
    }
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
/// directory: strict mode (every call durable when it returns), or with
/// every file fsync-atomic (durable, all at once, at fsync).
pub struct FerriteLib {
    fs: Option<Session>,
    mode: FileMode,
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
        let pool = Scratch::new(unique_path(base, "ferrite.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        let inodes = inodes_for(pool_len);
        let opts = FormatOptions { inodes: Some(inodes), ..FormatOptions::default() };
        let fs = Session::format(pmem, &opts)
            .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
        fs.engine().set_default_mode(mode);
        Ok(FerriteLib {
            fs: Some(fs),
            mode,
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

impl Target for FerriteLib {
    fn name(&self) -> &str {
        match self.mode {
            FileMode::Strict => "ferrite",
            FileMode::FsyncAtomic => "ferrite-atomic",
        }
    }
    fn describe(&self) -> String {
        let pmem = self.fs().pmem();
        format!(
            "Ferrite library (PathFs, {} mode), pool {} of {} MiB with {} inode slots, {}; flush {:?}, copy {:?}",
            self.mode.as_str(),
            self.pool.path().display(),
            self.pool_len >> 20,
            self.inodes,
            pmem.domain().describe(),
            pmem.flush_kind(),
            pmem.nt_kind(),
        )
    }
    fn durable(&self) -> &'static str {
        match self.mode {
            FileMode::Strict => "yes (strict mode)",
            FileMode::FsyncAtomic => "at fsync, all of a file's writes since the last one at once (fsync-atomic mode)",
        }
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
        Ok(Some(Box::new(FerriteRemount::new(&self.base, files)?)))
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if let Some(fs) = self.fs.take() {
            fs.unmount()?;
        }
        Ok(())
    }
}

/// A second Ferrite pool holding `files` empty files in directories of
/// 1,000, unmounted and mounted again by the remount workload.
pub struct FerriteRemount {
    fs: Option<Session>,
    files: usize,
    pool_len: u64,
    probe: Vec<u8>,
    crashes: u64,
    pool: Scratch,
}

impl FerriteRemount {
    fn new(base: &Path, files: usize) -> io::Result<FerriteRemount> {
        let pool = Scratch::new(unique_path(base, "remount.pool"));
        // A log page per file plus the directories' logs, with room.
        let pool_len = ((files as u64 * 4096 * 5 / 4) + (64 << 20)).next_multiple_of(1 << 20);
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
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
        Ok(FerriteRemount { fs: Some(fs), files, pool_len, probe, crashes: 0, pool })
    }

    fn mount_timed(&mut self) -> io::Result<MountTimes> {
        let t0 = std::time::Instant::now();
        let pmem = Pmem::open_file(self.pool.path(), 64 * 4096).map_err(io::Error::other)?;
        let fs = Session::mount(pmem, &ferrite::MountOptions::default()).map_err(io::Error::other)?;
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
             mount = Pmem::open_file + Ferrite::mount",
            self.pool.path().display(),
            self.pool_len >> 20,
            self.files
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
pub struct HwLimit {
    pmem: Option<Pmem>,
    pool_len: u64,
    /// Bytes of the data ring, after the metadata lines.
    ring: u64,
    files: Mutex<Files>,
    file_count: AtomicU64,
    meta_line: AtomicU64,
    acct: PmemAccounting,
    pool: Scratch,
}

#[derive(Default)]
struct Files {
    by_name: HashMap<Vec<u8>, u64>,
    next: u64,
}

/// Lines of the metadata area that metadata operations cycle through.
const META_LINES: u64 = 1024;
const META_BYTES: u64 = META_LINES * 64;
/// The largest single I/O: ring offsets stay this far from its end.
const MAX_IO: u64 = 4 << 20;

impl HwLimit {
    /// A pool with a data ring of `ring` bytes.
    pub fn new(base: &Path, ring: u64) -> io::Result<HwLimit> {
        let ring = ring.next_multiple_of(4096).max(2 * MAX_IO);
        let pool_len = META_BYTES + ring;
        let pool = Scratch::new(unique_path(base, "limit.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        Ok(HwLimit {
            pmem: Some(pmem),
            pool_len,
            ring,
            files: Mutex::new(Files::default()),
            file_count: AtomicU64::new(0),
            meta_line: 0.into(),
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
        let n = self.meta_line.fetch_add(1, Ordering::Relaxed);
        let off = PoolOffset((n % META_LINES) * 64);
        let line = [n as u8 | 1; 64];
        let pmem = self.pmem();
        pmem.write(off, &line);
        pmem.persist(off, 64);
        self.acct.after(pmem);
    }

    fn file(&self, path: &TPath, create: bool, excl: bool) -> io::Result<FileId> {
        let mut files = self.files.lock().unwrap();
        if let Some(&base) = files.by_name.get(&path.0) {
            if excl {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            return Ok(FileId(base));
        }
        if !create {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let base = (files.next * (64 << 20)) % (self.ring - MAX_IO);
        files.next += 1;
        files.by_name.insert(path.0.clone(), base);
        self.file_count.fetch_add(1, Ordering::Relaxed);
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
            "hardware limit: ferrite_pmem primitives on a mapping of {} ({} MiB, {}); \
             write = NT copy ({:?}) + 1 fence, read = copy out, fsync = fence, \
             create/unlink/mkdir/rmdir = 64 B store + flush ({:?}) + fence, stat = 64 B read",
            self.pool.path().display(),
            self.pool_len >> 20,
            pmem.domain().describe(),
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
        if self.file_count.load(Ordering::Relaxed) > 0 {
            let mut files = self.files.lock().unwrap();
            if files.by_name.remove(&path.0).is_some() {
                self.file_count.fetch_sub(1, Ordering::Relaxed);
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
    fn stat(&self, path: &TPath) -> io::Result<u64> {
        let mut line = [0u8; 64];
        let h = path.0.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64));
        self.pmem().read(PoolOffset((h % META_LINES) * 64), &mut line);
        Ok(line[0] as u64)
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
