/* The memory limit cdl reads from the process's cgroup (lib/core/memlimit.c),
 * on a private directory tree laid out as Slurm's task/cgroup makes it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "lib/core/memlimit.h"

static void write_limit(const char *root, const char *group, const char *file, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s%s", root, group);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s%s/%s", root, group, file);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Slurm's task/cgroup limits the job's and the step's groups and runs each
 * task in a group below them whose own file says unlimited (v1 below;
 * v2's .../job_J/step_S/user/task_T alike): only the task's own file was
 * read, so no limit was seen and a batch too large for --mem was
 * OOM-killed with exit 137 and no message. The lowest limit on the way up
 * to the mount's root counts. */
static void test_ancestors(void **state)
{
    (void)state;
    char root[] = "/tmp/cdl-test-cgroup-XXXXXX", p[512];
    assert_non_null(mkdtemp(root));
    const char *v1 = "memory.limit_in_bytes", *unl = "9223372036854771712\n";
    const char *groups[] = {"/slurm_n1", "/slurm_n1/uid_65534", "/slurm_n1/uid_65534/job_7",
                            "/slurm_n1/uid_65534/job_7/step_0",
                            "/slurm_n1/uid_65534/job_7/step_0/task_0"};
    const char *texts[] = {unl, unl, "2147483648\n", "1073741824\n", unl};
    for (int i = 0; i < 5; i++)
        write_limit(root, groups[i], v1, texts[i]);
    assert_true(cgroup_limit_under(root, v1, groups[4]) == (size_t)1 << 30);
    assert_true(cgroup_limit_under(root, v1, "/slurm_n1/uid_65534/job_7/step_0/task_0/") ==
                (size_t)1 << 30);
    assert_true(cgroup_limit_under(root, v1, groups[2]) == (size_t)2 << 30);
    assert_true(cgroup_limit_under(root, v1, groups[1]) == SIZE_MAX);
    /* A group that is not there (seen from a cgroup namespace): the groups
     * above it still count. */
    assert_true(cgroup_limit_under(root, v1, "/slurm_n1/uid_65534/job_7/step_9/task_0") ==
                (size_t)2 << 30);
    assert_true(cgroup_limit_under(root, "memory.max", groups[4]) == SIZE_MAX);
    for (int i = 4; i >= 0; i--) {
        snprintf(p, sizeof p, "%s%s/%s", root, groups[i], v1);
        assert_int_equal(unlink(p), 0);
        snprintf(p, sizeof p, "%s%s", root, groups[i]);
        assert_int_equal(rmdir(p), 0);
    }
    assert_int_equal(rmdir(root), 0);
}

/* The ranks of a node share its memory and the step's cgroup limit: each
 * checked its blocks against the whole limit, all passed, and together
 * they were OOM-killed without a message (srun --mem=200 -n2). With the
 * share set, a block that fits the whole but not the rank's share is
 * refused, and the limit reported is the share. */
static void test_share(void **state)
{
    (void)state;
    size_t lim = memory_limit_cached(), held = 0, limit = 0;
    assert_true(lim != SIZE_MAX && lim > ((size_t)64 << 20));
    size_t block = lim / 2;
    assert_int_equal(memory_share_ranks(), 1);
    assert_int_equal(memory_would_exceed(block, 0, &held, &limit), 0);
    memory_share_among(4);
    assert_int_equal(memory_share_ranks(), 4);
    assert_int_equal(memory_would_exceed(block, 0, &held, &limit), 1);
    assert_true(limit == lim / 4);
    memory_share_among(0);   /* nonsense counts as alone */
    assert_int_equal(memory_share_ranks(), 1);
    assert_int_equal(memory_would_exceed(block, 0, &held, &limit), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ancestors),
        cmocka_unit_test(test_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
