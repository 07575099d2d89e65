/* Per-step state directories (see rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int spk_rundir_check_root(const char *runtime_dir)
{
    struct stat st;
    if (mkdir(runtime_dir, 0755) != 0 && errno != EEXIST)
        return spk_error("runtime_dir=%s: cannot create it: %s", runtime_dir, strerror(errno));
    if (lstat(runtime_dir, &st) != 0)
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return spk_error("runtime_dir=%s is not a directory (a symbolic link is refused)",
                         runtime_dir);
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return spk_error("runtime_dir=%s must be owned by root and not writable by group or "
                         "others (chown root: %s; chmod 755 %s)", runtime_dir, runtime_dir,
                         runtime_dir);
    return 0;
}

/* Empties and removes the directory `name` under dirfd; depth-limited. */
static int remove_at(int dirfd, const char *name, int depth)
{
    int fd, rc = 0;
    DIR *d;
    struct dirent *e;
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return spk_error("cannot remove %s: %s", name, strerror(errno));
    if (depth > 16)
        return spk_error("cannot remove %s: nested too deeply", name);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : spk_error("cannot open %s: %s", name, strerror(errno));
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return spk_error("cannot read %s: %s", name, strerror(errno));
    }
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (remove_at(fd, e->d_name, depth + 1) != 0)
            rc = -1;
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        rc = spk_error("cannot remove directory %s: %s", name, strerror(errno));
    return rc;
}

int spk_rundir_remove(const char *runtime_dir, const char *key)
{
    int fd, rc;
    if (strchr(key, '/') || key[0] == '.' || !key[0])
        return spk_error("refusing to remove '%s' under %s", key, runtime_dir);
    fd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    rc = remove_at(fd, key, 0);
    close(fd);
    return rc;
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
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return spk_error("runtime_dir=%s: %s", runtime_dir, strerror(errno));
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        found++;
        fn(e->d_name, st.st_uid, st.st_gid, arg);
    }
    closedir(d);
    return found;
}
