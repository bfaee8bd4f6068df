//! Proves that a C program can use Ferrite through `libferrite.so` and the
//! checked-in `include/ferrite.h` alone: `examples/c/hello.c` (every group
//! of calls, errno on failures, data surviving an unmount and a mount),
//! `examples/c/threads.c` (one handle shared by several pthreads) and
//! `examples/c/modes.c` (consistency modes: the default mode, a file's mode
//! by path, by descriptor and as the xattr `user.ferrite.mode`, refused
//! calls, and what fsync-atomic files hold after a process that wrote them
//! died without unmounting: their last commit point) and
//! `examples/c/peek.c` (zero-copy views and patch buffers: a view keeps its
//! bytes across rewrite, truncate and unlink, patches at aligned and
//! unaligned offsets, the errors of misuse with nothing changed, and views
//! and buffers released by unmount) and `examples/c/buffered.c` (a
//! buffered mount: the mode calls and the xattr answer "buffered", refused
//! modes and options, `ferrite_unmount` makes every call durable, and a
//! process that dies without unmounting leaves everything before its fsync
//! and a prefix of what came after) are
//! compiled with the system C compiler with warnings as errors, linked
//! against the library cargo built for this package, run, and their output
//! compared line by line with `examples/c/*.expected`.
//!
//! The test is skipped (with a message) only when no C compiler is found
//! and the CI environment variable is not `true`; in CI a missing compiler
//! fails it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `libferrite.so`: the test executable is
/// `target/<profile>/deps/c_api-<hash>`, and cargo puts the package's
/// cdylib for the tests in `deps` (and in `target/<profile>` only on
/// `cargo build`, where it may be older than this test's: so `deps`
/// first).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [Some(deps), deps.parent()].into_iter().flatten() {
        if dir.join("libferrite.so").is_file() {
            return dir.to_path_buf();
        }
    }
    panic!("no libferrite.so next to {} (cargo builds it for this package's tests)", deps.display());
}

/// The C compiler: $CC, else `cc`.
fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Compile `examples/c/<name>.c`; None if there is no compiler and the
/// test may be skipped.
fn compile(name: &str) -> Option<PathBuf> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{name}"));
    let src = crate_dir.join("examples/c").join(format!("{name}.c"));
    let cc = compiler();
    let result = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(crate_dir.join("include"))
        .arg(&src)
        .arg("-L")
        .arg(&lib)
        .args(["-lferrite", "-o"])
        .arg(&out)
        .output();
    match result {
        Err(e) if e.kind() == ErrorKind::NotFound && std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: no C compiler `{cc}` on this machine (set CC, or install cc, to run this test)");
            None
        }
        Err(e) => panic!("cannot run the C compiler `{cc}`: {e}"),
        Ok(o) => {
            assert!(
                o.status.success(),
                "{cc} {} failed ({}):\n{}",
                src.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            Some(out)
        }
    }
}

/// Run a compiled example on a fresh pool path in /dev/shm and compare its
/// output with `examples/c/<name>.expected`.
fn run_and_compare(name: &str, exe: &Path) {
    let pool = PathBuf::from(format!("/dev/shm/ferrite-capi-test-{}-{name}.pool", std::process::id()));
    let _ = std::fs::remove_file(&pool);
    let lib = lib_dir();
    let o = Command::new(exe).arg(&pool).env("LD_LIBRARY_PATH", &lib).output();
    let _ = std::fs::remove_file(&pool);
    let o = o.unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{name} failed ({}):\n--- stdout\n{stdout}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let expected_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c").join(format!("{name}.expected"));
    let expected =
        std::fs::read_to_string(&expected_path).unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
    for (i, (want, got)) in expected.lines().zip(stdout.lines()).enumerate() {
        assert_eq!(got, want, "{name}: line {} differs from {}", i + 1, expected_path.display());
    }
    assert_eq!(
        stdout.lines().count(),
        expected.lines().count(),
        "{name}: printed a different number of lines than {}:\n{stdout}",
        expected_path.display()
    );
}

#[test]
fn hello_c_transcript() {
    if let Some(exe) = compile("hello") {
        run_and_compare("hello", &exe);
    }
}

#[test]
fn threads_c_transcript() {
    if let Some(exe) = compile("threads") {
        run_and_compare("threads", &exe);
    }
}

#[test]
fn modes_c_transcript() {
    if let Some(exe) = compile("modes") {
        run_and_compare("modes", &exe);
    }
}

#[test]
fn peek_c_transcript() {
    if let Some(exe) = compile("peek") {
        run_and_compare("peek", &exe);
    }
}

#[test]
fn buffered_c_transcript() {
    if let Some(exe) = compile("buffered") {
        run_and_compare("buffered", &exe);
    }
}
