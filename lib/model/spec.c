/* The model spec file parser: one layer per line, `#` starts a comment
 * (format: docs/model-spec.md). Strict on purpose: every unknown word, bad
 * number or repeated key is an error naming file:line, so a typo never
 * silently trains a different model. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

#define LINE_CHARS 1024
#define MAX_WORDS 16
#define SPEC_FILE_MAX (1L << 20)

enum { K_KERNEL = 1, K_STRIDE = 2, K_PADDING = 4, K_BIAS = 8, K_NAME = 16 };

static const struct key_info {
    const char *word;
    unsigned bit;
} keys[] = {
    {"kernel", K_KERNEL}, {"stride", K_STRIDE}, {"padding", K_PADDING},
    {"bias", K_BIAS},     {"name", K_NAME},
};

/* npos: positional arguments (all required); keys: allowed key= words. */
static const struct kind_info {
    const char *word;
    cdl_layer_kind kind;
    int npos;
    unsigned keys;
    const char *usage;
} kinds[] = {
    {"conv2d", CDL_LAYER_CONV2D, 1, K_KERNEL | K_STRIDE | K_PADDING | K_BIAS | K_NAME,
     "conv2d OUT kernel=K [stride=S] [padding=P] [bias=true|false] [name=NAME]"},
    {"maxpool2d", CDL_LAYER_MAXPOOL2D, 1, K_STRIDE | K_PADDING, "maxpool2d K [stride=S] [padding=P]"},
    {"avgpool2d", CDL_LAYER_AVGPOOL2D, 1, K_STRIDE | K_PADDING, "avgpool2d K [stride=S] [padding=P]"},
    {"linear", CDL_LAYER_LINEAR, 1, K_BIAS | K_NAME, "linear OUT [bias=true|false] [name=NAME]"},
    {"relu", CDL_LAYER_RELU, 0, 0, "relu"},
    {"flatten", CDL_LAYER_FLATTEN, 0, 0, "flatten"},
    {"dropout", CDL_LAYER_DROPOUT, 1, 0, "dropout P (0 <= P < 1)"},
};

typedef struct parser {
    const char *file;
    int line;
} parser;

__attribute__((format(printf, 2, 3)))
static int perr(const parser *p, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cdl_error("%s:%d: %s", p->file, p->line, msg);
}

/* A whole decimal number in [lo,hi]; `what` is how the user wrote it. */
static int parse_int(const parser *p, const char *what, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end)
        return perr(p, "%s'%s' is not a whole number", what, s);
    if (errno == ERANGE || v < lo || v > hi)
        return perr(p, "%s%s is out of range: use a number from %ld to %ld", what, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_prob(const parser *p, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return perr(p, "dropout probability '%s' is not a number: write e.g. 'dropout 0.5'", s);
    if (!(v >= 0.0f && v < 1.0f))
        return perr(p, "dropout probability %s is out of range: use 0 <= P < 1", s);
    *out = v;
    return 0;
}

/* "input CxHxW", e.g. "input 3x32x32". */
static int parse_input(const parser *p, char **w, int nw, cdl_shape *out)
{
    static const char usage[] = "write it as 'input CxHxW', e.g. 'input 1x28x28'";
    if (nw != 2)
        return perr(p, "input takes one shape: %s", usage);
    int dims[3];
    const char *s = w[1];
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || (i < 2 ? *end != 'x' : *end != '\0'))
            return perr(p, "input shape '%s' is not CxHxW: %s", w[1], usage);
        if (errno == ERANGE || v < 1 || v > SPEC_MAX_DIM)
            return perr(p, "input shape '%s' is out of range: every size must be from 1 to %d",
                        w[1], SPEC_MAX_DIM);
        dims[i] = (int)v;
        s = end + 1;
    }
    out->c = dims[0];
    out->h = dims[1];
    out->w = dims[2];
    return 0;
}

static const struct kind_info *find_kind(const char *word)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i].word, word))
            return &kinds[i];
    return NULL;
}

static int unknown_key(const parser *p, const struct kind_info *k, const char *key)
{
    char allowed[96] = "";
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (k->keys & keys[i].bit) {
            strcat(allowed, allowed[0] ? ", " : "");
            strcat(allowed, keys[i].word);
            strcat(allowed, "=");
        }
    if (!allowed[0])
        return perr(p, "%s takes no key=value options, but has %s=: write '%s'", k->word, key,
                    k->usage);
    return perr(p, "unknown key '%s' for %s: it takes %s (%s)", key, k->word, allowed, k->usage);
}

static int parse_positional(const parser *p, const struct kind_info *k, const char *s,
                            cdl_layer_spec *l)
{
    char what[64];
    switch (k->kind) {
    case CDL_LAYER_CONV2D:
    case CDL_LAYER_LINEAR:
        snprintf(what, sizeof what, "%s output size ", k->word);
        return parse_int(p, what, s, 1, SPEC_MAX_FEATURES, &l->out);
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        snprintf(what, sizeof what, "%s kernel size ", k->word);
        return parse_int(p, what, s, 1, SPEC_MAX_DIM, &l->kernel);
    case CDL_LAYER_DROPOUT:
        return parse_prob(p, s, &l->p);
    default:
        return perr(p, "unexpected '%s': write '%s'", s, k->usage);
    }
}

static int parse_key(const parser *p, const struct kind_info *k, unsigned bit, const char *key,
                     const char *val, cdl_layer_spec *l)
{
    char what[32];
    snprintf(what, sizeof what, "%s=", key);
    switch (bit) {
    case K_KERNEL: return parse_int(p, what, val, 1, SPEC_MAX_DIM, &l->kernel);
    case K_STRIDE: return parse_int(p, what, val, 1, SPEC_MAX_DIM, &l->stride);
    case K_PADDING: return parse_int(p, what, val, 0, SPEC_MAX_DIM, &l->pad);
    case K_BIAS:
        if (!strcmp(val, "true"))
            l->bias = 1;
        else if (!strcmp(val, "false"))
            l->bias = 0;
        else
            return perr(p, "bias=%s: write bias=true or bias=false", val);
        return 0;
    case K_NAME:
        if (!spec_name_ok(val))
            return perr(p, "invalid %s name '%s': use letters, digits and _ (not first a digit), "
                        "at most %d characters", k->word, val, CDL_NAME_MAX - 1);
        snprintf(l->name, sizeof l->name, "%s", val);
        return 0;
    }
    return unknown_key(p, k, key);
}

static int parse_layer(const parser *p, char **w, int nw, cdl_layer_spec *l)
{
    const struct kind_info *k = find_kind(w[0]);
    if (!k)
        return perr(p, "unknown layer '%s': use input, conv2d, maxpool2d, avgpool2d, linear, relu, "
                    "flatten or dropout", w[0]);
    memset(l, 0, sizeof *l);
    l->kind = k->kind;
    l->bias = 1;
    l->stride = k->kind == CDL_LAYER_CONV2D ? 1 : 0;   /* pools: 0 = the kernel size */
    l->line = p->line;

    int npos = 0;
    unsigned seen = 0;
    for (int i = 1; i < nw; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq) {
            if (npos == k->npos)
                return perr(p, "unexpected '%s': write '%s'", w[i], k->usage);
            if (parse_positional(p, k, w[i], l))
                return -1;
            npos++;
            continue;
        }
        *eq = '\0';
        const char *key = w[i], *val = eq + 1;
        unsigned bit = 0;
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
            if (!strcmp(keys[j].word, key))
                bit = keys[j].bit;
        if (!(bit & k->keys))
            return unknown_key(p, k, key);
        if (seen & bit)
            return perr(p, "%s= is given twice: keep one", key);
        seen |= bit;
        if (parse_key(p, k, bit, key, val, l))
            return -1;
    }
    if (npos < k->npos)
        return perr(p, "%s is missing its %s: write '%s'", k->word,
                    k->kind == CDL_LAYER_DROPOUT ? "probability"
                    : k->kind == CDL_LAYER_MAXPOOL2D || k->kind == CDL_LAYER_AVGPOOL2D
                        ? "kernel size" : "output size",
                    k->usage);
    if (k->kind == CDL_LAYER_CONV2D && !(seen & K_KERNEL))
        return perr(p, "conv2d needs kernel=K, e.g. 'conv2d %d kernel=3'", l->out);
    int pool = k->kind == CDL_LAYER_MAXPOOL2D || k->kind == CDL_LAYER_AVGPOOL2D;
    if (pool && 2 * l->pad > l->kernel)
        return perr(p, "%s padding=%d is more than half the kernel %d (PyTorch rejects it too): "
                    "use padding <= %d", k->word, l->pad, l->kernel, l->kernel / 2);
    return 0;
}

/* Splits one line (comment removed) into words; returns the count or -1. */
static int split_words(const parser *p, char *s, char **w)
{
    char *hash = strchr(s, '#');
    if (hash)
        *hash = '\0';
    int n = 0;
    char *save = NULL;
    static const char space[] = " \t\r\f\v";
    for (char *tok = strtok_r(s, space, &save); tok; tok = strtok_r(NULL, space, &save)) {
        if (n == MAX_WORDS)
            return perr(p, "more than %d words on one line: one layer per line", MAX_WORDS);
        w[n++] = tok;
    }
    return n;
}

int cdl_spec_parse(const char *text, const char *filename, cdl_model_spec *out)
{
    static cdl_model_spec zero;
    cdl_model_spec spec = zero;
    parser p = {filename && *filename ? filename : "<model spec>", 0};
    snprintf(spec.source, sizeof spec.source, "%s", p.file);
    if (!text)
        return cdl_error("%s: no spec text given", p.file);

    for (const char *s = text; *s;) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        p.line++;
        char buf[LINE_CHARS], *w[MAX_WORDS];
        if (len >= sizeof buf)
            return perr(&p, "line is longer than %d characters: one layer per line",
                        LINE_CHARS - 1);
        memcpy(buf, s, len);
        buf[len] = '\0';
        s += len + (eol != NULL);

        int nw = split_words(&p, buf, w);
        if (nw < 0)
            return -1;
        if (nw == 0)
            continue;
        if (!strcmp(w[0], "input")) {
            if (spec.input.c)
                return perr(&p, "a second input line: give the input shape once");
            if (spec.nlayers)
                return perr(&p, "the input line must come before the first layer");
            if (parse_input(&p, w, nw, &spec.input))
                return -1;
            continue;
        }
        if (spec.nlayers == CDL_MAX_LAYERS)
            return perr(&p, "more than %d layers: cdl models have at most %d", CDL_MAX_LAYERS,
                        CDL_MAX_LAYERS);
        if (parse_layer(&p, w, nw, &spec.layers[spec.nlayers]))
            return -1;
        spec.nlayers++;
    }
    if (spec.nlayers == 0)
        return cdl_error("%s: the spec has no layers: write one layer per line, e.g. 'linear 10'",
                         p.file);
    if (spec_finish_names(&spec))
        return -1;
    *out = spec;
    return 0;
}

int cdl_spec_load(const char *path, cdl_model_spec *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cdl_error("cannot open model spec '%s': %s: check the path (or use a built-in: "
                         "lenet, mlp)", path, strerror(errno));
    char *text = cdl_malloc(SPEC_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return -1;
    }
    size_t n = fread(text, 1, SPEC_FILE_MAX + 1, f);
    int bad = ferror(f), err = errno;
    fclose(f);
    int rc = -1;
    if (bad)
        cdl_error("cannot read model spec '%s': %s", path, strerror(err));
    else if (n > SPEC_FILE_MAX)
        cdl_error("model spec '%s' is larger than %ld bytes: is it really a spec file?", path,
                  SPEC_FILE_MAX);
    else if (memchr(text, '\0', n))
        cdl_error("model spec '%s' contains a NUL byte: it must be a text file", path);
    else {
        text[n] = '\0';
        rc = cdl_spec_parse(text, path, out);
    }
    cdl_free(text);
    return rc;
}
