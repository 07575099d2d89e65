/* Collective backends behind cdl_dist: a small vtable per backend.
 *
 * Every backend works on a group of ranks (all ranks, the ranks of one node,
 * or the node leaders); member i of a group is `ranks[i]` globally. Buffers
 * are host memory unless the backend says it takes device memory (nccl);
 * dist.c stages device buffers for the others. Calls on one coll are
 * collective over its group and must not run concurrently. */
#ifndef CDL_DIST_COLL_H
#define CDL_DIST_COLL_H

#include <stddef.h>

#include <cdl/dist.h>

#include "boot.h"

typedef enum coll_dtype { COLL_F32, COLL_F64 } coll_dtype;

static inline size_t coll_dtype_size(coll_dtype t)
{
    return t == COLL_F32 ? 4 : 8;
}

typedef struct coll coll;

typedef struct coll_ops {
    const char *name;
    /* In place over n elements; average divides the sum by the group size. */
    int (*allreduce)(coll *c, void *buf, size_t n, coll_dtype t, int average);
    int (*broadcast)(coll *c, void *buf, size_t bytes, int root);
    int (*barrier)(coll *c);
    /* out holds size * bytes, member order. */
    int (*allgather)(coll *c, const void *in, void *out, size_t bytes);
    /* ZeRO-1 (optional, NULL: dist.c falls back on allreduce / broadcasts).
     * The n elements of buf are split into shard_part's parts, member i
     * owning part i. reduce_scatter: in place, member i's part gets the sum
     * over members (divided by the group size when average), each element
     * summed in member order like allreduce, so the bits are allreduce's;
     * the rest of buf is left undefined. allgather_parts: in place, every
     * member's part of buf to every member. */
    int (*reduce_scatter)(coll *c, void *buf, size_t n, coll_dtype t, int average);
    int (*allgather_parts)(coll *c, void *buf, size_t n, coll_dtype t);
    /* Tells the group's other members this one gave up (why: the message),
     * so they fail at once instead of waiting for it; NULL when the
     * backend cannot (the others then time out or see this process die). */
    void (*abort)(coll *c, const char *why);
    void (*destroy)(coll *c);
    /* GPU backends only (NULL elsewhere): work queued without host waits.
     * enqueue_allreduce: in place on device memory, after everything queued
     * so far on the compute stream `after` (a cudaStream_t); join: `stream`
     * waits for every enqueued operation; poll: 0 while healthy, -1 with
     * cdl_error once an enqueued operation failed (the backend is then
     * aborted, so nothing waits on it forever). */
    int (*enqueue_allreduce)(coll *c, void *buf, size_t n, coll_dtype t, int average, void *after);
    /* enqueue_broadcast: `bytes` of device memory from member root to every
     * member, in place, after the work queued so far on `after` (optional:
     * NULL, and the sharded optimizer's step waits on the host). */
    int (*enqueue_broadcast)(coll *c, void *buf, size_t bytes, int root, void *after);
    int (*join)(coll *c, void *stream);
    int (*poll)(coll *c);
} coll_ops;

struct coll {
    const coll_ops *ops;
    int rank, size;          /* within the group */
    int device_memory;       /* 1: buffers are the compute backend's device pointers */
};

/* A group: this process is member `me` of `size`; ranks[i] is the global
 * rank of member i. `tag` names the group in keys and messages. */
typedef struct coll_group {
    int me, size;
    const int *ranks;
    const char *tag;
} coll_group;

/* One process. */
coll *coll_single_create(void);

/* Shared memory among the ranks of one node, in two steps around the
 * bootstrap fence: member 0 creates the segment and publishes its name
 * (before the fence), then everyone attaches (after it). */
typedef struct shm_seg shm_seg;
shm_seg *shm_prepare(const coll_group *g, const char *job_id, boot *b,
                     const cdl_dist_config *cfg);
/* threads: the CPU threads this rank keeps busy (its backend's; oversub.h). */
coll *shm_attach(shm_seg *seg, boot *b, int threads);   /* consumes seg, also on failure */
void shm_seg_discard(shm_seg *seg);

/* Open MPI over `g` (all ranks or the node leaders); every process of the
 * job calls it (MPI_Comm_split is collective), non-members get NULL with
 * *member = 0. MPI_Init and MPI_Comm_split, which nothing interrupts, run
 * under a watchdog (watchdog.h) that also looks at stop (NULL: never,
 * dist_create's): a process asked to stop in them exits with stop_status. */
coll *coll_mpi_create(const coll_group *g, int world_rank, int world, double timeout_s,
                      int *member, int (*stop)(void), int stop_status);
int coll_mpi_available(void);   /* built with MPI and launched by an MPI-capable launcher */

/* The slow fallback between nodes: values through rank 0's TCP store. */
coll *coll_store_create(const coll_group *g, store *st);

/* NCCL among g (one rank per GPU); device: the compute backend's GPU (its
 * device_index; -1: whichever is current), where the communicator, its
 * stream and events are made and every call runs, whatever device the
 * calling thread has current (it keeps it); host_buffers: stage through
 * device memory (when used between node leaders in hier). compute_stream
 * (a cudaStream_t on that GPU, NULL with host buffers only): device-buffer
 * collectives wait for the work queued on it first. */
int nccl_prepare(const coll_group *g, boot *b);
coll *coll_nccl_create(const coll_group *g, boot *b, int device, int host_buffers,
                       double timeout_s, void *compute_stream);

/* Hierarchical: `local` inside this rank's group (shm), `inter` between the
 * group leaders (NULL on non-leaders). group_of[r] and local_of[r] place
 * every global rank r. Takes ownership of local and inter. */
coll *coll_hier_create(coll *local, coll *inter, int group, int ngroups, const int *group_of,
                       const int *local_of, int world, int rank);

#endif
