//! SVG plots of a run (plotters, SVG backend only: no system fonts, the
//! text is left to the SVG viewer).

use std::io;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{GoalResult, WorkloadResult};
use crate::stats::Spread;

fn color(target: &str, k: usize) -> RGBColor {
    match target {
        "ferrite" => RGBColor(214, 69, 40),
        "ferrite-atomic" => RGBColor(240, 150, 40),
        "ferrite-buffered" => RGBColor(200, 30, 120),
        "tmpfs" => RGBColor(52, 110, 200),
        "ext4" => RGBColor(70, 160, 70),
        "ext4-journal" => RGBColor(25, 95, 40),
        "hw-limit" => RGBColor(130, 130, 130),
        "fuse" => RGBColor(150, 80, 190),
        "fuse-direct" => RGBColor(100, 40, 140),
        "fuse-dev" => RGBColor(200, 130, 220),
        _ => {
            let c = Palette99::pick(k).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("plot: {e}"))
}

/// A grouped bar chart: one group per category, one bar per series; log
/// y axis. Bars with no value are left out.
fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    cats: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> io::Result<()> {
    let vals: Vec<f64> = series.iter().flat_map(|(_, v)| v.iter().flatten().copied()).filter(|v| *v > 0.0).collect();
    if vals.is_empty() || cats.is_empty() {
        return Ok(());
    }
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min) / 2.0;
    let max = vals.iter().copied().fold(0.0, f64::max);
    // Headroom above the tallest bar for the legend: the top 30 % of the
    // (log) height stays free.
    let hi = max * (max / lo).powf(0.43).max(3.0);
    let width = (160 + cats.len() * (30 + 14 * series.len())).clamp(640, 1400) as u32;
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    draw_bars(&root, title, y_label, cats, series, lo, hi)?;
    root.present().map_err(err)
}

#[allow(clippy::too_many_arguments)]
fn draw_bars(
    root: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    y_label: &str,
    cats: &[String],
    series: &[(String, Vec<Option<f64>>)],
    lo: f64,
    hi: f64,
) -> io::Result<()> {
    let n = cats.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n, (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .y_label_formatter(&|v| fmt_axis(*v))
        .draw()
        .map_err(err)?;
    let k = series.len() as f64;
    let w = 0.8 / k;
    for (si, (name, vals)) in series.iter().enumerate() {
        let c = color(name, si);
        let rects: Vec<Rectangle<(f64, f64)>> = vals
            .iter()
            .enumerate()
            .filter_map(|(ci, v)| {
                let v = (*v)?;
                (v > 0.0).then(|| {
                    let x0 = ci as f64 + 0.1 + si as f64 * w;
                    Rectangle::new([(x0, lo), (x0 + w * 0.92, v)], c.filled())
                })
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    let style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top)).color(&BLACK);
    for (i, c) in cats.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, lo));
        for (li, line) in c.split('\n').enumerate() {
            root.draw(&Text::new(line.to_string(), (px, py + 6 + 15 * li as i32), style.clone())).map_err(err)?;
        }
    }
    Ok(())
}

fn fmt_axis(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{v}")
    } else {
        format!("{v:.2}")
    }
}

fn median(w: &WorkloadResult, target: usize, key: &str) -> Option<f64> {
    let mi = w.metric_ix(key)?;
    Spread::of(&w.series(target, mi)?).map(|s| s.median)
}

/// Bars of one metric of several workloads (categories), one series per
/// target.
fn by_workload(
    results: &[WorkloadResult],
    names: &[(&str, &str, &str)],
    path: &Path,
    title: &str,
    y_label: &str,
) -> io::Result<Option<PathBuf>> {
    let present: Vec<(&WorkloadResult, &str, &str)> = names
        .iter()
        .filter_map(|(n, label, key)| results.iter().find(|w| w.name == *n).map(|w| (w, *label, *key)))
        .collect();
    if present.is_empty() {
        return Ok(None);
    }
    let targets = present[0].0.targets.clone();
    let cats: Vec<String> = present.iter().map(|(_, l, _)| l.to_string()).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = targets
        .iter()
        .map(|t| {
            let v = present.iter().map(|(w, _, key)| w.target_ix(t).and_then(|ti| median(w, ti, key))).collect();
            (t.clone(), v)
        })
        .filter(|(_, v): &(String, Vec<Option<f64>>)| v.iter().any(|x| x.is_some()))
        .collect();
    bars(path, title, y_label, &cats, &series)?;
    Ok(Some(path.to_path_buf()))
}

/// Every plot of the run, written to `dir`; returns the files made.
pub fn write_all(dir: &Path, results: &[WorkloadResult], goals: &[GoalResult]) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut made = Vec::new();
    let mut add = |p: Option<PathBuf>| {
        if let Some(p) = p {
            made.push(p);
        }
    };
    let t = "ops_per_s";
    add(by_workload(
        results,
        &[
            ("seqread-4k", "seq read", t),
            ("randread-4k", "rand read", t),
            ("seqwrite-4k", "seq write", t),
            ("randwrite-4k", "rand write", t),
        ],
        &dir.join("fio-4k.svg"),
        "4 KiB I/O, 1 thread (median ops/s, log scale)",
        "ops/s",
    )?);
    let sizes = [
        ("randwrite-128", "128 B", "mb_per_s"),
        ("randwrite-1k", "1 KiB", "mb_per_s"),
        ("randwrite-4k", "4 KiB", "mb_per_s"),
        ("randwrite-64k", "64 KiB", "mb_per_s"),
        ("randwrite-2m", "2 MiB", "mb_per_s"),
    ];
    add(by_workload(results, &sizes, &dir.join("write-sizes.svg"), "Random writes by size (median MB/s)", "MB/s")?);
    add(write_amp(results, &sizes.map(|(n, l, _)| (n, l)), &dir.join("write-amplification.svg"))?);
    add(by_workload(
        results,
        &[
            ("randwrite-4k-fsync1", "fsync every 1", t),
            ("randwrite-4k-fsync10", "every 10", t),
            ("randwrite-4k-fsync100", "every 100", t),
            ("randwrite-4k-fsync1000", "every 1000", t),
            ("randwrite-4k", "never", t),
        ],
        &dir.join("fsync.svg"),
        "Random 4 KiB writes with fsync every k writes (median ops/s)",
        "ops/s",
    )?);
    add(by_workload(
        results,
        &[
            ("mix-100-0", "100:0", t),
            ("mix-80-20", "80:20", t),
            ("mix-60-40", "60:40", t),
            ("mix-40-60", "40:60", t),
            ("mix-0-100", "0:100", t),
        ],
        &dir.join("mixes.svg"),
        "Random 4 KiB read:write mixes (median ops/s)",
        "ops/s",
    )?);
    add(by_workload(
        results,
        &[
            ("2t-shared-randwrite", "write\nshared file", t),
            ("2t-private-randwrite", "write\nprivate files", t),
            ("2t-shared-randread", "read\nshared file", t),
            ("2t-private-randread", "read\nprivate files", t),
        ],
        &dir.join("threads.svg"),
        "Two threads, random 4 KiB (median ops/s, both threads)",
        "ops/s",
    )?);
    add(by_workload(
        results,
        &[
            ("dirops", "create", "create_us"),
            ("dirops", "unlink", "unlink_us"),
            ("dirops", "mkdir", "mkdir_us"),
            ("dirops", "rmdir", "rmdir_us"),
            ("nova-micro", "NOVA\ncreate", "create_us"),
            ("nova-micro", "NOVA\nappend 4K", "append_us"),
            ("nova-micro", "NOVA\nfsync", "fsync_us"),
            ("nova-micro", "NOVA\nunlink", "unlink_us"),
            ("lookup", "stat, 10\nentries", "small_us"),
            ("lookup", "stat, 100k\nentries", "big_us"),
        ],
        &dir.join("metadata.svg"),
        "Metadata operations (median µs per op, lower is better)",
        "µs",
    )?);
    add(by_workload(
        results,
        &[
            ("fileserver", "fileserver", t),
            ("varmail", "varmail", t),
            ("webserver", "webserver", t),
            ("webproxy", "webproxy", t),
        ],
        &dir.join("filebench.svg"),
        "Filebench-like personalities, 2 threads (median flowops/s)",
        "ops/s",
    )?);
    add(by_workload(
        results,
        &[
            ("remount", "clean", "clean_mount_ms"),
            ("remount", "clean\n+ first stat", "clean_first_ms"),
            ("remount", "after crash", "crash_mount_ms"),
            ("remount", "after crash\n+ first stat", "crash_first_ms"),
        ],
        &dir.join("remount.svg"),
        "Mount time of a file system holding many files (median ms)",
        "ms",
    )?);
    add(by_workload(
        results,
        &[("cp-a", "cp -a", "time_s"), ("tar-x", "tar x", "time_s"), ("rm-rf", "rm -rf", "time_s")],
        &dir.join("tree.svg"),
        "Real programs on a real tree, each + syncfs (median s, lower is better)",
        "s",
    )?);
    add(by_workload(
        results,
        &[
            ("burst-randwrite-4k", "random 4K\nbursts", t),
            ("sustained-randwrite-4k", "random 4K\nsustained", t),
            ("burst-append-4k", "append 4K\nbursts", t),
            ("sustained-append-4k", "append 4K\nsustained", t),
        ],
        &dir.join("buffered-writes.svg"),
        "4 KiB writes in bursts (no sync) and sustained (final sync included), median ops/s",
        "ops/s",
    )?);
    add(by_workload(
        results,
        &[
            ("burst-dirops", "create\nbursts", "create_us"),
            ("sustained-dirops", "create\nsustained", "create_us"),
            ("burst-dirops", "unlink\nbursts", "unlink_us"),
            ("sustained-dirops", "unlink\nsustained", "unlink_us"),
            ("burst-dirops", "mkdir\nbursts", "mkdir_us"),
            ("sustained-dirops", "mkdir\nsustained", "mkdir_us"),
            ("burst-dirops", "rmdir\nbursts", "rmdir_us"),
            ("sustained-dirops", "rmdir\nsustained", "rmdir_us"),
        ],
        &dir.join("buffered-dirops.svg"),
        "Directory operations in bursts and sustained (median µs per op, lower is better)",
        "µs",
    )?);
    add(summary(goals, &dir.join("summary.svg"))?);
    Ok(made)
}

fn write_amp(results: &[WorkloadResult], names: &[(&str, &str)], path: &Path) -> io::Result<Option<PathBuf>> {
    let present: Vec<(&WorkloadResult, &str)> =
        names.iter().filter_map(|(n, l)| results.iter().find(|w| w.name == *n).map(|w| (w, *l))).collect();
    if present.is_empty() {
        return Ok(None);
    }
    let targets = present[0].0.targets.clone();
    let cats: Vec<String> = present.iter().map(|(_, l)| l.to_string()).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = targets
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let v = present
                .iter()
                .map(|(w, _)| w.accounting_rows().into_iter().find(|r| r.0 == "write_amp").and_then(|r| r.2[ti]))
                .collect();
            (t.clone(), v)
        })
        .filter(|(_, v): &(String, Vec<Option<f64>>)| v.iter().any(|x| x.is_some()))
        .collect();
    bars(path, "Write amplification by write size (bytes stored to media / bytes written)", "×", &cats, &series)?;
    Ok(Some(path.to_path_buf()))
}

/// Each goal as measured / required (≥ 1 = met), log scale, a line at 1.
fn summary(goals: &[GoalResult], path: &Path) -> io::Result<Option<PathBuf>> {
    let judged: Vec<&GoalResult> = goals.iter().filter(|g| g.value.is_some()).collect();
    if judged.is_empty() {
        return Ok(None);
    }
    let mut cats = Vec::new();
    let (mut met, mut missed) = (Vec::new(), Vec::new());
    for (i, g) in judged.iter().enumerate() {
        let v = g.value.unwrap().median;
        let need: f64 = g.threshold.trim_start_matches(['≥', '≤', ' ']).trim_end_matches('×').parse().unwrap_or(1.0);
        let score = if g.threshold.starts_with('≤') { need / v } else { v / need };
        cats.push(format!("{}", i + 1));
        met.push((g.met == Some(true)).then_some(score));
        missed.push((g.met == Some(false)).then_some(score));
    }
    let all: Vec<f64> = met.iter().chain(&missed).flatten().copied().filter(|v| *v > 0.0).collect();
    let lo = all.iter().copied().fold(1.0, f64::min) / 2.0;
    let hi = all.iter().copied().fold(1.0, f64::max) * 3.0;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, bottom) = root.split_vertically(380);
    let series = vec![("met".to_string(), met), ("missed".to_string(), missed)];
    draw_bars_colored(&top, &cats, &series, lo, hi)?;
    let style = TextStyle::from(("sans-serif", 12).into_font()).color(&BLACK);
    for (i, g) in judged.iter().enumerate() {
        let col = (i % 2) as i32;
        let row = (i / 2) as i32;
        bottom
            .draw(&Text::new(format!("{}: {}", i + 1, shorten(g.text)), (10 + col * 445, 4 + row * 16), style.clone()))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(Some(path.to_path_buf()))
}

fn shorten(s: &str) -> String {
    let s = s.split(" (").next().unwrap_or(s);
    if s.chars().count() > 62 {
        format!("{}…", s.chars().take(61).collect::<String>())
    } else {
        s.to_string()
    }
}

fn draw_bars_colored(
    root: &DrawingArea<SVGBackend, Shift>,
    cats: &[String],
    series: &[(String, Vec<Option<f64>>)],
    lo: f64,
    hi: f64,
) -> io::Result<()> {
    let n = cats.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption("Goals: measured / required (≥ 1 means met; log scale)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n, (lo..hi).log_scale())
        .map_err(err)?;
    chart.configure_mesh().disable_x_mesh().x_labels(0).y_label_formatter(&|v| fmt_axis(*v)).draw().map_err(err)?;
    for (name, vals) in series {
        let c = if name == "met" { RGBColor(60, 160, 60) } else { RGBColor(210, 60, 40) };
        let rects: Vec<Rectangle<(f64, f64)>> = vals
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| Rectangle::new([(i as f64 + 0.15, lo), (i as f64 + 0.85, v)], c.filled())))
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart.draw_series(LineSeries::new([(0.0, 1.0), (n, 1.0)], BLACK.stroke_width(2))).map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    let style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top)).color(&BLACK);
    for (i, c) in cats.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, lo));
        root.draw(&Text::new(c.clone(), (px, py + 6), style.clone())).map_err(err)?;
    }
    Ok(())
}
