//! Directory operations at the inode level (NOVA's namei.c and dir.c):
//! lookup, create, link, unlink, rmdir, rename, readdir. The interface a
//! FUSE adapter calls, and on which the path API is built.
//!
//! Each of these changes several inodes: it stages entries in each log and
//! commits all tails, plus any inode state word it sets, in one journal
//! transaction (`Ferrite::commit_journaled`). Inodes are locked in inode-number order;
//! a lookup done before taking the locks is checked again under them, and
//! the operation retries if the directory changed in between.

use crate::commit::{Fresh, NewInode, Part, Parts};
use crate::format::{DentryEntry, Entry, EntryName, WriteEntry, PAGE_SIZE};
use crate::fs::Ferrite;
use crate::inode::{Attrs, Dentry, Inode, InodeData};
use crate::types::{limits, DirEntry, Errno, FileMode, FileType, FsResult, InodeNo, RenameFlags, Stat};
use parking_lot::RwLockWriteGuard;
use std::sync::Arc;

/// A valid name for a directory entry, or the errno POSIX gives.
pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name.len() > limits::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// What `create_node` makes.
#[derive(Clone, Copy, Debug)]
pub struct NodeSpec<'a> {
    pub kind: FileType,
    /// Permission bits (07777).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    /// The target, for a symlink (1..=4095 bytes).
    pub symlink_target: Option<&'a [u8]>,
    /// The device number, for a device node; ignored for other types (as
    /// Linux does for FIFOs and sockets).
    pub rdev: u64,
}

/// The permission check `rename_in` runs on the inode moved and the one
/// replaced or exchanged (the path API's; none at inode level).
pub(crate) type RenameCheck<'a> = dyn Fn(&Arc<Inode>, Option<&Arc<Inode>>) -> FsResult<()> + 'a;

impl Ferrite {
    /// The inode a directory entry names, which must be of the type the
    /// entry records (a mismatch is corruption, never trusted).
    pub(crate) fn child(&self, de: &Dentry) -> FsResult<Arc<Inode>> {
        let i = self.inode(de.ino)?;
        if i.kind != de.kind {
            return Err(self.corrupt(crate::format::corrupt!(
                "entry for inode {} says {:?}, the inode is {:?}",
                de.ino.0,
                de.kind,
                i.kind
            )));
        }
        Ok(i)
    }

    /// The inode `de` (found under `name` in `dir`) names, held; None when
    /// the name no longer maps to it (another thread removed or replaced
    /// it meanwhile): the caller looks the name up again. The inode is
    /// taken while the directory's read lock shows the same entry: a name
    /// keeps its inode alive, so its number cannot belong to another inode
    /// at that moment (once freed, a number is reused).
    pub(crate) fn child_of(&self, dir: &Inode, name: &[u8], de: &Dentry) -> FsResult<Option<Arc<Inode>>> {
        let d = dir.lock_read();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        match d.dir().names.get(name) {
            Some(now) if now.ino == de.ino && now.seq == de.seq => self.child(de).map(Some),
            _ => Ok(None),
        }
    }

    fn dir_inode(&self, ino: InodeNo) -> FsResult<Arc<Inode>> {
        let i = self.inode(ino)?;
        if i.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(i)
    }

    /// Look a name up in a directory and hold the inode it names, both
    /// under one read lock of the directory: the name keeps its inode
    /// alive, so its number cannot belong to another inode at that moment
    /// (path resolution's lookup: one probe of the index, no retry).
    pub(crate) fn lookup_child(&self, dir: &Inode, name: &[u8]) -> FsResult<Option<(Dentry, Arc<Inode>)>> {
        let d = dir.lock_read();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        let Some(slot) = d.dir().names.get(name) else {
            return Ok(None);
        };
        if let Some(i) = slot.inode.get() {
            return Ok(Some((slot.de, i.clone())));
        }
        let i = self.child(&slot.de)?;
        Ok(Some((slot.de, slot.inode.get_or_init(|| i).clone())))
    }

    /// Look a name up in a directory (read lock only).
    pub(crate) fn lookup_dentry(&self, dir: &Inode, name: &[u8]) -> FsResult<Option<Dentry>> {
        let d = dir.lock_read();
        // A removed directory that is still someone's working directory
        // (or open) is alive with no links: it holds no names and takes
        // none, and Linux's lookup in it answers ENOENT before any
        // permission check (a rename into it as a user without the right to
        // remove the source from a sticky directory got EPERM here).
        if !d.alive || d.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(d.dir().names.get(name).map(|s| s.de))
    }

    /// The inode a name in `parent` refers to.
    pub fn lookup(&self, parent: InodeNo, name: &[u8]) -> FsResult<Stat> {
        check_name(name)?;
        let dir = self.dir_inode(parent)?;
        if name == b"." {
            return self.getattr(parent);
        }
        if name == b".." {
            let p = dir.lock_read().attrs.parent;
            return self.getattr(p);
        }
        // The inode the name names now, never a later owner of its number
        // (an unlink and a create may race with this lookup). Freed between
        // the lookup and its attributes: the name has gone or names
        // another inode by now, so look again.
        for _ in 0..crate::path::RACE_RETRIES_MAX {
            let (_, i) = self.lookup_child(&dir, name)?.ok_or(Errno::ENOENT)?;
            match self.getattr_inode(&i) {
                Err(Errno::ENOENT) => continue,
                r => return r,
            }
        }
        Err(Errno::ENOENT)
    }

    /// Create a regular file, directory, symlink, FIFO, socket or device
    /// node named `name` in `parent`.
    pub fn create_node(&self, parent: InodeNo, name: &[u8], spec: &NodeSpec<'_>) -> FsResult<Stat> {
        self.create_node_in(&self.dir_inode(parent)?, name, spec).map(|(st, _)| st)
    }

    /// create_node in a directory already held (ENOENT once it is removed);
    /// also returns the new inode, held.
    pub(crate) fn create_node_in(
        &self,
        dir: &Arc<Inode>,
        name: &[u8],
        spec: &NodeSpec<'_>,
    ) -> FsResult<(Stat, Arc<Inode>)> {
        let parent = dir.ino;
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let NodeSpec { kind, perm, uid, gid, symlink_target, rdev } = *spec;
        let rdev = if kind.has_rdev() { rdev } else { 0 };
        if symlink_target.is_some() != (kind == FileType::Symlink) {
            return Err(Errno::EINVAL);
        }
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        let mut pd = dir.lock_write();
        if !pd.alive || pd.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if pd.dir().names.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.inodes_free.alloc()?;
        let now = self.now_ns();
        let mut extra = crate::log::Entries::new();
        let mut fresh = Fresh::none();
        if let Some(target) = symlink_target {
            debug_assert_eq!(kind, FileType::Symlink);
            // On a full pool the target's page may come from dead log
            // pages, the directory's own or another file's.
            let page = match self.alloc_pages_for(dir, &mut pd, 1) {
                Ok(runs) => runs[0].0,
                Err(e) => {
                    self.inodes_free.free(ino);
                    return Err(e);
                }
            };
            let mut buf = vec![0u8; PAGE_SIZE as usize];
            buf[..target.len()].copy_from_slice(target);
            self.media.write_nt(page.offset(), &buf);
            extra.push(Entry::Write(WriteEntry {
                file_page: 0,
                pool_page: page,
                num_pages: 1,
                size_after: target.len() as u64,
                mtime_ns: now,
                ctime_ns: now,
            }));
            fresh.push(page);
        }
        let attrs = Attrs {
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: 1,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            size: 0,
            parent: if kind == FileType::Directory { parent } else { InodeNo(0) },
            mode: if kind == FileType::Regular { self.default_mode() } else { FileMode::Strict },
        };
        let parts: Parts<'_> = smallvec::smallvec![Part {
            inode: dir,
            entries: smallvec::smallvec![Entry::DentryAdd(DentryEntry {
                ino,
                kind,
                time_ns: now,
                name: EntryName::from_slice(name)
            })],
            free: false,
        }];
        let new = NewInode { ino, kind, rdev, attrs, entries: extra };
        let child = self.commit_journaled(parts, &mut [&mut pd], Some(new), fresh)?.expect("a new inode");
        let st = child.stat(&child.lock_read());
        Ok((st, child))
    }

    /// Make a regular file without a name in `dir` and open it (open(2)'s
    /// O_TMPFILE): the new inode's link count is 0 from its birth, so it is
    /// an orphan as a file unlinked while open is. Its last close frees it,
    /// and a crash before it is linked frees it at recovery, which frees
    /// every live inode with no link (docs/DESIGN.md, "Files without a
    /// name: O_TMPFILE"). With `linkable` (O_TMPFILE without O_EXCL),
    /// `link_in` may give it a name once. One journal transaction sets the
    /// inode's state word; the directory is not changed (no entry, no new
    /// times), as in Linux. Returns the inode with its open count taken.
    pub(crate) fn create_tmpfile_in(
        &self,
        dir: &Arc<Inode>,
        spec: &NodeSpec<'_>,
        linkable: bool,
    ) -> FsResult<Arc<Inode>> {
        let NodeSpec { kind, perm, uid, gid, symlink_target, rdev } = *spec;
        assert!(kind == FileType::Regular && symlink_target.is_none() && rdev == 0, "O_TMPFILE makes regular files");
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        {
            // A removed directory takes no new file, named or not. The
            // check needs no lock held through the commit: nothing of the
            // directory changes, and a removal racing with it is ordered
            // after it.
            let pd = dir.lock_read();
            if !pd.alive || pd.attrs.nlink == 0 {
                return Err(Errno::ENOENT);
            }
        }
        let ino = self.inodes_free.alloc()?;
        let now = self.now_ns();
        let attrs = Attrs {
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: 0,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            size: 0,
            parent: InodeNo(0),
            mode: self.default_mode(),
        };
        let new = NewInode { ino, kind, rdev: 0, attrs, entries: crate::log::Entries::new() };
        let child = self.commit_journaled(Parts::new(), &mut [], Some(new), Fresh::none())?.expect("a new inode");
        {
            // Nothing names the inode, so nobody else can reach it before
            // it is counted open here.
            let mut d = child.lock_write();
            assert!(d.alive && d.open_count == 0, "a new O_TMPFILE inode {} was reached", ino.0);
            d.open_count = 1;
            d.linkable = linkable;
        }
        Ok(child)
    }

    /// Remove a name; `want_dir` selects rmdir semantics.
    pub fn remove(&self, parent: InodeNo, name: &[u8], want_dir: bool) -> FsResult<()> {
        self.remove_in(&self.dir_inode(parent)?, name, want_dir, None)
    }

    /// remove from a directory already held (ENOENT once it is removed).
    /// `known` is the inode path resolution found under `name`, held: the
    /// first attempt locks it at once instead of looking the name up twice
    /// more, and the check under the locks (the name still maps to it, and
    /// it is alive) is what makes the removal correct either way. When that
    /// check fails, the name is looked up again as without `known`.
    pub(crate) fn remove_in(
        &self,
        dir: &Arc<Inode>,
        name: &[u8],
        want_dir: bool,
        known: Option<&Arc<Inode>>,
    ) -> FsResult<()> {
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        check_name(name)?;
        if want_dir && name == b"." {
            return Err(Errno::EINVAL);
        }
        if want_dir && name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        if is_dot(name) {
            return Err(Errno::EISDIR);
        }
        // A removal may take the last pages of a full pool for the
        // parent's log (docs/DESIGN.md, "Space for removals").
        let _removal = crate::alloc::removal_scope();
        let mut known = known;
        loop {
            let child: std::borrow::Cow<'_, Arc<Inode>> = match known.take() {
                Some(c) => std::borrow::Cow::Borrowed(c),
                None => {
                    let de = self.lookup_dentry(dir, name)?.ok_or(Errno::ENOENT)?;
                    match self.child_of(dir, name, &de)? {
                        Some(c) => std::borrow::Cow::Owned(c),
                        None => continue, // removed meanwhile: look again
                    }
                }
            };
            match (want_dir, child.kind == FileType::Directory) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                _ => {}
            }
            let mut guards = self.lock_all(&[dir, &child]);
            let mut g1 = guards[0].take().expect("parent locked");
            let mut g2 = guards[1].take().expect("child locked");
            if !g1.alive {
                return Err(Errno::ENOENT);
            }
            if g1.dir().names.get(name).map(|d| d.ino) != Some(child.ino) || !g2.alive {
                continue; // changed between lookup and lock
            }
            if want_dir && !g2.dir().names.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            let now = self.now_ns();
            let parent_entries = smallvec::smallvec![Entry::DentryRemove(DentryEntry {
                ino: child.ino,
                kind: child.kind,
                time_ns: now,
                name: EntryName::from_slice(name),
            })];
            let child_part = self.drop_link_part(&child, &g2, now)?;
            let parts: Parts<'_> =
                smallvec::smallvec![Part { inode: dir, entries: parent_entries, free: false }, child_part];
            return self.commit_journaled(parts, &mut [&mut g1, &mut g2], None, Fresh::none()).map(drop);
        }
    }

    /// The part of an operation that removes one link to `inode`: an Attr
    /// entry with the lower count, or freeing the inode when that was its
    /// last link and nobody has it open.
    fn drop_link_part<'a>(&self, inode: &'a Arc<Inode>, d: &InodeData, now: i64) -> FsResult<Part<'a>> {
        let nlink = if inode.kind == FileType::Directory {
            0
        } else {
            // A name exists, so the count is at least one on a sound pool.
            d.attrs.nlink.checked_sub(1).ok_or_else(|| {
                self.corrupt(crate::format::corrupt!("inode {} has a name but no link count", inode.ino.0))
            })?
        };
        if nlink == 0 && d.open_count == 0 {
            return Ok(Part { inode, entries: crate::log::Entries::new(), free: true });
        }
        let mut a = d.attrs;
        a.nlink = nlink;
        a.ctime_ns = now;
        Ok(Part { inode, entries: smallvec::smallvec![Entry::Attr(a.to_entry())], free: false })
    }

    /// Make a new name for an existing inode (not a directory).
    pub fn link_at(&self, ino: InodeNo, parent: InodeNo, name: &[u8]) -> FsResult<Stat> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        let target = self.inode(ino)?;
        if target.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        self.link_in(&target, &self.dir_inode(parent)?, name)
    }

    /// link of an inode already held into a directory already held (ENOENT
    /// once either has been removed).
    pub(crate) fn link_in(&self, target: &Arc<Inode>, dir: &Arc<Inode>, name: &[u8]) -> FsResult<Stat> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        if target.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let ino = target.ino;
        let mut guards = self.lock_all(&[dir, target]);
        let mut g1 = guards[0].take().expect("parent locked");
        let mut g2 = guards[1].take().expect("target locked");
        // A file with no name left may not get one again, except a file
        // made by O_TMPFILE without O_EXCL, once (Linux's I_LINKABLE).
        if !g1.alive || g1.attrs.nlink == 0 || !g2.alive || (g2.attrs.nlink == 0 && !g2.linkable) {
            return Err(Errno::ENOENT);
        }
        if g1.dir().names.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        if g2.attrs.nlink >= limits::LINK_MAX {
            return Err(Errno::EMLINK);
        }
        let now = self.now_ns();
        let mut a = g2.attrs;
        a.nlink += 1;
        a.ctime_ns = now;
        let parts: Parts<'_> = smallvec::smallvec![
            Part {
                inode: dir,
                entries: smallvec::smallvec![Entry::DentryAdd(DentryEntry {
                    ino,
                    kind: target.kind,
                    time_ns: now,
                    name: EntryName::from_slice(name),
                })],
                free: false,
            },
            Part { inode: target, entries: smallvec::smallvec![Entry::Attr(a.to_entry())], free: false },
        ];
        self.commit_journaled(parts, &mut [&mut g1, &mut g2], None, Fresh::none()).map(drop)?;
        g2.linkable = false;
        Ok(target.stat(&g2))
    }

    /// Is `ancestor` on the path from `dir` up to the root (or `dir` itself)?
    /// Called under the rename lock, so no directory changes parent meanwhile.
    fn is_ancestor(&self, ancestor: InodeNo, dir: InodeNo) -> FsResult<bool> {
        let mut cur = dir;
        for _ in 0..self.media.layout.inode_count {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == InodeNo::ROOT {
                return Ok(false);
            }
            let i = self.inode(cur)?;
            cur = i.lock_read().attrs.parent;
        }
        Err(self.corrupt(crate::format::corrupt!("directory parents form a cycle")))
    }

    /// rename / renameat2.
    pub fn rename_at(&self, sp: InodeNo, sname: &[u8], dp: InodeNo, dname: &[u8], flags: RenameFlags) -> FsResult<()> {
        check_name(sname)?;
        check_name(dname)?;
        if is_dot(sname) || is_dot(dname) {
            return Err(Errno::EBUSY);
        }
        self.rename_checked(sp, sname, false, dp, dname, false, flags)
    }

    /// rename with the checks in Linux's order; `sslash`/`dslash` say the
    /// path named that side with a trailing slash.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename_checked(
        &self,
        sp: InodeNo,
        sname: &[u8],
        sslash: bool,
        dp: InodeNo,
        dname: &[u8],
        dslash: bool,
        flags: RenameFlags,
    ) -> FsResult<()> {
        let no_check = |_: &Arc<Inode>, _: Option<&Arc<Inode>>| Ok(());
        self.rename_in(&self.dir_inode(sp)?, sname, sslash, &self.dir_inode(dp)?, dname, dslash, flags, &no_check)
    }

    /// rename_checked between directories already held (ENOENT once either
    /// has been removed). `check` gets the inode moved and the one replaced
    /// or exchanged, where Linux's vfs_rename checks permissions: after the
    /// same-inode case, before the type checks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename_in(
        &self,
        sdir: &Arc<Inode>,
        sname: &[u8],
        sslash: bool,
        ddir: &Arc<Inode>,
        dname: &[u8],
        dslash: bool,
        flags: RenameFlags,
        check: &RenameCheck<'_>,
    ) -> FsResult<()> {
        if sdir.kind != FileType::Directory || ddir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let (sp, dp) = (sdir.ino, ddir.ino);
        let _cross = if sp != dp { Some(self.rename_lock.lock()) } else { None };
        loop {
            let src = self.lookup_dentry(sdir, sname)?.ok_or(Errno::ENOENT)?;
            let dst = self.lookup_dentry(ddir, dname)?;
            // A rename over another name removes that name, so it may take
            // the removal reserve for its log room: `mv a b` must work on a
            // full file system, as `rm b` does. A rename to a new name or an
            // exchange removes nothing, but kernel file systems make it on a
            // full disk (logrotate's `mv log log.1` is made when the disk is
            // full more often than not), and it needs a log page in each
            // directory and inode at most: it may take half of the reserve,
            // as attribute changes do, and the other half stays for
            // removals.
            let _reserve = if dst.is_some() && flags != RenameFlags::Exchange {
                crate::alloc::removal_scope()
            } else {
                crate::alloc::attribute_scope()
            };
            if self.rename_is_noop(&src, dst.as_ref(), (sp, sslash), (dp, dslash), flags)? {
                return Ok(());
            }
            let Some(moved) = self.child_of(sdir, sname, &src)? else {
                continue; // removed meanwhile: look again
            };
            let target = match &dst {
                Some(t) => match self.child_of(ddir, dname, t)? {
                    Some(i) => Some(i),
                    None => continue,
                },
                None => None,
            };
            // Permissions (the path API's check), then the types: Linux's
            // vfs_rename order.
            check(&moved, target.as_ref())?;
            rename_types_match(&src, dst.as_ref(), flags)?;
            let mut list: Vec<&Arc<Inode>> = vec![&sdir, &ddir, &moved];
            if let Some(t) = &target {
                list.push(t);
            }
            let mut guards = self.lock_all(&list);
            // sdir may equal ddir: then only guards[0] holds the lock.
            let same_dir = sp == dp;
            let names = (sname, src.ino, dname, dst.map(|d| d.ino));
            if !self.rename_still_holds(&guards, same_dir, names, target.as_ref(), flags)? {
                continue; // changed between lookup and lock
            }
            let now = self.now_ns();
            let mut sd_entries = crate::log::Entries::new();
            let mut dd_entries = crate::log::Entries::new();
            let dentry = |ino: InodeNo, kind: FileType, name: &[u8]| DentryEntry {
                ino,
                kind,
                time_ns: now,
                name: EntryName::from_slice(name),
            };
            let t = dst;
            sd_entries.push(Entry::DentryRemove(dentry(src.ino, src.kind, sname)));
            {
                let dd = if same_dir { &mut sd_entries } else { &mut dd_entries };
                if let Some(t) = &t {
                    dd.push(Entry::DentryRemove(dentry(t.ino, t.kind, dname)));
                }
                dd.push(Entry::DentryAdd(dentry(src.ino, src.kind, dname)));
            }
            if flags == RenameFlags::Exchange {
                let t = t.as_ref().expect("exchange target");
                sd_entries.push(Entry::DentryAdd(dentry(t.ino, t.kind, sname)));
            }
            let mut m_attrs = guards[2].as_deref().expect("moved locked").attrs;
            m_attrs.ctime_ns = now;
            if moved.kind == FileType::Directory {
                m_attrs.parent = dp;
            }
            let mut parts: Parts<'_> = smallvec::smallvec![Part { inode: sdir, entries: sd_entries, free: false }];
            let mut idx = vec![0usize];
            if !same_dir {
                parts.push(Part { inode: ddir, entries: dd_entries, free: false });
                idx.push(1);
            }
            parts.push(Part {
                inode: &moved,
                entries: smallvec::smallvec![Entry::Attr(m_attrs.to_entry())],
                free: false,
            });
            idx.push(2);
            if let (Some(ti), Some(_)) = (&target, &t) {
                let td = guards[3].as_deref().expect("target locked");
                if flags == RenameFlags::Exchange {
                    let mut a = td.attrs;
                    a.ctime_ns = now;
                    if ti.kind == FileType::Directory {
                        a.parent = sp;
                    }
                    parts.push(Part {
                        inode: ti,
                        entries: smallvec::smallvec![Entry::Attr(a.to_entry())],
                        free: false,
                    });
                } else {
                    parts.push(self.drop_link_part(ti, td, now)?);
                }
                idx.push(3);
            }
            let mut refs: Vec<&mut InodeData> = Vec::with_capacity(idx.len());
            // Hand out each guard once, in the order of `parts`.
            let mut taken: smallvec::SmallVec<[Option<RwLockWriteGuard<'_, InodeData>>; 4]> =
                std::mem::take(&mut guards);
            let mut holders: Vec<RwLockWriteGuard<'_, InodeData>> = Vec::new();
            for &i in &idx {
                holders.push(taken[i].take().expect("each part's inode is locked once"));
            }
            for h in holders.iter_mut() {
                refs.push(&mut **h);
            }
            return self.commit_journaled(parts, &mut refs, None, Fresh::none()).map(drop);
        }
    }

    /// The checks of rename that come before any lock and before the
    /// permission check, in Linux's order. True when source and target are
    /// one inode (rename does nothing).
    fn rename_is_noop(
        &self,
        src: &Dentry,
        dst: Option<&Dentry>,
        (sp, sslash): (InodeNo, bool),
        (dp, dslash): (InodeNo, bool),
        flags: RenameFlags,
    ) -> FsResult<bool> {
        let exchange = flags == RenameFlags::Exchange;
        if flags == RenameFlags::NoReplace && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        if exchange {
            let t = dst.ok_or(Errno::ENOENT)?;
            if t.kind != FileType::Directory && dslash {
                return Err(Errno::ENOTDIR);
            }
        }
        let src_dir = src.kind == FileType::Directory;
        if !src_dir && (sslash || (!exchange && dslash)) {
            return Err(Errno::ENOTDIR);
        }
        // The source may not be the target's directory or above it ...
        if src_dir && self.is_ancestor(src.ino, dp)? {
            return Err(Errno::EINVAL);
        }
        // ... nor the target the source's directory or above it.
        if let Some(t) = dst {
            if t.kind == FileType::Directory && self.is_ancestor(t.ino, sp)? {
                return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
            }
        }
        Ok(dst.is_some_and(|t| t.ino == src.ino))
    }

    /// Under the locks of rename (`guards`: source directory, target
    /// directory unless the same, moved inode, replaced inode): do both
    /// names still name what the lookup found, and is everything alive?
    /// False: look again. Errors that only the locked state can tell.
    fn rename_still_holds(
        &self,
        guards: &[Option<RwLockWriteGuard<'_, InodeData>>],
        same_dir: bool,
        (sname, src_ino, dname, dst_ino): (&[u8], InodeNo, &[u8], Option<InodeNo>),
        target: Option<&Arc<Inode>>,
        flags: RenameFlags,
    ) -> FsResult<bool> {
        let sd: &InodeData = guards[0].as_deref().expect("source dir locked");
        if !sd.alive {
            return Err(Errno::ENOENT);
        }
        let dd: &InodeData = if same_dir { sd } else { guards[1].as_deref().expect("target dir locked") };
        if !dd.alive || dd.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let still_src = sd.dir().names.get(sname).map(|d| d.ino) == Some(src_ino);
        let still_dst = dd.dir().names.get(dname).map(|d| d.ino) == dst_ino;
        let alive = guards[2].as_deref().is_some_and(|m| m.alive)
            && guards.get(3).is_none_or(|g| g.as_deref().is_some_and(|t| t.alive));
        if !still_src || !still_dst || !alive {
            return Ok(false);
        }
        if flags == RenameFlags::Replace {
            if let Some(t) = guards.get(3).and_then(|g| g.as_deref()) {
                if target.is_some_and(|t| t.kind == FileType::Directory) && !t.dir().names.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
            }
        }
        Ok(true)
    }

    /// Entries after `cookie` (0 = from the start), at most `max`.
    pub fn readdir_ino(&self, ino: InodeNo, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let dir = self.dir_inode(ino)?;
        self.readdir_inode(&dir, cookie, max)
    }

    /// Readdir on an inode already held (an open directory, even removed).
    pub(crate) fn readdir_inode(&self, dir: &Inode, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let d = dir.lock_read();
        // A removed directory lists nothing: ENOENT, as Linux's IS_DEADDIR.
        if !d.alive || d.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let idx = d.dir();
        Ok(idx
            .by_seq
            .after(cookie)
            .take(max)
            .map(|(seq, name)| {
                let de = idx.names[name].de;
                DirEntry { name: name.to_vec(), ino: de.ino, kind: de.kind, next_cookie: seq }
            })
            .collect())
    }
}

/// A rename that replaces (not exchanges) needs a directory for a
/// directory and a non-directory for a non-directory.
fn rename_types_match(src: &Dentry, dst: Option<&Dentry>, flags: RenameFlags) -> FsResult<()> {
    if let (Some(t), false) = (dst, flags == RenameFlags::Exchange) {
        match (src.kind == FileType::Directory, t.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! `remove_in` given the inode path resolution found (`known`): when the
    //! name no longer maps to that inode by the time the locks are taken
    //! (renamed over, removed, or its number freed and reused by a new
    //! inode under the same name), the removal acts on what the name names
    //! now, or fails with ENOENT, exactly as without `known`. These are the
    //! races `tests/name_races.rs` can only hit by chance, made to happen
    //! in order.
    use super::*;
    use crate::fs::FormatOptions;
    use ferrite_pmem::Pmem;

    fn file() -> NodeSpec<'static> {
        NodeSpec { kind: FileType::Regular, perm: 0o644, uid: 0, gid: 0, symlink_target: None, rdev: 0 }
    }

    fn setup() -> (Ferrite, Arc<Inode>) {
        let fs = Ferrite::format(Pmem::heap(1024 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
        let spec = NodeSpec { kind: FileType::Directory, perm: 0o755, ..file() };
        let d = fs.create_node(InodeNo::ROOT, b"d", &spec).unwrap();
        let dir = fs.dir_inode(d.ino).unwrap();
        (fs, dir)
    }

    fn resolved(fs: &Ferrite, dir: &Arc<Inode>, name: &[u8]) -> Arc<Inode> {
        fs.lookup_child(dir, name).unwrap().expect("the name exists").1
    }

    #[test]
    fn a_name_renamed_over_removes_what_it_names_now() {
        let (fs, dir) = setup();
        fs.create_node(dir.ino, b"a", &file()).unwrap();
        let b = fs.create_node(dir.ino, b"b", &file()).unwrap();
        let old = resolved(&fs, &dir, b"a");
        fs.rename_at(dir.ino, b"b", dir.ino, b"a", RenameFlags::default()).unwrap();
        assert_eq!(fs.lookup(dir.ino, b"a").unwrap().ino, b.ino);
        fs.remove_in(&dir, b"a", false, Some(&old)).unwrap();
        assert_eq!(fs.lookup(dir.ino, b"a"), Err(Errno::ENOENT));
        assert_eq!(fs.inode(b.ino).err(), Some(Errno::ENOENT), "the file renamed over the name is freed");
    }

    #[test]
    fn a_name_removed_meanwhile_is_enoent() {
        let (fs, dir) = setup();
        fs.create_node(dir.ino, b"a", &file()).unwrap();
        let old = resolved(&fs, &dir, b"a");
        fs.remove(dir.ino, b"a", false).unwrap();
        assert_eq!(fs.remove_in(&dir, b"a", false, Some(&old)), Err(Errno::ENOENT));
    }

    #[test]
    fn a_number_reused_under_the_same_name_removes_the_new_inode() {
        let (fs, dir) = setup();
        let first = fs.create_node(dir.ino, b"a", &file()).unwrap();
        let old = resolved(&fs, &dir, b"a");
        fs.remove(dir.ino, b"a", false).unwrap();
        let free_before = fs.free_pages();
        let second = fs.create_node(dir.ino, b"a", &file()).unwrap();
        assert_eq!(second.ino, first.ino, "the freed number is reused at once (the case under test)");
        fs.write_ino(second.ino, 0, &[7u8; 3 * PAGE_SIZE as usize]).unwrap();
        assert!(!old.lock_read().alive, "the inode resolved first is gone");
        fs.remove_in(&dir, b"a", false, Some(&old)).unwrap();
        assert_eq!(fs.lookup(dir.ino, b"a"), Err(Errno::ENOENT));
        assert_eq!(fs.inode(second.ino).err(), Some(Errno::ENOENT), "the new inode is the one freed");
        assert_eq!(fs.free_pages(), free_before, "with its pages");
    }

    #[test]
    fn a_directory_replaced_by_a_file_is_enotdir_for_rmdir() {
        let (fs, dir) = setup();
        let spec = NodeSpec { kind: FileType::Directory, perm: 0o755, ..file() };
        fs.create_node(dir.ino, b"sub", &spec).unwrap();
        let old = resolved(&fs, &dir, b"sub");
        fs.remove(dir.ino, b"sub", true).unwrap();
        fs.create_node(dir.ino, b"sub", &file()).unwrap();
        assert_eq!(fs.remove_in(&dir, b"sub", true, Some(&old)), Err(Errno::ENOTDIR));
        assert!(fs.lookup(dir.ino, b"sub").is_ok(), "the file is still there");
    }
}
