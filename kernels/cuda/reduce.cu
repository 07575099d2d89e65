/* sumsq: the squared L2 norm of a flat range in double.
 *
 * A fixed grid of CUK_SUMSQ_BLOCKS blocks: thread t of the grid sums
 * elements t, t+T, t+2T, ... (T = all threads) in sequence, each block adds
 * its threads' sums in a fixed tree, and one block adds the block sums in a
 * fixed tree. The order depends on n only, so the result is bitwise
 * reproducible (not bitwise equal to the CPU backend's, whose order differs).
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define SUMSQ_THREADS 256

static __device__ double tree_sum(double *sh, double v)
{
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    return sh[0];
}

static __global__ void __launch_bounds__(SUMSQ_THREADS)
sumsq_partial_kernel(const float *x, size_t n, double *partials)
{
    __shared__ double sh[SUMSQ_THREADS];
    double acc = 0.0;
    CUK_GRID_STRIDE(i, n) {
        double v = (double)x[i];
        acc += v * v;
    }
    double s = tree_sum(sh, acc);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s;
}

static __global__ void __launch_bounds__(SUMSQ_THREADS)
sumsq_final_kernel(const double *partials, double *out, int add)
{
    __shared__ double sh[SUMSQ_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < CUK_SUMSQ_BLOCKS; i += SUMSQ_THREADS)
        acc += partials[i];
    double s = tree_sum(sh, acc);
    if (threadIdx.x == 0)
        *out = add ? *out + s : s;
}

/* PyTorch's clip_grad_norm_ from the squared norm on the device, in the
 * host's arithmetic (grads.c's train_clip_coef): the norm sqrt in double,
 * then max_norm / (norm + 1e-6) in float; a coefficient of 1 or more (or
 * NaN) changes nothing. Every thread computes the same coefficient. */
static __global__ void clip_scale_kernel(float *x, size_t n, const double *sq, float max_norm)
{
    float coef = max_norm / ((float)sqrt(*sq) + 1e-6f);
    if (!(coef < 1.0f))
        return;
    CUK_GRID_STRIDE(i, n)
        x[i] *= coef;
}

extern "C" cudaError_t cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials,
                                 double *out, int add)
{
    CUK_LAUNCH(sumsq_partial_kernel, CUK_SUMSQ_BLOCKS, SUMSQ_THREADS, s, x, n, partials);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    CUK_LAUNCH(sumsq_final_kernel, 1, SUMSQ_THREADS, s, partials, out, add);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_clip_scale(cudaStream_t s, float *x, size_t n, const double *sq,
                                      float max_norm)
{
    CUK_LAUNCH(clip_scale_kernel, cuk_blocks(n), CUK_THREADS, s, x, n, sq, max_norm);
    return cudaGetLastError();
}
