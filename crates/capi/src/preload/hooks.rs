//! The interposed C library functions. Each one serves the call from the
//! engine when it names the pool (a path under the root, a Ferrite
//! descriptor) and otherwise calls the C library's own definition,
//! unchanged. Failures are `-1` + `errno` (or the error number, for the
//! `posix_*` calls that return one), exactly as the C library reports them.
//!
//! On `unsafe`: these functions are the C ABI, so their arguments are raw
//! pointers whose validity is the caller's contract, as for the C library
//! functions they stand for. The blocks that only pass the caller's
//! arguments on (to the C library's definition through `real`, or into the
//! slice and C-string views `buf`, `buf_mut`, `cstr`, after the NULL and
//! impossible-address checks of `bad_buffer`) are sound exactly when the
//! caller's call is, and are not commented one by one; every other block
//! says why it is sound.

#![allow(clippy::missing_safety_doc)]

use super::paths::Route;
use super::{active, bad_buffer, c_ret, fd, inside, is_ferrite, ok0, process_ids, Preload};
use crate::conv::{self, copy_out, cstr, fail, fill_stat, fill_statfs, fill_statvfs, fill_statx, xattr_list};
use crate::real::{self, Off};
use engine::{Errno, Fd, FsResult, PathFs, Stat, TimeSet, AT_FDCWD};
use ferrite_fuse::Changed;
use libc::{c_char, c_int, c_uint, c_void, mode_t, off_t};
use std::borrow::Cow;
use std::sync::atomic::Ordering;

const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());
const _: () = assert!(std::mem::size_of::<libc::statfs>() == std::mem::size_of::<libc::statfs64>());
const _: () = assert!(std::mem::size_of::<libc::statvfs>() == std::mem::size_of::<libc::statvfs64>());

/// The pool's route for a path call, if it is the pool's.
#[inline]
unsafe fn pool<'a>(dirfd: c_int, path: *const c_char) -> Option<(&'static Preload, Fd, Cow<'a, [u8]>)> {
    let p = active()?;
    // SAFETY: a path argument is NULL or a C string (NULL goes to the
    // C library, which answers EFAULT).
    let bytes: &'a [u8] = unsafe { cstr(path) }.ok()?;
    match p.route(dirfd, bytes) {
        Route::Pool(d, rel) => Some((p, d, rel)),
        Route::Kernel => None,
    }
}

/// The library's state if `fd` is a Ferrite descriptor.
#[inline]
fn ours(fd: c_int) -> Option<&'static Preload> {
    if is_ferrite(fd) {
        active()
    } else {
        None
    }
}

/// A kernel call returned descriptor `k`: if the kernel reused a number we
/// still took for a Ferrite descriptor (closed behind our back, by a raw
/// system call), forget that stale one.
fn kernel_fd(k: c_int) -> c_int {
    // The library's own opens: on its own code paths, and in the FUSE
    // threads (fuser opens a /dev/fuse clone per worker).
    if super::is_inside() || super::in_mount_thread() {
        // The library's own open (the pool, /dev/fuse): out of the way.
        return super::park(k);
    }
    if k >= 0 && is_ferrite(k) {
        if let Some(p) = active() {
            let _ = inside(|| p.session.close(fd(k)));
            p.forget(k);
        }
    }
    k
}

// ---- open and close ------------------------------------------------------------

unsafe fn open_common(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> Option<c_int> {
    let (p, d, rel) = unsafe { pool(dirfd, path) }?;
    match p.open(d, &rel, flags, mode) {
        // A FIFO, socket or device node: the engine has no pipe or driver
        // behind it, the kernel has, through this process's mount.
        Err(e) if e == Errno::ENXIO => match p.open_special(d, &rel, flags, mode) {
            Some(k) => Some(kernel_fd(k)),
            None => Some(fail(e)),
        },
        r => Some(c_ret(r)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    if let Some(r) = unsafe { open_common(libc::AT_FDCWD, path, flags, mode) } {
        return r;
    }
    kernel_fd(unsafe { real::open(path, flags, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    if let Some(r) = unsafe { open_common(libc::AT_FDCWD, path, flags, mode) } {
        return r;
    }
    kernel_fd(unsafe { real::open64(path, flags, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    if let Some(r) = unsafe { open_common(libc::AT_FDCWD, path, flags, 0) } {
        return r;
    }
    kernel_fd(unsafe { real::__open_2(path, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    if let Some(r) = unsafe { open_common(libc::AT_FDCWD, path, flags, 0) } {
        return r;
    }
    kernel_fd(unsafe { real::__open64_2(path, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    if let Some(r) = unsafe { open_common(dirfd, path, flags, mode) } {
        return r;
    }
    kernel_fd(unsafe { real::openat(dirfd, path, flags, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    if let Some(r) = unsafe { open_common(dirfd, path, flags, mode) } {
        return r;
    }
    kernel_fd(unsafe { real::openat64(dirfd, path, flags, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if let Some(r) = unsafe { open_common(dirfd, path, flags, 0) } {
        return r;
    }
    kernel_fd(unsafe { real::__openat_2(dirfd, path, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if let Some(r) = unsafe { open_common(dirfd, path, flags, 0) } {
        return r;
    }
    kernel_fd(unsafe { real::__openat64_2(dirfd, path, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { open64(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn close(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(p.close(n));
    }
    if super::is_own(n) {
        if super::is_inside() || super::in_mount_thread() {
            // The library closing its own: a mount's thread ending, say,
            // closes its /dev/fuse clone or its ring.
            super::unpark(n);
        } else {
            // A program closing every descriptor it does not know (before
            // an exec, say) must not take the pool's lock or the mount away.
            return 0;
        }
    }
    unsafe { real::close(n) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if let Some(p) = active() {
        let mine: Vec<c_int> =
            p.numbers().into_iter().filter(|&n| n as c_uint >= first && n as c_uint <= last).collect();
        for n in mine {
            if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
                let _ = inside(|| p.session.set_cloexec(fd(n), true));
            } else {
                let _ = p.close(n);
            }
        }
    }
    // The library's own descriptors stay open: close around them.
    let mut own: Vec<c_uint> = super::own_in(first, last).into_iter().map(|n| n as c_uint).collect();
    own.sort_unstable();
    let mut lo = first;
    for n in own {
        if n > lo {
            let r = unsafe { real::close_range(lo, n - 1, flags) };
            if r != 0 {
                return r;
            }
        }
        lo = n.saturating_add(1);
        if n == c_uint::MAX {
            return 0;
        }
    }
    if lo > last {
        return 0;
    }
    unsafe { real::close_range(lo, last, flags) }
}

// ---- reading and writing ---------------------------------------------------------

/// A caller's buffer as a slice (empty for a zero length, which may come
/// with any pointer).
unsafe fn buf_mut<'a>(b: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the caller passed a writable buffer of `n` bytes (checked
    // against NULL and impossible addresses before).
    unsafe { std::slice::from_raw_parts_mut(b as *mut u8, n) }
}

unsafe fn buf<'a>(b: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: as above, readable.
    unsafe { std::slice::from_raw_parts(b as *const u8, n) }
}

fn efault<T: conv::FailValue>() -> T {
    fail(Errno(libc::EFAULT))
}

/// read(2) on a Ferrite descriptor, through the mapped shadow when the
/// file has a writable shared mapping.
unsafe fn ferrite_read(p: &Preload, n: c_int, b: *mut c_void, len: usize, off: Option<u64>) -> isize {
    if bad_buffer(b as *const u8, len) {
        return efault();
    }
    let out = unsafe { buf_mut(b, len) };
    c_ret(inside(|| {
        super::mmap::before_io(p, n);
        let got = match off {
            Some(o) => p.session.pread(fd(n), out, o),
            None => p.session.read(fd(n), out),
        }?;
        Ok(got as isize)
    }))
}

unsafe fn ferrite_write(p: &Preload, n: c_int, b: *const c_void, len: usize, off: Option<u64>) -> isize {
    if bad_buffer(b as *const u8, len) {
        return efault();
    }
    let data = unsafe { buf(b, len) };
    c_ret(inside(|| {
        let put = super::mmap::change(
            p,
            n,
            || match off {
                Some(o) => p.session.pwrite(fd(n), data, o),
                None => p.session.write(fd(n), data),
            },
            |&put| {
                // The range written: from the offset given, or up to where
                // the descriptor's position now is (O_APPEND included).
                let at = match off {
                    Some(o) => Some(o),
                    None => p.session.lseek(fd(n), 0, engine::Whence::Cur).ok().map(|end| end - put as u64),
                };
                at.map_or(Changed::Whole, |offset| Changed::Range { offset, len: put as u64 })
            },
        )?;
        Ok(put as isize)
    }))
}

fn offset(off: i64) -> Result<u64, Errno> {
    if off < 0 {
        Err(Errno::EINVAL)
    } else {
        Ok(off as u64)
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(n: c_int, b: *mut c_void, len: usize) -> isize {
    if let Some(p) = ours(n) {
        return unsafe { ferrite_read(p, n, b, len, None) };
    }
    unsafe { real::read(n, b, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(n: c_int, b: *mut c_void, len: usize, buflen: usize) -> isize {
    if let Some(p) = ours(n) {
        if len > buflen {
            return efault();
        }
        return unsafe { ferrite_read(p, n, b, len, None) };
    }
    unsafe { real::__read_chk(n, b, len, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn write(n: c_int, b: *const c_void, len: usize) -> isize {
    if let Some(p) = ours(n) {
        return unsafe { ferrite_write(p, n, b, len, None) };
    }
    unsafe { real::write(n, b, len) }
}

macro_rules! pread_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, b: *mut c_void, len: usize, off: $ot) -> isize {
            if let Some(p) = ours(n) {
                return match offset(off as i64) {
                    Ok(o) => unsafe { ferrite_read(p, n, b, len, Some(o)) },
                    Err(e) => fail(e),
                };
            }
            unsafe { real::$name(n, b, len, off) }
        }
    )*};
}
pread_hooks!(pread(off_t), pread64(Off));

macro_rules! pread_chk_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, b: *mut c_void, len: usize, off: $ot, buflen: usize) -> isize {
            if let Some(p) = ours(n) {
                if len > buflen {
                    return efault();
                }
                return match offset(off as i64) {
                    Ok(o) => unsafe { ferrite_read(p, n, b, len, Some(o)) },
                    Err(e) => fail(e),
                };
            }
            unsafe { real::$name(n, b, len, off, buflen) }
        }
    )*};
}
pread_chk_hooks!(__pread_chk(off_t), __pread64_chk(Off));

macro_rules! pwrite_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, b: *const c_void, len: usize, off: $ot) -> isize {
            if let Some(p) = ours(n) {
                return match offset(off as i64) {
                    Ok(o) => unsafe { ferrite_write(p, n, b, len, Some(o)) },
                    Err(e) => fail(e),
                };
            }
            unsafe { real::$name(n, b, len, off) }
        }
    )*};
}
pwrite_hooks!(pwrite(off_t), pwrite64(Off));

/// The iovec array as (pointer, length) pairs; EINVAL for a bad count or
/// a total past isize::MAX, EFAULT for a bad array.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(Errno::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    if bad_buffer(iov as *const u8, cnt as usize * std::mem::size_of::<libc::iovec>()) {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller passed `cnt` iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total: usize = 0;
    for e in v {
        total = total.checked_add(e.iov_len).filter(|&t| t <= isize::MAX as usize).ok_or(Errno::EINVAL)?;
        if bad_buffer(e.iov_base as *const u8, e.iov_len) {
            return Err(Errno(libc::EFAULT));
        }
    }
    Ok(v)
}

/// readv/preadv: one read into a buffer, scattered (one engine call, so
/// the bytes come from one moment of the file).
unsafe fn ferrite_readv(p: &Preload, n: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<u64>) -> isize {
    let v = match unsafe { iovecs(iov, cnt) } {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let total: usize = v.iter().map(|e| e.iov_len).sum();
    let mut tmp = vec![0u8; total];
    let got = c_ret(inside(|| {
        super::mmap::before_io(p, n);
        let got = match off {
            Some(o) => p.session.pread(fd(n), &mut tmp, o),
            None => p.session.read(fd(n), &mut tmp),
        }?;
        Ok(got as isize)
    }));
    if got <= 0 {
        return got;
    }
    let mut done = 0usize;
    for e in v {
        if done >= got as usize {
            break;
        }
        let k = e.iov_len.min(got as usize - done);
        // SAFETY: each iovec is a writable buffer of iov_len bytes.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr().add(done), e.iov_base as *mut u8, k) };
        done += k;
    }
    got
}

/// writev/pwritev: gathered into one write, so it is one atomic operation.
unsafe fn ferrite_writev(p: &Preload, n: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<u64>) -> isize {
    let v = match unsafe { iovecs(iov, cnt) } {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let mut tmp = Vec::with_capacity(v.iter().map(|e| e.iov_len).sum());
    for e in v {
        tmp.extend_from_slice(unsafe { buf(e.iov_base, e.iov_len) });
    }
    unsafe { ferrite_write(p, n, tmp.as_ptr().cast(), tmp.len(), off) }
}

#[no_mangle]
pub unsafe extern "C" fn readv(n: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    if let Some(p) = ours(n) {
        return unsafe { ferrite_readv(p, n, iov, cnt, None) };
    }
    unsafe { real::readv(n, iov, cnt) }
}

#[no_mangle]
pub unsafe extern "C" fn writev(n: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    if let Some(p) = ours(n) {
        return unsafe { ferrite_writev(p, n, iov, cnt, None) };
    }
    unsafe { real::writev(n, iov, cnt) }
}

macro_rules! vec_hooks {
    ($($name:ident, $f:ident ($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, iov: *const libc::iovec, cnt: c_int, off: $ot) -> isize {
            if let Some(p) = ours(n) {
                return match offset(off as i64) {
                    Ok(o) => unsafe { $f(p, n, iov, cnt, Some(o)) },
                    Err(e) => fail(e),
                };
            }
            unsafe { real::$name(n, iov, cnt, off) }
        }
    )*};
}
vec_hooks!(
    preadv,
    ferrite_readv(off_t),
    preadv64,
    ferrite_readv(Off),
    pwritev,
    ferrite_writev(off_t),
    pwritev64,
    ferrite_writev(Off)
);

macro_rules! vec2_hooks {
    ($($name:ident, $f:ident ($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, iov: *const libc::iovec, cnt: c_int, off: $ot, flags: c_int) -> isize {
            if let Some(p) = ours(n) {
                // Every RWF_* flag is a hint or already true here (writes are
                // durable on return); -1 means the current position.
                return match off as i64 {
                    -1 => unsafe { $f(p, n, iov, cnt, None) },
                    o => match offset(o) {
                        Ok(o) => unsafe { $f(p, n, iov, cnt, Some(o)) },
                        Err(e) => fail(e),
                    },
                };
            }
            unsafe { real::$name(n, iov, cnt, off, flags) }
        }
    )*};
}
vec2_hooks!(
    preadv2,
    ferrite_readv(off_t),
    preadv64v2,
    ferrite_readv(Off),
    pwritev2,
    ferrite_writev(off_t),
    pwritev64v2,
    ferrite_writev(Off)
);

macro_rules! lseek_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, off: $ot, whence: c_int) -> $ot {
            if let Some(p) = ours(n) {
                return c_ret(inside(|| {
                    let w = conv::whence(whence)?;
                    let f = p.session.open_file(fd(n))?;
                    if f.inode.kind == engine::FileType::Directory {
                        return super::dirs::seek_dir(p, n, off as i64, w).map(|v| v as $ot);
                    }
                    p.session.lseek(fd(n), off as i64, w).map(|v| v as $ot)
                }));
            }
            unsafe { real::$name(n, off, whence) }
        }
    )*};
}
lseek_hooks!(lseek(off_t), lseek64(Off));

// ---- attributes --------------------------------------------------------------------

/// Store `st` at a caller's `struct stat` pointer.
unsafe fn put_stat<T>(st: FsResult<Stat>, out: *mut T) -> c_int {
    match st {
        Ok(s) => {
            if bad_buffer(out as *const u8, std::mem::size_of::<libc::stat64>()) {
                return efault();
            }
            // SAFETY: `out` points to a struct stat (== stat64 here).
            fill_stat(&s, unsafe { &mut *(out as *mut libc::stat64) });
            0
        }
        Err(e) => fail(e),
    }
}

unsafe fn stat_path<T>(dirfd: c_int, path: *const c_char, out: *mut T, flags: c_int) -> Option<c_int> {
    let (p, d, rel) = unsafe { pool(dirfd, path) }?;
    Some(unsafe { put_stat(inside(|| p.session.fstatat(d, &rel, flags)), out) })
}

macro_rules! stat_hooks {
    ($($name:ident($st:ty, $flags:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut $st) -> c_int {
            if let Some(r) = unsafe { stat_path(libc::AT_FDCWD, path, out, $flags) } {
                return r;
            }
            unsafe { real::$name(path, out) }
        }
    )*};
}
stat_hooks!(
    stat(libc::stat, 0),
    stat64(libc::stat64, 0),
    lstat(libc::stat, libc::AT_SYMLINK_NOFOLLOW),
    lstat64(libc::stat64, libc::AT_SYMLINK_NOFOLLOW)
);

macro_rules! xstat_hooks {
    ($($name:ident($st:ty, $flags:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, out: *mut $st) -> c_int {
            if let Some(r) = unsafe { stat_path(libc::AT_FDCWD, path, out, $flags) } {
                return r;
            }
            unsafe { real::$name(ver, path, out) }
        }
    )*};
}
xstat_hooks!(
    __xstat(libc::stat, 0),
    __xstat64(libc::stat64, 0),
    __lxstat(libc::stat, libc::AT_SYMLINK_NOFOLLOW),
    __lxstat64(libc::stat64, libc::AT_SYMLINK_NOFOLLOW)
);

macro_rules! fstat_hooks {
    ($($name:ident($st:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, out: *mut $st) -> c_int {
            if let Some(p) = ours(n) {
                return unsafe { put_stat(inside(|| p.session.fstat(fd(n))), out) };
            }
            unsafe { real::$name(n, out) }
        }
    )*};
}
fstat_hooks!(fstat(libc::stat), fstat64(libc::stat64));

macro_rules! fxstat_hooks {
    ($($name:ident($st:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, n: c_int, out: *mut $st) -> c_int {
            if let Some(p) = ours(n) {
                return unsafe { put_stat(inside(|| p.session.fstat(fd(n))), out) };
            }
            unsafe { real::$name(ver, n, out) }
        }
    )*};
}
fxstat_hooks!(__fxstat(libc::stat), __fxstat64(libc::stat64));

/// fstatat with AT_EMPTY_PATH on a Ferrite descriptor, or a pool path.
unsafe fn fstatat_common<T>(dirfd: c_int, path: *const c_char, out: *mut T, flags: c_int) -> Option<c_int> {
    if is_ferrite(dirfd) {
        let p = active()?;
        let rel = unsafe { cstr(path) }.ok()?;
        if rel.is_empty() {
            return Some(unsafe { put_stat(inside(|| p.session.fstatat(fd(dirfd), b"", flags)), out) });
        }
    }
    unsafe { stat_path(dirfd, path, out, flags) }
}

macro_rules! fstatat_hooks {
    ($($name:ident($st:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, out: *mut $st, flags: c_int) -> c_int {
            if let Some(r) = unsafe { fstatat_common(dirfd, path, out, flags) } {
                return r;
            }
            unsafe { real::$name(dirfd, path, out, flags) }
        }
    )*};
}
fstatat_hooks!(fstatat(libc::stat), fstatat64(libc::stat64));

macro_rules! fxstatat_hooks {
    ($($name:ident($st:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, dirfd: c_int, path: *const c_char, out: *mut $st, flags: c_int) -> c_int {
            if let Some(r) = unsafe { fstatat_common(dirfd, path, out, flags) } {
                return r;
            }
            unsafe { real::$name(ver, dirfd, path, out, flags) }
        }
    )*};
}
fxstatat_hooks!(__fxstatat(libc::stat), __fxstatat64(libc::stat64));

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut libc::statx,
) -> c_int {
    let st = if is_ferrite(dirfd) && unsafe { cstr(path) }.map(|r| r.is_empty()).unwrap_or(false) {
        active().map(|p| {
            inside(|| p.session.fstatat(fd(dirfd), b"", flags & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)))
        })
    } else {
        unsafe { pool(dirfd, path) }.map(|(p, d, rel)| {
            inside(|| p.session.fstatat(d, &rel, flags & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)))
        })
    };
    match st {
        Some(Ok(s)) => {
            if bad_buffer(out as *const u8, std::mem::size_of::<libc::statx>()) {
                return efault();
            }
            // SAFETY: `out` points to a struct statx.
            fill_statx(&s, unsafe { &mut *out });
            0
        }
        Some(Err(e)) => fail(e),
        None => unsafe { real::statx(dirfd, path, flags, mask, out) },
    }
}

// ---- descriptor flags, locks, duplicates ------------------------------------------------

/// F_GETFL's word for a Ferrite description (O_LARGEFILE is always set on
/// 64-bit Linux).
fn getfl(p: &Preload, n: c_int) -> FsResult<c_int> {
    Ok(conv::status_flags(&p.session.getfl(fd(n))?) | libc::O_LARGEFILE)
}

/// A record lock request (`cmd` is F_GETLK, F_SETLK, F_SETLKW or their
/// OFD forms), after the checks Linux makes. With the mount, the lock is
/// taken on the description's lock descriptor (the same file through the
/// mount), so the kernel arbitrates it against other descriptions and
/// other processes; a SEEK_CUR start is made absolute first (the lock
/// descriptor has an offset of its own). Without a mount every lock is
/// granted: nothing else can reach the pool, and POSIX locks of one
/// process never conflict.
fn lock_request(p: &Preload, n: c_int, cmd: c_int, arg: usize) -> FsResult<c_int> {
    let fl = arg as *mut libc::flock;
    if bad_buffer(fl as *const u8, std::mem::size_of::<libc::flock>()) {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: `arg` points to a struct flock (checked above).
    let l = unsafe { &mut *fl };
    let f = p.session.getfl(fd(n))?;
    if f.path {
        return Err(Errno::EBADF);
    }
    let get = cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK;
    match l.l_type as c_int {
        libc::F_RDLCK if !get && !f.read => return Err(Errno::EBADF),
        libc::F_WRLCK if !get && !f.write => return Err(Errno::EBADF),
        libc::F_RDLCK | libc::F_WRLCK | libc::F_UNLCK => {}
        _ => return Err(Errno::EINVAL),
    }
    let posix = matches!(cmd, libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW);
    let Some(k) = p.lock_fd(n, posix) else {
        if get {
            l.l_type = libc::F_UNLCK as _;
        }
        return Ok(0);
    };
    if l.l_whence as c_int == libc::SEEK_CUR {
        let pos = *p.session.open_file(fd(n))?.pos.lock();
        l.l_start = l.l_start.checked_add(pos as i64).ok_or(Errno::EOVERFLOW)?;
        l.l_whence = libc::SEEK_SET as _;
    }
    // SAFETY: fcntl on the library's lock descriptor with the caller's
    // struct flock.
    let r = unsafe { real::fcntl(k, cmd, arg) };
    if r < 0 {
        return Err(Errno(conv::errno()));
    }
    Ok(r)
}

unsafe fn ferrite_fcntl(p: &Preload, n: c_int, cmd: c_int, arg: usize) -> c_int {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let k = unsafe { real::fcntl(n, cmd, arg) };
            if k < 0 {
                return k;
            }
            p.share(n, k, cmd == libc::F_DUPFD_CLOEXEC)
        }
        libc::F_GETFD => unsafe { real::fcntl(n, cmd, arg) },
        libc::F_SETFD => {
            let r = unsafe { real::fcntl(n, cmd, arg) };
            if r == 0 {
                let _ = inside(|| p.session.set_cloexec(fd(n), arg as c_int & libc::FD_CLOEXEC != 0));
            }
            r
        }
        libc::F_GETFL => c_ret(inside(|| getfl(p, n))),
        libc::F_SETFL => ok0(inside(|| p.session.setfl_append(fd(n), arg as c_int & libc::O_APPEND != 0))),
        libc::F_GETLK | libc::F_OFD_GETLK | libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
            c_ret(inside(|| lock_request(p, n, cmd, arg)))
        }
        _ => fail(Errno::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(n: c_int, cmd: c_int, arg: usize) -> c_int {
    if let Some(p) = ours(n) {
        return unsafe { ferrite_fcntl(p, n, cmd, arg) };
    }
    let r = unsafe { real::fcntl(n, cmd, arg) };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        return kernel_fd(r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(n: c_int, cmd: c_int, arg: usize) -> c_int {
    unsafe { fcntl(n, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn flock(n: c_int, op: c_int) -> c_int {
    if let Some(p) = ours(n) {
        return c_ret(inside(|| {
            p.session.fstat(fd(n))?;
            match op & !libc::LOCK_NB {
                libc::LOCK_SH | libc::LOCK_EX | libc::LOCK_UN => {}
                _ => return Err(Errno::EINVAL),
            }
            // Taken on the description's lock descriptor, where there is one
            // (see lock_request).
            let Some(k) = p.lock_fd(n, false) else { return Ok(0) };
            // SAFETY: flock on the library's lock descriptor.
            if unsafe { real::flock(k, op) } < 0 {
                return Err(Errno(conv::errno()));
            }
            Ok(0)
        }));
    }
    unsafe { real::flock(n, op) }
}

macro_rules! lockf_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, cmd: c_int, len: $ot) -> c_int {
            if let Some(p) = ours(n) {
                // lockf is a POSIX write lock from the current position.
                let (ty, fcmd) = match cmd {
                    libc::F_TEST => (libc::F_WRLCK, libc::F_GETLK),
                    libc::F_LOCK => (libc::F_WRLCK, libc::F_SETLKW),
                    libc::F_TLOCK => (libc::F_WRLCK, libc::F_SETLK),
                    libc::F_ULOCK => (libc::F_UNLCK, libc::F_SETLK),
                    _ => return fail(Errno::EINVAL),
                };
                // SAFETY: an all-integer structure.
                let mut l: libc::flock = unsafe { std::mem::zeroed() };
                l.l_type = ty as _;
                l.l_whence = libc::SEEK_CUR as _;
                l.l_start = 0;
                l.l_len = len as _;
                return c_ret(inside(|| {
                    let f = p.session.getfl(fd(n))?;
                    if f.path || !f.write {
                        return Err(Errno::EBADF);
                    }
                    lock_request(p, n, fcmd, &mut l as *mut libc::flock as usize)?;
                    if cmd == libc::F_TEST && l.l_type as c_int != libc::F_UNLCK {
                        // Locked by another process (lockf's F_TEST answers so).
                        return Err(Errno::EACCES);
                    }
                    Ok(0)
                }));
            }
            unsafe { real::$name(n, cmd, len) }
        }
    )*};
}
lockf_hooks!(lockf(off_t), lockf64(Off));

impl Preload {
    /// Kernel number `k` was just made a duplicate of Ferrite descriptor
    /// `n`: make it share `n`'s open file description.
    pub fn share(&self, n: c_int, k: c_int, cloexec: bool) -> c_int {
        match inside(|| self.session.dup3(fd(n), fd(k), cloexec)) {
            Ok(_) => {
                self.adopt(k, self.path_of(n).unwrap_or_default());
                k
            }
            Err(e) => {
                // SAFETY: closing the number the kernel just gave us.
                unsafe { real::close(k) };
                fail(e)
            }
        }
    }

    /// Every Ferrite descriptor number of this process.
    pub fn numbers(&self) -> Vec<c_int> {
        self.files.lock().keys().copied().collect()
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        let k = unsafe { real::dup(n) };
        if k < 0 {
            return k;
        }
        return p.share(n, k, false);
    }
    kernel_fd(unsafe { real::dup(n) })
}

/// dup2/dup3 when either side may be Ferrite's.
unsafe fn dup_to(n: c_int, new: c_int, flags: c_int, is_dup2: bool) -> c_int {
    let p = match active() {
        Some(p) if is_ferrite(n) || is_ferrite(new) => p,
        _ => {
            return if is_dup2 { unsafe { real::dup2(n, new) } } else { unsafe { real::dup3(n, new, flags) } };
        }
    };
    if n == new {
        if !is_dup2 {
            return fail(Errno::EINVAL);
        }
        return if is_ferrite(n) { new } else { unsafe { real::dup2(n, new) } };
    }
    if is_ferrite(n) && !is_ferrite(new) {
        super::stdio::standard_replacing(new);
    }
    let k = if is_dup2 { unsafe { real::dup2(n, new) } } else { unsafe { real::dup3(n, new, flags) } };
    if k < 0 {
        return k;
    }
    if is_ferrite(n) {
        // The engine replaces what `new` held (a Ferrite description is
        // released there).
        super::mmap::release_fd(p, new);
        return p.share(n, new, flags & libc::O_CLOEXEC != 0);
    }
    // A kernel file now sits at a number that was Ferrite's.
    super::mmap::release_fd(p, new);
    let _ = inside(|| p.session.close(fd(new)));
    p.forget(new);
    k
}

#[no_mangle]
pub unsafe extern "C" fn dup2(n: c_int, new: c_int) -> c_int {
    unsafe { dup_to(n, new, 0, true) }
}

#[no_mangle]
pub unsafe extern "C" fn dup3(n: c_int, new: c_int, flags: c_int) -> c_int {
    unsafe { dup_to(n, new, flags, false) }
}

// ---- durability, size, space ------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn fsync(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            super::mmap::write_back(p, n)?;
            p.session.fsync(fd(n))
        }));
    }
    unsafe { real::fsync(n) }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            super::mmap::write_back(p, n)?;
            p.session.fdatasync(fd(n))
        }));
    }
    unsafe { real::fdatasync(n) }
}

/// sync_file_range: Linux promises no durability from it (no metadata, no
/// disk cache flush), so it is not a commit point of an fsync-atomic file,
/// whose pending writes stay pending until its fsync; a strict file is
/// durable already. Only the arguments are checked.
#[no_mangle]
pub unsafe extern "C" fn sync_file_range(n: c_int, off: Off, len: Off, flags: c_uint) -> c_int {
    if let Some(p) = ours(n) {
        if off < 0 || len < 0 {
            return fail(Errno::EINVAL);
        }
        return ok0(inside(|| p.session.getfl(fd(n))).and_then(|f| if f.path { Err(Errno::EBADF) } else { Ok(()) }));
    }
    unsafe { real::sync_file_range(n, off, len, flags) }
}

/// sync: the commit point of every fsync-atomic file of the pool (after
/// writing back the shadows of shared mappings), then the kernel's sync
/// for everything else.
#[no_mangle]
pub unsafe extern "C" fn sync() {
    if let Some(p) = super::active() {
        let _ = inside(|| {
            super::mmap::write_back_all(p)?;
            p.session.sync_all()
        });
    }
    unsafe { real::sync() }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            super::mmap::write_back_all(p)?;
            p.session.sync_all()
        }));
    }
    unsafe { real::syncfs(n) }
}

macro_rules! truncate_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, len: $ot) -> c_int {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return ok0(inside(|| {
                    let len = offset(len as i64)?;
                    if d == AT_FDCWD {
                        // Shared mappings of the file follow the truncate,
                        // as they follow an ftruncate.
                        let mapped = if super::mmap::following_any() { p.session.stat(&rel).ok() } else { None };
                        match &mapped {
                            Some(st) => super::mmap::change_by_path(
                                p,
                                st.ino,
                                || p.session.truncate(&rel, len),
                                |_| Changed::Whole,
                            ),
                            None => p.session.truncate(&rel, len),
                        }
                    } else {
                        Err(Errno::EINVAL)
                    }
                }));
            }
            unsafe { real::$name(path, len) }
        }
    )*};
}
truncate_hooks!(truncate(off_t), truncate64(Off));

macro_rules! ftruncate_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, len: $ot) -> c_int {
            if let Some(p) = ours(n) {
                return ok0(inside(|| {
                    let len = offset(len as i64)?;
                    super::mmap::change(p, n, || p.session.ftruncate(fd(n), len), |_| Changed::Whole)
                }));
            }
            unsafe { real::$name(n, len) }
        }
    )*};
}
ftruncate_hooks!(ftruncate(off_t), ftruncate64(Off));

macro_rules! fallocate_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, mode: c_int, off: $ot, len: $ot) -> c_int {
            if let Some(p) = ours(n) {
                return ok0(inside(|| {
                    if off < 0 || len <= 0 {
                        return Err(Errno::EINVAL);
                    }
                    let how = engine::FallocateMode::from_libc(mode)?;
                    super::mmap::change(
                        p,
                        n,
                        || p.session.fallocate(fd(n), how, off as u64, len as u64),
                        |_| Changed::Whole,
                    )
                }));
            }
            unsafe { real::$name(n, mode, off, len) }
        }
    )*};
}
fallocate_hooks!(fallocate(off_t), fallocate64(Off));

macro_rules! posix_fallocate_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, off: $ot, len: $ot) -> c_int {
            if let Some(p) = ours(n) {
                // posix_fallocate returns the error number and leaves errno.
                let r = inside(|| {
                    if off < 0 || len <= 0 {
                        return Err(Errno::EINVAL);
                    }
                    p.session.fallocate(fd(n), engine::FallocateMode::Default, off as u64, len as u64)
                });
                return match r {
                    Ok(()) => 0,
                    Err(e) => e.0,
                };
            }
            unsafe { real::$name(n, off, len) }
        }
    )*};
}
posix_fallocate_hooks!(posix_fallocate(off_t), posix_fallocate64(Off));

macro_rules! fadvise_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(n: c_int, off: $ot, len: $ot, advice: c_int) -> c_int {
            if let Some(p) = ours(n) {
                // Advice changes nothing here (there is no page cache); the
                // checks are Linux's, and the error is returned, not set.
                let r = inside(|| {
                    p.session.fstat(fd(n))?;
                    if len < 0 || !(0..=5).contains(&advice) {
                        return Err(Errno::EINVAL);
                    }
                    let _ = off;
                    Ok(())
                });
                return match r {
                    Ok(()) => 0,
                    Err(e) => e.0,
                };
            }
            unsafe { real::$name(n, off, len, advice) }
        }
    )*};
}
fadvise_hooks!(posix_fadvise(off_t), posix_fadvise64(Off));

// ---- the name space ---------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.unlinkat(d, &rel, 0)));
    }
    unsafe { real::unlink(path) }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.unlinkat(d, &rel, flags)));
    }
    unsafe { real::unlinkat(dirfd, path, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.unlinkat(d, &rel, libc::AT_REMOVEDIR)));
    }
    unsafe { real::rmdir(path) }
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.mkdirat(d, &rel, mode & 0o7777)));
    }
    unsafe { real::mkdir(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.mkdirat(d, &rel, mode & 0o7777)));
    }
    unsafe { real::mkdirat(dirfd, path, mode) }
}

/// Two-path calls: both in the pool (served), both outside (the kernel),
/// or refused here: one of each (EXDEV, as between two file systems), or
/// NULL beside a path in the pool (EFAULT).
enum Pair<'a> {
    Pool(&'static Preload, Fd, Cow<'a, [u8]>, Fd, Cow<'a, [u8]>),
    Kernel,
    Refused(Errno),
}

unsafe fn pair<'a>(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char) -> Pair<'a> {
    let a = unsafe { pool(d1, p1) };
    let b = unsafe { pool(d2, p2) };
    match (a, b) {
        (Some((p, da, ra)), Some((_, db, rb))) => Pair::Pool(p, da, ra, db, rb),
        (None, None) => Pair::Kernel,
        // A NULL path is EFAULT whatever the other one names.
        _ if p1.is_null() || p2.is_null() => Pair::Refused(Errno(libc::EFAULT)),
        _ => Pair::Refused(Errno::EXDEV),
    }
}

unsafe fn rename_common(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char, flags: c_uint) -> Option<c_int> {
    match unsafe { pair(d1, p1, d2, p2) } {
        Pair::Pool(p, da, ra, db, rb) => Some(ok0(inside(|| {
            let f = conv::rename_flags(flags)?;
            p.session.renameat2(da, &ra, db, &rb, f)
        }))),
        Pair::Refused(e) => Some(fail(e)),
        Pair::Kernel => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    if let Some(r) = unsafe { rename_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0) } {
        return r;
    }
    unsafe { real::rename(old, new) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(d1: c_int, old: *const c_char, d2: c_int, new: *const c_char) -> c_int {
    if let Some(r) = unsafe { rename_common(d1, old, d2, new, 0) } {
        return r;
    }
    unsafe { real::renameat(d1, old, d2, new) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    d1: c_int,
    old: *const c_char,
    d2: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    if let Some(r) = unsafe { rename_common(d1, old, d2, new, flags) } {
        return r;
    }
    unsafe { real::renameat2(d1, old, d2, new, flags) }
}

/// The descriptor number a path names through the process's own
/// descriptor links (`/proc/self/fd/N`, `/proc/PID/fd/N` with this
/// process's id, `/dev/fd/N`), if it is one of the library's: the kernel
/// would follow that link to an O_PATH descriptor of /dev/null.
fn own_fd_link(path: &[u8]) -> Option<c_int> {
    let pid = format!("/proc/{}/fd/", std::process::id());
    let rest = [b"/proc/self/fd/".as_slice(), b"/proc/thread-self/fd/", b"/dev/fd/", pid.as_bytes()]
        .iter()
        .find_map(|prefix| path.strip_prefix(*prefix))?;
    if rest.is_empty() || rest.len() > 10 || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: c_int = std::str::from_utf8(rest).ok()?.parse().ok()?;
    is_ferrite(n).then_some(n)
}

/// Record the pool path a descriptor now has a name at, when it had none
/// (a file made by O_TMPFILE): its locks and a forked child's copy reopen
/// it through the mount by that path.
fn named(p: &Preload, n: c_int, dirfd: Fd, path: &[u8]) {
    if p.path_of(n).is_some_and(|old| old.is_empty()) {
        if let Some(full) = p.pool_path(dirfd, path) {
            p.adopt(n, std::sync::Arc::new(full));
        }
    }
}

unsafe fn link_common(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char, flags: c_int) -> Option<c_int> {
    // linkat(fd, "", ..., AT_EMPTY_PATH) names a Ferrite descriptor; so
    // does linkat(AT_FDCWD, "/proc/self/fd/N", ..., AT_SYMLINK_FOLLOW),
    // without the privilege AT_EMPTY_PATH needs (the kernel follows the
    // process's own descriptor link).
    let old = unsafe { cstr(p1) }.ok();
    let by_link = match old {
        Some(path)
            if flags & libc::AT_SYMLINK_FOLLOW != 0
                && flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) == 0 =>
        {
            own_fd_link(path)
        }
        _ => None,
    };
    let empty = is_ferrite(d1) && flags & libc::AT_EMPTY_PATH != 0 && old.is_some_and(|s| s.is_empty());
    if empty || by_link.is_some() {
        return match unsafe { pool(d2, p2) } {
            Some((p, db, rb)) => {
                let r = match by_link {
                    Some(n) => inside(|| p.session.link_fd(fd(n), db, &rb)).map(|()| n),
                    None => inside(|| p.session.linkat(fd(d1), b"", db, &rb, flags)).map(|()| d1),
                };
                Some(ok0(r.map(|n| named(p, n, db, &rb))))
            }
            None => Some(fail(Errno::EXDEV)),
        };
    }
    match unsafe { pair(d1, p1, d2, p2) } {
        Pair::Pool(p, da, ra, db, rb) => Some(ok0(inside(|| p.session.linkat(da, &ra, db, &rb, flags)))),
        Pair::Refused(e) => Some(fail(e)),
        Pair::Kernel => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    if let Some(r) = unsafe { link_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0) } {
        return r;
    }
    unsafe { real::link(old, new) }
}

#[no_mangle]
pub unsafe extern "C" fn linkat(d1: c_int, old: *const c_char, d2: c_int, new: *const c_char, flags: c_int) -> c_int {
    if let Some(r) = unsafe { link_common(d1, old, d2, new, flags) } {
        return r;
    }
    unsafe { real::linkat(d1, old, d2, new, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.symlinkat(unsafe { cstr(target) }?, d, &rel)));
    }
    unsafe { real::symlink(target, path) }
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.symlinkat(unsafe { cstr(target) }?, d, &rel)));
    }
    unsafe { real::symlinkat(target, dirfd, path) }
}

/// readlink: the target, truncated to the buffer, not NUL-terminated.
unsafe fn readlink_common(dirfd: c_int, path: *const c_char, b: *mut c_char, n: usize) -> Option<isize> {
    let empty = unsafe { cstr(path) }.map(|s| s.is_empty()).unwrap_or(false);
    let (p, d, rel) = if is_ferrite(dirfd) && empty {
        (active()?, fd(dirfd), Cow::Borrowed(&b""[..]))
    } else {
        unsafe { pool(dirfd, path) }?
    };
    Some(c_ret(inside(|| {
        let t = p.session.readlinkat(d, &rel)?;
        if n == 0 {
            return Err(Errno::EINVAL);
        }
        if bad_buffer(b as *const u8, n) {
            return Err(Errno(libc::EFAULT));
        }
        let k = t.len().min(n);
        // SAFETY: the caller's buffer holds `n` >= k bytes.
        unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), b as *mut u8, k) };
        Ok(k as isize)
    })))
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, b: *mut c_char, n: usize) -> isize {
    if let Some(r) = unsafe { readlink_common(libc::AT_FDCWD, path, b, n) } {
        return r;
    }
    unsafe { real::readlink(path, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(dirfd: c_int, path: *const c_char, b: *mut c_char, n: usize) -> isize {
    if let Some(r) = unsafe { readlink_common(dirfd, path, b, n) } {
        return r;
    }
    unsafe { real::readlinkat(dirfd, path, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(path: *const c_char, b: *mut c_char, n: usize, buflen: usize) -> isize {
    if let Some(r) = unsafe { readlink_common(libc::AT_FDCWD, path, b, n.min(buflen)) } {
        return r;
    }
    unsafe { real::__readlink_chk(path, b, n, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    b: *mut c_char,
    n: usize,
    buflen: usize,
) -> isize {
    if let Some(r) = unsafe { readlink_common(dirfd, path, b, n.min(buflen)) } {
        return r;
    }
    unsafe { real::__readlinkat_chk(dirfd, path, b, n, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.mknodat(d, &rel, mode, dev)));
    }
    unsafe { real::mknod(path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.mknodat(d, &rel, mode, dev)));
    }
    unsafe { real::mknodat(dirfd, path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.mknodat(d, &rel, libc::S_IFIFO | (mode & 0o7777), 0)));
    }
    unsafe { real::mkfifo(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.mknodat(d, &rel, libc::S_IFIFO | (mode & 0o7777), 0)));
    }
    unsafe { real::mkfifoat(dirfd, path, mode) }
}

// ---- permissions, owners, times ----------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.fchmodat(d, &rel, mode & 0o7777, 0)));
    }
    unsafe { real::chmod(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(n: c_int, mode: mode_t) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| p.session.fchmod(fd(n), mode & 0o7777)));
    }
    unsafe { real::fchmod(n, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.fchmodat(d, &rel, mode & 0o7777, flags)));
    }
    unsafe { real::fchmodat(dirfd, path, mode, flags) }
}

fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.fchownat(d, &rel, id(uid), id(gid), 0)));
    }
    unsafe { real::chown(path, uid, gid) }
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.fchownat(d, &rel, id(uid), id(gid), libc::AT_SYMLINK_NOFOLLOW)));
    }
    unsafe { real::lchown(path, uid, gid) }
}

#[no_mangle]
pub unsafe extern "C" fn fchown(n: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| p.session.fchown(fd(n), id(uid), id(gid))));
    }
    unsafe { real::fchown(n, uid, gid) }
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    let empty = unsafe { cstr(path) }.map(|s| s.is_empty()).unwrap_or(false);
    if is_ferrite(dirfd) && empty && flags & libc::AT_EMPTY_PATH != 0 {
        if let Some(p) = active() {
            return ok0(inside(|| p.session.fchownat(fd(dirfd), b"", id(uid), id(gid), flags)));
        }
    }
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| p.session.fchownat(d, &rel, id(uid), id(gid), flags)));
    }
    unsafe { real::fchownat(dirfd, path, uid, gid, flags) }
}

/// utimensat's `times` pair (NULL: both now).
unsafe fn times_pair(t: *const libc::timespec) -> FsResult<(TimeSet, TimeSet)> {
    if t.is_null() {
        return Ok((TimeSet::Now, TimeSet::Now));
    }
    if bad_buffer(t as *const u8, 2 * std::mem::size_of::<libc::timespec>()) {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: two timespecs, checked above.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    Ok((conv::time_set(Some(a))?, conv::time_set(Some(m))?))
}

unsafe fn timeval_pair(t: *const libc::timeval) -> FsResult<(TimeSet, TimeSet)> {
    if t.is_null() {
        return Ok((TimeSet::Now, TimeSet::Now));
    }
    if bad_buffer(t as *const u8, 2 * std::mem::size_of::<libc::timeval>()) {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: two timevals, checked above.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    Ok((conv::time_from_timeval(a)?, conv::time_from_timeval(m)?))
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(dirfd: c_int, path: *const c_char, t: *const libc::timespec, flags: c_int) -> c_int {
    // utimensat(fd, NULL, ...) is futimens.
    if path.is_null() && is_ferrite(dirfd) {
        return unsafe { futimens(dirfd, t) };
    }
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| {
            let (a, m) = unsafe { times_pair(t) }?;
            p.session.utimensat(d, &rel, a, m, flags)
        }));
    }
    unsafe { real::utimensat(dirfd, path, t, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn futimens(n: c_int, t: *const libc::timespec) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            let (a, m) = unsafe { times_pair(t) }?;
            p.session.futimens(fd(n), a, m)
        }));
    }
    unsafe { real::futimens(n, t) }
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, t: *const libc::timeval) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| {
            let (a, m) = unsafe { timeval_pair(t) }?;
            p.session.utimensat(d, &rel, a, m, 0)
        }));
    }
    unsafe { real::utimes(path, t) }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, t: *const libc::timeval) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| {
            let (a, m) = unsafe { timeval_pair(t) }?;
            p.session.utimensat(d, &rel, a, m, libc::AT_SYMLINK_NOFOLLOW)
        }));
    }
    unsafe { real::lutimes(path, t) }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(n: c_int, t: *const libc::timeval) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            let (a, m) = unsafe { timeval_pair(t) }?;
            p.session.futimens(fd(n), a, m)
        }));
    }
    unsafe { real::futimes(n, t) }
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(dirfd: c_int, path: *const c_char, t: *const libc::timeval) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| {
            let (a, m) = unsafe { timeval_pair(t) }?;
            p.session.utimensat(d, &rel, a, m, 0)
        }));
    }
    unsafe { real::futimesat(dirfd, path, t) }
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| {
            let (a, m) = if t.is_null() {
                (TimeSet::Now, TimeSet::Now)
            } else {
                // SAFETY: a utimbuf, checked against impossible addresses.
                if bad_buffer(t as *const u8, std::mem::size_of::<libc::utimbuf>()) {
                    return Err(Errno(libc::EFAULT));
                }
                // SAFETY: a utimbuf of the caller's, checked against NULL and
                // impossible addresses above.
                let u = unsafe { &*t };
                let at = |s| TimeSet::At(engine::TimeSpec { sec: s, nsec: 0 });
                (at(u.actime), at(u.modtime))
            };
            p.session.utimensat(d, &rel, a, m, 0)
        }));
    }
    unsafe { real::utime(path, t) }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| access_as_real(p, d, &rel, mode, 0)));
    }
    unsafe { real::access(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(dirfd, path) } {
        return ok0(inside(|| access_as_real(p, d, &rel, mode, flags)));
    }
    unsafe { real::faccessat(dirfd, path, mode, flags) }
}

/// `access`/`faccessat`: Linux checks with the real ids unless
/// `AT_EACCESS` asks for the effective ones (which the session holds). The
/// two differ only in a set-ID program or one that changed its effective
/// ids.
fn access_as_real(p: &Preload, d: Fd, rel: &[u8], mode: c_int, flags: c_int) -> FsResult<()> {
    let mut c = p.session.credentials();
    if flags & libc::AT_EACCESS == 0 {
        let real = p.real_ids.load(Ordering::Relaxed);
        c.uid = (real >> 32) as u32;
        c.gid = real as u32;
    }
    p.session.faccessat_as(d, rel, mode as u32, flags, &c)
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        return ok0(inside(|| p.session.faccessat(d, &rel, mode as u32, libc::AT_EACCESS)));
    }
    unsafe { real::euidaccess(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { euidaccess(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    // SAFETY: umask has no preconditions (libc's own definition is called
    // through the libc crate's binding, which is not this function).
    let old = unsafe { real_umask(mask) };
    if let Some(p) = active() {
        let mut c = p.session.credentials();
        c.umask = mask & 0o777;
        p.session.set_credentials(c);
    }
    old
}

/// The identity changes: each is the system call, then the session's
/// identity read back from the process, so that permission checks and new
/// files' owners follow a program that drops privileges (a daemon started
/// as root, `su`, a test switching users). Linux checks a file's
/// permissions against the file-system ids, which follow the effective ids
/// unless `setfsuid`/`setfsgid` set them apart.
macro_rules! id_hook {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the C library's own definition, with the caller's
                // arguments (setgroups' list and initgroups' name are the
                // caller's to vouch for).
                let r = unsafe { real::$name($($arg),*) };
                if let Some(p) = active() {
                    // The call's errno, not the read-back's, is the caller's.
                    let e = conv::errno();
                    refresh_ids(p);
                    conv::set_errno(e);
                }
                r
            }
        )*
    };
}

id_hook! {
    setuid(uid: libc::uid_t) -> c_int;
    seteuid(uid: libc::uid_t) -> c_int;
    setreuid(ruid: libc::uid_t, euid: libc::uid_t) -> c_int;
    setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t) -> c_int;
    setgid(gid: libc::gid_t) -> c_int;
    setegid(gid: libc::gid_t) -> c_int;
    setregid(rgid: libc::gid_t, egid: libc::gid_t) -> c_int;
    setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t) -> c_int;
    setgroups(n: usize, list: *const libc::gid_t) -> c_int;
    setfsuid(uid: libc::uid_t) -> c_int;
    setfsgid(gid: libc::gid_t) -> c_int;
    // The C library sets the groups inside initgroups itself, not through
    // its exported setgroups.
    initgroups(user: *const c_char, group: libc::gid_t) -> c_int;
}

/// Put the process's current file-system ids and groups into the session,
/// keeping its umask.
fn refresh_ids(p: &Preload) {
    p.real_ids.store(super::real_ids(), Ordering::Relaxed);
    let now = process_ids();
    let mut c = p.session.credentials();
    if (c.uid, c.gid, &c.groups) != (now.uid, now.gid, &now.groups) {
        c.uid = now.uid;
        c.gid = now.gid;
        c.groups = now.groups;
        p.session.set_credentials(c);
    }
}

unsafe fn real_umask(mask: mode_t) -> mode_t {
    // SAFETY: the umask system call has no memory arguments.
    unsafe { libc::syscall(libc::SYS_umask, mask) as mode_t }
}

// ---- the current directory ----------------------------------------------------------

impl Preload {
    /// The current directory moved into the pool: the session's is the
    /// process's, and the kernel's follows it into the mount (best effort:
    /// children inherit it).
    pub(super) fn entered(&self) {
        if let Ok(c) = inside(|| PathFs::getcwd(&self.session)) {
            self.cwd_depth.store(super::paths::depth(&c), Ordering::Relaxed);
            self.cwd_in_pool.store(true, Ordering::Relaxed);
            let mut host = self.host_path(&c);
            host.push(0);
            // SAFETY: a NUL-terminated path.
            inside(|| unsafe { real::chdir(host.as_ptr() as *const c_char) });
        }
    }

    /// The current directory moved out of the pool, to where the kernel says.
    fn left(&self) {
        self.cwd_in_pool.store(false, Ordering::Relaxed);
        if let Ok(c) = std::env::current_dir() {
            use std::os::unix::ffi::OsStrExt;
            *self.kernel_cwd.lock() = super::paths::normalize(c.as_os_str().as_bytes());
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
        let r = inside(|| {
            if d == AT_FDCWD {
                p.session.chdir(&rel)
            } else {
                let dir = p.session.openat(d, &rel, engine::OpenFlags::RDONLY.o_path().directory(), 0)?;
                let r = p.session.fchdir(dir);
                let _ = p.session.close(dir);
                r
            }
        });
        if r.is_ok() {
            p.entered();
        }
        return ok0(r);
    }
    let r = unsafe { real::chdir(path) };
    if r == 0 {
        if let Some(p) = active() {
            inside(|| p.left());
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(n: c_int) -> c_int {
    if let Some(p) = ours(n) {
        let r = inside(|| p.session.fchdir(fd(n)));
        if r.is_ok() {
            p.entered();
        }
        return ok0(r);
    }
    let r = unsafe { real::fchdir(n) };
    if r == 0 {
        if let Some(p) = active() {
            inside(|| p.left());
        }
    }
    r
}

/// getcwd into the caller's buffer, or into a malloc'd one (glibc's
/// extension for a NULL buffer).
unsafe fn put_cwd(path: &[u8], b: *mut c_char, n: usize) -> *mut c_char {
    if b.is_null() {
        let size = if n == 0 { path.len() + 1 } else { n };
        if size < path.len() + 1 {
            return fail(Errno::ERANGE);
        }
        // SAFETY: malloc of a positive size; the caller frees it.
        let m = unsafe { libc::malloc(size) } as *mut c_char;
        if m.is_null() {
            return fail(Errno::ENOMEM);
        }
        // SAFETY: `m` holds `size` > path.len() bytes (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(path.as_ptr(), m as *mut u8, path.len());
            *m.add(path.len()) = 0;
        }
        return m;
    }
    if n == 0 {
        return fail(Errno::EINVAL);
    }
    if n < path.len() + 1 {
        return fail(Errno::ERANGE);
    }
    // SAFETY: the caller's buffer holds `n` > path.len() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), b as *mut u8, path.len());
        *b.add(path.len()) = 0;
    }
    b
}

fn pool_cwd() -> Option<FsResult<Vec<u8>>> {
    let p = active()?;
    if !p.cwd_in_pool.load(Ordering::Relaxed) {
        return None;
    }
    Some(inside(|| PathFs::getcwd(&p.session)).map(|c| p.host_path(&c)))
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(b: *mut c_char, n: usize) -> *mut c_char {
    match pool_cwd() {
        Some(Ok(c)) => unsafe { put_cwd(&c, b, n) },
        Some(Err(e)) => fail(e),
        None => unsafe { real::getcwd(b, n) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(b: *mut c_char, n: usize, buflen: usize) -> *mut c_char {
    match pool_cwd() {
        Some(Ok(c)) => unsafe { put_cwd(&c, b, n.min(buflen)) },
        Some(Err(e)) => fail(e),
        None => unsafe { real::__getcwd_chk(b, n, buflen) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    match pool_cwd() {
        Some(Ok(c)) => unsafe { put_cwd(&c, std::ptr::null_mut(), 0) },
        Some(Err(e)) => fail(e),
        None => unsafe { real::get_current_dir_name() },
    }
}

impl Preload {
    /// realpath inside the pool: every symlink followed (a target is read
    /// as the engine reads it: absolute targets start at the pool's root),
    /// "." and ".." applied, every component existing.
    fn realpath(&self, d: Fd, rel: &[u8]) -> FsResult<Vec<u8>> {
        let start: Vec<u8> = if rel.first() == Some(&b'/') {
            Vec::new()
        } else if d == AT_FDCWD {
            PathFs::getcwd(&self.session)?
        } else {
            self.path_of(d.0 as c_int).map(|p| p.to_vec()).ok_or(Errno::ENOENT)?
        };
        let mut done: Vec<Vec<u8>> =
            start.split(|&b| b == b'/').filter(|c| !c.is_empty()).map(|c| c.to_vec()).collect();
        let mut todo: Vec<Vec<u8>> = rel.split(|&b| b == b'/').rev().map(|c| c.to_vec()).collect();
        let mut links = 0;
        while let Some(c) = todo.pop() {
            match c.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let mut path = Vec::new();
            for x in done.iter().chain(std::iter::once(&c)) {
                path.push(b'/');
                path.extend_from_slice(x);
            }
            let st = self.session.fstatat(AT_FDCWD, &path, libc::AT_SYMLINK_NOFOLLOW)?;
            if st.kind == engine::FileType::Symlink {
                links += 1;
                if links > engine::limits::SYMLOOP_MAX {
                    return Err(Errno::ELOOP);
                }
                let t = self.session.readlinkat(AT_FDCWD, &path)?;
                if t.first() == Some(&b'/') {
                    done.clear();
                }
                todo.extend(t.split(|&b| b == b'/').rev().map(|c| c.to_vec()));
                continue;
            }
            if !todo.iter().all(|c| c.is_empty()) && st.kind != engine::FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            done.push(c);
        }
        let mut out = Vec::new();
        for x in &done {
            out.push(b'/');
            out.extend_from_slice(x);
        }
        if out.is_empty() {
            out.push(b'/');
        }
        Ok(self.host_path(&out))
    }
}

unsafe fn realpath_common(path: *const c_char, resolved: *mut c_char) -> Option<*mut c_char> {
    let (p, d, rel) = unsafe { pool(libc::AT_FDCWD, path) }?;
    Some(match inside(|| p.realpath(d, &rel)) {
        Ok(r) => {
            if r.len() >= libc::PATH_MAX as usize {
                return Some(fail(Errno::ENAMETOOLONG));
            }
            unsafe { put_cwd(&r, resolved, if resolved.is_null() { 0 } else { libc::PATH_MAX as usize }) }
        }
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    if let Some(r) = unsafe { realpath_common(path, resolved) } {
        return r;
    }
    unsafe { real::realpath(path, resolved) }
}

#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, buflen: usize) -> *mut c_char {
    if let Some(r) = unsafe { realpath_common(path, resolved) } {
        return r;
    }
    unsafe { real::__realpath_chk(path, resolved, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    if let Some(r) = unsafe { realpath_common(path, std::ptr::null_mut()) } {
        return r;
    }
    unsafe { real::canonicalize_file_name(path) }
}

// ---- extended attributes ----------------------------------------------------------------

/// The inode a path-form xattr call acts on (`follow`: the l-forms do not).
fn xattr_inode(p: &Preload, d: Fd, rel: &[u8], follow: bool) -> FsResult<engine::InodeNo> {
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    Ok(p.session.fstatat(d, rel, flags)?.ino)
}

unsafe fn name_arg<'a>(name: *const c_char) -> FsResult<&'a [u8]> {
    unsafe { cstr(name) }
}

macro_rules! getxattr_hooks {
    ($($name:ident($follow:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, v: *mut c_void, n: usize) -> isize {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return c_ret(inside(|| {
                    let ino = xattr_inode(p, d, &rel, $follow)?;
                    copy_out(&p.session.getxattr(ino, unsafe { name_arg(name) }?)?, v as *mut u8, n)
                }));
            }
            unsafe { real::$name(path, name, v, n) }
        }
    )*};
}
getxattr_hooks!(getxattr(true), lgetxattr(false));

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(n: c_int, name: *const c_char, v: *mut c_void, size: usize) -> isize {
    if let Some(p) = ours(n) {
        return c_ret(inside(|| {
            copy_out(&p.session.fgetxattr(fd(n), unsafe { name_arg(name) }?)?, v as *mut u8, size)
        }));
    }
    unsafe { real::fgetxattr(n, name, v, size) }
}

macro_rules! setxattr_hooks {
    ($($name:ident($follow:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, v: *const c_void, n: usize, flags: c_int) -> c_int {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return ok0(inside(|| {
                    let ino = xattr_inode(p, d, &rel, $follow)?;
                    if bad_buffer(v as *const u8, n) {
                        return Err(Errno(libc::EFAULT));
                    }
                    p.session.setxattr(ino, unsafe { name_arg(name) }?, unsafe { buf(v, n) }, conv::xattr_mode(flags)?)
                }));
            }
            unsafe { real::$name(path, name, v, n, flags) }
        }
    )*};
}
setxattr_hooks!(setxattr(true), lsetxattr(false));

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    n: c_int,
    name: *const c_char,
    v: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| {
            if bad_buffer(v as *const u8, size) {
                return Err(Errno(libc::EFAULT));
            }
            p.session.fsetxattr(fd(n), unsafe { name_arg(name) }?, unsafe { buf(v, size) }, conv::xattr_mode(flags)?)
        }));
    }
    unsafe { real::fsetxattr(n, name, v, size, flags) }
}

macro_rules! listxattr_hooks {
    ($($name:ident($follow:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, list: *mut c_char, n: usize) -> isize {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return c_ret(inside(|| {
                    let ino = xattr_inode(p, d, &rel, $follow)?;
                    copy_out(&xattr_list(&p.session.listxattr(ino)?), list as *mut u8, n)
                }));
            }
            unsafe { real::$name(path, list, n) }
        }
    )*};
}
listxattr_hooks!(listxattr(true), llistxattr(false));

#[no_mangle]
pub unsafe extern "C" fn flistxattr(n: c_int, list: *mut c_char, size: usize) -> isize {
    if let Some(p) = ours(n) {
        return c_ret(inside(|| copy_out(&xattr_list(&p.session.flistxattr(fd(n))?), list as *mut u8, size)));
    }
    unsafe { real::flistxattr(n, list, size) }
}

macro_rules! removexattr_hooks {
    ($($name:ident($follow:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char) -> c_int {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return ok0(inside(|| {
                    let ino = xattr_inode(p, d, &rel, $follow)?;
                    p.session.removexattr(ino, unsafe { name_arg(name) }?)
                }));
            }
            unsafe { real::$name(path, name) }
        }
    )*};
}
removexattr_hooks!(removexattr(true), lremovexattr(false));

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(n: c_int, name: *const c_char) -> c_int {
    if let Some(p) = ours(n) {
        return ok0(inside(|| p.session.fremovexattr(fd(n), unsafe { name_arg(name) }?)));
    }
    unsafe { real::fremovexattr(n, name) }
}

// ---- file-system figures -------------------------------------------------------------

macro_rules! statfs_hooks {
    ($($name:ident, $fname:ident, $st:ty, $fill:ident, $wide:ty);*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut $st) -> c_int {
            if let Some((p, d, rel)) = unsafe { pool(libc::AT_FDCWD, path) } {
                return ok0(inside(|| {
                    p.session.fstatat(d, &rel, 0)?;
                    let s = p.session.statfs()?;
                    if bad_buffer(out as *const u8, std::mem::size_of::<$st>()) {
                        return Err(Errno(libc::EFAULT));
                    }
                    // SAFETY: `out` points to the structure (same layout as
                    // its 64-bit twin here).
                    $fill(&s, unsafe { &mut *(out as *mut $wide) });
                    Ok(())
                }));
            }
            unsafe { real::$name(path, out) }
        }

        #[no_mangle]
        pub unsafe extern "C" fn $fname(n: c_int, out: *mut $st) -> c_int {
            if let Some(p) = ours(n) {
                return ok0(inside(|| {
                    p.session.fstatat(fd(n), b"", libc::AT_EMPTY_PATH)?;
                    let s = p.session.statfs()?;
                    if bad_buffer(out as *const u8, std::mem::size_of::<$st>()) {
                        return Err(Errno(libc::EFAULT));
                    }
                    // SAFETY: as above.
                    $fill(&s, unsafe { &mut *(out as *mut $wide) });
                    Ok(())
                }));
            }
            unsafe { real::$fname(n, out) }
        }
    )*};
}
statfs_hooks!(
    statfs, fstatfs, libc::statfs, fill_statfs, libc::statfs64;
    statfs64, fstatfs64, libc::statfs64, fill_statfs, libc::statfs64;
    statvfs, fstatvfs, libc::statvfs, fill_statvfs, libc::statvfs64;
    statvfs64, fstatvfs64, libc::statvfs64, fill_statvfs, libc::statvfs64
);

// ---- copies between descriptors, ioctl ----------------------------------------------

/// Copy `len` bytes from Ferrite descriptor `a` to Ferrite descriptor `b`
/// inside the engine (read and write in chunks), with optional explicit
/// offsets as copy_file_range and sendfile take them.
fn copy_between(
    p: &Preload,
    src: c_int,
    src_off: Option<&mut i64>,
    dst: c_int,
    dst_off: Option<&mut i64>,
    len: usize,
) -> FsResult<isize> {
    // Writable shared mappings keep a DRAM shadow of their file: the
    // copy reads what they stored, and, as a write would, writes the
    // target's shadow back first and reloads it after, or a later write
    // back of the stale shadow would undo the copy.
    super::mmap::before_io(p, src);
    if is_ferrite(dst) {
        super::mmap::change(p, dst, || copy_chunks(p, src, src_off, dst, dst_off, len), |_| Changed::Whole)
    } else {
        copy_chunks(p, src, src_off, dst, dst_off, len)
    }
}

/// The copy itself: reads and writes of at most 1 MiB through the session.
fn copy_chunks(
    p: &Preload,
    src: c_int,
    src_off: Option<&mut i64>,
    dst: c_int,
    dst_off: Option<&mut i64>,
    len: usize,
) -> FsResult<isize> {
    const CHUNK_BYTES: usize = 1 << 20;
    let mut buf = vec![0u8; len.min(CHUNK_BYTES)];
    let mut done = 0usize;
    let (mut so, mut dof) = (src_off, dst_off);
    while done < len {
        let want = (len - done).min(buf.len());
        let got = match so.as_deref_mut() {
            Some(o) => {
                let g = p.session.pread(fd(src), &mut buf[..want], offset(*o)?)?;
                *o += g as i64;
                g
            }
            None => p.session.read(fd(src), &mut buf[..want])?,
        };
        if got == 0 {
            break;
        }
        let put = if is_ferrite(dst) {
            match dof.as_deref_mut() {
                Some(o) => {
                    let k = p.session.pwrite(fd(dst), &buf[..got], offset(*o)?)?;
                    *o += k as i64;
                    k
                }
                None => p.session.write(fd(dst), &buf[..got])?,
            }
        } else {
            // SAFETY: writing our own buffer to the caller's kernel descriptor.
            let k = unsafe { real::write(dst, buf.as_ptr().cast(), got) };
            if k < 0 {
                if done > 0 {
                    break;
                }
                return Err(Errno(conv::errno()));
            }
            k as usize
        };
        done += put;
        if put < got {
            break;
        }
    }
    Ok(done as isize)
}

/// copy_file_range between two Ferrite descriptors: Linux's checks first,
/// in its order (`generic_file_rw_checks`, `generic_copy_file_checks`):
/// directories EISDIR, other non-regular files EINVAL; a source not open
/// for reading, a target not open for writing or opened O_APPEND, EBADF;
/// the length cut to what the source holds past its offset; overlapping
/// ranges of one file EINVAL. Then the copy.
fn copy_file_range_ferrite(
    p: &Preload,
    a: c_int,
    ao: Option<&mut i64>,
    b: c_int,
    bo: Option<&mut i64>,
    len: usize,
) -> FsResult<isize> {
    let (fa, fb) = (p.session.open_file(fd(a))?, p.session.open_file(fd(b))?);
    let (sa, sb) = (p.session.fstat(fd(a))?, p.session.fstat(fd(b))?);
    if sa.kind == engine::FileType::Directory || sb.kind == engine::FileType::Directory {
        return Err(Errno::EISDIR);
    }
    if sa.kind != engine::FileType::Regular || sb.kind != engine::FileType::Regular {
        return Err(Errno::EINVAL);
    }
    let (ra, rb) = (fa.status(), fb.status());
    if !ra.read || ra.path || !rb.write || rb.path || rb.append {
        return Err(Errno::EBADF);
    }
    let pos_in = match ao.as_deref() {
        Some(&o) => offset(o)?,
        None => *fa.pos.lock(),
    };
    let pos_out = match bo.as_deref() {
        Some(&o) => offset(o)?,
        None => *fb.pos.lock(),
    };
    let count = (len as u64).min(sa.size.saturating_sub(pos_in));
    if sa.ino == sb.ino && pos_out < pos_in.saturating_add(count) && pos_in < pos_out.saturating_add(count) {
        return Err(Errno::EINVAL);
    }
    if count == 0 {
        return Ok(0);
    }
    copy_between(p, a, ao, b, bo, count as usize)
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    a: c_int,
    ao: *mut Off,
    b: c_int,
    bo: *mut Off,
    len: usize,
    flags: c_uint,
) -> isize {
    if let (true, true, Some(p)) = (is_ferrite(a), is_ferrite(b), active()) {
        if flags != 0 {
            return fail(Errno::EINVAL);
        }
        // SAFETY: the offsets are NULL or point to the caller's off64_t.
        let (ao, bo) = unsafe { (ao.as_mut(), bo.as_mut()) };
        return c_ret(inside(|| copy_file_range_ferrite(p, a, ao, b, bo, len)));
    }
    if is_ferrite(a) || is_ferrite(b) {
        return fail(Errno::EXDEV);
    }
    unsafe { real::copy_file_range(a, ao, b, bo, len, flags) }
}

/// `syscall(2)`, the C library's door to any system call by number. A
/// program that makes copy_file_range this way rather than by its C
/// function (the Rust crate nix does, and so fsx) would hand the kernel a
/// Ferrite descriptor's placeholder (EBADF): that number goes to the hook
/// above when a descriptor is Ferrite's. Every other call goes to the
/// kernel as it came.
///
/// C declares `syscall` variadic. On the 64-bit ABIs Linux uses here the
/// integer arguments of a variadic call travel where those of this fixed
/// signature do, and the six read are what the kernel takes: the ones a
/// caller did not pass are whatever its registers and stack slot hold,
/// passed on and ignored by the kernel, as glibc's own `syscall` does.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
    d: libc::c_long,
    e: libc::c_long,
    f: libc::c_long,
) -> libc::c_long {
    if n == libc::SYS_copy_file_range && (is_ferrite(a as c_int) || is_ferrite(c as c_int)) {
        // SAFETY: the caller's arguments of copy_file_range, in its order
        // (the offsets are NULL or point to its off64_t).
        let r =
            unsafe { copy_file_range(a as c_int, b as *mut Off, c as c_int, d as *mut Off, e as usize, f as c_uint) };
        return r as libc::c_long;
    }
    // SAFETY: the C library's `syscall` with the caller's arguments.
    let r = unsafe { real::syscall(n, a, b, c, d, e, f) };
    if n == libc::SYS_io_uring_setup && r >= 0 {
        // A new descriptor, as from open: the mount's io_uring queues
        // (which make their rings this way) get theirs out of the
        // program's way, and a program's own ring at a number the library
        // still took for a stale Ferrite descriptor makes it forget it.
        return kernel_fd(r as c_int) as libc::c_long;
    }
    r
}

/// Is `out` (a Ferrite descriptor, or a kernel one) open with O_APPEND?
/// A descriptor that is neither answers no: the call's own error follows.
fn out_appends(p: &Preload, out: c_int) -> bool {
    if is_ferrite(out) {
        return p.session.getfl(fd(out)).is_ok_and(|f| f.append);
    }
    // SAFETY: F_GETFL reads the descriptor's flags; a bad descriptor
    // answers -1.
    let fl = unsafe { real::fcntl(out, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_APPEND != 0
}

macro_rules! sendfile_hooks {
    ($($name:ident($ot:ty)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(out: c_int, inp: c_int, off: *mut $ot, len: usize) -> isize {
            if let (true, Some(p)) = (is_ferrite(inp), active()) {
                // Linux refuses a target opened O_APPEND (do_splice_direct).
                if out_appends(p, out) {
                    return fail(Errno::EINVAL);
                }
                // SAFETY: `off` is NULL or points to the caller's offset.
                let mut o = unsafe { off.as_mut() }.map(|o| *o as i64);
                let r = inside(|| copy_between(p, inp, o.as_mut(), out, None, len));
                if let (Some(v), false) = (o, off.is_null()) {
                    // SAFETY: `off` is the caller's offset (not NULL here).
                    unsafe { *off = v as $ot };
                }
                return c_ret(r);
            }
            if is_ferrite(out) {
                return fail(Errno::EXDEV);
            }
            unsafe { real::$name(out, inp, off, len) }
        }
    )*};
}
sendfile_hooks!(sendfile(off_t), sendfile64(Off));

#[no_mangle]
pub unsafe extern "C" fn splice(a: c_int, ao: *mut Off, b: c_int, bo: *mut Off, len: usize, flags: c_uint) -> isize {
    if is_ferrite(a) || is_ferrite(b) {
        return fail(Errno::EXDEV);
    }
    unsafe { real::splice(a, ao, b, bo, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(n: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    if let Some(p) = ours(n) {
        return match req {
            libc::FIOCLEX | libc::FIONCLEX => {
                let on = req == libc::FIOCLEX;
                let r = unsafe { real::fcntl(n, libc::F_SETFD, if on { libc::FD_CLOEXEC as usize } else { 0 }) };
                let _ = inside(|| p.session.set_cloexec(fd(n), on));
                r
            }
            _ => fail(Errno(libc::ENOTTY)),
        };
    }
    unsafe { real::ioctl(n, req, arg) }
}

// ---- temporary files ---------------------------------------------------------------

/// mkstemp's family in the pool: the last `suffix` bytes are kept, the six
/// X's before them are replaced until an exclusive create succeeds.
unsafe fn mktemp_common(template: *mut c_char, suffix: c_int, flags: c_int, dir: bool) -> Option<FsResult<c_int>> {
    let (p, d, rel) = unsafe { pool(libc::AT_FDCWD, template) }?;
    let rel = rel.into_owned();
    // SAFETY: a writable C string (the caller's template).
    let t = unsafe { std::slice::from_raw_parts_mut(template as *mut u8, libc::strlen(template)) };
    let suffix = suffix.max(0) as usize;
    if t.len() < 6 + suffix || &t[t.len() - 6 - suffix..t.len() - suffix] != b"XXXXXX" {
        return Some(Err(Errno::EINVAL));
    }
    let x_at = t.len() - 6 - suffix;
    let rel_x_at = rel.len() - 6 - suffix;
    let mut rel = rel;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for attempt in 0..1000u64 {
        let mut seed = [0u8; 8];
        // SAFETY: filling our own buffer.
        if unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 8, 0) } != 8 {
            seed = (attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ std::process::id() as u64).to_le_bytes();
        }
        let mut v = u64::from_le_bytes(seed);
        for i in 0..6 {
            let c = CHARS[(v % CHARS.len() as u64) as usize];
            v /= CHARS.len() as u64;
            t[x_at + i] = c;
            rel[rel_x_at + i] = c;
        }
        let r = if dir {
            inside(|| p.session.mkdirat(d, &rel, 0o700)).map(|()| 0)
        } else {
            let f = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE);
            p.open(d, &rel, f, 0o600)
        };
        match r {
            Err(Errno::EEXIST) => continue,
            r => return Some(r),
        }
    }
    Some(Err(Errno::EEXIST))
}

macro_rules! mkstemp_hooks {
    ($($name:ident($($a:ident: $t:ty),*) => ($suffix:expr, $flags:expr)),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(template: *mut c_char $(, $a: $t)*) -> c_int {
            if let Some(r) = unsafe { mktemp_common(template, $suffix, $flags, false) } {
                return c_ret(r);
            }
            unsafe { real::$name(template $(, $a)*) }
        }
    )*};
}
mkstemp_hooks!(
    mkstemp() => (0, 0),
    mkstemp64() => (0, 0),
    mkostemp(flags: c_int) => (0, flags),
    mkostemp64(flags: c_int) => (0, flags),
    mkstemps(suffixlen: c_int) => (suffixlen, 0),
    mkostemps(suffixlen: c_int, flags: c_int) => (suffixlen, flags)
);

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    if let Some(r) = unsafe { mktemp_common(template, 0, 0, true) } {
        return match r {
            Ok(_) => template,
            Err(e) => fail(e),
        };
    }
    unsafe { real::mkdtemp(template) }
}

// ---- exec ------------------------------------------------------------------------------

extern "C" {
    static environ: *const *const c_char;
}

/// `envp` without any FERRITE_FDS entry, plus `entry`, as C strings and a
/// NULL-terminated pointer array over them.
unsafe fn env_with(envp: *const *const c_char, entry: &[u8]) -> (Vec<std::ffi::CString>, Vec<*const c_char>) {
    let mut owned = Vec::new();
    let mut i = 0;
    while !envp.is_null() {
        // SAFETY: a NULL-terminated array of C strings (the caller's).
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            break;
        }
        // SAFETY: a C string of the caller's environment array.
        let b = unsafe { std::ffi::CStr::from_ptr(e) };
        if !b.to_bytes().starts_with(b"FERRITE_FDS=") {
            owned.push(b.to_owned());
        }
        i += 1;
    }
    if let Ok(c) = std::ffi::CString::new(entry.to_vec()) {
        owned.push(c);
    }
    let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (owned, ptrs)
}

/// Run an exec call as the owner hands over: inherited descriptors are
/// described in the new environment and the pool is unmounted cleanly; if
/// the exec fails, this process serves the pool again.
unsafe fn exec_handover(envp: *const *const c_char, exec: impl FnOnce(*const *const c_char) -> c_int) -> c_int {
    let Some(entry) = super::prepare_exec() else { return exec(envp) };
    let (_owned, ptrs) = unsafe { env_with(envp, &entry) };
    let r = exec(ptrs.as_ptr());
    let e = conv::errno();
    super::resume_after_exec(&entry);
    conv::set_errno(e);
    r
}

/// `_exit` skips atexit handlers (dash and many shells end with it): the
/// owner still shuts down cleanly (stdio is not flushed, as `_exit` says).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    super::shutdown_for_exit();
    // SAFETY: ending the process.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    unsafe { _exit(status) }
}

/// vfork is fork here: a vfork child shares the owner's memory, and would
/// run the library's code on the owner's engine (an exec hands the pool
/// over, a write would race the owner). fork runs the fork handlers, which
/// turn the library off in the child.
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: plain fork.
    unsafe { libc::fork() }
}

/// The Ferrite numbers that `posix_spawn_file_actions_adddup2` was given
/// as sources, with the file actions object (its address) they went into:
/// `posix_spawn` shares their descriptions with the child through the
/// mount even when they are close-on-exec, since the child gets them by
/// the dup2.
static SPAWN_SOURCES: parking_lot::Mutex<Vec<(usize, c_int)>> = parking_lot::Mutex::new(Vec::new());

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_adddup2(
    actions: *mut libc::posix_spawn_file_actions_t,
    fd: c_int,
    newfd: c_int,
) -> c_int {
    if is_ferrite(fd) {
        SPAWN_SOURCES.lock().push((actions as usize, fd));
    }
    unsafe { real::posix_spawn_file_actions_adddup2(actions, fd, newfd) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(actions: *mut libc::posix_spawn_file_actions_t) -> c_int {
    SPAWN_SOURCES.lock().retain(|&(a, _)| a != actions as usize);
    unsafe { real::posix_spawn_file_actions_destroy(actions) }
}

/// Before glibc starts a child that execs at once without running the fork
/// handlers (posix_spawn, and system and popen, which spawn through it
/// inside glibc): the descriptions the child will have are shared with it
/// through the mount, as before a fork (`share_with_children`). Without
/// this, the child's copies of Ferrite numbers were the library's
/// placeholders, and `system("echo x >&3")` failed with EBADF.
fn before_spawn(actions: *const libc::posix_spawn_file_actions_t) {
    let Some(p) = active() else { return };
    let handed: Vec<c_int> = if actions.is_null() {
        Vec::new()
    } else {
        SPAWN_SOURCES.lock().iter().filter(|&&(a, _)| a == actions as usize).map(|&(_, n)| n).collect()
    };
    super::share_with_children(p, super::Child::Spawned(&handed));
}

macro_rules! spawn_hooks {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut libc::pid_t,
            path: *const c_char,
            actions: *const libc::posix_spawn_file_actions_t,
            attr: *const libc::posix_spawnattr_t,
            argv: *const *mut c_char,
            envp: *const *mut c_char,
        ) -> c_int {
            before_spawn(actions);
            unsafe { real::$name(pid, path, actions, attr, argv, envp) }
        }
    )*};
}
spawn_hooks!(posix_spawn, posix_spawnp);

#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    before_spawn(std::ptr::null());
    unsafe { real::system(command) }
}

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    before_spawn(std::ptr::null());
    unsafe { real::popen(command, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // A shell searching PATH tries many names: hand the pool over only for
    // one that can be executed.
    // SAFETY: access on the caller's path (NULL gives EFAULT).
    if unsafe { real::access(path, libc::X_OK) } != 0 {
        return unsafe { real::execve(path, argv, envp) };
    }
    unsafe { exec_handover(envp, |env| real::execve(path, argv, env)) }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    unsafe { exec_handover(envp, |env| real::execvpe(file, argv, env)) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execvpe(file, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(n: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    if is_ferrite(n) {
        // The kernel cannot execute a file it does not see.
        return fail(Errno(libc::ENOEXEC));
    }
    unsafe { exec_handover(envp, |env| real::fexecve(n, argv, env)) }
}
