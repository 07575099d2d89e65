/* Datasets and the batch loader.
 *
 * Images are kept as uint8 (n, c, h, w) and turned into normalised float32
 * batches by background worker threads. Which samples a batch holds, their
 * order and their augmentation depend only on (seed, epoch, rank, world),
 * never on the number of workers, so runs are reproducible and a resumed run
 * sees exactly the batches the interrupted one would have seen.
 */
#ifndef CDL_DATA_H
#define CDL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist package installs the files. */
#define CDL_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct cdl_dataset {
    char name[32];            /* "fashion-mnist", "mnist", "cifar10", "synthetic" */
    int n;                    /* samples */
    cdl_shape shape;          /* per sample */
    int classes;
    uint8_t *images;          /* n * c*h*w, channel-major per sample */
    int32_t *labels;          /* n */
    float mean[3], std[3];    /* per-channel normalisation applied by the loader */
    char **class_names;       /* classes entries, NULL when the dataset has none (idx, CIFAR,
                               * synthetic, integer labels); owned, freed by cdl_dataset_free */
} cdl_dataset;

/* Loads the train (train = 1) or test split of "fashion-mnist" or "mnist"
 * (idx files, gzip or raw: train-images-idx3-ubyte[.gz] ...) or "cifar10"
 * (data_batch_1..5.bin, test_batch.bin) from dir (NULL = the default for
 * that dataset). A missing, truncated or malformed file is an error naming
 * the file and what is wrong. */
int cdl_dataset_load(const char *name, const char *dir, int train, cdl_dataset *out);

/* n random samples of shape with labels in [0,classes), from seed. */
int cdl_dataset_synthetic(int n, cdl_shape shape, int classes, uint64_t seed, cdl_dataset *out);

void cdl_dataset_free(cdl_dataset *d);

typedef struct cdl_loader_config {
    size_t size;              /* sizeof(cdl_loader_config): set by cdl_loader_defaults, so a
                               * libcdl with more fields reads only those a caller knows */
    int batch_size;
    int shuffle;              /* a fresh permutation each epoch from seed+epoch */
    int augment;              /* CIFAR: random crop (4-pixel zero padding) + horizontal flip */
    int drop_last;            /* drop the last partial batch */
    int pad;                  /* data-parallel training: every rank gets ceil(N/W) samples,
                                 wrapping around (DistributedSampler); 0 for validation */
    int workers;              /* background threads preparing batches (0 = in the caller) */
    int prefetch;             /* batches prepared ahead (0 = 2 * workers, at least 2) */
    uint64_t seed;
    int rank, world;          /* this rank takes every world-th index from rank */
} cdl_loader_config;

/* Zero for every field (batch_size and world still to set) and size set:
 * every loader config starts here. */
void cdl_loader_defaults(cdl_loader_config *cfg);

typedef struct cdl_batch {
    int n;                    /* samples in this batch */
    const float *x;           /* (n, c, h, w) normalised, host memory */
    const int32_t *y;         /* n labels */
    long index;               /* batch index within the epoch */
} cdl_batch;

typedef struct cdl_loader cdl_loader;

cdl_loader *cdl_loader_create(const cdl_dataset *d, const cdl_loader_config *cfg);
void cdl_loader_destroy(cdl_loader *l);

/* Samples this rank sees per epoch, and batches per epoch. */
long cdl_loader_samples(const cdl_loader *l);
long cdl_loader_batches(const cdl_loader *l);

/* Starts an epoch at batch `first_batch` (non-zero when resuming mid-epoch). */
int cdl_loader_start_epoch(cdl_loader *l, int epoch, long first_batch);

/* Waits for the next batch: 1 and fills *b, 0 at the end of the epoch. The
 * batch stays valid until the next call of cdl_loader_next. */
int cdl_loader_next(cdl_loader *l, cdl_batch *b);

#ifdef __cplusplus
}
#endif
#endif
