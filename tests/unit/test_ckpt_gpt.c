/* Checkpoints of a gpt (tied lm_head): the file holds exactly the keys of
 * the PyTorch reference's state_dict (tests/fixtures/gpt.fix), so
 * load_state_dict(strict=True) takes it, lm_head.weight equal to
 * transformer.wte.weight; resuming restores parameters and AdamW state
 * bitwise, and the next step equals the uninterrupted run's bitwise. */
#include "model_testutil.h"

#include <unistd.h>

#include "fixture.h"
#include "train/checkpoint.h"

enum { N = 2, T = 8, V = 11 };
#define MODEL "gpt:n_layer=2,n_head=2,n_embd=16,block_size=10"

TEST_CPU_BACKEND_GROUP()

typedef struct run {
    cdl_model *m;
    cdl_optim *o;
    float *x;
    loss_bufs lb;
} run;

static void run_init(run *r)
{
    cdl_model_spec spec;
    cdl_shape in = {T, 1, 1};
    assert_int_equal(cdl_spec_builtin(MODEL, in, V, &spec), 0);
    r->m = cdl_model_create(&spec, in, N, be);
    assert_non_null(r->m);
    cdl_model_init(r->m, 42);
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    r->o = cdl_optim_create(&oc, cdl_model_nparams(r->m), be);
    assert_non_null(r->o);
    float ids[N * T];
    int32_t labels[N * T];
    for (int i = 0; i < N * T; i++) {
        ids[i] = (float)((i * 3 + 1) % V);
        labels[i] = (i * 4 + 2) % V;
    }
    r->x = dev_upload(be, ids, sizeof ids);
    loss_bufs_init(&r->lb, be, N * T, V, labels);
}

static void run_step(run *r)
{
    const float *logits = cdl_model_forward(r->m, r->x, N, 1, 7);
    assert_non_null(logits);
    loss_bufs_run(&r->lb, logits);
    cdl_model_backward(r->m, r->lb.dlogits, NULL, NULL);
    cdl_optim_step(r->o, cdl_model_params(r->m), cdl_model_grads(r->m), 1e-3f);
}

static void run_free(run *r)
{
    loss_bufs_free(&r->lb);
    be->ops->free(be, r->x);
    cdl_optim_destroy(r->o);
    cdl_model_destroy(r->m);
}

static void assert_same(const float *a_dev, const float *b_dev, size_t n)
{
    float *a = host_copy(be, a_dev, n), *b = host_copy(be, b_dev, n);
    assert_memory_equal(a, b, n * sizeof *a);
    free(a);
    free(b);
}

static void test_gpt_checkpoint(void **state)
{
    (void)state;
    char dir[64], path[128];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "ckpt-gpt"), 0);
    snprintf(path, sizeof path, "%s/last.safetensors", dir);

    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    train_position pos = {.world = 1, .step = 1};
    run a, b;
    run_init(&a);
    run_step(&a);
    assert_int_equal(train_ckpt_save(path, a.m, a.o, &cfg, &pos), 0);

    /* The file's model tensors are the reference's state_dict keys. */
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    fixture *fx = fixture_load("tests/fixtures/gpt.fix");
    char *keys = strdup((const char *)fixture_get(fx, "bias/state_dict_keys", FIX_U8, 0)->data);
    int nkeys = 0;
    char *save = NULL;
    for (char *k = strtok_r(keys, "\n", &save); k; k = strtok_r(NULL, "\n", &save)) {
        if (cdl_st_find(f, k) < 0)
            fail_msg("the checkpoint lacks %s", k);
        nkeys++;
    }
    int model_tensors = 0;
    for (int i = 0; i < cdl_st_count(f); i++)
        model_tensors += strncmp(cdl_st_name(f, i), "optimizer.", 10) != 0;
    assert_int_equal(model_tensors, nkeys);
    size_t n1, n2;
    const float *wte = cdl_st_data(f, cdl_st_find(f, "transformer.wte.weight"), &n1);
    const float *head = cdl_st_data(f, cdl_st_find(f, "lm_head.weight"), &n2);
    assert_int_equal(n1, (size_t)V * 16);
    assert_int_equal(n1, n2);
    assert_memory_equal(wte, head, n1 * sizeof *wte);
    cdl_st_close(f);
    free(keys);
    fixture_free(fx);

    /* Resume: bitwise the same parameters, state and next step. */
    run_init(&b);
    train_position got = {0};
    assert_int_equal(train_ckpt_load(path, b.m, b.o, &cfg, &got), 0);
    assert_int_equal(got.step, 1);
    size_t np = cdl_model_nparams(a.m);
    assert_same(cdl_model_params(a.m), cdl_model_params(b.m), np);
    for (int s = 0; s < cdl_optim_nstate(a.o); s++)
        assert_same(cdl_optim_state(a.o, s), cdl_optim_state(b.o, s), np);
    run_step(&a);
    run_step(&b);
    assert_same(cdl_model_params(a.m), cdl_model_params(b.m), np);

    /* --init reads it too (the alias is no unknown tensor). */
    assert_int_equal(cdl_model_load_weights(b.m, path, NULL), 0);

    run_free(&a);
    run_free(&b);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_checkpoint),
    };
    return cmocka_run_group_tests(tests, backend_setup, backend_teardown);
}
