//! Path resolution (the front ends' shared half of the path API): through
//! symlinks, `.` and `..`, from a starting directory, holding every inode
//! it finds, with the permission checks of each step for the caller's
//! credentials (`perm.rs`). `Session` (`session.rs`) builds `PathFs` on it.

use crate::format::EntryName;
use crate::fs::Ferrite;
use crate::inode::Inode;
use crate::perm::{self, Owner};
use crate::types::{limits, Credentials, Errno, FileType, FsResult, InodeNo, Stat};
use std::borrow::Cow;
use std::sync::Arc;

/// Path components still to resolve, the next one on top.
type Comps<'p> = smallvec::SmallVec<[Cow<'p, [u8]>; 16]>;

/// The checks of a whole path that come before any lookup.
pub(crate) fn check_path(path: &[u8]) -> FsResult<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= limits::PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// What an operation on a resolution returns (inside this module only) to
/// have the path resolved again: another thread changed the name between
/// the lookup and the operation.
pub(crate) const RESOLVE_AGAIN: Errno = Errno(libc::ESTALE);

/// Has an inode this resolution holds been freed since?
pub(crate) fn stale(r: &Resolved) -> bool {
    !r.dir.lock_read().alive || r.target_inode.as_ref().is_some_and(|i| !i.lock_read().alive)
}

/// How often an operation may find that an inode it resolved was freed
/// before it acted on it, and resolve again, before giving up (each time
/// means another thread removed or replaced that name meanwhile).
pub(crate) const RACE_RETRIES_MAX: u32 = 64;

/// The owner and mode of an inode, for the permission rules.
pub(crate) fn owner_of(i: &Inode) -> Owner {
    let d = i.lock_read();
    Owner { kind: i.kind, perm: d.attrs.perm, uid: d.attrs.uid, gid: d.attrs.gid }
}

/// `perm::check` on an inode (root passes without a look at it unless the
/// mask asks for execute).
pub(crate) fn may(i: &Inode, c: &Credentials, mask: u32) -> FsResult<()> {
    if c.is_root() && mask & perm::EXEC == 0 {
        return Ok(());
    }
    perm::check(c, &owner_of(i), mask)
}

/// Search permission on a directory (root always has it).
pub(crate) fn may_search(dir: &Inode, c: &Credentials) -> FsResult<()> {
    if c.is_root() {
        return Ok(());
    }
    perm::check(c, &owner_of(dir), perm::EXEC)
}

/// Is this directory removed (a name in it can be neither found nor made)?
pub(crate) fn dead_dir(dir: &Inode) -> bool {
    let d = dir.lock_read();
    !d.alive || d.attrs.nlink == 0
}

/// may_create: ENOENT in a removed directory, EACCES without write and
/// search permission on it.
pub(crate) fn may_create(dir: &Inode, c: &Credentials) -> FsResult<()> {
    if dead_dir(dir) {
        return Err(Errno::ENOENT);
    }
    may(dir, c, perm::WRITE | perm::EXEC)
}

/// may_delete's permission part: write and search on the directory
/// (EACCES), then the sticky rule (EPERM).
pub(crate) fn may_delete(dir: &Inode, victim: &Inode, c: &Credentials) -> FsResult<()> {
    if c.is_root() {
        return Ok(());
    }
    let d = owner_of(dir);
    perm::check(c, &d, perm::WRITE | perm::EXEC)?;
    if perm::sticky_refuses(c, &d, &owner_of(victim)) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

pub(crate) struct Resolved {
    /// The directory holding the last component, held: operations act on
    /// this inode, never on whatever inode later gets its number (see
    /// `stale`).
    pub dir: Arc<Inode>,
    /// The inode named, held, when it exists.
    pub target_inode: Option<Arc<Inode>>,
    /// The last component (inline up to 24 bytes, as an entry's name: no
    /// allocation for the common name); None when the path is the root or
    /// ends in `.`/`..`.
    pub name: Option<EntryName>,
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

impl Resolved {
    /// The last component `name` of directory `dir` names nothing (yet).
    fn missing(dir: Arc<Inode>, name: EntryName, too_long: bool, slash: bool) -> Resolved {
        Resolved { dir, name: Some(name), last_dot: None, target: None, target_inode: None, too_long, slash }
    }

    /// The last component `name` of directory `dir` names `inode`.
    fn found(dir: Arc<Inode>, name: EntryName, inode: Arc<Inode>, slash: bool) -> Resolved {
        let target = Some((inode.ino, inode.kind));
        Resolved { dir, name: Some(name), last_dot: None, target, target_inode: Some(inode), too_long: false, slash }
    }

    /// The path names directory `target` itself: the root (`last_dot`
    /// None), or `.`/`..` of `dir`.
    fn directory(dir: Arc<Inode>, last_dot: Option<&'static [u8]>, target: Arc<Inode>, slash: bool) -> Resolved {
        let t = Some((target.ino, FileType::Directory));
        Resolved { dir, name: None, last_dot, target: t, target_inode: Some(target), too_long: false, slash }
    }
}

impl Ferrite {
    pub(crate) fn parent_of(&self, dir: InodeNo) -> FsResult<InodeNo> {
        let i = self.inode(dir)?;
        let d = i.lock_read();
        Ok(d.attrs.parent)
    }

    /// Resolve a path from `start` (a relative path) or the root (an
    /// absolute one), searching every directory it goes through as `creds`
    /// (EACCES without search permission). Symlinks are followed in every
    /// component but the last, and in the last when `follow_last`.
    pub(crate) fn resolve(
        &self,
        start: &Arc<Inode>,
        path: &[u8],
        follow_last: bool,
        creds: &Credentials,
    ) -> FsResult<Resolved> {
        let r = self.resolve_lenient(start, path, follow_last, creds)?;
        if r.too_long {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(r)
    }

    /// Like `resolve`, but a last component longer than NAME_MAX is
    /// reported in `too_long` rather than as an error.
    pub(crate) fn resolve_lenient(
        &self,
        start: &Arc<Inode>,
        path: &[u8],
        follow_last: bool,
        creds: &Credentials,
    ) -> FsResult<Resolved> {
        check_path(path)?;
        let mut trailing = path.ends_with(b"/");
        // The components still to walk, the next one last (a stack): those
        // of the path borrow it, those of a symlink body followed own
        // theirs, so that resolving allocates nothing per component.
        let mut comps: Comps<'_> = path.split(|&b| b == b'/').filter(|c| !c.is_empty()).map(Cow::Borrowed).collect();
        comps.reverse();
        // The directory being walked, borrowed where it can be (the root,
        // the start): a directory every thread walks through (the root)
        // is then only read, never has its reference count written.
        let (mut cur, mut cur_dir): (InodeNo, Cow<'_, Arc<Inode>>) = if path.first() == Some(&b'/') {
            (InodeNo::ROOT, Cow::Borrowed(self.root()?))
        } else {
            (start.ino, Cow::Borrowed(start))
        };
        let mut links = 0;
        if comps.is_empty() {
            // Only slashes: the root.
            let d = cur_dir.into_owned();
            return Ok(Resolved::directory(d.clone(), None, d, trailing));
        }
        while let Some(c) = comps.pop() {
            let last = comps.is_empty();
            // Search permission on the directory, before each component
            // (Linux's may_lookup), `.` and `..` included.
            may_search(&cur_dir, creds)?;
            if c.len() > limits::NAME_MAX {
                // A removed directory holds no name, whatever its length
                // (Linux checks IS_DEADDIR before the length).
                let dead = dead_dir(&cur_dir);
                return match (last, dead) {
                    (true, _) => {
                        Ok(Resolved::missing(cur_dir.into_owned(), EntryName::from_slice(&c), !dead, trailing))
                    }
                    (false, true) => Err(Errno::ENOENT),
                    (false, false) => Err(Errno::ENAMETOOLONG),
                };
            }
            if *c == *b"." || *c == *b".." {
                let next_dir =
                    if *c == *b".." { Cow::Owned(self.inode(self.parent_of(cur)?)?) } else { cur_dir.clone() };
                if last {
                    let dot: &'static [u8] = if *c == *b"." { b"." } else { b".." };
                    return Ok(Resolved::directory(cur_dir.into_owned(), Some(dot), next_dir.into_owned(), trailing));
                }
                cur = next_dir.ino;
                cur_dir = next_dir;
                continue;
            }
            let dir: &Arc<Inode> = &cur_dir;
            if dir.kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            match self.lookup_child(dir, &c)? {
                None if last => {
                    return Ok(Resolved::missing(cur_dir.into_owned(), EntryName::from_slice(&c), false, trailing))
                }
                None => return Err(Errno::ENOENT),
                Some((de, child)) => {
                    if de.kind == FileType::Symlink && (!last || follow_last) {
                        links += 1;
                        if links > limits::SYMLOOP_MAX {
                            return Err(Errno::ELOOP);
                        }
                        if self.splice_symlink(&child, last, &mut comps, &mut trailing)? {
                            cur = InodeNo::ROOT;
                            cur_dir = Cow::Borrowed(self.root()?);
                        }
                        if comps.is_empty() {
                            // The link points at "/" (or only slashes).
                            let d = cur_dir.into_owned();
                            return Ok(Resolved::directory(d.clone(), None, d, trailing));
                        }
                        continue;
                    }
                    if !last && de.kind != FileType::Directory {
                        return Err(Errno::ENOTDIR);
                    }
                    if last {
                        return Ok(Resolved::found(cur_dir.into_owned(), EntryName::from_slice(&c), child, trailing));
                    }
                    cur = de.ino;
                    cur_dir = Cow::Owned(child);
                }
            }
        }
        unreachable!("the loop returns at the last component")
    }

    /// Follow symlink `link` met while resolving: its body's components go
    /// in front of those left. True when the body is absolute (resolution
    /// goes on from the root). When the link was the last component, the
    /// body's own trailing slash now ends the path.
    fn splice_symlink(
        &self,
        link: &Arc<Inode>,
        last: bool,
        comps: &mut Comps<'_>,
        trailing: &mut bool,
    ) -> FsResult<bool> {
        let target = self.readlink_inode(link)?;
        if last {
            *trailing = *trailing || target.ends_with(b"/");
        }
        // The body's first component goes on top of the stack.
        for t in target.split(|&b| b == b'/').filter(|t| !t.is_empty()).rev() {
            comps.push(Cow::Owned(t.to_vec()));
        }
        Ok(target.first() == Some(&b'/'))
    }

    /// Resolve `path` from directory `start` (ignored for an absolute path)
    /// as `creds`, and return the attributes of what it names: the
    /// resolution every front end shares, for one that keeps its own
    /// current directory.
    pub fn resolve_path(&self, start: InodeNo, path: &[u8], follow: bool, creds: &Credentials) -> FsResult<Stat> {
        check_path(path)?;
        let s = self.inode(start)?;
        if s.kind != FileType::Directory && path.first() != Some(&b'/') {
            return Err(Errno::ENOTDIR);
        }
        self.on_existing(&s, path, follow, creds, |i| self.getattr_inode(i))
    }

    /// Resolve `path` and run `op` on what it names. An operation acts on
    /// the inodes the resolution holds, never on whatever inode has their
    /// numbers by then; if it fails with ENOENT because one of them was
    /// freed meanwhile (a racing unlink or rename), the path is resolved
    /// again, so that the call behaves as if it came after the other one.
    pub(crate) fn on_path<T>(
        &self,
        start: &Arc<Inode>,
        path: &[u8],
        follow: bool,
        creds: &Credentials,
        mut op: impl FnMut(&Resolved) -> FsResult<T>,
    ) -> FsResult<T> {
        let mut tries = 0;
        loop {
            let r = self.resolve(start, path, follow, creds)?;
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
    pub(crate) fn on_existing<T>(
        &self,
        start: &Arc<Inode>,
        path: &[u8],
        follow: bool,
        creds: &Credentials,
        mut op: impl FnMut(&Arc<Inode>) -> FsResult<T>,
    ) -> FsResult<T> {
        // A trailing slash asks for a directory, so it follows a final symlink.
        self.on_path(start, path, follow || path.ends_with(b"/"), creds, |r| {
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            if r.slash && kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            op(r.target_inode.as_ref().expect("a resolved target is held"))
        })
    }

    /// The absolute path of directory `dir` (ENOENT once it is removed).
    pub(crate) fn path_of_dir(&self, dir: &Arc<Inode>) -> FsResult<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut cur = dir.clone();
        for _ in 0..self.media.layout.inode_count {
            let parent = {
                let d = cur.lock_read();
                if !d.alive || d.attrs.nlink == 0 {
                    return Err(Errno::ENOENT);
                }
                d.attrs.parent
            };
            if cur.ino == InodeNo::ROOT {
                let mut p = Vec::new();
                for n in names.iter().rev() {
                    p.push(b'/');
                    p.extend_from_slice(n);
                }
                if p.is_empty() {
                    p.push(b'/');
                }
                return Ok(p);
            }
            let pi = self.inode(parent)?;
            let name = {
                let pd = pi.lock_read();
                if !pd.alive {
                    return Err(Errno::ENOENT);
                }
                pd.dir().names.iter().find(|(_, de)| de.ino == cur.ino).map(|(n, _)| n.to_vec())
            };
            names.push(name.ok_or(Errno::ENOENT)?);
            cur = pi;
        }
        Err(self.corrupt(crate::format::corrupt!("directory parents form a cycle")))
    }
}
