//! Corrupted, truncated and foreign images never panic, abort or hang
//! `mount` or `fsck`: they are refused with an error, or mounted and then
//! every file can be walked and read (errors allowed, panics not).
//!
//! What this proves, on realistic pools (a clean unmount, a crash with an
//! unlinked-but-open file, and a crash in the middle of a journal
//! transaction):
//! - random byte flips (1..64 per trial, biased into the superblocks,
//!   journals, inode slots, log page headers and log entries) never make
//!   `fsck::check`, `Ferrite::mount`, a walk of the tree, reading every
//!   file, unmount, or a second mount panic; and when fsck calls a pool clean
//!   it mounts and every file reads without error;
//! - forged corruption that passes the checksums (a field of a log entry,
//!   log page header, inode slot, superblock or journal changed and its
//!   CRC-32C recomputed) does not either;
//! - the same holds for file-system operations on such pools
//!   (`operations_on_corrupted_pools_never_panic`);
//! - truncated or extended images, and pool files whose length is not a
//!   multiple of 4096, are refused with an error;
//! - wrong magic is refused as "not Ferrite", a wrong version with a valid
//!   checksum as a version error; one damaged superblock copy is survived;
//! - random images (fully random, or random behind a valid superblock)
//!   never panic.
//!
//! Each randomized trial runs in a child process (`ferrite_tests::isolate`),
//! so an abort (e.g. a huge allocation from a forged size) or a hang is
//! reported with its trial number instead of killing the run. Replay one
//! trial in-process with `FERRITE_SEED=<seed> FERRITE_TRIAL=<n>`.

use ferrite::format::{
    INODE_SLOT_SIZE, JOURNAL_HEADER_SIZE, JOURNAL_RECORD_SIZE, LOG_NEXT_OFFSET, LOG_PAGE_HEADER_SIZE, PAGE_SIZE,
    SUPERBLOCK_COPIES, SUPERBLOCK_SIZE,
};
use ferrite::{
    Errno, FallocateMode, FileType, FormatOptions, MountOptions, OpenFlags, PathFs, PoolError, RenameFlags, Session,
    TimeSet,
};
use ferrite_crashcheck::crash::{PointKind, Sim};
use ferrite_pmem::Pmem;
use ferrite_tests::isolate::run_isolated;
use ferrite_tests::walk::explore;
use ferrite_tests::{manual_clock, pattern, put, seed_from_env, splitmix64, ts};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
use std::sync::OnceLock;
use std::time::Duration;

const POOL_PAGES: u64 = 512;
const PAGE: usize = PAGE_SIZE as usize;
/// A trial making no progress for this long counts as hung (a deadlock or
/// endless-loop detector, far above the milliseconds a trial takes).
const STALL: Duration = Duration::from_secs(60);

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn mount_opts() -> MountOptions {
    MountOptions { clock: manual_clock(9_000_000), recovery_threads: 2, ..Default::default() }
}

// ---------------------------------------------------------------------------
// The base images.

/// A pool with some of everything: nested directories, files of several
/// sizes with holes, a symlink, hard links, a directory whose log spans two
/// pages, a file whose log was extended and collected.
fn populate(fs: &Session) {
    let must = |r: Result<(), Errno>, what: &str| r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
    for d in ["/a", "/a/b", "/a/b/c", "/many", "/empty"] {
        must(fs.mkdir(d.as_bytes(), 0o755), d);
    }
    must(put(fs, b"/a/f1", &pattern(1, 100)), "f1");
    must(put(fs, b"/a/b/f2", &pattern(2, 3 * 4096)), "f2");
    must(put(fs, b"/a/b/c/f3", b""), "f3");
    let fd = fs.open(b"/big", OpenFlags::RDWR.create(), 0o600).unwrap();
    fs.pwrite(fd, &pattern(3, 10_000), 0).unwrap();
    fs.pwrite(fd, &pattern(4, 5000), 30_000).unwrap();
    fs.fallocate(fd, FallocateMode::KeepSize, 40_000, 8192).unwrap();
    fs.close(fd).unwrap();
    must(fs.symlink(b"/a/f1", b"/s"), "symlink");
    must(fs.symlink(b"a/b", b"/a/rel"), "symlink");
    must(fs.link(b"/big", b"/a/b/hl"), "link");
    for i in 0..70 {
        must(put(fs, format!("/many/n{i:03}").as_bytes(), &pattern(i, i as usize * 10)), "many");
    }
    for i in (0..70).step_by(7) {
        must(fs.unlink(format!("/many/n{i:03}").as_bytes()), "unlink");
    }
    let fd = fs.open(b"/rw", OpenFlags::RDWR.create(), 0o644).unwrap();
    for i in 0..90u64 {
        fs.pwrite(fd, &pattern(100 + i, 200), (i % 5) * 1000).unwrap();
    }
    fs.close(fd).unwrap();
    must(fs.chmod(b"/a/f1", 0o640), "chmod");
    must(fs.chown(b"/a/b/f2", Some(7), Some(8)), "chown");
    must(fs.utimens(b"/big", TimeSet::At(ts(5, 6)), TimeSet::Omit), "utimens");
    must(fs.rename(b"/a/b/f2", b"/empty/f2", RenameFlags::Replace), "rename");
    must(fs.truncate(b"/a/f1", 50), "truncate");
}

fn fresh() -> Session {
    let clock = manual_clock(1_000);
    Session::format(Pmem::heap(POOL_PAGES * 4096), &FormatOptions { lanes: 2, inodes: Some(128), clock })
        .expect("format")
}

/// The three base images: clean, crashed with an orphan, and crashed with a
/// journal transaction open.
fn bases() -> &'static [(&'static str, Vec<u8>)] {
    static BASES: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    BASES.get_or_init(|| {
        let fs = fresh();
        populate(&fs);
        let pmem = fs.pmem().clone();
        fs.unmount().unwrap();
        let clean = pmem.image();

        let fs = Session::mount(Pmem::from_image(&clean), &mount_opts()).unwrap();
        let orphan = fs.open(b"/orphan", OpenFlags::RDWR.create(), 0o644).unwrap();
        fs.pwrite(orphan, &pattern(9, 9000), 0).unwrap();
        fs.unlink(b"/orphan").unwrap();
        fs.pwrite(orphan, &pattern(10, 100), 20_000).unwrap();
        let crashed = fs.pmem().image();

        // A crash inside a rename, after its journal transaction opened and
        // its new tails were stored: recovery must roll it back.
        fs.pmem().start_recording();
        let base = fs.pmem().image();
        fs.rename(b"/a/b/c", b"/many/c", RenameFlags::Replace).unwrap();
        let events = fs.pmem().stop_recording();
        drop(fs);
        let mut sim = Sim::new(&base, &events);
        let mut fences = 0;
        let mut journal = None;
        while let Some(k) = sim.next_point() {
            if k == PointKind::Fence {
                fences += 1;
                // Fence 1 makes the journal record durable; before fence 2
                // the new tails are stored but the transaction is open.
                if fences == 2 {
                    journal = Some(sim.build(&sim.all()));
                    break;
                }
            }
        }
        let journal = journal.expect("a rename has at least two fences");
        for (name, img) in [("crashed", &crashed), ("journal-open", &journal)] {
            let r = ferrite::fsck::check(&Pmem::from_image(img)).unwrap();
            assert!(r.is_clean(), "{name} base image: {r}");
        }
        let r = ferrite::fsck::check(&Pmem::from_image(&clean)).unwrap();
        assert!(r.is_clean(), "clean base image: {r}");
        vec![("clean", clean), ("crashed", crashed), ("journal-open", journal)]
    })
}

// ---------------------------------------------------------------------------
// Where the metadata lies in an image.

struct PoolMap {
    superblocks: Vec<Range<usize>>,
    journals: Vec<Range<usize>>,
    /// Offsets of live inode slots.
    slots: Vec<usize>,
    /// Offsets of log pages.
    log_pages: Vec<usize>,
    /// (offset, length) of every log entry.
    entries: Vec<(usize, usize)>,
    /// The inode whose log holds each entry of `entries`.
    entry_owner: Vec<u64>,
    save: Range<usize>,
    inode_table: Range<usize>,
    data_start: usize,
    len: usize,
}

fn map_pool(img: &[u8]) -> PoolMap {
    let sb = ferrite::read_superblock(&Pmem::from_image(img)).expect("a base image mounts");
    let mut m = PoolMap {
        superblocks: SUPERBLOCK_COPIES
            .iter()
            .map(|p| p.offset().0 as usize..p.offset().0 as usize + SUPERBLOCK_SIZE)
            .collect(),
        journals: (0..sb.lane_count as u64)
            .map(|l| {
                let o = ((sb.journal_start.0 + l) * PAGE_SIZE) as usize;
                o..o + 512
            })
            .collect(),
        slots: Vec::new(),
        log_pages: Vec::new(),
        entries: Vec::new(),
        entry_owner: Vec::new(),
        save: sb.save_start.offset().0 as usize..(sb.save_start.offset() + sb.save_pages * PAGE_SIZE).0 as usize,
        inode_table: sb.inode_table_start.offset().0 as usize
            ..(sb.inode_table_start.offset() + sb.inode_table_pages * PAGE_SIZE).0 as usize,
        data_start: sb.data_start.offset().0 as usize,
        len: img.len(),
    };
    for ino in 1..sb.inode_count {
        let slot = (sb.inode_table_start.offset() + ino * INODE_SLOT_SIZE).0 as usize;
        if u64_at(img, slot) == 0 {
            continue;
        }
        m.slots.push(slot);
        // The slot's Attr entry (bytes 64..128) is the inode's first entry,
        // encoded and checksummed as a log entry is.
        if img[slot + 64..slot + 128].iter().any(|&b| b != 0) {
            m.entries.push((slot + 64, 64));
            m.entry_owner.push(ino);
        }
        let head = u64_at(img, slot + 8) as usize;
        let tail = u64_at(img, slot + 16) as usize;
        if tail == 0 {
            continue; // an empty log: the head means nothing
        }
        let tail_page = tail.saturating_sub(1) & !(PAGE - 1);
        let mut page = head;
        for _ in 0..POOL_PAGES {
            if page == 0 || !page.is_multiple_of(PAGE) || page + PAGE > img.len() {
                break;
            }
            m.log_pages.push(page);
            let end = if page == tail_page { tail - page } else { PAGE };
            let mut at = LOG_PAGE_HEADER_SIZE as usize;
            while at + 64 <= end {
                let units = img[page + at + 1] as usize;
                if units == 0 || units > 5 {
                    break;
                }
                m.entries.push((page + at, units * 64));
                m.entry_owner.push(ino);
                at += units * 64;
            }
            if page == tail_page {
                break;
            }
            page = u64_at(img, page + LOG_NEXT_OFFSET as usize) as usize;
        }
    }
    assert!(!m.entries.is_empty() && !m.slots.is_empty());
    m
}

// ---------------------------------------------------------------------------
// Checksum fix-ups (independent of the engine's code: the crc32c crate).

fn fix_entry_crc(img: &mut [u8], off: usize, len: usize) {
    put_u32(img, off + 4, 0);
    let c = crc32c::crc32c(&img[off..off + len]);
    put_u32(img, off + 4, c);
}

fn fix_slot_crc(img: &mut [u8], slot: usize) {
    let c = crc32c::crc32c(&img[slot + 24..slot + 60]);
    put_u32(img, slot + 60, c);
}

fn fix_log_header_crc(img: &mut [u8], page: usize) {
    let c = crc32c::crc32c(&img[page..page + 20]);
    put_u32(img, page + 20, c);
}

fn fix_superblock_crc(img: &mut [u8], at: usize) {
    let c = crc32c::crc32c(&img[at..at + 252]);
    put_u32(img, at + 252, c);
}

/// Write an open journal transaction with a valid CRC.
fn forge_journal(img: &mut [u8], page: usize, seq: u64, records: &[(u64, u64)]) {
    let n = records.len();
    img[page..page + JOURNAL_HEADER_SIZE as usize].fill(0);
    put_u64(img, page, (seq << 16) | n as u64);
    for (i, &(off, old)) in records.iter().enumerate() {
        let at = page + (JOURNAL_HEADER_SIZE + i as u64 * JOURNAL_RECORD_SIZE) as usize;
        put_u64(img, at, off);
        put_u64(img, at + 8, old);
    }
    let end = page + (JOURNAL_HEADER_SIZE + n as u64 * JOURNAL_RECORD_SIZE) as usize;
    let c = crc32c::crc32c_append(crc32c::crc32c(&img[page..page + 8]), &img[page + JOURNAL_HEADER_SIZE as usize..end]);
    put_u32(img, page + 8, c);
}

// ---------------------------------------------------------------------------
// Corruptions.

/// A value that is likely to hit an edge: zero, one, all ones, a flipped
/// bit, a small step, a page or slot somewhere in the pool, a huge size.
fn nasty(rng: &mut ChaCha8Rng, old: u64, m: &PoolMap) -> u64 {
    match rng.gen_range(0..16) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => old ^ (1u64 << rng.gen_range(0..64)),
        4 => old.wrapping_add(rng.gen_range(1..8)),
        5 => old.wrapping_sub(rng.gen_range(1..8)),
        6 => old.wrapping_add(64),
        7 => old.wrapping_sub(64),
        8 => rng.gen(),
        9 => (rng.gen_range(0..m.len / PAGE) * PAGE) as u64,
        10 => m.log_pages[rng.gen_range(0..m.log_pages.len())] as u64,
        11 => (rng.gen_range(0..m.len / PAGE)) as u64,
        12 => ferrite::limits::FILE_SIZE_MAX - rng.gen_range(0..2),
        13 => i64::MIN as u64,
        14 => rng.gen_range(0..256),
        _ => ((m.slots[rng.gen_range(0..m.slots.len())] - m.inode_table.start) / INODE_SLOT_SIZE as usize) as u64,
    }
}

/// Overwrite a field of width 1, 4 or 8 bytes at a random aligned position
/// of `range` (skipping `skip`, the checksum field) with a nasty value.
fn forge_field(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap, range: Range<usize>, skip: Range<usize>) {
    for _ in 0..16 {
        let width = [1usize, 4, 8][rng.gen_range(0..3)];
        let pos = range.start + (rng.gen_range(0..range.len()) / width) * width;
        if pos + width > range.end || (pos < skip.end && pos + width > skip.start) {
            continue;
        }
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(&img[pos..pos + width]);
        let v = nasty(rng, u64::from_le_bytes(old), m);
        img[pos..pos + width].copy_from_slice(&v.to_le_bytes()[..width]);
        return;
    }
}

fn random_in(rng: &mut ChaCha8Rng, r: &Range<usize>) -> usize {
    rng.gen_range(r.clone())
}

/// 1..=64 byte flips, biased into the metadata.
fn flip_bytes(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap) -> String {
    let n = rng.gen_range(1..=64);
    for _ in 0..n {
        let at = match rng.gen_range(0..100) {
            0..=9 => {
                let r = &m.superblocks[rng.gen_range(0..m.superblocks.len())];
                random_in(rng, r)
            }
            10..=17 => {
                let r = &m.journals[rng.gen_range(0..m.journals.len())];
                random_in(rng, r)
            }
            18..=37 => m.slots[rng.gen_range(0..m.slots.len())] + rng.gen_range(0..64),
            38..=47 => m.log_pages[rng.gen_range(0..m.log_pages.len())] + rng.gen_range(0..64),
            48..=77 => {
                let (o, l) = m.entries[rng.gen_range(0..m.entries.len())];
                o + rng.gen_range(0..l)
            }
            78..=82 => random_in(rng, &m.save),
            83..=89 => random_in(rng, &m.inode_table),
            _ => rng.gen_range(0..m.len),
        };
        img[at] ^= rng.gen_range(1..=255u8);
    }
    format!("{n} byte flips")
}

/// 1..=3 changes that keep every checksum valid.
fn forge(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap) -> String {
    let n = rng.gen_range(1..=3);
    let mut what = Vec::new();
    for _ in 0..n {
        match rng.gen_range(0..100) {
            0..=44 => {
                let (o, l) = m.entries[rng.gen_range(0..m.entries.len())];
                if rng.gen_bool(0.15) {
                    // Reinterpret the entry as another kind.
                    img[o] = rng.gen_range(1..=5);
                } else {
                    forge_field(img, rng, m, o..o + l, o + 4..o + 8);
                }
                fix_entry_crc(img, o, l);
                what.push("log entry");
            }
            45..=54 => {
                let p = m.log_pages[rng.gen_range(0..m.log_pages.len())];
                if rng.gen_bool(0.5) {
                    forge_field(img, rng, m, p..p + 20, 0..0);
                    fix_log_header_crc(img, p);
                    what.push("log page header");
                } else {
                    let v = nasty(rng, u64_at(img, p + 24), m);
                    put_u64(img, p + LOG_NEXT_OFFSET as usize, v);
                    what.push("log next pointer");
                }
            }
            55..=74 => {
                let s = m.slots[rng.gen_range(0..m.slots.len())];
                if rng.gen_bool(0.5) {
                    // Header fields under the slot CRC (ino, generation, type).
                    if rng.gen_bool(0.4) {
                        img[s + 36] = rng.gen_range(1..=3);
                    } else {
                        forge_field(img, rng, m, s + 24..s + 60, 0..0);
                    }
                    fix_slot_crc(img, s);
                    what.push("inode header");
                } else {
                    // State, head or tail word (not under a CRC).
                    let w = s + 8 * rng.gen_range(0..3);
                    let v = nasty(rng, u64_at(img, w), m);
                    put_u64(img, w, v);
                    what.push("inode word");
                }
            }
            75..=87 => {
                let at = m.superblocks[rng.gen_range(0..m.superblocks.len())].start;
                let both = rng.gen_bool(0.5);
                forge_field(img, rng, m, at + 8..at + 252, 0..0);
                if both {
                    let other = if at == 0 { PAGE } else { 0 };
                    let copy = img[at..at + 252].to_vec();
                    img[other..other + 252].copy_from_slice(&copy);
                    fix_superblock_crc(img, other);
                }
                fix_superblock_crc(img, at);
                what.push("superblock");
            }
            _ => {
                let page = m.journals[rng.gen_range(0..m.journals.len())].start;
                let k = rng.gen_range(1..=4);
                let recs: Vec<(u64, u64)> = (0..k)
                    .map(|_| {
                        let s = m.slots[rng.gen_range(0..m.slots.len())] as u64;
                        let off = match rng.gen_range(0..4) {
                            0 => s,
                            1 => s + 16,
                            2 => s + 8,
                            _ => nasty(rng, s, m),
                        };
                        let old = nasty(rng, u64_at(img, (s + 16) as usize), m);
                        (off, old)
                    })
                    .collect();
                forge_journal(img, page, rng.gen_range(1..1000), &recs);
                what.push("journal");
            }
        }
    }
    format!("forged: {}", what.join(", "))
}

/// Whole-page damage: zero, copy or swap metadata and log pages.
fn damage_pages(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap) -> String {
    let pick_page = |rng: &mut ChaCha8Rng| -> usize {
        match rng.gen_range(0..4) {
            0 => m.log_pages[rng.gen_range(0..m.log_pages.len())],
            1 => (m.inode_table.start / PAGE + rng.gen_range(0..m.inode_table.len() / PAGE)) * PAGE,
            2 => m.journals[rng.gen_range(0..m.journals.len())].start,
            _ => rng.gen_range(0..m.len / PAGE) * PAGE,
        }
    };
    let a = pick_page(rng);
    let b = pick_page(rng);
    match rng.gen_range(0..3) {
        0 => {
            img[a..a + PAGE].fill(0);
            format!("zeroed page {}", a / PAGE)
        }
        1 => {
            let src = img[b..b + PAGE].to_vec();
            img[a..a + PAGE].copy_from_slice(&src);
            format!("copied page {} over page {}", b / PAGE, a / PAGE)
        }
        _ => {
            let pa = img[a..a + PAGE].to_vec();
            let pb = img[b..b + PAGE].to_vec();
            img[a..a + PAGE].copy_from_slice(&pb);
            img[b..b + PAGE].copy_from_slice(&pa);
            format!("swapped pages {} and {}", a / PAGE, b / PAGE)
        }
    }
}

// ---------------------------------------------------------------------------
// Exercising an image.

/// Changes through every kind of operation; all errors are allowed.
fn mutate(fs: &Session, paths: &[(Vec<u8>, FileType)]) {
    let mut n = 0u64;
    for (p, kind) in paths.iter().take(40) {
        n += 1;
        match kind {
            FileType::Regular => {
                if let Ok(fd) = fs.open(p, OpenFlags::RDWR, 0) {
                    let _ = fs.pwrite(fd, &pattern(n, 5000), 100);
                    let _ = fs.write(fd, b"appended");
                    let _ = fs.ftruncate(fd, 3000);
                    let _ = fs.fallocate(fd, FallocateMode::Default, 8000, 5000);
                    let _ = fs.fallocate(fd, FallocateMode::KeepSize, 0, 20_000);
                    let _ = fs.fsync(fd);
                    let _ = fs.close(fd);
                }
                let _ = fs.chmod(p, 0o600);
                let _ = fs.chown(p, Some(1), None);
                let _ = fs.utimens(p, TimeSet::Now, TimeSet::Now);
                let mut l = p.clone();
                l.extend_from_slice(b"_l");
                let _ = fs.link(p, &l);
                let to = format!("/zz{n}");
                let _ = fs.rename(p, to.as_bytes(), RenameFlags::Replace);
                let _ = fs.unlink(&l);
                let _ = fs.unlink(to.as_bytes());
            }
            FileType::Directory => {
                let mut f = p.clone();
                f.extend_from_slice(b"/new_file");
                let _ = put(fs, &f, b"hello");
                let mut d = p.clone();
                d.extend_from_slice(b"/new_dir");
                let _ = fs.mkdir(&d, 0o755);
                let _ = fs.rename(&f, &d, RenameFlags::Exchange);
                let _ = fs.rmdir(&d);
                let _ = fs.unlink(&d);
                let _ = fs.unlink(&f);
                let to = format!("/zd{n}");
                let _ = fs.rename(p, to.as_bytes(), RenameFlags::NoReplace);
                let _ = fs.rename(to.as_bytes(), p, RenameFlags::Replace);
                let _ = fs.rmdir(p);
            }
            FileType::Symlink => {
                let _ = fs.readlink(p);
                let _ = fs.open(p, OpenFlags::RDONLY, 0).map(|fd| fs.close(fd));
                let _ = fs.unlink(p);
                let _ = fs.symlink(b"/a/f1", p);
            }
            FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {
                let _ = fs.open(p, OpenFlags::RDONLY, 0).map(|fd| fs.close(fd));
                let _ = fs.chmod(p, 0o600);
                let _ = fs.unlink(p);
                let _ = fs.mknod(p, libc::S_IFCHR | 0o644, 0x0501);
            }
        }
    }
    let _ = put(fs, b"/after_damage", &pattern(5, 20_000));
}

/// Check one image. Err for a consistency failure (fsck called the pool
/// clean but it does not mount or read cleanly); panics are reported by the
/// isolation layer.
fn exercise(img: &[u8], with_ops: bool) -> Result<String, String> {
    let report = ferrite::fsck::check(&Pmem::from_image(img));
    let clean = matches!(&report, Ok(r) if r.is_clean());
    let fs = match Session::mount(Pmem::from_image(img), &mount_opts()) {
        Ok(fs) => fs,
        Err(e) => {
            if clean {
                return Err(format!("fsck found the pool clean but mount failed: {e}"));
            }
            return Ok(format!("mount refused: {e}"));
        }
    };
    let st = explore(&fs, 3000, 256 * 1024);
    if clean && st.errors > 0 {
        return Err(format!("fsck found the pool clean but the walk failed: {}", st.error_lines.join("; ")));
    }
    if with_ops {
        mutate(&fs, &st.paths);
        explore(&fs, 3000, 64 * 1024);
    }
    let pmem = fs.pmem().clone();
    let _ = fs.unmount();
    let after = pmem.image();
    let _ = ferrite::fsck::check(&Pmem::from_image(&after));
    if let Ok(fs) = Session::mount(Pmem::from_image(&after), &mount_opts()) {
        explore(&fs, 3000, 64 * 1024);
    }
    Ok(format!("mounted; walked {} dirs, {} files, {} symlinks, {} errors", st.dirs, st.files, st.symlinks, st.errors))
}

type Corruptor = fn(&mut [u8], &mut ChaCha8Rng, &PoolMap) -> String;

/// Run `trials` isolated trials of `corrupt` on the base images.
fn run_trials(test: &str, trials: u64, corrupt: Corruptor, with_ops: bool) {
    let seed = seed_from_env("FERRITE_SEED", test, splitmix64(test.len() as u64 * 1_000_003));
    let trial = |i: u64| -> Result<String, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(seed ^ i.wrapping_mul(0x9E37)));
        let (name, base) = &bases()[(i % 3) as usize];
        let m = map_pool(base);
        let mut img = base.clone();
        let what = corrupt(&mut img, &mut rng, &m);
        exercise(&img, with_ops).map_err(|e| format!("{name} image, {what}: {e}"))
    };
    if let Some(t) = std::env::var("FERRITE_TRIAL").ok().and_then(|s| s.parse::<u64>().ok()) {
        // Replay one trial in this process, panics and all.
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(seed ^ t.wrapping_mul(0x9E37)));
        let (name, base) = &bases()[(t % 3) as usize];
        let m = map_pool(base);
        let mut img = base.clone();
        let what = corrupt(&mut img, &mut rng, &m);
        eprintln!("trial {t}: {name} image, {what}");
        let r = exercise(&img, with_ops);
        eprintln!("trial {t}: {r:?}");
        r.unwrap();
        return;
    }
    let out = run_isolated(test, trials, STALL, &[("FERRITE_SEED", format!("{seed:#x}"))], trial);
    if out.in_child {
        return;
    }
    let mounted = out.passed.iter().filter(|p| p.1.starts_with("mounted")).count();
    eprintln!(
        "{test}: {trials} trials: {} refused at mount, {mounted} mounted and walked, {} failed",
        out.passed.len() - mounted,
        out.failures.len()
    );
    let failures = out.failures;
    if !failures.is_empty() {
        let shown: Vec<String> = failures
            .iter()
            .take(15)
            .map(|f| {
                let n = f.split_whitespace().next().unwrap_or("?");
                format!("trial {f}\n  replay: FERRITE_SEED={seed:#x} FERRITE_TRIAL={n} cargo test -p ferrite-tests --test corruption {test}")
            })
            .collect();
        panic!(
            "{test}: {} of {trials} trials failed (seed {seed:#x}); first {}:\n{}",
            failures.len(),
            shown.len(),
            shown.join("\n")
        );
    }
}

#[test]
fn bit_flips_never_panic() {
    run_trials("bit_flips_never_panic", 400, flip_bytes, false);
}

#[test]
fn forged_checksummed_fields_never_panic() {
    run_trials("forged_checksummed_fields_never_panic", 400, forge, false);
}

#[test]
fn damaged_pages_never_panic() {
    run_trials("damaged_pages_never_panic", 150, damage_pages, false);
}

#[test]
fn operations_on_corrupted_pools_never_panic() {
    fn mixed(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap) -> String {
        match rng.gen_range(0..3) {
            0 => flip_bytes(img, rng, m),
            1 => forge(img, rng, m),
            _ => damage_pages(img, rng, m),
        }
    }
    run_trials("operations_on_corrupted_pools_never_panic", 300, mixed, true);
}

#[test]
fn random_images_never_panic() {
    fn random_image(img: &mut [u8], rng: &mut ChaCha8Rng, m: &PoolMap) -> String {
        let keep_sb = rng.gen_range(0..3);
        let from = match keep_sb {
            // Fully random.
            0 => 0,
            // Valid superblocks, everything behind them random.
            1 => 2 * PAGE,
            // Valid superblocks and journals, random inode table onwards.
            _ => m.inode_table.start,
        };
        let sparse = rng.gen_bool(0.5);
        for b in &mut img[from..] {
            *b = if sparse && rng.gen_bool(0.9) { 0 } else { rng.gen() };
        }
        if keep_sb == 0 && rng.gen_bool(0.5) {
            // Random except for a correct magic.
            img[..8].copy_from_slice(&ferrite::format::SUPERBLOCK_MAGIC);
        }
        let _ = m.data_start;
        format!("random bytes from offset {from} (sparse: {sparse})")
    }
    run_trials("random_images_never_panic", 60, random_image, false);
}

// ---------------------------------------------------------------------------
// Deterministic refusals.

fn shm_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

#[test]
fn truncated_and_extended_images_are_refused() {
    let seed = seed_from_env("FERRITE_SEED", "truncated_and_extended_images_are_refused", 0x7e57);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (name, base) in bases() {
        // Heap pools of a whole number of pages, shorter or longer.
        let mut pages: Vec<u64> = vec![0, 1, 2, 3, 63, 64, 65, 100, 256, 511, 513, 600, 1024];
        pages.extend((0..6).map(|_| rng.gen_range(0..2 * POOL_PAGES)));
        for p in pages {
            if p == POOL_PAGES {
                continue;
            }
            let len = (p * PAGE_SIZE) as usize;
            let mut img = vec![0u8; len];
            let n = len.min(base.len());
            img[..n].copy_from_slice(&base[..n]);
            let what = format!("{name} image resized to {p} pages (seed {seed:#x})");
            match Session::mount(Pmem::from_image(&img), &mount_opts()) {
                Ok(_) => panic!("{what}: mount accepted it"),
                Err(PoolError::Corrupt(_)) | Err(PoolError::NotFerrite) => {}
                Err(e) => panic!("{what}: unexpected error {e}"),
            }
            if let Ok(r) = ferrite::fsck::check(&Pmem::from_image(&img)) {
                assert!(!r.is_clean(), "{what}: fsck called it clean");
            }
        }
        // Pool files: lengths that are not a multiple of 4096 are refused
        // by the open; whole pages open but do not mount.
        let dir = shm_dir();
        let mut lens: Vec<usize> = vec![
            0,
            1,
            100,
            4095,
            4097,
            8191,
            64 * PAGE - 1,
            base.len() - 1,
            base.len() + 1,
            base.len() - PAGE,
            base.len() / 2,
        ];
        lens.extend((0..6).map(|_| rng.gen_range(0..base.len() + PAGE)));
        for len in lens {
            let path = dir.join(format!("ferrite-corruption-{}-{name}-{len}.pool", std::process::id()));
            let mut bytes = base[..len.min(base.len())].to_vec();
            bytes.resize(len, 0);
            std::fs::write(&path, &bytes).unwrap();
            let what = format!("{name} image as a file of {len} bytes (seed {seed:#x})");
            let r = Pmem::open_file(&path, 64 * 4096);
            match r {
                Err(_) => assert!(len % PAGE != 0 || len < 64 * PAGE, "{what}: open_file refused a valid-length file"),
                Ok(pmem) => {
                    assert!(len % PAGE == 0 && len >= 64 * PAGE, "{what}: open_file accepted it");
                    assert!(Session::mount(pmem, &mount_opts()).is_err(), "{what}: mount accepted it");
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[test]
fn wrong_magic_and_version_are_refused() {
    let clean = &bases()[0].1;
    let mount = |img: &[u8]| Session::mount(Pmem::from_image(img), &mount_opts());
    let fsck = |img: &[u8]| ferrite::fsck::check(&Pmem::from_image(img));

    // Wrong magic in both copies: not a Ferrite pool.
    let mut img = clean.clone();
    for c in SUPERBLOCK_COPIES {
        img[c.offset().0 as usize] ^= 0x20;
    }
    assert!(matches!(mount(&img), Err(PoolError::NotFerrite)));
    assert!(matches!(fsck(&img), Err(PoolError::NotFerrite)));

    // Wrong magic in one copy: the other one serves; fsck notes the damaged
    // copy (which a crash in a superblock update also leaves) without
    // calling the pool damaged: the next mount rewrites it.
    for c in SUPERBLOCK_COPIES {
        let mut img = clean.clone();
        img[c.offset().0 as usize + 3] = b'!';
        let fs = mount(&img).expect("one good superblock copy is enough");
        let st = explore(&fs, 1000, 1 << 20);
        assert_eq!(st.errors, 0, "{:?}", st.error_lines);
        let r = fsck(&img).expect("fsck of a pool with one good copy");
        assert!(r.is_clean(), "{r}");
        assert!(r.notes.iter().any(|n| n.contains("superblock copy")), "fsck did not notice a damaged copy:\n{r}");
    }

    // Wrong version with a valid checksum, in both copies: a version error.
    for v in [0u32, 1, 3, 7, u32::MAX] {
        let mut img = clean.clone();
        for c in SUPERBLOCK_COPIES {
            let at = c.offset().0 as usize;
            put_u32(&mut img, at + 8, v);
            fix_superblock_crc(&mut img, at);
        }
        match mount(&img) {
            Err(PoolError::Version { found, supported }) => {
                assert_eq!(found, v);
                assert_eq!(supported, ferrite::format::FORMAT_VERSION);
            }
            Err(e) => panic!("version {v}: expected a version error, got {e}"),
            Ok(_) => panic!("version {v}: mount accepted it"),
        }
        assert!(
            matches!(fsck(&img), Err(PoolError::Version { found, .. }) if found == v),
            "version {v}: fsck did not report the version"
        );
        // A wrong version without a valid checksum is corruption.
        let mut img2 = clean.clone();
        for c in SUPERBLOCK_COPIES {
            put_u32(&mut img2, c.offset().0 as usize + 8, v);
        }
        assert!(matches!(mount(&img2), Err(PoolError::Corrupt(_))), "version {v} with a stale checksum");
    }

    // Wrong version in one copy: the other one serves.
    let mut img = clean.clone();
    put_u32(&mut img, 8, 2);
    fix_superblock_crc(&mut img, 0);
    let fs = mount(&img).expect("copy B still valid");
    assert_eq!(explore(&fs, 1000, 1 << 20).errors, 0);

    // An all-zero pool and an all-0xff pool.
    for b in [0u8, 0xff] {
        let img = vec![b; clean.len()];
        assert!(mount(&img).is_err());
        let _ = fsck(&img);
    }
}

// ---------------------------------------------------------------------------
// Forged corruptions that used to panic or abort, one by one, so that each
// fails (or passes) deterministically. Each forges one checksum-valid field
// of the clean or crashed base image.

/// Entries of inode `ino`'s log, oldest first, with their kind byte.
fn entries_of(m: &PoolMap, ino: u64) -> Vec<(usize, usize)> {
    m.entries.iter().zip(&m.entry_owner).filter(|(_, &o)| o == ino).map(|(&e, _)| e).collect()
}

fn ino_of(img: &[u8], path: &str) -> u64 {
    let fs = Session::mount(Pmem::from_image(img), &mount_opts()).unwrap();
    fs.lstat(path.as_bytes()).unwrap().ino.0
}

/// The last entry of kind `kind` (1 Attr, 2 Write, 3 Truncate, 4 DentryAdd,
/// 5 DentryRemove) in `ino`'s log that `pick` accepts.
fn find_entry(img: &[u8], m: &PoolMap, ino: u64, kind: u8, pick: impl Fn(&[u8]) -> bool) -> (usize, usize) {
    *entries_of(m, ino)
        .iter()
        .rev()
        .find(|&&(o, l)| img[o] == kind && pick(&img[o..o + l]))
        .unwrap_or_else(|| panic!("no entry of kind {kind} in inode {ino}'s log"))
}

/// Run `f` and turn a panic into an Err naming it.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("ENGINE PANIC: {what}: {msg}")
        }
    }
}

/// A log entry whose sequence number is u64::MAX (checksum valid): mount
/// (crash recovery scans every log) and lazy loading must refuse it.
#[test]
fn forged_max_sequence_number_is_refused() {
    for (name, base) in &bases()[..2] {
        let m = map_pool(base);
        let ino = ino_of(base, "/a/f1");
        let (o, l) = find_entry(base, &m, ino, 2, |_| true);
        let mut img = base.clone();
        put_u64(&mut img, o + 8, u64::MAX);
        fix_entry_crc(&mut img, o, l);
        let what = format!("{name} image, sequence u64::MAX in a write entry of /a/f1");
        no_panic(&what, || {
            let _ = ferrite::fsck::check(&Pmem::from_image(&img));
            if let Ok(fs) = Session::mount(Pmem::from_image(&img), &mount_opts()) {
                let _ = fs.stat(b"/a/f1");
                explore(&fs, 1000, 1 << 20);
            }
        });
    }
}

/// A directory entry whose type says "regular file" for a directory inode:
/// opening it for writing must fail (EISDIR) or the write must, not panic.
#[test]
fn forged_dentry_type_mismatch_does_not_panic() {
    let base = &bases()[0].1;
    let m = map_pool(base);
    let (o, l) = find_entry(base, &m, 1, 4, |e| e[25] == 1 && e[40] == b'a');
    let mut img = base.clone();
    img[o + 24] = FileType::Regular as u8;
    fix_entry_crc(&mut img, o, l);
    no_panic("dentry /a typed Regular, open O_RDWR + pwrite", || {
        let fs = Session::mount(Pmem::from_image(&img), &mount_opts()).unwrap();
        if let Ok(fd) = fs.open(b"/a", OpenFlags::RDWR, 0) {
            let _ = fs.pwrite(fd, b"x", 0);
            let _ = fs.write(fd, b"x");
            let _ = fs.ftruncate(fd, 0);
            let _ = fs.fallocate(fd, FallocateMode::Default, 0, 10);
            let _ = fs.close(fd);
        }
        let _ = fs.truncate(b"/a", 0);
        let _ = fs.unlink(b"/a");
        let _ = fs.rename(b"/empty", b"/a", RenameFlags::Replace);
    });
}

/// An attribute entry giving a named file a link count of 0: unlink and
/// rename over it must not underflow the count.
#[test]
fn forged_zero_link_count_does_not_panic() {
    let base = &bases()[0].1;
    let m = map_pool(base);
    let ino = ino_of(base, "/a/b/c/f3");
    let (o, l) = find_entry(base, &m, ino, 1, |_| true);
    let mut img = base.clone();
    put_u32(&mut img, o + 28, 0);
    fix_entry_crc(&mut img, o, l);
    no_panic("link count 0 on /a/b/c/f3, then unlink", || {
        let fs = Session::mount(Pmem::from_image(&img), &mount_opts()).unwrap();
        let _ = fs.unlink(b"/a/b/c/f3");
    });
    no_panic("link count 0 on /a/b/c/f3, then rename over it", || {
        let fs = Session::mount(Pmem::from_image(&img), &mount_opts()).unwrap();
        let _ = fs.rename(b"/a/f1", b"/a/b/c/f3", RenameFlags::Replace);
    });
}

/// A write entry of a cleanly unmounted pool pointing at a page the saved
/// allocator holds as free: overwriting the file frees that page again.
#[test]
fn forged_write_entry_to_free_page_does_not_panic() {
    let base = &bases()[0].1;
    let m = map_pool(base);
    let ino = ino_of(base, "/a/f1");
    let (o, l) = find_entry(base, &m, ino, 2, |_| true);
    let mut img = base.clone();
    let free_page = base.len() / PAGE - 1;
    put_u64(&mut img, o + 24, free_page as u64);
    fix_entry_crc(&mut img, o, l);
    no_panic("write entry of /a/f1 -> a free page, then overwrite", || {
        let fs = Session::mount(Pmem::from_image(&img), &mount_opts()).unwrap();
        if let Ok(fd) = fs.open(b"/a/f1", OpenFlags::RDWR, 0) {
            let _ = fs.pwrite(fd, &pattern(1, 4096), 0);
            let _ = fs.close(fd);
        }
        let _ = put(&fs, b"/new", &pattern(2, 64 * 4096));
        let _ = fs.unlink(b"/a/f1");
    });
}

/// A symlink whose size (checksum valid) says 1 TiB: readlink and path
/// resolution must refuse it, not try to allocate a terabyte (an abort, so
/// this runs in a child process).
#[test]
fn forged_symlink_size_does_not_abort() {
    let out = run_isolated("forged_symlink_size_does_not_abort", 1, STALL, &[], |_| {
        let base = &bases()[0].1;
        let m = map_pool(base);
        let ino = ino_of(base, "/s");
        let (o, l) = find_entry(base, &m, ino, 2, |_| true);
        let mut img = base.clone();
        put_u64(&mut img, o + 40, 1 << 40);
        fix_entry_crc(&mut img, o, l);
        let fs = Session::mount(Pmem::from_image(&img), &mount_opts()).unwrap();
        let a = fs.readlink(b"/s");
        let b = fs.stat(b"/s");
        Ok(format!("readlink {:?}, stat {:?}", a.map(|v| v.len()), b.map(|s| s.size)))
    });
    if out.in_child {
        return;
    }
    assert!(out.failures.is_empty(), "symlink of forged size 1 TiB: {}", out.failures.join("\n"));
}

/// Superblock counters at their maximum (checksums valid): mount increments
/// the generation and the mount count, and must not overflow.
#[test]
fn forged_superblock_counters_do_not_panic() {
    let base = &bases()[0].1;
    // Byte offsets in a superblock copy: generation at 112, mount count at 152.
    let mut panics = Vec::new();
    for (field, at) in [("generation", 112usize), ("mount count", 152)] {
        let mut img = base.clone();
        for c in SUPERBLOCK_COPIES {
            let o = c.offset().0 as usize;
            put_u64(&mut img, o + at, u64::MAX);
            fix_superblock_crc(&mut img, o);
        }
        let r = std::panic::catch_unwind(|| {
            let _ = ferrite::fsck::check(&Pmem::from_image(&img));
            if let Ok(fs) = Session::mount(Pmem::from_image(&img), &mount_opts()) {
                let _ = fs.unmount();
            }
        });
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panics.push(format!("superblock {field} u64::MAX: ENGINE PANIC: {msg}"));
        }
    }
    assert!(panics.is_empty(), "{}", panics.join("\n"));
}
