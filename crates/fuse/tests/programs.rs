//! What this proves: unmodified programs work on a Ferrite FUSE mount and
//! their results are right — `cp -a` of a tree of a few thousand files
//! (with symlinks, hard links, modes, times) compared by `diff -r` and by a
//! metadata + checksum manifest; `tar` create and extract; `git` init, add,
//! commit, log, gc and `fsck --full`; sqlite3 with WAL and DELETE journals
//! ending in `PRAGMA integrity_check` = ok, its rollback of a VACUUM
//! that filled a 16 MiB mount and its recovery from a WAL that filled
//! one, as on a 16 MiB tmpfs; `make` of a small C program that
//! then runs; a Python script that walks, renames and deletes; the
//! preload library's C program of calls and edge cases, LMDB with its
//! shared mappings, and shared mappings between two processes (LMDB
//! environments opened by both among them), with the same output as on
//! tmpfs. Every test ends with a clean unmount and an fsck-clean pool.
//!
//! The `*_buffered` tests run the copy and tar (on a third of the tree),
//! git and sqlite3 on a `-o mode=buffered` mount, where every operation
//! returns before it is durable: the same results, and unmounting drains
//! everything (sqlite3 checks its databases again after a remount).
//!
//! FERRITE_FUSE_TREE_FILES sets the size of the copied tree (default 3000).

mod common;

use common::*;
use std::fs;
use std::path::Path;

/// A deterministic tree of `files` files in nested directories, with
/// symlinks, hard links, empty files, odd modes and a few large files.
fn make_tree(root: &Path, files: usize) {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..files {
        let dir = root.join(format!("d{:02}/s{:02}", i % 37, (i / 37) % 5));
        fs::create_dir_all(&dir).unwrap();
        let size = match i % 50 {
            0 => 0,
            1 => 1 << 20,
            2..=9 => (rnd() % 200_000) as usize,
            _ => (rnd() % 9000) as usize,
        };
        let byte = (i % 251) as u8;
        let data: Vec<u8> = (0..size).map(|j| byte.wrapping_add((j % 253) as u8)).collect();
        let p = dir.join(format!("file-{i:05}.dat"));
        fs::write(&p, &data).unwrap();
        if i % 97 == 0 {
            std::os::unix::fs::symlink(format!("file-{i:05}.dat"), dir.join(format!("link-{i:05}"))).unwrap();
        }
        if i % 89 == 0 {
            fs::hard_link(&p, dir.join(format!("hard-{i:05}"))).unwrap();
        }
        if i % 13 == 0 {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600 + (i % 8) as u32 * 0o10)).unwrap();
        }
    }
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
    fs::create_dir_all(root.join("empty/dir/chain")).unwrap();
}

#[test]
fn cp_diff_and_tar() {
    cp_diff_and_tar_on("", 1);
}

#[test]
fn cp_diff_and_tar_buffered() {
    cp_diff_and_tar_on("mode=buffered", 3);
}

/// The copy and tar test with extra mount options, on 1/`fraction` of the
/// tree.
fn cp_diff_and_tar_on(opts: &str, fraction: usize) {
    if !fuse_usable() {
        return;
    }
    let files = env_num("FERRITE_FUSE_TREE_FILES", 3000) as usize / fraction;
    let src = TempDir::new("tree");
    make_tree(&src.0, files);
    let pool = Pool::new("cp");
    let m = Mount::new(&pool, &format!("size=2G,{opts}"));
    let s = src.0.display();
    let d = m.dir.display();
    sh(&m.dir, &format!("cp -a {s} {d}/copy && diff -r --no-dereference {s} {d}/copy"));
    // Modes, sizes, link counts, link targets, times and contents.
    let times = format!("cd {s} && find . -printf '%p %T@\\n' | sort > /tmp/ferrite-times-$$-a; cd {d}/copy && find . -printf '%p %T@\\n' | sort > /tmp/ferrite-times-$$-b; cmp /tmp/ferrite-times-$$-a /tmp/ferrite-times-$$-b; rm -f /tmp/ferrite-times-$$-?");
    sh(&m.dir, &times);
    assert_eq!(manifest(&src.0), manifest(&m.path("copy")));
    // tar through the mount, both ways.
    sh(&m.dir, "tar -cf archive.tar copy && mkdir x && tar -C x -xpf archive.tar");
    sh(&m.dir, &format!("diff -r --no-dereference {s} x/copy"));
    sh(&m.dir, &format!("mkdir y && tar -C {s} -czf - . | tar -C y -xzf - && diff -r --no-dereference {s} y"));
    // Remove it all (rm -r walks and unlinks while listing).
    sh(&m.dir, "rm -rf copy x y archive.tar && test -z \"$(ls -A)\"");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn git_repository() {
    git_repository_on("");
}

#[test]
fn git_repository_buffered() {
    git_repository_on("mode=buffered");
}

fn git_repository_on(opts: &str) {
    if !fuse_usable() || !tool("git", "apt-get install -y git") {
        return;
    }
    let pool = Pool::new("git");
    let m = Mount::new(&pool, opts);
    let out = sh(
        &m.dir,
        r#"
        export GIT_CONFIG_NOSYSTEM=1 HOME="$PWD"
        git config --global user.email t@example.com
        git config --global user.name tester
        git config --global init.defaultBranch main
        git init -q repo && cd repo
        for i in $(seq 1 200); do mkdir -p src/m$((i % 10)); printf 'line %s\n%.0s' $(seq 1 $i) > src/m$((i % 10))/f$i.txt; done
        git add -A && git commit -qm first
        for i in $(seq 1 200 3); do echo changed >> src/m$((i % 10))/f$i.txt; done
        git mv src/m1 src/moved && git rm -q src/m2/f2.txt
        git commit -qam second
        git checkout -qb topic && echo topic > topic.txt && git add topic.txt && git commit -qm third
        git checkout -q main && git merge -q --no-edit topic
        git gc -q --aggressive
        git fsck --full --strict
        git log --oneline | wc -l
        git status --porcelain | wc -l
        "#,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[lines.len() - 2..], ["3", "0"], "git output:\n{out}");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn sqlite_wal_and_delete_journals() {
    sqlite_on("");
}

#[test]
fn sqlite_wal_and_delete_journals_buffered() {
    sqlite_on("mode=buffered");
}

fn sqlite_on(opts: &str) {
    if !fuse_usable() || !tool("sqlite3", "apt-get install -y sqlite3") {
        return;
    }
    let pool = Pool::new("sqlite");
    let m = Mount::new(&pool, opts);
    for mode in ["wal", "delete"] {
        let out = sh(
            &m.dir,
            &format!(
                r#"
                db=test-{mode}.db
                sqlite3 $db "PRAGMA journal_mode={mode}; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER); CREATE INDEX tn ON t(n);" > /dev/null
                for b in $(seq 0 19); do
                  {{ echo "BEGIN;"; for i in $(seq 1 100); do echo "INSERT INTO t(v, n) VALUES (hex(randomblob(64)), $b * 100 + $i);"; done; echo "COMMIT;"; }} | sqlite3 $db
                done
                sqlite3 $db "UPDATE t SET v = v || 'x' WHERE n % 7 = 0; DELETE FROM t WHERE n % 11 = 0; VACUUM;"
                sqlite3 $db "PRAGMA integrity_check; SELECT count(*) FROM t; PRAGMA journal_mode;"
                "#
            ),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines, ["ok", "1819", mode], "sqlite3 ({mode}) output:\n{out}");
    }
    m.unmount();
    pool.fsck_clean();
    // And after a remount, the databases are intact.
    let m = Mount::new(&pool, opts);
    let out = sh(&m.dir, "sqlite3 test-wal.db 'PRAGMA integrity_check; SELECT count(*) FROM t;'; sqlite3 test-delete.db 'PRAGMA integrity_check;'");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["ok", "1819", "ok"]);
    m.unmount();
}

#[test]
fn make_c_program() {
    if !fuse_usable() || !tool("make", "apt-get install -y make") || !tool("cc", "apt-get install -y gcc") {
        return;
    }
    let pool = Pool::new("make");
    let m = Mount::new(&pool, "");
    let out = sh(
        &m.dir,
        r#"
        mkdir proj && cd proj
        cat > util.h <<'EOF'
int triangle(int n);
EOF
        cat > util.c <<'EOF'
#include "util.h"
int triangle(int n) { return n <= 0 ? 0 : n + triangle(n - 1); }
EOF
        cat > main.c <<'EOF'
#include <stdio.h>
#include "util.h"
int main(void) { printf("triangle(100)=%d\n", triangle(100)); return 0; }
EOF
        printf 'hello: main.o util.o\n\tcc -o $@ $^\n%%.o: %%.c util.h\n\tcc -O2 -Wall -c -o $@ $<\nclean:\n\trm -f hello *.o\n' > Makefile
        make -s -j2
        ./hello
        sleep 1.1; touch util.h; make -s -j2 | wc -l; ./hello
        make -s clean && test ! -e hello
        "#,
    );
    assert!(out.contains("triangle(100)=5050"), "make output:\n{out}");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn python_walk_rename_delete() {
    if !fuse_usable() || !tool("python3", "apt-get install -y python3") {
        return;
    }
    let pool = Pool::new("python");
    let m = Mount::new(&pool, "");
    let out = sh(
        &m.dir,
        r#"python3 - <<'EOF'
import os, shutil, hashlib
root = "tree"
for a in range(8):
    for b in range(8):
        d = os.path.join(root, f"a{a}", f"b{b}")
        os.makedirs(d)
        for c in range(10):
            with open(os.path.join(d, f"f{c}"), "wb") as f:
                f.write(hashlib.sha256(f"{a}{b}{c}".encode()).digest() * (c + 1))
count = sum(len(fs) for _, _, fs in os.walk(root))
assert count == 640, count
# Rename every b directory, then every file in even ones.
for a in range(8):
    for b in range(8):
        os.rename(os.path.join(root, f"a{a}", f"b{b}"), os.path.join(root, f"a{a}", f"renamed{b}"))
for dirpath, dirs, files in os.walk(root):
    for f in files:
        if f.endswith(("0", "2", "4")):
            os.rename(os.path.join(dirpath, f), os.path.join(dirpath, f + ".moved"))
# Verify contents survived the renames.
for dirpath, dirs, files in os.walk(root):
    for f in files:
        a, b, c = dirpath.split(os.sep)[1][1], dirpath.split(os.sep)[2][-1], f[1]
        with open(os.path.join(dirpath, f), "rb") as fh:
            assert fh.read() == hashlib.sha256(f"{a}{b}{c}".encode()).digest() * (int(c) + 1), (dirpath, f)
# Delete half the files while walking top-down, then whole subtrees.
removed = 0
for dirpath, dirs, files in os.walk(root):
    for f in files:
        if f.endswith(".moved"):
            os.unlink(os.path.join(dirpath, f)); removed += 1
assert removed == 8 * 8 * 3, removed
shutil.rmtree(os.path.join(root, "a0"))
left = sum(len(fs) for _, _, fs in os.walk(root))
assert left == 7 * 8 * 7, left
shutil.rmtree(root)
assert os.listdir(".") == [], os.listdir(".")
print("python ok")
EOF"#,
    );
    assert!(out.contains("python ok"), "{out}");
    m.unmount();
    pool.fsck_clean();
}

/// LMDB (Python's binding; `crates/capi/tests/py/lmdb_env.py`) on the
/// mount and on tmpfs: reads through a read-only shared mapping of pages
/// written with pwrite, a map of 2 GiB, and MDB_WRITEMAP's stores through
/// a writable shared mapping, then a second environment and a forked child
/// read everything. The same output.
#[test]
fn lmdb_matches_tmpfs() {
    // Debian's python3-lmdb is for the system's interpreter.
    let python = system_python();
    let has_lmdb = std::process::Command::new(python).args(["-c", "import lmdb"]).status().is_ok_and(|s| s.success());
    if !fuse_usable() {
        return;
    }
    if !has_lmdb {
        // `tool` says it (and fails under CI=true): the module is no program.
        let _ = tool("python3 with the lmdb module", "apt-get install -y python3-lmdb");
        return;
    }
    let (expect, got, pool, m) = on_tmpfs_and_mount("lmdb", python_script(python, "lmdb_env.py", &["child"]));
    assert_eq!(got, expect, "lmdb on the mount against tmpfs");
    m.unmount();
    pool.fsck_clean();
}

/// Shared mappings between two processes on the mount
/// (`crates/capi/tests/py/shared_maps.py`: each one's mapping shows what
/// the other wrote, stores reach the other's reads, a truncate reaches the
/// mappings, LMDB environments opened by both): the same output as on
/// tmpfs. Here the kernel's page cache is the one both share.
#[test]
fn shared_mappings_between_processes_match_tmpfs() {
    if !fuse_usable() {
        return;
    }
    let run = python_script(system_python(), "shared_maps.py", &[]);
    let (expect, got, pool, m) = on_tmpfs_and_mount("shared-maps", run);
    assert!(expect.contains("1 owner's mapping b'child'"), "unexpected tmpfs run:\n{expect}");
    assert_eq!(got, expect, "shared_maps.py on the mount against tmpfs");
    m.unmount();
    pool.fsck_clean();
}

/// The system's Python (where Debian's modules are), else the one in PATH.
fn system_python() -> &'static str {
    if Path::new("/usr/bin/python3").is_file() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A run of the preload library's test script `name`
/// (`crates/capi/tests/py`) in a directory, with `args` after it: its
/// output; it must succeed.
fn python_script<'a>(python: &'a str, name: &'a str, args: &'a [&'a str]) -> impl Fn(&Path) -> String + 'a {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/py").join(name);
    move |dir: &Path| {
        let out = std::process::Command::new(python).arg(&script).arg(dir).args(args).output().expect("run python");
        assert!(out.status.success(), "{name} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `run` in a fresh directory of tmpfs, then in directory `t` of a fresh
/// mount: both outputs, and the pool and its mount (still mounted).
fn on_tmpfs_and_mount(label: &str, run: impl Fn(&Path) -> String) -> (String, String, Pool, Mount) {
    let reference = TempDir(Path::new("/dev/shm").join(format!("ferrite-fuse-{label}-{}", std::process::id())));
    fs::create_dir_all(&reference.0).unwrap();
    let expect = run(&reference.0);
    let pool = Pool::new(label);
    let m = Mount::new(&pool, "");
    fs::create_dir(m.path("t")).unwrap();
    let got = run(&m.path("t"));
    (expect, got, pool, m)
}

/// The C program of the preload library's tests (`crates/capi/tests/c/
/// calls.c`: every call that library intercepts, and about a hundred
/// whose answers Linux defines at the edges), run as it is on the mount
/// and on tmpfs: the same output, line by line.
#[test]
fn calls_c_matches_tmpfs() {
    if !fuse_usable() || !tool("cc", "apt-get install -y gcc") {
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/c/calls.c");
    let bin = TempDir::new("calls-bin");
    let exe = bin.0.join("calls");
    let st = std::process::Command::new("cc")
        .args(["-O2", "-D_FORTIFY_SOURCE=2", "-w", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {} failed", src.display());
    let run = |dir: &Path| {
        // A mount private to root refuses every other user in the kernel
        // (no allow_other): calls.c leaves out its identity changes. FIFOs
        // on the mount are the kernel's: their opens are compared too.
        // O_TMPFILE is not served through the mount (docs/FUSE.md).
        let out = std::process::Command::new(&exe)
            .arg(dir)
            .env("CALLS_NO_IDS", "1")
            .env("CALLS_SPECIAL_OPEN", "1")
            .env("CALLS_NO_TMPFILE", "1")
            .output()
            .expect("run calls");
        assert!(out.status.success(), "calls in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (expect, got, pool, m) = on_tmpfs_and_mount("calls", run);
    for (i, (e, g)) in expect.lines().zip(got.lines()).enumerate() {
        assert_eq!(g, e, "line {} of calls.c's output: the mount against tmpfs", i + 1);
    }
    assert_eq!(got.lines().count(), expect.lines().count(), "calls.c's output has another length on the mount");
    m.unmount();
    pool.fsck_clean();
}

/// SQLite filling the file system, on a 16 MiB mount and on a 16 MiB
/// tmpfs: a database grown to half the space, then a VACUUM that cannot
/// fit fails with "database or disk is full" and rolls back (SQLite writes
/// its journal's pages back over the database, then deletes the journal),
/// so the database is intact, usable and alone in its directory, as on
/// tmpfs. On a pool that copies on write the rollback's overwrites need
/// pages: they borrow the removal reserve, and the journal's deletion takes
/// it (docs/DESIGN.md, "Space for removals"); before that, the failed
/// VACUUM left a 7 MB hot journal that every later statement had to roll
/// back first, and failed to: "database or disk is full" forever. (The
/// script waits for the free count to settle after the VACUUM: the daemon
/// frees the deleted journal's pages when the kernel forgets the file,
/// asynchronously, and the DELETE's own journal needs them.)
#[test]
fn sqlite_rolls_back_on_a_full_mount_as_on_tmpfs() {
    if !fuse_usable() || !tool("sqlite3", "apt-get install -y sqlite3") {
        return;
    }
    let script = r#"
        sqlite3 t.db "CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(1000));"
        for i in $(seq 1 13); do sqlite3 t.db "INSERT INTO t SELECT randomblob(1000) FROM t;"; done
        echo "vacuum: $(sqlite3 t.db 'VACUUM;' 2>&1 | sed 's/^Error: [a-z]*, //')"
        same=0; free=$(stat -f -c %f .)
        for i in $(seq 1 400); do
            sleep 0.05; now=$(stat -f -c %f .)
            if [ "$now" = "$free" ]; then same=$((same + 1)); else same=0; fi
            free=$now; [ $same -ge 3 ] && break
        done
        sqlite3 t.db "PRAGMA integrity_check; SELECT count(*) FROM t;"
        sqlite3 t.db "DELETE FROM t WHERE rowid > 6144; PRAGMA integrity_check; SELECT count(*) FROM t;"
        ls
    "#;
    sqlite_on_a_full_mount_and_tmpfs("sqlite-full", "", script, "vacuum: database or disk is full");
}

/// SQLite in WAL mode filling the file system, on a 16 MiB mount and on a
/// 16 MiB tmpfs: a table doubled until its WAL no longer fits ("database
/// or disk is full"), then, once a 16 KiB file is removed, the next
/// connection truncates the WAL index (`-shm`) and grows it again page by
/// page, checks the database, deletes rows, checkpoints and inserts, as on
/// tmpfs. (The removal's pages are waited for: the daemon frees them when
/// the kernel forgets the file, which it does asynchronously. On a
/// buffered mount, when the persister has written the removal. The four
/// pages freed are headroom for metadata a kernel file
/// system does not need: on a full pool a write that only replaces a page
/// may borrow a reserve page for its log and give back only the data page,
/// and the truncate's pages then repay it, so the regrowth fell a page
/// short about 2 runs in 80; docs/DESIGN.md, "Space for removals". The
/// reserve drain below cost 13 pages, far more than four.) Before the pool-wide
/// reserve (docs/DESIGN.md, "Space for removals"), the WAL's appends,
/// split by the kernel at page boundaries, borrowed the reserve of the
/// daemon thread's lane for each page they copied and gave the old page
/// back to another lane, where the next append took it: the reserve
/// drained, the pages the `-shm` truncate freed went to refill it, its
/// growth failed, and every later statement failed with "disk I/O error".
#[test]
fn sqlite_wal_recovers_on_a_full_mount_as_on_tmpfs() {
    sqlite_wal_on_a_full_mount("");
}

/// The same on a buffered mount, whose pages come back when the persister
/// has written what released them.
#[test]
fn sqlite_wal_recovers_on_a_full_buffered_mount_as_on_tmpfs() {
    sqlite_wal_on_a_full_mount(",mode=buffered");
}

fn sqlite_wal_on_a_full_mount(opts: &str) {
    if !fuse_usable() || !tool("sqlite3", "apt-get install -y sqlite3") {
        return;
    }
    let script = r#"
        head -c 16384 /dev/zero > spare
        sqlite3 w.db "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(1000));"
        for i in $(seq 1 14); do
            echo "double $i: $(sqlite3 w.db 'INSERT INTO t SELECT randomblob(1000) FROM t;' 2>&1 | sed 's/^Error: [a-z]*, //')"
        done
        free=$(stat -f -c %f .)
        rm spare
        for i in $(seq 1 400); do [ "$(stat -f -c %f .)" -gt "$free" ] && break; sleep 0.05; done
        sqlite3 w.db "PRAGMA integrity_check; SELECT count(*) FROM t;"
        sqlite3 w.db "DELETE FROM t WHERE rowid > 6144; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA integrity_check;
                      SELECT count(*) FROM t;" | sed 's/^0|.*/checkpointed/'
        sqlite3 w.db "INSERT INTO t SELECT randomblob(1000) FROM t WHERE rowid <= 1000; PRAGMA integrity_check;
                      SELECT count(*) FROM t;"
        ls
    "#;
    sqlite_on_a_full_mount_and_tmpfs("sqlite-wal-full", opts, script, "double 14: database or disk is full");
}

/// Run `script` on a 16 MiB tmpfs, which must print `full` (the script
/// filled it), then on a 16 MiB mount with options `opts` (after `size`),
/// and compare.
fn sqlite_on_a_full_mount_and_tmpfs(name: &str, opts: &str, script: &str, full: &str) {
    let reference = TempDir::new(&format!("{name}-tmpfs"));
    let target = reference.0.to_str().unwrap();
    sh(Path::new("/"), &format!("mount -t tmpfs -o size=16M ferrite-test-tmpfs {target}"));
    let expect = std::panic::catch_unwind(|| sh(&reference.0, script));
    sh(Path::new("/"), &format!("umount {target}"));
    let expect = expect.expect("the script on tmpfs");
    assert!(expect.contains(full), "tmpfs did not fill up:\n{expect}");
    let pool = Pool::new(name);
    let m = Mount::new(&pool, &format!("size=16M{opts}"));
    let got = sh(&m.dir, script);
    assert_eq!(got, expect, "sqlite3 on a full mount ({opts}) against a full tmpfs");
    m.unmount();
    pool.fsck_clean();
}
