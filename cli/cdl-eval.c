/* cdl-eval: evaluate a checkpoint on a dataset split: loss, accuracy,
 * top-5, per-class accuracy and the confusion matrix, as text or JSON; for
 * a language model (gpt) loss, perplexity and accuracy per token.
 * Under cdlrun or srun --cdl-ddp every rank takes a share of the samples
 * and rank 0 prints the summed result.
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

#define PROG "cdl-eval"

enum { OPT_JSON = EVAL_OPT_OWN };

static const struct option long_opts[] = {
    EVAL_LONG_OPTS,
    {"json", no_argument, NULL, OPT_JSON},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: cdl-eval CHECKPOINT [OPTION]...\n"
"Evaluate a checkpoint: loss, accuracy, top-5, per-class accuracy and the\n"
"confusion matrix. Runs data-parallel under cdlrun or srun --cdl-ddp.\n"
"\n"
EVAL_USAGE_DATA
"      --split test|val|train  which samples; val and train are split as the\n"
"                           training run did (its seed and validation count)\n"
"                           [test; val for a language model (token data has no\n"
"                           test) and for data without a test split]\n"
"  -m, --model NAME|FILE   lenet, mlp, resnet20, resnet18/34/50/101[:stem=...] or a spec\n"
"                           file\n"
"                           [the checkpoint's]\n"
"      --json               one JSON object instead of text\n"
EVAL_USAGE_RUN);
}

typedef struct sums {
    int classes;
    int confusion;   /* classifiers: v holds the confusion matrix too */
    double *v;       /* loss, correct, top5, n, not finite, then for a classifier
                        not finite[true] and confusion[true][pred] */
} sums;

enum { V_LOSS, V_CORRECT, V_TOP5, V_N, V_NONFINITE, V_FIXED };

/* A row of logits that holds a NaN or an infinity ranks nothing: NaN
 * compares false with everything, so the argmax said class 0 and top-5
 * counted every sample as a hit (top5 1.000 for a diverged model). */
static int all_finite(const float *z, int c)
{
    for (int k = 0; k < c; k++)
        if (!isfinite(z[k]))
            return 0;
    return 1;
}

/* n samples: one row of logits and one label each, or for a language
 * model `positions` of both per sample (labels below 0 are ignored, as in
 * training), every scored position counted as one. */
static int add_batch(void *ctx, const eval_ctx *e, long first, int n, const int32_t *y,
                     const float *logits)
{
    (void)first;
    sums *s = ctx;
    int c = e->classes;
    size_t rows = (size_t)n * (size_t)e->positions;
    for (size_t i = 0; i < rows; i++) {
        if (y[i] < 0)
            continue;
        const float *z = logits + i * (size_t)c;
        s->v[V_N] += 1;
        if (!all_finite(z, c)) {
            /* Never correct, in no confusion cell; the loss is not finite. */
            s->v[V_LOSS] = NAN;
            s->v[V_NONFINITE] += 1;
            if (s->confusion)
                s->v[V_FIXED + y[i]] += 1;
            continue;
        }
        int best = 0, above = 0;
        double mx = z[0];
        for (int k = 1; k < c; k++) {
            if (z[k] > z[best])
                best = k;
            if (z[k] > mx)
                mx = z[k];
        }
        double se = 0;
        for (int k = 0; k < c; k++) {
            se += exp((double)z[k] - mx);
            above += z[k] > z[y[i]];
        }
        s->v[V_LOSS] += mx + log(se) - (double)z[y[i]];
        s->v[V_CORRECT] += best == y[i];
        s->v[V_TOP5] += above < 5;
        if (s->confusion)
            s->v[V_FIXED + c + (size_t)y[i] * c + best] += 1;
    }
    return 0;
}

/* The samples whose logits are not finite, when there are any: wrong,
 * and why the confusion matrix holds fewer. */
static void print_nonfinite(double nf, const char *what, const char *left_out)
{
    if (nf > 0)
        printf("not finite  %.0f %s: NaN or infinite logits, counted as wrong%s\n", nf, what,
               left_out);
}

/* A language model: per predicted token, with perplexity; no per-class
 * table (a vocabulary's rows say little, and 50257^2 would not fit). */
static void print_lm(const eval_ctx *e, const sums *s, const char *split, int json)
{
    const double *v = s->v;
    double n = v[3] > 0 ? v[3] : 1;
    if (json) {
        printf("{\"checkpoint\":");
        eval_json_string(stdout, e->o->ckpt);
        printf(",\"dataset\":");
        eval_json_string(stdout, e->dataset);
        printf(",\"split\":\"%s\",\"windows\":%d,\"tokens\":%.0f,\"loss\":", split,
               e->data.n, v[3]);
        eval_json_number(stdout, "%.6f", v[0] / n);
        printf(",\"perplexity\":");
        eval_json_number(stdout, "%.6g", exp(v[0] / n));
        printf(",\"accuracy\":%.6f,\"top5\":%.6f,\"nonfinite\":%.0f}\n", v[1] / n,
               v[2] / n, v[V_NONFINITE]);
        return;
    }
    printf("%s on %s %s (%d windows of %d tokens, %.0f predictions)\n", e->o->ckpt, e->dataset,
           split, e->data.n, e->positions, v[3]);
    printf("loss        %.4f per token\n", v[0] / n);
    printf("perplexity  %.4g\n", exp(v[0] / n));
    printf("accuracy    %.2f%%  (next token ranked first: %.0f/%.0f)\n", 100 * v[1] / n, v[1],
           v[3]);
    printf("top-5       %.2f%%\n", 100 * v[2] / n);
    print_nonfinite(v[V_NONFINITE], "predictions", "");
}

/* Characters of UTF-8 text (class names are UTF-8: folder names, CSV
 * labels), up to the byte where `max` of them end (*cut). */
static int utf8_chars(const char *s, int max, size_t *cut)
{
    int n = 0;
    size_t i = 0;
    for (; s[i]; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80 && n++ == max)
            break;
    *cut = i;
    return n > max ? max : n;
}

/* A class name in a column of w characters: at most 24 of them, cut
 * between characters, padded by characters rather than bytes (printf's
 * %-*.24s counts bytes: "dög" took one column less than "cat", and a cut
 * could split a character). */
static void print_name(const char *name, int w)
{
    size_t cut;
    int n = utf8_chars(name, 24, &cut);
    printf("%.*s%*s", (int)cut, name, w > n ? w - n : 0, "");
}

static void print_text(const eval_ctx *e, const sums *s, const char *split)
{
    int c = s->classes;
    const double *v = s->v, *nf = s->v + V_FIXED, *cm = nf + s->classes;
    double n = v[3] > 0 ? v[3] : 1;
    char buf[32];
    printf("%s on %s %s (%.0f samples)\n", e->o->ckpt, e->dataset, split, v[3]);
    printf("loss      %.4f\n", v[0] / n);
    printf("accuracy  %.2f%%  (%.0f/%.0f)\n", 100 * v[1] / n, v[1], v[3]);
    printf("top-5     %.2f%%\n", 100 * v[2] / n);
    print_nonfinite(v[V_NONFINITE], "samples",
                    " and left out of the confusion matrix");
    int w = 5;
    for (int k = 0; k < c; k++) {
        size_t cut;
        int len = utf8_chars(eval_class_name(e, k, buf, sizeof buf), 24, &cut);
        w = len > w ? len : w;
    }
    printf("\nper-class accuracy:\n  %-*s %8s %8s\n", w, "class", "acc", "samples");
    for (int k = 0; k < c; k++) {
        double row = nf[k];   /* the class's samples: without a prediction too */
        for (int j = 0; j < c; j++)
            row += cm[(size_t)k * c + j];
        printf("  ");
        print_name(eval_class_name(e, k, buf, sizeof buf), w);
        /* A class without samples in the split has no accuracy (it
         * said 0.00%, as if the model missed all of them). */
        if (row > 0)
            printf(" %7.2f%% %8.0f\n", 100 * cm[(size_t)k * c + k] / row, row);
        else
            printf(" %8s %8.0f\n", "n/a", row);
    }
    if (c > 100) {
        printf("\n(confusion matrix of %d classes left out of the text: use --json)\n", c);
        return;
    }
    printf("\nconfusion matrix (rows: true class, columns: predicted):\n  %*s", w, "");
    for (int j = 0; j < c; j++)
        printf(" %5d", j);
    printf("\n");
    for (int k = 0; k < c; k++) {
        printf("  ");
        print_name(eval_class_name(e, k, buf, sizeof buf), w);
        for (int j = 0; j < c; j++)
            printf(" %5.0f", cm[(size_t)k * c + j]);
        printf("\n");
    }
}

static void print_json(const eval_ctx *e, const sums *s, const char *split)
{
    int c = s->classes;
    const double *v = s->v, *nf = s->v + V_FIXED, *cm = nf + s->classes;
    double n = v[3] > 0 ? v[3] : 1;
    char buf[32];
    printf("{\"checkpoint\":");
    eval_json_string(stdout, e->o->ckpt);
    printf(",\"dataset\":");
    eval_json_string(stdout, e->dataset);
    printf(",\"split\":\"%s\",\"samples\":%.0f,\"loss\":", split, v[3]);
    eval_json_number(stdout, "%.6f", v[0] / n);
    printf(",\"accuracy\":%.6f,\"top5\":%.6f,\"nonfinite\":%.0f,\"classes\":[", v[1] / n,
           v[2] / n, v[V_NONFINITE]);
    for (int k = 0; k < c; k++) {
        printf(k ? "," : "");
        eval_json_string(stdout, eval_class_name(e, k, buf, sizeof buf));
    }
    printf("],\"per_class_accuracy\":[");
    for (int k = 0; k < c; k++) {
        double row = nf[k];   /* the class's samples: without a prediction too */
        for (int j = 0; j < c; j++)
            row += cm[(size_t)k * c + j];
        if (row > 0)
            printf("%s%.6f", k ? "," : "", cm[(size_t)k * c + k] / row);
        else
            printf("%snull", k ? "," : "");   /* no samples: no accuracy */
    }
    printf("],\"nonfinite_per_class\":[");
    for (int k = 0; k < c; k++)
        printf("%s%.0f", k ? "," : "", nf[k]);
    printf("],\"confusion\":[");
    for (int k = 0; k < c; k++) {
        printf("%s[", k ? "," : "");
        for (int j = 0; j < c; j++)
            printf("%s%.0f", j ? "," : "", cm[(size_t)k * c + j]);
        printf("]");
    }
    printf("]}\n");
}

int main(int argc, char **argv)
{
    cli_fix_blas_core(argv);
    if (cli_check_libcdl(PROG, argv) != 0)
        return 2;
    eval_opts o = {.prog = PROG, .split = "", .device = "auto", .batch_size = 256,
                   .workers = 1, .distributed = 1, .sequences = 1};
    int json = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, EVAL_SHORT_OPTS, long_opts, NULL)) != -1) {
        int r = eval_common_option(&o, c, optarg, argv, usage);
        if (r == EVAL_OPT_EXIT0 || r == EVAL_OPT_BAD)
            return r == EVAL_OPT_BAD ? 2 : 0;
        switch (r == EVAL_OPT_OK ? 0 : c) {
        case 0: break;
        case OPT_JSON: json = 1; break;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, PROG ": give one checkpoint (see " PROG " --help)\n");
        return 2;
    }
    o.ckpt = argv[optind];
    eval_ctx e;
    sums s = {0};
    int rc = eval_open(&e, &o);
    size_t nv = 0;
    if (rc == 0) {
        s.classes = e.classes;
        s.confusion = e.positions == 1;
        nv = V_FIXED + (s.confusion ? (size_t)e.classes * (e.classes + 1) : 0);
        s.v = cdl_calloc(nv, sizeof *s.v);
        rc = s.v ? eval_run(&e, add_batch, &s) : -1;
    }
    if (rc == 0 && e.dist)
        rc = cdl_dist_allreduce_f64(e.dist, s.v, nv);
    if (rc == 0 && e.ri.rank == 0) {
        if (!s.confusion)
            print_lm(&e, &s, e.o->split, json);
        else if (json)
            print_json(&e, &s, e.o->split);
        else
            print_text(&e, &s, e.o->split);
        /* The run's validation and test losses are its training loss's,
         * with the smoothing term: the numbers differ, and say why. */
        if (e.label_smoothing > 0)
            fprintf(stderr, PROG ": note: the loss is the plain cross-entropy; the run trained "
                    "with --label-smoothing %g, and its val and test losses include the "
                    "smoothing term: the numbers differ\n", e.label_smoothing);
        /* "cdl-eval CKPT > results.txt" on a full disk: not a success. */
        if (fflush(stdout) != 0 || ferror(stdout))
            rc = cdl_error("writing the results to standard output failed: %s", strerror(errno));
        if (rc == 0 && !isfinite(s.v[V_LOSS]))
            fprintf(stderr, PROG ": warning: the loss is not finite (null in --json): the model's "
                    "logits are NaN or infinite for some samples: weights of a run that "
                    "diverged, or too large for float32\n");
    }
    if (rc != 0) {
        if (e.ri.world > 1)
            fprintf(stderr, PROG ": rank %d: error: %s\n", e.ri.rank, cdl_last_error());
        else
            fprintf(stderr, PROG ": error: %s\n", cdl_last_error());
    }
    cdl_free(s.v);
    eval_close(&e);
    return rc ? 1 : 0;
}
