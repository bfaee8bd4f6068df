//! Generate `ferrite.h` with cbindgen into `$OUT_DIR/ferrite.h`.
//!
//! cbindgen reads `src/capi.rs` alone rather than the whole crate: the
//! preload module of the same library exports libc's own names (`open`,
//! `read`, …) with `#[no_mangle]`, and those must not be declared by the
//! C API's header, where they would clash with <fcntl.h> and <unistd.h>.
//! Reading one file also keeps cbindgen from running `cargo metadata`.
//!
//! The checked-in copy, `include/ferrite.h`, is compared with this output
//! by `tests/header.rs`, which also refreshes it when FERRITE_BLESS=1.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("ferrite.h");
    let src = dir.join("src/capi.rs");
    let cfg_path = dir.join("cbindgen.toml");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", cfg_path.display());
    let config = cbindgen::Config::from_file(&cfg_path).unwrap_or_else(|e| panic!("{}: {e}", cfg_path.display()));
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(&src)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen cannot read {}: {e}", src.display()));
    bindings.write_to_file(&out);
}
