//! The whole state of the reference model and every operation on it.
//!
//! Every operation takes the time `now` as an argument (read once per
//! operation by [`crate::ModelFs`]), so that the state is a pure function of
//! the operation history and the clock readings.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use ferrite::limits::{FILE_SIZE_MAX, LINK_MAX, NAME_MAX, PATH_MAX, SYMLINK_MAX, SYMLOOP_MAX};
use ferrite::perm::{self, Owner, PrivilegeDrop};
use ferrite::{
    Credentials, DirEntry, Errno, FallocateMode, Fd, FileMode, FileType, FsResult, InodeNo, OpenFlags, RenameFlags,
    Stat, StatFs, TimeSet, TimeSpec, Whence, XattrSetMode, AT_FDCWD,
};

/// Page size of the allocation rule, and the reported block size.
pub const PAGE: u64 = 4096;
const PAGE_US: usize = PAGE as usize;
/// Inode number of the root directory.
pub(crate) const ROOT: u64 = 1;
/// Largest offset accepted by pread/pwrite/truncate (loff_t is signed).
const LOFF_MAX: u64 = i64::MAX as u64;

/// One allocated 4 KiB page of file data. Shared between snapshots until
/// written (copy on write), so that cloning a state is cheap.
#[derive(Clone, PartialEq, Eq)]
struct Page(Arc<[u8; PAGE_US]>);

impl Page {
    fn zeroed() -> Page {
        Page(Arc::new([0u8; PAGE_US]))
    }
}

impl fmt::Debug for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // FNV-1a: a short fingerprint instead of 4096 bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in self.0.iter() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        let nonzero = self.0.iter().filter(|&&b| b != 0).count();
        write!(f, "Page(nonzero={nonzero}, fnv={h:016x})")
    }
}

/// A regular file: its size and its allocated pages (index -> content).
/// Invariant: every byte of an allocated page at or beyond `size` is zero.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct FileData {
    size: u64,
    pages: BTreeMap<u64, Page>,
}

/// Index range of the pages overlapping [off, off + len), len > 0.
fn page_span(off: u64, len: u64) -> std::ops::RangeInclusive<u64> {
    (off / PAGE)..=((off + len - 1) / PAGE)
}

impl FileData {
    /// How many pages of [off, off + len) are not allocated yet.
    fn missing_pages(&self, off: u64, len: u64) -> u64 {
        let span = page_span(off, len);
        let total = span.end() - span.start() + 1;
        total - self.pages.range(span).count() as u64
    }

    fn allocate(&mut self, off: u64, len: u64) {
        for p in page_span(off, len) {
            self.pages.entry(p).or_insert_with(Page::zeroed);
        }
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> usize {
        if off >= self.size {
            return 0;
        }
        let n = (buf.len() as u64).min(self.size - off) as usize;
        let mut done = 0usize;
        while done < n {
            let pos = off + done as u64;
            let (p, in_page) = (pos / PAGE, (pos % PAGE) as usize);
            let chunk = (PAGE_US - in_page).min(n - done);
            match self.pages.get(&p) {
                Some(page) => buf[done..done + chunk].copy_from_slice(&page.0[in_page..in_page + chunk]),
                None => buf[done..done + chunk].fill(0),
            }
            done += chunk;
        }
        n
    }

    /// Store `data` at `off` (pages must have been checked for space).
    fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let (p, in_page) = (pos / PAGE, (pos % PAGE) as usize);
            let chunk = (PAGE_US - in_page).min(data.len() - done);
            let page = self.pages.entry(p).or_insert_with(Page::zeroed);
            Arc::make_mut(&mut page.0)[in_page..in_page + chunk].copy_from_slice(&data[done..done + chunk]);
            done += chunk;
        }
        self.size = self.size.max(off + data.len() as u64);
    }

    /// Set the size: free the pages wholly beyond it, zero the tail of the
    /// last partial page. Growing allocates nothing.
    fn truncate(&mut self, size: u64) {
        let keep = size.div_ceil(PAGE);
        self.pages.split_off(&keep);
        if !size.is_multiple_of(PAGE) {
            if let Some(page) = self.pages.get_mut(&(size / PAGE)) {
                let from = (size % PAGE) as usize;
                if page.0[from..].iter().any(|&b| b != 0) {
                    Arc::make_mut(&mut page.0)[from..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// fallocate PUNCH_HOLE: [off, end) below the size reads as zeros,
    /// pages wholly inside are deallocated, the size stays.
    fn punch(&mut self, off: u64, end: u64) {
        let end = end.min(self.size);
        if off >= end {
            return;
        }
        for p in page_span(off, end - off) {
            let start = p * PAGE;
            if off <= start && start + PAGE <= end {
                self.pages.remove(&p);
            } else if let Some(page) = self.pages.get_mut(&p) {
                let lo = (off.max(start) - start) as usize;
                let hi = (end.min(start + PAGE) - start) as usize;
                Arc::make_mut(&mut page.0)[lo..hi].fill(0);
            }
        }
    }

    /// fallocate ZERO_RANGE: [off, end) reads as zeros, every page it
    /// touches is allocated; the caller sets the size.
    fn zero_range(&mut self, off: u64, end: u64) {
        for p in page_span(off, end - off) {
            let start = p * PAGE;
            let page = self.pages.entry(p).or_insert_with(Page::zeroed);
            let lo = (off.max(start) - start) as usize;
            let hi = (end.min(start + PAGE) - start) as usize;
            if page.0[lo..hi].iter().any(|&b| b != 0) {
                Arc::make_mut(&mut page.0)[lo..hi].fill(0);
            }
        }
    }

    fn content(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.size as usize];
        self.read(0, &mut v);
        v
    }
}

/// One directory entry: the inode and its insertion sequence number, which
/// is the readdir cookie.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Slot {
    ino: u64,
    seq: u64,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct DirData {
    entries: BTreeMap<Vec<u8>, Slot>,
    /// The next insertion sequence number (cookies start at 1; 0 = start).
    next_seq: u64,
    /// The parent directory (the root is its own parent).
    parent: u64,
}

#[derive(Clone, PartialEq, Eq, Debug)]
enum Body {
    File(FileData),
    Dir(DirData),
    Symlink(Vec<u8>),
    /// A FIFO, socket or device node (with its device number).
    Special(FileType, u64),
}

/// What a crash brings back of an fsync-atomic file that has data changes
/// since its last commit point: its content, size and times at that point.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Committed {
    data: FileData,
    mtime: TimeSpec,
    ctime: TimeSpec,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct Inode {
    body: Body,
    /// The consistency mode (regular files; strict for everything else).
    mode: FileMode,
    /// The state at the last commit point, while an fsync-atomic file has
    /// data changes after it (None: the current state is committed).
    committed: Option<Box<Committed>>,
    perm: u32,
    uid: u32,
    gid: u32,
    /// Number of names: for a directory 1 while linked, 0 once removed.
    links: u32,
    /// Made by O_TMPFILE without O_EXCL and never named: `link` may give it
    /// its first name although `links` is 0 (Linux's I_LINKABLE).
    linkable: bool,
    atime: TimeSpec,
    mtime: TimeSpec,
    ctime: TimeSpec,
    /// Extended attributes (user., trusted., security. names).
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inode {
    fn kind(&self) -> FileType {
        match self.body {
            Body::File(_) => FileType::Regular,
            Body::Dir(_) => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special(kind, _) => kind,
        }
    }
    fn touch_mc(&mut self, now: TimeSpec) {
        self.mtime = now;
        self.ctime = now;
    }
}

/// An open file description, shared by the descriptors `dup` makes.
#[derive(Clone, PartialEq, Eq, Debug)]
struct OpenFile {
    ino: u64,
    /// Status flags (`OpenFlags::status`); `append` changes with F_SETFL.
    flags: OpenFlags,
    pos: u64,
}

/// A descriptor: its open file description and its close-on-exec flag.
#[derive(Clone, PartialEq, Eq, Debug)]
struct FdSlot {
    ofd: u64,
    cloexec: bool,
}

/// The complete state of the model: inodes, directory trees, open files and
/// counters. Cloning is cheap (file pages are shared until written) and
/// comparison is exact (inode numbers, cookies and descriptors included).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ModelState {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    fds: BTreeMap<u64, FdSlot>,
    next_fd: u64,
    /// Open file descriptions by number (numbers are internal).
    ofds: BTreeMap<u64, OpenFile>,
    next_ofd: u64,
    /// The current directory (it keeps its inode alive, as an open file).
    cwd: u64,
    creds: Credentials,
    total_pages: u64,
    total_inodes: u64,
    /// The mode of regular files created from now on.
    default_mode: FileMode,
}

/// The last component of a path, as Linux classifies it.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Last {
    /// The path is made of slashes only.
    Root,
    Dot,
    DotDot,
    Name(Vec<u8>),
}

/// The end of a resolution: whether the path (or the last symlink body
/// followed) ended with a slash, and the inode it names if any.
struct Final {
    slash: bool,
    ino: Option<u64>,
}

fn check_path(path: &[u8]) -> FsResult<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn bump(count: &mut usize) -> FsResult<()> {
    *count += 1;
    if *count > SYMLOOP_MAX {
        return Err(Errno::ELOOP);
    }
    Ok(())
}

fn classify(c: &[u8]) -> Last {
    match c {
        b"." => Last::Dot,
        b".." => Last::DotDot,
        n => Last::Name(n.to_vec()),
    }
}

/// EINVAL when `flags` has a bit outside `allowed`.
fn check_flags(flags: i32, allowed: i32) -> FsResult<()> {
    if flags & !allowed != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn valid_time(t: TimeSet) -> bool {
    match t {
        TimeSet::At(ts) => ts.nsec < 1_000_000_000,
        _ => true,
    }
}

impl ModelState {
    /// An empty file system: the root directory (inode 1, 0755, owned by
    /// 0:0, all times `now`).
    pub fn new(now: TimeSpec, total_pages: u64, total_inodes: u64) -> ModelState {
        let root = Inode {
            body: Body::Dir(DirData { entries: BTreeMap::new(), next_seq: 1, parent: ROOT }),
            mode: FileMode::Strict,
            committed: None,
            perm: 0o755,
            uid: 0,
            gid: 0,
            links: 1,
            linkable: false,
            atime: now,
            mtime: now,
            ctime: now,
            xattrs: BTreeMap::new(),
        };
        ModelState {
            inodes: BTreeMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            fds: BTreeMap::new(),
            next_fd: 3,
            ofds: BTreeMap::new(),
            next_ofd: 1,
            cwd: ROOT,
            creds: Credentials::root(),
            total_pages,
            total_inodes,
            default_mode: FileMode::Strict,
        }
    }

    /// A new process's view of this state: every descriptor closed, so
    /// unlinked-but-open inodes are gone, the root as current directory,
    /// root credentials. Counters are kept. Pending changes of fsync-atomic
    /// files stay as they are: a remount is [`ModelState::unmounted`] or
    /// [`ModelState::crashed`], which call this.
    pub fn without_open_files(&self) -> ModelState {
        let mut s = self.clone();
        let open: Vec<u64> = s.fds.keys().copied().collect();
        for fd in open {
            let _ = s.close(Fd(fd));
        }
        let old = std::mem::replace(&mut s.cwd, ROOT);
        s.maybe_drop(old);
        s.creds = Credentials::root();
        s
    }

    // ----- consistency modes ---------------------------------------------
    //
    // Each regular file has a mode (`FileMode`). A data change (write,
    // truncate, O_TRUNC, fallocate of any kind) of an fsync-atomic file
    // first saves the file's committed state (content, size, mtime, ctime)
    // if none is saved yet; a commit point of the file drops it: fsync and
    // fdatasync of a descriptor of it, a successful write through an O_SYNC
    // or O_DSYNC descriptor (even of zero bytes, as the engine's session),
    // sync_all, a clean unmount, and every other successful change of the
    // file: chmod, chown, utimens, xattr set or remove, a mode change (even
    // to the same mode), link, unlink, rename of it or over it. A crash
    // brings every saved state back.

    /// The mode of regular files created from now on.
    pub fn default_mode(&self) -> FileMode {
        self.default_mode
    }

    pub fn set_default_mode(&mut self, mode: FileMode) {
        self.default_mode = mode;
    }

    /// The mode of inode `ino` (strict for anything but a regular file).
    pub fn file_mode(&self, ino: u64) -> FileMode {
        self.inode(ino).mode
    }

    /// Inodes with changes a crash would undo (fsync-atomic files with
    /// data changes since their last commit point), in increasing order.
    pub fn pending_inodes(&self) -> Vec<u64> {
        self.inodes.iter().filter(|(_, i)| i.committed.is_some()).map(|(&n, _)| n).collect()
    }

    /// A commit point of every file (sync, syncfs).
    pub fn sync_all(&mut self) {
        for i in self.inodes.values_mut() {
            i.committed = None;
        }
    }

    /// What a clean unmount and mount leave: every file committed, then
    /// [`ModelState::without_open_files`].
    pub fn unmounted(&self) -> ModelState {
        let mut s = self.clone();
        s.sync_all();
        s.without_open_files()
    }

    /// What a crash and mount leave: every fsync-atomic file back at its
    /// last commit point, everything else as it is, then
    /// [`ModelState::without_open_files`].
    pub fn crashed(&self) -> ModelState {
        self.crashed_committing(&[])
    }

    /// A crash during which the commits of the pending changes of `inos`
    /// completed (a commit point in flight, e.g. `sync_all` having reached
    /// some files): those files keep their current state, every other
    /// pending file goes back to its last commit point. Files are
    /// independent, so any subset of [`ModelState::pending_inodes`] is a
    /// state a crash during a multi-file commit may leave.
    pub fn crashed_committing(&self, inos: &[u64]) -> ModelState {
        let mut s = self.clone();
        for (n, i) in s.inodes.iter_mut() {
            let Some(c) = i.committed.take() else { continue };
            if inos.contains(n) {
                continue;
            }
            let c = *c;
            i.body = Body::File(c.data);
            i.mtime = c.mtime;
            i.ctime = c.ctime;
        }
        s.without_open_files()
    }

    /// Before a data change of regular file `ino`: in fsync-atomic mode,
    /// save its committed state unless one is saved already.
    fn data_change(&mut self, ino: u64) {
        let i = self.inode_mut(ino);
        if i.mode != FileMode::FsyncAtomic || i.committed.is_some() {
            return;
        }
        let Body::File(f) = &i.body else {
            panic!("model: data change of inode {ino}, which is not a regular file");
        };
        i.committed = Some(Box::new(Committed { data: f.clone(), mtime: i.mtime, ctime: i.ctime }));
    }

    /// A commit point of inode `ino`: its current state is durable.
    fn commit_point(&mut self, ino: u64) {
        self.inode_mut(ino).committed = None;
    }

    /// Descriptors currently open, in increasing order.
    pub fn open_fds(&self) -> Vec<Fd> {
        self.fds.keys().map(|&f| Fd(f)).collect()
    }

    /// Pages used: allocated pages of live regular files + 1 per symlink.
    pub fn used_pages(&self) -> u64 {
        self.inodes
            .values()
            .map(|i| match &i.body {
                Body::File(f) => f.pages.len() as u64,
                Body::Symlink(_) => 1,
                Body::Dir(_) | Body::Special(..) => 0,
            })
            .sum()
    }

    /// Live inodes (linked or open), the root included.
    pub fn live_inodes(&self) -> u64 {
        self.inodes.len() as u64
    }

    fn free_pages(&self) -> u64 {
        self.total_pages.saturating_sub(self.used_pages())
    }

    fn free_inodes(&self) -> u64 {
        self.total_inodes.saturating_sub(self.live_inodes())
    }

    // ----- inode helpers -------------------------------------------------

    fn inode(&self, ino: u64) -> &Inode {
        self.inodes.get(&ino).expect("model: dangling inode reference")
    }

    fn inode_mut(&mut self, ino: u64) -> &mut Inode {
        self.inodes.get_mut(&ino).expect("model: dangling inode reference")
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.inode(ino).body, Body::Dir(_))
    }

    fn dir(&self, ino: u64) -> &DirData {
        match &self.inode(ino).body {
            Body::Dir(d) => d,
            _ => panic!("model: inode {ino} is not a directory"),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> &mut DirData {
        match &mut self.inode_mut(ino).body {
            Body::Dir(d) => d,
            _ => panic!("model: inode {ino} is not a directory"),
        }
    }

    fn file_mut(&mut self, ino: u64) -> &mut FileData {
        match &mut self.inode_mut(ino).body {
            Body::File(f) => f,
            _ => panic!("model: inode {ino} is not a regular file"),
        }
    }

    /// The checks of a name looked up in `dir`: ENOENT in a removed
    /// directory (Linux checks IS_DEADDIR before the file system sees the
    /// name), then the length.
    fn check_name_in(&self, dir: u64, name: &[u8]) -> FsResult<()> {
        if self.inode(dir).links == 0 {
            return Err(Errno::ENOENT);
        }
        check_name(name)
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.dir(dir).entries.get(name).map(|s| s.ino)
    }

    fn parent_of(&self, dir: u64) -> u64 {
        self.dir(dir).parent
    }

    fn is_empty_dir(&self, ino: u64) -> bool {
        self.dir(ino).entries.is_empty()
    }

    /// Is `anc` the directory `d` itself or one of its ancestors?
    fn is_ancestor_or_self(&self, anc: u64, mut d: u64) -> bool {
        loop {
            if d == anc {
                return true;
            }
            if d == ROOT {
                return false;
            }
            d = self.parent_of(d);
        }
    }

    fn nlink(&self, ino: u64) -> u32 {
        let i = self.inode(ino);
        match &i.body {
            Body::Dir(d) if i.links > 0 => 2 + d.entries.values().filter(|s| self.is_dir(s.ino)).count() as u32,
            _ => i.links,
        }
    }

    pub(crate) fn stat_of(&self, ino: u64) -> Stat {
        let i = self.inode(ino);
        let (size, blocks) = match &i.body {
            Body::File(f) => (f.size, 8 * f.pages.len() as u64),
            Body::Dir(_) => (PAGE, 8),
            Body::Symlink(t) => (t.len() as u64, 8),
            Body::Special(..) => (0, 0),
        };
        let rdev = match i.body {
            Body::Special(_, rdev) => rdev,
            _ => 0,
        };
        Stat {
            ino: InodeNo(ino),
            kind: i.kind(),
            perm: i.perm,
            nlink: self.nlink(ino),
            uid: i.uid,
            gid: i.gid,
            size,
            blocks,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            blksize: PAGE as u32,
            rdev,
        }
    }

    /// Open file descriptions of the inode, and the current directory.
    fn open_count(&self, ino: u64) -> usize {
        self.ofds.values().filter(|f| f.ino == ino).count() + usize::from(self.cwd == ino)
    }

    /// Forget an inode that has neither a name nor an open descriptor.
    fn maybe_drop(&mut self, ino: u64) {
        if self.inode(ino).links == 0 && self.open_count(ino) == 0 {
            self.inodes.remove(&ino);
        }
    }

    /// A new inode in directory `dir`, owned and moded by the caller's
    /// credentials (`perm::new_owner`).
    fn new_inode(&mut self, dir: u64, body: Body, perm: u32, now: TimeSpec) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let kind = match &body {
            Body::File(_) => FileType::Regular,
            Body::Dir(_) => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special(k, _) => *k,
        };
        let (uid, gid, perm) = perm::new_owner(&self.creds, &self.owner(dir), kind, perm);
        let mode = if kind == FileType::Regular { self.default_mode } else { FileMode::Strict };
        let inode = Inode {
            body,
            mode,
            committed: None,
            perm,
            uid,
            gid,
            links: 1,
            linkable: false,
            atime: now,
            mtime: now,
            ctime: now,
            xattrs: BTreeMap::new(),
        };
        self.inodes.insert(ino, inode);
        ino
    }

    /// Add a name to a directory with a fresh cookie.
    fn insert_entry(&mut self, dir: u64, name: Vec<u8>, ino: u64) {
        let d = self.dir_mut(dir);
        let seq = d.next_seq;
        d.next_seq += 1;
        d.entries.insert(name, Slot { ino, seq });
    }

    fn remove_entry(&mut self, dir: u64, name: &[u8]) -> u64 {
        self.dir_mut(dir).entries.remove(name).expect("model: removing a missing entry").ino
    }

    /// Take one name away from an inode (unlink, rmdir, replaced by rename).
    fn drop_link(&mut self, ino: u64, now: TimeSpec) {
        self.commit_point(ino);
        let i = self.inode_mut(ino);
        i.links -= 1;
        i.ctime = now;
        self.maybe_drop(ino);
    }

    // ----- path resolution -----------------------------------------------

    /// Walk every component but the last, starting at `start` for a
    /// relative path. Returns the directory holding the last component, the
    /// component, and whether the path ends with a slash.
    fn walk(&self, start: u64, path: &[u8], count: &mut usize) -> FsResult<(u64, Last, bool)> {
        let abs = path.first() == Some(&b'/');
        let comps: Vec<&[u8]> = path.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
        let mut dir = if abs { ROOT } else { start };
        let Some((last, mids)) = comps.split_last() else {
            return Ok((ROOT, Last::Root, false));
        };
        for c in mids {
            dir = self.step(dir, c, count)?;
        }
        // Search permission on the directory holding the last component.
        self.may_search(dir)?;
        Ok((dir, classify(last), path.last() == Some(&b'/')))
    }

    /// Go from directory `dir` through the intermediate component `c`,
    /// following a symlink; the result must be a directory.
    fn step(&self, dir: u64, c: &[u8], count: &mut usize) -> FsResult<u64> {
        self.may_search(dir)?;
        match c {
            b"." => Ok(dir),
            b".." => Ok(self.parent_of(dir)),
            name => {
                self.check_name_in(dir, name)?;
                let mut ino = self.lookup(dir, name).ok_or(Errno::ENOENT)?;
                if let Body::Symlink(target) = &self.inode(ino).body {
                    bump(count)?;
                    let (d, l, s) = self.walk(dir, target, count)?;
                    ino = self.lookup_last(d, l, s, true, count)?.ino.ok_or(Errno::ENOENT)?;
                }
                if !self.is_dir(ino) {
                    return Err(Errno::ENOTDIR);
                }
                Ok(ino)
            }
        }
    }

    /// Look the last component up, following symlinks when `follow` or when
    /// a trailing slash asks for a directory.
    fn lookup_last(
        &self,
        mut dir: u64,
        mut last: Last,
        mut slash: bool,
        mut follow: bool,
        count: &mut usize,
    ) -> FsResult<Final> {
        loop {
            let ino = match &last {
                Last::Root => Some(ROOT),
                Last::Dot => Some(dir),
                Last::DotDot => Some(self.parent_of(dir)),
                Last::Name(n) => {
                    self.check_name_in(dir, n)?;
                    self.lookup(dir, n)
                }
            };
            if let Some(i) = ino {
                if let Body::Symlink(target) = &self.inode(i).body {
                    if follow || slash {
                        bump(count)?;
                        let (d, l, s) = self.walk(dir, target, count)?;
                        (dir, last, slash, follow) = (d, l, slash || s, true);
                        continue;
                    }
                }
            }
            return Ok(Final { slash, ino });
        }
    }

    /// Resolve a whole path from `start` to an existing inode (stat,
    /// lstat, chmod, ...).
    fn resolve(&self, start: u64, path: &[u8], follow: bool) -> FsResult<u64> {
        check_path(path)?;
        let mut count = 0;
        let (d, l, s) = self.walk(start, path, &mut count)?;
        let f = self.lookup_last(d, l, s, follow, &mut count)?;
        let ino = f.ino.ok_or(Errno::ENOENT)?;
        if f.slash && !self.is_dir(ino) {
            return Err(Errno::ENOTDIR);
        }
        Ok(ino)
    }

    /// Resolve the parent of a path that names something to create (mkdir,
    /// symlink, link): the name must be an ordinary one that does not exist.
    /// A trailing slash on a missing name is ENOENT unless `dir_ok` (mkdir).
    /// Then may_create: ENOENT in a removed directory, EACCES without write
    /// and search permission on it.
    fn create_target(&self, start: u64, path: &[u8], dir_ok: bool) -> FsResult<(u64, Vec<u8>)> {
        check_path(path)?;
        let (dir, last, slash) = self.walk(start, path, &mut 0)?;
        let Last::Name(name) = last else {
            return Err(Errno::EEXIST);
        };
        self.check_name_in(dir, &name)?;
        if self.lookup(dir, &name).is_some() {
            return Err(Errno::EEXIST);
        }
        if slash && !dir_ok {
            return Err(Errno::ENOENT);
        }
        self.may_create(dir)?;
        Ok((dir, name))
    }

    // ----- descriptors ---------------------------------------------------

    /// The open file description of a descriptor (EBADF).
    fn ofd_of(&self, fd: Fd) -> FsResult<u64> {
        self.fds.get(&fd.0).map(|s| s.ofd).ok_or(Errno::EBADF)
    }

    /// Any descriptor, O_PATH included.
    fn file_of(&self, fd: Fd) -> FsResult<&OpenFile> {
        Ok(&self.ofds[&self.ofd_of(fd)?])
    }

    /// A descriptor for I/O and attribute calls: EBADF for O_PATH.
    fn io_file(&self, fd: Fd) -> FsResult<&OpenFile> {
        let of = self.file_of(fd)?;
        if of.flags.path {
            return Err(Errno::EBADF);
        }
        Ok(of)
    }

    fn set_pos(&mut self, fd: Fd, pos: u64) {
        let ofd = self.fds[&fd.0].ofd;
        self.ofds.get_mut(&ofd).expect("model: a descriptor without description").pos = pos;
    }

    pub(crate) fn open(&mut self, now: TimeSpec, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        let flags = flags.effective()?;
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        let mut count = 0;
        let (mut dir, mut last, mut slash) = self.walk(start, path, &mut count)?;
        if flags.tmpfile {
            return self.open_tmpfile(now, dir, last, slash, flags, perm, &mut count);
        }
        let mut created = false;
        let ino = if flags.create {
            loop {
                let name = match &last {
                    Last::Root => break ROOT,
                    Last::Dot => break dir,
                    Last::DotDot => break self.parent_of(dir),
                    Last::Name(n) => n.clone(),
                };
                if slash {
                    return Err(Errno::EISDIR);
                }
                self.check_name_in(dir, &name)?;
                match self.lookup(dir, &name) {
                    None => {
                        self.may_create(dir)?;
                        if self.free_inodes() == 0 {
                            return Err(Errno::ENOSPC);
                        }
                        let ino = self.new_inode(dir, Body::File(FileData::default()), perm & 0o7777, now);
                        self.insert_entry(dir, name, ino);
                        self.inode_mut(dir).touch_mc(now);
                        created = true;
                        break ino;
                    }
                    Some(i) => {
                        if flags.excl {
                            return Err(Errno::EEXIST);
                        }
                        match &self.inode(i).body {
                            Body::Symlink(target) if !flags.nofollow => {
                                bump(&mut count)?;
                                let (d, l, s) = self.walk(dir, target, &mut count)?;
                                (dir, last, slash) = (d, l, s);
                            }
                            _ => break i,
                        }
                    }
                }
            }
        } else {
            let f = self.lookup_last(dir, last, slash, !flags.nofollow, &mut count)?;
            slash = f.slash;
            f.ino.ok_or(Errno::ENOENT)?
        };
        let kind = self.inode(ino).kind();
        if flags.create && !created {
            if flags.excl {
                return Err(Errno::EEXIST);
            }
            if kind == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            if perm::sticky_create_refuses(&self.creds, &self.owner(dir), &self.owner(ino)) {
                return Err(Errno::EACCES);
            }
        }
        if (flags.directory || slash) && kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if !flags.path {
            if kind == FileType::Symlink {
                return Err(Errno::ELOOP);
            }
            // O_TRUNC asks for write permission and truncates whatever the
            // access mode (Linux's build_open_flags adds MAY_WRITE).
            let writes = flags.write || flags.trunc;
            if kind == FileType::Directory && writes {
                return Err(Errno::EISDIR);
            }
            if !created {
                let mask = if flags.read { perm::READ } else { 0 } | if writes { perm::WRITE } else { 0 };
                self.may(ino, mask)?;
            }
        }
        // As the engine's path API: no pipe or driver behind these.
        if kind.is_special() && !flags.path {
            return Err(Errno::ENXIO);
        }
        if flags.trunc && kind == FileType::Regular && !created {
            self.set_size(now, ino, 0)?;
        }
        let ofd = self.next_ofd;
        self.next_ofd += 1;
        self.ofds.insert(ofd, OpenFile { ino, flags: flags.status(), pos: 0 });
        Ok(self.insert_fd(FdSlot { ofd, cloexec: flags.cloexec }))
    }

    /// open(2) with O_TMPFILE: the path's last component `last` in `dir`
    /// names a directory (followed unless O_NOFOLLOW) in which the caller
    /// may create; a regular file with no name and a link count of 0 is
    /// made there and opened. The directory does not change.
    #[allow(clippy::too_many_arguments)]
    fn open_tmpfile(
        &mut self,
        now: TimeSpec,
        dir: u64,
        last: Last,
        slash: bool,
        flags: OpenFlags,
        perm: u32,
        count: &mut usize,
    ) -> FsResult<Fd> {
        let f = self.lookup_last(dir, last, slash, !flags.nofollow, count)?;
        let parent = f.ino.ok_or(Errno::ENOENT)?;
        if !self.is_dir(parent) {
            return Err(Errno::ENOTDIR);
        }
        self.may_create(parent)?;
        if self.free_inodes() == 0 {
            return Err(Errno::ENOSPC);
        }
        let ino = self.new_inode(parent, Body::File(FileData::default()), perm & 0o7777, now);
        let i = self.inode_mut(ino);
        i.links = 0;
        i.linkable = !flags.excl;
        let ofd = self.next_ofd;
        self.next_ofd += 1;
        self.ofds.insert(ofd, OpenFile { ino, flags: flags.status(), pos: 0 });
        Ok(self.insert_fd(FdSlot { ofd, cloexec: flags.cloexec }))
    }

    /// A new descriptor at the next unused number.
    fn insert_fd(&mut self, slot: FdSlot) -> Fd {
        loop {
            let fd = self.next_fd;
            self.next_fd += 1;
            if Fd(fd) != AT_FDCWD && !self.fds.contains_key(&fd) {
                self.fds.insert(fd, slot);
                return Fd(fd);
            }
        }
    }

    /// Drop a descriptor: the last one of a description closes it.
    fn drop_slot(&mut self, slot: FdSlot) {
        if !self.fds.values().any(|s| s.ofd == slot.ofd) {
            let of = self.ofds.remove(&slot.ofd).expect("model: a descriptor without description");
            self.maybe_drop(of.ino);
        }
    }

    pub(crate) fn close(&mut self, fd: Fd) -> FsResult<()> {
        let slot = self.fds.remove(&fd.0).ok_or(Errno::EBADF)?;
        self.drop_slot(slot);
        Ok(())
    }

    pub(crate) fn dup(&mut self, fd: Fd) -> FsResult<Fd> {
        let ofd = self.ofd_of(fd)?;
        Ok(self.insert_fd(FdSlot { ofd, cloexec: false }))
    }

    pub(crate) fn dup3(&mut self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd> {
        if fd == newfd {
            return Err(Errno::EINVAL);
        }
        let ofd = self.ofd_of(fd)?;
        if newfd == AT_FDCWD {
            return Err(Errno::EBADF);
        }
        if let Some(old) = self.fds.insert(newfd.0, FdSlot { ofd, cloexec }) {
            self.drop_slot(old);
        }
        Ok(newfd)
    }

    pub(crate) fn get_cloexec(&self, fd: Fd) -> FsResult<bool> {
        self.fds.get(&fd.0).map(|s| s.cloexec).ok_or(Errno::EBADF)
    }

    pub(crate) fn set_cloexec(&mut self, fd: Fd, on: bool) -> FsResult<()> {
        self.fds.get_mut(&fd.0).map(|s| s.cloexec = on).ok_or(Errno::EBADF)
    }

    pub(crate) fn getfl(&self, fd: Fd) -> FsResult<OpenFlags> {
        Ok(self.file_of(fd)?.flags)
    }

    pub(crate) fn setfl_append(&mut self, fd: Fd, append: bool) -> FsResult<()> {
        self.io_file(fd)?;
        let ofd = self.ofd_of(fd)?;
        self.ofds.get_mut(&ofd).expect("model: description").flags.append = append;
        Ok(())
    }

    /// Checks shared by read and pread; returns the inode.
    fn readable(&self, fd: Fd) -> FsResult<u64> {
        let of = self.file_of(fd)?;
        if !of.flags.read {
            return Err(Errno::EBADF);
        }
        if self.is_dir(of.ino) {
            return Err(Errno::EISDIR);
        }
        Ok(of.ino)
    }

    fn read_at(&self, ino: u64, buf: &mut [u8], offset: u64) -> usize {
        match &self.inode(ino).body {
            Body::File(f) => f.read(offset, buf),
            _ => unreachable!("model: reading a non-file"),
        }
    }

    pub(crate) fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        let ino = self.readable(fd)?;
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        Ok(self.read_at(ino, buf, offset))
    }

    pub(crate) fn read(&mut self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        let ino = self.readable(fd)?;
        let pos = self.file_of(fd)?.pos;
        let n = self.read_at(ino, buf, pos);
        self.set_pos(fd, pos + n as u64);
        Ok(n)
    }

    /// Write `data` at `offset` (or at the end with O_APPEND). Returns the
    /// offset just past the data written.
    fn write_common(&mut self, now: TimeSpec, fd: Fd, data: &[u8], offset: Option<u64>) -> FsResult<u64> {
        let of = self.file_of(fd)?.clone();
        if !of.flags.write {
            return Err(Errno::EBADF);
        }
        if let Some(o) = offset {
            if o > LOFF_MAX {
                return Err(Errno::EINVAL);
            }
        }
        let sync = of.flags.sync || of.flags.dsync;
        if data.is_empty() {
            // A write of nothing syncs nothing (as Linux and the engine).
            return Ok(offset.unwrap_or(of.pos));
        }
        let ino = of.ino;
        let Body::File(f) = &self.inode(ino).body else {
            unreachable!("model: a writable descriptor on a non-file");
        };
        let off = if of.flags.append { f.size } else { offset.unwrap_or(of.pos) };
        let len = data.len() as u64;
        if off.checked_add(len).filter(|&end| end <= FILE_SIZE_MAX).is_none() {
            return Err(Errno::EFBIG);
        }
        let missing_pages = f.missing_pages(off, len);
        // Before the space is found, as Linux's file_remove_privs.
        self.drop_privileges(now, ino, PrivilegeDrop::Modify);
        if missing_pages > self.free_pages() {
            return Err(Errno::ENOSPC);
        }
        self.data_change(ino);
        self.file_mut(ino).write(off, data);
        self.inode_mut(ino).touch_mc(now);
        if sync {
            self.commit_point(ino);
        }
        Ok(off + len)
    }

    pub(crate) fn pwrite(&mut self, now: TimeSpec, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        self.write_common(now, fd, data, Some(offset))?;
        Ok(data.len())
    }

    pub(crate) fn write(&mut self, now: TimeSpec, fd: Fd, data: &[u8]) -> FsResult<usize> {
        let end = self.write_common(now, fd, data, None)?;
        if !data.is_empty() {
            self.set_pos(fd, end);
        }
        Ok(data.len())
    }

    pub(crate) fn lseek(&mut self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        let of = self.io_file(fd)?;
        let ino = of.ino;
        let pos = of.pos;
        let new = match &self.inode(ino).body {
            Body::File(f) => {
                let target: i128 = match whence {
                    Whence::Set => offset as i128,
                    Whence::Cur => pos as i128 + offset as i128,
                    Whence::End => f.size as i128 + offset as i128,
                    Whence::Data | Whence::Hole => {
                        if offset < 0 || offset as u64 >= f.size {
                            return Err(Errno::ENXIO);
                        }
                        let off = offset as u64;
                        let first = off / PAGE;
                        if whence == Whence::Data {
                            match f.pages.range(first..).next() {
                                Some((&p, _)) if p == first => off as i128,
                                Some((&p, _)) if p * PAGE < f.size => (p * PAGE) as i128,
                                _ => return Err(Errno::ENXIO),
                            }
                        } else {
                            let mut q = first;
                            for (&p, _) in f.pages.range(first..) {
                                if p != q {
                                    break;
                                }
                                q += 1;
                            }
                            if q == first {
                                off as i128
                            } else {
                                (q * PAGE).min(f.size) as i128
                            }
                        }
                    }
                };
                if target < 0 || target > FILE_SIZE_MAX as i128 {
                    return Err(Errno::EINVAL);
                }
                target as u64
            }
            Body::Dir(_) => {
                let target: i128 = match whence {
                    Whence::Set => offset as i128,
                    Whence::Cur => pos as i128 + offset as i128,
                    _ => return Err(Errno::EINVAL),
                };
                if target < 0 || target > i64::MAX as i128 {
                    return Err(Errno::EINVAL);
                }
                target as u64
            }
            Body::Symlink(_) | Body::Special(..) => unreachable!("model: a descriptor on a symlink or special file"),
        };
        self.set_pos(fd, new);
        Ok(new)
    }

    /// Truncate a regular file (size already validated), taking its
    /// privileges away in the same change (which is then a change of
    /// attributes, a commit point of an fsync-atomic file, as the engine's
    /// single setattr commit).
    fn set_size(&mut self, now: TimeSpec, ino: u64, size: u64) -> FsResult<()> {
        if size > FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        self.data_change(ino);
        self.file_mut(ino).truncate(size);
        self.inode_mut(ino).touch_mc(now);
        if self.drop_privileges(now, ino, PrivilegeDrop::Modify) {
            self.commit_point(ino);
        }
        Ok(())
    }

    /// Take away what `why` by the caller takes from `ino` in Linux: the
    /// set-ID bits `perm::dropped_bits` names and, from anything but a
    /// directory, the `security.capability` attribute (the engine's
    /// `Ferrite::setattr_as_locked`). When anything goes it is a change of
    /// attributes: ctime is now and the inode's state is committed; true
    /// then.
    fn drop_privileges(&mut self, now: TimeSpec, ino: u64, why: PrivilegeDrop) -> bool {
        let bits = perm::dropped_bits(&self.creds, &self.owner(ino), why);
        let i = self.inode_mut(ino);
        let capability = i.kind() != FileType::Directory && i.xattrs.remove(perm::CAPABILITY_XATTR).is_some();
        if let Some(b) = bits {
            i.perm = b;
        }
        if bits.is_none() && !capability {
            return false;
        }
        i.ctime = now;
        self.commit_point(ino);
        true
    }

    pub(crate) fn ftruncate(&mut self, now: TimeSpec, fd: Fd, size: u64) -> FsResult<()> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let of = self.io_file(fd)?;
        let ino = of.ino;
        if !of.flags.write || self.inode(ino).kind() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        self.set_size(now, ino, size)
    }

    /// fsync and fdatasync: a commit point of a regular file.
    pub(crate) fn fsync(&mut self, fd: Fd) -> FsResult<()> {
        let ino = self.io_file(fd)?.ino;
        self.commit_point(ino);
        Ok(())
    }

    pub(crate) fn fallocate(
        &mut self,
        now: TimeSpec,
        fd: Fd,
        mode: FallocateMode,
        offset: u64,
        len: u64,
    ) -> FsResult<()> {
        let of = self.io_file(fd)?.clone();
        if len == 0 || offset > LOFF_MAX || len > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        if !of.flags.write {
            return Err(Errno::EBADF);
        }
        let ino = of.ino;
        let Body::File(f) = &self.inode(ino).body else {
            return Err(Errno::EISDIR);
        };
        if offset.checked_add(len).filter(|&end| end <= FILE_SIZE_MAX).is_none() {
            return Err(Errno::EFBIG);
        }
        if mode == FallocateMode::PunchHole {
            // Nothing at or past the end of file changes (as ext4 and the
            // engine; tmpfs would still update the times).
            // Privileges go even when nothing else changes (as tmpfs).
            let past_end = offset >= f.size;
            self.drop_privileges(now, ino, PrivilegeDrop::Modify);
            if past_end {
                return Ok(());
            }
            self.data_change(ino);
            self.file_mut(ino).punch(offset, offset + len);
            self.inode_mut(ino).touch_mc(now);
            return Ok(());
        }
        let missing_pages = f.missing_pages(offset, len);
        self.drop_privileges(now, ino, PrivilegeDrop::Modify);
        if missing_pages > self.free_pages() {
            return Err(Errno::ENOSPC);
        }
        self.data_change(ino);
        let f = self.file_mut(ino);
        match mode {
            FallocateMode::ZeroRange | FallocateMode::ZeroRangeKeepSize => f.zero_range(offset, offset + len),
            FallocateMode::Default | FallocateMode::KeepSize | FallocateMode::PunchHole => f.allocate(offset, len),
        }
        if matches!(mode, FallocateMode::Default | FallocateMode::ZeroRange) {
            f.size = f.size.max(offset + len);
        }
        self.inode_mut(ino).touch_mc(now);
        Ok(())
    }

    pub(crate) fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        Ok(self.stat_of(self.file_of(fd)?.ino))
    }

    // ----- credentials, starting points, permissions ----------------------

    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    pub fn set_credentials(&mut self, c: Credentials) {
        self.creds = c;
    }

    fn owner(&self, ino: u64) -> Owner {
        let i = self.inode(ino);
        Owner { kind: i.kind(), perm: i.perm, uid: i.uid, gid: i.gid }
    }

    fn may(&self, ino: u64, mask: u32) -> FsResult<()> {
        perm::check(&self.creds, &self.owner(ino), mask)
    }

    fn may_search(&self, dir: u64) -> FsResult<()> {
        self.may(dir, perm::EXEC)
    }

    /// may_create: ENOENT in a removed directory, EACCES without write and
    /// search permission.
    fn may_create(&self, dir: u64) -> FsResult<()> {
        if self.inode(dir).links == 0 {
            return Err(Errno::ENOENT);
        }
        self.may(dir, perm::WRITE | perm::EXEC)
    }

    /// may_delete's permission part: EACCES, then the sticky rule (EPERM).
    fn may_delete(&self, dir: u64, victim: u64) -> FsResult<()> {
        self.may(dir, perm::WRITE | perm::EXEC)?;
        if perm::sticky_refuses(&self.creds, &self.owner(dir), &self.owner(victim)) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// The inode a `dirfd` names (the current directory for AT_FDCWD).
    fn dir_of(&self, dirfd: Fd) -> FsResult<u64> {
        if dirfd == AT_FDCWD {
            return Ok(self.cwd);
        }
        Ok(self.file_of(dirfd)?.ino)
    }

    /// Where a path starts: the root for an absolute path (`dirfd`
    /// ignored), else the directory `dirfd` names (EBADF, ENOTDIR).
    fn start(&self, dirfd: Fd, path: &[u8]) -> FsResult<u64> {
        if path.first() == Some(&b'/') {
            return Ok(ROOT);
        }
        let d = self.dir_of(dirfd)?;
        if !self.is_dir(d) {
            return Err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    /// The existing inode `path` names from `dirfd`; AT_EMPTY_PATH with an
    /// empty path names `dirfd` itself; AT_SYMLINK_NOFOLLOW leaves a final
    /// symlink alone.
    fn target_at(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<u64> {
        if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
            return self.dir_of(dirfd);
        }
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        self.resolve(start, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0)
    }

    pub(crate) fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT)?;
        Ok(self.stat_of(self.target_at(dirfd, path, flags)?))
    }

    pub(crate) fn truncate(&mut self, now: TimeSpec, path: &[u8], size: u64) -> FsResult<()> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.target_at(AT_FDCWD, path, 0)?;
        if self.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        // Linux's vfs_truncate: EINVAL for anything but a regular file.
        if self.inode(ino).kind().is_special() {
            return Err(Errno::EINVAL);
        }
        self.may(ino, perm::WRITE)?;
        self.set_size(now, ino, size)
    }

    fn chmod_ino(&mut self, now: TimeSpec, ino: u64, perm: u32) -> FsResult<()> {
        let bits = perm::chmod_bits(&self.creds, &self.owner(ino), perm)?;
        self.commit_point(ino);
        let i = self.inode_mut(ino);
        i.perm = bits;
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn fchmodat(&mut self, now: TimeSpec, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let ino = self.target_at(dirfd, path, flags)?;
        if self.inode(ino).kind() == FileType::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        self.chmod_ino(now, ino, perm)
    }

    pub(crate) fn fchmod(&mut self, now: TimeSpec, fd: Fd, perm: u32) -> FsResult<()> {
        let ino = self.io_file(fd)?.ino;
        self.chmod_ino(now, ino, perm)
    }

    fn chown_ino(&mut self, now: TimeSpec, ino: u64, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        perm::may_chown(&self.creds, &self.owner(ino), uid, gid)?;
        self.commit_point(ino);
        self.drop_privileges(now, ino, PrivilegeDrop::Chown);
        let i = self.inode_mut(ino);
        if let Some(u) = uid {
            i.uid = u;
        }
        if let Some(g) = gid {
            i.gid = g;
        }
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn fchownat(
        &mut self,
        now: TimeSpec,
        dirfd: Fd,
        path: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        flags: i32,
    ) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let ino = self.target_at(dirfd, path, flags)?;
        self.chown_ino(now, ino, uid, gid)
    }

    pub(crate) fn fchown(&mut self, now: TimeSpec, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        let ino = self.io_file(fd)?.ino;
        self.chown_ino(now, ino, uid, gid)
    }

    fn utimens_ino(&mut self, now: TimeSpec, ino: u64, atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        if !valid_time(atime) || !valid_time(mtime) {
            return Err(Errno::EINVAL);
        }
        let both_now = atime == TimeSet::Now && mtime == TimeSet::Now;
        perm::may_set_times(&self.creds, &self.owner(ino), both_now)?;
        self.commit_point(ino);
        let pick = |t: TimeSet, old: TimeSpec| match t {
            TimeSet::Omit => old,
            TimeSet::Now => now,
            TimeSet::At(ts) => ts,
        };
        let i = self.inode_mut(ino);
        i.atime = pick(atime, i.atime);
        i.mtime = pick(mtime, i.mtime);
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn utimensat(
        &mut self,
        now: TimeSpec,
        dirfd: Fd,
        path: &[u8],
        atime: TimeSet,
        mtime: TimeSet,
        flags: i32,
    ) -> FsResult<()> {
        if atime == TimeSet::Omit && mtime == TimeSet::Omit {
            // Linux utimensat: "nothing to do, we must not even check the path".
            return Ok(());
        }
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let ino = self.target_at(dirfd, path, flags)?;
        self.utimens_ino(now, ino, atime, mtime)
    }

    pub(crate) fn futimens(&mut self, now: TimeSpec, fd: Fd, atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        if atime == TimeSet::Omit && mtime == TimeSet::Omit {
            return Ok(()); // Linux: before the descriptor is looked at
        }
        let ino = self.io_file(fd)?.ino;
        self.utimens_ino(now, ino, atime, mtime)
    }

    pub(crate) fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()> {
        if mode & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        check_flags(flags, libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let ino = self.target_at(dirfd, path, flags)?;
        if mode == 0 {
            return Ok(());
        }
        self.may(ino, mode)
    }

    pub(crate) fn mkdir(&mut self, now: TimeSpec, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()> {
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        let (dir, name) = self.create_target(start, path, true)?;
        if self.free_inodes() == 0 {
            return Err(Errno::ENOSPC);
        }
        let body = Body::Dir(DirData { entries: BTreeMap::new(), next_seq: 1, parent: dir });
        // vfs_mkdir keeps only the permission and sticky bits.
        let ino = self.new_inode(dir, body, perm & 0o1777, now);
        self.insert_entry(dir, name, ino);
        self.inode_mut(dir).touch_mc(now);
        Ok(())
    }

    pub(crate) fn unlinkat(&mut self, now: TimeSpec, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_REMOVEDIR)?;
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        if flags & libc::AT_REMOVEDIR != 0 {
            self.rmdir(now, start, path)
        } else {
            self.unlink(now, start, path)
        }
    }

    fn rmdir(&mut self, now: TimeSpec, start: u64, path: &[u8]) -> FsResult<()> {
        let (dir, last, _slash) = self.walk(start, path, &mut 0)?;
        let name = match last {
            Last::DotDot => return Err(Errno::ENOTEMPTY),
            Last::Dot => return Err(Errno::EINVAL),
            Last::Root => return Err(Errno::EBUSY),
            Last::Name(n) => n,
        };
        self.check_name_in(dir, &name)?;
        let ino = self.lookup(dir, &name).ok_or(Errno::ENOENT)?;
        self.may_delete(dir, ino)?;
        if !self.is_dir(ino) {
            return Err(Errno::ENOTDIR);
        }
        if !self.is_empty_dir(ino) {
            return Err(Errno::ENOTEMPTY);
        }
        self.remove_entry(dir, &name);
        self.inode_mut(dir).touch_mc(now);
        self.drop_link(ino, now);
        Ok(())
    }

    fn unlink(&mut self, now: TimeSpec, start: u64, path: &[u8]) -> FsResult<()> {
        let (dir, last, slash) = self.walk(start, path, &mut 0)?;
        let Last::Name(name) = last else {
            return Err(Errno::EISDIR);
        };
        self.check_name_in(dir, &name)?;
        let ino = self.lookup(dir, &name).ok_or(Errno::ENOENT)?;
        if slash {
            return Err(if self.is_dir(ino) { Errno::EISDIR } else { Errno::ENOTDIR });
        }
        self.may_delete(dir, ino)?;
        if self.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        self.remove_entry(dir, &name);
        self.inode_mut(dir).touch_mc(now);
        self.drop_link(ino, now);
        Ok(())
    }

    pub(crate) fn rename(
        &mut self,
        now: TimeSpec,
        olddirfd: Fd,
        from: &[u8],
        newdirfd: Fd,
        to: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        check_path(from)?;
        check_path(to)?;
        let ostart = self.start(olddirfd, from)?;
        let (odir, olast, oslash) = self.walk(ostart, from, &mut 0)?;
        let nstart = self.start(newdirfd, to)?;
        let (ndir, nlast, nslash) = self.walk(nstart, to, &mut 0)?;
        // The source must exist (checked before the "." / ".." / root rule).
        if let Last::Name(n) = &olast {
            self.check_name_in(odir, n)?;
            self.lookup(odir, n).ok_or(Errno::ENOENT)?;
        }
        let (Last::Name(oname), Last::Name(nname)) = (olast, nlast) else {
            return Err(Errno::EBUSY);
        };
        let src = self.lookup(odir, &oname).expect("checked above");
        self.check_name_in(ndir, &nname)?;
        let tgt = self.lookup(ndir, &nname);
        let exchange = flags == RenameFlags::Exchange;
        if flags == RenameFlags::NoReplace && tgt.is_some() {
            return Err(Errno::EEXIST);
        }
        if exchange {
            let Some(t) = tgt else {
                return Err(Errno::ENOENT);
            };
            if !self.is_dir(t) && nslash {
                return Err(Errno::ENOTDIR);
            }
        }
        let src_dir = self.is_dir(src);
        if !src_dir && (oslash || (!exchange && nslash)) {
            return Err(Errno::ENOTDIR);
        }
        // The source may not be an ancestor of the target...
        if src_dir && self.is_ancestor_or_self(src, ndir) {
            return Err(Errno::EINVAL);
        }
        // ... nor the target an ancestor of the source.
        if let Some(t) = tgt {
            if self.is_dir(t) && self.is_ancestor_or_self(t, odir) {
                return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
            }
        }
        if tgt == Some(src) {
            return Ok(());
        }
        // vfs_rename's permission checks: may_delete of the source, then
        // may_delete or may_create of the target, then write permission on
        // a directory that changes parent.
        self.may_delete(odir, src)?;
        match tgt {
            Some(t) => {
                self.may_delete(ndir, t)?;
                // may_delete's type checks come before the ".." check.
                if !exchange {
                    match (src_dir, self.is_dir(t)) {
                        (true, false) => return Err(Errno::ENOTDIR),
                        (false, true) => return Err(Errno::EISDIR),
                        _ => {}
                    }
                }
            }
            None => self.may_create(ndir)?,
        }
        if odir != ndir {
            if src_dir {
                self.may(src, perm::WRITE)?;
            }
            if let Some(t) = tgt.filter(|&t| exchange && self.is_dir(t)) {
                self.may(t, perm::WRITE)?;
            }
        }
        if exchange {
            let t = tgt.expect("checked above");
            self.dir_mut(odir).entries.get_mut(&oname).unwrap().ino = t;
            self.dir_mut(ndir).entries.get_mut(&nname).unwrap().ino = src;
            if src_dir {
                self.dir_mut(src).parent = ndir;
            }
            if self.is_dir(t) {
                self.dir_mut(t).parent = odir;
            }
            self.commit_point(src);
            self.commit_point(t);
            self.inode_mut(src).ctime = now;
            self.inode_mut(t).ctime = now;
        } else {
            if let Some(t) = tgt {
                let tgt_dir = self.is_dir(t);
                if src_dir && !tgt_dir {
                    return Err(Errno::ENOTDIR);
                }
                if !src_dir && tgt_dir {
                    return Err(Errno::EISDIR);
                }
                if tgt_dir && !self.is_empty_dir(t) {
                    return Err(Errno::ENOTEMPTY);
                }
                self.remove_entry(ndir, &nname);
                self.drop_link(t, now);
            }
            self.remove_entry(odir, &oname);
            self.insert_entry(ndir, nname, src);
            if src_dir {
                self.dir_mut(src).parent = ndir;
            }
            self.commit_point(src);
            self.inode_mut(src).ctime = now;
        }
        self.inode_mut(odir).touch_mc(now);
        self.inode_mut(ndir).touch_mc(now);
        Ok(())
    }

    pub(crate) fn link(
        &mut self,
        now: TimeSpec,
        olddirfd: Fd,
        existing: &[u8],
        newdirfd: Fd,
        new: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH)?;
        let empty = existing.is_empty() && flags & libc::AT_EMPTY_PATH != 0;
        if empty && !self.creds.is_root() {
            return Err(Errno::ENOENT); // needs CAP_DAC_READ_SEARCH
        }
        if !empty {
            check_path(existing)?;
        }
        check_path(new)?;
        let nofollow = if flags & libc::AT_SYMLINK_FOLLOW != 0 { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        let ino = self.target_at(olddirfd, existing, nofollow | (flags & libc::AT_EMPTY_PATH))?;
        let start = self.start(newdirfd, new)?;
        let (dir, name) = self.create_target(start, new, false)?;
        if self.is_dir(ino) {
            return Err(Errno::EPERM);
        }
        if self.inode(ino).links == 0 && !self.inode(ino).linkable {
            return Err(Errno::ENOENT);
        }
        if self.inode(ino).links >= LINK_MAX {
            return Err(Errno::EMLINK);
        }
        self.insert_entry(dir, name, ino);
        self.inode_mut(dir).touch_mc(now);
        self.commit_point(ino);
        let i = self.inode_mut(ino);
        i.links += 1;
        i.linkable = false;
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn symlink(&mut self, now: TimeSpec, target: &[u8], newdirfd: Fd, linkpath: &[u8]) -> FsResult<()> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        check_path(linkpath)?;
        let start = self.start(newdirfd, linkpath)?;
        let (dir, name) = self.create_target(start, linkpath, false)?;
        if self.free_inodes() == 0 || self.free_pages() == 0 {
            return Err(Errno::ENOSPC);
        }
        let ino = self.new_inode(dir, Body::Symlink(target.to_vec()), 0o777, now);
        self.insert_entry(dir, name, ino);
        self.inode_mut(dir).touch_mc(now);
        Ok(())
    }

    pub(crate) fn mknod(&mut self, now: TimeSpec, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        // Linux's may_mknod checks the type before the path.
        let body = match FileType::from_mode(mode) {
            _ if mode & libc::S_IFMT == 0 => Body::File(FileData::default()),
            Some(FileType::Regular) => Body::File(FileData::default()),
            Some(FileType::Directory) => return Err(Errno::EPERM),
            Some(FileType::Symlink) | None => return Err(Errno::EINVAL),
            Some(kind) => Body::Special(kind, if kind.has_rdev() { rdev } else { 0 }),
        };
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        let (dir, name) = self.create_target(start, path, false)?;
        // vfs_mknod: device nodes need CAP_MKNOD (but for a whiteout).
        if let Body::Special(k, rdev) = body {
            perm::may_mknod(&self.creds, k, rdev)?;
        }
        if self.free_inodes() == 0 {
            return Err(Errno::ENOSPC);
        }
        let ino = self.new_inode(dir, body, mode & 0o7777, now);
        self.insert_entry(dir, name, ino);
        self.inode_mut(dir).touch_mc(now);
        Ok(())
    }

    pub(crate) fn readlink(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>> {
        if path.is_empty() {
            // readlinkat(fd, ""): the symlink an O_PATH descriptor names.
            let ino = self.dir_of(dirfd)?;
            return match &self.inode(ino).body {
                Body::Symlink(t) => Ok(t.clone()),
                _ => Err(Errno::ENOENT),
            };
        }
        let ino = self.target_at(dirfd, path, libc::AT_SYMLINK_NOFOLLOW)?;
        match &self.inode(ino).body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let ino = self.io_file(fd)?.ino;
        let inode = self.inode(ino);
        let Body::Dir(d) = &inode.body else {
            return Err(Errno::ENOTDIR);
        };
        if inode.links == 0 {
            // Linux: getdents on a removed directory (IS_DEADDIR).
            return Err(Errno::ENOENT);
        }
        let mut slots: Vec<(&Vec<u8>, &Slot)> = d.entries.iter().filter(|(_, s)| s.seq > cookie).collect();
        slots.sort_by_key(|(_, s)| s.seq);
        Ok(slots
            .into_iter()
            .take(max)
            .map(|(name, s)| DirEntry {
                name: name.clone(),
                ino: InodeNo(s.ino),
                kind: self.inode(s.ino).kind(),
                next_cookie: s.seq,
            })
            .collect())
    }

    // ----- current directory --------------------------------------------

    fn set_cwd(&mut self, ino: u64) -> FsResult<()> {
        if !self.is_dir(ino) {
            return Err(Errno::ENOTDIR);
        }
        self.may(ino, perm::EXEC)?;
        let old = std::mem::replace(&mut self.cwd, ino);
        self.maybe_drop(old);
        Ok(())
    }

    pub(crate) fn chdir(&mut self, path: &[u8]) -> FsResult<()> {
        let ino = self.target_at(AT_FDCWD, path, 0)?;
        self.set_cwd(ino)
    }

    pub(crate) fn fchdir(&mut self, fd: Fd) -> FsResult<()> {
        let ino = self.file_of(fd)?.ino;
        self.set_cwd(ino)
    }

    /// The absolute path of the current directory (ENOENT once removed).
    pub(crate) fn getcwd(&self) -> FsResult<Vec<u8>> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut d = self.cwd;
        if self.inode(d).links == 0 {
            return Err(Errno::ENOENT);
        }
        while d != ROOT {
            let p = self.parent_of(d);
            let name = self.dir(p).entries.iter().find(|(_, s)| s.ino == d).map(|(n, _)| n.as_slice());
            names.push(name.expect("model: a linked directory is named in its parent"));
            d = p;
        }
        if names.is_empty() {
            return Ok(b"/".to_vec());
        }
        let mut out = Vec::new();
        for n in names.iter().rev() {
            out.push(b'/');
            out.extend_from_slice(n);
        }
        Ok(out)
    }

    // ----- extended attributes ------------------------------------------

    /// Linux's xattr_permission (and the capability module for security.*):
    /// see `Session` in the engine.
    fn may_xattr(&self, ino: u64, name: &[u8], write: bool) -> FsResult<()> {
        if self.creds.is_root() {
            return Ok(());
        }
        if name.starts_with(b"trusted.") {
            return Err(if write { Errno::EPERM } else { Errno::ENODATA });
        }
        if name.starts_with(b"security.") || name.starts_with(b"system.") {
            return if write && name.starts_with(b"security.") { Err(Errno::EPERM) } else { Ok(()) };
        }
        let o = self.owner(ino);
        if name.starts_with(b"user.")
            && write
            && o.kind == FileType::Directory
            && o.perm & 0o1000 != 0
            && o.uid != self.creds.uid
        {
            return Err(Errno::EPERM);
        }
        self.may(ino, if write { perm::WRITE } else { perm::READ })
    }

    /// A stored namespace (user., trusted., security.); EINVAL for one of
    /// those prefixes alone (Linux's xattr_resolve_name), EOPNOTSUPP for the
    /// rest (system.* ACLs are not modeled).
    fn xattr_ns_ok(name: &[u8]) -> FsResult<()> {
        const PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
        if PREFIXES.iter().any(|p| name.starts_with(p) && name.len() > p.len()) {
            Ok(())
        } else if PREFIXES.contains(&name) {
            Err(Errno::EINVAL)
        } else {
            Err(Errno::EOPNOTSUPP)
        }
    }

    fn xattr_name_ok(name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.len() > NAME_MAX || name.contains(&0) {
            return Err(Errno::ERANGE);
        }
        Ok(())
    }

    pub(crate) fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>> {
        let ino = self.io_file(fd)?.ino;
        Self::xattr_name_ok(name)?;
        self.may_xattr(ino, name, false)?;
        Self::xattr_ns_ok(name)?;
        if name == FileMode::XATTR {
            // The consistency mode: answered, not stored (regular files only).
            let i = self.inode(ino);
            return match i.body {
                Body::File(_) => Ok(i.mode.as_str().as_bytes().to_vec()),
                _ => Err(Errno::ENODATA),
            };
        }
        self.inode(ino).xattrs.get(name).cloned().ok_or(Errno::ENODATA)
    }

    pub(crate) fn fsetxattr(
        &mut self,
        now: TimeSpec,
        fd: Fd,
        name: &[u8],
        value: &[u8],
        mode: XattrSetMode,
    ) -> FsResult<()> {
        let ino = self.io_file(fd)?.ino;
        Self::xattr_name_ok(name)?;
        self.may_xattr(ino, name, true)?;
        Self::xattr_ns_ok(name)?;
        if name == FileMode::XATTR {
            // Sets the consistency mode (any set mode flag): a commit point,
            // and a change of ctime only if the mode changes.
            let mode = FileMode::parse(value).ok_or(Errno::EINVAL)?;
            if self.inode(ino).kind() != FileType::Regular {
                return Err(Errno::EINVAL);
            }
            self.commit_point(ino);
            let i = self.inode_mut(ino);
            if i.mode != mode {
                i.mode = mode;
                i.ctime = now;
            }
            return Ok(());
        }
        if name.len() + value.len() > ferrite::format::XATTR_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        let exists = self.inode(ino).xattrs.contains_key(name);
        match (mode, exists) {
            (XattrSetMode::Create, true) => return Err(Errno::EEXIST),
            (XattrSetMode::Replace, false) => return Err(Errno::ENODATA),
            _ => {}
        }
        self.commit_point(ino);
        let i = self.inode_mut(ino);
        i.xattrs.insert(name.to_vec(), value.to_vec());
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>> {
        let ino = self.io_file(fd)?.ino;
        let root = self.creds.is_root();
        Ok(self.inode(ino).xattrs.keys().filter(|n| root || !n.starts_with(b"trusted.")).cloned().collect())
    }

    pub(crate) fn fremovexattr(&mut self, now: TimeSpec, fd: Fd, name: &[u8]) -> FsResult<()> {
        let ino = self.io_file(fd)?.ino;
        Self::xattr_name_ok(name)?;
        self.may_xattr(ino, name, true)?;
        Self::xattr_ns_ok(name)?;
        if name == FileMode::XATTR {
            // A file always has a mode (set "strict" instead).
            return Err(Errno::EINVAL);
        }
        let i = self.inode_mut(ino);
        i.xattrs.remove(name).ok_or(Errno::ENODATA)?;
        i.committed = None;
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn statfs(&self) -> StatFs {
        StatFs {
            block_size: PAGE as u32,
            blocks: self.total_pages,
            blocks_free: self.free_pages(),
            blocks_avail: self.free_pages(),
            files: self.total_inodes,
            files_free: self.free_inodes(),
            name_max: NAME_MAX as u32,
        }
    }

    // ----- whole-tree view -----------------------------------------------

    /// Every path reachable from the root with its inode, in path order.
    pub(crate) fn paths(&self) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut stack = vec![(b"/".to_vec(), ROOT)];
        while let Some((path, ino)) = stack.pop() {
            if let Body::Dir(d) = &self.inode(ino).body {
                for (name, slot) in &d.entries {
                    let mut p = path.clone();
                    if p != b"/" {
                        p.push(b'/');
                    }
                    p.extend_from_slice(name);
                    stack.push((p, slot.ino));
                }
            }
            out.push((path, ino));
        }
        out.sort();
        out
    }

    /// File content (regular files) or target (symlinks) of an inode.
    pub(crate) fn data_of(&self, ino: u64) -> (Vec<u8>, Vec<u8>) {
        match &self.inode(ino).body {
            Body::File(f) => (f.content(), Vec::new()),
            Body::Symlink(t) => (Vec::new(), t.clone()),
            Body::Dir(_) | Body::Special(..) => (Vec::new(), Vec::new()),
        }
    }
}
