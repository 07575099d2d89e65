/* conv2d ops: pick the direct AVX-512 kernels, the direct AVX2 kernels or
 * im2col+SGEMM per shape (conv2d.h). The choice depends only on the shape
 * and the CPU, so the workspace size, forward and backward always agree. */
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Direct kernels block 6 output channels; past this many, SGEMM's reuse
 * wins. */
#define CONV_DIRECT_MAX_OC 48

/* The AVX2 kernels up to this many input and output channels (the CIFAR
 * ResNet-18's widest; measured faster than im2col+SGEMM from 16 to 512
 * channels at 32 down to 4 pixels), except strided convolutions with
 * outputs narrower than 8 (half-empty vectors lost to SGEMM there). */
#define CONV_AVX2_MAX_C 512

int conv_bwd_chunks(int threads, int n, size_t partial_floats)
{
    int chunks = pool_chunks_for(threads, (size_t)(n > 0 ? n : 0), 1);
    size_t fit = partial_floats ? CONV_PARTIALS_MAX / partial_floats : (size_t)chunks;
    if ((size_t)chunks > fit && chunks > threads)
        chunks = fit > (size_t)threads ? (int)fit : threads < n ? threads : n;
    return chunks;
}

int conv_use_direct(const cdl_conv2d_desc *d)
{
    if (d->oc <= CONV_DIRECT_MAX_OC && conv_direct_supported(d))
        return 1;
    if (!cpu_has_avx512() && d->oc <= CONV_AVX2_MAX_C && d->c <= CONV_AVX2_MAX_C &&
        (d->stride_w == 1 || d->ow >= 8) && conv_avx2_supported(d))
        return 2;
    return 0;
}

size_t cpu_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d)
{
    int t = pool_threads(cpu_pool(be));
    switch (conv_use_direct(d)) {
    case 1: return conv_direct_workspace(d, t);
    case 2: return conv_avx2_workspace(d, t);
    default: return conv_gemm_workspace(d, t);
    }
}

void cpu_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    int path = conv_use_direct(d);
    if (path == 1)
        conv_direct_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 2)
        conv_avx2_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else
        conv_gemm_fwd(cpu_pool(be), d, x, w, b, y, ws);
}

void cpu_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    int path = conv_use_direct(d);
    if (path == 1)
        conv_direct_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else if (path == 2)
        conv_avx2_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else
        conv_gemm_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
}
