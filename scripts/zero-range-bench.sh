#!/usr/bin/env bash
# fallocate ZERO_RANGE against the pwrite of the same zeros that a program
# would make instead, on Ferrite (strict, through the preload library, the
# process owning a pool in /dev/shm), ext4 on a RAM-backed loop device and
# tmpfs (which has no ZERO_RANGE: "n/a"), for ranges of 4 KiB, 64 KiB and
# 1 MiB over written data. Prints the median of ROUNDS calls of each, in
# microseconds; docs/BENCHMARKS.md ("fallocate ZERO_RANGE") has results.
# Needs root (the loop device), gcc, mkfs.ext4, and a release build of the
# CLI and the preload library:
#   cargo build --release -p ferrite-cli -p ferrite-c
# Usage: scripts/zero-range-bench.sh [ROUNDS]   (default 41)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-41}
target=${CARGO_TARGET_DIR:-target}
ferrite=$target/release/ferrite
[ -x "$ferrite" ] || { echo "build first: cargo build --release -p ferrite-cli -p ferrite-c" >&2; exit 2; }
work=$(mktemp -d /tmp/zero-range-bench.XXXXXX)
pool=/dev/shm/zero-range-bench.$$.pool
image=/dev/shm/zero-range-bench.$$.ext4
cleanup() {
    mountpoint -q "$work/ext4" && umount "$work/ext4"
    rm -rf "$work" "$pool" "$image" /dev/shm/zero-range-bench.$$.tmpfs
}
trap cleanup EXIT
cat > "$work/zr.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/falloc.h>
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
    const char *path = argv[1], *label = argv[2];
    long len = atol(argv[3]);
    int rounds = atoi(argv[4]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 2; }
    char *data = malloc(len), *zero = calloc(1, len);
    memset(data, 7, len);
    double *fz = malloc(sizeof(double) * rounds), *wz = malloc(sizeof(double) * rounds);
    int supported = 1;
    for (int r = 0; r < rounds; r++) {
        if (pwrite(fd, data, len, 0) != len) { perror("pwrite"); return 2; }
        double t0 = now_us();
        if (fallocate(fd, FALLOC_FL_ZERO_RANGE, 0, len) != 0) {
            if (errno != EOPNOTSUPP) { perror("fallocate"); return 2; }
            supported = 0;
        }
        fz[r] = now_us() - t0;
        if (pwrite(fd, data, len, 0) != len) { perror("pwrite"); return 2; }
        t0 = now_us();
        if (pwrite(fd, zero, len, 0) != len) { perror("pwrite"); return 2; }
        wz[r] = now_us() - t0;
    }
    char check[64];
    if (pread(fd, check, 64, 0) != 64) { perror("pread"); return 2; }
    for (int i = 0; i < 64; i++) if (check[i]) { fprintf(stderr, "not zero\n"); return 1; }
    qsort(fz, rounds, sizeof(double), cmp);
    qsort(wz, rounds, sizeof(double), cmp);
    if (supported) printf("%-8s %8ld B  zero_range %8.1f us  pwrite zeros %8.1f us\n", label, len, fz[rounds / 2], wz[rounds / 2]);
    else printf("%-8s %8ld B  zero_range      n/a     pwrite zeros %8.1f us\n", label, len, wz[rounds / 2]);
    close(fd);
    unlink(path);
    return 0;
}
C
gcc -O2 -o "$work/zr" "$work/zr.c"
mkdir -p "$work/ext4" "$work/ferrite"
truncate -s 512M "$image"
mkfs.ext4 -q -b 4096 "$image"
mount -o loop "$image" "$work/ext4"
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(uname -r); $rounds rounds"
for len in 4096 65536 1048576; do
    "$ferrite" run --pool "$pool" --root "$work/ferrite" --no-mount -- "$work/zr" "$work/ferrite/f" ferrite "$len" "$rounds"
    "$work/zr" "$work/ext4/f" ext4 "$len" "$rounds"
    "$work/zr" /dev/shm/zero-range-bench.$$.tmpfs tmpfs "$len" "$rounds"
done
