/* Shared by the .cu files: launch geometry for flat ranges. */
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

#define CUK_GRID_STRIDE(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)gridDim.x * blockDim.x)

#endif
