/* Timing helpers the CPU benchmarks share. */
#ifndef CDL_BENCH_UTIL_H
#define CDL_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and gives its median, min and max. */
static inline void bench_stats(double *v, int n, double out[3])
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    out[0] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    out[1] = v[0];
    out[2] = v[n - 1];
}

#endif
