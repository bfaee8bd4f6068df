use ferrite::{BufferedOptions, FormatOptions, MountOptions, OpenFlags, PathFs, Session, TimeSet, TimeSpec};
use ferrite_pmem::Pmem;

fn go(buffered: bool, xattr: bool, thread: bool) {
    let fs =
        Session::format(Pmem::heap(2048 * 4096), &FormatOptions { lanes: 2, inodes: Some(1024), ..Default::default() })
            .unwrap();
    let fs = if buffered {
        let opts = MountOptions {
            buffered: Some(BufferedOptions { persister_thread: thread, ..Default::default() }),
            ..Default::default()
        };
        ferrite_tests::remount_as(fs, false, &opts).0
    } else {
        fs
    };
    let fd = fs.open(b"/f", OpenFlags::RDWR.create(), 0o644).unwrap();
    fs.pwrite(fd, b"abc", 0).unwrap();
    let start = fs.free_pages();
    let mut line = String::new();
    for round in 0..4096u32 {
        let at = TimeSet::At(TimeSpec { sec: 1_700_000_000 + i64::from(round), nsec: 0 });
        fs.futimens(fd, at, at).unwrap();
        fs.fchmod(fd, 0o600 | ((round & 1) * 0o44)).unwrap();
        fs.fchown(fd, Some(round % 3), None).unwrap();
        if xattr {
            fs.fsetxattr(fd, b"user.round", format!("{round:024}").as_bytes(), ferrite::XattrSetMode::Any).unwrap();
        }
        if round % 256 == 0 {
            line += &format!("{} ", start - fs.free_pages());
        }
    }
    fs.engine().sync_all().unwrap();
    line += &format!("synced {} ", start - fs.free_pages());
    eprintln!(
        "buffered {buffered} thread {thread} xattr {xattr}: used {line} collected {}",
        fs.engine().gc_pages_collected()
    );
}
#[test]
fn t() {
    for b in [false, true] {
        for x in [false, true] {
            go(b, x, false);
            if b {
                go(b, x, true)
            }
        }
    }
}
