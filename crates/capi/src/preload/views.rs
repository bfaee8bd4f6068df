//! Zero-copy views and patch buffers under the preload library.
//!
//! Two kinds of view live in a preloaded process, both made by the engine
//! and both showing the pool's pages in place:
//! - peeks: views the program asked for by `ferrite_peek` on the preload
//!   handle (`ferrite_preload_handle()`), released by `ferrite_unpeek`. The
//!   engine serves a peek whose bytes are one run of pool pages from its
//!   read-only alias of the whole pool, so peeks may share addresses and
//!   overlap, and their address stays mapped after `unpeek`;
//! - mappings: read-only and private `mmap`s of Ferrite descriptors (see
//!   `mmap.rs`), each an address range of its own (`Session::map_view`),
//!   released by `munmap`. A read-only MAP_SHARED mapping *follows* its
//!   file: at the first change of the file through this process
//!   (`follow_writes`), the file's DRAM shadow (`mmap.rs`) is mapped over
//!   the view's pages, and the view stays in the table, and in the engine
//!   (its pins keep the pages it showed), until it is unmapped, so that
//!   the rules below go on holding for its address range.
//!
//! The library keeps a table of both, because the program manages that
//! memory with the C library's own calls, which the engine never sees:
//! - `munmap` of part of a mapping does not unmap it: those pages are
//!   replaced by inaccessible memory (they fault as after munmap, and the
//!   range is never handed to another mapping while the engine still owns
//!   it), and the mapping is released when its last page is unmapped.
//!   `munmap` over a peek fails with EINVAL (`ferrite_unpeek` releases it;
//!   unmapping would break the engine's alias);
//! - `mprotect` that would make a peek or a read-only mapping writable fails
//!   with EACCES, as Linux refuses it for a shared mapping of a file opened
//!   read-only: they map committed pages of the pool, which nothing may
//!   store into;
//! - `mremap` of either fails with EINVAL (the engine knows a view by its
//!   address);
//! - a forked child (which no longer serves the pool and must not keep the
//!   pool file mapped) gets a private copy of each view at the same address,
//!   and so does the program before an exec (a failed exec goes on with its
//!   bytes; the views themselves are released when the pool is handed over).
//!
//! Patch buffers need no table: the engine knows them by address, and a
//! program uses them only through `ferrite_patch` and `ferrite_free_buffer`.

use super::{fd, inside, is_ferrite, Preload};
use crate::real;
use engine::{BufferId, Errno, FsResult, InodeNo, MapKind, Peek, ViewId};
use ferrite_fuse::Changed;
use libc::{c_int, c_long, c_void};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const PAGE_BYTES: usize = 4096;

/// What made a view, which decides how it may be protected.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Origin {
    /// `ferrite_peek`: read-only.
    Peek,
    /// A read-only `mmap` (shared or private): read-only.
    ReadOnlyMap,
    /// A private writable `mmap`: stores go to private copies.
    PrivateMap,
}

/// One live view of this process.
struct View {
    /// The engine's identity of the view (the address of its first byte).
    id: ViewId,
    /// The first page of the view's address range.
    base: usize,
    /// Pages of the view's address range.
    pages: usize,
    origin: Origin,
    /// Pages the program has unmapped (mappings only): they hold
    /// inaccessible memory now, and the mapping is released when every
    /// page is unmapped.
    unmapped: Vec<bool>,
    /// A read-only MAP_SHARED mapping: the file and the offset of the
    /// view's first page, and whether the file's shadow is mapped over it.
    follow: Option<Follow>,
}

/// What a mapping that follows its file needs to move onto the shadow.
#[derive(Clone, Copy)]
struct Follow {
    ino: InodeNo,
    offset: u64,
    on_shadow: bool,
}

impl View {
    fn end(&self) -> usize {
        self.base + self.pages * PAGE_BYTES
    }

    fn overlaps(&self, start: usize, end: usize) -> bool {
        self.base < end && start < self.end()
    }
}

/// Live views, in the order they were made. A process holds few enough
/// that a list is searched faster than a tree is kept.
static VIEWS: Mutex<Vec<View>> = Mutex::new(Vec::new());
/// How many views are live: `munmap`, `mprotect` and `mremap` look at the
/// table only when there is one.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// How many of them follow their file: a change of a file looks at the
/// table only when there is one.
static FOLLOWING: AtomicUsize = AtomicUsize::new(0);

fn register(v: &Peek, origin: Origin, follow: Option<Follow>) {
    let addr = v.ptr as usize;
    let base = addr & !(PAGE_BYTES - 1);
    let pages = (addr - base + v.len).div_ceil(PAGE_BYTES).max(1);
    let unmapped = if origin == Origin::Peek { Vec::new() } else { vec![false; pages] };
    if follow.is_some() {
        FOLLOWING.fetch_add(1, Ordering::Relaxed);
    }
    VIEWS.lock().push(View { id: v.id, base, pages, origin, unmapped, follow });
    LIVE.fetch_add(1, Ordering::Relaxed);
}

/// A view leaves the table: what follows its file lets go of the shadow.
fn forget(p: &Preload, v: &View) {
    LIVE.fetch_sub(1, Ordering::Relaxed);
    if let Some(f) = v.follow {
        FOLLOWING.fetch_sub(1, Ordering::Relaxed);
        if f.on_shadow {
            super::mmap::unfollow(p, f.ino);
        }
    }
}

/// Whether any mapping follows its file.
pub fn following() -> bool {
    FOLLOWING.load(Ordering::Relaxed) > 0
}

/// The file `ino` changed through this process: every read-only shared
/// mapping of it still showing the pool's pages gets the file's shadow
/// mapped over its pages (those the program has not unmapped), so that it
/// shows this change and, through the shadow, every later one. The
/// shadow is loaded after the change, from the file. A view that cannot
/// move (no memory for the shadow) keeps showing what it showed.
pub fn follow_writes(p: &Preload, ino: InodeNo) {
    if !following() {
        return;
    }
    let mut views = VIEWS.lock();
    for v in views.iter_mut() {
        let Some(f) = v.follow.filter(|f| f.ino == ino && !f.on_shadow) else { continue };
        let need = f.offset as usize + v.pages * PAGE_BYTES;
        let Ok(memfd) = inside(|| super::mmap::follow(p, ino, need)) else { continue };
        let runs: Vec<(usize, usize)> = mapped_runs(v).collect();
        for (addr, len) in runs {
            let at = f.offset as usize + (addr - v.base);
            // SAFETY: MAP_FIXED over pages of a view this process holds,
            // replacing the pool's pages with the same file bytes (and this
            // change) from the shadow; the view's range stays ours.
            unsafe {
                real::mmap(
                    addr as *mut c_void,
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    memfd,
                    at as libc::off_t,
                )
            };
        }
        v.follow = Some(Follow { on_shadow: true, ..f });
    }
}

/// `ferrite_peek` on the preload handle: a view of bytes [off, off+len) of
/// the file open at Ferrite descriptor `n`.
pub fn peek(p: &Preload, n: c_int, off: u64, len: u64) -> FsResult<*const u8> {
    if !is_ferrite(n) {
        return Err(Errno::EBADF);
    }
    // Stores a writable shared mapping of the file made so far are part of
    // the snapshot, as they would be of a read.
    let v = inside(|| {
        super::mmap::before_io(p, n);
        p.session.peek(fd(n), off, len)
    })?;
    register(&v, Origin::Peek, None);
    Ok(v.ptr)
}

/// A view for `mmap`: `len` bytes from the page-aligned offset `off`;
/// `shared` for MAP_SHARED (a read-only one follows the file).
pub fn map(p: &Preload, n: c_int, off: u64, len: usize, kind: MapKind, shared: bool) -> FsResult<*mut c_void> {
    let (v, ino) = inside(|| {
        super::mmap::before_io(p, n);
        let ino = p.session.fd_inode(fd(n))?;
        Ok((p.session.map_view(fd(n), off, len as u64, kind)?, ino))
    })?;
    let origin = match kind {
        MapKind::ReadOnly => Origin::ReadOnlyMap,
        MapKind::PrivateWritable => Origin::PrivateMap,
    };
    let follow = (shared && kind == MapKind::ReadOnly).then_some(Follow { ino, offset: off, on_shadow: false });
    register(&v, origin, follow);
    Ok(v.ptr as *mut c_void)
}

/// `ferrite_unpeek` on the preload handle: release a view whose first byte
/// is at `addr` (a peek's or a mapping's). EINVAL if there is none.
pub fn unpeek(p: &Preload, addr: usize) -> FsResult<()> {
    let mut views = VIEWS.lock();
    let i = views.iter().rposition(|v| v.id.0 == addr).ok_or(Errno::EINVAL)?;
    let v = views.remove(i);
    forget(p, &v);
    inside(|| p.session.unpeek(v.id))
}

/// `ferrite_patch_buffer` on the preload handle.
pub fn patch_buffer(p: &Preload, len: u64) -> FsResult<*mut u8> {
    inside(|| p.session.patch_buffer(len)).map(|b| b.ptr)
}

/// `ferrite_patch` on the preload handle: the file's shadow (if it has
/// writable shared mappings) is written back first and reloaded after, as
/// around a write.
pub fn patch(p: &Preload, n: c_int, off: u64, buf: usize, len: u64) -> FsResult<()> {
    if !is_ferrite(n) {
        return Err(Errno::EBADF);
    }
    inside(|| {
        super::mmap::change(
            p,
            n,
            || p.session.patch(fd(n), off, BufferId(buf), len),
            |_| Changed::Range { offset: off, len },
        )
    })
}

/// `ferrite_free_buffer` on the preload handle.
pub fn free_buffer(p: &Preload, buf: usize) -> FsResult<()> {
    inside(|| p.session.free_buffer(BufferId(buf)))
}

/// The page-aligned range [start, end) that `munmap(addr, len)` and
/// `mprotect(addr, len, …)` act on; None where Linux answers EINVAL.
fn page_range(addr: usize, len: usize) -> Option<(usize, usize)> {
    if !addr.is_multiple_of(PAGE_BYTES) || len == 0 {
        return None;
    }
    let end = addr.checked_add(len)?.checked_next_multiple_of(PAGE_BYTES)?;
    Some((addr, end))
}

/// `munmap` of a range holding views: None when it holds none (the caller
/// unmaps as usual); else the call's result. Pages of a mapping are
/// replaced by inaccessible memory; a mapping whose every page is unmapped
/// is released; the rest of the range is unmapped. A range touching a peek
/// is refused whole (EINVAL).
pub fn munmap(p: &Preload, addr: usize, len: usize) -> Option<c_int> {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let (start, end) = page_range(addr, len)?;
    let mut views = VIEWS.lock();
    let mut hit: Vec<usize> = (0..views.len()).filter(|&i| views[i].overlaps(start, end)).collect();
    if hit.is_empty() {
        return None;
    }
    if hit.iter().any(|&i| views[i].origin == Origin::Peek) {
        return Some(crate::conv::fail(Errno::EINVAL));
    }
    // Mappings never overlap one another: in address order, the pieces
    // between them are unmapped for real.
    hit.sort_by_key(|&i| views[i].base);
    let mut result = 0;
    let mut fail = |e: c_int| {
        if result == 0 {
            crate::conv::set_errno(e);
            result = -1;
        }
    };
    let mut at = start;
    let mut released = Vec::new();
    for &i in &hit {
        let v = &mut views[i];
        let (from, to) = (start.max(v.base), end.min(v.end()));
        for k in (from - v.base) / PAGE_BYTES..(to - v.base) / PAGE_BYTES {
            v.unmapped[k] = true;
        }
        if v.unmapped.iter().all(|&u| u) {
            released.push(i);
        } else {
            // SAFETY: MAP_FIXED over pages of a mapping this process holds:
            // the program has just given them up.
            let m = unsafe {
                real::mmap(
                    from as *mut c_void,
                    to - from,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                fail(crate::conv::errno());
            }
        }
        if at < from {
            // SAFETY: a piece of the caller's range outside every view.
            if unsafe { real::munmap(at as *mut c_void, from - at) } != 0 {
                fail(crate::conv::errno());
            }
        }
        at = at.max(to);
    }
    // SAFETY: as above.
    if at < end && unsafe { real::munmap(at as *mut c_void, end - at) } != 0 {
        fail(crate::conv::errno());
    }
    released.sort_unstable();
    for i in released.into_iter().rev() {
        let v = views.remove(i);
        forget(p, &v);
        if let Err(e) = inside(|| p.session.unpeek(v.id)) {
            fail(e.0);
        }
    }
    Some(result)
}

/// Whether `mprotect` would make a peek or a read-only mapping in
/// [addr, addr+len) writable (refused with EACCES).
pub fn mprotect_refused(addr: usize, len: usize, prot: c_int) -> bool {
    if LIVE.load(Ordering::Relaxed) == 0 || prot & libc::PROT_WRITE == 0 {
        return false;
    }
    let Some((start, end)) = page_range(addr, len) else { return false };
    VIEWS.lock().iter().any(|v| v.origin != Origin::PrivateMap && v.overlaps(start, end))
}

/// Whether [addr, addr+len) touches a view (`mremap` refuses it).
pub fn touches_view(addr: usize, len: usize) -> bool {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let start = addr & !(PAGE_BYTES - 1);
    let end = addr.saturating_add(len.max(1)).next_multiple_of(PAGE_BYTES);
    VIEWS.lock().iter().any(|v| v.overlaps(start, end))
}

/// Copy the pages [addr, addr+len) of a view into fresh anonymous memory
/// with raw system calls only (this runs in a forked child too, where only
/// async-signal-safe functions may be called). Returns the copy, or None.
fn copy_out(addr: usize, len: usize) -> Option<usize> {
    // SAFETY: a fresh anonymous mapping chosen by the kernel. Every
    // argument is passed as a full register (`c_long`): a variadic `int`
    // leaves the upper half of its register undefined.
    let tmp = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0 as c_long,
            len as c_long,
            (libc::PROT_READ | libc::PROT_WRITE) as c_long,
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as c_long,
            -1 as c_long,
            0 as c_long,
        )
    };
    if tmp < 0 {
        return None;
    }
    // SAFETY: the view's pages are mapped readable (the ones the program
    // unmapped are skipped by the caller), and the copy is ours.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, tmp as *mut u8, len) };
    Some(tmp as usize)
}

/// Move the copy `tmp` of `len` bytes over `addr`, with the view's
/// protection.
fn place(tmp: usize, addr: usize, len: usize, origin: Origin) {
    // SAFETY: protecting and moving our own fresh copy over pages of a view
    // of this process (which the copy replaces).
    // Arguments as full registers, as in `copy_out`.
    unsafe {
        if origin != Origin::PrivateMap {
            libc::syscall(libc::SYS_mprotect, tmp as c_long, len as c_long, libc::PROT_READ as c_long);
        }
        libc::syscall(
            libc::SYS_mremap,
            tmp as c_long,
            len as c_long,
            len as c_long,
            (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as c_long,
            addr as c_long,
        );
    }
}

/// The runs of pages of a view the program has not unmapped, as
/// (address, length).
fn mapped_runs(v: &View) -> impl Iterator<Item = (usize, usize)> + '_ {
    let gone = |i: usize| v.unmapped.get(i).copied().unwrap_or(false);
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < v.pages && gone(i) {
            i += 1;
        }
        if i == v.pages {
            return None;
        }
        let first = i;
        while i < v.pages && !gone(i) {
            i += 1;
        }
        Some((v.base + first * PAGE_BYTES, (i - first) * PAGE_BYTES))
    })
}

/// In a forked child, before the pool is unmapped: every view becomes a
/// private copy of its bytes at the same address, so the child reads what
/// the parent saw without keeping the pool file mapped. Without the table
/// (another thread of the parent held it at the fork) the views go with the
/// pool.
pub fn copy_in_child() {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Some(mut views) = VIEWS.try_lock() else { return };
    for v in views.iter() {
        for (addr, len) in mapped_runs(v) {
            if let Some(tmp) = copy_out(addr, len) {
                place(tmp, addr, len, v.origin);
            }
        }
    }
    // The child no longer serves the pool: its copies are ordinary memory.
    // The list is forgotten, not freed: the allocator's locks may have been
    // held by another thread of the parent at the fork.
    std::mem::forget(std::mem::take(&mut *views));
    LIVE.store(0, Ordering::Relaxed);
    FOLLOWING.store(0, Ordering::Relaxed);
}

/// Copies of views waiting to take their place (see `copy_before_exec`).
pub struct Copies(Vec<(usize, usize, usize, Origin)>);

/// Before the pool is handed to an exec'd program: every view is copied
/// out and released. `place_copies`, after the engine is unmounted (which
/// unmaps its alias of the pool, where peeks are), puts each copy at its
/// view's address, so a failed exec goes on reading the bytes.
pub fn copy_before_exec(p: &Preload) -> Copies {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return Copies(Vec::new());
    }
    let views = std::mem::take(&mut *VIEWS.lock());
    LIVE.store(0, Ordering::Relaxed);
    FOLLOWING.store(0, Ordering::Relaxed);
    // Every range is copied before any view is released (peeks overlap).
    let copies = views
        .iter()
        .flat_map(|v| mapped_runs(v).map(move |(a, l)| (a, l, v.origin)))
        .filter_map(|(a, l, o)| copy_out(a, l).map(|t| (t, a, l, o)))
        .collect();
    for v in views {
        let _ = inside(|| p.session.unpeek(v.id));
    }
    Copies(copies)
}

/// Put the copies `copy_before_exec` made at their views' addresses.
/// Another thread mapping memory between the release and this could be
/// given the same addresses, but a program calling exec is not mapping
/// memory.
pub fn place_copies(copies: Copies) {
    for (tmp, addr, len, origin) in copies.0 {
        place(tmp, addr, len, origin);
    }
}
