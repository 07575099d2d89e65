/* The per-step MPS control daemon (see mps.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spank/mps.h"

enum { MPS_IDLE = 0, MPS_RUNNING, MPS_FAILED, MPS_STOPPED };

struct spk_mps_shared {
    pthread_mutex_t lock;    /* robust, process-shared */
    int state;
    int tasks_left;          /* local tasks that have not exited yet */
    pid_t pid;               /* the control daemon, 0 if unknown */
    char error[768];         /* why the start failed, for every task */
};

/* The daemon's whole environment: nothing from slurmstepd or the job. */
struct mps_env {
    char path[SPK_PATH_MAX + 64], pipe[SPK_PATH_MAX + 32], log[SPK_PATH_MAX + 32],
        cvd[1100];
    char *envp[5];
};

static void mps_env(struct mps_env *e, const char *control, const struct spk_rundir *rd,
                    const char *visible)
{
    int n = 0;
    const char *slash = strrchr(control, '/');
    /* The control daemon starts nvidia-cuda-mps-server from its own folder. */
    snprintf(e->path, sizeof e->path, "PATH=%.*s:/usr/sbin:/usr/bin:/sbin:/bin",
             slash && slash != control ? (int)(slash - control) : 1, control);
    snprintf(e->pipe, sizeof e->pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", rd->pipe_dir);
    snprintf(e->log, sizeof e->log, "CUDA_MPS_LOG_DIRECTORY=%s", rd->log_dir);
    e->envp[n++] = e->path;
    e->envp[n++] = e->pipe;
    e->envp[n++] = e->log;
    if (visible && *visible) {
        snprintf(e->cvd, sizeof e->cvd, "CUDA_VISIBLE_DEVICES=%s", visible);
        e->envp[n++] = e->cvd;
    }
    e->envp[n] = NULL;
}

/* Runs the control binary with `input` on stdin (a command such as "quit")
 * or with `arg` ("-d"). Returns 0 when it exited 0. Every run checks the
 * binary (spawn.h): the epilog and teardown run it too, not only the start. */
static int control_run(const char *control, const struct spk_rundir *rd, const char *visible,
                       const struct spk_cred *cred, const char *arg, const char *input,
                       double timeout_s, char *out, size_t outlen)
{
    struct mps_env e;
    char *argv[3] = {(char *)control, (char *)arg, NULL};
    char real[SPK_PATH_MAX];
    int status = 0;
    if (spk_admin_binary_resolve("mps_control", control, real, sizeof real) != 0)
        return -1;
    mps_env(&e, control, rd, visible);
    struct spk_cmd cmd = {
        .path = real, .argv = argv, .envp = e.envp, .input = input,
        .output = out, .output_len = outlen, .cwd = "/", .timeout_s = timeout_s,
    };
    if (spk_spawn(cred, &cmd, &status) != 0)
        return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        size_t n = out ? strlen(out) : 0;
        while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
            out[--n] = '\0';
        return spk_error("%s%s%s%s exited with %s %d%s%s", control, arg ? " " : "",
                         arg ? arg : "", input ? " (command on stdin)" : "",
                         WIFEXITED(status) ? "status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                         n ? ": " : "", n ? out : "");
    }
    return 0;
}

/* The daemon's pid from its pid file in the user's pipe directory. The file
 * is the user's: no link is followed on the way (pipe/ may have been
 * replaced by one), it must be a regular file, and the value is only used
 * to wait and to signal as the user. */
static pid_t read_pidfile(const struct spk_rundir *rd)
{
    char buf[24];
    long v;
    struct stat st;
    int dir = spk_rundir_open_sub(rd, "pipe");
    if (dir < 0)
        return 0;
    /* Not through a mount point of the user's either (a FUSE mount there
     * could keep root's open or read waiting forever). */
    int fd = spk_open_beneath(dir, "nvidia-cuda-mps-control.pid", 0);
    close(dir);
    if (fd < 0)
        return 0;
    ssize_t k = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : 0;
    close(fd);
    if (k <= 0)
        return 0;
    buf[k] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return spk_parse_uint(buf, 2, 1 << 22, &v) == 0 ? (pid_t)v : 0;
}

/* 1 when the daemon's control pipe exists, looked up without following a
 * link (the user owns pipe/). */
static int has_control(const struct spk_rundir *rd)
{
    struct statx sx;
    int dir = spk_rundir_open_sub(rd, "pipe");
    if (dir < 0)
        return 0;
    /* From the kernel's cache: a FUSE mount there is asked nothing. */
    int found = statx(dir, "control", AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
                      STATX_TYPE, &sx) == 0;
    close(dir);
    return found;
}

/* 1 when pid is a live (not zombie) process of uid. */
static int alive_as(pid_t pid, uid_t uid)
{
    char path[64], line[256];
    int state_ok = 0, uid_ok = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned r;
        char st;
        if (sscanf(line, "State: %c", &st) == 1)
            state_ok = st != 'Z' && st != 'X';
        else if (sscanf(line, "Uid: %u", &r) == 1)
            uid_ok = r == (unsigned)uid;
    }
    fclose(f);
    return state_ok && uid_ok;
}

/* Waits until pid is gone (exited or zombie), at most timeout_s. */
static int wait_gone(pid_t pid, uid_t uid, double timeout_s)
{
    double deadline = spk_now_s() + timeout_s;
#ifdef SYS_pidfd_open
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        while (alive_as(pid, uid)) {
            double left = deadline - spk_now_s();
            if (left <= 0)
                break;
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            if (poll(&p, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
                break;
        }
        close(pfd);
        return alive_as(pid, uid) ? -1 : 0;
    }
#endif
    while (alive_as(pid, uid) && spk_now_s() < deadline) {
        struct timespec ts = {0, 10 * 1000 * 1000};   /* no pidfd: poll /proc */
        nanosleep(&ts, NULL);
    }
    return alive_as(pid, uid) ? -1 : 0;
}

static int kill_fn(void *arg)
{
    return kill(*(pid_t *)arg, SIGKILL) == 0 ? 0 : 1;
}

static int stop_daemon(const char *control, const struct spk_rundir *rd,
                       const struct spk_cred *cred, double timeout_s, pid_t pid)
{
    char out[256];
    if (pid <= 0)
        pid = read_pidfile(rd);
    if (has_control(rd) || (pid > 0 && alive_as(pid, cred->uid)))
        if (control_run(control, rd, NULL, cred, NULL, "quit\n", timeout_s, out, sizeof out))
            spk_log("cdl: MPS quit in %s: %s", rd->step_dir, spk_last_error());
    if (pid > 0 && wait_gone(pid, cred->uid, timeout_s) != 0) {
        spk_log("cdl: MPS daemon %d in %s ignored quit; killing it", (int)pid, rd->step_dir);
        spk_run_as(cred, kill_fn, &pid, timeout_s);
        if (wait_gone(pid, cred->uid, 2.0) != 0)
            return spk_error("MPS control daemon %d of %s survives SIGKILL", (int)pid, rd->key);
    }
    return 0;
}

/* Starts the daemon and returns once it answers a query. */
static int start_daemon(struct spk_mps *m)
{
    char out[512];
    double deadline = spk_now_s() + m->timeout_s;
    int ino, rc = -1;
    /* Watch the pipe directory before starting: the daemon's control pipe
     * appearing there is the event to wake up for (no sleeping). */
    ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    /* The directory checked by spk_rundir_open_sub, named through its
     * descriptor: pipe/ is the user's, and a path would be looked up again
     * (through a link or a mount put there meanwhile). */
    int pipe_fd = ino >= 0 ? spk_rundir_open_sub(&m->rd, "pipe") : -1;
    char watched[64];
    snprintf(watched, sizeof watched, "/proc/self/fd/%d", pipe_fd);
    if (ino >= 0 && (pipe_fd < 0 || inotify_add_watch(ino, watched, IN_CREATE | IN_MOVED_TO |
                                                      IN_CLOSE_WRITE | IN_ATTRIB) < 0)) {
        close(ino);
        ino = -1;
    }
    if (pipe_fd >= 0)
        close(pipe_fd);
    if (control_run(m->control, &m->rd, m->visible, &m->cred, "-d", NULL, m->timeout_s, out,
                    sizeof out) != 0) {
        spk_error("cannot start the MPS control daemon: %s", spk_last_error());
        goto out;
    }
    for (;;) {
        double left = deadline - spk_now_s();
        if (left <= 0) {
            spk_error("the MPS control daemon in %s did not answer within %.0f s (logs in %s)",
                      m->rd.pipe_dir, m->timeout_s, m->rd.log_dir);
            goto out;
        }
        if (control_run(m->control, &m->rd, m->visible, &m->cred, NULL, "get_server_list\n",
                        left, out, sizeof out) == 0)
            break;
        /* Not up yet: wait for the next change in the pipe directory, with
         * a 50 ms ceiling in case the daemon listens after creating it. */
        struct pollfd p = {.fd = ino, .events = POLLIN};
        int ms = left < 0.05 ? (int)(left * 1000) + 1 : 50;
        if (poll(&p, ino >= 0 ? 1 : 0, ms) > 0) {
            char buf[4096];
            while (read(ino, buf, sizeof buf) > 0)
                ;
        }
    }
    m->sh->pid = read_pidfile(&m->rd);
    rc = 0;
out:
    if (ino >= 0)
        close(ino);
    if (rc != 0) /* a half-started daemon must not outlive the failure */
        stop_daemon(m->control, &m->rd, &m->cred, 2.0, 0);
    return rc;
}

static int lock_shared(struct spk_mps *m)
{
    struct timespec ts;
    time_t wait_s = (time_t)(3 * m->timeout_s) + 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += wait_s;
    int rc = pthread_mutex_timedlock(&m->sh->lock, &ts);
    if (rc == EOWNERDEAD) {
        /* A task died holding the lock (killed while starting the daemon):
         * take over; a half-started daemon is stopped and started again. */
        if (m->sh->state == MPS_IDLE)
            stop_daemon(m->control, &m->rd, &m->cred, 2.0, 0);
        pthread_mutex_consistent(&m->sh->lock);
        return 0;
    }
    if (rc == ETIMEDOUT)
        return spk_error("cannot take the MPS lock of %s within %lld s: another task of this "
                         "step is still starting or stopping the MPS daemon (see that task's "
                         "error; raise mps_timeout in plugstack.conf if the daemon needs longer)",
                         m->rd.key, (long long)wait_s);
    if (rc != 0)
        return spk_error("cannot take the MPS lock of %s: %s", m->rd.key, strerror(rc));
    return 0;
}

int spk_mps_setup(struct spk_mps *m, const struct spk_conf *conf, const struct spk_rundir *rd,
                  const struct spk_cred *cred, const char *visible, int local_tasks)
{
    pthread_mutexattr_t a;
    memset(m, 0, sizeof *m);
    m->rd = *rd;
    m->cred = *cred;
    m->timeout_s = conf->mps_timeout_s;
    if (spk_copy(m->runtime_dir, sizeof m->runtime_dir, conf->runtime_dir) ||
        spk_copy(m->control, sizeof m->control, conf->mps_control) ||
        spk_copy(m->visible, sizeof m->visible, visible ? visible : ""))
        return spk_error("MPS settings are too long");
    if (spk_rundir_check_root(conf->runtime_dir) != 0 ||
        spk_rundir_create(rd, conf->runtime_dir, cred->uid, cred->gid) != 0)
        return -1;
    m->sh = mmap(NULL, sizeof *m->sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m->sh == MAP_FAILED) {
        m->sh = NULL;
        spk_rundir_remove(conf->runtime_dir, rd->key);
        return spk_error("mmap of the MPS state: %s", strerror(errno));
    }
    memset(m->sh, 0, sizeof *m->sh);
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m->sh->lock, &a);
    pthread_mutexattr_destroy(&a);
    m->sh->state = MPS_IDLE;
    m->sh->tasks_left = local_tasks;
    return 0;
}

int spk_mps_task_start(struct spk_mps *m)
{
    int rc = 0;
    if (!m->sh)
        return spk_error("MPS state was not set up for this step");
    if (lock_shared(m) != 0)
        return -1;
    switch (m->sh->state) {
    case MPS_RUNNING:
        break;
    case MPS_FAILED:
        rc = spk_error("%s", m->sh->error);
        break;
    default:
        if (start_daemon(m) == 0) {
            m->sh->state = MPS_RUNNING;
        } else {
            snprintf(m->sh->error, sizeof m->sh->error, "%s", spk_last_error());
            m->sh->state = MPS_FAILED;
            rc = -1;
        }
    }
    pthread_mutex_unlock(&m->sh->lock);
    return rc;
}

int spk_mps_task_exit(struct spk_mps *m)
{
    int rc = 0;
    if (!m->sh)
        return 0;
    if (lock_shared(m) != 0)
        return -1;
    if (--m->sh->tasks_left <= 0 && m->sh->state == MPS_RUNNING) {
        rc = stop_daemon(m->control, &m->rd, &m->cred, m->timeout_s, m->sh->pid);
        m->sh->state = MPS_STOPPED;
    }
    pthread_mutex_unlock(&m->sh->lock);
    return rc;
}

int spk_mps_teardown(struct spk_mps *m)
{
    int rc = 0;
    if (m->sh) {
        if (lock_shared(m) == 0) {
            if (m->sh->state == MPS_RUNNING || m->sh->state == MPS_FAILED)
                rc = stop_daemon(m->control, &m->rd, &m->cred, m->timeout_s, m->sh->pid);
            m->sh->state = MPS_STOPPED;
            pthread_mutex_unlock(&m->sh->lock);
        } else {
            rc = stop_daemon(m->control, &m->rd, &m->cred, m->timeout_s, 0);
        }
        munmap(m->sh, sizeof *m->sh);
        m->sh = NULL;
    }
    if (m->rd.key[0] && spk_rundir_remove(m->runtime_dir, m->rd.key) != 0)
        rc = -1;
    return rc;
}

int spk_mps_running(const struct spk_mps *m)
{
    return m->sh && m->sh->state == MPS_RUNNING;
}

int spk_mps_cleanup(const struct spk_conf *conf, const char *key, const struct spk_cred *cred)
{
    struct spk_rundir rd;
    if (spk_rundir_from_key(&rd, conf->runtime_dir, key) != 0)
        return -1;
    int rc = stop_daemon(conf->mps_control, &rd, cred, conf->mps_timeout_s, 0);
    if (spk_rundir_remove(conf->runtime_dir, key) != 0)
        rc = -1;
    return rc;
}
