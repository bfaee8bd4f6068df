//! dump: an annotated decode of the on-media structures (superblock,
//! journals, one inode and its log), for people reading a pool. Read-only;
//! corrupt structures are shown as such, never trusted.

use crate::format::PoolOffset;
use crate::format::{
    self, Entry, InodeSlot, JournalState, MountState, PageNo, LOG_PAGE_HEADER_SIZE, LOG_UNIT, PAGE_SIZE,
};
use crate::fs::PoolError;
use crate::media::Media;
use crate::types::{InodeNo, TimeSpec};
use ferrite_pmem::Pmem;
use std::fmt::Write;
use std::sync::Arc;

fn ts(ns: i64) -> String {
    let t = TimeSpec::from_ns(ns);
    format!("{}.{:09}", t.sec, t.nsec)
}

/// Decode the superblock, the journals and inode `ino` (default: the root)
/// with every entry of its log. Only reads the pool.
pub fn dump(pmem: Pmem, ino: Option<InodeNo>) -> Result<String, PoolError> {
    let sb = crate::fs::read_superblock(&pmem)?;
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "== superblock (generation {}, two copies at pages 0 and 1)", sb.generation);
    let _ = writeln!(w, "  format version      {}", format::FORMAT_VERSION);
    let _ = writeln!(w, "  total pages         {} ({} MiB)", sb.total_pages, (sb.total_pages * PAGE_SIZE) >> 20);
    let _ = writeln!(w, "  lanes               {}", sb.lane_count);
    let _ = writeln!(
        w,
        "  journals            pages {}..{}",
        sb.journal_start.0,
        sb.journal_start.0 + sb.lane_count as u64
    );
    let _ = writeln!(
        w,
        "  inode table         pages {}..{} ({} slots of {} bytes)",
        sb.inode_table_start.0,
        sb.inode_table_start.0 + sb.inode_table_pages,
        sb.inode_count,
        format::INODE_SLOT_SIZE
    );
    let _ = writeln!(w, "  allocator save area pages {}..{}", sb.save_start.0, sb.save_start.0 + sb.save_pages);
    let _ = writeln!(w, "  data region         pages {}..{}", sb.data_start.0, sb.total_pages);
    let _ = writeln!(
        w,
        "  state               {}",
        match sb.state {
            MountState::Clean => "clean (allocator saved)",
            MountState::Dirty => "dirty (mounted, or crashed: recovery will scan logs)",
        }
    );
    let _ = writeln!(w, "  mount count         {}", sb.mount_count);
    let _ = writeln!(w, "  created             {}", ts(sb.created_ns));
    let _ = writeln!(w, "  saved free pages    {} / inodes {}", sb.saved_free_pages, sb.saved_free_inodes);
    let layout = format::Layout::compute(sb.total_pages, sb.lane_count, sb.inode_count).map_err(PoolError::Invalid)?;
    let copy = Pmem::from_image(&pmem.image());
    let media = Media { pmem: Arc::new(copy), layout };
    let _ = writeln!(w, "== journals");
    for (lane, state) in crate::journal::inspect(&media) {
        match state {
            JournalState::Idle => {}
            JournalState::Torn => {
                let _ = writeln!(w, "  lane {lane}: torn header (never committed; ignored at recovery)");
            }
            JournalState::Open(recs) => {
                let _ = writeln!(w, "  lane {lane}: OPEN transaction, {} words (rolled back at recovery):", recs.len());
                for r in recs {
                    let _ = writeln!(w, "    word {} old value {:#x}", r.offset, r.old);
                }
            }
        }
    }
    let _ = writeln!(w, "  (lanes not listed are idle)");
    let ino = ino.unwrap_or(InodeNo::ROOT);
    let _ = writeln!(w, "== inode {}", ino.0);
    match media.read_slot(ino) {
        Err(c) => {
            let _ = writeln!(w, "  slot does not decode: {}", c.0);
        }
        Ok(InodeSlot::Free) => {
            let _ = writeln!(w, "  free slot");
        }
        Ok(InodeSlot::Live { header, head, tail, attr }) => {
            let _ = writeln!(w, "  type {:?}, generation {}", header.kind, header.generation);
            let _ = writeln!(w, "  log head {head} (page {}), tail {tail}", PageNo::containing(head).0);
            if let Ok(d) = crate::inode::InodeData::load(&media, ino, header.kind, header.generation, head, tail, attr)
            {
                let a = &d.attrs;
                let _ = writeln!(
                    w,
                    "  consistency mode {}, size {}, nlink {}, {} log pages",
                    a.mode.as_str(),
                    a.size,
                    a.nlink,
                    d.log.live.page_count()
                );
            }
            dump_log(w, &media, ino, header.generation, head, tail);
        }
    }
    Ok(o)
}

fn dump_log(w: &mut String, media: &Media, ino: InodeNo, generation: u32, head: PoolOffset, tail: PoolOffset) {
    let Ok(mut page) = media.check_log_pointer(head, "log head") else {
        let _ = writeln!(w, "  log head is invalid");
        return;
    };
    let tail_page = PageNo(tail.0.saturating_sub(1) / PAGE_SIZE);
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    for _ in 0..media.layout.total_pages {
        if media.read_checked(page.offset(), &mut buf).is_err() {
            let _ = writeln!(w, "  log page {} outside the pool", page.0);
            return;
        }
        let next = match format::decode_log_page_header(&buf, ino, generation) {
            Ok(n) => n,
            Err(c) => {
                let _ = writeln!(w, "  log page {}: {}", page.0, c.0);
                return;
            }
        };
        let _ = writeln!(w, "  -- log page {} (next {next})", page.0);
        let end = if page == tail_page { tail.0 - page.offset().0 } else { PAGE_SIZE };
        let mut at = LOG_PAGE_HEADER_SIZE;
        while at < end.min(PAGE_SIZE) {
            let rest = &buf[at as usize..end.min(PAGE_SIZE) as usize];
            if page != tail_page && rest[..LOG_UNIT as usize].iter().all(|&b| b == 0) {
                let _ = writeln!(w, "     +{at:4}: (unused to the end of the page)");
                break;
            }
            match Entry::decode(rest) {
                Ok((e, seq, len)) => {
                    let _ = writeln!(w, "     +{at:4} seq {seq}: {}", describe(&e));
                    at += len as u64;
                }
                Err(c) => {
                    let _ = writeln!(w, "     +{at:4}: {}", c.0);
                    return;
                }
            }
        }
        if page == tail_page {
            let _ = writeln!(w, "  -- tail at +{}", tail.0 - page.offset().0);
            return;
        }
        match media.check_log_pointer(next, "next") {
            Ok(p) => page = p,
            Err(c) => {
                let _ = writeln!(w, "  {}", c.0);
                return;
            }
        }
    }
}

fn describe(e: &Entry) -> String {
    match e {
        Entry::Attr(a) => format!(
            "ATTR mode {} perm {:o} uid {} gid {} nlink {} parent {} atime {} mtime {} ctime {}",
            a.mode.as_str(),
            a.perm,
            a.uid,
            a.gid,
            a.nlink,
            a.parent.0,
            ts(a.atime_ns),
            ts(a.mtime_ns),
            ts(a.ctime_ns)
        ),
        Entry::Write(x) => format!(
            "WRITE file pages {}..{} -> pool pages {}..{}, size {}, mtime {}",
            x.file_page,
            x.file_page + x.num_pages as u64,
            x.pool_page.0,
            x.pool_page.0 + x.num_pages as u64,
            x.size_after,
            ts(x.mtime_ns)
        ),
        Entry::Truncate(t) => {
            format!(
                "TRUNCATE size {}{} mtime {}",
                t.size,
                if t.size_only { " (size only)" } else { "" },
                ts(t.mtime_ns)
            )
        }
        Entry::Punch(h) => {
            format!("PUNCH file pages {}..{}, mtime {}", h.file_page, h.file_page + h.num_pages, ts(h.mtime_ns))
        }
        Entry::DentryAdd(d) => {
            format!("ADD {:?} -> inode {} ({:?})", String::from_utf8_lossy(&d.name), d.ino.0, d.kind)
        }
        Entry::DentryRemove(d) => {
            format!("REMOVE {:?} (inode {})", String::from_utf8_lossy(&d.name), d.ino.0)
        }
        Entry::Xattr(x) => match &x.value {
            Some(v) => format!("XATTR SET {:?} ({} bytes)", String::from_utf8_lossy(&x.name), v.len()),
            None => format!("XATTR REMOVE {:?}", String::from_utf8_lossy(&x.name)),
        },
        Entry::Inline(i) => format!(
            "INLINE {} bytes at file offset {} (page {} +{}), size {}, mtime {}",
            i.data.len(),
            i.offset,
            i.file_page(),
            i.page_offset(),
            i.size_after,
            ts(i.time_ns)
        ),
    }
}
