/* linear_fwd / linear_bwd on the shapes of the AVX2 path (output columns a
 * multiple of 16: the bench GPT's c_attn 144 -> 432, c_fc 144 -> 576,
 * mlp.c_proj 576 -> 144 and a 256-token head, on a few rows: not a
 * multiple of the 6-row tile) against the double-precision reference on 1 and 3 threads,
 * bitwise the same on both; mixed shapes (only the forward's or only the
 * backward's columns a multiple of 16) and the portable path (OpenBLAS)
 * on the same data (db bitwise the same). dw and dx are overwritten, not
 * added to. The fused ops (a product and its activation or residual add)
 * give the bits of the separate ops. */
#include <stdio.h>
#include <string.h>

#include "avx512_testutil.h"
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

/* The four results of (n, in, out) bitwise equal. */
static void assert_lin_equal(const lin_out *a, const lin_out *b, int n, int in, int out)
{
    assert_memory_equal(a->y, b->y, (size_t)n * out * sizeof(float));
    assert_memory_equal(a->dx, b->dx, (size_t)n * in * sizeof(float));
    assert_memory_equal(a->dw, b->dw, (size_t)out * in * sizeof(float));
    assert_memory_equal(a->db, b->db, (size_t)out * sizeof(float));
}

/* The operands of one test shape: x, w, b, dy drawn from seeds seed.. seed+3. */
typedef struct lin_in {
    pair x, w, b, dy;
} lin_in;

static lin_in lin_in_rand(int n, int in, int out, uint64_t seed)
{
    lin_in v = {pair_rand((size_t)n * in, seed, -1, 1),
                pair_rand((size_t)out * in, seed + 1, -0.5, 0.5),
                pair_rand((size_t)out, seed + 2, -1, 1),
                pair_rand((size_t)n * out, seed + 3, -1, 1)};
    return v;
}

static void lin_in_free(lin_in *v)
{
    pair_free(&v->x);
    pair_free(&v->w);
    pair_free(&v->b);
    pair_free(&v->dy);
}

static lin_out run_lin_in(cdl_backend *be, int n, int in, int out, const lin_in *v)
{
    return run_linear(be, n, in, out, &v->x, &v->w, &v->b, &v->dy);
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
        lin_in v = lin_in_rand(n, in, out, 500 + k);
        lin_out one = run_lin_in(be1, n, in, out, &v);
        lin_out three = run_lin_in(be3, n, in, out, &v);
        /* The same bits on any number of threads. */
        assert_lin_equal(&one, &three, n, in, out);
        /* The portable path (OpenBLAS) on the same data. */
        cpu_disable_avx512(1);
        lin_out port = run_lin_in(be3, n, in, out, &v);
        cpu_disable_avx512(0);
        /* db: every column summed over the rows in order on both paths. */
        assert_memory_equal(one.db, port.db, (size_t)out * sizeof(float));
        lin_out_free(&one);
        lin_out_free(&three);
        lin_out_free(&port);
        lin_in_free(&v);
    }
    cdl_backend_destroy(be1);
    cdl_backend_destroy(be3);
}

/* The AVX-512 path against the AVX2 one (CDL_CPU_NO_AVX512=1 read again
 * after cpu_disable_avx512(0)): y, dx, dw and db bitwise equal, since both
 * sum every element in the same order. (n, in, out): the bench GPT's
 * products with n past a few 8-row tiles and remainders of 4- and 1-row
 * tiles (43, 29, 19), k past a step of the forward's and dx's sums (128:
 * 576 = 4.5 steps) and of dw's (n = 300: 2 steps and a part), columns
 * that are not a multiple of the 48-column tile (16, 32, 80 = 48 + 32,
 * 256 = 5 x 48 + 16), and shapes where only one side's columns are a
 * multiple of 16. */
static const int shapes512[][3] = {{43, 144, 432}, {29, 576, 144}, {19, 144, 576},
                                   {31, 144, 144}, {17, 144, 256}, {300, 48, 80},
                                   {9, 16, 16},    {41, 20, 32},   {41, 32, 20}};

static void test_linear_avx512_equals_avx2(void **state)
{
    (void)state;
    if (!cpu_has_avx512() || !cpu_has_avx2()) {
        skip();
        return;
    }
    cdl_backend *be1 = test_cpu_backend(1), *be3 = test_cpu_backend(3);
    for (size_t k = 0; k < sizeof shapes512 / sizeof shapes512[0]; k++) {
        int n = shapes512[k][0], in = shapes512[k][1], out = shapes512[k][2];
        lin_in v = lin_in_rand(n, in, out, 700 + k);
        lin_out z1 = run_lin_in(be1, n, in, out, &v);
        lin_out z3 = run_lin_in(be3, n, in, out, &v);
        test_avx2_only(1);
        lin_out y = run_lin_in(be1, n, in, out, &v);
        test_avx2_only(0);
        assert_lin_equal(&z1, &y, n, in, out);
        assert_lin_equal(&z3, &y, n, in, out);
        lin_out_free(&z1);
        lin_out_free(&z3);
        lin_out_free(&y);
        lin_in_free(&v);
    }
    cdl_backend_destroy(be1);
    cdl_backend_destroy(be3);
}

/* ------------------------------------------------------------ fused ops */

/* linear_act_fwd, linear_add_fwd and linear_act_bwd against linear_fwd /
 * linear_bwd followed by act_fwd, add and act_bwd on the same backend:
 * bitwise equal (the same elementwise code on whole rows). For the GELUs
 * also linear_act_grad_fwd (ay as act_fwd's; g as the factor act_bwd
 * applies: its dx for dy = 1) and linear_mul_bwd from that factor (as
 * linear_act_bwd). */
static void check_fused(cdl_backend *be, int n, int in, int out, cdl_act act, uint64_t seed)
{
    const cdl_backend_ops *op = be->ops;
    lin_in v = lin_in_rand(n, in, out, seed);
    pair r = pair_rand((size_t)n * out, seed + 4, -1, 1);
    pair ax = pair_rand((size_t)n * in, seed + 5, -3, 3);   /* the activation's input */
    size_t ny = (size_t)n * out, nx = (size_t)n * in, nw = (size_t)out * in;
    size_t nws = op->linear_workspace(be, n, in, out);
    float *ws = cdl_calloc(nws + 1, sizeof *ws);
    float *y1 = cdl_calloc(ny, sizeof *y1), *a1 = cdl_calloc(ny, sizeof *a1);
    float *y2 = cdl_calloc(ny, sizeof *y2), *a2 = cdl_calloc(ny, sizeof *a2);

    op->linear_fwd(be, n, in, out, v.x.f, v.w.f, v.b.f, y1, ws);
    op->act_fwd(be, act, 0.01f, ny, y1, a1);
    op->linear_act_fwd(be, n, in, out, v.x.f, v.w.f, v.b.f, act, 0.01f, y2, a2, ws);
    assert_memory_equal(y1, y2, ny * sizeof *y1);
    assert_memory_equal(a1, a2, ny * sizeof *a1);

    op->add(be, ny, y1, r.f, a1);
    op->linear_add_fwd(be, n, in, out, v.x.f, v.w.f, v.b.f, r.f, a2, ws);
    assert_memory_equal(a1, a2, ny * sizeof *a1);

    /* x = act(ax): the product's input is the activation's output. */
    float *x = cdl_calloc(nx, sizeof *x);
    op->act_fwd(be, act, 0.01f, nx, ax.f, x);
    float *dx1 = cdl_calloc(nx, sizeof *dx1), *dx2 = cdl_calloc(nx, sizeof *dx2);
    float *dw1 = cdl_calloc(nw, sizeof *dw1), *dw2 = cdl_calloc(nw, sizeof *dw2);
    float *db1 = cdl_calloc((size_t)out, sizeof *db1), *db2 = cdl_calloc((size_t)out, sizeof *db2);
    op->linear_bwd(be, n, in, out, x, v.w.f, v.dy.f, dx1, dw1, db1, ws);
    op->act_bwd(be, act, 0.01f, nx, ax.f, x, dx1, dx1);
    op->linear_act_bwd(be, n, in, out, x, v.w.f, v.dy.f, act, 0.01f, ax.f, dx2, dw2, db2, ws);
    assert_memory_equal(dx1, dx2, nx * sizeof *dx1);
    assert_memory_equal(dw1, dw2, nw * sizeof *dw1);
    assert_memory_equal(db1, db2, (size_t)out * sizeof *db1);
    /* No dx (the first layer): the weight gradients alone. */
    memset(dw2, 0, nw * sizeof *dw2);
    op->linear_act_bwd(be, n, in, out, x, v.w.f, v.dy.f, act, 0.01f, ax.f, NULL, dw2, db2, ws);
    assert_memory_equal(dw1, dw2, nw * sizeof *dw1);

    if (act == CDL_ACT_GELU || act == CDL_ACT_GELU_TANH) {
        assert_non_null(op->linear_act_grad_fwd);
        assert_non_null(op->linear_mul_bwd);
        /* Forward: a1 = act(y1); the factor at y1 is act_bwd's dx for dy = 1. */
        float *ones = cdl_calloc(ny > nx ? ny : nx, sizeof *ones);
        float *f1 = cdl_calloc(ny, sizeof *f1);
        for (size_t i = 0; i < (ny > nx ? ny : nx); i++)
            ones[i] = 1.0f;
        op->act_fwd(be, act, 0.01f, ny, y1, a1);
        op->act_bwd(be, act, 0.01f, ny, y1, a1, ones, f1);
        memset(a2, 0, ny * sizeof *a2);
        op->linear_act_grad_fwd(be, n, in, out, v.x.f, v.w.f, v.b.f, act, 0.01f, y2, a2, ws);
        assert_memory_equal(a1, a2, ny * sizeof *a1);
        assert_memory_equal(f1, y2, ny * sizeof *f1);
        /* Backward from the factor at ax: linear_act_bwd's bits (dx1, dw1, db1). */
        float *g = cdl_calloc(nx, sizeof *g);
        op->act_bwd(be, act, 0.01f, nx, ax.f, x, ones, g);
        memset(dx2, 0, nx * sizeof *dx2);
        memset(dw2, 0, nw * sizeof *dw2);
        memset(db2, 0, (size_t)out * sizeof *db2);
        op->linear_mul_bwd(be, n, in, out, x, v.w.f, v.dy.f, g, dx2, dw2, db2, ws);
        assert_memory_equal(dx1, dx2, nx * sizeof *dx1);
        assert_memory_equal(dw1, dw2, nw * sizeof *dw1);
        assert_memory_equal(db1, db2, (size_t)out * sizeof *db1);
        /* No dx: linear_bwd's own path (under valgrind, on the small
         * shapes only). */
        if (test_size(1, nx < 2048)) {
            memset(dw2, 0, nw * sizeof *dw2);
            op->linear_mul_bwd(be, n, in, out, x, v.w.f, v.dy.f, g, NULL, dw2, db2, ws);
            assert_memory_equal(dw1, dw2, nw * sizeof *dw1);
        }
        cdl_free(g);
        cdl_free(f1);
        cdl_free(ones);
    }

    cdl_free(x);
    cdl_free(dx1);
    cdl_free(dx2);
    cdl_free(dw1);
    cdl_free(dw2);
    cdl_free(db1);
    cdl_free(db2);
    cdl_free(y1);
    cdl_free(y2);
    cdl_free(a1);
    cdl_free(a2);
    cdl_free(ws);
    pair_free(&r);
    pair_free(&ax);
    lin_in_free(&v);
}

/* (n, in, out): the GPT's MLP (both products fast, rows past several
 * blocks of 48 and a tile remainder), the residual projection, a fast
 * forward with an OpenBLAS backward and the reverse, and neither. */
static const int fused_shapes[][3] = {{107, 144, 576}, {61, 576, 144}, {13, 20, 32},
                                      {13, 32, 20},    {9, 20, 24}};

static void fused_all(cdl_backend *be1, cdl_backend *be3)
{
    static const cdl_act acts[] = {CDL_ACT_GELU, CDL_ACT_GELU_TANH, CDL_ACT_SILU,
                                   CDL_ACT_SIGMOID, CDL_ACT_TANH, CDL_ACT_LEAKYRELU};
    /* Under valgrind (test_size) the two large shapes take turns with the
     * activations: the epilogue's row ranges depend on the shape alone and
     * run each activation's range function, so every activation still
     * meets a shape with both products fast, and the small shapes take all. */
    const int turns = (int)test_size(0, 1);
    for (size_t k = 0; k < sizeof fused_shapes / sizeof fused_shapes[0]; k++)
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
            const int *sh = fused_shapes[k];
            if (turns && k < 2 && a % 2 != k)
                continue;
            check_fused(be1, sh[0], sh[1], sh[2], acts[a], 900 + 10 * k + a);
            check_fused(be3, sh[0], sh[1], sh[2], acts[a], 900 + 10 * k + a);
        }
}

static void test_linear_fused_bitwise(void **state)
{
    (void)state;
    cdl_backend *be1 = test_cpu_backend(1), *be3 = test_cpu_backend(3);
    fused_all(be1, be3);
    if (cpu_has_avx512() && cpu_has_avx2()) {
        test_avx2_only(1);
        fused_all(be1, be3);
        test_avx2_only(0);
    }
    cpu_disable_avx512(1);   /* the portable paths */
    fused_all(be1, be3);
    cpu_disable_avx512(0);
    cdl_backend_destroy(be1);
    cdl_backend_destroy(be3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_fast_path),
        cmocka_unit_test(test_linear_avx512_equals_avx2),
        cmocka_unit_test(test_linear_fused_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
