/* CPU binding plans, one planner for the plugin (--cdl-bind) and cdlrun
 * (--bind cores). The plan is a pure function of (topology, allowed cpuset,
 * number of local tasks, each task's GPU), so it is tested on saved hwloc
 * XML topologies (tests/topologies/, tests/unit/test_bind.c).
 *
 *  cores    the allowed cores (a core counts with the PUs of it that are
 *           allowed) are cut into contiguous, balanced blocks, one per task.
 *           With more tasks than cores the tasks are spread over the
 *           cores and the tasks of a core split its PUs (one thread each);
 *           only with more tasks on a core than it has PUs do neighbours
 *           share one (contract_share: consecutive local ranks are the
 *           ones that share a GPU, so they also share caches).
 *  closest  each GPU's tasks get free allowed cores local to the GPU (its
 *           domain: the GPU's nearest non-I/O ancestor, widened upwards
 *           until it holds an allowed core), the most local domains
 *           first; the GPUs of one domain split it by their numbers of
 *           tasks, each GPU's tasks side by side. A domain takes its share
 *           of the free cores and leaves at least one for every task still
 *           to be placed; one with fewer free cores than tasks is widened
 *           upwards to the nearest free cores rather than doubling tasks
 *           up while other cores idle (the note says so). So no two tasks
 *           share a core unless there are more tasks than cores. Tasks
 *           without a GPU found in the topology get the cores left, split
 *           as with `cores`, and the note says so.
 *
 * A task's GPU is the contract's slot (contract_task_gpu): the GPU
 * cdl-train opens. GPU k (Slurm's index, as in CUDA_VISIBLE_DEVICES without
 * device cgroups) is the OS device "nvml<k>" when hwloc's NVML backend named
 * them, else the k-th NVIDIA PCI display/3D controller in bus order (the
 * order of NVML and of the /dev/nvidia<k> minors that Slurm's gres.conf
 * lists). Errors go into a contract_err. */
#ifndef CDL_DIST_BIND_H
#define CDL_DIST_BIND_H

#include <stddef.h>

#include "lib/dist/contract.h"

enum bind_mode { BIND_CORES = 1, BIND_CLOSEST = 2 };

#ifdef HAVE_HWLOC
#include <hwloc.h>

/* Loads the machine's topology, or the XML at xml_path when given. with_io
 * keeps PCI devices and OS devices (needed for `closest` only: slower).
 * CPUs outside the process's cpuset are kept (HWLOC_TOPOLOGY_FLAG_INCLUDE_
 * DISALLOWED): logical numbers are the node's, as Slurm's are. */
int bind_load(hwloc_topology_t *topo, const char *xml_path, int with_io, contract_err *e);

/* A topology loaded from the administrator's XML (plugstack topology=)
 * must be this node's: a file saved on a bigger node (or inside a job's
 * cpuset) planned from cores this node does not have, and the tasks
 * silently shared the few that match (two tasks on a 2-CPU node both on
 * "cores 0 (PUs 0-1)" of a 16-PU file). Returns 0 when the topology has
 * `online` PUs (the node's online CPUs), else -1 with a message naming
 * the file and both counts. */
int bind_check_node(hwloc_topology_t topo, int online, const char *xml_path, contract_err *e);

/* The GPU with Slurm index k, or NULL. */
hwloc_obj_t bind_gpu(hwloc_topology_t topo, int k);

/* Fills out[0..ntasks-1] (allocated by the caller with hwloc_bitmap_alloc)
 * for mode cores or closest. task_gpu[i] is task i's GPU index, -1 for none
 * (NULL: no task has one). note (may be NULL) receives the plan's remarks
 * for the verbose map ("; " between them), "" when there is none: tasks
 * without a GPU in the topology (always the first remark), a GPU whose
 * tasks were given cores farther away, more tasks than cores. Errors: no
 * allowed core. */
int bind_plan(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, enum bind_mode mode,
              int ntasks, const int *task_gpu, hwloc_cpuset_t *out, char *note, size_t notelen,
              contract_err *e);

/* Narrows allowed (the CPUs a task may use) to Slurm's cores of the step
 * on this node, `cores` as S_STEP_ALLOC_CORES gives them ("0-1,4": Slurm's
 * core numbers on the node, which are hwloc's logical core indexes where
 * slurm.conf describes the node as hwloc sees it). For tasks nothing bound
 * to the step's own CPUs: under TaskPlugin=task/none (or task/cgroup
 * without ConstrainCores) every task may run on the whole node, and the
 * plans of two jobs sharing it both started at core 0; a task confined to
 * its job's CPUs only (a cpuset of the job, or of the step an srun ran
 * inside) put two steps of one job on the same cores. Only ever narrows:
 * the result is the step's cores within allowed.
 *
 * slurm_threads is Slurm's CPUs per listed core on this node (the job's
 * CPUs on the node over its cores; 0: unknown). Where slurm.conf gives an
 * SMT node no threads (CPUs=N alone, usual with CR_CPU) Slurm counts each
 * PU as a core: with slurm_threads 1, or numbers past the topology's
 * cores, the list is read as PUs in Slurm's order (hwloc's logical PU
 * indexes, core by core). A node set to ThreadsPerCore=1 on SMT hardware
 * also counts one CPU a core, but its numbers are whole cores (Slurm 23.11
 * on, or where the task's cpuset says so): the plugin's caller
 * (spank/stepcpus.c) then passes the hardware's threads a core.
 *
 * Returns 1 when narrowed; 0 when the list is empty, names all of allowed,
 * or none of it (then with a note), when hwloc does not see all the node's
 * CPUs (offline CPUs: its numbers need not be Slurm's), or when it cannot
 * be read as this node's cores (malformed, a core the topology lacks:
 * slurm.conf describes another machine), then with a note (may be NULL)
 * saying why. */
int bind_slurm_cores(hwloc_topology_t topo, hwloc_cpuset_t allowed, const char *cores,
                     int slurm_threads, char *note, size_t notelen);

/* Keeps the first allowed PU of each core in allowed (srun
 * --hint=nomultithread, --threads-per-core=1: one thread per core). */
void bind_one_pu_per_core(hwloc_topology_t topo, hwloc_cpuset_t allowed);

/* The allowed cores (or PUs when hwloc knows no cores): their number. */
int bind_count_units(hwloc_topology_t topo, hwloc_const_cpuset_t allowed);

/* "cores 0-3 (PUs 0-7)": logical core indexes and OS PU numbers of set. */
void bind_describe(hwloc_topology_t topo, hwloc_const_cpuset_t set, char *buf, size_t len);

#endif /* HAVE_HWLOC */
#endif
