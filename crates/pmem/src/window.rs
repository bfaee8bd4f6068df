//! Windows: pool pages placed side by side in the caller's address space,
//! for zero-copy views (`peek`, read-only and private `mmap`) and patch
//! buffers.
//!
//! On a pool that is a shared mapping of a file, a window maps the pool
//! file's own pages (`mmap` with `MAP_FIXED` into a reserved range), so
//! nothing is copied. On a heap pool (tests, the crash harness) or a private
//! view there is no file to map: a window is anonymous memory holding a copy
//! of the bytes, and adopting a patch buffer copies it into the pool with the
//! recorded non-temporal stores, so crash simulation sees every store. The
//! engine cannot tell the two apart, which is the point.
//!
//! This module has no `unsafe`; `mapping::WindowMap` does the raw work.

use crate::mapping::{MapHow, PoolMapping, WindowMap, PAGE};
use crate::record::Event;
use crate::{Pmem, PoolOffset};
use std::io;

/// What one page of a view shows.
#[derive(Clone, Copy, Debug)]
pub enum WindowPage<'a> {
    /// The pool page at this (page-aligned) offset.
    Pool(PoolOffset),
    /// A page of zeros (a hole, or past the end of the file).
    Zero,
    /// These bytes (at most one page; the rest of the page is zero): a page
    /// whose current contents exist only as a merge, not as one pool page.
    Bytes(&'a [u8]),
}

/// Whether a view may be stored to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WindowAccess {
    /// Stores fault (SIGSEGV).
    ReadOnly,
    /// Stores go to private copies of the pages and never reach the pool.
    PrivateWritable,
}

/// A view or a patch buffer: a range of the address space this value owns.
/// Dropping it unmaps the range.
pub struct Window {
    map: WindowMap,
    /// For a patch buffer: its pool pages, as runs (first page's offset,
    /// pages), in window order.
    buffer_runs: Vec<(PoolOffset, u64)>,
    /// The pages are the pool's own (mapped), not a copy.
    mapped: bool,
    writable: bool,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("ptr", &self.map.ptr())
            .field("len", &self.map.len())
            .field("buffer_runs", &self.buffer_runs)
            .field("mapped", &self.mapped)
            .finish()
    }
}

impl Window {
    /// The first byte. Valid for `len()` bytes until the window is dropped.
    pub fn as_ptr(&self) -> *const u8 {
        self.map.ptr()
    }

    /// The first byte, for stores (buffers and private views only).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        assert!(self.writable, "ferrite-pmem: a store through a read-only window");
        self.map.ptr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Whether the window maps the pool's pages (zero-copy) rather than
    /// holding a copy of them.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// Copies bytes out of the window.
    pub fn copy_out(&self, at: usize, buf: &mut [u8]) {
        self.map.copy_out(at, buf);
    }

    /// Copies bytes into a writable window. Panics on a read-only one.
    pub fn copy_in(&self, at: usize, data: &[u8]) {
        assert!(self.writable, "ferrite-pmem: a store through a read-only window");
        self.map.copy_in(at, data);
    }
}

impl Pmem {
    /// A view: `pages` side by side, read-only or private. Consecutive pool
    /// pages at consecutive offsets are mapped with one `mmap`.
    pub fn map_view(&self, pages: &[WindowPage<'_>], access: WindowAccess) -> io::Result<Window> {
        let page = PAGE as usize;
        let how = match access {
            WindowAccess::ReadOnly => PoolMapping::ReadOnly,
            WindowAccess::PrivateWritable => PoolMapping::PrivateWritable,
        };
        // One run of pool pages: one mapping where the kernel likes.
        if let Some(WindowPage::Pool(first)) = pages.first() {
            let one_run = pages
                .iter()
                .enumerate()
                .all(|(i, p)| matches!(p, WindowPage::Pool(o) if o.0 == first.0 + i as u64 * PAGE));
            if one_run {
                let off = self.range_or_panic("map_view", *first, (pages.len() * page) as u64);
                let direct = MapHow { access: how, map_sync: self.map_sync, populate: true };
                if let Some(map) = self.region.map_new(off, pages.len() * page, direct)? {
                    return Ok(Window {
                        map,
                        buffer_runs: Vec::new(),
                        mapped: true,
                        writable: access == WindowAccess::PrivateWritable,
                    });
                }
            }
        }
        let map = WindowMap::reserve(pages.len().max(1) * page)?;
        let mappable = self.region.mappable();
        let mut copied = false;
        let mut i = 0;
        while i < pages.len() {
            match pages[i] {
                WindowPage::Pool(first) => {
                    assert!(first.0.is_multiple_of(PAGE), "ferrite-pmem: view of pool offset {first} not page-aligned");
                    let mut n = 1;
                    while i + n < pages.len() {
                        match pages[i + n] {
                            WindowPage::Pool(o) if o.0 == first.0 + n as u64 * PAGE => n += 1,
                            _ => break,
                        }
                    }
                    let off = self.range_or_panic("map_view", first, (n * page) as u64);
                    if mappable {
                        self.region.map_into(
                            &map,
                            i * page,
                            off,
                            n * page,
                            MapHow { access: how, map_sync: self.map_sync, populate: true },
                        )?;
                    } else {
                        map.map_anonymous(i * page, n * page)?;
                        let mut buf = vec![0u8; n * page];
                        self.region.copy_out(off, &mut buf);
                        map.copy_in(i * page, &buf);
                        copied = true;
                    }
                    i += n;
                }
                WindowPage::Zero => {
                    map.map_anonymous(i * page, page)?;
                    i += 1;
                }
                WindowPage::Bytes(b) => {
                    assert!(b.len() <= page, "ferrite-pmem: {} bytes for one view page", b.len());
                    map.map_anonymous(i * page, page)?;
                    map.copy_in(i * page, b);
                    copied = true;
                    i += 1;
                }
            }
        }
        // Pool pages were mapped with their final protection; only the
        // anonymous pages (filled above) must become read-only.
        if access == WindowAccess::ReadOnly && (copied || pages.iter().any(|p| matches!(p, WindowPage::Zero))) {
            map.protect(false)?;
        }
        Ok(Window { map, buffer_runs: Vec::new(), mapped: !copied, writable: access == WindowAccess::PrivateWritable })
    }

    /// A patch buffer over pool pages (runs of whole pages the caller has
    /// allocated and owns, in the order they appear in the window),
    /// writable. Its initial bytes are unspecified (zeros on a heap pool,
    /// what the pages held on a pool file).
    pub fn map_buffer(&self, runs: &[(PoolOffset, u64)]) -> io::Result<Window> {
        let total: u64 = runs.iter().map(|r| r.1).sum();
        assert!(total > 0, "ferrite-pmem: a buffer of no pages");
        if let [(offset, pages)] = runs {
            // One run: one mapping where the kernel likes.
            let off = self.range_or_panic("map_buffer", *offset, pages * PAGE);
            let how = MapHow { access: PoolMapping::SharedWritable, map_sync: self.map_sync, populate: true };
            if let Some(map) = self.region.map_new(off, (pages * PAGE) as usize, how)? {
                return Ok(Window { map, buffer_runs: runs.to_vec(), mapped: true, writable: true });
            }
        }
        let map = WindowMap::reserve((total * PAGE) as usize)?;
        let mut mapped = self.region.mappable();
        let mut at = 0usize;
        for &(offset, pages) in runs {
            assert!(offset.0.is_multiple_of(PAGE) && pages > 0, "ferrite-pmem: buffer pages at {offset}");
            let off = self.range_or_panic("map_buffer", offset, pages * PAGE);
            let len = (pages * PAGE) as usize;
            if mapped {
                let how = MapHow { access: PoolMapping::SharedWritable, map_sync: self.map_sync, populate: true };
                mapped = self.region.map_into(&map, at, off, len, how)?;
            }
            if !mapped {
                map.map_anonymous(at, len)?;
            }
            at += len;
        }
        // A mapped buffer is not zeroed: it shows what its pages held, as
        // malloc's memory does (the process maps the whole pool anyway), and
        // zeroing would be one more pass over every byte, paid on every
        // patch. Bytes the caller leaves unwritten never reach a file: a
        // patch takes only its `len` bytes and merges the rest of the last
        // page from the file.
        Ok(Window { map, buffer_runs: runs.to_vec(), mapped, writable: true })
    }

    /// Makes the first `len` bytes of a patch buffer the pool's contents at
    /// its pages, durable at the caller's next [`fence`](Pmem::fence): a
    /// mapped buffer's lines are written back (and recorded as stores, if
    /// recording), a copied buffer's bytes are streamed into the pool with
    /// `write_nt`. The caller drops the window afterwards, so that later
    /// stores through it fault.
    pub fn adopt_buffer(&self, window: &Window, len: u64) {
        assert!(!window.buffer_runs.is_empty(), "ferrite-pmem: adopt_buffer of a view");
        assert!(len <= window.len() as u64, "ferrite-pmem: adopting {len} bytes of a {}-byte buffer", window.len());
        let mut done = 0u64;
        for &(at, pages) in &window.buffer_runs {
            if done >= len {
                break;
            }
            let n = (pages * PAGE).min(len - done);
            if window.mapped {
                if let Some(mut r) = self.recorder() {
                    let mut data = vec![0u8; n as usize];
                    self.region.copy_out(at.0 as usize, &mut data);
                    r.push(|| Event::Store { offset: at.0, data });
                }
                self.flush(at, n);
            } else {
                let mut data = vec![0u8; n as usize];
                window.copy_out(done as usize, &mut data);
                self.write_nt(at, &data);
            }
            done += n;
        }
    }

    /// The address of pool bytes `[offset, offset + len)` in a read-only
    /// alias of the whole pool (made on first use), for views whose bytes
    /// are one run of pool pages: no system call per view. `None` for a
    /// heap pool or a private view, which have no file to alias, or if the
    /// alias cannot be made.
    pub fn read_only_alias(&self, offset: PoolOffset, len: u64) -> Option<*const u8> {
        let off = self.range_or_panic("read_only_alias", offset, len);
        let alias = self
            .alias
            .get_or_init(|| {
                if !self.region.mappable() {
                    return None;
                }
                let map = WindowMap::reserve(self.region.len()).ok()?;
                // Not populated: a whole pool's page tables would take tens of
                // milliseconds; the alias fills as views touch it.
                let how = MapHow { access: PoolMapping::ReadOnly, map_sync: false, populate: false };
                match self.region.map_into(&map, 0, 0, self.region.len(), how) {
                    Ok(true) => Some(map),
                    _ => None,
                }
            })
            .as_ref()?;
        // In bounds: `off + len` is inside the pool, which the alias spans.
        Some(alias.ptr().wrapping_add(off).cast_const())
    }
}
