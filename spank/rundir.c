/* Per-step state directories (see rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "spank/rundir.h"

int spk_rundir_init(struct spk_rundir *rd, const char *runtime_dir, uint32_t jobid,
                    uint32_t stepid, const char *node)
{
    char key[128];
    if (!spk_charset_ok(node, 64, 1, "._-") || node[0] == '.')
        return spk_error("node name '%.64s' is not usable in a path", node ? node : "");
    snprintf(key, sizeof key, "%u.%u.%s", jobid, stepid, node);
    return spk_rundir_from_key(rd, runtime_dir, key);
}

int spk_rundir_from_key(struct spk_rundir *rd, const char *runtime_dir, const char *key)
{
    memset(rd, 0, sizeof *rd);
    if (!spk_charset_ok(key, sizeof rd->key, 1, "._-") || key[0] == '.')
        return spk_error("step directory name '%.64s' is not usable in a path", key);
    strcpy(rd->key, key);
    if ((size_t)snprintf(rd->step_dir, sizeof rd->step_dir, "%s/%s", runtime_dir, rd->key) >=
            sizeof rd->step_dir ||
        (size_t)snprintf(rd->pipe_dir, sizeof rd->pipe_dir, "%s/pipe", rd->step_dir) >=
            sizeof rd->pipe_dir ||
        (size_t)snprintf(rd->log_dir, sizeof rd->log_dir, "%s/log", rd->step_dir) >=
            sizeof rd->log_dir)
        return spk_error("runtime_dir=%s is too long", runtime_dir);
    return 0;
}

/* Every directory above runtime_dir (after resolving the links an admin may
 * have, like /var/run -> /run) must be root's and not writable by group or
 * others unless sticky (/tmp): otherwise a user could swap a component and
 * root would create, remove and read under a path of the user's choice. */
static int check_parent(const char *runtime_dir, const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return spk_error("runtime_dir=%s: %s: %s", runtime_dir, dir, strerror(errno));
    const char *why = !S_ISDIR(st.st_mode) ? "not a directory"
                      : st.st_uid != 0     ? "not owned by root"
                      : (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)
                          ? "writable by group or others without the sticky bit"
                          : NULL;
    if (why)
        return spk_error("runtime_dir=%s is unsafe: its parent %s is %s; choose a runtime_dir "
                         "whose every parent directory is owned by root and writable by root "
                         "only (e.g. /run/cdl)", runtime_dir, dir, why);
    return 0;
}

static int check_parents(const char *runtime_dir)
{
    char parent[SPK_PATH_MAX], real[PATH_MAX], *slash;
    if (spk_copy(parent, sizeof parent, runtime_dir) != 0)
        return spk_error("runtime_dir=%.80s is too long", runtime_dir);
    slash = strrchr(parent, '/');
    if (!slash)
        return spk_error("runtime_dir=%s is not an absolute path", runtime_dir);
    slash[slash == parent] = '\0';   /* "/run/cdl" -> "/run"; "/cdl" -> "/" */
    if (!realpath(parent, real))
        return spk_error("runtime_dir=%s: its parent %s: %s", runtime_dir, parent,
                         strerror(errno));
    if (check_parent(runtime_dir, "/") != 0)
        return -1;
    /* Each prefix of the resolved path: "/run", "/run/x", ... */
    for (size_t i = 1; real[i - 1] && real[1]; i++)
        if (real[i] == '/' || real[i] == '\0') {
            char c = real[i];
            real[i] = '\0';
            int rc = check_parent(runtime_dir, real);
            real[i] = c;
            if (rc != 0)
                return -1;
        }
    return 0;
}

/* runtime_dir itself (st: its lstat): a real directory of root's that no
 * one else may write to. */
static int check_own(const char *runtime_dir, const struct stat *st)
{
    if (!S_ISDIR(st->st_mode))
        return spk_error("runtime_dir=%s is not a directory (a symbolic link is refused)",
                         runtime_dir);
    /* A directory everyone may write to is a shared one (like /tmp): its
     * mode is not for cdl to change, runtime_dir must be a directory of its
     * own. */
    if (st->st_mode & S_IWOTH)
        return spk_error("runtime_dir=%s is writable by everyone (a shared directory): set "
                         "runtime_dir to a directory of cdl's own, e.g. runtime_dir=/run/cdl",
                         runtime_dir);
    if (st->st_uid != 0 || (st->st_mode & S_IWGRP))
        return spk_error("runtime_dir=%s must be owned by root and not writable by group or "
                         "others (chown root: %s; chmod g-w %s)", runtime_dir, runtime_dir,
                         runtime_dir);
    return 0;
}

int spk_rundir_check_root(const char *runtime_dir)
{
    struct stat st;
    if (check_parents(runtime_dir) != 0)
        return -1;
    if (mkdir(runtime_dir, 0755) != 0 && errno != EEXIST)
        return spk_error("runtime_dir=%s: cannot create it: %s", runtime_dir, strerror(errno));
    if (lstat(runtime_dir, &st) != 0)
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    return check_own(runtime_dir, &st);
}

/* Removing a tree the job user wrote, as root: without following a link,
 * without a depth limit and without recursion. Each pass goes over the
 * step directory's entries; files and empty directories are removed, and a
 * directory with entries is emptied one level: its own subdirectories are
 * moved up into the step directory (renameat of a directory the walk holds
 * open, so no path is resolved again), to be emptied by a later pass. At
 * most two directories are open at a time however deep the tree is. A
 * mount point in the tree is never entered, nor asked anything
 * (spk_open_beneath). */
enum { REMOVE_MAX_ENTRIES = 1 << 24 };   /* a live writer cannot keep us forever */

static int is_dot(const char *n)
{
    return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'));
}

/* The message for an entry spk_open_beneath would not open because it is a
 * mount point: its content is not the step's. */
static int mount_point_error(const char *where, const char *name)
{
    return spk_error("%s%s%s is a mount point (the job user's FUSE mount, say): it is not "
                     "entered, and the step directory is left with it (unmount it, e.g. "
                     "umount -l, then remove %s by hand)", where, name ? "/" : "",
                     name ? name : "", where);
}

/* Empties the directory sub (under top) one level. Counts removals in *done. */
static int empty_one_level(int top, int sub, const char *where, unsigned *seq, long *done)
{
    DIR *d = fdopendir(sub);
    struct dirent *e;
    int rc = 0;
    if (!d) {
        close(sub);
        return spk_error("cannot read %s: %s", where, strerror(errno));
    }
    while ((e = readdir(d)) != NULL) {
        char hoisted[32];
        if (is_dot(e->d_name))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0 ||
            ((errno == EISDIR || errno == EPERM) &&
             unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0)) {
            ++*done;
            continue;
        }
        if (errno == EBUSY) {
            rc = mount_point_error(where, e->d_name);   /* rmdir of a mount point */
            continue;
        }
        if (errno != ENOTEMPTY && errno != EEXIST) {
            if (errno != ENOENT)
                rc = spk_error("cannot remove %s/%s: %s", where, e->d_name, strerror(errno));
            continue;
        }
        /* A directory with entries: up into the step directory, under a
         * free name. RENAME_NOREPLACE: the user may write the step
         * directory, and an entry they make under the name between a check
         * and the rename must not be replaced (nor the name be theirs to
         * choose); a name taken is skipped. */
        int r;
        do {
            snprintf(hoisted, sizeof hoisted, ".cdl-rm.%u", (*seq)++);
            r = renameat2(dirfd(d), e->d_name, top, hoisted, RENAME_NOREPLACE);
        } while (r != 0 && errno == EEXIST && *seq != 0);
        if (r == 0)
            ++*done;
        else if (errno != ENOENT)
            rc = errno == EBUSY ? mount_point_error(where, e->d_name)
                                : spk_error("cannot move %s/%s: %s", where, e->d_name,
                                            strerror(errno));
    }
    closedir(d);
    return rc;
}

/* Where fd lies: its mount's id (statx, Linux 5.8; a bind mount keeps its
 * source's st_dev) or, without it, its device. AT_STATX_DONT_SYNC: the
 * kernel's cached attributes, so a FUSE file system is sent no request. */
struct where_fs {
    uint64_t mnt;
    dev_t dev;
    int have_mnt;
    mode_t mode;
};

static int fs_of(int fd, struct where_fs *w)
{
    struct statx sx;
    memset(w, 0, sizeof *w);
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC,
              STATX_MNT_ID | STATX_TYPE, &sx) != 0)
        return -1;
    w->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    w->have_mnt = (sx.stx_mask & STATX_MNT_ID) != 0;
    w->mnt = sx.stx_mnt_id;
    w->mode = sx.stx_mode;
    return 0;
}

static int same_fs(const struct where_fs *a, const struct where_fs *b)
{
    return a->dev == b->dev && (!a->have_mnt || !b->have_mnt || a->mnt == b->mnt);
}

/* The name is resolved with O_PATH: a lookup in dirfd's own file system
 * only, no open() reaching the one mounted there and no automount; the
 * mount is then compared from the kernel's cache (fs_of), and only an entry
 * of dirfd's mount is opened for real. Opening a FUSE mount's root or file
 * for reading (or statting it without AT_STATX_DONT_SYNC) asks the user's
 * daemon, which may never answer: root would hang in the kernel. */
int spk_open_beneath(int dirfd, const char *name, int want_dir)
{
    struct where_fs here, there;
    char proc[64];
    int fd = -1, err;
    if (fs_of(dirfd, &here) != 0)
        return -1;
    int p = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (p < 0)
        return -1;
    if (fs_of(p, &there) != 0) {
        err = errno;
    } else if (!same_fs(&here, &there)) {
        err = EXDEV;
    } else if (S_ISLNK(there.mode)) {
        err = ELOOP;
    } else if (want_dir ? !S_ISDIR(there.mode) : !S_ISREG(there.mode)) {
        err = want_dir ? ENOTDIR : (S_ISDIR(there.mode) ? EISDIR : EINVAL);
    } else {
        /* The same inode reopened: "." of a directory; a file through its
         * descriptor (no name is looked up again either way). */
        if (want_dir) {
            fd = openat(p, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        } else {
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", p);
            fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        }
        err = errno;
    }
    close(p);
    errno = err;
    return fd;
}

static int remove_tree(int parent, const char *name, const char *where)
{
    unsigned seq = 0;
    long total = 0;
    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM && errno != EBUSY)
        return spk_error("cannot remove %s: %s", where, strerror(errno));
    int top = spk_open_beneath(parent, name, 1);
    if (top < 0) {
        if (errno == ENOENT)
            return 0;
        return errno == EXDEV ? mount_point_error(where, NULL)
                              : spk_error("cannot open %s: %s", where, strerror(errno));
    }
    for (;;) {
        long done = 0;
        int failed = 0, fd = dup(top);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;
        if (!d) {
            if (fd >= 0)
                close(fd);
            close(top);
            return spk_error("cannot read %s: %s", where, strerror(errno));
        }
        rewinddir(d);   /* the dup shares the offset of earlier passes */
        while ((e = readdir(d)) != NULL) {
            if (is_dot(e->d_name))
                continue;
            if (unlinkat(top, e->d_name, 0) == 0 ||
                ((errno == EISDIR || errno == EPERM) &&
                 unlinkat(top, e->d_name, AT_REMOVEDIR) == 0)) {
                done++;
                continue;
            }
            if (errno == ENOENT)
                continue;
            int sub = spk_open_beneath(top, e->d_name, 1);
            if (sub < 0) {
                if (errno == EXDEV) {
                    failed = 1;
                    mount_point_error(where, e->d_name);
                } else if (errno != ENOENT) {
                    failed = 1;
                    spk_error("cannot open %s/%s: %s", where, e->d_name, strerror(errno));
                }
                continue;
            }
            failed |= empty_one_level(top, sub, where, &seq, &done) != 0;
        }
        closedir(d);
        if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
            close(top);
            return 0;
        }
        total += done;
        if (done == 0 || total > REMOVE_MAX_ENTRIES) {
            int err = errno;
            close(top);
            if (failed)
                return -1;   /* the message of the entry that failed */
            return spk_error("cannot remove directory %s: %s", where,
                             total > REMOVE_MAX_ENTRIES ? "something keeps writing into it"
                                                        : strerror(err));
        }
    }
}

int spk_rundir_remove(const char *runtime_dir, const char *key)
{
    int fd, rc;
    char where[SPK_PATH_MAX + 130];
    if (strchr(key, '/') || key[0] == '.' || !key[0])
        return spk_error("refusing to remove '%s' under %s", key, runtime_dir);
    fd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    snprintf(where, sizeof where, "%s/%s", runtime_dir, key);
    rc = remove_tree(fd, key, where);
    close(fd);
    return rc;
}

int spk_rundir_open_sub(const struct spk_rundir *rd, const char *sub)
{
    /* step_dir is "<runtime_dir>/<key>" (spk_rundir_from_key). */
    char runtime_dir[SPK_PATH_MAX];
    size_t n = strlen(rd->step_dir) - strlen(rd->key) - 1;
    memcpy(runtime_dir, rd->step_dir, n);
    runtime_dir[n] = '\0';
    int top = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int step = top < 0 ? -1 : spk_open_beneath(top, rd->key, 1);
    int fd = step < 0 ? -1 : spk_open_beneath(step, sub, 1);
    int e = errno;
    if (top >= 0)
        close(top);
    if (step >= 0)
        close(step);
    if (fd < 0 && e == EXDEV)
        return spk_error("%s/%s is not a directory of the step: %s or it is a mount point (the "
                         "job user's FUSE mount, say), which root does not enter", rd->step_dir,
                         sub, rd->step_dir);
    if (fd < 0)
        return spk_error("%s/%s is not a directory of the step (%s): a link is not followed",
                         rd->step_dir, sub, strerror(e));
    return fd;
}

int spk_rundir_create(const struct spk_rundir *rd, const char *runtime_dir, uid_t uid, gid_t gid)
{
    int top = -1, fd = -1, rc = -1;
    if (spk_rundir_remove(runtime_dir, rd->key) != 0)
        return -1;
    top = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0)
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    /* Root-owned while being filled; handed to the user last. */
    if (mkdirat(top, rd->key, 0700) != 0) {
        spk_error("cannot create %s: %s", rd->step_dir, strerror(errno));
        goto out;
    }
    fd = openat(top, rd->key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        spk_error("cannot open %s: %s", rd->step_dir, strerror(errno));
        goto out;
    }
    static const char *const subs[] = {"pipe", "log"};
    for (int i = 0; i < 2; i++)
        if (mkdirat(fd, subs[i], 0700) != 0 ||
            fchownat(fd, subs[i], uid, gid, AT_SYMLINK_NOFOLLOW) != 0 ||
            fchmodat(fd, subs[i], 0700, 0) != 0) {
            spk_error("cannot create %s/%s: %s", rd->step_dir, subs[i], strerror(errno));
            goto out;
        }
    if (fchown(fd, uid, gid) != 0 || fchmod(fd, 0700) != 0) {
        spk_error("cannot hand %s to uid %u: %s", rd->step_dir, (unsigned)uid, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc != 0)
        spk_rundir_remove(runtime_dir, rd->key);
    close(top);
    return rc;
}

int spk_rundir_each_of_job(const char *runtime_dir, uint32_t jobid,
                           int (*fn)(const char *key, uid_t owner, gid_t group, void *arg),
                           void *arg)
{
    char prefix[16];
    size_t plen;
    int fd, found = 0;
    DIR *d;
    struct dirent *e;
    plen = (size_t)snprintf(prefix, sizeof prefix, "%u.", jobid);
    fd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    /* The checks steps make before they create anything there: in a
     * directory others may write to (runtime_dir=/tmp by mistake) the
     * "<jobid>.*" entries could be anybody's, not the plugin's. */
    struct stat rst;
    if (fstat(fd, &rst) != 0) {
        int err = errno;
        close(fd);
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(err));
    }
    if (check_own(runtime_dir, &rst) != 0 || check_parents(runtime_dir) != 0) {
        close(fd);
        return -1;
    }
    struct statx rx;
    int have_rx = statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID, &rx) == 0;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    }
    while ((e = readdir(d)) != NULL) {
        struct statx sx;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        /* From the kernel's cache (a FUSE mount there is asked nothing). */
        if (statx(fd, e->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
                  STATX_TYPE | STATX_UID | STATX_GID | STATX_MNT_ID, &sx) != 0 ||
            !S_ISDIR(sx.stx_mode))
            continue;
        found++;
        /* A step directory the job user mounted something on: its owner
         * as seen is the mount's, which the user's file system reports,
         * and nothing of it is the plugin's to enter. */
        if (have_rx && (sx.stx_dev_major != rx.stx_dev_major ||
                        sx.stx_dev_minor != rx.stx_dev_minor ||
                        ((sx.stx_mask & STATX_MNT_ID) && (rx.stx_mask & STATX_MNT_ID) &&
                         sx.stx_mnt_id != rx.stx_mnt_id))) {
            char where[SPK_PATH_MAX + 260];
            snprintf(where, sizeof where, "%s/%s", runtime_dir, e->d_name);
            mount_point_error(where, NULL);
            spk_log("cdl: %s", spk_last_error());
            continue;
        }
        fn(e->d_name, sx.stx_uid, sx.stx_gid, arg);
    }
    closedir(d);
    return found;
}
