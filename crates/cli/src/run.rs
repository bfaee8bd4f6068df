//! `ferrite run`: start a program with the preload library, so that its
//! file calls under the root are served by the engine in its own process
//! (docs/PRELOAD.md).

use crate::util::{CliError, CliResult, EXIT_ERROR};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Where libferrite.so is: $FERRITE_LIB, else beside this executable (or
/// one directory up, for test binaries under deps/).
pub fn find_library() -> CliResult<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe =
        std::env::current_exe().map_err(|e| CliError::new(EXIT_ERROR, format!("cannot find this executable: {e}")))?;
    for dir in exe.ancestors().skip(1).take(2) {
        for lib in [dir.join("libferrite.so"), dir.join("deps/libferrite.so")] {
            if lib.is_file() {
                return Ok(lib);
            }
        }
    }
    Err(CliError::new(
        EXIT_ERROR,
        format!(
            "libferrite.so is not beside {} (build it with `cargo build --release -p ferrite-c`, or set FERRITE_LIB)",
            exe.display()
        ),
    ))
}

/// The consistency modes asked for (docs/PRELOAD.md, "Modes"): None
/// leaves the caller's FERRITE_MODE / FERRITE_ATOMIC as they are.
pub struct Modes {
    /// FERRITE_MODE: "strict", "fsync-atomic" or "buffered".
    pub default_mode: Option<String>,
    /// FERRITE_ATOMIC: glob patterns of files made fsync-atomic.
    pub atomic: Option<OsString>,
}

/// Replace this process with `cmd`, preloaded, owning `pool` at `root`.
pub fn run(pool: &Path, root: &Path, mount: bool, modes: &Modes, cmd: &[OsString]) -> CliResult<u8> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err(CliError::new(
            EXIT_ERROR,
            "ferrite run: no command given (ferrite run [OPTIONS] -- CMD [ARGS...])",
        ));
    };
    let lib = find_library()?;
    let root = std::path::absolute(root).map_err(|e| CliError::new(EXIT_ERROR, format!("{}: {e}", root.display())))?;
    let pool = std::path::absolute(pool).map_err(|e| CliError::new(EXIT_ERROR, format!("{}: {e}", pool.display())))?;
    // The library creates ROOT if it can, and removes a dead mount left
    // there by a killed owner (which the kernel reports as not connected).
    let _ = std::fs::create_dir_all(&root);
    // Keep whatever the caller already preloads, after ours.
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut command = std::process::Command::new(prog);
    command
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("FERRITE_POOL", &pool)
        .env("FERRITE_ROOT", &root)
        .env("FERRITE_MOUNT", if mount { "1" } else { "0" });
    if let Some(m) = &modes.default_mode {
        command.env("FERRITE_MODE", m);
    }
    if let Some(a) = &modes.atomic {
        command.env("FERRITE_ATOMIC", a);
    }
    let err = command.exec();
    Err(CliError::new(EXIT_ERROR, format!("cannot run {}: {err}", prog.to_string_lossy())))
}
