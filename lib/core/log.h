/* Where libcdl's own lines go: stdout or stderr, or the hook of the
 * cdl_train_run running on this thread (cdl_train_config.on_log).
 *
 * A program embedding libcdl may not want a library writing to its
 * terminal or its own log's stream. cdl_train_run installs its caller's
 * hook for this thread while it runs, and every line libcdl prints on
 * that thread, its own and those of what it calls (the rank discovery,
 * the collectives' choice, the CPU backend, the OpenBLAS advice), goes
 * there instead, one call per line, without the newline. */
#ifndef CDL_CORE_LOG_H
#define CDL_CORE_LOG_H

#include <stdarg.h>
#include <stdio.h>

typedef struct log_sink {
    void (*fn)(void *ctx, int level, const char *line);   /* NULL: the streams */
    void *ctx;
} log_sink;

/* Makes s this thread's sink; returns the one it replaces (to restore). */
log_sink log_sink_set(log_sink s);

/* 1 when this thread's lines go to a hook (a progress bar has no place). */
int log_sink_active(void);

/* One line (fmt without its newline) of level enum cdl_log_level: to this
 * thread's hook, else to stream with a newline, flushed. */
void log_line(int level, FILE *stream, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void log_vline(int level, FILE *stream, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
