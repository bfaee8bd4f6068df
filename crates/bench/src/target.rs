//! What a workload runs against. Every target takes the same calls with the
//! same paths; workloads are written once against [`Target`].
//!
//! Implemented: [`FerriteLib`] (the engine linked in, through `PathFs`),
//! [`PosixDir`] (real system calls on a directory: tmpfs in `/dev/shm` now;
//! the same type serves ext4 on a loop device or a FUSE mount later) and
//! [`HwLimit`] (the bytes of each operation made durable with nothing else
//! around them: the physical floor).

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use ferrite::{Fd, Ferrite, FormatOptions, OpenFlags, PathFs};
use ferrite_pmem::{Pmem, PoolOffset};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::scratch::{unique_path, Scratch};

/// An open file of a target (its descriptor, or what stands for one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId(pub u64);

/// A path made ready for a target's calls by [`Target::prepare`], outside
/// the timed loops (so no formatting or allocation is measured).
#[derive(Clone, Debug)]
pub struct TPath(Vec<u8>);

/// A file system (or stand-in for one) under test. Paths given to
/// [`prepare`](Target::prepare) are absolute inside the target ("/d/f1");
/// each target maps them to its own root. Methods take `&self` so that
/// multi-threaded workloads can share a target later.
pub trait Target {
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
}

fn short(what: &str, done: usize, want: usize) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("short {what}: {done} of {want} bytes"))
}

// ---------------------------------------------------------------- Ferrite

/// The Ferrite engine linked into this process, on a pool file in the base
/// directory (strict mode: every call durable when it returns).
pub struct FerriteLib {
    fs: Option<Ferrite>,
    pool_len: u64,
    // Declared after `fs`: the pool file goes only after the mapping.
    pool: Scratch,
}

impl FerriteLib {
    pub fn new(base: &Path, pool_len: u64) -> io::Result<FerriteLib> {
        let pool = Scratch::new(unique_path(base, "ferrite.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        let fs = Ferrite::format(pmem, &FormatOptions::default())
            .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
        Ok(FerriteLib { fs: Some(fs), pool_len, pool })
    }

    #[inline]
    fn fs(&self) -> &Ferrite {
        self.fs.as_ref().expect("ferrite target used after finish")
    }
}

impl Target for FerriteLib {
    fn name(&self) -> &str {
        "ferrite"
    }
    fn describe(&self) -> String {
        let pmem = self.fs().pmem();
        format!(
            "Ferrite library (PathFs, strict mode), pool {} of {} MiB, {}; flush {:?}, copy {:?}",
            self.pool.path().display(),
            self.pool_len >> 20,
            pmem.domain().describe(),
            pmem.flush_kind(),
            pmem.nt_kind(),
        )
    }
    fn prepare(&self, path: &str) -> TPath {
        TPath(path.as_bytes().to_vec())
    }
    fn mkdir(&self, path: &TPath) -> io::Result<()> {
        Ok(self.fs().mkdir(&path.0, 0o755)?)
    }
    fn rmdir(&self, path: &TPath) -> io::Result<()> {
        Ok(self.fs().rmdir(&path.0)?)
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        let mut flags = OpenFlags::RDWR;
        if create {
            flags = flags.create();
        }
        Ok(FileId(self.fs().open(&path.0, flags, 0o644)?.0))
    }
    fn close(&self, f: FileId) -> io::Result<()> {
        Ok(self.fs().close(Fd(f.0))?)
    }
    #[inline]
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()> {
        let n = self.fs().pwrite(Fd(f.0), data, offset)?;
        if n != data.len() {
            return Err(short("pwrite", n, data.len()));
        }
        Ok(())
    }
    #[inline]
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.fs().pread(Fd(f.0), buf, offset)?;
        if n != buf.len() {
            return Err(short("pread", n, buf.len()));
        }
        Ok(())
    }
    #[inline]
    fn create_empty(&self, path: &TPath) -> io::Result<()> {
        let fs = self.fs();
        let fd = fs.open(&path.0, OpenFlags::RDWR.create().excl(), 0o644)?;
        Ok(fs.close(fd)?)
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        Ok(self.fs().unlink(&path.0)?)
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if let Some(fs) = self.fs.take() {
            fs.unmount()?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- POSIX

/// Real system calls on a directory of the kernel's file system: tmpfs when
/// the directory is in `/dev/shm`. Nothing is synced (tmpfs has no
/// durability to offer; a durable kernel target will add its own syncs).
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

    fn c(path: &TPath) -> *const libc::c_char {
        path.0.as_ptr().cast()
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fs_type(path: &Path) -> String {
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
            "system calls (libc open/pwrite/pread/close/unlink) in {} ({}), no fsync",
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
        cvt(unsafe { libc::mkdir(Self::c(path), 0o755) }).map(drop)
    }
    fn rmdir(&self, path: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::rmdir(Self::c(path)) }).map(drop)
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC;
        if create {
            flags |= libc::O_CREAT;
        }
        // SAFETY: NUL-terminated path.
        let fd = cvt(unsafe { libc::open(Self::c(path), flags, 0o644 as libc::c_uint) })?;
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
            let fd = cvt(libc::open(Self::c(path), flags, 0o644 as libc::c_uint))?;
            cvt(libc::close(fd)).map(drop)
        }
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::unlink(Self::c(path)) }).map(drop)
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        Ok(()) // the Scratch removes the tree
    }
}

// ---------------------------------------------------------------- limit

/// The physical floor: each operation's payload made durable with the same
/// primitives Ferrite uses and nothing else. A write is one `ferrite_pmem`
/// non-temporal copy of the bytes plus one fence; a read is one copy out of
/// the mapping; a create or unlink is one 64-byte line stored, flushed and
/// fenced (the least any durable metadata change can cost). No index, no
/// name lookup, no allocation on the timed path.
pub struct HwLimit {
    pmem: Option<Pmem>,
    pool_len: u64,
    /// Bytes reserved per file (files are laid out back to back).
    file_cap: u64,
    /// Name -> base offset of the data files made by `open` (locked only
    /// outside timed paths: `open` is never timed and `unlink` skips the
    /// lock when no data file exists).
    files: Mutex<Files>,
    file_count: AtomicU64,
    meta_line: AtomicU64,
    pool: Scratch,
}

#[derive(Default)]
struct Files {
    by_name: HashMap<Vec<u8>, u64>,
    /// Slots never used yet start at this index.
    next: u64,
    /// Base offsets of slots given back by unlink.
    free: Vec<u64>,
}

/// Lines of the metadata area that create/unlink cycle through.
const META_LINES: u64 = 1024;

impl HwLimit {
    /// `files` files of at most `file_cap` bytes each.
    pub fn new(base: &Path, file_cap: u64, files: u64) -> io::Result<HwLimit> {
        let file_cap = file_cap.next_multiple_of(4096);
        let pool_len = META_LINES * 64 + file_cap * files;
        let pool_len = pool_len.next_multiple_of(4096);
        let pool = Scratch::new(unique_path(base, "limit.pool"));
        let pmem = Pmem::create_file(pool.path(), pool_len, 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        Ok(HwLimit {
            pmem: Some(pmem),
            pool_len,
            file_cap,
            files: Mutex::new(Files::default()),
            file_count: AtomicU64::new(0),
            meta_line: 0.into(),
            pool,
        })
    }

    #[inline]
    fn pmem(&self) -> &Pmem {
        self.pmem.as_ref().expect("limit target used after finish")
    }

    #[inline]
    fn range(&self, f: FileId, offset: u64, len: usize) -> io::Result<PoolOffset> {
        if offset + len as u64 > self.file_cap {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(PoolOffset(f.0 + offset))
    }

    #[inline]
    fn persist_line(&self) {
        let n = self.meta_line.fetch_add(1, Ordering::Relaxed);
        let off = PoolOffset((n % META_LINES) * 64);
        let line = [n as u8 | 1; 64];
        let pmem = self.pmem();
        pmem.write(off, &line);
        pmem.persist(off, 64);
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
             write = NT copy ({:?}) + 1 fence, read = copy out, \
             create/unlink = 64 B store + flush ({:?}) + fence",
            self.pool.path().display(),
            self.pool_len >> 20,
            pmem.domain().describe(),
            pmem.nt_kind(),
            pmem.flush_kind(),
        )
    }
    fn prepare(&self, path: &str) -> TPath {
        TPath(path.as_bytes().to_vec())
    }
    fn mkdir(&self, _path: &TPath) -> io::Result<()> {
        Ok(())
    }
    fn rmdir(&self, _path: &TPath) -> io::Result<()> {
        Ok(())
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        let mut files = self.files.lock().unwrap();
        if let Some(&base) = files.by_name.get(&path.0) {
            return Ok(FileId(base));
        }
        if !create {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let base = match files.free.pop() {
            Some(b) => b,
            None => {
                let b = META_LINES * 64 + files.next * self.file_cap;
                if b + self.file_cap > self.pool_len {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                files.next += 1;
                b
            }
        };
        files.by_name.insert(path.0.clone(), base);
        self.file_count.fetch_add(1, Ordering::Relaxed);
        Ok(FileId(base))
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
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        // Data files (made by `open`) are forgotten; the timed unlinks of
        // empty files are one persisted line, like their creates.
        if self.file_count.load(Ordering::Relaxed) > 0 {
            let mut files = self.files.lock().unwrap();
            if let Some(base) = files.by_name.remove(&path.0) {
                files.free.push(base);
                self.file_count.fetch_sub(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.persist_line();
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.pmem.take();
        Ok(())
    }
}
