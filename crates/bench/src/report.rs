//! Results of a run: the Markdown table and the CSV rows.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use crate::stats::Spread;
use crate::workload::{Better, Metric};

/// Everything measured for one workload.
pub struct WorkloadResult {
    pub name: &'static str,
    pub params: String,
    pub metrics: &'static [Metric],
    /// Target names, in the order of `values`.
    pub targets: Vec<String>,
    /// `values[target][round][metric]`.
    pub values: Vec<Vec<Vec<f64>>>,
}

impl WorkloadResult {
    fn target_ix(&self, name: &str) -> Option<usize> {
        self.targets.iter().position(|t| t == name)
    }

    fn series(&self, target: usize, metric: usize) -> Vec<f64> {
        self.values[target].iter().map(|r| r[metric]).collect()
    }

    /// Per-round "how much better is `a` than `b`" (> 1 = `a` better):
    /// a / b for throughput, b / a for times. Rounds are interleaved, so
    /// round i of both ran back to back.
    fn ratios(&self, a: usize, b: usize, metric: usize) -> Vec<f64> {
        let better = self.metrics[metric].better;
        self.values[a].iter().zip(&self.values[b]).map(|(ra, rb)| ratio(better, ra[metric], rb[metric])).collect()
    }
}

fn ratio(better: Better, a: f64, b: f64) -> f64 {
    match better {
        Better::Higher => a / b,
        Better::Lower => b / a,
    }
}

fn fmt_value(unit: &str, v: f64) -> String {
    match unit {
        "ops/s" => format!("{:.0}k", v / 1000.0),
        _ if v >= 100.0 => format!("{v:.0}"),
        _ if v >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

fn fmt_spread(s: Spread, f: impl Fn(f64) -> String) -> String {
    format!("**{}** ({}–{})", f(s.median), f(s.min), f(s.max))
}

fn fmt_ratio(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}×")
    } else {
        format!("{v:.2}×")
    }
}

/// The names of the ratio columns, for the table header and the CSV.
pub const VS_TMPFS: &str = "ferrite/tmpfs";
pub const VS_LIMIT: &str = "ferrite/hw-limit";

/// The results as one Markdown table: medians over rounds in bold, with
/// the min–max spread in parentheses.
pub fn markdown_table(results: &[WorkloadResult]) -> String {
    let mut targets: Vec<String> = Vec::new();
    for w in results {
        for t in &w.targets {
            if !targets.contains(t) {
                targets.push(t.clone());
            }
        }
    }
    let mut out = String::new();
    out.push_str("| workload | metric |");
    for t in &targets {
        let _ = write!(out, " {t} |");
    }
    out.push_str(" speedup ferrite vs tmpfs | ferrite vs hw-limit |\n|---|---|");
    for _ in &targets {
        out.push_str("---:|");
    }
    out.push_str("---:|---:|\n");
    for w in results {
        for (mi, m) in w.metrics.iter().enumerate() {
            let unit = if m.unit == "ops/s" { "ops/s" } else { "µs" };
            let _ = write!(out, "| {} | {} ({unit}) |", w.name, m.label);
            for t in &targets {
                let cell = w
                    .target_ix(t)
                    .and_then(|ti| Spread::of(&w.series(ti, mi)))
                    .map_or("–".to_string(), |s| fmt_spread(s, |v| fmt_value(m.unit, v)));
                let _ = write!(out, " {cell} |");
            }
            for other in ["tmpfs", "hw-limit"] {
                let cell = match (w.target_ix("ferrite"), w.target_ix(other)) {
                    (Some(f), Some(o)) => {
                        Spread::of(&w.ratios(f, o, mi)).map_or("–".to_string(), |s| fmt_spread(s, fmt_ratio))
                    }
                    _ => "–".to_string(),
                };
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per (workload, metric, target, round), plus rows for the
/// per-round ratios (target `ferrite/tmpfs`, `ferrite/hw-limit`; unit `x`;
/// > 1 means Ferrite is better, whatever the metric's direction).
pub fn write_csv(path: &Path, mode: &str, results: &[WorkloadResult]) -> io::Result<()> {
    let mut f = io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "mode,workload,metric,unit,better,target,round,value,params")?;
    for w in results {
        let params = csv_field(&w.params);
        for (mi, m) in w.metrics.iter().enumerate() {
            for (ti, t) in w.targets.iter().enumerate() {
                for (r, v) in w.series(ti, mi).iter().enumerate() {
                    writeln!(f, "{mode},{},{},{},{},{t},{r},{v},{params}", w.name, m.key, m.unit, m.better.as_str())?;
                }
            }
            for (label, other) in [(VS_TMPFS, "tmpfs"), (VS_LIMIT, "hw-limit")] {
                if let (Some(a), Some(b)) = (w.target_ix("ferrite"), w.target_ix(other)) {
                    for (r, v) in w.ratios(a, b, mi).iter().enumerate() {
                        writeln!(f, "{mode},{},{},x,higher,{label},{r},{v},{params}", w.name, m.key)?;
                    }
                }
            }
        }
    }
    f.flush()
}
