//! Proves that a path operation acts on the inode its path named, never on
//! a later owner of that inode's number. One thread creates and unlinks a
//! name over and over (each unlink frees an inode number, which the next
//! create anywhere may reuse); another opens, writes, stats, chmods and
//! renames through that name; a third creates private files and checks
//! their bytes, mode and link count. Before path resolution held the inodes
//! it found, the second thread's writes landed in the third thread's files,
//! and O_CREAT opens failed with ENOENT. The private files must stay exactly
//! as written, and fsck clean.

use ferrite::{Errno, FormatOptions, OpenFlags, PathFs, RenameFlags, Session};
use ferrite_pmem::Pmem;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const ROUNDS: usize = 20_000;

#[test]
fn path_operations_never_reach_a_reused_inode_number() {
    let fs =
        Arc::new(Session::format(Pmem::heap(8192 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap());
    fs.mkdir(b"/shared", 0o755).unwrap();
    fs.mkdir(b"/private", 0o755).unwrap();
    let done = Arc::new(AtomicBool::new(false));

    let churn = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(fd) = fs.open(b"/shared/x", OpenFlags::WRONLY.create().excl(), 0o644) {
                    fs.close(fd).unwrap();
                }
                match fs.unlink(b"/shared/x") {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => panic!("unlink: {e:?}"),
                }
            }
        })
    };
    let intruder = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                match fs.open(b"/shared/x", OpenFlags::RDWR, 0) {
                    Ok(fd) => {
                        fs.pwrite(fd, b"INTRUDER", 0).unwrap();
                        fs.close(fd).unwrap();
                    }
                    Err(Errno::ENOENT) => {}
                    Err(e) => panic!("open: {e:?}"),
                }
                match fs.open(b"/shared/x", OpenFlags::RDWR.create(), 0o600) {
                    Ok(fd) => fs.close(fd).unwrap(),
                    Err(e) => panic!("open O_CREAT: {e:?}"),
                }
                for r in [
                    fs.chmod(b"/shared/x", 0o600),
                    fs.truncate(b"/shared/x", 3),
                    fs.stat(b"/shared/x").map(|_| ()),
                    fs.rename(b"/shared/x", b"/shared/y", RenameFlags::Replace),
                    fs.link(b"/shared/y", b"/shared/x"),
                    fs.unlink(b"/shared/y"),
                ] {
                    match r {
                        Ok(()) | Err(Errno::ENOENT) | Err(Errno::EEXIST) => {}
                        Err(e) => panic!("racing call: {e:?}"),
                    }
                }
            }
        })
    };
    for i in 0..ROUNDS {
        let path = format!("/private/f{}", i % 64);
        let body = format!("private file {i} ").repeat(20).into_bytes();
        let fd = fs.open(path.as_bytes(), OpenFlags::RDWR.create().trunc(), 0o640).unwrap();
        fs.pwrite(fd, &body, 0).unwrap();
        fs.close(fd).unwrap();
        let mut back = vec![0u8; body.len() + 16];
        let fd = fs.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
        let n = fs.pread(fd, &mut back, 0).unwrap();
        fs.close(fd).unwrap();
        let st = fs.stat(path.as_bytes()).unwrap();
        assert!(
            back[..n] == body[..] && st.perm == 0o640 && st.nlink == 1,
            "round {i}: {path} was changed through another name: {:?}, mode {:o}, nlink {}",
            String::from_utf8_lossy(&back[..n.min(40)]),
            st.perm,
            st.nlink
        );
        if i % 7 == 0 {
            fs.unlink(path.as_bytes()).unwrap();
        }
    }
    done.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    intruder.join().unwrap();
    let report = ferrite::fsck::check(&Pmem::from_image(&fs.pmem().image())).unwrap();
    assert!(report.is_clean(), "{report}");
}
