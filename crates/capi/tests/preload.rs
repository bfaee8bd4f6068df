//! The preload library runs unmodified programs on Ferrite, and they see
//! what they would see on tmpfs: a C program calling every intercepted
//! function (fortified and 64-bit names included), coreutils, tar, rsync
//! and Python on trees, sqlite3 and Python's sqlite3 with 100,000 rows in
//! WAL and DELETE modes, fio with verification (threads and forked jobs;
//! psync, pvsync2 and mmap engines), git and make through a shell whose
//! children reach the owner through its mount, and exec handing the pool
//! (and an inherited descriptor) to the next program, and flock, OFD and
//! POSIX locks between the owner and its children, and LMDB (Python's
//! binding) with its read-only and writable shared mappings, and shared
//! mappings between the owner and a child (LMDB environments opened by
//! both among them), and sqlite3 in WAL mode filling a 16 MiB pool and
//! going on after it (against a 16 MiB tmpfs). Each program's
//! output is diffed against the same steps on tmpfs, and the pool is
//! checked with fsck afterwards (and is clean: every program unmounted it).
//!
//! And the consistency modes under the library (`tests/py/modes.py`):
//! `FERRITE_ATOMIC` patterns make exactly the matching regular files
//! fsync-atomic when created or opened for writing, `FERRITE_MODE` sets the
//! mode of new files, a bad `FERRITE_MODE` turns the library off; and in a
//! program killed after writing to fsync-atomic files, fsync, fdatasync,
//! sync, an O_SYNC write, msync(MS_SYNC) and rename were commit points
//! while close, nothing, a truncate and stores after the msync were not.
//!
//! And buffered mounts (`FERRITE_MODE=buffered`): calls.c, sqlite3 in WAL
//! and DELETE modes, git and make through a shell whose children reach
//! the owner through its mount, and exec handing the pool over (the new
//! image must find what the old one wrote a moment before) give the same
//! output as on tmpfs, and each
//! program's exit leaves the pool cleanly unmounted (exit drains the
//! persister); `user.ferrite.mode` reads `buffered`, the mode stored in a
//! file created there is the pool's default and shows on a later strict
//! run; `FERRITE_BUFFERED_LAG_MS`/`FERRITE_BUFFERED_OPS_MAX` are taken,
//! and a bad value, or one without FERRITE_MODE=buffered, turns the library
//! off with a message.

mod common;

use common::{relative, run, run_within, same, tool, Env};
use std::path::Path;
use std::process::Command;

/// Compile `tests/c/calls.c`, with fortification, to a binary of this
/// test's own (`name`): the tests run in parallel in one process, and each
/// removes its binary when done, so a name shared by two of them let one
/// test remove the other's binary before it ran.
fn build_calls(name: &str) -> Option<std::path::PathBuf> {
    if !tool("cc") {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/calls.c");
    let out = common::target_dir().join(format!("{name}-{}", std::process::id()));
    run(Command::new("cc").args(["-O2", "-D_FORTIFY_SOURCE=2", "-w", "-o"]).arg(&out).arg(&src));
    Some(out)
}

fn calls_diff(mount: bool) {
    let name = if mount { "calls-mount" } else { "calls" };
    calls_diff_in(Env::new(name, mount), name);
}

/// `name`: the test's own, for its binary (see `build_calls`).
fn calls_diff_in(env: Env, name: &str) {
    let mount = env.mount;
    let Some(calls) = build_calls(name) else { return };
    if mount && !common::fuse_usable() {
        return;
    }
    // With the owner's mount, FIFOs in the pool open as on tmpfs.
    let special = |mut c: std::process::Command| {
        if mount {
            c.env("CALLS_SPECIAL_OPEN", "1");
        }
        c
    };
    let expect = run(special(env.plain(calls.to_str().unwrap())).arg(&env.tmpfs));
    let (got, err) = common::run_with_stderr(special(env.preloaded(calls.to_str().unwrap())).arg(&env.root));
    let _ = std::fs::remove_file(&calls);
    same("calls.c", &expect, &got);
    // The library says on stderr why it left the pool to recovery.
    assert!(env.fsck(), "the program's exit left the pool dirty; its stderr:\n{err}");
}

#[test]
fn every_intercepted_call_matches_tmpfs() {
    calls_diff(false);
}

#[test]
fn every_intercepted_call_matches_tmpfs_with_the_mount() {
    calls_diff(true);
}

#[test]
fn every_intercepted_call_matches_tmpfs_buffered() {
    calls_diff_in(Env::buffered("calls-buffered", false), "calls-buffered");
}

/// A small tree with files of several sizes, a symlink and a hard link.
fn make_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    for i in 0..20usize {
        let body: Vec<u8> = (0..i * 997).map(|k| (k * 31 + i) as u8).collect();
        std::fs::write(dir.join(format!("f{i}")), &body).unwrap();
        std::fs::write(dir.join(format!("sub/g{i}.txt")), format!("line {i}\n").repeat(i)).unwrap();
    }
    std::fs::write(dir.join("sub/deeper/big"), vec![7u8; 300_000]).unwrap();
    std::os::unix::fs::symlink("f3", dir.join("link")).unwrap();
    std::fs::hard_link(dir.join("f4"), dir.join("hard")).unwrap();
}

/// What a tree holds: every name with its type, permissions and links, and
/// the size and checksum of every regular file (directory sizes are the
/// file system's own business).
fn describe(env: &Env, preload: bool, dir: &Path) -> String {
    let script = format!(
        "cd '{}' && find . -printf '%p %y %m %n\\n' | sort && find . -type f -printf '%p %s\\n' | sort && \
         find . -type f ! -name '*.tar' | sort | xargs cksum && find . -type l -printf '%p -> %l\\n' | sort",
        dir.display()
    );
    let mut c = if preload { env.preloaded("sh") } else { env.plain("sh") };
    run(c.arg("-c").arg(script))
}

/// One step run as its own process (so each one is the owner and serves
/// its calls in-process), on both sides.
fn step(env: &Env, base_tmpfs: &Path, base_pool: &Path, args: &[&str]) -> (String, String) {
    let sub = |b: &Path| -> Vec<String> { args.iter().map(|a| a.replace("@", &b.to_string_lossy())).collect() };
    let a = sub(base_tmpfs);
    let b = sub(base_pool);
    let t = run(env.plain(&a[0]).args(&a[1..]));
    let f = run(env.preloaded(&b[0]).args(&b[1..]));
    let (mut t, mut f) = (relative(&t, base_tmpfs), relative(&f, base_pool));
    if args[0] == "find" {
        // find lists in directory order, which is the file system's own.
        let sorted = |s: &str| {
            let mut v: Vec<&str> = s.lines().collect();
            v.sort();
            v.join("\n")
        };
        (t, f) = (sorted(&t), sorted(&f));
    }
    (t, f)
}

#[test]
fn coreutils_tar_rsync_and_python_match_tmpfs() {
    for t in ["cp", "mv", "rm", "ls", "cat", "dd", "ln", "stat", "find", "du", "touch", "tar", "rsync", "python3"] {
        if !tool(t) {
            return;
        }
    }
    // rsync forks its receiver: children reach the pool through the
    // owner's mount.
    if !common::fuse_usable() {
        return;
    }
    let env = Env::new("coreutils", true);
    let src = env.tmpfs.join("src");
    make_tree(&src);
    let bt = env.tmpfs.join("t");
    let bp = env.root.join("t");
    std::fs::create_dir_all(&bt).unwrap();
    let src = src.to_string_lossy().into_owned();
    let steps: Vec<Vec<String>> = vec![
        vec!["mkdir".into(), "-p".into(), "@".into()],
        vec!["cp".into(), "-a".into(), src.clone(), "@/copy".into()],
        vec!["ls".into(), "-R".into(), "@/copy".into()],
        vec![
            "ls".into(),
            "-l".into(),
            "--time-style=+".into(),
            "@/copy/f1".into(),
            "@/copy/link".into(),
            "@/copy/hard".into(),
        ],
        vec!["cat".into(), "@/copy/sub/g5.txt".into(), "@/copy/link".into()],
        vec!["dd".into(), "if=@/copy/f9".into(), "of=@/copy/dd".into(), "bs=1000".into(), "status=none".into()],
        vec![
            "dd".into(),
            "if=/dev/zero".into(),
            "of=@/copy/dd".into(),
            "bs=7".into(),
            "count=3".into(),
            "seek=2".into(),
            "conv=notrunc".into(),
            "status=none".into(),
        ],
        vec!["ln".into(), "@/copy/f5".into(), "@/copy/f5-hard".into()],
        vec!["ln".into(), "-s".into(), "f1".into(), "@/copy/dlink".into()],
        vec![
            "stat".into(),
            "-c".into(),
            "%n %F %a %h %s".into(),
            "@/copy/f5".into(),
            "@/copy/dlink".into(),
            "@/copy/f5-hard".into(),
        ],
        vec!["touch".into(), "-d".into(), "2001-02-03 04:05:06".into(), "@/copy/f1".into()],
        vec!["stat".into(), "-c".into(), "%n %Y".into(), "@/copy/f1".into()],
        vec!["mv".into(), "@/copy/sub".into(), "@/copy/moved".into()],
        vec!["mv".into(), "@/copy/f2".into(), "@/copy/moved/f2".into()],
        vec!["find".into(), "@/copy".into(), "-name".into(), "g1*".into()],
        vec!["du".into(), "-ab".into(), "@/copy/moved/deeper/big".into()],
        vec!["tar".into(), "cf".into(), "@/t.tar".into(), "-C".into(), "@".into(), "copy".into()],
        vec!["mkdir".into(), "@/untar".into()],
        vec!["tar".into(), "xf".into(), "@/t.tar".into(), "-C".into(), "@/untar".into()],
        vec!["diff".into(), "-r".into(), "@/copy".into(), "@/untar/copy".into()],
        vec!["rsync".into(), "-a".into(), "@/copy/".into(), "@/rs/".into()],
        vec!["diff".into(), "-r".into(), "@/copy".into(), "@/rs".into()],
        vec![
            "python3".into(),
            "-c".into(),
            r#"
import os, shutil, sys, tempfile
b = sys.argv[1]
print(sorted((os.path.relpath(r, b), sorted(d), sorted(f)) for r, d, f in os.walk(b + '/copy')))
shutil.copytree(b + '/copy', b + '/pycopy', symlinks=True)
print(sorted(os.listdir(b + '/pycopy')))
with tempfile.NamedTemporaryFile(dir=b, delete=False) as t:
    t.write(b'temp')
    n = t.name
print(open(n, 'rb').read())
os.unlink(n)
d = tempfile.mkdtemp(dir=b)
print(os.path.isdir(d))
os.rmdir(d)
shutil.copyfile(b + '/copy/f7', b + '/f7copy')
print(os.path.getsize(b + '/f7copy'))
"#
            .into(),
            "@".into(),
        ],
        vec!["diff".into(), "-r".into(), "@/copy".into(), "@/pycopy".into()],
        vec!["rm".into(), "-r".into(), "@/untar".into(), "@/rs".into()],
        vec!["ls".into(), "@".into()],
    ];
    for s in &steps {
        let args: Vec<&str> = s.iter().map(|a| a.as_str()).collect();
        let (t, f) = step(&env, &bt, &bp, &args);
        same(&format!("{args:?}"), &t, &f);
    }
    same("the tree", &describe(&env, false, &bt), &describe(&env, true, &bp));
    assert!(env.fsck(), "the pool was left dirty");
}

/// 100,000 rows in 100 transactions, then updates, deletes and checks.
fn sqlite_script(mode: &str) -> String {
    let mut s = format!("PRAGMA journal_mode={mode};\nCREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n");
    for t in 0..100 {
        s.push_str("BEGIN;\n");
        for r in 0..1000 {
            let k = t * 1000 + r;
            s.push_str(&format!("INSERT INTO t VALUES({k}, 'row {k} {}', {});\n", "x".repeat(k % 50), k % 97));
        }
        s.push_str("COMMIT;\n");
    }
    s.push_str("BEGIN; UPDATE t SET n = n + 1 WHERE k % 3 = 0; DELETE FROM t WHERE k % 10 = 7; COMMIT;\n");
    s.push_str("CREATE INDEX tn ON t(n);\nSELECT count(*), sum(n), sum(length(v)) FROM t;\nPRAGMA integrity_check;\n");
    s
}

#[test]
fn sqlite3_wal_and_delete_match_tmpfs() {
    sqlite3_wal_and_delete_in(Env::new("sqlite", false));
}

#[test]
fn sqlite3_wal_and_delete_match_tmpfs_buffered() {
    sqlite3_wal_and_delete_in(Env::buffered("sqlite-buffered", false));
}

fn sqlite3_wal_and_delete_in(env: Env) {
    if !tool("sqlite3") {
        return;
    }
    for mode in ["WAL", "DELETE"] {
        let script = sqlite_script(mode);
        let sql = env.tmpfs.join(format!("{mode}.sql"));
        std::fs::write(&sql, &script).unwrap();
        let db_t = env.tmpfs.join(format!("{mode}.db"));
        let db_f = env.root.join(format!("{mode}.db"));
        let t = run(env.plain("sqlite3").arg(&db_t).arg(format!(".read {}", sql.display())));
        let f = run(env.preloaded("sqlite3").arg(&db_f).arg(format!(".read {}", sql.display())));
        same(&format!("sqlite3 {mode}"), &t, &f);
        assert!(f.contains("\nok\n") || f.ends_with("ok\n"), "integrity_check: {f}");
        // Reopened by a second process: the same rows.
        let q = "SELECT count(*), sum(n) FROM t; PRAGMA integrity_check;";
        same(
            &format!("sqlite3 {mode} reopened"),
            &run(env.plain("sqlite3").arg(&db_t).arg(q)),
            &run(env.preloaded("sqlite3").arg(&db_f).arg(q)),
        );
    }
    assert!(env.fsck());
}

/// SQLite in WAL mode filling a 16 MiB pool, each statement a program of
/// its own and the pool's owner (no mount), against a 16 MiB tmpfs: a
/// table doubled until its WAL no longer fits, then the next connection
/// truncates and regrows its WAL index (`-shm`, a shared mapping the
/// library shadows), checks the database, deletes rows, checkpoints and
/// inserts, with the same results (docs/DESIGN.md, "Space for removals").
#[test]
fn sqlite3_wal_recovers_on_a_full_pool_as_on_tmpfs() {
    if !tool("sqlite3") {
        return;
    }
    let env = Env::new("sqlite-full", false);
    // A tmpfs of the pool's size over the test's tmpfs directory.
    let small = env.tmpfs.join("16m");
    std::fs::create_dir_all(&small).unwrap();
    run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=16M", "ferrite-test-tmpfs"]).arg(&small));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&small);
    let double = "INSERT INTO t SELECT randomblob(1000) FROM t;";
    let mut steps = vec!["PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(1000));"];
    steps.extend([double; 14]);
    steps.extend([
        "PRAGMA integrity_check; SELECT count(*) FROM t;",
        "DELETE FROM t WHERE rowid > 6144; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA integrity_check; \
         SELECT count(*) FROM t;",
        "INSERT INTO t SELECT randomblob(1000) FROM t WHERE rowid <= 1000; PRAGMA integrity_check; \
         SELECT count(*) FROM t;",
    ]);
    // Each step's output, its error's kind and its exit status.
    let transcript = |mut cmd: Box<dyn FnMut() -> Command>, db: &Path| -> String {
        let mut t = String::new();
        for step in &steps {
            let out = cmd().arg(db).arg(step).stdin(std::process::Stdio::null()).output().expect("start sqlite3");
            let err = String::from_utf8_lossy(&out.stderr);
            let kind = err.split(", ").last().unwrap_or("").trim();
            // wal_checkpoint's counts of frames depend on the space.
            let stdout = String::from_utf8_lossy(&out.stdout).replace("0|", "checkpointed ");
            let stdout: String = stdout.lines().map(|l| l.split(' ').next().unwrap_or("").to_string() + "\n").collect();
            t.push_str(&format!("{} {kind}\n{stdout}", out.status.code().unwrap_or(-1)));
        }
        t
    };
    let plain = transcript(Box::new(|| env.plain("sqlite3")), &small.join("w.db"));
    assert!(plain.contains("13 database or disk is full (13)"), "tmpfs did not fill up:\n{plain}");
    let pool = transcript(
        Box::new(|| {
            let mut c = env.preloaded("sqlite3");
            c.env("FERRITE_SIZE", "16M");
            c
        }),
        &env.root.join("w.db"),
    );
    same("sqlite3 filling its WAL", &plain, &pool);
    drop(_unmount);
    assert!(env.fsck());
}

#[test]
fn python_sqlite3_matches_tmpfs() {
    if !tool("python3") {
        return;
    }
    let env = Env::new("pysqlite", false);
    let prog = r#"
import sqlite3, sys
for mode in ('wal', 'delete'):
    db = sqlite3.connect(sys.argv[1] + '/' + mode + '.db')
    print(db.execute('pragma journal_mode=' + mode).fetchone())
    db.execute('create table t(k integer primary key, v text)')
    for t in range(100):
        with db:
            db.executemany('insert into t values(?,?)', ((t * 1000 + r, 'v%d' % (t * 1000 + r)) for r in range(1000)))
    print(db.execute('select count(*), sum(k) from t').fetchone())
    print(db.execute('pragma integrity_check').fetchone())
    db.close()
"#;
    let t = run(env.plain("python3").arg("-c").arg(prog).arg(&env.tmpfs));
    let f = run(env.preloaded("python3").arg("-c").arg(prog).arg(&env.root));
    same("python sqlite3", &t, &f);
    assert!(env.fsck());
}

/// LMDB reads its pages through a read-only shared mapping and writes
/// them with pwrite (in its default mode), so it needs such a mapping to
/// follow the file's writes; with MDB_WRITEMAP it stores through a
/// writable shared mapping. `tests/py/lmdb_env.py`, on tmpfs and under the
/// library (which failed its first read-back before read-only shared
/// mappings followed writes).
#[test]
fn lmdb_matches_tmpfs() {
    let Some(python) = common::python_with_lmdb() else { return };
    // A forked child reads through the owner's mount, where there is one.
    let mount = common::fuse_usable();
    let child = if mount { "child" } else { "nochild" };
    let env = Env::new("lmdb", mount);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/lmdb_env.py");
    let t = run(env.plain(python).arg(&script).arg(&env.tmpfs).arg(child));
    let f = run(env.preloaded(python).arg(&script).arg(&env.root).arg(child));
    assert!(t.contains("plain 5990 ") && t.contains("writemap 5990 "), "unexpected tmpfs run:\n{t}");
    same("lmdb", &t, &f);
    assert!(env.fsck());
}

/// Shared mappings between the owner and a forked child that reaches the
/// pool through the owner's mount (`tests/py/shared_maps.py`): each side's
/// mapping shows what the other wrote, the child reads the owner's stores,
/// a truncate by the child reaches the owner's mappings, and LMDB
/// environments opened by both (one at a time) hold every commit of each.
/// The library warns that the two do not share a writable mapping's
/// memory, whichever of the mapping and the other process's open came
/// first. Every part failed before the mount told the owner about the
/// child's reads and writes (LMDB's child found "not an LMDB file").
#[test]
fn shared_mappings_between_the_owner_and_a_child_match_tmpfs() {
    if !common::fuse_usable() {
        return;
    }
    let python = common::python_with_lmdb().unwrap_or("python3");
    let env = Env::new("shared-maps", true);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/shared_maps.py");
    let t = run(env.plain(python).arg(&script).arg(&env.tmpfs));
    let (f, err) = common::run_with_stderr(env.preloaded(python).arg(&script).arg(&env.root));
    assert!(t.contains("1 owner's mapping b'child'"), "unexpected tmpfs run:\n{t}");
    same("shared_maps.py", &t, &f);
    for when in ["now opened by another process", "held open by another process"] {
        assert!(err.contains(when), "no warning that a writable mapping is not shared memory ({when}): {err}");
    }
    assert!(env.fsck(), "the program's exit left the pool dirty; its stderr:\n{err}");
}

fn fio_job(env: &Env, dir: &Path, engine: &str, thread: bool, preload: bool) -> String {
    let mut c = if preload { env.preloaded("fio") } else { env.plain("fio") };
    c.args([
        "--name=verify",
        &format!("--directory={}", dir.display()),
        &format!("--ioengine={engine}"),
        "--rw=randwrite",
        "--bs=4k",
        "--size=8m",
        "--numjobs=2",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--output-format=terse",
        "--group_reporting",
    ]);
    if thread {
        c.arg("--thread");
    }
    let out = run(&mut c);
    // Terse field 5 is the error count of the group.
    let err = out.split(';').nth(4).unwrap_or("?").to_string();
    format!("{engine} thread={thread} errors={err}")
}

#[test]
fn fio_verifies_with_threads_and_forked_jobs() {
    if !tool("fio") || !common::fuse_usable() {
        return;
    }
    let env = Env::new("fio", true);
    for engine in ["psync", "pvsync2", "mmap"] {
        for thread in [true, false] {
            let t = fio_job(&env, &env.tmpfs, engine, thread, false);
            let f = fio_job(&env, &env.root, engine, thread, true);
            same("fio", &t, &f);
            assert!(f.ends_with("errors=0"), "{f}");
        }
    }
    assert!(env.fsck(), "fio's exit left the pool dirty");
}

#[test]
fn git_and_make_through_a_shell_and_its_children() {
    git_and_make_in(|| Env::new("git", true));
}

#[test]
fn git_and_make_through_a_shell_and_its_children_buffered() {
    git_and_make_in(|| Env::buffered("git-buffered", true));
}

fn git_and_make_in(env: impl FnOnce() -> Env) {
    for t in ["git", "make", "cc", "sh"] {
        if !tool(t) {
            return;
        }
    }
    if !common::fuse_usable() {
        return;
    }
    let env = env();
    let script = r#"set -e
cd "$1"
mkdir proj && cd proj
git init -q .
printf '#include <stdio.h>\nint main(void){puts("built and ran");return 0;}\n' > main.c
printf 'all: prog\nprog: main.c\n\tcc -o prog main.c\nclean:\n\trm -f prog\n' > Makefile
git add main.c Makefile
git -c user.email=t@example.com -c user.name=T commit -q -m one
echo '# more' >> Makefile
git -c user.email=t@example.com -c user.name=T commit -q -am two
git log --format=%s
git fsck --full 2>&1 | grep -v '^Checking' || true
git status --short
make -s
./prog
make -s clean
ls
"#;
    let t = run(env.plain("sh").arg("-c").arg(script).arg("sh").arg(&env.tmpfs));
    let f = run(env.preloaded("sh").arg("-c").arg(script).arg("sh").arg(&env.root));
    same("git and make", &t, &f);
    assert!(env.fsck(), "the shell's exit left the pool dirty");
}

#[test]
fn exec_hands_the_pool_and_inherited_descriptors_over() {
    exec_hands_over_in(Env::new("exec", false));
}

/// On a buffered mount the exec must make everything durable before the
/// next image mounts the pool (it unmounts cleanly).
#[test]
fn exec_hands_the_pool_and_inherited_descriptors_over_buffered() {
    exec_hands_over_in(Env::buffered("exec-buffered", false));
}

fn exec_hands_over_in(env: Env) {
    if !tool("sh") || !tool("cat") {
        return;
    }
    // The shell opens the file itself (descriptor 3), then execs cat, which
    // inherits it: the new image must reopen it at the same number and
    // offset, in-process.
    let script =
        r#"cd "$1"; printf 'first\nsecond\n' > f; exec 3< f; read -r line <&3; echo "shell read: $line"; exec cat <&3"#;
    let t = run(env.plain("sh").arg("-c").arg(script).arg("sh").arg(&env.tmpfs));
    let f = run(env.preloaded("sh").arg("-c").arg(script).arg("sh").arg(&env.root));
    same("exec", &t, &f);
    assert!(env.fsck(), "the pool was left dirty after the exec chain");
}

/// A shell's own redirections (its builtins write through glibc's
/// `stdout`, whose internal `write` no preload intercepts), and programs
/// started by an exec with standard input and output in the pool (`sort`
/// and `ls` read and write through stdio), as on tmpfs; the shell's
/// `exec 3> file` (a `dup2` onto 3) must leave the owner's mount serving
/// its children. Before, every builtin's output into the pool failed with
/// "write error: Bad file descriptor", `ls` and `sort` likewise, and the
/// `dup2` onto 3 replaced an io_uring ring of the mount: the next child's
/// request through it waited forever. The last step redirects every
/// number from 3 to 12 (wherever the test harness's inherited descriptors
/// put the rings) and then has a child read through the mount on each
/// CPU, so that every queue must still answer.
#[test]
fn standard_streams_redirected_into_the_pool_match_tmpfs() {
    for t in ["bash", "sort", "ls", "cat", "taskset"] {
        if !tool(t) {
            return;
        }
    }
    if !common::fuse_usable() {
        return;
    }
    let env = Env::new("stdstreams", true);
    let low_numbers = r#"cd "$1"
for n in 3 4 5 6 7 8 9 10 11 12; do eval "exec $n> n$n"; echo "number $n" >&$n; done
for cpu in 0 1; do taskset -c $cpu cat n3 n12 2>&1; done
for n in 3 4 5 6 7 8 9 10 11 12; do eval "exec $n>&-"; done
for cpu in 0 1; do taskset -c $cpu ls -1 | wc -l; done
"#;
    let builtins = r#"cd "$1"
printf 'x\ny\n' > e2; echo more >> e2
{ echo b; echo a; echo c; } > e3
exec 3> d; echo five >&3; printf 'six\n' >&3; exec 3>&-
echo err 2> c >&2
read -r first < e3; echo "read: $first"
cat e2 e3 d c
echo "to the terminal"
"#;
    let steps: [(&str, &str); 5] = [
        ("bash", builtins),
        ("sh", r#"cd "$1"; exec sort -r < e3 > sorted"#),
        ("sh", r#"cd "$1"; exec ls -1 > listing"#),
        ("sh", r#"cd "$1"; cat sorted listing"#),
        ("bash", low_numbers),
    ];
    for (shell, script) in steps {
        let t = run(env.plain(shell).arg("-c").arg(script).arg(shell).arg(&env.tmpfs));
        let f = run_within(
            env.preloaded(shell).arg("-c").arg(script).arg(shell).arg(&env.root),
            std::time::Duration::from_secs(60),
        );
        same("standard streams", &t, &f);
    }
    assert!(env.fsck(), "the pool was left dirty");
}

/// A description the shell shares with its children keeps one offset, as
/// on Linux: a group's output with a child's in the middle, `exec 3>` and
/// a subshell writing to it, `exec > file` with children after it, and a
/// descriptor read by the shell after a fork and then handed to `cat` by
/// an exec (which must find the offset the read left). Before, a child got
/// its own description with a copy of the offset: the shell's next write
/// landed over what the child wrote.
#[test]
fn descriptions_shared_with_children_keep_one_offset() {
    for t in ["bash", "cat", "ls"] {
        if !tool(t) {
            return;
        }
    }
    if !common::fuse_usable() {
        return;
    }
    let env = Env::new("shared-offsets", true);
    let script = r#"cd "$1"
printf 'x\ny\n' > e2
{ echo a; cat e2; echo b; } > out
exec 3> log; echo one >&3; cat e2 >&3; echo two >&3; (echo sub) >&3; exec 3>&-
exec 4< e2; (true); read -r l <&4; echo "read: $l"
exec 5>&1; exec > all; echo first; ls -1 e2; echo last; exec >&5 5>&-
cat out log all
exec cat <&4
"#;
    let t = run(env.plain("bash").arg("-c").arg(script).arg("bash").arg(&env.tmpfs));
    let f = run_within(
        env.preloaded("bash").arg("-c").arg(script).arg("bash").arg(&env.root),
        std::time::Duration::from_secs(60),
    );
    same("shared offsets", &t, &f);
    let check = r#"cd "$1"; cat out log all"#;
    let t = run(env.plain("sh").arg("-c").arg(check).arg("sh").arg(&env.tmpfs));
    let f = run_within(
        env.preloaded("sh").arg("-c").arg(check).arg("sh").arg(&env.root),
        std::time::Duration::from_secs(60),
    );
    same("shared offsets, read back", &t, &f);
    assert!(env.fsck(), "the pool was left dirty");
}

/// Children writing between two writes of the owner's to one description
/// (`tests/py/spawn.py`); each file must hold every line in order, as on
/// tmpfs. Children that glibc starts without running the fork handlers
/// and that exec at once: `posix_spawn` with a dup2 action from a
/// close-on-exec descriptor, `system` and `popen` (which spawn inside
/// glibc) with an inherited one. Before the library shared the
/// descriptions with them, each child's descriptor was the library's
/// placeholder (`sh`: "echo: I/O error"), and the file held only the
/// owner's lines. Forked children: `subprocess.run` with `stdout=f` (a
/// close-on-exec descriptor moved onto the child's output) and a child
/// that does not exec, whose output the owner's next write overwrote
/// while close-on-exec descriptions were not shared; and a file used only
/// at explicit offsets, which stays the engine's.
#[test]
fn spawned_children_share_the_owners_descriptions() {
    if !tool("python3") || !tool("sh") || !common::fuse_usable() {
        return;
    }
    let env = Env::new("spawn", true);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/spawn.py");
    let t = run(env.plain("python3").arg(&script).arg(&env.tmpfs));
    let f = run_within(env.preloaded("python3").arg(&script).arg(&env.root), std::time::Duration::from_secs(60));
    assert!(t.contains(r"owner 2\nsystem\nowner 3"), "unexpected tmpfs run:\n{t}");
    same("spawn.py", &t, &f);
    assert!(env.fsck(), "the pool was left dirty");
}

#[test]
fn locks_between_descriptions_and_processes_match_tmpfs() {
    if !tool("python3") || !common::fuse_usable() {
        return;
    }
    let env = Env::new("locks", true);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/locks.py");
    let t = run(env.plain("python3").arg(&script).arg(&env.tmpfs));
    let f = run(env.preloaded("python3").arg(&script).arg(&env.root));
    same("locks", &t, &f);
    assert!(env.fsck(), "the pool was left dirty");
}

#[test]
fn modes_from_the_environment_and_their_commit_points() {
    if !tool("python3") {
        return;
    }
    let env = Env::new("modes", false);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/modes.py");
    let phase = |name: &str, vars: &[(&str, &str)]| {
        let mut c = env.preloaded("python3");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.arg(&script).arg(name).arg(&env.root).output().expect("start python3")
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let ok = |name: &str, o: std::process::Output| {
        assert!(o.status.success(), "phase {name}: {}\n{}", text(&o), String::from_utf8_lossy(&o.stderr));
        text(&o)
    };
    assert_eq!(ok("plain", phase("plain", &[])), "old.db strict\nro.db strict\na.txt strict\n");
    assert_eq!(
        ok("patterns", phase("patterns", &[("FERRITE_ATOMIC", "*.db:/data/*.log")])),
        "a.db fsync-atomic\nb.txt strict\ndata/x.log fsync-atomic\nother/x.log strict\n\
         data/sub.db fsync-atomic\nx.db-journal strict\ndata ENODATA\nro.db opened read-only strict\n\
         old.db opened for writing fsync-atomic\nrel.db by os.open fsync-atomic\n"
    );
    assert_eq!(
        ok("default", phase("default", &[("FERRITE_MODE", "fsync-atomic")])),
        "new.txt fsync-atomic\na.txt opened for writing strict\ndir ENODATA\n"
    );
    let crash = phase("crash", &[("FERRITE_MODE", "fsync-atomic")]);
    assert_eq!(crash.status.code(), None, "the crash phase kills itself: {}", String::from_utf8_lossy(&crash.stderr));
    assert_eq!(
        text(&crash),
        "before the kill: sync b'second version'\nbefore the kill: mmap b'THIRDd version'\n\
         before the kill: none b'second version'\nbefore the kill: truncate b'fi'\n"
    );
    env.fsck_if_made();
    assert_eq!(
        ok("check", phase("check", &[])),
        "sync fsync-atomic b'second version'\nfsync fsync-atomic b'second version'\n\
         fdatasync fsync-atomic b'second version'\nosync fsync-atomic b'second version'\n\
         mmap fsync-atomic b'second version'\nrename fsync-atomic b'second version'\n\
         close fsync-atomic b'first'\nnone fsync-atomic b'first'\ntruncate fsync-atomic b'first'\n\
         strict strict b'second version'\n"
    );
    // A mode the library does not know turns it off, with a message.
    let bad = phase("plain", &[("FERRITE_MODE", "atomic")]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("FERRITE_MODE=atomic: not a mode"), "stderr: {err}");
    assert!(env.fsck(), "the pool was left dirty");
}

#[test]
fn buffered_mode_from_the_environment() {
    if !tool("python3") {
        return;
    }
    let env = Env::new("buffered-env", false);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/modes.py");
    let phase = |name: &str, vars: &[(&str, &str)]| {
        let mut c = env.preloaded("python3");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.arg(&script).arg(name).arg(&env.root).output().expect("start python3")
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let ok = |name: &str, o: std::process::Output| {
        assert!(o.status.success(), "phase {name}: {}\n{}", text(&o), String::from_utf8_lossy(&o.stderr));
        text(&o)
    };
    assert_eq!(ok("plain", phase("plain", &[])), "old.db strict\nro.db strict\na.txt strict\n");
    let buffered =
        [("FERRITE_MODE", "buffered"), ("FERRITE_BUFFERED_LAG_MS", "2.5"), ("FERRITE_BUFFERED_OPS_MAX", "64")];
    assert_eq!(
        ok("default", phase("default", &buffered)),
        "new.txt buffered\na.txt opened for writing buffered\ndir ENODATA\n"
    );
    // The exit drained the persister: the pool was unmounted cleanly.
    assert!(env.fsck(), "the buffered program's exit left the pool dirty");
    // A later strict run sees the mode stored in the file: the default.
    let stored = run(env
        .preloaded("python3")
        .arg("-c")
        .arg(format!("import os; print(os.getxattr('{}/new.txt', 'user.ferrite.mode').decode())", env.root.display())));
    assert_eq!(stored, "strict\n");
    // Bad tuning turns the library off, with a message.
    for (vars, says) in [
        (&[("FERRITE_BUFFERED_LAG_MS", "3")][..], "needs mode=buffered"),
        (&[("FERRITE_MODE", "buffered"), ("FERRITE_BUFFERED_OPS_MAX", "0")][..], "FERRITE_BUFFERED_OPS_MAX"),
        (&[("FERRITE_MODE", "buffered"), ("FERRITE_BUFFERED_LAG_MS", "soon")][..], "FERRITE_BUFFERED_LAG_MS"),
    ] {
        let o = phase("plain", vars);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says) && err.contains("the library is off"), "{vars:?}: stderr: {err}");
    }
    assert!(env.fsck(), "the pool was left dirty");
}
