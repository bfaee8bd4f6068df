//! `Session`, the value a front end (a library user, the LD_PRELOAD
//! library) holds per process: its descriptor table, current directory and
//! credentials, implementing `PathFs` with Linux's rules about which call
//! follows which link and which permission each call needs (`perm.rs`),
//! over path resolution (`path.rs`) and the inode-level operations in
//! `dir.rs`, `attr.rs`, `xattr.rs` and `file.rs`.

use crate::dir::NodeSpec;
use crate::fs::{Ferrite, FormatOptions, MountOptions, PoolError};
use crate::inode::Inode;
use crate::path::{
    check_path, may, may_create, may_delete, owner_of, stale, Resolved, RACE_RETRIES_MAX, RESOLVE_AGAIN,
};
use crate::perm::{self, PrivilegeDrop};
use crate::types::{
    limits, Credentials, DirEntry, Errno, FallocateMode, Fd, FileType, FsResult, InodeNo, OpenFlags, PathFs,
    RenameFlags, SetAttr, Stat, StatFs, TimeSet, Whence, XattrSetMode, AT_FDCWD,
};
use crate::Map;
use ferrite_pmem::Pmem;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// An open file description: what `open` made, shared by the descriptors
/// `dup` makes from it (position and status flags).
pub struct OpenFile {
    pub inode: Arc<Inode>,
    /// The flags it was opened with, creation flags removed
    /// (`OpenFlags::status`); O_APPEND is in `append`, which F_SETFL changes.
    pub flags: OpenFlags,
    append: AtomicBool,
    pub pos: Mutex<u64>,
    /// How the description's calls used its offset (`OFFSET_*`): a
    /// front end that must decide whether another process needs to share
    /// the offset asks `offset_only_explicit`.
    offset_use: AtomicU8,
    /// Descriptors referring to it: the last close releases the inode.
    descriptors: AtomicUsize,
}

/// No read, write or seek yet.
const OFFSET_UNUSED: u8 = 0;
/// Only reads and writes at explicit offsets (pread, pwrite).
const OFFSET_EXPLICIT: u8 = 1;
/// A read, write or seek at the description's offset.
const OFFSET_MOVED: u8 = 2;

impl OpenFile {
    fn new(inode: Arc<Inode>, flags: OpenFlags) -> OpenFile {
        OpenFile {
            inode,
            flags: flags.status(),
            append: AtomicBool::new(flags.append),
            pos: Mutex::new(0),
            offset_use: AtomicU8::new(OFFSET_UNUSED),
            descriptors: AtomicUsize::new(0),
        }
    }

    /// Whether every read and write so far was at an explicit offset
    /// (pread, pwrite), and there was at least one: what the description's
    /// offset holds matters to no call made through it so far (a database
    /// file). False for a description not used yet.
    pub fn offset_only_explicit(&self) -> bool {
        self.offset_use.load(Ordering::Relaxed) == OFFSET_EXPLICIT
    }

    /// A read or write at an explicit offset. A load first: the common
    /// case stores nothing, so threads sharing the description do not
    /// bounce its line.
    fn note_explicit_offset(&self) {
        if self.offset_use.load(Ordering::Relaxed) == OFFSET_UNUSED {
            let _ =
                self.offset_use.compare_exchange(OFFSET_UNUSED, OFFSET_EXPLICIT, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A read, write or seek at the description's offset.
    fn note_offset_moved(&self) {
        if self.offset_use.load(Ordering::Relaxed) != OFFSET_MOVED {
            self.offset_use.store(OFFSET_MOVED, Ordering::Relaxed);
        }
    }

    pub fn append(&self) -> bool {
        self.append.load(Ordering::Relaxed)
    }

    /// F_GETFL.
    pub fn status(&self) -> OpenFlags {
        OpenFlags { append: self.append(), ..self.flags }
    }
}

/// One descriptor: the description it refers to and its own flag.
#[derive(Clone)]
struct FdEntry {
    file: Arc<OpenFile>,
    cloexec: bool,
}

const FD_SHARDS: usize = 16;

/// Numbers a thread takes from a table's counter at a time. A thread picks
/// its descriptors' numbers from its own block, and a block's numbers all
/// live in one shard: two threads opening and closing files each keep to
/// their own counter and their own shard instead of passing the counter's
/// line and every shard's lock back and forth on every call.
const FD_BLOCK: u64 = 64;

/// Tables a thread remembers a block for (a thread seldom uses more).
const FD_BLOCKS_HELD: usize = 4;

/// Identity of each table, for the threads' block caches.
static FD_TABLE_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The blocks this thread holds: (table id, next number, end of block);
    /// the most recently used first.
    static FD_BLOCKS: std::cell::Cell<[(u64, u64, u64); FD_BLOCKS_HELD]> =
        const { std::cell::Cell::new([(0, 0, 0); FD_BLOCKS_HELD]) };
}

/// A descriptor table. Numbers it picks start at 3 and are never reused
/// while it lives; a front end may also put a description at a number of
/// its choosing (`install`: dup2/dup3, `Session::openat_fd`), which is how
/// an LD_PRELOAD library makes Ferrite descriptors real kernel descriptor
/// numbers (it reserves the number in the kernel, e.g. by opening
/// /dev/null, and installs the Ferrite file there). Numbers it picks skip
/// numbers already installed.
pub struct FdTable {
    /// This table's identity in the threads' block caches.
    id: u64,
    /// Start of the next block of numbers a thread may take.
    next: AtomicU64,
    shards: Vec<crate::alloc::Padded<Mutex<Map<u64, FdEntry>>>>,
}

impl Default for FdTable {
    fn default() -> Self {
        FdTable {
            id: FD_TABLE_IDS.fetch_add(1, Ordering::Relaxed),
            next: AtomicU64::new(0),
            shards: (0..FD_SHARDS).map(|_| crate::alloc::Padded(Mutex::new(Map::default()))).collect(),
        }
    }
}

impl FdTable {
    fn shard(&self, n: u64) -> &Mutex<Map<u64, FdEntry>> {
        &self.shards[(n / FD_BLOCK) as usize % FD_SHARDS]
    }

    /// The next number from this thread's block, taking a new block when
    /// the thread has none for this table or has used it up. One thread
    /// alone gets 3, 4, 5, ... as from a single counter.
    fn take_number(&self) -> u64 {
        FD_BLOCKS.with(|held| {
            let mut blocks = held.get();
            let at = blocks.iter().position(|b| b.0 == self.id && b.1 < b.2);
            let (n, end) = match at {
                Some(k) => {
                    let (_, n, end) = blocks[k];
                    blocks.copy_within(0..k, 1);
                    (n, end)
                }
                None => {
                    // Blocks are aligned, so that each lies in one shard;
                    // the first skips 0, 1 and 2.
                    let start = self.next.fetch_add(FD_BLOCK, Ordering::Relaxed);
                    blocks.copy_within(0..FD_BLOCKS_HELD - 1, 1);
                    (start.max(3), start + FD_BLOCK)
                }
            };
            blocks[0] = (self.id, n + 1, end);
            held.set(blocks);
            n
        })
    }

    fn insert(&self, e: FdEntry) -> Fd {
        e.file.descriptors.fetch_add(1, Ordering::Relaxed);
        loop {
            let n = self.take_number();
            if Fd(n) == AT_FDCWD {
                continue;
            }
            let mut shard = self.shard(n).lock();
            if let std::collections::hash_map::Entry::Vacant(v) = shard.entry(n) {
                v.insert(e);
                return Fd(n);
            }
        }
    }

    /// Put `e` at number `fd`; returns what was there.
    fn install(&self, fd: Fd, e: FdEntry) -> FsResult<Option<FdEntry>> {
        if fd == AT_FDCWD {
            return Err(Errno::EBADF);
        }
        e.file.descriptors.fetch_add(1, Ordering::Relaxed);
        Ok(self.shard(fd.0).lock().insert(fd.0, e))
    }

    fn get(&self, fd: Fd) -> FsResult<FdEntry> {
        self.shard(fd.0).lock().get(&fd.0).cloned().ok_or(Errno::EBADF)
    }

    /// `f` of the description at `fd`, under its shard's lock: `f` takes a
    /// reference only if it needs one (two locked instructions fewer than
    /// `get` when it does not). For checks that take nanoseconds: the
    /// shard's other descriptors wait meanwhile.
    fn with<R>(&self, fd: Fd, f: impl FnOnce(&Arc<OpenFile>) -> R) -> FsResult<R> {
        self.shard(fd.0).lock().get(&fd.0).map(|e| f(&e.file)).ok_or(Errno::EBADF)
    }

    fn set_cloexec(&self, fd: Fd, on: bool) -> FsResult<()> {
        self.shard(fd.0).lock().get_mut(&fd.0).map(|e| e.cloexec = on).ok_or(Errno::EBADF)
    }

    fn remove(&self, fd: Fd) -> FsResult<FdEntry> {
        self.shard(fd.0).lock().remove(&fd.0).ok_or(Errno::EBADF)
    }

    fn drain(&self) -> Vec<FdEntry> {
        self.shards.iter().flat_map(|s| s.lock().drain().map(|(_, e)| e).collect::<Vec<_>>()).collect()
    }

    pub fn open_count(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// One process's view of a mounted file system: a descriptor table, a
/// current directory and credentials over a shared engine. It implements
/// `PathFs`; a front end makes one per process (an LD_PRELOAD library) or
/// one for the whole program (a library user), and several sessions may
/// share one `Arc<Ferrite>`. Inode-level calls of the engine are reachable
/// through `Deref`.
///
/// The current directory counts as an open handle (a removed directory
/// stays usable as a starting point, where every lookup finds nothing, as
/// Linux). Dropping a session leaves its descriptors' open counts taken
/// until the engine is unmounted (a crash drops everything anyway); call
/// `end` to close them and keep the engine mounted, or `unmount`.
pub struct Session {
    fs: Arc<Ferrite>,
    fds: FdTable,
    cwd: Mutex<Arc<Inode>>,
    creds: RwLock<Credentials>,
    /// Bumped by every `set_credentials`: a thread's cached copy of the
    /// credentials (`CREDS_SEEN`) is good while this has not moved, so a
    /// call reads one shared word instead of taking the lock (two writes
    /// to a line every thread of the process shares).
    creds_gen: crate::alloc::Padded<std::sync::atomic::AtomicU64>,
    /// Which session a thread's cached credentials belong to.
    id: u64,
}

/// Sessions made so far: each one's `id`.
static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The credentials this thread last read: (session id, generation, credentials).
    static CREDS_SEEN: std::cell::RefCell<Option<(u64, u64, Credentials)>> = const { std::cell::RefCell::new(None) };
}

impl std::ops::Deref for Session {
    type Target = Ferrite;
    fn deref(&self) -> &Ferrite {
        &self.fs
    }
}

impl Session {
    /// A session on a mounted engine: no descriptors, the root as current
    /// directory, root credentials.
    pub fn new(fs: Arc<Ferrite>) -> Session {
        let root = fs.inode(InodeNo::ROOT).expect("a mounted file system has a root");
        fs.open_inode(&root).expect("the root is alive");
        Session {
            fs,
            fds: FdTable::default(),
            cwd: Mutex::new(root),
            creds: RwLock::new(Credentials::root()),
            creds_gen: crate::alloc::Padded(std::sync::atomic::AtomicU64::new(0)),
            id: SESSIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `Ferrite::format` and a session on it.
    pub fn format(pmem: Pmem, opts: &FormatOptions) -> Result<Session, PoolError> {
        Ok(Session::new(Arc::new(Ferrite::format(pmem, opts)?)))
    }

    /// `Ferrite::mount` and a session on it.
    pub fn mount(pmem: Pmem, opts: &MountOptions) -> Result<Session, PoolError> {
        Ok(Session::new(Arc::new(Ferrite::mount(pmem, opts)?)))
    }

    pub fn engine(&self) -> &Arc<Ferrite> {
        &self.fs
    }

    /// Close every descriptor and drop the current directory's handle,
    /// leaving the engine mounted (a process of a preload library exits).
    pub fn end(self) {
        self.close_all();
        let cwd = self.cwd.lock().clone();
        self.fs.release_ino(&cwd);
    }

    /// Close this session's descriptors (releasing their open counts, so
    /// unlinked files are freed), then unmount the engine cleanly. EBUSY
    /// (with the descriptors closed) if another session still holds it.
    pub fn unmount(self) -> FsResult<()> {
        let fs = self.fs.clone();
        self.end();
        match Arc::try_unwrap(fs) {
            Ok(fs) => fs.unmount(),
            Err(_) => Err(Errno::EBUSY),
        }
    }

    /// Close every descriptor (as a process exit does).
    pub fn close_all(&self) {
        for e in self.fds.drain() {
            self.release(e);
        }
    }

    fn release(&self, e: FdEntry) {
        if e.file.descriptors.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.fs.release_ino(&e.file.inode);
        }
    }

    pub fn credentials(&self) -> Credentials {
        let gen = self.creds_gen.load(Ordering::Acquire);
        CREDS_SEEN
            .try_with(|seen| {
                let mut seen = seen.borrow_mut();
                if let Some((id, g, c)) = seen.as_ref() {
                    if *id == self.id && *g == gen {
                        return c.clone();
                    }
                }
                // Read after the generation: if a change lands in between,
                // the copy is newer than its tag and the next call reads
                // again.
                let c = self.creds.read().clone();
                *seen = Some((self.id, gen, c.clone()));
                c
            })
            // The thread's locals are gone (a call made at process exit,
            // after them): read the credentials themselves.
            .unwrap_or_else(|_| self.creds.read().clone())
    }

    /// The credentials every later call is made with.
    pub fn set_credentials(&self, c: Credentials) {
        let mut w = self.creds.write();
        *w = c;
        self.creds_gen.fetch_add(1, Ordering::Release);
    }

    /// `faccessat` checked as `c` rather than as the session's identity:
    /// Linux's `access` (without `AT_EACCESS`) asks with the process's real
    /// ids, which a front end that tracks a set-ID program's two identities
    /// passes here. The whole path is resolved as `c` too, as the kernel
    /// does.
    pub fn faccessat_as(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32, c: &Credentials) -> FsResult<()> {
        if mode & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        check_flags(flags, libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        self.on_existing_at(
            dirfd,
            path,
            flags,
            c,
            |i| {
                if mode == 0 {
                    Ok(())
                } else {
                    perm::check(c, &owner_of(i), mode)
                }
            },
        )
    }

    pub fn open_file(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        Ok(self.fds.get(fd)?.file)
    }

    /// The inode number an open descriptor refers to.
    pub fn fd_inode(&self, fd: Fd) -> FsResult<InodeNo> {
        Ok(self.fds.get(fd)?.file.inode.ino)
    }

    /// Sub-Zero's `peek` on a descriptor open for reading (EBADF
    /// otherwise): see `Ferrite::peek`. The view outlives the descriptor.
    pub fn peek(&self, fd: Fd, offset: u64, len: u64) -> FsResult<crate::Peek> {
        let f = self.readable(fd)?;
        self.fs.peek(&f.inode, offset, len)
    }

    /// A zero-copy mapping for `mmap` (read-only, or private and
    /// writable) of a descriptor open for reading: see `Ferrite::map_view`.
    pub fn map_view(&self, fd: Fd, offset: u64, len: u64, kind: crate::MapKind) -> FsResult<crate::Peek> {
        let f = self.readable(fd)?;
        self.fs.map_view(&f.inode, offset, len, kind)
    }

    /// Release a view made by `peek` or `map_view`.
    pub fn unpeek(&self, id: crate::ViewId) -> FsResult<()> {
        self.fs.unpeek(id)
    }

    /// A patch buffer: see `Ferrite::patch_buffer`.
    pub fn patch_buffer(&self, len: u64) -> FsResult<crate::PatchBuffer> {
        self.fs.patch_buffer(len)
    }

    /// Sub-Zero's `patch` on a descriptor open for writing (EBADF
    /// otherwise): see `Ferrite::patch`. An O_SYNC or O_DSYNC descriptor
    /// makes it a commit point, as a write would.
    pub fn patch(&self, fd: Fd, offset: u64, id: crate::BufferId, len: u64) -> FsResult<()> {
        let f = self.writable(fd)?;
        if len > 0 {
            self.fs.drop_privileges(&f.inode, || self.credentials())?;
        }
        self.fs.patch(&f.inode, offset, id, len)?;
        if f.flags.sync || f.flags.dsync {
            self.fs.fsync_inode(&f.inode, !f.flags.sync)?;
        }
        Ok(())
    }

    /// Give back a patch buffer that will not be patched.
    pub fn free_buffer(&self, id: crate::BufferId) -> FsResult<()> {
        self.fs.free_buffer(id)
    }

    pub fn open_descriptors(&self) -> usize {
        self.fds.open_count()
    }

    /// openat, with the new descriptor at number `fd` (replacing, as dup2,
    /// whatever was there): for a front end whose descriptor numbers must
    /// be the kernel's.
    pub fn openat_fd(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32, fd: Fd) -> FsResult<Fd> {
        let file = self.open_description(dirfd, path, flags, perm)?;
        if let Some(old) = self.fds.install(fd, FdEntry { file: file.clone(), cloexec: flags.cloexec })? {
            self.release(old);
        }
        Ok(fd)
    }

    // ---- helpers -----------------------------------------------------------

    /// Where a path starts: the root for an absolute path (whatever
    /// `dirfd` is), else the current directory (AT_FDCWD) or the directory
    /// `dirfd` names (EBADF, ENOTDIR).
    fn start(&self, dirfd: Fd, path: &[u8]) -> FsResult<std::borrow::Cow<'_, Arc<Inode>>> {
        if path.first() == Some(&b'/') {
            // The root, borrowed: no reference count to take on the one
            // inode every absolute path shares.
            return Ok(std::borrow::Cow::Borrowed(self.fs.root()?));
        }
        let dir = self.dir_of(dirfd)?;
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(std::borrow::Cow::Owned(dir))
    }

    /// The inode `dirfd` names (any type), or the current directory.
    fn dir_of(&self, dirfd: Fd) -> FsResult<Arc<Inode>> {
        if dirfd == AT_FDCWD {
            return Ok(self.cwd.lock().clone());
        }
        Ok(self.fds.get(dirfd)?.file.inode.clone())
    }

    /// Run `op` on what `path` names from `dirfd`; with AT_EMPTY_PATH in
    /// `flags` an empty path names `dirfd` itself.
    fn on_existing_at<T>(
        &self,
        dirfd: Fd,
        path: &[u8],
        flags: i32,
        c: &Credentials,
        op: impl FnMut(&Arc<Inode>) -> FsResult<T>,
    ) -> FsResult<T> {
        let mut op = op;
        if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
            let i = self.dir_of(dirfd)?;
            return op(&i);
        }
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        self.fs.on_existing(&start, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, c, op)
    }

    /// A descriptor of any kind (O_PATH included).
    fn any_file(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        Ok(self.fds.get(fd)?.file)
    }

    /// fsync or fdatasync of `fd`, with one lookup of the descriptor. When
    /// the call has nothing to do (strict mode, where every call was
    /// durable when it returned: the common case) it returns from the
    /// lookup without taking a reference to the description; EBADF as
    /// `io_file`.
    fn sync_fd(&self, fd: Fd, data_only: bool) -> FsResult<()> {
        let file = self.fds.with(fd, |f| {
            if f.flags.path {
                return Err(Errno::EBADF);
            }
            Ok((!self.fs.fsync_is_noop(&f.inode)).then(|| f.clone()))
        })??;
        match file {
            Some(f) => self.fs.fsync_inode(&f.inode, data_only),
            None => Ok(()),
        }
    }

    /// A descriptor for I/O and attribute calls: EBADF for O_PATH.
    fn io_file(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        let f = self.any_file(fd)?;
        if f.flags.path {
            return Err(Errno::EBADF);
        }
        Ok(f)
    }

    fn writable(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        let f = self.any_file(fd)?;
        if !f.flags.write {
            return Err(Errno::EBADF);
        }
        Ok(f)
    }

    fn readable(&self, fd: Fd) -> FsResult<Arc<OpenFile>> {
        let f = self.any_file(fd)?;
        if !f.flags.read {
            return Err(Errno::EBADF);
        }
        if f.inode.kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        Ok(f)
    }

    fn write_at(&self, f: &OpenFile, data: &[u8], offset: Option<u64>) -> FsResult<(usize, u64)> {
        // Only a write that will change the file takes its privileges
        // away: not one of nothing, nor one refused for its size (Linux's
        // generic_write_checks come first).
        let modifies = |at: u64| at.checked_add(data.len() as u64).is_some_and(|end| end <= limits::FILE_SIZE_MAX);
        let n = if f.append() {
            let mut d = f.inode.lock_write();
            let at = d.attrs.size;
            if !data.is_empty() && modifies(at) && !f.inode.nosec.load(Ordering::Acquire) {
                let set = SetAttr::default();
                self.fs.setattr_as_locked(&f.inode, &mut d, &set, &self.credentials(), PrivilegeDrop::Modify)?;
            }
            let n = self.fs.write_locked(&f.inode, &mut d, at, data)?;
            (n, at + n as u64)
        } else {
            let at = offset.expect("an offset without O_APPEND");
            if !data.is_empty() && modifies(at) {
                self.fs.drop_privileges(&f.inode, || self.credentials())?;
            }
            let n = self.fs.write_inode_at(&f.inode, at, data)?;
            (n, at + n as u64)
        };
        // O_SYNC and O_DSYNC writes are a commit point of the engine's
        // durability entry point (a no-op beyond msync in strict mode).
        // A write of nothing syncs nothing, as in Linux.
        if (f.flags.sync || f.flags.dsync) && n.0 > 0 {
            self.fs.fsync_inode(&f.inode, !f.flags.sync)?;
        }
        Ok(n)
    }

    /// A new name `new` (from `newdirfd`) for `target`: linkat's second
    /// half, after the existing file is found.
    fn link_to(&self, target: &Arc<Inode>, newdirfd: Fd, new: &[u8], c: &Credentials) -> FsResult<()> {
        let start = self.start(newdirfd, new)?;
        self.fs.on_path(&start, new, false, c, |r| {
            if r.target.is_some() {
                return Err(Errno::EEXIST);
            }
            let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
            if r.too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            if new.ends_with(b"/") {
                return Err(Errno::ENOENT);
            }
            may_create(&r.dir, c)?;
            self.fs.link_in(target, &r.dir, name).map(|_| ())
        })
    }

    /// linkat(AT_FDCWD, "/proc/self/fd/N", newdirfd, new, AT_SYMLINK_FOLLOW):
    /// a name for the file descriptor `fd` refers to, reached through the
    /// process's own descriptor link, which needs no privilege (unlike
    /// AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH). How programs name a
    /// file made by O_TMPFILE. Front ends that see such paths (the preload
    /// library) call it for descriptors of the pool.
    pub fn link_fd(&self, fd: Fd, newdirfd: Fd, new: &[u8]) -> FsResult<()> {
        let target = self.any_file(fd)?.inode.clone();
        check_path(new)?;
        self.link_to(&target, newdirfd, new, &self.credentials())
    }

    /// The open of one resolution (see `PathFs::openat`): the inode opened,
    /// its open count already taken.
    fn open_resolved(&self, r: &Resolved, flags: OpenFlags, perm: u32, c: &Credentials) -> FsResult<Arc<Inode>> {
        let fs = &*self.fs;
        if flags.create && r.name.is_some() && r.slash {
            return Err(Errno::EISDIR);
        }
        let inode = match r.target {
            Some((_, kind)) => {
                let inode = r.target_inode.clone().expect("a resolved target is held");
                if flags.create {
                    if flags.excl {
                        return Err(Errno::EEXIST);
                    }
                    if kind == FileType::Directory {
                        return Err(Errno::EISDIR);
                    }
                    if perm::sticky_create_refuses(c, &owner_of(&r.dir), &owner_of(&inode)) {
                        return Err(Errno::EACCES);
                    }
                }
                if (flags.directory || r.slash) && kind != FileType::Directory {
                    return Err(Errno::ENOTDIR);
                }
                if flags.path {
                    // O_PATH: no access check, any type (a symlink itself
                    // with O_NOFOLLOW), nothing opened for I/O.
                    fs.open_inode(&inode)?;
                    return Ok(inode);
                }
                if kind == FileType::Symlink {
                    return Err(Errno::ELOOP);
                }
                // O_TRUNC asks for write permission whatever the access
                // mode, and truncates a regular file even when it is
                // opened read-only, as Linux does (build_open_flags adds
                // MAY_WRITE; POSIX leaves O_RDONLY | O_TRUNC undefined).
                let writes = flags.write || flags.trunc;
                if kind == FileType::Directory && writes {
                    return Err(Errno::EISDIR);
                }
                let mut mask = 0;
                if flags.read {
                    mask |= perm::READ;
                }
                if writes {
                    mask |= perm::WRITE;
                }
                may(&inode, c, mask)?;
                // A FIFO, socket or device node is served by the kernel
                // (through FUSE it never reaches here); this API has no
                // pipe or driver behind it.
                if kind.is_special() {
                    return Err(Errno::ENXIO);
                }
                fs.open_inode(&inode)?;
                if flags.trunc && kind == FileType::Regular {
                    let mut d = inode.lock_write();
                    let set = SetAttr { size: Some(0), ..Default::default() };
                    if let Err(e) = fs.setattr_as_locked(&inode, &mut d, &set, c, PrivilegeDrop::Modify) {
                        drop(d);
                        fs.release_ino(&inode);
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
                may_create(&r.dir, c)?;
                let (uid, gid, perm) = perm::new_owner(c, &owner_of(&r.dir), FileType::Regular, perm & 0o7777);
                let spec = NodeSpec { kind: FileType::Regular, perm, uid, gid, symlink_target: None, rdev: 0 };
                let (_, inode) = match fs.create_node_in(&r.dir, name, &spec) {
                    Ok(st) => st,
                    // Created by another thread since the lookup: open
                    // that one (resolving again).
                    Err(Errno::EEXIST) if !flags.excl => return Err(RESOLVE_AGAIN),
                    Err(e) => return Err(e),
                };
                // Freed already (created, then unlinked by another thread
                // before this open counted): resolve the path again.
                fs.open_inode(&inode).map_err(|_| RESOLVE_AGAIN)?;
                inode
            }
        };
        Ok(inode)
    }

    /// open without a descriptor number yet.
    fn open_description(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Arc<OpenFile>> {
        let flags = flags.effective()?;
        check_path(path)?;
        let c = self.credentials();
        let start = self.start(dirfd, path)?;
        if flags.tmpfile {
            // O_TMPFILE: the path names a directory (followed unless
            // O_NOFOLLOW), in which the caller may create (ENOENT, ENOTDIR,
            // EACCES in Linux's order); the new file is made opened.
            let inode = self.fs.on_existing(&start, path, !flags.nofollow, &c, |dir| {
                if dir.kind != FileType::Directory {
                    return Err(Errno::ENOTDIR);
                }
                may_create(dir, &c)?;
                let (uid, gid, perm) = perm::new_owner(&c, &owner_of(dir), FileType::Regular, perm & 0o7777);
                let spec = NodeSpec { kind: FileType::Regular, perm, uid, gid, symlink_target: None, rdev: 0 };
                self.fs.create_tmpfile_in(dir, &spec, !flags.excl)
            })?;
            return Ok(Arc::new(OpenFile::new(inode, flags)));
        }
        // O_CREAT with a trailing slash is EISDIR before the last
        // component is looked up (so a final symlink is not followed).
        let follow = if flags.create && path.ends_with(b"/") {
            false
        } else {
            !(flags.nofollow || (flags.create && flags.excl)) || (!flags.create && path.ends_with(b"/"))
        };
        let inode = self.fs.on_path(&start, path, follow, &c, |r| self.open_resolved(r, flags, perm, &c))?;
        Ok(Arc::new(OpenFile::new(inode, flags)))
    }

    /// Create a node named by `path` from `dirfd` (mkdir, mknod, symlink):
    /// EEXIST for an existing name, `.`, `..` or the root; ENOENT for a
    /// trailing slash unless `dir_ok`; then may_create; then `extra`
    /// (mknod's EPERM for devices).
    #[allow(clippy::too_many_arguments)]
    fn create_at(
        &self,
        dirfd: Fd,
        path: &[u8],
        kind: FileType,
        perm: u32,
        target: Option<&[u8]>,
        rdev: u64,
        dir_ok: bool,
    ) -> FsResult<()> {
        check_path(path)?;
        let c = self.credentials();
        let start = self.start(dirfd, path)?;
        self.fs.on_path(&start, path, false, &c, |r| {
            if r.target.is_some() {
                return Err(Errno::EEXIST);
            }
            let name = r.name.as_ref().ok_or(Errno::EEXIST)?;
            if r.too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            if !dir_ok && path.ends_with(b"/") {
                return Err(Errno::ENOENT);
            }
            may_create(&r.dir, &c)?;
            perm::may_mknod(&c, kind, rdev)?;
            let (uid, gid, perm) = perm::new_owner(&c, &owner_of(&r.dir), kind, perm);
            let spec = NodeSpec { kind, perm, uid, gid, symlink_target: target, rdev };
            self.fs.create_node_in(&r.dir, name, &spec).map(|_| ())
        })
    }

    /// chmod of a held inode as `c`.
    fn chmod_inode(&self, i: &Arc<Inode>, perm: u32, c: &Credentials) -> FsResult<()> {
        let bits = perm::chmod_bits(c, &owner_of(i), perm)?;
        self.fs.setattr_inode(i, &SetAttr { perm: Some(bits), ..Default::default() }).map(|_| ())
    }

    /// chown of a held inode as `c`.
    fn chown_inode(&self, i: &Arc<Inode>, uid: Option<u32>, gid: Option<u32>, c: &Credentials) -> FsResult<()> {
        perm::may_chown(c, &owner_of(i), uid, gid)?;
        // chown(-1, -1) still changes ctime: name the current owner.
        let uid = match (uid, gid) {
            (None, None) => Some(self.fs.getattr_inode(i)?.uid),
            _ => uid,
        };
        // Set-ID bits and capabilities go with any chown of a non-directory.
        self.fs.setattr_as(i, &SetAttr { uid, gid, ..Default::default() }, c, PrivilegeDrop::Chown).map(|_| ())
    }

    /// utimens of a held inode as `c` (times already known not both Omit).
    fn utimens_inode(&self, i: &Arc<Inode>, atime: TimeSet, mtime: TimeSet, c: &Credentials) -> FsResult<()> {
        let valid = |t: TimeSet| !matches!(t, TimeSet::At(ts) if ts.nsec >= 1_000_000_000);
        if !valid(atime) || !valid(mtime) {
            return Err(Errno::EINVAL);
        }
        let both_now = atime == TimeSet::Now && mtime == TimeSet::Now;
        perm::may_set_times(c, &owner_of(i), both_now)?;
        let set = SetAttr { atime: Some(atime), mtime: Some(mtime), ..Default::default() };
        self.fs.setattr_inode(i, &set).map(|_| ())
    }

    fn unlink_at(&self, dirfd: Fd, path: &[u8], c: &Credentials) -> FsResult<()> {
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        self.fs.on_path(&start, path, false, c, |r| {
            let name = r.name.as_ref().ok_or(Errno::EISDIR)?;
            if r.too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            if r.slash {
                return Err(if kind == FileType::Directory { Errno::EISDIR } else { Errno::ENOTDIR });
            }
            may_delete(&r.dir, r.target_inode.as_ref().expect("held"), c)?;
            if kind == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            self.fs.remove_in(&r.dir, name, false, r.target_inode.as_ref())
        })
    }

    fn rmdir_at(&self, dirfd: Fd, path: &[u8], c: &Credentials) -> FsResult<()> {
        check_path(path)?;
        let start = self.start(dirfd, path)?;
        self.fs.on_path(&start, path, false, c, |r| {
            match r.last_dot {
                Some(b".") => return Err(Errno::EINVAL),
                Some(_) => return Err(Errno::ENOTEMPTY),
                None => {}
            }
            let name = r.name.as_ref().ok_or(Errno::EBUSY)?;
            if r.too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            let (_, kind) = r.target.ok_or(Errno::ENOENT)?;
            may_delete(&r.dir, r.target_inode.as_ref().expect("held"), c)?;
            if kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            self.fs.remove_in(&r.dir, name, true, r.target_inode.as_ref())
        })
    }

    fn set_cwd(&self, dir: &Arc<Inode>, c: &Credentials) -> FsResult<()> {
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        may(dir, c, perm::EXEC)?;
        self.fs.open_inode(dir)?;
        let old = std::mem::replace(&mut *self.cwd.lock(), dir.clone());
        self.fs.release_ino(&old);
        Ok(())
    }

    /// xattr permission (Linux's xattr_permission and the capability
    /// module): trusted.* is root's (EPERM to change, ENODATA to read for
    /// others), security.* only root may change; user.* needs read or
    /// write permission, and only the owner (or root) may change it on a
    /// sticky directory.
    fn may_xattr(&self, i: &Inode, name: &[u8], write: bool, c: &Credentials) -> FsResult<()> {
        if c.is_root() {
            return Ok(());
        }
        if name.starts_with(b"trusted.") {
            return Err(if write { Errno::EPERM } else { Errno::ENODATA });
        }
        if name.starts_with(b"security.") || name.starts_with(b"system.") {
            return if write && name.starts_with(b"security.") { Err(Errno::EPERM) } else { Ok(()) };
        }
        let o = owner_of(i);
        if name.starts_with(b"user.")
            && write
            && o.kind == FileType::Directory
            && o.perm & 0o1000 != 0
            && !perm::owner_or_root(c, &o)
        {
            return Err(Errno::EPERM);
        }
        perm::check(c, &o, if write { perm::WRITE } else { perm::READ })
    }
}

/// EINVAL when `flags` has a bit outside `allowed`.
fn check_flags(flags: i32, allowed: i32) -> FsResult<()> {
    if flags & !allowed != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn xattr_name_ok(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name.len() > crate::format::XATTR_NAME_MAX || name.contains(&0) {
        return Err(Errno::ERANGE);
    }
    Ok(())
}

impl PathFs for Session {
    fn openat(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        let file = self.open_description(dirfd, path, flags, perm)?;
        Ok(self.fds.insert(FdEntry { file, cloexec: flags.cloexec }))
    }

    fn close(&self, fd: Fd) -> FsResult<()> {
        let e = self.fds.remove(fd)?;
        self.release(e);
        Ok(())
    }

    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        let f = self.readable(fd)?;
        f.note_explicit_offset();
        let d = f.inode.lock_read();
        Ok(self.fs.read_file(&f.inode, &d, offset, buf))
    }

    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        let f = self.writable(fd)?;
        f.note_explicit_offset();
        Ok(self.write_at(&f, data, Some(offset))?.0)
    }

    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        let f = self.readable(fd)?;
        f.note_offset_moved();
        let mut pos = f.pos.lock();
        let d = f.inode.lock_read();
        let n = self.fs.read_file(&f.inode, &d, *pos, buf);
        *pos += n as u64;
        Ok(n)
    }

    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        let f = self.writable(fd)?;
        f.note_offset_moved();
        let mut pos = f.pos.lock();
        let (n, end) = self.write_at(&f, data, Some(*pos))?;
        if n > 0 {
            *pos = end;
        }
        Ok(n)
    }

    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        let f = self.io_file(fd)?;
        f.note_offset_moved();
        let mut pos = f.pos.lock();
        let d = f.inode.lock_read();
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
                self.fs.seek_data_hole(&d, offset as u64, whence == Whence::Data)? as i64
            }
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        *pos = new as u64;
        Ok(new as u64)
    }

    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        let f = self.io_file(fd)?;
        if !f.flags.write {
            return Err(Errno::EINVAL);
        }
        let c = self.credentials();
        let mut d = f.inode.lock_write();
        let set = SetAttr { size: Some(size), ..Default::default() };
        self.fs.setattr_as_locked(&f.inode, &mut d, &set, &c, PrivilegeDrop::Modify)
    }

    fn fsync(&self, fd: Fd) -> FsResult<()> {
        self.sync_fd(fd, false)
    }

    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        self.sync_fd(fd, true)
    }

    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let f = self.writable(fd)?;
        let c = self.credentials();
        let mut d = f.inode.lock_write();
        self.fs.fallocate_locked(&f.inode, &mut d, mode, offset, len, Some(&c))
    }

    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        let f = self.any_file(fd)?;
        let d = f.inode.lock_read();
        Ok(f.inode.stat(&d))
    }

    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        let c = self.credentials();
        let set = SetAttr { size: Some(size), ..Default::default() };
        self.on_existing_at(AT_FDCWD, path, 0, &c, |i| {
            match i.kind {
                FileType::Directory => return Err(Errno::EISDIR),
                FileType::Regular => {}
                _ => return Err(Errno::EINVAL),
            }
            may(i, &c, perm::WRITE)?;
            self.fs.setattr_as(i, &set, &c, PrivilegeDrop::Modify)
        })
        .map(|_| ())
    }

    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let f = self.io_file(fd)?;
        if f.inode.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.fs.readdir_inode(&f.inode, cookie, max)
    }

    fn statfs(&self) -> FsResult<StatFs> {
        Ok(self.fs.fs_stats())
    }

    fn mkdirat(&self, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()> {
        // vfs_mkdir keeps only the permission and sticky bits.
        self.create_at(dirfd, path, FileType::Directory, perm & 0o1777, None, 0, true)
    }

    fn mknodat(&self, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        // The type is checked before the path, as Linux's may_mknod.
        let kind = match FileType::from_mode(mode) {
            _ if mode & libc::S_IFMT == 0 => FileType::Regular,
            Some(FileType::Directory) => return Err(Errno::EPERM),
            Some(FileType::Symlink) | None => return Err(Errno::EINVAL),
            Some(k) => k,
        };
        self.create_at(dirfd, path, kind, mode & 0o7777, None, rdev, false)
    }

    fn unlinkat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_REMOVEDIR)?;
        let c = self.credentials();
        if flags & libc::AT_REMOVEDIR != 0 {
            self.rmdir_at(dirfd, path, &c)
        } else {
            self.unlink_at(dirfd, path, &c)
        }
    }

    fn renameat2(&self, olddirfd: Fd, from: &[u8], newdirfd: Fd, to: &[u8], flags: RenameFlags) -> FsResult<()> {
        check_path(from)?;
        check_path(to)?;
        let c = self.credentials();
        let mut tries = 0;
        loop {
            let s = self.fs.resolve_lenient(&*self.start(olddirfd, from)?, from, false, &c)?;
            let d = self.fs.resolve_lenient(&*self.start(newdirfd, to)?, to, false, &c)?;
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
            // vfs_rename's permission checks, in its order: may_delete of
            // the source, may_delete or may_create of the target, and
            // write permission on a directory that changes parent.
            let check = |moved: &Arc<Inode>, target: Option<&Arc<Inode>>| -> FsResult<()> {
                if c.is_root() {
                    return Ok(());
                }
                may_delete(&s.dir, moved, &c)?;
                match target {
                    Some(t) => {
                        may_delete(&d.dir, t, &c)?;
                        // may_delete's type checks come before the ".."
                        // check below.
                        let (sd, td) = (moved.kind == FileType::Directory, t.kind == FileType::Directory);
                        if flags != RenameFlags::Exchange && sd != td {
                            return Err(if sd { Errno::ENOTDIR } else { Errno::EISDIR });
                        }
                    }
                    None => may_create(&d.dir, &c)?,
                }
                if s.dir.ino != d.dir.ino {
                    if moved.kind == FileType::Directory {
                        may(moved, &c, perm::WRITE)?;
                    }
                    if let Some(t) = target {
                        if flags == RenameFlags::Exchange && t.kind == FileType::Directory {
                            may(t, &c, perm::WRITE)?;
                        }
                    }
                }
                Ok(())
            };
            match self.fs.rename_in(&s.dir, sname, s.slash, &d.dir, dname, d.slash, flags, &check) {
                Err(Errno::ENOENT) if tries < RACE_RETRIES_MAX && (stale(&s) || stale(&d)) => tries += 1,
                other => return other,
            }
        }
    }

    fn linkat(&self, olddirfd: Fd, old: &[u8], newdirfd: Fd, new: &[u8], flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH)?;
        let c = self.credentials();
        let empty = old.is_empty() && flags & libc::AT_EMPTY_PATH != 0;
        if empty && !c.is_root() {
            return Err(Errno::ENOENT); // needs CAP_DAC_READ_SEARCH
        }
        if !empty {
            check_path(old)?;
        }
        check_path(new)?;
        let nofollow = if flags & libc::AT_SYMLINK_FOLLOW != 0 { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        self.on_existing_at(olddirfd, old, nofollow | (flags & libc::AT_EMPTY_PATH), &c, |target| {
            self.link_to(target, newdirfd, new, &c)
        })
    }

    fn symlinkat(&self, target: &[u8], newdirfd: Fd, linkpath: &[u8]) -> FsResult<()> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > limits::SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.create_at(newdirfd, linkpath, FileType::Symlink, 0o777, Some(target), 0, false)
    }

    fn readlinkat(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>> {
        let c = self.credentials();
        if path.is_empty() {
            let i = self.dir_of(dirfd)?;
            if i.kind != FileType::Symlink {
                return Err(Errno::ENOENT);
            }
            return self.fs.readlink_inode(&i);
        }
        self.on_existing_at(dirfd, path, libc::AT_SYMLINK_NOFOLLOW, &c, |i| self.fs.readlink_inode(i))
    }

    fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT)?;
        let c = self.credentials();
        self.on_existing_at(dirfd, path, flags, &c, |i| self.fs.getattr_inode(i))
    }

    fn fchmodat(&self, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let c = self.credentials();
        self.on_existing_at(dirfd, path, flags, &c, |i| {
            if i.kind == FileType::Symlink {
                return Err(Errno::EOPNOTSUPP); // only reached with AT_SYMLINK_NOFOLLOW
            }
            self.chmod_inode(i, perm, &c)
        })
    }

    fn fchownat(&self, dirfd: Fd, path: &[u8], uid: Option<u32>, gid: Option<u32>, flags: i32) -> FsResult<()> {
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let c = self.credentials();
        self.on_existing_at(dirfd, path, flags, &c, |i| self.chown_inode(i, uid, gid, &c))
    }

    fn utimensat(&self, dirfd: Fd, path: &[u8], atime: TimeSet, mtime: TimeSet, flags: i32) -> FsResult<()> {
        if atime == TimeSet::Omit && mtime == TimeSet::Omit {
            return Ok(()); // Linux does not even resolve the path
        }
        check_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let c = self.credentials();
        self.on_existing_at(dirfd, path, flags, &c, |i| self.utimens_inode(i, atime, mtime, &c))
    }

    fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()> {
        self.faccessat_as(dirfd, path, mode, flags, &self.credentials())
    }

    fn fchmod(&self, fd: Fd, perm: u32) -> FsResult<()> {
        let f = self.io_file(fd)?;
        self.chmod_inode(&f.inode, perm, &self.credentials())
    }

    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        let f = self.io_file(fd)?;
        self.chown_inode(&f.inode, uid, gid, &self.credentials())
    }

    fn futimens(&self, fd: Fd, atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        if atime == TimeSet::Omit && mtime == TimeSet::Omit {
            return Ok(()); // before the descriptor is even looked at, as Linux
        }
        let f = self.io_file(fd)?;
        self.utimens_inode(&f.inode, atime, mtime, &self.credentials())
    }

    fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>> {
        let f = self.io_file(fd)?;
        xattr_name_ok(name)?;
        self.may_xattr(&f.inode, name, false, &self.credentials())?;
        self.fs.getxattr(f.inode.ino, name)
    }

    fn fsetxattr(&self, fd: Fd, name: &[u8], value: &[u8], mode: XattrSetMode) -> FsResult<()> {
        let f = self.io_file(fd)?;
        xattr_name_ok(name)?;
        self.may_xattr(&f.inode, name, true, &self.credentials())?;
        self.fs.setxattr(f.inode.ino, name, value, mode)
    }

    fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>> {
        let f = self.io_file(fd)?;
        let mut names = self.fs.listxattr(f.inode.ino)?;
        if !self.credentials().is_root() {
            names.retain(|n| !n.starts_with(b"trusted."));
        }
        Ok(names)
    }

    fn fremovexattr(&self, fd: Fd, name: &[u8]) -> FsResult<()> {
        let f = self.io_file(fd)?;
        xattr_name_ok(name)?;
        self.may_xattr(&f.inode, name, true, &self.credentials())?;
        self.fs.removexattr(f.inode.ino, name)
    }

    fn dup(&self, fd: Fd) -> FsResult<Fd> {
        let e = self.fds.get(fd)?;
        Ok(self.fds.insert(FdEntry { file: e.file, cloexec: false }))
    }

    fn dup3(&self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd> {
        if fd == newfd {
            return Err(Errno::EINVAL);
        }
        let e = self.fds.get(fd)?;
        if let Some(old) = self.fds.install(newfd, FdEntry { file: e.file, cloexec })? {
            self.release(old);
        }
        Ok(newfd)
    }

    fn get_cloexec(&self, fd: Fd) -> FsResult<bool> {
        Ok(self.fds.get(fd)?.cloexec)
    }

    fn set_cloexec(&self, fd: Fd, cloexec: bool) -> FsResult<()> {
        self.fds.set_cloexec(fd, cloexec)
    }

    fn getfl(&self, fd: Fd) -> FsResult<OpenFlags> {
        Ok(self.any_file(fd)?.status())
    }

    fn setfl_append(&self, fd: Fd, append: bool) -> FsResult<()> {
        let f = self.io_file(fd)?;
        f.append.store(append, Ordering::Relaxed);
        Ok(())
    }

    fn chdir(&self, path: &[u8]) -> FsResult<()> {
        let c = self.credentials();
        self.on_existing_at(AT_FDCWD, path, 0, &c, |i| self.set_cwd(i, &c))
    }

    fn fchdir(&self, fd: Fd) -> FsResult<()> {
        let f = self.any_file(fd)?;
        self.set_cwd(&f.inode, &self.credentials())
    }

    fn getcwd(&self) -> FsResult<Vec<u8>> {
        let cwd = self.cwd.lock().clone();
        self.fs.path_of_dir(&cwd)
    }

    fn credentials(&self) -> Credentials {
        Session::credentials(self)
    }

    fn set_credentials(&self, creds: Credentials) {
        Session::set_credentials(self, creds)
    }
}
