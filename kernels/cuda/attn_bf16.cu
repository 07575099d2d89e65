/* Causal multi-head self-attention on tensor cores in bf16 (backend.h's
 * attn_fwd / attn_bwd under precision bf16; the math of attn.cu and
 * kernels/cpu/attn.c): qkv (n,T,3C), y (n,T,C), lse (n,nh,T) as in the
 * fp32 kernels, items = the n*nh (sample, head) pairs, hd = C/nh in
 * {16, 32, 64} (cuk_attn_bf16; other head sizes run attn.cu's kernels),
 * scale = 1/sqrt(hd). Nothing T x T is ever stored.
 *
 * FlashAttention-2's structure. Inputs stay fp32 in memory (the backend's
 * activations); tiles are rounded to bf16 (nearest, ties to even) as they
 * are copied to shared memory, and the tensor cores (nvcuda::wmma, bf16
 * 16x16x16 fragments, fp32 accumulators) multiply them. Softmax statistics,
 * the output accumulator, D and every gradient stay fp32; P and dS are
 * rounded to bf16 as the operands of the second products.
 *   - forward: one block per (item, 64 query rows), 4 warps of 16 rows;
 *     key/value tiles of 32 rows in shared memory, up to the block's last
 *     row (tiles above the diagonal skipped). A warp keeps its Q fragments
 *     in registers; S = Q K^T goes through shared memory, where two lanes
 *     per row do the online softmax (reference max m, sum l); O += P V
 *     accumulates in registers. The reference max moves only when a row's
 *     scores exceed it by more than FB_SLACK (P stays below e^8), and only
 *     then does O go through shared memory to have its rows rescaled.
 *     Writes y = O / l and lse = m + log l.
 *   - backward, query side (first): the same blocks; D = dy . y per row
 *     (fp32, saved in the workspace for the key side), then per key tile
 *     S = Q K^T and dP = dY V^T, P = exp(S scale - lse) and
 *     dS = P (dP - D) scale in shared memory, dQ += dS K in registers.
 *   - backward, key side: one block per (item, 64 keys), warps of 16 keys
 *     holding K and V fragments and the dK, dV accumulators; query tiles of
 *     32 rows from the block's first key to T: S^T = K Q^T, dP^T = V dY^T,
 *     then dV += P^T dY and dK += dS^T Q.
 * Rows past T are zero in shared memory and masked in the softmax.
 * Fragments are only filled, loaded, multiplied and stored (their layout
 * across a warp's lanes is undocumented); row operations happen in shared
 * memory, between __syncwarp()s. Every output element has one writer and
 * a summation order fixed by the shape: no atomics, reproducible bits.
 * The bounds the tests hold this to: docs/cuda.md ("bf16 attention").
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#ifndef CUK_EMULATION
#include <cuda_bf16.h>
#include <mma.h>
#endif

using namespace nvcuda;

typedef __nv_bfloat16 bf16;

/* bf16 tensor cores need sm_80. Device code built for an older GPU
 * (configure's NVCC_ARCH_FLAGS, tests/gpu/run.sh's own-architecture
 * build) has the kernels' names with a body that traps; the backend never
 * launches them there (ops_attn.c: compute capability 8 or more). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FB_ARCH_OK 0
#else
#define FB_ARCH_OK 1
#endif

#define FB_FULL 0xffffffffu
#define FB_WARPS 4
#define FB_THREADS (32 * FB_WARPS)
/* Rows per block: 16 per warp. */
#define FB_ROWS (16 * FB_WARPS)
/* Rows of the other side's tile per step. */
#define FB_TILE 32
/* Padding of shared rows (bf16 and fp32 elements): keeps wmma's ldm a
 * multiple of 16 bytes and every fragment 32-byte aligned, and spreads
 * rows over the banks. */
#define FB_PADH 8
#define FB_PADF 4

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
/* A row-major tile read as the transposed operand. */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

extern "C" int cuk_attn_bf16(int T, int hd)
{
    (void)T;
    return hd == 16 || hd == 32 || hd == 64;
}

#if FB_ARCH_OK

static __device__ __forceinline__ size_t fb_base3(int b, int h, int T, int C, int hd)
{
    return (size_t)b * T * 3 * C + (size_t)h * hd;
}

static __device__ __forceinline__ size_t fb_base1(int b, int h, int T, int C, int hd)
{
    return (size_t)b * T * C + (size_t)h * hd;
}

/* rows x HD floats from row r0 of base (row stride ld) into tile, rounded
 * to bf16, zero past row T; threads `me` of `count` share the copy. Four
 * floats per load when base and ld allow (always in the models: C is a
 * multiple of 16 and activations start 256-byte aligned), else one. */
template <int HD, int LD>
static __device__ __forceinline__ void fb_load(bf16 (*tile)[LD], int rows, const float *base,
                                               size_t ld, int r0, int T, int me, int count)
{
    if (((uintptr_t)base | (ld * sizeof(float))) % sizeof(float4) == 0) {
        for (int i = me; i < rows * (HD / 4); i += count) {
            int r = i / (HD / 4), j = i % (HD / 4) * 4;
            float4 v;
            v.x = v.y = v.z = v.w = 0.0f;
            if (r0 + r < T)
                v = *(const float4 *)(base + (size_t)(r0 + r) * ld + j);
            tile[r][j] = __float2bfloat16_rn(v.x);
            tile[r][j + 1] = __float2bfloat16_rn(v.y);
            tile[r][j + 2] = __float2bfloat16_rn(v.z);
            tile[r][j + 3] = __float2bfloat16_rn(v.w);
        }
        return;
    }
    for (int i = me; i < rows * HD; i += count) {
        int r = i / HD, j = i % HD;
        tile[r][j] = __float2bfloat16_rn(r0 + r < T ? base[(size_t)(r0 + r) * ld + j] : 0.0f);
    }
}

/* acc (+)= A B over K: A's 16 rows from a (row-major, lda), B's K rows
 * from b (row-major, ldb), one 16-column slab. */
template <int K>
static __device__ __forceinline__ void fb_mma_ab(frag_c &acc, const bf16 *a, unsigned lda,
                                                 const bf16 *b, unsigned ldb)
{
    CUK_UNROLL
    for (int kk = 0; kk < K / 16; kk++) {
        frag_a fa;
        frag_b fb;
        wmma::load_matrix_sync(fa, a + kk * 16, lda);
        wmma::load_matrix_sync(fb, b + (size_t)kk * 16 * ldb, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
    }
}

/* out (16 x 16*NT, fp32, ldo) = A B^T: A the warp's HD/16 fragments, B's
 * 16*NT rows from b (row-major, HD columns, ldb). */
template <int HD, int NT>
static __device__ __forceinline__ void fb_mma_abt(float *out, unsigned ldo, const frag_a *a,
                                                  const bf16 *b, unsigned ldb)
{
    CUK_UNROLL
    for (int n = 0; n < NT; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        CUK_UNROLL
        for (int kk = 0; kk < HD / 16; kk++) {
            frag_bt fb;
            wmma::load_matrix_sync(fb, b + (size_t)n * 16 * ldb + kk * 16, ldb);
            wmma::mma_sync(acc, a[kk], fb, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
    }
}

/* ---------------------------------------------------------------- forward */

template <int HD> struct __align__(32) fb_fwd_warp {
    union {
        float o[16][HD + FB_PADF];      /* O on its way through a rescale or out */
        bf16 q[16][HD + FB_PADH];       /* Q staging, before O exists */
    } u;
    float s[16][FB_TILE + FB_PADF];     /* scores */
    bf16 p[16][FB_TILE + FB_PADH];      /* probabilities (unnormalised) */
    float corr[16];                     /* each row's rescaling factor of this tile */
};

/* How far (natural log) a tile's row maximum may exceed the row's
 * reference maximum before the reference moves: until then P = exp(S - m)
 * stays below e^FB_SLACK (fine in bf16 and fp32), and O, which only the
 * move rescales, stays in registers. */
#define FB_SLACK 8.0f

/* Grid (items, query blocks); FB_THREADS threads. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fb_fwd(int T, int C, int nh, float scale, const float *qkv, float *y, float *lse)
{
    __shared__ __align__(32) bf16 ks[FB_TILE][HD + FB_PADH], vs[FB_TILE][HD + FB_PADH];
    __shared__ __align__(32) fb_fwd_warp<HD> wsh[FB_WARPS];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int t0 = (int)blockIdx.y * FB_ROWS, wt0 = t0 + warp * 16;
    int last = t0 + FB_ROWS < T ? t0 + FB_ROWS : T;   /* keys the block needs: [0, last) */
    const float *q3 = qkv + fb_base3(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    fb_fwd_warp<HD> &W = wsh[warp];

    fb_load<HD, HD + FB_PADH>(W.u.q, 16, q3, ld3, wt0, T, lane, 32);
    __syncwarp();
    frag_a qf[HD / 16];
    frag_c of[HD / 16];
    CUK_UNROLL
    for (int kk = 0; kk < HD / 16; kk++) {
        wmma::load_matrix_sync(qf[kk], &W.u.q[0][kk * 16], HD + FB_PADH);
        wmma::fill_fragment(of[kk], 0.0f);
    }

    /* Two lanes per row: row r, columns [half * width, (half + 1) * width).
     * m: the row's reference maximum, l: the sum of exp(S - m) so far. */
    const int r = lane / 2, half = lane % 2, t = wt0 + r;
    float m = -INFINITY, l = 0.0f;
    int started = 0;   /* some P V in O (warp-uniform) */
    for (int s0 = 0; s0 < last; s0 += FB_TILE) {
        __syncthreads();   /* the previous tile is used up */
        fb_load<HD, HD + FB_PADH>(ks, FB_TILE, q3 + C, ld3, s0, T, (int)threadIdx.x, FB_THREADS);
        fb_load<HD, HD + FB_PADH>(vs, FB_TILE, q3 + 2 * C, ld3, s0, T, (int)threadIdx.x,
                                  FB_THREADS);
        __syncthreads();
        if (s0 > wt0 + 15)
            continue;      /* above the diagonal for all the warp's rows */
        fb_mma_abt<HD, FB_TILE / 16>(&W.s[0][0], FB_TILE + FB_PADF, qf, &ks[0][0],
                                     HD + FB_PADH);
        __syncwarp();
        float *sr = &W.s[r][half * 16];
        float mx = -INFINITY;
        for (int c = 0; c < 16; c++) {
            int s = s0 + half * 16 + c;
            float x = s <= t && s < T ? sr[c] * scale : -INFINITY;
            sr[c] = x;
            mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FB_FULL, mx, 1));
        /* A new reference only past the slack (or the first key): corr = 0
         * from none (O and l are 0), 1 when it stays; rows without any key
         * (past T) keep -inf and P = 0. */
        float mnew = mx > m + FB_SLACK ? mx : m;
        float corr = mnew == m ? 1.0f : expf(m - mnew), sum = 0.0f;
        for (int c = 0; c < 16; c++) {
            float p = sr[c] == -INFINITY ? 0.0f : expf(sr[c] - mnew);
            W.p[r][half * 16 + c] = __float2bfloat16_rn(p);
            sum += p;
        }
        sum += __shfl_xor_sync(FB_FULL, sum, 1);
        l = l * corr + sum;
        m = mnew;
        if (!half)
            W.corr[r] = corr;
        __syncwarp();
        int rescale = 0;
        for (int i = 0; i < 16; i++)
            rescale |= W.corr[i] != 1.0f;
        if (rescale && started) {   /* warp-uniform: O's rows through shared memory */
            CUK_UNROLL
            for (int n = 0; n < HD / 16; n++)
                wmma::store_matrix_sync(&W.u.o[0][n * 16], of[n], HD + FB_PADF,
                                        wmma::mem_row_major);
            __syncwarp();
            for (int c = 0; c < HD / 2; c++)
                W.u.o[r][half * (HD / 2) + c] *= corr;
            __syncwarp();
            CUK_UNROLL
            for (int n = 0; n < HD / 16; n++)
                wmma::load_matrix_sync(of[n], &W.u.o[0][n * 16], HD + FB_PADF,
                                       wmma::mem_row_major);
        }
        CUK_UNROLL
        for (int n = 0; n < HD / 16; n++)
            fb_mma_ab<FB_TILE>(of[n], &W.p[0][0], FB_TILE + FB_PADH, &vs[0][n * 16],
                               HD + FB_PADH);
        started = 1;
    }
    __syncwarp();
    CUK_UNROLL
    for (int n = 0; n < HD / 16; n++)
        wmma::store_matrix_sync(&W.u.o[0][n * 16], of[n], HD + FB_PADF, wmma::mem_row_major);
    __syncwarp();
    if (t < T) {
        float inv = 1.0f / l;
        float *yt = y + fb_base1(b, h, T, C, hd) + (size_t)t * C + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++)
            yt[c] = W.u.o[r][half * (HD / 2) + c] * inv;
        if (!half)
            lse[(size_t)item * T + t] = m + logf(l);
    }
}

/* ------------------------------------------------------ backward, queries */

template <int HD> struct __align__(32) fb_bwd_warp {
    union {
        struct {
            float s[16][FB_TILE + FB_PADF];    /* scores (S or S^T) */
            float dp[16][FB_TILE + FB_PADF];   /* dP (or dP^T) */
        } t;
        struct {
            bf16 a[16][HD + FB_PADH];          /* Q or K staging */
            bf16 b[16][HD + FB_PADH];          /* dY or V staging */
        } in;
        float out[16][HD + FB_PADF];           /* a gradient on its way out */
    } u;
    bf16 p[16][FB_TILE + FB_PADH];             /* P^T (key side only) */
    bf16 ds[16][FB_TILE + FB_PADH];            /* dS or dS^T */
};

/* The warp's 16 x HD accumulators through shared memory into the fp32
 * gradient rows row0.. (row stride ld), rows past T left alone. */
template <int HD>
static __device__ __forceinline__ void fb_write(fb_bwd_warp<HD> &W, const frag_c *acc,
                                                float *out, size_t ld, int row0, int T,
                                                int lane)
{
    __syncwarp();
    CUK_UNROLL
    for (int n = 0; n < HD / 16; n++)
        wmma::store_matrix_sync(&W.u.out[0][n * 16], acc[n], HD + FB_PADF,
                                wmma::mem_row_major);
    __syncwarp();
    int r = lane / 2, half = lane % 2;
    if (row0 + r < T)
        for (int c = 0; c < HD / 2; c++)
            out[(size_t)(row0 + r) * ld + half * (HD / 2) + c] = W.u.out[r][half * (HD / 2) + c];
    __syncwarp();
}

/* Grid (items, query blocks); writes D (n*nh*T) and the dq columns. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fb_bwd_q(int T, int C, int nh, float scale, const float *qkv, const float *y, const float *lse,
         const float *dy, float *D, float *dqkv)
{
    __shared__ __align__(32) bf16 ks[FB_TILE][HD + FB_PADH], vs[FB_TILE][HD + FB_PADH];
    __shared__ __align__(32) fb_bwd_warp<HD> wsh[FB_WARPS];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int t0 = (int)blockIdx.y * FB_ROWS, wt0 = t0 + warp * 16;
    int last = t0 + FB_ROWS < T ? t0 + FB_ROWS : T;
    const float *q3 = qkv + fb_base3(b, h, T, C, hd);
    const float *g1 = dy + fb_base1(b, h, T, C, hd), *y1 = y + fb_base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    fb_bwd_warp<HD> &W = wsh[warp];
    const int r = lane / 2, half = lane % 2, t = wt0 + r;

    /* D_t = dy_t . y_t in fp32: two lanes per row, halves added. */
    float dt = 0.0f, lt = 0.0f;
    if (t < T) {
        const float *gt = g1 + (size_t)t * C + half * (HD / 2), *yt = y1 + (size_t)t * C + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++)
            dt += gt[c] * yt[c];
        lt = lse[(size_t)item * T + t];
    }
    dt += __shfl_xor_sync(FB_FULL, dt, 1);
    if (t < T && !half)
        D[(size_t)item * T + t] = dt;

    fb_load<HD, HD + FB_PADH>(W.u.in.a, 16, q3, ld3, wt0, T, lane, 32);
    fb_load<HD, HD + FB_PADH>(W.u.in.b, 16, g1, (size_t)C, wt0, T, lane, 32);
    __syncwarp();
    frag_a qf[HD / 16], gf[HD / 16];
    frag_c dq[HD / 16];
    CUK_UNROLL
    for (int kk = 0; kk < HD / 16; kk++) {
        wmma::load_matrix_sync(qf[kk], &W.u.in.a[0][kk * 16], HD + FB_PADH);
        wmma::load_matrix_sync(gf[kk], &W.u.in.b[0][kk * 16], HD + FB_PADH);
        wmma::fill_fragment(dq[kk], 0.0f);
    }
    __syncwarp();

    for (int s0 = 0; s0 < last; s0 += FB_TILE) {
        __syncthreads();
        fb_load<HD, HD + FB_PADH>(ks, FB_TILE, q3 + C, ld3, s0, T, (int)threadIdx.x, FB_THREADS);
        fb_load<HD, HD + FB_PADH>(vs, FB_TILE, q3 + 2 * C, ld3, s0, T, (int)threadIdx.x,
                                  FB_THREADS);
        __syncthreads();
        if (s0 > wt0 + 15)
            continue;
        fb_mma_abt<HD, FB_TILE / 16>(&W.u.t.s[0][0], FB_TILE + FB_PADF, qf, &ks[0][0],
                                     HD + FB_PADH);
        fb_mma_abt<HD, FB_TILE / 16>(&W.u.t.dp[0][0], FB_TILE + FB_PADF, gf, &vs[0][0],
                                     HD + FB_PADH);
        __syncwarp();
        for (int c = 0; c < 16; c++) {
            int col = half * 16 + c, s = s0 + col;
            float p = s <= t && t < T ? expf(W.u.t.s[r][col] * scale - lt) : 0.0f;
            W.ds[r][col] = __float2bfloat16_rn(p * (W.u.t.dp[r][col] - dt) * scale);
        }
        __syncwarp();
        CUK_UNROLL
        for (int n = 0; n < HD / 16; n++)
            fb_mma_ab<FB_TILE>(dq[n], &W.ds[0][0], FB_TILE + FB_PADH, &ks[0][n * 16],
                               HD + FB_PADH);
    }
    fb_write<HD>(W, dq, dqkv + fb_base3(b, h, T, C, hd), ld3, wt0, T, lane);
}

/* --------------------------------------------------------- backward, keys */

/* Grid (items, key blocks); reads D from fb_bwd_q, writes dk and dv. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fb_bwd_kv(int T, int C, int nh, float scale, const float *qkv, const float *lse,
          const float *dy, const float *D, float *dqkv)
{
    __shared__ __align__(32) bf16 qs[FB_TILE][HD + FB_PADH], gs[FB_TILE][HD + FB_PADH];
    __shared__ float ls[FB_TILE], dd[FB_TILE];
    __shared__ __align__(32) fb_bwd_warp<HD> wsh[FB_WARPS];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int s0 = (int)blockIdx.y * FB_ROWS, ws0 = s0 + warp * 16;
    const float *q3 = qkv + fb_base3(b, h, T, C, hd), *g1 = dy + fb_base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    fb_bwd_warp<HD> &W = wsh[warp];
    const int r = lane / 2, half = lane % 2, s = ws0 + r;

    fb_load<HD, HD + FB_PADH>(W.u.in.a, 16, q3 + C, ld3, ws0, T, lane, 32);
    fb_load<HD, HD + FB_PADH>(W.u.in.b, 16, q3 + 2 * C, ld3, ws0, T, lane, 32);
    __syncwarp();
    frag_a kf[HD / 16], vf[HD / 16];
    frag_c dk[HD / 16], dv[HD / 16];
    CUK_UNROLL
    for (int kk = 0; kk < HD / 16; kk++) {
        wmma::load_matrix_sync(kf[kk], &W.u.in.a[0][kk * 16], HD + FB_PADH);
        wmma::load_matrix_sync(vf[kk], &W.u.in.b[0][kk * 16], HD + FB_PADH);
        wmma::fill_fragment(dk[kk], 0.0f);
        wmma::fill_fragment(dv[kk], 0.0f);
    }
    __syncwarp();

    for (int q0 = s0; q0 < T; q0 += FB_TILE) {
        __syncthreads();
        fb_load<HD, HD + FB_PADH>(qs, FB_TILE, q3, ld3, q0, T, (int)threadIdx.x, FB_THREADS);
        fb_load<HD, HD + FB_PADH>(gs, FB_TILE, g1, (size_t)C, q0, T, (int)threadIdx.x,
                                  FB_THREADS);
        if (threadIdx.x < FB_TILE) {
            int tq = q0 + (int)threadIdx.x;
            ls[threadIdx.x] = tq < T ? lse[(size_t)item * T + tq] : 0.0f;
            dd[threadIdx.x] = tq < T ? D[(size_t)item * T + tq] : 0.0f;
        }
        __syncthreads();
        if (q0 + FB_TILE - 1 < ws0)
            continue;   /* every query of the tile is before the warp's keys */
        fb_mma_abt<HD, FB_TILE / 16>(&W.u.t.s[0][0], FB_TILE + FB_PADF, kf, &qs[0][0],
                                     HD + FB_PADH);
        fb_mma_abt<HD, FB_TILE / 16>(&W.u.t.dp[0][0], FB_TILE + FB_PADF, vf, &gs[0][0],
                                     HD + FB_PADH);
        __syncwarp();
        for (int c = 0; c < 16; c++) {
            int col = half * 16 + c, tq = q0 + col;
            float p = tq >= s && tq < T && s < T ? expf(W.u.t.s[r][col] * scale - ls[col])
                                                 : 0.0f;
            W.p[r][col] = __float2bfloat16_rn(p);
            W.ds[r][col] = __float2bfloat16_rn(p * (W.u.t.dp[r][col] - dd[col]) * scale);
        }
        __syncwarp();
        CUK_UNROLL
        for (int n = 0; n < HD / 16; n++) {
            fb_mma_ab<FB_TILE>(dv[n], &W.p[0][0], FB_TILE + FB_PADH, &gs[0][n * 16],
                               HD + FB_PADH);
            fb_mma_ab<FB_TILE>(dk[n], &W.ds[0][0], FB_TILE + FB_PADH, &qs[0][n * 16],
                               HD + FB_PADH);
        }
    }
    float *d3 = dqkv + fb_base3(b, h, T, C, hd);
    fb_write<HD>(W, dk, d3 + C, ld3, ws0, T, lane);
    fb_write<HD>(W, dv, d3 + 2 * C, ld3, ws0, T, lane);
}

#else /* !FB_ARCH_OK: the kernels' names for the launchers, trapping */

template <int HD>
static __global__ void fb_fwd(int, int, int, float, const float *, float *, float *)
{
    __trap();
}

template <int HD>
static __global__ void fb_bwd_q(int, int, int, float, const float *, const float *,
                                const float *, const float *, float *, float *)
{
    __trap();
}

template <int HD>
static __global__ void fb_bwd_kv(int, int, int, float, const float *, const float *,
                                 const float *, const float *, float *)
{
    __trap();
}

#endif /* FB_ARCH_OK */

/* ------------------------------------------------------------- launchers */

#define FB_DISPATCH(hd, kernel, grid, stream, ...)                                          \
    do {                                                                                   \
        if ((hd) == 16)                                                                    \
            CUK_LAUNCH(kernel<16>, grid, FB_THREADS, stream, __VA_ARGS__);                 \
        else if ((hd) == 32)                                                               \
            CUK_LAUNCH(kernel<32>, grid, FB_THREADS, stream, __VA_ARGS__);                 \
        else                                                                               \
            CUK_LAUNCH(kernel<64>, grid, FB_THREADS, stream, __VA_ARGS__);                 \
    } while (0)

extern "C" cudaError_t cuk_attn_bf16_fwd(cudaStream_t st, int n, int T, int C, int nh,
                                         const float *qkv, float *y, float *lse)
{
    int hd = C / nh;
    if (!cuk_attn_bf16(T, hd))
        return cudaErrorInvalidValue;
    float scale = (float)(1.0 / sqrt((double)hd));
    dim3 grid((unsigned)(n * nh), (unsigned)((T + FB_ROWS - 1) / FB_ROWS));
    FB_DISPATCH(hd, fb_fwd, grid, st, T, C, nh, scale, qkv, y, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_attn_bf16_bwd(cudaStream_t st, int n, int T, int C, int nh,
                                         const float *qkv, const float *y, const float *lse,
                                         const float *dy, float *dqkv, float *ws)
{
    int hd = C / nh;
    if (!cuk_attn_bf16(T, hd))
        return cudaErrorInvalidValue;
    float scale = (float)(1.0 / sqrt((double)hd));
    dim3 grid((unsigned)(n * nh), (unsigned)((T + FB_ROWS - 1) / FB_ROWS));
    FB_DISPATCH(hd, fb_bwd_q, grid, st, T, C, nh, scale, qkv, y, lse, dy, ws, dqkv);
    FB_DISPATCH(hd, fb_bwd_kv, grid, st, T, C, nh, scale, qkv, lse, dy, (const float *)ws,
                dqkv);
    return cudaGetLastError();
}
