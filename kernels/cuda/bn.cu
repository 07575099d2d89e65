/* Batch norm's per-channel constants and elementwise passes over NCHW
 * tensors (x is (n,c,plane)): backend.h's bn_apply, bn_running, bn_eval,
 * bn_bwd_apply and bn_fold. The per-channel sums between them are
 * cuk_chan_sums (chan.cu), so a data-parallel SyncBatchNorm can allreduce
 * them between the pieces.
 *
 * As the CPU backend (kernels/cpu/bnorm.c) does it: the per-channel
 * constants in double, one thread per channel (bit for bit the CPU's), then
 * one elementwise pass with them in float:
 *   saved     mean = sum/count, invstd = 1/sqrt(sqdev/count + eps), count
 *   forward   y = x*scale + shift, scale = gamma*invstd, shift = beta -
 *             mean*scale (then max(0, .) when the ReLU is fused)
 *   backward  dx = A*g - B*x + C, g = dy masked by the fused ReLU's y > 0,
 *             A = gamma*invstd, B = A*invstd*sum_dy_xhat/count,
 *             C = -A*sum_dy/count + B*mean
 * The elementwise passes may differ from the CPU by the rounding of fused
 * multiply-adds. gamma NULL means 1 and beta NULL means 0 (affine=False).
 * The constants go to a small scratch (coef) of the backend's; nothing is
 * allocated, nothing waits: all of it runs inside CUDA graph steps.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define BN_CHAN_THREADS 128

static unsigned chan_blocks(int c)
{
    return (unsigned)(c + BN_CHAN_THREADS - 1) / BN_CHAN_THREADS;
}

static __global__ void bn_saved_kernel(int c, const float *sum, const float *sqdev, float eps,
                                       float *saved)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double count = sum[c];
    double var = count > 0.0 ? sqdev[ch] / count : 0.0;
    saved[ch] = count > 0.0 ? (float)(sum[ch] / count) : 0.0f;
    saved[c + ch] = (float)(1.0 / sqrt(var + eps));
    if (ch == 0)
        saved[2 * c] = (float)count;
}

/* coef (2c) = scale, shift from saved (training) or the running
 * statistics (evaluation: saved NULL). */
static __global__ void bn_coef_kernel(int c, const float *saved, const float *rm, const float *rv,
                                      float eps, const float *gamma, const float *beta,
                                      float *coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    float mean, invstd;
    if (saved) {
        mean = saved[ch];
        invstd = saved[c + ch];
    } else {
        mean = rm[ch];
        invstd = (float)(1.0 / sqrt((double)rv[ch] + eps));
    }
    float scale = (gamma ? gamma[ch] : 1.0f) * invstd;
    coef[ch] = scale;
    coef[c + ch] = (beta ? beta[ch] : 0.0f) - mean * scale;
}

static __global__ void bn_affine_kernel(size_t total, int c, int plane, const float *x,
                                        const float *coef, int relu, float *y)
{
    CUK_GRID_STRIDE(i, total) {
        int ch = (int)((i / (size_t)plane) % (size_t)c);
        float v = x[i] * coef[ch] + coef[c + ch];
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* coef (3c) = A, B, C of the backward (see the top). */
static __global__ void bn_bwd_coef_kernel(int c, const float *saved, const float *gamma,
                                          const float *sum_dy, const float *sum_dy_xhat,
                                          float *coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double count = saved[2 * c];
    double mean = saved[ch], invstd = saved[c + ch];
    double k = (gamma ? gamma[ch] : 1.0) * invstd;
    double B = k * invstd * sum_dy_xhat[ch] / count;
    double C = -k * sum_dy[ch] / count + B * mean;
    coef[ch] = (float)k;
    coef[c + ch] = (float)B;
    coef[2 * c + ch] = (float)C;
}

static __global__ void bn_bwd_apply_kernel(size_t total, int c, int plane, const float *x,
                                           const float *relu_y, const float *dy,
                                           const float *coef, float *dx)
{
    CUK_GRID_STRIDE(i, total) {
        int ch = (int)((i / (size_t)plane) % (size_t)c);
        float g = !relu_y || relu_y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = coef[ch] * g - coef[c + ch] * x[i] + coef[2 * c + ch];
    }
}

static __global__ void bn_running_kernel(int c, const float *sum, const float *sqdev,
                                         float momentum, float *rm, float *rv, float *nbt)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double count = sum[c];
    double mean = count > 0.0 ? sum[ch] / count : 0.0;
    double var = count > 1.0 ? sqdev[ch] / (count - 1.0) : 0.0;
    rm[ch] = (1.0f - momentum) * rm[ch] + momentum * (float)mean;
    rv[ch] = (1.0f - momentum) * rv[ch] + momentum * (float)var;
    if (ch == 0 && nbt)
        *nbt += 1.0f;
}

/* Element k of output channel o's weights; the k == 0 thread also does b. */
static __global__ void bn_fold_kernel(int oc, int per_oc, const float *w, const float *b,
                                      const float *rm, const float *rv, float eps,
                                      const float *gamma, const float *beta, float *w_out,
                                      float *b_out)
{
    size_t total = (size_t)oc * per_oc;
    CUK_GRID_STRIDE(i, total) {
        int o = (int)(i / (size_t)per_oc);
        float s = (float)((gamma ? gamma[o] : 1.0) / sqrt((double)rv[o] + eps));
        w_out[i] = w[i] * s;
        if (i % (size_t)per_oc == 0)
            b_out[o] = ((b ? b[o] : 0.0f) - rm[o]) * s + (beta ? beta[o] : 0.0f);
    }
}

extern "C" cudaError_t cuk_bn_apply(cudaStream_t s, int n, int c, int plane, const float *x,
                                    const float *sum, const float *sqdev, float eps,
                                    const float *gamma, const float *beta, int relu, float *y,
                                    float *saved, float *coef)
{
    CUK_LAUNCH(bn_saved_kernel, chan_blocks(c), BN_CHAN_THREADS, s, c, sum, sqdev, eps, saved);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    const float *none = NULL;
    CUK_LAUNCH(bn_coef_kernel, chan_blocks(c), BN_CHAN_THREADS, s, c, (const float *)saved, none,
               none, 0.0f, gamma, beta, coef);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bn_affine_kernel, cuk_blocks(total), CUK_THREADS, s, total, c, plane, x,
               (const float *)coef, relu, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_eval(cudaStream_t s, int n, int c, int plane, const float *x,
                                   const float *running_mean, const float *running_var,
                                   float eps, const float *gamma, const float *beta, int relu,
                                   float *y, float *coef)
{
    const float *none = NULL;
    CUK_LAUNCH(bn_coef_kernel, chan_blocks(c), BN_CHAN_THREADS, s, c, none, running_mean,
               running_var, eps, gamma, beta, coef);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bn_affine_kernel, cuk_blocks(total), CUK_THREADS, s, total, c, plane, x,
               (const float *)coef, relu, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_bwd_apply(cudaStream_t s, int n, int c, int plane, const float *x,
                                        const float *relu_y, const float *dy, const float *saved,
                                        const float *gamma, const float *sum_dy,
                                        const float *sum_dy_xhat, float *dx, float *coef)
{
    CUK_LAUNCH(bn_bwd_coef_kernel, chan_blocks(c), BN_CHAN_THREADS, s, c, saved, gamma, sum_dy,
               sum_dy_xhat, coef);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bn_bwd_apply_kernel, cuk_blocks(total), CUK_THREADS, s, total, c, plane, x,
               relu_y, dy, (const float *)coef, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_running(cudaStream_t s, int c, const float *sum,
                                      const float *sqdev, float momentum, float *running_mean,
                                      float *running_var, float *num_batches_tracked)
{
    CUK_LAUNCH(bn_running_kernel, chan_blocks(c), BN_CHAN_THREADS, s, c, sum, sqdev, momentum,
               running_mean, running_var, num_batches_tracked);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bn_fold(cudaStream_t s, int oc, int per_oc, const float *w,
                                   const float *b, const float *running_mean,
                                   const float *running_var, float eps, const float *gamma,
                                   const float *beta, float *w_out, float *b_out)
{
    size_t total = (size_t)oc * per_oc;
    CUK_LAUNCH(bn_fold_kernel, cuk_blocks(total), CUK_THREADS, s, oc, per_oc, w, b,
               running_mean, running_var, eps, gamma, beta, w_out, b_out);
    return cudaGetLastError();
}
