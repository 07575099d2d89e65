/* Elementwise kernels over flat float ranges: fill, scale, ReLU, dropout.
 * Each mirrors the CPU backend's expression (kernels/cpu/eltwise.c), so
 * results match it bit for bit. */
#include "kernels/cuda/cuk.cuh"
#include "kernels/cuda/dropout_keep.h"

static __global__ void fill_kernel(float *x, size_t n, cuk_val_sc sc, const cuk_val_sc *dyn)
{
    float v = cuk_pick(sc, dyn).value;
    CUK_GRID_STRIDE(i, n)
        x[i] = v;
}

static __global__ void scale_kernel(float *x, size_t n, cuk_val_sc sc, const cuk_val_sc *dyn)
{
    float a = cuk_pick(sc, dyn).value;
    CUK_GRID_STRIDE(i, n)
        x[i] *= a;
}

/* x < 0 ? 0 : x keeps NaN as NaN, like torch.relu. */
static __global__ void relu_fwd_kernel(size_t n, const float *x, float *y)
{
    CUK_GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

/* dx may alias dy: each element is read before it is written. */
static __global__ void relu_bwd_kernel(size_t n, const float *y, const float *dy, float *dx)
{
    CUK_GRID_STRIDE(i, n)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static __global__ void dropout_fwd_kernel(size_t n, const float *x, float *y, uint8_t *mask,
                                          cuk_drop_sc sc, const cuk_drop_sc *dyn)
{
    cuk_drop_sc d = cuk_pick(sc, dyn);
    CUK_GRID_STRIDE(i, n) {
        int keep = d.p < 1.0f && cuk_dropout_keep(d.seed, i, d.p);
        mask[i] = (uint8_t)keep;
        y[i] = keep ? x[i] * d.scale : 0.0f;
    }
}

static __global__ void dropout_bwd_kernel(size_t n, const uint8_t *mask, const float *dy,
                                          float *dx, cuk_drop_sc sc, const cuk_drop_sc *dyn)
{
    float scale = cuk_pick(sc, dyn).scale;
    CUK_GRID_STRIDE(i, n)
        dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

extern "C" cudaError_t cuk_fill(cudaStream_t s, float *x, size_t n, cuk_val_sc sc,
                                const cuk_val_sc *dyn)
{
    CUK_LAUNCH(fill_kernel, cuk_blocks(n), CUK_THREADS, s, x, n, sc, dyn);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_scale(cudaStream_t s, float *x, size_t n, cuk_val_sc sc,
                                 const cuk_val_sc *dyn)
{
    CUK_LAUNCH(scale_kernel, cuk_blocks(n), CUK_THREADS, s, x, n, sc, dyn);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_relu_fwd(cudaStream_t s, size_t n, const float *x, float *y)
{
    CUK_LAUNCH(relu_fwd_kernel, cuk_blocks(n), CUK_THREADS, s, n, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_relu_bwd(cudaStream_t s, size_t n, const float *y, const float *dy,
                                    float *dx)
{
    CUK_LAUNCH(relu_bwd_kernel, cuk_blocks(n), CUK_THREADS, s, n, y, dy, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_dropout_fwd(cudaStream_t s, size_t n, const float *x, float *y,
                                       uint8_t *mask, cuk_drop_sc sc, const cuk_drop_sc *dyn)
{
    CUK_LAUNCH(dropout_fwd_kernel, cuk_blocks(n), CUK_THREADS, s, n, x, y, mask, sc, dyn);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_dropout_bwd(cudaStream_t s, size_t n, const uint8_t *mask,
                                       const float *dy, float *dx, cuk_drop_sc sc,
                                       const cuk_drop_sc *dyn)
{
    CUK_LAUNCH(dropout_bwd_kernel, cuk_blocks(n), CUK_THREADS, s, n, mask, dy, dx, sc, dyn);
    return cudaGetLastError();
}
