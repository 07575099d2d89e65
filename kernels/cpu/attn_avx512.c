/* attn.c's per-head products with AVX-512: register tiles of 4 rows x up
 * to 64 columns (4 zmm per row, 16 accumulators), the last vector of a
 * tile read and written through a lane mask (hd = 36: 16 + 16 + 4 lanes).
 * The AVX2 tile is 4 x 24 (ymm); on an AVX-512 core it reaches at most
 * half of the FMA throughput.
 *
 * Bits: the same 4-row tiles as the AVX2 path, so the same k range per row
 * under the mask rules (attn_avx512.h); every element is 0 plus one FMA per
 * k in order, then added to C where acc: the same operations as the AVX2
 * tile's, so the results are bitwise the AVX2 path's (test_kernels_attn).
 */
#include "kernels/cpu/attn_avx512.h"
#include "kernels/cpu/simd.h"

#if CPU_X86
#define A5_INLINE CPU_AVX512 inline __attribute__((always_inline))

/* Vector v of a tile's row (nv vectors, the last through the mask). */
static A5_INLINE __m512 a5_ld(const float *p, int v, int nv, __mmask16 last)
{
    return v == nv - 1 ? _mm512_maskz_loadu_ps(last, p + 16 * v) : _mm512_loadu_ps(p + 16 * v);
}

static A5_INLINE void a5_st(float *p, int v, int nv, __mmask16 last, __m512 x, int acc)
{
    if (acc)
        x = _mm512_add_ps(a5_ld(p, v, nv, last), x);
    if (v == nv - 1)
        _mm512_mask_storeu_ps(p + 16 * v, last, x);
    else
        _mm512_storeu_ps(p + 16 * v, x);
}

/* C (rows x (16 (nv-1) + the lanes of last)) (+)= sum over k in [k0, k1)
 * of A(r, k) B(k, ..), A(r, k) = A[r ars + k acs], B's row k at B + k ldb;
 * rows is 4 or 1, nv 1 to 4 (constants in each caller). */
static A5_INLINE void a5_tile(int rows, int nv, int k0, int k1, const float *A, size_t ars,
                              size_t acs, const float *B, size_t ldb, float *C, size_t ldc,
                              __mmask16 last, int acc)
{
    __m512 z = _mm512_setzero_ps();
#define A5_DECL(r) __m512 c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z;
    A5_DECL(0) A5_DECL(1) A5_DECL(2) A5_DECL(3)
#undef A5_DECL
    for (int k = k0; k < k1; k++) {
        const float *a = A + (size_t)k * acs, *b = B + (size_t)k * ldb;
        __m512 b0 = a5_ld(b, 0, nv, last);
        __m512 b1 = nv > 1 ? a5_ld(b, 1, nv, last) : z;
        __m512 b2 = nv > 2 ? a5_ld(b, 2, nv, last) : z;
        __m512 b3 = nv > 3 ? a5_ld(b, 3, nv, last) : z;
#define A5_ROW(r)                                                  \
        if (rows > r) {                                            \
            __m512 ar = _mm512_set1_ps(a[r * ars]);                \
            c##r##0 = _mm512_fmadd_ps(ar, b0, c##r##0);            \
            if (nv > 1)                                            \
                c##r##1 = _mm512_fmadd_ps(ar, b1, c##r##1);        \
            if (nv > 2)                                            \
                c##r##2 = _mm512_fmadd_ps(ar, b2, c##r##2);        \
            if (nv > 3)                                            \
                c##r##3 = _mm512_fmadd_ps(ar, b3, c##r##3);        \
        }
        A5_ROW(0) A5_ROW(1) A5_ROW(2) A5_ROW(3)
#undef A5_ROW
    }
#define A5_OUT(r)                                                  \
    if (rows > r) {                                                \
        a5_st(C + r * ldc, 0, nv, last, c##r##0, acc);             \
        if (nv > 1)                                                \
            a5_st(C + r * ldc, 1, nv, last, c##r##1, acc);         \
        if (nv > 2)                                                \
            a5_st(C + r * ldc, 2, nv, last, c##r##2, acc);         \
        if (nv > 3)                                                \
            a5_st(C + r * ldc, 3, nv, last, c##r##3, acc);         \
    }
    A5_OUT(0) A5_OUT(1) A5_OUT(2) A5_OUT(3)
#undef A5_OUT
}

/* a5_tile with rows (4 or 1) and nv as constants. */
static CPU_AVX512 void a5_tile_any(int rows, int nv, int k0, int k1, const float *A, size_t ars,
                                   size_t acs, const float *B, size_t ldb, float *C, size_t ldc,
                                   __mmask16 last, int acc)
{
#define A5_CASE(R, NV)                                                          \
    if (rows == R && nv == NV) {                                                \
        a5_tile(R, NV, k0, k1, A, ars, acs, B, ldb, C, ldc, last, acc);         \
        return;                                                                 \
    }
    A5_CASE(4, 4) A5_CASE(4, 3) A5_CASE(4, 2) A5_CASE(4, 1)
    A5_CASE(1, 4) A5_CASE(1, 3) A5_CASE(1, 2) A5_CASE(1, 1)
#undef A5_CASE
}

void attn512_gemm(int M, int N, int K, const float *A, size_t ars, size_t acs, const float *B,
                  size_t ldb, float *C, size_t ldc, int acc, int mask, int off)
{
    for (int r = 0; r < M;) {
        int rows = M - r >= 4 ? 4 : 1;
        int k0 = 0, k1 = K;
        if (mask == ATTN_KEYS && off + r + rows < K)
            k1 = off + r + rows;
        if (mask == ATTN_QUERY && r - off > 0)
            k0 = r - off < K ? r - off : K;
        for (int j = 0; j < N; j += 64) {
            int n = N - j < 64 ? N - j : 64;
            if (mask == ATTN_UPPER) {
                /* Keys up to the tile's last query, in whole vectors; the
                 * rest is left unwritten: the softmax and the dS pass zero it. */
                int need = off + r + rows - j;
                if (need <= 0)
                    break;
                need = (need + 15) / 16 * 16;
                n = n < need ? n : need;
            }
            int nv = (n + 15) / 16;
            a5_tile_any(rows, nv, k0, k1, A + (size_t)r * ars, ars, acs, B + j, ldb,
                        C + (size_t)r * ldc + (size_t)j, ldc, cpu_mask16(n - 16 * (nv - 1)), acc);
        }
        r += rows;
    }
}
#endif
