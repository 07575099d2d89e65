/* Forward and backward over the model's graph (planned in model.c). */
#include <stdint.h>
#include <string.h>

#include <cdl/cdl.h>

#include "core/rng.h"
#include "graph.h"

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

static float *buffer(const cdl_model *m, int view)
{
    return m->buffers + m->bviews[view].offset;
}

static cdl_act act_of(const cdl_layer_spec *s)
{
    switch (s->kind) {
    case CDL_LAYER_GELU: return s->approx_tanh ? CDL_ACT_GELU_TANH : CDL_ACT_GELU;
    case CDL_LAYER_SILU: return CDL_ACT_SILU;
    case CDL_LAYER_SIGMOID: return CDL_ACT_SIGMOID;
    case CDL_LAYER_TANH: return CDL_ACT_TANH;
    case CDL_LAYER_LEAKYRELU: return CDL_ACT_LEAKYRELU;
    default: return CDL_ACT_RELU;
    }
}

static int hw_of(cdl_shape s)
{
    return s.h * s.w;
}

static void allreduce(cdl_model *m, float *buf, size_t count)
{
    if (m->allreduce)
        m->allreduce(m->allreduce_ctx, buf, count);
}

/* batchnorm2d forward: batch statistics (reduced across ranks with sync)
 * and the running-stat update in training, running statistics else. */
static void bn_forward(cdl_model *m, layer *L, int n, int train)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    int c = L->ishape.c, hw = hw_of(L->ishape);
    float eps = L->s->eps > 0 ? L->s->eps : 1e-5f;
    const float *x = model_in(m, L, 0);
    if (!train) {
        op->bn_eval(be, n, c, hw, x, buffer(m, L->bufview), buffer(m, L->bufview + 1), eps,
                    param(m, L->wview), param(m, L->bview), L->fuse_relu, L->y);
        return;
    }
    float *sum = L->stats, *sqdev = sum + c + 1, *saved = sqdev + c;
    int sync = L->s->sync;
    if (L->fuse_add) {   /* the add that alone reads it, and its ReLU: y is the add's */
        const layer *A = &m->layers[L->last_reader];
        const float *res = model_in(m, A, A->in[0] == L - m->layers ? 1 : 0);
        op->bn_train_fwd_add_relu(be, n, c, hw, x, eps, param(m, L->wview), param(m, L->bview),
                                  res, L->y, sum, sqdev, saved);
    } else if (L->bn_one_call) {
        op->bn_train_fwd(be, n, c, hw, x, eps, param(m, L->wview), param(m, L->bview),
                         L->fuse_relu, L->y, sum, sqdev, saved);
    } else {
        op->bn_sum(be, n, c, hw, x, sum);
        if (sync)
            allreduce(m, sum, (size_t)c + 1);
        op->bn_sqdev(be, n, c, hw, x, sum, sqdev);
        if (sync)
            allreduce(m, sqdev, (size_t)c);
        op->bn_apply(be, n, c, hw, x, sum, sqdev, eps, param(m, L->wview), param(m, L->bview),
                     L->fuse_relu, L->y, saved);
    }
    op->bn_running(be, c, sum, sqdev, L->s->momentum, buffer(m, L->bufview),
                   buffer(m, L->bufview + 1), buffer(m, L->bufview + 2));
}

/* A linear layer's forward, with the activation or add that alone reads
 * it where they are fused (plan_linear_eps). */
static void linear_forward(cdl_model *m, layer *L, int n, const float *x)
{
    cdl_backend *be = m->be;
    int rows = n * L->rows, in = L->feat_in, out = L->s->out;
    const float *w = param(m, L->wview), *b = param(m, L->bview);
    if (L->fuse_act) {
        const layer *A = &m->layers[L->last_reader];
        if (A->keeps_factor)   /* L->y: the factor of A's backward */
            be->ops->linear_act_grad_fwd(be, rows, in, out, x, w, b, act_of(A->s), A->s->slope,
                                         L->y, A->y, m->ws);
        else
            be->ops->linear_act_fwd(be, rows, in, out, x, w, b, act_of(A->s), A->s->slope, L->y,
                                    A->y, m->ws);
    } else if (L->fuse_res) {   /* L->y is the add's */
        const layer *R = &m->layers[L->last_reader];
        const float *r = model_in(m, R, R->in[0] == L - m->layers ? 1 : 0);
        be->ops->linear_add_fwd(be, rows, in, out, x, w, b, r, L->y, m->ws);
    } else {
        be->ops->linear_fwd(be, rows, in, out, x, w, b, L->y, m->ws);
    }
}

const float *cdl_model_forward(cdl_model *m, const float *x_dev, int n, int train,
                               uint64_t dropout_seed)
{
    if (!m) {
        cdl_error("cdl_model_forward: the model is NULL (did cdl_model_create fail?)");
        return NULL;
    }
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    m->n = 0;
    if (n < 1 || n > m->max_batch || !x_dev) {
        cdl_error("%s: forward of %d samples%s: the model takes batches of 1 to %d", m->spec.source,
                  n, x_dev ? "" : " from a NULL input", m->max_batch);
        return NULL;
    }
    if (!m->weights_set) {
        cdl_error("%s: forward of a model whose weights were never set (all 0, it would learn "
                  "nothing): call cdl_model_init(m, seed) after cdl_model_create for fresh "
                  "ones, or load them (cdl_model_load_weights, a checkpoint)", m->spec.source);
        return NULL;
    }
    op->copy(be, m->x, x_dev, (size_t)n * m->input.c * m->input.h * m->input.w * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        size_t count = (size_t)n * L->out_numel;
        const float *x = model_in(m, L, 0);
        switch (L->s->kind) {
        case CDL_LAYER_CONV2D: {
            cdl_conv2d_desc d = L->conv;
            d.n = n;
            op->conv2d_fwd(be, &d, x, param(m, L->wview), param(m, L->bview), L->y, m->ws);
            break;
        }
        case CDL_LAYER_LINEAR:   /* a sequence: every position, (n*T, E) rows */
            linear_forward(m, L, n, x);
            break;
        case CDL_LAYER_EMBEDDING:
            op->embedding_fwd(be, n * L->rows, L->s->out, x, param(m, L->wview), L->y);
            break;
        case CDL_LAYER_POSEMBEDDING:   /* the first T rows of the (block, E) weight */
            op->bcast_add_fwd(be, n, L->in_numel, x, param(m, L->wview), L->y);
            break;
        case CDL_LAYER_LAYERNORM:
            op->layernorm_fwd(be, n * L->rows, L->feat_in, x, param(m, L->wview),
                              param(m, L->bview), L->s->eps > 0 ? L->s->eps : 1e-5f, L->y,
                              L->saved);
            break;
        case CDL_LAYER_ATTENTION:
            op->attn_fwd(be, n, L->ishape.c, L->out.w, L->s->heads, x, L->y, L->saved, m->ws);
            break;
        case CDL_LAYER_MAXPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->maxpool_fwd(be, &d, x, L->y, L->argmax);
            break;
        }
        case CDL_LAYER_AVGPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            op->avgpool_fwd(be, &d, x, L->y);
            break;
        }
        case CDL_LAYER_RELU:
            if (!L->fused)
                op->relu_fwd(be, count, x, L->y);   /* maybe in place */
            break;
        case CDL_LAYER_GELU:
        case CDL_LAYER_SILU:
        case CDL_LAYER_SIGMOID:
        case CDL_LAYER_TANH:
        case CDL_LAYER_LEAKYRELU:
            if (!L->fwd_by_linear)
                op->act_fwd(be, act_of(L->s), L->s->slope, count, x, L->y);
            break;
        case CDL_LAYER_DROPOUT:
            L->dropped = train && L->s->p > 0.0f;
            if (L->dropped)
                op->dropout_fwd(be, count, L->s->p, model_dropout_seed(dropout_seed, i), x,
                                L->y, L->mask);
            else
                op->copy(be, L->y, x, count * sizeof(float));
            break;
        case CDL_LAYER_FLATTEN:
            break;   /* same memory, read as (n, c*h*w) */
        case CDL_LAYER_ADD:   /* the last sum takes the fused ReLU */
            for (int j = 1; j < L->nin && !(L->by_bn && train) && !L->fwd_by_linear; j++)
                (L->fuse_relu && j == L->nin - 1 ? op->add_relu : op->add)(
                    be, count, j == 1 ? x : L->y, model_in(m, L, j), L->y);
            break;
        case CDL_LAYER_CONCAT:
            for (int j = 0, off = 0; j < L->nin; j++) {
                int cj = L->in[j] < 0 ? m->input.c : m->layers[L->in[j]].out.c;
                op->channel_copy(be, n, cj, hw_of(L->out), model_in(m, L, j), cj, 0, L->y,
                                 L->out.c, off, 0);
                off += cj;
            }
            break;
        case CDL_LAYER_BATCHNORM2D:
            bn_forward(m, L, n, train);
            break;
        case CDL_LAYER_GLOBALAVGPOOL:
            op->gap_fwd(be, n, L->ishape.c, hw_of(L->ishape), x, L->y);
            break;
        }
    }
    m->n = n;
    m->train = train;
    return m->layers[m->nlayers - 1].y;
}

/* Where layer L's backward writes the gradient of its input j: straight
 * into that input's dy when L is its last reader (the first to write it),
 * else into tmp, to be accumulated (finish_dx). NULL: no gradient needed. */
static float *dx_target(cdl_model *m, const layer *L, int i, int j)
{
    int k = L->in[j];
    if (k < 0 || !m->layers[k].need_grad)
        return NULL;
    const layer *K = &m->layers[k];
    return K->last_reader == i ? K->dy : m->tmp;
}

/* A dx left in tmp is added to the input's dy now, or by the input's own
 * backward right after (defer_dx: see plan_deferred). */
static void finish_dx(cdl_model *m, const layer *L, int j, const float *dx, size_t count)
{
    if (dx && dx == m->tmp && !(j == 0 && L->defer_dx))
        m->be->ops->accumulate(m->be, count, m->tmp, m->layers[L->in[j]].dy);
}

static void bn_backward(cdl_model *m, layer *L, int i, int n)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    int c = L->ishape.c, hw = hw_of(L->ishape);
    const float *x = model_in(m, L, 0);
    const float *saved = L->stats + 2 * c + 1;
    const float *y_relu = L->fuse_relu ? L->y : NULL;
    float *dgamma = grad(m, L->wview), *dbeta = grad(m, L->bview);
    if (L->bn_bwd_one_call) {
        float *dx = dx_target(m, L, i, 0);
        op->bn_train_bwd(be, n, c, hw, x, y_relu, L->dy, saved, param(m, L->wview), dgamma,
                         dbeta, dx);
        finish_dx(m, L, 0, dx, (size_t)n * L->in_numel);
        return;
    }
    op->bn_bwd_sums(be, n, c, hw, x, y_relu, L->dy, saved, dgamma, dbeta);
    const float *sum_dy = dbeta, *sum_dy_xhat = dgamma;
    if (L->s->sync && m->allreduce) {
        /* The parameter gradients stay this rank's (DDP averages them);
         * the normalisation needs the global sums. */
        op->copy(be, m->sync_scratch, dbeta, (size_t)c * sizeof(float));
        op->copy(be, m->sync_scratch + c, dgamma, (size_t)c * sizeof(float));
        allreduce(m, m->sync_scratch, 2 * (size_t)c);
        sum_dy = m->sync_scratch;
        sum_dy_xhat = m->sync_scratch + c;
    }
    float *dx = dx_target(m, L, i, 0);
    if (!dx)
        return;
    op->bn_bwd_apply(be, n, c, hw, x, y_relu, L->dy, saved, param(m, L->wview), sum_dy,
                     sum_dy_xhat, dx);
    finish_dx(m, L, 0, dx, (size_t)n * L->in_numel);
}

/* An add with the ReLU after it fused: the ReLU's mask applied to dy in
 * place (the input sharing dy reads it there) and, in the same pass, the
 * result written or added to the first input with a gradient buffer of its
 * own; with adds_tmp, to dy + tmp. Returns that input's index, or -1. */
static int add_relu_backward(cdl_model *m, layer *L, int i, int n)
{
    cdl_backend *be = m->be;
    size_t count = (size_t)n * L->out_numel;
    const float *pending = L->adds_tmp ? m->tmp : NULL;
    for (int j = 0; j < L->nin; j++) {
        int k = L->in[j];
        layer *K = k >= 0 ? &m->layers[k] : NULL;
        if (K && K->need_grad && K->dy_alias != i) {
            if (pending)
                be->ops->relu_bwd_split_add(be, count, L->y, L->dy, pending, L->dy, K->dy,
                                            K->last_reader != i);
            else
                be->ops->relu_bwd_split(be, count, L->y, L->dy, L->dy, K->dy,
                                        K->last_reader != i);
            return j;
        }
    }
    if (pending)
        be->ops->relu_bwd_split_add(be, count, L->y, L->dy, pending, L->dy, NULL, 0);
    else
        be->ops->relu_bwd(be, count, L->y, L->dy, L->dy);
    return -1;
}

/* The gradient of every input of an add or concat from the output's. */
static void join_backward(cdl_model *m, layer *L, int i, int n)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *op = be->ops;
    int done = L->fuse_relu ? add_relu_backward(m, L, i, n) : -1;
    for (int j = 0, off = 0; j < L->nin; j++) {
        int k = L->in[j];
        int cj = k < 0 ? m->input.c : m->layers[k].out.c;
        if (k >= 0 && m->layers[k].need_grad && j != done) {
            layer *K = &m->layers[k];
            int acc = K->last_reader != i;
            if (L->s->kind == CDL_LAYER_CONCAT)
                op->channel_copy(be, n, cj, hw_of(L->out), L->dy, L->out.c, off, K->dy, cj, 0,
                                 acc);
            else if (K->dy_alias == i)
                ;   /* shares this layer's dy */
            else if (acc)
                op->accumulate(be, (size_t)n * L->out_numel, L->dy, K->dy);
            else
                op->copy(be, K->dy, L->dy, (size_t)n * L->out_numel * sizeof(float));
        }
        off += cj;
    }
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
    if (!m->train && m->nbuffers) {
        cdl_error("%s: backward after an evaluation forward: batchnorm2d layers have gradients "
                  "only for batch statistics; call cdl_model_forward with train=1", m->spec.source);
        return;
    }
    layer *last = &m->layers[m->nlayers - 1];
    if (last->need_grad)
        op->copy(be, last->dy, dlogits_dev, (size_t)n * last->out_numel * sizeof(float));
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer *L = &m->layers[i];
        if (!L->need_grad)
            continue;
        size_t count = (size_t)n * L->in_numel;
        const float *x = model_in(m, L, 0), *dy = L->dy;
        float *dx = dx_target(m, L, i, 0);
        switch (L->s->kind) {
        case CDL_LAYER_CONV2D: {
            cdl_conv2d_desc d = L->conv;
            d.n = n;
            op->conv2d_bwd(be, &d, x, param(m, L->wview), dy, dx, grad(m, L->wview),
                           grad(m, L->bview), m->ws);
            break;
        }
        case CDL_LAYER_LINEAR:
            /* Tied: dw is the embedding's gradient, written here first
             * (this layer comes later, so its backward runs earlier). */
            if (L->bwd_act) {   /* dx through the activation before it, to its input */
                layer *A = &m->layers[L->in[0]];
                float *adx = dx_target(m, A, L->in[0], 0);
                if (A->keeps_factor)   /* A's input buffer holds its factor */
                    op->linear_mul_bwd(be, n * L->rows, L->feat_in, L->s->out, x,
                                       param(m, L->wview), dy, model_in(m, A, 0), adx,
                                       grad(m, L->wview), grad(m, L->bview), m->ws);
                else
                    op->linear_act_bwd(be, n * L->rows, L->feat_in, L->s->out, x,
                                       param(m, L->wview), dy, act_of(A->s), A->s->slope,
                                       model_in(m, A, 0), adx, grad(m, L->wview),
                                       grad(m, L->bview), m->ws);
                finish_dx(m, A, 0, adx, (size_t)n * A->in_numel);
                dx = NULL;
                break;
            }
            op->linear_bwd(be, n * L->rows, L->feat_in, L->s->out, x, param(m, L->wview), dy, dx,
                           grad(m, L->wview), grad(m, L->bview), m->ws);
            break;
        case CDL_LAYER_EMBEDDING: {
            const cdl_param_view *v = &m->views[L->wview];
            if (!L->tied_by)   /* the op accumulates */
                op->fill(be, grad(m, L->wview), 0.0f, v->numel);
            op->embedding_bwd(be, n * L->rows, L->s->out, L->s->vocab, x, dy, grad(m, L->wview));
            break;
        }
        case CDL_LAYER_POSEMBEDDING: {
            /* Positions past this batch's T get no gradient. */
            const cdl_param_view *v = &m->views[L->wview];
            op->bcast_add_bwd(be, n, L->in_numel, dy, grad(m, L->wview));
            if (v->numel > L->in_numel)
                op->fill(be, grad(m, L->wview) + L->in_numel, 0.0f, v->numel - L->in_numel);
            if (dx && dx != dy)
                op->copy(be, dx, dy, count * sizeof(float));
            break;
        }
        case CDL_LAYER_LAYERNORM:
            if (L->dx_acc) {   /* onto the input's dy: nothing left for finish_dx */
                op->layernorm_bwd_acc(be, n * L->rows, L->feat_in, x, param(m, L->wview),
                                      L->saved, dy, m->layers[L->in[0]].dy, grad(m, L->wview),
                                      grad(m, L->bview));
                dx = NULL;
                break;
            }
            op->layernorm_bwd(be, n * L->rows, L->feat_in, x, param(m, L->wview), L->saved, dy,
                              dx ? dx : m->tmp, grad(m, L->wview), grad(m, L->bview));
            break;
        case CDL_LAYER_ATTENTION:
            if (dx)
                op->attn_bwd(be, n, L->ishape.c, L->out.w, L->s->heads, x, L->y, L->saved, dy, dx,
                             m->ws);
            break;
        case CDL_LAYER_MAXPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            if (dx)
                op->maxpool_bwd(be, &d, dy, L->argmax, dx);
            break;
        }
        case CDL_LAYER_AVGPOOL2D: {
            cdl_pool2d_desc d = L->pool;
            d.n = n;
            if (dx)
                op->avgpool_bwd(be, &d, dy, dx);
            break;
        }
        case CDL_LAYER_RELU:
            if (!L->fused && dx)
                op->relu_bwd(be, count, L->y, dy, dx);   /* dx may be dy */
            break;
        case CDL_LAYER_GELU:
        case CDL_LAYER_SILU:
        case CDL_LAYER_SIGMOID:
        case CDL_LAYER_TANH:
        case CDL_LAYER_LEAKYRELU:
            if (L->bwd_by_linear)
                dx = NULL;   /* made by the linear after it */
            else if (dx)
                op->act_bwd(be, act_of(L->s), L->s->slope, count, x, L->y, dy, dx);
            break;
        case CDL_LAYER_DROPOUT:
            if (dx && L->dropped)
                op->dropout_bwd(be, count, L->s->p, L->mask, dy, dx);
            else if (dx)
                op->copy(be, dx, dy, count * sizeof(float));
            break;
        case CDL_LAYER_FLATTEN:
            if (dx && dx != dy)
                op->copy(be, dx, dy, count * sizeof(float));
            break;
        case CDL_LAYER_GLOBALAVGPOOL:
            if (dx)
                op->gap_bwd(be, n, L->ishape.c, hw_of(L->ishape), dy, dx);
            break;
        case CDL_LAYER_BATCHNORM2D:
            bn_backward(m, L, i, n);
            dx = NULL;
            break;
        case CDL_LAYER_ADD:
        case CDL_LAYER_CONCAT:
            join_backward(m, L, i, n);
            dx = NULL;
            break;
        }
        finish_dx(m, L, 0, dx, count);
        if (L->pcount && cb)
            cb(ctx, L->poff, L->pcount);
    }
}
