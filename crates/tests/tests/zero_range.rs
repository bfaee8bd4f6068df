//! Proves fallocate ZERO_RANGE, with and without KEEP_SIZE: the range reads
//! as zeros afterwards, partly covered pages keep their other bytes, every
//! page the range touches is allocated (st_blocks and SEEK_DATA show it),
//! the pages it replaced are freed by the same commit (no space leaks), the
//! size grows to the range's end unless KEEP_SIZE, pages past the end of
//! file are allocated with KEEP_SIZE; that a zeroed range refused for want
//! of space changes nothing; and that the result survives clean and crash
//! remounts with fsck clean. The model-based tests compare random zeroed
//! ranges with the reference model; the crash harness's named workloads
//! (`fallocate_zero_range*`) crash inside one.

use ferrite::{Errno, FallocateMode, FormatOptions, MountOptions, OpenFlags, PathFs, Session, Whence};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, remount};

const PAGE: u64 = 4096;

#[test]
fn zeroed_ranges_read_as_zeros_and_stay_allocated() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let mut expect: Vec<u8> = (0..10 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
    fs.pwrite(fd, &expect, 0).unwrap();
    let free_before = fs.free_pages();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 80);

    // Page 1 from byte 100, pages 2 whole, page 3 up to byte 50: each
    // replaced by a fresh page, the old ones freed in the same commit.
    fs.fallocate(fd, FallocateMode::ZeroRange, PAGE + 100, 2 * PAGE - 50).unwrap();
    expect[(PAGE + 100) as usize..(3 * PAGE + 50) as usize].fill(0);
    assert_eq!(get(&fs, b"/f").unwrap(), expect);
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (10 * PAGE, 80));
    assert_eq!(fs.free_pages(), free_before);
    // No hole where a punch would have made one.
    assert_eq!(fs.lseek(fd, 0, Whence::Hole).unwrap(), 10 * PAGE);

    // A zeroed range inside a hole allocates the page.
    fs.fallocate(fd, FallocateMode::PunchHole, 5 * PAGE, PAGE).unwrap();
    expect[(5 * PAGE) as usize..(6 * PAGE) as usize].fill(0);
    assert_eq!(fs.fstat(fd).unwrap().blocks, 72);
    fs.fallocate(fd, FallocateMode::ZeroRange, 5 * PAGE + 10, 10).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 80);
    assert_eq!(fs.lseek(fd, 5 * PAGE as i64, Whence::Data).unwrap(), 5 * PAGE);
    assert_eq!(fs.free_pages(), free_before);

    // KEEP_SIZE past the end of file: pages allocated, the size stays.
    fs.fallocate(fd, FallocateMode::ZeroRangeKeepSize, 12 * PAGE, 2 * PAGE).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (10 * PAGE, 96));
    assert_eq!(get(&fs, b"/f").unwrap(), expect);

    // Without KEEP_SIZE the size grows to the range's end; the bytes
    // between the old end and the range read as zeros too.
    fs.fallocate(fd, FallocateMode::ZeroRange, 10 * PAGE + 5, PAGE - 5).unwrap();
    expect.resize((11 * PAGE) as usize, 0);
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (11 * PAGE, 104));
    assert_eq!(get(&fs, b"/f").unwrap(), expect);

    // A range inside the size that ends mid-page leaves the rest of the
    // page as it was, and a zeroed range over zeros is still a change of
    // the times only.
    fs.pwrite(fd, &[7u8; 300], 11 * PAGE - 300).unwrap();
    expect[(11 * PAGE - 300) as usize..].fill(7);
    fs.fallocate(fd, FallocateMode::ZeroRangeKeepSize, 11 * PAGE - 300, 100).unwrap();
    expect[(11 * PAGE - 300) as usize..(11 * PAGE - 200) as usize].fill(0);
    assert_eq!(get(&fs, b"/f").unwrap(), expect);
    assert_eq!(fs.fallocate(fd, FallocateMode::ZeroRange, 0, 0), Err(Errno::EINVAL));
    fs.close(fd).unwrap();

    for crash in [false, true] {
        let fs2 =
            remount(Session::mount(Pmem::from_image(&fs.pmem().image()), &MountOptions::default()).unwrap(), crash);
        assert_eq!(get(&fs2, b"/f").unwrap(), expect);
        let st = fs2.stat(b"/f").unwrap();
        assert_eq!((st.size, st.blocks), (11 * PAGE, 104));
        fs2.unmount().unwrap();
    }
}

/// Every page of the range needs a free page until the commit frees the
/// ones it replaced: with fewer free, the call fails with ENOSPC and the
/// file is as before, data, size and allocation.
#[test]
fn a_zeroed_range_refused_for_space_changes_nothing() {
    let fs = Session::format(Pmem::heap(512 * 4096), &FormatOptions { lanes: 1, ..Default::default() }).unwrap();
    let fd = fs.open(b"/big", OpenFlags::RDWR.create(), 0o644).unwrap();
    let chunk = vec![0x5au8; PAGE as usize];
    let mut at = 0;
    while fs.pwrite(fd, &chunk, at).is_ok() {
        at += PAGE;
    }
    let before = get(&fs, b"/big").unwrap();
    let st = fs.fstat(fd).unwrap();
    assert!(st.size >= 64 * PAGE, "the pool held only {} bytes", st.size);
    assert_eq!(
        fs.fallocate(fd, FallocateMode::ZeroRange, 100, st.size - 200),
        Err(Errno::ENOSPC),
        "no room for a fresh copy of the whole file"
    );
    assert_eq!(get(&fs, b"/big").unwrap(), before);
    let after = fs.fstat(fd).unwrap();
    assert_eq!((after.size, after.blocks), (st.size, st.blocks));
    fs.close(fd).unwrap();
    let fs2 = remount(Session::mount(Pmem::from_image(&fs.pmem().image()), &MountOptions::default()).unwrap(), true);
    assert_eq!(get(&fs2, b"/big").unwrap(), before);
    fs2.unmount().unwrap();
}
