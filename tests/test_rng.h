/* Random test data from one generator: the library's own (lib/core/rng.h,
 * xoshiro256** seeded by splitmix64), so every test program draws its inputs
 * the same way on every machine and none carries a copy of a generator. */
#ifndef CDL_TEST_RNG_H
#define CDL_TEST_RNG_H

#include "core/rng.h"

/* Uniform in [lo, hi). */
static inline double test_uniform(rng_state *r, double lo, double hi)
{
    return lo + (hi - lo) * rng_uniform(r);
}

#endif
