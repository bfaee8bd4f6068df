//! Proves that running out of space is an orderly error: ENOSPC leaves the
//! file system consistent (fsck clean, every earlier byte intact), and
//! freeing space makes it writable again — for data pages and for inodes;
//! and that a pool filled until nothing more fits can always be emptied:
//! every unlink, rmdir, shrinking truncate, hole punch, xattr removal and
//! rename over a name succeeds, though each may need a log page (the
//! removal reserve), in strict and buffered mounts, and overwrites of
//! bytes the file has, large or small, still work; and renames that remove
//! no name (to a new name, an exchange), chmod, chown, utimens and setxattr
//! work there from half the reserve, never more, so removals can still
//! empty the pool after them (a refused one changes nothing), and right
//! after a write an attribute change takes no page at all; and that a
//! change gets the dead log pages of its own file, or else of any other
//! file, before it is refused (on a buffered mount their deaths become
//! durable first), also while other threads change those files; and that a
//! refusal while no log holds a dead page visits no other log, while pages
//! that died since, or that crash recovery found in logs nobody has
//! touched since, are found; that a clean unmount leaves no dead log page,
//! also right after a crash; and that a patch buffer, a symlink's target
//! page and a shrinking truncate's copy of its cut page (engine tests in
//! `file.rs`) take dead log pages too; and that one refusal rebuilds a
//! bounded number of the logs recovery found, the next the rest.

use ferrite::{
    BufferedOptions, Errno, FallocateMode, Fd, FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags, Session,
    TimeSet, TimeSpec, AT_FDCWD,
};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// fsck of the pool as it stands. The copy is taken with a buffered
/// mount's persister held: a batch running during the copy would leave
/// the image a mix of two states, which no crash can leave.
fn fsck_clean(fs: &Session) {
    let image = fs.engine().with_persister_held(|| fs.pmem().image());
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn data_space_runs_out_and_comes_back() {
    let fs =
        Session::format(Pmem::heap(512 * 4096), &FormatOptions { lanes: 2, inodes: Some(64), ..Default::default() })
            .unwrap();
    let chunk = vec![0xabu8; 64 * 1024];
    let mut written = Vec::new();
    let mut i = 0;
    let err = loop {
        let name = format!("/f{i}");
        let fd = match fs.open(name.as_bytes(), OpenFlags::WRONLY.create(), 0o644) {
            Ok(fd) => fd,
            Err(e) => break e,
        };
        let r = fs.pwrite(fd, &chunk, 0);
        fs.close(fd).unwrap();
        match r {
            Ok(n) => {
                assert_eq!(n, chunk.len());
                written.push(name);
            }
            Err(e) => break e,
        }
        i += 1;
    };
    assert_eq!(err, Errno::ENOSPC);
    assert!(written.len() > 10);
    fsck_clean(&fs);
    // Every completed file is intact, and a failed write left its file empty.
    for name in &written {
        assert_eq!(fs.stat(name.as_bytes()).unwrap().size, chunk.len() as u64);
    }
    // Small writes may still fit; keep failing until truly full, then free.
    for name in written.iter().take(4) {
        fs.unlink(name.as_bytes()).unwrap();
    }
    let fd = fs.open(b"/after", OpenFlags::RDWR.create(), 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, &chunk, 0).unwrap(), chunk.len());
    let mut back = vec![0u8; chunk.len()];
    fs.pread(fd, &mut back, 0).unwrap();
    assert_eq!(back, chunk);
    fs.close(fd).unwrap();
    fsck_clean(&fs);
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let fs = Session::mount(Pmem::from_image(&pmem.image()), &MountOptions::default()).unwrap();
    assert_eq!(fs.stat(b"/after").unwrap().size, chunk.len() as u64);
}

#[test]
fn inodes_run_out_and_come_back() {
    let fs =
        Session::format(Pmem::heap(1024 * 4096), &FormatOptions { lanes: 2, inodes: Some(64), ..Default::default() })
            .unwrap();
    let mut made = 0;
    let err = loop {
        match fs.mkdir(format!("/d{made}").as_bytes(), 0o755) {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, Errno::ENOSPC);
    assert_eq!(fs.statfs().unwrap().files_free, 0);
    fsck_clean(&fs);
    fs.rmdir(b"/d0").unwrap();
    fs.mkdir(b"/again", 0o755).unwrap();
    assert_eq!(fs.open(b"/nope", OpenFlags::WRONLY.create(), 0o644), Err(Errno::ENOSPC));
    fsck_clean(&fs);
}

/// Fill `fs` until nothing more fits: files of whole pages, then single
/// bytes, empty files and directories, until a one-page write, a byte, a
/// create in the root and a mkdir in `/d` all fail with ENOSPC (so the
/// root's log and `/d`'s have no room left in their tail pages). `round`
/// keeps the names of each fill apart. Adds the files and directories made
/// to `files` and `dirs`.
fn fill_to_the_brim(fs: &Session, round: usize, files: &mut Vec<String>, dirs: &mut Vec<String>) {
    let page = vec![0x5au8; 4096];
    if round == 0 {
        for d in ["/d", "/d/e"] {
            fs.mkdir(d.as_bytes(), 0o755).unwrap();
            dirs.push(d.to_string());
        }
    }
    // Data files of up to eight pages.
    for i in 0.. {
        let name = format!("/d/e/data{round}.{i}");
        let Ok(fd) = fs.open(name.as_bytes(), OpenFlags::WRONLY.create(), 0o644) else { break };
        files.push(name);
        let mut full = false;
        for k in 0..8 {
            if let Err(e) = fs.pwrite(fd, &page, k * 4096) {
                assert_eq!(e, Errno::ENOSPC);
                full = true;
                break;
            }
        }
        fs.close(fd).unwrap();
        if full {
            break;
        }
    }
    // Then whatever still fits: bytes, empty files, directories.
    for i in 0.. {
        let mut progress = false;
        let name = format!("/small{round}.{i}");
        if let Ok(fd) = fs.open(name.as_bytes(), OpenFlags::WRONLY.create(), 0o644) {
            files.push(name);
            progress = true;
            let _ = fs.pwrite(fd, b"x", 0);
            fs.close(fd).unwrap();
        }
        let dir = format!("/d/sub{round}.{i}");
        if fs.mkdir(dir.as_bytes(), 0o755).is_ok() {
            dirs.push(dir);
            progress = true;
        }
        if !progress {
            break;
        }
    }
    // Nothing fits any more.
    let fd = fs.open(files[0].as_bytes(), OpenFlags::WRONLY, 0).unwrap();
    assert_eq!(fs.pwrite(fd, &page, 1 << 20), Err(Errno::ENOSPC), "a page still fitted");
    fs.close(fd).unwrap();
    assert_eq!(fs.open(b"/one-more", OpenFlags::WRONLY.create(), 0o644), Err(Errno::ENOSPC));
    assert_eq!(fs.mkdir(b"/d/one-more", 0o755), Err(Errno::ENOSPC));
    assert_eq!(fs.statfs().unwrap().blocks_avail, 0, "statfs shows the pool full to ordinary changes");
    assert!(fs.free_pages() <= fs.engine().removal_reserve_pages(), "the pool is not full");
}

/// Fill the pool, then show that each way of releasing space works on it
/// when it needs a page it can only get from the removal reserve (each on
/// a pool filled again first), then remove everything, still without
/// ENOSPC, and find every page back.
fn empty_a_full_pool(fs: Session, free_when_empty: u64) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    fill_to_the_brim(&fs, 0, &mut files, &mut dirs);
    assert!(files.len() > 20, "only {} files fitted", files.len());
    let data = files.iter().find(|f| f.contains("data")).expect("a data file").clone();
    // Writes that only replace pages the file has borrow the reserve and
    // give it back (a program rolling back a journal does this); a write
    // that needs one page more than it frees still fails.
    let fd = fs.open(data.as_bytes(), OpenFlags::RDWR, 0).unwrap();
    // Free pages once every change is durable (a buffered mount frees the
    // pages a change released when the persister has written it).
    let free_when_synced = |fs: &Session| {
        fs.engine().sync_all().unwrap();
        fs.free_pages()
    };
    let free_before = free_when_synced(&fs);
    for round in 0..64u8 {
        let pages = vec![round; 2 * 4096];
        fs.pwrite(fd, &pages[..4096], 0).unwrap_or_else(|e| panic!("overwrite on a full pool: {e:?}"));
        fs.pwrite(fd, &pages, 4096).unwrap_or_else(|e| panic!("overwrite of 2 pages on a full pool: {e:?}"));
    }
    let mut back = vec![0u8; 3 * 4096];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), back.len());
    assert!(back.iter().all(|&b| b == 63));
    // So do small overwrites, which would otherwise go into the log as
    // deltas over their pages: on a full pool they copy the page instead.
    for round in 0..64u8 {
        fs.pwrite(fd, &[round | 0x80; 100], 10).unwrap_or_else(|e| panic!("small overwrite on a full pool: {e:?}"));
        fs.pwrite(fd, &[round | 0x40; 3000], 4096 + 1000)
            .unwrap_or_else(|e| panic!("partial page overwrite on a full pool: {e:?}"));
    }
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), back.len());
    let mut expected = vec![63u8; 3 * 4096];
    expected[10..110].fill(63 | 0x80);
    expected[5096..8096].fill(63 | 0x40);
    assert!(back == expected, "small overwrites on a full pool lost bytes");
    // What stays taken is the log's growth by their Write entries (dead
    // ones are collected as the log extends), not the pages they replaced.
    let free_after = free_when_synced(&fs);
    assert!(free_after + 4 >= free_before, "overwrites kept reserve pages: {free_before} then {free_after}");
    let size = fs.fstat(fd).unwrap().size;
    assert_eq!(fs.pwrite(fd, &back, size), Err(Errno::ENOSPC), "a growing write took the reserve");
    fs.close(fd).unwrap();
    // An extended attribute removed from a file whose log has no room:
    // attributes are set on it until one no longer fits.
    let fd = fs.open(data.as_bytes(), OpenFlags::RDWR, 0).unwrap();
    let mut set = 0;
    while fs.fsetxattr(fd, format!("user.t{set}").as_bytes(), &[7u8; 200], ferrite::XattrSetMode::Any).is_ok() {
        set += 1;
    }
    assert!(set > 0, "no attribute fitted");
    // Then attributes with empty values and names as long as the one
    // removed below, until not even one of those fits: its removal's
    // entry (the same size) then needs a fresh log page.
    for k in 0..100 {
        if fs.fsetxattr(fd, format!("user.z{}", k % 10).as_bytes(), b"", ferrite::XattrSetMode::Any).is_err() {
            break;
        }
    }
    fs.fremovexattr(fd, b"user.t0").unwrap_or_else(|e| panic!("removexattr on a full pool: {e:?}"));
    fs.close(fd).unwrap();
    // An unlink in the root, whose tail page is full.
    fill_to_the_brim(&fs, 1, &mut files, &mut dirs);
    let small = files.iter().position(|f| f.starts_with("/small")).expect("a file in the root");
    let small = files.remove(small);
    fs.unlink(small.as_bytes()).unwrap_or_else(|e| panic!("unlink {small} on a full pool: {e:?}"));
    // An rmdir in /d, whose tail page is full.
    fill_to_the_brim(&fs, 2, &mut files, &mut dirs);
    let sub = dirs.pop().expect("a directory made by the last fill");
    fs.rmdir(sub.as_bytes()).unwrap_or_else(|e| panic!("rmdir {sub} on a full pool: {e:?}"));
    // A truncate into the middle of a page (which copies that page) and a
    // hole punched with partly covered edge pages (which copies them).
    fill_to_the_brim(&fs, 3, &mut files, &mut dirs);
    let fd = fs.open(data.as_bytes(), OpenFlags::RDWR, 0).unwrap();
    fs.ftruncate(fd, 3 * 4096 + 100).unwrap_or_else(|e| panic!("truncate on a full pool: {e:?}"));
    fs.close(fd).unwrap();
    fill_to_the_brim(&fs, 4, &mut files, &mut dirs);
    let other = files.iter().rev().find(|f| f.contains("data") && **f != data).expect("another data file").clone();
    let fd = fs.open(other.as_bytes(), OpenFlags::RDWR, 0).unwrap();
    fs.fallocate(fd, FallocateMode::PunchHole, 100, 2 * 4096).unwrap_or_else(|e| panic!("punch on a full pool: {e:?}"));
    fs.close(fd).unwrap();
    // Then everything, deepest directories last.
    fill_to_the_brim(&fs, 5, &mut files, &mut dirs);
    for f in &files {
        fs.unlink(f.as_bytes()).unwrap_or_else(|e| panic!("unlink {f} on a full pool: {e:?}"));
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    for d in &dirs {
        fs.rmdir(d.as_bytes()).unwrap_or_else(|e| panic!("rmdir {d} on a full pool: {e:?}"));
    }
    fs.engine().sync_all().unwrap();
    fsck_clean(&fs);
    // Everything came back but the root directory's log (which keeps its
    // removals until their names' pages are collected): nothing leaked,
    // nothing is left.
    let pages_in_use = |fs: &Session| fs.stat(b"/").unwrap().blocks / 8;
    assert_eq!(fs.free_pages() + pages_in_use(&fs), free_when_empty, "pages leaked");
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let fs = Session::mount(Pmem::from_image(&pmem.image()), &MountOptions::default()).unwrap();
    let root = fs.open(b"/", OpenFlags::RDONLY.directory(), 0).unwrap();
    let names: Vec<_> = fs.readdir(root, 0, 100).unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.is_empty(), "left: {names:?}");
    fs.close(root).unwrap();
    assert_eq!(fs.free_pages() + pages_in_use(&fs), free_when_empty);
}

/// A rename over another name removes that name, so it works on a full
/// pool as an unlink does (`mv a b` on a full file system frees b), though
/// it needs log room in full directories and a first log page for a moved
/// inode that has none (for its new ctime): in one directory and across
/// two, over a name whose inode frees nothing and over a file with pages.
/// A rename to a new name or an exchange removes nothing: on a full pool it
/// works from half of the reserve, as an attribute change does; beyond
/// that half it fails with ENOSPC and changes nothing, and removals still
/// empty the pool.
fn rename_on_a_full_pool(fs: Session) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let root_files =
        |files: &[String]| -> Vec<String> { files.iter().filter(|f| f.starts_with("/small")).cloned().collect() };
    fill_to_the_brim(&fs, 0, &mut files, &mut dirs);
    let smalls = root_files(&files);
    let (from, over) = (smalls[0].clone(), smalls[1].clone());
    let moved = fs.stat(from.as_bytes()).unwrap().ino;
    fs.rename(from.as_bytes(), over.as_bytes(), RenameFlags::Replace)
        .unwrap_or_else(|e| panic!("rename {from} over {over} on a full pool: {e:?}"));
    assert_eq!(fs.stat(over.as_bytes()).unwrap().ino, moved);
    assert_eq!(fs.stat(from.as_bytes()), Err(Errno::ENOENT));
    files.retain(|f| *f != from);
    // Across directories, over a file with pages.
    fill_to_the_brim(&fs, 1, &mut files, &mut dirs);
    let from = root_files(&files).pop().expect("a file in the root");
    let over = files.iter().find(|f| f.contains("data")).expect("a data file").clone();
    let moved = fs.stat(from.as_bytes()).unwrap().ino;
    fs.rename(from.as_bytes(), over.as_bytes(), RenameFlags::Replace)
        .unwrap_or_else(|e| panic!("rename {from} over {over} on a full pool: {e:?}"));
    assert_eq!(fs.stat(over.as_bytes()).unwrap().ino, moved);
    files.retain(|f| *f != from);
    // To a new name and as an exchange: they remove nothing, but kernel file
    // systems make them on a full disk (logrotate's `mv log log.1`), and
    // they work from half of the reserve, as attribute changes do.
    fill_to_the_brim(&fs, 2, &mut files, &mut dirs);
    let smalls = root_files(&files);
    let (a, b) = (smalls[smalls.len() - 1].clone(), smalls[smalls.len() - 2].clone());
    let (ia, ib) = (fs.stat(a.as_bytes()).unwrap().ino, fs.stat(b.as_bytes()).unwrap().ino);
    fs.rename(a.as_bytes(), b"/renamed", RenameFlags::Replace)
        .unwrap_or_else(|e| panic!("rename {a} to a new name on a full pool: {e:?}"));
    fs.rename(b"/renamed", b.as_bytes(), RenameFlags::Exchange)
        .unwrap_or_else(|e| panic!("exchange of /renamed and {b} on a full pool: {e:?}"));
    assert_eq!((fs.stat(b"/renamed").unwrap().ino, fs.stat(b.as_bytes()).unwrap().ino), (ib, ia));
    assert_eq!(fs.stat(a.as_bytes()), Err(Errno::ENOENT));
    files.retain(|f| *f != a);
    files.push("/renamed".to_string());
    fsck_clean(&fs);
    // Every other file of the root moved to a new name in /d: the files
    // without a log need a first page for their new ctime, and both
    // directories' tail pages fill. They may take half the reserve, never
    // more; one refused changes nothing.
    let reserve = fs.engine().removal_reserve_pages();
    let (mut moved_away, mut refused) = (0, None);
    for from in root_files(&files) {
        let to = format!("/d/moved-{}", &from[1..]);
        match fs.rename(from.as_bytes(), to.as_bytes(), RenameFlags::NoReplace) {
            Ok(()) => {
                moved_away += 1;
                let i = files.iter().position(|f| *f == from).expect("a file of the list");
                files[i] = to;
            }
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC, "rename {from} to {to} on a full pool");
                refused = Some((from, to));
                break;
            }
        }
        assert!(
            fs.free_pages() * 2 >= reserve,
            "renames to new names took more than half the reserve: {} of {reserve} pages left",
            fs.free_pages()
        );
    }
    assert!(moved_away > 0, "no rename to a new name worked on a full pool");
    if let Some((from, to)) = refused {
        assert!(fs.stat(from.as_bytes()).is_ok(), "a refused rename removed {from}");
        assert_eq!(fs.stat(to.as_bytes()), Err(Errno::ENOENT), "a refused rename made {to}");
    }
    fsck_clean(&fs);
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let fs = Session::mount(Pmem::from_image(&pmem.image()), &MountOptions::default()).unwrap();
    assert_eq!(fs.stat(b"/renamed").unwrap().ino, ib);
    assert_eq!(fs.stat(over.as_bytes()).unwrap().ino, moved);
    for f in &files {
        fs.unlink(f.as_bytes()).unwrap_or_else(|e| panic!("unlink {f} after the renames: {e:?}"));
    }
    fsck_clean(&fs);
}

/// Attribute changes work on a full pool as on a kernel file system
/// (`touch`, chmod, chown, setxattr of files whose logs have no room),
/// from half of the removal reserve; once that half is used they get
/// ENOSPC, and the other half still lets removals empty the pool.
fn attributes_on_a_full_pool(fs: Session) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    fill_to_the_brim(&fs, 0, &mut files, &mut dirs);
    // One file changed again and again, a 200-byte attribute replaced each
    // round too: its log grows a page now and then, and collection frees
    // the pages whose entries all died. On a buffered mount without a
    // persister thread their deaths become durable only when the queue is
    // persisted, so dead pages pile up until a change finds no page and
    // collects them (`collect_for_space`): before that, the setxattr of
    // round 133 failed with ENOSPC there, the log holding a dozen dead
    // pages.
    let data = files.iter().find(|f| f.contains("data")).expect("a data file").clone();
    let fd = fs.open(data.as_bytes(), OpenFlags::RDWR, 0).unwrap();
    for round in 0..256u32 {
        let at = TimeSet::At(TimeSpec { sec: 1_700_000_000 + i64::from(round), nsec: 0 });
        fs.futimens(fd, at, at).unwrap_or_else(|e| panic!("utimens {round} on a full pool: {e:?}"));
        fs.fchmod(fd, 0o600 | ((round & 1) * 0o44)).unwrap_or_else(|e| panic!("chmod {round} on a full pool: {e:?}"));
        fs.fchown(fd, Some(round % 3), None).unwrap_or_else(|e| panic!("chown {round} on a full pool: {e:?}"));
        let value = format!("{round:0200}");
        fs.fsetxattr(fd, b"user.round", value.as_bytes(), ferrite::XattrSetMode::Any)
            .unwrap_or_else(|e| panic!("setxattr {round} on a full pool: {e:?}"));
    }
    assert_eq!(fs.fgetxattr(fd, b"user.round").unwrap(), format!("{:0200}", 255).into_bytes());
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.mtime.sec, st.perm, st.uid), (1_700_000_255, 0o644, 255 % 3));
    fs.close(fd).unwrap();
    // Files with no log yet each need a first page for their new times or
    // their first extended attribute: they get ENOSPC once half the
    // reserve is used, and a refused setxattr leaves no attribute.
    let mut changed = 0;
    let refused = files.iter().filter(|f| f.starts_with("/small")).enumerate().find_map(|(i, f)| {
        let r = if i % 2 == 0 {
            fs.utimensat(AT_FDCWD, f.as_bytes(), TimeSet::Now, TimeSet::Now, 0)
        } else {
            let fd = fs.open(f.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
            let r = fs.fsetxattr(fd, b"user.first", b"set on a full pool", ferrite::XattrSetMode::Create);
            let listed = fs.flistxattr(fd).unwrap();
            assert_eq!(listed.is_empty(), r.is_err(), "{f}: setxattr answered {r:?} and left {listed:?}");
            fs.close(fd).unwrap();
            r
        };
        assert!(matches!(r, Ok(()) | Err(Errno::ENOSPC)), "touch or setxattr {f}: {r:?}");
        changed += usize::from(r.is_ok());
        r.is_err().then_some(f)
    });
    assert!(changed > 0 && refused.is_some(), "{changed} files touched, refused: {refused:?}");
    assert!(
        fs.free_pages() * 2 >= fs.engine().removal_reserve_pages(),
        "attribute changes took more than half the reserve: {} of {} pages left",
        fs.free_pages(),
        fs.engine().removal_reserve_pages()
    );
    // Removals still work, and empty the pool.
    for f in &files {
        fs.unlink(f.as_bytes()).unwrap_or_else(|e| panic!("unlink {f} after attribute changes: {e:?}"));
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    for d in &dirs {
        fs.rmdir(d.as_bytes()).unwrap_or_else(|e| panic!("rmdir {d} after attribute changes: {e:?}"));
    }
    fsck_clean(&fs);
}

/// On a nearly full pool an attribute change right after a data change
/// never takes a page: the data change's entries leave the last unit of
/// the log page free for it (docs/DESIGN.md, "Space for removals"). On a
/// full pool the write that fails for want of a log page leaves its file's
/// log so, and the chown that SQLite, run by root, makes of its WAL at the
/// next open then needed a reserve page; the `-shm` regrowth after it
/// failed by that page. A ballast file leaves 12 pages available, below
/// the 31 (1/64 of the data pages) under which the pool is nearly full.
fn attribute_change_after_data(fs: Session) {
    let fd = fs.open(b"/wal", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, &vec![7u8; 4 * 4096], 0).unwrap();
    let ballast = fs.open(b"/ballast", OpenFlags::WRONLY.create(), 0o644).unwrap();
    let pages = fs.engine().available_pages() - 12;
    fs.pwrite(ballast, &vec![1u8; pages as usize * 4096], 0).unwrap();
    fs.close(ballast).unwrap();
    assert!((8..=12).contains(&fs.engine().available_pages()), "{} pages available", fs.engine().available_pages());
    // Pieces of 1 to 1,000 bytes (log deltas, or page copies once a page
    // has enough of them), from a fixed seed, so that the entries end at
    // every position of their log pages.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut pages_taken = Vec::new();
    for round in 0..2000u32 {
        let len = rng.gen_range(1..=1000usize);
        let at = rng.gen_range(0..4 * 4096 - len as u64);
        fs.pwrite(fd, &vec![round as u8; len], at).unwrap();
        let free = fs.free_pages();
        match round % 3 {
            0 => fs.fchmod(fd, 0o600 | ((round & 1) * 0o44)).unwrap(),
            1 => fs.fchown(fd, Some(round % 5), None).unwrap(),
            _ => {
                let at = TimeSet::At(TimeSpec { sec: 1_700_000_000 + i64::from(round), nsec: 0 });
                fs.futimens(fd, at, at).unwrap();
            }
        }
        if fs.free_pages() < free {
            pages_taken.push(round);
        }
    }
    assert!(pages_taken.is_empty(), "attribute changes after writes took log pages in rounds {pages_taken:?}");
    fs.close(fd).unwrap();
    fsck_clean(&fs);
}

#[test]
fn an_attribute_change_after_a_write_takes_no_page() {
    attribute_change_after_data(attribute_pool());
}

#[test]
fn an_attribute_change_after_a_write_takes_no_page_buffered() {
    attribute_change_after_data(buffered(attribute_pool()));
}

/// A pool of 2,048 pages in 2 lanes: 30 pages of removal reserve, half of
/// them for attribute changes and renames that remove no name (the small
/// pool's 3 would not hold a buffered log's page kept until its deaths are
/// durable, nor a rename to a new name and an exchange after it, which may
/// take a page for each directory and each inode without a log).
fn attribute_pool() -> Session {
    let fs =
        Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, inodes: Some(1024), ..Default::default() })
            .unwrap();
    assert_eq!(fs.engine().removal_reserve_pages(), 30);
    fs
}

#[test]
fn attributes_change_on_a_full_pool() {
    attributes_on_a_full_pool(attribute_pool());
}

#[test]
fn attributes_change_on_a_full_buffered_pool() {
    attributes_on_a_full_pool(buffered(attribute_pool()));
}

/// `fs` mounted again buffered, without a persister thread (changes
/// become durable at sync points and by back-pressure only).
fn buffered(fs: Session) -> Session {
    let opts = MountOptions {
        buffered: Some(BufferedOptions { persister_thread: false, ..Default::default() }),
        ..Default::default()
    };
    ferrite_tests::remount_as(fs, false, &opts).0
}

/// A pool of 512 pages in 2 lanes (6 pages of removal reserve) with
/// inodes to spare, and its free pages when empty.
fn small_pool() -> (Session, u64) {
    let fs =
        Session::format(Pmem::heap(512 * 4096), &FormatOptions { lanes: 2, inodes: Some(1024), ..Default::default() })
            .unwrap();
    assert_eq!(fs.stat(b"/").unwrap().blocks, 0, "a new root has no log page");
    assert_eq!(fs.engine().removal_reserve_pages(), 6);
    let free_when_empty = fs.free_pages();
    (fs, free_when_empty)
}

#[test]
fn a_full_pool_can_always_be_emptied() {
    let (fs, free_when_empty) = small_pool();
    empty_a_full_pool(fs, free_when_empty);
}

#[test]
fn a_full_buffered_pool_can_always_be_emptied() {
    let (fs, free_when_empty) = small_pool();
    empty_a_full_pool(buffered(fs), free_when_empty);
}

#[test]
fn a_rename_works_on_a_full_pool() {
    rename_on_a_full_pool(attribute_pool());
}

#[test]
fn a_rename_works_on_a_full_buffered_pool() {
    rename_on_a_full_pool(buffered(attribute_pool()));
}

/// Call `grow(k)` for k = 0, 1, ... until it is refused, which must be
/// with ENOSPC and leave the pool full; returns how many calls succeeded.
fn grow_until_refused(fs: &Session, mut grow: impl FnMut(u64) -> Result<(), Errno>) -> u64 {
    let mut k = 0;
    loop {
        match grow(k) {
            Ok(()) => k += 1,
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert_eq!(fs.statfs().unwrap().blocks_avail, 0, "the pool is not full");
    k
}

/// The dead log pages fsck finds in `fs`'s pool once everything queued is
/// durable.
fn dead_log_pages_after_sync(fs: &Session) -> u64 {
    fs.engine().sync_all().unwrap();
    ferrite::fsck::check(&Pmem::from_image(&fs.pmem().image())).unwrap().dead_log_pages
}

/// A buffered file's log keeps pages whose entries all died until a
/// later change extends it with their deaths durable, so a pool can fill
/// while a file's log holds dead pages. A write or a fallocate of that
/// file that finds no page collects them and uses them
/// (`collect_for_space`), as the pages a kernel file system never took
/// would be: here a file whose chmods left dead log pages grows (by
/// appends, resp. by fallocates) until it is refused, by which time its
/// log must hold no dead page and the collector's count must have grown by
/// as many (each refused with its dead pages still linked before stop 44).
/// Then a chmod, and its bytes are checked.
fn a_growing_file_reuses_its_dead_log_pages(by_fallocate: bool) {
    // No persist by age either (the longest lag allowed): the dead pages'
    // deaths become durable only when an allocation fails, so no extension
    // of the log collects them on the way.
    let opts = MountOptions {
        buffered: Some(BufferedOptions {
            persister_thread: false,
            lag_ns_max: ferrite::BUFFERED_LAG_NS_MAX,
            ..Default::default()
        }),
        ..Default::default()
    };
    let fs = ferrite_tests::remount_as(attribute_pool(), false, &opts).0;
    let fd = fs.open(b"/churned", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, &[1u8; 4096], 0).unwrap();
    let free_before_chmods = fs.free_pages();
    for round in 0..300u32 {
        fs.fchmod(fd, 0o600 | (round & 0o77)).unwrap();
    }
    // The log pages the chmods left behind: all but the tail's are dead.
    let dead_pages = (free_before_chmods - fs.free_pages()).saturating_sub(1);
    assert!(dead_pages >= 3, "the chmods left {dead_pages} dead log pages: nothing to collect");
    let collected_before = fs.engine().gc_pages_collected();
    let page = vec![0x77u8; 4096];
    let size = 4096
        * (1 + grow_until_refused(&fs, |k| {
            let at = (k + 1) * 4096;
            if by_fallocate {
                fs.fallocate(fd, FallocateMode::Default, at, 4096)
            } else {
                fs.pwrite(fd, &page, at).map(|_| ())
            }
        }));
    let collected = fs.engine().gc_pages_collected() - collected_before;
    assert!(collected >= dead_pages, "growing the file collected {collected} of its {dead_pages} dead log pages");
    let left = dead_log_pages_after_sync(&fs);
    assert_eq!(left, 0, "the file was refused while logs held {left} dead pages");
    fs.fchmod(fd, 0o640).unwrap();
    let mut back = vec![0u8; size as usize];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), back.len());
    let grown = if by_fallocate { 0 } else { 0x77 };
    assert!(back[..4096].iter().all(|&b| b == 1) && back[4096..].iter().all(|&b| b == grown));
    fs.close(fd).unwrap();
    fsck_clean(&fs);
}

#[test]
fn a_write_on_a_full_buffered_pool_reuses_its_files_dead_log_pages() {
    a_growing_file_reuses_its_dead_log_pages(false);
}

#[test]
fn a_fallocate_on_a_full_buffered_pool_reuses_its_files_dead_log_pages() {
    a_growing_file_reuses_its_dead_log_pages(true);
}

/// Leave dead log pages in `fd`'s log that no extension of it collects:
/// chmods (a buffered mount's deaths wait for durability, so more of
/// them), then an overwrite of its first page with `k + 1` that supersedes
/// the last live entry of a log page, then a chmod to 0o640.
fn churn_log(fs: &Session, fd: Fd, k: u8, buffered: bool) {
    let chmods = if buffered { 300 } else { 100 };
    for round in 0..chmods {
        fs.fchmod(fd, 0o600 | (round & 0o77)).unwrap();
    }
    fs.pwrite(fd, &[k + 1; 4096], 0).unwrap();
    fs.fchmod(fd, 0o640).unwrap();
}

/// What `churn_log(.., k, ..)` left in the file at `path`: a first page of
/// `k + 1` and permissions 0o640.
fn check_churned(fs: &Session, path: &str, k: u8) {
    let fd = fs.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
    let mut back = vec![0u8; 4096];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), 4096);
    assert!(back.iter().all(|&b| b == k + 1), "{path} lost its bytes");
    assert_eq!(fs.fstat(fd).unwrap().perm, 0o640, "{path} lost its permissions");
    fs.close(fd).unwrap();
}

/// A change on a full pool whose own file's log holds no dead page gets
/// the dead log pages of other files (stop 45): fast GC collects a log's
/// dead pages only at that log's next extension (on a buffered mount, once
/// their deaths are durable), which for a file no longer changed never
/// comes. Four files each keep dead log pages (strict: one page whose last
/// live entry, a Write, an overwrite superseded without extending the log;
/// buffered without a persister thread: a few hundred chmods), and a fifth
/// file is written until a write is refused: by then every dead page must
/// have been collected and used (none left in any log, and the collector's
/// count grown by as many). Refused again with no dead page in any log,
/// a write visits no other log (the engine's `dead_pages_unvisited`, which
/// spares a refused change the visit of every cached inode); once a file
/// is churned again (the filler truncated to make room), the next fill
/// visits again and takes the new dead pages. The churned files keep their
/// bytes and attributes, and the pool checks clean.
fn another_files_dead_log_pages(fs: Session, buffered: bool) {
    let churn = |fd: Fd, k: u8| churn_log(&fs, fd, k, buffered);
    let mut fds = Vec::new();
    for k in 0..4u8 {
        let name = format!("/churned{k}");
        let fd = fs.open(name.as_bytes(), OpenFlags::RDWR.create(), 0o644).unwrap();
        fs.pwrite(fd, &[k; 4096], 0).unwrap();
        churn(fd, k);
        fds.push(fd);
    }
    let dead_before = dead_log_pages_after_sync(&fs);
    assert!(dead_before >= 4, "the churned files left {dead_before} dead log pages: nothing to collect");
    let engine = fs.engine();
    let collected_before = engine.gc_pages_collected_for_others();
    let filler = fs.open(b"/filler", OpenFlags::WRONLY.create(), 0o644).unwrap();
    let page = vec![0x5au8; 4096];
    let filled = grow_until_refused(&fs, |k| fs.pwrite(filler, &page, k * 4096).map(|_| ()));
    let collected = engine.gc_pages_collected_for_others() - collected_before;
    assert!(collected >= dead_before, "the filler's writes collected {collected} of {dead_before} dead log pages");
    assert_eq!(dead_log_pages_after_sync(&fs), 0, "a write was refused while logs held dead pages");
    let visits = engine.other_log_visits();
    assert!(visits > 0, "no refused write visited other logs");
    for k in 0..3 {
        assert_eq!(fs.pwrite(filler, &page, (filled + k) * 4096).map(|_| ()), Err(Errno::ENOSPC));
    }
    assert_eq!(engine.other_log_visits(), visits, "refused writes visited logs that held no dead page");
    fs.ftruncate(filler, 0).unwrap();
    churn(fds[0], 0);
    let dead_again = dead_log_pages_after_sync(&fs);
    assert!(dead_again >= 1, "the second churn left no dead log page: nothing to collect");
    // The filler's own log holds most of them now (its truncated writes'
    // pages), which its own writes collect: count them all.
    let collected_before = engine.gc_pages_collected();
    let filled = grow_until_refused(&fs, |k| fs.pwrite(filler, &page, k * 4096).map(|_| ()));
    assert!(engine.other_log_visits() > visits, "the refused write after new dead pages visited no log");
    let collected = engine.gc_pages_collected() - collected_before;
    assert!(collected >= dead_again, "the second fill collected {collected} of {dead_again} dead log pages");
    assert_eq!(dead_log_pages_after_sync(&fs), 0, "a write was refused while logs held dead pages");
    for (k, fd) in fds.into_iter().enumerate() {
        fs.close(fd).unwrap();
        check_churned(&fs, &format!("/churned{k}"), k as u8);
    }
    fs.close(filler).unwrap();
    assert_eq!(fs.stat(b"/filler").unwrap().size, filled * 4096);
    fsck_clean(&fs);
}

#[test]
fn a_write_on_a_full_pool_reuses_other_files_dead_log_pages() {
    another_files_dead_log_pages(attribute_pool(), false);
}

#[test]
fn a_write_on_a_full_buffered_pool_reuses_other_files_dead_log_pages() {
    another_files_dead_log_pages(buffered(attribute_pool()), true);
}

/// Dead log pages from before a mount. A clean unmount collects every
/// cached inode's (`collect_every_log`), so that a file nobody touches
/// after the next mount does not keep them: the image it leaves holds no
/// dead log page. After a crash they stay in the image, and the next
/// mount rebuilds an inode only at its first use; crash recovery lists
/// the logs it found holding dead pages, and the first refused change
/// rebuilds them and takes their pages (before, they waited for a
/// `stat` of the file). So: a file churned before the remount, and a fill
/// of another file until refused, which must leave no dead log page
/// behind although it never looked at the churned file.
fn dead_pages_from_before_a_mount(buffered: bool, crash: bool) {
    let opts = MountOptions {
        buffered: buffered.then(|| BufferedOptions { persister_thread: false, ..Default::default() }),
        ..Default::default()
    };
    let fs = ferrite_tests::remount_as(attribute_pool(), false, &opts).0;
    let fd = fs.open(b"/churned", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, &[7; 4096], 0).unwrap();
    churn_log(&fs, fd, 7, buffered);
    fs.close(fd).unwrap();
    // Durable before the crash (a buffered mount has no persister thread).
    fs.engine().sync_all().unwrap();
    let (fs, report) = ferrite_tests::remount_as(fs, crash, &opts);
    if crash {
        assert!(report.dead_log_pages >= 1, "the churned file keeps no dead log page: nothing to find");
    } else {
        assert_eq!(report.dead_log_pages, 0, "a clean unmount left dead log pages");
    }
    let engine = fs.engine();
    let collected = engine.gc_pages_collected_for_others();
    let filler = fs.open(b"/filler", OpenFlags::WRONLY.create(), 0o644).unwrap();
    let page = vec![0x5au8; 4096];
    let filled = grow_until_refused(&fs, |k| fs.pwrite(filler, &page, k * 4096).map(|_| ()));
    if crash {
        assert!(engine.other_log_visits() > 0, "no refused write visited other logs");
        assert!(
            engine.gc_pages_collected_for_others() - collected >= report.dead_log_pages,
            "the fill did not take the dead log pages recovery found"
        );
    }
    assert_eq!(dead_log_pages_after_sync(&fs), 0, "a write was refused while a log held dead pages");
    check_churned(&fs, "/churned", 7);
    fs.close(filler).unwrap();
    assert_eq!(fs.stat(b"/filler").unwrap().size, filled * 4096);
    fsck_clean(&fs);
}

#[test]
fn a_clean_unmount_collects_dead_log_pages() {
    dead_pages_from_before_a_mount(false, false);
}

#[test]
fn a_clean_unmount_of_a_buffered_mount_collects_dead_log_pages() {
    dead_pages_from_before_a_mount(true, false);
}

#[test]
fn a_write_on_a_full_pool_finds_dead_log_pages_recovery_found() {
    dead_pages_from_before_a_mount(false, true);
}

#[test]
fn a_write_on_a_full_buffered_pool_finds_dead_log_pages_recovery_found() {
    dead_pages_from_before_a_mount(true, true);
}

/// A visit of the cached logs for a refused change rebuilds at most
/// `RECOVERY_REBUILDS_PER_VISIT_MAX` of the inodes crash recovery found
/// holding dead pages (so that one refusal after a crash does not pay for
/// thousands), and the next refusal goes on with the rest: a tenth more
/// churned files than one visit rebuilds, a crash, then a fill until
/// refused, which must have visited at least twice and left no dead log
/// page in any of them.
#[test]
fn refusals_after_a_crash_rebuild_the_logs_recovery_found_a_visit_at_a_time() {
    let files = ferrite::RECOVERY_REBUILDS_PER_VISIT_MAX * 11 / 10;
    let byte = |k: usize| (k % 200) as u8;
    let fs = Session::format(
        Pmem::heap(16384 * 4096),
        &FormatOptions { lanes: 2, inodes: Some(files as u64 + 64), ..Default::default() },
    )
    .unwrap();
    for k in 0..files {
        let fd = fs.open(format!("/churned{k}").as_bytes(), OpenFlags::RDWR.create(), 0o644).unwrap();
        fs.pwrite(fd, &[byte(k); 4096], 0).unwrap();
        churn_log(&fs, fd, byte(k), false);
        fs.close(fd).unwrap();
    }
    let (fs, report) = ferrite_tests::remount_as(fs, true, &MountOptions::default());
    assert!(report.dead_log_pages >= files as u64, "the churned files keep {} dead log pages", report.dead_log_pages);
    let engine = fs.engine();
    let filler = fs.open(b"/filler", OpenFlags::WRONLY.create(), 0o644).unwrap();
    let page = vec![0x5au8; 4096];
    grow_until_refused(&fs, |k| fs.pwrite(filler, &page, k * 4096).map(|_| ()));
    assert!(engine.other_log_visits() >= 2, "{} visits rebuilt {files} logs", engine.other_log_visits());
    assert!(engine.gc_pages_collected_for_others() >= report.dead_log_pages, "the fill left dead log pages");
    assert_eq!(dead_log_pages_after_sync(&fs), 0, "a write was refused while a log held dead pages");
    for k in (0..files).step_by(97) {
        check_churned(&fs, &format!("/churned{k}"), byte(k));
    }
    fs.close(filler).unwrap();
    fsck_clean(&fs);
}

/// An allocation outside a change's commit, on a full pool.
#[derive(Clone, Copy, PartialEq)]
enum Allocation {
    /// A patch buffer of a page: its caller holds no inode
    /// (`alloc_pages_anywhere`).
    PatchBuffer,
    /// A symlink, with this many pages available: with none its target's
    /// page (allocated under its directory's lock, `alloc_pages_for`)
    /// finds none; with one its first log page does (`stage_new_inode`).
    Symlink { available: u64 },
    /// A clean unmount, which allocates nothing but must collect.
    Unmount,
}

/// The allocations outside a change's commit also take dead log pages
/// before they are refused (stop 46), and a clean unmount right after a
/// crash's recovery leaves none behind. Three files are churned before a
/// crash, which leaves their dead pages in the pool; the next mount has
/// rebuilt none of the three when the allocation comes, so only recovery's
/// list of logs with dead pages leads to them. The pool is filled to one
/// or two available pages without a refusal (a refused write would visit
/// the logs first), then a patch buffer of one page more than is
/// available must be granted, a symlink made (its target reads back) with
/// no page or one available, or an unmount leave no dead log page in the
/// image.
fn allocations_outside_a_commit(buffered: bool, allocation: Allocation) {
    let fs = attribute_pool();
    for k in 0..3u8 {
        let fd = fs.open(format!("/churned{k}").as_bytes(), OpenFlags::RDWR.create(), 0o644).unwrap();
        fs.pwrite(fd, &[k; 4096], 0).unwrap();
        churn_log(&fs, fd, k, false);
        fs.close(fd).unwrap();
    }
    let opts = MountOptions {
        buffered: buffered.then(|| BufferedOptions { persister_thread: false, ..Default::default() }),
        ..Default::default()
    };
    let (fs, report) = ferrite_tests::remount_as(fs, true, &opts);
    assert!(report.dead_log_pages >= 3, "the churned files keep {} dead log pages", report.dead_log_pages);
    let engine = fs.engine();
    let filler = fs.open(b"/filler", OpenFlags::WRONLY.create(), 0o644).unwrap();
    let page = vec![0x5au8; 4096];
    let mut filled = 0;
    // A page and perhaps a log page per write: one or two are left.
    while engine.available_pages() >= 3 {
        fs.pwrite(filler, &page, filled * 4096).unwrap();
        filled += 1;
    }
    fs.close(filler).unwrap();
    assert_eq!(engine.other_log_visits(), 0, "the fill visited the logs");
    let collected = engine.gc_pages_collected();
    match allocation {
        Allocation::PatchBuffer => {
            let len = (engine.available_pages() + 1) * 4096;
            let b = fs
                .patch_buffer(len)
                .unwrap_or_else(|e| panic!("a patch buffer refused while logs held dead pages: {e:?}"));
            fs.free_buffer(b.id).unwrap();
        }
        Allocation::Symlink { available } => {
            // The pages beyond `available` held, without a refusal.
            let held = engine.available_pages() - available;
            let hold = (held > 0).then(|| fs.patch_buffer(held * 4096).unwrap());
            assert_eq!(engine.gc_pages_collected(), collected);
            assert_eq!(engine.available_pages(), available);
            // Two pages: its target's and its log's first.
            fs.symlink(b"/churned0", b"/link")
                .unwrap_or_else(|e| panic!("a symlink refused while logs held dead pages: {e:?}"));
            assert_eq!(fs.readlink(b"/link").unwrap(), b"/churned0");
            if let Some(b) = hold {
                fs.free_buffer(b.id).unwrap();
            }
        }
        Allocation::Unmount => {
            let (fs, report) = ferrite_tests::remount_as(fs, false, &opts);
            assert_eq!(report.dead_log_pages, 0, "a clean unmount after recovery left dead log pages");
            for k in 0..3u8 {
                check_churned(&fs, &format!("/churned{k}"), k);
            }
            fsck_clean(&fs);
            return;
        }
    }
    assert!(engine.gc_pages_collected() > collected, "the allocation took no dead log page");
    assert_eq!(dead_log_pages_after_sync(&fs), 0, "dead log pages left");
    for k in 0..3u8 {
        check_churned(&fs, &format!("/churned{k}"), k);
    }
    assert_eq!(fs.stat(b"/filler").unwrap().size, filled * 4096);
    fsck_clean(&fs);
}

#[test]
fn a_patch_buffer_on_a_full_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(false, Allocation::PatchBuffer);
}

#[test]
fn a_patch_buffer_on_a_full_buffered_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(true, Allocation::PatchBuffer);
}

#[test]
fn a_symlinks_target_on_a_full_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(false, Allocation::Symlink { available: 0 });
}

#[test]
fn a_symlinks_target_on_a_full_buffered_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(true, Allocation::Symlink { available: 0 });
}

#[test]
fn a_symlinks_first_log_page_on_a_full_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(false, Allocation::Symlink { available: 1 });
}

#[test]
fn a_symlinks_first_log_page_on_a_full_buffered_pool_takes_dead_log_pages() {
    allocations_outside_a_commit(true, Allocation::Symlink { available: 1 });
}

#[test]
fn a_clean_unmount_after_recovery_collects_the_dead_log_pages_it_found() {
    allocations_outside_a_commit(false, Allocation::Unmount);
}

#[test]
fn a_clean_unmount_of_a_buffered_mount_after_recovery_collects_the_dead_log_pages_it_found() {
    allocations_outside_a_commit(true, Allocation::Unmount);
}

/// Threads that fill a pool over and over while they churn their files'
/// logs (stop 45): every refused write collects dead log pages of every
/// inode it can lock without waiting, including those the other threads
/// are changing at that moment. Four threads, each on its own files: a
/// page-at-a-time fill until ENOSPC, chmods and overwrites that leave dead
/// log pages, and unlinks that give the space back. No call may fail with
/// anything but ENOSPC, nothing may deadlock, each file must hold what its
/// thread last wrote, and the pool must check clean and remount to the
/// same files.
fn threads_churn_a_full_pool(fs: Session) {
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 40;
    let fs = std::sync::Arc::new(fs);
    let collected_before = fs.engine().gc_pages_collected_for_others();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(0x45_0000 + t as u64);
                // Each kept file's name and its pages' fill byte.
                let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
                let mut refused = 0u32;
                for round in 0..ROUNDS {
                    let name = format!("/t{t}.{round}");
                    // A create may find no page for its name either.
                    let fd = match fs.open(name.as_bytes(), OpenFlags::RDWR.create(), 0o644) {
                        Ok(fd) => fd,
                        Err(Errno::ENOSPC) => {
                            refused += 1;
                            if let Some((name, _)) = kept.pop() {
                                fs.unlink(name.as_bytes()).unwrap();
                            }
                            continue;
                        }
                        Err(e) => panic!("thread {t}: create {name}: {e:?}"),
                    };
                    let mut pages = Vec::new();
                    loop {
                        let byte = rng.gen::<u8>();
                        match fs.pwrite(fd, &[byte; 4096], pages.len() as u64 * 4096) {
                            Ok(_) => pages.push(byte),
                            Err(e) => {
                                assert_eq!(e, Errno::ENOSPC, "thread {t}: write");
                                refused += 1;
                                break;
                            }
                        }
                        if pages.len() >= 256 {
                            break;
                        }
                    }
                    // Dead log pages: attribute changes, then overwrites of
                    // the first page (refused with ENOSPC at times).
                    for k in 0..rng.gen_range(0..150u32) {
                        match fs.fchmod(fd, 0o600 | (k & 0o77)) {
                            Ok(()) | Err(Errno::ENOSPC) => {}
                            Err(e) => panic!("thread {t}: chmod: {e:?}"),
                        }
                    }
                    if !pages.is_empty() {
                        let byte = rng.gen::<u8>();
                        match fs.pwrite(fd, &[byte; 4096], 0) {
                            Ok(_) => pages[0] = byte,
                            Err(e) => assert_eq!(e, Errno::ENOSPC, "thread {t}: overwrite"),
                        }
                    }
                    fs.close(fd).unwrap();
                    kept.push((name, pages));
                    // Give space back: unlink a kept file now and then.
                    while kept.len() > 3 || (rng.gen_bool(0.3) && !kept.is_empty()) {
                        let (name, _) = kept.remove(rng.gen_range(0..kept.len()));
                        fs.unlink(name.as_bytes()).unwrap_or_else(|e| panic!("thread {t}: unlink {name}: {e:?}"));
                    }
                }
                (kept, refused)
            })
        })
        .collect();
    let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
    let mut refused = 0;
    for w in workers {
        let (k, r) = w.join().unwrap();
        kept.extend(k);
        refused += r;
    }
    let collected = fs.engine().gc_pages_collected_for_others() - collected_before;
    eprintln!("{refused} fills refused with ENOSPC, {collected} pages of other logs collected for them");
    assert!(refused >= THREADS, "the pool was full only {refused} times: the test tested little");
    let check = |fs: &Session, when: &str| {
        for (name, pages) in &kept {
            let st = fs.stat(name.as_bytes()).unwrap_or_else(|e| panic!("{when}: stat {name}: {e:?}"));
            assert_eq!(st.size, pages.len() as u64 * 4096, "{when}: size of {name}");
            let fd = fs.open(name.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
            let mut back = vec![0u8; 4096];
            for (k, &byte) in pages.iter().enumerate() {
                assert_eq!(fs.pread(fd, &mut back, k as u64 * 4096).unwrap(), 4096);
                assert!(back.iter().all(|&b| b == byte), "{when}: {name} page {k}");
            }
            fs.close(fd).unwrap();
        }
    };
    check(&fs, "after the threads");
    let fs = std::sync::Arc::into_inner(fs).expect("the threads are done");
    fs.engine().sync_all().unwrap();
    fsck_clean(&fs);
    let (fs, _) = ferrite_tests::remount_as(fs, false, &MountOptions::default());
    check(&fs, "after a remount");
}

#[test]
fn threads_churn_a_full_pool_strict() {
    threads_churn_a_full_pool(attribute_pool());
}

#[test]
fn threads_churn_a_full_buffered_pool_with_its_persister() {
    let opts = MountOptions { buffered: Some(BufferedOptions::default()), ..Default::default() };
    threads_churn_a_full_pool(ferrite_tests::remount_as(attribute_pool(), false, &opts).0);
}
