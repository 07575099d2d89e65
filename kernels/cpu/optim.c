/* Optimizer updates over flat parameter ranges, in float, following
 * torch.optim (1.13) operation by operation:
 *
 * SGD:   d = g + wd*p
 *        buf = d (first step) | momentum*buf + (1-dampening)*d
 *        d = nesterov ? d + momentum*buf : buf        (when momentum != 0)
 *        p = p - lr*d
 * Adam:  g' = g + wd*p  (AdamW instead: p = p * (1 - lr*wd))
 *        m = beta1*m + (1-beta1)*g'
 *        v = beta2*v + (1-beta2)*g'*g'
 *        p = p - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
 * with bc1 = 1-beta1^step, bc2 = 1-beta2^step computed in double like
 * PyTorch's Python scalars.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"
#include "kernels/optim_scalars.h"

/* The scalars of both backends (kernels/optim_scalars.h). */
kern_sgd_sc kern_sgd_scalars(const cdl_sgd_hparams *hp)
{
    kern_sgd_sc sc = {
        .lr = hp->lr, .momentum = hp->momentum,
        .one_minus_damp = (float)(1.0 - (double)hp->dampening),
        .wd = hp->weight_decay, .nesterov = hp->nesterov, .first = hp->first_step,
    };
    return sc;
}

kern_adam_sc kern_adam_scalars(const cdl_adam_hparams *hp)
{
    double step = hp->step > 0 ? (double)hp->step : 1.0;
    double bc1 = 1.0 - pow((double)hp->beta1, step);
    double bc2 = 1.0 - pow((double)hp->beta2, step);
    kern_adam_sc sc = {
        .beta1 = hp->beta1, .one_minus_beta1 = (float)(1.0 - (double)hp->beta1),
        .beta2 = hp->beta2, .one_minus_beta2 = (float)(1.0 - (double)hp->beta2),
        .eps = hp->eps, .wd = hp->weight_decay,
        .decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay),
        .step_size = (float)((double)hp->lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .decoupled = hp->decoupled,
    };
    return sc;
}

typedef struct sgd_ctx {
    float *p, *buf;
    const float *g;
    kern_sgd_sc sc;
} sgd_ctx;

/* The scalars are read into locals: p's stores could alias them (all
 * float), and the compiler reloaded c->wd, c->momentum, c->first,
 * c->nesterov and c->lr and tested them again for every parameter. */
static void sgd_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const sgd_ctx *cx = vctx;
    const kern_sgd_sc *c = &cx->sc;
    float *p = cx->p, *buf = cx->buf;
    const float *g = cx->g;
    const float wd = c->wd, mom = c->momentum, omd = c->one_minus_damp, nlr = -c->lr;
    const int first = c->first, nesterov = c->nesterov;
    for (size_t i = b; i < e; i++) {
        float d = g[i];
        if (wd != 0.0f)
            d = d + wd * p[i];
        if (mom != 0.0f) {
            float m = first ? d : buf[i] * mom + omd * d;
            buf[i] = m;
            d = nesterov ? d + mom * m : m;
        }
        p[i] = p[i] + nlr * d;
    }
}

#if CPU_X86
/* sgd_chunk 8 lanes at a time, operation for operation (no contraction
 * into FMAs), so the bits equal the portable loop's. */
static CPU_AVX2 void sgd_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const sgd_ctx *cx = vctx;
    const kern_sgd_sc *c = &cx->sc;
    float *p = cx->p, *buf = cx->buf;
    const float *g = cx->g;
    const int decay = c->wd != 0.0f, mom = c->momentum != 0.0f;
    const int first = c->first, nesterov = c->nesterov;
    const __m256 wd = _mm256_set1_ps(c->wd), mu = _mm256_set1_ps(c->momentum);
    const __m256 omd = _mm256_set1_ps(c->one_minus_damp), nlr = _mm256_set1_ps(-c->lr);
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i), d = _mm256_loadu_ps(g + i);
        if (decay)
            d = _mm256_add_ps(d, _mm256_mul_ps(wd, pi));
        if (mom) {
            __m256 m = first ? d
                             : _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(buf + i), mu),
                                             _mm256_mul_ps(omd, d));
            _mm256_storeu_ps(buf + i, m);
            d = nesterov ? _mm256_add_ps(d, _mm256_mul_ps(mu, m)) : m;
        }
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_mul_ps(nlr, d)));
    }
    cpu_avx_leave();
    sgd_chunk(vctx, i, e, chunk, tid);
}
#endif

void cpu_sgd_step(cdl_backend *be, size_t n, float *p, const float *g,
                  float *momentum_buf, const cdl_sgd_hparams *hp)
{
    sgd_ctx c = {.p = p, .buf = momentum_buf, .g = g, .sc = kern_sgd_scalars(hp)};
    pool_fn fn = sgd_chunk;
#if CPU_X86
    if (cpu_has_avx2())
        fn = sgd_chunk_avx2;
#endif
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, fn, &c);
}

typedef struct adam_ctx {
    float *p, *m, *v;
    const float *g;
    kern_adam_sc sc;
} adam_ctx;

static void adam_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const adam_ctx *cx = vctx;
    const kern_adam_sc *c = &cx->sc;
    float *p = cx->p, *m = cx->m, *v = cx->v;
    const float *g = cx->g;
    for (size_t i = b; i < e; i++) {
        float gi = g[i];
        if (c->decoupled)
            p[i] = p[i] * c->decay;
        else if (c->wd != 0.0f)
            gi = gi + c->wd * p[i];
        float mi = m[i] * c->beta1 + c->one_minus_beta1 * gi;
        float vi = v[i] * c->beta2 + c->one_minus_beta2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
        /* addcdiv order: p + (value * m) / denom */
        p[i] = p[i] + ((-c->step_size) * mi) / denom;
    }
}

#if CPU_X86
/* adam_chunk 8 lanes at a time, operation for operation (no contraction
 * into FMAs; sqrt and division are correctly rounded in both), so the bits
 * equal the portable loop's: one pass over p, g, m, v instead of a scalar
 * division and square root per parameter. */
static CPU_AVX2 void adam_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const adam_ctx *cx = vctx;
    const kern_adam_sc *c = &cx->sc;
    float *p = cx->p, *m = cx->m, *v = cx->v;
    const float *g = cx->g;
    __m256 decay = _mm256_set1_ps(c->decay), wd = _mm256_set1_ps(c->wd);
    __m256 b1 = _mm256_set1_ps(c->beta1), omb1 = _mm256_set1_ps(c->one_minus_beta1);
    __m256 b2 = _mm256_set1_ps(c->beta2), omb2 = _mm256_set1_ps(c->one_minus_beta2);
    __m256 bc2 = _mm256_set1_ps(c->bc2_sqrt), eps = _mm256_set1_ps(c->eps);
    __m256 nstep = _mm256_set1_ps(-c->step_size);
    int decoupled = c->decoupled, coupled = !c->decoupled && c->wd != 0.0f;
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i), pi = _mm256_loadu_ps(p + i);
        if (decoupled)
            pi = _mm256_mul_ps(pi, decay);
        else if (coupled)
            gi = _mm256_add_ps(gi, _mm256_mul_ps(wd, pi));
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1),
                                  _mm256_mul_ps(omb1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                  _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nstep, mi), denom)));
    }
    cpu_avx_leave();
    adam_chunk(vctx, i, e, chunk, tid);
}
#endif

void cpu_adam_step(cdl_backend *be, size_t n, float *p, const float *g,
                   float *m, float *v, const cdl_adam_hparams *hp)
{
    adam_ctx c = {.p = p, .m = m, .v = v, .g = g, .sc = kern_adam_scalars(hp)};
    pool_fn fn = adam_chunk;
#if CPU_X86
    if (cpu_has_avx2())
        fn = adam_chunk_avx2;
#endif
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, fn, &c);
}
