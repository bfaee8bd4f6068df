//! The FUSE request handlers: each one translates a kernel request into one
//! (rarely two) inode-level calls of the engine and its answer into a reply.
//!
//! The handlers live in [`Core`], which knows no transport: each takes the
//! request's decoded fields and returns the answer as a value. Two
//! transports call it: `fuser`'s /dev/fuse session, through the
//! `Filesystem` implementation of [`FerriteFuse`] at the end of this file,
//! and FUSE over io_uring ([`crate::uring`]), which decodes the kernel's
//! requests itself ([`crate::wire`]). Both share one `Core`, so lookup
//! counts and file handles are the same whichever way a request came.
//!
//! What lives here beyond translation:
//! - **Lookup counts.** Every entry handed to the kernel (lookup, create,
//!   mkdir, symlink, link, mknod, readdirplus) counts one reference until the
//!   kernel forgets it. The first reference pins the inode in the engine
//!   with `open_ino`, the last `forget` releases it with `release_ino`; so an
//!   unlinked inode lives while the kernel can still name it (open files,
//!   cwd, mmaps), and its number cannot be reused under the kernel's feet.
//!   Open files and directories hold a pin of their own as well.
//! - **Directory offsets.** The engine lists no `.`/`..`; they are
//!   synthesized at offsets 1 and 2, and an engine cookie `c` is offset `c + 2`.
//! - **Credentials.** The engine does not know users: new nodes get the
//!   caller's uid/gid (or the `uid=`/`gid=` options), the set-group-ID
//!   inheritance of directories, and the umask. Permission checks are the
//!   kernel's (`default_permissions`), except on a mount private to root,
//!   where only root's processes get in and the kernel's checks are off
//!   (`daemon::kernel_checks_permissions` says why): there the adapter
//!   answers `access`, and the kernel still checks execute bits.
//! - **No panics escape.** Every handler runs under `catch_unwind`; a panic
//!   is logged and the request answered with EIO (the unsent reply's drop
//!   sends it), and the daemon keeps serving.

use crate::options::{MountConfig, ReaddirPlus, Transport};
use ferrite::{
    perm, Credentials, Errno, FallocateMode, Ferrite, FileType, FsResult, InodeNo, NodeSpec, RenameFlags, SetAttr,
    Stat, StatFs, TimeSet, TimeSpec, XattrSetMode,
};
use fuser::{
    AccessFlags, CopyFileRangeFlags, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Gives back one engine pin (`open_ino` → `release_ino`). `open_ino`
/// returns a handle type the engine does not export, so the handle is kept
/// inside this closure.
type Release = Box<dyn FnOnce(&Ferrite) + Send>;

fn pin(fs: &Ferrite, ino: InodeNo) -> FsResult<Release> {
    let handle = fs.open_ino(ino)?;
    Ok(Box::new(move |fs: &Ferrite| fs.release_ino(&handle)))
}

const SHARDS: usize = 32;

/// A map from u64 keys split in shards, so that threads serving different
/// inodes rarely meet on one lock.
struct Sharded<V> {
    shards: Vec<Mutex<HashMap<u64, V>>>,
}

impl<V> Sharded<V> {
    fn new() -> Self {
        Sharded { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
    fn shard(&self, k: u64) -> &Mutex<HashMap<u64, V>> {
        &self.shards[(k as usize) % SHARDS]
    }
    fn drain_all(&self) -> Vec<V> {
        self.shards.iter().flat_map(|s| s.lock().drain().map(|(_, v)| v).collect::<Vec<_>>()).collect()
    }
}

/// The kernel's references to one inode.
struct Lookups {
    count: u64,
    release: Release,
}

/// An open file or directory.
struct Handle {
    release: Release,
    /// The regular file it opened (None for a directory), counted in
    /// [`KernelFiles`] while open.
    file: Option<InodeNo>,
}

/// Which regular files the kernel holds open through this mount (an open
/// descriptor, or a mapping, which keeps its file open), and a way to have
/// the kernel drop what it caches of one. Another front end of the same
/// engine in this process (the preload library's owner) reads and writes
/// the pool directly: after it changes a file the kernel may cache, it
/// has the kernel drop the changed pages, so that the kernel's mappings
/// and reads see the change. It holds no reference to the engine.
pub struct KernelFiles {
    open: Mutex<HashMap<u64, u32>>,
    /// How many files are open in `open`: the common answer, none, costs
    /// one load.
    files: AtomicUsize,
    notifier: std::sync::OnceLock<fuser::Notifier>,
}

impl KernelFiles {
    fn new() -> KernelFiles {
        KernelFiles { open: Mutex::new(HashMap::new()), files: AtomicUsize::new(0), notifier: Default::default() }
    }

    /// Whether the kernel holds `ino` open (and so may cache its pages).
    pub fn is_open(&self, ino: InodeNo) -> bool {
        self.files.load(Ordering::Acquire) > 0 && self.open.lock().contains_key(&ino.0)
    }

    /// Whether the kernel holds any file open.
    pub fn any_open(&self) -> bool {
        self.files.load(Ordering::Acquire) > 0
    }

    /// Have the kernel drop its cached pages of `ino` in [offset,
    /// offset+len) (`len` 0: to the end), unmapping them from every
    /// mapping, after writing back the dirty ones: the next access reads
    /// the pool. Call it holding none of the engine's locks: the write-back
    /// is served by the mount's threads.
    pub fn invalidate(&self, ino: InodeNo, offset: u64, len: u64) -> std::io::Result<()> {
        match self.notifier.get() {
            Some(n) => n.inval_inode(INodeNo(ino.0), offset as i64, len as i64),
            None => Ok(()),
        }
    }

    /// Tell the kernel that `ino` now holds `last` at `offset`, its last
    /// bytes. The kernel keeps the size it last heard of, and a process
    /// mapping the file past that size gets SIGBUS there even after the
    /// file has grown; a store that ends past the size it knows is what
    /// makes it take the new one (`fuse_notify_store`). Call it after
    /// `invalidate` of the changed range, holding none of the engine's
    /// locks, as `invalidate`.
    pub fn grown(&self, ino: InodeNo, offset: u64, last: &[u8]) -> std::io::Result<()> {
        match self.notifier.get() {
            Some(n) => n.store(INodeNo(ino.0), offset, last),
            None => Ok(()),
        }
    }

    fn opened(&self, ino: InodeNo) {
        let mut m = self.open.lock();
        let c = m.entry(ino.0).or_insert(0);
        if *c == 0 {
            self.files.fetch_add(1, Ordering::AcqRel);
        }
        *c += 1;
    }

    fn closed(&self, ino: InodeNo) {
        let mut m = self.open.lock();
        if let Some(c) = m.get_mut(&ino.0) {
            *c -= 1;
            if *c == 0 {
                m.remove(&ino.0);
                self.files.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Another front end of the same engine in this process (the preload
/// library's owner), which keeps DRAM copies of some files (its programs'
/// shared mappings) and writes them back itself. The adapter tells it
/// around each request of the kernel's that reads or changes a file's
/// bytes, so that another process reaching the pool through the mount
/// reads what the owner's mappings hold and the mappings follow what that
/// process writes.
pub trait Neighbour: Send + Sync {
    /// Before the kernel reads or syncs `ino`: write the copies' changes
    /// back to the pool.
    fn before_io(&self, ino: InodeNo);
    /// The kernel changes `ino`: write the copies' changes back, run
    /// `change` (the engine call, which says what it changed), and reload
    /// the copies from what changed, as one step that no write-back of the
    /// copies enters. A write-back between the change and the reload would
    /// take the copies' stale bytes for the neighbour's own stores and
    /// undo the change: the mount's threads serve a process's writes two
    /// at a time, and each writes the copies back first.
    fn changing(&self, ino: InodeNo, change: &mut dyn FnMut() -> Changed);
    /// The kernel opened the regular file `ino` for another process.
    fn opened(&self, ino: InodeNo);
}

/// What a change of a file's bytes or size changed, for
/// [`Neighbour::changing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changed {
    /// Nothing: the change failed.
    Nothing,
    /// The bytes [offset, offset+len) (a write).
    Range { offset: u64, len: u64 },
    /// Any byte (a size change, an allocation, a copy).
    Whole,
}

/// What the adapter needs from the mount options.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
    pub(crate) negative_ttl: Duration,
    read_only: bool,
    uid: Option<u32>,
    gid: Option<u32>,
    umask: u32,
    writeback_cache: bool,
    direct_io: bool,
    keep_cache: bool,
    readdirplus: ReaddirPlus,
    /// Serve extended attributes (else ENOSYS: see `setxattr`).
    xattr: bool,
    transport: Transport,
}

/// The caller of a request, as the kernel gives it: its file-system user
/// and group ids and its thread id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Caller {
    /// Is the caller in group `gid`? Its own group answers at once; the
    /// supplementary groups, which the request does not carry, come from
    /// `/proc/<pid>/status`. A caller that cannot be looked up (it has
    /// exited, or the kernel sent no pid) counts as outside the group, so
    /// a privilege is taken rather than kept on a guess.
    fn in_group(&self, gid: u32) -> bool {
        if self.gid == gid {
            return true;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return false;
        };
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap_or("");
        groups.split_whitespace().any(|g| g.parse() == Ok(gid))
    }
}

/// The answer to getxattr and listxattr: the size the caller must provide
/// (asked with size 0), or the bytes.
pub(crate) enum XattrOut {
    Size(u32),
    Data(Vec<u8>),
}

/// The FUSE file system, transport-neutral: a thin adapter over one mounted
/// `Ferrite`.
pub(crate) struct Core {
    pub(crate) fs: Arc<Ferrite>,
    pub(crate) set: Settings,
    lookups: Sharded<Lookups>,
    handles: Sharded<Handle>,
    next_fh: AtomicU64,
    /// Testing hook (`FERRITE_FUSE_TEST_PANIC=name`): a lookup or create of
    /// this name panics inside the handler, to prove the daemon survives.
    panic_on: Option<Vec<u8>>,
    /// `FERRITE_FUSE_TRACE=1`: log every request that changes data (and,
    /// on the io_uring transport, every request answered with an error).
    pub(crate) trace: bool,
    /// The kernel accepted FUSE over io_uring at INIT (the queues are
    /// registered after the handshake, by [`crate::uring`]).
    pub(crate) uring_granted: AtomicBool,
    /// Notifications to the kernel (set once the session exists).
    pub(crate) notifier: std::sync::OnceLock<fuser::Notifier>,
    /// The regular files the kernel holds open.
    pub(crate) kernel_files: Arc<KernelFiles>,
    /// The other front end in this process, if any.
    pub(crate) neighbour: std::sync::OnceLock<Arc<dyn Neighbour>>,
}

/// The FUSE file system as `fuser` serves it over /dev/fuse.
pub struct FerriteFuse {
    core: Arc<Core>,
}

/// The core goes when the last serving thread (the /dev/fuse session's and
/// every io_uring queue's) has ended: only then is nothing left that could
/// still release a handle, so what the kernel never released is released
/// here, once. The kernel does not forget every inode at unmount (normal);
/// open handles left mean the connection was aborted.
impl Drop for Core {
    fn drop(&mut self) {
        let (h, _) = self.release_all();
        if h > 0 {
            log(format!("at unmount {h} file(s) were still open: released"));
        }
    }
}

thread_local! {
    /// The name of the /dev/fuse request this thread is answering, set only
    /// while FERRITE_FUSE_TRACE is on.
    static TRACED_OP: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// An engine error as fuser's answer; logged when the request is traced.
fn err(e: Errno) -> fuser::Errno {
    if let Some(op) = TRACED_OP.get() {
        log(format!("{op}: error {}", e.0));
    }
    fuser::Errno::from_i32(e.0)
}

fn node_no(ino: INodeNo) -> InodeNo {
    InodeNo(ino.0)
}

fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

fn system_time(t: TimeSpec) -> SystemTime {
    let r = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(t.sec as u64, t.nsec))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(t.sec.unsigned_abs()))
            .and_then(|s| s.checked_add(Duration::from_nanos(t.nsec as u64)))
    };
    r.unwrap_or(UNIX_EPOCH)
}

fn time_set(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(st) => TimeSet::At(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => TimeSpec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
            // fuser 0.18 decodes the kernel's (sec < 0, nsec) as the epoch
            // minus (|sec| s + nsec ns) (`system_time_from_time`; its
            // TODO says so) where the time is sec s + nsec ns: -1 s and
            // 999,999,999 ns, a nanosecond before 1970, arrives as
            // -1.999999999 s. That mapping loses nothing, so the kernel's
            // pair is read back from it here. `calls.c` on the /dev/fuse
            // transport (tests/programs.rs) sets such a time and compares
            // it with tmpfs, so a fuser that decodes it right shows there.
            Err(e) => {
                let d = e.duration();
                TimeSpec { sec: -(d.as_secs().min(i64::MAX as u64) as i64), nsec: d.subsec_nanos() }
            }
        }),
    })
}

/// Attributes of nothing, for negative entries.
const NO_STAT: Stat = Stat {
    ino: InodeNo(0),
    kind: FileType::Regular,
    perm: 0,
    nlink: 0,
    uid: 0,
    gid: 0,
    size: 0,
    blocks: 0,
    atime: TimeSpec { sec: 0, nsec: 0 },
    mtime: TimeSpec { sec: 0, nsec: 0 },
    ctime: TimeSpec { sec: 0, nsec: 0 },
    blksize: 4096,
    rdev: 0,
};

pub(crate) fn attr(st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.ino.0),
        size: st.size,
        blocks: st.blocks,
        atime: system_time(st.atime),
        mtime: system_time(st.mtime),
        ctime: system_time(st.ctime),
        crtime: system_time(st.ctime),
        kind: kind(st.kind),
        perm: (st.perm & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        // Device numbers come from FUSE in the kernel's 32-bit encoding
        // (equal to glibc's makedev for 12-bit majors, 20-bit minors).
        rdev: u32::try_from(st.rdev).unwrap_or(0),
        blksize: st.blksize,
        flags: 0,
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

/// A log line on stderr (the log file when detached).
pub(crate) fn log(msg: impl std::fmt::Display) {
    eprintln!("ferrite-fuse[{}]: {msg}", std::process::id());
}

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl FerriteFuse {
    /// An adapter serving `fs` with the given options.
    pub fn new(fs: Arc<Ferrite>, cfg: &MountConfig) -> FerriteFuse {
        FerriteFuse { core: Arc::new(Core::new(fs, cfg)) }
    }

    /// The transport-neutral handlers, shared with the io_uring transport.
    pub(crate) fn core(&self) -> Arc<Core> {
        self.core.clone()
    }

    /// The record of the files the kernel holds open.
    pub fn kernel_files(&self) -> Arc<KernelFiles> {
        self.core.kernel_files.clone()
    }
}

impl Core {
    fn new(fs: Arc<Ferrite>, cfg: &MountConfig) -> Core {
        Core {
            set: Settings {
                attr_ttl: cfg.attr_timeout,
                entry_ttl: cfg.entry_timeout,
                negative_ttl: cfg.negative_timeout,
                read_only: cfg.read_only,
                uid: cfg.uid,
                gid: cfg.gid,
                umask: cfg.umask,
                writeback_cache: cfg.writeback_cache,
                direct_io: cfg.direct_io,
                keep_cache: cfg.keep_cache,
                readdirplus: cfg.readdirplus,
                xattr: cfg.xattr,
                transport: cfg.transport,
            },
            fs,
            lookups: Sharded::new(),
            handles: Sharded::new(),
            next_fh: AtomicU64::new(1),
            panic_on: std::env::var_os("FERRITE_FUSE_TEST_PANIC").map(|v| v.as_bytes().to_vec()),
            trace: std::env::var_os("FERRITE_FUSE_TRACE").is_some_and(|v| v == "1"),
            uring_granted: AtomicBool::new(false),
            notifier: std::sync::OnceLock::new(),
            kernel_files: Arc::new(KernelFiles::new()),
            neighbour: std::sync::OnceLock::new(),
        }
    }

    fn before_io(&self, ino: InodeNo) {
        if let Some(n) = self.neighbour.get() {
            n.before_io(ino);
        }
    }

    /// Make a change of `ino` with `change` (`changed` says what it
    /// changed) as one step for the neighbour's copies
    /// ([`Neighbour::changing`]).
    fn change<T>(
        &self,
        ino: InodeNo,
        change: impl FnOnce() -> FsResult<T>,
        changed: impl FnOnce(&T) -> Changed,
    ) -> FsResult<T> {
        let Some(n) = self.neighbour.get() else { return change() };
        let mut once = Some((change, changed));
        let mut out = None;
        n.changing(ino, &mut || {
            let (change, changed) = once.take().expect("the neighbour runs a change once");
            let r = change();
            let what = r.as_ref().map_or(Changed::Nothing, changed);
            out = Some(r);
            what
        });
        out.expect("the neighbour ran the change")
    }

    /// Give the kernel's notification channel to the handlers and to
    /// [`KernelFiles`].
    pub(crate) fn set_notifier(&self, n: fuser::Notifier) {
        let _ = self.kernel_files.notifier.set(n.clone());
        let _ = self.notifier.set(n);
    }

    /// Run one handler; a panic inside it is logged and becomes EIO.
    pub(crate) fn guard(&self, op: &'static str, f: impl FnOnce()) {
        // The /dev/fuse handlers answer errors through `err`, which logs
        // them under FERRITE_FUSE_TRACE with this request's name (the
        // io_uring transport logs its own in `uring.rs`).
        if self.trace {
            TRACED_OP.set(Some(op));
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            log(format!("internal error in {op}: {}; answered EIO, the mount stays up", panic_text(&*p)));
        }
        if self.trace {
            TRACED_OP.set(None);
        }
    }

    /// Run one handler that returns its answer; a panic becomes EIO.
    pub(crate) fn guarded<T>(&self, op: &'static str, f: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(p) => {
                log(format!("internal error in {op}: {}; answered EIO, the mount stays up", panic_text(&*p)));
                Err(Errno::EIO)
            }
        }
    }

    fn test_hook(&self, name: &OsStr) {
        if let Some(n) = &self.panic_on {
            if n.as_slice() == name.as_bytes() {
                panic!("FERRITE_FUSE_TEST_PANIC: `{}`", name.to_string_lossy());
            }
        }
    }

    fn writable(&self) -> FsResult<()> {
        if self.set.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    // ---- lookup counts --------------------------------------------------

    /// One more kernel reference to an inode already known to the kernel;
    /// false if it has none yet.
    fn add_ref_if_known(&self, ino: InodeNo) -> bool {
        if ino == InodeNo::ROOT {
            return true; // the kernel never forgets the root
        }
        let mut m = self.lookups.shard(ino.0).lock();
        match m.get_mut(&ino.0) {
            Some(l) => {
                l.count += 1;
                true
            }
            None => false,
        }
    }

    /// Count one kernel reference to the inode `st` describes, which the
    /// caller found under `name` in `parent`. The first reference pins the
    /// inode; then the name is looked up again, so the reply never names an
    /// inode freed (and its number reused) between the lookup and the pin.
    fn count_entry(&self, parent: InodeNo, name: &[u8], mut st: Stat) -> FsResult<Stat> {
        for _ in 0..16 {
            if self.add_ref_if_known(st.ino) {
                return Ok(st);
            }
            let release = match pin(&self.fs, st.ino) {
                Ok(r) => r,
                Err(Errno::ENOENT) => {
                    st = self.fs.lookup(parent, name)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.fs.lookup(parent, name) {
                Ok(again) if again.ino == st.ino => {
                    let extra = {
                        let mut m = self.lookups.shard(st.ino.0).lock();
                        match m.get_mut(&st.ino.0) {
                            Some(l) => {
                                l.count += 1;
                                Some(release)
                            }
                            None => {
                                m.insert(st.ino.0, Lookups { count: 1, release });
                                None
                            }
                        }
                    };
                    if let Some(r) = extra {
                        r(&self.fs); // another thread pinned it meanwhile
                    }
                    return Ok(again);
                }
                Ok(other) => {
                    release(&self.fs);
                    st = other;
                }
                Err(e) => {
                    release(&self.fs);
                    return Err(e);
                }
            }
        }
        log(format!("lookup of `{}` in inode {} kept changing; answered EIO", String::from_utf8_lossy(name), parent.0));
        Err(Errno::EIO)
    }

    /// Drop `n` kernel references; the last one releases the pin.
    pub(crate) fn drop_refs(&self, ino: u64, n: u64) {
        if ino == InodeNo::ROOT.0 {
            return;
        }
        let release = {
            let mut m = self.lookups.shard(ino).lock();
            match m.get_mut(&ino) {
                Some(l) if l.count > n => {
                    l.count -= n;
                    None
                }
                Some(_) => m.remove(&ino).map(|l| l.release),
                None => {
                    log(format!("forget of inode {ino} the kernel was never given"));
                    None
                }
            }
        };
        if let Some(r) = release {
            r(&self.fs);
        }
    }

    // ---- handles ----------------------------------------------------------

    fn new_handle(&self, ino: InodeNo, file: bool) -> FsResult<u64> {
        let release = pin(&self.fs, ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let file = file.then_some(ino);
        if let Some(ino) = file {
            self.kernel_files.opened(ino);
        }
        self.handles.shard(fh).lock().insert(fh, Handle { release, file });
        Ok(fh)
    }

    fn drop_handle(&self, fh: u64) {
        let h = self.handles.shard(fh).lock().remove(&fh);
        match h {
            Some(h) => {
                if let Some(ino) = h.file {
                    self.kernel_files.closed(ino);
                }
                (h.release)(&self.fs)
            }
            None => log(format!("release of unknown file handle {fh}")),
        }
    }

    pub(crate) fn open_flags(&self) -> FopenFlags {
        // No FLUSH at close: nothing is buffered here (every write reached
        // the pool when it returned) and locks are the kernel's. With the
        // writeback cache the kernel still flushes its dirty pages.
        let mut f = FopenFlags::FOPEN_NOFLUSH;
        if self.set.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        } else if self.set.keep_cache {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        f
    }

    // ---- new nodes ----------------------------------------------------------

    /// Owner and permission bits of a new node in `parent`.
    fn new_owner(&self, req: Caller, parent: InodeNo, mode: u32, umask: u32, dir: bool) -> FsResult<(u32, u32, u32)> {
        let p = self.fs.getattr(parent)?;
        let uid = self.set.uid.unwrap_or(req.uid);
        let mut perm = mode & 0o7777 & !umask & !self.set.umask;
        let gid = if p.perm & libc::S_ISGID != 0 {
            if dir {
                perm |= libc::S_ISGID;
            }
            p.gid
        } else {
            self.set.gid.unwrap_or(req.gid)
        };
        Ok((uid, gid, perm))
    }

    #[allow(clippy::too_many_arguments)] // the FUSE request's own fields
    fn make_node(
        &self,
        req: Caller,
        parent: InodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        umask: u32,
        target: Option<&[u8]>,
        rdev: u64,
    ) -> FsResult<Stat> {
        self.writable()?;
        self.test_hook(name);
        let (uid, gid, mut perm) = self.new_owner(req, parent, mode, umask, kind == FileType::Directory)?;
        if kind == FileType::Symlink {
            perm = 0o777; // as on Linux: the mode of a symlink means nothing
        }
        let spec = NodeSpec { kind, perm, uid, gid, symlink_target: target, rdev };
        let st = self.fs.create_node(parent, name.as_bytes(), &spec)?;
        self.count_entry(parent, name.as_bytes(), st)
    }

    /// Release everything the kernel still holds (at unmount; the kernel
    /// does not send every forget then).
    pub(crate) fn release_all(&self) -> (usize, usize) {
        let handles = self.handles.drain_all();
        let nh = handles.len();
        for h in handles {
            if let Some(ino) = h.file {
                self.kernel_files.closed(ino);
            }
            (h.release)(&self.fs);
        }
        let lookups = self.lookups.drain_all();
        let nl = lookups.len();
        for l in lookups {
            (l.release)(&self.fs);
        }
        (nh, nl)
    }

    /// Directory listing shared by readdir and readdirplus: calls `emit`
    /// for each entry from `offset` on until it returns true (buffer full).
    pub(crate) fn list(
        &self,
        dir: InodeNo,
        offset: u64,
        mut emit: impl FnMut(InodeNo, u64, FileType, &[u8]) -> bool,
    ) -> FsResult<()> {
        let mut cookie = offset.saturating_sub(2);
        // The first batch comes before the dots, so that a removed
        // directory answers ENOENT as Linux does.
        let mut batch = self.fs.readdir_ino(dir, cookie, 128)?;
        if offset == 0 && emit(dir, 1, FileType::Directory, b".") {
            return Ok(());
        }
        if offset <= 1 {
            let parent = self.fs.lookup(dir, b"..").map(|s| s.ino).unwrap_or(dir);
            if emit(parent, 2, FileType::Directory, b"..") {
                return Ok(());
            }
        }
        loop {
            if batch.is_empty() {
                return Ok(());
            }
            for e in &batch {
                if emit(e.ino, e.next_cookie + 2, e.kind, &e.name) {
                    return Ok(());
                }
                cookie = e.next_cookie;
            }
            batch = self.fs.readdir_ino(dir, cookie, 128)?;
        }
    }
}

/// The handlers, one per FUSE request kind, each returning its answer.
impl Core {
    /// Whether a missed lookup is answered with a negative entry, which the
    /// kernel caches for `negative_timeout`.
    pub(crate) fn negative_entries(&self) -> bool {
        !self.set.negative_ttl.is_zero()
    }

    pub(crate) fn lookup(&self, parent: InodeNo, name: &OsStr) -> FsResult<Stat> {
        self.test_hook(name);
        self.fs.lookup(parent, name.as_bytes()).and_then(|st| self.count_entry(parent, name.as_bytes(), st))
    }

    pub(crate) fn getattr(&self, ino: InodeNo) -> FsResult<Stat> {
        self.fs.getattr(ino)
    }

    /// `kill`: the kernel asks the daemon to drop the set-user-ID and
    /// set-group-ID bits for this caller as part of a truncate by a caller
    /// without CAP_FSETID or a chown of anything but a directory, by
    /// anyone (Linux drops them on every chown, root's too;
    /// FUSE_HANDLE_KILLPRIV_V2, below).
    pub(crate) fn setattr(&self, ino: InodeNo, set: &SetAttr, kill: Option<Caller>) -> FsResult<Stat> {
        if self.trace {
            log(format!("setattr ino {} {set:?} kill {kill:?}", ino.0));
        }
        self.writable()?;
        let mut set = *set;
        let chown = set.uid.is_some() || set.gid.is_some();
        if set == SetAttr::default() {
            // Nothing to set: what the kernel sends for chown(-1, -1),
            // which changes ctime on Linux: name the current owner, as the
            // path API does. The kernel sends the same request after it
            // removed `security.capability` before a write, where no
            // set-ID bit may go, so none is taken here (Linux's chown(-1,
            // -1) would take them; docs/FUSE.md).
            set.uid = Some(self.fs.getattr(ino)?.uid);
        }
        if let Some(who) = kill.filter(|_| (chown || set.size.is_some()) && set.perm.is_none()) {
            let st = self.fs.getattr(ino)?;
            if st.kind != FileType::Directory {
                set.perm = killed_perm(&st, who, chown);
            }
        }
        if set.size.is_none() {
            return self.fs.setattr(ino, &set);
        }
        self.change(ino, || self.fs.setattr(ino, &set), |_| Changed::Whole)
    }

    /// Drop the set-ID bits as Linux does when a caller without
    /// CAP_FSETID writes or truncates (see [`killed_perm`]). With
    /// FUSE_HANDLE_KILLPRIV_V2 the kernel leaves this to the daemon and says
    /// when (a flag on the write, truncate or open): in exchange it stops
    /// asking for `security.capability` before every write, one round trip
    /// of two.
    fn kill_suidgid(&self, ino: InodeNo, who: Caller) -> FsResult<()> {
        let st = self.fs.getattr(ino)?;
        if let Some(perm) = killed_perm(&st, who, false) {
            self.fs.setattr(ino, &SetAttr { perm: Some(perm), ..SetAttr::default() })?;
            // The kernel still caches the old mode.
            self.forget_attrs(ino);
        }
        Ok(())
    }

    pub(crate) fn readlink(&self, ino: InodeNo) -> FsResult<Vec<u8>> {
        self.fs.readlink_ino(ino)
    }

    pub(crate) fn mknod(
        &self,
        req: Caller,
        parent: InodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> FsResult<Stat> {
        // Regular files, FIFOs, sockets and device nodes (the kernel
        // checked the type and CAP_MKNOD before asking).
        let k = match FileType::from_mode(mode) {
            _ if mode & libc::S_IFMT == 0 => FileType::Regular,
            Some(FileType::Directory) => return Err(Errno::EPERM),
            Some(FileType::Symlink) | None => return Err(Errno::EINVAL),
            Some(k) => k,
        };
        self.make_node(req, parent, name, k, mode, umask, None, u64::from(rdev))
    }

    pub(crate) fn mkdir(&self, req: Caller, parent: InodeNo, name: &OsStr, mode: u32, umask: u32) -> FsResult<Stat> {
        self.make_node(req, parent, name, FileType::Directory, mode, umask, None, 0)
    }

    pub(crate) fn remove(&self, parent: InodeNo, name: &OsStr, dir: bool) -> FsResult<()> {
        self.writable()?;
        self.fs.remove(parent, name.as_bytes(), dir)
    }

    pub(crate) fn symlink(&self, req: Caller, parent: InodeNo, name: &OsStr, target: &[u8]) -> FsResult<Stat> {
        self.make_node(req, parent, name, FileType::Symlink, 0o777, 0, Some(target), 0)
    }

    /// `flags`: the RENAME_* bits of renameat2.
    pub(crate) fn rename(
        &self,
        parent: InodeNo,
        name: &OsStr,
        newparent: InodeNo,
        newname: &OsStr,
        flags: u32,
    ) -> FsResult<()> {
        let how = match flags {
            0 => RenameFlags::Replace,
            libc::RENAME_NOREPLACE => RenameFlags::NoReplace,
            libc::RENAME_EXCHANGE => RenameFlags::Exchange,
            _ => return Err(Errno::EINVAL), // RENAME_WHITEOUT and combinations
        };
        self.writable()?;
        self.fs.rename_at(parent, name.as_bytes(), newparent, newname.as_bytes(), how)
    }

    pub(crate) fn link(&self, ino: InodeNo, newparent: InodeNo, newname: &OsStr) -> FsResult<Stat> {
        self.writable()?;
        let st = self.fs.link_at(ino, newparent, newname.as_bytes())?;
        self.count_entry(newparent, newname.as_bytes(), st)
    }

    /// Open a regular file: its handle. `kill`: the caller of an open with
    /// O_TRUNC that lacks CAP_FSETID (see [`Core::kill_suidgid`]).
    pub(crate) fn open(&self, ino: InodeNo, flags: i32, kill: Option<Caller>) -> FsResult<u64> {
        let st = self.fs.getattr(ino)?;
        match st.kind {
            FileType::Directory => return Err(Errno::EISDIR),
            FileType::Symlink => return Err(Errno::ELOOP),
            FileType::Regular => {}
            // The kernel opens FIFOs and device nodes itself; it never
            // asks the file system.
            _ => return Err(Errno::ENXIO),
        }
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.writable()?;
        }
        if let Some(who) = kill.filter(|_| flags & libc::O_TRUNC != 0) {
            self.writable()?;
            self.kill_suidgid(st.ino, who)?;
        }
        if let Some(n) = self.neighbour.get() {
            n.opened(st.ino);
        }
        self.new_handle(st.ino, true)
    }

    /// Read into `buf` (the reply's own buffer where the transport has
    /// one): the bytes read.
    pub(crate) fn read(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        self.before_io(ino);
        self.fs.read_ino(ino, offset, buf)
    }

    /// `write_flags` as the kernel sent them; FUSE_WRITE_KILL_SUIDGID asks
    /// to drop the set-ID bits for `who` first (see [`Core::kill_suidgid`]).
    pub(crate) fn write(
        &self,
        who: Caller,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        write_flags: u32,
    ) -> FsResult<usize> {
        if self.trace {
            log(format!(
                "write ino {} off {offset:#x} len {:#x} end {:#x} flags {write_flags:#x}",
                ino.0,
                data.len(),
                offset + data.len() as u64
            ));
        }
        self.writable()?;
        if write_flags & WRITE_KILL_SUIDGID != 0 && !data.is_empty() {
            self.kill_suidgid(ino, who)?;
        }
        self.change(ino, || self.fs.write_ino(ino, offset, data), |&put| Changed::Range { offset, len: put as u64 })
    }

    /// COPY_FILE_RANGE: the copy made inside the pool, one request in
    /// place of a READ and a WRITE per piece (what the kernel falls back to
    /// when a daemon answers ENOSYS). The kernel has checked the
    /// descriptors, the file types, the flags and the ranges; the set-ID
    /// bits of the destination are dropped for `who` as a write drops them
    /// (with FUSE_HANDLE_KILLPRIV_V2 the kernel leaves that to the daemon).
    pub(crate) fn copy_file_range(
        &self,
        who: Caller,
        src: InodeNo,
        src_offset: u64,
        dst: InodeNo,
        dst_offset: u64,
        len: u64,
    ) -> FsResult<usize> {
        self.writable()?;
        if len > 0 {
            self.kill_suidgid(dst, who)?;
        }
        self.before_io(src);
        let copied = self.change(
            dst,
            || self.fs.copy_range_ino(src, src_offset, dst, dst_offset, len),
            |&n| Changed::Range { offset: dst_offset, len: n as u64 },
        );
        if self.trace {
            log(format!(
                "copy_file_range ino {} off {src_offset:#x} -> ino {} off {dst_offset:#x} len {len:#x}: {copied:?}",
                src.0, dst.0
            ));
        }
        copied
    }

    pub(crate) fn release(&self, fh: u64) {
        self.drop_handle(fh);
    }

    /// The engine's one durability entry point (the commit point of the
    /// fsync-atomic and buffered modes). The kernel sends FSYNC for fsync,
    /// fdatasync, msync(MS_SYNC) and after every write through an
    /// O_SYNC/O_DSYNC descriptor (generic_write_sync); tests/modes.rs
    /// checks each through a crash.
    pub(crate) fn fsync(&self, ino: InodeNo, datasync: bool) -> FsResult<()> {
        if self.trace {
            log(format!("fsync ino {} datasync {datasync}", ino.0));
        }
        self.before_io(ino);
        self.fs.fsync_ino(ino, datasync)
    }

    pub(crate) fn opendir(&self, ino: InodeNo) -> FsResult<u64> {
        let st = self.fs.getattr(ino)?;
        if st.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.new_handle(st.ino, false)
    }

    /// readdirplus: `add(stat, offset, name)` appends one entry and says
    /// whether the reply was full (the entry did not fit). Every entry but
    /// the dots counts a kernel reference once sent.
    pub(crate) fn readdirplus(
        &self,
        dir: InodeNo,
        offset: u64,
        mut add: impl FnMut(&Stat, u64, &[u8]) -> bool,
    ) -> FsResult<()> {
        self.list(dir, offset, |ino, off, _k, name| {
            let dots = name == b"." || name == b"..";
            let st = if dots {
                self.fs.getattr(ino)
            } else {
                self.fs.getattr(ino).and_then(|st| self.count_entry(dir, name, st))
            };
            let Ok(st) = st else {
                return false; // removed meanwhile: skip it
            };
            let full = add(&st, off, name);
            if full && !dots {
                self.drop_refs(st.ino.0, 1); // not sent after all
            }
            full
        })
    }

    pub(crate) fn statfs(&self) -> StatFs {
        self.fs.fs_stats()
    }

    // Extended attributes go to the engine. With `noxattr`, ENOSYS makes
    // the kernel remember (no_getxattr, ...) and answer EOPNOTSUPP itself,
    // which saves the getxattr("security.capability") round trip it makes
    // before a write.
    pub(crate) fn setxattr(&self, ino: InodeNo, name: &OsStr, value: &[u8], flags: i32) -> FsResult<()> {
        if !self.set.xattr {
            return Err(Errno(libc::ENOSYS));
        }
        // POSIX ACLs: an access ACL equivalent to a mode (owner, group and
        // other entries only: what `cp -a`, `tar` and `rsync -A` set on
        // files that have no extended ACL) is that mode, and the engine sets
        // it as chmod would; any other ACL, and default ACLs, are refused
        // with EOPNOTSUPP, as a file system without ACLs does (the kernel
        // never evaluates ACLs here: no FUSE_POSIX_ACL). Accepting the
        // equivalent ones saves `cp -a` its chmod fallback, one request per
        // file. The kernel keeps serving the old mode from its attribute
        // cache (a setxattr does not refresh it), so it is told to forget
        // the inode's attributes.
        let acl_access = name.as_bytes() == b"system.posix_acl_access";
        if name.as_bytes().starts_with(b"system.posix_acl_") && !acl_access {
            return Err(Errno::EOPNOTSUPP);
        }
        let mode = if flags & libc::XATTR_CREATE != 0 {
            XattrSetMode::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrSetMode::Replace
        } else {
            XattrSetMode::Any
        };
        self.writable()?;
        self.fs.setxattr(ino, name.as_bytes(), value, mode)?;
        if acl_access {
            self.forget_attrs(ino);
        }
        Ok(())
    }

    /// Have the kernel ask again for the attributes of `ino` (changed by
    /// something its cache did not see). Only the attributes (offset -1):
    /// the caller may hold page locks, so dropping cached pages here could
    /// deadlock.
    fn forget_attrs(&self, ino: InodeNo) {
        if let Some(n) = self.notifier.get() {
            if let Err(e) = n.inval_inode(INodeNo(ino.0), -1, 0) {
                log(format!("cannot invalidate the kernel's attributes of inode {}: {e}", ino.0));
            }
        }
    }

    pub(crate) fn getxattr(&self, ino: InodeNo, name: &OsStr, size: u32) -> FsResult<XattrOut> {
        if !self.set.xattr {
            return Err(Errno(libc::ENOSYS));
        }
        let v = self.fs.getxattr(ino, name.as_bytes())?;
        xattr_out(v, size)
    }

    pub(crate) fn listxattr(&self, ino: InodeNo, size: u32) -> FsResult<XattrOut> {
        if !self.set.xattr {
            return Err(Errno(libc::ENOSYS));
        }
        let mut list = Vec::new();
        for n in self.fs.listxattr(ino)? {
            list.extend_from_slice(&n);
            list.push(0);
        }
        xattr_out(list, size)
    }

    pub(crate) fn removexattr(&self, ino: InodeNo, name: &OsStr) -> FsResult<()> {
        if !self.set.xattr {
            return Err(Errno(libc::ENOSYS));
        }
        self.writable()?;
        self.fs.removexattr(ino, name.as_bytes())
    }

    /// Only called without default_permissions: the classic owner / group /
    /// other check on the caller's primary ids.
    pub(crate) fn access(&self, req: Caller, ino: InodeNo, mask: u32) -> FsResult<()> {
        let st = self.fs.getattr(ino)?;
        let want = mask & 7;
        if want == 0 {
            return Ok(());
        }
        if want & libc::W_OK as u32 != 0 {
            self.writable()?;
        }
        let have = if req.uid == 0 {
            let any_x = st.perm & 0o111 != 0 || st.kind == FileType::Directory;
            6 | if any_x { 1 } else { 0 }
        } else if req.uid == st.uid {
            (st.perm >> 6) & 7
        } else if req.gid == st.gid {
            (st.perm >> 3) & 7
        } else {
            st.perm & 7
        };
        if want & !have == 0 {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Create and open a regular file: its attributes and handle.
    /// `kill_suidgid`: an unprivileged O_TRUNC of a file that exists.
    #[allow(clippy::too_many_arguments)] // the FUSE request's own fields
    pub(crate) fn create(
        &self,
        req: Caller,
        p: InodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        kill_suidgid: bool,
    ) -> FsResult<(Stat, u64)> {
        if mode & libc::S_IFMT != 0 && mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::EINVAL);
        }
        let st = match self.make_node(req, p, name, FileType::Regular, mode, umask, None, 0) {
            Ok(st) => st,
            // Made by someone else since the kernel's lookup: open it.
            Err(Errno::EEXIST) if flags & libc::O_EXCL == 0 => {
                let st = self.fs.lookup(p, name.as_bytes())?;
                if st.kind == FileType::Directory {
                    return Err(Errno::EISDIR);
                }
                let st = self.count_entry(p, name.as_bytes(), st)?;
                if flags & libc::O_TRUNC != 0 && (st.size != 0 || kill_suidgid) {
                    let perm = if kill_suidgid { killed_perm(&st, req, false) } else { None };
                    let t = SetAttr { size: Some(0), perm, ..SetAttr::default() };
                    if let Err(e) = self.fs.setattr(st.ino, &t) {
                        self.drop_refs(st.ino.0, 1);
                        return Err(e);
                    }
                }
                st
            }
            Err(e) => return Err(e),
        };
        match self.new_handle(st.ino, true) {
            Ok(fh) => Ok((st, fh)),
            Err(e) => {
                self.drop_refs(st.ino.0, 1);
                Err(e)
            }
        }
    }

    /// fallocate. The kernel sends no KILL_SUIDGID flag with it (its
    /// `file_modified` leaves the set-ID bits to the daemon under
    /// FUSE_HANDLE_KILLPRIV_V2 and says nothing), so the daemon drops them
    /// itself for a caller other than root, as Linux does for a caller
    /// without CAP_FSETID, once the call's arguments have passed their
    /// checks.
    pub(crate) fn fallocate(&self, who: Caller, ino: InodeNo, offset: u64, length: u64, mode: i32) -> FsResult<()> {
        if self.trace {
            log(format!("fallocate ino {} off {offset:#x} len {length:#x} mode {mode:#x}", ino.0));
        }
        // The kernel drops its cached pages of a punched or zeroed range
        // itself.
        let how = FallocateMode::from_libc(mode)?;
        self.writable()?;
        self.change(ino, || self.fallocate_as(who, ino, how, offset, length), |_| Changed::Whole)
    }

    fn fallocate_as(&self, who: Caller, ino: InodeNo, how: FallocateMode, offset: u64, length: u64) -> FsResult<()> {
        if who.uid != 0 {
            let st = self.fs.getattr(ino)?;
            if st.perm & 0o6000 != 0 {
                // The engine takes the bits away after its own checks; the
                // caller's groups matter only for set-group-ID without
                // group execute.
                let in_group = st.perm & 0o2010 == 0o2000 && who.in_group(st.gid);
                let groups = [st.gid];
                let c = Credentials::user(who.uid, who.gid, if in_group { &groups } else { &[] });
                return self.fs.fallocate_ino_as(ino, how, offset, length, &c).inspect(|_| self.forget_attrs(ino));
            }
        }
        self.fs.fallocate_ino(ino, how, offset, length)
    }

    /// The kernel asks only for SEEK_DATA / SEEK_HOLE (it handles the others
    /// itself); the engine answers at page granularity.
    pub(crate) fn lseek(&self, ino: InodeNo, offset: i64, whence: i32) -> FsResult<i64> {
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        if offset < 0 {
            return Err(Errno::ENXIO);
        }
        self.fs.seek_data_hole_ino(ino, offset as u64, data).map(|o| o as i64)
    }

    /// The INIT capabilities both transports want, given what the kernel
    /// offers (`offered`); the second value says whether FUSE over io_uring
    /// is among them.
    pub(crate) fn init_flags(&self, offered: InitFlags) -> (InitFlags, bool) {
        let mut want =
            InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_CACHE_SYMLINKS | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        match self.set.readdirplus {
            ReaddirPlus::Off => {}
            ReaddirPlus::On => want |= InitFlags::FUSE_DO_READDIRPLUS,
            ReaddirPlus::Auto => want |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
        }
        if self.set.writeback_cache {
            if offered.contains(InitFlags::FUSE_WRITEBACK_CACHE) {
                want |= InitFlags::FUSE_WRITEBACK_CACHE;
            } else {
                log("the kernel does not offer the writeback cache; writes go through");
            }
        }
        let uring = match self.set.transport {
            Transport::Dev => false,
            Transport::Auto | Transport::Uring => offered.contains(InitFlags::FUSE_OVER_IO_URING),
        };
        if uring {
            want |= InitFlags::FUSE_OVER_IO_URING;
        }
        (want & offered, uring)
    }
}

/// `fuse_write_in.write_flags`: drop the set-ID bits (FUSE_WRITE_KILL_SUIDGID).
pub(crate) const WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// The permission bits left when the kernel asks the daemon to take the
/// set-ID bits of `st` away for `who` (FUSE_HANDLE_KILLPRIV_V2), by Linux
/// 6's rule (`perm::set_id_bits_left`): set-user-ID always; set-group-ID
/// when the group may execute the file or `who` is not in its group. The
/// kernel asks for a write or truncate only when the caller lacks
/// CAP_FSETID; for a `chown` it asks whoever the caller is, and root,
/// privileged, keeps set-group-ID on a file its group may not execute.
fn killed_perm(st: &Stat, who: Caller, chown: bool) -> Option<u32> {
    // Group membership is looked up only where it decides something.
    let in_group_or_capable = st.perm & 0o2010 != 0o2000 || (chown && who.uid == 0) || who.in_group(st.gid);
    perm::set_id_bits_left(st.perm, in_group_or_capable)
}

fn xattr_out(v: Vec<u8>, size: u32) -> FsResult<XattrOut> {
    if size == 0 {
        Ok(XattrOut::Size(v.len() as u32))
    } else if v.len() <= size as usize {
        Ok(XattrOut::Data(v))
    } else {
        Err(Errno::ERANGE)
    }
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

fn reply_entry(core: &Core, reply: ReplyEntry, r: FsResult<Stat>) {
    match r {
        Ok(st) => reply.entry_with_ttls(&core.set.attr_ttl, &core.set.entry_ttl, &attr(&st), Generation(0)),
        Err(e) => reply.error(err(e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(err(e)),
    }
}

fn reply_xattr(reply: ReplyXattr, r: FsResult<XattrOut>) {
    match r {
        Ok(XattrOut::Size(n)) => reply.size(n),
        Ok(XattrOut::Data(v)) => reply.data(&v),
        Err(e) => reply.error(err(e)),
    }
}

/// The /dev/fuse transport: `fuser` decodes each request and calls these
/// methods, which call the [`Core`] handler and encode its answer.
impl Filesystem for FerriteFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(crate::daemon::MAX_WRITE as u32);
        let _ = config.set_max_background(64);
        let (want, uring) = self.core.init_flags(config.capabilities());
        for flag in want.iter() {
            let _ = config.add_capabilities(flag);
        }
        self.core.uring_granted.store(uring, Ordering::Release);
        Ok(())
    }

    fn destroy(&mut self) {
        // Nothing here: the io_uring threads may still be serving a
        // RELEASE that the kernel sent, asynchronously, just before the
        // DESTROY. What the kernel still holds is released when the last
        // serving thread lets go of the core (`Drop for Core`).
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let c = &self.core;
        c.guard("lookup", || {
            let r = c.lookup(node_no(parent), name);
            if r == Err(Errno::ENOENT) && c.negative_entries() {
                // A negative entry (node 0): the kernel remembers the miss.
                let none = FileAttr { ino: INodeNo(0), ..attr(&NO_STAT) };
                reply.entry_with_ttls(&Duration::ZERO, &c.set.negative_ttl, &none, Generation(0));
                return;
            }
            reply_entry(c, reply, r);
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.guard("forget", || self.core.drop_refs(ino.0, nlookup))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let c = &self.core;
        c.guard("getattr", || match c.getattr(node_no(ino)) {
            Ok(st) => reply.attr(&c.set.attr_ttl, &attr(&st)),
            Err(e) => reply.error(err(e)),
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let c = &self.core;
        c.guard("setattr", || {
            let set = SetAttr {
                perm: mode.map(|m| m & 0o7777),
                uid,
                gid,
                size,
                atime: time_set(atime),
                mtime: time_set(mtime),
            };
            // fuser does not pass FATTR_KILL_SUIDGID. The kernel sets it
            // on every chown of a non-directory and on a truncate by a
            // caller without CAP_FSETID; an unprivileged caller stands for
            // the latter.
            let kill = uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0);
            match c.setattr(node_no(ino), &set, kill.then(|| caller(req))) {
                Ok(st) => reply.attr(&c.set.attr_ttl, &attr(&st)),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.core.guard("readlink", || match self.core.readlink(node_no(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(err(e)),
        })
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let c = &self.core;
        c.guard("mknod", || reply_entry(c, reply, c.mknod(caller(req), node_no(parent), name, mode, umask, rdev)))
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let c = &self.core;
        c.guard("mkdir", || reply_entry(c, reply, c.mkdir(caller(req), node_no(parent), name, mode, umask)))
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.core.guard("unlink", || reply_empty(reply, self.core.remove(node_no(parent), name, false)))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.core.guard("rmdir", || reply_empty(reply, self.core.remove(node_no(parent), name, true)))
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let c = &self.core;
        c.guard("symlink", || {
            let r = c.symlink(caller(req), node_no(parent), link_name, target.as_os_str().as_bytes());
            reply_entry(c, reply, r)
        })
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.core.guard("rename", || {
            reply_empty(reply, self.core.rename(node_no(parent), name, node_no(newparent), newname, flags.bits()))
        })
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let c = &self.core;
        c.guard("link", || reply_entry(c, reply, c.link(node_no(ino), node_no(newparent), newname)))
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let c = &self.core;
        // fuser does not pass FUSE_OPEN_KILL_SUIDGID: as for setattr.
        c.guard("open", || match c.open(node_no(ino), flags.0, (req.uid() != 0).then(|| caller(req))) {
            Ok(fh) => reply.opened(FileHandle(fh), c.open_flags()),
            Err(e) => reply.error(err(e)),
        })
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.core.guard("read", || {
            READ_BUF.with(|b| {
                let mut buf = b.borrow_mut();
                if buf.len() < size as usize {
                    buf.resize(size as usize, 0);
                }
                let buf = &mut buf[..size as usize];
                match self.core.read(node_no(ino), offset, buf) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(err(e)),
                }
            })
        })
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.core.guard("write", || {
            match self.core.write(caller(req), node_no(ino), offset, data, write_flags.bits()) {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Nothing is buffered here: every write reached the pool already.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.core.guard("release", || {
            self.core.release(fh.0);
            reply.ok();
        })
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.core.guard("fsync", || reply_empty(reply, self.core.fsync(node_no(ino), datasync)))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.core.guard("opendir", || match self.core.opendir(node_no(ino)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        })
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.core.guard("readdir", || {
            let r = self.core.list(node_no(ino), offset, |ino, off, k, name| {
                reply.add(INodeNo(ino.0), off, kind(k), OsStr::from_bytes(name))
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let c = &self.core;
        c.guard("readdirplus", || {
            let ttl = c.set.entry_ttl.min(c.set.attr_ttl);
            let r = c.readdirplus(node_no(ino), offset, |st, off, name| {
                reply.add(INodeNo(st.ino.0), off, OsStr::from_bytes(name), &ttl, &attr(st), Generation(0))
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.core.guard("releasedir", || {
            self.core.release(fh.0);
            reply.ok();
        })
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.core.guard("fsyncdir", || reply_empty(reply, self.core.fsync(node_no(ino), datasync)))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.core.guard("statfs", || {
            let s = self.core.statfs();
            reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            );
        })
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.core.guard("setxattr", || reply_empty(reply, self.core.setxattr(node_no(ino), name, value, flags)))
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.core.guard("getxattr", || reply_xattr(reply, self.core.getxattr(node_no(ino), name, size)))
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.core.guard("listxattr", || reply_xattr(reply, self.core.listxattr(node_no(ino), size)))
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.core.guard("removexattr", || reply_empty(reply, self.core.removexattr(node_no(ino), name)))
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.core
            .guard("access", || reply_empty(reply, self.core.access(caller(req), node_no(ino), mask.bits() as u32)))
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let c = &self.core;
        c.guard("create", || match c.create(caller(req), node_no(parent), name, mode, umask, flags, req.uid() != 0) {
            Ok((st, fh)) => reply.created(
                &c.set.entry_ttl.min(c.set.attr_ttl),
                &attr(&st),
                Generation(0),
                FileHandle(fh),
                c.open_flags(),
            ),
            Err(e) => reply.error(err(e)),
        })
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.core.guard("fallocate", || {
            reply_empty(reply, self.core.fallocate(caller(req), node_no(ino), offset, length, mode))
        })
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.core.guard("copy_file_range", || {
            match self.core.copy_file_range(caller(req), node_no(ino_in), offset_in, node_no(ino_out), offset_out, len)
            {
                Ok(n) => reply.written(u32::try_from(n).expect("a copy is at most ferrite::COPY_BYTES_MAX bytes")),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.core.guard("lseek", || match self.core.lseek(node_no(ino), offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(err(e)),
        })
    }
}
