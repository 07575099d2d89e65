/* Max and average pooling over (n,c,h,w), parallel over the n*c planes.
 *
 * Window (oy,ox) covers rows oy*stride-pad .. +k-1 and likewise columns;
 * taps outside the plane are padding. Max pooling ignores padding (PyTorch
 * pads with -inf), keeps the first maximum on ties and lets NaN win; argmax
 * is the flat index iy*w+ix within the plane. Average pooling divides by the
 * window size clipped to the padded plane (count_include_pad=True).
 * Backward passes accumulate into dx one plane per thread, so overlapping
 * windows (k > stride) need no atomics and the order is fixed.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

typedef struct pool2d_ctx {
    const cdl_pool2d_desc *d;
    const float *x;       /* x or dy */
    float *y;             /* y or dx */
    int32_t *argmax;
    const int32_t *cargmax;
} pool2d_ctx;

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }

static void maxpool_fwd_planes(void *vctx, size_t b, size_t e, int tid)
{
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
                            if (isnan(v))
                                goto found;
                        }
                    }
found:
                y[oy * d->ow + ox] = best;
                am[oy * d->ow + ox] = bi;
            }
        }
    }
}

void cpu_maxpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x,
                     float *y, int32_t *argmax)
{
    pool2d_ctx c = {.d = d, .x = x, .y = y, .argmax = argmax};
    pool_for(cpu_pool(be), (size_t)d->n * d->c, maxpool_fwd_planes, &c);
}

static void maxpool_bwd_planes(void *vctx, size_t b, size_t e, int tid)
{
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
    pool_for(cpu_pool(be), (size_t)d->n * d->c, maxpool_bwd_planes, &c);
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

static void avgpool_fwd_planes(void *vctx, size_t b, size_t e, int tid)
{
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
    pool_for(cpu_pool(be), (size_t)d->n * d->c, avgpool_fwd_planes, &c);
}

static void avgpool_bwd_planes(void *vctx, size_t b, size_t e, int tid)
{
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
    pool_for(cpu_pool(be), (size_t)d->n * d->c, avgpool_bwd_planes, &c);
}
