//! Differential test of the model against the Linux kernel itself: random
//! sequences of path and descriptor operations run on the model and, through
//! libc, on a tmpfs directory (/dev/shm) that the process chroots into (so
//! absolute symlinks and ".." at the root behave as in the model). Every
//! result (errno, bytes read, stat fields other than times, blocks and the
//! size of directories, readlink, the set of directory entries) must agree,
//! and every few operations the whole trees (tree_of of the host vs
//! ModelFs::tree, normalized the same way) must be equal.
//!
//! Operations whose outcome the brief fixes differently from Linux are not
//! generated or not compared: SEEK_DATA/SEEK_HOLE on a file that saw
//! fallocate (tmpfs counts allocated-but-unwritten pages as holes), O_TRUNC without write access, rename of "/", "." or "..",
//! O_CREAT|O_DIRECTORY, sizes near the limits, and running out of space.
//! Set-user-id and set-group-id bits are generated on every kind of file,
//! and `security.capability` (a well-formed value) among the extended
//! attributes, so the privileges a write, truncate, fallocate or chown
//! takes away are compared too.
//!
//! The sequences include the `*at` calls (relative paths from the current
//! directory, from open directory descriptors, O_PATH descriptors, bad
//! descriptors, AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW/FOLLOW, AT_REMOVEDIR),
//! descriptor calls (fchmod, fchown, futimens, f*xattr on user.* and
//! trusted.*, dup/dup2/dup3 sharing offsets and O_APPEND, FD_CLOEXEC,
//! F_GETFL/F_SETFL), chdir/fchdir/getcwd (a removed cwd included). A second
//! run, in a forked child, first makes (as root) directories with every
//! kind of permission (world-writable, sticky, private, group, set-group-id,
//! read-only) and then switches between root and four other credentials
//! (groups and a umask included) on both sides: the child's real, effective
//! and fs ids change with setresuid/setresgid/setgroups, the model gets the
//! same `Credentials`. It must see EACCES and EPERM agree, proving that the
//! permission rules (search, read/write, sticky, chmod/chown/utimens
//! ownership, set-group-id inheritance and clearing, faccessat, trusted.*)
//! match the kernel's. Left out there: links another user's file (Linux's
//! fs.protected_hardlinks, a sysctl), and the run is skipped when other
//! fs.protected_* sysctls are on.
//!
//! FERRITE_DIFF_SEEDS (default 40), FERRITE_DIFF_CRED_SEEDS (default 30) and
//! FERRITE_DIFF_OPS (default 400) set the amount of work; FERRITE_DIFF_SEED
//! replays one root sequence, FERRITE_DIFF_FULL_LOG prints every op. Runs only as root with a tmpfs /dev/shm; otherwise it says so and passes.
//! This file holds a single test because chroot and umask are per process.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::sync::Arc;

use ferrite::{
    Credentials, DirEntry, Errno, FallocateMode, Fd, FileType, FsResult, InodeNo, ManualClock, OpenFlags, PathFs,
    RenameFlags, Stat, StatFs, TimeSet, TimeSpec, Whence, XattrSetMode, AT_FDCWD,
};
use ferrite_model::{tree_of, ModelFs, Tree};

// ----- the host file system through libc ---------------------------------

struct HostFs {
    creds: std::sync::Mutex<Credentials>,
}

fn cpath(path: &[u8]) -> CString {
    CString::new(path).expect("generated paths have no NUL")
}

fn errno() -> Errno {
    Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
}

fn check(r: libc::c_int) -> FsResult<()> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

fn check_len(r: isize) -> FsResult<usize> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

fn to_stat(st: &libc::stat) -> Stat {
    let kind = FileType::from_mode(st.st_mode).expect("a known file type");
    let t = |sec: i64, nsec: i64| TimeSpec { sec, nsec: nsec as u32 };
    Stat {
        ino: InodeNo(st.st_ino),
        kind,
        perm: st.st_mode & 0o7777,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        blksize: st.st_blksize as u32,
        rdev: st.st_rdev,
    }
}

fn host_time(t: TimeSet) -> libc::timespec {
    match t {
        TimeSet::Omit => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        TimeSet::Now => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        TimeSet::At(ts) => libc::timespec { tv_sec: ts.sec, tv_nsec: ts.nsec as i64 },
    }
}

/// The raw number of a descriptor (AT_FDCWD stays -100).
fn raw(fd: Fd) -> i32 {
    fd.0 as i64 as i32
}

/// Host open flags of `f`.
fn host_flags(f: OpenFlags) -> i32 {
    let mut flags = match (f.read, f.write) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    for (on, bit) in [
        (f.create, libc::O_CREAT),
        (f.excl, libc::O_EXCL),
        (f.trunc, libc::O_TRUNC),
        (f.append, libc::O_APPEND),
        (f.directory, libc::O_DIRECTORY),
        (f.nofollow, libc::O_NOFOLLOW),
        (f.path, libc::O_PATH),
        (f.sync, libc::O_SYNC),
        (f.dsync, libc::O_DSYNC),
        (f.cloexec, libc::O_CLOEXEC),
    ] {
        if on {
            flags |= bit;
        }
    }
    flags
}

fn host_stat(dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatat(raw(dirfd), cpath(path).as_ptr(), &mut st, flags) }).map(|_| to_stat(&st))
}

impl PathFs for HostFs {
    fn openat(&self, dirfd: Fd, path: &[u8], f: OpenFlags, perm: u32) -> FsResult<Fd> {
        let fd = unsafe { libc::openat(raw(dirfd), cpath(path).as_ptr(), host_flags(f), perm as libc::c_uint) };
        check(fd).map(|_| Fd(fd as u64))
    }
    fn close(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::close(raw(fd)) })
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        check_len(unsafe { libc::pread(raw(fd), buf.as_mut_ptr().cast(), buf.len(), offset as i64) })
    }
    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        check_len(unsafe { libc::pwrite(raw(fd), data.as_ptr().cast(), data.len(), offset as i64) })
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        check_len(unsafe { libc::read(raw(fd), buf.as_mut_ptr().cast(), buf.len()) })
    }
    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        check_len(unsafe { libc::write(raw(fd), data.as_ptr().cast(), data.len()) })
    }
    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        let w = match whence {
            Whence::Set => libc::SEEK_SET,
            Whence::Cur => libc::SEEK_CUR,
            Whence::End => libc::SEEK_END,
            Whence::Data => libc::SEEK_DATA,
            Whence::Hole => libc::SEEK_HOLE,
        };
        let r = unsafe { libc::lseek(raw(fd), offset, w) };
        check_len(r as isize).map(|v| v as u64)
    }
    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        check(unsafe { libc::ftruncate(raw(fd), size as i64) })
    }
    fn fsync(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::fsync(raw(fd)) })
    }
    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::fdatasync(raw(fd)) })
    }
    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let m = match mode {
            FallocateMode::Default => 0,
            FallocateMode::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
            FallocateMode::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            // Not generated here: tmpfs answers EOPNOTSUPP to both.
            FallocateMode::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
            FallocateMode::ZeroRangeKeepSize => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        };
        check(unsafe { libc::fallocate(raw(fd), m, offset as i64, len as i64) })
    }
    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(raw(fd), &mut st) }).map(|_| to_stat(&st))
    }
    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        check(unsafe { libc::truncate(cpath(path).as_ptr(), size as i64) })
    }
    fn mkdirat(&self, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()> {
        check(unsafe { libc::mkdirat(raw(dirfd), cpath(path).as_ptr(), perm) })
    }
    fn mknodat(&self, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        check(unsafe { libc::mknodat(raw(dirfd), cpath(path).as_ptr(), mode, rdev) })
    }
    fn unlinkat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()> {
        check(unsafe { libc::unlinkat(raw(dirfd), cpath(path).as_ptr(), flags) })
    }
    fn renameat2(&self, olddirfd: Fd, from: &[u8], newdirfd: Fd, to: &[u8], flags: RenameFlags) -> FsResult<()> {
        let f = match flags {
            RenameFlags::Replace => 0,
            RenameFlags::NoReplace => libc::RENAME_NOREPLACE,
            RenameFlags::Exchange => libc::RENAME_EXCHANGE,
        };
        let (a, b) = (cpath(from), cpath(to));
        check(unsafe { libc::renameat2(raw(olddirfd), a.as_ptr(), raw(newdirfd), b.as_ptr(), f) })
    }
    fn linkat(&self, olddirfd: Fd, existing: &[u8], newdirfd: Fd, new: &[u8], flags: i32) -> FsResult<()> {
        let (a, b) = (cpath(existing), cpath(new));
        check(unsafe { libc::linkat(raw(olddirfd), a.as_ptr(), raw(newdirfd), b.as_ptr(), flags) })
    }
    fn symlinkat(&self, target: &[u8], newdirfd: Fd, linkpath: &[u8]) -> FsResult<()> {
        let (a, b) = (cpath(target), cpath(linkpath));
        check(unsafe { libc::symlinkat(a.as_ptr(), raw(newdirfd), b.as_ptr()) })
    }
    fn readlinkat(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; 8192];
        let n = check_len(unsafe {
            libc::readlinkat(raw(dirfd), cpath(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        })?;
        buf.truncate(n);
        Ok(buf)
    }
    fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
        host_stat(dirfd, path, flags)
    }
    fn fchmodat(&self, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()> {
        // fchmodat2 (Linux 6.6) takes the flags; glibc's fchmodat would
        // emulate AT_SYMLINK_NOFOLLOW through /proc.
        let r = unsafe { libc::syscall(452, raw(dirfd), cpath(path).as_ptr(), perm, flags) };
        check(r as i32)
    }
    fn fchownat(&self, dirfd: Fd, path: &[u8], uid: Option<u32>, gid: Option<u32>, flags: i32) -> FsResult<()> {
        let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
        check(unsafe { libc::fchownat(raw(dirfd), cpath(path).as_ptr(), u, g, flags) })
    }
    fn utimensat(&self, dirfd: Fd, path: &[u8], atime: TimeSet, mtime: TimeSet, flags: i32) -> FsResult<()> {
        let times = [host_time(atime), host_time(mtime)];
        check(unsafe { libc::utimensat(raw(dirfd), cpath(path).as_ptr(), times.as_ptr(), flags) })
    }
    fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()> {
        // faccessat2: the kernel's own flag handling (glibc may emulate).
        let r = unsafe { libc::syscall(libc::SYS_faccessat2, raw(dirfd), cpath(path).as_ptr(), mode, flags) };
        check(r as i32)
    }
    fn fchmod(&self, fd: Fd, perm: u32) -> FsResult<()> {
        check(unsafe { libc::fchmod(raw(fd), perm) })
    }
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        check(unsafe { libc::fchown(raw(fd), uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX)) })
    }
    fn futimens(&self, fd: Fd, atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        let times = [host_time(atime), host_time(mtime)];
        check(unsafe { libc::futimens(raw(fd), times.as_ptr()) })
    }
    fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; 65536];
        let n =
            check_len(unsafe { libc::fgetxattr(raw(fd), cpath(name).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
        buf.truncate(n);
        Ok(buf)
    }
    fn fsetxattr(&self, fd: Fd, name: &[u8], value: &[u8], mode: XattrSetMode) -> FsResult<()> {
        let m = match mode {
            XattrSetMode::Any => 0,
            XattrSetMode::Create => libc::XATTR_CREATE,
            XattrSetMode::Replace => libc::XATTR_REPLACE,
        };
        check(unsafe { libc::fsetxattr(raw(fd), cpath(name).as_ptr(), value.as_ptr().cast(), value.len(), m) })
    }
    fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>> {
        let mut buf = vec![0u8; 65536];
        let n = check_len(unsafe { libc::flistxattr(raw(fd), buf.as_mut_ptr().cast(), buf.len()) })?;
        let mut names: Vec<Vec<u8>> =
            buf[..n].split(|&b| b == 0).filter(|n| !n.is_empty()).map(|n| n.to_vec()).collect();
        names.sort();
        Ok(names)
    }
    fn fremovexattr(&self, fd: Fd, name: &[u8]) -> FsResult<()> {
        check(unsafe { libc::fremovexattr(raw(fd), cpath(name).as_ptr()) })
    }
    fn dup(&self, fd: Fd) -> FsResult<Fd> {
        let r = unsafe { libc::dup(raw(fd)) };
        check(r).map(|_| Fd(r as u64))
    }
    fn dup3(&self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd> {
        let r = unsafe { libc::dup3(raw(fd), raw(newfd), if cloexec { libc::O_CLOEXEC } else { 0 }) };
        check(r).map(|_| Fd(r as u64))
    }
    fn dup2(&self, fd: Fd, newfd: Fd) -> FsResult<Fd> {
        let r = unsafe { libc::dup2(raw(fd), raw(newfd)) };
        check(r).map(|_| Fd(r as u64))
    }
    fn get_cloexec(&self, fd: Fd) -> FsResult<bool> {
        let r = unsafe { libc::fcntl(raw(fd), libc::F_GETFD) };
        check(r).map(|_| r & libc::FD_CLOEXEC != 0)
    }
    fn set_cloexec(&self, fd: Fd, cloexec: bool) -> FsResult<()> {
        check(unsafe { libc::fcntl(raw(fd), libc::F_SETFD, if cloexec { libc::FD_CLOEXEC } else { 0 }) })
    }
    fn getfl(&self, fd: Fd) -> FsResult<OpenFlags> {
        let r = unsafe { libc::fcntl(raw(fd), libc::F_GETFL) };
        check(r).map(|_| OpenFlags::from_libc(r))
    }
    fn setfl_append(&self, fd: Fd, append: bool) -> FsResult<()> {
        let r = unsafe { libc::fcntl(raw(fd), libc::F_GETFL) };
        check(r)?;
        let fl = if append { r | libc::O_APPEND } else { r & !libc::O_APPEND };
        check(unsafe { libc::fcntl(raw(fd), libc::F_SETFL, fl) })
    }
    fn chdir(&self, path: &[u8]) -> FsResult<()> {
        check(unsafe { libc::chdir(cpath(path).as_ptr()) })
    }
    fn fchdir(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::fchdir(raw(fd)) })
    }
    fn getcwd(&self) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; 8192];
        let p = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if p.is_null() {
            return Err(errno());
        }
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(n);
        Ok(buf)
    }
    fn credentials(&self) -> Credentials {
        self.creds.lock().unwrap().clone()
    }
    /// Switch the whole process's ids (real, effective and fs, keeping
    /// saved uid 0 so that root can be regained): only in a forked child.
    fn set_credentials(&self, c: Credentials) {
        unsafe {
            assert_eq!(libc::setresuid(0, 0, 0), 0, "regain root");
            assert_eq!(libc::setgroups(c.groups.len(), c.groups.as_ptr()), 0, "setgroups");
            assert_eq!(libc::setresgid(c.gid, c.gid, 0), 0, "setresgid");
            assert_eq!(libc::setresuid(c.uid, c.uid, 0), 0, "setresuid");
            libc::umask(c.umask);
        }
        *self.creds.lock().unwrap() = c;
    }
    /// getdents64 from position `cookie`; the descriptor's position is
    /// restored afterwards so that it stays comparable with the model's.
    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let raw = raw(fd);
        let saved = unsafe { libc::lseek(raw, 0, libc::SEEK_CUR) };
        if saved < 0 {
            return Err(errno());
        }
        let result = (|| {
            if unsafe { libc::lseek(raw, cookie as i64, libc::SEEK_SET) } < 0 {
                return Err(errno());
            }
            let mut out = Vec::new();
            let mut buf = vec![0u8; 32 * 1024];
            while out.len() < max {
                let n = unsafe { libc::syscall(libc::SYS_getdents64, raw, buf.as_mut_ptr(), buf.len()) };
                if n < 0 {
                    return Err(errno());
                }
                if n == 0 {
                    break;
                }
                let mut off = 0usize;
                while off < n as usize && out.len() < max {
                    let ino = u64::from_ne_bytes(buf[off..off + 8].try_into().unwrap());
                    let d_off = i64::from_ne_bytes(buf[off + 8..off + 16].try_into().unwrap());
                    let reclen = u16::from_ne_bytes(buf[off + 16..off + 18].try_into().unwrap()) as usize;
                    let dtype = buf[off + 18];
                    let name_bytes = &buf[off + 19..off + reclen];
                    let name = name_bytes[..name_bytes.iter().position(|&b| b == 0).unwrap()].to_vec();
                    off += reclen;
                    if name == b"." || name == b".." {
                        continue;
                    }
                    let kind = match dtype {
                        libc::DT_DIR => FileType::Directory,
                        libc::DT_LNK => FileType::Symlink,
                        libc::DT_SOCK => FileType::Socket,
                        libc::DT_FIFO => FileType::Fifo,
                        libc::DT_CHR => FileType::CharDevice,
                        libc::DT_BLK => FileType::BlockDevice,
                        _ => FileType::Regular,
                    };
                    out.push(DirEntry { name, ino: InodeNo(ino), kind, next_cookie: d_off as u64 });
                }
                if out.len() >= max {
                    break;
                }
            }
            Ok(out)
        })();
        unsafe { libc::lseek(raw, saved, libc::SEEK_SET) };
        result
    }
    fn statfs(&self) -> FsResult<StatFs> {
        Err(Errno::EOPNOTSUPP)
    }
}

// ----- random operations ---------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Directories the credential run makes (as root) before each sequence,
/// with owners and modes that exercise every permission rule.
const SETUP_DIRS: [&str; 6] = ["pub", "sticky", "priv", "grp", "sg", "ro"];

thread_local! {
    /// Whether generated paths start in the setup directories (credential run).
    static IN_SETUP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn gen_path(r: &mut Rng) -> Vec<u8> {
    if IN_SETUP.with(|c| c.get()) && r.chance(75) {
        let mut p = if r.chance(60) { b"/".to_vec() } else { Vec::new() };
        p.extend_from_slice(r.pick(&SETUP_DIRS).as_bytes());
        if r.chance(85) {
            p.push(b'/');
            p.extend(gen_path_plain(r).into_iter().skip_while(|&b| b == b'/'));
        }
        return p;
    }
    gen_path_plain(r)
}

fn gen_path_plain(r: &mut Rng) -> Vec<u8> {
    let depth = 1 + r.below(3);
    let mut comps: Vec<Vec<u8>> = Vec::new();
    for _ in 0..depth {
        let c: Vec<u8> = match r.below(100) {
            0..=7 => b".".to_vec(),
            8..=15 => b"..".to_vec(),
            16 => vec![b'L'; 256],
            _ => r.pick(&["a", "b", "c", "d", "e"]).as_bytes().to_vec(),
        };
        comps.push(c);
    }
    let sep: &[u8] = if r.chance(5) { b"//" } else { b"/" };
    let mut p = if r.chance(70) { b"/".to_vec() } else { Vec::new() };
    p.extend(comps.join(sep));
    if r.chance(10) {
        p.push(b'/');
    }
    p
}

/// A path whose last component is an ordinary name (for rename).
fn gen_named_path(r: &mut Rng) -> Vec<u8> {
    loop {
        let p = gen_path(r);
        let last = p.split(|&b| b == b'/').rfind(|c| !c.is_empty());
        if matches!(last, Some(c) if c != b"." && c != b"..") {
            return p;
        }
    }
}

fn gen_perm(r: &mut Rng) -> u32 {
    let mut perm = r.below(0o1000) as u32;
    for bit in [0o1000, 0o2000, 0o4000] {
        if r.chance(10) {
            perm |= bit;
        }
    }
    perm
}

fn gen_data(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(10) {
        0 => 0,
        1..=5 => r.below(100),
        _ => r.below(9000),
    } as usize;
    let byte = 1 + r.below(255) as u8;
    (0..len).map(|i| byte.wrapping_add(i as u8)).collect()
}

fn gen_offset(r: &mut Rng) -> u64 {
    if r.chance(50) {
        r.below(5) * 4096 + r.pick(&[0, 1, 4095])
    } else {
        r.below(24_000)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Open(Vec<u8>, OpenFlags, u32),
    Close(usize),
    Pread(usize, usize, u64),
    Pwrite(usize, Vec<u8>, u64),
    Read(usize, usize),
    Write(usize, Vec<u8>),
    Lseek(usize, i64, Whence),
    Ftruncate(usize, u64),
    Fallocate(usize, FallocateMode, u64, u64),
    Fsync(usize),
    Fstat(usize),
    Stat(Vec<u8>),
    Lstat(Vec<u8>),
    Truncate(Vec<u8>, u64),
    Chmod(Vec<u8>, u32),
    Chown(Vec<u8>, Option<u32>, Option<u32>),
    Utimens(Vec<u8>, TimeSet, TimeSet),
    Mkdir(Vec<u8>, u32),
    Rmdir(Vec<u8>),
    Unlink(Vec<u8>),
    Rename(Vec<u8>, Vec<u8>, RenameFlags),
    Link(Vec<u8>, Vec<u8>),
    Symlink(Vec<u8>, Vec<u8>),
    Mknod(Vec<u8>, u32),
    Readlink(Vec<u8>),
    Readdir(usize),
    // The *at calls, descriptor calls, current directory and credentials.
    Openat(Dir, Vec<u8>, OpenFlags, u32),
    Mkdirat(Dir, Vec<u8>, u32),
    Unlinkat(Dir, Vec<u8>, i32),
    Renameat(Dir, Vec<u8>, Dir, Vec<u8>, RenameFlags),
    Linkat(Dir, Vec<u8>, Dir, Vec<u8>, i32),
    Symlinkat(Vec<u8>, Dir, Vec<u8>),
    Readlinkat(Dir, Vec<u8>),
    Fstatat(Dir, Vec<u8>, i32),
    Fchmodat(Dir, Vec<u8>, u32),
    Fchownat(Dir, Vec<u8>, Option<u32>, Option<u32>, i32),
    Utimensat(Dir, Vec<u8>, TimeSet, TimeSet, i32),
    Faccessat(Dir, Vec<u8>, u32, i32),
    Fchmod(usize, u32),
    Fchown(usize, Option<u32>, Option<u32>),
    Futimens(usize, TimeSet, TimeSet),
    Fsetxattr(usize, Vec<u8>, Vec<u8>, XattrSetMode),
    Fgetxattr(usize, Vec<u8>),
    Flistxattr(usize),
    Fremovexattr(usize, Vec<u8>),
    Dup(usize),
    /// dup3 to number DUP_BASE + k.
    Dup3(usize, u64, bool),
    Dup2(usize, u64),
    GetCloexec(usize),
    SetCloexec(usize, bool),
    Getfl(usize),
    SetflAppend(usize, bool),
    Chdir(Vec<u8>),
    Fchdir(usize),
    Getcwd,
    /// Switch to USERS[k] (credential run only).
    SetCreds(usize),
}

/// The `dirfd` of an *at call: the current directory, an open descriptor,
/// or a number nothing is open at.
#[derive(Debug, Clone, Copy)]
enum Dir {
    Cwd,
    Fd(usize),
    Bad,
}

/// A descriptor number never opened (EBADF on both sides).
const BAD_FD: u64 = 777;
/// dup3 targets: DUP_BASE .. DUP_BASE + 4, the same number on both sides.
const DUP_BASE: u64 = 900;

/// The credentials of the credential run.
fn users() -> Vec<Credentials> {
    vec![
        Credentials::root(),
        Credentials::user(1000, 1000, &[100]),
        Credentials::user(1001, 1001, &[1000, 100]),
        Credentials::user(65534, 65534, &[]),
        Credentials { umask: 0o027, ..Credentials::user(1000, 1000, &[]) },
    ]
}

const UIDS: [u32; 4] = [0, 1000, 1001, 65534];
const GIDS: [u32; 5] = [0, 100, 1000, 1001, 65534];

fn gen_dir(r: &mut Rng, nfds: usize) -> Dir {
    match r.below(10) {
        0..=4 => Dir::Cwd,
        5 => Dir::Bad,
        _ if nfds > 0 => Dir::Fd(r.below(nfds as u64) as usize),
        _ => Dir::Cwd,
    }
}

fn gen_at_path(r: &mut Rng) -> Vec<u8> {
    let p = gen_path(r);
    // Mostly relative: the *at calls are about the starting point.
    let p: Vec<u8> = if r.chance(70) { p.into_iter().skip_while(|&b| b == b'/').collect() } else { p };
    if p.is_empty() {
        b".".to_vec()
    } else {
        p
    }
}

fn gen_xattr_name(r: &mut Rng) -> Vec<u8> {
    r.pick(&["user.a", "user.b", "trusted.t", "user.c", "security.capability"]).as_bytes().to_vec()
}

/// A value Linux accepts for `security.capability`: revision 2, effective,
/// CAP_NET_RAW (13) permitted. The kernel refuses anything that is not a
/// well-formed capability set; the engine stores what it is given.
fn capability_value() -> Vec<u8> {
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    const VFS_CAP_FLAGS_EFFECTIVE: u32 = 1;
    let mut v = Vec::new();
    for word in [VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, 1 << 13, 0, 0, 0] {
        v.extend_from_slice(&word.to_le_bytes());
    }
    v
}

/// One of the new calls.
fn gen_new_op(r: &mut Rng, nfds: usize, cred: bool) -> Op {
    let time = |r: &mut Rng| match r.below(3) {
        0 => TimeSet::Omit,
        1 => TimeSet::Now,
        _ => TimeSet::At(TimeSpec { sec: r.below(1 << 30) as i64, nsec: r.below(1_000_000_000) as u32 }),
    };
    loop {
        let k = r.below(100);
        let needs_fd = k >= 55;
        if needs_fd && nfds == 0 {
            continue;
        }
        let fd = |r: &mut Rng| r.below(nfds.max(1) as u64) as usize;
        let empty_or = |r: &mut Rng, flags: &mut i32| {
            if r.chance(12) {
                *flags |= libc::AT_EMPTY_PATH;
                if r.chance(70) {
                    return Vec::new();
                }
            }
            gen_at_path(r)
        };
        return match k {
            0..=7 => {
                let mut f = match r.below(3) {
                    0 => OpenFlags::RDONLY,
                    1 => OpenFlags::WRONLY,
                    _ => OpenFlags::RDWR,
                };
                f.create = r.chance(40);
                f.excl = r.chance(10);
                f.trunc = f.write && r.chance(15);
                f.append = r.chance(15);
                f.directory = !f.create && r.chance(20);
                f.nofollow = r.chance(15);
                f.path = r.chance(20);
                f.sync = r.chance(10);
                f.cloexec = r.chance(40);
                Op::Openat(gen_dir(r, nfds), gen_at_path(r), f, gen_perm(r))
            }
            8..=11 => Op::Mkdirat(gen_dir(r, nfds), gen_at_path(r), gen_perm(r)),
            12..=15 => {
                let f = if r.chance(40) { libc::AT_REMOVEDIR } else { 0 };
                Op::Unlinkat(gen_dir(r, nfds), gen_at_path(r), f)
            }
            16..=19 => {
                let f = *r.pick(&[RenameFlags::Replace, RenameFlags::NoReplace, RenameFlags::Exchange]);
                let (a, b) = (gen_dir(r, nfds), gen_dir(r, nfds));
                // Last components "." and ".." are left out as for rename.
                let named = |r: &mut Rng| loop {
                    let p = gen_at_path(r);
                    let last = p.split(|&b| b == b'/').rfind(|c| !c.is_empty());
                    if matches!(last, Some(c) if c != b"." && c != b"..") {
                        return p;
                    }
                };
                Op::Renameat(a, named(r), b, named(r), f)
            }
            20..=22 => {
                let mut f = if r.chance(40) { libc::AT_SYMLINK_FOLLOW } else { 0 };
                let (a, b) = (gen_dir(r, nfds), gen_dir(r, nfds));
                // linkat(AT_EMPTY_PATH) as another user depends on who
                // opened the descriptor (Linux 6.10): root only.
                let old = if !cred && r.chance(10) {
                    f |= libc::AT_EMPTY_PATH;
                    Vec::new()
                } else {
                    gen_at_path(r)
                };
                Op::Linkat(a, old, b, gen_at_path(r), f)
            }
            23..=25 => {
                let target = if r.chance(50) { gen_at_path(r) } else { gen_path(r) };
                Op::Symlinkat(target, gen_dir(r, nfds), gen_at_path(r))
            }
            26..=27 => {
                let p = if r.chance(15) { Vec::new() } else { gen_at_path(r) };
                Op::Readlinkat(gen_dir(r, nfds), p)
            }
            28..=33 => {
                let mut f = if r.chance(40) { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
                let p = empty_or(r, &mut f);
                Op::Fstatat(gen_dir(r, nfds), p, f)
            }
            34..=36 => {
                let mut perm = gen_perm(r);
                if cred && r.chance(15) {
                    perm |= 0o2000;
                }
                Op::Fchmodat(gen_dir(r, nfds), gen_at_path(r), perm)
            }
            37..=39 => {
                let mut f = if r.chance(30) { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
                let p = empty_or(r, &mut f);
                let u = r.chance(50).then(|| *r.pick(&UIDS));
                let g = r.chance(50).then(|| *r.pick(&GIDS));
                Op::Fchownat(gen_dir(r, nfds), p, u, g, f)
            }
            40..=42 => {
                let mut f = if r.chance(30) { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
                let p = empty_or(r, &mut f);
                Op::Utimensat(gen_dir(r, nfds), p, time(r), time(r), f)
            }
            43..=47 => {
                let mut f = if r.chance(30) { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
                if r.chance(20) {
                    f |= libc::AT_EACCESS;
                }
                let p = empty_or(r, &mut f);
                Op::Faccessat(gen_dir(r, nfds), p, r.below(8) as u32, f)
            }
            48..=50 => Op::Chdir(gen_path(r)),
            51..=52 => Op::Getcwd,
            53..=54 if cred => Op::SetCreds(r.below(users().len() as u64) as usize),
            53..=54 => Op::Getcwd,
            55..=57 => {
                let mut perm = gen_perm(r);
                if cred && r.chance(15) {
                    perm |= 0o2000;
                }
                Op::Fchmod(fd(r), perm)
            }
            58..=60 => Op::Fchown(fd(r), r.chance(50).then(|| *r.pick(&UIDS)), r.chance(50).then(|| *r.pick(&GIDS))),
            61..=62 => Op::Futimens(fd(r), time(r), time(r)),
            63..=66 => {
                let m = *r.pick(&[XattrSetMode::Any, XattrSetMode::Any, XattrSetMode::Create, XattrSetMode::Replace]);
                let name = gen_xattr_name(r);
                let v: Vec<u8> = if name == b"security.capability" {
                    capability_value()
                } else {
                    (0..r.below(40)).map(|i| i as u8 ^ 0x5a).collect()
                };
                Op::Fsetxattr(fd(r), name, v, m)
            }
            67..=69 => Op::Fgetxattr(fd(r), gen_xattr_name(r)),
            70..=71 => Op::Flistxattr(fd(r)),
            72..=73 => Op::Fremovexattr(fd(r), gen_xattr_name(r)),
            74..=78 => Op::Dup(fd(r)),
            79..=81 => Op::Dup3(fd(r), r.below(4), r.chance(50)),
            82..=83 => Op::Dup2(fd(r), r.below(4)),
            84..=85 => Op::GetCloexec(fd(r)),
            86..=87 => Op::SetCloexec(fd(r), r.chance(50)),
            88..=90 => Op::Getfl(fd(r)),
            91..=93 => Op::SetflAppend(fd(r), r.chance(50)),
            _ => Op::Fchdir(fd(r)),
        };
    }
}

fn gen_op(r: &mut Rng, nfds: usize, cred: bool) -> Op {
    if r.chance(if cred { 55 } else { 35 }) {
        return gen_new_op(r, nfds, cred);
    }
    let fd = |r: &mut Rng| r.below(nfds.max(1) as u64) as usize;
    let time = |r: &mut Rng| match r.below(3) {
        0 => TimeSet::Omit,
        1 => TimeSet::Now,
        _ => TimeSet::At(TimeSpec { sec: r.below(1 << 30) as i64, nsec: r.below(1_000_000_000) as u32 }),
    };
    loop {
        let k = r.below(100);
        let needs_fd = (14..50).contains(&k) || k >= 97;
        if needs_fd && nfds == 0 {
            continue;
        }
        return match k {
            0..=13 => {
                let mut f = match r.below(3) {
                    0 => OpenFlags::RDONLY,
                    1 => OpenFlags::WRONLY,
                    _ => OpenFlags::RDWR,
                };
                f.create = r.chance(50);
                f.excl = r.chance(15);
                f.trunc = f.write && r.chance(20);
                f.append = r.chance(15);
                f.directory = !f.create && r.chance(15);
                f.nofollow = r.chance(10);
                Op::Open(gen_path(r), f, gen_perm(r))
            }
            14..=19 => Op::Close(r.below(nfds.max(1) as u64) as usize),
            20..=25 => Op::Pwrite(fd(r), gen_data(r), gen_offset(r)),
            26..=29 => Op::Write(fd(r), gen_data(r)),
            30..=33 => Op::Pread(fd(r), r.below(10_000) as usize, gen_offset(r)),
            34..=36 => Op::Read(fd(r), r.below(10_000) as usize),
            37..=41 => {
                let w = *r.pick(&[Whence::Set, Whence::Cur, Whence::End, Whence::Data, Whence::Hole]);
                Op::Lseek(fd(r), gen_offset(r) as i64 - if r.chance(20) { 5000 } else { 0 }, w)
            }
            42..=44 => Op::Ftruncate(fd(r), gen_offset(r)),
            45..=46 => {
                let m = *r.pick(&[FallocateMode::Default, FallocateMode::KeepSize, FallocateMode::PunchHole]);
                Op::Fallocate(fd(r), m, gen_offset(r), r.below(12_000))
            }
            47 => Op::Fsync(fd(r)),
            48..=49 => Op::Fstat(fd(r)),
            50..=52 => Op::Stat(gen_path(r)),
            53..=55 => Op::Lstat(gen_path(r)),
            56..=57 => Op::Truncate(gen_path(r), gen_offset(r)),
            58 => Op::Chmod(gen_path(r), gen_perm(r)),
            59 => {
                Op::Chown(gen_path(r), r.chance(50).then(|| r.below(3) as u32), r.chance(50).then(|| r.below(3) as u32))
            }
            60..=61 => Op::Utimens(gen_path(r), time(r), time(r)),
            62..=71 => Op::Mkdir(gen_path(r), gen_perm(r)),
            72..=75 => Op::Rmdir(gen_path(r)),
            76..=80 => Op::Unlink(gen_path(r)),
            81..=87 => {
                let f = *r.pick(&[
                    RenameFlags::Replace,
                    RenameFlags::Replace,
                    RenameFlags::NoReplace,
                    RenameFlags::Exchange,
                ]);
                Op::Rename(gen_named_path(r), gen_named_path(r), f)
            }
            88..=90 => Op::Link(gen_path(r), gen_path(r)),
            91..=93 => Op::Symlink(gen_path(r), gen_path(r)),
            // Sockets (open gives ENXIO on Linux as in the model), regular
            // files through mknod, and the refused types. FIFOs and device
            // nodes are left out: the host would block opening a FIFO and
            // open a device, where the model answers ENXIO.
            94 => {
                let t = *r.pick(&[
                    libc::S_IFSOCK,
                    libc::S_IFSOCK,
                    // A character device 0:0 (no driver: open gives ENXIO
                    // as in the model); only root may make it.
                    libc::S_IFCHR,
                    0,
                    libc::S_IFREG,
                    libc::S_IFDIR,
                    libc::S_IFLNK,
                    0o170000,
                ]);
                Op::Mknod(gen_path(r), t | gen_perm(r))
            }
            95..=96 => Op::Readlink(gen_path(r)),
            _ => Op::Readdir(fd(r)),
        };
    }
}

/// Stat fields that must agree (no inode numbers, times, blocks, dir size).
fn norm_stat(st: &Stat) -> String {
    let size = if st.kind == FileType::Directory { 0 } else { st.size };
    format!("{:?} {:o} nlink={} {}:{} size={}", st.kind, st.perm, st.nlink, st.uid, st.gid, size)
}

fn norm_tree(mut t: Tree) -> Tree {
    for v in t.values_mut() {
        v.atime = TimeSpec::default();
        v.mtime = TimeSpec::default();
        v.ctime = TimeSpec::default();
        v.blocks = None;
        if v.kind == FileType::Directory {
            v.size = 0;
        }
    }
    t
}

fn list(fs: &dyn PathFs, fd: Fd) -> FsResult<BTreeSet<(Vec<u8>, String)>> {
    let mut out = BTreeSet::new();
    let mut cookie = 0;
    loop {
        let es = fs.readdir(fd, cookie, 7)?;
        let Some(last) = es.last() else { break };
        cookie = last.next_cookie;
        for e in es {
            assert!(out.insert((e.name, format!("{:?}", e.kind))), "duplicate entry");
        }
    }
    Ok(out)
}

/// Apply one op to one file system; the outcome as a comparable string.
fn apply(fs: &dyn PathFs, fds: &mut Vec<Fd>, op: &Op) -> String {
    fn s<T: std::fmt::Debug>(r: FsResult<T>) -> String {
        format!("{r:?}")
    }
    match op {
        Op::Open(p, f, perm) => match fs.open(p, *f, *perm) {
            Ok(fd) => {
                fds.push(fd);
                "Ok(fd)".into()
            }
            Err(e) => s::<()>(Err(e)),
        },
        Op::Close(i) => {
            let fd = fds.remove(*i);
            s(fs.close(fd))
        }
        Op::Pread(i, len, off) => {
            let mut buf = vec![0u8; *len];
            s(fs.pread(fds[*i], &mut buf, *off).map(|n| buf[..n].to_vec()))
        }
        Op::Pwrite(i, data, off) => s(fs.pwrite(fds[*i], data, *off)),
        Op::Read(i, len) => {
            let mut buf = vec![0u8; *len];
            s(fs.read(fds[*i], &mut buf).map(|n| buf[..n].to_vec()))
        }
        Op::Write(i, data) => s(fs.write(fds[*i], data)),
        Op::Lseek(i, off, w) => s(fs.lseek(fds[*i], *off, *w)),
        Op::Ftruncate(i, size) => s(fs.ftruncate(fds[*i], *size)),
        Op::Fallocate(i, m, off, len) => s(fs.fallocate(fds[*i], *m, *off, *len)),
        Op::Fsync(i) => s(fs.fsync(fds[*i])),
        Op::Fstat(i) => s(fs.fstat(fds[*i]).map(|st| norm_stat(&st))),
        Op::Stat(p) => s(fs.stat(p).map(|st| norm_stat(&st))),
        Op::Lstat(p) => s(fs.lstat(p).map(|st| norm_stat(&st))),
        Op::Truncate(p, size) => s(fs.truncate(p, *size)),
        Op::Chmod(p, perm) => s(fs.chmod(p, *perm)),
        Op::Chown(p, u, g) => s(fs.chown(p, *u, *g)),
        Op::Utimens(p, a, m) => s(fs.utimens(p, *a, *m)),
        Op::Mkdir(p, perm) => s(fs.mkdir(p, *perm)),
        Op::Rmdir(p) => s(fs.rmdir(p)),
        Op::Unlink(p) => s(fs.unlink(p)),
        Op::Rename(a, b, f) => s(fs.rename(a, b, *f)),
        Op::Link(a, b) => s(fs.link(a, b)),
        Op::Symlink(a, b) => s(fs.symlink(a, b)),
        Op::Mknod(p, mode) => s(fs.mknod(p, *mode, 0)),
        Op::Readlink(p) => s(fs.readlink(p)),
        Op::Readdir(i) => s(list(fs, fds[*i])),
        Op::Openat(d, p, f, perm) => match fs.openat(dir(fds, *d), p, *f, *perm) {
            Ok(fd) => {
                fds.push(fd);
                "Ok(fd)".into()
            }
            Err(e) => s::<()>(Err(e)),
        },
        Op::Mkdirat(d, p, perm) => s(fs.mkdirat(dir(fds, *d), p, *perm)),
        Op::Unlinkat(d, p, f) => s(fs.unlinkat(dir(fds, *d), p, *f)),
        Op::Renameat(a, p, b, q, f) => s(fs.renameat2(dir(fds, *a), p, dir(fds, *b), q, *f)),
        Op::Linkat(a, p, b, q, f) => s(fs.linkat(dir(fds, *a), p, dir(fds, *b), q, *f)),
        Op::Symlinkat(t, d, p) => s(fs.symlinkat(t, dir(fds, *d), p)),
        Op::Readlinkat(d, p) => s(fs.readlinkat(dir(fds, *d), p)),
        Op::Fstatat(d, p, f) => s(fs.fstatat(dir(fds, *d), p, *f).map(|st| norm_stat(&st))),
        Op::Fchmodat(d, p, perm) => s(fs.fchmodat(dir(fds, *d), p, *perm, 0)),
        Op::Fchownat(d, p, u, g, f) => s(fs.fchownat(dir(fds, *d), p, *u, *g, *f)),
        Op::Utimensat(d, p, a, m, f) => s(fs.utimensat(dir(fds, *d), p, *a, *m, *f)),
        Op::Faccessat(d, p, mode, f) => s(fs.faccessat(dir(fds, *d), p, *mode, *f)),
        Op::Fchmod(i, perm) => s(fs.fchmod(fds[*i], *perm)),
        Op::Fchown(i, u, g) => s(fs.fchown(fds[*i], *u, *g)),
        Op::Futimens(i, a, m) => s(fs.futimens(fds[*i], *a, *m)),
        Op::Fsetxattr(i, n, v, m) => s(fs.fsetxattr(fds[*i], n, v, *m)),
        Op::Fgetxattr(i, n) => s(fs.fgetxattr(fds[*i], n)),
        Op::Flistxattr(i) => s(fs.flistxattr(fds[*i])),
        Op::Fremovexattr(i, n) => s(fs.fremovexattr(fds[*i], n)),
        Op::Dup(i) => match fs.dup(fds[*i]) {
            Ok(fd) => {
                fds.push(fd);
                "Ok(fd)".into()
            }
            Err(e) => s::<()>(Err(e)),
        },
        Op::Dup3(i, k, cloexec) => {
            let r = fs.dup3(fds[*i], Fd(DUP_BASE + k), *cloexec);
            if let Ok(n) = r {
                if !fds.contains(&n) {
                    fds.push(n);
                }
            }
            s(r)
        }
        Op::Dup2(i, k) => {
            let r = fs.dup2(fds[*i], Fd(DUP_BASE + k));
            if let Ok(n) = r {
                if !fds.contains(&n) {
                    fds.push(n);
                }
            }
            s(r)
        }
        Op::GetCloexec(i) => s(fs.get_cloexec(fds[*i])),
        Op::SetCloexec(i, on) => s(fs.set_cloexec(fds[*i], *on)),
        Op::Getfl(i) => s(fs.getfl(fds[*i]).map(|f| {
            // O_PATH descriptors report no access mode worth comparing.
            if f.path {
                (false, false, false, true)
            } else {
                (f.read, f.write, f.append, false)
            }
        })),
        Op::SetflAppend(i, on) => s(fs.setfl_append(fds[*i], *on)),
        Op::Chdir(p) => s(fs.chdir(p)),
        Op::Fchdir(i) => s(fs.fchdir(fds[*i])),
        Op::Getcwd => s(fs.getcwd().map(|p| String::from_utf8_lossy(&p).into_owned())),
        Op::SetCreds(k) => {
            fs.set_credentials(users()[*k].clone());
            "Ok".into()
        }
    }
}

/// The `dirfd` of a `Dir`.
fn dir(fds: &[Fd], d: Dir) -> Fd {
    match d {
        Dir::Cwd => AT_FDCWD,
        Dir::Fd(i) => fds[i],
        Dir::Bad => Fd(BAD_FD),
    }
}

/// The op, with paths as strings and data as its length and first byte.
fn show(op: &Op) -> String {
    let p = |b: &Vec<u8>| format!("\"{}\"", b.escape_ascii());
    let d = |b: &Vec<u8>| format!("<{} bytes from {:#04x}>", b.len(), b.first().copied().unwrap_or(0));
    match op {
        Op::Open(a, f, m) => {
            let mut fl = String::new();
            for (on, n) in [
                (f.read, "r"),
                (f.write, "w"),
                (f.create, "C"),
                (f.excl, "X"),
                (f.trunc, "T"),
                (f.append, "A"),
                (f.directory, "D"),
                (f.nofollow, "N"),
            ] {
                if on {
                    fl.push_str(n);
                }
            }
            format!("Open({}, {fl}, {m:o})", p(a))
        }
        Op::Pwrite(i, data, off) => format!("Pwrite(fd#{i}, {}, {off})", d(data)),
        Op::Write(i, data) => format!("Write(fd#{i}, {})", d(data)),
        Op::Stat(a) => format!("Stat({})", p(a)),
        Op::Lstat(a) => format!("Lstat({})", p(a)),
        Op::Truncate(a, s) => format!("Truncate({}, {s})", p(a)),
        Op::Chmod(a, m) => format!("Chmod({}, {m:o})", p(a)),
        Op::Chown(a, u, g) => format!("Chown({}, {u:?}, {g:?})", p(a)),
        Op::Utimens(a, x, y) => format!("Utimens({}, {x:?}, {y:?})", p(a)),
        Op::Mkdir(a, m) => format!("Mkdir({}, {m:o})", p(a)),
        Op::Rmdir(a) => format!("Rmdir({})", p(a)),
        Op::Unlink(a) => format!("Unlink({})", p(a)),
        Op::Rename(a, b, f) => format!("Rename({}, {}, {f:?})", p(a), p(b)),
        Op::Link(a, b) => format!("Link({}, {})", p(a), p(b)),
        Op::Symlink(a, b) => format!("Symlink({}, {})", p(a), p(b)),
        Op::Mknod(a, m) => format!("Mknod({}, {m:o})", p(a)),
        Op::Readlink(a) => format!("Readlink({})", p(a)),
        other => {
            // Byte strings as text.
            let t = format!("{other:?}");
            let mut out = String::new();
            let mut rest = t.as_str();
            while let Some(i) = rest.find('[') {
                out.push_str(&rest[..i]);
                let j = rest[i..].find(']').map_or(rest.len(), |j| i + j + 1);
                let inner = &rest[i + 1..j.saturating_sub(1).max(i + 1)];
                let bytes: Option<Vec<u8>> = if inner.is_empty() {
                    Some(Vec::new())
                } else {
                    inner.split(", ").map(|b| b.parse::<u8>().ok()).collect()
                };
                match bytes {
                    Some(b) if b.iter().all(|c| c.is_ascii_graphic()) => {
                        out.push_str(&format!("\"{}\"", String::from_utf8_lossy(&b)))
                    }
                    _ => out.push_str(&rest[i..j]),
                }
                rest = &rest[j..];
            }
            out.push_str(rest);
            out
        }
    }
}

/// What one sequence saw, for the coverage checks of the credential run.
#[derive(Default)]
struct Seen {
    eacces: usize,
    eperm: usize,
}

/// The setup of the credential run, made as root on both sides.
fn setup_ops() -> Vec<Op> {
    let p = |s: &str| s.as_bytes().to_vec();
    vec![
        Op::Mkdir(p("/pub"), 0o777),
        Op::Mkdir(p("/sticky"), 0o1777),
        Op::Mkdir(p("/priv"), 0o700),
        Op::Chown(p("/priv"), Some(1000), Some(1000)),
        Op::Mkdir(p("/grp"), 0o770),
        Op::Chown(p("/grp"), None, Some(1000)),
        Op::Mkdir(p("/sg"), 0o777),
        Op::Chmod(p("/sg"), 0o2777),
        Op::Chown(p("/sg"), None, Some(100)),
        Op::Mkdir(p("/ro"), 0o555),
        Op::Open(p("/sticky/mine"), OpenFlags::WRONLY.create(), 0o644),
        Op::Chown(p("/sticky/mine"), Some(1000), Some(1000)),
        Op::Open(p("/pub/a"), OpenFlags::WRONLY.create(), 0o640),
        Op::Chown(p("/pub/a"), Some(1001), Some(1000)),
        Op::Close(1),
        Op::Close(0),
    ]
}

fn run_seed(seed: u64, ops: usize, cred: bool, seen: &mut Seen) {
    let model = ModelFs::new(Arc::new(ManualClock::new(TimeSpec { sec: 1, nsec: 0 })), 1 << 30, 1 << 30);
    let host = HostFs { creds: std::sync::Mutex::new(Credentials::root()) };
    let (mut mfds, mut hfds) = (Vec::new(), Vec::new());
    let mut r = Rng(seed);
    let mut log: Vec<String> = Vec::new();
    let mut fallocated = BTreeSet::new();
    let protected_hardlinks = sysctl("protected_hardlinks") != "0";
    let setup = if cred { setup_ops() } else { Vec::new() };
    let setup_len = setup.len();
    for step in 0..ops + setup_len {
        let mut op = match setup.get(step) {
            Some(op) => op.clone(),
            None => gen_op(&mut r, mfds.len(), cred),
        };
        if mfds.len() >= 24 {
            op = Op::Close(0);
        }
        let creds = model.credentials();
        // Linux's fs.protected_hardlinks: only the owner of a file may
        // link it (a sysctl the engine does not imitate): not generated.
        let link_source = match &op {
            Op::Link(a, _) => Some((AT_FDCWD, a.clone(), libc::AT_SYMLINK_NOFOLLOW)),
            Op::Linkat(d, a, _, _, f) if !a.is_empty() => Some((
                dir(&mfds, *d),
                a.clone(),
                if f & libc::AT_SYMLINK_FOLLOW != 0 { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
            )),
            _ => None,
        };
        if let Some((d, a, f)) = link_source {
            if protected_hardlinks && !creds.is_root() && model.fstatat(d, &a, f).is_ok_and(|st| st.uid != creds.uid) {
                continue;
            }
        }
        log.push(show(&op));
        // tmpfs reports fallocated pages that were never written as holes;
        // the brief counts every allocated page as data.
        let mut compare = true;
        if let Op::Lseek(i, _, Whence::Data | Whence::Hole) = &op {
            compare = !fallocated.contains(&model.fstat(mfds[*i]).unwrap().ino);
        }
        // (A punched hole is a hole on tmpfs too: only preallocation counts,
        // and a punch across the end of file, which tmpfs applies to the
        // whole last page where the brief stops at the end of file.)
        if let Op::Fallocate(i, m, off, len) = &op {
            if let Ok(st) = model.fstat(mfds[*i]) {
                if *m != FallocateMode::PunchHole || off + len > st.size {
                    fallocated.insert(st.ino);
                }
            }
        }
        if !compare {
            continue; // not even applied: the positions would diverge
        }
        let m = apply(&model, &mut mfds, &op);
        let h = apply(&host, &mut hfds, &op);
        let keep = if std::env::var_os("FERRITE_DIFF_FULL_LOG").is_some() { usize::MAX } else { 60 };
        let tail = || log[log.len().saturating_sub(keep)..].join("\n  ");
        assert_eq!(
            m,
            h,
            "seed {seed} step {step} ({creds:?}): model (left) and Linux (right) differ on\n  {}\nrecent ops:\n  {}",
            show(&op),
            tail()
        );
        if m.contains("EACCES") {
            seen.eacces += 1;
        }
        if m.contains("EPERM") {
            seen.eperm += 1;
        }
        if step % 16 == 15 {
            // The host's tree is walked as root.
            let creds = host.credentials();
            if cred {
                host.set_credentials(Credentials::root());
            }
            let mt = norm_tree(model.tree());
            let ht = norm_tree(tree_of(&host).expect("tree_of(host)"));
            if cred {
                host.set_credentials(creds);
            }
            let d = ferrite_model::diff_trees(&ht, &mt);
            assert!(
                d.is_empty(),
                "seed {seed} step {step}: trees differ (expected = Linux, got = model):\n{d}\nrecent ops:\n  {}",
                tail()
            );
        }
    }
    if cred {
        host.set_credentials(Credentials::root());
    }
    let mt = norm_tree(model.tree());
    let ht = norm_tree(tree_of(&host).expect("tree_of(host)"));
    assert_eq!(ferrite_model::diff_trees(&ht, &mt), "", "seed {seed}: trees differ at the end");
    for fd in hfds {
        host.close(fd).unwrap();
    }
    // The next sequence starts at the root.
    assert_eq!(unsafe { libc::chdir(cpath(b"/").as_ptr()) }, 0);
}

static SYSCTLS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// A fs.* sysctl, read before the chroot ("?" if unreadable).
fn sysctl(name: &str) -> String {
    SYSCTLS.get().and_then(|v| v.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())).unwrap_or_else(|| "?".into())
}

/// Remove everything under the current root (we are chrooted into it).
fn wipe_root() {
    for e in std::fs::read_dir("/").unwrap() {
        let e = e.unwrap();
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let root = cpath(b"/");
    unsafe {
        libc::chmod(root.as_ptr(), 0o755);
        libc::chown(root.as_ptr(), 0, 0);
    }
    // The root directory lives on: forget its extended attributes.
    let mut buf = vec![0u8; 65536];
    let n = unsafe { libc::listxattr(root.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr /");
    for name in buf[..n as usize].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        assert_eq!(unsafe { libc::removexattr(root.as_ptr(), cpath(name).as_ptr()) }, 0, "removexattr /");
    }
}

#[test]
fn model_agrees_with_linux_tmpfs() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (chroot)");
        return;
    }
    let base = format!("/dev/shm/ferrite-model-diff-{}", std::process::id());
    if std::fs::create_dir(&base).is_err() {
        eprintln!("skipped: cannot create {base}");
        return;
    }
    let cbase = cpath(base.as_bytes());
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(cbase.as_ptr(), &mut sfs) } != 0 || sfs.f_type != libc::TMPFS_MAGIC {
        let _ = std::fs::remove_dir(&base);
        eprintln!("skipped: /dev/shm is not tmpfs");
        return;
    }
    let _ = SYSCTLS.set(
        ["protected_hardlinks", "protected_symlinks", "protected_regular", "protected_fifos"]
            .iter()
            .map(|n| {
                let v = std::fs::read_to_string(format!("/proc/sys/fs/{n}")).unwrap_or_else(|_| "?".into());
                (n.to_string(), v.trim().to_string())
            })
            .collect(),
    );
    let outside = unsafe { libc::open(cpath(b"/").as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(outside >= 0);
    unsafe {
        libc::umask(0);
        assert_eq!(libc::chroot(cbase.as_ptr()), 0, "chroot");
        assert_eq!(libc::chdir(cpath(b"/").as_ptr()), 0);
    }
    let seeds: u64 = std::env::var("FERRITE_DIFF_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let ops: usize = std::env::var("FERRITE_DIFF_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let cred_seeds: u64 = std::env::var("FERRITE_DIFF_CRED_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    for n in std::iter::once(BAD_FD).chain(DUP_BASE..DUP_BASE + 4) {
        assert!(
            unsafe { libc::fcntl(n as i32, libc::F_GETFD) } < 0,
            "descriptor {n} is in use; the test needs it free"
        );
    }
    let result = std::panic::catch_unwind(|| {
        let only: Option<u64> = std::env::var("FERRITE_DIFF_SEED").ok().and_then(|v| v.parse().ok());
        for seed in only.map_or(0..seeds, |s| s..s + 1) {
            wipe_root();
            run_seed(seed, ops, false, &mut Seen::default());
        }
        wipe_root();
    });
    // The same, switching between root and other users, in a child process
    // (changing ids is per process).
    let cred_result = if result.is_ok() { credential_run(cred_seeds, ops) } else { Ok(()) };
    // Leave the chroot and clean up whatever happened.
    unsafe {
        assert_eq!(libc::fchdir(outside), 0);
        assert_eq!(libc::chroot(cpath(b".").as_ptr()), 0);
        libc::chdir(cpath(b"/").as_ptr());
        libc::close(outside);
    }
    let _ = std::fs::remove_dir_all(&base);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    if let Err(why) = cred_result {
        panic!("credential run: {why}");
    }
}

/// Run the credential sequences in a forked child (still chrooted, still
/// root until each sequence's SetCreds ops switch it between root and other
/// users with setresuid, keeping saved uid 0). The child reports through a
/// pipe. Every sequence must have seen EACCES and EPERM on both sides, so
/// that the permission rules were exercised.
fn credential_run(seeds: u64, ops: usize) -> Result<(), String> {
    for name in ["protected_symlinks", "protected_regular", "protected_fifos"] {
        let v = sysctl(name);
        if v != "0" {
            eprintln!("credential run skipped: fs.{name} = {v:?} (a hardening the model does not imitate)");
            return Ok(());
        }
    }
    let mut pipe = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe { libc::close(pipe[0]) };
        let r = std::panic::catch_unwind(|| {
            let mut total = Seen::default();
            for seed in 0..seeds {
                wipe_root();
                run_seed(1_000_000 + seed, ops, true, &mut total);
            }
            wipe_root();
            assert!(
                seeds == 0 || (total.eacces > 0 && total.eperm > 0),
                "no EACCES or no EPERM seen: the users never met a refusal"
            );
            format!("ok: {} EACCES and {} EPERM results agreed", total.eacces, total.eperm)
        });
        let msg = match r {
            Ok(m) => m,
            Err(e) => {
                let m = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into());
                format!("FAILED: {m}")
            }
        };
        unsafe {
            libc::write(pipe[1], msg.as_ptr().cast(), msg.len());
            libc::_exit(if msg.starts_with("ok") { 0 } else { 1 });
        }
    }
    unsafe { libc::close(pipe[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = unsafe { libc::read(pipe[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    unsafe { libc::close(pipe[0]) };
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let msg = String::from_utf8_lossy(&out).into_owned();
    eprintln!("credential run: {msg}");
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("child status {status:#x}: {msg}"))
    }
}
