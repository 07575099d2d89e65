/* cdl-generate: text (or token ids) from a language model trained by
 * cdl-train: the prompt, then tokens drawn one at a time from the model's
 * next-token distribution (sample.h), each fed back as input. Text is
 * bytes for a byte-level model, the strings of nanoGPT's itos table for a
 * character-level one trained on tokens:DIR with a meta.pkl (vocab.h),
 * else the output is token ids.
 *
 * The model was built for windows of T tokens (the checkpoint's
 * input_shape, {c = T, h = 1, w = 1}). A context shorter than T is padded
 * after its end: attention is causal, so position t's logits depend on
 * positions <= t only and the padding changes nothing; a longer one keeps
 * its last T tokens, as nanoGPT's sample.py does.
 *
 * Exit status: 0 done, 1 an error, 2 a bad option. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_core.h"
#include "libcheck.h"
#include "evalcommon.h"
#include "sample.h"
#include "vocab.h"

#define PROG "cdl-generate"

enum { OPT_PROMPT = 256, OPT_PROMPT_TOKENS, OPT_MAX_TOKENS, OPT_TEMPERATURE, OPT_TOPK, OPT_SEED,
       OPT_DEVICE, OPT_TF32, OPT_VERSION };

static const struct option long_opts[] = {
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"top-k", required_argument, NULL, OPT_TOPK},
    {"seed", required_argument, NULL, OPT_SEED},
    {"model", required_argument, NULL, 'm'},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"tf32", required_argument, NULL, OPT_TF32},
    {"threads", required_argument, NULL, 't'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: cdl-generate CHECKPOINT [--prompt TEXT] [OPTION]...\n"
"Continue a prompt with a language model trained by cdl-train (--model gpt):\n"
"print the prompt and up to N tokens drawn one at a time from the model.\n"
"A byte-level model (vocabulary 256, trained on text:FILE) reads and writes\n"
"text, and so does one trained on tokens:DIR with nanoGPT's meta.pkl (its\n"
"itos table: character-level); another (GPT-2 BPE .bin data) cannot\n"
"tokenize text, so it takes --prompt-tokens and prints token ids.\n"
"\n"
"      --prompt TEXT        the text to continue [a line break]\n"
"      --prompt-tokens IDS  the prompt as comma-separated token ids (1,2,3)\n"
"      --max-tokens N       tokens to generate [256]\n"
"      --temperature T      divides the logits; 0 = always the likeliest\n"
"                           token [0.8]\n"
"      --top-k K            draw among the K likeliest tokens only [0: all]\n"
"      --seed S             the draws' seed: same seed, same text [1]\n"
"  -m, --model NAME|FILE    the model [the checkpoint's]\n"
"      --device cpu|cuda|auto  [auto]\n"
EVAL_USAGE_TF32
"  -t, --threads N          compute threads [all]\n"
"  -h, --help    --version\n");
}

typedef struct gen {
    eval_opts o;
    cdl_backend *be;
    cdl_model *model;
    int T, vocab, positions;
    int text;                 /* byte-level or itos: the prompt and the output are text */
    char **itos;              /* vocab strings (nanoGPT's meta.pkl, from the checkpoint), or NULL */
    float *x, *x_dev, *row;
    double *scratch;
} gen;

/* The rows of the 2-D tensor whose name ends in suffix (nanoGPT's names,
 * which the gpt built-in and specs following it use), or 0. */
static int tensor_rows(const cdl_st_file *f, const char *suffix)
{
    for (int i = 0; i < cdl_st_count(f); i++) {
        const char *name = cdl_st_name(f, i);
        size_t n = strlen(name), k = strlen(suffix);
        int ndim;
        int64_t shape[8];
        if (n >= k && !strcmp(name + n - k, suffix) &&
            cdl_st_shape(f, i, &ndim, shape) == 0 && ndim == 2 && shape[0] > 0 &&
            shape[0] < (1 << 24))
            return (int)shape[0];
    }
    return 0;
}

/* The vocabulary: the rows of the token embedding, else the "classes"
 * metadata (per position for a language model). */
static int find_vocab(const cdl_st_file *f, const char *ckpt)
{
    int rows = tensor_rows(f, "wte.weight");
    if (rows > 0)
        return rows;
    long classes = eval_meta_long(f, "classes");
    if (classes > 0 && classes < (1 << 24))
        return (int)classes;
    return cdl_error("%s has no token embedding (transformer.wte.weight) and no \"classes\" "
                     "metadata: cdl-generate needs a language model (cdl-train --model gpt "
                     "--dataset text:FILE)", ckpt);
}

static int gen_open(gen *g)
{
    cdl_rank_info ri = {.rank = 0, .world = 1};
    g->be = eval_backend(&g->o, &ri);
    if (!g->be)
        return -1;
    cdl_st_file *f = cdl_st_open(g->o.ckpt);
    if (!f)
        return -1;
    /* A newer cdl's checkpoint: its metadata may mean something else. */
    if (cdl_ckpt_check_format(f) != 0) {
        cdl_st_close(f);
        return -1;
    }
    cdl_shape in = {0, 1, 1};
    const char *shape = cdl_st_meta_get(f, "input_shape");
    int rc = -1;
    /* A GPT that PyTorch saved has no metadata: its window is its block,
     * the --model's block_size, else the rows of its position table. */
    int window = 0;
    if (!shape && g->o.model) {
        in.c = cdl_spec_block_size(g->o.model);
        if (in.c <= 0)
            in.c = tensor_rows(f, "wpe.weight");
        window = in.c > 0;
    }
    if (!window && (!shape || sscanf(shape, "%d,%d,%d", &in.c, &in.h, &in.w) != 3 ||
                    in.c < 1 || in.h != 1 || in.w != 1))
        cdl_error("%s: input_shape '%.40s' is not a token window (T,1,1): cdl-generate needs a "
                  "language model trained by cdl-train (--model gpt --dataset text:FILE), or "
                  "a GPT PyTorch saved with its --model gpt:...", g->o.ckpt,
                  shape ? shape : "(none)");
    else if ((g->vocab = find_vocab(f, g->o.ckpt)) > 0)
        rc = 0;
    g->T = in.c;
    /* Bytes unless the run read uint16 ids ("tokens" metadata of token
     * data) or the vocabulary is larger than bytes. A file without that
     * metadata (a GPT PyTorch saved) is bytes only with the 256 of bytes:
     * a smaller vocabulary is a corpus' own ids (nanoGPT's character-level
     * data numbers its 65 symbols 0..64), which as bytes would print
     * control characters for text and refuse "ROMEO:" ('R' is 82). */
    const char *kind = cdl_st_meta_get(f, "tokens");
    g->text = kind ? g->vocab <= 256 && strcmp(kind, "uint16") != 0 : g->vocab == 256;
    /* A character-level corpus (meta.pkl): its ids are the itos strings. */
    const char *itos = cdl_st_meta_get(f, "itos");
    if (rc == 0 && itos && vocab_parse(itos, g->vocab, &g->itos) != 0)
        rc = cdl_error("%s: %s", g->o.ckpt, cdl_last_error());
    if (g->itos)
        g->text = 1;
    if (rc == 0)
        g->model = eval_model(&g->o, f, in, g->o.batch_size, g->vocab, g->be);
    cdl_st_close(f);
    if (rc != 0 || !g->model)
        return -1;
    int outputs = cdl_model_outputs(g->model);
    g->positions = cdl_model_positions(g->model);
    if (outputs != g->positions * g->vocab || (g->positions != 1 && g->positions != g->T))
        return cdl_error("%s: the model has %d outputs at %d positions of a %d-token window, "
                         "not one row of the vocabulary (%d) per position: is it a language "
                         "model?", g->o.ckpt, outputs, g->positions, g->T, g->vocab);
    g->x = cdl_calloc((size_t)g->T, sizeof *g->x);
    g->row = cdl_malloc((size_t)g->vocab * sizeof *g->row);
    g->scratch = cdl_malloc(2 * (size_t)g->vocab * sizeof *g->scratch);
    if (!g->x || !g->row || !g->scratch)
        return -1;
    if (!g->be->host_memory &&
        !(g->x_dev = g->be->ops->alloc(g->be, (size_t)g->T * sizeof *g->x)))
        return -1;
    return 0;
}

static void gen_close(gen *g)
{
    if (g->be && g->x_dev)
        g->be->ops->free(g->be, g->x_dev);
    cdl_free(g->x);
    cdl_free(g->row);
    cdl_free(g->scratch);
    cdl_free(g->itos);
    cdl_model_destroy(g->model);
    if (g->be)
        cdl_backend_destroy(g->be);
}

/* The logits (vocab) of the position after ctx (len tokens, len >= 1) into
 * g->row. */
static int next_logits(gen *g, const int *ctx, int len)
{
    int w = len < g->T ? len : g->T;
    const int *win = ctx + (len - w);
    for (int i = 0; i < g->T; i++)
        g->x[i] = i < w ? (float)win[i] : 0.0f;
    cdl_backend *be = g->be;
    const float *x = g->x;
    if (g->x_dev) {
        be->ops->to_device(be, g->x_dev, g->x, (size_t)g->T * sizeof *g->x);
        x = g->x_dev;
    }
    const float *logits = cdl_model_forward(g->model, x, 1, 0, 0);
    if (!logits)
        return -1;
    size_t at = g->positions > 1 ? (size_t)(w - 1) * g->vocab : 0;
    be->ops->to_host(be, g->row, logits + at, (size_t)g->vocab * sizeof *g->row);
    return be->ops->sync(be);
}

/* Token t as output: its itos string, a byte in text mode, ",id" (the
 * first without a comma) in token mode. 1 when the output now ends a line. */
static int put_token(const gen *g, int t, int first)
{
    if (g->itos) {
        fputs(g->itos[t], stdout);
        return g->itos[t][strlen(g->itos[t]) - 1] == '\n';
    }
    if (g->text)
        putchar(t);
    else
        printf(first ? "%d" : ",%d", t);
    return g->text && t == '\n';
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !(v >= lo && v <= hi)) {
        fprintf(stderr, PROG ": --%s '%.80s': expected a number from %g to %g (see " PROG
                " --help)\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    cli_fix_blas_core(argv);
    if (cli_check_libcdl(PROG, argv) != 0)
        return 2;
    gen g = {.o = {.prog = PROG, .device = "auto", .batch_size = 1}};
    const char *prompt = NULL, *prompt_tokens = NULL;
    int max_tokens = 256, top_k = 0;
    double temperature = 0.8;
    unsigned long long seed = 1;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:t:h", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_PROMPT: prompt = optarg; break;
        case OPT_PROMPT_TOKENS: prompt_tokens = optarg; break;
        case OPT_MAX_TOKENS:
            if (eval_parse_int(PROG, "max-tokens", optarg, 0, 1 << 24, &max_tokens))
                return 2;
            break;
        case OPT_TEMPERATURE:
            if (parse_double("temperature", optarg, 0, 100, &temperature))
                return 2;
            break;
        case OPT_TOPK:
            if (eval_parse_int(PROG, "top-k", optarg, 0, 1 << 24, &top_k))
                return 2;
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (end == optarg || *end || errno == ERANGE || optarg[0] == '-') {
                fprintf(stderr, PROG ": --seed '%.80s': expected a non-negative integer\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'm': g.o.model = optarg; break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
                fprintf(stderr, PROG ": --device '%.80s': expected cpu, cuda or auto\n", optarg);
                return 2;
            }
            g.o.device = optarg;
            break;
        case OPT_TF32:
            if (eval_parse_tf32(PROG, optarg, &g.o.tf32))
                return 2;
            break;
        case 't':
            if (eval_parse_int(PROG, "threads", optarg, 1, 1024, &g.o.threads))
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        case OPT_VERSION:
            printf(PROG " (cdl) %s\n", cdl_version());
            if (*cdl_build_id())   /* which build of that version, as cdl-train says */
                printf("libcdl build %s\n", cdl_build_id());
            return 0;
        case ':':
            fprintf(stderr, PROG ": option '%.80s' needs a value (see " PROG " --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, PROG ": unknown option '%.80s' (see " PROG " --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, PROG ": give a checkpoint (see " PROG " --help)\n");
        return 2;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, PROG ": one checkpoint only; '%.80s' is extra (a prompt goes after "
                "--prompt)\n", argv[optind + 1]);
        return 2;
    }
    if (prompt && prompt_tokens) {
        fprintf(stderr, PROG ": --prompt and --prompt-tokens exclude each other: give one\n");
        return 2;
    }
    g.o.ckpt = argv[optind];
    /* Started as one of several ranks (srun in a multi-task job, cdlrun
     * -n N): each would print the same text, interleaved. Rank 0 writes it;
     * the others have nothing to do. */
    if (eval_rank0_only(PROG, "the text"))
        return 0;
    int *ctx = NULL, n = 0;
    int rc = gen_open(&g);
    int text = g.text;
    if (rc == 0 && prompt_tokens) {
        int *ids;
        rc = sample_parse_tokens(prompt_tokens, g.vocab, &ids, &n);
        if (rc == 0 && !(ctx = cdl_malloc(((size_t)n + max_tokens) * sizeof *ctx)))
            rc = -1;
        if (rc == 0)
            memcpy(ctx, ids, (size_t)n * sizeof *ctx);
        cdl_free(ids);
    } else if (rc == 0 && g.itos) {
        /* nanoGPT's sample.py: encode = [stoi[c] for c in s]. */
        const char *p = prompt ? prompt : "\n";
        if (!*p)
            rc = cdl_error("--prompt is empty: give at least one character");
        int *ids = NULL;
        if (rc == 0 && vocab_encode(p, g.itos, g.vocab, &ids, &n) != 0)
            rc = prompt ? -1 : cdl_error("%s: the default prompt, a line break, is not in the "
                                         "model's vocabulary: give one with --prompt TEXT",
                                         cdl_last_error());
        if (rc == 0 && !(ctx = cdl_malloc(((size_t)n + max_tokens) * sizeof *ctx)))
            rc = -1;
        if (rc == 0)
            memcpy(ctx, ids, (size_t)n * sizeof *ctx);
        cdl_free(ids);
    } else if (rc == 0 && !text && prompt && g.vocab < 256) {
        rc = cdl_error("%s has a vocabulary of %d token ids and no itos table: cdl-generate "
                       "cannot tokenize text; give the prompt as token ids with "
                       "--prompt-tokens 1,2,3 and it prints token ids, or, for nanoGPT's "
                       "character-level data, write the file with the corpus' meta.pkl: "
                       "nanogpt_ckpt.py to-cdl ckpt.pt FILE --meta DIR/meta.pkl "
                       "(docs/transformers.md)", g.o.ckpt, g.vocab);
    } else if (rc == 0 && !text && prompt) {
        rc = cdl_error("%s has a vocabulary of %d tokens (GPT-2 BPE or another tokenizer's "
                       ".bin data): cdl-generate cannot tokenize text; give the prompt as "
                       "token ids with --prompt-tokens 1,2,3 (for GPT-2: tiktoken's "
                       "encode) and it prints token ids", g.o.ckpt, g.vocab);
    } else if (rc == 0 && !text) {
        rc = cdl_error("%s was trained on token ids (a vocabulary of %d, not bytes): give the "
                       "prompt as token ids with --prompt-tokens 1,2,3", g.o.ckpt, g.vocab);
    } else if (rc == 0) {
        /* Byte-level: each byte of the prompt is a token. */
        const char *p = prompt ? prompt : "\n";
        n = (int)strlen(p);
        if (n == 0)
            rc = cdl_error("--prompt is empty: give at least one character");
        else if (!(ctx = cdl_malloc(((size_t)n + max_tokens) * sizeof *ctx)))
            rc = -1;
        for (int i = 0; rc == 0 && i < n; i++) {
            ctx[i] = (unsigned char)p[i];
            if (ctx[i] >= g.vocab)
                rc = cdl_error("--prompt: byte %d (0x%02x) is outside the model's vocabulary of "
                               "%d", i, ctx[i], g.vocab);
        }
    }
    if (rc == 0) {
        rng_state r;
        rng_seed(&r, (uint64_t)seed);
        int line_end = 0;
        for (int i = 0; i < n; i++)
            line_end = put_token(&g, ctx[i], i == 0);
        for (int k = 0; rc == 0 && k < max_tokens; k++) {
            rc = next_logits(&g, ctx, n);
            /* NaN logits (a diverged run's weights) sample id 0 for ever:
             * NUL bytes, exit 0. */
            for (int v = 0; rc == 0 && v < g.vocab; v++)
                if (!isfinite(g.row[v]))
                    rc = cdl_error("%s: the logits for token %d are NaN or infinite (the "
                                   "weights of a run that diverged, or too large for "
                                   "float32): there is nothing to sample", g.o.ckpt, k + 1);
            if (rc == 0) {
                ctx[n] = sample_next(g.row, g.vocab, temperature, top_k, &r, g.scratch);
                line_end = put_token(&g, ctx[n], 0);
                n++;
                /* Text appears as it is made; stdout is line-buffered on a
                 * terminal only. */
                if (line_end)
                    fflush(stdout);
            }
        }
        if (rc == 0 && !line_end)
            putchar('\n');
        if (rc == 0 && fflush(stdout) != 0)
            rc = cdl_error("writing the text failed");
    }
    if (rc != 0)
        fprintf(stderr, PROG ": error: %s\n", cdl_last_error());
    cdl_free(ctx);
    gen_close(&g);
    return rc ? 1 : 0;
}
