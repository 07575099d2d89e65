/* The --metrics file's JSON lines (metrics.h; keys in docs/metrics.md). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt/json.h"
#include "../dist/util.h"
#include "checkpoint.h"
#include "metrics.h"
#include "report.h"

int run_id_new(char out[RUN_ID_LEN + 1])
{
    unsigned char b[RUN_ID_LEN / 2];
    if (dist_random(b, sizeof b) != 0)
        return -1;
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

int run_id_valid(const char *s)
{
    size_t n = strspn(s, "0123456789abcdef");
    return n == RUN_ID_LEN && s[n] == '\0';
}

static void putf(json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(json_buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->failed = 1;
    else
        json_buf_put(b, tmp, (size_t)n);
}

/* ,"key":"value" */
static void put_str(json_buf *b, const char *key, const char *value)
{
    putf(b, ",\"%s\":", key);
    json_buf_string(b, value);
}

/* Sequence models: ,"tokens_per_sec":X[,"mfu":Y] (mfu left out when n/a). */
static void put_speed(json_buf *b, double tokens_per_sec, double mfu)
{
    if (!(tokens_per_sec > 0))
        return;
    putf(b, ",\"tokens_per_sec\":%.1f", tokens_per_sec);
    if (isfinite(mfu))
        putf(b, ",\"mfu\":%.6f", mfu);
}

/* Every record starts {"type":T,"run_id":ID,"rank":R */
static void head(json_buf *b, const char *type, const char *run_id, int rank)
{
    putf(b, "{\"type\":\"%s\",\"run_id\":\"%s\",\"rank\":%d", type, run_id, rank);
}

/* Writes the record in b as one line, with one write() past stdio (a
 * crash loses no finished line). A failed or short write (a full disk or
 * quota) is cut off again, so the file holds whole lines only: the run
 * that resumes after space was freed appends to it, and its first record
 * would otherwise be glued to half of one and lost to every reader. */
static int emit(FILE *f, json_buf *b)
{
    json_buf_put(b, "}\n", 2);
    if (b->failed) {
        json_buf_free(b);
        return cdl_error("--metrics: out of memory formatting a record");
    }
    int fd = fileno(f), err = fflush(f) == 0 ? 0 : errno;
    /* A pipe or terminal (--metrics /dev/stdout) has no offset to cut back
     * to (ESPIPE): written all the same. */
    off_t start = err ? -1 : lseek(fd, 0, SEEK_END);
    if (start < 0 && !err && errno != ESPIPE)
        err = errno;
    for (size_t done = 0; !err && done < b->len;) {
        ssize_t w = write(fd, b->data + done, b->len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            err = w < 0 ? errno : ENOSPC;
        else
            done += (size_t)w;
    }
    json_buf_free(b);
    if (!err)
        return 0;
    if (start >= 0 && ftruncate(fd, start) != 0) {
        /* Nothing more to do: the error below stops the run. */
    }
    return cdl_error("writing the --metrics file failed: %s: %s", strerror(err),
                     err == ENOSPC || err == EDQUOT
                         ? "its file system is full or over quota: free space there or give "
                           "--metrics another file, then resume (the file holds whole records "
                           "up to this one)"
                     : err == EFBIG ? "the file size limit was reached (ulimit -f): raise it"
                                    : "check the file system");
}

int metrics_config(FILE *f, const cdl_train_config *c, const run_info *ri)
{
    char opts[16384];
    if (train_config_json(c, opts, sizeof opts) != 0)
        return -1;
    json_buf b = {0};
    head(&b, "config", ri->run_id, ri->rank);
    put_str(&b, "version", cdl_version());
    putf(&b, ",\"time\":%lld,\"world\":%d", (long long)time(NULL), ri->world);
    put_str(&b, "backend", ri->backend);
    putf(&b, ",\"backend_threads\":%d,\"steps_per_epoch\":%ld,\"start_step\":%ld",
         ri->threads, ri->steps_per_epoch, ri->start_step);
    /* The options: the checkpoint's configuration (train_config_json) and
     * the settings it leaves out, which do not change the numbers. */
    json_buf_puts(&b, ",\"config\":");
    json_buf_put(&b, opts, strlen(opts) - 1);   /* without its '}' */
    put_str(&b, "ckpt_dir", c->ckpt_dir);
    put_str(&b, "resume", c->resume);
    put_str(&b, "resume_allow", c->resume_allow);
    put_str(&b, "metrics", c->metrics);
    put_str(&b, "tensorboard", c->tensorboard);
    putf(&b, ",\"metrics_every\":%ld,\"eval_every\":%ld,\"peak_tflops\":%.9g", c->metrics_every,
         c->eval_every, c->peak_tflops);
    put_str(&b, "dist_backend", c->dist_backend);
    put_str(&b, "precision", cdl_precision_name(c->precision));
    putf(&b, ",\"synthetic_size\":%d,\"tf32_conv\":%d,\"tf32_matmul\":%d,\"fast_conv\":%d,"
         "\"cuda_graphs\":%d,\"ddp_bucket_kb\":%ld,\"progress\":%d,\"quiet\":%d",
         c->synthetic_n, c->tf32_conv, c->tf32_matmul, c->fast_conv, c->cuda_graphs,
         c->ddp_bucket_kb, c->progress, c->quiet);
    /* Data and initialisation options (docs/data.md, docs/training.md)
     * that the checkpoint's configuration leaves out. */
    putf(&b, ",\"channels\":%d,\"skip_bad_files\":%d", c->image_channels, c->skip_bad_files);
    put_str(&b, "init", c->init);
    put_str(&b, "init_ignore", c->init_ignore);
    put_str(&b, "stage", c->stage);
    putf(&b, ",\"shard_optimizer\":%d", c->shard_optimizer);
    json_buf_put(&b, "}", 1);
    return emit(f, &b);
}

int metrics_step(FILE *f, const char *run_id, int rank, const step_stats *s)
{
    json_buf b = {0};
    head(&b, "step", run_id, rank);
    putf(&b, ",\"epoch\":%d,\"step\":%ld,\"loss\":%.6f,\"acc\":%.6f,\"lr\":%.6g,"
         "\"samples_per_sec\":%.1f",
         s->epoch + 1, s->step, s->loss, s->acc, s->lr, s->samples_per_sec);
    /* JSON has no NaN or infinity: a diverged step's norm as the string
     * "nan" or "inf" (Python's float() reads both), not left out. */
    if (s->grad_norm_taken && isnan(s->grad_norm))
        putf(&b, ",\"grad_norm\":\"nan\"");
    else if (s->grad_norm_taken && isinf(s->grad_norm))
        putf(&b, ",\"grad_norm\":\"%sinf\"", s->grad_norm < 0 ? "-" : "");
    else if (isfinite(s->grad_norm))
        putf(&b, ",\"grad_norm\":%.6g", s->grad_norm);
    put_speed(&b, s->tokens_per_sec, s->mfu);
    return emit(f, &b);
}

int metrics_epoch(FILE *f, const char *run_id, int rank, const epoch_stats *s)
{
    json_buf b = {0};
    head(&b, "epoch", run_id, rank);
    putf(&b, ",\"epoch\":%d,\"step\":%ld,\"train_loss\":%.6f,\"train_acc\":%.6f,"
         "\"val_loss\":%.6f,\"val_acc\":%.6f",
         s->epoch + 1, s->step, s->train_loss, s->train_acc, s->val_loss, s->val_acc);
    /* images_per_sec, the older name, where its samples are pictures or
     * rows: a sequence model's are windows, which it misnamed. */
    if (!(s->tokens_per_sec > 0))
        putf(&b, ",\"images_per_sec\":%.1f", s->samples_per_sec);
    putf(&b, ",\"samples_per_sec\":%.1f,\"seconds\":%.3f,\"lr\":%.6g", s->samples_per_sec,
         s->seconds, s->lr);
    put_speed(&b, s->tokens_per_sec, s->mfu);
    return emit(f, &b);
}

int metrics_eval(FILE *f, const char *run_id, int rank, int epoch, long step, double loss,
                 double acc)
{
    json_buf b = {0};
    head(&b, "eval", run_id, rank);
    putf(&b, ",\"epoch\":%d,\"step\":%ld,\"val_loss\":%.6f,\"val_acc\":%.6f", epoch + 1, step,
         loss, acc);
    return emit(f, &b);
}

int metrics_test(FILE *f, const char *run_id, int rank, double loss, double acc, int samples)
{
    json_buf b = {0};
    head(&b, "test", run_id, rank);
    putf(&b, ",\"test_loss\":%.6f,\"test_acc\":%.6f,\"test_samples\":%d", loss, acc, samples);
    return emit(f, &b);
}

/* 1 if path is there and not empty, 0 if absent or empty, -1 on error. */
static int holds(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? 0 : cdl_error("cannot check %s: %s", path, strerror(errno));
    return st.st_size > 0;
}

int metrics_refuse_used(const cdl_train_config *c)
{
    if (strcmp(c->resume, "never") != 0)
        return 0;
    char path[1100];
    const char *what = NULL;
    int n = (int)sizeof c->ckpt_dir - 1;
    for (int i = 0; c->ckpt_dir[0] && i < 2 && !what; i++) {
        snprintf(path, sizeof path, "%.*s/%s.safetensors", n, c->ckpt_dir, i ? "best" : "last");
        int h = holds(path);
        if (h < 0)
            return -1;
        if (h)
            what = path;
    }
    if (!what && c->metrics[0]) {
        int h = holds(c->metrics);
        if (h < 0)
            return -1;
        if (h)
            what = c->metrics;
    }
    if (!what && c->tensorboard[0]) {
        DIR *d = opendir(c->tensorboard);
        struct dirent *e;
        while (d && !what && (e = readdir(d)))
            if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
                snprintf(path, sizeof path, "--tensorboard %.1000s", c->tensorboard);
                what = path;
            }
        if (d)
            closedir(d);
    }
    if (!what)
        return 0;
    return cdl_error("--resume never: %s already holds a run, and a second one would be mixed "
                     "into it: continue that run with --resume auto, or give this one its own "
                     "--ckpt-dir, --metrics and --tensorboard, or remove the old files first", what);
}
