//! Proves the engine's copy_file_range (`Ferrite::copy_range_ino`, what
//! the FUSE mount serves COPY_FILE_RANGE with): the bytes land as a read
//! and a write of them would put them, across the pieces it copies at a
//! time and across holes (read as zeros); it stops at the source's end;
//! it extends the destination; overlapping ranges of one file, and
//! directories at either end, are refused with Linux's errors; a copy of
//! nothing is 0; and the result survives clean and crash remounts with
//! fsck clean.

use ferrite::{Errno, FormatOptions, InodeNo, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, remount};

fn content(fs: &Session, path: &[u8]) -> Vec<u8> {
    get(fs, path).unwrap()
}

fn ino(fs: &Session, path: &[u8]) -> InodeNo {
    fs.stat(path).unwrap().ino
}

#[test]
fn copies_like_read_and_write_and_survives_remounts() {
    let fs = Session::format(Pmem::heap(8192 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    // A source of 2.5 MiB + 77 bytes (more than one piece of the copy)
    // with a 512 KiB hole in it.
    let fd = fs.open(b"/src", OpenFlags::RDWR.create(), 0o644).unwrap();
    let first: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8 + 1).collect();
    let second: Vec<u8> = (0..((1 << 20) + (1 << 19) + 77)).map(|i: u32| (i % 241) as u8 + 3).collect();
    fs.pwrite(fd, &first, 0).unwrap();
    fs.pwrite(fd, &second, (1 << 20) + (1 << 19)).unwrap();
    fs.close(fd).unwrap();
    let src = content(&fs, b"/src");
    let fd = fs.open(b"/dst", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, &[b'x'; 1000], 0).unwrap();
    fs.close(fd).unwrap();
    let e = fs.engine();
    let (s, d) = (ino(&fs, b"/src"), ino(&fs, b"/dst"));

    // Everything from byte 10 to 5 in the destination, asking for more
    // than there is: a short count, the destination extended.
    let n = e.copy_range_ino(s, 10, d, 5, 64 << 20).unwrap();
    assert_eq!(n, src.len() - 10);
    let mut expect = vec![b'x'; 5];
    expect.extend_from_slice(&src[10..]);
    assert_eq!(content(&fs, b"/dst"), expect);
    // From the source's end, and of nothing: 0, nothing changes.
    assert_eq!(e.copy_range_ino(s, src.len() as u64, d, 0, 100).unwrap(), 0);
    assert_eq!(e.copy_range_ino(s, 0, d, 0, 0).unwrap(), 0);
    assert_eq!(content(&fs, b"/dst"), expect);
    // Within one file: apart is a copy, overlapping is EINVAL (either way round).
    assert_eq!(e.copy_range_ino(s, 0, s, 4 << 20, 8192).unwrap(), 8192);
    assert_eq!(e.copy_range_ino(s, 0, s, 4096, 8192), Err(Errno::EINVAL));
    assert_eq!(e.copy_range_ino(s, 4096, s, 0, 8192), Err(Errno::EINVAL));
    let mut src_now = src.clone();
    src_now.resize((4 << 20) + 8192, 0);
    src_now[(4 << 20)..].copy_from_slice(&src[..8192]);
    assert_eq!(content(&fs, b"/src"), src_now);
    // Directories at either end.
    fs.mkdir(b"/dir", 0o755).unwrap();
    let dir = ino(&fs, b"/dir");
    assert_eq!(e.copy_range_ino(dir, 0, d, 0, 10), Err(Errno::EISDIR));
    assert_eq!(e.copy_range_ino(s, 0, dir, 0, 10), Err(Errno::EISDIR));

    for crash in [false, true] {
        let image = Pmem::from_image(&fs.pmem().image());
        let fs2 = remount(Session::mount(image, &ferrite::MountOptions::default()).unwrap(), crash);
        assert_eq!(content(&fs2, b"/dst"), expect, "crash {crash}");
        assert_eq!(content(&fs2, b"/src"), src_now, "crash {crash}");
    }
}
