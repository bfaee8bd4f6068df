//! CPU-specific primitives: cache-line write-back, store fence, and
//! non-temporal (streaming) copies, plus the one-time choice of which
//! instruction to use.
//!
//! This module and `mapping` are the only places with `unsafe`. Everything
//! here works on raw pointers that `mapping::Region` has already checked
//! against the bounds of the pool, so the functions taking pointers are
//! `unsafe fn` with their contract written down, and the safe wrappers live
//! in `Region`.

use crate::{FlushKind, NtKind};
use std::sync::OnceLock;

/// The instruction choice for this process: detected from cpuid once, then
/// narrowed by the `FERRITE_FLUSH` / `FERRITE_NT` environment overrides.
#[derive(Clone, Copy, Debug)]
struct Choice {
    flush: FlushKind,
    nt: NtKind,
}

static CHOICE: OnceLock<Choice> = OnceLock::new();

fn choice() -> Choice {
    *CHOICE.get_or_init(|| {
        let flush = pick_flush(std::env::var("FERRITE_FLUSH").ok().as_deref());
        let nt = pick_nt(std::env::var("FERRITE_NT").ok().as_deref());
        Choice { flush, nt }
    })
}

/// The flush instruction every new pool uses (cpuid, then `FERRITE_FLUSH`).
pub fn detected_flush_kind() -> FlushKind {
    choice().flush
}

/// The non-temporal copy routine every new pool uses (cpuid, then `FERRITE_NT`).
pub fn detected_nt_kind() -> NtKind {
    choice().nt
}

/// Applies an override to the detected flush kind. An override naming an
/// instruction this CPU lacks is refused with a warning, because executing
/// it would kill the process with SIGILL at the first flush.
fn pick_flush(env: Option<&str>) -> FlushKind {
    let best = best_flush_kind();
    let Some(name) = env else { return best };
    let wanted = match name.trim().to_ascii_lowercase().as_str() {
        "clwb" => FlushKind::Clwb,
        "clflushopt" => FlushKind::ClflushOpt,
        "clflush" => FlushKind::Clflush,
        "none" | "noflush" => FlushKind::NoFlush,
        "" => return best,
        other => {
            eprintln!(
                "ferrite-pmem: ignoring FERRITE_FLUSH={other:?} (expected clwb, clflushopt, clflush or none); using {best:?}"
            );
            return best;
        }
    };
    if wanted.is_supported() {
        wanted
    } else {
        eprintln!("ferrite-pmem: ignoring FERRITE_FLUSH={name:?}: this CPU does not support it; using {best:?}");
        best
    }
}

/// Applies an override to the detected non-temporal copy routine, refusing
/// (with a warning) one the CPU cannot run, for the same reason as above.
fn pick_nt(env: Option<&str>) -> NtKind {
    let best = best_nt_kind();
    let Some(name) = env else { return best };
    let wanted = match name.trim().to_ascii_lowercase().as_str() {
        "avx2" => NtKind::Avx2,
        "sse2" => NtKind::Sse2,
        "" => return best,
        other => {
            eprintln!("ferrite-pmem: ignoring FERRITE_NT={other:?} (expected avx2 or sse2); using {best:?}");
            return best;
        }
    };
    if wanted.is_supported() {
        wanted
    } else {
        eprintln!("ferrite-pmem: ignoring FERRITE_NT={name:?}: this CPU does not support it; using {best:?}");
        best
    }
}

/// The cheapest write-back this CPU offers: clwb may leave the line cached
/// (some CPUs, this project's Zen 4 among them, evict it anyway), clflushopt
/// always evicts but is weakly ordered, and clflush is the serialising
/// fallback that every x86_64 CPU has.
fn best_flush_kind() -> FlushKind {
    [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush]
        .into_iter()
        .find(|k| k.is_supported())
        .unwrap_or(FlushKind::NoFlush)
}

fn best_nt_kind() -> NtKind {
    if NtKind::Avx2.is_supported() {
        NtKind::Avx2
    } else {
        NtKind::Sse2
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use crate::{FlushKind, NtKind};
    use std::arch::asm;
    use std::arch::x86_64::{
        __cpuid, __cpuid_count, __m128i, __m256i, _mm256_loadu_si256, _mm256_set1_epi8, _mm256_storeu_si256,
        _mm256_stream_si256, _mm_clflush, _mm_loadu_si128, _mm_set1_epi8, _mm_sfence, _mm_storeu_si128,
        _mm_stream_si128, _mm_stream_si64,
    };

    /// cpuid leaf 7 subleaf 0, EBX bit 24.
    const CPUID7_EBX_CLWB: u32 = 1 << 24;
    /// cpuid leaf 7 subleaf 0, EBX bit 23.
    const CPUID7_EBX_CLFLUSHOPT: u32 = 1 << 23;
    /// cpuid leaf 1, EDX bit 19.
    const CPUID1_EDX_CLFLUSH: u32 = 1 << 19;

    #[allow(unused_unsafe)] // `__cpuid*` became safe in recent Rust; older ones need the block.
    pub fn flush_supported(kind: FlushKind) -> bool {
        // SAFETY: cpuid exists on every x86_64 CPU; leaf 0 gives the highest
        // basic leaf, and we only ask for leaves up to it.
        let max_leaf = unsafe { __cpuid(0) }.eax;
        match kind {
            FlushKind::NoFlush => true,
            FlushKind::Clflush => {
                // SAFETY: leaf 1 exists on every x86_64 CPU.
                let edx = unsafe { __cpuid(1) }.edx;
                edx & CPUID1_EDX_CLFLUSH != 0
            }
            FlushKind::Clwb | FlushKind::ClflushOpt => {
                if max_leaf < 7 {
                    return false;
                }
                // SAFETY: leaf 7 is within the supported range checked above.
                let ebx = unsafe { __cpuid_count(7, 0) }.ebx;
                let bit = if kind == FlushKind::Clwb { CPUID7_EBX_CLWB } else { CPUID7_EBX_CLFLUSHOPT };
                ebx & bit != 0
            }
        }
    }

    pub fn nt_supported(kind: NtKind) -> bool {
        match kind {
            NtKind::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            NtKind::Sse2 => std::arch::is_x86_feature_detected!("sse2"),
        }
    }

    /// Writes back the cache line holding `p`.
    ///
    /// # Safety
    /// `p` must point into memory mapped in this process (a flush of an
    /// unmapped address faults), and `kind` must be supported by this CPU
    /// (checked when the pool chose it).
    #[inline(always)]
    pub unsafe fn flush_line(kind: FlushKind, p: *const u8) {
        match kind {
            // SAFETY: the caller guarantees `p` is mapped and that the CPU
            // has clwb; clwb only writes back a line, it changes no memory
            // contents and no flags.
            FlushKind::Clwb => unsafe {
                asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: as for clwb, with clflushopt support guaranteed by the
            // caller.
            FlushKind::ClflushOpt => unsafe {
                asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: clflush is baseline on x86_64 (SSE2); `p` is mapped.
            FlushKind::Clflush => unsafe { _mm_clflush(p) },
            FlushKind::NoFlush => {}
        }
    }

    /// sfence: orders and completes earlier clwb/clflushopt and streaming
    /// stores.
    #[inline(always)]
    #[allow(unused_unsafe)] // `_mm_sfence` is safe in newer Rust (SSE is baseline).
    pub fn sfence() {
        // SAFETY: SSE is part of the x86_64 baseline, so sfence always exists.
        unsafe { _mm_sfence() }
    }

    /// Streams `len` bytes from `src` to `dst` with non-temporal stores.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and 64-byte aligned,
    /// `src` valid for reads of `len` bytes (any alignment), the ranges must
    /// not overlap, `len` must be a multiple of 64, and `kind` supported.
    #[inline]
    pub unsafe fn nt_copy(kind: NtKind, dst: *mut u8, src: *const u8, len: usize) {
        match kind {
            // SAFETY: the caller's contract is exactly this function's, and
            // avx2 support was checked when the pool chose `kind`.
            NtKind::Avx2 => unsafe { nt_copy_avx2(dst, src, len) },
            // SAFETY: as above; SSE2 is baseline on x86_64.
            NtKind::Sse2 => unsafe { nt_copy_sse2(dst, src, len) },
        }
    }

    /// Streams `len` copies of `byte` to `dst` with non-temporal stores.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and 64-byte aligned,
    /// `len` a multiple of 64, and `kind` supported.
    #[inline]
    pub unsafe fn nt_fill(kind: NtKind, dst: *mut u8, byte: u8, len: usize) {
        match kind {
            // SAFETY: the caller's contract is this function's; avx2 checked.
            NtKind::Avx2 => unsafe { nt_fill_avx2(dst, byte, len) },
            // SAFETY: as above; SSE2 is baseline.
            NtKind::Sse2 => unsafe { nt_fill_sse2(dst, byte, len) },
        }
    }

    /// Stores `value` at `dst` with one 8-byte streaming store (movnti).
    ///
    /// # Safety
    /// `dst` must be valid for an 8-byte write and 8-byte aligned, and no
    /// other thread may access those bytes except through atomics.
    #[inline(always)]
    pub unsafe fn nt_store_u64(dst: *mut u64, value: u64) {
        // SAFETY: the caller guarantees `dst` is valid and aligned; movnti is
        // SSE2, part of the x86_64 baseline. An aligned 8-byte store is one
        // access, so a concurrent atomic load sees the old or the new value.
        unsafe { _mm_stream_si64(dst.cast::<i64>(), value as i64) }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn nt_copy_avx2(dst: *mut u8, src: *const u8, len: usize) {
        let mut i = 0;
        while i < len {
            // SAFETY: `i + 64 <= len` because len is a multiple of 64, so both
            // 32-byte halves are inside the caller's ranges; loads are
            // unaligned (loadu) and stores aligned because `dst` is 64-aligned.
            unsafe {
                let a = _mm256_loadu_si256(src.add(i).cast::<__m256i>());
                let b = _mm256_loadu_si256(src.add(i + 32).cast::<__m256i>());
                _mm256_stream_si256(dst.add(i).cast::<__m256i>(), a);
                _mm256_stream_si256(dst.add(i + 32).cast::<__m256i>(), b);
            }
            i += 64;
        }
    }

    /// Copies `len` bytes from `src` to `dst` through vector registers,
    /// 128 bytes a round with unaligned loads and stores, the last
    /// `len % 128` bytes by `memcpy` (too few for it to use `rep movsb`).
    ///
    /// # Safety
    /// `dst` valid for writes of `len` bytes, `src` for reads of `len`
    /// bytes, no overlap.
    #[inline]
    pub unsafe fn copy_vectors(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller's contract, and AVX2 only where the CPU has it
        // (the same check that lets a pool choose the AVX2 streaming copy).
        unsafe { copy_vectors_using(nt_supported(NtKind::Avx2), dst, src, len) }
    }

    /// `copy_vectors` with the instruction set chosen by the caller (the
    /// test runs the SSE2 loop on CPUs that have AVX2 too).
    ///
    /// # Safety
    /// As `copy_vectors`, and `avx2` only if the CPU has AVX2.
    pub unsafe fn copy_vectors_using(avx2: bool, dst: *mut u8, src: *const u8, len: usize) {
        let whole = len - len % 128;
        if avx2 {
            // SAFETY: the caller's ranges hold `whole <= len` bytes; the
            // caller says the CPU has AVX2.
            unsafe { copy_vectors_avx2(dst, src, whole) }
        } else {
            // SAFETY: as above; SSE2 is baseline on x86_64.
            unsafe { copy_vectors_sse2(dst, src, whole) }
        }
        // SAFETY: the rest of the caller's ranges, `len - whole` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.add(whole), dst.add(whole), len - whole) }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn copy_vectors_avx2(dst: *mut u8, src: *const u8, len: usize) {
        let mut i = 0;
        while i < len {
            // SAFETY: `len` is a multiple of 128, so `i + 128 <= len` and
            // the four 32-byte pieces lie inside the caller's ranges; loads
            // and stores are both unaligned (loadu/storeu).
            unsafe {
                let a = _mm256_loadu_si256(src.add(i).cast::<__m256i>());
                let b = _mm256_loadu_si256(src.add(i + 32).cast::<__m256i>());
                let c = _mm256_loadu_si256(src.add(i + 64).cast::<__m256i>());
                let d = _mm256_loadu_si256(src.add(i + 96).cast::<__m256i>());
                _mm256_storeu_si256(dst.add(i).cast::<__m256i>(), a);
                _mm256_storeu_si256(dst.add(i + 32).cast::<__m256i>(), b);
                _mm256_storeu_si256(dst.add(i + 64).cast::<__m256i>(), c);
                _mm256_storeu_si256(dst.add(i + 96).cast::<__m256i>(), d);
            }
            i += 128;
        }
    }

    #[target_feature(enable = "sse2")]
    unsafe fn copy_vectors_sse2(dst: *mut u8, src: *const u8, len: usize) {
        let mut i = 0;
        while i < len {
            // SAFETY: as in `copy_vectors_avx2`, with eight 16-byte pieces.
            unsafe {
                for k in 0..8 {
                    let v = _mm_loadu_si128(src.add(i + 16 * k).cast::<__m128i>());
                    _mm_storeu_si128(dst.add(i + 16 * k).cast::<__m128i>(), v);
                }
            }
            i += 128;
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn nt_fill_avx2(dst: *mut u8, byte: u8, len: usize) {
        let v = _mm256_set1_epi8(byte as i8);
        let mut i = 0;
        while i < len {
            // SAFETY: as in `nt_copy_avx2`: in bounds and 32-aligned.
            unsafe {
                _mm256_stream_si256(dst.add(i).cast::<__m256i>(), v);
                _mm256_stream_si256(dst.add(i + 32).cast::<__m256i>(), v);
            }
            i += 64;
        }
    }

    #[target_feature(enable = "sse2")]
    unsafe fn nt_copy_sse2(dst: *mut u8, src: *const u8, len: usize) {
        let mut i = 0;
        while i < len {
            // SAFETY: `i + 64 <= len`, so the four 16-byte pieces are inside
            // the caller's ranges; loads unaligned, stores 16-aligned.
            unsafe {
                let a = _mm_loadu_si128(src.add(i).cast::<__m128i>());
                let b = _mm_loadu_si128(src.add(i + 16).cast::<__m128i>());
                let c = _mm_loadu_si128(src.add(i + 32).cast::<__m128i>());
                let d = _mm_loadu_si128(src.add(i + 48).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), a);
                _mm_stream_si128(dst.add(i + 16).cast::<__m128i>(), b);
                _mm_stream_si128(dst.add(i + 32).cast::<__m128i>(), c);
                _mm_stream_si128(dst.add(i + 48).cast::<__m128i>(), d);
            }
            i += 64;
        }
    }

    #[target_feature(enable = "sse2")]
    unsafe fn nt_fill_sse2(dst: *mut u8, byte: u8, len: usize) {
        let v = _mm_set1_epi8(byte as i8);
        let mut i = 0;
        while i < len {
            // SAFETY: as in `nt_copy_sse2`.
            unsafe {
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                _mm_stream_si128(dst.add(i + 16).cast::<__m128i>(), v);
                _mm_stream_si128(dst.add(i + 32).cast::<__m128i>(), v);
                _mm_stream_si128(dst.add(i + 48).cast::<__m128i>(), v);
            }
            i += 64;
        }
    }
}

/// Portable fallback for other architectures: no flush instruction is
/// emitted (the pool reports `FlushKind::NoFlush`), a sequentially consistent
/// fence stands in for sfence, and the "non-temporal" copy is a plain copy.
/// This keeps the crate building and testable everywhere; real persistent
/// memory on such machines would need its own flush instruction here.
#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use crate::{FlushKind, NtKind};

    pub fn flush_supported(kind: FlushKind) -> bool {
        kind == FlushKind::NoFlush
    }

    pub fn nt_supported(_kind: NtKind) -> bool {
        // Both routines fall back to the same plain copy, so either name runs.
        true
    }

    /// # Safety
    /// Nothing is dereferenced; the contract matches the x86_64 version.
    #[inline(always)]
    pub unsafe fn flush_line(_kind: FlushKind, _p: *const u8) {}

    #[inline(always)]
    pub fn sfence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// # Safety
    /// `dst` valid for `len` writes, `src` for `len` reads, no overlap.
    #[inline]
    pub unsafe fn nt_copy(_kind: NtKind, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }

    /// # Safety
    /// `dst` valid for `len` writes, `src` for `len` reads, no overlap.
    #[inline]
    pub unsafe fn copy_vectors(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }

    /// # Safety
    /// `dst` valid for `len` writes.
    #[inline]
    pub unsafe fn nt_fill(_kind: NtKind, dst: *mut u8, byte: u8, len: usize) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::ptr::write_bytes(dst, byte, len) }
    }

    /// # Safety
    /// `dst` valid for an 8-byte write and 8-byte aligned.
    #[inline]
    pub unsafe fn nt_store_u64(dst: *mut u64, value: u64) {
        // SAFETY: forwarded from the caller's contract; an atomic store, as
        // `store_u64` does, keeps concurrent atomic loads of the word sound.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(dst) }.store(value, std::sync::atomic::Ordering::Release)
    }
}

pub(crate) use imp::{flush_line, nt_copy, nt_fill, nt_store_u64, sfence};

/// Copies of at least this many bytes whose destination lies a little past
/// the source modulo 4 KiB are made by `copy` with vector loads and stores
/// instead of `memcpy`. Below it glibc's `memcpy` copies with vector moves
/// itself (on the AMD EPYC Zen 3 guest of docs/BENCHMARKS.md, 2,112 bytes
/// still did and 3,072 already went to `rep movsb`).
pub const SHORT_DISTANCE_COPY_MIN: usize = 2048;

/// Destination minus source, modulo 4 KiB, below which (and above zero) a
/// copy is a *short-distance* one. `rep movsb`, which glibc's `memcpy` uses
/// for copies of a few KiB and up, runs such a copy an order of magnitude
/// slower on that host: a 4 KiB copy took 1.6-2.4 µs at distances 1-16
/// against 0.14-0.21 µs at 0 and at 32 and beyond. A buffer from `malloc`
/// that glibc maps for itself (128 KiB and up) starts 16 bytes into a page,
/// and pool pages start at page boundaries, so reading a page into such a
/// buffer is exactly that case. The kernel's own copy to user space has it
/// too (a 4 KiB `pread` from tmpfs into such a buffer: 2.9-3.1 µs against
/// 0.95-1.0 µs).
pub const SHORT_DISTANCE_BYTES: usize = 64;

/// Whether a copy of `len` bytes from `src` to `dst` is one that `memcpy`
/// would make slowly (see `SHORT_DISTANCE_BYTES`).
#[inline]
pub fn short_distance(dst: usize, src: usize, len: usize) -> bool {
    let distance = dst.wrapping_sub(src) % 4096;
    len >= SHORT_DISTANCE_COPY_MIN && distance != 0 && distance < SHORT_DISTANCE_BYTES
}

/// Copies `len` bytes from `src` to `dst` with ordinary (cached) loads and
/// stores: `memcpy`, except for a short-distance copy, which goes through
/// vector registers in a loop (`imp::copy_vectors`).
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes, `src` valid for reads of
/// `len` bytes, and the two ranges must not overlap.
#[inline]
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    if short_distance(dst as usize, src as usize, len) {
        // SAFETY: the caller's contract is `copy_vectors`'s.
        unsafe { imp::copy_vectors(dst, src, len) }
    } else {
        // SAFETY: the caller's contract is `copy_nonoverlapping`'s.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

impl FlushKind {
    /// Whether this CPU can execute the instruction (`NoFlush` always can).
    pub fn is_supported(self) -> bool {
        imp::flush_supported(self)
    }
}

impl NtKind {
    /// Whether this CPU can run the copy routine.
    pub fn is_supported(self) -> bool {
        imp::nt_supported(self)
    }
}

/// The coarse real-time clock (CLOCK_REALTIME_COARSE) in nanoseconds since
/// the Unix epoch: what Linux file systems stamp files with, read without a
/// system call in a few nanoseconds, at the kernel tick's resolution
/// (1–4 ms). Falls back to the precise clock where it is missing.
pub fn coarse_realtime_ns() -> i64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes only into `ts`, which we own.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
            // time_t and c_long are i64 on 64-bit Linux and narrower elsewhere.
            #[allow(clippy::useless_conversion)]
            return i64::from(ts.tv_sec).saturating_mul(1_000_000_000).saturating_add(i64::from(ts.tv_nsec));
        }
    }
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_nanos().min(i64::MAX as u128) as i64
}

#[cfg(test)]
mod tests {
    // Proves the environment overrides are parsed, and that an override
    // naming something unknown falls back to the detected choice; and that
    // `copy` copies exactly the bytes asked for, by whichever path it
    // takes, at every distance and length around its thresholds.
    use super::*;

    /// `dst` holds `want` at `at` and the fill byte everywhere else.
    fn check(dst: &[u8], at: usize, want: &[u8], distance: usize) {
        let len = want.len();
        assert_eq!(&dst[at..at + len], want, "distance {distance}, length {len}");
        assert!(dst[..at].iter().all(|&b| b == 0xEE), "a byte before the copy changed");
        assert!(dst[at + len..].iter().all(|&b| b == 0xEE), "a byte after the copy changed");
    }

    #[test]
    fn copy_is_exact_at_every_distance_and_length() {
        const PAGE: usize = 4096;
        let src_buf: Vec<u8> = (0..4 * PAGE + 512).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst_buf = vec![0u8; 6 * PAGE];
        let src_page = PAGE - (src_buf.as_ptr() as usize) % PAGE;
        let dst_page = PAGE - (dst_buf.as_ptr() as usize) % PAGE;
        let lens = [0, 1, 127, 128, 129, 2047, 2048, 2049, 2175, 3000, 4096, 4097, 3 * PAGE + 200];
        let mut vector_copies = 0;
        for src_skew in [0usize, 8, 100] {
            for distance in (0..=70).chain([100, 2048, 4000, 4090, 4095]) {
                for &len in &lens {
                    let s = src_page + src_skew;
                    let d = dst_page + (src_skew + distance) % PAGE;
                    dst_buf.fill(0xEE);
                    let (dp, sp) = (dst_buf[d..].as_mut_ptr(), src_buf[s..].as_ptr());
                    vector_copies += short_distance(dp as usize, sp as usize, len) as usize;
                    // SAFETY: both ranges lie inside their own vectors (the
                    // largest length plus the largest offsets fit), which
                    // do not overlap.
                    unsafe { copy(dp, sp, len) };
                    check(&dst_buf, d, &src_buf[s..s + len], distance);
                    // The SSE2 loop, which `copy` takes only on CPUs
                    // without AVX2, on the same ranges.
                    #[cfg(target_arch = "x86_64")]
                    {
                        dst_buf.fill(0xEE);
                        let (dp, sp) = (dst_buf[d..].as_mut_ptr(), src_buf[s..].as_ptr());
                        // SAFETY: as above; SSE2 is baseline on x86_64.
                        unsafe { imp::copy_vectors_using(false, dp, sp, len) };
                        check(&dst_buf, d, &src_buf[s..s + len], distance);
                    }
                }
            }
        }
        // Distances 1-63 at the lengths from 2048 up take the vector path.
        assert_eq!(vector_copies, 3 * 63 * lens.iter().filter(|&&l| l >= SHORT_DISTANCE_COPY_MIN).count());
    }

    #[test]
    fn overrides_parse_and_unknown_falls_back() {
        assert_eq!(pick_flush(Some("none")), FlushKind::NoFlush);
        assert_eq!(pick_flush(Some("NONE")), FlushKind::NoFlush);
        assert_eq!(pick_flush(Some("bogus")), best_flush_kind());
        assert_eq!(pick_flush(None), best_flush_kind());
        assert_eq!(pick_nt(Some("bogus")), best_nt_kind());
        assert_eq!(pick_nt(None), best_nt_kind());
        if FlushKind::Clflush.is_supported() {
            assert_eq!(pick_flush(Some("clflush")), FlushKind::Clflush);
        }
        if NtKind::Sse2.is_supported() {
            assert_eq!(pick_nt(Some("sse2")), NtKind::Sse2);
        }
    }
}
