//! Public value types of the Ferrite API: errors, attributes, flags.
//!
//! These types are shared by every front end (library callers, the CLI, the
//! FUSE and preload adapters) and by the in-memory reference model used in
//! tests, so they say nothing about the on-media format.

use std::fmt;

/// An error of a file-system operation: a POSIX errno value, so that every
/// adapter can hand it to its caller unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    /// The pool holds a structure that fails its checks. Reported as EUCLEAN
    /// ("structure needs cleaning"), the errno Linux file systems use for it.
    pub const ECORRUPT: Errno = Errno(libc::EUCLEAN);

    /// The symbolic name, for messages and test reports.
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::EXDEV => "EXDEV",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::EINVAL => "EINVAL",
            libc::EMFILE => "EMFILE",
            libc::EFBIG => "EFBIG",
            libc::ENOSPC => "ENOSPC",
            libc::EROFS => "EROFS",
            libc::EMLINK => "EMLINK",
            libc::ERANGE => "ERANGE",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::ENOTEMPTY => "ENOTEMPTY",
            libc::ELOOP => "ELOOP",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EOVERFLOW => "EOVERFLOW",
            libc::ENXIO => "ENXIO",
            libc::ENODATA => "ENODATA",
            libc::E2BIG => "E2BIG",
            libc::EUCLEAN => "EUCLEAN(corrupt)",
            _ => "E?",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

pub type FsResult<T> = Result<T, Errno>;

/// Inode number. Inode 1 is the root directory; 0 is never a valid inode.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct InodeNo(pub u64);

impl InodeNo {
    pub const ROOT: InodeNo = InodeNo(1);
}

/// A file descriptor of the path-level API. Numbers a session picks itself
/// are never reused while it lives, so a stale descriptor gives EBADF; a
/// front end may also choose numbers (`dup3`, `Session::openat_fd`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Fd(pub u64);

/// The `dirfd` of the `*at` calls that means the current directory
/// (Linux's AT_FDCWD, -100, sign-extended). Never a descriptor number.
pub const AT_FDCWD: Fd = Fd(libc::AT_FDCWD as i64 as u64);

/// Who makes a call: the file-system user and group ids (fsuid, fsgid),
/// the supplementary groups, and the umask applied to created files.
/// uid 0 is root: it passes every read/write permission check, search on
/// directories, and execute where at least one x bit is set (as
/// CAP_DAC_OVERRIDE), and may chown, chmod and set times on any file.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub umask: u32,
}

impl Credentials {
    /// uid 0, gid 0, no supplementary groups, umask 0.
    pub fn root() -> Credentials {
        Credentials::default()
    }

    pub fn user(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
        Credentials { uid, gid, groups: groups.to_vec(), umask: 0 }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Is `gid` the caller's group or one of its supplementary groups?
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// A regular file's consistency mode (docs/DESIGN.md, "Guarantees"),
/// stored in the file's Attr entries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u8)]
pub enum FileMode {
    /// Every operation is atomic and durable when it returns.
    #[default]
    Strict = 0,
    /// Writes, truncates and fallocates become durable together at the
    /// file's next commit point (fsync, fdatasync, msync, sync, an O_SYNC
    /// write, a clean unmount, any other change to the file); after a crash
    /// the file is exactly its state at a commit point (Libnvmmio).
    FsyncAtomic = 1,
}

impl FileMode {
    /// The extended attribute through which every front end reads and sets
    /// a file's mode (values: `as_str`). It is answered by the engine, not
    /// stored, and not listed.
    pub const XATTR: &'static [u8] = b"user.ferrite.mode";

    pub fn as_str(self) -> &'static str {
        match self {
            FileMode::Strict => "strict",
            FileMode::FsyncAtomic => "fsync-atomic",
        }
    }

    /// Parse "strict" or "fsync-atomic" (a trailing NUL or newline, as
    /// `setfattr` and shells may add, is accepted).
    pub fn parse(s: &[u8]) -> Option<FileMode> {
        let s = s.strip_suffix(b"\0").unwrap_or(s);
        let s = s.strip_suffix(b"\n").unwrap_or(s);
        match s {
            b"strict" => Some(FileMode::Strict),
            b"fsync-atomic" => Some(FileMode::FsyncAtomic),
            _ => None,
        }
    }

    pub fn from_u8(v: u8) -> Option<FileMode> {
        match v {
            0 => Some(FileMode::Strict),
            1 => Some(FileMode::FsyncAtomic),
            _ => None,
        }
    }
}

/// Kind of an inode, as stored on media and reported by stat and readdir.
/// FIFOs, sockets and device nodes are recorded (type and device number)
/// but carry no data: opening them is the kernel's business.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum FileType {
    Regular = 1,
    Directory = 2,
    Symlink = 3,
    Fifo = 4,
    Socket = 5,
    CharDevice = 6,
    BlockDevice = 7,
}

impl FileType {
    /// The S_IFMT bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
        }
    }

    /// The type whose S_IFMT bits `mode` carries.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        [
            FileType::Regular,
            FileType::Directory,
            FileType::Symlink,
            FileType::Fifo,
            FileType::Socket,
            FileType::CharDevice,
            FileType::BlockDevice,
        ]
        .into_iter()
        .find(|t| t.mode_bits() == mode & libc::S_IFMT)
    }

    /// The d_type value readdir reports.
    pub fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
        }
    }

    pub fn from_u8(v: u8) -> Option<FileType> {
        match v {
            1 => Some(FileType::Regular),
            2 => Some(FileType::Directory),
            3 => Some(FileType::Symlink),
            4 => Some(FileType::Fifo),
            5 => Some(FileType::Socket),
            6 => Some(FileType::CharDevice),
            7 => Some(FileType::BlockDevice),
            _ => None,
        }
    }

    /// A FIFO, socket or device node: an inode with no data of its own.
    pub fn is_special(self) -> bool {
        matches!(self, FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice)
    }

    /// Only device nodes carry a device number.
    pub fn has_rdev(self) -> bool {
        matches!(self, FileType::CharDevice | FileType::BlockDevice)
    }
}

/// A point in time, nanoseconds since the Unix epoch (may be negative).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct TimeSpec {
    pub sec: i64,
    pub nsec: u32,
}

impl TimeSpec {
    pub fn from_ns(ns: i64) -> TimeSpec {
        TimeSpec { sec: ns.div_euclid(1_000_000_000), nsec: ns.rem_euclid(1_000_000_000) as u32 }
    }

    pub fn as_ns(self) -> i64 {
        self.sec.saturating_mul(1_000_000_000).saturating_add(self.nsec as i64)
    }
}

/// How utimens sets one timestamp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeSet {
    /// UTIME_OMIT: leave it unchanged.
    Omit,
    /// UTIME_NOW: the file system clock.
    Now,
    At(TimeSpec),
}

/// The attributes `stat` reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stat {
    pub ino: InodeNo,
    pub kind: FileType,
    /// Permission bits only (07777); the type is in `kind`.
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Allocated space in 512-byte units, as st_blocks.
    pub blocks: u64,
    pub atime: TimeSpec,
    pub mtime: TimeSpec,
    pub ctime: TimeSpec,
    /// Preferred I/O size (st_blksize).
    pub blksize: u32,
    /// Device number of a device node (st_rdev, as `makedev` encodes it);
    /// 0 for every other type.
    pub rdev: u64,
}

impl Stat {
    /// st_mode: type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// One directory entry as readdir returns it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: InodeNo,
    pub kind: FileType,
    /// The cookie to pass to continue reading after this entry. Cookies stay
    /// valid across concurrent inserts and deletes: an entry present for the
    /// whole listing is returned exactly once.
    pub next_cookie: u64,
}

/// File-system wide figures, as statvfs reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    /// Free blocks an ordinary change may take: the free blocks less the
    /// reserve kept for removals (docs/DESIGN.md, "Space for removals"),
    /// as ext4 reports its root-reserved blocks free but not available.
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// Flags of `open`, a subset of the POSIX ones with the same meaning.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub excl: bool,
    pub trunc: bool,
    pub append: bool,
    pub directory: bool,
    pub nofollow: bool,
    /// O_PATH: a descriptor that only names the file (fstat, fchdir, as
    /// the directory of `*at` calls, dup, close); read, write and the
    /// other descriptor calls give EBADF, as Linux.
    pub path: bool,
    /// O_SYNC / O_DSYNC: kept on the open file description; every write
    /// through it is made durable before it returns (strict mode already
    /// is).
    pub sync: bool,
    pub dsync: bool,
    /// O_CLOEXEC: kept on the descriptor (not the description) for the
    /// front end (an LD_PRELOAD library closes such descriptors at exec).
    pub cloexec: bool,
    /// O_TMPFILE: the path names a directory, in which a regular file
    /// without a name is made and opened (`Ferrite::create_tmpfile_in`).
    /// Linux's O_TMPFILE includes O_DIRECTORY; `directory` is set with it.
    pub tmpfile: bool,
}

impl OpenFlags {
    /// The flags an open acts on, as Linux reads them: EINVAL for
    /// O_CREAT | O_DIRECTORY (Linux 6.4 and later); O_PATH keeps only
    /// O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC (open(2) drops the others,
    /// O_TMPFILE's own bit included, before anything checks them); O_TMPFILE
    /// needs O_DIRECTORY, no O_CREAT and an access mode that writes
    /// (EINVAL otherwise, as build_open_flags).
    pub fn effective(self) -> FsResult<OpenFlags> {
        if self.tmpfile && !self.path && (!self.directory || self.create || !self.write) {
            return Err(Errno::EINVAL);
        }
        if self.create && self.directory {
            return Err(Errno::EINVAL);
        }
        if !self.path {
            return Ok(self);
        }
        Ok(OpenFlags {
            directory: self.directory,
            nofollow: self.nofollow,
            cloexec: self.cloexec,
            path: true,
            ..OpenFlags::default()
        })
    }

    pub const RDONLY: OpenFlags = OpenFlags {
        read: true,
        write: false,
        create: false,
        excl: false,
        trunc: false,
        append: false,
        directory: false,
        nofollow: false,
        path: false,
        sync: false,
        dsync: false,
        cloexec: false,
        tmpfile: false,
    };
    pub const WRONLY: OpenFlags = OpenFlags { read: false, write: true, ..OpenFlags::RDONLY };
    pub const RDWR: OpenFlags = OpenFlags { read: true, write: true, ..OpenFlags::RDONLY };

    pub fn create(mut self) -> Self {
        self.create = true;
        self
    }
    pub fn excl(mut self) -> Self {
        self.excl = true;
        self
    }
    pub fn trunc(mut self) -> Self {
        self.trunc = true;
        self
    }
    pub fn append(mut self) -> Self {
        self.append = true;
        self
    }
    pub fn directory(mut self) -> Self {
        self.directory = true;
        self
    }
    pub fn nofollow(mut self) -> Self {
        self.nofollow = true;
        self
    }
    pub fn o_path(mut self) -> Self {
        self.path = true;
        self
    }
    pub fn cloexec(mut self) -> Self {
        self.cloexec = true;
        self
    }
    pub fn sync(mut self) -> Self {
        self.sync = true;
        self
    }
    /// O_TMPFILE, which carries O_DIRECTORY as in Linux.
    pub fn tmpfile(mut self) -> Self {
        self.tmpfile = true;
        self.directory = true;
        self
    }

    /// The flags an open file description keeps (F_GETFL): the access
    /// mode and status flags, without the creation-time flags (Linux's
    /// `do_dentry_open` drops O_CREAT, O_EXCL and O_TRUNC). O_TMPFILE and
    /// its O_DIRECTORY stay, as Linux's F_GETFL shows them, although the
    /// description names a regular file: whoever opens the same file again
    /// from a status takes `reopen` of it, so as not to make another.
    pub fn status(mut self) -> Self {
        self.create = false;
        self.excl = false;
        self.trunc = false;
        self.cloexec = false;
        self
    }

    /// The flags that open the file of a description again with the same
    /// status: `status` without O_TMPFILE and its O_DIRECTORY (the file
    /// is regular, and opening it with them would make a new one).
    pub fn reopen(mut self) -> Self {
        self = self.status();
        if self.tmpfile {
            self.tmpfile = false;
            self.directory = false;
        }
        self
    }

    /// Decode the `flags` argument of open(2).
    pub fn from_libc(flags: i32) -> OpenFlags {
        let acc = flags & libc::O_ACCMODE;
        OpenFlags {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            create: flags & libc::O_CREAT != 0,
            excl: flags & libc::O_EXCL != 0,
            trunc: flags & libc::O_TRUNC != 0,
            append: flags & libc::O_APPEND != 0,
            directory: flags & libc::O_DIRECTORY != 0,
            nofollow: flags & libc::O_NOFOLLOW != 0,
            path: flags & libc::O_PATH != 0,
            // O_SYNC includes the O_DSYNC bit.
            sync: flags & libc::O_SYNC == libc::O_SYNC,
            dsync: flags & libc::O_DSYNC != 0 && flags & libc::O_SYNC != libc::O_SYNC,
            cloexec: flags & libc::O_CLOEXEC != 0,
            // O_TMPFILE is its own bit together with O_DIRECTORY's.
            tmpfile: flags & libc::O_TMPFILE & !libc::O_DIRECTORY != 0,
        }
    }
}

/// Flags of `rename`, as renameat2(2).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum RenameFlags {
    #[default]
    Replace,
    /// RENAME_NOREPLACE: fail with EEXIST if the target exists.
    NoReplace,
    /// RENAME_EXCHANGE: swap the two names; both must exist.
    Exchange,
}

/// How `setxattr` treats an existing attribute (XATTR_CREATE / XATTR_REPLACE).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum XattrSetMode {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with EEXIST if it exists.
    Create,
    /// Fail with ENODATA if it does not exist.
    Replace,
}

/// Mode of `fallocate`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FallocateMode {
    /// Allocate and extend the size if the range ends past it.
    Default,
    /// FALLOC_FL_KEEP_SIZE: allocate, leave the size alone.
    KeepSize,
    /// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the range reads as zeros
    /// afterwards; whole pages in it are deallocated; the size stays.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE: the range reads as zeros afterwards, every
    /// page of it is allocated, and the size grows to the range's end.
    ZeroRange,
    /// FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE: as `ZeroRange`, the size
    /// stays (pages past the end of file are allocated, as ext4 does).
    ZeroRangeKeepSize,
}

impl FallocateMode {
    /// Every mode, for tests that draw one.
    pub const ALL: [FallocateMode; 5] = [
        FallocateMode::Default,
        FallocateMode::KeepSize,
        FallocateMode::PunchHole,
        FallocateMode::ZeroRange,
        FallocateMode::ZeroRangeKeepSize,
    ];

    /// Decode the `mode` argument of fallocate(2): the five modes served,
    /// EOPNOTSUPP for every other word, as Linux answers PUNCH_HOLE without
    /// KEEP_SIZE and modes combined, and as a file system without the mode
    /// answers (COLLAPSE_RANGE, INSERT_RANGE, ...). One decoder for every
    /// front end, so that they cannot answer one word differently.
    pub fn from_libc(mode: i32) -> FsResult<FallocateMode> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        match mode {
            0 => Ok(FallocateMode::Default),
            KEEP => Ok(FallocateMode::KeepSize),
            m if m == PUNCH | KEEP => Ok(FallocateMode::PunchHole),
            ZERO => Ok(FallocateMode::ZeroRange),
            m if m == ZERO | KEEP => Ok(FallocateMode::ZeroRangeKeepSize),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }
}

/// `whence` of lseek.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Whence {
    Set,
    Cur,
    End,
    /// The next offset at or after the given one that holds data.
    Data,
    /// The next hole at or after the given one (the end of file counts).
    Hole,
}

/// A change of attributes (setattr), each field optional.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

/// Source of timestamps. The default reads the real-time clock; tests
/// install a manual clock so that the engine and the reference model agree.
pub trait Clock: Send + Sync {
    fn now(&self) -> TimeSpec;
}

/// The real-time clock, read coarsely (the kernel tick, 1–4 ms) as Linux
/// file systems stamp files: a few nanoseconds instead of a precise read.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> TimeSpec {
        TimeSpec::from_ns(ferrite_pmem::coarse_realtime_ns())
    }
}

/// A clock that returns whatever it was last set to; for deterministic tests.
#[derive(Default)]
pub struct ManualClock {
    ns: std::sync::atomic::AtomicI64,
}

impl ManualClock {
    pub fn new(start: TimeSpec) -> ManualClock {
        ManualClock { ns: std::sync::atomic::AtomicI64::new(start.as_ns()) }
    }
    pub fn set(&self, t: TimeSpec) {
        self.ns.store(t.as_ns(), std::sync::atomic::Ordering::SeqCst);
    }
    pub fn advance_ns(&self, d: i64) {
        self.ns.fetch_add(d, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> TimeSpec {
        TimeSpec::from_ns(self.ns.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Limits every front end shares.
pub mod limits {
    /// Longest name of one directory entry, in bytes (NAME_MAX).
    pub const NAME_MAX: usize = 255;
    /// Longest path, in bytes, including the terminating NUL (PATH_MAX).
    pub const PATH_MAX: usize = 4096;
    /// Longest symlink target, in bytes.
    pub const SYMLINK_MAX: usize = 4095;
    /// How many symlinks one path resolution may follow (Linux: 40).
    pub const SYMLOOP_MAX: usize = 40;
    /// Largest file size: 2^44 bytes (16 TiB).
    pub const FILE_SIZE_MAX: u64 = 1 << 44;
    /// Most hard links to one inode.
    pub const LINK_MAX: u32 = 65_000;
    /// Longest zero-copy view (`peek`, `map_view`): 1 GiB, so that one view
    /// cannot hold a large share of a pool's pages against reuse.
    pub const VIEW_BYTES_MAX: u64 = 1 << 30;
    /// Most live views of one mounted pool. A view that is not one run of
    /// pool pages is a window of the address space with up to one mapping
    /// per run, and Linux allows a process 65,530 mappings by default
    /// (vm.max_map_count): 4,096 views leave room for the rest of it.
    pub const VIEWS_MAX: usize = 4096;
    /// Largest patch buffer: 1 GiB.
    pub const BUFFER_BYTES_MAX: u64 = 1 << 30;
    /// Most live (not yet patched or freed) patch buffers of one pool.
    pub const BUFFERS_MAX: usize = 1024;
}

/// The path-and-descriptor interface a program sees (the shape of the POSIX
/// calls). The engine's `Session` implements it, and so does the in-memory
/// reference model, so that one randomized workload can drive both and
/// compare.
///
/// One value is one process's view: its descriptor table, its current
/// directory and its credentials. Paths are byte strings; a relative path
/// starts at the current directory, or at `dirfd` for the `*at` calls
/// (`AT_FDCWD`: the current directory); an absolute path ignores `dirfd`.
/// Symlinks are followed in every component but the last, and in the last
/// too where POSIX says so (open without O_NOFOLLOW, stat, chmod, chown,
/// utimens, truncate, and the `*at` calls without AT_SYMLINK_NOFOLLOW).
/// Permissions are checked as Linux checks them, for the credentials set
/// with `set_credentials` (root by default). Errors and their order follow
/// Linux.
///
/// `flags` of the `*at` calls are Linux's AT_* bits (EINVAL for any other).
pub trait PathFs: Send + Sync {
    /// open(2) relative to `dirfd`.
    fn openat(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd>;
    fn close(&self, fd: Fd) -> FsResult<()>;
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize>;
    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize>;
    /// Read at the descriptor's position and advance it.
    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize>;
    /// Write at the descriptor's position (at the end with O_APPEND) and advance it.
    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize>;
    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64>;
    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()>;
    fn fsync(&self, fd: Fd) -> FsResult<()>;
    fn fdatasync(&self, fd: Fd) -> FsResult<()>;
    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()>;
    fn fstat(&self, fd: Fd) -> FsResult<Stat>;
    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()>;
    /// Read up to `max` entries of an open directory, starting after the
    /// entry whose `next_cookie` was `cookie` (0 for the start). `.` and `..`
    /// are not returned.
    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>>;
    fn statfs(&self) -> FsResult<StatFs>;

    // ---- calls relative to a directory descriptor ----------------------

    fn mkdirat(&self, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()>;
    /// Create a regular file (type bits 0 or S_IFREG), FIFO, socket or
    /// device node, as mknod(2): the type comes from `mode`'s S_IFMT bits,
    /// EPERM for a directory, EINVAL for any other type; `rdev` is kept
    /// for device nodes only (which only root may make).
    fn mknodat(&self, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()>;
    /// unlink, or rmdir with AT_REMOVEDIR.
    fn unlinkat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()>;
    fn renameat2(&self, olddirfd: Fd, old: &[u8], newdirfd: Fd, new: &[u8], flags: RenameFlags) -> FsResult<()>;
    /// AT_SYMLINK_FOLLOW follows a final symlink of `old`; AT_EMPTY_PATH
    /// with an empty `old` links `olddirfd`'s file (root only, else ENOENT).
    fn linkat(&self, olddirfd: Fd, old: &[u8], newdirfd: Fd, new: &[u8], flags: i32) -> FsResult<()>;
    fn symlinkat(&self, target: &[u8], newdirfd: Fd, linkpath: &[u8]) -> FsResult<()>;
    /// An empty path reads the symlink `dirfd` names (an O_PATH|O_NOFOLLOW
    /// descriptor); ENOENT if it is not a symlink.
    fn readlinkat(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>>;
    /// AT_SYMLINK_NOFOLLOW (lstat), AT_EMPTY_PATH (the file `dirfd` names).
    fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat>;
    /// As fchmodat2: AT_SYMLINK_NOFOLLOW on a symlink gives EOPNOTSUPP.
    fn fchmodat(&self, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()>;
    fn fchownat(&self, dirfd: Fd, path: &[u8], uid: Option<u32>, gid: Option<u32>, flags: i32) -> FsResult<()>;
    fn utimensat(&self, dirfd: Fd, path: &[u8], atime: TimeSet, mtime: TimeSet, flags: i32) -> FsResult<()>;
    /// access(2): `mode` is F_OK or a mix of R_OK, W_OK, X_OK. The
    /// credentials have no real/effective split, so AT_EACCESS changes
    /// nothing.
    fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()>;

    // ---- calls on a descriptor -------------------------------------------

    fn fchmod(&self, fd: Fd, perm: u32) -> FsResult<()>;
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()>;
    fn futimens(&self, fd: Fd, atime: TimeSet, mtime: TimeSet) -> FsResult<()>;
    fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>>;
    fn fsetxattr(&self, fd: Fd, name: &[u8], value: &[u8], mode: XattrSetMode) -> FsResult<()>;
    /// Names in byte order; trusted.* only for root (as Linux).
    fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>>;
    fn fremovexattr(&self, fd: Fd, name: &[u8]) -> FsResult<()>;
    /// A new descriptor for the same open file description (shared offset
    /// and status flags), without O_CLOEXEC.
    fn dup(&self, fd: Fd) -> FsResult<Fd>;
    /// dup3: the description of `fd` at number `newfd` (closing what was
    /// there); EINVAL if they are equal; EBADF for `AT_FDCWD` as `newfd`.
    fn dup3(&self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd>;
    /// dup2: as dup3, but `fd == newfd` returns `newfd` if it is open.
    fn dup2(&self, fd: Fd, newfd: Fd) -> FsResult<Fd> {
        if fd == newfd {
            self.get_cloexec(fd)?;
            return Ok(newfd);
        }
        self.dup3(fd, newfd, false)
    }
    /// F_GETFD / F_SETFD (FD_CLOEXEC).
    fn get_cloexec(&self, fd: Fd) -> FsResult<bool>;
    fn set_cloexec(&self, fd: Fd, cloexec: bool) -> FsResult<()>;
    /// F_GETFL: the description's access mode and status flags
    /// (`OpenFlags::status`).
    fn getfl(&self, fd: Fd) -> FsResult<OpenFlags>;
    /// F_SETFL for O_APPEND, the one status flag that can change here
    /// (EBADF on an O_PATH descriptor).
    fn setfl_append(&self, fd: Fd, append: bool) -> FsResult<()>;

    // ---- current directory and credentials -------------------------------

    fn chdir(&self, path: &[u8]) -> FsResult<()>;
    fn fchdir(&self, fd: Fd) -> FsResult<()>;
    /// The absolute path of the current directory; ENOENT once it has been
    /// removed (as Linux).
    fn getcwd(&self) -> FsResult<Vec<u8>>;
    fn credentials(&self) -> Credentials;
    fn set_credentials(&self, creds: Credentials);

    // ---- the classic calls: the AT_FDCWD case of the above ----------------

    fn open(&self, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        self.openat(AT_FDCWD, path, flags, perm)
    }
    fn stat(&self, path: &[u8]) -> FsResult<Stat> {
        self.fstatat(AT_FDCWD, path, 0)
    }
    fn lstat(&self, path: &[u8]) -> FsResult<Stat> {
        self.fstatat(AT_FDCWD, path, libc::AT_SYMLINK_NOFOLLOW)
    }
    fn chmod(&self, path: &[u8], perm: u32) -> FsResult<()> {
        self.fchmodat(AT_FDCWD, path, perm, 0)
    }
    fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        self.fchownat(AT_FDCWD, path, uid, gid, 0)
    }
    fn utimens(&self, path: &[u8], atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        self.utimensat(AT_FDCWD, path, atime, mtime, 0)
    }
    fn mkdir(&self, path: &[u8], perm: u32) -> FsResult<()> {
        self.mkdirat(AT_FDCWD, path, perm)
    }
    fn rmdir(&self, path: &[u8]) -> FsResult<()> {
        self.unlinkat(AT_FDCWD, path, libc::AT_REMOVEDIR)
    }
    fn unlink(&self, path: &[u8]) -> FsResult<()> {
        self.unlinkat(AT_FDCWD, path, 0)
    }
    fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> FsResult<()> {
        self.renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)
    }
    fn link(&self, existing: &[u8], new: &[u8]) -> FsResult<()> {
        self.linkat(AT_FDCWD, existing, AT_FDCWD, new, 0)
    }
    fn symlink(&self, target: &[u8], linkpath: &[u8]) -> FsResult<()> {
        self.symlinkat(target, AT_FDCWD, linkpath)
    }
    fn mknod(&self, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        self.mknodat(AT_FDCWD, path, mode, rdev)
    }
    fn readlink(&self, path: &[u8]) -> FsResult<Vec<u8>> {
        self.readlinkat(AT_FDCWD, path)
    }
}
