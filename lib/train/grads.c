/* Gradient accumulation and clipping (grads.h).
 *
 * Accumulation: each micro-batch's backward overwrites the model's
 * gradients (cdl_model_backward); all but the last add them into
 * r->grad_acc (the first copies), the last adds r->grad_acc into the
 * model's gradients and only then reports them to the data-parallel
 * reduction, so ranks exchange one gradient per optimizer step, like
 * PyTorch's DDP under no_sync(). Each micro-batch's loss is scaled by the
 * step's sample count, so the sum is the mean over all of the step's
 * samples: one batch accum times larger, up to float rounding (batch norm
 * is the exception: it normalises each micro-batch with its own
 * statistics). */
#include <math.h>

#include "grads.h"

long train_batch_rows(long samples, int b, long i)
{
    long left = samples - i * (long)b;
    return left < 0 ? 0 : left < b ? left : b;
}

int train_micro_begin(run *r, long index, long batches, long samples)
{
    if (r->micro_next == 0) {
        /* Groups lie on the epoch's grid of accum batches, whatever batch
         * the epoch (or a resumed one) starts at: a resume with another
         * --accum-steps starts inside a group of the new grid and takes
         * the rest of it as a shorter step, so the epoch ends at the step
         * count the schedule has there. */
        long left = batches - index, to_grid = r->accum - index % r->accum;
        long n = left < to_grid ? left : to_grid;
        r->micros = (int)(n > 0 ? n : 1);
        r->group_rows = 0;
        for (long i = index; i < index + r->micros; i++)
            r->group_rows += r->cfg->drop_last ? r->cfg->batch_size
                                               : train_batch_rows(samples, r->cfg->batch_size, i);
    }
    r->micro = r->micro_next;
    int last = r->micro + 1 >= r->micros;
    r->micro_next = last ? 0 : r->micro + 1;
    return last;
}

float train_grad_scale(const run *r, int n)
{
    long rows = (long)n * r->positions, valid = r->valid_rows;
    if (valid <= 0)
        return 0.0f;   /* every label ignored: no gradient (PyTorch: NaN) */
    if (r->accum > 1 && r->group_rows > 0) {
        long all = r->group_rows * r->positions;
        if (valid == rows)
            return 1.0f / (float)all;
        /* Ignored labels: this micro-batch's mean, weighted by its share
         * of the step's rows. */
        return (float)((double)rows / (double)all / (double)valid);
    }
    return 1.0f / (float)valid;
}

int train_backward(run *r)
{
    if (r->accum <= 1) {
        cdl_model_backward(r->model, r->dlogits, ddp_grad_ready, r->ddp);
        return 1;
    }
    cdl_backend *be = r->be;
    float *g = cdl_model_grads(r->model);
    size_t np = cdl_model_nparams(r->model);
    int last = r->micro + 1 >= r->micros;
    cdl_model_backward(r->model, r->dlogits, NULL, NULL);
    if (!last) {
        if (r->micro == 0)
            be->ops->copy(be, r->grad_acc, g, np * sizeof(float));
        else
            be->ops->accumulate(be, np, g, r->grad_acc);
        return 0;
    }
    if (r->micro > 0)
        be->ops->accumulate(be, np, r->grad_acc, g);
    ddp_grad_ready(r->ddp, 0, np);
    return 1;
}

float train_clip_coef(double total, float max_norm)
{
    float coef = max_norm / ((float)total + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

int train_norm_clippable(double total)
{
    return isfinite((float)total);
}

int train_clip_on_device(const run *r)
{
    const cdl_backend_ops *ops = r->be->ops;
    return r->cfg->clip_grad > 0 && ops->sumsq_dev && ops->clip_scale && ops->hold_updates &&
           ddp_norm_on_device(r->ddp);
}

int train_clip_grads(run *r)
{
    r->grad_norm = NAN;
    if (!(r->cfg->clip_grad > 0))
        return 0;
    cdl_backend *be = r->be;
    float *g = cdl_model_grads(r->model);
    size_t off, np;   /* --shard-optimizer: this rank's part, the norm over all parts */
    double sq;
    ddp_owned(r->ddp, &off, &np);
    if (r->norm_dev && ddp_grad_sumsq_dev(r->ddp, r->norm_dev) == 0) {
        /* No host wait: the norm is read with the step's results. A
         * norm that cannot be clipped holds this update and every one
         * queued behind it on the device (the loop stops the run when it
         * reads the norm, train_norm_error). */
        be->ops->clip_scale(be, g + off, np, r->norm_dev, r->cfg->clip_grad);
        be->ops->hold_updates(be, r->norm_dev);
        return 0;
    }
    /* sumsq waits on the host for the stream, NCCL's allreduce on it too. */
    if (ddp_drain(r->ddp, "the gradient norm of --clip-grad") != 0 ||
        ddp_grad_sumsq(r->ddp, &sq) != 0)
        return -1;
    r->grad_norm = sqrt(sq);
    if (!train_norm_clippable(r->grad_norm))
        return 1;   /* every rank: the norm is over all of them */
    float coef = train_clip_coef(r->grad_norm, r->cfg->clip_grad);
    /* A coefficient of 1 changes no bit (PyTorch multiplies anyway). */
    if (coef < 1.0f)
        be->ops->scale(be, g + off, coef, np);
    return 0;
}

/* Whether the model has sequence layers (the gpt built-in): their
 * parameter groups follow nanoGPT by default. */
static int sequence_model(const cdl_model *m)
{
    const cdl_model_spec *spec = cdl_model_get_spec(m);
    for (int i = 0; i < spec->nlayers; i++)
        if (spec->layers[i].kind == CDL_LAYER_EMBEDDING ||
            spec->layers[i].kind == CDL_LAYER_ATTENTION)
            return 1;
    return 0;
}

int train_decay_groups(run *r)
{
    int mode = r->cfg->decay_params;
    r->decay_2d = mode == CDL_DECAY_2D || (mode == CDL_DECAY_AUTO && sequence_model(r->model));
    if (!r->decay_2d)
        return 0;
    int nv = cdl_model_nviews(r->model), n = 0;
    size_t *off = cdl_calloc((size_t)nv + 1, sizeof *off);
    size_t *cnt = cdl_calloc((size_t)nv + 1, sizeof *cnt);
    int rc = -1;
    if (!off || !cnt)
        goto out;
    /* Views in offset order (the flat layout); neighbours merge. */
    size_t at = 0;
    for (;;) {
        const cdl_param_view *next = NULL;
        for (int i = 0; i < nv; i++) {
            const cdl_param_view *v = cdl_model_view(r->model, i);
            if (v->offset >= at && v->numel > 0 && (!next || v->offset < next->offset))
                next = v;
        }
        if (!next)
            break;
        at = next->offset + next->numel;
        if (next->ndim >= 2)
            continue;
        if (n > 0 && off[n - 1] + cnt[n - 1] == next->offset)
            cnt[n - 1] += next->numel;
        else {
            off[n] = next->offset;
            cnt[n++] = next->numel;
        }
    }
    rc = cdl_optim_set_no_decay(r->optim, off, cnt, n);
out:
    cdl_free(off);
    cdl_free(cnt);
    return rc;
}
