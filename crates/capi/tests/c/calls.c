/*
 * Calls every function the preload library intercepts, on files under the
 * directory given as argv[1], and prints what it saw: return values,
 * errno names, the attributes that do not depend on the file system
 * (type, permissions, links, size, owner), file contents and sorted
 * directory listings. Run once under the preload library (the directory
 * inside FERRITE_ROOT) and once on tmpfs: the two outputs must be equal.
 *
 * Built with -O2 -D_FORTIFY_SOURCE=2, so the fortified names (__read_chk,
 * __open_2, ...) are what the compiler emits; the 64-bit names and the
 * old __xstat family are called explicitly.
 */
#define _GNU_SOURCE
#define _LARGEFILE64_SOURCE
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>
#include <utime.h>

/* The pre-2.33 stat entry points, still exported by glibc for old binaries. */
extern int __xstat(int, const char *, struct stat *);
extern int __lxstat(int, const char *, struct stat *);
extern int __fxstat(int, int, struct stat *);
extern int __fxstatat(int, int, const char *, struct stat *, int);
extern int __xstat64(int, const char *, struct stat64 *);
extern int __fxstat64(int, int, struct stat64 *);
extern ssize_t __read_chk(int, void *, size_t, size_t);
extern ssize_t __pread64_chk(int, void *, size_t, off64_t, size_t);
extern ssize_t __readlink_chk(const char *, char *, size_t, size_t);
extern char *__getcwd_chk(char *, size_t, size_t);
extern int __open_2(const char *, int);
extern int __openat_2(int, const char *, int);

static char base[4096];
static size_t base_len;

static const char *ename(int e) {
    switch (e) {
    case 0: return "0";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EBADF: return "EBADF";
    case EACCES: return "EACCES";
    case EEXIST: return "EEXIST";
    case EXDEV: return "EXDEV";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ELOOP: return "ELOOP";
    case ERANGE: return "ERANGE";
    case ENODATA: return "ENODATA";
    case ENOTTY: return "ENOTTY";
    case EFAULT: return "EFAULT";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EFBIG: return "EFBIG";
    case ENXIO: return "ENXIO";
    case ESPIPE: return "ESPIPE";
    case EOVERFLOW: return "EOVERFLOW";
    case EBUSY: return "EBUSY";
    case EMLINK: return "EMLINK";
    default: return "E?";
    }
}

/* Print "what: rc errno" for a call that returns -1 on failure. */
static long say(const char *what, long rc) {
    int e = errno;
    if (rc < 0)
        printf("%s: -1 %s\n", what, ename(e));
    else
        printf("%s: %ld\n", what, rc);
    errno = 0;
    return rc;
}

/* A path under the test directory. */
static const char *P(const char *rel) {
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 4096, "%s/%s", base, rel);
    return b;
}

/* A path printed relative to the test directory. */
static const char *rel(const char *abs) {
    if (abs && strncmp(abs, base, base_len) == 0)
        return abs[base_len] ? abs + base_len : "/";
    return abs ? abs : "(null)";
}

static void show_stat(const char *what, int rc, const struct stat *st) {
    if (rc < 0) {
        say(what, rc);
        return;
    }
    /* A directory's size is the file system's own business. */
    long long size = S_ISDIR(st->st_mode) ? -1 : (long long)st->st_size;
    printf("%s: mode=%o nlink=%lu size=%lld uid=%u gid=%u\n", what, st->st_mode, (unsigned long)st->st_nlink, size,
           st->st_uid, st->st_gid);
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list_dir(const char *what, DIR *d) {
    char *names[256];
    int n = 0;
    struct dirent *e;
    if (!d) {
        say(what, -1);
        return;
    }
    while ((e = readdir(d)) != NULL && n < 256) {
        names[n] = strdup(e->d_name);
        /* mkstemp's random letters differ from run to run. */
        if ((strncmp(names[n], "tmp", 3) == 0 || strncmp(names[n], "dir", 3) == 0) && strlen(names[n]) >= 9)
            memcpy(names[n] + 3, "XXXXXX", 6);
        n++;
    }
    qsort(names, n, sizeof names[0], cmpstr);
    printf("%s:", what);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
}

static void cat(const char *what, const char *path) {
    char b[256];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
    if (n < 0) {
        say(what, -1);
    } else {
        b[n] = 0;
        printf("%s: [%s]\n", what, b);
    }
    if (fd >= 0)
        close(fd);
}

static int only_x(const struct dirent *e) { return e->d_name[0] == 'x'; }

int main(int argc, char **argv) {
    struct stat st;
    struct stat64 st64;
    char b[256];
    if (argc != 2)
        return 2;
    snprintf(base, sizeof base, "%s", argv[1]);
    base_len = strlen(base);
    setvbuf(stdout, NULL, _IOLBF, 0);
    umask(022);

    /* open family */
    /* Descriptor numbers are not compared: the preload library's own pool
       file holds a low number. */
    int fd = open(P("a"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    say("open creat", fd >= 0 ? 0 : -1);
    close(fd);
    fd = open(P("a"), O_RDWR);
    say("open existing", fd >= 0 ? 0 : -1);
    say("open excl", open(P("a"), O_CREAT | O_EXCL | O_RDWR, 0644));
    say("open missing", open(P("missing"), O_RDONLY));
    say("open64 missing", open64(P("missing"), O_RDONLY));
    say("__open_2 missing", __open_2(P("missing"), O_RDONLY));
    say("openat missing", openat(AT_FDCWD, P("missing"), O_RDONLY));
    say("openat64 missing", openat64(AT_FDCWD, P("missing"), O_RDONLY));
    say("__openat_2 missing", __openat_2(AT_FDCWD, P("missing"), O_RDONLY));
    say("open dir for write", open(base, O_WRONLY));
    say("open notdir", open(P("a/x"), O_RDONLY));
    int c = creat(P("c"), 0600);
    say("creat", c >= 0 ? 0 : -1);
    int c64 = creat64(P("c64"), 0600);
    say("creat64", c64 >= 0 ? 0 : -1);

    /* read and write */
    say("write", write(fd, "hello world\n", 12));
    say("lseek set", lseek(fd, 0, SEEK_SET));
    memset(b, 0, sizeof b);
    say("read", read(fd, b, sizeof b));
    printf("read got: [%s]\n", b);
    say("__read_chk at end", __read_chk(fd, b, 4, sizeof b));
    say("pwrite", pwrite(fd, "HELLO", 5, 0));
    say("pwrite64", pwrite64(fd, "W", 1, 6));
    memset(b, 0, sizeof b);
    say("pread", pread(fd, b, 12, 0));
    printf("pread got: [%s]\n", b);
    memset(b, 0, sizeof b);
    say("pread64", pread64(fd, b, 5, 6));
    printf("pread64 got: [%s]\n", b);
    say("__pread64_chk", __pread64_chk(fd, b, 3, 0, sizeof b));
    say("pread negative", pread(fd, b, 1, -1));
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    say("lseek end", lseek(fd, 0, SEEK_END));
    say("writev", writev(fd, iov, 2));
    char r1[3] = {0}, r2[4] = {0};
    struct iovec riov[2] = {{r1, 2}, {r2, 3}};
    say("preadv", preadv(fd, riov, 2, 10));
    printf("preadv got: [%s][%s]\n", r1, r2);
    say("pwritev", pwritev(fd, iov, 2, 16));
    say("pwritev2", pwritev2(fd, iov, 1, 20, 0));
    say("preadv2", preadv2(fd, riov, 1, 0, 0));
    say("readv", (lseek(fd, 0, SEEK_SET), readv(fd, riov, 2)));
    say("lseek64 cur", lseek64(fd, 0, SEEK_CUR));
    say("lseek bad whence", lseek(fd, 0, 42));
    say("read bad fd", read(9999, b, 1));
    say("write EFAULT", write(fd, NULL, 10));
    say("read EFAULT", read(fd, NULL, 10));
    cat("content a", P("a"));

    /* attributes */
    show_stat("stat", stat(P("a"), &st), &st);
    show_stat("lstat", lstat(P("a"), &st), &st);
    show_stat("fstat", fstat(fd, &st), &st);
    show_stat("fstatat", fstatat(AT_FDCWD, P("a"), &st, 0), &st);
    show_stat("fstatat empty", fstatat(fd, "", &st, AT_EMPTY_PATH), &st);
    show_stat("__xstat", __xstat(1, P("a"), &st), &st);
    show_stat("__lxstat", __lxstat(1, P("a"), &st), &st);
    show_stat("__fxstat", __fxstat(1, fd, &st), &st);
    show_stat("__fxstatat", __fxstatat(1, AT_FDCWD, P("a"), &st, 0), &st);
    say("__xstat64", __xstat64(1, P("a"), &st64));
    say("__fxstat64", __fxstat64(1, fd, &st64));
    say("stat64", stat64(P("a"), &st64));
    say("stat missing", stat(P("missing"), &st));
    struct statx sx;
    int rc = statx(AT_FDCWD, P("a"), 0, STATX_BASIC_STATS, &sx);
    printf("statx: %d mode=%o size=%llu\n", rc, sx.stx_mode, (unsigned long long)sx.stx_size);
    rc = statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
    printf("statx empty: %d size=%llu\n", rc, (unsigned long long)sx.stx_size);

    /* descriptor flags, locks, dup */
    say("F_GETFD", fcntl(fd, F_GETFD));
    say("F_SETFD", fcntl(fd, F_SETFD, FD_CLOEXEC));
    say("F_GETFD after", fcntl(fd, F_GETFD));
    say("F_GETFL", fcntl(fd, F_GETFL) & ~0100000 /* O_LARGEFILE */);
    say("F_SETFL append", fcntl(fd, F_SETFL, O_APPEND));
    say("F_GETFL append", fcntl(fd, F_GETFL) & ~0100000);
    say("F_SETFL back", fcntl(fd, F_SETFL, 0));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    say("F_SETLK", fcntl(fd, F_SETLK, &fl));
    fl.l_type = F_WRLCK;
    say("F_GETLK", fcntl(fd, F_GETLK, &fl));
    printf("F_GETLK type unlocked: %d\n", fl.l_type == F_UNLCK);
    fl.l_type = F_UNLCK;
    say("F_SETLKW unlock", fcntl(fd, F_SETLKW, &fl));
    say("flock ex", flock(fd, LOCK_EX));
    say("flock un", flock(fd, LOCK_UN));
    say("lockf", lockf(fd, F_TLOCK, 0));
    say("lockf unlock", lockf(fd, F_ULOCK, 0));
    int d1 = dup(fd);
    say("dup", d1 >= 0 ? 0 : -1);
    say("dup shares offset", (lseek(fd, 3, SEEK_SET), lseek(d1, 0, SEEK_CUR)));
    say("dup F_GETFD", fcntl(d1, F_GETFD));
    int d2 = dup2(fd, 100);
    say("dup2", d2);
    say("dup2 same", dup2(d2, d2));
    say("dup3", dup3(fd, 101, O_CLOEXEC));
    say("dup3 F_GETFD", fcntl(101, F_GETFD));
    say("dup3 same", dup3(101, 101, 0));
    int d3 = fcntl(fd, F_DUPFD, 200);
    say("F_DUPFD >=200", d3 >= 200 ? 0 : -1);
    int d4 = fcntl(fd, F_DUPFD_CLOEXEC, 300);
    say("F_DUPFD_CLOEXEC >=300", d4 >= 300 ? 0 : -1);
    say("close dup", close(d1));
    say("close again", close(d1));
    say("read after close", read(d1, b, 1));
    say("read through dup2", pread(100, b, 5, 0));
    say("close_range", close_range(100, 101, 0));
    say("read after close_range", pread(100, b, 1, 0));
    close(d3);
    close(d4);

    /* durability, size, space */
    say("fsync", fsync(fd));
    say("fdatasync", fdatasync(fd));
    say("sync_file_range", sync_file_range(fd, 0, 0, 0));
    say("syncfs", syncfs(fd));
    say("ftruncate", ftruncate(fd, 5));
    say("truncate", truncate(P("a"), 8));
    say("truncate missing", truncate(P("missing"), 8));
    say("ftruncate64", ftruncate64(fd, 7));
    say("truncate64", truncate64(P("a"), 7));
    say("fallocate", fallocate(fd, 0, 0, 8192));
    say("fallocate keep", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 16384));
    say("fallocate punch", fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096));
    printf("posix_fallocate: %d\n", posix_fallocate(fd, 0, 9000));
    printf("posix_fadvise: %d\n", posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL));
    printf("posix_fadvise bad: %d\n", posix_fadvise(fd, 0, 0, 99));
    show_stat("size after", fstat(fd, &st), &st);
    say("ftruncate back", ftruncate(fd, 12));

    /* mmap */
    char *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    printf("mmap private: %s\n", m == MAP_FAILED ? "failed" : "ok");
    if (m != MAP_FAILED) {
        printf("mmap bytes: [%.5s]\n", m);
        say("munmap", munmap(m, 4096));
    }
    char *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("mmap shared: %s\n", sh == MAP_FAILED ? "failed" : "ok");
    if (sh != MAP_FAILED) {
        memcpy(sh, "MMAP", 4);
        say("msync", msync(sh, 4096, MS_SYNC));
        memset(b, 0, sizeof b);
        pread(fd, b, 12, 0);
        printf("after msync: [%s]\n", b);
        char *sh2 = mremap(sh, 4096, 8192, MREMAP_MAYMOVE);
        printf("mremap: %s\n", sh2 == MAP_FAILED ? "failed" : "ok");
        if (sh2 != MAP_FAILED)
            sh = sh2;
        sh[4] = '!';
        say("munmap shared", munmap(sh, sh2 == MAP_FAILED ? 4096 : 8192));
    }
    cat("after munmap", P("a"));

    /* A shared mapping that starts inside the file and grows with mremap
       reaches the file's bytes after its old end (the library's shadow
       must cover the mapping's offset plus its new length). */
    int fr = open(P("grown"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    char three[3 * 4096];
    memset(three, 'x', 4096);
    memset(three + 4096, 'y', 4096);
    memset(three + 8192, 'z', 4096);
    say("grown pwrite", pwrite(fr, three, sizeof three, 0));
    char *g1 = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fr, 4096);
    printf("grown mmap: %s\n", g1 == MAP_FAILED ? "failed" : "ok");
    if (g1 != MAP_FAILED) {
        char *g2 = mremap(g1, 4096, 8192, MREMAP_MAYMOVE);
        printf("grown mremap: %s\n", g2 == MAP_FAILED ? "failed" : "ok");
        if (g2 != MAP_FAILED) {
            printf("grown bytes: [%c] [%c]\n", g2[0], g2[4096]);
            g2[4097] = '!';
            say("grown msync", msync(g2, 8192, MS_SYNC));
            say("grown munmap", munmap(g2, 8192));
        } else {
            munmap(g1, 4096);
        }
        memset(b, 0, sizeof b);
        say("grown pread", pread(fr, b, 3, 8192));
        printf("grown after: [%.3s]\n", b);
    }
    close(fr);

    /* A read-only MAP_SHARED mapping follows the file's later changes
       (LMDB reads its pages through one and writes them with pwrite), as
       a writable one does; a private one may or may not (POSIX leaves it
       open), so it is not printed after a change. Only bytes inside the
       file are read (past its end Linux raises SIGBUS). */
    int fm = open(P("follow"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    char page[8192];
    memset(page, 'a', sizeof page);
    say("follow pwrite", pwrite(fm, page, sizeof page, 0));
    char *ro = mmap(NULL, 3 * 4096, PROT_READ, MAP_SHARED, fm, 0);
    printf("follow mmap: %s\n", ro == MAP_FAILED ? "failed" : "ok");
    char *rw = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fm, 0);
    printf("follow mmap writable: %s\n", rw == MAP_FAILED ? "failed" : "ok");
    if (ro != MAP_FAILED && rw != MAP_FAILED) {
        printf("follow before: [%.3s] [%.3s]\n", ro, ro + 4096);
        say("follow pwrite 2", pwrite(fm, "BCD", 3, 4097));
        printf("follow after pwrite: [%.4s] [%.4s]\n", ro + 4096, rw + 4096);
        say("follow lseek", lseek(fm, 100, SEEK_SET));
        say("follow write", write(fm, "xyz", 3));
        printf("follow after write: [%.5s]\n", ro + 99);
        memcpy(rw + 10, "mapped", 6);
        struct iovec iv = {b, 6};
        say("follow readv sees the writable mapping", preadv(fm, &iv, 1, 10));
        printf("follow readv: [%.6s]\n", b);
        say("follow pwrite grows", pwrite(fm, "END", 3, 8192 + 5));
        printf("follow grown: [%.3s] zero before: %d\n", ro + 8192 + 5, ro[8192]);
        say("follow ftruncate", ftruncate(fm, 4096 + 2));
        printf("follow after ftruncate: [%.2s]\n", ro + 4096);
        say("follow ftruncate grow", ftruncate(fm, 8192));
        printf("follow after growing: %d %d\n", ro[4096 + 2], ro[8191]);
        say("follow truncate by path", truncate(P("follow"), 100));
        say("follow pwrite 3", pwrite(fm, "qq", 2, 50));
        printf("follow after truncate: [%.4s] %d\n", ro + 49, ro[99]);
        say("follow munmap", munmap(ro, 3 * 4096));
        say("follow munmap writable", munmap(rw, 8192));
    }
    close(fm);
    cat("follow file", P("follow"));

    /* the name space */
    say("mkdir", mkdir(P("d"), 0755));
    say("mkdir exists", mkdir(P("d"), 0755));
    say("mkdirat", mkdirat(AT_FDCWD, P("d/e"), 0700));
    int dfd = open(P("d"), O_RDONLY | O_DIRECTORY);
    say("open dir", dfd >= 0 ? 0 : -1);
    say("mkdirat rel", mkdirat(dfd, "f", 0755));
    say("openat rel", close(openat(dfd, "g", O_CREAT | O_WRONLY, 0644)));
    say("rmdir nonempty", rmdir(P("d")));
    say("unlinkat dir", unlinkat(dfd, "f", AT_REMOVEDIR));
    say("unlinkat file", unlinkat(dfd, "g", 0));
    say("rename", rename(P("c"), P("d/c2")));
    say("renameat", renameat(AT_FDCWD, P("d/c2"), dfd, "c3"));
    say("renameat2 noreplace", renameat2(AT_FDCWD, P("d/c3"), AT_FDCWD, P("a"), RENAME_NOREPLACE));
    say("renameat2 exchange", renameat2(AT_FDCWD, P("d/c3"), AT_FDCWD, P("c64"), RENAME_EXCHANGE));
    say("rename cross", rename(P("c64"), "/tmp/ferrite-never-here"));
    say("link", link(P("a"), P("hard")));
    say("linkat", linkat(AT_FDCWD, P("a"), dfd, "hard2", 0));
    show_stat("nlink", stat(P("a"), &st), &st);
    say("symlink", symlink("a", P("sym")));
    say("symlinkat", symlinkat("../a", dfd, "sym2"));
    memset(b, 0, sizeof b);
    say("readlink", readlink(P("sym"), b, sizeof b));
    printf("readlink got: [%s]\n", b);
    memset(b, 0, sizeof b);
    say("readlinkat", readlinkat(dfd, "sym2", b, sizeof b));
    printf("readlinkat got: [%s]\n", b);
    say("__readlink_chk", __readlink_chk(P("sym"), b, 1, sizeof b));
    say("readlink notlink", readlink(P("a"), b, sizeof b));
    cat("through symlink", P("d/sym2"));
    show_stat("lstat symlink", lstat(P("sym"), &st), &st);
    say("mknod fifo", mknod(P("fifo"), S_IFIFO | 0600, 0));
    say("mknodat", mknodat(dfd, "fifo2", S_IFIFO | 0600, 0));
    say("mkfifo", mkfifo(P("fifo3"), 0644));
    show_stat("fifo", stat(P("fifo3"), &st), &st);
    /* Opening a FIFO: the kernel's pipe behind it (under the preload
       library through the owner's mount, which the caller says is there
       by CALLS_SPECIAL_OPEN; without one the library answers ENXIO). */
    if (getenv("CALLS_SPECIAL_OPEN")) {
        say("open fifo writer without reader", open(P("fifo3"), O_WRONLY | O_NONBLOCK));
        int fr = open(P("fifo3"), O_RDONLY | O_NONBLOCK);
        say("open fifo reader nonblocking", fr >= 0 ? 0 : -1);
        int fw = open(P("fifo3"), O_WRONLY | O_NONBLOCK);
        say("open fifo writer with a reader", fw >= 0 ? 0 : -1);
        say("write fifo", write(fw, "pipe", 4));
        memset(b, 0, sizeof b);
        say("read fifo", read(fr, b, sizeof b));
        printf("fifo carried: [%s]\n", b);
        say("read empty fifo", read(fr, b, sizeof b));
        close(fw);
        close(fr);
        int frw = open(P("fifo3"), O_RDWR);
        say("open fifo read-write", frw >= 0 ? 0 : -1);
        close(frw);
        say("open fifo through a symlink", ({ symlink("fifo3", P("fifolink")); int q = open(P("fifolink"), O_RDONLY | O_NONBLOCK); if (q >= 0) close(q); unlink(P("fifolink")); q >= 0 ? 0 : -1; }));
    } else {
        printf("fifo opens: not run\n");
    }
    /* O_TMPFILE: a file without a name, named through the process's own
       descriptor link (any user) or by AT_EMPTY_PATH (root), once; with
       O_EXCL never. A mount through a FUSE library without the request
       (fuser) refuses O_TMPFILE, and its caller says so by
       CALLS_NO_TMPFILE. */
    if (!getenv("CALLS_NO_TMPFILE")) {
        say("tmpfile mkdir", mkdir(P("tf"), 0755));
        int t = open(P("tf"), O_TMPFILE | O_RDWR, 0640);
        say("tmpfile open", t >= 0 ? 0 : -1);
        say("tmpfile F_GETFL", fcntl(t, F_GETFL) & ~0100000 /* O_LARGEFILE */);
        say("tmpfile write", write(t, "nameless", 8));
        show_stat("tmpfile fstat", fstat(t, &st), &st);
        list_dir("tmpfile dir before", opendir(P("tf")));
        char pp[64];
        snprintf(pp, sizeof pp, "/proc/self/fd/%d", t);
        say("tmpfile linkat proc", linkat(AT_FDCWD, pp, AT_FDCWD, P("tf/named"), AT_SYMLINK_FOLLOW));
        show_stat("tmpfile fstat named", fstat(t, &st), &st);
        say("tmpfile F_GETFL named", fcntl(t, F_GETFL) & ~0100000);
        cat("tmpfile cat named", P("tf/named"));
        say("tmpfile unlink", unlink(P("tf/named")));
        say("tmpfile linkat again", linkat(AT_FDCWD, pp, AT_FDCWD, P("tf/again"), AT_SYMLINK_FOLLOW));
        close(t);
        int x = open(P("tf"), O_TMPFILE | O_WRONLY | O_EXCL, 0600);
        say("tmpfile excl open", x >= 0 ? 0 : -1);
        snprintf(pp, sizeof pp, "/proc/self/fd/%d", x);
        say("tmpfile excl linkat", linkat(AT_FDCWD, pp, AT_FDCWD, P("tf/x"), AT_SYMLINK_FOLLOW));
        close(x);
        if (geteuid() == 0) {
            int y = open(P("tf"), O_TMPFILE | O_RDWR, 0600);
            say("tmpfile write y", write(y, "by empty path", 13));
            say("tmpfile linkat empty path", linkat(y, "", AT_FDCWD, P("tf/y"), AT_EMPTY_PATH));
            close(y);
            cat("tmpfile cat y", P("tf/y"));
        }
        say("tmpfile read-only", open(P("tf"), O_TMPFILE | O_RDONLY, 0600));
        say("tmpfile with O_CREAT", open(P("tf"), O_TMPFILE | O_RDWR | O_CREAT, 0600));
        say("tmpfile on a file", open(P("a"), O_TMPFILE | O_RDWR, 0600));
        say("tmpfile missing", open(P("nope"), O_TMPFILE | O_RDWR, 0600));
        list_dir("tmpfile dir after", opendir(P("tf")));
    } else {
        printf("tmpfile: not run\n");
    }
    say("unlink", unlink(P("hard")));
    say("unlink missing", unlink(P("hard")));
    say("unlink dir", unlink(P("d")));

    /* permissions, owners, times */
    say("chmod", chmod(P("a"), 0600));
    say("fchmod", fchmod(fd, 0640));
    say("fchmodat", fchmodat(AT_FDCWD, P("a"), 0644, 0));
    say("chown", chown(P("a"), 1, 2));
    say("lchown", lchown(P("sym"), 3, 4));
    say("fchown", fchown(fd, -1, 5));
    say("fchownat", fchownat(AT_FDCWD, P("a"), 0, 0, 0));
    show_stat("after chown", stat(P("a"), &st), &st);
    show_stat("symlink owner", lstat(P("sym"), &st), &st);
    struct utimbuf ub = {1000, 2000};
    say("utime", utime(P("a"), &ub));
    stat(P("a"), &st);
    printf("times: %ld %ld\n", (long)st.st_atime, (long)st.st_mtime);
    struct timeval tv[2] = {{3000, 5}, {4000, 6}};
    say("utimes", utimes(P("a"), tv));
    stat(P("a"), &st);
    printf("times: %ld %ld %ld\n", (long)st.st_atime, (long)st.st_mtime, st.st_mtim.tv_nsec);
    say("lutimes", lutimes(P("sym"), tv));
    say("futimes", futimes(fd, tv));
    struct timespec ts[2] = {{5000, 0}, {0, UTIME_OMIT}};
    say("utimensat", utimensat(AT_FDCWD, P("a"), ts, 0));
    say("futimens", futimens(fd, ts));
    stat(P("a"), &st);
    printf("times: %ld %ld\n", (long)st.st_atime, (long)st.st_mtime);
    say("access", access(P("a"), R_OK | W_OK));
    say("access missing", access(P("missing"), F_OK));
    say("faccessat", faccessat(AT_FDCWD, P("a"), R_OK, 0));
    say("euidaccess", euidaccess(P("a"), W_OK));

    /* current directory */
    say("chdir", chdir(P("d")));
    memset(b, 0, sizeof b);
    printf("getcwd: %s\n", rel(getcwd(b, sizeof b)));
    printf("getcwd small: %s %s\n", getcwd(b, 2) ? "ok" : "NULL", ename(errno));
    char *cwd = get_current_dir_name();
    printf("get_current_dir_name: %s\n", rel(cwd));
    free(cwd);
    cat("relative read", "sym2");
    say("relative mkdir", mkdir("rel", 0755));
    show_stat("relative stat", stat("rel", &st), &st);
    say("relative ..", stat("../a", &st));
    say("fchdir", fchdir(dfd));
    printf("getcwd after fchdir: %s\n", rel(getcwd(b, sizeof b)));
    char *rp = realpath("sym2", NULL);
    printf("realpath: %s\n", rel(rp));
    free(rp);
    rp = canonicalize_file_name("../d/./rel/..");
    printf("canonicalize_file_name: %s\n", rel(rp));
    free(rp);
    char resolved[PATH_MAX];
    printf("realpath missing: %s\n", realpath("nothing/here", resolved) ? "found" : ename(errno));
    say("chdir back", chdir(base));
    say("chdir missing", chdir(P("missing")));

    /* directory streams */
    list_dir("opendir", opendir(P("d")));
    DIR *dir = opendir(P("d"));
    say("dirfd", dirfd(dir) >= 0 ? 0 : -1);
    int count = 0;
    long at = -1;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (count++ == 1)
            at = telldir(dir);
    }
    printf("entries: %d\n", count);
    seekdir(dir, at);
    int rest = 0;
    while (readdir(dir) != NULL)
        rest++;
    printf("after seekdir: %d\n", rest);
    rewinddir(dir);
    struct dirent64 *e64 = readdir64(dir);
    printf("readdir64 after rewind: %s\n", e64 ? "entry" : "none");
    struct dirent ent, *res;
    say("readdir_r", readdir_r(dir, &ent, &res));
    say("closedir", closedir(dir));
    int dfd2 = open(P("d"), O_RDONLY | O_DIRECTORY);
    list_dir("fdopendir", fdopendir(dfd2));
    struct dirent **names;
    int n = scandir(P("d"), &names, NULL, alphasort);
    printf("scandir: %d", n);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]->d_name);
        free(names[i]);
    }
    printf("\n");
    if (n >= 0)
        free(names);
    mkdir(P("x1"), 0755);
    n = scandir(base, &names, only_x, alphasort);
    printf("scandir filtered: %d\n", n);
    for (int i = 0; i < n; i++)
        free(names[i]);
    if (n >= 0)
        free(names);
    int gfd = open(P("d"), O_RDONLY | O_DIRECTORY);
    char dbuf[4096];
    ssize_t gn = getdents64(gfd, dbuf, sizeof dbuf);
    int gents = 0;
    for (ssize_t off = 0; off < gn;) {
        unsigned short reclen = *(unsigned short *)(dbuf + off + 16);
        gents++;
        off += reclen;
    }
    printf("getdents64 entries: %d\n", gents);
    printf("getdents64 at end: %ld\n", (long)getdents64(gfd, dbuf, sizeof dbuf));
    close(gfd);
    list_dir("opendir missing", opendir(P("missing")));

    /* stdio */
    FILE *f = fopen(P("s"), "w");
    printf("fopen w: %s\n", f ? "ok" : ename(errno));
    fprintf(f, "line one\nline %d\n", 2);
    printf("fileno is a descriptor: %d\n", fileno(f) > 2);
    fclose(f);
    f = fopen64(P("s"), "r");
    while (f && fgets(b, sizeof b, f))
        printf("fgets: %s", b);
    if (f) {
        fseek(f, 5, SEEK_SET);
        printf("ftell: %ld\n", ftell(f));
        fclose(f);
    }
    f = fopen(P("s"), "a+");
    fputs("line three\n", f);
    rewind(f);
    int lines = 0;
    while (fgets(b, sizeof b, f))
        lines++;
    printf("a+ lines: %d\n", lines);
    fclose(f);
    printf("fopen missing: %s\n", fopen(P("missing"), "r") ? "found" : ename(errno));
    int sfd = open(P("s"), O_RDONLY);
    f = fdopen(sfd, "r");
    printf("fdopen: %s fileno same: %d\n", f ? "ok" : "failed", f && fileno(f) == sfd);
    if (f) {
        fgets(b, sizeof b, f);
        printf("fdopen fgets: %s", b);
        fclose(f);
    }
    say("read after fclose", read(sfd, b, 1));

    /* temporary files */
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", base);
    int t = mkstemp(tmpl);
    say("mkstemp", t >= 0 ? 0 : -1);
    show_stat("mkstemp file", fstat(t, &st), &st);
    close(t);
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX.sfx", base);
    t = mkstemps(tmpl, 4);
    say("mkstemps", t >= 0 ? 0 : -1);
    printf("mkstemps suffix kept: %d\n", strcmp(tmpl + strlen(tmpl) - 4, ".sfx") == 0);
    close(t);
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", base);
    t = mkostemp(tmpl, O_CLOEXEC);
    say("mkostemp cloexec", fcntl(t, F_GETFD));
    close(t);
    snprintf(tmpl, sizeof tmpl, "%s/dirXXXXXX", base);
    char *td = mkdtemp(tmpl);
    show_stat("mkdtemp", td ? stat(td, &st) : -1, &st);
    snprintf(tmpl, sizeof tmpl, "%s/bad", base);
    say("mkstemp bad template", mkstemp(tmpl));

    /* extended attributes */
    say("setxattr", setxattr(P("a"), "user.k", "v1", 2, 0));
    say("setxattr create exists", setxattr(P("a"), "user.k", "v2", 2, XATTR_CREATE));
    say("lsetxattr", lsetxattr(P("a"), "user.l", "vv", 2, 0));
    say("fsetxattr", fsetxattr(fd, "user.f", "fff", 3, 0));
    memset(b, 0, sizeof b);
    say("getxattr", getxattr(P("a"), "user.k", b, sizeof b));
    printf("getxattr got: [%s]\n", b);
    say("getxattr size", getxattr(P("a"), "user.f", NULL, 0));
    say("getxattr small", getxattr(P("a"), "user.f", b, 1));
    say("lgetxattr", lgetxattr(P("a"), "user.l", b, sizeof b));
    say("fgetxattr", fgetxattr(fd, "user.f", b, sizeof b));
    say("getxattr missing", getxattr(P("a"), "user.none", b, sizeof b));
    say("listxattr", listxattr(P("a"), b, sizeof b));
    say("llistxattr", llistxattr(P("a"), b, sizeof b));
    say("flistxattr", flistxattr(fd, b, sizeof b));
    say("removexattr", removexattr(P("a"), "user.k"));
    say("lremovexattr", lremovexattr(P("a"), "user.l"));
    say("fremovexattr", fremovexattr(fd, "user.f"));
    say("listxattr empty", listxattr(P("a"), b, sizeof b));

    /* file-system figures: only success is comparable */
    struct statfs sfs;
    struct statvfs svfs;
    say("statfs", statfs(P("a"), &sfs));
    say("fstatfs", fstatfs(fd, &sfs));
    say("statvfs", statvfs(P("a"), &svfs));
    say("fstatvfs", fstatvfs(fd, &svfs));
    say("statfs missing", statfs(P("missing"), &sfs));

    /* copies and ioctl */
    int src = open(P("s"), O_RDONLY);
    int dst = open(P("copy"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    say("copy_file_range", copy_file_range(src, NULL, dst, NULL, 100, 0));
    {
        /* Linux's own checks: overlapping ranges of one file, a target
           opened O_APPEND or read-only, a source opened write-only, flags,
           and from past the source's end. */
        int rw = open(P("copy"), O_RDWR);
        loff_t a = 0, b = 10;
        say("copy_file_range overlapping", copy_file_range(rw, &a, rw, &b, 50, 0));
        a = 0, b = 60;
        say("copy_file_range same file apart", copy_file_range(rw, &a, rw, &b, 50, 0));
        printf("offsets after: %ld %ld\n", (long)a, (long)b);
        int app = open(P("copy"), O_WRONLY | O_APPEND);
        say("copy_file_range to O_APPEND", copy_file_range(src, NULL, app, NULL, 10, 0));
        int ro = open(P("copy"), O_RDONLY);
        say("copy_file_range to read-only", copy_file_range(src, NULL, ro, NULL, 10, 0));
        say("copy_file_range from write-only", copy_file_range(app, NULL, rw, NULL, 10, 0));
        say("copy_file_range flags", copy_file_range(src, NULL, rw, NULL, 10, 1));
        a = 1 << 20, b = 0;
        say("copy_file_range past the end", copy_file_range(src, &a, rw, &b, 10, 0));
        /* sendfile's: a target opened O_APPEND or read-only, a source
           opened write-only, from past the source's end. */
        off_t o = 0;
        say("sendfile to O_APPEND", sendfile(app, src, &o, 10));
        o = 0;
        say("sendfile to read-only", sendfile(ro, src, &o, 10));
        o = 0;
        say("sendfile from write-only", sendfile(rw, app, &o, 10));
        o = 1 << 20;
        say("sendfile past the end", sendfile(rw, src, &o, 10));
        printf("sendfile offset past the end: %ld\n", (long)o);
        close(ro);
        close(app);
        close(rw);
    }
    off_t so = 0;
    int dst2 = open(P("copy2"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    say("sendfile", sendfile(dst2, src, &so, 100));
    printf("sendfile offset: %ld\n", (long)so);
    close(dst2);
    cat("copy", P("copy"));
    cat("copy2", P("copy2"));
    struct termios tio;
    say("ioctl TCGETS", ioctl(src, TCGETS, &tio));
    close(src);
    close(dst);

    /* edge cases Linux defines, each on its own small tree */
    {
        mkdir(P("e"), 0755);
        mkdir(P("e/d"), 0755);
        mkdir(P("e/d/sub"), 0755);
        int f = open(P("e/f"), O_CREAT | O_RDWR, 0644);
        say("e write", write(f, "0123456789", 10));
        char eb[16];
        say("e pread negative", pread(f, eb, 4, -1));
        say("e pwrite negative", pwrite(f, eb, 4, -1));
        say("e lseek negative", lseek(f, -20, SEEK_CUR));
        say("e lseek bad whence", lseek(f, 0, 99));
        say("e lseek data past end", lseek(f, 100, SEEK_DATA));
        say("e lseek hole", lseek(f, 0, SEEK_HOLE));
        say("e ftruncate negative", ftruncate(f, -1));
        say("e truncate negative", truncate(P("e/f"), -1));
        say("e fallocate zero length", fallocate(f, 0, 0, 0));
        say("e fallocate negative", fallocate(f, 0, -1, 10));
        say("e fallocate punch without keep size", fallocate(f, FALLOC_FL_PUNCH_HOLE, 0, 10));
        say("e fallocate zero and punch",
            fallocate(f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10));
        say("e fallocate collapse", fallocate(f, FALLOC_FL_COLLAPSE_RANGE, 0, 4096));
        int r = open(P("e/f"), O_RDONLY);
        say("e write to read-only", write(r, "x", 1));
        say("e ftruncate read-only", ftruncate(r, 1));
        say("e fallocate read-only", fallocate(r, 0, 0, 10));
        int w = open(P("e/f"), O_WRONLY);
        say("e read from write-only", read(w, eb, 1));
        int a = open(P("e/f"), O_WRONLY | O_APPEND);
        say("e pwrite with O_APPEND", pwrite(a, "AB", 2, 0));
        say("e size after append-pwrite", lseek(a, 0, SEEK_END));
        say("e fallocate keep size past end", fallocate(f, FALLOC_FL_KEEP_SIZE, 100, 4096));
        struct stat est;
        show_stat("e stat after keep size", fstat(f, &est), &est);
        close(a);
        close(w);
        close(r);
        close(f);
        int t = open(P("e/f"), O_RDONLY | O_TRUNC);
        show_stat("e O_RDONLY|O_TRUNC", stat(P("e/f"), &est), &est);
        close(t);
        say("e open O_DIRECTORY on a file", open(P("e/f"), O_RDONLY | O_DIRECTORY));
        say("e open file with slash", open(P("e/f/"), O_RDONLY));
        say("e open dir for writing", open(P("e/d"), O_WRONLY));
        say("e creat over a dir", open(P("e/d"), O_CREAT | O_WRONLY, 0644));
        say("e open O_CREAT|O_EXCL existing", open(P("e/f"), O_CREAT | O_EXCL | O_WRONLY, 0644));
        say("e open O_CREAT|O_EXCL symlink", ({ symlink("nowhere", P("e/dangling")); open(P("e/dangling"), O_CREAT | O_EXCL | O_WRONLY, 0644); }));
        say("e open O_CREAT through dangling", ({ int k = open(P("e/dangling"), O_CREAT | O_WRONLY, 0644); if (k >= 0) close(k); k; }) >= 0 ? 0 : -1);
        say("e nowhere exists now", access(P("e/nowhere"), F_OK));
        say("e unlink a dir", unlink(P("e/d")));
        say("e rmdir a file", rmdir(P("e/f")));
        say("e rmdir non-empty", rmdir(P("e/d")));
        say("e rmdir dot", rmdir(P("e/d/sub/.")));
        say("e rmdir dotdot", rmdir(P("e/d/sub/..")));
        say("e mkdir existing", mkdir(P("e/d"), 0755));
        say("e mkdir with trailing slash", mkdir(P("e/new/"), 0755));
        say("e link a dir", link(P("e/d"), P("e/dl")));
        say("e link to existing", link(P("e/f"), P("e/dangling")));
        say("e rename dir into itself", rename(P("e/d"), P("e/d/sub/x")));
        say("e rename file over dir", rename(P("e/f"), P("e/d")));
        say("e rename dir over file", rename(P("e/d/sub"), P("e/f")));
        say("e rename dir over non-empty dir", ({ mkdir(P("e/d2"), 0755); rename(P("e/d2"), P("e/d")); }));
        say("e rename dir over empty dir", rename(P("e/d/sub"), P("e/d2")));
        say("e rename to itself", rename(P("e/f"), P("e/f")));
        say("e rename hard links of one file", ({ link(P("e/f"), P("e/g")); rename(P("e/f"), P("e/g")); }));
        show_stat("e f after", stat(P("e/f"), &est), &est);
        show_stat("e g after", stat(P("e/g"), &est), &est);
        say("e rename missing", rename(P("e/missing"), P("e/x")));
        say("e rename with trailing slash on a file", rename(P("e/f/"), P("e/x")));
        say("e readlink a file", readlink(P("e/f"), eb, sizeof eb));
        say("e symlink existing", symlink("x", P("e/f")));
        say("e symlink loop", ({ symlink("loop2", P("e/loop1")); symlink("loop1", P("e/loop2")); open(P("e/loop1"), O_RDONLY); }));
        say("e O_NOFOLLOW on a symlink", open(P("e/loop1"), O_RDONLY | O_NOFOLLOW));
        say("e chdir to a file", chdir(P("e/f")));
        say("e utimensat omit both", utimensat(AT_FDCWD, P("e/f"), (struct timespec[2]){{0, UTIME_OMIT}, {0, UTIME_OMIT}}, 0));
        say("e utimensat bad nsec", utimensat(AT_FDCWD, P("e/f"), (struct timespec[2]){{0, 2000000000}, {0, 0}}, 0));
        say("e futimens bad fd", futimens(9999, NULL));
        say("e fsync bad fd", fsync(9999));
        say("e close twice", ({ int k = open(P("e/f"), O_RDONLY); close(k); close(k); }));
        say("e dup2 to itself", ({ int k = open(P("e/f"), O_RDONLY); int rr = dup2(k, k); close(k); rr == k ? 0 : -1; }));
        say("e unlinkat dir without flag", unlinkat(AT_FDCWD, P("e/d2"), 0));
        say("e unlinkat file with AT_REMOVEDIR", unlinkat(AT_FDCWD, P("e/f"), AT_REMOVEDIR));
        say("e mknod regular", mknod(P("e/node"), S_IFREG | 0644, 0));
        show_stat("e node", stat(P("e/node"), &est), &est);
        say("e truncate a dir", truncate(P("e/d"), 0));
        say("e write 0 bytes to read-only", write(0 >= 0 ? ({ int k = open(P("e/f"), O_RDONLY); k; }) : 0, "", 0));
    }

    /* more edges: directories as files, descriptors of the wrong kind,
       names that end in a slash, empty names, links and counts */
    {
        mkdir(P("g"), 0755);
        mkdir(P("g/d"), 0755);
        int f = open(P("g/f"), O_CREAT | O_RDWR, 0644);
        say("g write", write(f, "abcdef", 6));
        char gb[64];
        int dfd = open(P("g/d"), O_RDONLY | O_DIRECTORY);
        say("g read a dir", read(dfd, gb, sizeof gb));
        say("g pread a dir", pread(dfd, gb, sizeof gb, 0));
        say("g write a dir", write(dfd, "x", 1));
        say("g ftruncate a dir", ftruncate(dfd, 0));
        say("g fallocate a dir", fallocate(dfd, 0, 0, 10));
        say("g openat with a file as dirfd", openat(f, "x", O_RDONLY));
        say("g mkdirat with a file as dirfd", mkdirat(f, "x", 0755));
        say("g openat relative to a dir fd", ({ int k = openat(dfd, "../f", O_RDONLY); if (k >= 0) close(k); k >= 0 ? 0 : -1; }));
        say("g open empty path", open("", O_RDONLY));
        say("g mkdir empty path", mkdir("", 0755));
        say("g unlink file with slash", unlink(P("g/f/")));
        say("g rename file to slash name", rename(P("g/f"), P("g/h/")));
        say("g rename file under a file", rename(P("g/f"), P("g/f/x")));
        say("g rename dir to missing slash name", rename(P("g/d"), P("g/d3/")));
        say("g rename back", rename(P("g/d3"), P("g/d")));
        say("g readlink zero buffer", ({ symlink("target", P("g/sl")); readlink(P("g/sl"), gb, 0); }));
        say("g symlink empty target", symlink("", P("g/empty")));
        say("g lchown symlink", lchown(P("g/sl"), -1, -1));
        say("g chown no change", chown(P("g/f"), -1, -1));
        say("g O_EXCL without O_CREAT", ({ int k = open(P("g/f"), O_RDONLY | O_EXCL); if (k >= 0) close(k); k >= 0 ? 0 : -1; }));
        say("g renameat2 noreplace onto existing", renameat2(AT_FDCWD, P("g/f"), AT_FDCWD, P("g/sl"), RENAME_NOREPLACE));
        say("g renameat2 exchange with missing", renameat2(AT_FDCWD, P("g/f"), AT_FDCWD, P("g/missing"), RENAME_EXCHANGE));
        say("g renameat2 both flags", renameat2(AT_FDCWD, P("g/f"), AT_FDCWD, P("g/sl"), RENAME_EXCHANGE | RENAME_NOREPLACE));
        struct stat gst;
        say("g link", link(P("g/f"), P("g/f2")));
        show_stat("g f linked", stat(P("g/f"), &gst), &gst);
        say("g unlink the first name", unlink(P("g/f")));
        show_stat("g fd after unlink", fstat(f, &gst), &gst);
        say("g read through the fd", pread(f, gb, sizeof gb, 0));
        show_stat("g d with a subdir", ({ mkdir(P("g/d/s"), 0755); stat(P("g/d"), &gst); }), &gst);
        say("g ftruncate grow", ftruncate(f, 10000));
        say("g read past the data", pread(f, gb, 10, 9995));
        say("g read at end", pread(f, gb, 10, 10000));
        say("g lseek hole after grow", lseek(f, 0, SEEK_HOLE));
        say("g lseek data in the hole", lseek(f, 8192, SEEK_DATA));
        struct iovec iv[2] = {{gb, 3}, {gb + 3, 3}};
        say("g readv zero count", readv(f, iv, 0));
        say("g preadv", preadv(f, iv, 2, 0));
        say("g writev negative count", writev(f, iv, -1));
        int pf = open(P("g/f2"), O_PATH);
        say("g read an O_PATH fd", read(pf, gb, 1));
        say("g fchmod an O_PATH fd", fchmod(pf, 0600));
        show_stat("g fstat an O_PATH fd", fstat(pf, &gst), &gst);
        close(pf);
        close(dfd);
        close(f);
    }

    /* more edges: permissions as root, modes through umask, extended
       attributes at their limits, times, the current directory moving */
    {
        mkdir(P("h"), 0777);
        struct stat hs;
        show_stat("h dir mode under umask", stat(P("h"), &hs), &hs);
        int f = open(P("h/f"), O_CREAT | O_WRONLY, 0777);
        show_stat("h file mode under umask", fstat(f, &hs), &hs);
        say("h fchmod 0", fchmod(f, 0));
        say("h access R_OK as root on mode 0", access(P("h/f"), R_OK));
        say("h access X_OK as root on mode 0", access(P("h/f"), X_OK));
        say("h open mode 0 for writing as root", ({ int k = open(P("h/f"), O_WRONLY); if (k >= 0) close(k); k >= 0 ? 0 : -1; }));
        say("h fchmod setuid", fchmod(f, 04755));
        show_stat("h setuid", fstat(f, &hs), &hs);
        say("h write as root keeps setuid", write(f, "x", 1));
        show_stat("h after write", fstat(f, &hs), &hs);
        say("h symlink", symlink("f", P("h/l")));
        say("h chmod through symlink", chmod(P("h/l"), 0640));
        show_stat("h target mode", stat(P("h/f"), &hs), &hs);
        say("h fchmodat nofollow", fchmodat(AT_FDCWD, P("h/l"), 0600, AT_SYMLINK_NOFOLLOW));
        char xb[256];
        say("h setxattr replace missing", setxattr(P("h/f"), "user.none", "v", 1, XATTR_REPLACE));
        say("h setxattr empty value", setxattr(P("h/f"), "user.empty", "", 0, 0));
        say("h getxattr empty value", getxattr(P("h/f"), "user.empty", xb, sizeof xb));
        say("h getxattr size query", ({ setxattr(P("h/f"), "user.v", "hello", 5, 0); getxattr(P("h/f"), "user.v", NULL, 0); }));
        say("h getxattr small buffer", getxattr(P("h/f"), "user.v", xb, 2));
        say("h listxattr size query", listxattr(P("h/f"), NULL, 0));
        say("h listxattr small buffer", listxattr(P("h/f"), xb, 3));
        say("h setxattr no namespace", setxattr(P("h/f"), "nonamespace", "v", 1, 0));
        say("h setxattr empty name", setxattr(P("h/f"), "user.", "v", 1, 0));
        say("h removexattr missing", removexattr(P("h/f"), "user.none"));
        say("h getxattr on a symlink (lget)", lgetxattr(P("h/l"), "user.v", xb, sizeof xb));
        say("h utimes now", utimes(P("h/f"), NULL));
        struct timespec tt[2] = {{1000000000, 5}, {1100000000, 7}};
        say("h utimensat set", utimensat(AT_FDCWD, P("h/f"), tt, 0));
        stat(P("h/f"), &hs);
        printf("h times: %ld.%09ld %ld.%09ld\n", (long)hs.st_atim.tv_sec, hs.st_atim.tv_nsec, (long)hs.st_mtim.tv_sec, hs.st_mtim.tv_nsec);
        struct timespec neg[2] = {{-5, 0}, {-1, 999999999}};
        say("h utimensat before 1970", utimensat(AT_FDCWD, P("h/f"), neg, 0));
        stat(P("h/f"), &hs);
        printf("h times before 1970: %ld.%09ld %ld.%09ld\n", (long)hs.st_atim.tv_sec, hs.st_atim.tv_nsec, (long)hs.st_mtim.tv_sec, hs.st_mtim.tv_nsec);
        close(f);
        char cwd0[4096];
        getcwd(cwd0, sizeof cwd0);
        mkdir(P("h/w"), 0755);
        say("h chdir", chdir(P("h/w")));
        say("h rename the cwd", rename(P("h/w"), P("h/w2")));
        char cb[4096];
        printf("h getcwd after rename: %s\n", rel(getcwd(cb, sizeof cb)));
        say("h create in the renamed cwd", ({ int k = open("inside", O_CREAT | O_WRONLY, 0644); if (k >= 0) close(k); k >= 0 ? 0 : -1; }));
        say("h stat it by its new path", stat(P("h/w2/inside"), &hs));
        say("h rmdir the cwd's parent", rmdir(P("h")));
        say("h unlink inside, rmdir the cwd", ({ unlink(P("h/w2/inside")); rmdir(P("h/w2")); }));
        printf("h getcwd of a removed cwd: %s %s\n", getcwd(cb, sizeof cb) ? "ok" : "NULL", ename(errno));
        say("h create in a removed cwd", open("nothere", O_CREAT | O_WRONLY, 0644));
        say("h stat dot of a removed cwd", stat(".", &hs));
        chdir(cwd0);
    }

    /* identity changes: a program that drops privileges (seteuid, setegid,
       setgroups, setfsuid) is checked, and owns what it creates, as its new
       identity. Only as root, and not where the caller says a mount
       private to root would refuse any other user outright (the FUSE
       test sets CALLS_NO_IDS). */
    if (geteuid() == 0 && !getenv("CALLS_NO_IDS")) {
        struct stat us;
        gid_t saved[64];
        int nsaved = getgroups(64, saved);
        mkdir(P("u"), 0755);
        chmod(P("u"), 0755);
        int k = open(P("u/secret"), O_CREAT | O_WRONLY, 0600);
        close(k);
        k = open(P("u/open"), O_CREAT | O_WRONLY, 0644);
        close(k);
        k = open(P("u/grp"), O_CREAT | O_WRONLY, 0640);
        close(k);
        chmod(P("u/grp"), 0640);
        chown(P("u/grp"), 0, 4242);
        mkdir(P("u/pub"), 0777);
        chmod(P("u/pub"), 0777);
        say("u setegid", setegid(65533));
        say("u seteuid", seteuid(65534));
        say("u open 0600 of root as nobody", ({ int q = open(P("u/secret"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u open 0644 for writing", ({ int q = open(P("u/open"), O_WRONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u open 0644 for reading", ({ int q = open(P("u/open"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u create in root's 0755 directory", open(P("u/new"), O_CREAT | O_WRONLY, 0644));
        say("u chmod root's file", chmod(P("u/open"), 0600));
        say("u chown root's file", chown(P("u/open"), 65534, 65533));
        say("u access W_OK", access(P("u/open"), W_OK));
        say("u unlink in root's directory", unlink(P("u/open")));
        k = open(P("u/pub/mine"), O_CREAT | O_WRONLY, 0600);
        say("u create in a 0777 directory", k >= 0 ? 0 : -1);
        close(k);
        show_stat("u created by nobody", stat(P("u/pub/mine"), &us), &us);
        say("u mkdir by nobody", mkdir(P("u/pub/d"), 0700));
        show_stat("u directory by nobody", stat(P("u/pub/d"), &us), &us);
        say("u open group file without the group", ({ int q = open(P("u/grp"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        gid_t g0 = 4242;
        say("u setgroups refused to nobody", setgroups(1, &g0));
        say("u seteuid back", seteuid(0));
        say("u setegid back", setegid(0));
        gid_t g = 4242;
        say("u setgroups", setgroups(1, &g));
        say("u setegid again", setegid(65533));
        say("u seteuid again", seteuid(65534));
        say("u open group file with the group", ({ int q = open(P("u/grp"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u chown own file to a group held", chown(P("u/pub/mine"), -1, 4242));
        show_stat("u after chown to a held group", stat(P("u/pub/mine"), &us), &us);
        say("u chown own file to a group not held", chown(P("u/pub/mine"), -1, 4343));
        say("u seteuid back again", seteuid(0));
        say("u setegid back again", setegid(0));
        say("u setgroups back", setgroups(nsaved > 0 ? nsaved : 0, saved));
        printf("u setfsuid to nobody: %d\n", setfsuid(65534));
        say("u open 0600 with fsuid nobody", ({ int q = open(P("u/secret"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        /* initgroups (root may: the effective uid is still 0) gives the
           group 4242 alone, with no other identity call after it. */
        printf("u setfsgid to nobody: %d\n", setfsgid(65533));
        say("u setgroups to none", setgroups(0, NULL));
        say("u open group file with no group", ({ int q = open(P("u/grp"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u initgroups", initgroups("nobody", 4242));
        say("u open group file after initgroups", ({ int q = open(P("u/grp"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u setgroups back after initgroups", setgroups(nsaved > 0 ? nsaved : 0, saved));
        printf("u setfsgid back: %d\n", setfsgid(0));
        printf("u setfsuid back: %d\n", setfsuid(0));
        say("u open 0600 with fsuid root", ({ int q = open(P("u/secret"), O_RDONLY); if (q >= 0) close(q); q >= 0 ? 0 : -1; }));
        say("u setresuid keeps saved root", setresuid(-1, 65534, 0));
        say("u mkdir in root's directory", mkdir(P("u/x"), 0755));
        say("u setresuid back", setresuid(-1, 0, -1));
        say("u mkdir as root again", mkdir(P("u/x"), 0755));
    } else {
        printf("identity changes: not run\n");
    }

    /* bad input */
    say("climb out of the directory", stat(P("../../../../../../../../../../proc/self/exe"), &st) == 0 ? 0 : -1);
    say("path too long component", ({
            char longname[400];
            memset(longname, 'n', 300);
            longname[300] = 0;
            open(P(longname), O_CREAT | O_WRONLY, 0644);
        }));
    say("close stdin-like bad fd", close(-1));
    /* A NULL path is EFAULT, also beside a path in the directory. */
    say("open NULL", open(NULL, O_RDONLY));
    say("link NULL to a path here", link(NULL, P("nullnew")));
    say("link a path here to NULL", link(P("a"), NULL));
    say("rename NULL to a path here", rename(NULL, P("nullnew")));
    say("rename a path here to NULL", rename(P("a"), NULL));
    say("renameat2 NULL", renameat2(AT_FDCWD, P("a"), AT_FDCWD, NULL, 0));
    say("linkat NULL", linkat(AT_FDCWD, NULL, AT_FDCWD, P("nullnew"), 0));
    say("symlink NULL target", symlink(NULL, P("nullnew")));
    say("symlink NULL path", symlink("t", NULL));
    say("stat NULL", stat(NULL, &st));
    say("unlink NULL", unlink(NULL));
    say("mkdir NULL", mkdir(NULL, 0755));
    /* A descriptor closed behind the library's back (a raw system call),
       whose number the kernel then gives to a kernel file: the number is
       the kernel file's. */
    int gone = open(P("a"), O_RDONLY);
    syscall(SYS_close, gone);
    int zero = open("/dev/zero", O_RDONLY);
    printf("kernel reused the number: %d\n", zero == gone);
    memset(b, 1, 4);
    say("read the kernel file", read(zero, b, 4));
    printf("kernel file bytes: %d %d\n", b[0], b[3]);
    close(zero);
    /* Every low number a program may ask for by itself is free of the
       library's own descriptors (a pool file, /dev/fuse, a shadow). */
    int library = 0;
    for (int n = 0; n < 64; n++) {
        char l[64], t[4096] = {0};
        snprintf(l, sizeof l, "/proc/self/fd/%d", n);
        if (readlink(l, t, sizeof t - 1) > 0 &&
            (strstr(t, ".pool") || strcmp(t, "/dev/fuse") == 0 || strstr(t, "memfd:ferrite")))
            library++;
    }
    printf("library descriptors below 64: %d\n", library);
    say("fstat bad fd", fstat(12345, &st));

    say("close", close(fd));
    say("close dfd", close(dfd));
    say("close c", close(c));
    say("close c64", close(c64));
    list_dir("final listing", opendir(base));
    return 0;
}
