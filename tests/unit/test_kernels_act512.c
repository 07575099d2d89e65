/* The AVX-512 kernels of the elementwise and row ops (act.c's exact GELU,
 * layernorm.c's parameter sums) against the AVX2 ones
 * (CDL_CPU_NO_AVX512=1 read again after cpu_disable_avx512(0)): forward
 * and backward bitwise equal, the AVX-512 path doing the AVX2 path's
 * operations lane for lane. The AVX2 path itself is checked against the
 * double-precision reference and PyTorch in test_kernels,
 * test_kernels_seq and test_ops_torch. Skipped without AVX-512. */
#include <math.h>
#include <string.h>

#include "avx512_testutil.h"
#include "kernel_testutil.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* y = gelu(x) and dx = gelu'(x) dy over n floats on the current path. */
static void gelu_both(cdl_backend *be, size_t n, const float *x, const float *dy, float *y,
                      float *dx)
{
    cpu_act_fwd(be, CDL_ACT_GELU, 0.0f, n, x, y);
    cpu_act_bwd(be, CDL_ACT_GELU, 0.0f, n, x, y, dy, dx);
}

static void test_gelu_avx512_equals_avx2(void **state)
{
    (void)state;
    if (!cpu_has_avx512() || !cpu_has_avx2()) {
        skip();
        return;
    }
    /* Lengths: under one vector, a 16-lane body with an 8-lane and a
     * scalar tail, and several chunks of the pool's split. */
    const size_t lens[] = {7, 16 * 37 + 8 + 5, 300007};
    const int threads[] = {1, 3};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        pair x = pair_rand(n, 800 + li, -9, 9), dy = pair_rand(n, 810 + li, -1, 1);
        /* The edges: signed zeros, tiny and huge values, infinities, NaN. */
        const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e30f, -1e30f,
                              INFINITY, -INFINITY, NAN};
        for (size_t i = 0; i < sizeof edge / sizeof edge[0] && i < n; i++)
            x.f[(i * 7919) % n] = edge[i];
        for (size_t ti = 0; ti < 2; ti++) {
            cdl_backend *be = test_cpu_backend(threads[ti]);
            float *y[2], *dx[2];
            for (int p = 0; p < 2; p++) {   /* 0: AVX-512, 1: AVX2 */
                y[p] = cdl_calloc(n, sizeof(float));
                dx[p] = cdl_calloc(n, sizeof(float));
                if (p == 1) {
                    test_avx2_only(1);
                }
                gelu_both(be, n, x.f, dy.f, y[p], dx[p]);
            }
            test_avx2_only(0);
            assert_memory_equal(y[0], y[1], n * sizeof(float));
            assert_memory_equal(dx[0], dx[1], n * sizeof(float));
            for (int p = 0; p < 2; p++)
                cdl_free(y[p]), cdl_free(dx[p]);
            cdl_backend_destroy(be);
        }
        pair_free(&x);
        pair_free(&dy);
    }
}

/* layernorm_fwd and _bwd (dx, dgamma, dbeta) on both paths, bitwise: rows
 * of 144 (the bench GPT: 9 blocks of 16 parameter columns) and of 40 (two
 * blocks and a tail of 8), with and without the affine parameters. */
static void test_layernorm_avx512_equals_avx2(void **state)
{
    (void)state;
    if (!cpu_has_avx512() || !cpu_has_avx2()) {
        skip();
        return;
    }
    const int shapes[][2] = {{67, 144}, {300, 40}, {5, 7}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int rows = shapes[k][0], d = shapes[k][1];
        size_t n = (size_t)rows * d;
        pair x = pair_rand(n, 820 + k, -3, 3), dy = pair_rand(n, 830 + k, -1, 1);
        pair gamma = pair_rand((size_t)d, 840 + k, 0.5, 1.5), beta = pair_rand((size_t)d, 850 + k, -1, 1);
        for (int affine = 0; affine < 2; affine++) {
            cdl_backend *be = test_cpu_backend(2);
            float *out[2][5];
            for (int p = 0; p < 2; p++) {   /* 0: AVX-512, 1: AVX2 */
                size_t sizes[5] = {n, 2 * (size_t)rows, n, (size_t)d, (size_t)d};
                for (int b = 0; b < 5; b++)
                    out[p][b] = cdl_calloc(sizes[b], sizeof(float));
                if (p == 1)
                    test_avx2_only(1);
                const float *g = affine ? gamma.f : NULL;
                cpu_layernorm_fwd(be, rows, d, x.f, g, affine ? beta.f : NULL, 1e-5f, out[p][0],
                                  out[p][1]);
                cpu_layernorm_bwd(be, rows, d, x.f, g, out[p][1], dy.f, out[p][2],
                                  affine ? out[p][3] : NULL, affine ? out[p][4] : NULL);
            }
            test_avx2_only(0);
            assert_memory_equal(out[0][0], out[1][0], n * sizeof(float));
            assert_memory_equal(out[0][1], out[1][1], 2 * (size_t)rows * sizeof(float));
            assert_memory_equal(out[0][2], out[1][2], n * sizeof(float));
            assert_memory_equal(out[0][3], out[1][3], (size_t)d * sizeof(float));
            assert_memory_equal(out[0][4], out[1][4], (size_t)d * sizeof(float));
            for (int p = 0; p < 2; p++)
                for (int b = 0; b < 5; b++)
                    cdl_free(out[p][b]);
            cdl_backend_destroy(be);
        }
        pair_free(&x);
        pair_free(&dy);
        pair_free(&gamma);
        pair_free(&beta);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_avx512_equals_avx2),
        cmocka_unit_test(test_layernorm_avx512_equals_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
