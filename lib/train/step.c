/* One step of the model: forward, loss, and for training backward,
 * gradient averaging and the update. The training loop (loop.c) and
 * validation (harness.c) both run it, so their results match. */
#include <limits.h>
#include <math.h>

#include "../core/rng.h"
#include "grads.h"
#include "pipeline.h"
#include "step.h"

uint64_t train_dropout_seed(uint64_t seed, long step)
{
    uint64_t x = seed ^ ((uint64_t)step * 0x9E3779B97F4A7C15ull);
    return rng_splitmix64(&x);
}

int train_step_ops(run *r, const float *x, const int32_t *y, int n, int train, long step)
{
    cdl_backend *be = r->be;
    if (train && ddp_broadcast_buffers(r->ddp) != 0)
        return -1;
    /* Each micro-batch its own dropout masks (accum 1: the step's). */
    long draw = train && r->accum > 1 ? step * r->accum + r->micro : step;
    const float *logits =
        cdl_model_forward(r->model, x, n, train, train_dropout_seed(r->cfg->seed, draw));
    if (!logits)
        return -1;
    float scale = train_grad_scale(r, n);
    int rows = n * r->positions;   /* cross-entropy rows: a prediction per position */
    if (r->cfg->label_smoothing > 0.0f)   /* every backend has it */
        be->ops->xent_ls_fwd_bwd(be, rows, r->classes, logits, y, r->cfg->label_smoothing,
                                 scale, r->dlogits, r->sample_loss, r->pred);
    else
        be->ops->xent_fwd_bwd(be, rows, r->classes, logits, y, scale, r->dlogits,
                              r->sample_loss, r->pred);
    if (train) {
        if (!train_backward(r))
            return 0;   /* an earlier micro-batch: no update yet */
        if (ddp_finish(r->ddp) != 0)
            return -1;
        int clip = train_clip_grads(r);
        /* A non-finite norm: no update (the loop stops the run at this
         * step's count, train_norm_error). */
        if (clip < 0 || (clip == 0 && ddp_step(r->ddp, r->optim,
                                                 cdl_schedule_lr(&r->sched, step)) != 0))
            return -1;
    }
    return 0;
}

/* Runs one batch through the model; with train, also backward and update.
 * Adds the batch's loss, correct count and labelled rows to sums[0..2]. */
int train_run_batch(run *r, const cdl_batch *b, int train, long step, double sums[3])
{
    cdl_backend *be = r->be;
    const float *x = b->x;
    const int32_t *y = b->y;
    int n = b->n, rows = n * r->positions;
    if (!be->host_memory) {
        be->ops->to_device(be, r->x_dev, b->x, (size_t)n * r->sample_floats * sizeof(float));
        be->ops->to_device(be, r->y_dev, b->y, (size_t)rows * sizeof(int32_t));
        x = r->x_dev;
        y = r->y_dev;
    }
    r->valid_rows = train_valid_rows(b->y, rows);
    if (train_step_ops(r, x, y, n, train, step) != 0)
        return -1;
    be->ops->to_host(be, r->h_loss, r->sample_loss, (size_t)rows * sizeof(float));
    be->ops->to_host(be, r->h_pred, r->pred, (size_t)rows * sizeof(int32_t));
    if (be->ops->sync(be) != 0)
        return -1;
    double loss, correct;
    long counted = train_batch_sums(r->h_loss, r->h_pred, b->y, rows, &loss, &correct);
    if (!isfinite(loss)) {
        diverge_hint h;
        char earlier[1200];
        const diverge_hint *hp = train_diverge_hint(r, train ? step : LONG_MAX, &h, earlier,
                                                    sizeof earlier);
        return train ? train_loss_error(r->ri.rank, loss, step, 0, hp)
                     : train_eval_loss_error(r->ri.rank, loss, hp);
    }
    sums[0] += loss;
    sums[1] += correct;
    sums[2] += counted;
    return 0;
}

