/* Fully connected layer, like torch.nn.Linear: x is (n,in), w is (out,in),
 * b is (out), y is (n,out).
 *
 * Forward and dx split the batch rows over the threads (one single-threaded
 * SGEMM each). dw = dy^T x and db = sum_n dy are split over the rows of dw
 * (or over its columns when out is too small to share): each thread owns
 * whole elements of dw and sums over the full batch itself, in the same
 * order every run, so no partial buffers and no reduction are needed.
 */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Below this many multiply-adds a GEMM runs on the caller: waking a worker
 * costs more than it saves. */
#define LINEAR_SERIAL_MACS 131072

typedef struct linear_ctx {
    int n, in, out;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    int dw_by_cols;     /* split dw over its columns (in) instead of rows (out) */
    int parts;          /* chunks of the dw split = active threads */
} linear_ctx;

static void linear_fwd_rows(void *vctx, size_t r0, size_t r1, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const linear_ctx *c = vctx;
    int rows = (int)(r1 - r0);
    float *y = c->y + r0 * (size_t)c->out;
    /* The bias goes in as C with beta = 1: one write of y before the GEMM
     * instead of OpenBLAS's zeroing pass (beta = 0) and a second pass
     * adding b after it. */
    if (c->b)
        for (int r = 0; r < rows; r++)
            memcpy(y + (size_t)r * c->out, c->b, (size_t)c->out * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, c->out, c->in, 1.0f,
                c->x + r0 * (size_t)c->in, c->in, c->w, c->in, c->b ? 1.0f : 0.0f, y, c->out);
}

/* db[o] for o in [b, e): the sum of column o of dy (n rows of `out`) in row
 * order; the AVX2 path adds 8 columns at a time in the same order, so its
 * bits equal the portable loop's. */
static void linear_db_ref(const linear_ctx *c, size_t b, size_t e)
{
    for (size_t o = b; o < e; o++)
        c->db[o] = 0.0f;
    for (int r = 0; r < c->n; r++) {
        const float *g = c->dy + (size_t)r * c->out;
        for (size_t o = b; o < e; o++)
            c->db[o] += g[o];
    }
}

#if CPU_X86
static CPU_AVX2 void linear_db_avx2(const linear_ctx *c, size_t b, size_t e)
{
    size_t o = b;
    for (; o + 32 <= e; o += 32) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int r = 0; r < c->n; r++) {
            const float *g = c->dy + (size_t)r * c->out + o;
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(g));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(g + 8));
            s2 = _mm256_add_ps(s2, _mm256_loadu_ps(g + 16));
            s3 = _mm256_add_ps(s3, _mm256_loadu_ps(g + 24));
        }
        _mm256_storeu_ps(c->db + o, s0);
        _mm256_storeu_ps(c->db + o + 8, s1);
        _mm256_storeu_ps(c->db + o + 16, s2);
        _mm256_storeu_ps(c->db + o + 24, s3);
    }
    for (; o + 8 <= e; o += 8) {
        __m256 s0 = _mm256_setzero_ps();
        for (int r = 0; r < c->n; r++)
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(c->dy + (size_t)r * c->out + o));
        _mm256_storeu_ps(c->db + o, s0);
    }
    linear_db_ref(c, o, e);
}
#endif

static void linear_db(const linear_ctx *c, size_t b, size_t e)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        linear_db_avx2(c, b, e);
        return;
    }
#endif
    linear_db_ref(c, b, e);
}

static int linear_threads(cdl_backend *be, int n, int in, int out)
{
    double macs = (double)n * in * out;
    int t = pool_threads(cpu_pool(be));
    if (macs < LINEAR_SERIAL_MACS)
        return 1;
    return t;
}

void cpu_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    (void)ws;
    if (n <= 0 || out <= 0)
        return;
    linear_ctx c = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .y = y};
    int t = linear_threads(be, n, in, out);
    size_t grain = (size_t)(n + t - 1) / (size_t)t;
    pool_for(cpu_pool(be), (size_t)n, grain, linear_fwd_rows, &c);
}

/* Part `chunk` of `parts`: its rows of dx, then its slice of dw and db. The
 * parts are chunks of one item each, because the three products split
 * different dimensions. */
static void linear_bwd_part(void *vctx, size_t p0, size_t p1, int chunk, int tid)
{
    (void)p0;
    (void)p1;
    (void)tid;
    const linear_ctx *c = vctx;
    int part = chunk;
    size_t b, e;
    if (c->dx) {
        pool_chunk((size_t)c->n, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(e - b), c->in, c->out,
                        1.0f, c->dy + b * (size_t)c->out, c->out, c->w, c->in, 0.0f,
                        c->dx + b * (size_t)c->in, c->in);
    }
    if (c->dw_by_cols) {
        pool_chunk((size_t)c->in, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->out, (int)(e - b), c->n,
                        1.0f, c->dy, c->out, c->x + b, c->in, 0.0f, c->dw + b, c->in);
    } else {
        pool_chunk((size_t)c->out, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(e - b), c->in, c->n,
                        1.0f, c->dy + b, c->out, c->x, c->in, 0.0f, c->dw + b * (size_t)c->in,
                        c->in);
    }
    if (c->db) {
        pool_chunk((size_t)c->out, part, c->parts, &b, &e);
        linear_db(c, b, e);
    }
}

void cpu_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    (void)ws;
    if (out <= 0 || in <= 0)
        return;
    if (n <= 0) {
        memset(dw, 0, (size_t)out * in * sizeof *dw);
        if (db)
            memset(db, 0, (size_t)out * sizeof *db);
        return;
    }
    int t = linear_threads(be, n, in, out);
    linear_ctx c = {.n = n, .in = in, .out = out, .x = x, .w = w, .dy = dy,
                    .dx = dx, .dw = dw, .db = db, .parts = t,
                    .dw_by_cols = out < 4 * t && in > out};
    pool_run(cpu_pool(be), (size_t)t, t, linear_bwd_part, &c);
}

size_t cpu_linear_workspace(cdl_backend *be, int n, int in, int out)
{
    (void)be;
    (void)n;
    (void)in;
    (void)out;
    return 0;
}
