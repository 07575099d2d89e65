/* The CPU backend's ops of networks with branches against PyTorch 1.13
 * (tests/fixtures/ops.fix from ops_fixtures.py): BatchNorm2d in training
 * (with and without a ReLU after it, running statistics with momentum 0.1
 * and unbiased variance, num_batches_tracked) and evaluation, activations
 * (GELU exact and tanh, SiLU, sigmoid, tanh, LeakyReLU at 0.01 and 0.2),
 * adaptive average pooling to 1x1, grouped/depthwise/dilated/rectangular
 * nn.Conv2d, cross-entropy with label_smoothing=0.1, add and cat;
 * nn.LayerNorm with and without bias, nn.Embedding and cross-entropy with
 * ignore_index=-1; causal multi-head self-attention (nanoGPT's, written
 * out).
 * Tolerances: one float32 operation against float64 (hacking.md). */
#include <string.h>

#include "fixture.h"
#include "kernel_testutil.h"
#include "ref_ops.h"

#define TOL 1e-5

static fixture *fx;

static int setup(void **state)
{
    (void)state;
    fx = fixture_load("tests/fixtures/ops.fix");
    return fx ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (fx)
        fixture_free(fx);
    return 0;
}

/* Normalised error of float a against the float32 reference b. */
static void check(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double *bd = cdl_calloc(n, sizeof *bd);
    for (size_t i = 0; i < n; i++)
        bd[i] = b[i];
    check_close(what, a, bd, n, tol);
    cdl_free(bd);
}

static float *buf(size_t n)
{
    float *p = cdl_calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static void test_batchnorm2d(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(2);
    const cdl_backend_ops *op = be->ops;
    int n = 4, c = 3, hw = 25;
    size_t nx = (size_t)n * c * hw;
    const float *x = fixture_f32(fx, "bn/x", nx), *dy = fixture_f32(fx, "bn/dy", nx);
    const float *g = fixture_f32(fx, "bn/weight", c), *b = fixture_f32(fx, "bn/bias", c);
    float *y = buf(nx), *dx = buf(nx), sum[4], sq[3], saved[7], dg[3], db[3];
    float rm[3], rv[3], nbt = 0.0f;
    for (int relu = 0; relu <= 1; relu++) {
        char name[64];
        memcpy(rm, fixture_f32(fx, "bn/running_mean0", c), sizeof rm);
        memcpy(rv, fixture_f32(fx, "bn/running_var0", c), sizeof rv);
        nbt = 0.0f;
        op->bn_sum(be, n, c, hw, x, sum);
        op->bn_sqdev(be, n, c, hw, x, sum, sq);
        op->bn_apply(be, n, c, hw, x, sum, sq, 1e-5f, g, b, relu, y, saved);
        op->bn_running(be, c, sum, sq, 0.1f, rm, rv, &nbt);
        snprintf(name, sizeof name, "bn/relu%d/y", relu);
        check(name, y, fixture_f32(fx, name, nx), nx, TOL);
        op->bn_bwd_sums(be, n, c, hw, x, relu ? y : NULL, dy, saved, dg, db);
        op->bn_bwd_apply(be, n, c, hw, x, relu ? y : NULL, dy, saved, g, db, dg, dx);
        snprintf(name, sizeof name, "bn/relu%d/dx", relu);
        check(name, dx, fixture_f32(fx, name, nx), nx, TOL);
        snprintf(name, sizeof name, "bn/relu%d/dweight", relu);
        check(name, dg, fixture_f32(fx, name, c), (size_t)c, TOL);
        snprintf(name, sizeof name, "bn/relu%d/dbias", relu);
        check(name, db, fixture_f32(fx, name, c), (size_t)c, TOL);
    }
    check("bn running_mean", rm, fixture_f32(fx, "bn/running_mean", c), (size_t)c, 1e-6);
    check("bn running_var", rv, fixture_f32(fx, "bn/running_var", c), (size_t)c, 1e-6);
    assert_true(nbt == fixture_f32(fx, "bn/num_batches_tracked", 1)[0]);
    op->bn_eval(be, n, c, hw, x, rm, rv, 1e-5f, g, b, 0, y);
    check("bn eval y", y, fixture_f32(fx, "bn/eval_y", nx), nx, TOL);
    cdl_free(y);
    cdl_free(dx);
    cdl_backend_destroy(be);
}

static void test_activations(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        cdl_act act;
        float alpha;
    } acts[] = {
        {"gelu", CDL_ACT_GELU, 0.0f},
        {"gelu_tanh", CDL_ACT_GELU_TANH, 0.0f},
        {"silu", CDL_ACT_SILU, 0.0f},
        {"sigmoid", CDL_ACT_SIGMOID, 0.0f},
        {"tanh", CDL_ACT_TANH, 0.0f},
        {"leakyrelu", CDL_ACT_LEAKYRELU, 0.01f},
        {"leakyrelu0.2", CDL_ACT_LEAKYRELU, 0.2f},
    };
    cdl_backend *be = test_cpu_backend(1);
    size_t n = 64;
    const float *x = fixture_f32(fx, "act/x", n), *dy = fixture_f32(fx, "act/dy", n);
    float y[64], dx[64];
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        char name[64];
        be->ops->act_fwd(be, acts[a].act, acts[a].alpha, n, x, y);
        snprintf(name, sizeof name, "act/%s/y", acts[a].name);
        check(name, y, fixture_f32(fx, name, n), n, TOL);
        be->ops->act_bwd(be, acts[a].act, acts[a].alpha, n, x, y, dy, dx);
        snprintf(name, sizeof name, "act/%s/dx", acts[a].name);
        check(name, dx, fixture_f32(fx, name, n), n, TOL);
    }
    cdl_backend_destroy(be);
}

static void test_global_avg_pool(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(1);
    float y[6], dx[120];
    be->ops->gap_fwd(be, 2, 3, 20, fixture_f32(fx, "gap/x", 120), y);
    check("gap y", y, fixture_f32(fx, "gap/y", 6), 6, TOL);
    be->ops->gap_bwd(be, 2, 3, 20, fixture_f32(fx, "gap/dy", 6), dx);
    check("gap dx", dx, fixture_f32(fx, "gap/dx", 120), 120, TOL);
    cdl_backend_destroy(be);
}

static void test_conv2d_groups_dilation(void **state)
{
    (void)state;
    const char *names[] = {"grouped", "depthwise", "dilated"};
    cdl_backend *be = test_cpu_backend(2);
    for (size_t k = 0; k < 3; k++) {
        char q[64];
        snprintf(q, sizeof q, "conv/%s/desc", names[k]);
        const int32_t *v = fixture_i32(fx, q, 14);
        cdl_conv2d_desc d = ref_conv_desc_full(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                                               v[8], v[9], v[10], v[11], v[12], v[13]);
        size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.oc * d.oh * d.ow;
        size_t nw = (size_t)d.oc * (d.c / d.groups) * d.kh * d.kw;
#define REC(field, count) (snprintf(q, sizeof q, "conv/%s/" field, names[k]), fixture_f32(fx, q, count))
        const float *x = REC("x", nx), *w = REC("weight", nw), *b = REC("bias", d.oc);
        const float *dy = REC("dy", ny);
        float *y = buf(ny), *dx = buf(nx), *dw = buf(nw), *db = buf(d.oc);
        float *ws = buf(be->ops->conv2d_workspace(be, &d));
        be->ops->conv2d_fwd(be, &d, x, w, b, y, ws);
        check(names[k], y, REC("y", ny), ny, TOL);
        be->ops->conv2d_bwd(be, &d, x, w, dy, dx, dw, db, ws);
        check(names[k], dx, REC("dx", nx), nx, TOL);
        check(names[k], dw, REC("dweight", nw), nw, TOL);
        check(names[k], db, REC("dbias", d.oc), (size_t)d.oc, TOL);
#undef REC
        cdl_free(y), cdl_free(dx), cdl_free(dw), cdl_free(db), cdl_free(ws);
    }
    cdl_backend_destroy(be);
}

static void test_label_smoothing(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(1);
    int n = 5, k = 7;
    float dz[35], loss[5];
    int32_t pred[5];
    be->ops->xent_ls_fwd_bwd(be, n, k, fixture_f32(fx, "xent_ls/logits", 35),
                             fixture_i32(fx, "xent_ls/labels", 5), 0.1f, 1.0f / n, dz, loss, pred);
    check("xent label_smoothing loss", loss, fixture_f32(fx, "xent_ls/loss", 5), 5, TOL);
    check("xent label_smoothing dlogits", dz, fixture_f32(fx, "xent_ls/dlogits", 35), 35, TOL);
    cdl_backend_destroy(be);
}

static void test_add_and_concat(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(1);
    const float *a = fixture_f32(fx, "join/a", 24), *b = fixture_f32(fx, "join/b", 24);
    const float *c = fixture_f32(fx, "join/c", 16);
    float y[24], cat[40];
    be->ops->add(be, 24, a, b, y);
    check("add", y, fixture_f32(fx, "join/add", 24), 24, 0);
    be->ops->channel_copy(be, 2, 3, 4, a, 3, 0, cat, 5, 0, 0);
    be->ops->channel_copy(be, 2, 2, 4, c, 2, 0, cat, 5, 3, 0);
    check("cat", cat, fixture_f32(fx, "join/cat", 40), 40, 0);
    cdl_backend_destroy(be);
}

static void test_layernorm(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(2);
    int rows = 6, d = 16;
    size_t nx = (size_t)rows * d;
    const float *x = fixture_f32(fx, "ln/x", nx), *dy = fixture_f32(fx, "ln/dy", nx);
    const float *g = fixture_f32(fx, "ln/weight", d), *b = fixture_f32(fx, "ln/bias", d);
    float y[96], dx[96], saved[12], dg[16], db[16];
    be->ops->layernorm_fwd(be, rows, d, x, g, b, 1e-5f, y, saved);
    check("layernorm y", y, fixture_f32(fx, "ln/y", nx), nx, TOL);
    be->ops->layernorm_bwd(be, rows, d, x, g, saved, dy, dx, dg, db);
    check("layernorm dx", dx, fixture_f32(fx, "ln/dx", nx), nx, TOL);
    check("layernorm dweight", dg, fixture_f32(fx, "ln/dweight", d), (size_t)d, TOL);
    check("layernorm dbias", db, fixture_f32(fx, "ln/dbias", d), (size_t)d, TOL);
    /* bias=False */
    be->ops->layernorm_fwd(be, rows, d, x, g, NULL, 1e-5f, y, saved);
    check("layernorm nobias y", y, fixture_f32(fx, "ln/nobias/y", nx), nx, TOL);
    be->ops->layernorm_bwd(be, rows, d, x, g, saved, dy, dx, dg, NULL);
    check("layernorm nobias dx", dx, fixture_f32(fx, "ln/nobias/dx", nx), nx, TOL);
    check("layernorm nobias dweight", dg, fixture_f32(fx, "ln/nobias/dweight", d), (size_t)d,
          TOL);
    cdl_backend_destroy(be);
}

static void test_embedding(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(2);
    int rows = 8, d = 5, vocab = 11;
    const int32_t *id32 = fixture_i32(fx, "emb/ids", rows);
    float ids[8], y[40], dw[55] = {0};
    for (int r = 0; r < rows; r++)
        ids[r] = (float)id32[r];
    be->ops->embedding_fwd(be, rows, d, ids, fixture_f32(fx, "emb/weight", 55), y);
    check("embedding y", y, fixture_f32(fx, "emb/y", 40), 40, 0);
    be->ops->embedding_bwd(be, rows, d, vocab, ids, fixture_f32(fx, "emb/dy", 40), dw);
    check("embedding dweight", dw, fixture_f32(fx, "emb/dweight", 55), 55, TOL);
    cdl_backend_destroy(be);
}

/* cross_entropy(ignore_index=-1): cdl's per-row losses (0 where ignored)
 * are PyTorch's reduction="none", and grad_scale = 1/(rows with a label)
 * gives the gradient of PyTorch's mean. */
static void test_xent_ignore_index(void **state)
{
    (void)state;
    cdl_backend *be = test_cpu_backend(1);
    int n = 6, k = 7;
    const float *z = fixture_f32(fx, "xent_ig/logits", 42);
    const int32_t *labels = fixture_i32(fx, "xent_ig/labels", 6);
    int valid = 0;
    for (int i = 0; i < n; i++)
        valid += labels[i] >= 0;
    const char *names[2] = {"plain", "ls"};
    for (int e = 0; e < 2; e++) {
        float dz[42], loss[6], mean = 0.0f;
        int32_t pred[6];
        char q[64];
        if (e == 0)
            be->ops->xent_fwd_bwd(be, n, k, z, labels, 1.0f / valid, dz, loss, pred);
        else
            be->ops->xent_ls_fwd_bwd(be, n, k, z, labels, 0.1f, 1.0f / valid, dz, loss, pred);
        snprintf(q, sizeof q, "xent_ig/%s/loss", names[e]);
        check(q, loss, fixture_f32(fx, q, 6), 6, TOL);
        for (int i = 0; i < n; i++)
            mean += loss[i] / valid;
        snprintf(q, sizeof q, "xent_ig/%s/mean", names[e]);
        check(q, &mean, fixture_f32(fx, q, 1), 1, TOL);
        snprintf(q, sizeof q, "xent_ig/%s/dlogits", names[e]);
        check(q, dz, fixture_f32(fx, q, 42), 42, TOL);
    }
    cdl_backend_destroy(be);
}

/* nanoGPT's attention core (masked softmax written out; torch 1.13):
 * y, each row's logsumexp, and dqkv, on 1 and 3 threads. */
static void test_causal_attention(void **state)
{
    (void)state;
    const int32_t *sh = fixture_i32(fx, "attn/shape", 4);
    int n = sh[0], T = sh[1], C = sh[2], nh = sh[3];
    size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
    const float *qkv = fixture_f32(fx, "attn/qkv", nq), *dy = fixture_f32(fx, "attn/dy", ny);
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = test_cpu_backend(threads[ti]);
        float *y = buf(ny), *lse = buf(nl), *dqkv = buf(nq);
        float *ws = buf(be->ops->attn_workspace(be, n, T, C, nh));
        be->ops->attn_fwd(be, n, T, C, nh, qkv, y, lse, ws);
        be->ops->attn_bwd(be, n, T, C, nh, qkv, y, lse, dy, dqkv, ws);
        check("attention y", y, fixture_f32(fx, "attn/y", ny), ny, TOL);
        check("attention lse", lse, fixture_f32(fx, "attn/lse", nl), nl, TOL);
        check("attention dqkv", dqkv, fixture_f32(fx, "attn/dqkv", nq), nq, TOL);
        cdl_free(y), cdl_free(lse), cdl_free(dqkv), cdl_free(ws);
        cdl_backend_destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm2d),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_global_avg_pool),
        cmocka_unit_test(test_conv2d_groups_dilation),
        cmocka_unit_test(test_label_smoothing),
        cmocka_unit_test(test_add_and_concat),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_xent_ignore_index),
        cmocka_unit_test(test_causal_attention),
    };
    return cmocka_run_group_tests_name("ops against PyTorch", tests, setup, teardown);
}
