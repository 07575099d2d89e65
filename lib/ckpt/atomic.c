/* Atomic file replacement: temporary file, fsync, rename, fsync of the
 * directory (see atomic.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/ckpt/atomic.h"

/* What to do about a failed file operation, by errno. */
static const char *errno_hint(int err, const char *dir)
{
    static _Thread_local char buf[1200];
    switch (err) {
    case ENOSPC:
#ifdef EDQUOT
    case EDQUOT:
#endif
        snprintf(buf, sizeof buf, "the file system of %s is full or over quota: free space "
                 "there or write checkpoints to another directory", dir);
        return buf;
    case EACCES:
    case EPERM:
        snprintf(buf, sizeof buf, "check that %s exists and is writable by this user", dir);
        return buf;
    case EROFS:
        snprintf(buf, sizeof buf, "%s is on a read-only file system: write checkpoints elsewhere", dir);
        return buf;
    case ENOENT:
    case ENOTDIR:
        snprintf(buf, sizeof buf, "the directory %s does not exist: create it first", dir);
        return buf;
    case EISDIR:
        return "the target is a directory: name a file";
    case EFBIG:
        return "the file size limit was reached (ulimit -f): raise it";
    case ENAMETOOLONG:
        return "use a shorter file name";
    case EIO:
        return "the storage reported an I/O error: check the file system";
    default:
        return "check the file system";
    }
}

/* The process umask without changing it (umask() would race with other
 * threads creating files): Linux reports it in /proc/self/status. */
static mode_t current_umask(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    unsigned mask = 022;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Umask: %o", &mask) == 1)
                break;
        fclose(f);
    }
    return (mode_t)mask;
}

/* Creates the temporary file a->tmp (its last six characters replaced, as
 * mkostemp does) in a->dirfd, exclusively and without following a link. */
static int create_tmp(afile *a)
{
    static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char *x = a->tmp + strlen(a->tmp) - 6;
    const char *base = strrchr(a->tmp, '/') ? strrchr(a->tmp, '/') + 1 : a->tmp;
    for (int tries = 0; tries < 1000; tries++) {
        unsigned char r[6];
        if (getentropy(r, sizeof r) != 0) {
            unsigned long v = (unsigned long)getpid() * 2654435761u ^ (unsigned long)tries;
            for (int i = 0; i < 6; i++, v >>= 5)
                r[i] = (unsigned char)v;
        }
        for (int i = 0; i < 6; i++)
            x[i] = set[r[i] % (sizeof set - 1)];
        int fd = openat(a->dirfd, base, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int afile_dir_open(const char *dir, const char *path)
{
    struct stat st;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return cdl_error("%s: cannot open its directory %s: %s: %s", path, dir, strerror(err),
                         errno_hint(err, dir));
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        close(fd);
        return cdl_error("%s: its directory %s may be written by every account and is not "
                         "sticky (mode %04o): any of them could replace the file, or swap it "
                         "between its writing and its rename into place; write it to a "
                         "directory of your own (mkdir -m 700 DIR), or make that one safe "
                         "(chmod o-w %s, or chmod +t %s for a shared one)", path, dir,
                         (unsigned)(st.st_mode & 07777), dir, dir);
    }
    return fd;
}

static int open_in(afile *a, int dirfd, const char *path);

int afile_open(afile *a, const char *path)
{
    return open_in(a, -1, path);
}

int afile_openat(afile *a, int dirfd, const char *path)
{
    return open_in(a, dirfd, path);
}

/* afile_open, in dirfd (a descriptor of afile_dir_open, duplicated) when
 * it is not -1, else in path's directory opened and checked here. */
static int open_in(afile *a, int dirfd, const char *path)
{
    a->fd = -1;
    a->dirfd = -1;
    a->path = path;
    a->tmp = a->dir = NULL;
    if (!path || !*path)
        return cdl_error("checkpoint path is empty: name a file");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return cdl_error("%s: not a file name: name a file, not a directory", path);
    size_t dirlen = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    size_t baselen = strlen(base);
    a->dir = cdl_malloc(dirlen + 1);
    a->tmp = cdl_malloc(dirlen + baselen + 16);
    if (!a->dir || !a->tmp) {
        afile_abort(a);
        return -1;
    }
    memcpy(a->dir, slash ? path : ".", dirlen);
    a->dir[dirlen] = '\0';
    /* ".NAME.tmp.XXXXXX" next to the target: hidden, and recognisable as
     * debris if a crash leaves one behind. */
    sprintf(a->tmp, "%.*s.%s.tmp.XXXXXX", (int)(slash ? slash + 1 - path : 0), path, base);

    struct stat st;
    if (dirfd >= 0) {
        a->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (a->dirfd < 0) {
            cdl_error("%s: cannot duplicate the descriptor of its directory %s: %s", path,
                      a->dir, strerror(errno));
            afile_abort(a);
            return -1;
        }
    } else {
        a->dirfd = afile_dir_open(a->dir, path);
    }
    if (a->dirfd < 0) {
        afile_abort(a);
        return -1;
    }
    mode_t mode = 0666 & ~current_umask();
    /* Replacing a file keeps its permissions: a file of this account at
     * that very name, not a link's target (in a shared folder, anyone's
     * 0666 file behind a planted link), and never set-id or sticky bits. */
    if (fstatat(a->dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        st.st_uid == geteuid())
        mode = st.st_mode & 0777;

    a->fd = create_tmp(a);
    if (a->fd < 0) {
        int err = errno;
        cdl_error("%s: cannot create a temporary file in %s: %s: %s", path, a->dir,
                  strerror(err), errno_hint(err, a->dir));
        cdl_free(a->tmp);
        a->tmp = NULL;
        afile_abort(a);
        return -1;
    }
    if (fchmod(a->fd, mode) != 0) {
        int err = errno;
        cdl_error("%s: cannot set the permissions of %s: %s: %s", path, a->tmp, strerror(err),
                  errno_hint(err, a->dir));
        afile_abort(a);
        return -1;
    }
    return 0;
}

int afile_write(afile *a, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        /* Linux writes at most 2 GiB - 4 KiB per call anyway. */
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(a->fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;   /* write() == 0: no room */
            return cdl_error("%s: writing %s failed: %s: %s", a->path, a->tmp, strerror(err),
                             errno_hint(err, a->dir));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The temporary file's name in a->dirfd. */
static const char *tmp_base(const afile *a)
{
    const char *slash = strrchr(a->tmp, '/');
    return slash ? slash + 1 : a->tmp;
}

static void release(afile *a)
{
    if (a->dirfd >= 0)
        close(a->dirfd);
    cdl_free(a->tmp);
    cdl_free(a->dir);
    a->tmp = a->dir = NULL;
    a->fd = a->dirfd = -1;
}

void afile_abort(afile *a)
{
    if (a->fd >= 0)
        close(a->fd);
    if (a->tmp && a->fd >= 0)
        unlinkat(a->dirfd, tmp_base(a), 0);
    release(a);
}

/* fsync of a directory: some file systems cannot (EINVAL); then the rename's
 * durability is theirs to provide, and that is not an error. */
static int sync_dir(afile *a)
{
    int fd = a->dirfd;
    int rc = 0;
    while (fsync(fd) != 0) {
        int err = errno;
        if (err == EINTR)
            continue;
        if (err != EINVAL && err != ENOTSUP)
            rc = cdl_error("%s: was renamed into place but fsync of %s failed: %s: the file may "
                           "be lost on a crash; %s", a->path, a->dir, strerror(err),
                           errno_hint(err, a->dir));
        break;
    }
    return rc;
}

int afile_commit(afile *a)
{
    int err = 0;
    const char *what = NULL;
    while (fsync(a->fd) != 0) {
        if (errno != EINTR) {
            err = errno, what = "fsync of";
            break;
        }
    }
    /* close reports deferred write errors on NFS and similar. */
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0 && !err && errno != EINTR)
        err = errno, what = "closing";
    const char *slash = strrchr(a->path, '/');
    if (!err && renameat(a->dirfd, tmp_base(a), a->dirfd, slash ? slash + 1 : a->path) != 0)
        err = errno, what = "renaming into place";
    if (err) {
        cdl_error("%s: %s %s failed: %s: %s; the previous file, if any, is unchanged", a->path,
                  what, a->tmp, strerror(err), errno_hint(err, a->dir));
        unlinkat(a->dirfd, tmp_base(a), 0);
        release(a);
        return -1;
    }
    int rc = sync_dir(a);
    release(a);
    return rc;
}
