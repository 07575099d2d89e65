/* Fully connected layer, like torch.nn.Linear: x is (n,in), w is (out,in),
 * b is (out), y is (n,out).
 *
 * Two paths compute the three products y = x w^T + b, dx = dy w and
 * dw = dy^T x:
 *   - OpenBLAS: the forward and dx split the batch rows over the threads
 *     (one single-threaded SGEMM each); dw and db are split over the rows of
 *     dw (or over its columns when out is too small to share): each thread
 *     owns whole elements of dw and sums over the full batch itself, in the
 *     same order every run, so no partial buffers and no reduction are
 *     needed.
 *   - AVX2 (when the output columns of a product are a multiple of 16: the
 *     GPT's 144, 432, 576 and 256): one 6 x 16 register tile of FMAs reading
 *     the activations where they lie. With the GPT's n = 2048 rows and in,
 *     out <= 576, OpenBLAS spends ~10% of its time packing the activations
 *     into panels (every call, for an operand used only a few hundred times)
 *     and zeroing C (beta = 0), and the forward's bias costs a pass of its
 *     own; here only w^T is packed (16 columns wide, in the workspace, out x
 *     in floats), the bias is the tiles' starting value and nothing is
 *     zeroed. Each element of a result is one tile row's sum over k in
 *     order, so its bits do not depend on the thread count or the split.
 *     The sums run in blocks of k (adding to the tile after the first:
 *     LIN_KC batch rows for dw, LIN_KC_ROWS for the others), which keeps
 *     the operands' strips in L1.
 *     Where the CPU has AVX-512 the same products run through
 *     linear_avx512.c (8 x 48 zmm tiles, row groups of LIN512_MR), which
 *     sums every element in the same order: the same bits.
 */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/linear_avx512.h"
#include "kernels/cpu/simd.h"

/* Below this many multiply-adds a GEMM runs on the caller: waking a worker
 * costs more than it saves. */
#define LINEAR_SERIAL_MACS 131072

typedef struct linear_ctx {
    int n, in, out;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    const float *panel; /* AVX2 forward: w^T packed (lin_pack_wt) */
    int dw_by_cols;     /* split dw over its columns (in) instead of rows (out) */
    int parts;          /* chunks of the dw split = active threads */
    int mr;             /* fast paths: rows per tile (LIN_MR, or LIN512_MR with AVX-512) */
    const lin_epi *ep;  /* fast paths: the fused step after the forward's or dx's rows */
} linear_ctx;

/* The elementwise step a fused op makes on a product's finished rows
 * (backend.h: linear_act_fwd, linear_add_fwd, linear_act_bwd,
 * linear_act_grad_fwd, linear_mul_bwd). Rows are
 * whole (cols a multiple of 16 on the fast paths), so the ranges start and
 * end on multiples of 16 floats and cpu_act_*_range gives act_fwd's and
 * act_bwd's bits, and cpu_add_range add's. */
enum { LIN_EPI_ACT_FWD, LIN_EPI_ADD, LIN_EPI_ACT_BWD, LIN_EPI_GRAD_FWD, LIN_EPI_MUL };

struct lin_epi {
    int kind;
    cdl_act act;
    float alpha;
    const float *src;   /* ADD: the residual r; ACT_BWD: the activation's input;
                         * MUL: the kept factor g */
    const float *aux;   /* ACT_BWD: the activation's output (the product's x) */
    float *out;         /* ACT_FWD, GRAD_FWD: act(y) (GRAD_FWD: y becomes g) */
};

void lin_epi_rows(const lin_epi *ep, float *C, int cols, int r0, int r1)
{
    size_t b = (size_t)r0 * (size_t)cols, e = (size_t)r1 * (size_t)cols;
    switch (ep->kind) {
    case LIN_EPI_ACT_FWD:
        cpu_act_fwd_range(ep->act, ep->alpha, C, ep->out, b, e);
        break;
    case LIN_EPI_ADD:
        cpu_add_range(C, ep->src, C, b, e);
        break;
    case LIN_EPI_ACT_BWD:
        cpu_act_bwd_range(ep->act, ep->alpha, ep->src, ep->aux, C, C, b, e);
        break;
    case LIN_EPI_GRAD_FWD:
        cpu_act_grad_fwd_range(ep->act, ep->alpha, C, ep->out, b, e);
        break;
    case LIN_EPI_MUL:
        cpu_act_mul_range(ep->src, C, C, b, e);
        break;
    }
}

static void linear_fwd_rows(void *vctx, size_t r0, size_t r1, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const linear_ctx *c = vctx;
    int rows = (int)(r1 - r0);
    float *y = c->y + r0 * (size_t)c->out;
    /* The bias goes in as C with beta = 1: one write of y before the GEMM
     * instead of OpenBLAS's zeroing pass (beta = 0) and a second pass
     * adding b after it. */
    if (c->b)
        for (int r = 0; r < rows; r++)
            memcpy(y + (size_t)r * c->out, c->b, (size_t)c->out * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, c->out, c->in, 1.0f,
                c->x + r0 * (size_t)c->in, c->in, c->w, c->in, c->b ? 1.0f : 0.0f, y, c->out);
}

/* db[o] for o in [b, e): the sum of column o of dy (n rows of `out`) in row
 * order; the AVX2 path adds 8 columns at a time in the same order, so its
 * bits equal the portable loop's. */
static void linear_db_ref(const linear_ctx *c, size_t b, size_t e)
{
    for (size_t o = b; o < e; o++)
        c->db[o] = 0.0f;
    for (int r = 0; r < c->n; r++) {
        const float *g = c->dy + (size_t)r * c->out;
        for (size_t o = b; o < e; o++)
            c->db[o] += g[o];
    }
}

#if CPU_X86
static CPU_AVX2 void linear_db_avx2(const linear_ctx *c, size_t b, size_t e)
{
    size_t o = b;
    for (; o + 32 <= e; o += 32) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int r = 0; r < c->n; r++) {
            const float *g = c->dy + (size_t)r * c->out + o;
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(g));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(g + 8));
            s2 = _mm256_add_ps(s2, _mm256_loadu_ps(g + 16));
            s3 = _mm256_add_ps(s3, _mm256_loadu_ps(g + 24));
        }
        _mm256_storeu_ps(c->db + o, s0);
        _mm256_storeu_ps(c->db + o + 8, s1);
        _mm256_storeu_ps(c->db + o + 16, s2);
        _mm256_storeu_ps(c->db + o + 24, s3);
    }
    for (; o + 8 <= e; o += 8) {
        __m256 s0 = _mm256_setzero_ps();
        for (int r = 0; r < c->n; r++)
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(c->dy + (size_t)r * c->out + o));
        _mm256_storeu_ps(c->db + o, s0);
    }
    linear_db_ref(c, o, e);
}

/* 64 columns at a time (4 zmm of sums): each column's float sum in row
 * order, as above, so the same bits; the rest through the AVX2 loop. */
static CPU_AVX512 void linear_db_avx512(const linear_ctx *c, size_t b, size_t e)
{
    size_t o = b;
    for (; o + 64 <= e; o += 64) {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int r = 0; r < c->n; r++) {
            const float *g = c->dy + (size_t)r * c->out + o;
            s0 = _mm512_add_ps(s0, _mm512_loadu_ps(g));
            s1 = _mm512_add_ps(s1, _mm512_loadu_ps(g + 16));
            s2 = _mm512_add_ps(s2, _mm512_loadu_ps(g + 32));
            s3 = _mm512_add_ps(s3, _mm512_loadu_ps(g + 48));
        }
        _mm512_storeu_ps(c->db + o, s0);
        _mm512_storeu_ps(c->db + o + 16, s1);
        _mm512_storeu_ps(c->db + o + 32, s2);
        _mm512_storeu_ps(c->db + o + 48, s3);
    }
    linear_db_avx2(c, o, e);
}
#endif

static void linear_db(const linear_ctx *c, size_t b, size_t e)
{
#if CPU_X86
    if (cpu_has_avx512() && cpu_has_avx2()) {
        linear_db_avx512(c, b, e);
        return;
    }
    if (cpu_has_avx2()) {
        linear_db_avx2(c, b, e);
        return;
    }
#endif
    linear_db_ref(c, b, e);
}

static int linear_threads(cdl_backend *be, int n, int in, int out)
{
    double macs = (double)n * in * out;
    int t = pool_threads(cpu_pool(be));
    if (macs < LINEAR_SERIAL_MACS)
        return 1;
    return t;
}

/* ------------------------------------------------------------------ AVX2 path */
#if CPU_X86
#define LIN_MR 6      /* rows of a tile: 12 accumulators of the 16 ymm registers */
#define LIN_NR 16     /* columns of a tile: two ymm */
#define LIN_RB 48     /* rows per block: a block's activations stay in L1 across the panels */
#define LIN_KC 64     /* batch rows per step of dw's sum */
#define LIN_KC_ROWS 192   /* k per step of the forward's and dx's sums */

enum { LIN_ZERO, LIN_LOAD, LIN_BIAS };   /* a tile starts from 0, from C, or from the bias */

/* The AVX2 path for a product with `cols` output columns. */
static int lin_fast(int cols)
{
    return cols > 0 && cols % LIN_NR == 0 && cpu_has_avx2();
}

#define LIN_INLINE CPU_AVX2 inline __attribute__((always_inline))

/* C (rows x 16, row stride ldc) = start + sum over k < K of A(r, k) B(k, 0..15),
 * A(r, k) = A[r ars + k acs], B's row k at B + k ldb; rows <= 6 (a
 * constant in every caller, so the unused accumulators vanish). */
static LIN_INLINE void lin_tile(int rows, int K, const float *A, size_t ars, size_t acs,
                                const float *B, size_t ldb, float *C, size_t ldc, int start,
                                const float *bias)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (start == LIN_BIAS) {
        c00 = _mm256_loadu_ps(bias);
        c01 = _mm256_loadu_ps(bias + 8);
    } else {
        c00 = _mm256_setzero_ps();
        c01 = c00;
    }
    c10 = c20 = c30 = c40 = c50 = c00;
    c11 = c21 = c31 = c41 = c51 = c01;
#define LIN_LD(r)                                          \
    if (rows > r) {                                        \
        c##r##0 = _mm256_loadu_ps(C + r * ldc);            \
        c##r##1 = _mm256_loadu_ps(C + r * ldc + 8);        \
    }
    if (start == LIN_LOAD) {
        LIN_LD(0) LIN_LD(1) LIN_LD(2) LIN_LD(3) LIN_LD(4) LIN_LD(5)
    }
#define LIN_FMA(r)                                         \
    if (rows > r) {                                        \
        __m256 a = _mm256_broadcast_ss(ak + r * ars);      \
        c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);         \
        c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);         \
    }
    for (int k = 0; k < K; k++) {
        const float *ak = A + (size_t)k * acs, *bk = B + (size_t)k * ldb;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        LIN_FMA(0) LIN_FMA(1) LIN_FMA(2) LIN_FMA(3) LIN_FMA(4) LIN_FMA(5)
    }
#define LIN_ST(r)                                          \
    if (rows > r) {                                        \
        _mm256_storeu_ps(C + r * ldc, c##r##0);            \
        _mm256_storeu_ps(C + r * ldc + 8, c##r##1);        \
    }
    LIN_ST(0) LIN_ST(1) LIN_ST(2) LIN_ST(3) LIN_ST(4) LIN_ST(5)
#undef LIN_LD
#undef LIN_FMA
#undef LIN_ST
}

/* Tiles whose A rows are rows of memory (acs = 1: x in the forward, dy in
 * dx) and tiles whose A rows are columns (ars = 1: dy^T in dw). */
static CPU_AVX2 void lin_rows6(int K, const float *A, size_t ars, const float *B, size_t ldb,
                               float *C, size_t ldc, int start, const float *bias)
{
    lin_tile(LIN_MR, K, A, ars, 1, B, ldb, C, ldc, start, bias);
}

static CPU_AVX2 void lin_rows1(int K, const float *A, size_t ars, const float *B, size_t ldb,
                               float *C, size_t ldc, int start, const float *bias)
{
    lin_tile(1, K, A, ars, 1, B, ldb, C, ldc, start, bias);
}

static CPU_AVX2 void lin_cols6(int K, const float *A, size_t acs, const float *B, size_t ldb,
                               float *C, size_t ldc, int start)
{
    lin_tile(LIN_MR, K, A, 1, acs, B, ldb, C, ldc, start, NULL);
}

static CPU_AVX2 void lin_cols1(int K, const float *A, size_t acs, const float *B, size_t ldb,
                               float *C, size_t ldc, int start)
{
    lin_tile(1, K, A, 1, acs, B, ldb, C, ldc, start, NULL);
}

/* C rows [r0, r1) (cols columns, a multiple of 16) = A rows (K long, stride
 * lda) times B, where column block j of B is at B + j * bstep with rows
 * ldb apart; start from the bias (or 0). K runs in steps of LIN_KC_ROWS
 * (the tiles add to C after the first), so a column block's strip of B
 * (LIN_KC_ROWS x 64 bytes) stays in L1 across a block's tiles. */
static void lin_rows(int r0, int r1, int K, const float *A, size_t lda, const float *B,
                     size_t bstep, size_t ldb, float *C, int cols, const float *bias,
                     const lin_epi *ep)
{
    static const float zero[LIN_NR];
    for (int b0 = r0; b0 < r1; b0 += LIN_RB) {
        int b1 = r1 - b0 < LIN_RB ? r1 : b0 + LIN_RB;
        int k0 = 0;
        do {
            int kk = K - k0 < LIN_KC_ROWS ? K - k0 : LIN_KC_ROWS;
            int start = k0 ? LIN_LOAD : bias ? LIN_BIAS : LIN_ZERO;
            for (int j = 0; j < cols; j += LIN_NR) {
                const float *Bj = B + (size_t)(j / LIN_NR) * bstep + (size_t)k0 * ldb;
                const float *bj = bias ? bias + j : zero;
                const float *a = A + k0;
                int r = b0;
                for (; r + LIN_MR <= b1; r += LIN_MR)
                    lin_rows6(kk, a + (size_t)r * lda, lda, Bj, ldb, C + (size_t)r * cols + j,
                              (size_t)cols, start, bj);
                for (; r < b1; r++)
                    lin_rows1(kk, a + (size_t)r * lda, lda, Bj, ldb, C + (size_t)r * cols + j,
                              (size_t)cols, start, bj);
            }
            k0 += kk;
        } while (k0 < K);
        if (ep)
            lin_epi_rows(ep, C, cols, b0, b1);
    }
}

/* w^T packed for the forward: panel j (columns 16j..16j+15 of w^T, i.e.
 * rows of w) is in x 16, panels one after the other; 8 x 8 blocks through
 * registers, the last in % 8 columns one float at a time. Panels [p0, p1). */
static CPU_AVX2 void lin_pack_wt(const float *w, int in, size_t p0, size_t p1, float *panel)
{
    int in8 = in / 8 * 8;
    for (int j = (int)p0 * LIN_NR; j < (int)p1 * LIN_NR; j += LIN_NR) {
        float *p = panel + (size_t)j * in;
        for (int c = 0; c < LIN_NR; c += 8)
            for (int k = 0; k < in8; k += 8)
                cpu_transpose8(p + (size_t)k * LIN_NR + c, LIN_NR, w + (size_t)(j + c) * in + k,
                               (size_t)in);
        for (int k = in8; k < in; k++)
            for (int c = 0; c < LIN_NR; c++)
                p[(size_t)k * LIN_NR + c] = w[(size_t)(j + c) * in + k];
    }
}

typedef struct lin_pack_ctx {
    const float *w;
    int in;
    float *panel;
} lin_pack_ctx;

static void lin_pack_chunk(void *vctx, size_t p0, size_t p1, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const lin_pack_ctx *c = vctx;
    lin_pack_wt(c->w, c->in, p0, p1, c->panel);
}

/* Row groups of mr (a tile's rows): chunks split these, so tiles never
 * straddle chunks. */
static size_t lin_groups(int n, int mr)
{
    return ((size_t)n + (size_t)mr - 1) / (size_t)mr;
}

static void lin_group_rows(int n, int mr, size_t g0, size_t g1, int *r0, int *r1)
{
    *r0 = (int)(g0 * (size_t)mr);
    *r1 = g1 * (size_t)mr < (size_t)n ? (int)(g1 * (size_t)mr) : n;
}

static void lin_fwd_groups(void *vctx, size_t g0, size_t g1, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const linear_ctx *c = vctx;
    int r0, r1;
    lin_group_rows(c->n, c->mr, g0, g1, &r0, &r1);
    if (c->mr == LIN512_MR)
        lin512_rows(r0, r1, c->in, c->x, (size_t)c->in, c->panel, (size_t)LIN_NR * c->in, LIN_NR,
                    c->y, c->out, c->b, c->ep);
    else
        lin_rows(r0, r1, c->in, c->x, (size_t)c->in, c->panel, (size_t)LIN_NR * c->in, LIN_NR,
                 c->y, c->out, c->b, c->ep);
}

/* dw rows [o0, o1), columns [j0, j1) (multiples of 16, or in): dw = dy^T x
 * over the batch in blocks of LIN_KC rows. */
static void lin_dw_rows(const linear_ctx *c, int o0, int o1, int j0, int j1)
{
    size_t in = (size_t)c->in, out = (size_t)c->out;
    for (int k0 = 0; k0 < c->n; k0 += LIN_KC) {
        int kk = c->n - k0 < LIN_KC ? c->n - k0 : LIN_KC, start = k0 ? LIN_LOAD : LIN_ZERO;
        const float *dyk = c->dy + (size_t)k0 * out, *xk = c->x + (size_t)k0 * in;
        for (int j = j0; j < j1; j += LIN_NR)   /* x's strip (4 KB) stays in L1 */
            for (int o = o0; o < o1;) {
                int rows = o1 - o >= LIN_MR ? LIN_MR : 1;
                if (rows == LIN_MR)
                    lin_cols6(kk, dyk + o, out, xk + j, in, c->dw + (size_t)o * in + j, in, start);
                else
                    lin_cols1(kk, dyk + o, out, xk + j, in, c->dw + (size_t)o * in + j, in, start);
                o += rows;
            }
    }
}

/* Part `chunk` of c->parts: its row groups of dx, its row groups of dw
 * (or, with dw_by_cols, its blocks of 16 columns), its columns of db. */
static void lin_bwd_part(void *vctx, size_t p0, size_t p1, int chunk, int tid)
{
    (void)p0;
    (void)p1;
    (void)tid;
    const linear_ctx *c = vctx;
    size_t b, e;
    int r0, r1;
    if (c->dx) {
        pool_chunk(lin_groups(c->n, c->mr), chunk, c->parts, &b, &e);
        lin_group_rows(c->n, c->mr, b, e, &r0, &r1);
        if (c->mr == LIN512_MR)
            lin512_rows(r0, r1, c->out, c->dy, (size_t)c->out, c->w, LIN_NR, (size_t)c->in,
                        c->dx, c->in, NULL, c->ep);
        else
            lin_rows(r0, r1, c->out, c->dy, (size_t)c->out, c->w, LIN_NR, (size_t)c->in, c->dx,
                     c->in, NULL, c->ep);
    }
    int j0 = 0, j1 = c->in;
    if (c->dw_by_cols) {
        r0 = 0, r1 = c->out;
        pool_chunk(lin_groups(c->in, LIN_NR), chunk, c->parts, &b, &e);
        lin_group_rows(c->in, LIN_NR, b, e, &j0, &j1);
    } else {
        pool_chunk(lin_groups(c->out, c->mr), chunk, c->parts, &b, &e);
        lin_group_rows(c->out, c->mr, b, e, &r0, &r1);
    }
    if (c->mr == LIN512_MR)
        lin512_dw_rows(r0, r1, j0, j1, c->n, c->in, c->out, c->dy, c->x, c->dw);
    else
        lin_dw_rows(c, r0, r1, j0, j1);
    if (c->db) {
        pool_chunk((size_t)c->out, chunk, c->parts, &b, &e);
        linear_db(c, b, e);
    }
}
#endif

/* The forward; with ep, only on the fast path (returns 0 where it would
 * take OpenBLAS: the caller runs the two ops then). */
static int linear_fwd_ep(cdl_backend *be, int n, int in, int out, const float *x,
                         const float *w, const float *b, float *y, float *ws, const lin_epi *ep)
{
    if (n <= 0 || out <= 0)
        return 1;
    linear_ctx c = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .y = y, .ep = ep};
    int t = linear_threads(be, n, in, out);
#if CPU_X86
    if (ws && lin_fast(out)) {
        /* The packing split over the threads too (w is in memory: Adam
         * wrote it at the end of the last step), panels of at least 16K floats. */
        lin_pack_ctx pc = {w, in, ws};
        pool_for(cpu_pool(be), (size_t)(out / LIN_NR), (size_t)(1024 / in) + 1, lin_pack_chunk,
                 &pc);
        c.panel = ws;
        c.mr = cpu_has_avx512() ? LIN512_MR : LIN_MR;
        /* POOL_CHUNKS_PER_THREAD chunks per thread, claimed as threads come
         * free: a thread the OS takes away for a while holds back no one. */
        size_t groups = lin_groups(n, c.mr), per = (size_t)t * POOL_CHUNKS_PER_THREAD;
        pool_for(cpu_pool(be), groups, groups > per ? groups / per : 1, lin_fwd_groups, &c);
        return 1;
    }
#endif
    if (ep)
        return 0;
    size_t grain = (size_t)(n + t - 1) / (size_t)t;
    pool_for(cpu_pool(be), (size_t)n, grain, linear_fwd_rows, &c);
    return 1;
}

void cpu_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    linear_fwd_ep(be, n, in, out, x, w, b, y, ws, NULL);
}

/* The product and its activation (kind LIN_EPI_ACT_FWD, or
 * LIN_EPI_GRAD_FWD: y becomes the factor), fused where the fast path runs,
 * else the two ops one after the other. */
static void linear_act_fwd_kind(cdl_backend *be, int kind, int n, int in, int out,
                                const float *x, const float *w, const float *b, cdl_act act,
                                float alpha, float *y, float *ay, float *ws)
{
    lin_epi ep = {.kind = kind, .act = act, .alpha = alpha, .out = ay};
    if (linear_fwd_ep(be, n, in, out, x, w, b, y, ws, &ep))
        return;
    cpu_linear_fwd(be, n, in, out, x, w, b, y, ws);
    if (kind == LIN_EPI_GRAD_FWD)
        cpu_act_grad_fwd(be, act, alpha, (size_t)n * (size_t)out, y, ay);
    else
        cpu_act_fwd(be, act, alpha, (size_t)n * (size_t)out, y, ay);
}

void cpu_linear_act_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *b, cdl_act act, float alpha, float *y,
                        float *ay, float *ws)
{
    linear_act_fwd_kind(be, LIN_EPI_ACT_FWD, n, in, out, x, w, b, act, alpha, y, ay, ws);
}

void cpu_linear_act_grad_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                             const float *w, const float *b, cdl_act act, float alpha, float *g,
                             float *ay, float *ws)
{
    linear_act_fwd_kind(be, LIN_EPI_GRAD_FWD, n, in, out, x, w, b, act, alpha, g, ay, ws);
}

void cpu_linear_add_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *b, const float *r, float *y, float *ws)
{
    lin_epi ep = {.kind = LIN_EPI_ADD, .src = r};
    if (!linear_fwd_ep(be, n, in, out, x, w, b, y, ws, &ep)) {
        cpu_linear_fwd(be, n, in, out, x, w, b, y, ws);
        cpu_add(be, (size_t)n * (size_t)out, y, r, y);
    }
}

/* Part `chunk` of `parts`: its rows of dx, then its slice of dw and db. The
 * parts are chunks of one item each, because the three products split
 * different dimensions. */
static void linear_bwd_part(void *vctx, size_t p0, size_t p1, int chunk, int tid)
{
    (void)p0;
    (void)p1;
    (void)tid;
    const linear_ctx *c = vctx;
    int part = chunk;
    size_t b, e;
    if (c->dx) {
        pool_chunk((size_t)c->n, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(e - b), c->in, c->out,
                        1.0f, c->dy + b * (size_t)c->out, c->out, c->w, c->in, 0.0f,
                        c->dx + b * (size_t)c->in, c->in);
    }
    if (c->dw_by_cols) {
        pool_chunk((size_t)c->in, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->out, (int)(e - b), c->n,
                        1.0f, c->dy, c->out, c->x + b, c->in, 0.0f, c->dw + b, c->in);
    } else {
        pool_chunk((size_t)c->out, part, c->parts, &b, &e);
        if (b < e)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(e - b), c->in, c->n,
                        1.0f, c->dy + b, c->out, c->x, c->in, 0.0f, c->dw + b * (size_t)c->in,
                        c->in);
    }
    if (c->db) {
        pool_chunk((size_t)c->out, part, c->parts, &b, &e);
        linear_db(c, b, e);
    }
}

/* The backward; with ep (dx not NULL), only on the fast path (returns 0
 * where it would take OpenBLAS). */
static int linear_bwd_ep(cdl_backend *be, int n, int in, int out, const float *x,
                         const float *w, const float *dy, float *dx, float *dw, float *db,
                         const lin_epi *ep)
{
    if (out <= 0 || in <= 0)
        return 1;
    if (n <= 0) {
        memset(dw, 0, (size_t)out * in * sizeof *dw);
        if (db)
            memset(db, 0, (size_t)out * sizeof *db);
        return 1;
    }
    int t = linear_threads(be, n, in, out);
    linear_ctx c = {.n = n, .in = in, .out = out, .x = x, .w = w, .dy = dy,
                    .dx = dx, .dw = dw, .db = db, .parts = t, .ep = ep};
#if CPU_X86
    if (lin_fast(in)) {   /* dx and dw both have `in` columns */
        c.mr = cpu_has_avx512() ? LIN512_MR : LIN_MR;
        /* dw split where each part reads less: a part of the rows reads all
         * of x (n x in) and its columns of dy, a part of the columns all of
         * dy (n x out) and its columns of x. x usually comes from memory
         * (the forward wrote it long before): for the GPT's c_proj (in 576,
         * out 144) the column split has each of 2 threads read a 2.4 MB half
         * of x and not all 4.7 MB. The bits do not depend on the split. */
        c.dw_by_cols = t > 1 && in > out;
        pool_run(cpu_pool(be), (size_t)t, t, lin_bwd_part, &c);
        return 1;
    }
#endif
    if (ep)
        return 0;
    /* OpenBLAS's products: dw by columns only where its rows are too few
     * to give every thread a few. */
    c.dw_by_cols = out < 4 * t && in > out;
    pool_run(cpu_pool(be), (size_t)t, t, linear_bwd_part, &c);
    return 1;
}

void cpu_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    (void)ws;
    linear_bwd_ep(be, n, in, out, x, w, dy, dx, dw, db, NULL);
}

void cpu_linear_act_bwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *dy, cdl_act act, float alpha,
                        const float *ax, float *dx, float *dw, float *db, float *ws)
{
    lin_epi ep = {.kind = LIN_EPI_ACT_BWD, .act = act, .alpha = alpha, .src = ax, .aux = x};
    if (!linear_bwd_ep(be, n, in, out, x, w, dy, dx, dw, db, dx ? &ep : NULL)) {
        cpu_linear_bwd(be, n, in, out, x, w, dy, dx, dw, db, ws);
        if (dx)
            cpu_act_bwd(be, act, alpha, (size_t)n * (size_t)in, ax, x, dx, dx);
    }
}

void cpu_linear_mul_bwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                        const float *dy, const float *g, float *dx, float *dw, float *db,
                        float *ws)
{
    lin_epi ep = {.kind = LIN_EPI_MUL, .src = g};
    if (!linear_bwd_ep(be, n, in, out, x, w, dy, dx, dw, db, dx ? &ep : NULL)) {
        cpu_linear_bwd(be, n, in, out, x, w, dy, dx, dw, db, ws);
        if (dx)
            cpu_act_mul(be, (size_t)n * (size_t)in, g, dx, dx);
    }
}

/* The AVX2 forward's packed w^T (out x in) where it may run. */
size_t cpu_linear_workspace(cdl_backend *be, int n, int in, int out)
{
    (void)be;
    (void)n;
    return out > 0 && in > 0 && out % 16 == 0 ? (size_t)out * (size_t)in : 0;
}
