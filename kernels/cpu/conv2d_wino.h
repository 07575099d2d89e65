/* What the two Winograd files share: conv2d_wino.c (F(2x2,3x3)) and
 * conv2d_wino4.c (F(4x4,3x3)), each the forward, dx and dW. Both keep the
 * transformed tiles as V [positions][C][ts] and the products as M
 * [positions][O rounded to WOB][ts] with the tiles contiguous, and run the
 * same product kernels per position (conv_wino_gemm; for dW
 * conv_wino_dw_products on dMt [positions][ts][O rounded to 8]). */
#ifndef KERNELS_CPU_CONV2D_WINO_H
#define KERNELS_CPU_CONV2D_WINO_H

#include <string.h>

#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"

#define WOB 4    /* output channels per register block */
#define WSB 3    /* 8-tile vectors per register block */
#define WTG (8 * WSB)
#define WDC 6    /* input channels per register block of the weight gradient */

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

/* conv_wino_grid for the target in [tgt/2, 2*tgt] that wastes the fewest
 * of the products' tiles per image (each block's tiles are rounded up to
 * whole groups of WTG: whole 4x4-tile images went 16 or 32 to a block,
 * computed as 24 or 48, a third for nothing), the nearest to tgt among
 * equals. The pick looks at the shape alone, not at n: the workspace of
 * a fixed target grows with n, and model.c sizes it at the largest batch
 * and at 1 for every batch in between. */
static inline void conv_wino_grid_fit(int n, int th, int tw, int tgt, wgrid *g)
{
    enum { REF_N = 1 << 12 };   /* images: the per-image cost of a long run */
    /* Cost: computed tiles `padded` for `per` images (gimg images per
     * block; 1 in bands of one image, its last band maybe short),
     * compared as fractions. */
    int best = tgt;
    long bpad = 0, bper = 0;
    for (int t = (tgt + 1) / 2; t <= 2 * tgt; t++) {
        wgrid c;
        conv_wino_grid(REF_N, th, tw, t, &c);
        int last = c.bands > 1 ? (th - (c.bands - 1) * c.rows) * tw : c.nbmax;
        long padded = (long)(c.bands - 1) * ((c.nbmax + WTG - 1) / WTG * WTG) +
                      (last + WTG - 1) / WTG * WTG;
        long per = c.gimg;
        int d = t > tgt ? t - tgt : tgt - t, bd = best > tgt ? best - tgt : tgt - best;
        if (!bper || padded * bper < bpad * per || (padded * bper == bpad * per && d < bd)) {
            bpad = padded;
            bper = per;
            best = t;
        }
    }
    conv_wino_grid(n, th, tw, best, g);
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

/* The weight gradient's workspace, the same for both tile sizes (a = 4
 * positions per tile side for F(2x2), 6 for F(4x4)): per thread V and the
 * split rows of the forward (vp_floats), dy transposed dyt [gimg][dyrows x
 * W][opad] and dMt [a*a][dxs]; then per chunk the partial dU [a*a][cpad]
 * [opad] and db's partial [opad]. Blocks are cut into chunks by
 * conv_bwd_chunks (a split that depends on the shape and the thread count
 * only) and the chunks' partials summed in chunk order, so dW is the same
 * from run to run. */
typedef struct wdw_layout {
    int a, C, O;
    int ob8, opad;         /* blocks of 8 output channels; opad = 8*ob8 */
    int cpad;              /* C rounded up to WDC */
    int dyrows;            /* dy rows of a block per image: (a-2)*rows */
    size_t vp_floats, dyt_floats;   /* per thread, dMt after them */
    size_t dxs;                     /* position stride of dMt */
    size_t dup_floats;              /* per chunk, db's partial after it */
    size_t per_thread, per_chunk;
    int threads, chunks;
} wdw_layout;

/* The layout for x (n, C, H, W) and dy (n, O, H, W) cut as g says into
 * tiles ts floats apart in V. */
void conv_wino_dw_layout(int C, int O, int W, int a, const wgrid *g, int ts, size_t vp_floats,
                         int threads, wdw_layout *l);

/* The workspace a convolution needs: the largest of the forward's, dx's
 * and the weight gradient's. */
static inline size_t conv_wino_ws_max(size_t fwd, size_t dx, const wdw_layout *l)
{
    size_t e = l->per_thread * (size_t)l->threads + l->per_chunk * (size_t)l->chunks;
    size_t m = fwd > dx ? fwd : dx;
    return m > e ? m : e;
}

/* What of one tile size the weight gradient needs (a = wdw_layout's a,
 * tiles of m = a - 2 outputs a side): x's tile transform (input: V
 * [a*a][C][ts], positions vxs floats apart, for the block's tiles; its
 * scratch after V), dM = A dy A^T of one tile (dm: d the m*m pointers into
 * dyt, row-major, NULL past dy's edge; dMt's a*a positions xs floats
 * apart) and G (a x 3, row-major). */
typedef struct wdw_algo {
    int H, W, ts;
    size_t vxs;
    const wgrid *g;
    const void *plan;      /* the forward plan of x's channels, for input */
    void (*input)(const void *plan, const float *x, int img0, int ni, int ty0, int nty, float *V);
    void (*dm)(const float *const *d, int ob8, float *dmt, size_t xs);
    const double *G;
} wdw_algo;

/* dw (O, C, 3, 3) and db (O; none when NULL) of x and dy: the tiles'
 * products summed per chunk of blocks, then dw[o][c] = G^T dU G in double
 * with dU the chunks' partials summed in chunk order. */
void conv_wino_dw_run(pool *pl, const wdw_algo *al, const wdw_layout *l, const float *x,
                      const float *dy, float *dw, float *db, float *ws);

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

/* M (nob*WOB, ngroups*WTG tiles; rows ts apart) = U (nob*WOB, C; packed
 * [ob][C][WOB], blocks C*WOB floats apart) V (C, tiles; rows ts apart):
 * 4 output channels x 24 tiles per register block (12 accumulators, per
 * input channel 3 loads and 4 broadcasts feed 12 FMAs). */
CPU_AVX2 void conv_wino_gemm(const float *ub, const float *V, float *M, int C, int ngroups, int ts,
                             int nob);

/* The same products 16 tiles per vector (conv2d_wino512.c), bitwise
 * equal: 8 output channels x 2 groups of WTG tiles per register block. */
void conv_wino_gemm16(const float *ub, const float *V, float *M, int C, int ngroups, int ts,
                      int nob);

/* 1 where the 16-lane product kernels run: AVX-512 CPUs with full 512-bit
 * units (not Zen 4, cpu_avx512_halves, where they would do no more a
 * cycle; not with CDL_CPU_NO_AVX512). */
static inline int conv_wino_wide(void)
{
    return cpu_has_avx512() && !cpu_avx512_halves();
}

typedef void (*wino_gemm_fn)(const float *ub, const float *V, float *M, int C, int ngroups, int ts,
                             int nob);
typedef void (*wino_dwp_fn)(const float *V, int ts, int C, const float *dmt, int opad, int ob8,
                            int nb, float *part);

/* n floats at p set to zero (short spans: a memset call per span of a few
 * floats costs more than the stores). */
CPU_AVX2 void conv_wino_zero_span(float *p, int n);

/* The weight gradient's pieces (wdw_layout says how they fit):
 * dyt[p][o] (opad floats per position, zero past O) = dy[o][p] for the np
 * positions of dy (O planes `plane` floats apart), and dbp[o] += the sum
 * over them when dbp is not NULL. */
CPU_AVX2 void conv_wino_transpose_dy(const float *dy, size_t plane, int O, int np, int opad,
                                     float *dyt, float *dbp);

/* part[c][o] (C rounded up to WDC rows of opad) += sum over the tiles
 * t < nb of V[c][t] (rows ts apart) dMt[t][o] (rows opad apart), for one
 * position: 2 x 8 output channels x WDC input channels per register
 * block. */
CPU_AVX2 void conv_wino_dw_products(const float *V, int ts, int C, const float *dmt, int opad,
                                    int ob8, int nb, float *part);

/* The same sums 16 output channels per vector (conv2d_wino512.c),
 * bitwise equal. */
void conv_wino_dw_products16(const float *V, int ts, int C, const float *dmt, int opad, int ob8,
                             int nb, float *part);

/* The product kernels for this CPU, picked once per call of an op. */
static inline wino_gemm_fn conv_wino_gemm_pick(void)
{
    return conv_wino_wide() ? conv_wino_gemm16 : conv_wino_gemm;
}

static inline wino_dwp_fn conv_wino_dw_products_pick(void)
{
    return conv_wino_wide() ? conv_wino_dw_products16 : conv_wino_dw_products;
}

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
