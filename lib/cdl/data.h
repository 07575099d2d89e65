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
    uint8_t *images;          /* n * c*h*w, channel-major per sample; NULL when features
                               * hold the samples */
    int32_t *labels;          /* n */
    float mean[3], std[3];    /* per-channel normalisation applied by the loader */
    char **class_names;       /* classes entries, NULL when the dataset has none (idx, CIFAR,
                               * synthetic, integer labels); owned, freed by cdl_dataset_free */
    float *features;          /* n * c*h*w float32 samples (CSV tables, float .npy), instead
                               * of images; normalised by the loader like them */
    float *channel_mean;      /* shape.c entries each when shape.c > 3 (CSV columns, arrays */
    float *channel_std;       /* with many channels), else NULL: mean/std hold them; owned */
    long skipped;             /* unreadable files left out (--skip-bad-files) */
    int label_len;            /* labels per sample: 0 or 1 = one; token windows: T, and a
                               * batch's y holds n*T labels (sample-major) */
    /* Token data ("text", "tokens"; tokens.c): ntokens tokens of token_bytes bytes each (1:
     * the bytes of a text, 2: little-endian uint16, nanoGPT's .bin) at tokens, read-only;
     * the loader checks each window's ids below classes as it copies it (loading reads
     * none of them: a bad id is a batch's error naming the file and offset). A sample is a
     * window of T = label_len tokens, shape (T,1,1), x the ids as floats and y the same
     * window shifted by one token. n = (ntokens-1)/T
     * windows per epoch: a shuffling loader draws each window's start from (seed, epoch,
     * index), one that does not takes the windows back to back (validation). */
    const uint8_t *tokens;    /* NULL for every other dataset */
    size_t ntokens;
    int token_bytes;
    void *map;                /* the reader's record of the file (its mapping, its name for
                               * errors), freed by cdl_dataset_free; map_len: bytes mapped */
    size_t map_len;
    /* An image folder decoded as batches need them (enum cdl_decode): the file list the
     * loader's workers read, with images NULL; NULL for every other dataset. Owned. */
    struct cdl_image_stream *stream;
} cdl_dataset;

/* How an image folder's pictures are decoded: all of them once, at load
 * time, into memory (fast epochs, n*c*h*w bytes), or by the loader's worker
 * threads as batches need them (any size of folder, a decode per sample
 * per epoch); auto: memory when they fit in what the process may use. */
enum cdl_decode {
    CDL_DECODE_AUTO = 0,
    CDL_DECODE_MEMORY,
    CDL_DECODE_STREAM
};

/* The formats a dataset can be read from besides the named datasets
 * (docs/data.md): "imagefolder" (one subdirectory of PNG/JPEG files per
 * class), "npy" (a directory of x_train.npy, y_train.npy ...), "npz" (one
 * archive holding x_train, y_train ...) and "csv" (a table with a header
 * row). Their path is --data-dir (a directory or a file). */
#define CDL_DATASET_FORMATS "imagefolder, npy, npz, csv, text, tokens"

/* How samples are normalised: per channel (x - mean) / std, x = v/255 for
 * uint8 pixels, the value itself for float features. */
enum cdl_normalize {
    CDL_NORMALIZE_DEFAULT = 0,  /* named datasets: their published constants; formats: computed
                                 * from the training split in one pass */
    CDL_NORMALIZE_COMPUTE,      /* computed from the split that is loaded */
    CDL_NORMALIZE_GIVEN,        /* norm_mean/norm_std below */
    CDL_NORMALIZE_NONE          /* mean 0, std 1 */
};

/* Options of cdl_dataset_load_with; cdl_dataset_options_defaults sets size
 * and zeroes the rest (a libcdl with more fields reads only those a caller
 * knows, as with cdl_loader_config). */
typedef struct cdl_dataset_options {
    size_t size;
    int image_size;           /* imagefolder: resize the shorter side to this and crop the
                               * centre square; 0 = the size of the first image (others are
                               * resized and cropped to it) */
    int channels;             /* imagefolder: 1 (grayscale) or 3 (RGB); 0 = 1 if the first
                               * image is grayscale, else 3 */
    int threads;              /* imagefolder: decoding threads (0 = cdl_default_threads()) */
    int skip_bad_files;       /* imagefolder: leave out unreadable files (counted in
                               * cdl_dataset.skipped) instead of failing */
    const char *label_column; /* csv: the label column's header name (NULL = "label" if present,
                               * else the last column) */
    int normalize;            /* enum cdl_normalize */
    int norm_count;           /* GIVEN: 1 (every channel) or shape.c values in each array */
    const float *norm_mean, *norm_std;
    int block_size;           /* text, tokens: tokens per sample (T); 0 = 64 */
    int vocab_size;           /* tokens: every token must be below it, 1..65536; 0 = 50257
                               * (GPT-2's); text: 0 or 256 (byte-level) */
    double val_split;         /* text, tokens without val.bin: the validation part, the last
                               * tokens of the file: a fraction in (0,1) or a count of tokens;
                               * 0 = 0.1, < 0 = none (the test split is then absent) */
    size_t memory_limit;      /* imagefolder: bytes the decoded pictures may need (they are
                               * kept in memory, and a split copies them once); 0 = what this
                               * process may use: node memory or its cgroup's limit */
    int decode;               /* imagefolder: enum cdl_decode (--decode) */
    int image_height, image_width; /* imagefolder: both > 0: every picture scaled to cover
                               * h x w and centre-cropped to it, overriding image_size (a
                               * test split read at its training split's size) */
    int (*stop)(void);        /* imagefolder: polled by the decoding threads between
                               * pictures; nonzero ends the load with an error (decoding a
                               * large folder takes minutes: cdl_train_run passes its
                               * SIGTERM/SIGUSR1 flag); NULL = never */
    void (*skipped)(const char *why, void *arg); /* imagefolder with skip_bad_files: called
                               * for each file left out with its error (naming it), in sample
                               * order, on the loading thread; NULL = only counted */
    void *skipped_arg;
    void (*left_out)(const char *path, void *arg); /* imagefolder: called for each picture
                               * of a format torchvision's ImageFolder reads and cdl does not
                               * (.bmp .ppm .pgm .tif .tiff .webp), left out of the data,
                               * in sample order, on the loading thread; NULL = in silence */
    void *left_out_arg;
    int jpeg_full;            /* imagefolder, cdl_dataset_from_image_files_with: 1 = decode a
                               * JPEG whole, then resize it (as PIL and torchvision do: their
                               * pixels); 0 = decode a JPEG that shrinks at the smallest DCT
                               * scale covering the target (5-8x faster, the pixels differ
                               * from PIL's by a few levels, more at sharp edges) */
} cdl_dataset_options;

void cdl_dataset_options_defaults(cdl_dataset_options *o);
/* The size of this program's struct to libcdl, as cdl_train_defaults. */
void cdl_dataset_options_defaults_sized(cdl_dataset_options *o, size_t size);
#define cdl_dataset_options_defaults(o) cdl_dataset_options_defaults_sized((o), sizeof *(o))

/* The splits cdl_dataset_load reads (its train argument). */
enum cdl_split {
    CDL_SPLIT_TEST = 0,     /* the held-out split: an image folder's test/, else its val/;
                             * token data's validation windows */
    CDL_SPLIT_TRAIN = 1,
    CDL_SPLIT_VAL = 2       /* a validation split of its own: an image folder's val/ when
                             * test/ is there too (the other data have none: 1) */
};

/* cdl_dataset_load, with options; name may also be a format of
 * CDL_DATASET_FORMATS, path its directory or file (required for them).
 * train: enum cdl_split. Returns 1 (out empty, no error) for a split
 * (CDL_SPLIT_TEST, CDL_SPLIT_VAL) the data does not have, 0 on success, -1
 * with an error naming the file. */
int cdl_dataset_load_with(const char *name, const char *path, int train,
                          const cdl_dataset_options *opt, cdl_dataset *out);

/* Decodes the PNG/JPEG files paths[0..n) into a dataset of samples of
 * shape (c 1 or 3): each is scaled and centre-cropped as the imagefolder
 * reader does, by threads threads (0 = cdl_default_threads()). labels[i] is
 * the index in paths of the i-th sample, classes is n; mean/std are left
 * 0/1 for the caller. An unreadable file is an error naming it, or with
 * skip_bad left out and counted in skipped (at least one must be read). */
int cdl_dataset_from_image_files(const char *const *paths, int n, cdl_shape shape, int threads,
                                 int skip_bad, cdl_dataset *out);
/* The same with opt's threads, skip_bad_files and jpeg_full (NULL: the
 * defaults). */
int cdl_dataset_from_image_files_with(const char *const *paths, int n, cdl_shape shape,
                                      const cdl_dataset_options *opt, cdl_dataset *out);

/* Reads the CSV table at path (header row, RFC 4180) as rows to predict
 * on: the columns named features[0..nf), matched by header name in any
 * order (a line break in a name matches a space), become float32 samples
 * of shape (nf,1,1) in that order, one per row in file order; labels[i]
 * is i and classes is n. A column named label_column (NULL: none) is not
 * read as a feature: its text per row goes into class_names[i] ("" where
 * empty), class_names being NULL when the table lacks it. Other columns
 * are not read; their names, quoted and comma-separated, go into ignored
 * (ignored_len bytes; may be NULL). A missing feature column is an error
 * naming it, an empty or non-numeric cell one naming its line (from 1,
 * the header's first line, as a text editor numbers them) and column.
 * mean/std (channel_mean/channel_std when nf > 3) are left 0/1 for the
 * caller. */
int cdl_dataset_from_csv_rows(const char *path, const char *const *features, int nf,
                              const char *label_column, char *ignored, size_t ignored_len,
                              cdl_dataset *out);
/* The same, and where lines is not NULL, *lines a cdl_malloc'd array of
 * out->n: row i's line in the file, from 1 (the header's first line), that
 * of its label_column cell (of its first field where the table has no such
 * column), for messages about its label: a multi-line header, blank lines
 * and quoted fields holding line breaks make it other than i + 2. The
 * caller frees it with cdl_free; NULL on an error. */
int cdl_dataset_from_csv_rows_lines(const char *path, const char *const *features, int nf,
                                    const char *label_column, char *ignored, size_t ignored_len,
                                    cdl_dataset *out, long **lines);

/* Gives dst the normalisation of src (the test split takes the training
 * split's): same channel count required. */
int cdl_dataset_copy_normalization(cdl_dataset *dst, const cdl_dataset *src);

/* Loads the train (train = 1) or test split of "fashion-mnist" or "mnist"
 * (idx files, gzip or raw: train-images-idx3-ubyte[.gz] ...) or "cifar10"
 * (data_batch_1..5.bin, test_batch.bin) from dir (NULL = the default for
 * that dataset). A missing, truncated or malformed file is an error naming
 * the file and what is wrong. */
int cdl_dataset_load(const char *name, const char *dir, int train, cdl_dataset *out);

/* The directory cdl_dataset_load reads name from when given none, or NULL
 * for an unknown name. */
const char *cdl_dataset_default_dir(const char *name);

/* n random samples of shape with labels in [0,classes), from seed. */
int cdl_dataset_synthetic(int n, cdl_shape shape, int classes, uint64_t seed, cdl_dataset *out);

void cdl_dataset_free(cdl_dataset *d);

/* cdl_loader_config.augment; 1 is crop + flip, as before there was a choice. */
enum cdl_augment {
    CDL_AUGMENT_NONE = 0,
    CDL_AUGMENT_CROP_FLIP = 1,
    CDL_AUGMENT_CROP = 2,
    CDL_AUGMENT_FLIP = 3
};
/* Moves `count` samples of train, drawn with seed (split.c), into val (a new
 * dataset); train keeps the rest. Both keep index order. The choice depends
 * only on (seed, train->n, count), never on ranks or threads. */
int cdl_dataset_split(cdl_dataset *train, long count, uint64_t seed, cdl_dataset *val);
/* Validation samples of a --val-split value for n training samples: 0 for
 * 0, round(split * n) for a fraction in (0,1), else split itself. */
long cdl_val_split_count(double split, long n);

typedef struct cdl_loader_config {
    size_t size;              /* sizeof(cdl_loader_config): set by cdl_loader_defaults, so a
                               * libcdl with more fields reads only those a caller knows */
    int batch_size;
    int shuffle;              /* a fresh permutation each epoch from seed+epoch */
    int augment;              /* enum cdl_augment: random crop (4-pixel zero padding) and/or
                               * horizontal flip; images only */
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
/* The size of this program's struct to libcdl, as cdl_train_defaults. */
void cdl_loader_defaults_sized(cdl_loader_config *cfg, size_t size);
#define cdl_loader_defaults(cfg) cdl_loader_defaults_sized((cfg), sizeof *(cfg))

typedef struct cdl_batch {
    int n;                    /* samples in this batch */
    const float *x;           /* (n, c, h, w) normalised, host memory */
    const int32_t *y;         /* n labels, n*T for token windows (label_len T) */
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

/* Waits for the next batch: 1 and fills *b, 0 at the end of the epoch (and
 * on every later call), -1 with cdl_error when the batch could not be made
 * (a worker failed to read or decode a sample of a streamed image folder)
 * or no epoch was started: loop while it returns 1. The batch stays valid
 * until the next call of cdl_loader_next. */
int cdl_loader_next(cdl_loader *l, cdl_batch *b);

#ifdef __cplusplus
}
#endif
#endif
