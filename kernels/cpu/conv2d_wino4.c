/* Winograd F(4x4,3x3) convolution with AVX2+FMA (the products 16 lanes
 * wide on CPUs with full 512-bit units: conv2d_wino512.c; see conv2d.h) for 3x3,
 * stride 1, pad 1, undilated, ungrouped convolutions: the forward pass, dx
 * (the forward on dy with the kernel flipped and its channel axes
 * swapped) and the weight gradient (see dw4plan). x is (n,c,h,w), w
 * (oc,c,3,3), y (n,oc,h,w).
 *
 * Every 4x4 block of outputs (a tile) reads a 6x6 block of the padded
 * input (tiles overlap by 2). Per tile and input channel V = B^T d B, per
 * filter U = G g G^T (once per call, in double, rounded once), then for
 * each of the 36 positions xi = 6*row+column of the transformed tile
 * M[xi] = U[xi] V[xi], a product (O x C) x (C x tiles) by conv2d_wino.c's
 * kernel, and y = A^T M A + bias per tile and output channel. The points
 * are 0, -1, 1, 1/2, -2 and infinity (from Barabasz et al., "Error
 * analysis and improving the accuracy of Winograd convolution for deep
 * neural networks", 2020, for F(4,3)), scaled by
 * powers of 2 (exact in float) so that B^T and A^T have small integer
 * entries and the thirds and fifteenths sit in G alone:
 *   B^T = [2 -3 -4  3 2 0;  0  2 -5  1 2 0;  0 -2  1  5 2 0;
 *          0 -2 -1  2 1 0;  0  1 -2 -1 2 0;  0  2 -3 -4 3 2]
 *   G   = [1/2 0 0; -1/6 1/6 -1/6; 1/6 1/6 1/6;
 *          -2/15 -1/15 -1/30; 1/30 -1/15 2/15; 0 0 1/2]
 *   A^T = [1 1 1 8 1 0; 0 -1 1 4 -2 0; 0 1 1 2 4 0; 0 -1 1 1 -8 1]
 * 36 multiply-adds per input channel and tile of 16 outputs (2.25 per
 * output) instead of F(2x2)'s 16 per 4 (4) and the direct kernels' 9: 4x
 * less arithmetic than direct, 1.78x less than F(2x2), and 2.25 instead of
 * 4 transformed values per output and channel to write and read.
 *
 * Tiles are processed in blocks (bands of tile rows of one image, or
 * several whole small images) as in conv2d_wino.c, numbered image-major,
 * then tile row, then tile column, with V [36][C][ts] and M [36][O rounded
 * to 4][ts]. The transforms work on 8 tiles per vector: 8 tiles of one
 * tile row when the maps have 8 or more tile columns (32x32: lanes past a
 * row are rewritten by the next row and never stored to y), else 8/tw
 * whole tile rows of tw = 4, 2 or 1 tiles (16x16, 8x8, 4x4 maps), which
 * may belong to different images of the block. The input comes through
 * split rows: padded column q of an input row goes to phase q%4 at q/4, so
 * the 6 columns of tile tx are phases 0-3 at tx and phases 0-1 at tx+1,
 * each a plain load over consecutive tiles. The input of a block is split
 * one channel at a time (all its images), so that buffer stays small.
 *
 * In the forward and dx blocks are independent (no sums across blocks),
 * so their results do not depend on the thread count at all; the weight
 * gradient sums per chunk of blocks, a split that follows the thread count
 * (as F(2x2)'s).
 *
 * Numerics: the transforms' entries (up to 5 and 8, G down to 1/30) make
 * the rounding errors of the transformed values larger than F(2x2)'s, and
 * most of the error is the float sum of the products over the channels,
 * whose terms are far larger than y. Against the double-precision
 * reference (normalised error max |err| / max |y|, inputs and weights
 * uniform in [-1, 1], the cases of test_kernels_conv_wino) these points
 * measured 0.3-2.4e-6 at 3-128 channels; the points 0, +-1, +-2 measured
 * 2-6e-6 at 16-64 and 1e-5 at 128 (F(2x2): 1-4e-7). Still too much for
 * the resnet20 PyTorch fixture test (whole model within 1e-5 of float64):
 * with F(4x4)'s forward in its 16-64 channel stages its gradients missed
 * by up to 2e-3 (points 0, +-1, +-2: 4e-5), with F(4x4)'s dx alone they
 * stayed within 9.1e-6 (the default paths: 8.7e-6). The forward's failure
 * is not a smooth growth of error: adding a perturbation of 3e-7 max |y|
 * to the direct kernels' outputs of the same convolutions (less than
 * F(2x2)'s own error) made the fixture's gradients miss by 7e-3, and 1e-7
 * by 1.3e-5 (a jump that suggests a few pre-activations that close to
 * ReLU's kink, which flip). So the ops take F(4x4) only where the
 * backend's fast_conv asks for it (conv2d.c).
 *
 * The weight gradient's error, against the same reference and inputs:
 * 0.2-2.1e-6 of the largest dW (F(2x2): 1-5e-7).
 *
 * Workspace: U [36][ocb][C][4] shared, then per thread V [36][C][ts], M
 * [36][ocb*4][ts] and the split rows of one channel of a block; for the
 * weight gradient per thread V, the split rows, dy transposed and dMt
 * [36][ts][opad], and per chunk the partial dU [36][C][opad] and db.
 */
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_wino.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

#define NPOS 36

/* One correlation y (n, O, H, W) = corr(pad1(x (n, C, H, W)), g) + bias. */
typedef struct w4plan {
    wgrid g;
    int C, O, H, W;
    int ocb;               /* output channel blocks of WOB */
    int np;                /* tile rows per 8-tile vector: 8/tw for tw 1, 2, 4; else 1 */
    int ts;                /* tile stride of V and M rows */
    size_t vxs, mxs;       /* position stride of V and M: an odd number of cache lines */
    int hq, rowlen;        /* floats per phase of a split row, per row (4 phases) */
    int prow;              /* split rows per image of a block: 4*rows+2 */
    size_t u_floats, v_floats, m_floats, p_floats;
    size_t shared, per_thread;
} w4plan;

/* Tiles per block: V and M of a block in about 384 KB, at least one
 * register block wide; on CPUs with the 16-lane products at least two,
 * the 16-lane kernel's width (blocks of 24 tiles there ran 1.2-1.3x
 * slower at 64 channels). conv_wino_grid_fit then moves the block size
 * to waste fewer tiles: whole 16x16 images (16 tiles) had gone in blocks
 * of 16 or 32, computed as 24 or 48. On the 8-lane path of the same Intel
 * core, 1 thread, ms of the forward: 32 at 16x16 (batch 128) 3.5 ->
 * 2.6-2.7, 128 at 16x16 (batch 32) 12 -> 8.7-9.1, 16 at 32x32 and 64 at
 * 8x8 unchanged (not measured on AMD cores). */
static int block_tiles(int C, int O)
{
    int t = 2560 / (C + O), lo = conv_wino_wide() ? 2 * WTG : WTG;
    return t < lo ? lo : t > 128 ? 128 : t;
}

static void w4plan_make(int n, int C, int O, int H, int W, w4plan *p)
{
    p->C = C;
    p->O = O;
    p->H = H;
    p->W = W;
    p->ocb = (O + WOB - 1) / WOB;
    conv_wino_grid_fit(n, (H + 3) / 4, (W + 3) / 4, block_tiles(C, O), &p->g);
    p->np = p->g.tw == 1 || p->g.tw == 2 || p->g.tw == 4 ? 8 / p->g.tw : 1;
    /* The products read up to the block's tiles rounded up to WTG, the
     * transforms write and read up to 7 past them. */
    p->ts = (p->g.nbmax + WTG - 1) / WTG * WTG + 8;
    /* Row mode loads 8 tiles from phase index tx0 (+1), tx0 < tw a
     * multiple of 8; tile rows of tw <= 4 load tw from index 0 or 1. */
    p->hq = p->np == 1 ? (p->g.tw + 7) / 8 * 8 + 8 : (p->g.tw + 2) / 2 * 2;
    p->rowlen = 4 * p->hq;
    p->prow = 4 * p->g.rows + 2;
    p->u_floats = cpu_align16((size_t)NPOS * p->ocb * C * WOB);
    p->vxs = conv_wino_odd_lines((size_t)C * p->ts);
    p->mxs = conv_wino_odd_lines((size_t)p->ocb * WOB * p->ts);
    p->v_floats = NPOS * p->vxs;
    p->m_floats = NPOS * p->mxs;
    p->p_floats = cpu_align16((size_t)p->g.gimg * p->prow * p->rowlen + 8);
    p->shared = p->u_floats;
    p->per_thread = p->v_floats + p->m_floats + p->p_floats;
}

/* The weight gradient: dU[xi] (O x C) = sum over the tiles of dM[xi]
 * V[xi]^T with dM = A dy A^T per tile and output channel (the transpose
 * of the forward's y = A^T M A), then dW = G^T dU G per filter, in double.
 * V as in the forward (blocks of the forward plan of x's channels); dy is
 * first transposed position-major (8 output channels in the lanes) so that
 * dM comes out tile-major [36][ts][opad] for conv_wino_dw_products, whose
 * sums over a block's tiles are added into the chunk's partial, the
 * partials then summed in chunk order (a split that depends on the shape
 * and the thread count only): conv2d_wino.c's conv_wino_dw_run, the
 * driver of F(2x2)'s weight gradient too. */
typedef struct dw4plan {
    w4plan p;              /* C = x's channels, O = dy's */
    wdw_layout l;
} dw4plan;

static void dw4plan_make(const cdl_conv2d_desc *d, int threads, dw4plan *q)
{
    w4plan_make(d->n, d->c, d->oc, d->h, d->w, &q->p);
    conv_wino_dw_layout(d->c, d->oc, d->w, 6, &q->p.g, q->p.ts, q->p.v_floats + q->p.p_floats,
                        threads, &q->l);
}

size_t conv_wino4_workspace(const cdl_conv2d_desc *d, int threads)
{
    w4plan f, b;
    w4plan_make(d->n, d->c, d->oc, d->h, d->w, &f);
    w4plan_make(d->n, d->oc, d->c, d->h, d->w, &b);
    dw4plan q;
    dw4plan_make(d, threads, &q);
    return conv_wino_ws_max(f.shared + f.per_thread * (size_t)threads,
                            b.shared + b.per_thread * (size_t)threads, &q.l);
}

/* G (6 x 3) for the points 0, -1, 1, 1/2, -2 and infinity, scaled by
 * powers of 2 so that B^T and A^T have small integer entries (see the
 * header comment); the thirds and fifteenths are rounded in double and
 * U = G g G^T is rounded to float once. */
static const double G4[6][3] = {
    {1.0 / 2, 0, 0},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 6, 1.0 / 6, 1.0 / 6},
    {-2.0 / 15, -1.0 / 15, -1.0 / 30},
    {1.0 / 30, -1.0 / 15, 2.0 / 15},
    {0, 0, 1.0 / 2},
};

typedef struct w4ctx {
    w4plan p;
    const float *x, *g, *bias;
    float *y, *ws;
    int flip;              /* dx: g is (C, O, 3, 3) and is flipped */
} w4ctx;

#if CPU_X86

/* t = G f of 3 values, 4 filters per vector. */
static CPU_AVX2 inline void g3(const __m256d f[3], __m256d t[6])
{
    for (int i = 0; i < 6; i++)
        t[i] = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(G4[i][0]), f[0]),
                                           _mm256_mul_pd(_mm256_set1_pd(G4[i][1]), f[1])),
                             _mm256_mul_pd(_mm256_set1_pd(G4[i][2]), f[2]));
}

/* U[xi][ob][c][j] = (G g G^T)[xi] for output channel o = ob*WOB+j (zero
 * past O) and input channel c, over output channel blocks ob in [b, e). */
static CPU_AVX2 void pack_u(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const w4ctx *c = vctx;
    const w4plan *p = &c->p;
    float *U = c->ws;
    for (size_t ob = b; ob < e; ob++)
        for (int ci = 0; ci < p->C; ci++) {
            __m256d g[3][3], t[3][6], col[3], u[6];
            conv_wino_filter4(c->g, c->flip, p->C, p->O, (int)ob, ci, g);
            for (int k = 0; k < 3; k++) {
                col[0] = g[0][k], col[1] = g[1][k], col[2] = g[2][k];
                g3(col, t[k]);
            }
            for (int i = 0; i < 6; i++) {
                col[0] = t[0][i], col[1] = t[1][i], col[2] = t[2][i];
                g3(col, u);
                for (int j = 0; j < 6; j++)
                    _mm_storeu_ps(U + (((size_t)(6 * i + j) * p->ocb + ob) * p->C + ci) * WOB,
                                  _mm256_cvtpd_ps(u[j]));
            }
        }
}


/* One padded input row split by column phase: padded column q = x+1 of
 * input column x goes to phase q%4 at index q/4 (phases hq floats apart),
 * so phase 0 index 0 is the left padding; every other slot is zero. src
 * NULL: a padding row. */
static CPU_AVX2 void split_row4(const float *src, int W, int hq, float *dst)
{
    for (int k = 0; k + 8 <= 4 * hq; k += 8)
        _mm256_storeu_ps(dst + k, _mm256_setzero_ps());
    for (int k = 4 * hq / 8 * 8; k < 4 * hq; k++)
        dst[k] = 0.0f;
    if (!src)
        return;
    float *p0 = dst, *p1 = dst + hq, *p2 = dst + 2 * hq, *p3 = dst + 3 * hq;
    int x = 0;
    for (; x + 8 <= W; x += 8) {
        /* x = 4m + r goes to phase r+1 at m, r = 3 to phase 0 at m+1. */
        __m128 a = _mm_loadu_ps(src + x), b = _mm_loadu_ps(src + x + 4);
        __m128 lo = _mm_unpacklo_ps(a, b), hi = _mm_unpackhi_ps(a, b);
        int m = x / 4;
        _mm_storel_pi((__m64 *)(p1 + m), lo);
        _mm_storeh_pi((__m64 *)(p2 + m), lo);
        _mm_storel_pi((__m64 *)(p3 + m), hi);
        _mm_storeh_pi((__m64 *)(p0 + m + 1), hi);
    }
    for (; x < W; x++)
        dst[(x + 1) % 4 * hq + (x + 1) / 4] = src[x];
}

/* 8 lanes from np pieces of 8/np floats, piece k at b[k] + off. */
static inline __attribute__((always_inline)) CPU_AVX2 __m256
load_lanes(const int np, const float *const *b, size_t off)
{
    if (np == 1)
        return _mm256_loadu_ps(b[0] + off);
    if (np == 2)
        return _mm256_loadu2_m128(b[1] + off, b[0] + off);
    if (np == 4) {
        __m128 lo = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(b[0] + off)),
                                 (const __m64 *)(b[1] + off));
        __m128 hi = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(b[2] + off)),
                                 (const __m64 *)(b[3] + off));
        return _mm256_set_m128(hi, lo);
    }
    return _mm256_setr_ps(b[0][off], b[1][off], b[2][off], b[3][off], b[4][off], b[5][off],
                          b[6][off], b[7][off]);
}

/* y = B^T x of 6 vectors (rows 0 and 5 are the same row one place
 * apart). */
static inline __attribute__((always_inline)) CPU_AVX2 __m256 bt_edge(__m256 a, __m256 b, __m256 c,
                                                                      __m256 d, __m256 e)
{
    /* 2a - 3b - 4c + 3d + 2e */
    const __m256 two = _mm256_set1_ps(2.0f), three = _mm256_set1_ps(3.0f);
    __m256 s = _mm256_fmadd_ps(two, _mm256_add_ps(a, e), _mm256_mul_ps(three, _mm256_sub_ps(d, b)));
    return _mm256_fnmadd_ps(_mm256_set1_ps(4.0f), c, s);
}

static inline __attribute__((always_inline)) CPU_AVX2 void bt6(const __m256 x[6], __m256 y[6])
{
    const __m256 two = _mm256_set1_ps(2.0f), five = _mm256_set1_ps(5.0f);
    __m256 x4x2 = _mm256_add_ps(x[4], x[4]);   /* 2 x4 */
    __m256 x1x2 = _mm256_add_ps(x[1], x[1]);   /* 2 x1 */
    y[0] = bt_edge(x[0], x[1], x[2], x[3], x[4]);
    /* 2x1 - 5x2 + x3 + 2x4 */
    y[1] = _mm256_fnmadd_ps(five, x[2], _mm256_add_ps(_mm256_add_ps(x1x2, x[3]), x4x2));
    /* -2x1 + x2 + 5x3 + 2x4 */
    y[2] = _mm256_fmadd_ps(five, x[3], _mm256_add_ps(_mm256_sub_ps(x[2], x1x2), x4x2));
    /* -2x1 - x2 + 2x3 + x4 */
    y[3] = _mm256_fmadd_ps(two, _mm256_sub_ps(x[3], x[1]), _mm256_sub_ps(x[4], x[2]));
    /* x1 - 2x2 - x3 + 2x4 */
    y[4] = _mm256_fmadd_ps(two, _mm256_sub_ps(x[4], x[2]), _mm256_sub_ps(x[1], x[3]));
    y[5] = bt_edge(x[1], x[2], x[3], x[4], x[5]);
}

/* V[xi][ci][j..j+8) of 8 tiles of one channel: B^T d B from the split rows
 * of np pieces (tile rows) at b[k], rowlen floats apart, phases hq. */
static inline __attribute__((always_inline)) CPU_AVX2 void
input_tiles(const int np, const float *const *b, int rowlen, int hq, float *v, size_t xstride)
{
    __m256 t[6][6];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        size_t o = (size_t)r * rowlen;
        __m256 x[6] = {load_lanes(np, b, o),
                       load_lanes(np, b, o + (size_t)hq),
                       load_lanes(np, b, o + 2 * (size_t)hq),
                       load_lanes(np, b, o + 3 * (size_t)hq),
                       load_lanes(np, b, o + 1),
                       load_lanes(np, b, o + (size_t)hq + 1)};
        bt6(x, t[r]);
    }
#pragma GCC unroll 6
    for (int col = 0; col < 6; col++) {
        __m256 x[6], y[6];
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++)
            x[r] = t[r][col];
        bt6(x, y);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++)
            _mm256_storeu_ps(v + (size_t)(6 * r + col) * xstride, y[r]);
    }
}

static CPU_AVX2 void input_tiles_1(const float *const *b, int rowlen, int hq, float *v, size_t xs)
{
    input_tiles(1, b, rowlen, hq, v, xs);
}

static CPU_AVX2 void input_tiles_2(const float *const *b, int rowlen, int hq, float *v, size_t xs)
{
    input_tiles(2, b, rowlen, hq, v, xs);
}

static CPU_AVX2 void input_tiles_4(const float *const *b, int rowlen, int hq, float *v, size_t xs)
{
    input_tiles(4, b, rowlen, hq, v, xs);
}

static CPU_AVX2 void input_tiles_8(const float *const *b, int rowlen, int hq, float *v, size_t xs)
{
    input_tiles(8, b, rowlen, hq, v, xs);
}

/* The split rows of block tile row R (image R/nty of the block, tile row
 * R%nty of the band): P holds [ni][prow][rowlen] of one channel. */
static const float *split_at(const w4plan *p, const float *P, int nty, int R)
{
    return P + ((size_t)(R / nty) * p->prow + 4 * (size_t)(R % nty)) * p->rowlen;
}

/* V [36][C][ts] of a block's tiles from the input x (n, C, H, W), through
 * the split rows P, one channel at a time. */
static void transform_input(const w4plan *p, const float *xb, int img0, int ni, int ty0, int nty,
                            float *P, float *V)
{
    const size_t plane = (size_t)p->H * p->W, xs = p->vxs;
    const int NR = ni * nty;
    for (int ci = 0; ci < p->C; ci++) {
        for (int i = 0; i < ni; i++) {
            const float *x = xb + ((size_t)(img0 + i) * p->C + ci) * plane;
            for (int r = 0; r < 4 * nty + 2; r++) {
                int a = 4 * ty0 - 1 + r;
                split_row4(a >= 0 && a < p->H ? x + (size_t)a * p->W : NULL, p->W, p->hq,
                           P + ((size_t)i * p->prow + r) * p->rowlen);
            }
        }
        float *v = V + (size_t)ci * p->ts;
        if (p->np == 1) {
            for (int R = 0; R < NR; R++) {
                const float *r = split_at(p, P, nty, R);
                for (int tx0 = 0; tx0 < p->g.tw; tx0 += 8) {
                    const float *b[1] = {r + tx0};
                    input_tiles_1(b, p->rowlen, p->hq, v + (size_t)R * p->g.tw + tx0, xs);
                }
            }
            continue;
        }
        for (int R0 = 0; R0 < NR; R0 += p->np) {
            const float *b[8];
            for (int k = 0; k < p->np; k++)
                b[k] = split_at(p, P, nty, R0 + k < NR ? R0 + k : NR - 1);
            float *vr = v + (size_t)R0 * p->g.tw;
            if (p->np == 2)
                input_tiles_2(b, p->rowlen, p->hq, vr, xs);
            else if (p->np == 4)
                input_tiles_4(b, p->rowlen, p->hq, vr, xs);
            else
                input_tiles_8(b, p->rowlen, p->hq, vr, xs);
        }
    }
}

/* z = A^T m of 6 vectors (4 results). */
static inline __attribute__((always_inline)) CPU_AVX2 void at6(const __m256 m[6], __m256 z[4])
{
    __m256 p = _mm256_add_ps(m[1], m[2]), q = _mm256_sub_ps(m[2], m[1]);
    z[0] = _mm256_fmadd_ps(_mm256_set1_ps(8.0f), m[3], _mm256_add_ps(_mm256_add_ps(m[0], p), m[4]));
    z[1] = _mm256_fnmadd_ps(_mm256_set1_ps(2.0f), m[4], _mm256_fmadd_ps(_mm256_set1_ps(4.0f), m[3], q));
    z[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), m[4], _mm256_fmadd_ps(_mm256_set1_ps(2.0f), m[3], p));
    z[3] = _mm256_add_ps(_mm256_fnmadd_ps(_mm256_set1_ps(8.0f), m[4], _mm256_add_ps(q, m[3])), m[5]);
}

/* A^T M A + bias of 8 tiles of one output channel from M[xi][o][j..j+8).
 * Output row a of the tiles of piece k goes to y + off[k][a] (off < 0:
 * outside the image) from column col[k] on (tiles of piece k: 8/np lanes),
 * at most W columns in all. */
static inline __attribute__((always_inline)) CPU_AVX2 void
output_tiles(const int np, const float *m, size_t xstride, float bias, float *y,
             const ptrdiff_t (*off)[4], const int *col, int W)
{
    __m256 t[4][6];
#pragma GCC unroll 6
    for (int c = 0; c < 6; c++) {
        __m256 v[6], z[4];
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++)
            v[r] = _mm256_loadu_ps(m + (size_t)(6 * r + c) * xstride);
        at6(v, z);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++)
            t[a][c] = z[a];
    }
    __m256 bv = _mm256_set1_ps(bias);
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        __m256 z[4];
        at6(t[a], z);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            z[k] = _mm256_add_ps(z[k], bv);
        /* Lane t's 4 columns next to each other: pairs of tiles (0,1),
         * (2,3), (4,5), (6,7). */
        __m256 l01 = _mm256_unpacklo_ps(z[0], z[1]), h01 = _mm256_unpackhi_ps(z[0], z[1]);
        __m256 l23 = _mm256_unpacklo_ps(z[2], z[3]), h23 = _mm256_unpackhi_ps(z[2], z[3]);
        __m256 t04 = _mm256_shuffle_ps(l01, l23, 0x44), t15 = _mm256_shuffle_ps(l01, l23, 0xEE);
        __m256 t26 = _mm256_shuffle_ps(h01, h23, 0x44), t37 = _mm256_shuffle_ps(h01, h23, 0xEE);
        __m256 pr[4] = {_mm256_permute2f128_ps(t04, t15, 0x20), _mm256_permute2f128_ps(t26, t37, 0x20),
                        _mm256_permute2f128_ps(t04, t15, 0x31), _mm256_permute2f128_ps(t26, t37, 0x31)};
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            if (np == 8) {   /* one tile per piece: 4 floats each */
                float l[8];
                _mm256_storeu_ps(l, pr[q]);
                for (int h = 0; h < 2; h++) {
                    ptrdiff_t d = off[2 * q + h][a];
                    int n = W - col[2 * q + h];
                    if (d >= 0 && n > 0)
                        memcpy(y + d + col[2 * q + h], l + 4 * h, (size_t)(n < 4 ? n : 4) * sizeof *l);
                }
                continue;
            }
            /* Tiles 2q and 2q+1 belong to piece 2q*np/8, columns from
             * 4 * (2q mod 8/np). */
            int k = 2 * q * np / 8, c0 = col[k] + 4 * (2 * q % (8 / np));
            ptrdiff_t d = off[k][a];
            if (d < 0 || c0 >= W)
                continue;
            if (c0 + 8 <= W)
                _mm256_storeu_ps(y + d + c0, pr[q]);
            else
                conv_wino_store_n(y + d + c0, pr[q], W - c0);
        }
    }
}

/* The output transform of the 8-tile group at tile j of M for output
 * channels [0, O), each plane floats apart in y. */
static CPU_AVX2 void output_group(const w4plan *p, const float *M, size_t j, const float *bias,
                                  float *y, size_t plane, const ptrdiff_t (*off)[4], const int *col)
{
    const float *m = M + j;
    for (int o = 0; o < p->O; o++, m += p->ts, y += plane) {
        float b = bias ? bias[o] : 0.0f;
        switch (p->np) {
        case 1: output_tiles(1, m, p->mxs, b, y, off, col, p->W); break;
        case 2: output_tiles(2, m, p->mxs, b, y, off, col, p->W); break;
        case 4: output_tiles(4, m, p->mxs, b, y, off, col, p->W); break;
        default: output_tiles(8, m, p->mxs, b, y, off, col, p->W); break;
        }
    }
}

static void w4_block(const w4ctx *c, int blk, int tid)
{
    const w4plan *p = &c->p;
    float *V = c->ws + p->shared + (size_t)tid * p->per_thread;
    float *M = V + p->v_floats, *P = M + p->m_floats;
    int img0, ni, ty0, nty;
    conv_wino_block(&p->g, blk, &img0, &ni, &ty0, &nty);
    const size_t plane = (size_t)p->H * p->W;
    transform_input(p, c->x, img0, ni, ty0, nty, P, V);
    const int NR = ni * nty;
    int nb = NR * p->g.tw, ngroups = (nb + WTG - 1) / WTG, ntg = ngroups * WTG;
    /* The products read V up to ntg, the output transform M up to nb+8:
     * zeros there, not a previous block's values or never-written memory. */
    for (int xi = 0; xi < NPOS && ntg > nb; xi++)
        for (int ci = 0; ci < p->C; ci++)
            conv_wino_zero_span(V + xi * p->vxs + (size_t)ci * p->ts + nb, ntg - nb);
    const wino_gemm_fn gemm = conv_wino_gemm_pick();
    for (int xi = 0; xi < NPOS; xi++)
        gemm(c->ws + (size_t)xi * p->ocb * p->C * WOB, V + xi * p->vxs, M + xi * p->mxs, p->C,
             ngroups, p->ts, p->ocb);
    for (int xi = 0; xi < NPOS && nb + 8 > ntg; xi++)
        for (int o = 0; o < p->ocb * WOB; o++)
            conv_wino_zero_span(M + xi * p->mxs + (size_t)o * p->ts + ntg, nb + 8 - ntg);
    float *y = c->y + (size_t)img0 * p->O * plane;
    for (int R0 = 0; R0 < NR; R0 += p->np)
        for (int tx0 = 0; tx0 < p->g.tw; tx0 += 8) {
            /* Offsets in y of channel 0 of the output rows of each piece. */
            ptrdiff_t off[8][4];
            int col[8];
            for (int k = 0; k < p->np; k++) {
                int R = R0 + k, ty = ty0 + R % nty;
                col[k] = p->np == 1 ? 4 * tx0 : 0;
                for (int a = 0; a < 4; a++)
                    off[k][a] = R < NR && 4 * ty + a < p->H
                                    ? (ptrdiff_t)((size_t)(R / nty) * p->O * plane + (size_t)(4 * ty + a) * p->W)
                                    : -1;
            }
            output_group(p, M, (size_t)R0 * p->g.tw + tx0, c->bias, y, plane,
                         (const ptrdiff_t(*)[4])off, col);
        }
}

/* m = the 6 values A v of 4 (A = (A^T)^T, the header's A^T). */
static inline __attribute__((always_inline)) CPU_AVX2 void a4(const __m256 v[4], __m256 m[6])
{
    __m256 s02 = _mm256_add_ps(v[0], v[2]), s13 = _mm256_add_ps(v[1], v[3]);
    m[0] = v[0];
    m[1] = _mm256_sub_ps(s02, s13);   /* d0 - d1 + d2 - d3 */
    m[2] = _mm256_add_ps(s02, s13);   /* d0 + d1 + d2 + d3 */
    /* 8d0 + 4d1 + 2d2 + d3 and d0 - 2d1 + 4d2 - 8d3 */
    m[3] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f),
                           _mm256_fmadd_ps(_mm256_set1_ps(2.0f),
                                           _mm256_fmadd_ps(_mm256_set1_ps(2.0f), v[0], v[1]), v[2]),
                           v[3]);
    m[4] = _mm256_fmadd_ps(_mm256_set1_ps(-2.0f),
                           _mm256_fmadd_ps(_mm256_set1_ps(-2.0f),
                                           _mm256_fmadd_ps(_mm256_set1_ps(-2.0f), v[3], v[2]), v[1]),
                           v[0]);
    m[5] = v[3];
}

/* dMt[xi][o] (xi positions xstride apart) = (A dy A^T)[xi] of one tile for
 * ob8 blocks of 8 output channels from dyt at the tile's 16 positions;
 * d[4r + s] NULL: that position is outside dy (zero). */
static CPU_AVX2 void dm_tile4(const float *const *d, int ob8, float *dmt, size_t xstride)
{
    for (int b = 0; b < ob8; b++) {
        __m256 t[6][4];
        for (int s = 0; s < 4; s++) {
            __m256 v[4], m[6];
            for (int r = 0; r < 4; r++)
                v[r] = d[4 * r + s] ? _mm256_loadu_ps(d[4 * r + s] + 8 * b) : _mm256_setzero_ps();
            a4(v, m);
            for (int i = 0; i < 6; i++)
                t[i][s] = m[i];
        }
        float *m = dmt + 8 * b;
        for (int i = 0; i < 6; i++) {
            __m256 z[6];
            a4(t[i], z);
            for (int j = 0; j < 6; j++)
                _mm256_storeu_ps(m + (size_t)(6 * i + j) * xstride, z[j]);
        }
    }
}

/* wdw_algo's input transform: V of a block's tiles, its split rows after
 * V. */
static void dw4_input(const void *plan, const float *x, int img0, int ni, int ty0, int nty, float *V)
{
    const w4plan *p = plan;
    transform_input(p, x, img0, ni, ty0, nty, V + p->v_floats, V);
}

#else /* no x86: conv_wino_supported() is 0 and this is never called */

static void pack_u(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)vctx, (void)b, (void)e, (void)chunk, (void)tid;
}

static void w4_block(const w4ctx *c, int blk, int tid)
{
    (void)c, (void)blk, (void)tid;
}

static void dw4_input(const void *plan, const float *x, int img0, int ni, int ty0, int nty, float *V)
{
    (void)plan, (void)x, (void)img0, (void)ni, (void)ty0, (void)nty, (void)V;
}

static void dm_tile4(const float *const *d, int ob8, float *dmt, size_t xstride)
{
    (void)d, (void)ob8, (void)dmt, (void)xstride;
}
#endif

static void w4_blocks(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const w4ctx *c = vctx;
    for (size_t blk = b; blk < e; blk++)
        w4_block(c, (int)blk, tid);
}

static void w4_run(pool *pl, int n, int C, int O, int H, int W, const float *x, const float *g,
                   int flip, const float *bias, float *y, float *ws)
{
    w4ctx c = {.x = x, .g = g, .bias = bias, .y = y, .ws = ws, .flip = flip};
    w4plan_make(n, C, O, H, W, &c.p);
    pool_for(pl, (size_t)c.p.ocb, 1, pack_u, &c);
    pool_for(pl, (size_t)c.p.g.nblocks, 1, w4_blocks, &c);
}

void conv_wino4_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *b, float *y, float *ws)
{
    w4_run(pl, d->n, d->c, d->oc, d->h, d->w, x, w, 0, b, y, ws);
}

void conv_wino4_dx(pool *pl, const cdl_conv2d_desc *d, const float *w, const float *dy, float *dx,
                   float *ws)
{
    w4_run(pl, d->n, d->oc, d->c, d->h, d->w, dy, w, 1, NULL, dx, ws);
}

void conv_wino4_dw(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *dy, float *dw,
                   float *db, float *ws)
{
    dw4plan q;
    dw4plan_make(d, pool_threads(pl), &q);
    wdw_algo al = {.H = d->h, .W = d->w, .ts = q.p.ts, .vxs = q.p.vxs, .g = &q.p.g,
                   .plan = &q.p, .input = dw4_input, .dm = dm_tile4, .G = &G4[0][0]};
    conv_wino_dw_run(pl, &al, &q.l, x, dy, dw, db, ws);
}
