//! Sessions own descriptors, current directories and credentials; the
//! engine holds none. This proves, on the engine: descriptors placed at
//! numbers a front end chooses (`openat_fd`, `dup3`) replace what was there
//! and release it; two sessions on one engine have separate descriptor
//! tables, current directories and credentials but see one file system;
//! `Session::unmount` closes the session's descriptors (an unlinked file
//! still open is freed, so the clean pool is fsck-clean and its inode and
//! pages are free again) and refuses (EBUSY) while another session holds
//! the engine; O_SYNC writes go through; and a removed current directory
//! is an empty, usable starting point (getcwd ENOENT, creation ENOENT,
//! a rename or link into it ENOENT before any permission check);
//! numbers the table picks are 3, 4, 5, ... for one thread, never repeat
//! while the table lives, stay distinct when several threads and several
//! sessions on one thread open at once, and skip numbers a front end
//! installed.

use ferrite::{Credentials, Errno, Fd, Ferrite, FormatOptions, OpenFlags, PathFs, Session, AT_FDCWD};
use ferrite_pmem::Pmem;
use std::sync::Arc;

fn engine() -> Arc<Ferrite> {
    Arc::new(Ferrite::format(Pmem::heap(512 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap())
}

#[test]
fn descriptors_at_chosen_numbers() {
    let s = Session::new(engine());
    let a = s.openat_fd(AT_FDCWD, b"/a", OpenFlags::RDWR.create(), 0o644, Fd(1000)).unwrap();
    assert_eq!(a, Fd(1000));
    s.write(a, b"hello").unwrap();
    // Another file at the same number replaces (and closes) the first.
    s.openat_fd(AT_FDCWD, b"/b", OpenFlags::RDWR.create().cloexec(), 0o644, Fd(1000)).unwrap();
    assert_eq!(s.fstat(Fd(1000)).unwrap().size, 0);
    assert!(s.get_cloexec(Fd(1000)).unwrap());
    assert_eq!(s.open_descriptors(), 1);
    // The numbers the table picks skip the ones a front end installed.
    let c = s.dup3(Fd(1000), Fd(3), false).unwrap();
    assert_eq!(c, Fd(3));
    let d = s.dup(Fd(1000)).unwrap();
    assert!(d != Fd(3) && d != Fd(1000));
    // dup'd descriptors share the offset.
    s.write(Fd(3), b"xy").unwrap();
    s.write(d, b"z").unwrap();
    assert_eq!(s.lseek(Fd(1000), 0, ferrite::Whence::Cur).unwrap(), 3);
    assert_eq!(s.dup3(Fd(3), ferrite::AT_FDCWD, false), Err(Errno::EBADF));
    for fd in [Fd(1000), Fd(3), d] {
        s.close(fd).unwrap();
    }
    assert_eq!(s.open_descriptors(), 0);
    s.unmount().unwrap();
}

#[test]
fn two_sessions_one_engine() {
    let fs = engine();
    let (s1, s2) = (Session::new(fs.clone()), Session::new(fs.clone()));
    s1.mkdir(b"/d", 0o755).unwrap();
    s1.chdir(b"/d").unwrap();
    let f = s1.open(b"f", OpenFlags::WRONLY.create(), 0o600).unwrap();
    // s2 sees the file, from its own current directory (the root).
    assert_eq!(s2.stat(b"d/f").unwrap().perm, 0o600);
    assert_eq!(s2.getcwd().unwrap(), b"/");
    assert_eq!(s1.getcwd().unwrap(), b"/d");
    // Descriptors are per session.
    assert_eq!(s2.fstat(f), Err(Errno::EBADF));
    // Credentials are per session: s2 as another user cannot read it.
    s2.set_credentials(Credentials::user(1000, 1000, &[]));
    assert_eq!(s2.open(b"/d/f", OpenFlags::RDONLY, 0).err(), Some(Errno::EACCES));
    assert!(s1.open(b"/d/f", OpenFlags::RDONLY, 0).is_ok());
    // Made by user 1000: its owner.
    s1.chmod(b"/d", 0o777).unwrap();
    s2.open(b"/d/g", OpenFlags::WRONLY.create(), 0o644).map(|fd| s2.close(fd)).unwrap().unwrap();
    let st = s1.stat(b"/d/g").unwrap();
    assert_eq!((st.uid, st.gid), (1000, 1000));
    // Unmount through s1 while s2 holds the engine: EBUSY, s1's
    // descriptors closed; s2 can still unmount.
    drop(fs);
    assert_eq!(s1.unmount(), Err(Errno::EBUSY));
    s2.unmount().unwrap();
}

#[test]
fn unmount_closes_descriptors_and_frees_unlinked_files() {
    let s = Session::new(engine());
    // The root's log starts at its first name (a new directory has only
    // its attributes, in its slot): count free space once it has one.
    s.mkdir(b"/d", 0o755).unwrap();
    let (inodes, pages) = (s.free_inodes(), s.free_pages());
    let f = s.open(b"/gone", OpenFlags::RDWR.create().sync(), 0o644).unwrap();
    assert!(s.getfl(f).unwrap().sync);
    assert_eq!(s.write(f, &[7u8; 10_000]).unwrap(), 10_000);
    s.unlink(b"/gone").unwrap();
    assert!(s.free_inodes() < inodes && s.free_pages() < pages, "kept while open");
    let pmem = s.pmem().clone();
    s.unmount().unwrap();
    let image = pmem.image();
    drop(pmem);
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    let s = Session::mount(Pmem::from_image(&image), &Default::default()).unwrap();
    assert!(!s.mount_report().recovered, "a clean unmount");
    assert_eq!((s.free_inodes(), s.free_pages()), (inodes, pages), "the unlinked file was freed at unmount");
    s.unmount().unwrap();
}

#[test]
fn removed_current_directory() {
    let s = Session::new(engine());
    s.mkdir(b"/d", 0o755).unwrap();
    s.chdir(b"/d").unwrap();
    let dir = s.open(b".", OpenFlags::RDONLY.directory(), 0).unwrap();
    s.rmdir(b"/d").unwrap();
    assert_eq!(s.getcwd(), Err(Errno::ENOENT));
    assert_eq!(s.open(b"x", OpenFlags::WRONLY.create(), 0o644), Err(Errno::ENOENT));
    assert_eq!(s.mkdirat(dir, b"y", 0o755), Err(Errno::ENOENT));
    assert_eq!(s.stat(b".").unwrap().nlink, 0);
    assert_eq!(s.stat(b"..").unwrap().ino, s.stat(b"/").unwrap().ino);
    // Nothing is renamed or linked into it, and a lookup there answers
    // ENOENT before any permission check, as Linux's does: a user who may
    // not remove a root-owned file from a sticky directory gets ENOENT,
    // not EPERM.
    s.mkdir(b"/sticky", 0o1777).unwrap();
    s.open(b"/sticky/f", OpenFlags::WRONLY.create(), 0o644).and_then(|fd| s.close(fd)).unwrap();
    assert_eq!(s.rename(b"/sticky/f", b"x", ferrite::RenameFlags::Replace), Err(Errno::ENOENT));
    assert_eq!(s.link(b"/sticky/f", b"x"), Err(Errno::ENOENT));
    assert_eq!(s.symlink(b"/sticky/f", b"x"), Err(Errno::ENOENT));
    s.set_credentials(Credentials::user(1000, 1000, &[]));
    assert_eq!(s.rename(b"/sticky/f", b"x", ferrite::RenameFlags::Replace), Err(Errno::ENOENT));
    // The removed directory is root's and 0755: a user's creations there
    // are refused with ENOENT too, not EACCES.
    assert_eq!(s.open(b"x", OpenFlags::WRONLY.create(), 0o644), Err(Errno::ENOENT));
    assert_eq!(s.mkdir(b"x", 0o755), Err(Errno::ENOENT));
    assert_eq!(s.symlink(b"/sticky/f", b"x"), Err(Errno::ENOENT));
    assert_eq!(s.mknod(b"x", libc::S_IFIFO | 0o644, 0), Err(Errno::ENOENT));
    assert_eq!(s.link(b"/sticky/f", b"x"), Err(Errno::ENOENT));
    assert_eq!(s.unlink(b"x"), Err(Errno::ENOENT));
    assert_eq!(s.rmdir(b"x"), Err(Errno::ENOENT));
    assert_eq!(s.rename(b"/sticky/f", b"/sticky/g", ferrite::RenameFlags::Replace), Err(Errno::EPERM));
    s.set_credentials(Credentials::root());
    assert!(s.stat(b"/sticky/f").is_ok());
    s.chdir(b"/").unwrap();
    assert_eq!(s.getcwd().unwrap(), b"/");
    s.close(dir).unwrap();
    s.unmount().unwrap();
}

#[test]
fn picked_numbers_are_distinct_across_threads_and_sessions() {
    let fs = engine();
    let s = Arc::new(Session::new(fs.clone()));
    // One thread alone: consecutive numbers from 3, as from one counter.
    let first: Vec<Fd> =
        (0..5).map(|i| s.open(format!("/f{i}").as_bytes(), OpenFlags::RDWR.create(), 0o644).unwrap()).collect();
    assert_eq!(first, (3..8).map(Fd).collect::<Vec<_>>());
    // A number a front end installed ahead of the counter is skipped.
    let taken = s.openat_fd(AT_FDCWD, b"/f0", OpenFlags::RDONLY, 0, Fd(8)).unwrap();
    assert_eq!(taken, Fd(8));
    assert_eq!(s.open(b"/f1", OpenFlags::RDONLY, 0).unwrap(), Fd(9));
    // Two sessions used in turn from one thread: each table's numbers stay
    // its own and distinct, past one block's worth (64) of opens.
    let t = Session::new(fs.clone());
    let mut seen_s = std::collections::HashSet::new();
    let mut seen_t = std::collections::HashSet::new();
    for _ in 0..150 {
        let a = s.open(b"/f2", OpenFlags::RDONLY, 0).unwrap();
        let b = t.open(b"/f2", OpenFlags::RDONLY, 0).unwrap();
        assert!(seen_s.insert(a) && seen_t.insert(b), "a number picked twice");
        assert_eq!(s.fstat(a).unwrap().ino, t.fstat(b).unwrap().ino);
    }
    // Four threads opening and closing at once: every open descriptor has
    // its own number, and each still names the file it was opened on.
    let handles: Vec<_> = (0..4)
        .map(|k| {
            let s = s.clone();
            std::thread::spawn(move || {
                let name = format!("/f{k}");
                let ino = s.stat(name.as_bytes()).unwrap().ino;
                let mut held = Vec::new();
                for i in 0..300 {
                    let fd = s.open(name.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
                    held.push(fd);
                    if i % 3 == 0 {
                        s.close(held.swap_remove(0)).unwrap();
                    }
                }
                for &fd in &held {
                    assert_eq!(s.fstat(fd).unwrap().ino, ino);
                }
                held
            })
        })
        .collect();
    let mut all = std::collections::HashSet::new();
    for h in handles {
        for fd in h.join().unwrap() {
            assert!(all.insert(fd), "descriptor {} held by two threads", fd.0);
        }
    }
    assert_eq!(s.open_descriptors(), first.len() + 2 + 150 + all.len());
}
