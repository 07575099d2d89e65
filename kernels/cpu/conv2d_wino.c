/* Winograd F(2x2,3x3) convolution with AVX2+FMA (see conv2d.h) for 3x3,
 * stride 1, pad 1, undilated, ungrouped convolutions: the forward pass, dx
 * (a forward correlation of dy with the kernel flipped and its channel
 * axes swapped) and the weight gradient (see dwplan). x is (n,c,h,w), w (oc,c,3,3), y (n,oc,h,w).
 *
 * Every 2x2 block of outputs (a tile) reads a 4x4 block of the padded input
 * (tiles overlap by 2). Per tile and input channel V = B^T d B, per filter
 * U = G g G^T (once per call, in double, rounded once), then for each of
 * the 16 positions xi of the transformed tile M[xi] = U[xi] V[xi], a
 * product (O x C) x (C x tiles), and y = A^T M A + bias per tile and output
 * channel:
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * 16 multiply-adds per input channel and tile instead of 36: 2.25x less
 * arithmetic than the direct kernels (conv2d_avx2.c), plus the transforms
 * (a few adds per value, a sixth to a third of the time at 16 channels,
 * less with more).
 *
 * Tiles are processed in blocks (bands of tile rows of one image, or
 * several whole small images) sized so that V and M of a block stay in L2.
 * The products run position by position (xi outer), so each V[xi] is read
 * from L1 by every block of output channels (output channels outer read
 * all of V from L2 once per block of 4: 64 channels at 8x8 ran 1.2x the
 * direct kernels that way, 1.4x this way).
 * Within a block the tiles are numbered image-major, then tile row, then
 * tile column; V is [16][C][ts] and M [16][O rounded to 4][ts] with the
 * tiles contiguous, so the transforms work on 8 tiles per vector and the
 * products run a 4 output channels x 24 tiles register block (12
 * accumulators, per input channel 3 loads and 4 broadcasts feed 12 FMAs).
 * Vector stores and loads run up to 7 tiles past a block row: those lanes
 * are recomputed or rewritten by the next row and never stored to y.
 *
 * The forward's and dx's blocks are independent (no sums across blocks),
 * so their results do not depend on the thread count at all; the weight
 * gradient's sums per chunk of blocks do (below).
 *
 * Numerics: the transforms add up to 4 inputs (B^T, A^T) and halve and add
 * 3 weights (G), so each output is a sum of C*16 products of transformed
 * values whose rounding errors are a few times those of the direct sum of
 * C*9 products: against the double-precision reference the normalised
 * error (max |err| / max |y|) measured 1-4e-7 at 16-128 channels (direct:
 * about 1e-7), dW 1-5e-7 (each dU sums over every tile of the batch in
 * float; G^T dU G is taken in double), well inside the kernel tests' 1e-5.
 *
 * Workspace: U [16][ocb][C][4] shared, then per thread V [16][C][ts], M
 * [16][ocb*4][ts] and the block's input rows split by column parity.
 */
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_wino.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* One correlation y (n, O, H, W) = corr(pad1(x (n, C, H, W)), g) + bias. */
typedef struct wplan {
    wgrid g;
    int C, O, H, W;
    int ocb;               /* output channel blocks of WOB */
    int ts;                /* tile stride of V and M rows */
    int hw, rowlen;        /* floats per half of a split input row, per row */
    size_t vxs, mxs;       /* position stride of V and M (conv_wino_odd_lines) */
    size_t u_floats, v_floats, m_floats, p_floats;
    size_t shared, per_thread;
} wplan;

/* Tiles per block: V and M of a block in about 256 KB (half this core's
 * L2), at least 2 register blocks wide. */
static int block_tiles(int C, int O)
{
    int t = 4096 / (C + O);
    return t < 48 ? 48 : t > 256 ? 256 : t;
}

static void wplan_make(int n, int C, int O, int H, int W, wplan *p)
{
    p->C = C;
    p->O = O;
    p->H = H;
    p->W = W;
    p->ocb = (O + WOB - 1) / WOB;
    conv_wino_grid(n, (H + 1) / 2, (W + 1) / 2, block_tiles(C, O), &p->g);
    p->ts = (p->g.nbmax + 8 + WTG - 1) / WTG * WTG;
    p->hw = (p->g.tw + 7) / 8 * 8 + 8;
    p->rowlen = 2 * p->hw;
    p->u_floats = cpu_align16((size_t)16 * p->ocb * C * WOB);
    p->vxs = conv_wino_odd_lines((size_t)C * p->ts);
    p->mxs = conv_wino_odd_lines((size_t)p->ocb * WOB * p->ts);
    p->v_floats = 16 * p->vxs;
    p->m_floats = 16 * p->mxs;
    p->p_floats = cpu_align16((size_t)C * (2 * p->g.rows + 2) * p->rowlen);
    p->shared = p->u_floats;
    p->per_thread = p->v_floats + p->m_floats + p->p_floats;
}

/* The weight gradient: dU[xi] (O x C) = sum over tiles of dM[xi] V[xi]^T
 * with dM = A dy A^T per tile and output channel, then dW = G^T dU G per
 * filter (in double). V as in the forward (recomputed from x, blocks of the
 * forward plan of x's channels); dy is first transposed position-major
 * (8 output channels in the lanes) so that dM comes out tile-major
 * [16][ts][opad] and the products take 8 output channels per vector: 2
 * such vectors x DC=6 input channels = 12 accumulators summed over the
 * block's tiles (per tile 2 loads and 6 broadcasts feed 12 FMAs), added
 * once per block into the chunk's partial (wdw_layout; conv_wino_dw_run
 * serves conv2d_wino4.c's F(4x4) too, with its own input transform and
 * dM). */
#define DC WDC

typedef struct dwplan {
    wplan p;               /* C = x's channels, O = dy's */
    wdw_layout l;
} dwplan;

static void dwplan_make(const cdl_conv2d_desc *d, int threads, dwplan *q)
{
    wplan_make(d->n, d->c, d->oc, d->h, d->w, &q->p);
    conv_wino_dw_layout(d->c, d->oc, d->w, 4, &q->p.g, q->p.ts, q->p.v_floats + q->p.p_floats,
                        threads, &q->l);
}

int conv_wino_supported(const cdl_conv2d_desc *d)
{
    if (!cpu_has_avx2())
        return 0;
    if (d->kh != 3 || d->kw != 3 || d->stride_h != 1 || d->stride_w != 1 || d->pad_h != 1 ||
        d->pad_w != 1 || d->dil_h != 1 || d->dil_w != 1 || d->groups > 1)
        return 0;
    if (d->n < 1 || d->c < 1 || d->oc < 1 || d->h < 1 || d->w < 1 || d->oh != d->h || d->ow != d->w)
        return 0;
    /* Offsets inside one block are int. */
    double big = 16.0 * (d->c > d->oc ? d->c : d->oc) * (1024.0 + (double)d->h * d->w);
    return big < 1e9;
}

size_t conv_wino_workspace(const cdl_conv2d_desc *d, int threads)
{
    wplan f, b;
    wplan_make(d->n, d->c, d->oc, d->h, d->w, &f);
    wplan_make(d->n, d->oc, d->c, d->h, d->w, &b);
    dwplan q;
    dwplan_make(d, threads, &q);
    return conv_wino_ws_max(f.shared + f.per_thread * (size_t)threads,
                            b.shared + b.per_thread * (size_t)threads, &q.l);
}

typedef struct dwctx {
    const wdw_algo *al;
    const wdw_layout *l;
    const float *x, *dy;
    float *ws;
    int db;
} dwctx;

static float *dw_thread(const wdw_layout *l, float *ws, int tid)
{
    return ws + (size_t)tid * l->per_thread;
}

static float *dw_chunk(const wdw_layout *l, float *ws, int k)
{
    return ws + (size_t)l->threads * l->per_thread + (size_t)k * l->per_chunk;
}

typedef struct wctx {
    wplan p;
    const float *x, *g, *bias;
    float *y, *ws;
    int flip;              /* dx: g is (C, O, 3, 3) and is flipped */
} wctx;

#if CPU_X86

/* U[xi][ob][c][j] = (G g G^T)[xi] for output channel o = ob*WOB+j (zero
 * past O) and input channel c, over output channel blocks ob in [b, e),
 * 4 filters per double vector. */
static CPU_AVX2 void pack_u(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const wctx *c = vctx;
    const wplan *p = &c->p;
    float *U = c->ws;
    const __m256d h = _mm256_set1_pd(0.5);
    for (size_t ob = b; ob < e; ob++)
        for (int ci = 0; ci < p->C; ci++) {
            __m256d g[3][3], t[4][3], u[4][4];
            conv_wino_filter4(c->g, c->flip, p->C, p->O, (int)ob, ci, g);
            for (int k = 0; k < 3; k++) {
                t[0][k] = g[0][k];
                t[1][k] = _mm256_mul_pd(h, _mm256_add_pd(_mm256_add_pd(g[0][k], g[1][k]), g[2][k]));
                t[2][k] = _mm256_mul_pd(h, _mm256_add_pd(_mm256_sub_pd(g[0][k], g[1][k]), g[2][k]));
                t[3][k] = g[2][k];
            }
            for (int i = 0; i < 4; i++) {
                u[i][0] = t[i][0];
                u[i][1] = _mm256_mul_pd(h, _mm256_add_pd(_mm256_add_pd(t[i][0], t[i][1]), t[i][2]));
                u[i][2] = _mm256_mul_pd(h, _mm256_add_pd(_mm256_sub_pd(t[i][0], t[i][1]), t[i][2]));
                u[i][3] = t[i][2];
            }
            for (int xi = 0; xi < 16; xi++)
                _mm_storeu_ps(U + (((size_t)xi * p->ocb + ob) * p->C + ci) * WOB,
                              _mm256_cvtpd_ps(u[xi / 4][xi % 4]));
        }
}

/* Evens and odds of the 16 floats at s: [s0 s2 .. s14], [s1 s3 .. s15]. */
static CPU_AVX2 inline void deinterleave(const float *s, __m256 *ev, __m256 *od)
{
    __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* One padded input row split by column parity: padded column q = x+1 of
 * input column x goes to ev[q/2] (q even) or od[q/2] (q odd), so ev[0] is
 * the left padding; every other slot of the two halves (hw floats each) is
 * zero. src NULL: a padding row. */
static CPU_AVX2 void split_row(const float *src, int W, int hw, float *ev)
{
    float *od = ev + hw;
    for (int k = 0; k < 2 * hw; k += 8)
        _mm256_storeu_ps(ev + k, _mm256_setzero_ps());
    if (!src)
        return;
    int x = 0;
    for (; x + 16 <= W; x += 16) {
        __m256 e, o;
        deinterleave(src + x, &e, &o);
        _mm256_storeu_ps(od + x / 2, e);
        _mm256_storeu_ps(ev + x / 2 + 1, o);
    }
    if (x + 8 <= W) {   /* 8-pixel rows (stage 3 of the CIFAR ResNets) */
        __m128 a = _mm_loadu_ps(src + x), b = _mm_loadu_ps(src + x + 4);
        _mm_storeu_ps(od + x / 2, _mm_shuffle_ps(a, b, 0x88));
        _mm_storeu_ps(ev + x / 2 + 1, _mm_shuffle_ps(a, b, 0xDD));
        x += 8;
    }
    for (; x < W; x++) {
        if (x % 2 == 0)
            od[x / 2] = src[x];
        else
            ev[(x + 1) / 2] = src[x];
    }
}

/* 8 floats: from a (lanes 0-3) and b (lanes 4-7); one load when b = a+4. */
static CPU_AVX2 inline __m256 load_halves(const int pair, const float *a, const float *b)
{
    return pair ? _mm256_loadu2_m128(b, a) : _mm256_loadu_ps(a);
}

/* V[xi][ci][j..j+8) of 8 tiles of channel ci: B^T d B from the 4 split rows
 * at ra (tiles of lanes 0-3) and rb (lanes 4-7), rowlen floats apart,
 * halves hw. rb is ra+4 (8 tiles of one tile row) unless pair (the 4-tile
 * rows of 7x7 and 8x8 images: two tile rows per vector). */
static inline __attribute__((always_inline)) CPU_AVX2 void
input_tiles(const int pair, const float *ra, const float *rb, int rowlen, int hw, float *v,
            size_t xstride)
{
    __m256 h[4][4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const float *ea = ra + (size_t)k * rowlen, *eb = rb + (size_t)k * rowlen;
        __m256 e0 = load_halves(pair, ea, eb), e1 = load_halves(pair, ea + 1, eb + 1);
        __m256 o0 = load_halves(pair, ea + hw, eb + hw), o1 = load_halves(pair, ea + hw + 1, eb + hw + 1);
        h[k][0] = _mm256_sub_ps(e0, e1);
        h[k][1] = _mm256_add_ps(o0, e1);
        h[k][2] = _mm256_sub_ps(e1, o0);
        h[k][3] = _mm256_sub_ps(o0, o1);
    }
#pragma GCC unroll 4
    for (int col = 0; col < 4; col++) {
        _mm256_storeu_ps(v + (size_t)col * xstride, _mm256_sub_ps(h[0][col], h[2][col]));
        _mm256_storeu_ps(v + (size_t)(4 + col) * xstride, _mm256_add_ps(h[1][col], h[2][col]));
        _mm256_storeu_ps(v + (size_t)(8 + col) * xstride, _mm256_sub_ps(h[2][col], h[1][col]));
        _mm256_storeu_ps(v + (size_t)(12 + col) * xstride, _mm256_sub_ps(h[1][col], h[3][col]));
    }
}

static CPU_AVX2 void input_tiles8(const float *r, int rowlen, int hw, float *v, size_t xstride)
{
    input_tiles(0, r, r + 4, rowlen, hw, v, xstride);
}

static CPU_AVX2 void input_tiles44(const float *ra, const float *rb, int rowlen, int hw, float *v,
                                   size_t xstride)
{
    input_tiles(1, ra, rb, rowlen, hw, v, xstride);
}

static CPU_AVX2 void gemm_ob(const float *ub, const float *V, float *M, int C, int ngroups, int ts)
{
    for (int g = 0; g < ngroups; g++) {
        const float *vb = V + (size_t)g * WTG;
        __m256 acc[WOB][WSB];
#pragma GCC unroll 4
        for (int o = 0; o < WOB; o++)
#pragma GCC unroll 3
            for (int s = 0; s < WSB; s++)
                acc[o][s] = _mm256_setzero_ps();
        for (int ci = 0; ci < C; ci++) {
            const float *vr = vb + (size_t)ci * ts;
            __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
            __m256 v2 = _mm256_loadu_ps(vr + 16);
#pragma GCC unroll 4
            for (int o = 0; o < WOB; o++) {
                __m256 u = _mm256_broadcast_ss(ub + ci * WOB + o);
                acc[o][0] = _mm256_fmadd_ps(v0, u, acc[o][0]);
                acc[o][1] = _mm256_fmadd_ps(v1, u, acc[o][1]);
                acc[o][2] = _mm256_fmadd_ps(v2, u, acc[o][2]);
            }
        }
#pragma GCC unroll 4
        for (int o = 0; o < WOB; o++) {
            float *mr = M + (size_t)o * ts + (size_t)g * WTG;
#pragma GCC unroll 3
            for (int s = 0; s < WSB; s++)
                _mm256_storeu_ps(mr + 8 * s, acc[o][s]);
        }
    }
}

CPU_AVX2 void conv_wino_gemm(const float *ub, const float *V, float *M, int C, int ngroups, int ts,
                             int nob)
{
    for (int ob = 0; ob < nob; ob++)
        gemm_ob(ub + (size_t)ob * C * WOB, V, M + (size_t)ob * WOB * ts, C, ngroups, ts);
}

CPU_AVX2 void conv_wino_zero_span(float *p, int n)
{
    for (; n >= 8; n -= 8, p += 8)
        _mm256_storeu_ps(p, _mm256_setzero_ps());
    __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (n > 0)
        _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes), _mm256_setzero_ps());
}

/* A^T M A + bias of 8 tiles of one output channel from M[xi][o][j..j+8):
 * the 2 output rows of the tiles of lanes 0-3 go to ya[0], ya[1] (na
 * columns), those of lanes 4-7 to yb[0], yb[1] (nb columns); NULL rows are
 * outside the image. */
static CPU_AVX2 void output_tiles(const float *m, size_t xstride, float bias, float *const ya[2],
                                  int na, float *const yb[2], int nb)
{
    __m256 v[16];
#pragma GCC unroll 16
    for (int xi = 0; xi < 16; xi++)
        v[xi] = _mm256_loadu_ps(m + (size_t)xi * xstride);
    __m256 s[2][4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256 t = _mm256_add_ps(v[4 + k], v[8 + k]);
        s[0][k] = _mm256_add_ps(v[k], t);
        s[1][k] = _mm256_sub_ps(_mm256_sub_ps(v[4 + k], v[8 + k]), v[12 + k]);
    }
    __m256 bv = _mm256_set1_ps(bias);
    for (int r = 0; r < 2; r++) {
        __m256 t = _mm256_add_ps(s[r][1], s[r][2]);
        __m256 c0 = _mm256_add_ps(_mm256_add_ps(s[r][0], t), bv);
        __m256 c1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[r][1], s[r][2]), s[r][3]), bv);
        __m256 lo = _mm256_unpacklo_ps(c0, c1), hi = _mm256_unpackhi_ps(c0, c1);
        conv_wino_store_n(ya[r], _mm256_permute2f128_ps(lo, hi, 0x20), na);
        conv_wino_store_n(yb[r], _mm256_permute2f128_ps(lo, hi, 0x31), nb);
    }
}

/* Row a of the output plane yo, NULL past the image. */
static float *out_row(const wplan *p, float *yo, int a)
{
    return a < p->H ? yo + (size_t)a * p->W : NULL;
}

/* V [16][C][ts] of a block's tiles from the input x (n, C, H, W), through
 * the split rows P. */
static void transform_input(const wplan *p, const float *xb, int img0, int ni, int ty0, int nty,
                            float *P, float *V)
{
    const size_t plane = (size_t)p->H * p->W, xs = p->vxs;
    const int prow = 2 * nty + 2;   /* split rows per channel */
    const int pair = p->g.tw == 4;    /* two tile rows per 8-tile vector */
    for (int i = 0; i < ni; i++) {
        const float *x = xb + (size_t)(img0 + i) * p->C * plane;
        for (int ci = 0; ci < p->C; ci++)
            for (int r = 0; r < prow; r++) {
                int a = 2 * ty0 - 1 + r;
                split_row(a >= 0 && a < p->H ? x + ci * plane + (size_t)a * p->W : NULL, p->W, p->hw,
                          P + ((size_t)ci * prow + r) * p->rowlen);
            }
        for (int ci = 0; ci < p->C; ci++)
            for (int lt = 0; lt < nty; lt += pair ? 2 : 1) {
                size_t j = ((size_t)i * nty + lt) * p->g.tw;
                const float *r = P + ((size_t)ci * prow + 2 * lt) * p->rowlen;
                float *v = V + (size_t)ci * p->ts + j;
                if (pair)
                    input_tiles44(r, lt + 1 < nty ? r + 2 * p->rowlen : r, p->rowlen, p->hw, v, xs);
                else
                    for (int tx0 = 0; tx0 < p->g.tw; tx0 += 8)
                        input_tiles8(r + tx0, p->rowlen, p->hw, v + tx0, xs);
            }
    }
}

static void wino_block(const wctx *c, int blk, int tid)
{
    const wplan *p = &c->p;
    float *V = c->ws + p->shared + (size_t)tid * p->per_thread;
    float *M = V + p->v_floats, *P = M + p->m_floats;
    int img0, ni, ty0, nty;
    conv_wino_block(&p->g, blk, &img0, &ni, &ty0, &nty);
    const size_t plane = (size_t)p->H * p->W, xs = p->vxs;
    const int pair = p->g.tw == 4;
    transform_input(p, c->x, img0, ni, ty0, nty, P, V);
    int nb = ni * nty * p->g.tw, ngroups = (nb + WTG - 1) / WTG, ntg = ngroups * WTG;
    const size_t ms = p->mxs;
    /* The products read V up to ntg, the output transform M up to nb+8:
     * zeros there, not a previous block's values or never-written memory. */
    for (int xi = 0; xi < 16 && ntg > nb; xi++)
        for (int ci = 0; ci < p->C; ci++)
            conv_wino_zero_span(V + xi * xs + (size_t)ci * p->ts + nb, ntg - nb);
    const wino_gemm_fn gemm = conv_wino_gemm_pick();
    for (int xi = 0; xi < 16; xi++)
        gemm(c->ws + (size_t)xi * p->ocb * p->C * WOB, V + xi * xs, M + xi * ms, p->C, ngroups,
             p->ts, p->ocb);
    for (int xi = 0; xi < 16 && nb + 8 > ntg; xi++)
        for (int o = 0; o < p->ocb * WOB; o++)
            conv_wino_zero_span(M + xi * ms + (size_t)o * p->ts + ntg, nb + 8 - ntg);
    for (int ob = 0; ob < p->ocb; ob++) {
        for (int i = 0; i < ni; i++) {
            float *y = c->y + (size_t)(img0 + i) * p->O * plane;
            for (int lt = 0; lt < nty; lt += pair ? 2 : 1) {
                int ty = ty0 + lt;
                size_t j = ((size_t)i * nty + lt) * p->g.tw;
                for (int o = ob * WOB; o < ob * WOB + WOB && o < p->O; o++) {
                    float *yo = y + o * plane;
                    float bias = c->bias ? c->bias[o] : 0.0f;
                    const float *m = M + (size_t)o * p->ts + j;
                    if (pair) {
                        float *ya[2] = {out_row(p, yo, 2 * ty), out_row(p, yo, 2 * ty + 1)};
                        int more = lt + 1 < nty;
                        float *yb[2] = {more ? out_row(p, yo, 2 * ty + 2) : NULL,
                                        more ? out_row(p, yo, 2 * ty + 3) : NULL};
                        output_tiles(m, ms, bias, ya, p->W, yb, p->W);
                        continue;
                    }
                    for (int tx0 = 0; tx0 < p->g.tw; tx0 += 8) {
                        float *r0 = out_row(p, yo, 2 * ty), *r1 = out_row(p, yo, 2 * ty + 1);
                        float *ya[2] = {r0 + 2 * tx0, r1 ? r1 + 2 * tx0 : NULL};
                        float *yb[2] = {ya[0] + 8, r1 ? ya[1] + 8 : NULL};
                        int n = p->W - 2 * tx0;
                        output_tiles(m + tx0, ms, bias, ya, n < 8 ? n : 8, yb, n - 8);
                    }
                }
            }
        }
    }
}

CPU_AVX2 void conv_wino_transpose_dy(const float *dy, size_t plane, int O, int np, int opad,
                                     float *dyt, float *dbp)
{
    for (int o0 = 0; o0 < opad; o0 += 8) {
        int p = 0;
        for (; o0 + 8 <= O && p + 8 <= np; p += 8)
            cpu_transpose8(dyt + (size_t)p * opad + o0, (size_t)opad, dy + (size_t)o0 * plane + p, plane);
        for (; p < np; p++)
            for (int j = 0; j < 8; j++)
                dyt[(size_t)p * opad + o0 + j] = o0 + j < O ? dy[(size_t)(o0 + j) * plane + p] : 0.0f;
    }
    for (int o = 0; dbp && o < O; o++) {
        const float *g = dy + (size_t)o * plane;
        __m256 a = _mm256_setzero_ps();
        int p = 0;
        for (; p + 8 <= np; p += 8)
            a = _mm256_add_ps(a, _mm256_loadu_ps(g + p));
        float l[8], sum = 0.0f;
        _mm256_storeu_ps(l, a);
        for (int k = 0; k < 8; k++)
            sum += l[k];
        for (; p < np; p++)
            sum += g[p];
        dbp[o] += sum;
    }
}

/* dMt[xi][o] (xi positions xstride apart) = (A dy A^T)[xi] of one tile for
 * ob8 blocks of 8 output channels from dyt at the tile's 4 positions; d[2r
 * + s] NULL: that position is outside dy (zero). */
static CPU_AVX2 void dm_tile(const float *const *d, int ob8, float *dmt, size_t xstride)
{
    for (int b = 0; b < ob8; b++) {
        __m256 v[2][2];
        for (int r = 0; r < 2; r++)
            for (int s = 0; s < 2; s++)
                v[r][s] = d[2 * r + s] ? _mm256_loadu_ps(d[2 * r + s] + 8 * b) : _mm256_setzero_ps();
        __m256 a[4][2];
        for (int s = 0; s < 2; s++) {
            a[0][s] = v[0][s];
            a[1][s] = _mm256_add_ps(v[0][s], v[1][s]);
            a[2][s] = _mm256_sub_ps(v[0][s], v[1][s]);
            a[3][s] = _mm256_sub_ps(_mm256_setzero_ps(), v[1][s]);
        }
        float *m = dmt + 8 * b;
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_ps(m + (size_t)(4 * i) * xstride, a[i][0]);
            _mm256_storeu_ps(m + (size_t)(4 * i + 1) * xstride, _mm256_add_ps(a[i][0], a[i][1]));
            _mm256_storeu_ps(m + (size_t)(4 * i + 2) * xstride, _mm256_sub_ps(a[i][0], a[i][1]));
            _mm256_storeu_ps(m + (size_t)(4 * i + 3) * xstride,
                             _mm256_sub_ps(_mm256_setzero_ps(), a[i][1]));
        }
    }
}

/* part[c][o] (rows of opad) += sum over tiles t < nb of V[c][t] dMt[t][o]
 * for NB blocks of 8 output channels and input channels [c0, c0+DC)
 * (clamped to C: a repeated channel adds into a row past C, never read). */
static inline __attribute__((always_inline)) CPU_AVX2 void
dw_block(const int NB, const float *V, int ts, int C, int c0, const float *dmt, int opad, int nb,
         float *part)
{
    const float *vr[DC];
#pragma GCC unroll 6
    for (int k = 0; k < DC; k++)
        vr[k] = V + (size_t)(c0 + k < C ? c0 + k : C - 1) * ts;
    __m256 acc[2][DC];
#pragma GCC unroll 2
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 6
        for (int k = 0; k < DC; k++)
            acc[b][k] = _mm256_setzero_ps();
    for (int t = 0; t < nb; t++) {
        __m256 dv[2];
#pragma GCC unroll 2
        for (int b = 0; b < NB; b++)
            dv[b] = _mm256_loadu_ps(dmt + (size_t)t * opad + 8 * b);
        /* Keep each tap a broadcast load (see conv2d_avx2.c's dwt_block). */
        size_t to = (size_t)t;
        __asm__("" : "+r"(to));
#pragma GCC unroll 6
        for (int k = 0; k < DC; k++) {
            __m256 xv = _mm256_broadcast_ss(vr[k] + to);
#pragma GCC unroll 2
            for (int b = 0; b < NB; b++)
                acc[b][k] = _mm256_fmadd_ps(xv, dv[b], acc[b][k]);
        }
    }
#pragma GCC unroll 2
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 6
        for (int k = 0; k < DC; k++) {
            float *pp = part + (size_t)(c0 + k) * opad + 8 * b;
            _mm256_storeu_ps(pp, _mm256_add_ps(_mm256_loadu_ps(pp), acc[b][k]));
        }
}

CPU_AVX2 void conv_wino_dw_products(const float *V, int ts, int C, const float *dmt, int opad,
                                    int ob8, int nb, float *part)
{
    for (int c0 = 0; c0 < C; c0 += DC)
        for (int b0 = 0; b0 < ob8; b0 += 2) {
            if (ob8 - b0 >= 2)
                dw_block(2, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0);
            else
                dw_block(1, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0);
        }
}

static void dw_input(const void *plan, const float *x, int img0, int ni, int ty0, int nty, float *V)
{
    const wplan *p = plan;
    transform_input(p, x, img0, ni, ty0, nty, V + p->v_floats, V);
}

/* Blocks [b, e) of either tile size into chunk `chunk`'s partial: V of
 * the block's tiles, dy transposed to dyt, dMt per tile, and per position
 * dU += V dMt. */
static void dw_blocks(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const dwctx *c = vctx;
    const wdw_algo *al = c->al;
    const wdw_layout *q = c->l;
    const wgrid *g = al->g;
    const int m = q->a - 2, H = al->H, W = al->W;   /* m x m outputs per tile */
    float *V = dw_thread(q, c->ws, tid), *dyt = V + q->vp_floats;
    float *dmt = dyt + q->dyt_floats;
    float *part = dw_chunk(q, c->ws, chunk), *dbp = c->db ? part + q->dup_floats : NULL;
    memset(part, 0, q->per_chunk * sizeof *part);
    const wino_dwp_fn products = conv_wino_dw_products_pick();
    const size_t plane = (size_t)H * W, dstride = (size_t)q->dyrows * W * q->opad;
    for (size_t blk = b; blk < e; blk++) {
        int img0, ni, ty0, nty;
        conv_wino_block(g, (int)blk, &img0, &ni, &ty0, &nty);
        al->input(al->plan, c->x, img0, ni, ty0, nty, V);
        int a0 = m * ty0, a1 = m * (ty0 + nty) < H ? m * (ty0 + nty) : H;
        for (int i = 0; i < ni; i++)
            conv_wino_transpose_dy(c->dy + (size_t)(img0 + i) * q->O * plane + (size_t)a0 * W, plane,
                                   q->O, (a1 - a0) * W, q->opad, dyt + i * dstride, dbp);
        for (int i = 0; i < ni; i++)
            for (int lt = 0; lt < nty; lt++) {
                int ty = ty0 + lt;
                size_t j = ((size_t)i * nty + lt) * g->tw;
                for (int tx = 0; tx < g->tw; tx++) {
                    const float *d[16];   /* m*m <= 16 */
                    for (int r = 0; r < m; r++)
                        for (int s = 0; s < m; s++) {
                            int y = m * ty + r, xx = m * tx + s;
                            d[r * m + s] = y < H && xx < W
                                               ? dyt + i * dstride + ((size_t)(y - a0) * W + xx) * q->opad
                                               : NULL;
                        }
                    al->dm(d, q->ob8, dmt + (j + tx) * q->opad, q->dxs);
                }
            }
        int nb = ni * nty * g->tw;
        for (int xi = 0; xi < q->a * q->a; xi++)
            products(V + (size_t)xi * al->vxs, al->ts, q->C, dmt + xi * q->dxs, q->opad,
                     q->ob8, nb, part + (size_t)xi * q->cpad * q->opad);
    }
}

#else /* no x86: conv_wino_supported() is 0 and this is never called */

static void pack_u(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)vctx, (void)b, (void)e, (void)chunk, (void)tid;
}

static void wino_block(const wctx *c, int blk, int tid)
{
    (void)c, (void)blk, (void)tid;
}

static void dw_input(const void *plan, const float *x, int img0, int ni, int ty0, int nty, float *V)
{
    (void)plan, (void)x, (void)img0, (void)ni, (void)ty0, (void)nty, (void)V;
}

static void dm_tile(const float *const *d, int ob8, float *dmt, size_t xstride)
{
    (void)d, (void)ob8, (void)dmt, (void)xstride;
}

static void dw_blocks(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)vctx, (void)b, (void)e, (void)chunk, (void)tid;
}
#endif

static void wino_blocks(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const wctx *c = vctx;
    for (size_t blk = b; blk < e; blk++)
        wino_block(c, (int)blk, tid);
}

static void wino_run(pool *pl, int n, int C, int O, int H, int W, const float *x, const float *g,
                     int flip, const float *bias, float *y, float *ws)
{
    wctx c = {.x = x, .g = g, .bias = bias, .y = y, .ws = ws, .flip = flip};
    wplan_make(n, C, O, H, W, &c.p);
    pool_for(pl, (size_t)c.p.ocb, 1, pack_u, &c);
    pool_for(pl, (size_t)c.p.g.nblocks, 1, wino_blocks, &c);
}

void conv_wino_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws)
{
    wino_run(pl, d->n, d->c, d->oc, d->h, d->w, x, w, 0, b, y, ws);
}

void conv_wino_dx(pool *pl, const cdl_conv2d_desc *d, const float *w, const float *dy, float *dx,
                  float *ws)
{
    wino_run(pl, d->n, d->oc, d->c, d->h, d->w, dy, w, 1, NULL, dx, ws);
}

void conv_wino_dw_layout(int C, int O, int W, int a, const wgrid *g, int ts, size_t vp_floats,
                         int threads, wdw_layout *l)
{
    l->a = a;
    l->C = C;
    l->O = O;
    l->ob8 = (O + 7) / 8;
    l->opad = 8 * l->ob8;
    l->cpad = (C + WDC - 1) / WDC * WDC;
    l->dyrows = (a - 2) * g->rows;
    l->vp_floats = vp_floats;
    l->dyt_floats = cpu_align16((size_t)g->gimg * l->dyrows * W * l->opad);
    l->dxs = conv_wino_odd_lines((size_t)ts * l->opad);
    l->dup_floats = cpu_align16((size_t)a * a * l->cpad * l->opad);
    l->per_thread = vp_floats + l->dyt_floats + (size_t)a * a * l->dxs;
    l->per_chunk = l->dup_floats + cpu_align16((size_t)l->opad);
    l->threads = threads;
    l->chunks = conv_bwd_chunks(threads, g->nblocks, l->per_chunk);
}

/* G^T dU G of one filter: dU (a x a, row-major, in double), G (a x 3),
 * dw the 3x3 result. */
static void dw_untransform(int a, const double *u, const double *G, float *dw)
{
    double t[3][6];
    for (int ky = 0; ky < 3; ky++)
        for (int j = 0; j < a; j++) {
            double acc = 0.0;
            for (int i = 0; i < a; i++)
                acc += G[i * 3 + ky] * u[i * a + j];
            t[ky][j] = acc;
        }
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
            double acc = 0.0;
            for (int j = 0; j < a; j++)
                acc += t[ky][j] * G[j * 3 + kx];
            dw[ky * 3 + kx] = (float)acc;
        }
}

typedef struct wdw_sum {
    const wdw_layout *l;
    const float *parts;    /* chunk k's partial at parts + k*per_chunk */
    const double *G;
    float *dw, *db;
} wdw_sum;

/* Items [b, e) of the sum: [0, O*C) filters, o fastest, then
 * [O*C, O*C+O) biases. */
static void dw_sum_items(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const wdw_sum *s = vctx;
    const wdw_layout *l = s->l;
    const size_t nw = (size_t)l->O * l->C;
    for (size_t it = b; it < e; it++) {
        if (it >= nw) {
            size_t o = it - nw;
            float sum = 0.0f;
            for (int k = 0; k < l->chunks; k++)
                sum += s->parts[(size_t)k * l->per_chunk + l->dup_floats + o];
            s->db[o] = sum;
            continue;
        }
        /* o fastest: consecutive items read consecutive floats of each
         * of the a*a partial planes [xi][ci][o] (with ci fastest, each read
         * was a cache line of its own: at 512 channels and batch 1 this
         * reduction took 100 ms against 7 for SGEMM's whole backward). */
        size_t o = it % (size_t)l->O, ci = it / (size_t)l->O;
        double u[36];
        for (int xi = 0; xi < l->a * l->a; xi++) {
            float sum = 0.0f;
            for (int k = 0; k < l->chunks; k++)
                sum += s->parts[(size_t)k * l->per_chunk + ((size_t)xi * l->cpad + ci) * l->opad + o];
            u[xi] = sum;
        }
        dw_untransform(l->a, u, s->G, s->dw + (o * (size_t)l->C + ci) * 9);
    }
}

void conv_wino_dw_run(pool *pl, const wdw_algo *al, const wdw_layout *l, const float *x,
                      const float *dy, float *dw, float *db, float *ws)
{
    dwctx c = {.al = al, .l = l, .x = x, .dy = dy, .ws = ws, .db = db != NULL};
    pool_run(pl, (size_t)al->g->nblocks, l->chunks, dw_blocks, &c);
    wdw_sum s = {.l = l, .parts = dw_chunk(l, ws, 0), .G = al->G, .dw = dw, .db = db};
    size_t n = (size_t)l->O * l->C + (db ? (size_t)l->O : 0);
    pool_for(pl, n, 64, dw_sum_items, &s);
}

void conv_wino_dw(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *dy, float *dw,
                  float *db, float *ws)
{
    static const double G[4 * 3] = {1, 0, 0, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0, 0, 1};
    dwplan q;
    dwplan_make(d, pool_threads(pl), &q);
    wdw_algo al = {.H = d->h, .W = d->w, .ts = q.p.ts, .vxs = q.p.vxs, .g = &q.p.g,
                   .plan = &q.p, .input = dw_input, .dm = dm_tile, .G = G};
    conv_wino_dw_run(pl, &al, &q.l, x, dy, dw, db, ws);
}
