"""The driver of the LMDB kill test (tests/kill.rs): an LMDB environment
changed by a stream of write transactions that are each a deterministic
function of (seed, number), so that a checker can rebuild exactly what any
number of committed transactions leave.

  lmdb_kill.py run DIR SEED WRITEMAP
      Continue the stream: print "ready N" (N: the last transaction in the
      environment, -1 for none), then commit N+1, N+2, ... and print
      "committed T" (flushed) after each commit has returned (LMDB syncs
      the data, then the meta page), until killed (after
      RUN_TRANSACTIONS_MAX it waits for the kill). WRITEMAP 1 stores
      through a writable shared mapping (MDB_WRITEMAP), 0 writes with pwrite
      and reads through a read-only shared mapping (LMDB's default).
  lmdb_kill.py check DIR SEED WRITEMAP
      Print "last N" and "content ok" if the environment holds exactly what
      transactions 0..=N leave, else "content differs: ..."."""
import random
import sys
import time

import lmdb

PUTS, DELETES = 12, 3
MAP_BYTES = 32 << 20
# The most transactions one run commits (about 7 MiB of values).
RUN_TRANSACTIONS_MAX = 1000


def transaction(seed, t):
    """The changes of transaction t: (key, value or None to delete)."""
    r = random.Random(seed * 1_000_003 + t)
    ops = []
    for i in range(PUTS):
        ops.append((b"k%08d" % (t * PUTS + i), b"%d.%d:" % (t, i) + b"x" * r.randrange(1, 900)))
    if t > 0:
        for _ in range(DELETES):
            ops.append((b"k%08d" % r.randrange(t * PUTS), None))
        ops.append((b"k%08d" % r.randrange(t * PUTS), b"u%d:" % t + b"y" * r.randrange(1, 3000)))
    return ops


def model(seed, last):
    rows = {}
    for t in range(last + 1):
        for key, value in transaction(seed, t):
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value
    return rows


def last_of(txn):
    v = txn.get(b"~last")
    return -1 if v is None else int(v)


def main():
    what, path, seed, writemap = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    env = lmdb.open(path, map_size=MAP_BYTES, writemap=writemap)
    with env.begin() as txn:
        last = last_of(txn)
    if what == "run":
        print("ready %d" % last, flush=True)
        t = last + 1
        while True:
            if t > last + RUN_TRANSACTIONS_MAX:
                # Wait for the kill: a run must not fill the map.
                time.sleep(3600)
            with env.begin(write=True) as txn:
                for key, value in transaction(seed, t):
                    if value is None:
                        txn.delete(key)
                    else:
                        txn.put(key, value)
                txn.put(b"~last", b"%d" % t)
            print("committed %d" % t, flush=True)
            t += 1
    print("last %d" % last)
    want = model(seed, last)
    with env.begin() as txn:
        got = {k: v for k, v in txn.cursor() if k != b"~last"}
    if got == want:
        print("content ok")
    else:
        missing = sorted(set(want) - set(got))[:3]
        extra = sorted(set(got) - set(want))[:3]
        wrong = [k for k in want if k in got and got[k] != want[k]][:3]
        print("content differs: %d rows, want %d; missing %s, extra %s, wrong %s" % (len(got), len(want), missing, extra, wrong))


main()
