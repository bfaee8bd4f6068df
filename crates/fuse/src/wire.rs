//! The FUSE wire format, as far as the io_uring transport needs it: the
//! request structures it decodes and the reply structures it encodes.
//!
//! The layouts are the kernel's ABI (`include/uapi/linux/fuse.h`, protocol
//! 7.x); they are in the host's byte order (FUSE never crosses machines).
//! Nothing here is trusted: every decoder checks the length it is given
//! and answers `None` (the request is then refused with EINVAL) rather
//! than reading past the end.

use ferrite::{FileType, Stat, TimeSpec};
use std::time::Duration;

/// Opcodes (`enum fuse_opcode`).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
}

/// The handler name of an opcode, for log lines (as the /dev/fuse side
/// names them).
pub fn op_name(opcode: u32) -> &'static str {
    match opcode {
        op::LOOKUP => "lookup",
        op::FORGET => "forget",
        op::GETATTR => "getattr",
        op::SETATTR => "setattr",
        op::READLINK => "readlink",
        op::SYMLINK => "symlink",
        op::MKNOD => "mknod",
        op::MKDIR => "mkdir",
        op::UNLINK => "unlink",
        op::RMDIR => "rmdir",
        op::RENAME | op::RENAME2 => "rename",
        op::LINK => "link",
        op::OPEN => "open",
        op::READ => "read",
        op::WRITE => "write",
        op::STATFS => "statfs",
        op::RELEASE => "release",
        op::FSYNC => "fsync",
        op::SETXATTR => "setxattr",
        op::GETXATTR => "getxattr",
        op::LISTXATTR => "listxattr",
        op::REMOVEXATTR => "removexattr",
        op::FLUSH => "flush",
        op::OPENDIR => "opendir",
        op::READDIR => "readdir",
        op::RELEASEDIR => "releasedir",
        op::FSYNCDIR => "fsyncdir",
        op::ACCESS => "access",
        op::CREATE => "create",
        op::FALLOCATE => "fallocate",
        op::READDIRPLUS => "readdirplus",
        op::LSEEK => "lseek",
        op::COPY_FILE_RANGE => "copy_file_range",
        _ => "request",
    }
}

/// `struct fuse_in_header`.
pub const IN_HEADER_SIZE: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_SIZE: usize = 16;
/// `struct fuse_attr`.
pub const ATTR_SIZE: usize = 88;
/// `struct fuse_entry_out`.
pub const ENTRY_OUT_SIZE: usize = 40 + ATTR_SIZE;
/// `struct fuse_attr_out`.
pub const ATTR_OUT_SIZE: usize = 16 + ATTR_SIZE;
/// `struct fuse_open_out`.
pub const OPEN_OUT_SIZE: usize = 16;
/// `struct fuse_kstatfs` (all of `fuse_statfs_out`).
pub const STATFS_OUT_SIZE: usize = 80;
/// `struct fuse_dirent` without its name.
pub const DIRENT_SIZE: usize = 24;

const _: () = assert!(ENTRY_OUT_SIZE == 128 && ATTR_OUT_SIZE == 104 && STATFS_OUT_SIZE == 80);

/// `setattr` valid bits (`FATTR_*`).
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_in.open_flags` / `fuse_create_in.open_flags`: drop the set-ID
/// bits (an unprivileged O_TRUNC under FUSE_HANDLE_KILLPRIV_V2).
pub const OPEN_KILL_SUIDGID: u32 = 1;

/// `fuse_fsync_in.fsync_flags`: only the data.
pub const FSYNC_FDATASYNC: u32 = 1;

/// A little reader over one request argument.
pub struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    pub fn new(b: &'a [u8]) -> Fields<'a> {
        Fields { b, at: 0 }
    }
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.b.get(self.at..self.at + N)?;
        self.at += N;
        s.try_into().ok()
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take::<2>().map(u16::from_ne_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_ne_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_ne_bytes)
    }
    pub fn skip(&mut self, n: usize) -> Option<()> {
        if self.at + n > self.b.len() {
            return None;
        }
        self.at += n;
        Some(())
    }
}

/// `struct fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    pub fn decode(b: &[u8]) -> Option<InHeader> {
        if b.len() < IN_HEADER_SIZE {
            return None;
        }
        let mut f = Fields::new(b);
        Some(InHeader {
            len: f.u32()?,
            opcode: f.u32()?,
            unique: f.u64()?,
            nodeid: f.u64()?,
            uid: f.u32()?,
            gid: f.u32()?,
            pid: f.u32()?,
        })
    }
}

/// Split NUL-terminated strings off the front of `b`: the string and the
/// rest after its NUL.
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = b.iter().position(|&c| c == 0)?;
    Some((&b[..n], &b[n + 1..]))
}

/// Appends the encoded reply structures to a buffer.
pub struct Out<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl<'a> Out<'a> {
    pub fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }
    /// Room left.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_ne_bytes());
    }
    fn zeros(&mut self, n: usize) {
        self.buf[self.len..self.len + n].fill(0);
        self.len += n;
    }

    /// `struct fuse_attr`.
    pub fn attr(&mut self, st: &Stat) {
        let t = |t: TimeSpec| (t.sec as u64, t.nsec);
        let (a, an) = t(st.atime);
        let (m, mn) = t(st.mtime);
        let (c, cn) = t(st.ctime);
        self.u64(st.ino.0);
        self.u64(st.size);
        self.u64(st.blocks);
        self.u64(a);
        self.u64(m);
        self.u64(c);
        self.u32(an);
        self.u32(mn);
        self.u32(cn);
        self.u32(st.kind.mode_bits() | (st.perm & 0o7777));
        self.u32(st.nlink);
        self.u32(st.uid);
        self.u32(st.gid);
        // Device numbers go in the kernel's 32-bit encoding (equal to
        // glibc's makedev for 12-bit majors, 20-bit minors).
        self.u32(u32::try_from(st.rdev).unwrap_or(0));
        self.u32(st.blksize);
        self.u32(0); // flags
    }

    /// `struct fuse_entry_out`; `st` None is a negative entry (node 0).
    pub fn entry(&mut self, st: Option<&Stat>, entry_ttl: Duration, attr_ttl: Duration) {
        self.u64(st.map_or(0, |s| s.ino.0));
        self.u64(0); // generation
        self.u64(entry_ttl.as_secs());
        self.u64(attr_ttl.as_secs());
        self.u32(entry_ttl.subsec_nanos());
        self.u32(attr_ttl.subsec_nanos());
        match st {
            Some(st) => self.attr(st),
            None => self.zeros(ATTR_SIZE),
        }
    }

    /// `struct fuse_attr_out`.
    pub fn attr_out(&mut self, st: &Stat, ttl: Duration) {
        self.u64(ttl.as_secs());
        self.u32(ttl.subsec_nanos());
        self.u32(0);
        self.attr(st);
    }

    /// `struct fuse_open_out`.
    pub fn open_out(&mut self, fh: u64, open_flags: u32) {
        self.u64(fh);
        self.u32(open_flags);
        self.u32(0); // backing_id: no passthrough
    }

    /// `struct fuse_dirent` and its name padded to 8 bytes; false if it
    /// does not fit (nothing written).
    pub fn dirent(&mut self, ino: u64, off: u64, kind: FileType, name: &[u8]) -> bool {
        let size = DIRENT_SIZE + name.len();
        let padded = size.next_multiple_of(8);
        if padded > self.room() {
            return false;
        }
        self.u64(ino);
        self.u64(off);
        self.u32(name.len() as u32);
        self.u32(u32::from(kind.dirent_type()));
        self.bytes(name);
        self.zeros(padded - size);
        true
    }

    /// `struct fuse_direntplus`: an entry and a dirent; false if it does
    /// not fit (nothing written).
    pub fn direntplus(&mut self, st: &Stat, off: u64, name: &[u8], ttl: Duration) -> bool {
        let padded = (DIRENT_SIZE + name.len()).next_multiple_of(8);
        if ENTRY_OUT_SIZE + padded > self.room() {
            return false;
        }
        self.entry(Some(st), ttl, ttl);
        self.dirent(st.ino.0, off, st.kind, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::InodeNo;

    fn stat() -> Stat {
        Stat {
            ino: InodeNo(7),
            kind: FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 1,
            gid: 2,
            size: 3,
            blocks: 8,
            atime: TimeSpec { sec: 10, nsec: 11 },
            mtime: TimeSpec { sec: 12, nsec: 13 },
            ctime: TimeSpec { sec: 14, nsec: 15 },
            blksize: 4096,
            rdev: 0,
        }
    }

    #[test]
    fn sizes_match_the_kernel_structures() {
        let mut b = [0u8; 512];
        let mut o = Out::new(&mut b);
        o.attr(&stat());
        assert_eq!(o.len, ATTR_SIZE);
        let mut o = Out::new(&mut b);
        o.entry(Some(&stat()), Duration::from_secs(1), Duration::from_millis(1500));
        assert_eq!(o.len, ENTRY_OUT_SIZE);
        // entry_valid 1 s, attr_valid 1 s + 500,000,000 ns.
        assert_eq!(&b[16..24], &1u64.to_ne_bytes());
        assert_eq!(&b[24..32], &1u64.to_ne_bytes());
        assert_eq!(&b[36..40], &500_000_000u32.to_ne_bytes());
        // The mode sits after ino, size, blocks, three times and three nsecs.
        let mode_at = 40 + 8 * 6 + 4 * 3;
        assert_eq!(&b[mode_at..mode_at + 4], &(libc::S_IFREG | 0o644).to_ne_bytes());
    }

    #[test]
    fn dirents_are_padded_and_refused_when_full() {
        let mut b = [0u8; 64];
        let mut o = Out::new(&mut b);
        assert!(o.dirent(5, 1, FileType::Directory, b"abc"));
        assert_eq!(o.len, 32); // 24 + 3, padded to 8
        assert!(o.dirent(6, 2, FileType::Regular, b"0123456"));
        assert_eq!(o.len, 64);
        assert!(!o.dirent(7, 3, FileType::Regular, b"x"));
        assert_eq!(o.len, 64);
    }

    #[test]
    fn short_requests_decode_to_none() {
        assert!(InHeader::decode(&[0u8; 39]).is_none());
        assert!(InHeader::decode(&[0u8; 40]).is_some());
        assert_eq!(cstr(b"a\0b\0"), Some((&b"a"[..], &b"b\0"[..])));
        assert_eq!(cstr(b"no nul"), None);
    }
}
