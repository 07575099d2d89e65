/* NumPy .npy arrays and .npz archives of them (docs/data.md).
 *
 * x: uint8 images (n,h,w), (n,h,w,c) with c 1 or 3 (NumPy's usual layout,
 * transposed here) or (n,c,h,w); float32/float64 features (n,f) or
 * (n,c,h,w) kept as float32. y: integer labels (n) or (n,1), >= 0; the
 * classes are 0..max(y). Names: x_train/y_train and x_test/y_test (the Keras
 * convention), or x/y for a training split alone. */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_LIBZIP
#include <zip.h>
#endif

#include <cdl/cdl.h>

#include "lib/data/internal.h"

#define MAX_ARRAY_BYTES ((size_t)1 << 36)
#define MAX_CLASSES 100000
#define HINT "write it with numpy.save (docs/data.md)"

/* ---------------------------------------------------------------- header */

/* The value after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static int parse_descr(const char *v, const char *name, npy_array *a)
{
    if (!v || (*v != '\'' && *v != '"'))
        return cdl_error("%s: the .npy header has no 'descr' string: a structured array? "
                         "save a plain numeric array", name);
    char q = *v++;
    const char *end = strchr(v, q);
    if (!end || end - v < 3 || end - v > 4)
        return cdl_error("%s: unsupported dtype in the .npy header", name);
    char order = v[0], kind = v[1];
    int size = atoi(v + 2);
    if ((kind != 'u' && kind != 'i' && kind != 'f') ||
        (size != 1 && size != 2 && size != 4 && size != 8) || (kind == 'f' && size < 4))
        return cdl_error("%s: dtype '%.*s' is not supported: use uint8 or float32 for x and an "
                         "integer type for y%s", name, (int)(end - v), v,
                         kind == 'U' || kind == 'S' || kind == 'O'
                             ? " (text labels: save np.unique(y, return_inverse=True)[1] as y, "
                               "or use a CSV table, whose text labels are classes)"
                             : "");
    if (size > 1 && order != '<')
        return cdl_error("%s: dtype '%.*s' is big-endian: save it little-endian "
                         "(arr.astype(arr.dtype.newbyteorder('<')))", name, (int)(end - v), v);
    if (size == 1 && order != '|' && order != '<')
        return cdl_error("%s: unsupported dtype in the .npy header", name);
    a->kind = kind;
    a->itemsize = size;
    return 0;
}

static int parse_shape(const char *v, const char *name, npy_array *a)
{
    if (!v || *v != '(')
        return cdl_error("%s: the .npy header has no 'shape' tuple", name);
    v++;
    a->ndim = 0;
    size_t count = 1;
    for (;;) {
        while (*v == ' ' || *v == ',')
            v++;
        if (*v == ')')
            break;
        if (*v < '0' || *v > '9' || a->ndim == 8)
            return cdl_error("%s: the .npy shape is not a tuple of at most 8 sizes", name);
        char *end;
        long long d = strtoll(v, &end, 10);
        if (d < 0 || d > INT_MAX)
            return cdl_error("%s: the .npy shape declares a dimension of %lld", name, d);
        a->shape[a->ndim++] = (long)d;
        if (d && count > SIZE_MAX / (size_t)d)
            return cdl_error("%s: the .npy shape declares more elements than fit in memory",
                             name);
        count *= (size_t)d;
        v = end;
    }
    a->count = count;
    return 0;
}

int npy_parse(const uint8_t *buf, size_t len, const char *name, npy_array *a)
{
    memset(a, 0, sizeof *a);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return cdl_error("%s is not a .npy file (wrong magic bytes): %s", name, HINT);
    int major = buf[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return cdl_error("%s: truncated .npy header", name);
        hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        return cdl_error("%s: .npy format version %d is not supported (1, 2 or 3)", name, major);
    }
    if (hlen > 1 << 20 || start + hlen > len)
        return cdl_error("%s: the .npy header (%zu bytes) runs past the end of the file: it is "
                         "truncated", name, hlen);
    char *h = malloc(hlen + 1);
    if (!h)
        return cdl_error("out of memory reading %s", name);
    memcpy(h, buf + start, hlen);
    h[hlen] = 0;
    int rc = parse_descr(dict_value(h, "descr"), name, a);
    const char *fo = dict_value(h, "fortran_order");
    if (!rc && (!fo || strncmp(fo, "False", 5) != 0))
        rc = cdl_error("%s: the array is in Fortran order: save np.ascontiguousarray(x)", name);
    if (!rc)
        rc = parse_shape(dict_value(h, "shape"), name, a);
    free(h);
    if (rc)
        return -1;
    size_t data = len - start - hlen;
    if (a->count > data / (size_t)a->itemsize)
        return cdl_error("%s: the header declares %zu elements of %d bytes but %zu bytes "
                         "follow: the file is truncated", name, a->count, a->itemsize, data);
    a->data = buf + start + hlen;
    return 0;
}

/* ---------------------------------------------------------------- arrays */

/* The label as stored (-1 for any negative one; at most LLONG_MAX). */
static long long label_at(const npy_array *y, size_t i)
{
    const uint8_t *p = y->data + i * (size_t)y->itemsize;
    uint64_t u = 0;
    for (int b = 0; b < y->itemsize; b++)
        u |= (uint64_t)p[b] << (8 * b);
    if (y->kind == 'i' && y->itemsize < 8 && (u >> (8 * y->itemsize - 1)) & 1)
        u |= ~(uint64_t)0 << (8 * y->itemsize);   /* sign-extend */
    if (y->kind == 'i' && (int64_t)u < 0)
        return -1;
    return u > (uint64_t)LLONG_MAX ? LLONG_MAX : (long long)u;
}

static float float_at(const npy_array *x, size_t i)
{
    const uint8_t *p = x->data + i * (size_t)x->itemsize;
    if (x->itemsize == 4) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    double d;
    memcpy(&d, p, 8);
    return (float)d;
}

static double float_at_double(const npy_array *x, size_t i)
{
    if (x->itemsize == 4)
        return float_at(x, i);
    double d;
    memcpy(&d, x->data + i * (size_t)x->itemsize, 8);
    return d;
}

int npy_to_dataset(const npy_array *x, const npy_array *y, const char *xname, const char *yname,
                   cdl_dataset *out)
{
    if (y->kind == 'f' || !(y->ndim == 1 || (y->ndim == 2 && y->shape[1] == 1)))
        return cdl_error("%s: labels must be integers of shape (n,) or (n,1)", yname);
    long n = y->shape[0];
    if (x->ndim < 2 || x->ndim > 4)
        return cdl_error("%s: shape must be (n,f), (n,h,w), (n,h,w,c) or (n,c,h,w) with n = %ld, "
                         "the number of labels in %s", xname, n, yname);
    if (x->shape[0] != n)
        return cdl_error("%s holds %ld samples but %s %ld labels: save one label per sample",
                         xname, x->shape[0], yname, n);
    if (n <= 0)
        return cdl_error("%s holds no samples", xname);
    if (!(x->kind == 'u' && x->itemsize == 1) && x->kind != 'f')
        return cdl_error("%s: samples must be uint8 (pictures) or float32/float64 (features)",
                         xname);
    int u8 = x->kind == 'u';
    long c, h, w;
    int nhwc = 0;
    if (x->ndim == 2) {
        c = u8 ? 1 : x->shape[1];   /* features: one "channel" per column */
        h = 1;
        w = u8 ? x->shape[1] : 1;
    } else if (x->ndim == 3) {
        c = 1;
        h = x->shape[1];
        w = x->shape[2];
    } else {
        nhwc = (x->shape[3] == 1 || x->shape[3] == 3) && x->shape[1] != 1 && x->shape[1] != 3;
        c = nhwc ? x->shape[3] : x->shape[1];
        h = nhwc ? x->shape[1] : x->shape[2];
        w = nhwc ? x->shape[2] : x->shape[3];
    }
    if (c <= 0 || h <= 0 || w <= 0 || (size_t)c * h * w > (size_t)1 << 30)
        return cdl_error("%s: sample shape (%ld,%ld,%ld) must be non-empty and below 2^30 values",
                         xname, c, h, w);
    if (u8 && c > 3 && x->ndim == 4 && x->shape[3] == 4)   /* read as (n,c,h,w) */
        return cdl_error("%s: shape (%ld, %ld, %ld, 4) looks like RGBA pictures (n,h,w,4): "
                         "pictures have 1 or 3 channels: drop the alpha channel (x[..., :3])",
                         xname, x->shape[0], x->shape[1], x->shape[2]);
    if (u8 && c > 3)
        return cdl_error("%s: uint8 pictures with %ld channels: use 1 or 3, or save float32 "
                         "features", xname, c);
    if (n > INT_MAX)
        return cdl_error("%s: %ld samples, more than %d", xname, n, INT_MAX);
    size_t sample = (size_t)c * h * w;
    out->n = (int)n;
    out->shape = (cdl_shape){(int)c, (int)h, (int)w};
    out->labels = cdl_malloc((size_t)n * sizeof *out->labels);
    if (u8)
        out->images = cdl_malloc((size_t)n * sample);
    else
        out->features = cdl_malloc((size_t)n * sample * sizeof(float));
    if (!out->labels || (!out->images && !out->features))
        return -1;
    long maxl = -1;
    for (long i = 0; i < n; i++) {
        long long l = label_at(y, (size_t)i);
        if (l < 0 || l >= MAX_CLASSES)
            return cdl_error("%s: label %lld of sample %ld is out of range 0..%d", yname, l, i,
                             MAX_CLASSES - 1);
        out->labels[i] = (int32_t)l;
        if (l > maxl)
            maxl = l;
    }
    out->classes = (int)maxl + 1;
    const size_t plane = (size_t)h * w;
    for (long i = 0; i < n; i++) {
        size_t base = (size_t)i * sample;
        if (u8 && !nhwc) {
            memcpy(out->images + base, x->data + base, sample);
            continue;
        }
        for (size_t k = 0; k < (size_t)c; k++)
            for (size_t p = 0; p < plane; p++) {
                size_t src = nhwc ? base + p * c + k : base + k * plane + p;
                if (u8) {
                    out->images[base + k * plane + p] = x->data[src];
                    continue;
                }
                /* A NaN (a missing value) or an infinity would train as a
                 * diverged loss, blamed on the learning rate. */
                float v = float_at(x, src);
                if (!isfinite(v))
                    return cdl_error("%s: x[%ld].flat[%zu] is %s: features must be finite "
                                     "numbers (float32): fill in or drop the missing values "
                                     "(e.g. np.nan_to_num)", xname, i, src - base,
                                     isnan(v) ? "NaN"
                                     : isinf(float_at_double(x, src)) ? "infinite"
                                                                      : "beyond float32's range");
                out->features[base + k * plane + p] = v;
            }
    }
    return 0;
}

static void split_names(int train, int alone, const char **xn, const char **yn)
{
    *xn = alone ? "x" : train ? "x_train" : "x_test";
    *yn = alone ? "y" : train ? "y_train" : "y_test";
}

/* ---------------------------------------------------------------- npy dir */

int npy_read_dir(const char *dir, int train, cdl_dataset *out)
{
    char xp[4096], yp[4096], pn[512];
    const char *xn, *yn;
    split_names(train, 0, &xn, &yn);
    snprintf(xp, sizeof xp, "%s/%s.npy", dir, xn);
    if (access(xp, F_OK) != 0 && errno == ENOENT) {
        if (train) {
            split_names(1, 1, &xn, &yn);
        } else {
            /* No test split, unless its labels say one was meant. */
            snprintf(yp, sizeof yp, "%s/%s.npy", dir, yn);
            if (access(yp, F_OK) == 0)
                return cdl_error("%s is there but %s/%s.npy is not: add the test samples, or "
                                 "remove %s.npy to train without a test split", yp, dir, xn, yn);
            return 1;
        }
    }
    snprintf(xp, sizeof xp, "%s/%s.npy", dir, xn);
    snprintf(yp, sizeof yp, "%s/%s.npy", dir, yn);
    char hint[256];
    snprintf(hint, sizeof hint, "put %s.npy and %s.npy (x_train/y_train, or x/y) into the "
             "--data-dir folder", xn, yn);
    uint8_t *xb = NULL, *yb = NULL;
    size_t xl, yl;
    npy_array x, y;
    char xs[512];
    int rc = data_read_file(xp, MAX_ARRAY_BYTES, hint, &xb, &xl);
    if (!rc)
        rc = data_read_file(yp, MAX_ARRAY_BYTES, hint, &yb, &yl);
    if (!rc)
        rc = npy_parse(xb, xl, data_printable(xp, xs, sizeof xs), &x);
    if (!rc)
        rc = npy_parse(yb, yl, data_printable(yp, pn, sizeof pn), &y);
    if (!rc)
        rc = npy_to_dataset(&x, &y, xs, pn, out);
    cdl_free(xb);
    cdl_free(yb);
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------------- npz */
#ifdef HAVE_LIBZIP
/* Member name (without .npy) of the archive into memory; 1 if absent. */
static int zip_member(zip_t *z, const char *archive, const char *member, uint8_t **buf,
                      size_t *len)
{
    char name[64];
    snprintf(name, sizeof name, "%s.npy", member);
    zip_stat_t st;
    zip_int64_t idx = zip_name_locate(z, name, 0);
    if (idx < 0)
        return 1;
    if (zip_stat_index(z, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return cdl_error("%s: cannot read the size of %s: %s", archive, name, zip_strerror(z));
    if (st.size > MAX_ARRAY_BYTES)
        return cdl_error("%s: %s declares %llu bytes, more than allowed: a damaged archive?",
                         archive, name, (unsigned long long)st.size);
    zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)idx, 0);
    if (!f)
        return cdl_error("%s: cannot open %s: %s", archive, name, zip_strerror(z));
    *len = (size_t)st.size;
    *buf = cdl_malloc(*len ? *len : 1);
    if (!*buf) {
        zip_fclose(f);
        return -1;
    }
    zip_int64_t got = zip_fread(f, *buf, st.size);
    int bad = got < 0 || (zip_uint64_t)got != st.size;
    char err[256];
    snprintf(err, sizeof err, "%s", bad ? zip_strerror(z) : "");
    if (bad && zip_file_strerror(f))
        snprintf(err, sizeof err, "%s", zip_file_strerror(f));
    zip_fclose(f);
    if (bad) {
        cdl_free(*buf);
        *buf = NULL;
        return cdl_error("%s: cannot read %s: %s: the archive is damaged", archive, name, err);
    }
    return 0;
}
#endif

int npz_read_mem(const uint8_t *buf, size_t len, const char *name, int train, cdl_dataset *out)
{
#ifdef HAVE_LIBZIP
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, &ze);
    zip_t *z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (!z) {
        int rc = cdl_error("%s is not a readable .npz (zip) archive: %s: %s", name,
                           zip_error_strerror(&ze), HINT);
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    const char *xn, *yn;
    split_names(train, 0, &xn, &yn);
    uint8_t *xb = NULL, *yb = NULL;
    size_t xl = 0, yl = 0;
    int rc = zip_member(z, name, xn, &xb, &xl);
    if (rc == 1 && train) {
        split_names(1, 1, &xn, &yn);
        rc = zip_member(z, name, xn, &xb, &xl);
    }
    if (rc == 1 && !train) {
        /* No test split, unless its labels say one was meant. */
        char yname[64];
        snprintf(yname, sizeof yname, "%s.npy", yn);
        int labels = zip_name_locate(z, yname, 0) >= 0;
        zip_discard(z);
        return labels ? cdl_error("%s holds %s but no %s: save the test samples too, or drop %s "
                                  "to train without a test split", name, yn, xn, yn)
                      : 1;
    }
    if (rc == 1)
        rc = cdl_error("%s holds neither x_train nor x: name the arrays x_train, y_train (x_test, "
                       "y_test) as in np.savez(path, x_train=..., y_train=...)", name);
    if (!rc && (rc = zip_member(z, name, yn, &yb, &yl)) == 1)
        rc = cdl_error("%s has %s but no %s: save the labels too", name, xn, yn);
    char xs[300], ys[300];
    snprintf(xs, sizeof xs, "%s:%s", name, xn);
    snprintf(ys, sizeof ys, "%s:%s", name, yn);
    npy_array x, y;
    if (!rc)
        rc = npy_parse(xb, xl, xs, &x);
    if (!rc)
        rc = npy_parse(yb, yl, ys, &y);
    if (!rc)
        rc = npy_to_dataset(&x, &y, xs, ys, out);
    cdl_free(xb);
    cdl_free(yb);
    zip_discard(z);
    return rc ? -1 : 0;
#else
    (void)buf;
    (void)len;
    (void)train;
    (void)out;
    return cdl_error("%s: cdl was built without libzip, which .npz archives need: install "
                     "libzip-dev and configure --with-libzip, or save .npy files", name);
#endif
}

int npz_read(const char *path, int train, cdl_dataset *out)
{
    char pn[512];
    uint8_t *buf;
    size_t len;
    if (data_read_file(path, MAX_ARRAY_BYTES, "give the archive itself: --dataset npz:FILE.npz",
                       &buf, &len))
        return -1;
    int rc = npz_read_mem(buf, len, data_printable(path, pn, sizeof pn), train, out);
    cdl_free(buf);
    return rc;
}
