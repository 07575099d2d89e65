/* Ranks sharing a GPU: the contract against the GPUs opened (gpu_group.h). */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "contract.h"
#include "gpu_group.h"

void gpu_uuid_str(const unsigned char u[16], char out[41])
{
    snprintf(out, 41,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
             u[13], u[14], u[15]);
}

static int has_gpu(const gpu_place *p)
{
    static const unsigned char zero[16];
    return memcmp(p->uuid, zero, sizeof zero) != 0;
}

int gpu_groups_check(const gpu_place *p, int n)
{
    for (int a = 0; a < n; a++) {
        for (int b = a + 1; b < n; b++) {
            if (p[a].node != p[b].node)
                continue;
            int rpg = p[a].replicas_per_gpu;
            if (p[b].replicas_per_gpu != rpg)
                return cdl_error("ranks %d and %d (LOCAL_RANK %d and %d on node %d) disagree on "
                                 CDL_ENV_REPLICAS_PER_GPU " (%d and %d): the launcher must give "
                                 "the ranks of a node the same value",
                                 a, b, p[a].local_rank, p[b].local_rank, p[a].node, rpg,
                                 p[b].replicas_per_gpu);
            if (!has_gpu(&p[a]) || !has_gpu(&p[b]))
                continue;
            int same_gpu = !memcmp(p[a].uuid, p[b].uuid, 16);
            int same_slot = contract_gpu_slot(p[a].local_rank, rpg) == contract_gpu_slot(p[b].local_rank, rpg);
            if (same_gpu == same_slot)
                continue;
            char ua[41], ub[41];
            gpu_uuid_str(p[a].uuid, ua);
            gpu_uuid_str(p[b].uuid, ub);
            if (same_gpu)
                return cdl_error("ranks %d and %d (LOCAL_RANK %d and %d on node %d) both use GPU "
                                 "%s, but " CDL_ENV_REPLICAS_PER_GPU "=%d gives them GPUs of "
                                 "their own: set " CDL_ENV_REPLICAS_PER_GPU " to the number of "
                                 "ranks per GPU (packing them under MPS), or give every rank "
                                 "its own GPU (srun --gpus-per-task=1, or more GPUs in "
                                 "CUDA_VISIBLE_DEVICES)",
                                 a, b, p[a].local_rank, p[b].local_rank, p[a].node, ua, rpg);
            return cdl_error("ranks %d and %d (LOCAL_RANK %d and %d on node %d) share a GPU "
                             "under " CDL_ENV_REPLICAS_PER_GPU "=%d but opened different GPUs "
                             "(%s and %s): make CUDA_VISIBLE_DEVICES show each group of "
                             "replicas the same GPU, or lower " CDL_ENV_REPLICAS_PER_GPU,
                             a, b, p[a].local_rank, p[b].local_rank, p[a].node, rpg, ua, ub);
        }
    }
    return 0;
}
