/* A program and the libcdl.so.0 it runs with may be of different
 * releases (one soname spans them). Through the shared libcdl and its
 * public headers only:
 * - a program of newer headers than its libcdl (a larger struct) is
 *   refused by the call that takes the struct, naming this libcdl's
 *   release and what to do, instead of training with the fields it
 *   lacks ignored (keep_last, should_stop);
 * - a program of older headers (a smaller struct) gets defaults written
 *   into its struct only: the bytes after it stay its own (they were
 *   overwritten with zeros, and then read as on_log or should_stop);
 * - the plain cdl_X_defaults, which programs built before the macros
 *   call, write the struct as it was then. */
#include "testutil.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

/* Room for a struct of any size up to that of this libcdl's plus 64
 * bytes, filled with a canary byte first. */
#define CANARY 0xAB
typedef union frame {
    unsigned char bytes[sizeof(cdl_train_config) + 64];
    cdl_train_config train;
    cdl_loader_config loader;
    cdl_dataset_options dataset;
    cdl_dist_config dist;
    cdl_backend_params backend;
} frame;

static frame *fresh(void)
{
    static frame f;
    memset(&f, CANARY, sizeof f);
    return &f;
}

/* Bytes from `from` to the frame's end still hold the canary. */
static void assert_untouched(const frame *f, size_t from)
{
    for (size_t i = from; i < sizeof f->bytes; i++)
        if (f->bytes[i] != CANARY)
            fail_msg("byte %zu past a struct of %zu bytes was overwritten", i, from);
}

/* The error of a struct from newer headers. */
static void assert_newer(const char *type)
{
    const char *e = cdl_last_error();
    assert_non_null(strstr(e, type));
    assert_non_null(strstr(e, "built against the headers of a newer cdl than this libcdl, cdl "));
    assert_non_null(strstr(e, cdl_version()));
    assert_non_null(strstr(e, "libcdl.so"));
    assert_non_null(strstr(e, "run it with the libcdl of the release it was built with"));
}

static void test_newer_train_config_refused(void **state)
{
    (void)state;
    frame *f = fresh();
    size_t newer = sizeof(cdl_train_config) + 16;
    cdl_train_defaults_sized(&f->train, newer);
    assert_int_equal(f->train.size, newer);
    assert_int_equal(f->train.epochs, 10);
    assert_int_equal(f->bytes[sizeof(cdl_train_config)], 0);   /* the fields it lacks: 0 */
    assert_untouched(f, newer);
    snprintf(f->train.dataset, sizeof f->train.dataset, "synthetic");
    snprintf(f->train.device, sizeof f->train.device, "cpu");
    f->train.synthetic_n = 64;
    f->train.epochs = 1;
    cdl_train_result res;
    assert_int_equal(cdl_train_run(&f->train, &res), -1);
    assert_newer("cdl_train_config is 8");
}

static void test_newer_other_structs_refused(void **state)
{
    (void)state;
    frame *f = fresh();
    cdl_dataset ds, *d = &ds;
    assert_int_equal(cdl_dataset_synthetic(32, (cdl_shape){1, 8, 8}, 10, 1, d), 0);
    cdl_loader_defaults_sized(&f->loader, sizeof(cdl_loader_config) + 8);
    f->loader.batch_size = 8;
    f->loader.world = 1;
    assert_null(cdl_loader_create(d, &f->loader));
    assert_newer("cdl_loader_config");

    f = fresh();
    cdl_backend_params_init_sized(&f->backend, sizeof(cdl_backend_params) + 8);
    assert_int_equal(f->backend.device, -1);
    assert_null(cdl_backend_create_with("cpu", &f->backend));
    assert_newer("cdl_backend_params");

    f = fresh();
    assert_int_equal(cdl_dist_config_from_env_sized(&f->dist, sizeof(cdl_dist_config) + 8), -1);
    assert_newer("cdl_dist_config");
    cdl_dataset_free(d);
}

/* A struct that ends before this libcdl's (an older release's): the
 * defaults fill it, nothing after it changes, and libcdl reads it. */
static void test_older_struct_untouched(void **state)
{
    (void)state;
    frame *f = fresh();
    size_t older = offsetof(cdl_train_config, keep_last);
    cdl_train_defaults_sized(&f->train, older);
    assert_int_equal(f->train.size, older);
    assert_int_equal(f->train.batch_size, 64);
    assert_untouched(f, older);

    f = fresh();
    size_t lolder = offsetof(cdl_loader_config, world) + sizeof(int);
    cdl_loader_defaults_sized(&f->loader, lolder);
    assert_untouched(f, lolder);
    cdl_dataset ds, *d = &ds;
    assert_int_equal(cdl_dataset_synthetic(32, (cdl_shape){1, 8, 8}, 10, 1, d), 0);
    f->loader.batch_size = 8;
    f->loader.world = 1;
    cdl_loader *l = cdl_loader_create(d, &f->loader);
    assert_non_null(l);
    cdl_loader_destroy(l);
    cdl_dataset_free(d);

    f = fresh();
    size_t dolder = offsetof(cdl_dataset_options, norm_std) + sizeof(void *);
    cdl_dataset_options_defaults_sized(&f->dataset, dolder);
    assert_untouched(f, dolder);
    f = fresh();
    size_t bolder = offsetof(cdl_backend_params, threads) + sizeof(int);
    cdl_backend_params_from_env_sized(&f->backend, bolder);
    assert_untouched(f, bolder);
    cdl_backend *b = cdl_backend_create_with("cpu", &f->backend);
    assert_non_null(b);
    cdl_backend_destroy(b);
    f = fresh();
    size_t dist_older = offsetof(cdl_dist_config, shm_slab_kb);
    cdl_dist_config_init_sized(&f->dist, dist_older);
    assert_untouched(f, dist_older);
}

/* sizeof(type) when field was its last (lib/core/sized.h's SIZED_UPTO). */
#define UPTO(type, field)                                                            \
    ((offsetof(type, field) + sizeof(((type *)0)->field) + _Alignof(type) - 1) /   \
     _Alignof(type) * _Alignof(type))

/* The macros pass this program's sizeof; the plain functions (programs
 * built before them) write the structs as they were then: fields added
 * since (cdl_train_config.jpeg_full, cdl_dataset_options.left_out) are
 * beyond an older program's struct. */
static void test_macros_and_plain_functions(void **state)
{
    (void)state;
    frame *f = fresh();
    cdl_train_defaults(&f->train);
    assert_int_equal(f->train.size, sizeof(cdl_train_config));
    assert_untouched(f, sizeof(cdl_train_config));
    f = fresh();
    (cdl_train_defaults)(&f->train);
    assert_int_equal(f->train.size, UPTO(cdl_train_config, should_stop_ctx));
    assert_untouched(f, UPTO(cdl_train_config, should_stop_ctx));
    f = fresh();
    (cdl_loader_defaults)(&f->loader);
    assert_int_equal(f->loader.size, sizeof(cdl_loader_config));
    assert_untouched(f, sizeof(cdl_loader_config));
    f = fresh();
    (cdl_dataset_options_defaults)(&f->dataset);
    /* The plain function writes the struct as it was when the macro came
     * (up to skipped_arg): fields added since are a program's only through
     * the macro. */
    assert_int_equal(f->dataset.size, UPTO(cdl_dataset_options, skipped_arg));
    assert_true(UPTO(cdl_dataset_options, skipped_arg) < sizeof(cdl_dataset_options));
    assert_untouched(f, UPTO(cdl_dataset_options, skipped_arg));
    f = fresh();
    (cdl_dist_config_init)(&f->dist);
    assert_int_equal(f->dist.size, sizeof(cdl_dist_config));
    assert_true(f->dist.shm_spin_us == -1);
    f = fresh();
    assert_int_equal((cdl_dist_config_from_env)(&f->dist), 0);
    assert_int_equal(f->dist.size, sizeof(cdl_dist_config));
    f = fresh();
    (cdl_backend_params_init)(&f->backend);
    assert_int_equal(f->backend.size, sizeof(cdl_backend_params));
    assert_int_equal(f->backend.tf32_conv, -1);
    f = fresh();
    (cdl_backend_params_from_env)(&f->backend);
    assert_int_equal(f->backend.size, sizeof(cdl_backend_params));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newer_train_config_refused),
        cmocka_unit_test(test_newer_other_structs_refused),
        cmocka_unit_test(test_older_struct_untouched),
        cmocka_unit_test(test_macros_and_plain_functions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
