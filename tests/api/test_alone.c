/* cdl_train_run in one task of a larger job that is not a data-parallel
 * training: a simulation started by srun -n 4 (or mpirun) in which every
 * task trains a model of its own. The environment makes the process rank
 * K of 4; dist_backend "single" trains it alone, as without that
 * environment; a misspelt dist_backend is refused there too. Through the
 * shared libcdl and its public header only. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

static int run(const char *dist_backend, cdl_train_result *res)
{
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.dataset, sizeof cfg.dataset, "synthetic");
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.dist_backend, sizeof cfg.dist_backend, "%s", dist_backend);
    cfg.synthetic_n = (int)test_size(256, 32);   /* 4 steps of up to 64 (valgrind: 8) */
    cfg.batch_size = (int)test_size(64, 8);
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.quiet = 1;
    /* Without "single" the task would wait for its peers: not long. */
    cdl_dist_config dc;
    cdl_dist_config_init(&dc);
    dc.timeout_s = 2;
    cfg.dist_config = &dc;
    return cdl_train_run(&cfg, res);
}

static void test_task_trains_alone(void **state)
{
    (void)state;
    cdl_train_result alone, task;
    if (run("auto", &alone) != 0)
        fail_msg("%s", cdl_last_error());

    /* Task 1 of a 4-task step on one node, as srun exports it. */
    const char *vars[][2] = {
        {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "0"},
        {"SLURM_NNODES", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4"},
        {"SLURM_JOB_NUM_NODES", "1"},
    };
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        assert_int_equal(setenv(vars[i][0], vars[i][1], 1), 0);
    cdl_rank_info ri;
    assert_int_equal(cdl_rank_discover(&ri), 0);
    assert_int_equal(ri.world, 4);   /* what the environment says */

    if (run("single", &task) != 0)
        fail_msg("dist_backend single in task 1 of 4: %s", cdl_last_error());
    assert_int_equal(task.steps, alone.steps);
    assert_memory_equal(&task.final_val_loss, &alone.final_val_loss, sizeof(double));

    /* "auto" joins the 4 ranks: rank 1 finds no rank 0 to join. */
    assert_int_equal(run("auto", &task), -1);
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i][0]);
}

/* A misspelt backend is an error on one process too, not first on the
 * run of several ranks it was meant for. */
static void test_unknown_backend(void **state)
{
    (void)state;
    assert_int_equal(run("shmm", NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "'shmm'"));
    assert_int_equal(run("hier:store", NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_trains_alone),
        cmocka_unit_test(test_unknown_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
