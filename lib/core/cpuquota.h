/* The CPU bandwidth limit of this process's control group: cgroup v2's
 * cpu.max ("150000 100000" = 1.5 CPUs, "max 100000" = none) or v1's
 * cpu.cfs_quota_us / cpu.cfs_period_us (-1 = none), the lowest of the
 * process's group and the groups above it. Containers (docker --cpus,
 * Kubernetes CPU limits) and some Slurm sites limit CPU time this way and
 * leave every CPU in the affinity mask: threads past the quota only make
 * the whole group wait, throttled, for the rest of each period. */
#ifndef CDL_CORE_CPUQUOTA_H
#define CDL_CORE_CPUQUOTA_H

/* CPUs' worth of time per period (1.5), 0 for no limit or unreadable
 * text. v2: quota is cpu.max's text and period NULL; v1: the two files'
 * texts. Pure, for the unit test. */
double cpu_quota_parse(const char *quota, const char *period);

/* The lowest quota in group's directory under mount and in the ones above
 * it (v1: cpu.cfs_* files, else cpu.max); 0 for none. */
double cpu_quota_under(const char *mount, const char *group, int v1);

/* This process's quota, read once (0: none). */
double cpu_quota(void);

/* Threads for ncpu CPUs (the mask's count) under a quota of `quota` CPUs
 * (0: none): the quota rounded up when it is lower, as Java and .NET count
 * a container's processors. Pure, for the unit test. */
int cpus_capped(int ncpu, double quota);

/* OMP_NUM_THREADS for each of `ranks` ranks a launcher starts on `cpus`
 * CPUs (each rank's own when bound, else all of them shared) under
 * `quota` (0: none), which all ranks share: at least 1. Pure. */
int cpus_per_rank(int cpus, int bound, int ranks, double quota);

#endif
