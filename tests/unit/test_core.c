/* Core utilities: error messages, counted aligned allocation, thread count. */
#include "testutil.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/core/cpuquota.h"
#include "lib/core/threads.h"

static void test_error_message(void **state)
{
    (void)state;
    assert_int_equal(cdl_error("file %s is %d bytes short", "x.bin", 12), -1);
    assert_string_equal(cdl_last_error(), "file x.bin is 12 bytes short");
    /* The message may quote the previous one. */
    cdl_error("while loading: %s", cdl_last_error());
    assert_string_equal(cdl_last_error(), "while loading: file x.bin is 12 bytes short");
}

static void test_alloc_counts_and_aligns(void **state)
{
    (void)state;
    uint64_t before = cdl_alloc_count();
    float *p = cdl_calloc(1000, sizeof *p);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 1000; i++)
        assert_true(p[i] == 0.0f);
    assert_int_equal(cdl_alloc_count(), before + 1);
    cdl_free(p);
    assert_null(cdl_calloc(SIZE_MAX / 2, 4));
    assert_non_null(strstr(cdl_last_error(), "overflows"));
}

static void test_default_threads(void **state)
{
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int ncpu = CPU_COUNT(&set);
    setenv("SLURM_CPUS_PER_TASK", "3", 1);
    setenv("OMP_NUM_THREADS", "5", 1);
    assert_int_equal(cdl_default_threads(), ncpu < 3 ? ncpu : 3);
    /* More than the CPUs we may run on: the affinity mask's count wins. */
    setenv("SLURM_CPUS_PER_TASK", "4096", 1);
    assert_int_equal(cdl_default_threads(), ncpu);
    unsetenv("SLURM_CPUS_PER_TASK");
    assert_int_equal(cdl_default_threads(), ncpu < 5 ? ncpu : 5);
    /* OMP_NUM_THREADS past the CPUs (a shell profile's count on a smaller
     * task) is capped as SLURM_CPUS_PER_TASK is: it ran 4096 threads. */
    setenv("OMP_NUM_THREADS", "4096", 1);
    assert_int_equal(cdl_default_threads(), ncpu);
    setenv("OMP_NUM_THREADS", "garbage", 1);
    assert_true(cdl_default_threads() >= 1);
    unsetenv("OMP_NUM_THREADS");
}

/* A cgroup CPU quota (docker --cpus 1.5, a Kubernetes limit, a site's
 * cpu.max) with every CPU left in the mask: cdl took a thread per CPU of
 * the mask, and threads past the quota only wait for the group's next
 * period. The quota, rounded up, is the count; the mask's count when lower. */
static void test_cpu_quota(void **state)
{
    (void)state;
    assert_true(cpu_quota_parse("150000 100000\n", NULL) == 1.5);
    assert_true(cpu_quota_parse("max 100000\n", NULL) == 0);
    assert_true(cpu_quota_parse("200000\n", NULL) == 2);
    assert_true(cpu_quota_parse("", NULL) == 0);
    assert_true(cpu_quota_parse("12x 100000", NULL) == 0);
    assert_true(cpu_quota_parse("-1\n", "100000\n") == 0);   /* v1: none */
    assert_true(cpu_quota_parse("50000\n", "100000\n") == 0.5);
    assert_true(cpu_quota_parse("50000\n", "0\n") == 0);
    assert_int_equal(cpus_capped(64, 1.5), 2);
    assert_int_equal(cpus_capped(64, 0.5), 1);
    assert_int_equal(cpus_capped(64, 4), 4);
    assert_int_equal(cpus_capped(2, 8), 2);
    assert_int_equal(cpus_capped(16, 0), 16);
    assert_int_equal(cpus_capped(0, 2.5), 3);
    /* cdlrun's OMP_NUM_THREADS: the ranks share a container's quota (it
     * gave each of 2 ranks half of 16 CPUs under a 4-CPU quota). */
    assert_int_equal(cpus_per_rank(16, 0, 2, 0), 8);
    assert_int_equal(cpus_per_rank(16, 0, 2, 4), 2);
    assert_int_equal(cpus_per_rank(8, 1, 2, 4), 2);   /* bound to 8 each */
    assert_int_equal(cpus_per_rank(8, 1, 2, 0), 8);
    assert_int_equal(cpus_per_rank(16, 0, 2, 1.5), 1);
    assert_int_equal(cpus_per_rank(2, 0, 4, 0), 1);
    assert_int_equal(cpus_per_rank(16, 0, 0, 0), 16);

    /* Slurm's cgroup v2 layout: the step's limit, the task's group unlimited
     * below it; a group missing from this view still sees those above. */
    char root[] = "/tmp/cdl-test-cpuquota-XXXXXX", p[512];
    assert_non_null(mkdtemp(root));
    const char *groups[] = {"/job_7", "/job_7/step_0", "/job_7/step_0/task_0"};
    const char *texts[] = {"300000 100000\n", "150000 100000\n", "max 100000\n"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", root, groups[i]);
        assert_int_equal(mkdir(p, 0700), 0);
        snprintf(p, sizeof p, "%s%s/cpu.max", root, groups[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(texts[i], f);
        fclose(f);
    }
    assert_true(cpu_quota_under(root, groups[2], 0) == 1.5);
    assert_true(cpu_quota_under(root, "/job_7/step_0/task_0/", 0) == 1.5);
    assert_true(cpu_quota_under(root, groups[0], 0) == 3);
    assert_true(cpu_quota_under(root, "/job_7/step_9/task_0", 0) == 3);
    assert_true(cpu_quota_under(root, groups[2], 1) == 0);   /* no v1 files */
    for (int i = 2; i >= 0; i--) {
        snprintf(p, sizeof p, "%s%s/cpu.max", root, groups[i]);
        assert_int_equal(unlink(p), 0);
        snprintf(p, sizeof p, "%s%s", root, groups[i]);
        assert_int_equal(rmdir(p), 0);
    }
    assert_int_equal(rmdir(root), 0);
}

/* Ranks free to run on the same CPUs share them (mpirun without binding
 * gave each of 4 ranks every CPU's worth of threads); a binding that gives
 * each its own CPUs, or a count from the environment, stands. */
static void test_threads_for_rank(void **state)
{
    (void)state;
    cpu_set_t all, one;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    int ncpu = CPU_COUNT(&all);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsetenv("SLURM_CPUS_PER_TASK");
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(threads_for_rank(1), ncpu);
    /* More ranks than CPUs online: their masks overlap whatever they are. */
    int lw = (int)online + 1;
    assert_int_equal(threads_for_rank(lw), ncpu / lw > 0 ? ncpu / lw : 1);
    if (ncpu == online && ncpu >= 2)
        assert_int_equal(threads_for_rank(2), ncpu / 2);
    setenv("OMP_NUM_THREADS", "3", 1);
    assert_int_equal(threads_for_rank(lw), ncpu < 3 ? ncpu : 3);   /* capped by the CPUs */
    unsetenv("OMP_NUM_THREADS");
    /* Bound to one CPU of its own (two ranks fit the node): all of it. */
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    if (online >= 2)
        assert_int_equal(threads_for_rank(2), 1);
    assert_int_equal(threads_for_rank(lw), 1);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
}

static void test_unknown_device(void **state)
{
    (void)state;
    assert_null(cdl_backend_create("tpu", 1));
    assert_non_null(strstr(cdl_last_error(), "'tpu'"));
}

/* A NULL config is an error naming the struct and where to start, not a
 * crash: cdl_train_run(NULL, NULL) dereferenced it. */
static void test_null_config(void **state)
{
    (void)state;
    cdl_error("none yet");
    assert_int_equal(cdl_train_run(NULL, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "cdl_train_config is NULL"));
    assert_non_null(strstr(cdl_last_error(), "cdl_train_defaults"));
    assert_null(cdl_loader_create(NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_alloc_counts_and_aligns),
        cmocka_unit_test(test_default_threads),
        cmocka_unit_test(test_threads_for_rank),
        cmocka_unit_test(test_cpu_quota),
        cmocka_unit_test(test_unknown_device),
        cmocka_unit_test(test_null_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
