# Shared mappings of a file between the pool's owner and a forked child,
# which reaches the pool through the owner's mount (under the preload
# library). On the directory argv[1]; prints what each side saw, for a
# diff against the same run on tmpfs.
#  1. The owner maps a file read-only and shared; the child writes it with
#     pwrite: the owner's mapping shows the child's bytes.
#  2. The child maps the file read-only and shared; the owner writes it:
#     the child's mapping shows the owner's bytes.
#  3. The owner stores through a writable shared mapping, without msync;
#     the child reads the file: it reads the stores.
#  4. The child truncates the file the owner maps: the owner's mapping
#     shows the new bytes after it grows back.
#  5. A child holds a file open while the owner maps it writable and
#     shared, stores and calls msync: the child reads the stores.
#  7. A child maps a file past its end, read-only and shared; the owner
#     grows the file with pwrite: the child's mapping shows the new bytes
#     (the kernel's idea of the size must follow, or the child's access
#     past the old end raises SIGBUS).
#  8. A child maps a two-page file; the owner truncates it to one page:
#     the child's access past the new end raises SIGBUS, as on Linux.
#  6. LMDB: the owner keeps its environment open while a child opens the
#     same environment, commits, and closes; the owner then reads the
#     child's rows and commits on top, five times; in the default mode
#     and with MDB_WRITEMAP (when the lmdb module is there).
import mmap
import os
import sys

root = sys.argv[1]
path = os.path.join(root, "shared")
with open(path, "wb") as f:
    f.write(b"." * 8192)


def child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except BaseException as e:
            print("child failed:", repr(e), flush=True)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status)


def one_page_file(name):
    p = os.path.join(root, name)
    with open(p, "wb") as f:
        f.write(b"." * 4096)
    return p


# 1
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ)
print("1 before", m[100:105])


def write_child():
    k = os.open(path, os.O_WRONLY)
    os.pwrite(k, b"child", 100)
    os.close(k)


print("1 child", child(write_child))
print("1 owner's mapping", m[100:105])
m.close()
os.close(fd)

# 2
r1, w1 = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    k = os.open(path, os.O_RDONLY)
    cm = mmap.mmap(k, 8192, mmap.MAP_SHARED, mmap.PROT_READ)
    before = cm[200:205]
    os.write(w1, b"mapped")
    os.read(r2, 1)
    after = cm[200:205]
    os._exit(0 if (before, after) == (b".....", b"owner") else 1)
os.read(r1, 6)
k = os.open(path, os.O_WRONLY)
os.pwrite(k, b"owner", 200)
os.close(k)
os.write(w2, b"x")
_, status = os.waitpid(pid, 0)
print("2 child's mapping followed", os.WEXITSTATUS(status) == 0)

# 3
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[300:305] = b"store"


def read_child():
    k = os.open(path, os.O_RDONLY)
    got = os.pread(k, 5, 300)
    os.close(k)
    if got != b"store":
        raise AssertionError(got)


print("3 child read the stores", child(read_child) == 0)

# 4
m2 = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ)


def truncate_child():
    os.truncate(path, 0)
    k = os.open(path, os.O_WRONLY)
    os.pwrite(k, b"#" * 8192, 0)
    os.close(k)


print("4 child", child(truncate_child))
print("4 owner's mappings", m2[0:5], m2[300:305], m[0:5])
m2.close()
m.close()
os.close(fd)

# 5
held = one_page_file("held")
r1, w1 = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    k = os.open(held, os.O_RDONLY)
    os.write(w1, b"open")
    os.read(r2, 1)
    got = os.pread(k, 6, 10)
    os._exit(0 if got == b"stored" else 1)
os.read(r1, 4)
fd = os.open(held, os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[10:16] = b"stored"
m.flush()
os.write(w2, b"x")
_, status = os.waitpid(pid, 0)
print("5 child read the owner's synced stores", os.WEXITSTATUS(status) == 0)
m.close()
os.close(fd)

def child_maps_owner_changes(child_reads, owner_changes):
    """Fork a child that maps a file and reads it before and after the
    owner changes the file (`child_reads` gets the function that waits for
    the change and returns whether what it read was right); returns the
    child's wait status."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:

            def handshake():
                os.write(w1, b"mapped")
                os.read(r2, 1)

            os._exit(0 if child_reads(handshake) else 1)
        finally:
            os._exit(2)
    os.close(w1)
    os.read(r1, 6)
    owner_changes()
    os.write(w2, b"x")
    _, status = os.waitpid(pid, 0)
    return status


def signal_or(status):
    """The child's fate: the signal that killed it, or None."""
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


# 7
grow = one_page_file("grow")


def read_grown(handshake):
    # Python's mmap refuses a length past the end of the file; libc's
    # does not (through the library's hook, in the library's runs).
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    k = os.open(grow, os.O_RDONLY)
    at = libc.mmap(None, 3 * 4096, mmap.PROT_READ, mmap.MAP_SHARED, k, 0)
    before = ctypes.string_at(at, 5)
    handshake()
    after = (ctypes.string_at(at + 4096, 5), ctypes.string_at(at + 8192, 5))
    return (before, after) == (b".....", (b"grown", b"grown"))


def grow_it():
    k = os.open(grow, os.O_WRONLY)
    more = bytearray(b"." * 8192)
    more[0:5] = more[4096:4101] = b"grown"
    os.pwrite(k, bytes(more), 4096)
    os.close(k)


status = child_maps_owner_changes(read_grown, grow_it)
if signal_or(status) is not None:
    print("7 child's mapping of the grown file: signal", signal_or(status))
else:
    print("7 child's mapping of the grown file followed", os.WEXITSTATUS(status) == 0)

# 8
shrink = os.path.join(root, "shrink")
with open(shrink, "wb") as f:
    f.write(b"." * 8192)


def read_shrunk(handshake):
    k = os.open(shrink, os.O_RDONLY)
    cm = mmap.mmap(k, 8192, mmap.MAP_SHARED, mmap.PROT_READ)
    before = cm[4096:4101]
    handshake()
    return (before, cm[4096:4101]) == (b".....", b"\0" * 5)


status = child_maps_owner_changes(read_shrunk, lambda: os.truncate(shrink, 4096))
if signal_or(status) is not None:
    print("8 child's mapping past the new end: signal", signal_or(status))
else:
    print("8 child's mapping past the new end read zeros", os.WEXITSTATUS(status) == 0)

# 6
try:
    import lmdb
except ImportError:
    lmdb = None
for name, writemap in (("plain", False), ("writemap", True)) if lmdb else ():
    d = os.path.join(root, "env-" + name)
    os.mkdir(d)
    env = lmdb.open(d, map_size=16 << 20, writemap=writemap)
    with env.begin(write=True) as txn:
        for i in range(100):
            txn.put(b"p%04d" % i, b"parent" * 10)
    for round in range(5):

        def commit_child():
            e2 = lmdb.open(d, map_size=16 << 20, writemap=writemap)
            with e2.begin(write=True) as txn:
                for i in range(100):
                    txn.put(b"c%d-%04d" % (round, i), b"child" * 20)
            e2.close()

        status = child(commit_child)
        with env.begin() as txn:
            n = txn.stat()["entries"]
            v = txn.get(b"c%d-%04d" % (round, 50))
        print("6", name, round, "child", status, "owner sees", n, v == b"child" * 20)
        with env.begin(write=True) as txn:
            for i in range(100):
                txn.put(b"q%d-%04d" % (round, i), b"again" * 10)
    with env.begin() as txn:
        print("6", name, "final", txn.stat()["entries"], sum(1 for _ in txn.cursor()))
    env.close()
