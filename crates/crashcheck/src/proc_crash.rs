//! The process-crash test: a child process runs a seeded random workload on
//! a pool file in /dev/shm and is killed with SIGKILL at a random moment;
//! the pool must then mount, fsck clean, and hold the model's state after
//! k or k + 1 calls, where k is the number of calls the child reported
//! complete (it appends one line to a side file after each call returns).
//! The next child continues the workload on the recovered pool from the
//! call the state matched.
//!
//! Unlike the in-process harness this runs the real mapped pool, the real
//! flush and non-temporal instructions and a real process death (a process
//! crash, not a power failure: stores in the CPU caches survive it, so this
//! checks the engine's ordering of its own writes and recovery, not the
//! flushes).

use crate::exec::{build_start, clock_at, mount_options, record_model_call, Geometry, T_CALL};
use crate::hash::mix;
use crate::verify::fsck_clean;
use crate::workload::{random_call, run_call, Call, CallResult, Slots, StartKind};
use ferrite::{Errno, Session, TimeSpec};
use ferrite_model::{diff_trees, tree_of, ModelFs};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Geometry of the process-crash pool: bigger than the in-process one, with
/// two lanes (no token replay is needed here).
pub const PROC_GEOMETRY: Geometry = Geometry { pages: 1024, inodes: 256, lanes: 2 };

/// Calls in one process-crash workload (children continue it across kills).
pub const PROC_CALLS: usize = 1 << 40;

fn encode_result(r: &CallResult) -> String {
    match r {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {}", e.0),
    }
}

fn decode_result(s: &str) -> Option<CallResult> {
    let (k, v) = s.split_once(' ')?;
    match k {
        "ok" => v.parse().ok().map(Ok),
        "err" => v.parse().ok().map(|e| Err(Errno(e))),
        _ => None,
    }
}

/// `child POOL SEED FROM PROGRESS`: mount the pool, run calls FROM.. of the
/// random workload of SEED, appending "i result" to PROGRESS after each.
pub fn child_main(args: &[String]) -> i32 {
    let [pool, seed, from, progress] = args else {
        eprintln!("usage: child POOL SEED FROM PROGRESS");
        return 2;
    };
    let (Some(seed), Ok(from)) = (crate::workload::parse_u64(seed), from.parse::<usize>()) else {
        eprintln!("child: bad SEED or FROM");
        return 2;
    };
    let pmem = match Pmem::open_file(Path::new(pool), 0) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("child: open {pool}: {e}");
            return 3;
        }
    };
    let clock = clock_at(T_CALL - 1);
    let fs = match Session::mount(pmem, &mount_options(&clock, 1)) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("child: mount: {e}");
            return 4;
        }
    };
    let mut out = match std::fs::OpenOptions::new().append(true).create(true).open(progress) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("child: open {progress}: {e}");
            return 5;
        }
    };
    let mut slots = Slots::default();
    for i in from..PROC_CALLS {
        let c = &proc_call(seed, i);
        clock.set(call_time(i));
        let r = run_call(&fs, &mut slots, c);
        // One write(2) per line: a kill leaves whole lines only.
        if out.write_all(format!("{i} {}\n", encode_result(&r)).as_bytes()).is_err() {
            return 6;
        }
    }
    drop(fs);
    0
}

fn call_time(i: usize) -> TimeSpec {
    TimeSpec { sec: T_CALL + i as i64, nsec: 77 }
}

/// Call `i` of the process-crash workload of `seed`: the random generator,
/// each call drawn from its own seed (so that a child can start anywhere
/// without replaying the generator), with every slot guessed free.
pub fn proc_call(seed: u64, i: usize) -> Call {
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let open = [i.is_multiple_of(3); crate::workload::SLOTS];
    random_call(&mut rng, &open)
}

/// What a process-crash run found.
#[derive(Debug, Default)]
pub struct ProcReport {
    pub kills: usize,
    /// Kills that landed after the child had reported at least one call.
    pub kills_mid_workload: usize,
    pub calls_completed: usize,
    /// Recovered states equal to the model after k + 1 calls (the call in
    /// flight had completed but was not reported yet).
    pub matched_next: usize,
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

/// Run `kills` kill-and-recover rounds with the child binary `exe`.
pub fn run(exe: &Path, seed: u64, kills: usize, max_wait: Duration) -> ProcReport {
    let t0 = Instant::now();
    let mut rep = ProcReport::default();
    let dir = std::env::temp_dir();
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm } else { dir.as_path() };
    let tag = format!("ferrite-crashcheck-{}-{seed:x}", std::process::id());
    let pool: PathBuf = base.join(format!("{tag}.pool"));
    let progress: PathBuf = base.join(format!("{tag}.progress"));
    let start = match build_start(StartKind::Empty, PROC_GEOMETRY) {
        Ok(s) => s,
        Err(e) => {
            rep.failures.push(format!("building the start image: {e}"));
            return rep;
        }
    };
    if let Err(e) = std::fs::write(&pool, start.image.as_slice()) {
        rep.failures.push(format!("writing {}: {e}", pool.display()));
        return rep;
    }
    let clock = clock_at(T_CALL - 1);
    let model = ModelFs::from_state(start.model.clone(), clock.clone());
    let mut mslots = Slots::default();
    let mut done = 0usize; // calls applied to the model
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ 0x1C11));
    for round in 0..kills {
        let _ = std::fs::remove_file(&progress);
        let mut child = match Command::new(exe)
            .args([
                "child",
                &pool.to_string_lossy(),
                &format!("{seed:#x}"),
                &done.to_string(),
                &progress.to_string_lossy(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                rep.failures.push(format!("spawning the child: {e}"));
                break;
            }
        };
        // Let it run: mostly a few milliseconds (a few dozen calls), some
        // kills very early (during mount and recovery), some later.
        let max = max_wait.as_micros().max(2) as u64;
        let wait = match rng.gen_range(0..10) {
            0 => Duration::from_micros(rng.gen_range(0..max / 4)),
            1..=7 => Duration::from_micros(rng.gen_range(max / 4..max)),
            _ => Duration::from_micros(rng.gen_range(max..2 * max)),
        };
        std::thread::sleep(wait);
        let pid = child.id() as libc::pid_t;
        // SAFETY: sending SIGKILL to our own child process.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let status = child.wait();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        let killed =
            matches!(&status, Ok(s) if std::os::unix::process::ExitStatusExt::signal(s) == Some(libc::SIGKILL));
        if !killed {
            if let Ok(s) = &status {
                if !s.success() {
                    rep.failures.push(format!("round {round}: the child failed on its own ({s}): {}", stderr.trim()));
                    break;
                }
            }
        }
        rep.kills += 1;
        // What the child reported.
        let text = std::fs::read_to_string(&progress).unwrap_or_default();
        let mut reported: Vec<(usize, CallResult)> = Vec::new();
        for line in text.lines() {
            let Some((i, r)) = line.split_once(' ') else { continue };
            let (Ok(i), Some(r)) = (i.parse::<usize>(), decode_result(r)) else {
                continue;
            };
            reported.push((i, r));
        }
        if !reported.is_empty() {
            rep.kills_mid_workload += 1;
        }
        // Bring the model along the reported calls, comparing results.
        let mut fail = None;
        for (i, r) in &reported {
            if *i != done {
                fail = Some(format!("round {round}: the child reported call {i}, expected {done}"));
                break;
            }
            let m = record_model_call(&model, &clock, &mut mslots, &proc_call(seed, *i), call_time(*i), r);
            if let Err(msg) = m {
                fail = Some(format!("round {round}: call {i} `{}`: {msg}", proc_call(seed, *i)));
                break;
            }
            done += 1;
        }
        if let Some(f) = fail {
            rep.failures.push(f);
            break;
        }
        // The pool as the kill left it.
        let image = match std::fs::read(&pool) {
            Ok(i) => i,
            Err(e) => {
                rep.failures.push(format!("reading the pool: {e}"));
                break;
            }
        };
        let saved = || -> String {
            let keep = dir.join(format!("{tag}-round{round}.pool"));
            match std::fs::write(&keep, &image) {
                Ok(()) => format!("pool image saved as {}", keep.display()),
                Err(e) => format!("(could not save the pool image: {e})"),
            }
        };
        if let Err(m) = fsck_clean(&image) {
            rep.failures
                .push(format!("round {round} (seed {seed:#x}, killed after {done} reported calls): {m}\n{}", saved()));
            break;
        }
        let got = match crate::verify::mount(Pmem::from_image(&image), 1)
            .and_then(|fs| tree_of(&fs).map_err(|e| format!("tree: {e:?}")))
        {
            Ok(t) => t,
            Err(m) => {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}, killed after {done} reported calls): {m}\n{}",
                    saved()
                ));
                break;
            }
        };
        // The states after k and k + 1 calls, as a crash leaves them (every
        // descriptor closed); call k runs with the descriptors the child had.
        let snap = (model.snapshot(), std::mem::take(&mut mslots));
        model.close_all();
        let after_k = model.tree();
        if got != after_k {
            model.restore(snap.0.clone());
            let mut s2 = snap.1.clone();
            clock.set(call_time(done));
            let _ = run_call(&model, &mut s2, &proc_call(seed, done));
            model.close_all();
            let after_k1 = model.tree();
            if got == after_k1 {
                rep.matched_next += 1;
                done += 1;
            } else {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}): killed after {done} reported calls; the recovered state is neither the model's after {done} calls nor after {} (call {done} is `{}`)\n  --- after {done} calls:\n{}  --- after {} calls:\n{}{}",
                    done + 1,
                    proc_call(seed, done),
                    diff_trees(&after_k, &got),
                    done + 1,
                    diff_trees(&after_k1, &got),
                    saved()
                ));
                break;
            }
        }
        if done >= PROC_CALLS {
            break;
        }
    }
    rep.calls_completed = done;
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&progress);
    rep.elapsed = t0.elapsed();
    rep
}
