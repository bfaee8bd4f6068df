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
//! set-uid/set-gid bits (Linux clears them on chown), O_CREAT|O_DIRECTORY,
//! sizes near the limits, and running out of space.
//!
//! FERRITE_DIFF_SEEDS (default 40) and FERRITE_DIFF_OPS (default 400) set
//! the amount of work. Runs only as root with a tmpfs /dev/shm; otherwise it says so and passes.
//! This file holds a single test because chroot and umask are per process.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::sync::Arc;

use ferrite::{
    DirEntry, Errno, FallocateMode, Fd, FileType, FsResult, InodeNo, ManualClock, OpenFlags, PathFs, RenameFlags, Stat,
    StatFs, TimeSet, TimeSpec, Whence,
};
use ferrite_model::{tree_of, ModelFs, Tree};

// ----- the host file system through libc ---------------------------------

struct HostFs;

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

impl PathFs for HostFs {
    fn open(&self, path: &[u8], f: OpenFlags, perm: u32) -> FsResult<Fd> {
        let mut flags = match (f.read, f.write) {
            (true, true) => libc::O_RDWR,
            (false, true) => libc::O_WRONLY,
            _ => libc::O_RDONLY,
        } | libc::O_CLOEXEC;
        for (on, bit) in [
            (f.create, libc::O_CREAT),
            (f.excl, libc::O_EXCL),
            (f.trunc, libc::O_TRUNC),
            (f.append, libc::O_APPEND),
            (f.directory, libc::O_DIRECTORY),
            (f.nofollow, libc::O_NOFOLLOW),
        ] {
            if on {
                flags |= bit;
            }
        }
        let fd = unsafe { libc::open(cpath(path).as_ptr(), flags, perm as libc::c_uint) };
        check(fd).map(|_| Fd(fd as u64))
    }
    fn close(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::close(fd.0 as i32) })
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        check_len(unsafe { libc::pread(fd.0 as i32, buf.as_mut_ptr().cast(), buf.len(), offset as i64) })
    }
    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        check_len(unsafe { libc::pwrite(fd.0 as i32, data.as_ptr().cast(), data.len(), offset as i64) })
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        check_len(unsafe { libc::read(fd.0 as i32, buf.as_mut_ptr().cast(), buf.len()) })
    }
    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        check_len(unsafe { libc::write(fd.0 as i32, data.as_ptr().cast(), data.len()) })
    }
    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        let w = match whence {
            Whence::Set => libc::SEEK_SET,
            Whence::Cur => libc::SEEK_CUR,
            Whence::End => libc::SEEK_END,
            Whence::Data => libc::SEEK_DATA,
            Whence::Hole => libc::SEEK_HOLE,
        };
        let r = unsafe { libc::lseek(fd.0 as i32, offset, w) };
        check_len(r as isize).map(|v| v as u64)
    }
    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        check(unsafe { libc::ftruncate(fd.0 as i32, size as i64) })
    }
    fn fsync(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::fsync(fd.0 as i32) })
    }
    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        check(unsafe { libc::fdatasync(fd.0 as i32) })
    }
    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let m = match mode {
            FallocateMode::Default => 0,
            FallocateMode::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
            FallocateMode::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        };
        check(unsafe { libc::fallocate(fd.0 as i32, m, offset as i64, len as i64) })
    }
    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(fd.0 as i32, &mut st) }).map(|_| to_stat(&st))
    }
    fn stat(&self, path: &[u8]) -> FsResult<Stat> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::stat(cpath(path).as_ptr(), &mut st) }).map(|_| to_stat(&st))
    }
    fn lstat(&self, path: &[u8]) -> FsResult<Stat> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::lstat(cpath(path).as_ptr(), &mut st) }).map(|_| to_stat(&st))
    }
    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        check(unsafe { libc::truncate(cpath(path).as_ptr(), size as i64) })
    }
    fn chmod(&self, path: &[u8], perm: u32) -> FsResult<()> {
        check(unsafe { libc::chmod(cpath(path).as_ptr(), perm) })
    }
    fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
        check(unsafe { libc::chown(cpath(path).as_ptr(), u, g) })
    }
    fn utimens(&self, path: &[u8], atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        let times = [host_time(atime), host_time(mtime)];
        check(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(path).as_ptr(), times.as_ptr(), 0) })
    }
    fn mkdir(&self, path: &[u8], perm: u32) -> FsResult<()> {
        check(unsafe { libc::mkdir(cpath(path).as_ptr(), perm) })
    }
    fn rmdir(&self, path: &[u8]) -> FsResult<()> {
        check(unsafe { libc::rmdir(cpath(path).as_ptr()) })
    }
    fn unlink(&self, path: &[u8]) -> FsResult<()> {
        check(unsafe { libc::unlink(cpath(path).as_ptr()) })
    }
    fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> FsResult<()> {
        let f = match flags {
            RenameFlags::Replace => 0,
            RenameFlags::NoReplace => libc::RENAME_NOREPLACE,
            RenameFlags::Exchange => libc::RENAME_EXCHANGE,
        };
        let (a, b) = (cpath(from), cpath(to));
        check(unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), f) })
    }
    fn link(&self, existing: &[u8], new: &[u8]) -> FsResult<()> {
        let (a, b) = (cpath(existing), cpath(new));
        check(unsafe { libc::linkat(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), 0) })
    }
    fn symlink(&self, target: &[u8], linkpath: &[u8]) -> FsResult<()> {
        let (a, b) = (cpath(target), cpath(linkpath));
        check(unsafe { libc::symlink(a.as_ptr(), b.as_ptr()) })
    }
    fn mknod(&self, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        check(unsafe { libc::mknod(cpath(path).as_ptr(), mode, rdev) })
    }
    fn readlink(&self, path: &[u8]) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; 8192];
        let n = check_len(unsafe { libc::readlink(cpath(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
        buf.truncate(n);
        Ok(buf)
    }
    /// getdents64 from position `cookie`; the descriptor's position is
    /// restored afterwards so that it stays comparable with the model's.
    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let raw = fd.0 as i32;
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

fn gen_path(r: &mut Rng) -> Vec<u8> {
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
    (r.below(0o1000) as u32) | if r.chance(10) { 0o1000 } else { 0 }
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
}

fn gen_op(r: &mut Rng, nfds: usize) -> Op {
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
        other => format!("{other:?}"),
    }
}

fn run_seed(seed: u64, ops: usize) {
    let model = ModelFs::new(Arc::new(ManualClock::new(TimeSpec { sec: 1, nsec: 0 })), 1 << 30, 1 << 30);
    let host = HostFs;
    let (mut mfds, mut hfds) = (Vec::new(), Vec::new());
    let mut r = Rng(seed);
    let mut log: Vec<String> = Vec::new();
    let mut fallocated = BTreeSet::new();
    for step in 0..ops {
        let mut op = gen_op(&mut r, mfds.len());
        if mfds.len() >= 24 {
            op = Op::Close(0);
        }
        log.push(show(&op));
        // tmpfs reports fallocated pages that were never written as holes;
        // the brief counts every allocated page as data.
        let mut compare = true;
        if let Op::Lseek(i, _, Whence::Data | Whence::Hole) = &op {
            compare = !fallocated.contains(&model.fstat(mfds[*i]).unwrap().ino);
        }
        // (A punched hole is a hole on tmpfs too: only preallocation counts.)
        if let Op::Fallocate(i, m, ..) = &op {
            if *m != FallocateMode::PunchHole {
                fallocated.insert(model.fstat(mfds[*i]).unwrap().ino);
            }
        }
        if !compare {
            continue; // not even applied: the positions would diverge
        }
        let m = apply(&model, &mut mfds, &op);
        let h = apply(&host, &mut hfds, &op);
        let tail = || log[log.len().saturating_sub(60)..].join("\n  ");
        assert_eq!(
            m,
            h,
            "seed {seed} step {step}: model (left) and Linux (right) differ on\n  {}\nrecent ops:\n  {}",
            show(&op),
            tail()
        );
        if step % 16 == 15 {
            let mt = norm_tree(model.tree());
            let ht = norm_tree(tree_of(&host).expect("tree_of(host)"));
            let d = ferrite_model::diff_trees(&ht, &mt);
            assert!(
                d.is_empty(),
                "seed {seed} step {step}: trees differ (expected = Linux, got = model):\n{d}\nrecent ops:\n  {}",
                tail()
            );
        }
    }
    let mt = norm_tree(model.tree());
    let ht = norm_tree(tree_of(&host).expect("tree_of(host)"));
    assert_eq!(ferrite_model::diff_trees(&ht, &mt), "", "seed {seed}: trees differ at the end");
    for fd in hfds {
        host.close(fd).unwrap();
    }
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
    let outside = unsafe { libc::open(cpath(b"/").as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(outside >= 0);
    unsafe {
        libc::umask(0);
        assert_eq!(libc::chroot(cbase.as_ptr()), 0, "chroot");
        assert_eq!(libc::chdir(cpath(b"/").as_ptr()), 0);
    }
    let seeds: u64 = std::env::var("FERRITE_DIFF_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let ops: usize = std::env::var("FERRITE_DIFF_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let result = std::panic::catch_unwind(|| {
        for seed in 0..seeds {
            wipe_root();
            run_seed(seed, ops);
        }
        wipe_root();
    });
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
}
