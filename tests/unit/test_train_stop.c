/* should_stop on data-parallel ranks: asked on one rank only, every rank
 * stops at the same step, as at a signal, and all return
 * CDL_TRAIN_STOPPED (rank 0's checkpoint holds that step). With a
 * SIGUSR1 on the other rank at the same step, the signal's stop wins on
 * every rank: CDL_EXIT_REQUEUE. Two forked ranks on the shm backend. */
#include "testutil.h"

#include <signal.h>
#include <string.h>

#include "dist_fork.h"

#include <cdl/cdl.h>

/* tests/fakegpu/test_train_stop: the same ranks on two fake GPUs, NCCL. */
#ifndef STOP_DEVICE
#define STOP_DEVICE "cpu"
#define STOP_DIST "shm"
#define STOP_STEP 3   /* the step of on_step's 3, when it asks */
#endif

typedef struct stop_case {
    char dir[256];
    int signal_rank;          /* raises SIGUSR1 at step 3 (-1: none) */
    int want;                 /* every rank's return */
} stop_case;

typedef struct rank_state {
    long steps;
    int rank;
    const stop_case *c;
} rank_state;

static void on_step(void *ctx, long steps)
{
    rank_state *s = ctx;
    s->steps = steps;
    if (s->rank == s->c->signal_rank && steps == 3)
        raise(SIGUSR1);
}

/* Only rank 1 asks, from step 3. */
static int should_stop(void *ctx)
{
    const rank_state *s = ctx;
    return s->rank == 1 && s->steps >= 3;
}

static int stop_rank(int rank, int world, void *arg)
{
    (void)world;
    const stop_case *c = arg;
    rank_state s = {0, rank, c};
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.dataset, sizeof cfg.dataset, "synthetic");
    snprintf(cfg.device, sizeof cfg.device, STOP_DEVICE);
    snprintf(cfg.dist_backend, sizeof cfg.dist_backend, STOP_DIST);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", c->dir);
    snprintf(cfg.resume, sizeof cfg.resume, "never");
    cfg.synthetic_n = 448;
    cfg.batch_size = 16;
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.quiet = 1;
    cfg.on_step = on_step;
    cfg.on_step_ctx = &s;
    cfg.should_stop = should_stop;
    cfg.should_stop_ctx = &s;
    cdl_train_result res;
    int rc = cdl_train_run(&cfg, &res);
    CHILD_CHECK(rc == c->want, "returned %d, want %d: %s", rc, c->want,
                rc == -1 ? cdl_last_error() : "");
    CHILD_CHECK(res.steps == STOP_STEP, "stopped at step %ld, want %d", res.steps, STOP_STEP);
    CHILD_CHECK(res.interrupted == (c->want == CDL_TRAIN_STOPPED ? 2 : 1), "interrupted %d",
                res.interrupted);
    if (rank == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/last.safetensors", c->dir);
        cdl_st_file *f = cdl_st_open(path);
        CHILD_CHECK(f, "%s", cdl_last_error());
        char want[24];
        snprintf(want, sizeof want, "%d", STOP_STEP);
        int same = !strcmp(cdl_st_meta_get(f, "step"), want);
        cdl_st_close(f);
        CHILD_CHECK(same, "the checkpoint is not step %d's", STOP_STEP);
    }
    return 0;
}

static void run_case(int signal_rank, int want)
{
    stop_case c = {"", signal_rank, want};
    assert_int_equal(test_mkdtemp(c.dir, sizeof c.dir, "cdl-train-stop"), 0);
    int bad = run_world(2, stop_rank, &c, guard_s(120));
    test_rm_rf(c.dir);
    if (bad)
        fail_msg("the ranks did not all stop at step %d with %d", STOP_STEP, want);
}

static void test_one_rank_asks(void **state)
{
    (void)state;
    run_case(-1, CDL_TRAIN_STOPPED);
}

static void test_signal_wins(void **state)
{
    (void)state;
    run_case(0, CDL_EXIT_REQUEUE);
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank_asks),
        cmocka_unit_test(test_signal_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
