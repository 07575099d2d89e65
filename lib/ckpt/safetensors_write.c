/* cdl_st_write: a safetensors file of float32 (and int64) tensors, written
 * atomically.
 *
 * Layout: u64 LE header length N, N bytes of JSON padded with spaces to a
 * multiple of 8 (so the data starts 8-byte aligned, as the reference writer
 * does), then the tensors' little-endian bytes back to back in the order
 * given. "__metadata__" comes first in the header and ends with the
 * checksums of the data and the header (checksum.h). */
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/ckpt/atomic.h"
#include "lib/ckpt/checksum.h"
#include "lib/ckpt/json.h"

_Static_assert(sizeof(float) == 4, "safetensors F32 needs a 4-byte float");

/* Bytes per element of t: F32 or I64. */
static uint64_t elem_size(const cdl_st_tensor *t)
{
    return t->i64 ? 8 : 4;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice, or NULL; -1 in *err if out of memory. */
static const char *find_duplicate(const char **names, int n, int *err)
{
    *err = 0;
    if (n < 2)
        return NULL;
    const char **sorted = cdl_malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        *err = -1;
        return NULL;
    }
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (!strcmp(sorted[i - 1], sorted[i]))
            dup = sorted[i];
    cdl_free(sorted);
    return dup;
}

/* Elements of t, or -1 (error set) if the shape is invalid. */
static int64_t tensor_numel(const char *path, const cdl_st_tensor *t)
{
    if (t->ndim < 0 || t->ndim > 4)
        return cdl_error("%s: tensor '%s' has %d dimensions: cdl_st_write takes 0 to 4",
                         path, t->name, t->ndim);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return cdl_error("%s: tensor '%s' has negative size %lld in dimension %d", path,
                             t->name, (long long)t->shape[d], d);
        if (t->shape[d] && numel > INT64_MAX / 8 / t->shape[d])
            return cdl_error("%s: tensor '%s' is too large to store", path, t->name);
        numel *= t->shape[d];
    }
    if (numel > 0 && !t->data && !t->i64)
        return cdl_error("%s: tensor '%s' has %lld elements but no data", path, t->name,
                         (long long)numel);
    return numel;
}

static int check_text(const char *path, const char *what, const char *s)
{
    if (!s)
        return cdl_error("%s: %s is NULL", path, what);
    if (!utf8_valid(s, strlen(s)))
        return cdl_error("%s: %s '%s' is not valid UTF-8: safetensors headers are UTF-8 JSON",
                         path, what, s);
    return 0;
}

/* Checks the arguments; fills numel[i]. */
static int check_args(const char *path, const cdl_st_tensor *tensors, int ntensors,
                      const cdl_st_meta *meta, int nmeta, int64_t *numel)
{
    for (int i = 0; i < ntensors; i++) {
        const cdl_st_tensor *t = &tensors[i];
        if (check_text(path, "tensor name", t->name))
            return -1;
        if (!*t->name || !strcmp(t->name, "__metadata__"))
            return cdl_error("%s: tensor %d has the name '%s', which safetensors reserves or "
                             "cannot look up: rename it", path, i, t->name);
        if ((numel[i] = tensor_numel(path, t)) < 0)
            return -1;
    }
    for (int i = 0; i < nmeta; i++) {
        if (check_text(path, "metadata key", meta[i].key) ||
            check_text(path, "metadata value", meta[i].value))
            return -1;
        if (!strcmp(meta[i].key, ST_CHECKSUM_KEY))
            return cdl_error("%s: metadata key '%s' is reserved: cdl_st_write adds it itself",
                             path, ST_CHECKSUM_KEY);
    }

    int n = ntensors > nmeta ? ntensors : nmeta, err;
    const char **names = cdl_malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names)
        return -1;
    for (int i = 0; i < ntensors; i++)
        names[i] = tensors[i].name;
    const char *dup = find_duplicate(names, ntensors, &err);
    if (dup) {
        cdl_error("%s: two tensors are named '%s': names must be unique", path, dup);
        err = -1;
    }
    if (!err) {
        for (int i = 0; i < nmeta; i++)
            names[i] = meta[i].key;
        dup = find_duplicate(names, nmeta, &err);
        if (dup) {
            cdl_error("%s: metadata key '%s' is given twice", path, dup);
            err = -1;
        }
    }
    cdl_free(names);
    return err;
}

/* The header: JSON padded with spaces to a multiple of 8; the metadata ends
 * with the checksum entry (checksum.h). */
static int build_header(json_buf *h, const char *path, const cdl_st_tensor *tensors,
                        int ntensors, const cdl_st_meta *meta, int nmeta, const int64_t *numel,
                        const char *checksum)
{
    json_buf_puts(h, "{\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
        json_buf_string(h, meta[i].key);
        json_buf_puts(h, ":");
        json_buf_string(h, meta[i].value);
        json_buf_puts(h, ",");
    }
    json_buf_string(h, ST_CHECKSUM_KEY);
    json_buf_puts(h, ":");
    json_buf_string(h, checksum);
    json_buf_puts(h, ntensors ? "}," : "}");
    uint64_t offset = 0;
    for (int i = 0; i < ntensors; i++) {
        const cdl_st_tensor *t = &tensors[i];
        if (i)
            json_buf_puts(h, ",");
        json_buf_string(h, t->name);
        json_buf_puts(h, t->i64 ? ":{\"dtype\":\"I64\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d)
                json_buf_puts(h, ",");
            json_buf_uint(h, (uint64_t)t->shape[d]);
        }
        json_buf_puts(h, "],\"data_offsets\":[");
        json_buf_uint(h, offset);
        json_buf_puts(h, ",");
        offset += (uint64_t)numel[i] * elem_size(t);
        json_buf_uint(h, offset);
        json_buf_puts(h, "]}");
        if (h->len > CDL_ST_MAX_HEADER)
            break;   /* no point building further */
    }
    json_buf_puts(h, "}");
    while (h->len % 8)
        json_buf_puts(h, " ");
    if (h->failed)
        return -1;
    if (h->len > CDL_ST_MAX_HEADER)
        return cdl_error("%s: the header would exceed the safetensors limit of %u bytes: store "
                         "large state as tensors, not metadata", path, CDL_ST_MAX_HEADER);
    return 0;
}

static void put_le32(unsigned char *o, uint32_t v)
{
    o[0] = (unsigned char)v;
    o[1] = (unsigned char)(v >> 8);
    o[2] = (unsigned char)(v >> 16);
    o[3] = (unsigned char)(v >> 24);
}

/* Tensor data as little-endian bytes, through a staging buffer (a plain copy
 * on little-endian hosts, a byte swap elsewhere), either written to a (when
 * a is not NULL) or added to the CRC *crc. */
static int put_floats(afile *a, uint32_t *crc, const float *x, size_t n, unsigned char *stage,
                      size_t stage_floats)
{
    while (n) {
        size_t k = n < stage_floats ? n : stage_floats;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            put_le32(stage + 4 * i, u);
        }
        if (a && afile_write(a, stage, 4 * k))
            return -1;
        if (!a)
            *crc = st_crc_bytes(*crc, stage, 4 * k);
        x += k;
        n -= k;
    }
    return 0;
}

/* The same for int64 values (8 little-endian bytes each). */
static int put_i64(afile *a, uint32_t *crc, const int64_t *x, size_t n, unsigned char *stage,
                   size_t stage_floats)
{
    size_t cap = stage_floats / 2;
    while (n) {
        size_t k = n < cap ? n : cap;
        for (size_t i = 0; i < k; i++) {
            uint64_t u = (uint64_t)x[i];
            put_le32(stage + 8 * i, (uint32_t)u);
            put_le32(stage + 8 * i + 4, (uint32_t)(u >> 32));
        }
        if (a && afile_write(a, stage, 8 * k))
            return -1;
        if (!a)
            *crc = st_crc_bytes(*crc, stage, 8 * k);
        x += k;
        n -= k;
    }
    return 0;
}

/* One tensor's data: written to a, or added to *crc. */
static int put_tensor(afile *a, uint32_t *crc, const cdl_st_tensor *t, size_t n,
                      unsigned char *stage, size_t stage_floats)
{
    if (t->i64)
        return put_i64(a, crc, t->i64, n, stage, stage_floats);
    return put_floats(a, crc, t->data, n, stage, stage_floats);
}

/* The checksum entry's value: a pass over the data, then the header's
 * meaning as the reader will see it. */
static void checksum(const cdl_st_tensor *tensors, int ntensors, const cdl_st_meta *meta,
                     int nmeta, const int64_t *numel, unsigned char *stage, size_t stage_floats,
                     char *out)
{
    uint32_t data = 0, header = 0;
    uint64_t offset = 0;
    for (int i = 0; i < nmeta; i++)
        header = st_crc_meta(header, meta[i].key, meta[i].value);
    for (int i = 0; i < ntensors; i++) {
        put_tensor(NULL, &data, &tensors[i], (size_t)numel[i], stage, stage_floats);
        uint64_t end = offset + (uint64_t)numel[i] * elem_size(&tensors[i]);
        header = st_crc_tensor(header, tensors[i].name, tensors[i].i64 ? "I64" : "F32",
                               tensors[i].ndim, tensors[i].shape, offset, end);
        offset = end;
    }
    st_checksum_format(out, data, header);
}

int cdl_st_write(const char *path, const cdl_st_tensor *tensors, int ntensors,
                 const cdl_st_meta *meta, int nmeta)
{
    if (!path || !*path)
        return cdl_error("cdl_st_write: the checkpoint path is empty: name a file");
    if (ntensors < 0 || nmeta < 0 || (ntensors && !tensors) || (nmeta && !meta))
        return cdl_error("%s: cdl_st_write got %d tensors and %d metadata entries with %s", path,
                         ntensors, nmeta, ntensors < 0 || nmeta < 0 ? "a negative count" : "a NULL array");
    int64_t *numel = cdl_malloc((size_t)(ntensors ? ntensors : 1) * sizeof *numel);
    if (!numel)
        return -1;
    json_buf h = {0};
    enum { STAGE_FLOATS = 16384 };   /* 64 KiB */
    unsigned char *stage = NULL;
    afile a;
    int rc = -1;
    char sum[ST_CHECKSUM_LEN];
    if (check_args(path, tensors, ntensors, meta, nmeta, numel) ||
        !(stage = cdl_malloc(4 * STAGE_FLOATS)))
        goto out;
    checksum(tensors, ntensors, meta, nmeta, numel, stage, STAGE_FLOATS, sum);
    if (build_header(&h, path, tensors, ntensors, meta, nmeta, numel, sum))
        goto out;

    unsigned char len8[8];
    put_le32(len8, (uint32_t)h.len);
    put_le32(len8 + 4, (uint32_t)((uint64_t)h.len >> 32));
    if (afile_open(&a, path))
        goto out;
    if (afile_write(&a, len8, 8) || afile_write(&a, h.data, h.len)) {
        afile_abort(&a);
        goto out;
    }
    for (int i = 0; i < ntensors; i++) {
        if (put_tensor(&a, NULL, &tensors[i], (size_t)numel[i], stage, STAGE_FLOATS)) {
            afile_abort(&a);
            goto out;
        }
    }
    rc = afile_commit(&a);
out:
    cdl_free(stage);
    json_buf_free(&h);
    cdl_free(numel);
    return rc;
}
