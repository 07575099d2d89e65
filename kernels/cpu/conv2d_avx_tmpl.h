/* The block kernels of conv2d_avx2.c (corr: forward and dx; dwt: dW), one
 * template for any lane width: conv2d_avx2.c includes it for 8 lanes
 * (AVX2, 16 ymm registers), conv2d_avx512.c for 16 (AVX-512, 32 zmm). The
 * designs are described in conv2d_avx2.c. Both widths sum every output
 * over the same taps or positions in the same order with one FMA each, so
 * their results are bitwise equal.
 *
 * Not a normal header: the includer defines
 *   CV_L                lanes per vector
 *   CV_OB, CV_SB        corr block: output channels (<= 6) x segments (<= 4)
 *   CV_DB, CV_DT        dwt block: lane blocks of output channels (<= 2) x taps
 *   CV_DT1              taps of a dwt block of one lane block (<= 12)
 *   CV_TARGET           the functions' target attribute
 *   CV_VEC              the vector type
 *   CV_LOAD(p), CV_STORE(p, v), CV_STORE_N(p, v, n) (lanes [0,n) only),
 *   CV_SET1(x), CV_ZERO(), CV_FMA(a, b, c) (a*b + c), CV_ADD(a, b)
 *   CV_CORR, CV_DWT     the names of the two entry points (external)
 * and optionally (16 lanes) CV_LOAD2(a, b): the lower half of the lanes
 * from a, the upper from b; CV_STORE_HI(p, v, n): the upper half's lanes
 * [0,n) to p. Then outputs rows of at most half the lanes are computed two
 * rows per vector (8x8 maps would leave half of 16 lanes idle).
 * and gets CV_CORR and CV_DWT, with the signatures declared in
 * conv2d_avx.h. */

#define CV_PASTE(a, b) CV_PASTE_(a, b)
#define CV_PASTE_(a, b) a##b

#ifdef CV_LOAD2
#define CV_HALVES 1
#else
#define CV_HALVES 0
#define CV_LOAD2(a, b) ((void)(b), CV_LOAD(a))
#define CV_STORE_HI(p, v, n) ((void)0)
#endif

#ifndef CV_SEG_DEFINED
#define CV_SEG_DEFINED
/* One output segment: nl lanes from out[yoff] (input at in[xoff]); in
 * halves mode also the upper half of the lanes: nl2 (0: none) from
 * out[yoff2] (input at in[xoff2]). */
typedef struct cv_seg {
    int xoff, yoff, nl;
    int xoff2, yoff2, nl2;
} cv_seg;
#endif

/* One block of O output channels x S segments: out[o][yoff[s] + lane] =
 * bias + sum over taps t of wt[t][o] * in[toff[t] + xoff[s] + lane] (H:
 * lanes in two halves, see cv_seg). O, S and H are compile-time constants
 * after inlining. */
static inline __attribute__((always_inline)) CV_TARGET void
CV_PASTE(corr_block_, CV_L)(const int O, const int S, const int H, const float *in,
                            const int32_t *toff, int K, const float *wt, const float *bias,
                            float *out, size_t oplane, const cv_seg *sg)
{
    CV_VEC acc[CV_OB][CV_SB];
#pragma GCC unroll 6
    for (int o = 0; o < O; o++) {
        CV_VEC b0 = bias ? CV_SET1(bias[o]) : CV_ZERO();
#pragma GCC unroll 4
        for (int s = 0; s < S; s++)
            acc[o][s] = b0;
    }
    const float *ins[CV_SB], *ins2[CV_SB];
#pragma GCC unroll 4
    for (int s = 0; s < CV_SB; s++) {
        ins[s] = in + sg[s < S ? s : 0].xoff;
        ins2[s] = in + sg[s < S ? s : 0].xoff2;
    }
    /* Two taps per trip: the loop's own adds and branch shared by twice
     * the FMAs (measured 1.5-3% faster forward and dx on resnet20's first
     * stage with 8 lanes; unrolling by 4 gained nothing more). */
#pragma GCC unroll 2
    for (int t = 0; t < K; t++, wt += CV_OB) {
        int off = toff[t];
        CV_VEC xv[CV_SB];
#pragma GCC unroll 4
        for (int s = 0; s < S; s++)
            xv[s] = H ? CV_LOAD2(ins[s] + off, ins2[s] + off) : CV_LOAD(ins[s] + off);
#pragma GCC unroll 6
        for (int o = 0; o < O; o++) {
            CV_VEC wv = CV_SET1(wt[o]);
#pragma GCC unroll 4
            for (int s = 0; s < S; s++)
                acc[o][s] = CV_FMA(xv[s], wv, acc[o][s]);
        }
    }
#pragma GCC unroll 6
    for (int o = 0; o < O; o++)
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            float *dst = out + o * oplane;
            if (sg[s].nl == CV_L)
                CV_STORE(dst + sg[s].yoff, acc[o][s]);
            else
                CV_STORE_N(dst + sg[s].yoff, acc[o][s], sg[s].nl);
            if (H && sg[s].nl2)
                CV_STORE_HI(dst + sg[s].yoff2, acc[o][s], sg[s].nl2);
        }
}

/* O in [1, CV_OB] as a constant (the cases past CV_OB are never taken). */
#define CV_BLK(O, S)                                                                          \
    CV_PASTE(corr_block_, CV_L)((O) < CV_OB ? (O) : CV_OB, S, H, in, toff, K, wt, bias, out,     \
                                oplane, sg)
#define CV_CORR_O(S)                                                                          \
    switch (O) {                                                                              \
    case 1: CV_BLK(1, S); break;                                                              \
    case 2: CV_BLK(2, S); break;                                                              \
    case 3: CV_BLK(3, S); break;                                                              \
    case 4: CV_BLK(4, S); break;                                                              \
    case 5: CV_BLK(5, S); break;                                                              \
    default: CV_BLK(6, S); break;                                                             \
    }

/* The block for S segments, H halves mode. */
static inline __attribute__((always_inline)) CV_TARGET void
CV_PASTE(corr_seg_, CV_L)(const int H, int O, int S, const float *in, const int32_t *toff, int K,
                          const float *wt, const float *bias, float *out, size_t oplane,
                          const cv_seg *sg)
{
    switch (S) {
#if CV_SB > 3
    case 4: CV_CORR_O(4) break;
#endif
    case 3: CV_CORR_O(3) break;
    case 2: CV_CORR_O(2) break;
    default: CV_CORR_O(1) break;
    }
}

static CV_TARGET void CV_PASTE(corr_group_, CV_L)(int half, int O, int S, const float *in,
                                                  const int32_t *toff, int K, const float *wt,
                                                  const float *bias, float *out, size_t oplane,
                                                  const cv_seg *sg)
{
    if (CV_HALVES && half)
        CV_PASTE(corr_seg_, CV_L)(CV_HALVES, O, S, in, toff, K, wt, bias, out, oplane, sg);
    else
        CV_PASTE(corr_seg_, CV_L)(0, O, S, in, toff, K, wt, bias, out, oplane, sg);
}

/* out (O, ho, wo) = bias + correlation with stride s of `in` (padded row
 * stride rowlen, tap offsets toff) with the block's weights wt [K][CV_OB],
 * in row segments of CV_L lanes, or of two rows (halves) when rows are at
 * most half as wide. A last odd row's upper half reads its own row again
 * (inside the buffer) and is not stored. */
CV_TARGET void CV_CORR(int O, const float *in, const int32_t *toff, int K, int rowlen, int s,
                       const float *wt, const float *bias, float *out, int ho, int wo)
{
    const int half = CV_HALVES && 2 * wo <= CV_L;
    const int vpr = (wo + CV_L - 1) / CV_L, nseg = half ? (ho + 1) / 2 : ho * vpr;
    const size_t oplane = (size_t)ho * wo;
    for (int g = 0; g < nseg; g += CV_SB) {
        int S = nseg - g < CV_SB ? nseg - g : CV_SB;
        cv_seg sg[CV_SB] = {{0}};
        for (int j = 0; j < S; j++) {
            cv_seg *q = &sg[j];
            if (half) {
                int oy = 2 * (g + j), two = oy + 1 < ho;
                q->xoff = oy * s * rowlen;
                q->yoff = oy * wo;
                q->nl = wo;
                q->xoff2 = q->xoff + two * s * rowlen;
                q->yoff2 = q->yoff + wo;
                q->nl2 = two ? wo : 0;
            } else {
                int oy = (g + j) / vpr, ox0 = (g + j) % vpr * CV_L;
                q->xoff = q->xoff2 = oy * s * rowlen + ox0;
                q->yoff = oy * wo + ox0;
                q->nl = wo - ox0 < CV_L ? wo - ox0 : CV_L;
            }
        }
        CV_PASTE(corr_group_, CV_L)(half, O, S, in, toff, K, wt, bias, out, oplane, sg);
    }
}

/* part[b][t][CV_L] += sum over the output positions p of dyt[b][p][CV_L] *
 * (tap t of in at p), for NB blocks of CV_L output channels (lanes) and
 * DT taps from t0 (clamped to K: a repeated tap adds into a slot past K,
 * never read). in has rows of ystride floats per output row, consecutive
 * output columns are consecutive floats. */
#define CV_DTMAX (CV_DT > CV_DT1 ? CV_DT : CV_DT1)
static inline __attribute__((always_inline)) CV_TARGET void
CV_PASTE(dwt_block_, CV_L)(const int NB, const int DT, const float *in, int ystride, int ho, int wo,
                           const int32_t *toff, int t0, int K, const float *dyt, size_t bstride,
                           float *part, size_t pstride)
{
    const float *xt[CV_DTMAX];
#pragma GCC unroll 12
    for (int j = 0; j < DT; j++)
        xt[j] = in + toff[t0 + j < K ? t0 + j : K - 1];
    CV_VEC acc[CV_DB][CV_DTMAX];
#pragma GCC unroll 2
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 12
        for (int j = 0; j < DT; j++)
            acc[b][j] = CV_ZERO();
    const float *dp = dyt;
    for (int oy = 0; oy < ho; oy++) {
        size_t ro = (size_t)oy * ystride;
        for (int ox = 0; ox < wo; ox++, dp += CV_L) {
            CV_VEC dv[CV_DB];
#pragma GCC unroll 2
            for (int b = 0; b < NB; b++)
                dv[b] = CV_LOAD(dp + b * bstride);
            /* Hide that neighbouring positions share inputs, so each tap
             * stays a broadcast load (load ports) rather than a register
             * shuffle (the FMA ports' neighbour). */
            size_t xo = ro + (size_t)ox;
            __asm__("" : "+r"(xo));
#pragma GCC unroll 12
            for (int j = 0; j < DT; j++) {
                CV_VEC xv = CV_SET1(xt[j][xo]);
#pragma GCC unroll 2
                for (int b = 0; b < NB; b++)
                    acc[b][j] = CV_FMA(xv, dv[b], acc[b][j]);
            }
        }
    }
#pragma GCC unroll 2
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 12
        for (int j = 0; j < DT; j++) {
            float *pp = part + b * pstride + (size_t)(t0 + j) * CV_L;
            CV_STORE(pp, CV_ADD(CV_LOAD(pp), acc[b][j]));
        }
}

/* One image's dW partial for nblk blocks of CV_L output channels from dy
 * transposed to dyt [nblk][P][CV_L]: part [nblk][Kpad][CV_L], Kpad a
 * multiple of CV_DT and CV_DT1. Blocks of CV_DB lane blocks x CV_DT taps,
 * a last single lane block CV_DT1 taps at a time (its accumulators alone
 * would not cover the FMA latency with CV_DT). */
CV_TARGET void CV_DWT(int nblk, const float *in, int ystride, int ho, int wo, const int32_t *toff,
                      int K, int Kpad, const float *dyt, float *part)
{
    const size_t bstride = (size_t)ho * wo * CV_L, pstride = (size_t)Kpad * CV_L;
    for (int b0 = 0; b0 < nblk; b0 += CV_DB) {
        const float *dy0 = dyt + b0 * bstride;
        float *p0 = part + b0 * pstride;
        if (CV_DB > 1 && nblk - b0 >= 2)
            for (int t0 = 0; t0 < K; t0 += CV_DT)
                CV_PASTE(dwt_block_, CV_L)(2, CV_DT, in, ystride, ho, wo, toff, t0, K, dy0, bstride,
                                           p0, pstride);
        else
            for (int t0 = 0; t0 < K; t0 += CV_DT1)
                CV_PASTE(dwt_block_, CV_L)(1, CV_DT1, in, ystride, ho, wo, toff, t0, K, dy0, bstride,
                                           p0, pstride);
    }
}

#undef CV_DTMAX
#undef CV_CORR_O
#undef CV_BLK
#undef CV_PASTE
#undef CV_PASTE_
#undef CV_HALVES
#undef CV_LOAD2
#undef CV_STORE_HI
