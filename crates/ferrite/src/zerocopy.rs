//! Zero-copy views and patch buffers (Sub-Zero's `peek` and `patch`).
//!
//! A view shows a file's bytes at one moment, in place: the pool pages the
//! file maps are mapped read-only (or private) into the caller's address
//! space, and *pinned* in the page allocator. The engine never changes a
//! committed page in place, and a pinned page that a write, truncate, punch
//! or unlink releases is not freed until the last view holding it lets go,
//! so the view keeps showing the bytes of its moment while writers go on
//! copying on write, never blocked. The one place the engine writes a data
//! page in place (a page an fsync-atomic epoch allocated) checks the pin
//! first and copies instead.
//!
//! A patch buffer is fresh pool pages mapped writable into the caller's
//! address space. The caller fills them with ordinary stores; `patch`
//! writes their lines back, maps them into the file with Write entries
//! through the one commit path (atomic, durable in strict mode, pending in
//! an fsync-atomic file), and unmaps the buffer. Nothing about views or
//! buffers is on media: pins and unpatched buffers live in DRAM only, so a
//! crash releases them all (recovery rebuilds the allocator from the logs,
//! in which unpatched buffer pages appear nowhere), and a clean unmount
//! releases them before it saves the allocator.
//!
//! docs/DESIGN.md, "Zero-copy views and patch buffers", tells the story.

use crate::alloc::Runs;
use crate::commit::{Change, Fresh};
use crate::file::{flatten, write_entries};
use crate::format::{PageNo, PAGE_SHIFT, PAGE_SIZE};
use crate::fs::Ferrite;
use crate::inode::Inode;
use crate::types::{limits, Errno, FileType, FsResult};
use ferrite_pmem::{PoolOffset, Window, WindowAccess, WindowPage};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicUsize, Ordering};

const PAGE: usize = PAGE_SIZE as usize;

/// A live view's identity: the address of its first byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ViewId(pub usize);

/// A live patch buffer's identity: the address of its first byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BufferId(pub usize);

/// What `peek` and `map_view` hand out: `len` readable bytes at `ptr`, valid
/// until `unpeek(id)` or the unmount.
#[derive(Clone, Copy, Debug)]
pub struct Peek {
    pub id: ViewId,
    pub ptr: *const u8,
    pub len: usize,
}

/// What `patch_buffer` hands out: `len` writable bytes at `ptr`, valid
/// until `patch`, `free_buffer` or the unmount. Their initial contents are
/// unspecified, as malloc's are.
#[derive(Clone, Copy, Debug)]
pub struct PatchBuffer {
    pub id: BufferId,
    pub ptr: *mut u8,
    pub len: usize,
}

/// How a mapping made by `map_view` may be stored to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MapKind {
    /// Stores fault.
    ReadOnly,
    /// Stores go to private copies of the pages, never to the file.
    PrivateWritable,
}

/// Where a view's bytes are.
enum ViewBytes {
    /// In the read-only alias of the whole pool, starting at this pool
    /// offset: the view is one run of pool pages, and costs no system call.
    Alias(PoolOffset),
    /// In a window of its own, starting `skew` bytes into it.
    Window { window: Window, skew: usize },
}

struct View {
    bytes: ViewBytes,
    len: usize,
    /// Pool pages pinned for this view.
    pinned: Pinned,
}

/// The pool pages a view pins: one run (the common case, kept without an
/// allocation), or a list.
enum Pinned {
    Run { first: PageNo, pages: u64 },
    List(Vec<PageNo>),
}

impl Ferrite {
    /// Let go of a view's pages.
    fn unpin_view(&self, pinned: &Pinned) {
        match pinned {
            Pinned::Run { first, pages } => self.pages.unpin((0..*pages).map(|i| PageNo(first.0 + i))),
            Pinned::List(v) => self.pages.unpin(v.iter().copied()),
        }
    }
}

struct Buffer {
    window: Window,
    runs: Runs,
    len: u64,
}

/// The live views and buffers of a mounted pool.
#[derive(Default)]
pub(crate) struct ZeroCopy {
    /// Views by the address of their first byte. Views of the alias with
    /// the same bytes share an address; they hold the same pages, so
    /// `unpeek` may release any one of them.
    views: Mutex<crate::Map<usize, SmallVec<[View; 1]>>>,
    view_count: AtomicUsize,
    buffers: Mutex<crate::Map<usize, Buffer>>,
}

/// The pages of a view, planned under the inode's lock.
enum Planned {
    Pool(PageNo),
    Zero,
    Bytes(Box<[u8; PAGE]>),
}

fn regular(inode: &Inode) -> FsResult<()> {
    match inode.kind {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Errno::EISDIR),
        _ => Err(Errno::EINVAL),
    }
}

impl Ferrite {
    /// Take a view slot (ENOMEM past `VIEWS_MAX`).
    fn reserve_view(&self) -> FsResult<()> {
        let n = &self.zero_copy.view_count;
        n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| (v < limits::VIEWS_MAX).then_some(v + 1))
            .map(|_| ())
            .map_err(|_| Errno::ENOMEM)
    }

    fn unreserve_view(&self) {
        self.zero_copy.view_count.fetch_sub(1, Ordering::AcqRel);
    }

    /// A read-only snapshot of bytes `[offset, offset + len)` of a regular
    /// file, contiguous in this process's address space, valid until
    /// `unpeek`. Holes read as zeros; stores fault. Later writes, truncates,
    /// punches and the unlink of the file do not change what it shows.
    /// EINVAL: `len` is 0 or above `VIEW_BYTES_MAX`, or the range passes
    /// the end of the file; EISDIR: a directory; ENOMEM: `VIEWS_MAX` views
    /// are live, or the address space ran out.
    pub fn peek(&self, inode: &Inode, offset: u64, len: u64) -> FsResult<Peek> {
        regular(inode)?;
        if len == 0 || len > limits::VIEW_BYTES_MAX {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(len).ok_or(Errno::EINVAL)?;
        self.make_view(inode, offset, len, end, None)
    }

    /// A mapping of file bytes from `offset` (page-aligned) for `len` bytes
    /// (rounded up to pages), for `mmap`: like `peek`, but always an address
    /// range of its own, and pages past the end of the file read as zeros.
    pub fn map_view(&self, inode: &Inode, offset: u64, len: u64, kind: MapKind) -> FsResult<Peek> {
        regular(inode)?;
        if len == 0 || len > limits::VIEW_BYTES_MAX || !offset.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let len = len.next_multiple_of(PAGE_SIZE);
        let end = offset.checked_add(len).ok_or(Errno::EINVAL)?;
        self.make_view(inode, offset, len, end, Some(kind))
    }

    /// A view slot taken (ENOMEM past `VIEWS_MAX`), then the view made;
    /// the slot goes back if that fails.
    fn make_view(&self, inode: &Inode, offset: u64, len: u64, end: u64, map: Option<MapKind>) -> FsResult<Peek> {
        self.reserve_view()?;
        let made = self.make_view_reserved(inode, offset, len, end, map);
        if made.is_err() {
            self.unreserve_view();
        }
        made
    }

    fn make_view_reserved(
        &self,
        inode: &Inode,
        offset: u64,
        len: u64,
        end: u64,
        map: Option<MapKind>,
    ) -> FsResult<Peek> {
        let first = offset >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        let skew = (offset & (PAGE_SIZE - 1)) as usize;
        let mut plan: Vec<Planned> = Vec::new();
        let mut run: Option<PageNo> = None;
        let mut pinned: Vec<PageNo> = Vec::new();
        {
            let d = inode.lock_read();
            if !d.alive {
                return Err(Errno::ENOENT);
            }
            if map.is_none() && end > d.attrs.size {
                return Err(Errno::EINVAL);
            }
            let pages = d.pages();
            let any_deltas = pages.delta_bytes() > 0;
            // The common case first: a peek of one run of pool pages with no
            // deltas, shown through the alias without any allocation.
            if map.is_none() && self.media.pmem.read_only_alias(PoolOffset(0), 0).is_some() {
                let mut expect: Option<PageNo> = None;
                let mut start: Option<PageNo> = None;
                let mut ok = true;
                for (i, p) in (first..=last).enumerate() {
                    match pages.get(&p) {
                        Some(r)
                            if (!any_deltas || pages.deltas(p).is_empty()) && expect.is_none_or(|e| e == r.pool) =>
                        {
                            if i == 0 {
                                start = Some(r.pool);
                            }
                            expect = Some(PageNo(r.pool.0 + 1));
                        }
                        _ => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    let s = start.expect("at least one page");
                    self.pages.pin((0..=last - first).map(|i| PageNo(s.0 + i)));
                    run = Some(s);
                }
            }
            if run.is_none() {
                plan.reserve((last - first + 1) as usize);
                for p in first..=last {
                    plan.push(match pages.get(&p) {
                        Some(r) if !any_deltas || pages.deltas(p).is_empty() => {
                            pinned.push(r.pool);
                            Planned::Pool(r.pool)
                        }
                        // A page with deltas exists only as a merge: the view
                        // gets a copy of the merged bytes.
                        Some(_) => {
                            let mut b = Box::new([0u8; PAGE]);
                            self.read_page(&d, p, &mut b);
                            Planned::Bytes(b)
                        }
                        None => Planned::Zero,
                    });
                }
                // Pinned under the lock: no write can release them in between.
                self.pages.pin(pinned.iter().copied());
            }
        }
        let (bytes, pinned, ptr) = match run {
            Some(s) => {
                let at = s.offset() + skew as u64;
                let ptr = self.media.pmem.read_only_alias(at, len).expect("the alias exists");
                (ViewBytes::Alias(at), Pinned::Run { first: s, pages: last - first + 1 }, ptr)
            }
            None => {
                let pages: Vec<WindowPage<'_>> = plan
                    .iter()
                    .map(|x| match x {
                        Planned::Pool(p) => WindowPage::Pool(p.offset()),
                        Planned::Zero => WindowPage::Zero,
                        Planned::Bytes(b) => WindowPage::Bytes(&b[..]),
                    })
                    .collect();
                let access = match map {
                    Some(MapKind::PrivateWritable) => WindowAccess::PrivateWritable,
                    _ => WindowAccess::ReadOnly,
                };
                match self.media.pmem.map_view(&pages, access) {
                    Ok(window) => {
                        let ptr = window.as_ptr().wrapping_add(skew);
                        (ViewBytes::Window { window, skew }, Pinned::List(pinned), ptr)
                    }
                    Err(_) => {
                        self.pages.unpin(pinned.iter().copied());
                        return Err(Errno::ENOMEM);
                    }
                }
            }
        };
        let id = ViewId(ptr as usize);
        self.zero_copy.views.lock().entry(id.0).or_default().push(View { bytes, len: len as usize, pinned });
        Ok(Peek { id, ptr, len: len as usize })
    }

    /// Release a view: its address range is unmapped (if it has one of its
    /// own), then its pages are unpinned, and those freed meanwhile go back
    /// to the allocator. EINVAL if `id` is not a live view.
    pub fn unpeek(&self, id: ViewId) -> FsResult<()> {
        let view = {
            let mut views = self.zero_copy.views.lock();
            let list = views.get_mut(&id.0).ok_or(Errno::EINVAL)?;
            // Views shown through the alias share an id when they start at
            // the same pool byte, and the caller cannot say which of them it
            // releases. They all pin runs from the same first page, so the
            // shortest goes: the longest records left then cover every
            // holder left, whichever one this was. (Releasing the last one
            // made could unpin pages a shorter view's holder still read: a
            // view changed while held, in `zero_copy.rs`'s four threads.)
            let shortest = (0..list.len()).min_by_key(|&i| list[i].len).expect("no empty lists are kept");
            let v = list.swap_remove(shortest);
            if list.is_empty() {
                views.remove(&id.0);
            }
            v
        };
        let View { bytes, pinned, .. } = view;
        // Unmapped before the pages can be reused.
        drop(bytes);
        self.unpin_view(&pinned);
        self.unreserve_view();
        Ok(())
    }

    /// Copy bytes `[at, at + buf.len())` of a live view out (for callers
    /// that hold no raw pointer, such as tests). EINVAL: not a live view, or
    /// outside it.
    pub fn view_copy_out(&self, id: ViewId, at: usize, buf: &mut [u8]) -> FsResult<()> {
        let views = self.zero_copy.views.lock();
        // Of views sharing the id, the longest covers every holder's bytes.
        let v = views.get(&id.0).and_then(|l| l.iter().max_by_key(|v| v.len)).ok_or(Errno::EINVAL)?;
        if at.checked_add(buf.len()).is_none_or(|e| e > v.len) {
            return Err(Errno::EINVAL);
        }
        match &v.bytes {
            ViewBytes::Alias(start) => self.media.read(*start + at as u64, buf),
            ViewBytes::Window { window, skew } => window.copy_out(skew + at, buf),
        }
        Ok(())
    }

    /// Pool pages views hold, and how many of them files have freed
    /// meanwhile (they go back to the allocator with their last view).
    pub fn pinned_pages(&self) -> (u64, u64) {
        self.pages.pinned()
    }

    /// Live views (peeks and mappings).
    pub fn live_views(&self) -> usize {
        self.zero_copy.view_count.load(Ordering::Acquire)
    }

    /// `len` bytes (rounded up to pages) of fresh pool pages, writable (their
    /// initial bytes unspecified, as malloc's), for `patch`. EINVAL: `len` is 0 or above `BUFFER_BYTES_MAX`;
    /// ENOSPC; ENOMEM: `BUFFERS_MAX` buffers are live, or the address space
    /// ran out.
    pub fn patch_buffer(&self, len: u64) -> FsResult<PatchBuffer> {
        if len == 0 || len > limits::BUFFER_BYTES_MAX {
            return Err(Errno::EINVAL);
        }
        if self.zero_copy.buffers.lock().len() >= limits::BUFFERS_MAX {
            return Err(Errno::ENOMEM);
        }
        let runs = self.alloc_pages_anywhere(len.div_ceil(PAGE_SIZE))?;
        let offsets: Vec<(PoolOffset, u64)> = runs.iter().map(|&(s, n)| (s.offset(), n as u64)).collect();
        let window = match self.media.pmem.map_buffer(&offsets) {
            Ok(w) => w,
            Err(_) => {
                for &(s, n) in &runs {
                    self.pages.free(s, n as u64);
                }
                return Err(Errno::ENOMEM);
            }
        };
        let ptr = window.as_mut_ptr();
        let id = BufferId(ptr as usize);
        let mut buffers = self.zero_copy.buffers.lock();
        if buffers.len() >= limits::BUFFERS_MAX {
            drop(buffers);
            drop(window);
            for &(s, n) in &runs {
                self.pages.free(s, n as u64);
            }
            return Err(Errno::ENOMEM);
        }
        buffers.insert(id.0, Buffer { window, runs, len });
        Ok(PatchBuffer { id, ptr, len: len as usize })
    }

    /// Copy `data` into a live buffer at `at` (for callers that hold no raw
    /// pointer). EINVAL: not a live buffer, or outside it.
    pub fn buffer_copy_in(&self, id: BufferId, at: usize, data: &[u8]) -> FsResult<()> {
        let buffers = self.zero_copy.buffers.lock();
        let b = buffers.get(&id.0).ok_or(Errno::EINVAL)?;
        if at.checked_add(data.len()).is_none_or(|e| e as u64 > b.len) {
            return Err(Errno::EINVAL);
        }
        b.window.copy_in(at, data);
        Ok(())
    }

    /// Live patch buffers.
    pub fn live_buffers(&self) -> usize {
        self.zero_copy.buffers.lock().len()
    }

    /// Give a buffer back without patching it. EINVAL if not live.
    pub fn free_buffer(&self, id: BufferId) -> FsResult<()> {
        let b = self.zero_copy.buffers.lock().remove(&id.0).ok_or(Errno::EINVAL)?;
        self.drop_buffer(b, 0);
        Ok(())
    }

    /// Unmap a buffer, then free its pages from page `keep` on (the first
    /// `keep` pages now belong to a file).
    fn drop_buffer(&self, b: Buffer, keep: usize) {
        let Buffer { window, runs, .. } = b;
        drop(window);
        for p in flatten(&runs).into_iter().skip(keep) {
            self.pages.free(p, 1);
        }
    }

    /// Make the first `len` bytes of buffer `id` the file's bytes `[offset,
    /// offset + len)`, in one atomic commit (durable at return in strict
    /// mode, pending until the next commit point in an fsync-atomic file).
    /// With `offset` page-aligned the buffer's pages become the file's (a
    /// partial last page first gets the file's bytes after `len`, as a
    /// write's copy would); otherwise the bytes are copied by a write. The
    /// buffer is gone afterwards: its address range is unmapped. EINVAL: not
    /// a live buffer, `len` 0 or above the buffer's; EISDIR: a directory;
    /// EFBIG: past the largest file size; ENOSPC. On error nothing changed
    /// and the buffer is still the caller's.
    pub fn patch(&self, inode: &Inode, offset: u64, id: BufferId, len: u64) -> FsResult<()> {
        regular(inode)?;
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > limits::FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        let buf = {
            let mut buffers = self.zero_copy.buffers.lock();
            let b = buffers.get(&id.0).ok_or(Errno::EINVAL)?;
            if len == 0 || len > b.len {
                return Err(Errno::EINVAL);
            }
            buffers.remove(&id.0).expect("just found")
        };
        match self.patch_locked(inode, offset, &buf, len) {
            Ok(used) => {
                self.drop_buffer(buf, used);
                Ok(())
            }
            Err(e) => {
                self.zero_copy.buffers.lock().insert(id.0, buf);
                Err(e)
            }
        }
    }

    /// The body of `patch`: returns how many of the buffer's pages the file
    /// took.
    fn patch_locked(&self, inode: &Inode, offset: u64, buf: &Buffer, len: u64) -> FsResult<usize> {
        let mut d = inode.lock_write();
        if !d.alive {
            return Err(Errno::ENOENT);
        }
        if !offset.is_multiple_of(PAGE_SIZE) {
            // Pages cannot move to where they would not line up: copy.
            let mut bytes = vec![0u8; len as usize];
            buf.window.copy_out(0, &mut bytes);
            self.write_locked(inode, &mut d, offset, &bytes)?;
            return Ok(0);
        }
        let used = len.div_ceil(PAGE_SIZE) as usize;
        let tail = (len % PAGE_SIZE) as usize;
        let first = offset >> PAGE_SHIFT;
        if tail != 0 {
            // The rest of the last page is the file's (zeros in a hole or
            // past its end), as a copy-on-write write would make it.
            let mut page = [0u8; PAGE];
            self.read_page(&d, first + used as u64 - 1, &mut page);
            buf.window.copy_in((used - 1) * PAGE + tail, &page[tail..]);
        }
        // Written back (a mapped buffer) or streamed in (a copied one): the
        // commit's first fence makes the pages durable before the tail.
        self.media.pmem.adopt_buffer(&buf.window, (used * PAGE) as u64);
        let pool = flatten(&buf.runs);
        let pairs: Vec<(u64, PageNo)> = (0..used).map(|i| (first + i as u64, pool[i])).collect();
        let size_after = d.attrs.size.max(offset + len);
        let entries = write_entries(first, &pairs, size_after, self.now_ns());
        self.commit(inode, &mut d, entries, Fresh::none(), Change::Data)?;
        Ok(used)
    }

    /// Release every view and buffer (clean unmount): address ranges
    /// unmapped, pins dropped, unpatched buffer pages freed.
    pub(crate) fn release_zero_copy(&self) {
        let views: Vec<View> = self.zero_copy.views.lock().drain().flat_map(|(_, l)| l).collect();
        for View { bytes, pinned, .. } in views {
            drop(bytes);
            self.unpin_view(&pinned);
            self.unreserve_view();
        }
        let buffers: Vec<Buffer> = self.zero_copy.buffers.lock().drain().map(|(_, b)| b).collect();
        for b in buffers {
            self.drop_buffer(b, 0);
        }
    }
}
