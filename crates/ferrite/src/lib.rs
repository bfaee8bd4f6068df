//! Ferrite: a persistent-memory file system engine that runs in user space.
//!
//! NOVA's design (a log per inode committed by one atomic 8-byte tail store,
//! file data outside the log with copy-on-write, DRAM indexes rebuilt lazily,
//! lightweight journals for operations on several inodes, per-lane
//! allocators) over a pool accessed only through `ferrite_pmem`. See
//! `docs/DESIGN.md` for the story and `docs/FORMAT.md` for the bytes.
//!
//! The engine knows nothing of FUSE, LD_PRELOAD or the command line: those
//! are adapters over `Ferrite` (inode-level calls) and `Session` (a
//! process's descriptors, current directory and credentials, implementing
//! `PathFs`).

mod alloc;
mod attr;
mod buffered;
mod commit;
mod dir;
pub mod dump;
mod epoch;
mod file;
pub mod format;
mod fs;
pub mod fsck;
mod gc;
mod inode;
mod inode_cache;
mod journal;
mod log;
mod media;
mod pagemap;
mod path;
pub mod perm;
mod recovery;
mod replay;
mod session;
pub mod types;
mod xattr;
mod xattr_name;
mod zerocopy;

/// The hash map of DRAM indexes: foldhash is several times faster than
/// SipHash on the short keys used here (page numbers, inode numbers, names).
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The pool pages one commit releases: almost always none or one (a
/// copy-on-write overwrite of one page), so kept inline; a heap vector
/// here cost a `malloc` and a `free` per overwrite.
pub(crate) type PageList = smallvec::SmallVec<[format::PageNo; 4]>;
pub(crate) type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A wait on another thread without a system call: up to `rounds` rounds of
/// `poll` followed by four `pause` instructions (25 ns each on the AMD VM),
/// until `poll` gives an answer; `None` when the rounds ran out and the
/// caller should block instead. Used where the other thread's work takes
/// a few microseconds and a blocked thread's wake-up from another core
/// takes tens (`Inode::lock_read`, `Buffered::persist_upto`). A `poll`
/// looks with plain loads before it tries a locked instruction, which would
/// take the line from the thread it waits for.
pub(crate) fn spin_until<T>(rounds: u32, mut poll: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..rounds {
        if let Some(answer) = poll() {
            return Some(answer);
        }
        for _ in 0..4 {
            std::hint::spin_loop();
        }
    }
    None
}

pub use buffered::{BufferedOptions, BufferedStats, BATCH_WORDS_MIN, BUFFERED_LAG_NS_MAX, BUFFERED_OPS_MAX};
#[doc(hidden)]
pub use commit::RECOVERY_REBUILDS_PER_VISIT_MAX;
pub use dir::NodeSpec;
pub use file::COPY_BYTES_MAX;
#[doc(hidden)]
pub use file::{
    force_write_precopy, remove_after_next_precopy, write_precopies, write_precopy_fallbacks, write_precopy_forced,
};
pub use fs::{read_superblock, Ferrite, FormatOptions, MountOptions, MountReport, PoolError};
pub use inode::Inode;
pub use session::{FdTable, OpenFile, Session};
pub use types::*;
pub use zerocopy::{BufferId, MapKind, PatchBuffer, Peek, ViewId};
