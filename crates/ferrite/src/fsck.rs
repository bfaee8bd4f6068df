//! fsck: check every invariant of a pool, never changing it.
//!
//! The check runs on a private copy of the image: it recovers the copy
//! exactly as a mount would (rolling back open journals, freeing orphans),
//! then rebuilds every live inode from its log and verifies:
//! - both superblock copies decode and agree on the geometry;
//! - every inode slot decodes, every log page header and entry checksum
//!   checks, and every log stays within bounds;
//! - every page is owned exactly once (log or data of one inode), lies in
//!   the data region, and the allocator accounts for every other page
//!   (nothing leaked, nothing both free and used);
//! - every directory entry names a live inode of the recorded type; link
//!   counts equal the number of entries; each directory has exactly one
//!   name and its parent pointer names the directory holding it;
//! - every live inode is reachable from the root.

use crate::format::{self, InodeSlot, MountState, SuperblockError, PAGE_SIZE};
use crate::fs::{Ferrite, MountOptions, PoolError};
use crate::inode::{Body, InodeData};
use crate::types::{FileType, InodeNo};
use ferrite_pmem::Pmem;
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// What fsck found.
#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    /// Violated invariants: the pool is damaged if there is any.
    pub problems: Vec<String>,
    /// Facts worth knowing that are not damage (e.g. recovery was needed).
    pub notes: Vec<String>,
    pub total_pages: u64,
    pub data_pages: u64,
    pub live_inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes.
    pub special_files: u64,
    pub log_pages: u64,
    pub file_pages: u64,
    pub free_pages: u64,
    pub dead_log_pages: u64,
    pub live_log_entries: u64,
    pub recovered: bool,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, p: impl Into<String>) {
        // A badly damaged pool could produce millions of lines; keep the
        // report readable and bounded.
        const PROBLEMS_MAX: usize = 200;
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(p.into());
        } else if self.problems.len() == PROBLEMS_MAX {
            self.problems.push("... further problems not listed".into());
        }
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "pool: {} pages ({} in the data region)", self.total_pages, self.data_pages)?;
        writeln!(
            f,
            "inodes: {} live ({} directories, {} files, {} symlinks, {} special files)",
            self.live_inodes, self.directories, self.files, self.symlinks, self.special_files
        )?;
        writeln!(
            f,
            "pages: {} log, {} file data, {} free; {} dead log pages awaiting GC; {} live log entries",
            self.log_pages, self.file_pages, self.free_pages, self.dead_log_pages, self.live_log_entries
        )?;
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        for p in &self.problems {
            writeln!(f, "PROBLEM: {p}")?;
        }
        if self.is_clean() {
            write!(f, "verdict: clean")
        } else {
            write!(f, "verdict: DAMAGED ({} problems)", self.problems.len())
        }
    }
}

/// Check a pool. Returns Err only when the pool cannot be identified as a
/// Ferrite pool of this version; every other finding is in the report.
/// Works on a copy of the image, so `pmem` is never changed.
pub fn check(pmem: &Pmem) -> Result<FsckReport, PoolError> {
    check_inner(Source::Borrowed(pmem))
}

/// Check a pool given as a private view (`Pmem::open_file_private`, or a
/// copy): recovery runs on it directly, so no second copy of the pool is
/// made. The view is consumed because recovery changes it.
pub fn check_private(pmem: Pmem) -> Result<FsckReport, PoolError> {
    check_inner(Source::Owned(pmem))
}

enum Source<'a> {
    Borrowed(&'a Pmem),
    Owned(Pmem),
}

impl Source<'_> {
    fn pmem(&self) -> &Pmem {
        match self {
            Source::Borrowed(p) => p,
            Source::Owned(p) => p,
        }
    }

    /// A pool recovery may change: a private copy of a borrowed pool (a
    /// copy-on-write view of a pool file: a whole copy of a 2 GiB pool
    /// made fsck cost the FUSE tests 4 GiB of memory), or the private
    /// view itself.
    fn into_private(self) -> Pmem {
        match self {
            Source::Borrowed(p) => p.private_copy(),
            Source::Owned(p) => p,
        }
    }
}

fn check_inner(source: Source<'_>) -> Result<FsckReport, PoolError> {
    let pmem = source.pmem();
    let mut r = FsckReport::default();
    // Look at both superblock copies individually.
    let mut copies = Vec::new();
    let mut bad = Vec::new();
    for (i, copy) in format::SUPERBLOCK_COPIES.iter().enumerate() {
        let mut b = [0u8; format::SUPERBLOCK_SIZE];
        let name = if i == 0 { "A" } else { "B" };
        if pmem.read_checked(copy.offset(), &mut b).is_none() {
            copies.push(Err(SuperblockError::NotFerrite));
            continue;
        }
        let d = format::Superblock::decode(&b, pmem.len());
        if let Err(e) = &d {
            bad.push(match e {
                SuperblockError::NotFerrite => format!("superblock copy {name}: no Ferrite magic"),
                SuperblockError::Version(v) => format!("superblock copy {name}: format version {v}"),
                SuperblockError::Corrupt(c) => format!("superblock copy {name}: {}", c.0),
            });
        }
        copies.push(d);
    }
    // One bad copy next to a good one is what a crash in the middle of a
    // superblock update leaves (the copies are written one after the
    // other): mount uses the good copy and rewrites both. Only when no copy
    // is usable is it damage (reported below).
    if bad.len() == 1 {
        r.notes.push(format!(
            "{} (torn by an interrupted superblock update, or damaged); the next mount rewrites it from the other copy",
            bad[0]
        ));
    } else {
        for b in bad {
            r.problem(b);
        }
    }
    let sb = match crate::fs::read_superblock(pmem) {
        Ok(sb) => sb,
        Err(e @ (PoolError::NotFerrite | PoolError::Version { .. })) => return Err(e),
        Err(e) => {
            r.problem(format!("no usable superblock: {e}"));
            return Ok(r);
        }
    };
    if let (Ok(a), Ok(b)) = (&copies[0], &copies[1]) {
        if a.generation != b.generation {
            r.notes.push(format!(
                "superblock copies at generations {} and {} (a superblock update was interrupted; mount repairs it)",
                a.generation, b.generation
            ));
        }
    }
    r.total_pages = sb.total_pages;
    r.data_pages = sb.total_pages - sb.data_start.0;
    if sb.state == MountState::Dirty {
        r.notes.push("the pool was not cleanly unmounted; checked after recovery on a private copy".into());
    }
    let copy = source.into_private();
    let fs = match Ferrite::mount(copy, &MountOptions { recovery_threads: 2, ..Default::default() }) {
        Ok(fs) => fs,
        Err(e) => {
            r.problem(format!("mount (with recovery) fails: {e}"));
            return Ok(r);
        }
    };
    let rep = fs.mount_report().clone();
    r.recovered = rep.recovered;
    if rep.journals_rolled_back > 0 {
        r.notes.push(format!("{} open journal transaction(s) rolled back", rep.journals_rolled_back));
    }
    if rep.orphans_freed > 0 {
        r.notes.push(format!("{} orphan inode(s) (unlinked while open) freed", rep.orphans_freed));
    }
    check_mounted(&fs, &mut r);
    Ok(r)
}

/// Every invariant of `docs/DESIGN.md` ("Invariants"), on a mounted pool.
fn check_mounted(fs: &Ferrite, r: &mut FsckReport) {
    let (inodes, owner) = load_live_inodes(fs, r);
    check_space(fs, &inodes, &owner, r);
    let (names_of, parent_of) = check_directories(&inodes, r);
    check_link_counts(&inodes, &names_of, &parent_of, r);
    check_reachable(&inodes, r);
}

/// Live inodes, rebuilt from their logs (invariant 2), and the owner of
/// every page they hold (invariant 3: never two owners).
type LiveInodes = HashMap<InodeNo, (FileType, InodeData)>;

fn load_live_inodes(fs: &Ferrite, r: &mut FsckReport) -> (LiveInodes, HashMap<u64, InodeNo>) {
    let media = &fs.media;
    let l = media.layout;
    let mut owner: HashMap<u64, InodeNo> = HashMap::new();
    let mut inodes: HashMap<InodeNo, (FileType, InodeData)> = HashMap::new();
    for i in 1..l.inode_count {
        let ino = InodeNo(i);
        match media.read_slot(ino) {
            Ok(InodeSlot::Free) => {}
            Ok(InodeSlot::Live { header, head, tail, attr }) => {
                match InodeData::load(media, ino, header.kind, header.generation, head, tail, attr) {
                    Ok(d) => {
                        for p in d.owned_pages() {
                            if !l.is_data_page(p) {
                                r.problem(format!("inode {}: owns page {} outside the data region", ino.0, p.0));
                            } else if let Some(o) = owner.insert(p.0, ino) {
                                r.problem(format!("page {} owned twice: inodes {} and {}", p.0, o.0, ino.0));
                            }
                        }
                        inodes.insert(ino, (header.kind, d));
                    }
                    Err(c) => r.problem(format!("inode {}: {}", ino.0, c.0)),
                }
            }
            Err(c) => r.problem(c.0),
        }
    }
    (inodes, owner)
}

/// Invariants 3 and 4: every data page is owned or free, never both, never
/// neither; live inodes and free slots add up to all slots.
fn check_space(fs: &Ferrite, inodes: &LiveInodes, owner: &HashMap<u64, InodeNo>, r: &mut FsckReport) {
    let l = fs.media.layout;
    let free = fs.pages.free_extents();
    let mut free_count = 0;
    for (s, n) in &free {
        for p in *s..*s + *n {
            if let Some(o) = owner.get(&p) {
                r.problem(format!("page {p} is free in the allocator but owned by inode {}", o.0));
            }
        }
        free_count += n;
    }
    r.free_pages = free_count;
    let data_pages = l.total_pages - l.data_start.0;
    let accounted = owner.len() as u64 + free_count;
    if accounted < data_pages {
        r.problem(format!("{} data pages leaked (neither owned nor free)", data_pages - accounted));
    }
    let free_inodes = fs.inodes_free.free_list();
    for &i in &free_inodes {
        if inodes.contains_key(&InodeNo(i)) {
            r.problem(format!("inode {i} is live but on the free list"));
        }
    }
    let slots = l.inode_count - 2; // slots 2.. are allocatable; the root is 1
    let live_nonroot = inodes.keys().filter(|i| **i != InodeNo::ROOT).count() as u64;
    if live_nonroot + free_inodes.len() as u64 != slots {
        r.problem(format!("inode accounting: {} live + {} free != {} slots", live_nonroot, free_inodes.len(), slots));
    }
}

/// Invariant 5, directory side: every entry names a live inode of its
/// type, subdirectory counts match, a directory has one name. Returns the
/// number of names of each inode and the directory naming each directory.
fn check_directories(inodes: &LiveInodes, r: &mut FsckReport) -> (HashMap<InodeNo, u32>, HashMap<InodeNo, InodeNo>) {
    let mut names_of: HashMap<InodeNo, u32> = HashMap::new();
    let mut parent_of: HashMap<InodeNo, InodeNo> = HashMap::new();
    for (&ino, (kind, d)) in inodes {
        r.live_inodes += 1;
        r.log_pages += d.log.live.page_count() as u64;
        r.dead_log_pages += d.dead_log_pages() as u64;
        r.live_log_entries += d.log.live.live_entries() as u64;
        match (kind, &d.body) {
            (FileType::Directory, Body::Dir(dir)) => {
                r.directories += 1;
                let mut subdirs = 0;
                for (name, de) in &dir.names {
                    let shown = String::from_utf8_lossy(name);
                    match inodes.get(&de.ino) {
                        None => {
                            r.problem(format!("directory {}: entry {shown:?} names free inode {}", ino.0, de.ino.0))
                        }
                        Some((k, _)) if *k != de.kind => {
                            r.problem(format!("directory {}: entry {shown:?} has the wrong type", ino.0))
                        }
                        Some(_) => {
                            *names_of.entry(de.ino).or_insert(0) += 1;
                            if de.kind == FileType::Directory {
                                subdirs += 1;
                                if let Some(p) = parent_of.insert(de.ino, ino) {
                                    r.problem(format!(
                                        "directory {} has two names (in {} and {})",
                                        de.ino.0, p.0, ino.0
                                    ));
                                }
                            }
                        }
                    }
                }
                if subdirs != dir.subdirs {
                    r.problem(format!("directory {}: subdirectory count {} but {} found", ino.0, dir.subdirs, subdirs));
                }
            }
            (FileType::Regular, Body::Pages(map)) | (FileType::Symlink, Body::Pages(map)) => {
                if *kind == FileType::Regular {
                    r.files += 1;
                } else {
                    r.symlinks += 1;
                    if d.attrs.size == 0 || d.attrs.size > PAGE_SIZE - 1 || map.len() != 1 {
                        r.problem(format!(
                            "symlink {}: target of {} bytes in {} pages",
                            ino.0,
                            d.attrs.size,
                            map.len()
                        ));
                    }
                }
                r.file_pages += map.len() as u64;
            }
            (k, Body::Pages(map)) if k.is_special() => {
                r.special_files += 1;
                if !map.is_empty() || d.attrs.size != 0 {
                    r.problem(format!(
                        "{k:?} {}: size {} and {} data pages (it has no data)",
                        ino.0,
                        d.attrs.size,
                        map.len()
                    ));
                }
            }
            _ => r.problem(format!("inode {}: body does not match its type", ino.0)),
        }
    }
    (names_of, parent_of)
}

/// Invariant 5, inode side: link counts equal names, parent pointers
/// match, the root has no name and is its own parent.
fn check_link_counts(
    inodes: &LiveInodes,
    names_of: &HashMap<InodeNo, u32>,
    parent_of: &HashMap<InodeNo, InodeNo>,
    r: &mut FsckReport,
) {
    for (&ino, (kind, d)) in inodes {
        let names = names_of.get(&ino).copied().unwrap_or(0);
        if ino == InodeNo::ROOT {
            if names != 0 {
                r.problem("the root directory has a name".to_string());
            }
            if d.attrs.parent != InodeNo::ROOT {
                r.problem("the root's parent is not itself".to_string());
            }
            continue;
        }
        match kind {
            FileType::Directory => {
                if names != 1 || d.attrs.nlink != 1 {
                    r.problem(format!("directory {}: {} names, link flag {}", ino.0, names, d.attrs.nlink));
                }
                if let Some(p) = parent_of.get(&ino) {
                    if *p != d.attrs.parent {
                        r.problem(format!(
                            "directory {}: parent pointer {} but it is named in {}",
                            ino.0, d.attrs.parent.0, p.0
                        ));
                    }
                }
            }
            _ => {
                if names != d.attrs.nlink {
                    r.problem(format!("inode {}: link count {} but {} names", ino.0, d.attrs.nlink, names));
                }
            }
        }
    }
}

/// Invariant 6: every live inode is reachable from the root.
fn check_reachable(inodes: &LiveInodes, r: &mut FsckReport) {
    let mut seen = std::collections::HashSet::new();
    let mut queue = VecDeque::from([InodeNo::ROOT]);
    while let Some(ino) = queue.pop_front() {
        if !seen.insert(ino) {
            continue;
        }
        if let Some((_, d)) = inodes.get(&ino) {
            if let Body::Dir(dir) = &d.body {
                queue.extend(dir.names.values().map(|de| de.ino));
            }
        }
    }
    if !inodes.contains_key(&InodeNo::ROOT) {
        r.problem("the root directory is not live".to_string());
    }
    let mut unreachable: Vec<u64> = inodes.keys().filter(|i| !seen.contains(i)).map(|i| i.0).collect();
    unreachable.sort_unstable();
    if !unreachable.is_empty() {
        r.problem(format!(
            "{} inode(s) unreachable from the root: {:?}",
            unreachable.len(),
            &unreachable[..unreachable.len().min(10)]
        ));
    }
}
