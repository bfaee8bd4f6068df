//! The prefix oracle of buffered mounts (issue 13; docs/DESIGN.md,
//! "Guarantees"; docs/TESTING.md, "The prefix oracle").
//!
//! On a buffered mount every operation is atomic and visible at once, and
//! becomes durable later, in the order the operations returned: after a
//! crash the file system is the model's state after *some prefix* of the
//! calls, and that prefix contains every call that returned before the
//! last completed sync point (fsync, fdatasync, sync, a write through an
//! O_SYNC or O_DSYNC descriptor, a clean unmount). With `states[p]` the
//! model's tree after the first p calls (`exec::Recording::states`), the
//! states a crash may leave are `states[lo..=hi]`:
//! - once call i returned (and before call i + 1 begins): `lo` = the
//!   calls before and including the last sync point that returned by then,
//!   `hi` = i + 1;
//! - inside call i: `lo` as once call i - 1 returned, `hi` = i + 1 (call i
//!   may already be durable: back-pressure persists it inside the call).
//!
//! Which prefix it is, the oracle does not say: any one in the range is
//! allowed, and nothing else is (never a mix of two calls' effects, never
//! a later call without an earlier one, never a synced call lost).
//!
//! For the persistence checker ([`crate::pcheck::check_modes`]) every call
//! that is not a sync point extends the one queue (its stores may stay
//! unflushed or unfenced when it returns: they are due at the next sync
//! point), and every sync point commits it (every store of every earlier
//! call flushed and fenced when it returns).

use crate::oracle::{CallMode, QUEUE};
use crate::workload::{Call, CallResult, Slots};

/// The prefix oracle of one recorded workload on a buffered mount.
#[derive(Clone, Debug, Default)]
pub struct Prefix {
    /// For each call: is it a sync point (it returned success, and it makes
    /// every call before it durable)?
    pub sync: Vec<bool>,
    /// For each call i: the calls durable for sure once call i returned
    /// (the lowest prefix allowed from then on).
    pub synced: Vec<usize>,
}

/// Is `call`, which returned `r` on a buffered mount, a sync point? `slots`
/// are the engine side's descriptors before the call (was its descriptor
/// opened O_SYNC or O_DSYNC?). A zero-byte write through such a descriptor
/// is not counted (it changes nothing; counting it would only make the
/// oracle stricter than the engine promises).
pub fn is_sync_point(call: &Call, slots: &Slots, r: &CallResult) -> bool {
    if r.is_err() {
        return false;
    }
    let sync_fd = |slot: &u8| slots.sync.get(*slot as usize).copied().unwrap_or(false);
    match call {
        Call::Fsync { .. } | Call::Fdatasync { .. } | Call::Sync | Call::Remount | Call::CrashRemount => true,
        Call::Pwrite { len: 0, .. } | Call::Write { len: 0, .. } | Call::Patch { len: 0, .. } => false,
        Call::Pwrite { slot, .. } | Call::Write { slot, .. } | Call::Patch { slot, .. } => sync_fd(slot),
        _ => false,
    }
}

impl Prefix {
    /// Note the next call: a sync point or not.
    pub fn push(&mut self, sync: bool) {
        let i = self.synced.len();
        let before = self.synced.last().copied().unwrap_or(0);
        self.sync.push(sync);
        self.synced.push(if sync { i + 1 } else { before });
    }

    /// The calls durable for sure before call `i` begins.
    pub fn synced_before(&self, i: usize) -> usize {
        i.checked_sub(1).map_or(0, |j| self.synced[j])
    }

    /// The allowed states `states[lo..=hi]` for a crash inside call `i`
    /// (`returned` false) or once it returned.
    pub fn range(&self, i: usize, returned: bool) -> (usize, usize) {
        let lo = if returned { self.synced[i] } else { self.synced_before(i) };
        (lo, i + 1)
    }

    /// The classification of the calls for the persistence checker (see
    /// the module comment).
    pub fn modes(&self) -> Vec<CallMode> {
        self.sync
            .iter()
            .map(|&s| {
                if s {
                    CallMode { extends: None, commits: Vec::new(), commits_all: true }
                } else {
                    CallMode { extends: Some(QUEUE), commits: Vec::new(), commits_all: false }
                }
            })
            .collect()
    }
}
