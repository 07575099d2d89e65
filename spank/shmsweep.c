/* A step's leftover shared memory (see shmsweep.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "spank/shmsweep.h"
#include "spank/util.h"

/* Skips one or more decimal digits; NULL when there is none. */
static const char *digits(const char *p)
{
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    return q == p ? NULL : q;
}

int spk_shm_name_is_step(const char *name, uint32_t jobid, uint32_t stepid)
{
    char prefix[32];
    int n = stepid == SPK_SHM_ANY_STEP ? snprintf(prefix, sizeof prefix, "cdl-%u.", jobid)
                                       : snprintf(prefix, sizeof prefix, "cdl-%u.%u-", jobid, stepid);
    if (!name || strncmp(name, prefix, (size_t)n) != 0)
        return 0;
    const char *p = name + n;
    if (stepid == SPK_SHM_ANY_STEP && (!(p = digits(p)) || *p++ != '-'))
        return 0;
    /* The tag: n<i> or n<i>g<j> (lib/dist/dist.c). */
    if (*p++ != 'n' || !(p = digits(p)))
        return 0;
    if (*p == 'g' && !(p = digits(p + 1)))
        return 0;
    if (*p++ != '-')
        return 0;
    /* 8 random bytes as lowercase hex, and nothing after. */
    for (int i = 0; i < 16; i++, p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return *p == '\0';
}

int spk_shm_sweep(const char *dir, uint32_t jobid, uint32_t stepid, uid_t uid,
                  void (*say)(const char *name, void *arg), void *arg)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : spk_error("cannot read %s: %s", dir, strerror(errno));
    /* The check of an entry and its removal are two steps: in a directory
     * every account may write to without the sticky bit, anyone may swap
     * the entry in between (and remove or rename the ranks' files anyway). */
    struct stat dst;
    if (fstat(dfd, &dst) != 0) {
        int e = errno;
        close(dfd);
        return spk_error("cannot examine %s: %s", dir, strerror(e));
    }
    if ((dst.st_mode & S_IWOTH) && !(dst.st_mode & S_ISVTX)) {
        close(dfd);
        return spk_error("%s is writable by every account without the sticky bit: any of them "
                         "could swap an entry between its check and its removal, so nothing is "
                         "removed there; give it mode 1777 (chmod 1777 %s, or mode=1777 in its "
                         "fstab entry)", dir, dir);
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return spk_error("cannot read %s: %s", dir, strerror(e));
    }
    int removed = 0, failed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!spk_shm_name_is_step(e->d_name, jobid, stepid))
            continue;
        /* From the kernel's cache (AT_STATX_DONT_SYNC): a FUSE mount the
         * user put on the name is asked nothing, so cannot make root wait;
         * an entry of another file system is a mount point, not a segment. */
        struct statx sx;
        if (statx(dfd, e->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
                  STATX_TYPE | STATX_UID, &sx) != 0)
            continue;   /* gone meanwhile */
        if (!S_ISREG(sx.stx_mode) || sx.stx_uid != uid ||
            makedev(sx.stx_dev_major, sx.stx_dev_minor) != dst.st_dev)
            continue;   /* not the ranks' own: someone else's to deal with */
        if (unlinkat(dfd, e->d_name, 0) == 0) {
            removed++;
            if (say)
                say(e->d_name, arg);
        }
        else if (errno != ENOENT && !failed) {
            failed = 1;
            spk_error("cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
        }
    }
    closedir(d);
    return failed ? -1 : removed;
}
