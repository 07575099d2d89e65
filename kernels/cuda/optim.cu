/* Optimizer updates over flat parameter ranges, in float, with the
 * operations of torch.optim (1.13) in the same order as the CPU backend
 * (kernels/cpu/optim.c):
 *
 * SGD:   d = g + wd*p
 *        buf = d (first step) | momentum*buf + (1-dampening)*d
 *        d = nesterov ? d + momentum*buf : buf        (when momentum != 0)
 *        p = p - lr*d
 * Adam:  g' = g + wd*p  (AdamW instead: p = p * (1 - lr*wd))
 *        m = beta1*m + (1-beta1)*g'
 *        v = beta2*v + (1-beta2)*g'*g'
 *        p = p - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
 * The bias corrections come from the host (computed in double).
 * While *hold is nonzero (--clip-grad's norm was not finite: cuk_hold)
 * neither changes anything, p nor the optimizer state.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

static __global__ void sgd_kernel(size_t n, float *p, const float *g, float *buf,
                                  const int *hold, cuk_sgd_sc sc, const cuk_sgd_sc *dyn)
{
    if (*hold)
        return;
    cuk_sgd_sc c = cuk_pick(sc, dyn);
    CUK_GRID_STRIDE(i, n) {
        float d = g[i];
        if (c.wd != 0.0f)
            d = d + c.wd * p[i];
        if (c.momentum != 0.0f) {
            float m = c.first ? d : buf[i] * c.momentum + c.one_minus_damp * d;
            buf[i] = m;
            d = c.nesterov ? d + c.momentum * m : m;
        }
        p[i] = p[i] + (-c.lr) * d;
    }
}

static __global__ void adam_kernel(size_t n, float *p, const float *g, float *m, float *v,
                                   const int *hold, cuk_adam_sc sc, const cuk_adam_sc *dyn)
{
    if (*hold)
        return;
    cuk_adam_sc c = cuk_pick(sc, dyn);
    CUK_GRID_STRIDE(i, n) {
        float gi = g[i];
        float pi = p[i];
        if (c.decoupled)
            pi = pi * c.decay;
        else if (c.wd != 0.0f)
            gi = gi + c.wd * pi;
        float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
        float vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
        p[i] = pi + ((-c.step_size) * mi) / denom;   /* addcdiv: p + (value * m) / denom */
    }
}

/* The host's test (lib/train's train_norm_clippable): the norm, a double,
 * finite as a float. Sticky: a later finite norm does not clear it, so a
 * step queued behind the bad one changes nothing either. */
static __global__ void hold_kernel(const double *sq, int *hold)
{
    if (!isfinite((float)sqrt(*sq)))
        *hold = 1;
}

extern "C" cudaError_t cuk_sgd(cudaStream_t s, size_t n, float *p, const float *g,
                               float *momentum_buf, const int *hold, cuk_sgd_sc sc,
                               const cuk_sgd_sc *dyn)
{
    CUK_LAUNCH(sgd_kernel, cuk_blocks(n), CUK_THREADS, s, n, p, g, momentum_buf, hold, sc, dyn);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_adam(cudaStream_t s, size_t n, float *p, const float *g, float *m,
                                float *v, const int *hold, cuk_adam_sc sc, const cuk_adam_sc *dyn)
{
    CUK_LAUNCH(adam_kernel, cuk_blocks(n), CUK_THREADS, s, n, p, g, m, v, hold, sc, dyn);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_hold(cudaStream_t s, const double *sq, int *hold)
{
    CUK_LAUNCH(hold_kernel, 1, 1, s, sq, hold);
    return cudaGetLastError();
}
