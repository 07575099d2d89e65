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
    case CDL_LAYER_ADD: return "add";
    case CDL_LAYER_CONCAT: return "concat";
    case CDL_LAYER_BATCHNORM2D: return "batchnorm2d";
    case CDL_LAYER_GLOBALAVGPOOL: return "globalavgpool";
    case CDL_LAYER_GELU: return "gelu";
    case CDL_LAYER_SILU: return "silu";
    case CDL_LAYER_SIGMOID: return "sigmoid";
    case CDL_LAYER_TANH: return "tanh";
    case CDL_LAYER_LEAKYRELU: return "leakyrelu";
    case CDL_LAYER_EMBEDDING: return "embedding";
    case CDL_LAYER_POSEMBEDDING: return "posembedding";
    case CDL_LAYER_LAYERNORM: return "layernorm";
    case CDL_LAYER_ATTENTION: return "attention";
    }
    return "unknown-layer";
}

int spec_has_params(cdl_layer_kind kind)
{
    return kind == CDL_LAYER_CONV2D || kind == CDL_LAYER_LINEAR || kind == CDL_LAYER_BATCHNORM2D ||
           kind == CDL_LAYER_EMBEDDING || kind == CDL_LAYER_POSEMBEDDING ||
           kind == CDL_LAYER_LAYERNORM;
}

void spec_where(const cdl_model_spec *spec, int i, char *buf, size_t len)
{
    const char *src = spec->source[0] ? spec->source : "model spec";
    const cdl_layer_spec *l = &spec->layers[i];
    if (l->line > 0 && l->use_line > 0)
        snprintf(buf, len, "%s:%d (%s, from the block used at line %d)", src, l->line,
                 l->name[0] ? l->name : spec_kind_name(l->kind), l->use_line);
    else if (l->line > 0)
        snprintf(buf, len, "%s:%d", src, l->line);
    else
        snprintf(buf, len, "%s (layer %d, %s)", src, i + 1, spec_kind_name(spec->layers[i].kind));
}

spec_conv spec_conv_of(const cdl_layer_spec *l)
{
    spec_conv c;
    c.kh = l->kernel;
    c.kw = l->kernel_w ? l->kernel_w : l->kernel;
    c.sh = l->stride;
    c.sw = l->stride_w ? l->stride_w : l->stride;
    c.ph = l->pad;
    c.pw = l->pad_w || l->kernel_w ? l->pad_w : l->pad;
    c.dh = l->dilation > 1 ? l->dilation : 1;
    c.dw = l->dilation_w ? l->dilation_w : c.dh;
    c.groups = l->groups > 1 ? l->groups : 1;
    return c;
}

static void pair_str(char *buf, size_t len, int h, int w)
{
    if (h == w)
        snprintf(buf, len, "%d", h);
    else
        snprintf(buf, len, "%dx%d", h, w);
}

void spec_layer_str(const cdl_layer_spec *l, char *buf, size_t len)
{
    const char *kind = spec_kind_name(l->kind);
    const char *nobias = l->bias ? "" : " bias=false";
    switch (l->kind) {
    case CDL_LAYER_CONV2D: {
        char k[32], st[32], pd[32], ex[64] = "";
        spec_conv c = spec_conv_of(l);
        pair_str(k, sizeof k, c.kh, c.kw);
        pair_str(st, sizeof st, c.sh, c.sw);
        pair_str(pd, sizeof pd, c.ph, c.pw);
        if (c.dh > 1 || c.dw > 1) {
            char d[32];
            pair_str(d, sizeof d, c.dh, c.dw);
            snprintf(ex, sizeof ex, " dilation=%s", d);
        }
        if (c.groups > 1)
            snprintf(ex + strlen(ex), sizeof ex - strlen(ex), " groups=%d", c.groups);
        snprintf(buf, len, "%s %d kernel=%s stride=%s padding=%s%s%s", kind, l->out, k, st, pd,
                 ex, nobias);
        break;
    }
    case CDL_LAYER_BATCHNORM2D:
        snprintf(buf, len, "%s eps=%g momentum=%g%s", kind, (double)(l->eps > 0 ? l->eps : 1e-5f),
                 (double)l->momentum, l->sync ? " sync=true" : "");
        break;
    case CDL_LAYER_LEAKYRELU:
        snprintf(buf, len, "%s negative_slope=%g", kind, (double)l->slope);
        break;
    case CDL_LAYER_GELU:
        snprintf(buf, len, "%s%s", kind, l->approx_tanh ? " approximate=tanh" : "");
        break;
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        snprintf(buf, len, "%s %d stride=%d padding=%d", kind, l->kernel,
                 l->stride ? l->stride : l->kernel, l->pad);
        break;
    case CDL_LAYER_LINEAR:
        snprintf(buf, len, "%s %d%s%s", kind, l->out, nobias, l->tie ? " tie" : "");
        break;
    case CDL_LAYER_EMBEDDING:
        snprintf(buf, len, "%s %d %d", kind, l->vocab, l->out);
        break;
    case CDL_LAYER_POSEMBEDDING:
        snprintf(buf, len, "%s %d %d", kind, l->block, l->out);
        break;
    case CDL_LAYER_LAYERNORM:
        snprintf(buf, len, "%s eps=%g%s", kind, (double)(l->eps > 0 ? l->eps : 1e-5f), nobias);
        break;
    case CDL_LAYER_ATTENTION:
        snprintf(buf, len, "%s heads=%d", kind, l->heads);
        break;
    case CDL_LAYER_DROPOUT:
        snprintf(buf, len, "%s %g", kind, (double)l->p);
        break;
    default:
        snprintf(buf, len, "%s", kind);
        break;
    }
}

/* PyTorch module paths: parts of letters, digits and _ joined by dots
 * ("layer1.0.conv1", "features.3"), not starting with a digit. */
int spec_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CDL_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || (c == '.' && i > 0 && i + 1 < n && s[i + 1] != '.');
        if (!ok)
            return 0;
    }
    return 1;
}

const char *const spec_auto_stem[SPEC_AUTO_KINDS] = {"conv", "fc", "bn", "emb", "pos", "ln"};

int spec_auto_kind(cdl_layer_kind kind)
{
    switch (kind) {
    case CDL_LAYER_CONV2D: return 0;
    case CDL_LAYER_LINEAR: return 1;
    case CDL_LAYER_BATCHNORM2D: return 2;
    case CDL_LAYER_EMBEDDING: return 3;
    case CDL_LAYER_POSEMBEDDING: return 4;
    case CDL_LAYER_LAYERNORM: return 5;
    default: return -1;
    }
}

int spec_finish_names(cdl_model_spec *spec)
{
    const char *const *stem = spec_auto_stem;
    char where[320], other[320];
    int count[SPEC_AUTO_KINDS] = {0};

    for (int i = 0; i < spec->nlayers; i++) {
        cdl_layer_spec *l = &spec->layers[i];
        int k = spec_auto_kind(l->kind);
        /* Top-level layers count for automatic names; a block's have theirs. */
        if (k >= 0 && !l->use_line) {
            count[k]++;
            if (!l->name[0]) {
                snprintf(l->name, sizeof l->name, "%s%d", stem[k], count[k]);
                l->auto_name = 1;
            }
        }
        if (l->name[0] && (!spec_name_ok(l->name) || !strcmp(l->name, "input"))) {
            spec_where(spec, i, where, sizeof where);
            return cdl_error("%s: invalid layer name '%.*s': use letters, digits and _ with dots "
                             "between parts (not first a digit, not 'input'), at most %d "
                             "characters", where, CDL_NAME_MAX, l->name, CDL_NAME_MAX - 1);
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
            if (spec->layers[j].auto_name || spec->layers[i].auto_name)
                return cdl_error("%s: the name '%s' is used twice (here and at %s; automatic names "
                                 "are convK / fcK / bnK / embK / posK / lnK for "
                                 "the K-th conv2d / linear / batchnorm2d / embedding / "
                                 "posembedding / layernorm): give one of them another name=", where,
                                 spec->layers[j].name, other);
            return cdl_error("%s: the name '%s' is already used at %s: names must be unique, "
                             "rename one of them", where, spec->layers[j].name, other);
        }
    }
    return 0;
}
