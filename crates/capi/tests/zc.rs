//! Peek, patch and zero-copy mappings through libferrite.so, from C:
//!
//! - `tests/c/zc.c` on a handle of its own and under the preload library
//!   (on the program's own descriptors, through the preload handle):
//!   misuse (unpeek twice, a buffer patched twice or freed after its patch,
//!   a patch into a directory or through a read-only descriptor, a view
//!   past the end of the file, pointers that are not buffers) fails with a
//!   clear errno and changes neither the file nor the pool's free space;
//!   stores through a view fault (a forked child dies of SIGSEGV); a view
//!   keeps the bytes of its moment across write, truncate, close and
//!   unlink; patches (aligned, unaligned, growing the file) read back.
//!   Under the library also mmap: read-only and private mappings map the
//!   pool's pages (the pool file appears at their address in
//!   /proc/self/maps) and read the file's bytes; a read-only shared one
//!   follows a later write (moving onto the file's DRAM shadow), a private
//!   one does not; they refuse to become writable and to move, survive into a forked child as
//!   copies, are kept by a partial munmap and released by the last one; a
//!   private mapping's stores never reach the file; MAP_FIXED still works;
//!   a failed exec (the pool handed over and taken back) leaves a mapping
//!   and a peek readable as private copies.
//! - Python's `mmap` module under the library reads a file's bytes, and a
//!   read-only shared mapping (`ACCESS_READ`) follows a later write.
//! - `tests/c/zc_kill.c` killed with SIGKILL at random moments while it
//!   holds views, unpatched buffers and (under the library) mappings and
//!   rewrites a file by patches and writes: 50 kills, alternating the
//!   handle and the preload library (FERRITE_ZC_KILL_ROUNDS changes the
//!   count, FERRITE_ZC_KILL_SEED replays a run). After every kill fsck
//!   finds the recovered pool clean with no page leaked (the buffers'
//!   pages are free again), the pool mounts, and the file is whole: one
//!   byte value in every byte, never a torn patch.
//!
//! The C programs need a C compiler: without one the tests are skipped
//! with a message, or fail under CI=true.

mod common;

use common::{run, tool, Env};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Compile `tests/c/<name>.c` against ferrite.h and libferrite.so, with
/// warnings as errors, to a binary of the calling test's own (`test`): the
/// tests run in parallel in one process and each removes its binary when
/// done, so two tests sharing one path could remove each other's.
fn build(name: &str, test: &str) -> Option<PathBuf> {
    if !tool("cc") {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = common::library();
    let out = common::target_dir().join(format!("{test}-{}", std::process::id()));
    run(Command::new("cc")
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(dir.join("include"))
        .arg(dir.join("tests/c").join(format!("{name}.c")))
        .arg("-L")
        .arg(lib.parent().unwrap())
        .args(["-lferrite", "-o"])
        .arg(&out));
    Some(out)
}

/// The directory of the libferrite.so the preload runs use, so that the
/// program's own -lferrite resolves to the same file (one library loaded).
fn lib_path() -> PathBuf {
    common::library().parent().unwrap().to_path_buf()
}

#[test]
fn zero_copy_calls_on_a_handle() {
    let Some(exe) = build("zc", "zc-handle") else { return };
    let pool = format!("/dev/shm/ferrite-zc-handle-{}.pool", std::process::id());
    let out = run(Command::new(&exe).args(["handle", &pool]).env("LD_LIBRARY_PATH", lib_path()));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&exe);
    assert!(out.ends_with("zc: every check passed\n"), "{out}");
    assert!(out.contains("ok: a store through a view faults"), "{out}");
}

#[test]
fn zero_copy_calls_and_mappings_under_the_preload_library() {
    let Some(exe) = build("zc", "zc-preload") else { return };
    let env = Env::new("zc", false);
    let out =
        run(env.preloaded(exe.to_str().unwrap()).arg("preload").arg(&env.root).env("LD_LIBRARY_PATH", lib_path()));
    let _ = std::fs::remove_file(&exe);
    assert!(out.ends_with("zc: every check passed\n"), "{out}");
    assert!(out.contains("ok: a read-only mapping maps the pool's pages"), "{out}");
    assert!(env.fsck(), "the program's exit left the pool dirty");
}

#[test]
fn python_mmap_reads_a_file_under_the_preload_library() {
    if !tool("python3") {
        return;
    }
    let env = Env::new("zc-python", false);
    let script = r#"
import mmap, os, sys
path = os.path.join(sys.argv[1], "data")
body = bytes((i * 31 + 7) % 251 for i in range(300000))
with open(path, "wb") as f:
    f.write(body)
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert m[:] == body, "a read-only mapping differs from the file"
    with open(path, "r+b") as g:
        g.write(b"later")
    assert m[:5] == b"later", "a read-only shared mapping did not follow a later write"
    m.close()
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    m[0:4] = b"COPY"
    m.flush()
    m.close()
with open(path, "rb") as f:
    assert f.read(5) == b"later", "a private mapping's stores reached the file"
print("ok")
"#;
    let out = run(env.preloaded("python3").arg("-c").arg(script).arg(&env.root));
    assert_eq!(out, "ok\n");
    assert!(env.fsck(), "the program's exit left the pool dirty");
}

/// xorshift64*: reproducible kill times from the printed seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Mount the pool (recovering it), check that `/f` is whole, unmount.
fn check_file_whole(pool: &Path, round: usize, seed: u64) {
    use engine::{MountOptions, OpenFlags, PathFs, Session};
    let pmem = ferrite_pmem::Pmem::open_file(pool, 1 << 20).expect("open the pool");
    let s = Session::mount(pmem, &MountOptions::default())
        .unwrap_or_else(|e| panic!("round {round} (FERRITE_ZC_KILL_SEED={seed}): the pool does not mount: {e:?}"));
    if let Ok(fd) = s.open(b"/f", OpenFlags::RDONLY, 0) {
        let mut body = vec![0u8; 64 << 10];
        let n = s.pread(fd, &mut body, 0).expect("read f");
        // The file is empty only if the first write never happened.
        assert!(
            n == 0 || (n == body.len() && body.iter().all(|&b| b == body[0])),
            "round {round} (FERRITE_ZC_KILL_SEED={seed}): /f is torn after the kill ({n} bytes)"
        );
        s.close(fd).unwrap();
    }
    s.unmount().expect("unmount");
}

#[test]
fn kills_with_live_views_and_buffers_leave_a_clean_pool() {
    let Some(exe) = build("zc_kill", "zc-kill") else { return };
    let rounds = std::env::var("FERRITE_ZC_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50usize);
    let seed = std::env::var("FERRITE_ZC_KILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
    });
    eprintln!("zero-copy kill test: {rounds} rounds, FERRITE_ZC_KILL_SEED={seed}");
    let mut state = seed | 1;
    let env = Env::new("zc-kill", false);
    for round in 0..rounds {
        let preload = round % 2 == 1;
        let mut c = if preload {
            let mut c = env.preloaded(exe.to_str().unwrap());
            c.arg("preload").arg(&env.root);
            c
        } else {
            let mut c = Command::new(&exe);
            c.arg("handle").arg(&env.pool);
            c
        };
        c.arg(next(&mut state).to_string()).env("LD_LIBRARY_PATH", lib_path());
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start zc_kill");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("read zc_kill's output");
        if line != "running\n" {
            let out = child.wait_with_output().unwrap();
            panic!(
                "round {round} (FERRITE_ZC_KILL_SEED={seed}): zc_kill stopped before running ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_micros(next(&mut state) % 30_000));
        child.kill().expect("SIGKILL");
        let status = child.wait().unwrap();
        // SIGKILL, or an exit on its own (a torn view is status 3).
        assert!(
            std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGKILL),
            "round {round} (FERRITE_ZC_KILL_SEED={seed}): zc_kill ended by itself ({status})"
        );
        let clean = env.fsck();
        assert!(!clean, "round {round}: a killed program left a pool marked clean");
        check_file_whole(&env.pool, round, seed);
    }
    let _ = std::fs::remove_file(&exe);
}
