//! Recovering one crash image and checking everything that does not depend
//! on which state is expected:
//!
//! 1. fsck of the image (it recovers a private copy) finds it clean;
//! 2. mount recovers it with no error and no panic (recovery is recorded);
//! 3. the tree is read back through the path API;
//! 4. crash during recovery: recovery's own trace is crashed at each of its
//!    fences (and at its end), with the candidates of [`crate::crash`]; each
//!    such image must mount again, fsck clean, and give the same tree;
//! 5. usability: in every directory a file with a 255-byte name (the
//!    largest directory entry, so that a log left mid-extension is extended)
//!    is created, written, read back, renamed, read, deleted, and a
//!    directory made and removed; every regular file that holds data gets
//!    a small write of the bytes it already has (an inline entry appended
//!    where recovery left the log's tail, over whatever an interrupted
//!    operation or an uncommitted fsync-atomic epoch staged past it) and an
//!    fsync; then everything is deleted, and the free
//!    pages and inodes must come back to the figures of a freshly formatted
//!    pool of the same geometry (less any extra log pages the root
//!    directory keeps); a clean unmount, fsck, and a clean remount must
//!    agree.

use crate::crash::{Caps, PointKind, Sim};
use crate::exec::{clock_at, empty_figures, mount_options, EmptyFigures, Geometry, T_CHECK};
use crate::hash::tree_key;
use crate::quiet;
use crate::workload::{long_name, pattern};
use ferrite::{Errno, FileType, OpenFlags, PathFs, RenameFlags, Session, Whence};
use ferrite_model::{diff_trees, tree_of, Tree};
use ferrite_pmem::{Event, Pmem};
use std::collections::HashSet;
use std::sync::Arc;

/// Which recoveries are crashed (depth one: the second recovery is not
/// crashed again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryCrash {
    Off,
    /// Only recoveries that change more than the superblock (that roll back
    /// a journal transaction or free orphans): a recovery that only marks
    /// the pool mounted writes the two superblock copies, which every
    /// crashed recovery of the other kind covers too.
    Busy,
    All,
}

/// What to check beyond mount + fsck + tree.
#[derive(Clone, Copy, Debug)]
pub struct VerifyOpts {
    pub usability: bool,
    pub recovery_crash: RecoveryCrash,
    pub recovery_caps: Caps,
}

impl VerifyOpts {
    pub const FULL: VerifyOpts = VerifyOpts {
        usability: true,
        recovery_crash: RecoveryCrash::All,
        recovery_caps: Caps { subsets: 16, torn: 6, older: 2, exhaustive_lines: 4 },
    };
}

/// A verified image.
#[derive(Clone, Debug)]
pub struct Verified {
    pub tree: Arc<Tree>,
    pub tree_key: u64,
    /// Crash images of recovery checked (after deduplication).
    pub nested_images: u64,
}

/// A failed check, with the part of a token that locates a failure inside
/// recovery (empty when it is the image itself).
#[derive(Clone, Debug)]
pub struct VerifyFailure {
    pub nested: String,
    pub message: String,
}

fn fail(message: impl Into<String>) -> VerifyFailure {
    VerifyFailure { nested: String::new(), message: message.into() }
}

/// Known engine bugs whose failures a run may be told to ignore (to look
/// for other bugs while one is being fixed): the comma-separated names in
/// `CRASHCHECK_IGNORE`. Never set in CI.
///
/// - `sb-torn`: fsck calls a superblock copy torn by an interrupted update
///   a problem, though mount uses the other copy and rewrites both;
/// - `sb-both`: two interrupted superblock updates in a row tear both
///   copies (failures saying "no usable superblock");
/// - `stale-tail`: uncommitted entries left past a log tail are replayed
///   once the log is extended (failures saying "not increasing").
pub fn ignored(name: &str) -> bool {
    static LIST: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        std::env::var("CRASHCHECK_IGNORE")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
    .iter()
    .any(|n| n == name)
}

/// Is a failure message the signature of an ignored known bug?
pub fn ignored_failure(message: &str) -> bool {
    (ignored("sb-both") && message.contains("no usable superblock"))
        || (ignored("stale-tail") && message.contains("not increasing"))
}

/// fsck of an image; Err with the report unless clean.
pub fn fsck_clean(image: &[u8]) -> Result<(), String> {
    match quiet::catch(|| ferrite::fsck::check_private(Pmem::from_image(image))) {
        Err(p) => Err(format!("fsck panicked: {p}")),
        Ok(Err(e)) => Err(format!("fsck refused the image: {e}")),
        Ok(Ok(mut r)) => {
            if ignored("sb-torn") {
                r.problems.retain(|p| !(p.starts_with("superblock copy") && p.ends_with("checksum mismatch")));
            }
            if r.is_clean() {
                Ok(())
            } else {
                Err(format!("fsck found problems:\n{r}"))
            }
        }
    }
}

/// Mount `pmem` (recovering it), catching panics.
pub fn mount(pmem: Pmem, threads: usize) -> Result<Session, String> {
    let clock = clock_at(T_CHECK);
    match quiet::catch(|| Session::mount(pmem, &mount_options(&clock, threads))) {
        Err(p) => Err(format!("mount panicked: {p}")),
        Ok(Err(e)) => Err(format!("mount failed: {e}")),
        Ok(Ok(fs)) => Ok(fs),
    }
}

/// The persistence checker over recovery's trace (the whole mount as one
/// operation): when mount returns, everything recovery wrote must be
/// flushed and fenced — a recovery step left in the cache could be undone
/// by a later crash after its effects (freed pages, say) were reused.
pub fn check_recovery_trace(image: &[u8], events: &[Event], layout: &ferrite::format::Layout) -> Result<(), String> {
    let mut wrapped = Vec::with_capacity(events.len() + 2);
    wrapped.push(Event::Mark { label: crate::exec::begin_mark(0) });
    wrapped.extend_from_slice(events);
    wrapped.push(Event::Mark { label: crate::exec::end_mark(0) });
    let r = crate::pcheck::check(image, &wrapped, layout);
    if r.violations.is_empty() {
        return Ok(());
    }
    let mut m = String::from("persistence checker on recovery's trace (events counted from the start of mount + 1):\n");
    for v in r.violations.iter().take(6) {
        m += &format!("  {v}\n");
    }
    Err(m)
}

fn tree(fs: &Session) -> Result<Tree, String> {
    quiet::catch(|| tree_of(fs))
        .map_err(|p| format!("reading the tree panicked: {p}"))?
        .map_err(|e| format!("reading the recovered tree failed: {e:?}"))
}

/// Verify one crash image (see the module comment).
pub fn verify(image: &[u8], geo: Geometry, opts: &VerifyOpts) -> Result<Verified, VerifyFailure> {
    fsck_clean(image).map_err(fail)?;
    let fs = mount(Pmem::recording_from_image(image), 1).map_err(fail)?;
    let events = fs.pmem().stop_recording();
    check_recovery_trace(image, &events, &fs.layout()).map_err(fail)?;
    let t = tree(&fs).map_err(fail)?;
    let key = tree_key(&t);
    if opts.usability {
        let figs = empty_figures(geo);
        match quiet::catch(|| usability(fs, &t, figs)) {
            Err(p) => return Err(fail(format!("usability pass panicked: {p}"))),
            Ok(Err(e)) => return Err(fail(format!("usability pass: {e}"))),
            Ok(Ok(())) => {}
        }
    } else {
        drop(fs);
    }
    let mut nested_images = 0;
    let busy = || events.iter().any(|e| e.stored_bytes().is_some_and(|(off, _)| off >= 2 * ferrite::format::PAGE_SIZE));
    let crash_it = match opts.recovery_crash {
        RecoveryCrash::Off => false,
        RecoveryCrash::Busy => busy(),
        RecoveryCrash::All => true,
    };
    if crash_it {
        nested_images = crash_recovery(image, &events, key, &t, &opts.recovery_caps, None)?;
    }
    Ok(Verified { tree: Arc::new(t), tree_key: key, nested_images })
}

/// Crash the recovery of `image` (whose trace is `events`) at each of its
/// crash points; each image must recover to `expect`. With `only`, check
/// just that point and label (a replay). Returns the images checked.
pub fn crash_recovery(
    image: &[u8],
    events: &[Event],
    expect_key: u64,
    expect: &Tree,
    caps: &Caps,
    only: Option<(usize, &str)>,
) -> Result<u64, VerifyFailure> {
    let mut seen = HashSet::new();
    let mut sim = Sim::new(image, events);
    let mut checked = 0;
    while let Some(kind) = sim.next_point() {
        let at = sim.position();
        if kind != PointKind::Fence && kind != PointKind::End {
            continue;
        }
        if only.is_some_and(|(p, _)| p != at) {
            continue;
        }
        for c in sim.candidates(caps, at as u64) {
            if only.is_some_and(|(_, l)| l != c.label) {
                continue;
            }
            if !seen.insert(sim.key(&c)) {
                continue;
            }
            checked += 1;
            let img = sim.build(&c);
            let r = (|| -> Result<(), String> {
                fsck_clean(&img)?;
                let fs = mount(Pmem::from_image(&img), 1)?;
                let t = tree(&fs)?;
                if tree_key(&t) != expect_key {
                    return Err(format!(
                        "the state differs from the one the uninterrupted recovery gave:\n{}",
                        diff_trees(expect, &t)
                    ));
                }
                Ok(())
            })();
            if let Err(m) = r {
                return Err(VerifyFailure {
                    nested: format!("r{at}:{}", c.label),
                    message: format!(
                        "recovery crashed before its event {at} ({kind:?}, image {}), then recovered again: {m}",
                        c.label
                    ),
                });
            }
        }
    }
    Ok(checked)
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn show(p: &[u8]) -> String {
    if p.len() > 48 {
        format!("{}...", p[..40].escape_ascii())
    } else {
        p.escape_ascii().to_string()
    }
}

fn read_all(fs: &dyn PathFs, path: &[u8]) -> Result<Vec<u8>, Errno> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
    let size = fs.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size];
    let mut got = 0;
    while got < size {
        let n = fs.pread(fd, &mut buf[got..], got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    fs.close(fd)?;
    buf.truncate(got);
    Ok(buf)
}

/// The usability pass (see the module comment). Consumes the mount.
pub fn usability(fs: Session, t: &Tree, figs: EmptyFigures) -> Result<(), String> {
    let e = |what: String| move |err: Errno| format!("{what}: {err:?}");
    let dirs: Vec<&Vec<u8>> = t.iter().filter(|(_, n)| n.kind == FileType::Directory).map(|(p, _)| p).collect();
    let data = pattern(0x05AB, 6000);
    // A nearly full pool: delete the biggest files first to make room for
    // the pass (ENOSPC would be the right answer otherwise). Pages count
    // beyond the removal reserve, which the pass's creates may not take.
    let mut deleted: HashSet<&Vec<u8>> = HashSet::new();
    let mut by_size: Vec<(&Vec<u8>, u64)> =
        t.iter().filter(|(_, n)| n.kind != FileType::Directory).map(|(p, n)| (p, n.blocks.unwrap_or(0))).collect();
    by_size.sort_by_key(|&(p, b)| (std::cmp::Reverse(b), p.clone()));
    for (p, _) in by_size {
        if fs.available_pages() >= 24 && fs.free_inodes() >= 6 {
            break;
        }
        fs.unlink(p).map_err(e(format!("delete {} to make room", show(p))))?;
        deleted.insert(p);
    }
    for d in &dirs {
        let long = join(d, long_name('u').as_bytes());
        let fd =
            fs.open(&long, OpenFlags::RDWR.create().excl(), 0o640).map_err(e(format!("create {}", show(&long))))?;
        fs.pwrite(fd, &data, 100).map_err(e(format!("write {}", show(&long))))?;
        let mut back = vec![0u8; 6100];
        let n = fs.pread(fd, &mut back, 0).map_err(e(format!("read {}", show(&long))))?;
        if n != 6100 || back[..100].iter().any(|&b| b != 0) || back[100..] != data[..] {
            return Err(format!("{}: read back wrong data", show(&long)));
        }
        fs.close(fd).map_err(e("close".into()))?;
        let short = join(d, b"zz_v");
        fs.rename(&long, &short, RenameFlags::Replace).map_err(e(format!(
            "rename {} -> {}",
            show(&long),
            show(&short)
        )))?;
        let again = read_all(&fs, &short).map_err(e(format!("read {}", show(&short))))?;
        if again != back {
            return Err(format!("{}: data changed by rename", show(&short)));
        }
        fs.unlink(&short).map_err(e(format!("unlink {}", show(&short))))?;
        let sub = join(d, b"zz_d");
        fs.mkdir(&sub, 0o700).map_err(e(format!("mkdir {}", show(&sub))))?;
        fs.rmdir(&sub).map_err(e(format!("rmdir {}", show(&sub))))?;
    }
    // Every regular file that holds data: its first bytes written again
    // (the same bytes: content, size and pages unchanged), then fsync. The
    // entry lands at the tail recovery found, over anything staged past it
    // (an uncommitted fsync-atomic epoch, an interrupted operation).
    let mut files = HashSet::new();
    for (p, n) in t {
        if n.kind != FileType::Regular || deleted.contains(p) || n.size == 0 {
            continue;
        }
        let ino = fs.lstat(p).map_err(e(format!("lstat {}", show(p))))?.ino;
        if !files.insert(ino) {
            continue;
        }
        let fd = fs.open(p, OpenFlags::RDWR, 0).map_err(e(format!("open {}", show(p))))?;
        if let Ok(at) = fs.lseek(fd, 0, Whence::Data) {
            if at < n.size {
                let len = (n.size - at).min(100) as usize;
                let mut same = vec![0u8; len];
                fs.pread(fd, &mut same, at).map_err(e(format!("read {}", show(p))))?;
                fs.pwrite(fd, &same, at).map_err(e(format!("rewrite {}", show(p))))?;
                fs.fsync(fd).map_err(e(format!("fsync {}", show(p))))?;
            }
        }
        fs.close(fd).map_err(e("close".into()))?;
    }
    // A clean unmount, fsck and clean remount: every log the pass extended
    // is replayed from media (lazily, at first access) and checked by fsck,
    // and the tree must be what recovery gave (less what was deleted to
    // make room).
    let pmem = fs.pmem().clone();
    fs.unmount().map_err(e("clean unmount after the pass".into()))?;
    let img = pmem.image();
    drop(pmem);
    fsck_clean(&img).map_err(|m| format!("after the per-directory pass and a clean unmount: {m}"))?;
    let fs =
        mount(Pmem::from_image(&img), 1).map_err(|m| format!("clean remount after the per-directory pass: {m}"))?;
    let back = tree_of(&fs).map_err(e("tree after the per-directory pass and a remount".into()))?;
    // Directory times changed (entries came and went), and file times (the
    // rewrites): compare the rest.
    let strip = |t: &Tree, skip: &HashSet<&Vec<u8>>| -> Tree {
        t.iter()
            .filter(|(p, _)| !skip.contains(p))
            .map(|(p, n)| {
                let mut n = n.clone();
                if n.kind == FileType::Directory || n.kind == FileType::Regular {
                    n.mtime = Default::default();
                    n.ctime = Default::default();
                }
                (p.clone(), n)
            })
            .collect()
    };
    let expect = strip(t, &deleted);
    let back = strip(&back, &HashSet::new());
    if deleted.is_empty() && back != expect {
        return Err(format!(
            "the per-directory pass (create, write, rename, delete) changed the tree, seen after a clean remount:\n{}",
            diff_trees(&expect, &back)
        ));
    }
    // Delete everything: reverse path order puts every path before its
    // parent directory.
    for (p, n) in t.iter().rev() {
        if p.as_slice() == b"/" || deleted.contains(p) {
            continue;
        }
        let r = if n.kind == FileType::Directory { fs.rmdir(p) } else { fs.unlink(p) };
        r.map_err(e(format!("delete {}", show(p))))?;
    }
    let check_figures = |fs: &Session, when: &str| -> Result<(), String> {
        let left = tree_of(fs).map_err(e(format!("tree {when}")))?;
        if left.len() != 1 {
            return Err(format!("{when}: {} paths left after deleting everything", left.len() - 1));
        }
        let root_log = fs.stat(b"/").map_err(e("stat /".into()))?.blocks / 8;
        let extra_log = root_log.saturating_sub(figs.root_log_pages);
        if fs.free_inodes() != figs.free_inodes {
            return Err(format!(
                "{when}: {} free inodes with everything deleted; a fresh pool has {} (leaked or doubly free inodes)",
                fs.free_inodes(),
                figs.free_inodes
            ));
        }
        if fs.free_pages() + extra_log != figs.free_pages {
            return Err(format!(
                "{when}: {} free pages (+ {extra_log} extra root log pages) with everything deleted; a fresh pool has {} (leaked or doubly free pages)",
                fs.free_pages(),
                figs.free_pages
            ));
        }
        let st = fs.statfs().map_err(e("statfs".into()))?;
        if st.blocks_free != fs.free_pages() || st.files_free != fs.free_inodes() {
            return Err(format!(
                "{when}: statfs says {} free blocks / {} free files, the allocator {} / {}",
                st.blocks_free,
                st.files_free,
                fs.free_pages(),
                fs.free_inodes()
            ));
        }
        Ok(())
    };
    check_figures(&fs, "after deleting everything")?;
    let pmem = fs.pmem().clone();
    fs.unmount().map_err(e("clean unmount".into()))?;
    let img = pmem.image();
    drop(pmem);
    fsck_clean(&img).map_err(|m| format!("after the usability pass and a clean unmount: {m}"))?;
    let fs = mount(Pmem::from_image(&img), 1).map_err(|m| format!("clean remount after the usability pass: {m}"))?;
    if fs.mount_report().recovered {
        return Err("the clean remount ran recovery (the clean unmount did not stick)".into());
    }
    check_figures(&fs, "after a clean remount")?;
    Ok(())
}
