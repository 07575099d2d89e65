/* What cdl-eval and cdl-predict share (evalcommon.c): a trained model
 * rebuilt from its checkpoint, the data split it names, and a pass over
 * that data that hands every batch's logits to a callback. Public libcdl
 * API only. */
#ifndef CDL_CLI_EVALCOMMON_H
#define CDL_CLI_EVALCOMMON_H

#include <getopt.h>
#include <stdio.h>

#include <cdl/cdl.h>

#include "normalize.h"

typedef struct eval_opts {
    const char *prog;         /* "cdl-eval", for messages */
    const char *ckpt;
    const char *model;        /* NULL = the checkpoint's ("model" metadata) */
    const char *dataset;      /* NULL = the checkpoint's */
    const char *data_dir;     /* NULL = the checkpoint's, then the dataset's default */
    const char *split;        /* "test", "val", "train", or "" (test; val for token data) */
    const char *device;       /* "cpu", "cuda", "auto" */
    const char *tf32;         /* --tf32 on|off|default; NULL: CDL_TF32, else default */
    int batch_size, threads, workers;
    int distributed;          /* join a data-parallel job when started as one */
    int sequences;            /* the caller reads a language model's logits per position
                               * (cdl-eval); else such a checkpoint is refused */
    /* How the data is read: 0/NULL = as the training run did (checkpoint
     * metadata), else overriding it. */
    int image_size, channels;
    const char *label_column;
    const char *columns;      /* --columns: a table's feature column names, comma-separated,
                               * in the model's input order (weights that do not store
                               * them: PyTorch's); NULL: the checkpoint's */
    const char *classes;      /* --classes FILE|A,B,...: the model's class names in the
                               * order of its outputs (weights that do not store them:
                               * PyTorch's); NULL: the checkpoint's, else the data's */
    int skip_bad_files;
    int decode;               /* --decode: enum cdl_decode */
    int jpeg_decode;          /* --jpeg-decode: 0 not given (the run's: checkpoint metadata
                               * jpeg_decode, else scaled), 1 scaled, 2 full (PIL's pixels) */
    cli_normalize norm;       /* --normalize (kind CDL_NORMALIZE_DEFAULT: not given, the
                               * checkpoint's): for weights that do not store it */
    /* cdl-predict FILE...: PNG/JPEG files, or one CSV table of rows, instead of a
     * dataset split. */
    char *const *files;
    int nfiles;
    int quiet;                /* set by eval_open on ranks but 0: eval_note prints nothing,
                               * so a job of N ranks says each note once, not N times */
} eval_opts;

typedef struct eval_ctx {
    const eval_opts *o;       /* &own */
    eval_opts own;            /* the caller's options, split resolved ("" = test, or val for
                               * a language model's token windows, or for data without a
                               * test split) */
    int split_default;        /* the split was not given: data without a test split takes
                               * the run's validation split */
    cdl_rank_info ri;
    cdl_dist *dist;           /* NULL for one process */
    cdl_backend *be;
    cdl_model *model;
    cdl_dataset data;
    int have_data;            /* data: a split, or the files (labels = index in o->files) */
    long *lines;              /* a table's rows: data's sample i is on line lines[i] of its
                               * file (NULL: not a table), for messages */
    int table;                /* 1: cdl-predict's FILE is a CSV table: labels are its row
                               * numbers (from 0), data.class_names its label column's text
                               * (NULL: none) */
    int classes;              /* per position */
    int positions;            /* a language model's T (rows of logits and labels per
                               * sample); 1 for a classifier */
    char dataset[64];         /* the dataset's name, for the report */
    char **names;             /* classes names (NULL: print indices) */
    char *given;              /* --classes, one name per line (NULL: not given) */
    char *derived;            /* a table's text labels, distinct and sorted, one per line
                               * (as LabelEncoder numbers them): the names of weights
                               * that store none, when --classes is not given */
    char derived_from[4096];  /* the training table derived was read from (a test.csv's
                               * train.csv; "" = the table evaluated): set, the test
                               * table's labels are not numbered on their own */
    double label_smoothing;   /* the run's --label-smoothing (its config), 0: none or not
                               * a cdl-train checkpoint */
    float *x_dev, *logits;    /* device input (NULL on host backends), host logits */
    int batch;                /* o->batch_size, at most this rank's samples: buffers for
                               * 256 pictures are not made to predict 4 */
} eval_ctx;

/* A batch's results: n samples, their dataset indices (first + k), labels
 * and (n, classes) logits on the host. */
typedef int (*eval_batch_fn)(void *cb_ctx, const eval_ctx *e, long first, int n,
                             const int32_t *labels, const float *logits);

/* Parses --tf32 (checked when given, used by eval_backend); prints an
 * error and returns -1. */
int eval_parse_tf32(const char *prog, const char *arg, const char **out);
/* The backend o->device names (auto: CUDA when a GPU is visible, the
 * local rank's of several); NULL with cdl_last_error. */
cdl_backend *eval_backend(const eval_opts *o, const cdl_rank_info *ri);

/* "PROG: " and the line fmt (with its newline) on stderr, unless o->quiet:
 * the notes and warnings every rank would print alike. */
void eval_note(const eval_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A program whose output would be the same on every rank (cdl-predict,
 * cdl-generate), started as one of several (srun in a job of several
 * tasks, cdlrun -n N, mpirun -n N): rank 0 says so on stderr and works
 * alone, with all the CPUs the others leave; returns 1 in the others,
 * which exit 0 at once (each wrote the same output, interleaved). `what`
 * names the output: "the text". */
int eval_rank0_only(const char *prog, const char *what);
/* The model of checkpoint f (o->model, else its "model" metadata) built for
 * samples of `input` shape, batches of at most `batch` and `classes` outputs
 * (what a built-in takes), with the checkpoint's weights loaded; NULL with
 * cdl_last_error. */
cdl_model *eval_model(const eval_opts *o, const cdl_st_file *f, cdl_shape input, int batch,
                      long classes, cdl_backend *be);
/* A non-negative integer of f's metadata, -1 when absent or malformed. */
long eval_meta_long(const cdl_st_file *f, const char *key);

/* Opens everything: -1 with cdl_last_error set. */
int eval_open(eval_ctx *e, const eval_opts *o);
/* Runs this rank's share of the data through the model; first is the index
 * of the batch's first sample in the split (one process only: with several,
 * indices are not contiguous, so it is -1). */
int eval_run(eval_ctx *e, eval_batch_fn fn, void *cb_ctx);
void eval_close(eval_ctx *e);

/* The name of class k: its name or its index as text (buf). */
const char *eval_class_name(const eval_ctx *e, int k, char *buf, size_t len);
/* s as a JSON string (quotes and escapes) on f. */
void eval_json_string(FILE *f, const char *s);
/* A number for JSON: printf's fmt ("%.6f"), or null when v is NaN or
 * infinite (a diverged model's loss), which printf writes as -nan and inf,
 * neither JSON. */
void eval_json_number(FILE *f, const char *fmt, double v);
/* --columns or --classes "A,B,..." as names one per line (a checkpoint
 * stores them so; a line break in a name is a space), cdl_malloc'd; NULL
 * with the reason in why. Fields are separated by commas, as a CSV
 * header's: a bare one is taken as written and may not be empty (",," or
 * a trailing comma is a typing slip); a quoted one ("a,b", "" for a
 * column without a name, such as pandas' row index, "" inside for a
 * quote) is taken as CSV quotes it. what: "column" or "class", for
 * messages. */
char *eval_comma_lines(const char *arg, const char *what, char *why, size_t len);
/* --classes: a file of one name per line, else "A,B,..." (eval_comma_lines);
 * the names one per line, cdl_malloc'd, *count of them, none empty and
 * none twice; NULL with the reason in why. */
char *eval_classes_lines(const char *arg, int *count, char *why, size_t len);
/* Parses an integer option in [lo, hi]; prints an error and returns -1. */
int eval_parse_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out);

/* The options both programs take (getopt_long values; a program's own
 * start at EVAL_OPT_OWN). */
enum { EVAL_OPT_DATA_DIR = 256, EVAL_OPT_SPLIT, EVAL_OPT_BATCH, EVAL_OPT_WORKERS,
       EVAL_OPT_DEVICE, EVAL_OPT_VERSION,
       EVAL_OPT_IMAGE_SIZE, EVAL_OPT_CHANNELS, EVAL_OPT_LABEL_COLUMN, EVAL_OPT_SKIP_BAD,
       EVAL_OPT_DECODE, EVAL_OPT_NORMALIZE, EVAL_OPT_TF32, EVAL_OPT_JPEG_DECODE, EVAL_OPT_COLUMNS,
       EVAL_OPT_CLASSES, EVAL_OPT_OWN };
/* --help lines of the common options. */
#define EVAL_USAGE_DATA                                                                     \
    "  -d, --dataset NAME       fashion-mnist, mnist, cifar10, synthetic, imagefolder, npy,\n" \
    "                           npz, csv, or KIND:PATH [the checkpoint's]\n"                 \
    "      --data-dir DIR       dataset files [the checkpoint's, else the dataset's default]\n" \
    "      --image-size N       imagefolder: side of the square samples [the run's]\n"       \
    "      --channels 1|3       imagefolder: grayscale or RGB [the run's]\n"                 \
    "      --label-column NAME  csv: the label column [the run's]\n"                         \
    "      --columns A,B,...    csv: the feature columns by name, in the model's input order\n" \
    "                           (\"\" for a column without a name, \"a,b\" for one with a comma)\n" \
    "                           [the run's; give them for weights PyTorch wrote]\n"          \
    "      --classes FILE|A,B,...  the class names in the order of the model's outputs: a\n" \
    "                           file of one per line, or separated by commas as --columns\n" \
    "                           [the run's; weights PyTorch wrote: the data's, sorted as\n" \
    "                           ImageFolder and LabelEncoder number them]\n"               \
    "      --skip-bad-files     leave out unreadable pictures (counted) instead of failing\n"  \
    "      --decode auto|memory|stream  imagefolder: decode into memory or as batches need\n"  \
    "                           them [auto: memory if it fits]\n"                        \
    "      --jpeg-decode scaled|full  full: decode JPEGs whole, then resize (PIL's pixels,\n" \
    "                           for weights trained in PyTorch) [the run's, else scaled]\n" \
    "      --normalize MEAN,STD|M1,..,Mc,S1,..,Sc|none|auto  the normalisation the weights\n" \
    "                           were trained with [the checkpoint's; give it for weights\n" \
    "                           PyTorch wrote]\n"
#define EVAL_USAGE_TF32                                                                  \
    "      --tf32 on|off|default  TF32 on GPUs, as the training run's --tf32 [env CDL_TF32,\n" \
    "                           else default: on for convolutions only]\n"
#define EVAL_USAGE_RUN                                        \
    "      --batch-size N       [256]\n"                      \
    "      --device cpu|cuda|auto  [auto]\n"                  \
    EVAL_USAGE_TF32                                           \
    "  -t, --threads N          compute threads [all]\n"      \
    "      --workers N          data loader threads [1]\n"    \
    "  -h, --help    --version\n"
#define EVAL_SHORT_OPTS ":m:d:t:h"
#define EVAL_LONG_OPTS                                             \
    {"model", required_argument, NULL, 'm'},                       \
    {"dataset", required_argument, NULL, 'd'},                     \
    {"data-dir", required_argument, NULL, EVAL_OPT_DATA_DIR},      \
    {"split", required_argument, NULL, EVAL_OPT_SPLIT},            \
    {"batch-size", required_argument, NULL, EVAL_OPT_BATCH},       \
    {"threads", required_argument, NULL, 't'},                     \
    {"workers", required_argument, NULL, EVAL_OPT_WORKERS},        \
    {"device", required_argument, NULL, EVAL_OPT_DEVICE},          \
    {"tf32", required_argument, NULL, EVAL_OPT_TF32},              \
    {"help", no_argument, NULL, 'h'},                              \
    {"version", no_argument, NULL, EVAL_OPT_VERSION},                \
    {"image-size", required_argument, NULL, EVAL_OPT_IMAGE_SIZE},  \
    {"channels", required_argument, NULL, EVAL_OPT_CHANNELS},      \
    {"label-column", required_argument, NULL, EVAL_OPT_LABEL_COLUMN}, \
    {"columns", required_argument, NULL, EVAL_OPT_COLUMNS},        \
    {"classes", required_argument, NULL, EVAL_OPT_CLASSES},        \
    {"skip-bad-files", no_argument, NULL, EVAL_OPT_SKIP_BAD},       \
    {"decode", required_argument, NULL, EVAL_OPT_DECODE},          \
    {"jpeg-decode", required_argument, NULL, EVAL_OPT_JPEG_DECODE}, \
    {"normalize", required_argument, NULL, EVAL_OPT_NORMALIZE}

/* Handles getopt_long's answer c when it is a common option or an error:
 * EVAL_OPT_OK (taken), EVAL_OPT_EXIT0 (--help, --version), EVAL_OPT_BAD
 * (message printed: exit 2) or EVAL_OPT_NOT_MINE. */
enum { EVAL_OPT_OK, EVAL_OPT_EXIT0, EVAL_OPT_BAD, EVAL_OPT_NOT_MINE };
int eval_common_option(eval_opts *o, int c, const char *arg, char **argv,
                       void (*usage)(FILE *));

#endif
