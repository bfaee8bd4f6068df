//! Proves that running out of space is an orderly error: ENOSPC leaves the
//! file system consistent (fsck clean, every earlier byte intact), and
//! freeing space makes it writable again — for data pages and for inodes.

use ferrite::{Errno, FormatOptions, MountOptions, OpenFlags, PathFs, Session};
use ferrite_pmem::Pmem;

fn fsck_clean(fs: &Session) {
    let report = ferrite::fsck::check(&Pmem::from_image(&fs.pmem().image())).unwrap();
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
