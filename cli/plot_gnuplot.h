/* cdl-plot's charts (plot_gnuplot.c): gnuplot run without a shell, its
 * script and data written into its standard input. */
#ifndef CDL_CLI_PLOT_GNUPLOT_H
#define CDL_CLI_PLOT_GNUPLOT_H

#include <stdio.h>

#include "plot_read.h"

typedef struct plot_opts {
    const char *prefix;       /* writes PREFIX.png and/or PREFIX.svg */
    int png, svg;
    int width, height;        /* pixels */
    const char *title;
    double timeout;           /* seconds gnuplot may take */
    const char *suffix;       /* appended to the files' names (NULL: none) */
} plot_opts;

/* The full path of an executable gnuplot in PATH into out, 0; -1 if none. */
int plot_find_gnuplot(char *out, size_t len);
/* The gnuplot script of the charts (loss, accuracy, learning rate against
 * the epoch, or the optimizer step when a run has step or eval records;
 * one colour per run, validation dashed). */
int plot_script(FILE *f, const plot_set *set, const plot_opts *o);
/* Runs gnuplot (its path) on the script, drawing into temporary files
 * renamed into place once complete; 0 when it exited 0 in time and wrote
 * every file whole (gnuplot says nothing of a full disk). */
int plot_run_gnuplot(const char *gnuplot, const plot_set *set, const plot_opts *o);

#endif
