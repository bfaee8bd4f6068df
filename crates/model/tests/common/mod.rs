//! Helpers shared by the model's tests: a model on a manual clock, and
//! short ways to create files and read them back.
#![allow(dead_code)]

use std::sync::Arc;

use ferrite::{Errno, Fd, ManualClock, OpenFlags, PathFs, TimeSpec};
use ferrite_model::ModelFs;

pub const T0: i64 = 1_000;

pub fn ts(sec: i64) -> TimeSpec {
    TimeSpec { sec, nsec: 0 }
}

/// A model of 1024 pages and 1024 inodes on a manual clock at T0 seconds.
pub fn setup() -> (ModelFs, Arc<ManualClock>) {
    setup_sized(1024, 1024)
}

pub fn setup_sized(pages: u64, inodes: u64) -> (ModelFs, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(ts(T0)));
    (ModelFs::new(clock.clone(), pages, inodes), clock)
}

pub fn rw_create() -> OpenFlags {
    OpenFlags::RDWR.create()
}

/// Create (or truncate) `path` with `data`.
pub fn put(fs: &ModelFs, path: &str, data: &[u8]) {
    let fd = fs.open(path.as_bytes(), OpenFlags::WRONLY.create().trunc(), 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.close(fd).unwrap();
}

/// The whole content of `path` (following symlinks).
pub fn get(fs: &ModelFs, path: &str) -> Vec<u8> {
    let fd = fs.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
    let out = read_fd(fs, fd);
    fs.close(fd).unwrap();
    out
}

pub fn read_fd(fs: &ModelFs, fd: Fd) -> Vec<u8> {
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0xAAu8; size + 16];
    let n = fs.pread(fd, &mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

pub fn err<T: std::fmt::Debug>(r: Result<T, Errno>) -> Errno {
    r.expect_err("expected an error")
}

pub fn p(s: &str) -> &[u8] {
    s.as_bytes()
}
