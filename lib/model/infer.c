/* Shape inference: checks a spec against an input shape and computes every
 * layer's per-sample output shape. This is also where specs built in code
 * (not parsed) get their values checked, so the model never sees a layer
 * it cannot run. */
#include <stdint.h>
#include <stdio.h>

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
        if (!in_range(l->out, 1, SPEC_MAX_FEATURES))
            return cdl_error("%s: %s output size %d is out of range: use 1 to %d", where, kind,
                             l->out, SPEC_MAX_FEATURES);
        if (l->kind == CDL_LAYER_LINEAR)
            return 0;
        if (!in_range(l->stride, 1, SPEC_MAX_DIM))
            return cdl_error("%s: conv2d stride=%d is out of range: use 1 to %d", where, l->stride,
                             SPEC_MAX_DIM);
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
    case CDL_LAYER_RELU:
    case CDL_LAYER_FLATTEN:
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

/* Output shape of a conv2d or pool window sweep over s. */
static int window(const cdl_layer_spec *l, int stride, cdl_shape s, int oc, const char *where,
                  cdl_shape *out)
{
    int ph = s.h + 2 * l->pad, pw = s.w + 2 * l->pad;
    if (ph < l->kernel || pw < l->kernel)
        return cdl_error("%s: %s kernel %d is larger than its %dx%dx%d input (padding %d): use a "
                         "smaller kernel, more padding, or fewer pooling layers before it", where,
                         spec_kind_name(l->kind), l->kernel, s.c, s.h, s.w, l->pad);
    out->c = oc;
    out->h = (ph - l->kernel) / stride + 1;
    out->w = (pw - l->kernel) / stride + 1;
    return 0;
}

int cdl_spec_infer(const cdl_model_spec *spec, cdl_shape input, cdl_shape *shapes)
{
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

    cdl_shape s = input;
    shapes[0] = s;
    for (int i = 0; i < spec->nlayers; i++) {
        const cdl_layer_spec *l = &spec->layers[i];
        char where[320];
        spec_where(spec, i, where, sizeof where);
        if (check_values(l, where))
            return -1;
        switch (l->kind) {
        case CDL_LAYER_CONV2D:
            if (window(l, l->stride, s, l->out, where, &s))
                return -1;
            break;
        case CDL_LAYER_MAXPOOL2D:
        case CDL_LAYER_AVGPOOL2D:
            if (window(l, l->stride ? l->stride : l->kernel, s, s.c, where, &s))
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
            break;
        default:   /* relu, dropout: same shape */
            break;
        }
        if ((int64_t)s.c * s.h * s.w > SPEC_MAX_NUMEL)
            return cdl_error("%s: output %dx%dx%d has more than %ld values per sample: use fewer "
                             "channels or a smaller input", where, s.c, s.h, s.w, SPEC_MAX_NUMEL);
        shapes[i + 1] = s;
    }
    return 0;
}
