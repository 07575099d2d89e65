/* --stage auto's per-job copies (lib/train/stage.c): a copy whose run was
 * killed before it could remove it (SIGKILL, the out-of-memory killer) is
 * removed by the next run of the account on that node, known by its
 * .lock that no process holds any more; a copy in use, one without .lock
 * (an older cdl's) and other folders stay. A lock another process holds
 * exclusively is waited for at most the timeout given (CDL_TIMEOUT), and
 * the error names the file and the holder: a blocking flock waited for as
 * long as the holder kept it, for ever. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/train/lockwait.h"
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
    return train_stage_lock(p, 300);
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

/* Another process holding path exclusively (flock) until release_holder:
 * its pid. */
static int holder_out = -1;
static pid_t hold_exclusively(const char *path)
{
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_RDONLY | O_CREAT, 0600);
        char c = fd >= 0 && flock(fd, LOCK_EX) == 0 ? 'y' : 'n';
        close(done[1]);
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        while (read(done[0], &c, 1) > 0)   /* until the parent closes its end */
            ;
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    assert_int_equal(c, 'y');
    holder_out = done[1];
    return pid;
}

static void release_holder(pid_t pid)
{
    int status;
    close(holder_out);
    holder_out = -1;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

static void test_lock_held_elsewhere_times_out(void **state)
{
    (void)state;
    alarm(120);   /* before: waited for ever; fail rather than hang */
    char dir[512], lock_path[600], want[64];
    snprintf(dir, sizeof dir, "%s/cdl-stage-21.0", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(lock_path, sizeof lock_path, "%s/.lock", dir);
    pid_t pid = hold_exclusively(lock_path);
    snprintf(want, sizeof want, "process %ld (", (long)pid);

    /* --stage auto's lock (a sweep of another run removing the copy). */
    assert_int_equal(train_stage_lock(dir, 0.2), -1);
    assert_non_null(strstr(cdl_last_error(), lock_path));
    assert_non_null(strstr(cdl_last_error(), want));
    assert_non_null(strstr(cdl_last_error(), "exclusive)"));
    assert_non_null(strstr(cdl_last_error(), "CDL_TIMEOUT"));

    /* A kept copy's lock let go to shared (the conversion is not atomic:
     * a process may take it exclusively in between). */
    int fd = open(lock_path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(lockwait_flock(fd, LOCK_SH, lock_path, "a test", 0.2, NULL, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), want));

    /* Once the holder lets go, both take it. */
    release_holder(pid);
    assert_int_equal(lockwait_flock(fd, LOCK_SH, lock_path, "a test", 0.2, NULL, NULL), 0);
    close(fd);
    int got = train_stage_lock(dir, 0.2);
    assert_true(got >= 0);
    close(got);
    alarm(0);
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
        cmocka_unit_test(test_lock_held_elsewhere_times_out),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
