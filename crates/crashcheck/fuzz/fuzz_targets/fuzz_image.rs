//! Decoding, checking and mounting arbitrary or mutated pool images: errors
//! only, never a panic, an out-of-bounds access or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrite_crashcheck::tune_allocator();
    ferrite_crashcheck::fuzz::fuzz_image(data);
});
