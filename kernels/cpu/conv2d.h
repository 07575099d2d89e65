/* The two conv2d implementations behind the ops of conv2d.c, same shapes
 * and semantics as backend.h (x (n,c,h,w), w (oc,c,kh,kw), y (n,oc,oh,ow)):
 *
 *  - conv2d_gemm.c: im2col + single-threaded SGEMM per image tile. Any
 *    shape, any CPU.
 *  - conv2d_direct.c: direct AVX-512 kernels for stride-1 convolutions with
 *    few channels, where GEMM shapes are too thin to run well.
 *  - conv2d_avx2.c: direct AVX2 kernels (stride 1 and 2, equal padding);
 *    conv2d_avx512.c: their 16-lane AVX-512 twin (the same block kernels
 *    from conv2d_avx_tmpl.h, bitwise the same results), which AVX-512
 *    CPUs take instead.
 *  - conv2d_wino.c: Winograd F(2x2,3x3) with AVX2 for 3x3 stride-1 pad-1
 *    convolutions, forward, dx and dW, where it beats conv2d_avx2.c
 *    (conv_use_wino); conv2d_wino4.c: F(4x4,3x3), forward and dx.
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

/* Depthwise convolutions (conv2d_dw.c: groups = c > 1, any channel
 * multiplier, kernel, stride, padding, dilation), plain loops on any CPU.
 * dW and db do not depend on the thread count. */
#define CONV_DW_MAX_TAPS 1024   /* kh*kw; larger kernels take im2col+SGEMM */
#define CONV_DW_MAX_PHASES 16   /* stride_h*stride_w; larger strides too */
int conv_dw_supported(const cdl_conv2d_desc *d);
size_t conv_dw_workspace(const cdl_conv2d_desc *d, int threads);
/* The plain loops the fast forward is tested against (same bits). */
void conv_dw_ref_fwd(const cdl_conv2d_desc *d, const float *x, const float *w, const float *b,
                     float *y);
void conv_dw_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                 const float *b, float *y, float *ws);
void conv_dw_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                 const float *dy, float *dx, float *dw, float *db, float *ws);

/* 1 when the direct kernels handle d on this CPU (stride 1, pad < kernel). */
int conv_direct_supported(const cdl_conv2d_desc *d);
size_t conv_direct_workspace(const cdl_conv2d_desc *d, int threads);
void conv_direct_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws);
void conv_direct_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws);

/* 1 when the AVX2 kernels handle d on this CPU. */
int conv_avx2_supported(const cdl_conv2d_desc *d);
size_t conv_avx2_workspace(const cdl_conv2d_desc *d, int threads);
void conv_avx2_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws);
void conv_avx2_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *dy, float *dx, float *dw, float *db, float *ws);

/* The same kernels with 16 lanes on AVX-512 CPUs (conv2d_avx512.c): the
 * shapes of conv_avx2_supported, bitwise the same results. */
int conv_avx512_supported(const cdl_conv2d_desc *d);
size_t conv_avx512_workspace(const cdl_conv2d_desc *d, int threads);
void conv_avx512_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws);
void conv_avx512_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws);

/* 1 when the Winograd kernels handle d on this CPU (3x3, stride 1, pad 1,
 * no dilation or groups, AVX2). dx is the forward on dy with the kernel
 * flipped and its channel axes swapped; no partial sums, so the results do
 * not depend on the thread count. */
int conv_wino_supported(const cdl_conv2d_desc *d);
size_t conv_wino_workspace(const cdl_conv2d_desc *d, int threads);
void conv_wino_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws);
void conv_wino_dx(pool *p, const cdl_conv2d_desc *d, const float *w, const float *dy, float *dx,
                  float *ws);
/* dw (and db when not NULL) by Winograd: per-chunk partials summed in chunk
 * order, reproducible for a thread count. */
void conv_wino_dw(pool *p, const cdl_conv2d_desc *d, const float *x, const float *dy, float *dw,
                  float *db, float *ws);

/* Winograd F(4x4,3x3) (conv2d_wino4.c), forward, dx and dW, for the shapes of
 * conv_wino_supported: fewer multiply-adds and transformed values per
 * output than F(2x2), larger rounding errors (see the file). */
size_t conv_wino4_workspace(const cdl_conv2d_desc *d, int threads);
void conv_wino4_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *b, float *y, float *ws);
void conv_wino4_dx(pool *p, const cdl_conv2d_desc *d, const float *w, const float *dy, float *dx,
                   float *ws);
/* dw (and db when not NULL): per-chunk partials summed in chunk order,
 * reproducible for a thread count. */
void conv_wino4_dw(pool *p, const cdl_conv2d_desc *d, const float *x, const float *dy, float *dw,
                   float *db, float *ws);

/* Chunks of images for a backward pass whose per-chunk weight-gradient
 * partial is partial_floats: POOL_CHUNKS_PER_THREAD per thread, fewer when
 * the partials would pass CONV_PARTIALS_MAX floats (but never fewer than
 * one per thread). */
#define CONV_PARTIALS_MAX ((size_t)32 << 20)
int conv_bwd_chunks(int threads, int n, size_t partial_floats);

/* Which path the ops take for d: 1 = direct (AVX-512, conv2d_direct.c), 2 =
 * AVX2, 3 = the AVX2 kernels' 16-lane twin (AVX-512), 0 = im2col+SGEMM. */
int conv_use_direct(const cdl_conv2d_desc *d);

/* Whether the ops take the Winograd kernels for d: CONV_WINO_FWD for the
 * forward, CONV_WINO_DX for dx, CONV_WINO_DW for dw and db (bits; the
 * rest stays on conv_use_direct's path); with fast (the backend's
 * fast_conv) CONV_WINO_F4 and CONV_WINO_DW4 where F(4x4) pays.
 * CDL_CPU_NO_WINOGRAD=1 in the environment turns them all off (read
 * once), as does cpu_disable_avx512(1). */
#define CONV_WINO_FWD 1
#define CONV_WINO_DX 2
#define CONV_WINO_DW 4
#define CONV_WINO_F4 8    /* the forward and dx by F(4x4) instead of F(2x2) */
#define CONV_WINO_DW4 16  /* dw and db by F(4x4) (with CONV_WINO_DW) */
int conv_use_wino(const cdl_conv2d_desc *d, int fast);

#endif
