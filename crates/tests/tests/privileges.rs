//! Proves that the path API takes a file's privileges away where Linux
//! does: a write, truncate (the same size and O_TRUNC included), fallocate
//! or zero-copy patch by a caller other than root drops the set-user-ID bit,
//! and the set-group-ID bit when the group may execute the file or the
//! caller is not in its group; a chown of anything but a directory drops
//! them for root too (even chown(-1, -1)); every one of these removes
//! `security.capability`, whoever the caller is. What does not modify
//! (a write of nothing, a call refused for its arguments, chmod, utimens,
//! another attribute, link, rename, an open without O_TRUNC) keeps them.
//! The expected modes are the ones Linux 6.18's tmpfs gives for the same
//! steps (and `crates/model/tests/linux_diff.rs` diffs the reference model
//! against the kernel for random sequences). It also proves that the
//! fast path's "nothing to take" mark (`Inode::nosec`) is undone by a
//! chmod that sets a bit and by a new capability, and that the drop is
//! durable: a crash right after it recovers the dropped mode.

use ferrite::perm::CAPABILITY_XATTR;
use ferrite::{
    Credentials, Errno, FallocateMode, Fd, FormatOptions, MountOptions, OpenFlags, PathFs, Session, XattrSetMode,
};
use ferrite_pmem::Pmem;

const USER: u32 = 1000;
const OTHER_GROUP: u32 = 1001;

fn format() -> Session {
    Session::format(Pmem::heap(1024 * 4096), &FormatOptions::default()).unwrap()
}

fn user() -> Credentials {
    Credentials::user(USER, USER, &[])
}

/// A file made by root at `path` with one byte, owner `uid:gid`, mode
/// `perm`, and a capability when `cap`.
fn make(fs: &Session, path: &[u8], perm: u32, uid: u32, gid: u32, cap: bool) {
    fs.set_credentials(Credentials::root());
    let fd = fs.open(path, OpenFlags::RDWR.create().trunc(), 0o600).unwrap();
    fs.write(fd, b"x").unwrap();
    fs.fchown(fd, Some(uid), Some(gid)).unwrap();
    fs.fchmod(fd, perm).unwrap();
    fs.close(fd).unwrap();
    if cap {
        set_capability(fs, path);
    }
}

/// Give the file at `path` a capability, as root.
fn set_capability(fs: &Session, path: &[u8]) {
    let creds = fs.credentials();
    fs.set_credentials(Credentials::root());
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    fs.fsetxattr(fd, CAPABILITY_XATTR, b"caps", XattrSetMode::Any).unwrap();
    fs.close(fd).unwrap();
    fs.set_credentials(creds);
}

/// Mode bits and whether the capability is still there, read as root.
fn state(fs: &Session, path: &[u8]) -> (u32, bool) {
    let creds = fs.credentials();
    fs.set_credentials(Credentials::root());
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let perm = fs.fstat(fd).unwrap().perm & 0o7777;
    let cap = match fs.fgetxattr(fd, CAPABILITY_XATTR) {
        Ok(_) => true,
        Err(Errno::ENODATA) => false,
        Err(e) => panic!("getxattr: {e:?}"),
    };
    fs.close(fd).unwrap();
    fs.set_credentials(creds);
    (perm, cap)
}

/// Run `step` on a descriptor opened with `flags` as `creds`.
fn with_fd(fs: &Session, path: &[u8], creds: Credentials, flags: OpenFlags, step: impl FnOnce(&Session, Fd)) {
    fs.set_credentials(creds);
    let fd = fs.open(path, flags, 0).unwrap();
    step(fs, fd);
    fs.close(fd).unwrap();
    fs.set_credentials(Credentials::root());
}

#[test]
fn modifications_drop_privileges_as_linux() {
    let fs = format();
    let f = b"/f".as_slice();
    // A write by a user: both bits go (the group may execute).
    make(&fs, f, 0o6777, 0, 0, false);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| assert_eq!(fs.write(fd, b"y"), Ok(1)));
    assert_eq!(state(&fs, f), (0o777, false));
    // A write by root keeps the bits but not the capability.
    make(&fs, f, 0o6755, 0, 0, true);
    with_fd(&fs, f, Credentials::root(), OpenFlags::WRONLY, |fs, fd| {
        fs.pwrite(fd, b"y", 5).unwrap();
    });
    assert_eq!(state(&fs, f), (0o6755, false));
    // A write of nothing changes nothing, root's or a user's.
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, Credentials::root(), OpenFlags::WRONLY, |fs, fd| assert_eq!(fs.write(fd, b""), Ok(0)));
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| assert_eq!(fs.write(fd, b""), Ok(0)));
    assert_eq!(state(&fs, f), (0o6777, true));
    // Set-group-ID without group execute (mandatory locking): it goes only
    // when the writer is not in the file's group.
    make(&fs, f, 0o2767, 0, 0, false);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"y").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o767, false));
    make(&fs, f, 0o2767, 0, USER, false);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"y").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o2767, false));
    // The owner's own write drops its set-user-ID bit too.
    make(&fs, f, 0o4777, USER, USER, false);
    with_fd(&fs, f, user(), OpenFlags::WRONLY.append(), |fs, fd| fs.write(fd, b"y").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o777, false));
    // Truncates: to the same size, by path, and O_TRUNC; root keeps the
    // bits, loses the capability.
    make(&fs, f, 0o6777, 0, 0, true);
    fs.truncate(f, 1).unwrap();
    assert_eq!(state(&fs, f), (0o6777, false));
    make(&fs, f, 0o6777, 0, 0, false);
    fs.set_credentials(user());
    fs.truncate(f, 1).unwrap();
    assert_eq!(state(&fs, f), (0o777, false));
    make(&fs, f, 0o6777, 0, 0, false);
    with_fd(&fs, f, user(), OpenFlags::RDWR, |fs, fd| fs.ftruncate(fd, 0).unwrap());
    assert_eq!(state(&fs, f), (0o777, false));
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, Credentials::root(), OpenFlags::WRONLY.trunc(), |_, _| {});
    assert_eq!(state(&fs, f), (0o6777, false));
    make(&fs, f, 0o6777, 0, 0, false);
    with_fd(&fs, f, user(), OpenFlags::WRONLY.trunc(), |_, _| {});
    assert_eq!(state(&fs, f), (0o777, false));
    // An open for writing without O_TRUNC changes nothing.
    with_fd(&fs, f, Credentials::root(), OpenFlags::RDONLY, |_, _| {});
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, user(), OpenFlags::RDWR, |_, _| {});
    assert_eq!(state(&fs, f), (0o6777, true));
    // fallocate, even a hole punched past the end of file, which changes
    // nothing else (as tmpfs); one refused for its arguments takes nothing.
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| {
        assert_eq!(fs.fallocate(fd, FallocateMode::Default, 0, 0), Err(Errno::EINVAL));
    });
    assert_eq!(state(&fs, f), (0o6777, true));
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| {
        fs.fallocate(fd, FallocateMode::PunchHole, 4096, 4096).unwrap();
    });
    assert_eq!(state(&fs, f), (0o777, false));
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| {
        fs.fallocate(fd, FallocateMode::Default, 0, 8192).unwrap();
    });
    assert_eq!(state(&fs, f), (0o777, false));
    // A zero-copy patch is a write.
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, user(), OpenFlags::RDWR, |fs, fd| {
        let b = fs.patch_buffer(4096).unwrap();
        // SAFETY: a patch buffer is `b.len` writable bytes until patched.
        unsafe { std::ptr::write_bytes(b.ptr, 7, 4096) };
        fs.patch(fd, 0, b.id, 4096).unwrap();
    });
    assert_eq!(state(&fs, f), (0o777, false));
    // A write refused for its size takes nothing.
    make(&fs, f, 0o6777, 0, 0, true);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| {
        assert_eq!(fs.pwrite(fd, b"y", ferrite::limits::FILE_SIZE_MAX), Err(Errno::EFBIG));
    });
    assert_eq!(state(&fs, f), (0o6777, true));
}

#[test]
fn chown_drops_privileges_for_everyone() {
    let fs = format();
    let f = b"/f".as_slice();
    // chown(-1, -1) by the owner, and by root.
    make(&fs, f, 0o6755, USER, USER, true);
    fs.set_credentials(user());
    fs.chown(f, None, None).unwrap();
    assert_eq!(state(&fs, f), (0o755, false));
    make(&fs, f, 0o6755, 0, 0, true);
    fs.chown(f, None, None).unwrap();
    assert_eq!(state(&fs, f), (0o755, false));
    // Root's chown keeps set-group-ID without group execute; a user's
    // chown to one of its groups keeps it as well (it is in the group).
    make(&fs, f, 0o6745, 0, 0, false);
    fs.chown(f, Some(0), Some(0)).unwrap();
    assert_eq!(state(&fs, f), (0o2745, false));
    make(&fs, f, 0o6745, USER, USER, false);
    fs.set_credentials(user());
    fs.chown(f, None, Some(USER)).unwrap();
    assert_eq!(state(&fs, f), (0o2745, false));
    // ... and a user's chown drops it when the user is not in the group.
    make(&fs, f, 0o2745, USER, OTHER_GROUP, false);
    fs.set_credentials(user());
    fs.chown(f, Some(USER), None).unwrap();
    assert_eq!(state(&fs, f), (0o745, false));
    // A directory keeps everything.
    fs.set_credentials(Credentials::root());
    fs.mkdir(b"/d", 0o777).unwrap();
    fs.chmod(b"/d", 0o6777).unwrap();
    set_capability(&fs, b"/d");
    fs.chown(b"/d", Some(USER), Some(USER)).unwrap();
    assert_eq!(state(&fs, b"/d"), (0o6777, true));
}

#[test]
fn other_changes_keep_privileges() {
    let fs = format();
    let f = b"/f".as_slice();
    make(&fs, f, 0o6757, 0, 0, true);
    fs.chmod(f, 0o6777).unwrap();
    fs.utimens(f, ferrite::TimeSet::Now, ferrite::TimeSet::Now).unwrap();
    let fd = fs.open(f, OpenFlags::RDONLY, 0).unwrap();
    fs.fsetxattr(fd, b"user.x", b"1", XattrSetMode::Any).unwrap();
    fs.close(fd).unwrap();
    fs.link(f, b"/g").unwrap();
    fs.rename(b"/g", b"/h", ferrite::RenameFlags::default()).unwrap();
    fs.unlink(b"/h").unwrap();
    assert_eq!(state(&fs, f), (0o6777, true));
}

#[test]
fn privileges_set_again_are_dropped_again_and_drops_survive_a_crash() {
    let fs = format();
    let f = b"/f".as_slice();
    make(&fs, f, 0o644, 0, 0, false);
    // The first write finds nothing to take and marks the inode.
    with_fd(&fs, f, user_with_write(&fs, f), OpenFlags::WRONLY, |fs, fd| {
        fs.write(fd, b"a").unwrap();
    });
    // A new capability is found again, after a write that found nothing
    // (and marked the inode again),
    set_capability(&fs, f);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"b").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o666, false));
    // and so is a chmod that sets the bits.
    fs.chmod(f, 0o6666).unwrap();
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"b").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o666, false));
    set_capability(&fs, f);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"c").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o666, false));
    // A drop is a commit of its own: a crash right after it keeps it.
    fs.chmod(f, 0o6777).unwrap();
    set_capability(&fs, f);
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"d").map(drop).unwrap());
    let pmem = fs.pmem().clone();
    drop(fs);
    let image = pmem.image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).unwrap();
    assert!(report.is_clean(), "{report}");
    let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
    assert_eq!(state(&fs, f), (0o777, false));
    // An inode read back from the pool with privileges is not marked.
    make(&fs, f, 0o6777, 0, 0, true);
    let pmem = fs.pmem().clone();
    fs.unmount().unwrap();
    let fs = Session::mount(Pmem::from_image(&pmem.image()), &MountOptions::default()).unwrap();
    with_fd(&fs, f, user(), OpenFlags::WRONLY, |fs, fd| fs.write(fd, b"e").map(drop).unwrap());
    assert_eq!(state(&fs, f), (0o777, false));
}

/// A user's credentials, with the file made writable for them.
fn user_with_write(fs: &Session, path: &[u8]) -> Credentials {
    fs.set_credentials(Credentials::root());
    fs.chmod(path, 0o666).unwrap();
    user()
}
