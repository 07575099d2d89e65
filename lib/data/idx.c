/* MNIST / Fashion-MNIST idx files, gzip'd or raw (zlib reads both).
 *
 * An idx file is a big-endian header (magic 0x00000803 = 2051 for a 3-d
 * uint8 array, 0x00000801 = 2049 for a 1-d one, then one 32-bit size per
 * dimension) followed by the array. Everything is checked: magic, image
 * size, matching counts, label range, and the exact length (a truncated
 * file and a file with trailing data are both errors).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

#define IDX_IMAGES_MAGIC 2051
#define IDX_LABELS_MAGIC 2049
#define IDX_SIDE 28

typedef struct idx_file {
    gzFile f;
    char path[4096];
} idx_file;

/* What to do about a stat() that failed with err, not ENOENT: a file
 * system that fails to answer (EIO, ESTALE) is not a missing dataset. */
static const char *stat_advice(int err, const char *hint, char *buf, size_t len)
{
    if (err == EACCES || err == EPERM || err == ELOOP || err == ENAMETOOLONG)
        return data_open_advice(err, hint, buf, len);
    return "retry when the file system answers";
}

/* Opens dir/base.gz if it exists, else dir/base. Only a .gz that is not
 * there falls back to the raw name: one whose stat() fails otherwise (EIO,
 * ESTALE from a shared file system, EACCES) is that error, naming the .gz.
 * Falling back replaced it with the raw name's "No such file or directory"
 * (the user looked for a missing file that was there), or read a stale raw
 * file beside it in silence. */
static int idx_open(idx_file *x, const char *dir, const char *base, const char *hint)
{
    struct stat st;
    char advice[512];
    snprintf(x->path, sizeof x->path, "%s/%s.gz", dir, base);
    if (stat(x->path, &st) != 0) {
        int err = errno;
        if (err != ENOENT && err != ENOTDIR)
            return cdl_error("cannot stat %s: %s (the file without .gz is not read in its "
                             "place): %s", x->path, strerror(err), stat_advice(err, hint, advice,
                                                                               sizeof advice));
        snprintf(x->path, sizeof x->path, "%s/%s", dir, base);
        if (stat(x->path, &st) != 0) {
            err = errno;
            if (err == ENOENT || err == ENOTDIR)
                return cdl_error("cannot find %s/%s.gz or %s: %s: %s", dir, base, x->path,
                                 strerror(err), hint);
            return cdl_error("cannot stat %s (and there is no %s.gz): %s: %s", x->path, base,
                             strerror(err), stat_advice(err, hint, advice, sizeof advice));
        }
    }
    int fd = data_open_regular(x->path, hint);
    if (fd < 0)
        return -1;
    errno = 0;
    x->f = gzdopen(fd, "rb");
    if (!x->f) {
        close(fd);
        return cdl_error("cannot open %s: %s: %s", x->path,
                         errno ? strerror(errno) : "out of memory", hint);
    }
    gzbuffer(x->f, 1 << 17);
    return 0;
}

/* Reads up to len bytes; returns the count read, or -1 (with the error set)
 * on a read or decompression error. A gzip stream cut short reads as a
 * short count here, and its "unexpected end of file" is reported by the
 * caller as truncation. */
static long long idx_read_bytes(idx_file *x, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
        int r = gzread(x->f, (char *)buf + got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(x->f, &zerr);
            if (zerr == Z_BUF_ERROR)   /* truncated gzip stream */
                break;
            return cdl_error("cannot read %s: %s: the file is damaged; re-download it",
                             x->path, zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long long)got;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads the len bytes (what) that must end the file into a new cdl_malloc'd
 * buffer: a short read is truncation, one more byte is trailing data. The
 * buffer grows with the bytes actually read (doubling from 1 MiB), so a
 * header that claims 2 GB in a 16-byte file costs no 2 GB allocation. */
#define IDX_CHUNK ((size_t)1 << 20)
static void *idx_read_all(idx_file *x, size_t len, size_t offset, const char *what)
{
    size_t cap = len < IDX_CHUNK ? len : IDX_CHUNK, got = 0;
    unsigned char *buf = cdl_malloc(cap ? cap : 1);
    while (buf) {
        long long r = idx_read_bytes(x, buf + got, cap - got);
        if (r < 0)
            goto fail;
        got += (size_t)r;
        if (got < cap || cap == len)
            break;
        size_t ncap = cap > len / 2 ? len : 2 * cap;
        unsigned char *bigger = cdl_malloc(ncap);
        if (!bigger)
            goto fail;
        memcpy(bigger, buf, got);
        cdl_free(buf);
        buf = bigger;
        cap = ncap;
    }
    if (!buf)
        return NULL;
    if (got < len) {
        cdl_error("%s is truncated: expected %zu bytes (%s) after the %zu-byte header, "
                  "found %zu: re-download it", x->path, len, what, offset, got);
        goto fail;
    }
    unsigned char extra;
    long long more = idx_read_bytes(x, &extra, 1);
    if (more < 0)
        goto fail;
    if (more > 0) {
        cdl_error("%s has trailing data after its %zu + %zu bytes (%s): "
                  "it is not a plain idx file of this dataset; re-download it",
                  x->path, offset, len, what);
        goto fail;
    }
    return buf;
fail:
    cdl_free(buf);
    return NULL;
}

/* Reads the header (magic, then ndim sizes) into dims. */
static int idx_header(idx_file *x, uint32_t magic, int ndim, uint32_t *dims)
{
    unsigned char h[16];
    size_t len = 4 + 4 * (size_t)ndim;
    long long got = idx_read_bytes(x, h, len);
    if (got < 0)
        return -1;
    if ((size_t)got < len)
        return cdl_error("%s is truncated: %lld bytes, shorter than the %zu-byte idx header: "
                         "re-download it", x->path, got, len);
    uint32_t m = be32(h);
    if (m != magic) {
        const char *guess = m == IDX_IMAGES_MAGIC   ? " (that of an image file)"
                            : m == IDX_LABELS_MAGIC ? " (that of a label file)"
                            : (m >> 8) == 0x1f8b08u   ? " (a gzip header: compressed twice?)"
                                                    : "";
        return cdl_error("%s: wrong magic number %u%s, expected %u for an idx %s file: "
                         "is it the right file? Re-download it",
                         x->path, m, guess, magic, magic == IDX_IMAGES_MAGIC ? "image" : "label");
    }
    for (int i = 0; i < ndim; i++)
        dims[i] = be32(h + 4 + 4 * i);
    return 0;
}

static void idx_close(idx_file *x)
{
    if (x->f)
        gzclose(x->f);
    x->f = NULL;
}

static int read_images(const char *dir, const char *prefix, const char *hint, cdl_dataset *out,
                       idx_file *x)
{
    char base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
    if (idx_open(x, dir, base, hint))
        return -1;
    uint32_t dims[3];
    if (idx_header(x, IDX_IMAGES_MAGIC, 3, dims))
        return -1;
    if (dims[1] != IDX_SIDE || dims[2] != IDX_SIDE)
        return cdl_error("%s: images are %ux%u, expected %dx%d: not an MNIST-style file",
                         x->path, dims[1], dims[2], IDX_SIDE, IDX_SIDE);
    if (dims[0] == 0 || dims[0] > INT_MAX / (IDX_SIDE * IDX_SIDE))
        return cdl_error("%s: image count %u is out of range 1..%d: the header is damaged; "
                         "re-download it", x->path, dims[0], INT_MAX / (IDX_SIDE * IDX_SIDE));
    out->n = (int)dims[0];
    out->shape = (cdl_shape){ 1, IDX_SIDE, IDX_SIDE };
    size_t bytes = (size_t)out->n * IDX_SIDE * IDX_SIDE;
    char what[64];
    snprintf(what, sizeof what, "%d images of %dx%d", out->n, IDX_SIDE, IDX_SIDE);
    out->images = idx_read_all(x, bytes, 16, what);
    return out->images ? 0 : -1;
}

static int read_labels(const char *dir, const char *prefix, int classes, const char *hint,
                       const char *images_path, cdl_dataset *out, idx_file *x)
{
    char base[64];
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
    if (idx_open(x, dir, base, hint))
        return -1;
    uint32_t n;
    if (idx_header(x, IDX_LABELS_MAGIC, 1, &n))
        return -1;
    if (n != (uint32_t)out->n)
        return cdl_error("%s has %u labels but %s has %d images: the two files are from "
                         "different sets; re-download them", x->path, n, images_path, out->n);
    char what[64];
    snprintf(what, sizeof what, "%d labels", out->n);
    uint8_t *raw = idx_read_all(x, (size_t)out->n, 8, what);
    if (!raw)
        return -1;
    out->labels = cdl_malloc((size_t)out->n * sizeof *out->labels);
    int rc = out->labels ? 0 : -1;
    for (int i = 0; rc == 0 && i < out->n; i++) {
        if (raw[i] >= classes)
            rc = cdl_error("%s: label %u of sample %d is out of range 0..%d: the file is "
                           "damaged or of another dataset; re-download it",
                           x->path, raw[i], i, classes - 1);
        out->labels[i] = raw[i];
    }
    cdl_free(raw);
    return rc;
}

int idx_read(const char *dir, int train, int classes, const char *hint, cdl_dataset *out)
{
    const char *prefix = train ? "train" : "t10k";
    idx_file images = { 0 }, labels = { 0 };
    int rc = read_images(dir, prefix, hint, out, &images);
    idx_close(&images);
    if (rc == 0)
        rc = read_labels(dir, prefix, classes, hint, images.path, out, &labels);
    idx_close(&labels);
    return rc;
}
