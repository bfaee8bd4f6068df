#!/usr/bin/env bash
# The full Ferrite benchmark suite in one command (docs/BENCHMARKS.md):
# installs what it needs (e2fsprogs and mount for the ext4 targets, when
# run as root), builds the release binary and runs every workload on
# ferrite, tmpfs, ext4, ext4 data=journal and the hardware limit, writing
# results.md, results.csv, results.json and the SVG plots to docs/bench/
# (target/bench-quick/ with --quick; or $FERRITE_BENCH_OUT). Extra arguments
# go to ferrite-bench, e.g.
#   scripts/bench.sh --quick
#   scripts/bench.sh --workloads fio,meta --rounds 3
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

if [ "$(id -u)" -eq 0 ]; then
    missing=()
    have mkfs.ext4 || missing+=(e2fsprogs)
    have losetup || missing+=(mount)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "== installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q "${missing[@]}"
    fi
else
    echo "== not root: the ext4 targets will be skipped (run with sudo to include them)"
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install a Rust toolchain (https://rustup.rs), then run this again" >&2
    exit 1
fi

echo "== load: $(uptime)"
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 1.5) }'; then
    echo "== warning: the machine is busy (1-minute load $load); figures will be noisy, consider running again later"
fi

echo "== building (release)"
cargo build --release -p ferrite-bench

# A quick run must not overwrite the committed full results.
default_out=docs/bench
for a in "$@"; do
    if [ "$a" = "--quick" ]; then default_out=target/bench-quick; fi
done
out=${FERRITE_BENCH_OUT:-$default_out}
# Cargo puts the binary under CARGO_TARGET_DIR when that is set.
bin=${CARGO_TARGET_DIR:-target}/release/ferrite-bench
echo "== running: $bin --out $out $*"
"$bin" --out "$out" "$@"
