//! Scratch files and directories under a base directory (normally
//! `/dev/shm`), with unique names, removed when dropped: on success, on an
//! error return and on a panic that unwinds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A unique path `BASE/ferrite-bench-PID-N-LABEL` (nothing is created).
pub fn unique_path(base: &Path, label: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    base.join(format!("ferrite-bench-{}-{n}-{label}", std::process::id()))
}

/// Removes a file or a directory tree when dropped.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Takes charge of removing `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> Scratch {
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.is_dir() => {
                if let Err(e) = std::fs::remove_dir_all(&self.path) {
                    eprintln!("ferrite-bench: cannot remove {}: {e}", self.path.display());
                }
            }
            Ok(_) => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    eprintln!("ferrite-bench: cannot remove {}: {e}", self.path.display());
                }
            }
            Err(_) => {}
        }
    }
}

/// Removes what earlier runs left in `base` when they were killed before
/// their cleanup ran: entries named `ferrite-bench-PID-…` whose process no
/// longer exists. Returns the paths removed.
pub fn remove_stale(base: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir(base) else {
        return removed;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("ferrite-bench-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        drop(Scratch::new(entry.path()));
        removed.push(entry.path());
    }
    removed
}
