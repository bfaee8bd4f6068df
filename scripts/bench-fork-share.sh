#!/usr/bin/env bash
# What sharing a description with a forked child costs the preload
# library's owner (docs/PRELOAD.md, "Descriptions shared with children";
# docs/BENCHMARKS.md, "Descriptions shared with children (stop 60)").
# Python writes $N 4 KiB blocks to a file in three ways:
#
#   write             write() on a description never shared
#   write-after-fork  write() after a fork: the description now goes
#                     through the owner's FUSE mount
#   pwrite-after-fork pwrite() on a description used only at explicit
#                     offsets before a fork: it stays the engine's
#
# under LD_PRELOAD=libferrite.so (release build, FERRITE_MOUNT=1, a fresh
# pool in /dev/shm) and on tmpfs, alternating, $ROUNDS rounds; prints the
# microseconds per write of each round and the median ratio preload/tmpfs
# (below 1: the library is faster). As root (mounts a tmpfs).
#
#   scripts/bench-fork-share.sh             # 5 rounds of 20000 writes
#   ROUNDS=3 N=50000 scripts/bench-fork-share.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
N=${N:-20000}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p ferrite-c
lib=$(realpath "$target/release/libferrite.so")
work=$(mktemp -d /tmp/ferrite-fork-share.XXXXXX)
mkdir -p "$work/tmpfs" "$work/root"
mount -t tmpfs tmpfs "$work/tmpfs"
trap 'umount "$work/tmpfs" 2>/dev/null; rm -rf "$work"; rm -f /dev/shm/ferrite-fork-share-$$.pool' EXIT
cat > "$work/writes.py" <<'PY'
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
buf = b"x" * 4096
def case(name, fork, positional):
    path = os.path.join(root, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if positional:
        os.pwrite(fd, buf, 0)
    else:
        os.write(fd, buf)
    if fork:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    t = time.perf_counter()
    for i in range(n):
        if positional:
            os.pwrite(fd, buf, (i + 1) * 4096)
        else:
            os.write(fd, buf)
    us = (time.perf_counter() - t) / n * 1e6
    os.close(fd)
    os.unlink(path)
    return us
print(" ".join("%.3f" % case(*c) for c in
      [("write", False, False), ("write-after-fork", True, False), ("pwrite-after-fork", True, True)]))
PY
python=/usr/bin/python3
[ -x "$python" ] || python=python3
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; N=$N"
echo "round target write write-after-fork pwrite-after-fork (us per 4 KiB write)"
: > "$work/results"
for r in $(seq 1 "$ROUNDS"); do
    t=$("$python" "$work/writes.py" "$work/tmpfs" "$N")
    rm -f /dev/shm/ferrite-fork-share-$$.pool
    f=$(FERRITE_MOUNT=1 FERRITE_POOL=/dev/shm/ferrite-fork-share-$$.pool FERRITE_ROOT="$work/root" \
        FERRITE_SIZE=1G LD_PRELOAD="$lib" "$python" "$work/writes.py" "$work/root" "$N")
    echo "$r tmpfs $t"
    echo "$r preload $f"
    echo "$t $f" >> "$work/results"
done
"$python" - "$work/results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
names = ["write", "write-after-fork", "pwrite-after-fork"]
for i, name in enumerate(names):
    ratios = [r[3 + i] / r[i] for r in rows]
    print("%-18s preload/tmpfs median %.2fx (min %.2fx, max %.2fx)" % (name, statistics.median(ratios), min(ratios), max(ratios)))
PY
