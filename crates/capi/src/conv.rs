//! Conversions between the engine's value types and the C structures and
//! flag words of the Linux ABI, shared by the C API and the preload hooks.

use engine::{Errno, RenameFlags, Stat, StatFs, TimeSet, TimeSpec, Whence, XattrSetMode};
use libc::c_int;

/// Set the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

pub fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// `-1` with `errno` set: the C convention every call of this library
/// follows on failure.
pub fn fail<T: FailValue>(e: Errno) -> T {
    set_errno(e.0);
    T::FAIL
}

/// The value a C function returns on failure.
pub trait FailValue {
    const FAIL: Self;
}
impl FailValue for c_int {
    const FAIL: c_int = -1;
}
impl FailValue for isize {
    const FAIL: isize = -1;
}
impl FailValue for i64 {
    const FAIL: i64 = -1;
}
impl<T> FailValue for *mut T {
    const FAIL: *mut T = std::ptr::null_mut();
}
impl<T> FailValue for *const T {
    const FAIL: *const T = std::ptr::null();
}

/// The `Ok` value as C's success value, an error as `-1`/NULL + errno.
pub fn ret<T: FailValue>(r: Result<T, Errno>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(e),
    }
}

/// `0` for success, `-1` + errno for an error.
pub fn ret0(r: Result<(), Errno>) -> c_int {
    ret(r.map(|()| 0))
}

/// The device number Ferrite's files report (st_dev): one fixed number
/// outside the kernel's ranges, so `find -xdev` and `du -x` treat the pool
/// as one file system.
pub const FERRITE_DEV: u64 = 0xfe_0000_0001;

fn ts(t: TimeSpec) -> (i64, i64) {
    (t.sec, t.nsec as i64)
}

/// Fill a `struct stat` (which is `struct stat64` on 64-bit Linux).
pub fn fill_stat(st: &Stat, out: &mut libc::stat64) {
    // SAFETY: every field of `stat64` is an integer: all-zero is valid.
    *out = unsafe { std::mem::zeroed() };
    out.st_dev = FERRITE_DEV;
    out.st_ino = st.ino.0;
    out.st_mode = st.mode();
    out.st_nlink = st.nlink as _;
    out.st_uid = st.uid;
    out.st_gid = st.gid;
    out.st_rdev = st.rdev;
    out.st_size = st.size as i64;
    out.st_blksize = st.blksize as _;
    out.st_blocks = st.blocks as i64;
    (out.st_atime, out.st_atime_nsec) = ts(st.atime);
    (out.st_mtime, out.st_mtime_nsec) = ts(st.mtime);
    (out.st_ctime, out.st_ctime_nsec) = ts(st.ctime);
}

/// Fill a `struct statx` with every basic field (STATX_BASIC_STATS).
pub fn fill_statx(st: &Stat, out: &mut libc::statx) {
    // SAFETY: every field of `statx` is an integer: all-zero is valid.
    *out = unsafe { std::mem::zeroed() };
    out.stx_mask = libc::STATX_BASIC_STATS;
    out.stx_blksize = st.blksize;
    out.stx_nlink = st.nlink;
    out.stx_uid = st.uid;
    out.stx_gid = st.gid;
    out.stx_mode = st.mode() as u16;
    out.stx_ino = st.ino.0;
    out.stx_size = st.size;
    out.stx_blocks = st.blocks;
    let t = |t: TimeSpec| {
        // SAFETY: an integer structure: all-zero is valid.
        let mut x: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        x.tv_sec = t.sec;
        x.tv_nsec = t.nsec;
        x
    };
    out.stx_atime = t(st.atime);
    out.stx_mtime = t(st.mtime);
    out.stx_ctime = t(st.ctime);
    out.stx_rdev_major = libc::major(st.rdev);
    out.stx_rdev_minor = libc::minor(st.rdev);
    out.stx_dev_major = libc::major(FERRITE_DEV);
    out.stx_dev_minor = libc::minor(FERRITE_DEV);
}

/// Fill a `struct statvfs`.
pub fn fill_statvfs(s: &StatFs, out: &mut libc::statvfs64) {
    // SAFETY: every field of `statvfs64` is an integer: all-zero is valid.
    *out = unsafe { std::mem::zeroed() };
    out.f_bsize = s.block_size as _;
    out.f_frsize = s.block_size as _;
    out.f_blocks = s.blocks;
    out.f_bfree = s.blocks_free;
    out.f_bavail = s.blocks_avail;
    out.f_files = s.files;
    out.f_ffree = s.files_free;
    out.f_favail = s.files_free;
    out.f_fsid = FERRITE_DEV as _;
    out.f_namemax = s.name_max as _;
}

/// The magic number `statfs` reports for a Ferrite pool ("FERR").
pub const FERRITE_MAGIC: i64 = 0x4645_5252;

/// Fill a `struct statfs`.
pub fn fill_statfs(s: &StatFs, out: &mut libc::statfs64) {
    // SAFETY: every field of `statfs64` is an integer: all-zero is valid.
    *out = unsafe { std::mem::zeroed() };
    out.f_type = FERRITE_MAGIC;
    out.f_bsize = s.block_size as _;
    out.f_frsize = s.block_size as _;
    out.f_blocks = s.blocks;
    out.f_bfree = s.blocks_free;
    out.f_bavail = s.blocks_avail;
    out.f_files = s.files;
    out.f_ffree = s.files_free;
    out.f_namelen = s.name_max as _;
}

/// Decode utimensat's `times` (NULL: both now; UTIME_NOW / UTIME_OMIT).
pub fn time_set(t: Option<&libc::timespec>) -> Result<TimeSet, Errno> {
    match t {
        None => Ok(TimeSet::Now),
        Some(t) if t.tv_nsec == libc::UTIME_NOW => Ok(TimeSet::Now),
        Some(t) if t.tv_nsec == libc::UTIME_OMIT => Ok(TimeSet::Omit),
        Some(t) if !(0..1_000_000_000).contains(&t.tv_nsec) => Err(Errno::EINVAL),
        Some(t) => Ok(TimeSet::At(TimeSpec { sec: t.tv_sec, nsec: t.tv_nsec as u32 })),
    }
}

/// Decode a `timeval` (utimes, futimes).
pub fn time_from_timeval(t: &libc::timeval) -> Result<TimeSet, Errno> {
    if !(0..1_000_000).contains(&t.tv_usec) {
        return Err(Errno::EINVAL);
    }
    Ok(TimeSet::At(TimeSpec { sec: t.tv_sec, nsec: t.tv_usec as u32 * 1000 }))
}

/// renameat2(2)'s flags.
pub fn rename_flags(flags: u32) -> Result<RenameFlags, Errno> {
    match flags {
        0 => Ok(RenameFlags::Replace),
        libc::RENAME_NOREPLACE => Ok(RenameFlags::NoReplace),
        libc::RENAME_EXCHANGE => Ok(RenameFlags::Exchange),
        f if f & libc::RENAME_WHITEOUT != 0 => Err(Errno::EOPNOTSUPP),
        _ => Err(Errno::EINVAL),
    }
}

/// setxattr(2)'s flags.
pub fn xattr_mode(flags: c_int) -> Result<XattrSetMode, Errno> {
    match flags {
        0 => Ok(XattrSetMode::Any),
        libc::XATTR_CREATE => Ok(XattrSetMode::Create),
        libc::XATTR_REPLACE => Ok(XattrSetMode::Replace),
        _ => Err(Errno::EINVAL),
    }
}

/// The open(2) flag word of a description's status (`OpenFlags::status`):
/// access mode, O_APPEND, O_SYNC/O_DSYNC, O_DIRECTORY, O_NOFOLLOW,
/// O_TMPFILE, or O_PATH alone. F_GETFL answers it; reopening a file takes
/// the word of `OpenFlags::reopen`, which gives a description like the
/// original.
pub fn status_flags(f: &engine::OpenFlags) -> c_int {
    if f.path {
        return libc::O_PATH | if f.nofollow { libc::O_NOFOLLOW } else { 0 };
    }
    let mut v = match (f.read, f.write) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    if f.append {
        v |= libc::O_APPEND;
    }
    if f.sync {
        v |= libc::O_SYNC;
    } else if f.dsync {
        v |= libc::O_DSYNC;
    }
    if f.directory {
        v |= libc::O_DIRECTORY;
    }
    if f.nofollow {
        v |= libc::O_NOFOLLOW;
    }
    if f.tmpfile {
        // libc's O_TMPFILE carries O_DIRECTORY, as Linux's does.
        v |= libc::O_TMPFILE;
    }
    v
}

/// lseek(2)'s whence.
pub fn whence(w: c_int) -> Result<Whence, Errno> {
    match w {
        libc::SEEK_SET => Ok(Whence::Set),
        libc::SEEK_CUR => Ok(Whence::Cur),
        libc::SEEK_END => Ok(Whence::End),
        libc::SEEK_DATA => Ok(Whence::Data),
        libc::SEEK_HOLE => Ok(Whence::Hole),
        _ => Err(Errno::EINVAL),
    }
}

/// Copy `value` into a caller's buffer of `size` bytes as the xattr and
/// readlink calls do: `size` 0 asks for the length; too small is ERANGE.
pub fn copy_out(value: &[u8], buf: *mut u8, size: usize) -> Result<isize, Errno> {
    if size == 0 {
        return Ok(value.len() as isize);
    }
    if value.len() > size {
        return Err(Errno::ERANGE);
    }
    if buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller gave a buffer of `size` >= value.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), buf, value.len()) };
    Ok(value.len() as isize)
}

/// listxattr's answer: the names, each NUL-terminated, one after another.
pub fn xattr_list(names: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(n);
        out.push(0);
    }
    out
}

/// A C string as bytes (without the NUL); EFAULT for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the result.
pub unsafe fn cstr<'a>(p: *const libc::c_char) -> Result<&'a [u8], Errno> {
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: as the caller promises.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}
