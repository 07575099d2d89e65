/* The Winograd F(2x2,3x3) convolution (kernels/cpu/conv2d_wino.c) and
 * F(4x4,3x3) (conv2d_wino4.c) against the double-precision reference:
 * forward (with and without bias), dx, dw and db; on the CIFAR
 * ResNets' 3x3 stride-1 shapes (16/32/64 channels at 32/16/8 pixels), odd
 * channel counts and odd or tiny images (F(2x2): 7 and 8 pixels wide, two
 * rows of 4 tiles per vector; F(4x4): 16, 8 and 4 pixels wide, 2, 4 and 8
 * tile rows per vector, across images and bands; widths not a multiple of
 * 4), one image and several
 * (blocks of several images, bands of one image, a last block with fewer
 * images); forward and dx bitwise equal on 1 and 2 threads (no sums across
 * blocks), dw and db bitwise equal for the same thread count; workspaces
 * allocated at exactly the planned size and poisoned (NaN for one forward:
 * a lane past a block's tiles that reached y would show), so the
 * sanitizers and valgrind see any read past them or of stale values;
 * which shapes the CPU backend sends this way, and that its fast_conv
 * setting picks F(4x4); on CPUs with full 512-bit units, the 16-lane
 * product kernels bitwise equal to the 8-lane ones (called directly, and
 * through whole convolutions). Skipped on CPUs without
 * AVX2. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_wino.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"
#include "avx512_testutil.h"
#include "kernel_testutil.h"
#include "ref_ops.h"

/* F(4x4)'s normalised error measured 0.3-2.4e-6 on the cases below (3-128
 * channels; the worst, 2.4e-6, at 64 channels, 2.3e-6 at 128), 5-30x
 * F(2x2)'s (conv2d_wino4.c says why), and its dW's 0.2-2.1e-6: twice the
 * worst. The points 0, +-1, +-2 it used before measured 2-6e-6 at 16-64
 * channels and 1e-5 at 128, and fail this bound. */
#define WINO4_TOL 5e-6

typedef struct wcase {
    int n, c, h, w, oc;
} wcase;

static const wcase cases[] = {
    {3, 16, 32, 32, 16},  /* resnet20 stage 1: bands of tile rows */
    {2, 32, 16, 16, 32},  /* stage 2 */
    {5, 64, 8, 8, 64},    /* stage 3: several images per block */
    {1, 16, 16, 16, 32},  /* channels up (oc tails of the dx) */
    {2, 3, 32, 32, 16},   /* the stem: 3 input channels */
    {3, 5, 13, 11, 7},    /* odd sizes: half tiles at the edges, oc tail */
    {2, 17, 9, 20, 9},    /* odd height, even width past one vector */
    {4, 8, 1, 1, 3},      /* one pixel */
    {3, 6, 2, 3, 5},      /* tiny */
    {1, 128, 4, 4, 72},   /* resnet18's small images, wide channels */
    {3, 9, 7, 7, 10},     /* 4-tile rows (two per vector), odd height */
    {2, 6, 10, 8, 7},     /* 4-tile rows, an odd count of them */
    {1, 8, 70, 7, 8},     /* 4-tile rows in bands, the last band of 3 */
    {1, 16, 44, 44, 16},  /* F(4x4): bands of 7 rows of 11 tiles, the last of 4 */
    {1, 40, 72, 8, 36},   /* F(4x4): bands of 2-tile rows, the last of 2 */
    {2, 16, 14, 14, 16},  /* MNIST's stage 2: F(4x4) 4-tile rows, the last tile half */
    {2, 7, 10, 12, 20},   /* dW: 3 blocks of 8 output channels (16 lanes + 8) */
};
#define N_CASES (sizeof cases / sizeof cases[0])

typedef struct result {
    float *y, *y0, *dx, *dw, *db;
    float *y4, *y40, *dx4, *dw4, *db4;   /* F(4x4) */
} result;

typedef void (*fwd_fn)(pool *, const cdl_conv2d_desc *, const float *, const float *,
                       const float *, float *, float *);
typedef void (*dx_fn)(pool *, const cdl_conv2d_desc *, const float *, const float *, float *,
                      float *);

/* Forward with bias into y, without into y0, and dx, by f and g with a
 * workspace of nws floats (returned, for more calls) and outputs full of
 * garbage first. */
static float *fwd_dx(pool *pl, const cdl_conv2d_desc *d, size_t nws, fwd_fn f, dx_fn g,
                     const pair *x, const pair *w, const pair *b, const pair *dy, float *y,
                     float *y0, float *dx)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->oc * d->oh * d->ow;
    float *ws = cdl_malloc(nws * sizeof *ws);
    assert_non_null(ws);
    memset(y, 0xff, ny * 4);    /* NaN */
    memset(y0, 0xff, ny * 4);
    memset(dx, 0xff, nx * 4);
    memset(ws, 0x7f, nws * sizeof *ws);
    f(pl, d, x->f, w->f, b->f, y, ws);
    memset(ws, 0xff, nws * sizeof *ws);
    f(pl, d, x->f, w->f, NULL, y0, ws);
    memset(ws, 0x7f, nws * sizeof *ws);
    g(pl, d, w->f, dy->f, dx, ws);
    return ws;
}

/* F(2x2) and F(4x4) forward with and without bias, dx, dw and db, on
 * `threads` threads. */
static result run_wino(const cdl_conv2d_desc *d, int threads, const pair *x, const pair *w,
                       const pair *b, const pair *dy)
{
    pool *pl = pool_create(threads);
    assert_non_null(pl);
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->oc * d->oh * d->ow;
    size_t nws = conv_wino_workspace(d, threads);
    size_t nw = (size_t)d->oc * d->c * 9;
    result r = {cdl_malloc(ny * 4), cdl_malloc(ny * 4), cdl_malloc(nx * 4), cdl_malloc(nw * 4),
                cdl_malloc((size_t)d->oc * 4), cdl_malloc(ny * 4), cdl_malloc(ny * 4),
                cdl_malloc(nx * 4), cdl_malloc(nw * 4), cdl_malloc((size_t)d->oc * 4)};
    float *ws = fwd_dx(pl, d, nws, conv_wino_fwd, conv_wino_dx, x, w, b, dy, r.y, r.y0, r.dx);
    memset(r.dw, 0xff, nw * 4);
    memset(r.db, 0xff, (size_t)d->oc * 4);
    memset(ws, 0x7f, nws * sizeof *ws);
    conv_wino_dw(pl, d, x->f, dy->f, r.dw, r.db, ws);
    cdl_free(ws);
    nws = conv_wino4_workspace(d, threads);
    ws = fwd_dx(pl, d, nws, conv_wino4_fwd, conv_wino4_dx, x, w, b, dy, r.y4, r.y40, r.dx4);
    memset(r.dw4, 0xff, nw * 4);
    memset(r.db4, 0xff, (size_t)d->oc * 4);
    memset(ws, 0x7f, nws * sizeof *ws);
    conv_wino4_dw(pl, d, x->f, dy->f, r.dw4, r.db4, ws);
    cdl_free(ws);
    pool_destroy(pl);
    return r;
}

static void result_free(result *r)
{
    cdl_free(r->y);
    cdl_free(r->y0);
    cdl_free(r->dx);
    cdl_free(r->dw);
    cdl_free(r->db);
    cdl_free(r->y4);
    cdl_free(r->y40);
    cdl_free(r->dx4);
    cdl_free(r->dw4);
    cdl_free(r->db4);
}

/* Every output of a and b but F(4x4)'s dw and db bitwise equal. */
static void check_same_result(const result *a, const result *b, const cdl_conv2d_desc *d)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->oc * d->c * 9;
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow, no = (size_t)d->oc;
    const float *pa[] = {a->y, a->y0, a->dx, a->dw, a->db, a->y4, a->y40, a->dx4};
    const float *pb[] = {b->y, b->y0, b->dx, b->dw, b->db, b->y4, b->y40, b->dx4};
    const size_t len[] = {ny, ny, nx, nw, no, ny, ny, nx};
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++)
        assert_memory_equal(pa[i], pb[i], len[i] * sizeof(float));
}

static void test_wino_matches_reference(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_CASES; k++) {
        const wcase *a = &cases[k];
        cdl_conv2d_desc d = ref_conv_desc(a->n, a->c, a->h, a->w, a->oc, 3, 3, 1, 1);
        assert_true(conv_wino_supported(&d));
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * 9;
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        pair x = pair_rand(nx, 81 + k, -1, 1), w = pair_rand(nw, 82 + k, -1, 1);
        pair b = pair_rand(d.oc, 83 + k, -1, 1), dy = pair_rand(ny, 84 + k, -1, 1);
        pair y = pair_new(ny), y0 = pair_new(ny), dx = pair_new(nx), dw = pair_new(nw);
        pair db = pair_new(d.oc);
        ref_conv2d_fwd(&d, x.d, w.d, b.d, y.d);
        ref_conv2d_fwd(&d, x.d, w.d, NULL, y0.d);
        ref_conv2d_bwd(&d, x.d, w.d, dy.d, dx.d, dw.d, db.d);
        result r1 = run_wino(&d, 1, &x, &w, &b, &dy);
        result r2 = run_wino(&d, 2, &x, &w, &b, &dy);
        result r2b = run_wino(&d, 2, &x, &w, &b, &dy);
        if (conv_wino_wide()) {
            /* The 16-lane product kernels: the same bits as the 8-lane
             * ones, for every output of F(2x2) and F(4x4)'s forward and
             * dx (F(4x4)'s weight gradient cuts its blocks for the
             * 16-lane width, and sums per block). */
            test_avx2_only(1);
            result r8 = run_wino(&d, 2, &x, &w, &b, &dy);
            test_avx2_only(0);
            check_same_result(&r2, &r8, &d);
            result_free(&r8);
        }
        print_message("case %zu (n=%d c=%d %dx%d oc=%d): y %.2g, dx %.2g, dw %.2g\n", k, d.n, d.c,
                      d.h, d.w, d.oc, test_norm_err(r1.y, y.d, ny), test_norm_err(r1.dx, dx.d, nx),
                      test_norm_err(r1.dw, dw.d, nw));
        check_close("wino y", r1.y, y.d, ny, 1e-5);
        check_close("wino y (no bias)", r1.y0, y0.d, ny, 1e-5);
        check_close("wino dx", r1.dx, dx.d, nx, 1e-5);
        print_message("   F(4x4): y %.2g, dx %.2g, dw %.2g\n", test_norm_err(r1.y4, y.d, ny),
                      test_norm_err(r1.dx4, dx.d, nx), test_norm_err(r1.dw4, dw.d, nw));
        check_close("wino4 y", r1.y4, y.d, ny, WINO4_TOL);
        check_close("wino4 y (no bias)", r1.y40, y0.d, ny, WINO4_TOL);
        check_close("wino4 dx", r1.dx4, dx.d, nx, WINO4_TOL);
        const result *rs[] = {&r1, &r2};
        for (int i = 0; i < 2; i++) {
            check_close("wino dw", rs[i]->dw, dw.d, nw, 1e-5);
            check_close("wino db", rs[i]->db, db.d, (size_t)d.oc, 1e-5);
            check_close("wino4 dw", rs[i]->dw4, dw.d, nw, WINO4_TOL);
            check_close("wino4 db", rs[i]->db4, db.d, (size_t)d.oc, 1e-5);
        }
        /* dw and db: partials per chunk, so the same bits for a thread
         * count. */
        assert_memory_equal(r2.dw, r2b.dw, nw * sizeof(float));
        assert_memory_equal(r2.db, r2b.db, (size_t)d.oc * sizeof(float));
        assert_memory_equal(r2.dw4, r2b.dw4, nw * sizeof(float));
        assert_memory_equal(r2.db4, r2b.db4, (size_t)d.oc * sizeof(float));
        /* No sums across blocks: the thread count changes no bit. */
        assert_memory_equal(r1.y, r2.y, ny * sizeof(float));
        assert_memory_equal(r1.y0, r2.y0, ny * sizeof(float));
        assert_memory_equal(r1.dx, r2.dx, nx * sizeof(float));
        assert_memory_equal(r1.y4, r2.y4, ny * sizeof(float));
        assert_memory_equal(r1.dx4, r2.dx4, nx * sizeof(float));
        result_free(&r1);
        result_free(&r2);
        result_free(&r2b);
        pair *all[] = {&x, &w, &b, &dy, &y, &y0, &dx, &dw, &db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            pair_free(all[i]);
    }
}

/* Which convolutions the Winograd kernels take, and the environment and
 * SIMD switches. */
/* The AVX2 kernels' choices (CPUs without AVX-512, or CDL_CPU_NO_AVX512):
 * resnet20's stages take F(2x2) forward, dx and weight gradient from 24
 * channels; stage 1's weight gradient (16 channels) and the stem stay
 * direct, as do maps under 8 pixels with F(2x2) (measured faster there).
 * With fast (a backend with fast_conv) F(4x4) takes the forward and dx
 * from 16 channels on maps of 8 pixels and more, and the weight gradient
 * too up to 256 channels. */
static void check_avx2_dispatch(int fast)
{
    const int all = CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_DW;
    const int f4 = fast ? CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_F4 : 0;
    const int f4dw = fast ? f4 | CONV_WINO_DW | CONV_WINO_DW4 : 0;
    cdl_conv2d_desc st2 = ref_conv_desc(2, 32, 16, 16, 32, 3, 3, 1, 1);
    cdl_conv2d_desc st1 = ref_conv_desc(2, 16, 32, 32, 16, 3, 3, 1, 1);
    cdl_conv2d_desc r18 = ref_conv_desc(128, 512, 4, 4, 512, 3, 3, 1, 1);
    cdl_conv2d_desc st3b2 = ref_conv_desc(2, 64, 8, 8, 64, 3, 3, 1, 1);
    /* 24 channels: F(2x2) measured 12-18% faster than the direct kernels
     * (8x24x32x32 and 8x24x16x16); 20 a tie, 16 and 16->64 slower. */
    cdl_conv2d_desc c24 = ref_conv_desc(8, 24, 16, 16, 24, 3, 3, 1, 1);
    cdl_conv2d_desc c20 = ref_conv_desc(8, 20, 16, 16, 20, 3, 3, 1, 1);
    cdl_conv2d_desc c16to64 = ref_conv_desc(8, 16, 16, 16, 64, 3, 3, 1, 1);
    /* F(4x4)'s weight gradient up to 256 channels; at 512 F(2x2)'s. */
    cdl_conv2d_desc c256 = ref_conv_desc(8, 256, 8, 8, 256, 3, 3, 1, 1);
    cdl_conv2d_desc c512 = ref_conv_desc(8, 512, 8, 8, 512, 3, 3, 1, 1);
    assert_int_equal(conv_use_direct(&st2), 2);
    assert_int_equal(conv_use_wino(&st2, fast), all | f4dw);
    assert_int_equal(conv_use_wino(&st1, fast), f4dw);
    assert_int_equal(conv_use_wino(&r18, fast), all);
    assert_int_equal(conv_use_wino(&st3b2, fast), 0);
    assert_int_equal(conv_use_wino(&c24, fast), all | f4dw);
    assert_int_equal(conv_use_wino(&c20, fast), f4dw);
    assert_int_equal(conv_use_wino(&c16to64, fast), f4dw);
    assert_int_equal(conv_use_wino(&c256, fast), all | f4dw);
    assert_int_equal(conv_use_wino(&c512, fast), all | f4);
}

/* conv_use_wino's answer for d where fast_conv must not change it
 * (strided, 1x1, few pixels or channels, the 16-lane path). */
static int wino_any(const cdl_conv2d_desc *d)
{
    int exact = conv_use_wino(d, 0);
    assert_int_equal(conv_use_wino(d, 1), exact);
    return exact;
}

static void test_wino_dispatch(void **state)
{
    (void)state;
    cdl_conv2d_desc s2 = ref_conv_desc(2, 16, 32, 32, 32, 3, 3, 2, 1);
    cdl_conv2d_desc k1 = ref_conv_desc(2, 16, 32, 32, 32, 1, 1, 1, 0);
    cdl_conv2d_desc p0 = ref_conv_desc(2, 16, 32, 32, 32, 3, 3, 1, 0);
    assert_false(conv_wino_supported(&s2));
    assert_false(conv_wino_supported(&k1));
    assert_false(conv_wino_supported(&p0));
    assert_int_equal(wino_any(&s2), 0);
    cdl_conv2d_desc st2 = ref_conv_desc(2, 32, 16, 16, 32, 3, 3, 1, 1);
    cdl_conv2d_desc st1 = ref_conv_desc(2, 16, 32, 32, 16, 3, 3, 1, 1);
    cdl_conv2d_desc stem = ref_conv_desc(2, 3, 32, 32, 16, 3, 3, 1, 1);
    cdl_conv2d_desc r18 = ref_conv_desc(128, 512, 4, 4, 512, 3, 3, 1, 1);
    /* Batch 1 (and batches of few pixels) stays direct: the transforms of
     * the weights would cost 3x the direct kernels' time. */
    cdl_conv2d_desc r18b1 = ref_conv_desc(1, 512, 4, 4, 512, 3, 3, 1, 1);
    assert_int_equal(wino_any(&r18b1), 0);
    if (!cpu_has_avx512()) {
        if (!getenv("CDL_CPU_NO_WINOGRAD")) {
            check_avx2_dispatch(0);
            check_avx2_dispatch(1);   /* a backend with fast_conv */
        }
    } else if (!getenv("CDL_CPU_NO_WINOGRAD")) {
        /* With AVX-512 the 16-lane direct kernels take resnet20's stages of
         * 16 and 32 channels; F(2x2) the forward and dx from 256 channels
         * at 8x8 and below, and on full 512-bit units (16-lane products)
         * the forward, dx and weight gradient from 64 to 256 channels. */
        const int all = CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_DW;
        const int wide = conv_wino_wide();
        cdl_conv2d_desc st3 = ref_conv_desc(128, 64, 8, 8, 64, 3, 3, 1, 1);
        cdl_conv2d_desc st2b = ref_conv_desc(128, 32, 16, 16, 32, 3, 3, 1, 1);
        cdl_conv2d_desc r18s1 = ref_conv_desc(32, 64, 32, 32, 64, 3, 3, 1, 1);
        assert_int_equal(conv_use_wino(&st3, 0), wide ? all : 0);
        assert_int_equal(conv_use_wino(&st2b, 0), 0);
        assert_int_equal(conv_use_wino(&r18s1, 0), wide ? all : 0);
        cdl_conv2d_desc r18s3 = ref_conv_desc(32, 256, 8, 8, 256, 3, 3, 1, 1);
        cdl_conv2d_desc r18s3b8 = ref_conv_desc(8, 256, 8, 8, 256, 3, 3, 1, 1);
        assert_int_equal(wino_any(&r18s3b8), 0);
        assert_int_equal(wino_any(&st2), 0);   /* 512 pixels: under the 16-lane cut */
        assert_int_equal(wino_any(&r18), CONV_WINO_FWD | CONV_WINO_DX);   /* 4x4 maps */
        /* fast_conv: F(4x4) forward and dx from 16 channels on maps of 8
         * and more, and the weight gradient up to 256 channels, as on
         * AVX2 CPUs (past the 16-lane path's pixel cut). */
        int f4 = CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_F4;
        int f4dw = f4 | CONV_WINO_DW | CONV_WINO_DW4;
        cdl_conv2d_desc c512 = ref_conv_desc(32, 512, 8, 8, 512, 3, 3, 1, 1);
        assert_int_equal(conv_use_wino(&st1, 0), 0);
        assert_int_equal(conv_use_wino(&st1, 1), f4dw);
        assert_int_equal(conv_use_wino(&r18s3, 0), wide ? all : CONV_WINO_FWD | CONV_WINO_DX);
        assert_int_equal(conv_use_wino(&r18s3, 1), CONV_WINO_FWD | CONV_WINO_DX | f4dw);
        assert_int_equal(conv_use_wino(&st3, 1), (wide ? all : 0) | f4dw);
        assert_int_equal(conv_use_wino(&c512, 0), CONV_WINO_FWD | CONV_WINO_DX);
        assert_int_equal(conv_use_wino(&c512, 1), CONV_WINO_FWD | CONV_WINO_DX | f4);
    }
    if (cpu_has_avx512() && !getenv("CDL_CPU_NO_WINOGRAD")) {
        test_avx2_only(1);   /* the AVX2 choices on this AVX-512 CPU */
        check_avx2_dispatch(0);
        check_avx2_dispatch(1);
        test_avx2_only(0);
    }
    assert_int_equal(wino_any(&stem), 0);
    cpu_disable_avx512(1);
    assert_false(conv_wino_supported(&st2));
    assert_int_equal(wino_any(&st2), 0);
    cpu_disable_avx512(0);
}

/* The backend setting reaches the kernels: a CPU backend made with
 * fast_conv = 1 (2 threads) computes resnet20's stage-2 convolution
 * (forward, dx, dw and db) with F(4x4) where conv_use_wino says so (the
 * same bits as conv_wino4_fwd, _dx and _dw on 2 threads), one made with
 * the default params with F(2x2) (AVX2) or the 16-lane direct kernels, as
 * cdl_backend_cpu_create does; where conv_use_wino takes no F(4x4) (the
 * 16-lane path under its pixel cut) the setting changes no bit. r:
 * run_wino's on 2 threads. */
static void fast_conv_case(const cdl_conv2d_desc *d, const result *r)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->oc * d->oh * d->ow;
    size_t nw = (size_t)d->oc * d->c * 9, no = (size_t)d->oc;
    float *y[2], *dx[2], *dw[2], *db[2];
    pair x = pair_rand(nx, 91, -1, 1), w = pair_rand(nw, 92, -1, 1);
    pair b = pair_rand(d->oc, 93, -1, 1), dy = pair_rand(ny, 94, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        cdl_backend_params p;
        cdl_backend_params_init(&p);
        assert_int_equal(p.fast_conv, 0);
        p.threads = 2;
        p.fast_conv = fast;
        cdl_backend *be = cdl_backend_create_with("cpu", &p);
        assert_non_null(be);
        float *ws = cdl_malloc(be->ops->conv2d_workspace(be, d) * sizeof *ws + 4);
        y[fast] = cdl_malloc(ny * 4);
        dx[fast] = cdl_malloc(nx * 4);
        dw[fast] = cdl_malloc(nw * 4);
        db[fast] = cdl_malloc(no * 4);
        be->ops->conv2d_fwd(be, d, x.f, w.f, b.f, y[fast], ws);
        be->ops->conv2d_bwd(be, d, x.f, w.f, dy.f, dx[fast], dw[fast], db[fast], ws);
        cdl_free(ws);
        cdl_backend_destroy(be);
    }
    int wino = conv_use_wino(d, 1);
    if (wino & CONV_WINO_F4) {
        assert_true(wino & CONV_WINO_DW4);   /* 32 channels */
        assert_memory_equal(y[1], r->y4, ny * 4);
        assert_memory_equal(dx[1], r->dx4, nx * 4);
        assert_memory_equal(dw[1], r->dw4, nw * 4);
        assert_memory_equal(db[1], r->db4, no * 4);
        assert_memory_not_equal(y[0], y[1], ny * 4);
        assert_memory_not_equal(dw[0], dw[1], nw * 4);
        if (conv_use_direct(d) == 2) {   /* F(2x2) without the setting */
            assert_memory_equal(y[0], r->y, ny * 4);
            assert_memory_equal(dx[0], r->dx, nx * 4);
            assert_memory_equal(dw[0], r->dw, nw * 4);
            assert_memory_equal(db[0], r->db, no * 4);
        }
    } else {
        assert_memory_equal(y[0], y[1], ny * 4);
        assert_memory_equal(dx[0], dx[1], nx * 4);
        assert_memory_equal(dw[0], dw[1], nw * 4);
        assert_memory_equal(db[0], db[1], no * 4);
    }
    for (int i = 0; i < 2; i++) {
        cdl_free(y[i]);
        cdl_free(dx[i]);
        cdl_free(dw[i]);
        cdl_free(db[i]);
    }
    pair *all[] = {&x, &w, &b, &dy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

/* resnet20's stage-2 convolution at batch n through fast_conv_case, on
 * this CPU's path and, on an AVX-512 CPU, on its AVX2 path too. */
static void backend_fast_conv_at(int n)
{
    cdl_conv2d_desc d = ref_conv_desc(n, 32, 16, 16, 32, 3, 3, 1, 1);
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * 9;
    size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
    /* The same inputs as fast_conv_case's (seeds 91-94). */
    pair x = pair_rand(nx, 91, -1, 1), w = pair_rand(nw, 92, -1, 1);
    pair b = pair_rand(d.oc, 93, -1, 1), dy = pair_rand(ny, 94, -1, 1);
    result r = run_wino(&d, 2, &x, &w, &b, &dy);
    fast_conv_case(&d, &r);
    if (cpu_has_avx512()) {   /* and the AVX2 choices on this CPU */
        test_avx2_only(1);
        /* F(4x4)'s weight gradient cuts its blocks for the product width:
         * the AVX2 path's own results. */
        result r8 = run_wino(&d, 2, &x, &w, &b, &dy);
        fast_conv_case(&d, &r8);
        result_free(&r8);
        test_avx2_only(0);
    }
    result_free(&r);
    pair *all[] = {&x, &w, &b, &dy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void test_backend_fast_conv(void **state)
{
    (void)state;
    backend_fast_conv_at(2);
    /* Batch 8 (2048 pixels, the 16-lane path's Winograd cut): F(4x4) there
     * (batch 2 stays direct on that path). */
    if (cpu_has_avx512()) {
        cdl_conv2d_desc d8 = ref_conv_desc(8, 32, 16, 16, 32, 3, 3, 1, 1);
        assert_true(conv_use_wino(&d8, 1) & CONV_WINO_F4);
    }
    backend_fast_conv_at(8);
}

/* model.c sizes a convolution's workspace at its largest batch and at 1:
 * both Winograd sizes must need no more at any batch in between, on 1 and
 * 2 threads, on both product widths (F(4x4)'s block size is picked per
 * shape: that pick must not depend on the batch). */
static void test_workspace_by_batch(void **state)
{
    (void)state;
    const wcase shapes[] = {{0, 16, 32, 32, 16}, {0, 32, 16, 16, 32}, {0, 64, 8, 8, 64},
                            {0, 16, 28, 28, 16}, {0, 32, 14, 14, 32}, {0, 64, 7, 7, 64},
                            {0, 128, 16, 16, 128}, {0, 40, 72, 8, 36}};
    for (int avx2 = 0; avx2 <= cpu_has_avx512(); avx2++) {
        if (avx2)
            test_avx2_only(1);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int t = 1; t <= 2; t++) {
                const wcase *a = &shapes[k];
                const int nmax[] = {8, 33, 128};
                for (size_t m = 0; m < sizeof nmax / sizeof nmax[0]; m++) {
                    cdl_conv2d_desc d = ref_conv_desc(nmax[m], a->c, a->h, a->w, a->oc, 3, 3, 1, 1);
                    size_t cap4 = conv_wino4_workspace(&d, t), cap2 = conv_wino_workspace(&d, t);
                    d.n = 1;
                    size_t one4 = conv_wino4_workspace(&d, t), one2 = conv_wino_workspace(&d, t);
                    cap4 = cap4 > one4 ? cap4 : one4;
                    cap2 = cap2 > one2 ? cap2 : one2;
                    for (int n = 2; n < nmax[m]; n++) {
                        d.n = n;
                        if (conv_wino4_workspace(&d, t) > cap4 || conv_wino_workspace(&d, t) > cap2)
                            fail_msg("%d x %d at %dx%d -> %d, %d threads%s: batch %d needs more "
                                     "workspace than batches %d and 1", a->c, a->c, a->h, a->w,
                                     a->oc, t, avx2 ? " (AVX2)" : "", n, nmax[m]);
                    }
                }
            }
        if (avx2)
            test_avx2_only(0);
    }
}

/* The 16-lane product kernels against the 8-lane ones, bitwise, called
 * directly on random data: the forward's products for 1-5 groups of WTG
 * tiles (pairs and a last odd group) and 1-5 blocks of output channels
 * (pairs and a last odd block), the weight gradient's for 1-7 blocks of 8
 * output channels (32-, 16- and 8-wide register blocks; 16 alone with
 * twice the input channels) and channel counts around WDC. Rows and
 * outputs carry slack that must stay untouched. */
static void test_wide_products(void **state)
{
    (void)state;
    if (!conv_wino_wide()) {
        print_message("no full 512-bit units here: the 16-lane products are not used\n");
        return;
    }
    const int Cs[] = {1, 5, 6, 7, 13, 24};
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (int ng = 1; ng <= 5; ng++)
            for (int nob = 1; nob <= 5; nob++) {
                int C = Cs[ci], ts = ng * WTG + 8;
                size_t nu = (size_t)nob * C * WOB, nv = (size_t)C * ts, nm = (size_t)nob * WOB * ts;
                pair u = pair_rand(nu, 101 + (unsigned)ci, -1, 1), v = pair_rand(nv, 102 + (unsigned)ng, -1, 1);
                float *m8 = cdl_malloc(nm * 4), *m16 = cdl_malloc(nm * 4);
                memset(m8, 0x7f, nm * 4);
                memset(m16, 0x7f, nm * 4);
                conv_wino_gemm(u.f, v.f, m8, C, ng, ts, nob);
                conv_wino_gemm16(u.f, v.f, m16, C, ng, ts, nob);
                assert_memory_equal(m8, m16, nm * 4);
                cdl_free(m8);
                cdl_free(m16);
                pair_free(&u);
                pair_free(&v);
            }
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (int ob8 = 1; ob8 <= 7; ob8++) {
            int C = Cs[ci], nb = 5 + 3 * ob8, ts = nb + 3, opad = 8 * ob8;
            int cpad = (C + WDC - 1) / WDC * WDC;
            size_t nv = (size_t)C * ts, nd = (size_t)nb * opad, np = (size_t)cpad * opad;
            pair v = pair_rand(nv, 111 + (unsigned)ci, -1, 1), d = pair_rand(nd, 112 + (unsigned)ob8, -1, 1);
            pair p0 = pair_rand(np, 113, -1, 1);
            float *p8 = cdl_malloc(np * 4), *p16 = cdl_malloc(np * 4);
            memcpy(p8, p0.f, np * 4);
            memcpy(p16, p0.f, np * 4);
            conv_wino_dw_products(v.f, ts, C, d.f, opad, ob8, nb, p8);
            conv_wino_dw_products16(v.f, ts, C, d.f, opad, ob8, nb, p16);
            assert_memory_equal(p8, p16, np * 4);
            cdl_free(p8);
            cdl_free(p16);
            pair_free(&v);
            pair_free(&d);
            pair_free(&p0);
        }
}

int main(void)
{
    if (!cpu_has_avx2()) {
        print_message("no AVX2 on this CPU: nothing to test\n");
        return 77;   /* automake's "skipped" */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wino_matches_reference),
        cmocka_unit_test(test_wino_dispatch),
        cmocka_unit_test(test_backend_fast_conv),
        cmocka_unit_test(test_wide_products),
        cmocka_unit_test(test_workspace_by_batch),
    };
    return cmocka_run_group_tests_name("conv2d Winograd", tests, NULL, NULL);
}
