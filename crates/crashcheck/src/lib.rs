//! Ferrite's crash-consistency harness, in the manner of Chipmunk
//! (EuroSys'23) and Vinter (ATC'22), with ACE-style workloads (CrashMonkey,
//! OSDI'18). See `docs/TESTING.md` for how to run it.
//!
//! - [`workload`]: calls, the seq-1/seq-2/seq-3 catalogue over a small file
//!   set, the fsync-atomic and zero-copy (peek and patch) catalogues, the
//!   random generators, the start images (empty, aged, nearly full);
//! - [`scenario`]: workloads that need many preparing calls (fast GC and
//!   compaction of files and directories) and the operations ported from
//!   the retired `crash_smoke` test;
//! - [`exec`]: a recorded run of a workload on the engine beside the model
//!   (on a heap pool, or on a pool file for the zero-copy workloads);
//! - [`pcheck`]: the persistence checker (pmemcheck-like);
//! - [`prefix`]: the prefix oracle of buffered mounts (a crash leaves a
//!   prefix of the operations in return order, every synced one included);
//! - [`crash`]: crash points and candidate images (Vinter's model);
//! - [`verify`]: recovering one image and checking it (fsck, usability,
//!   crash during recovery);
//! - [`harness`]: the driver, figures and failures;
//! - [`token`]: the one-string name of a failure, and its replay;
//! - [`proc_crash`]: the process-kill test (SIGKILL of a child process);
//! - [`fuzz`]: the fuzz targets (image decoding/mounting, operation
//!   sequences with crash injection).

pub mod crash;
pub mod exec;
pub mod fuzz;
pub mod harness;
pub mod hash;
pub mod oracle;
pub mod pcheck;
pub mod prefix;
pub mod proc_crash;
pub mod quiet;
pub mod scenario;
pub mod token;
pub mod verify;
pub mod workload;

/// Keep freed pool buffers in the process heap instead of returning them to
/// the kernel: the harness allocates and frees a pool-sized buffer for
/// every image it builds, copies or mounts, and with glibc's defaults each
/// of those is a fresh mmap whose pages fault in one by one (most of the
/// time went to page faults before this). Called by every entry point;
/// harmless to call twice.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator thresholds.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        }
    }
}
