/* Per-channel work on NCHW tensors: global average pooling, channel
 * concat/split as a strided copy, and the per-channel sums of batch norm.
 *
 * Every sum is in an order fixed by the shape (no atomics), so results are
 * bitwise reproducible run to run:
 * - global average pooling: one thread per (n,c) plane adds its plane in
 *   sequence in double and divides by plane, like the CPU backend (bit for
 *   bit the same);
 * - batch-norm sums: images are split into up to CHAN_GROUPS interleaved
 *   groups, fewer when planes are small, so that a block has about
 *   CHAN_WORK terms; block (g, ch) runs over the terms of channel ch in the
 *   images of group g as one flat range (image-major), each thread taking
 *   every CHAN_THREADS-th term in sequence, then a fixed shared-memory tree;
 *   one thread per channel adds the groups' partials in order. (Looping
 *   over the plane alone left most threads idle on 4x4 and 8x8 planes: an
 *   H200 spent 18% of a resnet18 step in these sums.) Accumulated in double (a
 *   channel of a batch of 256 32x32 images is 262144 terms), stored as
 *   float.
 */
#include "kernels/cuda/cuk.cuh"

/* ----------------------------------------------------- global avg pool */

static __global__ void gap_fwd_kernel(size_t rows, int plane, const float *x, float *y)
{
    CUK_GRID_STRIDE(r, rows) {
        const float *p = x + r * (size_t)plane;
        double s = 0.0;
        for (int j = 0; j < plane; j++)
            s += p[j];
        y[r] = (float)(s / plane);
    }
}

static __global__ void gap_bwd_kernel(size_t total, int plane, const float *dy, float *dx)
{
    CUK_GRID_STRIDE(i, total)
        dx[i] = dy[i / (size_t)plane] / (float)plane;
}

extern "C" cudaError_t cuk_gap_fwd(cudaStream_t s, size_t rows, int plane, const float *x,
                                   float *y)
{
    CUK_LAUNCH(gap_fwd_kernel, cuk_blocks(rows), CUK_THREADS, s, rows, plane, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_gap_bwd(cudaStream_t s, size_t rows, int plane, const float *dy,
                                   float *dx)
{
    size_t total = rows * (size_t)plane;
    CUK_LAUNCH(gap_bwd_kernel, cuk_blocks(total), CUK_THREADS, s, total, plane, dy, dx);
    return cudaGetLastError();
}

/* --------------------------------------------------------- strided copy */

/* outer blocks of inner floats: dst[o*dst_stride + j] = src[o*src_stride + j]
 * (or += when accumulate). */
static __global__ void strided_copy_kernel(size_t outer, size_t inner, float *dst,
                                           size_t dst_stride, const float *src,
                                           size_t src_stride, int accumulate)
{
    size_t total = outer * inner;
    CUK_GRID_STRIDE(i, total) {
        size_t o = i / inner, j = i % inner;
        float v = src[o * src_stride + j];
        float *d = dst + o * dst_stride + j;
        *d = accumulate ? *d + v : v;
    }
}

extern "C" cudaError_t cuk_strided_copy(cudaStream_t s, size_t outer, size_t inner, float *dst,
                                        size_t dst_stride, const float *src, size_t src_stride,
                                        int accumulate)
{
    size_t total = outer * inner;
    CUK_LAUNCH(strided_copy_kernel, cuk_blocks(total), CUK_THREADS, s, outer, inner, dst,
               dst_stride, src, src_stride, accumulate);
    return cudaGetLastError();
}

/* ------------------------------------------------------- channel sums */

#define CHAN_GROUPS 32
#define CHAN_THREADS 256
#define CHAN_WORK 4096

static int chan_groups(int n, int c, int plane, size_t max_partials)
{
    size_t g = n < CHAN_GROUPS ? (size_t)(n > 0 ? n : 1) : CHAN_GROUPS;
    size_t work = (size_t)(n > 0 ? n : 1) * (size_t)(plane > 0 ? plane : 1) / CHAN_WORK;
    if (g > work)
        g = work > 0 ? work : 1;
    size_t fit = max_partials / (2 * (size_t)(c > 0 ? c : 1));
    if (g > fit)
        g = fit > 0 ? fit : 1;
    return (int)g;
}

/* Fixed-order tree over the CHAN_THREADS values; the sum lands in sh[0].
 * sh is reused right after: the caller reads sh[0] before the next call's
 * first write, separated by that call's barrier. */
static __device__ double chan_tree(double *sh, double v)
{
    int t = threadIdx.x;
    __syncthreads();   /* the previous tree's sh[0] has been read */
    sh[t] = v;
    __syncthreads();
    for (int st = CHAN_THREADS / 2; st > 0; st >>= 1) {
        if (t < st)
            sh[t] += sh[t + st];
        __syncthreads();
    }
    return sh[0];
}

/* The channel's mean, as the CPU backend takes it: from the sums (sum[c]
 * is the count) for CUK_CHAN_SQDEV, from saved for CUK_CHAN_BWD. */
static __device__ float chan_mean(int mode, const float *stats, int c, int ch)
{
    if (mode == CUK_CHAN_SQDEV)
        return stats[c] > 0.0f ? (float)((double)stats[ch] / stats[c]) : 0.0f;
    return mode == CUK_CHAN_BWD ? stats[ch] : 0.0f;
}

/* This thread's terms of block (g, ch): the group's images g, g+groups,
 * ... as one flat range of cnt*plane terms, every CHAN_THREADS-th from
 * threadIdx.x. I is the index type: 32-bit when the range fits (the
 * division by plane is then cheap). */
template <typename I>
static __device__ void chan_terms(int mode, const float *x, const float *dy, const float *relu_y,
                                  float m, int g, int groups, int ch, int c, int plane, I total,
                                  double *a0, double *a1)
{
    for (I idx = threadIdx.x; idx < total; idx += CHAN_THREADS) {
        I k = idx / (I)plane;
        size_t img = (size_t)g + (size_t)k * (size_t)groups;
        size_t i = (img * (size_t)c + (size_t)ch) * (size_t)plane + (size_t)(idx - k * (I)plane);
        if (mode == CUK_CHAN_SUM) {
            *a0 += (double)x[i];
        } else if (mode == CUK_CHAN_SQDEV) {
            float d = x[i] - m;
            *a0 += (double)d * d;
        } else { /* CUK_CHAN_BWD */
            float gf = relu_y && !(relu_y[i] > 0.0f) ? 0.0f : dy[i];
            *a0 += (double)gf;
            *a1 += (double)gf * (x[i] - m);
        }
    }
}

/* The terms each element adds, per mode (see kernels.h, cuk_chan_sums). */
static __global__ void __launch_bounds__(CHAN_THREADS)
chan_partial_kernel(int mode, const float *x, const float *dy, const float *relu_y,
                    const float *stats, double *partials, int n, int c, int plane)
{
    __shared__ double sh[CHAN_THREADS];
    int g = blockIdx.x, groups = gridDim.x, ch = blockIdx.y;
    double a0 = 0.0, a1 = 0.0;
    float m = chan_mean(mode, stats, c, ch);
    size_t cnt = g < n ? (size_t)(n - g + groups - 1) / (size_t)groups : 0;
    size_t total = cnt * (size_t)plane;
    if (total <= 0x7fffffffu)
        chan_terms<unsigned>(mode, x, dy, relu_y, m, g, groups, ch, c, plane, (unsigned)total,
                             &a0, &a1);
    else
        chan_terms<size_t>(mode, x, dy, relu_y, m, g, groups, ch, c, plane, total, &a0, &a1);
    double s0 = chan_tree(sh, a0);
    if (threadIdx.x == 0)
        partials[(size_t)ch * groups + g] = s0;
    if (mode == CUK_CHAN_BWD) {
        double s1 = chan_tree(sh, a1);
        if (threadIdx.x == 0)
            partials[((size_t)c + ch) * groups + g] = s1;
    }
}

static __global__ void chan_final_kernel(int mode, const double *partials, const float *stats,
                                         float *out0, float *out1, int c, int groups,
                                         float count)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double s = 0.0;
    for (int g = 0; g < groups; g++)
        s += partials[(size_t)ch * groups + g];
    if (mode != CUK_CHAN_BWD) {
        out0[ch] = (float)s;
        if (mode == CUK_CHAN_SUM && ch == 0)
            out0[c] = count;
        return;
    }
    double t = 0.0;
    for (int g = 0; g < groups; g++)
        t += partials[((size_t)c + ch) * groups + g];
    out0[ch] = (float)(t * stats[c + ch]);   /* sum dy*(x-mean) times invstd */
    out1[ch] = (float)s;
}

extern "C" cudaError_t cuk_chan_sums(cudaStream_t s, int mode, const float *x, const float *dy,
                                     const float *relu_y, const float *stats, int n, int c,
                                     int plane, float *out0, float *out1, double *partials,
                                     size_t max_partials)
{
    int groups = chan_groups(n, c, plane, max_partials);
    dim3 grid((unsigned)groups, (unsigned)c);
    CUK_LAUNCH(chan_partial_kernel, grid, CHAN_THREADS, s, mode, x, dy, relu_y, stats, partials,
               n, c, plane);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    float count = (float)((double)n * plane);
    CUK_LAUNCH(chan_final_kernel, (unsigned)(c + 127) / 128, 128, s, mode, partials, stats, out0,
               out1, c, groups, count);
    return cudaGetLastError();
}
