/* Rounding fp32 to bf16 for the bf16 matrix products (linear.c): weights
 * into the backend's cache, activations and gradients into the op's
 * workspace. bf16 is the upper half of an fp32 (sign, 8 exponent bits, 7
 * mantissa bits), kept here as its 16 bits (uint16_t), which is what cuBLAS
 * reads as CUDA_R_16BF; no cuda_bf16.h, so the CPU emulation (emu.h) runs
 * the same code. */
#include <string.h>

#include "kernels/cuda/cuk.cuh"

/* Round to nearest, ties to even (what __float2bfloat16 and PyTorch's
 * .to(torch.bfloat16) do): add 0x7fff plus the lowest kept bit, then cut.
 * Values above bf16's largest round to infinity like any overflow; NaN
 * stays a (quiet) NaN instead of being rounded into an infinity. */
static __device__ __forceinline__ uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Two ranges in one launch (a weight and an activation, or a gradient and
 * an activation): each thread strides over both. */
static __global__ void to_bf16_kernel(size_t n1, const float *x1, uint16_t *y1, size_t n2,
                                      const float *x2, uint16_t *y2)
{
    CUK_GRID_STRIDE(i, n1 + n2) {
        if (i < n1)
            y1[i] = to_bf16(x1[i]);
        else
            y2[i - n1] = to_bf16(x2[i - n1]);
    }
}

extern "C" cudaError_t cuk_to_bf16(cudaStream_t s, size_t n1, const float *x1, uint16_t *y1,
                                   size_t n2, const float *x2, uint16_t *y2)
{
    if (n1 + n2 == 0)
        return cudaSuccess;
    CUK_LAUNCH(to_bf16_kernel, cuk_blocks(n1 + n2), CUK_THREADS, s, n1, x1, y1, n2, x2, y2);
    return cudaGetLastError();
}

/* Padded rows for products whose row length (a vocabulary of 50257, say) is
 * not a multiple of 8 (linear.c): y (rows, ld) bf16 = x (rows, cols) with
 * columns cols..ld-1 zero, and its way back, dst (rows, cols) fp32 = the
 * first cols columns of src (rows, ld). One block row per matrix row,
 * grid-striding over rows past the grid's 65535. */
static __global__ void to_bf16_rows_kernel(size_t rows, int cols, int ld, const float *x,
                                           uint16_t *y)
{
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int j = (int)(blockIdx.x * blockDim.x + threadIdx.x); j < ld;
             j += (int)(gridDim.x * blockDim.x))
            y[r * (size_t)ld + j] = j < cols ? to_bf16(x[r * (size_t)cols + j]) : (uint16_t)0;
}

static __global__ void copy_rows_kernel(size_t rows, int cols, int ld, const float *src,
                                        float *dst)
{
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int j = (int)(blockIdx.x * blockDim.x + threadIdx.x); j < cols;
             j += (int)(gridDim.x * blockDim.x))
            dst[r * (size_t)cols + j] = src[r * (size_t)ld + j];
}

static dim3 rows_grid(size_t rows, int cols)
{
    unsigned x = (unsigned)((cols + CUK_THREADS - 1) / CUK_THREADS);
    return dim3(x > 8 ? 8 : x, (unsigned)(rows < 65535 ? rows : 65535));
}

extern "C" cudaError_t cuk_to_bf16_rows(cudaStream_t s, size_t rows, int cols, int ld,
                                        const float *x, uint16_t *y)
{
    if (rows == 0 || ld <= 0)
        return cudaSuccess;
    CUK_LAUNCH(to_bf16_rows_kernel, rows_grid(rows, ld), CUK_THREADS, s, rows, cols, ld, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_copy_rows(cudaStream_t s, size_t rows, int cols, int ld,
                                     const float *src, float *dst)
{
    if (rows == 0 || cols <= 0)
        return cudaSuccess;
    CUK_LAUNCH(copy_rows_kernel, rows_grid(rows, cols), CUK_THREADS, s, rows, cols, ld, src, dst);
    return cudaGetLastError();
}
