//! stdio streams on Ferrite files: `fopen`, `fopen64` and `fdopen` make a
//! `fopencookie` stream whose read, write, seek and close functions call
//! the engine, and `fileno` answers such a stream's Ferrite descriptor.
//! glibc's own FILE machinery (buffers, `fprintf`, `fgets`) works
//! unchanged on top. `freopen` and `tmpfile` are not intercepted: a pool
//! path given to `freopen` reaches the pool through the mount.

#![allow(clippy::missing_safety_doc)]

use super::{active, is_ferrite, Preload};
use crate::conv::{cstr, fail};
use crate::real;
use engine::Errno;
use libc::{c_char, c_int, c_void};
use parking_lot::Mutex;
use std::collections::HashMap;

/// FILE pointer → Ferrite descriptor, for `fileno`.
static STREAMS: Mutex<Option<HashMap<usize, c_int>>> = Mutex::new(None);

/// glibc's `cookie_io_functions_t` (the libc crate does not declare it).
#[repr(C)]
struct CookieFunctions {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieFunctions) -> *mut libc::FILE;
}

struct Cookie {
    fd: c_int,
    file: usize,
}

unsafe extern "C" fn ck_read(c: *mut c_void, b: *mut c_char, n: usize) -> isize {
    // SAFETY: the cookie we made in `stream`.
    let c = unsafe { &*(c as *const Cookie) };
    unsafe { super::hooks::read(c.fd, b.cast(), n) }
}

unsafe extern "C" fn ck_write(c: *mut c_void, b: *const c_char, n: usize) -> isize {
    // SAFETY: as above.
    let c = unsafe { &*(c as *const Cookie) };
    unsafe { super::hooks::write(c.fd, b.cast(), n) }
}

unsafe extern "C" fn ck_seek(c: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: as above; `off` is glibc's in/out offset.
    let c = unsafe { &*(c as *const Cookie) };
    let r = unsafe { super::hooks::lseek64(c.fd, *off, whence) };
    if r < 0 {
        return -1;
    }
    // SAFETY: glibc's in/out offset.
    unsafe { *off = r };
    0
}

unsafe extern "C" fn ck_close(c: *mut c_void) -> c_int {
    // SAFETY: the cookie, given back once by fclose.
    let c = unsafe { Box::from_raw(c as *mut Cookie) };
    if let Some(m) = STREAMS.lock().as_mut() {
        m.remove(&c.file);
    }
    unsafe { super::hooks::close(c.fd) }
}

/// open(2) flags of an fopen mode string ("r", "w+", "ae", "wx", ...).
fn mode_flags(mode: &[u8]) -> Result<c_int, Errno> {
    let mut f = match mode.first() {
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        Some(b'a') => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return Err(Errno::EINVAL),
    };
    for &c in &mode[1..] {
        match c {
            b'+' => f = (f & !libc::O_ACCMODE) | libc::O_RDWR,
            b'e' => f |= libc::O_CLOEXEC,
            b'x' => f |= libc::O_EXCL,
            b',' => break,
            _ => {}
        }
    }
    Ok(f)
}

/// A cookie stream over Ferrite descriptor `fd` (closed with the stream).
unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let cookie = Box::into_raw(Box::new(Cookie { fd, file: 0 }));
    let funcs =
        CookieFunctions { read: Some(ck_read), write: Some(ck_write), seek: Some(ck_seek), close: Some(ck_close) };
    // SAFETY: a valid cookie and mode string; glibc owns the cookie until
    // it calls ck_close.
    let f = unsafe { fopencookie(cookie.cast(), mode, funcs) };
    if f.is_null() {
        // SAFETY: the cookie was not taken.
        drop(unsafe { Box::from_raw(cookie) });
        return f;
    }
    // SAFETY: the cookie is alive until glibc calls ck_close, which cannot
    // happen before this stream is returned.
    unsafe { (*cookie).file = f as usize };
    STREAMS.lock().get_or_insert_with(HashMap::new).insert(f as usize, fd);
    f
}

unsafe fn fopen_common(p: &Preload, d: engine::Fd, rel: &[u8], mode: *const c_char) -> *mut libc::FILE {
    let flags = match unsafe { cstr(mode) }.and_then(mode_flags) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    match p.open(d, rel, flags, 0o666) {
        Ok(fd) => {
            let f = unsafe { stream(fd, mode) };
            if f.is_null() {
                let _ = p.close(fd);
            }
            f
        }
        Err(e) => fail(e),
    }
}

macro_rules! fopen_hooks {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
            if let Some(p) = active() {
                if let Ok(bytes) = unsafe { cstr(path) } {
                    if let super::paths::Route::Pool(d, rel) = p.route(libc::AT_FDCWD, bytes) {
                        return unsafe { fopen_common(p, d, &rel, mode) };
                    }
                }
            }
            unsafe { real::$name(path, mode) }
        }
    )*};
}
fopen_hooks!(fopen, fopen64);

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if is_ferrite(fd) && active().is_some() {
        return unsafe { stream(fd, mode) };
    }
    unsafe { real::fdopen(fd, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    if let Some(fd) = STREAMS.lock().as_ref().and_then(|m| m.get(&(f as usize)).copied()) {
        return fd;
    }
    unsafe { real::fileno(f) }
}
