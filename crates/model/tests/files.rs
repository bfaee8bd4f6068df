//! Open files of the model: open flag rules (O_CREAT, O_EXCL, O_TRUNC,
//! O_DIRECTORY, O_NOFOLLOW, dangling symlinks, write access to
//! directories), read/write/pread/pwrite and positions, O_APPEND, holes,
//! EFBIG, lseek (Set/Cur/End/Data/Hole), truncate/ftruncate, fallocate,
//! fsync, descriptor numbering and EBADF, and unlink-while-open.

mod common;
use common::*;
use ferrite::limits::FILE_SIZE_MAX;
use ferrite::{Errno, FallocateMode, Fd, FileType, OpenFlags, PathFs, Whence};

#[test]
fn open_create_rules() {
    let (fs, _) = setup();
    let fd = fs.open(p("/a"), OpenFlags::WRONLY.create(), 0o100644).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.kind, st.perm, st.uid, st.gid, st.size, st.nlink), (FileType::Regular, 0o644, 0, 0, 0, 1));
    fs.close(fd).unwrap();
    // O_CREAT on an existing file opens it; O_EXCL refuses.
    put(&fs, "/a", b"hello");
    let fd = fs.open(p("/a"), OpenFlags::RDONLY.create(), 0o600).unwrap();
    assert_eq!(read_fd(&fs, fd), b"hello");
    assert_eq!(fs.fstat(fd).unwrap().perm, 0o644);
    fs.close(fd).unwrap();
    assert_eq!(err(fs.open(p("/a"), OpenFlags::RDWR.create().excl(), 0o644)), Errno::EEXIST);
    // Set-id bits kept on creation.
    let fd = fs.open(p("/suid"), OpenFlags::WRONLY.create(), 0o7777).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().perm, 0o7777);
    // O_CREAT | O_DIRECTORY is invalid.
    assert_eq!(err(fs.open(p("/x"), OpenFlags::RDONLY.create().directory(), 0)), Errno::EINVAL);
    // Missing name without O_CREAT.
    assert_eq!(err(fs.open(p("/missing"), OpenFlags::RDONLY, 0)), Errno::ENOENT);
}

#[test]
fn open_directories_and_symlinks() {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/f", b"x");
    fs.symlink(p("f"), p("/lf")).unwrap();
    fs.symlink(p("d"), p("/ld")).unwrap();
    fs.symlink(p("sub/target"), p("/dang")).unwrap();
    fs.symlink(p("missing_dir/target"), p("/dang2")).unwrap();
    assert_eq!(err(fs.open(p("/d"), OpenFlags::WRONLY, 0)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/d"), OpenFlags::RDWR, 0)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/d"), OpenFlags::RDWR.create(), 0)), Errno::EISDIR);
    assert_eq!(err(fs.open(p("/d"), OpenFlags::RDONLY.create().excl(), 0)), Errno::EEXIST);
    let dfd = fs.open(p("/d"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(fs.fstat(dfd).unwrap().kind, FileType::Directory);
    let dfd2 = fs.open(p("/ld"), OpenFlags::RDONLY.directory(), 0).unwrap();
    assert_eq!(fs.fstat(dfd2).unwrap().ino, fs.fstat(dfd).unwrap().ino);
    assert_eq!(err(fs.open(p("/f"), OpenFlags::RDONLY.directory(), 0)), Errno::ENOTDIR);
    assert_eq!(err(fs.open(p("/lf"), OpenFlags::RDONLY.directory(), 0)), Errno::ENOTDIR);
    // O_NOFOLLOW on a final symlink.
    assert_eq!(err(fs.open(p("/lf"), OpenFlags::RDONLY.nofollow(), 0)), Errno::ELOOP);
    assert_eq!(err(fs.open(p("/lf"), OpenFlags::RDONLY.nofollow().directory(), 0)), Errno::ENOTDIR);
    assert_eq!(err(fs.open(p("/dang"), OpenFlags::WRONLY.create().nofollow(), 0)), Errno::ELOOP);
    fs.open(p("/ld/"), OpenFlags::RDONLY.nofollow(), 0).unwrap(); // slash follows
                                                                  // Dangling symlinks: plain open ENOENT, O_EXCL EEXIST, O_CREAT creates the target.
    assert_eq!(err(fs.open(p("/dang"), OpenFlags::RDONLY, 0)), Errno::ENOENT);
    assert_eq!(err(fs.open(p("/dang"), OpenFlags::WRONLY.create().excl(), 0)), Errno::EEXIST);
    assert_eq!(err(fs.open(p("/dang"), OpenFlags::WRONLY.create(), 0o640)), Errno::ENOENT);
    fs.mkdir(p("/sub"), 0o755).unwrap();
    let fd = fs.open(p("/dang"), OpenFlags::WRONLY.create(), 0o640).unwrap();
    fs.write(fd, b"via link").unwrap();
    assert_eq!(get(&fs, "/sub/target"), b"via link");
    assert_eq!(fs.stat(p("/sub/target")).unwrap().perm, 0o640);
    assert_eq!(err(fs.open(p("/dang2"), OpenFlags::WRONLY.create(), 0)), Errno::ENOENT);
}

#[test]
fn o_trunc() {
    let (fs, clock) = setup();
    put(&fs, "/a", b"0123456789");
    clock.set(ts(2000));
    // Read-only: truncated all the same, as Linux; a directory refused.
    let fd = fs.open(p("/a"), OpenFlags::RDONLY.trunc(), 0).unwrap();
    fs.close(fd).unwrap();
    let st = fs.stat(p("/a")).unwrap();
    assert_eq!((st.size, st.mtime, st.ctime), (0, ts(2000), ts(2000)));
    fs.mkdir(p("/dir"), 0o755).unwrap();
    assert_eq!(err(fs.open(p("/dir"), OpenFlags::RDONLY.trunc(), 0)), Errno::EISDIR);
    // Writable: to zero, times updated.
    put(&fs, "/a", b"0123456789");
    clock.set(ts(2500));
    let fd = fs.open(p("/a"), OpenFlags::WRONLY.trunc(), 0).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks, st.mtime, st.ctime), (0, 0, ts(2500), ts(2500)));
    // Even when the size is already zero.
    clock.set(ts(3000));
    let fd2 = fs.open(p("/a"), OpenFlags::RDWR.trunc(), 0).unwrap();
    let st = fs.fstat(fd2).unwrap();
    assert_eq!((st.mtime, st.ctime, st.atime), (ts(3000), ts(3000), ts(T0)));
}

#[test]
fn read_write_positions() {
    let (fs, _) = setup();
    let fd = fs.open(p("/a"), rw_create(), 0o644).unwrap();
    assert_eq!(fs.write(fd, b"hello ").unwrap(), 6);
    assert_eq!(fs.write(fd, b"world").unwrap(), 5);
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 11);
    let mut buf = [0u8; 4];
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 0); // at EOF
    assert_eq!(fs.lseek(fd, 0, Whence::Set).unwrap(), 0);
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"hell");
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"o wo");
    // pread/pwrite do not move the position.
    assert_eq!(fs.pwrite(fd, b"W", 6).unwrap(), 1);
    assert_eq!(fs.pread(fd, &mut buf, 5).unwrap(), 4);
    assert_eq!(&buf, b" Wor");
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 8);
    let mut big = [0u8; 100];
    assert_eq!(fs.pread(fd, &mut big, 8).unwrap(), 3);
    assert_eq!(fs.pread(fd, &mut big, 11).unwrap(), 0);
    assert_eq!(fs.pread(fd, &mut big, 1 << 50).unwrap(), 0);
    assert_eq!(err(fs.pread(fd, &mut big, u64::MAX)), Errno::EINVAL);
    assert_eq!(err(fs.pwrite(fd, b"x", u64::MAX)), Errno::EINVAL);
    // Holes read as zeros.
    fs.pwrite(fd, b"end", 10_000).unwrap();
    let all = get(&fs, "/a");
    assert_eq!(all.len(), 10_003);
    assert_eq!(&all[..11], b"hello World");
    assert!(all[11..10_000].iter().all(|&b| b == 0));
    assert_eq!(&all[10_000..], b"end");
    // A zero-length write changes nothing, not even past the size limit.
    let before = fs.snapshot();
    assert_eq!(fs.write(fd, b"").unwrap(), 0);
    assert_eq!(fs.pwrite(fd, b"", FILE_SIZE_MAX + 10).unwrap(), 0);
    assert_eq!(fs.snapshot(), before);
}

#[test]
fn access_modes() {
    let (fs, _) = setup();
    put(&fs, "/a", b"data");
    let ro = fs.open(p("/a"), OpenFlags::RDONLY, 0).unwrap();
    let wo = fs.open(p("/a"), OpenFlags::WRONLY, 0).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(err(fs.write(ro, b"x")), Errno::EBADF);
    assert_eq!(err(fs.pwrite(ro, b"x", 0)), Errno::EBADF);
    assert_eq!(err(fs.read(wo, &mut buf)), Errno::EBADF);
    assert_eq!(err(fs.pread(wo, &mut buf, 0)), Errno::EBADF);
    assert_eq!(err(fs.ftruncate(ro, 0)), Errno::EINVAL);
    assert_eq!(err(fs.fallocate(ro, FallocateMode::Default, 0, 1)), Errno::EBADF);
    assert_eq!(err(fs.fallocate(ro, FallocateMode::Default, 0, 0)), Errno::EINVAL);
    // Directory descriptors.
    fs.mkdir(p("/d"), 0o755).unwrap();
    let d = fs.open(p("/d"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(err(fs.read(d, &mut buf)), Errno::EISDIR);
    assert_eq!(err(fs.pread(d, &mut buf, 0)), Errno::EISDIR);
    assert_eq!(err(fs.pwrite(d, b"x", 0)), Errno::EBADF);
    assert_eq!(err(fs.ftruncate(d, 0)), Errno::EINVAL);
    assert_eq!(err(fs.fallocate(d, FallocateMode::Default, 0, 1)), Errno::EBADF);
    assert_eq!(fs.lseek(d, 5, Whence::Set).unwrap(), 5);
    assert_eq!(fs.lseek(d, 5, Whence::Cur).unwrap(), 10);
    assert_eq!(err(fs.lseek(d, 0, Whence::End)), Errno::EINVAL);
    assert_eq!(err(fs.lseek(d, 0, Whence::Data)), Errno::EINVAL);
    assert_eq!(err(fs.readdir(ro, 0, 10)), Errno::ENOTDIR);
    fs.fsync(d).unwrap();
    fs.fdatasync(ro).unwrap();
    fs.fsync(wo).unwrap();
}

#[test]
fn descriptor_numbers_and_ebadf() {
    let (fs, _) = setup();
    put(&fs, "/a", b"x"); // uses fd 3
    let a = fs.open(p("/a"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(a, Fd(4));
    fs.close(a).unwrap();
    let b = fs.open(p("/a"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(b, Fd(5)); // never reused
    let mut buf = [0u8; 1];
    assert_eq!(err(fs.close(a)), Errno::EBADF);
    assert_eq!(err(fs.read(a, &mut buf)), Errno::EBADF);
    assert_eq!(err(fs.pread(a, &mut buf, 0)), Errno::EBADF);
    assert_eq!(err(fs.write(a, b"x")), Errno::EBADF);
    assert_eq!(err(fs.pwrite(a, b"x", 0)), Errno::EBADF);
    assert_eq!(err(fs.lseek(a, 0, Whence::Set)), Errno::EBADF);
    assert_eq!(err(fs.ftruncate(a, 0)), Errno::EBADF);
    assert_eq!(err(fs.fsync(a)), Errno::EBADF);
    assert_eq!(err(fs.fdatasync(a)), Errno::EBADF);
    assert_eq!(err(fs.fallocate(a, FallocateMode::Default, 0, 1)), Errno::EBADF);
    assert_eq!(err(fs.fstat(a)), Errno::EBADF);
    assert_eq!(err(fs.readdir(a, 0, 1)), Errno::EBADF);
    assert_eq!(err(fs.read(Fd(0), &mut buf)), Errno::EBADF);
}

#[test]
fn append() {
    let (fs, _) = setup();
    put(&fs, "/a", b"abc");
    let fd = fs.open(p("/a"), OpenFlags::RDWR.append(), 0).unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 0);
    fs.write(fd, b"de").unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 5);
    fs.lseek(fd, 1, Whence::Set).unwrap();
    fs.write(fd, b"f").unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 6);
    // pwrite with O_APPEND appends too, position unchanged.
    fs.lseek(fd, 2, Whence::Set).unwrap();
    fs.pwrite(fd, b"g", 0).unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 2);
    assert_eq!(get(&fs, "/a"), b"abcdefg");
    // Zero-length append does not move the position.
    fs.write(fd, b"").unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 2);
}

#[test]
fn efbig() {
    let (fs, _) = setup();
    let fd = fs.open(p("/a"), rw_create(), 0o644).unwrap();
    assert_eq!(err(fs.pwrite(fd, b"xy", FILE_SIZE_MAX - 1)), Errno::EFBIG);
    assert_eq!(fs.pwrite(fd, b"x", FILE_SIZE_MAX - 1).unwrap(), 1);
    assert_eq!(fs.fstat(fd).unwrap().size, FILE_SIZE_MAX);
    fs.ftruncate(fd, FILE_SIZE_MAX).unwrap();
    assert_eq!(err(fs.ftruncate(fd, FILE_SIZE_MAX + 1)), Errno::EFBIG);
    assert_eq!(err(fs.truncate(p("/a"), FILE_SIZE_MAX + 1)), Errno::EFBIG);
    assert_eq!(err(fs.ftruncate(fd, u64::MAX)), Errno::EINVAL);
    assert_eq!(err(fs.truncate(p("/missing"), u64::MAX)), Errno::EINVAL);
    assert_eq!(err(fs.fallocate(fd, FallocateMode::KeepSize, FILE_SIZE_MAX, 1)), Errno::EFBIG);
    assert_eq!(err(fs.lseek(fd, FILE_SIZE_MAX as i64 + 1, Whence::Set)), Errno::EINVAL);
    assert_eq!(fs.lseek(fd, FILE_SIZE_MAX as i64, Whence::Set).unwrap(), FILE_SIZE_MAX);
    // write at a position at the limit.
    assert_eq!(err(fs.write(fd, b"x")), Errno::EFBIG);
}

#[test]
fn lseek_whences() {
    let (fs, _) = setup();
    let fd = fs.open(p("/a"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, b"0123456789", 0).unwrap();
    assert_eq!(fs.lseek(fd, 3, Whence::Set).unwrap(), 3);
    assert_eq!(fs.lseek(fd, 2, Whence::Cur).unwrap(), 5);
    assert_eq!(fs.lseek(fd, -1, Whence::Cur).unwrap(), 4);
    assert_eq!(fs.lseek(fd, -2, Whence::End).unwrap(), 8);
    assert_eq!(fs.lseek(fd, 100, Whence::End).unwrap(), 110); // past EOF is fine
    assert_eq!(err(fs.lseek(fd, -1, Whence::Set)), Errno::EINVAL);
    assert_eq!(err(fs.lseek(fd, -11, Whence::End)), Errno::EINVAL);
    assert_eq!(err(fs.lseek(fd, -200, Whence::Cur)), Errno::EINVAL);
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 110); // failed seeks keep it
                                                            // Writing past EOF from the position leaves a hole.
    fs.write(fd, b"Z").unwrap();
    assert_eq!(fs.fstat(fd).unwrap().size, 111);
}

#[test]
fn seek_data_and_hole() {
    let (fs, _) = setup();
    let fd = fs.open(p("/s"), rw_create(), 0o644).unwrap();
    // Pages: 0 hole, 1 hole, 2 data, 3 hole, 4 hole; size 5 pages.
    fs.pwrite(fd, b"x", 8192).unwrap();
    fs.ftruncate(fd, 5 * 4096).unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Data).unwrap(), 8192);
    assert_eq!(fs.lseek(fd, 8200, Whence::Data).unwrap(), 8200);
    assert_eq!(err(fs.lseek(fd, 12288, Whence::Data)), Errno::ENXIO);
    assert_eq!(fs.lseek(fd, 0, Whence::Hole).unwrap(), 0);
    assert_eq!(fs.lseek(fd, 8193, Whence::Hole).unwrap(), 12288);
    assert_eq!(fs.lseek(fd, 100, Whence::Hole).unwrap(), 100);
    assert_eq!(err(fs.lseek(fd, 5 * 4096, Whence::Hole)), Errno::ENXIO);
    assert_eq!(err(fs.lseek(fd, 5 * 4096, Whence::Data)), Errno::ENXIO);
    assert_eq!(err(fs.lseek(fd, -1, Whence::Hole)), Errno::ENXIO);
    assert_eq!(err(fs.lseek(fd, -1, Whence::Data)), Errno::ENXIO);
    // The position moved to the answer.
    fs.lseek(fd, 0, Whence::Data).unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 8192);
    // Data up to EOF: the hole is the size.
    let fd2 = fs.open(p("/full"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd2, &[1u8; 5000], 0).unwrap();
    assert_eq!(fs.lseek(fd2, 10, Whence::Hole).unwrap(), 5000);
    assert_eq!(fs.lseek(fd2, 4999, Whence::Data).unwrap(), 4999);
    // Pages allocated beyond EOF (KeepSize) are not data before EOF.
    let fd3 = fs.open(p("/k"), rw_create(), 0o644).unwrap();
    fs.ftruncate(fd3, 4096).unwrap();
    fs.fallocate(fd3, FallocateMode::KeepSize, 8192, 4096).unwrap();
    assert_eq!(err(fs.lseek(fd3, 0, Whence::Data)), Errno::ENXIO);
    assert_eq!(fs.lseek(fd3, 0, Whence::Hole).unwrap(), 0);
    // An allocated page whose range passes EOF: hole at EOF.
    fs.fallocate(fd3, FallocateMode::KeepSize, 0, 4096).unwrap();
    fs.ftruncate(fd3, 100).unwrap(); // frees page 2, keeps page 0
    assert_eq!(fs.lseek(fd3, 0, Whence::Hole).unwrap(), 100);
    assert_eq!(fs.lseek(fd3, 50, Whence::Data).unwrap(), 50);
    // Empty file: everything ENXIO.
    let fd4 = fs.open(p("/e"), rw_create(), 0o644).unwrap();
    assert_eq!(err(fs.lseek(fd4, 0, Whence::Data)), Errno::ENXIO);
    assert_eq!(err(fs.lseek(fd4, 0, Whence::Hole)), Errno::ENXIO);
}

#[test]
fn truncate_rules() {
    let (fs, _) = setup();
    let fd = fs.open(p("/t"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &[7u8; 3 * 4096], 0).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 24);
    // Shrink to the middle of page 1: page 2 freed, tail of page 1 zeroed.
    fs.ftruncate(fd, 4096 + 10).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 16);
    // Grow again: the old bytes do not come back, and no page is allocated.
    fs.ftruncate(fd, 10 * 4096).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (10 * 4096, 16));
    let c = read_fd(&fs, fd);
    assert!(c[..4106].iter().all(|&b| b == 7));
    assert!(c[4106..].iter().all(|&b| b == 0));
    // Truncate to a page boundary.
    fs.ftruncate(fd, 4096).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 8);
    fs.truncate(p("/t"), 0).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().blocks, 0);
    fs.mkdir(p("/d"), 0o755).unwrap();
    assert_eq!(err(fs.truncate(p("/d"), 0)), Errno::EISDIR);
    assert_eq!(err(fs.truncate(p("/missing"), 0)), Errno::ENOENT);
    assert_eq!(err(fs.truncate(p("/t/"), 0)), Errno::ENOTDIR);
}

#[test]
fn fallocate_rules() {
    let (fs, _) = setup();
    let fd = fs.open(p("/f"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, b"keep", 4096).unwrap();
    fs.fallocate(fd, FallocateMode::Default, 100, 4096 * 2).unwrap();
    let st = fs.fstat(fd).unwrap();
    // Pages 0, 1, 2 overlap [100, 8292).
    assert_eq!((st.size, st.blocks), (100 + 8192, 24));
    let c = read_fd(&fs, fd);
    assert_eq!(&c[4096..4100], b"keep");
    assert_eq!(c.iter().filter(|&&b| b != 0).count(), 4);
    // KeepSize leaves the size.
    fs.fallocate(fd, FallocateMode::KeepSize, 40_000, 10).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (8292, 32));
    // Default never shrinks.
    fs.fallocate(fd, FallocateMode::Default, 0, 1).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().size, 8292);
    assert_eq!(err(fs.fallocate(fd, FallocateMode::Default, 0, 0)), Errno::EINVAL);
}

/// ZERO_RANGE as ext4 does it: the range reads as zeros, the bytes around
/// it stay, every page it touches is allocated, the size grows to its end
/// unless KEEP_SIZE.
#[test]
fn zero_range_rules() {
    let (fs, _) = setup();
    let fd = fs.open(p("/z"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &[5u8; 8192], 0).unwrap();
    fs.fallocate(fd, FallocateMode::ZeroRange, 100, 200).unwrap();
    let c = read_fd(&fs, fd);
    assert!(c[..100].iter().all(|&b| b == 5) && c[100..300].iter().all(|&b| b == 0));
    assert!(c[300..].iter().all(|&b| b == 5));
    assert_eq!(fs.fstat(fd).unwrap().blocks, 16);
    // Past the end: pages 2 and 3 allocated, the size grows to 14000.
    fs.fallocate(fd, FallocateMode::ZeroRange, 9000, 5000).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (14_000, 32));
    assert!(read_fd(&fs, fd)[8192..].iter().all(|&b| b == 0));
    // KEEP_SIZE: pages past the end allocated, the size stays.
    fs.fallocate(fd, FallocateMode::ZeroRangeKeepSize, 20_000, 10).unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (14_000, 40));
    // Over the last bytes of the file with KEEP_SIZE: zeros, no growth.
    fs.fallocate(fd, FallocateMode::ZeroRangeKeepSize, 4000, 20_000).unwrap();
    let c = read_fd(&fs, fd);
    assert_eq!(c.len(), 14_000);
    assert!(c[..100].iter().all(|&b| b == 5) && c[300..4000].iter().all(|&b| b == 5));
    assert!(c[4000..].iter().all(|&b| b == 0));
    assert_eq!(err(fs.fallocate(fd, FallocateMode::ZeroRange, 0, 0)), Errno::EINVAL);
}

#[test]
fn unlink_while_open() {
    let (fs, _) = setup();
    put(&fs, "/u", b"still here");
    let total = fs.statfs().unwrap();
    let fd = fs.open(p("/u"), OpenFlags::RDWR, 0).unwrap();
    let fd2 = fs.open(p("/u"), OpenFlags::RDONLY, 0).unwrap();
    fs.unlink(p("/u")).unwrap();
    assert_eq!(err(fs.stat(p("/u"))), Errno::ENOENT);
    let st = fs.fstat(fd).unwrap();
    assert_eq!(st.nlink, 0);
    assert_eq!(read_fd(&fs, fd), b"still here");
    fs.pwrite(fd, b"STILL", 0).unwrap();
    fs.pwrite(fd, b"!", 5000).unwrap();
    assert_eq!(&read_fd(&fs, fd2)[..10], b"STILL here");
    // The inode and its pages still count.
    let s = fs.statfs().unwrap();
    assert_eq!(s.files_free, total.files_free);
    assert_eq!(s.blocks_free, total.blocks_free - 1);
    // A new file of the same name is a different inode.
    put(&fs, "/u", b"new");
    assert_ne!(fs.stat(p("/u")).unwrap().ino, st.ino);
    fs.close(fd).unwrap();
    assert_eq!(read_fd(&fs, fd2).len(), 5001);
    fs.close(fd2).unwrap();
    // Gone at the last close.
    let s = fs.statfs().unwrap();
    assert_eq!(s.files_free, total.files_free);
    assert_eq!(s.blocks_free, total.blocks_free);
    assert!(fs.snapshot().open_fds().is_empty());
}

#[test]
fn close_all_drops_orphans() {
    let (fs, _) = setup();
    put(&fs, "/a", b"x");
    let before = fs.statfs().unwrap();
    let fd = fs.open(p("/a"), OpenFlags::RDONLY, 0).unwrap();
    fs.unlink(p("/a")).unwrap();
    assert_eq!(fs.statfs().unwrap().files_free, before.files_free);
    fs.close_all();
    assert_eq!(fs.statfs().unwrap().files_free, before.files_free + 1);
    assert_eq!(err(fs.fstat(fd)), Errno::EBADF);
}
