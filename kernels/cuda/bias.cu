/* Bias of conv2d and linear layers: add in forward, sum in backward.
 *
 * The gradients are sums over the batch (and the output plane for conv2d).
 * They are computed in a fixed order that depends on the shape only (per
 * thread sequential sums, then a fixed shared-memory tree, then partials in
 * order), so they are bitwise reproducible; no atomics.
 */
#include "kernels/cuda/cuk.cuh"

/* y is (n,c,plane): y[i] += b[(i / plane) % c]. */
static __global__ void bias_add_nchw_kernel(float *y, const float *b, size_t total, int c,
                                            int plane)
{
    CUK_GRID_STRIDE(i, total)
        y[i] += b[(i / (size_t)plane) % (size_t)c];
}

/* y is (rows,cols): y[r][j] += b[j]. */
static __global__ void bias_add_rows_kernel(float *y, const float *b, size_t total, int cols)
{
    CUK_GRID_STRIDE(i, total)
        y[i] += b[i % (size_t)cols];
}

/* Images are split into up to BIAS_GROUPS interleaved groups (fewer for
 * small batches, or when c*groups partials would not fit); block (g, ch)
 * sums channel ch over the images of group g. */
#define BIAS_GROUPS 64
#define BIAS_THREADS 256

static int bias_groups(int n, int c, size_t max_partials)
{
    size_t g = n < BIAS_GROUPS ? (size_t)(n > 0 ? n : 1) : BIAS_GROUPS;
    size_t fit = max_partials / (size_t)(c > 0 ? c : 1);
    if (g > fit)
        g = fit > 0 ? fit : 1;
    return (int)g;
}

/* Fixed-order tree over the BIAS_THREADS values in sh; returns the sum in
 * thread 0. */
static __device__ float block_sum(float *sh, float v)
{
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = BIAS_THREADS / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    return sh[0];
}

static __global__ void __launch_bounds__(BIAS_THREADS)
bias_grad_nchw_partial_kernel(const float *dy, float *partials, int n, int c, int plane)
{
    __shared__ float sh[BIAS_THREADS];
    int g = blockIdx.x, groups = gridDim.x, ch = blockIdx.y;
    float acc = 0.0f;
    for (int img = g; img < n; img += groups) {
        const float *p = dy + ((size_t)img * c + ch) * (size_t)plane;
        for (int j = threadIdx.x; j < plane; j += BIAS_THREADS)
            acc += p[j];
    }
    float s = block_sum(sh, acc);
    if (threadIdx.x == 0)
        partials[(size_t)ch * groups + g] = s;
}

static __global__ void bias_grad_nchw_final_kernel(const float *partials, float *db, int c,
                                                   int groups)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    float s = 0.0f;
    for (int g = 0; g < groups; g++)
        s += partials[(size_t)ch * groups + g];
    db[ch] = s;
}

/* dy is (rows,cols); block x covers 32 columns, its 16 thread rows stride
 * over the batch rows, then a fixed tree sums the 16 partial sums. */
#define ROWS_TX 32
#define ROWS_TY 16

static __global__ void __launch_bounds__(ROWS_TX * ROWS_TY)
bias_grad_rows_kernel(const float *dy, float *db, int rows, int cols)
{
    __shared__ float sh[ROWS_TY][ROWS_TX + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * ROWS_TX + tx;
    float acc = 0.0f;
    if (col < cols)
        for (int r = ty; r < rows; r += ROWS_TY)
            acc += dy[(size_t)r * cols + col];
    sh[ty][tx] = acc;
    __syncthreads();
    for (int s = ROWS_TY / 2; s > 0; s >>= 1) {
        if (ty < s)
            sh[ty][tx] += sh[ty + s][tx];
        __syncthreads();
    }
    if (ty == 0 && col < cols)
        db[col] = sh[0][tx];
}

extern "C" cudaError_t cuk_bias_add_nchw(cudaStream_t s, float *y, const float *b, int n, int c,
                                         int plane)
{
    size_t total = (size_t)n * c * plane;
    CUK_LAUNCH(bias_add_nchw_kernel, cuk_blocks(total), CUK_THREADS, s, y, b, total, c, plane);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bias_add_rows(cudaStream_t s, float *y, const float *b, int rows,
                                         int cols)
{
    size_t total = (size_t)rows * cols;
    CUK_LAUNCH(bias_add_rows_kernel, cuk_blocks(total), CUK_THREADS, s, y, b, total, cols);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bias_grad_nchw(cudaStream_t s, const float *dy, float *db, int n,
                                          int c, int plane, float *partials,
                                          size_t max_partials)
{
    int groups = bias_groups(n, c, max_partials);
    dim3 grid((unsigned)groups, (unsigned)c);
    CUK_LAUNCH(bias_grad_nchw_partial_kernel, grid, BIAS_THREADS, s, dy, partials, n, c, plane);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    CUK_LAUNCH(bias_grad_nchw_final_kernel, (unsigned)(c + 127) / 128, 128, s,
               partials, db, c, groups);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bias_grad_rows(cudaStream_t s, const float *dy, float *db, int rows,
                                          int cols)
{
    dim3 block(ROWS_TX, ROWS_TY);
    CUK_LAUNCH(bias_grad_rows_kernel, (unsigned)(cols + ROWS_TX - 1) / ROWS_TX, block, s,
               dy, db, rows, cols);
    return cudaGetLastError();
}
