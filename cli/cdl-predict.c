/* cdl-predict: the top-k classes and their probabilities (softmax of the
 * logits) for every sample of a dataset split, for PNG/JPEG files
 * prepared as the run's image folder was, or for the rows of a CSV table
 * (columns matched by name), as CSV or JSON lines.
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

#define PROG "cdl-predict"

enum { OPT_FORMAT = EVAL_OPT_OWN, OPT_TOPK };

static const struct option long_opts[] = {
    EVAL_LONG_OPTS,
    {"format", required_argument, NULL, OPT_FORMAT},
    {"top-k", required_argument, NULL, OPT_TOPK},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: cdl-predict CHECKPOINT [--dataset NAME] [OPTION]...\n"
"  or:  cdl-predict CHECKPOINT [OPTION]... FILE...\n"
"  or:  cdl-predict CHECKPOINT [OPTION]... TABLE.csv\n"
"Print the top-k classes with their probabilities for every sample of a\n"
"dataset split, for every PNG/JPEG FILE (scaled, cropped and normalised\n"
"as the training run's pictures), or for every row of a CSV table (a run\n"
"trained on one: its feature columns matched by name, the label column\n"
"optional), one line each (CSV with a header, or JSON lines).\n"
"\n"
EVAL_USAGE_DATA
"      --split test|val|train  which samples; val and train are split as the\n"
"                           training run did [test; val for data without a test\n"
"                           split, as cdl-eval]\n"
"  -m, --model NAME|FILE   lenet, mlp, resnet20, resnet18/34/50/101[:stem=...] or a spec\n"
"                           file\n"
"                           [the checkpoint's]\n"
"      --top-k K            classes per sample [5, at most the model's outputs]\n"
"      --format csv|jsonl   [csv]\n"
EVAL_USAGE_RUN);
}

typedef struct out {
    int k, json;
    char *const *files;   /* FILE... (labels are indices into it), or NULL */
    int *idx;     /* classes, sorted by probability */
    double *p;    /* classes */
    long nonfinite;   /* samples whose logits are NaN or infinite */
} out;

/* s as one CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(const char *s)
{
    if (!s[strcspn(s, ",\"\r\n")]) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static int predict_batch(void *ctx, const eval_ctx *e, long first, int n, const int32_t *y,
                         const float *logits)
{
    out *o = ctx;
    int c = e->classes;
    char buf[32];
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * c;
        double mx = z[0], se = 0;
        for (int k = 1; k < c; k++)
            mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < c; k++)
            se += (o->p[k] = exp((double)z[k] - mx));
        /* A NaN or infinite logit ranks nothing (NaN compares false): no
         * class is predicted, as cdl-eval counts such a sample wrong. */
        int ranked = 1;
        for (int k = 0; k < c && ranked; k++)
            ranked = isfinite(z[k]);
        o->nonfinite += !ranked;
        /* Selection of the k largest, ties to the lower class (as argmax). */
        for (int k = 0; k < c; k++)
            o->idx[k] = k;
        for (int j = 0; j < o->k; j++) {
            int b = j;
            for (int k = j + 1; k < c; k++)
                if (o->p[o->idx[k]] > o->p[o->idx[b]])
                    b = k;
            int t = o->idx[j];
            o->idx[j] = o->idx[b];
            o->idx[b] = t;
        }
        long index = first + i;
        /* A table's rows: their numbers, and their label's text where it
         * has the label column. */
        char *const *rowlab = e->table == 1 ? e->data.class_names : NULL;
        if (e->table == 1 && o->json) {
            printf("{\"index\":%d", y[i]);
            if (rowlab) {
                printf(",\"label\":");
                eval_json_string(stdout, rowlab[y[i]]);
            }
        } else if (o->json && o->files) {
            printf("{\"file\":");
            eval_json_string(stdout, o->files[y[i]]);
        } else if (o->json) {
            printf("{\"index\":%ld,\"label\":", index);
            eval_json_string(stdout, eval_class_name(e, y[i], buf, sizeof buf));
        }
        if (o->json) {
            printf(",\"top\":[");
            for (int j = 0; j < o->k; j++) {
                printf("%s{\"class\":", j ? "," : "");
                if (ranked)
                    eval_json_string(stdout, eval_class_name(e, o->idx[j], buf, sizeof buf));
                else
                    printf("null");
                printf(",\"p\":");
                eval_json_number(stdout, "%.6f", ranked ? o->p[o->idx[j]] / se : NAN);
                putchar('}');
            }
            printf("]}\n");
        } else {
            /* Class names are any text (CSV labels like "a, x"): fields. */
            if (e->table == 1) {
                printf("%d", y[i]);
                if (rowlab) {
                    putchar(',');
                    csv_field(rowlab[y[i]]);
                }
            } else if (o->files) {
                csv_field(o->files[y[i]]);
            } else {
                printf("%ld,", index);
                csv_field(eval_class_name(e, y[i], buf, sizeof buf));
            }
            for (int j = 0; j < o->k; j++) {
                putchar(',');
                if (ranked)
                    csv_field(eval_class_name(e, o->idx[j], buf, sizeof buf));
                printf(",%.6f", ranked ? o->p[o->idx[j]] / se : NAN);
            }
            printf("\n");
        }
    }
    return ferror(stdout) ? cdl_error("writing the predictions to standard output failed: %s",
                                      strerror(errno))
                          : 0;
}

int main(int argc, char **argv)
{
    cli_fix_blas_core(argv);
    if (cli_check_libcdl(PROG, argv) != 0)
        return 2;
    /* No --split: test, or as cdl-eval, the run's validation split for data
     * without a test split (it was an error here, where cdl-eval
     * evaluated those samples). */
    eval_opts o = {.prog = PROG, .split = "", .device = "auto", .batch_size = 256,
                   .workers = 1, .distributed = 0};
    out w = {.k = 5};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, EVAL_SHORT_OPTS, long_opts, NULL)) != -1) {
        int r = eval_common_option(&o, c, optarg, argv, usage);
        if (r == EVAL_OPT_EXIT0 || r == EVAL_OPT_BAD)
            return r == EVAL_OPT_BAD ? 2 : 0;
        switch (r == EVAL_OPT_OK ? 0 : c) {
        case 0: break;
        case OPT_FORMAT:
            if (strcmp(optarg, "csv") && strcmp(optarg, "jsonl")) {
                fprintf(stderr, PROG ": --format '%.80s': expected csv or jsonl\n", optarg);
                return 2;
            }
            w.json = !strcmp(optarg, "jsonl");
            break;
        case OPT_TOPK:
            if (eval_parse_int(PROG, "top-k", optarg, 1, 65536, &w.k))
                return 2;
            break;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, PROG ": give a checkpoint (see " PROG " --help)\n");
        return 2;
    }
    o.ckpt = argv[optind++];
    if (optind < argc) {
        if (o.dataset || o.data_dir || *o.split) {
            fprintf(stderr, PROG ": files and --dataset/--data-dir/--split exclude each other: "
                    "give one or the other (see " PROG " --help)\n");
            return 2;
        }
        o.files = argv + optind;
        o.nfiles = argc - optind;
        w.files = o.files;
    }
    if (eval_rank0_only(PROG, "the predictions"))
        return 0;
    eval_ctx e;
    int rc = eval_open(&e, &o);
    if (rc == 0) {
        w.k = w.k < e.classes ? w.k : e.classes;
        w.idx = cdl_calloc((size_t)e.classes, sizeof *w.idx);
        w.p = cdl_calloc((size_t)e.classes, sizeof *w.p);
        rc = w.idx && w.p ? 0 : -1;
    }
    if (rc == 0 && !w.json) {
        printf(e.table == 1 ? (e.data.class_names ? "index,label" : "index")
               : w.files ? "file" : "index,label");
        for (int j = 1; j <= w.k; j++)
            printf(",class%d,p%d", j, j);
        printf("\n");
    }
    if (rc == 0)
        rc = eval_run(&e, predict_batch, &w);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        rc = cdl_error("writing the predictions to standard output failed: %s", strerror(errno));
    if (rc == 0 && w.nonfinite)
        fprintf(stderr, PROG ": warning: %ld samples have logits that are NaN or infinite (weights "
                "of a run that diverged, or too large for float32): they have no predicted class "
                "(empty in CSV, null in jsonl) and probabilities nan (null in jsonl)\n", w.nonfinite);
    if (rc != 0)
        fprintf(stderr, PROG ": error: %s\n", cdl_last_error());
    cdl_free(w.idx);
    cdl_free(w.p);
    eval_close(&e);
    return rc ? 1 : 0;
}
