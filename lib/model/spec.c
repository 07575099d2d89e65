/* The model spec file parser: one layer per line, `#` starts a comment
 * (format: docs/model-spec.md). A layer reads the previous line's output,
 * or named earlier layers (from=, add, concat); `block NAME PARAMS ... end`
 * defines a block of lines that `use NAME ARGS name=PREFIX` expands with
 * names PREFIX.LOCAL (PyTorch's module paths). Strict on purpose: every
 * unknown word, bad number or repeated key is an error naming file:line,
 * so a typo never silently trains a different model. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "model_internal.h"

#define LINE_CHARS 1024
#define MAX_WORDS 16
#define SPEC_FILE_MAX (1L << 20)

#define MAX_BLOCKS 32
#define MAX_BLOCK_PARAMS 8
#define MAX_BODY_LINES 2048
#define WORD_MAX 32
#define LIST_NAMES 8    /* names an unknown-reference error lists */

enum {
    K_KERNEL = 1, K_STRIDE = 2, K_PADDING = 4, K_BIAS = 8, K_NAME = 16, K_FROM = 32,
    K_GROUPS = 64, K_DILATION = 128, K_EPS = 256, K_MOMENTUM = 512, K_SYNC = 1024,
    K_SLOPE = 2048, K_APPROX = 4096, K_HEADS = 8192, K_TIE = 16384, K_INIT_STD = 32768,
};

static const struct key_info {
    const char *word;
    unsigned bit;
} keys[] = {
    {"kernel", K_KERNEL},     {"stride", K_STRIDE},       {"padding", K_PADDING},
    {"bias", K_BIAS},         {"name", K_NAME},           {"from", K_FROM},
    {"groups", K_GROUPS},     {"dilation", K_DILATION},   {"eps", K_EPS},
    {"momentum", K_MOMENTUM}, {"sync", K_SYNC},           {"negative_slope", K_SLOPE},
    {"approximate", K_APPROX}, {"heads", K_HEADS},         {"tie", K_TIE},
    {"init_std", K_INIT_STD},
};

#define K_ANY (K_NAME | K_FROM)   /* every layer but add / concat */

/* npos: positional arguments (all required; add and concat take 1 to
 * CDL_MAX_INPUTS layer names); keys: allowed key= words. */
static const struct kind_info {
    const char *word;
    cdl_layer_kind kind;
    int npos;
    unsigned keys;
    const char *usage;
} kinds[] = {
    {"conv2d", CDL_LAYER_CONV2D, 1,
     K_ANY | K_KERNEL | K_STRIDE | K_PADDING | K_BIAS | K_GROUPS | K_DILATION,
     "conv2d OUT kernel=K|KHxKW [stride=S] [padding=P] [dilation=D] [groups=G] "
     "[bias=true|false] [name=NAME] [from=LAYER]"},
    {"maxpool2d", CDL_LAYER_MAXPOOL2D, 1, K_ANY | K_STRIDE | K_PADDING,
     "maxpool2d K [stride=S] [padding=P]"},
    {"avgpool2d", CDL_LAYER_AVGPOOL2D, 1, K_ANY | K_STRIDE | K_PADDING,
     "avgpool2d K [stride=S] [padding=P]"},
    {"linear", CDL_LAYER_LINEAR, 1, K_ANY | K_BIAS | K_TIE | K_INIT_STD,
     "linear OUT [bias=true|false] [tie=EMBEDDING] [init_std=S] [name=NAME]"},
    {"relu", CDL_LAYER_RELU, 0, K_ANY, "relu [name=NAME] [from=LAYER]"},
    {"flatten", CDL_LAYER_FLATTEN, 0, K_ANY, "flatten"},
    {"dropout", CDL_LAYER_DROPOUT, 1, K_ANY, "dropout P (0 <= P < 1)"},
    {"add", CDL_LAYER_ADD, -1, K_NAME,
     "add LAYER (the previous line + LAYER) or add LAYER1 LAYER2 ... [name=NAME]"},
    {"concat", CDL_LAYER_CONCAT, -1, K_NAME,
     "concat LAYER (the previous line, then LAYER) or concat LAYER1 LAYER2 ... [name=NAME]"},
    {"batchnorm2d", CDL_LAYER_BATCHNORM2D, 0, K_ANY | K_EPS | K_MOMENTUM | K_SYNC,
     "batchnorm2d [eps=1e-5] [momentum=0.1] [sync=true|false] [name=NAME] [from=LAYER]"},
    {"globalavgpool", CDL_LAYER_GLOBALAVGPOOL, 0, K_ANY, "globalavgpool"},
    {"gelu", CDL_LAYER_GELU, 0, K_ANY | K_APPROX, "gelu [approximate=none|tanh]"},
    {"silu", CDL_LAYER_SILU, 0, K_ANY, "silu"},
    {"sigmoid", CDL_LAYER_SIGMOID, 0, K_ANY, "sigmoid"},
    {"tanh", CDL_LAYER_TANH, 0, K_ANY, "tanh"},
    {"leakyrelu", CDL_LAYER_LEAKYRELU, 0, K_ANY | K_SLOPE, "leakyrelu [negative_slope=0.01]"},
    {"embedding", CDL_LAYER_EMBEDDING, 2, K_ANY | K_INIT_STD,
     "embedding VOCAB DIM [init_std=S] [name=NAME]"},
    {"posembedding", CDL_LAYER_POSEMBEDDING, 2, K_ANY | K_INIT_STD,
     "posembedding BLOCK DIM [init_std=S] [name=NAME]"},
    {"layernorm", CDL_LAYER_LAYERNORM, 0, K_ANY | K_BIAS | K_EPS,
     "layernorm [eps=1e-5] [bias=true|false] [name=NAME]"},
    {"attention", CDL_LAYER_ATTENTION, 0, K_ANY | K_HEADS, "attention heads=H"},
};

typedef struct parser {
    const char *file;
    int line;
    int use_line;                 /* inside a `use`: its line, and the block's prefix */
    const char *prefix, *block;
} parser;

__attribute__((format(printf, 2, 3)))
static int perr(const parser *p, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->use_line)
        return cdl_error("%s:%d (block %s, used at line %d as %s): %s", p->file, p->line,
                         p->block, p->use_line, p->prefix, msg);
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

/* A finite number in [lo,hi]. */
static int parse_real(const parser *p, const char *what, const char *s, double lo, double hi,
                      float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return perr(p, "%s'%s' is not a number", what, s);
    if (!(v >= lo && v <= hi))
        return perr(p, "%s%s is out of range: use %g to %g", what, s, lo, hi);
    *out = v;
    return 0;
}

/* "K" or "KHxKW" (conv2d sizes). */
static int parse_pair(const parser *p, const char *what, const char *s, long lo, int *h, int *w)
{
    char buf[64];
    const char *x = strchr(s, 'x');
    if (!x)
        return parse_int(p, what, s, lo, SPEC_MAX_DIM, h) ? -1 : (*w = *h, 0);
    size_t n = (size_t)(x - s);
    if (n >= sizeof buf)
        return perr(p, "%s'%s' is not a whole number or HxW", what, s);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (parse_int(p, what, buf, lo, SPEC_MAX_DIM, h) || parse_int(p, what, x + 1, lo, SPEC_MAX_DIM, w))
        return -1;
    return 0;
}

static int parse_bool(const parser *p, const char *key, const char *val, int *out)
{
    if (!strcmp(val, "true"))
        *out = 1;
    else if (!strcmp(val, "false"))
        *out = 0;
    else
        return perr(p, "%s=%s: write %s=true or %s=false", key, val, key, key);
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
    char allowed[256] = "";
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

/* Layer names a line refers to (from=, or add / concat arguments),
 * resolved once the line is parsed. */
typedef struct refs {
    int n;
    int from;                 /* 1: from= (the one input); 0: add / concat names */
    char name[CDL_MAX_INPUTS][CDL_NAME_MAX];
    char tie[CDL_NAME_MAX];   /* linear tie=: the embedding ("" = none) */
} refs;

static int add_ref(const parser *p, const char *what, const char *s, refs *r)
{
    if (r->n == CDL_MAX_INPUTS)
        return perr(p, "more than %d inputs: join at most %d layers in one line", CDL_MAX_INPUTS,
                    CDL_MAX_INPUTS);
    if (!s[0] || strlen(s) >= CDL_NAME_MAX)
        return perr(p, "%s'%s' is not a layer name (at most %d characters)", what, s,
                    CDL_NAME_MAX - 1);
    snprintf(r->name[r->n++], CDL_NAME_MAX, "%s", s);
    return 0;
}

static int parse_positional(const parser *p, const struct kind_info *k, int pos, const char *s,
                            cdl_layer_spec *l, refs *r)
{
    char what[64];
    switch (k->kind) {
    case CDL_LAYER_CONV2D:
    case CDL_LAYER_LINEAR:
        snprintf(what, sizeof what, "%s output size ", k->word);
        /* 0: a tied linear's vocabulary, filled in from the data. */
        return parse_int(p, what, s, k->kind == CDL_LAYER_LINEAR ? 0 : 1, SPEC_MAX_FEATURES,
                         &l->out);
    case CDL_LAYER_EMBEDDING:
    case CDL_LAYER_POSEMBEDDING:
        /* Rows 0: from the data (cdl_spec_fit); then the feature size. */
        snprintf(what, sizeof what, "%s %s ", k->word,
                 pos ? "size" : k->kind == CDL_LAYER_EMBEDDING ? "vocabulary" : "block size");
        return parse_int(p, what, s, pos ? 1 : 0, pos ? SPEC_MAX_FEATURES : SPEC_MAX_FEATURES,
                         pos ? &l->out : k->kind == CDL_LAYER_EMBEDDING ? &l->vocab : &l->block);
    case CDL_LAYER_MAXPOOL2D:
    case CDL_LAYER_AVGPOOL2D:
        snprintf(what, sizeof what, "%s kernel size ", k->word);
        if (strchr(s, 'x'))   /* "2x3": conv2d takes HxW, the pools do not */
            return perr(p, "%s'%s': pooling kernels are square, give one size (%s 2)", what, s,
                        k->word);
        return parse_int(p, what, s, 1, SPEC_MAX_DIM, &l->kernel);
    case CDL_LAYER_DROPOUT:
        return parse_prob(p, s, &l->p);
    case CDL_LAYER_ADD:
    case CDL_LAYER_CONCAT:
        snprintf(what, sizeof what, "%s input ", k->word);
        return add_ref(p, what, s, r);
    default:
        return perr(p, "unexpected '%s': write '%s'", s, k->usage);
    }
}

static int parse_key(const parser *p, const struct kind_info *k, unsigned bit, const char *key,
                     const char *val, cdl_layer_spec *l, refs *r)
{
    char what[32];
    int conv = k->kind == CDL_LAYER_CONV2D;
    snprintf(what, sizeof what, "%s=", key);
    switch (bit) {
    case K_KERNEL: return parse_pair(p, what, val, 1, &l->kernel, &l->kernel_w);
    case K_STRIDE:
        return conv ? parse_pair(p, what, val, 1, &l->stride, &l->stride_w)
                    : parse_int(p, what, val, 1, SPEC_MAX_DIM, &l->stride);
    case K_PADDING:
        return conv ? parse_pair(p, what, val, 0, &l->pad, &l->pad_w)
                    : parse_int(p, what, val, 0, SPEC_MAX_DIM, &l->pad);
    case K_DILATION: return parse_pair(p, what, val, 1, &l->dilation, &l->dilation_w);
    case K_GROUPS: return parse_int(p, what, val, 1, SPEC_MAX_FEATURES, &l->groups);
    case K_BIAS: return parse_bool(p, key, val, &l->bias);
    case K_SYNC: return parse_bool(p, key, val, &l->sync);
    case K_EPS: return parse_real(p, what, val, 1e-30, 1.0, &l->eps);
    case K_MOMENTUM: return parse_real(p, what, val, 0.0, 1.0, &l->momentum);
    case K_SLOPE: return parse_real(p, what, val, -1e6, 1e6, &l->slope);
    case K_HEADS: return parse_int(p, what, val, 1, SPEC_MAX_FEATURES, &l->heads);
    case K_INIT_STD: return parse_real(p, what, val, 1e-30, 1e6, &l->init_std);
    case K_TIE:
        if (!val[0] || strlen(val) >= CDL_NAME_MAX)
            return perr(p, "tie='%s' is not a layer name", val);
        snprintf(r->tie, sizeof r->tie, "%s", val);
        return 0;
    case K_APPROX:
        if (strcmp(val, "none") && strcmp(val, "tanh"))
            return perr(p, "approximate=%s: write approximate=none or approximate=tanh (PyTorch's "
                        "GELU)", val);
        l->approx_tanh = !strcmp(val, "tanh");
        return 0;
    case K_FROM:
        r->from = 1;
        return add_ref(p, what, val, r);
    case K_NAME:
        if (!spec_name_ok(val))
            return perr(p, "invalid %s name '%s': use letters, digits and _ with dots between "
                        "parts (a PyTorch module path like layer1.0.conv1), at most %d characters",
                        k->word, val, CDL_NAME_MAX - 1);
        snprintf(l->name, sizeof l->name, "%s", val);
        return 0;
    }
    return unknown_key(p, k, key);
}

static int parse_layer(const parser *p, char **w, int nw, cdl_layer_spec *l, refs *r)
{
    const struct kind_info *k = find_kind(w[0]);
    if (!k)
        return perr(p, "unknown layer '%s': use input, block, use, gpt, conv2d, maxpool2d, "
                    "avgpool2d, linear, relu, flatten, dropout, add, concat, batchnorm2d, "
                    "globalavgpool, gelu, silu, sigmoid, tanh, leakyrelu, embedding, "
                    "posembedding, layernorm or attention", w[0]);
    memset(l, 0, sizeof *l);
    memset(r, 0, sizeof *r);
    l->kind = k->kind;
    l->bias = 1;
    l->stride = k->kind == CDL_LAYER_CONV2D ? 1 : 0;   /* pools: 0 = the kernel size */
    l->momentum = 0.1f;
    l->eps = 1e-5f;
    l->slope = 0.01f;
    l->line = p->line;

    int npos = 0;
    unsigned seen = 0;
    for (int i = 1; i < nw; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq) {
            if (npos == k->npos)
                return perr(p, "unexpected '%s': write '%s'", w[i], k->usage);
            if (parse_positional(p, k, npos, w[i], l, r))
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
        if (parse_key(p, k, bit, key, val, l, r))
            return -1;
    }
    if (k->npos < 0 && npos == 0)
        return perr(p, "%s needs the layers it joins: write '%s'", k->word, k->usage);
    if (npos < k->npos)
        return perr(p, "%s is missing its %s: write '%s'", k->word,
                    k->kind == CDL_LAYER_DROPOUT ? "probability"
                    : k->kind == CDL_LAYER_MAXPOOL2D || k->kind == CDL_LAYER_AVGPOOL2D
                        ? "kernel size"
                    : k->npos == 2 ? "sizes" : "output size",
                    k->usage);
    if (k->kind == CDL_LAYER_ATTENTION && !(seen & K_HEADS))
        return perr(p, "attention needs heads=H, e.g. 'attention heads=4'");
    if (k->kind == CDL_LAYER_LINEAR && l->out == 0 && !r->tie[0])
        return perr(p, "linear output size 0 is out of range: use 1 to %d (0 only with tie=, "
                    "for the vocabulary of the data)", SPEC_MAX_FEATURES);
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

/* A block: its parameters (with defaults, "" = required) and its lines. */
typedef struct block_def {
    char name[WORD_MAX];
    int nparams, line, first, nlines;
    char param[MAX_BLOCK_PARAMS][WORD_MAX];
    char def[MAX_BLOCK_PARAMS][WORD_MAX];
} block_def;

typedef struct body_line {
    const char *text;
    size_t len;
    int line;
} body_line;

/* Where names are looked up and made: the top level, or one use of a block
 * (its layers are [first, ...), its input the layer before them). */
typedef struct scope {
    const char *prefix;       /* NULL at the top level */
    int first;
    int count[SPEC_AUTO_KINDS];   /* automatic names made: conv, fc, bn, emb, pos, ln */
} scope;

typedef struct pctx {
    parser p;
    cdl_model_spec *spec;
    block_def blocks[MAX_BLOCKS];
    int nblocks, nbody, defining;   /* defining: the open block, or -1 */
    body_line body[MAX_BODY_LINES];
    scope top;
    char *gpt_text;           /* a gpt line's expansion (block bodies point into it) */
    int gpt_done;             /* the gpt line is read: it was the whole model */
} pctx;

static int ident_ok(const char *s)
{
    if (!s[0] || strlen(s) >= WORD_MAX || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

/* The layer `name` refers to from layer `at` in scope sc; -1 is the input. */
static int lookup(pctx *c, const scope *sc, const char *name, int *out)
{
    const cdl_model_spec *spec = c->spec;
    int at = spec->nlayers;
    if (!strcmp(name, "input")) {
        *out = sc->first - 1;
        return 0;
    }
    char full[2 * CDL_NAME_MAX];
    snprintf(full, sizeof full, "%s%s%s", sc->prefix ? sc->prefix : "", sc->prefix ? "." : "",
             name);
    for (int i = at - 1; i >= sc->first; i--)
        if (!strcmp(spec->layers[i].name, full)) {
            *out = i;
            return 0;
        }
    /* The error lists the names this line could use (the last few). */
    int named[LIST_NAMES], shown = 0, more = 0;
    for (int i = at - 1; i >= sc->first; i--) {
        if (!spec->layers[i].name[0])
            continue;
        if (shown == LIST_NAMES) {
            more = 1;
            break;
        }
        named[shown++] = i;
    }
    char list[LIST_NAMES * (CDL_NAME_MAX + 2) + 16] = "input";
    size_t plen = sc->prefix ? strlen(sc->prefix) + 1 : 0;
    for (int k = shown - 1; k >= 0; k--) {
        strcat(list, ", ");
        strcat(list, spec->layers[named[k]].name + plen);
    }
    return perr(&c->p, "no layer '%s' before this line%s: %s%s%s", name,
                sc->prefix ? " in this block" : "", more ? "the last names are " : "it can use ",
                list, more ? " (and earlier ones)" : "");
}

/* Parses one layer line and appends it in scope sc. */
static int add_layer(pctx *c, scope *sc, char **w, int nw)
{
    cdl_model_spec *spec = c->spec;
    if (spec->nlayers == CDL_MAX_LAYERS)
        return perr(&c->p, "more than %d layers: cdl models have at most %d", CDL_MAX_LAYERS,
                    CDL_MAX_LAYERS);
    int i = spec->nlayers;
    cdl_layer_spec *l = &spec->layers[i];
    refs r;
    if (parse_layer(&c->p, w, nw, l, &r))
        return -1;
    if (!strcmp(l->name, "input"))
        return perr(&c->p, "'input' is the name of the model's (or a block's) input: give the "
                    "layer another name=");
    /* Automatic names: convK, fcK, bnK for the K-th of its kind in the scope. */
    int which = spec_auto_kind(l->kind);
    if (which >= 0) {
        int k = ++sc->count[which];
        if (!l->name[0]) {
            snprintf(l->name, sizeof l->name, "%s%d", spec_auto_stem[which], k);
            l->auto_name = 1;
        }
    }
    if (sc->prefix && l->name[0]) {
        char full[2 * CDL_NAME_MAX];
        snprintf(full, sizeof full, "%s.%s", sc->prefix, l->name);
        if (strlen(full) >= CDL_NAME_MAX)
            return perr(&c->p, "the name '%s' is longer than %d characters: use a shorter prefix "
                        "or layer name", full, CDL_NAME_MAX - 1);
        snprintf(l->name, sizeof l->name, "%s", full);
    }
    l->use_line = c->p.use_line;
    int in[CDL_MAX_INPUTS];
    for (int j = 0; j < r.n; j++)
        if (lookup(c, sc, r.name[j], &in[j]))
            return -1;
    if (r.tie[0]) {
        int t;
        if (lookup(c, sc, r.tie, &t))
            return -1;
        if (t < 0 || spec->layers[t].kind != CDL_LAYER_EMBEDDING)
            return perr(&c->p, "tie=%s: a linear ties its weight to an embedding layer, and %s is "
                        "%s", r.tie, r.tie, t < 0 ? "the input" : spec_kind_name(spec->layers[t].kind));
        l->tie = t + 1;
    }
    if (r.from) {
        l->nin = 1;
        l->in[0] = in[0];
    } else if (r.n == 1) {   /* add X: the previous line + X */
        l->nin = 2;
        l->in[0] = i - 1;
        l->in[1] = in[0];
    } else if (r.n > 1) {
        l->nin = r.n;
        memcpy(l->in, in, sizeof(int) * (size_t)r.n);
    }
    spec->nlayers++;
    return 0;
}

/* "block NAME PARAM PARAM=DEFAULT ...": the lines up to "end" are stored. */
static int begin_block(pctx *c, char **w, int nw)
{
    if (nw < 2)
        return perr(&c->p, "block needs a name: write 'block NAME [PARAM ...]', its lines, then "
                    "'end'");
    if (!ident_ok(w[1]) || find_kind(w[1]))
        return perr(&c->p, "invalid block name '%s': use letters, digits and _ (not a layer "
                    "word), at most %d characters", w[1], WORD_MAX - 1);
    for (int b = 0; b < c->nblocks; b++)
        if (!strcmp(c->blocks[b].name, w[1]))
            return perr(&c->p, "block '%s' is already defined at line %d: give this one another "
                        "name", w[1], c->blocks[b].line);
    if (c->nblocks == MAX_BLOCKS)
        return perr(&c->p, "more than %d blocks in one spec", MAX_BLOCKS);
    if (nw - 2 > MAX_BLOCK_PARAMS)
        return perr(&c->p, "block '%s' has more than %d parameters", w[1], MAX_BLOCK_PARAMS);
    block_def *b = &c->blocks[c->nblocks];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", w[1]);
    b->line = c->p.line;
    b->first = c->nbody;
    for (int i = 2; i < nw; i++) {
        char *eq = strchr(w[i], '=');
        if (eq)
            *eq = '\0';
        if (!ident_ok(w[i]))
            return perr(&c->p, "invalid block parameter '%s': use letters, digits and _ (not first "
                        "a digit), e.g. 'block basic PLANES STRIDE=1'", w[i]);
        if (eq && (!eq[1] || strlen(eq + 1) >= WORD_MAX || strchr(eq + 1, '$')))
            return perr(&c->p, "parameter %s has an invalid default '%s'", w[i], eq + 1);
        for (int j = 0; j < b->nparams; j++)
            if (!strcmp(b->param[j], w[i]))
                return perr(&c->p, "parameter %s is given twice: keep one", w[i]);
        snprintf(b->param[b->nparams], WORD_MAX, "%s", w[i]);
        snprintf(b->def[b->nparams], WORD_MAX, "%s", eq ? eq + 1 : "");
        b->nparams++;
    }
    c->defining = c->nblocks++;
    return 0;
}

/* "PLANES, STRIDE" (or "no parameters") into buf, for errors. */
static const char *param_list(const block_def *b, char *buf)
{
    buf[0] = '\0';
    for (int j = 0; j < b->nparams; j++) {
        strcat(buf, j ? ", " : "");
        strcat(buf, b->param[j]);
    }
    return b->nparams ? buf : "no parameters";
}
#define PARAM_LIST_MAX (MAX_BLOCK_PARAMS * (WORD_MAX + 2) + 16)

/* Copies src into dst replacing each $PARAM by its value. */
static int substitute(pctx *c, const block_def *b, char vals[][WORD_MAX], const char *src,
                      char *dst)
{
    size_t n = 0;
    for (const char *s = src; *s;) {
        const char *piece = s;
        size_t plen = 1;
        if (*s == '$') {
            size_t k = 1;
            while ((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
                   (s[k] >= '0' && s[k] <= '9') || s[k] == '_')
                k++;
            int found = -1;
            for (int j = 0; j < b->nparams; j++)
                if (strlen(b->param[j]) == k - 1 && !strncmp(b->param[j], s + 1, k - 1))
                    found = j;
            if (found < 0) {
                char params[PARAM_LIST_MAX];
                return perr(&c->p, "unknown parameter '%.*s' in block %s: it has %s", (int)k, s,
                            b->name, param_list(b, params));
            }
            piece = vals[found];
            plen = strlen(piece);
            s += k;
        } else {
            s++;
        }
        if (n + plen >= LINE_CHARS)
            return perr(&c->p, "the line is longer than %d characters with its parameters",
                        LINE_CHARS - 1);
        memcpy(dst + n, piece, plen);
        n += plen;
    }
    dst[n] = '\0';
    return 0;
}

/* "use BLOCK ARG ... [PARAM=VALUE ...] name=PREFIX": the block's lines with
 * their parameters filled in, named PREFIX.NAME. */
static int use_block(pctx *c, char **w, int nw)
{
    if (nw < 2)
        return perr(&c->p, "use needs a block: write 'use BLOCK ARGS name=PREFIX'");
    block_def *b = NULL;
    for (int i = 0; i < c->nblocks; i++)
        if (!strcmp(c->blocks[i].name, w[1]))
            b = &c->blocks[i];
    if (!b) {
        char names[MAX_BLOCKS * (WORD_MAX + 2) + 8] = "";
        for (int i = 0; i < c->nblocks; i++) {
            strcat(names, i ? ", " : "");
            strcat(names, c->blocks[i].name);
        }
        return perr(&c->p, "unknown block '%s': define it before with 'block %s ...' and 'end'%s%s",
                    w[1], w[1], c->nblocks ? "; defined blocks: " : "", names);
    }
    char vals[MAX_BLOCK_PARAMS][WORD_MAX], prefix[CDL_NAME_MAX] = "";
    int given[MAX_BLOCK_PARAMS] = {0}, npos = 0;
    for (int i = 2; i < nw; i++) {
        char *eq = strchr(w[i], '=');
        int j = npos;
        const char *val = w[i];
        if (eq) {
            *eq = '\0';
            val = eq + 1;
            if (!strcmp(w[i], "name")) {
                if (prefix[0])
                    return perr(&c->p, "name= is given twice: keep one");
                if (!spec_name_ok(val) || !strcmp(val, "input"))
                    return perr(&c->p, "invalid block name '%s': use a PyTorch module path like "
                                "layer1.0, at most %d characters", val, CDL_NAME_MAX - 1);
                snprintf(prefix, sizeof prefix, "%s", val);
                continue;
            }
            for (j = 0; j < b->nparams && strcmp(b->param[j], w[i]); j++)
                ;
            char params[PARAM_LIST_MAX];
            if (j == b->nparams)
                return perr(&c->p, "block %s has no parameter '%s': it has %s", b->name, w[i],
                            param_list(b, params));
        } else if (npos++ >= b->nparams) {
            return perr(&c->p, "unexpected '%s': block %s takes %d argument%s", w[i], b->name,
                        b->nparams, b->nparams == 1 ? "" : "s");
        }
        if (given[j])
            return perr(&c->p, "parameter %s is given twice: keep one", b->param[j]);
        if (!val[0] || strlen(val) >= WORD_MAX || strchr(val, '$') || strchr(val, '#'))
            return perr(&c->p, "invalid value '%s' for parameter %s", val, b->param[j]);
        given[j] = 1;
        snprintf(vals[j], WORD_MAX, "%s", val);
    }
    for (int j = 0; j < b->nparams; j++) {
        if (given[j])
            continue;
        if (!b->def[j][0])
            return perr(&c->p, "block %s needs a value for %s: write 'use %s ARGS name=PREFIX' "
                        "with its %d parameter%s in order", b->name, b->param[j], b->name,
                        b->nparams, b->nparams == 1 ? "" : "s");
        snprintf(vals[j], WORD_MAX, "%s", b->def[j]);
    }
    if (!prefix[0])
        return perr(&c->p, "use %s needs name=PREFIX, the PyTorch module path of this copy (e.g. "
                    "name=layer1.0): its layers are named PREFIX.conv1, ...", b->name);

    scope sc = {.prefix = prefix, .first = c->spec->nlayers};
    parser saved = c->p;
    c->p.use_line = saved.line;
    c->p.prefix = prefix;
    c->p.block = b->name;
    int rc = 0;
    for (int k = 0; k < b->nlines && !rc; k++) {
        const body_line *bl = &c->body[b->first + k];
        char raw[LINE_CHARS], buf[LINE_CHARS], *lw[MAX_WORDS];
        c->p.line = bl->line;
        memcpy(raw, bl->text, bl->len);
        raw[bl->len] = '\0';
        char *hash = strchr(raw, '#');
        if (hash)
            *hash = '\0';
        rc = substitute(c, b, vals, raw, buf);
        int n = rc ? -1 : split_words(&c->p, buf, lw);
        rc = n < 0 ? -1 : add_layer(c, &sc, lw, n);
    }
    c->p = saved;
    return rc;
}

static int spec_line(pctx *c, const char *text, size_t len, char **w, int nw);

/* "gpt KEY=VALUE ...": nanoGPT's GPT (builtin.c writes its lines), read
 * here line by line as if the file held them; errors name the gpt line. */
static int gpt_line(pctx *c, char **w, int nw)
{
    char where[300];
    if (c->gpt_text)
        return perr(&c->p, "a second gpt line: a spec holds one gpt model");
    if (c->spec->nlayers)
        return perr(&c->p, "the gpt line must come before any layer: it is the whole model");
    snprintf(where, sizeof where, "%s:%d", c->p.file, c->p.line);
    c->gpt_text = cdl_malloc(SPEC_GPT_TEXT);
    if (!c->gpt_text || spec_gpt_text(w + 1, nw - 1, where, 0, 0, c->gpt_text, SPEC_GPT_TEXT))
        return -1;
    for (const char *s = c->gpt_text; *s;) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        char buf[LINE_CHARS], *lw[MAX_WORDS];
        memcpy(buf, s, len);
        buf[len] = '\0';
        const char *line_text = s;
        s += len + (eol != NULL);
        int n = split_words(&c->p, buf, lw);
        if (n < 0 || (n > 0 && spec_line(c, line_text, len, lw, n)))
            return -1;
    }
    c->gpt_done = 1;
    return 0;
}

/* One line of the file, split into words. */
static int spec_line(pctx *c, const char *text, size_t len, char **w, int nw)
{
    cdl_model_spec *spec = c->spec;
    if (c->defining >= 0) {
        block_def *b = &c->blocks[c->defining];
        if (!strcmp(w[0], "end")) {
            if (nw > 1)
                return perr(&c->p, "unexpected '%s' after end", w[1]);
            if (!b->nlines)
                return perr(&c->p, "block %s has no lines: put its layers between 'block' and "
                            "'end'", b->name);
            c->defining = -1;
            return 0;
        }
        if (!strcmp(w[0], "block") || !strcmp(w[0], "use") || !strcmp(w[0], "input"))
            return perr(&c->p, "'%s' inside block %s (line %d): blocks hold layers only; close it "
                        "with 'end' first", w[0], b->name, b->line);
        if (c->nbody == MAX_BODY_LINES)
            return perr(&c->p, "more than %d lines in blocks", MAX_BODY_LINES);
        c->body[c->nbody++] = (body_line){text, len, c->p.line};
        b->nlines++;
        return 0;
    }
    if (!strcmp(w[0], "block"))
        return begin_block(c, w, nw);
    if (!strcmp(w[0], "end"))
        return perr(&c->p, "'end' without a block: blocks start with 'block NAME ...'");
    /* Layers after it would follow lm_head: another model than nanoGPT's,
     * which its checkpoint would no longer load into. */
    if (c->gpt_done && strcmp(w[0], "gpt") && strcmp(w[0], "input"))
        return perr(&c->p, "a layer after the gpt line, which is the whole model (it ends at "
                    "lm_head): to change the model, write its layers out instead "
                    "(docs/model-spec.md gives the gpt line's spec)");
    if (!strcmp(w[0], "use"))
        return use_block(c, w, nw);
    if (!strcmp(w[0], "gpt"))
        return gpt_line(c, w, nw);
    if (!strcmp(w[0], "input")) {
        if (spec->input.c)
            return perr(&c->p, "a second input line: give the input shape once");
        if (spec->nlayers)
            return perr(&c->p, "the input line must come before the first layer");
        return parse_input(&c->p, w, nw, &spec->input);
    }
    for (int i = 1; i < nw; i++)
        if (strchr(w[i], '$'))
            return perr(&c->p, "'%s' outside a block: $PARAM is filled in only in the lines of a "
                        "'block NAME PARAM ...' that a 'use NAME VALUE' copies", w[i]);
    return add_layer(c, &c->top, w, nw);
}

int cdl_spec_parse(const char *text, const char *filename, cdl_model_spec *out)
{
    const char *file = filename && *filename ? filename : "<model spec>";
    if (!text)
        return cdl_error("%s: no spec text given", file);
    if (!out)
        return cdl_error("cdl_spec_parse: out is NULL");
    /* Both are large (a spec holds CDL_MAX_LAYERS layers): not on the stack. */
    pctx *c = cdl_calloc(1, sizeof *c);
    cdl_model_spec *spec = cdl_calloc(1, sizeof *spec);
    int rc = -1;
    if (!c || !spec)
        goto done;
    c->p.file = file;
    c->spec = spec;
    c->defining = -1;
    snprintf(spec->source, sizeof spec->source, "%s", file);

    for (const char *s = text; *s;) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        c->p.line++;
        char buf[LINE_CHARS], *w[MAX_WORDS];
        if (len >= sizeof buf) {
            perr(&c->p, "line is longer than %d characters: one layer per line", LINE_CHARS - 1);
            goto done;
        }
        memcpy(buf, s, len);
        buf[len] = '\0';
        const char *line_text = s;
        s += len + (eol != NULL);

        int nw = split_words(&c->p, buf, w);
        if (nw < 0)
            goto done;
        if (nw > 0 && spec_line(c, line_text, len, w, nw))
            goto done;
    }
    if (c->defining >= 0) {
        cdl_error("%s:%d: block %s has no 'end': close it after its last layer", file,
                  c->blocks[c->defining].line, c->blocks[c->defining].name);
        goto done;
    }
    if (spec->nlayers == 0) {
        cdl_error("%s: the spec has no layers: write one layer per line, e.g. 'linear 10'", file);
        goto done;
    }
    if (spec_finish_names(spec))
        goto done;
    *out = *spec;
    rc = 0;
done:
    cdl_free(spec);
    if (c)
        cdl_free(c->gpt_text);
    cdl_free(c);
    return rc;
}

int cdl_spec_read(const char *path, char **text_out)
{
    if (!text_out)
        return cdl_error("cdl_spec_read: text is NULL");
    *text_out = NULL;
    if (!path || !*path)
        return cdl_error("cdl_spec_read: no model spec path given: name a spec file");
    /* O_NONBLOCK: a FIFO without a writer (a mistyped path, a finished
     * process substitution) would block open() for ever, and the harness
     * catches SIGTERM; what is not a regular file is refused below. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        int dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
        close(fd);
        return cdl_error("model spec '%s' is not a regular file (%s): name a spec file", path,
                         dir ? "a directory" : "a FIFO, device or socket");
    }
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (!f) {
        /* "lenet:stem=cifar": a built-in's name with options it does not take. */
        static const char *const plain[] = {"lenet", "mlp", "resnet20"};
        for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
            size_t n = strlen(plain[i]);
            if (errno == ENOENT && !strncmp(path, plain[i], n) && path[n] == ':')
                return cdl_error("model %s: the built-in %s takes no options (drop '%s'); "
                                 "resnet18/34/50/101 take stem=, gpt its sizes", path, plain[i],
                                 path + n);
        }
        return cdl_error("cannot open model spec '%s': %s: check the path (or use a built-in: "
                         "lenet, mlp, resnet20, resnet18, resnet34, resnet50, resnet101, gpt)",
                         path, strerror(errno));
    }
    char *text = cdl_malloc(SPEC_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return -1;
    }
    size_t n = fread(text, 1, SPEC_FILE_MAX + 1, f);
    int bad = ferror(f), err = errno;
    fclose(f);
    if (bad)
        cdl_error("cannot read model spec '%s': %s", path, strerror(err));
    else if (n > SPEC_FILE_MAX)
        cdl_error("model spec '%s' is larger than %ld bytes: is it really a spec file?", path,
                  SPEC_FILE_MAX);
    else if (memchr(text, '\0', n))
        cdl_error("model spec '%s' contains a NUL byte: it must be a text file", path);
    else {
        text[n] = '\0';
        *text_out = text;
        return 0;
    }
    cdl_free(text);
    return -1;
}

int cdl_spec_load(const char *path, cdl_model_spec *out)
{
    char *text;
    if (cdl_spec_read(path, &text) != 0)
        return -1;
    int rc = cdl_spec_parse(text, path, out);
    cdl_free(text);
    return rc;
}
