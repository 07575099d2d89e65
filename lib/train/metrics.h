/* The --metrics file (metrics.c): JSON lines, one object per line, each
 * with "type", "run_id" and "rank":
 *   {"type":"config", ...}  at every start: version, world size, backend,
 *                           and every option's effective value ("config")
 *   {"type":"step", ...}    every --metrics-every steps
 *   {"type":"eval", ...}    every --eval-every steps: validation mid-epoch
 *   {"type":"epoch", ...}   after each epoch's validation
 *   {"type":"test", ...}    the test set, once at the end (--val-split)
 * docs/metrics.md describes every key. Written by rank 0 only. */
#ifndef CDL_TRAIN_METRICS_H
#define CDL_TRAIN_METRICS_H

#include <stdio.h>

#include <cdl/cdl.h>

/* A run's identity: 32 hex digits, drawn at a fresh start, kept in the
 * checkpoint's metadata ("run_id") so a resumed run keeps it. */
enum { RUN_ID_LEN = 32 };
int run_id_new(char out[RUN_ID_LEN + 1]);
/* 1 if s is a run id as run_id_new makes them (checkpoints are input). */
int run_id_valid(const char *s);

/* What the config record says besides the options. */
typedef struct run_info {
    const char *run_id;
    int rank, world;
    const char *backend;      /* the compute backend's name: "cpu", "cuda" */
    int threads;
    long start_step;          /* > 0: resumed at this step */
    long steps_per_epoch;
} run_info;

typedef struct step_stats {
    int epoch;                /* 0-based */
    long step;                /* optimizer steps done */
    double loss, acc;         /* mean over rank 0's samples since the last record */
    double lr, samples_per_sec;
    double grad_norm;         /* NAN when not computed */
    int grad_norm_taken;      /* computed: then NaN or inf is the step's (it diverged) */
    double tokens_per_sec;    /* sequence models (else 0): all ranks */
    double mfu;               /* model FLOPs utilisation, NAN = n/a */
} step_stats;

struct epoch_stats;

int metrics_config(FILE *f, const cdl_train_config *cfg, const run_info *ri);
int metrics_step(FILE *f, const char *run_id, int rank, const step_stats *s);
int metrics_epoch(FILE *f, const char *run_id, int rank, const struct epoch_stats *s);
int metrics_eval(FILE *f, const char *run_id, int rank, int epoch, long step, double loss,
                 double acc);
int metrics_test(FILE *f, const char *run_id, int rank, double loss, double acc, int samples);

/* 1 when the file at path ends run_id's records with a test record (no
 * step, eval or epoch record of the run after it): the final weights'
 * test is recorded. 0 when not (or no file), -1 on a read error. */
int metrics_tested(const char *path, const char *run_id);

/* --resume never must not add a second run to a directory or file that
 * holds one: -1 naming what is there and what to do, 0 when unused. */
int metrics_refuse_used(const cdl_train_config *cfg);

#endif
