//! What this proves: with `allow_other` (and `default_permissions`, on by
//! default) a non-root user (nobody) is held to the mode bits by the kernel
//! on a Ferrite mount — reads and writes, directory search and listing,
//! chmod and chown rules, the sticky bit — new nodes are owned by their
//! creator, set-group-ID directories pass their group on, `uid=`/`gid=`/
//! `umask=` options apply to new nodes, and without `allow_other` other
//! users cannot use the mount at all.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

const NOBODY: u32 = 65534;

/// Run a shell script as nobody; returns (success, output).
fn as_nobody(cwd: &std::path::Path, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c", script])
        .current_dir(cwd)
        .output()
        .expect("run setpriv");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn must(cwd: &std::path::Path, script: &str) {
    let (ok, out) = as_nobody(cwd, script);
    assert!(ok, "as nobody, expected success: {script}\n{out}");
}

fn must_fail(cwd: &std::path::Path, script: &str, why: &str) {
    let (ok, out) = as_nobody(cwd, script);
    assert!(!ok, "as nobody, expected failure: {script}");
    assert!(out.contains(why), "as nobody: {script}: expected `{why}`, got:\n{out}");
}

#[test]
fn nobody_under_allow_other() {
    if !fuse_usable() || !tool("setpriv", "apt-get install -y util-linux") {
        return;
    }
    let pool = Pool::new("perm");
    let m = Mount::new(&pool, "allow_other");
    let d = &m.dir;
    fs::write(m.path("rootfile"), b"root data").unwrap();
    fs::set_permissions(m.path("rootfile"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::create_dir(m.path("private")).unwrap();
    fs::set_permissions(m.path("private"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(m.path("private/secret"), b"s").unwrap();
    fs::create_dir(m.path("pub")).unwrap();
    fs::set_permissions(m.path("pub"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::create_dir(m.path("sticky")).unwrap();
    fs::set_permissions(m.path("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(m.path("sticky/roots"), b"r").unwrap();
    fs::create_dir(m.path("sgid")).unwrap();
    std::os::unix::fs::chown(m.path("sgid"), None, Some(4321)).unwrap();
    fs::set_permissions(m.path("sgid"), fs::Permissions::from_mode(0o2777)).unwrap();

    must(d, "cat rootfile | grep -q 'root data'");
    must_fail(d, "echo x >> rootfile", "Permission denied");
    must_fail(d, "ls private", "Permission denied");
    must_fail(d, "cat private/secret", "Permission denied");
    must_fail(d, "touch newfile", "Permission denied");
    must_fail(d, "chmod 777 rootfile", "Operation not permitted");
    must_fail(d, "rm -f rootfile", "Permission denied");
    must(d, "echo mine > pub/mine && chmod 600 pub/mine && cat pub/mine | grep -q mine && mkdir pub/sub && ln -s mine pub/link && mv pub/mine pub/sub/renamed");
    must_fail(d, "chown 0 pub/sub/renamed", "Operation not permitted");
    must_fail(d, "rm sticky/roots", "Operation not permitted");
    must(d, "echo n > sticky/nobodys && rm sticky/nobodys");
    must(d, "touch sgid/f && mkdir sgid/d");

    let md = fs::metadata(m.path("pub/sub/renamed")).unwrap();
    assert_eq!((md.uid(), md.gid(), md.mode() & 0o7777), (NOBODY, NOBODY, 0o600));
    let md = fs::metadata(m.path("sgid/f")).unwrap();
    assert_eq!(md.gid(), 4321, "set-group-ID directory did not pass its group on");
    let md = fs::metadata(m.path("sgid/d")).unwrap();
    assert_eq!(md.gid(), 4321);
    assert!(md.mode() & 0o2000 != 0, "new subdirectory of a set-group-ID directory lost the bit");
    // Root still may do anything.
    fs::remove_file(m.path("private/secret")).unwrap();
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn owner_defaults_and_owner_only_mount() {
    if !fuse_usable() || !tool("setpriv", "apt-get install -y util-linux") {
        return;
    }
    let pool = Pool::new("owner");
    // A new pool: its root belongs to uid=/gid=; new nodes too, with umask.
    let m = Mount::new(&pool, "uid=1000,gid=2000,umask=027");
    let root = fs::metadata(&m.dir).unwrap();
    assert_eq!((root.uid(), root.gid()), (1000, 2000));
    fs::write(m.path("f"), b"x").unwrap();
    fs::set_permissions(m.path("f"), fs::Permissions::from_mode(0o666)).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let f = fs::metadata(m.path("d")).unwrap();
    assert_eq!((f.uid(), f.gid(), f.mode() & 0o777), (1000, 2000, 0o750));
    // Not allow_other: other users are shut out entirely.
    let (ok, out) = as_nobody(&std::env::temp_dir(), &format!("stat {}", m.path("f").display()));
    assert!(!ok && out.contains("Permission denied"), "nobody reached an owner-only mount: {out}");
    m.unmount();
    pool.fsck_clean();
}
