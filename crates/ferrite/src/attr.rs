//! Attributes at the inode level: stat, and chmod/chown/utimens/truncate
//! as one setattr commit.

use crate::commit::{Change, Fresh};
use crate::format::Entry;
use crate::fs::Ferrite;
use crate::inode::{Inode, InodeData};
use crate::perm::{self, Owner, PrivilegeDrop, CAPABILITY_XATTR};
use crate::types::{Credentials, Errno, FileType, FsResult, InodeNo, SetAttr, Stat, TimeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Ferrite {
    pub fn getattr(&self, ino: InodeNo) -> FsResult<Stat> {
        self.getattr_inode(&self.inode(ino)?)
    }

    /// getattr of an inode already held (ENOENT once it has been freed).
    pub(crate) fn getattr_inode(&self, i: &Arc<Inode>) -> FsResult<Stat> {
        let d = i.lock_read();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        Ok(i.stat(&d))
    }

    /// Change attributes (chmod, chown, utimens, truncate) in one commit.
    pub fn setattr(&self, ino: InodeNo, set: &SetAttr) -> FsResult<Stat> {
        self.setattr_inode(&self.inode(ino)?, set)
    }

    /// setattr of an inode already held (ENOENT once it has been freed).
    pub(crate) fn setattr_inode(&self, inode: &Arc<Inode>, set: &SetAttr) -> FsResult<Stat> {
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.setattr_locked(inode, &mut d, set)?;
        Ok(inode.stat(&d))
    }

    pub(crate) fn setattr_locked(&self, inode: &Inode, d: &mut InodeData, set: &SetAttr) -> FsResult<()> {
        self.setattr_commit(inode, d, set, false)
    }

    /// setattr of an inode already held, made by `c`, with what `why`
    /// takes away in the same commit (see [`Ferrite::setattr_as_locked`]):
    /// chown and truncate as the path API makes them.
    pub(crate) fn setattr_as(
        &self,
        inode: &Arc<Inode>,
        set: &SetAttr,
        c: &Credentials,
        why: PrivilegeDrop,
    ) -> FsResult<Stat> {
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.setattr_as_locked(inode, &mut d, set, c, why)?;
        Ok(inode.stat(&d))
    }

    /// Take away what a write or patch by the caller (`creds`) takes from
    /// a file, in a commit of its own made before the change, as Linux's
    /// `file_remove_privs` does before a write. One load when the inode is
    /// known to hold nothing to take (`Inode::nosec`); the credentials are
    /// read only when it may.
    pub(crate) fn drop_privileges(&self, inode: &Inode, creds: impl FnOnce() -> Credentials) -> FsResult<()> {
        if inode.nosec.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut d = inode.lock_write();
        if !d.alive {
            // The change that follows answers ENOENT or EBADF itself.
            return Ok(());
        }
        self.setattr_as_locked(inode, &mut d, &SetAttr::default(), &creds(), PrivilegeDrop::Modify)
    }

    /// setattr of `set` (which may be empty) by `c`, with the set-ID bits
    /// `why` takes (`perm::dropped_bits`, unless `set` names the bits
    /// itself) and the file's capabilities (`security.capability`, taken
    /// whoever the caller is) dropped in the same commit, so a truncate or
    /// chown is one atomic change, as in Linux's single `notify_change`.
    /// Marks the inode `nosec` when it holds nothing that could be taken.
    pub(crate) fn setattr_as_locked(
        &self,
        inode: &Inode,
        d: &mut InodeData,
        set: &SetAttr,
        c: &Credentials,
        why: PrivilegeDrop,
    ) -> FsResult<()> {
        if inode.nosec.load(Ordering::Acquire) {
            return self.setattr_commit(inode, d, set, false);
        }
        let mut set = *set;
        let owner = Owner { kind: inode.kind, perm: d.attrs.perm, uid: d.attrs.uid, gid: d.attrs.gid };
        // A directory keeps its capabilities, as its set-ID bits, through
        // a chown (chown_common); nothing else writes to one.
        let remove_capability = inode.kind != FileType::Directory && d.xattrs.contains_key(CAPABILITY_XATTR);
        if set.perm.is_none() {
            set.perm = perm::dropped_bits(c, &owner, why);
        }
        if !d.xattrs.contains_key(CAPABILITY_XATTR) && d.attrs.perm & 0o6000 == 0 {
            // Nothing to take from anyone. A `set` that adds a set-ID bit
            // makes it false again in setattr_commit, under this lock.
            inode.nosec.store(true, Ordering::Release);
        }
        self.setattr_commit(inode, d, &set, remove_capability)
    }

    /// The one setattr commit: `set`, and the removal of the file's
    /// capabilities when `remove_capability`.
    fn setattr_commit(&self, inode: &Inode, d: &mut InodeData, set: &SetAttr, remove_capability: bool) -> FsResult<()> {
        // A truncate that does not grow the file releases its pages, so it
        // may take the removal reserve (docs/DESIGN.md, "Space for
        // removals"): `> file` frees space on a full pool. Any other change
        // of attributes may take half of it: `touch` and chmod work on a
        // full pool, and half stays for removals.
        let _reserve = if set.size.is_some_and(|s| s <= d.attrs.size) {
            crate::alloc::removal_scope()
        } else {
            crate::alloc::attribute_scope()
        };
        if set.perm.is_some_and(|p| p & 0o6000 != 0) {
            inode.nosec.store(false, Ordering::Release);
        }
        let now = self.now_ns();
        let mut entries = crate::log::Entries::new();
        let mut cow = Fresh::none();
        if remove_capability {
            entries.push(Entry::Xattr(crate::format::XattrEntry {
                name: CAPABILITY_XATTR.to_vec(),
                value: None,
                ctime_ns: now,
            }));
        }
        if let Some(size) = set.size {
            match inode.kind {
                FileType::Directory => return Err(Errno::EISDIR),
                FileType::Regular => {}
                _ => return Err(Errno::EINVAL),
            }
            let (e, c) = self.truncate_entries(inode, d, size, now)?;
            entries.extend(e);
            cow = c;
        }
        let times_only_omit =
            matches!(set.atime, None | Some(TimeSet::Omit)) && matches!(set.mtime, None | Some(TimeSet::Omit));
        let attr_change = set.perm.is_some() || set.uid.is_some() || set.gid.is_some() || !times_only_omit;
        if attr_change {
            let mut a = d.attrs;
            if let Some(p) = set.perm {
                a.perm = p & 0o7777;
            }
            if let Some(u) = set.uid {
                a.uid = u;
            }
            if let Some(g) = set.gid {
                a.gid = g;
            }
            let resolve = |t: TimeSet, old: i64| match t {
                TimeSet::Omit => old,
                TimeSet::Now => now,
                TimeSet::At(ts) => ts.as_ns(),
            };
            if let Some(t) = set.atime {
                a.atime_ns = resolve(t, a.atime_ns);
            }
            if let Some(t) = set.mtime {
                a.mtime_ns = resolve(t, a.mtime_ns);
            } else if set.size.is_some() {
                a.mtime_ns = now;
            }
            a.ctime_ns = now;
            entries.push(Entry::Attr(a.to_entry()));
        }
        if entries.is_empty() {
            return Ok(());
        }
        // A truncate alone is a data change (pending in an fsync-atomic
        // file); a change of attributes or extended attributes is a commit
        // point.
        let change = if attr_change || remove_capability { Change::Meta } else { Change::Data };
        self.commit(inode, d, entries, cow, change)
    }
}
