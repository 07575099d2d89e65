/* Run-time choice of the AVX-512 kernels.
 *
 * libcdl is built for the baseline ISA (no -march), so one binary runs on
 * every x86-64 machine of a cluster. Hot kernels are compiled a second time
 * for AVX-512F through a target attribute and picked at run time when the CPU
 * has it; everything else (and every other architecture) uses the portable
 * C loops or the OpenBLAS paths, which the tests check against the same
 * references.
 */
#ifndef KERNELS_CPU_SIMD_H
#define KERNELS_CPU_SIMD_H

/* No implicit fused multiply-adds in the kernels: several SIMD paths promise
 * the portable loop's bits (AdamW, batch-norm pieces, the fused ops), and a
 * compiler that fuses a separate multiply and add where the target has FMA
 * (clang's default, inside target("fma") functions) breaks that. GCC in
 * ISO C mode never contracts; kernels that want an FMA write one. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_X86 1
#include <immintrin.h>
#define CPU_AVX512 __attribute__((target("avx512f")))

/* 1 when the AVX-512 kernels may run here. CDL_CPU_NO_AVX512=1 in the
 * environment turns them off (to compare paths, or to work around a CPU
 * that throttles on 512-bit code). Cached after the first call. */
int cpu_has_avx512(void);

/* 1 on a CPU that runs 512-bit instructions as two 256-bit halves, so
 * that there the 16-lane kernels do no more work a cycle than the 8-lane
 * ones: AMD's family 19h with AVX-512 (Zen 4; Zen 3, the same family,
 * has no AVX-512). Intel's AVX-512 cores and Zen 5 have full 512-bit
 * units. Read once. */
int cpu_avx512_halves(void);

/* Tests: 1 turns the AVX-512 (and AVX2) kernels off (the portable paths
 * run), 0 goes back to what the CPU supports. Not for use while ops run. */
void cpu_disable_avx512(int off);

/* AVX2 with FMA (every x86-64 CPU since 2013-2015, Zen included): the
 * 8-lane kernels of the elementwise and batch-norm ops. cpu_disable_avx512(1)
 * turns them off too, so the tests' portable run is portable. */
#define CPU_AVX2 __attribute__((target("avx2,fma")))
int cpu_has_avx2(void);

/* Called by an AVX kernel right before it hands its tail to a portable
 * (SSE) function. GCC emits no vzeroupper before a sibling call (a tail
 * call compiled as a jump), so without it the upper halves of the vector
 * registers stay dirty, and every SSE instruction until the next
 * vzeroupper carries a false dependency on them: layer norm's backward ran
 * at half speed that way. tests/unit/avx_upper.sh finds kernels that
 * jump to SSE code without it. */
static CPU_AVX2 inline void cpu_avx_leave(void)
{
    _mm256_zeroupper();
}

/* Sums in double lanes: the 4 lanes of d added up; acc plus the 8 floats
 * of v widened (4+4). */
static CPU_AVX2 inline double cpu_hsum4d(__m256d d)
{
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

static CPU_AVX2 inline __m256d cpu_acc8(__m256d acc, __m256 v)
{
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* acc plus the 8 products a*b, each widened to double before the product. */
static CPU_AVX2 inline __m256d cpu_dot8(__m256d acc, __m256 a, __m256 b)
{
    acc = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                          _mm256_cvtps_pd(_mm256_castps256_ps128(b)), acc);
    return _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                           _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), acc);
}

/* e^x of 8 lanes (act.c, attn.c): x = n ln2 + r (|r| <= ln2/2, ln2 in two
 * parts), e^r by its Taylor series to r^7, times 2^n put into the exponent
 * bits. x is clamped to [-87.3, 88.3] so 2^n stays a normal float (below,
 * the result is under 1.2e-38 instead of smaller still: no use of this op
 * can tell). */
static CPU_AVX2 inline __m256 cpu_exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The 8 x 8 floats at src (row stride lds) transposed into dst (row stride
 * ldd), through registers (attn.c's k^T and v^T panels, linear.c's w^T,
 * conv2d_wino.c's dy^T). */
static CPU_AVX2 inline __attribute__((always_inline)) void
cpu_transpose8(float *dst, size_t ldd, const float *src, size_t lds)
{
    /* Named registers and forced inlining: with arrays and loops GCC -O2
     * called it out of line and kept them on the stack (attention's k^T
     * and v^T packs took 13-14% of its samples that way, 11% like this). */
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds);
    __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
    __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
    __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    r0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    r1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    r2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    r3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    r4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    r5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    r6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    r7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(r0, r4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(r1, r5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(r2, r6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(r3, r7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(r0, r4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(r1, r5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(r2, r6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(r3, r7, 0x31));
}

/* Lanes [0,n) of a 16-lane mask, n in [0,16]. */
static inline __mmask16 cpu_mask16(int n)
{
    return (__mmask16)(n >= 16 ? 0xFFFF : (1u << (n > 0 ? n : 0)) - 1u);
}
#else
#define CPU_X86 0
static inline int cpu_has_avx512(void)
{
    return 0;
}
static inline int cpu_has_avx2(void)
{
    return 0;
}
static inline int cpu_avx512_halves(void)
{
    return 0;
}
static inline void cpu_disable_avx512(int off)
{
    (void)off;
}
#endif

#if CPU_X86
/* cpu_exp8 on 16 lanes: the same operations lane for lane, so the same
 * bits (AVX-512F only: the sign and clamp need no AVX512DQ), except that
 * 2^n is applied by scalef, one instruction instead of four: p 2^n is the
 * same value either way (exact, or rounded once where it is subnormal). */
static CPU_AVX512 inline __m512 cpu_exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
