/* cdl-plot's charts: gnuplot's script (plot_gnuplot.c) and gnuplot run
 * without a shell, its script and data written into its standard input,
 * its image read from its standard output (plot_run.c). */
#ifndef CDL_CLI_PLOT_GNUPLOT_H
#define CDL_CLI_PLOT_GNUPLOT_H

#include <stdio.h>

#include "plot_read.h"

typedef struct plot_opts {
    const char *prefix;       /* writes PREFIX.png and/or PREFIX.svg */
    int png, svg;
    int width, height;        /* pixels */
    const char *title;
    double timeout;           /* seconds gnuplot may take, all charts together */
} plot_opts;

/* The full path of an executable gnuplot in PATH into out, 0; -1 if none. */
int plot_find_gnuplot(char *out, size_t len);
/* The gnuplot script of the PNG (png != 0) or SVG charts (loss, accuracy,
 * learning rate against the epoch, or the optimizer step when a run has
 * step or eval records; one colour per run, validation dashed), drawn to
 * gnuplot's standard output. */
int plot_script(FILE *f, const plot_set *set, const plot_opts *o, int png);
/* Runs gnuplot (its path) once per chart, writing what it draws to its
 * standard output into place with the atomic writer (lib/ckpt/atomic.h),
 * relative to the output's directory, opened and checked once; 0 when
 * every gnuplot exited 0 in time and every chart was written whole (each
 * is renamed into place only then; an earlier one stays otherwise). */
int plot_run_gnuplot(const char *gnuplot, const plot_set *set, const plot_opts *o);

#endif
