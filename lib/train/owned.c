/* Opening files of the run in folders others may write to (owned.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/dist/port_owner.h"
#include "owned.h"

int train_foreign(const struct stat *st, char *owner, size_t len)
{
    if (st->st_uid == geteuid() || st->st_uid == 0)
        return 0;
    dist_account((long)st->st_uid, owner, len);
    return 1;
}

int train_shared_dir(const char *opt, const char *dir, const struct stat *st, const char *risk)
{
    /* One's own folder others may write to without the sticky bit: any
     * account may rename or replace the run's files in it at any time. */
    if (st->st_uid == geteuid() && (st->st_mode & S_IWOTH) && !(st->st_mode & S_ISVTX))
        return cdl_error("%s %s may be written by every account and is not sticky (mode %04o): "
                         "anyone on this host could %s, or swap a file between its check and "
                         "its use; make it yours alone (chmod o-w %s) or sticky (chmod +t %s)",
                         opt, dir, (unsigned)(st->st_mode & 07777), risk, dir, dir);
    if (st->st_uid == geteuid() || !(st->st_mode & S_IWOTH))
        return 0;
    char owner[160];
    dist_account((long)st->st_uid, owner, sizeof owner);
    return cdl_error("%s %s belongs to another account (%s) and every account may write to it: "
                     "anyone on this host could %s; give a directory of your own (mkdir -m 700 "
                     "DIR, e.g. under $HOME or /tmp/$USER)", opt, dir, owner, risk);
}

static int refuse(const char *opt, const char *path, const char *what, const char *owner)
{
    return cdl_error("%s %s: %s belongs to another account (%s), which could have put it "
                     "there: this run would write to or read back what that account controls; "
                     "remove it (as %s or root) if it is not yours, or name a file in a "
                     "directory of your own (mkdir -m 700 DIR)", opt, path, what, owner, owner);
}

int train_check_fd(const char *opt, const char *path, int fd)
{
    struct stat st;
    char owner[160];
    if (fstat(fd, &st) != 0)
        return cdl_error("%s %s: %s", opt, path, strerror(errno));
    return train_foreign(&st, owner, sizeof owner) ? refuse(opt, path, "the file", owner) : 0;
}

/* The folder path is in: another account's that every account may write
 * to and that is not sticky lets anyone replace the file by a rename. */
static int check_folder(const char *opt, const char *path)
{
    char dir[PATH_MAX], owner[160];
    const char *slash = strrchr(path, '/');
    struct stat st;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (stat(dir, &st) != 0 || (st.st_mode & S_ISVTX) || !(st.st_mode & S_IWOTH) ||
        !train_foreign(&st, owner, sizeof owner))
        return 0;
    return cdl_error("%s %s: its directory %s belongs to another account (%s) and every "
                     "account may write to it without the sticky bit: anyone on this host could "
                     "replace the file; name a file in a directory of your own (mkdir -m 700 "
                     "DIR)", opt, path, dir, owner);
}

FILE *train_open_append(const char *opt, const char *path)
{
    const int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY;
    struct stat st;
    char owner[160];
    if (check_folder(opt, path) != 0)
        return NULL;
    /* Looked at first for the message: the kernel's own protections in
     * sticky folders (fs.protected_symlinks, fs.protected_regular) would
     * only say "Permission denied", and hosts without them say nothing. */
    if (lstat(path, &st) == 0 && train_foreign(&st, owner, sizeof owner)) {
        refuse(opt, path, S_ISLNK(st.st_mode) ? "the link" : "the file", owner);
        return NULL;
    }
    int fd = open(path, flags | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == ELOOP) {
        /* A link: followed only when it is this account's or root's. */
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
            train_foreign(&st, owner, sizeof owner)) {
            refuse(opt, path, "the link", owner);
            return NULL;
        }
        fd = open(path, flags, 0644);
    }
    if (fd < 0) {
        cdl_error("cannot open %s file %s for appending: %s (check the directory exists and is "
                  "writable)", opt, path, strerror(errno));
        return NULL;
    }
    if (train_check_fd(opt, path, fd) != 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) {
        cdl_error("cannot open %s file %s: %s", opt, path, strerror(errno));
        close(fd);
    }
    return f;
}

int train_open_dir(const char *opt, const char *dir, const char *prefix)
{
    struct stat st;
    char owner[160];
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) && train_foreign(&st, owner, sizeof owner))
        return cdl_error("%s %s is a link of another account (%s), which could have put it "
                         "there: remove it (as %s or root) if it is not yours, or name a "
                         "directory of your own (mkdir -m 700 DIR)", opt, dir, owner, owner);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return cdl_error("%s %s: %s (name a writable directory)", opt, dir, strerror(errno));
    if (fstat(dfd, &st) != 0) {
        close(dfd);
        return cdl_error("%s %s: %s", opt, dir, strerror(errno));
    }
    if (train_shared_dir(opt, dir, &st, "put files there that are taken for this run's") != 0) {
        close(dfd);
        return -1;
    }
    int lfd = dup(dfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        close(dfd);
        return cdl_error("%s %s: cannot list it: %s", opt, dir, strerror(errno));
    }
    struct dirent *e;
    int rc = 0;
    size_t plen = strlen(prefix);
    while (rc == 0 && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, plen) != 0 ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !train_foreign(&st, owner, sizeof owner))
            continue;
        rc = cdl_error("%s %s: %s belongs to another account (%s), which could have put it "
                       "there: it would be taken for this run's; remove it (as %s or root) if "
                       "it is not yours, or give a directory of your own (mkdir -m 700 DIR)",
                       opt, dir, e->d_name, owner, owner);
    }
    closedir(d);
    if (rc != 0) {
        close(dfd);
        return -1;
    }
    return dfd;
}
