/*
 * threads.c: one Ferrite handle used by several threads at once.
 *
 * Each of THREADS threads makes its own directory and FILES files in it,
 * writes RECORDS records to each through its own descriptors, and also
 * writes its slice of one file that all threads share through a single
 * descriptor opened by the main thread. The main thread then checks every
 * byte, unmounts, mounts again and checks again. It prints one line per
 * check, the same on every run.
 *
 * Build: cc -Wall -Wextra -pthread -I crates/capi/include \
 *        crates/capi/examples/c/threads.c -L target/debug -lferrite -o threads
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferrite.h"

#define THREADS 4
#define FILES 16
#define RECORDS 64
#define RECORD 48

#define CHECK(expr)                                                                    \
    do {                                                                               \
        if ((expr) < 0) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strerror(errno)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static struct ferrite_fs *fs;
static int shared_fd;

/* The record `r` of file `f` of thread `t`: its own text, so a record
 * written to the wrong place or torn by another thread is caught. */
static void record(char *out, int t, int f, int r) {
    memset(out, '.', RECORD);
    int n = snprintf(out, RECORD, "thread %d file %d record %d", t, f, r);
    out[n] = '.';
    out[RECORD - 1] = '\n';
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    char path[64], rec[RECORD];
    snprintf(path, sizeof path, "/t%d", t);
    CHECK(ferrite_mkdir(fs, path, 0755));
    for (int f = 0; f < FILES; f++) {
        int fd;
        snprintf(path, sizeof path, "/t%d/f%d", t, f);
        CHECK(fd = ferrite_open(fs, path, O_CREAT | O_EXCL | O_WRONLY | O_APPEND, 0644));
        for (int r = 0; r < RECORDS; r++) {
            record(rec, t, f, r);
            if (ferrite_write(fs, fd, rec, RECORD) != RECORD) {
                fprintf(stderr, "short write to %s: %s\n", path, strerror(errno));
                exit(1);
            }
        }
        CHECK(ferrite_close(fs, fd));
    }
    for (int r = 0; r < RECORDS; r++) {
        record(rec, t, -1, r);
        off_t at = ((off_t)r * THREADS + t) * RECORD;
        if (ferrite_pwrite(fs, shared_fd, rec, RECORD, at) != RECORD) {
            fprintf(stderr, "short pwrite to /shared: %s\n", strerror(errno));
            exit(1);
        }
    }
    return NULL;
}

/* Check every record; print one line per thread. */
static void verify(const char *when) {
    char path[64], want[RECORD], got[RECORD];
    for (int t = 0; t < THREADS; t++) {
        int bad = 0, files = 0;
        struct ferrite_dirent ents[FILES + 1];
        int dfd;
        snprintf(path, sizeof path, "/t%d", t);
        CHECK(dfd = ferrite_open(fs, path, O_RDONLY | O_DIRECTORY, 0));
        ssize_t n;
        uint64_t cookie = 0;
        while ((n = ferrite_readdir(fs, dfd, cookie, ents, FILES + 1)) > 0) {
            files += (int)n;
            cookie = ents[n - 1].next_cookie;
        }
        CHECK(n);
        CHECK(ferrite_close(fs, dfd));
        for (int f = 0; f < FILES; f++) {
            int fd;
            snprintf(path, sizeof path, "/t%d/f%d", t, f);
            CHECK(fd = ferrite_open(fs, path, O_RDONLY, 0));
            for (int r = 0; r < RECORDS; r++) {
                record(want, t, f, r);
                if (ferrite_read(fs, fd, got, RECORD) != RECORD || memcmp(want, got, RECORD) != 0)
                    bad++;
            }
            if (ferrite_read(fs, fd, got, 1) != 0)
                bad++;
            CHECK(ferrite_close(fs, fd));
        }
        for (int r = 0; r < RECORDS; r++) {
            record(want, t, -1, r);
            off_t at = ((off_t)r * THREADS + t) * RECORD;
            if (ferrite_pread(fs, shared_fd, got, RECORD, at) != RECORD || memcmp(want, got, RECORD) != 0)
                bad++;
        }
        printf("%s: thread %d: %d files listed, %d bad records\n", when, t, files, bad);
    }
}

int main(int argc, char **argv) {
    char pool[256];
    if (argc > 1)
        snprintf(pool, sizeof pool, "%s", argv[1]);
    else
        snprintf(pool, sizeof pool, "/dev/shm/ferrite-threads-%ld.pool", (long)getpid());
    fs = ferrite_format(pool, 64 << 20);
    if (!fs) {
        fprintf(stderr, "ferrite_format %s: %s\n", pool, strerror(errno));
        return 1;
    }
    CHECK(shared_fd = ferrite_open(fs, "/shared", O_CREAT | O_RDWR, 0644));
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    printf("%d threads wrote %d files of %d records each\n", THREADS, FILES, RECORDS);
    verify("before unmount");
    CHECK(ferrite_unmount(fs));
    fs = ferrite_mount(pool);
    if (!fs) {
        fprintf(stderr, "ferrite_mount %s: %s\n", pool, strerror(errno));
        return 1;
    }
    CHECK(shared_fd = ferrite_open(fs, "/shared", O_RDONLY, 0));
    verify("after mount");
    CHECK(ferrite_unmount(fs));
    if (argc <= 1)
        unlink(pool);
    return 0;
}
