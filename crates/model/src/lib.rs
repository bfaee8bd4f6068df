//! The in-memory reference model of Ferrite: a small, obviously correct file
//! system that implements [`ferrite::PathFs`] with Linux semantics. It is the
//! oracle of the model-based randomized tests and of the crash-consistency
//! harness, which compare the engine against it after every operation
//! (see [`tree_of`], [`ModelFs::tree`] and [`diff_trees`]).
//!
//! The whole state is one [`ModelState`] value behind a mutex: cloning it
//! (cheap: file pages are shared until written) and comparing it are exact,
//! and [`ModelFs::from_state`] resumes from any saved state. Each operation
//! reads the clock once, so with a [`ferrite::ManualClock`] the model is
//! fully deterministic.
//!
//! # Semantics
//!
//! Linux semantics as the project brief fixes them. One [`ModelFs`] is one
//! process: a descriptor table (descriptors share open file descriptions
//! after `dup`), a current directory (relative paths and `AT_FDCWD` start
//! there) and credentials (root unless set), checked with the same rules
//! as the engine (`ferrite::perm`, diffed against Linux as root and as
//! other users). The main rules:
//!
//! * Paths: empty -> ENOENT; 4096 bytes or more -> ENAMETOOLONG; a component
//!   longer than 255 bytes -> ENAMETOOLONG when it is looked up (so an
//!   earlier missing or non-directory component wins, as in Linux).
//!   Intermediate symlinks are always followed; at most 40 symlinks per
//!   resolution (the 41st gives ELOOP). A trailing slash requires a
//!   directory and, as in Linux, makes lookup-type calls (stat, lstat,
//!   readlink, open, link's source, ...) follow a final symlink; a trailing
//!   slash in the body of a followed final symlink counts as well.
//! * Space: one page (4096 bytes) per allocated file page, one page per
//!   symlink, none for directories. Inodes: every live inode counts,
//!   including the root and unlinked-but-open files.
//! * Times: noatime; every time set by one operation is the same reading.
//!
//! # Decisions where the brief was silent or differs from Linux
//!
//! `tests/linux_diff.rs` runs random operation sequences on the model and on
//! a tmpfs directory of the running kernel and requires identical results,
//! except for the brief's choices marked "(brief)" below.
//!
//! * SEEK_DATA/SEEK_HOLE: every allocated page is data, including pages
//!   that fallocate allocated and nothing wrote (brief; tmpfs and ext4
//!   report those as holes). Truncate frees every page from ceil(s/4096) on
//!   even when it grows the file, so KeepSize pages past the old end of file
//!   go (brief; Linux keeps them when growing).
//! * `open` with O_CREAT | O_DIRECTORY -> EINVAL (Linux >= 6.4).
//! * `open` with O_TRUNC: write permission is checked and a regular file
//!   truncated whatever the access mode, a directory refused with EISDIR,
//!   as Linux (POSIX leaves O_RDONLY | O_TRUNC undefined). O_TRUNC of a
//!   file that open itself created does nothing more.
//! * `mkdir` keeps `perm & 0o1777` (vfs_mkdir drops set-uid/set-gid);
//!   created files keep `perm & 0o7777`; chmod stores `perm & 0o7777`.
//!   chown does not clear set-uid/set-gid bits (brief: chown only sets
//!   ctime; Linux clears them on regular files).
//! * `write`/`pwrite` whose end passes FILE_SIZE_MAX -> EFBIG with nothing
//!   written (brief; Linux would write a short prefix); not enough free
//!   pages -> ENOSPC with nothing written (brief). pread/pwrite offsets above i64::MAX ->
//!   EINVAL. A zero-length write returns 0 before any EFBIG check.
//! * `lseek`: a result above FILE_SIZE_MAX -> EINVAL (as s_maxbytes in
//!   Linux). On a directory descriptor only Set and Cur are allowed (the
//!   position is stored and unused), End/Data/Hole -> EINVAL.
//! * `ftruncate`/`truncate` with a size above i64::MAX -> EINVAL before any
//!   other check (Linux); above FILE_SIZE_MAX -> EFBIG.
//! * `fallocate` check order (Linux): unknown fd EBADF, len 0 EINVAL, not
//!   writable EBADF, EFBIG, ENOSPC.
//! * `utimens` with both times Omit succeeds at once without even resolving
//!   the path (Linux: "we must not even check the path"); an `At` time with
//!   nsec >= 10^9 -> EINVAL after the path is resolved.
//! * `rmdir`: the removed directory gets ctime = now and nlink 0 (visible
//!   through an open descriptor). A removed or replaced directory that is
//!   still open lives on until its last close; readdir on it gives ENOENT
//!   (Linux: getdents on a dead directory).
//! * `symlink` needs a free inode and a free page (ENOSPC otherwise).
//!   Hard links to symlinks are allowed (linkat without AT_SYMLINK_FOLLOW);
//!   a symlink's nlink is its number of names (1 unless hard-linked).
//! * `link` check order (Linux): source path errors, then target errors
//!   (EEXIST, ENOENT for a trailing slash on a missing name), then EPERM for
//!   a directory source, then EMLINK.
//! * `rename` check order: both paths validated, source parent resolved,
//!   target parent resolved, source exists (ENOENT), then "." / ".." / root
//!   as either last component -> EBUSY (brief; also for NoReplace where
//!   Linux says EEXIST, and for "/" where Linux says EXDEV; Linux checks
//!   this before the source exists), then as Linux's do_renameat2/vfs_rename: NoReplace and target
//!   exists -> EEXIST; Exchange and target missing -> ENOENT; Exchange and a
//!   trailing slash on a non-directory target -> ENOTDIR; a non-directory
//!   source with a trailing slash on it (or, unless Exchange, on the target)
//!   -> ENOTDIR; source directory that is the target's parent or one of its
//!   ancestors -> EINVAL; target directory that is the source's parent or
//!   one of its ancestors -> ENOTEMPTY (Exchange: EINVAL), even when the
//!   source is a file; same inode -> success, nothing changes; then
//!   ENOTDIR / EISDIR / ENOTEMPTY for the replace cases. The entry that
//!   rename creates gets a new readdir cookie; Exchange keeps both cookies.
//! * readdir cookies are per-directory insertion sequence numbers starting
//!   at 1; entries are returned in cookie order.
//! * In [`NodeView`], `link_group` is 0 for an inode seen at a single path,
//!   so that adding a file does not renumber every later path.
//! * [`ModelFs::tree`] materializes the content of every file: keep sparse
//!   files to sizes that fit in memory when comparing trees.
//! * Permissions: the rules of `ferrite::perm` (search, write+search on
//!   parents, access modes at open, sticky directories, chmod/chown/utimens
//!   ownership, set-group-id inheritance). Not modeled (as in the engine):
//!   Linux clearing set-user-id/set-group-id bits on write, truncate or
//!   chown (brief), the fs.protected_* sysctls, a real/effective id split.
//! * Extended attributes: user., trusted. and security. names are stored
//!   (name + value at most `ferrite::format::XATTR_BYTES_MAX` bytes, E2BIG
//!   beyond, as the engine); system.* names (POSIX ACLs) are EOPNOTSUPP,
//!   where the engine maps an access ACL to the mode.
//! * A removed directory holds no name: looking one up in it gives ENOENT
//!   before the name's length is checked (Linux's IS_DEADDIR).
//!
//! # Consistency modes and crashes
//!
//! Every regular file has a mode, [`FileMode::Strict`] or
//! [`FileMode::FsyncAtomic`]; files are created in the default mode
//! ([`ModelFs::set_default_mode`]), other kinds are always strict. The
//! extended attribute `user.ferrite.mode` ([`FileMode::XATTR`]) behaves as
//! in the engine: getxattr gives "strict" or "fsync-atomic" for a regular
//! file (ENODATA for anything else); setxattr with one of those values
//! (`FileMode::parse`; any set flag) sets it, EINVAL for another value or
//! another kind of file; removexattr is EINVAL; listxattr does not list it.
//!
//! Every operation shows its result at once in both modes. What differs is
//! what a crash leaves: the data changes of an fsync-atomic file (write,
//! truncate, O_TRUNC, fallocate including punch hole) are undone by a
//! crash back to the file's last *commit point*: fsync or fdatasync of it,
//! a successful write through an O_SYNC or O_DSYNC descriptor (even of
//! zero bytes, as the engine's session), [`ModelFs::sync_all`], a clean
//! unmount, and any other successful change of the file (chmod, chown,
//! utimens, setting or removing an xattr, a mode change even to the same
//! mode — ctime changes only when the mode does —, link, unlink, rename of
//! it or over it). Content, size, mtime and ctime come back together;
//! everything else (names, attributes, strict files) is durable at once.
//!
//! The oracle of a remount: [`ModelState::unmounted`] (clean: every file
//! committed) and [`ModelState::crashed`] (every pending file back at its
//! last commit point); [`ModelState::crashed_committing`] is a crash during
//! which some files' commits completed, for a commit point in flight
//! ([`ModelState::pending_inodes`] lists the candidates). [`ModelFs`]
//! applies them in place ([`ModelFs::remount_clean`],
//! [`ModelFs::remount_after_crash`]). Space: the pages a committed state
//! keeps that the current state no longer uses are not counted (the engine
//! holds them until the commit; the model's ENOSPC ignores them).

mod state;
mod tree;

use std::sync::Arc;

use ferrite::{
    Clock, Credentials, DirEntry, FallocateMode, Fd, FileMode, FsResult, OpenFlags, PathFs, RenameFlags, Stat, StatFs,
    TimeSet, Whence, XattrSetMode, AT_FDCWD,
};
use parking_lot::Mutex;

pub use state::{ModelState, PAGE};
pub use tree::{diff_trees, tree_of, NodeView, Tree};

/// The reference file system: a [`ModelState`] behind one mutex, and the
/// clock its timestamps come from.
pub struct ModelFs {
    state: Mutex<ModelState>,
    clock: Arc<dyn Clock>,
}

impl ModelFs {
    /// An empty file system of `total_pages` 4 KiB pages and `total_inodes`
    /// inodes (the root uses one), root directory 0755 owned by 0:0.
    pub fn new(clock: Arc<dyn Clock>, total_pages: u64, total_inodes: u64) -> ModelFs {
        let state = ModelState::new(clock.now(), total_pages, total_inodes);
        ModelFs { state: Mutex::new(state), clock }
    }

    /// Resume from a saved state.
    pub fn from_state(state: ModelState, clock: Arc<dyn Clock>) -> ModelFs {
        ModelFs { state: Mutex::new(state), clock }
    }

    /// A copy of the whole state (cheap: file pages are shared).
    pub fn snapshot(&self) -> ModelState {
        self.state.lock().clone()
    }

    /// Replace the whole state.
    pub fn restore(&self, state: ModelState) {
        *self.state.lock() = state;
    }

    /// Close every descriptor, as the end of a process does: unlinked
    /// files that were still open disappear; the current directory becomes
    /// the root and the credentials root's (a new process). Pending changes
    /// of fsync-atomic files stay pending: a remount is
    /// [`ModelFs::remount_clean`] or [`ModelFs::remount_after_crash`].
    pub fn close_all(&self) {
        let mut s = self.state.lock();
        *s = s.without_open_files();
    }

    /// A clean unmount and mount: every file committed, then
    /// [`ModelFs::close_all`] ([`ModelState::unmounted`]).
    pub fn remount_clean(&self) {
        let mut s = self.state.lock();
        *s = s.unmounted();
    }

    /// A crash and mount: every fsync-atomic file back at its last commit
    /// point, then [`ModelFs::close_all`] ([`ModelState::crashed`]).
    pub fn remount_after_crash(&self) {
        let mut s = self.state.lock();
        *s = s.crashed();
    }

    /// sync / syncfs: a commit point of every file.
    pub fn sync_all(&self) {
        self.state.lock().sync_all();
    }

    /// The mode of regular files created from now on.
    pub fn default_mode(&self) -> FileMode {
        self.state.lock().default_mode()
    }

    pub fn set_default_mode(&self, mode: FileMode) {
        self.state.lock().set_default_mode(mode);
    }

    /// The mode of the file `path` names (following symlinks; strict for
    /// anything but a regular file).
    pub fn file_mode(&self, path: &[u8]) -> FsResult<FileMode> {
        let s = self.state.lock();
        let ino = s.fstatat(AT_FDCWD, path, 0)?.ino;
        Ok(s.file_mode(ino.0))
    }

    /// How many files have changes a crash would undo.
    pub fn pending_file_count(&self) -> usize {
        self.state.lock().pending_inodes().len()
    }

    /// The canonical view of the whole tree, for comparison with
    /// [`tree_of`] of another implementation.
    pub fn tree(&self) -> Tree {
        tree::tree_of_state(&self.state.lock())
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

impl ModelState {
    /// The canonical view of the whole tree (same as [`ModelFs::tree`]).
    pub fn tree(&self) -> Tree {
        tree::tree_of_state(self)
    }
}

impl PathFs for ModelFs {
    fn openat(&self, dirfd: Fd, path: &[u8], flags: OpenFlags, perm: u32) -> FsResult<Fd> {
        let now = self.clock.now();
        self.state.lock().open(now, dirfd, path, flags, perm)
    }
    fn close(&self, fd: Fd) -> FsResult<()> {
        self.state.lock().close(fd)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        self.state.lock().pread(fd, buf, offset)
    }
    fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> FsResult<usize> {
        let now = self.clock.now();
        self.state.lock().pwrite(now, fd, data, offset)
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> FsResult<usize> {
        self.state.lock().read(fd, buf)
    }
    fn write(&self, fd: Fd, data: &[u8]) -> FsResult<usize> {
        let now = self.clock.now();
        self.state.lock().write(now, fd, data)
    }
    fn lseek(&self, fd: Fd, offset: i64, whence: Whence) -> FsResult<u64> {
        self.state.lock().lseek(fd, offset, whence)
    }
    fn ftruncate(&self, fd: Fd, size: u64) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().ftruncate(now, fd, size)
    }
    fn fsync(&self, fd: Fd) -> FsResult<()> {
        self.state.lock().fsync(fd)
    }
    fn fdatasync(&self, fd: Fd) -> FsResult<()> {
        self.state.lock().fsync(fd)
    }
    fn fallocate(&self, fd: Fd, mode: FallocateMode, offset: u64, len: u64) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fallocate(now, fd, mode, offset, len)
    }
    fn fstat(&self, fd: Fd) -> FsResult<Stat> {
        self.state.lock().fstat(fd)
    }
    fn truncate(&self, path: &[u8], size: u64) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().truncate(now, path, size)
    }
    fn readdir(&self, fd: Fd, cookie: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        self.state.lock().readdir(fd, cookie, max)
    }
    fn statfs(&self) -> FsResult<StatFs> {
        Ok(self.state.lock().statfs())
    }
    fn mkdirat(&self, dirfd: Fd, path: &[u8], perm: u32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().mkdir(now, dirfd, path, perm)
    }
    fn mknodat(&self, dirfd: Fd, path: &[u8], mode: u32, rdev: u64) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().mknod(now, dirfd, path, mode, rdev)
    }
    fn unlinkat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().unlinkat(now, dirfd, path, flags)
    }
    fn renameat2(&self, olddirfd: Fd, old: &[u8], newdirfd: Fd, new: &[u8], flags: RenameFlags) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().rename(now, olddirfd, old, newdirfd, new, flags)
    }
    fn linkat(&self, olddirfd: Fd, old: &[u8], newdirfd: Fd, new: &[u8], flags: i32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().link(now, olddirfd, old, newdirfd, new, flags)
    }
    fn symlinkat(&self, target: &[u8], newdirfd: Fd, linkpath: &[u8]) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().symlink(now, target, newdirfd, linkpath)
    }
    fn readlinkat(&self, dirfd: Fd, path: &[u8]) -> FsResult<Vec<u8>> {
        self.state.lock().readlink(dirfd, path)
    }
    fn fstatat(&self, dirfd: Fd, path: &[u8], flags: i32) -> FsResult<Stat> {
        self.state.lock().fstatat(dirfd, path, flags)
    }
    fn fchmodat(&self, dirfd: Fd, path: &[u8], perm: u32, flags: i32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fchmodat(now, dirfd, path, perm, flags)
    }
    fn fchownat(&self, dirfd: Fd, path: &[u8], uid: Option<u32>, gid: Option<u32>, flags: i32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fchownat(now, dirfd, path, uid, gid, flags)
    }
    fn utimensat(&self, dirfd: Fd, path: &[u8], atime: TimeSet, mtime: TimeSet, flags: i32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().utimensat(now, dirfd, path, atime, mtime, flags)
    }
    fn faccessat(&self, dirfd: Fd, path: &[u8], mode: u32, flags: i32) -> FsResult<()> {
        self.state.lock().faccessat(dirfd, path, mode, flags)
    }
    fn fchmod(&self, fd: Fd, perm: u32) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fchmod(now, fd, perm)
    }
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fchown(now, fd, uid, gid)
    }
    fn futimens(&self, fd: Fd, atime: TimeSet, mtime: TimeSet) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().futimens(now, fd, atime, mtime)
    }
    fn fgetxattr(&self, fd: Fd, name: &[u8]) -> FsResult<Vec<u8>> {
        self.state.lock().fgetxattr(fd, name)
    }
    fn fsetxattr(&self, fd: Fd, name: &[u8], value: &[u8], mode: XattrSetMode) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fsetxattr(now, fd, name, value, mode)
    }
    fn flistxattr(&self, fd: Fd) -> FsResult<Vec<Vec<u8>>> {
        self.state.lock().flistxattr(fd)
    }
    fn fremovexattr(&self, fd: Fd, name: &[u8]) -> FsResult<()> {
        let now = self.clock.now();
        self.state.lock().fremovexattr(now, fd, name)
    }
    fn dup(&self, fd: Fd) -> FsResult<Fd> {
        self.state.lock().dup(fd)
    }
    fn dup3(&self, fd: Fd, newfd: Fd, cloexec: bool) -> FsResult<Fd> {
        self.state.lock().dup3(fd, newfd, cloexec)
    }
    fn get_cloexec(&self, fd: Fd) -> FsResult<bool> {
        self.state.lock().get_cloexec(fd)
    }
    fn set_cloexec(&self, fd: Fd, cloexec: bool) -> FsResult<()> {
        self.state.lock().set_cloexec(fd, cloexec)
    }
    fn getfl(&self, fd: Fd) -> FsResult<OpenFlags> {
        self.state.lock().getfl(fd)
    }
    fn setfl_append(&self, fd: Fd, append: bool) -> FsResult<()> {
        self.state.lock().setfl_append(fd, append)
    }
    fn chdir(&self, path: &[u8]) -> FsResult<()> {
        self.state.lock().chdir(path)
    }
    fn fchdir(&self, fd: Fd) -> FsResult<()> {
        self.state.lock().fchdir(fd)
    }
    fn getcwd(&self) -> FsResult<Vec<u8>> {
        self.state.lock().getcwd()
    }
    fn credentials(&self) -> Credentials {
        self.state.lock().credentials().clone()
    }
    fn set_credentials(&self, creds: Credentials) {
        self.state.lock().set_credentials(creds)
    }
}
