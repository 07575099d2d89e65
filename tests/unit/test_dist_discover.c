/* Rank discovery from each source: the contract, torchrun, Slurm, a single
 * process, and inconsistent values (errors name the variable and value). */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

static int setup(void **state)
{
    (void)state;
    clear_launcher_env();
    return 0;
}

static void set(const char *name, const char *value)
{
    setenv(name, value, 1);
}

static void expect_error(const char *needle1, const char *needle2)
{
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), -1);
    const char *e = cdl_last_error();
    if (!strstr(e, needle1) || (needle2 && !strstr(e, needle2)))
        fail_msg("error '%s' lacks '%s' / '%s'", e, needle1, needle2 ? needle2 : "");
}

/* Runs cdl_rank_discover with stderr in a temporary file; returns how many
 * "ranks from" lines it printed. */
static int announcements_of_discover(void)
{
    FILE *cap = tmpfile();
    assert_non_null(cap);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0 && dup2(fileno(cap), 2) == 2);
    cdl_rank_info info;
    int rc = cdl_rank_discover(&info);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(rc, 0);
    rewind(cap);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, cap))
        n += strstr(line, "cdl: rank 0 of 2: ranks from") != NULL;
    fclose(cap);
    return n;
}

/* templates/train.c calls cdl_rank_discover and then cdl_train_run, which
 * discovers again: rank 0 says where its ranks came from once per process.
 * Runs first: an earlier test's discovery of rank 0 would have said it. */
static void test_announce_once(void **state)
{
    (void)state;
    set("RANK", "0");
    set("WORLD_SIZE", "2");
    assert_int_equal(announcements_of_discover(), 1);
    assert_int_equal(announcements_of_discover(), 0);
}

static void test_single(void **state)
{
    (void)state;
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "single");
    assert_int_equal(info.rank, 0);
    assert_int_equal(info.world, 1);
    assert_int_equal(info.local_world, 1);
    assert_int_equal(info.nnodes, 1);
    assert_int_equal(info.replicas_per_gpu, 1);
}

static void test_contract_full(void **state)
{
    (void)state;
    set("RANK", "5");
    set("WORLD_SIZE", "8");
    set("LOCAL_RANK", "1");
    set("LOCAL_WORLD_SIZE", "4");
    set("GROUP_RANK", "1");
    set("NODE_RANK", "1");
    set("CDL_NNODES", "2");
    set("CDL_REPLICAS_PER_GPU", "2");
    set("MASTER_ADDR", "n1");
    set("MASTER_PORT", "29500");
    set("CDL_JOB_ID", "42.0");
    set("CDL_LAUNCHER", "slurm");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "contract");
    assert_int_equal(info.rank, 5);
    assert_int_equal(info.world, 8);
    assert_int_equal(info.local_rank, 1);
    assert_int_equal(info.local_world, 4);
    assert_int_equal(info.node_rank, 1);
    assert_int_equal(info.nnodes, 2);
    assert_int_equal(info.replicas_per_gpu, 2);
    assert_string_equal(info.master_addr, "n1");
    assert_int_equal(info.master_port, 29500);
    assert_string_equal(info.job_id, "42.0");
}

/* RANK and WORLD_SIZE alone: one node, local = global. */
static void test_contract_minimal(void **state)
{
    (void)state;
    set("RANK", "2");
    set("WORLD_SIZE", "3");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "contract");
    assert_int_equal(info.local_rank, 2);
    assert_int_equal(info.local_world, 3);
    assert_int_equal(info.node_rank, 0);
    assert_int_equal(info.nnodes, 1);
    assert_int_equal(info.master_port, 0);
}

/* The contract beats PMIx and Slurm variables that are also present. */
static void test_contract_first(void **state)
{
    (void)state;
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "4");
    set("SLURM_STEP_ID", "0");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "contract");
    assert_int_equal(info.rank, 1);
    assert_int_equal(info.world, 2);
}

static void test_torchrun(void **state)
{
    (void)state;
    set("RANK", "3");
    set("WORLD_SIZE", "4");
    set("LOCAL_RANK", "1");
    set("LOCAL_WORLD_SIZE", "2");
    set("GROUP_RANK", "1");
    set("GROUP_WORLD_SIZE", "2");
    set("MASTER_ADDR", "host0");
    set("MASTER_PORT", "1234");
    set("TORCHELASTIC_RUN_ID", "run7");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "torchrun");
    assert_int_equal(info.rank, 3);
    assert_int_equal(info.nnodes, 2);
    assert_int_equal(info.node_rank, 1);
    assert_int_equal(info.local_rank, 1);
    assert_string_equal(info.job_id, "run7");
    assert_string_equal(info.master_addr, "host0");
}

static void slurm_step_env(void)
{
    set("SLURM_JOB_ID", "1234");
    set("SLURM_STEP_ID", "5");
    set("SLURM_PROCID", "3");
    set("SLURM_NTASKS", "5");
    set("SLURM_LOCALID", "0");
    set("SLURM_NODEID", "1");
    set("SLURM_NNODES", "2");
    set("SLURM_STEP_TASKS_PER_NODE", "3,2");
    set("SLURM_STEP_NODELIST", "node[07-08]");
}

static void test_slurm(void **state)
{
    (void)state;
    slurm_step_env();
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "slurm");
    assert_int_equal(info.rank, 3);
    assert_int_equal(info.world, 5);
    assert_int_equal(info.local_rank, 0);
    assert_int_equal(info.local_world, 2);
    assert_int_equal(info.node_rank, 1);
    assert_int_equal(info.nnodes, 2);
    assert_string_equal(info.master_addr, "node07");
    assert_string_equal(info.job_id, "1234.5");
    assert_int_equal(info.master_port, 0);
}

static void test_slurm_repeat_counts_and_ports(void **state)
{
    (void)state;
    slurm_step_env();
    set("SLURM_PROCID", "4");
    set("SLURM_NTASKS", "6");
    set("SLURM_LOCALID", "2");
    set("SLURM_STEP_TASKS_PER_NODE", "3(x2)");
    set("SLURM_STEP_RESV_PORTS", "12000-12003");
    set("SLURM_STEP_NODELIST", "a,b");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_int_equal(info.local_world, 3);
    assert_int_equal(info.master_port, 12000);
    assert_string_equal(info.master_addr, "a");
}

/* Plain srun (no --cdl-ddp): MASTER_ADDR is the first host of the step's
 * list in Slurm's full syntax; the library used to cut it at the bracket
 * (a[08-10]b gave a08, n[1-2]-ib gave n1). */
static void test_slurm_hostlist_suffix(void **state)
{
    (void)state;
    static const char *const lists[][2] = {
        {"a[08-10]b", "a08b"}, {"n[1-2]-ib", "n1-ib"}, {"gpu[01-02,05]-x[1-2]", "gpu01-x1"},
    };
    cdl_rank_info info;
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        slurm_step_env();
        set("SLURM_STEP_NODELIST", lists[i][0]);
        assert_int_equal(cdl_rank_discover(&info), 0);
        assert_string_equal(info.master_addr, lists[i][1]);
    }
    set("SLURM_STEP_NODELIST", "n[1-");
    expect_error("SLURM_STEP_NODELIST", "n[1-");
}

/* A reserved port out of range is refused, not wrapped (99999 -> 34463). */
static void test_slurm_resv_port_range(void **state)
{
    (void)state;
    slurm_step_env();
    set("SLURM_STEP_RESV_PORTS", "99999");
    expect_error("SLURM_STEP_RESV_PORTS='99999'", NULL);
    set("SLURM_STEP_TASKS_PER_NODE", "3,99999999999");
    expect_error("SLURM_STEP_TASKS_PER_NODE='3,99999999999'", "malformed");
}

/* The batch script has SLURM_PROCID=0 and SLURM_NTASKS but is one process. */
static void test_slurm_batch_script_is_single(void **state)
{
    (void)state;
    set("SLURM_JOB_ID", "1234");
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "4");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "single");
    assert_int_equal(info.world, 1);
}

/* mpirun -n 2 with a launcher or a libcdl that cannot say the rank (no
 * PMIx): each process used to train alone as rank 0 of 1, silently. A
 * world of one (mpirun -n 1) is still a single process. */
static void test_mpi_launcher_unreadable(void **state)
{
    (void)state;
    set("OMPI_COMM_WORLD_SIZE", "1");
    cdl_rank_info info;
    assert_int_equal(cdl_rank_discover(&info), 0);
    assert_string_equal(info.source, "single");
    set("OMPI_COMM_WORLD_SIZE", "2");
    expect_error("OMPI_COMM_WORLD_SIZE=2", "--dist-backend single");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    set("PMI_SIZE", "4");
    expect_error("PMI_SIZE=4", "cdlrun or srun --cdl-ddp");
    unsetenv("PMI_SIZE");
#ifndef HAVE_PMIX
    set("PMIX_RANK", "1");
    expect_error("PMIX_RANK=1", "built without PMIx");
#endif
}

static void test_inconsistent_rank(void **state)
{
    (void)state;
    set("RANK", "4");
    set("WORLD_SIZE", "4");
    expect_error("RANK=4", "WORLD_SIZE=4");
}

static void test_garbage_value(void **state)
{
    (void)state;
    set("RANK", "one");
    set("WORLD_SIZE", "4");
    expect_error("RANK='one'", NULL);
}

static void test_group_node_disagree(void **state)
{
    (void)state;
    set("RANK", "0");
    set("WORLD_SIZE", "4");
    set("GROUP_RANK", "0");
    set("NODE_RANK", "1");
    expect_error("GROUP_RANK=0", "NODE_RANK=1");
}

static void test_local_rank_too_big(void **state)
{
    (void)state;
    set("RANK", "1");
    set("WORLD_SIZE", "4");
    set("LOCAL_RANK", "2");
    set("LOCAL_WORLD_SIZE", "2");
    set("GROUP_RANK", "0");
    set("CDL_NNODES", "2");
    expect_error("LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2");
}

static void test_multinode_needs_local_rank(void **state)
{
    (void)state;
    set("RANK", "1");
    set("WORLD_SIZE", "4");
    set("CDL_NNODES", "2");
    set("GROUP_RANK", "0");
    expect_error("LOCAL_RANK is not set", NULL);
}

static void test_world_missing(void **state)
{
    (void)state;
    set("RANK", "1");
    expect_error("WORLD_SIZE is not set", NULL);
}

static void test_one_node_local_world_mismatch(void **state)
{
    (void)state;
    set("RANK", "1");
    set("WORLD_SIZE", "4");
    set("LOCAL_WORLD_SIZE", "2");
    set("CDL_NNODES", "1");
    expect_error("LOCAL_WORLD_SIZE=2", "WORLD_SIZE=4");
}

static void test_slurm_bad_tasks_per_node(void **state)
{
    (void)state;
    slurm_step_env();
    set("SLURM_STEP_TASKS_PER_NODE", "3");
    expect_error("SLURM_STEP_TASKS_PER_NODE='3'", "node 1");
}

static void test_bad_port(void **state)
{
    (void)state;
    set("RANK", "0");
    set("WORLD_SIZE", "2");
    set("MASTER_PORT", "70000");
    expect_error("MASTER_PORT=70000", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_announce_once, setup),
        cmocka_unit_test_setup(test_single, setup),
        cmocka_unit_test_setup(test_contract_full, setup),
        cmocka_unit_test_setup(test_contract_minimal, setup),
        cmocka_unit_test_setup(test_contract_first, setup),
        cmocka_unit_test_setup(test_torchrun, setup),
        cmocka_unit_test_setup(test_slurm, setup),
        cmocka_unit_test_setup(test_slurm_repeat_counts_and_ports, setup),
        cmocka_unit_test_setup(test_slurm_batch_script_is_single, setup),
        cmocka_unit_test_setup(test_mpi_launcher_unreadable, setup),
        cmocka_unit_test_setup(test_inconsistent_rank, setup),
        cmocka_unit_test_setup(test_garbage_value, setup),
        cmocka_unit_test_setup(test_group_node_disagree, setup),
        cmocka_unit_test_setup(test_local_rank_too_big, setup),
        cmocka_unit_test_setup(test_multinode_needs_local_rank, setup),
        cmocka_unit_test_setup(test_world_missing, setup),
        cmocka_unit_test_setup(test_one_node_local_world_mismatch, setup),
        cmocka_unit_test_setup(test_slurm_bad_tasks_per_node, setup),
        cmocka_unit_test_setup(test_bad_port, setup),
        cmocka_unit_test_setup(test_slurm_hostlist_suffix, setup),
        cmocka_unit_test_setup(test_slurm_resv_port_range, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
