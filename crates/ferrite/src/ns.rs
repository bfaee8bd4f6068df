//! Namespace and attribute operations at the inode level: the interface a
//! FUSE adapter calls, and on which the path API is built.
//!
//! Operations on one inode append to its log and commit with its tail.
//! Operations on several inodes (create, link, unlink, rmdir, rename) stage
//! entries in each log and commit all tails, plus any inode state word they
//! set, in one journal transaction. Inodes are locked in inode-number order;
//! a lookup done before taking the locks is checked again under them, and
//! the operation retries if the directory changed in between.

use crate::format::{DentryEntry, Entry, PageNo, WriteEntry, INODE_STATE_OFFSET, INODE_TAIL_OFFSET, PAGE_SIZE};
use crate::fs::Ferrite;
use crate::inode::{Attrs, Dentry, Inode, InodeData, Staged};
use crate::journal::Transaction;
use crate::types::{
    limits, DirEntry, Errno, FallocateMode, FileType, FsResult, InodeNo, RenameFlags, SetAttr, Stat, StatFs, TimeSet,
    XattrSetMode,
};
use crate::xattr_name::{self, XattrName};
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

/// One inode's part of a multi-inode operation.
struct Part<'a> {
    inode: &'a Arc<Inode>,
    entries: Vec<Entry>,
    /// Free the inode in the same transaction (state word to zero).
    free: bool,
}

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
        let d = dir.data.read();
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

    /// Look a name up in a directory (read lock only).
    pub(crate) fn lookup_dentry(&self, dir: &Inode, name: &[u8]) -> FsResult<Option<Dentry>> {
        let d = dir.data.read();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        Ok(d.dir().names.get(name).copied())
    }

    /// The inode a name in `parent` refers to.
    pub fn lookup(&self, parent: InodeNo, name: &[u8]) -> FsResult<Stat> {
        check_name(name)?;
        let dir = self.dir_inode(parent)?;
        if name == b"." {
            return self.getattr(parent);
        }
        if name == b".." {
            let p = dir.data.read().attrs.parent;
            return self.getattr(p);
        }
        loop {
            let de = self.lookup_dentry(&dir, name)?.ok_or(Errno::ENOENT)?;
            // The inode the name names now, never a later owner of its
            // number (an unlink and a create may race with this lookup).
            if let Some(i) = self.child_of(&dir, name, &de)? {
                match self.getattr_inode(&i) {
                    Err(Errno::ENOENT) => continue, // freed since: look again
                    r => return r,
                }
            }
        }
    }

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

    /// Stage every part's entries, then commit all of them in one journal
    /// transaction, then bring DRAM forward. All or nothing: on ENOSPC the
    /// staged entries are abandoned and nothing changed.
    fn commit_parts(
        &self,
        parts: Vec<Part<'_>>,
        guards: &mut [&mut InodeData],
        extra: Option<(Arc<Inode>, Staged)>,
    ) -> FsResult<()> {
        let mut staged: Vec<Option<Staged>> = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            if part.entries.is_empty() {
                staged.push(None);
                continue;
            }
            match guards[i].stage(&self.media, &self.pages, part.inode.ino, part.inode.generation, part.entries.clone())
            {
                Ok(s) => staged.push(Some(s)),
                Err(e) => {
                    for s in staged.into_iter().flatten() {
                        self.unstage(s);
                    }
                    if let Some((_, s)) = extra {
                        self.unstage(s);
                    }
                    return Err(e);
                }
            }
        }
        let mut tx = Transaction::default();
        for (i, part) in parts.iter().enumerate() {
            let slot = self.media.slot_offset(part.inode.ino);
            if part.free {
                tx.set(slot + INODE_STATE_OFFSET, 0);
            } else if let Some(s) = &staged[i] {
                tx.set(slot + INODE_TAIL_OFFSET, s.new_tail);
            }
        }
        if let Some((new, _)) = &extra {
            tx.set(
                self.media.slot_offset(new.ino) + INODE_STATE_OFFSET,
                crate::format::inode_live_word(new.generation),
            );
        }
        self.journals.run(&self.media, &tx);
        for (i, part) in parts.iter().enumerate() {
            if part.free {
                if let Some(s) = staged[i].take() {
                    self.unstage(s);
                }
                self.release_inode(part.inode, guards[i]);
            } else if let Some(s) = staged[i].take() {
                self.finish_commit(part.inode, guards[i], s);
            }
        }
        if let Some((new, s)) = extra {
            let mut freed = Vec::new();
            new.data.write().commit_staged(new.kind, s, &mut freed);
            debug_assert!(freed.is_empty());
            self.cache_insert(new);
        }
        Ok(())
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
        let mut pd = dir.data.write();
        if !pd.alive || pd.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if pd.dir().names.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.inodes_free.alloc()?;
        let now = self.now_ns();
        let mut extra = Vec::new();
        let mut data_page = None;
        let mut size = 0;
        if let Some(target) = symlink_target {
            debug_assert_eq!(kind, FileType::Symlink);
            let page = match self.pages.alloc_one() {
                Ok(p) => p,
                Err(e) => {
                    self.inodes_free.free(ino);
                    return Err(e);
                }
            };
            let mut buf = vec![0u8; PAGE_SIZE as usize];
            buf[..target.len()].copy_from_slice(target);
            self.media.write_nt(page.offset(), &buf);
            size = target.len() as u64;
            extra.push(Entry::Write(WriteEntry {
                file_page: 0,
                pool_page: page,
                num_pages: 1,
                size_after: size,
                mtime_ns: now,
                ctime_ns: now,
            }));
            data_page = Some(page);
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
        };
        let _ = size;
        let (child, staged_child) = match self.stage_new_inode(ino, kind, rdev, attrs, extra) {
            Ok(v) => v,
            Err(e) => {
                self.inodes_free.free(ino);
                if let Some(p) = data_page {
                    // Complete the target's streaming stores before the page
                    // can be handed out again.
                    self.media.fence();
                    self.pages.free(p, 1);
                }
                return Err(e);
            }
        };
        let parts = vec![Part {
            inode: dir,
            entries: vec![Entry::DentryAdd(DentryEntry { ino, kind, time_ns: now, name: name.to_vec() })],
            free: false,
        }];
        let child2 = child.clone();
        if let Err(e) = self.commit_parts(parts, &mut [&mut pd], Some((child, staged_child))) {
            self.inodes_free.free(ino);
            if let Some(p) = data_page {
                self.media.fence();
                self.pages.free(p, 1);
            }
            return Err(e);
        }
        let st = child2.stat(&child2.data.read());
        Ok((st, child2))
    }

    /// Remove a name; `want_dir` selects rmdir semantics.
    pub fn remove(&self, parent: InodeNo, name: &[u8], want_dir: bool) -> FsResult<()> {
        self.remove_in(&self.dir_inode(parent)?, name, want_dir)
    }

    /// remove from a directory already held (ENOENT once it is removed).
    pub(crate) fn remove_in(&self, dir: &Arc<Inode>, name: &[u8], want_dir: bool) -> FsResult<()> {
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
        loop {
            let de = self.lookup_dentry(dir, name)?.ok_or(Errno::ENOENT)?;
            match (want_dir, de.kind == FileType::Directory) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                _ => {}
            }
            let Some(child) = self.child_of(dir, name, &de)? else {
                continue; // removed meanwhile: look again
            };
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
            let parent_entries = vec![Entry::DentryRemove(DentryEntry {
                ino: child.ino,
                kind: child.kind,
                time_ns: now,
                name: name.to_vec(),
            })];
            let child_part = self.drop_link_part(&child, &g2, now)?;
            let parts = vec![Part { inode: dir, entries: parent_entries, free: false }, child_part];
            return self.commit_parts(parts, &mut [&mut g1, &mut g2], None);
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
            return Ok(Part { inode, entries: Vec::new(), free: true });
        }
        let mut a = d.attrs;
        a.nlink = nlink;
        a.ctime_ns = now;
        Ok(Part { inode, entries: vec![Entry::Attr(a.to_entry())], free: false })
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
        if !g1.alive || g1.attrs.nlink == 0 || !g2.alive || g2.attrs.nlink == 0 {
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
        let parts = vec![
            Part {
                inode: dir,
                entries: vec![Entry::DentryAdd(DentryEntry {
                    ino,
                    kind: target.kind,
                    time_ns: now,
                    name: name.to_vec(),
                })],
                free: false,
            },
            Part { inode: target, entries: vec![Entry::Attr(a.to_entry())], free: false },
        ];
        self.commit_parts(parts, &mut [&mut g1, &mut g2], None)?;
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
            cur = i.data.read().attrs.parent;
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
            let exchange = flags == RenameFlags::Exchange;
            if flags == RenameFlags::NoReplace && dst.is_some() {
                return Err(Errno::EEXIST);
            }
            if exchange {
                let t = dst.as_ref().ok_or(Errno::ENOENT)?;
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
            if let Some(t) = &dst {
                if t.kind == FileType::Directory && self.is_ancestor(t.ino, sp)? {
                    return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
                }
            }
            if dst.as_ref().is_some_and(|t| t.ino == src.ino) {
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
            check(&moved, target.as_ref())?;
            if let Some(t) = &dst {
                if !exchange {
                    match (src_dir, t.kind == FileType::Directory) {
                        (true, false) => return Err(Errno::ENOTDIR),
                        (false, true) => return Err(Errno::EISDIR),
                        _ => {}
                    }
                }
            }
            let mut list: Vec<&Arc<Inode>> = vec![&sdir, &ddir, &moved];
            if let Some(t) = &target {
                list.push(t);
            }
            let mut guards = self.lock_all(&list);
            // sdir may equal ddir: then only guards[0] holds the lock.
            let same_dir = sp == dp;
            {
                let sd: &InodeData = guards[0].as_deref().expect("source dir locked");
                if !sd.alive {
                    return Err(Errno::ENOENT);
                }
                let dd: &InodeData = if same_dir { sd } else { guards[1].as_deref().expect("target dir locked") };
                if !dd.alive || dd.attrs.nlink == 0 {
                    return Err(Errno::ENOENT);
                }
                let still_src = sd.dir().names.get(sname).map(|d| d.ino) == Some(src.ino);
                let still_dst = dd.dir().names.get(dname).map(|d| d.ino) == dst.map(|d| d.ino);
                let alive = guards[2].as_deref().is_some_and(|m| m.alive)
                    && guards.get(3).is_none_or(|g| g.as_deref().is_some_and(|t| t.alive));
                if !still_src || !still_dst || !alive {
                    continue;
                }
                if flags == RenameFlags::Replace {
                    if let Some(t) = guards.get(3).and_then(|g| g.as_deref()) {
                        if target.as_ref().is_some_and(|t| t.kind == FileType::Directory) && !t.dir().names.is_empty() {
                            return Err(Errno::ENOTEMPTY);
                        }
                    }
                }
            }
            let now = self.now_ns();
            let mut sd_entries = Vec::new();
            let mut dd_entries = Vec::new();
            let dentry = |ino: InodeNo, kind: FileType, name: &[u8]| DentryEntry {
                ino,
                kind,
                time_ns: now,
                name: name.to_vec(),
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
            let mut parts = vec![Part { inode: sdir, entries: sd_entries, free: false }];
            let mut idx = vec![0usize];
            if !same_dir {
                parts.push(Part { inode: ddir, entries: dd_entries, free: false });
                idx.push(1);
            }
            parts.push(Part { inode: &moved, entries: vec![Entry::Attr(m_attrs.to_entry())], free: false });
            idx.push(2);
            if let (Some(ti), Some(_)) = (&target, &t) {
                let td = guards[3].as_deref().expect("target locked");
                if flags == RenameFlags::Exchange {
                    let mut a = td.attrs;
                    a.ctime_ns = now;
                    if ti.kind == FileType::Directory {
                        a.parent = sp;
                    }
                    parts.push(Part { inode: ti, entries: vec![Entry::Attr(a.to_entry())], free: false });
                } else {
                    parts.push(self.drop_link_part(ti, td, now)?);
                }
                idx.push(3);
            }
            let mut refs: Vec<&mut InodeData> = Vec::with_capacity(idx.len());
            // Hand out each guard once, in the order of `parts`.
            let mut taken: Vec<Option<RwLockWriteGuard<'_, InodeData>>> = std::mem::take(&mut guards);
            let mut holders: Vec<RwLockWriteGuard<'_, InodeData>> = Vec::new();
            for &i in &idx {
                holders.push(taken[i].take().expect("each part's inode is locked once"));
            }
            for h in holders.iter_mut() {
                refs.push(&mut **h);
            }
            return self.commit_parts(parts, &mut refs, None);
        }
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
        let mut cow: Option<PageNo> = None;
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
        let staged = match d.stage(&self.media, &self.pages, inode.ino, inode.generation, entries) {
            Ok(s) => s,
            Err(e) => {
                if let Some(p) = cow {
                    self.pages.free(p, 1);
                }
                return Err(e);
            }
        };
        self.commit_single(inode, d, staged);
        Ok(())
    }

    pub fn readlink_ino(&self, ino: InodeNo) -> FsResult<Vec<u8>> {
        self.readlink_inode(&self.inode(ino)?)
    }

    /// readlink of an inode already held.
    pub(crate) fn readlink_inode(&self, inode: &Arc<Inode>) -> FsResult<Vec<u8>> {
        let ino = inode.ino;
        if inode.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let d = inode.data.read();
        if d.attrs.size == 0 || d.attrs.size > limits::SYMLINK_MAX as u64 {
            return Err(self.corrupt(crate::format::corrupt!(
                "symlink {} has a target of {} bytes",
                ino.0,
                d.attrs.size
            )));
        }
        let mut buf = vec![0u8; d.attrs.size as usize];
        let n = self.read_locked(&d, 0, &mut buf);
        buf.truncate(n);
        Ok(buf)
    }

    /// Entries after `cookie` (0 = from the start), at most `max`.
    pub fn readdir_ino(&self, ino: InodeNo, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let dir = self.dir_inode(ino)?;
        self.readdir_inode(&dir, cookie, max)
    }

    /// Readdir on an inode already held (an open directory, even removed).
    pub(crate) fn readdir_inode(&self, dir: &Inode, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let d = dir.data.read();
        // A removed directory lists nothing: ENOENT, as Linux's IS_DEADDIR.
        if !d.alive || d.attrs.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let idx = d.dir();
        Ok(idx
            .by_seq
            .range(cookie.saturating_add(1)..)
            .take(max)
            .map(|(&seq, name)| {
                let de = idx.names[name];
                DirEntry { name: name.to_vec(), ino: de.ino, kind: de.kind, next_cookie: seq }
            })
            .collect())
    }

    pub fn read_ino(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let inode = self.inode(ino)?;
        if inode.kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        let d = inode.data.read();
        Ok(self.read_locked(&d, offset, buf))
    }

    pub fn write_ino(&self, ino: InodeNo, offset: u64, data: &[u8]) -> FsResult<usize> {
        let inode = self.inode(ino)?;
        if inode.kind != FileType::Regular {
            return Err(Errno::EISDIR);
        }
        let mut d = inode.data.write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.write_locked(&inode, &mut d, offset, data)
    }

    /// The value of an extended attribute (ENODATA if it has none).
    pub fn getxattr(&self, ino: InodeNo, name: &[u8]) -> FsResult<Vec<u8>> {
        if xattr_name::classify(name) == XattrName::Unsupported {
            return Err(Errno::EOPNOTSUPP);
        }
        let inode = self.inode(ino)?;
        let d = inode.data.read();
        d.xattrs.get(name).map(|(v, _)| v.to_vec()).ok_or(Errno::ENODATA)
    }

    /// The names of an inode's extended attributes, in byte order.
    pub fn listxattr(&self, ino: InodeNo) -> FsResult<Vec<Vec<u8>>> {
        let inode = self.inode(ino)?;
        let d = inode.data.read();
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
            XattrName::AclDefault | XattrName::Unsupported => return Err(Errno::EOPNOTSUPP),
        }
        if name.len() + value.len() > crate::format::XATTR_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        self.change_xattr(ino, name, Some(value), mode)
    }

    /// Remove an extended attribute (ENODATA if it has none).
    pub fn removexattr(&self, ino: InodeNo, name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.len() > crate::format::XATTR_NAME_MAX {
            return Err(Errno::ERANGE);
        }
        if xattr_name::classify(name) == XattrName::Unsupported {
            return Err(Errno::EOPNOTSUPP);
        }
        self.change_xattr(ino, name, None, XattrSetMode::Replace)
    }

    /// `system.posix_acl_access`: an ACL of owner, group and other entries
    /// only is the mode's permission bits, set as chmod sets them (ctime
    /// too); an empty value removes an extended ACL, of which there is
    /// none, so it changes nothing.
    fn set_acl_access(&self, ino: InodeNo, value: &[u8]) -> FsResult<()> {
        let bits = if value.is_empty() { None } else { Some(xattr_name::acl_access_mode(value)?) };
        let inode = self.inode(ino)?;
        let mut d = inode.data.write();
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
        let mut d = inode.data.write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        let exists = d.xattrs.contains_key(name);
        match (mode, exists) {
            (XattrSetMode::Create, true) => return Err(Errno::EEXIST),
            (XattrSetMode::Replace, false) => return Err(Errno::ENODATA),
            _ => {}
        }
        let entry = Entry::Xattr(crate::format::XattrEntry {
            name: name.to_vec(),
            value: value.map(|v| v.to_vec()),
            ctime_ns: self.now_ns(),
        });
        let staged = d.stage(&self.media, &self.pages, inode.ino, inode.generation, vec![entry])?;
        self.commit_single(&inode, &mut d, staged);
        Ok(())
    }

    /// SEEK_DATA (`data`) or SEEK_HOLE from `offset`, at page granularity:
    /// ENXIO at or past the end of file.
    pub fn seek_data_hole_ino(&self, ino: InodeNo, offset: u64, data: bool) -> FsResult<u64> {
        let inode = self.inode(ino)?;
        if inode.kind != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let d = inode.data.read();
        self.seek_data_hole(&d, offset, data)
    }

    pub fn fallocate_ino(&self, ino: InodeNo, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let mut d = inode.data.write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        self.fallocate_locked(&inode, &mut d, mode, offset, len)
    }

    /// Count an open handle, so that the inode outlives its last name.
    pub fn open_ino(&self, ino: InodeNo) -> FsResult<Arc<Inode>> {
        let inode = self.inode(ino)?;
        self.open_inode(&inode)?;
        Ok(inode)
    }

    /// Count one more open handle on an inode already held (ENOENT once it
    /// has been freed).
    pub(crate) fn open_inode(&self, inode: &Arc<Inode>) -> FsResult<()> {
        let mut d = inode.data.write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        d.open_count += 1;
        Ok(())
    }

    /// Drop an open handle; the last one frees an unlinked inode.
    pub fn release_ino(&self, inode: &Inode) {
        let mut d = inode.data.write();
        assert!(d.open_count > 0, "release without open");
        d.open_count -= 1;
        if d.open_count == 0 && d.alive && d.attrs.nlink == 0 {
            self.free_inode_now(inode, &mut d);
        }
    }

    pub fn fs_stats(&self) -> StatFs {
        let l = self.media.layout;
        StatFs {
            block_size: PAGE_SIZE as u32,
            blocks: l.total_pages,
            blocks_free: self.pages.free_pages(),
            files: l.inode_count - 1,
            files_free: self.inodes_free.free_count(),
            name_max: limits::NAME_MAX as u32,
        }
    }
}
