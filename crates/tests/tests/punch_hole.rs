//! Proves fallocate PUNCH_HOLE: the punched bytes read as zeros, whole
//! pages in the range are deallocated (st_blocks and SEEK_HOLE show it),
//! partly covered pages keep their other bytes, the size never changes, a
//! range past the end changes nothing; and that it stays true across clean
//! and crash remounts while log GC and compaction run: a punch must outlive
//! every older log page that still maps a page it unmapped, or a rebuild
//! would bring the punched data back. fsck stays clean throughout.

use ferrite::{FallocateMode, FormatOptions, MountOptions, OpenFlags, PathFs, Session, Whence};
use ferrite_pmem::Pmem;
use ferrite_tests::remount;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PAGE: u64 = 4096;

fn content(fs: &Session, path: &[u8]) -> Vec<u8> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size as usize);
    fs.close(fd).unwrap();
    buf
}

#[test]
fn punched_bytes_read_as_zeros_and_whole_pages_are_freed() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let mut expect: Vec<u8> = (0..10 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
    fs.pwrite(fd, &expect, 0).unwrap();
    let free_before = fs.free_pages();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 80);

    // Page 1 from byte 100, page 2 whole, page 3 up to byte 50.
    fs.fallocate(fd, FallocateMode::PunchHole, PAGE + 100, 2 * PAGE - 50).unwrap();
    expect[(PAGE + 100) as usize..(3 * PAGE + 50) as usize].fill(0);
    assert_eq!(content(&fs, b"/f"), expect);
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (10 * PAGE, 72));
    assert_eq!(fs.free_pages(), free_before + 1);
    assert_eq!(fs.lseek(fd, 0, Whence::Hole).unwrap(), 2 * PAGE);
    assert_eq!(fs.lseek(fd, 2 * PAGE as i64, Whence::Data).unwrap(), 3 * PAGE);

    // Whole pages to past the end: the size stays, the tail pages go.
    fs.fallocate(fd, FallocateMode::PunchHole, 8 * PAGE, 100 * PAGE).unwrap();
    expect[(8 * PAGE) as usize..].fill(0);
    assert_eq!(content(&fs, b"/f"), expect);
    assert_eq!(fs.fstat(fd).unwrap().blocks, 56);
    // At or past the end, and inside a hole: nothing changes.
    fs.fallocate(fd, FallocateMode::PunchHole, 10 * PAGE, PAGE).unwrap();
    fs.fallocate(fd, FallocateMode::PunchHole, 2 * PAGE + 10, 20).unwrap();
    assert_eq!(content(&fs, b"/f"), expect);
    assert_eq!(fs.fstat(fd).unwrap().size, 10 * PAGE);
    fs.close(fd).unwrap();

    for crash in [false, true] {
        let fs2 =
            remount(Session::mount(Pmem::from_image(&fs.pmem().image()), &MountOptions::default()).unwrap(), crash);
        assert_eq!(content(&fs2, b"/f"), expect);
        assert_eq!(fs2.stat(b"/f").unwrap().blocks, 56);
        fs2.unmount().unwrap();
    }
}

/// Random writes and punches over a few files, with crash and clean
/// remounts in between: after each remount every file equals its shadow.
/// Enough operations run that fast GC and compaction reclaim log pages.
#[test]
fn punches_survive_gc_compaction_and_crashes() {
    let seed: u64 = std::env::var("FERRITE_PUNCH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x9e37_79b9);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut fs = Session::format(Pmem::heap(4096 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let names: Vec<Vec<u8>> = (0..3).map(|i| format!("/f{i}").into_bytes()).collect();
    let mut shadow: Vec<Vec<u8>> = vec![Vec::new(); names.len()];
    for n in &names {
        let fd = fs.open(n, OpenFlags::RDWR.create(), 0o644).unwrap();
        fs.close(fd).unwrap();
    }
    let mut collected = 0;
    for round in 0..12 {
        for _ in 0..1500 {
            let i = rng.gen_range(0..names.len());
            let fd = fs.open(&names[i], OpenFlags::RDWR, 0).unwrap();
            let s = &mut shadow[i];
            if rng.gen_bool(0.6) {
                let at = rng.gen_range(0..24 * PAGE);
                let len = rng.gen_range(1..3 * PAGE);
                let tag = rng.gen::<u8>() | 1;
                let data = vec![tag; len as usize];
                fs.pwrite(fd, &data, at).unwrap();
                let end = (at + len) as usize;
                if s.len() < end {
                    s.resize(end, 0);
                }
                s[at as usize..end].copy_from_slice(&data);
            } else {
                let at = rng.gen_range(0..26 * PAGE);
                let len = rng.gen_range(1..8 * PAGE);
                fs.fallocate(fd, FallocateMode::PunchHole, at, len).unwrap();
                if (at as usize) < s.len() {
                    let end = ((at + len) as usize).min(s.len());
                    s[at as usize..end].fill(0);
                }
            }
            fs.close(fd).unwrap();
        }
        collected += fs.gc_pages_collected();
        fs = remount(fs, round % 3 != 2);
        for (n, s) in names.iter().zip(&shadow) {
            assert_eq!(&content(&fs, n), s, "seed {seed:#x} round {round} file {}", String::from_utf8_lossy(n));
        }
    }
    assert!(collected > 0, "no log page was ever collected: the test did not exercise GC");
}
