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
