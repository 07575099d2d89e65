/* How many CPUs this process should keep busy. */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "threads.h"
#include "lib/core/cpuquota.h"

static int positive_env(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    /* SLURM_CPUS_PER_TASK may be "4(x2)" in some contexts: take the number. */
    if (end == s || v <= 0 || v > 4096)
        return 0;
    return (int)v;
}

/* The CPUs in this process's affinity mask, 0 if unknown. */
static int mask_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

double cpus_available(void)
{
    int ncpu = mask_cpus();
    double q = cpu_quota();
    return q > 0 && (ncpu <= 0 || q < ncpu) ? q : ncpu;
}

int cdl_default_threads(void)
{
    int ncpu = cpus_capped(mask_cpus(), cpu_quota());
    int n = positive_env("SLURM_CPUS_PER_TASK");
    if (!n)
        n = positive_env("OMP_NUM_THREADS");
    /* More threads than CPUs we may run on (the mask, the quota) only
     * time-slice, each op waiting for the slowest: cdl-train warns. An
     * OMP_NUM_THREADS=16 left in a shell profile ran 16 threads on a
     * 2-CPU task; only --threads may ask for more. */
    if (n && ncpu && n > ncpu)
        n = ncpu;
    if (!n)
        n = ncpu;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}

int cdl_rank_threads(const cdl_rank_info *info)
{
    return threads_for_rank(info ? info->local_world : 1);
}

int threads_for_rank(int local_world)
{
    cpu_set_t set;
    if (local_world <= 1 || positive_env("SLURM_CPUS_PER_TASK") || positive_env("OMP_NUM_THREADS") ||
        sched_getaffinity(0, sizeof set, &set) != 0)
        return cdl_default_threads();
    long ncpu = CPU_COUNT(&set), online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online <= 0 || ncpu * local_world <= online)
        return cdl_default_threads();
    ncpu = cpus_capped((int)ncpu, cpu_quota());   /* one container's quota for all of them */
    return ncpu / local_world > 0 ? (int)(ncpu / local_world) : 1;
}
