/* The per-step MPS daemon lifecycle against the fake control program
 * (tests/slurm/fake-mps-control): directories, one daemon for all tasks,
 * started as the user with a clean environment, answered before any task
 * goes on, stopped by the last task, cleaned up after a crash.
 *
 * Needs root (the directories are handed to another user); skipped
 * otherwise. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "spank/conf.h"
#include "spank/mps.h"

static char tmp[64], bindir[128], control[192], records[192], runtime[128];
static const struct spk_cred nobody = {65534, 65534, 1, {65534}};

static int copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    ssize_t n;
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (in < 0 || out < 0)
        return -1;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            return -1;
    close(in);
    close(out);
    return chmod(to, mode);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static int setup(void **state)
{
    (void)state;
    char fake[512];
    const char *top = getenv("top_builddir");
    if (getuid() != 0)
        return 0;
    snprintf(tmp, sizeof tmp, "/tmp/cdl-mps-XXXXXX");
    if (!mkdtemp(tmp))
        return -1;
    chmod(tmp, 0755);
    snprintf(bindir, sizeof bindir, "%s/bin", tmp);
    snprintf(control, sizeof control, "%s/nvidia-cuda-mps-control", bindir);
    snprintf(records, sizeof records, "%s/mps-records", bindir);
    snprintf(runtime, sizeof runtime, "%s/run", tmp);
    snprintf(fake, sizeof fake, "%s/tests/slurm/fake-mps-control", top && *top ? top : ".");
    if (mkdir(bindir, 0755) || mkdir(records, 0777) || chmod(records, 01777) ||
        copy_file(fake, control, 0755))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tmp[0] && getuid() == 0 ? test_rm_rf(tmp) : 0;
}

static void clear_records(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/rec.*", records);
    assert_int_equal(system(cmd), 0);
}

/* Concatenation of the record files whose mode= line is `mode`; count. */
static int find_records(const char *mode, char *out, size_t len)
{
    DIR *d = opendir(records);
    struct dirent *e;
    char want[300];
    int n = 0;
    snprintf(want, sizeof want, "mode=%s\n", mode);
    if (out)
        out[0] = '\0';
    while (d && (e = readdir(d)) != NULL) {
        char path[512], buf[16384];
        if (strncmp(e->d_name, "rec.", 4))
            continue;
        snprintf(path, sizeof path, "%s/%s", records, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        if (strncmp(buf, want, strlen(want)))
            continue;
        n++;
        if (out && strlen(out) + k + 1 < len)
            strcat(out, buf);
    }
    if (d)
        closedir(d);
    return n;
}

static void conf_for(struct spk_conf *c, const char *ctl, int timeout)
{
    char a[256], b[256], t[32];
    snprintf(a, sizeof a, "mps_control=%s", ctl);
    snprintf(b, sizeof b, "runtime_dir=%s", runtime);
    snprintf(t, sizeof t, "mps_timeout=%d", timeout);
    char *av[] = {a, b, t};
    assert_int_equal(spk_conf_parse(c, 3, av), 0);
}

static void expect_dir(const char *path, uid_t uid, mode_t mode)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_uid, uid);
    assert_int_equal(st.st_mode & 07777, mode);
}

static int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Runs spk_mps_task_start in `n` forked children (the task children of
 * slurmstepd); returns how many succeeded. */
static int start_tasks(struct spk_mps *m, int n)
{
    pid_t pids[16];
    int ok = 0;
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(spk_mps_task_start(m) == 0 ? 0 : 1);
    }
    for (int i = 0; i < n; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    return ok;
}

static pid_t daemon_pid(const struct spk_rundir *rd)
{
    char path[700];
    snprintf(path, sizeof path, "%s/nvidia-cuda-mps-control.pid", rd->pipe_dir);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

static int alive(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int z = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "State:", 6))
            z = strchr(line, 'Z') != NULL;
    fclose(f);
    return !z;
}

static void test_lifecycle(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_conf c;
    struct spk_rundir rd;
    struct spk_mps m;
    char rec[65536];
    clear_records();
    conf_for(&c, control, 10);
    setenv("LD_PRELOAD", "/nonexistent/evil.so", 1);   /* must not reach the daemon */
    assert_int_equal(spk_rundir_init(&rd, runtime, 77, 0, "n1"), 0);
    assert_string_equal(rd.key, "77.0.n1");
    assert_int_equal(spk_mps_setup(&m, &c, &rd, &nobody, "0,1", 3), 0);
    expect_dir(runtime, 0, 0755);
    expect_dir(rd.step_dir, 65534, 0700);
    expect_dir(rd.pipe_dir, 65534, 0700);
    expect_dir(rd.log_dir, 65534, 0700);

    assert_int_equal(start_tasks(&m, 3), 3);
    unsetenv("LD_PRELOAD");
    assert_true(spk_mps_running(&m));
    /* One daemon for the three tasks, run as nobody with only our variables. */
    assert_int_equal(find_records("start", NULL, 0), 1);
    assert_int_equal(find_records("daemon", rec, sizeof rec), 1);
    assert_non_null(strstr(rec, "uid=65534\neuid=65534\nsuid=65534\ngid=65534\negid=65534\n"
                                "sgid=65534\ngroups=65534\n"));
    assert_non_null(strstr(rec, "\ncwd=/\n"));
    assert_non_null(strstr(rec, "\numask=077\n"));
    assert_non_null(strstr(rec, "NoNewPrivs:\t1"));
    assert_non_null(strstr(rec, "\nfds=0,1,2\n"));
    char want[2048];
    snprintf(want, sizeof want,
             "env=PATH=%s:/usr/sbin:/usr/bin:/sbin:/bin\nenv=CUDA_MPS_PIPE_DIRECTORY=%s\n"
             "env=CUDA_MPS_LOG_DIRECTORY=%s\nenv=CUDA_VISIBLE_DEVICES=0,1\n",
             bindir, rd.pipe_dir, rd.log_dir);
    assert_non_null(strstr(rec, want));
    assert_int_equal((int)(strstr(rec, "env=") - rec) + (int)strlen(want), (int)strlen(rec));
    pid_t pid = daemon_pid(&rd);
    assert_true(pid > 1 && alive(pid));

    /* The first two exits leave the daemon running; the last one stops it. */
    assert_int_equal(spk_mps_task_exit(&m), 0);
    assert_int_equal(spk_mps_task_exit(&m), 0);
    assert_true(alive(pid));
    assert_int_equal(find_records("cmd:quit", NULL, 0), 0);
    assert_int_equal(spk_mps_task_exit(&m), 0);
    assert_int_equal(find_records("cmd:quit", rec, sizeof rec), 1);
    assert_non_null(strstr(rec, "uid=65534\n"));
    assert_false(alive(pid));
    assert_false(spk_mps_running(&m));
    assert_int_equal(spk_mps_teardown(&m), 0);
    assert_false(path_exists(rd.step_dir));
    expect_dir(runtime, 0, 0755);
}

/* A daemon slow to listen: tasks return only once it answers. */
static void test_waits_for_answer(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_conf c;
    struct spk_rundir rd;
    struct spk_mps m;
    char delay[256];
    clear_records();
    snprintf(delay, sizeof delay, "%s/mps-delay-ms", bindir);
    write_file(delay, "400\n", 0644);
    conf_for(&c, control, 10);
    assert_int_equal(spk_rundir_init(&rd, runtime, 78, 2, "n2"), 0);
    assert_int_equal(spk_mps_setup(&m, &c, &rd, &nobody, "", 2), 0);
    assert_int_equal(start_tasks(&m, 2), 2);
    unlink(delay);
    /* Right after: the daemon answers a client. */
    char ctl[700];
    snprintf(ctl, sizeof ctl, "%s/control", rd.pipe_dir);
    assert_true(path_exists(ctl));
    assert_true(find_records("cmd:get_server_list", NULL, 0) >= 1);
    assert_int_equal(spk_mps_teardown(&m), 0);   /* tasks never exited: exit hook stops it */
    assert_int_equal(find_records("cmd:quit", NULL, 0), 1);
    assert_false(path_exists(rd.step_dir));
}

/* A control program that fails: every task fails with its message, and it
 * is started once only. */
static void test_start_failure_shared(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_conf c;
    struct spk_rundir rd;
    struct spk_mps m;
    char bad[256], mark[256];
    snprintf(bad, sizeof bad, "%s/failing-control", bindir);
    snprintf(mark, sizeof mark, "%s/starts", records);
    char script[512];
    snprintf(script, sizeof script,
             "#!/bin/sh\necho start >> %s\necho 'An instance of this daemon is already "
             "running' >&2\nexit 1\n", mark);
    write_file(bad, script, 0755);
    conf_for(&c, bad, 5);
    assert_int_equal(spk_rundir_init(&rd, runtime, 79, 0, "n1"), 0);
    assert_int_equal(spk_mps_setup(&m, &c, &rd, &nobody, "0", 2), 0);
    assert_int_equal(spk_mps_task_start(&m), -1);
    assert_non_null(strstr(spk_last_error(), "already running"));
    spk_clear_error();
    assert_int_equal(spk_mps_task_start(&m), -1);
    assert_non_null(strstr(spk_last_error(), "already running"));
    FILE *f = fopen(mark, "r");
    char line[64];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n++;
    if (f)
        fclose(f);
    assert_int_equal(n, 1);
    unlink(mark);
    assert_int_equal(spk_mps_teardown(&m), 0);
    assert_false(path_exists(rd.step_dir));
}

/* A daemon that ignores quit is killed (as the user) by the last task. */
static void test_ignores_quit(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_conf c;
    struct spk_rundir rd;
    struct spk_mps m;
    char stubborn[256];
    snprintf(stubborn, sizeof stubborn, "%s/stubborn-control", bindir);
    write_file(stubborn,
               "#!/bin/sh\ncase \"$1\" in\n-d) /bin/sleep 300 </dev/null >/dev/null 2>&1 &\n"
               "   echo $! > \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"; exit 0;;\n"
               "*) cat >/dev/null; exit 0;;\nesac\n", 0755);
    conf_for(&c, stubborn, 1);
    assert_int_equal(spk_rundir_init(&rd, runtime, 80, 0, "n1"), 0);
    assert_int_equal(spk_mps_setup(&m, &c, &rd, &nobody, "0", 1), 0);
    assert_int_equal(spk_mps_task_start(&m), 0);
    pid_t pid = daemon_pid(&rd);
    assert_true(pid > 1 && alive(pid));
    assert_int_equal(spk_mps_task_exit(&m), 0);
    assert_false(alive(pid));
    assert_int_equal(spk_mps_teardown(&m), 0);
}

struct found {
    char key[128];
    uid_t uid;
    int n;
};

static int cb(const char *key, uid_t uid, gid_t gid, void *arg)
{
    struct found *f = arg;
    (void)gid;
    snprintf(f->key, sizeof f->key, "%s", key);
    f->uid = uid;
    f->n++;
    return 0;
}

/* slurmstepd died: the epilog finds the job's directory and cleans up. */
static void test_epilog_cleanup(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_conf c;
    struct spk_rundir rd, other;
    struct spk_mps m;
    clear_records();
    conf_for(&c, control, 10);
    assert_int_equal(spk_rundir_init(&rd, runtime, 81, 5, "n1"), 0);
    assert_int_equal(spk_mps_setup(&m, &c, &rd, &nobody, "0", 1), 0);
    assert_int_equal(spk_rundir_init(&other, runtime, 811, 0, "n1"), 0);
    assert_int_equal(spk_rundir_create(&other, runtime, 65534, 65534), 0);
    assert_int_equal(spk_mps_task_start(&m), 0);
    pid_t pid = daemon_pid(&rd);
    assert_true(alive(pid));
    /* No task_exit, no teardown: as after a SIGKILL of slurmstepd. */
    struct found f = {"", 0, 0};
    assert_int_equal(spk_rundir_each_of_job(runtime, 81, cb, &f), 1);
    assert_string_equal(f.key, "81.5.n1");   /* not job 811's */
    assert_int_equal(f.uid, 65534);
    assert_int_equal(spk_mps_cleanup(&c, f.key, &nobody), 0);
    assert_false(alive(pid));
    assert_false(path_exists(rd.step_dir));
    assert_true(path_exists(other.step_dir));
    assert_int_equal(spk_rundir_remove(runtime, other.key), 0);
    assert_int_equal(find_records("cmd:quit", NULL, 0), 1);
}

/* Links the user plants in the step directory do not redirect root. */
static void test_hostile_tree(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    struct spk_rundir rd;
    char victim[256], p[900];
    snprintf(victim, sizeof victim, "%s/victim", tmp);
    write_file(victim, "keep me\n", 0644);
    mkdir(runtime, 0755);
    assert_int_equal(spk_rundir_init(&rd, runtime, 82, 0, "n1"), 0);
    assert_int_equal(spk_rundir_create(&rd, runtime, 65534, 65534), 0);
    snprintf(p, sizeof p, "%s/pipe/link-to-victim", rd.step_dir);
    assert_int_equal(symlink(victim, p), 0);
    snprintf(p, sizeof p, "%s/log/link-to-tmp", rd.step_dir);
    assert_int_equal(symlink(tmp, p), 0);
    snprintf(p, sizeof p, "%s/log/a", rd.step_dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/log/a/b", rd.step_dir);
    mkdir(p, 0700);
    /* A stale directory of the same key is replaced on create... */
    assert_int_equal(spk_rundir_create(&rd, runtime, 65534, 65534), 0);
    assert_true(path_exists(victim));
    snprintf(p, sizeof p, "%s/pipe", rd.step_dir);
    expect_dir(p, 65534, 0700);
    /* ...and removed with links, not their targets. */
    snprintf(p, sizeof p, "%s/pipe/link", rd.step_dir);
    assert_int_equal(symlink("/", p), 0);
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(path_exists(rd.step_dir));
    assert_true(path_exists(victim));
    assert_true(path_exists(bindir));
    assert_int_equal(spk_rundir_remove(runtime, "../etc"), -1);
    assert_int_equal(spk_rundir_init(&rd, runtime, 1, 0, "../n1"), -1);
    assert_int_equal(spk_rundir_init(&rd, runtime, 1, 0, "n/1"), -1);
}

static void test_runtime_dir_checked(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    char p[256], l[256];
    snprintf(p, sizeof p, "%s/open-run", tmp);
    mkdir(p, 0777);
    chmod(p, 0777);
    assert_int_equal(spk_rundir_check_root(p), -1);
    assert_non_null(strstr(spk_last_error(), "writable by everyone"));
    snprintf(l, sizeof l, "%s/link-run", tmp);
    assert_int_equal(symlink(runtime, l), 0);
    assert_int_equal(spk_rundir_check_root(l), -1);
    assert_non_null(strstr(spk_last_error(), "symbolic link"));
    snprintf(p, sizeof p, "%s/new-run", tmp);
    assert_int_equal(spk_rundir_check_root(p), 0);
    expect_dir(p, 0, 0755);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_waits_for_answer),
        cmocka_unit_test(test_start_failure_shared),
        cmocka_unit_test(test_ignores_quit),
        cmocka_unit_test(test_epilog_cleanup),
        cmocka_unit_test(test_hostile_tree),
        cmocka_unit_test(test_runtime_dir_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
