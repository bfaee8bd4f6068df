//! Proves the engine's sub-page (inline) writes and fsync-atomic epochs on
//! the cases a random sequence reaches only by luck:
//!
//! - reads of pages that carry deltas (overlapping, covering, at and across
//!   page edges) give the bytes written, before and after clean and crash
//!   remounts, and the log holds Inline entries;
//! - a page folds (one copy of the merged page) when its deltas pass the
//!   limit, 32 deltas or 4 KiB for a write-mostly file (2 KiB when the
//!   pieces are larger than 256 bytes), and a read-mostly file folds
//!   earlier (4 deltas or 512 bytes); the content is right after;
//! - truncate, punch hole and fallocate over pages with deltas;
//! - a small file overwritten many times with small writes (both modes)
//!   ends with a small log, compacted, its content right after clean and
//!   crash remounts;
//! - write amplification: a 128-byte write into an existing page stores
//!   well under 4 KiB (counted on the recording pool), strict or
//!   fsync-atomic with its fsync;
//! - fsync-atomic: ENOSPC in an epoch leaves the pending state intact and
//!   committable, fsync succeeds, a crash shows exactly the committed state
//!   before the fsync and the pending state after it; unlink, rename over,
//!   link, a mode change and sync_all commit what is pending; files are
//!   independent; O_SYNC descriptors commit each write;
//! - a pool formatted before feature bit 2 mounts, gets the bit, and takes
//!   modes and inline writes.
//!
//! Every crash here is a copy of the pool image taken at that instant and
//! mounted (the pool keeps every store, like a process crash); fsck must
//! find each image clean. Randomized parts print their seed
//! (`FERRITE_INLINE_SEED` replays one).

use ferrite::format::{
    Superblock, FEATURES_KNOWN, FEATURE_MODES_INLINE, FEATURE_PUNCH_HOLE, FEATURE_SPECIAL_FILES, SUPERBLOCK_COPIES,
    SUPERBLOCK_SIZE,
};
use ferrite::{
    Errno, FallocateMode, Fd, FileMode, FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags, Session,
    XattrSetMode,
};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, pattern, remount_checked, seed_from_env};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PAGE: usize = 4096;
const MODE: &[u8] = FileMode::XATTR;

fn format(pages: u64) -> Session {
    Session::format(
        Pmem::heap(pages * PAGE as u64),
        &FormatOptions { lanes: 2, inodes: Some(256), ..Default::default() },
    )
    .unwrap()
}

/// A crash at this instant: mount a copy of the pool image as it is (fsck
/// must find it clean); `fs` goes on unaffected.
fn crash_copy(fs: &Session) -> Session {
    let image = fs.pmem().image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "fsck of a crash image:\n{report}");
    Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap()
}

/// What `f` stored into the pool, from the recording backend.
#[derive(Clone, Copy, Debug)]
struct Stored {
    /// Bytes of every store (cached, streaming, 8-byte commit), but for
    /// the zeros that initialize a new log page.
    bytes: u64,
    /// Whole data pages written (one streaming store of 4 KiB): a copy on
    /// write or a fold. (A new log page is written as its header, then
    /// zeros: never one 4 KiB store.)
    page_copies: u64,
}

fn stored<T>(fs: &Session, f: impl FnOnce() -> T) -> (T, Stored) {
    let pmem = fs.pmem();
    pmem.start_recording();
    pmem.take_events();
    let out = f();
    let events = pmem.stop_recording();
    let mut st = Stored { bytes: 0, page_copies: 0 };
    for e in &events {
        if let ferrite_pmem::Event::NtStore { data, .. } = e {
            if data.len() == PAGE {
                st.page_copies += 1;
            } else if data.iter().all(|&b| b == 0) {
                continue;
            }
        }
        st.bytes += e.stored_bytes().map_or(0, |(_, b)| b.len() as u64);
    }
    (out, st)
}

/// Inline entries in the committed log of the file `path` (from the
/// engine's annotated dump).
fn inline_entries(fs: &Session, path: &[u8]) -> usize {
    let ino = fs.stat(path).unwrap().ino;
    let text = ferrite::dump::dump(Pmem::from_image(&fs.pmem().image()), Some(ino)).unwrap();
    text.lines().filter(|l| l.contains("INLINE ")).count()
}

/// A file's expected content, kept beside the engine's.
struct Shadow {
    bytes: Vec<u8>,
}

impl Shadow {
    fn write(&mut self, off: usize, data: &[u8]) {
        if self.bytes.len() < off + data.len() {
            self.bytes.resize(off + data.len(), 0);
        }
        self.bytes[off..off + data.len()].copy_from_slice(data);
    }
    fn truncate(&mut self, size: usize) {
        self.bytes.resize(size, 0);
    }
    fn punch(&mut self, off: usize, len: usize) {
        let end = (off + len).min(self.bytes.len());
        if off < end {
            self.bytes[off..end].fill(0);
        }
    }
}

/// Read `path` every way that matters for deltas: whole, page by page,
/// three bytes around every page edge, and `random` seeded ranges.
fn check_reads(fs: &Session, path: &[u8], expect: &[u8], rng: &mut ChaCha8Rng, random: usize, what: &str) {
    assert_eq!(get(fs, path).unwrap(), expect, "{what}: whole read of {}", path.escape_ascii());
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let read = |off: usize, len: usize| {
        let mut buf = vec![0xEEu8; len];
        let n = fs.pread(fd, &mut buf, off as u64).unwrap();
        buf.truncate(n);
        buf
    };
    let want = |off: usize, len: usize| expect[off.min(expect.len())..(off + len).min(expect.len())].to_vec();
    for p in 0..expect.len().div_ceil(PAGE) {
        assert_eq!(read(p * PAGE, PAGE), want(p * PAGE, PAGE), "{what}: page {p}");
        if p > 0 {
            let at = p * PAGE - 1;
            assert_eq!(read(at, 3), want(at, 3), "{what}: edge at {at}");
        }
    }
    for _ in 0..random {
        let off = rng.gen_range(0..expect.len() + 100);
        let len = rng.gen_range(1..6000);
        assert_eq!(read(off, len), want(off, len), "{what}: {len} bytes at {off}");
    }
    fs.close(fd).unwrap();
}

fn create(fs: &Session, path: &[u8], mode: FileMode, content: &[u8]) -> Fd {
    let fd = fs.open(path, OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.fsetxattr(fd, MODE, mode.as_str().as_bytes(), XattrSetMode::Any).unwrap();
    if !content.is_empty() {
        fs.pwrite(fd, content, 0).unwrap();
    }
    fs.fsync(fd).unwrap();
    fd
}

#[test]
fn reads_of_pages_with_deltas() {
    let seed = seed_from_env("FERRITE_INLINE_SEED", "reads_of_pages_with_deltas", 0x1d17a);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for mode in [FileMode::Strict, FileMode::FsyncAtomic] {
        let fs = format(1024);
        let mut shadow = Shadow { bytes: pattern(1, 3 * PAGE + 1500) };
        let fd = create(&fs, b"/f", mode, &shadow.bytes);
        // (offset, length): overlapping pairs, one covering two older ones,
        // one inside an older one, at the start and end of a page, across
        // the edges between pages 0|1 and 2|3, into the partial last page
        // and past the end of file in it.
        let writes: &[(usize, usize)] = &[
            (100, 50),
            (120, 50),
            (90, 100),
            (300, 200),
            (350, 10),
            (0, 7),
            (PAGE - 9, 9),
            (PAGE - 20, 40),
            (3 * PAGE - 1, 2),
            (2 * PAGE + 4000, 300),
            (3 * PAGE + 1400, 200),
            (3 * PAGE + 1000, 300),
            (3 * PAGE + 100, 977),
            (PAGE + 1, 1024),
        ];
        // All the writes first, with no read in between: the file stays
        // write-mostly, so every piece is a delta.
        for (k, &(off, len)) in writes.iter().enumerate() {
            let data = pattern(100 + k as u64, len);
            fs.pwrite(fd, &data, off as u64).unwrap();
            shadow.write(off, &data);
        }
        let what = format!("{mode:?}");
        if mode == FileMode::FsyncAtomic {
            // Nothing of it is durable yet.
            let crashed = crash_copy(&fs);
            assert_eq!(get(&crashed, b"/f").unwrap(), pattern(1, 3 * PAGE + 1500), "{what}: crash before fsync");
            fs.fsync(fd).unwrap();
        }
        assert!(inline_entries(&fs, b"/f") >= writes.len(), "{what}: the small writes are not Inline entries");
        check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 50, &format!("{what} with deltas"));
        // The same writes again, each followed by reads: the file turns
        // read-mostly, and folds come earlier.
        for (k, &(off, len)) in writes.iter().enumerate() {
            let data = pattern(200 + k as u64, len);
            fs.pwrite(fd, &data, off as u64).unwrap();
            shadow.write(off, &data);
            check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 20, &format!("{what}: after write {k} again"));
        }
        fs.fsync(fd).unwrap();
        let crashed = crash_copy(&fs);
        check_reads(&crashed, b"/f", &shadow.bytes, &mut rng, 50, &format!("{what} after a crash"));
        fs.close(fd).unwrap();
        let (fs, report) = remount_checked(fs, false);
        assert!(report.is_clean());
        check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 50, &format!("{what} after a clean remount"));
        assert_eq!(fs.stat(b"/f").unwrap().size, shadow.bytes.len() as u64);
    }
}

/// Write `count` writes of `len` bytes at distinct, non-covering offsets of
/// page 1; returns the whole pages each wrote (1: a fold, 0: a delta).
fn small_writes_on_page_one(fs: &Session, fd: Fd, shadow: &mut Shadow, count: usize, len: usize) -> Vec<u64> {
    (0..count)
        .map(|k| {
            let off = PAGE + (k * (len + 3)) % (PAGE - len);
            let data = pattern(7000 + k as u64, len);
            let (r, st) = stored(fs, || fs.pwrite(fd, &data, off as u64));
            assert_eq!(r.unwrap(), len);
            shadow.write(off, &data);
            st.page_copies
        })
        .collect()
}

#[test]
fn fold_past_the_delta_limit() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for mode in [FileMode::Strict, FileMode::FsyncAtomic] {
        let fs = format(1024);
        let mut shadow = Shadow { bytes: pattern(2, 3 * PAGE) };
        let fd = create(&fs, b"/f", mode, &shadow.bytes);
        // 32 deltas of 16 bytes stay deltas; the 33rd write folds the page
        // (a 4 KiB copy); the next one is a delta again.
        let copies = small_writes_on_page_one(&fs, fd, &mut shadow, 34, 16);
        let what = format!("{mode:?}: pages written by each 16-byte write {copies:?}");
        assert!(copies[..32].iter().all(|&c| c == 0), "{what}");
        assert_eq!(copies[32], 1, "{what}: the 33rd write did not fold");
        assert_eq!(copies[33], 0, "{what}: a page copy after the fold");
        check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 30, &format!("{mode:?} after a count fold"));
        fs.fsync(fd).unwrap();
        // By bytes: 600-byte deltas (larger than 256 bytes, so the limit is
        // 2 KiB): three fit, the fourth folds. (Page 2 has no deltas yet.)
        let copies: Vec<u64> = (0..8)
            .map(|k| {
                let off = 2 * PAGE + (k * 500) % (PAGE - 600);
                let data = pattern(8000 + k as u64, 600);
                let (r, st) = stored(&fs, || fs.pwrite(fd, &data, off as u64));
                r.unwrap();
                shadow.write(off, &data);
                st.page_copies
            })
            .collect();
        let what = format!("{mode:?}: pages written by each 600-byte write {copies:?}");
        // Overlapping deltas that are not covered all count.
        assert!(copies[..3].iter().all(|&c| c == 0), "{what}");
        assert_eq!(copies[3], 1, "{what}: the fourth write did not fold");
        assert_eq!(copies[4], 0, "{what}: a page copy after the fold");
        check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 30, &format!("{mode:?} after a byte fold"));
        fs.fsync(fd).unwrap();
        let crashed = crash_copy(&fs);
        check_reads(&crashed, b"/f", &shadow.bytes, &mut rng, 30, &format!("{mode:?} after a crash"));
    }
}

#[test]
fn read_mostly_file_folds_earlier() {
    let fs = format(1024);
    let mut shadow = Shadow { bytes: pattern(3, 2 * PAGE) };
    let fd = create(&fs, b"/f", FileMode::Strict, &shadow.bytes);
    // Reads through the path API make the file read-mostly.
    let mut buf = vec![0u8; 100];
    for k in 0..200u64 {
        fs.pread(fd, &mut buf, k * 10).unwrap();
    }
    let copies = small_writes_on_page_one(&fs, fd, &mut shadow, 6, 16);
    assert!(copies[..4].iter().all(|&c| c == 0), "pages written by each write {copies:?}");
    assert_eq!(
        copies[4], 1,
        "a read-mostly file did not fold at its fifth delta: pages written by each write {copies:?}"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 30, "read-mostly");
    // The same writes on a write-mostly file stay deltas.
    let fs = format(1024);
    let mut shadow = Shadow { bytes: pattern(3, 2 * PAGE) };
    let fd = create(&fs, b"/f", FileMode::Strict, &shadow.bytes);
    let copies = small_writes_on_page_one(&fs, fd, &mut shadow, 6, 16);
    assert!(copies.iter().all(|&c| c == 0), "write-mostly: pages written by each write {copies:?}");
}

/// One change of a file and of its shadow.
type Step<'a> = dyn Fn(&Session, &mut Shadow) + 'a;

#[test]
fn truncate_punch_and_fallocate_over_deltas() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for mode in [FileMode::Strict, FileMode::FsyncAtomic] {
        let fs = format(1024);
        let mut shadow = Shadow { bytes: pattern(4, 6 * PAGE) };
        let fd = create(&fs, b"/f", mode, &shadow.bytes);
        let deltas = |shadow: &mut Shadow, tag: u64| {
            for p in 0..6 {
                for k in 0..3 {
                    let (off, len) = (p * PAGE + 700 * k + 11 * p, 300);
                    let data = pattern(tag * 100 + (p * 3 + k) as u64, len);
                    fs.pwrite(fd, &data, off as u64).unwrap();
                    shadow.write(off, &data);
                }
            }
        };
        let what = format!("{mode:?}");
        let steps: Vec<(&str, Box<Step<'_>>)> = vec![
            // Inside a delta of page 5, then regrown: zeros past the cut.
            (
                "truncate mid-delta and regrow",
                Box::new(|fs, s| {
                    fs.ftruncate(fd, (5 * PAGE + 1500) as u64).unwrap();
                    s.truncate(5 * PAGE + 1500);
                    fs.ftruncate(fd, (6 * PAGE + 100) as u64).unwrap();
                    s.truncate(6 * PAGE + 100);
                }),
            ),
            // A page boundary: page 5 and its deltas go.
            (
                "truncate at a page boundary",
                Box::new(|fs, s| {
                    fs.ftruncate(fd, (5 * PAGE) as u64).unwrap();
                    s.truncate(5 * PAGE);
                }),
            ),
            // Punch partly over deltas of pages 0 and 1, and page 2 whole.
            (
                "punch across deltas",
                Box::new(|fs, s| {
                    fs.fallocate(fd, FallocateMode::PunchHole, 800, (PAGE + 200) as u64).unwrap();
                    s.punch(800, PAGE + 200);
                    fs.fallocate(fd, FallocateMode::PunchHole, (2 * PAGE) as u64, PAGE as u64).unwrap();
                    s.punch(2 * PAGE, PAGE);
                }),
            ),
            // fallocate over pages with deltas changes no byte; growing
            // maps zeros.
            (
                "fallocate over deltas",
                Box::new(|fs, s| {
                    fs.fallocate(fd, FallocateMode::KeepSize, 0, (5 * PAGE) as u64).unwrap();
                    fs.fallocate(fd, FallocateMode::Default, (3 * PAGE + 5) as u64, (4 * PAGE) as u64).unwrap();
                    s.truncate(7 * PAGE + 5);
                }),
            ),
        ];
        for (k, (name, step)) in steps.iter().enumerate() {
            deltas(&mut shadow, k as u64 + 1);
            step(&fs, &mut shadow);
            check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 40, &format!("{what}: {name}"));
            // Small writes right after, over what the step left.
            deltas(&mut shadow, k as u64 + 50);
            check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 40, &format!("{what}: {name}, written again"));
            fs.fsync(fd).unwrap();
            let crashed = crash_copy(&fs);
            check_reads(&crashed, b"/f", &shadow.bytes, &mut rng, 40, &format!("{what}: {name}, after a crash"));
        }
        fs.close(fd).unwrap();
        let (fs, _) = remount_checked(fs, false);
        check_reads(&fs, b"/f", &shadow.bytes, &mut rng, 40, &format!("{what}: after a clean remount"));
    }
}

#[test]
fn log_full_of_inline_entries_is_compacted() {
    let seed = seed_from_env("FERRITE_INLINE_SEED", "log_full_of_inline_entries_is_compacted", 0xc0c0);
    // (mode, writes between fsyncs: 0 for none)
    for (mode, every) in [(FileMode::Strict, 0), (FileMode::FsyncAtomic, 10), (FileMode::FsyncAtomic, 700)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let fs = format(2048);
        let mut shadow = Shadow { bytes: pattern(5, 1500) };
        let fd = create(&fs, b"/small", mode, &shadow.bytes);
        const WRITES: usize = 20_000;
        for k in 0..WRITES {
            let len = rng.gen_range(1..200);
            let off = rng.gen_range(0..1500 - len);
            let data = pattern(k as u64, len);
            fs.pwrite(fd, &data, off as u64).unwrap();
            shadow.write(off, &data);
            if every > 0 && k % every == every - 1 {
                fs.fsync(fd).unwrap();
            }
        }
        let what = format!("{mode:?}, fsync every {every}");
        eprintln!(
            "log_full_of_inline_entries_is_compacted: {what}: {} compactions, {} log pages collected",
            fs.log_compactions(),
            fs.gc_pages_collected()
        );
        // With long epochs the page is folded early in each epoch and then
        // written in place (no entries): fast GC alone keeps that log small.
        if every != 700 {
            assert!(fs.log_compactions() > 0, "{what}: {WRITES} small writes compacted no log");
        }
        assert_eq!(get(&fs, b"/small").unwrap(), shadow.bytes, "{what}");
        fs.fsync(fd).unwrap();
        let crashed = crash_copy(&fs);
        assert_eq!(get(&crashed, b"/small").unwrap(), shadow.bytes, "{what}: after a crash");
        fs.close(fd).unwrap();
        let (fs, report) = remount_checked(fs, false);
        assert!(report.log_pages <= 8, "{what}: {WRITES} small writes left {} log pages", report.log_pages);
        assert_eq!(get(&fs, b"/small").unwrap(), shadow.bytes, "{what}: after a clean remount");
        eprintln!(
            "log_full_of_inline_entries_is_compacted: {what}: {} log pages in the pool after {WRITES} writes",
            report.log_pages
        );
    }
}

#[test]
fn small_write_stores_far_less_than_a_page() {
    for mode in [FileMode::Strict, FileMode::FsyncAtomic] {
        let fs = format(1024);
        let fd = create(&fs, b"/f", mode, &pattern(6, 4 * PAGE));
        let data = pattern(60, 128);
        let (r, write) = stored(&fs, || fs.pwrite(fd, &data, 1000));
        r.unwrap();
        let (r, sync) = stored(&fs, || fs.fsync(fd));
        r.unwrap();
        eprintln!("small_write_stores_far_less_than_a_page: {mode:?}: 128-byte write {write:?}, fsync {sync:?}");
        assert_eq!(write.page_copies + sync.page_copies, 0, "{mode:?}: a 128-byte write copied a page");
        assert!(write.bytes + sync.bytes <= 512, "{mode:?}: a 128-byte write stored {write:?} and its fsync {sync:?}");
    }
}

/// The state an fsync-atomic epoch leaves when the pool runs out of space.
#[test]
fn enospc_in_an_fsync_atomic_epoch() {
    let fs = format(400);
    let strict = create(&fs, b"/strict", FileMode::Strict, &pattern(70, 2 * PAGE));
    let committed = pattern(71, 20 * PAGE + 300);
    let fd = create(&fs, b"/f", FileMode::FsyncAtomic, &committed);
    let mut pending = Shadow { bytes: committed.clone() };
    // Overwrite every committed page (the old ones stay reserved for a
    // crash), then append whole pages until the pool is full.
    let mut enospc = 0;
    for p in 0.. {
        let data = pattern(1000 + p as u64, PAGE);
        match fs.pwrite(fd, &data, (p * PAGE) as u64) {
            Ok(n) => {
                assert_eq!(n, PAGE);
                pending.write(p * PAGE, &data);
            }
            Err(Errno::ENOSPC) => {
                enospc = p;
                break;
            }
            Err(e) => panic!("page {p}: {e:?}"),
        }
    }
    assert!(enospc > 20, "the pool filled before the committed pages were overwritten ({enospc})");
    // More of every kind of data change in the full pool: each succeeds or
    // fails with ENOSPC, changing nothing then.
    let mut results = Vec::new();
    for k in 0..40u64 {
        let off = (k * 997) % (enospc * PAGE) as u64;
        let r = match k % 4 {
            0 => fs
                .pwrite(fd, &pattern(2000 + k, 100), off)
                .map(|_| pending.write(off as usize, &pattern(2000 + k, 100))),
            1 => fs
                .pwrite(fd, &pattern(2000 + k, 3000), off)
                .map(|_| pending.write(off as usize, &pattern(2000 + k, 3000))),
            2 => fs.fallocate(fd, FallocateMode::PunchHole, off, 5000).map(|_| pending.punch(off as usize, 5000)),
            _ => {
                let size = pending.bytes.len() as u64 + 5000;
                fs.ftruncate(fd, size).map(|_| pending.truncate(size as usize))
            }
        };
        assert!(matches!(r, Ok(()) | Err(Errno::ENOSPC)), "data change {k}: {r:?}");
        results.push(r.is_ok());
        assert_eq!(get(&fs, b"/f").unwrap(), pending.bytes, "after data change {k} ({r:?})");
    }
    eprintln!(
        "enospc_in_an_fsync_atomic_epoch: ENOSPC at page {enospc}; {} of 40 later data changes succeeded; {} pages free",
        results.iter().filter(|&&ok| ok).count(),
        fs.free_pages()
    );
    // The pending state is what every reader sees; a crash now brings back
    // the committed state exactly, and leaves the strict file alone.
    assert_eq!(fs.pending_file_count(), 1);
    let crashed = crash_copy(&fs);
    assert_eq!(get(&crashed, b"/f").unwrap(), committed, "crash before the fsync");
    assert_eq!(get(&crashed, b"/strict").unwrap(), pattern(70, 2 * PAGE));
    drop(crashed);
    // The commit point does not fail for lack of space.
    fs.fsync(fd).unwrap();
    assert_eq!(fs.pending_file_count(), 0);
    let crashed = crash_copy(&fs);
    assert_eq!(get(&crashed, b"/f").unwrap(), pending.bytes, "crash after the fsync");
    drop(crashed);
    // A second epoch filled up with small writes, then a chmod: a commit
    // point whose Attr entry needs log room. It either succeeds and commits
    // the epoch, or fails with ENOSPC and commits nothing.
    let mut k = 0u64;
    loop {
        let off = (k * 4099) % (pending.bytes.len() as u64 - 200);
        match fs.pwrite(fd, &pattern(3000 + k, 150), off) {
            Ok(_) => pending.write(off as usize, &pattern(3000 + k, 150)),
            Err(Errno::ENOSPC) => break,
            Err(e) => panic!("small write {k}: {e:?}"),
        }
        k += 1;
        assert!(k < 100_000, "small writes never ran out of space");
    }
    let ino = fs.fstat(fd).unwrap().ino;
    let r = fs.fchmod(fd, 0o600);
    eprintln!("enospc_in_an_fsync_atomic_epoch: {k} small writes to ENOSPC, then chmod: {r:?}");
    let crashed = crash_copy(&fs);
    match r {
        Ok(()) => {
            assert_eq!(fs.pending_file_count(), 0, "chmod did not commit the epoch");
            assert_eq!(get(&crashed, b"/f").unwrap(), pending.bytes, "crash after the chmod");
        }
        Err(Errno::ENOSPC) => {
            assert_eq!(fs.pending_file_count(), 1, "a failed chmod committed the epoch");
            assert_eq!(fs.getattr(ino).unwrap().perm, 0o644);
            assert_ne!(get(&crashed, b"/f").unwrap(), pending.bytes, "a failed chmod committed the epoch");
            fs.fsync(fd).unwrap();
        }
        Err(e) => panic!("chmod in the full pool: {e:?}"),
    }
    drop(crashed);
    assert_eq!(get(&fs, b"/f").unwrap(), pending.bytes);
    // The pool works on: a write to the strict file, then the big file
    // goes and its space comes back.
    fs.pwrite(strict, b"still works", 0).unwrap();
    fs.close(fd).unwrap();
    fs.unlink(b"/f").unwrap();
    assert!(fs.free_pages() > 300, "{} pages free after the unlink", fs.free_pages());
    fs.close(strict).unwrap();
    let (fs, _) = remount_checked(fs, false);
    assert_eq!(&get(&fs, b"/strict").unwrap()[..11], b"still works");
}

/// Each namespace operation, the mode change and sync_all commit the
/// pending state of the fsync-atomic files they touch, and only theirs.
#[test]
fn commit_points_of_fsync_atomic_files() {
    let committed = pattern(80, PAGE + 10);
    let newer = pattern(81, 300);
    let newer_content = {
        let mut c = committed.clone();
        c[50..350].copy_from_slice(&newer);
        c
    };
    type Commit = fn(&Session, Fd) -> Vec<u8>;
    // Each returns the path where the file's content is to be found.
    let cases: Vec<(&str, Commit)> = vec![
        ("fsync", |fs, fd| {
            fs.fsync(fd).unwrap();
            b"/f".to_vec()
        }),
        ("fdatasync", |fs, fd| {
            fs.fdatasync(fd).unwrap();
            b"/f".to_vec()
        }),
        ("sync_all", |fs, _| {
            fs.sync_all().unwrap();
            b"/f".to_vec()
        }),
        ("unlink of one of two names", |fs, _| {
            fs.unlink(b"/f").unwrap();
            b"/f2".to_vec()
        }),
        ("rename", |fs, _| {
            fs.rename(b"/f", b"/g", RenameFlags::Replace).unwrap();
            b"/g".to_vec()
        }),
        ("rename over it (another name left)", |fs, _| {
            ferrite_tests::put(fs, b"/other", b"other").unwrap();
            fs.rename(b"/other", b"/f", RenameFlags::Replace).unwrap();
            b"/f2".to_vec()
        }),
        ("rename exchange", |fs, _| {
            ferrite_tests::put(fs, b"/other", b"other").unwrap();
            fs.rename(b"/other", b"/f", RenameFlags::Exchange).unwrap();
            b"/other".to_vec()
        }),
        ("link", |fs, _| {
            fs.link(b"/f", b"/f3").unwrap();
            b"/f3".to_vec()
        }),
        ("chmod", |fs, _| {
            fs.chmod(b"/f", 0o600).unwrap();
            b"/f".to_vec()
        }),
        ("setxattr", |fs, fd| {
            fs.fsetxattr(fd, b"user.k", b"v", XattrSetMode::Any).unwrap();
            b"/f".to_vec()
        }),
        ("mode set to the same mode", |fs, fd| {
            fs.fsetxattr(fd, MODE, b"fsync-atomic", XattrSetMode::Any).unwrap();
            b"/f".to_vec()
        }),
        ("mode set to strict", |fs, fd| {
            fs.fsetxattr(fd, MODE, b"strict", XattrSetMode::Any).unwrap();
            b"/f".to_vec()
        }),
        ("engine mode call", |fs, fd| {
            let ino = fs.fstat(fd).unwrap().ino;
            fs.set_file_mode_ino(ino, FileMode::FsyncAtomic).unwrap();
            b"/f".to_vec()
        }),
        ("O_SYNC write", |fs, _| {
            let sfd = fs.open(b"/f", OpenFlags::WRONLY.sync(), 0).unwrap();
            fs.pwrite(sfd, &pattern(81, 300), 50).unwrap();
            fs.close(sfd).unwrap();
            b"/f".to_vec()
        }),
    ];
    for (name, commit) in cases {
        let fs = format(1024);
        let fd = create(&fs, b"/f", FileMode::FsyncAtomic, &committed);
        fs.link(b"/f", b"/f2").unwrap();
        let other = create(&fs, b"/bystander", FileMode::FsyncAtomic, b"before");
        fs.pwrite(fd, &newer, 50).unwrap();
        fs.pwrite(other, b"AFTER!", 0).unwrap();
        assert_eq!(fs.pending_file_count(), 2, "{name}");
        let at = commit(&fs, fd);
        let crashed = crash_copy(&fs);
        assert_eq!(get(&crashed, &at).unwrap(), newer_content, "{name}: the pending write did not commit");
        let bystander = if name == "sync_all" { b"AFTER!".to_vec() } else { b"before".to_vec() };
        assert_eq!(get(&crashed, b"/bystander").unwrap(), bystander, "{name}: the other file");
    }
}

/// A renamed-over or unlinked fsync-atomic file with no other name: gone
/// after a crash whether it was open or not, and fsck clean.
#[test]
fn pending_file_that_loses_its_last_name() {
    for open in [false, true] {
        let fs = format(1024);
        let fd = create(&fs, b"/f", FileMode::FsyncAtomic, &pattern(90, 3 * PAGE));
        fs.pwrite(fd, &pattern(91, 2 * PAGE), 100).unwrap();
        if !open {
            fs.close(fd).unwrap();
        }
        ferrite_tests::put(&fs, b"/new", b"new").unwrap();
        fs.rename(b"/new", b"/f", RenameFlags::Replace).unwrap();
        let g = create(&fs, b"/g", FileMode::FsyncAtomic, b"g");
        fs.pwrite(g, &pattern(92, 500), 0).unwrap();
        fs.unlink(b"/g").unwrap();
        let crashed = crash_copy(&fs);
        assert_eq!(get(&crashed, b"/f").unwrap(), b"new");
        assert_eq!(crashed.stat(b"/g").err(), Some(Errno::ENOENT));
        drop(crashed);
        if open {
            fs.close(fd).unwrap();
        }
        fs.close(g).unwrap();
        assert_eq!(fs.pending_file_count(), 0);
        remount_checked(fs, false);
    }
}

fn superblock(image: &[u8]) -> Superblock {
    let at = SUPERBLOCK_COPIES[0].offset().0 as usize;
    Superblock::decode(&image[at..at + SUPERBLOCK_SIZE], image.len() as u64).unwrap()
}

/// A pool from before modes and inline entries (feature bit 2 clear)
/// mounts, gets the bit at its first read-write mount, and takes both.
#[test]
fn pool_without_feature_bit_2_mounts_and_gets_it() {
    let fs = format(1024);
    ferrite_tests::put(&fs, b"/old", &pattern(100, 3 * PAGE)).unwrap();
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let mut image = pmem.image();
    let mut sb = superblock(&image);
    sb.features = FEATURE_SPECIAL_FILES | FEATURE_PUNCH_HOLE;
    for copy in SUPERBLOCK_COPIES {
        let at = copy.offset().0 as usize;
        image[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    }
    assert_eq!(superblock(&image).features & FEATURE_MODES_INLINE, 0);
    let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
    assert_eq!(superblock(&fs.pmem().image()).features, FEATURES_KNOWN);
    let fd = fs.open(b"/old", OpenFlags::RDWR, 0).unwrap();
    assert_eq!(fs.fgetxattr(fd, MODE).unwrap(), b"strict");
    let mut expect = pattern(100, 3 * PAGE);
    fs.pwrite(fd, b"inline", 10).unwrap();
    expect[10..16].copy_from_slice(b"inline");
    assert!(inline_entries(&fs, b"/old") > 0, "the small write is not an Inline entry");
    fs.fsetxattr(fd, MODE, b"fsync-atomic", XattrSetMode::Any).unwrap();
    fs.pwrite(fd, b"pending", 20).unwrap();
    let crashed = crash_copy(&fs);
    assert_eq!(get(&crashed, b"/old").unwrap(), expect);
    let fd2 = crashed.open(b"/old", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(crashed.fgetxattr(fd2, MODE).unwrap(), b"fsync-atomic");
    drop(crashed);
    fs.close(fd).unwrap();
    expect[20..27].copy_from_slice(b"pending");
    let (fs, _) = remount_checked(fs, false);
    assert_eq!(get(&fs, b"/old").unwrap(), expect);
}
