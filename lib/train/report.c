/* What a run tells its user: a live bar on a terminal, one plain line per
 * epoch otherwise, JSON lines for --metrics (metrics.c) and TensorBoard
 * events for --tensorboard (tboard.c). Only rank 0 speaks. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/core/log.h"

#include "metrics.h"
#include "owned.h"
#include "report.h"
#include "tfevents.h"

struct train_report {
    int rank;
    int bar;                 /* live progress bar on stderr */
    int quiet;
    int epochs;
    long max_steps;          /* --max-steps, 0: none */
    FILE *metrics;
    char metrics_path[1024];
    char run_id[RUN_ID_LEN + 1];
    tfev *tb;                /* --tensorboard */
    double last_draw;
    int bar_epoch;           /* the ETA's epoch, first batch and time */
    long bar_b0;
    double bar_t0;
    void (*on_record)(void *ctx, const cdl_train_record *rec);   /* rank 0's */
    void *on_record_ctx;
    /* A --metrics or --tensorboard write failed mid-run (a full disk):
     * nothing more is written there, and its error waits in `failed` for
     * the run to stop at the next step with a checkpoint (loop.c). */
    char failed[1024];
};

/* A record that could not be written during training (rc != 0, its
 * error in cdl_last_error): said now, on stderr, and kept for the stop
 * it causes; the run goes on to its next step, where all ranks agree to
 * stop and write a checkpoint. A step's work is not lost for a line of
 * metrics. Always 0: a later failure keeps the first one's error. */
static int record_failed(train_report *r, int rc)
{
    if (rc == 0)
        return 0;
    if (!r->failed[0]) {
        snprintf(r->failed, sizeof r->failed, "%s", cdl_last_error());
        train_report_warning(r, "%s: no more records are written; the run "
                             "stops after this step, with a checkpoint where --ckpt-dir is "
                             "given", r->failed);
    }
    if (r->metrics)
        fclose(r->metrics);
    r->metrics = NULL;
    tfev_close(r->tb);
    r->tb = NULL;
    return 0;
}

const char *train_report_failed(const train_report *r)
{
    return r->failed[0] ? r->failed : NULL;
}

/* A record with the fields its type does not fill at their "none" value. */
static cdl_train_record record_of(enum cdl_record_type type, int epoch, long step)
{
    return (cdl_train_record){
        .size = sizeof(cdl_train_record), .type = type, .epoch = epoch, .step = step,
        .val_loss = NAN, .val_acc = NAN, .lr = NAN, .mfu = NAN, .grad_norm = NAN,
    };
}

static void hand_on(const train_report *r, const cdl_train_record *rec)
{
    if (r->on_record && r->rank == 0)
        r->on_record(r->on_record_ctx, rec);
}

train_report *train_report_open(const cdl_train_config *cfg, int rank)
{
    train_report *r = cdl_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->rank = rank;
    r->quiet = cfg->quiet;
    r->on_record = cfg->on_record;
    r->on_record_ctx = cfg->on_record_ctx;
    r->epochs = cfg->epochs;
    r->max_steps = cfg->max_steps > 0 ? cfg->max_steps : 0;
    /* By default only on a terminal, so a log file (Slurm's output, a
     * pipe) never gets the bar's carriage returns; never into on_log. */
    r->bar = rank == 0 && !cfg->quiet && !log_sink_active() &&
             (cfg->progress == 1 || (cfg->progress < 0 && isatty(STDERR_FILENO)));
    r->bar_epoch = -1;
    if (rank == 0 && cfg->metrics[0]) {
        r->metrics = train_open_append("--metrics", cfg->metrics);
        if (!r->metrics) {
            cdl_free(r);
            return NULL;
        }
        snprintf(r->metrics_path, sizeof r->metrics_path, "%s", cfg->metrics);
    }
    if (rank == 0 && cfg->tensorboard[0] && !(r->tb = tfev_open(cfg->tensorboard))) {
        train_report_free(r);
        return NULL;
    }
    return r;
}

void train_report_free(train_report *r)
{
    if (!r)
        return;
    if (r->metrics)
        fclose(r->metrics);
    tfev_close(r->tb);
    cdl_free(r);
}

void train_format_duration(double s, char *buf, size_t len)
{
    if (!(s >= 0) || s > 99 * 86400.0) {   /* NaN, negative or absurd: no guess */
        snprintf(buf, len, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void train_report_progress(train_report *r, int epoch, long b, long nb, long step, double loss,
                           double acc, double imgs_per_sec, double tokens_per_sec)
{
    if (!r->bar)
        return;
    double t = train_now();
    /* The epoch's clock for the ETA starts at its first drawn batch (a
     * resumed epoch starts in its middle). */
    if (epoch != r->bar_epoch || b <= r->bar_b0) {
        r->bar_epoch = epoch;
        r->bar_b0 = b;
        r->bar_t0 = t;
    }
    /* The epoch's and the run's last step are always drawn. */
    if (b < nb && step != r->max_steps && t - r->last_draw < 0.1)
        return;
    r->last_draw = t;
    enum { WIDTH = 30 };
    int fill = nb > 0 ? (int)(WIDTH * b / nb) : WIDTH;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    /* ETA from this epoch's pace: the rest of the epoch, and of the run
     * (the training batches only: validation adds its own time), neither
     * past --max-steps (counted, a run of 100 steps in 50 long epochs
     * showed the 50 epochs' time). */
    char eta[32] = "?", run[32] = "?";
    if (b > r->bar_b0 && t > r->bar_t0) {
        double per_batch = (t - r->bar_t0) / (double)(b - r->bar_b0);
        double left_epoch = (double)(nb - b);
        double left_run = left_epoch + (double)nb * (r->epochs - epoch - 1);
        if (r->max_steps > 0) {
            double left_steps = step < r->max_steps ? (double)(r->max_steps - step) : 0;
            left_epoch = fmin(left_epoch, left_steps);
            left_run = fmin(left_run, left_steps);
        }
        train_format_duration(per_batch * left_epoch, eta, sizeof eta);
        train_format_duration(per_batch * left_run, run, sizeof run);
    }
    /* The epoch line's unit: a language model's windows are no images. */
    int tok = tokens_per_sec > 0;
    fprintf(stderr, "\r\033[Kepoch %d/%d [%s] %ld/%ld  loss %.4f  acc %5.2f%%  %.0f %s/s  "
            "ETA %s (run %s)", epoch + 1, r->epochs, bar, b, nb, loss, 100 * acc,
            tok ? tokens_per_sec : imgs_per_sec, tok ? "tok" : "img", eta, run);
    fflush(stderr);
}

int train_report_epoch(train_report *r, const epoch_stats *s)
{
    if (r->rank != 0)
        return 0;
    if (r->bar)
        fprintf(stderr, "\r\033[K");
    if (!r->quiet && s->tokens_per_sec > 0) {
        /* Sequence models: accuracy of the next token, tokens/s, MFU. */
        char mfu[16] = "n/a";
        if (isfinite(s->mfu))
            snprintf(mfu, sizeof mfu, "%.1f%%", 100 * s->mfu);
        log_line(CDL_LOG_INFO, stdout,
                 "epoch %d/%d  train loss %.4f acc %6.2f%%  val loss %.4f acc %6.2f%%  "
                 "%8.0f tok/s  MFU %s  %6.2f s  lr %.5g",
                 s->epoch + 1, r->epochs, s->train_loss, 100 * s->train_acc, s->val_loss,
                 100 * s->val_acc, s->tokens_per_sec, mfu, s->seconds, s->lr);
    } else if (!r->quiet) {
        log_line(CDL_LOG_INFO, stdout,
                 "epoch %d/%d  train loss %.4f acc %6.2f%%  val loss %.4f acc %6.2f%%  "
                 "%7.0f img/s  %6.2f s  lr %.5g",
                 s->epoch + 1, r->epochs, s->train_loss, 100 * s->train_acc, s->val_loss,
                 100 * s->val_acc, s->samples_per_sec, s->seconds, s->lr);
    }
    cdl_train_record rec = record_of(CDL_RECORD_EPOCH, s->epoch + 1, s->step);
    rec.loss = s->train_loss;
    rec.acc = s->train_acc;
    rec.val_loss = s->val_loss;
    rec.val_acc = s->val_acc;
    rec.lr = s->lr;
    rec.samples_per_sec = s->samples_per_sec;
    rec.tokens_per_sec = s->tokens_per_sec;
    rec.mfu = s->mfu;
    rec.seconds = s->seconds;
    hand_on(r, &rec);
    if (r->metrics && metrics_epoch(r->metrics, r->run_id, r->rank, s) != 0)
        return record_failed(r, cdl_error("%s: %s", r->metrics_path, cdl_last_error()));
    return record_failed(r, r->tb ? tboard_epoch(r->tb, s) : 0);
}

int train_report_start(train_report *r, const cdl_train_config *cfg, const run_info *ri)
{
    snprintf(r->run_id, sizeof r->run_id, "%s", ri->run_id);
    if (r->metrics && metrics_config(r->metrics, cfg, ri) != 0)
        return cdl_error("%s: %s", r->metrics_path, cdl_last_error());
    return r->tb ? tboard_start(r->tb, cfg, ri) : 0;
}

int train_report_step(train_report *r, const step_stats *s)
{
    cdl_train_record rec = record_of(CDL_RECORD_STEP, s->epoch + 1, s->step);
    rec.loss = s->loss;
    rec.acc = s->acc;
    rec.lr = s->lr;
    rec.samples_per_sec = s->samples_per_sec;
    rec.tokens_per_sec = s->tokens_per_sec;
    rec.mfu = s->mfu;
    rec.grad_norm = s->grad_norm;
    rec.grad_norm_taken = s->grad_norm_taken;
    hand_on(r, &rec);
    if (r->metrics && metrics_step(r->metrics, r->run_id, r->rank, s) != 0)
        return record_failed(r, cdl_error("%s: %s", r->metrics_path, cdl_last_error()));
    return record_failed(r, r->tb ? tboard_step(r->tb, s) : 0);
}

int train_report_test(train_report *r, long step, double loss, double acc, int samples)
{
    if (r->rank != 0)
        return 0;
    if (!r->quiet) {
        log_line(CDL_LOG_INFO, stdout, "test  loss %.4f acc %6.2f%%  (%d sample%s, final weights)",
                 loss, 100 * acc, samples, samples == 1 ? "" : "s");
    }
    cdl_train_record rec = record_of(CDL_RECORD_TEST, 0, 0);
    rec.loss = loss;
    rec.acc = acc;
    rec.samples = samples;
    hand_on(r, &rec);
    if (r->metrics && metrics_test(r->metrics, r->run_id, r->rank, loss, acc, samples) != 0)
        return -1;
    return r->tb ? tboard_test(r->tb, step, loss, acc) : 0;
}

int train_report_tested(train_report *r)
{
    if (r->rank != 0 || !r->metrics)
        return 0;
    return metrics_tested(r->metrics_path, r->run_id);
}

int train_report_eval(train_report *r, int epoch, long step, double loss, double acc)
{
    if (r->rank != 0)
        return 0;
    if (r->bar)
        fprintf(stderr, "\r\033[K");
    if (!r->quiet) {
        log_line(CDL_LOG_INFO, stdout, "epoch %d/%d  step %ld  val loss %.4f acc %6.2f%%",
                 epoch + 1, r->epochs, step, loss, 100 * acc);
    }
    cdl_train_record rec = record_of(CDL_RECORD_EVAL, epoch + 1, step);
    rec.loss = loss;
    rec.acc = acc;
    hand_on(r, &rec);
    if (r->metrics && metrics_eval(r->metrics, r->run_id, r->rank, epoch, step, loss, acc) != 0)
        return record_failed(r, cdl_error("%s: %s", r->metrics_path, cdl_last_error()));
    return record_failed(r, r->tb ? tboard_eval(r->tb, step, loss, acc) : 0);
}

static void report_line(train_report *r, int level, const char *fmt, va_list ap)
{
    if (r->bar)
        fprintf(stderr, "\r\033[K");
    log_vline(level, stderr, fmt, ap);
}

void train_report_note(train_report *r, const char *fmt, ...)
{
    if (r->rank != 0 || r->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    report_line(r, CDL_LOG_INFO, fmt, ap);
    va_end(ap);
}

void train_report_warning(train_report *r, const char *fmt, ...)
{
    if (r->rank != 0)
        return;
    /* "cdl-train: warning: ", as cdl-train's other warnings and errors
     * begin: the call sites give the rest. */
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->bar)
        fprintf(stderr, "\r\033[K");
    log_line(CDL_LOG_WARNING, stderr, "cdl-train: warning: %s", msg);
}
