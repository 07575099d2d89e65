/* Shape inference: checks a spec against an input shape and computes every
 * layer's per-sample output shape. This is also where specs built in code
 * (not parsed) get their values checked, so the model never sees a layer
 * it cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

static int in_range(long v, long lo, long hi)
{
    return v >= lo && v <= hi;
}

/* The values a layer holds, whatever its input. */
static int check_values(const cdl_layer_spec *l, const char *where)
{
    const char *kind = spec_kind_name(l->kind);
    switch (l->kind) {
    case CDL_LAYER_CONV2D:
    case CDL_LAYER_LINEAR:
        if (l->kind == CDL_LAYER_LINEAR && l->tie && !l->out)
            return cdl_error("%s: the vocabulary of this tied linear is not known: give the gpt "
                             "line vocab_size= or let the data set it", where);
        if (!in_range(l->out, 1, SPEC_MAX_FEATURES))
            return cdl_error("%s: %s output size %d is out of range: use 1 to %d", where, kind,
                             l->out, SPEC_MAX_FEATURES);
        if (l->kind == CDL_LAYER_LINEAR)
            return 0;
        {
            spec_conv c = spec_conv_of(l);
            if (!in_range(c.sh, 1, SPEC_MAX_DIM) || !in_range(c.sw, 1, SPEC_MAX_DIM))
                return cdl_error("%s: conv2d stride=%d is out of range: use 1 to %d", where,
                                 in_range(c.sh, 1, SPEC_MAX_DIM) ? c.sw : c.sh, SPEC_MAX_DIM);
            if (!in_range(c.kw, 1, SPEC_MAX_DIM) || !in_range(c.pw, 0, SPEC_MAX_DIM) ||
                !in_range(c.dh, 1, SPEC_MAX_DIM) || !in_range(c.dw, 1, SPEC_MAX_DIM) ||
                !in_range(c.groups, 1, SPEC_MAX_FEATURES))
                return cdl_error("%s: conv2d kernel, padding, dilation or groups out of range: "
                                 "kernel and dilation 1 to %d, padding 0 to %d", where,
                                 SPEC_MAX_DIM, SPEC_MAX_DIM);
            if (l->out % c.groups)
                return cdl_error("%s: conv2d groups=%d does not divide its %d output channels: "
                                 "use a divisor of %d", where, c.groups, l->out, l->out);
        }
        break;
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        if (!in_range(l->stride, 0, SPEC_MAX_DIM))
            return cdl_error("%s: %s stride=%d is out of range: use 1 to %d (0 = the kernel size)",
                             where, kind, l->stride, SPEC_MAX_DIM);
        if (2L * l->pad > l->kernel)
            return cdl_error("%s: %s padding=%d is more than half the kernel %d: use padding <= %d",
                             where, kind, l->pad, l->kernel, l->kernel / 2);
        break;
    case CDL_LAYER_DROPOUT:
        if (!(l->p >= 0.0f && l->p < 1.0f))
            return cdl_error("%s: dropout probability %g is out of range: use 0 <= P < 1", where,
                             (double)l->p);
        return 0;
    case CDL_LAYER_BATCHNORM2D:
        if (!(l->eps >= 0.0f && l->eps <= 1.0f) || !(l->momentum >= 0.0f && l->momentum <= 1.0f))
            return cdl_error("%s: batchnorm2d eps=%g momentum=%g: use 0 < eps <= 1 and momentum "
                             "from 0 to 1", where, (double)l->eps, (double)l->momentum);
        return 0;
    case CDL_LAYER_LEAKYRELU:
        if (!isfinite(l->slope))
            return cdl_error("%s: leakyrelu negative_slope is not a number", where);
        return 0;
    case CDL_LAYER_EMBEDDING:
    case CDL_LAYER_POSEMBEDDING: {
        int rows = l->kind == CDL_LAYER_EMBEDDING ? l->vocab : l->block;
        if (!rows)
            return cdl_error("%s: the %s's %s is not known: give the gpt line %s= (or the layer "
                             "its size), or let the data set it", where, kind,
                             l->kind == CDL_LAYER_EMBEDDING ? "vocabulary" : "block size",
                             l->kind == CDL_LAYER_EMBEDDING ? "vocab_size" : "block_size");
        if (!in_range(rows, 1, SPEC_MAX_FEATURES) || !in_range(l->out, 1, SPEC_MAX_FEATURES) ||
            (int64_t)rows * l->out > SPEC_MAX_NUMEL)
            return cdl_error("%s: %s %d x %d is out of range: at most %ld weights", where, kind,
                             rows, l->out, SPEC_MAX_NUMEL);
        return 0;
    }
    case CDL_LAYER_LAYERNORM:
        if (!(l->eps >= 0.0f && l->eps <= 1.0f))
            return cdl_error("%s: layernorm eps=%g: use 0 < eps <= 1", where, (double)l->eps);
        return 0;
    case CDL_LAYER_ATTENTION:
        if (!in_range(l->heads, 1, SPEC_MAX_FEATURES))
            return cdl_error("%s: attention heads=%d: use at least 1", where, l->heads);
        return 0;
    case CDL_LAYER_RELU:
    case CDL_LAYER_FLATTEN:
    case CDL_LAYER_ADD:
    case CDL_LAYER_CONCAT:
    case CDL_LAYER_GLOBALAVGPOOL:
    case CDL_LAYER_GELU:
    case CDL_LAYER_SILU:
    case CDL_LAYER_SIGMOID:
    case CDL_LAYER_TANH:
        return 0;
    default:
        return cdl_error("%s: unknown layer kind %d", where, (int)l->kind);
    }
    if (!in_range(l->kernel, 1, SPEC_MAX_DIM))
        return cdl_error("%s: %s kernel %d is out of range: use 1 to %d", where, kind, l->kernel,
                         SPEC_MAX_DIM);
    if (!in_range(l->pad, 0, SPEC_MAX_DIM))
        return cdl_error("%s: %s padding=%d is out of range: use 0 to %d", where, kind, l->pad,
                         SPEC_MAX_DIM);
    return 0;
}

/* Output size of a window sweep along one axis, or -1 if the (dilated)
 * kernel is larger than the padded input. */
static int sweep(int in, int k, int stride, int pad, int dil)
{
    long span = (long)dil * (k - 1) + 1;
    long padded = (long)in + 2L * pad;
    return padded < span ? -1 : (int)((padded - span) / stride + 1);
}

/* Output shape of a conv2d or pool window sweep over s. */
static int window(const cdl_layer_spec *l, cdl_shape s, int oc, const char *where,
                  cdl_shape *out)
{
    spec_conv c = spec_conv_of(l);
    if (l->kind != CDL_LAYER_CONV2D) {   /* pools: square, stride 0 = the kernel */
        c.sh = c.sw = l->stride ? l->stride : l->kernel;
        c.kw = l->kernel;
        c.pw = l->pad;
        c.dh = c.dw = 1;
    }
    int oh = sweep(s.h, c.kh, c.sh, c.ph, c.dh), ow = sweep(s.w, c.kw, c.sw, c.pw, c.dw);
    if (oh < 1 || ow < 1) {
        char k[32], pad[32];
        snprintf(k, sizeof k, c.kh == c.kw ? "%d" : "%dx%d", c.kh, c.kw);
        snprintf(pad, sizeof pad, c.ph == c.pw ? "%d" : "%dx%d", c.ph, c.pw);
        return cdl_error("%s: %s kernel %s is larger than its %dx%dx%d input (padding %s%s): use "
                         "a smaller kernel, more padding, or fewer pooling layers before it",
                         where, spec_kind_name(l->kind), k, s.c, s.h, s.w, pad,
                         c.dh > 1 || c.dw > 1 ? ", dilated" : "");
    }
    out->c = oc;
    out->h = oh;
    out->w = ow;
    return 0;
}

/* The name of layer i for messages: its name, or "the KIND at WHERE". */
static void layer_label(const cdl_model_spec *spec, int i, char *buf, size_t len)
{
    if (i < 0)
        snprintf(buf, len, "the input");
    else if (spec->layers[i].name[0])
        snprintf(buf, len, "'%s'", spec->layers[i].name);
    else {
        char where[320];
        spec_where(spec, i, where, sizeof where);
        snprintf(buf, len, "the %s at %s", spec_kind_name(spec->layers[i].kind), where);
    }
}

/* The inputs of layer i: indices in range and before i, the right number
 * for its kind. */
static int check_inputs(const cdl_model_spec *spec, int i, const char *where)
{
    const cdl_layer_spec *l = &spec->layers[i];
    int join = l->kind == CDL_LAYER_ADD || l->kind == CDL_LAYER_CONCAT;
    if (l->nin < 0 || l->nin > CDL_MAX_INPUTS)
        return cdl_error("%s: %d inputs: a layer has 1 to %d", where, l->nin, CDL_MAX_INPUTS);
    if (join && spec_nin(l) < 2)
        return cdl_error("%s: %s joins 2 or more layers but has %d input: write '%s LAYER'",
                         where, spec_kind_name(l->kind), spec_nin(l), spec_kind_name(l->kind));
    if (!join && spec_nin(l) != 1)
        return cdl_error("%s: %s takes one input but has %d: use add or concat to join layers",
                         where, spec_kind_name(l->kind), spec_nin(l));
    for (int j = 0; j < spec_nin(l); j++) {
        int k = spec_in(l, i, j);
        if (k < -1 || k >= i)
            return cdl_error("%s: input %d is layer %d: a layer reads the input (-1) or layers "
                             "before it (0 to %d)", where, j + 1, k, i - 1);
    }
    return 0;
}

/* The sequence layers' shapes (and linear's): out and out_seq from s, the
 * first input's shape (a sequence when seq). Returns 1 for the other kinds. */
static int seq_shape(const cdl_model_spec *spec, int i, cdl_shape s, int seq, const char *where,
                     cdl_shape *out, int *out_seq)
{
    const cdl_layer_spec *l = &spec->layers[i];
    const char *kind = spec_kind_name(l->kind);
    *out = s;
    *out_seq = seq;
    switch (l->kind) {
    case CDL_LAYER_EMBEDDING:
        if (seq || s.h != 1 || s.w != 1)
            return cdl_error("%s: embedding reads token ids (Tx1x1: one id per position) but gets "
                             "%dx%dx%d: give it the model's input", where, s.c, s.h, s.w);
        if (spec_in(l, i, 0) >= 0)
            return cdl_error("%s: embedding reads token ids from the model's input, not from "
                             "another layer: put it first (or from=input)", where);
        *out = (cdl_shape){s.c, 1, l->out};
        *out_seq = 1;
        return 0;
    case CDL_LAYER_POSEMBEDDING:
    case CDL_LAYER_ATTENTION:
        if (!seq)
            return cdl_error("%s: %s needs a sequence (TxE, after an embedding) but gets %dx%dx%d",
                             where, kind, s.c, s.h, s.w);
        if (l->kind == CDL_LAYER_POSEMBEDDING) {
            if (s.w != l->out || s.c > l->block)
                return cdl_error("%s: posembedding %d %d (block x size) on a sequence of %d x %d: "
                                 "the sizes must match and the sequence be at most the block; use "
                                 "a smaller --block-size or a larger block", where, l->block,
                                 l->out, s.c, s.w);
            return 0;
        }
        if (s.w % 3 || (s.w / 3) % l->heads)
            return cdl_error("%s: attention heads=%d reads q, k, v side by side (3C features, C a "
                             "multiple of the heads) but gets %d features: give the linear before "
                             "it 3 x C outputs", where, l->heads, s.w);
        out->w = s.w / 3;
        return 0;
    case CDL_LAYER_LAYERNORM:
        if (!seq && (s.h != 1 || s.w != 1))
            return cdl_error("%s: layernorm normalises the features of a flat input or of each "
                             "position of a sequence but gets %dx%dx%d: add flatten before it",
                             where, s.c, s.h, s.w);
        return 0;
    case CDL_LAYER_LINEAR:
        if (!seq && (s.h != 1 || s.w != 1))
            return 1;   /* the flat-input error below */
        if (seq)
            out->w = l->out;   /* every position: (T, 1, out) */
        else
            out->c = l->out;
        if (l->tie) {
            int t = l->tie - 1;
            int in = seq ? s.w : s.c;
            if (t < 0 || t >= i || spec->layers[t].kind != CDL_LAYER_EMBEDDING)
                return cdl_error("%s: tie= names layer %d, which is not an embedding before it",
                                 where, t);
            const cdl_layer_spec *e = &spec->layers[t];
            /* Its backward writes the embedding's gradient first (the
             * embedding adds to it): one writer only. */
            for (int j = t + 1; j < i; j++)
                if (spec->layers[j].kind == CDL_LAYER_LINEAR && spec->layers[j].tie == l->tie)
                    return cdl_error("%s: '%s' is already tied to the linear at layer %d: an "
                                     "embedding shares its weight with one linear", where,
                                     e->name, j + 1);
            if (e->out != in || e->vocab != l->out)
                return cdl_error("%s: a linear %d -> %d cannot share the weight of the embedding "
                                 "%d x %d ('%s'): it must map the embedding's size to its "
                                 "vocabulary", where, in, l->out, e->vocab, e->out, e->name);
        }
        return 0;
    default:
        return 1;   /* not a sequence layer */
    }
}

int cdl_spec_infer(const cdl_model_spec *spec, cdl_shape input, cdl_shape *shapes)
{
    if (!spec || !shapes)
        return cdl_error("cdl_spec_infer: spec or shapes is NULL");
    return spec_infer_seq(spec, input, shapes, NULL);
}

int spec_infer_seq(const cdl_model_spec *spec, cdl_shape input, cdl_shape *shapes, int *seq_out)
{
    int seqs[CDL_MAX_LAYERS + 1];
    const char *src = spec->source[0] ? spec->source : "model spec";
    if (spec->nlayers < 1 || spec->nlayers > CDL_MAX_LAYERS)
        return cdl_error("%s: %d layers: a model has 1 to %d layers", src, spec->nlayers,
                         CDL_MAX_LAYERS);
    if (!in_range(input.c, 1, SPEC_MAX_DIM) || !in_range(input.h, 1, SPEC_MAX_DIM) ||
        !in_range(input.w, 1, SPEC_MAX_DIM))
        return cdl_error("%s: invalid input shape %dx%dx%d: every size must be from 1 to %d", src,
                         input.c, input.h, input.w, SPEC_MAX_DIM);
    if (spec->input.c &&
        (spec->input.c != input.c || spec->input.h != input.h || spec->input.w != input.w))
        return cdl_error("%s: the spec is for %dx%dx%d inputs but the data is %dx%dx%d: fix the "
                         "spec's input line or use matching data", src, spec->input.c,
                         spec->input.h, spec->input.w, input.c, input.h, input.w);

    if ((int64_t)input.c * input.h * input.w > SPEC_MAX_NUMEL)
        return cdl_error("%s: input %dx%dx%d has more than %ld values per sample: use a smaller "
                         "input", src, input.c, input.h, input.w, SPEC_MAX_NUMEL);

    shapes[0] = input;
    seqs[0] = 0;
    for (int i = 0; i < spec->nlayers; i++) {
        const cdl_layer_spec *l = &spec->layers[i];
        char where[320];
        spec_where(spec, i, where, sizeof where);
        if (check_values(l, where) || check_inputs(spec, i, where))
            return -1;
        cdl_shape s = shapes[spec_in(l, i, 0) + 1];
        int seq = seqs[spec_in(l, i, 0) + 1];
        int rc = seq_shape(spec, i, s, seq, where, &s, &seq);
        if (rc < 0)
            return -1;
        if (rc == 0)
            goto shaped;
        /* Elementwise layers, add and flatten take sequences; the others
         * are for images (their c would be the positions). */
        if (seq && l->kind != CDL_LAYER_FLATTEN && l->kind != CDL_LAYER_ADD &&
            l->kind != CDL_LAYER_DROPOUT && l->kind != CDL_LAYER_RELU &&
            l->kind != CDL_LAYER_GELU && l->kind != CDL_LAYER_SILU &&
            l->kind != CDL_LAYER_SIGMOID && l->kind != CDL_LAYER_TANH &&
            l->kind != CDL_LAYER_LEAKYRELU)
            return cdl_error("%s: %s works on images, but its input is a sequence (%d positions "
                             "of %d features): use flatten first, or sequence layers", where,
                             spec_kind_name(l->kind), s.c, s.w);
        switch (l->kind) {
        case CDL_LAYER_CONV2D: {
            int g = l->groups > 1 ? l->groups : 1;
            if (s.c % g)
                return cdl_error("%s: conv2d groups=%d does not divide its %d input channels: use "
                                 "a divisor of %d", where, g, s.c, s.c);
            if (window(l, s, l->out, where, &s))
                return -1;
            break;
        }
        case CDL_LAYER_MAXPOOL2D:
        case CDL_LAYER_AVGPOOL2D:
            if (window(l, s, s.c, where, &s))
                return -1;
            break;
        case CDL_LAYER_LINEAR:
            /* No silent flattening: a flat vector is (k,1,1). */
            if (s.h != 1 || s.w != 1)
                return cdl_error("%s: linear needs a flat input but gets %dx%dx%d: add 'flatten' "
                                 "before it", where, s.c, s.h, s.w);
            s.c = l->out;
            break;
        case CDL_LAYER_FLATTEN:
            /* The product fits: every shape so far is at most SPEC_MAX_NUMEL. */
            s.c = (int)((int64_t)s.c * s.h * s.w);
            s.h = s.w = 1;
            seq = 0;
            break;
        case CDL_LAYER_GLOBALAVGPOOL:
            s.h = s.w = 1;
            break;
        case CDL_LAYER_ADD:
        case CDL_LAYER_CONCAT: {
            int64_t c = s.c;
            for (int j = 1; j < spec_nin(l); j++) {
                int k = spec_in(l, i, j);
                cdl_shape t = shapes[k + 1];
                int add = l->kind == CDL_LAYER_ADD;
                if (add ? t.c != s.c || t.h != s.h || t.w != s.w : t.h != s.h || t.w != s.w) {
                    char a[400], b[400];
                    layer_label(spec, spec_in(l, i, 0), a, sizeof a);
                    layer_label(spec, k, b, sizeof b);
                    return cdl_error("%s: %s of %s (%dx%dx%d) and %s (%dx%dx%d): %s", where,
                                     spec_kind_name(l->kind), a, s.c, s.h, s.w, b, t.c, t.h, t.w,
                                     add ? "the shapes differ: give the shortcut a conv2d kernel=1 "
                                           "with the same stride and channels (a downsample), or "
                                           "join other layers"
                                         : "heights and widths differ: concat joins along "
                                           "channels only");
                }
                c += t.c;
            }
            if (l->kind == CDL_LAYER_CONCAT) {
                if (c > SPEC_MAX_FEATURES)
                    return cdl_error("%s: concat has %lld channels: at most %d", where,
                                     (long long)c, SPEC_MAX_FEATURES);
                s.c = (int)c;
            }
            break;
        }
        default:   /* relu, dropout, batchnorm2d, activations: same shape */
            break;
        }
    shaped:
        if ((int64_t)s.c * s.h * s.w > SPEC_MAX_NUMEL)
            return cdl_error("%s: output %dx%dx%d has more than %ld values per sample: use fewer "
                             "channels or a smaller input", where, s.c, s.h, s.w, SPEC_MAX_NUMEL);
        shapes[i + 1] = s;
        seqs[i + 1] = seq;
    }
    /* Every output but the last is read (else it is a mistake, or dead code). */
    for (int i = 0; i < spec->nlayers - 1; i++) {
        int used = 0;
        for (int k = i + 1; k < spec->nlayers && !used; k++)
            for (int j = 0; j < spec_nin(&spec->layers[k]); j++)
                used |= spec_in(&spec->layers[k], k, j) == i;
        if (!used) {
            char where[320];
            spec_where(spec, i, where, sizeof where);
            return cdl_error("%s: the output of this %s is never used (the next line reads "
                             "another layer): remove it, or read it with from=, add or concat",
                             where, spec_kind_name(spec->layers[i].kind));
        }
    }
    if (seq_out)
        memcpy(seq_out, seqs, sizeof(int) * (size_t)(spec->nlayers + 1));
    return 0;
}
