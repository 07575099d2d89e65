/* cdl_dist for GPU training, internal to libcdl (lib/train/ddp.c): the
 * gradient allreduce queued on the GPU instead of waited for on the host.
 * Only where the collective backend can (nccl with a CUDA compute
 * backend); elsewhere dist_can_enqueue is 0 and callers use
 * cdl_dist_allreduce. */
#ifndef CDL_DIST_DIST_GPU_H
#define CDL_DIST_DIST_GPU_H

#include <stddef.h>

#include <cdl/dist.h>

int dist_can_enqueue(const cdl_dist *d);
/* Averages dev[0..n) over the ranks after the work queued so far on the
 * compute backend's stream, on the collective's own stream. */
int dist_enqueue_allreduce(cdl_dist *d, float *dev, size_t n);
/* Whether dist_enqueue_allgather_shards works here too (the sharded
 * optimizer's step then waits for nothing on the host). */
int dist_can_enqueue_shards(const cdl_dist *d);
/* cdl_dist_allgather_shards of dev[0..n) (device memory) queued like the
 * allreduces: each owner's part broadcast after the work queued so far on
 * the compute stream (its update). */
int dist_enqueue_allgather_shards(cdl_dist *d, float *dev, size_t n);
/* The compute stream waits (on the GPU) for every collective enqueued. */
int dist_enqueue_join(cdl_dist *d);
/* 0 while the queued allreduces are healthy; -1 with cdl_error once one
 * failed (the collective is then aborted and the cdl_dist unusable). */
int dist_enqueue_poll(cdl_dist *d);
/* Gives up: aborts the collective (NCCL kernels stuck on a dead peer end). */
void dist_abort(cdl_dist *d, const char *why);
/* The timeout of every wait for a peer, seconds (CDL_TIMEOUT). */
double dist_timeout(const cdl_dist *d);

#endif
