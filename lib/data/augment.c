/* uint8 sample -> normalised float, with the optional augmentation
 * (random crop of the image zero-padded by AUG_PAD on each side, then a
 * horizontal flip with p = 0.5).
 *
 * Normalisation goes through a 256-entry table per channel: one load per
 * pixel, and bit for bit torchvision's float32 (v/255 - mean)/std. The crop
 * is done while converting: rows and columns that fall into the padding get
 * the table's value for 0, the others read the source at the shifted (for a
 * flip, mirrored) column, so no padded copy is made. The table loop is bound
 * by the float stores; an arithmetic conversion was not faster.
 */
#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/data/internal.h"

/* Keeps augmentation streams apart from the shuffle streams rng_seed2(seed, epoch). */
#define AUG_DOMAIN 0x6175676d656e7421ull

aug_params augment_draw(uint64_t seed, int epoch, long pos, int mode)
{
    rng_state r;
    /* One stream per (epoch, position): positions stay below 2^40. */
    rng_seed2(&r, seed ^ AUG_DOMAIN, (uint64_t)(uint32_t)epoch << 40 ^ (uint64_t)pos);
    aug_params a;
    a.dy = (int)rng_below(&r, 2 * AUG_PAD + 1);
    a.dx = (int)rng_below(&r, 2 * AUG_PAD + 1);
    a.flip = (int)(rng_next(&r) >> 63);
    /* One stream for every mode: crop alone is crop+flip's crops. */
    if (mode == CDL_AUGMENT_FLIP)
        a.dy = a.dx = AUG_PAD;
    if (mode == CDL_AUGMENT_CROP)
        a.flip = 0;
    return a;
}

void convert_features(const float *src, cdl_shape s, const float *mean, const float *std,
                      float *dst)
{
    const size_t plane = (size_t)s.h * s.w;
    for (int k = 0; k < s.c; k++)
        for (size_t i = 0; i < plane; i++)
            dst[k * plane + i] = (src[k * plane + i] - mean[k]) / std[k];
}

void normalise_lut(float lut[256], float mean, float std)
{
    /* In float, step by step, exactly as torchvision's ToTensor (v / 255)
     * and Normalize ((x - mean) / std) compute it. */
    for (int v = 0; v < 256; v++) {
        float x = (float)v / 255.0f;
        lut[v] = (x - mean) / std;
    }
}

static void fill(float *o, int n, float v)
{
    for (int i = 0; i < n; i++)
        o[i] = v;
}

/* One plane (h, w) cropped: output rows [y0, y1) and columns [x0, x1) read
 * the source (output column x at source column x + shift, or last - x when
 * flipped), the rest is padding. flip is a constant at each call, so the
 * compiler makes one loop for each case. */
static inline void crop_plane(const uint8_t *in, int h, int w, int dy, int y0, int y1, int x0,
                              int x1, int shift, int flip, const float *lut, float *out)
{
    const float zero = lut[0];
    const int last = w - 1 + shift;
    fill(out, y0 * w, zero);
    for (int y = y0; y < y1; y++) {
        const uint8_t *row = in + (size_t)(y + dy - AUG_PAD) * w;
        float *o = out + (size_t)y * w;
        fill(o, x0, zero);
        if (flip)
            for (int x = x0; x < x1; x++)
                o[x] = lut[row[last - x]];
        else
            for (int x = x0; x < x1; x++)
                o[x] = lut[row[x + shift]];
        fill(o + x1, w - x1, zero);
    }
    fill(out + (size_t)y1 * w, (h - y1) * w, zero);
}

static int clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void convert_sample(const uint8_t *src, cdl_shape s, const float (*luts)[256], aug_params a,
                    float *dst)
{
    const size_t plane = (size_t)s.h * s.w;
    const int plain = a.dy == AUG_PAD && a.dx == AUG_PAD && !a.flip;
    /* The window inside the source, the same for every plane. */
    const int shift = a.dx - AUG_PAD;
    const int x0 = clamp(a.flip ? shift : -shift, 0, s.w);
    const int x1 = clamp(a.flip ? s.w + shift : s.w - shift, x0, s.w);
    const int y0 = clamp(AUG_PAD - a.dy, 0, s.h);
    const int y1 = clamp(s.h + AUG_PAD - a.dy, y0, s.h);
    for (int k = 0; k < s.c; k++) {
        const float *lut = luts[k < 3 ? k : 2];
        const uint8_t *in = src + k * plane;
        float *out = dst + k * plane;
        if (plain)
            for (size_t i = 0; i < plane; i++)
                out[i] = lut[in[i]];
        else if (a.flip)
            crop_plane(in, s.h, s.w, a.dy, y0, y1, x0, x1, shift, 1, lut, out);
        else
            crop_plane(in, s.h, s.w, a.dy, y0, y1, x0, x1, shift, 0, lut, out);
    }
}
