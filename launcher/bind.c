/* CPU binding plans for cdlrun --bind cores: rank r gets a contiguous block
 * of whole cores (all their hardware threads); with more ranks than cores,
 * ranks share cores round-robin. */
#include <stdio.h>
#include <string.h>

#include "launch.h"

#ifdef HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#endif

/* The cores this process may use, as one CPU set per core. */
static int allowed_cores(cpu_set_t *cores, int max, char *err, size_t errlen)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) {
        snprintf(err, errlen, "sched_getaffinity failed");
        return -1;
    }
    int n = 0;
#ifdef HAVE_HWLOC
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0) {
        int depth = hwloc_get_type_depth(topo, HWLOC_OBJ_CORE);
        unsigned count = depth < 0 ? 0 : hwloc_get_nbobjs_by_depth(topo, (unsigned)depth);
        for (unsigned i = 0; i < count && n < max; i++) {
            hwloc_obj_t core = hwloc_get_obj_by_depth(topo, (unsigned)depth, i);
            cpu_set_t set;
            hwloc_cpuset_to_glibc_sched_affinity(topo, core->cpuset, &set, sizeof set);
            CPU_AND(&set, &set, &allowed);
            if (CPU_COUNT(&set))
                cores[n++] = set;
        }
        hwloc_topology_destroy(topo);
    }
#endif
    if (n == 0)   /* no hwloc: every allowed CPU counts as a core */
        for (int c = 0; c < CPU_SETSIZE && n < max; c++)
            if (CPU_ISSET(c, &allowed)) {
                CPU_ZERO(&cores[n]);
                CPU_SET(c, &cores[n]);
                n++;
            }
    if (n == 0) {
        snprintf(err, errlen, "no CPU is available to this process");
        return -1;
    }
    return n;
}

int bind_plan(int n, cpu_set_t *sets, char *err, size_t errlen)
{
    static cpu_set_t cores[CPU_SETSIZE];
    int c = allowed_cores(cores, CPU_SETSIZE, err, errlen);
    if (c < 0)
        return -1;
    for (int r = 0; r < n; r++) {
        CPU_ZERO(&sets[r]);
        if (c >= n) {
            int lo = (int)((long)r * c / n), hi = (int)((long)(r + 1) * c / n);
            for (int k = lo; k < hi; k++)
                CPU_OR(&sets[r], &sets[r], &cores[k]);
        } else {
            sets[r] = cores[r % c];
        }
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
