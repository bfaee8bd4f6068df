//! The two transports (docs/FUSE.md, "Transports"): FUSE over io_uring and
//! /dev/fuse. Proves that
//! - the mount says which transport serves it, and `transport=dev` and
//!   `transport=uring` get what they ask for;
//! - with the kernel's module setting off, `transport=auto` falls back to
//!   /dev/fuse and works, and `transport=uring` refuses to mount, naming
//!   the setting;
//! - the same file-system work gives the same tree on both transports
//!   (names, sizes, modes, bytes, xattrs, a rename over a file, a listing
//!   of 600 entries across several READDIR replies, the set-ID bits dropped
//!   by an unprivileged write);
//! - a daemon SIGKILLed in the middle of a workload, on each transport,
//!   leaves a pool that mounts (recovering) and that fsck finds clean.
//!
//! The whole FUSE suite also runs once per transport: `scripts/test.sh`
//! (the README's test command) runs it again with
//! FERRITE_FUSE_TRANSPORT=dev when io_uring served the first run.
//!
//! These tests change a kernel module setting for the whole machine, so
//! they hold one lock among themselves; cargo runs test binaries one after
//! another, so no other FUSE test mounts meanwhile. The setting is put back
//! as it was.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Serializes the tests of this file (they may flip the module setting).
static SETTING: Mutex<()> = Mutex::new(());

fn setting() -> Option<String> {
    fs::read_to_string(PARAM).ok().map(|s| s.trim().to_string())
}

/// Set the module setting; false if this kernel has none or it cannot be
/// written.
fn set_setting(on: bool) -> bool {
    fs::write(PARAM, if on { "Y" } else { "N" }).is_ok() && setting().as_deref() == Some(if on { "Y" } else { "N" })
}

/// Restores the module setting when dropped.
struct Restore(Option<String>);
impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(v) = &self.0 {
            let _ = fs::write(PARAM, v);
        }
    }
}

/// Can this machine serve a mount over io_uring? (Turns the setting on if
/// it can; the caller's Restore puts it back.) Says why not when not.
fn uring_available() -> bool {
    if setting().is_none() {
        eprintln!("SKIP (io_uring part): this kernel has no {PARAM} (FUSE over io_uring needs Linux 6.14+)");
        return false;
    }
    if !set_setting(true) {
        eprintln!("SKIP (io_uring part): cannot turn on {PARAM}");
        return false;
    }
    true
}

/// The same work on any mount: returns a manifest of what it left.
fn workload(root: &Path) -> String {
    let d = root.join("w");
    fs::create_dir(&d).unwrap();
    for i in 0..600 {
        fs::write(d.join(format!("entry-{i:04}")), format!("{i}").repeat(i % 7)).unwrap();
    }
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(d.join("big"), &big).unwrap();
    assert_eq!(fs::read(d.join("big")).unwrap(), big, "a 3 MB file reads back as written");
    fs::rename(d.join("entry-0001"), d.join("entry-0002")).unwrap();
    fs::remove_file(d.join("entry-0003")).unwrap();
    std::os::unix::fs::symlink("big", d.join("link")).unwrap();
    fs::set_permissions(d.join("entry-0004"), fs::Permissions::from_mode(0o640)).unwrap();
    sh(&d, "setfattr -n user.color -v blue entry-0005 2>/dev/null || true");
    // An unprivileged write drops the set-ID bits (FUSE_HANDLE_KILLPRIV_V2:
    // the daemon does it, and the kernel must not serve the old mode).
    let s = d.join("setid");
    fs::write(&s, b"x").unwrap();
    sh(&d, "chown nobody setid && chmod 6775 setid && su -s /bin/sh nobody -c 'echo y >> setid'");
    let mode = fs::metadata(&s).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o775, "an unprivileged write must drop set-user-ID and set-group-ID");
    let listed = fs::read_dir(&d).unwrap().count();
    assert_eq!(listed, 600 - 2 + 3, "the listing has every entry once");
    manifest(&d) + &sh(&d, "getfattr -d entry-0005 2>/dev/null || echo no getfattr")
}

/// Mount with `opts`, run the workload, check the log names `transport`,
/// unmount cleanly, fsck. Returns the manifest.
fn run_on(opts: &str, transport: &str) -> String {
    let pool = Pool::new("transport");
    // allow_other (for `nobody`) without auto_unmount, which makes `auto`
    // settle for /dev/fuse (tested below).
    let m = Mount::new(&pool, &format!("allow_other,noauto_unmount,{opts}"));
    let log = m.log_text();
    assert!(log.contains(transport), "expected `{transport}` in the mount's log:\n{log}");
    let manifest = workload(&m.dir);
    m.unmount();
    assert!(pool.marked_clean());
    pool.fsck_clean();
    manifest
}

#[test]
fn both_transports_serve_the_same_tree() {
    if !fuse_usable() {
        return;
    }
    let _g = SETTING.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(setting());
    let dev = run_on("transport=dev", "transport /dev/fuse");
    if !uring_available() {
        return;
    }
    let uring = run_on("transport=uring", "transport io_uring");
    assert_eq!(dev, uring, "the same work must leave the same tree on both transports");
    // auto picks io_uring when the setting allows it. (Named explicitly:
    // the suite's second run sets FERRITE_FUSE_TRANSPORT=dev, which only
    // changes the default.)
    let auto = run_on("transport=auto", "transport io_uring");
    assert_eq!(dev, auto);
    // ... but /dev/fuse when fusermount3's auto_unmount is on: after a
    // daemon serving over io_uring dies, opening the mount fails with
    // ECONNABORTED rather than the ENOTCONN fusermount3 looks for, so it
    // would leave the dead mount (see basic.rs for the kill itself).
    if tool("fusermount3", "apt-get install -y fuse3") {
        let pool = Pool::new("auto-unmount");
        let m = Mount::new(&pool, "allow_other,auto_unmount,transport=auto");
        let log = m.log_text();
        assert!(log.contains("transport /dev/fuse") && log.contains("auto_unmount is on"), "{log}");
        m.unmount();
    }
}

#[test]
fn auto_falls_back_to_dev_fuse_when_the_setting_is_off() {
    if !fuse_usable() {
        return;
    }
    let _g = SETTING.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(setting());
    if setting().is_none() {
        eprintln!("SKIP: this kernel has no {PARAM}: /dev/fuse is the only transport (the other tests use it)");
        return;
    }
    assert!(set_setting(false), "cannot turn {PARAM} off");
    let pool = Pool::new("fallback");
    let m = Mount::new(&pool, "transport=auto");
    let log = m.log_text();
    assert!(log.contains("transport /dev/fuse"), "{log}");
    assert!(log.contains("enable_uring is off"), "the daemon says why it fell back:\n{log}");
    fs::write(m.path("f"), b"served over /dev/fuse").unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"served over /dev/fuse");
    m.unmount();
    pool.fsck_clean();

    // transport=uring refuses, naming the setting, and leaves nothing
    // mounted.
    let dir = new_dir("refused");
    let out = std::process::Command::new(BIN)
        .arg(&pool.path)
        .arg(&dir)
        .args(["-o", "foreground,transport=uring"])
        .output()
        .expect("run ferrite-fuse");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "transport=uring mounted with the setting off:\n{text}");
    assert!(text.contains("enable_uring"), "the refusal names the setting:\n{text}");
    assert!(ferrite_fuse::daemon::fuse_mount_at(&dir).is_none(), "a refused mount left a mount behind");
    assert!(pool.marked_clean(), "a refused mount must leave the pool clean");
    pool.fsck_clean();
}

/// SIGKILL the daemon while a shell loop creates, writes, renames and
/// removes files; the next mount recovers and fsck is clean.
fn kill_mid_workload(opts: &str) {
    let pool = Pool::new("kill");
    let dir = new_dir("kill");
    let m = Mount::at(&pool, &dir, &format!("noauto_unmount,{opts}"), &[]);
    let script = "i=0; while true; do i=$((i+1)); head -c $((i % 9000)) /dev/urandom > f$((i % 50)); \
                  mv f$((i % 50)) g$((i % 30)) 2>/dev/null; mkdir -p d$((i % 7)); rm -f g$((i % 11)); done";
    let mut load = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(env_num("FERRITE_FUSE_KILL_AFTER_MS", 1500)));
    // SAFETY: SIGKILL our own child.
    unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) };
    m.reap();
    let _ = load.kill();
    let _ = load.wait();
    let m = Mount::at(&pool, &dir, opts, &[]);
    assert!(m.log_text().contains("recovered"), "{}", m.log_text());
    let n = fs::read_dir(&dir).unwrap().count();
    assert!(n > 0, "the workload made files before the kill");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn sigkill_mid_workload_leaves_a_clean_pool_on_each_transport() {
    if !fuse_usable() {
        return;
    }
    let _g = SETTING.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(setting());
    kill_mid_workload("transport=dev");
    if uring_available() {
        kill_mid_workload("transport=uring");
    }
}
