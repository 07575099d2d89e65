/* The user's options (--cdl-ddp, --cdl-mps[=N], --cdl-bind=...): strict
 * parsing of their values. The SPANK option table itself is in plugin.c. */
#ifndef CDL_SPANK_OPTIONS_H
#define CDL_SPANK_OPTIONS_H

#include <sched.h>

#include "spank/conf.h"

/* What the user asked for; filled by the option callbacks, which Slurm may
 * call more than once per process (slurmstepd does): parsing is idempotent. */
struct spk_opts {
    int ddp;                  /* --cdl-ddp, or implied by --cdl-mps */
    int mps;                  /* --cdl-mps given */
    int mps_n;                /* replicas per GPU, 0 = local tasks / GPUs */
    int bind_given;           /* --cdl-bind given (else the admin's default_bind) */
    enum spk_bind_mode bind;
    int bind_verbose;
};

/* --cdl-mps[=N]: arg NULL or "" means automatic (0); else 1..max digits. */
int spk_opt_mps(const char *arg, int max, int *n);

/* --cdl-bind=none|cores|closest[,verbose] (also "verbose" alone = the
 * default mode with the map printed; refused when that mode is none). */
int spk_opt_bind(const char *arg, enum spk_bind_mode dflt, enum spk_bind_mode *mode,
                 int *verbose);

/* 1 when SLURM_CPU_BIND (the value srun exports for --cpu-bind) asks Slurm
 * for a binding of its own; "none", "quiet" and "verbose" alone do not.
 * Only the step's launch environment (init_post_opt) holds the user's
 * value: in a task, task/affinity has replaced it with the masks it
 * applied, also when the user asked for nothing. */
int spk_user_cpu_bind(const char *slurm_cpu_bind);

/* 1 when SLURM_CPU_BIND is srun's own rendering of --hint=nomultithread,
 * compute_bound or memory_bound, or of --threads-per-core (one word,
 * "threads" or "cores", with SLURM_THREADS_PER_CORE set; an explicit
 * --cpu-bind=cores reads "quiet,corescores"), not a binding the user
 * asked for: --cdl-bind then binds, one PU per core where
 * threads_per_core is "1". --hint=multithread sets no thread count and
 * stays the user's binding. */
int spk_cpu_bind_from_hint(const char *slurm_cpu_bind, const char *threads_per_core);

/* The union of the CPUs in SLURM_CPU_BIND_LIST as task/affinity writes it
 * for SLURM_CPU_BIND_TYPE=mask_cpu: ("0x3" or "0x1,0x2", one hexadecimal
 * mask per local task): the step's CPUs on this node. Returns 0, or -1 for
 * anything else (the caller keeps the task's own affinity). */
int spk_cpu_mask_union(const char *list, cpu_set_t *out);

/* 1 when the union of SLURM_CPU_BIND_LIST's masks holds the task's own
 * affinity (own), as the masks task/affinity applied to this step's tasks
 * do; 0 when they are another step's, inherited through the environment
 * (an srun inside a task of a bound step): the plan then starts from the
 * task's own CPUs, never from CPUs it may not use. */
int spk_cpu_mask_is_step(const cpu_set_t *union_set, const cpu_set_t *own);

/* Slurm's CPUs per core on this node as its allocation counts them: the
 * job's CPUs on the node (SLURM_CPUS_ON_NODE) over the number of its cores
 * (S_JOB_ALLOC_CORES, "0-3,8"); 0 when unknown or not a whole number. 1 on
 * an SMT node means Slurm counts one CPU a core: each PU a core (CPUs=N
 * alone) or each core (ThreadsPerCore=1), stepcpus.h decides which. */
int spk_slurm_threads(const char *job_cores, const char *cpus_on_node);

#endif
