/* The thread count a task of a step gets (OMP_NUM_THREADS and
 * MKL_NUM_THREADS in the contract: torch.get_num_threads() and other
 * OpenMP/MKL code start from them). Pure: task_init passes the counts in. */
#ifndef CDL_SPANK_THREADS_H
#define CDL_SPANK_THREADS_H

/* The task's share of the CPUs, at least 1:
 *   min(cpus_per_task,            what Slurm granted the task
 *       step_cpus / local_tasks,  the step's CPUs on this node split over its
 *                                 tasks (matters when a node is overcommitted,
 *                                 e.g. replicas packed under --cdl-mps)
 *       task_cpus)                the task's own affinity once bound (by
 *                                 --cdl-bind or Slurm); 0 = unknown.
 * cpus_per_task 0 counts as 1 (Slurm's default); other zeros are unknown. */
unsigned spk_thread_share(unsigned cpus_per_task, unsigned step_cpus, unsigned local_tasks,
                          unsigned task_cpus);

#endif
