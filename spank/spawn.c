/* Running helpers as the job user (see spawn.h).
 *
 * slurmstepd is multi-threaded, so between fork() and execve() the child
 * only makes async-signal-safe calls: everything it needs (argv, envp,
 * credentials) is prepared by the parent. Failures in the child are sent
 * back as (stage, errno) over a close-on-exec pipe; EOF on it means execve
 * succeeded. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spank/spawn.h"
#include "spank/util.h"

enum stage {
    ST_FORK_OK = 0, ST_SETSID, ST_STDIO, ST_FDS, ST_SETGROUPS, ST_SETGID, ST_SETUID,
    ST_REGAIN, ST_NNP, ST_CHDIR, ST_EXEC,
};
static const char *const stage_name[] = {
    "fork", "setsid", "stdio", "closing descriptors", "setgroups", "setresgid", "setresuid",
    "privilege check (root could be regained)", "no_new_privs", "chdir", "execve",
};

struct child_err {
    int stage, err;
};

static void child_fail(int fd, int stage)
{
    struct child_err e = {stage, errno};
    ssize_t w = write(fd, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* Closes every descriptor >= lowfd: close_range() where the kernel has it,
 * else one close() per possible descriptor number. */
static void close_from(int lowfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = lowfd; fd < max; fd++)
        close(fd);
}

/* Child side up to (not including) execve: only async-signal-safe calls. */
static void child_setup(const struct spk_cred *cred, const char *cwd, int in_fd, int out_fd,
                        int err_fd)
{
    struct sigaction sa;
    sigset_t none;
    int fd;

    /* Move our three descriptors out of the way of 0..3 first. */
    err_fd = fcntl(err_fd, F_DUPFD_CLOEXEC, 10);
    if (err_fd < 0)
        _exit(127);
    if (in_fd >= 0 && (in_fd = fcntl(in_fd, F_DUPFD, 10)) < 0)
        child_fail(err_fd, ST_STDIO);
    if (out_fd >= 0 && (out_fd = fcntl(out_fd, F_DUPFD, 10)) < 0)
        child_fail(err_fd, ST_STDIO);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        sigaction(s, &sa, NULL);   /* fails harmlessly for KILL, STOP, RT internals */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    if (setsid() < 0)
        child_fail(err_fd, ST_SETSID);

    /* Undo slurmstepd's OOM protection: a helper must be killable. */
    fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t w = write(fd, "0", 1);
        (void)w;
        close(fd);
    }

    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        child_fail(err_fd, ST_STDIO);
    if (dup2(in_fd >= 0 ? in_fd : devnull, 0) < 0 || dup2(out_fd >= 0 ? out_fd : devnull, 1) < 0 ||
        dup2(out_fd >= 0 ? out_fd : devnull, 2) < 0)
        child_fail(err_fd, ST_STDIO);
    if (dup2(err_fd, 3) < 0 || fcntl(3, F_SETFD, FD_CLOEXEC) < 0)
        child_fail(err_fd, ST_FDS);
    err_fd = 3;
    close_from(4);

    if (geteuid() != 0) {
        /* Unprivileged caller (unit tests): nothing to drop, but the
         * credentials asked for must be the ones we already have. */
        if (cred->uid != getuid() || cred->gid != getgid()) {
            errno = EPERM;
            child_fail(err_fd, ST_SETUID);
        }
    } else {
        if (cred->ngroups > 0 ? setgroups((size_t)cred->ngroups, cred->groups) < 0
                              : setgroups(1, &cred->gid) < 0)
            child_fail(err_fd, ST_SETGROUPS);
        if (setresgid(cred->gid, cred->gid, cred->gid) < 0)
            child_fail(err_fd, ST_SETGID);
        if (setresuid(cred->uid, cred->uid, cred->uid) < 0)
            child_fail(err_fd, ST_SETUID);
    }
    if (cred->uid != 0) {
        uid_t r, e, s;
        gid_t rg, eg, sg;
        if (setuid(0) == 0 || seteuid(0) == 0 || setgid(0) == 0 ||
            getresuid(&r, &e, &s) < 0 || r != cred->uid || e != cred->uid || s != cred->uid ||
            getresgid(&rg, &eg, &sg) < 0 || rg != cred->gid || eg != cred->gid ||
            sg != cred->gid) {
            errno = EPERM;
            child_fail(err_fd, ST_REGAIN);
        }
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(err_fd, ST_NNP);
    umask(077);
    if (chdir(cwd ? cwd : "/") < 0)
        child_fail(err_fd, ST_CHDIR);
}

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Appends k bytes of buf to out[outlen] (NUL-terminated, excess dropped). */
static void append_out(char *out, size_t outlen, size_t *used, const char *buf, size_t k)
{
    if (!out || *used + 1 >= outlen)
        return;
    size_t c = k < outlen - 1 - *used ? k : outlen - 1 - *used;
    memcpy(out + *used, buf, c);
    *used += c;
    out[*used] = '\0';
}

int spk_spawn_kill_signal = SIGKILL;
double spk_spawn_reap_grace_s = 5.0;

/* Reaps pid, killed a moment ago, waiting at most grace_s: SIGKILL takes
 * effect only when the process next leaves the kernel, and one stuck in an
 * uninterruptible wait (state D: a read on a hung NFS or FUSE mount of the
 * user's, a chdir into one) may never do so. Root in slurmstepd or the
 * epilog must not wait for that without bound. Returns 1 when reaped (with
 * *status), 0 when the process is still there. */
static int reap_bounded(pid_t pid, int pfd, double grace_s, int *status)
{
    double deadline = spk_now_s() + grace_s;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD))
            return 1;
        if (w < 0 && errno != EINTR)
            return 1;   /* not ours to wait for: nothing left to do */
        double left = deadline - spk_now_s();
        if (left <= 0)
            return 0;
        if (pfd >= 0) {
            /* The pidfd becomes readable when the process exits. */
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            poll(&p, 1, (int)(left * 1000) + 1);
        } else {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* The child's stdin: what is left to send on a non-blocking socket. */
struct child_in {
    int fd;               /* -1: nothing (left) to send */
    const char *buf;
    size_t len, off;
};

/* Sends what the socket takes now; at the end (or when the helper will not
 * take more: it exited or closed its stdin) the socket is closed, which is
 * the helper's EOF. */
static void feed_child(struct child_in *in)
{
    while (in->off < in->len) {
        ssize_t k = send(in->fd, in->buf + in->off, in->len - in->off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;   /* full: poll() says when it drains */
        if (k <= 0) {
            in->len = in->off;   /* the helper left early; its exit status tells */
            break;
        }
        in->off += (size_t)k;
    }
    close(in->fd);
    in->fd = -1;
}

/* Waits for the child to exit (or the deadline), feeding its stdin (in,
 * may be NULL) and collecting its output and the exec report. Nothing here
 * blocks: a helper that reads neither its input nor lets go of its output
 * is killed at the deadline like any other. Returns 0 with *status; -1 on
 * timeout (child killed and reaped, *status its end); -2 on timeout when
 * the killed child did not go within spk_spawn_reap_grace_s (left behind,
 * *status untouched). */
static int wait_child(pid_t pid, int err_fd, struct child_in *in, int out_fd, char *out,
                      size_t outlen, double deadline, int *status, struct child_err *cerr,
                      int *have_cerr)
{
    size_t used = 0;
    int pfd = pidfd_of(pid);
    int exited = 0;
    *have_cerr = 0;
    if (out && outlen)
        out[0] = '\0';
    if (in && in->fd >= 0)
        feed_child(in);
    for (;;) {
        struct pollfd fds[4];
        int n = 0, idx_err = -1, idx_out = -1, idx_pid = -1, idx_in = -1;
        if (in && in->fd >= 0) {
            fds[n] = (struct pollfd){.fd = in->fd, .events = POLLOUT};
            idx_in = n++;
        }
        if (err_fd >= 0) {
            fds[n] = (struct pollfd){.fd = err_fd, .events = POLLIN};
            idx_err = n++;
        }
        if (out_fd >= 0) {
            fds[n] = (struct pollfd){.fd = out_fd, .events = POLLIN};
            idx_out = n++;
        }
        if (pfd >= 0) {
            fds[n] = (struct pollfd){.fd = pfd, .events = POLLIN};
            idx_pid = n++;
        }
        double left = deadline - spk_now_s();
        if (left <= 0)
            break;
        /* Without a pidfd, wake up every 10 ms to ask waitpid(). */
        int ms = pfd >= 0 ? (int)(left * 1000) + 1 : (left < 0.01 ? 1 : 10);
        int r = poll(fds, (nfds_t)n, ms);
        if (r < 0 && errno != EINTR)
            break;
        if (idx_in >= 0 && fds[idx_in].revents)
            feed_child(in);   /* POLLOUT, or POLLHUP/POLLERR: the helper's end is gone */
        if (idx_err >= 0 && (fds[idx_err].revents & (POLLIN | POLLHUP))) {
            ssize_t k = read(err_fd, cerr, sizeof *cerr);
            if (k == (ssize_t)sizeof *cerr)
                *have_cerr = 1;
            close(err_fd);
            err_fd = -1;
        }
        if (idx_out >= 0 && (fds[idx_out].revents & (POLLIN | POLLHUP))) {
            char buf[512];
            ssize_t k = read(out_fd, buf, sizeof buf);
            if (k <= 0) {
                close(out_fd);
                out_fd = -1;
            } else {
                append_out(out, outlen, &used, buf, (size_t)k);
            }
        }
        if (!exited && (pfd < 0 || (idx_pid >= 0 && (fds[idx_pid].revents & POLLIN)))) {
            pid_t w = waitpid(pid, status, WNOHANG);
            if (w == pid)
                exited = 1;
            else if (w < 0 && errno == ECHILD)
                exited = 1, *status = 0;
            if (exited && pfd >= 0) {
                close(pfd);
                pfd = -1;
            }
        }
        /* Done once the child exited and its exec report is in. Output is
         * drained without waiting: a daemon it left may hold the pipe. */
        if (exited && err_fd < 0) {
            if (in && in->fd >= 0) {
                close(in->fd);   /* it exited without reading all of it */
                in->fd = -1;
            }
            if (out_fd >= 0) {
                fcntl(out_fd, F_SETFL, O_NONBLOCK);
                char buf[512];
                ssize_t k;
                while ((k = read(out_fd, buf, sizeof buf)) > 0)
                    append_out(out, outlen, &used, buf, (size_t)k);
                close(out_fd);
            }
            return 0;
        }
    }
    kill(pid, spk_spawn_kill_signal);
    int gone = reap_bounded(pid, pfd, spk_spawn_reap_grace_s, status);
    if (pfd >= 0)
        close(pfd);
    if (err_fd >= 0)
        close(err_fd);
    if (out_fd >= 0)
        close(out_fd);
    if (in && in->fd >= 0) {
        close(in->fd);
        in->fd = -1;
    }
    return gone ? -1 : -2;
}

int spk_spawn(const struct spk_cred *cred, const struct spk_cmd *cmd, int *status)
{
    int in_sp[2] = {-1, -1}, out_sp[2] = {-1, -1}, errp[2] = {-1, -1};
    struct child_err cerr;
    int have_cerr, rc;
    double timeout_s = cmd->timeout_s > 0 ? cmd->timeout_s : 10;
    double deadline = spk_now_s() + timeout_s;
    pid_t pid;

    if (!cmd->path || cmd->path[0] != '/')
        return spk_error("refusing to run '%s': not an absolute path", cmd->path ? cmd->path : "");
    /* Sockets rather than pipes: send(MSG_NOSIGNAL) cannot raise SIGPIPE in
     * slurmstepd if the helper exits without reading its input. */
    if ((cmd->input && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_sp) < 0) ||
        (cmd->output && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out_sp) < 0) ||
        pipe2(errp, O_CLOEXEC) < 0) {
        rc = spk_error("cannot run %s: socketpair/pipe: %s", cmd->path, strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        rc = spk_error("cannot run %s: fork: %s", cmd->path, strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(errp[0]);
        child_setup(cred, cmd->cwd, in_sp[1], out_sp[1], errp[1]);
        execve(cmd->path, cmd->argv, cmd->envp);
        child_fail(3, ST_EXEC);
    }
    close(errp[1]);
    errp[1] = -1;
    /* The input is fed from wait_child's poll loop, never by a blocking
     * send: a helper that does not read it (stuck, or a program of the
     * user's) would otherwise hold slurmstepd past any deadline once the
     * socket's buffer is full. */
    struct child_in in = {.fd = -1, .buf = cmd->input};
    if (in_sp[1] >= 0) {
        close(in_sp[1]);
        in_sp[1] = -1;
        in.fd = in_sp[0];
        in_sp[0] = -1;   /* closed by feed_child or wait_child */
        in.len = strlen(cmd->input);
    }
    if (out_sp[1] >= 0) {
        close(out_sp[1]);
        out_sp[1] = -1;
    }
    rc = wait_child(pid, errp[0], &in, out_sp[0], cmd->output, cmd->output_len, deadline, status,
                    &cerr, &have_cerr);
    errp[0] = out_sp[0] = -1;   /* closed by wait_child */
    char unread[96] = "";
    if (rc != 0 && in.off < in.len)
        snprintf(unread, sizeof unread, " (it had not read its input: %zu of %zu bytes unsent)",
                 in.len - in.off, in.len);
    if (rc == -2) {
        spk_log("cdl: %s (pid %ld, uid %u) did not finish within %g s and did not exit %g s "
                "after SIGKILL: it is stuck in the kernel (state D, e.g. on a hung NFS or FUSE "
                "mount); left behind, it exits once that I/O ends (ps -o stat,wchan -p %ld)",
                cmd->path, (long)pid, (unsigned)cred->uid, timeout_s, spk_spawn_reap_grace_s,
                (long)pid);
        rc = spk_error("%s did not finish within %g s%s and could not be killed (stuck in the "
                       "kernel, pid %ld left behind)", cmd->path, timeout_s, unread, (long)pid);
    } else if (rc != 0) {
        spk_log("cdl: %s (pid %ld, uid %u) did not finish within %g s%s: killed", cmd->path,
                (long)pid, (unsigned)cred->uid, timeout_s, unread);
        rc = spk_error("%s did not finish within %g s%s and was killed", cmd->path, timeout_s,
                       unread);
    } else if (have_cerr) {
        errno = cerr.err;
        rc = spk_error("cannot run %s as uid %u gid %u: %s failed: %s", cmd->path,
                       (unsigned)cred->uid, (unsigned)cred->gid,
                       cerr.stage >= 0 && cerr.stage <= ST_EXEC ? stage_name[cerr.stage] : "?",
                       strerror(cerr.err));
    }
out:
    for (int i = 0; i < 2; i++) {
        if (in_sp[i] >= 0)
            close(in_sp[i]);
        if (out_sp[i] >= 0)
            close(out_sp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    return rc;
}

int spk_run_as(const struct spk_cred *cred, int (*fn)(void *), void *arg, double timeout_s)
{
    int errp[2], status = 0, have_cerr;
    struct child_err cerr;
    pid_t pid;
    if (pipe2(errp, O_CLOEXEC) < 0)
        return spk_error("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0) {
        close(errp[0]);
        close(errp[1]);
        return spk_error("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(errp[0]);
        child_setup(cred, NULL, -1, -1, errp[1]);
        close(3);   /* report "no setup failure" by EOF */
        _exit(fn(arg) & 0x7f);
    }
    close(errp[1]);
    int w = wait_child(pid, errp[0], NULL, -1, NULL, 0, spk_now_s() + timeout_s, &status, &cerr,
                       &have_cerr);
    if (w == -2) {
        spk_log("cdl: helper as uid %u (pid %ld) did not finish within %g s and did not exit "
                "%g s after SIGKILL: it is stuck in the kernel (state D); left behind",
                (unsigned)cred->uid, (long)pid, timeout_s, spk_spawn_reap_grace_s);
        return spk_error("helper as uid %u did not finish within %g s and could not be killed "
                         "(pid %ld left behind)", (unsigned)cred->uid, timeout_s, (long)pid);
    }
    if (w)
        return spk_error("helper as uid %u did not finish within %g s", (unsigned)cred->uid,
                         timeout_s);
    if (have_cerr) {
        errno = cerr.err;
        return spk_error("cannot act as uid %u: %s failed: %s", (unsigned)cred->uid,
                         cerr.stage >= 0 && cerr.stage <= ST_EXEC ? stage_name[cerr.stage] : "?",
                         strerror(cerr.err));
    }
    if (!WIFEXITED(status))
        return spk_error("helper as uid %u died with signal %d", (unsigned)cred->uid,
                         WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

static int owned_safely(const char *what, const char *key, const char *path, int want_dir)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return spk_error("%s=%s: %s", key, path, strerror(errno));
    if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        return spk_error("%s=%s: %s is not a %s", key, path, what, want_dir ? "directory" : "regular file");
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return spk_error("%s=%s: %s must be owned by root and not writable by group or others",
                         key, path, what);
    return 0;
}

int spk_admin_binary_resolve(const char *key, const char *path, char *real, size_t len)
{
    char buf[PATH_MAX], *slash;
    if (path[0] != '/')
        return spk_error("%s=%s is not an absolute path", key, path);
    if (!realpath(path, buf))
        return spk_error("%s=%s: %s (install it or fix the path in plugstack.conf)", key, path,
                         strerror(errno));
    if (spk_copy(real, len, buf) != 0)
        return spk_error("%s=%s: the resolved path %.80s... is too long", key, path, buf);
    if (owned_safely("the program", key, buf, 0) != 0)
        return -1;
    if (access(buf, X_OK) != 0)
        return spk_error("%s=%s is not executable", key, path);
    slash = strrchr(buf, '/');
    if (slash == buf)
        slash[1] = '\0';
    else
        *slash = '\0';
    if (owned_safely("its directory", key, buf, 1) != 0)
        return -1;
    /* Whoever may write a directory above could rename the program's
     * directory and put a program of their own in the checked place, run
     * as every MPS job's user. */
    char bad[PATH_MAX];
    int rc = spk_dirs_above_ok(buf, 0, bad, sizeof bad);
    if (rc < 0)
        return spk_error("%s=%s: %s: %s", key, path, bad, strerror(errno));
    if (rc > 0)
        return spk_error("%s=%s: its parent directory %s must be owned by root and not "
                         "writable by group or others (unless sticky): whoever may write it "
                         "can put another program in that place", key, path, bad);
    return 0;
}

int spk_check_admin_binary(const char *key, const char *path)
{
    char real[PATH_MAX];
    return spk_admin_binary_resolve(key, path, real, sizeof real);
}
