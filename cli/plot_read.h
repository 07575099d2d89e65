/* cdl-plot's reader of --metrics files (plot_read.c): the epoch, step and
 * eval records of each run, found by run_id, the last record of an epoch
 * or step winning (a resumed run repeats the epoch it stopped in). Input is whatever file the user
 * names: every line is checked, bad ones are counted and skipped. */
#ifndef CDL_CLI_PLOT_READ_H
#define CDL_CLI_PLOT_READ_H

#include <stddef.h>

/* The records drawn: epoch ends, the step records of --metrics-every and
 * the validations of --eval-every (docs/metrics.md). */
enum plot_kind { PLOT_EPOCH = 1, PLOT_STEP = 2, PLOT_EVAL = 3 };

/* One record; fields it does not carry are NaN (a step record's loss and
 * acc are the step's training values). */
typedef struct plot_point {
    int epoch;
    long step;
    double train_loss, train_acc, val_loss, val_acc, lr;
} plot_point;

/* Records of one kind in key order (epoch for epoch records, else step),
 * one per key: a resumed run repeats records, and the last one wins. */
typedef struct plot_series {
    plot_point *pts;
    int n, cap;
} plot_series;

typedef struct plot_run {
    char label[160];          /* for charts and the summary */
    char id[40];              /* run_id ("" in files older than run ids) */
    plot_series epochs, steps, evals;
} plot_run;

typedef struct plot_set {
    plot_run *runs;
    int n, cap;
    long bad_lines;           /* lines that were no JSON object we could read */
} plot_set;

/* Parses one line (NUL-terminated). Returns its enum plot_kind and fills
 * *p and id (40 bytes) for an epoch, step or eval record, 0 for another
 * well-formed record (config, test) or a blank line, -1 for a malformed
 * line. */
int plot_parse_line(const char *line, plot_point *p, char id[40]);

/* Adds the records of file `path` to set, as runs labelled by the
 * file (the directory's name for a file called metrics.jsonl) and, when the
 * file holds several runs, the start of their ids. -1 with a message on
 * stderr if the file cannot be read. */
int plot_read_file(plot_set *set, const char *path);
void plot_set_free(plot_set *set);

#endif
