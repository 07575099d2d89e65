/* LayerNorm over the last axis of x (rows, d) (backend.h's layernorm_fwd,
 * layernorm_bwd), like the CPU backend (kernels/cpu/layernorm.c).
 *
 * Forward and dx: one warp per row. Each lane adds its columns (j = lane,
 * lane+32, ...) in double, then a butterfly combines the lanes, so every
 * lane holds the same sum and the order is fixed by d: mean and biased
 * variance two-pass, rstd = 1/sqrt(var + eps), y = (x - mean) * rstd *
 * gamma + beta; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy
 * * gamma.
 *
 * dgamma, dbeta: a block per 32 columns, lane = column; its 32 warps take
 * the rows w, w+32, ... in double, then warp 0 adds the 32 partials in
 * order (no atomics: bitwise reproducible). A GPT's width gives few such
 * blocks (n_embd/32), so each is as wide as a block can be.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define LN_THREADS 256
#define LN_WARPS (LN_THREADS / 32)
#define LN_PARAM_THREADS 1024
#define LN_PARAM_WARPS (LN_PARAM_THREADS / 32)
#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

static __global__ void __launch_bounds__(LN_THREADS)
ln_fwd_kernel(int rows, int d, const float *x, const float *gamma, const float *beta, float eps,
              float *y, float *saved)
{
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32);
    int lane = (int)(threadIdx.x & 31);
    if (row >= rows)
        return;   /* whole warps leave together */
    const float *xr = x + (size_t)row * d;
    float *yr = y + (size_t)row * d;
    double s = 0.0;
    for (int j = lane; j < d; j += 32)
        s += xr[j];
    float mean = (float)(warp_sum(s) / d);
    double v = 0.0;
    for (int j = lane; j < d; j += 32) {
        float t = xr[j] - mean;
        v += (double)t * t;
    }
    float rstd = (float)(1.0 / sqrt(warp_sum(v) / d + eps));
    for (int j = lane; j < d; j += 32) {
        float t = (xr[j] - mean) * rstd;
        yr[j] = t * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
    }
    if (lane == 0) {
        saved[row] = mean;
        saved[rows + row] = rstd;
    }
}

static __global__ void __launch_bounds__(LN_THREADS)
ln_dx_kernel(int rows, int d, const float *x, const float *gamma, const float *saved,
             const float *dy, float *dx)
{
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32);
    int lane = (int)(threadIdx.x & 31);
    if (row >= rows)
        return;
    const float *xr = x + (size_t)row * d, *gr = dy + (size_t)row * d;
    float mean = saved[row], rstd = saved[rows + row];
    double sg = 0.0, sgx = 0.0;
    /* g rounded to float (__fmul_rn: never fused into a later add), the
     * same g in the sums and in dx: contracted into an FMA below, its
     * unrounded product made dx nonzero where it is exactly 0 (d = 1, where
     * rstd = 1/sqrt(eps) magnifies the residue to ~2e-5). */
    for (int j = lane; j < d; j += 32) {
        float g = __fmul_rn(gr[j], gamma ? gamma[j] : 1.0f);
        sg += g;
        sgx += (double)g * ((xr[j] - mean) * rstd);
    }
    float a = (float)(warp_sum(sg) / d), b = (float)(warp_sum(sgx) / d);
    float *o = dx + (size_t)row * d;
    for (int j = lane; j < d; j += 32) {
        float g = __fmul_rn(gr[j], gamma ? gamma[j] : 1.0f);
        float xhat = (xr[j] - mean) * rstd;
        o[j] = rstd * (g - a - xhat * b);
    }
}

static __global__ void __launch_bounds__(LN_PARAM_THREADS)
ln_param_kernel(int rows, int d, const float *x, const float *saved, const float *dy,
                float *dgamma, float *dbeta)
{
    __shared__ double part[2][LN_PARAM_WARPS][32];
    int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x / 32);
    int j = (int)blockIdx.x * 32 + lane;
    double sg = 0.0, sb = 0.0;
    if (j < d)
        for (int r = w; r < rows; r += LN_PARAM_WARPS) {
            float g = dy[(size_t)r * d + j];
            sg += (double)g * ((x[(size_t)r * d + j] - saved[r]) * saved[rows + r]);
            sb += g;
        }
    part[0][w][lane] = sg;
    part[1][w][lane] = sb;
    __syncthreads();
    if (w == 0 && j < d) {
        double tg = 0.0, tb = 0.0;
        for (int k = 0; k < LN_PARAM_WARPS; k++) {
            tg += part[0][k][lane];
            tb += part[1][k][lane];
        }
        if (dgamma)
            dgamma[j] = (float)tg;
        if (dbeta)
            dbeta[j] = (float)tb;
    }
}

static unsigned warp_blocks(int rows)
{
    return (unsigned)(((size_t)rows + LN_WARPS - 1) / LN_WARPS);
}

extern "C" cudaError_t cuk_layernorm_fwd(cudaStream_t s, int rows, int d, const float *x,
                                         const float *gamma, const float *beta, float eps,
                                         float *y, float *saved)
{
    CUK_LAUNCH(ln_fwd_kernel, warp_blocks(rows), LN_THREADS, s, rows, d, x, gamma, beta, eps, y,
               saved);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_layernorm_bwd(cudaStream_t s, int rows, int d, const float *x,
                                         const float *gamma, const float *saved,
                                         const float *dy, float *dx, float *dgamma,
                                         float *dbeta)
{
    if (dx) {
        CUK_LAUNCH(ln_dx_kernel, warp_blocks(rows), LN_THREADS, s, rows, d, x, gamma, saved, dy,
                   dx);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    if (dgamma || dbeta)
        CUK_LAUNCH(ln_param_kernel, (unsigned)((d + 31) / 32), LN_PARAM_THREADS, s, rows, d,
                   x, saved, dy, dgamma, dbeta);
    return cudaGetLastError();
}
