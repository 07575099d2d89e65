/* The ops that run cdl's own kernels: host-side argument preparation, the
 * graph recorder hook, the launch and its check. Kernels are in the .cu
 * files (launchers declared in kernels.h). */
#include <math.h>

#include "kernels/cuda/impl.h"
#include "kernels/cuda/scalars.h"

/* Signature of a pooling op: the descriptor and the buffers. */
static uint64_t pool_sig(int op, const cdl_pool2d_desc *d, const void *a, const void *b,
                         const void *c)
{
    const uint64_t v[] = {(uint64_t)d->n, (uint64_t)d->c, (uint64_t)d->h, (uint64_t)d->w,
                          (uint64_t)d->k, (uint64_t)d->stride, (uint64_t)d->pad,
                          (uint64_t)d->oh, (uint64_t)d->ow, sigp(a), sigp(b), sigp(c)};
    return cbe_sig(op, v, sizeof v / sizeof v[0]);
}

static int pool_empty(const cdl_pool2d_desc *d)
{
    return d->n <= 0 || d->c <= 0 || d->oh <= 0 || d->ow <= 0 || d->h <= 0 || d->w <= 0;
}

void cbe_fill(cdl_backend *be, float *x, float value, size_t n)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    cuk_val_sc sc = {value};
    const uint64_t a[] = {sigp(x), n};
    const void *dyn;
    if (cbe_graph_op(ci, "fill", cbe_sig(OPSIG_FILL, a, 2), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_fill(ci->stream, x, n, sc, dyn));
}

void cbe_scale(cdl_backend *be, float *x, float a_, size_t n)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    cuk_val_sc sc = {a_};
    const uint64_t a[] = {sigp(x), n};
    const void *dyn;
    if (cbe_graph_op(ci, "scale", cbe_sig(OPSIG_SCALE, a, 2), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_scale(ci->stream, x, n, sc, dyn));
}

void cbe_maxpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y,
                     int32_t *argmax)
{
    cbe *ci = cbe_of(be);
    if (pool_empty(d))
        return;
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "maxpool_fwd", pool_sig(OPSIG_MAXPOOL_FWD, d, x, y, argmax), NULL, 0,
                     &dyn))
        return;
    CU_CHECK(ci, cuk_maxpool_fwd(ci->stream, *d, x, y, argmax));
}

void cbe_maxpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy,
                     const int32_t *argmax, float *dx)
{
    cbe *ci = cbe_of(be);
    if (pool_empty(d))
        return;
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "maxpool_bwd", pool_sig(OPSIG_MAXPOOL_BWD, d, dy, argmax, dx), NULL, 0,
                     &dyn))
        return;
    CU_CHECK(ci, cuk_maxpool_bwd(ci->stream, *d, dy, argmax, dx));
}

void cbe_avgpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (pool_empty(d))
        return;
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "avgpool_fwd", pool_sig(OPSIG_AVGPOOL_FWD, d, x, y, NULL), NULL, 0,
                     &dyn))
        return;
    CU_CHECK(ci, cuk_avgpool_fwd(ci->stream, *d, x, y));
}

void cbe_avgpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (pool_empty(d))
        return;
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "avgpool_bwd", pool_sig(OPSIG_AVGPOOL_BWD, d, dy, dx, NULL), NULL, 0,
                     &dyn))
        return;
    CU_CHECK(ci, cuk_avgpool_bwd(ci->stream, *d, dy, dx));
}

void cbe_relu_fwd(cdl_backend *be, size_t n, const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {n, sigp(x), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "relu_fwd", cbe_sig(OPSIG_RELU_FWD, a, 3), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_relu_fwd(ci->stream, n, x, y));
}

void cbe_relu_bwd(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {n, sigp(y), sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, "relu_bwd", cbe_sig(OPSIG_RELU_BWD, a, 4), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_relu_bwd(ci->stream, n, y, dy, dx));
}

void cbe_dropout_fwd(cdl_backend *be, size_t n, float p, uint64_t seed, const float *x, float *y,
                     uint8_t *mask)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    cuk_drop_sc sc = cbe_dropout_scalars(p, seed);
    const uint64_t a[] = {n, sigp(x), sigp(y), sigp(mask)};
    const void *dyn;
    if (cbe_graph_op(ci, "dropout_fwd", cbe_sig(OPSIG_DROPOUT_FWD, a, 4), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_dropout_fwd(ci->stream, n, x, y, mask, sc, dyn));
}

void cbe_dropout_bwd(cdl_backend *be, size_t n, float p, const uint8_t *mask, const float *dy,
                     float *dx)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    cuk_drop_sc sc = cbe_dropout_scalars(p, 0);
    const uint64_t a[] = {n, sigp(mask), sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, "dropout_bwd", cbe_sig(OPSIG_DROPOUT_BWD, a, 4), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_dropout_bwd(ci->stream, n, mask, dy, dx, sc, dyn));
}

void cbe_xent_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                      const int32_t *labels, float grad_scale, float *dlogits,
                      float *sample_loss, int32_t *pred)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || classes <= 0)
        return;
    cbe_enter(ci);
    cuk_xent_sc sc = {.grad_scale = grad_scale};
    const uint64_t a[] = {(uint64_t)n, (uint64_t)classes, sigp(logits), sigp(labels), sigp(dlogits),
                          sigp(sample_loss), sigp(pred)};
    const void *dyn;
    if (cbe_graph_op(ci, "xent_fwd_bwd", cbe_sig(OPSIG_XENT, a, 7), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_xent(ci->stream, n, classes, logits, labels, dlogits, sample_loss, pred, sc,
                          dyn));
}

void cbe_sgd_step(cdl_backend *be, size_t n, float *p, const float *g, float *momentum_buf,
                  const cdl_sgd_hparams *hp)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    if (hp->momentum != 0.0f && !momentum_buf) {
        cbe_fail(ci, "sgd_step: momentum %g needs a momentum buffer (got NULL)",
                 (double)hp->momentum);
        return;
    }
    cuk_sgd_sc sc = kern_sgd_scalars(hp);
    const uint64_t a[] = {n, sigp(p), sigp(g), sigp(momentum_buf)};
    const void *dyn;
    if (cbe_graph_op(ci, "sgd_step", cbe_sig(OPSIG_SGD, a, 4), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_sgd(ci->stream, n, p, g, momentum_buf, ci->hold_dev, sc, dyn));
}

void cbe_adam_step(cdl_backend *be, size_t n, float *p, const float *g, float *m, float *v,
                   const cdl_adam_hparams *hp)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    cuk_adam_sc sc = kern_adam_scalars(hp);
    const uint64_t a[] = {n, sigp(p), sigp(g), sigp(m), sigp(v)};
    const void *dyn;
    if (cbe_graph_op(ci, "adam_step", cbe_sig(OPSIG_ADAM, a, 5), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_adam(ci->stream, n, p, g, m, v, ci->hold_dev, sc, dyn));
}

/* Asynchronous and capturable: the squared norm stays on the device (the
 * same kernels and so the same bits as cbe_sumsq). */
void cbe_sumsq_dev(cdl_backend *be, const float *x, size_t n, double *out, int acc)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    const uint64_t a[] = {sigp(x), n, sigp(out), (uint64_t)acc};
    const void *dyn;
    if (cbe_graph_op(ci, "sumsq_dev", cbe_sig(OPSIG_SUMSQ_DEV, a, 4), NULL, 0, &dyn))
        return;
    if (!n && acc)
        return;
    if (!n) {
        CU_CHECK(ci, cudaMemsetAsync(out, 0, sizeof *out, ci->stream));
        return;
    }
    CU_CHECK(ci, cuk_sumsq(ci->stream, x, n, ci->sumsq_dev, out, acc));
}

void cbe_clip_scale(cdl_backend *be, float *x, size_t n, const double *sq, float max_norm)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {sigp(x), n, sigp(sq), sigf(max_norm)};
    const void *dyn;
    if (cbe_graph_op(ci, "clip_scale", cbe_sig(OPSIG_CLIP_SCALE, a, 4), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_clip_scale(ci->stream, x, n, sq, max_norm));
}

/* sq: set the hold that sgd_step and adam_step read, when the norm is not
 * finite (capturable); NULL: clear it, in stream order. */
void cbe_hold_updates(cdl_backend *be, const double *sq)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (!sq) {
        if (cbe_graph_busy(ci)) {
            cbe_fail(ci, "hold_updates(NULL) during CUDA graph %s: clear the hold outside "
                     "graph steps", cbe_graph_busy(ci));
            return;
        }
        CU_CHECK(ci, cudaMemsetAsync(ci->hold_dev, 0, sizeof *ci->hold_dev, ci->stream));
        return;
    }
    const uint64_t a[] = {sigp(sq)};
    const void *dyn;
    if (cbe_graph_op(ci, "hold_updates", cbe_sig(OPSIG_HOLD, a, 1), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_hold(ci->stream, sq, ci->hold_dev));
}

/* Synchronous: the value is needed on the host now. */
double cbe_sumsq(cdl_backend *be, const float *x, size_t n)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (cbe_graph_busy(ci)) {
        cbe_fail(ci, "sumsq during CUDA graph %s: it returns a host value and needs a sync; "
                 "compute norms outside graph steps", cbe_graph_busy(ci));
        return NAN;
    }
    if (!n)
        return 0.0;
    double *partials = ci->sumsq_dev, *out = ci->sumsq_dev + CUK_SUMSQ_BLOCKS;
    if (CU_CHECK(ci, cuk_sumsq(ci->stream, x, n, partials, out, 0)) ||
        CU_CHECK(ci, cudaMemcpyAsync(ci->sumsq_host, out, sizeof(double), cudaMemcpyDeviceToHost,
                                     ci->stream)) ||
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream)))
        return NAN;
    return *ci->sumsq_host;
}
