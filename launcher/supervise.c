/* cdlrun's supervision loop: one poll() over a signalfd and the ranks'
 * output pipes.
 *
 * - --label: every output line of rank r is written as "[r] line" to
 *   cdlrun's stdout or stderr (like srun --label).
 * - SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP are forwarded to every rank's
 *   process group; a second SIGINT kills them (like srun).
 * - The first rank to fail (non-zero exit other than 75, or a signal) is
 *   named; the others get SIGTERM at once and SIGKILL CDLRUN_KILL_GRACE s
 *   later, so everything stops within 5 s.
 * - Exit code: 0 when all ranks exit 0; 75 (CDL_EXIT_REQUEUE) when every
 *   rank exits 0 or 75 and one did 75; else the failing rank's exit code,
 *   or 128 + its signal. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define EXIT_REQUEUE CONTRACT_EXIT_REQUEUE
#define LINE_MAX_BYTES 65536

typedef struct outbuf {
    char data[LINE_MAX_BYTES];
    size_t len;
    int midline;            /* a partial line was flushed: no prefix until its end */
} outbuf;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;   /* our stdout went away: drop output, keep supervising */
        p += k;
        n -= (size_t)k;
    }
}

/* Writes the complete lines of b with the rank's prefix; at eof (or when
 * the buffer is full) also the rest. */
static void flush_lines(outbuf *b, int rank, int to, int eof)
{
    char prefix[24];
    int plen = snprintf(prefix, sizeof prefix, "[%d] ", rank);
    size_t start = 0;
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] == '\n') {
            if (!b->midline)
                write_all(to, prefix, (size_t)plen);
            write_all(to, b->data + start, i + 1 - start);
            b->midline = 0;
            start = i + 1;
        }
    if (start < b->len && (eof || (start == 0 && b->len == sizeof b->data))) {
        if (!b->midline)
            write_all(to, prefix, (size_t)plen);
        write_all(to, b->data + start, b->len - start);
        if (eof)
            write_all(to, "\n", 1);
        b->midline = !eof;
        start = b->len;
    }
    memmove(b->data, b->data + start, b->len - start);
    b->len -= start;
}

static void signal_ranks(run *r, int sig)
{
    for (int i = 0; i < r->n; i++)
        if (r->ranks[i].running)
            kill(-r->ranks[i].pid, sig);
}

static void describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with code %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
}

static int failed_status(int status)
{
    return !WIFEXITED(status) ||
           (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != EXIT_REQUEUE);
}

int supervise(run *r)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    int caught[] = {SIGCHLD, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof caught / sizeof *caught; i++)
        sigaddset(&sigs, caught[i]);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "cdlrun: signalfd failed: %s\n", strerror(errno));
        signal_ranks(r, SIGKILL);
        return 1;
    }
    outbuf *bufs = r->label ? calloc((size_t)r->n * 2, sizeof *bufs) : NULL;
    struct pollfd *pfd = calloc((size_t)r->n * 2 + 1, sizeof *pfd);
    if ((r->label && !bufs) || !pfd) {
        fprintf(stderr, "cdlrun: out of memory\n");
        signal_ranks(r, SIGKILL);
        return 1;
    }
    int running = r->n, open_pipes = r->label ? 2 * r->n : 0;
    int first_failed = -1, interrupts = 0;
    double kill_at = 0, drain_until = 0;

    while (running > 0 || open_pipes > 0) {
        double now = now_s();
        if (kill_at > 0 && now >= kill_at) {
            signal_ranks(r, SIGKILL);
            kill_at = 0;
        }
        if (running == 0 && drain_until == 0) {
            /* Descendants a rank left behind must not hold its pipes open. */
            for (int i = 0; i < r->n; i++)
                if (r->ranks[i].out_fd >= 0 || r->ranks[i].err_fd >= 0)
                    kill(-r->ranks[i].pid, SIGKILL);
            drain_until = now + 1;
        }
        if (drain_until > 0 && now >= drain_until)
            break;
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        for (int i = 0; r->label && i < r->n; i++) {
            pfd[np++] = (struct pollfd){.fd = r->ranks[i].out_fd, .events = POLLIN};
            pfd[np++] = (struct pollfd){.fd = r->ranks[i].err_fd, .events = POLLIN};
        }
        double next = kill_at > 0 ? kill_at : drain_until;
        int ms = next > 0 ? (int)((next - now) * 1000) + 1 : -1;
        if (poll(pfd, (nfds_t)np, ms) < 0 && errno != EINTR)
            break;

        for (int k = 1; k < np; k++) {
            if (pfd[k].fd < 0 || !(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int i = (k - 1) / 2, is_err = (k - 1) % 2;
            outbuf *b = &bufs[k - 1];
            ssize_t got = read(pfd[k].fd, b->data + b->len, sizeof b->data - b->len);
            if (got < 0 && errno == EINTR)
                continue;
            int eof = got <= 0;
            if (got > 0)
                b->len += (size_t)got;
            flush_lines(b, i, is_err ? 2 : 1, eof);
            if (eof) {
                close(pfd[k].fd);
                if (is_err)
                    r->ranks[i].err_fd = -1;
                else
                    r->ranks[i].out_fd = -1;
                open_pipes--;
            }
        }

        if (!(pfd[0].revents & POLLIN))
            continue;
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof si) != sizeof si)
            continue;
        int sig = (int)si.ssi_signo;
        if (sig != SIGCHLD) {
            if (sig == SIGINT && ++interrupts > 1) {
                fprintf(stderr, "cdlrun: second interrupt: killing all ranks\n");
                signal_ranks(r, SIGKILL);
            } else {
                signal_ranks(r, sig == SIGQUIT ? SIGKILL : sig);
            }
            continue;
        }
        pid_t pid;
        int st;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            for (int i = 0; i < r->n; i++) {
                if (r->ranks[i].pid != pid || !r->ranks[i].running)
                    continue;
                r->ranks[i].running = 0;
                r->ranks[i].status = st;
                running--;
                if (failed_status(st) && first_failed < 0) {
                    char what[96];
                    first_failed = i;
                    describe(st, what, sizeof what);
                    fprintf(stderr, "cdlrun: rank %d %s; stopping the other %d rank%s\n", i,
                            what, running, running == 1 ? "" : "s");
                    signal_ranks(r, SIGTERM);
                    kill_at = now_s() + CDLRUN_KILL_GRACE;
                }
            }
        }
    }
    /* Whatever is left (pipes held by strays past the drain): close. */
    for (int i = 0; r->label && i < r->n; i++) {
        if (r->ranks[i].out_fd >= 0)
            close(r->ranks[i].out_fd);
        if (r->ranks[i].err_fd >= 0)
            close(r->ranks[i].err_fd);
    }
    close(sfd);
    free(bufs);
    free(pfd);

    if (first_failed >= 0) {
        int st = r->ranks[first_failed].status;
        char what[96];
        describe(st, what, sizeof what);
        fprintf(stderr, "cdlrun: failed: rank %d %s\n", first_failed, what);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    int requeue = 0;
    for (int i = 0; i < r->n; i++)
        requeue += WEXITSTATUS(r->ranks[i].status) == EXIT_REQUEUE;
    if (requeue && requeue < r->n)
        fprintf(stderr, "cdlrun: %d of %d ranks asked to be requeued (exit %d), the others "
                "finished: exiting %d\n", requeue, r->n, EXIT_REQUEUE, EXIT_REQUEUE);
    return requeue ? EXIT_REQUEUE : 0;
}
