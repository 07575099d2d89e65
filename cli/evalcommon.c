/* cdl-eval's and cdl-predict's common part (evalcommon.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evalcommon.h"

/* A metadata value of the checkpoint or "" (PyTorch-written files have none). */
static const char *meta(const cdl_st_file *f, const char *key)
{
    const char *s = cdl_st_meta_get(f, key);
    return s ? s : "";
}

long eval_meta_long(const cdl_st_file *f, const char *key)
{
    const char *s = meta(f, key);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (*s && !*end && errno == 0 && v >= 0) ? v : -1;
}

cdl_backend *eval_backend(const eval_opts *o, const cdl_rank_info *ri)
{
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);
    /* As cdl-train's --tf32 and CDL_TF32 (they were ignored here: TF32
     * convolutions always, so cdl-eval of a run trained with --tf32 off
     * disagreed with its validation on a GPU, whatever the variable said). */
    const char *tf32 = o->tf32 ? o->tf32 : getenv("CDL_TF32");
    if (tf32 && *tf32 && cdl_backend_parse_tf32(tf32, o->tf32 ? "--tf32" : "CDL_TF32",
                                                &p.tf32_conv, &p.tf32_matmul) != 0)
        return NULL;
    /* No --threads: ranks sharing CPUs take a share each, as cdl-train's. */
    p.threads = o->threads > 0 ? o->threads : cdl_rank_threads(ri);
    const char *dev = o->device ? o->device : "auto";
    if (!strcmp(dev, "cpu"))
        return cdl_backend_create_with("cpu", &p);
    int visible = cdl_backend_cuda_device_count();
    if (!strcmp(dev, "auto") && visible == 0)
        return cdl_backend_create_with("cpu", &p);
    /* The contract's GPU, as cdl-train's: local_rank % visible put a
     * task of srun --gpus-per-task=2 on its second GPU and packed replicas
     * (CDL_REPLICAS_PER_GPU) on GPUs of their own, which cdl_dist refused. */
    if (cdl_rank_gpu(ri, visible, &p.device) != 0)
        return NULL;
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    if (!be && !strcmp(dev, "auto"))
        be = cdl_backend_create_with("cpu", &p);
    return be;
}

void eval_note(const eval_opts *o, const char *fmt, ...)
{
    if (o->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", o->prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

int eval_rank0_only(const char *prog, const char *what)
{
    cdl_rank_info ri = {.rank = 0, .world = 1};
    if (cdl_rank_discover(&ri) != 0 || ri.world <= 1)
        return 0;
    if (ri.rank > 0)
        return 1;
    fprintf(stderr, "%s: started as %d ranks: rank 0 writes %s, the others exit\n", prog,
            ri.world, what);
    return 0;
}

/* "v0,v1,..." -> cdl_malloc'd floats (*n of them); NULL if s is missing or
 * malformed. */
static float *parse_floats(const char *s, int *n)
{
    if (!s || !*s)
        return NULL;
    int count = 1;
    for (const char *p = s; *p; p++)
        count += *p == ',';
    float *v = cdl_malloc((size_t)count * sizeof *v);
    for (int k = 0; v && k < count; k++) {
        char *end;
        errno = 0;
        v[k] = strtof(s, &end);
        if (end == s || errno == ERANGE || *end != (k + 1 < count ? ',' : '\0')) {
            cdl_free(v);
            return NULL;
        }
        s = end + (*end == ',');
    }
    *n = count;
    return v;
}

/* The reader options of the run (metadata), overridden by the command
 * line; the run's normalisation where stored (norm: cdl_malloc'd mean then
 * std, NULL for a checkpoint of an older cdl). */
/* --jpeg-decode, else the run's (a checkpoint of an older cdl, or of
 * PyTorch: scaled). */
static int eval_jpeg_full(const eval_opts *o, const cdl_st_file *f)
{
    return o->jpeg_decode ? o->jpeg_decode == 2 : !strcmp(meta(f, "jpeg_decode"), "full");
}

static void run_options(const eval_opts *o, const cdl_st_file *f, cdl_dataset_options *opt,
                        float **norm)
{
    cdl_dataset_options_defaults(opt);
    long size = eval_meta_long(f, "image_size"), ch = eval_meta_long(f, "image_channels");
    int c = 0, h = 0, w = 0;
    sscanf(meta(f, "input_shape"), "%d,%d,%d", &c, &h, &w);
    /* The run's sample size: --image-size, else its samples' h x w (a run
     * that took the first picture's size, maybe not square, and whose test
     * split was fitted to it). */
    opt->image_size = o->image_size ? o->image_size : size > 0 ? (int)size : 0;
    if (!o->image_size && h > 0 && w > 0) {
        opt->image_height = h;
        opt->image_width = w;
    }
    opt->channels = o->channels ? o->channels : ch > 0 ? (int)ch : (c == 1 || c == 3) ? c : 0;
    /* Weights another program wrote (PyTorch's) store no sample shape:
     * pictures are fitted to the --model spec's input line, as the
     * training's Resize + CenterCrop fitted them (cdl_spec_load leaves
     * its error for eval_model to report). */
    cdl_model_spec spec;
    if (!*meta(f, "dataset") && c == 0 && !o->image_size && o->model &&
        !cdl_spec_is_builtin(o->model) && cdl_spec_load(o->model, &spec) == 0 &&
        (spec.input.c == 1 || spec.input.c == 3)) {
        opt->image_height = spec.input.h;
        opt->image_width = spec.input.w;
        if (!o->channels)
            opt->channels = spec.input.c;
    }
    opt->label_column = o->label_column ? o->label_column
                        : *meta(f, "label_column") ? meta(f, "label_column") : NULL;
    opt->skip_bad_files = o->skip_bad_files;
    opt->decode = o->decode;
    opt->jpeg_full = eval_jpeg_full(o, f);
    opt->threads = o->threads;
    /* Token windows: the run's window and vocabulary (the model's position
     * table and embedding are sized by them). */
    long block = eval_meta_long(f, "block_size"), vocab = eval_meta_long(f, "vocab_size");
    if (*meta(f, "tokens")) {
        opt->block_size = block > 0 && block <= INT_MAX ? (int)block : 0;
        opt->vocab_size = vocab > 0 && vocab <= 65536 ? (int)vocab : 0;
        /* The reader's val_split as the run used it (absent from older
         * checkpoints: 0, the default); the reader checks the value. */
        const char *vs = cdl_st_meta_get(f, "token_val_split");
        opt->val_split = vs ? strtod(vs, NULL) : 0;
    } else if (o->model) {
        /* A file PyTorch wrote: windows of the --model's block, as
         * cdl-train would read them for it (0: the reader's default). */
        int b = cdl_spec_block_size(o->model);
        opt->block_size = b > 0 ? b : 0;
    }
    int nm = 0, ns = 0;
    float *m = parse_floats(cdl_st_meta_get(f, "norm_mean"), &nm);
    float *sd = parse_floats(cdl_st_meta_get(f, "norm_std"), &ns);
    *norm = NULL;
    if (m && sd && nm == ns && (*norm = cdl_malloc(2 * (size_t)nm * sizeof **norm))) {
        memcpy(*norm, m, (size_t)nm * sizeof *m);
        memcpy(*norm + nm, sd, (size_t)nm * sizeof *sd);
        opt->normalize = CDL_NORMALIZE_GIVEN;
        opt->norm_count = nm;
        opt->norm_mean = *norm;
        opt->norm_std = *norm + nm;
    }
    cdl_free(m);
    cdl_free(sd);
    /* --normalize: how the weights were trained, over what the file says
     * (weights PyTorch wrote say nothing). */
    if (o->norm.kind != CDL_NORMALIZE_DEFAULT) {
        opt->normalize = o->norm.kind;
        opt->norm_count = o->norm.count;
        opt->norm_mean = o->norm.mean;
        opt->norm_std = o->norm.std;
    }
}

/* -1 with an error when the run's samples (input_shape) differ from
 * input: its weights do not fit samples of another shape. 0 when they
 * agree or the checkpoint does not say. */
static int misfit_error(const eval_opts *o, const cdl_st_file *f, cdl_shape input)
{
    int c = 0, h = 0, w = 0;
    if (sscanf(meta(f, "input_shape"), "%d,%d,%d", &c, &h, &w) != 3 ||
        (c == input.c && h == input.h && w == input.w))
        return 0;
    return cdl_error("%s: the run's samples were %dx%dx%d (c,h,w), these are %dx%dx%d, and its "
                     "weights do not fit them: read the data as the run did (leave out "
                     "--dataset, --image-size and --channels, or give the run's)", o->ckpt, c, h, w,
                     input.c, input.h, input.w);
}

/* The weights do not fit the model (another --model than the run's): the
 * loader names the tensor, but its advice is cdl-train's (--init-ignore,
 * which these programs lack); it is replaced by theirs. */
static void other_model_error(const eval_opts *o, const cdl_st_file *f, const char *name)
{
    static const char *const advice[] = {" (check --model", " (a replaced layer?",
                                         ": the file belongs to another model"};
    char why[1024];
    snprintf(why, sizeof why, "%s", cdl_last_error());
    if (strstr(why, "Hugging Face"))
        return;   /* the right model in another layout: the loader says what to do */
    char *init = strstr(why, " (or, with --init");
    if (init) {   /* weights of a diverged run: the model is right, --init is cdl-train's */
        *init = '\0';
        cdl_error("%s", why);
        return;
    }
    for (size_t i = 0; i < sizeof advice / sizeof advice[0]; i++) {
        char *cut = strstr(why, advice[i]);
        if (cut)
            *cut = '\0';
    }
    const char *run = meta(f, "model");
    /* The loader's hint to rename a spec's layers as a PyTorch module's
     * fits weights PyTorch wrote, not a cdl run's checkpoint (its model
     * is known: the message says which). */
    char *hint = *run ? strstr(why, ", whose '") : NULL;
    if (hint)
        *hint = '\0';
    if (o->model && *run && strcmp(o->model, run))
        cdl_error("%s: the checkpoint holds another model than --model %s: leave --model out "
                  "(the run's model is '%s') or give the one it was trained with", why, name, run);
    else if (o->model)
        cdl_error("%s: the file holds the weights of another model than %s: give --model the "
                  "model they were saved from", why, name);
    else
        cdl_error("%s: the checkpoint's weights are not those of its model %s: was the file "
                  "written by another program? (give --model)", why, name);
}

/* a and b name the same file or folder (b may be "": none). */
static int same_path(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (!*a || !*b)
        return !strcmp(a, b);
    if (!realpath(a, ra) || !realpath(b, rb))
        return !strcmp(a, b);
    return !strcmp(ra, rb);
}

/* Token windows (text, tokens): the reader holds the split, as cdl-train's
 * load_tokens took it: train, and val (val.bin or the file's last
 * --val-split tokens); there is no test split. */
static int load_token_split(eval_ctx *e, const cdl_st_file *f, const char *name, const char *dir)
{
    const eval_opts *o = e->o;
    if (!strcmp(o->split, "test"))
        return cdl_error("--dataset %s:%s holds token windows: their held-out part is the "
                         "validation split: use --split val (the default for language models) "
                         "or train", name, dir);
    cdl_dataset_options opt;
    float *norm;
    run_options(o, f, &opt, &norm);
    cdl_free(norm);
    int rc = cdl_dataset_load_with(name, *dir ? dir : NULL, !strcmp(o->split, "train"), &opt,
                                   &e->data);
    if (rc == 1)
        return cdl_error("--dataset %s:%s has no validation split (the run had --val-split 0): "
                         "use --split train", name, dir);
    if (rc != 0)
        return -1;
    e->have_data = 1;
    return 0;
}

static int load_rows(eval_ctx *e, const cdl_st_file *f, const char *path, int split);

/* The model's feature column names: the run's (metadata feature_columns),
 * else --columns (weights another program wrote); *nf of them in *names,
 * pointing into *copy (both cdl_free'd by the caller, also on an error).
 * path: the table, for messages. */
static int feature_names(const eval_opts *o, const cdl_st_file *f, const char *path, int *nf,
                         char **copy, const char ***names)
{
    const char *stored = cdl_st_meta_get(f, "feature_columns");
    const char *run_data = *meta(f, "dataset") ? meta(f, "dataset") : NULL;
    *copy = NULL;
    *names = NULL;
    if (!stored && run_data && strncmp(run_data, "csv", 3))
        return cdl_error("%s was trained on %s data, not a CSV table: a .csv FILE holds rows "
                         "for a model trained with --dataset csv%s", o->ckpt, run_data,
                         o->columns ? " (--columns names a table's columns)" : "");
    if (!stored && !o->columns && run_data)
        return cdl_error("%s does not store its table's column names (written by an older cdl, "
                         "or from a table whose names were not UTF-8): the columns of %s cannot "
                         "be matched to the model's by name; give them with --columns A,B,... "
                         "in the training table's order, train again with this cdl, or evaluate "
                         "a labelled test.csv beside the run's train.csv with --dataset csv:DIR",
                         o->ckpt, path);
    if (!stored && !o->columns)
        return cdl_error("%s does not store the names of the feature columns its model takes "
                         "(not written by cdl-train: weights PyTorch wrote): give --columns "
                         "A,B,... with the columns of %s in the order of the model's input "
                         "(the training tensor's columns), and --normalize as the training did",
                         o->ckpt, path);
    /* One name per line, as the checkpoint stores them (a line break in a
     * name is a space there). --columns was checked when parsed. */
    char why[160];
    size_t len = strlen(stored ? stored : o->columns);
    if (stored) {
        if (!(*copy = cdl_malloc(len + 1)))
            return -1;
        memcpy(*copy, stored, len + 1);
    } else if (!(*copy = eval_comma_lines(o->columns, "column", why, sizeof why))) {
        return cdl_error("--columns %.200s: %s", o->columns, why);
    }
    if (stored && o->columns) {
        char *given = eval_comma_lines(o->columns, "column", why, sizeof why);
        if (!given)
            return cdl_error("--columns %.200s: %s", o->columns, why);
        int same = !strcmp(given, *copy);
        cdl_free(given);
        if (!same) {
            char list[512];
            snprintf(list, sizeof list, "%s", stored);
            for (char *p = list; *p; p++)
                *p = *p == '\n' ? ',' : *p;
            return cdl_error("--columns %.200s: %s was trained on the columns %s%s (its metadata "
                             "feature_columns), in that order: leave --columns out", o->columns,
                             o->ckpt, list, len >= sizeof list ? "..." : "");
        }
    }
    *nf = 1;
    for (const char *p = *copy; *p; p++)
        *nf += *p == '\n';
    int c = 0, h = 0, w = 0;
    if (sscanf(meta(f, "input_shape"), "%d,%d,%d", &c, &h, &w) == 3 && (c != *nf || h != 1 ||
                                                                          w != 1))
        return stored ? cdl_error("%s: its metadata names %d feature columns, but its samples "
                                  "were %dx%dx%d: the file is damaged", o->ckpt, *nf, c, h, w)
                      : cdl_error("--columns names %d columns, but the samples %s was trained "
                                  "on were %dx%dx%d (c,h,w): give its %d feature columns", *nf,
                                  o->ckpt, c, h, w, c);
    if (!(*names = cdl_calloc((size_t)*nf, sizeof **names)))
        return -1;
    char *p = *copy;
    for (int k = 0; k < *nf; k++) {
        (*names)[k] = p;
        p += strcspn(p, "\n");
        if (*p)
            *p++ = '\0';
    }
    return 0;
}

/* The names of the model's outputs, one per line: the checkpoint's
 * (metadata class_names), else --classes, else (weights that store none)
 * a table's text labels sorted; NULL: none. from: where they come from,
 * for messages. */
static const char *model_names(const eval_ctx *e, const cdl_st_file *f, const char **from)
{
    const char *s = cdl_st_meta_get(f, "class_names");
    *from = s && *s ? "its class_names" : e->given ? "--classes" : "its data's labels, sorted";
    return s && *s ? s : e->given ? e->given : e->derived;
}

/* The label column of a table the model's columns are read from by name:
 * --label-column, the run's, else "label" (cdl-train's default name). */
static const char *table_label(const eval_opts *o, const cdl_st_file *f)
{
    const char *run = cdl_st_meta_get(f, "label_name");
    return o->label_column ? o->label_column : run && *run ? run : "label";
}

/* A run's class name and its index, for a lookup by name. */
typedef struct run_class {
    const char *name;
    int index;
} run_class;

static int run_class_cmp(const void *a, const void *b)
{
    return strcmp(((const run_class *)a)->name, ((const run_class *)b)->name);
}

/* A table's label texts (n of them) -> *out: the distinct ones, sorted by
 * byte value (as LabelEncoder and the CSV reader number them), one per
 * line (a line break in a text a space), cdl_malloc'd; NULL when all are
 * class indices (integers from 0). */
static int label_lines(char *const *labels, long n, char **out)
{
    *out = NULL;
    long text = 0;
    for (long i = 0; i < n && !text; i++)
        text = !*labels[i] || strspn(labels[i], "0123456789") != strlen(labels[i]);
    if (!text)
        return 0;
    run_class *v = cdl_calloc((size_t)n, sizeof *v);
    if (!v)
        return -1;
    size_t len = 1;
    for (long i = 0; i < n; i++)
        v[i] = (run_class){labels[i], (int)i};
    qsort(v, (size_t)n, sizeof *v, run_class_cmp);
    for (long i = 0; i < n; i++)
        len += strlen(v[i].name) + 1;
    char *q = *out = cdl_malloc(len);
    for (long i = 0; q && i < n; i++) {
        if (i && !strcmp(v[i].name, v[i - 1].name))
            continue;
        if (q != *out)
            *q++ = '\n';
        for (const char *p = v[i].name; *p; p++)
            *q++ = *p == '\n' ? ' ' : *p;
    }
    if (q)
        *q = '\0';
    cdl_free(v);
    return *out ? 0 : -1;
}

/* d: a labelled table as load_rows read it (labels the row numbers,
 * class_names the label column's texts) -> labels the run's class
 * indices: texts matched to its class_names by name (a line break in a
 * name is a space in the checkpoint; looked up sorted, a table of 10^6
 * rows and 1000 classes is not 10^9 comparisons), else integers below its
 * classes. file: the table, for messages. */
static int table_labels(eval_ctx *e, const cdl_st_file *f, const char *file, cdl_dataset *d)
{
    const char *from;
    long classes = eval_meta_long(f, "classes");
    if (!d->class_names)
        return cdl_error("%s:1: the header has no label column '%s': %s needs the labels; "
                         "give --label-column, or predict on unlabelled rows with "
                         "cdl-predict %s %s", file, table_label(e->o, f),
                         e->o->prog, e->o->ckpt, file);
    /* Text labels and no names to match them to, of weights PyTorch wrote
     * (a cdl run without class_names had class indices): numbered in
     * sorted order, as LabelEncoder numbers them. */
    if (!model_names(e, f, &from) && !*meta(f, "dataset") && !e->derived_from[0] &&
        label_lines(d->class_names, d->n, &e->derived) != 0)
        return -1;
    const char *s = model_names(e, f, &from);
    int run_classes = 1;
    for (const char *p = s ? s : ""; *p; p++)
        run_classes += *p == '\n';
    char *copy = NULL;
    run_class *rc_list = NULL;
    int rc = 0;
    if (s && *s) {   /* the run's names, split at the line breaks of a copy, sorted */
        copy = cdl_malloc(strlen(s) + 1);
        rc_list = cdl_calloc((size_t)run_classes, sizeof *rc_list);
        if (!copy || !rc_list)
            rc = -1;
        char *p = copy;
        if (copy)
            strcpy(copy, s);
        for (int j = 0; !rc && j < run_classes; j++) {
            rc_list[j] = (run_class){p, j};
            p += strcspn(p, "\n");
            if (*p)
                *p++ = '\0';
        }
        if (!rc)
            qsort(rc_list, (size_t)run_classes, sizeof *rc_list, run_class_cmp);
    }
    long most = -1;
    for (int i = 0; !rc && i < d->n; i++) {
        char *name = d->class_names[i];
        /* Its line in the file (load_rows read d and keeps them). */
        long v = -1, line = e->lines ? e->lines[i] : i + 2;
        if (rc_list) {
            for (char *q = name; *q; q++)   /* as the checkpoint stores it */
                *q = *q == '\n' ? ' ' : *q;
            run_class key = {name, -1};
            const run_class *hit = bsearch(&key, rc_list, (size_t)run_classes,
                                           sizeof *rc_list, run_class_cmp);
            if (hit)
                v = hit->index;
            else if (e->derived_from[0] && s == e->derived)
                rc = cdl_error("%s:%ld: the label '%.200s' is not a class of the training "
                               "table %s, whose %d distinct labels, sorted as LabelEncoder "
                               "numbers them, name the outputs of %s (it stores no class "
                               "names): correct the label or drop the row, or give the "
                               "training's class names in the order of the outputs with "
                               "--classes FILE|A,B,...", file, line, name, e->derived_from,
                               run_classes, e->o->ckpt);
            else
                rc = cdl_error("%s:%ld: the label '%.200s' is not one of the %d classes "
                               "%s was trained on (%s): evaluate on rows of those classes: "
                               "correct the label or drop the row", file, line, name,
                               run_classes, e->o->ckpt, from);
        } else {
            char *end;
            v = strtol(name, &end, 10);
            if (!*name || *end || v < 0 || (classes > 0 && v >= classes) || v > 65535)
                rc = classes > 0 ? cdl_error("%s:%ld: the label '%.40s' is not a class index "
                                             "of the run (0 to %ld): correct the label or drop "
                                             "the row", file, line, name, classes - 1)
                                 : cdl_error("%s:%ld: the label '%.40s' is not a class index "
                                             "(an integer from 0): %s stores no class names to "
                                             "match texts to: give them with --classes "
                                             "FILE|A,B,...", file, line, name, e->o->ckpt);
        }
        d->labels[i] = (int32_t)v;
        most = v > most ? v : most;
    }
    cdl_free(copy);
    cdl_free(rc_list);
    for (int i = 0; i < d->n; i++)
        cdl_free(d->class_names[i]);
    cdl_free(d->class_names);
    d->class_names = NULL;
    d->classes = s && *s ? run_classes : classes > 0 ? (int)classes : (int)most + 1;
    return rc;
}

/* The table at path (a file, or a folder's train.csv). */
static void table_file(const char *dir, const char *name, char *file, size_t len)
{
    struct stat st;
    snprintf(file, len, "%s%s%s", dir, stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? "/" : "",
             stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? name : "");
}

/* a and b name the same table: a folder is its train.csv, so that
 * csv:DIR and csv:DIR/train.csv are the run's data alike (the one was
 * taken for a table of one's own, all of it held-out data, training rows
 * included, where the other gave the run's validation split). */
static int same_table(const char *a, const char *b)
{
    char fa[4096], fb[4096];
    if (!*a || !*b)
        return !strcmp(a, b);
    table_file(a, "train.csv", fa, sizeof fa);
    table_file(b, "train.csv", fb, sizeof fb);
    return same_path(fa, fb);
}

/* A labelled table of one's own (--dataset csv:FILE, no test.csv), all of
 * it held-out data: its columns matched to the run's by name (metadata
 * feature_columns, or --columns) as cdl-predict's rows are, its labels the
 * run's class indices, or names of the run's classes (table_labels). */
static int load_own_table(eval_ctx *e, const cdl_st_file *f, const char *dir)
{
    char file[4096];
    table_file(dir, "train.csv", file, sizeof file);
    if (load_rows(e, f, file, 0) != 0)
        return -1;
    snprintf(e->dataset, sizeof e->dataset, "csv");
    cdl_dataset *d = &e->data;
    long val = eval_meta_long(f, "val_samples");
    long run_n = eval_meta_long(f, "train_samples") + (val > 0 ? val : 0);
    if (table_labels(e, f, file, d) != 0)
        return -1;
    eval_note(e->o, "%s has no test split and is not the run's data: taking all its %d rows "
              "as held-out data%s\n", file, d->n, d->n == run_n ? " (as many as the run's "
              "training data: if it is a copy of it, it is not held out)" : "");
    return 0;
}

/* Weights that store no class names (PyTorch's), without --classes, and a
 * test.csv beside the train.csv: the outputs are named by train.csv's
 * labels, distinct and sorted (LabelEncoder fitted on the training data,
 * as cdl's reader numbers a test table's classes), not by test.csv's own,
 * which lack a class the test rows do not hold (then another count than
 * the outputs) or number the classes otherwise. The test rows' labels are
 * then looked up in them (table_labels). */
static int train_labels(eval_ctx *e, const cdl_st_file *f, const char *dir)
{
    const char *from;
    if (model_names(e, f, &from) || *meta(f, "dataset"))
        return 0;
    char file[4096];
    table_file(dir, "train.csv", file, sizeof file);
    int nf = 0;
    char *copy;
    const char **names;
    cdl_dataset t;
    memset(&t, 0, sizeof t);
    int rc = feature_names(e->o, f, file, &nf, &copy, &names);
    if (rc == 0 &&
        (rc = cdl_dataset_from_csv_rows(file, names, nf, table_label(e->o, f), NULL, 0, &t)))
        cdl_error("%s (read for the class names %s does not store: its outputs are named by "
                  "the training table's labels, sorted; give them with --classes FILE|A,B,... "
                  "to read the test table alone)", cdl_last_error(), e->o->ckpt);
    if (rc == 0 && !t.class_names)
        rc = cdl_error("%s:1: the header has no label column '%s': %s stores no class names, "
                       "which are then the training table's labels, sorted: give "
                       "--label-column, or the training's class names with --classes "
                       "FILE|A,B,...", file,
                       table_label(e->o, f), e->o->ckpt);
    if (rc == 0)
        rc = label_lines(t.class_names, t.n, &e->derived);
    if (rc == 0)
        snprintf(e->derived_from, sizeof e->derived_from, "%s", file);
    cdl_dataset_free(&t);
    cdl_free(copy);
    cdl_free(names);
    return rc ? -1 : 0;
}

/* A split of a CSV table for a model whose columns are known by name (the
 * run's, or --columns): the table is read once, by those names, so that a
 * table whose columns were moved since the training, or another table,
 * gives the run's features, not others by position. test: test.csv beside
 * train.csv (1: there is none; the caller decides); else train.csv (or the
 * file), whole in *all, for the caller to split. */
static int read_table_split(eval_ctx *e, const cdl_st_file *f, const char *dir, int test,
                            cdl_dataset *all)
{
    char file[4096];
    struct stat st;
    table_file(dir, "train.csv", file, sizeof file);
    int folder = stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(file, F_OK) == 0;
    if (test) {   /* csv_read's rule: a test split is a test.csv beside a train.csv */
        snprintf(file, sizeof file, "%s/test.csv", dir);
        if (!folder || access(file, F_OK) != 0)
            return 1;
    }
    char name[64];
    snprintf(name, sizeof name, "%s", e->dataset);
    int rc = load_rows(e, f, file, 1);
    snprintf(e->dataset, sizeof e->dataset, "%s", name);
    if (rc == 0 && test)
        rc = train_labels(e, f, dir);
    if (rc == 0)
        rc = table_labels(e, f, file, &e->data);
    *all = e->data;
    memset(&e->data, 0, sizeof e->data);
    e->have_data = 0;
    if (rc != 0)
        cdl_dataset_free(all);
    return rc ? -1 : 0;
}

/* The split o->split of the dataset: test as it is; train and val carved
 * the way the run did (its seed and validation count). Samples are read
 * and normalised with the run's options (run_options). */
static int load_data(eval_ctx *e, const cdl_st_file *f)
{
    const eval_opts *o = e->o;
    const char *name = o->dataset ? o->dataset : meta(f, "dataset");
    const char *dir = o->data_dir ? o->data_dir : meta(f, "data_dir");
    if (!*name)
        return cdl_error("%s has no dataset in its metadata (not written by cdl-train): pass "
                         "--dataset", o->ckpt);
    /* KIND:PATH, as cdl-train takes it. */
    char kind[64];
    const char *colon = strchr(name, ':');
    if (colon && (size_t)(colon - name) < sizeof kind) {
        snprintf(kind, sizeof kind, "%.*s", (int)(colon - name), name);
        if (!o->data_dir)
            dir = colon + 1;
        name = kind;
    }
    /* cdl-train writes the path absolute; an older cdl wrote it as given,
     * relative to the directory the run was started in. */
    if (!o->data_dir && *dir && *dir != '/' && access(dir, F_OK) != 0)
        return cdl_error("%s: the data path '%s' is relative to the directory its cdl-train run "
                         "was started in (the checkpoint is from an older cdl): run from there "
                         "or give --data-dir", o->ckpt, dir);
    snprintf(e->dataset, sizeof e->dataset, "%s", name);
    /* --columns names a table's columns; anything else was read without
     * it, so the user's columns were silently not the ones used. */
    if (o->columns && strcmp(name, "csv"))
        return cdl_error("--columns %.200s: names the feature columns of a CSV table, but the "
                         "data read is %s (%s), not a table: leave --columns out, or give a "
                         "table (--dataset csv:FILE)", o->columns, name,
                         o->dataset ? "--dataset" : "the run's");
    if (!strcmp(name, "text") || !strcmp(name, "tokens"))
        return load_token_split(e, f, name, dir);
    long val = eval_meta_long(f, "val_samples");
    const char *seed_s = meta(f, "seed");
    uint64_t seed = strtoull(seed_s, NULL, 10);
    /* The run validated on a folder of its own (an image folder's val/). */
    int val_folder = !strcmp(meta(f, "val_folder"), "1") && !strcmp(o->split, "val");
    int test = !strcmp(o->split, "test") || val_folder;
    int same = !strcmp(name, meta(f, "dataset"));
    if (!test && o->dataset && !same && val > 0)
        return cdl_error("--split %s of another dataset than the checkpoint's (%s): the "
                         "validation samples are unknown; use --split test", o->split,
                         meta(f, "dataset"));
    if (!strcmp(o->split, "val") && val <= 0 && !val_folder)
        return cdl_error("%s was trained without a validation split (--val-split 0, or an older "
                         "cdl): use --split test or train", o->ckpt);
    cdl_dataset all;
    if (!strcmp(name, "synthetic")) {
        long n = eval_meta_long(f, "synthetic_size");
        if (n <= 0)
            n = 10000;
        cdl_shape s = {3, 32, 32};   /* as cdl-train makes it */
        if (cdl_dataset_synthetic(test ? (n / 5 > 0 ? (int)n / 5 : 1) : (int)n, s, 10,
                                  test ? seed + 1 : seed, &all) != 0)
            return -1;
    } else {
        cdl_dataset_options opt;
        float *norm;
        run_options(o, f, &opt, &norm);
        /* Another dataset than the run's has its own statistics. */
        if (norm && !same && o->norm.kind == CDL_NORMALIZE_DEFAULT) {
            opt.normalize = CDL_NORMALIZE_DEFAULT;
            opt.norm_count = 0;
        }
        /* --channels other than the run's: its statistics (one pair per
         * channel) and its weights do not fit. */
        if (norm && same && opt.channels > 0 && opt.norm_count != 1 &&
            opt.norm_count != opt.channels) {
            cdl_shape s = {opt.channels, 0, 0};
            sscanf(meta(f, "input_shape"), "%*d,%d,%d", &s.h, &s.w);
            cdl_free(norm);
            return misfit_error(o, f, s);
        }
        /* Weights another program wrote (PyTorch's) on pictures or a
         * table: the statistics of the split read are a guess. */
        if (!norm && !*meta(f, "dataset") && o->norm.kind == CDL_NORMALIZE_DEFAULT &&
            strstr(CDL_DATASET_FORMATS, name))
            eval_note(o, "warning: %s does not store the normalisation its weights were "
                      "trained with (not written by cdl-train): using statistics computed "
                      "from the split read; give --normalize as the training did (PyTorch's "
                      "transforms.Normalize(mean, std) is --normalize M1,..,Mc,S1,..,Sc, "
                      "ToTensor() alone --normalize none)\n", o->ckpt);
        if (!norm && same && !o->files && !*meta(f, "tokens") &&
            o->norm.kind == CDL_NORMALIZE_DEFAULT)
            eval_note(o, "warning: %s does not store its normalisation (an older cdl): "
                      "using %s's defaults, which for %s are computed from the split read\n",
                      o->ckpt, name, CDL_DATASET_FORMATS);
        /* A table whose columns the model names: read once, by name. */
        int by_name = !strcmp(name, "csv") &&
                      (cdl_st_meta_get(f, "feature_columns") || o->columns);
        int rc = by_name ? read_table_split(e, f, dir, test, &all)
                         : cdl_dataset_load_with(name, *dir ? dir : NULL,
                                                 val_folder ? CDL_SPLIT_VAL
                                                 : test     ? CDL_SPLIT_TEST
                                                            : CDL_SPLIT_TRAIN,
                                                 &opt, &all);
        /* A held-out folder of one's own, not the run's (class folders,
         * no test/): it has no test split of its own, and the run's
         * validation split cannot be drawn from it. All of it is the
         * held-out set (read before norm, which opt points into, is
         * freed). A table only where the model's columns are known by
         * name: by position a reordered one would be read silently. */
        if (rc == 1 && test && by_name && !same_table(dir, meta(f, "data_dir"))) {
            cdl_free(norm);
            return load_own_table(e, f, dir);
        }
        if (rc == 1 && test && !val_folder && !strcmp(name, "imagefolder") &&
            !same_path(dir, meta(f, "data_dir"))) {
            rc = cdl_dataset_load_with(name, dir, CDL_SPLIT_TRAIN, &opt, &all);
            long run_n = eval_meta_long(f, "train_samples") + (val > 0 ? val : 0);
            if (rc == 0)
                eval_note(o, "%s has no test split and is not the run's data: "
                          "taking all its %d samples as held-out data%s\n", dir,
                          all.n, all.n == run_n ? " (as many as the run's training data: if it "
                          "is a copy of it, it is not held out)" : "");
        }
        cdl_free(norm);
        if (rc == 1 && e->split_default && val > 0 && same) {
            /* One folder per class, no test/: the held-out samples are the
             * run's validation split, which it reported every epoch. */
            eval_note(o, "the data in %s has no test split: evaluating the run's "
                      "validation split (--split val)\n", dir);
            e->own.split = "val";
            return load_data(e, f);
        }
        if (rc == 1 && val_folder)
            return cdl_error("%s: the data in %s has no val/ beside test/ any more, the run's "
                             "validation split: use --split test or train", name, dir);
        if (rc == 1)
            return cdl_error("%s: the data in %s has no test split: use --split val or train",
                             name, dir);
        if (rc != 0)
            return -1;
        if (all.skipped)
            eval_note(o, "--skip-bad-files: left out %ld unreadable files of %s\n",
                      all.skipped, dir);
        /* Weights another program wrote on a named dataset: its published
         * statistics, which a PyTorch training may not have used. */
        if (!norm && !*meta(f, "dataset") && o->norm.kind == CDL_NORMALIZE_DEFAULT &&
            !strstr(CDL_DATASET_FORMATS, name) && all.images && all.shape.c <= 3) {
            char ms[96] = "", ss[96] = "";
            for (int k = 0; k < all.shape.c; k++) {
                snprintf(ms + strlen(ms), sizeof ms - strlen(ms), "%s%.4g", k ? "," : "",
                         all.mean[k]);
                snprintf(ss + strlen(ss), sizeof ss - strlen(ss), "%s%.4g", k ? "," : "",
                         all.std[k]);
            }
            eval_note(o, "note: %s does not store the normalisation its weights were "
                      "trained with (not written by cdl-train): using %s's published mean "
                      "%s and std %s; give --normalize if the training used others\n", o->ckpt,
                      name, ms, ss);
        }
    }
    if (test || val <= 0) {
        e->data = all;
        e->have_data = 1;
        return 0;
    }
    /* The split is drawn from (seed, samples, count): with another number
     * of samples than the run's (pictures added or removed since, files
     * skipped then and not now) it would be other samples, silently. */
    long run_train = eval_meta_long(f, "train_samples");
    if (run_train > 0 && run_train + val != all.n) {
        long n = all.n;
        cdl_dataset_free(&all);
        return cdl_error("%s: the training data in %s holds %ld samples, the run's held %ld "
                         "(%ld trained on, %ld for validation): the run's %s samples cannot be "
                         "found again in other data: use --split test, or the data as it was "
                         "(and --skip-bad-files if the run had it)", o->ckpt, dir, n,
                         run_train + val, run_train, val, o->split);
    }
    cdl_dataset v;
    if (cdl_dataset_split(&all, val, seed, &v) != 0) {
        cdl_dataset_free(&all);
        return -1;
    }
    if (!strcmp(o->split, "val")) {
        e->data = v;
        cdl_dataset_free(&all);
    } else {
        e->data = all;
        cdl_dataset_free(&v);
    }
    e->have_data = 1;
    return 0;
}

/* path names a CSV table (by its suffix, as a spreadsheet saves it). */
static int is_table(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && !strcasecmp(path + n - 4, ".csv");
}

/* Rows of a table, labelled or not, read by the model's feature column
 * names (feature_names: the checkpoint's, or --columns; by position a
 * reordered or renamed column would be read wrong, silently); other
 * columns are left out with a note, and the rows are normalised with the
 * run's statistics (or --normalize). The label column's text, where the
 * table has it, is data.class_names, labels the row numbers. split: the
 * rows are a dataset split, whose statistics --normalize auto (or weights
 * that store none) computes from the rows read; cdl-predict's FILE.csv
 * has none to compute. */
static int load_rows(eval_ctx *e, const cdl_st_file *f, const char *path, int split)
{
    const eval_opts *o = e->o;
    int nf = 0;
    char *copy;
    const char **names;
    cdl_dataset_options opt;
    float *norm = NULL;
    int rc = feature_names(o, f, path, &nf, &copy, &names);
    if (rc == 0)
        run_options(o, f, &opt, &norm);
    int compute = o->norm.kind == CDL_NORMALIZE_COMPUTE ||
                  (o->norm.kind == CDL_NORMALIZE_DEFAULT && !norm);
    if (rc == 0 && !split && o->norm.kind == CDL_NORMALIZE_COMPUTE)
        rc = cdl_error("--normalize auto computes statistics from a dataset split, which %s is "
                       "not: leave --normalize out (the run's statistics) or give the values",
                       path);
    static const float zero = 0, one = 1;
    if (rc == 0 && o->norm.kind == CDL_NORMALIZE_NONE) {
        opt.norm_count = 1;
        opt.norm_mean = &zero;
        opt.norm_std = &one;
    } else if (rc == 0 && !split && compute) {
        rc = cdl_error("%s does not store the normalisation of its table's columns: give "
                       "--normalize as the training did", o->ckpt);
    }
    if (rc == 0 && !compute && opt.norm_count != 1 && opt.norm_count != nf)
        rc = cdl_error("%s: %d means and deviations for %d feature columns: give one pair, or "
                       "one per column", o->norm.kind == CDL_NORMALIZE_GIVEN ? "--normalize"
                       : o->ckpt, opt.norm_count, nf);
    char ignored[512];
    cdl_free(e->lines);
    e->lines = NULL;
    if (rc == 0)
        rc = cdl_dataset_from_csv_rows_lines(path, names, nf, table_label(o, f), ignored,
                                             sizeof ignored, &e->data, &e->lines);
    if (rc == 0) {
        e->have_data = 1;
        cdl_dataset *d = &e->data;
        float *m = d->channel_mean ? d->channel_mean : d->mean;
        float *sd = d->channel_mean ? d->channel_std : d->std;
        for (int k = 0; k < nf; k++) {
            if (compute) {   /* as the CSV reader computes them (sums in double) */
                double sum = 0, sq = 0;
                for (int i = 0; i < d->n; i++) {
                    double x = d->features[(size_t)i * nf + k];
                    sum += x;
                    sq += x * x;
                }
                double mean = sum / d->n, var = sq / d->n - mean * mean;
                m[k] = (float)mean;
                sd[k] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
            } else {
                m[k] = opt.norm_mean[opt.norm_count == 1 ? 0 : k];
                sd[k] = opt.norm_std[opt.norm_count == 1 ? 0 : k];
            }
        }
        snprintf(e->dataset, sizeof e->dataset, "table");
        if (*ignored)
            eval_note(o, "note: %s: column%s %s %s not among the model's feature columns: "
                      "not read\n", path, strchr(ignored, ',') ? "s" : "", ignored,
                      strchr(ignored, ',') ? "are" : "is");
    }
    cdl_free(norm);
    cdl_free(copy);
    cdl_free(names);
    return rc;
}

/* cdl-predict FILE...: the pictures, scaled and cropped to the model's
 * input as the run's image folder was, normalised with the run's
 * statistics. A checkpoint without them (an older cdl) takes both from its
 * dataset's training split, with a warning. */
static int load_files(eval_ctx *e, const cdl_st_file *f)
{
    const eval_opts *o = e->o;
    for (int i = 0; i < o->nfiles; i++)
        if (is_table(o->files[i]) != is_table(o->files[0]))
            return cdl_error("%s and %s: give pictures or one CSV table, not both", o->files[0],
                             o->files[i]);
    if (is_table(o->files[0]) && o->nfiles > 1)
        return cdl_error("%s and %s: give one CSV table (rows are numbered within it)",
                         o->files[0], o->files[1]);
    if (is_table(o->files[0])) {
        e->table = 1;
        return load_rows(e, f, o->files[0], 0);
    }
    if (o->columns)
        return cdl_error("--columns %.200s: names the feature columns of a CSV table's rows, but "
                         "%s%s %s: leave --columns out for pictures", o->columns, o->files[0],
                         o->nfiles > 1 ? " and the other FILEs" : "",
                         o->nfiles > 1 ? "are pictures" : "is a picture");
    cdl_shape s = {0, 0, 0};
    cdl_dataset_options opt;
    float *norm;
    run_options(o, f, &opt, &norm);
    sscanf(meta(f, "input_shape"), "%d,%d,%d", &s.c, &s.h, &s.w);
    float mean[3], std[3];
    /* Weights another program wrote (PyTorch's): no stored shape or
     * statistics, and no training data to take them from. The shape is
     * the spec's input line, else --image-size and --channels (3:
     * torchvision's ImageFolder reads RGB); the statistics --normalize. */
    if (!*meta(f, "dataset") && s.c == 0) {
        cdl_model_spec spec;
        if (o->model && !cdl_spec_is_builtin(o->model) && cdl_spec_load(o->model, &spec) == 0)
            s = spec.input;
        if (!o->image_size && !s.c) {
            cdl_free(norm);
            return cdl_error("%s does not store its pictures' size (not written by cdl-train): "
                             "give --image-size N (and --channels 1 for grayscale), or an input "
                             "CxHxW line in the --model spec", o->ckpt);
        }
        if (!s.c)
            s.c = 3;
        if (o->norm.kind == CDL_NORMALIZE_DEFAULT || o->norm.kind == CDL_NORMALIZE_COMPUTE) {
            cdl_free(norm);
            return cdl_error("%s does not store the normalisation its weights were trained "
                             "with (not written by cdl-train): give --normalize as the training "
                             "did (PyTorch's transforms.Normalize(mean, std) is --normalize "
                             "M1,..,Mc,S1,..,Sc, ToTensor() alone --normalize none)", o->ckpt);
        }
    }
    if (o->norm.kind == CDL_NORMALIZE_COMPUTE) {
        cdl_free(norm);
        return cdl_error("--normalize auto computes statistics from a dataset split, which files "
                         "are not: give the values the weights were trained with");
    }
    static const float zero = 0, one = 1;
    if (o->norm.kind == CDL_NORMALIZE_NONE) {
        opt.norm_count = 1;
        opt.norm_mean = &zero;
        opt.norm_std = &one;
    }
    int given = o->norm.kind == CDL_NORMALIZE_GIVEN || o->norm.kind == CDL_NORMALIZE_NONE;
    if (given && o->channels)
        s.c = o->channels;
    if (given && opt.norm_count != 1 && opt.norm_count != s.c) {
        cdl_free(norm);
        return cdl_error("--normalize gives %d means and deviations for pictures of %d channels: "
                         "give one pair, or one per channel", opt.norm_count, s.c);
    }
    if ((norm || given) && s.c >= 1 && s.c <= 3 &&
        (opt.norm_count == s.c || opt.norm_count == 1)) {
        for (int k = 0; k < 3; k++) {
            mean[k] = opt.norm_mean[opt.norm_count == 1 ? 0 : (k < s.c ? k : 0)];
            std[k] = opt.norm_std[opt.norm_count == 1 ? 0 : (k < s.c ? k : 0)];
        }
        cdl_free(norm);
    } else {
        cdl_free(norm);
        eval_note(o, "warning: %s does not store its input shape and normalisation (an "
                  "older cdl): taking them from its dataset's training split\n", o->ckpt);
        eval_opts train = *o;
        train.split = "train";
        eval_ctx t = {.o = &train};
        if (load_data(&t, f) != 0)
            return -1;
        s = t.data.shape;
        memcpy(mean, t.data.mean, sizeof mean);
        memcpy(std, t.data.std, sizeof std);
        cdl_dataset_free(&t.data);
    }
    if (o->image_size)
        s.h = s.w = o->image_size;
    if (o->channels)
        s.c = o->channels;
    /* (F,1,1): F features of a table or of vectors. With F = 1 or 3 a
     * picture would be squeezed to one pixel and "predicted" without a
     * word. */
    if (s.h == 1 && s.w == 1)
        return cdl_error("%s was trained on rows of %d features (dataset %s), not pictures: "
                         "%s", o->ckpt, s.c, *meta(f, "dataset") ? meta(f, "dataset") : "unknown",
                         !strcmp(meta(f, "dataset"), "csv")
                             ? "give its rows as a CSV table (FILE.csv, with or without the "
                               "label column: docs/data.md)"
                             : "predict on rows with --dataset");
    if (s.c != 1 && s.c != 3)
        return cdl_error("%s was trained on samples of %d channels, not pictures: predict with "
                         "--dataset instead of files", o->ckpt, s.c);
    /* A folder among the FILEs: the pictures in it were meant (the
     * reader's advice about folder layouts and plain files would not say
     * how to give them). */
    for (int i = 0; i < o->nfiles; i++) {
        struct stat st;
        if (stat(o->files[i], &st) == 0 && S_ISDIR(st.st_mode))
            return cdl_error("%s is a folder: give the pictures in it (%s/*.jpg %s/*.png), or "
                             "a folder of the run's class folders as --dataset imagefolder:%s",
                             o->files[i], o->files[i], o->files[i], o->files[i]);
    }
    cdl_dataset_options fo;
    cdl_dataset_options_defaults(&fo);
    fo.threads = o->threads;
    fo.skip_bad_files = o->skip_bad_files;
    fo.jpeg_full = eval_jpeg_full(o, f);
    if (cdl_dataset_from_image_files_with((const char *const *)o->files, o->nfiles, s, &fo,
                                          &e->data) != 0) {
        /* The readers' advice is for image folders: here the file was
         * named on the command line. */
        char why[1024];
        snprintf(why, sizeof why, "%s", cdl_last_error());
        char *cut = strstr(why, ": remove it from the folder or pass --skip-bad-files");
        if (cut)
            return cdl_error("%.*s: leave it out or pass --skip-bad-files", (int)(cut - why),
                             why);
        return -1;
    }
    e->have_data = 1;
    memcpy(e->data.mean, mean, sizeof mean);
    memcpy(e->data.std, std, sizeof std);
    snprintf(e->dataset, sizeof e->dataset, "files");
    if (e->data.skipped)
        eval_note(o, "--skip-bad-files: left out %ld unreadable files\n",
                  e->data.skipped);
    return 0;
}

/* --model given for a cdl run's checkpoint whose weights fit it: a model
 * that computes otherwise with the same tensors (the spec file edited
 * since, relu -> tanh; gpt's n_head) would be evaluated without a word.
 * It is what the user asked for (--model FILE reads the file as it is
 * now), so said, not refused. The run's model: its saved spec text, else
 * its built-in name (an older checkpoint of a spec file: not known). */
static void warn_other_function(const eval_opts *o, const cdl_st_file *f,
                                const cdl_model_spec *given, cdl_shape input, long classes)
{
    const char *run = meta(f, "model"), *text = cdl_st_meta_get(f, "model_spec");
    if (!o->model || !*run || (!(text && *text) && !cdl_spec_is_builtin(run)))
        return;
    cdl_model_spec *was = cdl_malloc(sizeof *was);
    if (!was)
        return;
    char why[1024];
    int built = text && *text ? cdl_spec_parse(text, run, was) == 0 &&
                                    cdl_spec_fit(was, input, (int)classes) == 0
                              : cdl_spec_builtin(run, input, (int)classes, was) == 0;
    if (built) {
        snprintf(was->source, sizeof was->source, "the run's %s", run);
        if (cdl_spec_compare(given, was, why, sizeof why) == 1)
            eval_note(o, "warning: --model %s is not the model %s was trained as, though "
                      "its tensors fit: %s. These results are those of --model %s; leave "
                      "--model out for the run's model\n", o->model,
                      o->ckpt, why, o->model);
    }
    cdl_free(was);
}

cdl_model *eval_model(const eval_opts *o, const cdl_st_file *f, cdl_shape input, int batch,
                      long classes, cdl_backend *be)
{
    const char *name = o->model ? o->model : meta(f, "model");
    cdl_model_spec spec;
    if (!*name) {
        cdl_error("%s has no model in its metadata (not written by cdl-train): pass "
                  "--model lenet|mlp|resnet20|resnet18|resnet50|...|FILE", o->ckpt);
        return NULL;
    }
    /* A spec file's checkpoint carries its text: the model the run
     * trained, wherever this runs and whatever the file holds now. */
    const char *text = o->model ? NULL : cdl_st_meta_get(f, "model_spec");
    char where[sizeof spec.source];
    snprintf(where, sizeof where, "%s (as saved in %s)", name, o->ckpt);
    if (cdl_spec_is_builtin(name)) {
        if (cdl_spec_builtin(name, input, (int)classes, &spec) != 0)
            return NULL;
    } else if ((text && *text ? cdl_spec_parse(text, where, &spec) : cdl_spec_load(name, &spec)) != 0 ||
               cdl_spec_fit(&spec, input, (int)classes) != 0) {
        return NULL;   /* fit: the sizes a gpt line leaves to the data */
    }
    cdl_model *m = cdl_model_create(&spec, input, batch, be);
    if (!m) {
        /* A saved spec's input line, or a layer that cannot take the
         * samples: the data is the misfit when it differs from the run's. */
        misfit_error(o, f, input);
        return NULL;
    }
    if (cdl_model_load_weights(m, o->ckpt, NULL) != 0) {
        cdl_model_destroy(m);
        /* Samples of another shape than the run's (--image-size,
         * --channels, other data): say so, rather than the weights
         * loader's advice for cdl-train (--init-ignore). */
        if (misfit_error(o, f, input) == 0)
            other_model_error(o, f, name);
        return NULL;
    }
    warn_other_function(o, f, &spec, input, classes);
    return m;
}

static int build_model(eval_ctx *e, const cdl_st_file *f)
{
    const eval_opts *o = e->o;
    const char *from, *names = model_names(e, f, &from);
    int named = 1;
    for (const char *p = names ? names : ""; *p; p++)
        named += *p == '\n';
    long classes = eval_meta_long(f, "classes");
    if (classes <= 0)
        classes = e->given ? named : e->data.classes;
    long per_rank = ((long)e->data.n + e->ri.world - 1) / e->ri.world;
    e->batch = per_rank < o->batch_size ? (int)(per_rank > 0 ? per_rank : 1) : o->batch_size;
    e->model = eval_model(o, f, e->data.shape, e->batch, classes, e->be);
    if (!e->model)
        return -1;
    e->positions = cdl_model_positions(e->model);
    e->classes = cdl_model_outputs(e->model) / e->positions;
    /* The names of weights that store none, each an output's. */
    const char *stored = cdl_st_meta_get(f, "class_names");
    if (e->given && !(stored && *stored) && named != e->classes)
        return cdl_error("--classes %.200s names %d classes, but the model has %d outputs: give "
                         "one name per output, in the order of the outputs", o->classes, named,
                         e->classes);
    if (!stored && !e->given && e->positions == 1 &&
        (e->derived ? named : !o->files && e->data.class_names ? e->data.classes : e->classes) !=
            e->classes)
        return cdl_error("%s stores no class names (not written by cdl-train) and the %s data%s%s "
                         "has %d classes, the model %d outputs: which output is which class is "
                         "not known: give the training's class names with --classes FILE|A,B,..., "
                         "in the order of the model's outputs (ImageFolder's classes, "
                         "LabelEncoder's classes_)", o->ckpt, e->dataset,
                         e->derived_from[0] ? "'s training table " : "", e->derived_from,
                         e->derived ? named : e->data.classes, e->classes);
    if (!e->o->files && e->classes < e->data.classes)
        return cdl_error("%s: the model has %d outputs but dataset %s has %d classes: pass the "
                         "dataset it was trained on", o->ckpt, e->classes, e->dataset,
                         e->data.classes);
    return 0;
}

/* The data's labels as the run's class indices. Class folders and text
 * labels are numbered by the data's own sorted names: a folder with some
 * of the run's classes (cat, zebra of cat, dog, zebra) numbers zebra 1,
 * which the model calls dog. Matched by name (a line break in a name is a
 * space in the checkpoint); a class the run did not have is an error. */
static int map_labels(eval_ctx *e, const cdl_st_file *f)
{
    const char *from, *s = model_names(e, f, &from);
    cdl_dataset *d = &e->data;
    if (!s || !*s || !d->class_names)
        return 0;
    int run_classes = 1;
    for (const char *p = s; *p; p++)
        run_classes += *p == '\n';
    int *map = cdl_malloc((size_t)d->classes * sizeof *map);
    if (!map)
        return -1;
    int rc = 0, identity = 1;
    for (int k = 0; k < d->classes; k++) {
        const char *name = d->class_names[k] ? d->class_names[k] : "";
        size_t len = strlen(name);
        map[k] = -1;
        const char *p = s;
        for (int j = 0; j < run_classes; j++) {
            size_t n = strcspn(p, "\n");
            int same = n == len;
            for (size_t i = 0; same && i < n; i++)
                same = p[i] == (name[i] == '\n' ? ' ' : name[i]);
            if (same) {
                map[k] = j;
                break;
            }
            p += n + (p[n] == '\n');
        }
        identity &= map[k] == k;
    }
    /* d->classes stays: it counts d->class_names (freed with it); the
     * model's outputs are the run's classes. A class the run lacks is an
     * error where a sample has it (a test split's class list is its
     * training folder's, which may hold more). */
    for (long i = 0; !identity && !rc && i < d->n; i++) {
        int k = d->labels[i];
        if (map[k] < 0)
            rc = cdl_error("%s: class '%.200s' of the %s data is not one of the %d classes "
                           "the run was trained on (%s): evaluate on data of those classes",
                           e->o->ckpt, d->class_names[k] ? d->class_names[k] : "", e->dataset,
                           run_classes, from);
        else
            d->labels[i] = map[k];
    }
    cdl_free(map);
    return rc;
}

/* The class names: the checkpoint's ("class_names", one per line), else
 * the dataset's, else none (indices are printed). */
static int class_names(eval_ctx *e, const cdl_st_file *f)
{
    const char *src, *s = model_names(e, f, &src);
    /* cdl-predict's rows of weights that store no names: their label
     * column's texts sorted (LabelEncoder's numbering), when they are as
     * many as the outputs; else indices. */
    if (!s && e->table == 1 && e->data.class_names && !*meta(f, "dataset")) {
        if (label_lines(e->data.class_names, e->data.n, &e->derived) != 0)
            return -1;
        int n = 1;
        for (const char *p = e->derived ? e->derived : ""; *p; p++)
            n += *p == '\n';
        if (e->derived && n == e->classes) {
            eval_note(e->o, "note: %s stores no class names: naming its %d outputs by the "
                      "sorted labels of %s (as LabelEncoder numbers them); give --classes "
                      "if the training numbered them otherwise\n", e->o->ckpt, n,
                      e->o->files[0]);
            s = e->derived;
        } else if (e->derived) {
            eval_note(e->o, "note: %s stores no class names, and the %d labels of %s are not "
                      "its %d classes: printing class indices; give the training's class names "
                      "with --classes\n", e->o->ckpt, n, e->o->files[0], e->classes);
        }
    }
    if (!s)
        s = cdl_st_meta_get(f, "class_names");
    if (!s && !e->data.class_names)
        return 0;
    e->names = cdl_calloc((size_t)e->classes, sizeof *e->names);
    if (!e->names)
        return -1;
    for (int k = 0; k < e->classes; k++) {
        const char *from = NULL;
        size_t n = 0;
        if (s && *s) {
            n = strcspn(s, "\n");
            from = s;
            s += n + (s[n] == '\n');
        } else if (!cdl_st_meta_get(f, "class_names") && !e->o->files && k < e->data.classes &&
                   e->data.class_names[k]) {
            from = e->data.class_names[k];
            n = strlen(from);
        }
        if (!from)
            continue;
        if (!(e->names[k] = cdl_malloc(n + 1)))
            return -1;
        memcpy(e->names[k], from, n);
        e->names[k][n] = '\0';
    }
    return 0;
}

/* SIGTERM or SIGUSR1 (scancel, the time limit, cdlrun stopping the ranks)
 * while the ranks connect: a rank that never comes held the others until
 * CDL_TIMEOUT where the launcher kept the signal blocked, and elsewhere the
 * default action killed them without a word of where they were. As
 * cdl-train: the signal is caught while the group is set up, every wait
 * of the set-up is left at once, and the error names the rank and the
 * wait (exit status 1). Afterwards the program's dispositions and signal
 * mask are back. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

static int stop_requested(void)
{
    return stop_signal != 0;
}

static cdl_dist *create_dist(const cdl_rank_info *ri, cdl_backend *be,
                             const cdl_dist_config *dc)
{
    struct sigaction sa, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGUSR1);
    stop_signal = 0;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);
    /* A signal the launcher held blocked is seen (cdl-train does the same);
     * blocked again afterwards. */
    sigset_t old_mask;
    pthread_sigmask(SIG_UNBLOCK, &stops, &old_mask);
    cdl_dist *d = cdl_dist_create_stoppable(ri, "auto", be, dc, stop_requested);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    int sig = stop_signal;
    if (!d && sig) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cdl_last_error());
        cdl_error("stopped by a signal (%s) while connecting to the other ranks, before "
                  "evaluating anything (%s): start it again to evaluate", sig == SIGTERM ?
                  "SIGTERM" : "SIGUSR1", why);
    } else if (d && sig) {
        /* Set up as the signal came: what it does to the program now. */
        raise(sig);
    }
    return d;
}

int eval_open(eval_ctx *e, const eval_opts *o)
{
    memset(e, 0, sizeof *e);
    e->own = *o;
    e->o = &e->own;
    e->ri.rank = 0;
    e->ri.world = 1;
    if (o->distributed && cdl_rank_discover(&e->ri) != 0)
        return -1;
    e->own.quiet = e->ri.rank > 0;
    e->be = eval_backend(o, &e->ri);
    if (!e->be)
        return -1;
    if (e->ri.world > 1) {
        static cdl_dist_config dc;
        if (cdl_dist_config_from_env(&dc) != 0)
            return -1;
        e->dist = create_dist(&e->ri, e->be, &dc);
        if (!e->dist)
            return -1;
    }
    cdl_st_file *f = cdl_st_open(o->ckpt);
    if (!f)
        return -1;
    /* A newer cdl's checkpoint: its metadata may mean something else. */
    if (cdl_ckpt_check_format(f) != 0) {
        cdl_st_close(f);
        return -1;
    }
    /* --classes (checked when parsed): the names of weights that store
     * none; a checkpoint that stores others is not relabelled. */
    if (o->classes) {
        char why[160];
        int n;
        const char *stored = cdl_st_meta_get(f, "class_names");
        if (!(e->given = eval_classes_lines(o->classes, &n, why, sizeof why))) {
            cdl_st_close(f);
            return cdl_error("--classes %.200s: %s", o->classes, why);
        }
        if (stored && *stored && strcmp(stored, e->given)) {
            char list[512];
            snprintf(list, sizeof list, "%s", stored);
            for (char *p = list; *p; p++)
                *p = *p == '\n' ? ',' : *p;
            cdl_error("--classes %.200s: %s stores its class names, %s%s (its metadata "
                      "class_names), in the order of its outputs: leave --classes out",
                      o->classes, o->ckpt, list, strlen(stored) >= sizeof list ? "..." : "");
            cdl_st_close(f);
            return -1;
        }
    }
    /* The run's config as train_config_json wrote it, ..."label_smoothing":X,... */
    const char *ls = strstr(meta(f, "config"), "\"label_smoothing\":");
    e->label_smoothing = ls ? strtod(ls + strlen("\"label_smoothing\":"), NULL) : 0;
    /* A language model: the checkpoint says so, or (a file PyTorch wrote)
     * the --dataset of token windows given with it. */
    const char *kind = o->dataset ? o->dataset : "";
    size_t kn = strcspn(kind, ":");
    int tokens = *meta(f, "tokens") || (kn == 4 && !strncmp(kind, "text", 4)) ||
                 (kn == 6 && !strncmp(kind, "tokens", 6));
    if (!o->split || !*o->split) {
        e->own.split = tokens ? "val" : "test";
        e->split_default = 1;
    }
    o = e->o;
    if (tokens && !o->sequences) {
        cdl_st_close(f);
        return cdl_error("%s is a language model (trained on token windows): sample text from "
                         "it with cdl-generate, or measure its loss with cdl-eval", o->ckpt);
    }
    int rc = o->files ? load_files(e, f) : load_data(e, f);
    if (rc == 0 && !o->files)
        rc = map_labels(e, f);
    if (rc == 0)
        rc = build_model(e, f);
    if (rc == 0)
        rc = class_names(e, f);
    cdl_st_close(f);
    if (rc != 0)
        return -1;
    size_t sample = (size_t)e->data.shape.c * e->data.shape.h * e->data.shape.w;
    if (!e->be->host_memory) {
        e->x_dev = e->be->ops->alloc(e->be, (size_t)e->batch * sample * sizeof(float));
        if (!e->x_dev)
            return -1;
    }
    e->logits = cdl_malloc((size_t)e->batch * (size_t)cdl_model_outputs(e->model) *
                           sizeof(float));
    return e->logits ? 0 : -1;
}

int eval_run(eval_ctx *e, eval_batch_fn fn, void *cb_ctx)
{
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    lc.batch_size = e->batch;
    lc.workers = e->o->workers;
    lc.rank = e->ri.rank;
    lc.world = e->ri.world;
    cdl_loader *l = cdl_loader_create(&e->data, &lc);
    if (!l)
        return -1;
    cdl_backend *be = e->be;
    size_t sample = (size_t)e->data.shape.c * e->data.shape.h * e->data.shape.w;
    cdl_batch b;
    int got, rc = cdl_loader_start_epoch(l, 0, 0);
    long first = 0;
    while (rc == 0 && (got = cdl_loader_next(l, &b)) == 1) {
        const float *x = b.x;
        if (e->x_dev) {
            be->ops->to_device(be, e->x_dev, b.x, (size_t)b.n * sample * sizeof(float));
            x = e->x_dev;
        }
        const float *logits = cdl_model_forward(e->model, x, b.n, 0, 0);
        if (!logits) {
            rc = -1;
            break;
        }
        be->ops->to_host(be, e->logits, logits,
                         (size_t)b.n * (size_t)cdl_model_outputs(e->model) * sizeof(float));
        if (be->ops->sync(be) != 0 ||
            fn(cb_ctx, e, e->ri.world > 1 ? -1 : first, b.n, b.y, e->logits) != 0)
            rc = -1;
        first += b.n;
    }
    if (rc == 0 && got < 0)
        rc = -1;
    cdl_loader_destroy(l);
    return rc;
}

void eval_close(eval_ctx *e)
{
    if (e->be && e->x_dev)
        e->be->ops->free(e->be, e->x_dev);
    cdl_free(e->logits);
    for (int k = 0; e->names && k < e->classes; k++)
        cdl_free(e->names[k]);
    cdl_free(e->names);
    cdl_free(e->given);
    cdl_free(e->derived);
    cdl_model_destroy(e->model);
    if (e->have_data)
        cdl_dataset_free(&e->data);
    cdl_free(e->lines);
    cdl_dist_destroy(e->dist);
    if (e->be)
        cdl_backend_destroy(e->be);
    memset(e, 0, sizeof *e);
}

const char *eval_class_name(const eval_ctx *e, int k, char *buf, size_t len)
{
    if (e->names && e->names[k])
        return e->names[k];
    snprintf(buf, len, "%d", k);
    return buf;
}

void eval_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void eval_json_number(FILE *f, const char *fmt, double v)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

int eval_parse_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "%s: --%s '%.80s': expected an integer from %d to %d (see %s --help)\n",
                prog, opt, s, lo, hi, prog);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int eval_parse_tf32(const char *prog, const char *arg, const char **out)
{
    int conv, matmul;
    if (cdl_backend_parse_tf32(arg, "--tf32", &conv, &matmul) != 0) {
        fprintf(stderr, "%s: %s\n", prog, cdl_last_error());
        return -1;
    }
    *out = arg;
    return 0;
}

int eval_common_option(eval_opts *o, int c, const char *arg, char **argv,
                       void (*usage)(FILE *))
{
    const char *prog = o->prog;
    switch (c) {
    case 'm': o->model = arg; return EVAL_OPT_OK;
    case 'd': o->dataset = arg; return EVAL_OPT_OK;
    case EVAL_OPT_DATA_DIR: o->data_dir = arg; return EVAL_OPT_OK;
    case EVAL_OPT_SPLIT:
        if (strcmp(arg, "test") && strcmp(arg, "val") && strcmp(arg, "train")) {
            fprintf(stderr, "%s: --split '%.80s': expected test, val or train\n", prog, arg);
            return EVAL_OPT_BAD;
        }
        o->split = arg;
        return EVAL_OPT_OK;
    case EVAL_OPT_BATCH:
        return eval_parse_int(prog, "batch-size", arg, 1, 65536, &o->batch_size) ? EVAL_OPT_BAD
                                                                                 : EVAL_OPT_OK;
    case 't':
        return eval_parse_int(prog, "threads", arg, 1, 1024, &o->threads) ? EVAL_OPT_BAD
                                                                          : EVAL_OPT_OK;
    case EVAL_OPT_WORKERS:
        return eval_parse_int(prog, "workers", arg, 0, 64, &o->workers) ? EVAL_OPT_BAD
                                                                        : EVAL_OPT_OK;
    case EVAL_OPT_DEVICE:
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda") && strcmp(arg, "auto")) {
            fprintf(stderr, "%s: --device '%.80s': expected cpu, cuda or auto\n", prog, arg);
            return EVAL_OPT_BAD;
        }
        o->device = arg;
        return EVAL_OPT_OK;
    case EVAL_OPT_TF32:
        return eval_parse_tf32(prog, arg, &o->tf32) ? EVAL_OPT_BAD : EVAL_OPT_OK;
    case EVAL_OPT_IMAGE_SIZE:
        return eval_parse_int(prog, "image-size", arg, 1, 4096, &o->image_size) ? EVAL_OPT_BAD
                                                                                 : EVAL_OPT_OK;
    case EVAL_OPT_CHANNELS:
        if (strcmp(arg, "1") && strcmp(arg, "3")) {
            fprintf(stderr, "%s: --channels '%.80s': expected 1 (grayscale) or 3 (RGB)\n", prog,
                    arg);
            return EVAL_OPT_BAD;
        }
        o->channels = arg[0] - '0';
        return EVAL_OPT_OK;
    case EVAL_OPT_LABEL_COLUMN: o->label_column = arg; return EVAL_OPT_OK;
    case EVAL_OPT_COLUMNS: {
        /* Names between commas, none empty unless quoted (eval_comma_lines). */
        char why[160];
        char *lines = eval_comma_lines(arg, "column", why, sizeof why);
        if (!lines) {
            fprintf(stderr, "%s: --columns '%.80s': %s: give the feature column names "
                    "separated by commas, \"\" for one without a name (see %s --help)\n", prog,
                    arg, why, prog);
            return EVAL_OPT_BAD;
        }
        cdl_free(lines);
        o->columns = arg;
        return EVAL_OPT_OK;
    }
    case EVAL_OPT_CLASSES: {
        char why[160];
        int n;
        char *lines = eval_classes_lines(arg, &n, why, sizeof why);
        if (!lines) {
            fprintf(stderr, "%s: --classes '%.80s': %s: give a file of one class name per line, "
                    "or the names separated by commas, in the order of the model's outputs "
                    "(see %s --help)\n", prog, arg, why, prog);
            return EVAL_OPT_BAD;
        }
        cdl_free(lines);
        o->classes = arg;
        return EVAL_OPT_OK;
    }
    case EVAL_OPT_SKIP_BAD: o->skip_bad_files = 1; return EVAL_OPT_OK;
    case EVAL_OPT_DECODE: {
        static const char *const dec[] = {"auto", "memory", "stream"};   /* enum cdl_decode */
        for (int k = 0; k < 3; k++)
            if (arg && !strcmp(arg, dec[k])) {
                o->decode = k;
                return EVAL_OPT_OK;
            }
        fprintf(stderr, "%s: --decode '%s': use auto, memory or stream\n", prog, arg ? arg : "");
        return EVAL_OPT_BAD;
    }
    case EVAL_OPT_JPEG_DECODE:
        if (arg && (!strcmp(arg, "scaled") || !strcmp(arg, "full"))) {
            o->jpeg_decode = !strcmp(arg, "full") ? 2 : 1;
            return EVAL_OPT_OK;
        }
        fprintf(stderr, "%s: --jpeg-decode '%.80s': use scaled or full\n", prog, arg ? arg : "");
        return EVAL_OPT_BAD;
    case EVAL_OPT_NORMALIZE: {
        const char *why;
        if (cli_parse_normalize(arg, &o->norm, &why) == 0)
            return EVAL_OPT_OK;
        fprintf(stderr, "%s: --normalize '%.80s': %s (see %s --help)\n", prog, arg, why, prog);
        return EVAL_OPT_BAD;
    }
    case 'h': usage(stdout); return EVAL_OPT_EXIT0;
    case EVAL_OPT_VERSION:
        printf("%s (cdl) %s\n", prog, cdl_version());
        if (*cdl_build_id())   /* which build of that version, as cdl-train says */
            printf("libcdl build %s\n", cdl_build_id());
        return EVAL_OPT_EXIT0;
    case ':':
        fprintf(stderr, "%s: option '%.80s' needs a value (see %s --help)\n", prog,
                argv[optind - 1], prog);
        return EVAL_OPT_BAD;
    case '?':
        fprintf(stderr, "%s: unknown option '%.80s' (see %s --help)\n", prog, argv[optind - 1],
                prog);
        return EVAL_OPT_BAD;
    default: return EVAL_OPT_NOT_MINE;
    }
}
