//! Mount-time recovery and the clean-unmount save.
//!
//! After a clean unmount the allocator was saved as two bitmaps (pages and
//! inode slots) with their CRC in the superblock, so mount restores it
//! without reading a single log: inodes are rebuilt lazily at first access.
//! After a crash, recovery rolls back open journal transactions, then scans
//! every live inode's log in parallel threads (NOVA section 4.7), rebuilding
//! the page bitmap from the pages the logs reference, and frees orphans:
//! inodes whose link count reached zero while they were open.

use crate::format::{self, crc, MountState, PageNo, PAGE_SIZE};
use crate::fs::{Ferrite, PoolError};
use crate::inode::{Inode, InodeData};
use crate::types::{FileType, InodeNo};
use std::sync::Arc;
use std::time::Instant;

/// An inode rebuilt by the recovery scan: number, type, generation, state.
type ScannedInode = (InodeNo, format::InodeHeader, InodeData);

pub(crate) fn mount_existing(mut fs: Ferrite, threads: usize) -> Result<Ferrite, PoolError> {
    let started = Instant::now();
    let sb = fs.superblock();
    let restored = sb.state == MountState::Clean && restore_saved_allocator(&fs).is_ok();
    if !restored {
        recover_after_crash(&mut fs, threads)?;
        fs.report.recovered = true;
    }
    // The root must exist and be a directory.
    let root = fs.inode(InodeNo::ROOT).map_err(|e| PoolError::Corrupt(format!("root directory unreadable: {e:?}")))?;
    if root.kind != FileType::Directory {
        return Err(PoolError::Corrupt("root inode is not a directory".into()));
    }
    // From here on the pool may change: mark it dirty first.
    fs.write_superblock(|sb| {
        sb.state = MountState::Dirty;
        sb.mount_count = sb.mount_count.wrapping_add(1);
        sb.features |= format::FEATURES_KNOWN;
    });
    fs.journals.start_mount(fs.superblock().mount_count);
    fs.report.recovery_ns = started.elapsed().as_nanos() as u64;
    Ok(fs)
}

fn bitmap_get(b: &[u8], i: u64) -> bool {
    b[(i / 8) as usize] & (1 << (i % 8)) != 0
}

fn bitmap_set(b: &mut [u8], i: u64) {
    b[(i / 8) as usize] |= 1 << (i % 8);
}

fn restore_saved_allocator(fs: &Ferrite) -> Result<(), String> {
    let l = fs.media.layout;
    let sb = fs.superblock();
    let page_bytes = format::bitmap_bytes(l.total_pages);
    let inode_bytes = format::bitmap_bytes(l.inode_count);
    let mut buf = vec![0u8; page_bytes + inode_bytes];
    fs.media.read(l.save_start.offset(), &mut buf);
    if crc(&buf) != sb.saved_alloc_crc {
        return Err("saved allocator checksum mismatch".into());
    }
    let (pages, inodes) = buf.split_at(page_bytes);
    if (0..l.data_start.0).any(|p| !bitmap_get(pages, p)) {
        return Err("saved allocator frees a metadata page".into());
    }
    let mut extents = Vec::new();
    let mut p = l.data_start.0;
    let mut free_pages = 0;
    while p < l.total_pages {
        if bitmap_get(pages, p) {
            p += 1;
            continue;
        }
        let s = p;
        while p < l.total_pages && !bitmap_get(pages, p) {
            p += 1;
        }
        extents.push((s, p - s));
        free_pages += p - s;
    }
    let free_inodes: Vec<u64> = (2..l.inode_count).filter(|&i| !bitmap_get(inodes, i)).collect();
    if free_pages != sb.saved_free_pages || free_inodes.len() as u64 != sb.saved_free_inodes {
        return Err("saved allocator counts disagree".into());
    }
    // Pages in use belong to inodes not rebuilt yet: each rebuild claims
    // its pages, and refuses any that are free or already claimed.
    let mut p = l.data_start.0;
    while p < l.total_pages {
        let s = p;
        while p < l.total_pages && bitmap_get(pages, p) {
            p += 1;
        }
        if p > s {
            fs.pages.init_used(PageNo(s), p - s);
        }
        p += 1;
    }
    for (s, n) in extents {
        fs.pages.init_free(PageNo(s), n);
    }
    fs.inodes_free.fill(free_inodes.into_iter());
    Ok(())
}

fn recover_after_crash(fs: &mut Ferrite, threads: usize) -> Result<(), PoolError> {
    fs.report.journals_rolled_back = crate::journal::recover(&fs.media)?;
    let l = fs.media.layout;
    let count = l.inode_count;
    let chunk = count.div_ceil(threads as u64).max(1);
    let media = &fs.media;
    // Scan the inode table in parallel: each thread rebuilds the inodes of
    // its range and reports them.
    let results: Vec<Result<Vec<ScannedInode>, format::Corrupt>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    let lo = (t * chunk).max(1);
                    let hi = ((t + 1) * chunk).min(count);
                    for i in lo..hi {
                        let ino = InodeNo(i);
                        if let format::InodeSlot::Live { header, head, tail } = media.read_slot(ino)? {
                            let d = InodeData::load(media, ino, header.kind, header.generation, head, tail)?;
                            out.push((ino, header, d));
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("recovery thread panicked")).collect()
    });
    let mut used = vec![0u8; format::bitmap_bytes(l.total_pages)];
    for p in 0..l.data_start.0 {
        bitmap_set(&mut used, p);
    }
    let mut live = vec![false; count as usize];
    let mut orphans = Vec::new();
    let mut scanned = 0u64;
    for r in results {
        for (ino, header, d) in r? {
            scanned += 1;
            for p in d.owned_pages() {
                if bitmap_get(&used, p.0) {
                    return Err(PoolError::Corrupt(format!(
                        "page {} is owned twice (second owner inode {})",
                        p.0, ino.0
                    )));
                }
                bitmap_set(&mut used, p.0);
            }
            let inode = Arc::new(Inode::new(ino, header.kind, header.generation, header.rdev, d));
            if inode.data.read().attrs.nlink == 0 {
                orphans.push(inode);
            } else {
                live[ino.0 as usize] = true;
                fs.cache_insert(inode);
            }
        }
    }
    // Orphans were unlinked while open; their last close never came.
    for inode in &orphans {
        fs.media.store_u64(fs.media.slot_offset(inode.ino), 0);
        fs.media.flush(fs.media.slot_offset(inode.ino), 8);
        for p in inode.data.read().owned_pages() {
            used[(p.0 / 8) as usize] &= !(1 << (p.0 % 8));
        }
    }
    fs.media.fence();
    fs.report.orphans_freed = orphans.len() as u64;
    fs.report.inodes_scanned = scanned;
    let mut p = l.data_start.0;
    while p < l.total_pages {
        if bitmap_get(&used, p) {
            p += 1;
            continue;
        }
        let s = p;
        while p < l.total_pages && !bitmap_get(&used, p) {
            p += 1;
        }
        fs.pages.init_free(PageNo(s), p - s);
    }
    for p in l.data_start.0..l.total_pages {
        if bitmap_get(&used, p) {
            fs.pages.init_claimed(PageNo(p));
        }
    }
    fs.inodes_free.fill((2..count).filter(|&i| !live[i as usize]));
    Ok(())
}

/// Save the allocator and mark the pool clean (the last act of unmount).
pub(crate) fn save_and_mark_clean(fs: &Ferrite) {
    let l = fs.media.layout;
    let page_bytes = format::bitmap_bytes(l.total_pages);
    let inode_bytes = format::bitmap_bytes(l.inode_count);
    let mut buf = vec![0u8; page_bytes + inode_bytes];
    let (pages, inodes) = buf.split_at_mut(page_bytes);
    for p in 0..l.total_pages {
        bitmap_set(pages, p);
    }
    let mut free_pages = 0;
    for (s, n) in fs.pages.free_extents() {
        for p in s..s + n {
            pages[(p / 8) as usize] &= !(1 << (p % 8));
        }
        free_pages += n;
    }
    for i in 0..l.inode_count {
        bitmap_set(inodes, i);
    }
    let free_inodes = fs.inodes_free.free_list();
    for &i in &free_inodes {
        inodes[(i / 8) as usize] &= !(1 << (i % 8));
    }
    let mut padded = buf.clone();
    padded.resize((l.save_pages * PAGE_SIZE) as usize, 0);
    fs.media.write_nt(l.save_start.offset(), &padded);
    fs.media.fence();
    let c = crc(&buf);
    fs.write_superblock(|sb| {
        sb.state = MountState::Clean;
        sb.saved_alloc_crc = c;
        sb.saved_free_pages = free_pages;
        sb.saved_free_inodes = free_inodes.len() as u64;
    });
    let _ = fs.media.pmem.sync_to_backing_file();
}
