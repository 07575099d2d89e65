/* linear_fwd / linear_bwd on the shapes of the AVX2 path (output columns a
 * multiple of 16: the bench GPT's c_attn 144 -> 432, c_fc 144 -> 576,
 * mlp.c_proj 576 -> 144 and a 256-token head, on a few rows: not a
 * multiple of the 6-row tile) against the double-precision reference on 1 and 3 threads,
 * bitwise the same on both; mixed shapes (only the forward's or only the
 * backward's columns a multiple of 16) and the portable path (OpenBLAS)
 * on the same data (db bitwise the same). dw and dx are overwritten, not
 * added to. */
#include <stdio.h>
#include <string.h>

#include "kernel_testutil.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"
#include "ref_ops.h"

typedef struct lin_out {
    float *y, *dx, *dw, *db;
} lin_out;

/* One forward and backward of (n, in, out) on `threads` threads into o
 * (allocated here), checked against the reference. */
static lin_out run_linear(cdl_backend *be, int n, int in, int out, const pair *x, const pair *w,
                          const pair *b, const pair *dy)
{
    int threads = be->threads;
    char what[96];
    size_t ny = (size_t)n * out, nx = (size_t)n * in, nw = (size_t)out * in;
    lin_out o = {cdl_calloc(ny, sizeof(float)), cdl_calloc(nx, sizeof(float)),
                 cdl_calloc(nw, sizeof(float)), cdl_calloc((size_t)out, sizeof(float))};
    size_t nws = be->ops->linear_workspace(be, n, in, out);
    float *ws = cdl_calloc(nws + 1, sizeof *ws);
    double *yd = cdl_calloc(ny, sizeof(double)), *dxd = cdl_calloc(nx, sizeof(double));
    double *dwd = cdl_calloc(nw, sizeof(double)), *dbd = cdl_calloc((size_t)out, sizeof(double));

    ref_linear_fwd(n, in, out, x->d, w->d, b->d, yd);
    be->ops->linear_fwd(be, n, in, out, x->f, w->f, b->f, o.y, ws);
    snprintf(what, sizeof what, "y (n %d, in %d, out %d, %d threads)", n, in, out, threads);
    check_close(what, o.y, yd, ny, 1e-5);

    ref_linear_bwd(n, in, out, x->d, w->d, dy->d, dxd, dwd, dbd);
    for (size_t i = 0; i < nw; i++)   /* overwritten, never added to */
        o.dw[i] = 1e6f;
    for (size_t i = 0; i < nx; i++)
        o.dx[i] = -1e6f;
    be->ops->linear_bwd(be, n, in, out, x->f, w->f, dy->f, o.dx, o.dw, o.db, ws);
    snprintf(what, sizeof what, "dx (n %d, in %d, out %d, %d threads)", n, in, out, threads);
    check_close(what, o.dx, dxd, nx, 1e-5);
    snprintf(what, sizeof what, "dw (n %d, in %d, out %d, %d threads)", n, in, out, threads);
    check_close(what, o.dw, dwd, nw, 1e-5);
    snprintf(what, sizeof what, "db (n %d, in %d, out %d, %d threads)", n, in, out, threads);
    check_close(what, o.db, dbd, (size_t)out, 1e-5);

    /* Without the bias: the forward starts from 0. */
    ref_linear_fwd(n, in, out, x->d, w->d, NULL, yd);
    float *y0 = cdl_calloc(ny, sizeof(float));
    be->ops->linear_fwd(be, n, in, out, x->f, w->f, NULL, y0, ws);
    snprintf(what, sizeof what, "y without bias (n %d, in %d, out %d)", n, in, out);
    check_close(what, y0, yd, ny, 1e-5);

    cdl_free(y0);
    cdl_free(yd);
    cdl_free(dxd);
    cdl_free(dwd);
    cdl_free(dbd);
    cdl_free(ws);
    return o;
}

static void lin_out_free(lin_out *o)
{
    cdl_free(o->y);
    cdl_free(o->dx);
    cdl_free(o->dw);
    cdl_free(o->db);
}

/* (n, in, out): the bench GPT's products on a few rows (n % 6 != 0, and
 * n < 6), a head of 256, forward-only and backward-only fast shapes, and
 * batches of more rows than one block of dw's sum (64). */
static const int shapes[][3] = {{13, 144, 432}, {7, 144, 576}, {7, 576, 144}, {5, 144, 256},
                                {5, 32, 16},    {70, 20, 32},  {70, 32, 20},  {130, 48, 48}};

static void test_linear_fast_path(void **state)
{
    (void)state;
    cdl_backend *be1 = test_cpu_backend(1), *be3 = test_cpu_backend(3);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int n = shapes[k][0], in = shapes[k][1], out = shapes[k][2];
        pair x = pair_rand((size_t)n * in, 500 + k, -1, 1);
        pair w = pair_rand((size_t)out * in, 501 + k, -0.5, 0.5);
        pair b = pair_rand((size_t)out, 502 + k, -1, 1);
        pair dy = pair_rand((size_t)n * out, 503 + k, -1, 1);
        lin_out one = run_linear(be1, n, in, out, &x, &w, &b, &dy);
        lin_out three = run_linear(be3, n, in, out, &x, &w, &b, &dy);
        /* The same bits on any number of threads. */
        assert_memory_equal(one.y, three.y, (size_t)n * out * sizeof(float));
        assert_memory_equal(one.dx, three.dx, (size_t)n * in * sizeof(float));
        assert_memory_equal(one.dw, three.dw, (size_t)out * in * sizeof(float));
        assert_memory_equal(one.db, three.db, (size_t)out * sizeof(float));
        /* The portable path (OpenBLAS) on the same data. */
        cpu_disable_avx512(1);
        lin_out port = run_linear(be3, n, in, out, &x, &w, &b, &dy);
        cpu_disable_avx512(0);
        /* db: every column summed over the rows in order on both paths. */
        assert_memory_equal(one.db, port.db, (size_t)out * sizeof(float));
        lin_out_free(&one);
        lin_out_free(&three);
        lin_out_free(&port);
        pair *all[] = {&x, &w, &b, &dy};
        for (size_t i = 0; i < 4; i++)
            pair_free(all[i]);
    }
    cdl_backend_destroy(be1);
    cdl_backend_destroy(be3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_fast_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
