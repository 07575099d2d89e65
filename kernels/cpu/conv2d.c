/* conv2d ops: pick the direct AVX-512 kernels or im2col+SGEMM per shape
 * (conv2d.h). The choice depends only on the shape and the CPU, so the
 * workspace size, forward and backward always agree. */
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"

/* Direct kernels block 6 output channels; past this many, SGEMM's reuse
 * wins. */
#define CONV_DIRECT_MAX_OC 48

int conv_use_direct(const cdl_conv2d_desc *d)
{
    return d->oc <= CONV_DIRECT_MAX_OC && conv_direct_supported(d);
}

size_t cpu_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d)
{
    int t = pool_threads(cpu_pool(be));
    return conv_use_direct(d) ? conv_direct_workspace(d, t) : conv_gemm_workspace(d, t);
}

void cpu_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    if (conv_use_direct(d))
        conv_direct_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else
        conv_gemm_fwd(cpu_pool(be), d, x, w, b, y, ws);
}

void cpu_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    if (conv_use_direct(d))
        conv_direct_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else
        conv_gemm_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
}
