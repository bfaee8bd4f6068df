//! Proves the `ferrite` command works end to end as a user runs it: the
//! built binary, on real pool files in /dev/shm. `mkfs` makes a pool that
//! `info` reports clean and refuses to overwrite one without --force;
//! `fsck` exits 0 on a fresh pool and 1 once bytes of the inode table or of
//! a log page are damaged; `info`/`fsck` on a file that is not a pool exit 2
//! with a one-line message naming it; `demo` passes and leaves a pool that
//! `fsck` finds clean; `$FERRITE_POOL` names the default pool; `info` of a
//! pool open elsewhere reads it without the lock and without changing it.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A directory under /dev/shm private to one test, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = PathBuf::from(format!(
            "/dev/shm/ferrite-cli-test-{}-{}-{tag}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run the binary with `args` (no $FERRITE_POOL unless `env` sets it).
fn run_env(args: &[&str], env: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    c.args(args).env_remove("FERRITE_POOL");
    if let Some(p) = env {
        c.env("FERRITE_POOL", p);
    }
    c.output().expect("run ferrite")
}

fn run(args: &[&str]) -> Output {
    run_env(args, None)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert the exit status, showing the output when it is wrong.
fn expect_code(o: &Output, code: i32, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{what}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
}

fn mkfs(pool: &Path, size: &str) {
    let o = run(&["mkfs", pool.to_str().unwrap(), "--size", size, "--lanes", "2"]);
    expect_code(&o, 0, "mkfs");
}

/// Byte offset of the root inode's slot (slot 1 of the inode table).
fn root_slot(pool: &Path) -> u64 {
    let pmem = ferrite_pmem::Pmem::open_file(pool, 64 * 4096).unwrap();
    let sb = ferrite::read_superblock(&pmem).unwrap();
    sb.inode_table_start.0 * 4096 + 128
    // `pmem` is dropped here, releasing the pool's lock for the binary.
}

fn flip(pool: &Path, offset: u64, len: usize) {
    let f = OpenOptions::new().read(true).write(true).open(pool).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, offset).unwrap();
    for x in &mut b {
        *x ^= 0xA5;
    }
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn mkfs_then_info_shows_a_clean_pool() {
    let s = Scratch::new("info");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    mkfs(&pool, "8M");
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 8 << 20);
    let o = run(&["info", p]);
    expect_code(&o, 0, "info");
    let out = stdout(&o);
    assert!(out.contains("state          clean"), "{out}");
    assert!(out.contains(&format!("version {}", ferrite::format::FORMAT_VERSION)), "{out}");
    assert!(out.contains("2048 pages"), "{out}");
    assert!(out.contains("lanes          2"), "{out}");
    assert!(out.contains("persistence"), "{out}");
    // info without --usage changes nothing: the file is byte-identical.
    let before = std::fs::read(&pool).unwrap();
    expect_code(&run(&["info", p]), 0, "info again");
    assert!(std::fs::read(&pool).unwrap() == before, "info changed the pool");
    // --usage mounts and unmounts cleanly.
    let o = run(&["info", p, "--usage"]);
    expect_code(&o, 0, "info --usage");
    assert!(stdout(&o).contains("inodes         1 used"), "{}", stdout(&o));
    assert!(stdout(&o).contains("more kept for removals"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("recovery"), "{}", stdout(&o));
    assert!(stdout(&run(&["info", p])).contains("state          clean"));
    // dump decodes the root.
    let o = run(&["dump", p]);
    expect_code(&o, 0, "dump");
    assert!(stdout(&o).contains("inode 1"), "{}", stdout(&o));
}

#[test]
fn mkfs_refuses_to_overwrite_a_pool_without_force() {
    let s = Scratch::new("force");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    mkfs(&pool, "1M");
    let before = std::fs::read(&pool).unwrap();
    let o = run(&["mkfs", p, "--size", "2M"]);
    expect_code(&o, 2, "mkfs over a pool");
    let err = stderr(&o);
    assert!(err.starts_with(&format!("ferrite: {p}: ")), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(std::fs::read(&pool).unwrap() == before, "pool was changed");
    let o = run(&["mkfs", p, "--size", "2M", "--force"]);
    expect_code(&o, 0, "mkfs --force");
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 2 << 20);
    // Bad parameters never touch an existing file.
    let before = std::fs::read(&pool).unwrap();
    let o = run(&["mkfs", p, "--size", "2M", "--force", "--lanes", "65"]);
    expect_code(&o, 2, "mkfs with 65 lanes");
    assert!(std::fs::read(&pool).unwrap() == before, "pool was changed");
}

#[test]
fn fsck_is_clean_on_a_fresh_pool_and_finds_a_damaged_inode() {
    let s = Scratch::new("fsck-inode");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    mkfs(&pool, "4M");
    expect_code(&run(&["fsck", p]), 0, "fsck of a fresh pool");
    // Damage the root inode's header (bytes 24..64 of its slot, under its CRC).
    let slot = root_slot(&pool);
    flip(&pool, slot + 32, 8);
    let o = run(&["fsck", p]);
    expect_code(&o, 1, "fsck of a damaged inode");
    assert!(!stdout(&o).is_empty());
}

#[test]
fn fsck_finds_a_damaged_log_page() {
    let s = Scratch::new("fsck-log");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    // A pool whose root holds names (a new root has its attributes in its
    // slot and no log page yet): the demo's tree, left clean.
    expect_code(&run(&["demo", p, "--files", "8", "--size", "4M"]), 0, "demo");
    expect_code(&run(&["fsck", p]), 0, "fsck of the demo's pool");
    // The root's log head (slot word at +8) is the pool offset of its
    // first log page; damage that page's header and first entry.
    let slot = root_slot(&pool);
    let f = std::fs::File::open(&pool).unwrap();
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, slot + 8).unwrap();
    let head = u64::from_le_bytes(w);
    assert!(head > 0 && head % 4096 == 0, "root log head {head:#x}");
    flip(&pool, head + 64, 32);
    let o = run(&["fsck", p]);
    expect_code(&o, 1, "fsck of a damaged log entry");
    flip(&pool, head + 64, 32);
    expect_code(&run(&["fsck", p]), 0, "fsck after undoing the damage");
    flip(&pool, head, 4);
    expect_code(&run(&["fsck", p]), 1, "fsck of a damaged log page header");
}

#[test]
fn info_and_fsck_refuse_files_that_are_not_pools() {
    let s = Scratch::new("notpool");
    let zeros = s.file("zeros");
    std::fs::write(&zeros, vec![0u8; 64 * 4096]).unwrap();
    let text = s.file("text");
    std::fs::write(&text, b"hello\n").unwrap();
    let missing = s.file("missing");
    for f in [&zeros, &text, &missing] {
        let p = f.to_str().unwrap();
        for cmd in ["info", "fsck", "dump"] {
            let o = run(&[cmd, p]);
            expect_code(&o, 2, &format!("{cmd} {p}"));
            let err = stderr(&o);
            assert!(err.starts_with(&format!("ferrite: {p}: ")), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(!err.contains("panicked"), "{err}");
            if f != &missing {
                assert!(err.contains("not a Ferrite pool"), "{err}");
            }
        }
    }
    // The demo does not overwrite a file that is not a pool.
    let o = run(&["demo", text.to_str().unwrap(), "--files", "8"]);
    expect_code(&o, 2, "demo over a text file");
    assert_eq!(std::fs::read(&text).unwrap(), b"hello\n");
}

#[test]
fn demo_passes_and_leaves_a_clean_pool() {
    let s = Scratch::new("demo");
    let pool = s.file("demo.pool");
    let p = pool.to_str().unwrap();
    let o = run(&["demo", p, "--files", "48", "--size", "16M"]);
    expect_code(&o, 0, "demo");
    let out = stdout(&o);
    assert!(out.contains("demo passed"), "{out}");
    assert!(out.contains("recovery ran: no"), "{out}");
    assert!(out.contains("recovery ran: yes"), "{out}");
    let o = run(&["fsck", p]);
    expect_code(&o, 0, "fsck after demo");
    // A second demo run replaces the pool it left.
    let o = run(&["demo", p, "--files", "8", "--size", "4M"]);
    expect_code(&o, 0, "demo again");
}

#[test]
fn ferrite_pool_names_the_default_pool() {
    let s = Scratch::new("env");
    let pool = s.file("env.pool");
    let o = run_env(&["mkfs", "--size", "1M"], Some(&pool));
    expect_code(&o, 0, "mkfs via $FERRITE_POOL");
    assert!(pool.exists());
    let o = run_env(&["info"], Some(&pool));
    expect_code(&o, 0, "info via $FERRITE_POOL");
    assert!(stdout(&o).contains(pool.to_str().unwrap()));
    expect_code(&run_env(&["fsck"], Some(&pool)), 0, "fsck via $FERRITE_POOL");
}

#[test]
fn info_reports_a_crashed_pool_dirty_and_usage_recovers_it() {
    let s = Scratch::new("dirty");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    {
        // A mount that ends without unmount: a crash as far as the pool knows.
        let pmem = ferrite_pmem::Pmem::create_file(&pool, 2 << 20, 64 * 4096).unwrap();
        let fs = ferrite::Session::format(pmem, &ferrite::FormatOptions::default()).unwrap();
        use ferrite::PathFs;
        fs.mkdir(b"/d", 0o755).unwrap();
        drop(fs);
    }
    let before = std::fs::read(&pool).unwrap();
    let o = run(&["info", p]);
    expect_code(&o, 0, "info of a dirty pool");
    assert!(stdout(&o).contains("state          dirty"), "{}", stdout(&o));
    assert!(std::fs::read(&pool).unwrap() == before, "info changed the pool");
    let o = run(&["info", p, "--usage"]);
    expect_code(&o, 0, "info --usage of a dirty pool");
    assert!(stdout(&o).contains("recovery       ran"), "{}", stdout(&o));
    assert!(stdout(&o).contains("inodes         2 used"), "{}", stdout(&o));
    let o = run(&["info", p]);
    assert!(stdout(&o).contains("state          clean"), "{}", stdout(&o));
    expect_code(&run(&["fsck", p]), 0, "fsck after recovery");
}

#[test]
fn info_reads_a_pool_open_elsewhere_without_touching_it() {
    let s = Scratch::new("open");
    let pool = s.file("p.pool");
    let p = pool.to_str().unwrap();
    // This process holds the pool open (and locked), as a mount does.
    let pmem = ferrite_pmem::Pmem::create_file(&pool, 2 << 20, 64 * 4096).unwrap();
    let fs = ferrite::Ferrite::format(pmem, &ferrite::FormatOptions::default()).unwrap();
    let before = std::fs::read(&pool).unwrap();
    let o = run(&["info", p]);
    expect_code(&o, 0, "info of an open pool");
    assert!(stdout(&o).contains("state          mounted (open by another process"), "{}", stdout(&o));
    assert!(std::fs::read(&pool).unwrap() == before, "info changed the pool");
    // --usage would mount it: refused while it is open.
    let o = run(&["info", p, "--usage"]);
    expect_code(&o, 2, "info --usage of an open pool");
    assert!(String::from_utf8_lossy(&o.stderr).contains("already open"), "{}", String::from_utf8_lossy(&o.stderr));
    fs.unmount().unwrap();
    assert!(stdout(&run(&["info", p])).contains("state          clean"));
}
