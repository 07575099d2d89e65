/* cdlrun: the contract it exports, labelled output, the failing rank's
 * message and exit code, signal forwarding, stopping the other ranks, and
 * the exit-code conventions. Each case runs the built launcher/cdlrun on
 * small sh scripts, with a hang guard. */
#include "testutil.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

struct result {
    char out[65536], err[65536];
    size_t nout, nerr;
    int status;         /* wait status, -1 when the guard killed it */
};

typedef struct result result;

typedef struct launch {
    const char *const *argv;   /* cdlrun's arguments after the program name */
    double guard_s;
    const char *ready;         /* once stdout holds `nready` of these: */
    int nready, sig;           /* send sig to cdlrun, */
    void (*on_ready)(const result *r);   /* or call this */
} launch;

/* A signal cdlrun starts with ignored (as under nohup, or '&' in a script). */
static int start_ignored;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void run_cdlrun(const launch *l, result *res)
{
    char path[4096];
    const char *top = getenv("top_builddir");
    snprintf(path, sizeof path, "%s/launcher/cdlrun", top && *top ? top : ".");
    const char *argv[32] = {path};
    int argc = 1;
    for (int i = 0; l->argv[i]; i++)
        argv[argc++] = l->argv[i];
    argv[argc] = NULL;
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (start_ignored)
            signal(start_ignored, SIG_IGN);
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        execv(path, (char *const *)argv);
        _exit(126);
    }
    close(out[1]);
    close(err[1]);
    memset(res, 0, sizeof *res);
    double deadline = now_s() + l->guard_s;
    int open = 2, signalled = 0;
    while (open > 0) {
        struct pollfd p[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
        double left = deadline - now_s();
        if (left <= 0)
            break;
        poll(p, 2, (int)(left * 1000) + 1);
        for (int k = 0; k < 2; k++) {
            if (p[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP)))
                continue;
            char *buf = k ? res->err : res->out;
            size_t *n = k ? &res->nerr : &res->nout;
            ssize_t got = read(p[k].fd, buf + *n, sizeof res->out - 1 - *n);
            if (got <= 0) {
                close(k ? err[0] : out[0]);
                if (k)
                    err[0] = -1;
                else
                    out[0] = -1;
                open--;
                continue;
            }
            *n += (size_t)got;
            buf[*n] = '\0';
        }
        if (l->ready && !signalled && count(res->out, l->ready) >= l->nready) {
            if (l->on_ready)
                l->on_ready(res);
            else
                kill(pid, l->sig);
            signalled = 1;
        }
    }
    if (out[0] >= 0)
        close(out[0]);
    if (err[0] >= 0)
        close(err[0]);
    /* Wait for the exit within what is left of the guard. */
    res->status = -1;
    for (;;) {
        if (waitpid(pid, &res->status, WNOHANG) == pid)
            break;
        res->status = -1;
        double left = deadline - now_s();
        if (left <= 0)
            break;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        sigtimedwait(&chld, NULL, &ts);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (res->status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("cdlrun did not finish within %.0f s; stderr: %s", l->guard_s, res->err);
    }
}

static int exit_code(const result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

#define EXPECT_IN(hay, needle) \
    do { if (!strstr(hay, needle)) fail_msg("'%s' not in:\n%s", needle, hay); } while (0)

static void test_contract_and_labels(void **state)
{
    (void)state;
    unsetenv("OMP_NUM_THREADS");
    const char *argv[] = {"-n", "3", "--label", "sh", "-c",
                          "echo \"r=$RANK w=$WORLD_SIZE lr=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE "
                          "g=$GROUP_RANK n=$NODE_RANK nn=$CDL_NNODES a=$MASTER_ADDR "
                          "l=$CDL_LAUNCHER omp=$OMP_NUM_THREADS\"; "
                          "echo \"p=$MASTER_PORT t=$CDL_STORE_TOKEN j=$CDL_JOB_ID\"; "
                          "echo \"e$RANK\" >&2",
                          NULL};
    launch l = {argv, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 0);
    for (int k = 0; k < 3; k++) {
        char want[256];
        snprintf(want, sizeof want, "[%d] r=%d w=3 lr=%d lw=3 g=0 n=0 nn=1 a=127.0.0.1 l=cdlrun omp=",
                 k, k, k);
        EXPECT_IN(r->out, want);
        snprintf(want, sizeof want, "[%d] e%d\n", k, k);
        EXPECT_IN(r->err, want);
    }
    /* Every rank sees the same port, token and job id; the token is set. */
    char first[512] = "";
    for (char *p = r->out; (p = strstr(p, "] p=")); p++) {
        char line[512];
        sscanf(p + 2, "%511[^\n]", line);
        assert_null(strstr(line, "t= "));
        if (!first[0])
            snprintf(first, sizeof first, "%s", line);
        assert_string_equal(line, first);
    }
    assert_true(first[0]);
    cdl_free(r);
}

static void test_omp_threads_kept(void **state)
{
    (void)state;
    setenv("OMP_NUM_THREADS", "7", 1);
    const char *argv[] = {"-n", "2", "sh", "-c", "echo omp=$OMP_NUM_THREADS", NULL};
    launch l = {argv, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(exit_code(r), 0);
    assert_int_equal(count(r->out, "omp=7\n"), 2);
    cdl_free(r);
}

static void test_failing_rank_named(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "3", "sh", "-c",
                          "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 1000", NULL};
    launch l = {argv, 10, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 3);
    EXPECT_IN(r->err, "rank 1 exited with code 3");
    cdl_free(r);
}

static void test_killed_rank_named(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "3", "sh", "-c",
                          "if [ $RANK = 2 ]; then kill -9 $$; fi; exec sleep 1000", NULL};
    launch l = {argv, 10, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 128 + 9);
    EXPECT_IN(r->err, "rank 2 was killed by signal 9");
    cdl_free(r);
}

/* kill -9 of rank 0 once every rank is ready (their pid after "ready"). */
static void kill_rank0(const result *r)
{
    const char *p = strstr(r->out, "[0] ready ");
    assert_non_null(p);
    kill((pid_t)atoi(p + 10), SIGKILL);
}

/* Ranks that ignore SIGTERM are killed: cdlrun finishes within the guard
 * (SIGTERM, then SIGKILL after 3 s). */
static void test_stops_stubborn_ranks(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "3", "--label", "sh", "-c",
                          "trap '' TERM; echo ready $$; while :; do sleep 1; done", NULL};
    launch l = {argv, 8, "ready", 3, 0, kill_rank0};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 128 + 9);
    EXPECT_IN(r->err, "rank 0 was killed by signal 9 (Killed); stopping the other 2 ranks");
    cdl_free(r);
}

/* SIGUSR1 reaches every rank; all exit 75, and so does cdlrun. */
static void test_forwards_usr1_requeue(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "3", "--label", "sh", "-c",
                          "trap 'echo got-usr1; exit 75' USR1; echo ready; "
                          "while :; do sleep 0.05; done",
                          NULL};
    launch l = {argv, 20, "ready", 3, SIGUSR1, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 75);
    assert_int_equal(count(r->out, "got-usr1"), 3);
    cdl_free(r);
}

/* SIGTERM is forwarded too; ranks without a handler die of it. */
static void test_forwards_term(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "2", "sh", "-c", "echo ready; exec sleep 1000", NULL};
    launch l = {argv, 20, "ready", 2, SIGTERM, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 128 + SIGTERM);
    EXPECT_IN(r->err, "was killed by signal 15");
    cdl_free(r);
}

/* Started with SIGINT or SIGHUP ignored (nohup, '&' in a script), cdlrun
 * still forwards them, and ranks die of them (their dispositions reset). */
static void test_forwards_inherited_ignored(void **state)
{
    (void)state;
    static const int sigs[] = {SIGINT, SIGHUP};
    for (int k = 0; k < 2; k++) {
        const char *argv[] = {"-n", "2", "sh", "-c", "echo ready; exec sleep 30", NULL};
        launch l = {argv, 20, "ready", 2, sigs[k], NULL};
        result *r = cdl_calloc(1, sizeof *r);
        start_ignored = sigs[k];
        run_cdlrun(&l, r);
        start_ignored = 0;
        assert_int_equal(exit_code(r), 128 + sigs[k]);
        char want[64];
        snprintf(want, sizeof want, "was killed by signal %d", sigs[k]);
        EXPECT_IN(r->err, want);
        cdl_free(r);
    }
}

/* A process's state letter and parent from /proc; state 0 when it is gone. */
static char proc_state(int pid, int *ppid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *close_paren = strrchr(stat, ')');
    char state = 0;
    if (!close_paren || sscanf(close_paren + 1, " %c %d", &state, ppid) != 2)
        return 0;
    return state;
}

static int rank_pids[2];

/* SIGKILL to cdlrun, found as the parent of the ranks that said "ready PID". */
static void kill_launcher(const result *r)
{
    const char *p = r->out;
    for (int i = 0; i < 2; i++) {
        p = strstr(p, "ready ");
        assert_non_null(p);
        p += 6;
        rank_pids[i] = atoi(p);
    }
    int ppid = 0;
    assert_true(proc_state(rank_pids[0], &ppid) != 0);
    assert_true(ppid > 1);
    kill(ppid, SIGKILL);
}

/* cdlrun SIGKILLed: its ranks die with it. */
static void test_ranks_die_with_cdlrun(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "2", "sh", "-c", "echo ready $$; exec sleep 30", NULL};
    launch l = {argv, 20, "ready ", 2, 0, kill_launcher};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 128 + SIGKILL);
    cdl_free(r);
    /* They held cdlrun's stdout, so run_cdlrun returned once they closed it
     * (or its guard expired). A process closes its files a moment before it
     * becomes a zombie: wait for that, boundedly. */
    int alive = 2, ppid;
    for (double end = now_s() + 10; alive && now_s() < end;) {
        alive = 0;
        for (int i = 0; i < 2; i++) {
            char st = proc_state(rank_pids[i], &ppid);
            alive += st && st != 'Z' && st != 'X';
        }
        if (alive)
            sched_yield();
    }
    for (int i = 0; i < 2 && alive; i++)
        kill(rank_pids[i], SIGKILL);   /* leave nothing behind */
    assert_int_equal(alive, 0);
}

static void test_mixed_requeue_and_success(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "2", "sh", "-c", "exit $((RANK * 75))", NULL};
    launch l = {argv, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 75);
    EXPECT_IN(r->err, "1 of 2 ranks asked to be requeued");
    cdl_free(r);
}

static void test_cannot_exec(void **state)
{
    (void)state;
    const char *argv[] = {"-n", "2", "/nonexistent/program", NULL};
    launch l = {argv, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 127);
    EXPECT_IN(r->err, "cannot run /nonexistent/program");
    cdl_free(r);
}

static void test_usage_errors(void **state)
{
    (void)state;
    const char *no_n[] = {"true", NULL};
    const char *zero[] = {"-n", "0", "true", NULL};
    const char *bind[] = {"-n", "2", "--bind", "sockets", "true", NULL};
    const char *noprog[] = {"-n", "2", NULL};
    /* What no rank would accept as CDL_TIMEOUT is refused here, once. */
    const char *inf[] = {"-n", "2", "--timeout", "1e400", "true", NULL};
    const char *huge_t[] = {"-n", "2", "--timeout", "2e7", "true", NULL};
    /* A long value is echoed cut short. */
    static char longv[20000];
    memset(longv, 'x', sizeof longv - 1);
    const char *longb[] = {"-n", "2", "--bind", longv, "true", NULL};
    const char *const *cases[] = {no_n, zero, bind, noprog, inf, huge_t, longb};
    const char *msgs[] = {"-n N is required", "-n '0'", "--bind 'sockets'", "no PROGRAM",
                          "--timeout '1e400'", "--timeout '2e7'", "xxx...': use auto"};
    for (int k = 0; k < 7; k++) {
        launch l = {cases[k], 20, NULL, 0, 0, NULL};
        result *r = cdl_calloc(1, sizeof *r);
        run_cdlrun(&l, r);
        assert_int_equal(exit_code(r), 2);
        EXPECT_IN(r->err, msgs[k]);
        assert_true(r->nerr < 400);
        cdl_free(r);
    }
}

/* --bind cores: each rank gets its own CPUs (disjoint sets). */
static void test_bind_cores(void **state)
{
    (void)state;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 2)
        skip();
    const char *argv[] = {"-n", "2", "--label", "--bind", "cores", "sh", "-c",
                          "grep Cpus_allowed_list /proc/self/status", NULL};
    launch l = {argv, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 0);
    char a[64] = "", b[64] = "";
    char *p0 = strstr(r->out, "[0] Cpus_allowed_list:"), *p1 = strstr(r->out, "[1] Cpus_allowed_list:");
    assert_non_null(p0);
    assert_non_null(p1);
    sscanf(p0 + 22, " %63s", a);
    sscanf(p1 + 22, " %63s", b);
    assert_string_not_equal(a, b);
    cdl_free(r);
}

/* The allowed-CPU list rank k printed, "" when absent. */
static void allowed_of(const result *r, int k, char out[64])
{
    char tag[32];
    snprintf(tag, sizeof tag, "[%d] Cpus_allowed_list:", k);
    const char *p = strstr(r->out, tag);
    out[0] = '\0';
    if (p)
        sscanf(p + strlen(tag), " %63s", out);
}

/* --bind auto (the default): disjoint CPUs while every rank can have its own
 * core; once ranks outnumber the CPUs, nobody is pinned (each keeps this
 * process's whole mask). */
static void test_bind_auto(void **state)
{
    (void)state;
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
    int cpus = CPU_COUNT(&mine);
    char n_few[16], n_many[16], a[64], b[64], whole[64] = "";
    snprintf(n_few, sizeof n_few, "%d", cpus >= 2 ? 2 : 1);
    snprintf(n_many, sizeof n_many, "%d", cpus + 1);
    const char *few[] = {"-n", n_few, "--label", "sh", "-c",
                         "grep Cpus_allowed_list /proc/self/status", NULL};
    const char *many[] = {"-n", n_many, "--label", "sh", "-c",
                          "grep Cpus_allowed_list /proc/self/status", NULL};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18))
            sscanf(line + 18, " %63s", whole);
    if (f)
        fclose(f);
    assert_true(whole[0]);

    launch l = {many, 20, NULL, 0, 0, NULL};
    result *r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l, r);
    assert_int_equal(exit_code(r), 0);
    for (int k = 0; k <= cpus; k++) {
        allowed_of(r, k, a);
        assert_string_equal(a, whole);
    }
    cdl_free(r);
    if (cpus < 2)
        return;
    launch l2 = {few, 20, NULL, 0, 0, NULL};
    r = cdl_calloc(1, sizeof *r);
    run_cdlrun(&l2, r);
    assert_int_equal(exit_code(r), 0);
    allowed_of(r, 0, a);
    allowed_of(r, 1, b);
    assert_true(a[0] && b[0]);
    assert_string_not_equal(a, b);
    assert_string_not_equal(a, whole);
    cdl_free(r);
}

int main(void)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract_and_labels),
        cmocka_unit_test(test_omp_threads_kept),
        cmocka_unit_test(test_failing_rank_named),
        cmocka_unit_test(test_killed_rank_named),
        cmocka_unit_test(test_stops_stubborn_ranks),
        cmocka_unit_test(test_forwards_usr1_requeue),
        cmocka_unit_test(test_forwards_term),
        cmocka_unit_test(test_forwards_inherited_ignored),
        cmocka_unit_test(test_ranks_die_with_cdlrun),
        cmocka_unit_test(test_mixed_requeue_and_success),
        cmocka_unit_test(test_cannot_exec),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_bind_cores),
        cmocka_unit_test(test_bind_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
