/* CPU binding plans for cdlrun --bind cores: the plugin's planner
 * (lib/dist/bind.h, mode cores) on this machine's topology when built with
 * hwloc, else the same block rule (contract_share) over the CPUs of the
 * affinity mask, each counting as a core. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

#ifdef HAVE_HWLOC
#include <hwloc/glibc-sched.h>

#include "lib/dist/bind.h"

/* 0 with sets filled, or -1 when hwloc cannot help (then the fallback). */
static int plan_hwloc(int n, const cpu_set_t *allowed, cpu_set_t *sets, int *units)
{
    hwloc_topology_t topo;
    contract_err e;
    int rc = -1;
    if (bind_load(&topo, NULL, 0, &e) != 0)
        return -1;
    hwloc_cpuset_t a = hwloc_bitmap_alloc();
    hwloc_cpuset_t *out = calloc((size_t)n, sizeof *out);
    for (int r = 0; out && r < n; r++)
        out[r] = hwloc_bitmap_alloc();
    if (out && hwloc_cpuset_from_glibc_sched_affinity(topo, a, allowed, sizeof *allowed) == 0 &&
        bind_plan(topo, a, BIND_CORES, n, NULL, out, NULL, 0, &e) == 0) {
        for (int r = 0; r < n; r++)
            hwloc_cpuset_to_glibc_sched_affinity(topo, out[r], &sets[r], sizeof sets[r]);
        *units = bind_count_units(topo, a);
        rc = 0;
    }
    for (int r = 0; out && r < n; r++)
        hwloc_bitmap_free(out[r]);
    free(out);
    hwloc_bitmap_free(a);
    hwloc_topology_destroy(topo);
    return rc;
}
#endif

int bind_plan_cpus(int n, cpu_set_t *sets, char *err, size_t errlen)
{
    cpu_set_t allowed;
    static int cpu[CPU_SETSIZE];
    int c = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) {
        snprintf(err, errlen, "sched_getaffinity failed");
        return -1;
    }
#ifdef HAVE_HWLOC
    int units;
    if (plan_hwloc(n, &allowed, sets, &units) == 0)
        return units;
#endif
    for (int k = 0; k < CPU_SETSIZE; k++)
        if (CPU_ISSET(k, &allowed))
            cpu[c++] = k;
    if (c == 0) {
        snprintf(err, errlen, "no CPU is available to this process");
        return -1;
    }
    for (int r = 0; r < n; r++) {
        int lo, hi;
        contract_share(r, n, c, &lo, &hi);
        CPU_ZERO(&sets[r]);
        for (int k = lo; k < hi && k < c; k++)
            CPU_SET(cpu[k], &sets[r]);
    }
    return c;
}

void cpus_format(const cpu_set_t *set, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && used < len; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        used += (size_t)snprintf(buf + used, len - used, e > c ? "%s%d-%d" : "%s%d",
                                 used ? "," : "", c, e);
        c = e;
    }
}
