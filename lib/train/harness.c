/* The train/validate loop: one process or one rank of many.
 *
 * Every source of randomness is a pure function of (seed, epoch, step), and
 * every piece of state lives in the model, the optimizer or train_position,
 * so a run stopped at any step and resumed from its checkpoint ends with
 * bitwise the same weights as one that never stopped. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/ckpt/json.h"
#include "lib/core/log.h"
#include "lib/core/memlimit.h"
#include "lib/core/sized.h"
#include "lib/data/internal.h"
#include "lib/dist/announce.h"
#include "lib/dist/dist_gpu.h"
#include "lib/model/model_internal.h"

#include "checkpoint.h"
#include "ddp.h"
#include "grads.h"
#include "init.h"
#include "loop.h"
#include "mfu.h"
#include "owned.h"
#include "metrics.h"
#include "pipeline.h"
#include "run.h"
#include "signals.h"
#include "stage.h"
#include "step.h"

static int mkdir_p(const char *dir)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%.*s", (int)sizeof tmp - 1, dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return cdl_error("cannot create --ckpt-dir %s: %s: %m", dir, tmp);
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return cdl_error("cannot create --ckpt-dir %s: %m", dir);
    return 0;
}

/* --val-split: the validation samples carved from the training set (the
 * default: 5,000 for the MNISTs, whose test sets are 10,000, else 10%). */
static int carve_val(run *r)
{
    const cdl_train_config *c = r->cfg;
    long n = r->train.n, count;
    if (c->val_split >= 0)
        count = cdl_val_split_count(c->val_split, n);
    else if (!strcmp(r->train.name, "mnist") || !strcmp(r->train.name, "fashion-mnist"))
        count = n > 10000 ? 5000 : n / 10;
    else
        count = n / 10;
    if (count == 0)
        return 0;
    if (count >= n)
        return cdl_error("--val-split %g leaves no training samples of the %ld in '%s': give a "
                         "fraction below 1 or a count below %ld", c->val_split, n, c->dataset, n);
    if (cdl_dataset_split(&r->train, count, c->seed, &r->val) != 0)
        return -1;
    r->have_val = 1;
    return 0;
}

/* The class names for checkpoints: one per line (a line break inside a
 * name becomes a space). */
static int join_class_names(run *r)
{
    const cdl_dataset *d = &r->train;
    if (!d->class_names)
        return 0;
    size_t len = 1;
    for (int k = 0; k < d->classes; k++)
        len += (d->class_names[k] ? strlen(d->class_names[k]) : 0) + 1;
    char *s = cdl_malloc(len), *p = s;
    if (!s)
        return -1;
    for (int k = 0; k < d->classes; k++) {
        for (const char *q = d->class_names[k] ? d->class_names[k] : ""; *q; q++)
            *p++ = *q == '\n' || *q == '\r' ? ' ' : *q;
        *p++ = k + 1 < d->classes ? '\n' : '\0';
    }
    if (p == s)
        *p = '\0';
    r->class_names = s;
    return 0;
}

/* A table's column names for checkpoints (rank 0 writes them), so that
 * cdl-predict matches a new table's columns by name: the feature columns
 * one per line, in the order the model takes them, and the label's. */
static int table_columns(run *r)
{
    const cdl_train_config *c = r->cfg;
    if (strcmp(c->dataset, "csv") || r->ri.rank != 0)
        return 0;
    if (csv_columns(r->data_dir, c->label_column[0] ? c->label_column : NULL,
                    &r->feature_columns, &r->label_name) != 0)
        return -1;
    /* Checkpoint metadata is UTF-8 JSON: a header in a legacy encoding
     * (Excel's "CSV" on Windows is cp1252) would fail the first save, at
     * the end of an epoch. The run goes on without the names. */
    if (!utf8_valid(r->feature_columns, strlen(r->feature_columns)) ||
        !utf8_valid(r->label_name, strlen(r->label_name))) {
        train_report_warning(r->rep, "the table's column names are not UTF-8 text (a "
                             "spreadsheet's legacy encoding?): the checkpoints cannot store "
                             "them, so cdl-predict cannot match a new table's columns to them; "
                             "save the table as CSV UTF-8 to have them");
        cdl_free(r->feature_columns);
        cdl_free(r->label_name);
        r->feature_columns = r->label_name = NULL;
        return 0;
    }
    /* A column without a name is most often the row index pandas writes
     * (DataFrame.to_csv without index=False): the row number is then
     * learnt as a feature, and new rows must carry it. */
    const char *s = r->feature_columns;
    for (int k = 0; s; k++) {
        size_t n = strcspn(s, "\n");
        if (n == 0)
            train_report_warning(r->rep, "feature column %d of the table has no name "
                                 "(pandas writes its row index so: to_csv(..., index=False) "
                                 "leaves it out): it is trained on as a feature (in "
                                 "--columns of cdl-eval and cdl-predict it is \"\")", k + 1);
        s = s[n] ? s + n + 1 : NULL;
    }
    return 0;
}

/* Token data (text, tokens): windows of T tokens; the validation split is
 * val.bin or the file's last --val-split tokens, never carved at random
 * (a window would straddle both splits), and there is no test split. */
static int load_tokens(run *r, const char *path)
{
    const cdl_train_config *c = r->cfg;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    /* T: --block-size, else the one the model fixes (gpt:block_size=, a
     * spec's posembedding), else 64. */
    int model_block = c->block_size > 0 ? 0 : cdl_spec_block_size(c->model);
    if (model_block < 0)
        return -1;
    o.block_size = c->block_size > 0 ? c->block_size : model_block > 0 ? model_block : 64;
    o.vocab_size = c->vocab_size;
    o.val_split = train_token_val_split(c);
    /* The reader takes DIR/val.bin as the validation split and ignores
     * val_split then: a --val-split given would be ignored without a word. */
    char val_bin[4200];
    struct stat st;
    snprintf(val_bin, sizeof val_bin, "%s/val.bin", path);
    if (c->val_split >= 0 && !strcmp(c->dataset, "tokens") && stat(val_bin, &st) == 0 &&
        S_ISREG(st.st_mode))
        return cdl_error("--dataset tokens:%s holds val.bin, the validation split: --val-split "
                         "applies to a single file (tokens:FILE.bin, text:FILE) or a directory "
                         "without val.bin: drop it (docs/data.md)", path);
    if (cdl_dataset_load_with(c->dataset, path, 1, &o, &r->train) != 0)
        return -1;
    r->have_train = 1;
    int rc = cdl_dataset_load_with(c->dataset, path, 0, &o, &r->val);
    if (rc < 0)
        return -1;
    if (rc == 1)
        return cdl_error("--dataset %s:%s: --val-split 0 leaves nothing to validate on: drop "
                         "it%s (docs/data.md)", c->dataset, path,
                         strcmp(c->dataset, "tokens") ? "" : " or add val.bin");
    r->have_val = 1;
    return 0;
}

/* A held-out split (what: "test", "validation") read apart from the
 * training split: its samples of the training split's shape (arrays saved
 * apart may differ), normalised with the training split's statistics, its
 * labels classes the model has. */
static int held_out_fits(run *r, cdl_dataset *d, const char *what)
{
    const cdl_train_config *c = r->cfg;
    cdl_shape ts = d->shape, tr = r->train.shape;
    if (ts.c != tr.c || ts.h != tr.h || ts.w != tr.w)
        return cdl_error("--dataset %s:%s: the %s split's samples are %dx%dx%d (c,h,w) but the "
                         "training split's are %dx%dx%d: save both splits with the same sample "
                         "shape (docs/data.md)", c->dataset, c->data_dir, what, ts.c, ts.h,
                         ts.w, tr.c, tr.h, tr.w);
    if (c->normalize != CDL_NORMALIZE_GIVEN && c->normalize != CDL_NORMALIZE_NONE &&
        cdl_dataset_copy_normalization(d, &r->train) != 0)
        return -1;
    if (d->classes > r->train.classes)
        return cdl_error("%s: the %s split has labels up to %d but the training split only %d "
                         "classes", c->dataset, what, d->classes - 1, r->train.classes);
    d->classes = r->train.classes;
    return 0;
}

/* --skip-bad-files: the files left out, by name, on rank 0 (the first
 * SKIPPED_SHOWN; the count follows the load). */
enum { SKIPPED_SHOWN = 10 };
typedef struct skipped_log {
    int rank, quiet;
    long n;
} skipped_log;

static void log_skipped(const char *why, void *arg)
{
    skipped_log *s = arg;
    if (s->rank != 0 || s->quiet || s->n++ >= SKIPPED_SHOWN)
        return;
    /* The decoder's advice to pass --skip-bad-files, which was passed. */
    const char *advice = strstr(why, ": remove it from the folder or pass --skip-bad-files");
    log_line(CDL_LOG_INFO, stderr, "cdl-train: --skip-bad-files: leaving out %.*s",
             advice ? (int)(advice - why) : (int)strlen(why), why);
}

/* Pictures of formats torchvision reads and cdl does not (.webp, .bmp,
 * .tif ...), left out: named on rank 0 (the first SKIPPED_SHOWN), then
 * counted. A web scrape's .webp files were dropped in silence, and the run
 * trained on fewer pictures than the same folder gives PyTorch. */
static void log_left_out(const char *path, void *arg)
{
    skipped_log *s = arg;
    if (s->rank != 0 || s->quiet || s->n++ >= SKIPPED_SHOWN)
        return;
    char pn[512];
    log_line(CDL_LOG_WARNING, stderr, "cdl-train: warning: leaving out %s: cdl reads PNG and "
             "JPEG pictures only (torchvision's ImageFolder would read it): convert it to train "
             "on it",
             data_printable(path, pn, sizeof pn));
}

static int load_data(run *r)
{
    const cdl_train_config *c = r->cfg;
    if (!strcmp(c->dataset, "text") || !strcmp(c->dataset, "tokens"))
        return load_tokens(r, r->data_dir);
    if (!strcmp(c->dataset, "synthetic")) {
        cdl_shape s = {3, 32, 32};
        int n = c->synthetic_n > 0 ? c->synthetic_n : 10000;
        if (cdl_dataset_synthetic(n, s, 10, c->seed, &r->train) != 0)
            return -1;
        r->have_train = 1;
        if (cdl_dataset_synthetic(n / 5 > 0 ? n / 5 : 1, s, 10, c->seed + 1, &r->test) != 0)
            return -1;
        r->have_test = 1;
        return carve_val(r);
    }
    const char *dir = r->data_dir[0] ? r->data_dir : NULL;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    /* Each rank keeps its own copy of decoded pictures, and the ranks of a
     * node share its memory (and a Slurm job's memory limit): each may use
     * its share, so --decode auto streams and --decode memory refuses where
     * the node's ranks together do not fit (each alone fitting, they were
     * killed together by the OOM killer). */
    size_t lim = memory_limit();
    if (r->ri.local_world > 1 && lim != SIZE_MAX)
        o.memory_limit = lim / (size_t)r->ri.local_world;
    /* The same share for every large block the run allocates (cdl_malloc). */
    memory_share_among(r->ri.local_world);
    o.image_size = c->image_size;
    o.channels = c->image_channels;
    o.threads = c->threads;
    o.skip_bad_files = c->skip_bad_files;
    o.decode = c->image_decode;
    o.jpeg_full = c->jpeg_full;
    o.label_column = c->label_column[0] ? c->label_column : NULL;
    o.normalize = c->normalize;
    o.norm_count = c->norm_count;
    o.norm_mean = c->norm_mean;
    o.norm_std = c->norm_std;
    o.stop = train_stop_requested;
    skipped_log skipped = {.rank = r->ri.rank, .quiet = c->quiet};
    o.skipped = log_skipped;
    o.skipped_arg = &skipped;
    skipped_log other = {.rank = r->ri.rank};   /* a warning: also when quiet */
    o.left_out = log_left_out;
    o.left_out_arg = &other;
    if (cdl_dataset_load_with(c->dataset, dir, 1, &o, &r->train) != 0)
        return -1;
    if (other.n > SKIPPED_SHOWN)
        log_line(CDL_LOG_WARNING, stderr, "cdl-train: warning: left out %ld pictures of other "
                 "formats than PNG and JPEG (the first ones named above)", other.n);
    o.left_out = NULL;
    r->have_train = 1;
    if (r->train.stream && !c->quiet && r->ri.rank == 0)
        log_line(CDL_LOG_INFO, stderr,
                 "cdl-train: %d pictures of %dx%dx%d are decoded by the loader's workers as "
                 "batches need them (--decode %s)", r->train.n, r->train.shape.c,
                 r->train.shape.h, r->train.shape.w,
                 c->image_decode == CDL_DECODE_STREAM ? "stream" : "auto: too large for memory");
    if (r->train.skipped && !c->quiet && r->ri.rank == 0)
        log_line(CDL_LOG_INFO, stderr,
                 "cdl-train: --skip-bad-files: left out %ld unreadable files of %s%s",
                 r->train.skipped, c->data_dir,
                 r->train.skipped > SKIPPED_SHOWN ? " (the first ones named above)" : "");
    /* The test split at the training split's sample size and channels: an
     * image folder's own first test picture may be another size, or gray. */
    o.image_height = r->train.shape.h;
    o.image_width = r->train.shape.w;
    if (!strcmp(c->dataset, "imagefolder"))
        o.channels = r->train.shape.c;
    int rc = cdl_dataset_load_with(c->dataset, dir, 0, &o, &r->test);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        /* No test split: validation is carved from training (--val-split),
         * and there is no final test. */
        if (carve_val(r) != 0)
            return -1;
        if (!r->have_val && c->val_split < 0)   /* the default: 10%, rounded down */
            return cdl_error("--dataset %s: %s has no test split, and the default validation "
                             "split (10%%) of its %d training samples is empty: give "
                             "--val-split as a count (e.g. --val-split 1), or add test/ next to "
                             "train/ (image folders), x_test/y_test (npy, npz) or test.csv "
                             "(docs/data.md)", c->dataset, c->data_dir, r->train.n);
        if (!r->have_val)
            return cdl_error("--dataset %s: %s has no test split, and --val-split %g leaves "
                             "nothing to validate on: give a larger --val-split, or add test/ "
                             "next to train/ (image folders), x_test/y_test (npy, npz) or "
                             "test.csv (docs/data.md)", c->dataset, c->data_dir, c->val_split);
        return 0;
    }
    r->have_test = 1;
    if (held_out_fits(r, &r->test, "test") != 0)
        return -1;
    /* An image folder's val/ beside test/: the validation split, as its
     * name says (it was left unread, and validation carved from train/). */
    rc = cdl_dataset_load_with(c->dataset, dir, CDL_SPLIT_VAL, &o, &r->val);
    if (rc < 0)
        return -1;
    if (rc == 1)
        return carve_val(r);
    if (c->val_split >= 0)
        return cdl_error("--dataset %s:%s holds val/, the validation split: --val-split carves "
                         "one out of the training split of data without it: drop --val-split "
                         "(docs/data.md)", c->dataset, c->data_dir);
    r->have_val = r->val_folder = 1;
    return held_out_fits(r, &r->val, "validation");
}

/* Which stem a torchvision ResNet took (stem=auto picks it from the
 * picture size); "" for other models. */
static const char *stem_note(const char *model, cdl_shape input)
{
    int big = spec_resnet_stem(model, input);
    return big < 0 ? "" : big ? " (ImageNet stem: 7x7/2 conv, max-pool)"
                              : " (CIFAR stem: 3x3 conv, no max-pool)";
}

/* The model of a built-in name, or of a spec file's text (NULL for a
 * built-in). */
static int build_model_from(run *r, const char *text)
{
    const cdl_train_config *c = r->cfg;
    cdl_model_spec spec;
    cdl_shape in = r->train.shape;
    if (!text) {
        if (cdl_spec_builtin(c->model, in, r->train.classes, &spec) != 0)
            return -1;
    } else if (cdl_spec_parse(text, c->model, &spec) != 0 ||
               cdl_spec_fit(&spec, in, r->train.classes) != 0) {   /* a gpt line's sizes */
        return -1;
    }
    if (spec.input.c && (spec.input.c != in.c || spec.input.h != in.h || spec.input.w != in.w))
        return cdl_error("%s: the model's input is %dx%dx%d but dataset %s has %dx%dx%d samples: "
                         "fix the 'input' line or %s", c->model, spec.input.c, spec.input.h,
                         spec.input.w, c->dataset, in.c, in.h, in.w,
                         c->block_size > 0 ? "drop --block-size (the window is then the input "
                                             "line's)" : "pick the matching --dataset");
    /* An embedding reads token ids from the input: only token data has
     * ids, and only ids below its vocabulary (the readers check them
     * against the dataset's vocabulary), so anything else would index
     * outside the weight. Token ids are not values either: any other
     * layer would read them as numbers (a convolution over a window of
     * ids), so token data needs an embedding first. */
    int embeds = 0;
    for (int i = 0; i < spec.nlayers; i++) {
        const cdl_layer_spec *l = &spec.layers[i];
        int reads_input = l->nin == 0 ? i == 0 : l->in[0] < 0;
        if (l->kind != CDL_LAYER_EMBEDDING || !reads_input)
            continue;
        embeds = 1;
        if (!r->train.tokens)
            return cdl_error("%s: layer %d (embedding) reads token ids, but dataset %s holds no "
                             "tokens: use --dataset text:FILE or tokens:DIR (docs/data.md)",
                             c->model, i + 1, c->dataset);
        if (l->vocab < r->train.classes)
            return cdl_error("%s: layer %d (embedding) has a vocabulary of %d but dataset %s has "
                             "token ids up to %d: make the embedding %d rows (vocab_size)",
                             c->model, i + 1, l->vocab, c->dataset, r->train.classes - 1,
                             r->train.classes);
    }
    if (r->train.tokens && !embeds)
        return cdl_error("%s: dataset %s holds token ids (windows of %d), which only an embedding "
                         "layer reads: use --model gpt (or gpt:n_layer=...,n_embd=...), or a spec "
                         "whose first layer is an embedding (docs/transformers.md)",
                         c->model, c->dataset, in.c * in.h * in.w);
    /* --summary runs nothing: activations for one sample (GPT-2 small's
     * logits at the default batch would be refused as too many, and need
     * 13 GB). */
    r->model = cdl_model_create(&spec, in, c->summary ? 1 : c->batch_size, r->be);
    /* A built-in picture model (the default lenet) on a table's feature
     * vectors fails at its first convolution: say what fits the data. */
    if (!r->model && !text && in.h == 1 && in.w == 1 && !r->train.tokens)
        return cdl_error("%s reads pictures, but dataset %s holds %d features per sample: use "
                         "--model mlp or a spec file (docs/model-spec.md) (building %s: %s)",
                         c->model, c->dataset, in.c, c->model, cdl_last_error());
    if (!r->model)
        return -1;
    if (text && cdl_model_set_spec_text(r->model, text) != 0)   /* checkpoints carry it */
        return -1;
    /* A language model predicts at every position: labels per position
     * (cross-entropy over n * positions rows). */
    int t = cdl_model_positions(r->model);
    if (cdl_model_outputs(r->model) != t * r->train.classes)
        return cdl_error("%s: the model has %d outputs%s but dataset %s has %d classes: make the "
                         "last linear layer %d wide",
                         c->model, cdl_model_outputs(r->model) / t, t > 1 ? " per position" : "",
                         c->dataset, r->train.classes, r->train.classes);
    if (train_label_count(&r->train) != t)
        return cdl_error("%s: the model predicts %d position%s per sample but dataset %s has %d "
                         "label%s per sample: %s", c->model, t, t > 1 ? "s" : "", c->dataset,
                         train_label_count(&r->train), train_label_count(&r->train) > 1 ? "s" : "",
                         t > 1 ? "train a language model on token data (text:FILE, tokens:DIR; "
                                 "docs/data.md) with --block-size equal to the model's"
                               : "a language model predicts at every position: leave out the "
                                 "flatten, so that its last linear applies to each position "
                                 "(docs/model-spec.md, Sequences)");
    r->positions = t;
    r->classes = r->train.classes;
    r->sample_floats = (size_t)in.c * in.h * in.w;
    return 0;
}

/* --init's weights into the model; the loader refuses a NaN or an
 * infinity, naming the tensor (lib/train/init.c, check_finite). */
static int load_init(run *r)
{
    return cdl_model_load_weights(r->model, r->cfg->init, r->cfg->init_ignore);
}

/* A spec file is read once: the model is built from the very text its
 * checkpoints carry, even if the file changes meanwhile. */

static int build_model(run *r)
{
    char *text = NULL;
    if (!cdl_spec_is_builtin(r->cfg->model) && cdl_spec_read(r->cfg->model, &text) != 0)
        return -1;
    int rc = build_model_from(r, text);
    cdl_free(text);
    return rc;
}

static int make_buffers(run *r)
{
    cdl_backend *be = r->be;
    size_t b = (size_t)r->cfg->batch_size, rows = b * (size_t)r->positions;
    if (!be->host_memory) {
        r->x_dev = be->ops->alloc(be, b * r->sample_floats * sizeof(float));
        r->y_dev = be->ops->alloc(be, rows * sizeof(int32_t));
        if (!r->x_dev || !r->y_dev)
            return -1;
    }
    r->dlogits = be->ops->alloc(be, rows * (size_t)r->classes * sizeof(float));
    r->sample_loss = be->ops->alloc(be, rows * sizeof(float));
    r->pred = be->ops->alloc(be, rows * sizeof(int32_t));
    r->h_loss = cdl_calloc(rows, sizeof(float));
    r->h_pred = cdl_calloc(rows, sizeof(int32_t));
    if (!r->dlogits || !r->sample_loss || !r->pred || !r->h_loss || !r->h_pred)
        return -1;
    return 0;
}

static int make_loaders(run *r)
{
    const cdl_train_config *c = r->cfg;
    cdl_loader_config lc = {
        .size = sizeof(cdl_loader_config),
        .batch_size = c->batch_size,
        .shuffle = 1,
        .augment = c->augment >= 0 ? c->augment
                 : !strcmp(c->dataset, "cifar10") ? CDL_AUGMENT_CROP_FLIP : CDL_AUGMENT_NONE,
        .drop_last = c->drop_last,
        .pad = r->ri.world > 1,
        .workers = c->workers,
        .seed = c->seed,
        .rank = r->ri.rank,
        .world = r->ri.world,
    };
    r->train_loader = cdl_loader_create(&r->train, &lc);
    if (!r->train_loader)
        return -1;
    lc.shuffle = 0;
    lc.augment = 0;
    lc.drop_last = 0;
    lc.pad = 0;
    r->val_loader = cdl_loader_create(r->have_val ? &r->val : &r->test, &lc);
    if (!r->val_loader)
        return -1;
    long batches = cdl_loader_batches(r->train_loader);
    if (batches <= 0)
        return cdl_error("--batch-size %d leaves no training batch for %ld samples per rank "
                         "(drop --drop-last or use a smaller batch)",
                         c->batch_size, cdl_loader_samples(r->train_loader));
    long spe = train_steps_per_epoch(r);
    r->sched = (cdl_schedule){
        .kind = c->schedule,
        .base_lr = c->lr,
        .warmup_steps = c->warmup_steps > 0 ? c->warmup_steps : (long)c->warmup_epochs * spe,
        .total_steps = c->decay_steps > 0 ? c->decay_steps : (long)c->epochs * spe,
        .step_size = (long)(c->step_epochs > 0 ? c->step_epochs : 1) * spe,
        .gamma = 0.1f,
        .min_lr = c->min_lr,
    };
    /* A warm-up as long as the cosine's span left it nothing to decay in:
     * the run warmed up to its last step (its lr never reached --lr, nor
     * decayed), while the schedule note said it decayed by the last epoch.
     * With a constant or step schedule the run ended in its warm-up, never
     * training at --lr, under a note "warm-up over N steps, then lr X".
     * --decay-steps is checked against --warmup-steps with the options. */
    const cdl_schedule *s = &r->sched;
    long steps = (long)c->epochs * spe;
    int cosine = s->kind == CDL_SCHED_COSINE;
    if (cosine ? s->warmup_steps > 0 && !c->decay_steps && s->warmup_steps >= s->total_steps
               : s->warmup_steps > 1 && s->warmup_steps >= steps) {
        char warm[64];
        if (c->warmup_steps > 0)
            snprintf(warm, sizeof warm, "--warmup-steps %ld", c->warmup_steps);
        else
            snprintf(warm, sizeof warm, "--warmup-epochs %d (%ld steps)", c->warmup_epochs,
                     s->warmup_steps);
        if (cosine)
            return cdl_error("%s is not below the cosine's %ld steps (--epochs %d of %ld steps "
                             "each): the schedule would have no steps left to decay in; shorten "
                             "the warm-up, add epochs, or give --decay-steps", warm,
                             s->total_steps, c->epochs, spe);
        return cdl_error("%s is not below the run's %ld steps (--epochs %d of %ld steps each): "
                         "the run would end in its warm-up, its last step at lr %g of --lr %g; "
                         "shorten the warm-up, or add epochs", warm, steps, c->epochs, spe,
                         (double)cdl_schedule_lr(s, steps - 1), (double)c->lr);
    }
    return 0;
}

long train_steps_per_epoch(const run *r)
{
    long batches = cdl_loader_batches(r->train_loader);
    return (batches + r->accum - 1) / r->accum;
}

/* Sums a few doubles over ranks. */
static int reduce_sums(run *r, double *v, size_t n)
{
    if (!r->dist || r->ri.world == 1)
        return 0;
    return cdl_dist_allreduce_f64(r->dist, v, n);
}

int train_evaluate(run *r, cdl_loader *loader, double *loss, double *acc)
{
    double sums[3] = {0, 0, 0};
    cdl_batch b;
    int got;
    /* Batch norms' running statistics are rank 0's, the checkpoint's: each
     * rank updated its own in its last training forward, so validation
     * (and the best.safetensors it picks) and the final test would measure
     * a mix of models that no file holds, and cdl-eval of the checkpoint
     * would disagree. PyTorch's DDP does the same: the first forward
     * without grad after a training one broadcasts the buffers. */
    if (ddp_broadcast_buffers(r->ddp) != 0)
        return -1;
    if (cdl_loader_start_epoch(loader, 0, 0) != 0)
        return -1;
    while ((got = cdl_loader_next(loader, &b)) == 1)
        if (train_run_batch(r, &b, 0, 0, sums) != 0)
            return -1;
    if (got < 0 || reduce_sums(r, sums, 3) != 0)
        return -1;
    *loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
    *acc = sums[2] > 0 ? sums[1] / sums[2] : 0;
    return 0;
}

/* --resume auto's last.safetensors does not open (cut short by a copy or
 * a failing disk, a bit flipped): a requeued job would fail on every
 * restart, and the error alone leaves only "start afresh". When
 * best.safetensors beside it opens, the error names it and where it
 * stands. Not taken silently: the run would redo the steps since, and its
 * --metrics file would hold them twice. */
static int last_damaged(const run *r)
{
    char why[1536];
    snprintf(why, sizeof why, "%s", cdl_last_error());
    /* Not one another account put there since the set-up looked (owned.h):
     * the error would send the user to resume from it. */
    struct stat st;
    char owner[160];
    int foreign = lstat(r->best_path, &st) == 0 && train_foreign(&st, owner, sizeof owner);
    cdl_st_file *b = foreign ? NULL : cdl_st_open(r->best_path);
    if (!b)
        return cdl_error("%s%s", why, strstr(why, "afresh") || strstr(why, "never")
                                          ? "" : " (restore it from a copy, or --resume never "
                                                 "starts afresh)");
    const char *epoch = cdl_st_meta_get(b, "epoch"), *step = cdl_st_meta_get(b, "step");
    char where[80] = "";
    if (epoch && step && strlen(epoch) < 12 && strlen(step) < 24)
        snprintf(where, sizeof where, " (epoch %ld, step %s)", strtol(epoch, NULL, 10) + 1,
                 step);
    cdl_st_close(b);
    return cdl_error("%s. %s is whole%s: --resume %s goes on from there, redoing the steps "
                     "since; --resume never starts afresh", why, r->best_path, where,
                     r->best_path);
}

static int resume(run *r, train_position *pos)
{
    const cdl_train_config *c = r->cfg;
    const char *path = NULL;
    if (!strcmp(c->resume, "never"))
        return 0;
    if (!strcmp(c->resume, "auto") || !c->resume[0]) {
        int present = c->ckpt_dir[0] ? ckpt_last_present(r->last_path) : 0;
        /* A best.safetensors without a last is no sign of a removed last:
         * --eval-every and --ckpt-every write best alone, and a job killed
         * before its first last must start afresh when requeued. */
        if (present <= 0)
            return present;
        path = r->last_path;
    } else {
        path = c->resume;
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))   /* the --ckpt-dir of a run */
            return cdl_error("--resume %s is a directory: --ckpt-dir %s goes on from its "
                             "last.safetensors (--resume auto, the default), or name a "
                             "checkpoint file in it", path, path);
        if (access(path, R_OK) != 0)
            return cdl_error("--resume %s: %m (give an existing checkpoint, 'auto' or 'never')",
                             path);
        /* A file named on the command line is the user's choice (a
         * colleague's run to go on from), unlike one found in --ckpt-dir
         * (ckpt_dir.c refuses another account's there): said, not refused. */
        char owner[160];
        if (stat(path, &st) == 0 && train_foreign(&st, owner, sizeof owner))
            train_report_warning(r->rep, "--resume %s belongs to another account (%s): "
                                 "this run goes on from what that account wrote", path, owner);
    }
    if (train_ckpt_load(path, r->model, r->optim, c, pos) != 0) {
        if (path == r->last_path && r->best_path[0]) {
            cdl_st_file *f = cdl_st_open(path);   /* damaged, or only refused? */
            if (!f)
                return last_damaged(r);
            cdl_st_close(f);
        }
        return -1;
    }
    r->saved_path = path;   /* the weights of pos->step until this run writes last */
    if (pos->unverified)
        train_report_note(r->rep, "note: %s was written by an older cdl without checksums: "
                          "loaded unverified", path);
    long spe = cdl_loader_batches(r->train_loader);
    /* The stored running sums are the epoch's so far over all ranks: rank 0
     * carries them, the others start from 0, so the epoch's sum over ranks
     * is right on any number of ranks. */
    if (r->ri.rank != 0)
        pos->loss_sum = pos->correct = pos->seen = 0;
    /* Another batch geometry (world size; --batch-size, --accum-steps
     * with --resume-allow): the position in the epoch is converted, so no
     * sample is skipped or repeated (realign.c). */
    train_geometry was = {pos->world, pos->batch_size ? pos->batch_size : c->batch_size,
                          pos->accum ? pos->accum : r->accum, 0};
    train_geometry now = {r->ri.world, c->batch_size, r->accum, spe};
    if (was.world != now.world || was.batch_size != now.batch_size || was.accum != now.accum) {
        long samples = was.world > 1 ? (r->train.n + was.world - 1) / was.world : r->train.n;
        was.batches = c->drop_last ? samples / was.batch_size
                                   : (samples + was.batch_size - 1) / was.batch_size;
        long b = pos->batch, step = pos->step;
        int exact;
        if (train_resume_realign(&was, &now, pos->epoch, train_steps_per_epoch(r), &b, &step,
                                 &exact) != 0)
            return cdl_error("%s: %s", path, cdl_last_error());
        char change[160] = "";
        if (was.batch_size != now.batch_size)
            snprintf(change, sizeof change, "--batch-size %d -> %d", was.batch_size,
                     now.batch_size);
        if (was.accum != now.accum)
            snprintf(change + strlen(change), sizeof change - strlen(change),
                     "%s--accum-steps %d -> %d", change[0] ? ", " : "", was.accum, now.accum);
        if (!exact)
            train_report_warning(r->rep,
                                 "%s was written by %d rank%s, resuming on %d%s%s: "
                                 "epoch %d continues at batch %ld of %ld (step %ld of this world "
                                 "size, was %ld), so results differ from an uninterrupted run",
                                 path, pos->world, pos->world == 1 ? "" : "s", r->ri.world,
                                 change[0] ? " with " : "", change, pos->epoch + 1, b, spe, step,
                                 pos->step);
        else
            train_report_note(r->rep,
                              "%s: resuming with %s: epoch %d continues at batch %ld of %ld after "
                              "the same samples (step %ld of these settings, was %ld)", path,
                              change, pos->epoch + 1, b, spe, step, pos->step);
        pos->batch = b;
        pos->step = step;
    }
    /* At the epoch's end (a signal at its last step, or a world size whose
     * share ends there), the epoch has no batch left but its end is still
     * to do: validation, its record, best.safetensors. run_epochs does it
     * with an empty rest of the epoch. */
    if (pos->batch > spe)
        pos->batch = spe;
    train_report_note(r->rep, "resuming from %s: epoch %d, batch %ld, step %ld%s", path,
                      pos->epoch + 1, pos->batch, pos->step,
                      r->cfg->init[0] ? " (its weights replace --init's)" : "");
    /* Reproducibility holds for the same thread count (the CPU splits a
     * step's sums by thread): say when a resume gives that up, as a job
     * requeued on another kind of node does by default. */
    if (pos->threads > 0 && r->be->host_memory && r->be->threads != pos->threads)
        train_report_note(r->rep, "note: %s was written by a run on %d compute thread%s, this "
                          "one has %d: a step's sums split otherwise, so the weights will not "
                          "be bitwise those of a run never stopped (--threads %d keeps them)",
                          path, pos->threads, pos->threads == 1 ? "" : "s", r->be->threads,
                          pos->threads);
    int fast = r->cfg->fast_conv == 1;
    if (pos->fast_conv >= 0 && r->be->host_memory && fast != pos->fast_conv)
        train_report_note(r->rep, "note: %s was written by a run with --fast-conv %s, this one "
                          "has it %s: its convolutions round otherwise, so the weights will not "
                          "be bitwise those of a run never stopped (--fast-conv %s keeps them)",
                          path, pos->fast_conv ? "on" : "off", fast ? "on" : "off",
                          pos->fast_conv ? "on" : "off");
    return 0;
}

static int run_epochs(run *r, cdl_train_result *res)
{
    const cdl_train_config *c = r->cfg;
    train_position pos = {.world = r->ri.world, .best_val_loss = INFINITY,
                          .samples = r->train.n, .val_samples = r->val.n,
                          .val_folder = r->val_folder,
                          .class_names = r->class_names, .data = &r->train,
                          .feature_columns = r->feature_columns,
                          .label_name = r->label_name};
    snprintf(pos.fingerprint, sizeof pos.fingerprint, "%s", r->fingerprint);
    if (run_id_new(pos.run_id) != 0 || resume(r, &pos) != 0)
        return -1;
    r->saved_step = pos.step;
    r->start_step = pos.step;
    r->kept[0] = r->kept[1] = r->best_written = -1;
    run_info info = {
        .run_id = pos.run_id, .rank = r->ri.rank, .world = r->ri.world,
        .backend = r->be->ops->name, .threads = r->be->threads, .start_step = pos.step,
        .steps_per_epoch = train_steps_per_epoch(r),
    };
    if (train_report_start(r->rep, c, &info) != 0)
        return -1;
    if (ddp_broadcast_params(r->ddp) != 0)
        return -1;
    long spe = cdl_loader_batches(r->train_loader);
    double val_loss = NAN, val_acc = NAN;
    /* Resumed at or past --max-steps (a finished run started again): no
     * step to take; a step would go past the limit on every restart. */
    int done_steps = c->max_steps > 0 && pos.step >= c->max_steps;
    /* ...unless a signal stopped the run at the --max-steps step before
     * the end that step owes: at an epoch's last step that epoch's end
     * (validation, its record, best.safetensors; as after any signal at an
     * epoch's last step), inside an epoch the run's end (validation_due).
     * The first pass of the loop below does it without a step. */
    int owed_end = done_steps && (pos.batch >= spe || pos.validation_due) &&
                   pos.epoch < c->epochs;
    r->finished_before = (done_steps && !owed_end) || (!done_steps && pos.epoch >= c->epochs);
    if (done_steps && !owed_end)
        train_report_note(r->rep, "step %ld reached --max-steps %ld: nothing to train", pos.step,
                          c->max_steps);
    else if (pos.epoch >= c->epochs)   /* a finished run started again */
        train_report_note(r->rep, "all %d epoch%s done: nothing to train (a larger "
                          "--epochs with --resume-allow epochs goes on)", c->epochs,
                          c->epochs == 1 ? " is" : "s are");
    /* The --eval-every validation a signal left to this run, first. Then
     * last.safetensors records it done (and its lowest loss), so another
     * stop before the next checkpoint does not validate twice. */
    if (pos.validation_due && !done_steps) {
        int save = SAVE_LAST;
        pos.validation_due = 0;
        if (loop_eval(r, &pos, &save) != 0 || loop_save(r, &pos, save) != 0)
            return -1;
    }
    pos.validation_due = 0;

    for (; pos.epoch < c->epochs && (!done_steps || owed_end); pos.epoch++, pos.batch = 0) {
        double t0 = train_now();
        double seen0 = pos.seen;
        if (cdl_loader_start_epoch(r->train_loader, pos.epoch, pos.batch) != 0)
            return -1;
        epoch_clock ck = {t0, seen0, spe};
        int rc = owed_end ? EPOCH_MAX_STEPS : loop_epoch(r, &pos, &ck, res);
        owed_end = 0;
        if (rc == EPOCH_MAX_STEPS)
            done_steps = 1;
        else if (rc != 0)
            return rc;
        double seconds = train_now() - ck.t0;   /* without the pauses between steps */
        double tr[3] = {pos.loss_sum, pos.correct, pos.seen};
        double seen_here[1] = {pos.seen - seen0};
        if (reduce_sums(r, tr, 3) != 0 || reduce_sums(r, seen_here, 1) != 0)
            return -1;
        if (train_evaluate(r, r->val_loader, &val_loss, &val_acc) != 0)
            return -1;
        int best = val_loss < pos.best_val_loss;
        if (best)
            pos.best_val_loss = val_loss;
        epoch_stats s = {
            .epoch = pos.epoch,
            .step = pos.step,
            .train_loss = tr[2] > 0 ? tr[0] / tr[2] : 0,
            .train_acc = tr[2] > 0 ? tr[1] / tr[2] : 0,
            .val_loss = val_loss,
            .val_acc = val_acc,
            .seconds = seconds,
            .lr = cdl_schedule_lr(&r->sched, pos.step > 0 ? pos.step - 1 : 0),
        };
        train_speed(r, seconds > 0 ? seen_here[0] / seconds : 0, &s.samples_per_sec,
                    &s.tokens_per_sec, &s.mfu);
        if (train_report_epoch(r->rep, &s) != 0)
            return -1;
        res->epochs_done = pos.epoch + 1;
        /* The checkpoint records where to go on: the next epoch, or the rest
         * of this one when --max-steps ended it early. */
        train_position next = pos;
        if (pos.batch >= spe || !done_steps) {
            next.epoch = pos.epoch + 1;
            next.batch = 0;
            next.loss_sum = next.correct = next.seen = 0;
        }
        /* With --ckpt-every N the epoch ends write last.safetensors only
         * when N steps have passed since the last one (and at the run's
         * end): a small corpus's epochs of a few steps would otherwise
         * write a large model's checkpoint every few steps (PyTorch
         * Lightning's every_n_train_steps, Hugging Face's save_steps). A
         * resume from the mid-epoch checkpoint is bitwise the same run. */
        int last_epoch = done_steps || pos.epoch + 1 >= c->epochs;
        int due = !c->ckpt_every || last_epoch || pos.step - r->saved_step >= c->ckpt_every;
        if (loop_save(r, &next, (due ? SAVE_LAST : 0) | (best ? SAVE_BEST : 0)) != 0)
            return -1;
        if (!done_steps) {
            pos.loss_sum = pos.correct = pos.seen = 0;
        }
    }
    /* A record the run's last epoch or validation could not write: the
     * checkpoints are all written, but the run's record lacks its end.
     * Every rank learns it from rank 0 (the test below is collective). */
    double failed = train_report_failed(r->rep) != NULL;
    if (r->ri.world > 1 && train_from_rank0(r, &failed, 1) != 0)
        return -1;
    if (failed)
        return cdl_error("%s: the run ended at step %ld with its checkpoints written in %s, "
                         "but without that record (and the test set's, if any)",
                         r->ri.rank == 0 ? train_report_failed(r->rep)
                                         : "rank 0 could not write a --metrics or "
                                           "--tensorboard record (rank 0's error says why)",
                         pos.step, c->ckpt_dir[0] ? c->ckpt_dir : "(no --ckpt-dir: none)");
    res->steps = pos.step;
    res->final_val_loss = val_loss;
    res->final_val_acc = val_acc;
    res->best_val_loss = pos.best_val_loss;
    return 0;
}

/* The test set, once, with the final weights, when validation had its own
 * samples (with --val-split 0 the epochs' validation was the test set). */
static int test_once(run *r, long step)
{
    if (!r->have_val || !r->have_test)
        return 0;
    const cdl_train_config *c = r->cfg;
    if (r->finished_before) {
        /* A finished run started again (a resubmitted job): its final
         * weights' test record is in --metrics unless the earlier start was
         * stopped before writing it. Rank 0 reads the file; every rank
         * must agree, for the evaluation below is collective. */
        int t = train_report_tested(r->rep);
        if (t < 0)
            return -1;
        double tested = t;
        if (r->ri.world > 1 && train_from_rank0(r, &tested, 1) != 0)
            return -1;
        if (tested) {
            train_report_note(r->rep, "test: the final weights' result is in %s already (the run "
                              "ended before): not evaluated or recorded again", c->metrics);
            return 0;
        }
    }
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    lc.batch_size = c->batch_size;
    lc.workers = c->workers;
    lc.seed = c->seed;
    lc.rank = r->ri.rank;
    lc.world = r->ri.world;
    cdl_loader *l = cdl_loader_create(&r->test, &lc);
    double loss, acc;
    int rc = l ? train_evaluate(r, l, &loss, &acc) : -1;
    cdl_loader_destroy(l);
    if (rc == 0)
        rc = train_report_test(r->rep, step, loss, acc, r->test.n);
    return rc;
}

static void run_free(run *r)
{
    cdl_backend *be = r->be;
    cdl_loader_destroy(r->train_loader);
    cdl_loader_destroy(r->val_loader);
    if (be) {
        be->ops->free(be, r->x_dev);
        be->ops->free(be, r->y_dev);
        be->ops->free(be, r->dlogits);
        be->ops->free(be, r->sample_loss);
        be->ops->free(be, r->pred);
    }
    cdl_free(r->h_loss);
    cdl_free(r->h_pred);
    if (be)
        be->ops->free(be, r->grad_acc);
    if (be && r->norm_dev) {
        be->ops->hold_updates(be, NULL);   /* the backend's updates go through again */
        be->ops->free(be, r->norm_dev);
    }
    loop_free(r);
    ddp_free(r->ddp);
    cdl_optim_destroy(r->optim);
    cdl_model_destroy(r->model);
    if (r->have_train)
        cdl_dataset_free(&r->train);
    if (r->have_test)
        cdl_dataset_free(&r->test);
    if (r->have_val)
        cdl_dataset_free(&r->val);
    cdl_free(r->class_names);
    cdl_free(r->feature_columns);
    cdl_free(r->label_name);
    train_report_free(r->rep);
    if (r->ckpt_lock >= 0)
        close(r->ckpt_lock);   /* releases the --ckpt-dir lock */
    /* The collectives may hold pinned memory of the backend. */
    cdl_dist_destroy(r->dist);
    if (r->own_be)
        cdl_backend_destroy(be);
}

/* --device: cpu, cuda or auto (cuda when a GPU is visible); ranks of a
 * data-parallel job open the GPU of their slot in the rank contract. */
static cdl_backend *make_backend(run *r)
{
    const cdl_train_config *c = r->cfg;
    const char *dev = c->device[0] ? c->device : "auto";
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    /* Ranks that share their CPUs take a share each (no --threads given). */
    p.threads = c->threads > 0 ? c->threads : cdl_rank_threads(&r->ri);
    p.tf32_conv = c->tf32_conv;
    p.tf32_matmul = c->tf32_matmul;
    p.precision = c->precision;
    p.fast_conv = c->fast_conv;
    p.log = c->log;
    p.replicas_per_gpu = r->ri.replicas_per_gpu;
    if (strcmp(dev, "cuda") && strcmp(dev, "auto"))
        return cdl_backend_create_with(dev, &p);
    int visible = cdl_backend_cuda_device_count();
    if (!strcmp(dev, "auto") && visible == 0)
        return cdl_backend_create_with("cpu", &p);
    if (train_pick_gpu(visible, r->ri.world, r->ri.local_rank, r->ri.replicas_per_gpu,
                       &p.device) != 0)
        return NULL;
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    if (!be && !strcmp(dev, "auto"))
        be = cdl_backend_create_with("cpu", &p);
    return be;
}

/* cfg as this libcdl's struct: fields a caller built against an older,
 * smaller one does not know keep their defaults. */
static int read_config(const cdl_train_config *in, cdl_train_config *out)
{
    cdl_train_defaults(out);
    if (sized_read(in, out, sizeof *out, offsetof(cdl_train_config, cuda_graphs),
                   "cdl_train_config", "cdl_train_defaults"))
        return -1;
    /* Strings end inside their fields whatever the caller left there. */
    char *strs[] = {out->model, out->dataset, out->data_dir, out->ckpt_dir, out->resume,
                    out->metrics, out->device, out->dist_backend,
                    out->init, out->init_ignore, out->stage};
    size_t lens[] = {sizeof out->model, sizeof out->dataset, sizeof out->data_dir,
                     sizeof out->ckpt_dir, sizeof out->resume, sizeof out->metrics,
                     sizeof out->device, sizeof out->dist_backend,
                     sizeof out->init, sizeof out->init_ignore, sizeof out->stage};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        strs[i][lens[i] - 1] = '\0';
    out->tensorboard[sizeof out->tensorboard - 1] = '\0';
    return 0;
}

/* --resume never into a used --ckpt-dir or --metrics file: rank 0 looks,
 * and every rank learns its verdict (as loop_save does). */
static int refuse_used(run *r)
{
    int rc = r->ri.rank == 0 ? metrics_refuse_used(r->cfg) : 0;
    if (r->dist && r->ri.world > 1) {
        double ok = r->ri.rank == 0 && rc == 0;
        if (cdl_dist_allreduce_f64(r->dist, &ok, 1) != 0)
            return -1;
        if (!ok && r->ri.rank != 0)
            return cdl_error("rank %d: rank 0 refused to start (see its error)", r->ri.rank);
    }
    return rc;
}

/* Says where the learning rate goes, in steps: a schedule that spans the
 * epochs is easily longer than a run that --max-steps ends early (a language
 * model run of 2000 steps over "1000 epochs" would never decay). */
static void schedule_note(run *r)
{
    const cdl_train_config *c = r->cfg;
    const cdl_schedule *s = &r->sched;
    char warm[64] = "", stop[160] = "";
    long spe = train_steps_per_epoch(r), run_steps = (long)c->epochs * spe;
    if (s->warmup_steps > 0)
        snprintf(warm, sizeof warm, "warm-up over %ld step%s, then ", s->warmup_steps,
                 s->warmup_steps > 1 ? "s" : "");
    /* --decay-steps must exceed the warm-up: within it, none is the advice. */
    if (s->kind == CDL_SCHED_COSINE && c->max_steps > 0 && c->max_steps <= s->warmup_steps)
        snprintf(stop, sizeof stop, "; --max-steps %ld stops the run inside the warm-up, at "
                 "lr %g", c->max_steps, (double)cdl_schedule_lr(s, c->max_steps - 1));
    else if (s->kind == CDL_SCHED_COSINE && c->max_steps > 0 && c->max_steps < s->total_steps)
        snprintf(stop, sizeof stop, "; --max-steps %ld stops the run before, at lr %g "
                 "(--decay-steps %ld would end the decay there)", c->max_steps,
                 (double)cdl_schedule_lr(s, c->max_steps - 1), c->max_steps);
    /* A --decay-steps past the epochs' end: the run ended with the rate
     * still high, without a word. */
    else if (s->kind == CDL_SCHED_COSINE && c->decay_steps > run_steps && c->max_steps <= 0)
        snprintf(stop, sizeof stop, "; the run's %ld steps (--epochs %d) end before, at lr %g "
                 "(--epochs %ld would reach step %ld)", run_steps, c->epochs,
                 (double)cdl_schedule_lr(s, run_steps - 1), (c->decay_steps + spe - 1) / spe,
                 c->decay_steps);
    if (s->kind == CDL_SCHED_COSINE)
        train_report_note(r->rep, "schedule cosine: %slr %g decays to %g by step %ld (%s)%s", warm,
                          (double)c->lr, (double)c->min_lr, s->total_steps,
                          c->decay_steps > 0 ? "--decay-steps" : "the end of the last epoch",
                          stop);
    else if (s->kind == CDL_SCHED_STEP)
        train_report_note(r->rep, "schedule step: %slr %g times 0.1 every %ld steps "
                          "(--step-epochs %d)", warm, (double)c->lr, s->step_size, c->step_epochs);
    else
        train_report_note(r->rep, "schedule constant: %slr %g", warm, (double)c->lr);
    /* --max-steps only stops a run: past the epochs' end it does nothing, and
     * a small corpus's default 10 epochs may be a few dozen steps. */
    if (c->max_steps > run_steps)
        train_report_warning(r->rep, "--max-steps %ld is past the run's end: %d epoch%s "
                             "of %ld step%s end it at step %ld; give --epochs %ld (or more) to "
                             "train %ld steps", c->max_steps, c->epochs, c->epochs > 1 ? "s" : "", spe,
                             spe > 1 ? "s" : "", run_steps, (c->max_steps + spe - 1) / spe,
                             c->max_steps);
}

/* Set-up (staging, loading the data) can take minutes, and a SIGTERM or
 * SIGUSR1 then (scancel; Slurm's warning before the time limit) should end
 * the run before its first step: CDL_EXIT_REQUEUE when any rank was
 * signalled (agreed in a collective all ranks reach here), CDL_TRAIN_STOPPED
 * when a should_stop asked instead, 0 to go on, -1 when the agreement
 * fails. */
static int setup_stopped(run *r, const char *during, cdl_train_result *res)
{
    int stop = train_stop_agreed(r);
    if (stop <= 0)
        return stop;
    res->interrupted = 1;
    if (train_stop_kind(r) != 0)
        return -1;
    if (r->stop_by_program) {   /* nothing trained yet: nothing to save */
        res->interrupted = 2;
        train_report_note(r->rep, "stopped while %s, before the first step: the program asked "
                          "to stop (cdl_train_config.should_stop)", during);
        return CDL_TRAIN_STOPPED;
    }
    /* CDL_EXIT_REQUEUE only where a restart goes on from a checkpoint
     * (loop.c says why). */
    if (!r->cfg->ckpt_dir[0]) {
        cdl_error("stopped by a signal (SIGUSR1 or SIGTERM) while %s, before the first step, "
                  "with no --ckpt-dir: a restart would begin again; give --ckpt-dir to keep the "
                  "work of a run that is stopped", during);
        return -1;
    }
    train_report_note(r->rep, "stopped by a signal while %s, before the first step: nothing of "
                      "this start to save; start it again to go on", during);
    return CDL_EXIT_REQUEUE;
}

/* A signal while the ranks connect (a peer that never comes holds the
 * others in the bootstrap until CDL_TIMEOUT): dist_create left the wait at
 * once, and its error names the rank and the wait. No agreement is
 * possible yet, so each rank decides alone, as setup_stopped would:
 * CDL_EXIT_REQUEUE where a restart goes on from a checkpoint, else an
 * error. Never a lost peer: nobody was lost, this rank was told to stop. */
static int bootstrap_stopped(run *r, cdl_train_result *res)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", cdl_last_error());
    res->interrupted = 1;
    if (!r->cfg->ckpt_dir[0])
        return cdl_error("stopped by a signal (SIGUSR1 or SIGTERM) while connecting to the "
                         "other ranks, before the first step, with no --ckpt-dir: a restart "
                         "would begin again; give --ckpt-dir to keep the work of a run that is "
                         "stopped (%s)", why);
    log_line(CDL_LOG_WARNING, stderr, "cdl: rank %d: stopped by a signal while connecting to "
             "the other ranks, before the first step (%s): nothing of this start to save; "
             "start it again to go on (exit status %d)", r->ri.rank, why, CDL_EXIT_REQUEUE);
    return CDL_EXIT_REQUEUE;
}

/* The names cdl_dist_create takes, and "single". One process never
 * reaches cdl_dist_create, so a misspelt name would pass there and fail
 * only on the first run of several ranks. */
static int check_dist_backend(const char *name)
{
    static const char *const known[] = {"", "auto", "single", "shm", "mpi", "nccl", "hier",
                                        "hier:mpi", "hier:nccl", "hier:store"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(name, known[i]))
            return 0;
    return cdl_error("--dist-backend '%s': use auto, single, shm, mpi, nccl, hier or "
                     "hier:mpi|nccl|store", name);
}

static int check_config(const cdl_train_config *c)
{
    /* Else the first reader of the name (cdl_spec_read) said it, naming a
     * function the caller never called. */
    if (!c->model[0])
        return cdl_error("--model (cdl_train_config.model) is empty: give a built-in model's "
                         "name (e.g. lenet, mlp) or a model spec file's path");
    if (check_dist_backend(c->dist_backend) != 0)
        return -1;
    if (c->epochs <= 0)
        return cdl_error("--epochs %d: must be at least 1", c->epochs);
    if (c->batch_size <= 0 || c->batch_size > 65536)
        return cdl_error("--batch-size %d: must be between 1 and 65536", c->batch_size);
    if (!(c->lr > 0) || !isfinite(c->lr))
        return cdl_error("--lr %g: must be a positive number", c->lr);
    if (c->workers < 0 || c->workers > 64)
        return cdl_error("--workers %d: must be between 0 and 64", c->workers);
    if (c->metrics_every < 0)
        return cdl_error("--metrics-every %ld: must be 0 (epoch records only) or more",
                         c->metrics_every);
    if (!(c->val_split >= -1) || !isfinite(c->val_split) ||
        (c->val_split >= 1 && c->val_split != floor(c->val_split)))
        return cdl_error("--val-split %g: give a fraction in (0,1), a whole count of samples, or "
                         "0 for none", c->val_split);
    if (c->threads < 0 || c->threads > 1024)
        return cdl_error("--threads %d: must be between 0 (automatic) and 1024", c->threads);
    if (!(c->clip_grad >= 0) || !isfinite(c->clip_grad))
        return cdl_error("--clip-grad %g: give the largest gradient norm (> 0), or 0 for none",
                         c->clip_grad);
    /* NaN was taken as none (the step's "> 0" test) and written into the
     * checkpoint's config as "nan", which is no JSON; above 1 (inf) the
     * loss is NaN at the first step, blamed on the data. PyTorch's range. */
    if (!(c->label_smoothing >= 0.0f && c->label_smoothing <= 1.0f))
        return cdl_error("--label-smoothing %g: give a value from 0 (none) to 1",
                         (double)c->label_smoothing);
    if (c->accum_steps < 0 || c->accum_steps > (1 << 20))
        return cdl_error("--accum-steps %d: must be between 1 and %d", c->accum_steps, 1 << 20);
    if (c->decay_params < CDL_DECAY_AUTO || c->decay_params > CDL_DECAY_2D)
        return cdl_error("--decay-params %d: use 2d or all (CDL_DECAY_*)", c->decay_params);
    if (c->eval_every < 0)
        return cdl_error("--eval-every %ld: must be 0 (per epoch only) or more", c->eval_every);
    if (c->warmup_steps < 0 || c->decay_steps < 0)
        return cdl_error("--warmup-steps %ld, --decay-steps %ld: must be 0 (not set) or more",
                         c->warmup_steps, c->decay_steps);
    if (c->warmup_steps > 0 && c->warmup_epochs > 0)
        return cdl_error("--warmup-steps %ld and --warmup-epochs %d both set the warm-up: give one",
                         c->warmup_steps, c->warmup_epochs);
    if (c->decay_steps > 0 && c->schedule != CDL_SCHED_COSINE)
        return cdl_error("--decay-steps %ld: only the cosine schedule decays over steps (it is "
                         "--schedule %s): add --schedule cosine, or drop --decay-steps",
                         c->decay_steps, cdl_sched_kind_name(c->schedule));
    if (c->decay_steps > 0 && c->warmup_steps >= c->decay_steps)
        return cdl_error("--warmup-steps %ld is not below --decay-steps %ld: the cosine would "
                         "have no steps left to decay in", c->warmup_steps, c->decay_steps);
    if (!(c->min_lr >= 0) || !(c->min_lr <= c->lr))
        return cdl_error("--min-lr %g: give where the cosine ends, from 0 to --lr %g (nanoGPT's "
                         "configs use a tenth of it)", (double)c->min_lr, (double)c->lr);
    if (c->min_lr > 0 && c->schedule != CDL_SCHED_COSINE)
        return cdl_error("--min-lr %g: only the cosine schedule ends at a floor (it is "
                         "--schedule %s): add --schedule cosine, or drop --min-lr",
                         (double)c->min_lr, cdl_sched_kind_name(c->schedule));
    if (c->keep_last < 0 || c->keep_every < 0)
        return cdl_error("--keep-last %ld, --keep-every %ld: must be 0 (not set) or more",
                         c->keep_last, c->keep_every);
    if ((c->keep_last > 0 || c->keep_every > 0) && !c->ckpt_dir[0])
        return cdl_error("--keep-last %ld, --keep-every %ld keep older checkpoints of "
                         "--ckpt-dir: give --ckpt-dir DIR", c->keep_last, c->keep_every);
    if (!(c->peak_tflops >= 0) || !isfinite(c->peak_tflops))
        return cdl_error("--peak-tflops %g: give the device's peak in TFLOP/s, or 0 for the "
                         "known GPUs' table", c->peak_tflops);
    return train_resume_allow_check(c->resume_allow);
}

static int train_run(const cdl_train_config *caller_cfg, cdl_train_result *res)
{
    cdl_train_result dummy;
    cdl_train_config config;
    const cdl_train_config *cfg = &config;
    run r;
    memset(&r, 0, sizeof r);
    r.ckpt_lock = -1;
    r.stage_lock = -1;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    if (read_config(caller_cfg, &config) != 0)
        return -1;
    if (config.summary) {
        /* The model for the data, and nothing written: no checkpoint
         * directory, metrics, event files, staged copy or run header. */
        config.ckpt_dir[0] = config.metrics[0] = config.tensorboard[0] = '\0';
        config.keep_last = config.keep_every = 0;   /* of the ckpt_dir not written */
        snprintf(config.stage, sizeof config.stage, "off");
        snprintf(config.resume, sizeof config.resume, "never");
        config.quiet = 1;
    }
    r.cfg = cfg;
    r.accum = cfg->accum_steps > 1 ? cfg->accum_steps : 1;
    r.grad_norm = NAN;
    int rc = -1;
    if (check_config(cfg) != 0)
        return -1;
    /* dist_backend "single": this process trains alone whatever its
     * environment says, as one task of an MPI job or Slurm step that trains
     * a model of its own per task (the environment made it rank K of N, and
     * no setting could say otherwise). Else the rank contract decides. */
    int alone = !strcmp(cfg->dist_backend, "single");
    if (alone) {
        r.ri.world = r.ri.local_world = r.ri.nnodes = r.ri.replicas_per_gpu = 1;
        r.ri.source = "single";
    } else if (rank_discover(&r.ri, !cfg->quiet) != 0) {
        return -1;
    }
    if (!cfg->summary && !alone)
        train_alone_warning(&r);
    /* From here on SIGUSR1/SIGTERM ask for a checkpoint: one that comes
     * while the data loads (a job signalled as soon as its metrics file
     * shows the run's start) stops the run after its first step instead of
     * killing this rank. */
    train_signals_install();
    /* The backend first: the collectives pick their transport, GPU groups
     * and staging by it. */
    r.be = cfg->backend;
    if (!r.be) {
        r.be = make_backend(&r);
        r.own_be = 1;
    }
    if (!r.be)
        goto out;
    if (r.ri.world > 1) {
        /* A stop inside MPI_Init ends the process there, as
         * bootstrap_stopped would: 75 where a restart goes on. */
        r.dist = dist_create(&r.ri, cfg->dist_backend, r.be, cfg->dist_config, !cfg->quiet,
                             train_stop_requested, cfg->ckpt_dir[0] ? CDL_EXIT_REQUEUE : 1);
        if (!r.dist) {
            if (train_stop_requested())
                rc = bootstrap_stopped(&r, res);
            goto out;
        }
    }
    if (cfg->ckpt_dir[0]) {
        if (r.ri.rank == 0 &&
            (mkdir_p(cfg->ckpt_dir) != 0 || ckpt_dir_prepare(cfg->ckpt_dir, &r.ckpt_lock)))
            goto out;
        int n = (int)sizeof cfg->ckpt_dir - 1;   /* ckpt_dir's bound, for the compiler */
        snprintf(r.last_path, sizeof r.last_path, "%.*s/last.safetensors", n, cfg->ckpt_dir);
        snprintf(r.best_path, sizeof r.best_path, "%.*s/best.safetensors", n, cfg->ckpt_dir);
    }
    if (refuse_used(&r) != 0)
        goto out;
    r.rep = train_report_open(cfg, r.ri.rank);
    if (!r.rep)
        goto out;
    int staged = train_stage(&r);
    if (staged < 0)
        goto out;
    /* A signal during set-up, which can take minutes, stops the run at the
     * next of these points rather than after a first step: this start has
     * nothing to save yet. A load that a signal cut short (o.stop) goes on
     * to the agreement, which all ranks reach. */
    if (staged > 0) {
        rc = setup_stopped(&r, "staging the dataset", res);
        goto out;
    }
    /* A load that fails on one rank (its node lacks memory for the decoded
     * pictures, a node-local copy is unreadable) fails every rank, naming
     * it and its node. */
    if (train_setup_agree(&r, (load_data(&r) != 0 || join_class_names(&r) != 0 ||
                                   table_columns(&r) != 0) &&
                                  !train_stop_requested(), "loading the data") != 0)
        goto out;
    if ((rc = setup_stopped(&r, "loading the data", res)) != 0)
        goto out;
    rc = -1;
    if (build_model(&r) != 0)
        goto out;
    /* --summary refuses what the run would, before it prints: the loaders'
     * checks (--augment on features, a --batch-size that leaves no batch,
     * --workers) and --init's weights, which must fit the model. It skips
     * only the batch-sized buffers and what trains. */
    if (cfg->summary && (train_ranks_agree(&r) != 0 || make_loaders(&r) != 0 ||
                         (cfg->init[0] && load_init(&r) != 0)))
        goto out;
    if (cfg->summary) {
        if (r.ri.rank == 0) {
            cdl_model_print(r.model, stdout);
            fflush(stdout);
        }
        rc = 0;
        goto out;
    }
    /* What the data holds: for checkpoints, a resume and the ranks to
     * compare (node-local copies of other data of the same size). */
    _Static_assert(sizeof r.fingerprint >= DATA_FINGERPRINT_LEN, "fingerprint length");
    if (train_setup_agree(&r, data_fingerprint(&r.train, r.fingerprint, sizeof r.fingerprint),
                          "reading the data's fingerprint") != 0 ||
        train_ranks_agree(&r) != 0 || make_buffers(&r) != 0 || make_loaders(&r) != 0)
        goto out;
    cdl_model_init(r.model, cfg->seed);
    if (cfg->init[0] && load_init(&r) != 0)
        goto out;
    size_t bucket_kb = cfg->ddp_bucket_kb > 0 ? (size_t)cfg->ddp_bucket_kb : 0;
    r.ddp = ddp_create_shard(r.dist, r.model, bucket_kb << 10, cfg->shard_optimizer);
    r.optim = r.ddp ? ddp_optim_create(r.ddp, &cfg->optim) : NULL;
    if (!r.optim || !r.ddp || train_decay_groups(&r) != 0 || loop_create(&r) != 0)
        goto out;
    if (r.accum > 1 &&
        !(r.grad_acc = r.be->ops->alloc(r.be, cdl_model_nparams(r.model) * sizeof(float))))
        goto out;
    if (train_clip_on_device(&r)) {
        if (!(r.norm_dev = r.be->ops->alloc(r.be, sizeof(double))))
            goto out;
        r.be->ops->hold_updates(r.be, NULL);   /* none held from an earlier run */
    }
    train_report_note(r.rep, "cdl %s: %s%s on %s (%d train / %d val / %d test), %zu parameters, "
                      "%s backend with %d thread%s, %d rank%s%s",
                      cdl_version(), cfg->model, stem_note(cfg->model, r.train.shape), cfg->dataset,
                      r.train.n, r.val.n, r.test.n,
                      cdl_model_nparams(r.model), r.be->ops->name, r.be->threads,
                      r.be->threads == 1 ? "" : "s", r.ri.world,
                      r.ri.world > 1 ? "s" : "",
                      cfg->fast_conv == 1 && r.be->host_memory ? ", --fast-conv on" : "");
    train_speed_setup(&r);   /* after the header: its note says which peak MFU uses */
    if (tokens_vocab_file(&r.train))   /* the staged copy, if any */
        train_report_note(r.rep, "vocabulary %d from %s (nanoGPT's; --vocab-size overrides it)%s",
                          r.train.classes, tokens_vocab_file(&r.train),
                          tokens_itos(&r.train) ? ", and its itos table, which cdl-generate "
                          "writes text with" : "");
    if (cfg->init[0]) {
        char fresh[256];
        int nf = init_fresh_names(r.model, cfg->init_ignore, fresh, sizeof fresh);
        if (!cfg->init_ignore[0])
            train_report_note(r.rep, "weights from %s (--init)", cfg->init);
        else if (nf)
            train_report_note(r.rep, "weights from %s (--init), except %d tensor%s left fresh by "
                              "--init-ignore '%s': %s", cfg->init, nf, nf == 1 ? "" : "s",
                              cfg->init_ignore, fresh);
        else if (r.ri.rank == 0)   /* a warning: also when quiet */
            log_line(CDL_LOG_WARNING, stderr,
                     "cdl-train: warning: --init-ignore '%s' matches none of the model's "
                     "tensors: every tensor came from %s (the model's last is '%s'; "
                     "cdl-train --summary lists them)", cfg->init_ignore, cfg->init,
                     cdl_model_view(r.model, cdl_model_nviews(r.model) - 1)->name);
    }
    if (ddp_sharded(r.ddp)) {
        size_t so, sn;
        cdl_optim_shard(r.optim, &so, &sn);
        if (!cdl_optim_nstate(r.optim) && r.ri.rank == 0)   /* a warning: also when quiet */
            log_line(CDL_LOG_WARNING, stderr,
                     "cdl-train: warning: --shard-optimizer: %s without momentum has no state "
                     "to shard: it saves no memory (only the update is divided)",
                     cdl_optim_kind_name(cfg->optim.kind));
        else
            train_report_note(r.rep, "sharded optimizer (ZeRO-1): rank 0 holds the state of "
                              "%zu of the %zu parameters", sn, cdl_model_nparams(r.model));
    }
    if (cfg->precision == CDL_PRECISION_BF16)
        train_report_note(r.rep, "precision bf16: matrix products of linear layers and attention "
                          "(head sizes 16, 32, 64) in bf16 with "
                          "fp32 accumulation; weights, gradients, optimizer state fp32");
    char clip[64] = "";
    if (cfg->clip_grad > 0)
        snprintf(clip, sizeof clip, ", gradient norm clipped to %g", cfg->clip_grad);
    train_report_note(r.rep, "optimizer %s, lr %g: weight decay %g on %s (--decay-params %s)%s; "
                      "%d micro-batch%s of %d per step and rank (--accum-steps)",
                      cdl_optim_kind_name(cfg->optim.kind), cfg->lr, cfg->optim.weight_decay,
                      r.decay_2d ? "parameters of >= 2 dimensions, not biases or norms"
                                 : "all parameters",
                      r.decay_2d ? "2d" : "all", clip, r.accum, r.accum > 1 ? "es" : "",
                      cfg->batch_size);
    schedule_note(&r);
    if (!r.have_val)
        train_report_note(r.rep, "note: no validation split (--val-split 0): validating on the "
                          "test set, which then also chooses best.safetensors");
    rc = run_epochs(&r, res);
    if (rc == 0)
        rc = test_once(&r, res->steps);
out:
    /* An error on this rank alone (a --ckpt-dir it cannot make, a file it
     * cannot read) leaves the collectives healthy: the peers would wait for
     * this rank in their next collective while rank 0's store, at exit,
     * waits for their goodbye, both until CDL_TIMEOUT. Abort them: the
     * peers fail at once with this error, and nobody lingers. */
    if (rc < 0 && r.dist)
        dist_abort(r.dist, cdl_last_error());
    train_stage_cleanup(&r, rc == 0);
    /* The handlers go back last: a launcher's SIGTERM to the other ranks,
     * sent as soon as one rank fails, must not end this one by the default
     * action while it frees its data, before its caller prints the error. */
    run_free(&r);
    train_signals_restore();
    return rc;
}

/* The run with its caller's on_log as this thread's log sink (a nested
 * run's own, then the outer one's again). A struct too small to hold
 * on_log has none; one without a valid size is refused by read_config
 * before anything is said. */
int cdl_train_run(const cdl_train_config *cfg, cdl_train_result *res)
{
    log_sink hook = {NULL, NULL};
    if (cfg && cfg->size >= offsetof(cdl_train_config, on_log_ctx) + sizeof cfg->on_log_ctx)
        hook = (log_sink){cfg->on_log, cfg->on_log_ctx};
    log_sink outer = log_sink_set(hook);
    int rc = train_run(cfg, res);
    log_sink_set(outer);
    return rc;
}
