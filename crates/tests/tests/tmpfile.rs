//! Proves open(2)'s O_TMPFILE on the engine, step by step beside the
//! reference model: the file has no name and a link count of 0, reads and
//! writes as any file, and leaves the directory unchanged; without O_EXCL
//! `linkat(fd, "", ..., AT_EMPTY_PATH)` gives it a name once (a second
//! name after that one is gone is ENOENT, as Linux's I_LINKABLE is cleared
//! by the first), with O_EXCL never; a file never named is freed with its
//! pages at its last close, and by recovery after a crash (fsck clean, no
//! space leaked), while a named one survives both remounts with its data;
//! and the refusals come in Linux's order (EINVAL for O_CREAT or a
//! read-only access mode, ENOENT, ENOTDIR, EACCES, ENOENT in a removed
//! directory). The model-based tests draw O_TMPFILE opens and AT_EMPTY_PATH
//! links at random; the crash harness's named workloads (`tmpfile_*`)
//! crash inside them.

use ferrite::{Credentials, Errno, FileType, FormatOptions, MountOptions, OpenFlags, PathFs, Session, AT_FDCWD};
use ferrite_model::ModelFs;
use ferrite_pmem::Pmem;
use ferrite_tests::{get, manual_clock, remount_checked};

fn pool() -> Session {
    Session::format(Pmem::heap(1024 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap()
}

fn model() -> ModelFs {
    ModelFs::new(manual_clock(1_000), 1 << 20, 1 << 20)
}

/// The same call on the engine and the model, which must agree.
macro_rules! both {
    ($e:expr, $m:expr, |$fs:ident| $call:expr) => {{
        let a = {
            let $fs: &dyn PathFs = &$e;
            $call
        };
        let b = {
            let $fs: &dyn PathFs = &$m;
            $call
        };
        assert_eq!(a, b, "engine and model differ on {}", stringify!($call));
        a
    }};
}

#[test]
fn a_tmpfile_is_named_once_or_freed_at_its_last_close() {
    let (e, m) = (pool(), model());
    let tmp = OpenFlags::RDWR.tmpfile();
    both!(e, m, |fs| fs.mkdir(b"/d", 0o755)).unwrap();
    let inodes_before = e.free_inodes();

    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/d", tmp, 0o640)).unwrap();
    let st = e.fstat(fd).unwrap();
    assert_eq!((st.kind, st.nlink, st.perm, st.size), (FileType::Regular, 0, 0o640, 0));
    assert_eq!(e.free_inodes(), inodes_before - 1);
    // F_GETFL shows O_TMPFILE with its O_DIRECTORY, as Linux does, and a
    // reopen of the same file asks for neither.
    let status = both!(e, m, |fs| fs.getfl(fd)).unwrap();
    assert!(status.tmpfile && status.directory && status.read && status.write, "{status:?}");
    let again = status.reopen();
    assert!(!again.tmpfile && !again.directory && again.read && again.write, "{again:?}");
    // Nothing names it: the directory has no entry.
    assert_eq!(both!(e, m, |fs| entries(fs, b"/d")), Ok(0));
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 253) as u8).collect();
    assert_eq!(both!(e, m, |fs| fs.pwrite(fd, &data, 0)), Ok(data.len()));
    assert_eq!(both!(e, m, |fs| fs.fstat(fd).map(|s| (s.size, s.nlink))), Ok((data.len() as u64, 0)));

    // Its first name.
    both!(e, m, |fs| fs.linkat(fd, b"", AT_FDCWD, b"/d/kept", libc::AT_EMPTY_PATH)).unwrap();
    assert_eq!(both!(e, m, |fs| fs.fstat(fd).map(|s| s.nlink)), Ok(1));
    assert_eq!(both!(e, m, |fs| get(fs, b"/d/kept")), Ok(data.clone()));
    // Once named and unlinked again, it may not be named again.
    both!(e, m, |fs| fs.unlink(b"/d/kept")).unwrap();
    assert_eq!(both!(e, m, |fs| fs.linkat(fd, b"", AT_FDCWD, b"/d/again", libc::AT_EMPTY_PATH)), Err(Errno::ENOENT));
    let pages_open = e.free_pages();
    both!(e, m, |fs| fs.close(fd)).unwrap();
    // Its four data pages and its log page come back (the directory keeps
    // the log page its entries took).
    assert_eq!((e.free_inodes(), e.free_pages()), (inodes_before, pages_open + 5), "freed at the last close");

    // O_EXCL: never linkable; freed with its pages at close.
    let pages_before = e.free_pages();
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/d", tmp.excl(), 0o600)).unwrap();
    both!(e, m, |fs| fs.pwrite(fd, &data, 0)).unwrap();
    assert_eq!(both!(e, m, |fs| fs.linkat(fd, b"", AT_FDCWD, b"/d/x", libc::AT_EMPTY_PATH)), Err(Errno::ENOENT));
    both!(e, m, |fs| fs.close(fd)).unwrap();
    assert_eq!((e.free_inodes(), e.free_pages()), (inodes_before, pages_before));

    // A named tmpfile is an ordinary file: a second name, then dup'd
    // descriptors keep it open after both names are gone.
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/d/", tmp, 0o644)).unwrap();
    both!(e, m, |fs| fs.pwrite(fd, b"named", 0)).unwrap();
    both!(e, m, |fs| fs.linkat(fd, b"", AT_FDCWD, b"/d/a", libc::AT_EMPTY_PATH)).unwrap();
    both!(e, m, |fs| fs.link(b"/d/a", b"/d/b")).unwrap();
    assert_eq!(both!(e, m, |fs| fs.stat(b"/d/b").map(|s| s.nlink)), Ok(2));
    both!(e, m, |fs| fs.close(fd)).unwrap();
    assert_eq!(both!(e, m, |fs| get(fs, b"/d/b")), Ok(b"named".to_vec()));
    // fsck finds every page and inode accounted for.
    let (e, _) = remount_checked(e, false);
    assert_eq!(get(&e, b"/d/b"), Ok(b"named".to_vec()));
    e.unmount().unwrap();
}

#[test]
fn tmpfile_refusals_come_in_linux_order() {
    let (e, m) = (pool(), model());
    both!(e, m, |fs| fs.mkdir(b"/d", 0o755)).unwrap();
    both!(e, m, |fs| fs.mkdir(b"/locked", 0o555)).unwrap();
    both!(e, m, |fs| fs.mkdir(b"/gone", 0o755)).unwrap();
    both!(e, m, |fs| put(fs, b"/d/file", b"x")).unwrap();
    both!(e, m, |fs| fs.symlink(b"/d", b"/link")).unwrap();
    let tmp = OpenFlags::RDWR.tmpfile();
    let cases: [(&[u8], OpenFlags, Errno); 6] = [
        (b"/d", OpenFlags::RDONLY.tmpfile(), Errno::EINVAL),
        (b"/d", tmp.create(), Errno::EINVAL),
        (b"/missing", tmp, Errno::ENOENT),
        (b"/d/file", tmp, Errno::ENOTDIR),
        (b"/link", tmp.nofollow(), Errno::ENOTDIR),
        (b"/d/file/", tmp, Errno::ENOTDIR),
    ];
    for (path, flags, errno) in cases {
        let got = both!(e, m, |fs| fs.openat(AT_FDCWD, path, flags, 0o644).map(|_| ()));
        assert_eq!(got, Err(errno), "O_TMPFILE {:?} {flags:?}", String::from_utf8_lossy(path));
    }
    // Through a symlink that is followed, and O_WRONLY, it works.
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/link", OpenFlags::WRONLY.tmpfile(), 0o644)).unwrap();
    both!(e, m, |fs| fs.close(fd)).unwrap();
    // O_PATH drops O_TMPFILE's own bit, as open(2) does: a path
    // descriptor of the directory.
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/d", tmp.o_path(), 0)).unwrap();
    assert_eq!(both!(e, m, |fs| fs.fstat(fd).map(|s| s.kind)), Ok(FileType::Directory));
    both!(e, m, |fs| fs.close(fd)).unwrap();

    // A directory the caller may not write to.
    let user = Credentials { uid: 1000, gid: 1000, groups: vec![], umask: 0o022 };
    e.set_credentials(user.clone());
    m.set_credentials(user);
    assert_eq!(both!(e, m, |fs| fs.openat(AT_FDCWD, b"/locked", tmp, 0o644).map(|_| ())), Err(Errno::EACCES));
    // The umask applies to the new file's mode, as to a named one's; and
    // only root may link by AT_EMPTY_PATH (CAP_DAC_READ_SEARCH).
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/tmpdir-missing", tmp, 0o666).map(|_| ()));
    assert_eq!(fd, Err(Errno::ENOENT));
    e.set_credentials(Credentials::root());
    m.set_credentials(Credentials::root());
    both!(e, m, |fs| fs.chmod(b"/d", 0o777)).unwrap();
    let user = Credentials { uid: 1000, gid: 1000, groups: vec![], umask: 0o022 };
    e.set_credentials(user.clone());
    m.set_credentials(user);
    let fd = both!(e, m, |fs| fs.openat(AT_FDCWD, b"/d", tmp, 0o666)).unwrap();
    assert_eq!(both!(e, m, |fs| fs.fstat(fd).map(|s| (s.perm, s.uid))), Ok((0o644, 1000)));
    assert_eq!(both!(e, m, |fs| fs.linkat(fd, b"", AT_FDCWD, b"/d/u", libc::AT_EMPTY_PATH)), Err(Errno::ENOENT));
    both!(e, m, |fs| fs.close(fd)).unwrap();
    e.set_credentials(Credentials::root());
    m.set_credentials(Credentials::root());

    // A removed directory, still open: no new file in it.
    let dfd = both!(e, m, |fs| fs.open(b"/gone", OpenFlags::RDONLY.directory(), 0)).unwrap();
    both!(e, m, |fs| fs.rmdir(b"/gone")).unwrap();
    assert_eq!(both!(e, m, |fs| fs.openat(dfd, b".", tmp, 0o644).map(|_| ())), Err(Errno::ENOENT));
    both!(e, m, |fs| fs.close(dfd)).unwrap();
    e.unmount().unwrap();
}

/// A tmpfile never named is gone after a crash, with its pages and its
/// inode (recovery frees it as any inode without a name); one that was
/// named before the crash is there with its data, after a crash and after
/// a clean unmount. fsck finds every image clean.
#[test]
fn a_crash_frees_a_nameless_tmpfile_and_keeps_a_named_one() {
    let fs = pool();
    fs.mkdir(b"/d", 0o755).unwrap();
    let data = vec![0xa5u8; 5 * 4096];
    let named = fs.openat(AT_FDCWD, b"/d", OpenFlags::RDWR.tmpfile(), 0o644).unwrap();
    fs.pwrite(named, &data[..4096 + 7], 0).unwrap();
    fs.linkat(named, b"", AT_FDCWD, b"/d/named", libc::AT_EMPTY_PATH).unwrap();
    let (inodes_before, pages_before) = (fs.free_inodes(), fs.free_pages());
    let nameless = fs.openat(AT_FDCWD, b"/d", OpenFlags::RDWR.tmpfile(), 0o644).unwrap();
    fs.pwrite(nameless, &data, 0).unwrap();
    assert!(fs.free_inodes() == inodes_before - 1 && fs.free_pages() < pages_before - 5);

    let (fs, report) = remount_checked(fs, true);
    assert!(report.is_clean());
    assert_eq!(fs.engine().mount_report().orphans_freed, 1);
    assert_eq!(get(&fs, b"/d/named").unwrap(), &data[..4096 + 7]);
    assert_eq!(entries(&fs, b"/d"), Ok(1));
    // The nameless file's inode and pages are free again.
    assert_eq!((fs.free_inodes(), fs.free_pages()), (inodes_before, pages_before));

    // A clean unmount with a nameless tmpfile open frees it too.
    let fd = fs.openat(AT_FDCWD, b"/d", OpenFlags::RDWR.tmpfile(), 0o644).unwrap();
    fs.pwrite(fd, &data, 0).unwrap();
    let (fs, report) = remount_checked(fs, false);
    assert!(report.is_clean());
    assert_eq!(fs.engine().mount_report().orphans_freed, 0);
    assert_eq!(get(&fs, b"/d/named").unwrap(), &data[..4096 + 7]);
    assert_eq!((fs.free_inodes(), fs.free_pages()), (inodes_before, pages_before));
    fs.unmount().unwrap();
}

/// The same with the other modes: an fsync-atomic pool commits the
/// file's pending data with the link (a namespace operation is a commit
/// point of the file), and a buffered pool keeps the order of the link
/// and the writes before it.
#[test]
fn the_link_commits_the_tmpfile_in_every_mode() {
    for opts in [
        MountOptions { default_mode: ferrite::FileMode::FsyncAtomic, ..Default::default() },
        MountOptions { buffered: Some(Default::default()), ..Default::default() },
    ] {
        let fs = pool();
        let image = fs.pmem().image();
        fs.unmount().unwrap();
        let fs = Session::mount(Pmem::from_image(&image), &opts).unwrap();
        fs.mkdir(b"/d", 0o755).unwrap();
        let fd = fs.openat(AT_FDCWD, b"/d", OpenFlags::RDWR.tmpfile(), 0o644).unwrap();
        fs.pwrite(fd, b"before the link", 0).unwrap();
        fs.linkat(fd, b"", AT_FDCWD, b"/d/f", libc::AT_EMPTY_PATH).unwrap();
        fs.engine().sync_all().unwrap();
        let nameless = fs.openat(AT_FDCWD, b"/d", OpenFlags::RDWR.tmpfile(), 0o644).unwrap();
        fs.pwrite(nameless, b"never named", 0).unwrap();
        fs.engine().sync_all().unwrap();
        let (fs, report) = remount_checked(fs, true);
        assert!(report.is_clean());
        assert_eq!(fs.engine().mount_report().orphans_freed, 1);
        assert_eq!(get(&fs, b"/d/f").unwrap(), b"before the link");
        fs.unmount().unwrap();
    }
}

/// The number of entries in a directory, without `.` and `..`.
fn entries(fs: &dyn PathFs, path: &[u8]) -> Result<usize, Errno> {
    let fd = fs.open(path, OpenFlags::RDONLY.directory(), 0)?;
    let n = fs.readdir(fd, 0, 1000).map(|v| v.iter().filter(|d| d.name != b"." && d.name != b"..").count());
    fs.close(fd)?;
    n
}

fn put(fs: &dyn PathFs, path: &[u8], data: &[u8]) -> Result<(), Errno> {
    ferrite_tests::put(fs, path, data)
}
