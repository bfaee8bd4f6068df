//! Proves FIFOs, sockets and device nodes: mknod records each type with its
//! permission bits and (for device nodes only) its device number; stat and
//! readdir report them; they take part in link, rename and unlink like any
//! inode; the path API refuses to open them (ENXIO) and to truncate them
//! (EINVAL); mknod refuses directories (EPERM) and unknown types (EINVAL)
//! before looking at the path; everything survives clean and crash
//! remounts with fsck clean; and the pool carries the feature bit that
//! makes older readers refuse it instead of calling these inodes corrupt
//! (with the punch-hole bit: mkfs and every read-write mount set both).

use ferrite::format::{
    Superblock, FEATURES_KNOWN, FEATURE_MODES_INLINE, FEATURE_PUNCH_HOLE, FEATURE_SLOT_ATTR, FEATURE_SPECIAL_FILES,
    SUPERBLOCK_COPIES, SUPERBLOCK_SIZE,
};
use ferrite::{Errno, FileType, FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::remount;

fn makedev(major: u64, minor: u64) -> u64 {
    (major & 0xfff) << 8 | (minor & 0xff) | (minor & !0xff) << 12
}

fn names(fs: &Session, dir: &[u8]) -> Vec<(String, FileType)> {
    let fd = fs.open(dir, OpenFlags::RDONLY.directory(), 0).unwrap();
    let list = fs.readdir(fd, 0, 100).unwrap();
    fs.close(fd).unwrap();
    let mut v: Vec<_> = list.into_iter().map(|e| (String::from_utf8(e.name).unwrap(), e.kind)).collect();
    v.sort();
    v
}

#[test]
fn special_files_are_recorded_and_survive_remounts() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    fs.mkdir(b"/d", 0o755).unwrap();
    let null = makedev(1, 3);
    let big = makedev(259, 70_000);
    fs.mknod(b"/d/fifo", libc::S_IFIFO | 0o640, 77).unwrap();
    fs.mknod(b"/d/sock", libc::S_IFSOCK | 0o600, 0).unwrap();
    fs.mknod(b"/d/null", libc::S_IFCHR | 0o666, null).unwrap();
    fs.mknod(b"/d/disk", libc::S_IFBLK | 0o660, big).unwrap();
    fs.mknod(b"/d/plain", 0o644, 5).unwrap();
    fs.mknod(b"/d/reg", libc::S_IFREG | 0o600, 0).unwrap();

    // Refusals, type first (as Linux's may_mknod), then the path.
    assert_eq!(fs.mknod(b"/nodir/x", libc::S_IFDIR | 0o755, 0), Err(Errno::EPERM));
    assert_eq!(fs.mknod(b"/nodir/x", libc::S_IFLNK | 0o777, 0), Err(Errno::EINVAL));
    assert_eq!(fs.mknod(b"/nodir/x", 0o170000 | 0o644, 0), Err(Errno::EINVAL));
    assert_eq!(fs.mknod(b"/nodir/x", libc::S_IFIFO | 0o644, 0), Err(Errno::ENOENT));
    assert_eq!(fs.mknod(b"/d/fifo", libc::S_IFIFO | 0o644, 0), Err(Errno::EEXIST));
    assert_eq!(fs.mknod(b"/d/new/", libc::S_IFIFO | 0o644, 0), Err(Errno::ENOENT));

    let check = |fs: &Session| {
        let st = fs.lstat(b"/d/fifo").unwrap();
        assert_eq!((st.kind, st.perm, st.rdev, st.size, st.blocks), (FileType::Fifo, 0o640, 0, 0, 0));
        assert_eq!(st.mode(), libc::S_IFIFO | 0o640);
        let st = fs.lstat(b"/d/sock").unwrap();
        assert_eq!((st.kind, st.perm, st.rdev), (FileType::Socket, 0o600, 0));
        let st = fs.lstat(b"/d/null").unwrap();
        assert_eq!((st.kind, st.perm, st.rdev), (FileType::CharDevice, 0o666, null));
        let st = fs.stat(b"/d/disk").unwrap();
        assert_eq!((st.kind, st.perm, st.rdev), (FileType::BlockDevice, 0o660, big));
        let st = fs.stat(b"/d/plain").unwrap();
        assert_eq!((st.kind, st.rdev), (FileType::Regular, 0));
        assert_eq!(fs.stat(b"/d/reg").unwrap().kind, FileType::Regular);
        assert_eq!(
            names(fs, b"/d"),
            vec![
                ("disk".into(), FileType::BlockDevice),
                ("fifo".into(), FileType::Fifo),
                ("null".into(), FileType::CharDevice),
                ("plain".into(), FileType::Regular),
                ("reg".into(), FileType::Regular),
                ("sock".into(), FileType::Socket),
            ]
        );
    };
    check(&fs);

    // No pipe or driver behind the path API; no size to change.
    assert_eq!(fs.open(b"/d/fifo", OpenFlags::RDONLY, 0), Err(Errno::ENXIO));
    assert_eq!(fs.open(b"/d/null", OpenFlags::RDWR, 0), Err(Errno::ENXIO));
    assert_eq!(fs.open(b"/d/sock", OpenFlags::WRONLY.create(), 0o644), Err(Errno::ENXIO));
    assert_eq!(fs.open(b"/d/sock", OpenFlags::WRONLY.create().excl(), 0o644), Err(Errno::EEXIST));
    assert_eq!(fs.open(b"/d/fifo/", OpenFlags::RDONLY, 0), Err(Errno::ENOTDIR));
    assert_eq!(fs.truncate(b"/d/fifo", 0), Err(Errno::EINVAL));
    assert_eq!(fs.readlink(b"/d/null"), Err(Errno::EINVAL));

    for crash in [false, true] {
        let fs2 =
            remount(Session::mount(Pmem::from_image(&fs.pmem().image()), &MountOptions::default()).unwrap(), crash);
        check(&fs2);
        fs2.unmount().unwrap();
    }

    // Metadata changes, links, renames and unlinks, then remount.
    fs.chmod(b"/d/fifo", 0o600).unwrap();
    fs.chown(b"/d/null", Some(5), Some(6)).unwrap();
    fs.link(b"/d/null", b"/null2").unwrap();
    fs.rename(b"/d/sock", b"/sock", RenameFlags::NoReplace).unwrap();
    fs.rename(b"/d/disk", b"/d/fifo", RenameFlags::Exchange).unwrap();
    fs.unlink(b"/d/plain").unwrap();
    let fs = remount(fs, true);
    assert_eq!(fs.lstat(b"/d/disk").unwrap().perm, 0o600);
    assert_eq!(fs.lstat(b"/d/disk").unwrap().kind, FileType::Fifo);
    assert_eq!(fs.lstat(b"/d/fifo").unwrap().rdev, big);
    let st = fs.lstat(b"/null2").unwrap();
    assert_eq!((st.kind, st.nlink, st.uid, st.gid, st.rdev), (FileType::CharDevice, 2, 5, 6, null));
    assert_eq!(fs.lstat(b"/sock").unwrap().kind, FileType::Socket);
    for p in [&b"/null2"[..], b"/d/null", b"/sock", b"/d/disk", b"/d/fifo", b"/d/reg"] {
        fs.unlink(p).unwrap();
    }
    fs.rmdir(b"/d").unwrap();
    let fs = remount(fs, false);
    assert_eq!(names(&fs, b"/"), vec![]);
}

fn superblock(image: &[u8]) -> Superblock {
    let at = SUPERBLOCK_COPIES[0].offset().0 as usize;
    Superblock::decode(&image[at..at + SUPERBLOCK_SIZE], image.len() as u64).unwrap()
}

#[test]
fn pools_carry_the_feature_bits() {
    assert_eq!(FEATURES_KNOWN, FEATURE_SPECIAL_FILES | FEATURE_PUNCH_HOLE | FEATURE_MODES_INLINE | FEATURE_SLOT_ATTR);
    let fs = Session::format(Pmem::heap(1024 * 4096), &FormatOptions::default()).unwrap();
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let image = pmem.image();
    assert_eq!(superblock(&image).features, FEATURES_KNOWN);

    // A pool written before the bit existed (features 0) gets it from its
    // first read-write mount.
    let mut old = image.clone();
    let mut sb = superblock(&old);
    sb.features = 0;
    for copy in SUPERBLOCK_COPIES {
        let at = copy.offset().0 as usize;
        old[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    }
    assert_eq!(superblock(&old).features, 0);
    let fs = Session::mount(Pmem::from_image(&old), &MountOptions::default()).unwrap();
    fs.mknod(b"/fifo", libc::S_IFIFO | 0o644, 0).unwrap();
    let image = fs.pmem().image();
    assert_eq!(superblock(&image).features, FEATURES_KNOWN);

    // A bit this code does not know makes the pool unmountable, unchanged.
    let mut newer = image.clone();
    let mut sb = superblock(&newer);
    sb.features |= 1 << 7;
    for copy in SUPERBLOCK_COPIES {
        let at = copy.offset().0 as usize;
        newer[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    }
    let err = Session::mount(Pmem::from_image(&newer), &MountOptions::default()).err().expect("refused");
    assert!(format!("{err}").contains("feature"), "{err}");
}
