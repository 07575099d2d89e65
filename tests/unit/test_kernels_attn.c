/* Causal multi-head self-attention (attn_fwd / attn_bwd): the
 * double-precision reference (ref_ops.c) against finite differences, and
 * both CPU paths (the plain loops of the definition and the fast blocked
 * SGEMM path the ops table uses) against the reference on 1 and 3
 * threads, the fast path bitwise the same on both. */
#include <stdio.h>
#include <string.h>

#include "avx512_testutil.h"
#include "kernel_testutil.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"
#include "ref_ops.h"

/* ------------------------------------------------------------ reference vs finite differences */

typedef struct attn_fd {
    int n, T, C, nh;
    double *qkv, *r, *y;
} attn_fd;

static double attn_loss(void *vctx)
{
    attn_fd *a = vctx;
    ref_attn_fwd(a->n, a->T, a->C, a->nh, a->qkv, a->y, NULL);
    return dot(a->r, a->y, (size_t)a->n * a->T * a->C);
}

/* (n, T, C, nh): several heads, one head, head size 1, one position. */
static const int fd_shapes[][4] = {{2, 5, 6, 2}, {1, 7, 4, 1}, {2, 4, 4, 4}, {1, 1, 6, 3}};

static void test_ref_attn_gradients(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof fd_shapes / sizeof fd_shapes[0]; k++) {
        int n = fd_shapes[k][0], T = fd_shapes[k][1], C = fd_shapes[k][2], nh = fd_shapes[k][3];
        size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C;
        pair qkv = pair_rand(nq, 300 + k, -2, 2), r = pair_rand(ny, 301 + k, -1, 1);
        pair y = pair_new(ny), dqkv = pair_new(nq);
        ref_attn_bwd(n, T, C, nh, qkv.d, r.d, dqkv.d);
        attn_fd a = {n, T, C, nh, qkv.d, r.d, y.d};
        fd_check("attn dqkv", attn_loss, &a, qkv.d, nq, dqkv.d);
        pair *all[] = {&qkv, &r, &y, &dqkv};
        for (size_t i = 0; i < 4; i++)
            pair_free(all[i]);
    }
}

/* Position 0 sees only itself (y = v_0), and lse is the log-sum-exp of the
 * scaled scores: checks the mask and the scale, not just self-consistency. */
static void test_ref_attn_definition(void **state)
{
    (void)state;
    int T = 3, C = 2, nh = 1;
    double qkv[3 * 6], y[3 * 2], lse[3];
    for (int i = 0; i < 18; i++)
        qkv[i] = 0.1 * (i % 7) - 0.3;
    ref_attn_fwd(1, T, C, nh, qkv, y, lse);
    assert_true(fabs(y[0] - qkv[4]) < 1e-15 && fabs(y[1] - qkv[5]) < 1e-15);
    double s0 = (qkv[6] * qkv[2] + qkv[7] * qkv[3]) / sqrt(2.0);
    double s1 = (qkv[6] * qkv[8] + qkv[7] * qkv[9]) / sqrt(2.0);
    assert_true(fabs(lse[1] - log(exp(s0) + exp(s1))) < 1e-14);
    double p0 = exp(s0 - lse[1]), p1 = exp(s1 - lse[1]);
    assert_true(fabs(y[2] - (p0 * qkv[4] + p1 * qkv[10])) < 1e-14);
}

/* ------------------------------------------------------------ CPU backend vs reference */

typedef void (*attn_fwd_fn)(cdl_backend *, int, int, int, int, const float *, float *, float *,
                            float *);
typedef void (*attn_bwd_fn)(cdl_backend *, int, int, int, int, const float *, const float *,
                            const float *, const float *, float *, float *);

/* (n, T, C, nh): T below, at and across the fast path's 64-row blocks
 * (a partial last block), head sizes 1, 3, 8, 36 (the bench GPT's: a
 * 24-column tile and a 12-column one, its last vector half masked) and 64.
 * Small: the test runs under valgrind too. */
static const int shapes[][4] = {
    {2, 9, 12, 4}, {1, 64, 24, 3}, {1, 140, 16, 2}, {2, 70, 3, 3}, {1, 80, 64, 1}, {1, 66, 72, 2},
};

static void run_attn(cdl_backend *be, attn_fwd_fn fwd, attn_bwd_fn bwd, int n, int T, int C,
                     int nh, const float *qkv, const float *dy, float *y, float *lse,
                     float *dqkv)
{
    size_t wn = cpu_attn_workspace(be, n, T, C, nh);
    float *ws = cdl_calloc(wn ? wn : 1, sizeof *ws);
    assert_non_null(ws);
    /* A stale workspace and outputs of NaNs (all bits set): an entry a path
     * reads without having written it, or an output it leaves unwritten,
     * shows as NaN in the results. */
    memset(ws, 0xff, (wn ? wn : 1) * sizeof *ws);
    memset(y, 0xff, (size_t)n * T * C * sizeof *y);
    memset(lse, 0xff, (size_t)n * nh * T * sizeof *lse);
    memset(dqkv, 0xff, (size_t)n * T * 3 * C * sizeof *dqkv);
    fwd(be, n, T, C, nh, qkv, y, lse, ws);
    bwd(be, n, T, C, nh, qkv, y, lse, dy, dqkv, ws);
    cdl_free(ws);
}

static void test_attn_matches_reference(void **state)
{
    (void)state;
    const attn_fwd_fn fwds[] = {cpu_attn_ref_fwd, cpu_attn_fwd};
    const attn_bwd_fn bwds[] = {cpu_attn_ref_bwd, cpu_attn_bwd};
    const char *paths[] = {"reference", "fast"};
    const int threads[] = {1, 3};
    cdl_backend *bes[] = {test_cpu_backend(threads[0]), test_cpu_backend(threads[1])};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int n = shapes[k][0], T = shapes[k][1], C = shapes[k][2], nh = shapes[k][3];
        size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
        /* Scores up to ~|4|: softmax rows far from uniform. */
        pair qkv = pair_rand(nq, 400 + k, -1.5, 1.5), dy = pair_rand(ny, 401 + k, -1, 1);
        pair y = pair_new(ny), lse = pair_new(nl), dqkv = pair_new(nq);
        ref_attn_fwd(n, T, C, nh, qkv.d, y.d, lse.d);
        ref_attn_bwd(n, T, C, nh, qkv.d, dy.d, dqkv.d);
        float *y1 = cdl_calloc(ny, sizeof *y1), *d1 = cdl_calloc(nq, sizeof *d1);
        for (size_t p = 0; p < 2; p++) {
            for (size_t ti = 0; ti < 2; ti++) {
                cdl_backend *be = bes[ti];
                /* NaN: every output element must be written (dqkv is
                 * overwritten, not accumulated). */
                for (size_t i = 0; i < nq; i++)
                    dqkv.f[i] = NAN;
                for (size_t i = 0; i < ny; i++)
                    y.f[i] = NAN;
                run_attn(be, fwds[p], bwds[p], n, T, C, nh, qkv.f, dy.f, y.f, lse.f, dqkv.f);
                char what[96];
                snprintf(what, sizeof what, "attn %s n=%d T=%d C=%d nh=%d threads=%d", paths[p],
                         n, T, C, nh, threads[ti]);
                check_close(what, y.f, y.d, ny, 1e-5);
                check_close(what, lse.f, lse.d, nl, 1e-5);
                check_close(what, dqkv.f, dqkv.d, nq, 2e-5);
                if (ti == 0) {
                    memcpy(y1, y.f, ny * sizeof *y1);
                    memcpy(d1, dqkv.f, nq * sizeof *d1);
                } else {
                    /* Work items own their outputs: the thread count
                     * changes nothing, bit for bit. */
                    assert_memory_equal(y1, y.f, ny * sizeof *y1);
                    assert_memory_equal(d1, dqkv.f, nq * sizeof *d1);
                }
            }
        }
        cdl_free(y1), cdl_free(d1);
        pair *all[] = {&qkv, &dy, &y, &lse, &dqkv};
        for (size_t i = 0; i < 5; i++)
            pair_free(all[i]);
    }
    cdl_backend_destroy(bes[0]);
    cdl_backend_destroy(bes[1]);
}

/* The AVX-512 products against the AVX2 ones (CDL_CPU_NO_AVX512=1 read
 * again after cpu_disable_avx512(0)): y, lse and dqkv bitwise equal, both
 * tiling rows by 4 and summing each element in the same order. (n, T, C,
 * nh): the bench GPT's head of 36 (16 + 16 + 4 masked lanes), T past one
 * block of 64 queries (the mask rules with off > 0), heads of 16 and 64
 * (whole vectors), 72 (64 + 8), 3 and 1, T not a multiple of 4. */
static const int shapes512[][4] = {
    {2, 64, 144, 4}, {1, 140, 72, 2}, {1, 70, 64, 4}, {2, 19, 48, 3}, {1, 66, 72, 1}, {2, 9, 3, 3},
};

static void test_attn_avx512_equals_avx2(void **state)
{
    (void)state;
    if (!cpu_has_avx512() || !cpu_has_avx2()) {
        skip();
        return;
    }
    cdl_backend *be = test_cpu_backend(2);
    for (size_t k = 0; k < sizeof shapes512 / sizeof shapes512[0]; k++) {
        int n = shapes512[k][0], T = shapes512[k][1], C = shapes512[k][2], nh = shapes512[k][3];
        size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
        pair qkv = pair_rand(nq, 600 + k, -1.5, 1.5), dy = pair_rand(ny, 601 + k, -1, 1);
        float *y[2], *lse[2], *dqkv[2];
        for (int p = 0; p < 2; p++) {   /* 0: AVX-512, 1: AVX2 */
            y[p] = cdl_calloc(ny, sizeof(float));
            lse[p] = cdl_calloc(nl, sizeof(float));
            dqkv[p] = cdl_calloc(nq, sizeof(float));
            if (p == 1) {
                test_avx2_only(1);
            }
            run_attn(be, cpu_attn_fwd, cpu_attn_bwd, n, T, C, nh, qkv.f, dy.f, y[p], lse[p],
                     dqkv[p]);
        }
        test_avx2_only(0);
        assert_memory_equal(y[0], y[1], ny * sizeof(float));
        assert_memory_equal(lse[0], lse[1], nl * sizeof(float));
        assert_memory_equal(dqkv[0], dqkv[1], nq * sizeof(float));
        for (int p = 0; p < 2; p++)
            cdl_free(y[p]), cdl_free(lse[p]), cdl_free(dqkv[p]);
        pair_free(&qkv);
        pair_free(&dy);
    }
    cdl_backend_destroy(be);
}

/* Large scores (|S| up to ~400): the max-subtracted softmax must neither
 * overflow nor lose the dominant key. */
static void test_attn_large_scores(void **state)
{
    (void)state;
    int n = 1, T = 70, C = 16, nh = 2;
    size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
    pair qkv = pair_rand(nq, 500, -10, 10), dy = pair_rand(ny, 501, -1, 1);
    pair y = pair_new(ny), lse = pair_new(nl), dqkv = pair_new(nq);
    ref_attn_fwd(n, T, C, nh, qkv.d, y.d, lse.d);
    ref_attn_bwd(n, T, C, nh, qkv.d, dy.d, dqkv.d);
    cdl_backend *be = test_cpu_backend(2);
    run_attn(be, cpu_attn_fwd, cpu_attn_bwd, n, T, C, nh, qkv.f, dy.f, y.f, lse.f, dqkv.f);
    for (size_t i = 0; i < nq; i++)
        assert_true(isfinite(dqkv.f[i]));
    check_close("attn y (large)", y.f, y.d, ny, 1e-5);
    check_close("attn lse (large)", lse.f, lse.d, nl, 1e-5);
    /* Near-one-hot rows: dqkv sums products of scores ~400 with rounding
     * of order 1e-7 relative, so allow the float error of the scores. */
    check_close("attn dqkv (large)", dqkv.f, dqkv.d, nq, 1e-4);
    cdl_backend_destroy(be);
    pair *all[] = {&qkv, &dy, &y, &lse, &dqkv};
    for (size_t i = 0; i < 5; i++)
        pair_free(all[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_attn_gradients),
        cmocka_unit_test(test_ref_attn_definition),
        cmocka_unit_test(test_attn_matches_reference),
        cmocka_unit_test(test_attn_large_scores),
        cmocka_unit_test(test_attn_avx512_equals_avx2),
    };
    /* Twice, like test_kernels: the AVX2 softmax where the CPU has it,
     * then the portable paths. */
    int failed = 0;
    if (cpu_has_avx2())
        failed += cmocka_run_group_tests_name("attention kernels (SIMD)", tests, NULL, NULL);
    cpu_disable_avx512(1);
    failed += cmocka_run_group_tests_name("attention kernels (portable)", tests, NULL, NULL);
    cpu_disable_avx512(0);
    return failed;
}
