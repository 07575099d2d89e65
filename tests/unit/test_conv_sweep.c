/* The CPU backend's convolutions on random shapes (fixed seed) against the
 * double-precision reference (ref_ops.c): forward, dx, dW and db, with the
 * default settings and with fast_conv, on 1 and 2 threads. The curated
 * cases of test_kernels_conv*.c pin each path on the shapes it was built
 * for; this sweep goes through the backend's own choice of path (direct
 * 8- or 16-lane, Winograd F(2x2) or F(4x4), depthwise, im2col+SGEMM) on
 * shapes nobody picked: odd sizes, 1 to 5 taps a side, rectangular
 * kernels, strides 1 to 3, padding up to 2, dilation, groups, depthwise,
 * 1 to 128 channels, maps of 1 to 40 pixels, channel counts around the
 * paths' thresholds. Workspaces are allocated at exactly the size the
 * backend asks for, so the sanitizers and valgrind see any access past
 * them.
 *
 * Error measure: random inputs in [-1,1), so an output summing m products
 * has a size of about sqrt(m), and a few of them (a 1-channel db over a
 * batch) cancel to near zero; max |cdl - ref| is divided by the larger of
 * max |ref| and sqrt(m). A wrong tap, phase or tail errs by O(1) there;
 * rounding by 1e-7 to 4e-6 (F(4x4), fast_conv). */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_wino.h"
#include "kernels/cpu/simd.h"
#include "kernel_testutil.h"
#include "ref_ops.h"

/* Normalised errors below these fail (the worst seen: 2e-6 by default,
 * 4.4e-6 with fast_conv, on AVX-512 and AVX2 paths). */
#define TOL_DEFAULT 1e-5
#define TOL_FAST 3e-5

static int pick(rng_state *r, int lo, int hi)
{
    return lo + (int)rng_below(r, (uint64_t)(hi - lo + 1));
}

/* A random valid shape: 2 in 3 the 3x3 convolutions of CNNs (channel
 * counts around the paths' thresholds, pads 0-2, stride 1 or 2, maps up
 * to 40), the rest anything small (1-5 taps a side, strides up to 3,
 * dilation, groups, depthwise). At most max_macs multiply-adds. */
static cdl_conv2d_desc random_shape(rng_state *r, double max_macs)
{
    static const int cs[] = {1, 3, 8, 15, 16, 17, 32, 40, 63, 64, 65, 128};
    static const int ocs[] = {1, 8, 16, 24, 31, 32, 48, 64, 96, 128};
    for (;;) {
        int cnn = pick(r, 0, 2) > 0;
        int n = pick(r, 1, 5), c, oc, kh, kw, groups = 1;
        if (cnn) {
            c = cs[pick(r, 0, (int)(sizeof cs / sizeof cs[0]) - 1)];
            oc = ocs[pick(r, 0, (int)(sizeof ocs / sizeof ocs[0]) - 1)];
            kh = kw = 3;
        } else {
            c = pick(r, 1, 24);
            oc = pick(r, 1, 24);
            kh = pick(r, 1, 5);
            kw = pick(r, 0, 3) ? kh : pick(r, 1, 5);
            int kind = pick(r, 0, 7);
            if (kind == 0) {          /* grouped */
                groups = pick(r, 2, 4);
                c = groups * pick(r, 1, 4);
                oc = groups * pick(r, 1, 4);
            } else if (kind == 1) {   /* depthwise */
                groups = c = oc = pick(r, 1, 16);
            }
        }
        int sh = pick(r, 1, 3) == 3 ? 2 : 1;
        if (!cnn && pick(r, 0, 4) == 0)
            sh = 3;
        int sw = pick(r, 0, 5) ? sh : pick(r, 1, 2);
        int ph = pick(r, 0, 2), pw = pick(r, 0, 3) ? ph : pick(r, 0, 2);
        int dh = pick(r, 0, 6) ? 1 : 2, dw = pick(r, 0, 3) ? dh : 1;
        int h = pick(r, 1, cnn ? 40 : 20), w = pick(r, 0, 3) ? h : pick(r, 1, cnn ? 40 : 20);
        cdl_conv2d_desc d = ref_conv_desc_full(n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw,
                                               groups);
        if (d.oh < 1 || d.ow < 1)
            continue;
        /* Too big: draw again (not a smaller batch), so the sizes stay spread. */
        if ((double)n * oc * (c / groups) * kh * kw * d.oh * d.ow <= max_macs)
            return d;
    }
}

/* A shape where Winograd may run: 3x3, stride 1, 16-128 channels (wide:
 * 64-128), at
 * least 2048 pixels a channel over the batch (the 16-lane paths' cut),
 * at most max_macs multiply-adds. */
static cdl_conv2d_desc wino_shape(rng_state *r, int wide, double max_macs)
{
    static const int cs[] = {16, 24, 32, 48, 64, 65, 96, 128};
    const int ncs = (int)(sizeof cs / sizeof cs[0]), lo = wide ? 4 : 0;   /* wide: from 64 */
    for (;;) {
        int n = pick(r, 2, 4), h = pick(r, 8, 32), w = pick(r, 0, 2) ? h : pick(r, 8, 32);
        int c = cs[pick(r, lo, ncs - 1)], oc = cs[pick(r, lo, ncs - 1)], pad = pick(r, 0, 2);
        cdl_conv2d_desc d = ref_conv_desc_full(n, c, h, w, oc, 3, 3, 1, 1, pad, pad, 1, 1, 1);
        if ((double)n * h * w >= 2048 && (double)n * oc * c * 9 * d.oh * d.ow <= max_macs)
            return d;
    }
}

/* max |a - ref| / max(max |ref|, floor). */
static double err_floor(const float *a, const double *ref, size_t n, double floor)
{
    double m = floor, e = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > m)
            m = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double v = fabs((double)a[i] - ref[i]);
        if (!(v <= e))
            e = v;   /* NaN stays */
    }
    return e / m;
}

static const char *shape_str(const cdl_conv2d_desc *d, char *buf, size_t len)
{
    snprintf(buf, len, "n %d c %d %dx%d -> oc %d, kernel %dx%d, stride %d,%d, pad %d,%d, "
             "dilation %d,%d, groups %d", d->n, d->c, d->h, d->w, d->oc, d->kh, d->kw,
             d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w, d->groups);
    return buf;
}

static void test_random_shapes(void **state)
{
    (void)state;
    cdl_backend *be[2][2];   /* [fast_conv][threads - 1] */
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++) {
            cdl_backend_params p;
            cdl_backend_params_init(&p);
            p.threads = t + 1;
            p.fast_conv = f;
            be[f][t] = cdl_backend_create_with("cpu", &p);
            assert_non_null(be[f][t]);
        }
    rng_state r;
    rng_seed(&r, 20261207);
    /* Under valgrind (CDL_TEST_SMALL) fewer and smaller shapes, and none
     * of the Winograd-sized ones: the curated tests take those there. */
    const long small = test_size(120, 16), shapes = small + test_size(16, 0);
    const double max_macs = (double)test_size(6000000, 1500000);
    double worst[2] = {0.0, 0.0};
    int failed = 0, wino[2] = {0, 0};   /* shapes that took Winograd: default, fast_conv */
    for (long s = 0; s < shapes; s++) {
        cdl_conv2d_desc d = s < small ? random_shape(&r, max_macs) : wino_shape(&r, s & 1, 1e8);
        for (int f = 0; f < 2; f++)
            wino[f] += conv_use_wino(&d, f) != 0;
        int cg = d.c / d.groups;
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * cg * d.kh * d.kw;
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        pair x = pair_rand(nx, 1000 + (uint64_t)s, -1, 1), w = pair_rand(nw, 2000 + (uint64_t)s, -1, 1);
        pair b = pair_rand((size_t)d.oc, 3000 + (uint64_t)s, -1, 1);
        pair dy = pair_rand(ny, 4000 + (uint64_t)s, -1, 1);
        pair y = pair_new(ny), dx = pair_new(nx), dw = pair_new(nw), db = pair_new((size_t)d.oc);
        ref_conv2d_fwd(&d, x.d, w.d, b.d, y.d);
        ref_conv2d_bwd(&d, x.d, w.d, dy.d, dx.d, dw.d, db.d);
        /* sqrt of the products each output sums: y, dx, dw and db. */
        double terms[4] = {sqrt((double)cg * d.kh * d.kw),
                           sqrt((double)(d.oc / d.groups) * d.kh * d.kw),
                           sqrt((double)d.n * d.oh * d.ow), sqrt((double)d.n * d.oh * d.ow)};
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < 2; t++) {
                cdl_backend *k = be[f][t];
                float *ws = cdl_malloc(k->ops->conv2d_workspace(k, &d) * sizeof(float) + 1);
                /* Outputs full of NaN: a value never written shows. */
                memset(y.f, 0xff, ny * sizeof(float));
                memset(dx.f, 0xff, nx * sizeof(float));
                memset(dw.f, 0xff, nw * sizeof(float));
                memset(db.f, 0xff, (size_t)d.oc * sizeof(float));
                k->ops->conv2d_fwd(k, &d, x.f, w.f, b.f, y.f, ws);
                k->ops->conv2d_bwd(k, &d, x.f, w.f, dy.f, dx.f, dw.f, db.f, ws);
                cdl_free(ws);
                const float *got[4] = {y.f, dx.f, dw.f, db.f};
                const double *ref[4] = {y.d, dx.d, dw.d, db.d};
                size_t len[4] = {ny, nx, nw, (size_t)d.oc};
                static const char *name[4] = {"y", "dx", "dw", "db"};
                for (int o = 0; o < 4; o++) {
                    double e = err_floor(got[o], ref[o], len[o], terms[o]);
                    if (e > worst[f] || e != e)
                        worst[f] = e;
                    if (!(e <= (f ? TOL_FAST : TOL_DEFAULT))) {
                        char buf[200];
                        print_error("shape %ld (%s), fast_conv %d, %d thread(s): %s off by %.3g\n",
                                    s, shape_str(&d, buf, sizeof buf), f, t + 1, name[o], e);
                        failed++;
                    }
                }
            }
        pair_free(&x), pair_free(&w), pair_free(&b), pair_free(&dy);
        pair_free(&y), pair_free(&dx), pair_free(&dw), pair_free(&db);
    }
    print_message("%ld shapes (%d and %d through Winograd); worst normalised error %.3g "
                  "(default), %.3g (fast_conv)\n", shapes, wino[0], wino[1], worst[0], worst[1]);
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++)
            cdl_backend_destroy(be[f][t]);
    assert_int_equal(failed, 0);
    /* The sweep reaches Winograd where the CPU has it: F(4x4) with
     * fast_conv on any AVX2 CPU; F(2x2) by default on AVX2 CPUs and where
     * the products run 16 lanes wide (from 64 channels), not on Zen 4
     * (there only from 256 channels at 8x8 and below). */
#if CPU_X86
    if (cpu_has_avx2() && shapes > small) {
        assert_true(wino[1] > 0);
        if (!cpu_has_avx512() || conv_wino_wide())
            assert_true(wino[0] > 0);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
