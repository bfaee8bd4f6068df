//! The oracle of the fsync-atomic mode: which recovered states a crash may
//! leave when some files are fsync-atomic (docs/DESIGN.md, "fsync-atomic
//! mode"; docs/TESTING.md, "The fsync-atomic oracle").
//!
//! The model shows every operation at once, as the engine's readers see
//! it. What a crash leaves differs: each fsync-atomic file comes back as it
//! was at its last completed *commit point*, or, when the crashed call is a
//! commit point of that file, as the call left it; names, strict files and
//! the attributes of every file are strict (before or after the crashed
//! call, durable once it returned). The [`Tracker`] follows a workload call
//! by call beside the model and keeps, for every fsync-atomic file (by the
//! model's inode number), its *committed view*: the file's whole
//! [`NodeView`] right after its last commit point. Any change of a file
//! other than a data change (write, truncate, O_TRUNC, fallocate) is a
//! commit point, so the attributes in a committed view are always the
//! current ones and only content, size, blocks and times can lag.
//!
//! The *durable state* after call i, `D(i)`, is the model's tree after call
//! i with every fsync-atomic file's node replaced by its committed view.
//! The states allowed for a crash
//! - once call i returned (and before call i + 1 begins): `D(i)` exactly;
//! - inside call i: `D(i - 1)` or `D(i)`, and in addition, for the files
//!   the call commits:
//!   - a commit point that changes no name (fsync, fdatasync, sync, a write
//!     through an O_SYNC/O_DSYNC descriptor, chmod, chown, utimens, a mode
//!     change, a clean unmount): each such file independently at its old or
//!     its new committed view (a sync commits file after file);
//!   - a commit point that changes names (link, unlink, rename of the file
//!     or over it): the file follows the names (new names, new view), and
//!     the names may also still be the old ones with the file's pending
//!     data already committed (the issue's "commits the file's pending data
//!     first", as ext4's auto_da_alloc); never the new names with the data
//!     of the old commit point (the zero-length file after rename-over).
//!
//! When more than six files are committed by one call, the subsets are
//! thinned to none, each one alone, all but one, and all.
//!
//! A workload in which no file was ever fsync-atomic (and the default mode
//! never was) gets no oracle: the harness then uses its strict rule (the
//! model's state before or after the call) unchanged.
//!
//! The tracker also classifies each call for the persistence checker
//! ([`CallMode`]): which file's epoch it extends (its stores may stay
//! unfenced) and which files it commits (their epochs' stores must be
//! durable when it returns).

use crate::hash::tree_key;
use crate::workload::{Call, Slots};
use ferrite::{FileMode, FileType, PathFs};
use ferrite_model::{ModelFs, NodeView, Tree};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Files are named by the model's inode number (never reused).
pub type FileId = u64;

/// The owner the persistence checker gives the stores of a buffered
/// mount's pending operations (`crate::prefix`): one queue, which every
/// sync point commits. No model inode has this number.
pub const QUEUE: FileId = u64::MAX;

/// How the checker names the owner `f` in its messages.
pub fn owner_name(f: FileId) -> String {
    if f == QUEUE {
        "the buffered queue (operations not yet durable)".into()
    } else {
        format!("the pending epoch of fsync-atomic file {f}")
    }
}

/// What one call does to the fsync-atomic files, for the persistence
/// checker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallMode {
    /// The fsync-atomic file whose pending epoch this call extends (a data
    /// change that is not a commit point): its stores may stay unflushed
    /// or unfenced when the call returns.
    pub extends: Option<FileId>,
    /// Files this call commits: every store of their epochs must be
    /// durable when it returns.
    pub commits: Vec<FileId>,
    /// The call commits every file (sync, a clean unmount).
    pub commits_all: bool,
}

impl CallMode {
    /// Does this call commit `f`?
    pub fn commits_file(&self, f: FileId) -> bool {
        self.commits_all || self.commits.contains(&f)
    }
}

/// One state the oracle allows somewhere.
#[derive(Clone, Debug)]
pub struct Allowed {
    pub tree: Arc<Tree>,
    pub key: u64,
    /// What it is, for failure messages.
    pub name: String,
}

/// The oracle of a recorded workload (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct Oracle {
    pub trees: Vec<Allowed>,
    /// `D` before the first recorded call.
    pub initial: usize,
    /// For each call: the states allowed inside it.
    pub inside: Vec<Vec<usize>>,
    /// For each call: the state once it returned (`D(i)`).
    pub after: Vec<usize>,
    /// For each call: what it does to the fsync-atomic files.
    pub modes: Vec<CallMode>,
}

/// What a call is about to do (found before it runs on the model).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// A data change of this file (fsync-atomic or not: the tracker checks
    /// the mode).
    data: Option<FileId>,
    /// Files committed without a change of names.
    alone: Vec<FileId>,
    /// Files committed with a change of names.
    with_names: Vec<FileId>,
    /// Every file committed.
    all: bool,
    /// The fsync-atomic files among those, before the call (an unlinked
    /// open file has no committed view but still has a mode).
    atomic: BTreeSet<FileId>,
}

/// Regular files of a tree by model inode: path of each node, and the
/// first path of each inode.
#[derive(Clone, Debug, Default)]
struct InoMap {
    by_path: BTreeMap<Vec<u8>, FileId>,
    first: BTreeMap<FileId, Vec<u8>>,
}

impl InoMap {
    fn of(model: &ModelFs, tree: &Tree) -> InoMap {
        let mut m = InoMap::default();
        for (path, node) in tree {
            if node.kind != FileType::Regular {
                continue;
            }
            let ino = model
                .lstat(path)
                .map(|s| s.ino.0)
                .unwrap_or_else(|e| panic!("oracle: lstat {} on the model failed: {e:?}", path.escape_ascii()));
            m.by_path.insert(path.clone(), ino);
            m.first.entry(ino).or_insert_with(|| path.clone());
        }
        m
    }

    fn view<'t>(&self, tree: &'t Tree, f: FileId) -> Option<&'t NodeView> {
        self.first.get(&f).and_then(|p| tree.get(p))
    }

    fn path(&self, f: FileId) -> String {
        self.first.get(&f).map_or_else(|| format!("(inode {f})"), |p| p.escape_ascii().to_string())
    }
}

/// `tree` with the nodes of the files in `views` replaced (each path of a
/// file keeps its own link group).
fn substitute(tree: &Tree, map: &InoMap, views: &BTreeMap<FileId, NodeView>) -> Tree {
    let mut out = tree.clone();
    for (path, f) in &map.by_path {
        if let Some(v) = views.get(f) {
            let node = out.get_mut(path).expect("mapped path in its tree");
            let link_group = node.link_group;
            *node = NodeView { link_group, ..v.clone() };
        }
    }
    out
}

/// Subsets of `items` to try: all of them when there are at most six;
/// otherwise none, each alone, all but one, and all.
fn subsets(items: &[FileId]) -> Vec<Vec<FileId>> {
    let n = items.len();
    if n <= 6 {
        return (0..1u32 << n).map(|m| (0..n).filter(|i| m & (1 << i) != 0).map(|i| items[i]).collect()).collect();
    }
    let mut out = vec![Vec::new(), items.to_vec()];
    for i in 0..n {
        out.push(vec![items[i]]);
        out.push(items.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &f)| f).collect());
    }
    out
}

/// Follows a workload beside the model (see the module comment).
#[derive(Clone, Default)]
pub struct Tracker {
    /// The committed view of every fsync-atomic file that has a name.
    committed: BTreeMap<FileId, NodeView>,
    /// Was any file (or the default mode) ever fsync-atomic? Until then
    /// the durable states are the model's and nothing is mapped.
    used: bool,
    /// The model's tree now, its regular files by inode (empty while the
    /// tracker is unused), and the durable state (index into
    /// `oracle.trees`).
    now: Option<(Arc<Tree>, InoMap, usize)>,
    oracle: Oracle,
    keys: BTreeMap<u64, usize>,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Is the oracle needed (has any file been fsync-atomic)?
    pub fn used(&self) -> bool {
        self.used
    }

    /// The committed view of a file (None for a strict file).
    pub fn committed(&self, f: FileId) -> Option<&NodeView> {
        self.committed.get(&f)
    }

    /// What `call` is about to do; call it before the call runs on the
    /// model.
    pub fn plan(&self, model: &ModelFs, slots: &Slots, call: &Call) -> Plan {
        let by_fd = |slot: &u8| -> Option<FileId> {
            let fd = slots.fds.get(*slot as usize).copied().flatten()?;
            let st = model.fstat(fd).ok()?;
            (st.kind == FileType::Regular).then_some(st.ino.0)
        };
        let by_path = |path: &[u8], follow: bool| -> Option<FileId> {
            let st = if follow { model.stat(path) } else { model.lstat(path) }.ok()?;
            (st.kind == FileType::Regular).then_some(st.ino.0)
        };
        let mut p = Plan::default();
        match call {
            // A zero-byte write changes nothing and syncs nothing.
            Call::Pwrite { len: 0, .. } | Call::Write { len: 0, .. } => {}
            Call::Pwrite { slot, .. } | Call::Write { slot, .. } | Call::Patch { slot, .. } => {
                let f = by_fd(slot);
                if slots.sync.get(*slot as usize).copied().unwrap_or(false) {
                    p.alone.extend(f);
                } else {
                    p.data = f;
                }
            }
            Call::Ftruncate { slot, .. } | Call::Fallocate { slot, .. } => p.data = by_fd(slot),
            Call::Truncate { path, .. } => p.data = by_path(path, true),
            Call::Open { path, flags, .. } => {
                // O_TRUNC truncates whatever the access mode (as Linux).
                if flags.trunc && !flags.path {
                    p.data = by_path(path, true);
                }
            }
            Call::Fsync { slot } | Call::Fdatasync { slot } | Call::SetMode { slot, .. } => p.alone.extend(by_fd(slot)),
            Call::Chmod { path, .. } | Call::Chown { path, .. } => p.alone.extend(by_path(path, true)),
            Call::Utimens { path, atime, mtime } => {
                // Both times omitted: nothing happens (not even a lookup).
                if *atime != ferrite::TimeSet::Omit || *mtime != ferrite::TimeSet::Omit {
                    p.alone.extend(by_path(path, true));
                }
            }
            Call::Sync | Call::Remount | Call::CrashRemount => p.all = true,
            Call::Link { from, .. } => p.with_names.extend(by_path(from, false)),
            Call::LinkFd { slot, .. } => p.with_names.extend(by_fd(slot)),
            Call::Unlink { path } | Call::WriteRacingUnlink { path, .. } => {
                p.with_names.extend(by_path(path, false))
            }
            Call::Rename { from, to, .. } => {
                let a = by_path(from, false);
                let b = by_path(to, false);
                // A rename between two names of one inode changes nothing.
                if a.is_none() || a != b {
                    p.with_names.extend(a);
                    p.with_names.extend(b);
                }
            }
            Call::Close { .. }
            | Call::Mkdir { .. }
            | Call::Rmdir { .. }
            | Call::Symlink { .. }
            | Call::Mknod { .. }
            | Call::SetDefaultMode { .. }
            | Call::PatchBuffer { .. }
            | Call::FreeBuffer { .. }
            | Call::Peek { .. }
            | Call::MapPrivate { .. }
            | Call::Unpeek { .. }
            // Buffered mounts only, whose oracle is the prefix oracle.
            | Call::PersistAllBut { .. } => {}
        }
        p.atomic = p
            .data
            .iter()
            .chain(&p.alone)
            .chain(&p.with_names)
            .copied()
            .filter(|&f| slots.mode_of(f) == FileMode::FsyncAtomic)
            .collect();
        p
    }

    fn intern(&mut self, tree: Arc<Tree>, key: u64, name: String) -> usize {
        if let Some(&i) = self.keys.get(&key) {
            return i;
        }
        let i = self.oracle.trees.len();
        self.oracle.trees.push(Allowed { tree, key, name });
        self.keys.insert(key, i);
        i
    }

    fn intern_tree(&mut self, tree: Tree, name: String) -> usize {
        let key = tree_key(&tree);
        self.intern(Arc::new(tree), key, name)
    }

    /// The durable state of `tree` (whose key is `key`).
    fn durable(&mut self, tree: &Arc<Tree>, key: u64, map: &InoMap, name: String) -> usize {
        if self.committed.is_empty() {
            return self.intern(tree.clone(), key, name);
        }
        self.intern_tree(substitute(tree, map, &self.committed), name)
    }

    /// The map of `tree` once the tracker is in use (empty before).
    fn map(&self, model: &ModelFs, tree: &Tree) -> InoMap {
        if self.used {
            InoMap::of(model, tree)
        } else {
            InoMap::default()
        }
    }

    /// Note a call that is not recorded (a preparing or setup call): the
    /// committed views follow it.
    pub fn settle(&mut self, model: &ModelFs, slots: &Slots, plan: Plan, ok: bool) {
        self.used |= slots.any_atomic();
        if !self.used {
            return;
        }
        let tree = model.tree();
        let map = InoMap::of(model, &tree);
        self.advance(slots, &plan, ok, &tree, &map);
    }

    /// Recording starts: `tree` is the model's state now, `key` its key.
    pub fn begin(&mut self, model: &ModelFs, slots: &Slots, tree: &Arc<Tree>, key: u64) {
        self.used |= slots.any_atomic();
        let map = self.map(model, tree);
        let i = self.durable(tree, key, &map, "the durable state before the first call".into());
        self.oracle.initial = i;
        self.now = Some((tree.clone(), map, i));
    }

    /// Start again from the model's state now, with every file committed
    /// (after a clean unmount, or once a crash's losses were put back).
    pub fn restart(&mut self, model: &ModelFs, slots: &Slots) {
        self.used |= slots.any_atomic();
        self.committed.clear();
        let tree = Arc::new(model.tree());
        let key = tree_key(&tree);
        let map = self.map(model, &tree);
        self.advance(slots, &Plan::default(), true, &tree, &map);
        self.oracle = Oracle::default();
        self.keys.clear();
        let i = self.intern(tree.clone(), key, "the state at the start".into());
        self.oracle.initial = i;
        self.now = Some((tree, map, i));
    }

    /// The committed views after a call that ran with `plan` and either
    /// succeeded (`ok`) or changed nothing.
    fn advance(&mut self, slots: &Slots, plan: &Plan, ok: bool, tree: &Tree, map: &InoMap) {
        if ok {
            let mut commit: BTreeSet<FileId> = plan.alone.iter().chain(&plan.with_names).copied().collect();
            if plan.all {
                commit.extend(self.committed.keys().copied());
            }
            for f in commit {
                self.committed.remove(&f);
            }
        }
        // Files gone from the tree need nothing and strict files are not
        // kept; an fsync-atomic file without a committed view was just
        // created, made fsync-atomic or committed: its view now is its
        // committed one.
        self.committed.retain(|f, _| map.first.contains_key(f) && slots.mode_of(*f) == FileMode::FsyncAtomic);
        for &f in map.first.keys() {
            if slots.mode_of(f) == FileMode::FsyncAtomic && !self.committed.contains_key(&f) {
                let v = map.view(tree, f).expect("a mapped file has a node");
                self.committed.insert(f, v.clone());
            }
        }
    }

    /// A recorded call ran (`ok`: it succeeded and the model kept its
    /// effect); `tree` is the model's state after it and `key` its key.
    /// Adds the call's allowed states to the oracle.
    pub fn call(&mut self, model: &ModelFs, slots: &Slots, plan: Plan, ok: bool, tree: &Arc<Tree>, key: u64) {
        self.used |= slots.any_atomic();
        let (before_tree, before_map, before_d) = self.now.take().expect("begin() before call()");
        let map = self.map(model, tree);
        let old = self.committed.clone();
        let extends = plan.data.filter(|f| plan.atomic.contains(f));
        self.advance(slots, &plan, ok, tree, &map);
        let n = self.oracle.after.len();
        let after_d = self.durable(tree, key, &map, format!("the durable state after call {n}"));
        let mut inside = vec![before_d, after_d];
        let mut mode = CallMode { extends, ..CallMode::default() };
        if ok {
            // A file's committed view before the call (its live view if it
            // was strict), and after it.
            let old_view = |f: FileId| old.get(&f).cloned().or_else(|| before_map.view(&before_tree, f).cloned());
            let new = self.committed.clone();
            let new_view = |f: FileId| new.get(&f).cloned().or_else(|| map.view(tree, f).cloned());
            // Commit points that change no name: each file on its own.
            let mut alone: BTreeSet<FileId> = plan.alone.iter().copied().collect();
            if plan.all {
                alone.extend(old.keys().copied());
                mode.commits_all = true;
            }
            mode.commits.extend(alone.iter().copied().filter(|f| plan.atomic.contains(f)));
            let changed: Vec<FileId> = alone
                .iter()
                .copied()
                .filter(|&f| old.contains_key(&f) || new.contains_key(&f))
                .filter(|&f| matches!((old_view(f), new_view(f)), (Some(o), Some(w)) if o != w))
                .collect();
            for s in subsets(&changed) {
                if s.is_empty() {
                    continue;
                }
                let names: Vec<String> = s.iter().map(|&f| map.path(f)).collect();
                // The names before the call, these files already committed.
                let mut views = old.clone();
                for &f in &s {
                    views.insert(f, new_view(f).expect("a changed file has a new view"));
                }
                let t = substitute(&before_tree, &before_map, &views);
                let i = self.intern_tree(t, format!("call {n} in flight, {} committed", names.join(", ")));
                inside.push(i);
                // The names after the call, these files not yet committed.
                let mut views = new.clone();
                for &f in &s {
                    views.insert(f, old_view(f).expect("a changed file has an old view"));
                }
                let t = substitute(tree, &map, &views);
                let i = self.intern_tree(t, format!("call {n} in flight, {} not yet committed", names.join(", ")));
                inside.push(i);
            }
            // Commit points that change names: the names follow the call,
            // and the pending data may commit before them.
            mode.commits.extend(plan.with_names.iter().copied().filter(|f| plan.atomic.contains(f)));
            let named: BTreeSet<FileId> = plan.with_names.iter().copied().filter(|f| old.contains_key(f)).collect();
            let pending: Vec<FileId> = named
                .iter()
                .copied()
                .filter(|&f| before_map.view(&before_tree, f).is_some_and(|v| Some(v) != old.get(&f)))
                .collect();
            for s in subsets(&pending) {
                if s.is_empty() {
                    continue;
                }
                let names: Vec<String> = s.iter().map(|&f| before_map.path(f)).collect();
                let mut views = old.clone();
                for &f in &s {
                    views.insert(f, before_map.view(&before_tree, f).expect("a pending file has a view").clone());
                }
                let t = substitute(&before_tree, &before_map, &views);
                let what = format!("call {n} in flight, the pending data of {} committed first", names.join(", "));
                let i = self.intern_tree(t, what);
                inside.push(i);
            }
            mode.commits.sort_unstable();
            mode.commits.dedup();
        }
        inside.sort_unstable();
        inside.dedup();
        self.oracle.inside.push(inside);
        self.oracle.after.push(after_d);
        self.oracle.modes.push(mode);
        self.now = Some((tree.clone(), map, after_d));
    }

    /// The oracle (None when no file was ever fsync-atomic).
    pub fn finish(self) -> Option<Oracle> {
        self.used.then_some(self.oracle)
    }

    /// The durable state now (after the last call given).
    pub fn durable_now(&self) -> &Allowed {
        let (_, _, d) = self.now.as_ref().expect("begin() first");
        &self.oracle.trees[*d]
    }

    /// The states allowed for a crash inside the last call given.
    pub fn last_inside(&self) -> Vec<&Allowed> {
        self.oracle.inside.last().map(|v| v.iter().map(|&i| &self.oracle.trees[i]).collect()).unwrap_or_default()
    }

    /// Forget every state but the durable state now (a long run that
    /// only ever looks at its last call).
    pub fn prune(&mut self) {
        let Some((tree, map, d)) = self.now.take() else { return };
        let keep = self.oracle.trees[d].clone();
        self.oracle = Oracle::default();
        self.keys.clear();
        let i = self.intern(keep.tree, keep.key, keep.name);
        self.oracle.initial = i;
        self.now = Some((tree, map, i));
    }
}
