//! Proves the lookup structures of issue 14 keep POSIX name semantics:
//! names inline in the directory index (up to 22 bytes) and on the heap
//! (longer) are found, listed and removed alike; a name's cached inode
//! (`NameSlot`) never outlives the name, so a name that is unlinked,
//! replaced by rename or reused for a new file whose inode got the old
//! number resolves to the inode it names now; and tearing down a deep
//! tree whose inodes hold their children (inode numbers descending from
//! the top, so the inode cache frees parents last) is a loop, not a
//! recursion as deep as the tree.

use ferrite::{FormatOptions, MountOptions, OpenFlags, PathFs, RenameFlags, Session};
use ferrite_pmem::Pmem;
use ferrite_tests::{get, put};

fn fresh(pages: u64) -> Session {
    Session::format(Pmem::heap(pages * 4096), &FormatOptions { lanes: 2, ..Default::default() }).unwrap()
}

#[test]
fn inline_and_heap_names_are_found_listed_and_removed() {
    let fs = fresh(4096);
    fs.mkdir(b"/d", 0o755).unwrap();
    // Around the inline limit (22 bytes), and the longest name allowed.
    let lens = [1usize, 21, 22, 23, 64, 255];
    for &n in &lens {
        let name = vec![b'a' + (n % 26) as u8; n];
        let path = [b"/d/".as_slice(), &name].concat();
        put(&fs, &path, &name).unwrap();
        assert_eq!(get(&fs, &path).unwrap(), name, "name of {n} bytes");
        // A name one byte shorter or longer is another name.
        let mut other = name.clone();
        other.push(b'z');
        assert!(fs.stat(&[b"/d/".as_slice(), &other].concat()).is_err());
    }
    let fd = fs.open(b"/d", OpenFlags::RDONLY.directory(), 0).unwrap();
    let mut listed: Vec<usize> = fs.readdir(fd, 0, 1000).unwrap().iter().map(|e| e.name.len()).collect();
    fs.close(fd).unwrap();
    listed.sort();
    assert_eq!(listed, lens);
    for &n in &lens {
        let name = vec![b'a' + (n % 26) as u8; n];
        fs.unlink(&[b"/d/".as_slice(), &name].concat()).unwrap();
    }
    fs.rmdir(b"/d").unwrap();
    // The same names again after a remount (rebuilt from the log).
    let fs = ferrite_tests::remount(fs, false);
    assert!(fs.stat(b"/d").is_err());
    fs.unmount().unwrap();
}

#[test]
fn a_name_resolves_to_the_inode_it_names_now() {
    let fs = fresh(4096);
    fs.mkdir(b"/d", 0o755).unwrap();
    put(&fs, b"/d/f", b"first").unwrap();
    let first = fs.stat(b"/d/f").unwrap(); // fills the name's cached inode
                                           // Unlink and create again: the new file may get the old number.
    fs.unlink(b"/d/f").unwrap();
    assert!(fs.stat(b"/d/f").is_err());
    put(&fs, b"/d/f", b"second!").unwrap();
    let second = fs.stat(b"/d/f").unwrap();
    assert_eq!(second.size, 7);
    assert_eq!(get(&fs, b"/d/f").unwrap(), b"second!");
    // Rename over a cached name: the name now names the source's inode.
    put(&fs, b"/d/g", b"from g").unwrap();
    let g = fs.stat(b"/d/g").unwrap();
    fs.rename(b"/d/g", b"/d/f", RenameFlags::Replace).unwrap();
    assert_eq!(fs.stat(b"/d/f").unwrap().ino, g.ino);
    assert_eq!(get(&fs, b"/d/f").unwrap(), b"from g");
    assert!(fs.stat(b"/d/g").is_err());
    // Exchange two cached names.
    put(&fs, b"/d/h", b"from h").unwrap();
    let h = fs.stat(b"/d/h").unwrap();
    fs.rename(b"/d/h", b"/d/f", RenameFlags::Exchange).unwrap();
    assert_eq!(fs.stat(b"/d/f").unwrap().ino, h.ino);
    assert_eq!(fs.stat(b"/d/h").unwrap().ino, g.ino);
    // A hard link: both names name one inode, and its link count moves.
    fs.link(b"/d/f", b"/d/l").unwrap();
    assert_eq!(fs.stat(b"/d/l").unwrap().ino, h.ino);
    assert_eq!(fs.stat(b"/d/f").unwrap().nlink, 2);
    fs.unlink(b"/d/f").unwrap();
    assert_eq!(fs.stat(b"/d/l").unwrap().nlink, 1);
    // A directory removed and made again under the same name.
    fs.mkdir(b"/d/sub", 0o755).unwrap();
    put(&fs, b"/d/sub/x", b"x").unwrap();
    fs.unlink(b"/d/sub/x").unwrap();
    fs.rmdir(b"/d/sub").unwrap();
    fs.mkdir(b"/d/sub", 0o700).unwrap();
    assert_eq!(fs.stat(b"/d/sub").unwrap().perm, 0o700);
    assert!(fs.stat(b"/d/sub/x").is_err());
    let _ = (first, second);
    let fs = ferrite_tests::remount(fs, true);
    assert_eq!(get(&fs, b"/d/l").unwrap(), b"from h");
    assert_eq!(get(&fs, b"/d/h").unwrap(), b"from g");
    fs.unmount().unwrap();
}

/// Directories whose numbers fall from the top of the chain to the bottom:
/// made flat first (ascending numbers), then each moved into the next one.
/// Walking down fills every name's cached inode. A teardown that let each
/// directory free its child would recurse once per level; on a 256 KiB
/// stack this depth overflows unless the cache lets go of them first.
#[test]
fn a_deep_tree_is_torn_down_without_recursion() {
    const DEPTH: usize = 6_000;
    let run = || {
        let opts = FormatOptions { lanes: 2, inodes: Some(DEPTH as u64 + 64), ..Default::default() };
        let fs = Session::format(Pmem::heap((2 * DEPTH as u64 + 4096) * 4096), &opts).unwrap();
        for i in 0..DEPTH {
            fs.mkdir(format!("/a{i}").as_bytes(), 0o755).unwrap();
        }
        for i in 0..DEPTH - 1 {
            fs.rename(format!("/a{i}").as_bytes(), format!("/a{}/a{i}", i + 1).as_bytes(), RenameFlags::Replace)
                .unwrap();
        }
        fs.chdir(b"/").unwrap();
        for i in (0..DEPTH).rev() {
            fs.chdir(format!("a{i}").as_bytes()).unwrap();
        }
        fs.chdir(b"/").unwrap();
        let image = {
            let pmem = fs.pmem().clone();
            fs.unmount().unwrap();
            pmem.image()
        };
        // And dropped without an unmount (a crash, as far as the pool goes).
        let fs = Session::mount(Pmem::from_image(&image), &MountOptions::default()).unwrap();
        fs.chdir(b"/").unwrap();
        for i in (0..DEPTH).rev() {
            fs.chdir(format!("a{i}").as_bytes()).unwrap();
        }
        drop(fs);
    };
    std::thread::Builder::new().stack_size(256 << 10).spawn(run).unwrap().join().unwrap();
}
