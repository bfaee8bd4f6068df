//! The C API: `ferrite.h`'s `ferrite_*` functions over one engine `Session`.
//!
//! A C program formats or mounts a pool and gets an opaque handle, a
//! `ferrite_fs *`, that owns one session (a descriptor table, a current
//! directory and credentials). Every other call takes the handle first and
//! mirrors one POSIX call through `PathFs`.
//!
//! Conventions every function here follows, so that C callers can treat
//! them as they treat libc:
//! - failure is `-1` (or NULL for a pointer result) with `errno` set; on
//!   success `errno` is left alone;
//! - a NULL handle, path or buffer is EFAULT;
//! - a panic inside the engine never unwinds into C: `guard` catches it and
//!   the call fails with EIO;
//! - no name shadows a libc function: the same shared object also exports
//!   interposed libc symbols (the preload module), so every name here starts
//!   with `ferrite_`.
//!
//! `build.rs` runs cbindgen over this file alone (not the whole crate, whose
//! preload module exports `open`, `read`, … that must not appear in the
//! header), so everything `ferrite.h` declares is defined here.

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_camel_case_types)]

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use engine::{BufferId, ViewId};
use engine::{
    BufferedOptions, Credentials, Errno, FallocateMode, Fd, Ferrite, FileMode, FileType, FormatOptions, MountOptions,
    OpenFlags, PathFs, PoolError, RenameFlags, Session, XattrSetMode, AT_FDCWD,
};
use ferrite_pmem::{Pmem, PmemError};
use libc::{c_char, c_int, c_uint, c_void, dev_t, gid_t, mode_t, off_t, ssize_t, uid_t};

use crate::conv::{self, fail, ret, FailValue};

/// The `dirfd` of the `*at` calls that means the handle's current
/// directory; the same value as Linux's AT_FDCWD.
pub const FERRITE_AT_FDCWD: c_int = -100;

/// The smallest pool `ferrite_format` accepts, in bytes: the same floor as
/// the FUSE daemon's, below which the engine's fixed structures do not fit.
pub const FERRITE_MIN_POOL_BYTES: u64 = 64 * 4096;

/// Longest entry name `ferrite_readdir` returns, in bytes, without the NUL.
pub const FERRITE_NAME_MAX: usize = 255;

/// Consistency mode of a file: every call that changes it is atomic and
/// durable when it returns (the default, and the mode of every file that is
/// not a regular file).
pub const FERRITE_MODE_STRICT: c_int = 0;

/// Consistency mode of a regular file: its writes, truncates and
/// fallocates are seen at once but become durable together at the file's
/// next commit point: `ferrite_fsync`/`ferrite_fdatasync` of it,
/// `ferrite_sync`, a write through an O_SYNC/O_DSYNC descriptor, a clean
/// unmount, or any other change to the file (chmod, chown, utimens, an
/// xattr, a mode change, link, unlink, rename of it or over it). After a
/// crash the file is exactly as at its last completed commit point (or the
/// one in flight): never a mix. Files are independent.
pub const FERRITE_MODE_FSYNC_ATOMIC: c_int = 1;

/// A buffered mount (`ferrite_mount_with`, `ferrite_format_with`): every
/// call is atomic and returns at memory speed; a background persister
/// makes the calls durable in the order they returned, at most
/// `buffered_lag_ns` after each returns (default 5 ms). `ferrite_fsync`,
/// `ferrite_fdatasync` and `ferrite_sync` make every call that returned
/// before them durable (not only the file's), and so does an O_SYNC or
/// O_DSYNC write and `ferrite_unmount`. After a crash the pool is exactly
/// as after some prefix of the calls in the order they returned, holding
/// every call that returned before the last completed sync. It is a
/// property of the mount, not of a file: in a buffered mount
/// `ferrite_get_file_mode` and `ferrite_get_default_mode` answer
/// FERRITE_MODE_BUFFERED, and the modes stored in files (still set by
/// `ferrite_set_file_mode`) apply again on a mount that is not buffered.
pub const FERRITE_MODE_BUFFERED: c_int = 2;

/// How to mount a pool (`ferrite_mount_with`, `ferrite_format_with`).
/// Zero it (`struct ferrite_mount_options o = {0};`) and set what you
/// need: every zero field means the default.
#[repr(C)]
pub struct ferrite_mount_options {
    /// FERRITE_MODE_STRICT (0, the default) or FERRITE_MODE_FSYNC_ATOMIC:
    /// the mode of the regular files created from now on, as
    /// `ferrite_set_default_mode`; FERRITE_MODE_BUFFERED: a buffered mount.
    /// Anything else is EINVAL.
    pub mode: c_int,
    /// Buffered mounts: the longest an operation stays not durable after it
    /// returns, in nanoseconds (0: the default, 5 ms; at most 10 s, or
    /// UINT64_MAX for no bound: durable only at syncs and by
    /// `buffered_ops_max`). Calls wait rather than exceed it.
    pub buffered_lag_ns: u64,
    /// Buffered mounts: the most operations returned but not yet durable
    /// (0: the default, 4096; at most 1048576). Calls wait rather than
    /// exceed it.
    pub buffered_ops_max: u64,
    /// Must be zero (EINVAL otherwise): room for later options.
    pub reserved: [u64; 4],
}

/// A mounted pool as the C API sees it: one session (descriptor table,
/// current directory, credentials) over the engine. Opaque to C; made by
/// `ferrite_format` or `ferrite_mount`, freed by `ferrite_unmount`. The
/// session is Sync, so one handle may be used from many threads at once.
pub struct ferrite_fs {
    /// None in the preload handle (`ferrite_preload_handle`), which stands
    /// for the pool the preload library serves in this process.
    session: Option<Session>,
}

/// The one preload handle: the zero-copy calls on it act on the preload
/// library's session and the process's own (kernel-numbered) Ferrite
/// descriptors.
static PRELOAD_HANDLE: ferrite_fs = ferrite_fs { session: None };

/// One directory entry of `ferrite_readdir`.
#[repr(C)]
pub struct ferrite_dirent {
    /// Inode number (as `st_ino`).
    pub ino: u64,
    /// The cookie that continues the listing after this entry.
    pub next_cookie: u64,
    /// The entry's type, a `DT_*` value of `<dirent.h>`.
    pub r#type: u8,
    /// The name, NUL-terminated.
    pub name: [c_char; 256],
}

// The engine fills glibc's `stat64`/`statvfs64`; the header declares
// `struct stat`/`struct statvfs`, which on 64-bit Linux are the same
// structures. These assertions stop a build where they are not.
const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());
const _: () = assert!(std::mem::align_of::<libc::stat>() == std::mem::align_of::<libc::stat64>());
const _: () = assert!(std::mem::size_of::<libc::statvfs>() == std::mem::size_of::<libc::statvfs64>());
const _: () = assert!(std::mem::align_of::<libc::statvfs>() == std::mem::align_of::<libc::statvfs64>());

/// Linux's largest read or write count (MAX_RW_COUNT): a larger count is
/// clamped, so that every byte count fits in `ssize_t`.
const MAX_RW_COUNT: usize = 0x7fff_f000;

const EFAULT: Errno = Errno(libc::EFAULT);

/// Run one call's body and turn its result into C's: the value, or the
/// failure value with `errno` set. A panic becomes EIO, since unwinding
/// into C frames is undefined behaviour.
fn guard<T: FailValue>(body: impl FnOnce() -> Result<T, Errno>) -> T {
    // The closure only borrows the caller's arguments; after a panic
    // nothing of it is used again, and the engine's locks (parking_lot)
    // are not poisoned, so asserting unwind safety is sound.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => ret(r),
        Err(_) => fail(Errno::EIO),
    }
}

/// The session behind a handle; EFAULT for NULL.
///
/// # Safety
/// `fs` is NULL or a handle from `ferrite_format`/`ferrite_mount` that has
/// not been passed to `ferrite_unmount`.
unsafe fn session<'a>(fs: *mut ferrite_fs) -> Result<&'a Session, Errno> {
    // SAFETY: as the caller promises; only shared access is taken, and the
    // session is Sync.
    match unsafe { fs.as_ref() } {
        Some(ferrite_fs { session: Some(s) }) => Ok(s),
        // The preload handle serves the zero-copy calls only.
        Some(ferrite_fs { session: None }) => Err(Errno::EINVAL),
        None => Err(EFAULT),
    }
}

/// Where a zero-copy call goes: a handle's own session, or the preload
/// library's.
enum ZeroCopy<'a> {
    Handle(&'a Session),
    Preload(&'static crate::preload::Preload),
}

/// The target of a zero-copy call; EFAULT for NULL, ENODEV for the preload
/// handle when the preload library does not serve a pool in this process.
///
/// # Safety
/// As `session`, or `fs` is the preload handle.
unsafe fn zero_copy<'a>(fs: *mut ferrite_fs) -> Result<ZeroCopy<'a>, Errno> {
    // SAFETY: as the caller promises; only shared access is taken.
    match unsafe { fs.as_ref() } {
        Some(ferrite_fs { session: Some(s) }) => Ok(ZeroCopy::Handle(s)),
        Some(ferrite_fs { session: None }) => {
            crate::preload::active().map(ZeroCopy::Preload).ok_or(Errno(libc::ENODEV))
        }
        None => Err(EFAULT),
    }
}

/// A path argument as bytes; EFAULT for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the whole call.
unsafe fn path<'a>(p: *const c_char) -> Result<&'a [u8], Errno> {
    // SAFETY: as the caller promises.
    unsafe { conv::cstr(p) }
}

/// A descriptor argument: negative numbers are never open (EBADF).
fn fd(fd: c_int) -> Result<Fd, Errno> {
    u64::try_from(fd).map(Fd).map_err(|_| Errno::EBADF)
}

/// A `dirfd` argument: FERRITE_AT_FDCWD or a descriptor.
fn dirfd(fd: c_int) -> Result<Fd, Errno> {
    if fd == FERRITE_AT_FDCWD {
        Ok(AT_FDCWD)
    } else {
        self::fd(fd)
    }
}

/// A new descriptor as C's `int`. The session never reuses numbers, so a
/// program that opens more than 2^31 files in one handle's life runs past
/// `int`: such a descriptor is closed again and the call fails with EMFILE.
fn fd_out(s: &Session, fd: Fd) -> Result<c_int, Errno> {
    match c_int::try_from(fd.0) {
        Ok(n) => Ok(n),
        Err(_) => {
            let _ = s.close(fd);
            Err(Errno::EMFILE)
        }
    }
}

/// The engine's mount options from a `ferrite_mount_options` (NULL: the
/// defaults), or EINVAL.
///
/// # Safety
/// `opts` is NULL or points to a readable `ferrite_mount_options`.
unsafe fn mount_options(opts: *const ferrite_mount_options) -> Result<MountOptions, Errno> {
    // SAFETY: as the caller promises.
    let Some(o) = (unsafe { opts.as_ref() }) else { return Ok(MountOptions::default()) };
    if o.reserved.iter().any(|&r| r != 0) {
        return Err(Errno::EINVAL);
    }
    let mut m = MountOptions::default();
    if o.mode == FERRITE_MODE_BUFFERED {
        let mut b = BufferedOptions::default();
        if o.buffered_lag_ns != 0 {
            b.lag_ns_max = o.buffered_lag_ns;
        }
        if o.buffered_ops_max != 0 {
            b.ops_max = o.buffered_ops_max;
        }
        // Out of the engine's limits: refused before any file is touched.
        b.validate().map_err(|_| Errno::EINVAL)?;
        m.buffered = Some(b);
    } else {
        m.default_mode = file_mode(o.mode)?;
        if o.buffered_lag_ns != 0 || o.buffered_ops_max != 0 {
            return Err(Errno::EINVAL);
        }
    }
    Ok(m)
}

/// A mode argument: FERRITE_MODE_STRICT or FERRITE_MODE_FSYNC_ATOMIC,
/// else EINVAL.
fn file_mode(mode: c_int) -> Result<FileMode, Errno> {
    match mode {
        FERRITE_MODE_STRICT => Ok(FileMode::Strict),
        FERRITE_MODE_FSYNC_ATOMIC => Ok(FileMode::FsyncAtomic),
        _ => Err(Errno::EINVAL),
    }
}

/// A mode as the C API returns it.
fn mode_out(mode: FileMode) -> c_int {
    match mode {
        FileMode::Strict => FERRITE_MODE_STRICT,
        FileMode::FsyncAtomic => FERRITE_MODE_FSYNC_ATOMIC,
    }
}

/// A file offset or size argument: negative is EINVAL, as Linux.
fn offset(o: off_t) -> Result<u64, Errno> {
    u64::try_from(o).map_err(|_| Errno::EINVAL)
}

/// uid_t/gid_t -1 means "leave unchanged" (chown(2)).
fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

/// A caller's input buffer; an empty one may be NULL.
///
/// # Safety
/// `buf` is NULL or valid for reads of `len` bytes for the whole call.
unsafe fn in_buf<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], Errno> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(EFAULT);
    }
    // SAFETY: as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// A caller's output buffer, clamped to MAX_RW_COUNT; an empty one may be
/// NULL.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes for the whole call, and
/// nothing else accesses it meanwhile.
unsafe fn out_buf<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8], Errno> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(EFAULT);
    }
    // SAFETY: as the caller promises; the engine only writes into the
    // slice, so bytes the caller left uninitialized are never read.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len.min(MAX_RW_COUNT)) })
}

/// A caller's output structure; EFAULT for NULL.
///
/// # Safety
/// `p` is NULL or valid for writes of one `T`, with nothing else accessing
/// it during the call.
unsafe fn out_ref<'a, T>(p: *mut T) -> Result<&'a mut T, Errno> {
    // SAFETY: as the caller promises.
    unsafe { p.as_mut() }.ok_or(EFAULT)
}

/// The errno a pool that cannot be opened or mapped gives.
fn pmem_errno(e: &PmemError) -> Errno {
    match e {
        // The pool layer wraps OS errors in messages that name the file,
        // which drops the raw errno: the kind is what is left of it.
        PmemError::Io(io) => match (io.raw_os_error(), io.kind()) {
            (Some(e), _) => Errno(e),
            (None, std::io::ErrorKind::NotFound) => Errno::ENOENT,
            (None, std::io::ErrorKind::PermissionDenied) => Errno::EACCES,
            (None, std::io::ErrorKind::AlreadyExists) => Errno::EEXIST,
            (None, std::io::ErrorKind::IsADirectory) => Errno::EISDIR,
            (None, std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData) => Errno::EINVAL,
            (None, _) => Errno::EIO,
        },
        // The pool file's exclusive lock is held by another open.
        PmemError::AlreadyOpen => Errno::EBUSY,
        PmemError::TooSmall { .. } => Errno::EINVAL,
    }
}

/// The errno a pool that cannot be formatted or mounted gives.
fn pool_errno(e: &PoolError) -> Errno {
    match e {
        PoolError::NotFerrite | PoolError::Invalid(_) => Errno::EINVAL,
        PoolError::Version { .. } => Errno(libc::EPROTONOSUPPORT),
        PoolError::Corrupt(_) => Errno::ECORRUPT,
        PoolError::Pmem(p) => pmem_errno(p),
    }
}

/// A pool path argument as a file-system path of this process.
///
/// # Safety
/// As `path`.
unsafe fn pool_path<'a>(p: *const c_char) -> Result<&'a Path, Errno> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: as the caller promises.
    let bytes = unsafe { path(p) }?;
    if bytes.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(Path::new(std::ffi::OsStr::from_bytes(bytes)))
}

fn into_handle(session: Session) -> *mut ferrite_fs {
    Box::into_raw(Box::new(ferrite_fs { session: Some(session) }))
}

// ---- pools --------------------------------------------------------------

/// Create a pool file of `size_bytes` bytes at `pool_path` (a path of the
/// host file system, e.g. under /dev/shm or on a DAX file system), format
/// it and mount it. `size_bytes` is a multiple of 4096 and at least
/// FERRITE_MIN_POOL_BYTES (else EINVAL). An existing empty file is used;
/// an existing non-empty one is left alone and the call fails with EEXIST.
/// EBUSY if another open holds the pool. On failure a file this call
/// created is removed again.
///
/// Returns the handle, or NULL with errno set. The handle starts with root
/// credentials (uid 0, gid 0, umask 0) and `/` as current directory.
#[no_mangle]
pub unsafe extern "C" fn ferrite_format(pool_path: *const c_char, size_bytes: u64) -> *mut ferrite_fs {
    // SAFETY: as the caller promises; no options.
    unsafe { ferrite_format_with(pool_path, size_bytes, std::ptr::null()) }
}

/// As `ferrite_format`, then mounted as `opts` says (NULL: as
/// `ferrite_format`), e.g. buffered: `struct ferrite_mount_options o =
/// {0}; o.mode = FERRITE_MODE_BUFFERED; fs =
/// ferrite_format_with("/dev/shm/my.pool", 256 << 20, &o);`. EINVAL also
/// for options that are not valid (see `ferrite_mount_with`), and then no
/// file is created.
#[no_mangle]
pub unsafe extern "C" fn ferrite_format_with(
    pool_path: *const c_char,
    size_bytes: u64,
    opts: *const ferrite_mount_options,
) -> *mut ferrite_fs {
    guard(|| {
        // SAFETY: the caller passes NULL or a NUL-terminated string, and
        // NULL or readable options.
        let (p, mopts) = unsafe { (self::pool_path(pool_path)?, mount_options(opts)?) };
        let existed = match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => return Err(Errno::EISDIR),
            Ok(m) if m.len() > 0 => return Err(Errno::EEXIST),
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Errno(e.raw_os_error().unwrap_or(libc::EIO))),
        };
        if size_bytes < FERRITE_MIN_POOL_BYTES || !size_bytes.is_multiple_of(4096) {
            return Err(Errno::EINVAL);
        }
        let made = Pmem::create_file(p, size_bytes, FERRITE_MIN_POOL_BYTES)
            .map_err(|e| pmem_errno(&e))
            .and_then(|pmem| Ferrite::format(pmem, &FormatOptions::default()).map_err(|e| pool_errno(&e)))
            .and_then(|fs| {
                if mopts.buffered.is_some() {
                    // Formatting mounts strict: the same pool, buffered.
                    ferrite_fuse::daemon::remount_with(fs, &mopts).map_err(|_| Errno::EIO)
                } else {
                    fs.set_default_mode(mopts.default_mode);
                    Ok(fs)
                }
            })
            .map(|fs| Session::new(std::sync::Arc::new(fs)));
        match made {
            Ok(s) => Ok(into_handle(s)),
            Err(e) => {
                // A busy pool was not touched (its lock is taken before the
                // file is truncated), so only a file this call made goes.
                if !existed && e != Errno::EBUSY {
                    let _ = std::fs::remove_file(p);
                }
                Err(e)
            }
        }
    })
}

/// Open and mount the pool file at `pool_path`. A pool that was not
/// unmounted cleanly (a crash, a killed process) is recovered first: every
/// call that had returned is there, nothing half-done is.
///
/// Returns the handle, or NULL with errno set: ENOENT (no such file),
/// EBUSY (another open holds the pool), EINVAL (not a Ferrite pool, or too
/// small), EPROTONOSUPPORT (another format version), EUCLEAN (corrupt).
#[no_mangle]
pub unsafe extern "C" fn ferrite_mount(pool_path: *const c_char) -> *mut ferrite_fs {
    // SAFETY: as the caller promises; no options.
    unsafe { ferrite_mount_with(pool_path, std::ptr::null()) }
}

/// As `ferrite_mount`, with options (NULL: as `ferrite_mount`). A buffered
/// mount (`mode` FERRITE_MODE_BUFFERED, see there), durable within 2 ms:
/// `struct ferrite_mount_options o = {0}; o.mode = FERRITE_MODE_BUFFERED;
/// o.buffered_lag_ns = 2000000; fs = ferrite_mount_with("/dev/shm/my.pool",
/// &o);`. Buffered is a property of this mount only (nothing is stored in the
/// pool): the next mount chooses again. `ferrite_unmount` makes every
/// operation durable first; a process that exits without it loses at most
/// the operations of the last `buffered_lag_ns` (those after its last
/// sync), never a part of one. EINVAL: `mode` is not one of the three
/// constants, a buffered_* field is set without FERRITE_MODE_BUFFERED, or
/// `reserved` is not zero; otherwise the errors of `ferrite_mount`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_mount_with(
    pool_path: *const c_char,
    opts: *const ferrite_mount_options,
) -> *mut ferrite_fs {
    guard(|| {
        // SAFETY: the caller passes NULL or a NUL-terminated string, and
        // NULL or readable options.
        let (p, mopts) = unsafe { (self::pool_path(pool_path)?, mount_options(opts)?) };
        let pmem = Pmem::open_file(p, FERRITE_MIN_POOL_BYTES).map_err(|e| pmem_errno(&e))?;
        let s = Session::mount(pmem, &mopts).map_err(|e| pool_errno(&e))?;
        Ok(into_handle(s))
    })
}

/// Close every descriptor of the handle, unmount the pool cleanly (the
/// next mount needs no recovery) and free the handle, which must not be
/// used again, even when this fails. No other thread may be using the
/// handle. Returns 0, or -1 with errno set (EFAULT for NULL; an engine
/// error of the final flush).
#[no_mangle]
pub unsafe extern "C" fn ferrite_unmount(fs: *mut ferrite_fs) -> c_int {
    guard(|| {
        if fs.is_null() {
            return Err(EFAULT);
        }
        if std::ptr::eq(fs, &PRELOAD_HANDLE) {
            // The preload library unmounts its pool itself, at exit.
            return Err(Errno::EINVAL);
        }
        // SAFETY: a non-NULL `fs` other than the preload handle came from
        // `Box::into_raw` in `into_handle` and, as the caller promises, is
        // not used again.
        let h = unsafe { Box::from_raw(fs) };
        h.session.expect("a mounted handle has a session").unmount().map(|()| 0)
    })
}

/// Set the credentials every later call of this handle is made with: the
/// file-system uid and gid (checked as Linux checks permissions; uid 0
/// passes them as root does), no supplementary groups, and the umask
/// applied to created files. Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_set_credentials(fs: *mut ferrite_fs, uid: uid_t, gid: gid_t, umask: mode_t) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle (the API's contract).
        let s = unsafe { session(fs) }?;
        s.set_credentials(Credentials { uid, gid, groups: Vec::new(), umask: umask & 0o777 });
        Ok(0)
    })
}

/// Set the supplementary groups of the handle's credentials (`groups` may
/// be NULL when `ngroups` is 0); uid, gid and umask are kept. Returns 0, or
/// -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_set_groups(fs: *mut ferrite_fs, groups: *const gid_t, ngroups: usize) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle (the API's contract).
        let s = unsafe { session(fs) }?;
        let list: &[gid_t] = if ngroups == 0 {
            &[]
        } else if groups.is_null() {
            return Err(EFAULT);
        } else {
            // SAFETY: the caller passes `ngroups` readable gid_t values.
            unsafe { std::slice::from_raw_parts(groups, ngroups) }
        };
        let mut c = s.credentials();
        c.groups = list.to_vec();
        s.set_credentials(c);
        Ok(0)
    })
}

// ---- descriptors ----------------------------------------------------------

/// open(2) on the pool: `flags` and `mode` are open(2)'s (O_RDONLY,
/// O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW, O_PATH,
/// O_SYNC, O_DSYNC, O_CLOEXEC, O_TMPFILE; other bits are ignored). With
/// O_TMPFILE `path` names a directory and the descriptor a new file without
/// a name, which `ferrite_linkat` with AT_EMPTY_PATH names (once, unless
/// O_EXCL was given) and whose last close frees it otherwise. Returns the
/// new descriptor (3 or more), or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_open(fs: *mut ferrite_fs, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_openat(fs, FERRITE_AT_FDCWD, path, flags, mode) }
}

/// openat(2): as `ferrite_open`, a relative path starting at `dirfd`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_openat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        let fd = s.openat(self::dirfd(dirfd)?, p, OpenFlags::from_libc(flags), mode & 0o7777)?;
        fd_out(s, fd)
    })
}

/// close(2). Returns 0, or -1 with errno set (EBADF).
#[no_mangle]
pub unsafe extern "C" fn ferrite_close(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.close(self::fd(fd)?).map(|()| 0)
    })
}

/// read(2): up to `count` bytes at the descriptor's offset, which advances.
/// Returns the number read (0 at the end of the file), or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_read(fs: *mut ferrite_fs, fd: c_int, buf: *mut c_void, count: usize) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `buf` holds `count` bytes.
        let (s, b) = unsafe { (session(fs)?, out_buf(buf, count)?) };
        Ok(s.read(self::fd(fd)?, b)? as ssize_t)
    })
}

/// write(2): `count` bytes at the descriptor's offset (at the end with
/// O_APPEND), which advances. Returns the number written, or -1 with errno
/// set. Data is durable when the call returns (in a strict file; in an
/// fsync-atomic one at its next commit point, see FERRITE_MODE_FSYNC_ATOMIC).
#[no_mangle]
pub unsafe extern "C" fn ferrite_write(fs: *mut ferrite_fs, fd: c_int, buf: *const c_void, count: usize) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `buf` holds `count` bytes.
        let (s, b) = unsafe { (session(fs)?, in_buf(buf, count.min(MAX_RW_COUNT))?) };
        Ok(s.write(self::fd(fd)?, b)? as ssize_t)
    })
}

/// pread(2): read at `offset` without moving the descriptor's offset.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pread(
    fs: *mut ferrite_fs,
    fd: c_int,
    buf: *mut c_void,
    count: usize,
    offset: off_t,
) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `buf` holds `count` bytes.
        let (s, b) = unsafe { (session(fs)?, out_buf(buf, count)?) };
        Ok(s.pread(self::fd(fd)?, b, self::offset(offset)?)? as ssize_t)
    })
}

/// pwrite(2): write at `offset` without moving the descriptor's offset.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pwrite(
    fs: *mut ferrite_fs,
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: off_t,
) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `buf` holds `count` bytes.
        let (s, b) = unsafe { (session(fs)?, in_buf(buf, count.min(MAX_RW_COUNT))?) };
        Ok(s.pwrite(self::fd(fd)?, b, self::offset(offset)?)? as ssize_t)
    })
}

/// lseek(2), with SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA and SEEK_HOLE.
/// Returns the new offset, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_lseek(fs: *mut ferrite_fs, fd: c_int, offset: off_t, whence: c_int) -> off_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let pos = s.lseek(self::fd(fd)?, offset, conv::whence(whence)?)?;
        off_t::try_from(pos).map_err(|_| Errno::EOVERFLOW)
    })
}

/// ftruncate(2). Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_ftruncate(fs: *mut ferrite_fs, fd: c_int, length: off_t) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.ftruncate(self::fd(fd)?, offset(length)?).map(|()| 0)
    })
}

/// truncate(2). Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_truncate(fs: *mut ferrite_fs, path: *const c_char, length: off_t) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.truncate(p, offset(length)?).map(|()| 0)
    })
}

/// fsync(2). The commit point of an fsync-atomic file: its pending
/// writes become durable, all together. A strict file is durable already.
/// In a buffered mount every call that returned before it, on any file, is
/// durable when it returns. Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fsync(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.fsync(self::fd(fd)?).map(|()| 0)
    })
}

/// fdatasync(2): the same commit point as `ferrite_fsync` (an fsync-atomic
/// file's data and attributes commit as one). Returns 0, or -1 with errno
/// set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fdatasync(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.fdatasync(self::fd(fd)?).map(|()| 0)
    })
}

/// fallocate(2) with mode 0, FALLOC_FL_KEEP_SIZE,
/// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE or
/// FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE (other modes: EOPNOTSUPP).
/// Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fallocate(
    fs: *mut ferrite_fs,
    fd: c_int,
    mode: c_int,
    offset: off_t,
    len: off_t,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        // Linux checks the range before anything else: a negative offset
        // or a length of 0 or less is EINVAL.
        if offset < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        s.fallocate(self::fd(fd)?, FallocateMode::from_libc(mode)?, offset as u64, len as u64).map(|()| 0)
    })
}

/// dup(2): a new descriptor sharing the open file (offset and status
/// flags). Returns it, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_dup(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let new = s.dup(self::fd(fd)?)?;
        fd_out(s, new)
    })
}

/// dup2(2): `oldfd`'s open file at number `newfd`, closing what was there.
/// Returns `newfd`, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_dup2(fs: *mut ferrite_fs, oldfd: c_int, newfd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let new = s.dup2(self::fd(oldfd)?, self::fd(newfd)?)?;
        fd_out(s, new)
    })
}

// ---- attributes -------------------------------------------------------------

/// fstat(2) into `*out`. Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fstat(fs: *mut ferrite_fs, fd: c_int, out: *mut libc::stat) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `out` NULL or writable.
        let (s, o) = unsafe { (session(fs)?, out_ref(out as *mut libc::stat64)?) };
        conv::fill_stat(&s.fstat(self::fd(fd)?)?, o);
        Ok(0)
    })
}

/// stat(2) (follows a final symlink) into `*out`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_stat(fs: *mut ferrite_fs, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_fstatat(fs, FERRITE_AT_FDCWD, path, out, 0) }
}

/// lstat(2) (a final symlink itself) into `*out`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_lstat(fs: *mut ferrite_fs, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_fstatat(fs, FERRITE_AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// fstatat(2): `flags` AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fstatat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string,
        // `out` NULL or writable.
        let (s, p, o) = unsafe { (session(fs)?, self::path(path)?, out_ref(out as *mut libc::stat64)?) };
        conv::fill_stat(&s.fstatat(self::dirfd(dirfd)?, p, flags)?, o);
        Ok(0)
    })
}

/// statvfs(3) of the pool into `*out`. Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_statvfs(fs: *mut ferrite_fs, out: *mut libc::statvfs) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle; `out` NULL or writable.
        let (s, o) = unsafe { (session(fs)?, out_ref(out as *mut libc::statvfs64)?) };
        conv::fill_statvfs(&s.statfs()?, o);
        Ok(0)
    })
}

/// fchmod(2): permission bits of `mode` (07777). Returns 0, or -1 with
/// errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fchmod(fs: *mut ferrite_fs, fd: c_int, mode: mode_t) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.fchmod(self::fd(fd)?, mode & 0o7777).map(|()| 0)
    })
}

/// chmod(2) (follows a final symlink).
#[no_mangle]
pub unsafe extern "C" fn ferrite_chmod(fs: *mut ferrite_fs, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_fchmodat(fs, FERRITE_AT_FDCWD, path, mode, 0) }
}

/// fchmodat(2) (as fchmodat2: AT_SYMLINK_NOFOLLOW on a symlink is
/// EOPNOTSUPP).
#[no_mangle]
pub unsafe extern "C" fn ferrite_fchmodat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.fchmodat(self::dirfd(dirfd)?, p, mode & 0o7777, flags).map(|()| 0)
    })
}

/// fchown(2): `uid` or `gid` of (uid_t)-1 / (gid_t)-1 leaves it unchanged.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fchown(fs: *mut ferrite_fs, fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.fchown(self::fd(fd)?, id(uid), id(gid)).map(|()| 0)
    })
}

/// chown(2) (follows a final symlink); -1 leaves an id unchanged.
#[no_mangle]
pub unsafe extern "C" fn ferrite_chown(fs: *mut ferrite_fs, path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_fchownat(fs, FERRITE_AT_FDCWD, path, uid, gid, 0) }
}

/// fchownat(2): `flags` AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH; -1 leaves an
/// id unchanged.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fchownat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.fchownat(self::dirfd(dirfd)?, p, id(uid), id(gid), flags).map(|()| 0)
    })
}

/// The two timestamps of utimensat's `times`: NULL is "both now";
/// UTIME_NOW and UTIME_OMIT as utimensat(2).
///
/// # Safety
/// `times` is NULL or points to two `timespec`s.
unsafe fn times(times: *const libc::timespec) -> Result<(engine::TimeSet, engine::TimeSet), Errno> {
    if times.is_null() {
        return Ok((engine::TimeSet::Now, engine::TimeSet::Now));
    }
    // SAFETY: as the caller promises, `times[0]` and `times[1]` exist.
    let (a, m) = unsafe { (&*times, &*times.add(1)) };
    Ok((conv::time_set(Some(a))?, conv::time_set(Some(m))?))
}

/// utimensat(2): `times` is NULL (both now) or two timespecs (access,
/// modification), each possibly UTIME_NOW or UTIME_OMIT; `flags`
/// AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
#[no_mangle]
pub unsafe extern "C" fn ferrite_utimensat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string,
        // `times` NULL or two timespecs.
        let (s, p, (a, m)) = unsafe { (session(fs)?, self::path(path)?, self::times(times)?) };
        s.utimensat(self::dirfd(dirfd)?, p, a, m, flags).map(|()| 0)
    })
}

/// futimens(3): as `ferrite_utimensat` on an open descriptor.
#[no_mangle]
pub unsafe extern "C" fn ferrite_futimens(fs: *mut ferrite_fs, fd: c_int, times: *const libc::timespec) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `times` NULL or two
        // timespecs.
        let (s, (a, m)) = unsafe { (session(fs)?, self::times(times)?) };
        s.futimens(self::fd(fd)?, a, m).map(|()| 0)
    })
}

/// access(2): `mode` F_OK or a mix of R_OK, W_OK, X_OK, checked for the
/// handle's credentials. Returns 0, or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_access(fs: *mut ferrite_fs, path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_faccessat(fs, FERRITE_AT_FDCWD, path, mode, 0) }
}

/// faccessat(2): `flags` AT_EACCESS (no effect: the credentials have no
/// real/effective split), AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
#[no_mangle]
pub unsafe extern "C" fn ferrite_faccessat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        let mode = u32::try_from(mode).map_err(|_| Errno::EINVAL)?;
        s.faccessat(self::dirfd(dirfd)?, p, mode, flags).map(|()| 0)
    })
}

// ---- names ----------------------------------------------------------------

/// mkdir(2): permission bits of `mode`, less the umask.
#[no_mangle]
pub unsafe extern "C" fn ferrite_mkdir(fs: *mut ferrite_fs, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_mkdirat(fs, FERRITE_AT_FDCWD, path, mode) }
}

/// mkdirat(2).
#[no_mangle]
pub unsafe extern "C" fn ferrite_mkdirat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.mkdirat(self::dirfd(dirfd)?, p, mode).map(|()| 0)
    })
}

/// mknod(2): a regular file, FIFO, socket or (root only) device node, by
/// `mode`'s S_IFMT bits; `dev` is kept for device nodes. The pool records
/// special files but serves no I/O on them.
#[no_mangle]
pub unsafe extern "C" fn ferrite_mknod(fs: *mut ferrite_fs, path: *const c_char, mode: mode_t, dev: dev_t) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_mknodat(fs, FERRITE_AT_FDCWD, path, mode, dev) }
}

/// mknodat(2).
#[no_mangle]
pub unsafe extern "C" fn ferrite_mknodat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: dev_t,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.mknodat(self::dirfd(dirfd)?, p, mode, dev).map(|()| 0)
    })
}

/// unlink(2).
#[no_mangle]
pub unsafe extern "C" fn ferrite_unlink(fs: *mut ferrite_fs, path: *const c_char) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_unlinkat(fs, FERRITE_AT_FDCWD, path, 0) }
}

/// rmdir(2).
#[no_mangle]
pub unsafe extern "C" fn ferrite_rmdir(fs: *mut ferrite_fs, path: *const c_char) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_unlinkat(fs, FERRITE_AT_FDCWD, path, libc::AT_REMOVEDIR) }
}

/// unlinkat(2): `flags` 0 (unlink) or AT_REMOVEDIR (rmdir).
#[no_mangle]
pub unsafe extern "C" fn ferrite_unlinkat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.unlinkat(self::dirfd(dirfd)?, p, flags).map(|()| 0)
    })
}

/// rename(2): replaces an existing target.
#[no_mangle]
pub unsafe extern "C" fn ferrite_rename(fs: *mut ferrite_fs, oldpath: *const c_char, newpath: *const c_char) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_renameat2(fs, FERRITE_AT_FDCWD, oldpath, FERRITE_AT_FDCWD, newpath, 0) }
}

/// renameat2(2): `flags` 0, RENAME_NOREPLACE or RENAME_EXCHANGE.
#[no_mangle]
pub unsafe extern "C" fn ferrite_renameat2(
    fs: *mut ferrite_fs,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_uint,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, the paths NULL or C strings.
        let (s, old, new) = unsafe { (session(fs)?, path(oldpath)?, path(newpath)?) };
        let flags: RenameFlags = conv::rename_flags(flags)?;
        s.renameat2(dirfd(olddirfd)?, old, dirfd(newdirfd)?, new, flags).map(|()| 0)
    })
}

/// link(2): a new name for an existing file (a final symlink of `oldpath`
/// is not followed, as Linux).
#[no_mangle]
pub unsafe extern "C" fn ferrite_link(fs: *mut ferrite_fs, oldpath: *const c_char, newpath: *const c_char) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_linkat(fs, FERRITE_AT_FDCWD, oldpath, FERRITE_AT_FDCWD, newpath, 0) }
}

/// linkat(2): `flags` AT_SYMLINK_FOLLOW, AT_EMPTY_PATH (with an empty
/// `oldpath`, the file `olddirfd` refers to: a file made by O_TMPFILE gets
/// its name so; root credentials only, as Linux asks CAP_DAC_READ_SEARCH).
#[no_mangle]
pub unsafe extern "C" fn ferrite_linkat(
    fs: *mut ferrite_fs,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, the paths NULL or C strings.
        let (s, old, new) = unsafe { (session(fs)?, path(oldpath)?, path(newpath)?) };
        s.linkat(dirfd(olddirfd)?, old, dirfd(newdirfd)?, new, flags).map(|()| 0)
    })
}

/// symlink(2): `linkpath` becomes a symlink holding `target`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_symlink(fs: *mut ferrite_fs, target: *const c_char, linkpath: *const c_char) -> c_int {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_symlinkat(fs, target, FERRITE_AT_FDCWD, linkpath) }
}

/// symlinkat(2).
#[no_mangle]
pub unsafe extern "C" fn ferrite_symlinkat(
    fs: *mut ferrite_fs,
    target: *const c_char,
    newdirfd: c_int,
    linkpath: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, the strings NULL or C
        // strings.
        let (s, t, l) = unsafe { (session(fs)?, path(target)?, path(linkpath)?) };
        s.symlinkat(t, dirfd(newdirfd)?, l).map(|()| 0)
    })
}

/// readlink(2): the target of the symlink `path`, NOT NUL-terminated,
/// truncated to `bufsiz` bytes. Returns the number of bytes placed in
/// `buf`, or -1 with errno set (EINVAL for a non-symlink or `bufsiz` 0).
#[no_mangle]
pub unsafe extern "C" fn ferrite_readlink(
    fs: *mut ferrite_fs,
    path: *const c_char,
    buf: *mut c_char,
    bufsiz: usize,
) -> ssize_t {
    // SAFETY: the arguments are passed on under the same contract.
    unsafe { ferrite_readlinkat(fs, FERRITE_AT_FDCWD, path, buf, bufsiz) }
}

/// readlinkat(2): as `ferrite_readlink`; an empty path reads the symlink
/// an O_PATH|O_NOFOLLOW `dirfd` names.
#[no_mangle]
pub unsafe extern "C" fn ferrite_readlinkat(
    fs: *mut ferrite_fs,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    bufsiz: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        // Linux refuses an empty buffer before it looks at the path.
        if bufsiz == 0 {
            return Err(Errno::EINVAL);
        }
        let target = s.readlinkat(self::dirfd(dirfd)?, p)?;
        // SAFETY: `buf` is NULL or holds `bufsiz` writable bytes.
        let out = unsafe { out_buf(buf as *mut c_void, bufsiz) }?;
        let n = target.len().min(out.len());
        out[..n].copy_from_slice(&target[..n]);
        Ok(n as ssize_t)
    })
}

// ---- directories ------------------------------------------------------------

/// List an open directory (a descriptor opened with O_RDONLY|O_DIRECTORY):
/// up to `max` entries into `out`, starting after the entry whose
/// `next_cookie` was `cookie` (0 for the start). `.` and `..` are not
/// returned. Returns the number of entries stored, 0 at the end, or -1 with
/// errno set (EINVAL for `max` 0, ENOTDIR for a non-directory). Cookies stay
/// valid while other calls add or remove entries: an entry present for the
/// whole listing is returned exactly once.
#[no_mangle]
pub unsafe extern "C" fn ferrite_readdir(
    fs: *mut ferrite_fs,
    fd: c_int,
    cookie: u64,
    out: *mut ferrite_dirent,
    max: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        if max == 0 {
            return Err(Errno::EINVAL);
        }
        if out.is_null() {
            return Err(EFAULT);
        }
        let entries = s.readdir(self::fd(fd)?, cookie, max.min(MAX_RW_COUNT))?;
        for (i, e) in entries.iter().enumerate().take(max) {
            let mut d = ferrite_dirent {
                ino: e.ino.0,
                next_cookie: e.next_cookie,
                r#type: e.kind.dirent_type(),
                name: [0; 256],
            };
            // Names are at most NAME_MAX (255) bytes, so the NUL always fits.
            let n = e.name.len().min(FERRITE_NAME_MAX);
            for (dst, &src) in d.name.iter_mut().zip(&e.name[..n]) {
                *dst = src as c_char;
            }
            // SAFETY: `out` holds `max` entries and `i < max`; `write`
            // does not read the possibly uninitialized old value.
            unsafe { out.add(i).write(d) };
        }
        Ok(entries.len().min(max) as ssize_t)
    })
}

/// chdir(2): the handle's current directory, where relative paths start.
#[no_mangle]
pub unsafe extern "C" fn ferrite_chdir(fs: *mut ferrite_fs, path: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        s.chdir(p).map(|()| 0)
    })
}

/// fchdir(2): the directory an open descriptor (O_PATH too) names.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fchdir(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.fchdir(self::fd(fd)?).map(|()| 0)
    })
}

/// getcwd(3): the current directory's absolute path in the pool,
/// NUL-terminated, into `buf` of `size` bytes. Returns `buf`, or NULL with
/// errno set: ERANGE if it does not fit, EINVAL for `size` 0, EFAULT for a
/// NULL `buf` (this call never allocates), ENOENT once the directory has
/// been removed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_getcwd(fs: *mut ferrite_fs, buf: *mut c_char, size: usize) -> *mut c_char {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        if buf.is_null() {
            return Err(EFAULT);
        }
        if size == 0 {
            return Err(Errno::EINVAL);
        }
        let cwd = s.getcwd()?;
        if cwd.len() + 1 > size {
            return Err(Errno::ERANGE);
        }
        // SAFETY: `buf` holds `size` > cwd.len() writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(cwd.as_ptr(), buf as *mut u8, cwd.len());
            *buf.add(cwd.len()) = 0;
        }
        Ok(buf)
    })
}

// ---- extended attributes ------------------------------------------------------

/// A NUL-terminated attribute name; EFAULT for NULL.
///
/// # Safety
/// As `path`.
unsafe fn xname<'a>(name: *const c_char) -> Result<&'a [u8], Errno> {
    if name.is_null() {
        return Err(EFAULT);
    }
    // SAFETY: as the caller promises.
    Ok(unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// fgetxattr(2): the value of attribute `name` (e.g. "user.color") into
/// `value` of `size` bytes; `size` 0 asks for the length. Returns the
/// length, or -1 with errno set (ENODATA: no such attribute; ERANGE: the
/// buffer is too small).
#[no_mangle]
pub unsafe extern "C" fn ferrite_fgetxattr(
    fs: *mut ferrite_fs,
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `name` NULL or a C string.
        let (s, n) = unsafe { (session(fs)?, xname(name)?) };
        let v = s.fgetxattr(self::fd(fd)?, n)?;
        conv::copy_out(&v, value as *mut u8, size)
    })
}

/// fsetxattr(2): `flags` 0, XATTR_CREATE (EEXIST if it exists) or
/// XATTR_REPLACE (ENODATA if it does not).
#[no_mangle]
pub unsafe extern "C" fn ferrite_fsetxattr(
    fs: *mut ferrite_fs,
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `name` NULL or a C string,
        // `value` NULL or `size` readable bytes.
        let (s, n, v) = unsafe { (session(fs)?, xname(name)?, in_buf(value, size)?) };
        s.fsetxattr(self::fd(fd)?, n, v, conv::xattr_mode(flags)?).map(|()| 0)
    })
}

/// flistxattr(2): the names, each NUL-terminated, one after another, into
/// `list` of `size` bytes; `size` 0 asks for the length. Returns the
/// length, or -1 with errno set (ERANGE: the buffer is too small).
#[no_mangle]
pub unsafe extern "C" fn ferrite_flistxattr(fs: *mut ferrite_fs, fd: c_int, list: *mut c_char, size: usize) -> ssize_t {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let names = s.flistxattr(self::fd(fd)?)?;
        conv::copy_out(&conv::xattr_list(&names), list as *mut u8, size)
    })
}

/// fremovexattr(2): ENODATA if there is no such attribute.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fremovexattr(fs: *mut ferrite_fs, fd: c_int, name: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `name` NULL or a C string.
        let (s, n) = unsafe { (session(fs)?, xname(name)?) };
        s.fremovexattr(self::fd(fd)?, n).map(|()| 0)
    })
}

// ---- consistency modes ------------------------------------------------------

/// Set the mode of the regular files this handle's pool creates from now on
/// (by any handle or thread): FERRITE_MODE_STRICT or
/// FERRITE_MODE_FSYNC_ATOMIC. Files keep the mode they were created with.
/// The default is not stored in the pool: a mount starts with strict, so
/// call this right after `ferrite_format` or `ferrite_mount`. Returns 0, or
/// -1 with errno set (EINVAL: not a mode; FERRITE_MODE_BUFFERED too, which
/// is chosen at mount time with `ferrite_mount_with`). In a buffered mount
/// it sets the mode stored in new files, which applies only on a later
/// mount that is not buffered.
#[no_mangle]
pub unsafe extern "C" fn ferrite_set_default_mode(fs: *mut ferrite_fs, mode: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.set_default_mode(file_mode(mode)?);
        Ok(0)
    })
}

/// The mode new regular files get (see `ferrite_set_default_mode`):
/// FERRITE_MODE_BUFFERED in a buffered mount; or -1 with errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_default_mode(fs: *mut ferrite_fs) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        if s.is_buffered() {
            return Ok(FERRITE_MODE_BUFFERED);
        }
        Ok(mode_out(s.default_mode()))
    })
}

/// Set the consistency mode of the regular file at `path` (symlinks are
/// followed). The caller needs write permission on the file, as for an
/// xattr in the user namespace. A commit point of the file: what was
/// pending becomes durable first, even when the mode does not change.
/// Returns 0, or -1 with errno set (EINVAL: not a mode, or not a regular
/// file; the errors of stat and access). FERRITE_MODE_BUFFERED is EINVAL:
/// buffered is a property of a mount, not of a file. In a buffered mount
/// the mode set is stored (and applies on a later mount that is not
/// buffered).
#[no_mangle]
pub unsafe extern "C" fn ferrite_set_file_mode(fs: *mut ferrite_fs, path: *const c_char, mode: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        let m = file_mode(mode)?;
        let st = s.fstatat(AT_FDCWD, p, 0)?;
        if st.kind != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        s.faccessat(AT_FDCWD, p, libc::W_OK as u32, 0)?;
        s.set_file_mode_ino(st.ino, m).map(|()| 0)
    })
}

/// The consistency mode of the file at `path` (symlinks are followed):
/// FERRITE_MODE_STRICT or FERRITE_MODE_FSYNC_ATOMIC (anything but a
/// regular file is strict); in a buffered mount FERRITE_MODE_BUFFERED for
/// every file (its stored mode is kept but not applied). Needs no
/// permission on the file itself, as stat. Returns the mode, or -1 with
/// errno set (the errors of stat).
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_file_mode(fs: *mut ferrite_fs, path: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle, `path` NULL or a C string.
        let (s, p) = unsafe { (session(fs)?, self::path(path)?) };
        let st = s.fstatat(AT_FDCWD, p, 0)?;
        file_mode_out(s, st.ino)
    })
}

/// What `ferrite_get_file_mode` answers for inode `ino`.
fn file_mode_out(s: &Session, ino: engine::InodeNo) -> Result<c_int, Errno> {
    let stored = s.file_mode_ino(ino)?;
    if s.is_buffered() {
        return Ok(FERRITE_MODE_BUFFERED);
    }
    Ok(mode_out(stored))
}

/// As `ferrite_set_file_mode`, on the file open at descriptor `fd` (not
/// an O_PATH one: EBADF). The same as `ferrite_fsetxattr` of
/// "user.ferrite.mode" with the value "strict" or "fsync-atomic".
#[no_mangle]
pub unsafe extern "C" fn ferrite_fset_file_mode(fs: *mut ferrite_fs, fd: c_int, mode: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let value = file_mode(mode)?.as_str().as_bytes();
        s.fsetxattr(self::fd(fd)?, FileMode::XATTR, value, XattrSetMode::Any).map(|()| 0)
    })
}

/// As `ferrite_get_file_mode`, for the file open at descriptor `fd`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_fget_file_mode(fs: *mut ferrite_fs, fd: c_int) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        let ino = s.fd_inode(self::fd(fd)?)?;
        file_mode_out(s, ino)
    })
}

/// sync(2) on the pool: a commit point of every fsync-atomic file (strict
/// files are durable already); in a buffered mount, every call that
/// returned before it is durable when it returns. Returns 0, or -1 with
/// errno set.
#[no_mangle]
pub unsafe extern "C" fn ferrite_sync(fs: *mut ferrite_fs) -> c_int {
    guard(|| {
        // SAFETY: `fs` is NULL or a live handle.
        let s = unsafe { session(fs) }?;
        s.sync_all().map(|()| 0)
    })
}

// ---- zero-copy: peek and patch --------------------------------------------

/// The handle of the pool the preload library serves in this process (a
/// program run with LD_PRELOAD=libferrite.so, FERRITE_POOL and
/// FERRITE_ROOT), for the zero-copy calls on its Ferrite descriptors: the
/// descriptors the program's own open(2) of paths under FERRITE_ROOT
/// returned. Only `ferrite_peek`, `ferrite_unpeek`, `ferrite_patch_buffer`,
/// `ferrite_patch` and `ferrite_free_buffer` accept it (every other call
/// fails with EINVAL: the program's POSIX calls reach the pool already);
/// it is never unmounted by the program. Returns it, or NULL with errno
/// ENODEV when the library serves no pool in this process (no
/// FERRITE_ROOT, the pool held by another process, a forked child, or
/// after exit began). The zero-copy calls on it fail with ENODEV too once
/// the library has stopped serving.
#[no_mangle]
pub extern "C" fn ferrite_preload_handle() -> *mut ferrite_fs {
    guard(|| match crate::preload::active() {
        Some(_) => Ok(&PRELOAD_HANDLE as *const ferrite_fs as *mut ferrite_fs),
        None => Err(Errno(libc::ENODEV)),
    })
}

/// peek: a read-only view of bytes [offset, offset+len) of the regular file
/// open at `fd` (readable; O_PATH is EBADF), contiguous in memory, mapping
/// the pool's pages where they are (no copy). The view shows the file as it
/// was at this call, whatever is written, truncated, punched or unlinked
/// later (holes read as zeros), and stays valid until `ferrite_unpeek`,
/// even after `fd` is closed or the file removed; it never blocks writers.
/// Stores through it fault (SIGSEGV). `ferrite_unmount` (and, under the
/// preload library, exit) releases every view; a crash or a killed process
/// loses them and leaks nothing.
///
/// Returns the address of the first byte (not page-aligned when `offset` is
/// not), or NULL with errno set: EINVAL for `len` 0, more than 1 GiB
/// (`VIEW_BYTES_MAX`), a negative `offset` or a range past the end of the
/// file; EISDIR for a directory (EINVAL for another non-regular file);
/// ENOMEM when 4096 views (`VIEWS_MAX`) are live; EBADF.
#[no_mangle]
pub unsafe extern "C" fn ferrite_peek(fs: *mut ferrite_fs, fd: c_int, offset: off_t, len: usize) -> *const c_void {
    guard(|| {
        let off = self::offset(offset)?;
        // SAFETY: `fs` is NULL, a live handle or the preload handle.
        let ptr = match unsafe { zero_copy(fs) }? {
            ZeroCopy::Handle(s) => s.peek(self::fd(fd)?, off, len as u64)?.ptr,
            ZeroCopy::Preload(p) => crate::preload::peek(p, fd, off, len as u64)?,
        };
        Ok(ptr as *const c_void)
    })
}

/// unpeek: release the view `ferrite_peek` returned at `view`, which must
/// not be used afterwards. Each peek takes one unpeek: two views of the
/// same bytes may have the same address (a view of one run of pool pages is
/// served from a read-only alias of the whole pool, which stays mapped),
/// and each unpeek of it releases one of them. Returns 0, or -1 with errno
/// set: EINVAL if `view` is not a live view's address (released already,
/// never one, or inside one), EFAULT for NULL. Under the preload handle,
/// `view` may also be the address of a read-only or private `mmap` of a
/// Ferrite file (the same as unmapping it whole).
#[no_mangle]
pub unsafe extern "C" fn ferrite_unpeek(fs: *mut ferrite_fs, view: *const c_void) -> c_int {
    guard(|| {
        if view.is_null() {
            return Err(EFAULT);
        }
        // SAFETY: `fs` is NULL, a live handle or the preload handle.
        match unsafe { zero_copy(fs) }? {
            ZeroCopy::Handle(s) => s.unpeek(ViewId(view as usize))?,
            ZeroCopy::Preload(p) => crate::preload::unpeek(p, view as usize)?,
        }
        Ok(0)
    })
}

/// A patch buffer: `len` bytes (rounded up to whole 4096-byte pages) of
/// fresh pool pages, writable, their initial bytes unspecified (as
/// malloc's: the bytes to patch must be written). The caller fills it with
/// ordinary stores and hands it to `ferrite_patch`, or gives it back with
/// `ferrite_free_buffer`; buffers still held are freed by
/// `ferrite_unmount`, and after a crash by the next mount's recovery.
///
/// Returns its address (page-aligned), or NULL with errno set: EINVAL for
/// `len` 0 or more than 1 GiB (`BUFFER_BYTES_MAX`), ENOSPC when the pool has
/// no room, ENOMEM when 1024 buffers (`BUFFERS_MAX`) are live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_patch_buffer(fs: *mut ferrite_fs, len: usize) -> *mut c_void {
    guard(|| {
        // SAFETY: `fs` is NULL, a live handle or the preload handle.
        let ptr = match unsafe { zero_copy(fs) }? {
            ZeroCopy::Handle(s) => s.patch_buffer(len as u64)?.ptr,
            ZeroCopy::Preload(p) => crate::preload::patch_buffer(p, len as u64)?,
        };
        Ok(ptr as *mut c_void)
    })
}

/// patch: make the first `len` bytes of the buffer at `buf` (from
/// `ferrite_patch_buffer`) the bytes [offset, offset+len) of the regular
/// file open for writing at `fd`, growing the file if they end past it.
/// One atomic change: durable when the call returns in a strict file,
/// pending until the file's next commit point in an fsync-atomic one. When
/// `offset` is a multiple of 4096 the buffer's pages become the file's (no
/// copy; a partial last page is merged with the file's bytes after it);
/// otherwise the bytes are copied as by a write. After success the buffer
/// is gone (its address is unmapped) and must not be touched or freed; on
/// failure it is still the caller's, unchanged, and the file is unchanged.
///
/// Returns 0, or -1 with errno set: EINVAL when `buf` is not a live
/// buffer's address (patched or freed already, never one), for `len` 0 or
/// more than the buffer's length, or a negative `offset`; EISDIR for a
/// directory; EBADF when `fd` is not open for writing; EFBIG past the
/// largest file; EFAULT for a NULL `buf`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_patch(
    fs: *mut ferrite_fs,
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    offset: off_t,
) -> c_int {
    guard(|| {
        if buf.is_null() {
            return Err(EFAULT);
        }
        let off = self::offset(offset)?;
        // SAFETY: `fs` is NULL, a live handle or the preload handle.
        match unsafe { zero_copy(fs) }? {
            ZeroCopy::Handle(s) => s.patch(self::fd(fd)?, off, BufferId(buf as usize), len as u64)?,
            ZeroCopy::Preload(p) => crate::preload::patch(p, fd, off, buf as usize, len as u64)?,
        }
        Ok(0)
    })
}

/// Give back a patch buffer that will not be patched: its pages are free
/// again and its address is unmapped. Returns 0, or -1 with errno set:
/// EINVAL when `buf` is not a live buffer's address (patched or freed
/// already, never one), EFAULT for NULL.
#[no_mangle]
pub unsafe extern "C" fn ferrite_free_buffer(fs: *mut ferrite_fs, buf: *mut c_void) -> c_int {
    guard(|| {
        if buf.is_null() {
            return Err(EFAULT);
        }
        // SAFETY: `fs` is NULL, a live handle or the preload handle.
        match unsafe { zero_copy(fs) }? {
            ZeroCopy::Handle(s) => s.free_buffer(BufferId(buf as usize))?,
            ZeroCopy::Preload(p) => crate::preload::free_buffer(p, buf as usize)?,
        }
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    //! The FFI conventions that the C examples cannot show: a panic turned
    //! into EIO, and argument checks made before the engine is reached.

    use super::*;

    #[test]
    fn a_panic_becomes_eio() {
        conv::set_errno(0);
        let r: c_int = guard(|| panic!("deliberate panic: the C API must turn it into EIO"));
        assert_eq!((r, conv::errno()), (-1, libc::EIO));
        let p: *mut ferrite_fs = guard(|| panic!("deliberate panic in a call that returns a pointer"));
        assert!(p.is_null());
        assert_eq!(conv::errno(), libc::EIO);
    }

    #[test]
    fn success_leaves_errno_alone() {
        conv::set_errno(libc::ENOENT);
        let r: c_int = guard(|| Ok(7));
        assert_eq!((r, conv::errno()), (7, libc::ENOENT));
    }

    #[test]
    fn descriptor_arguments() {
        assert_eq!(fd(-1), Err(Errno::EBADF));
        assert_eq!(fd(3), Ok(Fd(3)));
        assert_eq!(dirfd(FERRITE_AT_FDCWD), Ok(AT_FDCWD));
        assert_eq!(dirfd(-5), Err(Errno::EBADF));
        assert_eq!(offset(-1), Err(Errno::EINVAL));
        assert_eq!(id(u32::MAX), None);
        assert_eq!(id(0), Some(0));
    }

    /// fallocate's mode words as Linux sorts them: the five the engine
    /// serves, and EOPNOTSUPP for the rest, PUNCH_HOLE without KEEP_SIZE
    /// and modes combined among them (tmpfs and ext4 answer so too).
    #[test]
    fn fallocate_mode_words() {
        use libc::{FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_KEEP_SIZE as KEEP};
        use libc::{FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        assert_eq!(FallocateMode::from_libc(0), Ok(FallocateMode::Default));
        assert_eq!(FallocateMode::from_libc(KEEP), Ok(FallocateMode::KeepSize));
        assert_eq!(FallocateMode::from_libc(PUNCH | KEEP), Ok(FallocateMode::PunchHole));
        assert_eq!(FallocateMode::from_libc(ZERO), Ok(FallocateMode::ZeroRange));
        assert_eq!(FallocateMode::from_libc(ZERO | KEEP), Ok(FallocateMode::ZeroRangeKeepSize));
        for refused in [PUNCH, ZERO | PUNCH, ZERO | PUNCH | KEEP, COLLAPSE, COLLAPSE | KEEP, 0x4, 0x40, -1] {
            assert_eq!(FallocateMode::from_libc(refused), Err(Errno::EOPNOTSUPP), "mode {refused:#x}");
        }
    }

    #[test]
    fn null_handles_and_bad_pools() {
        // SAFETY: NULL handles and C string literals are what the API
        // accepts; none of these calls reaches a handle.
        unsafe {
            assert_eq!(ferrite_close(std::ptr::null_mut(), 3), -1);
            assert_eq!(conv::errno(), libc::EFAULT);
            assert_eq!(ferrite_unmount(std::ptr::null_mut()), -1);
            assert_eq!(conv::errno(), libc::EFAULT);
            assert!(ferrite_mount(c"/nonexistent/ferrite.pool".as_ptr()).is_null());
            assert_eq!(conv::errno(), libc::ENOENT);
            assert!(ferrite_format(std::ptr::null(), 1 << 20).is_null());
            assert_eq!(conv::errno(), libc::EFAULT);
            let small = format!("/dev/shm/ferrite-capi-unit-{}.pool\0", std::process::id());
            assert!(ferrite_format(small.as_ptr() as *const c_char, 4096).is_null());
            assert_eq!(conv::errno(), libc::EINVAL);
            assert!(!Path::new(small.trim_end_matches('\0')).exists(), "a failed format leaves no file");
        }
    }

    #[test]
    fn readdir_and_getcwd_arguments() {
        let pool = format!("/dev/shm/ferrite-capi-unit2-{}.pool\0", std::process::id());
        // SAFETY: a fresh pool path; the handle is used only here and
        // unmounted at the end; the buffers outlive the calls.
        unsafe {
            let fs = ferrite_format(pool.as_ptr() as *const c_char, 16 << 20);
            assert!(!fs.is_null(), "format: errno {}", conv::errno());
            let root = ferrite_open(fs, c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY, 0);
            assert_eq!(root, 3, "descriptors start at 3");
            let mut ents: [ferrite_dirent; 1] = std::mem::zeroed();
            assert_eq!(ferrite_readdir(fs, root, 0, ents.as_mut_ptr(), 0), -1);
            assert_eq!(conv::errno(), libc::EINVAL);
            assert_eq!(ferrite_readdir(fs, root, 0, std::ptr::null_mut(), 1), -1);
            assert_eq!(conv::errno(), libc::EFAULT);
            assert_eq!(ferrite_readdir(fs, root, 0, ents.as_mut_ptr(), 1), 0, "an empty root lists nothing");
            let mut buf = [0 as c_char; 2];
            assert_eq!(ferrite_getcwd(fs, buf.as_mut_ptr(), 2), buf.as_mut_ptr());
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_bytes(), b"/");
            assert!(ferrite_getcwd(fs, buf.as_mut_ptr(), 0).is_null());
            assert_eq!(conv::errno(), libc::EINVAL);
            let mut link = [0 as c_char; 4];
            assert_eq!(ferrite_readlink(fs, c"/x".as_ptr(), link.as_mut_ptr(), 0), -1);
            assert_eq!(conv::errno(), libc::EINVAL);
            assert_eq!(ferrite_fallocate(fs, root, 0, 0, 0), -1);
            assert_eq!(conv::errno(), libc::EINVAL);
            assert_eq!(ferrite_lseek(fs, root, 0, 99), -1);
            assert_eq!(conv::errno(), libc::EINVAL);
            assert_eq!(ferrite_unmount(fs), 0);
        }
        let _ = std::fs::remove_file(pool.trim_end_matches('\0'));
    }
}
