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

/* Reads the idx pair <prefix>-images-idx3-ubyte[.gz] / <prefix>-labels-idx1-ubyte[.gz]
 * (prefix "train" or "t10k") from dir: 28x28 uint8 images, labels < classes.
 * Fills n, shape, images, labels of out; hint says what to do when a file is
 * missing. */
int idx_read(const char *dir, int train, int classes, const char *hint, cdl_dataset *out);

/* Reads CIFAR-10 binary batches (data_batch_1..5.bin or test_batch.bin) from
 * dir: records of 1 label byte + 3x32x32 bytes. Fills n, shape, images, labels. */
int cifar_read(const char *dir, int train, const char *hint, cdl_dataset *out);

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
 * of epoch: a pure function of (seed, epoch, pos), so it never depends on
 * which worker prepares the sample or when. */
aug_params augment_draw(uint64_t seed, int epoch, long pos);

/* lut[v] = (v/255 - mean) / std in float32 operations, bit for bit what
 * torchvision's ToTensor + Normalize give. */
void normalise_lut(float lut[256], float mean, float std);

/* One sample (c,h,w) uint8 -> float through the per-channel tables
 * (channel k uses luts[min(k,2)], 256 floats each), cropped and flipped by a;
 * padding pixels are uint8 0 (normalised like a black pixel, as torchvision's
 * RandomCrop on the image before ToTensor/Normalize). */
void convert_sample(const uint8_t *src, cdl_shape s, const float (*luts)[256],
                    aug_params a, float *dst);

#endif
