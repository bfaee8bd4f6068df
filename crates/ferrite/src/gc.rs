//! Log garbage collection (NOVA's gc.c): fast GC unlinks log pages whose
//! entries are all dead; thorough GC (compaction) rewrites a log that is
//! mostly dead as a checkpoint of the inode's current state. Both run
//! after a commit that extended a log (`commit.rs`).

use crate::alloc::PageAllocator;
use crate::format::{
    self, DentryEntry, Entry, InlineEntry, PageNo, PoolOffset, TruncateEntry, WriteEntry, XattrEntry,
    INODE_TAIL_OFFSET, LOG_NEXT_OFFSET,
};
use crate::fs::Ferrite;
use crate::inode::{Attrs, Body, Inode, InodeData};
use crate::journal::Transaction;
use crate::log::{write_log_entries, Entries, Staged, NO_PAGE};
use crate::media::Media;
use crate::types::{FsResult, InodeNo};
use std::sync::atomic::Ordering;

impl InodeData {
    /// Fast log GC: unlink log pages whose entries are all dead (never the
    /// tail page) and whose death is durable once buffered operations up to
    /// `durable_seq` are (`u64::MAX - 1`: every death; see `LogPage::died_at`),
    /// then free them. Returns how many pages were collected.
    pub fn collect_garbage(
        &mut self,
        media: &Media,
        alloc: &PageAllocator,
        slot_offset: PoolOffset,
        durable_seq: u64,
    ) -> usize {
        let tail_page = self.log.tail_page();
        let dead = self.log.live.dead_pages_durable(tail_page, durable_seq);
        if dead.is_empty() {
            return 0;
        }
        let dead_set: crate::Set<PageNo> = dead.iter().copied().collect();
        // Relink around each dead page with one 8-byte store: the previous
        // live page's next pointer (or the head) skips to the next live page.
        let live = &self.log.live;
        for &p in &dead {
            let info = &live.pages[&p];
            let mut next = info.next;
            while dead_set.contains(&next) {
                next = live.pages[&next].next;
            }
            // The tail page is never dead, so a live successor exists.
            assert!(next != NO_PAGE, "dead page {} has no live successor", p.0);
            if info.prev != NO_PAGE && dead_set.contains(&info.prev) {
                continue; // an earlier dead page of this run does the relink
            }
            if info.prev == NO_PAGE {
                media.store_commit_word(slot_offset + format::INODE_HEAD_OFFSET, next.offset().0);
                self.log.head = next.offset();
            } else {
                media.store_commit_word(info.prev.offset() + LOG_NEXT_OFFSET, next.offset().0);
            }
        }
        // The unlinks must be durable before the pages can be reused.
        media.fence();
        for &p in &dead {
            self.log.live.remove_page(p);
            alloc.free(p, 1);
        }
        dead.len()
    }

    pub fn dead_log_pages(&self) -> usize {
        self.log.live.dead_pages.len()
    }

    /// Does the log hold a dead page that GC may take: one that is not its
    /// tail page, which is never collected (`collect_garbage`)?
    pub(crate) fn holds_collectable_dead_pages(&self) -> bool {
        let dead = &self.log.live.dead_pages;
        match dead.len() {
            0 => false,
            1 => !dead.contains(&self.log.tail_page()),
            _ => true,
        }
    }

    /// Is the log worth compacting (thorough GC)? Its live entries would
    /// fill at most half of its pages even if each were of the largest size.
    pub fn compaction_due(&self) -> bool {
        let pages = self.log.live.page_count() as u64;
        let live_units = self.log.live.live_units as u64;
        // A checkpoint takes about the live units (plus an Attr entry).
        pages >= 4 && (live_units + 2) * 2 <= (pages - 1) * format::LOG_UNITS_PER_PAGE
    }

    /// Thorough GC, first half: write a checkpoint of the inode as a fresh
    /// chain of log pages. A file's checkpoint is one Write entry per run of
    /// its current page map (consecutive file pages in consecutive pool
    /// pages) carrying the current size, then a size-only Truncate (so an
    /// empty file keeps its size), then an Attr snapshot. A directory's is
    /// its live DentryAdd entries, copied with their sequence numbers (the
    /// readdir cookies), then an Attr snapshot. Nothing superseded, cancelled
    /// or partly dead is copied, so the replay of the checkpoint is exactly
    /// the current state. Returns the new chain; the caller commits head and
    /// tail together through the journal, frees the old pages and reloads.
    pub fn stage_compaction(
        &self,
        media: &Media,
        alloc: &PageAllocator,
        owner: InodeNo,
        generation: u32,
    ) -> FsResult<Staged> {
        let a = &self.attrs;
        // Sized once: a checkpoint has at most the live entries plus its
        // size and Attr entries (growing by doubling cost a tenth of a
        // compaction in reallocations and copies).
        let mut entries = Entries::with_capacity(self.log.live.live_entries + 2);
        let mut seqs = crate::log::Seqs::new();
        match &self.body {
            Body::Pages(map) => {
                let mut run: Option<WriteEntry> = None;
                for (fp, r) in map.iter() {
                    if let Some(w) = &mut run {
                        if w.file_page + w.num_pages as u64 == fp
                            && w.pool_page.0 + w.num_pages as u64 == r.pool.0
                            && w.num_pages < u32::MAX - 1
                        {
                            w.num_pages += 1;
                            continue;
                        }
                        entries.push(Entry::Write(*w));
                    }
                    run = Some(WriteEntry {
                        file_page: fp,
                        pool_page: r.pool,
                        num_pages: 1,
                        size_after: a.size,
                        mtime_ns: a.mtime_ns,
                        ctime_ns: a.ctime_ns,
                    });
                }
                entries.extend(run.map(Entry::Write));
                // Live deltas are copied as they are, after the pages they
                // lie over, oldest first within each page.
                let mut delta_pages: Vec<(u64, &crate::pagemap::Deltas)> = map.delta_pages().collect();
                delta_pages.sort_unstable_by_key(|&(p, _)| p);
                for (p, deltas) in delta_pages {
                    for delta in deltas.iter() {
                        let mut data = vec![0u8; delta.len as usize];
                        media.read(delta.data(), &mut data);
                        entries.push(Entry::Inline(InlineEntry {
                            offset: (p << format::PAGE_SHIFT) + delta.at as u64,
                            size_after: a.size,
                            time_ns: a.mtime_ns,
                            data,
                        }));
                    }
                }
                entries.push(Entry::Truncate(TruncateEntry {
                    size: a.size,
                    mtime_ns: a.mtime_ns,
                    ctime_ns: a.ctime_ns,
                    size_only: true,
                }));
                seqs.extend(1..=entries.len() as u64);
            }
            Body::Dir(dir) => {
                for (seq, name) in dir.by_seq.iter() {
                    let de = dir.names[name].de;
                    entries.push(Entry::DentryAdd(DentryEntry {
                        ino: de.ino,
                        kind: de.kind,
                        time_ns: a.mtime_ns,
                        name: crate::format::EntryName::from_slice(name),
                    }));
                    seqs.push(seq);
                }
            }
        }
        let mut last_seq = seqs.last().copied().unwrap_or(0).max(self.log.next_seq - 1);
        for (name, (value, _)) in &self.xattrs {
            last_seq += 1;
            seqs.push(last_seq);
            entries.push(Entry::Xattr(XattrEntry {
                name: name.to_vec(),
                value: Some(value.to_vec()),
                ctime_ns: a.ctime_ns,
            }));
        }
        seqs.push(last_seq + 1);
        entries.push(Entry::Attr(a.to_entry()));
        write_log_entries(media, alloc, owner, generation, format::NO_LOG, entries, seqs, None).map_err(|(e, _)| e)
    }
}

impl Ferrite {
    /// Thorough GC: rewrite the log with only the entries that must
    /// survive, switch head and tail together in one journal transaction,
    /// free the old pages and rebuild the DRAM state from the new log. Skipped
    /// (harmlessly) when there is no space for the new copy.
    pub(crate) fn compact_log(&self, inode: &Inode, d: &mut InodeData) {
        let Ok(staged) = d.stage_compaction(&self.media, &self.pages, inode.ino, inode.generation) else {
            return;
        };
        let slot = self.media.slot_offset(inode.ino);
        let head = staged.new_pages[0].offset();
        let mut tx = Transaction::default();
        tx.set(slot + format::INODE_HEAD_OFFSET, head.0);
        tx.set(slot + INODE_TAIL_OFFSET, staged.new_tail.0);
        let close = self.journals.run_to_close(&self.media, &tx);
        let old = d.log.live.page_list();
        let old_pages = old.len() as u64;
        // Rebuild the DRAM state by applying the checkpoint's entries at
        // their new locations, as a first commit of a fresh inode would:
        // the same `apply` that replay uses, without reading the pool back.
        // It takes no lock, so it overlaps the write-back of the journal's
        // close (`Journals::run_to_close`); the old pages are freed only
        // once that is fenced.
        let mut fresh = InodeData::new_empty(inode.kind, Attrs::UNSET);
        let mut released = crate::PageList::new();
        fresh.commit_staged(inode.kind, staged, &mut released);
        close.fence(&self.media);
        for &p in &old {
            self.pages.free(p, 1);
        }
        assert!(released.is_empty(), "a checkpoint of inode {} released pages", inode.ino.0);
        assert!(fresh.log.head == head, "checkpoint of inode {} starts elsewhere", inode.ino.0);
        fresh.open_count = d.open_count;
        fresh.linkable = d.linkable;
        *d = fresh;
        self.gc_pages.fetch_add(old_pages.saturating_sub(d.log.live.page_count() as u64), Ordering::Relaxed);
        self.compactions.fetch_add(1, Ordering::Relaxed);
    }
}
