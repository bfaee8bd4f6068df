//! `ferrite mount` and `ferrite umount`: the FUSE front end
//! (crate `ferrite-fuse`) on the command line. Also the mount(8) helper:
//! invoked as `mount.fuse.ferrite` (a symlink to `ferrite`), the command
//! takes mount(8)'s helper arguments instead.

use crate::util::{pool_path, CliError, CliResult, EXIT_OK};
use clap::{Args, Subcommand};
use ferrite_fuse::{MountConfig, MountRequest};
use std::path::PathBuf;
use std::time::Duration;

const MOUNT_LONG: &str = "Mount a pool at a directory through FUSE, so that every program can use it.\n\n\
    POOL is created (size 1G, or -o size=SIZE) and formatted if it does not exist. A pool that was \
    not cleanly unmounted is recovered first. Stays in the foreground until unmounted (Ctrl-C, \
    SIGTERM, `ferrite umount DIR` or umount(8)); --daemon detaches once the mount is usable. \
    Unmounting leaves the pool marked clean. By default every operation is durable when it \
    returns (strict mode), so fsync costs nothing; with -o mode=fsync-atomic the regular files \
    created through the mount are fsync-atomic: their writes become durable together at the \
    next fsync, and after a crash each such file is as at one of its fsyncs. The mount's first \
    line says which mode new files get; `getfattr -n user.ferrite.mode FILE` shows a file's \
    mode and `setfattr -n user.ferrite.mode -v fsync-atomic FILE` changes it. With -o \
    mode=buffered every operation returns at memory speed and a background persister makes \
    them durable in the order they returned, within a few milliseconds \
    (-o buffered_lag_ms=, buffered_ops_max=); fsync makes everything before it durable, and \
    after a crash the pool is as after a prefix of the operations that holds every one \
    before the last completed fsync. The mount line then says `mode buffered`.\n\n\
    As mount(8) helper: `ln -s $(command -v ferrite) /sbin/mount.fuse.ferrite`, then \
    `mount -t fuse.ferrite POOL DIR -o OPTIONS` or the fstab line \
    `POOL DIR fuse.ferrite defaults,allow_other 0 0`.";

/// The FUSE subcommands, flattened into the `ferrite` command.
#[derive(Subcommand)]
pub enum FuseCommand {
    /// Mount a pool at a directory through FUSE (created if missing)
    #[command(long_about = MOUNT_LONG, after_help = ferrite_fuse::OPTIONS_HELP)]
    Mount(MountArgs),
    /// Unmount a Ferrite FUSE mount and wait until the pool is released clean
    ///
    /// Unmounts DIR (umount2 as root, fusermount3 -u otherwise), then waits
    /// until the daemon has unmounted the pool cleanly, and says whether the
    /// pool was left clean. A mount whose daemon died is removed too.
    Umount(UmountArgs),
}

#[derive(Args)]
pub struct MountArgs {
    /// Pool file [default: $FERRITE_POOL, else /dev/shm/ferrite.pool when only DIR is given]
    #[arg(value_name = "POOL")]
    first: PathBuf,
    /// Mount point (an existing directory)
    #[arg(value_name = "DIR")]
    second: Option<PathBuf>,
    /// Mount options, comma-separated (see below); may be repeated
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Detach once the mount is usable (the command then returns)
    #[arg(short, long)]
    daemon: bool,
    /// Size of the pool created when POOL does not exist (e.g. 256M, 4G)
    #[arg(short, long, value_parser = crate::util::parse_size)]
    size: Option<u64>,
    /// Log file of the detached daemon (default: none)
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
}

#[derive(Args)]
pub struct UmountArgs {
    /// Mount point
    dir: PathBuf,
    /// Detach now even if busy; the daemon exits once the last user is gone
    #[arg(short, long)]
    lazy: bool,
    /// Seconds to wait for the daemon to release the pool
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

pub fn run(cmd: FuseCommand) -> CliResult<u8> {
    match cmd {
        FuseCommand::Mount(a) => mount(a),
        FuseCommand::Umount(a) => {
            let msg = ferrite_fuse::umount(&a.dir, a.lazy, Duration::from_secs(a.timeout))
                .map_err(|e| CliError::new(crate::util::EXIT_ERROR, e))?;
            crate::util::outln!("{msg}");
            Ok(EXIT_OK)
        }
    }
}

fn mount(a: MountArgs) -> CliResult<u8> {
    let (pool, dir) = match a.second {
        Some(dir) => (a.first, dir),
        None => (pool_path(None), a.first),
    };
    let mut config = MountConfig::parse(a.options.iter().map(String::as_str))
        .map_err(|e| CliError::new(crate::util::EXIT_ERROR, e))?;
    if a.size.is_some() {
        config.size = a.size;
    }
    if a.log.is_some() {
        config.log = a.log;
    }
    let req = MountRequest { pool, mountpoint: dir, config, daemon: a.daemon };
    ferrite_fuse::mount(&req).map_err(|e| CliError::new(crate::util::EXIT_ERROR, e))?;
    Ok(EXIT_OK)
}

/// When started as `mount.fuse.ferrite` (mount(8)'s helper name), run as
/// the helper and return its exit status.
pub fn helper_from_argv0() -> Option<std::process::ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if !ferrite_fuse::invoked_as_helper(args.first()?) {
        return None;
    }
    let code = ferrite_fuse::helper_main(args);
    Some(std::process::ExitCode::from(code.clamp(0, 255) as u8))
}
