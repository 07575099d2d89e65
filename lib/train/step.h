/* One step of the model (step.c): the same ops for the training loop and
 * for validation, so results do not depend on which drives them. */
#ifndef CDL_TRAIN_STEP_H
#define CDL_TRAIN_STEP_H

#include "run.h"

/* The dropout seed of a step. */
uint64_t train_dropout_seed(uint64_t seed, long step);

/* The ops of one step on device inputs x (n samples) and labels y:
 * forward, loss (per-sample loss and predictions into r->sample_loss,
 * r->pred); with train also backward, gradient averaging and the update. */
int train_step_ops(run *r, const float *x, const int32_t *y, int n, int train, long step);

/* One batch from host memory, complete before it returns (validation):
 * train_step_ops, then the batch's loss, correct count and labelled rows
 * (samples, or tokens of a language model) added to sums[0..2]. */
int train_run_batch(run *r, const cdl_batch *b, int train, long step, double sums[3]);

#endif
