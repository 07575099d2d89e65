/* Shared helpers for cmocka unit tests. */
#ifndef CDL_TESTUTIL_H
#define CDL_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Path of a file under the source tree's tests/ folder (top_srcdir is set by
 * make check; default "." for running a test binary by hand from the top). */
static inline const char *test_path(const char *rel, char *buf, size_t len)
{
    const char *top = getenv("top_srcdir");
    snprintf(buf, len, "%s/%s", top && *top ? top : ".", rel);
    return buf;
}

/* Sizes for the slow tests: make check-valgrind sets CDL_TEST_SMALL=1, and
 * there the same cases run at smaller sizes (fewer samples, steps or
 * elements, chosen to keep every code path the full size takes); the
 * plain, clang and sanitizer passes run the full sizes. */
static inline long test_size(long full, long small)
{
    const char *s = getenv("CDL_TEST_SMALL");
    return s && *s && *s != '0' ? small : full;
}

/* Max |a-b| / max(1, max|b|): the normalised error used to compare ops. */
static inline double test_norm_err(const float *a, const double *b, size_t n)
{
    double maxdiff = 0, maxref = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > maxdiff)
            maxdiff = d;
        if (fabs(b[i]) > maxref)
            maxref = fabs(b[i]);
    }
    return maxdiff / maxref;
}

static inline int test_rm_entry(const char *path, const struct stat *st, int type,
                                struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* Removes dir and everything below it without following links (a test's
 * temporary tree); 0 on success. No shell: a path with a quote is safe. */
static inline int test_rm_rf(const char *dir)
{
    return nftw(dir, test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes a fresh private directory /tmp/cdl-test-STEM-XXXXXX into buf (a
 * test's temporary tree, removed with test_rm_rf); 0 on success. */
static inline int test_mkdtemp(char *buf, size_t len, const char *stem)
{
    snprintf(buf, len, "/tmp/cdl-test-%s-XXXXXX", stem);
    return mkdtemp(buf) ? 0 : -1;
}

/* A test file's CPU backend `be` (2 threads), shared by its whole group:
 * TEST_CPU_BACKEND_GROUP() at file scope (after <cdl/cdl.h>), then
 * cmocka_run_group_tests(tests, backend_setup, backend_teardown). */
#define TEST_CPU_BACKEND_GROUP()                                                                   \
    static cdl_backend *be;                                                                        \
    static int backend_setup(void **state)                                                         \
    {                                                                                              \
        (void)state;                                                                               \
        be = cdl_backend_cpu_create(2);                                                            \
        return be ? 0 : -1;                                                                        \
    }                                                                                              \
    static int backend_teardown(void **state)                                                      \
    {                                                                                              \
        (void)state;                                                                               \
        cdl_backend_destroy(be);                                                                   \
        return 0;                                                                                  \
    }

#endif
