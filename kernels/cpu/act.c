/* Elementwise activations act_fwd/act_bwd (cdl_act in backend.h) over flat
 * float ranges, split into chunks of CPU_ELT_GRAIN floats like eltwise.c.
 *
 * act_ref/act_grad_ref are the definitions, one element at a time with
 * libm (the portable path). The AVX2 path computes 8 lanes with a
 * polynomial exp (about 1 ulp) and, for the exact GELU, Abramowitz &
 * Stegun's erf 7.1.26 (absolute error below 1.5e-7); a chunk's tail of
 * fewer than 8 goes through the same lanes (masked loads and stores), so an
 * element's bits never depend on where the chunks end (thread counts, the
 * row blocks of a fused product: linear.c). Both are checked against
 * double precision and PyTorch.
 */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

#define GELU_K0 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_K1 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

static float sigmoidf_ref(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* y = act(x). */
static float act_ref(cdl_act act, float alpha, float x)
{
    switch (act) {
    case CDL_ACT_RELU: return x < 0.0f ? 0.0f : x;
    case CDL_ACT_GELU: return 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    case CDL_ACT_GELU_TANH: return 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * x * x * x)));
    case CDL_ACT_SILU: return x * sigmoidf_ref(x);
    case CDL_ACT_SIGMOID: return sigmoidf_ref(x);
    case CDL_ACT_TANH: return tanhf(x);
    case CDL_ACT_LEAKYRELU: return x > 0.0f ? x : alpha * x;
    }
    return NAN;
}

/* The factor the GELUs' backward multiplies dy by: act'(x), a function of
 * x alone (cpu_act_grad_fwd keeps it from the forward). */
static float gelu_factor_ref(cdl_act act, float x)
{
    if (act == CDL_ACT_GELU)
        return 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
    float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

/* dact/dx at x (or from y = act(x)) times dy. */
static float act_grad_ref(cdl_act act, float alpha, float x, float y, float dy)
{
    switch (act) {
    case CDL_ACT_RELU: return y > 0.0f ? dy : 0.0f;
    case CDL_ACT_GELU:
    case CDL_ACT_GELU_TANH: return dy * gelu_factor_ref(act, x);
    case CDL_ACT_SILU: {
        float s = sigmoidf_ref(x);
        return dy * s * (1.0f + x * (1.0f - s));
    }
    case CDL_ACT_SIGMOID: return dy * y * (1.0f - y);
    case CDL_ACT_TANH: return dy * (1.0f - y * y);
    case CDL_ACT_LEAKYRELU: return x > 0.0f ? dy : alpha * dy;
    }
    return NAN;
}

typedef struct act_ctx {
    cdl_act act;
    float alpha;
    const float *x, *y, *dy;
    float *out;
    float *g;   /* grad_fwd: the input on entry, act' of it on return */
} act_ctx;

static void fwd_chunk_ref(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const act_ctx *c = vctx;
    for (size_t i = b; i < e; i++)
        c->out[i] = act_ref(c->act, c->alpha, c->x[i]);
}

static void bwd_chunk_ref(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const act_ctx *c = vctx;
    for (size_t i = b; i < e; i++)
        c->out[i] = act_grad_ref(c->act, c->alpha, c->x ? c->x[i] : 0.0f, c->y ? c->y[i] : 0.0f,
                                 c->dy[i]);
}

static void grad_fwd_chunk_ref(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const act_ctx *c = vctx;
    for (size_t i = b; i < e; i++) {
        float x = c->g[i];
        c->out[i] = act_ref(c->act, c->alpha, x);
        c->g[i] = gelu_factor_ref(c->act, x);
    }
}

/* dx = dy * g: the backward with the factor kept (dx may alias dy or g). */
static void mul_chunk_ref(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const act_ctx *c = vctx;
    for (size_t i = b; i < e; i++)
        c->out[i] = c->dy[i] * c->x[i];
}


#if CPU_X86
#define V __m256
#define SET1 _mm256_set1_ps

static CPU_AVX2 inline V sigmoid8(V x)
{
    V one = SET1(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, cpu_exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

/* tanh(u) = sign(u) (1-e)/(1+e) with e = exp(-2|u|) in (0,1]: no overflow,
 * no cancellation; *omt2 = 1 - tanh(u)^2 = 4e/(1+e)^2 (accurate where t is
 * near +-1, unlike 1 - t*t). */
static CPU_AVX2 inline V tanh8_omt2(V u, V *omt2)
{
    V one = SET1(1.0f), sign = _mm256_and_ps(u, SET1(-0.0f));
    V a = _mm256_andnot_ps(SET1(-0.0f), u);
    V e = cpu_exp8(_mm256_mul_ps(SET1(-2.0f), a)), d = _mm256_add_ps(one, e);
    if (omt2)
        *omt2 = _mm256_div_ps(_mm256_mul_ps(SET1(4.0f), e), _mm256_mul_ps(d, d));
    return _mm256_or_ps(_mm256_div_ps(_mm256_sub_ps(one, e), d), sign);
}

static CPU_AVX2 inline V tanh8(V u)
{
    return tanh8_omt2(u, NULL);
}

/* erf(x), Abramowitz & Stegun 7.1.26, with x's sign; *e = exp(-x^2), the
 * factor the formula needs, which the GELU's backward reuses for its pdf
 * (exp(-u^2/2) at u = x sqrt(2): one exponential per element, not two). */
static CPU_AVX2 inline V erf8_e(V x, V *e)
{
    V sign = _mm256_and_ps(x, SET1(-0.0f)), a = _mm256_andnot_ps(SET1(-0.0f), x), one = SET1(1.0f);
    V t = _mm256_div_ps(one, _mm256_fmadd_ps(SET1(0.3275911f), a, one));
    V p = SET1(1.061405429f);
    p = _mm256_fmadd_ps(p, t, SET1(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, SET1(1.421413741f));
    p = _mm256_fmadd_ps(p, t, SET1(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, SET1(0.254829592f));
    p = _mm256_mul_ps(p, t);
    *e = cpu_exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a));
    V r = _mm256_fnmadd_ps(p, *e, one);
    return _mm256_or_ps(r, sign);
}

static CPU_AVX2 inline V erf8(V x)
{
    V e;
    return erf8_e(x, &e);
}

static CPU_AVX2 inline V gelu_tanh_u8(V x)
{
    V x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    return _mm256_mul_ps(SET1(GELU_K0), _mm256_fmadd_ps(SET1(GELU_K1), x3, x));
}

/* The exact GELU's lanes as inline functions, which fwd8's and bwd8's
 * CDL_ACT_GELU cases call too (so the same bits on both paths): the GPT's
 * MLP runs them on (rows, 4 d) blocks, where fwd8's call and switch per 8
 * floats kept the core from overlapping one vector's divide and exponential
 * with the next one's (~1.4 ns a float on Zen 3; 2 vectors a step here). */
static CPU_AVX2 inline V gelu8(V x)
{
    return _mm256_mul_ps(_mm256_mul_ps(SET1(0.5f), x),
                         _mm256_add_ps(SET1(1.0f), erf8(_mm256_mul_ps(x, SET1(INV_SQRT2)))));
}

/* gelu8(x) and, in *f, the factor gelu_grad8 multiplies dy by: one
 * error function and one exponential for both. */
static CPU_AVX2 inline V gelu_factor8(V x, V *f)
{
    V ex, erf = erf8_e(_mm256_mul_ps(x, SET1(INV_SQRT2)), &ex);
    V cdf = _mm256_mul_ps(SET1(0.5f), _mm256_add_ps(SET1(1.0f), erf));
    V pdf = _mm256_mul_ps(SET1(INV_SQRT_2PI), ex);
    *f = _mm256_fmadd_ps(x, pdf, cdf);
    return _mm256_mul_ps(_mm256_mul_ps(SET1(0.5f), x), _mm256_add_ps(SET1(1.0f), erf));
}

static CPU_AVX2 inline V gelu_grad8(V x, V dy)
{
    V f;
    gelu_factor8(x, &f);
    return _mm256_mul_ps(dy, f);
}

/* The tanh GELU of x and, in *f, its backward's factor. */
static CPU_AVX2 inline V gelu_tanh_factor8(V x, V *f)
{
    V half = SET1(0.5f), one = SET1(1.0f), omt2;
    V t = tanh8_omt2(gelu_tanh_u8(x), &omt2);
    V du = _mm256_mul_ps(SET1(GELU_K0), _mm256_fmadd_ps(SET1(3.0f * GELU_K1), _mm256_mul_ps(x, x), one));
    V g = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), omt2), du);
    *f = _mm256_fmadd_ps(half, _mm256_add_ps(one, t), g);
    return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, t));
}

/* x <= 0 lanes (or NaN: the compare is ordered) get a*alpha, others a. */
static CPU_AVX2 inline V leaky8(V x, V a, float alpha)
{
    V neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OQ);
    return _mm256_blendv_ps(a, _mm256_mul_ps(a, SET1(alpha)), neg);
}

static CPU_AVX2 V fwd8(cdl_act act, float alpha, V x)
{
    V half = SET1(0.5f), one = SET1(1.0f);
    switch (act) {
    case CDL_ACT_RELU: return _mm256_max_ps(_mm256_setzero_ps(), x);
    case CDL_ACT_GELU: return gelu8(x);
    case CDL_ACT_GELU_TANH:
        return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, tanh8(gelu_tanh_u8(x))));
    case CDL_ACT_SILU: return _mm256_mul_ps(x, sigmoid8(x));
    case CDL_ACT_SIGMOID: return sigmoid8(x);
    case CDL_ACT_TANH: return tanh8(x);
    case CDL_ACT_LEAKYRELU: return leaky8(x, x, alpha);
    }
    return SET1(NAN);
}

static CPU_AVX2 V bwd8(cdl_act act, float alpha, V x, V y, V dy)
{
    V one = SET1(1.0f);
    switch (act) {
    case CDL_ACT_RELU:
        return _mm256_and_ps(dy, _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ));
    case CDL_ACT_GELU: return gelu_grad8(x, dy);
    case CDL_ACT_GELU_TANH: {
        V f;
        gelu_tanh_factor8(x, &f);
        return _mm256_mul_ps(dy, f);
    }
    case CDL_ACT_SILU: {
        V s = sigmoid8(x);
        return _mm256_mul_ps(_mm256_mul_ps(dy, s), _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
    }
    case CDL_ACT_SIGMOID: return _mm256_mul_ps(_mm256_mul_ps(dy, y), _mm256_sub_ps(one, y));
    case CDL_ACT_TANH: return _mm256_mul_ps(dy, _mm256_fnmadd_ps(y, y, one));
    case CDL_ACT_LEAKYRELU: return leaky8(x, dy, alpha);
    }
    return SET1(NAN);
}

/* Lanes [0, k) of 8 (k < 8) for the masked loads and stores of a tail. */
static CPU_AVX2 inline __m256i tail_mask8(size_t k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static CPU_AVX2 void fwd_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    size_t i = b;
    if (c->act == CDL_ACT_GELU)
        for (; i + 16 <= e; i += 16) {
            V y0 = gelu8(_mm256_loadu_ps(c->x + i)), y1 = gelu8(_mm256_loadu_ps(c->x + i + 8));
            _mm256_storeu_ps(c->out + i, y0);
            _mm256_storeu_ps(c->out + i + 8, y1);
        }
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(c->out + i, fwd8(c->act, c->alpha, _mm256_loadu_ps(c->x + i)));
    if (i < e) {   /* the last < 8 through the same lanes, so no bit depends on the split */
        __m256i m = tail_mask8(e - i);
        _mm256_maskstore_ps(c->out + i, m, fwd8(c->act, c->alpha, _mm256_maskload_ps(c->x + i, m)));
    }
    (void)chunk, (void)tid;
}

static CPU_AVX2 void bwd_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    V zero = _mm256_setzero_ps();
    size_t i = b;
    if (c->act == CDL_ACT_GELU && c->x)
        for (; i + 16 <= e; i += 16) {
            V d0 = gelu_grad8(_mm256_loadu_ps(c->x + i), _mm256_loadu_ps(c->dy + i));
            V d1 = gelu_grad8(_mm256_loadu_ps(c->x + i + 8), _mm256_loadu_ps(c->dy + i + 8));
            _mm256_storeu_ps(c->out + i, d0);
            _mm256_storeu_ps(c->out + i + 8, d1);
        }
    for (; i + 8 <= e; i += 8) {
        V x = c->x ? _mm256_loadu_ps(c->x + i) : zero;
        V y = c->y ? _mm256_loadu_ps(c->y + i) : zero;
        _mm256_storeu_ps(c->out + i, bwd8(c->act, c->alpha, x, y, _mm256_loadu_ps(c->dy + i)));
    }
    if (i < e) {
        __m256i m = tail_mask8(e - i);
        V x = c->x ? _mm256_maskload_ps(c->x + i, m) : zero;
        V y = c->y ? _mm256_maskload_ps(c->y + i, m) : zero;
        _mm256_maskstore_ps(c->out + i, m,
                            bwd8(c->act, c->alpha, x, y, _mm256_maskload_ps(c->dy + i, m)));
    }
    (void)chunk, (void)tid;
}

/* y = act(x) and the factor of its backward, for the GELUs: fwd8's and
 * bwd8's lanes. */
static CPU_AVX2 inline V fwd_factor8(cdl_act act, V x, V *f)
{
    return act == CDL_ACT_GELU ? gelu_factor8(x, f) : gelu_tanh_factor8(x, f);
}

static CPU_AVX2 void grad_fwd_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    size_t i = b;
    V f;
    for (; i + 8 <= e; i += 8) {
        _mm256_storeu_ps(c->out + i, fwd_factor8(c->act, _mm256_loadu_ps(c->g + i), &f));
        _mm256_storeu_ps(c->g + i, f);
    }
    if (i < e) {
        __m256i m = tail_mask8(e - i);
        _mm256_maskstore_ps(c->out + i, m, fwd_factor8(c->act, _mm256_maskload_ps(c->g + i, m), &f));
        _mm256_maskstore_ps(c->g + i, m, f);
    }
    (void)chunk, (void)tid;
}

static CPU_AVX2 void mul_chunk_avx2(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    size_t i = b;
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(c->out + i, _mm256_mul_ps(_mm256_loadu_ps(c->dy + i), _mm256_loadu_ps(c->x + i)));
    mul_chunk_ref(vctx, i, e, chunk, tid);
}
#undef V
#undef SET1

/* The exact GELU (the GPT's MLP) 16 lanes at a time with AVX-512: the AVX2
 * path's operations lane for lane (cpu_exp16 is cpu_exp8's twin; the
 * division is correctly rounded at any width), so the same bits; the
 * sign masks through integer ops (and_ps needs AVX512DQ). A chunk's last
 * < 16 go through the AVX2 chunk. */
#define V5 __m512
#define S5 _mm512_set1_ps

static CPU_AVX512 inline V5 erf16_e(V5 x, V5 *e)
{
    __m512i sm = _mm512_set1_epi32(INT32_MIN), xi = _mm512_castps_si512(x);
    __m512i sign = _mm512_and_si512(xi, sm);
    V5 a = _mm512_castsi512_ps(_mm512_andnot_si512(sm, xi)), one = S5(1.0f);
    V5 t = _mm512_div_ps(one, _mm512_fmadd_ps(S5(0.3275911f), a, one));
    V5 p = S5(1.061405429f);
    p = _mm512_fmadd_ps(p, t, S5(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, S5(1.421413741f));
    p = _mm512_fmadd_ps(p, t, S5(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, S5(0.254829592f));
    p = _mm512_mul_ps(p, t);
    *e = cpu_exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a));
    V5 r = _mm512_fnmadd_ps(p, *e, one);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

static CPU_AVX512 inline V5 erf16(V5 x)
{
    V5 e;
    return erf16_e(x, &e);
}

static CPU_AVX512 void gelu_fwd_chunk_avx512(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    V5 half = S5(0.5f), one = S5(1.0f);
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
        V5 x = _mm512_loadu_ps(c->x + i);
        V5 y = _mm512_mul_ps(_mm512_mul_ps(half, x),
                             _mm512_add_ps(one, erf16(_mm512_mul_ps(x, S5(INV_SQRT2)))));
        _mm512_storeu_ps(c->out + i, y);
    }
    fwd_chunk_avx2(vctx, i, e, chunk, tid);
}

/* gelu_factor8's lanes: the GELU of x, and its backward's factor in *f. */
static CPU_AVX512 inline V5 gelu_factor16(V5 x, V5 *f)
{
    V5 half = S5(0.5f), one = S5(1.0f);
    V5 ex, erf = erf16_e(_mm512_mul_ps(x, S5(INV_SQRT2)), &ex);
    V5 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, erf));
    V5 pdf = _mm512_mul_ps(S5(INV_SQRT_2PI), ex);
    *f = _mm512_fmadd_ps(x, pdf, cdf);
    return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
}

static CPU_AVX512 void gelu_bwd_chunk_avx512(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
        V5 f;
        gelu_factor16(_mm512_loadu_ps(c->x + i), &f);
        _mm512_storeu_ps(c->out + i, _mm512_mul_ps(_mm512_loadu_ps(c->dy + i), f));
    }
    bwd_chunk_avx2(vctx, i, e, chunk, tid);
}

static CPU_AVX512 void gelu_grad_fwd_chunk_avx512(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const act_ctx *c = vctx;
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
        V5 f, y = gelu_factor16(_mm512_loadu_ps(c->g + i), &f);
        _mm512_storeu_ps(c->out + i, y);
        _mm512_storeu_ps(c->g + i, f);
    }
    grad_fwd_chunk_avx2(vctx, i, e, chunk, tid);
}
#undef V5
#undef S5
#endif

/* The chunk functions of this CPU: the same for a whole op (act_fwd,
 * act_bwd) and for the ranges of a fused product (cpu_act_fwd_range), so
 * both give the same bits. */
static pool_fn fwd_fn(cdl_act act)
{
    pool_fn fn = fwd_chunk_ref;
#if CPU_X86
    if (cpu_has_avx2())
        fn = fwd_chunk_avx2;
    if (act == CDL_ACT_GELU && cpu_has_avx512())
        fn = gelu_fwd_chunk_avx512;
#else
    (void)act;
#endif
    return fn;
}

static pool_fn bwd_fn(cdl_act act, const float *x)
{
    pool_fn fn = bwd_chunk_ref;
#if CPU_X86
    if (cpu_has_avx2())
        fn = bwd_chunk_avx2;
    if (act == CDL_ACT_GELU && x && cpu_has_avx512())
        fn = gelu_bwd_chunk_avx512;
#else
    (void)act, (void)x;
#endif
    return fn;
}

void cpu_act_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x, float *y)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .out = y};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, fwd_fn(act), &c);
}

void cpu_act_bwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                 const float *y, const float *dy, float *dx)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .y = y, .dy = dy, .out = dx};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, bwd_fn(act, x), &c);
}

void cpu_act_fwd_range(cdl_act act, float alpha, const float *x, float *y, size_t b, size_t e)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .out = y};
    fwd_fn(act)(&c, b, e, 0, 0);
}

void cpu_act_bwd_range(cdl_act act, float alpha, const float *x, const float *y, const float *dy,
                       float *dx, size_t b, size_t e)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .y = y, .dy = dy, .out = dx};
    bwd_fn(act, x)(&c, b, e, 0, 0);
}

/* The GELUs' forward with the backward's factor kept (linear_act_grad_fwd),
 * and the backward that multiplies by it (linear_mul_bwd): the lanes of
 * fwd_fn's and bwd_fn's kernels, so the bits of act_fwd and act_bwd. */
static pool_fn grad_fwd_fn(cdl_act act)
{
    pool_fn fn = grad_fwd_chunk_ref;
#if CPU_X86
    if (cpu_has_avx2())
        fn = grad_fwd_chunk_avx2;
    if (act == CDL_ACT_GELU && cpu_has_avx512())
        fn = gelu_grad_fwd_chunk_avx512;
#else
    (void)act;
#endif
    return fn;
}

static pool_fn mul_fn(void)
{
#if CPU_X86
    if (cpu_has_avx2())
        return mul_chunk_avx2;
#endif
    return mul_chunk_ref;
}

void cpu_act_grad_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, float *g, float *y)
{
    act_ctx c = {.act = act, .alpha = alpha, .g = g, .out = y};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, grad_fwd_fn(act), &c);
}

void cpu_act_grad_fwd_range(cdl_act act, float alpha, float *g, float *y, size_t b, size_t e)
{
    act_ctx c = {.act = act, .alpha = alpha, .g = g, .out = y};
    grad_fwd_fn(act)(&c, b, e, 0, 0);
}

void cpu_act_mul(cdl_backend *be, size_t n, const float *g, const float *dy, float *dx)
{
    act_ctx c = {.x = g, .dy = dy, .out = dx};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, mul_fn(), &c);
}

void cpu_act_mul_range(const float *g, const float *dy, float *dx, size_t b, size_t e)
{
    act_ctx c = {.x = g, .dy = dy, .out = dx};
    mul_fn()(&c, b, e, 0, 0);
}
