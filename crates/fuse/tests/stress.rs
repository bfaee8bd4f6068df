//! What this proves: heavy mixed I/O through a Ferrite FUSE mount keeps
//! every byte right and survives a remount. fio writes with
//! `verify=crc32c` — psync with O_DIRECT (every read and write reaches the
//! daemon) and the mmap engine (shared writable mappings through the page
//! cache) — and verifies; stress-ng's file-system stressors run with
//! `--verify` for a bounded time; then a checksum manifest of the whole tree
//! is taken, the mount is unmounted (pool marked clean, fsck clean),
//! mounted again, the manifest compared, and fio verifies its files once
//! more, now read back from the pool.
//!
//! FERRITE_FUSE_STRESS_SECS (default 10) bounds the stress-ng phase;
//! FERRITE_FUSE_FIO_MB (default 64) sizes each fio job.

mod common;

use common::*;

fn fio(dir: &std::path::Path, args: &str) -> String {
    sh(dir, &format!("fio --output-format=terse --terse-version=3 --minimal {args} > /dev/null && echo fio-ok"))
}

#[test]
fn fio_stress_ng_manifest_across_remount() {
    if !fuse_usable() || !tool("fio", "apt-get install -y fio") || !tool("stress-ng", "apt-get install -y stress-ng") {
        return;
    }
    let secs = env_num("FERRITE_FUSE_STRESS_SECS", 10);
    let mb = env_num("FERRITE_FUSE_FIO_MB", 64);
    let pool = Pool::new("stress");
    let m = Mount::new(&pool, "size=1G");
    std::fs::create_dir(m.path("fio")).unwrap();
    std::fs::create_dir(m.path("sng")).unwrap();
    let psync = format!(
        "--name=psync --directory=fio --ioengine=psync --direct=1 --rw=randwrite --bs=4k \
         --size={mb}m --numjobs=2 --verify=crc32c --verify_fatal=1"
    );
    let mmap = format!(
        "--name=mmap --directory=fio --ioengine=mmap --rw=randwrite --bs=4k --size={}m \
         --verify=crc32c --verify_fatal=1",
        mb / 2
    );
    let seqw = format!(
        "--name=seq --directory=fio --ioengine=psync --rw=write --bs=1m --size={mb}m \
         --verify=crc32c --verify_fatal=1 --fsync=8"
    );
    for job in [&psync, &mmap, &seqw] {
        let out = fio(&m.dir, &format!("{job} --do_verify=1"));
        assert!(out.contains("fio-ok"), "{out}");
    }

    let stressors = "--hdd 1 --hdd-bytes 32m --hdd-opts wr-rnd,rd-rnd,fsync \
        --dentry 1 --dir 1 --rename 1 --link 1 --symlink 1 --fallocate 1 --seek 1 \
        --chmod 1 --utime 1 --filename 1 --lockf 1 --flock 1 --fcntl 1 --getdent 1 \
        --copy-file 1 --mmap 1 --mmap-file --mmap-bytes 16m --io 1 --fstat 1 --chown 1 \
        --iomix 1 --iomix-bytes 32m --readahead 1 --readahead-bytes 16m";
    let out = sh(&m.dir, &format!("stress-ng --temp-path sng --verify --timeout {secs}s {stressors} 2>&1"));
    assert!(out.contains("successful run completed"), "stress-ng:\n{out}");
    assert!(!out.contains("fail"), "stress-ng reported failures:\n{out}");

    let before = manifest(&m.dir);
    m.unmount();
    assert!(pool.marked_clean());
    pool.fsck_clean();

    let m = Mount::new(&pool, "");
    assert_eq!(before, manifest(&m.dir), "tree changed across unmount/remount");
    for job in [&psync, &mmap, &seqw] {
        let out = fio(&m.dir, &format!("{job} --verify_only"));
        assert!(out.contains("fio-ok"), "{out}");
    }
    m.unmount();
    pool.fsck_clean();
}
