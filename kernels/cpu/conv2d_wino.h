/* What the two Winograd files share: conv2d_wino.c (F(2x2,3x3): forward,
 * dx, dW) and conv2d_wino4.c (F(4x4,3x3): forward and dx). Both keep the
 * transformed tiles as V [positions][C][ts] and the products as M
 * [positions][O rounded to WOB][ts] with the tiles contiguous, and run the
 * same product kernel per position. */
#ifndef KERNELS_CPU_CONV2D_WINO_H
#define KERNELS_CPU_CONV2D_WINO_H

#include <string.h>

#include "kernels/cpu/simd.h"

#define WOB 4    /* output channels per register block */
#define WSB 3    /* 8-tile vectors per register block */
#define WTG (8 * WSB)

/* How a convolution's tiles (n images of th x tw tiles, T per image) are
 * cut into blocks of about tgt tiles: bands of `rows` tile rows of one
 * image (gimg == 1, `bands` per image), or gimg whole images (rows == th,
 * bands == 1); nbmax tiles per block at most. */
typedef struct wgrid {
    int n, th, tw, T;
    int gimg, rows, bands, nblocks, nbmax;
} wgrid;

static inline void conv_wino_grid(int n, int th, int tw, int tgt, wgrid *g)
{
    g->n = n;
    g->th = th;
    g->tw = tw;
    g->T = th * tw;
    if (g->T >= tgt) {
        g->gimg = 1;
        g->rows = tgt / tw < 1 ? 1 : tgt / tw;
        g->rows = g->rows > th ? th : g->rows;
        g->bands = (th + g->rows - 1) / g->rows;
        g->nblocks = n * g->bands;
    } else {
        g->gimg = tgt / g->T < 1 ? 1 : tgt / g->T;
        g->gimg = g->gimg > n ? n : g->gimg;
        g->rows = th;
        g->bands = 1;
        g->nblocks = (n + g->gimg - 1) / g->gimg;
    }
    g->nbmax = g->gimg * g->rows * tw;
}

/* The tiles of block blk: images [img0, img0+ni), tile rows [ty0, ty0+nty). */
static inline void conv_wino_block(const wgrid *g, int blk, int *img0, int *ni, int *ty0, int *nty)
{
    if (g->gimg > 1 || g->bands == 1) {
        *img0 = blk * g->gimg;
        *ni = g->n - *img0 < g->gimg ? g->n - *img0 : g->gimg;
        *ty0 = 0;
        *nty = g->th;
    } else {
        *img0 = blk / g->bands;
        *ni = 1;
        *ty0 = blk % g->bands * g->rows;
        *nty = g->th - *ty0 < g->rows ? g->th - *ty0 : g->rows;
    }
}

/* n floats rounded up to an odd number of 64-byte lines: used as the
 * stride between the positions of V and M, it puts a tile's positions into
 * different L1 sets (a stride of a multiple of 4 KB put all of F(4x4)'s 36
 * into one, and its transforms ran 1.5x slower). */
static inline size_t conv_wino_odd_lines(size_t n)
{
    size_t l = (n + 15) / 16;
    return 16 * (l | 1);
}

#if CPU_X86
/* The 3x3 filters of output channels o = 4*ob+j (lane j; zero past O) and
 * input channel ci in double: g is (O, C, 3, 3), or (C, O, 3, 3) flipped
 * when flip (dx: the forward on dy with the kernel flipped and its channel
 * axes swapped). Four filters at a time: U's packing [ci][WOB] takes the 4
 * lanes rounded to float in one store. */
static CPU_AVX2 inline void conv_wino_filter4(const float *g, int flip, int C, int O, int ob, int ci,
                                              __m256d f[3][3])
{
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
            double l[4];
            for (int j = 0; j < 4; j++) {
                size_t o = (size_t)ob * 4 + (size_t)j;
                l[j] = o >= (size_t)O ? 0.0
                       : flip ? g[((size_t)ci * O + o) * 9 + (size_t)(2 - ky) * 3 + (size_t)(2 - kx)]
                              : g[(o * C + (size_t)ci) * 9 + (size_t)ky * 3 + (size_t)kx];
            }
            f[ky][kx] = _mm256_loadu_pd(l);
        }
}

/* M (WOB, ngroups*WTG tiles; rows ts apart) = U (WOB, C; packed [C][WOB])
 * V (C, tiles; rows ts apart): 4 output channels x 24 tiles per register
 * block (12 accumulators, per input channel 3 loads and 4 broadcasts feed
 * 12 FMAs). */
CPU_AVX2 void conv_wino_gemm(const float *ub, const float *V, float *M, int C, int ngroups, int ts);

/* n floats at p set to zero (short spans: a memset call per span of a few
 * floats costs more than the stores). */
CPU_AVX2 void conv_wino_zero_span(float *p, int n);

/* Writes n <= 8 floats of v to dst (none when dst is NULL or n <= 0). */
static CPU_AVX2 inline void conv_wino_store_n(float *dst, __m256 v, int n)
{
    if (!dst || n <= 0)
        return;
    if (n >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(dst, tmp, (size_t)n * sizeof *tmp);
}
#endif

#endif
