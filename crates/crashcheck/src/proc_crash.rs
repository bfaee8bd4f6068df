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
//!
//! With the consistency modes mixed (`modes`): `/foo`, `/A/foo` and
//! `/A/bar` start fsync-atomic, and the workload also changes modes, the
//! default mode and syncs ([`crate::workload::random_call_modes`]). The
//! recovered state must then be one the fsync-atomic oracle allows
//! ([`crate::oracle`]): the durable state after k calls, or one allowed
//! inside call k. A crash loses the pending changes of fsync-atomic files,
//! which the model (it has no modes) still shows; before the next child
//! starts, the parent puts them back on the recovered pool through the
//! engine (content, allocated pages, times; ctime from the clock) and
//! unmounts it cleanly, and checks that the pool then equals the model.
//! Pages preallocated past the end of a file could not be put back at
//! their places, so this workload's fallocate never keeps the size.
//!
//! With peek and patch (`zc`, [`Mix::ZeroCopy`]): strict files, and the
//! calls of [`crate::workload::random_call_zc`] beside the strict ones. On
//! the pool file a view maps the pool's pages and a patch buffer is pool
//! pages the child fills with ordinary stores, so the child is killed
//! holding views, private writable mappings (stored into) and buffers
//! filled but never patched; after each kill the recovered pool must also
//! pass the usability pass of [`crate::verify`] on a copy (nothing leaked:
//! with everything deleted, the free pages and inodes of a fresh pool).
//!
//! On a buffered mount (`buffered`, [`Mix::Buffered`]; issue 13): the child
//! mounts with the default [`ferrite::BufferedOptions`] (a persister thread
//! and a lag bound of a few milliseconds) and runs
//! [`crate::workload::random_call_buffered`] (the strict calls plus sync,
//! fsync, fdatasync and O_SYNC/O_DSYNC writes). Its line for a call that is
//! a sync point and returned success ends with `synced` (the parent checks
//! that it agrees). After each kill the recovered tree must be the model's
//! after some prefix of the calls from the last call the child reported
//! `synced` (everything up to it is durable) to the call in flight: calls
//! reported after the last sync point may be lost, in return order only.
//! The parent rebuilds those states from the model at the last sync point
//! and the results the child reported, continues from the longest prefix
//! that matches (the next child runs the lost calls again), and runs the
//! usability pass on a copy of the recovered pool.

use crate::exec::{build_start, clock_at, empty_figures, mount_options, record_model_call, Geometry, T_CALL};
use crate::hash::{mix, tree_key};
use crate::oracle::Tracker;
use crate::verify::fsck_clean;
use crate::workload::{
    atomic_prepare, random_call, random_call_buffered, random_call_modes, random_call_zc, run_call, Call, CallResult,
    Slots, StartKind,
};
use ferrite::{
    Errno, FallocateMode, FileMode, FileType, ManualClock, OpenFlags, PathFs, Session, TimeSet, TimeSpec, Whence,
};
use ferrite_model::{diff_trees, tree_of, ModelFs, Tree};
use ferrite_pmem::Pmem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Geometry of the process-crash pool: bigger than the in-process one, with
/// two lanes (no token replay is needed here).
pub const PROC_GEOMETRY: Geometry = Geometry { pages: 1024, inodes: 256, lanes: 2 };

/// Calls in one process-crash workload (children continue it across kills).
pub const PROC_CALLS: usize = 1 << 40;

/// Which calls a process-crash workload is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// [`random_call`]: every file strict.
    Strict,
    /// [`random_call_modes`]: the consistency modes mixed (see the module
    /// comment).
    Modes,
    /// [`random_call_zc`]: peek and patch beside the strict calls; the
    /// child holds live views, private mappings and filled buffers never
    /// patched when it is killed (they map pool pages of the pool file).
    ZeroCopy,
    /// [`random_call_buffered`] on a buffered mount with the default
    /// options (a persister thread, a lag bound of a few milliseconds):
    /// the recovered state must be the model's after a prefix of the calls
    /// that contains every call the child reported before a sync point it
    /// reported (see the module comment).
    Buffered,
}

impl Mix {
    /// The child's argument (none for strict).
    fn arg(self) -> Option<&'static str> {
        match self {
            Mix::Strict => None,
            Mix::Modes => Some("modes"),
            Mix::ZeroCopy => Some("zc"),
            Mix::Buffered => Some("buffered"),
        }
    }
}

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

/// The environment variable (a call number N) that makes the child kill
/// itself right after the first call from N on that changed a file's
/// consistency mode returned, or after call N + `DIE_AFTER_LOOKAHEAD`
/// returned, before it reports it: the call completed, and the parent must
/// find that out from the pool alone. A completed mode change shows in the
/// tree only as a ctime, which fsync-atomic files may lose; the parent must
/// see it in the file's mode. The parent sets it on some rounds with the
/// modes mixed.
pub const DIE_AFTER_ENV: &str = "CRASHCHECK_CHILD_DIE_AFTER";

/// How many calls from N the child looks for a mode change to die after.
const DIE_AFTER_LOOKAHEAD: usize = 400;

/// How long the parent waits for a child to die on its own.
const DIE_AFTER_WAIT: Duration = Duration::from_secs(10);

/// The consistency mode of the file open in the slot of `call`, if it is a
/// mode change on an open regular file.
fn mode_of_slot(fs: &Session, slots: &Slots, call: &Call) -> Option<FileMode> {
    let Call::SetMode { slot, .. } = call else { return None };
    let fd = slots.fds.get(*slot as usize).copied().flatten()?;
    let ino = fs.fstat(fd).ok()?.ino;
    fs.engine().file_mode_ino(ino).ok()
}

/// `child POOL SEED FROM PROGRESS [modes]`: mount the pool, run calls
/// FROM.. of the random workload of SEED (mixing the consistency modes with
/// `modes`), appending "i result" to PROGRESS after each.
pub fn child_main(args: &[String]) -> i32 {
    let (pool, seed, from, progress, mix) = match args {
        [pool, seed, from, progress] => (pool, seed, from, progress, Mix::Strict),
        [pool, seed, from, progress, m] if m == "modes" => (pool, seed, from, progress, Mix::Modes),
        [pool, seed, from, progress, m] if m == "zc" => (pool, seed, from, progress, Mix::ZeroCopy),
        [pool, seed, from, progress, m] if m == "buffered" => (pool, seed, from, progress, Mix::Buffered),
        _ => {
            eprintln!("usage: child POOL SEED FROM PROGRESS [modes|zc|buffered]");
            return 2;
        }
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
    let mut opts = mount_options(&clock, 1);
    if mix == Mix::Buffered {
        opts.buffered = Some(ferrite::BufferedOptions::default());
    }
    let fs = match Session::mount(pmem, &opts) {
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
    // From which call on the child kills itself right after a call returned
    // and before reporting it (the parent's window between a call's return
    // and its report, which timed kills rarely hit; see `DIE_AFTER_ENV`).
    let die_from: Option<usize> = std::env::var(DIE_AFTER_ENV).ok().and_then(|s| s.parse().ok());
    let mut slots = Slots::default();
    // The bytes each live view showed right after the call that made it
    // (by slot and identity): a view is a snapshot, so it must keep
    // showing them whatever later calls do to its file.
    let mut shown: [Option<(usize, Vec<u8>)>; crate::workload::SLOTS] = Default::default();
    for i in from..PROC_CALLS {
        let c = &proc_call(seed, i, mix);
        clock.set(call_time(i));
        let before = (mix == Mix::Buffered).then(|| slots.clone());
        let mode_before = die_from.filter(|&f| i >= f).and_then(|_| mode_of_slot(&fs, &slots, c));
        let r = run_call(&fs, &mut slots, c);
        let die = die_from.is_some_and(|f| {
            i >= f + DIE_AFTER_LOOKAHEAD
                || (mode_before.is_some() && r.is_ok() && mode_of_slot(&fs, &slots, c) != mode_before)
        });
        // Buffered: a sync point that returned says so on its line (every
        // call up to it is durable from now on).
        let synced = before.is_some_and(|b| crate::prefix::is_sync_point(c, &b, &r));
        for (v, live) in slots.views.iter().enumerate() {
            let Some(live) = live else {
                shown[v] = None;
                continue;
            };
            // SAFETY: the view is live (this child made it and has not
            // released it; the engine is mounted).
            let now = unsafe { live.shown() };
            match &shown[v] {
                Some((id, bytes)) if *id == live.id => {
                    if let Some(at) = now.iter().zip(bytes).position(|(a, b)| a != b) {
                        eprintln!("child: after call {i} `{c}`, view{v} changed at byte {at} (a view is a snapshot)");
                        return 7;
                    }
                }
                _ => shown[v] = Some((live.id, now.to_vec())),
            }
        }
        if die {
            // SAFETY: sending SIGKILL to this process; nothing runs after.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        // One write(2) per line: a kill leaves whole lines only.
        let line = format!("{i} {}{}\n", encode_result(&r), if synced { " synced" } else { "" });
        if out.write_all(line.as_bytes()).is_err() {
            return 6;
        }
    }
    drop(fs);
    0
}

fn call_time(i: usize) -> TimeSpec {
    TimeSpec { sec: T_CALL + i as i64, nsec: 77 }
}

/// Call `i` of the process-crash workload of `seed`: the random generator
/// of `calls`, each call drawn from its own seed (so that a child can
/// start anywhere without replaying the generator), with every slot
/// guessed free. Half of the files opened without a name (O_TMPFILE,
/// without O_EXCL) are published at once, as programs do and as the
/// workloads of `random_calls` do: the two calls after such an open are a
/// write to it and the link that names it, so that kills land in the
/// naming commit often rather than when two independent draws happen to
/// meet. Which calls those are depends only on the draws of calls `i - 2`
/// to `i`, so the property above holds.
pub fn proc_call(seed: u64, i: usize, calls: Mix) -> Call {
    if let Some(slot) = i.checked_sub(1).and_then(|j| published_open(seed, j, calls)) {
        let mut rng = publish_rng(seed, i);
        let tag = rng.gen::<u32>() & 0xFFFF;
        return Call::Pwrite { slot, off: 0, len: crate::workload::rlen(&mut rng), tag };
    }
    if let Some(slot) = i.checked_sub(2).and_then(|j| published_open(seed, j, calls)) {
        return Call::LinkFd { slot, to: crate::workload::rpath(&mut publish_rng(seed, i)) };
    }
    drawn_call(seed, i, calls)
}

/// The slot of call `j` when it is an O_TMPFILE open (without O_EXCL)
/// that is published, and is itself drawn (not the write or the link of
/// an earlier publication, which take the two calls after an open).
fn published_open(seed: u64, j: usize, calls: Mix) -> Option<u8> {
    let publishes = |j: usize| match drawn_call(seed, j, calls) {
        Call::Open { slot, flags, .. } if flags.tmpfile && !flags.excl && publish_rng(seed, j).gen_bool(0.5) => {
            Some(slot)
        }
        _ => None,
    };
    // Call `j`'s own draw first: it is rarely such an open, and then the
    // two calls before it need not be drawn.
    publishes(j).filter(|_| !(1..=2).any(|back| j.checked_sub(back).is_some_and(|k| publishes(k).is_some())))
}

/// A generator for call `i`'s publication choices, apart from its draw.
fn publish_rng(seed: u64, i: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(seed ^ 0x5EED_B1E5 ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)))
}

/// Call `i` as the generator of `calls` draws it, before publication.
fn drawn_call(seed: u64, i: usize, calls: Mix) -> Call {
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let open = [i.is_multiple_of(3); crate::workload::SLOTS];
    match calls {
        Mix::Strict => return random_call(&mut rng, &open),
        Mix::ZeroCopy => return random_call_zc(&mut rng, &open),
        Mix::Buffered => return random_call_buffered(&mut rng, &open),
        Mix::Modes => {}
    }
    match random_call_modes(&mut rng, &open) {
        // See the module comment: no pages past the end of a file.
        Call::Fallocate { slot, mode: FallocateMode::KeepSize, off, len } => {
            Call::Fallocate { slot, mode: FallocateMode::Default, off, len }
        }
        Call::Fallocate { slot, mode: FallocateMode::ZeroRangeKeepSize, off, len } => {
            Call::Fallocate { slot, mode: FallocateMode::ZeroRange, off, len }
        }
        c => c,
    }
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
    /// Recoveries (modes) that lost pending changes of fsync-atomic files,
    /// which the parent put back.
    pub restored: usize,
    /// Modes: rounds whose child killed itself right after a mode change
    /// returned (`DIE_AFTER_ENV`), and those whose recovered state showed
    /// that call completed (the others changed nothing: the mode was the
    /// file's already, or the descriptor was not open).
    pub died_after_mode_change: usize,
    pub mode_changes_unreported: usize,
    /// Kills (zero-copy) that found the child holding live views or
    /// buffers (by the calls it had reported), and how many it held in all.
    pub kills_with_live: usize,
    pub live_views: usize,
    pub live_buffers: usize,
    /// Buffered: sync points the child reported returned; kills whose
    /// recovered state lost calls the child had reported (returned, not
    /// yet durable, after the last sync point), and how many in all.
    pub syncs_reported: usize,
    pub lost_rounds: usize,
    pub lost_calls: usize,
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

/// Run `kills` kill-and-recover rounds with the child binary `exe`, whose
/// calls are those of `calls`. With [`Mix::ZeroCopy`], every recovered
/// pool also goes through the usability pass (`verify::usability`: nothing
/// leaked, the free pages and inodes those of a fresh pool once everything
/// is deleted).
pub fn run(exe: &Path, seed: u64, kills: usize, max_wait: Duration, calls: Mix) -> ProcReport {
    let modes = calls == Mix::Modes;
    let t0 = Instant::now();
    let mut rep = ProcReport::default();
    let dir = std::env::temp_dir();
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm } else { dir.as_path() };
    let tag = format!(
        "ferrite-crashcheck-{}-{seed:x}{}",
        std::process::id(),
        calls.arg().map_or(String::new(), |a| format!("-{a}"))
    );
    let pool: PathBuf = base.join(format!("{tag}.pool"));
    let progress: PathBuf = base.join(format!("{tag}.progress"));
    let start = match build_start(StartKind::Empty, PROC_GEOMETRY) {
        Ok(s) => s,
        Err(e) => {
            rep.failures.push(format!("building the start image: {e}"));
            return rep;
        }
    };
    let clock = clock_at(T_CALL - 1);
    let model = ModelFs::from_state(start.model.clone(), clock.clone());
    let mut mslots = Slots::default();
    let mut image = start.image.to_vec();
    // With the modes: the fsync-atomic files of the file set, and the
    // oracle's tracker (which keeps only its last call).
    let mut tracker = modes.then(Tracker::new);
    if let Some(t) = tracker.as_mut() {
        match prepare_modes(&image, &clock, &model, &mut mslots, t) {
            Ok(i) => image = i,
            Err(e) => {
                rep.failures.push(format!("preparing the modes: {e}"));
                return rep;
            }
        }
    }
    if let Err(e) = std::fs::write(&pool, &image) {
        rep.failures.push(format!("writing {}: {e}", pool.display()));
        return rep;
    }
    let mut done = 0usize; // calls applied to the model
                           // Buffered: the last sync point reported, the model there, and the
                           // results of the calls since.
    let mut buffered = (calls == Mix::Buffered).then(|| Synced {
        synced_at: 0,
        state: (model.snapshot(), mslots.clone()),
        since: Vec::new(),
    });
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ 0x1C11));
    for round in 0..kills {
        let _ = std::fs::remove_file(&progress);
        let mut args = vec![
            "child".to_string(),
            pool.to_string_lossy().into_owned(),
            format!("{seed:#x}"),
            done.to_string(),
            progress.to_string_lossy().into_owned(),
        ];
        if let Some(a) = calls.arg() {
            args.push(a.into());
        }
        // With the modes, one round in four: the child dies right after a
        // mode change returns (see `DIE_AFTER_ENV`), from a call a little
        // ahead so that its descriptors are open again.
        let die_from = (modes && rng.gen_range(0..4) == 0).then(|| done + rng.gen_range(0..50));
        let mut command = Command::new(exe);
        if let Some(i) = die_from {
            command.env(DIE_AFTER_ENV, i.to_string());
        }
        let mut child =
            match command.args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn() {
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
        if die_from.is_some() {
            // It dies on its own; a child that has not after a while (it
            // failed to get there) is killed as any other.
            let deadline = Instant::now() + DIE_AFTER_WAIT;
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            std::thread::sleep(wait);
        }
        let killed_by_parent = !matches!(child.try_wait(), Ok(Some(_)));
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
        let mut reported: Vec<(usize, CallResult, bool)> = Vec::new();
        for line in text.lines() {
            let Some((i, r)) = line.split_once(' ') else { continue };
            let (r, synced) = r.strip_suffix(" synced").map_or((r, false), |r| (r, true));
            let (Ok(i), Some(r)) = (i.parse::<usize>(), decode_result(r)) else {
                continue;
            };
            reported.push((i, r, synced));
        }
        if !reported.is_empty() {
            rep.kills_mid_workload += 1;
        }
        // Bring the model along the reported calls, comparing results.
        let mut fail = None;
        for (i, r, synced) in &reported {
            if *i != done {
                fail = Some(format!("round {round}: the child reported call {i}, expected {done}"));
                break;
            }
            let c = proc_call(seed, *i, calls);
            let plan = tracker.as_ref().map(|t| t.plan(&model, &mslots, &c));
            let slots_before = buffered.is_some().then(|| mslots.clone());
            let m = record_model_call(&model, &clock, &mut mslots, &c, call_time(*i), r);
            let applied = match m {
                Ok(a) => a,
                Err(msg) => {
                    fail = Some(format!("round {round}: call {i} `{c}`: {msg}"));
                    break;
                }
            };
            if let (Some(t), Some(plan)) = (tracker.as_mut(), plan) {
                let tree = Arc::new(model.tree());
                t.call(&model, &mslots, plan, applied, &tree, tree_key(&tree));
                t.prune();
            }
            done += 1;
            if let (Some(b), Some(before)) = (buffered.as_mut(), slots_before) {
                let sync = crate::prefix::is_sync_point(&c, &before, r);
                if sync != *synced {
                    fail = Some(format!(
                        "round {round}: call {i} `{c}` returned {r:?}: the child says it {} a sync point, the parent {}",
                        if *synced { "is" } else { "is not" },
                        if sync { "does" } else { "does not" }
                    ));
                    break;
                }
                b.since.push(*r);
                if sync {
                    rep.syncs_reported += 1;
                    b.synced_at = done;
                    b.state = (model.snapshot(), mslots.clone());
                    b.since.clear();
                }
            }
        }
        if let Some(f) = fail {
            rep.failures.push(f);
            break;
        }
        // What the child held when it was killed.
        if calls == Mix::ZeroCopy {
            let views = mslots.views.iter().flatten().count();
            let buffers = mslots.buffers.iter().flatten().count();
            if views + buffers > 0 {
                rep.kills_with_live += 1;
            }
            rep.live_views += views;
            rep.live_buffers += buffers;
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
        // The recovered tree, and with the modes mixed the consistency mode
        // of each of its regular files (the tree does not show it).
        let recovered = crate::verify::mount(Pmem::from_image(&image), 1).and_then(|fs| {
            let tree = tree_of(&fs).map_err(|e| format!("tree: {e:?}"))?;
            let modes = if modes { engine_modes(&fs, &tree)? } else { FileModes::new() };
            Ok((tree, modes))
        });
        let (got, got_modes) = match recovered {
            Ok(t) => t,
            Err(m) => {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}, killed after {done} reported calls): {m}\n{}",
                    saved()
                ));
                break;
            }
        };
        if let Some(t) = tracker.as_mut() {
            match continue_modes(
                Modes { seed, done, round, model: &model, mslots: &mut mslots, clock: &clock, tracker: t },
                &image,
                &got,
                &got_modes,
            ) {
                Ok(c) => {
                    // The child died on its own after a mode change (the
                    // call in flight is one) or after its last call to look.
                    let died_there = die_from.is_some()
                        && !killed_by_parent
                        && matches!(proc_call(seed, done, calls), Call::SetMode { .. });
                    rep.died_after_mode_change += usize::from(died_there);
                    if c.matched_next {
                        rep.matched_next += 1;
                        rep.mode_changes_unreported += usize::from(died_there);
                        done += 1;
                    }
                    if let Some(fixed) = c.restored {
                        rep.restored += 1;
                        if let Err(e) = std::fs::write(&pool, &fixed) {
                            rep.failures.push(format!("writing {}: {e}", pool.display()));
                            break;
                        }
                    }
                }
                Err(m) => {
                    rep.failures.push(format!(
                        "round {round} (seed {seed:#x}, modes): killed after {done} reported calls: {m}\n{}",
                        saved()
                    ));
                    break;
                }
            }
            if done >= PROC_CALLS {
                break;
            }
            continue;
        }
        if let Some(b) = buffered.as_mut() {
            match continue_buffered(Prefixes { seed, done, model: &model, mslots: &mut mslots, clock: &clock }, b, &got)
            {
                Ok(p) => {
                    if p == done + 1 {
                        rep.matched_next += 1;
                    } else if p < done {
                        rep.lost_rounds += 1;
                        rep.lost_calls += done - p;
                    }
                    done = p;
                    b.synced_at = p;
                    b.state = (model.snapshot(), mslots.clone());
                    b.since.clear();
                }
                Err(m) => {
                    rep.failures.push(format!(
                        "round {round} (seed {seed:#x}, buffered): killed after {done} reported calls: {m}\n{}",
                        saved()
                    ));
                    break;
                }
            }
            // Nothing leaked (the usability pass, on a copy).
            let r = crate::verify::mount(Pmem::from_image(&image), 1)
                .and_then(|fs| crate::verify::usability(fs, &got, empty_figures(PROC_GEOMETRY)));
            if let Err(m) = r {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}, buffered): killed after {done} reported calls: usability pass: {m}\n{}",
                    saved()
                ));
                break;
            }
            continue;
        }
        // The states after k and k + 1 calls, as a crash leaves them (every
        // descriptor closed); call k runs with the descriptors the child had.
        let snap = (model.snapshot(), {
            let s = mslots.clone();
            mslots.reopen();
            s
        });
        model.close_all();
        let after_k = model.tree();
        if got != after_k {
            model.restore(snap.0.clone());
            let mut s2 = snap.1.clone();
            clock.set(call_time(done));
            let _ = run_call(&model, &mut s2, &proc_call(seed, done, calls));
            model.close_all();
            let after_k1 = model.tree();
            if got == after_k1 {
                rep.matched_next += 1;
                done += 1;
            } else {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}): killed after {done} reported calls; the recovered state is neither the model's after {done} calls nor after {} (call {done} is `{}`)\n  --- after {done} calls:\n{}  --- after {} calls:\n{}{}",
                    done + 1,
                    proc_call(seed, done, calls),
                    diff_trees(&after_k, &got),
                    done + 1,
                    diff_trees(&after_k1, &got),
                    saved()
                ));
                break;
            }
        }
        // Views and buffers the child held are gone: nothing leaked (the
        // usability pass, on a copy).
        if calls == Mix::ZeroCopy {
            let r = crate::verify::mount(Pmem::from_image(&image), 1)
                .and_then(|fs| crate::verify::usability(fs, &got, empty_figures(PROC_GEOMETRY)));
            if let Err(m) = r {
                rep.failures.push(format!(
                    "round {round} (seed {seed:#x}, zero-copy): killed after {done} reported calls: usability pass: {m}\n{}",
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

/// Set the files of `ATOMIC_FILES` fsync-atomic on the pool `image` (a
/// mount, the preparing calls on both sides, a clean unmount) and start the
/// tracker there. Returns the new image.
fn prepare_modes(
    image: &[u8],
    clock: &Arc<ManualClock>,
    model: &ModelFs,
    mslots: &mut Slots,
    tracker: &mut Tracker,
) -> Result<Vec<u8>, String> {
    let fs = Session::mount(Pmem::from_image(image), &mount_options(clock, 1)).map_err(|e| format!("mount: {e}"))?;
    let mut es = Slots::default();
    for c in atomic_prepare() {
        let e = run_call(&fs, &mut es, &c);
        let m = run_call(model, mslots, &c);
        if e.is_err() || m.is_err() {
            return Err(format!("{c}: engine {e:?}, model {m:?}"));
        }
    }
    let pmem = fs.pmem().clone();
    fs.unmount().map_err(|e| format!("unmount: {e:?}"))?;
    tracker.restart(model, mslots);
    Ok(pmem.image())
}

/// What the parent needs to continue after a kill with the modes mixed.
struct Modes<'a> {
    seed: u64,
    done: usize,
    round: usize,
    model: &'a ModelFs,
    mslots: &'a mut Slots,
    clock: &'a Arc<ManualClock>,
    tracker: &'a mut Tracker,
}

struct Continued {
    /// The recovered state has the names after call `done` (it completed).
    matched_next: bool,
    /// The pool image with the lost pending changes put back, if any were.
    restored: Option<Vec<u8>>,
}

/// The consistency mode of each regular file of `tree`, by path.
type FileModes = std::collections::BTreeMap<Vec<u8>, FileMode>;

/// The modes of the regular files of `tree` on a mounted engine.
fn engine_modes(fs: &Session, tree: &Tree) -> Result<FileModes, String> {
    let mut out = FileModes::new();
    for (path, node) in tree {
        if node.kind == FileType::Regular {
            let ino = fs.lstat(path).map_err(|e| format!("lstat {}: {e:?}", path.escape_ascii()))?.ino;
            let mode = fs.engine().file_mode_ino(ino).map_err(|e| format!("mode of {}: {e:?}", path.escape_ascii()))?;
            out.insert(path.clone(), mode);
        }
    }
    Ok(out)
}

/// The modes the model side gives the regular files of `tree` (the
/// model's state now, `slots` its descriptors and modes).
fn model_modes(model: &ModelFs, slots: &Slots, tree: &Tree) -> Result<FileModes, String> {
    let mut out = FileModes::new();
    for (path, node) in tree {
        if node.kind == FileType::Regular {
            let ino = model.lstat(path).map_err(|e| format!("model lstat {}: {e:?}", path.escape_ascii()))?.ino;
            out.insert(path.clone(), slots.mode_of(ino.0));
        }
    }
    Ok(out)
}

/// The paths whose modes differ between `want` and `got`, for messages.
fn diff_modes(want: &FileModes, got: &FileModes) -> String {
    let mut out = String::new();
    for (path, w) in want {
        let g = got.get(path);
        if g != Some(w) {
            out += &format!(
                "{}: mode: expected {}, got {}\n",
                path.escape_ascii(),
                w.as_str(),
                g.map_or("none", |g| g.as_str())
            );
        }
    }
    out
}

/// After a kill with the modes mixed: the recovered tree `got` must be a
/// state the oracle allows after `done` reported calls (the durable state,
/// or one allowed inside the next call); the model continues from the side
/// of that call the state shows, and what the crash lost is put back on
/// the pool (`crashed`: the pool as the kill left it).
///
/// The side is chosen by the names and attributes and by each regular
/// file's consistency mode (`got_modes`, the recovered pool's), which the
/// tree does not show: a mode change that became durable shows in the tree
/// only as a new ctime, which the fsync-atomic rules let lag, so without
/// the modes a completed fsetxattr of the mode looked like one never run,
/// and its rerun (on a descriptor the crash closed) left the model with
/// the old mode and the pool with the new.
fn continue_modes(m: Modes<'_>, crashed: &[u8], got: &Tree, got_modes: &FileModes) -> Result<Continued, String> {
    let Modes { seed, done, round, model, mslots, clock, tracker } = m;
    let before = (model.snapshot(), mslots.clone(), tracker.clone());
    // The next call, on the model, for the states allowed inside it.
    let c = proc_call(seed, done, Mix::Modes);
    let durable_before = tracker.durable_now().clone();
    clock.set(call_time(done));
    let plan = tracker.plan(model, mslots, &c);
    let r = run_call(model, mslots, &c);
    let tree = Arc::new(model.tree());
    tracker.call(model, mslots, plan, r.is_ok(), &tree, tree_key(&tree));
    let key = tree_key(got);
    if !tracker.last_inside().iter().any(|a| a.key == key) {
        return Err(format!(
            "the recovered state is none the oracle allows (call {done} is `{c}`)\n  --- {} (- expected, + recovered):\n{}  --- {}:\n{}",
            durable_before.name,
            diff_trees(&durable_before.tree, got),
            tracker.durable_now().name,
            diff_trees(&tracker.durable_now().tree, got)
        ));
    }
    // Continue from the side of call `done` whose names and attributes the
    // recovered state shows (before it when both do: the call is run
    // again); only fsync-atomic data may differ, and is put back below.
    let after = (model.snapshot(), mslots.clone(), tracker.clone());
    model.close_all();
    let live_after = model.tree();
    let modes_after = model_modes(model, &after.1, &live_after)?;
    model.restore(before.0.clone());
    model.close_all();
    let live_before = model.tree();
    let modes_before = model_modes(model, &before.1, &live_before)?;
    let matched_next = if same_but_data(&live_before, got) && modes_before == *got_modes {
        model.restore(before.0);
        *mslots = before.1;
        *tracker = before.2;
        false
    } else if same_but_data(&live_after, got) && modes_after == *got_modes {
        model.restore(after.0);
        *mslots = after.1;
        *tracker = after.2;
        true
    } else {
        return Err(format!(
            "the recovered state is allowed, but differs from the model before and after call {done} (`{c}`) in more than file data, or in a file's consistency mode\n  --- before:\n{}{}  --- after:\n{}{}",
            diff_trees(&live_before, got),
            diff_modes(&modes_before, got_modes),
            diff_trees(&live_after, got),
            diff_modes(&modes_after, got_modes)
        ));
    };
    // The crash closed every descriptor; the default mode is a mount
    // option.
    model.close_all();
    mslots.reopen();
    let live = model.tree();
    let restored = if live == *got {
        None
    } else {
        let img = restore_losses(crashed, model, &live, got, round)?;
        Some(img)
    };
    tracker.restart(model, mslots);
    tracker.prune();
    Ok(Continued { matched_next, restored })
}

/// A buffered run's last reported sync point: every call before
/// `synced_at` is durable; the model's state and descriptors there, and
/// the results the child reported for the calls since.
struct Synced {
    synced_at: usize,
    state: (ferrite_model::ModelState, Slots),
    since: Vec<CallResult>,
}

/// What the parent needs to continue after a kill on a buffered mount.
struct Prefixes<'a> {
    seed: u64,
    done: usize,
    model: &'a ModelFs,
    mslots: &'a mut Slots,
    clock: &'a Arc<ManualClock>,
}

/// After a kill on a buffered mount: the recovered tree `got` must be the
/// model's after p calls for some p from `synced_at` (every call up to the
/// last sync point the child reported) to `done` + 1 (the call in flight
/// may have completed). The states are rebuilt from the model at the sync
/// point with the results the child reported. The model continues from the
/// longest such prefix (every descriptor closed); returns p.
fn continue_buffered(m: Prefixes<'_>, b: &Synced, got: &Tree) -> Result<usize, String> {
    let Prefixes { seed, done, model, mslots, clock } = m;
    if b.synced_at + b.since.len() != done {
        return Err(format!(
            "the harness lost track: last sync point at {}, {} calls since, {done} calls done",
            b.synced_at,
            b.since.len()
        ));
    }
    model.restore(b.state.0.clone());
    let mut s = b.state.1.clone();
    let mut states = vec![(b.synced_at, model.snapshot(), s.clone())];
    for (j, r) in b.since.iter().enumerate() {
        let i = b.synced_at + j;
        let c = proc_call(seed, i, Mix::Buffered);
        record_model_call(model, clock, &mut s, &c, call_time(i), r)
            .map_err(|e| format!("replaying call {i} `{c}` on the model: {e} (a harness problem)"))?;
        states.push((i + 1, model.snapshot(), s.clone()));
    }
    // The call in flight, with the descriptors the child had.
    clock.set(call_time(done));
    let _ = run_call(model, &mut s, &proc_call(seed, done, Mix::Buffered));
    states.push((done + 1, model.snapshot(), s));
    let mut trees = Vec::new();
    for (p, state, slots) in states.iter().rev() {
        model.restore(state.clone());
        let t = model.tree();
        if t == *got {
            model.close_all();
            *mslots = slots.clone();
            mslots.reopen();
            return Ok(*p);
        }
        trees.push((*p, t));
    }
    // Not a prefix: the two ends of the range and the nearest state.
    let lines = |t: &Tree| diff_trees(t, got).lines().count();
    let nearest = trees.iter().min_by_key(|(_, t)| lines(t)).expect("a state");
    let (hi, lo) = (&trees[0], &trees[trees.len() - 1]);
    let mut msg = format!(
        "the recovered state is the model's after none of the prefixes from {} calls (the last sync point reported) to {} (call {done} `{}` in flight)\n",
        b.synced_at,
        done + 1,
        proc_call(seed, done, Mix::Buffered)
    );
    for (p, t) in [lo, nearest, hi] {
        msg += &format!("  --- after {p} calls (- expected, + recovered):\n{}", diff_trees(t, got));
    }
    Err(msg)
}

/// Do two trees differ at most in the data of regular files (content, size,
/// blocks, mtime, ctime)?
fn same_but_data(a: &Tree, b: &Tree) -> bool {
    let strip = |t: &Tree| -> Tree {
        t.iter()
            .map(|(p, n)| {
                let mut n = n.clone();
                if n.kind == FileType::Regular {
                    n.content.clear();
                    n.size = 0;
                    n.blocks = None;
                    n.mtime = TimeSpec::default();
                    n.ctime = TimeSpec::default();
                }
                (p.clone(), n)
            })
            .collect()
    };
    strip(a) == strip(b)
}

/// Put back on the crashed pool what the crash lost: each regular file
/// whose recovered node differs from the model's is rewritten through the
/// engine (size, allocated pages and their bytes, times; ctime from the
/// clock), then the pool is unmounted cleanly and must hold the model's
/// tree. Returns the new image.
fn restore_losses(crashed: &[u8], model: &ModelFs, live: &Tree, got: &Tree, round: usize) -> Result<Vec<u8>, String> {
    let e = |what: String| move |err: Errno| format!("putting back round {round}'s losses: {what}: {err:?}");
    let clock = clock_at(T_CALL);
    let fs = Session::mount(Pmem::from_image(crashed), &mount_options(&clock, 1))
        .map_err(|err| format!("putting back round {round}'s losses: mount: {err}"))?;
    let mut seen = std::collections::HashSet::new();
    for (path, want) in live {
        if got.get(path) == Some(want) || want.kind != FileType::Regular {
            continue;
        }
        let ino = model.lstat(path).map_err(e(format!("model lstat {}", path.escape_ascii())))?.ino;
        if !seen.insert(ino) {
            continue;
        }
        clock.set(want.ctime);
        let fd = fs.open(path, OpenFlags::RDWR, 0).map_err(e(format!("open {}", path.escape_ascii())))?;
        // Empty it and commit (its pages are freed), then rebuild it.
        fs.ftruncate(fd, 0).map_err(e("ftruncate".into()))?;
        fs.fsync(fd).map_err(e("fsync".into()))?;
        fs.ftruncate(fd, want.size).map_err(e("ftruncate".into()))?;
        let mfd = model.open(path, OpenFlags::RDONLY, 0).map_err(e("model open".into()))?;
        let mut at = 0u64;
        while at < want.size {
            let Ok(data) = model.lseek(mfd, at as i64, Whence::Data) else { break };
            let hole = model.lseek(mfd, data as i64, Whence::Hole).map_err(e("model SEEK_HOLE".into()))?;
            fs.fallocate(fd, FallocateMode::Default, data, hole - data).map_err(e("fallocate".into()))?;
            let end = hole.min(want.size);
            fs.pwrite(fd, &want.content[data as usize..end as usize], data).map_err(e("pwrite".into()))?;
            at = hole;
        }
        model.close(mfd).map_err(e("model close".into()))?;
        fs.futimens(fd, TimeSet::At(want.atime), TimeSet::At(want.mtime)).map_err(e("futimens".into()))?;
        fs.close(fd).map_err(e("close".into()))?;
    }
    let pmem = fs.pmem().clone();
    fs.unmount().map_err(e("unmount".into()))?;
    let img = pmem.image();
    let fs = crate::verify::mount(Pmem::from_image(&img), 1)?;
    let back = tree_of(&fs).map_err(e("tree".into()))?;
    if back != *live {
        return Err(format!(
            "putting back round {round}'s losses did not give the model's state (a harness problem):\n{}",
            diff_trees(live, &back)
        ));
    }
    Ok(img)
}

#[cfg(test)]
mod tests {
    //! The process-crash calls publish files born without a name: every
    //! published O_TMPFILE open is followed by a write to its slot and the
    //! link that names it, in every mix, and enough of them are drawn, and
    //! succeed on the model, that kills land in the naming commit. A
    //! publication lost from `proc_call` fails here.

    use super::*;

    #[test]
    fn nameless_files_are_written_and_named_right_after_their_open() {
        for calls in [Mix::Strict, Mix::Modes, Mix::ZeroCopy, Mix::Buffered] {
            let (mut tmpfiles, mut published) = (0, 0);
            for seed in 0..40u64 {
                let seed = mix(seed);
                let c: Vec<Call> = (0..300).map(|i| proc_call(seed, i, calls)).collect();
                for (i, call) in c.iter().enumerate() {
                    let Call::Open { slot, flags, .. } = call else { continue };
                    if !flags.tmpfile || flags.excl || i + 2 >= c.len() {
                        continue;
                    }
                    tmpfiles += 1;
                    let write = matches!(c.get(i + 1), Some(Call::Pwrite { slot: s, off: 0, .. }) if s == slot);
                    let link = matches!(c.get(i + 2), Some(Call::LinkFd { slot: s, .. }) if s == slot);
                    if write && link {
                        published += 1;
                    }
                    assert_eq!(
                        published_open(seed, i, calls).is_some(),
                        write && link,
                        "{calls:?} seed {seed:#x}: the open at call {i} and the two calls after it disagree: {:?}",
                        &c[i..i + 3]
                    );
                }
            }
            eprintln!("{calls:?}: 40 runs of 300 calls: {tmpfiles} O_TMPFILE opens, {published} published");
            assert!(published >= 20, "{calls:?}: only {published} of {tmpfiles} nameless files published");
        }
    }

    /// Drawn is not done: on the model, from the start the process-crash
    /// runs use, the published links name files that had no name.
    #[test]
    fn published_links_name_files_on_the_model() {
        let start = build_start(StartKind::Empty, PROC_GEOMETRY).expect("start image");
        let mut named = 0;
        for seed in 0..40u64 {
            let seed = mix(seed);
            let model = ModelFs::from_state(start.model.clone(), clock_at(T_CALL - 1));
            let mut slots = Slots::default();
            for i in 0..300 {
                let call = proc_call(seed, i, Mix::Strict);
                // The link of the open two calls back (which `published_open`
                // says was drawn, not replaced); it fails if the open did.
                let link =
                    i >= 2 && matches!(call, Call::LinkFd { .. }) && published_open(seed, i - 2, Mix::Strict).is_some();
                let r = run_call(&model, &mut slots, &call);
                named += usize::from(link && r.is_ok());
            }
        }
        eprintln!("40 runs of 300 strict calls on the model: {named} nameless files named by their publication");
        assert!(named >= 10, "only {named} published links succeeded");
    }
}
