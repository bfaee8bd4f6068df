/*
 * hello.c: a tour of Ferrite's C API.
 *
 * Formats a pool in /dev/shm (or at the path given as the first argument),
 * makes directories and files, writes and reads them back, stats, lists a
 * directory, renames and unlinks, shows how errors come back (-1 and
 * errno), then unmounts, mounts the pool again and checks that everything
 * is still there. Every line it prints is deterministic (no inode numbers,
 * no clock times), so tests can compare it with a transcript.
 *
 * Build (from the repository root, after `cargo build -p ferrite-c`):
 *   cc -Wall -Wextra -I crates/capi/include crates/capi/examples/c/hello.c \
 *      -L target/debug -lferrite -o hello
 *   LD_LIBRARY_PATH=target/debug ./hello
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
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

/* The symbolic name of the errno values this program expects. */
static const char *errname(int e) {
    switch (e) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EBADF: return "EBADF";
    case ERANGE: return "ERANGE";
    case EFAULT: return "EFAULT";
    case EACCES: return "EACCES";
    case EBUSY: return "EBUSY";
    case EISDIR: return "EISDIR";
    case ENODATA: return "ENODATA";
    case EINVAL: return "EINVAL";
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

static const char *type_name(unsigned t) {
    switch (t) {
    case DT_REG: return "file";
    case DT_DIR: return "dir";
    case DT_LNK: return "symlink";
    case DT_FIFO: return "fifo";
    default: return "other";
    }
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct ferrite_dirent *)a)->name, ((const struct ferrite_dirent *)b)->name);
}

/* List a directory in name order (the engine's own order is its hash
 * order), two entries per ferrite_readdir call to exercise the cookies. */
static void list(struct ferrite_fs *fs, const char *dir) {
    struct ferrite_dirent all[64];
    size_t n = 0;
    int fd;
    CHECK(fd = ferrite_open(fs, dir, O_RDONLY | O_DIRECTORY, 0));
    uint64_t cookie = 0;
    for (;;) {
        ssize_t got;
        CHECK(got = ferrite_readdir(fs, fd, cookie, all + n, 2));
        if (got == 0)
            break;
        n += (size_t)got;
        cookie = all[n - 1].next_cookie;
        if (n + 2 > sizeof all / sizeof all[0])
            break;
    }
    CHECK(ferrite_close(fs, fd));
    qsort(all, n, sizeof all[0], by_name);
    printf("ls %s:", dir);
    for (size_t i = 0; i < n; i++)
        printf(" %s(%s)", all[i].name, type_name(all[i].type));
    printf("\n");
}

/* Read a whole small file and print it. */
static void cat(struct ferrite_fs *fs, const char *path) {
    char buf[256];
    int fd;
    ssize_t n;
    CHECK(fd = ferrite_open(fs, path, O_RDONLY, 0));
    CHECK(n = ferrite_read(fs, fd, buf, sizeof buf - 1));
    buf[n] = 0;
    CHECK(ferrite_close(fs, fd));
    printf("cat %s: %zd bytes: %s", path, n, buf);
    if (n == 0 || buf[n - 1] != '\n')
        printf("\n");
}

int main(int argc, char **argv) {
    char pool[256];
    if (argc > 1)
        snprintf(pool, sizeof pool, "%s", argv[1]);
    else
        snprintf(pool, sizeof pool, "/dev/shm/ferrite-hello-%ld.pool", (long)getpid());

    /* ---- format and fill ---- */
    struct ferrite_fs *fs = ferrite_format(pool, 64 << 20);
    if (!fs) {
        fprintf(stderr, "ferrite_format %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("formatted a 64 MiB pool\n");

    CHECK(ferrite_mkdir(fs, "/docs", 0755));
    CHECK(ferrite_mkdir(fs, "/docs/old", 0755));
    const char *msg = "Hello, persistent memory!\n";
    int fd;
    CHECK(fd = ferrite_open(fs, "/docs/hello.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644));
    printf("first descriptor: %d\n", fd);
    ssize_t n;
    CHECK(n = ferrite_write(fs, fd, msg, strlen(msg)));
    printf("wrote %zd bytes\n", n);
    CHECK(ferrite_fsync(fs, fd));
    CHECK(ferrite_close(fs, fd));
    cat(fs, "/docs/hello.txt");

    struct stat st;
    CHECK(ferrite_stat(fs, "/docs/hello.txt", &st));
    printf("stat: regular=%d mode=%o size=%lld nlink=%ld\n", S_ISREG(st.st_mode), st.st_mode & 07777,
           (long long)st.st_size, (long)st.st_nlink);

    /* Positional I/O, the shared offset of dup'ed descriptors, lseek. */
    CHECK(fd = ferrite_open(fs, "/docs/data.bin", O_CREAT | O_RDWR, 0600));
    CHECK(ferrite_pwrite(fs, fd, "tail", 4, 100));
    char four[5] = {0};
    CHECK(ferrite_pread(fs, fd, four, 4, 100));
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("pwrite at 100: size=%lld read back %s\n", (long long)st.st_size, four);
    int fd2;
    CHECK(fd2 = ferrite_dup(fs, fd));
    CHECK(ferrite_lseek(fs, fd, 96, SEEK_SET));
    off_t pos;
    CHECK(pos = ferrite_lseek(fs, fd2, 0, SEEK_CUR));
    printf("dup shares the offset: %lld\n", (long long)pos);
    CHECK(ferrite_dup2(fs, fd, 50));
    CHECK(pos = ferrite_lseek(fs, 50, 0, SEEK_END));
    printf("dup2 to 50, SEEK_END: %lld\n", (long long)pos);
    CHECK(ferrite_ftruncate(fs, fd, 10));
    CHECK(ferrite_fallocate(fs, fd, 0, 0, 8192));
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("ftruncate 10 + fallocate 8192: size=%lld\n", (long long)st.st_size);
    CHECK(ferrite_close(fs, 50));
    CHECK(ferrite_close(fs, fd2));
    CHECK(ferrite_fdatasync(fs, fd));

    /* Attributes: times, mode, owner, an extended attribute. */
    struct timespec times[2] = {{1000000000, 0}, {1234567890, 500}};
    CHECK(ferrite_futimens(fs, fd, times));
    CHECK(ferrite_fchmod(fs, fd, 0640));
    CHECK(ferrite_fchown(fs, fd, 1000, (gid_t)-1));
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("futimens/fchmod/fchown: mtime=%lld.%09ld mode=%o uid=%u gid=%u\n", (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec, st.st_mode & 07777, st.st_uid, st.st_gid);
    CHECK(ferrite_fsetxattr(fs, fd, "user.color", "blue", 4, XATTR_CREATE));
    char val[16] = {0};
    CHECK(ferrite_fgetxattr(fs, fd, "user.color", val, sizeof val - 1));
    char names[64];
    ssize_t nl;
    CHECK(nl = ferrite_flistxattr(fs, fd, names, sizeof names));
    printf("xattr user.color=%s (list %zd bytes: %s)\n", val, nl, names);
    EXPECT_FAIL("fsetxattr XATTR_CREATE again", ferrite_fsetxattr(fs, fd, "user.color", "red", 3, XATTR_CREATE));
    CHECK(ferrite_fsetxattr(fs, fd, "user.tmp", "x", 1, 0));
    CHECK(ferrite_fremovexattr(fs, fd, "user.tmp"));
    EXPECT_FAIL("fgetxattr removed", ferrite_fgetxattr(fs, fd, "user.tmp", val, sizeof val));
    CHECK(ferrite_close(fs, fd));

    CHECK(ferrite_truncate(fs, "/docs/hello.txt", strlen(msg)));
    CHECK(ferrite_utimensat(fs, FERRITE_AT_FDCWD, "/docs/hello.txt", times, 0));
    CHECK(ferrite_chmod(fs, "/docs/hello.txt", 0664));
    CHECK(ferrite_chown(fs, "/docs/hello.txt", (uid_t)-1, 100));

    /* Names: symlinks, hard links, special files, *at calls. */
    CHECK(ferrite_symlink(fs, "hello.txt", "/docs/link"));
    char target[64];
    CHECK(n = ferrite_readlink(fs, "/docs/link", target, sizeof target));
    printf("readlink: %.*s (%zd bytes)\n", (int)n, target, n);
    CHECK(ferrite_lstat(fs, "/docs/link", &st));
    printf("lstat link: symlink=%d\n", S_ISLNK(st.st_mode));
    CHECK(ferrite_link(fs, "/docs/hello.txt", "/docs/hard"));
    CHECK(ferrite_stat(fs, "/docs/link", &st));
    printf("stat through link: nlink=%ld mode=%o gid=%u mtime=%lld\n", (long)st.st_nlink, st.st_mode & 07777,
           st.st_gid, (long long)st.st_mtim.tv_sec);
    CHECK(ferrite_mknod(fs, "/docs/pipe", S_IFIFO | 0600, 0));
    int dfd;
    CHECK(dfd = ferrite_open(fs, "/docs", O_RDONLY | O_DIRECTORY, 0));
    CHECK(ferrite_mkdirat(fs, dfd, "sub", 0700));
    CHECK(ferrite_mknodat(fs, dfd, "sub/empty", S_IFREG | 0644, 0));
    CHECK(ferrite_symlinkat(fs, "../hello.txt", dfd, "sub/up"));
    CHECK(n = ferrite_readlinkat(fs, dfd, "sub/up", target, 5));
    printf("readlinkat into 5 bytes: %.*s (%zd)\n", (int)n, target, n);
    CHECK(ferrite_linkat(fs, dfd, "sub/empty", dfd, "sub/empty2", 0));
    CHECK(ferrite_fstatat(fs, dfd, "sub/up", &st, 0));
    printf("fstatat sub/up: size=%lld\n", (long long)st.st_size);
    CHECK(ferrite_fchmodat(fs, dfd, "sub", 0750, 0));
    CHECK(ferrite_fchownat(fs, dfd, "sub/up", 7, 7, AT_SYMLINK_NOFOLLOW));
    CHECK(ferrite_faccessat(fs, dfd, "sub/empty", R_OK | W_OK, 0));
    CHECK(ferrite_renameat2(fs, dfd, "sub/empty2", dfd, "sub/other", RENAME_NOREPLACE));
    CHECK(ferrite_unlinkat(fs, dfd, "sub/other", 0));
    CHECK(ferrite_close(fs, dfd));
    list(fs, "/docs");
    list(fs, "/docs/sub");

    /* Rename, unlink, rmdir. */
    CHECK(ferrite_rename(fs, "/docs/hello.txt", "/docs/greeting.txt"));
    EXPECT_FAIL("stat the old name", ferrite_stat(fs, "/docs/hello.txt", &st));
    EXPECT_FAIL("stat the dangling link", ferrite_stat(fs, "/docs/link", &st));
    CHECK(ferrite_unlink(fs, "/docs/hard"));
    CHECK(ferrite_unlink(fs, "/docs/link"));
    CHECK(ferrite_rmdir(fs, "/docs/old"));
    CHECK(ferrite_stat(fs, "/docs/greeting.txt", &st));
    printf("after rename and unlink: nlink=%ld\n", (long)st.st_nlink);

    /* The current directory. */
    char cwd[64];
    CHECK(ferrite_chdir(fs, "/docs/sub"));
    printf("getcwd: %s\n", ferrite_getcwd(fs, cwd, sizeof cwd));
    CHECK(fd = ferrite_open(fs, "..", O_PATH | O_DIRECTORY, 0));
    CHECK(ferrite_fchdir(fs, fd));
    CHECK(ferrite_close(fs, fd));
    printf("getcwd after fchdir ..: %s\n", ferrite_getcwd(fs, cwd, sizeof cwd));
    cat(fs, "greeting.txt");

    /* Errors come back as -1 (NULL for pointers) with errno set. */
    EXPECT_FAIL("open a missing file", ferrite_open(fs, "/nope", O_RDONLY, 0));
    EXPECT_FAIL("mkdir an existing dir", ferrite_mkdir(fs, "/docs", 0755));
    EXPECT_FAIL("rmdir a non-empty dir", ferrite_rmdir(fs, "/docs"));
    EXPECT_FAIL("close a bad descriptor", ferrite_close(fs, 12345));
    EXPECT_FAIL("open a dir for writing", ferrite_open(fs, "/docs", O_WRONLY, 0));
    EXPECT_FAIL("open a NULL path", ferrite_open(fs, NULL, O_RDONLY, 0));
    EXPECT_FAIL("a NULL handle", ferrite_mkdir(NULL, "/x", 0755));
    EXPECT_FAIL("readlink a file", ferrite_readlink(fs, "/docs/greeting.txt", target, sizeof target));
    errno = 0;
    char *r = ferrite_getcwd(fs, cwd, 3);
    printf("getcwd into 3 bytes: %s %s\n", r ? r : "NULL", errname(errno));

    /* Credentials: a plain user, the umask, permission checks. */
    CHECK(ferrite_set_credentials(fs, 1000, 1000, 022));
    EXPECT_FAIL("user 1000 creates in /", ferrite_open(fs, "/mine", O_CREAT | O_WRONLY, 0666));
    EXPECT_FAIL("user 1000 access W_OK /", ferrite_access(fs, "/", W_OK));
    CHECK(ferrite_set_credentials(fs, 0, 0, 0));
    CHECK(ferrite_mkdir(fs, "/home", 0755));
    CHECK(ferrite_chown(fs, "/home", 1000, 1000));
    gid_t groups[] = {4, 24};
    CHECK(ferrite_set_credentials(fs, 1000, 1000, 022));
    CHECK(ferrite_set_groups(fs, groups, 2));
    CHECK(fd = ferrite_open(fs, "/home/mine", O_CREAT | O_WRONLY, 0666));
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("user 1000 created /home/mine: mode=%o uid=%u gid=%u\n", st.st_mode & 07777, st.st_uid, st.st_gid);
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_set_credentials(fs, 0, 0, 0));

    struct statvfs vfs;
    CHECK(ferrite_statvfs(fs, &vfs));
    printf("statvfs: namemax=%lu blocks>0=%d free<=blocks=%d\n", (unsigned long)vfs.f_namemax, vfs.f_blocks > 0,
           vfs.f_bfree <= vfs.f_blocks);

    /* A second mount of a mounted pool, a second format. */
    errno = 0;
    struct ferrite_fs *again = ferrite_mount(pool);
    printf("mount while mounted: %s %s\n", again ? "handle" : "NULL", errname(errno));
    errno = 0;
    again = ferrite_format(pool, 64 << 20);
    printf("format an existing pool: %s %s\n", again ? "handle" : "NULL", errname(errno));

    /* ---- unmount, mount again, check ---- */
    CHECK(ferrite_unmount(fs));
    printf("unmounted\n");
    fs = ferrite_mount(pool);
    if (!fs) {
        fprintf(stderr, "ferrite_mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    printf("mounted again\n");
    list(fs, "/");
    list(fs, "/docs");
    cat(fs, "/docs/greeting.txt");
    CHECK(ferrite_stat(fs, "/docs/greeting.txt", &st));
    printf("greeting.txt: mode=%o gid=%u mtime=%lld\n", st.st_mode & 07777, st.st_gid, (long long)st.st_mtim.tv_sec);
    CHECK(fd = ferrite_open(fs, "/docs/data.bin", O_RDONLY, 0));
    memset(val, 0, sizeof val);
    CHECK(ferrite_fgetxattr(fs, fd, "user.color", val, sizeof val - 1));
    CHECK(ferrite_fstat(fs, fd, &st));
    printf("data.bin: size=%lld mtime=%lld.%09ld user.color=%s\n", (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, val);
    CHECK(ferrite_close(fs, fd));
    CHECK(ferrite_unmount(fs));
    printf("unmounted\n");
    if (argc <= 1)
        unlink(pool);
    return 0;
}
