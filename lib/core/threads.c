/* How many CPUs this process should keep busy. */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "threads.h"

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

int cdl_default_threads(void)
{
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    int n = positive_env("SLURM_CPUS_PER_TASK");
    /* More threads than CPUs we may run on only time-slice: cdl-train warns. */
    if (n && ncpu && n > ncpu)
        n = ncpu;
    if (!n)
        n = positive_env("OMP_NUM_THREADS");
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
    return ncpu / local_world > 0 ? (int)(ncpu / local_world) : 1;
}
