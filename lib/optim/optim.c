/* Optimizers over the flat parameter buffer with PyTorch's update rules;
 * the arithmetic is the backend's sgd_step / adam_step, this file keeps the
 * configuration, the step count and the state buffers. */
#include <math.h>
#include <string.h>

#include <cdl/cdl.h>

struct cdl_optim {
    cdl_optim_config cfg;
    cdl_backend *be;
    size_t n;
    size_t lo, count;  /* the state covers parameters [lo, lo+count) (all unless a shard) */
    long steps;
    int nstate;
    float *state[2];   /* SGD: momentum_buffer; Adam(W): exp_avg, exp_avg_sq */
    size_t *nd_start, *nd_end;   /* sorted disjoint ranges without weight decay */
    int nd;
};

static const char *const kind_names[] = {"sgd", "adam", "adamw"};

cdl_optim_config cdl_optim_defaults(cdl_optim_kind kind)
{
    cdl_optim_config c = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    if (kind == CDL_OPTIM_ADAMW)
        c.weight_decay = 0.01f;
    return c;
}

int cdl_optim_kind_parse(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, kind_names[i]))
            return i;
    return -1;
}

const char *cdl_optim_kind_name(cdl_optim_kind kind)
{
    return (unsigned)kind < 3 ? kind_names[kind] : "unknown";
}

/* The checks torch.optim makes, with the same wording of what is wrong. */
static int check_config(const cdl_optim_config *c)
{
    const char *k = cdl_optim_kind_name(c->kind);
    if ((unsigned)c->kind > CDL_OPTIM_ADAMW)
        return cdl_error("unknown optimizer kind %d: use sgd, adam or adamw", (int)c->kind);
    if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
        return cdl_error("%s: invalid weight decay %g: it must be >= 0", k,
                         (double)c->weight_decay);
    if (c->kind == CDL_OPTIM_SGD) {
        if (!(c->momentum >= 0.0f) || !isfinite(c->momentum))
            return cdl_error("sgd: invalid momentum %g: it must be >= 0", (double)c->momentum);
        if (!isfinite(c->dampening))
            return cdl_error("sgd: invalid dampening %g", (double)c->dampening);
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
            return cdl_error("sgd: nesterov momentum needs momentum > 0 and dampening 0 (got "
                             "momentum %g, dampening %g)", (double)c->momentum,
                             (double)c->dampening);
        return 0;
    }
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return cdl_error("%s: invalid betas (%g, %g): each must be in [0, 1)", k, (double)c->beta1,
                         (double)c->beta2);
    if (!(c->eps >= 0.0f) || !isfinite(c->eps))
        return cdl_error("%s: invalid eps %g: it must be >= 0", k, (double)c->eps);
    return 0;
}

cdl_optim *cdl_optim_create(const cdl_optim_config *cfg, size_t nparams, cdl_backend *be)
{
    return cdl_optim_create_shard(cfg, nparams, 0, nparams, be);
}

cdl_optim *cdl_optim_create_shard(const cdl_optim_config *cfg, size_t nparams, size_t offset,
                                  size_t count, cdl_backend *be)
{
    if (!cfg || !be) {
        cdl_error("cdl_optim_create: no %s given", cfg ? "backend" : "configuration");
        return NULL;
    }
    if (check_config(cfg))
        return NULL;
    if (offset > nparams || count > nparams - offset) {
        cdl_error("%s: shard [%zu, %zu) is outside the %zu parameters",
                  cdl_optim_kind_name(cfg->kind), offset, offset + count, nparams);
        return NULL;
    }
    cdl_optim *o = cdl_calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->cfg = *cfg;
    o->be = be;
    o->n = nparams;
    o->lo = offset;
    o->count = count;
    /* SGD without momentum keeps no state, like PyTorch. */
    o->nstate = cfg->kind == CDL_OPTIM_SGD ? (cfg->momentum != 0.0f) : 2;
    for (int i = 0; i < o->nstate && count; i++) {
        o->state[i] = be->ops->alloc(be, count * sizeof(float));   /* zeroed */
        if (!o->state[i]) {
            cdl_error("%s: cannot allocate optimizer state for %zu parameters: %s",
                      cdl_optim_kind_name(cfg->kind), count, cdl_last_error());
            cdl_optim_destroy(o);
            return NULL;
        }
    }
    return o;
}

void cdl_optim_destroy(cdl_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < 2; i++)
        if (o->state[i])
            o->be->ops->free(o->be, o->state[i]);
    cdl_free(o->nd_start);
    cdl_free(o->nd_end);
    cdl_free(o);
}

int cdl_optim_set_no_decay(cdl_optim *o, const size_t *offsets, const size_t *counts, int n)
{
    size_t *start = NULL, *end = NULL;
    if (!o)
        return cdl_error("cdl_optim_set_no_decay: the optimizer is NULL");
    if (n < 0)
        return cdl_error("cdl_optim_set_no_decay: %d ranges", n);
    if (n > 0) {
        start = cdl_calloc((size_t)n, sizeof *start);
        end = cdl_calloc((size_t)n, sizeof *end);
        if (!start || !end) {
            cdl_free(start);
            cdl_free(end);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        int bad = offsets[i] > o->n || counts[i] > o->n - offsets[i] ||
                  (i > 0 && offsets[i] < end[i - 1]);
        if (bad) {
            cdl_free(start);
            cdl_free(end);
            return cdl_error("%s: no-decay range %d [%zu, %zu) is outside the %zu parameters or "
                             "not after the one before", cdl_optim_kind_name(o->cfg.kind), i,
                             offsets[i], offsets[i] + counts[i], o->n);
        }
        start[i] = offsets[i];
        end[i] = offsets[i] + counts[i];
    }
    cdl_free(o->nd_start);
    cdl_free(o->nd_end);
    o->nd_start = start;
    o->nd_end = end;
    o->nd = n;
    return 0;
}

/* The update of [offset, offset+count) with weight decay wd. */
static void step_part(cdl_optim *o, float *params_dev, const float *grads_dev, size_t offset,
                      size_t count, float lr, float wd)
{
    if (!count)
        return;
    const cdl_optim_config *c = &o->cfg;
    float *p = params_dev + offset;
    const float *g = grads_dev + offset;
    size_t k = offset - o->lo;   /* into the state buffers (a shard's start at 0) */
    if (c->kind == CDL_OPTIM_SGD) {
        cdl_sgd_hparams hp = {.lr = lr, .momentum = c->momentum, .dampening = c->dampening,
                              .weight_decay = wd, .nesterov = c->nesterov,
                              .first_step = o->steps == 0};
        o->be->ops->sgd_step(o->be, count, p, g, o->nstate ? o->state[0] + k : NULL, &hp);
    } else {
        cdl_adam_hparams hp = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                               .weight_decay = wd,
                               .decoupled = c->kind == CDL_OPTIM_ADAMW, .step = o->steps + 1};
        o->be->ops->adam_step(o->be, count, p, g, o->state[0] + k, o->state[1] + k, &hp);
    }
}

void cdl_optim_step_range(cdl_optim *o, float *params_dev, const float *grads_dev, size_t offset,
                          size_t count, float lr)
{
    if (offset > o->n || count > o->n - offset) {
        cdl_error("%s: step over [%zu, %zu) is outside the %zu parameters",
                  cdl_optim_kind_name(o->cfg.kind), offset, offset + count, o->n);
        return;
    }
    /* A shard updates the part of the range it holds state for. */
    size_t at = offset > o->lo ? offset : o->lo;
    size_t stop = offset + count < o->lo + o->count ? offset + count : o->lo + o->count;
    if (stop <= at)
        return;
    /* Alternating decayed and undecayed pieces of the range, in order (the
     * updates are elementwise, so the cut changes no bit). */
    for (int i = 0; i < o->nd && at < stop; i++) {
        if (o->nd_end[i] <= at)
            continue;
        if (o->nd_start[i] >= stop)
            break;
        size_t s = o->nd_start[i] > at ? o->nd_start[i] : at;
        size_t e = o->nd_end[i] < stop ? o->nd_end[i] : stop;
        step_part(o, params_dev, grads_dev, at, s - at, lr, o->cfg.weight_decay);
        step_part(o, params_dev, grads_dev, s, e - s, lr, 0.0f);
        at = e;
    }
    step_part(o, params_dev, grads_dev, at, stop - at, lr, o->cfg.weight_decay);
}

void cdl_optim_step(cdl_optim *o, float *params_dev, const float *grads_dev, float lr)
{
    cdl_optim_step_range(o, params_dev, grads_dev, 0, o->n, lr);
    cdl_optim_advance(o);
}

void cdl_optim_advance(cdl_optim *o) { o->steps++; }

void cdl_optim_shard(const cdl_optim *o, size_t *offset, size_t *count)
{
    *offset = o->lo;
    *count = o->count;
}
long cdl_optim_steps(const cdl_optim *o) { return o->steps; }
const cdl_optim_config *cdl_optim_get_config(const cdl_optim *o) { return &o->cfg; }
int cdl_optim_nstate(const cdl_optim *o) { return o->nstate; }

void cdl_optim_set_steps(cdl_optim *o, long steps)
{
    if (steps < 0) {
        cdl_error("%s: invalid step count %ld: it must be >= 0", cdl_optim_kind_name(o->cfg.kind),
                  steps);
        return;
    }
    o->steps = steps;
}

float *cdl_optim_state(cdl_optim *o, int i)
{
    return i >= 0 && i < o->nstate ? o->state[i] : NULL;
}

const char *cdl_optim_state_name(const cdl_optim *o, int i)
{
    if (i < 0 || i >= o->nstate)
        return NULL;
    if (o->cfg.kind == CDL_OPTIM_SGD)
        return "momentum_buffer";
    return i == 0 ? "exp_avg" : "exp_avg_sq";
}
