//! Attributes at the inode level: stat, and chmod/chown/utimens/truncate
//! as one setattr commit.

use crate::commit::{Change, Fresh};
use crate::format::Entry;
use crate::fs::Ferrite;
use crate::inode::{Inode, InodeData};
use crate::types::{Errno, FileType, FsResult, InodeNo, SetAttr, Stat, TimeSet};
use std::sync::Arc;

impl Ferrite {
    pub fn getattr(&self, ino: InodeNo) -> FsResult<Stat> {
        self.getattr_inode(&self.inode(ino)?)
    }

    /// getattr of an inode already held (ENOENT once it has been freed).
    pub(crate) fn getattr_inode(&self, i: &Arc<Inode>) -> FsResult<Stat> {
        let d = i.data.read();
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
        let mut d = inode.data.write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.setattr_locked(inode, &mut d, set)?;
        Ok(inode.stat(&d))
    }

    pub(crate) fn setattr_locked(&self, inode: &Inode, d: &mut InodeData, set: &SetAttr) -> FsResult<()> {
        let now = self.now_ns();
        let mut entries = Vec::new();
        let mut cow = Fresh::none();
        if let Some(size) = set.size {
            match inode.kind {
                FileType::Directory => return Err(Errno::EISDIR),
                FileType::Regular => {}
                _ => return Err(Errno::EINVAL),
            }
            let (e, c) = self.truncate_entries(d, size, now)?;
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
        // file); a change of attributes is a commit point.
        let change = if attr_change { Change::Meta } else { Change::Data };
        self.commit(inode, d, entries, cow, change)
    }
}
