//! The C library's own functions, found with `dlsym(RTLD_NEXT, name)`: what
//! an intercepted call becomes when it is not Ferrite's (a path outside the
//! root, a kernel descriptor), and what the library itself uses.
//!
//! Each function is looked up once, on its first use, and kept in an atomic
//! pointer. `dlsym` may allocate, which is safe here: the library never
//! intercepts `malloc` and friends.

use libc::{c_char, c_int, c_void};

/// Declare `pub unsafe fn NAME(args) -> ret` that calls the next definition
/// of `NAME` (glibc's). A `...` after the fixed arguments declares the
/// function pointer variadic, as the C function is (`open`, `fcntl`), so the
/// call follows the variadic calling convention.
macro_rules! real {
    ($( $name:ident ( $($arg:ident : $ty:ty),* $(; $($var:ident : $vty:ty),+)? ) -> $ret:ty ;)*) => {
        $(
            #[allow(clippy::missing_safety_doc, clippy::too_many_arguments)]
            pub unsafe fn $name($($arg: $ty),* $(, $($var: $vty),+)?) -> $ret {
                static P: std::sync::atomic::AtomicPtr<c_void> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
                let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
                if p.is_null() {
                    p = lookup(concat!(stringify!($name), "\0").as_bytes());
                    P.store(p, std::sync::atomic::Ordering::Relaxed);
                }
                real!(@call p, ($($arg: $ty),*) $(; ($($var: $vty),+))? -> $ret)
            }
        )*
    };
    (@call $p:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty) => {{
        // SAFETY: `$p` is the C library's definition of this very function,
        // whose prototype is the one declared here.
        let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute($p) };
        unsafe { f($($arg),*) }
    }};
    (@call $p:ident, ($($arg:ident : $ty:ty),*); ($($var:ident : $vty:ty),+) -> $ret:ty) => {{
        // SAFETY: as above; the C function is variadic and is called so.
        let f: unsafe extern "C" fn($($ty),*, ...) -> $ret = unsafe { std::mem::transmute($p) };
        unsafe { f($($arg),*, $($var),+) }
    }};
}

/// The next definition of `name` (NUL-terminated) after this library;
/// aborts with a message if there is none, since every name looked up here
/// is one glibc defines.
fn lookup(name: &[u8]) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    if p.is_null() {
        let msg = b"libferrite: a C library function is missing\n";
        // SAFETY: writing a static buffer to standard error.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    p
}

pub type Off = libc::off64_t;

real! {
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
    initgroups(user: *const c_char, group: libc::gid_t) -> c_int;
}

real! {
    open(path: *const c_char, flags: c_int; mode: libc::mode_t) -> c_int;
    open64(path: *const c_char, flags: c_int; mode: libc::mode_t) -> c_int;
    openat(dirfd: c_int, path: *const c_char, flags: c_int; mode: libc::mode_t) -> c_int;
    openat64(dirfd: c_int, path: *const c_char, flags: c_int; mode: libc::mode_t) -> c_int;
    __open_2(path: *const c_char, flags: c_int) -> c_int;
    __open64_2(path: *const c_char, flags: c_int) -> c_int;
    __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    close(fd: c_int) -> c_int;
    close_range(first: libc::c_uint, last: libc::c_uint, flags: c_int) -> c_int;
    read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize;
    writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize;
    pread(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t) -> isize;
    pread64(fd: c_int, buf: *mut c_void, n: usize, off: Off) -> isize;
    pwrite(fd: c_int, buf: *const c_void, n: usize, off: libc::off_t) -> isize;
    pwrite64(fd: c_int, buf: *const c_void, n: usize, off: Off) -> isize;
    preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: libc::off_t) -> isize;
    preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> isize;
    pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: libc::off_t) -> isize;
    pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> isize;
    preadv2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: libc::off_t, flags: c_int) -> isize;
    preadv64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off, flags: c_int) -> isize;
    pwritev2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: libc::off_t, flags: c_int) -> isize;
    pwritev64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off, flags: c_int) -> isize;
    __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize;
    __pread_chk(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t, buflen: usize) -> isize;
    __pread64_chk(fd: c_int, buf: *mut c_void, n: usize, off: Off, buflen: usize) -> isize;
    lseek(fd: c_int, off: libc::off_t, whence: c_int) -> libc::off_t;
    lseek64(fd: c_int, off: Off, whence: c_int) -> Off;
    stat(path: *const c_char, st: *mut libc::stat) -> c_int;
    stat64(path: *const c_char, st: *mut libc::stat64) -> c_int;
    lstat(path: *const c_char, st: *mut libc::stat) -> c_int;
    lstat64(path: *const c_char, st: *mut libc::stat64) -> c_int;
    fstat(fd: c_int, st: *mut libc::stat) -> c_int;
    fstat64(fd: c_int, st: *mut libc::stat64) -> c_int;
    fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int;
    __xstat(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    __xstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int;
    __lxstat(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    __lxstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int;
    __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int;
    __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int;
    __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int;
    statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: libc::c_uint, st: *mut libc::statx) -> c_int;
    fcntl(fd: c_int, cmd: c_int; arg: usize) -> c_int;
    flock(fd: c_int, op: c_int) -> c_int;
    lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int;
    lockf64(fd: c_int, cmd: c_int, len: Off) -> c_int;
    dup(fd: c_int) -> c_int;
    dup2(fd: c_int, newfd: c_int) -> c_int;
    dup3(fd: c_int, newfd: c_int, flags: c_int) -> c_int;
    fsync(fd: c_int) -> c_int;
    fdatasync(fd: c_int) -> c_int;
    sync_file_range(fd: c_int, off: Off, n: Off, flags: libc::c_uint) -> c_int;
    syncfs(fd: c_int) -> c_int;
    sync() -> ();
    truncate(path: *const c_char, len: libc::off_t) -> c_int;
    truncate64(path: *const c_char, len: Off) -> c_int;
    ftruncate(fd: c_int, len: libc::off_t) -> c_int;
    ftruncate64(fd: c_int, len: Off) -> c_int;
    fallocate(fd: c_int, mode: c_int, off: libc::off_t, len: libc::off_t) -> c_int;
    fallocate64(fd: c_int, mode: c_int, off: Off, len: Off) -> c_int;
    posix_fallocate(fd: c_int, off: libc::off_t, len: libc::off_t) -> c_int;
    posix_fallocate64(fd: c_int, off: Off, len: Off) -> c_int;
    posix_fadvise(fd: c_int, off: libc::off_t, len: libc::off_t, advice: c_int) -> c_int;
    posix_fadvise64(fd: c_int, off: Off, len: Off, advice: c_int) -> c_int;
    unlink(path: *const c_char) -> c_int;
    unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    rmdir(path: *const c_char) -> c_int;
    mkdir(path: *const c_char, mode: libc::mode_t) -> c_int;
    mkdirat(dirfd: c_int, path: *const c_char, mode: libc::mode_t) -> c_int;
    rename(old: *const c_char, new: *const c_char) -> c_int;
    renameat(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char) -> c_int;
    renameat2(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: libc::c_uint) -> c_int;
    link(old: *const c_char, new: *const c_char) -> c_int;
    linkat(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: c_int) -> c_int;
    symlink(target: *const c_char, path: *const c_char) -> c_int;
    symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int;
    readlink(path: *const c_char, buf: *mut c_char, n: usize) -> isize;
    readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: usize) -> isize;
    __readlink_chk(path: *const c_char, buf: *mut c_char, n: usize, buflen: usize) -> isize;
    __readlinkat_chk(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: usize, buflen: usize) -> isize;
    mknod(path: *const c_char, mode: libc::mode_t, dev: libc::dev_t) -> c_int;
    mknodat(dirfd: c_int, path: *const c_char, mode: libc::mode_t, dev: libc::dev_t) -> c_int;
    mkfifo(path: *const c_char, mode: libc::mode_t) -> c_int;
    mkfifoat(dirfd: c_int, path: *const c_char, mode: libc::mode_t) -> c_int;
    chmod(path: *const c_char, mode: libc::mode_t) -> c_int;
    fchmod(fd: c_int, mode: libc::mode_t) -> c_int;
    fchmodat(dirfd: c_int, path: *const c_char, mode: libc::mode_t, flags: c_int) -> c_int;
    chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int;
    utime(path: *const c_char, times: *const libc::utimbuf) -> c_int;
    utimes(path: *const c_char, times: *const libc::timeval) -> c_int;
    lutimes(path: *const c_char, times: *const libc::timeval) -> c_int;
    futimes(fd: c_int, times: *const libc::timeval) -> c_int;
    futimesat(dirfd: c_int, path: *const c_char, times: *const libc::timeval) -> c_int;
    utimensat(dirfd: c_int, path: *const c_char, times: *const libc::timespec, flags: c_int) -> c_int;
    futimens(fd: c_int, times: *const libc::timespec) -> c_int;
    access(path: *const c_char, mode: c_int) -> c_int;
    faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    euidaccess(path: *const c_char, mode: c_int) -> c_int;
    chdir(path: *const c_char) -> c_int;
    fchdir(fd: c_int) -> c_int;
    getcwd(buf: *mut c_char, n: usize) -> *mut c_char;
    get_current_dir_name() -> *mut c_char;
    __getcwd_chk(buf: *mut c_char, n: usize, buflen: usize) -> *mut c_char;
    realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char;
    __realpath_chk(path: *const c_char, resolved: *mut c_char, buflen: usize) -> *mut c_char;
    canonicalize_file_name(path: *const c_char) -> *mut c_char;
    opendir(path: *const c_char) -> *mut libc::DIR;
    fdopendir(fd: c_int) -> *mut libc::DIR;
    readdir(d: *mut libc::DIR) -> *mut libc::dirent;
    readdir64(d: *mut libc::DIR) -> *mut libc::dirent64;
    readdir_r(d: *mut libc::DIR, e: *mut libc::dirent, out: *mut *mut libc::dirent) -> c_int;
    readdir64_r(d: *mut libc::DIR, e: *mut libc::dirent64, out: *mut *mut libc::dirent64) -> c_int;
    closedir(d: *mut libc::DIR) -> c_int;
    dirfd(d: *mut libc::DIR) -> c_int;
    rewinddir(d: *mut libc::DIR) -> ();
    seekdir(d: *mut libc::DIR, loc: libc::c_long) -> ();
    telldir(d: *mut libc::DIR) -> libc::c_long;
    getdents64(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE;
    fileno(f: *mut libc::FILE) -> c_int;
    fileno_unlocked(f: *mut libc::FILE) -> c_int;
    mkstemp(template: *mut c_char) -> c_int;
    mkstemp64(template: *mut c_char) -> c_int;
    mkostemp(template: *mut c_char, flags: c_int) -> c_int;
    mkostemp64(template: *mut c_char, flags: c_int) -> c_int;
    mkstemps(template: *mut c_char, suffixlen: c_int) -> c_int;
    mkostemps(template: *mut c_char, suffixlen: c_int, flags: c_int) -> c_int;
    mkdtemp(template: *mut c_char) -> *mut c_char;
    getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, n: usize) -> isize;
    lgetxattr(path: *const c_char, name: *const c_char, value: *mut c_void, n: usize) -> isize;
    fgetxattr(fd: c_int, name: *const c_char, value: *mut c_void, n: usize) -> isize;
    setxattr(path: *const c_char, name: *const c_char, value: *const c_void, n: usize, flags: c_int) -> c_int;
    lsetxattr(path: *const c_char, name: *const c_char, value: *const c_void, n: usize, flags: c_int) -> c_int;
    fsetxattr(fd: c_int, name: *const c_char, value: *const c_void, n: usize, flags: c_int) -> c_int;
    listxattr(path: *const c_char, list: *mut c_char, n: usize) -> isize;
    llistxattr(path: *const c_char, list: *mut c_char, n: usize) -> isize;
    flistxattr(fd: c_int, list: *mut c_char, n: usize) -> isize;
    removexattr(path: *const c_char, name: *const c_char) -> c_int;
    lremovexattr(path: *const c_char, name: *const c_char) -> c_int;
    fremovexattr(fd: c_int, name: *const c_char) -> c_int;
    statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int;
    statfs64(path: *const c_char, buf: *mut libc::statfs64) -> c_int;
    fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int;
    fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int;
    statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int;
    statvfs64(path: *const c_char, buf: *mut libc::statvfs64) -> c_int;
    fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int;
    fstatvfs64(fd: c_int, buf: *mut libc::statvfs64) -> c_int;
    copy_file_range(fdin: c_int, offin: *mut Off, fdout: c_int, offout: *mut Off, n: usize, flags: libc::c_uint) -> isize;
    syscall(n: libc::c_long; a: libc::c_long, b: libc::c_long, c: libc::c_long, d: libc::c_long, e: libc::c_long, f: libc::c_long) -> libc::c_long;
    sendfile(out: c_int, inp: c_int, off: *mut libc::off_t, n: usize) -> isize;
    sendfile64(out: c_int, inp: c_int, off: *mut Off, n: usize) -> isize;
    splice(fdin: c_int, offin: *mut Off, fdout: c_int, offout: *mut Off, n: usize, flags: libc::c_uint) -> isize;
    ioctl(fd: c_int, req: libc::c_ulong; arg: usize) -> c_int;
    mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> *mut c_void;
    munmap(addr: *mut c_void, len: usize) -> c_int;
    mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int;
    execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    posix_spawn(
        pid: *mut libc::pid_t,
        path: *const c_char,
        actions: *const libc::posix_spawn_file_actions_t,
        attr: *const libc::posix_spawnattr_t,
        argv: *const *mut c_char,
        envp: *const *mut c_char
    ) -> c_int;
    posix_spawnp(
        pid: *mut libc::pid_t,
        file: *const c_char,
        actions: *const libc::posix_spawn_file_actions_t,
        attr: *const libc::posix_spawnattr_t,
        argv: *const *mut c_char,
        envp: *const *mut c_char
    ) -> c_int;
    posix_spawn_file_actions_adddup2(actions: *mut libc::posix_spawn_file_actions_t, fd: c_int, newfd: c_int) -> c_int;
    posix_spawn_file_actions_destroy(actions: *mut libc::posix_spawn_file_actions_t) -> c_int;
    system(command: *const c_char) -> c_int;
    popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    mremap(addr: *mut c_void, old: usize, new: usize, flags: c_int; newaddr: *mut c_void) -> *mut c_void;
}
