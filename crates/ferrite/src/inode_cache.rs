//! The inode cache: the DRAM inodes rebuilt so far, found by number.
//!
//! Inode numbers are dense (slots of the inode table, fixed at mkfs), so
//! the cache is an array indexed by number rather than a hash map: finding
//! a cached inode costs one slot, which in a big directory is one cache
//! miss instead of the two or three a hash probe costs (control bytes,
//! bucket, key). The array is split into chunks allocated at their first
//! use, so a pool formatted for millions of inodes costs DRAM only for the
//! ranges it touches. Each slot has its own lock, held while an inode is
//! rebuilt from its log, so that two threads never rebuild the same inode
//! and threads on different inodes never wait for each other.

use crate::inode::Inode;
use crate::types::InodeNo;
use parking_lot::{Mutex, MutexGuard};
use std::sync::{Arc, OnceLock};

/// Slots per chunk: 16 KiB of slots, allocated together.
const SLOTS_PER_CHUNK: usize = 1024;

type Slot = Mutex<Option<Arc<Inode>>>;

pub(crate) struct InodeCache {
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
    /// Inode numbers are below this (the inode table's slot count).
    inode_count: u64,
}

impl InodeCache {
    pub(crate) fn new(inode_count: u64) -> InodeCache {
        let chunks = (inode_count as usize).div_ceil(SLOTS_PER_CHUNK);
        InodeCache { chunks: (0..chunks).map(|_| OnceLock::new()).collect(), inode_count }
    }

    /// The slot of `ino` (its chunk allocated at first use); None for a
    /// number outside the table.
    fn slot_of(&self, ino: InodeNo) -> Option<&Slot> {
        if ino.0 >= self.inode_count {
            return None;
        }
        let i = ino.0 as usize;
        let chunk =
            self.chunks[i / SLOTS_PER_CHUNK].get_or_init(|| (0..SLOTS_PER_CHUNK).map(|_| Mutex::new(None)).collect());
        Some(&chunk[i % SLOTS_PER_CHUNK])
    }

    /// The slot of `ino`, locked; None for a number outside the table.
    pub(crate) fn slot(&self, ino: InodeNo) -> Option<MutexGuard<'_, Option<Arc<Inode>>>> {
        self.slot_of(ino).map(|s| s.lock())
    }

    /// The slot of `ino`, locked, unless another thread holds it right now
    /// (it is rebuilding that inode): never waits. None too for a number
    /// outside the table, whose slot no thread can hold.
    pub(crate) fn try_slot(&self, ino: InodeNo) -> Option<MutexGuard<'_, Option<Arc<Inode>>>> {
        self.slot_of(ino)?.try_lock()
    }

    /// The cached inode `ino`, if it has been rebuilt (never rebuilds it).
    pub(crate) fn get(&self, ino: InodeNo) -> Option<Arc<Inode>> {
        if ino.0 >= self.inode_count {
            return None;
        }
        let i = ino.0 as usize;
        let chunk = self.chunks[i / SLOTS_PER_CHUNK].get()?;
        chunk[i % SLOTS_PER_CHUNK].lock().clone()
    }

    /// Call `f` with every cached inode, in number order, skipping any
    /// whose slot another thread holds right now (it is rebuilding that
    /// inode): never waits, so a caller that holds inode locks cannot
    /// deadlock with a rebuild. Visits every slot of the chunks in use.
    /// Returns the slots skipped.
    pub(crate) fn each_cached_unlocked(&self, mut f: impl FnMut(&Arc<Inode>)) -> usize {
        let mut slots_locked = 0;
        for chunk in self.chunks.iter().filter_map(|c| c.get()) {
            for slot in chunk.iter() {
                let inode = match slot.try_lock() {
                    Some(s) => s.clone(),
                    None => {
                        slots_locked += 1;
                        continue;
                    }
                };
                if let Some(inode) = inode {
                    f(&inode);
                }
            }
        }
        slots_locked
    }

    pub(crate) fn insert(&self, inode: Arc<Inode>) {
        let ino = inode.ino;
        *self.slot(ino).unwrap_or_else(|| panic!("inode {} outside the table", ino.0)) = Some(inode);
    }

    pub(crate) fn remove(&self, ino: InodeNo) {
        if let Some(mut s) = self.slot(ino) {
            *s = None;
        }
    }
}

impl Drop for InodeCache {
    /// Directories hold the inodes their names name (`NameSlot`): let go of
    /// those first, so that dropping a deep tree is a loop over the table,
    /// never a recursion as deep as the tree.
    fn drop(&mut self) {
        for chunk in self.chunks.iter_mut().filter_map(|c| c.get_mut()) {
            for slot in chunk.iter_mut() {
                if let Some(inode) = slot.get_mut() {
                    let mut d = inode.lock_write();
                    if let crate::inode::Body::Dir(dir) = &mut d.body {
                        for name in dir.names.values_mut() {
                            name.inode.take();
                        }
                    }
                }
            }
        }
    }
}
