/* The state of one cdl_train_run, shared by the set-up and epochs
 * (harness.c), the steps (step.c) and the training loop (loop.c).
 * Internal. */
#ifndef CDL_TRAIN_RUN_H
#define CDL_TRAIN_RUN_H

#include <cdl/cdl.h>

#include "ddp.h"
#include "pipeline.h"
#include "report.h"

typedef struct train_loop train_loop;

typedef struct run {
    const cdl_train_config *cfg;
    cdl_rank_info ri;
    cdl_dist *dist;
    cdl_backend *be;
    int own_be;               /* made here (not cfg->backend): destroyed at the end */
    cdl_dataset train, test;
    int have_train, have_test;
    cdl_dataset val;          /* carved from train by --val-split (have_val), or an image
                               * folder's val/ (val_folder) */
    int have_val, val_folder;
    char *class_names;        /* the training set's class names, one per line, or NULL */
    char *feature_columns;    /* a CSV table's feature column names, one per line, and its */
    char *label_name;         /* label column's (rank 0; NULL for other data) */
    char data_dir[1100];      /* where the data is read: --data-dir or its staged copy */
    char stage_owned[1100];   /* the per-job staged copy this process removes at the end */
    cdl_model *model;
    cdl_optim *optim;
    ddp *ddp;
    cdl_loader *train_loader, *val_loader;
    cdl_schedule sched;
    train_report *rep;
    int classes;
    size_t sample_floats;
    /* Device buffers of max_batch samples. */
    float *x_dev, *dlogits, *sample_loss;
    int32_t *y_dev, *pred;
    /* Host copies of per-sample results. */
    float *h_loss;
    int32_t *h_pred;
    char last_path[1100], best_path[1100];
    char fingerprint[32];     /* data_fingerprint of train (checkpoints, resume, agree.c) */
    int ckpt_lock;            /* rank 0: the --ckpt-dir lock (ckpt_dir_prepare), -1 none */
    int stage_lock;           /* local rank 0: the lock on stage_owned's .lock (stage.c), -1 none */
    long saved_step;          /* the step of the last checkpoint written or resumed from */
    const char *saved_path;   /* that checkpoint (last_path, or --resume PATH), NULL: none */
    /* What of --ckpt-dir is this run's history (diverged.c): the step it
     * started from (files up to it are its past), the steps of the two
     * newest numbered checkpoints it wrote and of its newest best (-1:
     * none). A numbered file or best of another step is an abandoned
     * run's, one that a resume from an earlier file left behind. */
    long start_step, kept[2], best_written;
    int finished_before;      /* resumed with nothing left to train (run_epochs) */
    train_loop *loop;         /* the training loop's buffers (loop.c) */
    int records_failed;       /* agreed: rank 0's --metrics/--tensorboard failed (loop.c) */
    int program_stop;         /* this rank's cfg->should_stop said stop (kept once said) */
    int stop_by_program;      /* agreed: the stop is the program's, no rank had a signal */
    /* --accum-steps and --clip-grad (grads.c): micro-batches per optimizer
     * step (1: none), the running one and the next, how many its step has
     * and their samples (the loss's denominator), the sum of the earlier
     * micro-batches' gradients (device, nparams; accum > 1 only), and the
     * norm clipping saw at the last update (NAN: not taken). */
    int accum, micro, micro_next, micros;
    long group_rows;
    float *grad_acc;
    double grad_norm;
    /* --clip-grad on the device (train_clip_on_device): the squared norm
     * (device, one double), read after the step; grad_norm stays NAN. */
    double *norm_dev;
    int decay_2d;             /* --decay-params resolved: 1 = >= 2-D parameters only */
    /* Labels per sample (cdl_model_positions: T for a language model, else
     * 1); for sequence models the training FLOPs per token and the peak
     * TFLOP/s per device of MFU (mfu.h; 0 = unknown). */
    int positions;
    double flops_per_token, peak_tflops;
    /* The labelled rows (label >= 0) of the batch being run, of its
     * n * positions: the loss is their mean (set before train_step_ops). */
    long valid_rows;
} run;

/* agree.c: fails every rank (naming the differences on the ranks that have
 * them) unless all run rank 0's settings on data of the same sizes with a
 * model of the same size; 0 for a single process. */
int train_ranks_agree(run *r);
/* agree.c: rank 0's n values to every rank, in host memory (a sum to which
 * only rank 0 adds; cdl_dist_broadcast takes the backend's memory). */
int train_from_rank0(run *r, double *v, size_t n);
/* agree.c: every rank learns whether a set-up stage (`what`: "loading the
 * data") failed on any rank, rather than the others waiting for it at the
 * next collective and failing with "rank N died". failed: this rank's
 * outcome (its error in cdl_last_error, which gets the rank and host
 * added). 0 when no rank failed, else -1 on every rank, with an error
 * naming the first failed rank and its host on the others. */
int train_setup_agree(run *r, int failed, const char *what);
/* loop.c: 1 when any rank got SIGTERM/SIGUSR1 or its should_stop said
 * stop (all ranks call it at the same point), 0 when none, -1 when the
 * collective fails. */
int train_stop_agreed(run *r);
/* loop.c: after a stop agreed (and not for failed records), which stop it
 * is, agreed by all ranks in one more collective: r->stop_by_program is 1
 * when no rank had a signal (the program's should_stop asked), 0 for a
 * signal's stop. 0, or -1 when the collective fails. */
int train_stop_kind(run *r);
/* diverged.c: where a run whose loss of step `step` (0-based) is not
 * finite can go on from (pipeline.h): h filled, the path of an earlier
 * checkpoint into earlier[len]; h with last NULL when this run has written
 * or resumed no checkpoint that is still there (h->clipping still tells
 * the advice whether --clip-grad is on). */
const diverge_hint *train_diverge_hint(const run *r, long step, diverge_hint *h, char *earlier,
                                       size_t len);
/* agree.c: a warning on stderr when a single process runs in a Slurm job of
 * several tasks outside any job step (cdl-train straight in the batch
 * script, sbatch --wrap, salloc's shell): the job's other tasks idle. */
void train_alone_warning(const run *r);

/* Labels per sample of a dataset: 1, or the window length of token data. */
static inline int train_label_count(const cdl_dataset *d)
{
    return d->label_len > 1 ? d->label_len : 1;
}

#endif
