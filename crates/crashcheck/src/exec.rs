//! Running workloads: the start images, and a recorded run of a workload on
//! the engine side by side with the reference model, which gives the state
//! after every call (the oracle).

use crate::hash::tree_key;
use crate::oracle::{Oracle, Tracker};
use crate::workload::{age, build_fileset, run_call, Call, CallResult, Slots, StartKind, Workload};
use ferrite::format::Layout;
use ferrite::{Errno, FormatOptions, ManualClock, MountOptions, OpenFlags, PathFs, Session, TimeSpec};
use ferrite_model::{diff_trees, tree_of, ModelFs, ModelState, Tree};
use ferrite_pmem::{Event, Pmem};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Pool geometry of every in-process workload: small, so that each crash
/// image is cheap to copy, recover and check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    pub pages: u64,
    pub inodes: u64,
    pub lanes: u32,
}

/// 128 pages (512 KiB), 64 inode slots, one lane. One lane keeps every run
/// deterministic: a thread's lane is assigned on first use, so with several
/// lanes the journal page and allocator partition a workload uses would
/// depend on which harness thread ran it, and a token would not replay.
pub const GEOMETRY: Geometry = Geometry { pages: 128, inodes: 64, lanes: 1 };

/// Clock readings: building start images at T_BUILD.., workload call i at
/// T_CALL + i seconds, recovery and checks at T_CHECK.
pub const T_BUILD: i64 = 1_000_000_000;
pub const T_CALL: i64 = 1_500_000_000;
pub const T_CHECK: i64 = 1_700_000_000;

/// Marker labels: call i begins at `2i` and ends at `2i + 1`.
pub fn begin_mark(i: usize) -> u64 {
    2 * i as u64
}
pub fn end_mark(i: usize) -> u64 {
    2 * i as u64 + 1
}

pub fn clock_at(sec: i64) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(TimeSpec { sec, nsec: 0 }))
}

pub fn mount_options(clock: &Arc<ManualClock>, threads: usize) -> MountOptions {
    MountOptions { clock: clock.clone(), recovery_threads: threads, ..Default::default() }
}

/// [`mount_options`] for a workload: a buffered mount for a buffered
/// workload (`Workload::buffered`), else an ordinary one.
pub fn workload_mount_options(clock: &Arc<ManualClock>, buffered: Option<crate::workload::Buffering>) -> MountOptions {
    MountOptions { buffered: buffered.map(crate::workload::buffered_options), ..mount_options(clock, 1) }
}

pub fn format_options(geo: Geometry, clock: &Arc<ManualClock>) -> FormatOptions {
    FormatOptions { lanes: geo.lanes, inodes: Some(geo.inodes), clock: clock.clone() }
}

/// A start image: a cleanly unmounted pool and the model state it holds.
pub struct Start {
    pub kind: StartKind,
    pub geometry: Geometry,
    pub image: Arc<Vec<u8>>,
    pub model: ModelState,
    pub layout: Layout,
}

/// The free-space figures of a freshly formatted pool of a geometry (what a
/// pool must return to once everything in it is deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmptyFigures {
    pub free_pages: u64,
    pub free_inodes: u64,
    /// Log pages of the root directory in the fresh pool.
    pub root_log_pages: u64,
}

pub fn empty_figures(geo: Geometry) -> EmptyFigures {
    static CACHE: OnceLock<Mutex<HashMap<Geometry, EmptyFigures>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(f) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&geo) {
        return *f;
    }
    let clock = clock_at(T_BUILD);
    let fs = Session::format(Pmem::heap(geo.pages * 4096), &format_options(geo, &clock)).expect("format an empty pool");
    let root = fs.stat(b"/").expect("stat /");
    let f =
        EmptyFigures { free_pages: fs.free_pages(), free_inodes: fs.free_inodes(), root_log_pages: root.blocks / 8 };
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(geo, f);
    f
}

/// Model capacity in pages: the engine's own space (logs included) runs out
/// first, and the harness accepts ENOSPC from the engine as long as it
/// changed nothing (see [`record`]).
const MODEL_PAGES: u64 = 1 << 32;

/// The model's inode capacity: every slot but slot 0 (the root counts).
pub fn model_inodes(layout: &Layout) -> u64 {
    layout.inode_count - 1
}

/// Run `f` on the engine and the model with the same clock reading.
struct Pair {
    engine: Session,
    model: ModelFs,
    clock: Arc<ManualClock>,
    t: i64,
}

impl Pair {
    fn tick(&mut self) {
        self.t += 1;
        self.clock.set(TimeSpec { sec: self.t, nsec: 7 });
    }
}

/// Build (once per process) the start image of `kind`.
pub fn start(kind: StartKind) -> Arc<Start> {
    static CACHE: OnceLock<Mutex<HashMap<StartKind, Arc<Start>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&kind) {
        return s.clone();
    }
    let s = Arc::new(
        build_start(kind, GEOMETRY).unwrap_or_else(|e| panic!("building the {} start image failed: {e}", kind.name())),
    );
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(kind, s.clone());
    s
}

/// One building step, run once on the engine and once on the model; it
/// calls the tick before each call so both sides read the same clock.
type BuildStep<'a> = dyn FnMut(&dyn PathFs, &mut dyn FnMut()) -> Result<(), String> + 'a;

/// Build a start image of the given kind and geometry.
pub fn build_start(kind: StartKind, geo: Geometry) -> Result<Start, String> {
    let clock = clock_at(T_BUILD);
    let engine = Session::format(Pmem::heap(geo.pages * 4096), &format_options(geo, &clock))
        .map_err(|e| format!("format: {e}"))?;
    let layout = engine.layout();
    let model = ModelFs::new(clock.clone(), MODEL_PAGES, model_inodes(&layout));
    let mut pair = Pair { engine, model, clock: clock.clone(), t: T_BUILD };
    // Every step runs on both sides through one `PathFs` closure.
    let both = |pair: &mut Pair, f: &mut BuildStep<'_>| -> Result<(), String> {
        let t0 = pair.t;
        let clock = pair.clock.clone();
        let mut t = t0;
        let mut tick = || {
            t += 1;
            clock.set(TimeSpec { sec: t, nsec: 7 });
        };
        f(&pair.engine, &mut tick)?;
        let mut t = t0;
        let mut tick = || {
            t += 1;
            clock.set(TimeSpec { sec: t, nsec: 7 });
        };
        f(&pair.model, &mut tick)?;
        pair.t = t;
        Ok(())
    };
    if kind == StartKind::Aged {
        both(&mut pair, &mut |fs, tick| age(fs, tick, 240))?;
    }
    both(&mut pair, &mut |fs, tick| build_fileset(fs, tick))?;
    if kind == StartKind::Full {
        fill(&mut pair)?;
    }
    if kind == StartKind::LogEdge {
        to_log_edge(&mut pair, b"/A/C", 2)?;
        to_log_edge(&mut pair, b"/foo", 1)?;
        gc_ready_dir(&mut pair)?;
    }
    let et = tree_of(&pair.engine).map_err(|e| format!("engine tree: {e:?}"))?;
    let mt = pair.model.tree();
    let d = diff_trees(&mt, &et);
    if !d.is_empty() {
        return Err(format!("engine and model differ after building:\n{d}"));
    }
    let pmem = pair.engine.pmem().clone();
    pair.engine.unmount().map_err(|e| format!("unmount: {e:?}"))?;
    let image = pmem.image();
    let report =
        ferrite::fsck::check(&Pmem::from_image(&image)).map_err(|e| format!("fsck of the start image: {e}"))?;
    if !report.is_clean() {
        return Err(format!("fsck of the start image:\n{report}"));
    }
    pair.model.close_all();
    Ok(Start { kind, geometry: geo, image: Arc::new(image), model: pair.model.snapshot(), layout })
}

/// Pages left available to ordinary changes in the nearly-full image
/// (besides the removal reserve, which only removals may take), and the
/// fewest inodes the fill leaves (it stops on whichever runs out first;
/// pages do here).
pub const FULL_FREE_PAGES: u64 = 2;
pub const FULL_FREE_INODES: u64 = 3;

/// Fill the pool under /F until FULL_FREE_PAGES pages are available (or no more
/// than FULL_FREE_INODES inodes), both sides getting exactly the same
/// calls: files of ten pages while there is room, then of one, then one
/// last file sized to leave exactly FULL_FREE_PAGES. (Empty files would
/// not do it: an inode's attributes live in its slot, so an empty file
/// takes no page; before format feature bit 3 each took a log page, and
/// this image was filled with them to the same 2 free pages and 35 free
/// inodes it has now.)
fn fill(pair: &mut Pair) -> Result<(), String> {
    let run = |pair: &mut Pair, call: Call, slots: &mut (Slots, Slots)| -> Result<(), String> {
        pair.tick();
        let e = run_call(&pair.engine, &mut slots.0, &call);
        let m = run_call(&pair.model, &mut slots.1, &call);
        if e.is_err() || m.is_err() {
            return Err(format!("fill: {call}: engine {e:?}, model {m:?}"));
        }
        Ok(())
    };
    let mut slots = (Slots::default(), Slots::default());
    run(pair, Call::Mkdir { path: b"/F".to_vec(), perm: 0o755 }, &mut slots)?;
    let mut n = 0;
    loop {
        let free = pair.engine.available_pages();
        // Each file costs its data pages and one log page; /F's log may
        // need one more.
        let chunk = if free > 24 { 10 } else { 1 };
        if free < FULL_FREE_PAGES + chunk + 3 {
            break;
        }
        let path = format!("/F/f{n}").into_bytes();
        n += 1;
        run(pair, Call::Open { slot: 0, path, flags: OpenFlags::RDWR.create(), perm: 0o644 }, &mut slots)?;
        run(pair, Call::Pwrite { slot: 0, off: 0, len: (chunk * 4096) as u32, tag: n as u32 }, &mut slots)?;
        run(pair, Call::Close { slot: 0 }, &mut slots)?;
        if pair.engine.free_inodes() <= FULL_FREE_INODES {
            break;
        }
    }
    // Trim pages down to the target with one last file: its data pages
    // and its one log page (/F's log has room: its names are one unit).
    let free = pair.engine.available_pages();
    if free > FULL_FREE_PAGES + 1 && pair.engine.free_inodes() > 1 {
        let pages = free - FULL_FREE_PAGES - 1;
        run(
            pair,
            Call::Open { slot: 0, path: b"/F/last".to_vec(), flags: OpenFlags::RDWR.create(), perm: 0o644 },
            &mut slots,
        )?;
        run(pair, Call::Pwrite { slot: 0, off: 0, len: (pages * 4096) as u32, tag: 999 }, &mut slots)?;
        run(pair, Call::Close { slot: 0 }, &mut slots)?;
    }
    Ok(())
}

/// Units (64 bytes) left after the log tail of `path` in its page.
pub fn log_room_units(fs: &Session, path: &[u8]) -> Result<u64, String> {
    let ino = fs.lstat(path).map_err(|e| format!("stat {path:?}: {e:?}"))?.ino;
    let slot = fs.layout().inode_slot(ino);
    let tail = fs.pmem().read_u64(slot + ferrite::format::INODE_TAIL_OFFSET);
    if tail == 0 {
        // An empty log (attributes in the slot only): its first entry opens
        // a page with all of its units free.
        return Ok(ferrite::format::LOG_UNITS_PER_PAGE);
    }
    let within = (tail - 1) % 4096 + 1;
    Ok((4096 - within) / 64)
}

/// chmod `path` (one Attr entry each) until its log has at most `units`
/// units of room left in the tail's page.
fn to_log_edge(pair: &mut Pair, path: &[u8], units: u64) -> Result<(), String> {
    let mut slots = (Slots::default(), Slots::default());
    for i in 0..200u32 {
        // At most `units` left (exactly, with today's one-unit Attr
        // entries; never overshooting into the next page).
        if log_room_units(&pair.engine, path)? <= units {
            return Ok(());
        }
        pair.tick();
        let c = Call::Chmod { path: path.to_vec(), perm: 0o700 | (i % 0o100) };
        let e = run_call(&pair.engine, &mut slots.0, &c);
        let m = run_call(&pair.model, &mut slots.1, &c);
        if e.is_err() || m.is_err() {
            return Err(format!("{c}: engine {e:?}, model {m:?}"));
        }
    }
    Err(format!("the log of {path:?} never reached {units} units of room"))
}

/// /G: a directory whose first log page is full of entries that all die
/// with the next change of its attributes (its Attr, and transient names
/// added and removed), so that `chmod /G` (catalogue: chmod_collects_log)
/// opens a second page and collects the first in the same operation.
fn gc_ready_dir(pair: &mut Pair) -> Result<(), String> {
    let mut slots = (Slots::default(), Slots::default());
    let mut run = |pair: &mut Pair, c: Call| -> Result<(), String> {
        pair.tick();
        let e = run_call(&pair.engine, &mut slots.0, &c);
        let m = run_call(&pair.model, &mut slots.1, &c);
        if e.is_err() || m.is_err() {
            return Err(format!("{c}: engine {e:?}, model {m:?}"));
        }
        Ok(())
    };
    run(pair, Call::Mkdir { path: b"/G".to_vec(), perm: 0o755 })?;
    // A new directory's attributes are in its slot; one chmod puts an Attr
    // entry (one unit) first in its log, which the last chmod supersedes,
    // and leaves an even number of units for the add/remove pairs below,
    // so that the page fills with entries that all die.
    run(pair, Call::Chmod { path: b"/G".to_vec(), perm: 0o750 })?;
    while log_room_units(&pair.engine, b"/G")? >= 2 {
        run(pair, Call::Open { slot: 0, path: b"/G/t".to_vec(), flags: OpenFlags::WRONLY.create(), perm: 0o644 })?;
        run(pair, Call::Close { slot: 0 })?;
        run(pair, Call::Unlink { path: b"/G/t".to_vec() })?;
    }
    if log_room_units(&pair.engine, b"/G")? != 0 {
        run(pair, Call::Open { slot: 0, path: b"/G/t".to_vec(), flags: OpenFlags::WRONLY.create(), perm: 0o644 })?;
        run(pair, Call::Close { slot: 0 })?;
    }
    Ok(())
}

/// What one call did on both sides.
#[derive(Clone, Debug)]
pub struct CallOutcome {
    pub engine: CallResult,
    pub model: CallResult,
    /// The engine ran out of space where the model (whose capacity does not
    /// count log pages) did not: accepted when nothing changed.
    pub enospc_accepted: bool,
    /// Log pages the engine's garbage collection reclaimed during the call
    /// (fast GC and compaction), and logs it compacted (thorough GC): the
    /// scenarios check with these that they exercise GC.
    pub gc_pages: u64,
    pub compactions: u64,
    /// fsync-atomic epochs the engine committed during the call
    /// (`Ferrite::epoch_commits`), and files left with a pending epoch
    /// after it (`Ferrite::pending_file_count`).
    pub epoch_commits: u64,
    pub pending_files: usize,
    /// Views and patch buffers live after the call (`Ferrite::live_views`,
    /// `Ferrite::live_buffers`).
    pub live_views: usize,
    pub live_buffers: usize,
    /// Buffered mounts: batches the persister made durable during the call
    /// (back-pressure or a sync point, on the calling thread), and
    /// operations left pending (returned, not durable) after it.
    pub batches: u64,
    pub pending: u64,
}

/// A workload run on the engine (recorded) and on the model.
#[derive(Clone)]
pub struct Recording {
    pub workload: Workload,
    pub start: Arc<Start>,
    /// The pool image when recording started (after mount and setup).
    pub base: Arc<Vec<u8>>,
    pub events: Vec<Event>,
    /// Event index of the begin and end marker of each call.
    pub spans: Vec<(usize, usize)>,
    /// `states[0]`: the tree before the first call; `states[i + 1]`: after
    /// call i (the model's).
    pub states: Vec<Arc<Tree>>,
    pub state_keys: Vec<u64>,
    pub outcomes: Vec<CallOutcome>,
    /// Differences between engine and model while running (a failure).
    pub divergences: Vec<String>,
    pub layout: Layout,
    /// The fsync-atomic oracle (`crate::oracle`), when a file of the
    /// workload was ever fsync-atomic; None: the strict rule (`states`).
    /// Never on a buffered mount (the mode is not applied there).
    pub oracle: Option<Arc<Oracle>>,
    /// The prefix oracle (`crate::prefix`) of a workload on a buffered
    /// mount: the allowed states are ranges of `states`.
    pub prefix: Option<Arc<crate::prefix::Prefix>>,
}

impl Recording {
    /// The same recording with another trace (a deliberately broken copy
    /// of this one, keeping its markers): the spans are found again.
    pub fn with_events(&self, events: Vec<Event>) -> Recording {
        let mut spans = Vec::with_capacity(self.spans.len());
        for i in 0..self.spans.len() {
            let find = |label: u64| {
                events
                    .iter()
                    .position(|e| matches!(e, Event::Mark { label: l } if *l == label))
                    .expect("the broken trace keeps every marker")
            };
            spans.push((find(begin_mark(i)), find(end_mark(i))));
        }
        Recording { events, spans, ..self.clone() }
    }

    /// The key of allowed state `i` (an index into `states`, or into the
    /// oracle's states when there is an oracle; see `harness::allowed`).
    pub fn expected_key(&self, i: usize) -> u64 {
        match &self.oracle {
            Some(o) => o.trees[i].key,
            None => self.state_keys[i],
        }
    }

    /// Allowed state `i` (see `expected_key`).
    pub fn expected_tree(&self, i: usize) -> &Arc<Tree> {
        match &self.oracle {
            Some(o) => &o.trees[i].tree,
            None => &self.states[i],
        }
    }

    /// What allowed state `i` is, for messages.
    pub fn expected_name(&self, i: usize) -> String {
        match &self.oracle {
            Some(o) => o.trees[i].name.clone(),
            None if i == 0 => "the state before the first call".into(),
            None => format!("the state after call {} `{}`", i - 1, self.workload.calls[i - 1]),
        }
    }

    /// The persistence checker's report on this recording (with the
    /// fsync-atomic rules when there is an oracle).
    pub fn pcheck(&self) -> crate::pcheck::Report {
        if let Some(p) = &self.prefix {
            return crate::pcheck::check_modes(&self.base, &self.events, &self.layout, &p.modes());
        }
        match &self.oracle {
            Some(o) => crate::pcheck::check_modes(&self.base, &self.events, &self.layout, &o.modes),
            None => crate::pcheck::check(&self.base, &self.events, &self.layout),
        }
    }

    /// The log entries call `i` staged, decoded from its trace (each entry
    /// is written by one store at a 64-byte boundary: a streaming store in
    /// strict mode, a cached one inside a buffered deferral), with the pool
    /// offset of each.
    pub fn staged_entries(&self, i: usize) -> Vec<(u64, ferrite::format::Entry)> {
        let (b, e) = self.spans[i];
        let mut out = Vec::new();
        for ev in &self.events[b..e] {
            if let Event::Store { offset, data } | Event::NtStore { offset, data } = ev {
                if offset % 64 == 0 && data.len() >= 64 && data.len() % 64 == 0 {
                    if let Ok((entry, _, len)) = ferrite::format::Entry::decode(data) {
                        if len == data.len() {
                            out.push((*offset, entry));
                        }
                    }
                }
            }
        }
        out
    }

    /// The calls whose span contains event index `at` (strictly inside) or
    /// ends at it: `(call, returned)`.
    pub fn call_at(&self, at: usize) -> Option<(usize, bool)> {
        for (i, &(b, e)) in self.spans.iter().enumerate() {
            if at > b && at < e {
                return Some((i, false));
            }
            if at == e {
                return Some((i, true));
            }
        }
        None
    }
}

fn same_result(call: &Call, e: &CallResult, m: &CallResult) -> bool {
    match (e, m) {
        (Ok(a), Ok(b)) => matches!(call, Call::Open { .. }) || a == b,
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

/// Run `w` on the start image: mount it, run the setup on both sides, start
/// recording, then run each call between markers and record the model's
/// state after it. The engine is dropped at the end (a crash).
pub fn record(start: &Arc<Start>, w: &Workload) -> Recording {
    record_on(start, w, Backing::Heap)
}

/// What a recorded run's pool is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A heap pool: views and patch buffers are anonymous memory with
    /// copied bytes, and a patch streams the buffer into its pool pages.
    Heap,
    /// A pool file in /dev/shm (unlinked once mapped): views map the
    /// pool's pages, a patch buffer is pool pages mapped writable, and a
    /// patch writes the buffer's lines back (`Pmem::adopt_buffer`, the
    /// mapped branch, recorded as stores of the lines' bytes then flushes).
    /// A page a view holds that is changed shows in the live view check.
    File,
}

/// A recording pool of `backing` holding `image`.
fn recording_pool(image: &[u8], backing: Backing) -> Pmem {
    match backing {
        Backing::Heap => Pmem::recording_from_image(image),
        Backing::File => {
            let p = file_pool(image);
            p.start_recording();
            p
        }
    }
}

/// A pool file in /dev/shm (or the temporary directory) holding `image`,
/// mapped and unlinked.
fn file_pool(image: &[u8]) -> Pmem {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("ferrite-crashcheck-rec-{}-{n}.pool", std::process::id()));
    std::fs::write(&path, image).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    let p = Pmem::open_file(&path, 0).unwrap_or_else(|e| panic!("mapping {}: {e}", path.display()));
    let _ = std::fs::remove_file(&path);
    p
}

/// `image` mounted for workload `w` on a pool of `backing`, not recording
/// yet (a crash's image is recovered).
fn mount_for(image: &[u8], backing: Backing, clock: &Arc<ManualClock>, w: &Workload) -> Session {
    let pool = match backing {
        Backing::Heap => Pmem::from_image(image),
        Backing::File => file_pool(image),
    };
    Session::mount(pool, &workload_mount_options(clock, w.buffered))
        .unwrap_or_else(|e| panic!("mount for workload {}: {e}", w.id))
}

/// [`record`] on a pool of `backing`.
pub fn record_on(start: &Arc<Start>, w: &Workload, backing: Backing) -> Recording {
    let clock = clock_at(T_CALL - 10);
    let engine = mount_for(&start.image, backing, &clock, w);
    let model = ModelFs::from_state(start.model.clone(), clock.clone());
    let layout = engine.layout();
    let mut es = Slots::default();
    let mut ms = Slots::default();
    let mut divergences = Vec::new();
    let mut tracker = Tracker::new();
    for (i, c) in w.prepare.iter().enumerate() {
        clock.set(TimeSpec { sec: T_CALL - 8, nsec: i as u32 });
        let e = run_call(&engine, &mut es, c);
        let plan = tracker.plan(&model, &ms, c);
        let m = run_call(&model, &mut ms, c);
        tracker.settle(&model, &ms, plan, m.is_ok());
        if !same_result(c, &e, &m) {
            divergences.push(format!("preparing call {i} {c}: engine {e:?}, model {m:?}"));
        }
    }
    let mut engine = engine;
    for (i, c) in w.setup.iter().enumerate() {
        clock.set(TimeSpec { sec: T_CALL - 5, nsec: i as u32 });
        if *c == Call::CrashRemount {
            // Every returned operation durable, the engine dropped without
            // an unmount, and the pool mounted again: recovery runs, and
            // the recorded calls meet the engine it left. The model's
            // state is that of the operations made durable; its
            // descriptors are closed, as the crash closed the engine's.
            if let Err(e) = engine.engine().sync_all() {
                divergences.push(format!("setup call {c}: sync_all before the crash failed: {e:?}"));
            }
            let image = engine.pmem().image();
            drop(engine);
            engine = mount_for(&image, backing, &clock, w);
            assert!(engine.engine().mount_report().recovered, "the mount after a crash did not recover");
            // Everything durable, as after a sync, for the fsync-atomic
            // oracle's bookkeeping.
            let plan = tracker.plan(&model, &ms, c);
            tracker.settle(&model, &ms, plan, true);
            es.reopen();
            model.close_all();
            ms.reopen();
            continue;
        }
        let e = run_call(&engine, &mut es, c);
        let plan = tracker.plan(&model, &ms, c);
        let m = run_call(&model, &mut ms, c);
        tracker.settle(&model, &ms, plan, m.is_ok());
        if !same_result(c, &e, &m) || c.may_modify() {
            divergences
                .push(format!("setup call {c}: engine {e:?}, model {m:?} (setup calls must open existing files)"));
        }
    }
    // On a buffered mount the preparing calls are made durable before
    // recording starts: the base image is the durable state.
    if w.buffered.is_some() {
        if let Err(e) = engine.engine().persist_now() {
            divergences.push(format!("persist_now after the preparing calls failed: {e:?}"));
        }
    }
    let mut prefix = crate::prefix::Prefix::default();
    let mut pmem = engine.pmem().clone();
    let base = Arc::new(pmem.image());
    let first = Arc::new(model.tree());
    let mut states = vec![first.clone()];
    let mut state_keys = vec![tree_key(&first)];
    tracker.begin(&model, &ms, &first, state_keys[0]);
    let mut spans = Vec::with_capacity(w.calls.len());
    let mut outcomes = Vec::with_capacity(w.calls.len());
    let mut count = 0usize;
    let mut panicked = None;
    pmem.start_recording();
    let mut events: Vec<Event> = Vec::new();
    for (i, c) in w.calls.iter().enumerate() {
        clock.set(TimeSpec { sec: T_CALL + i as i64, nsec: 500 });
        pmem.mark(begin_mark(i));
        let mut carried = Vec::new();
        let mut unmount_gc_pages = 0;
        assert!(*c != Call::CrashRemount, "workload {}: a crash and mount is a setup call", w.id);
        if *c == Call::Remount {
            // A clean unmount, then a mount of the same pool (continuing
            // the trace on a new recording pool that starts from the image
            // the unmount left).
            match remount(engine, &clock, backing, w.buffered) {
                Ok((fs, ev, collected)) => {
                    carried = ev;
                    engine = fs;
                    pmem = engine.pmem().clone();
                    es.reopen();
                    unmount_gc_pages = collected;
                }
                Err(m) => panic!("remount in workload {}: {m}", w.id),
            }
        }
        let gc_before = (engine.gc_pages_collected(), engine.log_compactions(), engine.epoch_commits());
        let batches_before = engine.engine().buffered_stats().batches;
        let slots_before = es.clone();
        let e = match crate::quiet::catch(|| run_call(&engine, &mut es, c)) {
            Ok(r) => r,
            Err(p) => {
                // The engine's state is unknown after a panic: stop here.
                pmem.mark(end_mark(i));
                divergences.push(format!("call {i} {c}: the engine panicked: {p}"));
                panicked = Some(i);
                Err(Errno::EIO)
            }
        };
        if panicked.is_none() {
            pmem.mark(end_mark(i));
        }
        let gc_pages = unmount_gc_pages + engine.gc_pages_collected().saturating_sub(gc_before.0);
        let compactions = engine.log_compactions().saturating_sub(gc_before.1);
        let epoch_commits = engine.epoch_commits().saturating_sub(gc_before.2);
        let pending_files = engine.pending_file_count();
        let live_views = engine.live_views();
        let live_buffers = engine.live_buffers();
        let stats = engine.engine().buffered_stats();
        let batches = stats.batches.saturating_sub(batches_before);
        let pending = stats.pending_now;
        prefix.push(panicked.is_none() && crate::prefix::is_sync_point(c, &slots_before, &e));
        let before_model = (model.snapshot(), ms.clone());
        let plan = tracker.plan(&model, &ms, c);
        let m = run_call(&model, &mut ms, c);
        if *c == Call::Remount {
            model.close_all();
            ms.reopen();
        }
        let mut enospc_accepted = false;
        if e == Err(Errno::ENOSPC) && m != Err(Errno::ENOSPC) && c.never_enospc() {
            divergences.push(format!("call {i} {c}: ENOSPC from a commit point, which never fails for lack of space"));
        } else if e == Err(Errno::ENOSPC) && m != Err(Errno::ENOSPC) {
            model.restore(before_model.0);
            ms = before_model.1;
            enospc_accepted = true;
        } else if !same_result(c, &e, &m) && panicked.is_none() {
            divergences.push(format!("call {i} {c}: engine returned {e:?}, the model {m:?}"));
        }
        let mt = Arc::new(model.tree());
        let mk = tree_key(&mt);
        let walked = if panicked.is_none() {
            crate::quiet::catch(|| tree_of(&engine)).unwrap_or_else(|p| {
                panicked = Some(i);
                Err(Errno::EIO)
                    .inspect_err(|_| divergences.push(format!("after call {i} {c}: reading the tree panicked: {p}")))
            })
        } else {
            Ok(mt.as_ref().clone())
        };
        match walked {
            Ok(et) => {
                if tree_key(&et) != mk {
                    divergences.push(format!(
                        "after call {i} {c} (engine {e:?}, model {m:?}) the engine's tree differs from the model's:\n{}",
                        diff_trees(&mt, &et)
                    ));
                }
            }
            Err(err) => divergences.push(format!("after call {i} {c}: tree walk failed: {err:?}")),
        }
        // Every live view still shows the bytes of its moment.
        if panicked.is_none() {
            for d in crate::workload::view_differences(&es, &ms) {
                divergences.push(format!("after call {i} {c}: {d}"));
            }
        }
        // Events so far, with marker positions.
        carried.append(&mut pmem.take_events());
        let mut chunk = carried;
        let b = chunk
            .iter()
            .position(|ev| matches!(ev, Event::Mark { label } if *label == begin_mark(i)))
            .expect("begin marker recorded");
        let en = chunk
            .iter()
            .position(|ev| matches!(ev, Event::Mark { label } if *label == end_mark(i)))
            .expect("end marker recorded");
        spans.push((count + b, count + en));
        count += chunk.len();
        events.append(&mut chunk);
        tracker.call(&model, &ms, plan, m.is_ok() && !enospc_accepted, &mt, mk);
        states.push(mt);
        state_keys.push(mk);
        outcomes.push(CallOutcome {
            engine: e,
            model: m,
            enospc_accepted,
            gc_pages,
            compactions,
            epoch_commits,
            pending_files,
            live_views,
            live_buffers,
            batches,
            pending,
        });
        if panicked.is_some() {
            break;
        }
    }
    events.append(&mut pmem.stop_recording());
    drop(engine);
    let mut workload = w.clone();
    workload.calls.truncate(spans.len());
    // A buffered mount does not apply the fsync-atomic mode: the prefix
    // oracle replaces the tracker's.
    let (oracle, prefix) = match w.buffered {
        Some(_) => (None, Some(Arc::new(prefix))),
        None => (tracker.finish().map(Arc::new), None),
    };
    Recording {
        workload,
        start: start.clone(),
        base,
        events,
        spans,
        states,
        state_keys,
        outcomes,
        divergences,
        layout,
        oracle,
        prefix,
    }
}

/// Unmount cleanly (recorded), then mount the resulting image on a new
/// recording pool. Returns the new mount, the unmount's events and the
/// dead log pages the unmount collected (`Ferrite::collect_every_log`;
/// counted by fsck in the images before and after, since the engine that
/// counted them is gone with the unmount).
fn remount(
    fs: Session,
    clock: &Arc<ManualClock>,
    backing: Backing,
    buffered: Option<crate::workload::Buffering>,
) -> Result<(Session, Vec<Event>, u64), String> {
    let old = fs.pmem().clone();
    // On a buffered mount the image before the unmount holds only what is
    // durable, so the count is a floor there (no scenario checks it).
    let dead = |image: &[u8]| ferrite::fsck::check(&Pmem::from_image(image)).map(|r| r.dead_log_pages);
    let dead_before = dead(&old.image()).map_err(|e| format!("fsck before unmount: {e}"))?;
    fs.unmount().map_err(|e| format!("unmount: {e:?}"))?;
    let events = old.stop_recording();
    let image = old.image();
    let dead_after = dead(&image).map_err(|e| format!("fsck after unmount: {e}"))?;
    let fs = Session::mount(recording_pool(&image, backing), &workload_mount_options(clock, buffered))
        .map_err(|e| format!("mount: {e}"))?;
    Ok((fs, events, dead_before.saturating_sub(dead_after)))
}

/// Apply one call to the model given what the engine returned for it
/// (ENOSPC from the engine is accepted when the model would have
/// succeeded: nothing is applied). Err when the results disagree; Ok(true)
/// when the call succeeded and the model kept its effect.
pub fn record_model_call(
    model: &ModelFs,
    clock: &ManualClock,
    slots: &mut Slots,
    call: &Call,
    t: TimeSpec,
    engine: &CallResult,
) -> Result<bool, String> {
    clock.set(t);
    let before = (model.snapshot(), slots.clone());
    let m = run_call(model, slots, call);
    if *engine == Err(Errno::ENOSPC) && m != Err(Errno::ENOSPC) && !call.never_enospc() {
        model.restore(before.0);
        *slots = before.1;
        return Ok(false);
    }
    if same_result(call, engine, &m) {
        Ok(m.is_ok())
    } else {
        Err(format!("engine returned {engine:?}, the model {m:?}"))
    }
}
