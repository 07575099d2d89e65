/* Training checkpoints: the model's tensors under their PyTorch names (so
 * torch's load_state_dict takes them as they are), the optimizer's state as
 * tensors named optimizer.<state>.<parameter> (shaped like the parameter:
 * nothing large in the header, whatever the model's size), and in
 * __metadata__ the position in the run and the run's configuration. RNG
 * state is the seed: every random draw (shuffle, augmentation, dropout) is a
 * pure function of seed, epoch and step.
 *
 * The model's non-trainable buffers (batchnorm2d's running_mean, running_var
 * and num_batches_tracked) are tensors under their PyTorch names too;
 * num_batches_tracked, a float count on the device, is I64 in the file, as
 * PyTorch keeps it.
 *
 * Tensor order in the file (the data section's order): the I64 counts (8
 * bytes each, first so that they stay 8-byte aligned), the float buffers,
 * the model parameters in the model's order, then the optimizer state,
 * state by state. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/json.h"
#include "lib/data/internal.h"
#include "checkpoint.h"
#include "metrics.h"

/* Format 3 stores the optimizer state as tensors; format 2 had it as
 * base64 in the header (which capped Adam models at ~9M parameters) and
 * still loads, as does format 1 (no checksums; loads with a note). Formats
 * 2 and 3 must verify. */
#define CKPT_FORMAT "cdl-checkpoint-3"
#define CKPT_FORMAT_2 "cdl-checkpoint-2"
#define CKPT_FORMAT_1 "cdl-checkpoint-1"
#define OPT_PREFIX "optimizer."

enum { MAX_META = 48 };   /* train_ckpt_save adds at most 35 (token data, class names) */
/* Largest world size a checkpoint may record (a sanity bound, far above any
 * real job). */
#define CKPT_MAX_WORLD 1000000

typedef struct meta_list {
    cdl_st_meta items[MAX_META];
    char *owned[MAX_META];
    int n;
} meta_list;

static void meta_add(meta_list *l, const char *key, char *value_owned)
{
    l->items[l->n].key = key;
    l->items[l->n].value = value_owned;
    l->owned[l->n] = value_owned;
    l->n++;
}

static char *fmt_dup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A cdl_malloc'd formatted string of any length (the model's spec path
 * may be long). */
static char *fmt_dup(const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n < 0 ? NULL : cdl_malloc((size_t)n + 1);
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap2);
    else if (n < 0)
        cdl_error("checkpoint metadata: cannot format '%s'", fmt);
    va_end(ap2);
    return s;
}

/* The data path for cdl-eval and cdl-predict, absolute: a relative one
 * ("text:shakespeare.txt", --data-dir data) names a file in the directory
 * cdl-train ran in, and read from anywhere else it named nothing (or
 * another file). The config keeps the path as given (a resume compares
 * it). */
static char *data_path_dup(const char *dir)
{
    char cwd[4096];
    if (!dir[0] || dir[0] == '/' || !getcwd(cwd, sizeof cwd))
        return fmt_dup("%s", dir);
    return fmt_dup("%s/%s", strcmp(cwd, "/") ? cwd : "", dir[0] == '.' && dir[1] == '/' ?
                   dir + 2 : dir);
}

/* nanoGPT's itos table (n strings) for cdl-generate: one string a line,
 * with '\\' written "\\\\" and a line break "\\n" (a vocabulary has both). */
static char *itos_dup(char *const *itos, int n)
{
    size_t len = 1;
    for (int k = 0; k < n; k++)
        len += 2 * strlen(itos[k]) + 1;
    char *s = cdl_malloc(len), *p = s;
    for (int k = 0; s && k < n; k++) {
        for (const char *q = itos[k]; *q; q++) {
            if (*q == '\\' || *q == '\n')
                *p++ = '\\';
            *p++ = *q == '\n' ? 'n' : *q;
        }
        *p++ = k + 1 < n ? '\n' : '\0';
    }
    if (s && p == s)
        *p = '\0';
    return s;
}

static float *download(cdl_backend *be, const float *dev, size_t n)
{
    float *h = cdl_malloc(n * sizeof *h + 1);
    if (h)
        be->ops->to_host(be, h, dev, n * sizeof *h);
    return h;
}

/* The file's tensor name of state buffer `state` of the parameter named
 * param: optimizer.<state>.<param> (cdl_malloc'd, NULL on failure). */
static char *state_tensor_name(const char *state, const char *param)
{
    return fmt_dup(OPT_PREFIX "%s.%s", state, param);
}

/* The tensors a checkpoint holds, in host memory: views, names and copies. */
typedef struct ckpt_tensors {
    cdl_st_tensor *t;
    int n;
    char **names;           /* owned names (NULL where the model's own) */
    float *host[3];         /* parameters, then each optimizer state */
    float *bufs;            /* the model's buffers */
    int64_t *counts;        /* is_count buffers as integers, one slot per buffer float */
} ckpt_tensors;

static void ckpt_tensors_free(ckpt_tensors *c)
{
    for (int i = 0; c->names && i < c->n; i++)
        cdl_free(c->names[i]);
    cdl_free(c->names);
    cdl_free(c->t);
    for (int i = 0; i < 3; i++)
        cdl_free(c->host[i]);
    cdl_free(c->bufs);
    cdl_free(c->counts);
}

/* Adds the model's buffers from the host copy c->bufs: the counts (as I64)
 * when counts is 1, the float buffers when 0. */
static void add_buffers(ckpt_tensors *c, cdl_model *m, int counts)
{
    for (int i = 0; i < cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = cdl_model_buffer(m, i);
        if (!v->is_count != !counts)
            continue;
        cdl_st_tensor *t = &c->t[c->n++];
        t->name = v->name;
        t->ndim = v->ndim;
        memcpy(t->shape, v->shape, sizeof v->shape);
        if (counts) {
            for (size_t k = 0; k < v->numel; k++)
                c->counts[v->offset + k] = (int64_t)c->bufs[v->offset + k];
            t->i64 = c->counts + v->offset;
        } else {
            t->data = c->bufs + v->offset;
        }
    }
}

/* Adds every parameter view of the model over the flat host buffer h,
 * under prefix.state (NULL: the model's own names). */
static int add_views(ckpt_tensors *c, cdl_model *m, const float *h, const char *state)
{
    for (int i = 0; i < cdl_model_nviews(m); i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        cdl_st_tensor *t = &c->t[c->n];
        if (state && !(c->names[c->n] = state_tensor_name(state, v->name)))
            return -1;
        t->name = state ? c->names[c->n] : v->name;
        t->data = h + v->offset;
        t->ndim = v->ndim;
        memcpy(t->shape, v->shape, sizeof v->shape);
        c->n++;
    }
    /* A tied weight also under its other name (lm_head.weight), so that
     * PyTorch's load_state_dict(strict=True) finds every key; resume reads
     * the view's own name only. */
    for (int i = 0; !state && i < cdl_model_naliases(m); i++) {
        const cdl_param_view *v = cdl_model_alias(m, i);
        cdl_st_tensor *t = &c->t[c->n++];
        t->name = v->name;
        t->data = h + v->offset;
        t->ndim = v->ndim;
        memcpy(t->shape, v->shape, sizeof v->shape);
    }
    return 0;
}

/* Everything the file stores as tensors, downloaded from the device; o
 * NULL: the model's alone (cdl_model_save_weights). */
static int collect_tensors(ckpt_tensors *c, cdl_model *m, cdl_optim *o)
{
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m);
    int nv = cdl_model_nviews(m), ns = o ? cdl_optim_nstate(o) : 0;
    if (ns > 2)
        return cdl_error("checkpoint: the optimizer has %d state buffers; cdl stores at most 2",
                         ns);
    size_t nbf = cdl_model_nbuffer_floats(m);
    size_t cap = (size_t)nv * (size_t)(1 + ns) + (size_t)cdl_model_nbuffers(m) +
                 (size_t)cdl_model_naliases(m) + 1;
    c->t = cdl_calloc(cap, sizeof *c->t);
    c->names = cdl_calloc(cap, sizeof *c->names);
    if (!c->t || !c->names || !(c->host[0] = download(be, cdl_model_params(m), np)))
        return -1;
    if (nbf) {
        if (!(c->bufs = download(be, cdl_model_buffers(m), nbf)) ||
            !(c->counts = cdl_calloc(nbf, sizeof *c->counts)))
            return -1;
        add_buffers(c, m, 1);
        add_buffers(c, m, 0);
    }
    if (add_views(c, m, c->host[0], NULL))
        return -1;
    for (int i = 0; i < ns; i++)
        if (!(c->host[1 + i] = download(be, cdl_optim_state(o, i), np)) ||
            add_views(c, m, c->host[1 + i], cdl_optim_state_name(o, i)))
            return -1;
    return 0;
}

/* Refuses to store weights or optimizer state that hold a NaN or an
 * infinity: a step can diverge with a finite loss (an overflowing gradient
 * makes the update, not the forward pass, non-finite), and such a file would
 * replace the last good checkpoint with one every resume fails from at its
 * first step. The previous files stay as they were; the error names the
 * first such tensor and says how to go on. */
static int refuse_nonfinite(const ckpt_tensors *c, const char *path, long step, int clipping)
{
    size_t bad = 0;
    const char *first = NULL;
    for (int i = 0; i < c->n; i++) {
        const cdl_st_tensor *t = &c->t[i];
        if (!t->data)
            continue;
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (size_t)t->shape[d];
        for (size_t k = 0; k < numel; k++)
            if (!isfinite(t->data[k])) {
                bad++;
                first = first ? first : t->name;
            }
    }
    if (!bad)
        return 0;
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    return cdl_error("%s not written: %zu values of the model or its optimizer state after step "
                     "%ld are NaN or infinite (the first in %s): training diverged; the "
                     "checkpoints in %.*s are left as they were, from before: resume from "
                     "them with a lower learning rate (--lr X --resume-allow lr)%s",
                     path, bad, step, first, dirlen, dir,
                     clipping ? "" : ", or with the gradient norm clipped (--clip-grad 1 "
                                     "--resume-allow clip-grad)");
}

/* n floats as "v0,v1,...", each with the digits that read back to the
 * same float (%.9g); NULL when out of memory. */
static char *join_floats(const float *v, int n)
{
    char *s = cdl_malloc((size_t)n * 17 + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    s[0] = '\0';
    for (int k = 0; k < n; k++)
        at += (size_t)sprintf(s + at, "%s%.9g", k ? "," : "", (double)v[k]);
    return s;
}

int train_ckpt_save(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    const train_position *pos)
{
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m);
    int rc = -1;
    meta_list meta = {0};
    ckpt_tensors ct = {0};
    char *config = NULL;

    if (be->ops->sync(be) != 0)
        return -1;
    config = cdl_malloc(16384);
    if (!config || collect_tensors(&ct, m, o) || refuse_nonfinite(&ct, path, pos->step, cfg->clip_grad > 0))
        goto out;
    if (train_config_json(cfg, config, 16384) != 0)
        goto out;
    meta_add(&meta, "format", fmt_dup("%s", CKPT_FORMAT));
    meta_add(&meta, "cdl_version", fmt_dup("%s", cdl_version()));
    if (*cdl_build_id())   /* which build of that version */
        meta_add(&meta, "cdl_build", fmt_dup("%s", cdl_build_id()));
    meta_add(&meta, "config", config);
    config = NULL;
    meta_add(&meta, "model", fmt_dup("%s", cdl_model_get_spec(m)->source));
    /* The spec file as trained, so cdl-eval needs no file (headers are
     * UTF-8: a spec with other bytes in its comments is named only). */
    const char *spec_text = cdl_model_spec_text(m);
    if (spec_text && utf8_valid(spec_text, strlen(spec_text)))
        meta_add(&meta, "model_spec", fmt_dup("%s", spec_text));
    meta_add(&meta, "epoch", fmt_dup("%d", pos->epoch));
    meta_add(&meta, "batch_in_epoch", fmt_dup("%ld", pos->batch));
    meta_add(&meta, "step", fmt_dup("%ld", pos->step));
    meta_add(&meta, "world_size", fmt_dup("%d", pos->world));
    /* The CPU's sums are split by thread: another count resumes to other bits. */
    if (be->host_memory && be->threads > 0) {
        meta_add(&meta, "compute_threads", fmt_dup("%d", be->threads));
        meta_add(&meta, "fast_conv", fmt_dup("%d", cfg->fast_conv == 1));   /* likewise */
    }
    meta_add(&meta, "seed", fmt_dup("%" PRIu64, cfg->seed));
    meta_add(&meta, "best_val_loss", fmt_dup("%.17g", pos->best_val_loss));
    meta_add(&meta, "epoch_loss_sum", fmt_dup("%.17g", pos->loss_sum));
    meta_add(&meta, "epoch_correct", fmt_dup("%.17g", pos->correct));
    meta_add(&meta, "epoch_seen", fmt_dup("%.17g", pos->seen));
    meta_add(&meta, "optimizer", fmt_dup("%s", cdl_optim_kind_name(cdl_optim_get_config(o)->kind)));
    meta_add(&meta, "optimizer_steps", fmt_dup("%ld", cdl_optim_steps(o)));
    meta_add(&meta, "nparams", fmt_dup("%zu", np));
    meta_add(&meta, "train_samples", fmt_dup("%ld", pos->samples));
    if (pos->fingerprint[0])
        meta_add(&meta, "data_fingerprint", fmt_dup("%s", pos->fingerprint));
    if (pos->run_id[0])
        meta_add(&meta, "run_id", fmt_dup("%s", pos->run_id));
    if (pos->validation_due)
        meta_add(&meta, "validation_due", fmt_dup("1"));
    /* What cdl-eval and cdl-predict need to find the data again. */
    meta_add(&meta, "dataset", fmt_dup("%s", cfg->dataset));
    meta_add(&meta, "data_dir", data_path_dup(cfg->data_dir));
    meta_add(&meta, "val_samples", fmt_dup("%ld", pos->val_folder ? 0 : pos->val_samples));
    if (pos->val_folder)
        meta_add(&meta, "val_folder", fmt_dup("1"));
    meta_add(&meta, "synthetic_size", fmt_dup("%d", cfg->synthetic_n));
    /* Per position: a language model's outputs are positions x classes. */
    meta_add(&meta, "classes", fmt_dup("%d", cdl_model_outputs(m) / cdl_model_positions(m)));
    if (pos->class_names)
        meta_add(&meta, "class_names", fmt_dup("%s", pos->class_names));
    /* How the data was read and normalised, so cdl-eval and cdl-predict
     * prepare samples exactly as training did (the computed statistics of a
     * format's training split are not known from the test split). */
    meta_add(&meta, "image_size", fmt_dup("%d", cfg->image_size));
    meta_add(&meta, "image_channels", fmt_dup("%d", cfg->image_channels));
    meta_add(&meta, "label_column", fmt_dup("%s", cfg->label_column));
    /* A table's columns by name: cdl-predict matches a new table's to them
     * (by position, a reordered or renamed column would be read wrong). */
    if (pos->feature_columns && pos->label_name) {
        meta_add(&meta, "feature_columns", fmt_dup("%s", pos->feature_columns));
        meta_add(&meta, "label_name", fmt_dup("%s", pos->label_name));
    }
    meta_add(&meta, "jpeg_decode", fmt_dup("%s", cfg->jpeg_full ? "full" : "scaled"));
    if (pos->data && pos->data->tokens) {
        /* Token windows: ids, not normalised; cdl-generate needs the tokenizer. */
        const cdl_dataset *d = pos->data;
        meta_add(&meta, "input_shape", fmt_dup("%d,%d,%d", d->shape.c, d->shape.h, d->shape.w));
        meta_add(&meta, "tokens", fmt_dup("%s", d->token_bytes == 1 ? "bytes" : "uint16"));
        meta_add(&meta, "vocab_size", fmt_dup("%d", d->classes));
        meta_add(&meta, "block_size", fmt_dup("%d", d->label_len));
        /* The reader's val_split, so that cdl-eval reads the same windows. */
        meta_add(&meta, "token_val_split", fmt_dup("%.17g", train_token_val_split(cfg)));
        if (tokens_itos(d))
            meta_add(&meta, "itos", itos_dup(tokens_itos(d), d->classes));
    } else if (pos->data) {
        const cdl_dataset *d = pos->data;
        meta_add(&meta, "input_shape", fmt_dup("%d,%d,%d", d->shape.c, d->shape.h, d->shape.w));
        meta_add(&meta, "norm_mean", join_floats(d->channel_mean ? d->channel_mean : d->mean,
                                                 d->shape.c));
        meta_add(&meta, "norm_std", join_floats(d->channel_std ? d->channel_std : d->std,
                                                d->shape.c));
    }
    for (int i = 0; i < meta.n; i++)
        if (!meta.items[i].value)
            goto out;
    rc = cdl_st_write(path, ct.t, ct.n, meta.items, meta.n);
out:
    for (int i = 0; i < meta.n; i++)
        cdl_free(meta.owned[i]);
    cdl_free(config);
    ckpt_tensors_free(&ct);
    return rc;
}

/* A metadata value for messages: at most 40 characters, then an ellipsis
 * (crafted files can hold megabytes). */
static const char *shown(const char *s, char buf[48])
{
    snprintf(buf, 48, "%.40s%s", s, strlen(s) > 40 ? "..." : "");
    return buf;
}

static const char *meta_need(const cdl_st_file *f, const char *key)
{
    const char *s = cdl_st_meta_get(f, key);
    if (!s)
        cdl_error("%s: not a cdl checkpoint: metadata '%s' is missing "
                  "(use --resume never to start afresh, or name another file)",
                  cdl_st_path(f), key);
    return s;
}

/* Metadata key as a decimal integer in [lo, hi]; -1 with an error naming
 * the file, the key and the range. */
static int meta_int(const cdl_st_file *f, const char *key, long long lo, long long hi,
                    long long *out)
{
    const char *s = meta_need(f, key);
    if (!s)
        return -1;
    char *end, buf[48];
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi)
        return cdl_error("%s: metadata '%s' = '%s' is not an integer from %lld to %lld: the file "
                         "is damaged or not from cdl-train (use --resume never to start afresh)",
                         cdl_st_path(f), key, shown(s, buf), lo, hi);
    *out = v;
    return 0;
}

/* Metadata key as a number >= 0 (+infinity only if inf_ok); never NaN. */
static int meta_real(const cdl_st_file *f, const char *key, int inf_ok, double *out)
{
    const char *s = meta_need(f, key);
    if (!s)
        return -1;
    char *end, buf[48];
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !(v >= 0) || (isinf(v) && !inf_ok))
        return cdl_error("%s: metadata '%s' = '%s' is not a %s number >= 0: the file is damaged "
                         "or not from cdl-train (use --resume never to start afresh)",
                         cdl_st_path(f), key, shown(s, buf), inf_ok ? "" : "finite");
    *out = v;
    return 0;
}

/* The model's buffer named name, or NULL. */
static const cdl_param_view *find_buffer(const cdl_model *m, const char *name)
{
    for (int i = 0; i < cdl_model_nbuffers(m); i++)
        if (!strcmp(cdl_model_buffer(m, i)->name, name))
            return cdl_model_buffer(m, i);
    return NULL;
}

/* Whether the file's tensor `name` is one this model and optimizer store:
 * a parameter, a buffer, or optimizer.<state>.<parameter> (format 3). */
static int expected_tensor(cdl_model *m, cdl_optim *o, int v3, const char *name)
{
    if (cdl_model_find(m, name) || find_buffer(m, name))
        return 1;
    for (int i = 0; i < cdl_model_naliases(m); i++)
        if (!strcmp(cdl_model_alias(m, i)->name, name))
            return 1;   /* a tied weight's other name: read under its own */
    if (!v3 || strncmp(name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0)
        return 0;
    const char *rest = name + strlen(OPT_PREFIX);
    for (int i = 0; i < cdl_optim_nstate(o); i++) {
        const char *st = cdl_optim_state_name(o, i);
        size_t k = strlen(st);
        if (!strncmp(rest, st, k) && rest[k] == '.' && cdl_model_find(m, rest + k + 1))
            return 1;
    }
    return 0;
}

/* Whether name is optimizer.<any state>.<a parameter of m>: optimizer state
 * of this model, if not of this optimizer's settings. */
static int optimizer_state_of_param(cdl_model *m, const char *name)
{
    if (strncmp(name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0)
        return 0;
    const char *dot = strchr(name + strlen(OPT_PREFIX), '.');
    return dot && cdl_model_find(m, dot + 1) != NULL;
}

/* Copies the file's tensor `name` into h at the view's place, checking its
 * shape; what: how messages call it ("tensor", "optimizer state"). */
static int read_view(const cdl_st_file *f, const cdl_param_view *v, const char *name,
                     const char *what, float *h)
{
    const char *path = cdl_st_path(f);
    int t = cdl_st_find(f, name), nd;
    int64_t shape[8];
    size_t numel;
    if (t < 0 && !strcmp(what, "optimizer state"))
        return cdl_error("%s: optimizer state '%s' is missing: the checkpoint was written "
                         "without it (SGD with --momentum 0 keeps none) or by another "
                         "optimizer: pass the optimizer settings it was written with, or start "
                         "afresh from its weights with --resume never --init %s", path, name,
                         path);
    if (t < 0)
        return cdl_error("%s: %s '%s' is missing: the checkpoint belongs to another model or "
                         "optimizer (pass the same --model and --optimizer, or --resume never)",
                         path, what, name);
    const float *data = cdl_st_data(f, t, &numel);
    if (!data || cdl_st_shape(f, t, &nd, shape) != 0)
        return -1;
    int same = nd == v->ndim && numel == v->numel;
    for (int d = 0; same && d < nd; d++)
        same = shape[d] == v->shape[d];
    if (!same)
        return cdl_error("%s: %s '%s' has another shape than the model's '%s': the checkpoint "
                         "belongs to another model (pass the same --model, or --resume never)",
                         path, what, name, v->name);
    memcpy(h + v->offset, data, numel * sizeof *h);
    return 0;
}

/* The model's buffers into h (nbuffer_floats): float ones as they are,
 * counts from I64 (num_batches_tracked, also as PyTorch writes it). */
static int read_buffers(const cdl_st_file *f, cdl_model *m, float *h)
{
    const char *path = cdl_st_path(f);
    for (int i = 0; i < cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = cdl_model_buffer(m, i);
        if (!v->is_count) {
            if (read_view(f, v, v->name, "buffer", h))
                return -1;
            continue;
        }
        int t = cdl_st_find(f, v->name), nd;
        int64_t shape[8];
        size_t numel;
        if (t < 0)
            return cdl_error("%s: buffer '%s' is missing: the checkpoint belongs to another "
                             "model (pass the same --model, or --resume never)", path, v->name);
        const int64_t *q = cdl_st_data_i64(f, t, &numel);
        if (!q || cdl_st_shape(f, t, &nd, shape) != 0)
            return -1;
        if (numel != v->numel)
            return cdl_error("%s: buffer '%s' has %zu values where the model has %zu: the "
                             "checkpoint belongs to another model (pass the same --model, or "
                             "--resume never)", path, v->name, numel, v->numel);
        for (size_t k = 0; k < numel; k++) {
            if (q[k] < 0)
                return cdl_error("%s: buffer '%s' holds the count %lld: the file is damaged "
                                 "(use --resume never to start afresh)", path, v->name,
                                 (long long)q[k]);
            h[v->offset + k] = (float)q[k];
        }
    }
    return 0;
}

/* Optimizer state i into h: the tensors of format 3, or the base64 blob of
 * the older formats (the flat buffer as it was on the device). */
static int read_state(const cdl_st_file *f, cdl_model *m, cdl_optim *o, int i, int v3, float *h)
{
    size_t np = cdl_model_nparams(m);
    if (!v3) {
        static const char *state_keys[] = {"optimizer_state_0", "optimizer_state_1"};
        const char *b64 = cdl_st_meta_get(f, state_keys[i]);
        if (!b64 || cdl_base64_decode(b64, h, np * sizeof *h) != 0)
            return cdl_error("%s: optimizer state '%s' is missing or corrupt "
                             "(use --resume never to start afresh)", cdl_st_path(f),
                             state_keys[i]);
        return 0;
    }
    for (int k = 0; k < cdl_model_nviews(m); k++) {
        const cdl_param_view *v = cdl_model_view(m, k);
        char *name = state_tensor_name(cdl_optim_state_name(o, i), v->name);
        int rc = name ? read_view(f, v, name, "optimizer state", h) : -1;
        cdl_free(name);
        if (rc)
            return -1;
    }
    return 0;
}

/* "cdl-checkpoint-N" with N above ours: a file of a later release, which
 * this one must not call "not a cdl checkpoint". */
static int is_newer_format(const char *fmt)
{
    const char *prefix = "cdl-checkpoint-";
    size_t n = strlen(prefix);
    char *end;
    if (strncmp(fmt, prefix, n) != 0 || fmt[n] < '0' || fmt[n] > '9')
        return 0;
    const char *ours = CKPT_FORMAT;
    long v = strtol(fmt + n, &end, 10);
    return !*end && v > strtol(ours + n, NULL, 10);
}

int cdl_ckpt_check_format(const cdl_st_file *f)
{
    if (!f)
        return cdl_error("cdl_ckpt_check_format: no file (NULL; cdl_st_open's error says why)");
    const char *fmt = cdl_st_meta_get(f, "format");
    if (!fmt || !is_newer_format(fmt))
        return 0;
    const char *by = cdl_st_meta_get(f, "cdl_version");
    char buf[48], byb[48];
    return cdl_error("%s: written by cdl %s in format '%s', newer than this cdl %s reads "
                     "(up to '%s'): resume, evaluate or --init with cdl %s or newer "
                     "(cdl-train --version; a $HOME install may shadow the site's, or the "
                     "reverse)", cdl_st_path(f), by ? shown(by, byb) : "(unknown)",
                     shown(fmt, buf), cdl_version(), CKPT_FORMAT, by ? byb : "of that release");
}

static int load_state(cdl_st_file *f, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                      train_position *pos)
{
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m);
    const char *path = cdl_st_path(f);
    const char *fmt = cdl_st_meta_get(f, "format");
    char buf[48];
    int v3 = fmt && !strcmp(fmt, CKPT_FORMAT);
    if (fmt && !strcmp(fmt, CKPT_FORMAT_1)) {
        pos->unverified = !cdl_st_checksummed(f);
    } else if (!v3 && cdl_ckpt_check_format(f) != 0) {
        return cdl_error("%s, or --resume never", cdl_last_error());
    } else if (!v3 && (!fmt || strcmp(fmt, CKPT_FORMAT_2) != 0)) {
        return cdl_error("%s: not a cdl checkpoint (metadata format = '%s', expected '%s')", path,
                         fmt ? shown(fmt, buf) : "(none)", CKPT_FORMAT);
    } else if (!cdl_st_checksummed(f)) {
        return cdl_error("%s: a %s file without its checksum entry: the file is damaged; "
                         "restore it from a copy (or --resume never)", path, fmt);
    }

    /* The optimizer first: its state is part of the tensor list. */
    const char *okind = cdl_st_meta_get(f, "optimizer");
    const char *want = cdl_optim_kind_name(cdl_optim_get_config(o)->kind);
    if (!okind || strcmp(okind, want) != 0)
        return cdl_error("%s: written with optimizer '%s' but this run uses '%s': pass "
                         "--optimizer %s to resume, or --resume never",
                         path, okind ? shown(okind, buf) : "(none)", want,
                         okind ? shown(okind, buf) : "?");

    /* Tensors: exactly the model's (and its optimizer state's), with the
     * same shapes; nothing else. The model's first: another model is the
     * first thing to say. */
    int foreign_state = -1;   /* optimizer state this optimizer does not keep */
    for (int i = 0; i < cdl_st_count(f); i++) {
        const char *name = cdl_st_name(f, i);
        if (expected_tensor(m, o, v3, name))
            continue;
        if (v3 && optimizer_state_of_param(m, name)) {
            if (foreign_state < 0)
                foreign_state = i;
            continue;
        }
        return cdl_error("%s: holds tensor '%s', which the model %s with optimizer %s does "
                         "not have: the checkpoint belongs to another model (pass the same "
                         "--model, or --resume never)", path, name,
                         cdl_model_get_spec(m)->source, want);
    }
    int ns = cdl_optim_nstate(o), rc = 0;
    float *host[3] = {0}, *bufs = NULL;
    size_t nbf = cdl_model_nbuffer_floats(m);
    for (int i = 0; i <= ns && i < 3; i++)
        if (!(host[i] = cdl_calloc(np + 1, sizeof(float))))
            rc = -1;
    if (rc == 0 && !(bufs = cdl_calloc(nbf + 1, sizeof *bufs)))
        rc = -1;
    if (rc == 0)
        rc = read_buffers(f, m, bufs);
    for (int i = 0; rc == 0 && i < cdl_model_nviews(m); i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        rc = read_view(f, v, v->name, "tensor", host[0]);
    }
    /* Then the configuration, before the optimizer's state: a changed
     * setting that changes the state (--momentum 0.9 -> 0 drops SGD's
     * buffers) is named as that change; allowed, the state is refused as
     * what it is, not as a checkpoint of another model. */
    if (rc == 0 && ckpt_check_config(f, cfg, pos, cdl_model_spec_text(m)))
        rc = -1;
    if (rc == 0 && foreign_state >= 0)
        rc = cdl_error("%s: holds optimizer state '%s', which this run's %s does not keep (SGD "
                       "keeps momentum buffers only with --momentum > 0): pass the optimizer "
                       "settings it was written with, or start afresh from its weights with "
                       "--resume never --init %s", path, cdl_st_name(f, foreign_state), want,
                       path);
    for (int i = 0; rc == 0 && i < ns && i < 2; i++)
        rc = read_state(f, m, o, i, v3, host[1 + i]);
    /* Then the position and the configuration (a changed one is refused,
     * naming every change). */
    long long v_np = 0, v_steps = 0, v_epoch = 0, v_batch = 0, v_step = 0, v_world = 0;
    if (rc == 0 &&
        (meta_int(f, "nparams", 0, LLONG_MAX, &v_np) ||
         meta_int(f, "optimizer_steps", 0, LONG_MAX, &v_steps) ||
         meta_int(f, "epoch", 0, INT_MAX - 1, &v_epoch) ||
         meta_int(f, "batch_in_epoch", 0, LONG_MAX, &v_batch) ||
         meta_int(f, "step", 0, LONG_MAX, &v_step) ||
         meta_int(f, "world_size", 1, CKPT_MAX_WORLD, &v_world) ||
         meta_real(f, "best_val_loss", 1, &pos->best_val_loss) ||
         meta_real(f, "epoch_loss_sum", 0, &pos->loss_sum) ||
         meta_real(f, "epoch_correct", 0, &pos->correct) ||
         meta_real(f, "epoch_seen", 0, &pos->seen)))
        rc = -1;
    if (rc == 0 && (unsigned long long)v_np != np)
        rc = cdl_error("%s: nparams %lld does not match the model's %zu", path, v_np, np);
    if (rc == 0) {
        size_t so, sn;   /* a sharded optimizer (--shard-optimizer) takes its part */
        cdl_optim_shard(o, &so, &sn);
        for (int i = 0; i < ns && i < 2 && sn; i++)
            be->ops->to_device(be, cdl_optim_state(o, i), host[1 + i] + so, sn * sizeof(float));
        be->ops->to_device(be, cdl_model_params(m), host[0], np * sizeof(float));
        if (nbf)
            be->ops->to_device(be, cdl_model_buffers(m), bufs, nbf * sizeof *bufs);
    }
    for (int i = 0; i < 3; i++)
        cdl_free(host[i]);
    cdl_free(bufs);
    if (rc)
        return -1;
    cdl_optim_set_steps(o, (long)v_steps);
    /* The run goes on under its id (older files have none: a new one). */
    const char *id = cdl_st_meta_get(f, "run_id");
    if (id && run_id_valid(id))
        snprintf(pos->run_id, sizeof pos->run_id, "%s", id);
    const char *due = cdl_st_meta_get(f, "validation_due");
    pos->validation_due = due && !strcmp(due, "1");
    pos->epoch = (int)v_epoch;
    pos->batch = (long)v_batch;
    pos->step = (long)v_step;
    pos->world = (int)v_world;
    const char *th = cdl_st_meta_get(f, "compute_threads");   /* older files: none */
    long threads = th ? strtol(th, NULL, 10) : 0;
    pos->threads = threads > 0 && threads <= 1 << 20 ? (int)threads : 0;
    const char *fc = cdl_st_meta_get(f, "fast_conv");
    pos->fast_conv = fc && (!strcmp(fc, "0") || !strcmp(fc, "1")) ? fc[0] - '0' : -1;
    return be->ops->sync(be);
}

int train_ckpt_load(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    train_position *pos)
{
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        return -1;
    int rc = load_state(f, m, o, cfg, pos);
    cdl_st_close(f);
    return rc;
}

int cdl_model_save_weights(cdl_model *m, const char *path)
{
    if (!m || !path || !*path)
        return cdl_error("cdl_model_save_weights: %s is missing", m ? "the path" : "the model");
    ckpt_tensors c;
    memset(&c, 0, sizeof c);
    int rc = collect_tensors(&c, m, NULL);
    if (rc == 0)
        rc = cdl_st_write(path, c.t, c.n, NULL, 0);
    ckpt_tensors_free(&c);
    return rc;
}
