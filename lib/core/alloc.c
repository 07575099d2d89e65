/* Aligned allocation with a counter, so tests can prove that a training step
 * allocates nothing. */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/core/memlimit.h"

static atomic_uint_fast64_t alloc_count;
/* Bytes of the live blocks of MEMORY_CHECK_MIN or more (malloc_usable_size
 * at allocation and at cdl_free): what the process has committed to,
 * touched or not yet (cdl_malloc does not zero). */
static atomic_size_t committed;

static size_t big_size(void *p)
{
    size_t n = p ? malloc_usable_size(p) : 0;
    return n >= MEMORY_CHECK_MIN ? n : 0;
}

void *cdl_malloc(size_t bytes)
{
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    size_t held, limit;
    /* Under a cgroup memory limit (sbatch --mem) malloc does not fail: the
     * kernel kills the process when the pages are touched, with no word of
     * why. A block that cannot fit is refused here instead, so the model's
     * and the loader's buffers, all allocated before the first step, fail
     * with a message before training starts. */
    if (rounded >= bytes &&
        memory_would_exceed(rounded, atomic_load(&committed), &held, &limit)) {
        int ranks = memory_share_ranks();
        char share[80] = "";
        if (ranks > 1)
            snprintf(share, sizeof share, ", shared by the %d ranks on this node", ranks);
        cdl_error("out of memory allocating %.1f MB: this process holds %.1f MB of the %.1f MB "
                  "it may use (the node's memory or the job's memory limit%s): reduce "
                  "--batch-size or the model size, or ask for more memory (sbatch --mem)",
                  bytes / 1e6, held / 1e6, limit / 1e6, share);
        return NULL;
    }
    if (rounded < bytes || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        cdl_error("out of memory allocating %zu bytes: reduce --batch-size or the model size", bytes);
        return NULL;
    }
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    atomic_fetch_add(&committed, big_size(p));
    return p;
}

void *cdl_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        cdl_error("allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = cdl_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void cdl_free(void *p)
{
    size_t n = big_size(p), c = atomic_load(&committed);
    /* Never below 0 (a block not from cdl_malloc handed to cdl_free). */
    while (n && !atomic_compare_exchange_weak(&committed, &c, c > n ? c - n : 0)) {
    }
    free(p);
}

uint64_t cdl_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}
