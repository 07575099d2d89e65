/* Batch norm's elementwise passes over NCHW tensors (x is (n,c,plane)),
 * and its per-channel running statistics. The per-channel sums between
 * them are cuk_chan_sums (chan.cu), so a data-parallel SyncBatchNorm can
 * allreduce them between the passes.
 *
 * PyTorch's formulas, in float, per channel ch:
 *   invstd = 1 / sqrtf(var + eps)
 *   forward     y  = (x - mean) * invstd * gamma + beta   (then ReLU if fused)
 *   backward    dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count)
 *               with xhat = (x - mean) * invstd, count = the elements each
 *               sum covers (n*plane, times the ranks under SyncBatchNorm)
 *   running     rm = (1 - momentum) * rm + momentum * mean
 *               rv = (1 - momentum) * rv + momentum * var * count / (count - 1)
 * gamma NULL means 1 and beta NULL means 0 (affine=False). With the ReLU
 * fused, the backward pass first zeroes dy where the output y is not
 * positive (what relu_bwd would do). Elementwise: no reductions, so every
 * result is bit for bit reproducible.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

static __device__ __forceinline__ float bn_invstd(const float *var, int ch, float eps)
{
    return 1.0f / sqrtf(var[ch] + eps);
}

static __global__ void bn_fwd_kernel(size_t total, int c, int plane, const float *x,
                                     const float *mean, const float *var, float eps,
                                     const float *gamma, const float *beta, int relu, float *y)
{
    CUK_GRID_STRIDE(i, total) {
        int ch = (int)((i / (size_t)plane) % (size_t)c);
        float v = (x[i] - mean[ch]) * bn_invstd(var, ch, eps);
        if (gamma)
            v *= gamma[ch];
        if (beta)
            v += beta[ch];
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

static __global__ void bn_bwd_kernel(size_t total, int c, int plane, const float *x,
                                     const float *relu_y, const float *dy, const float *mean,
                                     const float *var, float eps, const float *gamma,
                                     const float *sum_dy, const float *sum_dy_xhat, float count,
                                     float *dx)
{
    CUK_GRID_STRIDE(i, total) {
        int ch = (int)((i / (size_t)plane) % (size_t)c);
        float is = bn_invstd(var, ch, eps);
        float g = relu_y && !(relu_y[i] > 0.0f) ? 0.0f : dy[i];
        float xhat = (x[i] - mean[ch]) * is;
        float k = (gamma ? gamma[ch] : 1.0f) * is;
        dx[i] = k * (g - sum_dy[ch] / count - xhat * (sum_dy_xhat[ch] / count));
    }
}

static __global__ void bn_running_kernel(int c, float *rm, float *rv, const float *mean,
                                         const float *var, float momentum, float unbias)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    rm[ch] = (1.0f - momentum) * rm[ch] + momentum * mean[ch];
    rv[ch] = (1.0f - momentum) * rv[ch] + momentum * (var[ch] * unbias);
}

extern "C" cudaError_t cuk_bn_fwd(cudaStream_t s, int n, int c, int plane, const float *x,
                                  const float *mean, const float *var, float eps,
                                  const float *gamma, const float *beta, int relu, float *y)
{
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bn_fwd_kernel, cuk_blocks(total), CUK_THREADS, s, total, c, plane, x, mean, var,
               eps, gamma, beta, relu, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_bwd(cudaStream_t s, int n, int c, int plane, const float *x,
                                  const float *relu_y, const float *dy, const float *mean,
                                  const float *var, float eps, const float *gamma,
                                  const float *sum_dy, const float *sum_dy_xhat, float count,
                                  float *dx)
{
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bn_bwd_kernel, cuk_blocks(total), CUK_THREADS, s, total, c, plane, x, relu_y, dy,
               mean, var, eps, gamma, sum_dy, sum_dy_xhat, count, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_running(cudaStream_t s, int c, float *running_mean,
                                      float *running_var, const float *mean, const float *var,
                                      float momentum, float unbias)
{
    CUK_LAUNCH(bn_running_kernel, (unsigned)(c + 127) / 128, 128, s, c, running_mean,
               running_var, mean, var, momentum, unbias);
    return cudaGetLastError();
}
