//! The pool's memory: a heap allocation or a shared mapping of a pool file,
//! and the raw loads, stores, flushes and streaming copies on it.
//!
//! Together with `arch` this is the only module with `unsafe`. Every method
//! of [`Region`] checks its range against the region's length before it
//! touches memory, so the rest of the crate (and every caller) stays safe
//! even if a check higher up were forgotten.

use crate::arch;
use crate::{FlushKind, NtKind, PersistenceDomain, PmemError, CACHE_LINE};
use std::alloc::Layout;
#[cfg(unix)]
use std::fs::File;
use std::io;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The page size pool lengths are multiples of.
pub(crate) const PAGE: u64 = 4096;

const LINE: usize = CACHE_LINE as usize;

/// What owns the memory, and so what `Drop` must release.
enum Backing {
    /// `std::alloc` memory allocated with this layout.
    Heap { layout: Layout },
    /// A mapping of `file` (`MAP_SHARED`, or `MAP_PRIVATE` for a private
    /// view), which also holds the advisory lock.
    #[cfg(unix)]
    File { file: File, shared: bool },
}

/// A contiguous range of pool memory.
pub(crate) struct Region {
    base: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// A read-only descriptor of the pool file, opened at the first
    /// read-only or private window: mappings made from it cannot be made
    /// writable by `mprotect` (EACCES), so a view cannot be turned into a
    /// way to store into the pool.
    #[cfg(unix)]
    read_only_file: std::sync::OnceLock<Option<File>>,
    /// The thread that fills a new pool's pages in the background, if one
    /// runs: stopped and joined before the mapping goes (`Drop`).
    populator: Option<Populator>,
}

/// How much a populating thread faults in per call: small enough that a
/// drop waits little for it.
#[cfg(target_os = "linux")]
const POPULATE_CHUNK_BYTES: usize = 16 << 20;

/// A background thread populating a mapping chunk by chunk; `stop` asks it
/// to end after its current chunk.
struct Populator {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The process that started the thread: a child made by fork has no
    /// such thread, and joining it there would wait forever.
    pid: u32,
}

impl Populator {
    fn stop_and_join(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.join();
    }

    fn join(&self) {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            if self.pid == std::process::id() {
                let _ = t.join();
            } else {
                std::mem::forget(t);
            }
        }
    }
}

// SAFETY: `Region` owns its memory (a private heap allocation or a mapping
// that lives until `Drop`), so moving it to another thread is sound. Sharing
// it between threads is sound for what this crate itself does: every access
// goes through a raw pointer (no references into the pool are ever handed
// out), and 8-byte commit words are accessed atomically. Plain copies to the
// same bytes from two threads at once would race; the file-system engine
// prevents that with its own locks, as documented on `Pmem`, exactly as a
// kernel file system coordinates access to its persistent memory.
unsafe impl Send for Region {}
// SAFETY: see the `Send` impl above.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed heap region of `len` bytes, 4096-aligned. The allocation is
    /// rounded up to whole pages so that flushing the line holding the last
    /// byte never touches memory outside it.
    pub(crate) fn heap(len: usize) -> Region {
        let alloc_len =
            len.max(1).checked_next_multiple_of(PAGE as usize).expect("ferrite-pmem: heap pool length overflows usize");
        let layout = Layout::from_size_align(alloc_len, PAGE as usize)
            .expect("ferrite-pmem: heap pool length too large for an allocation");
        // SAFETY: `layout` has a non-zero size (at least one page).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        Region {
            base,
            len,
            backing: Backing::Heap { layout },
            #[cfg(unix)]
            read_only_file: Default::default(),
            populator: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Returns the address of `off` after checking that `[off, off + len)` is
    /// inside the region. This check is what makes every method sound.
    #[inline]
    fn at(&self, off: usize, len: usize) -> *mut u8 {
        match off.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => {
                panic!("ferrite-pmem: access of {len} bytes at offset {off} is outside the pool of {} bytes", self.len)
            }
        }
        // SAFETY: `off <= self.len`, and the allocation or mapping is at
        // least `self.len` bytes long, so the result stays inside it (or one
        // past its end when `len` is 0).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Copies `buf.len()` bytes at `off` out of the pool.
    #[inline]
    pub(crate) fn copy_out(&self, off: usize, buf: &mut [u8]) {
        let src = self.at(off, buf.len());
        // SAFETY: `src` is valid for `buf.len()` bytes (checked by `at`);
        // `buf` is a Rust slice and cannot overlap the pool, because this
        // crate never hands out references into pool memory.
        unsafe { crate::arch::copy(buf.as_mut_ptr(), src, buf.len()) }
    }

    /// Copies `data` into the pool at `off` with ordinary (cached) stores.
    #[inline]
    pub(crate) fn copy_in(&self, off: usize, data: &[u8]) {
        let dst = self.at(off, data.len());
        // SAFETY: `dst` is valid for `data.len()` bytes (checked by `at`);
        // `data` cannot overlap the pool (see `copy_out`).
        unsafe { crate::arch::copy(dst, data.as_ptr(), data.len()) }
    }

    /// Sets `len` bytes at `off` to `byte` with ordinary stores.
    #[inline]
    pub(crate) fn fill(&self, off: usize, len: usize, byte: u8) {
        let dst = self.at(off, len);
        // SAFETY: `dst` is valid for `len` bytes (checked by `at`).
        unsafe { std::ptr::write_bytes(dst, byte, len) }
    }

    /// The 8-byte word at `off` as an atomic. `off` must be 8-aligned.
    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8), "ferrite-pmem: 8-byte atomic access at offset {off} is not 8-aligned");
        let p = self.at(off, 8);
        // SAFETY: `p` is in bounds for 8 bytes and 8-aligned (the base is
        // page-aligned and `off` is a multiple of 8); pool memory is only
        // ever accessed through raw pointers and atomics, so no `&mut`
        // aliases it; the reference lives no longer than `&self`, during
        // which the memory stays allocated or mapped.
        unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
    }

    /// Asks the cache for the line holding `off`, without waiting for it
    /// (a hint: nothing is read or written, and a later load finds the line
    /// if it arrived).
    #[inline]
    pub(crate) fn prefetch(&self, off: usize) {
        let p = self.at(off, 1);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads nothing architecturally and cannot
        // fault; `p` is inside the region anyway (checked by `at`).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>().cast_const())
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    #[inline]
    pub(crate) fn load_u64(&self, off: usize) -> u64 {
        self.word(off).load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn store_u64(&self, off: usize, value: u64) {
        self.word(off).store(value, Ordering::Release)
    }

    /// `store_u64` by a streaming store: the word goes to memory without
    /// the line being read for ownership (and leaves the cache).
    #[inline]
    pub(crate) fn store_u64_nt(&self, off: usize, value: u64) {
        let p = self.word(off).as_ptr();
        // SAFETY: `word` checked that `off` is inside the region and 8-aligned,
        // so `p` is valid and aligned for 8 bytes; pool memory is only
        // accessed through raw pointers and atomics, and the store is one
        // aligned 8-byte access, as `store_u64`'s is.
        unsafe { crate::arch::nt_store_u64(p, value) }
    }

    /// Writes back every cache line that overlaps `[off, off + len)` with
    /// `kind`, and returns how many lines were written back (0 for
    /// `NoFlush` or an empty range).
    #[inline]
    pub(crate) fn flush(&self, kind: FlushKind, off: usize, len: usize) -> u64 {
        // Checking the range first also proves every line start below is
        // inside the region: it lies in [off rounded down, off + len).
        self.at(off, len);
        if len == 0 || kind == FlushKind::NoFlush {
            return 0;
        }
        let first = off & !(LINE - 1);
        let end = off + len;
        let mut line = first;
        let mut n = 0;
        while line < end {
            // SAFETY: `line < end <= self.len`, so the address is inside the
            // region's memory, which is mapped; `kind` was checked to be
            // supported when the pool chose it.
            unsafe { arch::flush_line(kind, self.base.as_ptr().add(line)) };
            line += LINE;
            n += 1;
        }
        n
    }

    /// Streams `src` into whole cache lines starting at `off` with
    /// non-temporal stores. `off` and `src.len()` must be multiples of 64.
    #[inline]
    pub(crate) fn nt_copy(&self, kind: NtKind, off: usize, src: &[u8]) {
        assert!(
            off.is_multiple_of(LINE) && src.len().is_multiple_of(LINE),
            "ferrite-pmem: non-temporal copy of {} bytes at {off} is not whole cache lines",
            src.len()
        );
        let dst = self.at(off, src.len());
        // SAFETY: `dst` is valid for `src.len()` bytes and 64-aligned (the
        // base is page-aligned, `off` a multiple of 64); `src` is a slice that
        // cannot overlap the pool; the length is whole lines; `kind` was
        // checked to be supported when the pool chose it.
        unsafe { arch::nt_copy(kind, dst, src.as_ptr(), src.len()) }
    }

    /// Streams `len` copies of `byte` into whole cache lines at `off`.
    #[inline]
    pub(crate) fn nt_fill(&self, kind: NtKind, off: usize, len: usize, byte: u8) {
        assert!(
            off.is_multiple_of(LINE) && len.is_multiple_of(LINE),
            "ferrite-pmem: non-temporal fill of {len} bytes at {off} is not whole cache lines"
        );
        let dst = self.at(off, len);
        // SAFETY: as in `nt_copy`, without a source.
        unsafe { arch::nt_fill(kind, dst, byte, len) }
    }

    /// A copy of the whole region.
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.copy_out(0, &mut v);
        v
    }

    /// Fill the page tables of a shared file mapping (pages already in the
    /// file are mapped without a fault at their first touch); nothing for
    /// heap memory or a private view (where it would copy every page).
    /// `chunk` bytes at a time (whole pages), calling `more` between chunks:
    /// it returns false to stop early.
    pub(crate) fn prefault(&self, chunk: usize, more: &mut dyn FnMut() -> bool) {
        #[cfg(target_os = "linux")]
        if let Backing::File { shared: true, .. } = self.backing {
            const MADV_POPULATE_WRITE: libc::c_int = 23;
            let chunk = chunk.max(PAGE as usize).next_multiple_of(PAGE as usize);
            let mut at = 0;
            while at < self.len && more() {
                let n = chunk.min(self.len - at);
                // SAFETY: advice on a part of the mapping this region owns
                // (`at + n <= len`, page aligned); populating faults pages
                // in without changing a byte.
                unsafe { libc::madvise(self.base.as_ptr().add(at).cast(), n, MADV_POPULATE_WRITE) };
                at += n;
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (chunk, more);
    }

    /// Fault every page of a new pool in, on a background thread. tmpfs
    /// leaves fallocated pages to be zeroed at their first touch (about a
    /// microsecond each), which would otherwise land on the first
    /// operations that use each page; doing it before `create_file`
    /// returned made mkfs cost 0.4 s or more per GiB. A store to a page the
    /// thread has not reached yet just takes that fault itself. The thread
    /// ends when it is done, or after its current chunk when the region is
    /// dropped. Best effort: older kernels lack the advice.
    fn populate_in_background(&mut self) {
        #[cfg(target_os = "linux")]
        if let Backing::File { shared: true, .. } = self.backing {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::sync::Arc;
            const MADV_POPULATE_WRITE: libc::c_int = 23;
            let stop = Arc::new(AtomicBool::new(false));
            let (base, len) = (self.base.as_ptr() as usize, self.len);
            let stop_t = stop.clone();
            let thread = std::thread::Builder::new().name("ferrite-populate".into()).spawn(move || {
                let mut at = 0;
                while at < len && !stop_t.load(Ordering::Relaxed) {
                    let n = POPULATE_CHUNK_BYTES.min(len - at);
                    // SAFETY: advice on a part of the mapping this region
                    // owns (`at + n <= len`, page aligned); the region joins
                    // this thread before it unmaps. Populating faults pages
                    // in without changing a byte, so it races with no store.
                    unsafe { libc::madvise((base + at) as *mut libc::c_void, n, MADV_POPULATE_WRITE) };
                    at += n;
                }
            });
            // No thread (resource limits): the pages fault in at first use.
            if let Ok(t) = thread {
                self.populator =
                    Some(Populator { stop, thread: std::sync::Mutex::new(Some(t)), pid: std::process::id() });
            }
        }
    }

    /// Wait until the background population of a new pool is done (at
    /// once if none runs).
    pub(crate) fn wait_populated(&self) {
        if let Some(p) = self.populator.as_ref() {
            p.join();
        }
    }

    /// msync of a file mapping (MS_SYNC); nothing for heap memory.
    pub(crate) fn msync(&self) -> io::Result<()> {
        match &self.backing {
            Backing::Heap { .. } => Ok(()),
            #[cfg(unix)]
            Backing::File { .. } => {
                if self.len == 0 {
                    return Ok(());
                }
                // SAFETY: `base`/`len` describe exactly the mapping this
                // region owns; msync does not change memory contents.
                let rc = unsafe { libc::msync(self.base.as_ptr().cast(), self.len, libc::MS_SYNC) };
                if rc == 0 {
                    Ok(())
                } else {
                    let e = io::Error::last_os_error();
                    Err(io::Error::new(e.kind(), format!("msync of the pool: {e}")))
                }
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // The populating thread uses the mapping: it ends first.
        if let Some(p) = self.populator.as_ref() {
            p.stop_and_join();
        }
        match &self.backing {
            Backing::Heap { layout } => {
                // SAFETY: `base` was returned by `alloc_zeroed(*layout)` and is
                // freed only here, once.
                unsafe { std::alloc::dealloc(self.base.as_ptr(), *layout) }
            }
            #[cfg(unix)]
            Backing::File { file, .. } => {
                use std::os::fd::AsRawFd;
                // Unmap first, then unlock; the file (and so the descriptor)
                // is closed when the field is dropped right after this.
                // SAFETY: `base`/`len` describe exactly the mapping this region
                // created; no reference into it can outlive `self`.
                unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
                // SAFETY: flock on a descriptor we own; unlocking cannot fail
                // in a way that matters (close would release the lock anyway).
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            }
        }
    }
}

/// A mapped pool file and what is known about its durability.
pub(crate) struct FileMapping {
    pub(crate) region: Region,
    pub(crate) map_sync: bool,
    pub(crate) domain: PersistenceDomain,
}

/// Wraps an I/O error with what was being done and to which file, keeping its
/// kind so callers can still match on it.
fn ctx(e: io::Error, what: &str, path: &Path) -> PmemError {
    PmemError::Io(io::Error::new(e.kind(), format!("{what} {}: {e}", path.display())))
}

/// Checks a pool length. `bad_kind` is the error kind for a length that is
/// not whole pages: `InvalidInput` when the caller asked for it,
/// `InvalidData` when it was found on an existing file.
fn check_len(len: u64, min_len: u64, bad_kind: io::ErrorKind) -> Result<(), PmemError> {
    if len == 0 || len < min_len {
        return Err(PmemError::TooSmall { len, min: min_len.max(PAGE) });
    }
    if !len.is_multiple_of(PAGE) {
        return Err(PmemError::Io(io::Error::new(bad_kind, format!("pool length {len} is not a multiple of {PAGE}"))));
    }
    if usize::try_from(len).is_err() || isize::try_from(len).is_err() {
        return Err(PmemError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pool length {len} does not fit in this machine's address space"),
        )));
    }
    Ok(())
}

#[cfg(unix)]
mod file_impl {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::fd::AsRawFd;

    /// `MAP_SYNC` from the Linux UAPI headers (not exported by libc on every
    /// architecture).
    #[cfg(target_os = "linux")]
    const MAP_SYNC: libc::c_int = 0x80000;
    #[cfg(target_os = "linux")]
    const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
    #[cfg(target_os = "linux")]
    const TMPFS_MAGIC: u32 = 0x0102_1994;
    #[cfg(target_os = "linux")]
    const RAMFS_MAGIC: u32 = 0x8584_58f6;

    /// Takes the exclusive advisory lock without waiting. flock locks belong
    /// to the open file description, so a second open of the same file, even
    /// in this process, conflicts: that is what stops two mounts of a pool.
    fn lock(file: &File, path: &Path) -> Result<(), PmemError> {
        loop {
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(code) if code == libc::EWOULDBLOCK || code == libc::EAGAIN => return Err(PmemError::AlreadyOpen),
                _ => return Err(ctx(e, "lock pool file", path)),
            }
        }
    }

    fn mmap(file: &File, len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
        // SAFETY: a fresh mapping chosen by the kernel (null hint) of a file
        // we hold open; it overlaps no Rust object.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))
    }

    /// Maps the file, MAP_SYNC first where the kernel knows it, and says
    /// which one worked.
    fn map(file: &File, len: usize, path: &Path) -> Result<(NonNull<u8>, bool), PmemError> {
        #[cfg(target_os = "linux")]
        {
            match mmap(file, len, MAP_SHARED_VALIDATE | MAP_SYNC) {
                Ok(p) => return Ok((p, true)),
                // EOPNOTSUPP: the file system is not DAX. EINVAL: a kernel too
                // old for MAP_SHARED_VALIDATE. Either way, plain MAP_SHARED.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) => {}
                Err(e) => return Err(ctx(e, "map pool file (MAP_SYNC)", path)),
            }
        }
        mmap(file, len, libc::MAP_SHARED).map(|p| (p, false)).map_err(|e| ctx(e, "map pool file", path))
    }

    fn domain(file: &File, map_sync: bool) -> PersistenceDomain {
        if map_sync {
            return PersistenceDomain::DaxMapSync;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `statfs` is plain old data, so all-zero is a valid value
            // for fstatfs to overwrite.
            let mut st: libc::statfs = unsafe { std::mem::zeroed() };
            // SAFETY: fstatfs writes only into `st`, which we own.
            if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } == 0 {
                // Magic numbers are 32-bit; f_type's width varies by target.
                let t = st.f_type as u32;
                if t == TMPFS_MAGIC || t == RAMFS_MAGIC {
                    return PersistenceDomain::SharedMemory;
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = file;
        PersistenceDomain::PageCache
    }

    fn finish(file: File, len: u64, path: &Path) -> Result<FileMapping, PmemError> {
        // check_len guaranteed that len fits in usize.
        let len = len as usize;
        let (base, map_sync) = map(&file, len, path)?;
        let domain = domain(&file, map_sync);
        Ok(FileMapping {
            region: Region {
                base,
                len,
                backing: Backing::File { file, shared: true },
                read_only_file: Default::default(),
                populator: None,
            },
            map_sync,
            domain,
        })
    }

    /// Reserves the file's blocks so that a store into the mapping cannot
    /// fail later with SIGBUS for lack of space (tmpfs, DAX). File systems
    /// without fallocate just skip this.
    fn reserve(file: &File, len: u64, path: &Path) -> Result<(), PmemError> {
        #[cfg(target_os = "linux")]
        {
            let Ok(l) = libc::off_t::try_from(len) else {
                return Ok(());
            };
            // SAFETY: fallocate on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, l) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => {}
                    _ => return Err(ctx(e, "reserve space for pool file", path)),
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (file, len, path);
        Ok(())
    }

    pub(crate) fn create_file(path: &Path, len: u64, min_len: u64) -> Result<FileMapping, PmemError> {
        check_len(len, min_len, io::ErrorKind::InvalidInput)?;
        // No O_TRUNC: the file must not change until we hold the lock.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| ctx(e, "create pool file", path))?;
        lock(&file, path)?;
        // Truncating to zero first discards any old contents, so a new pool
        // always starts all zero.
        file.set_len(0).and_then(|()| file.set_len(len)).map_err(|e| ctx(e, "set length of pool file", path))?;
        reserve(&file, len, path)?;
        // Make the file's existence and size durable; on tmpfs this is free.
        file.sync_all().map_err(|e| ctx(e, "sync pool file", path))?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            // Best effort: some file systems refuse fsync on a directory, and
            // the pool is usable either way.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        let mut m = finish(file, len, path)?;
        m.region.populate_in_background();
        Ok(m)
    }

    /// Opens a pool file for a private, copy-on-write view: stores go to
    /// private copies of the pages and never reach the file. With
    /// `shared_lock`, takes a shared advisory lock first, so the call fails
    /// with `AlreadyOpen` while a writer has the pool open (fsck wants a
    /// quiescent pool); without it, reads whatever the file holds now
    /// (`info`, `dump` on a mounted pool).
    pub(crate) fn open_file_private(path: &Path, min_len: u64, shared_lock: bool) -> Result<FileMapping, PmemError> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| ctx(e, "open pool file", path))?;
        if shared_lock {
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(code) if code == libc::EWOULDBLOCK || code == libc::EAGAIN => PmemError::AlreadyOpen,
                    _ => ctx(e, "lock pool file", path),
                });
            }
        }
        let len = file.metadata().map_err(|e| ctx(e, "stat pool file", path))?.len();
        check_len(len, min_len, io::ErrorKind::InvalidData).map_err(|e| match e {
            PmemError::Io(e) => ctx(e, "check pool file", path),
            other => other,
        })?;
        let base = mmap(&file, len as usize, libc::MAP_PRIVATE).map_err(|e| ctx(e, "map pool file privately", path))?;
        Ok(FileMapping {
            region: Region {
                base,
                len: len as usize,
                backing: Backing::File { file, shared: false },
                read_only_file: Default::default(),
                populator: None,
            },
            map_sync: false,
            domain: PersistenceDomain::Heap,
        })
    }

    /// A private, copy-on-write view of the file `region` maps (None for
    /// heap memory): reads see the file's pages as they are, stores go to
    /// private copies. The file is opened anew through `/proc/self/fd`, a
    /// new open file description, because a region unlocks its descriptor
    /// when dropped and a duplicate would share (and so drop) the lock of
    /// `region`'s own. A page the owner of `region` changes after this is
    /// seen by the view until the view writes that page, so the caller
    /// keeps the pool quiescent while it uses the view.
    pub(crate) fn private_view(region: &Region) -> Option<io::Result<Region>> {
        let Backing::File { file, .. } = &region.backing else {
            return None;
        };
        let reopen = || -> io::Result<Region> {
            let file = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
            let base = mmap(&file, region.len, libc::MAP_PRIVATE)?;
            Ok(Region {
                base,
                len: region.len,
                backing: Backing::File { file, shared: false },
                read_only_file: Default::default(),
                populator: None,
            })
        };
        Some(reopen())
    }

    pub(crate) fn open_file(path: &Path, min_len: u64) -> Result<FileMapping, PmemError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| ctx(e, "open pool file", path))?;
        lock(&file, path)?;
        let len = file.metadata().map_err(|e| ctx(e, "stat pool file", path))?.len();
        check_len(len, min_len, io::ErrorKind::InvalidData).map_err(|e| match e {
            PmemError::Io(e) => ctx(e, "check pool file", path),
            other => other,
        })?;
        finish(file, len, path)
    }
}

#[cfg(unix)]
pub(crate) use file_impl::{create_file, open_file, open_file_private, private_view};

#[cfg(not(unix))]
pub(crate) fn create_file(path: &Path, len: u64, min_len: u64) -> Result<FileMapping, PmemError> {
    check_len(len, min_len, io::ErrorKind::InvalidInput)?;
    Err(ctx(io::Error::from(io::ErrorKind::Unsupported), "file pools need a Unix system; cannot create", path))
}

#[cfg(not(unix))]
pub(crate) fn open_file_private(path: &Path, min_len: u64, _shared_lock: bool) -> Result<FileMapping, PmemError> {
    open_file(path, min_len)
}

#[cfg(not(unix))]
pub(crate) fn private_view(_region: &Region) -> Option<io::Result<Region>> {
    None
}

#[cfg(not(unix))]
pub(crate) fn open_file(path: &Path, _min_len: u64) -> Result<FileMapping, PmemError> {
    Err(ctx(io::Error::from(io::ErrorKind::Unsupported), "file pools need a Unix system; cannot open", path))
}

/// How one piece of a window maps pool pages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PoolMapping {
    /// Readable only; stores fault.
    ReadOnly,
    /// Readable and writable; stores go to the pool file.
    SharedWritable,
    /// Readable and writable; stores go to private copies, never to the file.
    PrivateWritable,
}

/// How `Region::map_into` maps: the access, whether the pool is mapped
/// with MAP_SYNC (a writable mapping then is too), and whether the page
/// tables are filled at once (MAP_POPULATE).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapHow {
    pub(crate) access: PoolMapping,
    pub(crate) map_sync: bool,
    pub(crate) populate: bool,
}

/// One reserved range of the address space holding pool-file mappings and
/// anonymous pages side by side: the memory of a view, a patch buffer or the
/// read-only alias of the whole pool (`crate::Window`). It owns the range:
/// `Drop` unmaps all of it.
pub(crate) struct WindowMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: `WindowMap` owns its mapping until `Drop`, so moving it between
// threads is sound; every access goes through raw pointers with bounds checked
// by `at`, as for `Region` (see the `Send` impl there for why concurrent raw
// copies are the caller's to coordinate).
unsafe impl Send for WindowMap {}
// SAFETY: see the `Send` impl above.
unsafe impl Sync for WindowMap {}

impl WindowMap {
    /// Reserves `len` bytes (a multiple of 4096, not zero) of address space
    /// that nothing is mapped in yet: inaccessible, committing no memory.
    pub(crate) fn reserve(len: usize) -> io::Result<WindowMap> {
        assert!(len > 0 && len.is_multiple_of(PAGE as usize), "ferrite-pmem: window of {len} bytes");
        // SAFETY: a fresh anonymous mapping chosen by the kernel (null hint);
        // it overlaps no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(WindowMap { base, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The address of `at` after checking `[at, at + len)` is inside.
    fn at(&self, at: usize, len: usize) -> *mut u8 {
        match at.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => {
                panic!("ferrite-pmem: window access of {len} bytes at {at} is outside the window of {} bytes", self.len)
            }
        }
        // SAFETY: `at <= self.len` and the reservation is `self.len` bytes.
        unsafe { self.base.as_ptr().add(at) }
    }

    /// Replaces `[at, at + len)` (page-aligned) with fresh zeroed anonymous
    /// pages, readable and writable.
    pub(crate) fn map_anonymous(&self, at: usize, len: usize) -> io::Result<()> {
        self.check_pages(at, len);
        let addr = self.at(at, len);
        // SAFETY: MAP_FIXED over pages inside our own reservation: it
        // replaces only memory this `WindowMap` owns, which no Rust reference
        // points into (all access is by raw pointer).
        let p = unsafe {
            libc::mmap(
                addr.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets the protection of the whole window: read-only, or read-write.
    pub(crate) fn protect(&self, writable: bool) -> io::Result<()> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: changes the protection of our own reservation only.
        if unsafe { libc::mprotect(self.base.as_ptr().cast(), self.len, prot) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies `data` into the window at `at`. The pages must be writable.
    pub(crate) fn copy_in(&self, at: usize, data: &[u8]) {
        let dst = self.at(at, data.len());
        // SAFETY: in bounds (checked by `at`); `data` is a Rust slice, which
        // cannot overlap window memory because no reference into it exists.
        unsafe { crate::arch::copy(dst, data.as_ptr(), data.len()) }
    }

    /// Copies window bytes at `at` into `buf`.
    pub(crate) fn copy_out(&self, at: usize, buf: &mut [u8]) {
        let src = self.at(at, buf.len());
        // SAFETY: in bounds (checked by `at`), and see `copy_in` on overlap.
        unsafe { crate::arch::copy(buf.as_mut_ptr(), src, buf.len()) }
    }

    fn check_pages(&self, at: usize, len: usize) {
        assert!(
            at.is_multiple_of(PAGE as usize) && len.is_multiple_of(PAGE as usize) && len > 0,
            "ferrite-pmem: window piece of {len} bytes at {at} is not whole pages"
        );
    }
}

impl Drop for WindowMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly our reservation, and every mapping
        // placed in it lies inside it; no reference into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl Region {
    /// Maps pool bytes `[off, off + len)` (page-aligned) over window bytes
    /// `[at, at + len)`, if the pool is a shared mapping of a file; returns
    /// false (nothing done) for a heap pool or a private view, whose bytes
    /// the caller must copy instead.
    #[cfg(unix)]
    pub(crate) fn map_into(
        &self,
        window: &WindowMap,
        at: usize,
        off: usize,
        len: usize,
        how: MapHow,
    ) -> io::Result<bool> {
        window.check_pages(at, len);
        let addr = window.at(at, len);
        Ok(self.map_pool(Some(addr), off, len, how)?.is_some())
    }

    /// Maps pool bytes `[off, off + len)` (page-aligned) at an address the
    /// kernel chooses, as a window of its own: one system call where a
    /// reservation and a fixed mapping would take two. `None` for a heap
    /// pool or a private view.
    #[cfg(unix)]
    pub(crate) fn map_new(&self, off: usize, len: usize, how: MapHow) -> io::Result<Option<WindowMap>> {
        assert!(len > 0 && len.is_multiple_of(PAGE as usize), "ferrite-pmem: window of {len} bytes");
        let Some(p) = self.map_pool(None, off, len, how)? else { return Ok(None) };
        let base = NonNull::new(p).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Some(WindowMap { base, len }))
    }

    #[cfg(not(unix))]
    pub(crate) fn map_new(&self, _off: usize, _len: usize, _how: MapHow) -> io::Result<Option<WindowMap>> {
        Ok(None)
    }

    /// The one `mmap` of pool pages: at `fixed` (inside a window the caller
    /// owns, whose bounds it checked) or anywhere. Returns the address, or
    /// `None` when the pool has no file to map.
    #[cfg(unix)]
    fn map_pool(&self, fixed: Option<*mut u8>, off: usize, len: usize, how: MapHow) -> io::Result<Option<*mut u8>> {
        use std::os::fd::AsRawFd;
        let Backing::File { file: pool_file, shared: true } = &self.backing else { return Ok(None) };
        let file = match how.access {
            PoolMapping::SharedWritable => pool_file,
            // Opened through /proc/self/fd: the same file even if its name
            // changed since the pool was opened.
            PoolMapping::ReadOnly | PoolMapping::PrivateWritable => self
                .read_only_file
                .get_or_init(|| File::open(format!("/proc/self/fd/{}", pool_file.as_raw_fd())).ok())
                .as_ref()
                .ok_or_else(|| io::Error::other("cannot open the pool file read-only"))?,
        };
        let MapHow { access, map_sync, populate } = how;
        let _ = self.at(off, len);
        assert!(off.is_multiple_of(PAGE as usize), "ferrite-pmem: pool mapping at {off} is not page-aligned");
        let (prot, mut flags) = match access {
            PoolMapping::ReadOnly => (libc::PROT_READ, libc::MAP_SHARED),
            PoolMapping::SharedWritable if map_sync => {
                // MAP_SHARED_VALIDATE | MAP_SYNC, as the pool itself is mapped.
                (libc::PROT_READ | libc::PROT_WRITE, 0x03 | 0x80000)
            }
            PoolMapping::SharedWritable => (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED),
            PoolMapping::PrivateWritable => (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE),
        };
        // MAP_POPULATE (`populate`): the page tables are filled in one
        // call, instead of one fault per page at first touch (about a
        // microsecond each in a VM), which would cost a view more than the
        // copy it saves.
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        if fixed.is_some() {
            flags |= libc::MAP_FIXED;
        }
        let addr = fixed.unwrap_or(std::ptr::null_mut());
        // SAFETY: with `fixed`, a MAP_FIXED mapping inside a window's own
        // reservation (the caller checked its bounds), which replaces only
        // memory the window owns; without, a fresh mapping the kernel
        // places, overlapping no Rust object. Either way of a file we hold
        // open, at an offset inside the pool (checked by `at`).
        let p = unsafe { libc::mmap(addr.cast(), len, prot, flags, file.as_raw_fd(), off as libc::off_t) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(p.cast::<u8>()))
    }

    #[cfg(not(unix))]
    pub(crate) fn map_into(
        &self,
        _window: &WindowMap,
        _at: usize,
        _off: usize,
        _len: usize,
        _how: MapHow,
    ) -> io::Result<bool> {
        Ok(false)
    }

    /// Whether pool bytes can be mapped elsewhere (`map_into` works).
    pub(crate) fn mappable(&self) -> bool {
        #[cfg(unix)]
        {
            matches!(self.backing, Backing::File { shared: true, .. })
        }
        #[cfg(not(unix))]
        false
    }
}
