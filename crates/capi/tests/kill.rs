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
//! And that SQLite needs no journal on an fsync-atomic file: a database with
//! `journal_mode=OFF` and `synchronous=FULL`, made fsync-atomic by the
//! preload library's `FERRITE_ATOMIC='*.db'` (the program is not changed),
//! is killed in the middle of a stream of transactions 100 times; after
//! every kill `integrity_check` is ok and the database holds exactly the
//! transactions whose COMMIT had returned, plus, or not, the one in flight,
//! as a whole (the driver, `tests/py/sqlite_atomic.py`, rebuilds the
//! expected rows from the seed). FERRITE_KILL_STRICT_DEMO=1 runs the same
//! driver on a strict file too and prints how many rounds came back damaged
//! (a measurement, not a test: docs/TESTING.md quotes it).
//!
//! And the buffered guarantee under kills: the same driver with SQLite's
//! WAL journal and synchronous=FULL (and, every other round, the DELETE
//! journal and synchronous=EXTRA, since there the unlink of the journal
//! commits and only EXTRA syncs the directory after it) on a buffered
//! mount (`FERRITE_MODE=buffered`, FERRITE_KILL_ROUNDS/2 kills):
//! every COMMIT's fsync makes everything before it durable, so after each
//! kill the database is whole and holds exactly the transactions whose
//! COMMIT had returned, plus, or not, the one in flight; and what the
//! program did after its last fsync comes back as a prefix, which SQLite's
//! recovery turns into that state.
//!
//! And LMDB (Python's binding) killed in the middle of a stream of write
//! transactions, in its default mode and with MDB_WRITEMAP: the
//! environment holds exactly the transactions whose commit had returned,
//! plus, or not, the one in flight.
//!
//! The kill times come from one seed, printed; FERRITE_KILL_SEED=N replays
//! a run.

mod common;

use common::{run, tool, Env};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
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
    let mut rows_last = 0u64;
    for round in 0..rounds {
        let env = &base;
        if round % 20 == 19 || rows_last >= SQLITE_CLI_ROWS_MAX {
            // Start over now and then, and before the database grows near
            // the pool's size (on a full pool even a truncate needs a log
            // page: see docs/PRELOAD.md).
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
        rows_last = rows;
    }
    assert!(base.fsck(), "the last program left the pool dirty");
}

/// The most rows `sqlite3_killed_mid_transaction`'s database may hold
/// before it starts over: about a third of its 64 MiB pool. A round adds
/// up to about 80,000 rows on the Zen 5 VM, where 19 rounds without this
/// bound reached 974,000 rows and left 1,252 of the pool's 16,384 pages
/// free (so the twentieth-round reset alone had less than one round to
/// spare on a faster machine).
const SQLITE_CLI_ROWS_MAX: u64 = 350_000;

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

/// What the journal_mode=OFF rounds saw.
#[derive(Default, Debug)]
struct OffRounds {
    /// Rounds after which the database was exactly right.
    exact: usize,
    /// Of those, rounds in which the transaction in flight at the kill was
    /// found committed.
    in_flight_present: usize,
    /// Rounds after which it was not: each with what was wrong.
    damaged: Vec<String>,
    /// Transactions committed over all rounds.
    commits: u64,
}

/// Kill the journal_mode=OFF driver `rounds` times on a database made
/// fsync-atomic by FERRITE_ATOMIC (`atomic`) or left strict, checking the
/// database after each kill. Stops at the first damaged round when
/// `stop_at_damage`.
fn journal_off_rounds(name: &str, atomic: bool, rounds: usize, seed: u64, stop_at_damage: bool) -> OffRounds {
    kill_rounds(Env::new(name, false), atomic, |_| "OFF", rounds, seed, stop_at_damage)
}

/// The most transactions a kill round starts from before the database
/// starts over. The 64 MiB pool fills at about 35,800 of the driver's
/// transactions (an fsync-atomic database; 2026-11-28): SQLite's COMMIT then
/// fails with SQLITE_FULL, the driver exits, and the library's unmount at
/// exit commits the half-written transaction, as a clean unmount commits
/// every pending epoch (docs/PRELOAD.md), which the checker would take for
/// damage from the kill. A round adds up to about 3,000 on the Zen 5 VM,
/// where 20 rounds without this bound reached 31,000.
const DB_TRANSACTIONS_MAX: i64 = 15_000;

/// The rounds of `journal_off_rounds` in `base` (whose preloaded programs
/// may be buffered), with the journal mode `journal(round)`; with
/// `atomic` the database is made fsync-atomic. On a buffered mount the
/// checker must also find the mode `buffered`.
fn kill_rounds(
    base: Env,
    atomic: bool,
    journal: impl Fn(usize) -> &'static str,
    rounds: usize,
    seed: u64,
    stop_at_damage: bool,
) -> OffRounds {
    let mut rng = seed.rotate_left(29) | 1;
    let buffered = base.vars.iter().any(|(k, v)| k == "FERRITE_MODE" && v == "buffered");
    let db = base.root.join("off.db");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sqlite_atomic.py");
    let data_seed = (seed % 1_000_000).to_string();
    let mut seen = OffRounds::default();
    // The last transaction the database holds, as the previous check found.
    let mut last: i64 = -1;
    for round in 0..rounds {
        let env = &base;
        let journal = journal(round);
        let wal = format!("{}-wal", db.display());
        let shm = format!("{}-shm", db.display());
        let hot = format!("{}-journal", db.display());
        if round % 20 == 19 || last >= DB_TRANSACTIONS_MAX {
            // Start over now and then, and before the database grows near
            // the pool's size.
            run(env.preloaded("rm").arg("-f").arg(&db).args([&wal, &shm, &hot]));
            last = -1;
        }
        let mut c = env.preloaded_with("python3", mount_in(round));
        if atomic {
            c.env("FERRITE_ATOMIC", "*.db");
        }
        c.arg(&script).arg("run").arg(&db).arg(&data_seed).arg(journal);
        let (ready, committed) = run_then_kill(&mut c, Duration::from_millis(next(&mut rng) % 150));
        let context = format!("round {round} (FERRITE_KILL_SEED={seed}, mount {}, journal {journal})", mount_in(round));
        assert_eq!(ready, last, "{context}: the driver started from another transaction than the last check found");
        let returned = committed.unwrap_or(ready);
        seen.commits += (returned - ready) as u64;
        env.fsck_if_made();
        let out = env.preloaded("python3").arg(&script).arg("check").arg(&db).arg(&data_seed).arg(journal).output();
        let out = out.expect("start the checker");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let found = last_found(&text);
        let mode_ok =
            if buffered { text.contains("mode buffered") } else { !atomic || text.contains("mode fsync-atomic") };
        let ok = out.status.success()
            && text.contains("integrity ok")
            && text.contains("content ok")
            && (found == returned || found == returned + 1)
            && mode_ok;
        if ok {
            seen.exact += 1;
            seen.in_flight_present += usize::from(found == returned + 1);
            last = found;
            continue;
        }
        let what = format!(
            "{context}: COMMIT had returned for transactions up to {returned}; the checker says:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if stop_at_damage {
            panic!("{what}");
        }
        seen.damaged.push(what);
        // Start the next round from a fresh database.
        run(env.preloaded("rm").arg("-f").arg(&db).args([&wal, &shm, &hot]));
        last = -1;
    }
    assert!(base.fsck(), "the last program left the pool dirty");
    seen
}

/// The last transaction a kill test's checker found ("last N"), or -2
/// when it printed none.
fn last_found(checker_output: &str) -> i64 {
    checker_output.lines().find_map(|l| l.strip_prefix("last ")).and_then(|n| n.parse().ok()).unwrap_or(-2)
}

/// Start the driver, wait for its "ready N", let it run for `delay`, kill
/// it with SIGKILL, and return N and the last transaction it reported
/// committed (None: none in this round).
fn run_then_kill(c: &mut Command, delay: Duration) -> (i64, Option<i64>) {
    use std::os::unix::process::CommandExt;
    let mut child =
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn().expect("start");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("read the driver's output");
    let Some(ready) = first.trim().strip_prefix("ready ").and_then(|n| n.parse().ok()) else {
        let _ = child.kill();
        let o = child.wait_with_output().expect("reap the driver");
        panic!("the driver did not start: {first:?}\n{}", String::from_utf8_lossy(&o.stderr));
    };
    std::thread::sleep(delay);
    // A driver that ended before the kill failed on its own (a full pool,
    // say): report its error, not the damage the checker would find.
    if let Ok(Some(status)) = child.try_wait() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("the driver exited by itself ({status}) before it was killed:\n{err}");
    }
    let _ = child.kill();
    let _ = child.wait();
    // SAFETY: signalling the process group we created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    // What it printed before it died is in the pipe still.
    let committed = out
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("committed ").and_then(|n| n.parse::<i64>().ok()))
        .last();
    (ready, committed)
}

/// LMDB killed in the middle of a stream of write transactions
/// (`tests/py/lmdb_kill.py`), alternating its default mode (pwrite, and
/// reads through a read-only shared mapping that must follow them) and
/// MDB_WRITEMAP (stores through a writable shared mapping, which the
/// library's shadow writes back at LMDB's msync): after every kill the
/// pool passes fsck and the environment holds exactly the transactions
/// whose commit had returned, plus, or not, the one in flight. Half of
/// FERRITE_KILL_ROUNDS.
#[test]
fn lmdb_killed_mid_transaction() {
    let Some(python) = common::python_with_lmdb() else { return };
    if !common::fuse_usable() {
        return;
    }
    let (rounds, seed) = plan();
    let rounds = rounds.div_ceil(2);
    let mut rng = seed.rotate_left(17) | 1;
    let env = Env::new("kill-lmdb", false);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/lmdb_kill.py");
    let data_seed = (seed % 1_000_000).to_string();
    // One environment per mode (MDB_WRITEMAP sizes its file to the whole
    // map), each with the last transaction its previous check found.
    let mut last = [-1i64; 2];
    let mut commits = [0u64; 2];
    for round in 0..rounds {
        let mode = round % 2;
        let writemap = if mode == 1 { "1" } else { "0" };
        let dir = env.root.join(if mode == 1 { "writemap" } else { "default" });
        if round < 2 || last[mode] >= LMDB_TRANSACTIONS_MAX {
            // Start over before the environment fills its map.
            run(env.preloaded("rm").arg("-rf").arg(&dir));
            run(env.preloaded("mkdir").arg(&dir));
            last[mode] = -1;
        }
        let mut c = env.preloaded_with(python, mount_in(round));
        c.arg(&script).arg("run").arg(&dir).arg(&data_seed).arg(writemap);
        // A commit with MDB_WRITEMAP compares the map with the file (tens
        // of ms in a debug build); one without takes tens of µs.
        let delay_ms = if mode == 1 { 20 + next(&mut rng) % 150 } else { 1 + next(&mut rng) % 12 };
        let (ready, committed) = run_then_kill(&mut c, Duration::from_millis(delay_ms));
        let context =
            format!("round {round} (FERRITE_KILL_SEED={seed}, mount {}, writemap {writemap})", mount_in(round));
        assert_eq!(
            ready, last[mode],
            "{context}: the driver started from another transaction than the last check found"
        );
        let returned = committed.unwrap_or(ready);
        commits[mode] += (returned - ready) as u64;
        env.fsck_if_made();
        let out = env.preloaded(python).arg(&script).arg("check").arg(&dir).arg(&data_seed).arg(writemap).output();
        let out = out.expect("start the checker");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let found = last_found(&text);
        assert!(
            out.status.success() && text.contains("content ok") && (found == returned || found == returned + 1),
            "{context}: the commit had returned for transactions up to {returned}; the checker says:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        last[mode] = found;
    }
    assert!(
        commits.iter().all(|&c| c > 0),
        "no transaction committed in any round of a mode ({commits:?}): the kills came too early to test anything"
    );
    eprintln!(
        "lmdb: {rounds} kills, every environment exact ({} commits in the default mode, {} with MDB_WRITEMAP)",
        commits[0], commits[1]
    );
    assert!(env.fsck(), "the last program left the pool dirty");
}

/// The most transactions an LMDB kill round starts from before the
/// environment starts over: with a round's 1,000 at most, about half of
/// its 32 MiB map (a transaction adds about 7 KiB of values).
const LMDB_TRANSACTIONS_MAX: i64 = 1000;

#[test]
fn sqlite3_journal_off_on_fsync_atomic_file_killed_mid_transaction() {
    if !tool("python3") || !common::fuse_usable() {
        return;
    }
    let (rounds, seed) = plan();
    let seen = journal_off_rounds("kill-off-atomic", true, rounds, seed, true);
    eprintln!(
        "journal_mode=OFF on an fsync-atomic file: {} kills, every database exact ({} commits; the transaction \
         in flight was found committed after {} kills, absent after {})",
        rounds,
        seen.commits,
        seen.in_flight_present,
        seen.exact - seen.in_flight_present
    );
    assert!(seen.commits > 0, "no transaction committed in any round: the kills came too early to test anything");
    if std::env::var_os("FERRITE_KILL_STRICT_DEMO").is_some_and(|v| v == "1") {
        let strict = journal_off_rounds("kill-off-strict", false, rounds, seed, false);
        eprintln!(
            "journal_mode=OFF on a strict file (no journal, no atomic fsync): {} of {} kills left a damaged \
             or wrong database ({} commits)",
            strict.damaged.len(),
            rounds,
            strict.commits
        );
        for d in strict.damaged.iter().take(3) {
            eprintln!("  {d}");
        }
    }
}

#[test]
fn sqlite3_wal_and_delete_on_a_buffered_mount_killed_mid_transaction() {
    if !tool("python3") || !common::fuse_usable() {
        return;
    }
    let (rounds, seed) = plan();
    let rounds = rounds.div_ceil(2);
    let journal = |round: usize| if round.is_multiple_of(2) { "WAL" } else { "DELETE" };
    let seen = kill_rounds(Env::buffered("kill-buffered", false), false, journal, rounds, seed, true);
    eprintln!(
        "sqlite3 (WAL and DELETE) on a buffered mount: {} kills, every database exact ({} commits; the \
         transaction in flight was found committed after {} kills, absent after {})",
        rounds,
        seen.commits,
        seen.in_flight_present,
        seen.exact - seen.in_flight_present
    );
    assert!(seen.commits > 0, "no transaction committed in any round: the kills came too early to test anything");
}
