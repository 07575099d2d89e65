/* Bounded flock waits (lockwait.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "lockwait.h"
#include "report.h"
#include "signals.h"

/* The command name of process pid; a flock's pid is the process that took
 * it, which may have ended since, handing its descriptor on (flock(1)
 * running a command, a fork). */
static void proc_name(long pid, char *out, size_t len)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%ld/comm", pid);
    FILE *f = pid > 0 ? fopen(p, "re") : NULL;
    if (!f || !fgets(out, (int)len, f))
        snprintf(out, len, "%s", pid > 0 ? "ended: a process it passed the lock's descriptor "
                                           "to holds it"
                                         : "of another pid namespace");
    else
        out[strcspn(out, "\n")] = '\0';
    if (f)
        fclose(f);
}

void lockwait_holder(int fd, char *out, size_t len)
{
    struct stat st;
    out[0] = '\0';
    FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
    if (!f)
        return;
    char line[512];
    size_t at = 0;
    while (fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have
         * "->" after the number and hold nothing. */
        char kind[16], mode[16], rw[16];
        long pid;
        unsigned maj, min;
        unsigned long ino;
        if (strstr(line, "->") ||
            sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%lu", kind, mode, rw, &pid, &maj, &min,
                   &ino) != 7 ||
            strcmp(kind, "FLOCK") || ino != (unsigned long)st.st_ino ||
            maj != major(st.st_dev) || min != minor(st.st_dev))
            continue;
        char name[128];
        proc_name(pid, name, sizeof name);
        int n = snprintf(out + at, len - at, "%sprocess %ld (%s, %s)", at ? ", " : "", pid,
                         name, strcmp(rw, "WRITE") ? "shared" : "exclusive");
        if (n < 0 || (size_t)n >= len - at)
            break;
        at += (size_t)n;
    }
    fclose(f);
}

int lockwait_flock(int fd, int op, const char *path, const char *what, double timeout_s,
                   int (*beat)(void *ctx), void *ctx)
{
    double t0 = train_now();
    for (;;) {
        if (flock(fd, op | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return 1;   /* no locks there (some network file systems) */
        if (train_stop_requested())
            return cdl_error("--stage: stopped by a signal while waiting for the lock %s (%s)",
                             path, what);
        if (beat && beat(ctx) != 0)
            return -1;
        double waited = train_now() - t0;
        if (waited >= timeout_s) {
            char holder[512];
            lockwait_holder(fd, holder, sizeof holder);
            return cdl_error("--stage: gave up after %.0f s (CDL_TIMEOUT) waiting for the lock "
                             "%s (%s), held by %s: if that is a run of yours that hangs, end "
                             "it; else start again once it is done, raise CDL_TIMEOUT or give "
                             "another --stage DIR", waited, path, what,
                             holder[0] ? holder : "another process (not listed in /proc/locks)");
        }
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
}
