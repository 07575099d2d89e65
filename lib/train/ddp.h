/* Gradient averaging for data-parallel training, wired into backward.
 *
 * The harness passes ddp_grad_ready as the model's cdl_grad_ready_fn; an
 * implementation may reduce finished gradient buckets while backward still
 * runs, and ddp_finish waits until every gradient is averaged over ranks. */
#ifndef CDL_TRAIN_DDP_H
#define CDL_TRAIN_DDP_H

#include <stddef.h>

#include <cdl/dist.h>
#include <cdl/model.h>
#include <cdl/optim.h>

typedef struct ddp ddp;

/* d may be NULL or a world of one: then every call is a no-op.
 * bucket_bytes: the gradient bucket size (0 = 25 MiB, PyTorch's). */
ddp *ddp_create(cdl_dist *d, cdl_model *m, size_t bucket_bytes);
void ddp_free(ddp *g);
/* The same, with shard = 1: ZeRO-1 (--shard-optimizer; a no-op with one
 * rank): each rank owns ddp_owned's part of the flat buffer, ddp_finish
 * reduce-scatters (only the owned part of the gradients is averaged
 * afterwards; with NCCL queued, ddp_queued, the whole buffer is), ddp_step
 * updates the owned part and all-gathers (queued on the GPU with NCCL). */
ddp *ddp_create_shard(cdl_dist *d, cdl_model *m, size_t bucket_bytes, int shard);
int ddp_sharded(const ddp *g);
/* The part [offset, offset+count) of the gradients this rank updates after
 * ddp_finish: everything unless sharded. */
void ddp_owned(const ddp *g, size_t *offset, size_t *count);
/* The optimizer for this rank: state for the owned part only when sharded
 * (its memory divided by the world size), for everything otherwise. */
cdl_optim *ddp_optim_create(ddp *g, const cdl_optim_config *cfg);
/* What replaces cdl_optim_step after ddp_finish: the update, then when
 * sharded the parameters gathered from their owners. */
int ddp_step(ddp *g, cdl_optim *o, float lr);
/* Sums v[0..n) (host) over the ranks when sharded, for a quantity each rank
 * computed over its owned part (clip-grad's squared norm); a no-op
 * otherwise (every rank then already holds the whole). Collective. */
int ddp_sum_shards(ddp *g, double *v, size_t n);
/* After ddp_finish: the sum of squares of the averaged gradients (clip-grad's
 * global norm squared), over the ranks' parts when sharded; unsharded the
 * same parts summed in rank order, so sharding changes no bit of it on the
 * flat backends (hier adds per node first: rounding). Collective when
 * sharded on the host (!ddp_norm_on_device). */
int ddp_grad_sumsq(ddp *g, double *out);
/* Whether every rank holds the whole averaged gradient after ddp_finish,
 * so ddp_grad_sumsq_dev can work without a collective: unsharded, or
 * sharded with the step queued on the GPU (NCCL allreduces the whole
 * buffer); not sharded on the host (a reduce-scatter). */
int ddp_norm_on_device(const ddp *g);
/* ddp_grad_sumsq's sum left on the device (backend.h's sumsq_dev, the same
 * bits): no host wait, capturable in a CUDA graph step. 0 = done, 1 = not
 * possible here (!ddp_norm_on_device, or the backend lacks sumsq_dev): use
 * ddp_grad_sumsq. */
int ddp_grad_sumsq_dev(ddp *g, double *out);
/* Waits, polling until CDL_TIMEOUT, for the work queued on the backend's
 * stream so far (NCCL's gradient allreduce among it) before a host wait
 * that would otherwise have no deadline; on timeout aborts the
 * communicator with an error naming the rank and `what`. A no-op without
 * queued collectives. */
int ddp_drain(ddp *g, const char *what);
/* Waits for the backend's step mark `slot` (cdl_backend_mark); with NCCL
 * queued, polled against CDL_TIMEOUT like ddp_drain ("rank R: WHAT did not
 * finish within ..."): a peer that died leaves NCCL's kernels, and so the
 * mark, waiting forever. */
int ddp_wait_mark(ddp *g, int slot, const char *what);
/* For a checkpoint (collective over the ranks): *full = o unless sharded;
 * sharded, rank 0 gets a new optimizer holding every rank's state (the
 * unsharded layout, written in the same file format) and the others NULL.
 * Free it with ddp_optim_release. */
int ddp_optim_gather(ddp *g, cdl_optim *o, cdl_optim **full);
void ddp_optim_release(cdl_optim *o, cdl_optim *full);
/* Makes every rank's parameters equal to rank 0's. */
int ddp_broadcast_params(ddp *g);
/* Makes every rank's model buffers (BatchNorm's running statistics) equal
 * to rank 0's: called before every training forward, like PyTorch's DDP
 * with broadcast_buffers=True. A no-op without buffers or peers. */
int ddp_broadcast_buffers(ddp *g);
/* cdl_model_allreduce_fn (ddp_create installs it on the model): sums
 * buf[0..count) (device memory) over the ranks in place, for SyncBatchNorm.
 * Waits for the gradient buckets already handed to the collective, so
 * calls never overlap. */
int ddp_sync_sum(void *g, float *buf, size_t count);
/* cdl_grad_ready_fn: [offset, offset+count) of the gradients is final. */
void ddp_grad_ready(void *g, size_t offset, size_t count);
/* Waits for all buckets; afterwards the gradients are averaged. When
 * ddp_queued (a GPU with NCCL), it waits on the GPU, not the host: the ops
 * queued after it see averaged gradients. */
int ddp_finish(ddp *g);

/* 1 when buckets are queued on the GPU; the host then learns of failures
 * only through ddp_poll, which a loop waiting for the GPU calls (with
 * ddp_timeout's deadline) so a dead peer cannot hang it. */
int ddp_queued(const ddp *g);
/* When ddp_queued: dev[0..n) (device memory) averaged over the ranks after
 * the work queued so far, and the compute stream waits for it. Small
 * values that ride with a step (the stop agreement) instead of a host
 * collective, which would wait for the whole step. */
int ddp_queue_average(ddp *g, float *dev, size_t n);
int ddp_poll(ddp *g);
double ddp_timeout(const ddp *g);
/* After giving up on a wait: frees the GPU of collectives stuck on peers. */
void ddp_abort(ddp *g, const char *why);

#endif
