/* Per-thread last-error message: every failing call says what and why. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

static _Thread_local char last_error[2048];

const char *cdl_last_error(void)
{
    return last_error;
}

int cdl_error(const char *fmt, ...)
{
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);   /* fmt may use last_error itself */
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return -1;
}

const char *cdl_version(void)
{
    return PACKAGE_VERSION;
}
