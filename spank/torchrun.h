/* torchrun started as a --cdl-ddp task (srun --cdl-ddp torchrun ..., or
 * python -m torch.distributed.run / torch.distributed.launch): each task is
 * then one torchrun "node" whose agent spawns its own workers and gives
 * them its own RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
 * The contract tells torchrun the step's layout through its PET_* option
 * variables (contract.h); this module reads the task's command line for
 * what the plugin must adapt to or refuse. Pure: argv is passed in. */
#ifndef CDL_SPANK_TORCHRUN_H
#define CDL_SPANK_TORCHRUN_H

#include <stdint.h>

struct spk_torchrun {
    int found;               /* argv starts torchrun */
    int nproc;               /* --nproc_per_node N; 0: absent or not a number */
    int nproc_given;         /* the option was there (a number or not) */
    int standalone;          /* --standalone */
    long nnodes_min, nnodes_max;   /* --nnodes N or MIN:MAX; 0: absent */
    char nnodes[32];         /* --nnodes as written, for messages */
};

/* Fills t from a task's command line (argv[argc] need not be NULL). */
void spk_torchrun_parse(int argc, char *const *argv, struct spk_torchrun *t);

/* A layout torchrun would not run as one job: --standalone (a rendezvous
 * on each task's own node) in a step of several tasks, or --nnodes that
 * does not admit the step's task count (the agents would wait for nodes
 * that never come, or leave tasks out). -1 with spk_error() saying what to
 * run instead; 0 when fine or when argv is not torchrun. */
int spk_torchrun_check(const struct spk_torchrun *t, uint32_t ntasks, uint32_t local_tasks);

/* The workers' threads (OMP_NUM_THREADS, MKL_NUM_THREADS, which torchrun
 * passes on when set): the task's CPU share split over the workers, at
 * least 1. The worker count is --nproc_per_node, else env_nproc (the
 * task's PET_NPROC_PER_NODE, NULL when unset), else torchrun's default 1;
 * a value that is not a number ("gpu", "auto") gives 1, what torchrun sets
 * itself. *nproc gets the count used (0: unknown). Not torchrun: share. */
unsigned spk_torchrun_threads(const struct spk_torchrun *t, const char *env_nproc,
                              unsigned share, int *nproc);

#endif
