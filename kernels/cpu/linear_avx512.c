/* linear.c's products with AVX-512: an 8 x 48 register tile (24 of the 32
 * zmm registers accumulate, three hold B's row, the 8 A values are
 * broadcast from memory into the FMAs: 11 loads per 24 FMAs), 8 x 32 or
 * 8 x 16 for the last columns (none at the GPT's 144, 432 and 576), 4- and
 * 1-row tiles for the last rows. The AVX2 tile (6 x 16, ymm) reaches at
 * most half of an AVX-512 core's FMA throughput; on a Sapphire Rapids core
 * (1 thread, GPT shapes, n = 2048) this one runs at 150-160 GFLOP/s, about
 * 90% of the FMA peak and level with OpenBLAS's SkylakeX SGEMM (12 x 32:
 * 140-150).
 *
 * Bits: every element of a result is its tile row's start (the bias, 0, or
 * what the previous k block stored) plus one FMA per k in order, exactly
 * as in the AVX2 tile; blocks of k store and reload the sum unrounded. So
 * the results equal the AVX2 path's bit for bit whatever the tile shapes,
 * blocks and thread split (test_kernels_linear asserts it).
 *
 * Blocking (bench GPT shapes: n = 2048 rows, K = 144 or 576, 144 to 576
 * columns): the forward and dx run over blocks of L5_RB rows and equal
 * steps of at most L5_KC k, so a block's activations stay in L1 or near it
 * across the column blocks; dw sums the batch in steps of L5_KCW rows
 * (64 ran 2% faster than 128 here, 32 and 256 slower: its x strip and
 * dy's lines share L1).
 */
#include "kernels/cpu/linear_avx512.h"
#include "kernels/cpu/simd.h"

#if CPU_X86
#define L5_RB 48     /* rows per block of the forward and dx */
#define L5_KC 160    /* most k per step of the forward's and dx's sums */
#define L5_KCW 64    /* batch rows per step of dw's sum */

enum { L5_ZERO, L5_LOAD, L5_BIAS };   /* a tile starts from 0, from C, or from the bias */

#define L5_INLINE CPU_AVX512 inline __attribute__((always_inline))

/* C (rows x 16 nv, row stride ldc) = start + sum over k < K of A(r, k) B(k, :),
 * A(r, k) = A[r ars + k acs], B's row k at B + k ldb (its columns 16 v to
 * 16 v + 15 at v bstep further); rows <= 8 and nv (1 to 3) are constants in every caller,
 * so the unused accumulators vanish. */
static L5_INLINE void l5_tile(int rows, int nv, int K, const float *A, size_t ars, size_t acs,
                              const float *B, size_t bstep, size_t ldb, float *C, size_t ldc,
                              int start, const float *bias)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0;
    if (start == L5_BIAS) {
        s0 = _mm512_loadu_ps(bias);
        if (nv > 1)
            s1 = _mm512_loadu_ps(bias + 16);
        if (nv > 2)
            s2 = _mm512_loadu_ps(bias + 32);
    }
#define L5_DECL(r) __m512 c##r##0 = s0, c##r##1 = s1, c##r##2 = s2;
#define L5_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
    L5_ALL(L5_DECL)
#define L5_LD(r)                                              \
    if (rows > r) {                                           \
        c##r##0 = _mm512_loadu_ps(C + r * ldc);               \
        if (nv > 1)                                           \
            c##r##1 = _mm512_loadu_ps(C + r * ldc + 16);      \
        if (nv > 2)                                           \
            c##r##2 = _mm512_loadu_ps(C + r * ldc + 32);      \
    }
    if (start == L5_LOAD) {
        L5_ALL(L5_LD)
    }
#define L5_FMA(r)                                             \
    if (rows > r) {                                           \
        __m512 a = _mm512_set1_ps(ak[r * ars]);               \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);            \
        if (nv > 1)                                           \
            c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);        \
        if (nv > 2)                                           \
            c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);        \
    }
    for (int k = 0; k < K; k++) {
        const float *ak = A + (size_t)k * acs, *bk = B + (size_t)k * ldb;
        __m512 b0 = _mm512_loadu_ps(bk), b1 = b0, b2 = b0;
        if (nv > 1)
            b1 = _mm512_loadu_ps(bk + bstep);
        if (nv > 2)
            b2 = _mm512_loadu_ps(bk + 2 * bstep);
        L5_ALL(L5_FMA)
    }
#define L5_ST(r)                                              \
    if (rows > r) {                                           \
        _mm512_storeu_ps(C + r * ldc, c##r##0);               \
        if (nv > 1)                                           \
            _mm512_storeu_ps(C + r * ldc + 16, c##r##1);      \
        if (nv > 2)                                           \
            _mm512_storeu_ps(C + r * ldc + 32, c##r##2);      \
    }
    L5_ALL(L5_ST)
#undef L5_DECL
#undef L5_ALL
#undef L5_LD
#undef L5_FMA
#undef L5_ST
}

/* The instances: (rows, 16-column vectors) for A rows in memory rows
 * (acs = 1: x in the forward, dy in dx) and A rows in memory columns
 * (ars = 1: dy^T in dw). */
#define L5_ROWS_FN(R, NV)                                                                      \
    static CPU_AVX512 void l5_rows##R##x##NV(int K, const float *A, size_t ars, const float *B, \
                                             size_t bstep, size_t ldb, float *C, size_t ldc,   \
                                             int start, const float *bias)                     \
    {                                                                                          \
        l5_tile(R, NV, K, A, ars, 1, B, bstep, ldb, C, ldc, start, bias);                     \
    }                                                                                          \
    static CPU_AVX512 void l5_cols##R##x##NV(int K, const float *A, size_t acs, const float *B, \
                                             size_t bstep, size_t ldb, float *C, size_t ldc,   \
                                             int start)                                        \
    {                                                                                          \
        l5_tile(R, NV, K, A, 1, acs, B, bstep, ldb, C, ldc, start, NULL);                     \
    }
L5_ROWS_FN(8, 3)
L5_ROWS_FN(8, 2)
L5_ROWS_FN(8, 1)
L5_ROWS_FN(4, 3)
L5_ROWS_FN(4, 2)
L5_ROWS_FN(4, 1)
L5_ROWS_FN(1, 3)
L5_ROWS_FN(1, 2)
L5_ROWS_FN(1, 1)
#undef L5_ROWS_FN

typedef void l5_rows_fn(int, const float *, size_t, const float *, size_t, size_t, float *,
                        size_t, int, const float *);
typedef void l5_cols_fn(int, const float *, size_t, const float *, size_t, size_t, float *,
                        size_t, int);

/* [rows 8, 4, 1][nv - 1] */
static l5_rows_fn *const l5_rows_tab[3][3] = {{l5_rows8x1, l5_rows8x2, l5_rows8x3},
                                              {l5_rows4x1, l5_rows4x2, l5_rows4x3},
                                              {l5_rows1x1, l5_rows1x2, l5_rows1x3}};
static l5_cols_fn *const l5_cols_tab[3][3] = {{l5_cols8x1, l5_cols8x2, l5_cols8x3},
                                              {l5_cols4x1, l5_cols4x2, l5_cols4x3},
                                              {l5_cols1x1, l5_cols1x2, l5_cols1x3}};

/* The tile height for `left` rows still to do: 8, 4 or 1 (index and rows). */
static int l5_height(int left, int *rows)
{
    *rows = left >= LIN512_MR ? LIN512_MR : left >= 4 ? 4 : 1;
    return left >= LIN512_MR ? 0 : left >= 4 ? 1 : 2;
}

/* 16-column vectors of the tile at column j of cols: 3 (48 columns), or the
 * 1 or 2 left. */
static int l5_width(int cols, int j)
{
    return cols - j >= 48 ? 3 : (cols - j) / 16;
}

void lin512_rows(int r0, int r1, int K, const float *A, size_t lda, const float *B, size_t bstep,
                 size_t ldb, float *C, int cols, const float *bias, const lin_epi *ep)
{
    static const float zero[48];
    /* K in equal steps of at most L5_KC (144: one, 576: 4 x 144): a short
     * last step would store and reload every C tile for a few k (steps of
     * 128 made the K = 144 products 2-4% slower). */
    int nkb = (K + L5_KC - 1) / L5_KC, kstep = (K + nkb - 1) / nkb;
    for (int b0 = r0; b0 < r1; b0 += L5_RB) {
        int b1 = r1 - b0 < L5_RB ? r1 : b0 + L5_RB;
        int k0 = 0;
        do {
            int kk = K - k0 < kstep ? K - k0 : kstep;
            int start = k0 ? L5_LOAD : bias ? L5_BIAS : L5_ZERO;
            for (int j = 0; j < cols; j += 48) {
                int nv = l5_width(cols, j);
                const float *Bj = B + (size_t)(j / 16) * bstep + (size_t)k0 * ldb;
                const float *bj = bias ? bias + j : zero;
                const float *a = A + k0;
                for (int r = b0; r < b1;) {
                    int rows, h = l5_height(b1 - r, &rows);
                    l5_rows_tab[h][nv - 1](kk, a + (size_t)r * lda, lda, Bj, bstep, ldb,
                                           C + (size_t)r * cols + j, (size_t)cols, start, bj);
                    r += rows;
                }
            }
            k0 += kk;
        } while (k0 < K);
        if (ep)
            lin_epi_rows(ep, C, cols, b0, b1);
    }
}

void lin512_dw_rows(int o0, int o1, int j0, int j1, int n, int in, int out, const float *dy,
                    const float *x, float *dw)
{
    size_t ldx = (size_t)in, ldy = (size_t)out;
    for (int k0 = 0; k0 < n; k0 += L5_KCW) {
        int kk = n - k0 < L5_KCW ? n - k0 : L5_KCW, start = k0 ? L5_LOAD : L5_ZERO;
        const float *dyk = dy + (size_t)k0 * ldy, *xk = x + (size_t)k0 * ldx;
        for (int j = j0; j < j1; j += 48) {   /* x's strip (kk x 48) stays in L1 */
            int nv = l5_width(j1, j);
            for (int o = o0; o < o1;) {
                int rows, h = l5_height(o1 - o, &rows);
                l5_cols_tab[h][nv - 1](kk, dyk + o, ldy, xk + j, 16, ldx, dw + (size_t)o * ldx + j,
                                       ldx, start);
                o += rows;
            }
        }
    }
}
#endif
