//! Permission rules, as Linux's VFS applies them (generic_permission,
//! may_delete's sticky check, setattr_prepare's chown/chmod/utimes rules,
//! inode_init_owner). Pure functions of the caller's credentials and an
//! inode's owner and mode: the engine's `Session` and the reference model
//! apply them at the same points of each call.
//!
//! Root (uid 0) stands for a caller with every capability: it reads and
//! writes anything, searches any directory, executes a file with at least
//! one x bit, owns everything for chmod/chown/utimens, and is in every
//! group for the set-group-id rules.

use crate::types::{Credentials, Errno, FileType, FsResult};

/// Read permission (as MAY_READ / R_OK).
pub const READ: u32 = 4;
/// Write permission (as MAY_WRITE / W_OK).
pub const WRITE: u32 = 2;
/// Execute, or search for a directory (as MAY_EXEC / X_OK).
pub const EXEC: u32 = 1;

/// What a permission check needs to know of an inode.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub kind: FileType,
    /// Permission bits (07777).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
}

/// generic_permission: may `c` access the inode for `mask` (READ | WRITE |
/// EXEC)? EACCES if not.
pub fn check(c: &Credentials, o: &Owner, mask: u32) -> FsResult<()> {
    let mask = mask & 7;
    let bits = if c.uid == o.uid {
        (o.perm >> 6) & 7
    } else if c.in_group(o.gid) {
        (o.perm >> 3) & 7
    } else {
        o.perm & 7
    };
    if mask & !bits == 0 {
        return Ok(());
    }
    if c.is_root() {
        // Directories: read and search always, write too (DAC override).
        // Other files: read and write always, execute with any x bit.
        if o.kind == FileType::Directory || mask & EXEC == 0 || o.perm & 0o111 != 0 {
            return Ok(());
        }
    }
    Err(Errno::EACCES)
}

/// inode_owner_or_capable: the owner, or root.
pub fn owner_or_root(c: &Credentials, o: &Owner) -> bool {
    c.is_root() || c.uid == o.uid
}

/// may_delete's sticky rule: in a sticky directory only the owner of the
/// entry's inode, the owner of the directory, or root may remove or rename
/// it. True when the removal is refused (EPERM).
pub fn sticky_refuses(c: &Credentials, dir: &Owner, victim: &Owner) -> bool {
    dir.perm & 0o1000 != 0 && !c.is_root() && c.uid != victim.uid && c.uid != dir.uid
}

/// setattr_prepare's chown rules for uid and gid (None: unchanged). EPERM
/// when refused: only root gives a file to another user; the owner may
/// change the group to one of its own groups.
pub fn may_chown(c: &Credentials, o: &Owner, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
    if c.is_root() {
        return Ok(());
    }
    if let Some(u) = uid {
        if !(c.uid == o.uid && u == o.uid) {
            return Err(Errno::EPERM);
        }
    }
    if let Some(g) = gid {
        if !(c.uid == o.uid && (g == o.gid || c.in_group(g))) {
            return Err(Errno::EPERM);
        }
    }
    Ok(())
}

/// chmod: EPERM unless owner or root; returns the bits to store, without
/// set-group-id when a non-root caller is not in the file's group.
pub fn chmod_bits(c: &Credentials, o: &Owner, perm: u32) -> FsResult<u32> {
    if !owner_or_root(c, o) {
        return Err(Errno::EPERM);
    }
    let mut perm = perm & 0o7777;
    if !c.is_root() && !c.in_group(o.gid) {
        perm &= !0o2000;
    }
    Ok(perm)
}

/// utimensat: setting both times to now needs ownership or write
/// permission (EACCES); any other change (an explicit time, or now for one
/// of them) needs ownership (EPERM). `both_now` says both times are now.
pub fn may_set_times(c: &Credentials, o: &Owner, both_now: bool) -> FsResult<()> {
    if owner_or_root(c, o) {
        return Ok(());
    }
    if both_now {
        return check(c, o, WRITE);
    }
    Err(Errno::EPERM)
}

/// Owner and permission bits of a new inode of `kind` made by `c` with
/// `perm` (already masked as the call does: 07777 for files, 01777 for
/// directories) in directory `dir` (inode_init_owner, mode_strip_umask,
/// mode_strip_sgid): the umask applies except to symlinks; the group is
/// the directory's if it is set-group-id, where a new directory inherits
/// the bit and a new file loses set-group-id (with group execute) unless
/// the caller is in that group or root.
pub fn new_owner(c: &Credentials, dir: &Owner, kind: FileType, perm: u32) -> (u32, u32, u32) {
    let mut perm = if kind == FileType::Symlink { perm } else { perm & !c.umask & 0o7777 };
    let mut gid = c.gid;
    if dir.perm & 0o2000 != 0 {
        gid = dir.gid;
        if kind == FileType::Directory {
            perm |= 0o2000;
        } else if perm & 0o2010 == 0o2010 && !c.is_root() && !c.in_group(dir.gid) {
            perm &= !0o2000;
        }
    }
    (c.uid, gid, perm)
}

/// vfs_mknod: device nodes need root (CAP_MKNOD), except a character
/// device 0:0, which is a whiteout anyone may make.
pub fn may_mknod(c: &Credentials, kind: FileType, rdev: u64) -> FsResult<()> {
    let whiteout = kind == FileType::CharDevice && rdev == 0;
    if kind.has_rdev() && !whiteout && !c.is_root() {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// may_create_in_sticky: O_CREAT finding an existing file that is neither
/// regular nor a FIFO in a sticky, world-writable directory, owned neither
/// by the directory's owner nor by the caller (root included): EACCES.
/// (Regular files and FIFOs are refused only under the fs.protected_regular
/// and fs.protected_fifos sysctls, which are not imitated.)
pub fn sticky_create_refuses(c: &Credentials, dir: &Owner, inode: &Owner) -> bool {
    dir.perm & 0o1000 != 0
        && dir.perm & 0o002 != 0
        && !matches!(inode.kind, FileType::Regular | FileType::Fifo)
        && inode.uid != dir.uid
        && inode.uid != c.uid
}

/// What takes a file's privileges away in Linux: its set-user-ID and
/// set-group-ID bits, and its file capabilities (`security.capability`),
/// which would otherwise stay attached to content or an owner they were
/// never granted for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PrivilegeDrop {
    /// A write of at least one byte, a truncate (to any size, the same one
    /// included, and O_TRUNC) or an fallocate: `file_remove_privs`.
    Modify,
    /// A chown of anything but a directory, even to the same owner or with
    /// both ids -1: `chown_common`.
    Chown,
}

/// The name of the extended attribute that holds a file's capabilities,
/// which every `PrivilegeDrop` removes, whoever the caller is.
pub const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// The permission bits left once `why` by `c` has taken the set-ID bits
/// away (Linux 6's `setattr_should_drop_suidgid` and
/// `setattr_should_drop_sgid`), or None when none is taken. A modification
/// takes them from a regular file only, and never when root (CAP_FSETID)
/// makes it; a chown takes set-user-ID from anything but a directory,
/// root's chown too. Set-group-ID goes with set-user-ID when the group may
/// execute the file; without group execute it marks mandatory locking and
/// goes only when a non-root caller is not in the file's group.
pub fn dropped_bits(c: &Credentials, o: &Owner, why: PrivilegeDrop) -> Option<u32> {
    let applies = match why {
        PrivilegeDrop::Modify => o.kind == FileType::Regular && !c.is_root(),
        PrivilegeDrop::Chown => o.kind != FileType::Directory,
    };
    if !applies {
        return None;
    }
    set_id_bits_left(o.perm, c.is_root() || c.in_group(o.gid))
}

/// The permission bits `perm` keeps once its set-ID bits are taken away
/// (None when it had none to lose): set-user-ID always; set-group-ID when
/// the group may execute the file, or when the caller is neither in the
/// file's group nor privileged (`in_group_or_capable` false). For front
/// ends where the kernel has already decided that the bits go (FUSE's
/// KILL_SUIDGID flags), and for `dropped_bits`.
pub fn set_id_bits_left(perm: u32, in_group_or_capable: bool) -> Option<u32> {
    let old = perm & 0o7777;
    let mut new = old & !0o4000;
    if new & 0o2000 != 0 && (new & 0o010 != 0 || !in_group_or_capable) {
        new &= !0o2000;
    }
    (new != old).then_some(new)
}
