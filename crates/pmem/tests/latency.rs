//! Proves emulated latency: with a fence cost set, fences take at least that
//! long; with a per-line cost set, flushes and non-temporal writes take at
//! least that cost times the lines they write back; and the setting reads
//! back and turns off when set to zero. Only lower bounds are asserted, so a
//! slow or busy machine cannot make these tests fail.

use ferrite_pmem::{EmulatedLatency, FlushKind, Pmem, PoolOffset};
use std::time::{Duration, Instant};

#[test]
fn fences_take_at_least_the_configured_time() {
    let pool = Pmem::heap(4096);
    assert_eq!(pool.emulated_latency(), EmulatedLatency::default());
    let lat = EmulatedLatency { flush_line_ns: 0, fence_ns: 2_000_000 };
    pool.set_emulated_latency(lat);
    assert_eq!(pool.emulated_latency(), lat);
    let t = Instant::now();
    for _ in 0..5 {
        pool.fence();
    }
    assert!(t.elapsed() >= Duration::from_millis(10));

    // persist = flush + fence, so it pays the fence too.
    let t = Instant::now();
    pool.persist(PoolOffset(0), 64);
    assert!(t.elapsed() >= Duration::from_millis(2));

    pool.set_emulated_latency(EmulatedLatency::default());
    assert_eq!(pool.emulated_latency(), EmulatedLatency::default());
}

#[test]
fn flushed_and_streamed_lines_take_at_least_the_configured_time() {
    let pool = Pmem::heap(1 << 20);
    pool.set_emulated_latency(EmulatedLatency { flush_line_ns: 20_000, fence_ns: 0 });
    // 4096 bytes streamed: 64 lines, so at least 1.28 ms.
    let t = Instant::now();
    pool.write_nt(PoolOffset(0), &[1u8; 4096]);
    assert!(t.elapsed() >= Duration::from_micros(1280));

    // Unaligned: 63 streamed lines, plus the flushed head and tail lines
    // unless there is no flush instruction (which writes nothing back, so
    // costs nothing).
    let flushed = if pool.flush_kind() == FlushKind::NoFlush { 0 } else { 2 };
    let t = Instant::now();
    pool.fill_nt(PoolOffset(8192 + 10), 4096, 3);
    assert!(t.elapsed() >= Duration::from_micros((63 + flushed) * 20));

    if pool.flush_kind() != FlushKind::NoFlush {
        // A flush of 100 bytes starting mid-line covers 3 lines.
        let t = Instant::now();
        pool.flush(PoolOffset(60), 100);
        assert!(t.elapsed() >= Duration::from_micros(60));
    }
}
