//! Proves the basic life cycle of a pool through the path API: format,
//! create files and directories, write and read, unmount, remount (clean
//! and after a crash), and find every byte and name again.

use ferrite::{FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags, Session};
use ferrite_pmem::Pmem;

fn fresh(pages: u64) -> Session {
    Session::format(Pmem::heap(pages * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap()
}

fn remount_clean(fs: Session) -> Session {
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let image = pmem.image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap()
}

fn remount_crash(fs: Session) -> Session {
    let image = fs.pmem().image();
    drop(fs);
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap()
}

fn read_all(fs: &Session, path: &[u8]) -> Vec<u8> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size);
    fs.close(fd).unwrap();
    buf
}

#[test]
fn write_remount_read() {
    let fs = fresh(2048);
    fs.mkdir(b"/a", 0o755).unwrap();
    fs.mkdir(b"/a/b", 0o700).unwrap();
    let fd = fs.open(b"/a/b/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(fs.pwrite(fd, &data, 0).unwrap(), data.len());
    fs.pwrite(fd, b"hello", 4094).unwrap();
    fs.close(fd).unwrap();
    fs.symlink(b"/a/b/f", b"/link").unwrap();
    fs.link(b"/a/b/f", b"/a/hard").unwrap();
    let mut expect = data.clone();
    expect[4094..4099].copy_from_slice(b"hello");
    assert_eq!(read_all(&fs, b"/a/b/f"), expect);
    let fs = remount_clean(fs);
    assert!(!fs.mount_report().recovered);
    assert_eq!(read_all(&fs, b"/link"), expect);
    assert_eq!(fs.stat(b"/a/hard").unwrap().nlink, 2);
    assert_eq!(fs.stat(b"/a").unwrap().nlink, 3);
    fs.rename(b"/a/hard", b"/hard2", RenameFlags::Replace).unwrap();
    fs.truncate(b"/hard2", 5000).unwrap();
    let fs = remount_crash(fs);
    assert!(fs.mount_report().recovered);
    assert_eq!(read_all(&fs, b"/a/b/f"), &expect[..5000]);
    fs.truncate(b"/hard2", 9000).unwrap();
    let got = read_all(&fs, b"/a/b/f");
    assert_eq!(&got[..5000], &expect[..5000]);
    assert!(got[5000..].iter().all(|&b| b == 0));
    fs.unlink(b"/hard2").unwrap();
    fs.unlink(b"/a/b/f").unwrap();
    fs.unlink(b"/link").unwrap();
    fs.rmdir(b"/a/b").unwrap();
    fs.rmdir(b"/a").unwrap();
    let free = fs.free_pages();
    let fs = remount_crash(fs);
    assert_eq!(fs.free_pages(), free);
}
