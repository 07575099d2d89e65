/* Training checkpoints: the model's tensors under their PyTorch names (so
 * torch's load_state_dict takes the file as it is), and in __metadata__
 * everything else that resuming needs: optimizer state (base64 of the raw
 * little-endian float32 buffers), position in the run, and the run's
 * configuration. RNG state is the seed: every random draw (shuffle,
 * augmentation, dropout) is a pure function of seed, epoch and step. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "metrics.h"

/* Format 2 carries checksums (cdl_st_checksummed) and must verify; format 1
 * (older cdl) had none and still loads, with a note. */
#define CKPT_FORMAT "cdl-checkpoint-2"
#define CKPT_FORMAT_1 "cdl-checkpoint-1"

enum { MAX_META = 32 };
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

static float *download(cdl_backend *be, const float *dev, size_t n)
{
    float *h = cdl_malloc(n * sizeof *h + 1);
    if (h)
        be->ops->to_host(be, h, dev, n * sizeof *h);
    return h;
}

int train_ckpt_save(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    const train_position *pos)
{
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m);
    int nv = cdl_model_nviews(m);
    int rc = -1;
    meta_list meta = {0};
    cdl_st_tensor *tensors = NULL;
    float *host = NULL;
    char *config = NULL;

    if (be->ops->sync(be) != 0)
        return -1;
    host = download(be, cdl_model_params(m), np);
    tensors = cdl_calloc((size_t)nv + 1, sizeof *tensors);
    config = cdl_malloc(16384);
    if (!host || !tensors || !config)
        goto out;
    for (int i = 0; i < nv; i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        tensors[i].name = v->name;
        tensors[i].data = host + v->offset;
        tensors[i].ndim = v->ndim;
        memcpy(tensors[i].shape, v->shape, sizeof v->shape);
    }
    if (train_config_json(cfg, config, 16384) != 0)
        goto out;
    meta_add(&meta, "format", fmt_dup("%s", CKPT_FORMAT));
    meta_add(&meta, "cdl_version", fmt_dup("%s", cdl_version()));
    meta_add(&meta, "config", config);
    config = NULL;
    meta_add(&meta, "model", fmt_dup("%s", cdl_model_get_spec(m)->source));
    meta_add(&meta, "epoch", fmt_dup("%d", pos->epoch));
    meta_add(&meta, "batch_in_epoch", fmt_dup("%ld", pos->batch));
    meta_add(&meta, "step", fmt_dup("%ld", pos->step));
    meta_add(&meta, "world_size", fmt_dup("%d", pos->world));
    meta_add(&meta, "seed", fmt_dup("%" PRIu64, cfg->seed));
    meta_add(&meta, "best_val_loss", fmt_dup("%.17g", pos->best_val_loss));
    meta_add(&meta, "epoch_loss_sum", fmt_dup("%.17g", pos->loss_sum));
    meta_add(&meta, "epoch_correct", fmt_dup("%.17g", pos->correct));
    meta_add(&meta, "epoch_seen", fmt_dup("%.17g", pos->seen));
    meta_add(&meta, "optimizer", fmt_dup("%s", cdl_optim_kind_name(cdl_optim_get_config(o)->kind)));
    meta_add(&meta, "optimizer_steps", fmt_dup("%ld", cdl_optim_steps(o)));
    meta_add(&meta, "nparams", fmt_dup("%zu", np));
    meta_add(&meta, "train_samples", fmt_dup("%ld", pos->samples));
    if (pos->run_id[0])
        meta_add(&meta, "run_id", fmt_dup("%s", pos->run_id));
    static const char *state_keys[] = {"optimizer_state_0", "optimizer_state_1"};
    static const char *name_keys[] = {"optimizer_state_0_name", "optimizer_state_1_name"};
    for (int i = 0; i < cdl_optim_nstate(o) && i < 2; i++) {
        float *st = download(be, cdl_optim_state(o, i), np);
        if (!st)
            goto out;
        meta_add(&meta, name_keys[i], fmt_dup("%s", cdl_optim_state_name(o, i)));
        meta_add(&meta, state_keys[i], cdl_base64_encode(st, np * sizeof(float)));
        cdl_free(st);
    }
    for (int i = 0; i < meta.n; i++)
        if (!meta.items[i].value)
            goto out;
    rc = cdl_st_write(path, tensors, nv, meta.items, meta.n);
out:
    for (int i = 0; i < meta.n; i++)
        cdl_free(meta.owned[i]);
    cdl_free(config);
    cdl_free(tensors);
    cdl_free(host);
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

static int load_state(cdl_st_file *f, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                      train_position *pos)
{
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m);
    const char *path = cdl_st_path(f);
    const char *fmt = cdl_st_meta_get(f, "format");
    char buf[48];
    if (fmt && !strcmp(fmt, CKPT_FORMAT_1)) {
        pos->unverified = !cdl_st_checksummed(f);
    } else if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        return cdl_error("%s: not a cdl checkpoint (metadata format = '%s', expected '%s')", path,
                         fmt ? shown(fmt, buf) : "(none)", CKPT_FORMAT);
    } else if (!cdl_st_checksummed(f)) {
        return cdl_error("%s: a %s file without its checksum entry: the file is damaged; "
                         "restore it from a copy (or --resume never)", path, CKPT_FORMAT);
    }

    /* Tensors: exactly the model's, with the same shapes. */
    int nv = cdl_model_nviews(m);
    if (cdl_st_count(f) != nv)
        return cdl_error("%s: holds %d tensors but the model %s has %d: the checkpoint belongs to "
                         "another model (pass the same --model, or --resume never)",
                         path, cdl_st_count(f), cdl_model_get_spec(m)->source, nv);
    float *host = cdl_malloc(np * sizeof *host + 1);
    if (!host)
        return -1;
    for (int i = 0; i < nv; i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        int t = cdl_st_find(f, v->name), nd;
        int64_t shape[8];
        size_t numel;
        if (t < 0) {
            cdl_free(host);
            return cdl_error("%s: tensor '%s' of the model is missing: the checkpoint belongs to "
                             "another model (pass the same --model, or --resume never)",
                             path, v->name);
        }
        const float *data = cdl_st_data(f, t, &numel);
        if (!data || cdl_st_shape(f, t, &nd, shape) != 0) {
            cdl_free(host);
            return -1;
        }
        int same = nd == v->ndim && numel == v->numel;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == v->shape[d];
        if (!same) {
            cdl_free(host);
            return cdl_error("%s: tensor '%s' has another shape than the model's: the checkpoint "
                             "belongs to another model (pass the same --model, or --resume never)",
                             path, v->name);
        }
        memcpy(host + v->offset, data, numel * sizeof *host);
    }

    /* Optimizer state. */
    const char *okind = cdl_st_meta_get(f, "optimizer");
    const char *want = cdl_optim_kind_name(cdl_optim_get_config(o)->kind);
    if (!okind || strcmp(okind, want) != 0) {
        cdl_free(host);
        return cdl_error("%s: written with optimizer '%s' but this run uses '%s': pass "
                         "--optimizer %s to resume, or --resume never",
                         path, okind ? okind : "(none)", want, okind ? okind : "?");
    }
    long long v_np, v_steps, v_epoch, v_batch, v_step, v_world;
    if (meta_int(f, "nparams", 0, LLONG_MAX, &v_np) ||
        meta_int(f, "optimizer_steps", 0, LONG_MAX, &v_steps) ||
        meta_int(f, "epoch", 0, INT_MAX - 1, &v_epoch) ||
        meta_int(f, "batch_in_epoch", 0, LONG_MAX, &v_batch) ||
        meta_int(f, "step", 0, LONG_MAX, &v_step) ||
        meta_int(f, "world_size", 1, CKPT_MAX_WORLD, &v_world) ||
        meta_real(f, "best_val_loss", 1, &pos->best_val_loss) ||
        meta_real(f, "epoch_loss_sum", 0, &pos->loss_sum) ||
        meta_real(f, "epoch_correct", 0, &pos->correct) ||
        meta_real(f, "epoch_seen", 0, &pos->seen) ||
        ckpt_check_config(f, cfg, pos)) {
        cdl_free(host);
        return -1;
    }
    if ((unsigned long long)v_np != np) {
        cdl_free(host);
        return cdl_error("%s: nparams %lld does not match the model's %zu", path, v_np, np);
    }
    float *state = cdl_malloc(np * sizeof *state + 1);
    if (!state) {
        cdl_free(host);
        return -1;
    }
    static const char *state_keys[] = {"optimizer_state_0", "optimizer_state_1"};
    for (int i = 0; i < cdl_optim_nstate(o) && i < 2; i++) {
        const char *b64 = cdl_st_meta_get(f, state_keys[i]);
        if (!b64 || cdl_base64_decode(b64, state, np * sizeof *state) != 0) {
            cdl_free(state);
            cdl_free(host);
            return cdl_error("%s: optimizer state '%s' is missing or corrupt "
                             "(use --resume never to start afresh)", path, state_keys[i]);
        }
        be->ops->to_device(be, cdl_optim_state(o, i), state, np * sizeof *state);
    }
    cdl_free(state);
    be->ops->to_device(be, cdl_model_params(m), host, np * sizeof *host);
    cdl_free(host);
    cdl_optim_set_steps(o, (long)v_steps);
    /* The run goes on under its id (older files have none: a new one). */
    const char *id = cdl_st_meta_get(f, "run_id");
    if (id && run_id_valid(id))
        snprintf(pos->run_id, sizeof pos->run_id, "%s", id);
    pos->epoch = (int)v_epoch;
    pos->batch = (long)v_batch;
    pos->step = (long)v_step;
    pos->world = (int)v_world;
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
