/* A small seeded generator (splitmix64 seeding xoshiro256**), shared by model
 * initialisation, shuffling and synthetic data. Same seed -> same stream on
 * every machine; the state is four words, trivially saved in a checkpoint. */
#ifndef CDL_CORE_RNG_H
#define CDL_CORE_RNG_H

#include <stdint.h>

typedef struct rng_state {
    uint64_t s[4];
} rng_state;

static inline uint64_t rng_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Seeds from one or two words (e.g. seed and epoch). */
static inline void rng_seed2(rng_state *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&x);
}

static inline void rng_seed(rng_state *r, uint64_t seed)
{
    rng_seed2(r, seed, 0);
}

static inline uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(rng_state *r)
{
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0,1) with 53 random bits. */
static inline double rng_uniform(rng_state *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0,n), unbiased (Lemire's method). n > 0. */
static inline uint64_t rng_below(rng_state *r, uint64_t n)
{
    __uint128_t m = (__uint128_t)rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t threshold = -n % n;
        while (lo < threshold) {
            m = (__uint128_t)rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif
