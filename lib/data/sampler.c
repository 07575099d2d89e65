/* Which samples a rank sees in an epoch (PyTorch's DistributedSampler).
 *
 * Every rank computes the same order of 0..n-1 for the epoch; the order is
 * then read with wrap-around, position p meaning order[p % n], and rank r
 * takes the positions r, r+world, r+2*world, ... With padding every rank
 * takes ceil(n/world) of them (the wrapped tail repeats the first samples of
 * the order, so all ranks run the same number of steps); without it
 * (validation) only the positions below n, so each sample is seen once.
 */
#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/data/internal.h"

void sampler_order(int32_t *order, int n, int shuffle, uint64_t seed, int epoch)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    rng_state r;
    rng_seed2(&r, seed, (uint64_t)epoch);
    for (int i = n - 1; i > 0; i--) {   /* Fisher-Yates */
        int j = (int)rng_below(&r, (uint64_t)i + 1);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

long sampler_count(long n, int rank, int world, int pad)
{
    if (pad)
        return (n + world - 1) / world;
    return rank < n ? (n - rank + world - 1) / world : 0;
}
