/* Internal pieces of the train/validate harness (lib/train). */
#ifndef CDL_TRAIN_HARNESS_H
#define CDL_TRAIN_HARNESS_H

#include <stdio.h>

#include <cdl/cdl.h>

/* Where a run stands: everything besides tensors that resuming needs. */
typedef struct train_position {
    int epoch;                /* epoch in progress (0-based) */
    long batch;               /* batches of that epoch already done */
    long step;                /* optimizer steps done in total */
    int world;                /* world size that wrote it */
    double best_val_loss;     /* lowest validation loss so far (INFINITY if none) */
    double loss_sum;          /* running sums of the epoch in progress (this rank, */
    double correct, seen;     /* so epoch metrics survive a mid-epoch restart) */
} train_position;

/* Checkpoint files (checkpoint.c). Only rank 0 writes; every rank reads. */
int train_ckpt_save(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    const train_position *pos);
/* Loads model weights, optimizer state and position from path, checking
 * that the file belongs to this model and optimizer. */
int train_ckpt_load(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    train_position *pos);

/* The run's configuration as one JSON object (config.c), stored in each
 * checkpoint's metadata and printed by --verbose runs. */
int train_config_json(const cdl_train_config *cfg, char *buf, size_t len);

/* SIGUSR1 / SIGTERM: finish the step, checkpoint, exit (signals.c). */
void train_signals_install(void);
void train_signals_restore(void);
int train_stop_requested(void);

/* Seconds on CLOCK_MONOTONIC (harness.c). */
double train_now(void);

/* Progress and metrics (report.c). */
typedef struct train_report train_report;
train_report *train_report_open(const cdl_train_config *cfg, int rank);
void train_report_free(train_report *r);
/* Live progress for batch b of nb in an epoch (bar on a terminal only). */
void train_report_progress(train_report *r, int epoch, long b, long nb, double loss,
                           double acc, double imgs_per_sec);
typedef struct epoch_stats {
    int epoch;
    long step;
    double train_loss, train_acc, val_loss, val_acc;
    double images_per_sec, seconds, lr;
} epoch_stats;
int train_report_epoch(train_report *r, const epoch_stats *s);
/* A line for the user (rank 0 only), e.g. "resuming from ...". */
void train_report_note(train_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
