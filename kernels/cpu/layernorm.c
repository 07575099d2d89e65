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
 * split would need per-thread partials). On one thread the dx pass adds
 * each row into the same double sums while the row is in cache (rows in
 * order: the same bits), and the second pass is skipped.
 *
 * Each row kernel has a plain C loop (the definition; the portable path)
 * and an AVX2 twin picked at run time (simd.h); the tests run both against
 * the double twin in tests/unit/ref_ops.c.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Columns per item of the dgamma/dbeta pass: one cache line, whose 16
 * double sums (x2) the AVX2 kernel keeps in registers. */
#define LN_COLS 16

/* Widest row whose dgamma/dbeta sums the one-thread dx pass keeps (on the
 * stack: 2 x 8 KB of doubles). */
#define LN_FUSE_MAX 1024

/* ---- row kernels: reference ---- */

/* Mean and 1/sqrt(var + eps) of one row: batch norm's plane sums (with
 * their AVX2 twins), in double. */
static void row_stats(const float *x, int d, float eps, float *mean, float *rstd)
{
    float m = (float)(cpu_plane_sum(x, d) / d);
    *mean = m;
    *rstd = (float)(1.0 / sqrt(cpu_plane_sqdev(x, d, m) / d + eps));
}

static void apply_ref(const float *x, int d, float mean, float rstd, const float *gamma,
                      const float *beta, float *y)
{
    for (int j = 0; j < d; j++) {
        float t = (x[j] - mean) * rstd;
        y[j] = t * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
    }
}

/* *sg += sum of g = dy*gamma, *sgx += sum of g*xhat. */
static void dx_sums_ref(const float *x, const float *dy, int d, float mean, float rstd,
                        const float *gamma, double *sg, double *sgx)
{
    for (int j = 0; j < d; j++) {
        float g = dy[j] * (gamma ? gamma[j] : 1.0f);
        *sg += g;
        *sgx += (double)g * ((x[j] - mean) * rstd);
    }
}

/* dx = rstd * (g - a - xhat * b), or dx += that (acc). */
static void dx_apply_ref(const float *x, const float *dy, int d, float mean, float rstd,
                         const float *gamma, float a, float b, float *dx, int acc)
{
    for (int j = 0; j < d; j++) {
        float g = dy[j] * (gamma ? gamma[j] : 1.0f);
        float xhat = (x[j] - mean) * rstd;
        float v = rstd * (g - a - xhat * b);
        dx[j] = acc ? dx[j] + v : v;
    }
}

/* One block of columns [0,n) (n <= LN_COLS) of x and dy (rows, stride d):
 * dgamma[j] = sum over rows of dy * xhat, dbeta[j] = sum of dy, each
 * summed in double over the rows in order; NULL outputs are not written. */
static void param_block_ref(const float *x, const float *dy, size_t d, int rows, int n,
                            const float *saved, float *dgamma, float *dbeta)
{
    double sg[LN_COLS] = {0}, sb[LN_COLS] = {0};
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d, *g = dy + (size_t)r * d;
        float mean = saved[r], rstd = saved[rows + r];
        for (int j = 0; j < n; j++) {
            sg[j] += (double)g[j] * ((xr[j] - mean) * rstd);
            sb[j] += g[j];
        }
    }
    for (int j = 0; j < n; j++) {
        if (dgamma)
            dgamma[j] = (float)sg[j];
        if (dbeta)
            dbeta[j] = (float)sb[j];
    }
}

/* One row's terms of dgamma and dbeta added to sg[j] and sb[j] (d doubles
 * each): param_block_ref's operations for row r, so summing the rows in
 * order gives its bits. */
static void param_row_ref(const float *x, const float *dy, int d, float mean, float rstd,
                          double *sg, double *sb)
{
    for (int j = 0; j < d; j++) {
        sg[j] += (double)dy[j] * ((x[j] - mean) * rstd);
        sb[j] += dy[j];
    }
}

/* dx_sums_ref and param_row_ref in one call (the one-thread dx pass): each
 * sum gets the same terms in the same order, so the same bits. */
static void dx_param_sums_ref(const float *x, const float *dy, int d, float mean, float rstd,
                              const float *gamma, double *sg, double *sgx, double *psg,
                              double *psb)
{
    dx_sums_ref(x, dy, d, mean, rstd, gamma, sg, sgx);
    param_row_ref(x, dy, d, mean, rstd, psg, psb);
}

/* ---- row kernels: AVX2 (8 lanes; tails through the reference; sums in
 * double lanes like the reference's) ---- */
#if CPU_X86
static CPU_AVX2 inline __m256 gamma8(const float *gamma, int j, __m256 v)
{
    return gamma ? _mm256_mul_ps(v, _mm256_loadu_ps(gamma + j)) : v;
}

static CPU_AVX2 void apply_avx2(const float *x, int d, float mean, float rstd,
                                const float *gamma, const float *beta, float *y)
{
    __m256 m = _mm256_set1_ps(mean), r = _mm256_set1_ps(rstd);
    int j = 0;
    for (; j + 8 <= d; j += 8) {
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), r);
        t = gamma8(gamma, j, t);
        if (beta)
            t = _mm256_add_ps(t, _mm256_loadu_ps(beta + j));
        _mm256_storeu_ps(y + j, t);
    }
    apply_ref(x + j, d - j, mean, rstd, gamma ? gamma + j : NULL, beta ? beta + j : NULL, y + j);
}

/* A row's dx sums over its whole vectors (sum g, sum g xhat; g = gamma dy),
 * and with psg the (d) double sums of dy xhat and dy for dgamma and dbeta
 * in the same pass (d = 144 in the bench GPT: x and dy read and xhat
 * computed once, not twice; param_row_ref's operations in its order, so
 * the same bits). Inlined into both callers, so the first keeps no test
 * of psg. Returns where the vectors stopped. */
static CPU_AVX2 inline __attribute__((always_inline)) int
dx_sums_vec(const float *x, const float *dy, int d, float mean, float rstd, const float *gamma,
            double *sg, double *sgx, double *psg, double *psb)
{
    __m256 m = _mm256_set1_ps(mean), r = _mm256_set1_ps(rstd);
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    int j = 0;
    for (; j + 8 <= d; j += 8) {
        __m256 dv = _mm256_loadu_ps(dy + j), g = gamma8(gamma, j, dv);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), r);
        a = cpu_acc8(a, g);
        b = cpu_dot8(b, g, xh);
        if (!psg)
            continue;
        __m256d g0 = _mm256_cvtps_pd(_mm256_castps256_ps128(dv));
        __m256d g1 = _mm256_cvtps_pd(_mm256_extractf128_ps(dv, 1));
        __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(xh));
        __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(xh, 1));
        _mm256_storeu_pd(psg + j, _mm256_fmadd_pd(g0, x0, _mm256_loadu_pd(psg + j)));
        _mm256_storeu_pd(psg + j + 4, _mm256_fmadd_pd(g1, x1, _mm256_loadu_pd(psg + j + 4)));
        _mm256_storeu_pd(psb + j, _mm256_add_pd(_mm256_loadu_pd(psb + j), g0));
        _mm256_storeu_pd(psb + j + 4, _mm256_add_pd(_mm256_loadu_pd(psb + j + 4), g1));
    }
    *sg += cpu_hsum4d(a);
    *sgx += cpu_hsum4d(b);
    return j;
}

static CPU_AVX2 void dx_sums_avx2(const float *x, const float *dy, int d, float mean, float rstd,
                                  const float *gamma, double *sg, double *sgx)
{
    int j = dx_sums_vec(x, dy, d, mean, rstd, gamma, sg, sgx, NULL, NULL);
    dx_sums_ref(x + j, dy + j, d - j, mean, rstd, gamma ? gamma + j : NULL, sg, sgx);
}

static CPU_AVX2 void dx_apply_avx2(const float *x, const float *dy, int d, float mean,
                                   float rstd, const float *gamma, float a, float b, float *dx,
                                   int acc)
{
    __m256 m = _mm256_set1_ps(mean), r = _mm256_set1_ps(rstd);
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int j = 0;
    for (; j + 8 <= d; j += 8) {
        __m256 g = gamma8(gamma, j, _mm256_loadu_ps(dy + j));
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), r);
        __m256 t = _mm256_mul_ps(r, _mm256_sub_ps(_mm256_sub_ps(g, va), _mm256_mul_ps(xh, vb)));
        if (acc)
            t = _mm256_add_ps(_mm256_loadu_ps(dx + j), t);
        _mm256_storeu_ps(dx + j, t);
    }
    cpu_avx_leave();
    dx_apply_ref(x + j, dy + j, d - j, mean, rstd, gamma ? gamma + j : NULL, a, b, dx + j, acc);
}

static CPU_AVX2 void dx_param_sums_avx2(const float *x, const float *dy, int d, float mean,
                                        float rstd, const float *gamma, double *sg, double *sgx,
                                        double *psg, double *psb)
{
    int j = dx_sums_vec(x, dy, d, mean, rstd, gamma, sg, sgx, psg, psb);
    cpu_avx_leave();
    dx_param_sums_ref(x + j, dy + j, d - j, mean, rstd, gamma ? gamma + j : NULL, sg, sgx,
                      psg + j, psb + j);
}

/* A whole block of 16 columns: the 8+8 double sums stay in registers
 * over the rows; a narrower block (the tail) goes through the reference. */
static CPU_AVX2 void param_block_avx2(const float *x, const float *dy, size_t d, int rows,
                                      int n, const float *saved, float *dgamma, float *dbeta)
{
    if (n != 16) {
        cpu_avx_leave();
        param_block_ref(x, dy, d, rows, n, saved, dgamma, dbeta);
        return;
    }
    __m256d g0 = _mm256_setzero_pd(), g1 = g0, g2 = g0, g3 = g0, b0 = g0, b1 = g0, b2 = g0, b3 = g0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d, *dr = dy + (size_t)r * d;
        __m256 m = _mm256_set1_ps(saved[r]), s = _mm256_set1_ps(saved[rows + r]);
        __m256 ga = _mm256_loadu_ps(dr), gb = _mm256_loadu_ps(dr + 8);
        __m256 xa = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr), m), s);
        __m256 xb = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + 8), m), s);
        __m256d ga0 = _mm256_cvtps_pd(_mm256_castps256_ps128(ga));
        __m256d ga1 = _mm256_cvtps_pd(_mm256_extractf128_ps(ga, 1));
        __m256d gb0 = _mm256_cvtps_pd(_mm256_castps256_ps128(gb));
        __m256d gb1 = _mm256_cvtps_pd(_mm256_extractf128_ps(gb, 1));
        g0 = _mm256_fmadd_pd(ga0, _mm256_cvtps_pd(_mm256_castps256_ps128(xa)), g0);
        g1 = _mm256_fmadd_pd(ga1, _mm256_cvtps_pd(_mm256_extractf128_ps(xa, 1)), g1);
        g2 = _mm256_fmadd_pd(gb0, _mm256_cvtps_pd(_mm256_castps256_ps128(xb)), g2);
        g3 = _mm256_fmadd_pd(gb1, _mm256_cvtps_pd(_mm256_extractf128_ps(xb, 1)), g3);
        b0 = _mm256_add_pd(b0, ga0);
        b1 = _mm256_add_pd(b1, ga1);
        b2 = _mm256_add_pd(b2, gb0);
        b3 = _mm256_add_pd(b3, gb1);
    }
    __m256d gs[4] = {g0, g1, g2, g3}, bs[4] = {b0, b1, b2, b3};
    for (int q = 0; q < 4; q++) {
        if (dgamma)
            _mm_storeu_ps(dgamma + 4 * q, _mm256_cvtpd_ps(gs[q]));
        if (dbeta)
            _mm_storeu_ps(dbeta + 4 * q, _mm256_cvtpd_ps(bs[q]));
    }
}

/* param_block_avx2 with 16 double lanes in 4 zmm: the same double
 * operations lane for lane, row by row, so the same bits. */
static CPU_AVX512 void param_block_avx512(const float *x, const float *dy, size_t d, int rows,
                                         int n, const float *saved, float *dgamma, float *dbeta)
{
    if (n != 16) {
        cpu_avx_leave();
        param_block_ref(x, dy, d, rows, n, saved, dgamma, dbeta);
        return;
    }
    __m512d g0 = _mm512_setzero_pd(), g1 = g0, b0 = g0, b1 = g0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d, *dr = dy + (size_t)r * d;
        __m512 g = _mm512_loadu_ps(dr);
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr), _mm512_set1_ps(saved[r])),
                                  _mm512_set1_ps(saved[rows + r]));
        __m512d glo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
        __m512d ghi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
        __m512d xlo = _mm512_cvtps_pd(_mm512_castps512_ps256(xh));
        __m512d xhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xh), 1)));
        g0 = _mm512_fmadd_pd(glo, xlo, g0);
        g1 = _mm512_fmadd_pd(ghi, xhi, g1);
        b0 = _mm512_add_pd(b0, glo);
        b1 = _mm512_add_pd(b1, ghi);
    }
    if (dgamma) {
        _mm256_storeu_ps(dgamma, _mm512_cvtpd_ps(g0));
        _mm256_storeu_ps(dgamma + 8, _mm512_cvtpd_ps(g1));
    }
    if (dbeta) {
        _mm256_storeu_ps(dbeta, _mm512_cvtpd_ps(b0));
        _mm256_storeu_ps(dbeta + 8, _mm512_cvtpd_ps(b1));
    }
}
#endif

typedef struct ln_kernels {
    void (*apply)(const float *x, int d, float mean, float rstd, const float *gamma,
                  const float *beta, float *y);
    void (*dx_sums)(const float *x, const float *dy, int d, float mean, float rstd,
                    const float *gamma, double *sg, double *sgx);
    void (*dx_apply)(const float *x, const float *dy, int d, float mean, float rstd,
                     const float *gamma, float a, float b, float *dx, int acc);
    void (*param_block)(const float *x, const float *dy, size_t d, int rows, int n,
                        const float *saved, float *dgamma, float *dbeta);
    void (*dx_param_sums)(const float *x, const float *dy, int d, float mean, float rstd,
                          const float *gamma, double *sg, double *sgx, double *psg, double *psb);
} ln_kernels;

static ln_kernels pick(void)
{
#if CPU_X86
    if (cpu_has_avx2())
        return (ln_kernels){apply_avx2, dx_sums_avx2, dx_apply_avx2,
                            cpu_has_avx512() ? param_block_avx512 : param_block_avx2,
                            dx_param_sums_avx2};
#endif
    return (ln_kernels){apply_ref, dx_sums_ref, dx_apply_ref, param_block_ref,
                        dx_param_sums_ref};
}

typedef struct ln_ctx {
    ln_kernels k;
    int rows, d;
    float eps;
    const float *x, *gamma, *beta, *dy;
    float *y, *saved, *dx, *dgamma, *dbeta;
    const float *csaved;
    int acc;          /* dx += (layernorm_bwd_acc) */
    double *sg, *sb;  /* the dx pass also sums dgamma, dbeta here (one thread) */
} ln_ctx;

static void fwd_rows(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const ln_ctx *c = vctx;
    size_t d = (size_t)c->d;
    for (size_t r = b; r < e; r++) {
        float mean, rstd;
        row_stats(c->x + r * d, c->d, c->eps, &mean, &rstd);
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
    for (size_t r = b; r < e; r++) {
        const float *x = c->x + r * d, *dy = c->dy + r * d;
        float mean = c->csaved[r], rstd = c->csaved[(size_t)c->rows + r];
        double sg = 0.0, sgx = 0.0;
        if (c->sg)
            c->k.dx_param_sums(x, dy, c->d, mean, rstd, c->gamma, &sg, &sgx, c->sg, c->sb);
        else
            c->k.dx_sums(x, dy, c->d, mean, rstd, c->gamma, &sg, &sgx);
        c->k.dx_apply(x, dy, c->d, mean, rstd, c->gamma, (float)(sg / c->d),
                      (float)(sgx / c->d), c->dx + r * d, c->acc);
    }
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
        c->k.param_block(c->x + j0, c->dy + j0, d, c->rows, (int)(j1 - j0), c->csaved,
                         c->dgamma ? c->dgamma + j0 : NULL, c->dbeta ? c->dbeta + j0 : NULL);
    }
}

static void layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                          const float *saved, const float *dy, float *dx, float *dgamma,
                          float *dbeta, int acc)
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
                .csaved = saved, .dx = dx, .dgamma = dgamma, .dbeta = dbeta, .acc = acc};
    if (dx && (dgamma || dbeta) && d <= LN_FUSE_MAX && pool_threads(cpu_pool(be)) == 1) {
        /* One pass, rows in order on this thread (see the top comment). */
        double sums[2 * LN_FUSE_MAX];
        for (int j = 0; j < 2 * d; j++)
            sums[j] = 0.0;
        c.sg = sums;
        c.sb = sums + d;
        dx_rows(&c, 0, (size_t)rows, 0, 0);
        for (int j = 0; j < d; j++) {
            if (dgamma)
                dgamma[j] = (float)c.sg[j];
            if (dbeta)
                dbeta[j] = (float)c.sb[j];
        }
        return;
    }
    if (dx)
        pool_for(cpu_pool(be), (size_t)rows, (size_t)(CPU_ELT_GRAIN / d) + 1, dx_rows, &c);
    if (dgamma || dbeta) {
        size_t blocks = ((size_t)d + LN_COLS - 1) / LN_COLS;
        size_t per_block = (size_t)rows * LN_COLS;
        pool_for(cpu_pool(be), blocks, CPU_ELT_GRAIN / per_block + 1, param_cols, &c);
    }
}

void cpu_layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *saved, const float *dy, float *dx, float *dgamma,
                       float *dbeta)
{
    layernorm_bwd(be, rows, d, x, gamma, saved, dy, dx, dgamma, dbeta, 0);
}

/* dx += the gradient: the bits of cpu_layernorm_bwd into scratch and then
 * cpu_accumulate (one float add per element, after the same value). */
void cpu_layernorm_bwd_acc(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                           const float *saved, const float *dy, float *dx, float *dgamma,
                           float *dbeta)
{
    layernorm_bwd(be, rows, d, x, gamma, saved, dy, dx, dgamma, dbeta, 1);
}
