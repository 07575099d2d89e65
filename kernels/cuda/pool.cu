/* Max and average pooling over (n,c,h,w), one thread per output element
 * forward and per input element backward.
 *
 * Same semantics and float operations as the CPU backend
 * (kernels/cpu/pool2d.c): window (oy,ox) covers rows oy*stride-pad .. +k-1;
 * max pooling ignores padding, keeps the first maximum on ties and lets NaN
 * win; argmax is iy*w+ix within the (n,c) plane; average pooling divides by
 * the window clipped to the padded plane (count_include_pad=True).
 *
 * Backward gathers: each input element sums the gradients of the windows
 * that cover it in ascending output order, which is the order in which the
 * CPU backend scatters them, so both give the same bits and need no atomics.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

static __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* Outputs whose (unclipped) window covers input row i: [*lo, *hi]. */
static __device__ __forceinline__ void covering(int i, int k, int stride, int pad, int out,
                                                int *lo, int *hi)
{
    int a = i + pad - k + 1;      /* need o*stride >= a */
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    *hi = imin((i + pad) / stride, out - 1);
}

static __global__ void maxpool_fwd_kernel(cdl_pool2d_desc d, const float *x, float *y,
                                          int32_t *argmax, size_t total)
{
    size_t out_plane = (size_t)d.oh * d.ow;
    CUK_GRID_STRIDE(o, total) {
        size_t pl = o / out_plane;
        int r = (int)(o % out_plane), oy = r / d.ow, ox = r % d.ow;
        const float *xp = x + pl * (size_t)d.h * d.w;
        int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
        int ys = imax(y0, 0), ye = imin(y0 + d.k, d.h);
        int xs = imax(x0, 0), xe = imin(x0 + d.k, d.w);
        float best = -INFINITY;
        int32_t bi = ys * d.w + xs;
        for (int iy = ys; iy < ye; iy++)
            for (int ix = xs; ix < xe; ix++) {
                float v = xp[iy * d.w + ix];
                if (v > best || isnan(v)) {
                    best = v;
                    bi = iy * d.w + ix;
                    if (isnan(v))
                        goto found;
                }
            }
found:
        y[o] = best;
        argmax[o] = bi;
    }
}

static __global__ void maxpool_bwd_kernel(cdl_pool2d_desc d, const float *dy,
                                          const int32_t *argmax, float *dx, size_t total)
{
    size_t in_plane = (size_t)d.h * d.w, out_plane = (size_t)d.oh * d.ow;
    CUK_GRID_STRIDE(i, total) {
        size_t pl = i / in_plane;
        int r = (int)(i % in_plane), iy = r / d.w, ix = r % d.w;
        const float *g = dy + pl * out_plane;
        const int32_t *am = argmax + pl * out_plane;
        int oy0, oy1, ox0, ox1;
        covering(iy, d.k, d.stride, d.pad, d.oh, &oy0, &oy1);
        covering(ix, d.k, d.stride, d.pad, d.ow, &ox0, &ox1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                int o = oy * d.ow + ox;
                if (am[o] == r)
                    acc += g[o];
            }
        dx[i] = acc;
    }
}

/* The divisor of window (oy,ox): its size clipped to the padded plane. */
static __device__ __forceinline__ float avg_count(const cdl_pool2d_desc &d, int oy, int ox)
{
    int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
    int y1 = imin(y0 + d.k, d.h + d.pad), x1 = imin(x0 + d.k, d.w + d.pad);
    return (float)((y1 - y0) * (x1 - x0));
}

static __global__ void avgpool_fwd_kernel(cdl_pool2d_desc d, const float *x, float *y,
                                          size_t total)
{
    size_t out_plane = (size_t)d.oh * d.ow;
    CUK_GRID_STRIDE(o, total) {
        size_t pl = o / out_plane;
        int r = (int)(o % out_plane), oy = r / d.ow, ox = r % d.ow;
        const float *xp = x + pl * (size_t)d.h * d.w;
        int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
        int ys = imax(y0, 0), ye = imin(imin(y0 + d.k, d.h + d.pad), d.h);
        int xs = imax(x0, 0), xe = imin(imin(x0 + d.k, d.w + d.pad), d.w);
        float s = 0.0f;
        for (int iy = ys; iy < ye; iy++)
            for (int ix = xs; ix < xe; ix++)
                s += xp[iy * d.w + ix];
        y[o] = s / avg_count(d, oy, ox);
    }
}

static __global__ void avgpool_bwd_kernel(cdl_pool2d_desc d, const float *dy, float *dx,
                                          size_t total)
{
    size_t in_plane = (size_t)d.h * d.w, out_plane = (size_t)d.oh * d.ow;
    CUK_GRID_STRIDE(i, total) {
        size_t pl = i / in_plane;
        int r = (int)(i % in_plane), iy = r / d.w, ix = r % d.w;
        const float *g = dy + pl * out_plane;
        int oy0, oy1, ox0, ox1;
        covering(iy, d.k, d.stride, d.pad, d.oh, &oy0, &oy1);
        covering(ix, d.k, d.stride, d.pad, d.ow, &ox0, &ox1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++)
                acc += g[oy * d.ow + ox] / avg_count(d, oy, ox);
        dx[i] = acc;
    }
}

static size_t out_total(const cdl_pool2d_desc &d)
{
    return (size_t)d.n * d.c * d.oh * d.ow;
}

static size_t in_total(const cdl_pool2d_desc &d)
{
    return (size_t)d.n * d.c * d.h * d.w;
}

extern "C" cudaError_t cuk_maxpool_fwd(cudaStream_t s, cdl_pool2d_desc d, const float *x,
                                       float *y, int32_t *argmax)
{
    size_t total = out_total(d);
    CUK_LAUNCH(maxpool_fwd_kernel, cuk_blocks(total), CUK_THREADS, s, d, x, y, argmax, total);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_maxpool_bwd(cudaStream_t s, cdl_pool2d_desc d, const float *dy,
                                       const int32_t *argmax, float *dx)
{
    size_t total = in_total(d);
    CUK_LAUNCH(maxpool_bwd_kernel, cuk_blocks(total), CUK_THREADS, s, d, dy, argmax, dx, total);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_avgpool_fwd(cudaStream_t s, cdl_pool2d_desc d, const float *x,
                                       float *y)
{
    size_t total = out_total(d);
    CUK_LAUNCH(avgpool_fwd_kernel, cuk_blocks(total), CUK_THREADS, s, d, x, y, total);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_avgpool_bwd(cudaStream_t s, cdl_pool2d_desc d, const float *dy,
                                       float *dx)
{
    size_t total = in_total(d);
    CUK_LAUNCH(avgpool_bwd_kernel, cuk_blocks(total), CUK_THREADS, s, d, dy, dx, total);
    return cudaGetLastError();
}
