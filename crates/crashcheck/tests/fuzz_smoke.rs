//! The fuzz targets (`ferrite_crashcheck::fuzz`) over a fixed corpus and a
//! number of seeded random inputs, so that CI runs them without nightly
//! Rust or cargo-fuzz (see docs/TESTING.md for the long cargo-fuzz runs).
//!
//! `CRASHCHECK_FUZZ_N` sets the number of random inputs per target
//! (defaults below), `CRASHCHECK_FUZZ_SEED` their seed.

use ferrite_crashcheck::fuzz::{check_ops, fuzz_image};
use ferrite_crashcheck::hash::mix;
use ferrite_crashcheck::quiet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn n(default: usize) -> usize {
    std::env::var("CRASHCHECK_FUZZ_N").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("CRASHCHECK_FUZZ_SEED")
        .ok()
        .and_then(|s| ferrite_crashcheck::workload::parse_u64(&s))
        .unwrap_or(0xF022)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Inputs for the image target: patches aimed at every metadata structure
/// (superblocks, journal, inode slots, log page headers and entries), bit
/// flips, and raw images.
fn image_inputs() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![vec![], vec![0], vec![1], vec![1, 0xFF, 0xFF]];
    // One patch record: selector, offset (16 bits, scaled), length, bytes.
    let patch = |sel: u8, off: u16, bytes: &[u8]| -> Vec<u8> {
        let mut r = vec![0u8, sel, (off >> 8) as u8, off as u8, (bytes.len() - 1) as u8];
        r.extend_from_slice(bytes);
        r
    };
    // Offsets (in 1/65536 of the first 24 pages) across the metadata.
    for page in 0..24u64 {
        for within in [0u64, 8, 16, 24, 32, 60, 64, 72, 120, 128, 136, 252] {
            let off = ((page * 4096 + within) * 65536 / (24 * 4096)) as u16;
            v.push(patch(0x00, off, &[0xFF; 8]));
            v.push(patch(0x40, off, &[0x01]));
            v.push(patch(0x00, off, &[0x00; 8]));
        }
    }
    v
}

#[test]
fn fuzz_image_corpus_and_random_inputs() {
    let mut inputs = image_inputs();
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed()));
    for _ in 0..n(2000) {
        let len = rng.gen_range(1..200);
        let mut d: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        // Mostly patches of a valid image, some raw images.
        if rng.gen_bool(0.85) {
            d[0] &= !1;
        } else {
            d[0] |= 1;
        }
        inputs.push(d);
    }
    let total = inputs.len();
    let mut failures = Vec::new();
    for d in &inputs {
        if let Err(m) = quiet::catch(|| fuzz_image(d)) {
            failures.push(format!("input {}: {m}", hex(d)));
        }
    }
    ferrite_crashcheck::harness::say(&format!("fuzz_image: {total} inputs, {} failures", failures.len()));
    assert!(failures.is_empty(), "{}", failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n"));
}

#[test]
fn fuzz_ops_corpus_and_random_inputs() {
    // A corpus: every start image with a few hand-picked sequences.
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for start in 0..4u8 {
        inputs.push(vec![start, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0x10, 0, 12, 3, 0, 0x11]);
        inputs.push(vec![start, 12, 0, 5, 1, 0, 9, 0, 13, 0, 0, 7, 0, 1, 0x30, 0]);
        inputs.push(vec![start, 14, 0, 12, 0x0B, 0xB8, 11, 0, 0, 0, 0, 13, 5, 9, 0, 0]);
        // The file set's files fsync-atomic: open /foo, small writes, a
        // page write, fsync; a new fsync-atomic file written, sync; a
        // write through an O_SYNC descriptor; a mode change and a rename.
        let a = start | 4;
        inputs.push(vec![a, 19, 0, 0, 0, 0, 2, 0, 1, 0, 0x64, 2, 0, 0, 0x10, 0x20, 3, 0, 2, 0, 0, 18, 0, 0, 0, 0]);
        inputs.push(vec![a, 23, 0, 0, 0, 0, 0, 1, 10, 0, 2, 2, 1, 1, 0, 9, 22, 0, 0, 0, 0, 4, 1, 0, 0, 0x30]);
        inputs.push(vec![a, 0, 2, 6, 0, 0x20, 2, 2, 0, 0, 7, 21, 2, 0, 0, 0, 12, 0, 5, 0, 0, 20, 2, 0, 0, 0]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed() ^ 0x0b5));
    for _ in 0..n(120) {
        let len = rng.gen_range(6..40);
        inputs.push((0..len).map(|_| rng.gen()).collect());
    }
    let total = inputs.len();
    let mut failures = Vec::new();
    for d in &inputs {
        match quiet::catch(|| check_ops(d)) {
            Ok(Ok(())) => {}
            Ok(Err(m)) => failures.push(format!("input {}: {m}", hex(d))),
            Err(p) => failures.push(format!("input {}: {p}", hex(d))),
        }
    }
    ferrite_crashcheck::harness::say(&format!("fuzz_ops: {total} inputs, {} failures", failures.len()));
    assert!(
        failures.is_empty(),
        "{} of {total} inputs failed (replay one: write the hex to a file and run `cargo run -p ferrite-crashcheck -- fuzz-input ops FILE`):\n{}",
        failures.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}
