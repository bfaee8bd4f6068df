//! Would a DRAM write buffer (HiNFS's lazy-persistent writes) take the
//! copy off a buffered write's calling thread on this machine?
//!
//! A hardware probe, like the `hw-limit` target: it writes plain memory,
//! not a pool. `direct` streams each 4 KiB write into a random page of a
//! 256 MiB region and fences, as a write's data copy does today. `ring`
//! copies each write into the next slot of a ring of DRAM buffers with
//! ordinary stores, and a second thread (the persister's part) streams
//! every slot to its page and fences every 32 slots (so at least 64 slots);
//! the writer never waits for it unless the ring is full. Prints the writer's time per
//! write. Measured on the AMD VM (docs/BENCHMARKS.md, issue 14, "Fourth
//! pass"): the slot's lines, read by the other core, must be taken back
//! before the writer's next copy into them, which costs as much as the
//! copy it saves unless the ring is far larger than the L2 cache.
//!
//! `cargo run --release -p ferrite-bench --example dram_buffer_probe -- [direct|ring] [SLOTS]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const PAGE: usize = 4096;
const REGION_PAGES: usize = 65_536;
const WRITES: usize = 400_000;
const ROUNDS: u64 = 3;

/// A raw region shared with the persister thread; each side touches only
/// slots the ring's counters hand it.
#[derive(Clone, Copy)]
struct Region(*mut u8);
// SAFETY: the writer fills a slot before publishing it (Release) and the
// persister reads it only after seeing it published (Acquire); the writer
// reuses a slot only after the persister reported it done (Release/Acquire).
unsafe impl Send for Region {}

fn region(len: usize) -> Region {
    let layout = std::alloc::Layout::from_size_align(len, PAGE).expect("layout");
    // SAFETY: the layout has a non-zero size; the memory is written at once
    // (so that no page fault is timed) and never freed (the process ends).
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(!p.is_null(), "out of memory");
    // SAFETY: `p` is valid for `len` bytes.
    unsafe { std::ptr::write_bytes(p, 1, len) };
    Region(p)
}

/// Streams one page, as the persistence layer's AVX2 copy does.
///
/// # Safety
/// `dst` must be valid for 4 KiB of writes and 64-byte aligned, `src`
/// valid for 4 KiB of reads; AVX2 must be present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_page(dst: *mut u8, src: *const u8) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    for i in (0..PAGE).step_by(32) {
        // SAFETY: `i + 32 <= PAGE`, inside both pages; `dst` is aligned.
        unsafe { _mm256_stream_si256(dst.add(i).cast::<__m256i>(), _mm256_loadu_si256(src.add(i).cast())) };
    }
}

#[cfg(target_arch = "x86_64")]
fn fence() {
    // SAFETY: sfence exists on every x86_64 CPU.
    unsafe { std::arch::x86_64::_mm_sfence() }
}

fn next(x: &mut u64) -> usize {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x as usize) % REGION_PAGES
}

#[cfg(target_arch = "x86_64")]
fn main() {
    assert!(std::arch::is_x86_feature_detected!("avx2"), "this probe needs AVX2");
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "ring".into());
    let slots: usize = args.next().map_or(256, |s| s.parse().expect("SLOTS is a number"));
    assert!(slots >= 64, "a ring of fewer than 64 slots cannot hold a fence's worth");
    let pages = region(REGION_PAGES * PAGE);
    let ring = region(slots * PAGE);
    let src = region(PAGE);
    for round in 0..ROUNDS {
        let mut x = 0x2545_F491_4F6C_DD1D ^ round;
        let t0 = Instant::now();
        let mut full_waits = 0u64;
        match mode.as_str() {
            "direct" => {
                for _ in 0..WRITES {
                    let p = next(&mut x);
                    // SAFETY: page `p` is inside the region; AVX2 checked.
                    unsafe { stream_page(pages.0.add(p * PAGE), src.0) };
                    fence();
                }
            }
            "ring" => {
                let published = Arc::new(AtomicU64::new(0));
                let done = Arc::new(AtomicU64::new(0));
                let targets: Arc<Vec<AtomicU64>> = Arc::new((0..slots).map(|_| AtomicU64::new(0)).collect());
                let persister = {
                    let (published, done, targets) = (published.clone(), done.clone(), targets.clone());
                    std::thread::spawn(move || {
                        let (pages, ring) = (pages, ring);
                        let mut c = 0u64;
                        while c < WRITES as u64 {
                            let upto = published.load(Ordering::Acquire);
                            while c < upto {
                                let k = c as usize % slots;
                                let p = targets[k].load(Ordering::Relaxed) as usize;
                                // SAFETY: slot `k` was published and page `p` is in the region.
                                unsafe { stream_page(pages.0.add(p * PAGE), ring.0.add(k * PAGE)) };
                                c += 1;
                                if c.is_multiple_of(32) {
                                    fence();
                                    done.store(c, Ordering::Release);
                                }
                            }
                            std::hint::spin_loop();
                        }
                        fence();
                        done.store(c, Ordering::Release);
                    })
                };
                for i in 0..WRITES as u64 {
                    let p = next(&mut x);
                    if i - done.load(Ordering::Acquire) >= slots as u64 {
                        full_waits += 1;
                        while i - done.load(Ordering::Acquire) >= slots as u64 {
                            std::hint::spin_loop();
                        }
                    }
                    let k = i as usize % slots;
                    // SAFETY: slot `k` is free (the persister is done with it).
                    unsafe { std::ptr::copy_nonoverlapping(src.0, ring.0.add(k * PAGE), PAGE) };
                    targets[k].store(p as u64, Ordering::Relaxed);
                    published.store(i + 1, Ordering::Release);
                }
                let elapsed = t0.elapsed();
                persister.join().expect("persister");
                println!(
                    "ring of {slots} slots: {:.3} us per write on the writer, {full_waits} waits for a full ring",
                    elapsed.as_secs_f64() * 1e6 / WRITES as f64
                );
                continue;
            }
            other => panic!("unknown mode {other}: direct or ring"),
        }
        println!("direct: {:.3} us per write", t0.elapsed().as_secs_f64() * 1e6 / WRITES as f64);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("this probe is for x86_64");
}
