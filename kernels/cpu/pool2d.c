/* Max and average pooling over (n,c,h,w), parallel over the n*c planes.
 *
 * Window (oy,ox) covers rows oy*stride-pad .. +k-1 and likewise columns;
 * taps outside the plane are padding. Max pooling ignores padding (PyTorch
 * pads with -inf), keeps the first maximum on ties and lets NaN win; argmax
 * is the flat index iy*w+ix within the plane (PyTorch's CPU rule: a later
 * NaN replaces an earlier one). Average pooling divides by the
 * window size clipped to the padded plane (count_include_pad=True).
 * Backward passes accumulate into dx one plane per thread, so overlapping
 * windows (k > stride) need no atomics and the order is fixed.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

typedef struct pool2d_ctx {
    const cdl_pool2d_desc *d;
    const float *x;       /* x or dy */
    float *y;             /* y or dx */
    int32_t *argmax;
    const int32_t *cargmax;
} pool2d_ctx;

static inline int imax(int a, int b) { return a > b ? a : b; }

/* Planes per chunk: enough that a chunk reads at least CPU_ELT_GRAIN floats. */
static size_t plane_grain(const cdl_pool2d_desc *d)
{
    return 1 + (size_t)CPU_ELT_GRAIN / ((size_t)d->h * d->w + 1);
}
static inline int imin(int a, int b) { return a < b ? a : b; }

static void maxpool_fwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    size_t in_plane = (size_t)d->h * d->w, out_plane = (size_t)d->oh * d->ow;
    for (size_t pl = b; pl < e; pl++) {
        const float *x = c->x + pl * in_plane;
        float *y = c->y + pl * out_plane;
        int32_t *am = c->argmax + pl * out_plane;
        for (int oy = 0; oy < d->oh; oy++) {
            int y0 = oy * d->stride - d->pad;
            int ys = imax(y0, 0), ye = imin(y0 + d->k, d->h);
            for (int ox = 0; ox < d->ow; ox++) {
                int x0 = ox * d->stride - d->pad;
                int xs = imax(x0, 0), xe = imin(x0 + d->k, d->w);
                float best = -INFINITY;
                int32_t bi = ys * d->w + xs;
                for (int iy = ys; iy < ye; iy++)
                    for (int ix = xs; ix < xe; ix++) {
                        float v = x[iy * d->w + ix];
                        if (v > best || isnan(v)) {
                            best = v;
                            bi = iy * d->w + ix;
                        }
                    }
                y[oy * d->ow + ox] = best;
                am[oy * d->ow + ox] = bi;
            }
        }
    }
}

#if CPU_X86
/* The scalar rule on 16 lanes: candidate v (at flat index idx) replaces
 * the running maximum where it is greater or NaN. */
static CPU_AVX512 inline void max_take(__m512 v, __m512i idx, __m512 *best, __m512i *bi)
{
    __mmask16 take = _mm512_cmp_ps_mask(v, *best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    *best = _mm512_mask_mov_ps(*best, take, v);
    *bi = _mm512_mask_mov_epi32(*bi, take, idx);
}

/* The common 2x2 window, stride 2, no padding, 16 outputs at a time: two
 * input rows of 32 floats are split into even and odd columns, and the four
 * candidates are compared in window order with the scalar rule. */
static CPU_AVX512 void maxpool2_fwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    const int w = d->w;
    size_t in_plane = (size_t)d->h * w, out_plane = (size_t)d->oh * d->ow;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (size_t pl = b; pl < e; pl++) {
        const float *x = c->x + pl * in_plane;
        float *y = c->y + pl * out_plane;
        int32_t *am = c->argmax + pl * out_plane;
        for (int oy = 0; oy < d->oh; oy++) {
            const float *r0 = x + (size_t)2 * oy * w, *r1 = r0 + w;
            for (int ox = 0; ox < d->ow; ox += 16) {
                int n = d->ow - ox < 16 ? d->ow - ox : 16;
                __mmask16 mlo = cpu_mask16(2 * n), mhi = cpu_mask16(2 * n - 16), m = cpu_mask16(n);
                __m512 a0 = _mm512_maskz_loadu_ps(mlo, r0 + 2 * ox);
                __m512 a1 = _mm512_maskz_loadu_ps(mhi, r0 + 2 * ox + 16);
                __m512 b0 = _mm512_maskz_loadu_ps(mlo, r1 + 2 * ox);
                __m512 b1 = _mm512_maskz_loadu_ps(mhi, r1 + 2 * ox + 16);
                __m512 v[4] = {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
                               _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
                __m512i base = _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + 2 * ox), even);
                __m512i off[4] = {_mm512_setzero_si512(), _mm512_set1_epi32(1), _mm512_set1_epi32(w),
                                  _mm512_set1_epi32(w + 1)};
                __m512 best = v[0];
                __m512i bi = base;
                for (int k = 1; k < 4; k++)
                    max_take(v[k], _mm512_add_epi32(base, off[k]), &best, &bi);
                _mm512_mask_storeu_ps(y + (size_t)oy * d->ow + ox, m, best);
                _mm512_mask_storeu_epi32(am + (size_t)oy * d->ow + ox, m, bi);
            }
        }
    }
}

/* Backward of the 2x2/2 case: windows do not overlap, so each input gets its
 * window's gradient if it was the argmax and 0 otherwise; even and odd
 * columns are interleaved back into rows. */
static CPU_AVX512 void maxpool2_bwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    const int w = d->w;
    size_t in_plane = (size_t)d->h * w, out_plane = (size_t)d->oh * d->ow;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (size_t pl = b; pl < e; pl++) {
        const float *dy = c->x + pl * out_plane;
        const int32_t *am = c->cargmax + pl * out_plane;
        float *dx = c->y + pl * in_plane;
        if ((d->h & 1) || (d->w & 1))   /* the uncovered last row/column */
            memset(dx, 0, in_plane * sizeof *dx);
        for (int oy = 0; oy < d->oh; oy++) {
            float *r0 = dx + (size_t)2 * oy * w, *r1 = r0 + w;
            for (int ox = 0; ox < d->ow; ox += 16) {
                int n = d->ow - ox < 16 ? d->ow - ox : 16;
                __mmask16 mlo = cpu_mask16(2 * n), mhi = cpu_mask16(2 * n - 16), m = cpu_mask16(n);
                __m512 g = _mm512_maskz_loadu_ps(m, dy + (size_t)oy * d->ow + ox);
                __m512i a = _mm512_maskz_loadu_epi32(m, am + (size_t)oy * d->ow + ox);
                __m512i base = _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + 2 * ox), even);
                __m512i rel = _mm512_sub_epi32(a, base);
                __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(rel, _mm512_setzero_si512()), g);
                __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(rel, _mm512_set1_epi32(1)), g);
                __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(rel, _mm512_set1_epi32(w)), g);
                __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(rel, _mm512_set1_epi32(w + 1)), g);
                _mm512_mask_storeu_ps(r0 + 2 * ox, mlo, _mm512_permutex2var_ps(e0, lo, o0));
                _mm512_mask_storeu_ps(r0 + 2 * ox + 16, mhi, _mm512_permutex2var_ps(e0, hi, o0));
                _mm512_mask_storeu_ps(r1 + 2 * ox, mlo, _mm512_permutex2var_ps(e1, lo, o1));
                _mm512_mask_storeu_ps(r1 + 2 * ox + 16, mhi, _mm512_permutex2var_ps(e1, hi, o1));
            }
        }
    }
}

/* The 3x3 window, stride 2, padding 1 (the ResNet stem's pool), 16 outputs
 * at a time: input columns 2*ox-1, 2*ox, 2*ox+1 of each of the window's
 * rows are the previous odd column, the even and the odd columns of 32
 * floats from 2*ox. Padded columns read as -inf, which never replaces the
 * running maximum (it starts at -inf at the window's first in-plane tap),
 * so the scalar rule's result and argmax come out in the same tap order.
 * Padded rows are skipped as the scalar loop skips them. */
/* One output row oy of one plane. */
static CPU_AVX512 void maxpool3s2_row(const cdl_pool2d_desc *d, const float *x, int oy, float *y,
                                      int32_t *am)
{
    const int w = d->w;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    /* lane 0 from the second operand's lane 0, lane j from the first's j-1 */
    const __m512i prev = _mm512_setr_epi32(16, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    int ys = imax(2 * oy - 1, 0), ye = imin(2 * oy + 2, d->h);
    for (int ox = 0; ox < d->ow; ox += 16) {
        int n = d->ow - ox < 16 ? d->ow - ox : 16, left = w - 2 * ox;
        __mmask16 mlo = cpu_mask16(left), mhi = cpu_mask16(left - 16), m = cpu_mask16(n);
        /* the column of the window's first in-plane tap: 2*ox-1, or 0 */
        __m512i col = _mm512_add_epi32(_mm512_set1_epi32(2 * ox - 1), even);
        __m512 best = ninf;
        __m512i bi = _mm512_add_epi32(_mm512_set1_epi32(ys * w),
                                      _mm512_max_epi32(col, _mm512_setzero_si512()));
        for (int iy = ys; iy < ye; iy++) {
            const float *r = x + (size_t)iy * w + 2 * ox;
            __m512 a0 = _mm512_mask_loadu_ps(ninf, mlo, r);
            __m512 a1 = _mm512_mask_loadu_ps(ninf, mhi, r + 16);
            __m512 od = _mm512_permutex2var_ps(a0, odd, a1);
            __m512 left_col = _mm512_set1_ps(ox ? r[-1] : -INFINITY);
            __m512i at = _mm512_add_epi32(_mm512_set1_epi32(iy * w), col);
            max_take(_mm512_permutex2var_ps(od, prev, left_col), at, &best, &bi);
            max_take(_mm512_permutex2var_ps(a0, even, a1), _mm512_add_epi32(at, _mm512_set1_epi32(1)),
                     &best, &bi);
            max_take(od, _mm512_add_epi32(at, _mm512_set1_epi32(2)), &best, &bi);
        }
        _mm512_mask_storeu_ps(y + (size_t)oy * d->ow + ox, m, best);
        _mm512_mask_storeu_epi32(am + (size_t)oy * d->ow + ox, m, bi);
    }
}

/* maxpool3s2_row on 8 lanes (AVX2 CPUs, or CDL_CPU_NO_AVX512=1): the same
 * taps in the same order under the same rule, so the same y and argmax.
 * Lane j of a block of 8 outputs from ox reads columns 2*(ox+j)-1,
 * 2*(ox+j) and 2*(ox+j)+1: the even and odd lanes of the 16 floats from
 * column 2*ox, and the odd ones moved up a lane with column 2*ox-1 in lane
 * 0. Columns past the row's end are masked loads set to -inf. (Copying a
 * block's columns at the edges into a buffer instead took as long as the
 * vector work.) */
static CPU_AVX2 inline __m256 even8(__m256 lo, __m256 hi)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
}

static CPU_AVX2 inline __m256 odd8(__m256 lo, __m256 hi)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* The scalar rule on 8 lanes (max_take's twin). */
static CPU_AVX2 inline void max_take8(__m256 v, __m256i idx, __m256 *best, __m256i *bi)
{
    __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, take);
    *bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*bi), _mm256_castsi256_ps(idx), take));
}

/* 8 floats of r from column c, -inf past column w-1. */
static CPU_AVX2 inline __m256 load8_ninf(const float *r, int c, int w)
{
    if (c + 8 <= w)
        return _mm256_loadu_ps(r + c);
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(r + c, m), _mm256_castsi256_ps(m));
}

static CPU_AVX2 void maxpool3s2_row8(const cdl_pool2d_desc *d, const float *x, int oy, float *y,
                                     int32_t *am)
{
    const int w = d->w;
    const __m256i two_j = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    int ys = imax(2 * oy - 1, 0), ye = imin(2 * oy + 2, d->h);
    for (int ox = 0; ox < d->ow; ox += 8) {
        int n = d->ow - ox < 8 ? d->ow - ox : 8;
        __m256i col = _mm256_add_epi32(_mm256_set1_epi32(2 * ox - 1), two_j);
        __m256 best = _mm256_set1_ps(-INFINITY);
        __m256i bi = _mm256_add_epi32(_mm256_set1_epi32(ys * w), _mm256_max_epi32(col, _mm256_setzero_si256()));
        for (int iy = ys; iy < ye; iy++) {
            const float *r = x + (size_t)iy * w;
            __m256 a0 = load8_ninf(r, 2 * ox, w), a1 = load8_ninf(r, 2 * ox + 8, w);
            __m256 od = odd8(a0, a1);
            __m256 l = _mm256_blend_ps(_mm256_permutevar8x32_ps(od, up),
                                       _mm256_set1_ps(ox ? r[2 * ox - 1] : -INFINITY), 1);
            __m256i at = _mm256_add_epi32(_mm256_set1_epi32(iy * w), col);
            max_take8(l, at, &best, &bi);
            max_take8(even8(a0, a1), _mm256_add_epi32(at, _mm256_set1_epi32(1)), &best, &bi);
            max_take8(od, _mm256_add_epi32(at, _mm256_set1_epi32(2)), &best, &bi);
        }
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        _mm256_maskstore_ps(y + (size_t)oy * d->ow + ox, m, best);
        _mm256_maskstore_epi32((int *)(am + (size_t)oy * d->ow + ox), m, bi);
    }
}

/* The 3x3/2/1 planes, a row at a time with the 16-lane or the 8-lane row. */
static void maxpool3s2_fwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    void (*row)(const cdl_pool2d_desc *, const float *, int, float *, int32_t *) =
        cpu_has_avx512() ? maxpool3s2_row : maxpool3s2_row8;
    for (size_t pl = b; pl < e; pl++)
        for (int oy = 0; oy < d->oh; oy++)
            row(d, c->x + pl * d->h * d->w, oy, c->y + pl * d->oh * d->ow, c->argmax + pl * d->oh * d->ow);
}

/* The fast paths' shapes: 2x2/2 unpadded, and 3x3/2 padded by 1 where every
 * window starts inside the plane or its top/left padding (floor mode). */
static int is_pool2(const cdl_pool2d_desc *d)
{
    return d->k == 2 && d->stride == 2 && d->pad == 0 && cpu_has_avx512();
}

static int is_pool3s2(const cdl_pool2d_desc *d)
{
    return d->k == 3 && d->stride == 2 && d->pad == 1 && 2 * d->oh - 3 < d->h &&
           2 * d->ow - 3 < d->w && (cpu_has_avx512() || cpu_has_avx2());
}
#endif

const char *cpu_maxpool_fwd_path(const cdl_pool2d_desc *d)
{
#if CPU_X86
    if (is_pool2(d))
        return "2x2/2 avx512";
    if (is_pool3s2(d))
        return cpu_has_avx512() ? "3x3/2/1 avx512" : "3x3/2/1 avx2";
#endif
    (void)d;
    return "plain";
}

void cpu_maxpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x,
                     float *y, int32_t *argmax)
{
    pool2d_ctx c = {.d = d, .x = x, .y = y, .argmax = argmax};
    pool_fn fn = maxpool_fwd_planes;
#if CPU_X86
    if (is_pool2(d))
        fn = maxpool2_fwd_planes;
    else if (is_pool3s2(d))
        fn = maxpool3s2_fwd_planes;
#endif
    pool_for(cpu_pool(be), (size_t)d->n * d->c, plane_grain(d), fn, &c);
}

static void maxpool_bwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    size_t in_plane = (size_t)d->h * d->w, out_plane = (size_t)d->oh * d->ow;
    for (size_t pl = b; pl < e; pl++) {
        const float *dy = c->x + pl * out_plane;
        const int32_t *am = c->cargmax + pl * out_plane;
        float *dx = c->y + pl * in_plane;
        memset(dx, 0, in_plane * sizeof *dx);
        for (size_t o = 0; o < out_plane; o++)
            dx[am[o]] += dy[o];
    }
}

void cpu_maxpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy,
                     const int32_t *argmax, float *dx)
{
    pool2d_ctx c = {.d = d, .x = dy, .y = dx, .cargmax = argmax};
    pool_fn fn = maxpool_bwd_planes;
#if CPU_X86
    if (is_pool2(d))
        fn = maxpool2_bwd_planes;
#endif
    pool_for(cpu_pool(be), (size_t)d->n * d->c, plane_grain(d), fn, &c);
}

/* The window of output (oy,ox): valid taps [ys,ye) x [xs,xe) and the divisor
 * counting padding inside the padded plane. */
static inline float avg_window(const cdl_pool2d_desc *d, int oy, int ox,
                               int *ys, int *ye, int *xs, int *xe)
{
    int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
    int y1 = imin(y0 + d->k, d->h + d->pad), x1 = imin(x0 + d->k, d->w + d->pad);
    float count = (float)((y1 - y0) * (x1 - x0));
    *ys = imax(y0, 0);
    *xs = imax(x0, 0);
    *ye = imin(y1, d->h);
    *xe = imin(x1, d->w);
    return count;
}

static void avgpool_fwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    size_t in_plane = (size_t)d->h * d->w, out_plane = (size_t)d->oh * d->ow;
    for (size_t pl = b; pl < e; pl++) {
        const float *x = c->x + pl * in_plane;
        float *y = c->y + pl * out_plane;
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                int ys, ye, xs, xe;
                float count = avg_window(d, oy, ox, &ys, &ye, &xs, &xe);
                float s = 0.0f;
                for (int iy = ys; iy < ye; iy++)
                    for (int ix = xs; ix < xe; ix++)
                        s += x[iy * d->w + ix];
                y[oy * d->ow + ox] = s / count;
            }
    }
}

void cpu_avgpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y)
{
    pool2d_ctx c = {.d = d, .x = x, .y = y};
    pool_for(cpu_pool(be), (size_t)d->n * d->c, plane_grain(d), avgpool_fwd_planes, &c);
}

static void avgpool_bwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const pool2d_ctx *c = vctx;
    const cdl_pool2d_desc *d = c->d;
    size_t in_plane = (size_t)d->h * d->w, out_plane = (size_t)d->oh * d->ow;
    for (size_t pl = b; pl < e; pl++) {
        const float *dy = c->x + pl * out_plane;
        float *dx = c->y + pl * in_plane;
        memset(dx, 0, in_plane * sizeof *dx);
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                int ys, ye, xs, xe;
                float count = avg_window(d, oy, ox, &ys, &ye, &xs, &xe);
                float g = dy[oy * d->ow + ox] / count;
                for (int iy = ys; iy < ye; iy++)
                    for (int ix = xs; ix < xe; ix++)
                        dx[iy * d->w + ix] += g;
            }
    }
}

void cpu_avgpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy, float *dx)
{
    pool2d_ctx c = {.d = d, .x = dy, .y = dx};
    pool_for(cpu_pool(be), (size_t)d->n * d->c, plane_grain(d), avgpool_bwd_planes, &c);
}
