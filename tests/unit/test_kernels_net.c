/* The ops of networks with branches (batch norm in pieces, global average
 * pooling, activations, add/accumulate/channel_copy, label smoothing): the
 * double-precision references (ref_ops.c) against finite differences, and
 * the CPU backend against the references, on 1 and 3 threads, with the
 * AVX-512 kernels and the portable paths. */
#include <string.h>

#include "kernel_testutil.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"
#include "ref_ops.h"

#define BN_EPS 1e-5

/* ------------------------------------------------------------ references vs finite differences */

typedef struct bn_fd {
    int n, c, hw, relu;
    double *x, *gamma, *beta, *r, *y;
} bn_fd;

static double bn_loss(void *vctx)
{
    bn_fd *b = vctx;
    ref_bn_train_fwd(b->n, b->c, b->hw, b->x, b->gamma, b->beta, BN_EPS, b->relu, b->y, NULL, NULL);
    return dot(b->r, b->y, (size_t)b->n * b->c * b->hw);
}

static void test_ref_bn_gradients(void **state)
{
    (void)state;
    const int shapes[][3] = {{3, 2, 5}, {4, 3, 1}, {1, 2, 7}};
    for (size_t k = 0; k < 3; k++)
        for (int relu = 0; relu <= 1; relu++) {
            int n = shapes[k][0], c = shapes[k][1], hw = shapes[k][2];
            size_t nx = (size_t)n * c * hw;
            pair x = pair_rand(nx, 100 + k, -2, 2), g = pair_rand(c, 101 + k, 0.5, 1.5);
            pair be = pair_rand(c, 102 + k, -0.5, 0.5), r = pair_rand(nx, 103 + k, -1, 1);
            pair y = pair_new(nx), dx = pair_new(nx), dg = pair_new(c), db = pair_new(c);
            ref_bn_train_fwd(n, c, hw, x.d, g.d, be.d, BN_EPS, relu, y.d, NULL, NULL);
            ref_bn_train_bwd(n, c, hw, x.d, g.d, BN_EPS, relu, y.d, r.d, dx.d, dg.d, db.d);
            bn_fd b = {n, c, hw, relu, x.d, g.d, be.d, r.d, y.d};
            fd_check("bn dx", bn_loss, &b, x.d, nx, dx.d);
            fd_check("bn dgamma", bn_loss, &b, g.d, (size_t)c, dg.d);
            fd_check("bn dbeta", bn_loss, &b, be.d, (size_t)c, db.d);
            pair *all[] = {&x, &g, &be, &r, &y, &dx, &dg, &db};
            for (size_t i = 0; i < 8; i++)
                pair_free(all[i]);
        }
}

typedef struct gap_fd {
    int n, c, hw;
    double *x, *r, *y;
} gap_fd;

static double gap_loss(void *vctx)
{
    gap_fd *g = vctx;
    ref_gap_fwd(g->n, g->c, g->hw, g->x, g->y);
    return dot(g->r, g->y, (size_t)g->n * g->c);
}

static void test_ref_gap_gradient(void **state)
{
    (void)state;
    int n = 2, c = 3, hw = 10;
    pair x = pair_rand((size_t)n * c * hw, 110, -1, 1), r = pair_rand((size_t)n * c, 111, -1, 1);
    pair y = pair_new((size_t)n * c), dx = pair_new(x.n);
    ref_gap_bwd(n, c, hw, r.d, dx.d);
    gap_fd g = {n, c, hw, x.d, r.d, y.d};
    fd_check("gap dx", gap_loss, &g, x.d, x.n, dx.d);
    pair *all[] = {&x, &r, &y, &dx};
    for (size_t i = 0; i < 4; i++)
        pair_free(all[i]);
}

static const cdl_act acts[] = {CDL_ACT_RELU, CDL_ACT_GELU, CDL_ACT_GELU_TANH, CDL_ACT_SILU,
                               CDL_ACT_SIGMOID, CDL_ACT_TANH, CDL_ACT_LEAKYRELU};
static const char *act_names[] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
                                  "leakyrelu"};
#define N_ACTS (sizeof acts / sizeof acts[0])

static void test_ref_act_gradients(void **state)
{
    (void)state;
    for (size_t a = 0; a < N_ACTS; a++)
        for (double x = -6.05; x < 6.0; x += 0.1) {   /* never exactly 0 (the kinks) */
            const double h = 1e-5, alpha = 0.07;
            double num = (ref_act(acts[a], alpha, x + h) - ref_act(acts[a], alpha, x - h)) / (2 * h);
            double ana = ref_act_grad(acts[a], alpha, x);
            if (fabs(num - ana) > 1e-7) {
                print_error("%s'(%g): finite difference %.10g, analytic %.10g\n", act_names[a], x,
                            num, ana);
                fail();
            }
        }
}

typedef struct xls_fd {
    int n, k;
    double eps, *z, *dz, *loss;
    const int32_t *labels;
    int32_t *pred;
} xls_fd;

static double xls_loss(void *vctx)
{
    xls_fd *c = vctx;
    ref_xent_ls(c->n, c->k, c->z, c->labels, c->eps, 0.5, c->dz, c->loss, c->pred);
    double s = 0.0;
    for (int i = 0; i < c->n; i++)
        s += c->loss[i];
    return s * 0.5;
}

static void test_ref_xent_ls_gradient(void **state)
{
    (void)state;
    int n = 3, k = 5;
    int32_t labels[3] = {4, 0, 2}, pred[3];
    double loss[3];
    pair z = pair_rand((size_t)n * k, 120, -3, 3), dz = pair_new(z.n), scratch = pair_new(z.n);
    ref_xent_ls(n, k, z.d, labels, 0.1, 0.5, dz.d, loss, pred);
    xls_fd c = {n, k, 0.1, z.d, scratch.d, loss, labels, pred};
    fd_check("xent label_smoothing dlogits", xls_loss, &c, z.d, z.n, dz.d);
    pair_free(&z);
    pair_free(&dz);
    pair_free(&scratch);
}

/* ------------------------------------------------------------ CPU backend vs references */

static const int bn_shapes[][3] = {{4, 3, 37}, {8, 16, 64}, {5, 2, 1}, {2, 5, 300}, {3, 70, 9},
                                   {6, 130, 1},    /* flat features, 3 channel blocks */
                                   {7, 3, 5}};     /* planes under BN_TINY (kernels/cpu/bnorm.c) */

/* bn_train_fwd (one call) leaves the bits bn_sum, bn_sqdev and bn_apply
 * left in y, sum, sqdev and saved; y may alias x. */
static void bn_train_fwd_same_bits(cdl_backend *be, int n, int c, int hw, const float *x,
                                   const float *g, const float *b, int relu, const float *y,
                                   const float *sum, const float *sq, const float *saved)
{
    size_t nx = (size_t)n * c * hw;
    float *y1 = cdl_calloc(nx, sizeof *y1), *sum1 = cdl_calloc((size_t)c + 1, sizeof *sum1);
    float *sq1 = cdl_calloc(c, sizeof *sq1), *saved1 = cdl_calloc(2 * (size_t)c + 1, sizeof *saved1);
    be->ops->bn_train_fwd(be, n, c, hw, x, (float)BN_EPS, g, b, relu, y1, sum1, sq1, saved1);
    assert_memory_equal(y1, y, nx * sizeof *y1);
    assert_memory_equal(sum1, sum, ((size_t)c + 1) * sizeof *sum1);
    assert_memory_equal(sq1, sq, (size_t)c * sizeof *sq1);
    assert_memory_equal(saved1, saved, (2 * (size_t)c + 1) * sizeof *saved1);
    memcpy(y1, x, nx * sizeof *y1);
    be->ops->bn_train_fwd(be, n, c, hw, y1, (float)BN_EPS, g, b, relu, y1, sum1, sq1, saved1);
    assert_memory_equal(y1, y, nx * sizeof *y1);
    cdl_free(y1), cdl_free(sum1), cdl_free(sq1), cdl_free(saved1);
}

/* bn_train_fwd_add_relu leaves the bits of bn_train_fwd (no ReLU) and then
 * add_relu with res; y may alias x or res. */
static void bn_add_relu_same_bits(cdl_backend *be, int n, int c, int hw, const float *x,
                                  const float *g, const float *b)
{
    size_t nx = (size_t)n * c * hw;
    pair res = pair_rand(nx, 77, -1, 1);
    float *want = cdl_calloc(nx, sizeof *want), *got = cdl_calloc(nx, sizeof *got);
    float *st = cdl_calloc(4 * (size_t)c + 2, sizeof *st), *st1 = cdl_calloc(4 * (size_t)c + 2, sizeof *st1);
    be->ops->bn_train_fwd(be, n, c, hw, x, (float)BN_EPS, g, b, 0, want, st, st + c + 1,
                          st + 2 * c + 1);
    be->ops->add_relu(be, nx, want, res.f, want);
    be->ops->bn_train_fwd_add_relu(be, n, c, hw, x, (float)BN_EPS, g, b, res.f, got, st1,
                                   st1 + c + 1, st1 + 2 * c + 1);
    assert_memory_equal(got, want, nx * sizeof *got);
    assert_memory_equal(st1, st, (4 * (size_t)c + 2) * sizeof *st);
    memcpy(got, x, nx * sizeof *got);   /* y aliases x */
    be->ops->bn_train_fwd_add_relu(be, n, c, hw, got, (float)BN_EPS, g, b, res.f, got, st1,
                                   st1 + c + 1, st1 + 2 * c + 1);
    assert_memory_equal(got, want, nx * sizeof *got);
    memcpy(got, res.f, nx * sizeof *got);   /* y aliases res */
    be->ops->bn_train_fwd_add_relu(be, n, c, hw, x, (float)BN_EPS, g, b, got, got, st1,
                                   st1 + c + 1, st1 + 2 * c + 1);
    assert_memory_equal(got, want, nx * sizeof *got);
    pair_free(&res);
    cdl_free(want), cdl_free(got), cdl_free(st), cdl_free(st1);
}

/* bn_train_bwd (one call) leaves the bits of bn_bwd_sums and bn_bwd_apply;
 * without dx only the sums. */
static void bn_train_bwd_same_bits(cdl_backend *be, int n, int c, int hw, const float *x,
                                   const float *yr, const float *dy, const float *saved,
                                   const float *g, const float *dg, const float *db,
                                   const float *dx)
{
    size_t nx = (size_t)n * c * hw;
    float *dx1 = cdl_calloc(nx, sizeof *dx1), *dg1 = cdl_calloc(c, sizeof *dg1);
    float *db1 = cdl_calloc(c, sizeof *db1);
    for (int with_dx = 0; with_dx <= 1; with_dx++) {
        be->ops->bn_train_bwd(be, n, c, hw, x, yr, dy, saved, g, dg1, db1, with_dx ? dx1 : NULL);
        assert_memory_equal(dg1, dg, (size_t)c * sizeof *dg1);
        assert_memory_equal(db1, db, (size_t)c * sizeof *db1);
    }
    assert_memory_equal(dx1, dx, nx * sizeof *dx1);
    cdl_free(dx1), cdl_free(dg1), cdl_free(db1);
}

/* BatchNorm2d training forward, running statistics and backward from the
 * pieces, fused ReLU on and off, against ref_bn_train_*. */
static void test_bn_train_matches_reference(void **state)
{
    (void)state;
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        const cdl_backend_ops *op = be->ops;
        for (size_t k = 0; k < sizeof bn_shapes / sizeof bn_shapes[0]; k++)
            for (int relu = 0; relu <= 1; relu++) {
                int n = bn_shapes[k][0], c = bn_shapes[k][1], hw = bn_shapes[k][2];
                size_t nx = (size_t)n * c * hw;
                pair x = pair_rand(nx, 200 + k, -1, 3), g = pair_rand(c, 201 + k, 0.5, 1.5);
                pair b = pair_rand(c, 202 + k, -0.5, 0.5), dy = pair_rand(nx, 203 + k, -1, 1);
                pair y = pair_new(nx), dx = pair_new(nx), dg = pair_new(c), db = pair_new(c);
                pair mean = pair_new(c), var = pair_new(c);
                float *sum = cdl_calloc((size_t)c + 1, sizeof *sum), *sq = cdl_calloc(c, sizeof *sq);
                float *saved = cdl_calloc(2 * (size_t)c + 1, sizeof *saved);
                float *rm = cdl_calloc(c, sizeof *rm), *rv = cdl_calloc(c, sizeof *rv), nbt = 3.0f;
                for (int i = 0; i < c; i++)
                    rm[i] = 0.25f, rv[i] = 2.0f;

                ref_bn_train_fwd(n, c, hw, x.d, g.d, b.d, BN_EPS, relu, y.d, mean.d, var.d);
                op->bn_sum(be, n, c, hw, x.f, sum);
                assert_true(sum[c] == (float)(n * hw));
                op->bn_sqdev(be, n, c, hw, x.f, sum, sq);
                op->bn_apply(be, n, c, hw, x.f, sum, sq, (float)BN_EPS, g.f, b.f, relu, y.f, saved);
                check_close("bn y", y.f, y.d, nx, 1e-5);
                check_close("bn saved mean", saved, mean.d, (size_t)c, 1e-6);
                bn_train_fwd_same_bits(be, n, c, hw, x.f, g.f, b.f, relu, y.f, sum, sq, saved);
                if (!relu)
                    bn_add_relu_same_bits(be, n, c, hw, x.f, g.f, b.f);
                for (int i = 0; i < c; i++)
                    assert_true(fabs(saved[c + i] - 1.0 / sqrt(var.d[i] + BN_EPS)) <
                                1e-5 * saved[c + i]);

                /* PyTorch: momentum 0.1, unbiased running variance. */
                op->bn_running(be, c, sum, sq, 0.1f, rm, rv, &nbt);
                assert_true(nbt == 4.0f);
                double count = (double)n * hw;
                for (int i = 0; i < c; i++) {
                    double em = 0.9 * 0.25 + 0.1 * mean.d[i];
                    double ev = 0.9 * 2.0 + 0.1 * var.d[i] * count / (count - 1);
                    assert_true(fabs(rm[i] - em) < 1e-6 && fabs(rv[i] - ev) < 1e-5);
                }

                ref_bn_train_bwd(n, c, hw, x.d, g.d, BN_EPS, relu, y.d, dy.d, dx.d, dg.d, db.d);
                op->bn_bwd_sums(be, n, c, hw, x.f, relu ? y.f : NULL, dy.f, saved, dg.f, db.f);
                check_close("bn dgamma", dg.f, dg.d, (size_t)c, 1e-5);
                check_close("bn dbeta", db.f, db.d, (size_t)c, 1e-5);
                op->bn_bwd_apply(be, n, c, hw, x.f, relu ? y.f : NULL, dy.f, saved, g.f, db.f, dg.f,
                                 dx.f);
                check_close("bn dx", dx.f, dx.d, nx, 1e-5);
                bn_train_bwd_same_bits(be, n, c, hw, x.f, relu ? y.f : NULL, dy.f, saved, g.f,
                                       dg.f, db.f, dx.f);
                /* dx may alias dy. */
                op->bn_bwd_apply(be, n, c, hw, x.f, relu ? y.f : NULL, dy.f, saved, g.f, db.f, dg.f,
                                 dy.f);
                check_close("bn dx in place", dy.f, dx.d, nx, 1e-5);

                cdl_free(sum), cdl_free(sq), cdl_free(saved), cdl_free(rm), cdl_free(rv);
                pair *all[] = {&x, &g, &b, &dy, &y, &dx, &dg, &db, &mean, &var};
                for (size_t i = 0; i < 10; i++)
                    pair_free(all[i]);
            }
        cdl_backend_destroy(be);
    }
}

/* SyncBatchNorm's contract: the pieces of two "ranks" (halves of the batch)
 * summed between the calls give the whole batch's statistics and input
 * gradient, with each rank's own dgamma/dbeta. */
static void test_bn_pieces_sum_across_ranks(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(2);
    const cdl_backend_ops *op = be->ops;
    int n = 6, h = 3, c = 4, hw = 25;
    size_t nx = (size_t)n * c * hw, half = (size_t)h * c * hw;
    pair x = pair_rand(nx, 300, -1, 2), g = pair_rand(c, 301, 0.5, 1.5), b = pair_rand(c, 302, -1, 1);
    pair dy = pair_rand(nx, 303, -1, 1), y = pair_new(nx), dx = pair_new(nx);
    pair dg = pair_new(c), db = pair_new(c);
    float sum[2][5], sq[2][4], saved[2][9], dgr[2][4], dbr[2][4], red[8];
    float *yf = cdl_calloc(nx, sizeof *yf), *dxf = cdl_calloc(nx, sizeof *dxf);
    for (int r = 0; r < 2; r++)
        op->bn_sum(be, h, c, hw, x.f + r * half, sum[r]);
    for (int i = 0; i <= c; i++)
        sum[0][i] = sum[1][i] = sum[0][i] + sum[1][i];   /* the allreduce */
    assert_true(sum[0][c] == (float)(n * hw));
    for (int r = 0; r < 2; r++)
        op->bn_sqdev(be, h, c, hw, x.f + r * half, sum[r], sq[r]);
    for (int i = 0; i < c; i++)
        sq[0][i] = sq[1][i] = sq[0][i] + sq[1][i];
    for (int r = 0; r < 2; r++)
        op->bn_apply(be, h, c, hw, x.f + r * half, sum[r], sq[r], (float)BN_EPS, g.f, b.f, 1,
                     yf + r * half, saved[r]);
    ref_bn_train_fwd(n, c, hw, x.d, g.d, b.d, BN_EPS, 1, y.d, NULL, NULL);
    check_close("sync bn y", yf, y.d, nx, 1e-5);

    ref_bn_train_bwd(n, c, hw, x.d, g.d, BN_EPS, 1, y.d, dy.d, dx.d, dg.d, db.d);
    for (int r = 0; r < 2; r++)
        op->bn_bwd_sums(be, h, c, hw, x.f + r * half, yf + r * half, dy.f + r * half, saved[r],
                        dgr[r], dbr[r]);
    for (int i = 0; i < c; i++) {
        red[i] = dbr[0][i] + dbr[1][i];
        red[c + i] = dgr[0][i] + dgr[1][i];
    }
    check_close("sync bn dbeta (summed)", red, db.d, (size_t)c, 1e-5);
    check_close("sync bn dgamma (summed)", red + c, dg.d, (size_t)c, 1e-5);
    for (int r = 0; r < 2; r++)
        op->bn_bwd_apply(be, h, c, hw, x.f + r * half, yf + r * half, dy.f + r * half, saved[r],
                         g.f, red, red + c, dxf + r * half);
    check_close("sync bn dx", dxf, dx.d, nx, 1e-5);
    cdl_free(yf);
    cdl_free(dxf);
    pair *all[] = {&x, &g, &b, &dy, &y, &dx, &dg, &db};
    for (size_t i = 0; i < 8; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

/* Evaluation BN on small planes (flat features N x C x 1 x 1 over two
 * channel blocks, and planes under BN_TINY), with and without ReLU and
 * affine, on 1 and 3 threads. */
static void test_bn_eval_small_planes(void **state)
{
    (void)state;
    const int shapes[][3] = {{5, 70, 1}, {4, 3, 5}};
    for (int t = 1; t <= 3; t += 2) {
        cdl_backend *be = test_cpu_backend(t);
        for (size_t k = 0; k < 2; k++) {
            int n = shapes[k][0], c = shapes[k][1], hw = shapes[k][2];
            size_t nx = (size_t)n * c * hw;
            pair x = pair_rand(nx, 410 + k, -2, 2), rm = pair_rand(c, 411, -0.5, 0.5);
            pair rv = pair_rand(c, 412, 0.2, 3), g = pair_rand(c, 413, 0.5, 1.5);
            pair b = pair_rand(c, 414, -1, 1), y = pair_new(nx);
            for (int relu = 0; relu <= 1; relu++) {
                ref_bn_eval(n, c, hw, x.d, rm.d, rv.d, BN_EPS, g.d, b.d, relu, y.d);
                be->ops->bn_eval(be, n, c, hw, x.f, rm.f, rv.f, (float)BN_EPS, g.f, b.f, relu, y.f);
                check_close("bn eval y", y.f, y.d, nx, 1e-5);
                ref_bn_eval(n, c, hw, x.d, rm.d, rv.d, BN_EPS, NULL, NULL, relu, y.d);
                be->ops->bn_eval(be, n, c, hw, x.f, rm.f, rv.f, (float)BN_EPS, NULL, NULL, relu, y.f);
                check_close("bn eval y (affine=False)", y.f, y.d, nx, 1e-5);
            }
            pair *all[] = {&x, &rm, &rv, &g, &b, &y};
            for (size_t i = 0; i < 6; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

/* Evaluation BN (with and without ReLU), and conv+BN folded into one conv
 * whose output equals conv then bn_eval. */
static void test_bn_eval_and_fold(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(3);
    const cdl_backend_ops *op = be->ops;
    int n = 3, c = 6, hw = 49;
    size_t nx = (size_t)n * c * hw;
    pair x = pair_rand(nx, 400, -2, 2), rm = pair_rand(c, 401, -0.5, 0.5);
    pair rv = pair_rand(c, 402, 0.2, 3), g = pair_rand(c, 403, 0.5, 1.5), b = pair_rand(c, 404, -1, 1);
    pair y = pair_new(nx);
    for (int relu = 0; relu <= 1; relu++) {
        ref_bn_eval(n, c, hw, x.d, rm.d, rv.d, BN_EPS, g.d, b.d, relu, y.d);
        op->bn_eval(be, n, c, hw, x.f, rm.f, rv.f, (float)BN_EPS, g.f, b.f, relu, y.f);
        check_close("bn eval y", y.f, y.d, nx, 1e-5);
        ref_bn_eval(n, c, hw, x.d, rm.d, rv.d, BN_EPS, NULL, NULL, relu, y.d);
        op->bn_eval(be, n, c, hw, x.f, rm.f, rv.f, (float)BN_EPS, NULL, NULL, relu, y.f);
        check_close("bn eval y (affine=False)", y.f, y.d, nx, 1e-5);
    }

    cdl_conv2d_desc d = ref_conv_desc(2, 4, 9, 9, c, 3, 3, 1, 1);
    size_t ni = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)c * d.c * 9, ny = (size_t)d.n * c * d.oh * d.ow;
    pair xi = pair_rand(ni, 405, -1, 1), w = pair_rand(nw, 406, -1, 1), cb = pair_rand(c, 407, -1, 1);
    pair yc = pair_new(ny), yb = pair_new(ny);
    float *wf = cdl_calloc(nw, sizeof *wf), *bf = cdl_calloc(c, sizeof *bf);
    float *ws = cdl_calloc(op->conv2d_workspace(be, &d) + 1, sizeof *ws);
    ref_conv2d_fwd(&d, xi.d, w.d, cb.d, yc.d);
    ref_bn_eval(d.n, c, d.oh * d.ow, yc.d, rm.d, rv.d, BN_EPS, g.d, b.d, 1, yb.d);
    op->bn_fold(be, c, d.c * 9, w.f, cb.f, rm.f, rv.f, (float)BN_EPS, g.f, b.f, wf, bf);
    op->conv2d_fwd(be, &d, xi.f, wf, bf, yb.f, ws);
    op->relu_fwd(be, ny, yb.f, yb.f);
    check_close("conv+bn+relu folded", yb.f, yb.d, ny, 1e-5);
    /* No conv bias (the usual conv before a BN). */
    ref_conv2d_fwd(&d, xi.d, w.d, NULL, yc.d);
    ref_bn_eval(d.n, c, d.oh * d.ow, yc.d, rm.d, rv.d, BN_EPS, g.d, b.d, 0, yb.d);
    op->bn_fold(be, c, d.c * 9, w.f, NULL, rm.f, rv.f, (float)BN_EPS, g.f, b.f, wf, bf);
    op->conv2d_fwd(be, &d, xi.f, wf, bf, yb.f, ws);
    check_close("conv+bn folded, no conv bias", yb.f, yb.d, ny, 1e-5);
    cdl_free(wf), cdl_free(bf), cdl_free(ws);
    pair *all[] = {&x, &rm, &rv, &g, &b, &y, &xi, &w, &cb, &yc, &yb};
    for (size_t i = 0; i < 11; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

static void test_gap_matches_reference(void **state)
{
    (void)state;
    const int threads[] = {1, 3};
    const int shapes[][3] = {{2, 3, 1}, {4, 64, 64}, {3, 5, 49}, {64, 10, 17}};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        for (size_t k = 0; k < 4; k++) {
            int n = shapes[k][0], c = shapes[k][1], hw = shapes[k][2];
            size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
            pair x = pair_rand(nx, 500 + k, -1, 1), dy = pair_rand(ny, 501 + k, -1, 1);
            pair y = pair_new(ny), dx = pair_new(nx);
            ref_gap_fwd(n, c, hw, x.d, y.d);
            be->ops->gap_fwd(be, n, c, hw, x.f, y.f);
            check_close("gap y", y.f, y.d, ny, 1e-6);
            ref_gap_bwd(n, c, hw, dy.d, dx.d);
            be->ops->gap_bwd(be, n, c, hw, dy.f, dx.f);
            check_close("gap dx", dx.f, dx.d, nx, 1e-6);
            pair *all[] = {&x, &dy, &y, &dx};
            for (size_t i = 0; i < 4; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

static void test_act_matches_reference(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(3);
    size_t n = 40009;   /* several chunks, odd tail */
    pair x = pair_rand(n, 600, -8, 8), dy = pair_rand(n, 601, -1, 1), y = pair_new(n), dx = pair_new(n);
    x.f[0] = 0.0f, x.f[1] = -0.0f, x.f[2] = 30.0f, x.f[3] = -30.0f, x.f[4] = 100.0f, x.f[5] = -100.0f;
    for (int i = 0; i < 6; i++)
        x.d[i] = x.f[i];
    for (size_t a = 0; a < N_ACTS; a++) {
        float alpha = acts[a] == CDL_ACT_LEAKYRELU ? 0.01f : 0.0f;
        for (size_t i = 0; i < n; i++) {
            y.d[i] = ref_act(acts[a], alpha, x.d[i]);
            dx.d[i] = dy.d[i] * ref_act_grad(acts[a], alpha, x.d[i]);
        }
        be->ops->act_fwd(be, acts[a], alpha, n, x.f, y.f);
        check_close(act_names[a], y.f, y.d, n, 1e-6);
        be->ops->act_bwd(be, acts[a], alpha, n, x.f, y.f, dy.f, dx.f);
        check_close(act_names[a], dx.f, dx.d, n, 2e-6);
        /* relu agrees with relu_fwd exactly */
        if (acts[a] == CDL_ACT_RELU) {
            float *r = cdl_calloc(n, sizeof *r);
            be->ops->relu_fwd(be, n, x.f, r);
            assert_memory_equal(r, y.f, n * sizeof *r);
            cdl_free(r);
        }
    }
    /* LeakyReLU's slope is the option's. */
    be->ops->act_fwd(be, CDL_ACT_LEAKYRELU, 0.2f, 1, (const float[]){-2.0f}, y.f);
    assert_true(y.f[0] == -0.4f);
    pair *all[] = {&x, &dy, &y, &dx};
    for (size_t i = 0; i < 4; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

static void test_add_accumulate_channel_copy(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(3);
    const cdl_backend_ops *op = be->ops;
    size_t n = 50001;
    pair a = pair_rand(n, 700, -1, 1), b = pair_rand(n, 701, -1, 1), y = pair_new(n);
    op->add(be, n, a.f, b.f, y.f);
    for (size_t i = 0; i < n; i++)
        assert_true(y.f[i] == a.f[i] + b.f[i]);
    op->add(be, n, a.f, b.f, a.f);   /* y may alias a */
    assert_memory_equal(a.f, y.f, n * sizeof *y.f);
    op->accumulate(be, n, b.f, y.f);
    for (size_t i = 0; i < n; i++)
        assert_true(y.f[i] == a.f[i] + b.f[i]);

    /* concat (2,3,hw) and (2,5,hw) into (2,8,hw), then split it back */
    int N = 2, hw = 7, c1 = 3, c2 = 5, C = c1 + c2;
    float p1[2 * 3 * 7], p2[2 * 5 * 7], cat[2 * 8 * 7], back[2 * 5 * 7];
    for (size_t i = 0; i < sizeof p1 / sizeof *p1; i++)
        p1[i] = (float)i;
    for (size_t i = 0; i < sizeof p2 / sizeof *p2; i++)
        p2[i] = 1000.0f + (float)i;
    op->channel_copy(be, N, c1, hw, p1, c1, 0, cat, C, 0, 0);
    op->channel_copy(be, N, c2, hw, p2, c2, 0, cat, C, c1, 0);
    for (int img = 0; img < N; img++)
        for (int ch = 0; ch < C; ch++)
            for (int j = 0; j < hw; j++) {
                float want = ch < c1 ? p1[(img * c1 + ch) * hw + j] : p2[(img * c2 + ch - c1) * hw + j];
                assert_true(cat[(img * C + ch) * hw + j] == want);
            }
    op->channel_copy(be, N, c2, hw, cat, C, c1, back, c2, 0, 0);
    assert_memory_equal(back, p2, sizeof back);
    op->channel_copy(be, N, c2, hw, cat, C, c1, back, c2, 0, 1);   /* accumulate */
    for (size_t i = 0; i < sizeof back / sizeof *back; i++)
        assert_true(back[i] == 2.0f * p2[i]);
    pair *all[] = {&a, &b, &y};
    for (size_t i = 0; i < 3; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

/* What the unfused ops leave for relu_bwd_split(y, dy, dx, dx2 = base,
 * acc): g = relu_bwd(y, dy) and want2 = base + g (acc) or g. */
static void split_expected(cdl_backend *be, size_t n, const float *y, const float *dy,
                           const float *base, int acc, float *g, float *want2)
{
    be->ops->relu_bwd(be, n, y, dy, g);
    memcpy(want2, base, n * sizeof *want2);
    if (acc)
        be->ops->accumulate(be, n, g, want2);
    else
        memcpy(want2, g, n * sizeof *want2);
}

/* add_relu, relu_bwd_split and relu_bwd_split_add give the bits of add +
 * relu_fwd, of relu_bwd + copy / accumulate and of accumulate before those
 * (the unfused ops they replace), zeros of both signs and NaN included, in
 * place too. */
static void test_add_relu_matches_unfused(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(3);
    const cdl_backend_ops *op = be->ops;
    size_t n = 40009;   /* several chunks, odd tail */
    pair a = pair_rand(n, 710, -1, 1), b = pair_rand(n, 711, -1, 1), dy = pair_rand(n, 712, -1, 1);
    pair base = pair_rand(n, 713, -1, 1);
    float *want = cdl_calloc(n, sizeof *want), *got = cdl_calloc(n, sizeof *got);
    float *want2 = cdl_calloc(n, sizeof *want2), *got2 = cdl_calloc(n, sizeof *got2);
    a.f[0] = 0.5f, b.f[0] = -0.5f;         /* +0 */
    a.f[1] = -0.0f, b.f[1] = -0.0f;        /* -0 */
    a.f[2] = NAN;
    a.f[n - 1] = -0.25f, b.f[n - 1] = 0.25f;
    dy.f[5] = NAN;

    op->add(be, n, a.f, b.f, want);
    op->relu_fwd(be, n, want, want);
    op->add_relu(be, n, a.f, b.f, got);
    assert_memory_equal(got, want, n * sizeof *got);
    memcpy(got, b.f, n * sizeof *got);
    op->add_relu(be, n, a.f, got, got);    /* y may alias b */
    assert_memory_equal(got, want, n * sizeof *got);
    for (size_t i = 0; i < 3; i++)
        assert_true(i == 2 ? isnan(got[i]) : got[i] == 0.0f);

    const float *y = want;   /* the forward output the backward reads */
    for (int acc = 0; acc <= 1; acc++) {
        float *g = cdl_calloc(n, sizeof *g);
        split_expected(be, n, y, dy.f, base.f, acc, g, want2);
        memcpy(got, dy.f, n * sizeof *got);
        memcpy(got2, base.f, n * sizeof *got2);
        op->relu_bwd_split(be, n, y, got, got, got2, acc);   /* dx aliases dy */
        assert_memory_equal(got, g, n * sizeof *got);
        assert_memory_equal(got2, want2, n * sizeof *got2);

        /* relu_bwd_split_add: accumulate (b into dy) then the split. */
        float *sum = cdl_calloc(n, sizeof *sum);
        memcpy(sum, dy.f, n * sizeof *sum);
        op->accumulate(be, n, b.f, sum);
        split_expected(be, n, y, sum, base.f, acc, g, want2);
        memcpy(got, dy.f, n * sizeof *got);
        memcpy(got2, base.f, n * sizeof *got2);
        op->relu_bwd_split_add(be, n, y, got, b.f, got, got2, acc);
        assert_memory_equal(got, g, n * sizeof *got);
        assert_memory_equal(got2, want2, n * sizeof *got2);
        memset(got, 0, n * sizeof *got);
        op->relu_bwd_split_add(be, n, y, dy.f, b.f, got, NULL, acc);   /* dx only */
        assert_memory_equal(got, g, n * sizeof *got);
        cdl_free(sum);
        cdl_free(g);
    }
    pair *all[] = {&a, &b, &dy, &base};
    for (size_t i = 0; i < 4; i++)
        pair_free(all[i]);
    cdl_free(want);
    cdl_free(got);
    cdl_free(want2);
    cdl_free(got2);
    cdl_backend_destroy(be);
}

static void test_xent_ls_matches_reference(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(2);
    int n = 37, k = 10;
    int32_t labels[37], pred[37], pred_ref[37], pred0[37];
    for (int i = 0; i < n; i++)
        labels[i] = (i * 7) % k;
    pair z = pair_rand((size_t)n * k, 800, -5, 5), dz = pair_new(z.n), loss = pair_new(n);
    float *dz0 = cdl_calloc(z.n, sizeof *dz0), *loss0 = cdl_calloc(n, sizeof *loss0);
    const double eps[] = {0.0, 0.1, 0.5};
    for (size_t e = 0; e < 3; e++) {
        ref_xent_ls(n, k, z.d, labels, eps[e], 0.25, dz.d, loss.d, pred_ref);
        be->ops->xent_ls_fwd_bwd(be, n, k, z.f, labels, (float)eps[e], 0.25f, dz.f, loss.f, pred);
        check_close("xent ls dlogits", dz.f, dz.d, z.n, 1e-6);
        check_close("xent ls loss", loss.f, loss.d, (size_t)n, 1e-6);
        assert_memory_equal(pred, pred_ref, sizeof pred);
    }
    /* eps = 0 is xent_fwd_bwd, bit for bit. */
    be->ops->xent_ls_fwd_bwd(be, n, k, z.f, labels, 0.0f, 0.25f, dz.f, loss.f, pred);
    be->ops->xent_fwd_bwd(be, n, k, z.f, labels, 0.25f, dz0, loss0, pred0);
    assert_memory_equal(dz.f, dz0, z.n * sizeof *dz0);
    assert_memory_equal(loss.f, loss0, (size_t)n * sizeof *loss0);
    cdl_free(dz0), cdl_free(loss0);
    pair *all[] = {&z, &dz, &loss};
    for (size_t i = 0; i < 3; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

/* The per-plane sums of batch norm in the AVX2 kernels' order, in C: four
 * accumulators of 4 double lanes over every 16 floats (floats 0-3, 4-7,
 * 8-11, 12-15), a last 8 into the first two, the accumulators added
 * ((0+1)+(2+3)) and their lanes ((0+2)+(1+3)), then the hw % 8 tail in
 * order. d = x - mean is rounded to float before it is widened. */
static double plane_sum_avx2_order(const float *x, int hw, int sqdev, float mean)
{
    double acc[4][4] = {{0}}, tail = 0.0;
    int i = 0;
    for (; i + 8 <= hw; i += 8)
        for (int j = 0; j < 8; j++) {
            float d = sqdev ? x[i + j] - mean : x[i + j];
            int k = (i % 16 == 8 ? 2 : 0) + j / 4;
            acc[k][j % 4] += sqdev ? (double)d * d : d;
        }
    for (int j = i; j < hw; j++) {
        float d = sqdev ? x[j] - mean : x[j];
        tail += sqdev ? (double)d * d : d;
    }
    double t[4];
    for (int l = 0; l < 4; l++)
        t[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    return ((t[0] + t[2]) + (t[1] + t[3])) + (i < hw ? tail : 0.0);
}

/* The SIMD sum and sqdev kernels (AVX-512's included) keep the AVX2 order:
 * cpu_plane_sum's double, and bn_sqdev of one plane, bitwise equal to the
 * C model above, for full 16s, a last 8 and odd tails. */
static void test_bn_sums_avx2_order(void **state)
{
    (void)state;
    if (!cpu_has_avx2())
        skip();
    cdl_backend *be = test_cpu_backend(1);
    static const int hws[] = {1024, 64, 49, 24, 8, 7, 300};
    for (size_t t = 0; t < sizeof hws / sizeof hws[0]; t++) {
        int hw = hws[t];
        pair x = pair_rand((size_t)hw, 60 + (unsigned)t, -3, 5);
        double want = plane_sum_avx2_order(x.f, hw, 0, 0.0f);
        double got = cpu_plane_sum(x.f, hw);
        assert_memory_equal(&got, &want, sizeof got);
        float sum[2], sq;
        be->ops->bn_sum(be, 1, 1, hw, x.f, sum);
        float mean = (float)((double)sum[0] / sum[1]);
        be->ops->bn_sqdev(be, 1, 1, hw, x.f, sum, &sq);
        assert_true(sq == (float)plane_sum_avx2_order(x.f, hw, 1, mean));
        pair_free(&x);
    }
    cdl_backend_destroy(be);
}

/* Flat batch norm (N,C,1,1: BatchNorm1d, the heads' BN) runs its row
 * loops 8 channels at a time with AVX2 (kernels/cpu/bnorm.c, *_row1_avx2)
 * wherever the CPU has AVX2: every output bitwise equal to the portable
 * loops', for channel counts off the vector width, one image, and more
 * channels than a block (BN_FLAT), on 1 and 3 threads. */
static void bn_flat_outputs(int threads, int n, int c, float **out)
{
    cdl_backend *be = test_cpu_backend(threads);
    const cdl_backend_ops *op = be->ops;
    size_t nx = (size_t)n * c, k = 0;
    pair x = pair_rand(nx, 500, -1, 3), g = pair_rand(c, 501, 0.5, 1.5);
    pair b = pair_rand(c, 502, -0.5, 0.5), dy = pair_rand(nx, 503, -1, 1);
    pair rm = pair_rand(c, 504, -0.5, 0.5), rv = pair_rand(c, 505, 0.2, 3);
    for (int relu = 0; relu <= 1; relu++) {
        float *y = out[k++], *sum = out[k++], *sq = out[k++], *saved = out[k++];
        op->bn_train_fwd(be, n, c, 1, x.f, (float)BN_EPS, g.f, b.f, relu, y, sum, sq, saved);
        float *dg = out[k++], *db = out[k++], *dx = out[k++];
        op->bn_train_bwd(be, n, c, 1, x.f, relu ? y : NULL, dy.f, saved, g.f, dg, db, dx);
        float *ye = out[k++];
        op->bn_eval(be, n, c, 1, x.f, rm.f, rv.f, (float)BN_EPS, g.f, b.f, relu, ye);
    }
    pair *all[] = {&x, &g, &b, &dy, &rm, &rv};
    for (size_t i = 0; i < 6; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

static void test_bn_flat_simd_same_bits(void **state)
{
    (void)state;
    if (!cpu_has_avx2())
        skip();   /* the portable run of this file: nothing to compare */
    const int shapes[][2] = {{1, 13}, {6, 130}, {17, 8}, {3, 1100}, {2, 7}, {5, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int n = shapes[si][0], c = shapes[si][1];
        size_t nx = (size_t)n * c, sizes[8] = {nx, (size_t)c + 1, (size_t)c, 2 * (size_t)c + 1,
                                              (size_t)c, (size_t)c, nx, nx};
        for (int threads = 1; threads <= 3; threads += 2) {
            float *out[2][16];
            for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < 16; i++)
                    out[pass][i] = cdl_calloc(sizes[i % 8], sizeof(float));
                if (pass == 1)
                    cpu_disable_avx512(1);   /* the portable loops */
                bn_flat_outputs(threads, n, c, out[pass]);
                if (pass == 1)
                    cpu_disable_avx512(0);
            }
            for (int i = 0; i < 16; i++) {
                assert_memory_equal(out[0][i], out[1][i], sizes[i % 8] * sizeof(float));
                cdl_free(out[0][i]);
                cdl_free(out[1][i]);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_bn_gradients),
        cmocka_unit_test(test_ref_gap_gradient),
        cmocka_unit_test(test_ref_act_gradients),
        cmocka_unit_test(test_ref_xent_ls_gradient),
        cmocka_unit_test(test_bn_train_matches_reference),
        cmocka_unit_test(test_bn_sums_avx2_order),
        cmocka_unit_test(test_bn_flat_simd_same_bits),
        cmocka_unit_test(test_bn_pieces_sum_across_ranks),
        cmocka_unit_test(test_bn_eval_and_fold),
        cmocka_unit_test(test_bn_eval_small_planes),
        cmocka_unit_test(test_gap_matches_reference),
        cmocka_unit_test(test_act_matches_reference),
        cmocka_unit_test(test_add_accumulate_channel_copy),
        cmocka_unit_test(test_add_relu_matches_unfused),
        cmocka_unit_test(test_xent_ls_matches_reference),
    };
    /* Every test twice, like test_kernels: the SIMD kernels (AVX-512,
     * AVX2) where the CPU has them, then the portable paths. */
    int failed = 0;
    if (cpu_has_avx512() || cpu_has_avx2())
        failed += cmocka_run_group_tests_name("kernels of nets (SIMD)", tests, NULL, NULL);
    cpu_disable_avx512(1);
    failed += cmocka_run_group_tests_name("kernels of nets (portable)", tests, NULL, NULL);
    cpu_disable_avx512(0);
    return failed;
}
