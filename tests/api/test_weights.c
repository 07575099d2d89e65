/* cdl_model_save_weights against cdl_model_load_weights, through the
 * shared libcdl and its public header only: a program writing its own
 * training loop saves a model with batch norm (running statistics, the
 * num_batches_tracked count) or tied weights and gets every value back. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

/* Saves m, loads the file into a fresh model of the same spec and checks
 * that parameters and buffers come back bit for bit. */
static void roundtrip(cdl_model *m, const cdl_model_spec *spec, cdl_shape in, cdl_backend *be)
{
    char dir[256], path[300];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "cdl-api-weights"), 0);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    assert_int_equal(cdl_model_save_weights(m, path), 0);

    cdl_model *m2 = cdl_model_create(spec, in, 2, be);
    assert_non_null(m2);
    cdl_model_init(m2, 99);
    if (cdl_model_load_weights(m2, path, NULL) != 0)
        fail_msg("%s", cdl_last_error());
    assert_memory_equal(cdl_model_params(m), cdl_model_params(m2),
                        cdl_model_nparams(m) * sizeof(float));
    if (cdl_model_nbuffer_floats(m))
        assert_memory_equal(cdl_model_buffers(m), cdl_model_buffers(m2),
                            cdl_model_nbuffer_floats(m) * sizeof(float));

    /* PyTorch's layout: the counts as I64, tied weights under both names. */
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    assert_int_equal(cdl_st_count(f), cdl_model_nviews(m) + cdl_model_nbuffers(m) +
                                          cdl_model_naliases(m));
    for (int i = 0; i < cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = cdl_model_buffer(m, i);
        int t = cdl_st_find(f, v->name);
        assert_true(t >= 0);
        assert_string_equal(cdl_st_dtype(f, t), v->is_count ? "I64" : "F32");
    }
    for (int i = 0; i < cdl_model_naliases(m); i++)
        assert_true(cdl_st_find(f, cdl_model_alias(m, i)->name) >= 0);
    cdl_st_close(f);
    cdl_model_destroy(m2);
    test_rm_rf(dir);
}

/* The built-in `name` for inputs of shape in, initialised from seed 1. */
static cdl_model *built(const char *name, cdl_shape in, int classes, cdl_backend *be,
                        cdl_model_spec *spec)
{
    assert_non_null(be);
    assert_int_equal(cdl_spec_builtin(name, in, classes, spec), 0);
    cdl_model *m = cdl_model_create(spec, in, 2, be);
    assert_non_null(m);
    cdl_model_init(m, 1);
    return m;
}

static void test_batchnorm_model(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_create("cpu", 1);
    cdl_shape in = {3, 8, 8};
    cdl_model_spec spec;
    cdl_model *m = built("resnet20", in, 4, be, &spec);
    /* Two training forwards move the running statistics and the counts
     * away from their initial values. */
    float x[2 * 3 * 8 * 8];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int k = 0; k < 2; k++)
        assert_non_null(cdl_model_forward(m, x, 2, 1, 0));
    assert_true(cdl_model_nbuffers(m) > 0);
    roundtrip(m, &spec, in, be);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

static void test_tied_model(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_create("cpu", 1);
    cdl_shape in = {8, 1, 1};
    cdl_model_spec spec;
    cdl_model *m = built("gpt:n_layer=1,n_head=2,n_embd=16", in, 32, be, &spec);
    assert_true(cdl_model_naliases(m) > 0);
    roundtrip(m, &spec, in, be);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

static void test_errors(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_create("cpu", 1);
    cdl_model_spec spec;
    cdl_model *m = built("mlp", (cdl_shape){1, 4, 4}, 2, be, &spec);
    assert_int_equal(cdl_model_save_weights(m, "/nonexistent-dir/w.safetensors"), -1);
    assert_non_null(strstr(cdl_last_error(), "/nonexistent-dir/w.safetensors"));
    assert_int_equal(cdl_model_save_weights(m, ""), -1);
    assert_int_equal(cdl_model_save_weights(NULL, "w.safetensors"), -1);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

/* Weights of a run that diverged (a NaN in a bias, an infinity in a
 * weight) are refused, naming the tensor, and leave the model as it was:
 * loaded, the first loss was NaN (cdl-train --init) and cdl-eval printed
 * NaN predictions. */
static void test_nonfinite(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_create("cpu", 1);
    cdl_model_spec spec;
    cdl_model *m = built("mlp", (cdl_shape){1, 4, 4}, 2, be, &spec);
    const cdl_param_view *v = NULL;
    for (int i = 0; i < cdl_model_nviews(m) && !v; i++)
        if (cdl_model_view(m, i)->ndim == 1)
            v = cdl_model_view(m, i);
    assert_non_null(v);
    char dir[256], path[300], want[200];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "cdl-api-weights"), 0);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float *p = cdl_model_params(m);
    p[v->offset + 2] = NAN;
    p[v->offset + 3] = -INFINITY;
    assert_int_equal(cdl_model_save_weights(m, path), 0);

    cdl_model *m2 = cdl_model_create(&spec, (cdl_shape){1, 4, 4}, 2, be);
    assert_non_null(m2);
    cdl_model_init(m2, 99);
    size_t bytes = cdl_model_nparams(m2) * sizeof(float);
    float *before = malloc(bytes);
    assert_non_null(before);
    memcpy(before, cdl_model_params(m2), bytes);
    assert_int_equal(cdl_model_load_weights(m2, path, NULL), -1);
    snprintf(want, sizeof want, "tensor '%s' holds 2 NaN or infinite values (the first at flat "
             "index 2, NaN): weights saved after a training diverged", v->name);
    if (!strstr(cdl_last_error(), want))
        fail_msg("%s", cdl_last_error());
    assert_memory_equal(before, cdl_model_params(m2), bytes);
    free(before);
    cdl_model_destroy(m2);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
    test_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm_model),
        cmocka_unit_test(test_tied_model),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
