/* Shared by the .cu files: launch geometry and launch syntax. */
#ifndef CDL_KERNELS_CUDA_CUK_CUH
#define CDL_KERNELS_CUDA_CUK_CUH

#include <stddef.h>

#include "kernels/cuda/kernels.h"

/* Threads per block of the elementwise kernels. */
#define CUK_THREADS 256
/* Grid-stride loops cap the grid here: enough blocks to fill any current
 * GPU several times over, few enough that a launch never exceeds limits. */
#define CUK_MAX_BLOCKS 16384u

static inline unsigned cuk_blocks(size_t n)
{
    size_t b = (n + CUK_THREADS - 1) / CUK_THREADS;
    if (b == 0)
        b = 1;
    return b > CUK_MAX_BLOCKS ? CUK_MAX_BLOCKS : (unsigned)b;
}

/* The scalars a kernel uses: the device copy under graph replay, else the
 * by-value ones. */
template <typename T> static __device__ __forceinline__ T cuk_pick(const T &sc, const T *dyn)
{
    return dyn ? *dyn : sc;
}

/* kernel<<<grid, block, 0, stream>>>(args), written so that the CPU
 * emulation of the unit tests (emu.h) can run the same source. */
#ifdef CUK_EMULATION
#define CUK_LAUNCH(kernel, grid, block, stream, ...)                                       \
    cuk_emu_submit_launch((stream), dim3(grid), dim3(block), [=]() { kernel(__VA_ARGS__); })
#else
#define CUK_LAUNCH(kernel, grid, block, stream, ...)                                       \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

/* Full unrolling of a loop with a constant trip count (register arrays
 * indexed by it stay in registers); nothing in the CPU emulation. */
#ifdef CUK_EMULATION
#define CUK_UNROLL
#else
#define CUK_UNROLL _Pragma("unroll")
#endif

#define CUK_GRID_STRIDE(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)gridDim.x * blockDim.x)

#endif
