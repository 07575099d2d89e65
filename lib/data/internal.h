/* lib/data's internal interface: the file readers, the sampler and the
 * per-sample conversion, shared by dataset.c, loader.c and the unit tests. */
#ifndef CDL_DATA_INTERNAL_H
#define CDL_DATA_INTERNAL_H

#include <stdint.h>

#include <cdl/data.h>

/* ---------------------------------------------------------------- readers */

/* Opens path for reading only if it is a regular file: a FIFO or device
 * would block or never end. The fd (blocking again), or -1 with an error
 * naming the file (hint: what to do when it is missing). */
int data_open_regular(const char *path, const char *hint);
/* What to do when opening a dataset's file or folder failed with err: for
 * too many open files (EMFILE, ENFILE) the limit to raise, not the data's
 * layout; a missing path (ENOENT, ENOTDIR) says the path does not exist,
 * EACCES/EPERM to check the permissions, then " or " + hint; other errors
 * the hint alone (in buf, of len). Every dataset reader's open goes here. */
const char *data_open_advice(int err, const char *hint, char *buf, size_t len);
/* The same, and the file's size in *size. */
int data_open_size(const char *path, const char *hint, size_t *size);

/* Reads the idx pair <prefix>-images-idx3-ubyte[.gz] / <prefix>-labels-idx1-ubyte[.gz]
 * (prefix "train" or "t10k") from dir: 28x28 uint8 images, labels < classes.
 * Fills n, shape, images, labels of out; hint says what to do when a file is
 * missing. */
int idx_read(const char *dir, int train, int classes, const char *hint, cdl_dataset *out);

/* Reads CIFAR-10 binary batches (data_batch_1..5.bin or test_batch.bin) from
 * dir: records of 1 label byte + 3x32x32 bytes. Fills n, shape, images, labels. */
int cifar_read(const char *dir, int train, const char *hint, cdl_dataset *out);

/* The whole of a regular file in memory (cdl_malloc'd, *len bytes; a file
 * over max bytes is an error naming it). */
int data_read_file(const char *path, size_t max, const char *hint, uint8_t **buf, size_t *len);

/* s with bytes that are not printable UTF-8 written as \xNN, for error
 * messages: file names are bytes, a terminal or log wants text. buf (len
 * bytes) is returned. */
const char *data_printable(const char *s, char *buf, size_t len);

/* 1 if s is valid UTF-8 without control characters. */
int data_utf8_ok(const char *s);

/* strcmp for file and folder names in the order of Python's sorted() of
 * the names os.scandir gives (torchvision's ImageFolder): by code point,
 * a byte that is not valid UTF-8 counting as U+DC80..U+DCFF
 * (surrogateescape). Valid UTF-8 sorts as by strcmp; a name with other
 * bytes does not (b"\xa9" after "\xc3\xa9", U+00E9). */
int data_name_cmp(const char *a, const char *b);

/* A decoded picture: h rows of w pixels of c (1 or 3) interleaved bytes. */
typedef struct image_buf {
    uint8_t *px;
    int h, w, c;
} image_buf;

/* *opt as this libcdl's struct (the caller's may be older: the fields it
 * lacks take their defaults; NULL: all defaults); -1 + cdl_error for a
 * struct of a newer cdl. */
int data_options_read(const cdl_dataset_options *opt, cdl_dataset_options *o);

/* Decodes a PNG or JPEG (told apart by their magic bytes) held in memory;
 * name is the file for errors. Readers call it (and image_decode_for) only
 * through image_file_fit_as, which admits the decode through the memory
 * gate (decode_gate_enter); the other callers are the unit tests and the
 * fuzz target. Grayscale stays 1 channel, everything else
 * (palette, alpha, 16-bit) becomes 8-bit RGB. A format cdl was built
 * without is an error naming the file and the configure option. */
int image_decode(const uint8_t *data, size_t len, const char *name, image_buf *out);

/* The same for a picture that image_fit will shrink to want_h x want_w: a
 * JPEG is decoded at the smallest DCT scale (1/8 .. 8/8) still covering it. */
int image_decode_for(const uint8_t *data, size_t len, const char *name, int want_h, int want_w,
                     image_buf *out);

/* Only the size and channel count of an encoded image (the header). */
int image_probe(const uint8_t *data, size_t len, const char *name, int *h, int *w, int *c);

/* in -> dst (c, h, w) uint8: scaled (bilinear, antialiased when shrinking)
 * so it covers h x w with its aspect ratio kept, the centre h x w cropped,
 * converted to c channels (gray -> RGB repeats it, RGB -> gray is the
 * ITU-R 601 luma PIL uses). Same size: a plain copy. */
int image_fit(const image_buf *in, int h, int w, int c, uint8_t *dst);

/* Largest picture file read (1 GiB). */
#define IMAGE_MAX_FILE_BYTES ((size_t)1 << 30)

/* Reads the picture at path and fits it into dst (c, h, w) as the folder
 * reader does (image_decode_for + image_fit); errors name the file.
 * src_c (NULL: not wanted): the file's own channel count, 1 or 3. */
int image_file_fit(const char *path, int h, int w, int c, uint8_t *dst, int *src_c);

/* Whether a decode of `need` bytes may start beside decodes holding
 * `running` bytes, in a process holding `held` of its `limit` (SIZE_MAX:
 * none): 1 yes, 0 not yet (wait for those running), -1 never (it does not
 * fit alone). Pure, for the unit test. */
int decode_admit(size_t need, size_t running, size_t held, size_t limit);

/* Waits until a decode of `need` bytes (a picture h x w, of file name)
 * fits in memory beside those running (decodegate.c): 1, then
 * decode_gate_leave(need) after it; 0: not counted (small, or no limit);
 * -1 + cdl_error naming the file when it cannot fit. */
int decode_gate_enter(size_t need, const char *name, int h, int w);
void decode_gate_leave(size_t need);

/* image_file_fit with jpeg_full 1: a JPEG decoded whole before it is
 * resized (cdl_dataset_options.jpeg_full: PIL's pixels). */
int image_file_fit_as(const char *path, int h, int w, int c, int jpeg_full, uint8_t *dst,
                      int *src_c);

/* The error for a colour picture among samples that are grayscale only
 * because the first picture, first, is (no --channels given): made gray in
 * silence, a web scrape whose sorted first file was gray trained without
 * colour. */
int image_colour_in_gray(const char *path, const char *first);

/* Pictures decoded when a batch needs them (stream.c): cdl_dataset.stream,
 * with images NULL. Sample i is paths[i] fitted to (c, h, w). */
typedef struct cdl_image_stream {
    char **paths;     /* n, owned (malloc'd strings) */
    int n;
    int h, w, c;
    int threads;      /* for the statistics' pass (0 = cdl_default_threads()) */
    int have_hist;    /* hist holds the pixels of every file already (the check of
                       * --skip-bad-files decoded them), so no second pass */
    int jpeg_full;    /* cdl_dataset_options.jpeg_full */
    char *gray_from;  /* c is 1 because this first picture is gray (no --channels): a
                       * colour picture is an error (image_colour_in_gray); owned */
    uint64_t hist[3][256];
} image_stream;

/* Decodes sample i into dst (c*h*w bytes). Thread-safe: the loader's
 * workers call it. -1 with an error naming the file. */
int image_stream_read(const image_stream *s, long i, uint8_t *dst);
void image_stream_free(image_stream *s);
/* The samples i with pick[i] == want (count of them), in order, as a new
 * stream (cdl_dataset_split), or NULL with an error. */
image_stream *image_stream_subset(const image_stream *s, const uint8_t *pick, uint8_t want,
                                  long count);
/* Per-channel histograms of the pixels of every picture of s, decoded by
 * threads threads (0: s->threads); *pixels: the pixels per channel. */
int image_stream_histograms(const image_stream *s, int threads, uint64_t hist[3][256],
                            double *pixels);

/* Reads an ImageFolder tree (imagefolder.c). train = 0 reads the test split
 * (dir/test or dir/val), with the class list of dir/train. 1 = no such split. */
int imagefolder_read(const char *dir, int train, const cdl_dataset_options *o, cdl_dataset *out);

/* A parsed .npy array held in memory (npy.c): data points into the buffer. */
typedef struct npy_array {
    char kind;        /* 'u', 'i', 'f' */
    int itemsize;     /* 1, 2, 4, 8 */
    int ndim;
    long shape[8];
    size_t count;     /* elements */
    const uint8_t *data;
} npy_array;

/* Parses the .npy bytes buf (name for errors): little-endian or one-byte
 * numbers, C order, data size checked against the declared shape. */
int npy_parse(const uint8_t *buf, size_t len, const char *name, npy_array *a);

/* x (images or features) and y (labels) arrays -> out (npy.c). */
int npy_to_dataset(const npy_array *x, const npy_array *y, const char *xname, const char *yname,
                   cdl_dataset *out);

/* path = a directory of x_train.npy/y_train.npy (x_test.npy/y_test.npy), or
 * x.npy/y.npy as the training split; npz: one archive with those names. */
int npy_read_dir(const char *dir, int train, cdl_dataset *out);
int npz_read(const char *path, int train, cdl_dataset *out);
/* The same from an archive in memory (the fuzz target). */
int npz_read_mem(const uint8_t *buf, size_t len, const char *name, int train, cdl_dataset *out);

/* The layout of a training table that its test table must follow: the
 * feature columns' names in order and the label column's (owned), and
 * its class names (borrowed; NULL: the labels are integer class indices).
 * name (borrowed; NULL: not said): the training table's file, for the
 * test table's messages. */
typedef struct csv_layout {
    char **features;
    int nf;
    char *label;
    char *const *class_names;
    int classes;
    const char *name;
} csv_layout;
void csv_layout_free(csv_layout *l);

/* A CSV table in memory (RFC 4180, header row) -> features (f,1,1) and
 * labels (csv.c). label_column NULL = "label" if present, else the last
 * column. train NULL: a training table (its classes are its labels);
 * else a test table, read in train's layout: its columns matched to the
 * training table's by name (in any order, all of them and no more), its
 * labels among train's classes. layout (may be NULL) receives this table's
 * columns, for reading its test table. */
int csv_parse(const char *buf, size_t len, const char *name, const char *label_column,
              const csv_layout *train, csv_layout *layout, cdl_dataset *out);

/* Rows to predict on (cdl_dataset_from_csv_rows): the columns named
 * features[0..nf) of the table in buf, by name; label's text per row
 * into class_names when the table has that column. */
int csv_parse_rows(const char *buf, size_t len, const char *name, const char *const *features,
                   int nf, const char *label, char *ignored, size_t ignored_len, cdl_dataset *out);
/* The same; row_lines (NULL: not wanted) receives each row's line in the
 * file, cdl_malloc'd (cdl_dataset_from_csv_rows_lines), NULL on an error. */
int csv_parse_rows_lines(const char *buf, size_t len, const char *name,
                         const char *const *features, int nf, const char *label, char *ignored,
                         size_t ignored_len, cdl_dataset *out, long **row_lines);

/* The training table's header (path as csv_read takes it), for a
 * checkpoint: its feature columns' names one per line (a line break in a
 * name a space) and the label column's name; cdl_malloc'd. */
int csv_columns(const char *path, const char *label_column, char **features, char **label);

/* path = a CSV file (the training split) or a directory holding train.csv
 * and test.csv. */
int csv_read(const char *path, int train, const char *label_column, cdl_dataset *out);

/* Token data (tokens.c). Ids are checked below the vocabulary when a
 * window is copied out (tokens_window), not at load time. */
/* The training (train = 1) or validation split of the tokens in buf: the
 * whole of it (whole = 1: train.bin, val.bin) or the first / last part by
 * o->val_split. 1 = no validation split. out->tokens points into buf, and
 * out->map holds name (tokens_unmap frees it). */
int tokens_read_mem(const uint8_t *buf, size_t len, const char *name, int token_bytes,
                    const cdl_dataset_options *o, int train, int whole, cdl_dataset *out);
/* name "text" (path a file) or "tokens" (path a directory of train.bin
 * [val.bin], or one .bin file): the split, memory-mapped. */
int tokens_read(const char *name, const char *path, int train, const cdl_dataset_options *o,
                cdl_dataset *out);
void tokens_unmap(cdl_dataset *d);
/* nanoGPT's meta.pkl (meta_pkl.c): 1 and *vocab = its vocab_size entry, 0
 * when the pickle in buf (len bytes) has none, -1 (an error naming name)
 * when it is not a pickle the reader follows. The opcodes are walked,
 * never executed. */
int tokens_meta_vocab(const uint8_t *buf, size_t len, const char *name, long *vocab,
                      char ***itos);
/* itos (may be NULL): when the pickle has an 'itos' table of every id
 * 0..*vocab-1, *itos = its strings as UTF-8 (free with tokens_itos_free),
 * else NULL. */
void tokens_itos_free(char **itos, long vocab);
/* Into meta (len bytes): where nanoGPT's meta.pkl of tokens:path is
 * (path/meta.pkl, or the one beside the file path); 1 when it is a
 * regular file there, 0 when it is not there, -1 (true: read it, and fail
 * naming it) when its stat() fails otherwise (EIO). */
int tokens_meta_path(const char *path, char *meta, size_t len);
/* The meta.pkl that gave the vocabulary of token data d (read when no
 * vocab_size was given), or NULL; and its itos table (d->classes UTF-8
 * strings, the text of each id), or NULL when it has none usable. */
const char *tokens_vocab_file(const cdl_dataset *d);
char *const *tokens_itos(const cdl_dataset *d);
/* 0 while the file d maps is at least as long as when it was mapped, else
 * -1 with an error naming it: a file cut short under a mapping kills the
 * process that reads past its new end (SIGBUS), without a word. */
int tokens_intact(const cdl_dataset *d);
/* The file token data d was read from: its name, and in *fd the open file
 * (-1 when the caller gave the bytes) and in *offset the split's first byte
 * in it. */
const char *tokens_source(const cdl_dataset *d, int *fd, size_t *offset);
/* The first token of window idx of epoch: drawn from (seed, epoch, idx)
 * when random, else idx * T (back to back). */
size_t tokens_window_start(const cdl_dataset *d, int random, uint64_t seed, int epoch, long idx);
/* x (T) = the ids of tokens [start, start+T) as floats, y (T) = tokens
 * [start+1, start+T]; -1 with an error naming the file, the token's offset
 * in it and its id when one of them is not below d->classes (then x and y
 * hold it: do not use them). */
int tokens_window(const cdl_dataset *d, size_t start, float *x, int32_t *y);

/* Per-channel mean and std of d in one pass (formats.c): pixels as v/255,
 * features as they are; a constant channel gets std 1. */
int dataset_compute_normalization(cdl_dataset *d);

/* ---------------------------------------------------------------- sampler */

/* order (n) = the epoch's sample order: identity without shuffle, else a
 * Fisher-Yates permutation from rng_seed2(seed, epoch), the same on every rank. */
void sampler_order(int32_t *order, int n, int shuffle, uint64_t seed, int epoch);

/* Samples rank takes per epoch: ceil(n/world) with pad (the order wraps
 * around), else the positions rank, rank+world, ... below n. */
long sampler_count(long n, int rank, int world, int pad);

/* Position in the (wrapped) epoch order of this rank's k-th sample; the
 * dataset index is order[pos % n]. */
static inline long sampler_position(int rank, int world, long k)
{
    return rank + k * (long)world;
}

/* ---------------------------------------------------------------- conversion */

#define AUG_PAD 4   /* zero padding on each side before the random crop */

/* One sample's augmentation: the crop's top-left corner (dy, dx) in the
 * padded image, each in [0, 2*AUG_PAD], and a horizontal flip. */
typedef struct aug_params {
    int dy, dx, flip;
} aug_params;

/* The identity: a centred crop, no flip. */
static inline aug_params augment_none(void)
{
    return (aug_params){ AUG_PAD, AUG_PAD, 0 };
}

/* Counter-based draw for the sample at position pos (see sampler_position)
 * of epoch, for mode (enum cdl_augment, not NONE): a pure function of (seed, epoch, pos), so it never depends on
 * which worker prepares the sample or when. */
aug_params augment_draw(uint64_t seed, int epoch, long pos, int mode);

/* One float sample (c,h,w) -> (x - mean[k]) / std[k] per channel k. */
void convert_features(const float *src, cdl_shape s, const float *mean, const float *std,
                      float *dst);

/* lut[v] = (v/255 - mean) / std in float32 operations, bit for bit what
 * torchvision's ToTensor + Normalize give. */
void normalise_lut(float lut[256], float mean, float std);

/* One sample (c,h,w) uint8 -> float through the per-channel tables
 * (channel k uses luts[min(k,2)], 256 floats each), cropped and flipped by a;
 * padding pixels are uint8 0 (normalised like a black pixel, as torchvision's
 * RandomCrop on the image before ToTensor/Normalize). */
void convert_sample(const uint8_t *src, cdl_shape s, const float (*luts)[256],
                    aug_params a, float *dst);

/* A fingerprint of the contents of d (fingerprint.c), e.g. "v1 crc32=1a2b3c4d",
 * into out (DATA_FINGERPRINT_LEN bytes): the same for the same data wherever
 * it lies, another one for other data of the same size. -1 with an error
 * naming the file when a picture or token file cannot be read. */
#define DATA_FINGERPRINT_LEN 32
int data_fingerprint(const cdl_dataset *d, char *out, size_t len);

#endif
