//! ferrite-fuse: a FUSE front end for Ferrite, so that every program on the
//! machine can use a pool through a mount point.
//!
//! A thin adapter: each FUSE request becomes one inode-level call of the
//! engine (`Ferrite::lookup`, `create_node`, `read_ino`, ...); no
//! file-system logic lives here. What the adapter does keep is what only
//! the FUSE protocol has: the kernel's lookup counts (mapped to engine pins,
//! so unlinked-but-open files live until released), file handles, the
//! synthesized `.`/`..` directory entries, credentials of new nodes, and a
//! panic guard around every handler. See [`adapter`] for the details and
//! [`daemon`] for the life of a mount (daemonizing, signals, clean unmount).
//!
//! Mounted with `fuser`'s own mount code (no libfuse needed). Served over
//! FUSE io_uring when the kernel allows it (one queue and thread per CPU,
//! [`uring`]), else by several threads, each on its own cloned /dev/fuse
//! descriptor.

pub mod adapter;
pub mod daemon;
pub mod options;
pub mod uring;
pub mod wire;

pub use adapter::{Changed, FerriteFuse, KernelFiles, Neighbour};
pub use daemon::{helper_main, invoked_as_helper, mount, spawn, umount, Background, MountRequest, DEFAULT_POOL_SIZE};
pub use options::{MountConfig, Transport, OPTIONS_HELP};
