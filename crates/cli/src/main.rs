//! `ferrite`: the operator's command for Ferrite pools.
//!
//! A thin adapter over the engine (`ferrite`) and the persistence layer
//! (`ferrite-pmem`): it parses arguments, opens pool files, calls the
//! engine and prints what it says. No file-system logic lives here.
//!
//! Exit status: 0 success; 1 the pool is damaged (fsck) or the demo found a
//! mismatch; 2 the command could not run (one line on stderr says why).

mod demo;
mod mount;
mod run;
mod util;

use clap::{Parser, Subcommand};
use ferrite::format::{Layout, MountState, FORMAT_VERSION, PAGE_SIZE};
use ferrite::{Ferrite, FormatOptions, InodeNo, MountOptions};
use ferrite_pmem::{FlushKind, NtKind, Pmem, PmemError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use util::{
    human_bytes, human_duration, outln, parse_size, pool_message, pool_path, CliError, CliResult, Existing,
    EXIT_DAMAGED, EXIT_OK, MIN_POOL_BYTES,
};

const POOL_HELP: &str = "Pool file [default: $FERRITE_POOL, else /dev/shm/ferrite.pool]";

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Make, inspect, check and exercise Ferrite persistent-memory file system pools",
    long_about = "Make, inspect, check and exercise Ferrite persistent-memory file system pools.\n\n\
        A pool is one file: on a DAX file system it is real persistent memory (mapped with \
        MAP_SYNC); in /dev/shm it is memory emulation that survives a process crash but not \
        a reboot.\n\n\
        When POOL is omitted, $FERRITE_POOL is used, else /dev/shm/ferrite.pool.\n\n\
        Exit status: 0 success; 1 the pool is damaged (fsck) or the demo found a mismatch; \
        2 the command could not run."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Fuse(mount::FuseCommand),
    /// Create a pool file and format an empty file system in it
    ///
    /// The file is created (or truncated) to SIZE bytes and formatted, then
    /// unmounted cleanly. A file that already holds a Ferrite pool is not
    /// overwritten unless --force is given.
    Mkfs {
        #[arg(help = POOL_HELP)]
        pool: Option<PathBuf>,
        /// Pool size: bytes, or with a binary suffix K, M, G, T (rounded up to 4096)
        #[arg(short, long, default_value = "1G", value_parser = parse_size)]
        size: u64,
        /// Lanes: journals and allocator partitions, 1..=64 (about one per thread that writes)
        #[arg(short, long, default_value_t = FormatOptions::default().lanes)]
        lanes: u32,
        /// Inode slots [default: one per 16 KiB of pool]
        #[arg(short, long)]
        inodes: Option<u64>,
        /// Overwrite a file that already holds a Ferrite pool
        #[arg(short, long)]
        force: bool,
    },
    /// Show a pool's geometry, state and persistence domain, without mounting it
    ///
    /// Reads only the superblock and changes nothing; a pool mounted by
    /// another process is read through a private view. With --usage the pool
    /// is mounted (recovered first if it was not cleanly unmounted) to count
    /// used and free space, then unmounted cleanly: that does write to it.
    Info {
        #[arg(help = POOL_HELP)]
        pool: Option<PathBuf>,
        /// Also mount the pool and report used/free pages and inodes (writes to the pool)
        #[arg(short, long)]
        usage: bool,
    },
    /// Check a pool's consistency without changing it
    ///
    /// Works on a private copy of the pool and prints a report. Exit status:
    /// 0 clean, 1 problems found, 2 the pool cannot be checked (cannot be
    /// opened, or is not a Ferrite pool of this version).
    Fsck {
        #[arg(help = POOL_HELP)]
        pool: Option<PathBuf>,
    },
    /// Print an annotated decode of a pool's on-media structures
    ///
    /// The superblock, the journals, and one inode (the root by default)
    /// with its log. Changes nothing.
    Dump {
        #[arg(help = POOL_HELP)]
        pool: Option<PathBuf>,
        /// Inode number to decode [default: 1, the root directory]
        #[arg(short, long, value_name = "N")]
        inode: Option<u64>,
    },
    /// Run a program with the preload library: its calls under ROOT are served in its own process
    ///
    /// The program (and the first process of its tree that loads the
    /// library) owns POOL, which is created (1 GiB) if missing. Unless
    /// --no-mount is given, that process also serves a FUSE mount at ROOT
    /// from its own threads, so child processes and calls the library does
    /// not intercept reach the same file system through the kernel. Every
    /// write is durable when it returns (strict mode), except in
    /// fsync-atomic files (--mode, --atomic), whose writes become durable
    /// together at the file's next fsync; with --mode buffered every
    /// operation returns at memory speed and becomes durable, in order,
    /// within a few milliseconds or at the next fsync/sync. At exit the
    /// pool is unmounted cleanly. See docs/PRELOAD.md.
    Run {
        #[arg(help = POOL_HELP, long)]
        pool: Option<PathBuf>,
        /// Where the pool appears (created if missing)
        #[arg(long, value_name = "DIR")]
        root: PathBuf,
        /// Do not serve a FUSE mount at ROOT (child processes then do not see the pool)
        #[arg(long)]
        no_mount: bool,
        /// Consistency mode of the regular files created, or `buffered` for a buffered mount
        /// (FERRITE_MODE)
        #[arg(long, value_name = "MODE", value_parser = ["strict", "fsync-atomic", "buffered"])]
        mode: Option<String>,
        /// Files made fsync-atomic when the program creates or opens them for writing: glob
        /// patterns separated by `:` or `,`, matched against the file name, or against the path
        /// in the pool when the pattern has a `/` (FERRITE_ATOMIC; e.g. '*.db')
        #[arg(long, value_name = "PATTERNS")]
        atomic: Option<std::ffi::OsString>,
        /// The program and its arguments
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Format a pool, fill it with a tree of files, crash it, recover it, and verify every byte
    ///
    /// Round 1 writes directories, files of deterministic content and sizes
    /// (0..256 KiB), symlinks and hard links, renames a directory, unmounts
    /// cleanly, remounts (no recovery must run) and verifies names, sizes,
    /// link counts, symlink targets and every byte. Round 2 overwrites,
    /// appends, truncates, unlinks and renames, leaves an unlinked file open,
    /// then drops the file system without unmounting (a simulated crash),
    /// remounts (recovery must run) and verifies again. Finally the pool is
    /// unmounted cleanly and checked with fsck, and left in place.
    ///
    /// The pool file is overwritten only if it does not exist or holds a
    /// Ferrite pool. Exit status 1 on any mismatch.
    Demo {
        #[arg(help = POOL_HELP)]
        pool: Option<PathBuf>,
        /// Number of regular files in round 1
        #[arg(short, long, default_value_t = 1000, value_name = "N")]
        files: usize,
        /// Pool size: bytes, or with a binary suffix K, M, G, T (rounded up to 4096)
        #[arg(short, long, default_value = "256M", value_parser = parse_size)]
        size: u64,
    },
}

fn main() -> ExitCode {
    if let Some(code) = mount::helper_from_argv0() {
        return code;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fuse(c) => mount::run(c),
        Command::Mkfs { pool, size, lanes, inodes, force } => mkfs(&pool_path(pool), size, lanes, inodes, force),
        Command::Info { pool, usage } => info(&pool_path(pool), usage),
        Command::Fsck { pool } => fsck(&pool_path(pool)),
        Command::Dump { pool, inode } => dump(&pool_path(pool), inode),
        Command::Demo { pool, files, size } => demo::run(&pool_path(pool), files, size),
        Command::Run { pool, root, no_mount, mode, atomic, cmd } => {
            let modes = run::Modes { default_mode: mode, atomic };
            run::run(&pool_path(pool), &root, !no_mount, &modes, &cmd)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ferrite: {}", e.msg);
            ExitCode::from(e.code)
        }
    }
}

/// Create the pool file and format it. Checks the geometry first, so that
/// bad parameters never truncate an existing file. Removes a file it
/// created if formatting fails.
pub(crate) fn create_and_format(path: &Path, size: u64, lanes: u32, inodes: Option<u64>) -> CliResult<Ferrite> {
    if size < MIN_POOL_BYTES {
        return Err(CliError::pool(
            path,
            format!("a pool of {} is too small: at least {} is needed", human_bytes(size), human_bytes(MIN_POOL_BYTES)),
        ));
    }
    // The engine's own geometry check (lanes, page count, inode count),
    // run before the file is touched.
    Layout::compute(size / PAGE_SIZE, lanes, inodes.unwrap_or(2))
        .map_err(|m| CliError::pool(path, format!("invalid parameters: {m}")))?;
    let existed = path.exists();
    let pmem =
        Pmem::create_file(path, size, MIN_POOL_BYTES).map_err(|e| CliError::pool(path, util::create_message(&e)))?;
    let opts = FormatOptions { lanes, inodes, ..FormatOptions::default() };
    Ferrite::format(pmem, &opts).map_err(|e| {
        let mut msg = format!("cannot format: {}", pool_message(&e));
        if !existed && std::fs::remove_file(path).is_ok() {
            msg.push_str(" (pool file removed)");
        }
        CliError::pool(path, msg)
    })
}

fn mkfs(path: &Path, size: u64, lanes: u32, inodes: Option<u64>, force: bool) -> CliResult<u8> {
    match util::probe(path)? {
        Existing::Ferrite(what) if !force => {
            return Err(CliError::pool(path, format!("{what}; not overwritten (use --force to format it anyway)")));
        }
        Existing::Ferrite(what) | Existing::Other(what) => {
            outln!("replacing {}: {what}", path.display());
        }
        Existing::Nothing => {}
    }
    let started = Instant::now();
    let fs = create_and_format(path, size, lanes, inodes)?;
    let sb = fs.superblock();
    let stats = fs.fs_stats();
    fs.unmount().map_err(|e| CliError::pool(path, format!("unmount after format failed: {e}")))?;
    let elapsed = started.elapsed();
    outln!("formatted {} ({}) in {}", path.display(), human_bytes(size), human_duration(elapsed));
    outln!("  pages        {} of {} bytes", sb.total_pages, PAGE_SIZE);
    outln!("  lanes        {}", sb.lane_count);
    outln!(
        "  inode slots  {} (table at pages {}..{})",
        sb.inode_count,
        sb.inode_table_start.0,
        sb.inode_table_start.0 + sb.inode_table_pages
    );
    outln!("  data start   page {} ({} of metadata)", sb.data_start.0, human_bytes(sb.data_start.0 * PAGE_SIZE));
    outln!(
        "  free         {} pages ({}), {} inodes",
        stats.blocks_free,
        human_bytes(stats.blocks_free * PAGE_SIZE),
        stats.files_free
    );
    outln!("  uuid         {}", util::hex(&sb.uuid));
    Ok(EXIT_OK)
}

fn info(path: &Path, usage: bool) -> CliResult<u8> {
    // A pool open elsewhere (mounted) is read through a private view
    // without the lock: the superblock as it is now, nothing changed.
    let (pmem, open_elsewhere) = match Pmem::open_file(path, MIN_POOL_BYTES) {
        Ok(pmem) => (pmem, false),
        Err(PmemError::AlreadyOpen) if !usage => (util::open_pool_private(path, false)?, true),
        // Again through the helper, for its messages (a directory, ...).
        Err(_) => (util::open_pool(path)?, false),
    };
    let sb = ferrite::read_superblock(&pmem).map_err(|e| CliError::pool(path, pool_message(&e)))?;
    outln!("pool           {}", path.display());
    outln!("format         Ferrite, version {FORMAT_VERSION}");
    outln!(
        "size           {} ({} bytes, {} pages of {})",
        human_bytes(pmem.len()),
        pmem.len(),
        sb.total_pages,
        PAGE_SIZE
    );
    outln!("lanes          {}", sb.lane_count);
    outln!(
        "inode slots    {} (table at pages {}..{})",
        sb.inode_count,
        sb.inode_table_start.0,
        sb.inode_table_start.0 + sb.inode_table_pages
    );
    outln!("data start     page {} ({} of metadata)", sb.data_start.0, human_bytes(sb.data_start.0 * PAGE_SIZE));
    match sb.state {
        MountState::Clean => {
            outln!("state          clean (cleanly unmounted)");
            outln!(
                "free (saved)   {} pages ({}), {} inodes, as of the last unmount",
                sb.saved_free_pages,
                human_bytes(sb.saved_free_pages * PAGE_SIZE),
                sb.saved_free_inodes
            );
        }
        MountState::Dirty if open_elsewhere => {
            outln!("state          mounted (open by another process; a crash now would be recovered at the next mount)")
        }
        MountState::Dirty => {
            outln!("state          dirty (not cleanly unmounted: the next mount recovers it)")
        }
    }
    outln!("mount count    {}", sb.mount_count);
    outln!("created        {} ({} ns)", util::utc_time(sb.created_ns), sb.created_ns);
    outln!("uuid           {}", util::hex(&sb.uuid));
    if open_elsewhere {
        // This process's view is private; the mapping facts belong to the
        // process that has the pool open.
        outln!("persistence    (see the mounting process; `ferrite info` shows it when the pool is not open)");
    } else {
        outln!("persistence    {}", pmem.domain());
        outln!(
            "map_sync       {}",
            if pmem.map_sync() { "yes (DAX: stores reach persistent media at each fence)" } else { "no" }
        );
    }
    outln!("flush          {}", flush_name(pmem.flush_kind()));
    outln!("copy           {}", nt_name(pmem.nt_kind()));
    if !usage {
        return Ok(EXIT_OK);
    }
    let fs = Ferrite::mount(pmem, &MountOptions::default())
        .map_err(|e| CliError::pool(path, format!("cannot mount: {}", pool_message(&e))))?;
    let r = fs.mount_report().clone();
    if r.recovered {
        outln!(
            "recovery       ran at this mount: {} journals rolled back, {} inodes scanned, {} orphans freed, {}",
            r.journals_rolled_back,
            r.inodes_scanned,
            r.orphans_freed,
            human_duration(std::time::Duration::from_nanos(r.recovery_ns))
        );
    }
    let st = fs.fs_stats();
    let used_pages = st.blocks - st.blocks_free;
    let used_inodes = st.files - st.files_free;
    outln!(
        "pages          {} used ({}, metadata included), {} free ({}), {} total",
        used_pages,
        human_bytes(used_pages * st.block_size as u64),
        st.blocks_free,
        human_bytes(st.blocks_free * st.block_size as u64),
        st.blocks
    );
    outln!(
        "available      {} pages ({}) to ordinary changes; {} more kept for removals (docs/DESIGN.md, \"Space for removals\")",
        st.blocks_avail,
        human_bytes(st.blocks_avail * st.block_size as u64),
        st.blocks_free - st.blocks_avail
    );
    outln!("inodes         {} used, {} free, {} total", used_inodes, st.files_free, st.files);
    fs.unmount().map_err(|e| CliError::pool(path, format!("unmount failed: {e}")))?;
    Ok(EXIT_OK)
}

fn flush_name(k: FlushKind) -> &'static str {
    match k {
        FlushKind::Clwb => "clwb (write back, line stays cached)",
        FlushKind::ClflushOpt => "clflushopt",
        FlushKind::Clflush => "clflush (serializing: slowest)",
        FlushKind::NoFlush => "none (no cache-line write-back: eADR platform or FERRITE_FLUSH=none)",
    }
}

fn nt_name(k: NtKind) -> &'static str {
    match k {
        NtKind::Avx2 => "AVX2 non-temporal stores",
        NtKind::Sse2 => "SSE2 non-temporal stores",
    }
}

fn fsck(path: &Path) -> CliResult<u8> {
    let pmem = util::open_pool_private(path, true)?;
    let started = Instant::now();
    let report = ferrite::fsck::check_private(pmem)
        .map_err(|e| CliError::pool(path, format!("cannot check: {}", pool_message(&e))))?;
    let elapsed = started.elapsed();
    outln!("{report}");
    if report.is_clean() {
        outln!("{}: clean (checked in {})", path.display(), human_duration(elapsed));
        Ok(EXIT_OK)
    } else {
        outln!(
            "{}: DAMAGED: {} problem(s) (checked in {})",
            path.display(),
            report.problems.len(),
            human_duration(elapsed)
        );
        Ok(EXIT_DAMAGED)
    }
}

fn dump(path: &Path, inode: Option<u64>) -> CliResult<u8> {
    let pmem = util::open_pool_private(path, false)?;
    let text = ferrite::dump::dump(pmem, inode.map(InodeNo))
        .map_err(|e| CliError::pool(path, format!("cannot dump: {}", pool_message(&e))))?;
    outln!("{}", text.trim_end());
    Ok(EXIT_OK)
}
