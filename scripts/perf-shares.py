#!/usr/bin/env python3
"""Shares of a perf profile inside one measured call.

    perf record --call-graph dwarf,16384 -F 2000 -o perf.data \
        target/release/ferrite-bench --targets ferrite --workloads randwrite-4k \
        --rounds 2 --no-accounting
    scripts/perf-shares.py perf.data 'FerriteLib as .*Target>::pwrite'

Only samples whose call chain passes through a frame matching ROOT count.
Prints, as a percentage of those samples: the leaf functions (self time)
and the functions below ROOT (inclusive time, each counted once per
sample). Uses `perf script`, so it sees inlined frames too.
"""
import re
import subprocess
import sys
from collections import Counter


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data, root = sys.argv[1], re.compile(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "ip,sym", "--inline"],
        capture_output=True, text=True, errors="replace", check=True,
    ).stdout
    total = 0
    leaf = Counter()
    incl = Counter()
    for block in out.split("\n\n"):
        frames = []
        for line in block.strip().splitlines():
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                sym = re.sub(r"\+0x[0-9a-f]+$", "", parts[1]).strip()
                frames.append(sym)
        if not frames:
            continue
        idx = next((i for i, f in enumerate(frames) if root.search(f)), None)
        if idx is None:
            continue
        total += 1
        leaf[frames[0]] += 1
        for f in set(frames[:idx]):
            incl[f] += 1
    if not total:
        sys.exit("no sample passes through " + sys.argv[2])
    print(f"{total} samples inside {sys.argv[2]}")
    print("\nself (leaf) share:")
    for f, n in leaf.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {f[:150]}")
    print("\ninclusive share (below the root):")
    for f, n in incl.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {f[:150]}")


if __name__ == "__main__":
    main()
