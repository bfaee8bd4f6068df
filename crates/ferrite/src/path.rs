//! The path-and-descriptor API (`PathFs`): path resolution through
//! symlinks, `.` and `..`, a descriptor table with positions, and the POSIX
//! rules about which call follows which link. Everything here is built on
//! the inode-level operations in `dir.rs`, `attr.rs`, `xattr.rs` and `file.rs`.

use crate::dir::NodeSpec;
use crate::fs::Ferrite;
use crate::inode::Inode;
use crate::types::{
    limits, DirEntry, Errno, FallocateMode, Fd, FileType, FsResult, InodeNo, OpenFlags, PathFs, RenameFlags, SetAttr,
    Stat, StatFs, TimeSet, Whence,
};
use crate::Map;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An open file description.
pub struct OpenFile {
    pub inode: Arc<Inode>,
    pub flags: OpenFlags,
    pub pos: Mutex<u64>,
}

const FD_SHARDS: usize = 16;

/// Descriptor numbers start at 3 and are never reused while mounted.
pub struct FdTable {
    next: AtomicU64,
    shards: Vec<Mutex<Map<u64, Arc<OpenFile>>>>,
}

impl Default for FdTable {
    fn default() -> Self {
        FdTable { next: AtomicU64::new(3), shards: (0..FD_SHARDS).map(|_| Mutex::new(Map::default())).collect() }
    }
}

impl FdTable {
    fn insert(&self, f: OpenFile) -> Fd {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.shards[n as usize % FD_SHARDS].lock().insert(n, Arc::new(f));
        Fd(n)
    }

    fn get(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        self.shards[fd.0 as usize % FD_SHARDS].lock().get(&fd.0).cloned().ok_or(Errno::EBADF)
    }

    fn remove(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        self.shards[fd.0 as usize % FD_SHARDS].lock().remove(&fd.0).ok_or(Errno::EBADF)
    }

    /// Close every descriptor (at unmount).
    pub(crate) fn close_all(&self, fs: &Ferrite) {
        for shard in &self.shards {
            let files: Vec<Arc<OpenFile>> = shard.lock().drain().map(|(_, f)| f).collect();
            for f in files {
                fs.release_ino(&f.inode);
            }
        }
    }

    pub fn open_count(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// The checks of a whole path that come before any lookup.
fn check_path(path: &[u8]) -> FsResult<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= limits::PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// What a path names.
/// What an operation on a resolution returns (inside this module only) to
/// have the path resolved again: another thread changed the name between
/// the lookup and the operation.
const RESOLVE_AGAIN: Errno = Errno(libc::ESTALE);

/// Has an inode this resolution holds been freed since?
fn stale(r: &Resolved) -> bool {
    !r.dir.data.read().alive || r.target_inode.as_ref().is_some_and(|i| !i.data.read().alive)
}

/// How often one path resolution may find a name whose inode was freed
/// between the directory lookup and holding it, before giving up (each
/// time means another thread removed that name meanwhile).
const RACE_RETRIES_MAX: u32 = 64;

pub(crate) struct Resolved {
    /// The directory holding the last component, held: operations act on
    /// this inode, never on whatever inode later gets its number (see
    /// `stale`).
    pub dir: Arc<Inode>,
    /// The inode named, held, when it exists.
    pub target_inode: Option<Arc<Inode>>,
    /// The last component; None when the path is the root or ends in `.`/`..`.
    pub name: Option<Vec<u8>>,
    /// `.` or `..` as the last component.
    pub last_dot: Option<&'static [u8]>,
    /// The inode named, if it exists.
    pub target: Option<(InodeNo, FileType)>,
    /// The last component is longer than NAME_MAX (only from
    /// `resolve_lenient`: the error belongs to the moment it is looked up).
    pub too_long: bool,
    /// The path (or the last symlink body followed) ended with a slash.
    pub slash: bool,
}

impl Ferrite {
    fn parent_of(&self, dir: InodeNo) -> FsResult<InodeNo> {
        let i = self.inode(dir)?;
        let d = i.data.read();
        Ok(d.attrs.parent)
    }

    /// Resolve a path. Symlinks are followed in every component but the
    /// last, and in the last when `follow_last`.
    pub(crate) fn resolve(&self, path: &[u8], follow_last: bool) -> FsResult<Resolved> {
        let r = self.resolve_lenient(path, follow_last)?;
        if r.too_long {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(r)
    }

    /// Like `resolve`, but a last component longer than NAME_MAX is
    /// reported in `too_long` rather than as an error.
    pub(crate) fn resolve_lenient(&self, path: &[u8], follow_last: bool) -> FsResult<Resolved> {
        check_path(path)?;
        let mut trailing = path.ends_with(b"/");
        let mut comps: VecDeque<Vec<u8>> =
            path.split(|&b| b == b'/').filter(|c| !c.is_empty()).map(|c| c.to_vec()).collect();
        let mut cur = InodeNo::ROOT;
        let mut cur_dir = self.inode(InodeNo::ROOT)?;
        let mut links = 0;
        // Lookups that found a name whose inode was freed before it could
        // be held (a racing unlink): each retries the component.
        let mut raced = 0;
        if comps.is_empty() {
            return Ok(Resolved {
                dir: cur_dir.clone(),
                name: None,
                last_dot: None,
                target: Some((InodeNo::ROOT, FileType::Directory)),
                target_inode: Some(cur_dir),
                too_long: false,
                slash: trailing,
            });
        }
        while let Some(c) = comps.pop_front() {
            let last = comps.is_empty();
            if c.len() > limits::NAME_MAX {
                if last {
                    return Ok(Resolved {
                        dir: cur_dir,
                        name: Some(c),
                        last_dot: None,
                        target: None,
                        target_inode: None,
                        too_long: true,
                        slash: trailing,
                    });
                }
                return Err(Errno::ENAMETOOLONG);
            }
            if c == b"." || c == b".." {
                let next_dir = if c == b".." { self.inode(self.parent_of(cur)?)? } else { cur_dir.clone() };
                if last {
                    let dot: &'static [u8] = if c == b"." { b"." } else { b".." };
                    return Ok(Resolved {
                        dir: cur_dir,
                        name: None,
                        last_dot: Some(dot),
                        target: Some((next_dir.ino, FileType::Directory)),
                        target_inode: Some(next_dir),
                        too_long: false,
                        slash: trailing,
                    });
                }
                cur = next_dir.ino;
                cur_dir = next_dir;
                continue;
            }
            let dir = cur_dir.clone();
            if dir.kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            let de = self.lookup_dentry(&dir, &c)?;
            match de {
                None => {
                    if last {
                        return Ok(Resolved {
                            dir: cur_dir,
                            name: Some(c),
                            last_dot: None,
                            target: None,
                            target_inode: None,
                            too_long: false,
                            slash: trailing,
                        });
                    }
                    return Err(Errno::ENOENT);
                }
                Some(de) => {
                    if de.kind == FileType::Symlink && (!last || follow_last) {
                        links += 1;
                        if links > limits::SYMLOOP_MAX {
                            return Err(Errno::ELOOP);
                        }
                        let link = match self.child_of(&dir, &c, &de)? {
                            Some(i) => i,
                            None if raced < RACE_RETRIES_MAX => {
                                raced += 1;
                                links -= 1;
                                comps.push_front(c);
                                continue;
                            }
                            None => return Err(Errno::ENOENT),
                        };
                        let target = self.readlink_inode(&link)?;
                        if target.first() == Some(&b'/') {
                            cur = InodeNo::ROOT;
                            cur_dir = self.inode(InodeNo::ROOT)?;
                        }
                        if last {
                            // The body's own trailing slash now ends the path.
                            trailing = trailing || target.ends_with(b"/");
                        }
                        for t in target.split(|&b| b == b'/').filter(|t| !t.is_empty()).rev() {
                            comps.push_front(t.to_vec());
                        }
                        if comps.is_empty() {
                            // The link points at "/" (or only slashes).
                            return Ok(Resolved {
                                dir: cur_dir.clone(),
                                name: None,
                                last_dot: None,
                                target: Some((cur, FileType::Directory)),
                                target_inode: Some(cur_dir),
                                too_long: false,
                                slash: trailing,
                            });
                        }
                        continue;
                    }
                    if !last && de.kind != FileType::Directory {
                        return Err(Errno::ENOTDIR);
                    }
                    // Hold the inode the name refers to. If it was freed
                    // after the lookup (a racing unlink or rename over it),
                    // look the name up again: its number may already belong
                    // to another file.
                    let child = match self.child_of(&dir, &c, &de)? {
                        Some(i) => i,
                        None if raced < RACE_RETRIES_MAX => {
                            raced += 1;
                            comps.push_front(c);
                            continue;
                        }
                        None => return Err(Errno::ENOENT),
                    };
                    if last {
                        return Ok(Resolved {
                            dir: cur_dir,
                            name: Some(c),
                            last_dot: None,
                            target: Some((de.ino, de.kind)),
                            target_inode: Some(child),
                            too_long: false,
                            slash: trailing,
                        });
                    }
                    cur = de.ino;
                    cur_dir = child;
                }
            }
        }
        unreachable!("the loop returns at the last component")
    }

    /// Resolve `path` and run `op` on what it names. An operation acts on
    /// the inodes the resolution holds, never on whatever inode has their
    /// numbers by then; if it fails with ENOENT because one of them was
    /// freed meanwhile (a racing unlink or rename), the path is resolved
    /// again, so that the call behaves as if it came after the other one.
    fn on_path<T>(&self, path: &[u8], follow: bool, mut op: impl FnMut(&Resolved) -> FsResult<T>) -> FsResult<T> {
        let mut tries = 0;
        loop {
            let r = self.resolve(path, follow)?;
            match op(&r) {
                Err(Errno::ENOENT) if tries < RACE_RETRIES_MAX && stale(&r) => tries += 1,
                Err(RESOLVE_AGAIN) if tries < RACE_RETRIES_MAX => tries += 1,
                Err(RESOLVE_AGAIN) => return Err(Errno::ENOENT),
                other => return other,
            }
        }
    }

    /// Lookup-type resolution: the path must name something, and a
    /// trailing slash requires a directory. `op` gets the inode, held.
    fn on_existing<T>(&self, path: &[u8], follow: bool, mut op: impl FnMut(&Arc<Inode>) -> FsResult<T>) -> FsResult<T> {
        // A trailing slash asks for a directory, so it follows a final symlink.
        self.on_path(path, follow || path.ends_with(b"/"), |r| {
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            if r.slash && kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            op(r.target_inode.as_ref().expect("a resolved target is held"))
        })
    }

    pub fn open_file(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        self.fds.get(fd)
    }

    /// The inode number an open descriptor refers to.
    pub fn fd_inode(&self, fd: Fd) -> FsResult<InodeNo> {
        Ok(self.fds.get(fd)?.inode.ino)
    }

    pub fn open_descriptors(&self) -> usize {
        self.fds.open_count()
    }

    fn writable(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        let f = self.fds.get(fd)?;
        if !f.flags.write {
            return Err(Errno::EBADF);
        }
        Ok(f)
    }

    fn readable(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        let f = self.fds.get(fd)?;
        if !f.flags.read {
            return Err(Errno::EBADF);
        }
        if f.inode.kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        Ok(f)
    }

    fn write_at(&self, f: &OpenFile, data: &[u8], offset: Option<u64>) -> FsResult<(usize, u64)> {
        let mut d = f.inode.data.write();
        let at = if f.flags.append { d.attrs.size } else { offset.expect("an offset without O_APPEND") };
        let n = self.write_locked(&f.inode, &mut d, at, data)?;
        Ok((n, at + n as u64))
    }

    /// The open of one resolution (see `PathFs::open`): the inode opened,
    /// its open count already taken.
    fn open_resolved(&self, r: &Resolved, flags: OpenFlags, perm: u32) -> FsResult<Arc<Inode>> {
        if flags.create && r.name.is_some() && r.slash {
            return Err(Errno::EISDIR);
        }
        let inode = match r.target {
            Some((ino, kind)) => {
                if flags.create {
                    if flags.excl {
                        return Err(Errno::EEXIST);
                    }
                    if kind == FileType::Directory {
                        return Err(Errno::EISDIR);
                    }
                }
                if (flags.directory || r.slash) && kind != FileType::Directory {
                    return Err(Errno::ENOTDIR);
                }
                if kind == FileType::Symlink {
                    return Err(Errno::ELOOP);
                }
                if kind == FileType::Directory && flags.write {
                    return Err(Errno::EISDIR);
                }
                // A FIFO, socket or device node is served by the kernel
                // (through FUSE it never reaches here); this API has no
                // pipe or driver behind it.
                if kind.is_special() {
                    return Err(Errno::ENXIO);
                }
                let inode = r.target_inode.clone().expect("a resolved target is held");
                let _ = ino;
                self.open_inode(&inode)?;
                if flags.trunc && flags.write && kind == FileType::Regular {
                    let mut d = inode.data.write();
                    if let Err(e) = self.truncate_locked(&inode, &mut d, 0) {
                        drop(d);
                        self.release_ino(&inode);
                        return Err(e);
                    }
                }
                inode
            }
            None => {
                if !flags.create {
                    return Err(Errno::ENOENT);
                }
                let name = r.name.as_ref().expect("a missing target has a name");
                let (_, inode) = match self.create_node_in(
                    &r.dir,
                    name,
                    &NodeSpec { kind: FileType::Regular, perm, uid: 0, gid: 0, symlink_target: None, rdev: 0 },
                ) {
                    Ok(st) => st,
                    // Created by another thread since the lookup: open
                    // that one (resolving again).
                    Err(Errno::EEXIST) if !flags.excl => return Err(RESOLVE_AGAIN),
                    Err(e) => return Err(e),
                };
                // Freed already (created, then unlinked by another thread
                // before this open counted): resolve the path again.
                self.open_inode(&inode).map_err(|_| RESOLVE_AGAIN)?;
                inode
            }
        };
        Ok(inode)
    }
}

impl PathFs for Ferrite {
    fn open(&self, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        if flags.create && flags.directory {
            return Err(Errno::EINVAL); // as Linux since 6.4
        }
        let follow = !(flags.nofollow || (flags.create && flags.excl)) || (!flags.create && path.ends_with(b"/"));
        let inode = self.on_path(path, follow, |r| self.open_resolved(r, flags, perm))?;
        Ok(self.fds.insert(OpenFile { inode, flags, pos: Mutex::new(0) }))
    }

    fn close(&self, fd: Fd) -> FsResult<()> {
        let f = self.fds.remove(fd)?;
        self.release_ino(&f.inode);
        Ok(())
    }

    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        let f = self.readable(fd)?;
        let d = f.inode.data.read();
        Ok(self.read_locked(&d, offset, buf))
    }

    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        let f = self.writable(fd)?;
        Ok(self.write_at(&f, data, Some(offset))?.0)
    }

    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        let f = self.readable(fd)?;
        let mut pos = f.pos.lock();
        let d = f.inode.data.read();
        let n = self.read_locked(&d, *pos, buf);
        *pos += n as u64;
        Ok(n)
    }

    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        let f = self.writable(fd)?;
        let mut pos = f.pos.lock();
        let (n, end) = self.write_at(&f, data, Some(*pos))?;
        if n > 0 {
            *pos = end;
        }
        Ok(n)
    }

    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        let f = self.fds.get(fd)?;
        let mut pos = f.pos.lock();
        let d = f.inode.data.read();
        let new = match whence {
            Whence::Set => offset,
            Whence::Cur => (*pos as i64).checked_add(offset).ok_or(Errno::EOVERFLOW)?,
            Whence::End => (f.inode.stat(&d).size as i64).checked_add(offset).ok_or(Errno::EOVERFLOW)?,
            Whence::Data | Whence::Hole => {
                if offset < 0 {
                    return Err(Errno::ENXIO);
                }
                if f.inode.kind == FileType::Directory {
                    return Err(Errno::EINVAL);
                }
                self.seek_data_hole(&d, offset as u64, whence == Whence::Data)? as i64
            }
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        *pos = new as u64;
        Ok(new as u64)
    }

    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        let f = self.fds.get(fd)?;
        if !f.flags.write {
            return Err(Errno::EINVAL);
        }
        let mut d = f.inode.data.write();
        self.truncate_locked(&f.inode, &mut d, size)
    }

    fn fsync(&self, fd: Fd) -> FsResult<()> {
        let f = self.fds.get(fd)?;
        self.fsync_ino(f.inode.ino, false)
    }

    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        let f = self.fds.get(fd)?;
        self.fsync_ino(f.inode.ino, true)
    }

    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let f = self.writable(fd)?;
        let mut d = f.inode.data.write();
        self.fallocate_locked(&f.inode, &mut d, mode, offset, len)
    }

    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        let f = self.fds.get(fd)?;
        let d = f.inode.data.read();
        Ok(f.inode.stat(&d))
    }

    fn stat(&self, path: &[u8]) -> FsResult<Stat> {
        self.on_existing(path, true, |i| self.getattr_inode(i))
    }

    fn lstat(&self, path: &[u8]) -> FsResult<Stat> {
        self.on_existing(path, false, |i| self.getattr_inode(i))
    }

    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        let set = SetAttr { size: Some(size), ..Default::default() };
        self.on_existing(path, true, |i| self.setattr_inode(i, &set)).map(|_| ())
    }

    fn chmod(&self, path: &[u8], perm: u32) -> FsResult<()> {
        let set = SetAttr { perm: Some(perm), ..Default::default() };
        self.on_existing(path, true, |i| self.setattr_inode(i, &set)).map(|_| ())
    }

    fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        self.on_existing(path, true, |i| {
            // chown(-1, -1) still changes ctime: name the current owner.
            let uid = match (uid, gid) {
                (None, None) => Some(self.getattr_inode(i)?.uid),
                _ => uid,
            };
            self.setattr_inode(i, &SetAttr { uid, gid, ..Default::default() })
        })
        .map(|_| ())
    }

    fn utimens(&self, path: &[u8], atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        if atime == TimeSet::Omit && mtime == TimeSet::Omit {
            return Ok(()); // Linux does not even resolve the path
        }
        let set = SetAttr { atime: Some(atime), mtime: Some(mtime), ..Default::default() };
        self.on_existing(path, true, |i| self.setattr_inode(i, &set)).map(|_| ())
    }

    fn mkdir(&self, path: &[u8], perm: u32) -> FsResult<()> {
        let spec = NodeSpec { kind: FileType::Directory, perm, uid: 0, gid: 0, symlink_target: None, rdev: 0 };
        self.on_path(path, false, |r| {
            if r.target.is_some() {
                return Err(Errno::EEXIST);
            }
            let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
            self.create_node_in(&r.dir, name, &spec).map(|_| ())
        })
    }

    fn rmdir(&self, path: &[u8]) -> FsResult<()> {
        self.on_path(path, false, |r| {
            match r.last_dot {
                Some(b".") => return Err(Errno::EINVAL),
                Some(_) => return Err(Errno::ENOTEMPTY),
                None => {}
            }
            let name = r.name.as_ref().ok_or(Errno::EBUSY)?;
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            if kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            self.remove_in(&r.dir, name, true)
        })
    }

    fn unlink(&self, path: &[u8]) -> FsResult<()> {
        self.on_path(path, false, |r| {
            let name = r.name.as_ref().ok_or(Errno::EISDIR)?;
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            if r.slash && kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            if kind == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            self.remove_in(&r.dir, name, false)
        })
    }

    fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> FsResult<()> {
        check_path(from)?;
        check_path(to)?;
        let mut tries = 0;
        loop {
            let s = self.resolve_lenient(from, false)?;
            let d = self.resolve_lenient(to, false)?;
            if s.name.is_some() {
                if s.too_long {
                    return Err(Errno::ENAMETOOLONG);
                }
                s.target.ok_or(Errno::ENOENT)?;
            }
            let (Some(sname), Some(dname)) = (&s.name, &d.name) else {
                return Err(Errno::EBUSY);
            };
            if d.too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            match self.rename_in(&s.dir, sname, s.slash, &d.dir, dname, d.slash, flags) {
                Err(Errno::ENOENT) if tries < RACE_RETRIES_MAX && (stale(&s) || stale(&d)) => tries += 1,
                other => return other,
            }
        }
    }

    fn link(&self, existing: &[u8], new: &[u8]) -> FsResult<()> {
        check_path(existing)?;
        check_path(new)?;
        self.on_existing(existing, false, |target| {
            self.on_path(new, false, |r| {
                if r.target.is_some() {
                    return Err(Errno::EEXIST);
                }
                let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
                if new.ends_with(b"/") {
                    return Err(Errno::ENOENT);
                }
                self.link_in(target, &r.dir, name).map(|_| ())
            })
        })
    }

    fn symlink(&self, target: &[u8], linkpath: &[u8]) -> FsResult<()> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > limits::SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let spec =
            NodeSpec { kind: FileType::Symlink, perm: 0o777, uid: 0, gid: 0, symlink_target: Some(target), rdev: 0 };
        self.on_path(linkpath, false, |r| {
            if r.target.is_some() {
                return Err(Errno::EEXIST);
            }
            let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
            if linkpath.ends_with(b"/") {
                return Err(Errno::ENOENT);
            }
            self.create_node_in(&r.dir, name, &spec).map(|_| ())
        })
    }

    fn mknod(&self, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        // The type is checked before the path, as Linux's may_mknod.
        let kind = match FileType::from_mode(mode) {
            _ if mode & libc::S_IFMT == 0 => FileType::Regular,
            Some(FileType::Directory) => return Err(Errno::EPERM),
            Some(FileType::Symlink) | None => return Err(Errno::EINVAL),
            Some(k) => k,
        };
        let spec = NodeSpec { kind, perm: mode & 0o7777, uid: 0, gid: 0, symlink_target: None, rdev };
        self.on_path(path, false, |r| {
            if r.target.is_some() {
                return Err(Errno::EEXIST);
            }
            let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
            if path.ends_with(b"/") {
                return Err(Errno::ENOENT);
            }
            self.create_node_in(&r.dir, name, &spec).map(|_| ())
        })
    }

    fn readlink(&self, path: &[u8]) -> FsResult<Vec<u8>> {
        self.on_existing(path, false, |i| self.readlink_inode(i))
    }

    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let f = self.fds.get(fd)?;
        if f.inode.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.readdir_inode(&f.inode, cookie, max)
    }

    fn statfs(&self) -> FsResult<StatFs> {
        Ok(self.fs_stats())
    }
}
