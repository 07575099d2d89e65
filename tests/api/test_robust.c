/* libcdl's public API given what a C program gets wrong, through the
 * shared libcdl and its public header only: a misspelt dist backend on
 * one process, a checkpoint of a newer cdl. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

/* One process alone: the rank contract of a world of 1. */
static cdl_rank_info alone(void)
{
    cdl_rank_info ri;
    memset(&ri, 0, sizeof ri);
    ri.world = ri.local_world = ri.nnodes = ri.replicas_per_gpu = 1;
    ri.source = "single";
    return ri;
}

/* cdl_dist_create refuses a misspelt backend on one rank as on many: "ncll"
 * used to train alone without a word, and failed only on the job of
 * several ranks it was written for. Every name it takes still works. */
static void test_dist_name_on_one_rank(void **state)
{
    (void)state;
    cdl_rank_info ri = alone();
    const char *bad[] = {"ncll", "shmm", "", "hier:tcp", "shm:mpi", "autoo", "hierx"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (!*bad[i])
            continue;   /* "" means auto */
        cdl_error("stale");
        assert_null(cdl_dist_create(&ri, bad[i], NULL, 0));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        if (!strstr(cdl_last_error(), quoted))
            fail_msg("dist backend %s: '%s'", bad[i], cdl_last_error());
    }
    const char *good[] = {"auto", "single", "shm", "mpi", "nccl", "hier", "hier:mpi",
                          "hier:nccl", "hier:store", ""};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cdl_dist *d = cdl_dist_create(&ri, good[i], NULL, 0);
        if (!d)
            fail_msg("dist backend '%s' on one rank: %s", good[i], cdl_last_error());
        assert_int_equal(cdl_dist_world(d), 1);
        assert_string_equal(cdl_dist_backend_name(d), "single");
        cdl_dist_destroy(d);
    }
}

/* A checkpoint of a newer cdl (a format above this one's) is refused by
 * cdl_ckpt_check_format and cdl_model_load_weights, naming the file, its
 * format and the newest this cdl reads; the same file in this cdl's
 * format, and weights without a format (PyTorch's), load. */
static void test_newer_checkpoint(void **state)
{
    (void)state;
    char dir[256], path[300], newer[300], ours[300];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "api-robust"), 0);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(newer, sizeof newer, "%s/newer.safetensors", dir);
    snprintf(ours, sizeof ours, "%s/ours.safetensors", dir);

    cdl_backend *be = cdl_backend_create("cpu", 1);
    assert_non_null(be);
    cdl_shape in = {1, 8, 8};
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    assert_non_null(m);
    cdl_model_init(m, 1);
    assert_int_equal(cdl_model_save_weights(m, path), 0);

    /* The same tensors under a training checkpoint's format entry. */
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    assert_int_equal(cdl_ckpt_check_format(f), 0);
    int nt = cdl_st_count(f);
    cdl_st_tensor *t = calloc((size_t)nt, sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < nt; i++) {
        int64_t shape[8];
        size_t n;
        t[i].name = cdl_st_name(f, i);
        t[i].data = cdl_st_data(f, i, &n);
        assert_non_null(t[i].data);
        assert_int_equal(cdl_st_shape(f, i, &t[i].ndim, shape), 0);
        memcpy(t[i].shape, shape, sizeof t[i].shape);
    }
    cdl_st_meta meta[2] = {{"format", "cdl-checkpoint-9"}, {"cdl_version", "9.9.9"}};
    assert_int_equal(cdl_st_write(newer, t, nt, meta, 2), 0);
    meta[0].value = "cdl-checkpoint-3";
    meta[1].value = cdl_version();
    assert_int_equal(cdl_st_write(ours, t, nt, meta, 2), 0);
    free(t);
    cdl_st_close(f);

    cdl_st_file *g = cdl_st_open(newer);
    assert_non_null(g);
    assert_int_equal(cdl_ckpt_check_format(g), -1);
    const char *want[] = {newer, "written by cdl 9.9.9 in format 'cdl-checkpoint-9'",
                          "(up to 'cdl-checkpoint-", "with cdl 9.9.9 or newer"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(cdl_last_error(), want[i]))
            fail_msg("no '%s' in '%s'", want[i], cdl_last_error());
    cdl_st_close(g);
    assert_int_equal(cdl_model_load_weights(m, newer, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "'cdl-checkpoint-9'"));

    if (cdl_model_load_weights(m, ours, NULL) != 0)
        fail_msg("%s", cdl_last_error());
    if (cdl_model_load_weights(m, path, NULL) != 0)
        fail_msg("%s", cdl_last_error());

    cdl_model_destroy(m);
    cdl_backend_destroy(be);
    test_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_name_on_one_rank),
        cmocka_unit_test(test_newer_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
