/* Clocks, timeouts, message helpers and process liveness for lib/dist. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cdl/cdl.h>

#include "contract.h"
#include "util.h"

double dist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dist_resolve_timeout(double t, double *out)
{
    if (t > 0 && t <= CDL_MAX_TIMEOUT) {
        *out = t;
        return 0;
    }
    if (t < 0 || t > CDL_MAX_TIMEOUT || t != t)
        return cdl_error("timeout %g s: give seconds > 0, at most %g (0 = %d)", t,
                         CDL_MAX_TIMEOUT, CDL_DEFAULT_TIMEOUT);
    *out = CDL_DEFAULT_TIMEOUT;
    return 0;
}

void dist_sanitize(const char *in, char *out, size_t len)
{
    size_t i = 0;
    for (; in && in[i] && i + 1 < len; i++) {
        char c = in[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
        out[i] = ok ? c : '_';
    }
    if (len)
        out[i] = '\0';
}

void dist_printable(char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            s[i] = '?';
}

const char *dist_rank_list(char *buf, size_t len, const int *ranks, int n)
{
    size_t used = (size_t)snprintf(buf, len, "%s", n == 1 ? "rank" : "ranks");
    for (int i = 0; i < n && used < len; i++) {
        if (i == 8 && n > 9) {
            snprintf(buf + used, len - used, ", ... (%d in all)", n);
            break;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : " ", ranks[i]);
    }
    return buf;
}

size_t dist_plain_len(const char *s, size_t max, const char *punct)
{
    size_t k = 0;
    while (k < max && s[k] && ((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'z') ||
                               (s[k] >= 'A' && s[k] <= 'Z') || strchr(punct, s[k])))
        k++;
    return k < max && !s[k] ? k : 0;
}

int dist_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return cdl_error("getrandom failed: %s", strerror(errno));
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Fields 3 (state) and 22 (starttime) of /proc/pid/stat. The command name
 * (field 2) may hold spaces and parentheses: parse after the last ')'. */
static int read_stat(int pid, char *state, unsigned long long *start)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t got = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[got] = '\0';
    char *p = strrchr(line, ')');
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* Skip fields 3..21 (19 fields) to reach field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

unsigned long long dist_pid_starttime(int pid)
{
    char state;
    unsigned long long start;
    return read_stat(pid, &state, &start) == 0 ? start : 0;
}

int dist_pid_alive(int pid, unsigned long long starttime)
{
    char state;
    unsigned long long start;
    if (pid <= 0)
        return 1;   /* unknown: cannot tell */
    if (read_stat(pid, &state, &start) != 0)
        return 0;
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return starttime == 0 || start == starttime;   /* a reused pid is a different process */
}

/* Set from any thread (rank 0's store server answers in its own threads,
 * the collectives run in the caller's), read by the caller after a
 * failure. */
static atomic_int peer_lost;

void dist_note_peer_lost(void)
{
    atomic_store(&peer_lost, 1);
}

void dist_clear_peer_lost(void)
{
    atomic_store(&peer_lost, 0);
}

int cdl_dist_peer_lost(void)
{
    return atomic_load(&peer_lost);
}
