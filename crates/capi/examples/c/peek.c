/*
 * peek.c: zero-copy reads and writes through Ferrite's C API.
 *
 * Formats a pool in /dev/shm (or at the path given as the first argument)
 * and shows:
 * - ferrite_peek: a read-only view of a file's bytes, in place in the pool,
 *   that keeps showing the bytes of its moment while the file is rewritten,
 *   truncated and removed, until ferrite_unpeek;
 * - ferrite_patch_buffer / ferrite_patch: a buffer of pool pages filled with
 *   ordinary stores, then made part of a file in one atomic commit, without
 *   a copy when the offset is page-aligned;
 * - the errors of misuse (a view released twice, a buffer patched twice or
 *   freed after its patch, an address that is not a buffer, a view past the
 *   end of a file or of a directory, a patch through a directory), which
 *   change nothing: the file and the pool's free space are as before.
 * Every line printed is deterministic, so tests compare it with a
 * transcript.
 *
 * Build (from the repository root, after `cargo build -p ferrite-c`):
 *   cc -Wall -Wextra -I crates/capi/include crates/capi/examples/c/peek.c \
 *      -L target/debug -lferrite -o peek
 *   LD_LIBRARY_PATH=target/debug ./peek
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ferrite.h"

/* A call that must succeed: on -1 (or NULL) print where and why, and stop. */
#define CHECK(expr)                                                                         \
    do {                                                                                    \
        if ((expr) < 0) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strerror(errno)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
#define CHECK_PTR(expr)                                                                     \
    do {                                                                                    \
        if ((expr) == NULL) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strerror(errno)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static const char *errname(int e) {
    switch (e) {
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    case EISDIR: return "EISDIR";
    case EFAULT: return "EFAULT";
    default: return "other";
    }
}

/* Print what a call that must fail gave: -1 or NULL, and errno's name. */
#define EXPECT_FAIL(what, expr)                                                      \
    do {                                                                             \
        errno = 0;                                                                   \
        int failed_ = (expr);                                                        \
        printf("%s: %s\n", what, failed_ ? errname(errno) : "succeeded (a bug)");    \
    } while (0)

/* The pool's free blocks: misuse must not change them. */
static unsigned long free_blocks(struct ferrite_fs *fs) {
    struct statvfs st;
    CHECK(ferrite_statvfs(fs, &st));
    return (unsigned long)st.f_bfree;
}

int main(int argc, char **argv) {
    char pool[256];
    if (argc > 1) {
        snprintf(pool, sizeof pool, "%s", argv[1]);
    } else {
        snprintf(pool, sizeof pool, "/dev/shm/ferrite-peek-example-%d.pool", (int)getpid());
    }
    unlink(pool);
    struct ferrite_fs *fs = ferrite_format(pool, 64 << 20);
    CHECK_PTR(fs);

    /* A file of three and a half pages: 'a' in every byte. */
    enum { FILE_BYTES = 3 * 4096 + 2048 };
    static char bytes[FILE_BYTES];
    memset(bytes, 'a', sizeof bytes);
    int fd = ferrite_open(fs, "/notes", O_CREAT | O_RDWR, 0644);
    CHECK(fd);
    CHECK(ferrite_pwrite(fs, fd, bytes, sizeof bytes, 0));

    /* peek: the bytes in place, from any offset. */
    const char *view = ferrite_peek(fs, fd, 4000, 200);
    CHECK_PTR(view);
    printf("view of [4000, 4200): '%c'..'%c'\n", view[0], view[199]);

    /* The file is rewritten, truncated and removed: the view keeps its bytes. */
    memset(bytes, 'b', sizeof bytes);
    CHECK(ferrite_pwrite(fs, fd, bytes, sizeof bytes, 0));
    CHECK(ferrite_ftruncate(fs, fd, 10));
    CHECK(ferrite_unlink(fs, "/notes"));
    int same = 1;
    for (int i = 0; i < 200; i++) {
        same &= view[i] == 'a';
    }
    printf("after rewrite, truncate and unlink the view still reads 'a': %s\n", same ? "yes" : "no");
    CHECK(ferrite_unpeek(fs, view));
    CHECK(ferrite_close(fs, fd));

    /* patch: fill pool pages with ordinary stores, then commit them into a file. */
    fd = ferrite_open(fs, "/log", O_CREAT | O_RDWR, 0644);
    CHECK(fd);
    memset(bytes, '-', sizeof bytes);
    CHECK(ferrite_pwrite(fs, fd, bytes, sizeof bytes, 0));
    char *buf = ferrite_patch_buffer(fs, 6000);
    CHECK_PTR(buf);
    memset(buf, 'P', 6000);
    CHECK(ferrite_patch(fs, fd, buf, 6000, 4096)); /* page-aligned: the pages become the file's */
    char back[FILE_BYTES + 1] = {0};
    CHECK(ferrite_pread(fs, fd, back, FILE_BYTES, 0));
    printf("after the patch at 4096: [4095]='%c' [4096]='%c' [10095]='%c' [10096]='%c'\n", back[4095], back[4096],
           back[10095], back[10096]);
    buf = ferrite_patch_buffer(fs, 10);
    CHECK_PTR(buf);
    memcpy(buf, "0123456789", 10);
    CHECK(ferrite_patch(fs, fd, buf, 10, 100)); /* not aligned: copied as by a write */
    CHECK(ferrite_pread(fs, fd, back, 12, 99));
    back[12] = 0;
    printf("after the patch at 100: \"%s\"\n", back);
    struct stat st;
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("size: %lld\n", (long long)st.st_size);

    /* Misuse: clear errors, and nothing changes. */
    unsigned long before = free_blocks(fs);
    char saved[FILE_BYTES];
    CHECK(ferrite_pread(fs, fd, saved, FILE_BYTES, 0));
    view = ferrite_peek(fs, fd, 0, 100);
    CHECK_PTR(view);
    CHECK(ferrite_unpeek(fs, view));
    EXPECT_FAIL("unpeek twice", ferrite_unpeek(fs, view) == -1);
    EXPECT_FAIL("peek past the end", ferrite_peek(fs, fd, FILE_BYTES - 10, 11) == NULL);
    EXPECT_FAIL("peek of 0 bytes", ferrite_peek(fs, fd, 0, 0) == NULL);
    int dir = ferrite_open(fs, "/", O_RDONLY | O_DIRECTORY, 0);
    CHECK(dir);
    EXPECT_FAIL("peek of a directory", ferrite_peek(fs, dir, 0, 1) == NULL);
    buf = ferrite_patch_buffer(fs, 4096);
    CHECK_PTR(buf);
    memset(buf, 'X', 4096);
    EXPECT_FAIL("patch through a directory", ferrite_patch(fs, dir, buf, 4096, 0) == -1);
    EXPECT_FAIL("patch of more than the buffer", ferrite_patch(fs, fd, buf, 8192, 0) == -1);
    char not_a_buffer[16] = {0};
    EXPECT_FAIL("patch of an address that is not a buffer", ferrite_patch(fs, fd, not_a_buffer, 16, 0) == -1);
    EXPECT_FAIL("free of an address that is not a buffer", ferrite_free_buffer(fs, not_a_buffer) == -1);
    EXPECT_FAIL("free of an address inside a buffer", ferrite_free_buffer(fs, buf + 1) == -1);
    printf("the buffer is still the caller's after those: %s\n", buf[4095] == 'X' ? "yes" : "no");
    CHECK(ferrite_free_buffer(fs, buf));
    EXPECT_FAIL("free twice", ferrite_free_buffer(fs, buf) == -1);
    CHECK(ferrite_pread(fs, fd, bytes, FILE_BYTES, 0));
    printf("the file is as before: %s\n", memcmp(bytes, saved, FILE_BYTES) == 0 ? "yes" : "no");
    printf("free space is as before: %s\n", free_blocks(fs) == before ? "yes" : "no");

    /* A buffer is patched once; afterwards it is not the caller's any more. */
    buf = ferrite_patch_buffer(fs, 4096);
    CHECK_PTR(buf);
    memset(buf, 'Y', 4096);
    CHECK(ferrite_patch(fs, fd, buf, 4096, 0));
    EXPECT_FAIL("patch twice", ferrite_patch(fs, fd, buf, 4096, 0) == -1);
    EXPECT_FAIL("free after patch", ferrite_free_buffer(fs, buf) == -1);
    memset(saved, 'Y', 4096);
    CHECK(ferrite_pread(fs, fd, bytes, FILE_BYTES, 0));
    printf("the file holds the first patch only: %s\n", memcmp(bytes, saved, FILE_BYTES) == 0 ? "yes" : "no");
    CHECK(ferrite_close(fs, dir));
    CHECK(ferrite_close(fs, fd));

    /* Unmount releases views and buffers still held. */
    view = ferrite_peek(fs, ferrite_open(fs, "/log", O_RDONLY, 0), 0, 10);
    CHECK_PTR(view);
    CHECK_PTR(ferrite_patch_buffer(fs, 8192));
    CHECK(ferrite_unmount(fs));
    fs = ferrite_mount(pool);
    CHECK_PTR(fs);
    fd = ferrite_open(fs, "/log", O_RDONLY, 0);
    CHECK(fd);
    CHECK(ferrite_pread(fs, fd, back, 4, 4094));
    back[4] = 0;
    printf("after unmount and mount, bytes [4094, 4098): \"%s\"\n", back);
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_unmount(fs));
    unlink(pool);
    return 0;
}
