/* Which ranks share a GPU. Pure: unit-tested without GPUs.
 *
 * The rank contract says it (CDL_REPLICAS_PER_GPU consecutive local ranks
 * per GPU); the GPUs the ranks actually opened say it too (the device's
 * UUID, the same in every process whatever CUDA_VISIBLE_DEVICES says).
 * Collectives trust the contract (NCCL hangs when two of its ranks share a
 * GPU; an MPS group split over two GPUs reduces wrongly), so they check
 * that both agree before connecting. */
#ifndef CDL_DIST_GPU_GROUP_H
#define CDL_DIST_GPU_GROUP_H

#include <stddef.h>

#include "lib/dist/contract.h"   /* contract_gpu_slot: the slot rule */

/* One rank as the layout exchange sees it. */
typedef struct gpu_place {
    int node, local_rank;
    int replicas_per_gpu;     /* the rank's CDL_REPLICAS_PER_GPU: one value per
                               * node, which may differ between nodes (a node
                               * with one task of a packed step has 1) */
    unsigned char uuid[16];   /* all zero: no GPU (CPU backend) */
} gpu_place;

/* Checks that ranks on one node have the same GPU exactly when the contract
 * puts them in the same slot, and the same replicas_per_gpu. Returns 0, or -1
 * with cdl_error naming the two ranks, their GPUs and what to set. The GPUs
 * of ranks without one are not checked. */
int gpu_groups_check(const gpu_place *p, int n);

/* "GPU-1a2b3c4d-..." for messages (like nvidia-smi -L); out holds 41 bytes. */
void gpu_uuid_str(const unsigned char uuid[16], char out[41]);

#endif
