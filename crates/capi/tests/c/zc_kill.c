/*
 * zc_kill.c: a program that holds views and unpatched patch buffers while it
 * rewrites a file by patches and writes, until it is killed (tests/zc.rs
 * kills it with SIGKILL at a random moment and checks the pool).
 *
 *   zc_kill handle POOL SEED    the C API on a handle of its own (the pool
 *                               is formatted if it does not exist)
 *   zc_kill preload ROOT SEED   under the preload library: open(2), the
 *                               preload handle, and mmap views too
 *
 * The file "f" is always 64 KiB of one byte value: every change replaces
 * all of it in one atomic call (a patch of a whole buffer at offset 0, or
 * one pwrite), so after any kill it must still be uniform. Every view the
 * program takes must be uniform too (a snapshot, never a torn one); if one
 * is not, the program exits with status 3. After its first round it prints
 * "running" so that the kill lands while views and buffers are live.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ferrite.h"

enum { FILE_BYTES = 64 * 1024, SLOTS = 4 };

static void die(const char *what) {
    fprintf(stderr, "zc_kill: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t rng;
static unsigned next(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (unsigned)((rng * 0x2545F4914F6CDD1DULL) >> 33);
}

static int uniform(const unsigned char *p, size_t n) {
    for (size_t i = 1; i < n; i++) {
        if (p[i] != p[0]) {
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: zc_kill handle POOL SEED | zc_kill preload ROOT SEED\n");
        return 2;
    }
    int preload = strcmp(argv[1], "preload") == 0;
    rng = strtoull(argv[3], NULL, 10) | 1;
    struct ferrite_fs *fs;
    int fd;
    if (preload) {
        fs = ferrite_preload_handle();
        if (fs == NULL) {
            die("ferrite_preload_handle");
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/f", argv[2]);
        fd = open(path, O_CREAT | O_RDWR, 0644);
    } else {
        fs = ferrite_mount(argv[2]);
        if (fs == NULL && errno == ENOENT) {
            fs = ferrite_format(argv[2], 64 << 20);
        }
        if (fs == NULL) {
            die("mount");
        }
        fd = ferrite_open(fs, "/f", O_CREAT | O_RDWR, 0644);
    }
    if (fd < 0) {
        die("open f");
    }
    static unsigned char block[FILE_BYTES];
    off_t size = preload ? lseek(fd, 0, SEEK_END) : ferrite_lseek(fs, fd, 0, SEEK_END);
    if (size != FILE_BYTES) {
        memset(block, 1, sizeof block);
        ssize_t k = preload ? pwrite(fd, block, FILE_BYTES, 0) : ferrite_pwrite(fs, fd, block, FILE_BYTES, 0);
        if (k != FILE_BYTES) {
            die("first write");
        }
    }
    const void *views[SLOTS] = {0};
    void *buffers[SLOTS] = {0};
    void *maps[SLOTS] = {0};
    for (unsigned round = 0;; round++) {
        unsigned slot = next() % SLOTS;
        unsigned char gen = (unsigned char)(1 + next() % 255);

        /* A view of the whole file, kept in a slot. */
        if (views[slot] && ferrite_unpeek(fs, views[slot]) != 0) {
            die("unpeek");
        }
        views[slot] = ferrite_peek(fs, fd, 0, FILE_BYTES);
        if (views[slot] == NULL) {
            die("peek");
        }
        if (!uniform(views[slot], FILE_BYTES)) {
            fprintf(stderr, "zc_kill: a torn view\n");
            return 3;
        }

        /* A mapping, read-only or private, kept in a slot. */
        if (preload) {
            if (maps[slot] && munmap(maps[slot], FILE_BYTES) != 0) {
                die("munmap");
            }
            int prot = next() % 2 ? PROT_READ : PROT_READ | PROT_WRITE;
            maps[slot] = mmap(NULL, FILE_BYTES, prot, prot & PROT_WRITE ? MAP_PRIVATE : MAP_SHARED, fd, 0);
            if (maps[slot] == MAP_FAILED) {
                die("mmap");
            }
            if (!uniform(maps[slot], FILE_BYTES)) {
                fprintf(stderr, "zc_kill: a torn mapping\n");
                return 3;
            }
            if (prot & PROT_WRITE) {
                memset(maps[slot], gen, FILE_BYTES / 2);
                memset((char *)maps[slot] + FILE_BYTES / 2, gen, FILE_BYTES / 2);
            }
        }

        /* A patch of the whole file, a buffer held unpatched, or a write. */
        switch (next() % 3) {
        case 0: {
            unsigned char *b = ferrite_patch_buffer(fs, FILE_BYTES);
            if (b == NULL) {
                die("patch_buffer");
            }
            memset(b, gen, FILE_BYTES);
            if (ferrite_patch(fs, fd, b, FILE_BYTES, 0) != 0) {
                die("patch");
            }
            break;
        }
        case 1:
            if (buffers[slot] && ferrite_free_buffer(fs, buffers[slot]) != 0) {
                die("free_buffer");
            }
            buffers[slot] = ferrite_patch_buffer(fs, FILE_BYTES);
            if (buffers[slot] == NULL) {
                die("patch_buffer");
            }
            memset(buffers[slot], gen, FILE_BYTES);
            break;
        default: {
            memset(block, gen, sizeof block);
            ssize_t k = preload ? pwrite(fd, block, FILE_BYTES, 0) : ferrite_pwrite(fs, fd, block, FILE_BYTES, 0);
            if (k != FILE_BYTES) {
                die("pwrite");
            }
        }
        }
        if (round == SLOTS * 2) {
            printf("running\n");
            fflush(stdout);
        }
    }
}
