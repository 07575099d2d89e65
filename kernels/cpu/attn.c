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

#include "kernels/cpu/attn_avx512.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Query rows per block of the fast path: the scores of a block (64 x T)
 * stay in L2 between the GEMMs and the softmax. */
#define ATTN_BLOCK 64

/* Entries past a query that the register tiles' products read from P and
 * dS (rows in fours: up to 3 past the diagonal), so the AVX paths zero
 * those and not the whole rest of a row. */
#define ATTN_TILE_PAD 3

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

/* 2 blocks of scores, then the AVX2 path's panel: k^T or v^T of a block
 * (hd rows of round16(keys) <= round16(T) columns). */
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
    if (j < n) {   /* the last 1..7 through a lane mask (0 in the other lanes) */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 x = _mm256_maskload_ps(s + j, m);
        __m256 e = _mm256_and_ps(cpu_exp8(_mm256_fmsub_ps(va, x, vb)), _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(s + j, m, e);
        acc = cpu_acc8(acc, e);
    }
    return cpu_hsum4d(acc);
}

/* attn_exp_avx2 16 lanes at a time: cpu_exp16 is cpu_exp8 lane for lane,
 * and the 16 results go into the double lanes 4 at a time in the order the
 * AVX2 path adds its two 8-lane blocks, so the same bits, sum included
 * (the tail's zero lanes add +0 to a sum of non-negative terms, as there). */
#define ATTN_AVX512 __attribute__((target("avx512f,avx2,fma")))
static ATTN_AVX512 __m256d attn_acc16(__m256d acc, __m512 e, int blocks)
{
    acc = cpu_acc8(acc, _mm512_castps512_ps256(e));
    if (blocks > 1)
        acc = cpu_acc8(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    return acc;
}

static ATTN_AVX512 double attn_exp_avx512(float *s, int n, float a, float b)
{
    __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    __m256d acc = _mm256_setzero_pd();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = cpu_exp16(_mm512_fmsub_ps(va, _mm512_loadu_ps(s + j), vb));
        _mm512_storeu_ps(s + j, e);
        acc = attn_acc16(acc, e, 2);
    }
    if (j < n) {   /* the last 1..15 through a lane mask (0 in the other lanes) */
        __mmask16 m = cpu_mask16(n - j);
        __m512 x = _mm512_maskz_loadu_ps(m, s + j);
        __m512 e = _mm512_maskz_mov_ps(m, cpu_exp16(_mm512_fmsub_ps(va, x, vb)));
        _mm512_mask_storeu_ps(s + j, m, e);
        acc = attn_acc16(acc, e, n - j > 8 ? 2 : 1);
    }
    return cpu_hsum4d(acc);
}

/* attn_exp_avx512 without the sum (the backward's P = exp(S scale - lse)):
 * the same exponentials. */
static ATTN_AVX512 double attn_exp_nosum_avx512(float *s, int n, float a, float b)
{
    __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(s + j, cpu_exp16(_mm512_fmsub_ps(va, _mm512_loadu_ps(s + j), vb)));
    if (j < n) {
        __mmask16 m = cpu_mask16(n - j);
        __m512 x = _mm512_maskz_loadu_ps(m, s + j);
        _mm512_mask_storeu_ps(s + j, m, cpu_exp16(_mm512_fmsub_ps(va, x, vb)));
    }
    return 0.0;
}
#endif

/* The largest of s[0..n) (NaNs skipped) and s[j] *= f over [0, n): the
 * same values on every path (the maximum does not depend on the order,
 * NaNs aside, and -0 / +0 give the same exponentials). */
static float attn_max_ref(const float *s, int n, float m)
{
    for (int j = 0; j < n; j++)
        m = s[j] > m ? s[j] : m;
    return m;
}

static void attn_scale_ref(float *s, int n, float f)
{
    for (int j = 0; j < n; j++)
        s[j] *= f;
}

#if CPU_X86
static CPU_AVX2 float attn_max_avx2(const float *s, int n)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8)   /* max_ps keeps its second operand when s[j] is NaN */
        vm = _mm256_max_ps(_mm256_loadu_ps(s + j), vm);
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    return attn_max_ref(s + j, n - j, attn_max_ref(lanes, 8, -INFINITY));
}

static CPU_AVX2 void attn_scale_avx2(float *s, int n, float f)
{
    __m256 vf = _mm256_set1_ps(f);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), vf));
    attn_scale_ref(s + j, n - j, f);
}

/* The AVX2 twins 16 lanes at a time; the tail through a lane mask. */
static ATTN_AVX512 float attn_max_avx512(const float *s, int n)
{
    __m512 vm = _mm512_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        vm = _mm512_max_ps(_mm512_loadu_ps(s + j), vm);
    if (j < n) {   /* lanes past n keep vm's value */
        __mmask16 m = cpu_mask16(n - j);
        vm = _mm512_mask_max_ps(vm, m, _mm512_maskz_loadu_ps(m, s + j), vm);
    }
    return _mm512_reduce_max_ps(vm);
}

static ATTN_AVX512 void attn_scale_avx512(float *s, int n, float f)
{
    __m512 vf = _mm512_set1_ps(f);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), vf));
    if (j < n) {
        __mmask16 m = cpu_mask16(n - j);
        _mm512_mask_storeu_ps(s + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vf));
    }
}
#endif

/* The row kernels of a block's softmax, picked once per block. */
typedef struct attn_rowk {
    float (*max)(const float *s, int n);
    double (*exp)(float *s, int n, float a, float b);      /* returns the sum */
    double (*exp_p)(float *s, int n, float a, float b);    /* the same values, sum unused */
    void (*scale)(float *s, int n, float f);
} attn_rowk;

static float attn_max_plain(const float *s, int n)
{
    return attn_max_ref(s, n, -INFINITY);
}

static attn_rowk attn_row_kernels(void)
{
#if CPU_X86
    if (cpu_has_avx512() && cpu_has_avx2())
        return (attn_rowk){attn_max_avx512, attn_exp_avx512, attn_exp_nosum_avx512,
                           attn_scale_avx512};
    if (cpu_has_avx2())
        return (attn_rowk){attn_max_avx2, attn_exp_avx2, attn_exp_avx2, attn_scale_avx2};
#endif
    return (attn_rowk){attn_max_plain, attn_exp_ref, attn_exp_ref, attn_scale_ref};
}

/* Scale, causal mask and softmax of one block's scores in place: rows
 * t0..t0+rows-1 of S (rows x keys, keys = t0+rows), row r valid up to
 * column t0+r. Forward (lse_o set): P = softmax, lse written. Backward
 * (lse set): P = exp(S*scale - lse). The masked entries the products after
 * it read are zeroed: pad of them past the query (fewer at the row's end).
 * The SGEMM path reads whole rows (pad = keys); the register tiles read at
 * most 3 past the query, their rows coming in fours (ATTN_KEYS and
 * ATTN_QUERY in attn_avx512.h). */
static void attn_block_softmax(float *S, int t0, int rows, int keys, float scale,
                               const float *lse, float *lse_o, int pad)
{
    attn_rowk k = attn_row_kernels();
    for (int r = 0; r < rows; r++) {
        float *s = S + (size_t)r * keys;
        int valid = t0 + r + 1;
        if (lse) {
            k.exp_p(s, valid, scale, lse[t0 + r]);
        } else {
            float m = k.max(s, valid) * scale;   /* scale > 0: the scaled scores' maximum */
            double sum = k.exp(s, valid, scale, m);
            k.scale(s, valid, (float)(1.0 / sum));
            lse_o[t0 + r] = m + (float)log(sum);
        }
        for (int j = valid; j < keys && j < valid + pad; j++)
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
            attn_block_softmax(S, t0, rows, keys, c->scale, NULL, it.lse_o, keys);
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
            attn_block_softmax(P, t0, rows, keys, c->scale, it.lse, NULL, keys);
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
 * AVX2 path runs a register tile of 4 rows x up to 24 columns (12
 * accumulators) straight over its right operand where that is stored row
 * by row (v, k, q, dy: no copy), the last 8-column vector of a tile read
 * and written through a lane mask, so hd = 36 costs 40 columns, not 48;
 * only k^T and v^T (the score products) are packed. It skips the tiles and
 * the terms the mask zeroes, zeroes only the masked entries its tiles read
 * (ATTN_TILE_PAD), and writes dk and dv where a block meets a key first
 * instead of zeroing them beforehand. Same blocks, same softmax, same
 * ownership of the outputs as the SGEMM path, so its results do not depend
 * on the thread count either. */
#if CPU_X86
/* The mask rules of the products (ATTN_ALL, ATTN_UPPER, ATTN_KEYS,
 * ATTN_QUERY) are in attn_avx512.h, shared with the AVX-512 twin. */

#define ATTN_INLINE CPU_AVX2 inline __attribute__((always_inline))

/* panel (K x round16(N)) = B^T, B being N x K with row stride ldb: 8 x 8
 * blocks through registers, the edges one float at a time. */
static CPU_AVX2 void attn_pack_t(float *panel, const float *B, size_t ldb, int K, int N)
{
    size_t w = attn_round16(N);
    int j8 = N / 8 * 8, k8 = K / 8 * 8, k4 = K / 4 * 4;
    for (int j = 0; j < j8; j += 8)
        for (int k = 0; k < k8; k += 8)
            cpu_transpose8(panel + (size_t)k * w + (size_t)j, w, B + (size_t)j * ldb + (size_t)k, ldb);
    if (k4 > k8)   /* 4 more columns (hd = 36: 32 + 4) in 4 x 4 blocks */
        for (int j = 0; j < j8; j += 4) {
            const float *b = B + (size_t)j * ldb + (size_t)k8;
            __m128 r0 = _mm_loadu_ps(b), r1 = _mm_loadu_ps(b + ldb);
            __m128 r2 = _mm_loadu_ps(b + 2 * ldb), r3 = _mm_loadu_ps(b + 3 * ldb);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *o = panel + (size_t)k8 * w + (size_t)j;
            _mm_storeu_ps(o, r0);
            _mm_storeu_ps(o + w, r1);
            _mm_storeu_ps(o + 2 * w, r2);
            _mm_storeu_ps(o + 3 * w, r3);
        }
    for (int j = 0; j < N; j++) {
        const float *b = B + (size_t)j * ldb;
        for (int k = j < j8 ? (k4 > k8 ? k4 : k8) : 0; k < K; k++)
            panel[(size_t)k * w + (size_t)j] = b[k];
    }
}


/* The first n (0..8) lanes set. */
static ATTN_INLINE __m256i attn_lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Vector v of a tile's row (nv vectors, the last through the mask). */
static ATTN_INLINE __m256 attn_ld(const float *p, int v, int nv, __m256i last, int full)
{
    return v == nv - 1 && !full ? _mm256_maskload_ps(p + 8 * v, last)
                                : _mm256_loadu_ps(p + 8 * v);
}

static ATTN_INLINE void attn_st(float *p, int v, int nv, __m256i last, int full, __m256 x,
                             int acc)
{
    if (acc)
        x = _mm256_add_ps(attn_ld(p, v, nv, last, full), x);
    if (v == nv - 1 && !full)
        _mm256_maskstore_ps(p + 8 * v, last, x);
    else
        _mm256_storeu_ps(p + 8 * v, x);
}

/* C (rows x (8 (nv-1) + the lanes of last)) (+)= sum over k in [k0, k1) of
 * A(r, k) B(k, ..), A(r, k) = A[r ars + k acs], B's row k at B + k ldb;
 * rows is 4 or 1, nv 1 to 3 (constants in each caller). */
static ATTN_INLINE void attn_tile(int rows, int nv, int full, int k0, int k1, const float *A,
                                  size_t ars, size_t acs, const float *B, size_t ldb, float *C,
                                  size_t ldc, __m256i last, int acc)
{
    __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z,
           c30 = z, c31 = z, c32 = z;
    for (int k = k0; k < k1; k++) {
        const float *a = A + (size_t)k * acs, *b = B + (size_t)k * ldb;
        __m256 b0 = attn_ld(b, 0, nv, last, full);
        __m256 b1 = nv > 1 ? attn_ld(b, 1, nv, last, full) : z;
        __m256 b2 = nv > 2 ? attn_ld(b, 2, nv, last, full) : z;
#define ATTN_ROW(r)                                                \
        if (rows > r) {                                            \
            __m256 ar = _mm256_broadcast_ss(a + r * ars);          \
            c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);            \
            if (nv > 1)                                            \
                c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);        \
            if (nv > 2)                                            \
                c##r##2 = _mm256_fmadd_ps(ar, b2, c##r##2);        \
        }
        ATTN_ROW(0) ATTN_ROW(1) ATTN_ROW(2) ATTN_ROW(3)
#undef ATTN_ROW
    }
#define ATTN_OUT(r)                                                \
    if (rows > r) {                                                \
        attn_st(C + r * ldc, 0, nv, last, full, c##r##0, acc);           \
        if (nv > 1)                                                \
            attn_st(C + r * ldc, 1, nv, last, full, c##r##1, acc);       \
        if (nv > 2)                                                \
            attn_st(C + r * ldc, 2, nv, last, full, c##r##2, acc);       \
    }
    ATTN_OUT(0) ATTN_OUT(1) ATTN_OUT(2) ATTN_OUT(3)
#undef ATTN_OUT
}

/* attn_tile with rows (4 or 1), nv and full as constants. */
static ATTN_INLINE void attn_tile_any(int rows, int nv, int full, int k0, int k1, const float *A,
                                      size_t ars, size_t acs, const float *B, size_t ldb, float *C,
                                      size_t ldc, __m256i last, int acc)
{
#define ATTN_CASE(R, NV)                                                                   \
    if (rows == R && nv == NV) {                                                           \
        if (full)                                                                          \
            attn_tile(R, NV, 1, k0, k1, A, ars, acs, B, ldb, C, ldc, last, acc);           \
        else                                                                               \
            attn_tile(R, NV, 0, k0, k1, A, ars, acs, B, ldb, C, ldc, last, acc);           \
        return;                                                                            \
    }
    ATTN_CASE(4, 3) ATTN_CASE(4, 2) ATTN_CASE(4, 1) ATTN_CASE(1, 3) ATTN_CASE(1, 2)
    ATTN_CASE(1, 1)
#undef ATTN_CASE
}

/* C (M x N, ldc) (+)= A (M x K) B (K x N, row stride ldb) under the mask
 * rule `mask` (see the enum) for a block starting at query row off. */
static CPU_AVX2 void attn_gemm_avx2(int M, int N, int K, const float *A, size_t ars, size_t acs,
                               const float *B, size_t ldb, float *C, size_t ldc, int acc,
                               int mask, int off)
{
    for (int r = 0; r < M;) {
        int rows = M - r >= 4 ? 4 : 1;
        int k0 = 0, k1 = K;
        if (mask == ATTN_KEYS && off + r + rows < K)
            k1 = off + r + rows;
        if (mask == ATTN_QUERY && r - off > 0)
            k0 = r - off < K ? r - off : K;
        for (int j = 0; j < N; j += 24) {
            int n = N - j < 24 ? N - j : 24;
            if (mask == ATTN_UPPER) {
                /* The columns up to the tile's last query, in whole vectors:
                 * the rest is left unwritten (the softmax and the dS pass
                 * zero what the later products read). A 24-column tile
                 * across the diagonal computed up to 20 columns of each row
                 * past it: T = 64 scored 2752 entries for 2080 (every s <= t); 2304 now. */
                int need = (off + r + rows - j + 7) / 8 * 8;
                if (need <= 0)
                    break;
                n = need < n ? need : n;
            }
            int nv = (n + 7) / 8;
            float *c = C + (size_t)r * ldc + (size_t)j;
            const float *a = A + (size_t)r * ars, *b = B + j;
            __m256i last = attn_lanes(n - 8 * (nv - 1));
            /* A whole last vector goes through plain loads and stores:
             * masked stores are slow on some CPUs (AMD's). */
            if (n % 8 == 0)
                attn_tile_any(rows, nv, 1, k0, k1, a, ars, acs, b, ldb, c, ldc, last, acc);
            else
                attn_tile_any(rows, nv, 0, k0, k1, a, ars, acs, b, ldb, c, ldc, last, acc);
        }
        r += rows;
    }
}

/* attn_gemm_avx2, or its AVX-512 twin (the same bits) where the CPU has it. */
static void attn_gemm(int M, int N, int K, const float *A, size_t ars, size_t acs, const float *B,
                      size_t ldb, float *C, size_t ldc, int acc, int mask, int off)
{
    if (cpu_has_avx512())
        attn512_gemm(M, N, K, A, ars, acs, B, ldb, C, ldc, acc, mask, off);
    else
        attn_gemm_avx2(M, N, K, A, ars, acs, B, ldb, C, ldc, acc, mask, off);
}

/* D = dy . y of one row, 8 lanes of partial sums (the last < 8 through a
 * mask), then the lanes added pairwise: one fixed order on both the AVX2
 * and AVX-512 paths. */
static CPU_AVX2 float attn_dot_avx2(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
    if (j < n) {
        __m256i m = attn_lanes(n - j);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + j, m), _mm256_maskload_ps(b + j, m), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
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

/* dk or dv of a block at t0 (rows queries, keys = t0 + rows): out (keys x
 * hd) += A^T B, A = dS or P (rows x keys, row stride ks), B = q or dy
 * (rows x hd). Keys before t0 add to what the earlier blocks left; keys
 * from t0 on are first met here, so they are written, not added to: no
 * pass zeroes dk and dv first. t0 is a multiple of 4, so the key tiles are
 * those of one call over all the keys. */
static void attn_key_grads(int t0, int rows, int hd, const float *A, size_t ks, const float *B,
                           size_t ldb, float *out, size_t ldo)
{
    if (t0 > 0)
        attn_gemm(t0, hd, rows, A, 1, ks, B, ldb, out, ldo, 1, ATTN_QUERY, t0);
    attn_gemm(rows, hd, rows, A + t0, 1, ks, B, ldb, out + (size_t)t0 * ldo, ldo, 0, ATTN_QUERY, 0);
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
            attn_pack_t(panel, it.k, ld3, hd, keys);   /* K^T: hd x keys */
            attn_gemm(rows, keys, hd, it.q + (size_t)t0 * ld3, ld3, 1, panel, attn_round16(keys),
                      S, (size_t)keys, 0, ATTN_UPPER, t0);
            attn_block_softmax(S, t0, rows, keys, c->scale, NULL, it.lse_o, ATTN_TILE_PAD);
            attn_gemm(rows, hd, keys, S, (size_t)keys, 1, it.v, ld3, it.yo + (size_t)t0 * ld1, ld1,
                      0, ATTN_KEYS, t0);
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
        for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
            int rows = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK, keys = t0 + rows;
            size_t ks = (size_t)keys;
            const float *q = it.q + (size_t)t0 * ld3, *dy = it.dy + (size_t)t0 * ld1;
            size_t kw = attn_round16(keys);
            attn_pack_t(panel, it.k, ld3, hd, keys);
            attn_gemm(rows, keys, hd, q, ld3, 1, panel, kw, P, ks, 0, ATTN_UPPER, t0);
            attn_block_softmax(P, t0, rows, keys, c->scale, it.lse, NULL, ATTN_TILE_PAD);
            attn_pack_t(panel, it.v, ld3, hd, keys);   /* dP = dy V^T */
            attn_gemm(rows, keys, hd, dy, ld1, 1, panel, kw, dS, ks, 0, ATTN_UPPER, t0);
            for (int r = 0; r < rows; r++) {   /* dS past the query: 0, as P */
                float d = attn_dot_avx2(dy + (size_t)r * ld1, it.y + (size_t)(t0 + r) * ld1, hd);
                int valid = t0 + r + 1;
                float *ds = dS + (size_t)r * ks;
                attn_ds_avx2(ds, P + (size_t)r * ks, valid, d, c->scale);
                for (int j = valid; j < keys && j < valid + ATTN_TILE_PAD; j++)
                    ds[j] = 0.0f;
            }
            /* dq = dS K, dk += dS^T q, dv += P^T dy */
            attn_gemm(rows, hd, keys, dS, ks, 1, it.k, ld3, it.dq + (size_t)t0 * ld3, ld3, 0,
                      ATTN_KEYS, t0);
            attn_key_grads(t0, rows, hd, dS, ks, q, ld3, it.dk, ld3);
            attn_key_grads(t0, rows, hd, P, ks, dy, ld1, it.dv, ld3);
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
