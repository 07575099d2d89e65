/* The block kernels of the direct convolution (conv2d_avx2.c) with 16
 * lanes for AVX-512 CPUs: the template conv2d_avx_tmpl.h with zmm vectors,
 * masked stores for row tails (loads stay unmasked, as with 8 lanes: the
 * padded buffers have 16 floats of zeroed slack). 32 registers allow
 * larger blocks than AVX2's (conv2d_avx.h). Bitwise equal to the 8-lane
 * kernels: every output sums the same products in the same order. */
#include "kernels/cpu/conv2d_avx.h"
#include "kernels/cpu/simd.h"

#if CPU_X86

/* Lanes 0-7 from a, 8-15 from b (AVX-512F only: no 256-bit float insert
 * without DQ, the double one moves the same bits). */
static inline __attribute__((always_inline)) CPU_AVX512 __m512 load_halves(const float *a,
                                                                         const float *b)
{
    __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a)));
    return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

/* Lanes 8 to 8+n-1 of v to p[0, n). */
static inline __attribute__((always_inline)) CPU_AVX512 void store_hi(float *p, __m512 v, int n)
{
    __m512d hi = _mm512_castpd256_pd512(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    _mm512_mask_storeu_ps(p, cpu_mask16(n), _mm512_castpd_ps(hi));
}

#define CV_L 16
#define CV_OB CONV_OB16
#define CV_SB CONV_SB16
#define CV_DB CONV_DB16
#define CV_DT CONV_DT16
#define CV_DT1 CONV_DT1_16
#define CV_TARGET CPU_AVX512
#define CV_VEC __m512
#define CV_LOAD(p) _mm512_loadu_ps(p)
#define CV_STORE(p, v) _mm512_storeu_ps(p, v)
#define CV_STORE_N(p, v, n) _mm512_mask_storeu_ps(p, cpu_mask16(n), v)
#define CV_SET1(x) _mm512_set1_ps(x)
#define CV_ZERO() _mm512_setzero_ps()
#define CV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define CV_ADD(a, b) _mm512_add_ps(a, b)
#define CV_LOAD2(a, b) load_halves(a, b)
#define CV_STORE_HI(p, v, n) store_hi(p, v, n)
#define CV_CORR conv_corr16
#define CV_DWT conv_dwt16
#include "kernels/cpu/conv2d_avx_tmpl.h"

#else /* no x86: conv_avx512_supported() is 0 and these are never called */

void conv_corr16(int O, const float *in, const int32_t *toff, int K, int rowlen, int s,
                 const float *wt, const float *bias, float *out, int ho, int wo)
{
    (void)O, (void)in, (void)toff, (void)K, (void)rowlen, (void)s, (void)wt, (void)bias;
    (void)out, (void)ho, (void)wo;
}

void conv_dwt16(int nblk, const float *in, int ystride, int ho, int wo, const int32_t *toff, int K,
                int Kpad, const float *dyt, float *part)
{
    (void)nblk, (void)in, (void)ystride, (void)ho, (void)wo, (void)toff, (void)K, (void)Kpad;
    (void)dyt, (void)part;
}
#endif
