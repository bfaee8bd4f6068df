//! Proves the inode slot's Attr entry (format feature bit 3, issue 14): a
//! new inode with nothing but attributes has no log page (empty files,
//! directories and FIFOs cost the allocator nothing but their slots, and
//! unlinking them frees no page); the first change to such an inode opens
//! its first log page and survives a crash right after it (the head is
//! stored before the tail commits); attributes changed later come from the
//! log, not the slot, after a remount and after a crash; and an inode of a
//! pool written before the bit (slot bytes 64..128 zero, its Attr entry in
//! its log) is still read, changed and freed as before.

use ferrite::format::{encode_log_page_header, Entry, INODE_ATTR_OFFSET, INODE_HEAD_OFFSET, INODE_TAIL_OFFSET};
use ferrite::{FormatOptions, MountOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, pattern, put};

const POOL_PAGES: u64 = 2048;

fn format() -> Session {
    Session::format(Pmem::heap(POOL_PAGES * 4096), &FormatOptions::default()).unwrap()
}

/// The image of `fs` as a crash would leave it (no unmount).
fn crash(fs: Session) -> Vec<u8> {
    let pmem = fs.pmem().clone();
    drop(fs);
    pmem.image()
}

fn mount(image: &[u8]) -> Session {
    let report = ferrite::fsck::check(&Pmem::from_image(image)).unwrap();
    assert!(report.is_clean(), "{report}");
    Session::mount(Pmem::from_image(image), &MountOptions::default()).unwrap()
}

fn tail_of(fs: &Session, path: &[u8]) -> u64 {
    let ino = fs.lstat(path).unwrap().ino;
    fs.pmem().read_u64(fs.layout().inode_slot(ino) + INODE_TAIL_OFFSET)
}

#[test]
fn empty_inodes_take_no_log_page() {
    let fs = format();
    fs.mkdir(b"/d", 0o755).unwrap();
    put(&fs, b"/d/first", b"x").unwrap();
    let free = fs.free_pages();
    for i in 0..100 {
        let fd = fs.open(format!("/d/f{i}").as_bytes(), OpenFlags::RDWR.create().excl(), 0o640).unwrap();
        fs.close(fd).unwrap();
        fs.mkdir(format!("/d/sub{i}").as_bytes(), 0o700).unwrap();
        fs.mknod(format!("/d/fifo{i}").as_bytes(), libc::S_IFIFO | 0o600, 0).unwrap();
    }
    // 300 new inodes; only /d's own log grew (300 names of 1 unit each, 63
    // units to a page: 5 pages at most).
    let used = free - fs.free_pages();
    assert!(used <= 6, "300 empty inodes took {used} pages");
    assert_eq!(tail_of(&fs, b"/d/f7"), 0, "an empty file has no log");
    assert_eq!(tail_of(&fs, b"/d/sub7"), 0, "an empty directory has no log");
    let st = fs.stat(b"/d/f7").unwrap();
    assert_eq!((st.perm & 0o7777, st.nlink, st.size), (0o640, 1, 0));
    // Removing them frees no page but their names' log space.
    let free = fs.free_pages();
    for i in 0..100 {
        fs.unlink(format!("/d/f{i}").as_bytes()).unwrap();
        fs.rmdir(format!("/d/sub{i}").as_bytes()).unwrap();
    }
    assert!(fs.free_pages() + 6 >= free, "removing empty inodes took pages");
    // Everything left is read back from the slots after a crash.
    let fs = mount(&crash(fs));
    let st = fs.stat(b"/d/fifo42").unwrap();
    assert_eq!(st.perm & 0o7777, 0o600);
    assert_eq!(get(&fs, b"/d/first").unwrap(), b"x");
}

#[test]
fn first_entry_of_an_empty_log_survives_a_crash() {
    let fs = format();
    fs.mkdir(b"/d", 0o755).unwrap();
    put(&fs, b"/f", b"").unwrap();
    assert_eq!(tail_of(&fs, b"/d"), 0);
    assert_eq!(tail_of(&fs, b"/f"), 0);
    // The first change of each opens its first log page.
    put(&fs, b"/d/g", &pattern(1, 5000)).unwrap();
    put(&fs, b"/f", &pattern(2, 9000)).unwrap();
    fs.chmod(b"/d", 0o711).unwrap();
    assert_ne!(tail_of(&fs, b"/d"), 0);
    assert_ne!(tail_of(&fs, b"/f"), 0);
    let fs = mount(&crash(fs));
    assert_eq!(get(&fs, b"/d/g").unwrap(), pattern(1, 5000));
    assert_eq!(get(&fs, b"/f").unwrap(), pattern(2, 9000));
    // The log's Attr entry supersedes the slot's.
    assert_eq!(fs.stat(b"/d").unwrap().perm & 0o7777, 0o711);
    fs.unmount().unwrap();
}

/// Turn `path`'s inode (an empty file made by this code: attributes in
/// its slot, no log) into one as a pool written before feature bit 3 holds
/// it: its Attr entry, sequence number 1, in a log page of its own (the
/// pool's last page, free in a small pool), and slot bytes 64..128 zero.
/// The image must come from a crash, so that mount rebuilds the allocator
/// from the logs instead of restoring a saved one.
fn make_old_format(image: &mut [u8], fs_image_ino: u64, layout: &ferrite::format::Layout) {
    let slot = layout.inode_slot(ferrite::InodeNo(fs_image_ino)).0 as usize;
    let generation = u32::from_le_bytes(image[slot + 32..slot + 36].try_into().unwrap());
    let at = slot + INODE_ATTR_OFFSET as usize;
    let (entry, seq, _) = Entry::decode(&image[at..at + 64]).unwrap();
    assert_eq!(seq, 0, "a slot Attr entry has sequence number 0");
    let page = image.len() - 4096;
    image[page..page + 64].copy_from_slice(&encode_log_page_header(ferrite::InodeNo(fs_image_ino), generation));
    let mut buf = Vec::new();
    entry.encode(1, &mut buf);
    image[page + 64..page + 128].copy_from_slice(&buf);
    image[slot + INODE_HEAD_OFFSET as usize..slot + INODE_HEAD_OFFSET as usize + 8]
        .copy_from_slice(&(page as u64).to_le_bytes());
    image[slot + INODE_TAIL_OFFSET as usize..slot + INODE_TAIL_OFFSET as usize + 8]
        .copy_from_slice(&(page as u64 + 128).to_le_bytes());
    image[at..at + 64].fill(0);
}

#[test]
fn inodes_written_before_the_slot_attr_are_still_read() {
    let fs = format();
    let fd = fs.open(b"/old", OpenFlags::RDWR.create(), 0o604).unwrap();
    fs.close(fd).unwrap();
    put(&fs, b"/keep", &pattern(3, 3000)).unwrap();
    let st = fs.stat(b"/old").unwrap();
    let layout = fs.layout();
    let mut image = crash(fs);
    make_old_format(&mut image, st.ino.0, &layout);
    let fs = mount(&image);
    let again = fs.stat(b"/old").unwrap();
    assert_eq!((again.perm & 0o7777, again.nlink, again.size, again.mtime), (0o604, 1, 0, st.mtime));
    // Changed, remounted, and freed like any inode.
    put(&fs, b"/old", &pattern(4, 10_000)).unwrap();
    fs.chmod(b"/old", 0o640).unwrap();
    let fs = mount(&crash(fs));
    assert_eq!(get(&fs, b"/old").unwrap(), pattern(4, 10_000));
    assert_eq!(fs.stat(b"/old").unwrap().perm & 0o7777, 0o640);
    let free = fs.free_pages();
    fs.unlink(b"/old").unwrap();
    assert!(fs.free_pages() >= free + 3, "its data and log pages are freed");
    assert_eq!(get(&fs, b"/keep").unwrap(), pattern(3, 3000));
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let report = ferrite::fsck::check(&Pmem::from_image(&pmem.image())).unwrap();
    assert!(report.is_clean(), "{report}");
}
