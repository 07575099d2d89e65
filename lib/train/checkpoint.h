/* Checkpoint files and the run's position in them (checkpoint.c, config.c).
 * Only rank 0 writes; every rank reads. */
#ifndef CDL_TRAIN_CHECKPOINT_H
#define CDL_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <sys/stat.h>

#include <cdl/cdl.h>

/* Where a run stands: everything besides tensors that resuming needs. */
typedef struct train_position {
    int epoch;                /* epoch in progress (0-based) */
    long batch;               /* batches of that epoch already done */
    long step;                /* optimizer steps done in total */
    int world;                /* world size that wrote it */
    int threads;              /* compute threads of the CPU run that wrote it (metadata
                               * compute_threads; 0: unknown or a GPU's) */
    int fast_conv;            /* the CPU run's --fast-conv (metadata fast_conv: 0 or 1;
                               * -1: unknown, older files or a GPU's) */
    double best_val_loss;     /* lowest validation loss so far (INFINITY if none) */
    double loss_sum;          /* running sums of the epoch in progress (this rank, */
    double correct, seen;     /* so epoch metrics survive a mid-epoch restart) */
    long samples;             /* training samples of the dataset (set before loading) */
    long val_samples;         /* of them carved out for validation (--val-split) */
    int val_folder;           /* validation on a folder of its own (an image folder's val/):
                               * metadata val_folder 1, val_samples 0 */
    const char *class_names;  /* the dataset's class names, one per line (NULL: none) */
    const char *feature_columns;   /* a table's feature column names, one per line, and */
    const char *label_name;        /* its label column's (NULL: not a table) */
    const cdl_dataset *data;  /* the training split: its sample shape and normalisation go
                               * into the metadata for cdl-eval/cdl-predict (NULL: left out) */
    int unverified;           /* loaded from a file without checksums (older cdl) */
    char run_id[33];          /* the run's identity (metrics.h; RUN_ID_LEN digits) */
    int validation_due;       /* a signal stopped the run at a step that owed a validation
                               * (--eval-every's, or the run's end at --max-steps): the
                               * resume does it first (metadata validation_due, 1 if set) */
    int batch_size, accum;    /* --batch-size, --accum-steps of the run that wrote it (loaded
                               * from its configuration; 0 where it has none) */
    char fingerprint[32];     /* the training split's data_fingerprint (metadata
                               * data_fingerprint, compared on resume; "" = none) */
} train_position;

int train_ckpt_save(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    const train_position *pos);
/* Loads model weights, optimizer state and position from path, checking
 * that the file belongs to this model and optimizer. */
int train_ckpt_load(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    train_position *pos);

/* resume_check.c: refuses a resume whose configuration differs from the
 * one stored in f (other than in the settings cfg->resume_allow names),
 * listing every change, the text of the model's spec file (spec_text, or
 * NULL for a built-in) included; train_resume_allow_check validates such a
 * list. */
int ckpt_check_config(const cdl_st_file *f, const cdl_train_config *cfg, train_position *pos,
                      const char *spec_text);
int train_resume_allow_check(const char *list);
/* The settings where two configurations (train_config_json's objects)
 * differ, as "--batch-size 64 -> 32, ..." into msg ("" when none): those a
 * resume compares (a --dataset KIND:PATH by its kind), the optimizer and
 * --max-steps. -1 on error. */
int train_config_differences(const char *ref, const char *mine, char *msg, size_t len);

/* realign.c: the batch geometry of a run, and the position of a checkpoint
 * written with geometry was in one with geometry now. *batch (batches of
 * the unfinished epoch done, in was's batches) and *step (optimizer steps
 * done) become now's; steps_now is now's optimizer steps per epoch. *exact
 * is 0 where the world size changed (the epoch continues at about the same
 * fraction). A --batch-size change at which no whole number of new batches
 * is done is refused (-1, cdl_error saying what to do): samples would be
 * skipped or repeated. */
typedef struct train_geometry {
    int world, batch_size, accum;
    long batches;             /* batches of an epoch per rank */
} train_geometry;
int train_resume_realign(const train_geometry *was, const train_geometry *now, int epoch,
                         long steps_now, long *batch, long *step, int *exact);

/* ckpt_dir.c: checks that dir is a writable directory, takes its lock
 * (*lock_fd: an open descriptor holding flock on dir/.lock, -1 where the
 * file system has no locks; closing it releases the lock) and removes the
 * temporary files interrupted checkpoint writes left there (rank 0, before
 * the first step); an error if another live run holds the lock. Whether
 * path (last.safetensors) exists: 1, 0, or -1 for a link whose target is
 * gone (an unmounted file system must not restart the run from scratch). */
int ckpt_dir_prepare(const char *dir, int *lock_fd);
int ckpt_last_present(const char *path);
/* An error naming the file and its owner when name in dir (st: its lstat)
 * belongs to an account other than this one and root: ckpt_dir_prepare
 * refuses such a last, best or numbered checkpoint or .lock (a link too),
 * and ckpt_last_present such a last. 0 otherwise. */
int ckpt_file_foreign(const char *dir, const char *name, const struct stat *st);

/* The run's configuration as one JSON object (config.c), stored in each
 * checkpoint's metadata and printed by --verbose runs. */
int train_config_json(const cdl_train_config *cfg, char *buf, size_t len);
/* --decay-params as its option value: "auto", "all", "2d". */
const char *train_decay_name(int decay_params);
/* --val-split as the token readers take it (cdl_dataset_options.val_split):
 * the config's -1 (default) is the reader's 0 (10 %), its 0 (none) -1. */
double train_token_val_split(const cdl_train_config *c);

#endif
