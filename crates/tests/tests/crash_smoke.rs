//! Crash consistency of every operation type, at every fence, with the two
//! images that bound what the hardware may leave (and images in between).
//!
//! What this proves: for each operation in the list below (create, mkdir,
//! every kind of write, truncate, fallocate, link, unlink (also of an open
//! file, then written and closed), rename in all its forms, symlink, rmdir,
//! chmod, chown, utimens, fsync, log extensions and log GC of files and
//! directories, and a few short sequences), run on a small pool holding a
//! known tree, a crash at any fence, or at any step boundary, leaves a pool
//! that
//!
//! - mounts (recovery runs, nothing panics),
//! - fsck finds clean (before and after recovery),
//! - holds exactly the tree from before the operation or the tree from after
//!   it (a crash inside an operation shows it all or not at all), and exactly
//!   the tree after it once the operation has returned (strict mode: every
//!   operation is durable when it returns),
//! - stays usable: a new file can be written, the pool unmounted cleanly and
//!   fsck still finds it clean, and the recovered tree comes back unchanged.
//!
//! The images come from recording every store, flush and fence of the
//! operation (`ferrite_tests::crash`): "all pending persisted" (memory as it
//! is), "nothing pending persisted" (only stores that were flushed and
//! fenced, or streamed and fenced), and, before each fence, images where
//! only some in-flight cache lines persisted (each line alone and all but
//! each line when there are few, plus seeded random subsets). Identical
//! images are recovered once.
//!
//! Also here: random sequences of calls crashed the same way
//! (`crash_random_sequences`); crashes during recovery itself, at each of
//! its fences (`crash_during_recovery_of_journaled_ops`); log-GC scenarios
//! followed by a crash and a clean remount (`*_log_gc_*`); and a check that
//! the checker catches a trace with a fence removed.
//!
//! Replay: one operation `FERRITE_CRASH_OP=<name>`, one crash point
//! `FERRITE_CRASH_EVENT=<event index>`, the random subsets and sequences
//! `FERRITE_SEED=<seed>` (all printed on failure); one random sequence
//! `FERRITE_CRASH_SEQ=<n>`. `FERRITE_CRASH_SUBSETS` (default 4) and
//! `FERRITE_CRASH_SEQS` (default 24) widen the search.

use ferrite::{Fd, FormatOptions, ManualClock, MountOptions, OpenFlags, PathFs, RenameFlags, Session, TimeSet};
use ferrite_pmem::{Event, Pmem};
use ferrite_tests::crash::{Image, PointKind, Simulator};
use ferrite_tests::{diff_trees, manual_clock, pattern, put, tree_of, ts, Tree};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

const POOL_PAGES: u64 = 512;
const T_FORMAT: i64 = 1_000_000;
const T_SETUP: i64 = 2_000_000;
const T_OP: i64 = 3_000_000;
const T_PROBE: i64 = 4_000_000;
const END_MARK: u64 = u64::MAX;

/// Descriptors an operation opens in its setup or its steps.
#[derive(Default)]
struct Ctx {
    fds: Vec<Fd>,
}

type StepFn = Box<dyn Fn(&Session, &mut Ctx)>;

struct Op {
    name: &'static str,
    /// Runs before recording starts (not part of the operation).
    setup: StepFn,
    /// The operation: one or more calls, each a step; a crash inside step
    /// i may show the tree before or after it.
    steps: Vec<(&'static str, StepFn)>,
}

fn must<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

fn open(fs: &Session, path: &str, flags: OpenFlags) -> Fd {
    must(fs.open(path.as_bytes(), flags, 0o644), &format!("open {path}"))
}

fn op(name: &'static str, setup: StepFn, steps: Vec<(&'static str, StepFn)>) -> Op {
    Op { name, setup, steps }
}

fn no_setup() -> StepFn {
    Box::new(|_, _| {})
}

/// A setup that opens `path` with `flags` as descriptor 0.
fn setup_open(path: &'static str, flags: OpenFlags) -> StepFn {
    Box::new(move |fs, cx| cx.fds.push(open(fs, path, flags)))
}

fn step(name: &'static str, f: impl Fn(&Session, &mut Ctx) + 'static) -> (&'static str, StepFn) {
    (name, Box::new(f))
}

fn pwrite_step(name: &'static str, fd_index: usize, len: usize, at: u64, tag: u64) -> (&'static str, StepFn) {
    step(name, move |fs, cx| {
        let data = pattern(tag, len);
        let n = must(fs.pwrite(cx.fds[fd_index], &data, at), "pwrite");
        assert_eq!(n, len);
    })
}

fn close_step(fd_index: usize) -> (&'static str, StepFn) {
    step("close", move |fs, cx| must(fs.close(cx.fds[fd_index]), "close"))
}

fn rename_op(name: &'static str, from: &'static str, to: &'static str, flags: RenameFlags) -> Op {
    op(
        name,
        no_setup(),
        vec![step("rename", move |fs, _| {
            must(fs.rename(from.as_bytes(), to.as_bytes(), flags), &format!("rename {from} {to} {flags:?}"))
        })],
    )
}

/// The starting tree every operation runs on.
fn build_initial(fs: &Session, clock: &ManualClock) {
    let mut t = T_FORMAT;
    let mut tick = || {
        t += 1;
        clock.set(ts(t, 7));
    };
    for d in ["/A", "/B", "/A/C", "/B/D"] {
        tick();
        must(fs.mkdir(d.as_bytes(), 0o755), d);
    }
    tick();
    must(put(fs, b"/foo", &pattern(1, 8192)), "/foo");
    tick();
    must(put(fs, b"/A/bar", &pattern(2, 100)), "/A/bar");
    tick();
    must(put(fs, b"/B/empty", b""), "/B/empty");
    tick();
    must(put(fs, b"/B/t", &pattern(3, 5000)), "/B/t");
    tick();
    // /holes: page 0 and part of page 3 written, pages 1 and 2 holes.
    let fd = open(fs, "/holes", OpenFlags::RDWR.create());
    must(fs.pwrite(fd, &pattern(4, 4096), 0), "holes p0");
    must(fs.pwrite(fd, &pattern(5, 100), 3 * 4096 + 50), "holes p3");
    must(fs.close(fd), "close");
    tick();
    must(fs.symlink(b"A/bar", b"/sym"), "symlink");
    tick();
    must(fs.link(b"/foo", b"/A/C/hl"), "link");
}

/// Make directory /G's log two full pages: page 1 holds only dead entries
/// (its Attr superseded, every add cancelled), page 2 holds the removes of
/// x and y, which cancel adds on page 1, and a live Attr. The next entry
/// extends the log and collects page 1.
fn fill_dir_logs(fs: &Session) {
    must(fs.mkdir(b"/G", 0o755), "mkdir /G");
    let create = |p: &str| {
        let fd = open(fs, p, OpenFlags::WRONLY.create());
        must(fs.close(fd), "close");
    };
    create("/G/x");
    for i in 0..30 {
        let p = format!("/G/p{i}");
        create(&p);
        must(fs.unlink(p.as_bytes()), "unlink");
    }
    create("/G/y");
    must(fs.unlink(b"/G/x"), "unlink x");
    must(fs.unlink(b"/G/y"), "unlink y");
    must(fs.chmod(b"/G", 0o700), "chmod /G");
    for i in 0..30 {
        let p = format!("/G/q{i}");
        create(&p);
        must(fs.unlink(p.as_bytes()), "unlink");
    }
}

fn ops() -> Vec<Op> {
    use RenameFlags::*;
    let rdwr = OpenFlags::RDWR;
    vec![
        // ---- namespace: create, mkdir, symlink, link, unlink, rmdir ----
        op(
            "create",
            no_setup(),
            vec![step("open O_CREAT", |fs, _| {
                let fd = open(fs, "/A/new", OpenFlags::RDWR.create());
                must(fs.close(fd), "close");
            })],
        ),
        op(
            "create_excl_in_root",
            no_setup(),
            vec![step("open O_CREAT|O_EXCL", |fs, _| {
                let fd = open(fs, "/new2", OpenFlags::WRONLY.create().excl());
                must(fs.close(fd), "close");
            })],
        ),
        op("mkdir", no_setup(), vec![step("mkdir", |fs, _| must(fs.mkdir(b"/B/newdir", 0o750), "mkdir"))]),
        op("symlink", no_setup(), vec![step("symlink", |fs, _| must(fs.symlink(b"../foo", b"/B/sl"), "symlink"))]),
        op(
            "symlink_long_target",
            no_setup(),
            vec![step("symlink", |fs, _| {
                let target = vec![b'x'; 3000];
                must(fs.symlink(&target, b"/A/sl2"), "symlink")
            })],
        ),
        op("link", no_setup(), vec![step("link", |fs, _| must(fs.link(b"/A/bar", b"/B/bar2"), "link"))]),
        op("link_to_symlink", no_setup(), vec![step("link", |fs, _| must(fs.link(b"/sym", b"/B/sym2"), "link"))]),
        op("unlink_last_link", no_setup(), vec![step("unlink", |fs, _| must(fs.unlink(b"/A/bar"), "unlink"))]),
        op("unlink_not_last_link", no_setup(), vec![step("unlink", |fs, _| must(fs.unlink(b"/foo"), "unlink"))]),
        op("unlink_symlink", no_setup(), vec![step("unlink", |fs, _| must(fs.unlink(b"/sym"), "unlink"))]),
        op(
            "unlink_open_then_close",
            setup_open("/A/bar", OpenFlags::RDONLY),
            vec![step("unlink", |fs, _| must(fs.unlink(b"/A/bar"), "unlink")), close_step(0)],
        ),
        op(
            "unlink_open_write_close",
            setup_open("/B/t", rdwr),
            vec![
                step("unlink", |fs, _| must(fs.unlink(b"/B/t"), "unlink")),
                pwrite_step("pwrite to the unlinked file", 0, 9000, 100, 50),
                close_step(0),
            ],
        ),
        op("rmdir", no_setup(), vec![step("rmdir", |fs, _| must(fs.rmdir(b"/B/D"), "rmdir"))]),
        // ---- data: writes ----
        op(
            "write_append",
            setup_open("/foo", OpenFlags::WRONLY.append()),
            vec![
                step("write O_APPEND", |fs, cx| {
                    must(fs.write(cx.fds[0], &pattern(10, 300)), "write");
                }),
                close_step(0),
            ],
        ),
        op("write_overwrite_page", setup_open("/foo", rdwr), vec![pwrite_step("pwrite 4096@4096", 0, 4096, 4096, 11)]),
        op("write_unaligned_small", setup_open("/foo", rdwr), vec![pwrite_step("pwrite 100@1000", 0, 100, 1000, 12)]),
        op("write_crossing_pages", setup_open("/foo", rdwr), vec![pwrite_step("pwrite 5000@3000", 0, 5000, 3000, 13)]),
        op(
            "write_extending_crossing",
            setup_open("/foo", rdwr),
            vec![pwrite_step("pwrite 10000@6000", 0, 10000, 6000, 14)],
        ),
        op("write_into_hole", setup_open("/holes", rdwr), vec![pwrite_step("pwrite 2000@4196", 0, 2000, 4196, 15)]),
        op(
            "write_past_eof_leaving_hole",
            setup_open("/A/bar", rdwr),
            vec![pwrite_step("pwrite 50@20000", 0, 50, 20000, 16)],
        ),
        op("write_large", setup_open("/A/bar", rdwr), vec![pwrite_step("pwrite 64KiB@0", 0, 65536, 0, 17)]),
        op(
            "write_then_fsync",
            setup_open("/foo", rdwr),
            vec![
                pwrite_step("pwrite 10@0", 0, 10, 0, 18),
                step("fsync", |fs, cx| must(fs.fsync(cx.fds[0]), "fsync")),
                step("fdatasync", |fs, cx| must(fs.fdatasync(cx.fds[0]), "fdatasync")),
            ],
        ),
        // ---- data: truncate and fallocate ----
        op(
            "truncate_grow_unaligned",
            no_setup(),
            vec![step("truncate", |fs, _| must(fs.truncate(b"/A/bar", 10_000), "truncate"))],
        ),
        op(
            "truncate_shrink_unaligned",
            no_setup(),
            vec![step("truncate", |fs, _| must(fs.truncate(b"/foo", 5000), "truncate"))],
        ),
        op(
            "truncate_shrink_into_hole",
            no_setup(),
            vec![step("truncate", |fs, _| must(fs.truncate(b"/holes", 5000), "truncate"))],
        ),
        op(
            "ftruncate_to_zero",
            setup_open("/foo", rdwr),
            vec![step("ftruncate", |fs, cx| must(fs.ftruncate(cx.fds[0], 0), "ftruncate"))],
        ),
        op(
            "open_o_trunc",
            no_setup(),
            vec![step("open O_TRUNC", |fs, _| {
                let fd = open(fs, "/B/t", OpenFlags::WRONLY.trunc());
                must(fs.close(fd), "close");
            })],
        ),
        op(
            "fallocate_default_extends",
            setup_open("/A/bar", rdwr),
            vec![step("fallocate", |fs, cx| {
                must(fs.fallocate(cx.fds[0], ferrite::FallocateMode::Default, 0, 20_000), "fallocate")
            })],
        ),
        op(
            "fallocate_keep_size",
            setup_open("/foo", rdwr),
            vec![step("fallocate", |fs, cx| {
                must(fs.fallocate(cx.fds[0], ferrite::FallocateMode::KeepSize, 8192, 8192), "fallocate")
            })],
        ),
        op(
            "fallocate_fills_holes",
            setup_open("/holes", rdwr),
            vec![step("fallocate", |fs, cx| {
                must(fs.fallocate(cx.fds[0], ferrite::FallocateMode::Default, 4096, 8192), "fallocate")
            })],
        ),
        op(
            "fallocate_grow_over_preallocated",
            Box::new(|fs, cx| {
                let fd = open(fs, "/foo", OpenFlags::RDWR);
                must(fs.fallocate(fd, ferrite::FallocateMode::KeepSize, 8192, 8192), "fallocate keep-size");
                cx.fds.push(fd);
            }),
            vec![step("fallocate (size only)", |fs, cx| {
                must(fs.fallocate(cx.fds[0], ferrite::FallocateMode::Default, 0, 12_000), "fallocate")
            })],
        ),
        // ---- rename ----
        rename_op("rename_file_same_dir", "/A/bar", "/A/baz", Replace),
        rename_op("rename_file_across_dirs", "/A/bar", "/B/bar", Replace),
        rename_op("rename_dir_across_dirs", "/A/C", "/B/C2", Replace),
        rename_op("rename_over_existing_file", "/A/bar", "/B/t", Replace),
        rename_op("rename_over_hard_link", "/A/bar", "/A/C/hl", Replace),
        rename_op("rename_over_empty_file_same_dir", "/B/t", "/B/empty", Replace),
        rename_op("rename_dir_over_empty_dir", "/A/C", "/B/D", Replace),
        rename_op("rename_noreplace", "/foo", "/B/foo2", NoReplace),
        rename_op("rename_exchange_files", "/foo", "/A/bar", Exchange),
        rename_op("rename_exchange_file_and_dir", "/A/bar", "/B/D", Exchange),
        rename_op("rename_exchange_dirs", "/A/C", "/B/D", Exchange),
        rename_op("rename_exchange_same_dir", "/B/t", "/B/empty", Exchange),
        rename_op("rename_symlink", "/sym", "/A/C/sym", Replace),
        // ---- attributes ----
        op("chmod", no_setup(), vec![step("chmod", |fs, _| must(fs.chmod(b"/foo", 0o600), "chmod"))]),
        op("chmod_dir", no_setup(), vec![step("chmod", |fs, _| must(fs.chmod(b"/A", 0o700), "chmod"))]),
        op(
            "chown",
            no_setup(),
            vec![step("chown", |fs, _| must(fs.chown(b"/A/bar", Some(1000), Some(1000)), "chown"))],
        ),
        op(
            "utimens",
            no_setup(),
            vec![step("utimens", |fs, _| {
                must(fs.utimens(b"/foo", TimeSet::At(ts(12345, 678)), TimeSet::At(ts(23456, 789))), "utimens")
            })],
        ),
        op(
            "utimens_now_dir",
            no_setup(),
            vec![step("utimens", |fs, _| must(fs.utimens(b"/B", TimeSet::Now, TimeSet::Omit), "utimens"))],
        ),
        op("fsync_only", setup_open("/foo", rdwr), vec![step("fsync", |fs, cx| must(fs.fsync(cx.fds[0]), "fsync"))]),
        // ---- log extension and log garbage collection ----
        op(
            "create_extends_dir_log",
            Box::new(|fs, _| {
                // A new directory's log page holds its Attr entry and room
                // for 62 more one-unit entries: fill it.
                must(fs.mkdir(b"/E", 0o755), "mkdir /E");
                for i in 0..62 {
                    must(put(fs, format!("/E/f{i:02}").as_bytes(), b""), "fill /E");
                }
            }),
            vec![step("create", |fs, _| {
                let fd = open(fs, "/E/last", OpenFlags::WRONLY.create());
                must(fs.close(fd), "close");
            })],
        ),
        op(
            "chmod_extends_log_and_collects",
            Box::new(|fs, _| {
                must(put(fs, b"/ext", b""), "create /ext");
                for i in 0..62 {
                    must(fs.chmod(b"/ext", 0o600 + (i % 64)), "chmod /ext");
                }
            }),
            vec![step("chmod", |fs, _| must(fs.chmod(b"/ext", 0o640), "chmod /ext"))],
        ),
        op(
            "create_collects_dir_log",
            Box::new(|fs, _| fill_dir_logs(fs)),
            vec![step("create (extends /G's log, collects page 1)", |fs, _| {
                let fd = open(fs, "/G/w", OpenFlags::WRONLY.create());
                must(fs.close(fd), "close");
            })],
        ),
        op(
            "chmod_collects_file_log_truncate",
            Box::new(|fs, _| fill_file_logs(fs)),
            vec![step("chmod (collects the truncate's page)", |fs, _| must(fs.chmod(b"/F", 0o644), "chmod /F"))],
        ),
        op(
            "write_extends_file_log",
            Box::new(|fs, cx| {
                must(put(fs, b"/ext2", b""), "create /ext2");
                let fd = open(fs, "/ext2", OpenFlags::RDWR);
                for i in 0..62u64 {
                    must(fs.pwrite(fd, &pattern(100 + i, 64), i * 4096), "fill");
                }
                cx.fds.push(fd);
            }),
            vec![pwrite_step("pwrite", 0, 3000, 62 * 4096 + 5, 99)],
        ),
        op(
            "truncate_extends_log",
            Box::new(|fs, cx| {
                must(put(fs, b"/ext3", b""), "create /ext3");
                let fd = open(fs, "/ext3", OpenFlags::RDWR);
                for i in 0..62u64 {
                    must(fs.pwrite(fd, &pattern(200 + i, 4096), 0), "rewrite page 0");
                }
                cx.fds.push(fd);
            }),
            vec![step("ftruncate", |fs, cx| must(fs.ftruncate(cx.fds[0], 1000), "ftruncate"))],
        ),
        // ---- short sequences ----
        op(
            "atomic_replace_pattern",
            no_setup(),
            vec![
                step("create tmp", |fs, cx| cx.fds.push(open(fs, "/A/tmp", OpenFlags::RDWR.create().excl()))),
                pwrite_step("write tmp", 0, 6000, 0, 30),
                step("fsync tmp", |fs, cx| must(fs.fsync(cx.fds[0]), "fsync")),
                close_step(0),
                step("rename tmp over /foo", |fs, _| {
                    must(fs.rename(b"/A/tmp", b"/foo", RenameFlags::Replace), "rename")
                }),
            ],
        ),
        op(
            "mkdir_populate_rmdir",
            no_setup(),
            vec![
                step("mkdir", |fs, _| must(fs.mkdir(b"/X", 0o755), "mkdir")),
                step("create", |fs, cx| cx.fds.push(open(fs, "/X/f", OpenFlags::RDWR.create()))),
                pwrite_step("write", 0, 700, 0, 31),
                close_step(0),
                step("unlink", |fs, _| must(fs.unlink(b"/X/f"), "unlink")),
                step("rmdir", |fs, _| must(fs.rmdir(b"/X"), "rmdir")),
            ],
        ),
        op(
            "rename_chain",
            no_setup(),
            vec![
                step("rename 1", |fs, _| must(fs.rename(b"/A/bar", b"/B/x", RenameFlags::Replace), "r1")),
                step("rename 2", |fs, _| must(fs.rename(b"/B/x", b"/A/C/y", RenameFlags::Replace), "r2")),
                step("rename dir", |fs, _| must(fs.rename(b"/A/C", b"/B/D/C", RenameFlags::Replace), "r3")),
            ],
        ),
    ]
}

/// What recovering one crash image gave.
type Outcome = Result<Tree, String>;

fn mount_opts(clock: &Arc<ManualClock>) -> MountOptions {
    MountOptions { clock: clock.clone(), recovery_threads: 2 }
}

/// Recover a crash image and check everything that does not depend on
/// which tree is expected; return the recovered tree.
fn recover(image: &[u8]) -> Outcome {
    let clock = manual_clock(T_PROBE);
    let r = catch_unwind(AssertUnwindSafe(|| -> Outcome {
        let report = ferrite::fsck::check(&Pmem::from_image(image))
            .map_err(|e| format!("fsck of the crash image refused it: {e}"))?;
        if !report.is_clean() {
            return Err(format!("fsck of the crash image:\n{report}"));
        }
        let fs =
            Session::mount(Pmem::from_image(image), &mount_opts(&clock)).map_err(|e| format!("mount failed: {e}"))?;
        let tree = tree_of(&fs).map_err(|e| format!("tree walk after recovery: {e:?}"))?;
        // The recovered pool must be usable: write a new file (allocating
        // pages the recovered allocator believes free), unmount cleanly,
        // check, remount, and find the tree unchanged.
        let probe = pattern(77, 3 * 4096 + 10);
        put(&fs, b"/zz_probe", &probe).map_err(|e| format!("probe write: {e:?}"))?;
        let pmem = fs.pmem().clone();
        fs.unmount().map_err(|e| format!("unmount: {e:?}"))?;
        let after = pmem.image();
        let report = ferrite::fsck::check(&Pmem::from_image(&after))
            .map_err(|e| format!("fsck after probe + unmount refused it: {e}"))?;
        if !report.is_clean() {
            return Err(format!("fsck after probe + unmount:\n{report}"));
        }
        let fs = Session::mount(Pmem::from_image(&after), &mount_opts(&clock))
            .map_err(|e| format!("clean remount after probe failed: {e}"))?;
        let mut again = tree_of(&fs).map_err(|e| format!("tree walk after remount: {e:?}"))?;
        let p = again.remove(b"/zz_probe".as_slice()).ok_or("probe file missing after remount")?;
        if p.content != probe {
            return Err("probe file content wrong after remount".into());
        }
        let strip = |t: &Tree| -> Tree {
            t.iter().filter(|(k, _)| k.as_slice() != b"/").map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let d = diff_trees(&strip(&tree), &strip(&again));
        if !d.is_empty() {
            return Err(format!("tree changed across probe write + clean remount:\n{d}"));
        }
        drop(fs);
        Ok(tree)
    }));
    match r {
        Ok(o) => o,
        Err(p) => Err(format!("PANIC: {}", panic_message(&p))),
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

#[derive(Default)]
struct Figures {
    ops: usize,
    events: usize,
    fences: usize,
    points: usize,
    images_checked: usize,
    distinct_images: usize,
    /// Crash images of recoveries (nested runs only).
    recovery_images: usize,
}

fn env_filter(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|s| !s.is_empty())
}

/// One operation, recorded.
struct Recorded {
    /// The pool when recording started.
    base: Vec<u8>,
    events: Vec<Event>,
    /// The tree before the operation, then after each step.
    trees: Vec<Tree>,
}

/// Run `op` on a pool holding `image0` and record it.
fn record_op(op: &Op, image0: &[u8]) -> Result<Recorded, String> {
    let clock = manual_clock(T_SETUP);
    let fs = Session::mount(Pmem::from_image(image0), &mount_opts(&clock)).expect("mount the starting image");
    let mut cx = Ctx::default();
    (op.setup)(&fs, &mut cx);
    let pmem = fs.pmem().clone();
    let mut trees = vec![tree_of(&fs).expect("tree before the operation")];
    pmem.start_recording();
    let base = pmem.image();
    for (i, (name, f)) in op.steps.iter().enumerate() {
        clock.set(ts(T_OP + i as i64, 500));
        pmem.mark(i as u64);
        let r = catch_unwind(AssertUnwindSafe(|| f(&fs, &mut cx)));
        if let Err(p) = r {
            return Err(format!(
                "{}: step {i} ({name}) failed on the live file system: {}",
                op.name,
                panic_message(&p)
            ));
        }
        trees.push(tree_of(&fs).expect("tree after a step"));
    }
    pmem.mark(END_MARK);
    let events = pmem.stop_recording();
    drop(fs);
    Ok(Recorded { base, events, trees })
}

/// Crash-test one operation. With `nested`, every distinct crash image is
/// also recovered under recording, and the recovery itself crashed at each
/// of its fences.
fn run_op(op: &Op, image0: &[u8], fig: &mut Figures, nested: bool) -> Vec<String> {
    match record_op(op, image0) {
        Ok(rec) => check_recorded(op, &rec, fig, nested),
        Err(e) => vec![e],
    }
}

/// Check every crash image of a recorded operation.
fn check_recorded(op: &Op, rec: &Recorded, fig: &mut Figures, nested: bool) -> Vec<String> {
    let only_event = env_filter("FERRITE_CRASH_EVENT").and_then(|s| ferrite_tests::parse_u64(&s));
    let (base, events, trees) = (&rec.base, &rec.events, &rec.trees);
    fig.ops += 1;
    fig.events += events.len();
    fig.fences += events.iter().filter(|e| matches!(e, Event::Fence)).count();
    let mut cache: HashMap<u64, Outcome> = HashMap::new();
    let mut failures = Vec::new();
    let mut sim = Simulator::new(base, events);
    let mut step_ix = 0usize;
    while let Some(kind) = sim.next_point() {
        if kind == PointKind::End {
            continue; // the END_MARK marker just before it is the same point
        }
        let at = sim.position();
        // Which trees this point allows: before a fence inside step i, the
        // tree before or after it; once a step (or the operation) returned,
        // only the tree after it.
        let allowed: Vec<usize> = match kind {
            PointKind::Mark(END_MARK) | PointKind::End => vec![op.steps.len()],
            PointKind::Mark(l) => {
                step_ix = l as usize;
                vec![step_ix]
            }
            PointKind::BeforeFence => vec![step_ix, step_ix + 1],
        };
        if only_event.is_some_and(|e| e != at as u64) {
            continue;
        }
        fig.points += 1;
        // The two bounding images, then (before a fence) images where only
        // some of the lines in flight persisted.
        let mut images: Vec<(String, u64, Option<Vec<u8>>)> = Vec::new();
        for which in [Image::Persisted, Image::All] {
            images.push((which.name().to_string(), sim.key(which), None));
        }
        if kind == PointKind::BeforeFence {
            for (label, lines) in subsets(&sim, op.name, at) {
                let img = sim.image_with_lines(&lines);
                let key = sim.key_of(&img);
                images.push((label, key, Some(img)));
            }
        }
        for (label, key, img) in images {
            fig.images_checked += 1;
            let outcome = cache.entry(key).or_insert_with(|| {
                fig.distinct_images += 1;
                let image = match &img {
                    Some(i) => i.as_slice(),
                    None => sim.image(if label == Image::All.name() {
                        Image::All
                    } else {
                        Image::Persisted
                    }),
                };
                let o = recover(image);
                if nested {
                    if let Ok(tree) = &o {
                        for f in crash_during_recovery(image, tree, fig) {
                            failures.push(format!(
                                "op {}: crash image at event {at} ({label}): {f}\n  replay: FERRITE_CRASH_OP={} FERRITE_CRASH_EVENT={at} FERRITE_SEED={:#x}",
                                op.name,
                                op.name,
                                seed()
                            ));
                        }
                    }
                }
                o
            });
            let problem = match outcome {
                Err(e) => Some(e.clone()),
                Ok(got) => {
                    if allowed.iter().any(|&i| trees[i] == *got) {
                        None
                    } else {
                        let mut s = String::from("the recovered tree matches no allowed state\n");
                        for &i in &allowed {
                            let when = if i == 0 {
                                "before the operation".to_string()
                            } else {
                                format!("after step {} ({})", i - 1, op.steps[i - 1].0)
                            };
                            s += &format!(
                                "  --- differences from the tree {when}:\n{}",
                                indent(&diff_trees(&trees[i], got))
                            );
                        }
                        Some(s)
                    }
                }
            };
            if let Some(p) = problem {
                let where_ = match kind {
                    PointKind::BeforeFence => format!(
                        "before the fence at event {at} (inside step {step_ix}: {})",
                        op.steps.get(step_ix).map_or("?", |s| s.0)
                    ),
                    PointKind::Mark(END_MARK) | PointKind::End => {
                        format!("after the operation returned (event {at})")
                    }
                    PointKind::Mark(l) => format!("at the start of step {l} (event {at})"),
                };
                failures.push(format!(
                    "op {}: crash {where_}, image {label} ({} lines in flight): {p}\n  replay: FERRITE_CRASH_OP={} FERRITE_CRASH_EVENT={at} FERRITE_SEED={:#x}",
                    op.name,
                    sim.pending_lines(),
                    op.name,
                    seed()
                ));
            }
        }
    }
    failures
}

/// Recover `image` under recording, then crash that recovery at each of
/// its fences (both bounding images): recovering again must give `expect`,
/// the tree the uninterrupted recovery gave.
fn crash_during_recovery(image: &[u8], expect: &Tree, fig: &mut Figures) -> Vec<String> {
    let clock = manual_clock(T_PROBE);
    let fs = match Session::mount(Pmem::recording_from_image(image), &mount_opts(&clock)) {
        Ok(fs) => fs,
        Err(e) => return vec![format!("recording recovery failed: {e}")],
    };
    let events = fs.pmem().stop_recording();
    drop(fs);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut sim = Simulator::new(image, &events);
    while let Some(kind) = sim.next_point() {
        let at = sim.position();
        for which in [Image::Persisted, Image::All] {
            if !seen.insert(sim.key(which)) {
                continue;
            }
            fig.recovery_images += 1;
            let problem = match recover(sim.image(which)) {
                Err(e) => Some(e),
                Ok(t) if t != *expect => Some(format!(
                    "the tree differs from the uninterrupted recovery's:\n{}",
                    indent(&diff_trees(expect, &t))
                )),
                Ok(_) => None,
            };
            if let Some(p) = problem {
                out.push(format!("recovery crashed at its event {at} ({kind:?}, {}): {p}", which.name()));
            }
        }
    }
    out
}

/// The seed of the random subsets of lines in flight.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| ferrite_tests::seed_from_env("FERRITE_SEED", "crash_smoke", 0xC4A5_0001))
}

/// How many random subsets of the lines in flight to try at each fence
/// (`FERRITE_CRASH_SUBSETS`, default 4).
fn random_subsets() -> usize {
    env_filter("FERRITE_CRASH_SUBSETS").and_then(|s| s.parse().ok()).unwrap_or(4)
}

/// Subsets of the in-flight lines to persist: with few lines, each line
/// alone and all but each line; always a few random subsets (seeded by the
/// seed, the operation and the event, so a replay of one point sees the
/// same subsets).
fn subsets(sim: &Simulator<'_>, op: &str, at: usize) -> Vec<(String, BTreeSet<u64>)> {
    let lines = sim.pending_line_list();
    let mut out = Vec::new();
    if lines.len() < 2 {
        return out;
    }
    let show = |set: &BTreeSet<u64>| -> String {
        let v: Vec<String> = set.iter().map(|l| format!("{:#x}", l * 64)).collect();
        if v.len() > 6 {
            format!("{} lines", v.len())
        } else {
            v.join(",")
        }
    };
    if lines.len() <= 8 {
        for (i, &l) in lines.iter().enumerate() {
            let one: BTreeSet<u64> = [l].into();
            out.push((format!("only line {} persisted", show(&one)), one));
            let rest: BTreeSet<u64> = lines.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &x)| x).collect();
            out.push((format!("all in-flight lines but {:#x} persisted", l * 64), rest));
        }
    }
    let h = op.bytes().fold(seed() ^ at as u64, |h, b| ferrite_tests::splitmix64(h ^ b as u64));
    let mut rng = ChaCha8Rng::seed_from_u64(h);
    for _ in 0..random_subsets() {
        let set: BTreeSet<u64> = lines.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
        out.push((format!("random subset of in-flight lines persisted: {}", show(&set)), set));
    }
    out
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

fn initial_image() -> Vec<u8> {
    let clock = manual_clock(T_FORMAT);
    let fs = Session::format(
        Pmem::heap(POOL_PAGES * 4096),
        &FormatOptions { lanes: 2, inodes: Some(128), clock: clock.clone() },
    )
    .expect("format");
    build_initial(&fs, &clock);
    let pmem = fs.pmem().clone();
    fs.unmount().expect("unmount");
    let image = pmem.image();
    let report = ferrite::fsck::check(&Pmem::from_image(&image)).expect("fsck");
    assert!(report.is_clean(), "starting image: {report}");
    image
}

/// Run the operations whose names `select` accepts.
fn run_group(group: &str, nested: bool, select: impl Fn(&str) -> bool) {
    let only = env_filter("FERRITE_CRASH_OP");
    let started = Instant::now();
    let image0 = initial_image();
    let mut fig = Figures::default();
    let mut failures = Vec::new();
    let mut names = Vec::new();
    for op in ops() {
        if !select(op.name) || only.as_deref().is_some_and(|o| o != op.name) {
            continue;
        }
        names.push(op.name);
        failures.extend(run_op(&op, &image0, &mut fig, nested));
    }
    eprintln!(
        "crash_smoke {group}: {} ops, {} events, {} fences, {} crash points, {} images checked, {} distinct images recovered, {} crash images of recoveries, {:.1?}",
        fig.ops,
        fig.events,
        fig.fences,
        fig.points,
        fig.images_checked,
        fig.distinct_images,
        fig.recovery_images,
        started.elapsed()
    );
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(12).collect();
        panic!(
            "crash_smoke {group}: {} failing crash images (first {} shown):\n\n{}",
            failures.len(),
            shown.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n")
        );
    }
    if only.is_none() {
        assert!(fig.ops > 0, "group {group} selected no operation");
    }
}

fn is_rename(n: &str) -> bool {
    n.starts_with("rename_")
}

fn is_data(n: &str) -> bool {
    ["write_", "truncate_", "ftruncate_", "open_o_trunc", "fallocate_"].iter().any(|p| n.starts_with(p))
}

fn is_sequence(n: &str) -> bool {
    matches!(n, "atomic_replace_pattern" | "mkdir_populate_rmdir" | "rename_chain")
        || n.contains("extends")
        || n.contains("collects")
}

#[test]
fn crash_namespace_and_attribute_ops() {
    run_group("namespace+attributes", false, |n| !is_rename(n) && !is_data(n) && !is_sequence(n));
}

#[test]
fn crash_data_ops() {
    run_group("data", false, |n| is_data(n) && !is_sequence(n));
}

#[test]
fn crash_rename_ops() {
    run_group("rename", false, |n| is_rename(n) && !is_sequence(n));
}

#[test]
fn crash_log_extension_and_sequences() {
    run_group("log extension+sequences", false, is_sequence);
}

/// The checker itself: the same write with its ordering fence removed (the
/// tail may then persist before the entry it points at) or with every
/// fence removed (nothing is durable when the write returns) must be
/// caught.
#[test]
fn checker_catches_missing_fences() {
    let image0 = initial_image();
    let all = ops();
    let op = all.iter().find(|o| o.name == "write_overwrite_page").expect("op");
    let rec = record_op(op, &image0).expect("record");
    let mut fig = Figures::default();
    assert!(check_recorded(op, &rec, &mut fig, false).is_empty(), "the unmodified trace must pass");
    // Remove the fence just before the tail commit.
    let commit = rec.events.iter().position(|e| matches!(e, Event::Commit { .. })).expect("a commit");
    let fence =
        rec.events[..commit].iter().rposition(|e| matches!(e, Event::Fence)).expect("a fence before the commit");
    let mut broken = Recorded { base: rec.base.clone(), events: rec.events.clone(), trees: rec.trees.clone() };
    broken.events.remove(fence);
    let f = check_recorded(op, &broken, &mut fig, false);
    assert!(!f.is_empty(), "a missing ordering fence went unnoticed");
    // Remove every fence.
    broken.events = rec.events.iter().filter(|e| !matches!(e, Event::Fence)).cloned().collect();
    let f = check_recorded(op, &broken, &mut fig, false);
    assert!(
        f.iter().any(|m| m.contains("after the operation returned")),
        "a non-durable operation went unnoticed: {f:?}"
    );
}

/// Crashes during recovery: for operations whose crash images leave a
/// journal transaction open or an orphan to free, recovery is crashed at
/// each of its own fences, and recovering again must give the same tree.
#[test]
fn crash_during_recovery_of_journaled_ops() {
    run_group("crash during recovery", true, |n| {
        matches!(
            n,
            "create"
                | "link"
                | "unlink_last_link"
                | "unlink_open_write_close"
                | "rename_dir_across_dirs"
                | "rename_over_existing_file"
                | "rename_exchange_dirs"
                | "mkdir_populate_rmdir"
        )
    });
}

/// Run `setup`, then `trigger` (which must make log GC collect a page),
/// then check that the pool survives a crash (full log scan) and a clean
/// unmount (lazy rebuild) with the tree unchanged.
fn gc_scenario_survives_remount(setup: fn(&Session), trigger: fn(&Session)) {
    let clock = manual_clock(T_FORMAT);
    let fs = Session::format(
        Pmem::heap(POOL_PAGES * 4096),
        &FormatOptions { lanes: 1, inodes: Some(128), clock: clock.clone() },
    )
    .expect("format");
    setup(&fs);
    let gc_before = fs.gc_pages_collected();
    trigger(&fs);
    assert!(fs.gc_pages_collected() > gc_before, "the scenario no longer collects a log page; adjust it");
    let tree = tree_of(&fs).expect("tree");
    let compare = |image: &[u8], when: &str| -> Option<String> {
        match Session::mount(Pmem::from_image(image), &mount_opts(&clock)) {
            Ok(fs2) => match tree_of(&fs2) {
                Ok(t) => {
                    let d = diff_trees(&tree, &t);
                    (!d.is_empty()).then(|| format!("tree {when}:\n{d}"))
                }
                Err(e) => Some(format!("tree walk {when}: {e:?}")),
            },
            Err(e) => Some(format!("mount {when}: {e}")),
        }
    };
    // A crash now: recovery scans every log.
    let crashed = fs.pmem().image();
    let report = ferrite::fsck::check(&Pmem::from_image(&crashed)).expect("fsck");
    let crash_fsck = (!report.is_clean()).then(|| format!("fsck after the crash:\n{report}"));
    let crash_mount = compare(&crashed, "after the crash");
    // A clean unmount: inodes are rebuilt from their logs at first access.
    let pmem = fs.pmem().clone();
    fs.unmount().expect("unmount");
    let clean_mount = compare(&pmem.image(), "after a clean unmount");
    let problems: Vec<String> = [crash_fsck, crash_mount, clean_mount].into_iter().flatten().collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Log GC of a directory: after the page holding a name's add is
/// collected, the page holding its remove must still replay.
#[test]
fn directory_log_gc_survives_remount() {
    gc_scenario_survives_remount(fill_dir_logs, |fs| {
        let fd = open(fs, "/G/w", OpenFlags::WRONLY.create());
        must(fs.close(fd), "close");
    });
}

/// Build /F's log: page 1 holds a write of page 7 (size 30000) and
/// attributes; page 2 a write of page 0 that stays live (its size_after
/// says 30000); page 3 a truncate to 5000 (which cancels the write on page
/// 1, so page 1 pins it) and attributes; page 4 a size-only fallocate entry
/// (size 5000) and attributes to the brim. Opening page 4 collected page 1
/// (all dead), which unpinned the truncate; the next entry opens page 5
/// and collects page 3, truncate and all.
fn fill_file_logs(fs: &Session) {
    must(put(fs, b"/F", b""), "create /F");
    let fd = open(fs, "/F", OpenFlags::RDWR);
    let chmods = |n: u32| {
        for i in 0..n {
            must(fs.chmod(b"/F", 0o600 | (i % 64)), "chmod /F");
        }
    };
    must(fs.pwrite(fd, &pattern(60, 100), 29_900), "write page 7");
    chmods(61);
    must(fs.pwrite(fd, &pattern(61, 100), 0), "write page 0");
    chmods(62);
    must(fs.ftruncate(fd, 5000), "truncate");
    chmods(62);
    must(fs.fallocate(fd, ferrite::FallocateMode::Default, 0, 4096), "fallocate (size only)");
    chmods(62);
    must(fs.close(fd), "close");
}

/// Log GC of a file: once the page holding a truncate is collected, an
/// older surviving write's size_after is larger than the size-only
/// fallocate entry after it; replay must still give the file's size.
#[test]
fn file_log_gc_keeps_sizes_replayable() {
    gc_scenario_survives_remount(fill_file_logs, |fs| must(fs.chmod(b"/F", 0o644), "chmod: collects page 3"));
}

/// One random call of a random sequence: any operation on paths drawn from
/// a small namespace, so that most calls find their objects and some fail
/// (a failed call must change nothing). Each step makes at most one
/// modifying call.
fn random_step(rng: &mut ChaCha8Rng) -> (&'static str, StepFn) {
    const DIRS: [&str; 5] = ["", "/A", "/B", "/A/C", "/B/D"];
    const NAMES: [&str; 7] = ["foo", "bar", "t", "n1", "n2", "d1", "hl"];
    let path = |rng: &mut ChaCha8Rng| -> Vec<u8> {
        format!("{}/{}", DIRS[rng.gen_range(0..DIRS.len())], NAMES[rng.gen_range(0..NAMES.len())]).into_bytes()
    };
    let a = path(rng);
    let b = path(rng);
    let at = if rng.gen_bool(0.5) { rng.gen_range(0..3) * 4096 } else { rng.gen_range(0..20_000) };
    let len = [1usize, 100, 4096, 5000, 9000][rng.gen_range(0..5)];
    let tag = rng.gen::<u64>();
    let size = rng.gen_range(0..20_000u64);
    match rng.gen_range(0..14) {
        0 => step("create", move |fs, _| {
            if let Ok(fd) = fs.open(&a, OpenFlags::RDWR.create(), 0o644) {
                let _ = fs.close(fd);
            }
        }),
        1..=3 => step("pwrite", move |fs, _| {
            if let Ok(fd) = fs.open(&a, OpenFlags::RDWR, 0) {
                let _ = fs.pwrite(fd, &pattern(tag, len), at);
                let _ = fs.close(fd);
            }
        }),
        4 => step("truncate", move |fs, _| {
            let _ = fs.truncate(&a, size);
        }),
        5 => step("fallocate", move |fs, _| {
            if let Ok(fd) = fs.open(&a, OpenFlags::RDWR, 0) {
                let mode =
                    if tag % 2 == 0 { ferrite::FallocateMode::Default } else { ferrite::FallocateMode::KeepSize };
                let _ = fs.fallocate(fd, mode, at, len as u64);
                let _ = fs.close(fd);
            }
        }),
        6 => step("unlink", move |fs, _| {
            let _ = fs.unlink(&a);
        }),
        7 => step("rename", move |fs, _| {
            let flags = match tag % 3 {
                0 => RenameFlags::Replace,
                1 => RenameFlags::NoReplace,
                _ => RenameFlags::Exchange,
            };
            let _ = fs.rename(&a, &b, flags);
        }),
        8 => step("link", move |fs, _| {
            let _ = fs.link(&a, &b);
        }),
        9 => step("mkdir", move |fs, _| {
            let _ = fs.mkdir(&a, 0o755);
        }),
        10 => step("rmdir", move |fs, _| {
            let _ = fs.rmdir(&a);
        }),
        11 => step("symlink", move |fs, _| {
            let _ = fs.symlink(&b, &a);
        }),
        12 => step("chmod", move |fs, _| {
            let _ = fs.chmod(&a, (tag % 0o777) as u32);
        }),
        _ => step("utimens", move |fs, _| {
            let _ = fs.utimens(&a, TimeSet::At(ts(tag as i64 % 100_000, 5)), TimeSet::Omit);
        }),
    }
}

/// Random sequences of calls (seeded), each call a step: a crash inside
/// call i shows the tree before or after it, a crash between calls the tree
/// after the last one that returned. Replay one sequence with
/// `FERRITE_SEED=<seed> FERRITE_CRASH_SEQ=<n>`; `FERRITE_CRASH_SEQS` sets
/// how many run (default 24, of 8 calls each).
#[test]
fn crash_random_sequences() {
    let seed = seed();
    let count: u64 = env_filter("FERRITE_CRASH_SEQS").and_then(|s| s.parse().ok()).unwrap_or(24);
    let only: Option<u64> = env_filter("FERRITE_CRASH_SEQ").and_then(|s| s.parse().ok());
    let started = Instant::now();
    let image0 = initial_image();
    let mut fig = Figures::default();
    let mut failures = Vec::new();
    for n in 0..count {
        if only.is_some_and(|o| o != n) {
            continue;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(ferrite_tests::splitmix64(seed ^ (n << 32)));
        let steps: Vec<(&'static str, StepFn)> = (0..8).map(|_| random_step(&mut rng)).collect();
        let names: Vec<&str> = steps.iter().map(|s| s.0).collect();
        let op = op("random sequence", no_setup(), steps);
        for f in run_op(&op, &image0, &mut fig, false) {
            failures.push(format!(
                "sequence {n} ({}): {f}\n  replay: FERRITE_SEED={seed:#x} FERRITE_CRASH_SEQ={n}",
                names.join(", ")
            ));
        }
    }
    eprintln!(
        "crash_smoke random sequences: {} sequences, {} events, {} fences, {} crash points, {} images checked, {} distinct images recovered, {:.1?}",
        fig.ops,
        fig.events,
        fig.fences,
        fig.points,
        fig.images_checked,
        fig.distinct_images,
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failures (first 8):\n{}",
        failures.len(),
        failures.iter().take(8).cloned().collect::<Vec<_>>().join("\n\n")
    );
}
