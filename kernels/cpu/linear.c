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

/* Below this many multiply-adds a GEMM runs on the caller: waking a worker
 * costs more than it saves. */
#define LINEAR_SERIAL_MACS 32768

typedef struct linear_ctx {
    int n, in, out;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    int dw_by_cols;     /* split dw over its columns (in) instead of rows (out) */
    int parts;          /* chunks of the dw split = active threads */
} linear_ctx;

static void linear_fwd_rows(void *vctx, size_t r0, size_t r1, int tid)
{
    (void)tid;
    const linear_ctx *c = vctx;
    int rows = (int)(r1 - r0);
    float *y = c->y + r0 * (size_t)c->out;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, c->out, c->in, 1.0f,
                c->x + r0 * (size_t)c->in, c->in, c->w, c->in, 0.0f, y, c->out);
    if (c->b)
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < c->out; o++)
                y[(size_t)r * c->out + o] += c->b[o];
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
    pool_for_grain(cpu_pool(be), (size_t)n, grain, linear_fwd_rows, &c);
}

/* Worker `tid` of `parts`: its rows of dx, then its slice of dw and db. The
 * work is split by tid rather than by the [begin,end) range, because the
 * three products split different dimensions. */
static void linear_bwd_part(void *vctx, size_t p0, size_t p1, int tid)
{
    (void)p1;
    (void)tid;
    const linear_ctx *c = vctx;
    int part = (int)p0;
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
        for (size_t o = b; o < e; o++)
            c->db[o] = 0.0f;
        for (int r = 0; r < c->n; r++) {
            const float *g = c->dy + (size_t)r * c->out;
            for (size_t o = b; o < e; o++)
                c->db[o] += g[o];
        }
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
    /* One item per part: pool_for over [0,t) gives worker i the item i. */
    pool_for_grain(cpu_pool(be), (size_t)t, 1, linear_bwd_part, &c);
}

size_t cpu_linear_workspace(cdl_backend *be, int n, int in, int out)
{
    (void)be;
    (void)n;
    (void)in;
    (void)out;
    return 0;
}
