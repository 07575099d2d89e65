/* The model against PyTorch (tests/fixtures/make_fixtures.py): LeNet on
 * MNIST- and CIFAR-shaped batches (logits, loss, every gradient), and a
 * model with every layer kind trained for three SGD steps with dropout. The
 * fixture's weights are loaded by PyTorch name, which also checks the
 * names, order and layouts of the parameter views. */
#include "model_testutil.h"

#include "fixture.h"

#define LOGITS_TOL 1e-5   /* normalised, against float64 PyTorch */
#define LOSS_TOL 1e-5     /* relative */
#define GRAD_TOL 1e-4     /* normalised, per parameter tensor */

static cdl_backend *be;

static int setup(void **state)
{
    (void)state;
    be = cdl_backend_cpu_create(2);
    return be ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cdl_backend_destroy(be);
    return 0;
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_mnist),
        cmocka_unit_test(test_lenet_cifar),
        cmocka_unit_test(test_allkinds_training),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
