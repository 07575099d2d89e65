/* What happens to the gradient between backward and the update (grads.c):
 * accumulation over the micro-batches of one optimizer step
 * (--accum-steps), clipping by global norm (--clip-grad), and which
 * parameters the update decays (--decay-params). */
#ifndef CDL_TRAIN_GRADS_H
#define CDL_TRAIN_GRADS_H

#include "run.h"

/* Samples of batch i of an epoch of `samples` per rank in batches of b
 * (the last one may be short). */
long train_batch_rows(long samples, int b, long i);

/* The micro-batch of loader batch `index` (epoch of `batches` batches of
 * `samples` samples per rank): sets r->micro, r->micros and r->group_rows.
 * Groups are batches [k*accum, (k+1)*accum) of the epoch, fewer at its
 * end and where a resumed epoch starts inside one. Returns 1 when this
 * batch ends an optimizer step. */
int train_micro_begin(run *r, long index, long batches, long samples);

/* The scale of the loss's gradient for a batch of n samples with
 * r->valid_rows labelled rows: 1/valid_rows (the mean over them, PyTorch's
 * with ignore_index), or with accumulation 1/(rows of the optimizer step),
 * so the summed gradient is the mean over the step's rows, the gradient
 * one batch of them all would give (with ignored labels: each
 * micro-batch's mean weighted by its share of the step's rows). 0 when no
 * row is labelled. */
float train_grad_scale(const run *r, int n);

/* Backward of the last forward into the model's gradients, reduced over
 * ranks as buckets finish when this micro-batch ends the step; earlier
 * micro-batches only add their gradient to r->grad_acc (no collective).
 * Returns 1 when the summed gradient is in the model's gradients and its
 * allreduce under way (ddp_finish and the update follow), 0 after an
 * earlier micro-batch. */
int train_backward(run *r);

/* PyTorch's clip_grad_norm_ coefficient: max_norm / (total + 1e-6) in
 * float, at most 1. */
float train_clip_coef(double total, float max_norm);
/* Whether --clip-grad can clip a gradient of global norm total: finite in
 * float, as train_clip_coef (and the GPU's clip_scale) compute it. A
 * finite double beyond float's range (3.4e38) gave coefficient 0, and the
 * step's update was a zero one in silence; PyTorch's norm, a float, is
 * infinite there, which error_if_nonfinite refuses. */
int train_norm_clippable(double total);
/* --clip-grad on the averaged gradient (after ddp_finish): its global L2
 * norm into r->grad_norm and, when above the limit, the gradient scaled
 * by train_clip_coef. A no-op (r->grad_norm NAN) without --clip-grad.
 * Returns 1, the gradient left as it is, when the norm (read on the host)
 * is NaN or infinite (train_norm_clippable): the caller skips the update, and the loop stops the
 * run when it counts the step (train_norm_error); scaled, an infinite
 * norm's coefficient 0 made NaN of every infinite element, and a NaN
 * norm's coefficient (NaN, taken as 1) let the gradient through, so the
 * update wrote NaN into the weights.
 * With r->norm_dev: both on the device (grad_norm NAN, the squared norm in
 * norm_dev), and a norm that cannot be clipped holds the update there
 * (backend.h's hold_updates: this step's and every later one's, until the
 * run ends), returning 0; else waits for the gradient on the host (sumsq), bounded by
 * CDL_TIMEOUT while NCCL's allreduce is queued (ddp_drain). */
int train_clip_grads(run *r);
/* Whether --clip-grad runs on the device (r->norm_dev): a backend with
 * sumsq_dev, clip_scale and hold_updates, unsharded or sharded over NCCL (ddp.h's
 * ddp_norm_on_device); then train_clip_grads waits for nothing on the host
 * and fits a CUDA graph step. */
int train_clip_on_device(const run *r);

/* --decay-params: resolves auto (2d for models with sequence layers, else
 * all) into r->decay_2d and gives the optimizer the ranges of parameters
 * with fewer than 2 dimensions (biases, norm weights) as undecayed. */
int train_decay_groups(run *r);

#endif
