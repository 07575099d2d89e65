/* --stage auto's per-job copies (lib/train/stage.c): a copy whose run was
 * killed before it could remove it (SIGKILL, the out-of-memory killer) is
 * removed by the next run of the account on that node, known by its
 * .lock that no process holds any more; a copy in use, one without .lock
 * (an older cdl's) and other folders stay. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/train/stage.h"

static char tmpdir[256];

static int exists(const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return stat(p, &st) == 0;
}

static void make(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    assert_int_equal(mkdir(p, 0700), 0);
}

static int lock(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return train_stage_lock(p);
}

static void test_sweep_only_ended_runs(void **state)
{
    (void)state;
    int live = lock("cdl-stage-11.0");   /* a run at work */
    assert_true(live >= 0);
    int dead = lock("cdl-stage-12.0");   /* a run killed mid-copy */
    assert_true(dead >= 0);
    make("cdl-stage-12.0/train");
    close(dead);
    make("cdl-stage-13.0");   /* an older cdl's copy, no .lock */
    make("cdl-stage-other");
    make("mine");   /* not a copy of cdl's */

    assert_int_equal(train_stage_sweep(tmpdir), 1);
    assert_false(exists("cdl-stage-12.0"));
    assert_true(exists("cdl-stage-11.0/.lock"));
    assert_true(exists("cdl-stage-13.0"));
    assert_true(exists("cdl-stage-other"));
    assert_true(exists("mine"));

    /* A second node of the same job on this host locks the same copy: it
     * stays until both have let go. */
    int second = lock("cdl-stage-11.0");
    assert_true(second >= 0);
    close(live);
    assert_int_equal(train_stage_sweep(tmpdir), 0);
    assert_true(exists("cdl-stage-11.0"));
    close(second);
    assert_int_equal(train_stage_sweep(tmpdir), 1);
    assert_false(exists("cdl-stage-11.0"));

    /* The lock makes its folder again after a sweep removed it, private. */
    int again = lock("cdl-stage-11.0");
    assert_true(again >= 0);
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/cdl-stage-11.0", tmpdir);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    close(again);
}

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "stage");
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_only_ended_runs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
