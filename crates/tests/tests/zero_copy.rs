//! Proves zero-copy views (peek, map_view) and patch buffers (issue 12):
//!
//! - model-based: seeded random writes, truncates, punches, unlinks,
//!   patches (aligned, unaligned, partial, past the end), fsyncs and
//!   remounts on a few files, run on the engine and on the in-memory
//!   reference model; every live view must keep showing exactly the
//!   model's bytes at the moment of its peek, read through its raw pointer
//!   after every step, whatever was written, truncated, punched or unlinked
//!   since; the files must equal the model's; clean remounts release every
//!   view and buffer and fsck finds no leak; crash remounts (strict seeds)
//!   recover the model's state. Run on a pool file in /dev/shm (views map
//!   the pool's pages; fsync-atomic in-place writes meet pinned pages) and
//!   on a heap pool (views are copies, as in the crash harness);
//! - threads: writers and peekers on one file; every view stays a
//!   consistent, unchanging snapshot while held; afterwards every page is
//!   back (no page leaked or reused while viewed) and fsck is clean; two
//!   views sharing an id (the same first pool byte) keep the longer one's
//!   pages pinned when one of them is released;
//! - patch: aligned patches take the buffer's pages (no new page
//!   allocated), partial last pages keep the file's following bytes,
//!   unaligned patches copy; strict patches are durable at return,
//!   fsync-atomic ones at the next fsync; buffers never patched are
//!   reclaimed by a clean unmount and by crash recovery;
//! - misuse: unpeek twice, patch a buffer twice, patch into a directory, a
//!   view past the end, a buffer of another pool, zero lengths, descriptors
//!   not open for reading or writing: each a clear error, nothing changed.
//!
//! Replay one seed with `FERRITE_SEED=<seed> cargo test -p ferrite-tests
//! --test zero_copy`; `FERRITE_STEPS` sets the steps per seed (default 600).

use ferrite::{
    BufferId, Errno, FallocateMode, Fd, FileMode, FormatOptions, MapKind, MountOptions, OpenFlags, PathFs, Peek,
    Session, ViewId,
};
use ferrite_model::ModelFs;
use ferrite_pmem::Pmem;
use ferrite_tests::{pattern, remount_checked, seed_from_env};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const PAGE: u64 = 4096;
const POOL_PAGES: u64 = 4096;

/// The bytes a view shows, read through its raw pointer.
fn view_bytes(p: &Peek) -> Vec<u8> {
    // SAFETY: the engine hands out `p.len` readable bytes at `p.ptr`, valid
    // until `unpeek(p.id)` or the unmount; every caller here reads a view
    // before releasing it.
    unsafe { std::slice::from_raw_parts(p.ptr, p.len) }.to_vec()
}

fn content(fs: &dyn PathFs, path: &[u8]) -> Result<Vec<u8>, Errno> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
    let size = fs.fstat(fd)?.size;
    let mut buf = vec![0u8; size as usize];
    let n = fs.pread(fd, &mut buf, 0)?;
    assert_eq!(n, size as usize);
    fs.close(fd)?;
    Ok(buf)
}

/// A file pool in /dev/shm, removed when dropped.
struct ShmPool(std::path::PathBuf);

impl ShmPool {
    fn new(tag: &str) -> ShmPool {
        let p = std::path::PathBuf::from(format!("/dev/shm/ferrite-zero-copy-{}-{tag}.pool", std::process::id()));
        let _ = std::fs::remove_file(&p);
        ShmPool(p)
    }
}

impl Drop for ShmPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn format(pmem: Pmem, mode: FileMode) -> Session {
    let fs = Session::format(pmem, &FormatOptions { lanes: 2, inodes: Some(128), ..Default::default() }).unwrap();
    fs.set_default_mode(mode);
    fs
}

/// One live view in the model test: what it must show.
struct LiveView {
    peek: Peek,
    expect: Vec<u8>,
}

const NAMES: [&[u8]; 3] = [b"/a", b"/b", b"/c"];

fn model_run(seed: u64, steps: usize, file_pool: bool) {
    let mode = if seed % 2 == 1 { FileMode::FsyncAtomic } else { FileMode::Strict };
    let shm = ShmPool::new(&format!("model-{seed}-{file_pool}"));
    let pmem = if file_pool {
        Pmem::create_file(&shm.0, POOL_PAGES * PAGE, 0).unwrap()
    } else {
        Pmem::heap(POOL_PAGES * PAGE)
    };
    let mut fs = format(pmem, mode);
    let model = ModelFs::new(ferrite_tests::manual_clock(1), POOL_PAGES, 128);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut views: Vec<LiveView> = Vec::new();
    let mut buffers: Vec<(BufferId, usize)> = Vec::new();
    let ctx = |step: usize, what: &str| format!("seed {seed} step {step} ({what}, file pool {file_pool}, {mode:?})");
    for step in 0..steps {
        let name = NAMES[rng.gen_range(0..NAMES.len())];
        let choice = rng.gen_range(0..100);
        let mut what;
        if choice < 22 {
            // A write of random bytes at a random place (often page-aligned).
            what = "write";
            let off = if rng.gen_bool(0.5) { rng.gen_range(0..12) * PAGE } else { rng.gen_range(0..48_000) };
            let len = rng.gen_range(1..3 * PAGE as usize);
            let data = pattern(seed * 1_000_003 + step as u64, len);
            let e = fs.open(name, OpenFlags::RDWR.create(), 0o644).unwrap();
            let m = model.open(name, OpenFlags::RDWR.create(), 0o644).unwrap();
            assert_eq!(fs.pwrite(e, &data, off), model.pwrite(m, &data, off), "{}", ctx(step, what));
            fs.close(e).unwrap();
            model.close(m).unwrap();
        } else if choice < 40 {
            // A peek of a random range inside the file.
            what = "peek";
            if let Ok(bytes) = content(&model, name) {
                let e = fs.open(name, OpenFlags::RDONLY, 0).unwrap();
                if bytes.is_empty() {
                    assert_eq!(fs.peek(e, 0, 1).unwrap_err(), Errno::EINVAL, "{}", ctx(step, what));
                } else {
                    let off = rng.gen_range(0..bytes.len());
                    let len = rng.gen_range(1..=(bytes.len() - off).min(40_000));
                    let p = fs.peek(e, off as u64, len as u64).unwrap();
                    let expect = bytes[off..off + len].to_vec();
                    assert_eq!(view_bytes(&p), expect, "{}", ctx(step, what));
                    // A view past the end is refused.
                    assert_eq!(
                        fs.peek(e, off as u64, (bytes.len() - off + 1) as u64).unwrap_err(),
                        Errno::EINVAL,
                        "{}",
                        ctx(step, what)
                    );
                    views.push(LiveView { peek: p, expect });
                }
                fs.close(e).unwrap();
            } else {
                what = "peek of a missing file";
            }
        } else if choice < 46 {
            // A mapping for mmap, read-only or private (then stored to).
            what = "map_view";
            if let Ok(bytes) = content(&model, name) {
                let e = fs.open(name, OpenFlags::RDONLY, 0).unwrap();
                let off = rng.gen_range(0..4) * PAGE;
                let len = rng.gen_range(1..4 * PAGE);
                let private = rng.gen_bool(0.5);
                let kind = if private { MapKind::PrivateWritable } else { MapKind::ReadOnly };
                let p = fs.map_view(e, off, len, kind).unwrap();
                assert_eq!(p.len as u64, len.next_multiple_of(PAGE));
                let mut expect = vec![0u8; p.len];
                for (i, b) in expect.iter_mut().enumerate() {
                    *b = bytes.get(off as usize + i).copied().unwrap_or(0);
                }
                assert_eq!(view_bytes(&p), expect, "{}", ctx(step, what));
                if private {
                    // SAFETY: a private mapping is writable for its whole
                    // length; the stores stay in this process.
                    unsafe { p.ptr.cast_mut().write_bytes(0xEE, 100) };
                    expect[..100].fill(0xEE);
                }
                views.push(LiveView { peek: p, expect });
                fs.close(e).unwrap();
            } else {
                what = "map_view of a missing file";
            }
        } else if choice < 54 {
            what = "unpeek";
            if !views.is_empty() {
                let v = views.swap_remove(rng.gen_range(0..views.len()));
                assert_eq!(view_bytes(&v.peek), v.expect, "{}", ctx(step, what));
                fs.unpeek(v.peek.id).unwrap();
            }
        } else if choice < 66 {
            // A patch: a fresh buffer, filled, then patched (aligned mostly).
            what = "patch";
            let len = rng.gen_range(1..3 * PAGE as usize);
            let off = if rng.gen_bool(0.75) { rng.gen_range(0..12) * PAGE } else { rng.gen_range(0..48_000) };
            let data = pattern(seed * 7_000_001 + step as u64, len);
            let b = fs.patch_buffer(len as u64 + rng.gen_range(0..PAGE)).unwrap();
            // SAFETY: a patch buffer is `b.len` writable bytes until patched.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), b.ptr, len) };
            let e = fs.open(name, OpenFlags::RDWR.create(), 0o644).unwrap();
            let m = model.open(name, OpenFlags::RDWR.create(), 0o644).unwrap();
            fs.patch(e, off, b.id, len as u64).unwrap();
            model.pwrite(m, &data, off).unwrap();
            // The buffer is the file's now: a second patch is refused.
            assert_eq!(fs.patch(e, 0, b.id, 1).unwrap_err(), Errno::EINVAL, "{}", ctx(step, what));
            fs.close(e).unwrap();
            model.close(m).unwrap();
        } else if choice < 70 {
            // A buffer kept unpatched for a while (reclaimed at unmount or
            // by recovery, or freed below).
            what = "patch_buffer";
            if buffers.len() < 4 {
                let len = rng.gen_range(1..2 * PAGE as usize);
                let b = fs.patch_buffer(len as u64).unwrap();
                buffers.push((b.id, len));
            } else {
                let (id, _) = buffers.swap_remove(0);
                fs.free_buffer(id).unwrap();
                assert_eq!(fs.free_buffer(id).unwrap_err(), Errno::EINVAL);
            }
        } else if choice < 78 {
            what = "truncate";
            let size = rng.gen_range(0..40_000);
            let e = fs.truncate(name, size);
            assert_eq!(e, model.truncate(name, size), "{}", ctx(step, what));
        } else if choice < 84 {
            what = "punch";
            if let (Ok(e), Ok(m)) = (fs.open(name, OpenFlags::RDWR, 0), model.open(name, OpenFlags::RDWR, 0)) {
                let off = rng.gen_range(0..40_000);
                let len = rng.gen_range(1..3 * PAGE);
                assert_eq!(
                    fs.fallocate(e, FallocateMode::PunchHole, off, len),
                    model.fallocate(m, FallocateMode::PunchHole, off, len),
                    "{}",
                    ctx(step, what)
                );
                fs.close(e).unwrap();
                model.close(m).unwrap();
            }
        } else if choice < 90 {
            what = "unlink";
            assert_eq!(fs.unlink(name), model.unlink(name), "{}", ctx(step, what));
        } else if choice < 96 {
            what = "fsync";
            if let (Ok(e), Ok(m)) = (fs.open(name, OpenFlags::RDONLY, 0), model.open(name, OpenFlags::RDONLY, 0)) {
                assert_eq!(fs.fsync(e), model.fsync(m));
                fs.close(e).unwrap();
                model.close(m).unwrap();
            }
        } else {
            // A remount: views and buffers end with it. Clean always for
            // fsync-atomic seeds (the model test of modes lives elsewhere).
            let crash = mode == FileMode::Strict && rng.gen_bool(0.5);
            what = if crash { "crash remount" } else { "clean remount" };
            for v in &views {
                assert_eq!(view_bytes(&v.peek), v.expect, "{}", ctx(step, what));
            }
            views.clear();
            buffers.clear();
            let free_before = fs.free_pages();
            let (next, report) = remount_checked(fs, crash);
            fs = next;
            fs.set_default_mode(mode);
            assert!(report.is_clean(), "{}: {report}", ctx(step, what));
            assert_eq!(fs.live_views() + fs.live_buffers(), 0);
            let _ = free_before;
        }
        // Every live view still shows the bytes of its moment.
        for v in &views {
            assert_eq!(view_bytes(&v.peek), v.expect, "{}: a view changed", ctx(step, what));
            let mut copy = vec![0u8; v.expect.len()];
            fs.view_copy_out(v.peek.id, 0, &mut copy).unwrap();
            assert_eq!(copy, v.expect, "{}: view_copy_out", ctx(step, what));
        }
        assert_eq!(fs.live_views(), views.len(), "{}", ctx(step, what));
        assert_eq!(fs.live_buffers(), buffers.len(), "{}", ctx(step, what));
        for name in NAMES {
            assert_eq!(content(&fs, name), content(&model, name), "{}: file {:?}", ctx(step, what), name);
        }
    }
    // The end: every view released, then a clean unmount, no leak.
    for v in views.drain(..) {
        assert_eq!(view_bytes(&v.peek), v.expect);
        fs.unpeek(v.peek.id).unwrap();
        assert_eq!(fs.unpeek(v.peek.id).unwrap_err(), Errno::EINVAL);
    }
    assert_eq!(fs.engine().pinned_pages(), (0, 0), "seed {seed}: pins left");
    let (fs, report) = remount_checked(fs, false);
    assert!(report.is_clean(), "seed {seed}: {report}");
    for name in NAMES {
        assert_eq!(content(&fs, name), content(&model, name), "seed {seed}: after the last remount");
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("FERRITE_SEED") {
        Ok(_) => vec![seed_from_env("FERRITE_SEED", "zero_copy", 1)],
        Err(_) => (1..=4).collect(),
    }
}

fn steps() -> usize {
    std::env::var("FERRITE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(600)
}

#[test]
fn model_with_views_on_a_pool_file() {
    for seed in seeds() {
        model_run(seed, steps(), true);
    }
}

#[test]
fn model_with_views_on_a_heap_pool() {
    for seed in seeds() {
        model_run(seed, steps(), false);
    }
}

/// A page of one version: its first 8 bytes say (page, version), the rest
/// repeats the version's byte.
fn stamped_page(page: u64, version: u64) -> Vec<u8> {
    let mut b = vec![(version % 251) as u8; PAGE as usize];
    b[..8].copy_from_slice(&(page << 32 | version).to_le_bytes());
    b
}

fn check_stamped(bytes: &[u8], first_page: u64) {
    for (i, page) in bytes.chunks(PAGE as usize).enumerate() {
        let word = u64::from_le_bytes(page[..8].try_into().unwrap());
        assert_eq!(word >> 32, first_page + i as u64, "a page of another place");
        let version = word & 0xffff_ffff;
        assert!(page[8..].iter().all(|&b| b == (version % 251) as u8), "a torn page in a view");
    }
}

/// Two views through the alias that start at the same pool byte share an
/// id; releasing it once must leave the longer view's pages pinned, since
/// the caller cannot say which view it released. (Releasing the view made
/// last let the shorter holder's release unpin the longer view's pages,
/// and overwrites then reused them under it.)
#[test]
fn views_sharing_an_id_keep_the_longest_pinned() {
    let shm = ShmPool::new("shared-id");
    let fs = format(Pmem::create_file(&shm.0, POOL_PAGES * PAGE, 0).unwrap(), FileMode::Strict);
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    let pages: Vec<u8> = (0..6).flat_map(|p| stamped_page(p, 0)).collect();
    fs.pwrite(fd, &pages, 0).unwrap();
    // The shorter made first, so that the view made last is the longer.
    let short = fs.peek(fd, 0, PAGE).unwrap();
    let long = fs.peek(fd, 0, 6 * PAGE).unwrap();
    assert_eq!(long.id, short.id, "the two views do not share an id: this test shows nothing here");
    let before = view_bytes(&long);
    fs.unpeek(short.id).unwrap();
    for version in 1..=20 {
        for p in 1..6 {
            fs.pwrite(fd, &stamped_page(p, version), p * PAGE).unwrap();
        }
    }
    assert_eq!(view_bytes(&long), before, "a view changed while held");
    fs.unpeek(long.id).unwrap();
    assert_eq!(fs.live_views(), 0);
    assert_eq!(fs.engine().pinned_pages(), (0, 0));
}

#[test]
fn writers_and_peekers_on_one_file() {
    let shm = ShmPool::new("threads");
    let fs = Arc::new(format(Pmem::create_file(&shm.0, POOL_PAGES * PAGE, 0).unwrap(), FileMode::Strict));
    const FILE_PAGES: u64 = 64;
    let fd = fs.open(b"/shared", OpenFlags::RDWR.create(), 0o644).unwrap();
    for p in 0..FILE_PAGES {
        fs.pwrite(fd, &stamped_page(p, 0), p * PAGE).unwrap();
    }
    let free_before = fs.free_pages();
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let fs = fs.clone();
        threads.push(std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(100 + t);
            let fd = fs.open(b"/shared", OpenFlags::RDWR, 0).unwrap();
            for i in 1..=3000u64 {
                let p = rng.gen_range(0..FILE_PAGES);
                let version = i * 2 + t;
                if rng.gen_bool(0.5) {
                    fs.pwrite(fd, &stamped_page(p, version), p * PAGE).unwrap();
                } else {
                    let b = fs.patch_buffer(PAGE).unwrap();
                    fs.buffer_copy_in(b.id, 0, &stamped_page(p, version)).unwrap();
                    fs.patch(fd, p * PAGE, b.id, PAGE).unwrap();
                }
            }
            fs.close(fd).unwrap();
        }));
    }
    for t in 0..2u64 {
        let fs = fs.clone();
        threads.push(std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(200 + t);
            let fd = fs.open(b"/shared", OpenFlags::RDONLY, 0).unwrap();
            let mut held: Vec<(Peek, Vec<u8>, u64)> = Vec::new();
            for _ in 0..3000 {
                if held.len() < 8 && rng.gen_bool(0.6) {
                    let first = rng.gen_range(0..FILE_PAGES);
                    let pages = rng.gen_range(1..=(FILE_PAGES - first).min(6));
                    let p = fs.peek(fd, first * PAGE, pages * PAGE).unwrap();
                    let bytes = view_bytes(&p);
                    check_stamped(&bytes, first);
                    held.push((p, bytes, first));
                } else if !held.is_empty() {
                    let (p, bytes, _) = held.swap_remove(rng.gen_range(0..held.len()));
                    assert_eq!(view_bytes(&p), bytes, "a view changed while held");
                    fs.unpeek(p.id).unwrap();
                }
                for (p, bytes, _) in &held {
                    assert_eq!(&view_bytes(p)[..8], &bytes[..8], "a view changed while held");
                }
            }
            for (p, bytes, first) in held {
                assert_eq!(view_bytes(&p), bytes);
                check_stamped(&bytes, first);
                fs.unpeek(p.id).unwrap();
            }
            fs.close(fd).unwrap();
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fs.live_views(), 0);
    assert_eq!(fs.engine().pinned_pages(), (0, 0));
    // Overwrites replace pages one for one: every page is back.
    assert_eq!(fs.free_pages(), free_before, "pages leaked while viewed");
    check_stamped(&content(&*fs, b"/shared").unwrap(), 0);
    fs.close(fd).unwrap();
    let fs = Arc::try_unwrap(fs).ok().expect("threads ended");
    let (_fs, report) = remount_checked(fs, false);
    assert!(report.is_clean(), "{report}");
}

#[test]
fn a_view_outlives_its_file_and_pins_its_pages() {
    let shm = ShmPool::new("unlink");
    let fs = format(Pmem::create_file(&shm.0, POOL_PAGES * PAGE, 0).unwrap(), FileMode::Strict);
    let data = pattern(7, 10 * PAGE as usize);
    // The root's first name gives it its first log page: count free pages
    // once it has one.
    fs.mkdir(b"/d", 0o755).unwrap();
    let free_empty = fs.free_pages();
    ferrite_tests::put(&fs, b"/f", &data).unwrap();
    let free_with_file = fs.free_pages();
    let fd = fs.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    let whole = fs.peek(fd, 0, data.len() as u64).unwrap();
    let middle = fs.peek(fd, 5000, 9000).unwrap();
    fs.close(fd).unwrap();
    // Overwrite, truncate and unlink: the views do not change, and the
    // pages they hold are not freed.
    ferrite_tests::put(&fs, b"/f", &pattern(8, 3 * PAGE as usize)).unwrap();
    fs.truncate(b"/f", 100).unwrap();
    fs.unlink(b"/f").unwrap();
    assert_eq!(view_bytes(&whole), data);
    assert_eq!(view_bytes(&middle), &data[5000..14000]);
    assert_eq!(fs.engine().pinned_pages(), (10, 10), "ten pages held, all freed by the file");
    assert!(fs.free_pages() < free_with_file + 10);
    // New files do not get the held pages.
    ferrite_tests::put(&fs, b"/g", &vec![0x55; 40 * PAGE as usize]).unwrap();
    assert_eq!(view_bytes(&whole), data);
    fs.unpeek(whole.id).unwrap();
    assert_eq!(view_bytes(&middle), &data[5000..14000]);
    fs.unpeek(middle.id).unwrap();
    assert_eq!(fs.engine().pinned_pages(), (0, 0));
    fs.unlink(b"/g").unwrap();
    assert_eq!(fs.free_pages(), free_empty, "every page is back");
}

#[test]
fn patch_takes_the_buffer_pages_and_merges_partial_pages() {
    for file_pool in [true, false] {
        let shm = ShmPool::new(&format!("patch-{file_pool}"));
        let pmem = if file_pool {
            Pmem::create_file(&shm.0, POOL_PAGES * PAGE, 0).unwrap()
        } else {
            Pmem::heap(POOL_PAGES * PAGE)
        };
        let fs = format(pmem, FileMode::Strict);
        let mut expect = pattern(1, 5 * PAGE as usize);
        ferrite_tests::put(&fs, b"/f", &expect).unwrap();
        let fd = fs.open(b"/f", OpenFlags::RDWR, 0).unwrap();

        // Aligned, two whole pages: the file takes the buffer's pages, the
        // two it had go back.
        let b = fs.patch_buffer(2 * PAGE).unwrap();
        let free_with_buffer = fs.free_pages();
        let data = pattern(2, 2 * PAGE as usize);
        fs.buffer_copy_in(b.id, 0, &data).unwrap();
        fs.patch(fd, PAGE, b.id, 2 * PAGE).unwrap();
        expect[PAGE as usize..3 * PAGE as usize].copy_from_slice(&data);
        assert_eq!(content(&fs, b"/f").unwrap(), expect);
        assert_eq!(fs.free_pages(), free_with_buffer + 2, "zero-copy: the old pages freed, none allocated");
        assert_eq!(fs.live_buffers(), 0);

        // Aligned, a partial last page: the rest of the page is the file's.
        let b = fs.patch_buffer(PAGE).unwrap();
        fs.buffer_copy_in(b.id, 0, &[9u8; 1000]).unwrap();
        fs.patch(fd, 3 * PAGE, b.id, 1000).unwrap();
        expect[3 * PAGE as usize..3 * PAGE as usize + 1000].fill(9);
        assert_eq!(content(&fs, b"/f").unwrap(), expect);

        // Unaligned: copied as a write.
        let b = fs.patch_buffer(3000).unwrap();
        fs.buffer_copy_in(b.id, 0, &[7u8; 3000]).unwrap();
        fs.patch(fd, 4000, b.id, 3000).unwrap();
        expect[4000..7000].fill(7);
        assert_eq!(content(&fs, b"/f").unwrap(), expect);

        // Past the end, leaving a hole; the buffer's extra pages go back.
        let b = fs.patch_buffer(3 * PAGE).unwrap();
        fs.buffer_copy_in(b.id, 0, &[3u8; 500]).unwrap();
        fs.patch(fd, 8 * PAGE, b.id, 500).unwrap();
        expect.resize(8 * PAGE as usize, 0);
        expect.extend_from_slice(&[3u8; 500]);
        assert_eq!(content(&fs, b"/f").unwrap(), expect);
        assert_eq!(fs.fstat(fd).unwrap().size, 8 * PAGE + 500);

        // Strict: durable at return (a crash right after keeps it).
        fs.close(fd).unwrap();
        let (fs, report) = remount_checked(fs, true);
        assert!(report.is_clean(), "{report}");
        assert_eq!(content(&fs, b"/f").unwrap(), expect);
    }
}

#[test]
fn fsync_atomic_patches_commit_at_fsync() {
    let fs = format(Pmem::heap(POOL_PAGES * PAGE), FileMode::FsyncAtomic);
    let before = pattern(3, 2 * PAGE as usize);
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, &before, 0).unwrap();
    fs.fsync(fd).unwrap();
    let b = fs.patch_buffer(PAGE).unwrap();
    fs.buffer_copy_in(b.id, 0, &[1u8; PAGE as usize]).unwrap();
    fs.patch(fd, 0, b.id, PAGE).unwrap();
    let mut after = before.clone();
    after[..PAGE as usize].fill(1);
    assert_eq!(content(&fs, b"/f").unwrap(), after, "reads see the patch at once");
    // A crash before fsync: the patch is gone, and so is its buffer.
    let image = {
        let pmem = fs.pmem().clone();
        fs.close(fd).unwrap();
        drop(fs);
        pmem.image()
    };
    let crashed = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
    assert_eq!(content(&crashed, b"/f").unwrap(), before);
    let (crashed, report) = remount_checked(crashed, false);
    assert!(report.is_clean(), "{report}");
    // With the fsync it stays.
    let fd = crashed.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let b = crashed.patch_buffer(PAGE).unwrap();
    crashed.buffer_copy_in(b.id, 0, &[1u8; PAGE as usize]).unwrap();
    crashed.patch(fd, 0, b.id, PAGE).unwrap();
    crashed.fsync(fd).unwrap();
    crashed.close(fd).unwrap();
    let (fs, report) = remount_checked(crashed, true);
    assert!(report.is_clean(), "{report}");
    assert_eq!(content(&fs, b"/f").unwrap(), after);
}

#[test]
fn unpatched_buffers_are_reclaimed_by_unmount_and_by_recovery() {
    for crash in [false, true] {
        let fs = format(Pmem::heap(POOL_PAGES * PAGE), FileMode::Strict);
        ferrite_tests::put(&fs, b"/f", &pattern(4, 3 * PAGE as usize)).unwrap();
        let free = fs.free_pages();
        let fd = fs.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
        let _view = fs.peek(fd, 0, 3 * PAGE).unwrap();
        fs.close(fd).unwrap();
        for len in [1, PAGE, 5 * PAGE + 1] {
            let b = fs.patch_buffer(len).unwrap();
            fs.buffer_copy_in(b.id, 0, &vec![0xAB; len as usize]).unwrap();
        }
        assert_eq!(fs.free_pages(), free - 1 - 1 - 6);
        let (fs, report) = remount_checked(fs, crash);
        assert!(report.is_clean(), "crash {crash}: {report}");
        assert_eq!(fs.free_pages(), free, "crash {crash}: buffer pages leaked");
        assert_eq!(content(&fs, b"/f").unwrap(), pattern(4, 3 * PAGE as usize));
    }
}

#[test]
fn misuse_gets_clear_errors_and_changes_nothing() {
    let fs = format(Pmem::heap(POOL_PAGES * PAGE), FileMode::Strict);
    let other = format(Pmem::heap(POOL_PAGES * PAGE), FileMode::Strict);
    let data = pattern(5, 2 * PAGE as usize + 10);
    ferrite_tests::put(&fs, b"/f", &data).unwrap();
    fs.mkdir(b"/d", 0o755).unwrap();
    let free = fs.free_pages();
    let rd = fs.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    let rw = fs.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let dir = fs.open(b"/d", OpenFlags::RDONLY.directory(), 0).unwrap();

    // Views: zero length, past the end, a directory, a bad descriptor, a
    // write-only descriptor, an unaligned mapping, unpeek twice.
    assert_eq!(fs.peek(rd, 0, 0).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.peek(rd, 0, data.len() as u64 + 1).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.peek(rd, data.len() as u64, 1).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.peek(rd, u64::MAX, 2).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.peek(dir, 0, 1).unwrap_err(), Errno::EISDIR);
    assert_eq!(fs.peek(Fd(999), 0, 1).unwrap_err(), Errno::EBADF);
    let wo = fs.open(b"/f", OpenFlags::WRONLY, 0).unwrap();
    assert_eq!(fs.peek(wo, 0, 1).unwrap_err(), Errno::EBADF);
    assert_eq!(fs.map_view(rd, 100, 1, MapKind::ReadOnly).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.peek(rd, 0, ferrite::limits::VIEW_BYTES_MAX + 1).unwrap_err(), Errno::EINVAL);
    let v = fs.peek(rd, 10, 100).unwrap();
    fs.unpeek(v.id).unwrap();
    assert_eq!(fs.unpeek(v.id).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.unpeek(ViewId(12345)).unwrap_err(), Errno::EINVAL);

    // Buffers: zero length, patch twice, longer than the buffer, into a
    // directory, through a read-only descriptor, a buffer of another pool,
    // a view's address as a buffer, free twice.
    assert_eq!(fs.patch_buffer(0).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.patch_buffer(ferrite::limits::BUFFER_BYTES_MAX + 1).unwrap_err(), Errno::EINVAL);
    let b = fs.patch_buffer(PAGE).unwrap();
    fs.buffer_copy_in(b.id, 0, &[1u8; 16]).unwrap();
    assert_eq!(fs.patch(rw, 0, b.id, 0).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.patch(rw, 0, b.id, PAGE + 1).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.patch(rd, 0, b.id, 16).unwrap_err(), Errno::EBADF);
    assert_eq!(fs.patch(dir, 0, b.id, 16).unwrap_err(), Errno::EBADF);
    let root = fs.engine().open_ino(ferrite::InodeNo::ROOT).unwrap();
    assert_eq!(fs.engine().patch(&root, 0, b.id, 16).unwrap_err(), Errno::EISDIR);
    fs.engine().release_ino(&root);
    assert_eq!(fs.patch(rw, ferrite::limits::FILE_SIZE_MAX, b.id, 16).unwrap_err(), Errno::EFBIG);
    let foreign = other.patch_buffer(PAGE).unwrap();
    assert_eq!(fs.patch(rw, 0, foreign.id, 16).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.free_buffer(foreign.id).unwrap_err(), Errno::EINVAL);
    let v = fs.peek(rd, 0, 10).unwrap();
    assert_eq!(fs.patch(rw, 0, BufferId(v.id.0), 10).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.unpeek(ViewId(b.id.0)).unwrap_err(), Errno::EINVAL);
    fs.unpeek(v.id).unwrap();
    // Nothing changed so far; the buffer is still the caller's.
    assert_eq!(content(&fs, b"/f").unwrap(), data);
    assert_eq!(fs.live_buffers(), 1);
    fs.patch(rw, 0, b.id, 16).unwrap();
    assert_eq!(fs.patch(rw, 0, b.id, 16).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.free_buffer(b.id).unwrap_err(), Errno::EINVAL);
    let mut expect = data.clone();
    expect[..16].fill(1);
    assert_eq!(content(&fs, b"/f").unwrap(), expect);
    assert_eq!(fs.free_pages(), free);
    for fd in [rd, rw, wo, dir] {
        fs.close(fd).unwrap();
    }
    other.free_buffer(foreign.id).unwrap();
}
