//! Proves that a whole-page overwrite taking the copy-before-lock path
//! (forced here, as when another thread writes the same file) still works
//! on a full pool: its pages, allocated before the lock, find no room, and
//! it falls back to the locked path, where an overwrite that only replaces
//! pages may borrow the removal reserve (docs/DESIGN.md, "Space for
//! removals"). Its own binary: the switch is process-wide.

use ferrite::{Errno, FormatOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;

#[test]
fn a_forced_precopy_overwrite_works_on_a_full_pool() {
    let fs =
        Session::format(Pmem::heap(512 * 4096), &FormatOptions { lanes: 2, inodes: Some(64), ..Default::default() })
            .unwrap();
    let page = vec![0x11u8; 4096];
    let a = fs.open(b"/a", OpenFlags::RDWR.create(), 0o644).unwrap();
    let b = fs.open(b"/b", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(b, &page, 0).unwrap();
    // Fill, a page at a time, through two files that have logs already.
    for fd in [a, b] {
        let mut off = fs.fstat(fd).unwrap().size;
        while fs.pwrite(fd, &page, off).is_ok() {
            off += 4096;
        }
    }
    assert_eq!(fs.statfs().unwrap().blocks_avail, 0, "the pool is full");
    let before = ferrite::write_precopies();
    ferrite::force_write_precopy(true);
    let new = vec![0x22u8; 2 * 4096];
    let r = fs.pwrite(a, &new, 4096);
    ferrite::force_write_precopy(false);
    assert_eq!(r, Ok(new.len()), "overwrite on a full pool through the precopy path");
    assert_eq!(ferrite::write_precopies(), before, "the precopy path found no pages and fell back");
    let mut back = vec![0u8; 3 * 4096];
    fs.pread(a, &mut back, 0).unwrap();
    assert!(back[..4096].iter().all(|&x| x == 0x11) && back[4096..].iter().all(|&x| x == 0x22));
    let size = fs.fstat(a).unwrap().size;
    assert_eq!(fs.pwrite(a, &page, size), Err(Errno::ENOSPC), "a growing write still fails");
    fs.close(a).unwrap();
    fs.close(b).unwrap();
    let report = ferrite::fsck::check(&Pmem::from_image(&fs.pmem().image())).unwrap();
    assert!(report.is_clean(), "{report}");
}
