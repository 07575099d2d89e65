/* Carving a validation set out of a training set (cdl_dataset_split).
 *
 * Which samples go to validation is a pure function of (seed, n, count):
 * the split happens before any rank takes its share, so every world size
 * trains and validates on the same samples. The draw uses its own RNG
 * stream, so it is independent of the shuffling of the epochs. */
#include <string.h>

#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/data/internal.h"

/* The RNG stream of the split (epochs use streams 0, 1, ...). */
#define SPLIT_STREAM 0x76616c73706c6974ull   /* "valsplit" */

long cdl_val_split_count(double split, long n)
{
    if (!(split >= 0) || n <= 0)
        return 0;
    if (split < 1)
        return (long)(split * (double)n + 0.5);
    return (long)split;
}

static char *copy_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cdl_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Copies the samples whose pick[i] == want, in index order, into out
 * (images, features or the stream's files; labels, n); the rest of out is
 * the caller's. */
static int gather(const cdl_dataset *d, const uint8_t *pick, uint8_t want, long count,
                  cdl_dataset *out)
{
    out->labels = cdl_malloc((size_t)count * sizeof *out->labels + 1);
    if (!out->labels)
        return -1;
    if (d->stream) {   /* pictures decoded later: split the file list */
        if (!(out->stream = image_stream_subset(d->stream, pick, want, count)))
            return -1;
        long k = 0;
        for (long i = 0; i < d->n; i++)
            if (pick[i] == want)
                out->labels[k++] = d->labels[i];
        out->n = (int)count;
        return 0;
    }
    size_t sample = (size_t)d->shape.c * d->shape.h * d->shape.w;
    size_t bytes = d->features ? sample * sizeof(float) : sample;
    const uint8_t *src = d->features ? (const uint8_t *)d->features : d->images;
    uint8_t *dst = cdl_malloc(bytes * (size_t)count + 1);
    if (d->features)
        out->features = (float *)dst;
    else
        out->images = dst;
    if (!dst)
        return -1;
    long k = 0;
    for (long i = 0; i < d->n; i++) {
        if (pick[i] != want)
            continue;
        memcpy(dst + (size_t)k * bytes, src + (size_t)i * bytes, bytes);
        out->labels[k++] = d->labels[i];
    }
    out->n = (int)count;
    return 0;
}

/* A cdl_malloc'd copy of n floats (NULL stays NULL): 0 or -1. */
static int copy_floats(float **dst, const float *src, int n)
{
    *dst = NULL;
    if (!src)
        return 0;
    *dst = cdl_malloc((size_t)n * sizeof **dst + 1);
    if (!*dst)
        return -1;
    memcpy(*dst, src, (size_t)n * sizeof **dst);
    return 0;
}

int cdl_dataset_split(cdl_dataset *train, long count, uint64_t seed, cdl_dataset *val)
{
    if (!train || !val)
        return cdl_error("cdl_dataset_split: train or val is NULL");
    memset(val, 0, sizeof *val);
    if (train->tokens)
        return cdl_error("cdl_dataset_split: '%s' holds token windows: its validation split is "
                         "the last tokens of the file, chosen when it is loaded "
                         "(cdl_dataset_options.val_split)", train->name);
    /* A C caller's error: cdl_train_run checks --val-split itself (carve_val). */
    if (count <= 0 || count >= train->n)
        return cdl_error("cdl_dataset_split: count %ld of the %d samples of '%s': move 1 to %d "
                         "of them into the validation set (cdl_val_split_count turns a "
                         "fraction into a count)", count, train->n, train->name, train->n - 1);
    /* A partial Fisher-Yates: the first count positions of a seeded
     * permutation are the validation samples. */
    int32_t *perm = cdl_malloc((size_t)train->n * sizeof *perm);
    uint8_t *pick = cdl_calloc((size_t)train->n, 1);
    cdl_dataset rest = *train;
    int rc = -1;
    if (!perm || !pick)
        goto out;
    for (int i = 0; i < train->n; i++)
        perm[i] = i;
    rng_state r;
    rng_seed2(&r, seed, SPLIT_STREAM);
    for (long i = 0; i < count; i++) {
        long j = i + (long)rng_below(&r, (uint64_t)(train->n - i));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        pick[perm[i]] = 1;
    }
    *val = *train;   /* name, shape, classes, normalisation */
    val->images = NULL;
    val->features = NULL;
    val->stream = NULL;
    val->labels = NULL;
    val->class_names = NULL;
    val->skipped = 0;
    if (copy_floats(&val->channel_mean, train->channel_mean, train->shape.c) != 0 ||
        copy_floats(&val->channel_std, train->channel_std, train->shape.c) != 0)
        goto out;
    if (train->class_names) {   /* each dataset owns its copy */
        val->class_names = cdl_calloc((size_t)train->classes, sizeof *val->class_names);
        if (!val->class_names)
            goto out;
        for (int k = 0; k < train->classes; k++)
            if (train->class_names[k] &&
                !(val->class_names[k] = copy_str(train->class_names[k])))
                goto out;
    }
    rest.images = NULL;
    rest.features = NULL;
    rest.stream = NULL;
    rest.labels = NULL;
    if (gather(train, pick, 1, count, val) != 0 ||
        gather(train, pick, 0, train->n - count, &rest) != 0)
        goto out;
    cdl_free(train->images);
    cdl_free(train->features);
    cdl_free(train->labels);
    image_stream_free(train->stream);
    train->images = rest.images;
    train->features = rest.features;
    train->stream = rest.stream;
    train->labels = rest.labels;
    train->n = rest.n;
    rest.images = NULL;
    rest.features = NULL;
    rest.stream = NULL;
    rest.labels = NULL;
    rc = 0;
out:
    cdl_free(rest.images);
    cdl_free(rest.features);
    image_stream_free(rest.stream);
    cdl_free(rest.labels);
    if (rc != 0)
        cdl_dataset_free(val);   /* what was made of it so far */
    cdl_free(perm);
    cdl_free(pick);
    return rc;
}
