/* Other steps of the job on this node sharing CPUs (see overlap.h). */
#ifdef HAVE_HWLOC
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/dist/bind.h"
#include "spank/overlap.h"

/* Normal steps: not batch, extern, interactive (Slurm's special ids). */
#define MAX_NORMAL_STEP 0xfffffff0ul

static int number(const char *s, size_t n, unsigned long *out)
{
    unsigned long v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    *out = v;
    return 0;
}

int spk_environ_step(const char *env, size_t len, unsigned long *job, unsigned long *step)
{
    int have_job = 0, have_step = 0;
    size_t at = 0;
    while (at < len) {
        const char *e = env + at;
        const char *end = memchr(e, '\0', len - at);
        size_t n = end ? (size_t)(end - e) : len - at;
        if (n > 13 && !memcmp(e, "SLURM_JOB_ID=", 13))
            have_job = number(e + 13, n - 13, job) == 0;
        else if (n > 14 && !memcmp(e, "SLURM_STEP_ID=", 14))
            have_step = number(e + 14, n - 14, step) == 0;
        at += n + 1;
    }
    return have_job && have_step ? 0 : -1;
}

/* Reads at most len - 1 bytes of path into buf; the count, or -1. */
static ssize_t slurp(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    size_t got = 0;
    if (fd < 0)
        return -1;
    while (got + 1 < len) {
        ssize_t r = read(fd, buf + got, len - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

static int ul_cmp(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return x < y ? -1 : x > y;
}

int spk_overlap_scan(const char *proc_root, uid_t uid, unsigned long job, unsigned long step,
                     hwloc_const_bitmap_t mine, hwloc_bitmap_t shared, char *steps,
                     size_t stepslen)
{
    static char buf[64 * 1024];
    char path[512];
    unsigned long found[8];
    int n = 0;
    struct dirent *d;
    DIR *dir = opendir(proc_root);
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    hwloc_bitmap_zero(shared);
    if (steps && stepslen)
        steps[0] = '\0';
    if (!dir || !cpus)
        goto out;
    while ((d = readdir(dir)) != NULL) {
        unsigned long j, s;
        ssize_t got;
        char *line;
        if (d->d_name[0] < '1' || d->d_name[0] > '9' ||
            strspn(d->d_name, "0123456789") != strlen(d->d_name))
            continue;
        /* The job's user's processes only: their environment is read
         * (which waits on the process's memory map), no one else's. */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", proc_root, d->d_name);
        if (stat(path, &st) != 0 || st.st_uid != uid)
            continue;
        snprintf(path, sizeof path, "%s/%s/environ", proc_root, d->d_name);
        got = slurp(path, buf, sizeof buf);
        if (got <= 0 || spk_environ_step(buf, (size_t)got, &j, &s) != 0 || j != job ||
            s == step || s > MAX_NORMAL_STEP)
            continue;
        snprintf(path, sizeof path, "%s/%s/status", proc_root, d->d_name);
        if (slurp(path, buf, sizeof buf) <= 0 || !(line = strstr(buf, "\nCpus_allowed_list:")))
            continue;
        line += strlen("\nCpus_allowed_list:");
        line += strspn(line, " \t");
        line[strcspn(line, "\n")] = '\0';
        /* A process that may run on all of mine is bound to none of it
         * (the shell of an interactive step an srun runs from, a tool
         * step left unbound): nothing to keep apart from. */
        if (hwloc_bitmap_list_sscanf(cpus, line) != 0 || !hwloc_bitmap_intersects(cpus, mine) ||
            hwloc_bitmap_isincluded(mine, cpus))
            continue;
        hwloc_bitmap_and(cpus, cpus, mine);
        hwloc_bitmap_or(shared, shared, cpus);
        int k;
        for (k = 0; k < n && found[k] != s; k++)
            ;
        if (k == n && n < 8)
            found[n++] = s;
    }
    qsort(found, (size_t)n, sizeof found[0], ul_cmp);
    for (int k = 0; steps && k < n; k++) {
        size_t used = strlen(steps);
        snprintf(steps + used, stepslen - used, "%s%lu", k ? "," : "", found[k]);
    }
out:
    if (dir)
        closedir(dir);
    hwloc_bitmap_free(cpus);
    return n;
}
int spk_overlap_apply(hwloc_topology_t topo, hwloc_cpuset_t allowed, hwloc_const_bitmap_t others,
                      const char *steps, int ntasks, int cpus_per_task, char *note,
                      size_t notelen)
{
    hwloc_bitmap_t used = hwloc_bitmap_alloc(), left = hwloc_bitmap_alloc();
    char pus[128];
    int rc = 0;
    if (note && notelen)
        note[0] = '\0';
    if (!used || !left || !others || !hwloc_bitmap_intersects(allowed, others))
        goto out;
    hwloc_bitmap_and(used, allowed, others);
    hwloc_bitmap_andnot(left, allowed, others);
    hwloc_bitmap_list_snprintf(pus, sizeof pus, used);
    const char *s = steps && strchr(steps, ',') ? "s" : "";
    if (!hwloc_bitmap_iszero(left) && bind_count_units(topo, left) >= ntasks &&
        hwloc_bitmap_weight(left) >= ntasks * (cpus_per_task > 0 ? cpus_per_task : 1)) {
        hwloc_bitmap_copy(allowed, left);
        rc = 1;
        if (note && notelen)
            snprintf(note, notelen, "left PUs %s to step%s %s of this job, bound there "
                     "(srun --overlap)", pus, s, steps ? steps : "");
    }
    else if (note && notelen)
        snprintf(note, notelen, "shares PUs %s with step%s %s of this job (srun --overlap: "
                 "too few other CPUs to keep the steps apart; srun --exact without --overlap "
                 "gives each step CPUs of its own)", pus, s, steps ? steps : "");
out:
    hwloc_bitmap_free(used);
    hwloc_bitmap_free(left);
    return rc;
}
#endif /* HAVE_HWLOC */
