/* The block kernels of the direct convolution of conv2d_avx2.c, compiled
 * from one template (conv2d_avx_tmpl.h) for 8 lanes with AVX2
 * (conv2d_avx2.c) and 16 lanes with AVX-512 (conv2d_avx512.c), and their
 * block sizes, which the plan of conv2d_avx2.c packs weights and sizes
 * buffers for. Both widths give the same bits (same taps, same order, one
 * FMA each).
 *
 * corr: out (O, ho, wo) = bias + correlation with stride s of `in` (padded
 * row stride rowlen, tap offsets toff) with one block's weights wt
 * [K][OB]; O <= OB.
 * dwt: one image's dW partial for nblk blocks of L output channels from dy
 * transposed to dyt [nblk][oh*ow][L]: part [nblk][Kpad][L] +=.
 */
#ifndef KERNELS_CPU_CONV2D_AVX_H
#define KERNELS_CPU_CONV2D_AVX_H

#include <stdint.h>

/* 8 lanes, 16 ymm: OB x SB = 12 corr accumulators (+ 3 inputs + 1
 * broadcast), DB x DT = 12 dwt accumulators (+ 2 dy + 1 broadcast). */
#define CONV_OB8 4
#define CONV_SB8 3
#define CONV_DB8 2
#define CONV_DT8 6
#define CONV_DT1_8 6
#define CONV_DTPAD8 6

/* 16 lanes, 32 zmm: OB x SB = 24 corr accumulators (+ 4 inputs + 1
 * broadcast; 4 x 4 measured 2-8% slower forward per call at 16-64
 * channels, within the noise of a shared machine), DB x DT = 16 dwt
 * accumulators (+ 2 dy + 1 broadcast); a
 * single lane block (16 output channels) DT1 = 12 taps. More taps per
 * block run out of general registers for their pointers (measured: DB x
 * DT = 2 x 12 took 10-15% longer than 2 x 8 at 32 and 64 channels; 1 x 8
 * 25% longer than 1 x 12 at 16). */
#define CONV_OB16 6
#define CONV_SB16 4
#define CONV_DB16 2
#define CONV_DT16 8
#define CONV_DT1_16 12
#define CONV_DTPAD16 24   /* a multiple of both */

void conv_corr8(int O, const float *in, const int32_t *toff, int K, int rowlen, int s,
                const float *wt, const float *bias, float *out, int ho, int wo);
void conv_dwt8(int nblk, const float *in, int ystride, int ho, int wo, const int32_t *toff, int K,
               int Kpad, const float *dyt, float *part);
void conv_corr16(int O, const float *in, const int32_t *toff, int K, int rowlen, int s,
                 const float *wt, const float *bias, float *out, int ho, int wo);
void conv_dwt16(int nblk, const float *in, int ystride, int ho, int wo, const int32_t *toff, int K,
                int Kpad, const float *dyt, float *part);

#endif
