//! CI smoke test of the zero-copy workloads (issue 12): `--quick
//! --workloads zerocopy` runs to the end on Ferrite, tmpfs and the hardware
//! limit, every method has figures where the target has it (peek, pread,
//! the whole-file view and patch on Ferrite; no patch and no view of the
//! whole file where the target has none), the comparisons and the goals of
//! issue 12 are reported (tests/quick.rs checks they stay out of `all`).
//! Every workload checks the bytes it reads, views, patches and sends, so
//! a peek or patch that showed or wrote wrong bytes fails the run. Timings
//! are never asserted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WORKLOADS: [&str; 13] = [
    "zc-read-4k",
    "zc-read-64k",
    "zc-read-1m",
    "zc-read-16m",
    "zc-read-64k-touch",
    "zc-read-1m-touch",
    "zc-read-16m-touch",
    "zc-randread-4k",
    "zc-write-4k",
    "zc-write-64k",
    "zc-write-1m",
    "zc-write-16m",
    "zc-serve",
];

/// (workload prefix, metric, targets that must have it, targets that must not).
const EXPECTED: [(&str, &str, &[&str], &[&str]); 9] = [
    ("zc-read", "view_mb_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-read", "pread_mb_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-read", "mapped_mb_s", &["ferrite", "tmpfs"], &["hw-limit"]),
    ("zc-randread", "view_mb_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-write", "patch_mb_s", &["ferrite", "hw-limit"], &["tmpfs"]),
    ("zc-write", "pwrite_mb_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-serve", "view_req_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-serve", "pread_req_s", &["ferrite", "tmpfs", "hw-limit"], &[]),
    ("zc-serve", "sendfile_req_s", &["tmpfs"], &["ferrite", "hw-limit"]),
];

#[test]
fn zerocopy_quick_run_completes_with_every_method_measured() {
    let out = TempDir(std::env::temp_dir().join(format!("fbench-zc-{}", std::process::id())));
    let res = Command::new(env!("CARGO_BIN_EXE_ferrite-bench"))
        .args(["--quick", "--workloads", "zerocopy", "--targets", "ferrite,tmpfs,hw-limit", "--rounds", "1"])
        .arg("--out")
        .arg(&out.0)
        .output()
        .expect("run ferrite-bench");
    let stdout = String::from_utf8_lossy(&res.stdout);
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "ferrite-bench --workloads zerocopy failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let md = std::fs::read_to_string(out.0.join("results.md")).expect("results.md");
    for w in WORKLOADS {
        assert!(md.contains(&format!("| {w} |")), "{w} missing from results.md");
    }
    assert!(md.contains("## Zero-copy comparisons (issue 12)"));
    assert!(md.contains("## Summary against the goals of issue 12"));
    let goal_rows = md
        .lines()
        .filter(|l| {
            l.starts_with("| peek") || l.starts_with("| patch") || l.starts_with("| random 4 KiB reads by peek")
        })
        .filter(|l| l.contains("**met**") || l.contains("**missed**"))
        .count();
    assert_eq!(goal_rows, 7, "not every goal of issue 12 was judged:\n{md}");
    // Only issue 12's goals: the run had none of issue 4's workloads.
    assert!(!md.contains("## Summary against the goals of issue 4"));

    // Per (workload, metric, target): the CSV's values, each finite and
    // positive where present.
    let csv = std::fs::read_to_string(out.0.join("results.csv")).expect("results.csv");
    let mut got: HashMap<(String, String, String), Vec<f64>> = HashMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.splitn(9, ',').collect();
        assert_eq!(f.len(), 9, "bad CSV row {line}");
        if f[5].contains('/') {
            continue; // a ratio row
        }
        let v: f64 = f[7].parse().unwrap_or_else(|_| panic!("bad value in {line}"));
        got.entry((f[1].to_string(), f[2].to_string(), f[5].to_string())).or_default().push(v);
    }
    for (prefix, metric, have, lack) in EXPECTED {
        for w in WORKLOADS.iter().filter(|w| w.starts_with(prefix)) {
            for t in have {
                let v = got.get(&(w.to_string(), metric.to_string(), t.to_string()));
                let v = v.unwrap_or_else(|| panic!("no {metric} for {w} on {t}"));
                assert!(v.iter().all(|x| x.is_finite() && *x > 0.0), "insane {metric} for {w} on {t}: {v:?}");
            }
            for t in lack {
                let v = got.get(&(w.to_string(), metric.to_string(), t.to_string()));
                assert!(
                    v.is_none_or(|v| v.iter().all(|x| x.is_nan())),
                    "{metric} for {w} on {t}, which has no such method: {v:?}"
                );
            }
        }
    }

    let json = std::fs::read_to_string(out.0.join("results.json")).expect("results.json");
    assert!(json.contains("\"errors\": []"), "errors in results.json");

    // `--list` shows them in their group.
    let list = Command::new(env!("CARGO_BIN_EXE_ferrite-bench")).args(["--list"]).output().expect("--list");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains("zc-serve [zerocopy]"), "--list does not show the zero-copy workloads:\n{list}");
}
