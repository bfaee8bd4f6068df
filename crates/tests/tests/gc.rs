//! Proves that log garbage collection keeps logs bounded: a file
//! overwritten hundreds of thousands of times, and a directory through
//! which tens of thousands of names come and go (with a few that stay),
//! end with a handful of log pages; the state survives remounts (clean and
//! crash) unchanged, and fsck finds nothing.

use ferrite::{FormatOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::remount_checked as check_and_remount;

#[test]
fn overwritten_file_keeps_a_bounded_log() {
    let fs = Session::format(Pmem::heap(4096 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let mut page = [0u8; 4096];
    const OVERWRITES: u32 = 200_000;
    for i in 0..OVERWRITES {
        page[..4].copy_from_slice(&i.to_le_bytes());
        // Alternate between two pages and an unaligned write so several
        // kinds of dead entries mix in the log.
        let off = match i % 3 {
            0 => 0,
            1 => 4096,
            _ => 100,
        };
        fs.pwrite(fd, &page[..if i % 3 == 2 { 10 } else { 4096 }], off).unwrap();
    }
    fs.close(fd).unwrap();
    let (fs, report) = check_and_remount(fs, true);
    assert!(report.log_pages <= 8, "{OVERWRITES} overwrites left {} log pages", report.log_pages);
    let fd = fs.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    let mut buf = [0u8; 4];
    fs.pread(fd, &mut buf, 4096).unwrap();
    let last_at_4096 = (0..OVERWRITES).rev().find(|i| i % 3 == 1).unwrap();
    assert_eq!(u32::from_le_bytes(buf), last_at_4096);
    fs.close(fd).unwrap();
    assert!(fs.gc_pages_collected() == 0, "a fresh mount has collected nothing yet");
}

#[test]
fn churned_directory_keeps_a_bounded_log() {
    let fs = Session::format(Pmem::heap(4096 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    fs.mkdir(b"/d", 0o755).unwrap();
    for k in 0..5 {
        let fd = fs.open(format!("/d/keep{k}").as_bytes(), OpenFlags::WRONLY.create(), 0o644).unwrap();
        fs.close(fd).unwrap();
    }
    const ROUNDS: usize = 20_000;
    for i in 0..ROUNDS {
        let name = format!("/d/{}-{}", "x".repeat(i % 200), i);
        let fd = fs.open(name.as_bytes(), OpenFlags::WRONLY.create().excl(), 0o644).unwrap();
        fs.close(fd).unwrap();
        if i % 7 == 3 {
            fs.rename(name.as_bytes(), format!("/d/renamed{}", i % 5).as_bytes(), ferrite::RenameFlags::Replace)
                .unwrap();
        } else {
            fs.unlink(name.as_bytes()).unwrap();
        }
    }
    let free_before = fs.free_pages();
    let (fs, report) = check_and_remount(fs, false);
    assert_eq!(fs.free_pages(), free_before);
    // Root and /d logs, plus the (tiny) logs of 10 files.
    assert!(report.log_pages <= 40, "{ROUNDS} create/unlink rounds left {} log pages\n{report}", report.log_pages);
    let fd = fs.open(b"/d", OpenFlags::RDONLY.directory(), 0).unwrap();
    let mut names: Vec<Vec<u8>> = fs.readdir(fd, 0, 1000).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    fs.close(fd).unwrap();
    let mut expect: Vec<Vec<u8>> = (0..5).map(|k| format!("keep{k}").into_bytes()).collect();
    expect.extend((0..5).map(|k| format!("renamed{k}").into_bytes()));
    expect.sort();
    assert_eq!(names, expect);
    let (_fs, _) = check_and_remount(fs, true);
}
