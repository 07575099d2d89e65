/* Steps of one job that share CPUs on a node (srun --overlap).
 *
 * Slurm lets steps overlap (srun --overlap): their cpusets (task/cgroup)
 * or step cores (S_STEP_ALLOC_CORES) are the same CPUs, as Slurm picks an
 * overlapping step's cores without looking at the cores other steps use.
 * Nothing tells a step it overlaps (srun reads SLURM_OVERLAP but exports
 * nothing; SPANK has no item for the step's flags), and spreading steps
 * by their ids would narrow a step that runs alone to part of its CPUs.
 * What the plugin can see is what already runs: the processes of other
 * steps of the job on this node and the CPUs they are bound to, read from
 * /proc once per step before its tasks start (a process's environment
 * names its job and step, its status its CPUs). A step leaves those CPUs
 * to them where the rest of its own still give each local task a core
 * and the CPUs it asked for; otherwise it shares them (Slurm gives
 * overlapping steps the same first cores: nothing else is theirs) and the
 * verbose map says so. Only ever
 * narrows; steps started at the same moment may not see each other. */
#ifndef CDL_SPANK_OVERLAP_H
#define CDL_SPANK_OVERLAP_H

#ifdef HAVE_HWLOC
#include <stddef.h>
#include <sys/types.h>

#include <hwloc.h>

/* The job and step of a process from its environment block (the contents
 * of /proc/PID/environ: NUL-separated NAME=VALUE): 0, or -1 when
 * SLURM_JOB_ID or SLURM_STEP_ID is missing or not a number. */
int spk_environ_step(const char *env, size_t len, unsigned long *job, unsigned long *step);

/* Scans proc_root ("/proc") for processes of user uid (the job's) of
 * normal steps of `job` other
 * than `step` bound to some of `mine` (the step's CPUs): their CPUs
 * (Cpus_allowed_list, OS numbers) meet mine without holding all of it
 * (a process that may run on all of it, like the shell of an interactive
 * step, is bound to none of it):
 * `shared` gets the CPUs of mine they use, `steps` their step ids ("3,5",
 * ascending, at most 8). Returns how many such steps; 0 when none or
 * proc_root cannot be read (processes that vanish or are not readable
 * are skipped). */
int spk_overlap_scan(const char *proc_root, uid_t uid, unsigned long job, unsigned long step,
                     hwloc_const_bitmap_t mine, hwloc_bitmap_t shared, char *steps,
                     size_t stepslen);

/* Applies the CPUs `others` of the steps `steps` (spk_overlap_scan) to a
 * task's allowed CPUs before planning ntasks of cpus_per_task CPUs each:
 * where allowed without them still holds a core for each task and the
 * CPUs the tasks asked for, removes them and returns 1; else leaves
 * allowed and returns 0. note (may be NULL) says which, "" when they do
 * not meet allowed. */
int spk_overlap_apply(hwloc_topology_t topo, hwloc_cpuset_t allowed, hwloc_const_bitmap_t others,
                      const char *steps, int ntasks, int cpus_per_task, char *note,
                      size_t notelen);

#endif /* HAVE_HWLOC */
#endif
