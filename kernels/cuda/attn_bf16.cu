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
 *
 * A second set of kernels (fm_*, "the mma.sync kernels" below; the
 * launchers' mma = 1, CDL_ATTN_KERNEL=mma) does the same on mma.cuh's
 * warp-level instructions, whose register layout is documented, with every
 * row operation in registers. Not yet measured on a GPU: the wmma kernels
 * stay the default until they are.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"
#include "kernels/cuda/mma.cuh"

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

/* ================================================ the mma.sync kernels
 * CDL_ATTN_KERNEL=mma (ops_attn.c): the same semantics as the kernels
 * above (qkv fp32, rounded to bf16 when staged; y, lse, D, dqkv fp32; one
 * writer per output element, a fixed summation order), on mma.cuh's
 * m16n8k16 products, whose register layout the PTX ISA documents: every
 * row operation happens in registers. A warp owns 16 rows; an
 * accumulator's row lives in the 4 lanes of a group (lane / 4), which
 * reduce with __shfl_xor_sync 1 and 2, and the S accumulators repacked to
 * bf16 are the A operand of the next product (cuk_c2a). The other side's
 * tiles sit in shared memory as bf16, double-buffered: the next tile's
 * fp32 rows are read into registers before the current tile's products
 * and stored (rounded) after them. Operands B come from shared memory by
 * ldmatrix (.trans where the tile is the k x n operand).
 *   - forward (fm_fwd): one block of 4 warps per (item, 64 query rows),
 *     the blocks with the most keys first; key tiles of FM_KT = 64 up to
 *     the block's last row. Per tile S = Q K^T in registers, the diagonal
 *     tile masked, the row maximum m (raw scores) over the group, P =
 *     exp2(S scale log2e - m scale log2e) rounded to bf16 as the A
 *     operand, O and each lane's share of l rescaled by exp2 of the
 *     maximum's move, O += P V. At the end l is summed over the group,
 *     y = O / l, lse = m scale + log l.
 *   - backward, query side (fm_bwd_q): the same blocks and key tiles; D =
 *     dy . y per row (each lane its columns, then the group), P from S and
 *     lse, dP = dY V^T, dS = P (dP - D) scale rounded to bf16, dQ += dS K.
 *   - backward, key side (fm_bwd_kv): one block per (item, 64 keys), warps
 *     of 16 keys holding K and V as A operands; query tiles of FM_QT = 32
 *     from the block's first key to T, with their lse and D: S^T = K Q^T,
 *     dP^T = V dY^T, then dV += P^T dY and dK += dS^T Q.
 * Column pairs (16 keys or queries) a warp's rows cannot see (above its
 * diagonal, past T) are skipped; masked elements are selected to 0 (or
 * -inf before the maximum), never multiplied. */

#define FM_LOG2E 1.4426950408889634f
/* bf16 padding of shared rows: 16 bytes, so that rows stay 16-byte aligned
 * (ldmatrix) and the 8 rows of an ldmatrix matrix fall in distinct banks. */
#define FM_PAD 8
/* Keys per tile (forward, backward query side); queries per tile of the
 * backward key side. */
#define FM_KT 64
#define FM_QT 32

/* Whether rows of base (stride ld floats) can be read four floats at once. */
static __device__ __forceinline__ bool fm_vec(const float *base, size_t ld)
{
    return ((uintptr_t)base | (ld * sizeof(float))) % sizeof(float4) == 0;
}

/* R rows of HD floats from row r0 of base (row stride ld), zero past row T,
 * held in registers from load to store, stored into a shared tile (row
 * stride HD + FM_PAD) rounded to bf16. Each thread of the block takes the
 * same float4 chunks in both. */
template <int HD, int R> struct fm_stage {
    enum { N = R * HD / 4 / FB_THREADS };
    float4 v[N];

    __device__ __forceinline__ void load(const float *base, size_t ld, int r0, int T, bool vec)
    {
        CUK_UNROLL
        for (int i = 0; i < N; i++) {
            int f = (int)threadIdx.x + i * FB_THREADS, r = f / (HD / 4), j = f % (HD / 4) * 4;
            v[i].x = v[i].y = v[i].z = v[i].w = 0.0f;
            if (r0 + r < T) {
                const float *p = base + (size_t)(r0 + r) * ld + j;
                if (vec) {
                    v[i] = *(const float4 *)p;
                } else {
                    v[i].x = p[0];
                    v[i].y = p[1];
                    v[i].z = p[2];
                    v[i].w = p[3];
                }
            }
        }
    }

    __device__ __forceinline__ void store(bf16 *tile) const
    {
        CUK_UNROLL
        for (int i = 0; i < N; i++) {
            int f = (int)threadIdx.x + i * FB_THREADS, r = f / (HD / 4), j = f % (HD / 4) * 4;
            uint2 w;
            w.x = cuk_bf16x2(v[i].x, v[i].y);
            w.y = cuk_bf16x2(v[i].z, v[i].w);
            *(uint2 *)(tile + r * (HD + FM_PAD) + j) = w;
        }
    }

    /* The first tiles: rows r0.. of a into ta, then of b into tb; the block
     * waits for all of them. */
    __device__ __forceinline__ void first(bf16 *ta, const float *a, size_t lda, bool va, bf16 *tb,
                                          const float *b, size_t ldb, bool vb, int r0, int T)
    {
        load(a, lda, r0, T, va);
        store(ta);
        load(b, ldb, r0, T, vb);
        store(tb);
        __syncthreads();
    }
};

/* The A operands (16 x HD, k-steps of 16 columns) of rows r0..r0+15 of
 * base (row stride ld), read from global memory in the A layout, rounded
 * to bf16, zero past row T. */
template <int HD>
static __device__ __forceinline__ void fm_rows_a(uint32_t a[HD / 16][4], const float *base,
                                                 size_t ld, int r0, int T, int lane)
{
    int grp = lane >> 2, tig = lane & 3;
    bool ok0 = r0 + grp < T, ok1 = r0 + grp + 8 < T;
    const float *p0 = base + (size_t)(ok0 ? r0 + grp : 0) * ld;
    const float *p1 = base + (size_t)(ok1 ? r0 + grp + 8 : 0) * ld;
    CUK_UNROLL
    for (int kk = 0; kk < HD / 16; kk++) {
        int c = kk * 16 + tig * 2;
        a[kk][0] = ok0 ? cuk_bf16x2(p0[c], p0[c + 1]) : 0u;
        a[kk][1] = ok1 ? cuk_bf16x2(p1[c], p1[c + 1]) : 0u;
        a[kk][2] = ok0 ? cuk_bf16x2(p0[c + 8], p0[c + 9]) : 0u;
        a[kk][3] = ok1 ? cuk_bf16x2(p1[c + 8], p1[c + 9]) : 0u;
    }
}

/* c0 += A B0 and c1 += A B1, the two 16 x 8 operands B0, B1 read by one
 * ldmatrix.x4 (row: this lane's row address, as fm_abt and fm_ab place it). */
static __device__ __forceinline__ void fm_mma2(float c0[4], float c1[4], const uint32_t a[4],
                                               const bf16 *row, bool trans)
{
    uint32_t b[4];
    cuk_ldmatrix_x4(b, row, trans);
    cuk_mma_bf16(c0, a, b);
    cuk_mma_bf16(c1, a, b + 2);
}

/* s[n] += A B^T for the tile's rows n*8 .. n*8+7 (B^T's rows: the tile,
 * row-major bf16, HD columns), A the warp's 16 x HD operand; only the
 * pairs of 8-row blocks p0 <= np < p1 (16 rows each; warp-uniform). */
template <int HD, int NT>
static __device__ __forceinline__ void fm_abt(float s[NT][4], const uint32_t a[HD / 16][4],
                                              const bf16 *tile, int p0, int p1, int lane)
{
    CUK_UNROLL
    for (int np = 0; np < NT / 2; np++) {
        if (np < p0 || np >= p1)
            continue;
        /* Matrices: rows 2np (k 0-7, 8-15), then rows 2np+1 (the same). */
        const bf16 *row = tile + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * (HD + FM_PAD) +
                          ((lane >> 3) & 1) * 8;
        CUK_UNROLL
        for (int kk = 0; kk < HD / 16; kk++)
            fm_mma2(s[2 * np], s[2 * np + 1], a[kk], row + kk * 16, false);
    }
}

/* o[d] += A B over the k-steps p0 <= j < p1 (16 tile rows each): A the
 * warp's operands (16 x 16 each), B the tile (row-major bf16, rows k, HD
 * columns n), read transposed by ldmatrix. */
template <int HD, int KS>
static __device__ __forceinline__ void fm_ab(float o[HD / 8][4], const uint32_t a[KS][4],
                                             const bf16 *tile, int p0, int p1, int lane)
{
    CUK_UNROLL
    for (int j = 0; j < KS; j++) {
        if (j < p0 || j >= p1)
            continue;
        /* Matrices: columns 16dp.. (k 0-7, 8-15), then 16dp+8.. (the same). */
        const bf16 *row = tile + (j * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * (HD + FM_PAD) +
                          (lane >> 4) * 8;
        CUK_UNROLL
        for (int dp = 0; dp < HD / 16; dp++)
            fm_mma2(o[2 * dp], o[2 * dp + 1], a[j], row + dp * 16, true);
    }
}

/* The sum over the 4 lanes of a group (one accumulator row). */
static __device__ __forceinline__ float fm_group_sum(float x)
{
    x += __shfl_xor_sync(FB_FULL, x, 1);
    return x + __shfl_xor_sync(FB_FULL, x, 2);
}

/* N accumulators (4 floats each) set to 0. */
template <int N> static __device__ __forceinline__ void fm_zero(float x[N][4])
{
    CUK_UNROLL
    for (int n = 0; n < N; n++)
        x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
}

/* A warp's 16 x HD accumulators into rows row0.. of out (row stride ld),
 * rows past T left alone. */
template <int HD>
static __device__ __forceinline__ void fm_write(const float acc[HD / 8][4], float *out, size_t ld,
                                                int row0, int T, int lane)
{
    int grp = lane >> 2, tig = lane & 3;
    CUK_UNROLL
    for (int r = 0; r < 2; r++) {
        int t = row0 + grp + 8 * r;
        if (t >= T)
            continue;
        float *o = out + (size_t)t * ld + tig * 2;
        CUK_UNROLL
        for (int d = 0; d < HD / 8; d++) {
            o[d * 8] = acc[d][2 * r];
            o[d * 8 + 1] = acc[d][2 * r + 1];
        }
    }
}

/* The pairs of 16 keys of the tile at s0 that rows up to `upto` (and
 * below T) can see: [0, result). */
static __device__ __forceinline__ int fm_key_pairs(int s0, int upto, int T, int tile)
{
    int end = upto + 1 < T ? upto + 1 : T;   /* keys [s0, end) */
    if (end > s0 + tile)
        end = s0 + tile;
    return end > s0 ? (end - s0 + 15) / 16 : 0;
}

/* Grid (items, query blocks); FB_THREADS threads. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fm_fwd(int T, int C, int nh, float scale, const float *qkv, float *y, float *lse)
{
    constexpr int LD = HD + FM_PAD, NT = FM_KT / 8;
    __shared__ __align__(16) bf16 ks[2][FM_KT * LD], vs[2][FM_KT * LD];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, grp = lane >> 2, tig = lane & 3;
    int t0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * FB_ROWS, wt0 = t0 + warp * 16;
    int last = t0 + FB_ROWS < T ? t0 + FB_ROWS : T;   /* keys the block needs: [0, last) */
    const float *q3 = qkv + fb_base3(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    bool vk = fm_vec(q3 + C, ld3), vv = fm_vec(q3 + 2 * C, ld3);
    const float sl2 = scale * FM_LOG2E;

    uint32_t qa[HD / 16][4];
    fm_rows_a<HD>(qa, q3, ld3, wt0, T, lane);
    float o[HD / 8][4];
    fm_zero<HD / 8>(o);
    /* Rows grp (r = 0) and grp + 8 (r = 1): the maximum of the raw scores so
     * far, and this lane's share of l = sum exp2(S sl2 - m sl2). */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    fm_stage<HD, FM_KT> st;
    st.first(ks[0], q3 + C, ld3, vk, vs[0], q3 + 2 * C, ld3, vv, 0, T);
    int tiles = (last + FM_KT - 1) / FM_KT;
    for (int j = 0; j < tiles; j++) {
        int s0 = j * FM_KT, cur = j & 1, more = j + 1 < tiles;
        int pairs = wt0 < T ? fm_key_pairs(s0, wt0 + 15, T, FM_KT) : 0;   /* warp-uniform */
        if (more)
            st.load(q3 + C, ld3, s0 + FM_KT, T, vk);
        float s[NT][4];
        fm_zero<NT>(s);
        if (pairs)
            fm_abt<HD, NT>(s, qa, ks[cur], 0, pairs, lane);
        if (more) {
            st.store(ks[cur ^ 1]);
            st.load(q3 + 2 * C, ld3, s0 + FM_KT, T, vv);
        }
        if (pairs) {
            if (s0 + FM_KT - 1 > wt0) {   /* keys after some of the warp's rows: mask */
                CUK_UNROLL
                for (int n = 0; n < NT; n++)
                    CUK_UNROLL
                    for (int e = 0; e < 4; e++)
                        if (s0 + n * 8 + tig * 2 + (e & 1) > wt0 + grp + 8 * (e >> 1))
                            s[n][e] = -INFINITY;
            }
            CUK_UNROLL
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
                CUK_UNROLL
                for (int n = 0; n < NT; n++)
                    mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(FB_FULL, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(FB_FULL, mx, 2));
                float mnew = fmaxf(m[r], mx);
                /* Rows without a key yet (only past T) keep base 0 and P 0. */
                float base = mnew == -INFINITY ? 0.0f : mnew * sl2;
                float corr = exp2f(m[r] * sl2 - base), sum = 0.0f;
                CUK_UNROLL
                for (int n = 0; n < NT; n++)
                    CUK_UNROLL
                    for (int e = 2 * r; e < 2 * r + 2; e++) {
                        s[n][e] = exp2f(fmaf(s[n][e], sl2, -base));
                        sum += s[n][e];
                    }
                l[r] = l[r] * corr + sum;
                m[r] = mnew;
                CUK_UNROLL
                for (int d = 0; d < HD / 8; d++) {
                    o[d][2 * r] *= corr;
                    o[d][2 * r + 1] *= corr;
                }
            }
            uint32_t pa[NT / 2][4];
            CUK_UNROLL
            for (int k = 0; k < NT / 2; k++)
                cuk_c2a(pa[k], s[2 * k], s[2 * k + 1]);
            fm_ab<HD, NT / 2>(o, pa, vs[cur], 0, pairs, lane);
        }
        if (more)
            st.store(vs[cur ^ 1]);
        __syncthreads();
    }
    CUK_UNROLL
    for (int r = 0; r < 2; r++) {
        l[r] = fm_group_sum(l[r]);
        float inv = 1.0f / l[r];
        CUK_UNROLL
        for (int d = 0; d < HD / 8; d++) {
            o[d][2 * r] *= inv;
            o[d][2 * r + 1] *= inv;
        }
        int t = wt0 + grp + 8 * r;
        if (t < T && !tig)
            lse[(size_t)item * T + t] = m[r] * scale + logf(l[r]);
    }
    fm_write<HD>(o, y + fb_base1(b, h, T, C, hd), (size_t)C, wt0, T, lane);
}

/* Grid (items, query blocks); writes D (n*nh*T) and the dq columns. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fm_bwd_q(int T, int C, int nh, float scale, const float *qkv, const float *y, const float *lse,
         const float *dy, float *D, float *dqkv)
{
    constexpr int LD = HD + FM_PAD, NT = FM_KT / 8;
    __shared__ __align__(16) bf16 ks[2][FM_KT * LD], vs[2][FM_KT * LD];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, grp = lane >> 2, tig = lane & 3;
    int t0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * FB_ROWS, wt0 = t0 + warp * 16;
    int last = t0 + FB_ROWS < T ? t0 + FB_ROWS : T;
    const float *q3 = qkv + fb_base3(b, h, T, C, hd);
    const float *g1 = dy + fb_base1(b, h, T, C, hd), *y1 = y + fb_base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    bool vk = fm_vec(q3 + C, ld3), vv = fm_vec(q3 + 2 * C, ld3);
    const float sl2 = scale * FM_LOG2E;

    uint32_t qa[HD / 16][4], ga[HD / 16][4];
    fm_rows_a<HD>(qa, q3, ld3, wt0, T, lane);
    fm_rows_a<HD>(ga, g1, (size_t)C, wt0, T, lane);
    /* Per row (grp, grp + 8): D = dy . y in fp32, each lane its columns of
     * the A layout, then the group's; lse in log2 units (+inf past T: P 0). */
    float dd[2], lb[2];
    CUK_UNROLL
    for (int r = 0; r < 2; r++) {
        int t = wt0 + grp + 8 * r;
        float acc = 0.0f;
        if (t < T) {
            const float *gt = g1 + (size_t)t * C + tig * 2, *yt = y1 + (size_t)t * C + tig * 2;
            CUK_UNROLL
            for (int kk = 0; kk < HD / 16; kk++)
                CUK_UNROLL
                for (int c = 0; c < 4; c++) {
                    int col = kk * 16 + (c & 1) + (c >> 1) * 8;
                    acc += gt[col] * yt[col];
                }
        }
        dd[r] = fm_group_sum(acc);
        if (t < T && !tig)
            D[(size_t)item * T + t] = dd[r];
        lb[r] = t < T ? lse[(size_t)item * T + t] * FM_LOG2E : INFINITY;
    }
    float dq[HD / 8][4];
    fm_zero<HD / 8>(dq);

    fm_stage<HD, FM_KT> st;
    st.first(ks[0], q3 + C, ld3, vk, vs[0], q3 + 2 * C, ld3, vv, 0, T);
    int tiles = (last + FM_KT - 1) / FM_KT;
    for (int j = 0; j < tiles; j++) {
        int s0 = j * FM_KT, cur = j & 1, more = j + 1 < tiles;
        int pairs = wt0 < T ? fm_key_pairs(s0, wt0 + 15, T, FM_KT) : 0;
        float s[NT][4], dp[NT][4];
        fm_zero<NT>(s);
        fm_zero<NT>(dp);
        if (more)
            st.load(q3 + C, ld3, s0 + FM_KT, T, vk);
        if (pairs)
            fm_abt<HD, NT>(s, qa, ks[cur], 0, pairs, lane);
        if (more) {
            st.store(ks[cur ^ 1]);
            st.load(q3 + 2 * C, ld3, s0 + FM_KT, T, vv);
        }
        if (pairs)
            fm_abt<HD, NT>(dp, ga, vs[cur], 0, pairs, lane);
        if (more)
            st.store(vs[cur ^ 1]);
        if (pairs) {
            bool mask = s0 + FM_KT - 1 > wt0;
            CUK_UNROLL
            for (int n = 0; n < NT; n++)
                CUK_UNROLL
                for (int e = 0; e < 4; e++) {
                    int r = e >> 1;
                    float p = exp2f(fmaf(s[n][e], sl2, -lb[r]));
                    if (mask && s0 + n * 8 + tig * 2 + (e & 1) > wt0 + grp + 8 * r)
                        p = 0.0f;
                    s[n][e] = p * (dp[n][e] - dd[r]) * scale;   /* dS */
                }
            uint32_t da[NT / 2][4];
            CUK_UNROLL
            for (int k = 0; k < NT / 2; k++)
                cuk_c2a(da[k], s[2 * k], s[2 * k + 1]);
            fm_ab<HD, NT / 2>(dq, da, ks[cur], 0, pairs, lane);
        }
        __syncthreads();
    }
    fm_write<HD>(dq, dqkv + fb_base3(b, h, T, C, hd), ld3, wt0, T, lane);
}

/* Grid (items, key blocks); reads D from fm_bwd_q, writes dk and dv. */
template <int HD>
static __global__ void __launch_bounds__(FB_THREADS)
fm_bwd_kv(int T, int C, int nh, float scale, const float *qkv, const float *lse,
          const float *dy, const float *D, float *dqkv)
{
    constexpr int LD = HD + FM_PAD, NT = FM_QT / 8;
    __shared__ __align__(16) bf16 qs[2][FM_QT * LD], gs[2][FM_QT * LD];
    __shared__ float ls[2][FM_QT], ds[2][FM_QT];
    int hd = C / nh, item = (int)blockIdx.x, b = item / nh, h = item % nh;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, grp = lane >> 2, tig = lane & 3;
    int s0 = (int)blockIdx.y * FB_ROWS, ws0 = s0 + warp * 16;
    const float *q3 = qkv + fb_base3(b, h, T, C, hd), *g1 = dy + fb_base1(b, h, T, C, hd);
    size_t ld3 = 3 * (size_t)C;
    bool vq = fm_vec(q3, ld3), vg = fm_vec(g1, (size_t)C);
    const float sl2 = scale * FM_LOG2E;
    const int me = (int)threadIdx.x;

    uint32_t ka[HD / 16][4], va[HD / 16][4];
    fm_rows_a<HD>(ka, q3 + C, ld3, ws0, T, lane);
    fm_rows_a<HD>(va, q3 + 2 * C, ld3, ws0, T, lane);
    float dk[HD / 8][4], dv[HD / 8][4];
    fm_zero<HD / 8>(dk);
    fm_zero<HD / 8>(dv);

    /* Query tile staging: Q and dY rows, each query's lse (log2 units) and D. */
    fm_stage<HD, FM_QT> st;
    float lnext = 0.0f, dnext = 0.0f;
    if (me < FM_QT) {
        int tq = s0 + me;
        ls[0][me] = tq < T ? lse[(size_t)item * T + tq] * FM_LOG2E : 0.0f;
        ds[0][me] = tq < T ? D[(size_t)item * T + tq] : 0.0f;
    }
    st.first(qs[0], q3, ld3, vq, gs[0], g1, (size_t)C, vg, s0, T);
    int tiles = (T - s0 + FM_QT - 1) / FM_QT;
    for (int j = 0; j < tiles; j++) {
        int q0 = s0 + j * FM_QT, cur = j & 1, more = j + 1 < tiles;
        /* Pairs of 16 queries at or after the warp's first key and before T. */
        int p0 = ws0 > q0 ? (ws0 - q0) / 16 : 0;
        int p1 = (T - q0 + 15) / 16 < NT / 2 ? (T - q0 + 15) / 16 : NT / 2;
        if (ws0 >= T)
            p1 = 0;   /* warp-uniform */
        float sc[NT][4], dp[NT][4];
        fm_zero<NT>(sc);
        fm_zero<NT>(dp);
        if (more) {
            st.load(q3, ld3, q0 + FM_QT, T, vq);
            if (me < FM_QT) {
                int tq = q0 + FM_QT + me;
                lnext = tq < T ? lse[(size_t)item * T + tq] * FM_LOG2E : 0.0f;
                dnext = tq < T ? D[(size_t)item * T + tq] : 0.0f;
            }
        }
        if (p0 < p1)
            fm_abt<HD, NT>(sc, ka, qs[cur], p0, p1, lane);   /* S^T */
        if (more) {
            st.store(qs[cur ^ 1]);
            st.load(g1, (size_t)C, q0 + FM_QT, T, vg);
        }
        if (p0 < p1)
            fm_abt<HD, NT>(dp, va, gs[cur], p0, p1, lane);   /* dP^T */
        if (more) {
            st.store(gs[cur ^ 1]);
            if (me < FM_QT) {
                ls[cur ^ 1][me] = lnext;
                ds[cur ^ 1][me] = dnext;
            }
        }
        if (p0 < p1) {
            /* Queries before a key of the warp, or past T: P = 0. */
            bool mask = q0 < ws0 + 15 || q0 + FM_QT > T;
            CUK_UNROLL
            for (int n = 0; n < NT; n++)
                CUK_UNROLL
                for (int e = 0; e < 4; e++) {
                    int c = n * 8 + tig * 2 + (e & 1), tq = q0 + c;
                    float p = exp2f(fmaf(sc[n][e], sl2, -ls[cur][c]));
                    if (mask && (tq < ws0 + grp + 8 * (e >> 1) || tq >= T))
                        p = 0.0f;
                    sc[n][e] = p;
                    dp[n][e] = p * (dp[n][e] - ds[cur][c]) * scale;   /* dS^T */
                }
            uint32_t pa[NT / 2][4], da[NT / 2][4];
            CUK_UNROLL
            for (int k = 0; k < NT / 2; k++) {
                cuk_c2a(pa[k], sc[2 * k], sc[2 * k + 1]);
                cuk_c2a(da[k], dp[2 * k], dp[2 * k + 1]);
            }
            fm_ab<HD, NT / 2>(dv, pa, gs[cur], p0, p1, lane);
            fm_ab<HD, NT / 2>(dk, da, qs[cur], p0, p1, lane);
        }
        __syncthreads();
    }
    float *d3 = dqkv + fb_base3(b, h, T, C, hd);
    fm_write<HD>(dk, d3 + C, ld3, ws0, T, lane);
    fm_write<HD>(dv, d3 + 2 * C, ld3, ws0, T, lane);
}

#else /* !FB_ARCH_OK: the kernels' names for the launchers, trapping */

#define FB_TRAP(name, ...)                                                                 \
    template <int HD> static __global__ void name(__VA_ARGS__)                             \
    {                                                                                      \
        __trap();                                                                          \
    }
FB_TRAP(fb_fwd, int, int, int, float, const float *, float *, float *)
FB_TRAP(fm_fwd, int, int, int, float, const float *, float *, float *)
FB_TRAP(fb_bwd_q, int, int, int, float, const float *, const float *, const float *,
        const float *, float *, float *)
FB_TRAP(fm_bwd_q, int, int, int, float, const float *, const float *, const float *,
        const float *, float *, float *)
FB_TRAP(fb_bwd_kv, int, int, int, float, const float *, const float *, const float *,
        const float *, float *)
FB_TRAP(fm_bwd_kv, int, int, int, float, const float *, const float *, const float *,
        const float *, float *)

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

extern "C" cudaError_t cuk_attn_bf16_fwd(cudaStream_t st, int mma, int n, int T, int C, int nh,
                                         const float *qkv, float *y, float *lse)
{
    int hd = C / nh;
    if (!cuk_attn_bf16(T, hd))
        return cudaErrorInvalidValue;
    float scale = (float)(1.0 / sqrt((double)hd));
    dim3 grid((unsigned)(n * nh), (unsigned)((T + FB_ROWS - 1) / FB_ROWS));
    if (mma)
        FB_DISPATCH(hd, fm_fwd, grid, st, T, C, nh, scale, qkv, y, lse);
    else
        FB_DISPATCH(hd, fb_fwd, grid, st, T, C, nh, scale, qkv, y, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_attn_bf16_bwd(cudaStream_t st, int mma, int n, int T, int C, int nh,
                                         const float *qkv, const float *y, const float *lse,
                                         const float *dy, float *dqkv, float *ws)
{
    int hd = C / nh;
    if (!cuk_attn_bf16(T, hd))
        return cudaErrorInvalidValue;
    float scale = (float)(1.0 / sqrt((double)hd));
    dim3 grid((unsigned)(n * nh), (unsigned)((T + FB_ROWS - 1) / FB_ROWS));
    if (mma) {
        FB_DISPATCH(hd, fm_bwd_q, grid, st, T, C, nh, scale, qkv, y, lse, dy, ws, dqkv);
        FB_DISPATCH(hd, fm_bwd_kv, grid, st, T, C, nh, scale, qkv, lse, dy, (const float *)ws,
                    dqkv);
    } else {
        FB_DISPATCH(hd, fb_bwd_q, grid, st, T, C, nh, scale, qkv, y, lse, dy, ws, dqkv);
        FB_DISPATCH(hd, fb_bwd_kv, grid, st, T, C, nh, scale, qkv, lse, dy, (const float *)ws,
                    dqkv);
    }
    return cudaGetLastError();
}

