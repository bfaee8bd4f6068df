/*
 * buffered.c: a buffered mount through Ferrite's C API.
 *
 * Formats a pool in /dev/shm (or at the path given as the first argument)
 * as a buffered mount (ferrite_format_with, FERRITE_MODE_BUFFERED), shows
 * what the mode calls and the xattr "user.ferrite.mode" answer there and
 * which calls and options are refused, and that ferrite_unmount makes
 * every call durable (written, unmounted at once, mounted again: all
 * there). Then a child process mounts the pool buffered
 * (ferrite_mount_with), makes a tree of changes, calls ferrite_fsync, makes
 * more changes, and dies without unmounting: a crash. The parent mounts
 * the pool again (which recovers it) and checks the buffered guarantee:
 * everything before the fsync is there, and of the changes after it a
 * prefix (in the order the calls returned), never a later change without
 * an earlier one. Finally a mount that is not buffered shows the modes
 * stored in the files again. Every line printed is deterministic (the
 * length of the prefix is not printed), so tests compare it with a
 * transcript.
 *
 * Build (from the repository root, after `cargo build -p ferrite-c`):
 *   cc -Wall -Wextra -I crates/capi/include crates/capi/examples/c/buffered.c \
 *      -L target/debug -lferrite -o buffered
 *   LD_LIBRARY_PATH=target/debug ./buffered
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferrite.h"

/* A call that must succeed: on -1 print where and why, and stop. */
#define CHECK(expr)                                                                    \
    do {                                                                               \
        if ((expr) < 0) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strerror(errno)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static const char *errname(int e) {
    switch (e) {
    case EINVAL: return "EINVAL";
    case ENOENT: return "ENOENT";
    case EFAULT: return "EFAULT";
    default: return "other";
    }
}

/* Print what a call that must fail gave: its result and errno's name. */
#define EXPECT_FAIL(what, expr)                                                        \
    do {                                                                               \
        errno = 0;                                                                     \
        long r_ = (long)(expr);                                                        \
        printf("%s: %ld %s\n", what, r_, r_ == -1 ? errname(errno) : "(no error)");    \
    } while (0)

/* The same for a call returning a handle (NULL on failure). */
#define EXPECT_NULL(what, expr)                                                        \
    do {                                                                               \
        errno = 0;                                                                     \
        struct ferrite_fs *h_ = (expr);                                                \
        printf("%s: %s %s\n", what, h_ ? "a handle" : "NULL", h_ ? "(no error)" : errname(errno)); \
        if (h_)                                                                        \
            ferrite_unmount(h_);                                                       \
    } while (0)

static const char *mode_name(int m) {
    switch (m) {
    case FERRITE_MODE_STRICT: return "strict";
    case FERRITE_MODE_FSYNC_ATOMIC: return "fsync-atomic";
    case FERRITE_MODE_BUFFERED: return "buffered";
    default: return "?";
    }
}

static void put(struct ferrite_fs *fs, const char *path, const char *text) {
    int fd;
    CHECK(fd = ferrite_open(fs, path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
    ssize_t n;
    CHECK(n = ferrite_pwrite(fs, fd, text, strlen(text), 0));
    CHECK(ferrite_close(fs, fd));
}

/* The contents of `path` (at most 63 bytes), or "(missing)". */
static const char *get(struct ferrite_fs *fs, const char *path, char buf[64]) {
    memset(buf, 0, 64);
    int fd = ferrite_open(fs, path, O_RDONLY, 0);
    if (fd < 0)
        return "(missing)";
    ssize_t n;
    CHECK(n = ferrite_pread(fs, fd, buf, 63, 0));
    buf[n] = 0;
    CHECK(ferrite_close(fs, fd));
    return buf;
}

/* How many changes the child makes after its fsync. */
#define AFTER 40

static struct ferrite_mount_options buffered_options(void) {
    struct ferrite_mount_options o;
    memset(&o, 0, sizeof o);
    o.mode = FERRITE_MODE_BUFFERED;
    return o;
}

/* The child: changes, an fsync, more changes, and death without unmount. */
static void crash_after_changes(const char *pool) {
    struct ferrite_mount_options o = buffered_options();
    o.buffered_lag_ns = 50 * 1000 * 1000; /* 50 ms: a crash has something to lose */
    struct ferrite_fs *fs = ferrite_mount_with(pool, &o);
    if (!fs) {
        fprintf(stderr, "child: mount: %s\n", strerror(errno));
        _exit(1);
    }
    CHECK(ferrite_mkdir(fs, "/tree", 0755));
    put(fs, "/tree/before", "written before the fsync");
    CHECK(ferrite_rename(fs, "/kept", "/tree/kept"));
    int fd;
    CHECK(fd = ferrite_open(fs, "/tree/before", O_RDONLY, 0));
    CHECK(ferrite_fsync(fs, fd)); /* everything above is durable now */
    CHECK(ferrite_close(fs, fd));
    /* After the fsync: file i is created, then "/last" names it. Each call
     * returned after the one before it, so a crash keeps a prefix. */
    for (int i = 0; i < AFTER; i++) {
        char path[32], text[32];
        snprintf(path, sizeof path, "/tree/after-%02d", i);
        snprintf(text, sizeof text, "change %02d", i);
        put(fs, path, text);
        put(fs, "/last", text);
    }
    _exit(0);
}

int main(int argc, char **argv) {
    const char *pool = argc > 1 ? argv[1] : "/dev/shm/ferrite-buffered-example.pool";
    unlink(pool);
    struct ferrite_mount_options o = buffered_options();
    struct ferrite_fs *fs = ferrite_format_with(pool, 64 << 20, &o);
    if (!fs) {
        fprintf(stderr, "format %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("default mode of a buffered mount: %s\n", mode_name(ferrite_get_default_mode(fs)));
    put(fs, "/kept", "kept across the unmount");
    printf("a file: %s\n", mode_name(ferrite_get_file_mode(fs, "/kept")));
    int fd;
    CHECK(fd = ferrite_open(fs, "/kept", O_RDWR, 0));
    char value[32] = {0};
    ssize_t n;
    CHECK(n = ferrite_fgetxattr(fs, fd, "user.ferrite.mode", value, sizeof value - 1));
    printf("as xattr: user.ferrite.mode=%.*s\n", (int)n, value);
    EXPECT_FAIL("fsetxattr user.ferrite.mode=buffered",
                ferrite_fsetxattr(fs, fd, "user.ferrite.mode", "buffered", 8, 0));
    EXPECT_FAIL("fset_file_mode buffered", ferrite_fset_file_mode(fs, fd, FERRITE_MODE_BUFFERED));
    EXPECT_FAIL("set_default_mode buffered", ferrite_set_default_mode(fs, FERRITE_MODE_BUFFERED));
    /* A stored mode may still be set: it applies on a mount that is not buffered. */
    CHECK(ferrite_fset_file_mode(fs, fd, FERRITE_MODE_FSYNC_ATOMIC));
    printf("after fset_file_mode fsync-atomic: %s\n", mode_name(ferrite_fget_file_mode(fs, fd)));
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_unmount(fs)); /* makes everything durable */

    /* Options that are refused. */
    struct ferrite_mount_options bad = buffered_options();
    bad.reserved[0] = 1;
    EXPECT_NULL("mount_with reserved set", ferrite_mount_with(pool, &bad));
    memset(&bad, 0, sizeof bad);
    bad.mode = 7;
    EXPECT_NULL("mount_with mode 7", ferrite_mount_with(pool, &bad));
    memset(&bad, 0, sizeof bad);
    bad.buffered_ops_max = 16;
    EXPECT_NULL("mount_with buffered_ops_max on a strict mount", ferrite_mount_with(pool, &bad));
    EXPECT_NULL("mount_with NULL path", ferrite_mount_with(NULL, &o));
    bad = buffered_options();
    bad.buffered_lag_ns = 60ull * 1000 * 1000 * 1000; /* a minute: more than the 10 s limit */
    EXPECT_NULL("mount_with a lag of a minute", ferrite_mount_with(pool, &bad));
    EXPECT_NULL("format_with a lag of a minute", ferrite_format_with("/dev/shm/ferrite-never-made.pool", 64 << 20, &bad));
    printf("the refused format made no file: %s\n", access("/dev/shm/ferrite-never-made.pool", F_OK) < 0 ? "yes" : "NO");

    /* Unmount drains: write, unmount at once, mount (not buffered), read. */
    fs = ferrite_mount_with(pool, &o);
    if (!fs) {
        fprintf(stderr, "mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    char buf[64];
    printf("/kept: %s\n", get(fs, "/kept", buf));
    put(fs, "/drained", "written just before ferrite_unmount");
    CHECK(ferrite_unmount(fs));
    fs = ferrite_mount_with(pool, NULL);
    if (!fs) {
        fprintf(stderr, "mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("/drained: %s\n", get(fs, "/drained", buf));
    CHECK(ferrite_unmount(fs));

    pid_t child = fork();
    if (child == 0)
        crash_after_changes(pool);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the child failed\n");
        return 1;
    }
    printf("the child changed the pool and died without unmounting\n");

    fs = ferrite_mount_with(pool, &o);
    if (!fs) {
        fprintf(stderr, "mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("/tree/before: %s\n", get(fs, "/tree/before", buf));
    printf("/tree/kept: %s\n", get(fs, "/tree/kept", buf));
    printf("/kept: %s\n", get(fs, "/kept", buf));
    /* What the pool holds of the changes after the fsync: k files, whether
     * the last of them has its text yet, and what /last says. */
    int k = 0, prefix = 1;
    while (k < AFTER) {
        char path[32];
        snprintf(path, sizeof path, "/tree/after-%02d", k);
        if (ferrite_access(fs, path, F_OK) < 0)
            break;
        k++;
    }
    int full = 1;
    for (int i = 0; i < AFTER; i++) {
        char path[32], text[32];
        snprintf(path, sizeof path, "/tree/after-%02d", i);
        snprintf(text, sizeof text, "change %02d", i);
        const char *got = get(fs, path, buf);
        if (i == k - 1 && strcmp(got, "") == 0)
            full = 0; /* created, not written yet */
        else if (i < k ? strcmp(got, text) != 0 : strcmp(got, "(missing)") != 0)
            prefix = 0;
    }
    char last[64];
    snprintf(last, sizeof last, "%s", get(fs, "/last", buf));
    /* The states the calls went through, in the order they returned: each
     * iteration creates file i, writes it, truncates (or creates) /last
     * and writes it. The pool must be in one of them. */
    int found = 0;
    char st_last[32] = "(missing)";
    int st_k = 0, st_full = 1;
    for (int i = -1; i < AFTER && !found; i++) {
        for (int step = 0; step < 4 && !found; step++) {
            if (i >= 0) {
                if (step == 0) {
                    st_k = i + 1;
                    st_full = 0;
                } else if (step == 1) {
                    st_full = 1;
                } else if (step == 2) {
                    st_last[0] = 0;
                } else {
                    snprintf(st_last, sizeof st_last, "change %02d", i);
                }
            }
            found = st_k == k && st_full == full && strcmp(st_last, last) == 0;
            if (i < 0)
                break;
        }
    }
    if (!found)
        prefix = 0;
    printf("the changes after the fsync: %s\n", prefix ? "a prefix of them" : "NOT A PREFIX");
    CHECK(ferrite_unmount(fs));

    /* Not buffered: the stored mode of /kept applies again. */
    fs = ferrite_mount(pool);
    if (!fs) {
        fprintf(stderr, "mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("not buffered: default %s, /tree/kept %s\n", mode_name(ferrite_get_default_mode(fs)),
           mode_name(ferrite_get_file_mode(fs, "/tree/kept")));
    CHECK(ferrite_unmount(fs));
    unlink(pool);
    printf("done\n");
    return 0;
}
