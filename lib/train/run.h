/* The state of one cdl_train_run, shared by the loop on host memory
 * (harness.c) and the pipelined loop on a GPU (gpu_loop.c). Internal. */
#ifndef CDL_TRAIN_RUN_H
#define CDL_TRAIN_RUN_H

#include <cdl/cdl.h>

#include "ddp.h"
#include "harness.h"

typedef struct gpu_loop gpu_loop;

typedef struct run {
    const cdl_train_config *cfg;
    cdl_rank_info ri;
    cdl_dist *dist;
    cdl_backend *be;
    cdl_dataset train, test;
    int have_train, have_test;
    cdl_model *model;
    cdl_optim *optim;
    ddp *ddp;
    cdl_loader *train_loader, *val_loader;
    cdl_schedule sched;
    train_report *rep;
    int classes;
    size_t sample_floats;
    /* Device buffers of max_batch samples. */
    float *x_dev, *dlogits, *sample_loss;
    int32_t *y_dev, *pred;
    /* Host copies of per-sample results. */
    float *h_loss;
    int32_t *h_pred;
    char last_path[1100], best_path[1100];
    gpu_loop *gpu;            /* the pipelined loop on a CUDA backend, else NULL */
} run;

/* Where an epoch's clock started, for progress and images/s. */
typedef struct epoch_clock {
    double t0, seen0;
    long spe;                 /* steps per epoch */
} epoch_clock;

/* What an epoch loop returns besides 0 (the epoch is done) and -1. */
#define EPOCH_MAX_STEPS 1     /* --max-steps reached */

/* harness.c: the dropout seed of a step (train_now: harness.h). */
uint64_t train_dropout_seed(uint64_t seed, long step);

/* harness.c: the ops of one step on device inputs x (n samples) and labels
 * y: forward, loss (per-sample loss and predictions into r->sample_loss,
 * r->pred); with train also backward, gradient averaging and the update.
 * The host loop and the GPU loop both run it, so their results match. */
int train_step_ops(run *r, const float *x, const int32_t *y, int n, int train, long step);

/* harness.c: after the optimizer step pos->step (counted in pos): progress,
 * on_step, the stop agreed by all ranks, --max-steps and --ckpt-every.
 * Returns 0 (go on), EPOCH_MAX_STEPS, CDL_EXIT_REQUEUE (stopped by a signal
 * after checkpointing) or -1. With a GPU loop it first makes the steps
 * still in flight count (gpu_loop_flush) wherever it stops or saves. */
int train_after_step(run *r, train_position *pos, const epoch_clock *ck, cdl_train_result *res);

/* gpu_loop.c. create: the loop's buffers on a CUDA backend (r->gpu stays
 * NULL on others); epoch: the training batches of one epoch, pipelined
 * (returns like train_after_step, 0 at the epoch's end); flush: waits for
 * the steps in flight and adds their results to pos. */
int gpu_loop_create(run *r);
void gpu_loop_free(run *r);
int gpu_loop_epoch(run *r, train_position *pos, const epoch_clock *ck, cdl_train_result *res);
int gpu_loop_flush(run *r, train_position *pos);
/* Whether a step counted so far carried a stop agreed by the ranks; -1
 * when the loop does not carry the agreement (a host collective does). */
int gpu_loop_stop_agreed(const run *r);

#endif
