//! Random operation sequences with crash injection, against the model.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrite_crashcheck::tune_allocator();
    ferrite_crashcheck::fuzz::fuzz_ops(data);
});
