/* --keep-last N, --keep-every N: numbered checkpoints beside
 * last.safetensors, DIR/step-NNNNNNNN.safetensors (the step, 8 digits or
 * more), and their pruning, so a long campaign keeps a history of its
 * checkpoints without filling its quota.
 *
 * The numbered file is a hard link to the last.safetensors just written:
 * no second write, no extra space while they are the same file; the next
 * checkpoint's rename gives last a new inode and the link keeps the old
 * one. Where the file system has no hard links the caller writes a copy.
 *
 * What pruning may remove: only regular files named exactly
 * step-<digits>.safetensors (what this file writes), never
 * last.safetensors or best.safetensors (what --resume auto and a
 * divergence's recovery take), never a writer's temporary .*.tmp.* file,
 * never the file this run resumed from (a requeued job given the same
 * --resume PATH must find it again), never the one just written. Rank 0
 * alone calls it (the ranks' writer). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keep.h"
#include "lib/ckpt/atomic.h"

int ckpt_keep_name(const char *name, long *step)
{
    const char *p = name;
    if (strncmp(p, "step-", 5) != 0)
        return 0;
    p += 5;
    size_t digits = strspn(p, "0123456789");
    if (digits < 8 || digits > 18 || strcmp(p + digits, ".safetensors") != 0)
        return 0;
    *step = strtol(p, NULL, 10);
    return 1;
}

int ckpt_keep_wanted(long step, long keep_last, long keep_every)
{
    return keep_last > 0 || (keep_every > 0 && step % keep_every == 0);
}

/* The last component of path: a name in its directory. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int ckpt_keep_link(const char *dir, const char *last, long step, char *out, size_t len)
{
    char name[64], tmp[80];
    snprintf(out, len, "%.1000s/step-%08ld.safetensors", dir, step);
    snprintf(name, sizeof name, "step-%08ld.safetensors", step);
    snprintf(tmp, sizeof tmp, ".step-%08ld.safetensors.tmp.link", step);
    /* The directory opened and checked once, as atomic.c's writer does:
     * every name below is relative to it, so a directory swapped in on the
     * path meanwhile gets nothing, and one every account may write to
     * without the sticky bit is refused. last is a file of dir. */
    int dfd = afile_dir_open(dir, out);
    if (dfd < 0)
        return -1;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        close(dfd);
        return 2;   /* a link or directory of the user's: not ours to replace */
    }
    unlinkat(dfd, tmp, 0);   /* a killed run's; ckpt_dir_prepare also removes them */
    if (linkat(dfd, base_name(last), dfd, tmp, 0) != 0) {
        int err = errno;
        close(dfd);
        if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EMLINK || err == EXDEV)
            return 1;   /* no hard links here: the caller writes a copy */
        return cdl_error("%s: cannot keep the checkpoint of step %ld as a link to %s: %s: "
                         "free space in %s or lower --keep-last, or drop --keep-last and "
                         "--keep-every", out, step, last, strerror(err), dir);
    }
    /* Over a file of the same step (a run resumed from an earlier one that
     * trains these steps again): readers see the old file or the new one. */
    if (renameat(dfd, tmp, dfd, name) != 0) {
        int err = errno;
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return cdl_error("%s: cannot keep the checkpoint of step %ld: %s: check the file "
                         "system of %s", out, step, strerror(err), dir);
    }
    fsync(dfd);   /* the new name survives a crash, as atomic.c's renames */
    close(dfd);
    return 0;
}

typedef struct {
    long step;
    struct timespec mtime;
    char name[64];
} kept;

/* Newest written first: by the time the file was written, then by step. A
 * run resumed from an older checkpoint writes lower steps after higher
 * ones of the abandoned run; those are older and go first. */
static int newest_first(const void *a, const void *b)
{
    const kept *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

int ckpt_keep_prune(const char *dir, long keep_last, long keep_every, long now,
                    const char *resumed, char *msg, size_t len)
{
    msg[0] = '\0';
    struct stat rst;
    int have_resumed = resumed && resumed[0] && stat(resumed, &rst) == 0;
    /* Checked and listed once; removals relative to it (ckpt_keep_link). */
    char what[1100];
    snprintf(what, sizeof what, "%.1000s/step-*.safetensors", dir);
    int dfd = afile_dir_open(dir, what);
    if (dfd < 0) {
        snprintf(msg, len, "old numbered checkpoints not removed: %s", cdl_last_error());
        return -1;
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        snprintf(msg, len, "cannot list %.900s to remove old numbered checkpoints: %s", dir,
                 strerror(errno));
        close(dfd);
        return -1;
    }
    kept *k = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        struct stat st;
        if (!ckpt_keep_name(e->d_name, &step) || strlen(e->d_name) >= sizeof k->name)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;   /* a link or directory of that name is not ours */
        if (step == now || (keep_every > 0 && step % keep_every == 0))
            continue;   /* the one just written; kept for good */
        if (have_resumed && st.st_dev == rst.st_dev && st.st_ino == rst.st_ino)
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            kept *nk = realloc(k, c * sizeof *k);
            if (!nk)
                break;   /* prune what fits; the next checkpoint tries again */
            k = nk;
            cap = c;
        }
        k[n].step = step;
        k[n].mtime = st.st_mtim;
        snprintf(k[n].name, sizeof k[n].name, "%s", e->d_name);
        n++;
    }
    int rc = 0;
    if (n > 0)
        qsort(k, n, sizeof *k, newest_first);
    /* The one just written counts among the last keep_last, unless it is
     * one of keep_every's, kept apart. */
    int now_others = !(keep_every > 0 && now % keep_every == 0);
    long keep_others = keep_last > now_others ? keep_last - now_others : 0;
    for (size_t i = (size_t)keep_others; i < n; i++) {
        if (unlinkat(dirfd(d), k[i].name, 0) != 0 && errno != ENOENT && rc == 0) {
            snprintf(msg, len, "cannot remove the old checkpoint %.900s/%s (--keep-last %ld): "
                     "%s; remove it yourself", dir, k[i].name, keep_last, strerror(errno));
            rc = -1;
        }
    }
    free(k);
    closedir(d);
    return rc;
}
