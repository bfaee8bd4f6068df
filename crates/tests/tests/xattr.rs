//! Proves extended attributes: set, get, list and remove with the
//! XATTR_CREATE / XATTR_REPLACE rules and the size limits; every change
//! survives clean and crash remounts; thousands of updates keep the log
//! bounded (GC and compaction keep the current values, and only them); fsck
//! stays clean throughout. Names outside Linux's namespaces are refused
//! with EOPNOTSUPP, and an access ACL equivalent to a mode sets the mode
//! (what `cp -a` relies on) while any other ACL is refused.

use ferrite::{Errno, FormatOptions, MountOptions, OpenFlags, PathFs, Session, XattrSetMode};
use ferrite_pmem::Pmem;
use ferrite_tests::remount;

#[test]
fn xattrs_follow_the_rules_and_persist() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let ino = fs.fstat(fd).unwrap().ino;
    fs.close(fd).unwrap();
    fs.mkdir(b"/d", 0o755).unwrap();
    let dir = fs.stat(b"/d").unwrap().ino;

    assert_eq!(fs.getxattr(ino, b"user.a"), Err(Errno::ENODATA));
    assert_eq!(fs.listxattr(ino).unwrap(), Vec::<Vec<u8>>::new());
    fs.setxattr(ino, b"user.a", b"one", XattrSetMode::Create).unwrap();
    assert_eq!(fs.setxattr(ino, b"user.a", b"two", XattrSetMode::Create), Err(Errno::EEXIST));
    assert_eq!(fs.setxattr(ino, b"user.b", b"x", XattrSetMode::Replace), Err(Errno::ENODATA));
    fs.setxattr(ino, b"user.a", b"two", XattrSetMode::Replace).unwrap();
    fs.setxattr(ino, b"user.empty", b"", XattrSetMode::Any).unwrap();
    fs.setxattr(dir, b"trusted.t", &[0u8, 1, 2, 255], XattrSetMode::Any).unwrap();
    let big = vec![0x5a; ferrite::format::XATTR_BYTES_MAX - 6];
    fs.setxattr(ino, b"user.b", &big, XattrSetMode::Any).unwrap();
    assert_eq!(fs.setxattr(ino, b"user.bb", &big, XattrSetMode::Any), Err(Errno::E2BIG));
    assert_eq!(fs.setxattr(ino, b"", b"v", XattrSetMode::Any), Err(Errno::ERANGE));
    assert_eq!(fs.setxattr(ino, &[b'n'; 256], b"v", XattrSetMode::Any), Err(Errno::ERANGE));
    assert_eq!(fs.removexattr(ino, b"user.none"), Err(Errno::ENODATA));

    for crash in [false, true] {
        let fs2 = remount(fs_take(&fs), crash);
        assert_eq!(fs2.getxattr(ino, b"user.a").unwrap(), b"two");
        assert_eq!(fs2.getxattr(ino, b"user.b").unwrap(), big);
        assert_eq!(fs2.getxattr(ino, b"user.empty").unwrap(), b"");
        assert_eq!(fs2.getxattr(dir, b"trusted.t").unwrap(), vec![0u8, 1, 2, 255]);
        assert_eq!(fs2.listxattr(ino).unwrap(), vec![b"user.a".to_vec(), b"user.b".to_vec(), b"user.empty".to_vec()]);
        fs2.unmount().unwrap();
    }
    // `fs` was consumed by fs_take's image copies only: it is still usable.
    fs.removexattr(ino, b"user.a").unwrap();
    assert_eq!(fs.getxattr(ino, b"user.a"), Err(Errno::ENODATA));
    let fs = remount(fs, true);
    assert_eq!(fs.getxattr(ino, b"user.a"), Err(Errno::ENODATA));
    assert_eq!(fs.listxattr(ino).unwrap(), vec![b"user.b".to_vec(), b"user.empty".to_vec()]);
}

/// A copy of the pool as a new, separately mounted file system (so one
/// image can be remounted both cleanly and after a crash).
fn fs_take(fs: &Session) -> Session {
    Session::mount(Pmem::from_image(&fs.pmem().image()), &MountOptions::default()).unwrap()
}

#[test]
fn many_xattr_updates_keep_a_bounded_log() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let ino = fs.fstat(fd).unwrap().ino;
    fs.pwrite(fd, b"data stays", 0).unwrap();
    fs.close(fd).unwrap();
    fs.setxattr(ino, b"user.keep", b"kept", XattrSetMode::Any).unwrap();
    for i in 0..20_000u32 {
        let name = format!("user.k{}", i % 7);
        if i % 5 == 4 {
            let _ = fs.removexattr(ino, name.as_bytes());
        } else {
            fs.setxattr(ino, name.as_bytes(), &i.to_le_bytes(), XattrSetMode::Any).unwrap();
        }
    }
    let expect: Vec<(Vec<u8>, Vec<u8>)> =
        fs.listxattr(ino).unwrap().into_iter().map(|n| (n.clone(), fs.getxattr(ino, &n).unwrap())).collect();
    let pmem = fs.pmem().clone();
    drop(fs);
    let image = pmem.image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.log_pages <= 8, "20,000 xattr updates left {} log pages", report.log_pages);
    let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> =
        fs.listxattr(ino).unwrap().into_iter().map(|n| (n.clone(), fs.getxattr(ino, &n).unwrap())).collect();
    assert_eq!(got, expect);
    assert_eq!(fs.getxattr(ino, b"user.keep").unwrap(), b"kept");
    let mut buf = [0u8; 10];
    let fd = fs.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    fs.pread(fd, &mut buf, 0).unwrap();
    assert_eq!(&buf, b"data stays");
}

/// One ACL value: version 2, then (tag, perm, id) entries.
fn acl(entries: &[(u16, u16)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    v
}

#[test]
fn namespaces_and_access_acls_follow_linux() {
    let fs = Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap();
    fs.mkdir(b"/d", 0o700).unwrap();
    let dir = fs.stat(b"/d").unwrap().ino;
    for name in [&b"unknown.x"[..], b"system.other", b"x"] {
        assert_eq!(fs.setxattr(dir, name, b"v", XattrSetMode::Any), Err(Errno::EOPNOTSUPP));
        assert_eq!(fs.getxattr(dir, name), Err(Errno::EOPNOTSUPP));
        assert_eq!(fs.removexattr(dir, name), Err(Errno::EOPNOTSUPP));
    }
    // A namespace's prefix alone is EINVAL (Linux's xattr_resolve_name).
    for name in [&b"user."[..], b"trusted.", b"security."] {
        assert_eq!(fs.setxattr(dir, name, b"v", XattrSetMode::Any), Err(Errno::EINVAL));
        assert_eq!(fs.getxattr(dir, name), Err(Errno::EINVAL));
        assert_eq!(fs.removexattr(dir, name), Err(Errno::EINVAL));
    }
    fs.setxattr(dir, b"security.label", b"s", XattrSetMode::Any).unwrap();
    // An ACL of owner/group/other entries is the mode: rwx r-x r-x.
    let before = fs.stat(b"/d").unwrap();
    fs.setxattr(dir, b"system.posix_acl_access", &acl(&[(1, 7), (4, 5), (0x20, 5)]), XattrSetMode::Any).unwrap();
    let after = fs.stat(b"/d").unwrap();
    assert_eq!(after.perm, 0o755);
    assert!(after.ctime >= before.ctime);
    // Nothing is stored, and reading an ACL answers as a file system
    // without ACLs does, so that programs stop asking.
    assert_eq!(fs.getxattr(dir, b"system.posix_acl_access"), Err(Errno::EOPNOTSUPP));
    assert_eq!(fs.getxattr(dir, b"system.posix_acl_default"), Err(Errno::EOPNOTSUPP));
    assert_eq!(fs.listxattr(dir).unwrap(), vec![b"security.label".to_vec()]);
    // Named users and masks, default ACLs and malformed values are refused
    // and change nothing.
    let named = acl(&[(1, 7), (2, 7), (4, 5), (0x10, 7), (0x20, 0)]);
    assert_eq!(fs.setxattr(dir, b"system.posix_acl_access", &named, XattrSetMode::Any), Err(Errno::EOPNOTSUPP));
    let minimal = acl(&[(1, 7), (4, 0), (0x20, 0)]);
    assert_eq!(fs.setxattr(dir, b"system.posix_acl_default", &minimal, XattrSetMode::Any), Err(Errno::EOPNOTSUPP));
    assert_eq!(fs.setxattr(dir, b"system.posix_acl_access", b"junk", XattrSetMode::Any), Err(Errno::EINVAL));
    assert_eq!(fs.stat(b"/d").unwrap().perm, 0o755);
    // The mode set through the ACL is durable like chmod.
    let fs = remount(fs, true);
    assert_eq!(fs.stat(b"/d").unwrap().perm, 0o755);
    assert_eq!(fs.getxattr(dir, b"security.label").unwrap(), b"s");
}
