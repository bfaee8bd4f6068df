//! Proves the FERRITE_FLUSH / FERRITE_NT environment overrides select the
//! fallback instructions for every pool of the process. This file holds a
//! single test because the choice is made once per process, at the first
//! pool, and must see the variables set before it.

use ferrite_pmem::{detected_flush_kind, detected_nt_kind, FlushKind, NtKind, Pmem, PoolOffset};

#[test]
fn environment_overrides_select_the_fallbacks() {
    std::env::set_var("FERRITE_FLUSH", "clflush");
    std::env::set_var("FERRITE_NT", "sse2");
    let pool = Pmem::heap(8192);
    let flush = if FlushKind::Clflush.is_supported() {
        FlushKind::Clflush
    } else {
        // Not x86_64: only NoFlush exists, and the override is refused.
        FlushKind::NoFlush
    };
    assert_eq!(pool.flush_kind(), flush);
    assert_eq!(pool.nt_kind(), NtKind::Sse2);
    assert_eq!(detected_flush_kind(), flush);
    assert_eq!(detected_nt_kind(), NtKind::Sse2);

    // The fallbacks work.
    let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    pool.write_nt(PoolOffset(7), &data);
    pool.persist(PoolOffset(7), 1000);
    let mut back = vec![0u8; 1000];
    pool.read(PoolOffset(7), &mut back);
    assert_eq!(back, data);

    // Read once: changing the variables later changes nothing.
    std::env::set_var("FERRITE_FLUSH", "none");
    assert_eq!(Pmem::heap(4096).flush_kind(), flush);
}
