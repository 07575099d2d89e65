/* A step's leftover shared memory (see shmsweep.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;   /* gone meanwhile */
        if (!S_ISREG(st.st_mode) || st.st_uid != uid)
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
