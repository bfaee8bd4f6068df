//! The driver: record a workload, run the persistence checker on it, walk
//! its crash points, build the candidate images at each, recover and verify
//! every distinct image once, and compare each recovered state with the
//! states the oracle allows there. Every failure carries a token that
//! replays it (see [`crate::token`]).

use crate::crash::{Caps, PointKind, Sim};
use crate::exec::{end_mark, record, start, Recording};
use crate::hash::{mix, str_seed};
use crate::token::Token;
use crate::verify::{verify, VerifyFailure, VerifyOpts};
use crate::workload::{StartKind, Workload};
use ferrite_model::{diff_trees, Tree};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How a run is sized.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Seeds the random subsets (and is part of every token).
    pub seed: u64,
    pub caps: Caps,
    pub verify: VerifyOpts,
    /// Stop checking a workload after this many failures.
    pub max_failures_per_workload: usize,
    /// Print progress lines (states per second, projected time) this often.
    pub progress_every: Option<Duration>,
    /// Worker threads.
    pub threads: usize,
}

impl Config {
    pub fn new(seed: u64) -> Config {
        Config {
            seed,
            caps: Caps::FULL,
            verify: VerifyOpts::FULL,
            max_failures_per_workload: 3,
            progress_every: Some(Duration::from_secs(30)),
            threads: 1,
        }
    }
}

/// Counts of one run.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub workloads: u64,
    pub calls: u64,
    pub events: u64,
    pub fences: u64,
    /// Crash points visited.
    pub points: u64,
    /// (point, image) pairs whose recovered state was compared with the
    /// oracle.
    pub states: u64,
    /// Images recovered and verified (distinct across the process).
    pub distinct_images: u64,
    /// Crash images of recovery itself, recovered again.
    pub recovery_images: u64,
    pub pcheck_guarded: u64,
    pub redundant_flushes: u64,
    /// Buffered mounts: states checked whose recovered state was an
    /// allowed prefix shorter than the longest allowed one (operations
    /// returned but not yet durable, lost by the crash as allowed).
    pub behind: u64,
    pub elapsed: Duration,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.workloads += o.workloads;
        self.calls += o.calls;
        self.events += o.events;
        self.fences += o.fences;
        self.points += o.points;
        self.states += o.states;
        self.distinct_images += o.distinct_images;
        self.recovery_images += o.recovery_images;
        self.pcheck_guarded += o.pcheck_guarded;
        self.redundant_flushes += o.redundant_flushes;
        self.behind += o.behind;
    }

    pub fn rate(&self) -> f64 {
        self.states as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} workloads, {} calls, {} events, {} fences, {} crash points, {} states checked, {} distinct images recovered, {} crash images of recovery, {:.1?} ({:.0} states/s)",
            self.workloads,
            self.calls,
            self.events,
            self.fences,
            self.points,
            self.states,
            self.distinct_images,
            self.recovery_images,
            self.elapsed,
            self.rate()
        )?;
        if self.behind > 0 {
            write!(f, "; {} states behind the last operation (a shorter prefix)", self.behind)?;
        }
        Ok(())
    }
}

/// Print a line on the real standard error, past the test harness's
/// output capture (so that CI logs show the figures of passing tests too).
pub fn say(line: &str) {
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(line.as_bytes());
    let _ = e.write_all(b"\n");
}

/// One failure: the token that replays it and what went wrong.
#[derive(Clone, Debug)]
pub struct Failure {
    pub token: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "FAILURE {}", self.token)?;
        writeln!(f, "  replay: cargo run -p ferrite-crashcheck -- replay {}", self.token)?;
        for l in self.message.lines() {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

#[derive(Clone)]
enum Cached {
    Ok(u64, Arc<Tree>),
    Fail(Arc<VerifyFailure>),
}

/// Verified images, shared by every run in the process: the same image
/// (same content) reached by two workloads is recovered once.
fn cache() -> &'static Mutex<HashMap<(u64, u64), Cached>> {
    static C: OnceLock<Mutex<HashMap<(u64, u64), Cached>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Interned trees (recovered states are few; images are many).
fn intern(t: Arc<Tree>, key: u64) -> Arc<Tree> {
    static T: OnceLock<Mutex<HashMap<u64, Arc<Tree>>>> = OnceLock::new();
    T.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(t).clone()
}

fn opts_id(v: &VerifyOpts) -> u64 {
    let c = &v.recovery_caps;
    mix((v.usability as u64)
        | (v.recovery_crash as u64) << 1
        | (c.subsets as u64) << 8
        | (c.torn as u64) << 24
        | (c.older as u64) << 36
        | (c.exhaustive_lines as u64) << 48)
}

/// The seed of the candidates at one point.
pub fn point_seed(seed: u64, workload: &str, at: usize) -> u64 {
    mix(seed ^ str_seed(workload) ^ (at as u64).wrapping_mul(0x9E37_79B9))
}

/// Which states a crash point allows (indices for
/// `Recording::expected_key`): inside call i, the states before and after
/// it; once call i returned, only the state after it. With fsync-atomic
/// files the oracle's durable states instead (`crate::oracle`).
pub fn allowed(rec: &Recording, at: usize, kind: PointKind) -> Vec<usize> {
    if let Some(p) = &rec.prefix {
        return allowed_prefix(rec, p, at, kind);
    }
    if let Some(o) = &rec.oracle {
        return allowed_atomic(rec, o, at, kind);
    }
    let last = rec.states.len() - 1;
    match kind {
        PointKind::Mark(l) => {
            let i = (l / 2) as usize;
            if l == end_mark(i) {
                vec![i + 1]
            } else {
                vec![i]
            }
        }
        PointKind::End => vec![last],
        PointKind::Fence => match rec.call_at(at) {
            Some((i, false)) => vec![i, i + 1],
            Some((i, true)) => vec![i + 1],
            // A fence outside every call: the harness itself wrote to the
            // pool between calls (it never does).
            None => vec![if rec.spans.first().is_none_or(|s| at <= s.0) { 0 } else { last }],
        },
    }
}

/// `allowed` on a buffered mount: a range of the model's states, the
/// prefixes of the calls in return order that contain every call synced
/// by then (`crate::prefix`).
fn allowed_prefix(rec: &Recording, p: &crate::prefix::Prefix, at: usize, kind: PointKind) -> Vec<usize> {
    let last = rec.states.len() - 1;
    let (lo, hi) = match kind {
        PointKind::Mark(l) => {
            let i = (l / 2) as usize;
            if l == end_mark(i) {
                p.range(i, true)
            } else {
                (p.synced_before(i), i)
            }
        }
        PointKind::End => (last.checked_sub(1).map_or(0, |i| p.synced[i]), last),
        PointKind::Fence => match rec.call_at(at) {
            Some((i, returned)) => p.range(i, returned),
            None if rec.spans.first().is_none_or(|s| at <= s.0) => (0, 0),
            None => (last.checked_sub(1).map_or(0, |i| p.synced[i]), last),
        },
    };
    (lo..=hi).collect()
}

/// `allowed` when the workload has fsync-atomic files: the durable state
/// after the last call returned, or the oracle's states inside a call.
fn allowed_atomic(rec: &Recording, o: &crate::oracle::Oracle, at: usize, kind: PointKind) -> Vec<usize> {
    let after = |i: Option<usize>| i.map_or(o.initial, |i| o.after[i]);
    match kind {
        PointKind::Mark(l) => {
            let i = (l / 2) as usize;
            if l == end_mark(i) {
                vec![after(Some(i))]
            } else {
                vec![after(i.checked_sub(1))]
            }
        }
        PointKind::End => vec![after(o.after.len().checked_sub(1))],
        PointKind::Fence => match rec.call_at(at) {
            Some((i, false)) => o.inside[i].clone(),
            Some((i, true)) => vec![after(Some(i))],
            None => {
                vec![if rec.spans.first().is_none_or(|s| at <= s.0) {
                    o.initial
                } else {
                    after(o.after.len().checked_sub(1))
                }]
            }
        },
    }
}

/// Where a point lies, for messages.
pub fn describe_point(rec: &Recording, at: usize, kind: PointKind) -> String {
    let call = |i: usize| format!("call {i} `{}`", rec.workload.calls[i]);
    match kind {
        PointKind::Mark(l) => format!("after {} returned (event {at})", call((l / 2) as usize)),
        PointKind::End => format!("at the end of the workload (event {at})"),
        PointKind::Fence => match rec.call_at(at) {
            Some((i, _)) => format!("inside {}, just before the fence at event {at}", call(i)),
            None => format!("outside every call, before the fence at event {at}"),
        },
    }
}

/// The text of a state mismatch: the diff from each allowed state.
pub fn mismatch(rec: &Recording, allowed: &[usize], got: &Tree) -> String {
    let mut s = String::from("the recovered state is none of the states allowed here\n");
    // A long range of prefixes (buffered): its two ends and the state
    // nearest to the one recovered (fewest differing lines).
    let mut shown = allowed.to_vec();
    if allowed.len() > 3 {
        let lines = |i: usize| diff_trees(rec.expected_tree(i), got).lines().count();
        let nearest = allowed.iter().copied().min_by_key(|&i| lines(i)).expect("a non-empty range");
        shown = vec![allowed[0], nearest, allowed[allowed.len() - 1]];
        shown.dedup();
        s += &format!(
            "  ({} states allowed: {}; the first, the nearest and the last shown)\n",
            allowed.len(),
            allowed.iter().map(|&i| rec.expected_name(i)).collect::<Vec<_>>().join("; ")
        );
    }
    for &i in &shown {
        s += &format!("  --- expected {} (- expected, + recovered):\n", rec.expected_name(i));
        for l in diff_trees(rec.expected_tree(i), got).lines() {
            s += &format!("    {l}\n");
        }
    }
    s
}

/// Check one workload on one start image.
pub fn run_workload(kind: StartKind, w: &Workload, cfg: &Config) -> (Figures, Vec<Failure>) {
    crate::tune_allocator();
    let t0 = Instant::now();
    let st = start(kind);
    let rec = record(&st, w);
    let (mut fig, failures) = check_recording(kind, &rec, cfg);
    fig.elapsed = t0.elapsed();
    (fig, failures)
}

/// Check a recorded workload (the self-tests pass one whose trace was
/// deliberately broken, see [`Recording::with_events`], to show that the
/// harness catches the breakage).
pub fn check_recording(kind: StartKind, rec: &Recording, cfg: &Config) -> (Figures, Vec<Failure>) {
    let events = &rec.events[..];
    let t0 = Instant::now();
    let st = start(kind);
    let w = &rec.workload;
    let mut fig = Figures {
        workloads: 1,
        calls: w.calls.len() as u64,
        events: events.len() as u64,
        fences: events.iter().filter(|e| matches!(e, ferrite_pmem::Event::Fence)).count() as u64,
        ..Figures::default()
    };
    let mut failures = Vec::new();
    let tok = |point: &str| Token { seed: cfg.seed, start: kind, workload: w.id.clone(), point: point.to_string() };
    for d in &rec.divergences {
        failures.push(Failure {
            token: tok("live").to_string(),
            message: format!("the engine and the model disagree while running (no crash involved):\n{d}"),
        });
    }
    let report = rec.pcheck();
    fig.pcheck_guarded = report.guarded.values().sum();
    fig.redundant_flushes = report.redundant_flushes;
    if !report.violations.is_empty() {
        let mut m = String::from("persistence checker:\n");
        for v in report.violations.iter().take(10) {
            m += &format!("  {v}\n");
        }
        failures.push(Failure { token: tok("pcheck").to_string(), message: m });
    }
    let oid = opts_id(&cfg.verify);
    let mut sim = Sim::new(&rec.base, events);
    let mut last_at = usize::MAX;
    'points: while let Some(kind_) = sim.next_point() {
        let at = sim.position();
        if kind_ == PointKind::End && at == last_at {
            continue; // the end marker of the last call was the same point
        }
        last_at = at;
        match kind_ {
            PointKind::Fence | PointKind::End => {}
            PointKind::Mark(l) if l % 2 == 1 => {
                debug_assert_eq!(l, end_mark((l / 2) as usize));
            }
            PointKind::Mark(_) => continue,
        }
        fig.points += 1;
        let allow = allowed(rec, at, kind_);
        let seed = point_seed(cfg.seed, &w.id, at);
        for c in sim.candidates(&cfg.caps, seed) {
            fig.states += 1;
            let key = sim.key(&c);
            let hit = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&(oid, key)).cloned();
            let outcome = match hit {
                Some(o) => o,
                None => {
                    let img = sim.build(&c);
                    let o = match verify(&img, st.geometry, &cfg.verify) {
                        Ok(v) => {
                            fig.recovery_images += v.nested_images;
                            Cached::Ok(v.tree_key, intern(v.tree, v.tree_key))
                        }
                        Err(f) => Cached::Fail(Arc::new(f)),
                    };
                    fig.distinct_images += 1;
                    cache().lock().unwrap_or_else(|e| e.into_inner()).insert((oid, key), o.clone());
                    o
                }
            };
            let problem = match &outcome {
                Cached::Ok(k, t) => {
                    if allow.iter().any(|&i| rec.expected_key(i) == *k) {
                        let longest = allow.iter().copied().max().expect("a state is allowed");
                        if rec.prefix.is_some() && rec.expected_key(longest) != *k {
                            fig.behind += 1;
                        }
                        None
                    } else {
                        Some((String::new(), mismatch(rec, &allow, t)))
                    }
                }
                Cached::Fail(f) => Some((f.nested.clone(), f.message.clone())),
            };
            let problem = problem.filter(|(_, m)| !crate::verify::ignored_failure(m));
            if let Some((nested, msg)) = problem {
                let mut point = format!("e{at}:{}", c.label);
                if !nested.is_empty() {
                    point += &format!(":{nested}");
                }
                failures.push(Failure {
                    token: tok(&point).to_string(),
                    message: format!(
                        "crash {} (image {}, {} lines pending):\n{msg}",
                        describe_point(rec, at, kind_),
                        c.label,
                        sim.pending_lines().len()
                    ),
                });
                if failures.len() >= cfg.max_failures_per_workload {
                    break 'points;
                }
            }
        }
    }
    fig.elapsed = t0.elapsed();
    (fig, failures)
}

/// Run many workloads over start images with `cfg.threads` workers,
/// printing progress (states per second, projected time). Returns the
/// totals and every failure.
pub fn run_all(name: &str, jobs: &[(StartKind, Workload)], cfg: &Config) -> (Figures, Vec<Failure>) {
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let total = Mutex::new(Figures::default());
    let failures = Mutex::new(Vec::new());
    let last_print = Mutex::new(Instant::now());
    let threads = cfg.threads.max(1);
    // Build the start images first (not counted as checking time).
    for k in StartKind::ALL {
        if jobs.iter().any(|(s, _)| *s == k) {
            start(k);
        }
    }
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((k, w)) = jobs.get(i) else { break };
                let (f, fl) = run_workload(*k, w, cfg);
                let mut tot = total.lock().unwrap_or_else(|e| e.into_inner());
                tot.add(&f);
                let done = tot.workloads;
                let states = tot.states;
                let distinct = tot.distinct_images;
                drop(tot);
                if !fl.is_empty() {
                    let mut all = failures.lock().unwrap_or_else(|e| e.into_inner());
                    for x in &fl {
                        eprintln!("{name}: {x}");
                    }
                    all.extend(fl);
                }
                if let Some(every) = cfg.progress_every {
                    let mut lp = last_print.lock().unwrap_or_else(|e| e.into_inner());
                    if lp.elapsed() >= every {
                        *lp = Instant::now();
                        let el = t0.elapsed().as_secs_f64();
                        let projected = el * jobs.len() as f64 / done as f64;
                        say(&format!(
                            "{name}: {done}/{} workloads, {states} states checked ({distinct} distinct images), {:.0} states/s, {:.0}s elapsed, projected {:.0}s",
                            jobs.len(),
                            states as f64 / el,
                            el,
                            projected
                        ));
                    }
                }
            });
        }
    });
    let mut fig = total.into_inner().unwrap_or_else(|e| e.into_inner());
    fig.elapsed = t0.elapsed();
    (fig, failures.into_inner().unwrap_or_else(|e| e.into_inner()))
}
