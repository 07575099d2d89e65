/* cdl_st_open: reads a whole safetensors file and validates it strictly.
 *
 * The header grammar (json.c does the lexing):
 *   header   = { member ("," member)* }        (whitespace padding allowed)
 *   member   = "__metadata__" : { string : string, ... }
 *            | name : { "dtype": DTYPE, "shape": [uint, ...], "data_offsets": [uint, uint] }
 * Each tensor's byte count (numel * element bits / 8) must equal its
 * data_offsets span; sorted by offset, the spans must tile the data section
 * from 0 to its end with no gap, overlap or trailing byte. Tensors are
 * listed in offset order (for our writer: the order they were written).
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/ckpt/checksum.h"
#include "lib/ckpt/json.h"

#define ST_MAX_DIMS 8

/* The reference implementation's dtypes and their element sizes in bits. */
static const struct {
    const char *name;
    unsigned bits;
} dtypes[] = {
    {"F32", 32}, {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16}, {"U16", 16},
    {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F64", 64}, {"I64", 64},
    {"U64", 64}, {"C64", 64}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6},
};
/* Indices into dtypes of the two cdl converts. */
enum { DTYPE_F32 = 0, DTYPE_I64 = 16, NDTYPES = sizeof dtypes / sizeof dtypes[0] };

typedef struct st_entry {
    const char *name;     /* in the file's string pool */
    int dtype;            /* index into dtypes */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;  /* data_offsets, relative to the data section */
    int order;            /* position in the header (ties in the offset sort) */
    float *f32;           /* F32 data converted to native order, else NULL */
    int64_t *i64;         /* I64 data likewise */
    int own;              /* f32 or i64 was allocated (its offset was not aligned) */
} st_entry;

typedef struct st_kv {
    const char *key, *value;
} st_kv;

struct cdl_st_file {
    char *path;
    char *header;              /* raw header text (N bytes) */
    char *pool;                /* decoded strings */
    unsigned char *data;       /* the data section */
    uint64_t data_bytes;
    st_entry *t;
    int nt, tcap;
    int *by_name;              /* indices into t, sorted by name */
    st_kv *meta;               /* header order */
    int nm, mcap;
    int *meta_by_key;          /* indices into meta, sorted by key */
    uint32_t header_crc;       /* the header's meaning (checksum.h) */
    int checksummed;           /* the file carried checksums and they matched */
};

/* Grows an array of elements of size `size` to hold one more. */
static int grow(void **arr, int *cap, int n, size_t size)
{
    if (n < *cap)
        return 0;
    int ncap = *cap ? 2 * *cap : 16;
    void *p = cdl_malloc((size_t)ncap * size);
    if (!p)
        return -1;
    if (n)
        memcpy(p, *arr, (size_t)n * size);
    cdl_free(*arr);
    *arr = p;
    *cap = ncap;
    return 0;
}

/* ------------------------------------------------------------ header */

typedef struct parser {
    json_cur c;
    cdl_st_file *f;
    const char *tensor;   /* the tensor being parsed, for messages */
    int nomem;
} parser;

static int parse_dims(parser *p, st_entry *e)
{
    if (json_peek(&p->c) != '[')
        return json_fail(&p->c, "\"shape\" must be an array of non-negative integers, not %s",
                         json_peek_kind(&p->c));
    json_expect(&p->c, '[');
    int first = 1, r;
    e->ndim = 0;
    while ((r = json_next(&p->c, ']', &first)) == 1) {
        uint64_t v;
        if (json_uint(&p->c, &v))
            return -1;
        if (e->ndim == ST_MAX_DIMS)
            return json_fail(&p->c, "\"shape\" has more than %d dimensions", ST_MAX_DIMS);
        if (v > INT64_MAX)
            return json_fail(&p->c, "dimension %d of \"shape\" is too large", e->ndim);
        e->shape[e->ndim++] = (int64_t)v;
    }
    return r;
}

static int parse_offsets(parser *p, st_entry *e)
{
    if (json_peek(&p->c) != '[')
        return json_fail(&p->c, "\"data_offsets\" must be an array [begin, end], not %s",
                         json_peek_kind(&p->c));
    json_expect(&p->c, '[');
    uint64_t v[2];
    int first = 1, r, n = 0;
    while ((r = json_next(&p->c, ']', &first)) == 1) {
        if (n == 2)
            return json_fail(&p->c, "\"data_offsets\" has more than 2 elements");
        if (json_uint(&p->c, &v[n++]))
            return -1;
    }
    if (r < 0)
        return -1;
    if (n != 2)
        return json_fail(&p->c, "\"data_offsets\" has %d elements, not 2", n);
    e->begin = v[0];
    e->end = v[1];
    return 0;
}

static int parse_dtype(parser *p, st_entry *e)
{
    const char *s;
    if (json_peek(&p->c) != '"')
        return json_fail(&p->c, "\"dtype\" must be a string, not %s", json_peek_kind(&p->c));
    if (json_string(&p->c, &s))
        return -1;
    for (int i = 0; i < NDTYPES; i++) {
        if (!strcmp(s, dtypes[i].name)) {
            e->dtype = i;
            return 0;
        }
    }
    return json_fail(&p->c, "unknown dtype \"%s\"", s);
}

/* { "dtype": ..., "shape": [...], "data_offsets": [b, e] } in any order. */
static int parse_tensor(parser *p, const char *name)
{
    cdl_st_file *f = p->f;
    p->tensor = name;
    if (grow((void **)&f->t, &f->tcap, f->nt, sizeof *f->t)) {
        p->nomem = 1;
        return -1;
    }
    st_entry *e = &f->t[f->nt];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->order = f->nt;
    if (json_peek(&p->c) != '{')
        return json_fail(&p->c, "expected an object with dtype, shape and data_offsets but "
                         "found %s", json_peek_kind(&p->c));
    json_expect(&p->c, '{');
    enum { HAVE_DTYPE = 1, HAVE_SHAPE = 2, HAVE_OFFSETS = 4 };
    int have = 0, first = 1, r;
    while ((r = json_next(&p->c, '}', &first)) == 1) {
        const char *key;
        if (json_string(&p->c, &key) || json_expect(&p->c, ':'))
            return -1;
        int bit = !strcmp(key, "dtype") ? HAVE_DTYPE
                : !strcmp(key, "shape") ? HAVE_SHAPE
                : !strcmp(key, "data_offsets") ? HAVE_OFFSETS : 0;
        if (!bit)
            return json_fail(&p->c, "unknown field \"%s\" (expected dtype, shape, data_offsets)", key);
        if (have & bit)
            return json_fail(&p->c, "field \"%s\" appears twice", key);
        have |= bit;
        if ((bit == HAVE_DTYPE && parse_dtype(p, e)) ||
            (bit == HAVE_SHAPE && parse_dims(p, e)) ||
            (bit == HAVE_OFFSETS && parse_offsets(p, e)))
            return -1;
    }
    if (r < 0)
        return -1;
    if (have != (HAVE_DTYPE | HAVE_SHAPE | HAVE_OFFSETS))
        return json_fail(&p->c, "missing field \"%s\"", !(have & HAVE_DTYPE) ? "dtype"
                         : !(have & HAVE_SHAPE) ? "shape" : "data_offsets");
    f->nt++;
    p->tensor = NULL;
    return 0;
}

static int parse_metadata(parser *p)
{
    cdl_st_file *f = p->f;
    if (json_peek(&p->c) != '{')
        return json_fail(&p->c, "\"__metadata__\" must be an object of strings, not %s",
                         json_peek_kind(&p->c));
    json_expect(&p->c, '{');
    int first = 1, r;
    while ((r = json_next(&p->c, '}', &first)) == 1) {
        const char *key, *value;
        if (json_string(&p->c, &key) || json_expect(&p->c, ':'))
            return -1;
        if (json_peek(&p->c) != '"')
            return json_fail(&p->c, "__metadata__ value of '%s' is %s: metadata values must "
                             "be strings", key, json_peek_kind(&p->c));
        if (json_string(&p->c, &value))
            return -1;
        if (grow((void **)&f->meta, &f->mcap, f->nm, sizeof *f->meta)) {
            p->nomem = 1;
            return -1;
        }
        f->meta[f->nm].key = key;
        f->meta[f->nm].value = value;
        f->nm++;
    }
    return r;
}

static int parse_header(parser *p)
{
    json_cur *c = &p->c;
    if (json_peek(c) != '{')
        return json_fail(c, "the header must be a JSON object, not %s", json_peek_kind(c));
    json_expect(c, '{');
    int first = 1, r, seen_meta = 0;
    while ((r = json_next(c, '}', &first)) == 1) {
        const char *name;
        if (json_string(c, &name) || json_expect(c, ':'))
            return -1;
        if (!strcmp(name, "__metadata__")) {
            if (seen_meta++)
                return json_fail(c, "\"__metadata__\" appears twice");
            if (parse_metadata(p))
                return -1;
        } else if (parse_tensor(p, name)) {
            return -1;
        }
    }
    return r < 0 ? -1 : json_finish(c);
}

/* ------------------------------------------------------------ checks */

static int cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* For qsort of index arrays by string: the array being sorted is a file's
 * tensors or metadata, passed through this pointer (qsort has no context). */
static _Thread_local const cdl_st_file *sort_file;

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(sort_file->t[*(const int *)a].name, sort_file->t[*(const int *)b].name);
}

static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp(sort_file->meta[*(const int *)a].key, sort_file->meta[*(const int *)b].key);
}

/* Sorted index over n items; fails on a duplicate (reported by the caller). */
static int *sorted_index(const cdl_st_file *f, int n, int (*cmp)(const void *, const void *),
                         int *dup)
{
    int *idx = cdl_malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx)
        return NULL;
    for (int i = 0; i < n; i++)
        idx[i] = i;
    sort_file = f;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    *dup = -1;
    for (int i = 1; i < n && *dup < 0; i++)
        if (!cmp(&idx[i - 1], &idx[i]))
            *dup = idx[i];
    return idx;
}

static void format_shape(const st_entry *e, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < e->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? "," : "", (long long)e->shape[d]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Byte count of e from its shape and dtype, checked against its offsets. */
static int check_size(const cdl_st_file *f, const st_entry *e)
{
    uint64_t numel = 1, bits;
    int overflow = 0;
    for (int d = 0; d < e->ndim; d++)
        overflow |= __builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel);
    overflow |= __builtin_mul_overflow(numel, (uint64_t)dtypes[e->dtype].bits, &bits);
    char shape[256];
    format_shape(e, shape, sizeof shape);
    if (overflow)
        return cdl_error("%s: tensor '%s': shape %s is too large", f->path, e->name, shape);
    if (bits % 8)
        return cdl_error("%s: tensor '%s': shape %s of %s does not fill whole bytes", f->path,
                         e->name, shape, dtypes[e->dtype].name);
    if (e->end < e->begin)
        return cdl_error("%s: tensor '%s': data_offsets [%llu,%llu] end before they begin",
                         f->path, e->name, (unsigned long long)e->begin,
                         (unsigned long long)e->end);
    if (bits / 8 != e->end - e->begin)
        return cdl_error("%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets span %llu",
                         f->path, e->name, shape, dtypes[e->dtype].name,
                         (unsigned long long)(bits / 8), (unsigned long long)(e->end - e->begin));
    return 0;
}

/* Sorted by offset, the tensors must tile [0, data_bytes) exactly. */
static int check_layout(cdl_st_file *f)
{
    for (int i = 0; i < f->nt; i++)
        if (check_size(f, &f->t[i]))
            return -1;
    if (f->nt > 1)
        qsort(f->t, (size_t)f->nt, sizeof *f->t, cmp_offset);
    uint64_t pos = 0;
    for (int i = 0; i < f->nt; i++) {
        const st_entry *e = &f->t[i];
        if (e->begin > pos)
            return cdl_error("%s: tensor '%s': data_offsets start at %llu but the data before "
                             "it ends at %llu: a gap of %llu bytes", f->path, e->name,
                             (unsigned long long)e->begin, (unsigned long long)pos,
                             (unsigned long long)(e->begin - pos));
        if (e->begin < pos)
            return cdl_error("%s: tensor '%s': data_offsets [%llu,%llu] overlap tensor '%s' "
                             "ending at %llu", f->path, e->name, (unsigned long long)e->begin,
                             (unsigned long long)e->end, f->t[i - 1].name,
                             (unsigned long long)pos);
        if (e->end > f->data_bytes)
            return cdl_error("%s: the file is truncated: tensor '%s' ends at data byte %llu "
                             "but the file holds only %llu bytes of data", f->path, e->name,
                             (unsigned long long)e->end, (unsigned long long)f->data_bytes);
        pos = e->end;
    }
    if (pos != f->data_bytes)
        return cdl_error("%s: %llu trailing bytes after the last tensor's data (the tensors "
                         "end at data byte %llu of %llu): the file is corrupt", f->path,
                         (unsigned long long)(f->data_bytes - pos), (unsigned long long)pos,
                         (unsigned long long)f->data_bytes);
    return 0;
}

static int check_unique(cdl_st_file *f)
{
    int dup;
    f->by_name = sorted_index(f, f->nt, cmp_tensor_name, &dup);
    if (!f->by_name)
        return -1;
    if (dup >= 0)
        return cdl_error("%s: two tensors are named '%s'", f->path, f->t[dup].name);
    f->meta_by_key = sorted_index(f, f->nm, cmp_meta_key, &dup);
    if (!f->meta_by_key)
        return -1;
    if (dup >= 0)
        return cdl_error("%s: __metadata__ key '%s' appears twice", f->path, f->meta[dup].key);
    return 0;
}

/* ------------------------------------------------------------ data */

/* Reads up to n bytes; returns how many (less only at end of file), or -1. */
static int64_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got < ((size_t)1 << 30) ? n - got : ((size_t)1 << 30);
        ssize_t r = read(fd, (char *)buf + got, chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

/* Little-endian float32 to native, in place when the offset is 4-aligned
 * (the data buffer itself is 64-byte aligned), else into a new buffer. */
static int convert_f32(st_entry *e, unsigned char *data)
{
    size_t n = (size_t)((e->end - e->begin) / 4);
    if (!n)
        return 0;
    const unsigned char *src = data + e->begin;
    float *dst = (float *)(void *)(data + e->begin);
    if (e->begin % 4) {
        if (!(dst = cdl_malloc(n * sizeof *dst)))
            return -1;
        e->own = 1;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = src + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        float v;
        memcpy(&v, &u, 4);
        dst[i] = v;
    }
    e->f32 = dst;
    return 0;
}

/* Little-endian int64 to native, likewise (in place when 8-aligned). */
static int convert_i64(st_entry *e, unsigned char *data)
{
    size_t n = (size_t)((e->end - e->begin) / 8);
    if (!n)
        return 0;
    const unsigned char *src = data + e->begin;
    int64_t *dst = (int64_t *)(void *)(data + e->begin);
    if (e->begin % 8) {
        if (!(dst = cdl_malloc(n * sizeof *dst)))
            return -1;
        e->own = 1;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t u = 0;
        for (int b = 7; b >= 0; b--)
            u = u << 8 | src[8 * i + (size_t)b];
        int64_t v;
        memcpy(&v, &u, 8);
        dst[i] = v;
    }
    e->i64 = dst;
    return 0;
}

/* Checks the sums of checksum.h when the file carries them (files of other
 * writers, and cdl's before them, do not: checksummed stays 0). */
static int verify(cdl_st_file *f)
{
    const char *entry = cdl_st_meta_get(f, ST_CHECKSUM_KEY);
    if (!entry)
        return 0;
    uint32_t want_data, want_header;
    if (st_checksum_parse(entry, &want_data, &want_header))
        return cdl_error("%s: its checksum entry '%s' is damaged: the file is corrupt; restore "
                         "it from a copy (or start afresh)", f->path, ST_CHECKSUM_KEY);
    if (f->header_crc != want_header)
        return cdl_error("%s: the header (tensor list or metadata) does not match its checksum "
                         "(crc32 %08x, recorded %08x): the file is corrupt; restore it from a "
                         "copy (or start afresh)", f->path, (unsigned)f->header_crc,
                         (unsigned)want_header);
    uint32_t data = st_crc_bytes(0, f->data, (size_t)f->data_bytes);
    if (data != want_data)
        return cdl_error("%s: the tensor data does not match its checksum (crc32 %08x, "
                         "recorded %08x): the file is corrupt; restore it from a copy (or start "
                         "afresh)", f->path, (unsigned)data, (unsigned)want_data);
    f->checksummed = 1;
    return 0;
}

static int read_file(cdl_st_file *f, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return cdl_error("%s: cannot stat: %s", f->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cdl_error("%s: not a regular file (%s): name a checkpoint file", f->path,
                         S_ISFIFO(st.st_mode)  ? "a FIFO"
                         : S_ISDIR(st.st_mode) ? "a directory"
                                               : "a device or socket");
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8)
        return cdl_error("%s: the file is %llu bytes, too short for a safetensors header "
                         "length (8 bytes): it is truncated or not a checkpoint", f->path,
                         (unsigned long long)size);
    unsigned char len8[8];
    errno = 0;
    if (read_full(fd, len8, 8) != 8)
        return cdl_error("%s: cannot read the header length: %s", f->path,
                         errno ? strerror(errno) : "the file shrank");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    /* torch.save's formats, what PyTorch users have (nanoGPT's ckpt.pt):
     * a zip archive since PyTorch 1.6, a bare pickle before. Their bytes
     * read as a header length too long for the file ("corrupt", which they
     * are not); a length that fits is a safetensors file whatever its
     * bytes. */
    int too_long = n > CDL_ST_MAX_HEADER || n > size - 8;
    if (too_long && (!memcmp(len8, "PK\x03\x04", 4) ||
                     (len8[0] == 0x80 && len8[1] >= 2 && len8[1] <= 5)))
        return cdl_error("%s is a %s (PyTorch's torch.save writes these, e.g. nanoGPT's "
                         "ckpt.pt), not a safetensors file: save its weights as one, e.g. "
                         "python3 -c \"import torch, safetensors.torch as st; sd = torch.load("
                         "'%s', map_location='cpu'); sd = sd.get('model', sd); st.save_file({"
                         "k.removeprefix('_orig_mod.'): v.contiguous() for k, v in sd.items() "
                         "if not k.endswith('lm_head.weight')}, 'model.safetensors')\"; "
                         "for nanoGPT's GPT, the templates' pytorch/nanogpt_ckpt.py to-cdl "
                         "also keeps its sizes and meta.pkl's characters for cdl-generate "
                         "(docs/transformers.md)",
                         f->path, len8[0] == 'P' ? "zip archive" : "Python pickle", f->path);
    if (n > CDL_ST_MAX_HEADER)
        return cdl_error("%s: header length %llu exceeds the safetensors limit of %u bytes: "
                         "the file is corrupt or not a safetensors file", f->path,
                         (unsigned long long)n, CDL_ST_MAX_HEADER);
    if (n > size - 8)
        return cdl_error("%s: header length %llu exceeds the %llu bytes after the length "
                         "field: the file is truncated or not a safetensors file", f->path,
                         (unsigned long long)n, (unsigned long long)(size - 8));
    if (n < 2)
        return cdl_error("%s: header length %llu is too small for a JSON object", f->path,
                         (unsigned long long)n);
    f->data_bytes = size - 8 - n;
    if (f->data_bytes > SIZE_MAX)
        return cdl_error("%s: %llu bytes of data do not fit in memory on this system", f->path,
                         (unsigned long long)f->data_bytes);
    if (!(f->header = cdl_malloc((size_t)n)) || !(f->pool = cdl_malloc((size_t)n)))
        return -1;
    errno = 0;
    if (read_full(fd, f->header, (size_t)n) != (int64_t)n)
        return cdl_error("%s: cannot read the %llu-byte header: %s", f->path,
                         (unsigned long long)n, errno ? strerror(errno) : "the file shrank");

    parser p = {.f = f};
    json_init(&p.c, f->header, (size_t)n, f->pool, (size_t)n);
    if (parse_header(&p)) {
        if (p.nomem)
            return -1;
        if (p.tensor)
            return cdl_error("%s: tensor '%s': %s", f->path, p.tensor, p.c.err);
        return cdl_error("%s: invalid safetensors header: %s", f->path, p.c.err);
    }
    /* In header order: before check_layout sorts the tensors by offset. */
    f->header_crc = 0;
    for (int i = 0; i < f->nm; i++)
        if (strcmp(f->meta[i].key, ST_CHECKSUM_KEY) != 0)
            f->header_crc = st_crc_meta(f->header_crc, f->meta[i].key, f->meta[i].value);
    for (int i = 0; i < f->nt; i++) {
        const st_entry *e = &f->t[i];
        f->header_crc = st_crc_tensor(f->header_crc, e->name, dtypes[e->dtype].name, e->ndim,
                                      e->shape, e->begin, e->end);
    }
    if (check_unique(f) || check_layout(f))
        return -1;
    /* Read only after validation, so a corrupt header fails fast. */
    if (!(f->data = cdl_malloc((size_t)f->data_bytes)))
        return -1;
    errno = 0;
    if (read_full(fd, f->data, (size_t)f->data_bytes) != (int64_t)f->data_bytes)
        return cdl_error("%s: cannot read %llu bytes of tensor data: %s", f->path,
                         (unsigned long long)f->data_bytes,
                         errno ? strerror(errno) : "the file shrank while being read");
    if (verify(f))
        return -1;
    for (int i = 0; i < f->nt; i++)
        if ((f->t[i].dtype == DTYPE_F32 && convert_f32(&f->t[i], f->data)) ||
            (f->t[i].dtype == DTYPE_I64 && convert_i64(&f->t[i], f->data)))
            return -1;
    /* The index by name refers to positions before the offset sort. */
    sort_file = f;
    for (int i = 0; i < f->nt; i++)
        f->by_name[i] = i;
    qsort(f->by_name, (size_t)f->nt, sizeof *f->by_name, cmp_tensor_name);
    return 0;
}

/* ------------------------------------------------------------ API */

cdl_st_file *cdl_st_open(const char *path)
{
    if (!path || !*path) {
        cdl_error("cdl_st_open: the checkpoint path is empty: name a file");
        return NULL;
    }
    cdl_st_file *f = cdl_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    size_t len = strlen(path);
    if (!(f->path = cdl_malloc(len + 1))) {
        cdl_free(f);
        return NULL;
    }
    memcpy(f->path, path, len + 1);
    /* O_NONBLOCK: opening a FIFO without a writer (--init, --resume, a
     * tool's CHECKPOINT) would wait forever, and SIGTERM would not end the
     * wait (the harness catches it); read_file refuses what is not a
     * regular file, on which O_NONBLOCK changes nothing. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        cdl_error("%s: cannot open: %s%s", path, strerror(err),
                  err == ENOENT ? ": check the path (no checkpoint was written there)" : "");
        cdl_st_close(f);
        return NULL;
    }
    int rc = read_file(f, fd);
    close(fd);
    if (rc) {
        cdl_st_close(f);
        return NULL;
    }
    return f;
}

void cdl_st_close(cdl_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->nt; i++)
        if (f->t[i].own) {
            cdl_free(f->t[i].f32);
            cdl_free(f->t[i].i64);
        }
    cdl_free(f->t);
    cdl_free(f->by_name);
    cdl_free(f->meta);
    cdl_free(f->meta_by_key);
    cdl_free(f->data);
    cdl_free(f->pool);
    cdl_free(f->header);
    cdl_free(f->path);
    cdl_free(f);
}

static const st_entry *entry(const cdl_st_file *f, int i)
{
    if (!f) {
        cdl_error("safetensors: NULL file");
        return NULL;
    }
    if (i < 0 || i >= f->nt) {
        cdl_error("%s: tensor index %d out of range (the file has %d tensors)", f->path, i, f->nt);
        return NULL;
    }
    return &f->t[i];
}

int cdl_st_count(const cdl_st_file *f)
{
    return f ? f->nt : 0;
}

const char *cdl_st_name(const cdl_st_file *f, int i)
{
    const st_entry *e = entry(f, i);
    return e ? e->name : NULL;
}

int cdl_st_find(const cdl_st_file *f, const char *name)
{
    if (!f || !name)
        return -1;
    int lo = 0, hi = f->nt;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (!c)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    cdl_error("%s: no tensor named '%s'", f->path, name);
    return -1;
}

int cdl_st_shape(const cdl_st_file *f, int i, int *ndim, int64_t shape[8])
{
    const st_entry *e = entry(f, i);
    if (!e)
        return -1;
    if (ndim)
        *ndim = e->ndim;
    if (shape)
        for (int d = 0; d < ST_MAX_DIMS; d++)
            shape[d] = d < e->ndim ? e->shape[d] : 1;
    return 0;
}

const float *cdl_st_data(const cdl_st_file *f, int i, size_t *numel)
{
    static const float empty[1];
    const st_entry *e = entry(f, i);
    if (!e)
        return NULL;
    if (e->dtype != DTYPE_F32) {
        cdl_error("%s: tensor '%s' is %s: cdl reads only F32 tensors (convert with "
                  "tensor.float() before saving)", f->path, e->name, dtypes[e->dtype].name);
        return NULL;
    }
    size_t n = (size_t)((e->end - e->begin) / 4);
    if (numel)
        *numel = n;
    return n ? e->f32 : empty;
}

/* IEEE half (little-endian bits) to float: exact, subnormals, infinities
 * and NaNs included. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;            /* inf, NaN (payload kept) */
    } else if (exp) {
        u = sign | (exp + 112) << 23 | man << 13;      /* normal: rebias 15 -> 127 */
    } else {
        float v = (float)man * 0x1p-24f;              /* zero or subnormal: man * 2^-24 */
        memcpy(&u, &v, 4);
        u |= sign;
    }
    float v;
    memcpy(&v, &u, 4);
    return v;
}

int cdl_st_data_float(const cdl_st_file *f, int i, float *out, size_t numel)
{
    const st_entry *e = entry(f, i);
    if (!e)
        return -1;
    const char *dt = dtypes[e->dtype].name;
    unsigned bytes = dtypes[e->dtype].bits / 8;
    int f16 = !strcmp(dt, "F16"), bf16 = !strcmp(dt, "BF16"), f64 = !strcmp(dt, "F64");
    if (e->dtype != DTYPE_F32 && !f16 && !bf16 && !f64)
        return cdl_error("%s: tensor '%s' is %s, not a floating-point type cdl can read (F32, "
                         "F16, BF16, F64): save it with tensor.float()", f->path, e->name, dt);
    size_t n = (size_t)((e->end - e->begin) / bytes);
    if (n != numel)
        return cdl_error("%s: tensor '%s' holds %zu values, expected %zu", f->path, e->name, n,
                         numel);
    const unsigned char *src = f->data + e->begin;
    for (size_t k = 0; k < n; k++) {
        const unsigned char *b = src + (size_t)bytes * k;
        if (e->dtype == DTYPE_F32) {
            out[k] = e->f32[k];
        } else if (f16) {
            out[k] = half_to_float((uint16_t)(b[0] | b[1] << 8));
        } else if (bf16) {
            uint32_t u = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 24;   /* float's top half */
            memcpy(&out[k], &u, 4);
        } else {
            uint64_t u = 0;
            for (int j = 7; j >= 0; j--)
                u = u << 8 | b[j];
            double d;
            memcpy(&d, &u, 8);
            /* Rounded to nearest, as tensor.float(); a finite value float
             * cannot hold would become inf and poison training. */
            if (isfinite(d) && fabs(d) > FLT_MAX)
                return cdl_error("%s: tensor '%s' holds %g at index %zu, beyond float32's "
                                 "range: the weights cannot be used as float32", f->path,
                                 e->name, d, k);
            out[k] = (float)d;
        }
    }
    return 0;
}

const int64_t *cdl_st_data_i64(const cdl_st_file *f, int i, size_t *numel)
{
    static const int64_t empty[1];
    const st_entry *e = entry(f, i);
    if (!e)
        return NULL;
    if (e->dtype != DTYPE_I64) {
        cdl_error("%s: tensor '%s' is %s where I64 (int64) is expected", f->path, e->name,
                  dtypes[e->dtype].name);
        return NULL;
    }
    size_t n = (size_t)((e->end - e->begin) / 8);
    if (numel)
        *numel = n;
    return n ? e->i64 : empty;
}

const char *cdl_st_dtype(const cdl_st_file *f, int i)
{
    const st_entry *e = entry(f, i);
    return e ? dtypes[e->dtype].name : NULL;
}

const char *cdl_st_meta_get(const cdl_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    int lo = 0, hi = f->nm;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const st_kv *kv = &f->meta[f->meta_by_key[mid]];
        int c = strcmp(kv->key, key);
        if (!c)
            return kv->value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int cdl_st_meta_count(const cdl_st_file *f)
{
    return f ? f->nm : 0;
}

const char *cdl_st_meta_key(const cdl_st_file *f, int i)
{
    if (!f || i < 0 || i >= f->nm) {
        cdl_error("%s: metadata index %d out of range", f ? f->path : "safetensors", i);
        return NULL;
    }
    return f->meta[i].key;
}

const char *cdl_st_path(const cdl_st_file *f)
{
    return f ? f->path : NULL;
}

int cdl_st_checksummed(const cdl_st_file *f)
{
    return f ? f->checksummed : 0;
}
