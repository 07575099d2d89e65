/* Elementwise ops over flat float ranges: fill, scale, relu, dropout, and
 * the residual join fused with the ReLU after it (add_relu, and its
 * backward relu_bwd_split, also with a fan-out's pending sum:
 * relu_bwd_split_add). Each splits [0,n) into chunks of at least
 * CPU_ELT_GRAIN floats (pool.h). The ReLU kernels have a plain loop (the
 * definition), an AVX2 and an AVX-512 twin picked at run time; each gives
 * the plain loop's bits (NaN and -0 included). */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

typedef struct elt_ctx {
    const float *a;      /* first input (x, or y for relu_bwd) */
    const float *b;      /* second input (dy) */
    const float *b2;     /* relu_bwd_split_add: the part of dy still to add */
    float *out;
    float *out2;         /* relu_bwd_split: the second branch's gradient */
    int accumulate;      /* relu_bwd_split: out2 += instead of out2 = */
    uint8_t *mask;
    const uint8_t *cmask;
    float value;         /* fill value, scale factor, or dropout 1/(1-p) */
    float p;
    uint64_t seed;
} elt_ctx;

static void fill_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, fill_chunk, &c);
}

static void scale_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, scale_chunk, &c);
}

/* x < 0 ? 0 : x keeps NaN as NaN, like torch.relu. */
static void relu_fwd_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const elt_ctx *c = vctx;
    const float *x = c->a;
    float *y = c->out;
    for (size_t i = b; i < e; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx may alias dy: each element is read before it is written. */
static void relu_bwd_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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
static CPU_AVX512 void relu_fwd_chunk512(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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

static CPU_AVX512 void relu_bwd_chunk512(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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

/* y = max(0, a + b); y may alias a or b. */
static void add_relu_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const elt_ctx *c = vctx;
    for (size_t i = b; i < e; i++) {
        float v = c->a[i] + c->b[i];
        c->out[i] = v < 0.0f ? 0.0f : v;
    }
}

/* g = y > 0 ? dy : 0 into dx (may alias dy) and into out2 (or added to
 * it; out2 NULL: none): the ReLU's backward and the add's split to its two
 * branches in one pass. With b2, dy is dy + b2 first (the sum accumulate
 * would have left in dy, the same bits). */
static void relu_bwd_split_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const elt_ctx *c = vctx;
    const float *y = c->a, *dy = c->b;
    for (size_t i = b; i < e; i++) {
        float d = c->b2 ? dy[i] + c->b2[i] : dy[i];
        float g = y[i] > 0.0f ? d : 0.0f;
        c->out[i] = g;
        if (c->out2)
            c->out2[i] = c->accumulate ? c->out2[i] + g : g;
    }
}

#if CPU_X86
/* 8 lanes; the tail of a chunk goes through the plain loop. max(0, v)
 * returns v for NaN and for either zero, as above. */
static CPU_AVX2 void relu_fwd_chunk8(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const elt_ctx *c = vctx;
    __m256 zero = _mm256_setzero_ps();
    size_t i = b;
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(c->out + i, _mm256_max_ps(zero, _mm256_loadu_ps(c->a + i)));
    relu_fwd_chunk(vctx, i, e, chunk, tid);
}

static CPU_AVX2 inline __m256 relu_mask8(const float *y, const float *dy, size_t i)
{
    __m256 pos = _mm256_cmp_ps(_mm256_loadu_ps(y + i), _mm256_setzero_ps(), _CMP_GT_OQ);
    return _mm256_and_ps(_mm256_loadu_ps(dy + i), pos);
}

static CPU_AVX2 void relu_bwd_chunk8(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const elt_ctx *c = vctx;
    size_t i = b;
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(c->out + i, relu_mask8(c->a, c->b, i));
    relu_bwd_chunk(vctx, i, e, chunk, tid);
}

static CPU_AVX2 void add_relu_chunk8(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const elt_ctx *c = vctx;
    __m256 zero = _mm256_setzero_ps();
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(c->a + i), _mm256_loadu_ps(c->b + i));
        _mm256_storeu_ps(c->out + i, _mm256_max_ps(zero, v));
    }
    add_relu_chunk(vctx, i, e, chunk, tid);
}

static CPU_AVX2 void relu_bwd_split_chunk8(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const elt_ctx *c = vctx;
    const __m256 zero = _mm256_setzero_ps();
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m256 d = _mm256_loadu_ps(c->b + i);
        if (c->b2)
            d = _mm256_add_ps(d, _mm256_loadu_ps(c->b2 + i));
        __m256 g = _mm256_and_ps(d, _mm256_cmp_ps(_mm256_loadu_ps(c->a + i), zero, _CMP_GT_OQ));
        _mm256_storeu_ps(c->out + i, g);
        if (!c->out2)
            continue;
        if (c->accumulate)
            g = _mm256_add_ps(_mm256_loadu_ps(c->out2 + i), g);
        _mm256_storeu_ps(c->out2 + i, g);
    }
    cpu_avx_leave();
    relu_bwd_split_chunk(vctx, i, e, chunk, tid);
}
#endif

/* The widest of a kernel's twins this CPU runs (NULL: none that wide). */
static pool_fn widest(pool_fn plain, pool_fn avx2, pool_fn avx512)
{
#if CPU_X86
    if (avx512 && cpu_has_avx512())
        return avx512;
    if (avx2 && cpu_has_avx2())
        return avx2;
#else
    (void)avx2, (void)avx512;
#endif
    return plain;
}

#if !CPU_X86
#define relu_fwd_chunk8 NULL
#define relu_bwd_chunk8 NULL
#define add_relu_chunk8 NULL
#define relu_bwd_split_chunk8 NULL
#define relu_fwd_chunk512 NULL
#define relu_bwd_chunk512 NULL
#endif

void cpu_relu_fwd(cdl_backend *be, size_t n, const float *x, float *y)
{
    elt_ctx c = {.a = x, .out = y};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN,
             widest(relu_fwd_chunk, relu_fwd_chunk8, relu_fwd_chunk512), &c);
}

void cpu_relu_bwd(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx)
{
    elt_ctx c = {.a = y, .b = dy, .out = dx};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN,
             widest(relu_bwd_chunk, relu_bwd_chunk8, relu_bwd_chunk512), &c);
}

void cpu_add_relu(cdl_backend *be, size_t n, const float *a, const float *b, float *y)
{
    elt_ctx c = {.a = a, .b = b, .out = y};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, widest(add_relu_chunk, add_relu_chunk8, NULL), &c);
}

void cpu_relu_bwd_split(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx,
                        float *dx2, int accumulate)
{
    elt_ctx c = {.a = y, .b = dy, .out = dx, .out2 = dx2, .accumulate = accumulate};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN,
             widest(relu_bwd_split_chunk, relu_bwd_split_chunk8, NULL), &c);
}

void cpu_relu_bwd_split_add(cdl_backend *be, size_t n, const float *y, const float *dy,
                            const float *dy2, float *dx, float *dx2, int accumulate)
{
    elt_ctx c = {.a = y, .b = dy, .b2 = dy2, .out = dx, .out2 = dx2, .accumulate = accumulate};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN,
             widest(relu_bwd_split_chunk, relu_bwd_split_chunk8, NULL), &c);
}

/* The keep decision depends on (seed, i) only, so the mask is the same on
 * every backend and thread count. p >= 1 drops everything (like PyTorch). */
static void dropout_fwd_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, dropout_fwd_chunk, &c);
}

static void dropout_bwd_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
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
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, dropout_bwd_chunk, &c);
}
