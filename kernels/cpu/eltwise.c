/* Elementwise ops over flat float ranges: fill, scale, relu, dropout.
 * Each splits [0,n) into static per-thread chunks (pool_for_grain). */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

typedef struct elt_ctx {
    const float *a;      /* first input (x, or y for relu_bwd) */
    const float *b;      /* second input (dy) */
    float *out;
    uint8_t *mask;
    const uint8_t *cmask;
    float value;         /* fill value, scale factor, or dropout 1/(1-p) */
    float p;
    uint64_t seed;
} elt_ctx;

static void fill_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    float *x = c->out;
    float v = c->value;
    for (size_t i = b; i < e; i++)
        x[i] = v;
}

void cpu_fill(cdl_backend *be, float *x, float value, size_t n)
{
    elt_ctx c = {.out = x, .value = value};
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, fill_chunk, &c);
}

static void scale_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    float *x = c->out;
    float a = c->value;
    for (size_t i = b; i < e; i++)
        x[i] *= a;
}

void cpu_scale(cdl_backend *be, float *x, float a, size_t n)
{
    elt_ctx c = {.out = x, .value = a};
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, scale_chunk, &c);
}

/* x < 0 ? 0 : x keeps NaN as NaN, like torch.relu. */
static void relu_fwd_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *x = c->a;
    float *y = c->out;
    for (size_t i = b; i < e; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx may alias dy: each element is read before it is written. */
static void relu_bwd_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *y = c->a, *dy = c->b;
    float *dx = c->out;
    for (size_t i = b; i < e; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

#if CPU_X86
/* max(0, x) returns x when x is NaN or a zero of either sign (the second
 * operand wins unordered and equal compares): exactly x < 0 ? 0 : x. */
static CPU_AVX512 void relu_fwd_chunk512(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *x = c->a;
    float *y = c->out;
    __m512 zero = _mm512_setzero_ps();
    size_t i = b;
    for (; i + 16 <= e; i += 16)
        _mm512_storeu_ps(y + i, _mm512_max_ps(zero, _mm512_loadu_ps(x + i)));
    __mmask16 m = cpu_mask16((int)(e - i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_max_ps(zero, _mm512_maskz_loadu_ps(m, x + i)));
}

static CPU_AVX512 void relu_bwd_chunk512(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *y = c->a, *dy = c->b;
    float *dx = c->out;
    __m512 zero = _mm512_setzero_ps();
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
        __mmask16 pos = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), zero, _CMP_GT_OQ);
        _mm512_storeu_ps(dx + i, _mm512_maskz_mov_ps(pos, _mm512_loadu_ps(dy + i)));
    }
    __mmask16 m = cpu_mask16((int)(e - i));
    __mmask16 pos = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, y + i), zero, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_mov_ps(pos, _mm512_maskz_loadu_ps(m, dy + i)));
}
#endif

void cpu_relu_fwd(cdl_backend *be, size_t n, const float *x, float *y)
{
    elt_ctx c = {.a = x, .out = y};
    pool_fn fn = relu_fwd_chunk;
#if CPU_X86
    if (cpu_has_avx512())
        fn = relu_fwd_chunk512;
#endif
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, fn, &c);
}

void cpu_relu_bwd(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx)
{
    elt_ctx c = {.a = y, .b = dy, .out = dx};
    pool_fn fn = relu_bwd_chunk;
#if CPU_X86
    if (cpu_has_avx512())
        fn = relu_bwd_chunk512;
#endif
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, fn, &c);
}

/* The keep decision depends on (seed, i) only, so the mask is the same on
 * every backend and thread count. p >= 1 drops everything (like PyTorch). */
static void dropout_fwd_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *x = c->a;
    float *y = c->out;
    uint8_t *mask = c->mask;
    for (size_t i = b; i < e; i++) {
        int keep = c->p < 1.0f && cdl_dropout_keep(c->seed, i, c->p);
        mask[i] = (uint8_t)keep;
        y[i] = keep ? x[i] * c->value : 0.0f;
    }
}

static float dropout_scale(float p)
{
    return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

void cpu_dropout_fwd(cdl_backend *be, size_t n, float p, uint64_t seed,
                     const float *x, float *y, uint8_t *mask)
{
    elt_ctx c = {.a = x, .out = y, .mask = mask, .value = dropout_scale(p), .p = p, .seed = seed};
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN / 4, dropout_fwd_chunk, &c);
}

static void dropout_bwd_chunk(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const elt_ctx *c = vctx;
    const float *dy = c->b;
    float *dx = c->out;
    for (size_t i = b; i < e; i++)
        dx[i] = c->cmask[i] ? dy[i] * c->value : 0.0f;
}

void cpu_dropout_bwd(cdl_backend *be, size_t n, float p, const uint8_t *mask,
                     const float *dy, float *dx)
{
    elt_ctx c = {.b = dy, .out = dx, .cmask = mask, .value = dropout_scale(p)};
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, dropout_bwd_chunk, &c);
}
