//! Tokens: one string that names a failure exactly, and its replay.
//!
//! `cc1:SEED:START:WORKLOAD:POINT`
//! - SEED: the run's seed (hex), which seeds the random line subsets;
//! - START: `empty`, `aged`, `full` or `logedge`;
//! - WORKLOAD: `s1.OP`, `s2.OP+OP`, `s3.OP+OP+OP` (catalogue names),
//!   `a1.OP`, `a2.OP+OP` (the fsync-atomic catalogue), `z1.OP`, `z2.OP+OP`
//!   (the zero-copy catalogue, pairs possibly with a main catalogue op),
//!   `b1.OP`, `b2.OP+OP` (the buffered catalogue, on a buffered mount),
//!   `rnd.SEED.LEN`, `rndm.SEED.LEN`, `rndz.SEED.LEN` and `rndb.SEED.LEN`
//!   (the random generator: strict, mixing the modes, with peek and patch,
//!   on a buffered mount), `sc.NAME` (a scenario) or `bsc.NAME` (a
//!   scenario on a buffered mount); any of these prefixed with `file.` when the
//!   workload was recorded on a pool file (`exec::Backing::File`);
//! - POINT: `live` (engine and model disagree without a crash), `pcheck`
//!   (the persistence checker), or `eN:LABEL` (the crash point before event
//!   N of the workload's trace, and the candidate image's label, see
//!   [`crate::crash`]), optionally followed by `:rM:LABEL` for a crash of
//!   the recovery of that image before recovery's event M.
//!
//! Replay: `cargo run -p ferrite-crashcheck -- replay TOKEN`.

use crate::crash::Sim;
use crate::exec::{record_on, start, Backing};
use crate::harness::{allowed, describe_point, mismatch, point_seed, Config};
use crate::hash::tree_key;
use crate::verify::{crash_recovery, fsck_clean, mount, verify};
use crate::workload::{parse_u64, workload_by_id, StartKind};
use ferrite_model::tree_of;
use ferrite_pmem::{Event, Pmem};
use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub seed: u64,
    pub start: StartKind,
    pub workload: String,
    pub point: String,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cc1:{:#x}:{}:{}:{}", self.seed, self.start.name(), self.workload, self.point)
    }
}

impl std::str::FromStr for Token {
    type Err = String;
    fn from_str(s: &str) -> Result<Token, String> {
        let mut parts = s.trim().splitn(5, ':');
        let (Some("cc1"), Some(seed), Some(st), Some(w), Some(point)) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("not a token (cc1:SEED:START:WORKLOAD:POINT): {s:?}"));
        };
        Ok(Token {
            seed: parse_u64(seed).ok_or_else(|| format!("bad seed {seed:?}"))?,
            start: StartKind::parse(st).ok_or_else(|| format!("bad start image {st:?}"))?,
            workload: w.to_string(),
            point: point.to_string(),
        })
    }
}

fn event_text(e: &Event) -> String {
    match e {
        Event::Store { offset, data } => format!("store {} bytes at {offset:#x}", data.len()),
        Event::NtStore { offset, data } => format!("nt-store {} bytes at {offset:#x}", data.len()),
        Event::Flush { offset, len } => format!("flush {len} bytes at {offset:#x}"),
        Event::Fence => "fence".into(),
        Event::Commit { offset, value } => format!("commit {value:#x} at {offset:#x}"),
        Event::NtCommit { offset, value } => format!("nt-commit {value:#x} at {offset:#x}"),
        Event::Mark { label } => format!("mark {label}"),
    }
}

/// Replay a token: rebuild the workload, its trace and the named image,
/// and check it again, explaining what happens. Returns the explanation and
/// whether the failure reproduced.
pub fn replay(token: &str) -> Result<(String, bool), String> {
    let t: Token = token.parse()?;
    // `file.ID`: the workload was recorded on a pool file.
    let (backing, id) = match t.workload.strip_prefix("file.") {
        Some(id) => (Backing::File, id),
        None => (Backing::Heap, t.workload.as_str()),
    };
    let mut w = workload_by_id(id)?;
    w.id = t.workload.clone();
    let st = start(t.start);
    let rec = record_on(&st, &w, backing);
    let mut out = String::new();
    let _ = writeln!(out, "token:    {t}");
    let _ = writeln!(out, "start:    {} image", t.start.name());
    let _ = writeln!(out, "workload: {} ({} events recorded)", w.id, rec.events.len());
    if !w.prepare.is_empty() {
        let _ = writeln!(out, "  prepare {} calls, the last: {}", w.prepare.len(), w.prepare[w.prepare.len() - 1]);
    }
    for c in &w.setup {
        let _ = writeln!(out, "  setup   {c}");
    }
    for (i, c) in w.calls.iter().enumerate() {
        let o = &rec.outcomes[i];
        let _ = writeln!(
            out,
            "  call {i:>2} {c}  -> engine {:?}, model {:?}{}  [events {}..{}]",
            o.engine,
            o.model,
            if o.enospc_accepted { " (ENOSPC accepted)" } else { "" },
            rec.spans[i].0,
            rec.spans[i].1
        );
    }
    if t.point == "live" {
        for d in &rec.divergences {
            let _ = writeln!(out, "DIVERGENCE: {d}");
        }
        return Ok((out, !rec.divergences.is_empty()));
    }
    if t.point == "pcheck" {
        let r = rec.pcheck();
        let _ = writeln!(
            out,
            "persistence checker: guarded writes {:?}, {} redundant flushes",
            r.guarded, r.redundant_flushes
        );
        for v in &r.violations {
            let _ = writeln!(out, "VIOLATION: {v}");
            let lo = v.event.saturating_sub(6);
            for (i, e) in rec.events.iter().enumerate().skip(lo).take(14) {
                let _ = writeln!(out, "    {}{i:>6} {}", if i == v.event { ">" } else { " " }, event_text(e));
            }
        }
        return Ok((out, !r.violations.is_empty()));
    }
    let mut parts = t.point.splitn(3, ':');
    let at: usize = parts
        .next()
        .and_then(|p| p.strip_prefix('e'))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("bad point {:?}", t.point))?;
    let label = parts.next().ok_or("point without an image label")?;
    let rest = parts.next();
    // Labels themselves may contain one ':' (e.g. "L:3f", "T:12:p1:n");
    // re-split: the nested part starts at ":r".
    let (label, nested) = {
        let full = match rest {
            Some(r) => format!("{label}:{r}"),
            None => label.to_string(),
        };
        match full.find(":r") {
            Some(i) => (full[..i].to_string(), Some(full[i + 2..].to_string())),
            None => (full, None),
        }
    };
    let mut sim = Sim::new(&rec.base, &rec.events);
    let kind = sim.run_to(at).ok_or_else(|| format!("the trace has no crash point before event {at}"))?;
    let cfg = Config::new(t.seed);
    let cands = sim.candidates(&cfg.caps, point_seed(t.seed, &w.id, at));
    let c =
        cands.iter().find(|c| c.label == label).ok_or_else(|| format!("no image labelled {label:?} at this point"))?;
    let _ = writeln!(out, "crash:    {}", describe_point(&rec, at, kind));
    let pend = sim.pending_lines();
    let _ = writeln!(
        out,
        "image:    {label}: {} of {} pending words persisted a prefix; {} lines pending: {}",
        c.prefix.iter().filter(|p| p.1 > 0).count(),
        sim.pending().len(),
        pend.len(),
        pend.iter().take(16).map(|l| format!("{:#x}", l * 64)).collect::<Vec<_>>().join(" ")
    );
    let lo = at.saturating_sub(8);
    for (i, e) in rec.events.iter().enumerate().skip(lo).take(10) {
        let _ = writeln!(out, "    {}{i:>6} {}", if i == at { ">" } else { " " }, event_text(e));
    }
    let img = sim.build(c);
    let allow = allowed(&rec, at, kind);
    if let Some(n) = nested {
        let (r, l) = n.split_once(':').ok_or("bad nested point")?;
        let r: usize = r.parse().map_err(|_| "bad nested event")?;
        let fs = mount(Pmem::recording_from_image(&img), 2)?;
        let events = fs.pmem().stop_recording();
        let tree = tree_of(&fs).map_err(|e| format!("tree: {e:?}"))?;
        drop(fs);
        let _ =
            writeln!(out, "recovery of that image: {} events; crashing it before event {r}, image {l}", events.len());
        let res = crash_recovery(&img, &events, tree_key(&tree), &tree, &cfg.verify.recovery_caps, Some((r, l)));
        return Ok(match res {
            Ok(n) => {
                let _ = writeln!(out, "PASS: {n} image(s) of the interrupted recovery recover to the same state");
                (out, false)
            }
            Err(f) => {
                let _ = writeln!(out, "FAIL: {}", f.message);
                (out, true)
            }
        });
    }
    if let Err(m) = fsck_clean(&img) {
        let _ = writeln!(out, "fsck of the crash image: {m}");
    }
    match verify(&img, st.geometry, &cfg.verify) {
        Err(f) => {
            let _ = writeln!(
                out,
                "FAIL: {}{}",
                if f.nested.is_empty() { String::new() } else { format!("[{}] ", f.nested) },
                f.message
            );
            Ok((out, true))
        }
        Ok(v) => {
            if allow.iter().any(|&i| rec.expected_key(i) == v.tree_key) {
                let _ = writeln!(out, "PASS: the recovered state is an allowed one (and every check passed)");
                Ok((out, false))
            } else {
                let _ = writeln!(out, "FAIL: {}", mismatch(&rec, &allow, &v.tree));
                Ok((out, true))
            }
        }
    }
}
