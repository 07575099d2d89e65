/* The model: a graph of layers (each reads the previous one or named
 * earlier ones) over flat buffers of parameters, gradients and batchnorm
 * buffers, with every buffer a training step needs planned and allocated
 * once, for max_batch samples, when the model is created.
 *
 * Activations: the model keeps its own copy of the input batch (so the
 * caller may refill its buffer before backward) and one buffer per layer
 * output, except where a layer can share its input's: flatten only
 * reinterprets it; a ReLU (sigmoid, tanh) whose input has no other reader
 * and whose producer's backward does not read its own output overwrites
 * it (their backward reads only their output); a ReLU right after a
 * batchnorm2d or an add that only it reads is fused into that layer (the
 * add's fusion where the backend has add_relu and relu_bwd_split); in
 * training, such an add of a batchnorm is computed by that batchnorm
 * (plan_bn_add), whose own output is then never stored.
 *
 * Gradients: layers run backward in reverse spec order, which is a
 * reverse topological order. The gradient of a layer's output (dy) is
 * written by its last reader and accumulated into by the earlier ones
 * (fan-out), then consumed by the layer itself; its buffer lives from the
 * first write to that read and is placed in a shared pool by first fit
 * over those intervals, so buffers are reused once their last reader has
 * run. A flatten, in-place activation or add passes its dy to the one
 * input it solely feeds without a copy. Parameters lie in spec order, so
 * the ranges reported by backward move from the end towards the start. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "core/rng.h"
#include "graph.h"

#define MAX_BATCH_LIMIT (1 << 20)
#define MAX_BATCH_NUMEL 2147483647L   /* backends index a batch with int */

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

static cdl_param_view *new_view(cdl_param_view *v, const char *lname, const char *what,
                                size_t offset, int ndim, const int64_t *shape)
{
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s.%s", lname, what);
    v->offset = offset;
    v->ndim = ndim;
    v->numel = 1;
    for (int d = 0; d < ndim; d++) {
        v->shape[d] = shape[d];
        v->numel *= (size_t)shape[d];
    }
    return v;
}

/* The parameter views of a conv2d, linear, batchnorm2d, embedding,
 * posembedding or layernorm layer. A tied linear has no weight view: it
 * uses its embedding's (and gets an alias under its own name). */
static void add_params(cdl_model *m, layer *L)
{
    const cdl_layer_spec *s = L->s;
    int64_t shape[4];
    int ndim, fan_in = 0, norm = s->kind == CDL_LAYER_LAYERNORM;
    float std = s->init_std;
    if (s->kind == CDL_LAYER_EMBEDDING || s->kind == CDL_LAYER_POSEMBEDDING) {
        ndim = 2;   /* (vocab or block, E) */
        shape[0] = s->kind == CDL_LAYER_EMBEDDING ? s->vocab : s->block;
        shape[1] = s->out;
        std = std > 0 ? std : -1.0f;   /* PyTorch's nn.Embedding: N(0, 1) */
    } else if (norm) {
        ndim = 1;   /* weight, bias (features) */
        shape[0] = L->feat_in;
        if (!s->bias) {
            cdl_param_view *v = new_view(&m->views[m->nviews], s->name, "weight", m->nparams, 1,
                                         shape);
            v->is_norm = 1;
            L->wview = m->nviews++;
            m->nparams += v->numel;
            L->pcount = m->nparams - L->poff;
            return;
        }
    } else if (s->kind == CDL_LAYER_LINEAR && s->tie) {
        layer *E = &m->layers[s->tie - 1];
        L->wview = E->wview;
        E->tied_by = 1;
        cdl_param_view *a = &m->aliases[m->naliases++];
        *a = m->views[E->wview];
        snprintf(a->name, sizeof a->name, "%s.weight", s->name);
        if (s->bias) {
            shape[0] = s->out;
            cdl_param_view *v = new_view(&m->views[m->nviews], s->name, "bias", m->nparams, 1,
                                         shape);
            v->fan_in = L->feat_in;
            v->is_bias = 1;
            v->init_std = std;
            L->bview = m->nviews++;
            m->nparams += v->numel;
        }
        L->pcount = m->nparams - L->poff;
        return;
    } else if (s->kind == CDL_LAYER_CONV2D) {
        spec_conv c = spec_conv_of(s);
        ndim = 4;   /* (out, in/groups, kh, kw) */
        shape[0] = s->out;
        shape[1] = L->ishape.c / c.groups;
        shape[2] = c.kh;
        shape[3] = c.kw;
        fan_in = (int)(shape[1] * c.kh * c.kw);
    } else if (s->kind == CDL_LAYER_LINEAR) {
        ndim = 2;   /* (out, in) */
        shape[0] = s->out;
        shape[1] = L->feat_in;
        fan_in = L->feat_in;
    } else {   /* batchnorm2d: weight and bias (c) */
        ndim = 1;
        shape[0] = L->ishape.c;
        fan_in = 0;
    }
    int bn = s->kind == CDL_LAYER_BATCHNORM2D;
    cdl_param_view *v = new_view(&m->views[m->nviews], s->name, "weight", m->nparams, ndim, shape);
    v->fan_in = fan_in;
    v->is_bn = bn;
    v->is_norm = norm;
    v->init_std = std;
    L->wview = m->nviews++;
    m->nparams += v->numel;
    int emb = s->kind == CDL_LAYER_EMBEDDING || s->kind == CDL_LAYER_POSEMBEDDING;
    if ((s->bias && !emb) || bn) {
        shape[0] = bn ? L->ishape.c : norm ? L->feat_in : s->out;
        v = new_view(&m->views[m->nviews], s->name, "bias", m->nparams, 1, shape);
        v->fan_in = fan_in;
        v->is_bias = 1;
        v->is_bn = bn;
        v->is_norm = norm;
        v->init_std = std;
        L->bview = m->nviews++;
        m->nparams += v->numel;
    }
    L->pcount = m->nparams - L->poff;
    if (!bn)
        return;
    /* Buffers: running_mean, running_var (c), num_batches_tracked (a scalar). */
    static const char *const bname[3] = {"running_mean", "running_var", "num_batches_tracked"};
    L->bufview = m->nbuffers;
    for (int b = 0; b < 3; b++) {
        v = new_view(&m->bviews[m->nbuffers++], s->name, bname[b], m->nbuffer_floats, b < 2,
                     shape);
        v->is_count = b == 2;
        m->nbuffer_floats += v->numel;
    }
}

/* BN, add and ReLU in one pass in training: an add of two inputs with its
 * ReLU fused whose later input is a batchnorm (no sync, no ReLU of its
 * own) that only the add reads is computed by that batchnorm
 * (bn_train_fwd_add_relu, the other input already made), which writes the
 * add's output and never stores its own: its backward does not read it.
 * Evaluation runs both layers, the BN writing into the add's output, which
 * the add then updates in place. The ResNets' last BN of every block. */
static void plan_bn_add(cdl_model *m)
{
    if (!m->be->ops->bn_train_fwd_add_relu)
        return;
    for (int i = 0; i < m->nlayers; i++) {
        layer *A = &m->layers[i];
        if (A->s->kind != CDL_LAYER_ADD || !A->fuse_relu || A->nin != 2 || A->in[0] < 0 ||
            A->in[1] < 0)
            continue;
        int b = A->in[0] > A->in[1] ? A->in[0] : A->in[1];
        layer *B = &m->layers[b];
        if (A->in[0] != A->in[1] && B->s->kind == CDL_LAYER_BATCHNORM2D && B->bn_one_call &&
            !B->fuse_relu && B->ncons == 1)
            B->fuse_add = A->by_bn = 1;
    }
}

/* Fan-out without an accumulate pass: a conv2d that reads the ReLU fused
 * into an add (the add's output, sharing its dy), but is not its last
 * reader, writes its dx to tmp, which is normally added to that dy right
 * away. Where nothing runs between the two backwards (only fused ReLUs lie
 * between them), the add's own backward adds tmp instead, inside the pass
 * it makes anyway (relu_bwd_split_add: the same sums, never stored). The
 * ResNets' block inputs: the next block's first conv. */
static void plan_deferred(cdl_model *m)
{
    if (!m->be->ops->relu_bwd_split_add)
        return;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        int k = L->in[0];
        if (L->s->kind != CDL_LAYER_CONV2D || k < 0)
            continue;
        layer *K = &m->layers[k];
        int a = K->in[0];
        if (K->s->kind != CDL_LAYER_RELU || !K->fused || a < 0 || !K->need_grad ||
            K->last_reader == i)
            continue;
        layer *A = &m->layers[a];
        if (A->s->kind != CDL_LAYER_ADD || !A->fuse_relu || A->dy_alias != k)
            continue;
        int quiet = 1;
        for (int j = a + 1; j < i; j++)
            quiet &= m->layers[j].s->kind == CDL_LAYER_RELU && m->layers[j].fused;
        if (quiet)
            L->defer_dx = A->adds_tmp = 1;
    }
}

static int is_act(cdl_layer_kind k)
{
    return k == CDL_LAYER_GELU || k == CDL_LAYER_SILU || k == CDL_LAYER_SIGMOID ||
           k == CDL_LAYER_TANH || k == CDL_LAYER_LEAKYRELU;
}

/* Products and the elementwise layers next to them, made in one pass over
 * the product's rows while they are in cache (backend.h: linear_act_fwd,
 * linear_add_fwd, linear_act_bwd; the bits of the separate ops):
 *   - a linear that only an activation reads computes that activation;
 *   - a linear whose input is an activation that only it reads takes its
 *     dx through that activation's backward, written where the
 *     activation's dx would go;
 *   - a linear that only an add of two inputs (no ReLU fused) reads
 *     computes the add, into the add's buffer.
 * The GPT's MLP (c_fc, GELU, c_proj) and both projections into the
 * residual stream (without dropout). */
static void plan_linear_eps(cdl_model *m)
{
    const cdl_backend_ops *op = m->be->ops;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        if (L->s->kind != CDL_LAYER_LINEAR)
            continue;
        layer *R = L->ncons == 1 ? &m->layers[L->last_reader] : NULL;
        if (R && op->linear_act_fwd && is_act(R->s->kind)) {
            L->fuse_act = R->fwd_by_linear = 1;
        } else if (R && op->linear_add_fwd && R->s->kind == CDL_LAYER_ADD && R->nin == 2 &&
                   !R->fuse_relu && !R->by_bn) {
            int other = R->in[0] == i ? R->in[1] : R->in[0];
            if (other < i)   /* made before this linear runs */
                L->fuse_res = R->fwd_by_linear = 1;
        }
        /* Adjacent: the activation's dx is written before the layers
         * between them would run backward, into a buffer planned for
         * later. */
        int a = L->in[0];
        layer *A = a >= 0 && a == i - 1 ? &m->layers[a] : NULL;
        if (A && op->linear_act_bwd && is_act(A->s->kind) && A->ncons == 1 && A->need_grad) {
            L->bwd_act = A->bwd_by_linear = 1;
            /* Made by the linear before it too (planned earlier in this
             * loop) and its backward dy times a function of its input
             * alone (the GELUs): that input is needed only for the factor,
             * which the first linear keeps in its place and this one
             * multiplies by (the same bits; no exponential or error
             * function in the backward). */
            A->keeps_factor = A->fwd_by_linear && A->s->kind == CDL_LAYER_GELU &&
                              op->linear_act_grad_fwd && op->linear_mul_bwd;
        }
    }
}

/* An add's input read by other layers too (a residual stream: the block's
 * input feeds its first layer and the add) shares the add's dy, so the
 * add's backward copies nothing into it, where that is safe: the add is
 * the input's last reader, and the input's other readers all run their
 * backward (adding into the shared buffer) after every layer that reads
 * the buffer as the add's dy (the add, and the layers whose dy is the
 * add's through its other inputs: a transformer's projection into the
 * stream). Adds with a fused ReLU keep their copy (their backward splits
 * the gradient itself). A GPT's residual gradients then live in one
 * buffer from the top block to the embedding. */
static void plan_shared_dy(cdl_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        if (L->s->kind != CDL_LAYER_ADD || L->fuse_relu || L->by_bn || !L->need_grad)
            continue;
        /* The lowest layer reading this add's dy buffer: dy_alias points
         * from a layer to a later one, so one scan down from i finds the
         * layers sharing it. */
        unsigned char shares[CDL_MAX_LAYERS] = {0};
        shares[i] = 1;
        int lo = i;
        for (int j = i - 1; j >= 0; j--)
            if (m->layers[j].dy_alias >= 0 && shares[m->layers[j].dy_alias])
                shares[j] = 1, lo = j;
        for (int j = 0; j < L->nin; j++) {
            int q = L->in[j];
            if (q < 0 || shares[q])
                continue;
            layer *Q = &m->layers[q];
            if (!Q->need_grad || Q->dy_alias >= 0 || Q->last_reader != i || Q->ncons < 2)
                continue;
            /* The add being the last reader, the others lie in (q, i):
             * none may be at lo or later. */
            int ok = 1;
            for (int r = lo > q + 1 ? lo : q + 1; r < i && ok; r++)
                for (int t = 0; t < m->layers[r].nin; t++)
                    ok &= m->layers[r].in[t] != q;
            if (ok) {
                Q->dy_alias = i;
                break;
            }
        }
    }
}

/* A layer norm that is not the last reader of its input (a transformer
 * block's, reading the residual stream beside the block's add) adds its
 * dx onto the input's dy in its own pass where the backend can
 * (layernorm_bwd_acc), instead of writing tmp for finish_dx to add. */
static void plan_dx_acc(cdl_model *m)
{
    if (!m->be->ops->layernorm_bwd_acc)
        return;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        int k = L->in[0];
        if (L->s->kind == CDL_LAYER_LAYERNORM && k >= 0 && m->layers[k].need_grad &&
            m->layers[k].last_reader != i)
            L->dx_acc = 1;
    }
}

/* Readers of each output, the layers that need gradients, fusions and
 * in-place activations. */
static void plan_graph(cdl_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        L->dy_alias = -1;
        L->last_reader = -1;
        int need = spec_has_params(L->s->kind);
        for (int j = 0; j < L->nin; j++) {
            int k = L->in[j];
            if (k < 0)
                continue;
            m->layers[k].ncons++;
            m->layers[k].last_reader = i;
            need |= m->layers[k].need_grad;
        }
        L->need_grad = need;
    }
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        cdl_layer_kind k = L->s->kind;
        int src = L->in[0];
        layer *P = src >= 0 ? &m->layers[src] : NULL;
        int sole = !P || P->ncons == 1;
        const cdl_backend_ops *op = m->be->ops;
        if (k == CDL_LAYER_RELU && P && sole &&
            (P->s->kind == CDL_LAYER_BATCHNORM2D ||
             (P->s->kind == CDL_LAYER_ADD && op->add_relu && op->relu_bwd_split))) {
            L->fused = 1;
            P->fuse_relu = 1;
        }
        L->bn_one_call = k == CDL_LAYER_BATCHNORM2D && !L->s->sync && op->bn_train_fwd;
        L->bn_bwd_one_call = k == CDL_LAYER_BATCHNORM2D && !L->s->sync && op->bn_train_bwd;
        /* dy passes to a sole input unchanged (flatten), or is computed in
         * place (relu, sigmoid, tanh, fused relu), or is copied to it (add:
         * the first input it solely feeds). */
        int pass = k == CDL_LAYER_FLATTEN || k == CDL_LAYER_RELU || k == CDL_LAYER_SIGMOID ||
                   k == CDL_LAYER_TANH || k == CDL_LAYER_POSEMBEDDING;
        if (k == CDL_LAYER_ADD) {
            for (int j = 0; j < L->nin; j++) {
                int q = L->in[j];
                if (q >= 0 && m->layers[q].ncons == 1 && m->layers[q].need_grad) {
                    m->layers[q].dy_alias = i;
                    break;
                }
            }
        } else if (pass && P && sole && P->need_grad) {
            P->dy_alias = i;
        }
    }
    plan_bn_add(m);
    plan_deferred(m);
    plan_linear_eps(m);
    plan_shared_dy(m);
    plan_dx_acc(m);
}

/* 1 if an activation may overwrite its input: nothing else reads it, and
 * the layer that made it (through flattens) does not read its own output
 * in backward (a ReLU rewriting a ReLU's output leaves it unchanged). */
static int may_overwrite(const cdl_model *m, const layer *L)
{
    int k = L->in[0];
    while (k >= 0) {
        const layer *P = &m->layers[k];
        if (P->ncons != 1)
            return 0;
        if (P->s->kind != CDL_LAYER_FLATTEN) {
            cdl_layer_kind pk = P->s->kind;
            if (pk == CDL_LAYER_RELU)
                return L->s->kind == CDL_LAYER_RELU;
            return !(pk == CDL_LAYER_SIGMOID || pk == CDL_LAYER_TANH ||
                     pk == CDL_LAYER_ATTENTION ||   /* its backward reads y */
                     ((pk == CDL_LAYER_BATCHNORM2D || pk == CDL_LAYER_ADD) && P->fuse_relu));
        }
        k = P->in[0];
    }
    return 1;   /* the model's own copy of the input */
}

/* Shapes, descriptors and parameter views of every layer; returns the
 * floats of scratch the backend needs for the largest conv2d / linear. */
static size_t plan_layers(cdl_model *m, const cdl_shape *shapes, const int *seqs)
{
    cdl_backend *be = m->be;
    size_t ws = 0;
    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        const cdl_layer_spec *s = &m->spec.layers[i];
        L->s = s;
        L->nin = spec_nin(s);
        for (int j = 0; j < L->nin; j++)
            L->in[j] = spec_in(s, i, j);
        L->ishape = shapes[L->in[0] + 1];
        L->out = shapes[i + 1];
        L->in_numel = numel(L->ishape);
        L->out_numel = numel(L->out);
        L->seq = seqs[i + 1];
        L->in_seq = seqs[L->in[0] + 1];
        /* Row-wise ops see (n * rows, feat_in): a sequence's positions, or
         * one row of the whole flat input. */
        L->rows = L->in_seq ? L->ishape.c : 1;
        L->feat_in = L->in_seq ? L->ishape.w : (int)L->in_numel;
        if (s->kind == CDL_LAYER_EMBEDDING)
            L->rows = L->ishape.c;   /* one id per position */
        L->wview = L->bview = L->bufview = -1;
        L->poff = m->nparams;
        if (spec_has_params(s->kind))
            add_params(m, L);
        /* Workspace sizes for the largest and the smallest batch. */
        const int batches[2] = {m->max_batch, 1};
        if (s->kind == CDL_LAYER_CONV2D) {
            spec_conv c = spec_conv_of(s);
            L->conv = (cdl_conv2d_desc){.n = m->max_batch, .c = L->ishape.c, .h = L->ishape.h,
                                        .w = L->ishape.w, .oc = s->out, .kh = c.kh, .kw = c.kw,
                                        .stride_h = c.sh, .stride_w = c.sw, .pad_h = c.ph,
                                        .pad_w = c.pw, .dil_h = c.dh, .dil_w = c.dw,
                                        .groups = c.groups, .oh = L->out.h, .ow = L->out.w};
            for (int b = 0; b < 2; b++) {
                cdl_conv2d_desc d = L->conv;
                d.n = batches[b];
                size_t need = be->ops->conv2d_workspace(be, &d);
                ws = need > ws ? need : ws;
            }
        } else if (s->kind == CDL_LAYER_LINEAR) {
            for (int b = 0; b < 2; b++) {
                size_t need = be->ops->linear_workspace(be, batches[b] * L->rows, L->feat_in,
                                                        s->out);
                ws = need > ws ? need : ws;
            }
        } else if (s->kind == CDL_LAYER_ATTENTION) {
            for (int b = 0; b < 2; b++) {
                size_t need = be->ops->attn_workspace(be, batches[b], L->ishape.c, L->out.w,
                                                      s->heads);
                ws = need > ws ? need : ws;
            }
        } else if (s->kind == CDL_LAYER_MAXPOOL2D || s->kind == CDL_LAYER_AVGPOOL2D) {
            L->pool = (cdl_pool2d_desc){.n = m->max_batch, .c = L->ishape.c, .h = L->ishape.h,
                                        .w = L->ishape.w, .k = s->kernel,
                                        .stride = s->stride ? s->stride : s->kernel,
                                        .pad = s->pad, .oh = L->out.h, .ow = L->out.w};
        }
    }
    plan_graph(m);
    return ws;
}

/* A gradient buffer's life in backward steps (step t runs layer
 * nlayers-1-t; the caller's dlogits are copied at step -1). */
typedef struct interval {
    int start, end;
    size_t size, off;
} interval;

/* First fit: each buffer, in order of its first write, at the lowest
 * offset not used by a buffer alive at the same time. Returns the pool's
 * size. */
static size_t place(interval *iv, int n)
{
    size_t total = 0;
    int order[CDL_MAX_LAYERS];
    for (int i = 0; i < n; i++) {   /* insertion sort by start */
        int j = i;
        while (j > 0 && iv[order[j - 1]].start > iv[i].start) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int a = 0; a < n; a++) {
        interval *x = &iv[order[a]];
        size_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int b = 0; b < a; b++) {
                const interval *y = &iv[order[b]];
                if (y->end < x->start || y->start > x->end)
                    continue;   /* not alive together */
                if (off < y->off + y->size && y->off < off + x->size) {
                    off = y->off + y->size;
                    moved = 1;
                }
            }
        }
        x->off = off;
        total = off + x->size > total ? off + x->size : total;
    }
    return total;
}

/* Gradient buffers by liveness; returns the pool's floats and sets each
 * layer's dy offset (in dyoff, -1 = none) and the accumulation scratch. */
static size_t plan_grads(cdl_model *m, long *dyoff, size_t *tmp)
{
    size_t mb = (size_t)m->max_batch;
    int root[CDL_MAX_LAYERS], slot[CDL_MAX_LAYERS], n = 0;
    interval iv[CDL_MAX_LAYERS];
    *tmp = 0;
    /* A layer whose dy is another's shares that one's buffer (a chain). */
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer *L = &m->layers[i];
        root[i] = L->dy_alias >= 0 ? root[L->dy_alias] : i;
        slot[i] = -1;
        dyoff[i] = -1;
        if (!L->need_grad)
            continue;
        /* Its first writer: the last reader, or the linear that makes that
         * reader's backward (bwd_by_linear: one step earlier). */
        int first = L->last_reader;
        if (first >= 0 && m->layers[first].bwd_by_linear)
            first = m->layers[first].last_reader;
        int start = first < 0 ? -1 : m->nlayers - 1 - first;
        int end = m->nlayers - 1 - i;
        if (root[i] == i) {
            slot[i] = n;
            iv[n++] = (interval){start, end, round16(mb * L->out_numel), 0};
        } else {
            interval *r = &iv[slot[root[i]]];
            slot[i] = slot[root[i]];
            r->end = end > r->end ? end : r->end;
        }
        /* Earlier readers of a layer with several write into tmp first. */
        if (L->ncons > 1)
            *tmp = mb * L->out_numel > *tmp ? mb * L->out_numel : *tmp;
    }
    size_t total = place(iv, n);
    for (int i = 0; i < m->nlayers; i++)
        if (slot[i] >= 0)
            dyoff[i] = (long)iv[slot[i]].off;
    return total;
}

/* Activation, argmax, mask, statistics and gradient buffers; see the top
 * comment. */
static int alloc_buffers(cdl_model *m, size_t ws_floats)
{
    cdl_backend *be = m->be;
    size_t mb = (size_t)m->max_batch;
    long act_off[CDL_MAX_LAYERS], dyoff[CDL_MAX_LAYERS];
    size_t am_off[CDL_MAX_LAYERS], mask_off[CDL_MAX_LAYERS], st_off[CDL_MAX_LAYERS];
    size_t sv_off[CDL_MAX_LAYERS];
    size_t nact = 0, nam = 0, nmask = 0, nst = 0, sync = 0, tmp = 0, nsv = 0;

    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        cdl_layer_kind k = L->s->kind;
        int act_inplace = k == CDL_LAYER_RELU || k == CDL_LAYER_SIGMOID || k == CDL_LAYER_TANH;
        act_off[i] = -1;   /* -1: the input's buffer */
        if (!(k == CDL_LAYER_FLATTEN || L->fused || L->fuse_add || L->fuse_res ||
              (act_inplace && may_overwrite(m, L)))) {
            act_off[i] = (long)nact;
            nact += round16(mb * L->out_numel);
        }
        am_off[i] = nam;
        if (k == CDL_LAYER_MAXPOOL2D)
            nam += round16(mb * L->out_numel);
        mask_off[i] = nmask;
        if (k == CDL_LAYER_DROPOUT)
            nmask += (mb * L->out_numel + 63) & ~(size_t)63;
        sv_off[i] = nsv;
        if (k == CDL_LAYER_LAYERNORM)
            nsv += round16(mb * 2 * (size_t)L->rows);
        if (k == CDL_LAYER_ATTENTION)
            nsv += round16(mb * (size_t)L->s->heads * (size_t)L->ishape.c);
        st_off[i] = nst;
        if (k == CDL_LAYER_BATCHNORM2D) {
            nst += round16(4 * (size_t)L->ishape.c + 2);
            if (L->s->sync && 2 * (size_t)L->ishape.c > sync)
                sync = 2 * (size_t)L->ishape.c;
        }
    }
    size_t ngrad = plan_grads(m, dyoff, &tmp);
    /* A layernorm on the model's input computes a dx nobody reads: in tmp. */
    for (int i = 0; i < m->nlayers; i++) {
        const layer *L = &m->layers[i];
        int k = L->in[0];
        if (L->s->kind == CDL_LAYER_LAYERNORM && (k < 0 || !m->layers[k].need_grad) &&
            mb * L->in_numel > tmp)
            tmp = mb * L->in_numel;
    }

    int failed = 0;
    m->params = dev_alloc(be, m->nparams * sizeof(float), &failed);
    m->grads = dev_alloc(be, m->nparams * sizeof(float), &failed);
    m->buffers = dev_alloc(be, m->nbuffer_floats * sizeof(float), &failed);
    m->x = dev_alloc(be, round16(mb * numel(m->input)) * sizeof(float), &failed);
    m->acts = dev_alloc(be, nact * sizeof(float), &failed);
    m->gpool = dev_alloc(be, ngrad * sizeof(float), &failed);
    m->tmp = dev_alloc(be, tmp * sizeof(float), &failed);
    m->ws = dev_alloc(be, ws_floats * sizeof(float), &failed);
    m->bnstats = dev_alloc(be, nst * sizeof(float), &failed);
    m->sync_scratch = dev_alloc(be, sync * sizeof(float), &failed);
    m->seqsaved = dev_alloc(be, nsv * sizeof(float), &failed);
    m->argmax = dev_alloc(be, nam * sizeof(int32_t), &failed);
    m->masks = dev_alloc(be, nmask, &failed);
    if (failed)
        return cdl_error("%s: cannot allocate the model's buffers for batches of %d: %s",
                         m->spec.source, m->max_batch, cdl_last_error());

    for (int i = 0; i < m->nlayers; i++) {
        layer *L = &m->layers[i];
        L->y = act_off[i] >= 0 ? m->acts + act_off[i] : model_in(m, L, 0);
        if (L->fuse_add || L->fuse_res)   /* the add's own buffer (it comes later) */
            L->y = m->acts + act_off[L->last_reader];
        L->dy = dyoff[i] >= 0 ? m->gpool + dyoff[i] : NULL;
        if (L->s->kind == CDL_LAYER_MAXPOOL2D)
            L->argmax = m->argmax + am_off[i];
        if (L->s->kind == CDL_LAYER_DROPOUT)
            L->mask = m->masks + mask_off[i];
        if (L->s->kind == CDL_LAYER_BATCHNORM2D)
            L->stats = m->bnstats + st_off[i];
        if (L->s->kind == CDL_LAYER_LAYERNORM || L->s->kind == CDL_LAYER_ATTENTION)
            L->saved = m->seqsaved + sv_off[i];
    }
    model_reset_buffers(m);
    return 0;
}

void model_reset_buffers(cdl_model *m)
{
    cdl_backend *be = m->be;
    for (int b = 0; b < m->nbuffers; b++) {
        const cdl_param_view *v = &m->bviews[b];
        int var = strstr(v->name, ".running_var") != NULL;
        be->ops->fill(be, m->buffers + v->offset, var ? 1.0f : 0.0f, v->numel);
    }
}

/* The ops a layer kind needs, for a clear error on a backend without them. */
static const char *missing_op(const cdl_backend_ops *op, cdl_layer_kind k)
{
    switch (k) {
    case CDL_LAYER_ADD: return op->add && op->accumulate ? NULL : "add";
    case CDL_LAYER_CONCAT: return op->channel_copy ? NULL : "channel_copy";
    case CDL_LAYER_BATCHNORM2D:
        return op->bn_sum && op->bn_sqdev && op->bn_apply && op->bn_running && op->bn_eval &&
               op->bn_bwd_sums && op->bn_bwd_apply ? NULL : "batch norm";
    case CDL_LAYER_GLOBALAVGPOOL: return op->gap_fwd && op->gap_bwd ? NULL : "gap";
    case CDL_LAYER_GELU:
    case CDL_LAYER_SILU:
    case CDL_LAYER_SIGMOID:
    case CDL_LAYER_TANH:
    case CDL_LAYER_LEAKYRELU: return op->act_fwd && op->act_bwd ? NULL : "act";
    case CDL_LAYER_EMBEDDING: return op->embedding_fwd && op->embedding_bwd ? NULL : "embedding";
    case CDL_LAYER_POSEMBEDDING: return op->bcast_add_fwd && op->bcast_add_bwd ? NULL : "bcast_add";
    case CDL_LAYER_LAYERNORM: return op->layernorm_fwd && op->layernorm_bwd ? NULL : "layernorm";
    case CDL_LAYER_ATTENTION:
        return op->attn_workspace && op->attn_fwd && op->attn_bwd ? NULL : "attention";
    default: return NULL;
    }
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
    int seqs[CDL_MAX_LAYERS + 1];
    if (spec_finish_names(&m->spec) || spec_infer_seq(&m->spec, input, shapes, seqs))
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
    for (int i = 0; i < m->nlayers; i++) {
        const char *op = missing_op(be->ops, m->spec.layers[i].kind);
        if (op) {
            char where[320];
            spec_where(&m->spec, i, where, sizeof where);
            cdl_error("%s: the %s backend has no %s op yet: %s layers need it (use another "
                      "backend)", where, be->ops->name, op, spec_kind_name(m->spec.layers[i].kind));
            goto fail;
        }
    }
    if (alloc_buffers(m, plan_layers(m, shapes, seqs)))
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
    void *bufs[] = {m->params, m->grads,   m->buffers, m->x,            m->acts,
                    m->gpool,  m->tmp,     m->ws,      m->bnstats,      m->sync_scratch,
                    m->argmax, m->masks, m->seqsaved};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    cdl_free(m->spec_text);
    cdl_free(m);
}

size_t cdl_model_nparams(const cdl_model *m) { return m->nparams; }
float *cdl_model_params(cdl_model *m)
{
    m->weights_set = 1;   /* a program may write the weights through it */
    return m->params;
}
float *cdl_model_grads(cdl_model *m) { return m->grads; }
int cdl_model_nviews(const cdl_model *m) { return m->nviews; }
cdl_shape cdl_model_input(const cdl_model *m) { return m->input; }
int cdl_model_outputs(const cdl_model *m) { return m->outputs; }
int cdl_model_naliases(const cdl_model *m) { return m->naliases; }

int cdl_model_positions(const cdl_model *m)
{
    const layer *L = &m->layers[m->nlayers - 1];
    return L->seq ? L->out.c : 1;
}

const cdl_param_view *cdl_model_alias(const cdl_model *m, int i)
{
    return i >= 0 && i < m->naliases ? &m->aliases[i] : NULL;
}
int cdl_model_max_batch(const cdl_model *m) { return m->max_batch; }
cdl_backend *cdl_model_backend(const cdl_model *m) { return m->be; }
const cdl_model_spec *cdl_model_get_spec(const cdl_model *m) { return &m->spec; }

int cdl_model_set_spec_text(cdl_model *m, const char *text)
{
    if (!m)
        return cdl_error("cdl_model_set_spec_text: the model is NULL");
    char *copy = NULL;
    if (text) {
        size_t n = strlen(text) + 1;
        if (!(copy = cdl_malloc(n)))
            return -1;
        memcpy(copy, text, n);
    }
    cdl_free(m->spec_text);
    m->spec_text = copy;
    return 0;
}

const char *cdl_model_spec_text(const cdl_model *m) { return m->spec_text; }

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

/* Row i of the summary: the layer's description (with its inputs when
 * they are not just the line before) and its output shape. */
static void print_row(const cdl_model *m, int i, char *desc, size_t dlen, char *shape,
                      size_t slen)
{
    const layer *L = &m->layers[i];
    spec_layer_str(L->s, desc, dlen);
    /* Inputs other than the previous line: "<- a, b". */
    if (L->nin > 1 || L->in[0] != i - 1) {
        size_t used = strlen(desc);
        used += (size_t)snprintf(desc + used, used < dlen ? dlen - used : 0, " <-");
        for (int j = 0; j < L->nin && used < dlen; j++) {
            int k = L->in[j];
            if (k < 0)
                used += (size_t)snprintf(desc + used, dlen - used, "%s input", j ? "," : "");
            else if (m->layers[k].s->name[0])
                used += (size_t)snprintf(desc + used, dlen - used, "%s %s", j ? "," : "",
                                         m->layers[k].s->name);
            else
                used += (size_t)snprintf(desc + used, dlen - used, "%s #%d", j ? "," : "", k + 1);
        }
    }
    if (L->seq)   /* T positions x E features */
        snprintf(shape, slen, "%dx%d seq", L->out.c, L->out.w);
    else if (L->out.h == 1 && L->out.w == 1)
        snprintf(shape, slen, "%d", L->out.c);
    else
        snprintf(shape, slen, "%dx%dx%d", L->out.c, L->out.h, L->out.w);
}

void cdl_model_print(const cdl_model *m, void *file)
{
    FILE *f = file;
    char desc[512], shape[48];
    /* Columns as wide as their widest entry: names like
     * transformer.h.11.mlp.c_proj and graph inputs vary a lot. */
    int wn = 4, wd = 5, ws = 6;
    for (int i = 0; i < m->nlayers; i++) {
        print_row(m, i, desc, sizeof desc, shape, sizeof shape);
        int n = (int)strlen(m->layers[i].s->name), d = (int)strlen(desc), sh = (int)strlen(shape);
        wn = n > wn ? n : wn;
        wd = d > wd ? d : wd;
        ws = sh > ws ? sh : ws;
    }
    fprintf(f, "model %s: input %dx%dx%d, %zu parameters, batches of up to %d, backend %s\n",
            m->spec.source, m->input.c, m->input.h, m->input.w, m->nparams, m->max_batch,
            m->be->ops->name);
    fprintf(f, "  %3s  %-*s  %-*s  %-*s  %s\n", "#", wn, "name", wd, "layer", ws, "output",
            "params");
    for (int i = 0; i < m->nlayers; i++) {
        const layer *L = &m->layers[i];
        print_row(m, i, desc, sizeof desc, shape, sizeof shape);
        fprintf(f, "  %3d  %-*s  %-*s  %-*s  %zu\n", i + 1, wn, L->s->name[0] ? L->s->name : "-",
                wd, desc, ws, shape, L->pcount);
    }
}
