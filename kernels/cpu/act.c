/* Elementwise activations act_fwd/act_bwd (cdl_act in backend.h) over flat
 * float ranges, split into chunks of CPU_ELT_GRAIN floats like eltwise.c.
 *
 * act_ref/act_grad_ref are the definitions, one element at a time with
 * libm (the portable path), which the tests check against double
 * precision.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"

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

/* dact/dx at x (or from y = act(x)) times dy. */
static float act_grad_ref(cdl_act act, float alpha, float x, float y, float dy)
{
    switch (act) {
    case CDL_ACT_RELU: return y > 0.0f ? dy : 0.0f;
    case CDL_ACT_GELU:
        return dy * (0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x));
    case CDL_ACT_GELU_TANH: {
        float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        return dy * (0.5f * (1.0f + t) +
                     0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x));
    }
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


void cpu_act_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x, float *y)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .out = y};
    pool_fn fn = fwd_chunk_ref;
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, fn, &c);
}

void cpu_act_bwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                 const float *y, const float *dy, float *dx)
{
    act_ctx c = {.act = act, .alpha = alpha, .x = x, .y = y, .dy = dy, .out = dx};
    pool_fn fn = bwd_chunk_ref;
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN / 4, fn, &c);
}
