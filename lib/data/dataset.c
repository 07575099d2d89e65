/* The datasets cdl knows: where their files live by default, what to tell a
 * user who lacks them, and their per-channel normalisation constants (the
 * usual published means and standard deviations of the training sets). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/core/sized.h"
#include "lib/data/internal.h"

enum { FORMAT_IDX, FORMAT_CIFAR };

typedef struct dataset_info {
    const char *name;
    int format;
    const char *default_dir;
    const char *hint;   /* what to do when a file is missing */
    float mean[3], std[3];
} dataset_info;

static const dataset_info datasets[] = {
    { "fashion-mnist", FORMAT_IDX, CDL_FASHION_MNIST_DIR,
      "install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) "
      "or pass --data-dir",
      { 0.2860f }, { 0.3530f } },
    { "mnist", FORMAT_IDX, "/usr/share/datasets/mnist",
      "put the MNIST idx files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
      "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) there or pass --data-dir",
      { 0.1307f }, { 0.3081f } },
    { "cifar10", FORMAT_CIFAR, "./data/cifar-10-batches-bin",
      "download the binary version of CIFAR-10 (cifar-10-binary.tar.gz), unpack it into ./data "
      "or pass --data-dir with the folder holding data_batch_1.bin",
      { 0.4914f, 0.4822f, 0.4465f }, { 0.2470f, 0.2435f, 0.2616f } },
};

#define SYNTHETIC_MEAN 0.5f
#define SYNTHETIC_STD 0.25f

/* Channels past the dataset's own keep mean 0, std 1 (never used). */
static void set_normalisation(cdl_dataset *d, const float *mean, const float *std, int c)
{
    for (int k = 0; k < 3; k++) {
        d->mean[k] = k < c ? mean[k] : 0.0f;
        d->std[k] = k < c ? std[k] : 1.0f;
    }
}

/* Programs built before the macro of that name (lib/core/sized.h) call
 * the plain function: their struct ended with skipped_arg at the latest. */
void cdl_dataset_options_defaults_sized(cdl_dataset_options *o, size_t size)
{
    sized_zeros(o, size);
}

void (cdl_dataset_options_defaults)(cdl_dataset_options *o)
{
    sized_zeros(o, SIZED_UPTO(cdl_dataset_options, skipped_arg));
}

int data_options_read(const cdl_dataset_options *opt, cdl_dataset_options *o)
{
    cdl_dataset_options_defaults(o);
    return opt && sized_read(opt, o, sizeof *o,
                             offsetof(cdl_dataset_options, norm_std) + sizeof o->norm_std,
                             "cdl_dataset_options", "cdl_dataset_options_defaults")
               ? -1
               : 0;
}

static int load_named(const char *name, const char *dir, int train, cdl_dataset *out)
{
    const dataset_info *info = NULL;
    for (size_t i = 0; i < sizeof datasets / sizeof datasets[0]; i++)
        if (strcmp(name, datasets[i].name) == 0)
            info = &datasets[i];
    if (!info)
        return cdl_error("unknown dataset '%s': use fashion-mnist, mnist, cifar10 or a format "
                         "(" CDL_DATASET_FORMATS ") with --data-dir "
                         "(synthetic data is made, not loaded)", name);
    if (!dir || !*dir)
        dir = info->default_dir;

    int rc = info->format == FORMAT_IDX ? idx_read(dir, train, 10, info->hint, out)
                                        : cifar_read(dir, train, info->hint, out);
    if (rc)
        return -1;
    snprintf(out->name, sizeof out->name, "%s", info->name);
    out->classes = 10;
    set_normalisation(out, info->mean, info->std, out->shape.c);
    return 0;
}

/* The format readers; 1 = no such split. */
static int load_format(const char *name, const char *path, int train,
                       const cdl_dataset_options *o, cdl_dataset *out)
{
    if (!path || !*path)
        return cdl_error("--dataset %s needs --data-dir: the folder or file holding the data "
                         "(docs/data.md)", name);
    int rc;
    if (!strcmp(name, "imagefolder"))
        rc = imagefolder_read(path, train, o, out);
    else if (!strcmp(name, "npy"))
        rc = npy_read_dir(path, train, out);
    else if (!strcmp(name, "npz"))
        rc = npz_read(path, train, out);
    else if (!strcmp(name, "text") || !strcmp(name, "tokens"))
        rc = tokens_read(name, path, train, o, out);
    else
        rc = csv_read(path, train, o->label_column, out);
    if (rc)
        return rc;
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

static int is_format(const char *name)
{
    return !strcmp(name, "imagefolder") || !strcmp(name, "npy") || !strcmp(name, "npz") ||
           !strcmp(name, "csv") || !strcmp(name, "text") || !strcmp(name, "tokens");
}

/* Given values: 1 for every channel or one per channel. */
static int set_given(cdl_dataset *d, const cdl_dataset_options *o)
{
    int c = d->shape.c;
    if (o->norm_count != 1 && o->norm_count != c)
        return cdl_error("--normalize gives %d mean/std pairs but '%s' has %d channels: give "
                         "one pair or %d%s", o->norm_count, d->name, c, c,
                         !strcmp(d->name, "imagefolder") && (o->norm_count == 1 ||
                                                             o->norm_count == 3)
                             ? " (an image folder has its first picture's channels unless "
                               "--channels says: --channels 3 reads every picture as RGB)"
                             : "");
    for (int k = 0; k < o->norm_count; k++)
        if (!(o->norm_std[k] > 0) || !isfinite(o->norm_mean[k]))
            return cdl_error("--normalize: std %g must be > 0 and mean %g finite",
                             (double)o->norm_std[k], (double)o->norm_mean[k]);
    float *m = d->channel_mean ? d->channel_mean : d->mean;
    float *s = d->channel_mean ? d->channel_std : d->std;
    for (int k = 0; k < c; k++) {
        m[k] = o->norm_mean[o->norm_count == 1 ? 0 : k];
        s[k] = o->norm_std[o->norm_count == 1 ? 0 : k];
    }
    return 0;
}

int cdl_dataset_load_with(const char *name, const char *path, int train,
                          const cdl_dataset_options *opt, cdl_dataset *out)
{
    if (!out)
        return cdl_error("cdl_dataset_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!name)
        return cdl_error("cdl_dataset_load: no dataset name: use fashion-mnist, mnist, cifar10 "
                         "or one of " CDL_DATASET_FORMATS);
    cdl_dataset_options o;
    if (data_options_read(opt, &o))
        return -1;
    /* "text:FILE" and "tokens:DIR" name their path (cdl-train's spelling). */
    char kind[16];
    const char *colon = strchr(name, ':');
    if (colon && (!path || !*path) && colon - name < (long)sizeof kind) {
        snprintf(kind, sizeof kind, "%.*s", (int)(colon - name), name);
        if (!strcmp(kind, "text") || !strcmp(kind, "tokens")) {
            name = kind;
            path = colon + 1;
        }
    }
    int format = is_format(name);
    if (train != CDL_SPLIT_TRAIN && train != CDL_SPLIT_TEST && train != CDL_SPLIT_VAL)
        return cdl_error("cdl_dataset_load: split %d: use CDL_SPLIT_TRAIN, _TEST or _VAL", train);
    /* A validation split of its own: an image folder's val/ only. */
    if (train == CDL_SPLIT_VAL && strcmp(name, "imagefolder"))
        return 1;
    int rc = format ? load_format(name, path, train, &o, out) : load_named(name, path, train, out);
    if (rc) {
        cdl_dataset_free(out);
        return rc;
    }
    if (out->tokens)
        return 0;   /* token ids: nothing to normalise */
    if (out->shape.c > 3) {
        out->channel_mean = cdl_calloc((size_t)out->shape.c, sizeof(float));
        out->channel_std = cdl_calloc((size_t)out->shape.c, sizeof(float));
        if (!out->channel_mean || !out->channel_std) {
            cdl_dataset_free(out);
            return -1;
        }
    }
    int mode = o.normalize;
    if (mode == CDL_NORMALIZE_DEFAULT && format)
        mode = CDL_NORMALIZE_COMPUTE;
    if (mode == CDL_NORMALIZE_COMPUTE)
        rc = dataset_compute_normalization(out);
    else if (mode == CDL_NORMALIZE_GIVEN)
        rc = set_given(out, &o);
    else if (mode == CDL_NORMALIZE_NONE) {
        const float zero[1] = {0}, one[1] = {1};
        cdl_dataset_options none = o;
        none.norm_count = 1;
        none.norm_mean = zero;
        none.norm_std = one;
        rc = set_given(out, &none);
    }
    if (rc) {
        cdl_dataset_free(out);
        return -1;
    }
    return 0;
}

int cdl_dataset_load(const char *name, const char *dir, int train, cdl_dataset *out)
{
    int rc = cdl_dataset_load_with(name, dir, train, NULL, out);
    if (rc == 1)
        return cdl_error("%s: the data in %s has no %s split", name, dir ? dir : "",
                         train ? "training" : "test");
    return rc;
}

int cdl_dataset_copy_normalization(cdl_dataset *dst, const cdl_dataset *src)
{
    if (!dst || !src)
        return cdl_error("cdl_dataset_copy_normalization: dst or src is NULL");
    if (dst->shape.c != src->shape.c ||
        !dst->channel_mean != !src->channel_mean)
        return cdl_error("cdl_dataset_copy_normalization: the datasets differ in channels");
    memcpy(dst->mean, src->mean, sizeof dst->mean);
    memcpy(dst->std, src->std, sizeof dst->std);
    if (src->channel_mean) {
        memcpy(dst->channel_mean, src->channel_mean, (size_t)src->shape.c * sizeof(float));
        memcpy(dst->channel_std, src->channel_std, (size_t)src->shape.c * sizeof(float));
    }
    return 0;
}

/* Pixels: a histogram per channel (exact, one pass; a stream decodes its
 * pictures for it, stream.c); features: sums in double. Population std, as
 * a NumPy x.std() over the training set. */
int dataset_compute_normalization(cdl_dataset *d)
{
    const int c = d->shape.c;
    const size_t plane = (size_t)d->shape.h * d->shape.w;
    float *m = d->channel_mean ? d->channel_mean : d->mean;
    float *s = d->channel_mean ? d->channel_std : d->std;
    uint64_t shist[3][256];   /* a stream's histograms, from its pictures decoded now */
    double spixels = 0;
    if (d->stream && image_stream_histograms(d->stream, 0, shist, &spixels) != 0)
        return -1;
    for (int k = 0; k < c; k++) {
        double sum = 0, sq = 0, cnt = d->stream ? spixels : (double)plane * d->n;
        if (d->images || d->stream) {
            /* Four histograms, so that runs of equal pixels do not wait on
             * one counter's increments (about 2x on large pictures). */
            uint64_t hist4[4][256] = {{0}}, hist[256];
            for (int i = 0; d->images && i < d->n; i++) {
                const uint8_t *p = d->images + ((size_t)i * c + k) * plane;
                size_t j = 0;
                for (; j + 4 <= plane; j += 4) {
                    hist4[0][p[j]]++;
                    hist4[1][p[j + 1]]++;
                    hist4[2][p[j + 2]]++;
                    hist4[3][p[j + 3]]++;
                }
                for (; j < plane; j++)
                    hist4[0][p[j]]++;
            }
            for (int v = 0; v < 256; v++)
                hist[v] = d->stream ? shist[k][v]
                                    : hist4[0][v] + hist4[1][v] + hist4[2][v] + hist4[3][v];
            for (int v = 0; v < 256; v++) {
                double x = v / 255.0;
                sum += x * (double)hist[v];
                sq += x * x * (double)hist[v];
            }
        } else {
            for (int i = 0; i < d->n; i++) {
                const float *p = d->features + ((size_t)i * c + k) * plane;
                for (size_t j = 0; j < plane; j++) {
                    sum += p[j];
                    sq += (double)p[j] * p[j];
                }
            }
        }
        double mean = sum / cnt, var = sq / cnt - mean * mean;
        m[k] = (float)mean;
        s[k] = var > 1e-12 ? (float)sqrt(var) : 1.0f;   /* a constant column: left as is */
    }
    return 0;
}

int cdl_dataset_synthetic(int n, cdl_shape shape, int classes, uint64_t seed, cdl_dataset *out)
{
    if (!out)
        return cdl_error("cdl_dataset_synthetic: out is NULL");
    memset(out, 0, sizeof *out);
    if (n <= 0 || classes <= 0 || classes > 65536)
        return cdl_error("synthetic dataset: %d samples of %d classes: both must be >= 1 "
                         "(classes at most 65536)", n, classes);
    if (shape.c <= 0 || shape.h <= 0 || shape.w <= 0 ||
        (size_t)shape.c * shape.h * shape.w > (size_t)1 << 30)
        return cdl_error("synthetic dataset: sample shape (%d,%d,%d) must be positive and "
                         "below 2^30 values", shape.c, shape.h, shape.w);
    size_t sample = (size_t)shape.c * shape.h * shape.w;
    if (sample > SIZE_MAX / (size_t)n)
        return cdl_error("synthetic dataset: %d samples of %zu bytes overflow memory", n, sample);
    out->images = cdl_malloc(sample * (size_t)n);
    out->labels = cdl_malloc((size_t)n * sizeof *out->labels);
    if (!out->images || !out->labels) {
        cdl_dataset_free(out);
        return -1;
    }
    rng_state r;
    rng_seed(&r, seed);
    size_t bytes = sample * (size_t)n;
    for (size_t i = 0; i < bytes; i += 8) {   /* byte order independent of the host */
        uint64_t v = rng_next(&r);
        for (size_t b = 0; b < 8 && i + b < bytes; b++)
            out->images[i + b] = (uint8_t)(v >> (8 * b));
    }
    for (int k = 0; k < n; k++)
        out->labels[k] = (int32_t)rng_below(&r, (uint64_t)classes);

    snprintf(out->name, sizeof out->name, "synthetic");
    out->n = n;
    out->shape = shape;
    out->classes = classes;
    const float mean[3] = { SYNTHETIC_MEAN, SYNTHETIC_MEAN, SYNTHETIC_MEAN };
    const float std[3] = { SYNTHETIC_STD, SYNTHETIC_STD, SYNTHETIC_STD };
    set_normalisation(out, mean, std, 3);
    return 0;
}

void cdl_dataset_free(cdl_dataset *d)
{
    if (!d)
        return;
    cdl_free(d->images);
    cdl_free(d->labels);
    cdl_free(d->features);
    cdl_free(d->channel_mean);
    cdl_free(d->channel_std);
    tokens_unmap(d);
    image_stream_free(d->stream);
    if (d->class_names) {
        for (int k = 0; k < d->classes; k++)
            cdl_free(d->class_names[k]);
        cdl_free(d->class_names);
    }
    memset(d, 0, sizeof *d);
}

const char *cdl_dataset_default_dir(const char *name)
{
    for (size_t i = 0; name && i < sizeof datasets / sizeof datasets[0]; i++)
        if (strcmp(name, datasets[i].name) == 0)
            return datasets[i].default_dir;
    return NULL;
}
