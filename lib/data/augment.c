/* uint8 sample -> normalised float, with the optional CIFAR augmentation
 * (random crop of the image zero-padded by AUG_PAD on each side, then a
 * horizontal flip with p = 0.5).
 *
 * Normalisation goes through a 256-entry table per channel, so it costs one
 * load per pixel and gives exactly (v/255 - mean)/std rounded once. The crop
 * is done while converting: rows and columns that fall into the padding are
 * filled with the table's value for 0, the rest is read at the shifted (and,
 * for a flip, mirrored) column, so no padded copy is ever made.
 */
#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/data/internal.h"

/* Keeps augmentation streams apart from the shuffle streams rng_seed2(seed, epoch). */
#define AUG_DOMAIN 0x6175676d656e7421ull

aug_params augment_draw(uint64_t seed, int epoch, long pos)
{
    rng_state r;
    /* One stream per (epoch, position): positions stay below 2^40. */
    rng_seed2(&r, seed ^ AUG_DOMAIN, (uint64_t)(uint32_t)epoch << 40 ^ (uint64_t)pos);
    aug_params a;
    a.dy = (int)rng_below(&r, 2 * AUG_PAD + 1);
    a.dx = (int)rng_below(&r, 2 * AUG_PAD + 1);
    a.flip = (int)(rng_next(&r) >> 63);
    return a;
}

void normalise_lut(float lut[256], float mean, float std)
{
    for (int v = 0; v < 256; v++)
        lut[v] = (float)(((double)v / 255.0 - (double)mean) / (double)std);
}

static void fill(float *o, int n, float v)
{
    for (int i = 0; i < n; i++)
        o[i] = v;
}

/* One output row of width w from the source row (NULL: all padding). The
 * output column x reads source column x + shift, or (w-1-x) + shift when
 * flipped; columns outside the source are padding. */
static void crop_row(const uint8_t *row, int w, int shift, int flip, const float *lut, float *o)
{
    if (!row) {
        fill(o, w, lut[0]);
        return;
    }
    /* Output columns [x0, x1) read inside the source row. */
    int x0 = flip ? shift : -shift, x1 = flip ? w + shift : w - shift;
    x0 = x0 < 0 ? 0 : x0 > w ? w : x0;
    x1 = x1 > w ? w : x1 < x0 ? x0 : x1;
    fill(o, x0, lut[0]);
    if (flip) {
        const int last = w - 1 + shift;   /* source column of output column 0 */
        for (int x = x0; x < x1; x++)
            o[x] = lut[row[last - x]];
    } else {
        for (int x = x0; x < x1; x++)
            o[x] = lut[row[x + shift]];
    }
    fill(o + x1, w - x1, lut[0]);
}

void convert_sample(const uint8_t *src, cdl_shape s, const float (*luts)[256], aug_params a,
                    float *dst)
{
    const size_t plane = (size_t)s.h * s.w;
    const int plain = a.dy == AUG_PAD && a.dx == AUG_PAD && !a.flip;
    for (int k = 0; k < s.c; k++) {
        const float *lut = luts[k < 3 ? k : 2];
        const uint8_t *in = src + k * plane;
        float *out = dst + k * plane;
        if (plain) {
            for (size_t i = 0; i < plane; i++)
                out[i] = lut[in[i]];
            continue;
        }
        for (int y = 0; y < s.h; y++) {
            int sy = y + a.dy - AUG_PAD;
            const uint8_t *row = sy >= 0 && sy < s.h ? in + (size_t)sy * s.w : NULL;
            crop_row(row, s.w, a.dx - AUG_PAD, a.flip, lut, out + (size_t)y * s.w);
        }
    }
}
