//! A preloaded program killed with SIGKILL at a random moment leaves a pool
//! that the next program recovers: sqlite3 in the middle of a stream of
//! transactions and fio in the middle of random writes, killed 100 times
//! each (FERRITE_KILL_ROUNDS changes the count). After every kill the pool
//! passes fsck, and the next program mounts it (recovering it) and finds
//! what it expects: sqlite's `integrity_check` is ok and the table holds
//! whole transactions only; fio runs again. Every tenth round the killed
//! owner also served the FUSE mount, and the next owner must remove the
//! dead mount it left.
//!
//! The kill times come from one seed, printed; FERRITE_KILL_SEED=N replays
//! a run.

mod common;

use common::{run, tool, Env};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Rounds and the seed of the kill times.
fn plan() -> (usize, u64) {
    let rounds = std::env::var("FERRITE_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let seed = std::env::var("FERRITE_KILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
    });
    eprintln!("kill test: {rounds} rounds, FERRITE_KILL_SEED={seed}");
    (rounds, seed)
}

/// xorshift64*: reproducible delays from the printed seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Start `c` in a process group of its own, let it run for `delay`, kill
/// the owner with SIGKILL and reap it, then kill what it forked (fio's jobs
/// wait for a dead parent forever).
fn kill_after(c: &mut Command, delay: Duration) {
    use std::os::unix::process::CommandExt;
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).process_group(0).spawn().expect("start");
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    // SAFETY: signalling the process group we created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
}

/// Kill every process whose command line mentions `marker` (fio's jobs
/// start sessions of their own, out of the process group).
fn kill_mentioning(marker: &str) {
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(marker) {
            // SAFETY: signalling a process of this test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Every tenth round the owner serves the mount too.
fn mount_in(round: usize) -> bool {
    round % 10 == 9
}

#[test]
fn sqlite3_killed_mid_transaction() {
    if !tool("sqlite3") {
        return;
    }
    if !common::fuse_usable() {
        return;
    }
    let (rounds, seed) = plan();
    let mut rng = seed | 1;
    let base = Env::new("kill-sqlite", false);
    let db = base.root.join("k.db");
    // Transactions of exactly 100 rows each, many more than one round
    // gets through.
    let mut script = String::from("PRAGMA journal_mode=WAL;\nCREATE TABLE IF NOT EXISTS t(k INTEGER, v TEXT);\n");
    for t in 0..2000 {
        script.push_str("BEGIN;\n");
        for r in 0..100 {
            script.push_str(&format!("INSERT INTO t VALUES({}, '{}');\n", t * 100 + r, "v".repeat(r)));
        }
        script.push_str("COMMIT;\n");
    }
    let sql = base.tmpfs.join("stream.sql");
    std::fs::write(&sql, script).unwrap();
    // The table exists before the first kill (a kill before its CREATE
    // would leave no table to check), and again after each fresh start.
    let create = "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS t(k INTEGER, v TEXT);";
    run(base.preloaded("sqlite3").arg(&db).arg(create));
    for round in 0..rounds {
        let env = &base;
        if round % 20 == 19 {
            // Start over now and then, so the database never fills the
            // pool (on a full pool even a truncate needs a log page: see
            // docs/PRELOAD.md).
            let wal = format!("{}-wal", db.display());
            let shm = format!("{}-shm", db.display());
            let journal = format!("{}-journal", db.display());
            run(env.preloaded("rm").arg("-f").arg(&db).args([&wal, &shm, &journal]));
            run(env.preloaded("sqlite3").arg(&db).arg(create));
        }
        let delay = Duration::from_millis(20 + next(&mut rng) % 150);
        // Alternate journal modes so both recover from kills.
        let mut c = env.preloaded_with("sqlite3", mount_in(round));
        if round % 2 == 1 {
            c.arg("-cmd").arg("PRAGMA journal_mode=DELETE;");
        }
        kill_after(c.arg(&db).arg(format!(".read {}", sql.display())), delay);
        env.fsck_if_made();
        let check = env.preloaded("sqlite3").arg(&db).arg("PRAGMA integrity_check; SELECT count(*) FROM t;").output();
        let check = check.expect("start sqlite3");
        if !check.status.success() && std::env::var_os("FERRITE_KILL_KEEP").is_some() {
            std::fs::copy(&env.pool, "/tmp/ferrite-kill-kept.pool").unwrap();
        }
        assert!(
            check.status.success(),
            "round {round} (FERRITE_KILL_SEED={seed}, mount {}, DELETE mode {}): sqlite3 after the kill: {}",
            mount_in(round),
            round % 2 == 1,
            String::from_utf8_lossy(&check.stderr)
        );
        let out = String::from_utf8_lossy(&check.stdout).into_owned();
        if std::env::var_os("FERRITE_KILL_KEEP").is_some() && round + 1 == rounds {
            std::fs::copy(&env.pool, "/tmp/ferrite-kill-kept.pool").unwrap();
        }
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("ok"), "round {round} (FERRITE_KILL_SEED={seed}): {out}");
        let rows: u64 = lines.next().and_then(|l| l.parse().ok()).unwrap_or(u64::MAX);
        assert!(
            rows.is_multiple_of(100),
            "round {round} (FERRITE_KILL_SEED={seed}): {rows} rows is not whole transactions"
        );
    }
    assert!(base.fsck(), "the last program left the pool dirty");
}

#[test]
fn fio_killed_mid_write() {
    if !tool("fio") {
        return;
    }
    if !common::fuse_usable() {
        return;
    }
    let (rounds, seed) = plan();
    let mut rng = seed.rotate_left(17) | 1;
    let base = Env::new("kill-fio", false);
    for round in 0..rounds {
        let env = &base;
        let delay = Duration::from_millis(30 + next(&mut rng) % 200);
        let mut c = env.preloaded_with("fio", mount_in(round));
        c.args([
            "--name=kill",
            &format!("--directory={}", env.root.display()),
            "--ioengine=psync",
            "--rw=randrw",
            "--bs=4k",
            "--size=4m",
            "--numjobs=2",
            "--time_based",
            "--runtime=5",
        ]);
        if round % 2 == 0 {
            c.arg("--thread");
        }
        kill_after(&mut c, delay);
        kill_mentioning(&env.root.to_string_lossy());
        env.fsck_if_made();
    }
    // A last full run with verification on the recovered pool.
    let env = &base;
    let out = run(env.preloaded("fio").args([
        "--name=after",
        &format!("--directory={}", env.root.display()),
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--size=4m",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--thread",
        "--output-format=terse",
    ]));
    assert_eq!(out.split(';').nth(4), Some("0"), "fio reported errors after the kills: {out}");
    assert!(base.fsck(), "the last program left the pool dirty");
}
