/* State shared by the SPANK-facing files: plugin.c (entry points, options),
 * remote.c (slurmstepd) and epilog.c (job epilog). One instance per process;
 * slurmstepd's task children inherit it by fork. */
#ifndef CDL_SPANK_PLUGIN_H
#define CDL_SPANK_PLUGIN_H

#include <slurm/spank.h>

#include "spank/conf.h"
#include "spank/contract.h"
#include "spank/secret.h"
#include "spank/mps.h"
#include "spank/options.h"
#include "spank/packing.h"

#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif

struct spk_state {
    struct spk_conf conf;
    int conf_broken;                 /* plugstack.conf is wrong where failing
                                      * would take the node down: do nothing */
    int conf_refuse;                 /* plugstack.conf is wrong in an srun whose
                                      * job asked for --cdl-* options, or in a
                                      * normal step: every option fails */
    char conf_error[512];            /* the parse error, for conf_refuse */
    struct spk_opts opts;

    /* slurmstepd, filled by init_post_opt/user_init for a normal step */
    int active;                      /* something to do in this step */
    enum spk_bind_mode bind;         /* effective binding */
    struct spk_step step;
    /* SLURM_STEP_NODELIST: Slurm compresses only runs of consecutive
     * names, so a fragmented allocation takes ~7 bytes a node
     * ("nid[001234,001236,...]"): 1 KiB held ~140 nodes. */
    char nodelist[64 * 1024];
    char distribution[64];
    char step_gpus_str[1024];        /* the step's CUDA_VISIBLE_DEVICES */
    struct spk_gpus step_gpus;
    struct spk_pack pack;
    struct spk_step_contract sc;
    char token[SPK_SECRET_HEX + 1];       /* the step's store secret (secret.h) */
    struct spk_mps mps;
    int mps_ready;                   /* spk_mps_setup succeeded */
    unsigned step_cpus;              /* slurmstepd's CPUs: the step's on this node */
    char cpu_bind[256];              /* SLURM_CPU_BIND as srun sent it: the
                                      * user's --cpu-bind ("" = none) */
    char threads_per_core[16];       /* SLURM_THREADS_PER_CORE (--hint,
                                      * --threads-per-core), "" = unset */
    char step_cores[1024];           /* S_STEP_ALLOC_CORES: Slurm's cores of
                                      * the step on this node ("" = unknown
                                      * or longer: then unused) */
    char job_cores[1024];            /* S_JOB_ALLOC_CORES, likewise */
    int slurm_major, slurm_minor;    /* Slurm's version (0 = unknown): how it
                                      * maps its core numbers (stepcpus.h) */
#ifdef HAVE_HWLOC
    hwloc_topology_t topo;
    hwloc_bitmap_t others;           /* CPUs of the job's other steps running
                                      * here (overlap.h), NULL = none read */
#endif
    char other_steps[96];            /* their ids, "3,5" */
    int have_topo;
    int keep_on_bad_exit;            /* SLURM_KILL_BAD_EXIT=0 in the job's
                                      * environment: a failed rank does not
                                      * stop the step (remote.c) */
    /* An error found where failing does not stop the step (user_init) or
     * before the tasks exist: every task reports it and fails. */
    char deferred[1024];
};

extern struct spk_state spk_g;

/* remote.c */
int spk_remote_post_opt(spank_t sp);
int spk_remote_user_init(spank_t sp);
int spk_remote_task_privileged(spank_t sp);
int spk_remote_task_init(spank_t sp);
int spk_remote_task_exit(spank_t sp);
int spk_remote_exit(spank_t sp);
/* A task of a step that asked for options the node cannot honour (a wrong
 * plugstack.conf): prints spk_g.deferred and ends the task; 0 when the
 * step asked for nothing. */
int spk_remote_refused(void);

/* epilog.c */
int spk_epilog(spank_t sp);

/* Step ids above this are the batch script, extern and interactive steps. */
#define SPK_MAX_NORMAL_STEP_ID 0xfffffff0u

#endif
