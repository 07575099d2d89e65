/* The direct AVX2 convolution (kernels/cpu/conv2d_avx2.c) against the
 * double-precision reference, on the shapes of the CIFAR ResNets (3x3, pad
 * 1, stride 1 and 2, 16/32/64 channels, 32/16/8 pixels) and odd ones;
 * batches that do not split evenly over the threads; its reproducibility
 * for a thread count; its 16-lane AVX-512 twin (conv2d_avx512.c) bitwise
 * equal to it (same sums in the same order; on AVX-512 CPUs); and that the
 * CPU backend takes these paths where it should. Workspaces are allocated at exactly the planned size so the
 * sanitizers and valgrind see any read past them. Skipped on CPUs without
 * AVX2 (nothing to test: the ops never take the path there). */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"
#include "kernel_testutil.h"
#include "ref_ops.h"

typedef struct acase {
    int n, c, h, w, oc, k, stride, pad;
} acase;

static const acase cases[] = {
    {3, 16, 32, 32, 16, 3, 1, 1},  /* resnet20 stage 1; 3 images over 2 threads */
    {1, 3, 32, 32, 16, 3, 1, 1},   /* the stem */
    {1, 16, 32, 32, 32, 3, 2, 1},  /* stage 2's first conv */
    {2, 32, 16, 16, 32, 3, 1, 1},  /* stage 2 */
    {1, 32, 16, 16, 64, 3, 2, 1},  /* stage 3's first conv */
    {3, 64, 8, 8, 64, 3, 1, 1},    /* stage 3 */
    {2, 16, 32, 32, 32, 1, 2, 0},  /* 1x1 stride-2 shortcut */
    {2, 32, 16, 16, 64, 1, 2, 0},  /* stage 3's shortcut (dy read in place for dx) */
    {2, 5, 11, 35, 6, 1, 2, 0},    /* 1x1 stride 2, odd sizes */
    {1, 4, 6, 40, 3, 3, 2, 1},     /* stride 2, rows of 40: vector and scalar columns */
    {2, 128, 4, 4, 136, 3, 1, 1},  /* resnet18's widest stage is 512 at 4x4 */
    {3, 5, 13, 11, 7, 3, 1, 1},    /* odd sizes, channel tails */
    {4, 6, 15, 9, 10, 3, 2, 1},    /* odd sizes, stride 2 */
    {2, 3, 7, 20, 5, 3, 2, 0},     /* stride 2, no padding, odd width */
    {2, 4, 9, 9, 3, 5, 1, 2},      /* 5x5 */
    {3, 2, 1, 1, 3, 3, 1, 1},      /* one pixel */
    {2, 64, 16, 16, 128, 3, 2, 1}, /* resnet18 stage 3's first conv */
    {1, 64, 16, 16, 128, 1, 2, 0}, /* and its shortcut */
    {2, 128, 8, 8, 128, 3, 1, 1},  /* resnet18 at 8x8 */
    {3, 16, 14, 14, 24, 3, 1, 1},  /* 14 columns: masked 16-lane tails */
    {2, 24, 14, 14, 16, 3, 2, 1},  /* 14 -> 7, stride 2 */
    {3, 8, 7, 7, 20, 3, 1, 1},     /* 7x7 */
    {1, 20, 7, 7, 8, 1, 2, 0},     /* 7 -> 4, 1x1 stride 2 */
    {2, 16, 48, 48, 16, 3, 1, 1},  /* 3 segments of 16 a row */
    {1, 40, 3, 5, 33, 3, 1, 1},    /* batch 1, oc 33: dW lane blocks with a 1-lane tail */
};
#define N_CASES (sizeof cases / sizeof cases[0])

static cdl_conv2d_desc desc_of(const acase *a)
{
    return ref_conv_desc(a->n, a->c, a->h, a->w, a->oc, a->k, a->k, a->stride, a->pad);
}

typedef struct result {
    float *y, *dx, *dw, *db;
} result;

/* Forward (with bias) and backward on `threads` threads, by the 8-lane
 * (lanes 8) or the 16-lane kernels. */
static result run_lanes(const cdl_conv2d_desc *d, int lanes, int threads, const pair *x,
                        const pair *w, const pair *b, const pair *dy)
{
    pool *pl = pool_create(threads);
    assert_non_null(pl);
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->oc * d->c * d->kh * d->kw;
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow;
    result r = {cdl_calloc(ny, 4), cdl_calloc(nx, 4), cdl_calloc(nw, 4), cdl_calloc(d->oc, 4)};
    size_t nws = lanes == 16 ? conv_avx512_workspace(d, threads) : conv_avx2_workspace(d, threads);
    float *ws = cdl_malloc(nws * sizeof *ws);
    assert_non_null(ws);
    /* Garbage in the workspace and outputs: the kernels must not rely on
     * zeroed memory or accumulate into their outputs. */
    memset(ws, 0x7f, nws * sizeof *ws);
    for (size_t i = 0; i < nx; i++)
        r.dx[i] = 1e6f;
    (lanes == 16 ? conv_avx512_fwd : conv_avx2_fwd)(pl, d, x->f, w->f, b->f, r.y, ws);
    memset(ws, 0x7f, nws * sizeof *ws);
    (lanes == 16 ? conv_avx512_bwd : conv_avx2_bwd)(pl, d, x->f, w->f, dy->f, r.dx, r.dw, r.db, ws);
    /* Without db (bias=false) dW is the same. */
    float *dw2 = cdl_malloc(nw * sizeof *dw2);
    assert_non_null(dw2);
    memset(ws, 0x7f, nws * sizeof *ws);
    (lanes == 16 ? conv_avx512_bwd : conv_avx2_bwd)(pl, d, x->f, w->f, dy->f, NULL, dw2, NULL, ws);
    assert_memory_equal(dw2, r.dw, nw * sizeof *dw2);
    cdl_free(dw2);
    cdl_free(ws);
    pool_destroy(pl);
    return r;
}

static void result_free(result *r)
{
    cdl_free(r->y);
    cdl_free(r->dx);
    cdl_free(r->dw);
    cdl_free(r->db);
}

static void test_avx2_matches_reference(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_CASES; k++) {
        cdl_conv2d_desc d = desc_of(&cases[k]);
        assert_true(conv_avx2_supported(&d));
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * d.kh * d.kw;
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        pair x = pair_rand(nx, 71 + k, -1, 1), w = pair_rand(nw, 72 + k, -1, 1);
        pair b = pair_rand(d.oc, 73 + k, -1, 1), dy = pair_rand(ny, 74 + k, -1, 1);
        pair y = pair_new(ny), dx = pair_new(nx), dw = pair_new(nw), db = pair_new(d.oc);
        ref_conv2d_fwd(&d, x.d, w.d, b.d, y.d);
        ref_conv2d_bwd(&d, x.d, w.d, dy.d, dx.d, dw.d, db.d);
        result r1 = run_lanes(&d, 8, 1, &x, &w, &b, &dy);
        result r2 = run_lanes(&d, 8, 2, &x, &w, &b, &dy);
        result r2b = run_lanes(&d, 8, 2, &x, &w, &b, &dy);
        const result *rs[] = {&r1, &r2};
        for (int i = 0; i < 2; i++) {
            print_message("case %zu (n=%d c=%d %dx%d oc=%d k=%d s=%d), %d thread(s)\n", k, d.n,
                          d.c, d.h, d.w, d.oc, d.kh, d.stride_h, i + 1);
            check_close("avx2 y", rs[i]->y, y.d, ny, 1e-5);
            check_close("avx2 dx", rs[i]->dx, dx.d, nx, 1e-5);
            check_close("avx2 dw", rs[i]->dw, dw.d, nw, 1e-5);
            check_close("avx2 db", rs[i]->db, db.d, (size_t)d.oc, 1e-5);
        }
        /* The same thread count gives the same bits; forward and dx never
         * depend on it. */
        assert_memory_equal(r2.dw, r2b.dw, nw * sizeof(float));
        assert_memory_equal(r2.db, r2b.db, (size_t)d.oc * sizeof(float));
        assert_memory_equal(r1.y, r2.y, ny * sizeof(float));
        assert_memory_equal(r1.dx, r2.dx, nx * sizeof(float));
        /* The 16-lane kernels: the same bits as the 8-lane ones, for the
         * same thread count. */
        if (conv_avx512_supported(&d)) {
            for (int t = 1; t <= 2; t++) {
                result r16 = run_lanes(&d, 16, t, &x, &w, &b, &dy);
                const result *r8 = t == 1 ? &r1 : &r2;
                assert_memory_equal(r16.y, r8->y, ny * sizeof(float));
                assert_memory_equal(r16.dx, r8->dx, nx * sizeof(float));
                assert_memory_equal(r16.dw, r8->dw, nw * sizeof(float));
                assert_memory_equal(r16.db, r8->db, (size_t)d.oc * sizeof(float));
                result_free(&r16);
            }
        }
        result_free(&r1);
        result_free(&r2);
        result_free(&r2b);
        pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db};
        for (size_t i = 0; i < 8; i++)
            pair_free(all[i]);
    }
}

/* The CPU backend runs resnet20's convolutions on this path where the CPU
 * has AVX2 but not AVX-512, and not where the tests turn SIMD off. */
static void test_backend_takes_avx2_path(void **state)
{
    (void)state;
    cdl_conv2d_desc d = desc_of(&cases[3]);
    assert_int_equal(conv_use_direct(&d), cpu_has_avx512() ? 3 : 2);
    /* The stem too (3 input channels), and a 5x5 stride-1 conv with 7
     * output channels (conv2d_direct.c's on AVX-512 CPUs before). */
    cdl_conv2d_desc stem = desc_of(&cases[1]), k5 = desc_of(&cases[14]);
    assert_int_equal(conv_use_direct(&stem), cpu_has_avx512() ? 3 : 2);
    assert_int_equal(conv_use_direct(&k5), cpu_has_avx512() ? 3 : 2);
    /* Stride 2 to outputs narrower than a vector: SGEMM (resnet18's last
     * downsampling conv). */
    cdl_conv2d_desc narrow = ref_conv_desc(2, 256, 8, 8, 512, 3, 3, 2, 1);
    assert_int_equal(conv_use_direct(&narrow), 0);
    cpu_disable_avx512(1);
    assert_int_equal(conv_use_direct(&d), 0);
    assert_false(conv_avx2_supported(&d));
    cpu_disable_avx512(0);
}

int main(void)
{
    if (!cpu_has_avx2()) {
        print_message("no AVX2 on this CPU: nothing to test\n");
        return 77;   /* automake's "skipped" */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx2_matches_reference),
        cmocka_unit_test(test_backend_takes_avx2_path),
    };
    return cmocka_run_group_tests_name("conv2d AVX2", tests, NULL, NULL);
}
