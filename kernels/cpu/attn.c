/* Causal multi-head self-attention (nanoGPT's CausalSelfAttention between
 * c_attn and c_proj); shapes and semantics in lib/cdl/backend.h.
 *
 * qkv (n, T, 3C): q, k, v side by side, head h = columns [h*hd, (h+1)*hd)
 * of each (hd = C/nh); y (n, T, C); lse (n, nh, T). Per (sample, head):
 *   S = q k^T * scale (scale = 1/sqrt(hd)), S[t][s] = -inf for s > t
 *   P = softmax over each row, lse[t] = log sum_s exp(S[t][s])
 *   y = P v
 * Backward, from P = exp(S - lse) recomputed (nothing T x T is saved):
 *   dv = P^T dy, dP = dy v^T, D[t] = dy[t] . y[t] (= sum_s P dP),
 *   dS = P (dP - D), dq = dS k * scale, dk = dS^T q * scale.
 *
 * Work items are the n*nh (sample, head) pairs; each owns its head's
 * columns of y, lse and dqkv outright, so results do not depend on the
 * thread count and nothing needs reducing. Two paths:
 *   - the reference (cpu_attn_ref_*): plain loops straight from the
 *     definition, one score row of scratch;
 *   - the fast path (the table's entries): blocks of ATTN_BLOCK query rows,
 *     each a single-threaded SGEMM against the keys up to the block's last
 *     row only (the causal mask skips the blocks above the diagonal), the
 *     scale, mask and softmax fused in one pass over the block's scores,
 *     then a second SGEMM. The backward accumulates dk and dv over the
 *     blocks in block order (fixed, so deterministic).
 * Scratch per thread: 2 blocks of ATTN_BLOCK x T scores (the reference uses
 * the first 2T floats of its thread's share).
 */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Query rows per block of the fast path: the scores of a block (64 x T)
 * stay in L2 between the GEMMs and the softmax. */
#define ATTN_BLOCK 64

typedef struct attn_ctx {
    int n, T, C, nh, hd;
    float scale;
    const float *qkv, *y, *lse, *dy;
    float *yo, *lse_o, *dqkv, *ws;
    size_t ws_per_thread;
} attn_ctx;

static size_t attn_round16(int v)
{
    return ((size_t)v + 15) / 16 * 16;
}

/* 2 blocks of scores, then the AVX2 path's panel: one GEMM operand packed
 * 16 columns wide (at most max(T, hd) rows of round16(min) columns). */
static size_t attn_thread_floats(int T, int hd)
{
    int b = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    return cpu_align16(2 * (size_t)b * (size_t)T) + attn_round16(T) * attn_round16(hd);
}

size_t cpu_attn_workspace(cdl_backend *be, int n, int T, int C, int nh)
{
    (void)n;
    if (T <= 0 || nh <= 0)
        return 0;
    return (size_t)pool_threads(cpu_pool(be)) * attn_thread_floats(T, C / nh);
}

/* The item's pointers: q, k, v of sample b, head h (row stride 3C), its y
 * and dy (row stride C), its dq, dk, dv (row stride 3C), its lse row. */
typedef struct attn_item {
    const float *q, *k, *v, *y, *dy, *lse;
    float *yo, *lse_o, *dq, *dk, *dv;
} attn_item;

static attn_item attn_at(const attn_ctx *c, size_t item)
{
    int b = (int)(item / (size_t)c->nh), h = (int)(item % (size_t)c->nh);
    size_t row3 = (size_t)b * c->T * 3 * c->C + (size_t)h * c->hd;
    size_t row1 = (size_t)b * c->T * c->C + (size_t)h * c->hd;
    attn_item it = {0};
    it.q = c->qkv + row3;
    it.k = it.q + c->C;
    it.v = it.q + 2 * c->C;
    if (c->y)
        it.y = c->y + row1;
    if (c->dy)
        it.dy = c->dy + row1;
    if (c->lse)
        it.lse = c->lse + item * (size_t)c->T;
    if (c->yo)
        it.yo = c->yo + row1;
    if (c->lse_o)
        it.lse_o = c->lse_o + item * (size_t)c->T;
    if (c->dqkv) {
        it.dq = c->dqkv + row3;
        it.dk = it.dq + c->C;
        it.dv = it.dq + 2 * c->C;
    }
    return it;
}

static float attn_dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int j = 0; j < n; j++)
        s += a[j] * b[j];
    return s;
}

/* Zeroes the head's hd columns of T rows of stride ld. */
static void attn_zero_cols(float *p, int T, int hd, size_t ld)
{
    for (int t = 0; t < T; t++)
        memset(p + (size_t)t * ld, 0, (size_t)hd * sizeof *p);
}

/* ------------------------------------------------------------------ reference */

static void attn_ref_fwd_items(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd;
    size_t ld3 = 3 * (size_t)c->C, ld1 = (size_t)c->C;
    float *p = c->ws + (size_t)tid * c->ws_per_thread;
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        for (int t = 0; t < T; t++) {
            const float *q = it.q + t * ld3;
            float m = -INFINITY;
            for (int s = 0; s <= t; s++) {
                p[s] = attn_dot(q, it.k + s * ld3, hd) * c->scale;
                if (p[s] > m)
                    m = p[s];
            }
            double sum = 0.0;
            for (int s = 0; s <= t; s++) {
                p[s] = expf(p[s] - m);
                sum += p[s];
            }
            float inv = (float)(1.0 / sum);
            float *y = it.yo + t * ld1;
            for (int j = 0; j < hd; j++) {
                float acc = 0.0f;
                for (int s = 0; s <= t; s++)
                    acc += p[s] * it.v[s * ld3 + j];
                y[j] = acc * inv;
            }
            it.lse_o[t] = m + (float)log(sum);
        }
    }
}

static void attn_ref_bwd_items(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd;
    size_t ld3 = 3 * (size_t)c->C, ld1 = (size_t)c->C;
    float *p = c->ws + (size_t)tid * c->ws_per_thread;
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        attn_zero_cols(it.dq, T, hd, ld3);
        attn_zero_cols(it.dk, T, hd, ld3);
        attn_zero_cols(it.dv, T, hd, ld3);
        for (int t = 0; t < T; t++) {
            const float *q = it.q + t * ld3, *dy = it.dy + t * ld1;
            float *dq = it.dq + t * ld3;
            float d = attn_dot(dy, it.y + t * ld1, hd);
            for (int s = 0; s <= t; s++) {
                const float *k = it.k + s * ld3, *v = it.v + s * ld3;
                float *dk = it.dk + s * ld3, *dv = it.dv + s * ld3;
                p[s] = expf(attn_dot(q, k, hd) * c->scale - it.lse[t]);
                float ds = p[s] * (attn_dot(dy, v, hd) - d) * c->scale;
                for (int j = 0; j < hd; j++) {
                    dq[j] += ds * k[j];
                    dk[j] += ds * q[j];
                    dv[j] += p[s] * dy[j];
                }
            }
        }
    }
}

/* Runs fn over the n*nh items; the forward passes y, lse out (yo, lse_o),
 * the backward y, lse in and dy, dqkv. */
static void attn_run(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                     const float *y, const float *lse, const float *dy, float *yo,
                     float *lse_o, float *dqkv, float *ws, pool_fn fn)
{
    if (n <= 0 || T <= 0)
        return;
    attn_ctx c = {.n = n, .T = T, .C = C, .nh = nh, .hd = C / nh, .qkv = qkv, .y = y,
                  .lse = lse, .dy = dy, .yo = yo, .lse_o = lse_o, .dqkv = dqkv, .ws = ws,
                  .ws_per_thread = attn_thread_floats(T, nh > 0 ? C / nh : 0)};
    c.scale = (float)(1.0 / sqrt((double)c.hd));
    pool_for(cpu_pool(be), (size_t)n * nh, 1, fn, &c);
}

void cpu_attn_ref_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                      float *y, float *lse, float *ws)
{
    attn_run(be, n, T, C, nh, qkv, NULL, NULL, NULL, y, lse, NULL, ws, attn_ref_fwd_items);
}

void cpu_attn_ref_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                      const float *y, const float *lse, const float *dy, float *dqkv,
                      float *ws)
{
    attn_run(be, n, T, C, nh, qkv, y, lse, dy, NULL, NULL, dqkv, ws, attn_ref_bwd_items);
}

/* ------------------------------------------------------------------ fast path */

/* s[j] = e^(a s[j] - b) for j < n; returns the sum of the results (in
 * double, in index order on the portable path, per lane then lane by lane
 * on the AVX2 one: fixed either way). */
static double attn_exp_ref(float *s, int n, float a, float b)
{
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        s[j] = expf(a * s[j] - b);
        sum += s[j];
    }
    return sum;
}

#if CPU_X86
static CPU_AVX2 double attn_exp_avx2(float *s, int n, float a, float b)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    __m256d acc = _mm256_setzero_pd();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = cpu_exp8(_mm256_fmsub_ps(va, _mm256_loadu_ps(s + j), vb));
        _mm256_storeu_ps(s + j, e);
        acc = cpu_acc8(acc, e);
    }
    return cpu_hsum4d(acc) + attn_exp_ref(s + j, n - j, a, b);
}
#endif

static double attn_exp(float *s, int n, float a, float b)
{
#if CPU_X86
    if (cpu_has_avx2())
        return attn_exp_avx2(s, n, a, b);
#endif
    return attn_exp_ref(s, n, a, b);
}

/* Scale, causal mask and softmax of one block's scores in place: rows
 * t0..t0+rows-1 of S (rows x keys, keys = t0+rows), row r valid up to
 * column t0+r. Forward (lse_o set): P = softmax, lse written. Backward
 * (lse set): P = exp(S*scale - lse). Masked entries become 0, so the
 * GEMMs after it can run over all `keys` columns. */
static void attn_block_softmax(float *S, int t0, int rows, int keys, float scale,
                               const float *lse, float *lse_o)
{
    for (int r = 0; r < rows; r++) {
        float *s = S + (size_t)r * keys;
        int valid = t0 + r + 1;
        if (lse) {
            attn_exp(s, valid, scale, lse[t0 + r]);
        } else {
            float m = -INFINITY;
            for (int j = 0; j < valid; j++)
                m = s[j] > m ? s[j] : m;
            m *= scale;   /* scale > 0: the maximum of the scaled scores */
            double sum = attn_exp(s, valid, scale, m);
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < valid; j++)
                s[j] *= inv;
            lse_o[t0 + r] = m + (float)log(sum);
        }
        for (int j = valid; j < keys; j++)
            s[j] = 0.0f;
    }
}

static void attn_fwd_items(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd, ld3 = 3 * c->C, ld1 = c->C;
    float *S = c->ws + (size_t)tid * c->ws_per_thread;
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
            int rows = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK, keys = t0 + rows;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f,
                        it.q + (size_t)t0 * ld3, ld3, it.k, ld3, 0.0f, S, keys);
            attn_block_softmax(S, t0, rows, keys, c->scale, NULL, it.lse_o);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, S, keys,
                        it.v, ld3, 0.0f, it.yo + (size_t)t0 * ld1, ld1);
        }
    }
}

static void attn_bwd_items(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd, ld3 = 3 * c->C, ld1 = c->C;
    int blk = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    float *P = c->ws + (size_t)tid * c->ws_per_thread;
    float *dS = P + (size_t)blk * T;
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        attn_zero_cols(it.dk, T, hd, (size_t)ld3);
        attn_zero_cols(it.dv, T, hd, (size_t)ld3);
        for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
            int rows = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK, keys = t0 + rows;
            const float *q = it.q + (size_t)t0 * ld3, *dy = it.dy + (size_t)t0 * ld1;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f, q, ld3,
                        it.k, ld3, 0.0f, P, keys);
            attn_block_softmax(P, t0, rows, keys, c->scale, it.lse, NULL);
            /* dP = dy v^T, then dS = P (dP - D) * scale in place */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f, dy, ld1,
                        it.v, ld3, 0.0f, dS, keys);
            for (int r = 0; r < rows; r++) {
                float d = attn_dot(dy + (size_t)r * ld1, it.y + (size_t)(t0 + r) * ld1, hd);
                const float *p = P + (size_t)r * keys;
                float *ds = dS + (size_t)r * keys;
                for (int j = 0; j < keys; j++)
                    ds[j] = p[j] * (ds[j] - d) * c->scale;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, dS, keys,
                        it.k, ld3, 0.0f, it.dq + (size_t)t0 * ld3, ld3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hd, rows, 1.0f, dS, keys,
                        q, ld3, 1.0f, it.dk, ld3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hd, rows, 1.0f, P, keys,
                        dy, ld1, 1.0f, it.dv, ld3);
        }
    }
}

/* ------------------------------------------------------------------ AVX2 path */
/* The per-head products are small (T x T x hd, hd = 36 in the bench GPT),
 * where a BLAS call's packing and dispatch cost as much as the arithmetic
 * and the causal half of every product is computed only to be masked. The
 * AVX2 path packs one operand into a zero-padded panel 16 columns wide and
 * runs a 4 x 16 register tile over it, skipping the tiles and the terms the
 * mask zeroes. Same blocks, same softmax, same ownership of the outputs as
 * the SGEMM path, so its results do not depend on the thread count either. */
#if CPU_X86
/* How the mask limits a product C (M x N) = A (M x K) B (K x N) whose rows
 * are tiled by 4 (row tile r .. r+3, off = the block's first query row):
 *   ATTN_ALL    every term;
 *   ATTN_UPPER  C is a score block (rows = queries off+r.., columns = keys):
 *               column tiles past the tile's last query are written 0;
 *   ATTN_KEYS   K runs over keys: only k <= off + r + 3 (P, dS are 0 past it);
 *   ATTN_QUERY  rows are keys s, K runs over the block's queries: only
 *               off + k >= r (P, dS are 0 before). */
enum { ATTN_ALL, ATTN_UPPER, ATTN_KEYS, ATTN_QUERY };

/* panel (K x round16(N)) = B (K x N, row stride ldb), or B^T when trans
 * (B then N x K); the columns past N are 0. */
static void attn_pack(float *panel, const float *B, size_t ldb, int K, int N, int trans)
{
    size_t w = attn_round16(N);
    for (int k = 0; k < K; k++) {
        float *d = panel + (size_t)k * w;
        if (trans)
            for (int j = 0; j < N; j++)
                d[j] = B[(size_t)j * ldb + k];
        else
            memcpy(d, B + (size_t)k * ldb, (size_t)N * sizeof *d);
        for (size_t j = (size_t)N; j < w; j++)
            d[j] = 0.0f;
    }
}

/* Row r of a tile: 16 sums into C (n <= 16 columns), added to C when acc. */
#define ATTN_INLINE CPU_AVX2 inline __attribute__((always_inline))

static ATTN_INLINE void attn_store16(float *C, __m256 lo, __m256 hi, int n, int acc)
{
    if (n == 16) {
        if (acc) {
            lo = _mm256_add_ps(_mm256_loadu_ps(C), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(C + 8), hi);
        }
        _mm256_storeu_ps(C, lo);
        _mm256_storeu_ps(C + 8, hi);
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, lo);
    _mm256_storeu_ps(t + 8, hi);
    for (int j = 0; j < n; j++)
        C[j] = acc ? C[j] + t[j] : t[j];
}

/* C (rows x n, n <= 16) (+)= sum over k in [k0, k1) of A(r, k) panel(k, 0..15),
 * A(r, k) = A[r ars + k acs]; rows is 4 or 1. */
static ATTN_INLINE void attn_tile(int rows, int k0, int k1, const float *A, size_t ars,
                                  size_t acs, const float *P, size_t ldp, float *C, size_t ldc,
                                  int n, int acc)
{
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
           c7 = c0;
    if (rows == 4) {
        for (int k = k0; k < k1; k++) {
            const float *a = A + (size_t)k * acs;
            __m256 b0 = _mm256_loadu_ps(P + (size_t)k * ldp);
            __m256 b1 = _mm256_loadu_ps(P + (size_t)k * ldp + 8);
            __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + ars);
            c0 = _mm256_fmadd_ps(a0, b0, c0);
            c1 = _mm256_fmadd_ps(a0, b1, c1);
            c2 = _mm256_fmadd_ps(a1, b0, c2);
            c3 = _mm256_fmadd_ps(a1, b1, c3);
            __m256 a2 = _mm256_broadcast_ss(a + 2 * ars), a3 = _mm256_broadcast_ss(a + 3 * ars);
            c4 = _mm256_fmadd_ps(a2, b0, c4);
            c5 = _mm256_fmadd_ps(a2, b1, c5);
            c6 = _mm256_fmadd_ps(a3, b0, c6);
            c7 = _mm256_fmadd_ps(a3, b1, c7);
        }
        attn_store16(C, c0, c1, n, acc);
        attn_store16(C + ldc, c2, c3, n, acc);
        attn_store16(C + 2 * ldc, c4, c5, n, acc);
        attn_store16(C + 3 * ldc, c6, c7, n, acc);
        return;
    }
    for (int k = k0; k < k1; k++) {
        __m256 a0 = _mm256_broadcast_ss(A + (size_t)k * acs);
        c0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(P + (size_t)k * ldp), c0);
        c1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(P + (size_t)k * ldp + 8), c1);
    }
    attn_store16(C, c0, c1, n, acc);
}

/* C (M x N, ldc) (+)= A (M x K) panel (K x round16(N)) under the mask rule
 * `mask` (see the enum) for a block starting at query row off. */
static CPU_AVX2 void attn_gemm(int M, int N, int K, const float *A, size_t ars, size_t acs,
                               const float *P, float *C, size_t ldc, int acc, int mask, int off)
{
    size_t ldp = attn_round16(N);
    for (int r = 0; r < M;) {
        int rows = M - r >= 4 ? 4 : 1;
        int k0 = 0, k1 = K;
        if (mask == ATTN_KEYS && off + r + rows < K)
            k1 = off + r + rows;
        if (mask == ATTN_QUERY && r - off > 0)
            k0 = r - off < K ? r - off : K;
        for (int j = 0; j < N; j += 16) {
            int n = N - j < 16 ? N - j : 16;
            float *c = C + (size_t)r * ldc + (size_t)j;
            if (mask == ATTN_UPPER && j > off + r + rows - 1) {
                for (int i = 0; i < rows; i++)
                    memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof *c);
                continue;
            }
            attn_tile(rows, k0, k1, A + (size_t)r * ars, ars, acs, P + j, ldp, c, ldc, n, acc);
        }
        r += rows;
    }
}

/* dS = P (dP - D) * scale over a block's valid columns, 8 at a time: the
 * same operations, in the same order, as the SGEMM path's loop. */
static CPU_AVX2 void attn_ds_avx2(float *ds, const float *p, int n, float d, float scale)
{
    __m256 vd = _mm256_set1_ps(d), vs = _mm256_set1_ps(scale);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 diff = _mm256_sub_ps(_mm256_loadu_ps(ds + j), vd);
        _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), diff), vs));
    }
    for (; j < n; j++)
        ds[j] = p[j] * (ds[j] - d) * scale;
}

static CPU_AVX2 void attn_fwd_items_avx2(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd;
    size_t ld3 = 3 * (size_t)c->C, ld1 = (size_t)c->C;
    int blk = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    float *S = c->ws + (size_t)tid * c->ws_per_thread;
    float *panel = S + cpu_align16(2 * (size_t)blk * (size_t)T);
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
            int rows = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK, keys = t0 + rows;
            attn_pack(panel, it.k, ld3, hd, keys, 1);   /* K^T: hd x keys */
            attn_gemm(rows, keys, hd, it.q + (size_t)t0 * ld3, ld3, 1, panel, S, (size_t)keys, 0,
                      ATTN_UPPER, t0);
            attn_block_softmax(S, t0, rows, keys, c->scale, NULL, it.lse_o);
            attn_pack(panel, it.v, ld3, keys, hd, 0);   /* V: keys x hd */
            attn_gemm(rows, hd, keys, S, (size_t)keys, 1, panel, it.yo + (size_t)t0 * ld1, ld1, 0,
                      ATTN_KEYS, t0);
        }
    }
}

static CPU_AVX2 void attn_bwd_items_avx2(void *vctx, size_t i0, size_t i1, int chunk, int tid)
{
    (void)chunk;
    const attn_ctx *c = vctx;
    int T = c->T, hd = c->hd;
    size_t ld3 = 3 * (size_t)c->C, ld1 = (size_t)c->C;
    int blk = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    float *P = c->ws + (size_t)tid * c->ws_per_thread;
    float *dS = P + (size_t)blk * T;
    float *panel = P + cpu_align16(2 * (size_t)blk * (size_t)T);
    for (size_t item = i0; item < i1; item++) {
        attn_item it = attn_at(c, item);
        attn_zero_cols(it.dk, T, hd, ld3);
        attn_zero_cols(it.dv, T, hd, ld3);
        for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
            int rows = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK, keys = t0 + rows;
            size_t ks = (size_t)keys;
            const float *q = it.q + (size_t)t0 * ld3, *dy = it.dy + (size_t)t0 * ld1;
            attn_pack(panel, it.k, ld3, hd, keys, 1);
            attn_gemm(rows, keys, hd, q, ld3, 1, panel, P, ks, 0, ATTN_UPPER, t0);
            attn_block_softmax(P, t0, rows, keys, c->scale, it.lse, NULL);
            attn_pack(panel, it.v, ld3, hd, keys, 1);   /* dP = dy V^T */
            attn_gemm(rows, keys, hd, dy, ld1, 1, panel, dS, ks, 0, ATTN_UPPER, t0);
            for (int r = 0; r < rows; r++) {
                float d = attn_dot(dy + (size_t)r * ld1, it.y + (size_t)(t0 + r) * ld1, hd);
                attn_ds_avx2(dS + (size_t)r * ks, P + (size_t)r * ks, keys, d, c->scale);
            }
            attn_pack(panel, it.k, ld3, keys, hd, 0);   /* dq = dS K */
            attn_gemm(rows, hd, keys, dS, ks, 1, panel, it.dq + (size_t)t0 * ld3, ld3, 0,
                      ATTN_KEYS, t0);
            attn_pack(panel, q, ld3, rows, hd, 0);      /* dk += dS^T q */
            attn_gemm(keys, hd, rows, dS, 1, ks, panel, it.dk, ld3, 1, ATTN_QUERY, t0);
            attn_pack(panel, dy, ld1, rows, hd, 0);     /* dv += P^T dy */
            attn_gemm(keys, hd, rows, P, 1, ks, panel, it.dv, ld3, 1, ATTN_QUERY, t0);
        }
    }
}
#endif

void cpu_attn_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv, float *y,
                  float *lse, float *ws)
{
    pool_fn fn = attn_fwd_items;
#if CPU_X86
    if (cpu_has_avx2())
        fn = attn_fwd_items_avx2;
#endif
    attn_run(be, n, T, C, nh, qkv, NULL, NULL, NULL, y, lse, NULL, ws, fn);
}

void cpu_attn_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                  const float *y, const float *lse, const float *dy, float *dqkv, float *ws)
{
    pool_fn fn = attn_bwd_items;
#if CPU_X86
    if (cpu_has_avx2())
        fn = attn_bwd_items_avx2;
#endif
    attn_run(be, n, T, C, nh, qkv, y, lse, dy, NULL, NULL, dqkv, ws, fn);
}
