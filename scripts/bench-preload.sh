#!/usr/bin/env bash
# Issue 9's benchmarks of the preload library with unmodified programs
# (docs/BENCHMARKS.md, "Preload library (issue 9)"):
#
#   fio     fio 4 KiB randwrite, randread and randwrite + fsync after every
#           write (psync, --thread, one file of $FIO_SIZE, time-based
#           $RUNTIME s, verify off), on: fio under LD_PRELOAD=libferrite.so
#           with the file under FERRITE_ROOT, tmpfs, ext4 on a RAM loop device.
#   sqlite  the sqlite3 CLI: $SQL_N single-row INSERTs then $SQL_N single-row
#           UPDATEs (random rows), each in its own transaction
#           (BEGIN; ...; COMMIT;), journal_mode WAL and DELETE,
#           synchronous=FULL, on: sqlite3 under the preload, Ferrite's FUSE
#           mount (`ferrite mount`), tmpfs, ext4 on a RAM loop device.
#   sqlite-atomic  (issue 10) the same transactions with journal_mode=OFF on
#           an fsync-atomic database (sqlite3 under the preload with
#           FERRITE_ATOMIC='*.db': each COMMIT's fsync commits the
#           transaction's page writes at once), against journal_mode=WAL
#           on the preload in strict mode, on tmpfs and on ext4, and the
#           ceiling of any file system for this program: journal_mode=OFF
#           with synchronous=OFF on tmpfs (no journal, no sync, nothing
#           durable); not part of the default parts.
#
# Every round runs every target once, in an order rotated per round; the
# summary gives medians over rounds and per-round ratios (median, min–max).
# The preload runs use FERRITE_MOUNT=0 (no FUSE mount: nothing else uses
# the pool) and a fresh pool of the library's default size (1 GiB).
#
#   scripts/bench-preload.sh               # both parts, 3 rounds (about 6 minutes)
#   scripts/bench-preload.sh fio           # one part
#   ROUNDS=5 RUNTIME=10 FIO_SIZE=256M SQL_N=10000 scripts/bench-preload.sh
#
#   scripts/bench-preload.sh sqlite-atomic # issue 10's SQLite comparison
#
# As root (loop device for ext4, /dev/fuse for the FUSE mount); without
# root the ext4 and FUSE targets are skipped. Writes fio.csv, sqlite.csv,
# summary.md and machine.txt to $FERRITE_BENCH_OUT (default
# target/bench-preload).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-10}
FIO_SIZE=${FIO_SIZE:-256M}
SQL_N=${SQL_N:-10000}
PARTS=${*:-fio sqlite}
TGT=${CARGO_TARGET_DIR:-$PWD/target}
OUT=${FERRITE_BENCH_OUT:-$TGT/bench-preload}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
root=0
[ "$(id -u)" -eq 0 ] && root=1
missing=()
have fio || missing+=(fio)
have sqlite3 || missing+=(sqlite3)
have python3 || missing+=(python3)
if [ $root = 1 ]; then
    have mkfs.ext4 || missing+=(e2fsprogs)
    have losetup || missing+=(mount)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ $root = 1 ]; then
        echo "== installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q && apt-get install -y -q "${missing[@]}"
    else
        echo "missing: ${missing[*]} (install them, or run as root)" >&2
        exit 1
    fi
fi

echo "== building libferrite.so and the ferrite CLI (release)"
cargo build --release -q -p ferrite-c -p ferrite-cli
LIB=${FERRITE_PRELOAD_LIB:-$TGT/release/libferrite.so}
FERRITE=$TGT/release/ferrite
[ -f "$LIB" ] || { echo "$LIB missing: build it with cargo build --release -p ferrite-c" >&2; exit 1; }

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with local changes)')"
    echo "kernel: $(uname -r)"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "fio: $(fio --version), sqlite3: $(sqlite3 --version | cut -d' ' -f1)"
    echo "rounds $ROUNDS, fio runtime ${RUNTIME}s size $FIO_SIZE, sqlite $SQL_N transactions per phase"
    lscpu | head -20
} >"$OUT/machine.txt"
echo "== load: $(uptime)"

# ---- scratch: tmpfs dir, preload root and pool, ext4 on a loop device, FUSE mount
S=/dev/shm/ferrite-bpre-$$
mkdir -p "$S/tmpfs" "$S/preload.root"
POOL=$S/preload.pool
PROOT=$S/preload.root
EXT4_MNT=""
LOOP=""
FUSE_MNT=""
cleanup() {
    set +e
    if [ -n "$FUSE_MNT" ]; then "$FERRITE" umount "$FUSE_MNT" >/dev/null 2>&1 || umount -l "$FUSE_MNT"; rmdir "$FUSE_MNT"; fi
    if [ -n "$EXT4_MNT" ]; then umount "$EXT4_MNT"; rmdir "$EXT4_MNT"; fi
    if [ -n "$LOOP" ]; then losetup -d "$LOOP"; fi
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

targets=(preload tmpfs)
declare -A DIR=([preload]=$PROOT [tmpfs]=$S/tmpfs)
if [ $root = 1 ] && [ -e /dev/loop-control ]; then
    truncate -s 4G "$S/ext4.img"
    LOOP=$(losetup --find --show "$S/ext4.img")
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"
    EXT4_MNT=$(mktemp -d /tmp/ferrite-bpre-ext4.XXXXXX)
    mount "$LOOP" "$EXT4_MNT"
    DIR[ext4]=$EXT4_MNT
    targets+=(ext4)
else
    echo "== ext4 skipped (root and loop devices needed)"
fi
sql_targets=("${targets[@]}")
if [[ " $PARTS " == *" sqlite "* ]]; then
    if [ $root = 1 ] && [ -e /dev/fuse ]; then
        FUSE_MNT=$(mktemp -d /tmp/ferrite-bpre-fuse.XXXXXX)
        "$FERRITE" mount --daemon -s 1G "$S/fuse.pool" "$FUSE_MNT"
        DIR[fuse]=$FUSE_MNT
        sql_targets=(preload fuse "${targets[@]:1}")
    else
        echo "== FUSE skipped (root and /dev/fuse needed)"
    fi
fi

# Run a command as target $1 (the preload target gets the library).
as_target() {
    local t=$1
    shift
    if [ "$t" = preload ]; then
        LD_PRELOAD=$LIB FERRITE_POOL=$POOL FERRITE_ROOT=$PROOT FERRITE_MOUNT=0 "$@"
    elif [ "$t" = preload-atomic ]; then
        LD_PRELOAD=$LIB FERRITE_POOL=$POOL FERRITE_ROOT=$PROOT FERRITE_MOUNT=0 FERRITE_ATOMIC='*.db' "$@"
    else
        "$@"
    fi
}

# The targets of round $1 from list $2..: rotated by the round number.
rotated() {
    local r=$1
    shift
    local a=("$@") n=$#
    for ((k = 0; k < n; k++)); do echo "${a[$(((r + k) % n))]}"; done
}

# ---- fio
if [[ " $PARTS " == *" fio "* ]]; then
    echo "round,target,job,iops" >"$OUT/fio.csv"
    fio_job() { # target job rw extra...
        local t=$1 job=$2 rw=$3
        shift 3
        as_target "$t" fio --name="$job" --filename="${DIR[$t]}/fio.dat" --ioengine=psync --thread \
            --size="$FIO_SIZE" --bs=4k --rw="$rw" --time_based --runtime="$RUNTIME" --verify=0 \
            --norandommap --randrepeat=0 --output-format=json --output="$OUT/fio-last.json" "$@" >/dev/null
        python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["write"]["iops"]+j["read"]["iops"])' \
            "$OUT/fio-last.json"
    }
    for t in "${targets[@]}"; do # lay the file out (untimed)
        as_target "$t" fio --name=layout --filename="${DIR[$t]}/fio.dat" --ioengine=psync --thread \
            --size="$FIO_SIZE" --bs=1M --rw=write --output=/dev/null >/dev/null
    done
    for ((r = 0; r < ROUNDS; r++)); do
        for t in $(rotated "$r" "${targets[@]}"); do
            for spec in "randwrite randwrite" "randread randread" "randwrite-fsync1 randwrite --fsync=1"; do
                set -- $spec
                iops=$(fio_job "$t" "$@")
                echo "$r,$t,$1,$iops" >>"$OUT/fio.csv"
                printf '   fio round %d %-8s %-17s %12.0f IOPS\n' "$r" "$t" "$1" "$iops"
            done
        done
    done
    rm -f "$OUT/fio-last.json"
fi

# The SQL of one sqlite run in journal mode $1 (NOSYNC: journal_mode=OFF
# with synchronous=OFF), written to $OUT/sqlite-$1.sql: $SQL_N single-row
# INSERTs then $SQL_N single-row UPDATEs, each its own transaction.
gen_sql() {
    python3 - "$1" "$SQL_N" >"$OUT/sqlite-$1.sql" <<'EOF'
import random, sys
mode, n = sys.argv[1], int(sys.argv[2])
ts = "SELECT printf('%.3f', (julianday('now') - 2440587.5) * 86400.0);"
print(f"PRAGMA journal_mode={'OFF' if mode == 'NOSYNC' else mode};")
print(f"PRAGMA synchronous={'OFF' if mode == 'NOSYNC' else 'FULL'};")
print("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v TEXT);")
print(ts)
v = "x" * 100
for _ in range(n):
    print(f"BEGIN; INSERT INTO t(n, v) VALUES (0, '{v}'); COMMIT;")
print(ts)
rng = random.Random(42)
for _ in range(n):
    print(f"BEGIN; UPDATE t SET n = n + 1 WHERE id = {rng.randint(1, n)}; COMMIT;")
print(ts)
print("SELECT count(*), sum(n) FROM t;")
print("PRAGMA integrity_check;")
EOF
}

# ---- sqlite
if [[ " $PARTS " == *" sqlite "* ]]; then
    for mode in WAL DELETE; do gen_sql "$mode"; done
    echo "round,target,mode,phase,tx_per_s" >"$OUT/sqlite.csv"
    for ((r = 0; r < ROUNDS; r++)); do
        for t in $(rotated "$r" "${sql_targets[@]}"); do
            for mode in WAL DELETE; do
                db="${DIR[$t]}/sq-$r-$mode.db"
                res=$(as_target "$t" sqlite3 "$db" <"$OUT/sqlite-$mode.sql")
                # Lines: journal mode, t0, t1, t2, "count|sum", integrity.
                read -r -a L <<<"$(echo "$res" | tr '\n' ' ')"
                want="$SQL_N|$SQL_N"
                if [ "${#L[@]}" -ne 6 ] || [ "${L[4]}" != "$want" ] || [ "${L[5]}" != ok ] ||
                    [ "${L[0]}" != "${mode,,}" ]; then
                    echo "sqlite on $t ($mode) gave unexpected output: $res" >&2
                    exit 1
                fi
                ins=$(python3 -c "print($SQL_N / (${L[2]} - ${L[1]}))")
                upd=$(python3 -c "print($SQL_N / (${L[3]} - ${L[2]}))")
                echo "$r,$t,$mode,insert,$ins" >>"$OUT/sqlite.csv"
                echo "$r,$t,$mode,update,$upd" >>"$OUT/sqlite.csv"
                printf '   sqlite round %d %-8s %-6s insert %9.0f tx/s  update %9.0f tx/s\n' "$r" "$t" "$mode" "$ins" "$upd"
            done
        done
    done
fi

# ---- sqlite-atomic: journal_mode=OFF on an fsync-atomic file against WAL
if [[ " $PARTS " == *" sqlite-atomic "* ]]; then
    for mode in WAL OFF NOSYNC; do gen_sql "$mode"; done
    # (target:journal mode) runs, the subject first.
    atomic_runs=(preload-atomic:OFF preload:WAL tmpfs:WAL tmpfs:NOSYNC)
    [ -n "${DIR[ext4]:-}" ] && atomic_runs+=(ext4:WAL)
    DIR[preload-atomic]=$PROOT
    echo "round,target,mode,phase,tx_per_s" >"$OUT/sqlite-atomic.csv"
    for ((r = 0; r < ROUNDS; r++)); do
        for run in $(rotated "$r" "${atomic_runs[@]}"); do
            t=${run%%:*}
            mode=${run##*:}
            db="${DIR[$t]}/sqa-$r-$t-$mode.db"
            res=$(as_target "$t" sqlite3 "$db" <"$OUT/sqlite-$mode.sql")
            read -r -a L <<<"$(echo "$res" | tr '\n' ' ')"
            want="$SQL_N|$SQL_N"
            if [ "${#L[@]}" -ne 6 ] || [ "${L[4]}" != "$want" ] || [ "${L[5]}" != ok ] ||
                [ "${L[0]}" != "$(m=${mode/NOSYNC/OFF}; echo "${m,,}")" ]; then
                echo "sqlite on $t ($mode) gave unexpected output: $res" >&2
                exit 1
            fi
            if [ "$t" = preload-atomic ]; then
                got=$(as_target "$t" python3 -c "import os,sys; print(os.getxattr(sys.argv[1], 'user.ferrite.mode').decode())" "$db")
                [ "$got" = fsync-atomic ] || { echo "$db is not fsync-atomic ($got)" >&2; exit 1; }
            fi
            ins=$(python3 -c "print($SQL_N / (${L[2]} - ${L[1]}))")
            upd=$(python3 -c "print($SQL_N / (${L[3]} - ${L[2]}))")
            echo "$r,$t,$mode,insert,$ins" >>"$OUT/sqlite-atomic.csv"
            echo "$r,$t,$mode,update,$upd" >>"$OUT/sqlite-atomic.csv"
            printf '   sqlite round %d %-15s %-4s insert %9.0f tx/s  update %9.0f tx/s\n' "$r" "$t" "$mode" "$ins" "$upd"
        done
    done
fi

echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"

# ---- summary: medians, per-round ratios (median and min–max)
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import csv, os, statistics, sys
out = sys.argv[1]

def fmt(v):
    return f"{v/1e3:.0f}k" if v >= 1e4 else f"{v:.0f}"

def ratio_cell(rs):
    if not rs:
        return "–"
    return f"**{statistics.median(rs):.2f}×** ({min(rs):.2f}–{max(rs):.2f})"

def table(rows, key_fields, value_field, title, unit, subject="preload"):
    data = {}
    targets = []
    for row in rows:
        k = tuple(row[f] for f in key_fields)
        t = row["target"]
        if t not in targets:
            targets.append(t)
        data.setdefault(k, {}).setdefault(t, {})[int(row["round"])] = float(row[value_field])
    others = [t for t in targets if t != subject]
    print(f"\n#### {title}\n")
    print("| " + " | ".join(key_fields) + " | " + " | ".join(f"{t} ({unit})" for t in targets)
          + " | " + " | ".join(f"{subject} / {o}" for o in others) + " |")
    print("|" + "---|" * len(key_fields) + "---:|" * (len(targets) + len(others)))
    for k, per in data.items():
        cells = [fmt(statistics.median(per[t].values())) if t in per else "n/a" for t in targets]
        rcells = []
        for o in others:
            if subject in per and o in per:
                rs = [per[subject][r] / per[o][r] for r in per[subject] if r in per[o]]
                rcells.append(ratio_cell(rs))
            else:
                rcells.append("–")
        print("| " + " | ".join(k) + " | " + " | ".join(cells) + " | " + " | ".join(rcells) + " |")

print("Medians over rounds; ratios computed per round (> 1: the preload is faster), median (min–max).")
p = os.path.join(out, "fio.csv")
if os.path.exists(p):
    table(list(csv.DictReader(open(p))), ["job"], "iops", "fio, 4 KiB, psync, 1 thread", "IOPS")
p = os.path.join(out, "sqlite.csv")
if os.path.exists(p):
    table(list(csv.DictReader(open(p))), ["mode", "phase"], "tx_per_s", "sqlite3, one row per transaction", "tx/s")
p = os.path.join(out, "sqlite-atomic.csv")
if os.path.exists(p):
    rows = list(csv.DictReader(open(p)))
    for row in rows:
        row["target"] = f"{row['target']} {row['mode']}"
    table(rows, ["phase"], "tx_per_s", "sqlite3, one row per transaction: journal_mode=OFF on fsync-atomic vs WAL",
          "tx/s", subject="preload-atomic OFF")
EOF
echo "== results in $OUT (summary.md, fio.csv, sqlite.csv, machine.txt)"
