/* The model: a sequence of layers over two flat buffers (parameters and
 * gradients), with every buffer a training step needs allocated once, for
 * max_batch samples, when the model is created.
 *
 * Activations: act[0] is the model's own copy of the input batch (so the
 * caller may refill its buffer before backward), act[i+1] the output of
 * layer i. Flatten only reinterprets its input, and ReLU overwrites it (its
 * backward reads only its output, and no other layer's backward reads a
 * ReLU's input), so both reuse their input buffer. Backward ping-pongs
 * between two gradient buffers sized for the largest layer input. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "core/rng.h"
#include "model_internal.h"

#define MAX_BATCH_LIMIT (1 << 20)
#define MAX_BATCH_NUMEL 2147483647L   /* backends index a batch with int */

typedef struct layer {
    const cdl_layer_spec *s;       /* into the model's copy of the spec */
    cdl_shape in, out;
    size_t in_numel, out_numel;    /* floats per sample */
    size_t poff, pcount;           /* the layer's range of params/grads (weight, then bias) */
    int wview, bview;              /* view indices, -1 if none */
    cdl_conv2d_desc conv;          /* n is set per batch */
    cdl_pool2d_desc pool;
    float *x, *y;                  /* input and output, max_batch samples; y == x in place */
    int32_t *argmax;               /* maxpool: n*c*oh*ow */
    uint8_t *mask;                 /* dropout: n*numel */
    int dropped;                   /* dropout: the last forward applied a mask */
} layer;

struct cdl_model {
    cdl_model_spec spec;
    cdl_backend *be;
    cdl_shape input;
    int max_batch, nlayers, nviews;
    int first_param;               /* first layer with parameters: backward stops there */
    int outputs;
    size_t nparams;
    layer layers[CDL_MAX_LAYERS];
    cdl_param_view views[2 * CDL_MAX_LAYERS];
    float *params, *grads;
    int nbuffers;                  /* non-trainable buffers (batchnorm running stats) */
    size_t nbuffer_floats;
    cdl_param_view bviews[3 * CDL_MAX_LAYERS];
    float *buffers;
    cdl_model_allreduce_fn allreduce;   /* SyncBatchNorm hook; NULL = none */
    void *allreduce_ctx;
    float *acts;                   /* every activation buffer */
    float *gbuf[2];                /* backward ping-pong */
    float *ws;                     /* shared conv/linear workspace */
    int32_t *argmax;
    uint8_t *masks;
    int n;                         /* batch of the last forward; 0 = none yet */
};

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;   /* keeps every buffer 64-byte aligned */
}

static size_t numel(cdl_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

static void *dev_alloc(cdl_backend *be, size_t bytes, int *failed)
{
    if (!bytes || *failed)
        return NULL;
    void *p = be->ops->alloc(be, bytes);
    if (!p)
        *failed = 1;
    return p;
}

static void add_view(cdl_model *m, layer *L, int is_bias)
{
    const cdl_layer_spec *s = L->s;
    cdl_param_view *v = &m->views[m->nviews];
    int fan_in = s->kind == CDL_LAYER_CONV2D ? L->in.c * s->kernel * s->kernel : (int)L->in_numel;
    snprintf(v->name, sizeof v->name, "%s.%s", s->name, is_bias ? "bias" : "weight");
    v->offset = m->nparams;
    v->fan_in = fan_in;
    v->is_bias = is_bias;
    if (is_bias) {
        v->ndim = 1;
        v->shape[0] = s->out;
        v->numel = (size_t)s->out;
        L->bview = m->nviews;
    } else if (s->kind == CDL_LAYER_CONV2D) {
        v->ndim = 4;   /* (out, in, kh, kw) */
        v->shape[0] = s->out;
        v->shape[1] = L->in.c;
        v->shape[2] = v->shape[3] = s->kernel;
        v->numel = (size_t)s->out * (size_t)fan_in;
        L->wview = m->nviews;
    } else {
        v->ndim = 2;   /* (out, in) */
        v->shape[0] = s->out;
        v->shape[1] = fan_in;
        v->numel = (size_t)s->out * (size_t)fan_in;
        L->wview = m->nviews;
    }
    m->nparams += v->numel;
    L->pcount += v->numel;
    m->nviews++;
}

/* Shapes, descriptors and parameter views of every layer; returns the
 * floats of scratch the backend needs for the largest conv2d / linear. */
static size_t plan_layers(cdl_model *m, const cdl_shape *shapes)
{
    cdl_backend *be = m->be;
    size_t ws = 0;
    m->first_param = m->nlayers;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        const cdl_layer_spec *s = &m->spec.layers[i];
        L->s = s;
        L->in = shapes[i];
        L->out = shapes[i + 1];
        L->in_numel = numel(L->in);
        L->out_numel = numel(L->out);
        L->wview = L->bview = -1;
        L->poff = m->nparams;
        if (spec_has_params(s->kind)) {
            if (m->first_param == m->nlayers)
                m->first_param = i;
            add_view(m, L, 0);
            if (s->bias)
                add_view(m, L, 1);
        }
        /* Workspace sizes for the largest and the smallest batch. */
        const int batches[2] = {m->max_batch, 1};
        if (s->kind == CDL_LAYER_CONV2D) {
            L->conv = (cdl_conv2d_desc){.n = m->max_batch, .c = L->in.c, .h = L->in.h,
                                        .w = L->in.w, .oc = s->out, .kh = s->kernel,
                                        .kw = s->kernel, .stride_h = s->stride, .stride_w = s->stride,
                                        .pad_h = s->pad, .pad_w = s->pad, .dil_h = 1,
                                        .dil_w = 1, .groups = 1,
                                        .oh = L->out.h, .ow = L->out.w};
            for (int b = 0; b < 2; b++) {
                cdl_conv2d_desc d = L->conv;
                d.n = batches[b];
                size_t need = be->ops->conv2d_workspace(be, &d);
                ws = need > ws ? need : ws;
            }
        } else if (s->kind == CDL_LAYER_LINEAR) {
            for (int b = 0; b < 2; b++) {
                size_t need = be->ops->linear_workspace(be, batches[b], (int)L->in_numel, s->out);
                ws = need > ws ? need : ws;
            }
        } else if (s->kind == CDL_LAYER_MAXPOOL2D || s->kind == CDL_LAYER_AVGPOOL2D) {
            L->pool = (cdl_pool2d_desc){.n = m->max_batch, .c = L->in.c, .h = L->in.h,
                                        .w = L->in.w, .k = s->kernel,
                                        .stride = s->stride ? s->stride : s->kernel,
                                        .pad = s->pad, .oh = L->out.h, .ow = L->out.w};
        }
    }
    return ws;
}

/* Activation, argmax, mask and gradient buffers; see the top comment. */
static int alloc_buffers(cdl_model *m, size_t ws_floats)
{
    cdl_backend *be = m->be;
    size_t mb = (size_t)m->max_batch;
    size_t act_off[CDL_MAX_LAYERS + 1], am_off[CDL_MAX_LAYERS], mask_off[CDL_MAX_LAYERS];
    size_t nact = round16(mb * numel(m->input)), nam = 0, nmask = 0, gmax = 0;

    act_off[0] = 0;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        cdl_layer_kind k = L->s->kind;
        if (k == CDL_LAYER_FLATTEN || k == CDL_LAYER_RELU) {
            act_off[i + 1] = act_off[i];
        } else {
            act_off[i + 1] = nact;
            nact += round16(mb * L->out_numel);
        }
        am_off[i] = nam;
        if (k == CDL_LAYER_MAXPOOL2D)
            nam += round16(mb * L->out_numel);
        mask_off[i] = nmask;
        if (k == CDL_LAYER_DROPOUT)
            nmask += (mb * L->out_numel + 63) & ~(size_t)63;
        if (i > m->first_param && L->in_numel > gmax)
            gmax = L->in_numel;
    }
    gmax = round16(mb * gmax);

    int failed = 0;
    m->params = dev_alloc(be, m->nparams * sizeof(float), &failed);
    m->grads = dev_alloc(be, m->nparams * sizeof(float), &failed);
    m->acts = dev_alloc(be, nact * sizeof(float), &failed);
    m->gbuf[0] = dev_alloc(be, 2 * gmax * sizeof(float), &failed);
    m->gbuf[1] = m->gbuf[0] ? m->gbuf[0] + gmax : NULL;
    m->ws = dev_alloc(be, ws_floats * sizeof(float), &failed);
    m->argmax = dev_alloc(be, nam * sizeof(int32_t), &failed);
    m->masks = dev_alloc(be, nmask, &failed);
    if (failed)
        return cdl_error("%s: cannot allocate the model's buffers for batches of %d: %s",
                         m->spec.source, m->max_batch, cdl_last_error());

    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        L->x = m->acts + act_off[i];
        L->y = m->acts + act_off[i + 1];
        if (L->s->kind == CDL_LAYER_MAXPOOL2D)
            L->argmax = m->argmax + am_off[i];
        if (L->s->kind == CDL_LAYER_DROPOUT)
            L->mask = m->masks + mask_off[i];
    }
    return 0;
}

cdl_model *cdl_model_create(const cdl_model_spec *spec, cdl_shape input, int max_batch,
                            cdl_backend *be)
{
    if (!spec || !be) {
        cdl_error("cdl_model_create: no %s given", spec ? "backend" : "spec");
        return NULL;
    }
    if (input.c == 0)
        input = spec->input;
    if (input.c == 0) {
        cdl_error("%s: no input shape: give the spec an 'input CxHxW' line or pass the data's "
                  "shape", spec->source);
        return NULL;
    }
    if (max_batch < 1 || max_batch > MAX_BATCH_LIMIT) {
        cdl_error("%s: batch size %d is invalid: use 1 to %d", spec->source, max_batch,
                  MAX_BATCH_LIMIT);
        return NULL;
    }
    cdl_model *m = cdl_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->spec = *spec;
    m->be = be;
    m->input = input;
    m->max_batch = max_batch;
    m->nlayers = spec->nlayers;

    cdl_shape shapes[CDL_MAX_LAYERS + 1];
    if (spec_finish_names(&m->spec) || cdl_spec_infer(&m->spec, input, shapes))
        goto fail;
    for (int i = 0; i <= m->nlayers; i++) {
        if ((double)numel(shapes[i]) * max_batch > (double)MAX_BATCH_NUMEL) {
            cdl_error("%s: a batch of %d %dx%dx%d activations has more than 2^31 values: use a "
                      "smaller batch size", spec->source, max_batch, shapes[i].c, shapes[i].h,
                      shapes[i].w);
            goto fail;
        }
    }
    m->outputs = (int)numel(shapes[m->nlayers]);
    if (alloc_buffers(m, plan_layers(m, shapes)))
        goto fail;
    return m;
fail:
    cdl_model_destroy(m);
    return NULL;
}

void cdl_model_destroy(cdl_model *m)
{
    if (!m)
        return;
    cdl_backend *be = m->be;
    void *bufs[] = {m->params, m->grads, m->acts, m->gbuf[0], m->ws, m->argmax, m->masks,
                    m->buffers};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    cdl_free(m);
}

uint64_t model_dropout_seed(uint64_t seed, int index)
{
    uint64_t z = seed ^ ((uint64_t)(index + 1) * 0xD1B54A32D192ED03ull);
    return rng_splitmix64(&z);
}

static const float *param(const cdl_model *m, int view)
{
    return view < 0 ? NULL : m->params + m->views[view].offset;
}

static float *grad(const cdl_model *m, int view)
{
    return view < 0 ? NULL : m->grads + m->views[view].offset;
}

const float *cdl_model_forward(cdl_model *m, const float *x_dev, int n, int train,
                               uint64_t dropout_seed)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    m->n = 0;
    if (n < 1 || n > m->max_batch || !x_dev) {
        cdl_error("%s: forward of %d samples%s: the model takes batches of 1 to %d", m->spec.source,
                  n, x_dev ? "" : " from a NULL input", m->max_batch);
        return NULL;
    }
    op->copy(be, m->acts, x_dev, (size_t)n * numel(m->input) * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        size_t count = (size_t)n * L->out_numel;
        switch (L->s->kind) {
        case CDL_LAYER_CONV2D: {
            cdl_conv2d_desc d = L->conv;
            d.n = n;
            op->conv2d_fwd(be, &d, L->x, param(m, L->wview), param(m, L->bview), L->y, m->ws);
            break;
        }
        case CDL_LAYER_LINEAR:
            op->linear_fwd(be, n, (int)L->in_numel, L->s->out, L->x, param(m, L->wview),
                           param(m, L->bview), L->y, m->ws);
            break;
        case CDL_LAYER_MAXPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->maxpool_fwd(be, &d, L->x, L->y, L->argmax);
            break;
        }
        case CDL_LAYER_AVGPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->avgpool_fwd(be, &d, L->x, L->y);
            break;
        }
        case CDL_LAYER_RELU:
            op->relu_fwd(be, count, L->x, L->y);   /* in place */
            break;
        case CDL_LAYER_DROPOUT:
            L->dropped = train && L->s->p > 0.0f;
            if (L->dropped)
                op->dropout_fwd(be, count, L->s->p, model_dropout_seed(dropout_seed, i), L->x,
                                L->y, L->mask);
            else
                op->copy(be, L->y, L->x, count * sizeof(float));
            break;
        case CDL_LAYER_FLATTEN:
            break;   /* same memory, read as (n, c*h*w) */
        }
    }
    m->n = n;
    return m->layers[m->nlayers - 1].y;
}

void cdl_model_backward(cdl_model *m, const float *dlogits_dev, cdl_grad_ready_fn cb, void *ctx)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    int n = m->n;
    if (!n || !dlogits_dev) {
        cdl_error("%s: backward %s: call cdl_model_forward first and pass the logits' gradient",
                  m->spec.source, n ? "from NULL gradients" : "without a forward");
        return;
    }
    const float *dy = dlogits_dev;
    for (int i = m->nlayers - 1; i >= m->first_param; i--) {
        layer *L = &m->layers[i];
        size_t count = (size_t)n * L->in_numel;
        /* dx goes to the gradient buffer dy is not in; the first layer with
         * parameters needs none. */
        int which = dy == m->gbuf[0] ? 1 : 0;
        float *dx = i > m->first_param ? m->gbuf[which] : NULL;
        int identity = 0;   /* the layer passes dy through unchanged */
        switch (L->s->kind) {
        case CDL_LAYER_CONV2D: {
            cdl_conv2d_desc d = L->conv;
            d.n = n;
            op->conv2d_bwd(be, &d, L->x, param(m, L->wview), dy, dx, grad(m, L->wview),
                           grad(m, L->bview), m->ws);
            break;
        }
        case CDL_LAYER_LINEAR:
            op->linear_bwd(be, n, (int)L->in_numel, L->s->out, L->x, param(m, L->wview), dy, dx,
                           grad(m, L->wview), grad(m, L->bview), m->ws);
            break;
        case CDL_LAYER_MAXPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->maxpool_bwd(be, &d, dy, L->argmax, dx);
            break;
        }
        case CDL_LAYER_AVGPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->avgpool_bwd(be, &d, dy, dx);
            break;
        }
        case CDL_LAYER_RELU:
            if (dy == m->gbuf[0] || dy == m->gbuf[1])
                dx = m->gbuf[!which];   /* in place: dy's own buffer */
            op->relu_bwd(be, count, L->y, dy, dx);
            break;
        case CDL_LAYER_DROPOUT:
            if (L->dropped)
                op->dropout_bwd(be, count, L->s->p, L->mask, dy, dx);
            else
                identity = 1;
            break;
        case CDL_LAYER_FLATTEN:
            identity = 1;
            break;
        }
        if (L->pcount && cb)
            cb(ctx, L->poff, L->pcount);
        if (!identity)
            dy = dx;
    }
}

size_t cdl_model_nparams(const cdl_model *m) { return m->nparams; }
float *cdl_model_params(cdl_model *m) { return m->params; }
float *cdl_model_grads(cdl_model *m) { return m->grads; }
int cdl_model_nviews(const cdl_model *m) { return m->nviews; }
cdl_shape cdl_model_input(const cdl_model *m) { return m->input; }
int cdl_model_outputs(const cdl_model *m) { return m->outputs; }
int cdl_model_max_batch(const cdl_model *m) { return m->max_batch; }
cdl_backend *cdl_model_backend(const cdl_model *m) { return m->be; }
const cdl_model_spec *cdl_model_get_spec(const cdl_model *m) { return &m->spec; }

int cdl_model_nbuffers(const cdl_model *m) { return m->nbuffers; }
float *cdl_model_buffers(cdl_model *m) { return m->buffers; }
size_t cdl_model_nbuffer_floats(const cdl_model *m) { return m->nbuffer_floats; }

const cdl_param_view *cdl_model_buffer(const cdl_model *m, int i)
{
    return i >= 0 && i < m->nbuffers ? &m->bviews[i] : NULL;
}

void cdl_model_set_allreduce(cdl_model *m, cdl_model_allreduce_fn fn, void *ctx)
{
    m->allreduce = fn;
    m->allreduce_ctx = fn ? ctx : NULL;
}

const cdl_param_view *cdl_model_view(const cdl_model *m, int i)
{
    return i >= 0 && i < m->nviews ? &m->views[i] : NULL;
}

const cdl_param_view *cdl_model_find(const cdl_model *m, const char *name)
{
    for (int i = 0; i < m->nviews; i++)
        if (!strcmp(m->views[i].name, name))
            return &m->views[i];
    return NULL;
}

void cdl_model_print(const cdl_model *m, void *file)
{
    FILE *f = file;
    fprintf(f, "model %s: input %dx%dx%d, %zu parameters, batches of up to %d, backend %s\n",
            m->spec.source, m->input.c, m->input.h, m->input.w, m->nparams, m->max_batch,
            m->be->ops->name);
    fprintf(f, "  %3s  %-8s %-44s %-14s %s\n", "#", "name", "layer", "output", "params");
    for (int i = 0; i < m->nlayers; i++) {
        const layer *L = &m->layers[i];
        char desc[128], shape[48];
        spec_layer_str(L->s, desc, sizeof desc);
        if (L->out.h == 1 && L->out.w == 1)
            snprintf(shape, sizeof shape, "%d", L->out.c);
        else
            snprintf(shape, sizeof shape, "%dx%dx%d", L->out.c, L->out.h, L->out.w);
        fprintf(f, "  %3d  %-8s %-44s %-14s %zu\n", i + 1, L->s->name[0] ? L->s->name : "-", desc,
                shape, L->pcount);
    }
}
