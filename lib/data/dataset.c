/* The datasets cdl knows: where their files live by default, what to tell a
 * user who lacks them, and their per-channel normalisation constants (the
 * usual published means and standard deviations of the training sets). */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/core/rng.h"
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

int cdl_dataset_load(const char *name, const char *dir, int train, cdl_dataset *out)
{
    if (!out)
        return cdl_error("cdl_dataset_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!name)
        return cdl_error("cdl_dataset_load: no dataset name: use fashion-mnist, mnist or cifar10");
    const dataset_info *info = NULL;
    for (size_t i = 0; i < sizeof datasets / sizeof datasets[0]; i++)
        if (strcmp(name, datasets[i].name) == 0)
            info = &datasets[i];
    if (!info)
        return cdl_error("unknown dataset '%s': use fashion-mnist, mnist or cifar10 "
                         "(synthetic data is made, not loaded)", name);
    if (!dir || !*dir)
        dir = info->default_dir;

    int rc = info->format == FORMAT_IDX ? idx_read(dir, train, 10, info->hint, out)
                                        : cifar_read(dir, train, info->hint, out);
    if (rc) {
        cdl_dataset_free(out);
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", info->name);
    out->classes = 10;
    set_normalisation(out, info->mean, info->std, out->shape.c);
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
    if (d->class_names) {
        for (int k = 0; k < d->classes; k++)
            cdl_free(d->class_names[k]);
        cdl_free(d->class_names);
    }
    memset(d, 0, sizeof *d);
}
