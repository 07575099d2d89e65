/* LayerNorm over the last axis (PyTorch's nn.LayerNorm(d)): x (rows, d),
 * one row per token.
 *
 * Forward, one row per item: mean and biased variance of the row summed in
 * double (two passes, no cancellation), rstd = 1/sqrt(var + eps), then
 * y = (x - mean) * rstd * gamma + beta in float. saved = mean (rows), then
 * rstd (rows).
 *
 * Backward: dx per row, with xhat = (x - mean) * rstd and g = dy * gamma,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
 * dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy, in a
 * second pass that gives each work item a block of columns and walks the
 * rows in order, so the sums do not depend on the thread count (a row
 * split would need per-thread partials).
 *
 * Each row kernel has a plain C loop (the definition; the portable path)
 * and an AVX2 twin picked at run time (simd.h); the tests run both against
 * the double twin in tests/unit/ref_ops.c.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Columns per item of the dgamma/dbeta pass: whole cache lines, and the
 * double accumulators of a block fit on the stack. */
#define LN_COLS 64

/* ---- row kernels: reference ---- */

/* Mean and 1/sqrt(var + eps) of one row. */
static void stats_ref(const float *x, int d, float eps, float *mean, float *rstd)
{
    double s = 0.0;
    for (int j = 0; j < d; j++)
        s += x[j];
    float m = (float)(s / d);
    double v = 0.0;
    for (int j = 0; j < d; j++) {
        float t = x[j] - m;
        v += (double)t * t;
    }
    *mean = m;
    *rstd = (float)(1.0 / sqrt(v / d + eps));
}

static void apply_ref(const float *x, int d, float mean, float rstd, const float *gamma,
                      const float *beta, float *y)
{
    for (int j = 0; j < d; j++) {
        float t = (x[j] - mean) * rstd;
        y[j] = t * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
    }
}

/* dx of one row. */
static void dx_ref(const float *x, const float *dy, int d, float mean, float rstd,
                   const float *gamma, float *dx)
{
    double sg = 0.0, sgx = 0.0;
    for (int j = 0; j < d; j++) {
        float g = dy[j] * (gamma ? gamma[j] : 1.0f);
        sg += g;
        sgx += (double)g * ((x[j] - mean) * rstd);
    }
    float a = (float)(sg / d), b = (float)(sgx / d);
    for (int j = 0; j < d; j++) {
        float g = dy[j] * (gamma ? gamma[j] : 1.0f);
        float xhat = (x[j] - mean) * rstd;
        dx[j] = rstd * (g - a - xhat * b);
    }
}

typedef struct ln_kernels {
    void (*stats)(const float *x, int d, float eps, float *mean, float *rstd);
    void (*apply)(const float *x, int d, float mean, float rstd, const float *gamma,
                  const float *beta, float *y);
    void (*dx)(const float *x, const float *dy, int d, float mean, float rstd,
               const float *gamma, float *dx);
} ln_kernels;

static ln_kernels pick(void)
{
    ln_kernels k = {stats_ref, apply_ref, dx_ref};
    return k;
}

typedef struct ln_ctx {
    ln_kernels k;
    int rows, d;
    float eps;
    const float *x, *gamma, *beta, *dy;
    float *y, *saved, *dx, *dgamma, *dbeta;
    const float *csaved;
} ln_ctx;

static void fwd_rows(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const ln_ctx *c = vctx;
    size_t d = (size_t)c->d;
    for (size_t r = b; r < e; r++) {
        float mean, rstd;
        c->k.stats(c->x + r * d, c->d, c->eps, &mean, &rstd);
        c->k.apply(c->x + r * d, c->d, mean, rstd, c->gamma, c->beta, c->y + r * d);
        c->saved[r] = mean;
        c->saved[(size_t)c->rows + r] = rstd;
    }
}

void cpu_layernorm_fwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *beta, float eps, float *y, float *saved)
{
    if (rows <= 0 || d <= 0)
        return;
    ln_ctx c = {.k = pick(), .rows = rows, .d = d, .eps = eps, .x = x, .gamma = gamma,
                .beta = beta, .y = y, .saved = saved};
    pool_for(cpu_pool(be), (size_t)rows, (size_t)(CPU_ELT_GRAIN / d) + 1, fwd_rows, &c);
}

static void dx_rows(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const ln_ctx *c = vctx;
    size_t d = (size_t)c->d;
    for (size_t r = b; r < e; r++)
        c->k.dx(c->x + r * d, c->dy + r * d, c->d, c->csaved[r], c->csaved[(size_t)c->rows + r],
                c->gamma, c->dx + r * d);
}

/* Items are blocks of LN_COLS columns; each sums its columns over the rows
 * in order. */
static void param_cols(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const ln_ctx *c = vctx;
    size_t d = (size_t)c->d;
    for (size_t blk = b; blk < e; blk++) {
        size_t j0 = blk * LN_COLS, j1 = j0 + LN_COLS < d ? j0 + LN_COLS : d;
        double sg[LN_COLS] = {0}, sb[LN_COLS] = {0};
        for (size_t r = 0; r < (size_t)c->rows; r++) {
            const float *x = c->x + r * d, *dy = c->dy + r * d;
            float mean = c->csaved[r], rstd = c->csaved[(size_t)c->rows + r];
            for (size_t j = j0; j < j1; j++) {
                sg[j - j0] += (double)dy[j] * ((x[j] - mean) * rstd);
                sb[j - j0] += dy[j];
            }
        }
        for (size_t j = j0; j < j1; j++) {
            if (c->dgamma)
                c->dgamma[j] = (float)sg[j - j0];
            if (c->dbeta)
                c->dbeta[j] = (float)sb[j - j0];
        }
    }
}

void cpu_layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *saved, const float *dy, float *dx, float *dgamma,
                       float *dbeta)
{
    if (d <= 0)
        return;
    if (rows <= 0) {
        for (int j = 0; j < d; j++) {
            if (dgamma)
                dgamma[j] = 0.0f;
            if (dbeta)
                dbeta[j] = 0.0f;
        }
        return;
    }
    ln_ctx c = {.k = pick(), .rows = rows, .d = d, .x = x, .gamma = gamma, .dy = dy,
                .csaved = saved, .dx = dx, .dgamma = dgamma, .dbeta = dbeta};
    if (dx)
        pool_for(cpu_pool(be), (size_t)rows, (size_t)(CPU_ELT_GRAIN / d) + 1, dx_rows, &c);
    if (dgamma || dbeta) {
        size_t blocks = ((size_t)d + LN_COLS - 1) / LN_COLS;
        size_t per_block = (size_t)rows * LN_COLS;
        pool_for(cpu_pool(be), blocks, CPU_ELT_GRAIN / per_block + 1, param_cols, &c);
    }
}
