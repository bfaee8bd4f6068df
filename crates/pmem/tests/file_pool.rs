//! Proves the file backend: a pool created with `create_file` and reopened
//! with `open_file` keeps its data; the exclusive lock makes a second open
//! (even from this process, since flock belongs to the open file
//! description) fail with `AlreadyOpen` and leaves the file untouched, and
//! `create_file` on a locked file does not truncate it; lengths that are too
//! small or not whole pages are refused; dropping the pool releases the
//! lock; the persistence domain is detected (tmpfs gives SharedMemory); and
//! a private copy of a pool (fsck's) reads the pool, keeps its own stores
//! from the file and the pool, and leaves the pool's lock held when
//! dropped, for file and heap pools alike.

use ferrite_pmem::{PersistenceDomain, Pmem, PmemError, PoolOffset};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// A directory removed (with everything in it) when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path, name: &str) -> TempDir {
        let dir = parent.join(format!("ferrite-pmem-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const LEN: u64 = 64 * 1024;

#[test]
fn create_then_open_sees_the_data() {
    let dir = TempDir::new(&std::env::temp_dir(), "reopen");
    let path = dir.file("pool");
    {
        let pool = Pmem::create_file(&path, LEN, 4096).unwrap();
        assert_eq!(pool.len(), LEN);
        assert_eq!(pool.path(), Some(path.as_path()));
        assert_ne!(pool.domain(), PersistenceDomain::Heap);
        assert_eq!(pool.map_sync(), pool.domain() == PersistenceDomain::DaxMapSync);
        assert!(pool.image().iter().all(|&b| b == 0), "new pool is zeroed");
        pool.write_nt(PoolOffset(100), b"hello, persistent world");
        pool.write(PoolOffset(8192), &[7u8; 5000]);
        pool.store_u64(PoolOffset(LEN - 8), 0xfeed_f00d);
        pool.persist(PoolOffset(8192), 5000);
        pool.persist(PoolOffset(LEN - 8), 8);
        pool.sync_to_backing_file().unwrap();
    }
    let pool = Pmem::open_file(&path, 4096).unwrap();
    assert_eq!(pool.len(), LEN);
    let mut b = [0u8; 23];
    pool.read(PoolOffset(100), &mut b);
    assert_eq!(&b, b"hello, persistent world");
    let mut c = vec![0u8; 5000];
    pool.read(PoolOffset(8192), &mut c);
    assert!(c.iter().all(|&x| x == 7));
    assert_eq!(pool.read_u64(PoolOffset(LEN - 8)), 0xfeed_f00d);
    // The bytes really are in the file, not only in this mapping.
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk, pool.image());
}

#[test]
fn second_open_is_refused_and_changes_nothing() {
    let dir = TempDir::new(&std::env::temp_dir(), "second-open");
    let path = dir.file("pool");
    let pool = Pmem::create_file(&path, LEN, 0).unwrap();
    pool.write(PoolOffset(0), b"owned");
    pool.persist(PoolOffset(0), 5);
    let before = std::fs::read(&path).unwrap();

    match Pmem::open_file(&path, 0) {
        Err(PmemError::AlreadyOpen) => {}
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    match Pmem::create_file(&path, 2 * LEN, 0) {
        Err(PmemError::AlreadyOpen) => {}
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after.len() as u64, LEN, "create_file on a locked pool truncated it");
    assert_eq!(before, after);

    // The first handle still works, and dropping it releases the lock.
    pool.write(PoolOffset(8), b"still");
    drop(pool);
    let again = Pmem::open_file(&path, 0).unwrap();
    let mut b = [0u8; 13];
    again.read(PoolOffset(0), &mut b);
    assert_eq!(&b, b"owned\0\0\0still");
}

#[test]
fn private_copy_changes_nothing_and_keeps_the_lock() {
    let dir = TempDir::new(&std::env::temp_dir(), "private-copy");
    let path = dir.file("pool");
    let pool = Pmem::create_file(&path, LEN, 0).unwrap();
    pool.write(PoolOffset(0), b"original");
    pool.persist(PoolOffset(0), 8);
    let heap = Pmem::from_image(&pool.image());
    for (what, source) in [("file", &pool), ("heap", &heap)] {
        let copy = source.private_copy();
        assert_eq!(copy.len(), LEN, "{what}");
        assert_eq!(copy.image(), source.image(), "{what}: the copy reads the pool");
        copy.write(PoolOffset(0), b"changed!");
        copy.write(PoolOffset(LEN - 8), b"changed!");
        let mut b = [0u8; 8];
        copy.read(PoolOffset(0), &mut b);
        assert_eq!(&b, b"changed!", "{what}");
        source.read(PoolOffset(0), &mut b);
        assert_eq!(&b, b"original", "{what}: a store to the copy reached the pool");
        source.read(PoolOffset(LEN - 8), &mut b);
        assert_eq!(b, [0u8; 8], "{what}");
        drop(copy);
    }
    assert_eq!(&std::fs::read(&path).unwrap()[..8], b"original", "a store to the copy reached the file");
    // The copy of the file pool opened the file anew; dropping it unlocked
    // only its own descriptor, so the pool is still locked.
    match Pmem::open_file(&path, 0) {
        Err(PmemError::AlreadyOpen) => {}
        other => panic!("expected AlreadyOpen after the private copy was dropped, got {other:?}"),
    }
}

#[test]
fn create_file_truncates_an_unlocked_pool() {
    let dir = TempDir::new(&std::env::temp_dir(), "truncate");
    let path = dir.file("pool");
    std::fs::write(&path, vec![0xaau8; 3 * 4096]).unwrap();
    let pool = Pmem::create_file(&path, 2 * 4096, 0).unwrap();
    assert_eq!(pool.len(), 2 * 4096);
    assert!(pool.image().iter().all(|&b| b == 0));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * 4096);
}

#[test]
fn lengths_are_checked() {
    let dir = TempDir::new(&std::env::temp_dir(), "lengths");
    let path = dir.file("pool");

    match Pmem::create_file(&path, 4096, 8192) {
        Err(PmemError::TooSmall { len: 4096, min: 8192 }) => {}
        other => panic!("expected TooSmall, got {other:?}"),
    }
    assert!(!path.exists(), "a refused create_file must not create the file");
    match Pmem::create_file(&path, 0, 0) {
        Err(PmemError::TooSmall { len: 0, .. }) => {}
        other => panic!("expected TooSmall, got {other:?}"),
    }
    match Pmem::create_file(&path, 5000, 0) {
        Err(PmemError::Io(e)) => assert_eq!(e.kind(), ErrorKind::InvalidInput),
        other => panic!("expected Io(InvalidInput), got {other:?}"),
    }

    drop(Pmem::create_file(&path, 4096, 0).unwrap());
    match Pmem::open_file(&path, 8192) {
        Err(PmemError::TooSmall { len: 4096, min: 8192 }) => {}
        other => panic!("expected TooSmall, got {other:?}"),
    }
    std::fs::write(&path, vec![1u8; 5000]).unwrap();
    match Pmem::open_file(&path, 0) {
        Err(PmemError::Io(e)) => {
            assert_eq!(e.kind(), ErrorKind::InvalidData);
            assert!(e.to_string().contains("5000"), "{e}");
        }
        other => panic!("expected Io(InvalidData), got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 5000]);
}

#[test]
fn open_of_a_missing_file_says_which_file() {
    let dir = TempDir::new(&std::env::temp_dir(), "missing");
    let path = dir.file("no-such-pool");
    match Pmem::open_file(&path, 0) {
        Err(e @ PmemError::Io(_)) => {
            let PmemError::Io(io) = &e else { unreachable!() };
            assert_eq!(io.kind(), ErrorKind::NotFound);
            let msg = e.to_string();
            assert!(msg.contains("no-such-pool"), "{msg}");
            assert!(std::error::Error::source(&e).is_some());
        }
        other => panic!("expected Io(NotFound), got {other:?}"),
    }
}

#[test]
fn tmpfs_pool_is_shared_memory() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm here; skipping");
        return;
    }
    let dir = TempDir::new(shm, "domain");
    let pool = Pmem::create_file(&dir.file("pool"), LEN, 0).unwrap();
    assert_eq!(pool.domain(), PersistenceDomain::SharedMemory);
    assert!(!pool.map_sync());
    // Every path works on a file mapping, and msync is harmless here.
    pool.write_nt(PoolOffset(3), &[9u8; 1000]);
    pool.fill_nt(PoolOffset(4096), 4096, 0x5a);
    pool.fence();
    pool.sync_to_backing_file().unwrap();
    let mut b = [0u8; 1000];
    pool.read(PoolOffset(3), &mut b);
    assert!(b.iter().all(|&x| x == 9));
}

/// A new pool's pages are faulted in by a background thread (mkfs does not
/// wait for it): stores made while it runs, ahead of it and behind it,
/// keep their bytes; every other byte reads zero; dropping the pool in the
/// middle stops the thread, and the file reopens with the data.
#[test]
fn stores_during_background_population_are_kept() {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = TempDir::new(&parent, "populate");
    let path = dir.file("pool");
    let len: u64 = 256 << 20;
    let pool = Pmem::create_file(&path, len, 0).unwrap();
    let offsets: Vec<u64> = (0..64u64).map(|i| (i * 4_000_037 * 4096 + 8 * i) % (len - 8) / 8 * 8).collect();
    for (i, &o) in offsets.iter().enumerate() {
        pool.store_u64(PoolOffset(o), 0xfeed_0000 + i as u64);
        pool.flush(PoolOffset(o), 8);
    }
    pool.fence();
    for (i, &o) in offsets.iter().enumerate() {
        assert_eq!(pool.read_u64(PoolOffset(o)), 0xfeed_0000 + i as u64);
    }
    assert_eq!(pool.read_u64(PoolOffset(len - 8)), 0);
    drop(pool);
    let pool = Pmem::open_file(&path, 0).unwrap();
    for (i, &o) in offsets.iter().enumerate() {
        assert_eq!(pool.read_u64(PoolOffset(o)), 0xfeed_0000 + i as u64, "store at {o} lost");
    }
    let mut page = vec![0u8; 4096];
    pool.read(PoolOffset(len / 2 + 4096), &mut page);
    assert!(page.iter().all(|&b| b == 0) || offsets.iter().any(|&o| o / 4096 == (len / 2 + 4096) / 4096));
}
