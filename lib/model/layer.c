/* Small facts about layer specs shared by the parser, shape inference and
 * the model: kind names, error locations, names of parameterised layers. */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

const char *spec_kind_name(cdl_layer_kind kind)
{
    switch (kind) {
    case CDL_LAYER_CONV2D: return "conv2d";
    case CDL_LAYER_MAXPOOL2D: return "maxpool2d";
    case CDL_LAYER_AVGPOOL2D: return "avgpool2d";
    case CDL_LAYER_LINEAR: return "linear";
    case CDL_LAYER_RELU: return "relu";
    case CDL_LAYER_FLATTEN: return "flatten";
    case CDL_LAYER_DROPOUT: return "dropout";
    }
    return "unknown-layer";
}

int spec_has_params(cdl_layer_kind kind)
{
    return kind == CDL_LAYER_CONV2D || kind == CDL_LAYER_LINEAR;
}

void spec_where(const cdl_model_spec *spec, int i, char *buf, size_t len)
{
    const char *src = spec->source[0] ? spec->source : "model spec";
    if (spec->layers[i].line > 0)
        snprintf(buf, len, "%s:%d", src, spec->layers[i].line);
    else
        snprintf(buf, len, "%s (layer %d, %s)", src, i + 1, spec_kind_name(spec->layers[i].kind));
}

void spec_layer_str(const cdl_layer_spec *l, char *buf, size_t len)
{
    const char *kind = spec_kind_name(l->kind);
    const char *nobias = l->bias ? "" : " bias=false";
    switch (l->kind) {
    case CDL_LAYER_CONV2D:
        snprintf(buf, len, "%s %d kernel=%d stride=%d padding=%d%s", kind, l->out, l->kernel,
                 l->stride, l->pad, nobias);
        break;
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        snprintf(buf, len, "%s %d stride=%d padding=%d", kind, l->kernel,
                 l->stride ? l->stride : l->kernel, l->pad);
        break;
    case CDL_LAYER_LINEAR:
        snprintf(buf, len, "%s %d%s", kind, l->out, nobias);
        break;
    case CDL_LAYER_DROPOUT:
        snprintf(buf, len, "%s %g", kind, (double)l->p);
        break;
    default:
        snprintf(buf, len, "%s", kind);
        break;
    }
}

int spec_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CDL_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_';
        if (!ok)
            return 0;
    }
    return 1;
}

int spec_finish_names(cdl_model_spec *spec)
{
    char where[320], other[320];
    int nconv = 0, nfc = 0;
    unsigned char automatic[CDL_MAX_LAYERS] = {0};

    for (int i = 0; i < spec->nlayers; i++) {
        cdl_layer_spec *l = &spec->layers[i];
        if (!spec_has_params(l->kind)) {
            if (l->name[0]) {
                spec_where(spec, i, where, sizeof where);
                return cdl_error("%s: %s layers have no parameters and take no name: "
                                 "remove name=%s", where, spec_kind_name(l->kind), l->name);
            }
            continue;
        }
        int k = l->kind == CDL_LAYER_CONV2D ? ++nconv : ++nfc;
        if (!l->name[0]) {
            const char *stem = l->kind == CDL_LAYER_CONV2D ? "conv" : "fc";
            snprintf(l->name, sizeof l->name, "%s%d", stem, k);
            automatic[i] = 1;
        } else if (!spec_name_ok(l->name)) {
            spec_where(spec, i, where, sizeof where);
            return cdl_error("%s: invalid layer name '%.*s': use letters, digits and _ (not first "
                             "a digit), at most %d characters", where, CDL_NAME_MAX, l->name,
                             CDL_NAME_MAX - 1);
        }
    }
    for (int j = 0; j < spec->nlayers; j++) {
        if (!spec->layers[j].name[0])
            continue;
        for (int i = 0; i < j; i++) {
            if (strcmp(spec->layers[i].name, spec->layers[j].name))
                continue;
            spec_where(spec, j, where, sizeof where);
            spec_where(spec, i, other, sizeof other);
            if (automatic[j] || automatic[i])
                return cdl_error("%s: the name '%s' is used twice (here and at %s; automatic names "
                                 "are convK / fcK for the K-th conv2d / linear): give one of "
                                 "them another name=", where, spec->layers[j].name, other);
            return cdl_error("%s: the name '%s' is already used at %s: names must be unique, "
                             "rename one of them", where, spec->layers[j].name, other);
        }
    }
    return 0;
}
