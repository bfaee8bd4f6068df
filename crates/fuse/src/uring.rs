//! FUSE over io_uring: one queue per CPU, served by a thread pinned to
//! that CPU, so a request is answered on the core that made it.
//!
//! Why: through /dev/fuse a request wakes whichever daemon thread waits
//! first, often on the other core; in a VM a cross-core wake-up costs tens
//! of microseconds, many times the engine's own work (docs/FUSE.md,
//! "Performance"). Linux 6.14+ can instead hand each request to a ring
//! entry of the queue of the CPU the caller runs on
//! (`Documentation/filesystems/fuse/fuse-io-uring.rst`); its thread, pinned
//! there, is woken locally, answers, and fetches the next request in the
//! same system call (COMMIT_AND_FETCH).
//!
//! Life of the transport:
//! 1. `fuser` mounts and does the INIT handshake over /dev/fuse; the
//!    adapter asks for `FUSE_OVER_IO_URING` if the kernel offers it (it
//!    does when `/sys/module/fuse/parameters/enable_uring` is set).
//! 2. [`start`] spawns one thread per possible CPU. Each makes its own ring
//!    (128-byte SQEs for the command area; single issuer, deferred task
//!    work, so completions run in the thread's own system call) and
//!    registers `DEPTH` entries: a header buffer and a payload buffer each.
//!    Once every queue has an entry the kernel switches the connection to
//!    the rings; until then, and if a registration fails, requests keep
//!    coming through /dev/fuse, where `fuser`'s threads serve them. FORGET
//!    and INTERRUPT always come that way.
//! 3. A request's CQE: the entry's header holds `fuse_in_header` and the
//!    opcode's fixed argument, the payload the rest (names, written
//!    bytes). The answer goes into the same buffers, committed with the
//!    next fetch.
//! 4. Unmount or abort ends every entry with ENOTCONN; the thread frees its
//!    buffers and ends.

use crate::adapter::{log, Caller, Core, XattrOut};
use crate::wire::{self, cstr, fattr, op, Fields, InHeader, Out};
use ferrite::{Errno, FsResult, InodeNo, SetAttr, TimeSet, TimeSpec};
use fuser::SessionACL;
use io_uring::{opcode, squeue, types, IoUring};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Ring entries per queue: requests one CPU may have in flight at once
/// (background reads and writes can overlap a synchronous request).
const DEPTH: usize = 4;

/// `struct fuse_uring_req_header`: in/out header, the opcode's argument,
/// and `struct fuse_uring_ent_in_out`.
const HEADER_SIZE: usize = 128 + 128 + 32;
const OP_IN_AT: usize = 128;
const ENT_IN_OUT_AT: usize = 256;
/// `enum fuse_uring_cmd`.
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// The serving threads of the io_uring transport.
pub struct UringServer {
    threads: Vec<JoinHandle<()>>,
}

impl UringServer {
    /// How many per-CPU queues it serves.
    pub fn queues(&self) -> usize {
        self.threads.len()
    }

    /// Wait for the threads; they end when the connection does (unmount or
    /// abort).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Who may use the mount besides the kernel's own check (as `fuser` does
/// for /dev/fuse: with `auto_unmount` the kernel lets everybody in and the
/// daemon keeps to owner and root).
#[derive(Clone, Copy)]
pub(crate) struct Access {
    pub(crate) acl: SessionACL,
    pub(crate) owner: u32,
}

/// The number of CPU queues the kernel made: one per possible CPU.
fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let max = text.trim().split(',').filter_map(|r| r.rsplit('-').next().and_then(|n| n.parse::<usize>().ok())).max();
    max.map(|m| m + 1).unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// Bytes a payload buffer must hold: the kernel refuses a smaller one
/// (`max(8 KiB, max_write, max_pages × page)`).
fn payload_size(max_write: usize) -> usize {
    let limit_pages = std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .unwrap_or(256);
    max_write.max(limit_pages * 4096).max(8192)
}

/// Register the queues and serve them. `dev` is the connection's /dev/fuse
/// descriptor. Returns once every thread has registered its entries (or
/// with the first error, after which the connection stays on /dev/fuse).
pub(crate) fn start(core: Arc<Core>, dev: OwnedFd, access: Access, max_write: usize) -> io::Result<UringServer> {
    let dev = Arc::new(dev);
    let queues = possible_cpus();
    let payload = payload_size(max_write);
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::with_capacity(queues);
    for qid in 0..queues {
        let (core, dev, tx) = (core.clone(), dev.clone(), tx.clone());
        // The "fuser" prefix is how a preload library serving this mount
        // from inside a program recognises the mount's threads (as it does
        // fuser's own, "fuser-N"): the descriptor `io_uring_setup` gives
        // such a thread is moved out of the program's way, so a program's
        // `dup2` onto a low number (a shell's `exec 3> file`) cannot
        // replace the ring.
        let t = std::thread::Builder::new()
            .name(format!("fuser-uring-{qid}"))
            .spawn(move || serve_queue(core, &dev, qid, payload, access, tx))?;
        threads.push(t);
    }
    drop(tx);
    let mut first_err = None;
    for _ in 0..queues {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert_with(|| "a queue thread did not report".into());
                break;
            }
        }
    }
    match first_err {
        None => Ok(UringServer { threads }),
        Some(e) => Err(io::Error::other(e)),
    }
}

/// One ring entry's buffers. The kernel writes them (a request) between
/// our submitting the entry and its CQE, and reads them (our answer) at the
/// next commit; they never move meanwhile (boxed slices).
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    /// The iovecs the REGISTER command points to.
    iov: Box<[libc::iovec; 2]>,
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes a bit
    // inside it (cpu is checked against its size); sched_setaffinity reads
    // it. A CPU that is offline makes the call fail: the thread then runs
    // anywhere, which is only slower.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < 8 * std::mem::size_of::<libc::cpu_set_t>() {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// The 128-byte SQE of one command (`struct fuse_uring_cmd_req` in its
/// command area); REGISTER also points at the entry's two iovecs.
fn command(
    dev: i32,
    cmd_op: u32,
    qid: usize,
    commit_id: u64,
    iov: Option<*const libc::iovec>,
    index: usize,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&(qid as u16).to_ne_bytes());
    let mut b = opcode::UringCmd80::new(types::Fd(dev), cmd_op).cmd(cmd);
    if let Some(iov) = iov {
        b = b.addr(Some(iov as u64));
    }
    let sqe = b.build().user_data(index as u64);
    if iov.is_none() {
        return sqe;
    }
    // The kernel also wants the number of iovecs in `sqe->len` (offset 24
    // of the SQE), which the builder has no field for.
    // SAFETY: Entry128 is a #[repr(C)] 128-byte io_uring_sqe plus its
    // command area, plain integers throughout, so any byte pattern is valid;
    // bytes 24..28 are `len` in the kernel's ABI.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

fn serve_queue(
    core: Arc<Core>,
    dev: &OwnedFd,
    qid: usize,
    payload: usize,
    access: Access,
    report: mpsc::Sender<Result<(), String>>,
) {
    pin_to_cpu(qid);
    let ring = IoUring::<squeue::Entry128>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(2 * DEPTH as u32)
        .build(2 * DEPTH as u32);
    let mut ring = match ring {
        Ok(r) => r,
        Err(e) => {
            let _ = report.send(Err(format!("io_uring_setup: {e}")));
            return;
        }
    };
    let mut entries: Vec<Entry> = (0..DEPTH)
        .map(|_| {
            let mut header = vec![0u8; HEADER_SIZE].into_boxed_slice();
            let mut payload = vec![0u8; payload].into_boxed_slice();
            let iov = Box::new([
                libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
                libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() },
            ]);
            Entry { header, payload, iov }
        })
        .collect();
    let fd = dev.as_raw_fd();
    for (i, e) in entries.iter().enumerate() {
        let sqe = command(fd, CMD_REGISTER, qid, 0, Some(e.iov.as_ptr()), i);
        // SAFETY: the iovecs and the buffers they describe live in
        // `entries`, which outlives the ring's use of them: it is freed only
        // after every entry ended (or leaked, below).
        if unsafe { ring.submission().push(&sqe) }.is_err() {
            let _ = report.send(Err("io_uring submission queue full".into()));
            return;
        }
    }
    if let Err(e) = ring.submit() {
        let _ = report.send(Err(format!("FUSE io_uring register: {e}")));
        return;
    }
    // A refused registration completes at once with the error; an accepted
    // one completes only when a request arrives.
    let mut first: Vec<(usize, i32)> = ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
    if let Some(&(_, res)) = first.iter().find(|(_, r)| *r < 0) {
        let _ =
            report.send(Err(format!("FUSE io_uring register (queue {qid}): {}", io::Error::from_raw_os_error(-res))));
        // Entries registered before the refusal may still be held by the
        // kernel until the connection ends: keep their buffers alive.
        std::mem::forget(entries);
        return;
    }
    let _ = report.send(Ok(()));
    let mut live = DEPTH;
    let server = Server { core: &core, access };
    loop {
        for (i, res) in first.drain(..) {
            if res < 0 {
                // ENOTCONN / ECONNABORTED at unmount or abort; ECANCELED
                // when the ring is being torn down.
                if ![libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED].contains(&-res) {
                    log(format!("io_uring queue {qid}: entry ended with {}", io::Error::from_raw_os_error(-res)));
                }
                live -= 1;
                continue;
            }
            let e = &mut entries[i];
            let commit_id = server.handle(&mut e.header, &mut e.payload);
            let sqe = command(fd, CMD_COMMIT_AND_FETCH, qid, commit_id, None, i);
            // SAFETY: as for REGISTER: the entry's buffers stay alive and
            // in place while the kernel holds the entry.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                log(format!("io_uring queue {qid}: submission queue full; entry {i} dropped"));
                live -= 1;
            }
        }
        if live == 0 {
            break;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => {
                log(format!("io_uring queue {qid}: {e}; the queue stops"));
                std::mem::forget(entries);
                return;
            }
        }
        first.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
    }
    drop(ring);
    drop(entries);
}

/// Decodes one request from a ring entry, runs it, encodes the answer.
struct Server<'a> {
    core: &'a Core,
    access: Access,
}

/// What a handler answers: an errno, or a body of this many bytes written
/// at the start of the payload buffer.
type Answer = Result<usize, Errno>;

fn name_of(b: &[u8]) -> FsResult<&OsStr> {
    cstr(b).map(|(n, _)| OsStr::from_bytes(n)).ok_or(Errno::EINVAL)
}

fn time_of(sec: u64, nsec: u32, now: bool) -> TimeSet {
    if now {
        TimeSet::Now
    } else {
        TimeSet::At(TimeSpec { sec: sec as i64, nsec })
    }
}

impl Server<'_> {
    /// Serve the request in `header`/`payload` and leave the answer there;
    /// returns the commit id to send it with.
    fn handle(&self, header: &mut [u8], payload: &mut [u8]) -> u64 {
        let mut ent = Fields::new(&header[ENT_IN_OUT_AT..]);
        let (_flags, commit_id, in_len) =
            (ent.u64().unwrap_or(0), ent.u64().unwrap_or(0), ent.u32().unwrap_or(0) as usize);
        let Some(h) = InHeader::decode(&header[..wire::IN_HEADER_SIZE]) else {
            return commit_id;
        };
        let in_len = in_len.min(payload.len());
        let op_in: [u8; 128] = header[OP_IN_AT..OP_IN_AT + 128].try_into().expect("128-byte slice");
        let answer = if self.allowed(&h) {
            self.core.guarded(wire::op_name(h.opcode), || self.dispatch(&h, &op_in, payload, in_len))
        } else {
            Err(Errno::EACCES)
        };
        let (error, body) = match answer {
            Ok(n) => (0i32, n),
            Err(e) => {
                if self.core.trace {
                    log(format!("{} node {}: error {}", wire::op_name(h.opcode), h.nodeid, e.0));
                }
                (-e.0, 0)
            }
        };
        let mut out = Out::new(&mut header[..wire::OUT_HEADER_SIZE]);
        out.u32((wire::OUT_HEADER_SIZE + body) as u32);
        out.u32(error as u32);
        out.u64(h.unique);
        let mut ent = Out::new(&mut header[ENT_IN_OUT_AT..ENT_IN_OUT_AT + 24]);
        ent.u64(0);
        ent.u64(commit_id);
        ent.u32(body as u32);
        commit_id
    }

    /// The same rule `fuser` applies on /dev/fuse.
    fn allowed(&self, h: &InHeader) -> bool {
        let a = self.access;
        let other = match a.acl {
            SessionACL::All => false,
            SessionACL::RootAndOwner => h.uid != a.owner && h.uid != 0,
            SessionACL::Owner => h.uid != a.owner,
        };
        !other
            || matches!(
                h.opcode,
                op::READ
                    | op::READDIR
                    | op::READDIRPLUS
                    | op::WRITE
                    | op::FSYNC
                    | op::FSYNCDIR
                    | op::RELEASE
                    | op::RELEASEDIR
                    | op::DESTROY
            )
    }

    fn dispatch(&self, h: &InHeader, op_in: &[u8], payload: &mut [u8], in_len: usize) -> Answer {
        let c = self.core;
        let ino = InodeNo(h.nodeid);
        let who = Caller { uid: h.uid, gid: h.gid, pid: h.pid };
        let mut a = Fields::new(op_in);
        let bad = Errno::EINVAL;
        let set = &c.set;
        match h.opcode {
            op::LOOKUP => {
                let r = c.lookup(ino, name_of(&payload[..in_len])?);
                let mut o = Out::new(payload);
                match r {
                    Ok(st) => o.entry(Some(&st), set.entry_ttl, set.attr_ttl),
                    Err(Errno::ENOENT) if c.negative_entries() => o.entry(None, set.negative_ttl, Duration::ZERO),
                    Err(e) => return Err(e),
                }
                Ok(o.len)
            }
            op::GETATTR => {
                let st = c.getattr(ino)?;
                let mut o = Out::new(payload);
                o.attr_out(&st, set.attr_ttl);
                Ok(o.len)
            }
            op::SETATTR => {
                let valid = a.u32().ok_or(bad)?;
                a.skip(4 + 8).ok_or(bad)?; // padding, fh
                let size = a.u64().ok_or(bad)?;
                a.skip(8).ok_or(bad)?; // lock_owner
                let (atime, mtime, _ctime) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u64().ok_or(bad)?);
                let (atimensec, mtimensec, _ctimensec) =
                    (a.u32().ok_or(bad)?, a.u32().ok_or(bad)?, a.u32().ok_or(bad)?);
                let mode = a.u32().ok_or(bad)?;
                a.skip(4).ok_or(bad)?;
                let (uid, gid) = (a.u32().ok_or(bad)?, a.u32().ok_or(bad)?);
                let has = |bit: u32| valid & bit != 0;
                let sa = SetAttr {
                    perm: has(fattr::MODE).then_some(mode & 0o7777),
                    uid: has(fattr::UID).then_some(uid),
                    gid: has(fattr::GID).then_some(gid),
                    size: has(fattr::SIZE).then_some(size),
                    atime: has(fattr::ATIME).then(|| time_of(atime, atimensec, has(fattr::ATIME_NOW))),
                    mtime: has(fattr::MTIME).then(|| time_of(mtime, mtimensec, has(fattr::MTIME_NOW))),
                };
                let st = c.setattr(ino, &sa, has(fattr::KILL_SUIDGID).then_some(who))?;
                let mut o = Out::new(payload);
                o.attr_out(&st, set.attr_ttl);
                Ok(o.len)
            }
            op::READLINK => {
                let t = c.readlink(ino)?;
                let mut o = Out::new(payload);
                if t.len() > o.room() {
                    return Err(Errno::ENAMETOOLONG);
                }
                o.bytes(&t);
                Ok(o.len)
            }
            op::SYMLINK => {
                let (name, rest) = cstr(&payload[..in_len]).ok_or(bad)?;
                let (target, _) = cstr(rest).ok_or(bad)?;
                let st = c.symlink(who, ino, OsStr::from_bytes(name), target)?;
                self.entry(payload, &st)
            }
            op::MKNOD => {
                let (mode, rdev, umask) = (a.u32().ok_or(bad)?, a.u32().ok_or(bad)?, a.u32().ok_or(bad)?);
                let st = c.mknod(who, ino, name_of(&payload[..in_len])?, mode, umask, rdev)?;
                self.entry(payload, &st)
            }
            op::MKDIR => {
                let (mode, umask) = (a.u32().ok_or(bad)?, a.u32().ok_or(bad)?);
                let st = c.mkdir(who, ino, name_of(&payload[..in_len])?, mode, umask)?;
                self.entry(payload, &st)
            }
            op::UNLINK | op::RMDIR => {
                c.remove(ino, name_of(&payload[..in_len])?, h.opcode == op::RMDIR)?;
                Ok(0)
            }
            op::RENAME | op::RENAME2 => {
                let newdir = InodeNo(a.u64().ok_or(bad)?);
                let flags = if h.opcode == op::RENAME2 { a.u32().ok_or(bad)? } else { 0 };
                let (old, rest) = cstr(&payload[..in_len]).ok_or(bad)?;
                let (new, _) = cstr(rest).ok_or(bad)?;
                c.rename(ino, OsStr::from_bytes(old), newdir, OsStr::from_bytes(new), flags)?;
                Ok(0)
            }
            op::LINK => {
                let old = InodeNo(a.u64().ok_or(bad)?);
                let st = c.link(old, ino, name_of(&payload[..in_len])?)?;
                self.entry(payload, &st)
            }
            op::OPEN => {
                let (flags, open_flags) = (a.u32().ok_or(bad)? as i32, a.u32().ok_or(bad)?);
                let fh = c.open(ino, flags, (open_flags & wire::OPEN_KILL_SUIDGID != 0).then_some(who))?;
                let mut o = Out::new(payload);
                o.open_out(fh, c.open_flags().bits());
                Ok(o.len)
            }
            op::OPENDIR => {
                let fh = c.opendir(ino)?;
                let mut o = Out::new(payload);
                o.open_out(fh, 0);
                Ok(o.len)
            }
            op::READ => {
                let (_fh, offset, size) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u32().ok_or(bad)?);
                let size = (size as usize).min(payload.len());
                // Straight into the reply buffer: one copy out of the pool.
                c.read(ino, offset, &mut payload[..size])
            }
            op::WRITE => {
                let (_fh, offset, size) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u32().ok_or(bad)?);
                let write_flags = a.u32().ok_or(bad)?;
                let size = (size as usize).min(in_len);
                let n = c.write(who, ino, offset, &payload[..size], write_flags)?;
                let mut o = Out::new(payload);
                o.u32(n as u32);
                o.u32(0);
                Ok(o.len)
            }
            op::STATFS => {
                let s = c.statfs();
                let mut o = Out::new(payload);
                for v in [s.blocks, s.blocks_free, s.blocks_avail, s.files, s.files_free] {
                    o.u64(v);
                }
                for v in [s.block_size, s.name_max, s.block_size, 0, 0, 0, 0, 0, 0, 0] {
                    o.u32(v);
                }
                Ok(o.len)
            }
            op::RELEASE | op::RELEASEDIR => {
                c.release(a.u64().ok_or(bad)?);
                Ok(0)
            }
            op::FSYNC | op::FSYNCDIR => {
                a.skip(8).ok_or(bad)?;
                let flags = a.u32().ok_or(bad)?;
                c.fsync(ino, flags & wire::FSYNC_FDATASYNC != 0)?;
                Ok(0)
            }
            // Nothing is buffered here: every write reached the pool.
            op::FLUSH => Ok(0),
            op::SETXATTR => {
                // Without FUSE_SETXATTR_EXT the argument is the 8-byte
                // compat form: size, flags.
                let (size, flags) = (a.u32().ok_or(bad)? as usize, a.u32().ok_or(bad)? as i32);
                let (name, rest) = cstr(&payload[..in_len]).ok_or(bad)?;
                let value = rest.get(..size).ok_or(bad)?;
                c.setxattr(ino, OsStr::from_bytes(name), value, flags)?;
                Ok(0)
            }
            op::GETXATTR | op::LISTXATTR => {
                let size = a.u32().ok_or(bad)?;
                let r = if h.opcode == op::GETXATTR {
                    c.getxattr(ino, name_of(&payload[..in_len])?, size)?
                } else {
                    c.listxattr(ino, size)?
                };
                let mut o = Out::new(payload);
                match r {
                    XattrOut::Size(n) => {
                        o.u32(n);
                        o.u32(0);
                    }
                    XattrOut::Data(v) => {
                        if v.len() > o.room() {
                            return Err(Errno::E2BIG);
                        }
                        o.bytes(&v)
                    }
                }
                Ok(o.len)
            }
            op::REMOVEXATTR => {
                c.removexattr(ino, name_of(&payload[..in_len])?)?;
                Ok(0)
            }
            op::ACCESS => {
                c.access(who, ino, a.u32().ok_or(bad)?)?;
                Ok(0)
            }
            op::CREATE => {
                let (flags, mode, umask) = (a.u32().ok_or(bad)? as i32, a.u32().ok_or(bad)?, a.u32().ok_or(bad)?);
                let kill = a.u32().ok_or(bad)? & wire::OPEN_KILL_SUIDGID != 0;
                let (st, fh) = c.create(who, ino, name_of(&payload[..in_len])?, mode, umask, flags, kill)?;
                let mut o = Out::new(payload);
                let ttl = set.entry_ttl.min(set.attr_ttl);
                o.entry(Some(&st), ttl, ttl);
                o.open_out(fh, c.open_flags().bits());
                Ok(o.len)
            }
            op::READDIR | op::READDIRPLUS => {
                let (_fh, offset, size) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u32().ok_or(bad)?);
                let size = (size as usize).min(payload.len());
                let mut o = Out::new(&mut payload[..size]);
                if h.opcode == op::READDIR {
                    c.list(ino, offset, |e, off, k, name| !o.dirent(e.0, off, k, name))?;
                } else {
                    let ttl = set.entry_ttl.min(set.attr_ttl);
                    c.readdirplus(ino, offset, |st, off, name| !o.direntplus(st, off, name, ttl))?;
                }
                Ok(o.len)
            }
            op::FALLOCATE => {
                let (_fh, offset, length, mode) =
                    (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u32().ok_or(bad)?);
                c.fallocate(who, ino, offset, length, mode as i32)?;
                Ok(0)
            }
            op::LSEEK => {
                let (_fh, offset, whence) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u32().ok_or(bad)?);
                let at = c.lseek(ino, offset as i64, whence as i32)?;
                let mut o = Out::new(payload);
                o.u64(at as u64);
                Ok(o.len)
            }
            op::COPY_FILE_RANGE => {
                // fuse_copy_file_range_in: fh_in, off_in, nodeid_out,
                // fh_out, off_out, len, flags; the source is the header's node.
                let (_fh_in, off_in, out) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u64().ok_or(bad)?);
                let (_fh_out, off_out, len) = (a.u64().ok_or(bad)?, a.u64().ok_or(bad)?, a.u64().ok_or(bad)?);
                let n = c.copy_file_range(who, ino, off_in, InodeNo(out), off_out, len)?;
                let mut o = Out::new(payload);
                o.u32(u32::try_from(n).expect("a copy is at most ferrite::COPY_BYTES_MAX bytes"));
                o.u32(0);
                Ok(o.len)
            }
            // Everything else (ioctl, poll, bmap, statx, tmpfile, ...):
            // ENOSYS, which the kernel remembers for the calls that have a
            // fallback, as it does over /dev/fuse.
            _ => Err(Errno(libc::ENOSYS)),
        }
    }

    fn entry(&self, payload: &mut [u8], st: &ferrite::Stat) -> Answer {
        let mut o = Out::new(payload);
        o.entry(Some(st), self.core.set.entry_ttl, self.core.set.attr_ttl);
        Ok(o.len)
    }
}
