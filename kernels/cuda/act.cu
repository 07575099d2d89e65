/* Elementwise activations and their gradients over flat float ranges
 * (cdl_act of backend.h): ReLU, GELU (exact erf form, or PyTorch's tanh
 * approximation), SiLU, sigmoid, tanh, leaky ReLU; and the two sums of a
 * graph, add (y = a + b) and accumulate (dst += src).
 *
 * Formulas are PyTorch's (torch.nn.functional), in float, written as the
 * CPU backend writes them (kernels/cpu/act.c), so only the device's
 * transcendental functions (erff, expf, tanhf: a few ulp apart from glibc)
 * and fused multiply-adds separate the two backends. The backward passes
 * read what PyTorch's do: x for GELU, SiLU and leaky ReLU, the forward
 * output y for ReLU, sigmoid and tanh. dx may alias dy (each element is read before it is written); add
 * and accumulate are bit for bit the CPU's.
 */
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define CUK_SQRT1_2 0.70710678118654752440f      /* 1/sqrt(2) */
#define CUK_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */
#define CUK_SQRT_2_PI 0.79788456080286535588f    /* sqrt(2/pi) */
#define CUK_GELU_C 0.044715f

static __device__ __forceinline__ float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static __device__ __forceinline__ float act_fwd1(int kind, float x, float alpha)
{
    switch (kind) {
    case CDL_ACT_RELU:
        return x < 0.0f ? 0.0f : x;
    case CDL_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * CUK_SQRT1_2));
    case CDL_ACT_GELU_TANH: {
        float inner = CUK_SQRT_2_PI * (x + CUK_GELU_C * x * x * x);
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case CDL_ACT_SILU:
        return x * sigmoidf_(x);
    case CDL_ACT_SIGMOID:
        return sigmoidf_(x);
    case CDL_ACT_TANH:
        return tanhf(x);
    default: /* CDL_ACT_LEAKYRELU */
        return x > 0.0f ? x : alpha * x;
    }
}

/* d act / d x times dy, from x (GELU, SiLU, leaky ReLU) or y (sigmoid, tanh). */
static __device__ __forceinline__ float act_bwd1(int kind, float x, float y, float dy,
                                                 float alpha)
{
    switch (kind) {
    case CDL_ACT_RELU:
        return y > 0.0f ? dy : 0.0f;
    case CDL_ACT_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * CUK_SQRT1_2));
        float pdf = CUK_INV_SQRT_2PI * expf(-0.5f * x * x);
        return dy * (cdf + x * pdf);
    }
    case CDL_ACT_GELU_TANH: {
        float x2 = x * x;
        float inner = CUK_SQRT_2_PI * (x + CUK_GELU_C * x2 * x);
        float t = tanhf(inner);
        float left = 0.5f * (1.0f + t);
        float right = 0.5f * x * (1.0f - t * t) * CUK_SQRT_2_PI * (1.0f + 3.0f * CUK_GELU_C * x2);
        return dy * (left + right);
    }
    case CDL_ACT_SILU: {
        float s = sigmoidf_(x);
        return dy * s * (1.0f + x * (1.0f - s));
    }
    case CDL_ACT_SIGMOID:
        return dy * y * (1.0f - y);
    case CDL_ACT_TANH:
        return dy * (1.0f - y * y);
    default: /* CDL_ACT_LEAKYRELU */
        return x > 0.0f ? dy : alpha * dy;
    }
}

static __global__ void act_fwd_kernel(int kind, size_t n, float alpha, const float *x, float *y)
{
    CUK_GRID_STRIDE(i, n)
        y[i] = act_fwd1(kind, x[i], alpha);
}

static __global__ void act_bwd_kernel(int kind, size_t n, float alpha, const float *x,
                                      const float *y, const float *dy, float *dx)
{
    CUK_GRID_STRIDE(i, n) {
        float xi = x ? x[i] : 0.0f, yi = y ? y[i] : 0.0f;
        dx[i] = act_bwd1(kind, xi, yi, dy[i], alpha);
    }
}

static __global__ void add_kernel(size_t n, const float *a, const float *b, float *y)
{
    CUK_GRID_STRIDE(i, n)
        y[i] = a[i] + b[i];
}

static __global__ void accumulate_kernel(size_t n, float *dst, const float *src)
{
    CUK_GRID_STRIDE(i, n)
        dst[i] += src[i];
}

/* Which operand the backward pass of `kind` reads: 'x' or 'y'. */
extern "C" int cuk_act_bwd_reads(int kind)
{
    return kind == CDL_ACT_RELU || kind == CDL_ACT_SIGMOID || kind == CDL_ACT_TANH ? 'y' : 'x';
}

extern "C" cudaError_t cuk_act_fwd(cudaStream_t s, int kind, size_t n, float alpha,
                                   const float *x, float *y)
{
    CUK_LAUNCH(act_fwd_kernel, cuk_blocks(n), CUK_THREADS, s, kind, n, alpha, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_act_bwd(cudaStream_t s, int kind, size_t n, float alpha,
                                   const float *x, const float *y, const float *dy, float *dx)
{
    CUK_LAUNCH(act_bwd_kernel, cuk_blocks(n), CUK_THREADS, s, kind, n, alpha, x, y, dy, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_add(cudaStream_t s, size_t n, const float *a, const float *b, float *y)
{
    CUK_LAUNCH(add_kernel, cuk_blocks(n), CUK_THREADS, s, n, a, b, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_accumulate(cudaStream_t s, size_t n, float *dst, const float *src)
{
    CUK_LAUNCH(accumulate_kernel, cuk_blocks(n), CUK_THREADS, s, n, dst, src);
    return cudaGetLastError();
}
