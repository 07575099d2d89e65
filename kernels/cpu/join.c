/* Where branches meet: add (residual join), accumulate (summing the
 * gradients of a fan-out) and channel_copy (concat and its split), over
 * flat ranges or planes of hw floats. Plain loops: the compiler vectorises
 * them for the baseline ISA, and memory bandwidth bounds them anyway. */
#include <string.h>

#include "kernels/cpu/cpu.h"

typedef struct join_ctx {
    const float *a, *b;
    float *out;
    int c, hw, src_c, src_off, dst_c, dst_off, accumulate;
} join_ctx;

/* y = a + b; y may alias a or b (each element is read before written). */
static void add_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const join_ctx *c = vctx;
    for (size_t i = b; i < e; i++)
        c->out[i] = c->a[i] + c->b[i];
}

void cpu_add(cdl_backend *be, size_t n, const float *a, const float *b, float *y)
{
    join_ctx c = {.a = a, .b = b, .out = y};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, add_chunk, &c);
}

void cpu_add_range(const float *a, const float *b, float *y, size_t begin, size_t end)
{
    join_ctx c = {.a = a, .b = b, .out = y};
    add_chunk(&c, begin, end, 0, 0);
}

void cpu_accumulate(cdl_backend *be, size_t n, const float *src, float *dst)
{
    join_ctx c = {.a = dst, .b = src, .out = dst};
    pool_for(cpu_pool(be), n, CPU_ELT_GRAIN, add_chunk, &c);
}

/* Items are (image, channel j < c) pairs: one plane of hw floats each. */
static void copy_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const join_ctx *c = vctx;
    size_t hw = (size_t)c->hw;
    for (size_t p = b; p < e; p++) {
        size_t img = p / (size_t)c->c, j = p % (size_t)c->c;
        const float *s = c->a + (img * (size_t)c->src_c + (size_t)c->src_off + j) * hw;
        float *d = c->out + (img * (size_t)c->dst_c + (size_t)c->dst_off + j) * hw;
        if (c->accumulate)
            for (size_t i = 0; i < hw; i++)
                d[i] += s[i];
        else
            memcpy(d, s, hw * sizeof *d);
    }
}

void cpu_channel_copy(cdl_backend *be, int n, int c, int hw, const float *src, int src_c,
                      int src_off, float *dst, int dst_c, int dst_off, int accumulate)
{
    join_ctx ctx = {.a = src, .out = dst, .c = c, .hw = hw, .src_c = src_c, .src_off = src_off,
                    .dst_c = dst_c, .dst_off = dst_off, .accumulate = accumulate};
    if (n <= 0 || c <= 0 || hw <= 0)
        return;
    pool_for(cpu_pool(be), (size_t)n * (size_t)c, (size_t)(CPU_ELT_GRAIN / hw) + 1, copy_planes,
             &ctx);
}
