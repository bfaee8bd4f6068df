//! Proves crash recovery's parallel scan (issue 14) covers every live inode
//! of a large table, whatever the number of threads: the threads take
//! chunks of 512 inode slots from a shared counter, and an inode on either
//! side of a chunk boundary, in the first or the last chunk, must be found,
//! its pages marked used, an orphan among them freed. Each pool holds a few
//! thousand files with data (so that live inodes sit on every chunk
//! boundary) and orphans, is dropped without unmount (a crash), checked by
//! fsck (which recovers a private copy itself and compares the allocator
//! with the pages every inode owns) and mounted with 1, 2 and 3 recovery
//! threads; every file must read back, and new files written afterwards
//! must not take a page that a recovered file still owns.

use ferrite::{FormatOptions, MountOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, pattern, put};

/// Build a pool with `files` files of one or two pages in directories of
/// 500, and `orphans` files unlinked while open; crash it; return the image.
fn crashed_pool(lanes: u32, files: usize, orphans: usize) -> Vec<u8> {
    let pages = 4 * (files + orphans) as u64 + 4096;
    let opts = FormatOptions { lanes, inodes: Some((files + orphans) as u64 + 600), ..Default::default() };
    let fs = Session::format(Pmem::heap(pages * 4096), &opts).unwrap();
    for d in 0..files.div_ceil(500) {
        fs.mkdir(format!("/d{d}").as_bytes(), 0o755).unwrap();
    }
    for i in 0..files {
        let len = 4096 * (1 + i % 2) - (i % 7) * 100;
        put(&fs, format!("/d{}/f{i}", i / 500).as_bytes(), &pattern(i as u64, len)).unwrap();
    }
    let mut open = Vec::new();
    for k in 0..orphans {
        let p = format!("/o{k}");
        put(&fs, p.as_bytes(), &pattern(1 << 40 | k as u64, 8192)).unwrap();
        open.push(fs.open(p.as_bytes(), OpenFlags::RDONLY, 0).unwrap());
        fs.unlink(p.as_bytes()).unwrap();
    }
    let pmem = fs.pmem().clone();
    drop(fs); // a crash: the orphans' last close never comes
    pmem.image()
}

fn check_recovered(image: &[u8], files: usize, orphans: usize) {
    let report = ferrite::fsck::check(&Pmem::from_image(image)).unwrap();
    assert!(report.is_clean(), "{report}");
    for threads in [1, 2, 3] {
        let opts = MountOptions { recovery_threads: threads, ..Default::default() };
        let fs = Session::mount(Pmem::from_image(image), &opts).unwrap();
        let r = fs.mount_report().clone();
        assert!(r.recovered, "a crashed pool was mounted without recovery");
        assert_eq!(r.orphans_freed, orphans as u64, "{threads} threads");
        assert_eq!(r.inodes_scanned as usize, 1 + files.div_ceil(500) + files + orphans, "{threads} threads");
        for i in (0..files).step_by(7).chain([files - 1]) {
            let len = 4096 * (1 + i % 2) - (i % 7) * 100;
            assert_eq!(get(&fs, format!("/d{}/f{i}", i / 500).as_bytes()).unwrap(), pattern(i as u64, len));
        }
        // New data must land in free pages only: a page of a recovered
        // file handed out again would change that file's bytes.
        for k in 0..200 {
            put(&fs, format!("/new{k}").as_bytes(), &pattern(7 << 40 | k, 8192)).unwrap();
        }
        for i in 0..files {
            let len = 4096 * (1 + i % 2) - (i % 7) * 100;
            assert_eq!(
                get(&fs, format!("/d{}/f{i}", i / 500).as_bytes()).unwrap(),
                pattern(i as u64, len),
                "file {i} changed after new writes ({threads} recovery threads)"
            );
        }
        let image_after = {
            let pmem = fs.pmem().clone();
            fs.unmount().unwrap();
            pmem.image()
        };
        let report = ferrite::fsck::check(&Pmem::from_image(&image_after)).unwrap();
        assert!(report.is_clean(), "after new writes, {threads} recovery threads: {report}");
    }
}

/// One lane: inode numbers are handed out in order, so the files occupy
/// slots 2.. without gaps and live inodes sit on both sides of the chunk
/// boundaries at 512, 1024 and 1536.
#[test]
fn one_lane_every_chunk_boundary() {
    let (files, orphans) = (1700, 6);
    check_recovered(&crashed_pool(1, files, orphans), files, orphans);
}

/// Eight lanes (runs of 64 numbers per lane): the live inodes are spread
/// over the whole table, the last chunk included.
#[test]
fn eight_lanes_spread_over_the_table() {
    let (files, orphans) = (2500, 9);
    check_recovered(&crashed_pool(8, files, orphans), files, orphans);
}
