/* Helpers shared by the plugin's modules (see util.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "spank/util.h"

/* One buffer per thread: slurmstepd is multi-threaded, task children are
 * single-threaded forks of it. */
static _Thread_local char last_error[1024];

int spk_error(const char *fmt, ...)
{
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);   /* fmt may quote last_error itself */
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return -1;
}

const char *spk_last_error(void)
{
    return last_error;
}

void spk_clear_error(void)
{
    last_error[0] = '\0';
}

static void log_stderr(const char *msg)
{
    fprintf(stderr, "%s\n", msg);
}

static spk_log_fn log_fn = log_stderr;

void spk_set_log(spk_log_fn fn)
{
    log_fn = fn ? fn : log_stderr;
}

void spk_log(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(msg);
}

double spk_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int spk_copy(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (len == 0)
        return -1;
    if (n >= len) {
        dst[0] = '\0';
        return -1;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

int spk_parse_uint(const char *s, long lo, long hi, long *out)
{
    long v = 0;
    size_t n = 0;
    if (!s || !*s)
        return -1;
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 9)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int spk_charset_ok(const char *s, size_t maxlen, int alnum, const char *allowed)
{
    size_t n = 0;
    if (!s || !*s)
        return 0;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        int ok = (alnum && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9'))) ||
                 (c && allowed && strchr(allowed, c));
        if (!ok || n + 1 >= maxlen)
            return 0;
    }
    return 1;
}

int spk_dirs_above_ok(const char *dir, uid_t owner, char *bad, size_t len)
{
    char up[SPK_PATH_MAX * 2];
    struct stat st;
    snprintf(up, sizeof up, "%s", dir);
    for (char *slash = strrchr(up, '/'); slash && up[1]; slash = strrchr(up, '/')) {
        slash[slash == up] = '\0';   /* "/a/b" -> "/a"; "/a" -> "/" */
        snprintf(bad, len, "%s", up);
        if (stat(up, &st) != 0)
            return -1;
        if ((st.st_uid != 0 && st.st_uid != owner) ||
            ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)))
            return 1;
    }
    return 0;
}
