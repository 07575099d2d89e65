/* Fixed-order sums (see reduce.h). Plain loops over restrict pointers: the
 * compiler vectorises across i, which keeps each element's order. */
#include <string.h>

#include "reduce.h"

#define LINE 64

void reduce_part(size_t m, int size, int i, size_t esize, size_t *lo, size_t *hi)
{
    size_t align = LINE / esize;
    *lo = (m * (size_t)i / (size_t)size) / align * align;
    *hi = i + 1 == size ? m : (m * (size_t)(i + 1) / (size_t)size) / align * align;
}

void shard_part(size_t n, int size, int i, size_t *lo, size_t *hi)
{
    size_t per = (n + (size_t)size - 1) / (size_t)size;
    per = (per + SHARD_ALIGN - 1) / SHARD_ALIGN * SHARD_ALIGN;
    size_t a = per * (size_t)i, b = a + per;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

/* In L1-sized blocks so out stays in cache across the w passes. */
#define DEFINE_STRIDED(NAME, T)                                                             \
    static void NAME(T *restrict out, const char *base, size_t stride, int w, size_t lo,   \
                     size_t hi, int average)                                                \
    {                                                                                       \
        const size_t block = 2048;                                                          \
        const T scale = (T)w;                                                               \
        const T *restrict x0 = (const T *)base;                                             \
        for (size_t b = lo; b < hi; b += block) {                                           \
            size_t e = b + block < hi ? b + block : hi;                                     \
            if (w == 1) {                                                                   \
                for (size_t i = b; i < e; i++)                                              \
                    out[i] = x0[i];                                                         \
                continue;                                                                   \
            }                                                                               \
            const T *restrict x1 = (const T *)(base + stride);                              \
            for (size_t i = b; i < e; i++)                                                  \
                out[i] = x0[i] + x1[i];                                                     \
            for (int j = 2; j < w; j++) {                                                   \
                const T *restrict xj = (const T *)(base + (size_t)j * stride);              \
                for (size_t i = b; i < e; i++)                                              \
                    out[i] += xj[i];                                                        \
            }                                                                               \
            if (average)                                                                    \
                for (size_t i = b; i < e; i++)                                              \
                    out[i] /= scale;                                                        \
        }                                                                                   \
    }
DEFINE_STRIDED(strided_f32, float)
DEFINE_STRIDED(strided_f64, double)

void reduce_strided(coll_dtype t, void *out, const void *base, size_t stride, int w, size_t lo,
                    size_t hi, int average)
{
    if (t == COLL_F32)
        strided_f32(out, base, stride, w, lo, hi, average);
    else
        strided_f64(out, base, stride, w, lo, hi, average);
}

/* Sums a block into a stack buffer first, so `also` may alias an input. */
#define DEFINE_INTO2(NAME, T)                                                               \
    static void NAME(T *restrict out, T *also, const void *const *x, int w, size_t n,      \
                     int average)                                                           \
    {                                                                                       \
        enum { BLOCK = 1024 };                                                              \
        T acc[BLOCK];                                                                       \
        const T scale = (T)w;                                                               \
        for (size_t b = 0; b < n; b += BLOCK) {                                             \
            size_t e = n - b < BLOCK ? n - b : BLOCK;                                       \
            const T *x0 = (const T *)x[0] + b;                                              \
            if (w == 1) {                                                                   \
                for (size_t i = 0; i < e; i++)                                              \
                    acc[i] = x0[i];                                                         \
            } else {                                                                        \
                const T *x1 = (const T *)x[1] + b;                                          \
                for (size_t i = 0; i < e; i++)                                              \
                    acc[i] = x0[i] + x1[i];                                                 \
            }                                                                               \
            for (int j = 2; j < w; j++) {                                                   \
                const T *xj = (const T *)x[j] + b;                                          \
                for (size_t i = 0; i < e; i++)                                              \
                    acc[i] += xj[i];                                                        \
            }                                                                               \
            if (average)                                                                    \
                for (size_t i = 0; i < e; i++)                                              \
                    acc[i] /= scale;                                                        \
            memcpy(out + b, acc, e * sizeof(T));                                            \
            memcpy(also + b, acc, e * sizeof(T));                                           \
        }                                                                                   \
    }
DEFINE_INTO2(into2_f32, float)
DEFINE_INTO2(into2_f64, double)

void reduce_into2(coll_dtype t, void *out, void *also, const void *const *x, int w, size_t n,
                  int average)
{
    if (t == COLL_F32)
        into2_f32(out, also, x, w, n, average);
    else
        into2_f64(out, also, x, w, n, average);
}

void reduce_add(coll_dtype t, void *acc, const void *x, size_t n)
{
    if (t == COLL_F32) {
        float *restrict a = acc;
        const float *restrict b = x;
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    } else {
        double *restrict a = acc;
        const double *restrict b = x;
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    }
}

void reduce_divide(coll_dtype t, void *acc, size_t n, int w)
{
    if (t == COLL_F32) {
        float *a = acc, s = (float)w;
        for (size_t i = 0; i < n; i++)
            a[i] /= s;
    } else {
        double *a = acc, s = (double)w;
        for (size_t i = 0; i < n; i++)
            a[i] /= s;
    }
}
