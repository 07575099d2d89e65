/* What a program embedding libcdl meets around one run, through the shared
 * libcdl and its public header only:
 * - should_stop stops one run (early stopping, a cancel button) where a
 *   signal stops every run of the process: at the step it said so, after
 *   a checkpoint with a ckpt_dir, returning CDL_TRAIN_STOPPED, and a run
 *   beside it in another thread trains on to its end;
 * - a model never given weights (no cdl_model_init, nothing loaded)
 *   refuses a forward instead of training from zeros and learning nothing;
 * - an empty model names cdl_train_config.model, not a function the
 *   program never called;
 * - a child forked while a run is in another thread has the program's
 *   signal handlers back, and a run of its own gives them back too. */
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cdl/cdl.h>

/* One run of the mlp on synthetic data, 2 epochs. */
typedef struct job {
    char dir[300];                 /* checkpoints ("" = none) */
    long stop_at;                  /* should_stop says yes from this step (0: never) */
    long steps;                    /* on_step's count */
    long polls;                    /* should_stop's calls */
    pthread_barrier_t *meet;       /* fork test: both threads meet at step 2 */
    int rc;
    cdl_train_result res;
    char err[512];
    char note[512];                /* the last on_log line naming should_stop */
} job;

static void on_step(void *ctx, long steps)
{
    job *j = ctx;
    j->steps = steps;
    if (j->meet && steps == 2) {
        pthread_barrier_wait(j->meet);   /* the main thread forks now */
        pthread_barrier_wait(j->meet);   /* ... and has forked */
    }
}

static int should_stop(void *ctx)
{
    job *j = ctx;
    j->polls++;
    return j->stop_at > 0 && j->steps >= j->stop_at;
}

static int should_stop_always(void *ctx)
{
    ((job *)ctx)->polls++;
    return 1;
}

static void on_log(void *ctx, int level, const char *line)
{
    job *j = ctx;
    (void)level;
    if (strstr(line, "should_stop"))
        snprintf(j->note, sizeof j->note, "%s", line);
}

static void config(job *j, cdl_train_config *cfg)
{
    cdl_train_defaults(cfg);
    snprintf(cfg->model, sizeof cfg->model, "mlp");
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    snprintf(cfg->device, sizeof cfg->device, "cpu");
    snprintf(cfg->ckpt_dir, sizeof cfg->ckpt_dir, "%s", j->dir);
    snprintf(cfg->resume, sizeof cfg->resume, "never");
    /* 26 steps an epoch after the validation split (> 20), under valgrind
     * (CDL_TEST_SMALL) in batches of 4. */
    cfg->synthetic_n = (int)test_size(448, 112);
    cfg->batch_size = (int)test_size(16, 4);
    cfg->seed = 5;
    cfg->epochs = 2;
    cfg->threads = 1;
    cfg->on_step = on_step;
    cfg->on_step_ctx = j;
    cfg->should_stop = should_stop;
    cfg->should_stop_ctx = j;
    cfg->on_log = on_log;
    cfg->on_log_ctx = j;
}

static void *run(void *arg)
{
    job *j = arg;
    cdl_train_config cfg;
    config(j, &cfg);
    j->rc = cdl_train_run(&cfg, &j->res);
    snprintf(j->err, sizeof j->err, "%s", j->rc == -1 ? cdl_last_error() : "");
    return NULL;
}

/* Stopped at step 3 with no ckpt_dir: not an error, and nothing written. */
static void test_stop_without_ckpt(void **state)
{
    (void)state;
    job j;
    memset(&j, 0, sizeof j);
    j.stop_at = 3;
    run(&j);
    if (j.rc == -1)
        fail_msg("%s", j.err);
    assert_int_equal(j.rc, CDL_TRAIN_STOPPED);
    assert_int_equal(j.res.steps, 3);
    assert_int_equal(j.res.interrupted, 2);
    /* Once during set-up (the data is not staged), then once per step. */
    assert_int_equal(j.polls, 1 + 3);
    assert_non_null(strstr(j.note, "the program asked to stop"));
    assert_non_null(strstr(j.note, "step 3"));
}

/* A yes before the first step (a cancel during set-up) stops there. */
static void test_stop_during_setup(void **state)
{
    (void)state;
    job j;
    memset(&j, 0, sizeof j);
    cdl_train_config cfg;
    config(&j, &cfg);
    cfg.should_stop = should_stop_always;
    j.rc = cdl_train_run(&cfg, &j.res);
    if (j.rc == -1)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(j.rc, CDL_TRAIN_STOPPED);
    assert_int_equal(j.res.steps, 0);
    assert_int_equal(j.res.interrupted, 2);
    assert_int_equal(j.polls, 1);
    assert_non_null(strstr(j.note, "before the first step"));
}

/* One run stopped at step 4 with a ckpt_dir, beside one that is never
 * stopped: the first writes step 4's checkpoint, the second trains on. */
static void test_stop_one_of_two(void **state)
{
    (void)state;
    char dir[256];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "cdl-api-stop"), 0);
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[0].stop_at = 4;
    for (int i = 0; i < 2; i++)
        snprintf(jobs[i].dir, sizeof jobs[i].dir, "%s/run%d", dir, i);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, run, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    if (jobs[0].rc == -1 || jobs[1].rc == -1)
        fail_msg("%s%s", jobs[0].err, jobs[1].err);
    assert_int_equal(jobs[0].rc, CDL_TRAIN_STOPPED);
    assert_int_equal(jobs[0].res.steps, 4);
    assert_non_null(strstr(jobs[0].note, "checkpoint written"));
    char path[400];
    snprintf(path, sizeof path, "%s/last.safetensors", jobs[0].dir);
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    assert_string_equal(cdl_st_meta_get(f, "step"), "4");
    cdl_st_close(f);
    assert_int_equal(jobs[1].rc, 0);
    assert_int_equal(jobs[1].res.interrupted, 0);
    assert_int_equal(jobs[1].res.epochs_done, 2);
    assert_true(jobs[1].res.steps > 2 * 20);
    test_rm_rf(dir);
}

/* Before, the error named cdl_spec_read, which the program never called. */
static void test_empty_model(void **state)
{
    (void)state;
    job j;
    memset(&j, 0, sizeof j);
    cdl_train_config cfg;
    config(&j, &cfg);
    cfg.model[0] = '\0';
    assert_int_equal(cdl_train_run(&cfg, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "cdl_train_config.model"));
    assert_null(strstr(cdl_last_error(), "cdl_spec_read"));
}

/* A forward before any weights refuses, naming cdl_model_init; after it
 * the same call works. */
static void test_forward_needs_weights(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_create("cpu", 1);
    assert_non_null(be);
    cdl_model_spec spec;
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    assert_non_null(m);
    float *x = be->ops->alloc(be, 2 * 28 * 28 * sizeof(float));
    assert_non_null(x);
    be->ops->fill(be, x, 0.5f, 2 * 28 * 28);
    assert_null(cdl_model_forward(m, x, 2, 1, 0));
    assert_non_null(strstr(cdl_last_error(), "cdl_model_init"));
    assert_non_null(strstr(cdl_last_error(), "never set"));
    cdl_model_init(m, 1);
    assert_non_null(cdl_model_forward(m, x, 2, 1, 0));
    be->ops->free(be, x);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

static void program_handler(int sig)
{
    (void)sig;
}

static int is_program_handler(int sig)
{
    struct sigaction sa;
    return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == program_handler;
}

/* The child's checks: which failed (0: none). */
static char child(void)
{
    if (!is_program_handler(SIGTERM) || !is_program_handler(SIGUSR1))
        return 1;   /* before the fix: libcdl's, with no run in the child */
    job j;
    memset(&j, 0, sizeof j);
    j.stop_at = 1;
    run(&j);
    if (j.rc != CDL_TRAIN_STOPPED)
        return 2;
    if (!is_program_handler(SIGTERM) || !is_program_handler(SIGUSR1))
        return 3;   /* before the fix: the child's run left libcdl's installed */
    return 0;
}

static void test_fork_during_run(void **state)
{
    (void)state;
    struct sigaction sa, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = program_handler;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGTERM, &sa, &old_term), 0);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old_usr1), 0);

    pthread_barrier_t meet;
    assert_int_equal(pthread_barrier_init(&meet, NULL, 2), 0);
    job j;
    memset(&j, 0, sizeof j);
    j.meet = &meet;
    j.stop_at = 3;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run, &j), 0);
    pthread_barrier_wait(&meet);   /* the run is at step 2, inside cdl_train_run */
    assert_false(is_program_handler(SIGTERM));
    /* The verdict comes through a pipe: the child's exit status is
     * valgrind's, which finds the objects of the parent's run unfreed
     * there (their thread is not in the child to free them). */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char verdict = child();
        _exit(write(fds[1], &verdict, 1) == 1 ? 0 : 1);
    }
    close(fds[1]);
    pthread_barrier_wait(&meet);
    char verdict = 'x';
    assert_int_equal(read(fds[0], &verdict, 1), 1);
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(pthread_join(t, NULL), 0);
    pthread_barrier_destroy(&meet);
    assert_int_equal(verdict, 0);
    if (j.rc == -1)
        fail_msg("%s", j.err);
    assert_int_equal(j.rc, CDL_TRAIN_STOPPED);
    assert_true(is_program_handler(SIGTERM));
    assert_true(is_program_handler(SIGUSR1));

    assert_int_equal(sigaction(SIGTERM, &old_term, NULL), 0);
    assert_int_equal(sigaction(SIGUSR1, &old_usr1, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_without_ckpt),
        cmocka_unit_test(test_stop_during_setup),
        cmocka_unit_test(test_stop_one_of_two),
        cmocka_unit_test(test_empty_model),
        cmocka_unit_test(test_forward_needs_weights),
        cmocka_unit_test(test_fork_during_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
