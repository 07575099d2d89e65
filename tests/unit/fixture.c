/* Reader of the tests/fixtures .fix files (little-endian; layout in README.md there). */
#include "testutil.h"

#include <string.h>

#include "fixture.h"

static const char magic[8] = {'C', 'D', 'L', 'F', 'I', 'X', '1', '\n'};

typedef struct reader {
    const char *path;
    FILE *f;
} reader;

static uint32_t read_u32(reader *r)
{
    unsigned char b[4];
    if (fread(b, 1, 4, r->f) != 4)
        fail_msg("%s: truncated fixture file: rerun tests/fixtures/make_fixtures.py", r->path);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

fixture *fixture_load(const char *rel)
{
    char path[4096], head[8];
    reader r = {test_path(rel, path, sizeof path), NULL};
    r.f = fopen(path, "rb");
    if (!r.f)
        fail_msg("cannot open fixture %s (run make check, or set top_srcdir)", path);
    if (fread(head, 1, 8, r.f) != 8 || memcmp(head, magic, 8))
        fail_msg("%s: not a cdl fixture file", path);
    fixture *f = calloc(1, sizeof *f);
    f->count = (int)read_u32(&r);
    f->recs = calloc((size_t)f->count, sizeof *f->recs);
    for (int i = 0; i < f->count; i++) {
        fixture_rec *rec = &f->recs[i];
        uint32_t len = read_u32(&r);
        rec->name = calloc(1, len + 1);
        if (fread(rec->name, 1, len, r.f) != len)
            fail_msg("%s: truncated record name", path);
        rec->dtype = (int)read_u32(&r);
        rec->ndim = (int)read_u32(&r);
        if (rec->dtype < FIX_F32 || rec->dtype > FIX_U8 || rec->ndim > 8)
            fail_msg("%s: record %s has dtype %d, %d dims", path, rec->name, rec->dtype, rec->ndim);
        rec->numel = 1;
        for (int d = 0; d < rec->ndim; d++) {
            rec->dims[d] = read_u32(&r);
            rec->numel *= (size_t)rec->dims[d];
        }
        size_t bytes = rec->numel * (rec->dtype == FIX_U8 ? 1 : 4);
        if (posix_memalign(&rec->data, 64, bytes + 1))
            fail_msg("out of memory reading %s", path);
        if (fread(rec->data, 1, bytes, r.f) != bytes)
            fail_msg("%s: truncated data of %s", path, rec->name);
        ((char *)rec->data)[bytes] = '\0';   /* u8 records read as text */
    }
    fclose(r.f);
    return f;
}

void fixture_free(fixture *f)
{
    for (int i = 0; i < f->count; i++) {
        free(f->recs[i].name);
        free(f->recs[i].data);
    }
    free(f->recs);
    free(f);
}

int fixture_has(const fixture *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->recs[i].name, name))
            return 1;
    return 0;
}

const fixture_rec *fixture_get(const fixture *f, const char *name, int dtype, size_t numel)
{
    for (int i = 0; i < f->count; i++) {
        const fixture_rec *rec = &f->recs[i];
        if (strcmp(rec->name, name))
            continue;
        if (rec->dtype != dtype || (numel && rec->numel != numel))
            fail_msg("fixture record %s: dtype %d with %zu values, want dtype %d with %zu", name,
                     rec->dtype, rec->numel, dtype, numel);
        return rec;
    }
    fail_msg("fixture record %s is missing: rerun tests/fixtures/make_fixtures.py", name);
    return NULL;
}

const float *fixture_f32(const fixture *f, const char *name, size_t numel)
{
    return fixture_get(f, name, FIX_F32, numel)->data;
}

const int32_t *fixture_i32(const fixture *f, const char *name, size_t numel)
{
    return fixture_get(f, name, FIX_I32, numel)->data;
}
