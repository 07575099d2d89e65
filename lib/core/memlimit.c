/* memory_limit (memlimit.h): min(physical memory, the memory limit of
 * this process's cgroup and of the groups above it). The cgroup is found
 * through /proc/self/cgroup ("0::PATH" for v2, "N:memory:PATH" for v1);
 * inside a cgroup namespace that path may not exist under the mount, and
 * the mount's root file is the process's own group, so both are tried. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/core/memlimit.h"

size_t cgroup_limit_parse(const char *text)
{
    while (*text && isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text))
        return SIZE_MAX;   /* "max", empty or garbage: no limit we can use */
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (*end || v == 0 || v >= (1ULL << 62) || v >= SIZE_MAX)
        return SIZE_MAX;   /* v1 writes ~2^63 for "unlimited" */
    return (size_t)v;
}

static size_t limit_file(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return SIZE_MAX;
    char buf[64];
    size_t lim = fgets(buf, sizeof buf, f) ? cgroup_limit_parse(buf) : SIZE_MAX;
    fclose(f);
    return lim;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

size_t cgroup_limit_under(const char *mount, const char *file, const char *group)
{
    /* A group's limit caps every group below it; the process's own group
     * is often not where the limit is: Slurm's task/cgroup limits job_J
     * and step_S and runs each task in task_T below them (v1:
     * /slurm/uid_U/job_J/step_S/task_T; v2: .../job_J/step_S/user/task_T),
     * whose own file says unlimited. */
    char path[4200], grp[4096];
    size_t lim = SIZE_MAX;
    if (snprintf(grp, sizeof grp, "%s", group) >= (int)sizeof grp)
        return lim;
    for (;;) {
        size_t n = strlen(grp);
        while (n > 0 && grp[n - 1] == '/')
            grp[--n] = '\0';
        if (snprintf(path, sizeof path, "%s%s/%s", mount, grp, file) < (int)sizeof path)
            lim = min_size(lim, limit_file(path));
        char *slash = strrchr(grp, '/');
        if (!slash)
            break;   /* the mount's root was the last */
        *slash = '\0';
    }
    return lim;
}

int cgroup_line(char *line, const char **ctrl, const char **group)
{
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || strstr(c2 + 1, ".."))
        return 0;
    *c2 = '\0';
    *ctrl = c1 + 1;
    *group = c2 + 1;
    return !**ctrl && strcmp(line, "0") == 0 ? 2 : 1;
}

/* The limit of the group named in /proc/self/cgroup's line for version
 * (v2: "0::", v1: the line whose controllers include "memory"), and of the
 * groups above it. */
static size_t cgroup_limit(void)
{
    size_t lim = min_size(limit_file("/sys/fs/cgroup/memory.max"),
                          limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return lim;
    char line[4096];
    const char *ctrl, *grp;
    while (fgets(line, sizeof line, f)) {
        int v = cgroup_line(line, &ctrl, &grp);
        if (v == 2)
            lim = min_size(lim, cgroup_limit_under("/sys/fs/cgroup", "memory.max", grp));
        else if (v == 1 && strstr(ctrl, "memory"))
            lim = min_size(lim, cgroup_limit_under("/sys/fs/cgroup/memory",
                                                   "memory.limit_in_bytes", grp));
    }
    fclose(f);
    return lim;
}

size_t memory_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t phys = SIZE_MAX;
    if (pages > 0 && page > 0 && (unsigned long)pages <= SIZE_MAX / (unsigned long)page)
        phys = (size_t)pages * (size_t)page;
    return min_size(phys, cgroup_limit());
}

size_t memory_limit_cached(void)
{
    static atomic_size_t cached;   /* 0: not read yet */
    size_t lim = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!lim) {
        lim = memory_limit();
        atomic_store_explicit(&cached, lim, memory_order_relaxed);
    }
    return lim;
}

/* Bytes resident now that the kernel cannot give back by dropping pages:
 * RssAnon + RssShmem of /proc/self/status (kB). A file's pages mapped by a
 * reader (tokens: train.bin) are left out: under pressure they are
 * dropped, not counted against the limit for good. 0 if unreadable. */
static size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    char line[256];
    unsigned long kb, total = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %lu", &kb) == 1 || sscanf(line, "RssShmem: %lu", &kb) == 1)
            total += kb;
    fclose(f);
    return (size_t)total * 1024;
}

static atomic_int share_ranks = 1;

void memory_share_among(int ranks)
{
    atomic_store_explicit(&share_ranks, ranks > 1 ? ranks : 1, memory_order_relaxed);
}

int memory_share_ranks(void)
{
    return atomic_load_explicit(&share_ranks, memory_order_relaxed);
}

size_t memory_resident(void)
{
    return resident_bytes();
}

int memory_would_exceed(size_t bytes, size_t committed, size_t *held, size_t *limit)
{
    if (bytes < MEMORY_CHECK_MIN)
        return 0;
    size_t lim = memory_limit_cached();
    if (lim == SIZE_MAX)
        return 0;
    lim /= (size_t)memory_share_ranks();
    size_t res = resident_bytes();
    if (res < committed)
        res = committed;
    if (res <= lim && bytes <= lim - res)
        return 0;
    *held = res;
    *limit = lim;
    return 1;
}
