//! Ferrite's persistence layer.
//!
//! This crate is the only code that stores to a Ferrite pool. Everything the
//! file system makes durable goes through [`Pmem`]: cached stores, the
//! non-temporal copy used for file data, cache-line write-back, the store
//! fence, and the 8-byte atomic store that commits a change. Because nothing
//! else writes the pool, turning on recording ([`Pmem::start_recording`])
//! captures every store, flush and fence in order, which is what the crash
//! simulator replays to build the images a real crash could leave.
//!
//! Backends: a heap pool (tests, crash images), and a shared mapping of a
//! pool file, with `MAP_SYNC` on a DAX file system, or plain `MAP_SHARED` on
//! tmpfs (`/dev/shm`) or any other file system. [`PersistenceDomain`] says
//! which durability each gives.
//!
//! `unsafe` lives only in the private modules `arch` (CPU instructions) and
//! `mapping` (raw memory, mmap, flock); every public function is safe, and a
//! store outside the pool panics instead of corrupting memory.

// `unsafe` is refused everywhere except the two modules that opt back in.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)]
mod arch;
mod latency;
#[allow(unsafe_code)]
mod mapping;
mod pmem;
mod record;
mod window;

use std::fmt;

pub use arch::{coarse_realtime_ns, detected_flush_kind, detected_nt_kind};
pub use latency::EmulatedLatency;
pub use pmem::Pmem;
pub use record::{replay_stores, Event};
pub use window::{Window, WindowAccess, WindowPage};

/// Byte offset into the pool.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct PoolOffset(pub u64);

/// `offset + n`: the offset `n` bytes further on. Panics on overflow, which
/// can only come from a bug (offsets from media are checked by the
/// `_checked` reads before anything is added to them).
impl std::ops::Add<u64> for PoolOffset {
    type Output = PoolOffset;

    #[inline]
    fn add(self, n: u64) -> PoolOffset {
        PoolOffset(self.0.checked_add(n).expect("ferrite-pmem: pool offset overflows u64"))
    }
}

impl fmt::Display for PoolOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The size of a cache line, the unit of flushing and of what can persist
/// independently in a crash.
pub const CACHE_LINE: u64 = 64;

/// Which instruction writes a cache line back, chosen once at start from
/// cpuid (and the `FERRITE_FLUSH` environment variable).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FlushKind {
    Clwb,
    ClflushOpt,
    Clflush,
    /// eADR platform or a heap pool in tests: nothing to flush.
    NoFlush,
}

/// Which non-temporal copy routine is used (cpuid, then `FERRITE_NT`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NtKind {
    Avx2,
    Sse2,
}

/// Where data is durable once flushed and fenced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PersistenceDomain {
    /// File on a DAX file system mapped with MAP_SYNC: flush+fence reaches persistent media.
    DaxMapSync,
    /// File on tmpfs/ramfs (e.g. /dev/shm), MAP_SHARED: survives a process crash, not a reboot.
    SharedMemory,
    /// File on a block-backed file system, MAP_SHARED without MAP_SYNC:
    /// survives a process crash; survives power loss only after msync (see
    /// [`Pmem::sync_to_backing_file`]).
    PageCache,
    /// Anonymous heap memory (tests): lost with the process.
    Heap,
}

impl PersistenceDomain {
    /// A one-line description for `ferrite info` and logs.
    pub fn describe(self) -> &'static str {
        match self {
            PersistenceDomain::DaxMapSync => "DAX file mapped with MAP_SYNC: durable on persistent media at each fence",
            PersistenceDomain::SharedMemory => {
                "shared memory (tmpfs/ramfs): survives a process crash, not a reboot or power loss"
            }
            PersistenceDomain::PageCache => {
                "page cache of a block-backed file: survives a process crash; survives power loss only after msync"
            }
            PersistenceDomain::Heap => "process heap: lost when the process exits",
        }
    }
}

impl fmt::Display for PersistenceDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Failure to create or open a pool file.
#[derive(Debug)]
pub enum PmemError {
    /// open/mmap/ftruncate/flock failure, or a file of unusable length; the
    /// message says what was being done and to which file.
    Io(std::io::Error),
    /// Another open of the pool file (in this or another process) holds its
    /// advisory lock. Nothing was changed.
    AlreadyOpen,
    /// The pool is (or would be) `len` bytes, but at least `min` are needed.
    TooSmall { len: u64, min: u64 },
}

impl fmt::Display for PmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmemError::Io(e) => write!(f, "pool I/O error: {e}"),
            PmemError::AlreadyOpen => {
                f.write_str("the pool file is already open (another open of it holds its exclusive lock)")
            }
            PmemError::TooSmall { len, min } => {
                write!(f, "the pool is {len} bytes, but at least {min} bytes are needed")
            }
        }
    }
}

impl std::error::Error for PmemError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PmemError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for PmemError {
    fn from(e: std::io::Error) -> Self {
        PmemError::Io(e)
    }
}
