/* Helpers of the kernel tests (test_kernels.c, test_kernels_net.c): values
 * held in float (for a backend) and double (for ref_ops.c), normalised
 * comparison, and central finite differences in double precision. */
#ifndef CDL_TESTS_KERNEL_TESTUTIL_H
#define CDL_TESTS_KERNEL_TESTUTIL_H

#include "testutil.h"

#include <math.h>

#include <cdl/cdl.h>

#include "lib/core/rng.h"

/* The same values in float (for the backend) and double (for the reference). */
typedef struct pair {
    float *f;
    double *d;
    size_t n;
} pair;

static inline pair pair_new(size_t n)
{
    pair p = {cdl_calloc(n ? n : 1, sizeof(float)), cdl_calloc(n ? n : 1, sizeof(double)), n};
    assert_non_null(p.f);
    assert_non_null(p.d);
    return p;
}

/* Uniform in [lo,hi), rounded to float so both copies hold the same value. */
static inline pair pair_rand(size_t n, uint64_t seed, double lo, double hi)
{
    pair p = pair_new(n);
    rng_state r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        p.f[i] = (float)(lo + (hi - lo) * rng_uniform(&r));
        p.d[i] = p.f[i];
    }
    return p;
}

/* Distinct values (a shuffled ramp spaced 1/n apart) for ops with kinks at
 * ties (max pooling): finite differences stay away from them. */
static inline pair pair_distinct(size_t n, uint64_t seed)
{
    pair p = pair_new(n);
    rng_state r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        p.d[i] = (double)i / (double)n - 0.5;
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(&r, i);
        double t = p.d[i - 1];
        p.d[i - 1] = p.d[j];
        p.d[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        p.f[i] = (float)p.d[i];
        p.d[i] = p.f[i];
    }
    return p;
}

static inline void pair_free(pair *p)
{
    cdl_free(p->f);
    cdl_free(p->d);
}

static inline void check_close(const char *what, const float *a, const double *b, size_t n,
                               double tol)
{
    double e = test_norm_err(a, b, n);
    if (!(e <= tol)) {
        print_error("%s: normalised error %.3g > %.3g\n", what, e, tol);
        fail();
    }
}

static inline double dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Central differences of loss(ctx) = <r, op(param)> against `analytic`,
 * over every entry of param (the shapes here are small). */
typedef double (*loss_fn)(void *ctx);

static inline void fd_check(const char *what, loss_fn loss, void *ctx, double *param, size_t n,
                            const double *analytic)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = param[i];
        param[i] = keep + h;
        double lp = loss(ctx);
        param[i] = keep - h;
        double lm = loss(ctx);
        param[i] = keep;
        double num = (lp - lm) / (2 * h);
        double scale = fabs(num) > 1.0 ? fabs(num) : 1.0;
        if (fabs(num - analytic[i]) > 1e-6 * scale) {
            print_error("%s[%zu]: finite difference %.10g, analytic %.10g\n", what, i, num,
                        analytic[i]);
            fail();
        }
    }
}

static inline cdl_backend *test_cpu_backend(int threads)
{
    cdl_backend *be = cdl_backend_cpu_create(threads);
    assert_non_null(be);
    assert_int_equal(be->threads, threads);
    assert_true(be->host_memory);
    return be;
}

#endif
