/* The shared-memory collectives' spinning decision (oversub.h). */
#include "oversub.h"

int shm_oversubscribed(int members, int me, const cpu_set_t *masks, int threads, int cpus,
                       long online, double quota)
{
    if (members < 1)
        members = 1;
    if (threads < 1)
        threads = 1;
    if (quota > 0 && (double)members * threads > quota + 1e-9)
        return 1;
    if (masks && me >= 0 && me < members) {
        cpu_set_t all;
        int sharing = 0;
        CPU_ZERO(&all);
        for (int j = 0; j < members; j++) {
            cpu_set_t both;
            CPU_AND(&both, &masks[j], &masks[me]);
            if (CPU_COUNT(&both) == 0)
                continue;
            CPU_OR(&all, &all, &masks[j]);
            sharing++;
        }
        return (long)sharing * threads > CPU_COUNT(&all);
    }
    if (online < 1)
        online = cpus > 0 ? cpus : 1;
    if (cpus < 1 || cpus > online)
        cpus = (int)online;
    if ((long)cpus * members <= online)   /* bound: each its own CPUs */
        return threads > cpus;
    return (long)members * threads > cpus;
}
