/* The two conv2d implementations behind the ops of conv2d.c, same shapes
 * and semantics as backend.h (x (n,c,h,w), w (oc,c,kh,kw), y (n,oc,oh,ow)):
 *
 *  - conv2d_gemm.c: im2col + single-threaded SGEMM per image tile. Any
 *    shape, any CPU.
 *  - conv2d_direct.c: direct AVX-512 kernels for stride-1 convolutions with
 *    few channels, where GEMM shapes are too thin to run well.
 *
 * Both parallelise over images and reduce per-thread weight-gradient
 * partials in thread order (bitwise reproducible for a thread count). The
 * tests call both paths directly.
 */
#ifndef KERNELS_CPU_CONV2D_H
#define KERNELS_CPU_CONV2D_H

#include <cdl/backend.h>

#include "kernels/cpu/pool.h"

size_t conv_gemm_workspace(const cdl_conv2d_desc *d, int threads);
void conv_gemm_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws);
void conv_gemm_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *dy, float *dx, float *dw, float *db, float *ws);

/* 1 when the direct kernels handle d on this CPU (stride 1, pad < kernel). */
int conv_direct_supported(const cdl_conv2d_desc *d);
size_t conv_direct_workspace(const cdl_conv2d_desc *d, int threads);
void conv_direct_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws);
void conv_direct_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws);

/* Which path the ops take for d: 1 = direct. */
int conv_use_direct(const cdl_conv2d_desc *d);

#endif
