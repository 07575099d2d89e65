/* Reader of the PyTorch reference files in tests/fixtures (*.fix, made by
 * tests/fixtures/make_fixtures.py; format in tests/fixtures/README.md). */
#ifndef CDL_TESTS_FIXTURE_H
#define CDL_TESTS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

enum { FIX_F32 = 0, FIX_I32 = 1, FIX_U8 = 2 };

typedef struct fixture_rec {
    char *name;
    int dtype, ndim;
    int64_t dims[8];
    size_t numel;
    void *data;          /* numel values of dtype, 64-byte aligned */
} fixture_rec;

typedef struct fixture {
    int count;
    fixture_rec *recs;
} fixture;

/* Loads <rel> (e.g. "tests/fixtures/lenet.fix", under $top_srcdir); fails the running test on error. */
fixture *fixture_load(const char *rel);
void fixture_free(fixture *f);

/* The record `name`; fails the test if it is missing, of another dtype or
 * (numel != 0) of another size. */
const fixture_rec *fixture_get(const fixture *f, const char *name, int dtype, size_t numel);
const float *fixture_f32(const fixture *f, const char *name, size_t numel);
const int32_t *fixture_i32(const fixture *f, const char *name, size_t numel);
/* 1 if the record exists. */
int fixture_has(const fixture *f, const char *name);

#endif
