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
use crate::inode::InodeData;
use crate::replay::Replay;
use crate::types::{FileType, InodeNo};
use std::time::Instant;

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
    let media = &fs.media;
    // Threads take chunks of the table from a shared counter: inode numbers
    // are handed out lowest first, so live inodes crowd the start of the
    // table, and fixed halves would leave one thread with all the work.
    let next_chunk = std::sync::atomic::AtomicU64::new(0);
    let next_chunk = &next_chunk;
    // Scan the inode table in parallel: each thread replays the logs of
    // its range with the same `load` a lazy rebuild uses, keeps only what
    // the allocator needs (the pages each inode owns, whether it is an
    // orphan), and drops the rebuilt state. The inodes are rebuilt again
    // at their first access, as after a clean mount: keeping a whole
    // pool's inodes would cost recovery their memory (most of its time
    // was the page faults of that memory) for inodes nobody may touch.
    let results: Vec<Result<Scan, format::Corrupt>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|_| {
                s.spawn(move || {
                    let mut scan = Scan::default();
                    loop {
                        let c = next_chunk.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let lo = (c * RECOVERY_CHUNK_INODES).max(1);
                        if lo >= count {
                            break;
                        }
                        let hi = ((c + 1) * RECOVERY_CHUNK_INODES).min(count);
                        for i in lo..hi {
                            let ino = InodeNo(i);
                            if let format::InodeSlot::Live { header, head, tail, attr } = media.read_slot(ino)? {
                                let d = InodeData::load_as(
                                    media,
                                    ino,
                                    header.kind,
                                    header.generation,
                                    head,
                                    tail,
                                    attr,
                                    Replay::Ownership,
                                )?;
                                let owned = d.owned_pages();
                                if d.attrs.nlink == 0 {
                                    scan.orphans.push(ino);
                                } else {
                                    // A directory's names are not indexed
                                    // here, so its liveness is unknown: any
                                    // log past its tail page may hold some.
                                    let dead_pages = if header.kind == FileType::Directory {
                                        d.log.live.page_count() > 1
                                    } else {
                                        d.holds_collectable_dead_pages()
                                    };
                                    if dead_pages {
                                        scan.with_dead_log_pages.push(ino);
                                    }
                                    scan.live.push(ino);
                                    scan.owners.extend(std::iter::repeat_n(ino, owned.len()));
                                    scan.owned.extend(owned);
                                }
                            }
                        }
                    }
                    Ok(scan)
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
    let mut with_dead_log_pages = Vec::new();
    for r in results {
        let scan = r?;
        with_dead_log_pages.extend(scan.with_dead_log_pages);
        for (&p, &ino) in scan.owned.iter().zip(&scan.owners) {
            if bitmap_get(&used, p.0) {
                return Err(PoolError::Corrupt(format!("page {} is owned twice (second owner inode {})", p.0, ino.0)));
            }
            bitmap_set(&mut used, p.0);
        }
        for ino in scan.live {
            live[ino.0 as usize] = true;
        }
        orphans.extend(scan.orphans);
    }
    // Orphans were unlinked while open; their last close never came. Their
    // pages were never marked, so they are free below.
    for &ino in &orphans {
        fs.media.store_u64(fs.media.slot_offset(ino), 0);
        fs.media.flush(fs.media.slot_offset(ino), 8);
    }
    fs.media.fence();
    fs.report.orphans_freed = orphans.len() as u64;
    fs.report.inodes_scanned = (live.iter().filter(|&&l| l).count() + orphans.len()) as u64;
    // Free extents, and runs of used pages: every live inode is rebuilt
    // lazily and claims its pages then, exactly as after a clean mount.
    let mut p = l.data_start.0;
    while p < l.total_pages {
        let s = p;
        let in_use = bitmap_get(&used, p);
        while p < l.total_pages && bitmap_get(&used, p) == in_use {
            p += 1;
        }
        if in_use {
            fs.pages.init_used(PageNo(s), p - s);
        } else {
            fs.pages.init_free(PageNo(s), p - s);
        }
    }
    fs.inodes_free.fill((2..count).filter(|&i| !live[i as usize]));
    // Their dead pages go back at the first visit of the cached logs: a
    // change refused for space, a patch buffer that found none, or the
    // clean unmount (`collect_other_logs`).
    if !with_dead_log_pages.is_empty() {
        *fs.logs_recovery_found.get_mut() = with_dead_log_pages;
        *fs.dead_pages_unvisited.get_mut() = true;
    }
    Ok(())
}

/// Inode slots a recovery thread takes at a time.
const RECOVERY_CHUNK_INODES: u64 = 512;

/// What one recovery thread found in its range of the inode table.
#[derive(Default)]
struct Scan {
    /// Pages owned by live inodes, and each one's owner (for the error).
    owned: Vec<PageNo>,
    owners: Vec<InodeNo>,
    live: Vec<InodeNo>,
    /// Inodes with no link left: freed by recovery.
    orphans: Vec<InodeNo>,
    /// Live inodes whose logs may hold dead pages GC can take.
    with_dead_log_pages: Vec<InodeNo>,
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
