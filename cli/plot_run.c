/* Running gnuplot for cdl-plot's charts (plot_gnuplot.h). gnuplot opens no
 * file of ours: no name of a chart reaches it. It draws each chart to its
 * standard output, which is read through a pipe straight into the atomic
 * writer's temporary file (a random name created exclusively, links not
 * followed: lib/ckpt/atomic.c) in the output's directory, opened once and
 * refused, as a checkpoint's, when every account may write to it without
 * the sticky bit; the chart is renamed into place relative to it only when
 * gnuplot exited 0 and the bytes end as a whole PNG or SVG. gnuplot is
 * spawned by path without a shell, with a fixed argv ("gnuplot -d": no
 * initialisation file changes the charts or writes into them), its script
 * and data written into its standard input; its standard error is kept
 * and shown in the error that names the chart; one deadline bounds it all
 * (o->timeout): a gnuplot that hangs is killed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/ckpt/atomic.h"
#include "plot_gnuplot.h"

extern char **environ;

/* What one gnuplot did. */
typedef struct run {
    pid_t pid;
    int status;            /* waitpid's */
    int timed_out;
    int write_err;         /* errno of a failed write of the chart */
    int script_err;        /* errno of a failed write of its script */
    long long bytes;       /* of the chart */
    unsigned char tail[64];
    size_t ntail;
    char err[4096];        /* the start of its standard error */
    size_t nerr;
    int err_cut;
} run;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A pipe whose ends are both above standard error, so that moving them
 * onto gnuplot's 0, 1 and 2 cannot overwrite one another. */
static int pipe_high(int p[2])
{
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    int low[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
        if (p[i] < 3) {
            low[i] = p[i];
            p[i] = fcntl(p[i], F_DUPFD_CLOEXEC, 3);
        }
    for (int i = 0; i < 2; i++)
        if (low[i] >= 0)
            close(low[i]);
    if (p[0] < 0 || p[1] < 0) {
        int err = errno;
        for (int i = 0; i < 2; i++)
            if (p[i] >= 0)
                close(p[i]);
        errno = err;
        return -1;
    }
    return 0;
}

/* gnuplot on in, out and err, with the default action for the signals
 * cdl-plot ignores (SIGPIPE) and none blocked. 0 or an errno. */
static int spawn(run *r, const char *gnuplot, int in, int out, int err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t dfl, none;
    char *argv[] = {"gnuplot", "-d", NULL};
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGHUP);
    int e = posix_spawn_file_actions_init(&fa);
    if (e)
        return e;
    if ((e = posix_spawnattr_init(&at)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return e;
    }
    if (!(e = posix_spawn_file_actions_adddup2(&fa, in, STDIN_FILENO)) &&
        !(e = posix_spawn_file_actions_adddup2(&fa, out, STDOUT_FILENO)) &&
        !(e = posix_spawn_file_actions_adddup2(&fa, err, STDERR_FILENO)) &&
        !(e = posix_spawnattr_setsigdefault(&at, &dfl)) &&
        !(e = posix_spawnattr_setsigmask(&at, &none)) &&
        !(e = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)))
        e = posix_spawn(&r->pid, gnuplot, &fa, &at, argv, environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return e;
}

/* n bytes of the chart into fd: all of them, or write_err set. */
static void keep_chart(run *r, int fd, const unsigned char *buf, size_t n)
{
    for (size_t done = 0; done < n && !r->write_err;) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            r->write_err = w < 0 ? errno : ENOSPC;
        else
            done += (size_t)w;
    }
    r->bytes += (long long)n;
    if (n >= sizeof r->tail) {
        memcpy(r->tail, buf + n - sizeof r->tail, sizeof r->tail);
        r->ntail = sizeof r->tail;
    } else {
        size_t keep = r->ntail + n > sizeof r->tail ? sizeof r->tail - n : r->ntail;
        memmove(r->tail, r->tail + r->ntail - keep, keep);
        memcpy(r->tail + keep, buf, n);
        r->ntail = keep + n;
    }
}

/* The script into in, the chart from out into fd, the messages from err,
 * until gnuplot closes both, a write of the chart fails or the deadline
 * passes; every descriptor given is closed. */
static void pump(run *r, const char *script, size_t len, int in, int out, int err, int fd,
                 double deadline)
{
    size_t sent = 0;
    fcntl(in, F_SETFL, fcntl(in, F_GETFL) | O_NONBLOCK);
    if (len == 0) {
        close(in);
        in = -1;
    }
    while ((out >= 0 || err >= 0) && !r->write_err) {
        double left = deadline - now();
        if (left <= 0) {
            r->timed_out = 1;
            break;
        }
        struct pollfd p[3] = {{in, POLLOUT, 0}, {out, POLLIN, 0}, {err, POLLIN, 0}};
        int k = poll(p, 3, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
        if (k < 0 && errno != EINTR) {
            r->timed_out = 1;   /* cannot wait any more: stopped as if hung */
            break;
        }
        if (k <= 0)
            continue;
        if (in >= 0 && p[0].revents) {
            ssize_t w = write(in, script + sent, len - sent);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                r->script_err = errno;   /* EPIPE: it stopped reading */
            if (sent == len || r->script_err) {
                close(in);
                in = -1;
            }
        }
        unsigned char buf[65536];
        if (out >= 0 && p[1].revents) {
            ssize_t n = read(out, buf, sizeof buf);
            if (n > 0)
                keep_chart(r, fd, buf, (size_t)n);
            else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(out);
                out = -1;
            }
        }
        if (err >= 0 && p[2].revents) {
            ssize_t n = read(err, buf, sizeof buf);
            if (n > 0) {
                size_t room = sizeof r->err - 1 - r->nerr;
                size_t take = (size_t)n < room ? (size_t)n : room;
                memcpy(r->err + r->nerr, buf, take);
                r->nerr += take;
                r->err_cut |= take < (size_t)n;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(err);
                err = -1;
            }
        }
    }
    if (in >= 0 && sent < len && !r->script_err)
        r->script_err = EPIPE;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (err >= 0)
        close(err);
    r->err[r->nerr] = '\0';
}

/* gnuplot's exit, waited for until the deadline, then killed (also at
 * once when its output is no longer wanted). */
static void reap(run *r, double deadline)
{
    struct timespec tick = {0, 10 * 1000 * 1000};
    if (r->timed_out || r->write_err)
        kill(r->pid, SIGKILL);
    pid_t got;
    while ((got = waitpid(r->pid, &r->status, WNOHANG)) == 0 && now() < deadline)
        nanosleep(&tick, NULL);
    if (got == 0) {
        r->timed_out = 1;
        kill(r->pid, SIGKILL);
        got = waitpid(r->pid, &r->status, 0);
    }
    if (got < 0)
        r->status = -1;
}

/* Whether the chart ends as a whole PNG (its IEND chunk) or SVG ("</svg>"). */
static int complete(const run *r, int png)
{
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
    size_t n = r->ntail;
    if (png)
        return n >= sizeof iend && !memcmp(r->tail + n - sizeof iend, iend, sizeof iend);
    while (n > 0 && (r->tail[n - 1] == '\n' || r->tail[n - 1] == ' ' || r->tail[n - 1] == '\r'))
        n--;
    return n >= 6 && !memcmp(r->tail + n - 6, "</svg>", 6);
}

/* What gnuplot wrote to its standard error, each line indented. */
static void said(const run *r)
{
    if (!r->nerr) {
        fputs("  (gnuplot wrote no message)\n", stderr);
        return;
    }
    for (const char *s = r->err; *s;) {
        size_t n = strcspn(s, "\n");
        fprintf(stderr, "  gnuplot: %.*s\n", (int)n, s);
        s += n + (s[n] == '\n');
    }
    if (r->err_cut)
        fputs("  gnuplot: [more cut]\n", stderr);
}

/* 1, said why, when the chart drawn by r cannot be kept; else 0. */
static int failed(const run *r, const char *gnuplot, const char *chart, int png,
                  const plot_opts *o)
{
    if (r->write_err) {
        int full = r->write_err == ENOSPC;
#ifdef EDQUOT
        full |= r->write_err == EDQUOT;
#endif
        fprintf(stderr, "cdl-plot: %s came out incomplete: writing it failed after %lld bytes: "
                "%s: %s; any earlier %s is unchanged\n", chart, r->bytes,
                strerror(r->write_err),
                full ? "is its file system full or over quota? Free space there or give -o "
                       "another place"
                     : "check that file system or give -o another place", chart);
        return 1;
    }
    if (r->timed_out) {
        fprintf(stderr, "cdl-plot: %s: gnuplot (%s) took longer than %g s and was stopped; "
                "nothing was written, any earlier %s is unchanged; give it more time with "
                "--timeout if it was only slow\n", chart, gnuplot, o->timeout, chart);
        return 1;
    }
    if (r->status == -1 || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
        fprintf(stderr, "cdl-plot: %s: gnuplot (%s) failed (%s %d); nothing was written, any "
                "earlier %s is unchanged; its messages:\n", chart, gnuplot,
                r->status != -1 && WIFSIGNALED(r->status) ? "signal" : "exit status",
                r->status == -1 ? -1
                : WIFSIGNALED(r->status) ? WTERMSIG(r->status) : WEXITSTATUS(r->status),
                chart);
        said(r);
        return 1;
    }
    if (r->script_err) {
        fprintf(stderr, "cdl-plot: %s: gnuplot (%s) stopped reading its script (%s); nothing "
                "was written, any earlier %s is unchanged; its messages:\n", chart, gnuplot,
                strerror(r->script_err), chart);
        said(r);
        return 1;
    }
    if (!complete(r, png)) {
        fprintf(stderr, "cdl-plot: %s: gnuplot (%s) exited 0 but drew no whole %s (%lld "
                "bytes); nothing was written, any earlier %s is unchanged; its messages:\n",
                chart, gnuplot, png ? "PNG" : "SVG", r->bytes, chart);
        said(r);
        return 1;
    }
    return 0;
}

/* One chart: its script to a gnuplot, what it draws into a temporary file
 * in dfd, renamed to chart when whole. */
static int draw(const char *gnuplot, const plot_set *set, const plot_opts *o, int dfd,
                const char *chart, int png, double deadline)
{
    char *script = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&script, &len);
    if (!f || plot_script(f, set, o, png) != 0 || fclose(f) != 0) {
        fprintf(stderr, "cdl-plot: %s: cannot make gnuplot's script: %s\n", chart,
                strerror(errno));
        free(script);
        return -1;
    }
    afile a;
    if (afile_openat(&a, dfd, chart) != 0) {
        fprintf(stderr, "cdl-plot: %s\n", cdl_last_error());
        free(script);
        return -1;
    }
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};   /* its stdin, stdout, stderr */
    for (int i = 0; i < 3; i++)
        if (pipe_high(p[i]) != 0) {
            fprintf(stderr, "cdl-plot: %s: cannot make a pipe to gnuplot: %s\n", chart,
                    strerror(errno));
            for (int j = 0; j < i; j++) {
                close(p[j][0]);
                close(p[j][1]);
            }
            afile_abort(&a);
            free(script);
            return -1;
        }
    int in[2] = {p[0][0], p[0][1]}, out[2] = {p[1][0], p[1][1]}, err[2] = {p[2][0], p[2][1]};
    run r = {0};
    int e = spawn(&r, gnuplot, in[0], out[1], err[1]);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (e) {
        close(in[1]);
        close(out[0]);
        close(err[0]);
        fprintf(stderr, "cdl-plot: %s: cannot run gnuplot (%s): %s; install gnuplot (Debian: "
                "gnuplot-nox) or put a working one first in PATH\n", chart, gnuplot,
                strerror(e));
        afile_abort(&a);
        free(script);
        return -1;
    }
    pump(&r, script, len, in[1], out[0], err[0], a.fd, deadline);
    free(script);
    reap(&r, deadline);
    if (failed(&r, gnuplot, chart, png, o)) {
        afile_abort(&a);
        return -1;
    }
    if (r.nerr) {
        fprintf(stderr, "cdl-plot: %s: gnuplot (%s) said:\n", chart, gnuplot);
        said(&r);
    }
    if (afile_commit(&a) != 0) {
        fprintf(stderr, "cdl-plot: %s\n", cdl_last_error());
        return -1;
    }
    fprintf(stderr, "cdl-plot: wrote %s\n", chart);
    return 0;
}

int plot_run_gnuplot(const char *gnuplot, const plot_set *set, const plot_opts *o)
{
    /* The output's directory, opened and checked once as a checkpoint's
     * (lib/ckpt/atomic.c): one every account may write to without the
     * sticky bit is refused before drawing, since any of them could swap a
     * chart between its writing and its rename; the charts are created,
     * renamed and removed relative to it. */
    const char *slash = strrchr(o->prefix, '/');
    char dir[4300], png[4300], svg[4300];
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == o->prefix ? 1 : (int)(slash - o->prefix))
                                            : 1, slash ? o->prefix : ".");
    snprintf(png, sizeof png, "%s.png", o->prefix);
    snprintf(svg, sizeof svg, "%s.svg", o->prefix);
    int dfd = afile_dir_open(dir, o->png ? png : svg);
    if (dfd < 0) {
        fprintf(stderr, "cdl-plot: %s\n", cdl_last_error());
        return -1;
    }
    /* gnuplot may die before reading its whole script: a write error, not
     * a signal that kills cdl-plot. */
    signal(SIGPIPE, SIG_IGN);
    double deadline = now() + o->timeout;
    int rc = 0;
    if (o->png)
        rc = draw(gnuplot, set, o, dfd, png, 1, deadline);
    if (rc == 0 && o->svg)
        rc = draw(gnuplot, set, o, dfd, svg, 0, deadline);
    close(dfd);
    return rc;
}
