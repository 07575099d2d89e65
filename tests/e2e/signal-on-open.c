/* A test double for a signal that comes during a long set-up (scancel while
 * the dataset is staged or decoded): preloaded into cdl-train, it raises
 * SIGTERM (or the signal numbered CDL_TEST_SIGNAL) in the process the first
 * time it opens a file or shared-memory object whose path holds the text in
 * CDL_TEST_SIGNAL_ON. The signal lands at a known point of the work, with
 * no timing involved.
 *
 * It also stands for slow shared storage: each read() of a file whose path
 * holds the text in CDL_TEST_SLOW_ON takes CDL_TEST_SLOW_MS longer (a
 * --stage copy that outlasts CDL_TIMEOUT). Nothing waits on that time; it
 * only makes the copy long.
 *
 * And for one that fails to answer: stat() of a path holding the text in
 * CDL_TEST_STAT_FAIL_ON fails with EIO (as NFS's and Lustre's do when a
 * server times out).
 *
 * And for data on a network file system (CDL_TEST_NETFS_ON, below). */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum { MAX_FD = 4096 };
static unsigned char slow_fd[MAX_FD];   /* fds opened on a CDL_TEST_SLOW_ON path */

static void mark_slow(int fd, const char *path)
{
    const char *mark = getenv("CDL_TEST_SLOW_ON");
    if (fd >= 0 && fd < MAX_FD)
        slow_fd[fd] = mark && *mark && path && strstr(path, mark);
}

ssize_t read(int fd, void *buf, size_t n)
{
    ssize_t (*real)(int, void *, size_t) = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    if (fd >= 0 && fd < MAX_FD && slow_fd[fd]) {
        const char *ms = getenv("CDL_TEST_SLOW_MS");
        long t = ms ? atol(ms) : 100;
        struct timespec d = {t / 1000, (t % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    return real ? real(fd, buf, n) : -1;
}

static void maybe_raise(const char *path)
{
    static int raised;
    const char *mark = getenv("CDL_TEST_SIGNAL_ON");
    if (!raised && mark && *mark && path && strstr(path, mark)) {
        raised = 1;
        const char *sig = getenv("CDL_TEST_SIGNAL");
        raise(sig && atoi(sig) > 0 ? atoi(sig) : SIGTERM);
    }
}

/* open and open64 take a mode only with O_CREAT or O_TMPFILE. */
#define FORWARD(name)                                                            \
    int name(const char *path, int flags, ...)                                   \
    {                                                                            \
        mode_t mode = 0;                                                         \
        if (flags & (O_CREAT | O_TMPFILE)) {                                     \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = (mode_t)va_arg(ap, int);                                      \
            va_end(ap);                                                          \
        }                                                                        \
        int (*real)(const char *, int, ...) =                                    \
            (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);            \
        int fd = real ? real(path, flags, mode) : -1;                            \
        mark_slow(fd, path);                                                     \
        maybe_raise(path);                                                       \
        return fd;                                                               \
    }
FORWARD(open)
FORWARD(open64)

/* A rank opening the shared memory of its node's collectives (it is not
 * given to open(): glibc opens /dev/shm itself). */
int shm_open(const char *name, int flags, mode_t mode)
{
    int (*real)(const char *, int, mode_t) =
        (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    int fd = real ? real(name, flags, mode) : -1;
    maybe_raise(name);
    return fd;
}

static int stat_fails(const char *path)
{
    const char *mark = getenv("CDL_TEST_STAT_FAIL_ON");
    if (!mark || !*mark || !path || !strstr(path, mark))
        return 0;
    errno = EIO;
    return 1;
}

/* stat and stat64 by their symbols' names, whatever the headers redirect
 * (with 64-bit file offsets stat is stat64). */
int test_stat(const char *path, struct stat *st) __asm__("stat");
int test_stat64(const char *path, struct stat *st) __asm__("stat64");

int test_stat(const char *path, struct stat *st)
{
    int (*real)(const char *, struct stat *) =
        (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    return stat_fails(path) ? -1 : real ? real(path, st) : -1;
}

int test_stat64(const char *path, struct stat *st)
{
    int (*real)(const char *, struct stat *) =
        (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat64");
    return stat_fails(path) ? -1 : real ? real(path, st) : -1;
}

/* And for data on a network file system (--stage auto copies only that):
 * statfs() of a path holding the text in CDL_TEST_NETFS_ON says NFS. */
#include <sys/vfs.h>
static int netfs(const char *path, struct statfs *sf, int rc)
{
    const char *mark = getenv("CDL_TEST_NETFS_ON");
    if (rc == 0 && mark && *mark && path && strstr(path, mark))
        sf->f_type = 0x6969;   /* NFS_SUPER_MAGIC */
    return rc;
}

int test_statfs(const char *path, struct statfs *sf) __asm__("statfs");
int test_statfs64(const char *path, struct statfs *sf) __asm__("statfs64");

int test_statfs(const char *path, struct statfs *sf)
{
    int (*real)(const char *, struct statfs *) =
        (int (*)(const char *, struct statfs *))dlsym(RTLD_NEXT, "statfs");
    return netfs(path, sf, real ? real(path, sf) : -1);
}

int test_statfs64(const char *path, struct statfs *sf)
{
    int (*real)(const char *, struct statfs *) =
        (int (*)(const char *, struct statfs *))dlsym(RTLD_NEXT, "statfs64");
    return netfs(path, sf, real ? real(path, sf) : -1);
}
