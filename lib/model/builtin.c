/* Built-in models, written as spec text and read by the same parser as spec
 * files, so a built-in and the equivalent file give identical models. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

/* LeNet-5 as in the classic PyTorch module (conv1, conv2, fc1, fc2, fc3).
 * conv1 is padded by 2 for 28x28 inputs so that fc1 sees 16x5x5 = 400
 * features both for 1x28x28 (MNIST) and 3x32x32 (CIFAR) images. */
static const char lenet_fmt[] =
    "conv2d 6 kernel=5 padding=%d\n"
    "relu\n"
    "maxpool2d 2\n"
    "conv2d 16 kernel=5\n"
    "relu\n"
    "maxpool2d 2\n"
    "flatten\n"
    "linear 120\n"
    "relu\n"
    "linear 84\n"
    "relu\n"
    "linear %d\n";

static const char mlp_fmt[] =
    "flatten\n"
    "linear 256\n"
    "relu\n"
    "linear 128\n"
    "relu\n"
    "linear %d\n";

/* nanoGPT's GPT (model.py): a block is x + attn(ln_1(x)), then
 * x + mlp(ln_2(x)), with the fused c_attn projection, GELU (exact) and
 * dropout after each projection back into the residual stream (none on
 * the attention probabilities); the head lm_head shares wte's weight.
 * GPT-2's initialisation: N(0, 0.02) for linear and embedding weights,
 * N(0, 0.02/sqrt(2 n_layer)) for the projections into the residual stream
 * (c_proj), biases 0, layer norms 1 and 0. The %s after a projection is a
 * dropout line, or nothing when dropout is 0. */
static const char gpt_block_fmt[] =
    "block gpt_block\n"
    "layernorm bias=%s name=ln_1\n"
    "linear %d bias=%s init_std=0.02 name=attn.c_attn\n"
    "attention heads=%d\n"
    "linear %d bias=%s init_std=%.9g name=attn.c_proj\n"
    "%s"
    "add input name=res\n"
    "layernorm bias=%s name=ln_2\n"
    "linear %d bias=%s init_std=0.02 name=mlp.c_fc\n"
    "gelu\n"
    "linear %d bias=%s init_std=%.9g name=mlp.c_proj\n"
    "%s"
    "add res\n"
    "end\n"
    "embedding %d %d init_std=0.02 name=transformer.wte\n"
    "posembedding %d %d init_std=0.02 name=transformer.wpe\n"
    "%s";

#define GPT_MAX_LAYERS 33   /* up to 15 spec layers each (with dropout): within CDL_MAX_LAYERS */

typedef struct gpt_opts {
    int n_layer, n_head, n_embd, block_size, vocab_size, bias;
    float dropout;
} gpt_opts;

/* KEY=VALUE words of a gpt line or built-in into o (sizes not given stay 0). */
static int gpt_parse(char **kv, int nkv, const char *where, gpt_opts *o)
{
    static const char *const names[] = {"n_layer", "n_head", "n_embd", "block_size",
                                        "vocab_size", "bias", "dropout"};
    static const long hi[] = {GPT_MAX_LAYERS, SPEC_MAX_FEATURES, SPEC_MAX_FEATURES, SPEC_MAX_DIM,
                              SPEC_MAX_FEATURES};
    int *ints[] = {&o->n_layer, &o->n_head, &o->n_embd, &o->block_size, &o->vocab_size};
    unsigned seen = 0;
    *o = (gpt_opts){.n_layer = 4, .n_head = 4, .n_embd = 128, .bias = 1};
    for (int i = 0; i < nkv; i++) {
        const char *eq = strchr(kv[i], '=');
        size_t klen = eq ? (size_t)(eq - kv[i]) : strlen(kv[i]);
        int k = -1;
        for (int j = 0; j < 7; j++)
            if (strlen(names[j]) == klen && !strncmp(kv[i], names[j], klen))
                k = j;
        if (!eq || k < 0)
            return cdl_error("%s: gpt option '%s': use n_layer=, n_head=, n_embd=, block_size=, "
                             "vocab_size=, bias=true|false, dropout=P", where, kv[i]);
        if (seen & (1u << k))
            return cdl_error("%s: gpt option %s= is given twice: keep one", where, names[k]);
        seen |= 1u << k;
        const char *v = eq + 1;
        /* A spec file's gpt line is split at spaces: the built-in's commas
         * would leave the rest of the line in this value. */
        if (strchr(v, ','))
            return cdl_error("%s: gpt option '%s' holds a comma: a gpt line of a spec file "
                             "separates its options by spaces (gpt n_layer=4 n_head=4), "
                             "--model gpt:... by commas", where, kv[i]);
        char *end;
        errno = 0;
        if (k == 5) {
            if (strcmp(v, "true") && strcmp(v, "false"))
                return cdl_error("%s: gpt bias=%s: write bias=true or bias=false", where, v);
            o->bias = !strcmp(v, "true");
        } else if (k == 6) {
            o->dropout = strtof(v, &end);
            if (end == v || *end || !(o->dropout >= 0.0f && o->dropout < 1.0f))
                return cdl_error("%s: gpt dropout=%s: use a probability 0 <= P < 1", where, v);
        } else {
            long n = strtol(v, &end, 10);
            if (end == v || *end || errno || n < 1 || n > hi[k])
                return cdl_error("%s: gpt %s=%s: use a whole number from 1 to %ld", where,
                                 names[k], v, hi[k]);
            *ints[k] = (int)n;
        }
    }
    if (o->n_embd % o->n_head)
        return cdl_error("%s: gpt n_head=%d does not divide n_embd=%d: use a divisor (the heads "
                         "split the embedding)", where, o->n_head, o->n_embd);
    if ((long)o->n_embd * 4 > SPEC_MAX_FEATURES)
        return cdl_error("%s: gpt n_embd=%d is too large: at most %d", where, o->n_embd,
                         SPEC_MAX_FEATURES / 4);
    return 0;
}

int spec_gpt_text(char **kv, int nkv, const char *where, int block, int vocab, char *text,
                  size_t len)
{
    gpt_opts o;
    if (gpt_parse(kv, nkv, where, &o))
        return -1;
    if (o.vocab_size && vocab > 0 && o.vocab_size != vocab)
        return cdl_error("%s: gpt vocab_size=%d but the data has %d tokens: use vocab_size=%d, "
                         "or give tokens:DIR data --vocab-size %d (a padded vocabulary, as "
                         "nanoGPT's 50304 for GPT-2's 50257)", where, o.vocab_size, vocab, vocab,
                         o.vocab_size);
    if (o.block_size && block > 0 && block > o.block_size)
        return cdl_error("%s: gpt block_size=%d but the data's sequences have %d tokens: use "
                         "--block-size %d or less, or a larger block_size", where, o.block_size,
                         block, o.block_size);
    int V = o.vocab_size ? o.vocab_size : vocab > 0 ? vocab : 0;
    int T = o.block_size ? o.block_size : block > 0 ? block : 0;
    int C = o.n_embd;
    const char *b = o.bias ? "true" : "false";
    double proj_std = 0.02 / sqrt(2.0 * o.n_layer);
    char drop[64] = "";
    if (o.dropout > 0)
        snprintf(drop, sizeof drop, "dropout %.9g\n", (double)o.dropout);
    size_t n = (size_t)snprintf(text, len, gpt_block_fmt, b, 3 * C, b, o.n_head, C, b, proj_std,
                                drop, b, 4 * C, b, C, b, proj_std, drop, V, C, T, C, drop);
    for (int l = 0; l < o.n_layer && n < len; l++)
        n += (size_t)snprintf(text + n, len - n, "use gpt_block name=transformer.h.%d\n", l);
    if (n < len)
        n += (size_t)snprintf(text + n, len - n,
                              "layernorm bias=%s name=transformer.ln_f\n"
                              "linear %d bias=false tie=transformer.wte name=lm_head\n", b, V);
    if (n >= len)
        return cdl_error("%s: the gpt model's text is longer than %zu characters", where, len);
    return 0;
}

/* "gpt" or "gpt:KEY=VALUE,...": its option words (in buf, at most max). */
static int gpt_words(const char *name, char *buf, size_t len, char **kv, int max)
{
    int n = 0;
    if (strncmp(name, "gpt:", 4) || !name[4])
        return 0;
    snprintf(buf, len, "%s", name + 4);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        kv[n++] = t;
    return n;
}

int cdl_spec_is_builtin(const char *name)
{
    static const char *const names[] = {"lenet", "mlp", "gpt"};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return name && (!strncmp(name, "gpt:", 4) || spec_is_resnet(name));
}

int cdl_spec_block_size(const char *model)
{
    if (!model)
        return 0;
    if (!strcmp(model, "gpt") || !strncmp(model, "gpt:", 4)) {
        char buf[512], *kv[16];
        gpt_opts o;
        if (gpt_parse(kv, gpt_words(model, buf, sizeof buf, kv, 16), model, &o))
            return -1;
        return o.block_size;
    }
    if (cdl_spec_is_builtin(model))
        return 0;
    cdl_model_spec *spec = cdl_malloc(sizeof *spec);
    if (!spec)
        return -1;
    int block = 0;
    if (cdl_spec_load(model, spec))
        block = -1;
    /* An input line of a token window (T x 1 x 1) says T itself: the
     * window the model is for, which may be shorter than its block. */
    else if (spec->input.c && spec->input.h == 1 && spec->input.w == 1)
        block = spec->input.c;
    for (int i = 0; block == 0 && i < spec->nlayers; i++)
        if (spec->layers[i].kind == CDL_LAYER_POSEMBEDDING)
            block = spec->layers[i].block;
    cdl_free(spec);
    return block;
}

int cdl_spec_fit(cdl_model_spec *spec, cdl_shape input, int classes)
{
    if (!spec)
        return cdl_error("cdl_spec_fit: spec is NULL");
    const char *src = spec->source[0] ? spec->source : "model spec";
    for (int i = 0; i < spec->nlayers; i++) {
        cdl_layer_spec *l = &spec->layers[i];
        char where[320];
        spec_where(spec, i, where, sizeof where);
        if (l->kind == CDL_LAYER_EMBEDDING && !l->vocab)
            l->vocab = classes;
        if (l->kind == CDL_LAYER_POSEMBEDDING && !l->block)
            l->block = input.c;
        if (l->kind == CDL_LAYER_LINEAR && l->tie && !l->out)
            l->out = spec->layers[l->tie - 1].vocab;
        /* The output layer's vocabulary is the data's. */
        if (i == spec->nlayers - 1 && l->tie && l->out != classes)
            return cdl_error("%s: the model's vocabulary is %d tokens but the data has %d: use "
                             "vocab_size=%d (or data with %d tokens)", src, l->out, classes,
                             classes, l->out);
    }
    return 0;
}

/* The spec text of built-in `name`. */
static int builtin_text(const char *name, cdl_shape input, int classes, char *text, size_t len)
{
    if (!strcmp(name, "lenet"))
        snprintf(text, len, lenet_fmt, input.h == 28 && input.w == 28 ? 2 : 0, classes);
    else if (!strcmp(name, "mlp"))
        snprintf(text, len, mlp_fmt, classes);
    else if (!strcmp(name, "gpt") || !strncmp(name, "gpt:", 4)) {
        char buf[512], *kv[16];
        int nkv = gpt_words(name, buf, sizeof buf, kv, 16);
        char where[300];
        snprintf(where, sizeof where, "model %s", name);
        if (input.h != 1 || input.w != 1)
            return cdl_error("model %s: the input is %dx%dx%d but a gpt reads sequences of token "
                             "ids (Tx1x1): use a token dataset (text: or tokens:)", name, input.c,
                             input.h, input.w);
        if (spec_gpt_text(kv, nkv, where, input.c, classes, text, len))
            return -1;
    } else if (spec_is_resnet(name)) {
        return spec_resnet_text(name, input, classes, text, len);
    } else
        return cdl_error("unknown built-in model '%s': use lenet, mlp, resnet20, resnet18, "
                         "resnet34, resnet50, resnet101 (resnetNN:stem=cifar|imagenet), gpt "
                         "(gpt:n_layer=N,n_head=H,...) or the path of a spec file", name);

    return 0;
}

int cdl_spec_builtin(const char *name, cdl_shape input, int classes, cdl_model_spec *out)
{
    if (!out)
        return cdl_error("cdl_spec_builtin: out is NULL");
    if (!name)
        name = "(null)";
    if (input.c < 1 || input.h < 1 || input.w < 1 || input.c > SPEC_MAX_DIM ||
        input.h > SPEC_MAX_DIM || input.w > SPEC_MAX_DIM)
        return cdl_error("model %s: invalid input shape %dx%dx%d: every size must be from 1 to %d",
                         name, input.c, input.h, input.w, SPEC_MAX_DIM);
    if (classes < 1 || classes > SPEC_MAX_FEATURES)
        return cdl_error("model %s: invalid number of classes %d: use 1 to %d", name, classes,
                         SPEC_MAX_FEATURES);
    char *text = cdl_malloc(SPEC_GPT_TEXT);
    if (!text)
        return -1;
    int rc = builtin_text(name, input, classes, text, SPEC_GPT_TEXT);
    cdl_model_spec spec;
    if (rc == 0)
        rc = cdl_spec_parse(text, name, &spec);
    cdl_free(text);
    if (rc)
        return -1;
    for (int i = 0; i < spec.nlayers; i++)
        spec.layers[i].line = spec.layers[i].use_line = 0;   /* built-in: errors name the layer */
    spec.input = input;
    *out = spec;
    return 0;
}

