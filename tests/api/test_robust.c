/* libcdl's public API given what a C program gets wrong, through the
 * shared libcdl and its public header only: the NULL result of a failed
 * create passed on, NULL out-pointers, a misspelt dist backend on one
 * process, a checkpoint of a newer cdl; and cdl_last_error()'s contract
 * (like errno: meaningful after a failure, left alone by a success). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

/* The last call failed and its message names `what` (the function). */
#define FAILED_NAMING(call, what)                                                                  \
    do {                                                                                           \
        cdl_error("stale");                                                                        \
        assert_int_equal((call), -1);                                                              \
        if (!strstr(cdl_last_error(), (what)))                                                     \
            fail_msg("%s: message '%s' does not name %s", #call, cdl_last_error(), (what));       \
    } while (0)
#define NULL_NAMING(call, what)                                                                    \
    do {                                                                                           \
        cdl_error("stale");                                                                        \
        assert_null((call));                                                                       \
        if (!strstr(cdl_last_error(), (what)))                                                     \
            fail_msg("%s: message '%s' does not name %s", #call, cdl_last_error(), (what));       \
    } while (0)

/* Every function that reports failures refuses a NULL object or
 * out-pointer with -1 (or NULL) and a message, rather than crashing:
 * they all crashed before (a cdl_dist never made, a NULL backend from a
 * failed cdl_backend_create, cdl_rank_discover(NULL), ...). */
static void test_null_arguments(void **state)
{
    (void)state;
    cdl_shape in = {1, 8, 8};
    int b;
    char *text;
    unsigned char uuid[16];
    float x[4] = {0};
    double xd[1] = {0};

    FAILED_NAMING(cdl_backend_parse_tf32("on", "--tf32", NULL, &b), "cdl_backend_parse_tf32");
    FAILED_NAMING(cdl_backend_parse_precision("fp32", "--precision", NULL),
                  "cdl_backend_parse_precision");
    NULL_NAMING(cdl_backend_host_alloc(NULL, 16), "cdl_backend_host_alloc");
    FAILED_NAMING(cdl_backend_copy_in(NULL, x, x, sizeof x), "cdl_backend_copy_in");
    FAILED_NAMING(cdl_backend_copy_in_wait(NULL), "cdl_backend_copy_in_wait");
    FAILED_NAMING(cdl_backend_mark(NULL, 0), "cdl_backend_mark");
    FAILED_NAMING(cdl_backend_mark_done(NULL, 0), "cdl_backend_mark_done");
    FAILED_NAMING(cdl_backend_mark_wait(NULL, 0), "cdl_backend_mark_wait");
    FAILED_NAMING(cdl_backend_graph_begin(NULL, 1), "cdl_backend_graph_begin");
    FAILED_NAMING(cdl_backend_graph_end(NULL), "cdl_backend_graph_end");
    FAILED_NAMING(cdl_backend_device_uuid(NULL, uuid), "cdl_backend_device_uuid");

    FAILED_NAMING(cdl_spec_fit(NULL, in, 10), "cdl_spec_fit");
    FAILED_NAMING(cdl_spec_read("x.spec", NULL), "cdl_spec_read");
    FAILED_NAMING(cdl_spec_read(NULL, &text), "cdl_spec_read");
    FAILED_NAMING(cdl_spec_load(NULL, NULL), "cdl_spec_read");
    FAILED_NAMING(cdl_spec_builtin("mlp", in, 10, NULL), "cdl_spec_builtin");
    FAILED_NAMING(cdl_spec_parse("input 1x8x8\nlinear 10\n", "x", NULL), "cdl_spec_parse");
    FAILED_NAMING(cdl_spec_infer(NULL, in, NULL), "cdl_spec_infer");
    FAILED_NAMING(cdl_model_set_spec_text(NULL, "x"), "cdl_model_set_spec_text");
    NULL_NAMING(cdl_model_forward(NULL, x, 1, 0, 0), "cdl_model_forward");
    FAILED_NAMING(cdl_optim_set_no_decay(NULL, NULL, NULL, 0), "cdl_optim_set_no_decay");
    FAILED_NAMING(cdl_dataset_copy_normalization(NULL, NULL), "cdl_dataset_copy_normalization");
    FAILED_NAMING(cdl_dataset_from_csv_rows(NULL, NULL, 0, NULL, NULL, 0, NULL),
                  "cdl_dataset_from_csv_rows");
    FAILED_NAMING(cdl_dataset_from_csv_rows_lines(NULL, NULL, 0, NULL, NULL, 0, NULL, NULL),
                  "cdl_dataset_from_csv_rows_lines");

    FAILED_NAMING(cdl_rank_discover(NULL), "cdl_rank_discover");
    FAILED_NAMING(cdl_dist_config_from_env(NULL), "cdl_dist_config_from_env");
    NULL_NAMING(cdl_dist_create(NULL, "auto", NULL, 0), "cdl_dist_create");
    NULL_NAMING(cdl_dist_create_with(NULL, "auto", NULL, NULL), "cdl_dist_create");
    FAILED_NAMING(cdl_dist_allreduce(NULL, x, 4, 1), "cdl_dist_allreduce");
    FAILED_NAMING(cdl_dist_allreduce_f64(NULL, xd, 1), "cdl_dist_allreduce_f64");
    FAILED_NAMING(cdl_dist_broadcast(NULL, x, sizeof x, 0), "cdl_dist_broadcast");
    FAILED_NAMING(cdl_dist_barrier(NULL), "cdl_dist_barrier");
    FAILED_NAMING(cdl_dist_allgather(NULL, x, x, 4), "cdl_dist_allgather");
    FAILED_NAMING(cdl_dist_reduce_scatter(NULL, x, 4, 1), "cdl_dist_reduce_scatter");
    FAILED_NAMING(cdl_dist_allgather_shards(NULL, x, 4), "cdl_dist_allgather_shards");
    FAILED_NAMING(cdl_ckpt_check_format(NULL), "cdl_ckpt_check_format");
}

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

/* cdl_last_error() is errno-like, as cdl.h says: a failure sets it, a
 * later success leaves it (so a program tests return values, not the
 * message), and it is per thread. */
static void test_last_error_contract(void **state)
{
    (void)state;
    cdl_shape in = {1, 8, 8};
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("no-such-model", in, 10, &spec), -1);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", cdl_last_error());
    assert_non_null(strstr(msg, "no-such-model"));
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &spec), 0);
    assert_string_equal(cdl_last_error(), msg);
}

/* A loader config from cdl_loader_defaults with batch_size or world
 * left 0, as the defaults leave them, says which field to set: "rank 0
 * of world 0: need 0 <= rank < world" did not say it was the program's
 * to set. */
static void test_loader_defaults_named(void **state)
{
    (void)state;
    cdl_shape in = {1, 4, 4};
    cdl_dataset d;
    assert_int_equal(cdl_dataset_synthetic(10, in, 2, 1, &d), 0);
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    assert_null(cdl_loader_create(&d, &lc));
    assert_non_null(strstr(cdl_last_error(), "cdl_loader_config.batch_size"));
    lc.batch_size = 4;
    assert_null(cdl_loader_create(&d, &lc));
    assert_non_null(strstr(cdl_last_error(), "cdl_loader_defaults leaves world 0"));
    lc.world = 1;
    cdl_loader *l = cdl_loader_create(&d, &lc);
    if (!l)
        fail_msg("%s", cdl_last_error());
    cdl_loader_destroy(l);
    cdl_dataset_free(&d);
}

/* A training checkpoint records which build wrote it (cdl_build), where
 * the build has an id: two builds of one version told apart. */
static void test_build_id_recorded(void **state)
{
    (void)state;
    char dir[256], path[400];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "api-build"), 0);
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.dataset, sizeof cfg.dataset, "synthetic");
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s/ck", dir);
    cfg.synthetic_n = 64;
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.quiet = 1;
    if (cdl_train_run(&cfg, NULL) != 0)
        fail_msg("%s", cdl_last_error());
    snprintf(path, sizeof path, "%s/ck/last.safetensors", dir);
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    const char *build = cdl_st_meta_get(f, "cdl_build");
    if (*cdl_build_id())
        assert_string_equal(build ? build : "(none)", cdl_build_id());
    else
        assert_null(build);
    cdl_st_close(f);
    test_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_dist_name_on_one_rank),
        cmocka_unit_test(test_newer_checkpoint),
        cmocka_unit_test(test_last_error_contract),
        cmocka_unit_test(test_build_id_recorded),
        cmocka_unit_test(test_loader_defaults_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
