/* The plugin's removal of a step's leftover shared memory (spank/shmsweep.c):
 * exactly the step's segment names, regular files of the job's uid, links
 * never followed. A private directory stands for /dev/shm. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "fuse_stall.h"

#include "spank/shmsweep.h"
#include "spank/util.h"

static void test_names(void **state)
{
    (void)state;
    /* What lib/dist/coll_shm.c creates for CDL_JOB_ID "42.3". */
    assert_true(spk_shm_name_is_step("cdl-42.3-n0-0123456789abcdef", 42, 3));
    assert_true(spk_shm_name_is_step("cdl-42.3-n12g3-ffffffffffffffff", 42, 3));
    /* Another step, another job, a job id that merely starts alike. */
    assert_false(spk_shm_name_is_step("cdl-42.4-n0-0123456789abcdef", 42, 3));
    assert_false(spk_shm_name_is_step("cdl-42.3-n0-0123456789abcdef", 4, 3));
    assert_false(spk_shm_name_is_step("cdl-421.3-n0-0123456789abcdef", 42, 3));
    assert_false(spk_shm_name_is_step("cdl-42.31-n0-0123456789abcdef", 42, 3));
    /* Anything but the exact shape. */
    const char *bad[] = {
        "cdl-42.3-n0-0123456789abcde",   "cdl-42.3-n0-0123456789abcdef0",
        "cdl-42.3-n0-0123456789ABCDEF",  "cdl-42.3-n-0123456789abcdef",
        "cdl-42.3-x0-0123456789abcdef",  "cdl-42.3-n0g-0123456789abcdef",
        "cdl-42.3-n0-0123456789abcdef.", "cdl-42.3-leaders-0123456789abcdef",
        "cdl-42.3-",                     "cdl-42.3",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (spk_shm_name_is_step(bad[i], 42, 3))
            fail_msg("'%s' taken for a segment of 42.3", bad[i]);
    assert_false(spk_shm_name_is_step(NULL, 42, 3));
    /* Any step of the job (the job epilog's sweep). */
    assert_true(spk_shm_name_is_step("cdl-42.3-n0-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
    assert_true(spk_shm_name_is_step("cdl-42.17-n1g2-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
    assert_false(spk_shm_name_is_step("cdl-421.3-n0-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
    assert_false(spk_shm_name_is_step("cdl-42.-n0-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
    assert_false(spk_shm_name_is_step("cdl-42.x-n0-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
    assert_false(spk_shm_name_is_step("cdl-42.3n0-0123456789abcdef", 42, SPK_SHM_ANY_STEP));
}

static void touch(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
}

static int exists(const char *dir, const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

static void count_said(const char *name, void *arg)
{
    (void)name;
    ++*(int *)arg;
}

static void test_sweep(void **state)
{
    (void)state;
    char dir[] = "/tmp/cdl-test-shmsweep-XXXXXX", outside[600];
    assert_non_null(mkdtemp(dir));
    /* A file outside that a planted link names: it must survive. */
    snprintf(outside, sizeof outside, "%s/victim", dir);
    touch(dir, "victim");
    touch(dir, "cdl-42.3-n0-0123456789abcdef");      /* the step's: removed */
    touch(dir, "cdl-42.3-n1g0-00000000000000aa");    /* the step's: removed */
    touch(dir, "cdl-42.4-n0-0123456789abcdef");      /* another step's */
    touch(dir, "cdl-42.3-n0-0123456789abcdef.keep"); /* another name */
    char link[600], sub[600];
    snprintf(link, sizeof link, "%s/cdl-42.3-n2-1111111111111111", dir);
    assert_int_equal(symlink(outside, link), 0);
    snprintf(sub, sizeof sub, "%s/cdl-42.3-n3-2222222222222222", dir);
    assert_int_equal(mkdir(sub, 0700), 0);

    /* Another uid's files stay. */
    int said = 0;
    assert_int_equal(spk_shm_sweep(dir, 42, 3, getuid() + 1, count_said, &said), 0);
    assert_int_equal(said, 0);
    assert_true(exists(dir, "cdl-42.3-n0-0123456789abcdef"));

    assert_int_equal(spk_shm_sweep(dir, 42, 3, getuid(), count_said, &said), 2);
    assert_int_equal(said, 2);
    assert_false(exists(dir, "cdl-42.3-n0-0123456789abcdef"));
    assert_false(exists(dir, "cdl-42.3-n1g0-00000000000000aa"));
    assert_true(exists(dir, "cdl-42.4-n0-0123456789abcdef"));
    assert_true(exists(dir, "cdl-42.3-n0-0123456789abcdef.keep"));
    assert_true(exists(dir, "cdl-42.3-n2-1111111111111111"));   /* the link itself */
    assert_true(exists(dir, "victim"));
    assert_true(exists(dir, "cdl-42.3-n3-2222222222222222"));

    /* A directory every account may write to without the sticky bit: an
     * entry could be swapped between its check and its removal; refused,
     * nothing removed. With the sticky bit (as /dev/shm), swept. */
    touch(dir, "cdl-42.3-n0-0123456789abcdef");
    assert_int_equal(chmod(dir, 0777), 0);
    spk_clear_error();
    assert_int_equal(spk_shm_sweep(dir, 42, 3, getuid(), NULL, NULL), -1);
    assert_non_null(strstr(spk_last_error(), "without the sticky bit"));
    assert_non_null(strstr(spk_last_error(), "chmod 1777"));
    assert_true(exists(dir, "cdl-42.3-n0-0123456789abcdef"));
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(spk_shm_sweep(dir, 42, 3, getuid(), NULL, NULL), 1);
    assert_false(exists(dir, "cdl-42.3-n0-0123456789abcdef"));
    assert_int_equal(chmod(dir, 0700), 0);

    /* A missing directory is nothing to do; a file is an error. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(spk_shm_sweep(missing, 42, 3, getuid(), NULL, NULL), 0);
    assert_int_equal(spk_shm_sweep(outside, 42, 3, getuid(), NULL, NULL), -1);

    assert_int_equal(unlink(link), 0);
    assert_int_equal(rmdir(sub), 0);
    const char *left[] = {"victim", "cdl-42.4-n0-0123456789abcdef",
                          "cdl-42.3-n0-0123456789abcdef.keep"};
    for (size_t i = 0; i < 3; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, left[i]);
        assert_int_equal(unlink(p), 0);
    }
    assert_int_equal(rmdir(dir), 0);
}

static const char *fuse_dir;

static int sweep_stage(void *arg)
{
    (void)arg;
    /* The FUSE mount on a segment's name is no segment: skipped. */
    int rc = spk_shm_sweep(fuse_dir, 42, 3, getuid(), NULL, NULL);
    return rc == 1 ? 0 : rc < 0 ? 2 : 3;
}

/* In a mount namespace of its own: 77 without FUSE, 100 when the sweep
 * waited on the mount, else sweep_stage's result. */
static int fuse_child(void)
{
    struct fuse_stall s = {.n = 0};
    char seg[600];
    snprintf(seg, sizeof seg, "%s/cdl-42.3-n1-00000000000000ff", fuse_dir);
    if (fuse_stall_ns() != 0 || fuse_stall_mount(&s, seg, 0, (unsigned)getuid()) != 0)
        return 77;
    int rc = fuse_stall_run(&s, sweep_stage, NULL, 20);
    return rc == -1 ? 100 : rc;
}

/* A FUSE file system of the user's (user_allow_other) mounted on a file in
 * /dev/shm named like a segment of their step, whose daemon never answers:
 * the sweep stat'ed it (a getattr the daemon never answers) and waited for
 * ever in slurmstepd or the epilog. Now it is looked at in the kernel's
 * cache only and skipped, being another file system; the step's real
 * segment still goes. Needs root and FUSE; skipped otherwise. */
static void test_fuse_not_waited_for(void **state)
{
    (void)state;
    char dir[] = "/tmp/cdl-test-shmsweep-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fuse_dir = dir;
    touch(dir, "cdl-42.3-n0-0123456789abcdef");   /* the step's: removed */
    touch(dir, "cdl-42.3-n1-00000000000000ff");   /* a FUSE mount goes on it */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fuse_child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    int rc = WEXITSTATUS(status);
    char p[600];
    snprintf(p, sizeof p, "%s/cdl-42.3-n1-00000000000000ff", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/cdl-42.3-n0-0123456789abcdef", dir);
    unlink(p);
    assert_int_equal(rmdir(dir), 0);
    if (rc == 77) {
        printf("skipped: no FUSE mount possible here (needs root and /dev/fuse)\n");
        return;
    }
    if (rc == 100)
        fail_msg("the sweep waited on the FUSE mount (its connection was aborted after 20 s)");
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_fuse_not_waited_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
