/* cdl_train_run in two threads at once, as a program training two small
 * models side by side (a simulation's surrogates), through the shared
 * libcdl and its public header only: each run gets the numbers it gets
 * alone, the program's SIGTERM and SIGUSR1 handlers are back when both
 * have returned, and a signal while both run stops both after a
 * checkpoint. OpenBLAS's thread count, which the CPU backend holds at 1,
 * is the program's again once no backend is left. */
#include "testutil.h"

#include <cblas.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include <cdl/cdl.h>

/* One run of the mlp on synthetic data: k picks its size and seed. */
typedef struct job {
    int k;
    char dir[300];                 /* checkpoints ("" = none) */
    pthread_barrier_t *meet;       /* NULL: run through */
    long meet_at;                  /* the step at which both runs meet */
    int rc;
    cdl_train_result res;
    char err[512];
} job;

/* At step meet_at both runs are inside cdl_train_run: run 0 raises
 * SIGUSR1 between two barriers, so both leave on_step with the flag set. */
static void on_step(void *ctx, long steps)
{
    job *j = ctx;
    if (!j->meet || steps != j->meet_at)
        return;
    pthread_barrier_wait(j->meet);
    if (j->k == 0)
        raise(SIGUSR1);
    pthread_barrier_wait(j->meet);
}

static void *run(void *arg)
{
    job *j = arg;
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.dataset, sizeof cfg.dataset, "synthetic");
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", j->dir);
    /* Under valgrind (CDL_TEST_SMALL) an eighth of the samples in batches
     * of 8: the same 6 and 7 steps an epoch, past meet_at. */
    cfg.synthetic_n = (int)(test_size(384, 48) + test_size(64, 8) * j->k);
    cfg.batch_size = (int)test_size(64, 8);
    cfg.seed = 1 + (uint64_t)j->k;
    cfg.epochs = 2;
    cfg.threads = 1;
    cfg.quiet = 1;
    cfg.on_step = on_step;
    cfg.on_step_ctx = j;
    memset(&j->res, 0, sizeof j->res);
    j->rc = cdl_train_run(&cfg, &j->res);
    snprintf(j->err, sizeof j->err, "%s", j->rc == -1 ? cdl_last_error() : "");
    return NULL;
}

static void both(job *jobs)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, run, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

static volatile sig_atomic_t program_got;
static void program_handler(int sig)
{
    program_got = sig;
}

/* The handler of sig is the program's own, flags aside. */
static void assert_program_handler(int sig)
{
    struct sigaction sa;
    assert_int_equal(sigaction(sig, NULL, &sa), 0);
    assert_ptr_equal((void *)sa.sa_handler, (void *)program_handler);
}

static void test_two_runs_at_once(void **state)
{
    (void)state;
    struct sigaction sa, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = program_handler;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGTERM, &sa, &old_term), 0);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old_usr1), 0);

    job alone[2], side[2];
    memset(alone, 0, sizeof alone);
    memset(side, 0, sizeof side);
    for (int i = 0; i < 2; i++) {
        alone[i].k = side[i].k = i;
        run(&alone[i]);
        if (alone[i].rc != 0)
            fail_msg("run %d alone: %s", i, alone[i].err);
    }
    both(side);
    for (int i = 0; i < 2; i++) {
        if (side[i].rc != 0)
            fail_msg("run %d beside the other: %s", i, side[i].err);
        assert_int_equal(side[i].res.steps, alone[i].res.steps);
        assert_memory_equal(&side[i].res.final_val_loss, &alone[i].res.final_val_loss,
                            sizeof(double));
    }
    /* Before the fix the second run saved the first's handler as the
     * program's and put it back: SIGTERM was then ignored for good. */
    assert_program_handler(SIGTERM);
    assert_program_handler(SIGUSR1);
    program_got = 0;
    raise(SIGTERM);
    assert_int_equal(program_got, SIGTERM);

    assert_int_equal(sigaction(SIGTERM, &old_term, NULL), 0);
    assert_int_equal(sigaction(SIGUSR1, &old_usr1, NULL), 0);
}

static void test_signal_stops_both(void **state)
{
    (void)state;
    char dir[256];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "cdl-api-threads"), 0);
    struct sigaction before, after;
    assert_int_equal(sigaction(SIGUSR1, NULL, &before), 0);
    pthread_barrier_t meet;
    assert_int_equal(pthread_barrier_init(&meet, NULL, 2), 0);
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 2; i++) {
        jobs[i].k = i;
        jobs[i].meet = &meet;
        jobs[i].meet_at = 3;
        snprintf(jobs[i].dir, sizeof jobs[i].dir, "%s/run%d", dir, i);
    }
    both(jobs);
    for (int i = 0; i < 2; i++) {
        if (jobs[i].rc == -1)
            fail_msg("run %d: %s", i, jobs[i].err);
        assert_int_equal(jobs[i].rc, CDL_EXIT_REQUEUE);
        assert_int_equal(jobs[i].res.interrupted, 1);
        assert_int_equal(jobs[i].res.steps, 3);
        char path[400];
        snprintf(path, sizeof path, "%s/last.safetensors", jobs[i].dir);
        cdl_st_file *f = cdl_st_open(path);
        if (!f)
            fail_msg("%s", cdl_last_error());
        assert_string_equal(cdl_st_meta_get(f, "step"), "3");
        cdl_st_close(f);
    }
    pthread_barrier_destroy(&meet);
    assert_int_equal(sigaction(SIGUSR1, NULL, &after), 0);
    assert_ptr_equal((void *)after.sa_handler, (void *)before.sa_handler);
    test_rm_rf(dir);
}

/* A program with its own OpenBLAS products (a simulation's linear algebra)
 * gets their thread count back after training: before, it stayed at 1. */
static void test_openblas_count_back(void **state)
{
    (void)state;
    int before = openblas_get_num_threads();
    openblas_set_num_threads(2);
    cdl_backend *a = cdl_backend_create("cpu", 1), *b = cdl_backend_create("cpu", 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(openblas_get_num_threads(), 1);
    cdl_backend_destroy(a);
    assert_int_equal(openblas_get_num_threads(), 1);   /* b still calls it */
    cdl_backend_destroy(b);
    assert_int_equal(openblas_get_num_threads(), 2);

    job j;
    memset(&j, 0, sizeof j);
    run(&j);
    if (j.rc != 0)
        fail_msg("%s", j.err);
    assert_int_equal(openblas_get_num_threads(), 2);
    openblas_set_num_threads(before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openblas_count_back),
        cmocka_unit_test(test_two_runs_at_once),
        cmocka_unit_test(test_signal_stops_both),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
