/* Running helpers as the job user: exact environment, closed descriptors,
 * stdin/stdout, timeouts, and (as root) the privilege drop. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "spank/spawn.h"
#include "spank/util.h"

static struct spk_cred self_cred(void)
{
    struct spk_cred c;
    memset(&c, 0, sizeof c);
    c.uid = getuid();
    c.gid = getgid();
    int n = getgroups(SPK_MAX_GROUPS, c.groups);
    c.ngroups = n > 0 ? n : 0;
    return c;
}

static const struct spk_cred nobody = {65534, 65534, 1, {65534}};

/* Runs argv as cred with env; output into out. Returns the exit status, or
 * -1 (spawn failed) or -2 (killed by a signal). */
static int run(const struct spk_cred *cred, char *const argv[], char *const envp[],
               const char *input, const char *cwd, char *out, size_t outlen)
{
    int status = 0;
    struct spk_cmd cmd = {.path = argv[0], .argv = argv, .envp = envp, .input = input,
                          .output = out, .output_len = outlen, .cwd = cwd, .timeout_s = 20};
    spk_clear_error();
    if (spk_spawn(cred, &cmd, &status) != 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

static void test_exact_environment(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char out[256];
    char *argv[] = {"/usr/bin/env", NULL};
    char *envp[] = {"A=1", "B=two words", NULL};
    setenv("LD_PRELOAD", "/tmp/never-loaded.so", 1);   /* ours must not leak */
    assert_int_equal(run(&c, argv, envp, NULL, NULL, out, sizeof out), 0);
    unsetenv("LD_PRELOAD");
    assert_string_equal(out, "A=1\nB=two words\n");
}

static void test_descriptors_closed(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char out[256], script[128];
    int leak = open("/dev/null", O_RDONLY);   /* no O_CLOEXEC on purpose */
    int high = dup2(leak, 200);
    assert_true(leak >= 3 && high == 200);
    snprintf(script, sizeof script,
             "for f in 3 %d 200; do test -e /proc/self/fd/$f && echo open $f; done; echo end",
             leak);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    char *envp[] = {NULL};
    assert_int_equal(run(&c, argv, envp, NULL, NULL, out, sizeof out), 0);
    assert_string_equal(out, "end\n");
    close(leak);
    close(high);
}

static void test_cwd_umask_session(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char out[256], want[64];
    char *argv[] = {"/bin/sh", "-c", "pwd; umask; ps -o sid= -p $$ | tr -d ' '; echo $$", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    assert_int_equal(run(&c, argv, envp, NULL, "/tmp", out, sizeof out), 0);
    /* A new session: the shell leads it (sid == its pid). */
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_memory_equal(out, "/tmp\n0077\n", 10);
    unsigned sid = 0, pid = 1;
    assert_int_equal(sscanf(out + 10, "%u\n%u", &sid, &pid), 2);
    assert_int_equal(sid, pid);
    snprintf(want, sizeof want, "/\n");
    char *argv2[] = {"/bin/sh", "-c", "pwd", NULL};
    assert_int_equal(run(&c, argv2, envp, NULL, NULL, out, sizeof out), 0);
    assert_string_equal(out, want);
}

static void test_stdin_and_status(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char out[256];
    char *cat[] = {"/bin/cat", NULL};
    char *envp[] = {NULL};
    assert_int_equal(run(&c, cat, envp, "quit\nsecond line\n", NULL, out, sizeof out), 0);
    assert_string_equal(out, "quit\nsecond line\n");
    char *ex[] = {"/bin/sh", "-c", "echo bad >&2; exit 3", NULL};
    assert_int_equal(run(&c, ex, envp, NULL, NULL, out, sizeof out), 3);
    assert_string_equal(out, "bad\n");
    /* A helper that ignores its input must not hurt the caller (no SIGPIPE). */
    char *tr[] = {"/bin/true", NULL};
    static char big[1 << 20];
    memset(big, 'x', sizeof big - 1);
    assert_int_equal(run(&c, tr, envp, big, NULL, NULL, 0), 0);
}

static void test_failures(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char *envp[] = {NULL};
    char *rel[] = {"bin/sh", NULL};
    assert_int_equal(run(&c, rel, envp, NULL, NULL, NULL, 0), -1);
    assert_non_null(strstr(spk_last_error(), "not an absolute path"));
    char *missing[] = {"/nonexistent/nvidia-cuda-mps-control", NULL};
    assert_int_equal(run(&c, missing, envp, NULL, NULL, NULL, 0), -1);
    assert_non_null(strstr(spk_last_error(), "execve failed"));
    char *sh[] = {"/bin/sh", "-c", "true", NULL};
    assert_int_equal(run(&c, sh, envp, NULL, "/nonexistent-dir", NULL, 0), -1);
    assert_non_null(strstr(spk_last_error(), "chdir failed"));
}

static void test_timeout_kills(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char *argv[] = {"/bin/sleep", "60", NULL};
    char *envp[] = {NULL};
    int status;
    struct spk_cmd cmd = {.path = argv[0], .argv = argv, .envp = envp, .timeout_s = 0.2};
    assert_int_equal(spk_spawn(&c, &cmd, &status), -1);
    assert_non_null(strstr(spk_last_error(), "did not finish"));
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Child of test_input_not_blocking (alarm() is its guard: the old feed
 * hung). Exits 0 when both helpers behaved, else the failed check's number. */
static int input_child(void)
{
    alarm(30);
    struct spk_cred c = self_cred();
    char *envp[] = {NULL};
    size_t n = (size_t)16 << 20;   /* far more than a socket's buffer */
    char *big = malloc(n + 1);
    if (!big)
        return 2;
    memset(big, 'x', n);
    big[n] = '\0';
    /* A helper that never reads its input: killed at the deadline, and the
     * error says it had not read it. */
    char *sl[] = {"/bin/sleep", "100", NULL};   /* outlives the guard */
    int status = 0;
    struct spk_cmd cmd = {.path = sl[0], .argv = sl, .envp = envp, .input = big,
                          .timeout_s = 0.5};
    spk_clear_error();
    if (spk_spawn(&c, &cmd, &status) != -1)
        return 3;
    if (!strstr(spk_last_error(), "did not finish") ||
        !strstr(spk_last_error(), "had not read its input"))
        return 4;
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        return 5;
    /* A helper that reads all of it while writing as much back: input and
     * output flow together (the old feed filled the output socket while it
     * sent, and both sides waited for ever). */
    char out[64];
    char *cat[] = {"/bin/cat", NULL};
    struct spk_cmd cc = {.path = cat[0], .argv = cat, .envp = envp, .input = big,
                         .output = out, .output_len = sizeof out, .timeout_s = 50};
    if (spk_spawn(&c, &cc, &status) != 0)
        return 6;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strspn(out, "x") != sizeof out - 1)
        return 7;
    free(big);
    return 0;
}

/* Input a helper does not read (it is stuck, or a program of the user's)
 * must not hold the caller, slurmstepd, past the deadline: it was written
 * with a blocking send() before the wait began. */
static void test_input_not_blocking(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(input_child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("spk_spawn hung feeding a helper's stdin (killed by signal %d)",
                 WTERMSIG(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static char logged[512];
static void keep_log(const char *msg)
{
    snprintf(logged, sizeof logged, "%s", msg);
}

/* A helper that SIGKILL does not end at once (stuck in the kernel, state D)
 * is waited for a bounded time, logged and left behind: root in slurmstepd
 * or the epilog used to wait for it without end. A process cannot be put in
 * state D on purpose here, so the kill is signal 0, which leaves the helper
 * running as a stuck one would be (no race with the helper's start-up). */
static void test_unkillable_left_behind(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char *argv[] = {"/bin/sleep", "60", NULL};
    char *envp[] = {NULL};
    int status = 12345;
    struct spk_cmd cmd = {.path = argv[0], .argv = argv, .envp = envp, .timeout_s = 0.2};
    int sig = spk_spawn_kill_signal;
    double grace = spk_spawn_reap_grace_s;
    spk_spawn_kill_signal = 0;
    spk_spawn_reap_grace_s = 0.2;
    logged[0] = '\0';
    spk_set_log(keep_log);
    spk_clear_error();
    int rc = spk_spawn(&c, &cmd, &status);
    spk_set_log(NULL);
    spk_spawn_kill_signal = sig;
    spk_spawn_reap_grace_s = grace;
    assert_int_equal(rc, -1);
    assert_int_equal(status, 12345);
    const char *e = spk_last_error();
    assert_non_null(strstr(e, "could not be killed"));
    const char *p = strstr(e, "pid ");
    assert_non_null(p);
    pid_t pid = (pid_t)atol(p + 4);
    assert_true(pid > 1);
    assert_non_null(strstr(logged, "left behind"));
    assert_non_null(strstr(logged, "/bin/sleep"));
    /* Still there, and still ours to reap. */
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static int fn_stuck(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return 0;
}

static void test_run_as_unkillable(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    int sig = spk_spawn_kill_signal;
    double grace = spk_spawn_reap_grace_s;
    spk_spawn_kill_signal = 0;
    spk_spawn_reap_grace_s = 0.2;
    spk_set_log(keep_log);
    logged[0] = '\0';
    spk_clear_error();
    int rc = spk_run_as(&c, fn_stuck, NULL, 0.2);
    spk_set_log(NULL);
    spk_spawn_kill_signal = sig;
    spk_spawn_reap_grace_s = grace;
    assert_int_equal(rc, -1);
    const char *p = strstr(spk_last_error(), "pid ");
    assert_non_null(p);
    pid_t pid = (pid_t)atol(p + 4);
    assert_true(pid > 1);
    assert_non_null(strstr(logged, "left behind"));
    int status;
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* A process left behind holding stdout (a daemon) does not hold up the wait. */
static void test_leftover_holds_pipe(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    char out[64];
    char *argv[] = {"/bin/sh", "-c", "/bin/sleep 60 & echo $!", NULL};
    char *envp[] = {NULL};
    assert_int_equal(run(&c, argv, envp, NULL, NULL, out, sizeof out), 0);
    int pid = atoi(out);
    assert_true(pid > 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
}

static int fn_ids(void *arg)
{
    const struct spk_cred *want = arg;
    if (getuid() != want->uid || geteuid() != want->uid || getgid() != want->gid)
        return 1;
    if (want->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0))
        return 2;
    return 7;
}

static void test_run_as(void **state)
{
    (void)state;
    struct spk_cred c = self_cred();
    assert_int_equal(spk_run_as(&c, fn_ids, &c, 10), 7);
    if (getuid() != 0 && getuid() != nobody.uid) {
        /* Without privileges another user's credentials are refused
         * (run as nobody itself, nobody's are this user's own). */
        assert_int_equal(spk_run_as(&nobody, fn_ids, (void *)&nobody, 10), -1);
        assert_non_null(strstr(spk_last_error(), "setresuid"));
    }
}

/* As root: the helper runs as nobody, with nobody's groups only, cannot
 * regain root, has no_new_privs and oom_score_adj back at 0. */
static void test_drop_privileges(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    char out[512], old[16] = "0";
    FILE *f = fopen("/proc/self/oom_score_adj", "r+");
    if (f) {
        if (!fgets(old, sizeof old, f))
            strcpy(old, "0");
        fclose(f);
        f = fopen("/proc/self/oom_score_adj", "w");
        if (f) {
            fputs("-500", f);
            fclose(f);
        }
    }
    char *argv[] = {"/bin/sh", "-c",
                    "id -u; id -g; id -G; grep -E '^(Uid|Gid|NoNewPrivs):' /proc/self/status; "
                    "cat /proc/self/oom_score_adj",
                    NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    assert_int_equal(run(&nobody, argv, envp, NULL, NULL, out, sizeof out), 0);
    f = fopen("/proc/self/oom_score_adj", "w");
    if (f) {
        fputs(old, f);
        fclose(f);
    }
    assert_non_null(strstr(out, "65534\n65534\n65534\n"));
    assert_non_null(strstr(out, "Uid:\t65534\t65534\t65534\t65534"));
    assert_non_null(strstr(out, "Gid:\t65534\t65534\t65534\t65534"));
    assert_non_null(strstr(out, "NoNewPrivs:\t1"));
    assert_non_null(strstr(out, "\n0\n"));
    assert_int_equal(spk_run_as(&nobody, fn_ids, (void *)&nobody, 10), 7);
}

static void test_admin_binary(void **state)
{
    (void)state;
    assert_int_equal(spk_check_admin_binary("mps_control", "/bin/sh"), 0);
    assert_int_equal(spk_check_admin_binary("mps_control", "bin/sh"), -1);
    assert_int_equal(spk_check_admin_binary("mps_control", "/nonexistent/x"), -1);
    assert_non_null(strstr(spk_last_error(), "mps_control=/nonexistent/x"));
    assert_int_equal(spk_check_admin_binary("mps_control", "/tmp"), -1);
    char dir[] = "/tmp/cdl-spawn-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tool", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\n", f);
    fclose(f);
    chmod(path, 0777);
    assert_int_equal(spk_check_admin_binary("mps_control", path), -1);
    assert_non_null(strstr(spk_last_error(), "not writable by group or others"));
    chmod(path, 0755);
    chmod(dir, 0755);
    if (getuid() == 0) {
        assert_int_equal(spk_check_admin_binary("mps_control", path), 0);
        chmod(dir, 0777);   /* anyone could swap the binary */
        assert_int_equal(spk_check_admin_binary("mps_control", path), -1);
        assert_non_null(strstr(spk_last_error(), "its directory"));
        chmod(dir, 0755);
        /* A directory above: whoever writes it can rename the program's
         * directory and put one of their own in its place. */
        char sub[96], deep[128];
        snprintf(sub, sizeof sub, "%s/sub", dir);
        snprintf(deep, sizeof deep, "%s/tool", sub);
        assert_int_equal(mkdir(sub, 0755), 0);
        assert_int_equal(link(path, deep), 0);
        assert_int_equal(spk_check_admin_binary("mps_control", deep), 0);
        chmod(dir, 0775);
        assert_int_equal(spk_check_admin_binary("mps_control", deep), -1);
        assert_non_null(strstr(spk_last_error(), "its parent directory"));
        chmod(dir, 0755);
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_int_equal(spk_check_admin_binary("mps_control", deep), -1);
        assert_non_null(strstr(spk_last_error(), "its parent directory"));
        assert_int_equal(chown(dir, 0, 0), 0);
        /* Through a link: the resolved path is the one checked and run. */
        char lnk[96], real[4096];
        snprintf(lnk, sizeof lnk, "%s/lnk", dir);
        assert_int_equal(symlink(deep, lnk), 0);
        assert_int_equal(spk_admin_binary_resolve("mps_control", lnk, real, sizeof real), 0);
        assert_string_equal(real, deep);
        unlink(lnk);
        unlink(deep);
        rmdir(sub);
    } else {
        assert_int_equal(spk_check_admin_binary("mps_control", path), -1);
        assert_non_null(strstr(spk_last_error(), "owned by root"));
    }
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_environment),
        cmocka_unit_test(test_descriptors_closed),
        cmocka_unit_test(test_cwd_umask_session),
        cmocka_unit_test(test_stdin_and_status),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_timeout_kills),
        cmocka_unit_test(test_unkillable_left_behind),
        cmocka_unit_test(test_run_as_unkillable),
        cmocka_unit_test(test_input_not_blocking),
        cmocka_unit_test(test_leftover_holds_pipe),
        cmocka_unit_test(test_run_as),
        cmocka_unit_test(test_drop_privileges),
        cmocka_unit_test(test_admin_binary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
