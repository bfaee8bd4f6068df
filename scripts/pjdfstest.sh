#!/usr/bin/env bash
# pjdfstest (the POSIX file-system test suite of FreeBSD and Linux, 238
# files of about 8,800 checks: permissions, ownership, names, times,
# errors) on Ferrite, beside the same run on tmpfs. Not part of the CI
# test command: the suite is not in a package registry, and a run takes
# 4-10 minutes per target. Run as root.
#
#   git clone https://github.com/pjd/pjdfstest /tmp/pjdfstest
#   scripts/pjdfstest.sh /tmp/pjdfstest [TARGET ...]
#
# TARGETs (default: all four):
#   tmpfs     the reference, on a fresh tmpfs
#   fuse      a `ferrite mount -o allow_other` (default_permissions, so the
#             kernel checks modes as for any file system), FUSE over
#             io_uring when the kernel allows it (/dev/fuse otherwise)
#   fuse-dev  the same over /dev/fuse
#   preload   every call of the suite's helper under the preload library,
#             each helper process the pool's owner with its FUSE mount at
#             the root (sockets are bound through it)
#
# MOUNT_OPTIONS (e.g. mode=buffered) are added to the mounts' options;
# FERRITE_MODE=buffered or fsync-atomic reaches the preload target.
# The helper is built with gcc from pjdfstest.c alone (no autotools).
# Output: OUT (default /tmp/pjdfstest-out)/TARGET.log (prove -v) and a
# summary of failed checks per test file. Known differences under the
# preload library: files the scripts make with other programs (`dd`,
# `ln -s`, a shell redirection: these are not preloaded and write into
# the directory the mount covers between two helper processes, so the
# checks after them fail), the EFAULT checks with the address 0xdeadc0de
# (the library reads a path where the kernel would fault: the helper
# dies), and FIFO opens by a helper that switched to another user (it
# opens through the owner's mount, private to root: EACCES); see
# docs/PRELOAD.md, "Mappings", and docs/TESTING.md.
set -euo pipefail
src=${1:?usage: scripts/pjdfstest.sh PJDFSTEST_CHECKOUT [tmpfs|fuse|fuse-dev|preload ...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tmpfs fuse fuse-dev preload)
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/pjdfstest-out}
work=$(mktemp -d /tmp/pjdfstest-work.XXXXXX)
mkdir -p "$out"
command -v prove >/dev/null || apt-get install -y perl
command -v gcc >/dev/null || apt-get install -y gcc

cargo build --release -p ferrite-cli -p ferrite-c --manifest-path "$repo/Cargo.toml"
# Cargo puts the binaries under CARGO_TARGET_DIR when that is set.
target=${CARGO_TARGET_DIR:-$repo/target}
ferrite=$target/release/ferrite
lib=$target/release/libferrite.so

# The helper, configured for Linux by hand.
defs="FACCESSAT FCHMODAT FCHOWNAT FSTATAT LINKAT MKDIRAT MKFIFOAT MKNODAT OPENAT POSIX_FALLOCATE
READLINKAT RENAMEAT SYMLINKAT UNLINKAT UTIMENSAT STRUCT_STAT_ST_ATIM STRUCT_STAT_ST_MTIM
STRUCT_STAT_ST_CTIM SYS_SYSMACROS_H"
for d in $defs; do echo "#define HAVE_$d 1"; done > "$work/config.h"
gcc -O2 -D_GNU_SOURCE -I "$work" -include "$work/config.h" -o "$work/pjdfstest.bin" "$src/pjdfstest.c"

# The suite finds its helper as `pjdfstest` in a parent of its tests.
suite() { # $1: target; sets $work/$1/tests and its helper
    mkdir -p "$work/$1"
    cp -r "$src/tests" "$work/$1/"
    cp "$work/pjdfstest.bin" "$work/$1/pjdfstest"
}

summary() { # $1: log
    awk '/^\/.*\.t \.\./ { f = $1 } /^not ok/ && !/# TODO/ { n[f]++ } END { for (k in n) print n[k], k }' "$1" | sort -k2
}

run() { # $1: target, $2: directory to run in
    (cd "$2" && prove -v -r "$work/$1/tests" > "$out/$1.log" 2>&1) || true
    echo "== $1: $(tail -n 1 "$out/$1.log")"
    summary "$out/$1.log" | sed 's/^/   /'
}

for t in "${targets[@]}"; do
    suite "$t"
    case $t in
    tmpfs)
        mkdir -p "$work/mnt-tmpfs"
        mount -t tmpfs tmpfs "$work/mnt-tmpfs"
        run tmpfs "$work/mnt-tmpfs"
        umount "$work/mnt-tmpfs"
        ;;
    fuse | fuse-dev)
        # allow_other implies auto_unmount, with which `auto` picks
        # /dev/fuse: ask for io_uring by name where the kernel allows it.
        transport=dev
        if [ "$t" = fuse ] && [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
            transport=uring
        fi
        mkdir -p "$work/mnt-$t"
        "$ferrite" mount --daemon -o "allow_other,transport=$transport${MOUNT_OPTIONS:+,$MOUNT_OPTIONS}" "/dev/shm/pjdfstest-$t.pool" "$work/mnt-$t"
        run "$t" "$work/mnt-$t"
        "$ferrite" umount "$work/mnt-$t"
        ;;
    preload)
        mkdir -p "$work/root"
        mv "$work/preload/pjdfstest" "$work/preload/pjdfstest.bin"
        # The test scripts' shell is not preloaded, so its own `cd` cannot
        # enter a directory of the pool: `cd` and `pwd` become functions
        # that keep the directory in PJD_CWD, and each helper process
        # enters it through a preloaded shell, which hands the pool over
        # to the helper at its exec (docs/PRELOAD.md, "Processes").
        cat >> "$work/preload/tests/misc.sh" <<'EOF'

PJD_CWD=$(command pwd)
export PJD_CWD
cd() { case "$1" in /*) PJD_CWD=$1 ;; *) PJD_CWD=$PJD_CWD/$1 ;; esac; export PJD_CWD; }
pwd() { echo "$PJD_CWD"; }
EOF
        cat > "$work/preload/pjdfstest" <<EOF
#!/bin/sh
export LD_PRELOAD=$lib FERRITE_POOL=/dev/shm/pjdfstest-preload.pool FERRITE_ROOT=$work/root
exec /bin/sh -c 'cd "\$PJD_CWD" && exec $work/preload/pjdfstest.bin "\$@"' sh "\$@"
EOF
        chmod +x "$work/preload/pjdfstest"
        run preload "$work/root"
        ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
    esac
done
rm -rf "$work" /dev/shm/pjdfstest-*.pool
