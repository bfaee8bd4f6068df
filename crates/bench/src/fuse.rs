//! The `fuse` target: Ferrite through its FUSE mount. A fresh pool is
//! formatted, mounted at a scratch directory by `ferrite-fuse` with its
//! default options (served by threads of this process, as `ferrite mount`
//! serves it from its own), and the workloads make the same system calls as
//! on tmpfs ([`PosixDir`]) inside the mount. Every call is a round trip
//! through the kernel's FUSE layer to the daemon threads and back.

use std::io;
use std::path::Path;

use ferrite::{Ferrite, FormatOptions};
use ferrite_fuse::{Background, MountConfig};
use ferrite_pmem::Pmem;

use crate::scratch::{unique_path, Scratch};
use crate::target::{FileId, PosixDir, TPath, Target};

pub struct FuseMount {
    name: &'static str,
    direct_io: bool,
    writeback_cache: bool,
    // Field order is drop order: the directory inside the mount goes
    // first, then the mount, then the mount point and the pool file.
    dir: Option<PosixDir>,
    mount: Option<Background>,
    transport: String,
    pool_len: u64,
    mnt: Scratch,
    pool: Scratch,
}

impl FuseMount {
    /// `direct_io`: the `fuse-direct` target (`-o direct_io`: no kernel page
    /// cache for file data, so every read and write is a round trip to the
    /// daemon); `dev_fuse`: the `fuse-dev` target (`-o transport=dev`: the
    /// /dev/fuse transport, to compare with io_uring in one run); otherwise
    /// `fuse`, the default options (io_uring when the kernel allows it).
    pub fn new(base: &Path, pool_len: u64, direct_io: bool, dev_fuse: bool) -> io::Result<FuseMount> {
        let pool = Scratch::new(unique_path(base, "fuse.pool"));
        let mnt = Scratch::new(unique_path(&std::env::temp_dir(), "fuse.mnt"));
        std::fs::create_dir(mnt.path())?;
        let pmem = Pmem::create_file(pool.path(), pool_len, 64 * 4096)
            .map_err(|e| io::Error::other(format!("{}: {e}", pool.path().display())))?;
        // Pages are faulted in on a thread of their own; measurements start
        // once it is done, as they did when creating the pool did it.
        pmem.wait_populated();
        let fs = Ferrite::format(pmem, &FormatOptions::default())
            .map_err(|e| io::Error::other(format!("format {}: {e}", pool.path().display())))?;
        // FERRITE_BENCH_FUSE_OPTS: extra mount options (`-o` syntax), to
        // measure e.g. writeback_cache, threads=1 or attr_timeout=0.
        let extra = std::env::var("FERRITE_BENCH_FUSE_OPTS").unwrap_or_default();
        let mut cfg = MountConfig::parse([extra.as_str()]).map_err(io::Error::other)?;
        cfg.direct_io |= direct_io;
        if dev_fuse {
            cfg.transport = ferrite_fuse::Transport::Dev;
        }
        let mount = ferrite_fuse::spawn(fs, mnt.path(), &cfg, pool.path()).map_err(|e| {
            io::Error::new(e.kind(), format!("FUSE mount at {} (root and /dev/fuse needed): {e}", mnt.path().display()))
        })?;
        let dir = PosixDir::new("fuse", mnt.path())?;
        Ok(FuseMount {
            name: if direct_io {
                "fuse-direct"
            } else if dev_fuse {
                "fuse-dev"
            } else {
                "fuse"
            },
            transport: mount.transport().to_string(),
            direct_io,
            writeback_cache: cfg.writeback_cache,
            dir: Some(dir),
            mount: Some(mount),
            pool_len,
            mnt,
            pool,
        })
    }

    #[inline]
    fn d(&self) -> &PosixDir {
        self.dir.as_ref().expect("fuse target used after finish")
    }
}

impl Target for FuseMount {
    fn name(&self) -> &str {
        self.name
    }
    fn describe(&self) -> String {
        format!(
            "Ferrite through FUSE (ferrite-fuse: {}, {}{}), pool {} of {} MiB, \
             mounted at {}; system calls as for tmpfs",
            self.transport,
            if self.direct_io {
                "direct_io: no kernel page cache, every read and write goes to the daemon"
            } else {
                "kernel page cache kept across opens (reads of cached pages never reach the daemon)"
            },
            match std::env::var("FERRITE_BENCH_FUSE_OPTS") {
                Ok(o) if !o.is_empty() => format!(", options {o}"),
                _ => ", default options (attributes and names cached 1 s, no writeback cache)".into(),
            },
            self.pool.path().display(),
            self.pool_len >> 20,
            self.mnt.path().display()
        )
    }
    fn durable(&self) -> &'static str {
        if self.writeback_cache {
            "after fsync (writeback_cache)"
        } else {
            "yes (strict mode, write-through)"
        }
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
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        drop(self.dir.take()); // removes the tree inside the mount
        if let Some(m) = self.mount.take() {
            m.unmount()?;
        }
        Ok(())
    }
}
