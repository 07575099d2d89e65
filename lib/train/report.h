/* Progress and metrics of a run (report.c): a live bar on a terminal, one
 * plain line per epoch otherwise, JSON lines for --metrics. Rank 0 speaks. */
#ifndef CDL_TRAIN_REPORT_H
#define CDL_TRAIN_REPORT_H

#include <stddef.h>
#include <time.h>

#include <cdl/cdl.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct train_report train_report;
train_report *train_report_open(const cdl_train_config *cfg, int rank);
void train_report_free(train_report *r);
/* Seconds as M:SS or H:MM:SS into buf ("?" if not a sensible time). */
void train_format_duration(double s, char *buf, size_t len);
/* Live progress for batch b of nb in an epoch (bar on a terminal only),
 * the run's optimizer step `step` done, with the ETA of the epoch and of
 * the run (both cut short by --max-steps), and the speed: tokens per
 * second for a sequence model (tokens_per_sec > 0), else images. */
void train_report_progress(train_report *r, int epoch, long b, long nb, long step, double loss,
                           double acc, double imgs_per_sec, double tokens_per_sec);
typedef struct epoch_stats {
    int epoch;
    long step;
    double train_loss, train_acc, val_loss, val_acc;
    double samples_per_sec;   /* all ranks: pictures, table rows, or a sequence model's
                               * windows of --block-size tokens */
    double seconds, lr;
    double tokens_per_sec;    /* sequence models (else 0): all ranks */
    double mfu;               /* model FLOPs utilisation, NAN = n/a */
} epoch_stats;
int train_report_epoch(train_report *r, const epoch_stats *s);
/* The run's first record, once its id is known (after resuming), and a
 * step record (--metrics-every; rank 0 only opens the file). */
struct run_info;
struct step_stats;
int train_report_start(train_report *r, const cdl_train_config *cfg, const struct run_info *ri);
int train_report_step(train_report *r, const struct step_stats *s);
/* The test set's result at the end of a run (its last step `step`): a
 * line, in --metrics an object with test_loss, test_acc, test_samples (and
 * no "epoch"), and the test/ scalars for TensorBoard. */
int train_report_test(train_report *r, long step, double loss, double acc, int samples);
/* Rank 0: 1 when --metrics already ends this run with its test record
 * (metrics_tested: the final weights were tested by an earlier start), 0
 * when not or without --metrics (other ranks: 0), -1 on a read error. */
int train_report_tested(train_report *r);
/* --eval-every: validation at step `step` of epoch `epoch` (0-based): a
 * line, an "eval" record in --metrics, eval scalars in --tensorboard. */
int train_report_eval(train_report *r, int epoch, long step, double loss, double acc);
/* Rank 0: the error of a step, eval or epoch record that --metrics or
 * --tensorboard could not take (a full disk), NULL when none. Those three
 * return 0 on such a failure: the error is said at once and the run stops
 * after its next step with a checkpoint (loop.c), as at a signal, rather
 * than losing the steps since the last checkpoint. */
const char *train_report_failed(const train_report *r);
/* A line for the user (rank 0 only), e.g. "resuming from ...". */
void train_report_note(train_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A warning of a likely mistake in the run's settings (rank 0 only), after
 * "cdl-train: warning: " (fmt gives the rest; 2 KiB at most): also
 * under --quiet, which silences what a run reports, not what is wrong. */
void train_report_warning(train_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
