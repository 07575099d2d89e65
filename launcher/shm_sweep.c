/* Shared memory a job's ranks left behind (launch.h). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "launch.h"

/* A node's segment is named /cdl-<job id>-<group>-<16 hex> (lib/dist/
 * coll_shm.c) and unlinked once every member has opened it, so a normal run
 * leaves nothing. A rank killed before all had opened it (a rank that died
 * in set-up, SIGKILL after the grace) leaves the name and its memory in
 * /dev/shm until reboot. Once every rank has exited, nothing may open it:
 * the names of this job's id, unique to this cdlrun, are removed. */
int shm_sweep(const char *job_id)
{
    char prefix[96], name[300];
    int n = snprintf(prefix, sizeof prefix, "cdl-%s-", job_id);
    if (n <= 0 || (size_t)n >= sizeof prefix)
        return 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, (size_t)n) &&
            snprintf(name, sizeof name, "/%s", e->d_name) < (int)sizeof name &&
            shm_unlink(name) == 0)
            removed++;
    closedir(d);
    return removed;
}
