/* sumsq: the squared L2 norm of a flat range in double (gradient clipping).
 * Each chunk (pool.h) is summed with 8 interleaved accumulators (fixed
 * order, vectorisable); the chunk sums are added in chunk order, so the
 * result is bitwise reproducible for a given thread count. The AVX2 twin
 * holds the 8 accumulators in the double lanes of two ymm and gives each
 * lane the portable loop's terms in its order, so both paths give the same
 * bits (test_kernels); its two independent chains of adds already keep up
 * with memory, so there is no AVX-512 twin. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

typedef struct sumsq_ctx {
    const float *x;
    double partial[CPU_MAX_THREADS * POOL_CHUNKS_PER_THREAD];
} sumsq_ctx;

/* The accumulators' tail (i from a multiple of 8 to n) and their sum. */
static double sumsq_finish(double acc[8], const float *x, size_t i, size_t n)
{
    for (; i < n; i++)
        acc[i & 7] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static double sumsq_ref(const float *x, size_t n)
{
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += (double)x[i + k] * (double)x[i + k];
    return sumsq_finish(acc, x, i, n);
}

#if CPU_X86
/* Product and sum stay two roundings, as in the portable loop (no FMA). */
static CPU_AVX2 double sumsq_avx2(const float *x, size_t n)
{
    __m256d lo = _mm256_setzero_pd(), hi = lo;   /* acc[0..3], acc[4..7] */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    double acc[8];
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
    cpu_avx_leave();
    return sumsq_finish(acc, x, i, n);
}
#endif

static double sumsq_serial(const float *x, size_t n)
{
#if CPU_X86
    if (cpu_has_avx2())
        return sumsq_avx2(x, n);
#endif
    return sumsq_ref(x, n);
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
