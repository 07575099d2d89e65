/* Which of the task's CPUs are its step's, from what Slurm tells the
 * plugin: S_STEP_ALLOC_CORES / S_JOB_ALLOC_CORES (Slurm's core numbers on
 * the node), SLURM_CPUS_ON_NODE and Slurm's version. Pure over an hwloc
 * topology (tests/unit/test_spank_stepcpus.c, saved topologies).
 *
 * Slurm numbers a node's cores as slurm.conf describes it. On a node with
 * several hardware threads a core where Slurm counts one CPU a core (the
 * job's CPUs on the node equal its cores) that is either
 *   - CPUs=N alone (usual with CR_CPU): each hardware thread is a "core";
 *   - ThreadsPerCore=1 (or CPUs=<cores>) on SMT hardware, as sites write to
 *     schedule whole cores: each core is a core.
 * Numbers past the node's cores can only be threads. Otherwise the task's
 * CPUs decide where Slurm confined them (task/cgroup, a cpuset of the
 * job): the reading under which every listed number lies in them. Where
 * the task may use the whole node (task/none) nothing the plugin can read
 * says which (slurm.conf's node line needs an RPC or a parse of the
 * site's files), so it reads them as Slurm itself maps them to CPUs:
 * Slurm 23.11 and later as whole cores, older Slurm (which gave such a
 * job half its cores, both threads each) as threads. Either way the plan
 * stays inside the CPUs Slurm's own binding gives the job. */
#ifndef CDL_SPANK_STEPCPUS_H
#define CDL_SPANK_STEPCPUS_H

#ifdef HAVE_HWLOC
#include <stddef.h>

#include <hwloc.h>

struct spk_slurm_cpus {
    const char *step_cores;     /* S_STEP_ALLOC_CORES ("0-1,4"; NULL or "" = unknown) */
    const char *job_cores;      /* S_JOB_ALLOC_CORES */
    const char *cpus_on_node;   /* SLURM_CPUS_ON_NODE: the job's CPUs here */
    int user_threads;           /* SLURM_THREADS_PER_CORE set (--threads-per-core,
                                 * --hint): the CPU count is not Slurm's per core */
    int major, minor;           /* Slurm's version (S_SLURM_VERSION_*); 0 = unknown */
};

/* How to read Slurm's numbers on this node: the slurm_threads argument of
 * bind_slurm_cores (1: hardware threads; 0 or more than 1: cores). allowed
 * is the task's CPUs before narrowing. why (may be NULL) receives a remark
 * for the verbose map when the node's configuration was guessed, else "". */
int spk_slurm_reading(hwloc_topology_t topo, hwloc_const_cpuset_t allowed,
                      const struct spk_slurm_cpus *s, char *why, size_t whylen);

/* Narrows allowed to the step's CPUs (bind_slurm_cores with the reading
 * above). Returns its result; note gets its remark and the reading's. */
int spk_step_cpus(hwloc_topology_t topo, hwloc_cpuset_t allowed, const struct spk_slurm_cpus *s,
                  char *note, size_t notelen);

#endif /* HAVE_HWLOC */
#endif
