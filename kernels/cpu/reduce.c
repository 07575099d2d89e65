/* sumsq: the squared L2 norm of a flat range in double (gradient clipping).
 * Each chunk (pool.h) is summed with 8 interleaved accumulators (fixed
 * order, vectorisable); the chunk sums are added in chunk order, so the
 * result is bitwise reproducible for a given thread count. */
#include "kernels/cpu/cpu.h"

typedef struct sumsq_ctx {
    const float *x;
    double partial[CPU_MAX_THREADS * POOL_CHUNKS_PER_THREAD];
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

static void sumsq_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)tid;
    sumsq_ctx *c = vctx;
    c->partial[chunk] = sumsq_serial(c->x + b, e - b);
}

double cpu_sumsq(cdl_backend *be, const float *x, size_t n)
{
    if (!n)
        return 0.0;
    /* The partials live on the stack (at most 16 KB): no allocation. */
    sumsq_ctx c;
    c.x = x;
    int chunks = pool_chunks(cpu_pool(be), n, CPU_ELT_GRAIN);
    pool_run(cpu_pool(be), n, chunks, sumsq_chunk, &c);
    double s = 0.0;
    for (int i = 0; i < chunks; i++)
        s += c.partial[i];
    return s;
}
