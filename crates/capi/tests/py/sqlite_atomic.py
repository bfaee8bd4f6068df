"""The driver of the SQLite kill test (tests/kill.rs): a database with
journal_mode=OFF and synchronous=FULL, changed by a stream of transactions
that are each a deterministic function of (seed, number), so that a checker
can rebuild exactly what any number of committed transactions leave.

  sqlite_atomic.py run DB SEED [JOURNAL]
      Continue the stream: print "ready N" (N: the last transaction in the
      database, -1 for none), then commit N+1, N+2, ... and print
      "committed T" (flushed) after each COMMIT has returned, until killed.
  sqlite_atomic.py check DB SEED [JOURNAL]
      Print "integrity <result>", "mode <user.ferrite.mode of DB>",
      "last N" and "content ok" if the tables hold exactly what
      transactions 0..=N leave, else "content differs: ...".

JOURNAL is the journal mode (default OFF). With another mode (WAL,
DELETE: the buffered-mount test) the checker opens the database for
writing, so that SQLite recovers its hot journal or WAL first. DELETE
runs with synchronous=EXTRA: its COMMIT is the unlink of the journal,
which only a sync of the directory makes durable."""
import os, random, sqlite3, sys

INSERTS, UPDATES, DELETES = 8, 5, 2


def transaction(seed, t):
    """The changes of transaction t: (kind, key, value) triples."""
    r = random.Random(seed * 1_000_003 + t)
    ops = []
    for i in range(INSERTS):
        ops.append(("insert", t * INSERTS + i, "%d.%d:" % (t, i) + "x" * r.randrange(1, 300)))
    if t > 0:
        for _ in range(UPDATES):
            ops.append(("update", r.randrange(t * INSERTS), "u%d:" % t + "y" * r.randrange(1, 600)))
        for _ in range(DELETES):
            ops.append(("delete", r.randrange(t * INSERTS), None))
    return ops


def apply_db(db, seed, t):
    db.execute("BEGIN")
    for kind, key, value in transaction(seed, t):
        if kind == "insert":
            db.execute("INSERT INTO t(k, v) VALUES(?, ?)", (key, value))
        elif kind == "update":
            db.execute("UPDATE t SET v = ? WHERE k = ?", (value, key))
        else:
            db.execute("DELETE FROM t WHERE k = ?", (key,))
    db.execute("INSERT OR REPLACE INTO meta(id, n) VALUES(0, ?)", (t,))
    db.execute("COMMIT")


def model(seed, last):
    rows = {}
    for t in range(last + 1):
        for kind, key, value in transaction(seed, t):
            if kind == "insert":
                rows[key] = value
            elif kind == "update":
                if key in rows:
                    rows[key] = value
            else:
                rows.pop(key, None)
    return rows


def last_of(db):
    row = db.execute("SELECT n FROM meta WHERE id = 0").fetchone()
    return -1 if row is None else row[0]


def run(path, seed, journal="OFF"):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=%s" % journal)
    # In DELETE mode the unlink of the journal commits: EXTRA syncs the
    # directory after it, so that a COMMIT that returned is durable.
    db.execute("PRAGMA synchronous=%s" % ("EXTRA" if journal == "DELETE" else "FULL"))
    db.execute("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS meta(id INTEGER PRIMARY KEY, n INTEGER)")
    last = last_of(db)
    print("ready %d" % last, flush=True)
    t = last + 1
    while True:
        apply_db(db, seed, t)
        print("committed %d" % t, flush=True)
        t += 1


def check(path, seed, journal="OFF"):
    if journal == "OFF":
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    else:
        db = sqlite3.connect(path)
    print("integrity %s" % db.execute("PRAGMA integrity_check").fetchone()[0])
    try:
        print("mode %s" % os.getxattr(path, "user.ferrite.mode").decode())
    except OSError as e:
        print("mode unknown (%s)" % e.strerror)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables != {"t", "meta"}:
        print("last -1")
        print("content ok" if tables == set() else "content differs: tables %s" % sorted(tables))
        return
    last = last_of(db)
    print("last %d" % last)
    have = dict(db.execute("SELECT k, v FROM t"))
    want = model(seed, last)
    if have == want:
        print("content ok")
    else:
        extra = sorted(set(have) - set(want))[:5]
        missing = sorted(set(want) - set(have))[:5]
        changed = sorted(k for k in set(have) & set(want) if have[k] != want[k])[:5]
        print("content differs: %d rows, want %d; extra %s, missing %s, changed %s"
              % (len(have), len(want), extra, missing, changed))


if __name__ == "__main__":
    {"run": run, "check": check}[sys.argv[1]](sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
