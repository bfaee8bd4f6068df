//! The `ext4` and `ext4-journal` targets: ext4 on a loop device backed by a
//! file in `/dev/shm` (the RAM-backed kernel setup a user would pick), with
//! the default `data=ordered` or with `data=journal` (the only kernel mode
//! here that makes data atomic, as NOVA does). The benchmark sets it all up
//! (`losetup`, `mkfs.ext4 -q`, `mount(2)`) and tears it down; it needs root.
//!
//! Media accounting: the loop device's "sectors written" counter
//! (`/sys/block/loopN/stat`), read after a `syncfs`, so everything the
//! workload dirtied has been written back and journaled.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::scratch::{unique_path, Scratch};
use crate::target::{cvt, FileId, MediaBytes, MountTimes, PosixDir, RemountProbe, TPath, Target};

/// Where mkfs.ext4 and losetup live on Debian (root's PATH has them; a
/// user's may not).
const SBIN: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path.split(':').chain(SBIN).map(|d| Path::new(d).join(name)).find(|p| p.is_file());
    found
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Why ext4 cannot run here, or `None` if it can. Installs e2fsprogs with
/// apt-get when mkfs.ext4 is missing and we are root.
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("needs root (losetup, mkfs.ext4 and mount); run as root or with sudo".into());
    }
    if tool("mkfs.ext4").is_none() {
        eprintln!("ferrite-bench: mkfs.ext4 not found; trying `apt-get install -y e2fsprogs`");
        let _ = Command::new("apt-get").args(["install", "-y", "-q", "e2fsprogs"]).status();
    }
    if tool("mkfs.ext4").is_none() {
        return Some("mkfs.ext4 not found (apt-get install -y e2fsprogs)".into());
    }
    if tool("losetup").is_none() {
        return Some("losetup not found (apt-get install -y mount)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control: this kernel or container has no loop devices".into());
    }
    None
}

fn run(cmd: &mut Command) -> io::Result<String> {
    let out = cmd.output().map_err(|e| io::Error::new(e.kind(), format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// An ext4 file system on a loop device over an image file: created, then
/// mounted and unmounted at will; detached and removed on drop.
struct LoopExt4 {
    dev: Option<PathBuf>,
    mounted: bool,
    options: &'static str,
    image_len: u64,
    mnt: Scratch,
    image: Scratch,
}

impl LoopExt4 {
    /// `inodes`: the `-N` of mkfs.ext4.
    fn create(base: &Path, label: &str, image_len: u64, inodes: u64, options: &'static str) -> io::Result<LoopExt4> {
        let image = Scratch::new(unique_path(base, &format!("{label}.img")));
        let mnt = Scratch::new(unique_path(base, &format!("{label}.mnt")));
        std::fs::File::create(image.path())?.set_len(image_len)?;
        std::fs::create_dir(mnt.path())?;
        let mut me = LoopExt4 { dev: None, mounted: false, options, image_len, mnt, image };
        let losetup = tool("losetup").ok_or_else(|| io::Error::other("losetup not found"))?;
        let dev = run(Command::new(&losetup).arg("--find").arg("--show").arg(me.image.path()))?;
        me.dev = Some(PathBuf::from(dev));
        let mkfs = tool("mkfs.ext4").ok_or_else(|| io::Error::other("mkfs.ext4 not found"))?;
        // Inode tables and journal written now, not by a kernel thread
        // during the measurements.
        run(Command::new(mkfs)
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-N"])
            .arg(inodes.to_string())
            .arg(me.dev()))?;
        me.mount()?;
        Ok(me)
    }

    fn dev(&self) -> &Path {
        self.dev.as_deref().expect("attached")
    }

    fn mount(&mut self) -> io::Result<()> {
        let (src, dst) = (cpath(self.dev()), cpath(self.mnt.path()));
        let opts = CString::new(self.options).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        cvt(unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), c"ext4".as_ptr(), 0, opts.as_ptr().cast()) })
            .map_err(|e| io::Error::new(e.kind(), format!("mount {} ({}): {e}", self.dev().display(), self.options)))?;
        self.mounted = true;
        Ok(())
    }

    fn umount(&mut self) -> io::Result<()> {
        if self.mounted {
            let dst = cpath(self.mnt.path());
            // SAFETY: NUL-terminated path.
            cvt(unsafe { libc::umount(dst.as_ptr()) })
                .map_err(|e| io::Error::new(e.kind(), format!("umount {}: {e}", self.mnt.path().display())))?;
            self.mounted = false;
        }
        Ok(())
    }

    /// `syncfs` on the mount: everything dirty is written back.
    fn syncfs(&self) -> io::Result<()> {
        let f = std::fs::File::open(self.mnt.path())?;
        // SAFETY: a descriptor we own.
        cvt(unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) }).map(drop)
    }

    /// Sectors written to the loop device since it was attached.
    fn sectors_written(&self) -> io::Result<u64> {
        let name = self.dev().file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let s = std::fs::read_to_string(format!("/sys/block/{name}/stat"))?;
        s.split_whitespace()
            .nth(6)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("/sys/block/{name}/stat: no sectors-written field")))
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if let Err(e) = self.umount() {
            eprintln!("ferrite-bench: {e}; detaching lazily");
            let dst = cpath(self.mnt.path());
            // SAFETY: NUL-terminated path.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(dev) = self.dev.take() {
            if let Some(losetup) = tool("losetup") {
                if let Err(e) = run(Command::new(losetup).arg("-d").arg(&dev)) {
                    eprintln!("ferrite-bench: {e}");
                }
            }
        }
        // Then the Scratch fields remove the mount point and the image.
    }
}

/// The ext4 target: system calls in a directory of the mounted file system.
pub struct Ext4 {
    name: &'static str,
    // Drop order: the directory tree first, then the file system.
    dir: Option<PosixDir>,
    fs: Mutex<LoopExt4>,
    base: PathBuf,
    acct_start: AtomicU64,
}

impl Ext4 {
    /// `data_journal`: mount with `data=journal` (target `ext4-journal`);
    /// otherwise the default ordered mode (target `ext4`).
    pub fn new(base: &Path, image_len: u64, data_journal: bool) -> io::Result<Ext4> {
        let name = if data_journal { "ext4-journal" } else { "ext4" };
        let options = if data_journal { "data=journal" } else { "" };
        let fs = LoopExt4::create(base, name, image_len, 400_000, options)?;
        let dir = PosixDir::new(name, fs.mnt.path())?;
        Ok(Ext4 { name, dir: Some(dir), fs: Mutex::new(fs), base: base.to_path_buf(), acct_start: AtomicU64::new(0) })
    }

    fn d(&self) -> &PosixDir {
        self.dir.as_ref().expect("ext4 target used after finish")
    }
}

impl Target for Ext4 {
    fn name(&self) -> &str {
        self.name
    }
    fn describe(&self) -> String {
        let fs = self.fs.lock().unwrap();
        format!(
            "ext4 ({}) on {} backed by {} ({} MiB, mkfs.ext4 -q -N 400000, lazy init off); \
             system calls in {}; fsync only where the workload calls it",
            if fs.options.is_empty() { "data=ordered, the default" } else { fs.options },
            fs.dev().display(),
            fs.image.path().display(),
            fs.image_len >> 20,
            self.d().root().display(),
        )
    }
    fn durable(&self) -> &'static str {
        "after fsync"
    }
    fn prepare(&self, path: &str) -> TPath {
        self.d().prepare(path)
    }
    fn mkdir(&self, path: &TPath) -> io::Result<()> {
        self.d().mkdir(path)
    }
    fn rmdir(&self, path: &TPath) -> io::Result<()> {
        self.d().rmdir(path)
    }
    fn open(&self, path: &TPath, create: bool) -> io::Result<FileId> {
        self.d().open(path, create)
    }
    fn close(&self, f: FileId) -> io::Result<()> {
        self.d().close(f)
    }
    #[inline]
    fn pwrite(&self, f: FileId, data: &[u8], offset: u64) -> io::Result<()> {
        self.d().pwrite(f, data, offset)
    }
    #[inline]
    fn pread(&self, f: FileId, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.d().pread(f, buf, offset)
    }
    #[inline]
    fn create_empty(&self, path: &TPath) -> io::Result<()> {
        self.d().create_empty(path)
    }
    #[inline]
    fn unlink(&self, path: &TPath) -> io::Result<()> {
        self.d().unlink(path)
    }
    fn kernel_dir(&self) -> Option<&Path> {
        Some(self.d().root())
    }
    fn accounting_begin(&self) -> io::Result<()> {
        let fs = self.fs.lock().unwrap();
        fs.syncfs()?;
        self.acct_start.store(fs.sectors_written()?, Ordering::SeqCst);
        Ok(())
    }
    fn accounting_note(&self) -> &'static str {
        "sectors written to the loop device, after syncfs"
    }
    fn accounting_end(&self) -> io::Result<Option<MediaBytes>> {
        let fs = self.fs.lock().unwrap();
        fs.syncfs()?;
        let sectors = fs.sectors_written()? - self.acct_start.load(Ordering::SeqCst);
        Ok(Some(MediaBytes { stored: sectors * 512, lines: None, fences: None }))
    }
    fn remount_probe(&self, files: usize) -> io::Result<Option<Box<dyn RemountProbe>>> {
        let options = self.fs.lock().unwrap().options;
        Ok(Some(Box::new(Ext4Remount::new(&self.base, self.name, files, options)?)))
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        drop(self.dir.take());
        self.fs.get_mut().unwrap().umount()
    }
}

/// A second ext4 holding `files` empty files in directories of 1,000.
/// Clean remount: `umount`, then a timed `mount(2)`. Crash: a file created
/// and fsynced (a committed, not yet checkpointed journal transaction),
/// then the image copied while mounted (what a power cut would leave), and
/// the copy mounted on a second loop device: ext4 replays its journal.
struct Ext4Remount {
    fs: LoopExt4,
    files: usize,
    probe: PathBuf,
    base: PathBuf,
    label: &'static str,
    crashes: u64,
}

impl Ext4Remount {
    fn new(base: &Path, label: &'static str, files: usize, options: &'static str) -> io::Result<Ext4Remount> {
        let label_r = if options.is_empty() { "ext4-remount" } else { "ext4j-remount" };
        let image_len = ((files as u64 * 8192) + (256 << 20)).next_multiple_of(1 << 20);
        let fs = LoopExt4::create(base, label_r, image_len, files as u64 + 10_000, options)?;
        let root = fs.mnt.path().join("r");
        std::fs::create_dir(&root)?;
        for d in 0..files.div_ceil(1000) {
            std::fs::create_dir(root.join(format!("d{d:04}")))?;
        }
        for i in 0..files {
            std::fs::File::create(root.join(format!("d{:04}/f{i:07}", i / 1000)))?;
        }
        let mid = files / 2;
        let probe = PathBuf::from(format!("r/d{:04}/f{mid:07}", mid / 1000));
        Ok(Ext4Remount { fs, files, probe, base: base.to_path_buf(), label, crashes: 0 })
    }

    fn timed_mount(fs: &mut LoopExt4, probe: &Path) -> io::Result<MountTimes> {
        let t0 = Instant::now();
        fs.mount()?;
        let t1 = Instant::now();
        std::fs::metadata(fs.mnt.path().join(probe))?;
        let t2 = Instant::now();
        Ok(MountTimes { mount: t1 - t0, first_lookup: t2 - t1, recovery: None })
    }
}

impl RemountProbe for Ext4Remount {
    fn describe(&self) -> String {
        format!(
            "{} image {} of {} MiB holding {} empty files in directories of 1,000; mount = mount(2) of the loop device",
            self.label,
            self.fs.image.path().display(),
            self.fs.image_len >> 20,
            self.files
        )
    }
    fn clean(&mut self) -> io::Result<MountTimes> {
        self.fs.umount()?;
        Self::timed_mount(&mut self.fs, &self.probe)
    }
    fn crash(&mut self) -> io::Result<Option<MountTimes>> {
        self.crashes += 1;
        let p = self.fs.mnt.path().join(format!("r/crash{}", self.crashes));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&p)?;
            f.write_all(&[7u8; 4096])?;
            f.sync_all()?;
        }
        // The crash image: the backing file as it is now, still mounted.
        let copy = Scratch::new(unique_path(&self.base, "ext4-crash.img"));
        run(Command::new("cp").arg("--sparse=always").arg(self.fs.image.path()).arg(copy.path()))?;
        let mnt = Scratch::new(unique_path(&self.base, "ext4-crash.mnt"));
        std::fs::create_dir(mnt.path())?;
        let losetup = tool("losetup").ok_or_else(|| io::Error::other("losetup not found"))?;
        let dev = run(Command::new(&losetup).arg("--find").arg("--show").arg(copy.path()))?;
        let mut crashed = LoopExt4 {
            dev: Some(PathBuf::from(dev)),
            mounted: false,
            options: self.fs.options,
            image_len: self.fs.image_len,
            mnt,
            image: copy,
        };
        let t = Self::timed_mount(&mut crashed, &self.probe)?;
        drop(crashed);
        Ok(Some(t))
    }
}

/// Unmounts and detaches what killed runs left: loop devices whose backing
/// file is a `ferrite-bench-PID-…` file of a dead process, and their mount
/// points. Runs before the scratch files are removed (so no mounted tree is
/// ever deleted).
pub fn remove_stale(base: &Path) -> Vec<String> {
    let mut done = Vec::new();
    let dead = |p: &str| -> bool {
        let Some(rest) = p.rsplit('/').next().and_then(|n| n.strip_prefix("ferrite-bench-")) else {
            return false;
        };
        match rest.split('-').next().and_then(|x| x.parse::<u32>().ok()) {
            Some(pid) => pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists(),
            None => false,
        }
    };
    let base_s = base.to_string_lossy().to_string();
    if let Ok(mounts) = std::fs::read_to_string("/proc/mounts") {
        for line in mounts.lines() {
            let Some(mp) = line.split_whitespace().nth(1) else { continue };
            if mp.starts_with(&base_s) && dead(mp) {
                let c = CString::new(mp).unwrap();
                // SAFETY: NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
                done.push(format!("unmounted {mp}"));
            }
        }
    }
    if let Ok(dir) = std::fs::read_dir("/sys/block") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !name.starts_with("loop") {
                continue;
            }
            let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else { continue };
            let backing = backing.trim().trim_end_matches(" (deleted)");
            if backing.starts_with(&base_s) && dead(backing) {
                if let Some(losetup) = tool("losetup") {
                    let _ = run(Command::new(losetup).arg("-d").arg(format!("/dev/{name}")));
                    done.push(format!("detached /dev/{name} ({backing})"));
                }
            }
        }
    }
    done
}
