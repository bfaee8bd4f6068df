//! Proves the recording backend: each call is recorded exactly as specified
//! (a cached write is one Store, an unaligned non-temporal write is Store +
//! Flush for the head, NtStore for the whole lines, Store + Flush for the
//! tail, and so on); zero-length calls and calls while not recording leave
//! no events; take/stop behave; and replaying the Store/NtStore/Commit events
//! onto the image the recording started from reproduces `image()`, also for
//! a random workload and for threads racing on overlapping bytes (the trace
//! order is the store order). A prefetch is no event and changes no byte.

use ferrite_pmem::{replay_stores, Event, Pmem, PoolOffset};
use std::sync::Arc;

fn store(offset: u64, data: &[u8]) -> Event {
    Event::Store { offset, data: data.to_vec() }
}

fn nt(offset: u64, data: &[u8]) -> Event {
    Event::NtStore { offset, data: data.to_vec() }
}

fn flush(offset: u64, len: u64) -> Event {
    Event::Flush { offset, len }
}

#[test]
fn events_are_exactly_as_specified() {
    let start: Vec<u8> = (0..16384u32).map(|i| (i * 7) as u8).collect();
    let pool = Pmem::recording_from_image(&start);
    assert!(pool.is_recording());

    pool.write(PoolOffset(100), &[1; 10]);
    pool.flush(PoolOffset(100), 10);
    pool.fence();
    pool.store_u64(PoolOffset(4096), 7);
    pool.persist(PoolOffset(4096), 8);
    pool.store_u64_nt(PoolOffset(4104), 11);
    pool.fence();
    pool.mark(42);

    // Unaligned non-temporal write: head 1000..1024, lines 1024..1280, tail
    // 1280..1300.
    let data: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    pool.write_nt(PoolOffset(1000), &data);
    // Inside one line, and across a line boundary without a whole line:
    // one cached store and one flush each.
    pool.write_nt(PoolOffset(2050), &[5; 10]);
    pool.write_nt(PoolOffset(3060), &[6; 40]);
    // Aligned start, partial tail; partial head, aligned end; fully aligned.
    pool.write_nt(PoolOffset(4160), &[8; 70]);
    pool.write_nt(PoolOffset(5000), &[9; 120]);
    pool.write_nt(PoolOffset(6144), &[10; 128]);
    pool.fill_nt(PoolOffset(8190), 200, 0);
    pool.fence();
    // Zero-length calls record nothing.
    pool.write(PoolOffset(0), &[]);
    pool.write_nt(PoolOffset(0), &[]);
    pool.fill_nt(PoolOffset(0), 0, 1);
    pool.flush(PoolOffset(0), 0);

    let events = pool.take_events();
    let expected = vec![
        store(100, &[1; 10]),
        flush(100, 10),
        Event::Fence,
        Event::Commit { offset: 4096, value: 7 },
        flush(4096, 8),
        Event::Fence,
        Event::NtCommit { offset: 4104, value: 11 },
        Event::Fence,
        Event::Mark { label: 42 },
        store(1000, &data[..24]),
        flush(1000, 24),
        nt(1024, &data[24..280]),
        store(1280, &data[280..]),
        flush(1280, 20),
        store(2050, &[5; 10]),
        flush(2050, 10),
        store(3060, &[6; 40]),
        flush(3060, 40),
        nt(4160, &[8; 64]),
        store(4224, &[8; 6]),
        flush(4224, 6),
        store(5000, &[9; 56]),
        flush(5000, 56),
        nt(5056, &[9; 64]),
        nt(6144, &[10; 128]),
        store(8190, &[0; 2]),
        flush(8190, 2),
        nt(8192, &[0; 192]),
        store(8384, &[0; 6]),
        flush(8384, 6),
        Event::Fence,
    ];
    assert_eq!(events.len(), expected.len(), "{events:#?}");
    for (i, (got, want)) in events.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "event {i}");
    }

    let mut replayed = start.clone();
    replay_stores(&mut replayed, &events);
    assert_eq!(replayed, pool.image());

    // Recording continues after take_events; stop returns the rest.
    pool.store_u64(PoolOffset(0), 1);
    assert!(pool.is_recording());
    assert_eq!(pool.stop_recording(), vec![Event::Commit { offset: 0, value: 1 }]);
    assert!(!pool.is_recording());
    pool.write(PoolOffset(0), &[1]);
    pool.mark(1);
    pool.fence();
    assert!(pool.take_events().is_empty());
    assert!(pool.stop_recording().is_empty());
}

#[test]
fn recording_started_late_keeps_only_later_events() {
    let pool = Pmem::heap(8192);
    assert!(!pool.is_recording());
    pool.write(PoolOffset(0), &[1; 100]);
    pool.mark(5);
    pool.start_recording();
    let start = pool.image();
    pool.write_nt(PoolOffset(10), &[2; 500]);
    pool.start_recording(); // already recording: nothing is lost
    pool.store_u64(PoolOffset(512), 3);
    let events = pool.stop_recording();
    assert!(matches!(events[0], Event::Store { offset: 10, .. }));
    assert!(matches!(events.last(), Some(Event::Commit { offset: 512, value: 3 })));
    let mut replayed = start;
    replay_stores(&mut replayed, &events);
    assert_eq!(replayed, pool.image());
}

/// A prefetch is a hint to the cache: the crash harness must see nothing of
/// it, and the pool's bytes stay as they were. Outside the pool it panics,
/// as a read there does (a bug in the caller).
#[test]
fn a_prefetch_records_nothing_and_changes_nothing() {
    let start: Vec<u8> = (0..8192u32).map(|i| (i * 13) as u8).collect();
    let pool = Pmem::recording_from_image(&start);
    for offset in [0, 8, 63, 64, 4095, 8191] {
        pool.prefetch(PoolOffset(offset));
    }
    assert!(pool.take_events().is_empty());
    assert_eq!(pool.image(), start);
    let outside = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.prefetch(PoolOffset(8192))));
    assert!(outside.is_err(), "a prefetch past the pool's end must panic");
}

/// xorshift64*, so the workload is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn replaying_a_random_workload_reproduces_the_image() {
    const LEN: u64 = 64 * 1024;
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let start: Vec<u8> = (0..LEN).map(|_| rng.next() as u8).collect();
    let pool = Pmem::recording_from_image(&start);
    for _ in 0..3000 {
        let len = rng.below(3000);
        let at = rng.below(LEN - len);
        match rng.below(7) {
            0 => {
                let d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                pool.write(PoolOffset(at), &d);
            }
            1 => {
                let d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                pool.write_nt(PoolOffset(at), &d);
            }
            2 => pool.fill_nt(PoolOffset(at), len, rng.next() as u8),
            3 => pool.store_u64(PoolOffset(rng.below(LEN / 8) * 8), rng.next()),
            4 => pool.flush(PoolOffset(at), len),
            5 => pool.fence(),
            _ => pool.mark(rng.next()),
        }
    }
    let events = pool.stop_recording();
    let mut replayed = start;
    replay_stores(&mut replayed, &events);
    assert!(replayed == pool.image());
}

#[test]
fn concurrent_overlapping_stores_are_recorded_in_store_order() {
    const LEN: u64 = 16 * 1024;
    let pool = Arc::new(Pmem::recording_from_image(&vec![0u8; LEN as usize]));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let mut rng = Rng(t * 7919 + 1);
                for i in 0..2000u64 {
                    let len = rng.below(300);
                    let at = rng.below(LEN - len);
                    let byte = (t * 64 + i % 64) as u8;
                    match i % 4 {
                        0 => pool.write(PoolOffset(at), &vec![byte; len as usize]),
                        1 => pool.write_nt(PoolOffset(at), &vec![byte; len as usize]),
                        2 => pool.fill_nt(PoolOffset(at), len, byte),
                        _ => pool.store_u64(PoolOffset(rng.below(LEN / 8) * 8), i),
                    }
                    if i % 16 == 0 {
                        pool.fence();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let events = pool.stop_recording();
    let mut replayed = vec![0u8; LEN as usize];
    replay_stores(&mut replayed, &events);
    assert!(replayed == pool.image());
}
