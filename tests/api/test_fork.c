/* fork() after libcdl's objects were made: a program that forks workers
 * (a server, a job runner) after building a model on a CPU backend of
 * several threads, or a loader with workers. fork() copies only the
 * calling thread, so in the child those threads are gone; the child's
 * first forward pass (or cdl_loader_next) waited for them for ever. It
 * now runs on the calling thread with the parent's numbers, bit for bit,
 * and destroying the objects there returns. Through the shared libcdl and
 * its public header only. */
#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cdl/cdl.h>

#define N 96   /* samples */
#define B 16   /* batch */

/* Fashion-MNIST-shaped samples of a fixed pattern (no files needed). */
static void make_data(cdl_dataset *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "pattern");
    d->n = N;
    d->shape = (cdl_shape){1, 28, 28};
    d->classes = 10;
    d->images = cdl_malloc((size_t)N * 28 * 28);
    d->labels = cdl_malloc(sizeof(int32_t) * N);
    assert_non_null(d->images);
    assert_non_null(d->labels);
    for (int i = 0; i < N; i++) {
        d->labels[i] = i % 10;
        for (int k = 0; k < 28 * 28; k++)
            d->images[(size_t)i * 28 * 28 + k] = (uint8_t)(i * 7 + k * 13);
    }
    d->mean[0] = 0.5f;
    d->std[0] = 0.25f;
}

/* A shuffled loader of batches of B. */
static cdl_loader *loader(const cdl_dataset *d, int workers)
{
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    lc.batch_size = B;
    lc.world = 1;
    lc.shuffle = 1;
    lc.seed = 3;
    lc.workers = workers;
    return cdl_loader_create(d, &lc);
}

/* The child's checks; its exit status says which failed (0: none). It
 * frees what it was given, as valgrind checks the child's leaks too. */
static int child(cdl_backend *be, cdl_model *m, float *x, float *want, int outs,
                 cdl_loader *ld, cdl_dataset *d)
{
    /* A watchdog, not a synchronisation: the old libcdl hung here. */
    alarm(120);
    const float *got = cdl_model_forward(m, x, B, 0, 0);
    if (!got || memcmp(got, want, sizeof(float) * (size_t)B * (size_t)outs) != 0)
        return 2;
    /* The loader, mid-epoch: its next batch is a 0-worker loader's. */
    cdl_loader *ref = loader(d, 0);
    if (!ref || cdl_loader_start_epoch(ref, 0, 0) != 0)
        return 3;
    cdl_batch a, b;
    for (int k = 0; k < 2; k++)
        if (cdl_loader_next(ref, &b) != 1)
            return 3;
    if (cdl_loader_next(ld, &a) != 1 || a.n != b.n || a.index != b.index ||
        memcmp(a.x, b.x, sizeof(float) * (size_t)a.n * 28 * 28) != 0 ||
        memcmp(a.y, b.y, sizeof(int32_t) * (size_t)a.n) != 0)
        return 4;
    /* A new epoch, to its end. */
    if (cdl_loader_start_epoch(ld, 1, 0) != 0)
        return 5;
    int batches = 0;
    while (cdl_loader_next(ld, &a) == 1)
        batches++;
    if (batches != N / B)
        return 5;
    cdl_loader_destroy(ref);
    cdl_loader_destroy(ld);
    cdl_model_destroy(m);
    be->ops->free(be, x);
    cdl_backend_destroy(be);
    cdl_dataset_free(d);
    free(want);
    return 0;
}

static void test_objects_work_in_child(void **state)
{
    (void)state;
    cdl_dataset d;
    make_data(&d);
    cdl_backend *be = cdl_backend_create("cpu", 2);
    cdl_model_spec spec;
    if (!be || cdl_spec_builtin("lenet", d.shape, 10, &spec) != 0)
        fail_msg("%s", cdl_last_error());
    cdl_model *m = cdl_model_create(&spec, d.shape, B, be);
    if (!m)
        fail_msg("%s", cdl_last_error());
    cdl_model_init(m, 1);
    int outs = cdl_model_outputs(m);
    float *x = be->ops->alloc(be, sizeof(float) * B * 28 * 28);
    float *want = malloc(sizeof(float) * B * (size_t)outs);
    assert_non_null(x);
    assert_non_null(want);
    for (int i = 0; i < B * 28 * 28; i++)
        x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const float *y = cdl_model_forward(m, x, B, 0, 0);
    assert_non_null(y);
    memcpy(want, y, sizeof(float) * B * (size_t)outs);

    cdl_loader *ld = loader(&d, 2);
    if (!ld)
        fail_msg("%s", cdl_last_error());
    cdl_batch b;
    assert_int_equal(cdl_loader_start_epoch(ld, 0, 0), 0);
    assert_int_equal(cdl_loader_next(ld, &b), 1);   /* the workers are filling the next */

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child(be, m, x, want, outs, ld, &d));
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st))
        fail_msg("the child was killed by signal %d (%s): it hung waiting for threads fork() "
                 "did not copy", WTERMSIG(st), WTERMSIG(st) == SIGALRM ? "the watchdog" : "?");
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) != 0)
        fail_msg("the child's check %d failed (2 forward, 3-5 loader)", WEXITSTATUS(st));

    /* The parent's objects are untouched by the child's. */
    y = cdl_model_forward(m, x, B, 0, 0);
    assert_memory_equal(y, want, sizeof(float) * B * (size_t)outs);
    int batches = 1;
    while (cdl_loader_next(ld, &b) == 1)
        batches++;
    assert_int_equal(batches, N / B);
    cdl_loader_destroy(ld);
    free(want);
    be->ops->free(be, x);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
    cdl_dataset_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_objects_work_in_child),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
