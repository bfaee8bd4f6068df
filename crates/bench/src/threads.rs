//! Threads that a workload runs side by side (the two-thread fio
//! workloads, the filebench personalities, `scaling-2t`): each on a new
//! thread, pinned to a CPU of its own when there are enough, all started
//! together by a barrier that spins before it yields.
//!
//! Why (measured with `scaling-2t`, docs/BENCHMARKS.md, issue 14, "Sixth
//! pass"): on these 2-vCPU VMs the scheduler often put two new threads on
//! one vCPU and left the second waiting for up to a time slice, and a
//! barrier that parks its waiters cost a wake-up of an idle vCPU of the
//! same order, so two-thread figures measured the scheduler as much as the
//! file system. The same placement applies to every target.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Run every job at once, each on a new thread (pinned to a CPU of its own
/// when the allowed CPUs suffice; `--cpu` leaves one, and then nothing is
/// pinned apart), released together by a `SpinBarrier`. Returns each job's
/// result, in order; the first error if any failed.
pub(crate) fn run_together<R, F>(jobs: Vec<F>) -> io::Result<Vec<R>>
where
    R: Send,
    F: FnOnce() -> io::Result<R> + Send,
{
    let allowed = allowed_cpus()?;
    let pinned = allowed.len() >= jobs.len();
    let barrier = SpinBarrier::new(jobs.len());
    let results: Vec<io::Result<R>> = std::thread::scope(|s| {
        let hs: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(k, job)| {
                let (b, cpu) = (&barrier, allowed[k % allowed.len()]);
                s.spawn(move || {
                    let pin = if pinned { crate::pin_to_cpus(&[cpu]) } else { Ok(()) };
                    // At the barrier even when pinning failed: the other
                    // threads wait there for this one.
                    b.wait();
                    pin?;
                    job()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("thread panicked")))).collect()
    });
    results.into_iter().collect()
}

/// A barrier whose waiters spin before they yield. `std::sync::Barrier`
/// parks all but the last thread on a futex, and waking a parked thread on
/// an idle vCPU of these VMs costs up to milliseconds. A waiter yields
/// after `SPINS_BEFORE_YIELD` rounds, so that a thread waiting on the same
/// CPU (unpinned, or more threads than CPUs) still gets to run.
struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
}

const SPINS_BEFORE_YIELD: u32 = 1 << 10;

impl SpinBarrier {
    fn new(threads: usize) -> SpinBarrier {
        SpinBarrier { threads, arrived: AtomicUsize::new(0) }
    }

    fn wait(&self) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let mut spins = 0u32;
        while self.arrived.load(Ordering::Acquire) < self.threads {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The CPUs the calling thread may run on (`--cpu` leaves one).
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity writes at most
    // its size into it, and CPU_ISSET reads inside it.
    let cpus: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        (0..8 * std::mem::size_of::<libc::cpu_set_t>()).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    };
    if cpus.is_empty() {
        return Err(io::Error::other("sched_getaffinity returned no CPU"));
    }
    Ok(cpus)
}
