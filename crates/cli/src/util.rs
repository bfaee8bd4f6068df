//! Small helpers of the command line: errors with exit codes, pool opening
//! with messages that name the pool, size parsing and figure formatting.

use ferrite::PoolError;
use ferrite_pmem::{Pmem, PmemError};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Where a pool is looked for when none is named: tmpfs, so that it
/// survives the process but costs no disk.
pub const DEFAULT_POOL: &str = "/dev/shm/ferrite.pool";
/// Environment variable that overrides [`DEFAULT_POOL`].
pub const POOL_ENV: &str = "FERRITE_POOL";
/// Smallest file `Pmem::open_file` / `create_file` accept (the engine's
/// minimum pool of 64 pages).
pub const MIN_POOL_BYTES: u64 = 64 * 4096;

/// Print a line on stdout, ignoring a closed pipe (`ferrite dump | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use outln;

/// Exit status: the command did what was asked.
pub const EXIT_OK: u8 = 0;
/// Exit status: the pool is damaged (fsck), or the demo found a mismatch.
pub const EXIT_DAMAGED: u8 = 1;
/// Exit status: the command could not run (bad arguments, no pool, I/O).
pub const EXIT_ERROR: u8 = 2;

/// A failure that ends the command: one line on stderr and an exit status.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub msg: String,
}

impl CliError {
    /// A user-facing error (exit 2) about `pool`.
    pub fn pool(pool: &Path, msg: impl fmt::Display) -> CliError {
        CliError { code: EXIT_ERROR, msg: format!("{}: {msg}", pool.display()) }
    }

    pub fn new(code: u8, msg: impl fmt::Display) -> CliError {
        CliError { code, msg: msg.to_string() }
    }
}

pub type CliResult<T> = Result<T, CliError>;

/// The pool to use: the argument, else `$FERRITE_POOL`, else the default.
pub fn pool_path(arg: Option<PathBuf>) -> PathBuf {
    arg.or_else(|| std::env::var_os(POOL_ENV).filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_POOL))
}

/// The message for a failure to open or create the pool file.
pub fn pmem_message(e: &PmemError) -> String {
    match e {
        PmemError::AlreadyOpen => "already open by another process (is it mounted?); nothing was changed".into(),
        PmemError::TooSmall { len, min } => {
            if *len < MIN_POOL_BYTES {
                format!("not a Ferrite pool (the file is {len} bytes; a pool is at least {min})")
            } else {
                format!("{len} bytes is too small; at least {min} bytes are needed")
            }
        }
        PmemError::Io(io) => match io.kind() {
            io::ErrorKind::NotFound => "no such file (make a pool with `ferrite mkfs` or `ferrite demo`)".into(),
            io::ErrorKind::PermissionDenied => "permission denied (a pool is opened for reading and writing)".into(),
            io::ErrorKind::InvalidData => {
                format!("not a Ferrite pool ({})", inner_message(io))
            }
            _ => inner_message(io),
        },
    }
}

/// The text of an I/O error without the "what to which file" prefix that
/// ferrite-pmem adds (the CLI names the pool itself).
fn inner_message(e: &io::Error) -> String {
    let s = e.to_string();
    // ferrite-pmem writes "<what> <path>: <error>"; keep "<error>".
    match s.rsplit_once(": ") {
        Some((_, tail)) if !tail.is_empty() => tail.to_string(),
        _ => s,
    }
}

/// The message for a failure to identify, format or mount a pool.
pub fn pool_message(e: &PoolError) -> String {
    match e {
        PoolError::NotFerrite => "not a Ferrite pool".into(),
        PoolError::Pmem(p) => pmem_message(p),
        other => other.to_string(),
    }
}

/// Open an existing pool file (the exclusive lock is taken: a mounted pool
/// is refused with "already open").
pub fn open_pool(path: &Path) -> CliResult<Pmem> {
    if path.is_dir() {
        return Err(CliError::pool(path, "is a directory, not a pool file"));
    }
    Pmem::open_file(path, MIN_POOL_BYTES).map_err(|e| CliError::pool(path, pmem_message(&e)))
}

/// Open an existing pool file as a private copy-on-write view (fsck, dump):
/// nothing the caller does reaches the file. With `shared_lock`, a pool
/// mounted by another process is refused with "already open".
pub fn open_pool_private(path: &Path, shared_lock: bool) -> CliResult<Pmem> {
    if path.is_dir() {
        return Err(CliError::pool(path, "is a directory, not a pool file"));
    }
    Pmem::open_file_private(path, MIN_POOL_BYTES, shared_lock).map_err(|e| CliError::pool(path, pmem_message(&e)))
}

/// The message for a failure to create a pool file.
pub fn create_message(e: &PmemError) -> String {
    match e {
        PmemError::Io(io) => match io.kind() {
            io::ErrorKind::NotFound => "cannot create: its directory does not exist".into(),
            io::ErrorKind::PermissionDenied => "cannot create: permission denied".into(),
            _ => format!("cannot create: {}", inner_message(io)),
        },
        other => pmem_message(other),
    }
}

/// What an existing file at a pool path holds, decided without changing it.
pub enum Existing {
    /// No file there (or an empty one).
    Nothing,
    /// A Ferrite pool (valid superblock), or something that carries the
    /// Ferrite magic: another format version or a damaged superblock.
    Ferrite(String),
    /// Some other file.
    Other(String),
}

pub fn probe(path: &Path) -> CliResult<Existing> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(CliError::pool(path, e)),
        Ok(m) if m.is_dir() => {
            return Err(CliError::pool(path, "is a directory, not a pool file"));
        }
        Ok(m) if m.is_file() && m.len() == 0 => return Ok(Existing::Nothing),
        Ok(_) => {}
    }
    let pmem = match Pmem::open_file(path, MIN_POOL_BYTES) {
        Ok(p) => p,
        Err(PmemError::AlreadyOpen) => return Err(CliError::pool(path, pmem_message(&PmemError::AlreadyOpen))),
        Err(e @ PmemError::TooSmall { .. }) => return Ok(Existing::Other(pmem_message(&e))),
        Err(PmemError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
            return Ok(Existing::Other(inner_message(&e)))
        }
        Err(e) => return Err(CliError::pool(path, pmem_message(&e))),
    };
    Ok(match ferrite::read_superblock(&pmem) {
        Ok(sb) => {
            Existing::Ferrite(format!("holds a Ferrite pool ({} pages, {} mounts)", sb.total_pages, sb.mount_count))
        }
        Err(PoolError::NotFerrite) => Existing::Other("not a Ferrite pool".into()),
        Err(e) => Existing::Ferrite(format!("holds a Ferrite superblock: {e}")),
    })
}

/// Parse a size: plain bytes, or a number with a binary suffix K, M, G or
/// T (also KB/KiB, ...; case does not matter). Rounded up to 4096.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("`{s}` is not a size (examples: 4096, 64K, 256M, 1G)"));
    }
    let n: u64 = num.parse().map_err(|_| format!("`{s}`: number too large"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{s}`: unknown suffix `{suffix}` (use K, M, G or T, binary units)")),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| format!("`{s}`: size too large"))?;
    if bytes == 0 {
        return Err("size must not be zero".into());
    }
    bytes.checked_next_multiple_of(4096).ok_or_else(|| format!("`{s}`: size too large"))
}

/// Bytes in the most readable binary unit: "256 MiB", "1.50 GiB", "812 B".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// A duration in the most readable unit.
pub fn human_duration(d: std::time::Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 10_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

/// Throughput of `bytes` in `d`, in MiB/s.
pub fn throughput(bytes: u64, d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return "-".into();
    }
    format!("{:.0} MiB/s", bytes as f64 / s / (1024.0 * 1024.0))
}

/// A Unix time in nanoseconds as "YYYY-MM-DD hh:mm:ss UTC".
pub fn utc_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1"), Ok(4096));
        assert_eq!(parse_size("4097"), Ok(8192));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
    }

    #[test]
    fn dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_700_000_000_000_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn units() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
    }
}
