//! Extended attributes at the inode level: one XattrSet entry per change,
//! committed like any single-inode change. Names follow Linux's namespaces
//! (`xattr_name.rs`); an access ACL equivalent to a mode sets the mode.

use crate::commit::{Change, Fresh};
use crate::format::Entry;
use crate::fs::Ferrite;
use crate::types::{Errno, FileMode, FileType, FsResult, InodeNo, SetAttr, XattrSetMode};
use crate::xattr_name::{self, XattrName};

impl Ferrite {
    /// The value of an extended attribute (ENODATA if it has none).
    /// EOPNOTSUPP for the POSIX ACL names, as a file system without ACLs
    /// answers: none is ever stored (an access ACL that is the mode sets
    /// the mode, any other is refused), and programs that look for ACLs
    /// take EOPNOTSUPP to mean "none here" and stop asking (`ls -l` asks
    /// twice per file until it sees it once on a file system), where
    /// ENODATA would have them ask again for every file.
    pub fn getxattr(&self, ino: InodeNo, name: &[u8]) -> FsResult<Vec<u8>> {
        match xattr_name::classify(name) {
            XattrName::Stored => {}
            XattrName::EmptySuffix => return Err(Errno::EINVAL),
            XattrName::AclAccess | XattrName::AclDefault | XattrName::Unsupported => return Err(Errno::EOPNOTSUPP),
        }
        let inode = self.inode(ino)?;
        if name == FileMode::XATTR {
            // The consistency mode: answered, not stored (regular files only).
            if inode.kind != FileType::Regular {
                return Err(Errno::ENODATA);
            }
            let stored = self.file_mode_ino(ino)?;
            // A buffered mount applies no per-file mode: every file is
            // buffered. The stored mode is kept (it applies again on a
            // mount that is not buffered) and can still be set.
            if self.is_buffered() {
                return Ok(b"buffered".to_vec());
            }
            return Ok(stored.as_str().as_bytes().to_vec());
        }
        let d = inode.lock_read();
        d.xattrs.get(name).map(|(v, _)| v.to_vec()).ok_or(Errno::ENODATA)
    }

    /// The names of an inode's extended attributes, in byte order.
    pub fn listxattr(&self, ino: InodeNo) -> FsResult<Vec<Vec<u8>>> {
        let inode = self.inode(ino)?;
        let d = inode.lock_read();
        Ok(d.xattrs.keys().map(|k| k.to_vec()).collect())
    }

    /// Set an extended attribute, atomically and durably like every change.
    /// Names are 1..=255 bytes without NUL (ERANGE otherwise) in one of
    /// Linux's namespaces (EOPNOTSUPP otherwise, see `xattr_name`); name and
    /// value together at most `format::XATTR_BYTES_MAX` bytes (E2BIG). An
    /// access ACL equivalent to a mode sets the mode (as chmod) and is not
    /// stored.
    pub fn setxattr(&self, ino: InodeNo, name: &[u8], value: &[u8], mode: XattrSetMode) -> FsResult<()> {
        if name.is_empty() || name.len() > crate::format::XATTR_NAME_MAX || name.contains(&0) {
            return Err(Errno::ERANGE);
        }
        match xattr_name::classify(name) {
            XattrName::Stored => {}
            XattrName::AclAccess => return self.set_acl_access(ino, value),
            XattrName::EmptySuffix => return Err(Errno::EINVAL),
            XattrName::AclDefault | XattrName::Unsupported => return Err(Errno::EOPNOTSUPP),
        }
        if name == FileMode::XATTR {
            let m = FileMode::parse(value).ok_or(Errno::EINVAL)?;
            return self.set_file_mode_ino(ino, m);
        }
        if name.len() + value.len() > crate::format::XATTR_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        // A change of attributes: it may take half of the removal reserve,
        // as chmod does (docs/DESIGN.md, "Space for removals"), so that
        // `setfattr` on a full pool works as on tmpfs, and half stays for
        // removals. Each needs one log page at most (an entry is at most
        // `XATTR_BYTES_MAX` bytes and its header).
        let _attribute = crate::alloc::attribute_scope();
        self.change_xattr(ino, name, Some(value), mode)
    }

    /// Remove an extended attribute (ENODATA if it has none).
    pub fn removexattr(&self, ino: InodeNo, name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.len() > crate::format::XATTR_NAME_MAX {
            return Err(Errno::ERANGE);
        }
        match xattr_name::classify(name) {
            XattrName::Unsupported => return Err(Errno::EOPNOTSUPP),
            XattrName::EmptySuffix => return Err(Errno::EINVAL),
            _ => {}
        }
        if name == FileMode::XATTR {
            // A file always has a mode; set "strict" instead.
            return Err(Errno::EINVAL);
        }
        // Removing releases log space once compacted; its own entry may
        // take the removal reserve (docs/DESIGN.md, "Space for removals").
        let _removal = crate::alloc::removal_scope();
        self.change_xattr(ino, name, None, XattrSetMode::Replace)
    }

    /// `system.posix_acl_access`: an ACL of owner, group and other entries
    /// only is the mode's permission bits, set as chmod sets them (ctime
    /// too); an empty value removes an extended ACL, of which there is
    /// none, so it changes nothing.
    fn set_acl_access(&self, ino: InodeNo, value: &[u8]) -> FsResult<()> {
        let bits = if value.is_empty() { None } else { Some(xattr_name::acl_access_mode(value)?) };
        let inode = self.inode(ino)?;
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        if let Some(bits) = bits {
            let perm = (d.attrs.perm & !0o777) | bits;
            self.setattr_locked(&inode, &mut d, &SetAttr { perm: Some(perm), ..SetAttr::default() })?;
        }
        Ok(())
    }

    fn change_xattr(&self, ino: InodeNo, name: &[u8], value: Option<&[u8]>, mode: XattrSetMode) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        let exists = d.xattrs.contains_key(name);
        match (mode, exists) {
            (XattrSetMode::Create, true) => return Err(Errno::EEXIST),
            (XattrSetMode::Replace, false) => return Err(Errno::ENODATA),
            _ => {}
        }
        if value.is_some() && name == crate::perm::CAPABILITY_XATTR {
            // A write must look again for what it would take away.
            inode.nosec.store(false, std::sync::atomic::Ordering::Release);
        }
        let entry = Entry::Xattr(crate::format::XattrEntry {
            name: name.to_vec(),
            value: value.map(|v| v.to_vec()),
            ctime_ns: self.now_ns(),
        });
        self.commit(&inode, &mut d, smallvec::smallvec![entry], Fresh::none(), Change::Meta)
    }
}
