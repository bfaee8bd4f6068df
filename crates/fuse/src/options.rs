//! Mount options: the `-o` list of `ferrite mount` and of the
//! `mount.fuse.ferrite` helper, parsed once into [`MountConfig`].
//!
//! Options are comma-separated `key` or `key=value` words, as mount(8)
//! passes them. Words that only mean something to mount(8) or fstab
//! (`defaults`, `noauto`, `nofail`, `_netdev`, `x-*`, ...) are accepted and
//! ignored; any other unknown word is an error, so that a typo is never
//! silently dropped.

use ferrite::FileMode;
use ferrite_pmem::EmulatedLatency;
use std::time::Duration;

/// When to use READDIRPLUS (directory listing that returns attributes too).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum ReaddirPlus {
    /// Never: the kernel looks each name up.
    Off,
    /// Always.
    On,
    /// The kernel decides (READDIRPLUS_AUTO: for listings followed by stats).
    #[default]
    Auto,
}

/// Everything a mount is asked to do, from the `-o` options.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// `mode=`: the consistency mode of regular files created through this
    /// mount (docs/DESIGN.md); a file keeps the mode it was created with,
    /// and `user.ferrite.mode` changes it. None leaves the engine's default
    /// (strict for a pool the mount opens itself).
    pub default_file_mode: Option<FileMode>,
    /// `mode=buffered`: a buffered mount (docs/DESIGN.md, "Guarantees"):
    /// every operation returns at DRAM speed and a persister makes the
    /// operations durable in the order they returned, within
    /// `buffered_lag_ns` (`buffered_lag_ms=`) and `buffered_ops_max`
    /// (`buffered_ops_max=`); fsync makes everything before it durable.
    /// Not stored in the pool: the next mount chooses again.
    pub buffered: bool,
    /// `buffered_lag_ms=`: the longest an operation may stay not durable
    /// after it returns (ns; None: the engine's default, 5 ms).
    pub buffered_lag_ns: Option<u64>,
    /// `buffered_ops_max=`: the most operations returned but not yet
    /// durable (None: the engine's default, 4096).
    pub buffered_ops_max: Option<u64>,
    /// `ro`: the kernel refuses every change with EROFS (and so does the adapter).
    pub read_only: bool,
    /// `allow_other`: users other than the one who mounted may use the mount.
    pub allow_other: bool,
    /// `allow_root`: root may use the mount too (the owner always may).
    pub allow_root: bool,
    /// The kernel checks permissions from the mode bits (`default_permissions`).
    /// `None` (the default): on, except on a mount private to root, where
    /// the kernel lets only root's processes in and the checks could only
    /// conclude that root may (`daemon::kernel_checks_permissions`).
    /// The adapter does no permission checks of its own beyond `access`.
    pub default_permissions: Option<bool>,
    /// Owner given to new nodes (and to the root of a pool this mount
    /// creates) instead of the creating process's.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Extra bits cleared from the mode of every new node (on top of the
    /// creating process's umask).
    pub umask: u32,
    /// Emulated media latency (extra ns per flushed line and per fence).
    pub latency: EmulatedLatency,
    /// How long the kernel may cache attributes / names.
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
    /// How long the kernel may remember that a name does not exist.
    pub negative_timeout: Duration,
    /// Kernel write-back caching: writes are buffered by the kernel and
    /// reach the pool at fsync, close or memory pressure (weakens the
    /// durability of a write that returned; off by default).
    pub writeback_cache: bool,
    /// Bypass the kernel page cache for file data (no shared mmap on
    /// kernels before 6.6).
    pub direct_io: bool,
    /// Keep the kernel page cache of a file across opens (safe: every
    /// change goes through this mount).
    pub keep_cache: bool,
    pub readdirplus: ReaddirPlus,
    /// Serve extended attributes (`xattr`, the default). `noxattr` answers
    /// ENOSYS instead, so the kernel stops asking: it saves the
    /// getxattr("security.capability") round trip the kernel makes before
    /// every write to a file it has not yet seen without capabilities.
    pub xattr: bool,
    /// Request-serving threads of the /dev/fuse transport.
    pub threads: usize,
    /// How requests reach the daemon: FUSE over io_uring (one queue and
    /// one thread per CPU) or /dev/fuse.
    pub transport: Transport,
    /// Let fusermount3 unmount if the daemon dies. `None`: when fusermount3
    /// is installed and other users are let in (allow_other / allow_root).
    pub auto_unmount: Option<bool>,
    /// Size of a pool created because none existed (bytes).
    pub size: Option<u64>,
    /// Name shown as the mount's source (default: the pool path).
    pub fsname: Option<String>,
    pub subtype: String,
    /// Kernel mount flags passed through.
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub noatime: bool,
    pub sync: bool,
    pub dirsync: bool,
    /// Only meaningful to the mount helper: stay in the foreground.
    pub foreground: bool,
    /// Where a detached daemon writes its log (default: nowhere).
    pub log: Option<std::path::PathBuf>,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            default_file_mode: None,
            buffered: false,
            buffered_lag_ns: None,
            buffered_ops_max: None,
            read_only: false,
            allow_other: false,
            allow_root: false,
            default_permissions: None,
            uid: None,
            gid: None,
            umask: 0,
            latency: EmulatedLatency::default(),
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            negative_timeout: Duration::from_secs(1),
            writeback_cache: false,
            direct_io: false,
            keep_cache: true,
            readdirplus: ReaddirPlus::Auto,
            xattr: true,
            threads: default_threads(),
            transport: Transport::from_env(),
            auto_unmount: None,
            size: None,
            fsname: None,
            subtype: "ferrite".into(),
            nosuid: true,
            nodev: true,
            noexec: false,
            noatime: false,
            sync: false,
            dirsync: false,
            foreground: false,
            log: None,
        }
    }
}

/// How the kernel's requests reach the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// io_uring when the kernel allows it (Linux 6.14+ with
    /// `/sys/module/fuse/parameters/enable_uring` set), else /dev/fuse.
    Auto,
    /// io_uring, or the mount fails with a message saying why not.
    Uring,
    /// /dev/fuse only (read and write on the device, several threads).
    Dev,
}

impl Transport {
    /// The FERRITE_FUSE_TRANSPORT environment variable (`auto`, `uring`,
    /// `dev`), which the tests use to run the suite on each transport; the
    /// `transport=` option overrides it.
    pub fn from_env() -> Transport {
        match std::env::var("FERRITE_FUSE_TRANSPORT").as_deref() {
            Ok("uring") | Ok("io_uring") => Transport::Uring,
            Ok("dev") | Ok("dev_fuse") => Transport::Dev,
            _ => Transport::Auto,
        }
    }
}

/// One request thread per CPU, at least 2, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8)
}

/// Words mount(8), fstab or systemd pass that mean nothing to the mount itself.
fn ignored(key: &str) -> bool {
    matches!(
        key,
        "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "nofail"
            | "_netdev"
            | "rw"
            | "relatime"
            | "strictatime"
            | "lazytime"
            | "nolazytime"
            | "loop"
    ) || key.starts_with("x-")
        || key.starts_with("comment=")
}

/// Parse a size: bytes, or a number with a binary suffix K, M, G, T.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a size (examples: 4096, 64M, 1G)"))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{s}`: unknown size suffix (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .and_then(|b| b.checked_next_multiple_of(4096))
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("`{s}`: not a usable size"))
}

fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
    v.ok_or_else(|| format!("option {key} needs a value ({key}=...)"))
}

fn parse_u32(key: &str, v: &str, radix: u32) -> Result<u32, String> {
    u32::from_str_radix(v, radix).map_err(|_| format!("option {key}: `{v}` is not a number"))
}

fn parse_u64(key: &str, v: &str) -> Result<u64, String> {
    v.parse().map_err(|_| format!("option {key}: `{v}` is not a number"))
}

fn parse_secs(key: &str, v: &str) -> Result<Duration, String> {
    let f: f64 = v.parse().map_err(|_| format!("option {key}: `{v}` is not a number of seconds"))?;
    if !(0.0..=86_400.0 * 365.0).contains(&f) {
        return Err(format!("option {key}: {v} is out of range"));
    }
    Ok(Duration::from_secs_f64(f))
}

impl MountConfig {
    /// Apply one `-o` argument (a comma-separated list) on top of `self`.
    pub fn apply(&mut self, list: &str) -> Result<(), String> {
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            self.apply_word(word)?;
        }
        Ok(())
    }

    /// Parse a sequence of `-o` arguments over the defaults.
    pub fn parse<'a>(lists: impl IntoIterator<Item = &'a str>) -> Result<MountConfig, String> {
        let mut c = MountConfig::default();
        for l in lists {
            c.apply(l)?;
        }
        c.check()?;
        Ok(c)
    }

    /// Checks across options: the buffered tuning options need
    /// `mode=buffered` (a tuning option that would silently do nothing is
    /// refused, like any other unknown word).
    pub fn check(&self) -> Result<(), String> {
        if !self.buffered {
            for (set, name) in [
                (self.buffered_lag_ns.is_some(), "buffered_lag_ms"),
                (self.buffered_ops_max.is_some(), "buffered_ops_max"),
            ] {
                if set {
                    return Err(format!("option {name} needs mode=buffered"));
                }
            }
        }
        Ok(())
    }

    /// The engine's options of a buffered mount (None: not buffered, or
    /// read-only, where nothing changes).
    pub fn buffered_options(&self) -> Option<ferrite::BufferedOptions> {
        if !self.buffered || self.read_only {
            return None;
        }
        let mut b = ferrite::BufferedOptions::default();
        if let Some(ns) = self.buffered_lag_ns {
            b.lag_ns_max = ns;
        }
        if let Some(n) = self.buffered_ops_max {
            b.ops_max = n;
        }
        Some(b)
    }

    /// How the mount line and the log describe a buffered mount, e.g.
    /// "buffered (operations durable within 5 ms, at most 4096 pending)".
    pub fn describe_buffered(b: &ferrite::BufferedOptions) -> String {
        let ms = b.lag_ns_max as f64 / 1e6;
        format!("buffered (operations durable in order within {ms} ms, at most {} pending)", b.ops_max)
    }

    fn apply_word(&mut self, word: &str) -> Result<(), String> {
        let (key, val) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        match (key, val) {
            ("mode", Some(v)) => match v {
                "strict" | "fsync-atomic" => {
                    let m = if v == "strict" { FileMode::Strict } else { FileMode::FsyncAtomic };
                    self.default_file_mode = Some(m);
                    self.buffered = false;
                }
                // The last mode= wins: a buffered mount keeps the pool's
                // default for the mode stored in new files.
                "buffered" => {
                    self.buffered = true;
                    self.default_file_mode = None;
                }
                _ => return Err(format!("option mode={v}: unknown mode (strict, fsync-atomic or buffered)")),
            },
            ("buffered_lag_ms", v) => {
                let v = need(key, v)?;
                let ms: f64 = v.parse().map_err(|_| format!("option {key}: `{v}` is not a number of milliseconds"))?;
                let max_ms = ferrite::BUFFERED_LAG_NS_MAX / 1_000_000;
                let ns = (ms * 1e6).round();
                if !(1.0..=ferrite::BUFFERED_LAG_NS_MAX as f64).contains(&ns) {
                    return Err(format!("option {key}={v}: use more than 0 and at most {max_ms} (milliseconds)"));
                }
                self.buffered_lag_ns = Some(ns as u64);
            }
            ("buffered_ops_max", v) => {
                let n = parse_u64(key, need(key, v)?)?;
                if !(1..=ferrite::BUFFERED_OPS_MAX).contains(&n) {
                    return Err(format!("option {key}={n}: use 1..={}", ferrite::BUFFERED_OPS_MAX));
                }
                self.buffered_ops_max = Some(n);
            }
            ("ro", None) => self.read_only = true,
            ("rw", None) => self.read_only = false,
            ("allow_other", None) => self.allow_other = true,
            ("allow_root", None) => self.allow_root = true,
            ("default_permissions", None) => self.default_permissions = Some(true),
            ("no_default_permissions", None) => self.default_permissions = Some(false),
            ("uid", v) => self.uid = Some(parse_u32(key, need(key, v)?, 10)?),
            ("gid", v) => self.gid = Some(parse_u32(key, need(key, v)?, 10)?),
            ("umask", v) => {
                let m = parse_u32(key, need(key, v)?, 8)?;
                if m > 0o7777 {
                    return Err(format!("option umask={m:o}: more than 4 octal digits"));
                }
                self.umask = m;
            }
            ("flush_latency_ns", v) => self.latency.flush_line_ns = parse_u64(key, need(key, v)?)?,
            ("fence_latency_ns", v) => self.latency.fence_ns = parse_u64(key, need(key, v)?)?,
            ("attr_timeout", v) => self.attr_timeout = parse_secs(key, need(key, v)?)?,
            ("entry_timeout", v) => self.entry_timeout = parse_secs(key, need(key, v)?)?,
            ("negative_timeout", v) => self.negative_timeout = parse_secs(key, need(key, v)?)?,
            ("writeback_cache", None) => self.writeback_cache = true,
            ("no_writeback_cache", None) => self.writeback_cache = false,
            ("direct_io", None) => self.direct_io = true,
            ("xattr", None) => self.xattr = true,
            ("noxattr", None) => self.xattr = false,
            ("keep_cache" | "kernel_cache", None) => self.keep_cache = true,
            ("no_keep_cache", None) => self.keep_cache = false,
            ("readdirplus", v) => {
                self.readdirplus = match need(key, v)? {
                    "yes" | "on" => ReaddirPlus::On,
                    "no" | "off" => ReaddirPlus::Off,
                    "auto" => ReaddirPlus::Auto,
                    other => return Err(format!("option readdirplus={other}: use yes, no or auto")),
                }
            }
            ("threads", v) => {
                let n = parse_u64(key, need(key, v)?)?;
                if !(1..=64).contains(&n) {
                    return Err(format!("option threads={n}: use 1..=64"));
                }
                self.threads = n as usize;
            }
            ("transport", v) => {
                self.transport = match need(key, v)? {
                    "auto" => Transport::Auto,
                    "uring" | "io_uring" => Transport::Uring,
                    "dev" | "dev_fuse" => Transport::Dev,
                    other => return Err(format!("option transport={other}: use auto, uring or dev")),
                }
            }
            ("auto_unmount", None) => self.auto_unmount = Some(true),
            ("noauto_unmount" | "no_auto_unmount", None) => self.auto_unmount = Some(false),
            ("size", v) => self.size = Some(parse_size(need(key, v)?).map_err(|e| format!("option size: {e}"))?),
            ("fsname", v) => self.fsname = Some(need(key, v)?.to_string()),
            ("subtype", v) => self.subtype = need(key, v)?.to_string(),
            ("nosuid", None) => self.nosuid = true,
            ("suid", None) => self.nosuid = false,
            ("nodev", None) => self.nodev = true,
            ("dev", None) => self.nodev = false,
            ("noexec", None) => self.noexec = true,
            ("exec", None) => self.noexec = false,
            ("noatime" | "nodiratime", None) => self.noatime = true,
            ("atime" | "diratime", None) => self.noatime = false,
            ("sync", None) => self.sync = true,
            ("async", None) => self.sync = false,
            ("dirsync", None) => self.dirsync = true,
            ("foreground", None) => self.foreground = true,
            ("log", v) => self.log = Some(need(key, v)?.into()),
            _ if ignored(word) || ignored(key) => {}
            _ => return Err(format!("unknown mount option `{word}` (see `ferrite mount --help`)")),
        }
        Ok(())
    }
}

/// The text `ferrite mount --help` shows for `-o`.
pub const OPTIONS_HELP: &str = "\
Mount options (-o, comma-separated; may be repeated):
  mode=strict|fsync-atomic consistency mode of the regular files created through
                           the mount (default strict: every operation is atomic
                           and durable when it returns). fsync-atomic: a file's
                           writes and truncates become durable together at its
                           next fsync/fdatasync/msync/O_SYNC write/rename/...;
                           after a crash the file is as at one of those. Each
                           file keeps its mode; the xattr user.ferrite.mode
                           reads and sets it (getfattr/setfattr -n)
  mode=buffered            a buffered mount: every operation is atomic and returns
                           at memory speed; a background persister makes them
                           durable in the order they returned, within a few ms.
                           After a crash the pool is as after some prefix of the
                           operations, holding every one that returned before
                           the last completed fsync (an fsync makes everything
                           durable, not only its file). Applies to every file
                           (their stored modes apply again on a later mount
                           without it); user.ferrite.mode reads `buffered`
  buffered_lag_ms=MS       buffered: an operation is durable at most MS ms after
                           it returns (default 5; decimals allowed; at most 10000)
  buffered_ops_max=N       buffered: at most N operations returned but not yet
                           durable (default 4096); callers wait beyond either
  ro                       read-only mount
  allow_other              let every user use the mount (default: only the owner)
  allow_root               let root use it too
  default_permissions      the kernel checks mode bits (the default, except on a mount
                           private to root: mounted by root without allow_other or
                           allow_root, where only root gets in and the checks are
                           skipped); no_default_permissions turns it off
  uid=N,gid=N              owner of new files and directories (and of the root of a
                           pool created by this mount) instead of the caller's
  umask=OOO                bits cleared from the mode of every new node
  flush_latency_ns=N       emulated media: extra ns per flushed cache line
  fence_latency_ns=N       emulated media: extra ns per fence
  attr_timeout=S           seconds the kernel caches attributes (default 1)
  entry_timeout=S          seconds the kernel caches names (default 1)
  negative_timeout=S       seconds the kernel remembers a name does not exist (1)
                           (all caching is safe: every change goes through this mount)
  writeback_cache          let the kernel buffer writes (they reach the pool at fsync
                           or close: a write that returned is no longer durable)
  direct_io                bypass the kernel page cache for file data
  no_keep_cache            drop a file's cached pages at every open
  readdirplus=yes|no|auto  listings that return attributes too (default auto)
  noxattr                  no extended attributes (ENOSYS): saves the kernel's
                           security.capability lookup before writes
  threads=N                /dev/fuse request threads (default: one per CPU, 2..8)
  transport=auto|uring|dev how requests reach the daemon: FUSE over io_uring, one
                           queue and thread per CPU (auto: when the kernel allows
                           it and auto_unmount is off, else /dev/fuse; default
                           auto, or the environment's FERRITE_FUSE_TRANSPORT)
  auto_unmount             unmount through fusermount3 if the daemon dies (default
                           with allow_other/allow_root when fusermount3 is
                           installed; alone it implies allow_root); noauto_unmount:
                           never. Without it a dead mount is removed by
                           `ferrite umount DIR` or by the next `ferrite mount`
  size=SIZE                size of the pool created when POOL does not exist (1G)
  fsname=NAME,subtype=T    how the mount shows in /proc/mounts
  log=PATH                 where a detached daemon logs (default: nowhere)
  foreground               (mount helper only) do not detach
  nosuid,suid,nodev,dev,noexec,exec,noatime,atime,sync,dirsync   kernel flags
  defaults,noauto,nofail,_netdev,x-*   accepted for fstab, ignored";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let c = MountConfig::parse(["ro,allow_other,uid=1000,gid=100,umask=022", "threads=3"]).unwrap();
        assert!(c.read_only && c.allow_other);
        assert_eq!((c.uid, c.gid, c.umask, c.threads), (Some(1000), Some(100), 0o22, 3));
        let c = MountConfig::parse(["attr_timeout=0.5,entry_timeout=0,size=64M,flush_latency_ns=300"]).unwrap();
        assert_eq!(c.attr_timeout, Duration::from_millis(500));
        assert_eq!(c.entry_timeout, Duration::ZERO);
        assert_eq!(c.size, Some(64 << 20));
        assert_eq!(c.latency.flush_line_ns, 300);
        let c = MountConfig::parse(["defaults,noauto,nofail,_netdev,x-systemd.automount,rw"]).unwrap();
        assert!(!c.read_only);
        assert!(MountConfig::parse(["bogus"]).is_err());
        assert!(MountConfig::parse(["uid"]).is_err());
        let c = MountConfig::parse(["mode=buffered"]).unwrap();
        assert!(c.buffered && c.default_file_mode.is_none());
        let b = c.buffered_options().unwrap();
        let d = ferrite::BufferedOptions::default();
        assert_eq!((b.lag_ns_max, b.ops_max, b.persister_thread), (d.lag_ns_max, d.ops_max, true));
        let c = MountConfig::parse(["mode=buffered,buffered_lag_ms=0.5,buffered_ops_max=64"]).unwrap();
        let b = c.buffered_options().unwrap();
        assert_eq!((b.lag_ns_max, b.ops_max), (500_000, 64));
        assert!(MountConfig::parse(["buffered_lag_ms=3"]).is_err());
        assert!(MountConfig::parse(["buffered_ops_max=3,mode=strict"]).is_err());
        assert!(MountConfig::parse(["mode=buffered,buffered_ops_max=0"]).is_err());
        assert!(MountConfig::parse(["mode=buffered,buffered_lag_ms=-1"]).is_err());
        assert!(MountConfig::parse(["mode=buffered,buffered_lag_ms=0"]).is_err());
        assert!(MountConfig::parse(["mode=buffered,buffered_lag_ms=10001"]).is_err());
        assert!(MountConfig::parse(["mode=buffered,buffered_ops_max=1048577"]).is_err());
        let c = MountConfig::parse(["mode=buffered,buffered_lag_ms=10000,buffered_ops_max=1048576"]).unwrap();
        c.buffered_options().unwrap().validate().unwrap();
        assert!(MountConfig::parse(["mode=buffered,buffered_lag_ms=x"]).is_err());
        let c = MountConfig::parse(["mode=buffered,mode=fsync-atomic"]).unwrap();
        assert!(!c.buffered && c.buffered_options().is_none());
        assert_eq!(c.default_file_mode, Some(FileMode::FsyncAtomic));
        assert!(MountConfig::parse(["mode=buffered,ro"]).unwrap().buffered_options().is_none());
        assert!(MountConfig::parse(["mode=atomic"]).is_err());
        assert_eq!(MountConfig::parse(["ro"]).unwrap().default_file_mode, None);
        assert_eq!(MountConfig::parse(["mode=fsync-atomic"]).unwrap().default_file_mode, Some(FileMode::FsyncAtomic));
        assert_eq!(
            MountConfig::parse(["mode=fsync-atomic,mode=strict"]).unwrap().default_file_mode,
            Some(FileMode::Strict)
        );
        assert!(MountConfig::parse(["threads=0"]).is_err());
        assert!(MountConfig::parse(["umask=99"]).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1Q").is_err());
    }
}
