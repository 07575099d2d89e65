/* Steps of one job sharing CPUs (spank/overlap.c): the scan of a made-up
 * /proc and what a step does with the CPUs other steps use, on the saved
 * 2socket-smt-interleaved.xml (core i = OS PUs i and i+8). Two 2-task
 * steps of a job with 4 cores, the second started with srun --overlap,
 * were both planned over the same cores, each as if alone. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "lib/dist/bind.h"
#include "spank/overlap.h"

static void put(const char *dir, const char *pid, const char *name, const char *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, pid);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/%s", dir, pid, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

/* A process of job/step (NULL step: none in its environment) on cpus. */
static void proc(const char *dir, const char *pid, const char *job, const char *step,
                 const char *cpus)
{
    char env[256], st[256];
    int n = snprintf(env, sizeof env, "PATH=/bin%cSLURM_JOB_ID=%s%c", 0, job, 0);
    if (step)
        n += snprintf(env + n, sizeof env - (size_t)n, "SLURM_STEP_ID=%s%cX=1", step, 0) + 1;
    put(dir, pid, "environ", env, (size_t)n);
    snprintf(st, sizeof st, "Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t%s\nMems:\t1\n",
             cpus);
    put(dir, pid, "status", st, strlen(st));
}

static void test_environ(void **state)
{
    (void)state;
    unsigned long j = 0, s = 0;
    static const char env[] = "A=1\0SLURM_JOB_ID=77\0SLURM_STEP_ID=3\0B=2";
    assert_int_equal(spk_environ_step(env, sizeof env - 1, &j, &s), 0);
    assert_int_equal(j, 77);
    assert_int_equal(s, 3);
    static const char nostep[] = "SLURM_JOB_ID=77\0SLURM_STEPID=3";
    assert_int_equal(spk_environ_step(nostep, sizeof nostep - 1, &j, &s), -1);
    static const char bad[] = "SLURM_JOB_ID=7x\0SLURM_STEP_ID=3";
    assert_int_equal(spk_environ_step(bad, sizeof bad - 1, &j, &s), -1);
}

static void test_scan(void **state)
{
    (void)state;
    char dir[128], steps[96];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "overlap"), 0);
    proc(dir, "100", "7", "0", "0-1");        /* step 0: its two tasks on cores 0-1 */
    proc(dir, "101", "7", "0", "8-9");
    proc(dir, "102", "8", "0", "2-3");        /* another job */
    proc(dir, "103", "7", "4294967291", "0-15"); /* the batch step */
    proc(dir, "104", "7", NULL, "0-15");      /* no step (the batch script) */
    proc(dir, "105", "7", "5", "6");          /* step 5, off these CPUs */
    proc(dir, "106", "7", "1", "0-15");       /* this step */
    proc(dir, "107", "7", "2", "0-3,8-11");   /* a shell of step 2: all the step's CPUs */
    put(dir, "self", "environ", "", 0);
    hwloc_bitmap_t mine = hwloc_bitmap_alloc(), shared = hwloc_bitmap_alloc();
    char got[64];
    hwloc_bitmap_list_sscanf(mine, "0-3,8-11");
    assert_int_equal(spk_overlap_scan(dir, getuid(), 7, 1, mine, shared, steps, sizeof steps), 1);
    hwloc_bitmap_list_snprintf(got, sizeof got, shared);
    assert_string_equal(got, "0-1,8-9");
    assert_string_equal(steps, "0");
    hwloc_bitmap_fill(mine);
    assert_int_equal(spk_overlap_scan(dir, getuid(), 7, 1, mine, shared, steps, sizeof steps), 3);
    assert_string_equal(steps, "0,2,5");
    /* Another user's processes are not read. */
    assert_int_equal(spk_overlap_scan(dir, getuid() + 1, 7, 1, mine, shared, steps,
                                      sizeof steps), 0);
    /* Nothing to read: none. */
    assert_int_equal(spk_overlap_scan("/nonexistent-proc", getuid(), 7, 1, mine, shared, steps,
                                      sizeof steps), 0);
    assert_true(hwloc_bitmap_iszero(shared));
    hwloc_bitmap_free(mine);
    hwloc_bitmap_free(shared);
    assert_int_equal(test_rm_rf(dir), 0);
}

static void expect(hwloc_topology_t t, const char *allowed_list, const char *others_list,
                   int ntasks, int cpt, int want_rc, const char *want, const char *note_has)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc(), others = hwloc_bitmap_alloc();
    char note[384], got[64];
    hwloc_bitmap_list_sscanf(allowed, allowed_list);
    hwloc_bitmap_list_sscanf(others, others_list);
    assert_int_equal(spk_overlap_apply(t, allowed, others, "0", ntasks, cpt, note, sizeof note),
                     want_rc);
    hwloc_bitmap_list_snprintf(got, sizeof got, allowed);
    assert_string_equal(got, want);
    if (note_has)
        assert_non_null(strstr(note, note_has));
    else
        assert_string_equal(note, "");
    hwloc_bitmap_free(allowed);
    hwloc_bitmap_free(others);
}

static void test_apply(void **state)
{
    (void)state;
    char path[512];
    hwloc_topology_t t;
    contract_err e;
    test_path("tests/topologies/2socket-smt-interleaved.xml", path, sizeof path);
    if (bind_load(&t, path, 0, &e) != 0)
        fail_msg("%s", e.msg);
    /* The job's cores 0-3; step 0 (srun --exact -n2) bound to cores 0-1,
     * step 1 (srun --overlap -n2, all four cores): it keeps to 2-3 and
     * its two tasks get one core each, not cores 0-1 and 2-3 beside
     * step 0's. */
    expect(t, "0-3,8-11", "0-1,8-9", 2, 1, 1, "2-3,10-11", "left PUs 0-1,8-9 to step 0");
    /* The same with -c4: the two free cores hold 4 PUs, not the 8 asked. */
    expect(t, "0-3,8-11", "0-1,8-9", 2, 4, 0, "0-3,8-11", "too few other CPUs");
    hwloc_bitmap_t a = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[2] = {hwloc_bitmap_alloc(), hwloc_bitmap_alloc()};
    hwloc_bitmap_list_sscanf(a, "2-3,10-11");
    assert_int_equal(bind_plan(t, a, BIND_CORES, 2, NULL, out, NULL, 0, &e), 0);
    char got[32];
    hwloc_bitmap_list_snprintf(got, sizeof got, out[0]);
    assert_string_equal(got, "2,10");
    hwloc_bitmap_list_snprintf(got, sizeof got, out[1]);
    assert_string_equal(got, "3,11");
    /* Both steps on the same two cores (srun --exact --overlap: Slurm
     * gave both cores 0-1): no room, they share, and the map says so. */
    expect(t, "0-1,8-9", "0,8", 2, 1, 0, "0-1,8-9", "shares PUs 0,8 with step 0");
    /* Three tasks, one free core: share. */
    expect(t, "0-3,8-11", "0-2,8-10", 3, 1, 0, "0-3,8-11", "too few other CPUs");
    /* Steps apart (srun --exact): nothing to do, nothing said. */
    expect(t, "2-3,10-11", "0-1,8-9", 2, 1, 0, "2-3,10-11", NULL);
    hwloc_bitmap_free(a);
    hwloc_bitmap_free(out[0]);
    hwloc_bitmap_free(out[1]);
    hwloc_topology_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environ),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
