/* cpu_quota (cpuquota.h): the group is found through /proc/self/cgroup as
 * for the memory limit (memlimit.c, cgroup_line): "0::PATH" for v2, the line whose
 * controllers include "cpu" for v1 (mounted at cpu or cpu,cpuacct). */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/core/cpuquota.h"
#include "lib/core/memlimit.h"

/* A positive number of microseconds and what follows it, else -1. */
static long long usec(const char *s, const char **rest)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;   /* "max", "-1", empty */
    char *end;
    long long v = strtoll(s, &end, 10);
    *rest = end;
    return v > 0 && v < (1LL << 40) ? v : -1;
}

double cpu_quota_parse(const char *quota, const char *period)
{
    const char *rest;
    if (!quota)
        return 0;
    long long q = usec(quota, &rest), p;
    if (q < 0)
        return 0;
    const char *per = period ? period : rest;
    p = usec(per, &rest);
    while (!period && *per && isspace((unsigned char)*per))
        per++;
    if (p < 0 && !period && !*per)
        p = 100000;   /* cpu.max may be written as the quota alone */
    return p > 0 ? (double)q / (double)p : 0;
}

int cpus_capped(int ncpu, double quota)
{
    if (quota > 0 && (ncpu <= 0 || quota < ncpu)) {
        ncpu = (int)quota;   /* rounded up: 1.5 CPUs give 2 threads */
        if (ncpu < quota - 1e-9)
            ncpu++;
    }
    return ncpu > 0 ? ncpu : 0;
}

int cpus_per_rank(int cpus, int bound, int ranks, double quota)
{
    if (ranks < 1)
        ranks = 1;
    int n = cpus_capped(bound ? cpus : cpus / ranks, quota / ranks);
    return n > 0 ? n : 1;
}

static int read_text(const char *dir, const char *file, char *buf, size_t size)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return -1;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

double cpu_quota_under(const char *mount, const char *group, int v1)
{
    char dir[4200], q[64], per[64];
    double best = 0;
    if (snprintf(dir, sizeof dir, "%s%s", mount, group) >= (int)sizeof dir)
        return 0;
    size_t root = strlen(mount);
    for (;;) {
        size_t n = strlen(dir);
        while (n > root && dir[n - 1] == '/')
            dir[--n] = '\0';
        double v = 0;
        if (v1 ? read_text(dir, "cpu.cfs_quota_us", q, sizeof q) == 0 &&
                     read_text(dir, "cpu.cfs_period_us", per, sizeof per) == 0
               : read_text(dir, "cpu.max", q, sizeof q) == 0)
            v = cpu_quota_parse(q, v1 ? per : NULL);
        if (v > 0 && (best == 0 || v < best))
            best = v;
        char *slash = strrchr(dir + root, '/');
        if (!slash)
            return best;   /* the mount's root was the last */
        *slash = '\0';
    }
}

/* Whether a v1 line's controllers ("cpu,cpuacct") include cpu. */
static int lists_cpu(const char *ctrl)
{
    for (const char *c = ctrl; c; c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL)
        if (!strncmp(c, "cpu", 3) && (c[3] == ',' || !c[3]))
            return 1;
    return 0;
}

static double quota_now(void)
{
    double best = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return 0;
    char line[4096];
    const char *ctrl, *grp;
    while (fgets(line, sizeof line, f)) {
        int version = cgroup_line(line, &ctrl, &grp);
        double v = 0;
        if (version == 2)
            v = cpu_quota_under("/sys/fs/cgroup", grp, 0);
        else if (version == 1 && lists_cpu(ctrl)) {
            v = cpu_quota_under("/sys/fs/cgroup/cpu", grp, 1);
            if (v == 0)
                v = cpu_quota_under("/sys/fs/cgroup/cpu,cpuacct", grp, 1);
        }
        if (v > 0 && (best == 0 || v < best))
            best = v;
    }
    fclose(f);
    return best;
}

double cpu_quota(void)
{
    static _Atomic double cached = -1;   /* -1: not read yet */
    double q = atomic_load_explicit(&cached, memory_order_relaxed);
    if (q < 0) {
        q = quota_now();
        atomic_store_explicit(&cached, q, memory_order_relaxed);
    }
    return q;
}
