/* Causal multi-head self-attention (backend.h's attn_fwd / attn_bwd; the
 * math in kernels/cpu/attn.c): qkv (n,T,3C), y (n,T,C), lse (n,nh,T),
 * items = the n*nh (sample, head) pairs, hd = C/nh, scale = 1/sqrt(hd).
 *
 * Two paths, picked by cuk_attn_flash(T, hd), the same test in the
 * workspace size and in the launches:
 *   - straightforward (short T, or hd > CUK_ATTN_FLASH_HD): the T x T
 *     scores of every item in the workspace, one elementwise kernel per
 *     step (scores, row softmax, P v; backward: P from lse, dS, then one
 *     gather kernel for dq, dk and dv). Plenty of threads for short T.
 *   - flash-style (long T): nothing T x T is ever stored. Forward: a block
 *     of FA_ROWS query rows, one per thread (q and the output in registers),
 *     walks the key tiles up to its last row through shared memory with an
 *     online softmax (running max and sum, rescaled output). Backward:
 *     D = dy . y per row; a key-owning kernel (each thread one key row, its
 *     k and v in shared memory, dk and dv in registers) walks the query
 *     tiles from its first key on, recomputing P = exp(S - lse); a
 *     query-owning kernel does the same for dq over the key tiles.
 * Every output element is written by one thread, summing in an order fixed
 * by the shape: no atomics, results reproducible bit for bit.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define FULL_MASK 0xffffffffu
/* Query rows per block of the flash kernels (one per thread). */
#define FA_ROWS 64
/* Rows of the other side's tile in shared memory per step. */
#define FA_TILE 16

extern "C" int cuk_attn_flash(int T, int hd)
{
    return T > CUK_ATTN_NAIVE_MAX_T && hd <= CUK_ATTN_FLASH_HD;
}

extern "C" size_t cuk_attn_workspace(int n, int T, int C, int nh)
{
    size_t items = (size_t)n * nh, rows = items * (size_t)T;
    if (cuk_attn_flash(T, C / nh))
        return rows;                              /* D */
    return 2 * rows * (size_t)T + rows;           /* P, dS, D */
}

/* The item's base offsets: q of sample b, head h in qkv (row stride 3C);
 * its y/dy columns (row stride C). */
static __device__ __forceinline__ size_t base3(int b, int h, int T, int C, int hd)
{
    return (size_t)b * T * 3 * C + (size_t)h * hd;
}

static __device__ __forceinline__ size_t base1(int b, int h, int T, int C, int hd)
{
    return (size_t)b * T * C + (size_t)h * hd;
}

/* ---------------------------------------------------- straightforward path */

/* Element i of the (n*nh, T, T) score arrays: its item, row t, column s,
 * and the item's sample b and head h. */
struct attn_el {
    size_t item;
    int t, s, b, h;
};

static __device__ __forceinline__ attn_el attn_decode(size_t i, int T, int nh)
{
    attn_el e;
    e.item = i / ((size_t)T * T);
    e.t = (int)(i / T % T);
    e.s = (int)(i % T);
    e.b = (int)(e.item / nh);
    e.h = (int)(e.item % nh);
    return e;
}

/* P[item][t][s] = scale q_t . k_s for s <= t (lse NULL: the raw scores) or
 * exp(that - lse[t]) (the probabilities again, for the backward); 0 above
 * the diagonal. */
static __global__ void attn_scores(int n, int T, int C, int nh, float scale, const float *qkv,
                                   const float *lse, float *P)
{
    int hd = C / nh;
    size_t total = (size_t)n * nh * T * T;
    CUK_GRID_STRIDE(i, total) {
        attn_el e = attn_decode(i, T, nh);
        if (e.s > e.t) {
            P[i] = 0.0f;
            continue;
        }
        const float *base = qkv + base3(e.b, e.h, T, C, hd);
        const float *q = base + (size_t)e.t * 3 * C, *k = base + C + (size_t)e.s * 3 * C;
        float acc = 0.0f;
        for (int j = 0; j < hd; j++)
            acc += q[j] * k[j];
        acc *= scale;
        P[i] = lse ? expf(acc - lse[e.item * T + e.t]) : acc;
    }
}

/* Row softmax of the scores, one warp per row: P = softmax over s <= t,
 * lse[row] = max + log(sum), the sum in double like the CPU. */
static __global__ void attn_softmax(size_t rows, int T, float *P, float *lse)
{
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = (int)(threadIdx.x & 31);
    if (row >= rows)
        return;   /* whole warps leave together */
    int valid = (int)(row % T) + 1;
    float *p = P + row * T;
    float m = -INFINITY;
    for (int s = lane; s < valid; s += 32)
        m = fmaxf(m, p[s]);
    for (int off = 16; off > 0; off >>= 1)
        m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, off));
    double sum = 0.0;
    for (int s = lane; s < valid; s += 32) {
        float e = expf(p[s] - m);
        p[s] = e;
        sum += e;
    }
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(FULL_MASK, sum, off);
    float inv = (float)(1.0 / sum);
    for (int s = lane; s < valid; s += 32)
        p[s] *= inv;
    if (lane == 0)
        lse[row] = m + (float)log(sum);
}

/* y[b][t][h*hd+j] = sum_{s<=t} P[item][t][s] v[b][s][h*hd+j]. */
static __global__ void attn_pv(int n, int T, int C, int nh, const float *P, const float *qkv,
                               float *y)
{
    int hd = C / nh;
    size_t total = (size_t)n * T * C;
    CUK_GRID_STRIDE(i, total) {
        int c = (int)(i % C), t = (int)(i / C % T), b = (int)(i / ((size_t)C * T));
        int h = c / hd, j = c % hd;
        const float *p = P + (((size_t)b * nh + h) * T + t) * T;
        const float *v = qkv + base3(b, h, T, C, hd) + 2 * C + j;
        float acc = 0.0f;
        for (int s = 0; s <= t; s++)
            acc += p[s] * v[(size_t)s * 3 * C];
        y[i] = acc;
    }
}

/* D[item][t] = dy_t . y_t over the head's columns (= sum_s P dP). */
static __global__ void attn_rowdot(int n, int T, int C, int nh, const float *dy, const float *y,
                                   float *D)
{
    int hd = C / nh;
    size_t total = (size_t)n * nh * T;
    CUK_GRID_STRIDE(i, total) {
        size_t item = i / T;
        int t = (int)(i % T), b = (int)(item / nh), h = (int)(item % nh);
        size_t o = base1(b, h, T, C, hd) + (size_t)t * C;
        float acc = 0.0f;
        for (int j = 0; j < hd; j++)
            acc += dy[o + j] * y[o + j];
        D[i] = acc;
    }
}

/* dS[item][t][s] = P (dy_t . v_s - D[t]) * scale for s <= t, else 0. */
static __global__ void attn_dscores(int n, int T, int C, int nh, float scale, const float *qkv,
                                    const float *dy, const float *P, const float *D, float *dS)
{
    int hd = C / nh;
    size_t total = (size_t)n * nh * T * T;
    CUK_GRID_STRIDE(i, total) {
        attn_el e = attn_decode(i, T, nh);
        if (e.s > e.t) {
            dS[i] = 0.0f;
            continue;
        }
        const float *g = dy + base1(e.b, e.h, T, C, hd) + (size_t)e.t * C;
        const float *v = qkv + base3(e.b, e.h, T, C, hd) + 2 * C + (size_t)e.s * 3 * C;
        float acc = 0.0f;
        for (int j = 0; j < hd; j++)
            acc += g[j] * v[j];
        dS[i] = P[i] * (acc - D[e.item * T + e.t]) * scale;
    }
}

/* Every element of dqkv from the saved dS and P:
 *   dq[t] = sum_{s<=t} dS[t][s] k_s;  dk[s] = sum_{t>=s} dS[t][s] q_t;
 *   dv[s] = sum_{t>=s} P[t][s] dy_t. */
static __global__ void attn_dqkv(int n, int T, int C, int nh, const float *qkv, const float *dy,
                                 const float *P, const float *dS, float *dqkv)
{
    int hd = C / nh;
    size_t total = (size_t)n * T * 3 * C;
    CUK_GRID_STRIDE(i, total) {
        int col = (int)(i % (3 * (size_t)C)), r = (int)(i / (3 * (size_t)C) % T);
        int b = (int)(i / (3 * (size_t)C * T));
        int part = col / C, c = col % C, h = c / hd, j = c % hd;
        size_t item = (size_t)b * nh + h, sq = (size_t)T * T;
        const float *qkvb = qkv + base3(b, h, T, C, hd) + j;
        float acc = 0.0f;
        if (part == 0) {
            const float *ds = dS + item * sq + (size_t)r * T;
            for (int s = 0; s <= r; s++)
                acc += ds[s] * qkvb[C + (size_t)s * 3 * C];
        } else if (part == 1) {
            const float *ds = dS + item * sq + r;
            for (int t = r; t < T; t++)
                acc += ds[(size_t)t * T] * qkvb[(size_t)t * 3 * C];
        } else {
            const float *p = P + item * sq + r;
            const float *g = dy + base1(b, h, T, C, hd) + j;
            for (int t = r; t < T; t++)
                acc += p[(size_t)t * T] * g[(size_t)t * C];
        }
        dqkv[i] = acc;
    }
}

/* ------------------------------------------------------------ flash path */

/* rows x HD floats of one item's q, k or v (base: that column block of
 * row 0, row stride ld) from row r0 into tile[rows][HD], zero past T and
 * past hd. All FA_ROWS threads of the block take part. */
template <int HD, int ROWS, int LD>
static __device__ __forceinline__ void fa_load(float (*tile)[LD], const float *base, size_t ld,
                                               int r0, int T, int hd)
{
    for (int i = (int)threadIdx.x; i < ROWS * HD; i += FA_ROWS) {
        int r = i / HD, j = i % HD;
        tile[r][j] = (r0 + r < T && j < hd) ? base[(size_t)(r0 + r) * ld + j] : 0.0f;
    }
}

/* Forward: grid (items, query blocks): items on x, which has room for any
 * batch. Thread row t keeps q_t * scale and the unnormalised output o in
 * registers; m, l: running max and sum. */
template <int HD>
static __global__ void __launch_bounds__(FA_ROWS)
fa_fwd(int T, int C, int nh, float scale, const float *qkv, float *y, float *lse)
{
    __shared__ float ks[FA_TILE][HD], vs[FA_TILE][HD];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int t0 = (int)blockIdx.y * FA_ROWS, t = t0 + (int)threadIdx.x;
    int last = t0 + FA_ROWS < T ? t0 + FA_ROWS : T;   /* keys the block needs: [0, last) */
    const float *q3 = qkv + base3(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    float q[HD], o[HD];
    CUK_UNROLL
    for (int j = 0; j < HD; j++) {
        q[j] = (t < T && j < hd) ? q3[(size_t)t * ld3 + j] * scale : 0.0f;
        o[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int s0 = 0; s0 < last; s0 += FA_TILE) {
        fa_load<HD, FA_TILE, HD>(ks, q3 + C, ld3, s0, T, hd);
        fa_load<HD, FA_TILE, HD>(vs, q3 + 2 * C, ld3, s0, T, hd);
        __syncthreads();
        int end = s0 + FA_TILE < T ? s0 + FA_TILE : T;
        if (t < T)
            for (int s = s0; s < end && s <= t; s++) {
                float sc = 0.0f;
                CUK_UNROLL
                for (int j = 0; j < HD; j++)
                    sc += q[j] * ks[s - s0][j];
                if (sc > m) {   /* new maximum: rescale what was summed */
                    float corr = expf(m - sc);
                    l *= corr;
                    CUK_UNROLL
                    for (int j = 0; j < HD; j++)
                        o[j] *= corr;
                    m = sc;
                }
                float p = expf(sc - m);
                l += p;
                CUK_UNROLL
                for (int j = 0; j < HD; j++)
                    o[j] += p * vs[s - s0][j];
            }
        __syncthreads();
    }
    if (t < T) {
        float inv = 1.0f / l;
        float *yt = y + base1(b, h, T, C, hd) + (size_t)t * C;
        CUK_UNROLL
        for (int j = 0; j < HD; j++)
            if (j < hd)
                yt[j] = o[j] * inv;
        lse[(size_t)item * T + t] = m + logf(l);
    }
}

/* Backward, key side: grid (items, key blocks). Thread key s owns k_s, v_s
 * (shared, rows padded against bank conflicts) and dk_s, dv_s (registers);
 * query tiles from the block's first key to T. */
template <int HD>
static __global__ void __launch_bounds__(FA_ROWS)
fa_bwd_kv(int T, int C, int nh, float scale, const float *qkv, const float *dy,
          const float *lse, const float *D, float *dqkv)
{
    __shared__ float ko[FA_ROWS][HD + 1], vo[FA_ROWS][HD + 1];
    __shared__ float qs[FA_TILE][HD], gs[FA_TILE][HD], ls[FA_TILE], ds_[FA_TILE];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int s0 = (int)blockIdx.y * FA_ROWS, s = s0 + (int)threadIdx.x;
    const float *q3 = qkv + base3(b, h, T, C, hd), *g1 = dy + base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    fa_load<HD, FA_ROWS, HD + 1>(ko, q3 + C, ld3, s0, T, hd);
    fa_load<HD, FA_ROWS, HD + 1>(vo, q3 + 2 * C, ld3, s0, T, hd);
    float dk[HD], dv[HD];
    CUK_UNROLL
    for (int j = 0; j < HD; j++)
        dk[j] = dv[j] = 0.0f;
    const int me = (int)threadIdx.x;
    for (int t0 = s0; t0 < T; t0 += FA_TILE) {
        fa_load<HD, FA_TILE, HD>(qs, q3, ld3, t0, T, hd);
        fa_load<HD, FA_TILE, HD>(gs, g1, (size_t)C, t0, T, hd);
        if (threadIdx.x < FA_TILE) {
            int t = t0 + (int)threadIdx.x;
            ls[threadIdx.x] = t < T ? lse[(size_t)item * T + t] : 0.0f;
            ds_[threadIdx.x] = t < T ? D[(size_t)item * T + t] : 0.0f;
        }
        __syncthreads();
        if (s < T)
            for (int r = 0; r < FA_TILE; r++) {
                int t = t0 + r;
                if (t >= T || t < s)
                    continue;
                float sc = 0.0f, dp = 0.0f;
                CUK_UNROLL
                for (int j = 0; j < HD; j++) {
                    sc += qs[r][j] * ko[me][j];
                    dp += gs[r][j] * vo[me][j];
                }
                float p = expf(sc * scale - ls[r]);
                float dsc = p * (dp - ds_[r]) * scale;
                CUK_UNROLL
                for (int j = 0; j < HD; j++) {
                    dv[j] += p * gs[r][j];
                    dk[j] += dsc * qs[r][j];
                }
            }
        __syncthreads();
    }
    if (s < T) {
        float *d3 = dqkv + base3(b, h, T, C, hd) + (size_t)s * ld3;
        CUK_UNROLL
        for (int j = 0; j < HD; j++)
            if (j < hd) {
                d3[C + j] = dk[j];
                d3[2 * C + j] = dv[j];
            }
    }
}

/* Backward, query side: grid (items, query blocks). Thread row t owns q_t
 * and dy_t (shared, padded) and dq_t (registers); key tiles up to the
 * block's last row. */
template <int HD>
static __global__ void __launch_bounds__(FA_ROWS)
fa_bwd_q(int T, int C, int nh, float scale, const float *qkv, const float *dy,
         const float *lse, const float *D, float *dqkv)
{
    __shared__ float qo[FA_ROWS][HD + 1], go[FA_ROWS][HD + 1];
    __shared__ float ks[FA_TILE][HD], vs[FA_TILE][HD];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int t0 = (int)blockIdx.y * FA_ROWS, t = t0 + (int)threadIdx.x;
    int last = t0 + FA_ROWS < T ? t0 + FA_ROWS : T;
    const float *q3 = qkv + base3(b, h, T, C, hd), *g1 = dy + base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    fa_load<HD, FA_ROWS, HD + 1>(qo, q3, ld3, t0, T, hd);
    fa_load<HD, FA_ROWS, HD + 1>(go, g1, (size_t)C, t0, T, hd);
    float lt = t < T ? lse[(size_t)item * T + t] : 0.0f;
    float dt = t < T ? D[(size_t)item * T + t] : 0.0f;
    float dq[HD];
    CUK_UNROLL
    for (int j = 0; j < HD; j++)
        dq[j] = 0.0f;
    const int me = (int)threadIdx.x;
    for (int s0 = 0; s0 < last; s0 += FA_TILE) {
        fa_load<HD, FA_TILE, HD>(ks, q3 + C, ld3, s0, T, hd);
        fa_load<HD, FA_TILE, HD>(vs, q3 + 2 * C, ld3, s0, T, hd);
        __syncthreads();
        if (t < T)
            for (int r = 0; r < FA_TILE; r++) {
                int s = s0 + r;
                if (s > t)
                    break;
                float sc = 0.0f, dp = 0.0f;
                CUK_UNROLL
                for (int j = 0; j < HD; j++) {
                    sc += qo[me][j] * ks[r][j];
                    dp += go[me][j] * vs[r][j];
                }
                float p = expf(sc * scale - lt);
                float dsc = p * (dp - dt) * scale;
                CUK_UNROLL
                for (int j = 0; j < HD; j++)
                    dq[j] += dsc * ks[r][j];
            }
        __syncthreads();
    }
    if (t < T) {
        float *d3 = dqkv + base3(b, h, T, C, hd) + (size_t)t * ld3;
        CUK_UNROLL
        for (int j = 0; j < HD; j++)
            if (j < hd)
                d3[j] = dq[j];
    }
}

/* ------------------------------------------------------------ launchers */

#define FA_DISPATCH(hd, kernel, grid, stream, ...)                                          \
    do {                                                                                   \
        if ((hd) <= 16)                                                                    \
            CUK_LAUNCH(kernel<16>, grid, FA_ROWS, stream, __VA_ARGS__);                    \
        else if ((hd) <= 32)                                                               \
            CUK_LAUNCH(kernel<32>, grid, FA_ROWS, stream, __VA_ARGS__);                    \
        else                                                                               \
            CUK_LAUNCH(kernel<64>, grid, FA_ROWS, stream, __VA_ARGS__);                    \
    } while (0)

extern "C" cudaError_t cuk_attn_fwd(cudaStream_t st, int n, int T, int C, int nh,
                                    const float *qkv, float *y, float *lse, float *ws)
{
    int hd = C / nh;
    float scale = (float)(1.0 / sqrt((double)hd));
    size_t rows = (size_t)n * nh * T;
    if (cuk_attn_flash(T, hd)) {
        dim3 grid((unsigned)(n * nh), (unsigned)((T + FA_ROWS - 1) / FA_ROWS));
        FA_DISPATCH(hd, fa_fwd, grid, st, T, C, nh, scale, qkv, y, lse);
        return cudaGetLastError();
    }
    float *P = ws;
    CUK_LAUNCH(attn_scores, cuk_blocks(rows * T), CUK_THREADS, st,
               n, T, C, nh, scale, qkv, (const float *)NULL, P);
    unsigned rb = (unsigned)((rows + CUK_THREADS / 32 - 1) / (CUK_THREADS / 32));
    CUK_LAUNCH(attn_softmax, rb, CUK_THREADS, st, rows, T, P, lse);
    CUK_LAUNCH(attn_pv, cuk_blocks((size_t)n * T * C), CUK_THREADS, st, n, T, C, nh,
               (const float *)P, qkv, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_attn_bwd(cudaStream_t st, int n, int T, int C, int nh,
                                    const float *qkv, const float *y, const float *lse,
                                    const float *dy, float *dqkv, float *ws)
{
    int hd = C / nh;
    float scale = (float)(1.0 / sqrt((double)hd));
    size_t rows = (size_t)n * nh * T;
    if (cuk_attn_flash(T, hd)) {
        float *D = ws;
        CUK_LAUNCH(attn_rowdot, cuk_blocks(rows), CUK_THREADS, st, n, T, C, nh, dy, y, D);
        dim3 grid((unsigned)(n * nh), (unsigned)((T + FA_ROWS - 1) / FA_ROWS));
        FA_DISPATCH(hd, fa_bwd_kv, grid, st, T, C, nh, scale, qkv, dy, lse, (const float *)D,
                    dqkv);
        FA_DISPATCH(hd, fa_bwd_q, grid, st, T, C, nh, scale, qkv, dy, lse, (const float *)D,
                    dqkv);
        return cudaGetLastError();
    }
    float *P = ws, *dS = ws + rows * T, *D = ws + 2 * rows * T;
    CUK_LAUNCH(attn_scores, cuk_blocks(rows * T), CUK_THREADS, st,
               n, T, C, nh, scale, qkv, lse, P);
    CUK_LAUNCH(attn_rowdot, cuk_blocks(rows), CUK_THREADS, st, n, T, C, nh, dy, y, D);
    CUK_LAUNCH(attn_dscores, cuk_blocks(rows * T), CUK_THREADS, st, n, T, C, nh, scale, qkv,
               dy, (const float *)P, (const float *)D, dS);
    CUK_LAUNCH(attn_dqkv, cuk_blocks((size_t)n * T * 3 * C), CUK_THREADS, st, n, T, C, nh, qkv,
               dy, (const float *)P, (const float *)dS, dqkv);
    return cudaGetLastError();
}
