//! readdir in the model: "." and ".." are not listed, entries come in
//! insertion order with cookies that resume after an entry, max limits the
//! batch (0 gives nothing), and an entry present for the whole listing is
//! returned exactly once however other entries are added and removed
//! between calls. Also ENOTDIR/EBADF and kinds/inode numbers of entries.

mod common;
use common::*;
use ferrite::{DirEntry, Errno, Fd, FileType, OpenFlags, PathFs, RenameFlags};
use ferrite_model::ModelFs;

fn names(es: &[DirEntry]) -> Vec<String> {
    es.iter().map(|e| String::from_utf8(e.name.clone()).unwrap()).collect()
}

fn list_all(fs: &ModelFs, fd: Fd, batch: usize) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let es = fs.readdir(fd, cookie, batch).unwrap();
        let Some(last) = es.last() else { break };
        cookie = last.next_cookie;
        out.extend(es);
    }
    out
}

#[test]
fn basic_listing() {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    put(&fs, "/d/zeta", b"");
    fs.mkdir(p("/d/alpha"), 0o755).unwrap();
    fs.symlink(p("x"), p("/d/mid")).unwrap();
    let fd = fs.open(p("/d"), OpenFlags::RDONLY.directory(), 0).unwrap();
    let all = list_all(&fs, fd, 100);
    assert_eq!(names(&all), ["zeta", "alpha", "mid"]);
    let kinds: Vec<FileType> = all.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [FileType::Regular, FileType::Directory, FileType::Symlink]);
    assert_eq!(all[1].ino, fs.stat(p("/d/alpha")).unwrap().ino);
    assert_eq!(list_all(&fs, fd, 1), all);
    assert_eq!(fs.readdir(fd, 0, 0).unwrap(), vec![]);
    // Resume after the first entry.
    let rest = fs.readdir(fd, all[0].next_cookie, 10).unwrap();
    assert_eq!(names(&rest), ["alpha", "mid"]);
    // After the last: nothing.
    assert_eq!(fs.readdir(fd, all[2].next_cookie, 10).unwrap(), vec![]);
    // Empty directory and root.
    let e = fs.open(p("/d/alpha"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(fs.readdir(e, 0, 10).unwrap(), vec![]);
    let r = fs.open(p("/"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(names(&fs.readdir(r, 0, 10).unwrap()), ["d"]);
    // Errors.
    let f = fs.open(p("/d/zeta"), OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(err(fs.readdir(f, 0, 10)), Errno::ENOTDIR);
    fs.close(fd).unwrap();
    assert_eq!(err(fs.readdir(fd, 0, 10)), Errno::EBADF);
}

#[test]
fn stable_under_insert_and_delete() {
    use std::collections::{BTreeMap, BTreeSet};
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    let mut live: BTreeSet<String> = (0..40).map(|i| format!("f{i:02}")).collect();
    for n in &live {
        put(&fs, &format!("/d/{n}"), b"");
    }
    let initial = live.clone();
    let mut touched: BTreeSet<String> = BTreeSet::new(); // removed or added during the listing
    let fd = fs.open(p("/d"), OpenFlags::RDONLY, 0).unwrap();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cookie, mut round, mut x) = (0u64, 0u64, 12345u64);
    loop {
        let es = fs.readdir(fd, cookie, 3).unwrap();
        let Some(last) = es.last() else { break };
        cookie = last.next_cookie;
        for n in names(&es) {
            assert!(live.contains(&n), "{n} listed but not present");
            *seen.entry(n).or_default() += 1;
        }
        // Between calls: remove a pseudo-random live name, add one, and
        // rename one (the new name is a new entry).
        // Only in the first rounds, so that the listing catches up.
        round += 1;
        if round <= 15 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let victim = live.iter().nth((x >> 33) as usize % live.len()).unwrap().clone();
            fs.unlink(format!("/d/{victim}").as_bytes()).unwrap();
            live.remove(&victim);
            touched.insert(victim);
            let added = format!("new{round}");
            put(&fs, &format!("/d/{added}"), b"");
            live.insert(added.clone());
            touched.insert(added);
            let from = live.iter().next().unwrap().clone();
            let to = format!("ren{round}");
            fs.rename(format!("/d/{from}").as_bytes(), format!("/d/{to}").as_bytes(), RenameFlags::Replace).unwrap();
            live.remove(&from);
            live.insert(to.clone());
            touched.insert(from);
            touched.insert(to);
        }
        assert!(round < 100, "the listing does not end");
    }
    for n in initial.difference(&touched) {
        assert_eq!(seen.get(n), Some(&1), "{n} present throughout, seen {:?} times", seen.get(n));
    }
    for (n, c) in &seen {
        assert_eq!(*c, 1, "{n} returned {c} times");
    }
    assert!(initial.difference(&touched).count() > 5, "the test must keep some entries");
}

#[test]
fn deleting_the_cookie_entry() {
    let (fs, _) = setup();
    fs.mkdir(p("/d"), 0o755).unwrap();
    for n in ["a", "b", "c", "d"] {
        put(&fs, &format!("/d/{n}"), b"");
    }
    let fd = fs.open(p("/d"), OpenFlags::RDONLY, 0).unwrap();
    let first = fs.readdir(fd, 0, 2).unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    // Delete the entry whose cookie we hold, and the one before it.
    fs.unlink(p("/d/b")).unwrap();
    fs.unlink(p("/d/a")).unwrap();
    let rest = fs.readdir(fd, first[1].next_cookie, 10).unwrap();
    assert_eq!(names(&rest), ["c", "d"]);
    // Re-creating a deleted name gives it a new, later cookie.
    put(&fs, "/d/a", b"");
    let rest = fs.readdir(fd, first[1].next_cookie, 10).unwrap();
    assert_eq!(names(&rest), ["c", "d", "a"]);
}
