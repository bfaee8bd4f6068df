//! What this proves: with `allow_other` (and `default_permissions`, on by
//! default) a non-root user (nobody) is held to the mode bits by the kernel
//! on a Ferrite mount — reads and writes, directory search and listing,
//! chmod and chown rules, the sticky bit — new nodes are owned by their
//! creator, set-group-ID directories pass their group on, `uid=`/`gid=`/
//! `umask=` options apply to new nodes, and without `allow_other` other
//! users cannot use the mount at all.
//!
//! And: a mount private to root (root mounted it, no `allow_other`) goes
//! without `default_permissions`, and root's calls there give the same
//! results as on tmpfs (execute bits, `access`, writes to mode-000 files,
//! other users' files and sticky directories, set-ID bits dropped by
//! chown); the one difference, a root
//! process without CAP_DAC_OVERRIDE, is shown as docs/FUSE.md states it,
//! and `-o default_permissions` takes it away.

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

/// Is this test process root? Says SKIP when not.
fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIP: needs root");
    }
    root
}

/// Run `f` in a fresh directory on tmpfs (/dev/shm), the reference a mount
/// is compared with, and remove the directory after.
fn on_tmpfs<T>(tag: &str, f: impl FnOnce(&std::path::Path) -> T) -> T {
    let dir = std::path::PathBuf::from(format!("/dev/shm/ferrite-fuse-test-{}-{tag}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let out = f(&dir);
    fs::remove_dir_all(&dir).unwrap();
    out
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

/// Root's view of mode bits, one line per step: what a root process may
/// and may not do, as the kernel decides it on any file system.
const ROOT_STEPS: &str = r#"
r() { if "$@" >/dev/null 2>&1; then echo "ok: $*"; else echo "refused: $*"; fi; }
printf 'data' > f && chmod 644 f
r test -x f
r ./f
printf '#!/bin/sh\necho ran\n' > s && chmod 700 s
r ./s
r test -x s
touch z && chmod 000 z
r test -r z
r test -w z
r sh -c 'echo more >> z'
r cat z
mkdir ro && chmod 555 ro
r touch ro/new
r mkdir ro/sub
mkdir st && chmod 1777 st && touch st/x && chown 1234 st/x && chown 4321 st
r rm st/x
touch o && chown 1000:1000 o && chmod 600 o
r chmod 4755 o
r touch -d @1000 o
r chown 2000:3000 o
stat -c '%a %u %g %Y' o
touch g && chmod 6745 g && chown 2000 g && mkdir sd && chmod 6755 sd && chown 5 sd
stat -c '%a' g sd
mkdir dd && chmod 000 dd
r touch dd/x
r ls dd
r rm dd/x
r rmdir dd
r test -d dd
"#;

/// A root process that dropped CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
const READ_WITHOUT_DAC_CAPS: &str = "setpriv --bounding-set -dac_override,-dac_read_search cat z";

#[test]
fn root_private_mount_goes_without_default_permissions() {
    if !fuse_usable() || !tool("setpriv", "apt-get install -y util-linux") {
        return;
    }
    if !is_root() {
        return;
    }
    let (expected, tmpfs_no_caps) = on_tmpfs("rootref", |dir| {
        (sh(dir, ROOT_STEPS), Command::new("sh").args(["-c", READ_WITHOUT_DAC_CAPS]).current_dir(dir).output().unwrap())
    });
    assert!(expected.contains("refused: ./f") && expected.contains("ok: cat z"), "reference:\n{expected}");
    assert!(!tmpfs_no_caps.status.success(), "without CAP_DAC_OVERRIDE root read a mode-000 file on tmpfs");

    let options = |m: &Mount| -> String {
        let mounts = fs::read_to_string("/proc/mounts").unwrap();
        let dir = m.dir.to_str().unwrap();
        let line = mounts.lines().find(|l| l.split(' ').nth(1) == Some(dir)).expect("mount in /proc/mounts");
        line.split(' ').nth(3).unwrap().to_string()
    };

    let pool = Pool::new("rootpriv");
    let m = Mount::new(&pool, "");
    assert!(!options(&m).split(',').any(|o| o == "default_permissions"), "{}", options(&m));
    assert!(m.log_text().contains("private to root, without default_permissions"), "log:\n{}", m.log_text());
    assert_eq!(sh(&m.dir, ROOT_STEPS), expected, "root on the private mount and on tmpfs differ");
    // The documented difference: the kernel no longer holds a root process
    // without its DAC capabilities to the mode bits.
    let out = Command::new("sh").args(["-c", READ_WITHOUT_DAC_CAPS]).current_dir(&m.dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    m.unmount();

    // -o default_permissions brings the kernel's checks back.
    let m = Mount::new(&pool, "default_permissions");
    assert!(options(&m).split(',').any(|o| o == "default_permissions"), "{}", options(&m));
    assert!(!m.log_text().contains("without default_permissions"), "log:\n{}", m.log_text());
    let out = Command::new("sh").args(["-c", READ_WITHOUT_DAC_CAPS]).current_dir(&m.dir).output().unwrap();
    assert!(!out.status.success(), "default_permissions let a root process without CAP_DAC_OVERRIDE read z");
    m.unmount();

    // Other users let in: the kernel checks, whatever the mounter.
    let m = Mount::new(&pool, "allow_other");
    assert!(options(&m).split(',').any(|o| o == "default_permissions"), "{}", options(&m));
    m.unmount();
    pool.fsck_clean();
}

/// Writes, truncates, fallocates and chowns that take a file's privileges
/// away, run by root and by nobody (outside and inside the file's group),
/// printing each file's mode and whether its `security.capability` is left.
const PRIVILEGE_STEPS: &str = r#"
cap=0sAQAAAgAgAAAAAAAAAAAAAAAAAAA=
show() { printf '%s %s %s\n' "$1" "$(stat -c %a "$2")" "$(getfattr -n security.capability "$2" 2>/dev/null | grep -c security || true)"; }
mk() { rm -f "$1"; printf x > "$1"; chown "$3" "$1"; chmod "$2" "$1"; if [ "${4:-}" = cap ]; then setfattr -n security.capability -v "$cap" "$1"; fi; }
U="setpriv --reuid=65534 --regid=65534 --clear-groups --"
UG="setpriv --reuid=65534 --regid=65534 --groups=100 --"
mk a 6777 0:0; $U sh -c 'printf y >> a'; show user-write a
mk a 2767 0:0; $U sh -c 'printf y >> a'; show user-write-sgid-outside-group a
mk a 2767 0:100; $UG sh -c 'printf y >> a'; show user-write-sgid-in-supplementary-group a
mk a 6777 0:0; $U sh -c 'printf "" >> a'; show user-write-nothing a
mk a 6777 0:0; $U truncate -s 1 a; show user-truncate-same-size a
mk a 6777 0:0; $U sh -c ': > a'; show user-o-trunc a
mk a 6777 0:0; $U sh -c 'exec 3<>a'; show user-open-rw a
mk a 6777 0:0; $U fallocate -l 8192 a; show user-fallocate a
mk a 2767 0:100; $UG fallocate -l 8192 a; show user-fallocate-sgid-in-group a
mk a 6777 0:0 cap; $U fallocate -p -o 4096 -l 4096 a; show user-punch-past-eof a
mk a 6755 0:0 cap; printf y >> a; show root-write a
mk a 6755 0:0 cap; truncate -s 0 a; show root-truncate a
mk a 6755 0:0 cap; fallocate -l 8192 a; show root-fallocate a
mk a 6755 0:0 cap; chown 0:0 a; show root-chown a
mk a 6745 0:0; chown 65534 a; show root-chown-sgid-without-group-x a
mk a 6755 0:0 cap; chmod 6775 a; touch a; setfattr -n user.x -v 1 a; show chmod-touch-setxattr a
mkdir -p d; chmod 6777 d; chown 65534 d; show root-chown-dir d
noop() { t=$(stat -c %z "$2"); sleep 0.01; ${3:-} perl -e 'chown(-1, -1, $ARGV[0]) or die "$!"' "$2"; [ "$(stat -c %z "$2")" != "$t" ] && m=moved || m=kept; printf '%s ctime %s\n' "$1" "$m"; show "$1" "$2"; }
mk a 755 0:0; noop root-chown-nothing a
mk a 755 65534:65534; noop user-chown-nothing a "$U"
"#;

#[test]
fn privileges_dropped_as_on_tmpfs() {
    if !fuse_usable()
        || !tool("setpriv", "apt-get install -y util-linux")
        || !tool("fallocate", "apt-get install -y util-linux")
        || !tool("setfattr", "apt-get install -y attr")
    {
        return;
    }
    if !is_root() {
        return;
    }
    let expected = on_tmpfs("privref", |dir| sh(dir, PRIVILEGE_STEPS));
    // The reference shows what is being compared.
    assert!(expected.contains("user-write 777 0\n") && expected.contains("root-write 6755 0\n"), "{expected}");
    let pool = Pool::new("privileges");
    let m = Mount::new(&pool, "allow_other");
    fs::set_permissions(&m.dir, fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(sh(&m.dir, PRIVILEGE_STEPS), expected, "privileges dropped on the mount and on tmpfs differ");
    m.unmount();
    pool.fsck_clean();
}
