//! Directory streams and getdents64 on Ferrite descriptors.
//!
//! A position in a Ferrite directory (telldir, lseek, d_off) is a "loc":
//! 0 is the start, 1 is after ".", 2 is after ".." (the engine's cookie 0),
//! and k + 2 is after the entry whose engine cookie is k. Engine cookies
//! stay valid across concurrent changes, so a listing interrupted by
//! creates and unlinks still returns every entry present throughout it
//! exactly once.

#![allow(clippy::missing_safety_doc)]

use super::{active, c_ret, fd, inside, is_ferrite, Preload};
use crate::conv::{cstr, fail};
use crate::real;
use engine::{Errno, FsResult, PathFs, Whence};
use libc::{c_char, c_int, c_long, c_void};

/// One entry of a listing with the loc that follows it.
pub struct Ent {
    pub name: Vec<u8>,
    pub ino: u64,
    pub dtype: u8,
    pub next: u64,
}

/// Up to `max` entries of directory descriptor `n` from `loc`.
pub fn entries(p: &Preload, n: c_int, loc: u64, max: usize) -> FsResult<Vec<Ent>> {
    let mut out = Vec::new();
    if loc == 0 {
        let st = p.session.fstat(fd(n))?;
        out.push(Ent { name: b".".to_vec(), ino: st.ino.0, dtype: libc::DT_DIR, next: 1 });
    }
    if loc <= 1 && out.len() < max {
        let st = p.session.fstatat(fd(n), b"..", 0)?;
        out.push(Ent { name: b"..".to_vec(), ino: st.ino.0, dtype: libc::DT_DIR, next: 2 });
    }
    if out.len() < max {
        let cookie = loc.saturating_sub(2);
        for e in p.session.readdir(fd(n), cookie, max - out.len())? {
            out.push(Ent { name: e.name, ino: e.ino.0, dtype: e.kind.dirent_type(), next: e.next_cookie + 2 });
        }
    }
    Ok(out)
}

/// lseek on a Ferrite directory: only SEEK_SET to a loc (and SEEK_CUR 0).
pub fn seek_dir(p: &Preload, n: c_int, off: i64, w: Whence) -> FsResult<i64> {
    let f = p.session.open_file(fd(n))?;
    let mut pos = f.pos.lock();
    match w {
        Whence::Set if off >= 0 => *pos = off as u64,
        Whence::Cur if off == 0 => {}
        _ => return Err(Errno::EINVAL),
    }
    Ok(*pos as i64)
}

const DIRENT_HEADER_BYTES: usize = 19;

#[no_mangle]
pub unsafe extern "C" fn getdents64(n: c_int, b: *mut c_void, len: usize) -> isize {
    let Some(p) = (if is_ferrite(n) { active() } else { None }) else {
        return unsafe { real::getdents64(n, b, len) };
    };
    c_ret(inside(|| {
        let f = p.session.open_file(fd(n))?;
        if f.inode.kind != engine::FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if super::bad_buffer(b as *const u8, len) {
            return Err(Errno(libc::EFAULT));
        }
        let mut pos = f.pos.lock();
        let list = entries(p, n, *pos, (len / 24).clamp(1, 512))?;
        let mut used = 0usize;
        for e in &list {
            let reclen = (DIRENT_HEADER_BYTES + e.name.len() + 1).next_multiple_of(8);
            if used + reclen > len {
                if used == 0 {
                    return Err(Errno::EINVAL);
                }
                break;
            }
            // SAFETY: the record lies inside the caller's buffer of `len`
            // bytes (checked above); the fields are written unaligned.
            unsafe {
                let r = (b as *mut u8).add(used);
                std::ptr::write_bytes(r, 0, reclen);
                (r as *mut u64).write_unaligned(e.ino);
                (r.add(8) as *mut i64).write_unaligned(e.next as i64);
                (r.add(16) as *mut u16).write_unaligned(reclen as u16);
                *r.add(18) = e.dtype;
                std::ptr::copy_nonoverlapping(e.name.as_ptr(), r.add(19), e.name.len());
            }
            used += reclen;
            *pos = e.next;
        }
        Ok(used as isize)
    }))
}

// ---- DIR streams ------------------------------------------------------------------

/// A directory stream of ours, returned as a `DIR *`. Its first word is a
/// magic number that no glibc DIR can start with (glibc's begins with the
/// descriptor number and a lock word), so every DIR-taking function can
/// tell the two apart.
#[repr(C)]
struct FerriteDir {
    /// Read through the raw pointer by `ours`, never by name.
    #[allow(dead_code)]
    magic: u64,
    fd: c_int,
    loc: u64,
    batch: Vec<Ent>,
    next: usize,
    ent: libc::dirent64,
}

const DIR_MAGIC: u64 = 0x4645_5252_4449_5221;

unsafe fn ours<'a>(d: *mut libc::DIR) -> Option<&'a mut FerriteDir> {
    if d.is_null() {
        return None;
    }
    // SAFETY: any DIR (ours or glibc's) is at least 8 readable bytes.
    let magic = unsafe { (d as *const u64).read_unaligned() };
    if magic != DIR_MAGIC {
        return None;
    }
    // SAFETY: the magic says it is one of ours.
    Some(unsafe { &mut *(d as *mut FerriteDir) })
}

fn new_dir(fd: c_int) -> *mut libc::DIR {
    // SAFETY: dirent64 is plain integers: all-zero is valid.
    let ent = unsafe { std::mem::zeroed() };
    Box::into_raw(Box::new(FerriteDir { magic: DIR_MAGIC, fd, loc: 0, batch: Vec::new(), next: 0, ent }))
        as *mut libc::DIR
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    if let Some(p) = active() {
        if let Ok(bytes) = unsafe { cstr(path) } {
            if let super::paths::Route::Pool(d, rel) = p.route(libc::AT_FDCWD, bytes) {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
                return match p.open(d, &rel, flags, 0) {
                    Ok(n) => new_dir(n),
                    Err(e) => fail(e),
                };
            }
        }
    }
    unsafe { real::opendir(path) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(n: c_int) -> *mut libc::DIR {
    if let Some(p) = if is_ferrite(n) { active() } else { None } {
        return match inside(|| p.session.fstat(fd(n))) {
            Ok(st) if st.kind == engine::FileType::Directory => new_dir(n),
            Ok(_) => fail(Errno::ENOTDIR),
            Err(e) => fail(e),
        };
    }
    unsafe { real::fdopendir(n) }
}

/// The next entry of one of our streams, or None at the end (errno set on
/// an error, unchanged at the end).
fn next_entry(d: &mut FerriteDir) -> Option<*mut libc::dirent64> {
    let p = active()?;
    if d.next >= d.batch.len() {
        match inside(|| entries(p, d.fd, d.loc, 128)) {
            Ok(b) => {
                d.batch = b;
                d.next = 0;
            }
            Err(e) => {
                crate::conv::set_errno(e.0);
                return None;
            }
        }
        if d.batch.is_empty() {
            return None;
        }
    }
    let e = &d.batch[d.next];
    d.next += 1;
    d.loc = e.next;
    d.ent.d_ino = e.ino;
    d.ent.d_off = e.next as i64;
    d.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    d.ent.d_type = e.dtype;
    let k = e.name.len().min(255);
    for (i, c) in e.name[..k].iter().enumerate() {
        d.ent.d_name[i] = *c as c_char;
    }
    d.ent.d_name[k] = 0;
    Some(&mut d.ent)
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    if let Some(fd) = unsafe { ours(d) } {
        return next_entry(fd).unwrap_or(std::ptr::null_mut());
    }
    unsafe { real::readdir64(d) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent {
    if let Some(fd) = unsafe { ours(d) } {
        // struct dirent and struct dirent64 are the same on 64-bit Linux.
        return next_entry(fd).map(|e| e as *mut libc::dirent).unwrap_or(std::ptr::null_mut());
    }
    unsafe { real::readdir(d) }
}

const _: () = assert!(std::mem::size_of::<libc::dirent>() == std::mem::size_of::<libc::dirent64>());

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut libc::DIR,
    e: *mut libc::dirent64,
    out: *mut *mut libc::dirent64,
) -> c_int {
    if let Some(fd) = unsafe { ours(d) } {
        let saved = crate::conv::errno();
        crate::conv::set_errno(0);
        let r = next_entry(fd);
        let err = crate::conv::errno();
        crate::conv::set_errno(saved);
        // SAFETY: the caller's entry and result pointers.
        unsafe {
            match r {
                Some(x) => {
                    std::ptr::copy_nonoverlapping(x, e, 1);
                    *out = e;
                }
                None => *out = std::ptr::null_mut(),
            }
        }
        return err;
    }
    unsafe { real::readdir64_r(d, e, out) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(d: *mut libc::DIR, e: *mut libc::dirent, out: *mut *mut libc::dirent) -> c_int {
    if unsafe { ours(d) }.is_some() {
        return unsafe { readdir64_r(d, e as *mut libc::dirent64, out as *mut *mut libc::dirent64) };
    }
    unsafe { real::readdir_r(d, e, out) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    if unsafe { ours(d) }.is_some() {
        // SAFETY: ours, made by Box::into_raw in `new_dir`.
        let b = unsafe { Box::from_raw(d as *mut FerriteDir) };
        let n = b.fd;
        drop(b);
        return unsafe { super::hooks::close(n) };
    }
    unsafe { real::closedir(d) }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    if let Some(fd) = unsafe { ours(d) } {
        return fd.fd;
    }
    unsafe { real::dirfd(d) }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    if let Some(fd) = unsafe { ours(d) } {
        fd.loc = 0;
        fd.batch.clear();
        fd.next = 0;
        return;
    }
    unsafe { real::rewinddir(d) }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, loc: c_long) {
    if let Some(fd) = unsafe { ours(d) } {
        fd.loc = loc.max(0) as u64;
        fd.batch.clear();
        fd.next = 0;
        return;
    }
    unsafe { real::seekdir(d, loc) }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> c_long {
    if let Some(fd) = unsafe { ours(d) } {
        return fd.loc as c_long;
    }
    unsafe { real::telldir(d) }
}

type Filter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
type Compar = Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// scandir over one of our streams: glibc's own scandir would open the
/// directory with its internal opendir, which bypasses interception.
unsafe fn scan(d: *mut libc::DIR, list: *mut *mut *mut libc::dirent64, filter: Filter, compar: Compar) -> c_int {
    let mut v: Vec<*mut libc::dirent64> = Vec::new();
    let saved = crate::conv::errno();
    crate::conv::set_errno(0);
    loop {
        let e = unsafe { readdir64(d) };
        if e.is_null() {
            break;
        }
        if let Some(f) = filter {
            // SAFETY: the caller's filter, on an entry we own.
            if unsafe { f(e) } == 0 {
                continue;
            }
        }
        // SAFETY: a fresh allocation of one dirent64, filled by copy.
        let m = unsafe { libc::malloc(std::mem::size_of::<libc::dirent64>()) } as *mut libc::dirent64;
        if m.is_null() {
            crate::conv::set_errno(libc::ENOMEM);
            break;
        }
        // SAFETY: `m` is a fresh dirent64 allocation, `e` our entry.
        unsafe { std::ptr::copy_nonoverlapping(e, m, 1) };
        v.push(m);
    }
    let err = crate::conv::errno();
    if err != 0 {
        for m in v {
            // SAFETY: allocations made above.
            unsafe { libc::free(m.cast()) };
        }
        unsafe { closedir(d) };
        crate::conv::set_errno(err);
        return -1;
    }
    unsafe { closedir(d) };
    crate::conv::set_errno(saved);
    if let Some(c) = compar {
        v.sort_by(|a, b| {
            let (mut a, mut b) = (*a as *const libc::dirent64, *b as *const libc::dirent64);
            // SAFETY: the caller's comparison on two of our entries.
            unsafe { c(&mut a, &mut b) }.cmp(&0)
        });
    }
    // SAFETY: an array of the entries, which the caller frees.
    let arr = unsafe { libc::malloc(v.len().max(1) * std::mem::size_of::<*mut libc::dirent64>()) }
        as *mut *mut libc::dirent64;
    if arr.is_null() {
        return fail(Errno::ENOMEM);
    }
    for (i, m) in v.iter().enumerate() {
        // SAFETY: `arr` holds v.len() pointers.
        unsafe { *arr.add(i) = *m };
    }
    // SAFETY: the caller's result pointer.
    unsafe { *list = arr };
    v.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    let pool = active()
        .and_then(|p| unsafe { cstr(path) }.ok().map(|b| p.route(libc::AT_FDCWD, b)))
        .map(|r| matches!(r, super::paths::Route::Pool(..)))
        .unwrap_or(false);
    if pool {
        let d = unsafe { opendir(path) };
        if d.is_null() {
            return -1;
        }
        return unsafe { scan(d, list, filter, compar) };
    }
    unsafe { real_scandir64(path, list, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    unsafe { scandir64(path, list, filter, compar) }
}

unsafe fn real_scandir64(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int;
    static P: std::sync::atomic::AtomicPtr<c_void> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    let mut f = P.load(std::sync::atomic::Ordering::Relaxed);
    if f.is_null() {
        // SAFETY: looking up glibc's scandir64.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"scandir64".as_ptr()) };
        P.store(f, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: glibc's scandir64, with its own prototype.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(f) };
    unsafe { f(path, list, filter, compar) }
}
