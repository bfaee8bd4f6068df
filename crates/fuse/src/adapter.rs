//! The FUSE request handlers: each one translates a kernel request into one
//! (rarely two) inode-level calls of the engine and its answer into a reply.
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
//!   kernel's (`default_permissions`).
//! - **No panics escape.** Every handler runs under `catch_unwind`; a panic
//!   is logged and the request answered with EIO (the unsent reply's drop
//!   sends it), and the daemon keeps serving.

use crate::options::{MountConfig, ReaddirPlus};
use ferrite::{
    Errno, FallocateMode, Ferrite, FileType, FsResult, InodeNo, NodeSpec, RenameFlags, SetAttr, Stat, TimeSet,
    TimeSpec, XattrSetMode,
};
use fuser::{
    AccessFlags, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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
}

/// What the adapter needs from the mount options.
#[derive(Clone, Debug)]
struct Settings {
    attr_ttl: Duration,
    entry_ttl: Duration,
    negative_ttl: Duration,
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
}

/// The FUSE file system: a thin adapter over one mounted `Ferrite`.
pub struct FerriteFuse {
    fs: Arc<Ferrite>,
    set: Settings,
    lookups: Sharded<Lookups>,
    handles: Sharded<Handle>,
    next_fh: AtomicU64,
    /// Testing hook (`FERRITE_FUSE_TEST_PANIC=name`): a lookup or create of
    /// this name panics inside the handler, to prove the daemon survives.
    panic_on: Option<Vec<u8>>,
    /// `FERRITE_FUSE_TRACE=1`: log every request that changes data.
    trace: bool,
}

fn err(e: Errno) -> fuser::Errno {
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
            Err(e) => TimeSpec::from_ns(-(e.duration().as_nanos().min(i64::MAX as u128) as i64)),
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

fn attr(st: &Stat) -> FileAttr {
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
        FerriteFuse {
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
            },
            fs,
            lookups: Sharded::new(),
            handles: Sharded::new(),
            next_fh: AtomicU64::new(1),
            panic_on: std::env::var_os("FERRITE_FUSE_TEST_PANIC").map(|v| v.as_bytes().to_vec()),
            trace: std::env::var_os("FERRITE_FUSE_TRACE").is_some_and(|v| v == "1"),
        }
    }

    /// Run one handler; a panic inside it is logged and becomes EIO.
    fn guard(&self, op: &'static str, f: impl FnOnce()) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            log(format!("internal error in {op}: {}; answered EIO, the mount stays up", panic_text(&*p)));
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
    fn drop_refs(&self, ino: u64, n: u64) {
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

    fn new_handle(&self, ino: InodeNo) -> FsResult<u64> {
        let release = pin(&self.fs, ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.shard(fh).lock().insert(fh, Handle { release });
        Ok(fh)
    }

    fn drop_handle(&self, fh: u64) {
        let h = self.handles.shard(fh).lock().remove(&fh);
        match h {
            Some(h) => (h.release)(&self.fs),
            None => log(format!("release of unknown file handle {fh}")),
        }
    }

    fn open_flags(&self) -> FopenFlags {
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
    fn new_owner(&self, req: &Request, parent: InodeNo, mode: u32, umask: u32, dir: bool) -> FsResult<(u32, u32, u32)> {
        let p = self.fs.getattr(parent)?;
        let uid = self.set.uid.unwrap_or(req.uid());
        let mut perm = mode & 0o7777 & !umask & !self.set.umask;
        let gid = if p.perm & libc::S_ISGID != 0 {
            if dir {
                perm |= libc::S_ISGID;
            }
            p.gid
        } else {
            self.set.gid.unwrap_or(req.gid())
        };
        Ok((uid, gid, perm))
    }

    #[allow(clippy::too_many_arguments)] // the FUSE request's own fields
    fn make_node(
        &self,
        req: &Request,
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

    fn reply_entry(&self, reply: ReplyEntry, r: FsResult<Stat>) {
        match r {
            Ok(st) => reply.entry_with_ttls(&self.set.attr_ttl, &self.set.entry_ttl, &attr(&st), Generation(0)),
            Err(e) => reply.error(err(e)),
        }
    }

    /// Release everything the kernel still holds (at unmount; the kernel
    /// does not send every forget then).
    pub(crate) fn release_all(&self) -> (usize, usize) {
        let handles = self.handles.drain_all();
        let nh = handles.len();
        for h in handles {
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
    fn list(
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

impl Filesystem for FerriteFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_CACHE_SYMLINKS;
        match self.set.readdirplus {
            ReaddirPlus::Off => {}
            ReaddirPlus::On => want |= InitFlags::FUSE_DO_READDIRPLUS,
            ReaddirPlus::Auto => want |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
        }
        if self.set.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        for flag in want.iter() {
            if config.add_capabilities(flag).is_err() {
                if flag == InitFlags::FUSE_WRITEBACK_CACHE {
                    log("the kernel does not offer the writeback cache; writes go through");
                }
                if flag == InitFlags::FUSE_DO_READDIRPLUS {
                    self.set.readdirplus = ReaddirPlus::Off;
                }
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // The kernel does not forget every inode at unmount: normal. Open
        // handles left mean the connection was aborted.
        let (h, _) = self.release_all();
        if h > 0 {
            log(format!("at unmount {h} file(s) were still open: released"));
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.guard("lookup", || {
            self.test_hook(name);
            let parent = node_no(parent);
            let r =
                self.fs.lookup(parent, name.as_bytes()).and_then(|st| self.count_entry(parent, name.as_bytes(), st));
            if r == Err(Errno::ENOENT) && !self.set.negative_ttl.is_zero() {
                // A negative entry (node 0): the kernel remembers the miss.
                let none = FileAttr { ino: INodeNo(0), ..attr(&NO_STAT) };
                reply.entry_with_ttls(&Duration::ZERO, &self.set.negative_ttl, &none, Generation(0));
                return;
            }
            self.reply_entry(reply, r);
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.guard("forget", || self.drop_refs(ino.0, nlookup))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.guard("getattr", || match self.fs.getattr(node_no(ino)) {
            Ok(st) => reply.attr(&self.set.attr_ttl, &attr(&st)),
            Err(e) => reply.error(err(e)),
        })
    }

    fn setattr(
        &self,
        _req: &Request,
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
        self.guard("setattr", || {
            if self.trace {
                log(format!("setattr ino {} mode {mode:?} uid {uid:?} gid {gid:?} size {size:?} atime {atime:?} mtime {mtime:?}", ino.0));
            }
            let r = self.writable().and_then(|()| {
                let set = SetAttr {
                    perm: mode.map(|m| m & 0o7777),
                    uid,
                    gid,
                    size,
                    atime: time_set(atime),
                    mtime: time_set(mtime),
                };
                self.fs.setattr(node_no(ino), &set)
            });
            match r {
                Ok(st) => reply.attr(&self.set.attr_ttl, &attr(&st)),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.guard("readlink", || match self.fs.readlink_ino(node_no(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(err(e)),
        })
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.guard("mknod", || {
            // Regular files, FIFOs, sockets and device nodes (the kernel
            // checked the type and CAP_MKNOD before asking).
            let r = match FileType::from_mode(mode) {
                _ if mode & libc::S_IFMT == 0 => Ok(FileType::Regular),
                Some(FileType::Directory) => Err(Errno::EPERM),
                Some(FileType::Symlink) | None => Err(Errno::EINVAL),
                Some(k) => Ok(k),
            }
            .and_then(|k| self.make_node(req, node_no(parent), name, k, mode, umask, None, u64::from(rdev)));
            self.reply_entry(reply, r);
        })
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.guard("mkdir", || {
            let r = self.make_node(req, node_no(parent), name, FileType::Directory, mode, umask, None, 0);
            self.reply_entry(reply, r);
        })
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guard("unlink", || {
            match self.writable().and_then(|()| self.fs.remove(node_no(parent), name.as_bytes(), false)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guard("rmdir", || {
            match self.writable().and_then(|()| self.fs.remove(node_no(parent), name.as_bytes(), true)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.guard("symlink", || {
            let t = target.as_os_str().as_bytes();
            let r = self.make_node(req, node_no(parent), link_name, FileType::Symlink, 0o777, 0, Some(t), 0);
            self.reply_entry(reply, r);
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
        self.guard("rename", || {
            let how = if flags.is_empty() {
                Ok(RenameFlags::Replace)
            } else if flags == fuser::RenameFlags::RENAME_NOREPLACE {
                Ok(RenameFlags::NoReplace)
            } else if flags == fuser::RenameFlags::RENAME_EXCHANGE {
                Ok(RenameFlags::Exchange)
            } else {
                Err(Errno::EINVAL) // RENAME_WHITEOUT and combinations
            };
            let r = self.writable().and(how).and_then(|how| {
                self.fs.rename_at(node_no(parent), name.as_bytes(), node_no(newparent), newname.as_bytes(), how)
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.guard("link", || {
            let p = node_no(newparent);
            let r = self
                .writable()
                .and_then(|()| self.fs.link_at(node_no(ino), p, newname.as_bytes()))
                .and_then(|st| self.count_entry(p, newname.as_bytes(), st));
            self.reply_entry(reply, r);
        })
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.guard("open", || {
            let r = (|| {
                let st = self.fs.getattr(node_no(ino))?;
                match st.kind {
                    FileType::Directory => return Err(Errno::EISDIR),
                    FileType::Symlink => return Err(Errno::ELOOP),
                    FileType::Regular => {}
                    // The kernel opens FIFOs and device nodes itself; it
                    // never asks the file system.
                    _ => return Err(Errno::ENXIO),
                }
                if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                    self.writable()?;
                }
                self.new_handle(st.ino)
            })();
            match r {
                Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
                Err(e) => reply.error(err(e)),
            }
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
        self.guard("read", || {
            READ_BUF.with(|b| {
                let mut buf = b.borrow_mut();
                if buf.len() < size as usize {
                    buf.resize(size as usize, 0);
                }
                let buf = &mut buf[..size as usize];
                match self.fs.read_ino(node_no(ino), offset, buf) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(err(e)),
                }
            })
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.guard("write", || {
            if self.trace {
                log(format!(
                    "write ino {} off {offset:#x} len {:#x} end {:#x} flags {_write_flags:?}",
                    ino.0,
                    data.len(),
                    offset + data.len() as u64
                ));
            }
            match self.writable().and_then(|()| self.fs.write_ino(node_no(ino), offset, data)) {
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
        self.guard("release", || {
            self.drop_handle(fh.0);
            reply.ok();
        })
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        // The engine's one durability entry point (the commit point of the
        // fsync-atomic and buffered modes). The kernel sends FSYNC for
        // fsync, fdatasync, msync(MS_SYNC) and after every write through an
        // O_SYNC/O_DSYNC descriptor (generic_write_sync); tests/modes.rs
        // checks each through a crash.
        self.guard("fsync", || {
            if self.trace {
                log(format!("fsync ino {} datasync {datasync}", ino.0));
            }
            match self.fs.fsync_ino(node_no(ino), datasync) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.guard("opendir", || {
            let r = self.fs.getattr(node_no(ino)).and_then(|st| {
                if st.kind != FileType::Directory {
                    return Err(Errno::ENOTDIR);
                }
                self.new_handle(st.ino)
            });
            match r {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.guard("readdir", || {
            let r = self.list(node_no(ino), offset, |ino, off, k, name| {
                reply.add(INodeNo(ino.0), off, kind(k), OsStr::from_bytes(name))
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.guard("readdirplus", || {
            let dir = node_no(ino);
            let ttl = self.set.entry_ttl.min(self.set.attr_ttl);
            let r = self.list(dir, offset, |ino, off, _k, name| {
                let dots = name == b"." || name == b"..";
                // The kernel counts a reference for every entry but the dots.
                let st = if dots {
                    self.fs.getattr(ino)
                } else {
                    self.fs.getattr(ino).and_then(|st| self.count_entry(dir, name, st))
                };
                let Ok(st) = st else {
                    return false; // removed meanwhile: skip it
                };
                let full = reply.add(INodeNo(st.ino.0), off, OsStr::from_bytes(name), &ttl, &attr(&st), Generation(0));
                if full && !dots {
                    self.drop_refs(st.ino.0, 1); // not sent after all
                }
                full
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.guard("releasedir", || {
            self.drop_handle(fh.0);
            reply.ok();
        })
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.guard("fsyncdir", || match self.fs.fsync_ino(node_no(ino), datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        })
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.guard("statfs", || {
            let s = self.fs.fs_stats();
            reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            );
        })
    }

    // Extended attributes go to the engine. With `noxattr`, ENOSYS makes
    // the kernel remember (no_getxattr, ...) and answer EOPNOTSUPP itself,
    // which saves the getxattr("security.capability") round trip it makes
    // before a write.
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
        if !self.set.xattr {
            return reply.error(fuser::Errno::ENOSYS);
        }
        // POSIX ACLs: the engine turns an ACL equivalent to a mode into
        // that mode, but the kernel would keep serving the old mode from
        // its attribute cache (a setxattr does not refresh it), and without
        // FUSE_POSIX_ACL it never evaluates ACLs. So refuse them as a file
        // system without ACLs does; `cp -a` and friends fall back to chmod,
        // which goes through setattr and the cache.
        if name.as_bytes().starts_with(b"system.posix_acl_") {
            return reply.error(fuser::Errno::EOPNOTSUPP);
        }
        self.guard("setxattr", || {
            let mode = if flags & libc::XATTR_CREATE != 0 {
                XattrSetMode::Create
            } else if flags & libc::XATTR_REPLACE != 0 {
                XattrSetMode::Replace
            } else {
                XattrSetMode::Any
            };
            match self.writable().and_then(|()| self.fs.setxattr(node_no(ino), name.as_bytes(), value, mode)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !self.set.xattr {
            return reply.error(fuser::Errno::ENOSYS);
        }
        self.guard("getxattr", || match self.fs.getxattr(node_no(ino), name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(fuser::Errno::ERANGE),
            Err(e) => reply.error(err(e)),
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.set.xattr {
            return reply.error(fuser::Errno::ENOSYS);
        }
        self.guard("listxattr", || match self.fs.listxattr(node_no(ino)) {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(&n);
                    list.push(0);
                }
                if size == 0 {
                    reply.size(list.len() as u32)
                } else if list.len() <= size as usize {
                    reply.data(&list)
                } else {
                    reply.error(fuser::Errno::ERANGE)
                }
            }
            Err(e) => reply.error(err(e)),
        })
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !self.set.xattr {
            return reply.error(fuser::Errno::ENOSYS);
        }
        self.guard("removexattr", || {
            match self.writable().and_then(|()| self.fs.removexattr(node_no(ino), name.as_bytes())) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Only called without default_permissions: the classic owner /
        // group / other check on the caller's primary ids.
        self.guard("access", || {
            let r = self.fs.getattr(node_no(ino)).and_then(|st| {
                let want = (mask.bits() & 7) as u32;
                if want == 0 {
                    return Ok(());
                }
                if want & libc::W_OK as u32 != 0 {
                    self.writable()?;
                }
                let have = if req.uid() == 0 {
                    let any_x = st.perm & 0o111 != 0 || st.kind == FileType::Directory;
                    6 | if any_x { 1 } else { 0 }
                } else if req.uid() == st.uid {
                    (st.perm >> 6) & 7
                } else if req.gid() == st.gid {
                    (st.perm >> 3) & 7
                } else {
                    st.perm & 7
                };
                if want & !have == 0 {
                    Ok(())
                } else {
                    Err(Errno::EACCES)
                }
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
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
        self.guard("create", || {
            let p = node_no(parent);
            let r = (|| {
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
                        if flags & libc::O_TRUNC != 0 && st.size != 0 {
                            let t = SetAttr { size: Some(0), ..SetAttr::default() };
                            if let Err(e) = self.fs.setattr(st.ino, &t) {
                                self.drop_refs(st.ino.0, 1);
                                return Err(e);
                            }
                        }
                        st
                    }
                    Err(e) => return Err(e),
                };
                match self.new_handle(st.ino) {
                    Ok(fh) => Ok((st, fh)),
                    Err(e) => {
                        self.drop_refs(st.ino.0, 1);
                        Err(e)
                    }
                }
            })();
            match r {
                Ok((st, fh)) => reply.created(
                    &self.set.entry_ttl.min(self.set.attr_ttl),
                    &attr(&st),
                    Generation(0),
                    FileHandle(fh),
                    self.open_flags(),
                ),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.guard("fallocate", || {
            if self.trace {
                log(format!("fallocate ino {} off {offset:#x} len {length:#x} mode {mode:#x}", ino.0));
            }
            let how = match mode {
                0 => Ok(FallocateMode::Default),
                libc::FALLOC_FL_KEEP_SIZE => Ok(FallocateMode::KeepSize),
                // The kernel drops its cached pages of the range itself.
                m if m == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE => Ok(FallocateMode::PunchHole),
                // Punching without KEEP_SIZE (EOPNOTSUPP on Linux too),
                // collapsing, inserting, zeroing: not in the engine.
                _ => Err(Errno::EOPNOTSUPP),
            };
            let r = self.writable().and(how).and_then(|how| self.fs.fallocate_ino(node_no(ino), how, offset, length));
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        })
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        // The kernel asks only for SEEK_DATA / SEEK_HOLE (it handles the
        // others itself); the engine answers at page granularity.
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        if offset < 0 {
            return reply.error(fuser::Errno::ENXIO);
        }
        self.guard("lseek", || match self.fs.seek_data_hole_ino(node_no(ino), offset as u64, data) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(err(e)),
        })
    }
}
