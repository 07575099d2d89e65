/* The training loop (loop.c): one epoch's batches, pipelined on a backend
 * with asynchronous entries (a GPU), step by step on one without (the CPU);
 * the same bookkeeping either way. */
#ifndef CDL_TRAIN_LOOP_H
#define CDL_TRAIN_LOOP_H

#include "checkpoint.h"
#include "run.h"

/* Where an epoch's clock started, for progress and images/s: t0 moves
 * forward by the time of --eval-every validations and checkpoint writes
 * between steps, which are no training. */
typedef struct epoch_clock {
    double t0, seen0;
    long spe;                 /* batches per epoch (optimizer steps: fewer with
                               * --accum-steps, train_steps_per_epoch) */
} epoch_clock;

/* What loop_epoch returns besides 0 (the epoch is done) and -1. */
#define EPOCH_MAX_STEPS 1     /* --max-steps reached */

/* The loop's buffers into r->loop (pinned staging, double-buffered device
 * inputs, graph inputs); free releases them. */
int loop_create(run *r);
void loop_free(run *r);

/* The training batches of one epoch. After each step: progress, on_step,
 * the stop agreed by all ranks, --max-steps and --ckpt-every, with the
 * steps in flight counted first wherever it stops or saves. Returns 0 at
 * the epoch's end, EPOCH_MAX_STEPS, CDL_EXIT_REQUEUE (stopped by a signal
 * after checkpointing), CDL_TRAIN_STOPPED (cfg->should_stop asked) or -1. */
int loop_epoch(run *r, train_position *pos, epoch_clock *ck, cdl_train_result *res);

/* Writes the checkpoint at pos into last.safetensors (SAVE_LAST) and/or
 * best.safetensors (SAVE_BEST), rank 0; every rank learns whether it
 * worked. Nothing for what = 0. */
enum { SAVE_LAST = 1, SAVE_BEST = 2 };
int loop_save(run *r, const train_position *pos, int what);

/* --eval-every's validation at pos: its line and record; a new lowest
 * loss goes into pos->best_val_loss and adds SAVE_BEST to *save. */
int loop_eval(run *r, train_position *pos, int *save);

/* Harness functions the loop uses (harness.c): optimizer steps per epoch
 * (batches / --accum-steps, rounded up), and the mean loss and accuracy on
 * every sample of loader (each rank its share, summed over ranks). */
long train_steps_per_epoch(const run *r);
int train_evaluate(run *r, cdl_loader *loader, double *loss, double *acc);

#endif
