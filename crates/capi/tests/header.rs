//! Proves that the checked-in `include/ferrite.h` is the header cbindgen
//! generates from `src/capi.rs` (build.rs writes it to `$OUT_DIR`), so C
//! programs compiled against the repository's copy see exactly the
//! functions and structures the library exports.
//!
//! After changing the C API, refresh the copy with
//! `FERRITE_BLESS=1 cargo test -p ferrite-c --test header`.

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let generated_path = Path::new(env!("OUT_DIR")).join("ferrite.h");
    let generated = std::fs::read_to_string(&generated_path)
        .unwrap_or_else(|e| panic!("{}: {e} (build.rs should have written it)", generated_path.display()));
    let checked_in_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ferrite.h");
    if std::env::var_os("FERRITE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&checked_in_path, &generated).unwrap_or_else(|e| panic!("{}: {e}", checked_in_path.display()));
        eprintln!("wrote {}", checked_in_path.display());
        return;
    }
    let checked_in = std::fs::read_to_string(&checked_in_path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "{} differs from the generated header {} (first at line {}); refresh it with\n    \
             FERRITE_BLESS=1 cargo test -p ferrite-c --test header",
            checked_in_path.display(),
            generated_path.display(),
            first + 1
        );
    }
}
