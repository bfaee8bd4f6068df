//! Space accounting in the model: st_blocks per kind, statfs figures
//! (pages used by file pages and symlinks, live inodes including the root
//! and open orphans), ENOSPC for writes, fallocate, creations and symlinks
//! with nothing changed, and space coming back after unlink/truncate.

mod common;
use common::*;
use ferrite::{Errno, FallocateMode, OpenFlags, PathFs};

#[test]
fn statfs_figures() {
    let (fs, _) = setup_sized(100, 50);
    let s = fs.statfs().unwrap();
    assert_eq!(
        (s.block_size, s.blocks, s.blocks_free, s.files, s.files_free, s.name_max),
        (4096, 100, 100, 50, 49, 255)
    );
    fs.mkdir(p("/d"), 0o755).unwrap(); // directory: an inode, no page
    put(&fs, "/d/f", &[1u8; 4097]); // 2 pages
    fs.symlink(p("x"), p("/s")).unwrap(); // 1 page
    let s = fs.statfs().unwrap();
    assert_eq!((s.blocks_free, s.files_free), (97, 46));
    // A hole costs nothing; a hard link costs nothing.
    let fd = fs.open(p("/d/f"), OpenFlags::RDWR, 0).unwrap();
    fs.ftruncate(fd, 1 << 30).unwrap();
    fs.link(p("/d/f"), p("/g")).unwrap();
    let s = fs.statfs().unwrap();
    assert_eq!((s.blocks_free, s.files_free), (97, 46));
    assert_eq!(fs.fstat(fd).unwrap().blocks, 16);
    // Writing into the hole allocates exactly the overlapped pages.
    fs.pwrite(fd, &[2u8; 2], 3 * 4096 - 1).unwrap(); // pages 2 and 3
    assert_eq!(fs.fstat(fd).unwrap().blocks, 32);
    assert_eq!(fs.statfs().unwrap().blocks_free, 95);
    // Rewriting allocated pages costs nothing.
    fs.pwrite(fd, &[3u8; 8192], 0).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 95);
}

#[test]
fn enospc_write_then_free_then_write() {
    let (fs, _) = setup_sized(4, 10);
    let fd = fs.open(p("/a"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &[1u8; 3 * 4096], 0).unwrap();
    fs.lseek(fd, 3 * 4096 - 1, ferrite::Whence::Set).unwrap();
    let before = fs.snapshot();
    // Two more pages needed, one free: nothing written, not even partly.
    assert_eq!(err(fs.pwrite(fd, &[9u8; 4097], 3 * 4096)), Errno::ENOSPC);
    assert_eq!(err(fs.write(fd, &[9u8; 4098])), Errno::ENOSPC);
    assert_eq!(err(fs.fallocate(fd, FallocateMode::Default, 0, 5 * 4096)), Errno::ENOSPC);
    assert_eq!(fs.snapshot(), before);
    // Exactly one page fits.
    fs.pwrite(fd, &[9u8; 10], 3 * 4096).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 0);
    assert_eq!(err(fs.symlink(p("t"), p("/s"))), Errno::ENOSPC);
    // Writing inside allocated pages still works when full.
    fs.pwrite(fd, b"ok", 100).unwrap();
    // Free by truncate, then write.
    fs.ftruncate(fd, 4096).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 3);
    fs.pwrite(fd, &[5u8; 3 * 4096], 4096).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 0);
    // Free by unlink (only once the last descriptor closes).
    fs.unlink(p("/a")).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 0);
    fs.close(fd).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 4);
    let fd = fs.open(p("/b"), rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &[1u8; 4 * 4096], 0).unwrap();
}

#[test]
fn enospc_inodes() {
    let (fs, _) = setup_sized(100, 3); // root + 2
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/f", b"");
    assert_eq!(fs.statfs().unwrap().files_free, 0);
    let before = fs.snapshot();
    assert_eq!(err(fs.mkdir(p("/e"), 0o755)), Errno::ENOSPC);
    assert_eq!(err(fs.open(p("/g"), OpenFlags::WRONLY.create(), 0o644)), Errno::ENOSPC);
    assert_eq!(err(fs.symlink(p("t"), p("/s"))), Errno::ENOSPC);
    // Existence errors come first; links need no inode.
    assert_eq!(err(fs.mkdir(p("/d"), 0o755)), Errno::EEXIST);
    fs.open(p("/f"), OpenFlags::WRONLY.create(), 0o644).unwrap();
    assert_eq!(fs.snapshot().tree(), before.tree());
    fs.link(p("/f"), p("/f2")).unwrap();
    fs.rmdir(p("/d")).unwrap();
    fs.mkdir(p("/e"), 0o755).unwrap();
}
