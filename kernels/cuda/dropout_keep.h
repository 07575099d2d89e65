/* cdl_dropout_keep() (lib/cdl/backend.h) for host and device code.
 *
 * backend.h's copy is a plain C inline function, which device code cannot
 * call. This one is the same expression marked __host__ __device__ under
 * nvcc, so GPU masks equal CPU masks bit for bit; tests/unit/test_cuda.c
 * compiles it with the C compiler and checks it against backend.h's on many
 * (seed, i, p). Change both together.
 */
#ifndef CDL_KERNELS_CUDA_DROPOUT_KEEP_H
#define CDL_KERNELS_CUDA_DROPOUT_KEEP_H

#include <stdint.h>

#ifdef __CUDACC__
#define CUK_HOST_DEVICE __host__ __device__
#else
#define CUK_HOST_DEVICE
#endif

static inline CUK_HOST_DEVICE int cuk_dropout_keep(uint64_t seed, uint64_t i, float p)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);   /* [0,1) on 24 bits */
    return u >= p;
}

#endif
