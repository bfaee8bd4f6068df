//! `mmap` of Ferrite descriptors.
//!
//! - Read-only mappings (PROT_READ, MAP_SHARED or MAP_PRIVATE) and private
//!   writable ones (MAP_PRIVATE, PROT_READ|PROT_WRITE) map the pool's own
//!   pages, without a copy: each is a view of the engine
//!   (`Session::map_view`), with peek's isolation. A private mapping shows
//!   the file as it was at the moment of the `mmap` call, whatever is
//!   written, truncated or removed later (POSIX leaves that open). A
//!   read-only MAP_SHARED mapping follows the file as Linux's does: the
//!   first write, truncate or fallocate through this process to a file
//!   with such a view moves the view onto the file's DRAM shadow (below),
//!   which every later change of the file updates (`views::follow_writes`).
//!   LMDB reads its pages through such a mapping and writes them with
//!   pwrite. Stores through a private mapping go to private copies of the
//!   pages and never reach the file. Pages past the end of the file read
//!   as zeros (Linux raises SIGBUS there). How `munmap`, `mprotect`,
//!   `mremap` and `fork` treat these mappings: `views.rs`.
//! - A read-only MAP_SHARED request the engine cannot serve as a view
//!   (MAP_FIXED, more than `VIEW_BYTES_MAX` bytes, `VIEWS_MAX` views live:
//!   LMDB maps its whole map size) maps the file's shadow from the start.
//!   Other MAP_FIXED and MAP_FIXED_NOREPLACE requests, executable or
//!   inaccessible protections, and private requests the engine cannot
//!   serve as a view get anonymous memory filled with the file's bytes at
//!   the moment of the call instead, the same snapshot by a copy.
//! - Writable shared mappings map a DRAM shadow of the file: one memfd per
//!   inode, so every mapping of the file in this process shares the same
//!   pages (SQLite's `-shm`, mapped several times, relies on that). The
//!   shadow is written back to the file by `msync`, `munmap`, `fsync`,
//!   `fdatasync`, `syncfs`, the last close and exit, each time as one write
//!   of the changed span: one atomic, durable operation in strict mode. In
//!   an fsync-atomic file that write is pending like any other, and
//!   `msync(MS_SYNC)`, `fsync`, `fdatasync`, `sync` and `syncfs` then commit
//!   the file (`munmap` and close do not).
//!   While a file has a shadow, `read` and `write` (and copy_file_range
//!   and sendfile, hooks.rs's `copy_between`) keep it coherent: the
//!   shadow is written back before and the written range reloaded after
//!   every write, and written back before every read (and before a view of
//!   the file is made, so the view holds the stores made so far). A
//!   shadow only read-only mappings use has nothing to write back.
//! - Other processes reach the pool through the owner's mount, whose
//!   threads call `OwnerMappings` around the kernel's requests: shadows
//!   are written back before the kernel reads, writes or syncs a file and
//!   follow after it changed one. A change the owner makes to a file the
//!   kernel holds open has the kernel drop the changed pages
//!   (`change_ino`). The memory of a writable shared mapping is still not
//!   shared between the owner and another process (docs/PRELOAD.md,
//!   "Mappings and other processes", says why a mapping through the
//!   owner's own mount is no way out).

#![allow(clippy::missing_safety_doc)]

use super::{active, fd, inside, is_ferrite, views, Preload};
use crate::conv::fail;
use crate::real::{self, Off};
use engine::{Errno, FsResult, InodeNo, MapKind, PathFs};
use ferrite_fuse::Changed;
use libc::{c_int, c_void};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const PAGE_BYTES: usize = 4096;

/// The DRAM shadow of one file with shared mappings that follow it.
struct Shadow {
    memfd: c_int,
    /// Bytes of the file loaded into the shadow (from offset 0).
    loaded: usize,
    /// The inode, held open while mapped (an unlinked file stays alive).
    inode: Arc<engine::Inode>,
    /// Mappings of the shadow: regions, and views moved onto it.
    mappings: usize,
    /// Of those, writable ones: only they make stores to write back.
    writable: usize,
}

/// One shared mapping of a shadow made by `mmap`.
struct Region {
    ino: InodeNo,
    /// Where the mapping starts in the file: a grown mapping needs the
    /// shadow to reach this plus its new length.
    offset: usize,
    len: usize,
    writable: bool,
}

struct Table {
    shadows: HashMap<InodeNo, Shadow>,
    regions: HashMap<usize, Region>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// The files the kernel holds open through this process's mount, when it
/// serves one: a change this process makes directly to such a file has the
/// kernel drop the changed pages (`change_ino`), which other processes
/// may have cached or mapped.
static KERNEL_FILES: std::sync::OnceLock<Arc<ferrite_fuse::KernelFiles>> = std::sync::OnceLock::new();

/// This process serves a mount.
pub fn serve_through(files: Arc<ferrite_fuse::KernelFiles>) {
    let _ = KERNEL_FILES.set(files);
}

/// The owner's side of its mount's requests (another process's reads and
/// writes of the pool): shadows are written back before them and follow
/// the changes after, as around this process's own reads and writes.
pub struct OwnerMappings;

impl ferrite_fuse::Neighbour for OwnerMappings {
    fn before_io(&self, ino: InodeNo) {
        if SHADOWS.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(p) = active() {
            let _ = inside(|| write_back_ino(p, ino));
        }
    }

    fn changing(&self, ino: InodeNo, change: &mut dyn FnMut() -> Changed) {
        match active().filter(|_| SHADOWS.load(Ordering::Relaxed) > 0 || views::following()) {
            Some(p) => {
                // The kernel made the change: it needs no telling.
                let _ = inside(|| change_ino(p, ino, Teller::Kernel, || Ok(change()), |&c| c));
            }
            None => {
                change();
            }
        }
    }

    fn opened(&self, ino: InodeNo) {
        if SHADOWS.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mapped_writable = with_table(|t| t.shadows.get(&ino).is_some_and(|s| s.writable > 0));
        if mapped_writable {
            warn_not_shared(ino, "now opened by another process through the mount");
        }
    }
}

/// Say once per file that a writable shared mapping of the owner's and
/// another process's use of the file (`how`) do not share memory.
fn warn_not_shared(ino: InodeNo, how: &str) {
    if WARNED_SHARED.lock().insert(ino) {
        super::warn(&format!(
            "inode {} is mapped shared and writable by process {} (the pool's owner) and {how}: the two do not \
             share the mapping's memory, only what the owner writes back (msync, fsync, munmap), and programs \
             that coordinate processes through a shared mapping of a file (LMDB's lock file, SQLite's -shm) \
             cannot do so between the owner and other processes",
            ino.0,
            std::process::id()
        ));
    }
}

/// The inodes `warn_not_shared` warned about (once each).
static WARNED_SHARED: Mutex<std::collections::BTreeSet<InodeNo>> = Mutex::new(std::collections::BTreeSet::new());
/// How many shadows exist: read and write look at the table only when
/// there is one.
static SHADOWS: AtomicUsize = AtomicUsize::new(0);

fn with_table<T>(f: impl FnOnce(&mut Table) -> T) -> T {
    let mut g = TABLE.lock();
    f(g.get_or_insert_with(|| Table { shadows: HashMap::new(), regions: HashMap::new() }))
}

/// Copy the file's bytes [from, to) into the shadow. Past the end of the
/// file the shadow's pages are dropped (they read as zeros) rather than
/// written with zeros, so a mapping far larger than its file (LMDB maps
/// its whole map size) costs memory only for the file's bytes.
fn load(p: &Preload, s: &Shadow, from: usize, to: usize) -> FsResult<()> {
    let mut buf = vec![0u8; (to - from).min(1 << 20)];
    let mut at = from;
    while at < to {
        let want = (to - at).min(buf.len());
        let got = p.session.read_ino(s.inode.ino, at as u64, &mut buf[..want])?;
        if got > 0 {
            // SAFETY: writing our buffer into our memfd.
            let k = unsafe { real::pwrite64(s.memfd, buf.as_ptr().cast(), got, at as Off) };
            if k != got as isize {
                return Err(Errno::EIO);
            }
        }
        if got < want {
            // The end of the file: zeros to `to`.
            let hole = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: dropping pages of our own memfd.
            if unsafe { libc::fallocate(s.memfd, hole, (at + got) as libc::off_t, (to - at - got) as libc::off_t) } != 0
            {
                return Err(Errno(crate::conv::errno()));
            }
            return Ok(());
        }
        at += want;
    }
    Ok(())
}

/// The shadow of `ino`, made if there is none, covering at least the
/// file's first `need` bytes (a multiple of the page size).
fn ensure_shadow<'t>(t: &'t mut Table, p: &Preload, ino: InodeNo, need: usize) -> FsResult<&'t mut Shadow> {
    let s = match t.shadows.entry(ino) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let inode = p.session.open_ino(ino)?;
            // SAFETY: a static name; the memfd is ours.
            let memfd = super::park(unsafe { libc::memfd_create(c"ferrite-shadow".as_ptr(), libc::MFD_CLOEXEC) });
            if memfd < 0 {
                p.session.release_ino(&inode);
                return Err(Errno(crate::conv::errno()));
            }
            SHADOWS.fetch_add(1, Ordering::Relaxed);
            v.insert(Shadow { memfd, loaded: 0, inode, mappings: 0, writable: 0 })
        }
    };
    if need > s.loaded {
        let from = s.loaded;
        // SAFETY: growing our memfd.
        let grown = if unsafe { libc::ftruncate(s.memfd, need as i64) } != 0 {
            Err(Errno(crate::conv::errno()))
        } else {
            load(p, s, from, need)
        };
        match grown {
            Ok(()) => s.loaded = need,
            Err(e) => {
                if s.mappings == 0 {
                    // A shadow this call made, which nothing maps.
                    drop_shadow(t, p, ino);
                }
                return Err(e);
            }
        }
    }
    Ok(t.shadows.get_mut(&ino).expect("made above"))
}

/// Forget `ino`'s shadow, which nothing maps any more.
fn drop_shadow(t: &mut Table, p: &Preload, ino: InodeNo) {
    let s = t.shadows.remove(&ino).expect("present");
    assert_eq!(s.mappings, 0, "a shadow dropped while mapped");
    super::unpark(s.memfd);
    // SAFETY: our memfd; nothing maps it.
    unsafe { real::close(s.memfd) };
    p.session.release_ino(&s.inode);
    SHADOWS.fetch_sub(1, Ordering::Relaxed);
}

/// One mapping of `ino`'s shadow is gone: the shadow goes with its last.
fn unref_shadow(t: &mut Table, p: &Preload, ino: InodeNo, writable: bool) {
    let Some(s) = t.shadows.get_mut(&ino) else { return };
    s.mappings -= 1;
    if writable {
        s.writable -= 1;
    }
    if s.mappings == 0 {
        drop_shadow(t, p, ino);
    }
}

/// A read-only shared view of `ino` covering the file's first `need`
/// bytes moves onto the shadow: the shadow (made and loaded if needed)
/// counts one more mapping, and its memfd is returned to map over the view.
pub(super) fn follow(p: &Preload, ino: InodeNo, need: usize) -> FsResult<c_int> {
    with_table(|t| {
        let s = ensure_shadow(t, p, ino, need.next_multiple_of(PAGE_BYTES))?;
        s.mappings += 1;
        Ok(s.memfd)
    })
}

/// A view that `follow` moved onto the shadow is released.
pub(super) fn unfollow(p: &Preload, ino: InodeNo) {
    with_table(|t| unref_shadow(t, p, ino, false));
}

/// Write the shadow's changed bytes back: one write of the span from the
/// first to the last byte that differs from the file, clamped to the
/// file's size (bytes of a mapping past the end of file are not written).
fn flush(p: &Preload, s: &Shadow) -> FsResult<()> {
    if s.writable == 0 {
        return Ok(());
    }
    let size = p.session.getattr(s.inode.ino)?.size as usize;
    let end = s.loaded.min(size);
    if end == 0 {
        return Ok(());
    }
    // Compared a chunk at a time through two reused buffers: whole-file
    // buffers cost a page fault per page each time (LMDB with MDB_WRITEMAP
    // writes a 64 MiB map back at every commit).
    let chunk = end.min(FLUSH_CHUNK_BYTES);
    let mut mine = vec![0u8; chunk];
    let mut file = vec![0u8; chunk];
    let mut span: Option<(usize, usize)> = None;
    let mut at = 0;
    while at < end {
        let n = chunk.min(end - at);
        read_shadow(s, at, &mut mine[..n])?;
        let got = p.session.read_ino(s.inode.ino, at as u64, &mut file[..n])?;
        file[got..n].fill(0);
        if mine[..n] != file[..n] {
            let first = mine[..n].iter().zip(&file[..n]).position(|(a, b)| a != b).expect("they differ");
            let last =
                n - mine[..n].iter().rev().zip(file[..n].iter().rev()).position(|(a, b)| a != b).expect("they differ");
            span = Some((span.map_or(at + first, |(f, _)| f), at + last));
        }
        at += n;
    }
    let Some((first, last)) = span else { return Ok(()) };
    // One write of the whole changed span: one atomic operation.
    let mut bytes = vec![0u8; last - first];
    read_shadow(s, first, &mut bytes)?;
    p.session.write_ino(s.inode.ino, first as u64, &bytes)?;
    Ok(())
}

/// How much of a shadow `flush` compares at a time.
const FLUSH_CHUNK_BYTES: usize = 1 << 20;

/// The shadow's bytes at `at`.
fn read_shadow(s: &Shadow, at: usize, buf: &mut [u8]) -> FsResult<()> {
    // SAFETY: reading our memfd into our buffer.
    let k = unsafe { real::pread64(s.memfd, buf.as_mut_ptr().cast(), buf.len(), at as Off) };
    if k != buf.len() as isize {
        return Err(Errno::EIO);
    }
    Ok(())
}

unsafe fn map_file(
    p: &Preload,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    n: c_int,
    off: i64,
) -> FsResult<*mut c_void> {
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(PAGE_BYTES) {
        return Err(Errno::EINVAL);
    }
    let of = p.session.getfl(fd(n))?;
    if of.path || !of.read {
        return Err(Errno::EACCES);
    }
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    if shared && prot & libc::PROT_WRITE != 0 {
        if !of.write || of.append {
            return Err(Errno::EACCES);
        }
        return unsafe { map_shadow(p, addr, len, prot, flags, n, off as usize) };
    }
    // A view of the pool's pages, where one serves.
    let fixed = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0;
    let kind = if prot == libc::PROT_READ {
        Some(MapKind::ReadOnly)
    } else if prot == libc::PROT_READ | libc::PROT_WRITE && !shared {
        Some(MapKind::PrivateWritable)
    } else {
        None
    };
    if let (Some(kind), false) = (kind, fixed) {
        match views::map(p, n, off as u64, len, kind, shared) {
            Ok(m) => return Ok(m),
            // Past the engine's limits on views: a copy serves instead.
            Err(Errno::EINVAL | Errno::ENOMEM) => {}
            Err(e) => return Err(e),
        }
    }
    if shared && prot == libc::PROT_READ {
        // A read-only shared mapping no view serves must still follow the
        // file: the shadow, from the start.
        return unsafe { map_shadow(p, addr, len, prot, flags, n, off as usize) };
    }
    // A private (or read-only) copy: anonymous memory with the file's bytes.
    let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE | libc::MAP_NORESERVE);
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep;
    // SAFETY: an anonymous mapping where the caller asked for one.
    let m = unsafe { real::mmap(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if m == libc::MAP_FAILED {
        return Err(Errno(crate::conv::errno()));
    }
    // SAFETY: the fresh mapping holds `len` writable bytes.
    let dst = unsafe { std::slice::from_raw_parts_mut(m as *mut u8, len) };
    let ino = p.session.fd_inode(fd(n))?;
    let got = p.session.read_ino(ino, off as u64, dst)?;
    let _ = got; // past the end of file the mapping reads zeros
    if prot != libc::PROT_READ | libc::PROT_WRITE {
        // SAFETY: changing the protection of our own fresh mapping.
        unsafe { libc::mprotect(m, len, prot) };
    }
    Ok(m)
}

unsafe fn map_shadow(
    p: &Preload,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    n: c_int,
    off: usize,
) -> FsResult<*mut c_void> {
    let file = p.session.open_file(fd(n))?;
    let ino = file.inode.ino;
    let need = off.checked_add(len).ok_or(Errno::EINVAL)?.next_multiple_of(PAGE_BYTES);
    let writable = prot & libc::PROT_WRITE != 0;
    with_table(|t| {
        let s = ensure_shadow(t, p, ino, need)?;
        let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE | libc::MAP_NORESERVE);
        // SAFETY: mapping our memfd where the caller asked.
        let m = unsafe { real::mmap(addr, len, prot, libc::MAP_SHARED | keep, s.memfd, off as libc::off_t) };
        if m == libc::MAP_FAILED {
            let e = Errno(crate::conv::errno());
            if s.mappings == 0 {
                // A shadow this call made, which nothing maps.
                drop_shadow(t, p, ino);
            }
            return Err(e);
        }
        s.mappings += 1;
        if writable {
            s.writable += 1;
        }
        t.regions.insert(m as usize, Region { ino, offset: off, len, writable });
        if writable && KERNEL_FILES.get().is_some_and(|kf| kf.is_open(ino)) {
            warn_not_shared(ino, "held open by another process through the mount");
        }
        Ok(m)
    })
}

/// Whether `mprotect` would make a read-only mapping of a shadow in
/// [addr, addr+len) writable: refused (EACCES), as for a read-only view,
/// since its stores would never be written back.
pub fn mprotect_refused(addr: usize, len: usize, prot: c_int) -> bool {
    if SHADOWS.load(Ordering::Relaxed) == 0 || prot & libc::PROT_WRITE == 0 {
        return false;
    }
    let end = addr.saturating_add(len.max(1));
    with_table(|t| t.regions.iter().any(|(a, r)| !r.writable && *a < end && addr < *a + r.len))
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    n: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && is_ferrite(n) {
        if let Some(p) = active() {
            return match inside(|| unsafe { map_file(p, addr, len, prot, flags, n, off) }) {
                Ok(m) => m,
                Err(e) => {
                    crate::conv::set_errno(e.0);
                    libc::MAP_FAILED
                }
            };
        }
    }
    unsafe { real::mmap(addr, len, prot, flags, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    n: c_int,
    off: Off,
) -> *mut c_void {
    unsafe { mmap(addr, len, prot, flags, n, off) }
}

/// Write back and forget the shadow regions inside [addr, addr+len).
fn unmap_regions(p: &Preload, addr: usize, len: usize) {
    if SHADOWS.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_table(|t| {
        let gone: Vec<usize> =
            t.regions.iter().filter(|(a, r)| **a >= addr && **a + r.len <= addr + len).map(|(a, _)| *a).collect();
        for a in gone {
            let r = t.regions.remove(&a).expect("listed above");
            if let Some(s) = t.shadows.get(&r.ino) {
                let _ = inside(|| flush(p, s));
                unref_shadow(t, p, r.ino, r.writable);
            }
        }
    });
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if let Some(p) = active() {
        unmap_regions(p, addr as usize, len);
        if let Some(r) = views::munmap(p, addr as usize, len) {
            return r;
        }
    }
    unsafe { real::munmap(addr, len) }
}

/// mprotect(2): a read-only view (a peek, or a read-only mapping of a
/// Ferrite file) never becomes writable: EACCES, as Linux answers for a
/// shared mapping of a file opened read-only.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    if active().is_some()
        && (views::mprotect_refused(addr as usize, len, prot) || mprotect_refused(addr as usize, len, prot))
    {
        return fail(Errno::EACCES);
    }
    unsafe { real::mprotect(addr, len, prot) }
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int {
    if let Some(p) = active() {
        if SHADOWS.load(Ordering::Relaxed) > 0 {
            let (a, l) = (addr as usize, len);
            let r = with_table(|t| {
                let inos: Vec<InodeNo> = t
                    .regions
                    .iter()
                    .filter(|(s, r)| **s < a + l.max(1) && a < **s + r.len)
                    .map(|(_, r)| r.ino)
                    .collect();
                for ino in inos {
                    if let Some(s) = t.shadows.get(&ino) {
                        inside(|| flush(p, s))?;
                        // MS_SYNC is a commit point of an fsync-atomic
                        // file, as fsync (the kernel sends FSYNC for it
                        // too); MS_ASYNC only writes the shadow back.
                        if flags & libc::MS_SYNC != 0 {
                            inside(|| p.session.fsync_ino(ino, false))?;
                        }
                    }
                }
                Ok(())
            });
            if let Err(e) = r {
                return fail(e);
            }
        }
    }
    unsafe { real::msync(addr, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mremap(
    addr: *mut c_void,
    old: usize,
    new: usize,
    flags: c_int,
    newaddr: *mut c_void,
) -> *mut c_void {
    if active().is_some() && views::touches_view(addr as usize, old) {
        // The engine knows a view by its address and length.
        crate::conv::set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if SHADOWS.load(Ordering::Relaxed) > 0 && with_table(|t| t.regions.contains_key(&(addr as usize))) {
        // A shadow mapping may be resized in place or moved; the memfd
        // must first cover the mapping's offset in the file plus its new
        // length (a mapping that starts inside the file and grows past
        // what the shadow holds would otherwise raise SIGBUS).
        let p = active();
        let grown = with_table(|t| -> FsResult<()> {
            let r = t.regions.get(&(addr as usize)).ok_or(Errno::EINVAL)?;
            let (ino, need) = (r.ino, r.offset.checked_add(new).ok_or(Errno::EINVAL)?.next_multiple_of(PAGE_BYTES));
            if need > t.shadows.get(&ino).ok_or(Errno::EINVAL)?.loaded {
                let p = p.ok_or(Errno::EINVAL)?;
                inside(|| ensure_shadow(t, p, ino, need).map(|_| ()))?;
            }
            Ok(())
        });
        if let Err(e) = grown {
            crate::conv::set_errno(e.0);
            return libc::MAP_FAILED;
        }
        let m = unsafe { real::mremap(addr, old, new, flags, newaddr) };
        if m != libc::MAP_FAILED {
            with_table(|t| {
                if let Some(mut r) = t.regions.remove(&(addr as usize)) {
                    r.len = new;
                    t.regions.insert(m as usize, r);
                }
            });
        }
        return m;
    }
    unsafe { real::mremap(addr, old, new, flags, newaddr) }
}

/// fsync/fdatasync: write back the file's shadow first.
pub fn write_back(p: &Preload, n: c_int) -> FsResult<()> {
    if SHADOWS.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    let ino = p.session.fd_inode(fd(n))?;
    write_back_ino(p, ino)
}

/// `write_back` of the file `ino`.
pub fn write_back_ino(p: &Preload, ino: InodeNo) -> FsResult<()> {
    if SHADOWS.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    with_table(|t| match t.shadows.get(&ino) {
        Some(s) => flush(p, s),
        None => Ok(()),
    })
}

/// syncfs and exit: write back every shadow.
pub fn write_back_all(p: &Preload) -> FsResult<()> {
    if SHADOWS.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    with_table(|t| t.shadows.values().try_for_each(|s| flush(p, s)))
}

/// Before a read through a descriptor of a shadowed file: the file must
/// hold what the mappings wrote.
pub fn before_io(p: &Preload, n: c_int) {
    if SHADOWS.load(Ordering::Relaxed) > 0 {
        let _ = write_back(p, n);
    }
}

/// Who must hear of a change of a file the kernel may cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Teller {
    /// This process made the change: the kernel is told to drop the pages
    /// that changed.
    Owner,
    /// The kernel's request made it: the kernel knows.
    Kernel,
}

/// A change of the file at descriptor `n` (a write, truncate, allocation,
/// copy into it, patch) made by `change`; `changed` says what it changed.
/// Shared mappings follow it: see [`change_ino`].
pub fn change<T>(
    p: &Preload,
    n: c_int,
    change: impl FnOnce() -> FsResult<T>,
    changed: impl FnOnce(&T) -> Changed,
) -> FsResult<T> {
    if !following_any() {
        return change();
    }
    match p.session.fd_inode(fd(n)) {
        Ok(ino) => change_ino(p, ino, Teller::Owner, change, changed),
        Err(_) => change(),
    }
}

/// A change of the file `ino` that this process makes by path (truncate).
pub fn change_by_path<T>(
    p: &Preload,
    ino: InodeNo,
    change: impl FnOnce() -> FsResult<T>,
    changed: impl FnOnce(&T) -> Changed,
) -> FsResult<T> {
    change_ino(p, ino, Teller::Owner, change, changed)
}

/// Make `change` to the file `ino` with its shadow kept coherent: the
/// shadow's stores are written back, the change made, and the shadow
/// reloaded from what changed, all holding the table, so that no write
/// back enters between the change and the reload. One that did (another
/// thread's msync, the mount serving another process's write, which
/// writes shadows back first) would find the file differing from the
/// stale shadow and write the shadow's old bytes over the change: `flush`
/// cannot tell a store through the mapping from a change of the file. Then,
/// holding no lock (the kernel's write-back of its dirty pages is served
/// by the mount's threads, which take the table), the kernel drops the
/// pages of a change this process made (`Teller::Owner`), and read-only
/// shared views of the file move onto its shadow.
fn change_ino<T>(
    p: &Preload,
    ino: InodeNo,
    teller: Teller,
    change: impl FnOnce() -> FsResult<T>,
    changed: impl FnOnce(&T) -> Changed,
) -> FsResult<T> {
    let (out, what) = if SHADOWS.load(Ordering::Relaxed) > 0 {
        with_table(|t| {
            // A failed write-back leaves the stores in the shadow, to be
            // written back by the next one; the change goes ahead (the
            // kernel's must: it is the other process's write).
            if let Some(s) = t.shadows.get(&ino) {
                let _ = flush(p, s);
            }
            let out = change()?;
            let what = changed(&out);
            if let Some(s) = t.shadows.get(&ino) {
                let (from, to) = match what {
                    Changed::Nothing => (0, 0),
                    Changed::Range { offset, len } => (
                        (offset as usize / PAGE_BYTES * PAGE_BYTES).min(s.loaded),
                        (offset as usize).saturating_add(len as usize).next_multiple_of(PAGE_BYTES).min(s.loaded),
                    ),
                    Changed::Whole => (0, s.loaded),
                };
                if from < to {
                    // The change stands and is what the caller hears of;
                    // a failed reload (the memory for the copy is short)
                    // leaves stale bytes, which a later write-back would
                    // take for stores.
                    let _ = load(p, s, from, to);
                }
            }
            Ok((out, what))
        })?
    } else {
        let out = change()?;
        let what = changed(&out);
        (out, what)
    };
    if what == Changed::Nothing {
        return Ok(out);
    }
    if teller == Teller::Owner {
        if let Some(kf) = KERNEL_FILES.get().filter(|kf| kf.is_open(ino)) {
            // Another process holds the file open through the mount: the
            // kernel drops the pages that changed, which that process may
            // have cached or mapped, and reads them again from the pool.
            let (off, len) = match what {
                Changed::Range { offset, len } => (offset, len),
                _ => (0, 0),
            };
            if len > 0 || what == Changed::Whole {
                let _ = kf.invalidate(ino, off, len);
                tell_size(p, kf, ino, what);
            }
        }
    }
    views::follow_writes(p, ino);
    Ok(out)
}

/// A change that reached the end of a file the kernel holds open (or one
/// of unknown extent: a truncate, an allocation) may have grown it: the
/// kernel is told the size through the file's last byte, so that another
/// process's mapping past the old end reads the new bytes instead of
/// raising SIGBUS. A file that shrank needs nothing more: its pages were
/// dropped, and the short read of the next access tells the kernel the
/// smaller size (an access past the new end raises SIGBUS, as on Linux).
fn tell_size(p: &Preload, kf: &ferrite_fuse::KernelFiles, ino: InodeNo, what: Changed) {
    let Ok(size) = p.session.getattr(ino).map(|a| a.size) else { return };
    if size == 0 || matches!(what, Changed::Range { offset, len } if offset.saturating_add(len) < size) {
        return;
    }
    let mut last = [0u8; 1];
    if p.session.read_ino(ino, size - 1, &mut last) == Ok(1) {
        let _ = kf.grown(ino, size - 1, &last);
    }
}

/// Whether a change of a file has shadows, views or the kernel to tell.
pub fn following_any() -> bool {
    SHADOWS.load(Ordering::Relaxed) > 0 || views::following() || KERNEL_FILES.get().is_some_and(|kf| kf.any_open())
}

/// A Ferrite descriptor is being closed or replaced: its mappings stay
/// (POSIX), so nothing to do but write back if this was the file's last
/// descriptor in this process.
pub fn release_fd(p: &Preload, n: c_int) {
    if SHADOWS.load(Ordering::Relaxed) > 0 && is_ferrite(n) {
        let _ = inside(|| write_back(p, n));
    }
}

/// In a forked child: close the shadows' memfds (the child's mappings keep
/// their pages; the child no longer writes back: it is not the owner).
pub fn close_shadows_in_child() {
    if SHADOWS.load(Ordering::Relaxed) == 0 {
        return;
    }
    if let Some(mut g) = TABLE.try_lock() {
        if let Some(t) = g.as_mut() {
            for s in t.shadows.values() {
                // SAFETY: this child's copy of our memfd.
                unsafe { libc::syscall(libc::SYS_close, s.memfd) };
            }
            t.shadows.clear();
            t.regions.clear();
        }
    }
}
