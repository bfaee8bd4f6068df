//! Emulated media latency: extra busy-waiting after flushes and fences, to
//! model persistent memory slower than the DRAM the tests run on (the way
//! HiNFS and SoupFS evaluated their designs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Optional emulated media latency (to model media slower than DRAM).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct EmulatedLatency {
    /// Extra nanoseconds per cache line written back (flushes, and the lines
    /// written by the non-temporal path).
    pub flush_line_ns: u64,
    /// Extra nanoseconds per fence.
    pub fence_ns: u64,
}

/// The latency setting of one pool, changeable while it is in use.
///
/// `on` is the only thing the hot path reads when latency is off, so the cost
/// then is one relaxed load. The two values are separate atomics: a reader
/// racing with `set` may see one old and one new value for one call, which
/// is harmless for an emulation knob.
#[derive(Default)]
pub(crate) struct Latency {
    on: AtomicBool,
    flush_line_ns: AtomicU64,
    fence_ns: AtomicU64,
}

impl Latency {
    pub(crate) fn set(&self, lat: EmulatedLatency) {
        self.flush_line_ns.store(lat.flush_line_ns, Ordering::Relaxed);
        self.fence_ns.store(lat.fence_ns, Ordering::Relaxed);
        self.on.store(lat.flush_line_ns != 0 || lat.fence_ns != 0, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> EmulatedLatency {
        EmulatedLatency {
            flush_line_ns: self.flush_line_ns.load(Ordering::Relaxed),
            fence_ns: self.fence_ns.load(Ordering::Relaxed),
        }
    }

    /// Waits as long as writing back `lines` cache lines is set to cost.
    #[inline]
    pub(crate) fn after_lines(&self, lines: u64) {
        if self.on.load(Ordering::Relaxed) && lines != 0 {
            let per = self.flush_line_ns.load(Ordering::Relaxed);
            spin_for(per.saturating_mul(lines));
        }
    }

    /// Waits as long as a fence is set to cost.
    #[inline]
    pub(crate) fn after_fence(&self) {
        if self.on.load(Ordering::Relaxed) {
            spin_for(self.fence_ns.load(Ordering::Relaxed));
        }
    }
}

/// Busy-waits on the monotonic clock. Sleeping would cost far more than the
/// hundreds of nanoseconds being modelled, and would let the scheduler run
/// something else, which real media latency does not.
#[cold]
fn spin_for(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = Instant::now();
    let d = Duration::from_nanos(ns);
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}
