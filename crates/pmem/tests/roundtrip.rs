//! Proves that what is stored reads back unchanged, through every store path
//! (cached `write`, non-temporal `write_nt`, `fill_nt`, `store_u64`) and with
//! every flush instruction and copy routine this CPU supports, at every head
//! alignment 0..130 and length 0..300 plus 4 KiB and 2 MiB; that bytes
//! around a store are never touched; that bounds are enforced (panics for
//! stores and unchecked reads, `None` for checked reads, never an overflow);
//! and that a pool can be shared between threads.

use ferrite_pmem::{FlushKind, NtKind, Pmem, PoolOffset, CACHE_LINE};
use std::sync::Arc;

/// A deterministic byte pattern that differs for every (seed, index).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every (flush, nt) combination this CPU can run.
fn all_kinds() -> Vec<(FlushKind, NtKind)> {
    let mut v = Vec::new();
    for f in [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush, FlushKind::NoFlush] {
        for n in [NtKind::Avx2, NtKind::Sse2] {
            if f.is_supported() && n.is_supported() {
                v.push((f, n));
            }
        }
    }
    assert!(!v.is_empty());
    v
}

const BASE: u64 = 1024;
const WINDOW: usize = 2048;

/// Sweeps alignments and lengths with one store routine, checking the whole
/// window against a shadow copy after each store. `make` builds the data for
/// a (seed, length).
fn sweep(pool: &Pmem, make: impl Fn(u64, usize) -> Vec<u8>, store: impl Fn(&Pmem, PoolOffset, &[u8])) {
    let mut shadow = vec![0u8; WINDOW];
    pool.read(PoolOffset(BASE), &mut shadow);
    let mut seen = vec![0u8; WINDOW];
    for align in 0..130u64 {
        for len in 0..300usize {
            let data = make(align * 1000 + len as u64 + 1, len);
            let at = BASE + 64 + align;
            store(pool, PoolOffset(at), &data);
            let s = (at - BASE) as usize;
            shadow[s..s + len].copy_from_slice(&data);
            pool.read(PoolOffset(BASE), &mut seen);
            assert!(seen == shadow, "mismatch after a store at alignment {align} length {len}");
        }
    }
}

#[test]
fn write_round_trips_every_alignment_and_length() {
    let pool = Pmem::heap(16 * 1024);
    sweep(&pool, pattern, |p, o, d| p.write(o, d));
}

#[test]
fn write_nt_round_trips_every_alignment_and_length_with_every_instruction() {
    for (f, n) in all_kinds() {
        let pool = Pmem::heap_with_kinds(16 * 1024, f, n);
        assert_eq!((pool.flush_kind(), pool.nt_kind()), (f, n));
        sweep(&pool, pattern, |p, o, d| {
            p.write_nt(o, d);
            p.fence();
        });
    }
}

#[test]
fn fill_nt_round_trips_every_alignment_and_length_with_every_instruction() {
    for (f, n) in all_kinds() {
        let pool = Pmem::heap_with_kinds(16 * 1024, f, n);
        // Uniform data of a byte value that changes with every store, so
        // each fill is distinguishable from the one before it.
        sweep(
            &pool,
            |seed, len| vec![(seed % 251) as u8 + 1; len],
            |p, o, d| {
                p.fill_nt(o, d.len() as u64, d.first().copied().unwrap_or(0));
                p.fence();
            },
        );
    }
}

#[test]
fn fill_nt_writes_exactly_the_range() {
    for (f, n) in all_kinds() {
        let pool = Pmem::heap_with_kinds(8192, f, n);
        pool.fill_nt(PoolOffset(0), 8192, 0xee);
        for align in 0..130u64 {
            for len in (0..300u64).step_by(7) {
                let at = 256 + align;
                pool.fill_nt(PoolOffset(at), len, 0x11);
                pool.fence();
                let img = pool.image();
                for (i, &b) in img.iter().enumerate() {
                    let i = i as u64;
                    let want = if i >= at && i < at + len { 0x11 } else { 0xee };
                    assert_eq!(b, want, "byte {i} after fill at {at} len {len}");
                }
                pool.fill_nt(PoolOffset(at), len, 0xee);
            }
        }
    }
}

#[test]
fn large_writes_round_trip() {
    const MIB2: usize = 2 << 20;
    let pool = Pmem::heap(8 << 20);
    for (i, &(at, len)) in [
        (0u64, 4096usize),
        (4096 * 3, 4096),
        (4096 * 5 + 17, 4096),
        (1 << 20, MIB2),
        ((4 << 20) + 33, MIB2),
        ((6 << 20) - 1, MIB2 - 5),
    ]
    .iter()
    .enumerate()
    {
        let data = pattern(i as u64 + 77, len);
        pool.write_nt(PoolOffset(at), &data);
        pool.fence();
        let mut back = vec![0u8; len];
        pool.read(PoolOffset(at), &mut back);
        assert!(back == data, "write_nt of {len} at {at}");

        let data2 = pattern(i as u64 + 99, len);
        pool.write(PoolOffset(at), &data2);
        pool.persist(PoolOffset(at), len as u64);
        pool.read(PoolOffset(at), &mut back);
        assert!(back == data2, "write of {len} at {at}");
    }
    pool.fill_nt(PoolOffset(1 << 20), MIB2 as u64, 0);
    let mut back = vec![1u8; MIB2];
    pool.read(PoolOffset(1 << 20), &mut back);
    assert!(back.iter().all(|&b| b == 0));
}

#[test]
fn store_u64_and_read_u64() {
    let pool = Pmem::heap(4096);
    for (i, off) in (0..4096u64).step_by(8).enumerate() {
        pool.store_u64(PoolOffset(off), (i as u64) << 32 | 0xabcd);
    }
    pool.persist(PoolOffset(0), 4096);
    for (i, off) in (0..4096u64).step_by(8).enumerate() {
        assert_eq!(pool.read_u64(PoolOffset(off)), (i as u64) << 32 | 0xabcd);
    }
    // The word is stored in native byte order, as a plain read shows.
    pool.store_u64(PoolOffset(64), 0x0102_0304_0506_0708);
    let mut b = [0u8; 8];
    pool.read(PoolOffset(64), &mut b);
    assert_eq!(u64::from_ne_bytes(b), 0x0102_0304_0506_0708);
    pool.write(PoolOffset(128), &7u64.to_ne_bytes());
    assert_eq!(pool.read_u64(PoolOffset(128)), 7);
    assert_eq!(pool.read_u64_checked(PoolOffset(4088)), Some(0xabcd | 511 << 32));
}

/// The streamed commit word: every aligned word of a page, read back at
/// once (the storing thread sees its own streaming stores) and after the
/// fence; a word stored in cache just before it is overwritten, not merged.
#[test]
fn store_u64_nt_and_read_u64() {
    let pool = Pmem::heap(4096);
    for off in (0..4096u64).step_by(8) {
        pool.store_u64(PoolOffset(off), u64::MAX);
        pool.store_u64_nt(PoolOffset(off), off << 8 | 0x5a);
        assert_eq!(pool.read_u64(PoolOffset(off)), off << 8 | 0x5a);
    }
    pool.fence();
    for off in (0..4096u64).step_by(8) {
        assert_eq!(pool.read_u64(PoolOffset(off)), off << 8 | 0x5a);
    }
}

#[test]
fn checked_reads_reject_out_of_bounds_without_panicking() {
    let pool = Pmem::heap(4096);
    let mut b = [0u8; 16];
    assert_eq!(pool.read_checked(PoolOffset(0), &mut b), Some(()));
    assert_eq!(pool.read_checked(PoolOffset(4080), &mut b), Some(()));
    assert_eq!(pool.read_checked(PoolOffset(4081), &mut b), None);
    assert_eq!(pool.read_checked(PoolOffset(4096), &mut b), None);
    assert_eq!(pool.read_checked(PoolOffset(4096), &mut []), Some(()));
    assert_eq!(pool.read_checked(PoolOffset(4097), &mut []), None);
    assert_eq!(pool.read_checked(PoolOffset(u64::MAX), &mut b), None);
    assert_eq!(pool.read_checked(PoolOffset(u64::MAX - 8), &mut b), None);
    assert_eq!(pool.read_checked(PoolOffset(u64::MAX), &mut []), None);

    assert_eq!(pool.read_u64_checked(PoolOffset(4088)), Some(0));
    assert_eq!(pool.read_u64_checked(PoolOffset(4096)), None);
    assert_eq!(pool.read_u64_checked(PoolOffset(4092)), None);
    assert_eq!(pool.read_u64_checked(PoolOffset(3)), None);
    assert_eq!(pool.read_u64_checked(PoolOffset(u64::MAX - 7)), None);
    assert_eq!(pool.read_u64_checked(PoolOffset(u64::MAX - 15)), None);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn write_out_of_bounds_panics() {
    Pmem::heap(4096).write(PoolOffset(4090), &[0u8; 7]);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn write_nt_with_overflowing_offset_panics() {
    Pmem::heap(4096).write_nt(PoolOffset(u64::MAX - 2), &[0u8; 7]);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn fill_nt_out_of_bounds_panics() {
    Pmem::heap(4096).fill_nt(PoolOffset(64), 4096, 0);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn flush_out_of_bounds_panics() {
    Pmem::heap(4096).flush(PoolOffset(4096), 1);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn read_out_of_bounds_panics() {
    Pmem::heap(4096).read(PoolOffset(4095), &mut [0u8; 2]);
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn store_u64_misaligned_panics() {
    Pmem::heap(4096).store_u64(PoolOffset(12), 1);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn store_u64_out_of_bounds_panics() {
    Pmem::heap(4096).store_u64(PoolOffset(4096), 1);
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn store_u64_nt_misaligned_panics() {
    Pmem::heap(4096).store_u64_nt(PoolOffset(20), 1);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn store_u64_nt_out_of_bounds_panics() {
    Pmem::heap(4096).store_u64_nt(PoolOffset(4096), 1);
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn read_u64_misaligned_panics() {
    Pmem::heap(4096).read_u64(PoolOffset(4));
}

#[test]
fn zero_length_operations_at_the_end_are_accepted() {
    let pool = Pmem::heap(4096);
    pool.write(PoolOffset(4096), &[]);
    pool.write_nt(PoolOffset(4096), &[]);
    pool.fill_nt(PoolOffset(4096), 0, 9);
    pool.flush(PoolOffset(4096), 0);
    pool.read(PoolOffset(4096), &mut []);
    assert!(pool.image().iter().all(|&b| b == 0));
}

#[test]
fn heap_pools_are_zeroed_and_from_image_copies() {
    let pool = Pmem::heap(64 * 1024);
    assert_eq!(pool.len(), 64 * 1024);
    assert!(pool.image().iter().all(|&b| b == 0));
    assert_eq!(pool.domain(), ferrite_pmem::PersistenceDomain::Heap);
    assert!(!pool.map_sync());
    assert_eq!(pool.path(), None);

    let img = pattern(5, 8192);
    let copy = Pmem::from_image(&img);
    assert_eq!(copy.len(), 8192);
    assert_eq!(copy.image(), img);
    // The copy is independent of the slice it came from.
    copy.write(PoolOffset(0), &[0; 64]);
    assert_ne!(copy.image(), img);
}

#[test]
fn threads_store_to_disjoint_ranges_of_a_shared_pool() {
    let pool = Arc::new(Pmem::heap(1 << 20));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let base = t * (256 << 10);
                for i in 0..200u64 {
                    let at = base + i * 1000 + (i % 64);
                    let data = pattern(t * 10_000 + i, 700);
                    if i % 2 == 0 {
                        pool.write_nt(PoolOffset(at), &data);
                    } else {
                        pool.write(PoolOffset(at), &data);
                        pool.flush(PoolOffset(at), 700);
                    }
                    pool.store_u64(PoolOffset(base + (255 << 10)), i);
                    pool.fence();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4u64 {
        let base = t * (256 << 10);
        for i in 0..200u64 {
            let at = base + i * 1000 + (i % 64);
            let mut back = vec![0u8; 700];
            pool.read(PoolOffset(at), &mut back);
            // The ranges never overlap: consecutive ones start 1000 + 1 bytes
            // apart and are 700 long.
            assert_eq!(back, pattern(t * 10_000 + i, 700));
        }
        assert_eq!(pool.read_u64(PoolOffset(base + (255 << 10))), 199);
    }
    assert_eq!(CACHE_LINE, 64);
}
