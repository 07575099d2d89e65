/* cdl-plot's reader of --metrics files (plot_read.c): the epoch records of
 * each run, found by run_id, the last record of an epoch winning (a resumed
 * run repeats the epoch it stopped in). Input is whatever file the user
 * names: every line is checked, bad ones are counted and skipped. */
#ifndef CDL_CLI_PLOT_READ_H
#define CDL_CLI_PLOT_READ_H

#include <stddef.h>

/* One epoch record. */
typedef struct plot_point {
    int epoch;
    long step;
    double train_loss, train_acc, val_loss, val_acc, lr;
} plot_point;

typedef struct plot_run {
    char label[160];          /* for charts and the summary */
    char id[40];              /* run_id ("" in files older than run ids) */
    plot_point *pts;          /* sorted by epoch */
    int n, cap;
} plot_run;

typedef struct plot_set {
    plot_run *runs;
    int n, cap;
    long bad_lines;           /* lines that were no JSON object we could read */
} plot_set;

/* Parses one line (NUL-terminated). Returns 1 and fills *p and id (40
 * bytes) for an epoch record, 0 for another well-formed record (config,
 * step) or a blank line, -1 for a malformed line. */
int plot_parse_line(const char *line, plot_point *p, char id[40]);

/* Adds the epoch records of file `path` to set, as runs labelled by the
 * file (the directory's name for a file called metrics.jsonl) and, when the
 * file holds several runs, the start of their ids. -1 with a message on
 * stderr if the file cannot be read. */
int plot_read_file(plot_set *set, const char *path);
void plot_set_free(plot_set *set);

#endif
