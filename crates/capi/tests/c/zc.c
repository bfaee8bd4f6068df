/*
 * zc.c: checks of peek, patch and zero-copy mappings, run by tests/zc.rs.
 *
 *   zc handle POOL    the C API on a handle of its own (POOL is formatted)
 *   zc preload ROOT   under LD_PRELOAD=libferrite.so with FERRITE_ROOT=ROOT:
 *                     the program's own open(2) descriptors, the preload
 *                     handle, and mmap of Ferrite files
 *
 * Each check prints one line; the first failure prints what differed and
 * exits with status 1. Stores that must fault are made by a forked child,
 * whose death by SIGSEGV the parent checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferrite.h"

static struct ferrite_fs *fs;
static int preload;
static const char *base; /* POOL or ROOT */

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zc (%s): FAILED: ", preload ? "preload" : "handle");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
    va_end(ap);
    exit(1);
}

#define REQUIRE(cond, ...)       \
    do {                         \
        if (!(cond)) {           \
            fail(__VA_ARGS__);   \
        }                        \
    } while (0)

/* A call that must fail with errno `e` (or one of e, e2). */
#define MUST_FAIL(failed, e, e2, what)                                                          \
    do {                                                                                        \
        errno = 0;                                                                              \
        int failed_ = (failed);                                                                 \
        REQUIRE(failed_ && (errno == (e) || errno == (e2)), "%s: expected errno %d", what, e); \
        printf("ok: %s fails (errno %d)\n", what, errno);                                       \
    } while (0)

/* ---- file calls, through the handle or through libc under the library ---- */

static int xopen(const char *name, int flags) {
    char p[4096];
    if (preload) {
        snprintf(p, sizeof p, "%s/%s", base, name);
        return open(p, flags, 0644);
    }
    snprintf(p, sizeof p, "/%s", name);
    return ferrite_open(fs, p, flags, 0644);
}

static void xpwrite(int fd, const void *b, size_t n, off_t off) {
    ssize_t k = preload ? pwrite(fd, b, n, off) : ferrite_pwrite(fs, fd, b, n, off);
    REQUIRE(k == (ssize_t)n, "pwrite of %zu bytes at %lld", n, (long long)off);
}

static void xpread(int fd, void *b, size_t n, off_t off) {
    ssize_t k = preload ? pread(fd, b, n, off) : ferrite_pread(fs, fd, b, n, off);
    REQUIRE(k == (ssize_t)n, "pread of %zu bytes at %lld gave %zd", n, (long long)off, k);
}

static void xclose(int fd) {
    REQUIRE((preload ? close(fd) : ferrite_close(fs, fd)) == 0, "close");
}

static off_t xsize(int fd) {
    struct stat st;
    REQUIRE((preload ? fstat(fd, &st) : ferrite_fstat(fs, fd, &st)) == 0, "fstat");
    return st.st_size;
}

static unsigned long free_blocks(void) {
    struct statvfs st;
    REQUIRE((preload ? statvfs(base, &st) : ferrite_statvfs(fs, &st)) == 0, "statvfs");
    return (unsigned long)st.f_bfree;
}

static void fill(char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        b[i] = (char)(i * 7 + seed);
    }
}

/* A file `name` of `n` bytes filled by `fill(seed)`; returns its descriptor. */
static int make_file(const char *name, size_t n, unsigned seed) {
    int fd = xopen(name, O_CREAT | O_TRUNC | O_RDWR);
    REQUIRE(fd >= 0, "create %s", name);
    char *b = malloc(n);
    fill(b, n, seed);
    xpwrite(fd, b, n, 0);
    free(b);
    return fd;
}

/* Whether [p, p+n) equals fill(seed) from file offset `off`. */
static int holds(const char *p, size_t n, off_t off, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != (char)((off + i) * 7 + seed)) {
            return 0;
        }
    }
    return 1;
}

/* Run `f(arg)` in a forked child; return the signal it died of (0 if it exited). */
static int child_signal(void (*f)(void *), void *arg) {
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        /* No core dumps of the deliberate faults. */
        signal(SIGSEGV, SIG_DFL);
        f(arg);
        _exit(0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void store_to(void *p) {
    *(volatile char *)p = 'Z';
}

static void load_from(void *p) {
    (void)*(volatile char *)p;
}

/* ---- checks ------------------------------------------------------------ */

/* A view keeps the bytes of its moment while the file is rewritten,
 * truncated, punched and unlinked; its stores fault. */
static void isolation(void) {
    enum { N = 5 * 4096 + 300 };
    int fd = make_file("iso", N, 1);
    const char *v = ferrite_peek(fs, fd, 1000, N - 1000);
    REQUIRE(v != NULL, "peek");
    REQUIRE(holds(v, N - 1000, 1000, 1), "a fresh view holds the file's bytes");
    char *b = malloc(N);
    fill(b, N, 2);
    xpwrite(fd, b, N, 0);
    REQUIRE(holds(v, N - 1000, 1000, 1), "the view changed after a write");
    REQUIRE((preload ? ftruncate(fd, 10) : ferrite_ftruncate(fs, fd, 10)) == 0, "truncate");
    REQUIRE(holds(v, N - 1000, 1000, 1), "the view changed after a truncate");
    xclose(fd);
    if (preload) {
        char p[4096];
        snprintf(p, sizeof p, "%s/iso", base);
        REQUIRE(unlink(p) == 0, "unlink");
    } else {
        REQUIRE(ferrite_unlink(fs, "/iso") == 0, "unlink");
    }
    REQUIRE(holds(v, N - 1000, 1000, 1), "the view changed after close and unlink");
    printf("ok: a view keeps its bytes across write, truncate, close and unlink\n");
    int sig = child_signal(store_to, (void *)v);
    REQUIRE(sig == SIGSEGV, "a store through a view: the child died of signal %d, not SIGSEGV", sig);
    REQUIRE(holds(v, N - 1000, 1000, 1), "the view changed after the child's store");
    printf("ok: a store through a view faults (SIGSEGV)\n");
    REQUIRE(ferrite_unpeek(fs, v) == 0, "unpeek");
    free(b);
}

/* A patch at a page-aligned offset, one at an unaligned one, one that grows
 * the file; read back by pread and by a new view. */
static void patch_read_back(void) {
    enum { N = 4 * 4096 };
    int fd = make_file("patched", N, 3);
    char *expect = malloc(3 * N);
    fill(expect, N, 3);
    char *buf = ferrite_patch_buffer(fs, 6000);
    REQUIRE(buf != NULL, "patch_buffer");
    REQUIRE(((uintptr_t)buf & 4095) == 0, "a buffer is page-aligned");
    fill(buf, 6000, 9);
    memcpy(expect + 4096, buf, 6000);
    REQUIRE(ferrite_patch(fs, fd, buf, 6000, 4096) == 0, "patch at 4096");
    int sig = child_signal(store_to, buf);
    REQUIRE(sig == SIGSEGV, "a store to a patched buffer: signal %d", sig);
    buf = ferrite_patch_buffer(fs, 100);
    REQUIRE(buf != NULL, "patch_buffer");
    fill(buf, 100, 11);
    memcpy(expect + 333, buf, 77);
    REQUIRE(ferrite_patch(fs, fd, buf, 77, 333) == 0, "patch at 333");
    buf = ferrite_patch_buffer(fs, 2 * 4096);
    REQUIRE(buf != NULL, "patch_buffer");
    fill(buf, 2 * 4096, 13);
    memcpy(expect + N + 4096, buf, 5000);
    memset(expect + N, 0, 4096);
    REQUIRE(ferrite_patch(fs, fd, buf, 5000, N + 4096) == 0, "patch past the end");
    size_t size = N + 4096 + 5000;
    REQUIRE(xsize(fd) == (off_t)size, "size after a growing patch: %lld", (long long)xsize(fd));
    char *got = malloc(size);
    xpread(fd, got, size, 0);
    REQUIRE(memcmp(got, expect, size) == 0, "pread after patches");
    const char *v = ferrite_peek(fs, fd, 0, size);
    REQUIRE(v != NULL && memcmp(v, expect, size) == 0, "a view after patches");
    REQUIRE(ferrite_unpeek(fs, v) == 0, "unpeek");
    printf("ok: patches (aligned, unaligned, growing) read back by pread and peek\n");
    xclose(fd);
    free(got);
    free(expect);
}

/* Misuse: clear errors, and the file and the pool's free space unchanged. */
static void misuse(void) {
    enum { N = 3 * 4096 };
    int fd = make_file("misuse", N, 5);
    int ro = xopen("misuse", O_RDONLY);
    REQUIRE(ro >= 0, "open read-only");
    int dir = preload ? open(base, O_RDONLY | O_DIRECTORY) : ferrite_open(fs, "/", O_RDONLY | O_DIRECTORY, 0);
    REQUIRE(dir >= 0, "open the root directory");
    unsigned long before = free_blocks();

    const char *v = ferrite_peek(fs, fd, 0, N);
    REQUIRE(v != NULL, "peek");
    MUST_FAIL(ferrite_unpeek(fs, v + 1) == -1, EINVAL, EINVAL, "unpeek of an address inside a view");
    REQUIRE(ferrite_unpeek(fs, v) == 0, "unpeek");
    MUST_FAIL(ferrite_unpeek(fs, v) == -1, EINVAL, EINVAL, "unpeek twice");
    MUST_FAIL(ferrite_unpeek(fs, NULL) == -1, EFAULT, EFAULT, "unpeek of NULL");
    MUST_FAIL(ferrite_peek(fs, fd, N - 1, 2) == NULL, EINVAL, EINVAL, "a view past the end of the file");
    MUST_FAIL(ferrite_peek(fs, fd, N, 1) == NULL, EINVAL, EINVAL, "a view starting at the end of the file");
    MUST_FAIL(ferrite_peek(fs, fd, 0, 0) == NULL, EINVAL, EINVAL, "a view of 0 bytes");
    MUST_FAIL(ferrite_peek(fs, fd, -4096, 1) == NULL, EINVAL, EINVAL, "a view at a negative offset");
    MUST_FAIL(ferrite_peek(fs, dir, 0, 1) == NULL, EISDIR, EISDIR, "a view of a directory");
    MUST_FAIL(ferrite_peek(fs, 999, 0, 1) == NULL, EBADF, EBADF, "a view of a closed descriptor");
    MUST_FAIL(ferrite_patch_buffer(fs, 0) == NULL, EINVAL, EINVAL, "a buffer of 0 bytes");

    char *buf = ferrite_patch_buffer(fs, 4096);
    REQUIRE(buf != NULL, "patch_buffer");
    memset(buf, 'X', 4096);
    MUST_FAIL(ferrite_patch(fs, dir, buf, 4096, 0) == -1, EBADF, EISDIR, "patch into a directory");
    MUST_FAIL(ferrite_patch(fs, ro, buf, 4096, 0) == -1, EBADF, EBADF, "patch through a read-only descriptor");
    MUST_FAIL(ferrite_patch(fs, fd, buf, 4097, 0) == -1, EINVAL, EINVAL, "patch of more than the buffer");
    MUST_FAIL(ferrite_patch(fs, fd, buf, 0, 0) == -1, EINVAL, EINVAL, "patch of 0 bytes");
    MUST_FAIL(ferrite_patch(fs, fd, buf, 10, -1) == -1, EINVAL, EINVAL, "patch at a negative offset");
    char local[64] = {0};
    MUST_FAIL(ferrite_patch(fs, fd, local, 64, 0) == -1, EINVAL, EINVAL, "patch of a pointer that is not a buffer");
    MUST_FAIL(ferrite_patch(fs, fd, buf + 4096, 1, 0) == -1, EINVAL, EINVAL, "patch of a pointer past a buffer");
    MUST_FAIL(ferrite_patch(fs, fd, NULL, 1, 0) == -1, EFAULT, EFAULT, "patch of NULL");
    MUST_FAIL(ferrite_free_buffer(fs, local) == -1, EINVAL, EINVAL, "free of a pointer that is not a buffer");
    MUST_FAIL(ferrite_free_buffer(fs, (void *)v) == -1, EINVAL, EINVAL, "free of a released view");
    for (int i = 0; i < 4096; i++) {
        REQUIRE(buf[i] == 'X', "a failed patch changed the buffer");
    }
    REQUIRE(ferrite_free_buffer(fs, buf) == 0, "free_buffer");
    MUST_FAIL(ferrite_free_buffer(fs, buf) == -1, EINVAL, EINVAL, "free twice");
    int sig = child_signal(store_to, buf);
    REQUIRE(sig == SIGSEGV, "a store to a freed buffer: signal %d", sig);

    char *got = malloc(N);
    xpread(fd, got, N, 0);
    REQUIRE(holds(got, N, 0, 5), "misuse changed the file");
    REQUIRE(free_blocks() == before, "misuse changed the free space: %lu, was %lu", free_blocks(), before);
    printf("ok: after misuse the file and the free space are unchanged\n");

    buf = ferrite_patch_buffer(fs, 4096);
    REQUIRE(buf != NULL, "patch_buffer");
    memset(buf, 'Y', 4096);
    REQUIRE(ferrite_patch(fs, fd, buf, 4096, 4096) == 0, "patch");
    MUST_FAIL(ferrite_patch(fs, fd, buf, 4096, 0) == -1, EINVAL, EINVAL, "patch a buffer twice");
    MUST_FAIL(ferrite_free_buffer(fs, buf) == -1, EINVAL, EINVAL, "free after patch");
    xpread(fd, got, N, 0);
    REQUIRE(holds(got, 4096, 0, 5) && holds(got + 8192, 4096, 8192, 5), "the second patch changed the file");
    for (int i = 4096; i < 8192; i++) {
        REQUIRE(got[i] == 'Y', "the first patch is missing");
    }
    printf("ok: a buffer patches once\n");

    /* Calls of the general API on the preload handle are refused. */
    if (preload) {
        MUST_FAIL(ferrite_close(fs, fd) == -1, EINVAL, EINVAL, "a general call on the preload handle");
        MUST_FAIL(ferrite_unmount(fs) == -1, EINVAL, EINVAL, "unmount of the preload handle");
    }
    free(got);
    xclose(dir);
    xclose(ro);
    xclose(fd);
}

/* ---- mappings under the preload library ----------------------------------- */

/* Whether /proc/self/maps shows the pool file mapped at `addr`. */
static int maps_pool_at(const void *addr) {
    const char *pool = getenv("FERRITE_POOL");
    FILE *f = fopen("/proc/self/maps", "r");
    REQUIRE(f != NULL, "open /proc/self/maps");
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            found = strstr(line, pool) != NULL;
        }
    }
    fclose(f);
    return found;
}

static void child_reads_mapping(void *p) {
    /* The library's fork handler made the mapping a private copy. */
    if (!holds(p, 3 * 4096, 0, 21) || maps_pool_at(p)) {
        _exit(2);
    }
}

static void mappings(void) {
    enum { N = 3 * 4096 + 100 };
    int fd = make_file("mapped", N, 21);

    /* A read-only shared mapping: the pool's pages, the file at mmap time. */
    char *m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED, "mmap read-only");
    REQUIRE(holds(m, N, 0, 21), "a read-only mapping holds the file's bytes");
    for (int i = N; i < 4 * 4096; i++) {
        REQUIRE(m[i] == 0, "the mapping's last page past the end of the file reads zeros");
    }
    REQUIRE(maps_pool_at(m) && maps_pool_at(m + N - 1), "a read-only mapping maps the pool's pages (no copy)");
    printf("ok: a read-only mapping maps the pool's pages and reads the file\n");
    /* A read-only private mapping keeps the bytes of its mmap (POSIX
       leaves it open); a shared one follows later writes, as on Linux: it
       moves off the pool's pages onto the file's DRAM shadow. */
    char *snap = mmap(NULL, N, PROT_READ, MAP_PRIVATE, fd, 0);
    REQUIRE(snap != MAP_FAILED && maps_pool_at(snap), "mmap read-only private");
    char other[N];
    fill(other, N, 22);
    xpwrite(fd, other, N, 0);
    REQUIRE(holds(m, N, 0, 22), "a read-only shared mapping did not follow a later write");
    REQUIRE(!maps_pool_at(m), "a read-only shared mapping still maps the pool's pages after a write");
    REQUIRE(holds(snap, N, 0, 21), "a read-only private mapping followed a later write");
    REQUIRE(munmap(snap, N) == 0, "munmap");
    printf("ok: a read-only shared mapping follows later writes, a private one keeps its bytes\n");
    MUST_FAIL(mprotect(m, 4096, PROT_READ | PROT_WRITE) != 0, EACCES, EACCES, "mprotect of a read-only mapping to writable");
    REQUIRE(mprotect(m, 4096, PROT_READ) == 0, "mprotect to read-only");
    MUST_FAIL(mremap(m, N, 2 * N, MREMAP_MAYMOVE) == MAP_FAILED, EINVAL, EINVAL, "mremap of a zero-copy mapping");
    int sig = child_signal(store_to, m + 5);
    REQUIRE(sig == SIGSEGV, "a store through a read-only mapping: signal %d", sig);
    sig = child_signal(child_reads_mapping, m);
    REQUIRE(sig == 0, "a forked child reading the mapping: signal %d", sig);
    printf("ok: a forked child reads its copy of the mapping\n");

    /* munmap of the middle page keeps the rest; the whole range releases it. */
    REQUIRE(munmap(m + 4096, 4096) == 0, "munmap of the middle page");
    sig = child_signal(load_from, m + 4096);
    REQUIRE(sig == SIGSEGV, "a load from an unmapped page of a mapping: signal %d", sig);
    REQUIRE(holds(m, 4096, 0, 22) && holds(m + 8192, N - 8192, 8192, 22), "the pages left after a partial munmap");
    REQUIRE(munmap(m, 4096) == 0 && munmap(m + 8192, 8192) == 0, "munmap of the rest");
    REQUIRE(!maps_pool_at(m) && !maps_pool_at(m + 8192), "the pool is still mapped after the whole munmap");
    printf("ok: a partial munmap keeps the rest; the last page releases the mapping\n");

    /* A private writable mapping: stores stay private, the file unchanged. */
    fill(other, N, 23);
    xpwrite(fd, other, N, 0);
    m = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    REQUIRE(m != MAP_FAILED, "mmap private writable");
    REQUIRE(holds(m, N, 0, 23) && maps_pool_at(m), "a private mapping maps the pool's pages");
    memset(m + 10, 'Q', 5000);
    REQUIRE(msync(m, N, MS_SYNC) == 0, "msync of a private mapping");
    REQUIRE(m[10] == 'Q' && m[5009] == 'Q', "stores to a private mapping");
    char *got = malloc(N);
    xpread(fd, got, N, 0);
    REQUIRE(holds(got, N, 0, 23), "a private mapping's stores reached the file");
    int fd2 = xopen("mapped", O_RDONLY);
    char *again = mmap(NULL, N, PROT_READ, MAP_PRIVATE, fd2, 0);
    REQUIRE(again != MAP_FAILED && holds(again, N, 0, 23), "a second mapping saw the first one's private stores");
    REQUIRE(munmap(m, N) == 0 && munmap(again, N) == 0, "munmap");
    xpread(fd, got, N, 0);
    REQUIRE(holds(got, N, 0, 23), "a private mapping's stores reached the file after munmap");
    printf("ok: a private mapping's stores never reach the file\n");

    /* MAP_FIXED: a copy at the caller's address. */
    char *area = mmap(NULL, 6 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(area != MAP_FAILED, "reserve");
    m = mmap(area + 4096, N, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd2, 0);
    REQUIRE(m == area + 4096 && holds(m, N, 0, 23), "a MAP_FIXED mapping");
    REQUIRE(munmap(area, 6 * 4096) == 0, "munmap");
    printf("ok: a MAP_FIXED mapping holds the file's bytes\n");

    /* ferrite_unpeek of a mapping's address releases it as munmap does. */
    m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd2, 0);
    REQUIRE(m != MAP_FAILED, "mmap");
    REQUIRE(ferrite_unpeek(fs, m) == 0, "unpeek of a mapping");
    REQUIRE(!maps_pool_at(m), "unpeek of a mapping left the pool mapped");
    printf("ok: unpeek of a mapping releases it\n");

    /* A failed exec hands the pool over and takes it back: a mapping and a
     * peek made before it are private copies afterwards, still readable,
     * and no longer views (munmap unmaps the copy; unpeek knows nothing). */
    m = mmap(NULL, N, PROT_READ, MAP_PRIVATE, fd2, 0);
    REQUIRE(m != MAP_FAILED, "mmap");
    const char *v = ferrite_peek(fs, fd2, 5, 5000);
    REQUIRE(v != NULL, "peek");
    /* An executable file the kernel cannot run: the library hands the pool
     * over (it does not for a file it cannot execute at all). */
    char bad[] = "/tmp/ferrite-zc-noexec-XXXXXX";
    int bfd = mkstemp(bad);
    REQUIRE(bfd >= 0 && write(bfd, "\177ELF junk", 9) == 9 && fchmod(bfd, 0755) == 0, "make %s", bad);
    close(bfd);
    char *args[] = {bad, NULL};
    REQUIRE(execv(bad, args) == -1 && errno == ENOEXEC, "exec of a file the kernel cannot run");
    unlink(bad);
    REQUIRE(holds(m, N, 0, 23) && !maps_pool_at(m), "a mapping after a failed exec");
    REQUIRE(holds(v, 5000, 5, 23), "a peek after a failed exec");
    MUST_FAIL(ferrite_unpeek(fs, v) == -1, EINVAL, EINVAL, "unpeek of a peek made before a failed exec");
    REQUIRE(munmap(m, N) == 0, "munmap after a failed exec");
    xpread(fd2, got, N, 0);
    REQUIRE(holds(got, N, 0, 23), "the descriptor after a failed exec");
    printf("ok: a failed exec keeps mappings and peeks readable\n");
    free(got);
    xclose(fd2);
    xclose(fd);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "handle") != 0 && strcmp(argv[1], "preload") != 0)) {
        fprintf(stderr, "usage: zc handle POOL | zc preload ROOT\n");
        return 2;
    }
    preload = strcmp(argv[1], "preload") == 0;
    base = argv[2];
    if (preload) {
        fs = ferrite_preload_handle();
        REQUIRE(fs != NULL, "ferrite_preload_handle: is the program run under the preload library?");
    } else {
        unlink(base);
        fs = ferrite_format(base, 64 << 20);
        REQUIRE(fs != NULL, "format %s", base);
    }
    isolation();
    patch_read_back();
    misuse();
    if (preload) {
        mappings();
    } else {
        REQUIRE(ferrite_unmount(fs) == 0, "unmount");
    }
    printf("zc: every check passed\n");
    return 0;
}
