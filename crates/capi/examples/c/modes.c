/*
 * modes.c: consistency modes through Ferrite's C API.
 *
 * Formats a pool in /dev/shm (or at the path given as the first argument),
 * makes fsync-atomic the default mode of new files, shows how a file's mode
 * is read and set (by path, by descriptor, and as the extended attribute
 * "user.ferrite.mode"), and which calls are refused. Then a child process
 * mounts the pool, writes to fsync-atomic files, makes some of the writes
 * durable (fsync, an O_SYNC write, ferrite_sync) and leaves others pending,
 * and dies without unmounting: a crash. The parent mounts the pool again
 * (which recovers it) and prints what each file holds: exactly what was
 * there at its last commit point. Every line printed is deterministic, so
 * tests compare it with a transcript.
 *
 * Build (from the repository root, after `cargo build -p ferrite-c`):
 *   cc -Wall -Wextra -I crates/capi/include crates/capi/examples/c/modes.c \
 *      -L target/debug -lferrite -o modes
 *   LD_LIBRARY_PATH=target/debug ./modes
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
    case EBADF: return "EBADF";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
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

static const char *mode_name(int m) {
    switch (m) {
    case FERRITE_MODE_STRICT: return "strict";
    case FERRITE_MODE_FSYNC_ATOMIC: return "fsync-atomic";
    default: return "?";
    }
}

/* Print a file's contents (at most 63 bytes) as "path: size N: text". */
static void show(struct ferrite_fs *fs, const char *path) {
    char buf[64] = {0};
    int fd;
    CHECK(fd = ferrite_open(fs, path, O_RDONLY, 0));
    struct stat st;
    CHECK(ferrite_fstat(fs, fd, &st));
    ssize_t n;
    CHECK(n = ferrite_pread(fs, fd, buf, sizeof buf - 1, 0));
    buf[n] = 0;
    printf("%s: %s, size %lld: \"%s\"\n", path, mode_name(ferrite_fget_file_mode(fs, fd)), (long long)st.st_size,
           buf);
    CHECK(ferrite_close(fs, fd));
}

static void put(struct ferrite_fs *fs, int fd, const char *text, off_t at) {
    ssize_t n;
    CHECK(n = ferrite_pwrite(fs, fd, text, strlen(text), at));
}

/* The child: writes, commits some of them, and dies without unmounting. */
static void crash_after_writes(const char *pool) {
    struct ferrite_fs *fs = ferrite_mount(pool);
    if (!fs) {
        fprintf(stderr, "child: mount: %s\n", strerror(errno));
        _exit(1);
    }
    CHECK(ferrite_set_default_mode(fs, FERRITE_MODE_FSYNC_ATOMIC));
    int fd;

    /* ferrite_sync commits every file (so it comes first here). */
    CHECK(fd = ferrite_open(fs, "/by-sync", O_CREAT | O_WRONLY, 0644));
    put(fs, fd, "committed by ferrite_sync", 0);
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_sync(fs));

    /* Committed by fsync, then changed again without a commit point. */
    CHECK(fd = ferrite_open(fs, "/synced", O_RDWR, 0));
    put(fs, fd, "second version", 0);
    CHECK(ferrite_fsync(fs, fd));
    put(fs, fd, "THIRD", 0);
    CHECK(ferrite_ftruncate(fs, fd, 3));
    CHECK(ferrite_close(fs, fd));

    /* Every write through an O_SYNC descriptor is a commit point. */
    CHECK(fd = ferrite_open(fs, "/osync", O_CREAT | O_WRONLY | O_SYNC, 0644));
    put(fs, fd, "written with O_SYNC", 0);
    CHECK(ferrite_close(fs, fd));

    /* Created (a strict namespace operation), written, never committed. */
    CHECK(fd = ferrite_open(fs, "/never-synced", O_CREAT | O_WRONLY, 0644));
    put(fs, fd, "lost in the crash", 0);
    CHECK(ferrite_close(fs, fd));

    /* A strict file is durable at every call. */
    CHECK(fd = ferrite_open(fs, "/strict", O_WRONLY, 0));
    put(fs, fd, "strict: durable at once", 0);
    CHECK(ferrite_close(fs, fd));

    /* Die without ferrite_unmount: the pool is left as a crash leaves it. */
    _exit(0);
}

int main(int argc, char **argv) {
    const char *pool = argc > 1 ? argv[1] : "/dev/shm/ferrite-modes-example.pool";
    unlink(pool);
    struct ferrite_fs *fs = ferrite_format(pool, 64 << 20);
    if (!fs) {
        fprintf(stderr, "format %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("default mode after format: %s\n", mode_name(ferrite_get_default_mode(fs)));
    CHECK(ferrite_set_default_mode(fs, FERRITE_MODE_FSYNC_ATOMIC));
    printf("default mode now: %s\n", mode_name(ferrite_get_default_mode(fs)));
    EXPECT_FAIL("set_default_mode 7", ferrite_set_default_mode(fs, 7));

    int fd;
    CHECK(fd = ferrite_open(fs, "/synced", O_CREAT | O_RDWR, 0644));
    printf("new file: %s\n", mode_name(ferrite_get_file_mode(fs, "/synced")));
    put(fs, fd, "first version", 0);
    CHECK(ferrite_fsync(fs, fd));
    char value[32] = {0};
    ssize_t n;
    CHECK(n = ferrite_fgetxattr(fs, fd, "user.ferrite.mode", value, sizeof value - 1));
    printf("as xattr: user.ferrite.mode=%.*s\n", (int)n, value);
    CHECK(ferrite_fset_file_mode(fs, fd, FERRITE_MODE_STRICT));
    printf("after fset_file_mode strict: %s\n", mode_name(ferrite_fget_file_mode(fs, fd)));
    CHECK(ferrite_fsetxattr(fs, fd, "user.ferrite.mode", "fsync-atomic", 12, 0));
    printf("after fsetxattr fsync-atomic: %s\n", mode_name(ferrite_fget_file_mode(fs, fd)));
    EXPECT_FAIL("fsetxattr user.ferrite.mode=bogus", ferrite_fsetxattr(fs, fd, "user.ferrite.mode", "bogus", 5, 0));
    EXPECT_FAIL("fremovexattr user.ferrite.mode", ferrite_fremovexattr(fs, fd, "user.ferrite.mode"));
    CHECK(ferrite_close(fs, fd));

    CHECK(ferrite_mkdir(fs, "/dir", 0755));
    printf("directory: %s\n", mode_name(ferrite_get_file_mode(fs, "/dir")));
    EXPECT_FAIL("set_file_mode of a directory", ferrite_set_file_mode(fs, "/dir", FERRITE_MODE_FSYNC_ATOMIC));
    EXPECT_FAIL("set_file_mode 2", ferrite_set_file_mode(fs, "/synced", 2));
    EXPECT_FAIL("get_file_mode of a missing file", ferrite_get_file_mode(fs, "/missing"));
    EXPECT_FAIL("fget_file_mode of a closed descriptor", ferrite_fget_file_mode(fs, fd));

    CHECK(fd = ferrite_open(fs, "/strict", O_CREAT | O_WRONLY, 0644));
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_set_file_mode(fs, "/strict", FERRITE_MODE_STRICT));
    printf("/strict: %s\n", mode_name(ferrite_get_file_mode(fs, "/strict")));
    CHECK(ferrite_symlink(fs, "synced", "/link"));
    printf("through a symlink: %s\n", mode_name(ferrite_get_file_mode(fs, "/link")));

    /* Without write permission the mode cannot be changed. */
    CHECK(ferrite_chmod(fs, "/strict", 0444));
    CHECK(ferrite_set_credentials(fs, 1000, 1000, 022));
    EXPECT_FAIL("set_file_mode without write permission",
                ferrite_set_file_mode(fs, "/strict", FERRITE_MODE_FSYNC_ATOMIC));
    CHECK(ferrite_set_credentials(fs, 0, 0, 0));
    CHECK(ferrite_chmod(fs, "/strict", 0644));
    CHECK(ferrite_unmount(fs));

    pid_t child = fork();
    if (child == 0)
        crash_after_writes(pool);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the child failed\n");
        return 1;
    }
    printf("the child wrote and died without unmounting\n");

    fs = ferrite_mount(pool);
    if (!fs) {
        fprintf(stderr, "mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("default mode after mount: %s\n", mode_name(ferrite_get_default_mode(fs)));
    show(fs, "/synced");
    show(fs, "/osync");
    show(fs, "/by-sync");
    show(fs, "/never-synced");
    show(fs, "/strict");
    CHECK(ferrite_unmount(fs));
    unlink(pool);
    printf("done\n");
    return 0;
}
