/* The checkpoint directory before the first step: usable, free of what an
 * interrupted writer left, and a last.safetensors that is really there. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"

int ckpt_dir_prepare(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return cdl_error("--ckpt-dir %s: %s: create it or name another directory", dir,
                         strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cdl_error("--ckpt-dir %s is not a directory: name a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return cdl_error("--ckpt-dir %s is not writable by this user (%s): fix its permissions "
                         "or name another directory; checkpoints would fail only after the "
                         "first epoch", dir, strerror(errno));
    /* Temporary files of a writer that was killed (atomic.h names them
     * .NAME.tmp.XXXXXX): only ours, only files. */
    DIR *d = opendir(dir);
    if (!d)
        return cdl_error("--ckpt-dir %s: cannot list it: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".last.safetensors.tmp.", 22) != 0 &&
            strncmp(e->d_name, ".best.safetensors.tmp.", 22) != 0)
            continue;
        struct stat fst;
        if (fstatat(dirfd(d), e->d_name, &fst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(fst.st_mode))
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    return 0;
}

int ckpt_last_present(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0
                               : cdl_error("cannot check %s: %s", path, strerror(errno));
    if (!S_ISLNK(st.st_mode) || stat(path, &st) == 0)
        return 1;
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    return cdl_error("%s is a link to %s, which cannot be reached (%s): is its file system "
                     "mounted? Fix the link, remove it to start afresh, or pass --resume never",
                     path, target, strerror(errno));
}
