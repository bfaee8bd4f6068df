"""Consistency modes under the preload library (tests/preload.rs runs each
phase as its own preloaded process, with the environment it names):

  plain ROOT     (no FERRITE_MODE, no FERRITE_ATOMIC) makes strict files.
  patterns ROOT  (FERRITE_ATOMIC='*.db:/data/*.log') shows which files the
                 patterns make fsync-atomic: created, or opened for writing.
  default ROOT   (FERRITE_MODE=fsync-atomic) shows new files take it.
  crash ROOT     (FERRITE_MODE=fsync-atomic) writes after each kind of
                 commit point, and without one, then kills itself (SIGKILL).
  check ROOT     prints what each file of the crash holds."""
import errno, mmap, os, signal, sys

root = sys.argv[2]


def p(name):
    return root + "/" + name


def mode(name):
    try:
        return os.getxattr(p(name), "user.ferrite.mode").decode()
    except OSError as e:
        return errno.errorcode[e.errno]


def create(name):
    open(p(name), "w").close()
    print(name, mode(name))


def plain():
    create("old.db")
    create("ro.db")
    create("a.txt")


def patterns():
    os.makedirs(p("data"))
    os.makedirs(p("other"))
    for name in ["a.db", "b.txt", "data/x.log", "other/x.log", "data/sub.db", "x.db-journal"]:
        create(name)
    print("data", mode("data"))
    open(p("ro.db")).close()
    print("ro.db opened read-only", mode("ro.db"))
    open(p("old.db"), "r+").close()
    print("old.db opened for writing", mode("old.db"))
    os.close(os.open(p("rel.db"), os.O_CREAT | os.O_WRONLY, 0o644))
    print("rel.db by os.open", mode("rel.db"))


def default():
    create("new.txt")
    open(p("a.txt"), "r+").close()
    print("a.txt opened for writing", mode("a.txt"))
    os.makedirs(p("dir"))
    print("dir", mode("dir"))


FIRST, SECOND = b"first", b"second version"
NAMES = ["sync", "fsync", "fdatasync", "osync", "mmap", "rename", "close", "none", "truncate", "strict"]


def crash():
    for n in NAMES:
        with open(p(n), "wb") as f:
            f.write(FIRST)
            os.fsync(f.fileno())
    os.setxattr(p("strict"), "user.ferrite.mode", b"strict")

    def write(name, flags=0):
        fd = os.open(p(name), os.O_WRONLY | flags)
        os.pwrite(fd, SECOND, 0)
        return fd

    # sync(2) first: it commits every file.
    fd = write("sync")
    os.sync()
    os.close(fd)
    fd = write("fsync")
    os.fsync(fd)
    os.close(fd)
    fd = write("fdatasync")
    os.fdatasync(fd)
    os.close(fd)
    os.close(write("osync", os.O_SYNC))
    # msync(MS_SYNC) commits what the mapping wrote; later stores do not.
    fd = os.open(p("mmap"), os.O_RDWR)
    os.ftruncate(fd, len(SECOND))
    m = mmap.mmap(fd, len(SECOND))
    m[:] = SECOND
    m.flush()
    m[:5] = b"THIRD"
    fd2 = write("rename")
    os.rename(p("rename"), p("renamed"))
    os.close(fd2)
    os.close(write("close"))
    os.close(write("strict"))
    fd3 = os.open(p("truncate"), os.O_WRONLY)
    os.ftruncate(fd3, 2)
    fd4 = write("none")
    for n in ["sync", "mmap", "none", "truncate"]:
        print("before the kill:", n, open(p(n), "rb").read())
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def check():
    for n in NAMES:
        name = "renamed" if n == "rename" else n
        print(n, mode(name), open(p(name), "rb").read())


{"plain": plain, "patterns": patterns, "default": default, "crash": crash, "check": check}[sys.argv[1]]()
