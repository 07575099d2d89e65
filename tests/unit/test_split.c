/* --val-split and --init: the validation split is a pure function of
 * (seed, n, count), so every world size validates on the same samples;
 * cdl_model_load_weights is strict about names and shapes, with errors
 * naming the tensor, and leaves what --init-ignore matches alone. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

enum { N = 301 };

static char tmpdir[256];

/* A dataset whose sample i holds i in its two bytes and label i % 7. */
static void ids_dataset(cdl_dataset *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "ids");
    d->n = N;
    d->shape = (cdl_shape){1, 1, 2};
    d->classes = 7;
    d->images = cdl_malloc(2 * N);
    d->labels = cdl_malloc(N * sizeof *d->labels);
    assert_non_null(d->images);
    assert_non_null(d->labels);
    for (int i = 0; i < N; i++) {
        d->images[2 * i] = (uint8_t)(i & 255);
        d->images[2 * i + 1] = (uint8_t)(i >> 8);
        d->labels[i] = i % 7;
    }
    d->std[0] = d->std[1] = d->std[2] = 1;
}

static int id_of(const cdl_dataset *d, int k)
{
    return d->images[2 * k] | d->images[2 * k + 1] << 8;
}

static void test_split_partitions_deterministically(void **state)
{
    (void)state;
    cdl_dataset a, va, b, vb, c, vc;
    ids_dataset(&a);
    ids_dataset(&b);
    ids_dataset(&c);
    assert_int_equal(cdl_dataset_split(&a, 30, 5, &va), 0);
    assert_int_equal(cdl_dataset_split(&b, 30, 5, &vb), 0);
    assert_int_equal(cdl_dataset_split(&c, 30, 6, &vc), 0);
    assert_int_equal(va.n, 30);
    assert_int_equal(a.n, N - 30);
    assert_memory_equal(va.images, vb.images, 60);
    assert_memory_equal(a.images, b.images, 2 * (N - 30));
    assert_memory_not_equal(va.images, vc.images, 60);   /* the seed matters */
    /* A partition in index order, labels travelling with their samples. */
    char seen[N] = {0};
    for (int k = 0; k < va.n; k++) {
        assert_true(k == 0 || id_of(&va, k) > id_of(&va, k - 1));
        assert_int_equal(va.labels[k], id_of(&va, k) % 7);
        seen[id_of(&va, k)]++;
    }
    for (int k = 0; k < a.n; k++) {
        assert_int_equal(a.labels[k], id_of(&a, k) % 7);
        seen[id_of(&a, k)]++;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    assert_string_equal(va.name, "ids");
    assert_int_equal(va.classes, 7);
    assert_null(va.class_names);

    /* Class names: each side owns a copy (both are freed). */
    cdl_dataset d, vd;
    ids_dataset(&d);
    d.class_names = cdl_calloc(7, sizeof *d.class_names);
    for (int k = 0; k < 7; k++) {
        d.class_names[k] = cdl_malloc(8);
        snprintf(d.class_names[k], 8, "c%d", k);
    }
    assert_int_equal(cdl_dataset_split(&d, 10, 5, &vd), 0);
    assert_non_null(vd.class_names);
    assert_ptr_not_equal(vd.class_names, d.class_names);
    assert_string_equal(vd.class_names[6], "c6");
    cdl_dataset_free(&d);
    cdl_dataset_free(&vd);
    cdl_dataset_free(&a), cdl_dataset_free(&va), cdl_dataset_free(&b);
    cdl_dataset_free(&vb), cdl_dataset_free(&c), cdl_dataset_free(&vc);
}

/* The samples the ranks of a world validate on, together: the same set
 * for world sizes 1, 2 and 3, each sample once. */
static void test_split_same_for_every_world_size(void **state)
{
    (void)state;
    int count1[N] = {0};
    for (int world = 1; world <= 3; world++) {
        int count[N] = {0};
        for (int rank = 0; rank < world; rank++) {
            cdl_dataset d, v;   /* every rank splits its own copy, as cdl-train does */
            ids_dataset(&d);
            assert_int_equal(cdl_dataset_split(&d, cdl_val_split_count(0.1, d.n), 11, &v), 0);
            cdl_loader_config lc;
            cdl_loader_defaults(&lc);
            lc.batch_size = 8;
            lc.rank = rank;
            lc.world = world;
            cdl_loader *l = cdl_loader_create(&v, &lc);
            assert_non_null(l);
            assert_int_equal(cdl_loader_start_epoch(l, 0, 0), 0);
            cdl_batch b;
            while (cdl_loader_next(l, &b) == 1)
                for (int k = 0; k < b.n; k++) {
                    /* x = byte / 255 (mean 0, std 1) */
                    int id = (int)(255 * b.x[2 * k] + 0.5f) +
                             256 * (int)(255 * b.x[2 * k + 1] + 0.5f);
                    assert_true(id >= 0 && id < N);
                    count[id]++;
                }
            cdl_loader_destroy(l);
            cdl_dataset_free(&d);
            cdl_dataset_free(&v);
        }
        int total = 0;
        for (int i = 0; i < N; i++) {
            assert_true(count[i] <= 1);
            total += count[i];
            if (world == 1)
                count1[i] = count[i];
            else
                assert_int_equal(count[i], count1[i]);
        }
        assert_int_equal(total, 30);   /* round(0.1 * 301) */
    }
}

static void test_split_counts_and_errors(void **state)
{
    (void)state;
    assert_int_equal(cdl_val_split_count(0, 1000), 0);
    assert_int_equal(cdl_val_split_count(0.1, 1000), 100);
    assert_int_equal(cdl_val_split_count(0.25, 10), 3);   /* 2.5 rounds up */
    assert_int_equal(cdl_val_split_count(5000, 60000), 5000);
    cdl_dataset d, v;
    ids_dataset(&d);
    /* A C program's mistake names the function and the count, not
     * cdl-train's option. */
    char want[128];
    snprintf(want, sizeof want, "cdl_dataset_split: count %d of the %d samples", N, N);
    assert_int_equal(cdl_dataset_split(&d, N, 1, &v), -1);
    assert_non_null(strstr(cdl_last_error(), want));
    assert_null(strstr(cdl_last_error(), "--val-split"));
    assert_int_equal(cdl_dataset_split(&d, 0, 1, &v), -1);
    assert_non_null(strstr(cdl_last_error(), "count 0 of"));
    assert_int_equal(d.n, N);   /* untouched */
    cdl_dataset_free(&d);
}

/* ------------------------------------------------------------ --init */

static cdl_model *mlp(cdl_backend *be, int classes)
{
    cdl_model_spec spec;
    cdl_shape in = {1, 4, 4};
    assert_int_equal(cdl_spec_builtin("mlp", in, classes, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 4, be);
    assert_non_null(m);
    return m;
}

/* Writes m's tensors to path, leaving out the tensor named skip and adding
 * extra (a name) when not NULL. */
static void save(cdl_model *m, const char *path, const char *skip, const char *extra)
{
    cdl_st_tensor t[16];
    int n = 0;
    const float *p = cdl_model_params(m);   /* host backend */
    for (int i = 0; i < cdl_model_nviews(m); i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        if (skip && !strcmp(v->name, skip))
            continue;
        t[n] = (cdl_st_tensor){.name = v->name, .data = p + v->offset, .ndim = v->ndim};
        memcpy(t[n].shape, v->shape, sizeof v->shape);
        n++;
    }
    if (extra)
        t[n++] = (cdl_st_tensor){.name = extra, .data = p, .ndim = 1, .shape = {3}};
    assert_int_equal(cdl_st_write(path, t, n, NULL, 0), 0);
}

static void test_init_strict(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_cpu_create(1);
    assert_non_null(be);
    cdl_model *src = mlp(be, 10), *dst = mlp(be, 10), *head5 = mlp(be, 5);
    cdl_model_init(src, 1);
    cdl_model_init(dst, 2);
    size_t np = cdl_model_nparams(src);
    char path[400];

    snprintf(path, sizeof path, "%s/all.safetensors", tmpdir);
    save(src, path, NULL, NULL);
    assert_int_equal(cdl_model_load_weights(dst, path, NULL), 0);
    assert_memory_equal(cdl_model_params(dst), cdl_model_params(src), np * sizeof(float));

    /* Another head: the shape error names the tensor and both shapes... */
    cdl_model_init(head5, 3);
    assert_int_equal(cdl_model_load_weights(head5, path, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "'fc3.weight' has shape (10, 128) but the "
                                             "model's is (5, 128)"));
    /* ... and --init-ignore keeps the fresh head, loading the rest. */
    float *before = cdl_malloc(np * sizeof(float));
    memcpy(before, cdl_model_params(head5), cdl_model_nparams(head5) * sizeof(float));
    assert_int_equal(cdl_model_load_weights(head5, path, "fc3.*"), 0);
    const cdl_param_view *w1 = cdl_model_find(head5, "fc1.weight");
    const cdl_param_view *w3 = cdl_model_find(head5, "fc3.weight");
    assert_memory_equal(cdl_model_params(head5) + w1->offset,
                        cdl_model_params(src) + cdl_model_find(src, "fc1.weight")->offset,
                        w1->numel * sizeof(float));
    assert_memory_equal(cdl_model_params(head5) + w3->offset, before + w3->offset,
                        w3->numel * sizeof(float));
    cdl_free(before);

    snprintf(path, sizeof path, "%s/missing.safetensors", tmpdir);
    save(src, path, "fc2.bias", NULL);
    assert_int_equal(cdl_model_load_weights(dst, path, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "tensor 'fc2.bias' is missing"));
    assert_int_equal(cdl_model_load_weights(dst, path, "fc2.b*"), 0);

    snprintf(path, sizeof path, "%s/extra.safetensors", tmpdir);
    save(src, path, NULL, "head.weight");
    assert_int_equal(cdl_model_load_weights(dst, path, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "tensor 'head.weight' is not in the model"));

    snprintf(path, sizeof path, "%s/none.safetensors", tmpdir);
    assert_int_equal(cdl_model_load_weights(dst, path, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "none.safetensors"));

    cdl_model_destroy(src);
    cdl_model_destroy(dst);
    cdl_model_destroy(head5);
    cdl_backend_destroy(be);
}

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "split");
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_partitions_deterministically),
        cmocka_unit_test(test_split_same_for_every_world_size),
        cmocka_unit_test(test_split_counts_and_errors),
        cmocka_unit_test(test_init_strict),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
