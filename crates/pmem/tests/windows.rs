//! Proves the persistence layer's windows (zero-copy views and patch
//! buffers): a view shows pool pages, zero pages and given bytes side by
//! side, on a pool file (mapped) and on a heap pool (copied); a read-only
//! view faults on a store (a forked child dies of SIGSEGV) and cannot be
//! made writable by mprotect (nor can the alias), while a private
//! one keeps its stores to itself; a patch buffer's bytes reach the pool
//! only through `adopt_buffer`, which on a recording pool records them as
//! stores (so crash simulation sees them) and on a mapped buffer writes
//! their lines back; and the read-only alias shows the pool's bytes.

use ferrite_pmem::{Event, Pmem, PoolOffset, WindowAccess, WindowPage};

const PAGE: u64 = 4096;

fn file_pool(tag: &str) -> (Pmem, std::path::PathBuf) {
    let p = std::path::PathBuf::from(format!("/dev/shm/ferrite-windows-{}-{tag}.pool", std::process::id()));
    let _ = std::fs::remove_file(&p);
    (Pmem::create_file(&p, 64 * PAGE, 0).unwrap(), p)
}

fn pools(tag: &str) -> Vec<(Pmem, Option<std::path::PathBuf>)> {
    let (f, p) = file_pool(tag);
    vec![(f, Some(p)), (Pmem::heap(64 * PAGE), None)]
}

fn window_bytes(w: &ferrite_pmem::Window) -> Vec<u8> {
    let mut b = vec![0u8; w.len()];
    w.copy_out(0, &mut b);
    b
}

#[test]
fn a_view_shows_pool_pages_zeros_and_bytes() {
    for (pmem, path) in pools("view") {
        for i in 0..8u64 {
            pmem.write(PoolOffset(i * PAGE), &vec![i as u8 + 1; PAGE as usize]);
        }
        let merged = vec![0xAB; 100];
        let pages = [
            WindowPage::Pool(PoolOffset(3 * PAGE)),
            WindowPage::Pool(PoolOffset(4 * PAGE)),
            WindowPage::Zero,
            WindowPage::Bytes(&merged),
            WindowPage::Pool(PoolOffset(PAGE)),
        ];
        let w = pmem.map_view(&pages, WindowAccess::ReadOnly).unwrap();
        assert_eq!(w.len(), 5 * PAGE as usize);
        assert!(!w.is_mapped(), "a window with copied bytes is not all mapped");
        let b = window_bytes(&w);
        let p = PAGE as usize;
        assert!(b[..p].iter().all(|&x| x == 4) && b[p..2 * p].iter().all(|&x| x == 5));
        assert!(b[2 * p..3 * p].iter().all(|&x| x == 0));
        assert_eq!(&b[3 * p..3 * p + 100], &merged[..]);
        assert!(b[3 * p + 100..4 * p].iter().all(|&x| x == 0));
        assert!(b[4 * p..].iter().all(|&x| x == 2));
        // Only pool pages: mapped on a pool file, copied on the heap.
        let only = pmem.map_view(&pages[..2], WindowAccess::ReadOnly).unwrap();
        assert_eq!(only.is_mapped(), path.is_some());
        // The alias exists only for a pool file, and shows the pool.
        match pmem.read_only_alias(PoolOffset(2 * PAGE), PAGE) {
            Some(ptr) => {
                assert!(path.is_some());
                // SAFETY: the alias maps the whole pool read-only for the
                // pool's lifetime; page 2 was written above.
                let byte = unsafe { *ptr.add(10) };
                assert_eq!(byte, 3);
            }
            None => assert!(path.is_none()),
        }
        drop((w, only));
        if let Some(p) = path {
            drop(pmem);
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_private_view_keeps_its_stores() {
    for (pmem, path) in pools("private") {
        pmem.write(PoolOffset(5 * PAGE), &vec![9u8; PAGE as usize]);
        let w = pmem.map_view(&[WindowPage::Pool(PoolOffset(5 * PAGE))], WindowAccess::PrivateWritable).unwrap();
        w.copy_in(0, &[1, 2, 3]);
        assert_eq!(&window_bytes(&w)[..4], &[1, 2, 3, 9]);
        let mut pool = [0u8; 4];
        pmem.read(PoolOffset(5 * PAGE), &mut pool);
        assert_eq!(pool, [9; 4], "a private view's store reached the pool");
        drop(w);
        if let Some(p) = path {
            drop(pmem);
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_store_through_a_read_only_view_faults() {
    let (pmem, path) = file_pool("fault");
    let w = pmem.map_view(&[WindowPage::Pool(PoolOffset(0)), WindowPage::Zero], WindowAccess::ReadOnly).unwrap();
    for at in [0usize, PAGE as usize] {
        let target = w.as_ptr().wrapping_add(at).cast_mut();
        // SAFETY: fork in a test process; the child only stores (and so
        // dies of SIGSEGV, which is the point) or exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: a store through a read-only mapping: the fault is the
            // behaviour under test; the child exits if it does not fault.
            unsafe {
                target.write_volatile(1);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV, "status {status:#x}");
    }
    // Nor can a view or the alias be made writable: their pool pages come
    // from a read-only descriptor of the pool file.
    let alias = pmem.read_only_alias(PoolOffset(0), PAGE).unwrap();
    for (addr, what) in [(w.as_ptr(), "view"), (alias, "alias")] {
        // SAFETY: mprotect of a page we map (the call is expected to fail).
        let rc = unsafe { libc::mprotect(addr.cast_mut().cast(), PAGE as usize, libc::PROT_READ | libc::PROT_WRITE) };
        assert_eq!(rc, -1, "the {what} became writable");
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EACCES));
    }
    drop(w);
    drop(pmem);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_adopted_buffer_reaches_the_pool_as_recorded_stores() {
    for (pmem, path) in pools("adopt") {
        let runs = [(PoolOffset(10 * PAGE), 1), (PoolOffset(20 * PAGE), 2)];
        let w = pmem.map_buffer(&runs).unwrap();
        assert_eq!(w.len(), 3 * PAGE as usize);
        assert_eq!(w.is_mapped(), path.is_some());
        let data: Vec<u8> = (0..3 * PAGE).map(|i| (i % 253) as u8).collect();
        w.copy_in(0, &data);
        pmem.start_recording();
        pmem.adopt_buffer(&w, 2 * PAGE);
        pmem.fence();
        let events = pmem.stop_recording();
        // The first two pages are in the pool (one in each run), in order.
        let mut got = vec![0u8; PAGE as usize];
        pmem.read(PoolOffset(10 * PAGE), &mut got);
        assert_eq!(got, &data[..PAGE as usize]);
        pmem.read(PoolOffset(20 * PAGE), &mut got);
        assert_eq!(got, &data[PAGE as usize..2 * PAGE as usize]);
        // Every adopted byte is in the trace as a store, at its offset.
        let mut image = vec![0u8; 64 * PAGE as usize];
        ferrite_pmem::replay_stores(&mut image, &events);
        assert_eq!(&image[10 * PAGE as usize..11 * PAGE as usize], &data[..PAGE as usize]);
        assert_eq!(&image[20 * PAGE as usize..21 * PAGE as usize], &data[PAGE as usize..2 * PAGE as usize]);
        assert!(image[21 * PAGE as usize..22 * PAGE as usize].iter().all(|&b| b == 0), "past `len` adopted");
        assert!(matches!(events.last(), Some(Event::Fence)));
        drop(w);
        if let Some(p) = path {
            drop(pmem);
            std::fs::remove_file(p).unwrap();
        }
    }
}
