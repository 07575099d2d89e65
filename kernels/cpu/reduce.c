/* sumsq: the squared L2 norm of a flat range in double (gradient clipping).
 * Each thread sums its static chunk with 8 interleaved accumulators (fixed
 * order, vectorisable); the per-thread sums are added in thread order, so the
 * result is bitwise reproducible for a given thread count. */
#include "kernels/cpu/cpu.h"

typedef struct sumsq_ctx {
    const float *x;
    double partial[CPU_MAX_THREADS];
} sumsq_ctx;

static double sumsq_serial(const float *x, size_t n)
{
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++)
        acc[i & 7] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static void sumsq_chunk(void *vctx, size_t b, size_t e, int tid)
{
    sumsq_ctx *c = vctx;
    c->partial[tid] = sumsq_serial(c->x + b, e - b);
}

double cpu_sumsq(cdl_backend *be, const float *x, size_t n)
{
    /* ~8 KB of partials on the stack: no allocation, any thread count. */
    sumsq_ctx c;
    c.x = x;
    int t = pool_threads(cpu_pool(be));
    for (int i = 0; i < t && i < CPU_MAX_THREADS; i++)
        c.partial[i] = 0.0;
    pool_for_grain(cpu_pool(be), n, CPU_ELT_GRAIN, sumsq_chunk, &c);
    double s = 0.0;
    for (int i = 0; i < t; i++)
        s += c.partial[i];
    return s;
}
