/* The model against PyTorch (tests/fixtures/make_fixtures.py): LeNet on
 * MNIST- and CIFAR-shaped batches (logits, loss, every gradient), and a
 * model with every layer kind trained for three SGD steps with dropout. The
 * fixture's weights are loaded by PyTorch name, which also checks the
 * names, order and layouts of the parameter views. */
#include "model_testutil.h"

#include "avx512_testutil.h"
#include "fixture.h"

#define LOGITS_TOL 1e-5   /* normalised, against float64 PyTorch */
#define LOSS_TOL 1e-5     /* relative */
#define GRAD_TOL 1e-4     /* normalised, per parameter tensor */

TEST_CPU_BACKEND_GROUP()

/* Loads every parameter from `<prefix><name>`, checking the PyTorch shape,
 * and checks the fixture has no parameter the model lacks. */
static void load_params(cdl_model *m, const fixture *fx, const char *prefix)
{
    char key[128];
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        snprintf(key, sizeof key, "%s%s", prefix, pv->name);
        const fixture_rec *rec = fixture_get(fx, key, FIX_F32, pv->numel);
        assert_int_equal(rec->ndim, pv->ndim);
        for (int d = 0; d < pv->ndim; d++)
            assert_int_equal(rec->dims[d], pv->shape[d]);
        be->ops->to_device(be, cdl_model_params(m) + pv->offset, rec->data, pv->numel * sizeof(float));
    }
    int in_fixture = 0;
    for (int i = 0; i < fx->count; i++)
        in_fixture += !strncmp(fx->recs[i].name, prefix, strlen(prefix));
    assert_int_equal(in_fixture, cdl_model_nviews(m));
}

/* Compares the model's buffer (params or grads) with `<prefix><name>` per view. */
static void check_views(cdl_model *m, const float *buf_dev, const fixture *fx, const char *prefix,
                        double tol)
{
    char key[128];
    float *host = host_copy(be, buf_dev, cdl_model_nparams(m));
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        snprintf(key, sizeof key, "%s%s", prefix, pv->name);
        double err = norm_err_ff(host + pv->offset, fixture_f32(fx, key, pv->numel), pv->numel);
        if (err > tol)
            fail_msg("%s: normalised error %.3g > %.1g", key, err, tol);
    }
    free(host);
}

static void check_rel(const char *what, double got, double want, double tol)
{
    double err = fabs(got - want) / fabs(want);
    if (err > tol)
        fail_msg("%s: %.9g vs PyTorch %.9g (relative error %.3g > %.1g)", what, got, want, err, tol);
}

static void check_lenet(const char *prefix, cdl_shape in, size_t nparams)
{
    const int n = 8, classes = 10;
    char key[64];
    fixture *fx = fixture_load("tests/fixtures/lenet.fix");
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("lenet", in, classes, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, n, be);
    assert_non_null(m);
    assert_int_equal(cdl_model_nparams(m), nparams);
    snprintf(key, sizeof key, "%sparam/", prefix);
    load_params(m, fx, key);

    size_t in_numel = (size_t)in.c * in.h * in.w;
    snprintf(key, sizeof key, "%sinput", prefix);
    float *x = dev_upload(be, fixture_f32(fx, key, n * in_numel), n * in_numel * sizeof(float));
    snprintf(key, sizeof key, "%slabels", prefix);
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, classes, fixture_i32(fx, key, n));

    const float *logits = cdl_model_forward(m, x, n, 0, 0);
    assert_non_null(logits);
    float *host = host_copy(be, logits, (size_t)n * classes);
    snprintf(key, sizeof key, "%slogits", prefix);
    double err = norm_err_ff(host, fixture_f32(fx, key, (size_t)n * classes), (size_t)n * classes);
    if (err > LOGITS_TOL)
        fail_msg("%s: normalised error %.3g", key, err);
    free(host);

    double loss = loss_bufs_run(&lb, logits);
    snprintf(key, sizeof key, "%sloss", prefix);
    check_rel(key, loss, fixture_f32(fx, key, 1)[0], LOSS_TOL);

    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    snprintf(key, sizeof key, "%sgrad/", prefix);
    check_views(m, cdl_model_grads(m), fx, key, GRAD_TOL);

    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_model_destroy(m);
    fixture_free(fx);
}

static void test_lenet_mnist(void **state)
{
    (void)state;
    check_lenet("mnist/", (cdl_shape){1, 28, 28}, 61706);
}

static void test_lenet_cifar(void **state)
{
    (void)state;
    check_lenet("cifar/", (cdl_shape){3, 32, 32}, 62006);
}

/* Every layer kind, from the spec text stored in the fixture: eval logits,
 * then three training steps with dropout masks and SGD (momentum, weight
 * decay): first step's logits and gradients, every loss, final weights. */
static void test_allkinds_training(void **state)
{
    (void)state;
    const int n = 6, classes = 5, steps = 3;
    fixture *fx = fixture_load("tests/fixtures/allkinds.fix");
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_parse(fixture_get(fx, "spec", FIX_U8, 0)->data, "allkinds", &spec), 0);
    cdl_model *m = cdl_model_create(&spec, (cdl_shape){0, 0, 0}, n, be);   /* the spec's input */
    assert_non_null(m);
    assert_int_equal(cdl_model_outputs(m), classes);
    load_params(m, fx, "param/");

    float *x = dev_upload(be, fixture_f32(fx, "input", (size_t)n * 2 * 9 * 9), (size_t)n * 2 * 9 * 9 * sizeof(float));
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, classes, fixture_i32(fx, "labels", n));
    const float *sgd = fixture_f32(fx, "sgd", 3);
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_SGD);
    oc.momentum = sgd[1];
    oc.weight_decay = sgd[2];
    cdl_optim *opt = cdl_optim_create(&oc, cdl_model_nparams(m), be);
    assert_non_null(opt);

    const float *logits = cdl_model_forward(m, x, n, 0, 0);
    float *host = host_copy(be, logits, (size_t)n * classes);
    double err = norm_err_ff(host, fixture_f32(fx, "eval_logits", (size_t)n * classes), (size_t)n * classes);
    assert_true(err < LOGITS_TOL);
    free(host);

    const float *losses = fixture_f32(fx, "losses", steps);
    for (int s = 0; s < steps; s++) {
        logits = cdl_model_forward(m, x, n, 1, 1000 + (uint64_t)s);
        if (s == 0) {
            host = host_copy(be, logits, (size_t)n * classes);
            err = norm_err_ff(host, fixture_f32(fx, "logits", (size_t)n * classes), (size_t)n * classes);
            if (err > LOGITS_TOL)
                fail_msg("train logits: normalised error %.3g", err);
            free(host);
        }
        char what[32];
        snprintf(what, sizeof what, "loss of step %d", s);
        check_rel(what, loss_bufs_run(&lb, logits), losses[s], LOSS_TOL);
        cdl_model_backward(m, lb.dlogits, NULL, NULL);
        if (s == 0)
            check_views(m, cdl_model_grads(m), fx, "grad/", GRAD_TOL);
        cdl_optim_step(opt, cdl_model_params(m), cdl_model_grads(m), sgd[0]);
    }
    check_views(m, cdl_model_params(m), fx, "final/", GRAD_TOL);

    cdl_optim_destroy(opt);
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_model_destroy(m);
    fixture_free(fx);
}

/* ------------------------------------------------------------ resnet20 */

/* tests/fixtures/make_resnet_fixture.py: parameters and inputs from a
 * counter hash (exact in double), gradients and stepped parameters sampled
 * every RESNET_STRIDE-th element with each tensor's norm. */
#define RESNET_STRIDE 37
#define RESNET_TOL 1e-5   /* relative (normalised per tensor), against float64 PyTorch */
/* With fast_conv, the running statistics: a channel's running mean is 0.1
 * times the batch mean of a convolution's outputs, normalised by the
 * largest of them, often 10x below the largest output, against which
 * F(4x4)'s error (up to 5e-6: test_kernels_conv_wino) is measured. */
#define RESNET_FAST_BUF_TOL 1e-4

static void hash_uniform(int v, size_t n, double *u)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t z = ((uint64_t)i * 2654435761ull + (uint64_t)(v + 1) * 97531ull) % (1ull << 32);
        u[i] = (double)z / 4294967296.0;
    }
}

static void hash_params(cdl_model *m)
{
    float *p = malloc(cdl_model_nparams(m) * sizeof *p);
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        double *u = malloc(pv->numel * sizeof *u);
        hash_uniform(v, pv->numel, u);
        for (size_t i = 0; i < pv->numel; i++) {
            double x = 2.0 * u[i] - 1.0;
            /* norms (batch and layer) near 1/0, biases small, weights by
             * fan-in (the GPT's embeddings have none): as the fixture
             * scripts draw them */
            p[pv->offset + i] = (float)(pv->is_bn || pv->is_norm
                                            ? (pv->is_bias ? 0.1 * x : 1.0 + 0.2 * x)
                                        : pv->is_bias ? 0.1 * x
                                        : pv->fan_in ? x / sqrt((double)pv->fan_in) : 0.5 * x);
        }
        free(u);
    }
    be->ops->to_device(be, cdl_model_params(m), p, cdl_model_nparams(m) * sizeof *p);
    free(p);
}

/* The model's buffer against the fixture's samples of `<prefix><name>`,
 * normalised by the tensor's largest value (all of it, so that a tensor
 * sampled once is not held to a relative error of a sum near 0), and its
 * norm. */
static void check_sampled(cdl_model *m, const float *dev, const fixture *fx, const char *prefix,
                          const char *norm_prefix, double tol)
{
    char key[160];
    float *host = host_copy(be, dev, cdl_model_nparams(m));
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        size_t ns = (pv->numel + RESNET_STRIDE - 1) / RESNET_STRIDE;
        snprintf(key, sizeof key, "%s%s", prefix, pv->name);
        const float *want = fixture_f32(fx, key, ns);
        float *got = malloc(ns * sizeof *got);
        double sumsq = 0, maxabs = 1e-30, maxdiff = 0;
        for (size_t i = 0; i < ns; i++)
            got[i] = host[pv->offset + i * RESNET_STRIDE];
        for (size_t i = 0; i < pv->numel; i++) {
            sumsq += (double)host[pv->offset + i] * host[pv->offset + i];
            maxabs = fmax(maxabs, fabs((double)host[pv->offset + i]));
        }
        for (size_t i = 0; i < ns; i++)
            maxdiff = fmax(maxdiff, fabs((double)got[i] - (double)want[i]));
        double err = maxdiff / maxabs;
        if (err > tol)
            fail_msg("%s: normalised error %.3g > %.1g", key, err, tol);
        if (norm_prefix) {
            snprintf(key, sizeof key, "%s%s", norm_prefix, pv->name);
            double want_norm = fixture_f32(fx, key, 1)[0];
            if (fabs(sqrt(sumsq) - want_norm) > tol * want_norm)
                fail_msg("%s: %.9g vs PyTorch %.9g", key, sqrt(sumsq), want_norm);
        }
        free(got);
    }
    free(host);
}

/* resnet20 in training mode: logits, loss, every gradient, the running
 * statistics and one SGD step (momentum, weight decay), all within 1e-5 of
 * PyTorch. fast: on a backend with fast_conv (Winograd F(4x4) on CPUs
 * with AVX2), the forward alone (logits, loss, running statistics) within 1e-5
 * and finite gradients: this fixture's gradients (batch 2 through batch
 * norm and ReLU) are chaotic at F(4x4)'s error (conv2d.c: noise of 2e-6 of
 * max |y| in float64 PyTorch's convolutions moves them by up to 8e-2),
 * while the forward is continuous in the convolutions' outputs. */
static void check_resnet20(const char *prefix, cdl_shape in, int fast)
{
    cdl_backend *exact = be;
    if (fast) {
        cdl_backend_params p;
        cdl_backend_params_init(&p);
        p.threads = 2;
        p.fast_conv = 1;
        be = cdl_backend_create_with("cpu", &p);
        assert_non_null(be);
    }
    const int n = 2, classes = 10;
    const int32_t labels[2] = {3, 7};
    char key[160];
    fixture *fx = fixture_load("tests/fixtures/resnet20.fix");
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("resnet20", in, classes, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, n, be);
    assert_non_null(m);
    hash_params(m);
    size_t nx = (size_t)n * in.c * in.h * in.w;
    double *u = malloc(nx * sizeof *u);
    float *xh = malloc(nx * sizeof *xh);
    hash_uniform(1000, nx, u);
    for (size_t i = 0; i < nx; i++)
        xh[i] = (float)(2.0 * u[i] - 1.0);
    float *x = dev_upload(be, xh, nx * sizeof *xh);
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, classes, labels);

    const float *logits = cdl_model_forward(m, x, n, 1, 0);
    double loss = loss_bufs_run(&lb, logits);
    float *lh = host_copy(be, logits, (size_t)n * classes);
    snprintf(key, sizeof key, "%slogits", prefix);
    double err = norm_err_ff(lh, fixture_f32(fx, key, (size_t)n * classes), (size_t)n * classes);
    if (err > RESNET_TOL)
        fail_msg("%s: normalised error %.3g", key, err);
    snprintf(key, sizeof key, "%sloss", prefix);
    check_rel(key, loss, fixture_f32(fx, key, 1)[0], RESNET_TOL);
    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    if (fast) {
        size_t np = cdl_model_nparams(m);
        float *g = host_copy(be, cdl_model_grads(m), np);
        double sumsq = 0;
        for (size_t i = 0; i < np; i++)
            sumsq += (double)g[i] * g[i];
        assert_true(isfinite(sumsq) && sumsq > 0);
        free(g);
    } else {
        snprintf(key, sizeof key, "%sgrad/", prefix);
        char nkey[64];
        snprintf(nkey, sizeof nkey, "%sgradnorm/", prefix);
        check_sampled(m, cdl_model_grads(m), fx, key, nkey, RESNET_TOL);
    }

    /* Running statistics after the batch (PyTorch's unbiased variance). */
    double worst = 0;
    float *bufs = host_copy(be, cdl_model_buffers(m), cdl_model_nbuffer_floats(m));
    for (int b = 0; b < cdl_model_nbuffers(m); b++) {
        const cdl_param_view *bv = cdl_model_buffer(m, b);
        snprintf(key, sizeof key, "%sbuf/%s", prefix, bv->name);
        double e = norm_err_ff(bufs + bv->offset, fixture_f32(fx, key, bv->numel), bv->numel);
        if (e > (fast ? RESNET_FAST_BUF_TOL : RESNET_TOL))
            fail_msg("%s: normalised error %.3g", key, e);
        worst = fmax(worst, e);
    }
    free(bufs);
    print_message("%s%s running statistics: worst normalised error %.3g\n", prefix,
                  fast ? " (fast_conv)" : "", worst);

    if (!fast) {
        cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_SGD);
        oc.momentum = 0.9f;
        oc.weight_decay = 5e-4f;
        cdl_optim *opt = cdl_optim_create(&oc, cdl_model_nparams(m), be);
        assert_non_null(opt);
        cdl_optim_step(opt, cdl_model_params(m), cdl_model_grads(m), 0.1f);
        snprintf(key, sizeof key, "%sstep/", prefix);
        check_sampled(m, cdl_model_params(m), fx, key, NULL, RESNET_TOL);
        cdl_optim_destroy(opt);
    }
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    free(lh);
    free(xh);
    free(u);
    cdl_model_destroy(m);
    fixture_free(fx);
    if (fast) {
        cdl_backend_destroy(be);
        be = exact;
    }
}

static void test_resnet20_cifar(void **state)
{
    (void)state;
    check_resnet20("cifar/", (cdl_shape){3, 32, 32}, 0);
}

static void test_resnet20_mnist(void **state)
{
    (void)state;
    check_resnet20("mnist/", (cdl_shape){1, 28, 28}, 0);
}

static void test_resnet20_fast_conv(void **state)
{
    (void)state;
    check_resnet20("cifar/", (cdl_shape){3, 32, 32}, 1);
    check_resnet20("mnist/", (cdl_shape){1, 28, 28}, 1);
    if (cpu_has_avx512()) {   /* and the AVX2 path, where it always runs F(4x4) */
        test_avx2_only(1);
        check_resnet20("cifar/", (cdl_shape){3, 32, 32}, 1);
        check_resnet20("mnist/", (cdl_shape){1, 28, 28}, 1);
        test_avx2_only(0);
    }
}

/* ------------------------------------------------------------ gpt */

/* tests/fixtures/make_gpt_fixture.py: the built-in gpt (2 layers, 2 heads,
 * n_embd 16, vocab 11, T 8, batch 3) against tests/fixtures/gpt_ref.py in
 * float64: logits, loss, every gradient and one AdamW step, parameters,
 * ids and labels from the counter hash above. */
#define GPT_TOL 1e-5   /* normalised per tensor, against float64 PyTorch */

/* buf (params or grads) against `<prefix><name>`, normalised by the
 * tensor's largest value. */
static void check_full(cdl_model *m, const float *dev, const fixture *fx, const char *prefix)
{
    char key[160];
    float *host = host_copy(be, dev, cdl_model_nparams(m));
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        snprintf(key, sizeof key, "%s%s", prefix, pv->name);
        const fixture_rec *rec = fixture_get(fx, key, FIX_F32, pv->numel);
        assert_int_equal(rec->ndim, pv->ndim);
        for (int d = 0; d < pv->ndim; d++)
            assert_int_equal(rec->dims[d], pv->shape[d]);
        const float *want = rec->data;
        double maxabs = 1e-30, maxdiff = 0;
        for (size_t i = 0; i < pv->numel; i++) {
            maxabs = fmax(maxabs, fabs((double)want[i]));
            maxdiff = fmax(maxdiff, fabs((double)host[pv->offset + i] - (double)want[i]));
        }
        if (maxdiff / maxabs > GPT_TOL)
            fail_msg("%s: normalised error %.3g > %.1g", key, maxdiff / maxabs, GPT_TOL);
    }
    free(host);
}

static void check_gpt(const char *prefix, const char *model, int ignore)
{
    enum { N = 3, T = 8, V = 11 };
    char key[160];
    fixture *fx = fixture_load("tests/fixtures/gpt.fix");
    cdl_model_spec spec;
    cdl_shape in = {T, 1, 1};
    assert_int_equal(cdl_spec_builtin(model, in, V, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, N, be);
    assert_non_null(m);
    assert_int_equal(cdl_model_positions(m), T);
    assert_int_equal(cdl_model_outputs(m), T * V);
    /* Every parameter of the fixture (PyTorch's named_parameters) has a view. */
    int in_fixture = 0;
    snprintf(key, sizeof key, "%sgrad/", prefix);
    for (int i = 0; i < fx->count; i++)
        in_fixture += !strncmp(fx->recs[i].name, key, strlen(key));
    assert_int_equal(in_fixture, cdl_model_nviews(m));
    assert_int_equal(cdl_model_naliases(m), 1);
    assert_string_equal(cdl_model_alias(m, 0)->name, "lm_head.weight");
    assert_int_equal(cdl_model_alias(m, 0)->offset, cdl_model_find(m, "transformer.wte.weight")->offset);
    hash_params(m);

    float ids[N * T];
    int32_t labels[N * T];
    for (int i = 0; i < N * T; i++) {
        ids[i] = (float)((i * 7 + 3) % V);
        labels[i] = (i * 5 + 1) % V;
    }
    int valid = N * T;
    if (ignore) {
        labels[1 * T + 3] = -1;
        valid--;
    }
    float *x = dev_upload(be, ids, sizeof ids);
    loss_bufs lb;
    loss_bufs_init(&lb, be, N * T, V, labels);

    const float *logits = cdl_model_forward(m, x, N, 1, 0);
    assert_non_null(logits);
    float *lh = host_copy(be, logits, (size_t)N * T * V);
    snprintf(key, sizeof key, "%slogits", prefix);
    double err = norm_err_ff(lh, fixture_f32(fx, key, (size_t)N * T * V), (size_t)N * T * V);
    if (err > GPT_TOL)
        fail_msg("%s: normalised error %.3g", key, err);
    /* Mean over the valid positions: the caller's grad_scale (ignore index). */
    float *loss = malloc(N * T * sizeof *loss);
    be->ops->xent_fwd_bwd(be, N * T, V, logits, lb.labels, 1.0f / (float)valid, lb.dlogits,
                          lb.loss, lb.pred);
    be->ops->to_host(be, loss, lb.loss, N * T * sizeof *loss);
    double sum = 0;
    for (int i = 0; i < N * T; i++)
        sum += loss[i];
    snprintf(key, sizeof key, "%sloss", prefix);
    check_rel(key, sum / valid, fixture_f32(fx, key, 1)[0], GPT_TOL);

    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    snprintf(key, sizeof key, "%sgrad/", prefix);
    check_full(m, cdl_model_grads(m), fx, key);

    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    oc.beta1 = 0.9f;
    oc.beta2 = 0.95f;
    oc.eps = 1e-5f;   /* make_gpt_fixture.py says why */
    oc.weight_decay = 0.1f;
    cdl_optim *opt = cdl_optim_create(&oc, cdl_model_nparams(m), be);
    assert_non_null(opt);
    cdl_optim_step(opt, cdl_model_params(m), cdl_model_grads(m), 1e-3f);
    snprintf(key, sizeof key, "%sstep/", prefix);
    check_full(m, cdl_model_params(m), fx, key);

    cdl_optim_destroy(opt);
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    free(loss);
    free(lh);
    cdl_model_destroy(m);
    fixture_free(fx);
}

static void test_gpt_bias(void **state)
{
    (void)state;
    check_gpt("bias/", "gpt:n_layer=2,n_head=2,n_embd=16,block_size=10", 1);
}

static void test_gpt_nobias(void **state)
{
    (void)state;
    check_gpt("nobias/", "gpt:n_layer=2,n_head=2,n_embd=16,bias=false", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_mnist),
        cmocka_unit_test(test_lenet_cifar),
        cmocka_unit_test(test_allkinds_training),
        cmocka_unit_test(test_resnet20_cifar),
        cmocka_unit_test(test_resnet20_mnist),
        cmocka_unit_test(test_resnet20_fast_conv),
        cmocka_unit_test(test_gpt_bias),
        cmocka_unit_test(test_gpt_nobias),
    };
    return cmocka_run_group_tests(tests, backend_setup, backend_teardown);
}
