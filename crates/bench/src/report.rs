//! Results of a run: the Markdown tables, the CSV rows, the JSON document
//! and the summary against the project's targets.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use crate::stats::Spread;
use crate::target::MediaBytes;
use crate::workload::{Accounting, Better, Metric};

/// What the accounting pass found on one target.
#[derive(Clone, Copy, Debug)]
pub struct AcctOut {
    pub media: MediaBytes,
    pub bytes_written: u64,
    pub ops: u64,
}

/// Everything measured for one workload.
pub struct WorkloadResult {
    pub name: String,
    pub group: &'static str,
    pub params: String,
    pub metrics: &'static [Metric],
    /// Every target of the run, in the order of `values`.
    pub targets: Vec<String>,
    /// `values[target]` = `Some(rounds[metric])`, or `None` when the
    /// workload does not apply to the target (or failed on it: see `notes`).
    pub values: Vec<Option<Vec<Vec<f64>>>>,
    pub accounting: Accounting,
    /// Per target, when the target can count its media writes.
    pub media: Vec<Option<AcctOut>>,
    /// Why a target has no figures, and what probes described.
    pub notes: Vec<String>,
}

impl WorkloadResult {
    pub fn target_ix(&self, name: &str) -> Option<usize> {
        self.targets.iter().position(|t| t == name)
    }

    pub fn metric_ix(&self, key: &str) -> Option<usize> {
        self.metrics.iter().position(|m| m.key == key)
    }

    /// Per-round values of one figure (NaN rounds dropped).
    pub fn series(&self, target: usize, metric: usize) -> Option<Vec<f64>> {
        let v: Vec<f64> = self.values[target].as_ref()?.iter().map(|r| r[metric]).filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then_some(v)
    }

    pub fn spread(&self, target: &str, key: &str) -> Option<Spread> {
        Spread::of(&self.series(self.target_ix(target)?, self.metric_ix(key)?)?)
    }

    /// Per-round "how much better is `a` than `b`" (> 1 = `a` better):
    /// a / b for throughput, b / a for times. Rounds are interleaved, so
    /// round i of both ran back to back.
    pub fn ratios(&self, a: usize, b: usize, metric: usize) -> Option<Vec<f64>> {
        let better = self.metrics[metric].better;
        let (va, vb) = (self.values[a].as_ref()?, self.values[b].as_ref()?);
        let v: Vec<f64> =
            va.iter().zip(vb).map(|(ra, rb)| ratio(better, ra[metric], rb[metric])).filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then_some(v)
    }

    pub fn ratio_spread(&self, a: &str, b: &str, key: &str) -> Option<Spread> {
        Spread::of(&self.ratios(self.target_ix(a)?, self.target_ix(b)?, self.metric_ix(key)?)?)
    }

    /// Per-round "how much better is metric `ka` of target `a` than metric
    /// `kb` of target `b`" (> 1 = `a` better, in `ka`'s direction): the
    /// zero-copy workloads compare methods across targets (Ferrite's peek
    /// with tmpfs's pread). Rounds are interleaved, so round i of both ran
    /// back to back; rounds where either figure is missing are dropped.
    pub fn cross_ratio_spread(&self, a: &str, ka: &str, b: &str, kb: &str) -> Option<Spread> {
        let (ma, mb) = (self.metric_ix(ka)?, self.metric_ix(kb)?);
        let (va, vb) = (self.values[self.target_ix(a)?].as_ref()?, self.values[self.target_ix(b)?].as_ref()?);
        let better = self.metrics[ma].better;
        let v: Vec<f64> =
            va.iter().zip(vb).map(|(ra, rb)| ratio(better, ra[ma], rb[mb])).filter(|x| x.is_finite()).collect();
        Spread::of(&v)
    }

    /// The accounting rows: (key, label, value per target).
    pub fn accounting_rows(&self) -> Vec<(&'static str, &'static str, Vec<Option<f64>>)> {
        let per = |f: &dyn Fn(&AcctOut) -> Option<f64>| -> Vec<Option<f64>> {
            self.media.iter().map(|m| m.as_ref().and_then(f)).collect()
        };
        match self.accounting {
            Accounting::None => vec![],
            Accounting::PerByte => vec![
                (
                    "write_amp",
                    "write amplification (bytes stored to media / bytes written)",
                    per(&|a| (a.bytes_written > 0).then(|| a.media.stored as f64 / a.bytes_written as f64)),
                ),
                (
                    "write_amp_lines",
                    "write amplification in 64 B lines written back",
                    per(&|a| {
                        let l = a.media.lines?;
                        (a.bytes_written > 0).then(|| (l * 64) as f64 / a.bytes_written as f64)
                    }),
                ),
                ("fences_per_op", "fences per op", per(&|a| Some(a.media.fences? as f64 / a.ops.max(1) as f64))),
            ],
            Accounting::PerOp => vec![
                (
                    "media_bytes_per_op",
                    "bytes stored to media per op",
                    per(&|a| Some(a.media.stored as f64 / a.ops.max(1) as f64)),
                ),
                ("fences_per_op", "fences per op", per(&|a| Some(a.media.fences? as f64 / a.ops.max(1) as f64))),
            ],
        }
    }
}

fn ratio(better: Better, a: f64, b: f64) -> f64 {
    match better {
        Better::Higher => a / b,
        Better::Lower => b / a,
    }
}

pub fn fmt_value(unit: &str, v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    match unit {
        "ops/s" if v >= 1e6 => format!("{:.2}M", v / 1e6),
        "ops/s" if v >= 1e4 => format!("{:.0}k", v / 1e3),
        "ops/s" if v >= 1e3 => format!("{:.1}k", v / 1e3),
        "ops/s" => format!("{v:.0}"),
        "x" => fmt_ratio(v),
        // Rare request kinds (one OPENDIR for a whole tree) stay visible.
        crate::tree::REQ_UNIT if v > 0.0 && v < 0.01 => format!("{v:.1e}"),
        _ if v >= 100.0 => format!("{v:.0}"),
        _ if v >= 10.0 => format!("{v:.1}"),
        _ if v >= 0.1 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

fn fmt_spread(s: Spread, f: impl Fn(f64) -> String) -> String {
    if s.min == s.max {
        format!("**{}**", f(s.median))
    } else {
        format!("**{}** ({}–{})", f(s.median), f(s.min), f(s.max))
    }
}

pub fn fmt_ratio(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}×")
    } else {
        format!("{v:.2}×")
    }
}

fn unit_label(unit: &str) -> &str {
    match unit {
        "us" => "µs",
        u => u,
    }
}

/// Targets whose ratios to the others are shown: the engine linked in (in
/// its three modes), the engine through the preload library, and through
/// the FUSE mount.
const SUBJECTS: [&str; 7] =
    ["ferrite", "ferrite-atomic", "ferrite-buffered", "preload", "fuse", "fuse-dev", "fuse-direct"];

/// Pairs of subjects whose ratio is shown the other way round from the
/// order of `SUBJECTS`: a buffered mount is measured against the strict
/// and fsync-atomic modes (how much it gains), not the reverse.
fn leads(a: &str, b: &str) -> bool {
    a == "ferrite-buffered" && (b == "ferrite" || b == "ferrite-atomic")
}

/// The (subject, other) pairs that get a ratio column, in the order of the
/// run: ferrite vs every other target, then ferrite-atomic vs every other
/// target but ferrite, then ferrite-buffered (vs ferrite and ferrite-atomic
/// too), preload, fuse and fuse-direct likewise (pairs already there
/// appear once, inverted).
fn pairs(targets: &[String]) -> Vec<(&str, &str)> {
    let mut v = Vec::new();
    for a in SUBJECTS.iter().filter(|a| targets.iter().any(|t| t == *a)) {
        for b in targets {
            // Each pair once: a later subject's ratio to an earlier one is
            // already there, inverted (unless the later one leads).
            let earlier = SUBJECTS.iter().take_while(|s| *s != a).any(|s| s == b);
            if b != a && (!earlier || leads(a, b)) && !leads(b, a) {
                v.push((*a, b.as_str()));
            }
        }
    }
    v
}

/// The results as Markdown tables, one per group: medians over rounds in
/// bold with the min–max spread in parentheses, then one "ferrite vs X"
/// ratio column per other target.
pub fn markdown_tables(results: &[WorkloadResult]) -> String {
    let mut out = String::new();
    let mut groups: Vec<&str> = Vec::new();
    for w in results {
        if !groups.contains(&w.group) {
            groups.push(w.group);
        }
    }
    for g in groups {
        let rs: Vec<&WorkloadResult> = results.iter().filter(|w| w.group == g).collect();
        let targets = &rs[0].targets;
        // Only the pairs with a ratio somewhere in the group (the tree
        // workloads have no `ferrite` figures, for instance).
        let pairs: Vec<(&str, &str)> = pairs(targets)
            .into_iter()
            .filter(|(a, b)| {
                rs.iter().any(|w| {
                    let (ia, ib) = (w.target_ix(a).unwrap(), w.target_ix(b).unwrap());
                    (0..w.metrics.len()).any(|mi| w.ratios(ia, ib, mi).is_some())
                })
            })
            .collect();
        let _ = writeln!(out, "\n#### {}\n", group_title(g));
        out.push_str("| workload | metric |");
        for t in targets {
            let _ = write!(out, " {t} |");
        }
        for (a, b) in &pairs {
            let _ = write!(out, " {a} vs {b} |");
        }
        out.push_str("\n|---|---|");
        let ncols = targets.len() + pairs.len();
        for _ in 0..ncols {
            out.push_str("---:|");
        }
        out.push('\n');
        for w in rs {
            for (mi, m) in w.metrics.iter().enumerate() {
                if hidden_when_zero(m)
                    && (0..targets.len()).all(|ti| w.series(ti, mi).is_none_or(|s| s.iter().all(|&v| v == 0.0)))
                {
                    continue; // a request kind the kernel never sent here
                }
                let _ = write!(out, "| {} | {} ({}) |", w.name, m.label, unit_label(m.unit));
                for ti in 0..targets.len() {
                    let cell = w
                        .series(ti, mi)
                        .and_then(|s| Spread::of(&s))
                        .map_or("n/a".to_string(), |s| fmt_spread(s, |v| fmt_value(m.unit, v)));
                    let _ = write!(out, " {cell} |");
                }
                for (a, b) in &pairs {
                    let cell = w
                        .ratios(w.target_ix(a).unwrap(), w.target_ix(b).unwrap(), mi)
                        .and_then(|r| Spread::of(&r))
                        .map_or("–".to_string(), |s| fmt_spread(s, fmt_ratio));
                    let _ = write!(out, " {cell} |");
                }
                out.push('\n');
            }
            for (_, label, vals) in w.accounting_rows() {
                let _ = write!(out, "| {} | {label} |", w.name);
                for v in &vals {
                    let _ = write!(out, " {} |", v.map_or("n/a".to_string(), |v| fmt_value("", v)));
                }
                for _ in &pairs {
                    out.push_str(" |");
                }
                out.push('\n');
            }
        }
        for w in results.iter().filter(|w| w.group == g) {
            for n in &w.notes {
                let _ = writeln!(out, "\n- {}: {n}", w.name);
            }
        }
    }
    out
}

/// Rows of request kinds (the tree workloads' per-kind FUSE counts) are left
/// out of the table when no target has a nonzero figure; the total stays.
fn hidden_when_zero(m: &Metric) -> bool {
    m.unit == crate::tree::REQ_UNIT && m.key != "req_all"
}

pub fn group_title(g: &str) -> &str {
    match g {
        "fio" => "fio-style I/O, 1 thread, 4 KiB",
        "sizes" => "Write sizes (random aligned overwrites)",
        "fsync" => "Random 4 KiB writes with fsync every k writes",
        "mix" => "Read/write mixes (random 4 KiB)",
        "threads" => "Two threads (random 4 KiB)",
        "meta" => "Metadata: directory operations, NOVA microbenchmark, publishing a file, lookups",
        "filebench" => "Filebench-like personalities",
        "remount" => "Remount",
        "tree" => "Tree workloads (issue 11): cp -a, tar x, rm -rf of a real tree by the real programs",
        "zerocopy" => "Zero-copy peek and patch (issue 12): methods side by side on each target",
        "buffered" => "Buffered mode (issue 13): bursts and sustained runs, with the buffered persister's figures",
        g => g,
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per (workload, metric, target, round); rows for the per-round
/// ratios (target `S/X` for a subject S such as ferrite or fuse, unit `x`;
/// above 1 means S is better, whatever the metric's direction); one row
/// per accounting figure (round `acct`).
pub fn write_csv(path: &Path, mode: &str, results: &[WorkloadResult]) -> io::Result<()> {
    let mut f = io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "mode,workload,metric,unit,better,target,round,value,params")?;
    for w in results {
        let params = csv_field(&w.params);
        for (mi, m) in w.metrics.iter().enumerate() {
            for (ti, t) in w.targets.iter().enumerate() {
                if let Some(rounds) = &w.values[ti] {
                    for (r, round) in rounds.iter().enumerate() {
                        let v = round[mi];
                        writeln!(
                            f,
                            "{mode},{},{},{},{},{t},{r},{v},{params}",
                            w.name,
                            m.key,
                            m.unit,
                            m.better.as_str()
                        )?;
                    }
                }
            }
            for (a, b) in pairs(&w.targets) {
                if let Some(rs) = w.ratios(w.target_ix(a).unwrap(), w.target_ix(b).unwrap(), mi) {
                    for (r, v) in rs.iter().enumerate() {
                        writeln!(f, "{mode},{},{},x,higher,{a}/{b},{r},{v},{params}", w.name, m.key)?;
                    }
                }
            }
        }
        for (key, _, vals) in w.accounting_rows() {
            for (t, v) in w.targets.iter().zip(vals) {
                if let Some(v) = v {
                    writeln!(f, "{mode},{},{key},x,lower,{t},acct,{v},{params}", w.name)?;
                }
            }
        }
    }
    f.flush()
}

// ---------------------------------------------------------------- summary

/// One of the goals of issue 4.
pub struct Goal {
    pub text: &'static str,
    pub workload: &'static str,
    pub metric: &'static str,
    pub kind: GoalKind,
}

pub enum GoalKind {
    /// The per-round ratio ferrite-vs-`other` (> 1 = Ferrite better) is at
    /// least `at_least`.
    Ratio { other: &'static str, at_least: f64 },
    /// Ferrite's own figure is at most `at_most` (in the metric's unit).
    AtMost { at_most: f64 },
    /// Ferrite's own figure, a ratio measured within the round (unit `x`),
    /// is at least `at_least`.
    AtLeast { at_least: f64 },
    /// The per-round ratio of Ferrite's `metric` to `other_metric` of
    /// target `other` (another method on another target) is at least
    /// `at_least`.
    Cross { other: &'static str, other_metric: &'static str, at_least: f64 },
}

pub fn goals() -> Vec<Goal> {
    use GoalKind::*;
    let r = |text, workload, metric, other, at_least| Goal { text, workload, metric, kind: Ratio { other, at_least } };
    vec![
        r("random 4 KiB write ≥ 3× tmpfs ops/s", "randwrite-4k", "ops_per_s", "tmpfs", 3.0),
        r("random 4 KiB read ≥ 4× tmpfs ops/s", "randread-4k", "ops_per_s", "tmpfs", 4.0),
        r("sequential 4 KiB read ≥ 4× tmpfs ops/s", "seqread-4k", "ops_per_s", "tmpfs", 4.0),
        r("random 4 KiB write + fsync every write ≥ 3× tmpfs", "randwrite-4k-fsync1", "ops_per_s", "tmpfs", 3.0),
        r("random 4 KiB write + fsync every write ≥ 30× ext4", "randwrite-4k-fsync1", "ops_per_s", "ext4", 30.0),
        r(
            "random 4 KiB write + fsync every write ≥ 30× ext4 data=journal (extra)",
            "randwrite-4k-fsync1",
            "ops_per_s",
            "ext4-journal",
            30.0,
        ),
        r("create ≥ 5× tmpfs", "dirops", "create_us", "tmpfs", 5.0),
        r("unlink ≥ 5× tmpfs", "dirops", "unlink_us", "tmpfs", 5.0),
        r("mkdir ≥ 5× tmpfs", "dirops", "mkdir_us", "tmpfs", 5.0),
        r("rmdir ≥ 5× tmpfs", "dirops", "rmdir_us", "tmpfs", 5.0),
        Goal {
            text: "stat in a 100,000-entry directory no slower than in a 10-entry one (big/small ≤ 1.10, a 10 % noise margin)",
            workload: "lookup",
            metric: "big_over_small",
            kind: AtMost { at_most: 1.10 },
        },
        r("random 4 KiB write within 1.5× of the hardware limit (ops/s ≥ 0.67× hw-limit)", "randwrite-4k", "ops_per_s", "hw-limit", 1.0 / 1.5),
        r("sequential 4 KiB write within 1.5× of the hardware limit (extra)", "seqwrite-4k", "ops_per_s", "hw-limit", 1.0 / 1.5),
        Goal {
            text: "remount after a clean unmount of a pool with 100,000 files < 10 ms",
            workload: "remount",
            metric: "clean_mount_ms",
            kind: AtMost { at_most: 10.0 },
        },
    ]
}

/// A goal evaluated on the results.
pub struct GoalResult {
    pub text: &'static str,
    pub workload: &'static str,
    /// Median, min, max of the judged figure; `None` if not measured.
    pub value: Option<Spread>,
    pub threshold: String,
    pub met: Option<bool>,
    /// The same figure for the hw-limit target: the most any file system
    /// could reach here (a ratio goal against tmpfs is out of reach when
    /// even the hardware limit falls short of it).
    pub ceiling: Option<Spread>,
    pub note: String,
}

/// The benchmark goals of issue 9 for the preload library (judged on the
/// `preload` target; the SQLite goals are measured by
/// `scripts/bench-preload.sh`).
pub fn preload_goals() -> Vec<Goal> {
    use GoalKind::*;
    let r = |text, workload, metric, other, at_least| Goal { text, workload, metric, kind: Ratio { other, at_least } };
    vec![
        r("preload: random 4 KiB write ≥ 1.5× tmpfs ops/s", "randwrite-4k", "ops_per_s", "tmpfs", 1.5),
        r("preload: random 4 KiB read ≥ 1.5× tmpfs ops/s", "randread-4k", "ops_per_s", "tmpfs", 1.5),
        r("preload: create ≥ 1× tmpfs", "dirops", "create_us", "tmpfs", 1.0),
        r("preload: unlink ≥ 1× tmpfs", "dirops", "unlink_us", "tmpfs", 1.0),
    ]
}

/// The benchmark goals of issue 11 for the FUSE mount (judged on the `fuse`
/// target): the tree workloads against tmpfs and ext4, and the
/// microbenchmarks through the mount.
pub fn fuse_goals() -> Vec<Goal> {
    use GoalKind::*;
    let r = |text, workload, metric, other, at_least| Goal { text, workload, metric, kind: Ratio { other, at_least } };
    vec![
        r("fuse: cp -a of the tree ≤ 2× tmpfs time", "cp-a", "time_s", "tmpfs", 0.5),
        r("fuse: cp -a of the tree faster than ext4 (both with syncfs)", "cp-a", "time_s", "ext4", 1.0),
        r("fuse: tar x of the tree ≤ 2× tmpfs time", "tar-x", "time_s", "tmpfs", 0.5),
        r("fuse: tar x of the tree faster than ext4 (both with syncfs)", "tar-x", "time_s", "ext4", 1.0),
        r("fuse: rm -rf of the tree ≤ 2× tmpfs time", "rm-rf", "time_s", "tmpfs", 0.5),
        Goal {
            text: "fuse: random 4 KiB write p50 ≤ 5 µs (strict mode)",
            workload: "randwrite-4k",
            metric: "p50_us",
            kind: AtMost { at_most: 5.0 },
        },
        r("fuse: create ≤ 3× tmpfs time", "dirops", "create_us", "tmpfs", 1.0 / 3.0),
        r("fuse: unlink ≤ 3× tmpfs time", "dirops", "unlink_us", "tmpfs", 1.0 / 3.0),
    ]
}

/// The benchmark goals of issue 12 (zero-copy peek and patch), judged on
/// the `ferrite` target's zero-copy workloads: peek against Ferrite's own
/// pread and patch against its own pwrite (ratios within each round), and
/// random 4 KiB reads by peek against tmpfs's pread.
pub fn zerocopy_goals() -> Vec<Goal> {
    use GoalKind::*;
    let own = |text, workload, metric, at_least| Goal { text, workload, metric, kind: AtLeast { at_least } };
    vec![
        own("peek + use ≥ 5× Ferrite's pread + use, 64 KiB", "zc-read-64k", "view_over_pread", 5.0),
        own("peek + use ≥ 5× Ferrite's pread + use, 1 MiB", "zc-read-1m", "view_over_pread", 5.0),
        own("peek + use ≥ 5× Ferrite's pread + use, 16 MiB", "zc-read-16m", "view_over_pread", 5.0),
        own("patch ≥ 2× pwrite, 64 KiB", "zc-write-64k", "patch_over_pwrite", 2.0),
        own("patch ≥ 2× pwrite, 1 MiB", "zc-write-1m", "patch_over_pwrite", 2.0),
        own("patch ≥ 2× pwrite, 16 MiB", "zc-write-16m", "patch_over_pwrite", 2.0),
        Goal {
            text: "random 4 KiB reads by peek ≥ 3× tmpfs pread",
            workload: "zc-randread-4k",
            metric: "view_mb_s",
            kind: Cross { other: "tmpfs", other_metric: "pread_mb_s", at_least: 3.0 },
        },
    ]
}

/// The benchmark goals of issue 13 (buffered mode), judged on the
/// `ferrite-buffered` target against tmpfs: directory operations on
/// `dirops` (10,000 of each, more than the queue holds, no final sync),
/// random 4 KiB writes in bursts and sustained (final sync included), and
/// two Filebench personalities.
pub fn buffered_goals() -> Vec<Goal> {
    use GoalKind::*;
    let r = |text, workload, metric, other, at_least| Goal { text, workload, metric, kind: Ratio { other, at_least } };
    vec![
        r("buffered: create ≥ 3× tmpfs", "dirops", "create_us", "tmpfs", 3.0),
        r("buffered: unlink ≥ 3× tmpfs", "dirops", "unlink_us", "tmpfs", 3.0),
        r("buffered: mkdir ≥ 3× tmpfs", "dirops", "mkdir_us", "tmpfs", 3.0),
        r("buffered: rmdir ≥ 3× tmpfs", "dirops", "rmdir_us", "tmpfs", 3.0),
        r("buffered: random 4 KiB writes in bursts ≥ 2× tmpfs ops/s", "burst-randwrite-4k", "ops_per_s", "tmpfs", 2.0),
        r(
            "buffered: random 4 KiB writes sustained (final sync included) ≥ 1× tmpfs ops/s",
            "sustained-randwrite-4k",
            "ops_per_s",
            "tmpfs",
            1.0,
        ),
        r("buffered: varmail ≥ 2× tmpfs flowops/s", "varmail", "ops_per_s", "tmpfs", 2.0),
        r("buffered: fileserver ≥ 2× tmpfs flowops/s", "fileserver", "ops_per_s", "tmpfs", 2.0),
    ]
}

/// The benchmark goals of issue 14 (strict mode near the hardware limit),
/// judged on the `ferrite` target.
pub fn issue14_goals() -> Vec<Goal> {
    use GoalKind::*;
    let r = |text, workload, metric, other, at_least| Goal { text, workload, metric, kind: Ratio { other, at_least } };
    let own = |text, workload, metric, at_least| Goal { text, workload, metric, kind: AtLeast { at_least } };
    let at_most = |text, workload, metric, at_most| Goal { text, workload, metric, kind: AtMost { at_most } };
    vec![
        r("random 4 KiB write ≥ 0.6× the hardware limit", "randwrite-4k", "ops_per_s", "hw-limit", 0.6),
        r("sequential 4 KiB write ≥ 0.7× the hardware limit", "seqwrite-4k", "ops_per_s", "hw-limit", 0.7),
        r("create ≥ 3× tmpfs", "dirops", "create_us", "tmpfs", 3.0),
        r("unlink ≥ 3× tmpfs", "dirops", "unlink_us", "tmpfs", 3.0),
        r("mkdir ≥ 3× tmpfs", "dirops", "mkdir_us", "tmpfs", 3.0),
        r("rmdir ≥ 3× tmpfs", "dirops", "rmdir_us", "tmpfs", 3.0),
        r("NOVA microbenchmark create ≥ 3× tmpfs", "nova-micro", "create_us", "tmpfs", 3.0),
        r("NOVA microbenchmark append ≥ 3× tmpfs", "nova-micro", "append_us", "tmpfs", 3.0),
        r("NOVA microbenchmark fsync ≥ 3× tmpfs", "nova-micro", "fsync_us", "tmpfs", 3.0),
        r("NOVA microbenchmark unlink ≥ 3× tmpfs", "nova-micro", "unlink_us", "tmpfs", 3.0),
        at_most("stat in a 100,000-entry directory ≤ 1.3× a 10-entry one", "lookup", "big_over_small", 1.3),
        own("2 threads on private files ≥ 1.8× one thread: writes", "scaling-2t", "private_write_x", 1.8),
        own("2 threads on private directories ≥ 1.8× one thread: creates", "scaling-2t", "create_x", 1.8),
        own("2 threads on private directories ≥ 1.8× one thread: unlinks", "scaling-2t", "unlink_x", 1.8),
        own("2 threads writing disjoint halves of one file ≥ 1.3× one thread", "scaling-2t", "shared_write_x", 1.3),
        at_most("mount after a crash of a pool with 100,000 files ≤ 50 ms", "remount", "crash_mount_ms", 50.0),
        own(
            "random 4 KiB writes on a pool aged to 95 % full ≥ 0.95× an empty pool's (over ten minutes)",
            "aging",
            "aged_over_empty",
            0.95,
        ),
        at_most(
            "remount after a clean unmount of a pool with 100,000 files < 10 ms",
            "remount",
            "clean_mount_ms",
            10.0,
        ),
    ]
}

/// The goals of issue 14, judged on the `ferrite` target.
pub fn evaluate_issue14(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(issue14_goals(), "ferrite", results, quick)
}

/// The goals of issue 13, judged on the `ferrite-buffered` target.
pub fn evaluate_buffered(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(buffered_goals(), "ferrite-buffered", results, quick)
}

/// The goals of issue 12, judged on the `ferrite` target.
pub fn evaluate_zerocopy(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(zerocopy_goals(), "ferrite", results, quick)
}

/// Comparisons across methods and targets for the zero-copy workloads:
/// (subject target, its metric, other target, its metric, label).
type Comparison = (&'static str, &'static str, &'static str, &'static str, &'static str);

const ZC_READ_COMPARISONS: [Comparison; 6] = [
    ("ferrite", "view_mb_s", "ferrite", "pread_mb_s", "peek / Ferrite pread"),
    ("ferrite", "view_mb_s", "tmpfs", "pread_mb_s", "peek / tmpfs pread"),
    ("ferrite", "view_mb_s", "tmpfs", "view_mb_s", "peek / tmpfs mmap per read"),
    ("ferrite", "view_mb_s", "tmpfs", "mapped_mb_s", "peek / tmpfs one mapping kept"),
    ("ferrite", "pread_mb_s", "tmpfs", "pread_mb_s", "Ferrite pread / tmpfs pread"),
    ("hw-limit", "view_mb_s", "hw-limit", "pread_mb_s", "hw-limit: pointer / copy (the most a view can win)"),
];

const ZC_WRITE_COMPARISONS: [Comparison; 4] = [
    ("ferrite", "patch_mb_s", "ferrite", "pwrite_mb_s", "patch / Ferrite pwrite"),
    ("ferrite", "patch_mb_s", "tmpfs", "pwrite_mb_s", "patch / tmpfs pwrite"),
    ("ferrite", "pwrite_mb_s", "tmpfs", "pwrite_mb_s", "Ferrite pwrite / tmpfs pwrite"),
    ("hw-limit", "patch_mb_s", "hw-limit", "pwrite_mb_s", "hw-limit: in place / NT copy (the most a patch can win)"),
];

const ZC_SERVE_COMPARISONS: [Comparison; 5] = [
    ("ferrite", "view_req_s", "ferrite", "pread_req_s", "peek / Ferrite pread"),
    ("ferrite", "view_req_s", "tmpfs", "pread_req_s", "peek / tmpfs pread"),
    ("ferrite", "view_req_s", "tmpfs", "view_req_s", "peek / tmpfs mmap"),
    ("ferrite", "view_req_s", "tmpfs", "sendfile_req_s", "peek / tmpfs sendfile"),
    ("hw-limit", "view_req_s", "hw-limit", "pread_req_s", "hw-limit: pointer / copy"),
];

/// The zero-copy comparisons as Markdown: one table per kind of workload
/// (reads, writes, serving), a row per workload, a column per comparison
/// (median of the per-round ratios, min–max; > 1 = the first named is
/// better). Empty when no zero-copy workload ran.
pub fn zerocopy_markdown(results: &[WorkloadResult]) -> String {
    let mut out = String::new();
    for (title, comps) in [
        ("Reads (each followed by the same use on every method)", &ZC_READ_COMPARISONS[..]),
        ("Writes", &ZC_WRITE_COMPARISONS[..]),
        ("Serving files to a socket", &ZC_SERVE_COMPARISONS[..]),
    ] {
        let rows: Vec<&WorkloadResult> =
            results.iter().filter(|w| w.group == "zerocopy" && w.metric_ix(comps[0].1).is_some()).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "
{title}:

| workload |"
        );
        for c in comps {
            let _ = write!(out, " {} |", c.4);
        }
        out.push_str(
            "
|---|",
        );
        for _ in comps {
            out.push_str("---:|");
        }
        out.push('\n');
        for w in rows {
            let _ = write!(out, "| {} |", w.name);
            for &(a, ka, b, kb, _) in comps {
                let cell = w.cross_ratio_spread(a, ka, b, kb).map_or("–".to_string(), |s| fmt_spread(s, fmt_ratio));
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
    }
    out
}

/// The goals of issue 11, judged on the `fuse` target.
pub fn evaluate_fuse(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(fuse_goals(), "fuse", results, quick)
}

/// The goals of issue 4, judged on the `ferrite` target.
pub fn evaluate(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(goals(), "ferrite", results, quick)
}

/// The goals of issue 9, judged on the `preload` target.
pub fn evaluate_preload(results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    evaluate_goals(preload_goals(), "preload", results, quick)
}

fn evaluate_goals(list: Vec<Goal>, subject: &str, results: &[WorkloadResult], quick: bool) -> Vec<GoalResult> {
    list.into_iter()
        .map(|g| {
            let w = results.iter().find(|w| w.name == g.workload);
            let (value, threshold, met, ceiling) = match g.kind {
                GoalKind::Ratio { other, at_least } => {
                    let v = w.and_then(|w| w.ratio_spread(subject, other, g.metric));
                    let c = if other == "hw-limit" {
                        None
                    } else {
                        w.and_then(|w| w.ratio_spread("hw-limit", other, g.metric))
                    };
                    (v, format!("≥ {}", fmt_ratio(at_least)), v.map(|s| s.median >= at_least), c)
                }
                GoalKind::AtMost { at_most } => {
                    let v = w.and_then(|w| w.spread(subject, g.metric));
                    let c = w.and_then(|w| w.spread("hw-limit", g.metric));
                    (v, format!("≤ {at_most}"), v.map(|s| s.median <= at_most), c)
                }
                GoalKind::AtLeast { at_least } => {
                    let v = w.and_then(|w| w.spread(subject, g.metric));
                    let c = w.and_then(|w| w.spread("hw-limit", g.metric));
                    (v, format!("≥ {}", fmt_ratio(at_least)), v.map(|s| s.median >= at_least), c)
                }
                GoalKind::Cross { other, other_metric, at_least } => {
                    let v = w.and_then(|w| w.cross_ratio_spread(subject, g.metric, other, other_metric));
                    let c = w.and_then(|w| w.cross_ratio_spread("hw-limit", g.metric, other, other_metric));
                    (v, format!("≥ {}", fmt_ratio(at_least)), v.map(|s| s.median >= at_least), c)
                }
            };
            let mut note = String::new();
            if g.workload == "remount" {
                let first = if g.metric == "crash_mount_ms" { "crash_first_ms" } else { "clean_first_ms" };
                if let Some(s) = w.and_then(|w| w.spread(subject, first)) {
                    note = format!("mount + first stat: {} ms", fmt_value("ms", s.median));
                }
            }
            if quick && matches!(g.workload, "lookup" | "remount") {
                note = format!("{note} (quick mode: scaled-down counts)").trim().to_string();
            }
            if w.is_none() {
                note = "workload not run".into();
            } else if value.is_none() {
                note = "a target it needs was not run".into();
            }
            GoalResult { text: g.text, workload: g.workload, value, threshold, met, ceiling, note }
        })
        .collect()
}

pub fn summary_markdown(goals: &[GoalResult]) -> String {
    let mut out = String::from(
        "| goal | workload | measured: median (min–max over rounds) | target | result | hw-limit on the same scale |\n\
         |---|---|---:|---:|---|---:|\n",
    );
    for g in goals {
        let unit_ratio = g.threshold.contains('×');
        let show = |x: Option<Spread>| {
            x.map_or("–".to_string(), |s| {
                let f = |v: f64| if unit_ratio { fmt_ratio(v) } else { fmt_value("ms", v) };
                if s.min == s.max {
                    f(s.median)
                } else {
                    format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
                }
            })
        };
        let val = show(g.value);
        let res = match g.met {
            Some(true) => "**met**",
            Some(false) => "**missed**",
            None => "not measured",
        };
        let note = if g.note.is_empty() { String::new() } else { format!("; {}", g.note) };
        let _ = writeln!(
            out,
            "| {} | {} | {val} | {} | {res}{note} | {} |",
            g.text,
            g.workload,
            g.threshold,
            show(g.ceiling)
        );
    }
    let met = goals.iter().filter(|g| g.met == Some(true)).count();
    let judged = goals.iter().filter(|g| g.met.is_some()).count();
    let _ = writeln!(
        out,
        "\n{met} of {judged} measured goals met. The last column is the hardware limit's own figure on the \
         goal's scale (hw-limit vs the same target, or its own value): a goal it does not reach is out of \
         reach for any design that copies the same bytes on this machine."
    );
    out
}

// ---------------------------------------------------------------- JSON

pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn json_spread(s: Option<Spread>) -> String {
    s.map_or("null".into(), |s| {
        format!("{{\"median\":{},\"min\":{},\"max\":{}}}", json_num(s.median), json_num(s.min), json_num(s.max))
    })
}

/// The run header for the JSON document.
pub struct RunInfo<'a> {
    pub mode: &'a str,
    pub command: &'a str,
    pub date: &'a str,
    pub machine: &'a str,
    pub load_start: &'a str,
    pub load_end: &'a str,
    pub rounds: usize,
    pub seed: u64,
    pub targets: &'a [(String, String)],
    pub skipped: &'a [String],
    pub errors: &'a [String],
    pub wall_s: f64,
}

pub fn write_json(path: &Path, info: &RunInfo, results: &[WorkloadResult], goals: &[GoalResult]) -> io::Result<()> {
    let mut o = String::from("{\n");
    let _ = writeln!(o, "  \"mode\": {},", json_str(info.mode));
    let _ = writeln!(o, "  \"command\": {},", json_str(info.command));
    let _ = writeln!(o, "  \"date\": {},", json_str(info.date));
    let _ = writeln!(o, "  \"machine\": {},", json_str(info.machine));
    let _ = writeln!(o, "  \"load_start\": {},", json_str(info.load_start));
    let _ = writeln!(o, "  \"load_end\": {},", json_str(info.load_end));
    let _ = writeln!(o, "  \"rounds\": {},", info.rounds);
    let _ = writeln!(o, "  \"seed\": {},", info.seed);
    let _ = writeln!(o, "  \"wall_seconds\": {:.1},", info.wall_s);
    let list = |v: &[String]| v.iter().map(|s| json_str(s)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(
        o,
        "  \"targets\": [{}],",
        info.targets
            .iter()
            .map(|(n, d)| format!("{{\"name\": {}, \"describe\": {}}}", json_str(n), json_str(d)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(o, "  \"skipped\": [{}],", list(info.skipped));
    let _ = writeln!(o, "  \"errors\": [{}],", list(info.errors));
    o.push_str("  \"workloads\": [\n");
    for (wi, w) in results.iter().enumerate() {
        let _ = writeln!(
            o,
            "    {{\"name\": {}, \"group\": {}, \"params\": {},",
            json_str(&w.name),
            json_str(w.group),
            json_str(&w.params)
        );
        let _ = writeln!(o, "     \"notes\": [{}],", list(&w.notes));
        o.push_str("     \"metrics\": [\n");
        for (mi, m) in w.metrics.iter().enumerate() {
            let _ = write!(
                o,
                "       {{\"key\": {}, \"label\": {}, \"unit\": {}, \"better\": {}, \"targets\": {{",
                json_str(m.key),
                json_str(m.label),
                json_str(m.unit),
                json_str(m.better.as_str())
            );
            let mut first = true;
            for (ti, t) in w.targets.iter().enumerate() {
                let rounds = match &w.values[ti] {
                    Some(rs) => format!("[{}]", rs.iter().map(|r| json_num(r[mi])).collect::<Vec<_>>().join(",")),
                    None => "null".into(),
                };
                let s = w.series(ti, mi).and_then(|s| Spread::of(&s));
                let _ = write!(
                    o,
                    "{}{}: {{\"rounds\": {rounds}, \"summary\": {}}}",
                    if first { "" } else { ", " },
                    json_str(t),
                    json_spread(s)
                );
                first = false;
            }
            o.push_str("}, \"ratios\": {");
            let mut first = true;
            for (a, b) in pairs(&w.targets) {
                let s = w.ratios(w.target_ix(a).unwrap(), w.target_ix(b).unwrap(), mi).and_then(|r| Spread::of(&r));
                let _ =
                    write!(o, "{}{}: {}", if first { "" } else { ", " }, json_str(&format!("{a}/{b}")), json_spread(s));
                first = false;
            }
            let _ = writeln!(o, "}}}}{}", if mi + 1 < w.metrics.len() { "," } else { "" });
        }
        o.push_str("     ],\n     \"accounting\": {");
        let rows = w.accounting_rows();
        for (ri, (key, label, vals)) in rows.iter().enumerate() {
            let per: Vec<String> = w
                .targets
                .iter()
                .zip(vals)
                .map(|(t, v)| format!("{}: {}", json_str(t), v.map_or("null".into(), json_num)))
                .collect();
            let _ = write!(
                o,
                "{}{}: {{\"label\": {}, \"targets\": {{{}}}}}",
                if ri == 0 { "" } else { ", " },
                json_str(key),
                json_str(label),
                per.join(", ")
            );
        }
        let _ = writeln!(o, "}}}}{}", if wi + 1 < results.len() { "," } else { "" });
    }
    o.push_str("  ],\n  \"summary\": [\n");
    for (gi, g) in goals.iter().enumerate() {
        let _ = writeln!(
            o,
            "    {{\"goal\": {}, \"workload\": {}, \"value\": {}, \"hw_limit\": {}, \"threshold\": {}, \"met\": {}, \"note\": {}}}{}",
            json_str(g.text),
            json_str(g.workload),
            json_spread(g.value),
            json_spread(g.ceiling),
            json_str(&g.threshold),
            g.met.map_or("null".into(), |m| m.to_string()),
            json_str(&g.note),
            if gi + 1 < goals.len() { "," } else { "" }
        );
    }
    o.push_str("  ]\n}\n");
    std::fs::write(path, o)
}
