/* --cdl-mps: which GPU each local task uses when N consecutive local ranks
 * share one GPU through MPS. Pure. */
#ifndef CDL_SPANK_PACKING_H
#define CDL_SPANK_PACKING_H

#include "lib/dist/contract.h"

#define SPK_MAX_GPUS 64

/* The step's GPUs on this node, in CUDA_VISIBLE_DEVICES order: indices
 * ("0,1") or UUIDs ("GPU-8f...", "MIG-..."). */
struct spk_gpus {
    int n;
    char id[SPK_MAX_GPUS][48];
};

/* Parses a CUDA_VISIBLE_DEVICES value; NULL or "" gives n = 0. Entries are
 * [A-Za-z0-9:-] only (the value comes from the job's environment). */
int spk_gpus_parse(const char *cvd, struct spk_gpus *g);

struct spk_pack {
    int replicas;     /* consecutive local ranks per GPU */
    int gpus_used;    /* ceil(local tasks / replicas) */
    int thread_pct;   /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per replica */
    char note[200];   /* a warning for the user, "" when none */
};

/* requested: --cdl-mps=N, 0 for ceil(local tasks / GPUs). pct_conf: the
 * admin's mps_thread_percentage, 0 for ceil(100 / replicas). Errors name the
 * counts and what to change. */
int spk_pack_plan(int local_tasks, int ngpus, int requested, int max_replicas, int pct_conf,
                  struct spk_pack *out);

/* Index into spk_gpus of local task `local_id`: the contract's GPU slot. */
static inline int spk_pack_gpu(const struct spk_pack *p, int local_id)
{
    return contract_gpu_slot(local_id, p->replicas);
}

/* Slurm's index of local task t's GPU for --cdl-bind=closest: the
 * contract's GPU slot (the GPU cdl-train opens) looked up in the step's
 * GPUs; -1 when the task has none (more tasks than GPUs) or the GPUs are
 * named by UUID. */
int spk_task_gpu_index(const struct spk_gpus *g, int local_id, int replicas_per_gpu);

/* Consecutive local tasks Slurm itself put on one GPU, from the step's
 * SLURMD_TRES_BIND: N for "gpu:single:N" (srun --ntasks-per-gpu=N, or
 * --gpu-bind=single:N; "gpu:verbose,single:N" too), else 1 (no binding,
 * per_task, map_gpu, mask_gpu, closest, an unreadable value). */
int spk_tres_bind_tasks_per_gpu(const char *tres_bind);

/* N of "gpu:per_task:N" (srun --gpus-per-task=N, --gpu-bind=per_task:N):
 * Slurm gives local task t the step's GPUs t*N .. t*N+N-1 of the node, in
 * order; 0 when the binding is another. */
int spk_tres_bind_per_task(const char *tres_bind);

/* The word of SLURMD_TRES_BIND's GPU binding that gives each task GPUs of
 * its own ("per_task" of --gpus-per-task or --gpu-bind=per_task:N,
 * "map_gpu", "mask_gpu", "single" of --ntasks-per-gpu): Slurm then sets
 * each task's CUDA_VISIBLE_DEVICES to its GPUs only. NULL for none,
 * closest, or another TRES's binding. */
const char *spk_tres_bind_task_gpus(const char *tres_bind);

/* Slurm's index of the GPU that srun --gpu-bind=map_gpu:LIST gives local
 * task `local_id` (LIST[local_id % its length]; "ID*COUNT" repeats an ID;
 * IDs are the node's GPU indexes), from SLURMD_TRES_BIND; -1 when the
 * binding is not a map_gpu list of decimal IDs. */
int spk_tres_bind_map_gpu(const char *tres_bind, int local_id);

#endif
