/* The GPU a rank opens (rank contract 5, docs/rank-contract.md): one rule
 * for cdl-train, cdl-eval, cdl-predict, cdl-generate and programs. */
#include <stdlib.h>

#include <cdl/cdl.h>

#include "contract.h"

int cdl_rank_gpu(const cdl_rank_info *info, int visible, int *device)
{
    *device = -1;
    if (!info || info->world <= 1 || visible <= 0)
        return 0;   /* the first GPU; none: the backend says so */
    /* One GPU, or the launcher's binding gave this task its GPUs alone
     * (srun --gpus-per-task=2: CUDA_VISIBLE_DEVICES differs per task, and
     * LOCAL_RANK 2 asked for a third of its two): the first is its own. */
    if (visible == 1 || contract_gpu_bound_to_task(getenv(CDL_ENV_GPU_BIND))) {
        *device = 0;
        return 0;
    }
    int rpg = info->replicas_per_gpu;
    int slot = contract_gpu_slot(info->local_rank, rpg);
    if (slot >= visible)
        return cdl_error("LOCAL_RANK=%d with " CDL_ENV_REPLICAS_PER_GPU "=%d needs GPU %d, but "
                         "only %d are visible: start fewer ranks per node, pack them (raise "
                         CDL_ENV_REPLICAS_PER_GPU ", under MPS) or make more GPUs visible",
                         info->local_rank, rpg, slot, visible);
    *device = slot;
    return 0;
}
