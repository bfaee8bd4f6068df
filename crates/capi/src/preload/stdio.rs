//! stdio streams on Ferrite files: `fopen`, `fopen64` and `fdopen` make a
//! `fopencookie` stream whose read, write, seek and close functions call
//! the engine, and `fileno` answers such a stream's Ferrite descriptor.
//! glibc's own FILE machinery (buffers, `fprintf`, `fgets`) works
//! unchanged on top. `freopen` and `tmpfile` are not intercepted: a pool
//! path given to `freopen` reaches the pool through the mount.
//!
//! The standard streams need the same when descriptor 0, 1 or 2 becomes a
//! Ferrite descriptor (a shell's `echo x > file`, which opens the file and
//! `dup2`s it onto 1; or a program started by an exec with its output
//! redirected into the pool). glibc's `stdout` writes through its own
//! internal `write`, which no preload can intercept, so it would reach the
//! placeholder behind the number and fail with EBADF (bash: "echo: write
//! error: Bad file descriptor"). So while such a descriptor is Ferrite's,
//! the C library's `stdin`, `stdout` or `stderr` variable points at a
//! cookie stream that reads and writes that number through the library
//! (and so the engine); the program's own stream waits untouched and is
//! put back once the number is no longer Ferrite's. glibc documents these
//! variables as assignable, and `printf`, `puts` and the rest read them
//! at each call.

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
    /// Closing the stream closes the descriptor (false only for a standard
    /// stream's stand-in that the library itself retires).
    closes: bool,
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
    if !c.closes {
        return 0;
    }
    // The program closed a standard stream's stand-in (`fclose(stdout)`,
    // as coreutils do at exit, or a `freopen`): it is no longer one, and
    // the variable is left as the program's call leaves it.
    let mut standard = STANDARD.lock();
    if let Some(slot) = standard.iter_mut().find(|s| s.as_ref().is_some_and(|s| s.stand_in == c.file)) {
        *slot = None;
    }
    drop(standard);
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
    unsafe { stream_and_cookie(fd, mode) }.map_or(std::ptr::null_mut(), |(f, _)| f)
}

/// `stream`, and its cookie (alive until glibc calls `ck_close`).
unsafe fn stream_and_cookie(fd: c_int, mode: *const c_char) -> Option<(*mut libc::FILE, *mut Cookie)> {
    let cookie = Box::into_raw(Box::new(Cookie { fd, file: 0, closes: true }));
    let funcs =
        CookieFunctions { read: Some(ck_read), write: Some(ck_write), seek: Some(ck_seek), close: Some(ck_close) };
    // SAFETY: a valid cookie and mode string; glibc owns the cookie until
    // it calls ck_close.
    let f = unsafe { fopencookie(cookie.cast(), mode, funcs) };
    if f.is_null() {
        // SAFETY: the cookie was not taken.
        drop(unsafe { Box::from_raw(cookie) });
        return None;
    }
    // SAFETY: the cookie is alive until glibc calls ck_close, which cannot
    // happen before this stream is returned.
    unsafe { (*cookie).file = f as usize };
    STREAMS.lock().get_or_insert_with(HashMap::new).insert(f as usize, fd);
    Some((f, cookie))
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
    if let Some(fd) = stream_fd(f) {
        return fd;
    }
    unsafe { real::fileno(f) }
}

/// `fileno` without the stream's lock (gnulib's and coreutils' choice).
#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    if let Some(fd) = stream_fd(f) {
        return fd;
    }
    unsafe { real::fileno_unlocked(f) }
}

/// The Ferrite descriptor of one of the library's cookie streams.
fn stream_fd(f: *mut libc::FILE) -> Option<c_int> {
    STREAMS.lock().as_ref().and_then(|m| m.get(&(f as usize)).copied())
}

// ---- the standard streams ----------------------------------------------------

extern "C" {
    // The C library's standard stream variables (`<stdio.h>`). glibc
    // documents them as ordinary variables a program may assign.
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// A standard stream replaced while its descriptor is a Ferrite one.
struct Standard {
    /// The program's own stream, put back afterwards.
    own: usize,
    /// The cookie stream standing in for it.
    stand_in: usize,
    /// The stand-in's cookie (alive until glibc calls `ck_close`).
    cookie: usize,
}

/// For descriptors 0, 1 and 2.
static STANDARD: Mutex<[Option<Standard>; 3]> = Mutex::new([None, None, None]);

/// Bits of glibc's `_flags`, the first field of `struct _IO_FILE` (part
/// of glibc's stable ABI: its own macros such as `putc_unlocked` read it).
const IO_UNBUFFERED: c_int = 0x0002;
const IO_LINE_BUF: c_int = 0x0200;

/// The C library's variable for standard descriptor `fd` (0, 1 or 2).
fn variable(fd: c_int) -> *mut *mut libc::FILE {
    match fd {
        0 => &raw mut stdin,
        1 => &raw mut stdout,
        _ => &raw mut stderr,
    }
}

fn standard_number(fd: c_int) -> Option<usize> {
    (0..=2).contains(&fd).then_some(fd as usize)
}

/// Descriptor `fd` has just become a Ferrite descriptor: if it is 0, 1 or
/// 2, the standard stream's variable now points at a stand-in over it,
/// buffered as the program's stream was (stderr unbuffered, a stream on a
/// terminal or made line-buffered by `setvbuf` line-buffered, else fully).
pub fn standard_adopted(fd: c_int) {
    let Some(k) = standard_number(fd) else { return };
    let mut standard = STANDARD.lock();
    if standard[k].is_some() {
        return;
    }
    let var = variable(fd);
    // SAFETY: reading the C library's variable.
    let own = unsafe { *var };
    if own.is_null() {
        return;
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
    // SAFETY: a NUL-terminated mode string.
    let Some((f, cookie)) = (unsafe { stream_and_cookie(fd, mode.as_ptr().cast()) }) else { return };
    // SAFETY: `own` is the program's live stream; `_flags` is its first field.
    let flags = unsafe { *(own as *const c_int) };
    let buffering = if flags & IO_UNBUFFERED != 0 {
        Some(libc::_IONBF)
    } else if flags & IO_LINE_BUF != 0 {
        Some(libc::_IOLBF)
    } else {
        None
    };
    if let Some(b) = buffering {
        // SAFETY: a stream just made, not used yet.
        unsafe { libc::setvbuf(f, std::ptr::null_mut(), b, libc::BUFSIZ as usize) };
    }
    standard[k] = Some(Standard { own: own as usize, stand_in: f as usize, cookie: cookie as usize });
    // SAFETY: assigning the C library's variable, as glibc allows.
    unsafe { *var = f };
}

/// Descriptor `fd` is about to become a duplicate of a Ferrite descriptor
/// (`dup2`): what the program's own standard stream holds goes to the file
/// the number names now, while glibc's own write can still reach it.
pub fn standard_replacing(fd: c_int) {
    let Some(k) = standard_number(fd) else { return };
    if fd == 0 || STANDARD.lock()[k].is_some() {
        return;
    }
    // SAFETY: reading the C library's variable; fflush of a live stream.
    unsafe {
        let own = *variable(fd);
        if !own.is_null() {
            libc::fflush(own);
        }
    }
}

/// Ferrite descriptor `fd` is about to be closed: what its stand-in holds
/// goes to the file while the number still reaches it.
pub fn standard_closing(fd: c_int) {
    let Some(k) = standard_number(fd) else { return };
    let stand_in = STANDARD.lock()[k].as_ref().map(|s| s.stand_in);
    if let Some(f) = stand_in {
        // SAFETY: the stand-in is open until `standard_forgotten` closes it.
        unsafe { libc::fflush(f as *mut libc::FILE) };
    }
}

/// `fd` is no longer a Ferrite descriptor: the program's own stream is
/// back in the variable (unless the program assigned another one), and
/// the stand-in is closed without closing the number; what it still holds
/// goes to whatever the number names now, as glibc's stream would send it.
pub fn standard_forgotten(fd: c_int) {
    let Some(k) = standard_number(fd) else { return };
    let Some(s) = STANDARD.lock()[k].take() else { return };
    // SAFETY: the cookie lives until the fclose below calls ck_close; the
    // variable is the C library's.
    unsafe {
        (*(s.cookie as *mut Cookie)).closes = false;
        let var = variable(fd);
        if *var == s.stand_in as *mut libc::FILE {
            *var = s.own as *mut libc::FILE;
        }
        libc::fclose(s.stand_in as *mut libc::FILE);
    }
}
