/* Whether the members of a shared-memory collective group on this node
 * compete for CPUs (oversub.c): then a member that waits spins only
 * briefly and yields, for spinning takes a CPU that a member still
 * computing needs, and every step waits for the slowest member. */
#ifndef CDL_DIST_OVERSUB_H
#define CDL_DIST_OVERSUB_H

#include <sched.h>   /* cpu_set_t (_GNU_SOURCE) */

/* members: the group's ranks on this node, me this rank's index among
 * them; masks: every member's affinity mask (NULL: unknown, only this
 * rank's count, cpus, is); threads: the CPU threads each member keeps busy
 * while it computes (this rank's backend's; < 1 counts as 1); online: the
 * node's online CPUs; quota: the CPU quota of the cgroup the members
 * share, in CPUs (0: none).
 *
 * With masks: the members whose masks meet this rank's want their threads
 * on the union of those masks. Without: masks that together would hold no
 * more CPUs than are online are taken as the members' own (bound ranks, as
 * threads_for_rank takes them), else as one mask all of them share. Either
 * way all members share the quota. 1 when more threads than CPUs would
 * want to run. Pure. */
int shm_oversubscribed(int members, int me, const cpu_set_t *masks, int threads, int cpus,
                       long online, double quota);

#endif
