/* Whether two specs compute the same function at inference (cdl_spec_compare
 * in cdl/model.h): a checkpoint's weights fit both of "relu" and "tanh", of
 * n_head=2 and n_head=4, so the tensors alone cannot tell cdl-eval that
 * its --model is not the run's model. */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

/* What a layer does at inference, as text: its kind and every setting
 * that changes its output (not its name, init or training-only settings:
 * dropout's p, batch norm's momentum and sync). */
static void describe(const cdl_layer_spec *l, char *buf, size_t len)
{
    const char *k = spec_kind_name(l->kind);
    spec_conv c = spec_conv_of(l);
    switch (l->kind) {
    case CDL_LAYER_CONV2D:
        snprintf(buf, len, "%s %d kernel=%dx%d stride=%dx%d padding=%dx%d dilation=%dx%d "
                 "groups=%d bias=%s", k, l->out, c.kh, c.kw, c.sh ? c.sh : 1, c.sw ? c.sw : 1,
                 c.ph, c.pw, c.dh, c.dw, c.groups, l->bias ? "true" : "false");
        break;
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        snprintf(buf, len, "%s %d stride=%d padding=%d", k, l->kernel,
                 l->stride ? l->stride : l->kernel, l->pad);
        break;
    case CDL_LAYER_LINEAR:
        snprintf(buf, len, "%s %d bias=%s%s", k, l->out, l->bias ? "true" : "false",
                 l->tie ? " tie" : "");
        break;
    case CDL_LAYER_BATCHNORM2D:
        snprintf(buf, len, "%s eps=%g", k, l->eps > 0 ? l->eps : 1e-5);
        break;
    case CDL_LAYER_LAYERNORM:
        snprintf(buf, len, "%s eps=%g bias=%s", k, l->eps > 0 ? l->eps : 1e-5,
                 l->bias ? "true" : "false");
        break;
    case CDL_LAYER_LEAKYRELU:
        snprintf(buf, len, "%s negative_slope=%g", k, l->slope);
        break;
    case CDL_LAYER_GELU:
        snprintf(buf, len, "%s approximate=%s", k, l->approx_tanh ? "tanh" : "none");
        break;
    case CDL_LAYER_EMBEDDING:
        snprintf(buf, len, "%s %d", k, l->vocab);
        break;
    case CDL_LAYER_POSEMBEDDING:
        snprintf(buf, len, "%s %d", k, l->block);
        break;
    case CDL_LAYER_ATTENTION:
        snprintf(buf, len, "%s heads=%d", k, l->heads);
        break;
    default:
        snprintf(buf, len, "%s", k);
        break;
    }
}

/* The layers that compute something at inference, in order: dropout is
 * the identity there (gpt's dropout=0.1 adds such layers to dropout=0's),
 * so each layer's inputs are renumbered past them. keep[j] = spec index
 * of the j-th kept layer; in[j][..] its inputs as kept indices (-1: the
 * model's input). Returns how many were kept. */
static int kept_layers(const cdl_model_spec *s, int *keep, int (*in)[CDL_MAX_INPUTS], int *nin)
{
    int as[CDL_MAX_LAYERS];   /* spec index -> the kept index its output is */
    int n = 0;
    for (int i = 0; i < s->nlayers && i < CDL_MAX_LAYERS; i++) {
        const cdl_layer_spec *l = &s->layers[i];
        int from[CDL_MAX_INPUTS], k = l->nin > 0 && l->nin <= CDL_MAX_INPUTS ? l->nin : 1;
        for (int j = 0; j < k; j++) {
            int src = l->nin > 0 ? l->in[j] : i - 1;
            from[j] = src >= 0 && src < i ? as[src] : -1;
        }
        if (l->kind == CDL_LAYER_DROPOUT) {
            as[i] = from[0];
            continue;
        }
        keep[n] = i;
        nin[n] = k;
        memcpy(in[n], from, sizeof from);
        as[i] = n++;
    }
    return n;
}

int cdl_spec_compare(const cdl_model_spec *a, const cdl_model_spec *b, char *why, size_t len)
{
    /* ~40 KB on the stack, not static: programs may compare from threads. */
    int keep[2][CDL_MAX_LAYERS], in[2][CDL_MAX_LAYERS][CDL_MAX_INPUTS], nin[2][CDL_MAX_LAYERS];
    const cdl_model_spec *s[2] = {a, b};
    int n[2];
    for (int k = 0; k < 2; k++)
        n[k] = kept_layers(s[k], keep[k], in[k], nin[k]);
    char da[160], db[160], where[320];
    for (int j = 0; j < n[0] || j < n[1]; j++) {
        if (j >= n[0] || j >= n[1]) {
            int k = j >= n[0];   /* the spec that goes on */
            spec_where(s[k], keep[k][j], where, sizeof where);
            describe(&s[k]->layers[keep[k][j]], da, sizeof da);
            snprintf(why, len, "%s: %s has a layer more than %s: %s", where, s[k]->source,
                     s[1 - k]->source, da);
            return 1;
        }
        const cdl_layer_spec *la = &a->layers[keep[0][j]], *lb = &b->layers[keep[1][j]];
        describe(la, da, sizeof da);
        describe(lb, db, sizeof db);
        int same_in = nin[0][j] == nin[1][j] &&
                      !memcmp(in[0][j], in[1][j], (size_t)nin[0][j] * sizeof in[0][j][0]);
        if (strcmp(da, db) == 0 && same_in)
            continue;
        spec_where(a, keep[0][j], where, sizeof where);
        if (!same_in)
            snprintf(why, len, "%s: its layer %d (%s) reads other layers than %s's", where,
                     j + 1, da, b->source);
        else
            snprintf(why, len, "%s: '%s', where %s has '%s'", where, da, b->source, db);
        return 1;
    }
    return 0;
}
