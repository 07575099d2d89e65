/* The Winograd product kernels (conv2d_wino.h) with 16 lanes, for CPUs
 * with full 512-bit units (Intel's AVX-512 cores; conv_wino_wide). F(4x4)
 * spent a third of its time in these products on 8 lanes (perf, 16-64
 * channels, forward, dx and dW); the transforms stay on 8 lanes. Bitwise
 * equal to the 8-lane kernels of conv2d_wino.c: every output sums the
 * same products in the same order (over the input channels for the
 * forward's M, over the tiles for the weight gradient's dU), only more
 * outputs at a time. */
#include "kernels/cpu/conv2d_wino.h"

#if CPU_X86

/* Register blocks of NZ vectors of 16 tiles (the last one only 8 wide when
 * HALF) for NB blocks of WOB output channels (U's packing [ci][WOB] per
 * block, C*WOB floats apart; M's rows ts apart): NB*WOB*NZ accumulators,
 * per input channel NZ loads and NB*WOB broadcasts. */
static inline __attribute__((always_inline)) CPU_AVX512 void
gemm_block(const int NB, const int NZ, const int HALF, const float *ub, const float *vb, float *M,
           int C, int ts)
{
    const __mmask16 last = HALF ? 0x00FF : 0xFFFF;
    __m512 acc[2 * WOB][3];
#pragma GCC unroll 8
    for (int o = 0; o < NB * WOB; o++)
#pragma GCC unroll 3
        for (int z = 0; z < NZ; z++)
            acc[o][z] = _mm512_setzero_ps();
    for (int ci = 0; ci < C; ci++) {
        const float *vr = vb + (size_t)ci * ts;
        __m512 v[3];
#pragma GCC unroll 3
        for (int z = 0; z < NZ; z++)
            v[z] = z == NZ - 1 ? _mm512_maskz_loadu_ps(last, vr + 16 * z) : _mm512_loadu_ps(vr + 16 * z);
#pragma GCC unroll 8
        for (int o = 0; o < NB * WOB; o++) {
            __m512 u = _mm512_set1_ps(ub[(size_t)(o / WOB) * C * WOB + (size_t)ci * WOB + o % WOB]);
#pragma GCC unroll 3
            for (int z = 0; z < NZ; z++)
                acc[o][z] = _mm512_fmadd_ps(v[z], u, acc[o][z]);
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NB * WOB; o++)
#pragma GCC unroll 3
        for (int z = 0; z < NZ; z++) {
            float *mr = M + (size_t)o * ts + 16 * z;
            if (z == NZ - 1)
                _mm512_mask_storeu_ps(mr, last, acc[o][z]);
            else
                _mm512_storeu_ps(mr, acc[o][z]);
        }
}

/* The ngroups groups of NB blocks of output channels: pairs of groups,
 * then a last odd one. */
static inline __attribute__((always_inline)) CPU_AVX512 void
gemm_groups(const int NB, const float *u, const float *V, float *m, int C, int ngroups, int ts)
{
    int g = 0;
    for (; g + 2 <= ngroups; g += 2)
        gemm_block(NB, 3, 0, u, V + (size_t)g * WTG, m + (size_t)g * WTG, C, ts);
    if (g < ngroups)
        gemm_block(NB, 2, 1, u, V + (size_t)g * WTG, m + (size_t)g * WTG, C, ts);
}

/* 8 output channels (two blocks of U) x 2 groups of WTG = 24 tiles (3
 * vectors of 16) at a time: 24 accumulators, per input channel 3 loads
 * and 8 broadcasts feed 24 FMAs, where the 8-lane kernel's 12 cover a
 * quarter of the products. A last odd group as 16 + 8 tiles, a last odd
 * block of output channels with 4. Measured on an Intel AVX-512 core
 * (Xeon, KVM, 2.6 GHz base; FMA peak 58 GMAC/s with 8 lanes, 108 with 16),
 * 1 thread, the 36 positions' products of a block in L2, GMAC/s 8-lane /
 * 16-lane: 16 channels x 4 groups 55 / 78, 32 x 2 57 / 86, 64 x 2 56 /
 * 86, 64 x 4 52 / 78; one group (16 + 8 lanes) 56 / 62 at 64 channels, 51
 * / 57 at 128: hence F(4x4)'s blocks of at least 2 groups on these CPUs
 * (conv2d_wino4.c). 4 output channels x 2 groups (12 accumulators) did 79
 * at 64 x 2. */
CPU_AVX512 void conv_wino_gemm16(const float *ub, const float *V, float *M, int C, int ngroups,
                                 int ts, int nob)
{
    /* Pairs of output-channel blocks, then a last odd one, each its own
     * loop: one loop with a branch per pair measured 3-6 % fewer GMAC/s
     * at 32 and 64 channels x 2 groups (one A/B on the Intel core). */
    const size_t us = (size_t)C * WOB, ms = (size_t)WOB * ts;
    int ob = 0;
    for (; ob + 2 <= nob; ob += 2)
        gemm_groups(2, ub + ob * us, V, M + ob * ms, C, ngroups, ts);
    if (ob < nob)
        gemm_groups(1, ub + ob * us, V, M + ob * ms, C, ngroups, ts);
}

/* part[c][o] += sum over t < nb of V[c][t] dMt[t][o] for NZ vectors of 16
 * output channels (the last one 8 wide when HALF) and NK input channels
 * from c0 (clamped to C - 1: as in the 8-lane kernel, a repeated channel
 * adds into a row past C, below C rounded up to WDC, never read). */
static inline __attribute__((always_inline)) CPU_AVX512 void
dw_block16(const int NZ, const int HALF, const int NK, const float *V, int ts, int C, int c0,
           const float *dmt, int opad, int nb, float *part)
{
    const __mmask16 last = HALF ? 0x00FF : 0xFFFF;
    const float *vr[2 * WDC];
#pragma GCC unroll 12
    for (int k = 0; k < NK; k++)
        vr[k] = V + (size_t)(c0 + k < C ? c0 + k : C - 1) * ts;
    __m512 acc[2][2 * WDC];
#pragma GCC unroll 2
    for (int z = 0; z < NZ; z++)
#pragma GCC unroll 12
        for (int k = 0; k < NK; k++)
            acc[z][k] = _mm512_setzero_ps();
    for (int t = 0; t < nb; t++) {
        __m512 dv[2];
        const float *dr = dmt + (size_t)t * opad;
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++)
            dv[z] = z == NZ - 1 ? _mm512_maskz_loadu_ps(last, dr + 16 * z) : _mm512_loadu_ps(dr + 16 * z);
        /* Keep each tap a broadcast load, as the 8-lane kernel does. */
        size_t to = (size_t)t;
        __asm__("" : "+r"(to));
#pragma GCC unroll 12
        for (int k = 0; k < NK; k++) {
            __m512 xv = _mm512_set1_ps(vr[k][to]);
#pragma GCC unroll 2
            for (int z = 0; z < NZ; z++)
                acc[z][k] = _mm512_fmadd_ps(xv, dv[z], acc[z][k]);
        }
    }
#pragma GCC unroll 2
    for (int z = 0; z < NZ; z++)
#pragma GCC unroll 12
        for (int k = 0; k < NK; k++) {
            float *pp = part + (size_t)(c0 + k) * opad + 16 * z;
            __mmask16 m = z == NZ - 1 ? last : 0xFFFF;
            _mm512_mask_storeu_ps(pp, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, pp), acc[z][k]));
        }
}

/* 32 output channels x WDC input channels per register block (12
 * accumulators). With only 16 output channels (ob8 == 2, resnet20's first
 * stage), 2*WDC input channels where C rounded up to WDC has them, so that
 * 12 chains still fill the FMA units. */
CPU_AVX512 void conv_wino_dw_products16(const float *V, int ts, int C, const float *dmt, int opad,
                                        int ob8, int nb, float *part)
{
    if (ob8 == 2) {
        const int cpad = (C + WDC - 1) / WDC * WDC;
        for (int c0 = 0; c0 < C; c0 += WDC) {
            if (c0 + 2 * WDC <= cpad) {
                dw_block16(1, 0, 2 * WDC, V, ts, C, c0, dmt, opad, nb, part);
                c0 += WDC;
            } else
                dw_block16(1, 0, WDC, V, ts, C, c0, dmt, opad, nb, part);
        }
        return;
    }
    for (int c0 = 0; c0 < C; c0 += WDC) {
        int b0 = 0;
        for (; ob8 - b0 >= 4; b0 += 4)
            dw_block16(2, 0, WDC, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0);
        switch (ob8 - b0) {
        case 3: dw_block16(2, 1, WDC, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0); break;
        case 2: dw_block16(1, 0, WDC, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0); break;
        case 1: dw_block16(1, 1, WDC, V, ts, C, c0, dmt + 8 * b0, opad, nb, part + 8 * b0); break;
        default: break;
        }
    }
}

#endif /* CPU_X86: conv2d_wino.h declares these for x86 alone */
