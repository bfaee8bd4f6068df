//! Smoke test of the buffered-mode workloads (issue 13) at quick scale, one
//! round: every workload of the `buffered` group runs on Ferrite strict, on
//! a buffered mount, on tmpfs and on the hardware limit (and ext4 when this
//! is root with mkfs.ext4 and loop devices, so `syncfs` runs on a file
//! system where it does something) without error; every figure of the
//! buffered mount is finite, its persister figures are reported for it and
//! n/a for every other target; the goals of issue 13 are all judged; the
//! plots are SVG documents. Timings are never asserted.

use std::path::{Path, PathBuf};
use std::process::Command;

const WORKLOADS: [&str; 6] = [
    "burst-dirops",
    "sustained-dirops",
    "burst-randwrite-4k",
    "sustained-randwrite-4k",
    "burst-append-4k",
    "sustained-append-4k",
];

/// The persister's figures: reported for a buffered mount only.
const PERSISTER: [&str; 4] = ["ops_per_batch", "inline_pct", "backpressure_per_kop", "lag_max_ms"];

fn ext4_possible() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/bin/mkfs.ext4"].iter().any(|p| Path::new(p).exists());
    root && mkfs && Path::new("/dev/loop-control").exists()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn buffered_workloads_complete_with_persister_figures() {
    let out = TempDir(std::env::temp_dir().join(format!("fbench-buffered-{}", std::process::id())));
    let mut targets = vec!["ferrite", "ferrite-buffered", "tmpfs", "hw-limit"];
    if ext4_possible() {
        targets.push("ext4");
    }
    let res = Command::new(env!("CARGO_BIN_EXE_ferrite-bench"))
        .args(["--quick", "--rounds", "1", "--workloads", "buffered,dirops,varmail,fileserver", "--targets"])
        .arg(targets.join(","))
        .arg("--out")
        .arg(&out.0)
        .output()
        .expect("run ferrite-bench");
    let stdout = String::from_utf8_lossy(&res.stdout);
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "ferrite-bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let md = std::fs::read_to_string(out.0.join("results.md")).expect("results.md");
    for w in WORKLOADS {
        assert!(md.contains(&format!("| {w} |")), "{w} missing from results.md");
        assert!(
            md.contains(&format!("- {w}: ferrite-buffered: buffered persister over the warm-up")),
            "no persister note for {w}"
        );
    }
    assert!(md.contains("ferrite-buffered vs ferrite"), "no buffered / strict ratio column");
    assert!(md.contains("## Summary against the goals of issue 13 (buffered mode)"));
    let section = md.split("## Summary against the goals of issue 13").nth(1).expect("issue 13 section");
    let section = section.split("\n## ").next().expect("the section itself");
    let judged = section.lines().filter(|l| l.contains("**met**") || l.contains("**missed**")).count();
    assert_eq!(judged, 8, "not every goal of issue 13 judged:\n{section}");

    let csv = std::fs::read_to_string(out.0.join("results.csv")).expect("results.csv");
    let mut seen = std::collections::HashSet::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.splitn(9, ',').collect();
        assert_eq!(f.len(), 9, "bad CSV row {line}");
        if !WORKLOADS.contains(&f[1]) || f[6] == "acct" || f[5].contains('/') {
            continue;
        }
        let v: f64 = f[7].parse().unwrap_or_else(|_| panic!("bad value in {line}"));
        let persister = PERSISTER.contains(&f[2]);
        if f[5] == "ferrite-buffered" {
            assert!(v.is_finite() && v >= 0.0, "insane buffered figure: {line}");
            if !persister && f[2] != "sync_ms" {
                assert!(v > 0.0, "zero buffered figure: {line}");
            }
            seen.insert((f[1].to_string(), f[2].to_string()));
        } else if persister {
            assert!(v.is_nan(), "persister figure on a target that has none: {line}");
        } else {
            assert!(v.is_finite() && v >= 0.0, "insane figure: {line}");
        }
    }
    for w in WORKLOADS {
        for m in PERSISTER {
            assert!(seen.contains(&(w.to_string(), m.to_string())), "no {m} for {w} on ferrite-buffered");
        }
    }

    let json = std::fs::read_to_string(out.0.join("results.json")).expect("results.json");
    assert!(json.contains("\"errors\": []"), "errors in results.json");
    for p in ["buffered-writes", "buffered-dirops", "summary"] {
        let svg = std::fs::read_to_string(out.0.join(format!("{p}.svg"))).unwrap_or_else(|e| panic!("{p}.svg: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{p}.svg is not an SVG document");
    }
}
