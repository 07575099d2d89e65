/* libcdl's own lines: to the thread's hook or to a stream (see log.h). */
#include <stdio.h>

#include "lib/core/log.h"

static _Thread_local log_sink sink;

log_sink log_sink_set(log_sink s)
{
    log_sink old = sink;
    sink = s;
    return old;
}

int log_sink_active(void)
{
    return sink.fn != NULL;
}

void log_vline(int level, FILE *stream, const char *fmt, va_list ap)
{
    if (!sink.fn) {
        vfprintf(stream, fmt, ap);
        fputc('\n', stream);
        fflush(stream);
        return;
    }
    /* Longer lines are cut: libcdl's are a few hundred characters. */
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    sink.fn(sink.ctx, level, line);
}

void log_line(int level, FILE *stream, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(level, stream, fmt, ap);
    va_end(ap);
}
