/* The ops of transformers (layernorm, embedding, bcast_add, cross-entropy
 * with ignored labels): the double-precision references (ref_ops.c)
 * against finite differences, and the CPU backend against the references,
 * on 1 and 3 threads, with the SIMD kernels and the portable paths. */
#include <string.h>

#include "kernel_testutil.h"
#include "kernels/cpu/simd.h"
#include "ref_ops.h"

#define LN_EPS 1e-5

/* ------------------------------------------------------------ references vs finite differences */

typedef struct ln_fd {
    int rows, d;
    double *x, *gamma, *beta, *r, *y;
} ln_fd;

static double ln_loss(void *vctx)
{
    ln_fd *c = vctx;
    ref_layernorm_fwd(c->rows, c->d, c->x, c->gamma, c->beta, LN_EPS, c->y);
    return dot(c->r, c->y, (size_t)c->rows * c->d);
}

static void test_ref_layernorm_gradients(void **state)
{
    (void)state;
    const int shapes[][2] = {{3, 5}, {1, 8}, {4, 1}};
    for (size_t k = 0; k < 3; k++)
        for (int affine = 0; affine <= 1; affine++) {
            int rows = shapes[k][0], d = shapes[k][1];
            size_t nx = (size_t)rows * d;
            pair x = pair_rand(nx, 300 + k, -2, 2), g = pair_rand(d, 301 + k, 0.5, 1.5);
            pair b = pair_rand(d, 302 + k, -0.5, 0.5), r = pair_rand(nx, 303 + k, -1, 1);
            pair y = pair_new(nx), dx = pair_new(nx), dg = pair_new(d), db = pair_new(d);
            double *gamma = affine ? g.d : NULL, *beta = affine ? b.d : NULL;
            ref_layernorm_bwd(rows, d, x.d, gamma, LN_EPS, r.d, dx.d, dg.d, db.d);
            ln_fd c = {rows, d, x.d, gamma, beta, r.d, y.d};
            fd_check("layernorm dx", ln_loss, &c, x.d, nx, dx.d);
            if (affine) {
                fd_check("layernorm dgamma", ln_loss, &c, g.d, (size_t)d, dg.d);
                fd_check("layernorm dbeta", ln_loss, &c, b.d, (size_t)d, db.d);
            }
            pair *all[] = {&x, &g, &b, &r, &y, &dx, &dg, &db};
            for (size_t i = 0; i < 8; i++)
                pair_free(all[i]);
        }
}

typedef struct emb_fd {
    int rows, d;
    double *ids, *w, *x, *b, *r, *y;
    size_t m;
} emb_fd;

static double emb_loss(void *vctx)
{
    emb_fd *c = vctx;
    ref_embedding_fwd(c->rows, c->d, c->ids, c->w, c->y);
    return dot(c->r, c->y, (size_t)c->rows * c->d);
}

static double bcast_loss(void *vctx)
{
    emb_fd *c = vctx;
    ref_bcast_add_fwd(c->rows, c->m, c->x, c->b, c->y);
    return dot(c->r, c->y, (size_t)c->rows * c->m);
}

/* Embedding (with repeated ids, so rows add up in dw) and bcast_add. */
static void test_ref_embedding_bcast_gradients(void **state)
{
    (void)state;
    int rows = 6, d = 3, vocab = 5;
    double ids[6] = {4, 0, 4, 2, 2, 4};
    pair w = pair_rand((size_t)vocab * d, 310, -1, 1), r = pair_rand((size_t)rows * d, 311, -1, 1);
    pair y = pair_new(r.n), dw = pair_new(w.n);
    ref_embedding_bwd(rows, d, ids, r.d, dw.d);
    emb_fd c = {.rows = rows, .d = d, .ids = ids, .w = w.d, .r = r.d, .y = y.d};
    fd_check("embedding dw", emb_loss, &c, w.d, w.n, dw.d);
    for (int j = 0; j < d; j++)
        assert_true(dw.d[1 * d + j] == 0.0 && dw.d[3 * d + j] == 0.0);   /* unused ids */

    int n = 3;
    size_t m = 7;
    pair x = pair_rand((size_t)n * m, 312, -1, 1), b = pair_rand(m, 313, -1, 1);
    pair r2 = pair_rand(x.n, 314, -1, 1), y2 = pair_new(x.n), db = pair_new(m);
    ref_bcast_add_bwd(n, m, r2.d, db.d);
    emb_fd c2 = {.rows = n, .m = m, .x = x.d, .b = b.d, .r = r2.d, .y = y2.d};
    fd_check("bcast_add db", bcast_loss, &c2, b.d, m, db.d);
    fd_check("bcast_add dx", bcast_loss, &c2, x.d, x.n, r2.d);   /* dx = dy */
    pair *all[] = {&w, &r, &y, &dw, &x, &b, &r2, &y2, &db};
    for (size_t i = 0; i < 9; i++)
        pair_free(all[i]);
}

typedef struct xent_fd {
    int n, k;
    double eps, *z, *scratch, *loss;
    const int32_t *labels;
    int32_t *pred;
    double scale;
} xent_fd;

/* The mean loss over the rows with a label: grad_scale = 1/valid. */
static double xent_loss(void *vctx)
{
    xent_fd *c = vctx;
    ref_xent_ls(c->n, c->k, c->z, c->labels, c->eps, 1.0, c->scratch, c->loss, c->pred);
    double s = 0.0;
    for (int i = 0; i < c->n; i++)
        s += c->loss[i];
    return s * c->scale;
}

static void test_ref_xent_ignore_gradient(void **state)
{
    (void)state;
    int n = 4, k = 5;
    int32_t labels[4] = {4, -1, 2, -100}, pred[4];
    double loss[4];
    for (int e = 0; e < 2; e++) {
        double eps = e ? 0.1 : 0.0;
        pair z = pair_rand((size_t)n * k, 320, -3, 3), dz = pair_new(z.n), scratch = pair_new(z.n);
        ref_xent_ls(n, k, z.d, labels, eps, 0.5, dz.d, loss, pred);
        assert_true(loss[1] == 0.0 && loss[3] == 0.0 && loss[0] > 0.0);
        for (int j = 0; j < k; j++)
            assert_true(dz.d[1 * k + j] == 0.0 && dz.d[3 * k + j] == 0.0);
        xent_fd c = {n, k, eps, z.d, scratch.d, loss, labels, pred, 0.5};
        fd_check("xent ignore_index dlogits", xent_loss, &c, z.d, z.n, dz.d);
        pair_free(&z);
        pair_free(&dz);
        pair_free(&scratch);
    }
}

/* ------------------------------------------------------------ CPU backend vs references */

static const int threads[] = {1, 3};

/* d = 1 (y = beta), odd widths that leave SIMD tails, GPT widths. */
static const int ln_shapes[][2] = {{7, 1}, {5, 3}, {9, 37}, {33, 64}, {16, 384}, {3, 1000}};

static void test_layernorm_matches_reference(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        for (size_t k = 0; k < sizeof ln_shapes / sizeof ln_shapes[0]; k++)
            for (int mode = 0; mode < 3; mode++) {   /* gamma+beta, gamma only, neither */
                int rows = ln_shapes[k][0], d = ln_shapes[k][1];
                size_t nx = (size_t)rows * d;
                /* An offset mean: a one-pass variance would lose digits. */
                pair x = pair_rand(nx, 400 + k, 20, 24), g = pair_rand(d, 401 + k, 0.5, 1.5);
                pair b = pair_rand(d, 402 + k, -0.5, 0.5), dy = pair_rand(nx, 403 + k, -1, 1);
                pair y = pair_new(nx), dx = pair_new(nx), dg = pair_new(d), db = pair_new(d);
                float *saved = cdl_calloc(2 * (size_t)rows, sizeof *saved);
                const float *gf = mode < 2 ? g.f : NULL, *bf = mode < 1 ? b.f : NULL;
                const double *gd = mode < 2 ? g.d : NULL, *bd = mode < 1 ? b.d : NULL;

                ref_layernorm_fwd(rows, d, x.d, gd, bd, LN_EPS, y.d);
                be->ops->layernorm_fwd(be, rows, d, x.f, gf, bf, (float)LN_EPS, y.f, saved);
                check_close("layernorm y", y.f, y.d, nx, 1e-5);
                for (int r = 0; r < rows; r++) {
                    double mean = 0.0;
                    for (int j = 0; j < d; j++)
                        mean += x.d[(size_t)r * d + j];
                    mean /= d;
                    assert_true(fabs(saved[r] - mean) < 1e-6 * fabs(mean));
                }

                ref_layernorm_bwd(rows, d, x.d, gd, LN_EPS, dy.d, dx.d, dg.d, db.d);
                be->ops->layernorm_bwd(be, rows, d, x.f, gf, saved, dy.f, dx.f, dg.f, db.f);
                check_close("layernorm dx", dx.f, dx.d, nx, 1e-4);
                check_close("layernorm dgamma", dg.f, dg.d, (size_t)d, 1e-5);
                check_close("layernorm dbeta", db.f, db.d, (size_t)d, 1e-6);
                /* NULL parameter gradients: dx alone, the same values. */
                float *dx2 = cdl_calloc(nx, sizeof *dx2);
                be->ops->layernorm_bwd(be, rows, d, x.f, gf, saved, dy.f, dx2, NULL, NULL);
                assert_memory_equal(dx2, dx.f, nx * sizeof *dx2);
                /* layernorm_bwd_acc onto a gradient already there: the
                 * bits of layernorm_bwd then accumulate, dgamma/dbeta too. */
                pair base = pair_rand(nx, 404 + k, -1, 1);
                float *acc = cdl_calloc(nx, sizeof *acc), *dg2 = cdl_calloc(d, sizeof *dg2);
                memcpy(acc, base.f, nx * sizeof *acc);
                be->ops->layernorm_bwd_acc(be, rows, d, x.f, gf, saved, dy.f, acc, dg2, NULL);
                be->ops->accumulate(be, nx, dx.f, base.f);
                assert_memory_equal(acc, base.f, nx * sizeof *acc);
                assert_memory_equal(dg2, dg.f, (size_t)d * sizeof *dg2);
                cdl_free(acc);
                cdl_free(dg2);
                pair_free(&base);
                cdl_free(dx2);

                cdl_free(saved);
                pair *all[] = {&x, &g, &b, &dy, &y, &dx, &dg, &db};
                for (size_t i = 0; i < 8; i++)
                    pair_free(all[i]);
            }
        cdl_backend_destroy(be);
    }
}

/* Parameter gradients do not depend on the thread count, bit for bit. */
static void test_seq_sums_thread_independent(void **state)
{
    (void)state;
    int rows = 300, d = 200, vocab = 11;
    size_t nx = (size_t)rows * d;
    pair x = pair_rand(nx, 500, -2, 2), g = pair_rand(d, 501, 0.5, 1.5), dy = pair_rand(nx, 502, -1, 1);
    float *ids = cdl_calloc(rows, sizeof *ids);
    for (int r = 0; r < rows; r++)
        ids[r] = (float)((r * 7) % vocab);
    float *out[2][4];
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        float *saved = cdl_calloc(2 * (size_t)rows, sizeof *saved), *y = cdl_calloc(nx, sizeof *y);
        float **o = out[ti];
        o[0] = cdl_calloc(d, sizeof(float));
        o[1] = cdl_calloc(d, sizeof(float));
        o[2] = cdl_calloc((size_t)vocab * d, sizeof(float));
        o[3] = cdl_calloc(nx / 4, sizeof(float));
        be->ops->layernorm_fwd(be, rows, d, x.f, g.f, NULL, 1e-5f, y, saved);
        be->ops->layernorm_bwd(be, rows, d, x.f, g.f, saved, dy.f, y, o[0], o[1]);
        be->ops->embedding_bwd(be, rows, d, vocab, ids, dy.f, o[2]);
        be->ops->bcast_add_bwd(be, 4, nx / 4, dy.f, o[3]);
        cdl_free(saved), cdl_free(y);
        cdl_backend_destroy(be);
    }
    size_t sizes[4] = {(size_t)d, (size_t)d, (size_t)vocab * d, nx / 4};
    for (int i = 0; i < 4; i++) {
        assert_memory_equal(out[0][i], out[1][i], sizes[i] * sizeof(float));
        cdl_free(out[0][i]), cdl_free(out[1][i]);
    }
    cdl_free(ids);
    pair *all[] = {&x, &g, &dy};
    for (size_t i = 0; i < 3; i++)
        pair_free(all[i]);
}

static void test_embedding_bcast_match_reference(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {10, 5, 3}, {64, 37, 50}, {200, 384, 65}};   /* rows, d, vocab */
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int rows = shapes[k][0], d = shapes[k][1], vocab = shapes[k][2];
            pair w = pair_rand((size_t)vocab * d, 600 + k, -1, 1);
            pair dy = pair_rand((size_t)rows * d, 601 + k, -1, 1);
            pair y = pair_new(dy.n), dw = pair_rand(w.n, 602 + k, -1, 1);   /* accumulated into */
            pair ids = pair_new((size_t)rows);
            for (int r = 0; r < rows; r++)
                ids.d[r] = ids.f[r] = (float)((r * 13 + 5) % vocab);
            ref_embedding_fwd(rows, d, ids.d, w.d, y.d);
            be->ops->embedding_fwd(be, rows, d, ids.f, w.f, y.f);
            check_close("embedding y", y.f, y.d, y.n, 0.0);
            ref_embedding_bwd(rows, d, ids.d, dy.d, dw.d);
            be->ops->embedding_bwd(be, rows, d, vocab, ids.f, dy.f, dw.f);
            check_close("embedding dw", dw.f, dw.d, dw.n, 1e-6);

            /* bcast_add: y (n, m) with m = rows*d/n-ish shapes, in place too. */
            int n = 1 + (int)k;
            size_t m = (size_t)rows * d;
            pair x = pair_rand((size_t)n * m, 603 + k, -1, 1), b = pair_rand(m, 604 + k, -1, 1);
            pair g = pair_rand(x.n, 605 + k, -1, 1), yb = pair_new(x.n), db = pair_new(m);
            ref_bcast_add_fwd(n, m, x.d, b.d, yb.d);
            be->ops->bcast_add_fwd(be, n, m, x.f, b.f, yb.f);
            check_close("bcast_add y", yb.f, yb.d, x.n, 1e-7);   /* one float rounding */
            be->ops->bcast_add_fwd(be, n, m, x.f, b.f, x.f);
            assert_memory_equal(x.f, yb.f, x.n * sizeof *x.f);   /* in place: the same */
            ref_bcast_add_bwd(n, m, g.d, db.d);
            be->ops->bcast_add_bwd(be, n, m, g.f, db.f);
            check_close("bcast_add db", db.f, db.d, m, 1e-6);

            pair *all[] = {&w, &dy, &y, &dw, &ids, &x, &b, &g, &yb, &db};
            for (size_t i = 0; i < 10; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

/* A negative label: loss 0, dlogits row 0, pred written; the other rows
 * as without it. Both entries, with and without smoothing. */
static void test_xent_ignore_index(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        int n = 37, k = 10;
        int32_t labels[37], pred[37], pred_ref[37];
        for (int i = 0; i < n; i++)
            labels[i] = i % 4 == 1 ? -1 : (i * 7) % k;
        labels[6] = -100;   /* PyTorch's default ignore_index */
        pair z = pair_rand((size_t)n * k, 700, -5, 5), dz = pair_new(z.n), loss = pair_new(n);
        const double eps[] = {0.0, 0.1};
        for (size_t e = 0; e < 2; e++) {
            memset(pred, 0xff, sizeof pred);
            ref_xent_ls(n, k, z.d, labels, eps[e], 0.25, dz.d, loss.d, pred_ref);
            if (eps[e] == 0.0)
                be->ops->xent_fwd_bwd(be, n, k, z.f, labels, 0.25f, dz.f, loss.f, pred);
            else
                be->ops->xent_ls_fwd_bwd(be, n, k, z.f, labels, (float)eps[e], 0.25f, dz.f,
                                         loss.f, pred);
            check_close("xent ignore dlogits", dz.f, dz.d, z.n, 1e-6);
            check_close("xent ignore loss", loss.f, loss.d, (size_t)n, 1e-6);
            assert_memory_equal(pred, pred_ref, sizeof pred);
            for (int i = 0; i < n; i++)
                if (labels[i] < 0) {
                    assert_true(loss.f[i] == 0.0f);
                    for (int j = 0; j < k; j++)
                        assert_true(dz.f[(size_t)i * k + j] == 0.0f);
                }
        }
        pair *all[] = {&z, &dz, &loss};
        for (size_t i = 0; i < 3; i++)
            pair_free(all[i]);
        cdl_backend_destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_layernorm_gradients),
        cmocka_unit_test(test_ref_embedding_bcast_gradients),
        cmocka_unit_test(test_ref_xent_ignore_gradient),
        cmocka_unit_test(test_layernorm_matches_reference),
        cmocka_unit_test(test_seq_sums_thread_independent),
        cmocka_unit_test(test_embedding_bcast_match_reference),
        cmocka_unit_test(test_xent_ignore_index),
    };
    /* Every test twice, like test_kernels: the SIMD kernels where the CPU
     * has them, then the portable paths. */
    int failed = 0;
    if (cpu_has_avx512() || cpu_has_avx2())
        failed += cmocka_run_group_tests_name("kernels of sequences (SIMD)", tests, NULL, NULL);
    cpu_disable_avx512(1);
    failed += cmocka_run_group_tests_name("kernels of sequences (portable)", tests, NULL, NULL);
    cpu_disable_avx512(0);
    return failed;
}
