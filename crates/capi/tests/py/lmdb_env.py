# LMDB on the directory argv[1]: in each of three ways of mapping (the
# default read-only shared mapping with pwrite, a map larger than the
# library's views serve, and MDB_WRITEMAP's writable shared mapping),
# 30 write transactions that each read their rows back at once, then a
# second environment that reads everything, and (with argv[2] "child") a
# forked child that reads it too (under the preload library, through the
# owner's mount). Prints what it read, for a diff against the same run on
# tmpfs.
import hashlib
import os
import sys

import lmdb

root = sys.argv[1]
child = sys.argv[2] == "child"
for name, map_size, writemap in (("plain", 16 << 20, False), ("big", 2 << 30, False), ("writemap", 4 << 20, True)):
    d = os.path.join(root, name)
    os.mkdir(d)
    env = lmdb.open(d, map_size=map_size, writemap=writemap)
    for t in range(30):
        with env.begin(write=True) as txn:
            for i in range(200):
                txn.put(b"k%05d-%03d" % (i, t), b"v" * (50 + i) + str(t).encode())
            if t % 3 == 2:
                txn.delete(b"k%05d-%03d" % (7, t - 1))
        with env.begin() as txn:
            for i in range(0, 200, 37):
                v = txn.get(b"k%05d-%03d" % (i, t))
                assert v == b"v" * (50 + i) + str(t).encode(), (name, t, i, v[:20] if v else v)
    env.close()
    env = lmdb.open(d, map_size=map_size)
    h = hashlib.sha256()
    n = 0
    with env.begin() as txn:
        for k, v in txn.cursor():
            h.update(k + v)
            n += 1
    print(name, n, h.hexdigest())
    env.close()
    if not child:
        continue
    pid = os.fork()
    if pid == 0:
        env = lmdb.open(d, readonly=True, lock=False, map_size=map_size)
        with env.begin() as txn:
            os._exit(0 if txn.stat()["entries"] == n else 1)
    _, status = os.waitpid(pid, 0)
    print(name, "child read", "all" if os.WEXITSTATUS(status) == 0 else "not all")
